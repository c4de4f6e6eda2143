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
    /// Every event delivered so far, whole, in the same order.
    events: Vec<Document>,
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
            events: Vec::new(),
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
            self.events.push(event.clone());
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

    /// The delivered event of `id`.
    fn event_of(&self, id: &str) -> &Document {
        let at = (self.seen.iter().position(|s| s.as_str() == Some(id)))
            .unwrap_or_else(|| panic!("{id} was not delivered: {:?}", self.seen));
        &self.events[at]
    }

    /// The resume token (`_id`) of the delivered event of `id`.
    fn token_of(&self, id: &str) -> Document {
        self.event_of(id).get_document("_id").unwrap().clone()
    }
}

async fn insert(client: &Client, id: &str, w: Bson) {
    insert_into(client, "c", id, w).await;
}

async fn insert_into(client: &Client, coll: &str, id: &str, w: Bson) {
    client
        .database("d")
        .run_command(doc! {
            "insert": coll, "documents": [{"_id": id}], "writeConcern": {"w": w},
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

/// `replSetStepDown` on the primary behind `client` (a direct connection): with election
/// handoff the caught-up secondary is elected at once.
async fn step_down(client: &Client) {
    client
        .database("admin")
        .run_command(doc! {"replSetStepDown": 60})
        .await
        .unwrap();
}

/// Three members whose primary, member 0, went through a rollback before: cut off, it took
/// a `w: 1` write alone ("lost"), the others elected a primary that wrote "kept", and once
/// healed member 0 rolled back, caught up and was elected again when that primary stepped
/// down. Member 0's change log still holds the write the rollback undid (marked undone), so
/// it counts one event more than the other members for the same history: a position in its
/// log names another event on the others.
async fn primary_after_a_rollback() -> ReplicaSet {
    let set = set::three_with_quick_elections().await;
    insert(&direct(&set, 0), "committed", "majority".into()).await;
    set.partition(0);
    insert(&direct(&set, 0), "lost", 1.into()).await;
    let elected = new_primary(&set, 0, Duration::from_secs(5)).await;
    let other = direct(&set, elected);
    insert(&other, "kept", "majority".into()).await;
    set.heal(0);
    assert!(
        set.wait_for_rollbacks(0, 1, Duration::from_secs(5)).await,
        "no rollback"
    );
    step_down(&other).await;
    // The handoff goes to the first caught-up electable member: member 0.
    assert_eq!(set.wait_for_primary(Duration::from_secs(5)).await, Some(0));
    set
}

/// A resume token names the same event on every member, and a stream resumed with it on
/// any member continues right after that event. mongod's token encodes the event's cluster
/// time (its oplog entry's `ts`) and identity (`src/mongo/db/pipeline/resume_token.cpp`,
/// `ResumeToken(const ResumeTokenData&)`: clusterTime, version, tokenType, txnOpIndex,
/// fromInvalidate, uuid, eventIdentifier), and resuming scans the member's oplog from that
/// time, swallows the event and returns what follows
/// (`document_source_change_stream_ensure_resume_token_present.cpp`; the change-streams
/// spec, "resumeAfter": "only changes starting with the log entry immediately *after* the
/// provided token will be returned"). So after a step-down, `resumeAfter` (or
/// `startAfter`) the token of an event the old primary delivered delivers exactly the
/// events after it on the new primary and on the other secondary, none skipped nor
/// repeated, although the members' own logs count their events differently; and each
/// event carries the same token on every member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_s_token_resumes_right_after_it_on_the_new_primary() {
    let set = primary_after_a_rollback().await;
    let primary = direct(&set, 0);
    let mut stream = Stream::open(&set, 0, doc! {}).await;
    insert(&primary, "e1", "majority".into()).await;
    assert!(stream.until_seen("e1", Duration::from_secs(5)).await);
    let token = stream.token_of("e1");
    insert(&primary, "e2", "majority".into()).await;
    insert(&primary, "e3", "majority".into()).await;
    step_down(&primary).await;
    let new = new_primary(&set, 0, Duration::from_secs(5)).await;
    let third = 3 - new;
    let mut resumed = Stream::open(&set, new, doc! {"resumeAfter": token.clone()}).await;
    let mut started = Stream::open(&set, third, doc! {"startAfter": token}).await;
    for (member, resumed) in [(new, &mut resumed), (third, &mut started)] {
        assert!(
            resumed.until_seen("e3", Duration::from_secs(5)).await,
            "member {member}: {:?}",
            resumed.seen
        );
        assert_eq!(
            resumed.seen,
            vec![Bson::from("e2"), Bson::from("e3")],
            "member {member}"
        );
    }
    // The stream on the old primary (a secondary now) goes on, with the same tokens.
    assert!(stream.until_seen("e3", Duration::from_secs(5)).await);
    for id in ["e2", "e3"] {
        assert_eq!(stream.token_of(id), resumed.token_of(id), "{id}");
        assert_eq!(stream.token_of(id), started.token_of(id), "{id}");
    }
    set.shutdown().await;
}

/// A `postBatchResumeToken` that passed the last event (the batch read only another
/// collection's writes) is a high-water mark: mongod makes it from the cluster time of the
/// last oplog entry the stream read (`src/mongo/db/pipeline/plan_executor_pipeline.cpp`,
/// `_performChangeStreamsAccounting`: `ResumeToken::makeHighWaterMarkToken(highWaterMark,
/// ...)` once the oplog scan moved past the last event returned), and a stream resumed from
/// it on any member delivers the events from that time on
/// (`document_source_change_stream_check_resumability.cpp`: an event's token type sorts
/// after a high-water mark's at the same time, so it is past the resume point). After a
/// step-down, resuming on the new primary with it delivers the next event, none skipped nor
/// repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_water_mark_resumes_on_the_new_primary() {
    let set = primary_after_a_rollback().await;
    let primary = direct(&set, 0);
    let mut stream = Stream::open(&set, 0, doc! {}).await;
    insert(&primary, "e1", "majority".into()).await;
    assert!(stream.until_seen("e1", Duration::from_secs(5)).await);
    insert_into(&primary, "other", "o1", "majority".into()).await;
    assert_eq!(stream.get_more(Duration::from_millis(300)).await, 0);
    let high_water_mark = stream.token.clone();
    assert_ne!(high_water_mark, stream.token_of("e1"), "the mark passed e1");
    insert(&primary, "e2", "majority".into()).await;
    insert(&primary, "e3", "majority".into()).await;
    step_down(&primary).await;
    let new = new_primary(&set, 0, Duration::from_secs(5)).await;
    let mut resumed = Stream::open(&set, new, doc! {"resumeAfter": high_water_mark}).await;
    assert!(
        resumed.until_seen("e3", Duration::from_secs(5)).await,
        "{:?}",
        resumed.seen
    );
    assert_eq!(resumed.seen, vec![Bson::from("e2"), Bson::from("e3")]);
    set.shutdown().await;
}

/// The driver's `Collection::watch()` across failovers delivers every event exactly once,
/// in order. Across a step-down the stream's cursor stays open on the old primary, which
/// goes on serving it as a secondary (mongod kills only operations that write on
/// step-down: `src/mongo/db/repl/README.md`, "Conditional"), so no resume is needed. When
/// the member holding the cursor dies, the driver's `getMore` fails with a resumable error
/// (a network or server selection error) and the driver reruns the `aggregate` on the
/// primary with `resumeAfter` its cached token, the last event's `_id` or the last batch's
/// `postBatchResumeToken` (change-streams spec, "Resume Process", "Updating the Cached
/// Resume Token"); the new primary continues right after that token
/// (`document_source_change_stream_ensure_resume_token_present.cpp`,
/// `document_source_change_stream_check_resumability.cpp`), although its own log counts its
/// events differently from the dead member's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_s_stream_delivers_every_event_once_across_failovers() {
    use futures_util::StreamExt;
    type Events = mongodb::change_stream::ChangeStream<
        mongodb::change_stream::event::ChangeStreamEvent<Document>,
    >;
    async fn next(stream: &mut Events, seen: &mut Vec<String>) {
        let event = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .unwrap_or_else(|_| panic!("no event within 20 s after {seen:?}"))
            .expect("the stream goes on")
            .unwrap();
        let key = event.document_key.unwrap();
        seen.push(key.get_str("_id").unwrap().to_string());
    }
    let set = primary_after_a_rollback().await;
    // The `getMore` on the dead member fails once server selection for it gives up: kept
    // short so that the driver resumes soon.
    let mut options = mongodb::options::ClientOptions::parse(set.uri())
        .await
        .unwrap();
    options.server_selection_timeout = Some(Duration::from_secs(2));
    let client = Client::with_options(options).unwrap();
    let coll = client.database("d").collection::<Document>("c");
    let mut stream = coll.watch().await.unwrap();
    let mut seen = Vec::new();
    let write = async |ids: [&str; 2], seen: &mut Vec<String>, stream: &mut Events| {
        for id in ids {
            // Retried on the new primary once the driver found it.
            coll.insert_one(doc! {"_id": id}).await.unwrap();
        }
        let until = seen.len() + 2;
        while seen.len() < until {
            next(stream, seen).await;
        }
    };
    write(["e1", "e2"], &mut seen, &mut stream).await;
    step_down(&direct(&set, 0)).await;
    write(["e3", "e4"], &mut seen, &mut stream).await;
    set.stop(0);
    write(["e5", "e6"], &mut seen, &mut stream).await;
    assert_eq!(seen, ["e1", "e2", "e3", "e4", "e5", "e6"]);
    drop(stream);
    client.shutdown().immediate(true).await;
    set.shutdown().await;
}

