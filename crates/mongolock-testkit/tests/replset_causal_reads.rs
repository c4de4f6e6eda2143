//! `readConcern.afterClusterTime` (and `afterOpTime`): before a read runs, the member waits
//! until it has reached the time the client asks for, as mongod's `waitForReadConcernImpl`
//! (`src/mongo/db/read_concern_mongod.cpp`) does: at `local` until its last applied optime
//! reaches it, at `majority` until its majority commit point does
//! (`ReplicationCoordinatorImpl::_waitUntilClusterTimeForRead`, `_waitUntilOpTime`,
//! `_waitUntilMajorityOpTime`, `src/mongo/db/repl/replication_coordinator_impl.cpp`), failing
//! with `MaxTimeMSExpired` (50) past `maxTimeMS` (jstest `jstests/replsets/read_after_optime.js`).
//! Drivers send `afterClusterTime` in a causally consistent session (the causal-consistency
//! spec), so a lagging secondary reads the session's own write. The arguments are checked as
//! `ReadConcernArgs::parse` (`src/mongo/db/repl/read_concern_args.cpp`) checks them, and a
//! standalone refuses them (`waitForReadConcernImpl`; jstest `jstests/core/read_after_optime.js`).

use std::time::{Duration, Instant};

use bson::{Bson, Document, Timestamp, doc};
use mongodb::options::{ReadPreference, SelectionCriteria, WriteConcern};
use mongodb::{Client, ClientSession, ClusterTime};

use mongolock_testkit::{ReplicaSet, TestServer};

mod set;
use set::{code_of, direct};

/// How long the lagging secondaries take to apply a write.
const LAG: Duration = Duration::from_millis(1500);

/// A `w: 1` insert of `{_id: id}` into `d.c`; returns the reply's `operationTime` and
/// `$clusterTime`.
async fn insert(client: &Client, id: &str) -> (Timestamp, ClusterTime) {
    let reply = client
        .database("d")
        .run_command(doc! {
            "insert": "c", "documents": [{"_id": id}], "writeConcern": {"w": 1},
        })
        .await
        .unwrap();
    assert_eq!(reply.get_i32("n").unwrap(), 1, "{reply}");
    let cluster_time = bson::from_document(reply.get_document("$clusterTime").unwrap().clone());
    (
        reply.get_timestamp("operationTime").unwrap(),
        cluster_time.unwrap(),
    )
}

/// A session of `client` that has seen `cluster_time` (the driver gossips it with each
/// command, as a causally consistent client's does after its write).
async fn session_after(client: &Client, cluster_time: &ClusterTime) -> ClientSession {
    let mut session = client.start_session().await.unwrap();
    session.advance_cluster_time(cluster_time);
    session
}

/// `find` on `d.c` with `readConcern` (and `maxTimeMS`, when given) in `session`: the ids
/// found, or the error.
async fn find_ids(
    client: &Client,
    session: &mut ClientSession,
    read_concern: Document,
    max_time_ms: Option<i32>,
) -> mongodb::error::Result<Vec<String>> {
    let mut cmd = doc! {"find": "c", "sort": {"_id": 1}, "readConcern": read_concern};
    if let Some(ms) = max_time_ms {
        cmd.insert("maxTimeMS", ms);
    }
    let reply = client
        .database("d")
        .run_command(cmd)
        .session(session)
        .await?;
    let batch = reply
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap();
    Ok(batch
        .iter()
        .map(|d| d.as_document().unwrap().get_str("_id").unwrap().to_string())
        .collect())
}

/// A set of three whose secondaries apply each write [`LAG`] after the primary.
async fn lagging_set() -> ReplicaSet {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    set.set_lag(1, LAG);
    set.set_lag(2, LAG);
    set
}

/// A secondary that has not applied a write yet answers a plain read without it, and a read
/// with `afterClusterTime: <the write's operationTime>` waits until it applied it, then
/// returns it (`_waitUntilOpTime`: "waiting for OpTime" until the last applied optime reaches
/// the target). The same with `afterOpTime: {ts, t}` (jstest
/// `jstests/replsets/read_after_optime.js`, "Test read on future afterOpTime that will
/// eventually occur").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_secondary_waits_for_the_write_at_local() {
    let set = lagging_set().await;
    let primary = direct(&set, 0);
    let secondary = direct(&set, 1);
    let (written, cluster_time) = insert(&primary, "a").await;
    let mut session = session_after(&secondary, &cluster_time).await;

    let plain = find_ids(&secondary, &mut session, doc! {}, None).await;
    assert_eq!(plain.unwrap(), Vec::<String>::new(), "not applied yet");

    let started = Instant::now();
    let after = doc! {"afterClusterTime": written};
    let found = find_ids(&secondary, &mut session, after, None).await;
    assert_eq!(found.unwrap(), ["a"]);
    assert!(started.elapsed() >= Duration::from_millis(300), "it waited");

    let (written, cluster_time) = insert(&primary, "b").await;
    session.advance_cluster_time(&cluster_time);
    let after = doc! {"afterOpTime": {"ts": written, "t": set.term()}};
    let found = find_ids(&secondary, &mut session, after, None).await;
    assert_eq!(found.unwrap(), ["a", "b"]);
    set.shutdown().await;
}

