//! Side-by-side benchmarks of `mongolock` and the other Rust MongoDB lock crates from
//! crates.io (`mongodb-lock`, `mongo-lock-async`, `distributed-lock-mongo`), in one run,
//! against the same `mongolock-testkit` emulator with the same injected latency per round
//! trip. The emulator runs in a child process of this binary (see [`emulator`]): a
//! one-member replica set, a standalone server for the polling rows, and a three-member
//! replica set.
//!
//! ```text
//! cargo run -p mongolock-bench --release             # full run (the figures in docs/benchmarks.md)
//! cargo run -p mongolock-bench -- --quick            # CI: a debug build is enough
//! cargo run -p mongolock-bench -- --latency-ms 5     # another round trip
//! cargo run -p mongolock-bench -- --measure handoff  # some measurements only
//! ```
//!
//! What is measured, per library (each with its own driver clients and database):
//!
//! - commands (round trips) per uncontended acquire + release, per refused attempt, per
//!   renew of K held locks and per second of waiting, counted with the driver's command
//!   monitoring (`CommandStarted` events for the library's database);
//! - uncontended acquire + release latency, p50 and p99;
//! - handoff latency with 1, 8 and 64 waiters on one resource, on the replica set and on the
//!   standalone server: from the holder's release call to the moment the next waiter's
//!   acquire returns, each waiter with its own client, waiting the way the library waits
//!   ([`measure`]);
//! - the uncontended pair and the handoffs again on a three-member replica set, its
//!   secondaries 1 ms behind the primary, where every write waits for a majority
//!   (`--measure three-members`);
//! - throughput, 64 tasks of one client on 64 resources and on one ([`throughput`]);
//! - the commands per second waiters send while a lock is held ([`load`]);
//! - keepalive commands per second for 1, 100 and 10,000 leases ([`keepalive`]);
//! - `renew` and `unlock` of groups of 10, 1,000 and 10,000 locks, per lock ([`groups`]);
//! - client memory per held lease and per waiter, from a counting allocator ([`memory`]);
//! - mongolock alone on the emulator's 5.0+ rule and in its 4.4 mode: commands and change
//!   events per handoff with 16 and 64 waiters, and the events a client's own renewals
//!   cause ([`modes`]; `--server-modes` runs only this).
//!
//! The tables go to standard output as Markdown, progress to standard error, the SVG plots
//! to `--plots DIR` ([`plot`]).

mod emulator;
mod groups;
mod keepalive;
mod load;
mod measure;
mod memory;
mod modes;
mod monitor;
mod peers;
mod plot;
mod report;
mod suite;
mod throughput;

use std::path::PathBuf;
use std::time::Duration;

use emulator::{Emulator, Topology};
use measure::Settings;
use peers::Lib;

/// Counts the client side's allocations (see [`memory`]).
#[global_allocator]
static GLOBAL: &stats_alloc::StatsAlloc<std::alloc::System> = memory::ALLOCATOR;

struct Args {
    quick: bool,
    latency: Duration,
    only: Option<Vec<String>>,
    /// Where the SVG plots go.
    plots: Option<PathBuf>,
    /// Only these measurements (names from [`suite::SECTIONS`]).
    measure: Option<Vec<String>>,
}

impl Args {
    /// Whether the measurement `name` (from [`suite::SECTIONS`]) runs.
    fn on(&self, name: &str) -> bool {
        self.measure
            .as_ref()
            .is_none_or(|m| m.iter().any(|n| n == name))
    }

    /// Whether `--only` selects `lib`.
    fn selects(&self, lib: Lib) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|o| lib.label().starts_with(o.as_str())))
    }

    /// Whether only the server-modes scenario runs (`--server-modes`).
    fn modes_only(&self) -> bool {
        self.measure.as_deref() == Some(&[suite::SERVER_MODES.to_string()])
    }
}