/// A member that has not yet applied up to a resume point waits for it, as mongod's stream
/// does: its oplog scan from the point's time finds nothing yet, and the resume stage
/// returns end-of-batch until it does
/// (`document_source_change_stream_ensure_resume_token_present.cpp`: "If there are no more
/// results, return EOF. We will continue checking for the resume token the next time");
/// meanwhile the `postBatchResumeToken` stays the token the client gave
/// (`plan_executor_pipeline.cpp`, `_initializeResumableScanState`, which moves only past
/// later oplog entries). `startAtOperationTime` there likewise delivers only the events at
/// or after its time, not the older ones the member applies meanwhile (change-streams spec,
/// `startAtOperationTime`: "changes that occurred at or after the specified Timestamp").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_has_not_reached_the_resume_point_waits_for_it() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let primary = direct(&set, 0);
    insert(&primary, "before", "majority".into()).await;
    let mut stream = Stream::open(&set, 0, doc! {}).await;
    set.set_lag(2, Duration::from_secs(3600));
    insert(&primary, "e1", "majority".into()).await;
    insert(&primary, "e2", "majority".into()).await;
    assert!(stream.until_seen("e2", Duration::from_secs(5)).await);
    let token = stream.token_of("e1");
    let e2_time = stream.event_of("e2").get_timestamp("clusterTime").unwrap();

    let mut resumed = Stream::open(&set, 2, doc! {"resumeAfter": token.clone()}).await;
    let mut from_time = Stream::open(&set, 2, doc! {"startAtOperationTime": e2_time}).await;
    assert_eq!(resumed.token, token);
    assert_eq!(resumed.get_more(Duration::from_millis(300)).await, 0);
    assert_eq!(resumed.token, token, "the mark stays at the client's token");
    assert_eq!(from_time.get_more(Duration::from_millis(300)).await, 0);

    set.set_lag(2, Duration::ZERO);
    for (name, stream) in [
        ("resumeAfter", &mut resumed),
        ("startAtOperationTime", &mut from_time),
    ] {
        assert!(
            stream.until_seen("e2", Duration::from_secs(5)).await,
            "{name}: {:?}",
            stream.seen
        );
        assert_eq!(stream.seen, vec![Bson::from("e2")], "{name}");
    }
    set.shutdown().await;
}