/// At `majority` the read waits until the member's majority commit point reaches the time
/// (`_waitUntilMajorityOpTime`: "waiting for optime ... to be in a snapshot"), and reads the
/// committed data: the primary, which applied the write at once, waits for the lagging
/// secondaries to commit it; a secondary too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_read_waits_for_the_commit_point() {
    let set = lagging_set().await;
    let primary = direct(&set, 0);
    let secondary = direct(&set, 2);
    let (written, cluster_time) = insert(&primary, "a").await;

    let mut session = session_after(&primary, &cluster_time).await;
    let plain = find_ids(&primary, &mut session, doc! {"level": "majority"}, None).await;
    assert_eq!(plain.unwrap(), Vec::<String>::new(), "not committed yet");
    let local = find_ids(
        &primary,
        &mut session,
        doc! {"afterClusterTime": written},
        None,
    );
    assert_eq!(local.await.unwrap(), ["a"], "applied on the primary");

    let started = Instant::now();
    let after = doc! {"level": "majority", "afterClusterTime": written};
    let found = find_ids(&primary, &mut session, after.clone(), None).await;
    assert_eq!(found.unwrap(), ["a"]);
    assert!(started.elapsed() >= Duration::from_millis(300), "it waited");

    let mut session = session_after(&secondary, &cluster_time).await;
    let found = find_ids(&secondary, &mut session, after, None).await;
    assert_eq!(found.unwrap(), ["a"]);
    set.shutdown().await;
}

/// A wait past `maxTimeMS` fails with `MaxTimeMSExpired` (50), at `local` and at `majority`,
/// for `afterClusterTime` and `afterOpTime` (jstest `jstests/replsets/read_after_optime.js`,
/// "Test timeout with maxTimeMS"; `_waitUntilOpTime` returns `opCtx->getTimeoutError()`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_past_max_time_ms_fails_with_max_time_ms_expired() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    set.set_lag(1, Duration::from_secs(3600));
    set.set_lag(2, Duration::from_secs(3600));
    let primary = direct(&set, 0);
    let secondary = direct(&set, 1);
    let (written, cluster_time) = insert(&primary, "a").await;
    let mut session = session_after(&secondary, &cluster_time).await;
    for read_concern in [
        doc! {"afterClusterTime": written},
        doc! {"level": "majority", "afterClusterTime": written},
        doc! {"afterOpTime": {"ts": written, "t": set.term()}},
    ] {
        let started = Instant::now();
        let error = find_ids(&secondary, &mut session, read_concern.clone(), Some(300))
            .await
            .unwrap_err();
        assert_eq!(code_of(&error), 50, "{read_concern}: {error}");
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "{read_concern}"
        );
    }
    // The primary commits nothing either while both secondaries lag.
    let mut session = session_after(&primary, &cluster_time).await;
    let after = doc! {"level": "majority", "afterClusterTime": written};
    let error = find_ids(&primary, &mut session, after, Some(200)).await;
    assert_eq!(code_of(&error.unwrap_err()), 50);
    set.shutdown().await;
}

/// The read concerns mongod refuses: `afterClusterTime` with `afterOpTime`, with level
/// `available` or `linearizable`, `Timestamp(0, 0)`, or ahead of the member's cluster time
/// (`InvalidOptions`, 72: `ReadConcernArgs::parse` and `waitForReadConcernImpl`, "readConcern
/// afterClusterTime value must not be greater than the current clusterTime"); a value that
/// is not a timestamp (`TypeMismatch`, 14: `bsonExtractTimestampField`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_read_concerns_are_refused_with_mongod_s_codes() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let primary = direct(&set, 0);
    let (written, cluster_time) = insert(&primary, "a").await;
    let mut session = session_after(&primary, &cluster_time).await;
    let ahead = Timestamp {
        time: written.time + 1000,
        increment: 0,
    };
    let op_time = doc! {"ts": written, "t": 1};
    for (read_concern, code) in [
        (
            doc! {"afterClusterTime": written, "afterOpTime": op_time},
            72,
        ),
        (doc! {"level": "available", "afterClusterTime": written}, 72),
        (
            doc! {"level": "linearizable", "afterClusterTime": written},
            72,
        ),
        (
            doc! {"afterClusterTime": Timestamp { time: 0, increment: 0 }},
            72,
        ),
        (doc! {"afterClusterTime": ahead}, 72),
        (doc! {"afterClusterTime": "yesterday"}, 14),
        (doc! {"afterOpTime": {"ts": written}}, 4),
    ] {
        let error = find_ids(&primary, &mut session, read_concern.clone(), None)
            .await
            .unwrap_err();
        assert_eq!(code_of(&error), code, "{read_concern}: {error}");
    }
    // A zero-second `afterClusterTime` is fine ("It's okay for afterClusterTime to be
    // specified with zero seconds").
    let early = doc! {"afterClusterTime": Timestamp { time: 0, increment: 1 }};
    let found = find_ids(&primary, &mut session, early, None).await;
    assert_eq!(found.unwrap(), ["a"]);
    set.shutdown().await;
}

