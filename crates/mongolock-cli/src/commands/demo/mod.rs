//! `mongolock demo`: workers contend for locks, then every promise is verified.
//!
//! Without `--uri` (and `MONGODB_URI`), the demo starts the embedded MongoDB emulator and a
//! fault proxy in front of it, then a second scene on an emulated three-member replica set
//! whose primary steps down; with one, it runs against that deployment and skips the
//! network cut, which needs the proxy, and the failover, which would need stepping down the
//! deployment's primary.
//!
//! - `log`: the shared event log, printed live;
//! - `workers`: the ordinary workers, the one that crashes, the one that is cut off;
//! - `store`: the guarded store that refuses stale fencing tokens;
//! - `verify`: the log turned into a history for the checker the reliability harness uses
//!   too (the testkit's `checker`), its verdicts, and the summary;
//! - `failover`: the second scene, on the embedded emulator only: the same locks on an
//!   emulated three-member replica set whose primary steps down while workers hold locks.

mod failover;
mod log;
mod store;
mod verify;
mod workers;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mongolock_testkit::{FaultProxy, TestServer};
use tokio::sync::watch;

use crate::cli::{DemoArgs, Global, exit};

use self::log::{Lock, Log, Output, What};
use self::workers::{Shared, TTL};

/// How long, past `--seconds`, the demo waits for the crash and the cut to play out (a
/// takeover needs the lost lease to run out, then someone to ask).
const SCENARIO_GRACE: Duration = Duration::from_secs(10);

/// Where the demo runs.
enum Target {
    /// The embedded emulator, with a fault proxy in front of it.
    Emulator {
        /// The emulator.
        server: TestServer,
        /// The proxy the cut-off worker goes through.
        proxy: Arc<FaultProxy>,
    },
    /// A deployment given with `--uri`.
    Remote {
        /// Its connection string.
        uri: String,
    },
}

/// Runs `demo` (its arguments checked by [`DemoArgs::usage_error`]): the first scene on the
/// target, then, on the embedded emulator, the failover scene; the verdict covers both.
pub async fn run(global: &Global, args: DemoArgs) -> anyhow::Result<ExitCode> {
    let out = if global.json {
        Output::Stderr
    } else {
        Output::Stdout
    };
    let target = Target::start(global).await?;
    let first = first_scene(global, &args, &target, out).await?;
    if !global.json {
        first.print_checks();
    }
    let mut report = DemoReport {
        first,
        failover: None,
    };
    let emulated = matches!(target, Target::Emulator { .. });
    target.shut_down().await;
    if emulated {
        let failover = failover::scene(
            out,
            &global.db,
            &global.collection,
            args.workers,
            args.seconds,
        )
        .await?;
        if !global.json {
            failover.print();
        }
        report.first.ok &= failover.report.ok;
        report.failover = Some(failover);
    }
    if global.json {
        let mut json = serde_json::to_value(&report).context("cannot encode the report")?;
        crate::output::scrub_json(&mut json);
        let json = serde_json::to_string_pretty(&json).context("cannot encode the report")?;
        log::emit_scrubbed(&mut std::io::stdout().lock(), &json);
    } else {
        verify::print_verdict(report.first.ok);
    }
    Ok(if report.first.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::DEMO_VIOLATION)
    })
}

/// What `demo --json` prints: the first scene's report, its `ok` covering both scenes, and
/// the failover scene's beside it.
#[derive(serde::Serialize)]
struct DemoReport {
    /// The first scene, with `ok` for both.
    #[serde(flatten)]
    first: verify::Report,
    /// The failover scene (the embedded emulator only).
    #[serde(skip_serializing_if = "Option::is_none")]
    failover: Option<failover::FailoverReport>,
}

impl Target {
    /// The deployment of `--uri` (or `MONGODB_URI`), else the embedded emulator with a
    /// fault proxy in front of it.
    async fn start(global: &Global) -> anyhow::Result<Target> {
        if let Some(uri) = global.uri.as_deref().filter(|u| !u.is_empty()) {
            return Ok(Target::Remote {
                uri: uri.to_owned(),
            });
        }
        let server = TestServer::start()
            .await
            .context("cannot start the embedded MongoDB emulator")?;
        let proxy = FaultProxy::start(server.addr())
            .await
            .context("cannot start the fault proxy")?;
        Ok(Target::Emulator {
            server,
            proxy: Arc::new(proxy),
        })
    }

    /// Stops the emulator and its proxy (a deployment is left as it is).
    async fn shut_down(self) {
        if let Target::Emulator { server, proxy } = self {
            if let Ok(proxy) = Arc::try_unwrap(proxy) {
                proxy.shutdown().await;
            }
            server.shutdown().await;
        }
    }
}

