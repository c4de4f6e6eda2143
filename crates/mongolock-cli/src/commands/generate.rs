//! `mongolock completions` and `mongolock man`: shell completion scripts and manual pages,
//! generated from the clap definitions in `cli.rs` (so they list exactly the subcommands and
//! options the command takes).

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use clap_mangen::roff::{Roff, roman};

use crate::cli::{self, CompletionsArgs, ManArgs};

/// Prints the completion script for the shell asked for (clap's `help` subcommand
/// included: it is one the command takes; the server's options not offered where no server
/// is used).
pub fn completions(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut command = cli::completion_definitions();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "mongolock", &mut script);
    print(&script).context("cannot write the completion script")
}

/// Prints mongolock(1), or the page of the subcommand asked for (`Cli::check` has made sure
/// it names one).
pub fn man(args: &ManArgs) -> anyhow::Result<ExitCode> {
    let command = cli::definitions();
    let page = match &args.subcommand {
        None => command,
        Some(name) => command
            .find_subcommand(name)
            .cloned()
            .with_context(|| format!("no subcommand {name:?}"))?,
    };
    let roff = render(page).context("cannot render the manual page")?;
    print(&roff).context("cannot write the manual page")
}

/// The manual page of `page`: clap_mangen's sections, in its order, with the exit statuses
/// of `--help` as an EXIT STATUS section (clap_mangen would call it EXTRA, and only on the
/// top page).
fn render(page: clap::Command) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(page.clone())
        .source(format!("mongolock {}", env!("CARGO_PKG_VERSION")))
        .manual("User Commands");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    if page.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
    }
    exit_status().to_writer(&mut out)?;
    if page.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    Ok(out)
}

/// The EXIT STATUS section: the table at the end of `mongolock --help`, as it is laid out.
fn exit_status() -> Roff {
    let table = cli::AFTER_HELP;
    let table = table.strip_prefix("Exit status:\n").unwrap_or(table);
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]).control("nf", []);
    for line in table.lines() {
        roff.text([roman(line)]);
    }
    roff.control("fi", []);
    roff
}

/// Writes `bytes` to stdout. A reader that stops early (`| head`) is not an error.
fn print(bytes: &[u8]) -> std::io::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(error),
        _ => Ok(ExitCode::SUCCESS),
    }
}