/// A member that rolls back while a read waits on it fails the read with
/// `InterruptedDueToReplStateChange` (11602): mongod's rollback kills the user operations
/// (`RollbackImpl::_killAllUserOperations`, `src/mongo/db/repl/rollback_impl.cpp`). The
/// partitioned primary waits for a write of the new primary it cannot apply (named by its
/// optime, `afterOpTime`, whose term the old primary's own newer entry does not reach);
/// healed, it rolls back its own `w: 1` write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_waiting_on_a_member_that_rolls_back_is_interrupted() {
    let set = set::three_with_quick_elections().await;
    let old = direct(&set, 0);
    insert(&old, "kept").await;
    set.partition(0);
    insert(&old, "undone").await;
    let new = set::new_primary(&set, 0, Duration::from_secs(10)).await;
    let (written, cluster_time) = insert(&direct(&set, new), "new").await;
    let mut session = session_after(&old, &cluster_time).await;
    let term = set.term();
    let waiting = {
        let old = old.clone();
        tokio::spawn(async move {
            let after = doc! {"afterOpTime": {"ts": written, "t": term}};
            find_ids(&old, &mut session, after, Some(20_000)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "it waits for the new primary's write"
    );
    set.heal(0);
    let error = waiting.await.unwrap().unwrap_err();
    assert_eq!(code_of(&error), 11602, "{error}");
    assert!(set.wait_for_rollbacks(0, 1, Duration::from_secs(10)).await);
    set.shutdown().await;
}

/// A standalone refuses both (`waitForReadConcernImpl`: `IllegalOperation` (20) "Cannot
/// specify afterClusterTime readConcern without replication enabled";
/// `waitUntilOpTimeForReadUntil`: `NotAReplicaSet` (123), jstest
/// `jstests/core/read_after_optime.js`). The one-member emulator, which holds every write it
/// acknowledged, serves a time it reached at once and refuses one ahead of its cluster time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_refuses_them_and_a_single_server_serves_what_it_reached() {
    let standalone = TestServer::builder()
        .standalone(true)
        .start()
        .await
        .unwrap();
    let client = standalone.client();
    let db = client.database("d");
    let future = Timestamp {
        time: 4_000_000_000,
        increment: 0,
    };
    for (read_concern, code) in [
        (doc! {"afterClusterTime": future}, 20),
        (doc! {"afterOpTime": {"ts": future, "t": 0}}, 123),
    ] {
        let cmd = doc! {"find": "c", "readConcern": read_concern};
        let error = db.run_command(cmd.clone()).await.unwrap_err();
        assert_eq!(code_of(&error), code, "{cmd}: {error}");
    }

    let single = TestServer::start().await.unwrap();
    let client = single.client();
    let (written, _) = insert(&client, "a").await;
    let db = client.database("d");
    for level in ["local", "majority"] {
        let cmd = doc! {"find": "c", "readConcern": {"level": level, "afterClusterTime": written}};
        let reply = db.run_command(cmd).await.unwrap();
        let batch = reply
            .get_document("cursor")
            .unwrap()
            .get_array("firstBatch");
        assert_eq!(batch.unwrap(), &vec![Bson::Document(doc! {"_id": "a"})]);
    }
    let cmd = doc! {"find": "c", "readConcern": {"afterClusterTime": future}};
    assert_eq!(code_of(&db.run_command(cmd).await.unwrap_err()), 72);
}

/// The driver's causally consistent session (the causal-consistency spec: a read after the
/// session's write carries `readConcern: {afterClusterTime: <its operationTime>}`) reads its
/// own `w: 1` write on a secondary that has not applied it yet; a session that is not
/// causally consistent does not see it there yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_causally_consistent_session_reads_its_own_write_on_a_secondary() {
    let set = lagging_set().await;
    let client = set.new_client();
    let coll = client.database("d").collection_with_options::<Document>(
        "c",
        mongodb::options::CollectionOptions::builder()
            .write_concern(
                WriteConcern::builder()
                    .w(mongodb::options::Acknowledgment::Nodes(1))
                    .build(),
            )
            .build(),
    );
    let secondary = SelectionCriteria::ReadPreference(ReadPreference::Secondary { options: None });

    let mut plain = client
        .start_session()
        .causal_consistency(false)
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": "a"})
        .session(&mut plain)
        .await
        .unwrap();
    let found = coll
        .find_one(doc! {"_id": "a"})
        .selection_criteria(secondary.clone())
        .session(&mut plain)
        .await
        .unwrap();
    assert_eq!(found, None, "the secondaries lag");

    let mut causal = client
        .start_session()
        .causal_consistency(true)
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": "b"})
        .session(&mut causal)
        .await
        .unwrap();
    let found = coll
        .find_one(doc! {"_id": "b"})
        .selection_criteria(secondary)
        .session(&mut causal)
        .await
        .unwrap();
    assert_eq!(found, Some(doc! {"_id": "b"}));
    set.shutdown().await;
}
