//! A read at `readConcern: {level: "majority"}` on a member of an emulated replica set reads
//! the member's data as of its majority commit point, as mongod's does: "Each replica set
//! member maintains, in memory, a view of the data at the majority-commit point [...] To
//! fulfill read concern "majority", the node returns data from this view" (MongoDB's manual,
//! "Read Concern "majority"", `reference/read-concern-majority`: "the data read has been
//! acknowledged by a majority of the replica set members. The documents read are durable
//! and guaranteed to not roll back"). The read does not wait for newer writes to commit: it
//! answers the committed version at once. A write a partitioned primary took alone (`w: 1`)
//! is visible to its local reads only, and once the rollback undid it to neither; a secondary
//! whose applied writes are ahead of the commit point serves the committed version. A server
//! outside a set reads its latest data at every level. A majority read's `operationTime` is
//! the commit point's (`computeOperationTime`, `src/mongo/db/service_entry_point_common.cpp`;
//! jstest `jstests/replsets/operation_time_read_and_write_concern.js`). `linearizable` (a read mongod confirms
//! with a majority write on the primary) is not emulated on a set member and is refused, as
//! is any other command than `find`, `count`, `distinct` and `aggregate` at `majority`
//! (`InvalidOptions`, as mongod refuses a `local`-only command such as `ping` at `majority`:
//! jstest `jstests/noPassthrough/read_majority.js`).

use std::time::{Duration, Instant};

use bson::{Bson, Document, Timestamp, doc};
use mongodb::Client;

use mongolock_testkit::{ReplicaSet, TestServer};

mod set;
use set::{direct, new_primary};

fn read_concern(level: &str) -> Document {
    doc! {"level": level}
}

/// `find` on `d.c` at `level`, sorted by `_id`.
async fn find(client: &Client, level: &str) -> Vec<Document> {
    try_find(client, level).await.unwrap()
}

/// `find` on `d.c` at `level`, sorted by `_id`, or its error (a member rolling back
/// refuses reads).
async fn try_find(client: &Client, level: &str) -> mongodb::error::Result<Vec<Document>> {
    let reply = client
        .database("d")
        .run_command(doc! {
            "find": "c", "sort": {"_id": 1}, "readConcern": read_concern(level),
        })
        .await?;
    let cursor = reply.get_document("cursor").unwrap();
    assert_eq!(cursor.get_i64("id").unwrap(), 0, "one batch");
    Ok((cursor.get_array("firstBatch").unwrap().iter())
        .map(|d| d.as_document().unwrap().clone())
        .collect())
}

/// What the other read commands answer at `level`: `aggregate`'s documents (sorted by
/// `_id`), `count`, and `distinct` of `v`.
async fn other_reads(client: &Client, level: &str) -> (Vec<Document>, i32, Vec<Bson>) {
    let db = client.database("d");
    let reply = db
        .run_command(doc! {
            "aggregate": "c",
            "pipeline": [{"$sort": {"_id": 1}}],
            "cursor": {},
            "readConcern": read_concern(level),
        })
        .await
        .unwrap();
    let aggregated = (reply.get_document("cursor").unwrap())
        .get_array("firstBatch")
        .unwrap()
        .iter()
        .map(|d| d.as_document().unwrap().clone())
        .collect();
    let reply = db
        .run_command(doc! {"count": "c", "readConcern": read_concern(level)})
        .await
        .unwrap();
    let count = reply.get_i32("n").unwrap();
    let reply = db
        .run_command(doc! {"distinct": "c", "key": "v", "readConcern": read_concern(level)})
        .await
        .unwrap();
    let mut values = reply.get_array("values").unwrap().clone();
    values.sort_by_key(|v| format!("{v}"));
    (aggregated, count, values)
}

