//! What the process tests share: an emulator per test, the `mongolock` command pointed at
//! it, and a way to run the command without blocking the emulator's runtime.

#![allow(dead_code)] // each test file uses its own part of this module

use std::process::Output;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use mongolock::LockClient;
use mongolock_testkit::TestServer;

/// The path of the `mongolock` binary under test.
pub const MONGOLOCK: &str = env!("CARGO_BIN_EXE_mongolock");

/// The subcommands a user types (clap's `help` aside), each with a manual page of its own.
pub const SUBCOMMANDS: &[&str] = &[
    "exec",
    "elect",
    "leader",
    "status",
    "unlock",
    "release",
    "purge",
    "indexes",
    "demo",
    "completions",
    "man",
];

/// Runs `mongolock ARGS...` to completion with no server named (for what needs none:
/// completions, manual pages, usage errors).
pub fn mongolock_offline(args: &[&str]) -> Output {
    assert_cmd::Command::cargo_bin("mongolock")
        .expect("the binary is built")
        .env_remove("MONGODB_URI")
        .args(args)
        .output()
        .expect("mongolock runs")
}

/// An emulator and a database name of its own for one test.
pub struct Env {
    /// The emulator; it runs on the test's runtime, so the test must stay on it (a
    /// multi-thread runtime) while processes talk to it.
    pub server: TestServer,
    /// The database of this test.
    pub db: String,
}

impl Env {
    /// Starts an emulator; `name` makes the database name unique.
    pub async fn start(name: &str) -> Env {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let server = TestServer::start().await.expect("the emulator starts");
        let db = format!(
            "{name}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        Env { server, db }
    }

    /// The library's client on the same collection the command uses.
    pub fn locks(&self) -> LockClient {
        LockClient::new(self.server.client().database(&self.db).collection("locks"))
    }

    /// `mongolock --uri URI --db DB ARGS...` as an `assert_cmd` command.
    pub fn cmd(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = assert_cmd::Command::cargo_bin("mongolock").expect("the binary is built");
        cmd.env_remove("MONGODB_URI")
            .args(["--uri", &self.server.uri(), "--db", &self.db])
            .args(args)
            .timeout(Duration::from_secs(60));
        cmd
    }

    /// `mongolock --uri URI --db DB ARGS...` as a tokio command (for processes the test
    /// signals or runs in parallel), with stdout and stderr piped and killed on drop.
    pub fn spawn(&self, args: &[&str]) -> tokio::process::Child {
        self.spawn_with_env(&[], args)
    }

    /// As [`Env::spawn`], with `vars` set in mongolock's environment.
    pub fn spawn_with_env(&self, vars: &[(&str, &str)], args: &[&str]) -> tokio::process::Child {
        tokio::process::Command::new(MONGOLOCK)
            .env_remove("MONGODB_URI")
            .envs(vars.iter().copied())
            .args(["--uri", &self.server.uri(), "--db", &self.db])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("mongolock starts")
    }
}

/// Runs `cmd` to completion on a blocking thread, so the emulator keeps serving.
pub async fn run(mut cmd: assert_cmd::Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("mongolock runs"))
        .await
        .expect("the blocking task ends")
}

/// Waits for `child` (at most `limit`) and returns its output.
pub async fn wait_output(child: tokio::process::Child, limit: Duration) -> Output {
    tokio::time::timeout(limit, child.wait_with_output())
        .await
        .expect("mongolock exits in time")
        .expect("mongolock's output is read")
}

/// Text of a stream.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A fresh temporary directory for one test, removed by the caller if it likes.
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mongolock-cli-{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("the temporary directory is created");
    dir
}

/// Polls `check` every 50 ms until it is true, for at most `limit`.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Says that `test` was skipped and why, on a line of its own starting with `SKIPPED:`.
/// Written to the process's stderr directly rather than with `eprintln!`, which the test
/// harness captures: `cargo test` shows the line even without `--nocapture`. (The test still
/// counts as passed; libtest cannot skip a test once it runs.)
pub fn skipped(test: &str, reason: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {test}: {reason}");
}
