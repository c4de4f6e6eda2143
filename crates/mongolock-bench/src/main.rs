//! Side-by-side benchmarks of `mongolock` and the other Rust MongoDB lock crates from
//! crates.io (`mongodb-lock`, `mongo-lock-async`, `distributed-lock-mongo`), in one process,
//! against one in-process `mongolock-testkit` emulator with the same injected latency per
//! round trip.
//!
//! ```text
//! cargo run -p mongolock-bench --release             # full run (the figures in docs/benchmarks.md)
//! cargo run -p mongolock-bench -- --quick            # CI: a debug build is enough
//! cargo run -p mongolock-bench -- --latency-ms 5     # another round trip
//! ```
//!
//! What is measured, per library (each with its own driver clients and database):
//!
//! - commands (round trips) per uncontended acquire + release, per refused attempt and per
//!   renew of K held locks, counted with the driver's command monitoring (`CommandStarted`
//!   events for the library's database);
//! - uncontended acquire + release latency, p50 and p99;
//! - handoff latency with 1 and 8 waiters on one resource: from the holder's release call to
//!   the moment the next waiter's acquire returns, each waiter with its own client, waiting
//!   the way the library waits.
//!
//! The tables go to standard output as Markdown; progress goes to standard error.

mod measure;
mod monitor;
mod peers;
mod report;

use std::time::Duration;

use measure::Settings;
use peers::Lib;

struct Args {
    quick: bool,
    latency: Duration,
    only: Option<Vec<String>>,
}

const USAGE: &str = "usage: mongolock-bench [--quick] [--latency-ms N] [--only LIB[,LIB..]]
  --quick         short run for CI (about a minute in a debug build)
  --latency-ms N  latency the emulator adds to every reply (default 1)
  --only          run only these libraries: mongolock, mongodb-lock, mongo-lock-async,
                  distributed-lock-mongo";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        quick: false,
        latency: Duration::from_millis(1),
        only: None,
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
            // `cargo bench` passes `--bench`.
            "--bench" => {}
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn settings(quick: bool) -> Settings {
    if quick {
        Settings {
            iterations: 30,
            failed_attempts: 3,
            handoffs: 10,
            waiters: vec![1, 8],
            renew_sizes: vec![1, 100],
            hold: Duration::from_millis(10)..Duration::from_millis(510),
            startup: Duration::from_millis(300),
            handoff_limit: Duration::from_secs(60),
        }
    } else {
        Settings {
            iterations: 200,
            failed_attempts: 10,
            handoffs: 100,
            waiters: vec![1, 8],
            renew_sizes: vec![1, 100],
            hold: Duration::from_millis(10)..Duration::from_millis(510),
            startup: Duration::from_millis(300),
            handoff_limit: Duration::from_secs(300),
        }
    }
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    let s = settings(args.quick);
    let server = match mongolock_testkit::TestServer::builder()
        .latency(args.latency)
        .start()
        .await
    {
        Ok(server) => server,
        Err(e) => {
            eprintln!("cannot start the emulator: {e}");
            std::process::exit(1);
        }
    };
    let uri = server.uri();
    let started = std::time::Instant::now();
    let mut results = Vec::new();
    for lib in Lib::ALL {
        if let Some(only) = &args.only
            && !only.iter().any(|o| lib.label().starts_with(o.as_str()))
        {
            continue;
        }
        results.push(measure::run(lib, &uri, &s).await);
    }
    let env = report::Environment {
        quick: args.quick,
        latency: args.latency,
        elapsed: started.elapsed(),
    };
    print!("{}", report::render(&env, &s, &results));
    server.shutdown().await;
}