/// Inserts `{_id: id, v}` with write concern `w` (with a `wtimeout`, so that a set that
/// stops replicating fails the test rather than hanging it); returns the reply's
/// `operationTime`.
async fn insert(client: &Client, id: &str, v: i32, w: Bson) -> Timestamp {
    let reply = client
        .database("d")
        .run_command(doc! {
            "insert": "c", "documents": [{"_id": id, "v": v}],
            "writeConcern": {"w": w, "wtimeout": 10_000},
        })
        .await
        .unwrap();
    assert!(!reply.contains_key("writeConcernError"), "{reply}");
    reply.get_timestamp("operationTime").unwrap()
}

/// The `operationTime` of a `find` on `d.c` at `level`.
async fn find_time(client: &Client, level: &str) -> Timestamp {
    let reply = client
        .database("d")
        .run_command(doc! {"find": "c", "readConcern": read_concern(level)})
        .await
        .unwrap();
    reply.get_timestamp("operationTime").unwrap()
}

async fn set_v(client: &Client, id: &str, v: i32, w: Bson) {
    let reply = client
        .database("d")
        .run_command(doc! {
            "update": "c",
            "updates": [{"q": {"_id": id}, "u": {"$set": {"v": v}}}],
            "writeConcern": {"w": w, "wtimeout": 10_000},
        })
        .await
        .unwrap();
    assert_eq!(reply.get_i32("nModified").unwrap(), 1, "{reply}");
    assert!(!reply.contains_key("writeConcernError"), "{reply}");
}

/// Polls `read` until it answers `expected` (at most `within`); returns the last answer.
async fn until_found<F, Fut>(within: Duration, expected: &[Document], mut read: F) -> Vec<Document>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Vec<Document>>,
{
    let until = Instant::now() + within;
    loop {
        let found = read().await;
        if found == expected || Instant::now() >= until {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// (a) A partitioned primary's `w: 1` insert and update are visible to its local reads, not
/// to its majority reads, which answer the last committed version at once (`find`,
/// `aggregate`, `count`, `distinct`); after the heal and the rollback neither level shows
/// them, on the old primary nor on the new one, and the new primary's majority write is
/// seen at both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_primary_s_majority_read_answers_the_committed_version() {
    let set = set::three_with_quick_elections().await;
    let old = direct(&set, 0);
    let committed_at = insert(&old, "a", 1, "majority".into()).await;
    let committed = vec![doc! {"_id": "a", "v": 1}];
    assert_eq!(find(&old, "majority").await, committed);

    set.partition(0);
    set_v(&old, "a", 2, 1.into()).await;
    let lost_at = insert(&old, "lost", 9, 1.into()).await;
    assert!(lost_at > committed_at);
    let uncommitted = vec![doc! {"_id": "a", "v": 2}, doc! {"_id": "lost", "v": 9}];
    assert_eq!(find(&old, "local").await, uncommitted);
    // Answered at once, though the commit point cannot move while it is partitioned.
    assert_eq!(find(&old, "majority").await, committed);
    // Its `operationTime` is the commit point's, a local read's the newest entry's, as
    // mongod's (`computeOperationTime`; jstest
    // `jstests/replsets/operation_time_read_and_write_concern.js`).
    assert_eq!(find_time(&old, "majority").await, committed_at);
    assert_eq!(find_time(&old, "local").await, lost_at);
    assert_eq!(
        other_reads(&old, "majority").await,
        (committed.clone(), 1, vec![Bson::Int32(1)])
    );
    assert_eq!(
        other_reads(&old, "local").await,
        (uncommitted.clone(), 2, vec![Bson::Int32(2), Bson::Int32(9)])
    );

    let elected = new_primary(&set, 0, Duration::from_secs(5)).await;
    let new = direct(&set, elected);
    assert_eq!(find(&new, "majority").await, committed);
    insert(&new, "kept", 3, "majority".into()).await;
    set.heal(0);
    assert!(
        set.wait_for_rollbacks(0, 1, Duration::from_secs(5)).await,
        "no rollback"
    );
    let after = vec![doc! {"_id": "a", "v": 1}, doc! {"_id": "kept", "v": 3}];
    for client in [&old, &new] {
        for level in ["local", "majority"] {
            let found = until_found(Duration::from_secs(5), &after, || async {
                try_find(client, level).await.unwrap_or_default()
            })
            .await;
            assert_eq!(found, after, "{level}");
        }
    }
    set.shutdown().await;
}

/// (b) A write acknowledged with `w: "majority"` is committed when acknowledged: the next
/// majority read on the primary sees it (its `operationTime` the write's), the update too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_acknowledged_write_is_read_at_majority_at_once() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let primary = direct(&set, 0);
    let written_at = insert(&primary, "a", 1, "majority".into()).await;
    assert_eq!(
        find(&primary, "majority").await,
        [doc! {"_id": "a", "v": 1}]
    );
    assert_eq!(find_time(&primary, "majority").await, written_at);
    set_v(&primary, "a", 2, "majority".into()).await;
    assert_eq!(
        find(&primary, "majority").await,
        [doc! {"_id": "a", "v": 2}]
    );
    set.shutdown().await;
}

/// (c) A secondary whose applied writes are ahead of the commit point serves the committed
/// version at majority and its applied one at local: in a set of five, the primary and
/// member 1 applied the update (`w: 2`), the three others (lagging) not yet. Once they
/// apply it, member 1's majority read answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secondary_ahead_of_the_commit_point_serves_the_committed_version() {
    let set = ReplicaSet::builder().members(5).start().await.unwrap();
    let primary = direct(&set, 0);
    insert(&primary, "a", 1, "majority".into()).await;
    for laggard in 2..5 {
        set.set_lag(laggard, Duration::from_secs(3600));
    }
    set_v(&primary, "a", 2, 2.into()).await;
    assert!(set.applied(1) >= set.applied(0));
    let secondary = direct(&set, 1);
    assert_eq!(find(&secondary, "local").await, [doc! {"_id": "a", "v": 2}]);
    assert_eq!(
        find(&secondary, "majority").await,
        [doc! {"_id": "a", "v": 1}]
    );
    assert_eq!(
        find(&primary, "majority").await,
        [doc! {"_id": "a", "v": 1}]
    );

    for laggard in 2..5 {
        set.set_lag(laggard, Duration::ZERO);
    }
    let updated = [doc! {"_id": "a", "v": 2}];
    let found = until_found(Duration::from_secs(5), &updated, || {
        find(&secondary, "majority")
    })
    .await;
    assert_eq!(found, updated);
    set.shutdown().await;
}