/// The first scene: workers contend on `target` while one crashes and one is cut off (on
/// the emulator); its verification. On a deployment, the guarded records are removed at
/// the end.
async fn first_scene(
    global: &Global,
    args: &DemoArgs,
    target: &Target,
    out: Output,
) -> anyhow::Result<verify::Report> {
    let connected = Connected::to(target, global).await?;
    let start = Instant::now();
    let log = Arc::new(Log::new(start, out));
    let (stop_tx, stop_rx) = watch::channel(false);
    let shared = Shared {
        log: log.clone(),
        prefix: connected.prefix.clone(),
        stop: stop_rx,
        server_clock: target.server_clock(),
        db: global.db.clone(),
        collection: global.collection.clone(),
    };
    let setup = shared.lock_client(&connected.client);
    setup
        .create_indexes()
        .await
        .context("cannot create the lock collection's indexes")?;
    let store = shared.store(&connected.client);
    store.reset().await?;

    let n = args.workers;
    introduce(&log, target, global, n, args.seconds, &connected.prefix);
    let mut skipped = target.skipped();
    let cast = Cast::start(&shared, target, global, n, connected.uri).await?;
    cast.play_out(&log, start + Duration::from_secs(args.seconds))
        .await;
    let crash_worker = cast.crash_worker;
    cast.stop(&shared, &stop_tx).await;
    let finish = Instant::now();

    let mut accepted = HashMap::new();
    for lock in store::Store::GUARDED {
        accepted.insert(lock, store.accepted(lock).await?);
    }
    if !log.any(|e| e.worker == crash_worker && matches!(e.what, What::Crashed { .. })) {
        skipped.push(format!(
            "the crash: w{crash_worker} did not get the config's write lock in time"
        ));
    }
    let report = verify::verify(&log, finish, &accepted, connected.kind, n, skipped);
    if let Target::Remote { .. } = target {
        let _ = store.remove().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), setup.shutdown()).await;
    }
    Ok(report)
}

/// The first scene's connection to its target.
struct Connected {
    /// The target's connection string (the crashing worker, in a runtime of its own,
    /// connects anew).
    uri: String,
    /// The setup's client (indexes, the guarded store).
    client: mongodb::Client,
    /// What every resource name starts with: nothing on the emulator, the run's own prefix
    /// on a shared deployment.
    prefix: String,
    /// The server's kind, for the report.
    kind: &'static str,
}

impl Connected {
    /// Connects to `target`.
    async fn to(target: &Target, global: &Global) -> anyhow::Result<Connected> {
        Ok(match target {
            Target::Emulator { server, .. } => Connected {
                uri: server.uri(),
                client: server.client(),
                prefix: String::new(),
                kind: "emulator",
            },
            Target::Remote { uri } => {
                let client = crate::uri::client(uri, global.connect_timeout).await?;
                let run_id = bson::oid::ObjectId::new().to_hex();
                Connected {
                    uri: uri.clone(),
                    client,
                    prefix: format!("mongolock-demo-{}/", &run_id[16..]),
                    kind: "uri",
                }
            }
        })
    }
}

impl Target {
    /// On the emulator, whose clock is this machine's wall clock: both clocks read at one
    /// moment, to place the server's grant times on the monotonic clock the log uses.
    fn server_clock(&self) -> Option<(Instant, i64)> {
        match self {
            Target::Emulator { server, .. } => {
                Some((Instant::now(), server.clock().now().timestamp_millis()))
            }
            Target::Remote { .. } => None,
        }
    }

    /// What the demo cannot show on this target, and why.
    fn skipped(&self) -> Vec<String> {
        match self {
            Target::Emulator { .. } => Vec::new(),
            Target::Remote { .. } => vec![
                "the network cut: it needs the embedded emulator's fault proxy (run without --uri to see it)"
                    .to_owned(),
                "the failover: it needs the embedded emulator's replica set (the demo never steps down a deployment's primary)"
                    .to_owned(),
            ],
        }
    }
}

/// The first scene's workers, running: the ordinary ones, the one cut off (on the
/// emulator) and the one that crashes.
struct Cast {
    ordinary: tokio::task::JoinSet<()>,
    cut: Option<tokio::task::JoinHandle<()>>,
    crash: std::thread::JoinHandle<()>,
    /// The worker that crashes (the last one).
    crash_worker: usize,
}

impl Cast {
    /// Starts `workers` workers on `target`: w1 to the one before the last are ordinary
    /// (on the emulator the one before the last is cut off instead), the last one crashes.
    async fn start(
        shared: &Shared,
        target: &Target,
        global: &Global,
        workers: usize,
        uri: String,
    ) -> anyhow::Result<Cast> {
        let (cut_worker, crash_worker) = (workers - 1, workers);
        let mut ordinary = tokio::task::JoinSet::new();
        let range = match target {
            Target::Emulator { .. } => 1..cut_worker,
            Target::Remote { .. } => 1..crash_worker,
        };
        for worker in range {
            // Each worker is its own host: its own driver client and connection pool, not
            // one pool shared by every worker (each lock client keeps a change stream open,
            // and that holds one of its pool's connections).
            let own = match target {
                Target::Emulator { server, .. } => server.new_client(),
                Target::Remote { uri } => crate::uri::client(uri, global.connect_timeout).await?,
            };
            ordinary.spawn(workers::ordinary(shared.clone(), worker, own));
        }
        let cut = match target {
            Target::Emulator { proxy, .. } => Some(tokio::spawn(workers::cut_off(
                shared.clone(),
                cut_worker,
                proxy.clone(),
            ))),
            Target::Remote { .. } => None,
        };
        let crash = workers::crashing(shared.clone(), crash_worker, uri);
        Ok(Cast {
            ordinary,
            cut,
            crash,
            crash_worker,
        })
    }

