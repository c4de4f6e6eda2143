//! A scheduled job that must run on one host only.
//!
//! `cargo run -p mongolock --example scheduled_job` (on the embedded emulator; against a
//! real server when `MONGODB_URI` is set, where it drops and recreates the database
//! `scheduled_job_example`).
//!
//! Three hosts run the same schedule: at every tick each of them, a few milliseconds apart,
//! tries the mutex "nightly-report" once. The one that gets it checks whether this tick's
//! run is done already (a host whose clock or schedule lagged may come after the winner
//! released), runs the job, and records the run with its fencing token; the others skip the
//! tick. The example checks at the end that every tick ran exactly once, and exits with an
//! error otherwise.

use std::time::Duration;

use bson::{Document, doc};
use mongodb::Collection;
use mongolock::LockClient;
use rand::Rng;

mod common;

const TICKS: u32 = 4;

/// One host's turn at `tick`: `true` if it ran the job.
async fn on_tick(
    locks: &LockClient,
    runs: &Collection<Document>,
    host: &str,
    tick: u32,
) -> mongolock::Result<bool> {
    let mutex = locks
        .mutex("nightly-report")
        .ttl(Duration::from_secs(30))
        .owner(host);
    // One attempt: if another host holds it, that host runs this tick.
    let Some(guard) = mutex.try_acquire().await? else {
        println!("tick {tick}: {host} skips (another host runs it)");
        return Ok(false);
    };
    let done = runs
        .find_one(doc! {"_id": tick})
        .await
        .expect("the store answers");
    if done.is_some() {
        println!("tick {tick}: {host} skips (already run)");
        guard.release().await?;
        return Ok(false);
    }
    // The job; a long one checks `guard.is_lost()` between steps.
    tokio::time::sleep(Duration::from_millis(150)).await;
    if guard.is_lost() {
        println!("tick {tick}: {host} lost its lease: the run is not recorded");
        return Ok(false);
    }
    runs.insert_one(doc! {"_id": tick, "host": host, "token": guard.fencing_token()})
        .await
        .expect("the store answers");
    println!(
        "tick {tick}: {host} ran the job (fencing token {})",
        guard.fencing_token()
    );
    guard.release().await?;
    Ok(true)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let start = common::start("scheduled_job_example").await?;
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
        ));
    }
    for tick in 0..TICKS {
        let turns = hosts.iter().map(|(name, locks, runs)| {
            let (locks, runs) = (locks.clone(), runs.clone());
            let name = *name;
            async move {
                // Schedules are never exactly aligned.
                let lag = rand::rng().random_range(0..40);
                tokio::time::sleep(Duration::from_millis(lag)).await;
                on_tick(&locks, &runs, name, tick).await
            }
        });
        let ran = futures_util::future::try_join_all(turns).await?;
        let times = ran.iter().filter(|&&ran| ran).count();
        if times != 1 {
            return Err(format!("tick {tick} ran {times} times").into());
        }
    }
    let runs = start.db.collection::<Document>("runs");
    let recorded = runs.count_documents(doc! {}).await?;
    println!("every tick ran exactly once ({recorded} runs for {TICKS} ticks)");
    for (_, locks, _) in &hosts {
        locks.shutdown().await;
    }
    Ok(())
}