const USAGE: &str =
    "usage: mongolock-bench [--quick] [--latency-ms N] [--only LIB[,LIB..]] [--measure LIST]
                       [--plots DIR] [--server-modes]
  --quick         short run for CI (about 2.5 minutes in a debug build)
  --server-modes  only mongolock on the emulator's 5.0+ rule and in its 4.4 mode (handoffs
                  with 16 and 64 waiters, own renewals); the same as --measure server-modes
  --latency-ms N  latency the emulator adds to every reply (default 1)
  --only          run only these libraries: mongolock, mongodb-lock, mongo-lock-async,
                  distributed-lock-mongo
  --measure LIST  only these measurements: basics, handoff, three-members, throughput, load,
                  keepalive, groups, memory, server-modes (the others show as not measured)
  --plots DIR     write the SVG plots there (default: docs/img in a full run of every
                  measurement, the system's temporary directory in a quick run or with
                  --measure)
Exits with 1 if a measurement failed (its error is listed under the tables).";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        quick: false,
        latency: Duration::from_millis(1),
        only: None,
        plots: None,
        measure: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.quick = true,
            "--full" => args.quick = false,
            "--latency-ms" => {
                let v = it.next().ok_or("--latency-ms needs a value")?;
                let ms: u64 = v.parse().map_err(|_| format!("bad --latency-ms {v}"))?;
                args.latency = Duration::from_millis(ms);
            }
            "--only" => {
                let v = it.next().ok_or("--only needs a value")?;
                args.only = Some(v.split(',').map(str::to_string).collect());
            }
            "--measure" => {
                let v = it.next().ok_or("--measure needs a value")?;
                let names: Vec<String> = v.split(',').map(str::to_string).collect();
                if let Some(bad) = names
                    .iter()
                    .find(|n| !suite::SECTIONS.contains(&n.as_str()))
                {
                    return Err(format!("unknown measurement {bad}\n{USAGE}"));
                }
                args.measure = Some(names);
            }
            "--server-modes" => args.measure = Some(vec![suite::SERVER_MODES.to_string()]),
            "--plots" => {
                let v = it.next().ok_or("--plots needs a directory")?;
                args.plots = Some(PathBuf::from(v));
            }
            // `cargo bench` passes `--bench`.
            "--bench" => {}
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn settings(quick: bool) -> Settings {
    let hold = Duration::from_millis(10)..Duration::from_millis(510);
    // The server modes hold as the handoff measurement does (as in docs/benchmarks.md).
    let modes_hold = hold.clone();
    if quick {
        Settings {
            iterations: 30,
            failed_attempts: 3,
            handoffs: vec![(1, 5), (8, 5)],
            // The smoke run measures mongolock alone there: the peers send the same
            // commands as on one member, and each of them adds seconds of polling.
            peers_on_three_members: false,
            renew_sizes: vec![1, 100],
            hold,
            startup: Duration::from_millis(300),
            handoff_limit: Duration::from_secs(60),
            limit: Duration::from_secs(120),
            throughput_for: Duration::from_secs(1),
            throughput_tasks: 64,
            load_waiters: 8,
            load_window: Duration::from_secs(1),
            keepalive_leases: vec![1, 100],
            keepalive_ttl: Duration::from_secs(6),
            keepalive_window: Duration::from_secs(4),
            group_sizes: vec![10, 100],
            memory_leases: 100,
            memory_waiters: 20,
            // A small form, so that the smoke run exercises both modes in a few seconds.
            modes: measure::ModeSettings {
                handoffs: vec![(4, 3)],
                hold: Duration::from_millis(10)..Duration::from_millis(60),
                leases: 10,
                ttl: Duration::from_secs(3),
                window: Duration::from_secs(2),
                concurrent: true,
            },
        }
    } else {
        Settings {
            iterations: 200,
            failed_attempts: 10,
            handoffs: vec![(1, 100), (8, 100), (64, 100)],
            peers_on_three_members: true,
            renew_sizes: vec![1, 100],
            hold,
            startup: Duration::from_millis(300),
            handoff_limit: Duration::from_secs(300),
            limit: Duration::from_secs(600),
            throughput_for: Duration::from_secs(3),
            throughput_tasks: 64,
            load_waiters: 8,
            // Twice the longest period of a waiter's commands (mongolock's re-check, idle
            // stream read and place refresh: 10 s), so that periodic work is counted.
            load_window: Duration::from_secs(20),
            keepalive_leases: vec![1, 100, 10_000],
            keepalive_ttl: Duration::from_secs(15),
            keepalive_window: Duration::from_secs(15),
            group_sizes: vec![10, 1_000, 10_000],
            memory_leases: 1_000,
            memory_waiters: 200,
            modes: measure::ModeSettings {
                handoffs: vec![(16, 100), (64, 100)],
                hold: modes_hold,
                leases: 100,
                ttl: Duration::from_secs(15),
                window: Duration::from_secs(15),
                concurrent: false,
            },
        }
    }
}