    /// Runs until `until`, and on until the crash and the cut have played out (at most
    /// [`SCENARIO_GRACE`] more).
    async fn play_out(&self, log: &Log, until: Instant) {
        tokio::time::sleep_until(until.into()).await;
        let give_up = Instant::now() + SCENARIO_GRACE;
        let mut said = false;
        loop {
            let cut_done = self.cut.as_ref().is_none_or(|t| t.is_finished());
            let crash_done = self.crash.is_finished() && crash_taken_over(log, self.crash_worker);
            if (cut_done && crash_done) || Instant::now() >= give_up {
                return;
            }
            if !said {
                log.say(&format!(
                    "{:>8}        (time is up; waiting for the crash and the cut to play out)",
                    log.time(Instant::now())
                ));
                said = true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops every worker and waits for them.
    async fn stop(mut self, shared: &Shared, stop: &watch::Sender<bool>) {
        shared.stop_all(stop, &mut self.ordinary).await;
        if let Some(task) = self.cut {
            task.abort();
            let _ = task.await;
        }
        let crash = self.crash;
        let _ = tokio::task::spawn_blocking(move || crash.join()).await;
    }
}

/// Whether someone took the config over after the crashed worker.
fn crash_taken_over(log: &Log, crashed: usize) -> bool {
    let entries = log.entries();
    let Some(crash) = entries
        .iter()
        .find(|e| e.worker == crashed && matches!(e.what, What::Crashed { .. }))
    else {
        // No crash (the worker never got the lock): nothing to wait for.
        return true;
    };
    entries.iter().any(|e| {
        e.lock == Lock::Config
            && e.worker != crashed
            && e.at > crash.at
            && matches!(e.what, What::Acquired { .. })
    })
}

/// What the demo is about to show, for someone who never read the code.
fn introduce(
    log: &Log,
    target: &Target,
    global: &Global,
    workers: usize,
    seconds: u64,
    prefix: &str,
) {
    let (cut, crash) = (workers - 1, workers);
    let ttl = TTL.as_secs();
    let mut text = format!(
        "mongolock demo: {workers} workers share 3 locks for {seconds} s, then every promise is checked.\n"
    );
    match target {
        Target::Emulator { server, .. } => {
            text += &format!(
                "Server: the embedded MongoDB emulator at {} (in memory, gone when the demo ends).\n",
                server.addr()
            )
        }
        Target::Remote { .. } => {
            text += &format!(
                "Server: the deployment given with --uri. Locks in {db}.{coll} (resources named {prefix}*),\n\
             guarded records in {db}.{store} (removed at the end).\n",
                db = global.db,
                coll = global.collection,
                store = store::STORE_COLLECTION,
            )
        }
    }
    text += &format!(
        "\n\
         Every lock is a lease: it lasts {ttl} s past its last renewal, and is renewed in the background\n\
         while its holder lives. Each grant carries a fencing token, larger than every token granted\n\
         before on that lock. Holders of an exclusive lock write a record (the report, the config)\n\
         that takes a write only with a token no smaller than the last one it took.\n\
         \n\
         \x20 nightly-report  a mutex: one holder at a time\n\
         \x20 gpu             a semaphore: at most {permits} holders at once\n\
         \x20 config          a read-write lock: many readers (r), or one writer (W)\n\
         \n",
        permits = log::GPU_PERMITS,
    );
    let last_ordinary = match target {
        Target::Emulator { .. } => workers - 2,
        Target::Remote { .. } => workers - 1,
    };
    let ordinary = if last_ordinary == 1 {
        "w1".to_owned()
    } else {
        format!("w1..w{last_ordinary}")
    };
    let pad = ordinary.len().max(3);
    let indent = " ".repeat(pad + 4);
    text += &format!(
        "  {ordinary:<pad$}  take these locks in turn: acquire, work a little, release, again.\n"
    );
    if matches!(target, Target::Emulator { .. }) {
        text += &format!(
            "  {:<pad$}  takes nightly-report, then its network is cut (a proxy stops forwarding).\n\
             {indent}It must be told it lost the lock before anyone else is granted it.\n",
            format!("w{cut}")
        );
    }
    text += &format!(
        "  {:<pad$}  takes config to write, then crashes: no release, and its renewals stop.\n\
         {indent}Nobody may get config until its lease has run out, {ttl} s after its last renewal.\n\
         \n\
         Times are seconds since the start. Where a grant time is compared with a loss, it is the\n\
         server's{}.\n\
         \n",
        format!("w{crash}"),
        if matches!(target, Target::Emulator { .. }) {
            " (the emulator's clock is this machine's)"
        } else {
            " reply's arrival (a remote server's clock is not compared with this machine's)"
        },
    );
    text += &format!(
        "{:>8}  {:<4} {:<width$} | {}",
        "time",
        "who",
        "what happened",
        "who holds what after it",
        width = log::WIDTH
    );
    log.say(&text);
}
