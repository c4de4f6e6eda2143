//! The emulator at scale, as a separate process: resident memory with 10,000 held leases
//! and the time of `status` over them.
//!
//! Starts the `mongolock-testsrv` binary given as the first argument (built in the same
//! profile), holds `LEASES` mutex leases through the library's guards (each renewed in the
//! background every second, one keepalive command per tick for all of them), lets them be
//! renewed for `HOLD_SECS`, and prints the server's resident memory (`VmRSS`, and its peak
//! `VmHWM`) and the time of `status` over the whole collection.
//!
//! ```text
//! cargo build --release -p mongolock-testkit --bin mongolock-testsrv --example scale
//! target/release/examples/scale target/release/mongolock-testsrv [LEASES] [HOLD_SECS]
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bson::Document;
use futures_util::{StreamExt, stream};
use mongolock::{Filter, LockClient};

/// `VmRSS` and `VmHWM` of a process, in MiB.
fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let server_bin = args
        .next()
        .expect("usage: scale <mongolock-testsrv> [LEASES] [HOLD_SECS]");
    let leases: usize = args.next().map_or(10_000, |n| n.parse().expect("LEASES"));
    let hold_secs: u64 = args.next().map_or(20, |n| n.parse().expect("HOLD_SECS"));

    let mut server = Command::new(server_bin)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the server");
    let pid = server.id();
    // The first line that tells the address (a wrapper such as a profiler may print first).
    let mut stdout = BufReader::new(server.stdout.take().expect("stdout"));
    let mut addr = String::new();
    let mut line = String::new();
    while stdout.read_line(&mut line).expect("server output") > 0 {
        if let Some(found) = line.trim().strip_prefix("listening on ") {
            addr = found.to_string();
            break;
        }
        line.clear();
    }
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        assert!(!addr.is_empty(), "the server printed no address");
        let uri = format!("mongodb://{addr}/?replicaSet=rs0&maxPoolSize=16");
        let client = mongodb::Client::with_uri_str(&uri).await.expect("client");
        let locks = LockClient::new(client.database("scale").collection::<Document>("locks"));
        locks.create_indexes().await.expect("indexes");
        println!("server at start: rss {:.1} MiB", memory_mib(pid).0);

        let started = Instant::now();
        let guards: Vec<_> = stream::iter(0..leases)
            .map(|i| {
                let locks = locks.clone();
                async move {
                    locks
                        .mutex(format!("resource-{i:06}"))
                        .ttl(Duration::from_secs(3))
                        .acquire()
                        .await
                        .expect("acquire")
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let (rss, _) = memory_mib(pid);
        println!(
            "{} leases acquired in {:.2?}: server rss {rss:.1} MiB",
            guards.len(),
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(hold_secs)).await;
        let (rss, peak) = memory_mib(pid);
        println!("after {hold_secs} s of renewals: server rss {rss:.1} MiB (peak {peak:.1} MiB)");

        for _ in 0..3 {
            let started = Instant::now();
            let held = locks.status(&Filter::default()).await.expect("status");
            println!(
                "status over {} locks: {:.2?}",
                held.len(),
                started.elapsed()
            );
        }
        let lost = guards.iter().filter(|g| g.is_lost()).count();
        println!("leases lost: {lost}");
        drop(guards);
        locks.shutdown().await;
    });
    let _ = server.kill();
    let _ = server.wait();
}
