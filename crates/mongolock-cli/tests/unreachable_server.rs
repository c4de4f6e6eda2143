//! A server that cannot be reached is named, with the cause, within `--connect-timeout`
//! (default: the connection string's serverSelectionTimeoutMS, else 10 s), and never with
//! the password.

mod common;

use std::time::{Duration, Instant};

use common::{mongolock_offline as mongolock, text};

/// Runs `mongolock ARGS...`, and returns its exit code, its stderr and how long it took.
fn timed(args: &[&str]) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let output = mongolock(args);
    (
        output.status.code(),
        text(&output.stderr),
        started.elapsed(),
    )
}

#[test]
fn a_refused_connection_names_the_host_and_the_cause() {
    let (code, stderr, took) = timed(&[
        "--uri",
        "mongodb://alice:S3cretPw0rd@127.0.0.1:1/",
        "--connect-timeout",
        "1s",
        "status",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(took < Duration::from_secs(6), "took {took:?}: {stderr}");
    for words in [
        "cannot reach the server 127.0.0.1:1 within 1s",
        "--connect-timeout",
        "Connection refused",
    ] {
        assert!(stderr.contains(words), "{words:?} in {stderr}");
    }
    assert!(!stderr.contains("S3cret"), "{stderr}");
    assert!(!stderr.contains("alice"), "{stderr}");
}

#[test]
fn a_host_name_that_does_not_resolve_is_named() {
    let (code, stderr, _) = timed(&[
        "--uri",
        "mongodb://no-such-host.invalid:27017/",
        "--connect-timeout",
        "2s",
        "unlock",
        "--lock-id",
        "x",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach the server no-such-host.invalid:27017 within 2s"),
        "{stderr}"
    );
}

#[test]
fn every_host_is_named_with_its_own_cause() {
    let (code, stderr, _) = timed(&[
        "--uri",
        "mongodb://127.0.0.1:1,127.0.0.1:2/",
        "--connect-timeout",
        "1s",
        "purge",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach any server of 127.0.0.1:1,127.0.0.1:2"),
        "{stderr}"
    );
    assert!(
        stderr.contains("127.0.0.1:1: Connection refused")
            && stderr.contains("127.0.0.1:2: Connection refused"),
        "{stderr}"
    );
}

#[test]
fn without_the_option_the_connection_strings_timeout_holds() {
    let (code, stderr, took) = timed(&[
        "--uri",
        "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300",
        "exec",
        "--resource",
        "r",
        "--",
        "true",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(took < Duration::from_secs(5), "took {took:?}: {stderr}");
    assert!(stderr.contains("within 300ms"), "{stderr}");
}

#[test]
fn the_option_is_documented_with_its_default() {
    let output = mongolock(&["status", "--help"]);
    let help = text(&output.stdout);
    assert!(help.contains("--connect-timeout <DURATION>"), "{help}");
    assert!(help.contains("else 10s"), "{help}");
    let (code, stderr, _) = timed(&["--connect-timeout", "0s", "status"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--connect-timeout"), "{stderr}");
}
