//! The emulator the libraries run against, in a child process of this binary.
//!
//! The benchmark starts itself again with `--serve-emulator`: the child runs one
//! `mongolock-testkit` server (a one-member replica set, or a standalone server), or a
//! three-member replica set, with the injected latency, prints its connection string, and
//! serves until its standard input
//! closes (so it never outlives the benchmark). Keeping the server out of the benchmark's
//! process means the benchmark's allocator counts the clients' memory only, and the server
//! does not share the clients' async runtime.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

use mongolock_testkit::ServerVersion;

use crate::peers::Result;

/// The flag that makes the binary serve instead of benchmark.
pub(crate) const SERVE_FLAG: &str = "--serve-emulator";

/// How long the child may take to print its address.
const START_LIMIT: Duration = Duration::from_secs(60);

/// Which kind of deployment the emulator pretends to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topology {
    /// A one-member replica set: change streams work.
    ReplicaSet,
    /// A standalone `mongod`: no change streams, so waiters poll or back off.
    Standalone,
    /// A replica set of three members, each applying the primary's writes [`SET_LAG`]
    /// after it: a write with `w: "majority"` (mongolock's default) waits for one of them.
    ThreeMembers,
}

/// How long after the primary writes an operation each secondary of the three-member set
/// applies it.
pub(crate) const SET_LAG: Duration = Duration::from_millis(1);

impl Topology {
    /// As printed in the tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Topology::ReplicaSet => "replica set",
            Topology::Standalone => "standalone",
            Topology::ThreeMembers => "three-member set",
        }
    }
}

/// Which MongoDB release's rule the emulator follows for logging pipeline-style updates,
/// the difference that matters to change streams (see `mongolock_testkit::ServerVersion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerMode {
    /// MongoDB 5.0 and later (the emulator reports 7.0, its default): a pipeline update is
    /// logged as a delta (an `update` event) when the delta is smaller than the new
    /// document, else whole (a `replace` event).
    Deltas,
    /// MongoDB 4.4: every pipeline update is logged whole (a `replace` event).
    V4_4,
}

impl ServerMode {
    /// Both modes, the default first.
    pub(crate) const ALL: [ServerMode; 2] = [ServerMode::Deltas, ServerMode::V4_4];

    /// As printed in the tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            ServerMode::Deltas => "5.0+ rule (reports 7.0)",
            ServerMode::V4_4 => "4.4 mode",
        }
    }

    /// The value of the child's `--server-version`.
    fn arg(self) -> &'static str {
        match self {
            ServerMode::Deltas => "7.0",
            ServerMode::V4_4 => "4.4",
        }
    }
}

/// A running emulator in a child process.
pub(crate) struct Emulator {
    child: Child,
    uri: String,
}

impl Emulator {
    /// Starts the child (following the 5.0+ rule) and waits for its connection string.
    pub(crate) async fn start(latency: Duration, topology: Topology) -> Result<Emulator> {
        Emulator::start_as(latency, topology, ServerMode::Deltas).await
    }

    /// Starts the child in `mode` and waits for its connection string.
    pub(crate) async fn start_as(
        latency: Duration,
        topology: Topology,
        mode: ServerMode,
    ) -> Result<Emulator> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg(SERVE_FLAG)
            .arg("--latency-ms")
            .arg(latency.as_millis().to_string())
            .arg("--server-version")
            .arg(mode.arg())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        match topology {
            Topology::Standalone => {
                command.arg("--standalone");
            }
            Topology::ThreeMembers => {
                command.arg("--members").arg("3");
            }
            Topology::ReplicaSet => {}
        }
        let mut child = command.spawn()?;
        let stdout = child.stdout.take().ok_or("the emulator has no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(START_LIMIT, lines.next_line())
            .await
            .map_err(|_| "the emulator did not start in time")??
            .ok_or("the emulator exited before it listened")?;
        let uri = line
            .strip_prefix("uri ")
            .ok_or_else(|| format!("unexpected first line from the emulator: {line}"))?
            .to_string();
        Ok(Emulator { child, uri })
    }

    /// The connection string.
    pub(crate) fn uri(&self) -> &str {
        &self.uri
    }

    /// Closes the child's standard input (its signal to stop) and waits for it to exit.
    pub(crate) async fn stop(mut self) {
        drop(self.child.stdin.take());
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The child's side: serves until standard input closes. `args` are those after
/// [`SERVE_FLAG`]: `--latency-ms N`, optionally `--standalone`, `--members N` (a replica set
/// of N members, [`SET_LAG`] apart) and `--server-version` (`7.0`, the default, or `4.4`).
pub(crate) fn serve(args: &[String]) -> std::result::Result<(), String> {
    let mut builder = mongolock_testkit::TestServer::builder();
    let mut members = 1;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--standalone" => builder = builder.standalone(true),
            "--members" => {
                let v = it.next().ok_or("--members needs a value")?;
                members = v.parse().map_err(|_| format!("bad --members {v}"))?;
            }
            "--latency-ms" => {
                let v = it.next().ok_or("--latency-ms needs a value")?;
                let ms: u64 = v.parse().map_err(|_| format!("bad --latency-ms {v}"))?;
                builder = builder.latency(Duration::from_millis(ms));
            }
            "--server-version" => {
                let version = match it.next().map(String::as_str) {
                    Some("7.0") => ServerVersion::V7_0,
                    Some("4.4") => ServerVersion::V4_4,
                    other => return Err(format!("bad --server-version {other:?}")),
                };
                builder = builder.server_version(version);
            }
            other => return Err(format!("unknown emulator argument {other}")),
        }
    }
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let serving = if members > 1 {
            let set = mongolock_testkit::ReplicaSet::builder()
                .members(members)
                .lag(SET_LAG)
                .server(builder)
                .start()
                .await
                .map_err(|e| e.to_string())?;
            println!("uri {}", set.uri());
            Serving::Set(set)
        } else {
            let server = builder.start().await.map_err(|e| e.to_string())?;
            println!("uri {}", server.uri());
            Serving::One(server)
        };
        use std::io::Write as _;
        std::io::stdout().flush().map_err(|e| e.to_string())?;
        // Serve until the benchmark closes our standard input (or exits).
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 64];
        while stdin.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        match serving {
            Serving::One(server) => server.shutdown().await,
            Serving::Set(set) => set.shutdown().await,
        }
        Ok(())
    })
}

/// What the child serves.
enum Serving {
    One(mongolock_testkit::TestServer),
    Set(mongolock_testkit::ReplicaSet),
}
