//! Strings any client that can take a lock can store (owner, host, an election's value,
//! resource names) reach the terminal escaped in text output and in the command's logs:
//! control characters (C0, DEL, C1), line breaks and bidi overrides cannot add lines, fake
//! rows or recolour the terminal. `--json` output keeps them as they are, JSON-escaped.

mod common;

use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::time::Duration;

use common::{Env, MONGOLOCK, run, text};
use mongolock::LockDetails;

/// An owner that, printed raw, would end the row, recolour the terminal, rewrite the start
/// of the line and reverse what follows.
const OWNER: &str = "own\ner|FAKE\x1b[31m\r\u{202e}evil\u{9b}2J";
/// `OWNER` as the text output shows it.
const OWNER_SHOWN: &str = r"own\ner|FAKE\u{1b}[31m\r\u{202e}evil\u{9b}2J";
/// A host with a tab, a bidi isolate, a line separator and DEL.
const HOST: &str = "ho\tst\u{2066}x\u{2069}\u{2028}y\x7f";
/// `HOST` as the text output shows it.
const HOST_SHOWN: &str = r"ho\tst\u{2066}x\u{2069}\u{2028}y\u{7f}";
/// An election value that, printed raw, would add a fake leader line.
const VALUE: &str = "10.0.0.7\nsched: led by 10.0.0.66 (term 99)\x1b[0m";
/// `VALUE` as the text output shows it.
const VALUE_SHOWN: &str = r"10.0.0.7\nsched: led by 10.0.0.66 (term 99)\u{1b}[0m";

/// What is wrong with `out` as terminal text: a control character other than the line
/// ends (C0, DEL, C1) or a bidi control.
fn raw_controls(out: &str) -> Vec<char> {
    out.chars()
        .filter(|&c| c != '\n')
        .filter(|&c| {
            c.is_control()
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_stored_owner_and_host_escaped_on_one_row() {
    let env = Env::start("stored_status").await;
    let locks = env.locks();
    let details = LockDetails::default()
        .owner(OWNER)
        .host(HOST)
        .ttl(Duration::from_secs(60));
    let grant = locks.xlock("ledger", "id-evil", details).await.unwrap();

    let output = run(env.cmd(&["status"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert_eq!(raw_controls(&stdout), Vec::<char>::new(), "{stdout:?}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one row: {stdout:?}");
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    let token = grant.fencing_token().to_string();
    assert_eq!(
        &row[..6],
        [
            "ledger",
            "exclusive",
            "id-evil",
            OWNER_SHOWN,
            HOST_SHOWN,
            token.as_str()
        ],
        "{stdout:?}"
    );

    // --json keeps the stored strings, JSON-escaped.
    let output = run(env.cmd(&["--json", "status"])).await;
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rows[0]["owner"], OWNER);
    assert_eq!(rows[0]["host"], HOST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_shows_a_stored_value_and_host_escaped_on_one_line() {
    let env = Env::start("stored_leader").await;
    let locks = env.locks();
    let leading = locks
        .election("sched")
        .host(HOST)
        .campaign(VALUE)
        .await
        .unwrap();

    let output = run(env.cmd(&["leader", "--name", "sched"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert_eq!(raw_controls(&stdout), Vec::<char>::new(), "{stdout:?}");
    assert_eq!(
        stdout,
        format!(
            "sched: led by {VALUE_SHOWN} (term {}, lock id {}, host {HOST_SHOWN})\n",
            leading.term(),
            leading.guard().lock_id()
        )
    );

    let output = run(env.cmd(&["--json", "leader", "--name", "sched"])).await;
    let line: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(line["value"], VALUE);
    assert_eq!(line["host"], HOST);
    leading.resign().await.unwrap();
    locks.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_logs_a_resource_name_escaped() {
    let env = Env::start("stored_log").await;
    let resource = "job\n2099-01-01T00:00:00Z  INFO fake: granted\x1b[31m";
    let output = run(env.cmd(&["-v", "exec", "--resource", resource, "--", "true"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert_eq!(raw_controls(&stderr), Vec::<char>::new(), "{stderr:?}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(!lines.is_empty(), "-v logs: {stderr:?}");
    assert!(
        lines.iter().all(|line| !line.contains("INFO fake")
            || line.contains(r"job\n2099-01-01T00:00:00Z  INFO fake: granted\u{1b}[31m")),
        "the name stays on its log line: {stderr:?}"
    );
}

/// A pseudo-terminal: the command's end (stdin and stderr) and the test's end.
struct Terminal {
    /// What the test reads and writes.
    master: std::fs::File,
    /// The command's stdin and stderr.
    slave: OwnedFd,
}

impl Terminal {
    fn open() -> Terminal {
        let pty = nix::pty::openpty(None, None).expect("a pseudo-terminal");
        Terminal {
            master: std::fs::File::from(pty.master),
            slave: pty.slave,
        }
    }
}

/// Reads `master` until `until` has been seen or the terminal closes; what was read.
fn read_until(master: &mut std::fs::File, until: &str) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains(until) {
        match master.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_confirmation_shows_stored_strings_escaped() {
    let env = Env::start("stored_release").await;
    let locks = env.locks();
    let details = LockDetails::default()
        .owner(OWNER)
        .host(HOST)
        .ttl(Duration::from_secs(60));
    let _grant = locks.xlock("ledger", "id-evil", details).await.unwrap();

    let Terminal { mut master, slave } = Terminal::open();
    let mut child = std::process::Command::new(MONGOLOCK)
        .env_remove("MONGODB_URI")
        .args(["--uri", &env.server.uri(), "--db", &env.db])
        .args(["release", "--resource", "ledger", "--force"])
        .stdin(slave.try_clone().expect("the terminal's fd is copied"))
        .stderr(slave)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("mongolock starts");
    let asked = tokio::task::spawn_blocking(move || {
        let asked = read_until(&mut master, "[y/N] ");
        master.write_all(b"n\n").expect("the answer is typed");
        let rest = read_until(&mut master, "not released");
        let status = child.wait().expect("mongolock exits");
        (asked, rest, status)
    });
    let (asked, rest, status) = tokio::time::timeout(Duration::from_secs(60), asked)
        .await
        .expect("mongolock asks and exits in time")
        .expect("the terminal is read");
    assert_eq!(status.code(), Some(1), "not released: {rest:?}");
    assert_eq!(
        asked,
        format!("Break 1 lock(s) on ledger held by id-evil ({OWNER_SHOWN}, {HOST_SHOWN})? [y/N] ")
    );
    assert_eq!(
        locks
            .status(&mongolock::Filter::default())
            .await
            .unwrap()
            .len(),
        1,
        "the answer was no"
    );
}
