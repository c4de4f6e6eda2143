//! Bad usage is found before anything connects, and is always status 2 with the
//! subcommand's usage: every value the library or the server would refuse without looking at
//! the locks (empty or over-long names, TTLs out of range, database and collection names),
//! durations as typed (a negative one gets a message of its own), and a COMMAND given without
//! `--`. A refused value is quoted with its first 40 characters at most. The help texts give
//! the limits, and say the TTL limit the way the messages do.

mod common;

use common::{mongolock_offline as mongolock, text};

/// Nothing listens here: a command that connected before checking would say so instead.
const NOBODY: &str = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300";

/// Runs `mongolock --uri NOBODY ARGS...` and checks that it is a usage error (status 2)
/// whose stderr has every one of `words` and no sign of a connection; returns stderr.
fn refused(args: &[&str], words: &[&str]) -> String {
    let mut all = vec!["--uri", NOBODY];
    all.extend_from_slice(args);
    let output = mongolock(&all);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    for word in words {
        assert!(stderr.contains(word), "{args:?}: {word:?} in {stderr}");
    }
    assert!(
        !stderr.contains("cannot reach"),
        "{args:?} connected first: {stderr}"
    );
    assert!(stderr.contains("try '--help'"), "{args:?}: {stderr}");
    stderr
}

