//! The low-level API on the embedded emulator, start to finish, in a few seconds (the main demo is `mongolock demo`).
//!
//! `cargo run -p mongolock --example demo`
//!
//! Four workers race for one exclusive lock; readers share a capped lock; a holder "crashes"
//! and its lease runs out on the server's clock (moved forward, not waited for); and the
//! fencing token stops the crashed holder's late write.

use std::time::Duration;

use bson::{Document, doc};
use mongodb::Collection;
use mongolock::{AcquireRequest, Attempt, ErrorKind, Filter, LockClient, LockDetails};
use mongolock_testkit::TestServer;

/// A fresh lock id for one holder: a lock id names one holder and is never shared, so each
/// run of a worker gets its own (the host name goes in the owner field, for people).
fn new_lock_id(host: &str) -> String {
    format!("{host}-{}", bson::oid::ObjectId::new())
}

/// Writes `value` to the guarded report only if `token` is newer than the last writer's:
/// what a store protected by fencing tokens does.
async fn fenced_write(report: &Collection<Document>, token: i64, value: &str) -> bool {
    let result = report
        .update_one(
            doc! {"_id": "report", "token": {"$lt": token}},
            doc! {"$set": {"token": token, "value": value}},
        )
        .await
        .expect("the emulator answers");
    result.modified_count == 1
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = TestServer::start().await?;
    println!("emulator listening at {}", server.uri());
    let db = server.client().database("demo");
    let locks = LockClient::new(db.collection("locks"));
    locks.create_indexes().await?;
    let report: Collection<Document> = db.collection("report");
    report
        .insert_one(doc! {"_id": "report", "token": 0_i64, "value": ""})
        .await?;

    println!("\n1. Four workers, one exclusive lock: exactly one holder at a time.");
    let mut workers = Vec::new();
    for name in ["host-a", "host-b", "host-c", "host-d"] {
        let (locks, report) = (locks.clone(), report.clone());
        workers.push(tokio::spawn(async move {
            let mut runs = 0;
            while runs < 2 {
                let details = LockDetails::default()
                    .ttl(Duration::from_secs(30))
                    .owner(name);
                let lock_id = new_lock_id(name);
                let request = AcquireRequest::exclusive("nightly-report", &lock_id, details);
                match locks.acquire(&request).await? {
                    Attempt::Granted(grant) => {
                        let token = grant.fencing_token();
                        println!("   {name} holds nightly-report, fencing token {token}");
                        assert!(
                            fenced_write(&report, token, name).await,
                            "a newer token wins"
                        );
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        locks.release(&grant).await?;
                        runs += 1;
                    }
                    Attempt::Contended(_) => tokio::time::sleep(Duration::from_millis(2)).await,
                    other => panic!("{name}: a fresh lock id cannot get {other:?}"),
                }
            }
            Ok::<_, mongolock::Error>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }

    println!("\n2. Readers share a lock capped at 2; a third is refused and told who holds it.");
    let readers = [new_lock_id("reader-1"), new_lock_id("reader-2")];
    for reader in &readers {
        let _ = locks
            .slock(
                "catalog",
                reader,
                LockDetails::default().owner(reader),
                Some(2),
            )
            .await?;
        println!("   {reader} reads catalog");
    }
    match locks
        .slock(
            "catalog",
            &new_lock_id("reader-3"),
            LockDetails::default(),
            Some(2),
        )
        .await
    {
        Err(error) => match error.kind() {
            ErrorKind::AlreadyLocked { holders, .. } => {
                let ids: Vec<&str> = holders.iter().map(|h| h.lock_id()).collect();
                println!("   reader-3 refused: held by {ids:?}");
            }
            other => return Err(format!("unexpected error: {other:?}").into()),
        },
        Ok(_) => return Err("a third reader was let in past the cap".into()),
    }
    for reader in &readers {
        locks.unlock(reader).await?;
    }

    println!("\n3. A holder crashes; its 30 s lease ends by the server's clock.");
    let (host_a, host_b) = (new_lock_id("host-a"), new_lock_id("host-b"));
    let crashed = locks
        .xlock(
            "nightly-report",
            &host_a,
            LockDetails::default().ttl(Duration::from_secs(30)),
        )
        .await?;
    println!(
        "   host-a holds nightly-report (token {}) and stops responding",
        crashed.fencing_token()
    );
    if let Err(error) = locks
        .xlock("nightly-report", &host_b, LockDetails::default())
        .await
    {
        println!("   host-b refused: {error}");
    }
    server.clock().advance(Duration::from_secs(31));
    println!("   ... 31 s later on the server's clock ...");
    let next = locks
        .xlock(
            "nightly-report",
            &host_b,
            LockDetails::default().ttl(Duration::from_secs(30)),
        )
        .await?;
    println!(
        "   host-b holds nightly-report with token {}",
        next.fencing_token()
    );
    assert!(fenced_write(&report, next.fencing_token(), "host-b").await);
    let late = fenced_write(&report, crashed.fencing_token(), "host-a (late)").await;
    println!(
        "   host-a wakes up and writes with its old token: {}",
        if late { "accepted" } else { "rejected" }
    );
    assert!(!late, "a stale token must be rejected");

    println!("\n4. Status, then purge.");
    for status in locks.status(&Filter::default()).await? {
        println!(
            "   {} held by {} ({:?}), token {}, {:?} left",
            status.resource(),
            status.lock_id(),
            status.kind(),
            status.fencing_token(),
            status.ttl_remaining().unwrap_or_default(),
        );
    }
    server.clock().advance(Duration::from_secs(31));
    let purged = locks.purge().await?;
    println!(
        "   purged the expired locks of {} resource(s); a live lock is never purged",
        purged.resources()
    );
    server.shutdown().await;
    println!("\ndone");
    Ok(())
}
