//! Change streams on the members of an emulated replica set deliver only majority-committed
//! events, as mongod's do: a `$changeStream` reads at majority read concern whether or not
//! the client asks for it, so a write the primary took alone is not returned until a
//! majority applied it (mongod's jstest `change_stream_require_majority_read_concern.js`:
//! "Test not specifying readConcern defaults to "majority" read concern", a `w: 1` insert
//! with replication stopped leaves the next batch empty, and it is returned once
//! `awaitLastOpCommitted`; the change-streams spec, "Server Specification"), and a write
//! rolled back never was majority-committed, so it is never delivered
//! (`src/mongo/db/repl/rollback_impl.cpp`: rollback recovers to the stable timestamp, which
//! is majority-committed). A change stream reply's `operationTime` is the member's majority
//! commit point (`computeOperationTime`, `src/mongo/db/service_entry_point_common.cpp`: a
//! read at majority read concern answers `getCurrentCommittedSnapshotOpTime()`).

use std::time::{Duration, Instant};

use bson::{Bson, Document, Timestamp, doc};
use mongodb::Client;

use mongolock_testkit::ReplicaSet;

mod set;
use set::{direct, new_primary};

/// A change stream on `d.c` of one member, driven by raw `aggregate` and `getMore`.
struct Stream {
    client: Client,
    id: i64,
    /// Every event delivered so far: its `documentKey._id`, or its `operationType` for an
    /// event of no document.
    seen: Vec<Bson>,
    /// The last batch's `postBatchResumeToken`.
    token: Document,
    /// The last reply's `operationTime`.
    operation_time: Timestamp,
}

impl Stream {
    /// Opens a stream on member `index` (a secondary serves it: on a direct connection the
    /// driver reads with `primaryPreferred`), from now or with the `$changeStream` options
    /// given.
    async fn open(set: &ReplicaSet, index: usize, options: Document) -> Stream {
        let client = direct(set, index);
        let reply = client
            .database("d")
            .run_command(doc! {
                "aggregate": "c",
                "pipeline": [{"$changeStream": options}],
                "cursor": {},
            })
            .await
            .unwrap();
        let mut stream = Stream {
            client,
            id: 0,
            seen: Vec::new(),
            token: Document::new(),
            operation_time: Timestamp {
                time: 0,
                increment: 0,
            },
        };
        stream.take(&reply, "firstBatch");
        stream
    }

    fn take(&mut self, reply: &Document, batch: &str) {
        let cursor = reply.get_document("cursor").unwrap();
        self.id = cursor.get_i64("id").unwrap();
        for event in cursor.get_array(batch).unwrap() {
            let event = event.as_document().unwrap();
            self.seen.push(match event.get_document("documentKey") {
                Ok(key) => key.get("_id").unwrap().clone(),
                Err(_) => event.get("operationType").unwrap().clone(),
            });
        }
        self.token = cursor.get_document("postBatchResumeToken").unwrap().clone();
        self.operation_time = reply.get_timestamp("operationTime").unwrap();
    }

    /// One `getMore` that waits at most `wait` for events; returns how many it delivered.
    async fn get_more(&mut self, wait: Duration) -> usize {
        let before = self.seen.len();
        let reply = self
            .client
            .database("d")
            .run_command(doc! {
                "getMore": self.id,
                "collection": "c",
                "maxTimeMS": wait.as_millis() as i64,
            })
            .await
            .unwrap();
        self.take(&reply, "nextBatch");
        self.seen.len() - before
    }

    /// `getMore`s until `id` was delivered (at most `within`); returns whether it was.
    async fn until_seen(&mut self, id: &str, within: Duration) -> bool {
        let until = Instant::now() + within;
        while !self.saw(id) {
            if Instant::now() >= until {
                return false;
            }
            self.get_more(Duration::from_millis(200)).await;
        }
        true
    }

    fn saw(&self, id: &str) -> bool {
        self.seen.iter().any(|s| s.as_str() == Some(id))
    }
}

async fn insert(client: &Client, id: &str, w: Bson) {
    client
        .database("d")
        .run_command(doc! {
            "insert": "c", "documents": [{"_id": id}], "writeConcern": {"w": w},
        })
        .await
        .unwrap();
}

