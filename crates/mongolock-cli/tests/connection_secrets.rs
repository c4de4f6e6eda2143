//! The command never prints any part of a connection string's user info: not when the
//! string does not parse, not when the server cannot be reached or refuses the credentials,
//! not in its logs (`-vvv`), whichever subcommand runs and whether the string comes from
//! `--uri` or `MONGODB_URI`.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{Env, text};

/// A connection string and the pieces of its user info that must never be printed.
struct Case {
    /// The connection string.
    uri: String,
    /// What must not appear on stdout or stderr.
    secrets: &'static [&'static str],
    /// Whether the string does not parse (the message then shows it with its user info
    /// redacted).
    malformed: bool,
}

impl Case {
    fn malformed(uri: &str, secrets: &'static [&'static str]) -> Case {
        Case {
            uri: uri.to_owned(),
            secrets,
            malformed: true,
        }
    }
}

/// Connection strings that do not parse, each with a user info the driver's own message
/// would quote some of.
fn malformed() -> Vec<Case> {
    vec![
        // The driver cuts at the first '?': `alice:S3cret` becomes a host with a bad port.
        Case::malformed(
            "mongodb://alice:S3cret?Pw0rd@127.0.0.1:1/",
            &["S3cret", "Pw0rd"],
        ),
        // ... and `S3cretPw0rd@127.0.0.1:1/` an option that is not `key=value`.
        Case::malformed(
            "mongodb://alice:1234?S3cretPw0rd@127.0.0.1:1/",
            &["S3cret", "Pw0rd", "1234?"],
        ),
        Case::malformed(
            "mongodb://alice:Pa55:w0rd?Xy@127.0.0.1:1/",
            &["Pa55", "w0rd"],
        ),
        Case::malformed(
            "mongodb://alice:Pa55/w0rdXy@127.0.0.1:1/",
            &["Pa55", "w0rdXy"],
        ),
        Case::malformed(
            "mongodb://alice:Pa55@w0rdXy@127.0.0.1:1/",
            &["Pa55", "w0rdXy"],
        ),
        Case::malformed(
            "mongodb://alice:Pa55%zzw0rdXy@127.0.0.1:1/",
            &["Pa55", "w0rdXy"],
        ),
        // A percent-escaped '?' parses; an unknown mechanism does not.
        Case::malformed(
            "mongodb://alice:S3cret%3FPw0rd@127.0.0.1:1/?authMechanism=BOGUS",
            &["S3cret", "Pw0rd"],
        ),
        Case::malformed(
            "mongodb+srv://alice:S3cret?Pw0rd@cluster0.example.invalid/",
            &["S3cret", "Pw0rd"],
        ),
        // A '?' in the user name: the rest becomes the options.
        Case::malformed(
            "mongodb://al?iceUser:S3cretPw0rd@127.0.0.1:1/",
            &["iceUser", "S3cret", "Pw0rd"],
        ),
    ]
}

/// How the command gets the connection string.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// `--uri`.
    Flag,
    /// `MONGODB_URI`.
    Env,
}

/// Every subcommand that connects, with arguments that get it as far as connecting.
const COMMANDS: &[&[&str]] = &[
    &["exec", "--resource", "r", "--no-wait", "--", "true"],
    &["exec", "--resource", "r", "--wait", "1s", "--", "true"],
    &[
        "elect",
        "--name",
        "e",
        "--value",
        "v",
        "--no-wait",
        "--",
        "true",
    ],
    &["leader", "--name", "e"],
    &["status"],
    &["release", "--resource", "r", "--force", "--yes"],
    &["unlock", "--lock-id", "some-id"],
    &["purge"],
    &["indexes"],
    &["demo", "--seconds", "1", "--workers", "3"],
];

/// Runs `mongolock [-vvv] ARGS...` with `uri` given `via`.
fn mongolock(uri: &str, via: Via, verbose: bool, args: &[&str]) -> Output {
    let mut cmd = assert_cmd::Command::cargo_bin("mongolock").expect("the binary is built");
    cmd.env_remove("MONGODB_URI")
        .env_remove("RUST_LOG")
        .timeout(Duration::from_secs(60));
    match via {
        Via::Flag => {
            cmd.args(["--uri", uri]);
        }
        Via::Env => {
            cmd.env("MONGODB_URI", uri);
        }
    }
    if verbose {
        cmd.arg("-vvv");
    }
    cmd.args(args);
    cmd.output().expect("mongolock runs")
}