fn main() -> std::process::ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some(emulator::SERVE_FLAG) {
        return match emulator::serve(&argv[1..]) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("emulator: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bench(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn bench(args: Args) -> peers::Result<()> {
    let s = settings(args.quick);
    let started = std::time::Instant::now();
    let run_modes = args.on(suite::SERVER_MODES) && args.selects(Lib::Mongolock);
    let mut out = String::new();
    let mut failed = 0;
    if !args.modes_only() {
        let (tables, f) = libraries(&args, &s).await?;
        out.push_str(&tables);
        failed += f;
    }
    if run_modes {
        let results = modes::run(args.latency, &s).await;
        let (tables, f) = modes::render(&s, &results);
        if args.modes_only() {
            out.push_str(&format!(
                "# mongolock-bench --server-modes ({} mode)\n\nBuild: {}. Cores: {}. \
                 Run time: {:.0} s. {} ms added to every reply.\n\n",
                if args.quick { "quick" } else { "full" },
                if cfg!(debug_assertions) {
                    "debug"
                } else {
                    "release"
                },
                std::thread::available_parallelism().map_or(0, |n| n.get()),
                started.elapsed().as_secs_f64(),
                args.latency.as_millis(),
            ));
        }
        out.push_str(&tables);
        failed += f;
    }
    print!("{out}");
    if failed > 0 {
        return Err(format!("{failed} measurement(s) failed: see \"Errors\" in the tables").into());
    }
    Ok(())
}

/// Every library's measurements (all but the server modes), their tables and plots.
async fn libraries(args: &Args, s: &Settings) -> peers::Result<(String, usize)> {
    let replica_set = Emulator::start(args.latency, Topology::ReplicaSet)
        .await
        .map_err(|e| format!("cannot start the emulator: {e}"))?;
    let standalone = Emulator::start(args.latency, Topology::Standalone)
        .await
        .map_err(|e| format!("cannot start the standalone emulator: {e}"))?;
    let three_members = Emulator::start(args.latency, Topology::ThreeMembers)
        .await
        .map_err(|e| format!("cannot start the three-member set: {e}"))?;
    let servers = suite::Servers {
        replica_set: replica_set.uri().to_string(),
        standalone: standalone.uri().to_string(),
        three_members: three_members.uri().to_string(),
    };
    let started = std::time::Instant::now();
    let mut results = Vec::new();
    for lib in Lib::ALL {
        if !args.selects(lib) {
            continue;
        }
        results.push(suite::run(lib, &servers, s, &|name: &str| args.on(name)).await);
    }
    replica_set.stop().await;
    standalone.stop().await;
    three_members.stop().await;
    // The docs' plots come from a full run of every measurement only: a run of some
    // (`--measure`) would draw the others as missing over them.
    let plots = args.plots.clone().unwrap_or_else(|| {
        if args.quick || args.measure.is_some() {
            std::env::temp_dir().join("mongolock-bench")
        } else {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/img")
        }
    });
    let env = report::Environment {
        quick: args.quick,
        latency: args.latency,
        elapsed: started.elapsed(),
    };
    let written = report::plots(&plots, s, &results)?;
    Ok(report::render(&env, s, &results, &written))
}