/// A token whose event the member's history does not hold fails the stream with mongod's
/// `ChangeStreamFatalError` (280) "cannot resume stream; the resume token was not found",
/// labelled `NonResumableChangeStreamError`, once the first event at or past the token's
/// time is another one (`document_source_change_stream_ensure_resume_token_present.cpp`:
/// the stream must see the token's event before it surpasses it). Here the token is of an
/// event a collection stream does not see (a write to another collection, taken from a
/// database stream): the collection's next event surpasses it, as in mongod's jstest of
/// change streams on several tenants' change collections ("resume tokens cannot be
/// exchanged between tenants change streams": `ChangeStreamFatalError`). Until that event
/// comes the stream waits, as above. (A token of an event a rollback undid fails the same
/// way: `commands::change_stream`'s unit test, since no stream delivers such an event.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_of_an_event_the_stream_does_not_hold_fails_it() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let primary = direct(&set, 0);
    insert(&primary, "before", "majority".into()).await;
    let reply = primary
        .database("d")
        .run_command(doc! {"aggregate": 1, "pipeline": [{"$changeStream": {}}], "cursor": {}})
        .await
        .unwrap();
    let db_stream = reply.get_document("cursor").unwrap().get_i64("id").unwrap();
    insert_into(&primary, "other", "o1", "majority".into()).await;
    let reply = primary
        .database("d")
        .run_command(doc! {"getMore": db_stream, "collection": "$cmd.aggregate", "maxTimeMS": 5000})
        .await
        .unwrap();
    let batch = reply
        .get_document("cursor")
        .unwrap()
        .get_array("nextBatch")
        .unwrap();
    let event = batch
        .iter()
        .filter_map(Bson::as_document)
        .find(|e| e.get_str("operationType") == Ok("insert"))
        .unwrap()
        .clone();
    let token = event.get_document("_id").unwrap().clone();

    let mut stream = Stream::open(&set, 1, doc! {"resumeAfter": token}).await;
    assert_eq!(stream.get_more(Duration::from_millis(300)).await, 0);
    insert(&primary, "c1", "majority".into()).await;
    let until = Instant::now() + Duration::from_secs(5);
    let error = loop {
        let result = stream
            .client
            .database("d")
            .run_command(doc! {"getMore": stream.id, "collection": "c", "maxTimeMS": 200})
            .await;
        match result {
            Err(error) => break error,
            Ok(reply) => {
                let batch = reply
                    .get_document("cursor")
                    .unwrap()
                    .get_array("nextBatch")
                    .unwrap();
                assert!(batch.is_empty(), "{batch:?}");
                assert!(Instant::now() < until, "the stream never failed");
            }
        }
    };
    assert_eq!(set::code_of(&error), 280, "{error}");
    assert!(
        error
            .to_string()
            .contains("cannot resume stream; the resume token was not found."),
        "{error}"
    );
    assert!(
        error.contains_label("NonResumableChangeStreamError"),
        "{error:?}"
    );
    set.shutdown().await;
}
