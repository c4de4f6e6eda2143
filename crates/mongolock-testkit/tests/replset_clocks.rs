//! The emulated replica set's clocks: each member's `$$NOW` is the set's clock plus an offset
//! the test sets, so a failover moves `$$NOW` as mongod's would, while the cluster time
//! (`operationTime`) never goes back; and a write's `operationTime` is its own oplog entry's
//! time, also after a write-concern wait. Each test names the mongod source it follows.

use std::time::Duration;

use bson::{Bson, Document, Timestamp, doc};
use mongodb::Client;
use mongolock_testkit::ReplicaSet;

fn operation_time(reply: &Document) -> Timestamp {
    match reply.get("operationTime") {
        Some(Bson::Timestamp(t)) => *t,
        other => panic!("no operationTime: {other:?} in {reply}"),
    }
}

fn order(t: Timestamp) -> (u32, u32) {
    (t.time, t.increment)
}

/// A write that reads `$$NOW` on the primary: returns the `$$NOW` it read (ms) and its
/// reply's `operationTime`. Sent again while the driver has not found the new primary
/// (`run_command` does not retry; a former primary refuses with `NotWritablePrimary`).
async fn write_now(client: &Client, id: i32) -> (i64, Timestamp) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let reply = loop {
        let sent = client
            .database("clocks")
            .run_command(doc! {
                "findAndModify": "c",
                "query": {"_id": id},
                "update": [{"$set": {"at": "$$NOW"}}],
                "upsert": true,
                "new": true,
            })
            .await;
        match sent {
            Ok(reply) => break reply,
            Err(error) if std::time::Instant::now() < until => {
                eprintln!("sent again: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("{error}"),
        }
    };
    let at = reply
        .get_document("value")
        .unwrap()
        .get_datetime("at")
        .unwrap()
        .timestamp_millis();
    (at, operation_time(&reply))
}

/// Steps the primary down (election handoff to a caught-up secondary) and waits for the new
/// primary.
async fn fail_over(set: &ReplicaSet, client: &Client) -> usize {
    let before = set.primary();
    client
        .database("admin")
        .run_command(doc! {"replSetStepDown": 10})
        .await
        .unwrap();
    let after = set.wait_for_primary(Duration::from_secs(10)).await;
    assert!(
        after.is_some() && after != before,
        "{before:?} -> {after:?}"
    );
    after.unwrap()
}

/// A write's reply carries its own oplog entry's time, also when it waited longer for write
/// concern than a later write: mongod's `operationTime` is the client's `lastOp`
/// (`computeOperationTime`, `src/mongo/db/service_entry_point_common.cpp`; MongoDB's manual,
/// `fact-runCommand-results.rst`: "The logical time of the operation"; for a command that
/// wrote nothing, "the timestamp of the most recent entry in the oplog"). Write A waits for a
/// majority (the secondaries lag 600 ms) and times out after 300 ms (`writeConcernError` 64,
/// the write kept), write B runs after it with `w: 1` and is answered first: A's
/// `operationTime` is still before B's. (Before, the emulator took A's times again after the
/// wait, after B's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writes_operation_time_is_its_own_entry_s_after_a_longer_write_concern_wait() {
    let set = ReplicaSet::builder()
        .members(3)
        .lag(Duration::from_millis(600))
        .start()
        .await
        .unwrap();
    let client = set.client();
    let db = client.database("clocks");
    // The collection exists and every member has it.
    db.run_command(doc! {"insert": "c", "documents": [{"_id": 0}], "writeConcern": {"w": 3}})
        .await
        .unwrap();
    let a = {
        let db = db.clone();
        tokio::spawn(async move {
            db.run_command(doc! {
                "insert": "c",
                "documents": [{"_id": "a"}],
                "writeConcern": {"w": "majority", "wtimeout": 300},
            })
            .await
            .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let b = db
        .run_command(doc! {"insert": "c", "documents": [{"_id": "b"}], "writeConcern": {"w": 1}})
        .await
        .unwrap();
    assert!(
        !a.is_finished(),
        "A still waits for the lagging secondaries"
    );
    let a = a.await.unwrap();
    assert_eq!(
        a.get_document("writeConcernError").unwrap().get_i32("code"),
        Ok(64),
        "{a}"
    );
    let (a, b) = (operation_time(&a), operation_time(&b));
    assert!(order(a) < order(b), "A ran first: {a:?} then {b:?}");
    // And a read's operationTime is the newest entry's: B's.
    let read = db.run_command(doc! {"find": "c"}).await.unwrap();
    assert_eq!(order(operation_time(&read)), order(b));
    drop(client);
    set.shutdown().await;
}

/// A failover to a member whose clock is 5 s behind: its `$$NOW` is 5 s behind the former
/// primary's (mongod's `$$NOW` is the member's system clock,
/// `Variables::generateRuntimeConstants`, `src/mongo/db/pipeline/variables.cpp`), while its
/// cluster time, which it moved up to the entries it applied and to the times the members
/// gossip (`LogicalClock::advanceClusterTime`, `src/mongo/db/logical_clock.cpp`), does not go
/// back: a write on it has an `operationTime` after the former primary's, ahead of its own
/// `$$NOW` (a tick takes the system clock's seconds only when they are ahead,
/// `LogicalClock::reserveTicks`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_to_a_clock_behind_operation_time_stays_ahead_of_now() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let client = set.client();
    // Whichever secondary the handoff elects, its clock is behind.
    set.set_clock_offset(1, -5_000);
    set.set_clock_offset(2, -5_000);
    let (old_now, old_time) = write_now(&client, 1).await;
    assert!(
        (old_now - set.shared_clock().now().timestamp_millis()).abs() < 1_000,
        "the former primary's clock is the set's"
    );
    fail_over(&set, &client).await;
    let (new_now, new_time) = write_now(&client, 2).await;
    assert!(
        new_now <= old_now - 4_000,
        "$$NOW went back with the failover: {old_now} -> {new_now}"
    );
    assert!(
        order(new_time) > order(old_time),
        "{old_time:?} -> {new_time:?}"
    );
    assert!(
        i64::from(new_time.time) * 1_000 > new_now + 3_000,
        "operationTime {new_time:?} stays ahead of $$NOW {new_now}"
    );
    drop(client);
    set.shutdown().await;
}

/// A failover to a member whose clock is 5 s ahead: `$$NOW` jumps 5 s forward, and so does
/// the cluster time at the new primary's first write (`LogicalClock::reserveTicks` takes the
/// system clock's seconds when they are ahead). While it was a secondary its clock did not
/// move the set's cluster time: only a write reserves a tick, and a reply that wrote nothing
/// reads the cluster time as it stands (`LogicalClock::getClusterTime`) and gives the newest
/// oplog entry's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_clock_ahead_moves_now_and_operation_time_forward() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let client = set.client();
    // Whichever secondary the handoff elects, its clock is ahead.
    set.set_clock_offset(1, 5_000);
    set.set_clock_offset(2, 5_000);
    let (old_now, old_time) = write_now(&client, 1).await;
    // Gossip has run (the monitor ticks every election timeout / 4).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (old_now2, old_time2) = write_now(&client, 2).await;
    assert!(
        i64::from(old_time2.time) * 1_000 <= old_now2,
        "the secondary's clock ahead did not move the primary's cluster time: {old_time2:?} at {old_now2}"
    );
    assert!(order(old_time2) > order(old_time));
    fail_over(&set, &client).await;
    let (new_now, new_time) = write_now(&client, 3).await;
    assert!(
        new_now >= old_now + 4_900,
        "$$NOW jumped with the failover: {old_now} -> {new_now}"
    );
    assert!(
        i64::from(new_time.time) * 1_000 > old_now2 + 4_000,
        "the cluster time jumped too: {old_time2:?} -> {new_time:?}"
    );
    drop(client);
    set.shutdown().await;
}
