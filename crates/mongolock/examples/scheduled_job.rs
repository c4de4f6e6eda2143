//! A scheduled job that must run at most once per period, on one of several hosts.
//!
//! `cargo run -p mongolock --example scheduled_job` (on the embedded emulator; against a
//! real server when `MONGODB_URI` is set, where it drops and recreates the database
//! `scheduled_job_example`).
//!
//! Three hosts run the same schedule (here a period of 1.5 s; a day in real life). At every
//! tick each of them tries the mutex "nightly-report" once, their timers a few milliseconds
//! apart, and one of them fires late, after the winner's job is done. The mutex has a
//! minimum hold longer than the spread of the hosts' timers and shorter than the period less
//! that spread: the winner releases it when the job ends,
//! but the lock stays taken until its grant plus the hold, by the server's clock, so the
//! late host finds it taken and skips the tick. Nothing reads a host's clock, and no record
//! of past runs is needed to keep a late host out (a host that crashed mid-job leaves the
//! lock to its TTL, and its lock-delay if it has one; the hold, which applies when the holder
//! lets go, does not cover that: give a lock-delay to cover it too).
//!
//! Each run is recorded with its fencing token, only so that the example can check at the
//! end that every tick ran exactly once; it exits with an error otherwise.

use std::time::Duration;

use bson::{Document, doc};
use mongodb::Collection;
use mongolock::LockClient;
use rand::Rng;

mod common;

const TICKS: u32 = 4;
/// The schedule's period.
const PERIOD: Duration = Duration::from_millis(1_500);
/// The minimum hold: longer than the spread of the hosts' timers (the late host fires
/// [`LATE`] after the others, and must find the lock taken), and shorter than the period
/// less that spread (the next period's first host, firing as much earlier in its period as
/// tonight's winner fired late, must find it free).
const HOLD: Duration = Duration::from_millis(1_000);
/// How late the late host's timer fires, after the winner's job is done.
const LATE: Duration = Duration::from_millis(400);
/// How long the job takes.
const JOB: Duration = Duration::from_millis(150);

/// One host's turn at `tick`: `true` if it ran the job.
async fn on_tick(
    locks: &LockClient,
    runs: &Collection<Document>,
    host: &str,
    tick: u32,
) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
    let mutex = locks
        .mutex("nightly-report")
        .ttl(Duration::from_secs(30))
        .min_hold(HOLD)
        .owner(host);
    // One attempt: if the lock is taken, another host runs (or ran) this period's job.
    let Some(guard) = mutex.try_acquire().await? else {
        println!("tick {tick}: {host} skips (another host runs or ran it)");
        return Ok(false);
    };
    // The job; a long one checks `guard.is_lost()` between steps and hands
    // `guard.fencing_token()` to what it writes.
    tokio::time::sleep(JOB).await;
    runs.insert_one(doc! { "tick": tick, "host": host, "token": guard.fencing_token() })
        .await?;
    println!(
        "tick {tick}: {host} ran the job (fencing token {})",
        guard.fencing_token()
    );
    // Released at once; the lock stays taken for the rest of the hold.
    guard.release().await?;
    Ok(true)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let start = common::start("scheduled_job_example")
        .await
        .map_err(|e| e.to_string())?;
    let uri = &start.uri;

    // Three hosts: each with its own connection and lock client, as separate processes are.
    let mut hosts = Vec::new();
    for name in ["host-a", "host-b", "host-c"] {
        let client = mongodb::Client::with_uri_str(uri).await?;
        let db = client.database("scheduled_job_example");
        hosts.push((
            name,
            LockClient::new(db.collection("locks")),
            db.collection::<Document>("runs"),
            client,
        ));
    }
    let mut schedule = tokio::time::interval(PERIOD);
    for tick in 0..TICKS {
        schedule.tick().await;
        let late_host = rand::rng().random_range(0..hosts.len());
        let turns = hosts.iter().enumerate().map(|(i, (name, locks, runs, _))| {
            let (locks, runs) = (locks.clone(), runs.clone());
            let name = *name;
            async move {
                // Timers are never exactly aligned, and one fires after the job is done.
                let lag = match i == late_host {
                    true => LATE,
                    false => Duration::from_millis(rand::rng().random_range(0..40)),
                };
                tokio::time::sleep(lag).await;
                on_tick(&locks, &runs, name, tick).await
            }
        });
        futures_util::future::try_join_all(turns).await?;
    }
    let runs = start.db.collection::<Document>("runs");
    for tick in 0..TICKS {
        let times = runs.count_documents(doc! { "tick": tick }).await?;
        if times != 1 {
            return Err(format!("tick {tick} ran {times} times").into());
        }
    }
    println!("every tick ran exactly once, late timers included ({TICKS} ticks)");
    // Each host's lock client first (it sends what it still owes), then its driver client.
    for (_, locks, _, client) in hosts {
        locks.shutdown().await;
        client.shutdown().await;
    }
    start.shutdown().await;
    Ok(())
}