/// Every way `cases` can be run, each checked: no secret on stdout or stderr, and status 1.
/// Returns what was wrong, one line per run.
fn check_all(cases: &[Case], commands: &[&[&str]]) -> Vec<String> {
    let mut wrong = Vec::new();
    for case in cases {
        for args in commands {
            for via in [Via::Flag, Via::Env] {
                for verbose in [false, true] {
                    let output = mongolock(&case.uri, via, verbose, args);
                    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
                    let run = format!("{} via {via:?} -v={verbose} {args:?}", case.uri);
                    for secret in case.secrets {
                        if stdout.contains(secret) || stderr.contains(secret) {
                            wrong.push(format!(
                                "{run}: printed {secret:?}\nstdout: {stdout}\nstderr: {stderr}"
                            ));
                        }
                    }
                    if output.status.code() != Some(1) {
                        wrong.push(format!(
                            "{run}: status {:?}, not 1\nstderr: {stderr}",
                            output.status.code()
                        ));
                    }
                    if case.malformed && !stderr.contains("<redacted>@") {
                        wrong.push(format!(
                            "{run}: the message does not show the string redacted\nstderr: {stderr}"
                        ));
                    }
                }
            }
        }
    }
    wrong
}

#[test]
fn a_connection_string_that_does_not_parse_is_never_printed_with_its_user_info() {
    let wrong = check_all(&malformed(), COMMANDS);
    assert!(
        wrong.is_empty(),
        "{} run(s):\n{}",
        wrong.len(),
        wrong.join("\n\n")
    );
}

#[test]
fn the_message_for_a_bad_user_info_says_what_to_do() {
    let output = mongolock(
        "mongodb://alice:S3cret?Pw0rd@127.0.0.1:1/",
        Via::Flag,
        false,
        &["status"],
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("mongodb://<redacted>@127.0.0.1:1/") && stderr.contains("percent-encode"),
        "names the problem and the string, redacted: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");

    // A problem outside the user info is named by the driver's message.
    let output = mongolock(
        "mongodb://alice:S3cretPw0rd@127.0.0.1:1/?authMechanism=BOGUS",
        Via::Env,
        false,
        &["status"],
    );
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("mongodb://<redacted>@127.0.0.1:1/") && stderr.contains("BOGUS"),
        "{stderr}"
    );
    assert!(!stderr.contains("S3cret"), "{stderr}");
}

#[test]
fn a_connection_string_typed_where_a_subcommand_goes_is_not_echoed() {
    // clap's own usage error quotes the argument it did not expect.
    let output = assert_cmd::Command::cargo_bin("mongolock")
        .expect("the binary is built")
        .env_remove("MONGODB_URI")
        .args(["mongodb://alice:S3cretPw0rd@127.0.0.1:1/", "status"])
        .output()
        .expect("mongolock runs");
    assert_eq!(output.status.code(), Some(2), "a usage error");
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("S3cret"), "{stderr}");
    assert!(!stderr.contains("Pw0rd"), "{stderr}");
    assert!(stderr.contains("unrecognized subcommand"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_the_server_cannot_take_are_not_printed() {
    // The emulator runs no authentication: the driver's handshake with credentials fails,
    // in the driver's words, in every subcommand. Also a port nobody listens on.
    let env = Env::start("secrets").await;
    let addr = env.server.addr();
    let cases = vec![
        Case {
            uri: format!("mongodb://alice:S3cretPw0rd@{addr}/?serverSelectionTimeoutMS=2000"),
            secrets: &["S3cret", "Pw0rd"],
            malformed: false,
        },
        Case {
            uri: "mongodb://alice:S3cret%40Pw0rd@127.0.0.1:1/?serverSelectionTimeoutMS=300"
                .to_owned(),
            secrets: &["S3cret", "Pw0rd"],
            malformed: false,
        },
    ];
    let wrong = tokio::task::spawn_blocking(move || check_all(&cases, COMMANDS))
        .await
        .expect("the runs end");
    assert!(
        wrong.is_empty(),
        "{} run(s):\n{}",
        wrong.len(),
        wrong.join("\n\n")
    );
}

#[test]
fn any_message_or_log_line_quoting_a_piece_of_the_user_info_is_scrubbed() {
    // A resource named like the password: the error and the log lines that name the
    // resource show `***` in its place.
    let uri = "mongodb://alice:S3cretPw0rd@127.0.0.1:1/?serverSelectionTimeoutMS=300";
    let too_long = format!("job-S3cretPw0rd{}", "x".repeat(600));
    for via in [Via::Flag, Via::Env] {
        // Refused before connecting: the usage error quotes the start of the name.
        let output = mongolock(
            uri,
            via,
            true,
            &["exec", "--resource", &too_long, "--no-wait", "--", "true"],
        );
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(!stderr.contains("S3cret"), "{stderr}");
        assert!(stderr.contains("--resource \"job-***xxx"), "{stderr}");

        // Taken, then the server cannot be reached: the log names the resource.
        let output = mongolock(
            uri,
            via,
            true,
            &[
                "exec",
                "--resource",
                "job-S3cretPw0rd",
                "--no-wait",
                "--",
                "true",
            ],
        );
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(!stderr.contains("S3cret"), "{stderr}");
        assert!(
            stderr.contains("cannot reach the server 127.0.0.1:1"),
            "{stderr}"
        );
        assert!(
            stderr.contains("resources=job-***"),
            "the log too: {stderr}"
        );
    }
}