/// On a set member, `linearizable` is refused (mongod serves it only on a primary that
/// confirms it still is one with a majority write; not emulated), and so is a command the
/// emulator does not read at the commit point, rather than answered from local data: both
/// with `InvalidOptions` (72).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_member_does_not_read_at_the_commit_point_is_refused() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let primary = direct(&set, 0);
    insert(&primary, "a", 1, "majority".into()).await;
    let db = primary.database("d");
    for cmd in [
        doc! {"find": "c", "readConcern": read_concern("linearizable")},
        doc! {"listCollections": 1, "readConcern": read_concern("majority")},
    ] {
        let error = db.run_command(cmd.clone()).await.unwrap_err();
        let code = match *error.kind {
            mongodb::error::ErrorKind::Command(ref e) => e.code,
            ref other => panic!("{cmd}: {other:?}"),
        };
        assert_eq!(code, 72, "{cmd}: {error}");
    }
    // `local` and `available` read the member's data as they did.
    assert_eq!(
        find(&primary, "available").await,
        [doc! {"_id": "a", "v": 1}]
    );
    set.shutdown().await;
}

/// A server outside an emulated set reads its latest write at majority, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_s_majority_read_sees_the_latest_write() {
    let server = TestServer::start().await.unwrap();
    let client = server.client();
    insert(&client, "a", 1, 1.into()).await;
    set_v(&client, "a", 2, 1.into()).await;
    assert_eq!(find(&client, "majority").await, [doc! {"_id": "a", "v": 2}]);
    assert_eq!(
        other_reads(&client, "majority").await,
        (vec![doc! {"_id": "a", "v": 2}], 1, vec![Bson::Int32(2)])
    );
    assert_eq!(
        find(&client, "linearizable").await,
        [doc! {"_id": "a", "v": 2}]
    );
}
