//! Writes are majority and journaled unless the caller opts out by name; either way every
//! operation reads back what it wrote. What is sent is checked on the wire (command
//! monitoring): on a single node both settings behave alike, so only the commands tell them
//! apart.

mod common;

use bson::{Bson, Document, doc};
use common::{env, secs};
use mongodb::options::WriteConcern;
use mongolock::{Filter, LockClient, LockDetails};

/// The `writeConcern` of every write and the `readConcern` of every read recorded.
fn concerns(commands: &[(String, Document)]) -> (Vec<Document>, Vec<Document>) {
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    for (name, command) in commands {
        if name == "aggregate" {
            reads.push(
                command
                    .get_document("readConcern")
                    .cloned()
                    .unwrap_or_default(),
            );
            continue;
        }
        let mut wc = command
            .get_document("writeConcern")
            .cloned()
            .unwrap_or_else(|_| panic!("{name} has no writeConcern: {command}"));
        let wtimeout = wc.remove("wtimeout");
        assert!(
            matches!(wtimeout, Some(Bson::Int64(ms)) if ms > 0),
            "{name} is not bounded: {command}"
        );
        writes.push(wc);
    }
    (writes, reads)
}

async fn exercise(locks: &LockClient) {
    let grant = locks
        .xlock("r", "g", LockDetails::default().ttl(secs(30)))
        .await
        .unwrap();
    assert_eq!(locks.renew("g", secs(60)).await.unwrap(), 1);
    let held = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held[0].fencing_token(), grant.fencing_token());
    assert!(
        held[0].ttl_remaining().unwrap() > secs(30),
        "renew is read back"
    );
    assert_eq!(locks.unlock("g").await.unwrap(), 1);
}

#[tokio::test]
async fn writes_wait_for_a_journaled_majority_and_reads_read_it() {
    let env = env("majority_wc").await;
    let (monitor, db) = env.monitored().await;
    exercise(&LockClient::new(db.collection("locks"))).await;
    let (writes, reads) = concerns(&monitor.take());
    assert_eq!(writes.len(), 3, "xlock, renew, unlock");
    for wc in writes {
        assert_eq!(wc, doc! { "w": "majority", "j": true });
    }
    assert_eq!(reads, [doc! { "level": "majority" }]);
}

#[tokio::test]
async fn an_unsafe_write_concern_is_sent_as_given_and_still_reads_its_own_writes() {
    let env = env("unsafe_wc").await;
    let (monitor, db) = env.monitored().await;
    let locks = LockClient::builder(db.collection("locks"))
        .unsafe_write_concern(WriteConcern::nodes(1))
        .build()
        .expect("valid settings");
    exercise(&locks).await;
    let (writes, reads) = concerns(&monitor.take());
    assert_eq!(writes.len(), 3, "xlock, renew, unlock");
    for wc in writes {
        assert_eq!(wc, doc! { "w": 1_i64 });
    }
    // A write acknowledged by one node may not be majority-committed yet: a majority read
    // could miss it, so reads are local.
    assert_eq!(reads, [doc! { "level": "local" }]);
    // The default client sees the same locks.
    assert!(
        env.locks
            .status(&Filter::default())
            .await
            .unwrap()
            .is_empty()
    );
}
