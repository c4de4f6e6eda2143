//! `mongolock man [SUBCOMMAND]` prints a manual page in roff, generated from the command's
//! own definitions: mongolock(1) names the command and lists every subcommand, each
//! subcommand has a page of its own with its options, both end with the exit statuses, and
//! groff reads them without a warning.

mod common;

use common::{SUBCOMMANDS, mongolock_offline as mongolock, text};

/// The page `args` print, after checking that it was printed with status 0 and nothing on
/// stderr.
fn page(args: &[&str]) -> String {
    let output = mongolock(args);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(output.stderr.is_empty(), "{}", text(&output.stderr));
    text(&output.stdout)
}

#[test]
fn the_page_names_the_command_and_its_subcommands() {
    let page = page(&["man"]);
    assert!(page.contains("\n.TH mongolock 1 "), "a roff title: {page}");
    for section in [".SH NAME", ".SH SYNOPSIS", ".SH OPTIONS", ".SH SUBCOMMANDS"] {
        assert!(page.contains(section), "{section}: {page}");
    }
    assert!(
        page.contains("mongolock \\- Distributed locks stored in MongoDB"),
        "the NAME line: {page}"
    );
    for subcommand in SUBCOMMANDS {
        assert!(
            page.contains(&format!("mongolock\\-{subcommand}(1)")),
            "{subcommand} is listed: {page}"
        );
    }
    assert!(
        !page.contains("mongolock\\-help(1)"),
        "no help page: {page}"
    );
    assert!(page.contains("\\fB\\-\\-uri\\fR"), "the options: {page}");
}

#[test]
fn every_page_ends_with_the_exit_statuses() {
    for args in [&["man"][..], &["man", "exec"]] {
        let page = page(args);
        let section = page
            .split(".SH \"EXIT STATUS\"")
            .nth(1)
            .unwrap_or_else(|| panic!("{args:?}: an EXIT STATUS section: {page}"));
        for status in ["75", "78", "79", "80", "128+N"] {
            assert!(section.contains(status), "{args:?}: {status} in {section}");
        }
    }
}

#[test]
fn every_subcommand_has_a_page_with_its_options() {
    for subcommand in SUBCOMMANDS {
        let page = page(&["man", subcommand]);
        assert!(
            page.contains(&format!("\n.TH mongolock-{subcommand} 1 ")),
            "{subcommand}: {page}"
        );
        assert!(
            page.contains(&format!("\\fBmongolock {subcommand}\\fR")),
            "{subcommand}'s synopsis: {page}"
        );
    }
    let exec = page(&["man", "exec"]);
    for option in [
        "\\-\\-resource",
        "\\-\\-kill\\-after",
        "MONGOLOCK_FENCING_TOKEN",
    ] {
        assert!(exec.contains(option), "{option} in {exec}");
    }
}

/// groff formats every page without a warning. Skipped where groff is not installed.
#[test]
fn groff_reads_every_page_without_a_warning() {
    if std::process::Command::new("groff")
        .arg("--version")
        .output()
        .is_err()
    {
        common::skipped(
            "groff_reads_every_page_without_a_warning",
            "groff is not installed",
        );
        return;
    }
    let pages = std::iter::once(None).chain(SUBCOMMANDS.iter().copied().map(Some));
    for subcommand in pages {
        let mut args = vec!["man"];
        args.extend(subcommand);
        let roff = page(&args);
        let path = std::env::temp_dir().join(format!(
            "mongolock-man-{}-{}.1",
            std::process::id(),
            subcommand.unwrap_or("mongolock")
        ));
        std::fs::write(&path, roff).expect("the page is written");
        let output = std::process::Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(&path)
            .output()
            .expect("groff runs");
        let _ = std::fs::remove_file(&path);
        assert!(
            output.status.success() && output.stderr.is_empty(),
            "{args:?}: {}",
            text(&output.stderr)
        );
    }
}

#[test]
fn an_unknown_page_is_a_usage_error() {
    let output = mongolock(&["man", "frobnicate"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        output.stdout.is_empty(),
        "no page: {}",
        text(&output.stdout)
    );
    for words in ["no page for \"frobnicate\"", "exec", "Usage: mongolock man"] {
        assert!(stderr.contains(words), "{words:?} in {stderr}");
    }
}