/// A write taken by a partitioned primary alone (`w: 1`) is never majority-committed: a
/// stream opened on that primary before it, and streams on the other members, do not deliver
/// it while it waits, nor after the rollback undid it; a stream started after the rollback
/// from a time before it (`startAtOperationTime`) does not either. The write the new primary
/// acknowledged with `w: "majority"` is delivered on every member, the rolled-back one too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_partitioned_primary_took_alone_is_never_delivered() {
    let set = set::three_with_quick_elections().await;
    let old = direct(&set, 0);
    insert(&old, "committed", "majority".into()).await;
    let mut streams = Vec::new();
    for member in 0..3 {
        streams.push(Stream::open(&set, member, doc! {}).await);
    }
    let opened_at = streams[0].operation_time;

    set.partition(0);
    insert(&old, "lost", 1.into()).await;
    // Applied on the partitioned primary alone: past its commit point, not delivered. The
    // empty batch's resume token and operation time stay at or before the commit point.
    assert_eq!(streams[0].get_more(Duration::from_millis(300)).await, 0);
    assert!(!streams[0].saw("lost"), "{:?}", streams[0].seen);
    assert!(
        streams[0].operation_time <= opened_at,
        "{:?} ran ahead of the commit point {opened_at:?}",
        streams[0].operation_time
    );

    let elected = new_primary(&set, 0, Duration::from_secs(5)).await;
    insert(&direct(&set, elected), "kept", "majority".into()).await;
    set.heal(0);
    assert!(
        set.wait_for_rollbacks(0, 1, Duration::from_secs(5)).await,
        "no rollback"
    );
    assert_eq!(set.rollbacks(0), (1, 1));
    for (member, stream) in streams.iter_mut().enumerate() {
        assert!(
            stream.until_seen("kept", Duration::from_secs(5)).await,
            "member {member}: {:?}",
            stream.seen
        );
        assert!(!stream.saw("lost"), "member {member}: {:?}", stream.seen);
        // Nothing else: the rollback's own work is no event.
        assert_eq!(stream.seen, vec![Bson::from("kept")], "member {member}");
    }
    let mut from_before = Stream::open(&set, 0, doc! {"startAtOperationTime": opened_at}).await;
    assert!(from_before.until_seen("kept", Duration::from_secs(5)).await);
    assert!(!from_before.saw("lost"), "{:?}", from_before.seen);
    set.shutdown().await;
}

/// A write acknowledged with `w: "majority"` is committed when acknowledged: the stream on
/// the primary delivers it in the next `getMore`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_acknowledged_write_is_delivered() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let mut stream = Stream::open(&set, 0, doc! {}).await;
    insert(&direct(&set, 0), "a", "majority".into()).await;
    assert_eq!(stream.get_more(Duration::from_secs(5)).await, 1);
    assert_eq!(stream.seen, vec![Bson::from("a")]);
    set.shutdown().await;
}

/// A secondary that applied a write delivers it only once the commit point passes it: in a
/// set of five, the primary and member 1 applied it, the other three (lagging) not yet, so
/// its `getMore` returns an empty batch whose `postBatchResumeToken` is not past the commit
/// point (a stream resumed after it with that token delivers the write); once the laggards
/// apply it the waiting `getMore` returns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secondary_delivers_an_event_once_the_commit_point_passes_it() {
    let set = ReplicaSet::builder().members(5).start().await.unwrap();
    let primary = direct(&set, 0);
    insert(&primary, "before", "majority".into()).await;
    let mut stream = Stream::open(&set, 1, doc! {}).await;
    for laggard in 2..5 {
        set.set_lag(laggard, Duration::from_secs(3600));
    }
    insert(&primary, "a", 2.into()).await;
    assert!(set.applied(1) >= set.applied(0));
    assert_eq!(stream.get_more(Duration::from_millis(300)).await, 0);
    let empty_token = stream.token.clone();

    for laggard in 2..5 {
        set.set_lag(laggard, Duration::ZERO);
    }
    assert!(stream.until_seen("a", Duration::from_secs(5)).await);
    assert_eq!(stream.seen, vec![Bson::from("a")]);
    let mut resumed = Stream::open(&set, 1, doc! {"resumeAfter": empty_token}).await;
    assert!(
        resumed.until_seen("a", Duration::from_secs(5)).await,
        "the empty batch's token ran past the event: {:?}",
        resumed.seen
    );
    set.shutdown().await;
}