#[test]
fn ttls_out_of_range_are_bad_usage() {
    let exec = |ttl: &str| {
        vec![
            "exec".to_owned(),
            "--resource".to_owned(),
            "r".to_owned(),
            "--ttl".to_owned(),
            ttl.to_owned(),
            "--".to_owned(),
            "true".to_owned(),
        ]
    };
    for (ttl, words) in [
        ("0", &["--ttl", "longer than zero"][..]),
        ("0s", &["--ttl", "longer than zero"]),
        ("10ms", &["--ttl 10ms is too short", "50ms"]),
        (
            "100y",
            &["longer than the limit, 36500d (100 years of 365 days)"],
        ),
        ("abc", &["--ttl", "such as 30s"]),
    ] {
        let args = exec(ttl);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&args, words);
    }
    refused(
        &[
            "elect", "--name", "n", "--value", "v", "--ttl", "0s", "--", "true",
        ],
        &["--ttl", "longer than zero"],
    );
    refused(
        &[
            "exec",
            "--resource",
            "r",
            "--lock-delay",
            "36501d",
            "--",
            "true",
        ],
        &["--lock-delay", "36500d"],
    );
    // 36500d itself is taken (the command then fails to connect, status 1).
    let output = mongolock(&[
        "--uri",
        NOBODY,
        "exec",
        "--resource",
        "r",
        "--ttl",
        "36500d",
        "--",
        "true",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
}

#[test]
fn a_negative_duration_gets_our_message_not_a_tip_about_dashes() {
    for args in [
        &["exec", "--resource", "r", "--ttl", "-5s", "--", "true"][..],
        &["exec", "--resource", "r", "--wait", "-1m", "--", "true"],
        &[
            "elect",
            "--name",
            "n",
            "--value",
            "v",
            "--kill-after",
            "-1s",
            "--",
            "true",
        ],
    ] {
        let stderr = refused(args, &["cannot be negative"]);
        assert!(!stderr.contains("tip: to pass"), "{stderr}");
    }
}

#[test]
fn long_values_are_refused_with_a_short_prefix() {
    let long = "x".repeat(20 * 1024);
    for args in [
        vec!["exec", "--resource", &long, "--", "true"],
        vec!["status", "--resource", &long],
        vec!["release", "--resource", &long, "--force"],
        vec!["unlock", "--lock-id", &long],
        vec!["leader", "--name", &long],
        vec!["elect", "--name", &long, "--value", "v", "--", "true"],
    ] {
        let stderr = refused(&args, &["is 20480 bytes long; the limit is 512 bytes", "…"]);
        assert!(stderr.len() < 400, "{} bytes: {stderr}", stderr.len());
        assert!(
            stderr.contains(&format!("\"{}…\"", "x".repeat(40))),
            "{stderr}"
        );
    }
    let label = "o".repeat(mongolock::MAX_LABEL_LEN + 1);
    for args in [
        vec!["exec", "--resource", "r", "--owner", &label, "--", "true"],
        vec!["status", "--owner", &label],
        vec!["elect", "--name", "n", "--value", &label, "--", "true"],
    ] {
        let stderr = refused(&args, &["the limit is 1024 bytes"]);
        assert!(stderr.len() < 400, "{} bytes: {stderr}", stderr.len());
    }
    for args in [
        vec!["exec", "--resource", "", "--", "true"],
        vec!["status", "--resource", ""],
        vec!["status", "--lock-id", ""],
        vec!["exec", "--resource", "r", "--lock-id", "", "--", "true"],
        vec!["elect", "--name", "n", "--value", "", "--", "true"],
    ] {
        refused(&args, &["must not be empty"]);
    }
}

#[test]
fn the_limits_are_in_the_help() {
    let help = text(&mongolock(&["exec", "--help"]).stdout);
    for words in [
        "1 to 512 bytes",
        "at most 1024 bytes",
        "from 50ms to 36500d",
    ] {
        assert!(help.contains(words), "{words:?} in {help}");
    }
}

#[test]
fn database_and_collection_names_the_server_refuses_are_refused_everywhere() {
    for args in [
        &["--db", "a.b", "status"][..],
        &["--db", "a.b", "exec", "--resource", "r", "--", "true"],
        &["--db", "a.b", "purge"],
        &["--db", "a b", "indexes"],
        &["--db", "", "status"],
    ] {
        refused(args, &["--db"]);
    }
    for args in [
        &["--collection", "a$b", "status"][..],
        &["--collection", "system.locks", "unlock", "--lock-id", "x"],
        &["--collection", "", "status"],
    ] {
        refused(args, &["--collection"]);
    }
    // Where no server is used, the names do not matter.
    let output = mongolock(&["--db", "a.b", "completions", "bash"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
}

#[test]
fn a_command_without_dashes_before_it_gets_a_tip() {
    let stderr = refused(
        &["exec", "--resource", "r", "sleep", "60"],
        &["unexpected argument 'sleep'"],
    );
    assert!(
        stderr.contains("tip: put -- before the command to run: mongolock exec [OPTIONS] -- sleep"),
        "{stderr}"
    );
    refused(
        &["elect", "--name", "n", "--value", "v", "./lead.sh"],
        &["put -- before the command"],
    );
}

#[test]
fn the_usage_line_does_not_show_the_uri_the_environment_gives() {
    let output = assert_cmd::Command::cargo_bin("mongolock")
        .expect("the binary is built")
        .env("MONGODB_URI", NOBODY)
        .args(["exec", "--resource", "r"])
        .output()
        .expect("mongolock runs");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Usage: mongolock exec"), "{stderr}");
    assert!(!stderr.contains("--uri"), "{stderr}");
}

#[test]
fn commands_without_a_server_do_not_offer_its_options() {
    for page in ["completions", "man"] {
        let help = text(&mongolock(&[page, "--help"]).stdout);
        let manual = text(&mongolock(&["man", page]).stdout);
        for option in ["--uri", "--db", "--collection", "--connect-timeout"] {
            assert!(
                !help.contains(option),
                "{page} --help offers {option}: {help}"
            );
            let listed = format!("\\fB{}\\fR", option.replace('-', "\\-"));
            assert!(
                !manual.contains(&listed),
                "man {page} offers {option}: {manual}"
            );
        }
    }
    let script = text(&mongolock(&["completions", "bash"]).stdout);
    let completions = script
        .split("mongolock__subcmd__completions)")
        .nth(1)
        .and_then(|rest| rest.lines().nth(1))
        .expect("the completions subcommand is completed");
    assert!(!completions.contains("--uri"), "{completions}");
    // The others still offer them.
    let help = text(&mongolock(&["status", "--help"]).stdout);
    assert!(help.contains("--uri"), "{help}");
}
