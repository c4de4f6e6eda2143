//! A service that leads while its lease lives, and stops leading work the moment it is lost.
//!
//! `cargo run -p mongolock --example leader` (on the embedded emulator; against a real
//! server when `MONGODB_URI` is set, where it drops and recreates the database
//! `leader_example`).
//!
//! Three replicas of one service campaign in the election "scheduler"; the leader does the
//! leading work (here: ticks written to a store with the term as fencing token), and an
//! observer prints every change of leader. The first leader resigns and the next in line
//! leads at once; the second is then deposed by an operator (a force release) and stops at
//! once when it learns it, from `lost()` (at its keeper's next renewal) or from the store
//! refusing a tick because the third, elected meanwhile, wrote with a newer term. A deposed
//! leader's late write, with an older term, is refused.

use std::time::Duration;

use bson::{Document, doc};
use futures_util::StreamExt;
use mongodb::Collection;
use mongolock::{ErrorKind, LockClient};

mod common;

/// Writes a tick of `leader` to the store, only if `term` is not older than the last
/// writer's: what a store protected by fencing tokens does.
async fn fenced_tick(store: &Collection<Document>, term: i64, leader: &str) -> bool {
    let written = store
        .update_one(
            doc! {"_id": "schedule", "term": {"$lte": term}},
            doc! {"$set": {"term": term, "leader": leader}, "$inc": {"ticks": 1}},
        )
        .await
        .expect("the store answers");
    written.matched_count == 1
}

/// One replica: campaigns, leads until it resigns after `lead_for` or its leadership is
/// lost, and campaigns again, `rounds` times.
async fn replica(
    locks: LockClient,
    store: Collection<Document>,
    name: &'static str,
    lead_for: Duration,
    rounds: u32,
) -> mongolock::Result<()> {
    let election = locks.election("scheduler").ttl(Duration::from_secs(5));
    for _ in 0..rounds {
        // Leads while `work` runs, and resigns when it returns; leadership lost first stops
        // the work at once (someone else may lead already) and says so.
        let led = election
            .lead(name, async |leading| {
                let term = leading.term();
                println!("{name}: leading, term {term}");
                // Until the store refuses a tick: a newer leader wrote (this one was deposed
                // and has not heard of it yet).
                let ticks = async {
                    while fenced_tick(&store, term, name).await {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                };
                tokio::select! {
                    () = tokio::time::sleep(lead_for) => println!("{name}: resigning"),
                    () = ticks => {
                        println!("{name}: the store refused a tick (a newer term wrote): stopped");
                    }
                }
                Ok::<_, mongolock::Error>(())
            })
            .await;
        match led {
            Ok(()) => {}
            Err(error) if matches!(error.kind(), ErrorKind::LeaseLost { .. }) => {
                println!("{name}: leadership lost ({error}), stopped at once");
            }
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let start = common::start("leader_example").await?;
    let locks = start.locks.clone();
    let store: Collection<Document> = start.db.collection("store");
    store
        .insert_one(doc! {"_id": "schedule", "term": 0_i64, "ticks": 0})
        .await?;

    let observer = {
        let election = locks.election("scheduler");
        tokio::spawn(async move {
            let mut changes = Box::pin(election.observe());
            while let Some(change) = changes.next().await {
                match change {
                    Ok(Some(leader)) => {
                        println!("observer: {} leads, term {}", leader.value(), leader.term())
                    }
                    Ok(None) => println!("observer: nobody leads"),
                    Err(error) => println!("observer: {error}"),
                }
            }
        })
    };

    // The first replica leads for half a second and resigns; the others wait in line.
    let a = tokio::spawn(replica(
        locks.clone(),
        store.clone(),
        "replica-a",
        Duration::from_millis(500),
        1,
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = tokio::spawn(replica(
        locks.clone(),
        store.clone(),
        "replica-b",
        Duration::from_secs(60),
        1,
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let c = tokio::spawn(replica(
        locks.clone(),
        store.clone(),
        "replica-c",
        Duration::from_millis(300),
        1,
    ));
    a.await??;
    // replica-b leads now, for a minute unless deposed: an operator breaks its leadership.
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!("operator: force release of the election");
    locks.force_release("scheduler").await?;
    b.await??;
    c.await??;

    let schedule = store
        .find_one(doc! {"_id": "schedule"})
        .await?
        .expect("the store's document");
    println!(
        "store: {} ticks, last by {} in term {}",
        schedule.get_i32("ticks")?,
        schedule.get_str("leader")?,
        schedule.get_i64("term")?
    );
    // A deposed leader's late write, with the first term: refused.
    assert!(
        !fenced_tick(&store, 1, "late").await,
        "an old term is refused"
    );
    println!("store: a late write with an old term is refused");
    observer.abort();
    // The lock client, then the driver's client, then the emulator.
    start.shutdown().await;
    Ok(())
}
