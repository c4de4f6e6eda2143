//! Retryable writes on the emulated replica set: the record of a retryable write moves with
//! its data. A member that applied a retryable write's oplog entries knows the write ran, so
//! after it becomes primary a retry is answered from the record instead of running again; a
//! write that wrote no oplog entry left no record and runs again; a rollback that undoes the
//! write undoes its record with it. Each test names the mongod source it follows.
//!
//! Each command is sent raw, with the `lsid` of an explicit session of a client of the whole
//! set and a `txnNumber` of ours, to whichever member is primary, as a driver's retry is. The
//! sessions are started before any other write: the driver hands out again the server
//! sessions its implicit ones used, with `txnNumber`s of its own.

use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};
use mongodb::{Client, ClientSession};
use mongolock_testkit::ReplicaSet;

mod set;
use set::{code_of, direct, new_primary};

/// Runs `cmd` in `session` on database `d` of the set's primary as the driver finds it. A
/// member that stopped being primary refuses with `NotWritablePrimary` (10107) without
/// running it, and the driver looks for the primary again: the command is sent until a
/// primary takes it.
async fn on_primary(client: &Client, session: &mut ClientSession, cmd: &Document) -> Document {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match client
            .database("d")
            .run_command(cmd.clone())
            .session(&mut *session)
            .await
        {
            Ok(reply) => return reply,
            Err(error) if code_of(&error) == 10107 && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("{cmd}: {error}"),
        }
    }
}

/// The documents of `d.c` on member `index`.
async fn docs(set: &ReplicaSet, index: usize) -> Vec<Document> {
    set::sorted(&direct(set, index), "c").await
}

/// The fields of a write's reply that describe its outcome.
fn outcome(reply: &Document) -> Document {
    let mut kept = Document::new();
    for key in ["n", "nModified", "upserted", "value", "lastErrorObject"] {
        if let Some(value) = reply.get(key) {
            kept.insert(key, value.clone());
        }
    }
    kept
}

/// Steps member `old` down (no `force`: the caught-up secondary is elected at once) and
/// returns the new primary.
async fn step_down(set: &ReplicaSet, old: usize) -> usize {
    direct(set, old)
        .database("admin")
        .run_command(doc! {"replSetStepDown": 30})
        .await
        .unwrap();
    new_primary(set, old, Duration::from_secs(5)).await
}

/// A retryable write the primary executed and a majority applied is not executed again when
/// the driver retries it on the next primary: the secondary applied its oplog entries, which
/// carry the session (`lsid`, `txnNumber`, `stmtId`), and updated the session's record as it
/// did (`src/mongo/db/repl/session_update_tracker.cpp`, `createMatchingTransactionTableUpdate`:
/// `config.transactions` gets the entry's `txnNum` and `lastWriteOpTime`); as primary it
/// finds the statement executed (`fetchActiveTransactionHistory`,
/// `src/mongo/db/transaction/transaction_participant.cpp`, walks the session's oplog chain)
/// and answers from the record (`performUpdates`, `src/mongo/db/ops/write_ops_exec.cpp`;
/// `CmdFindAndModify`, `src/mongo/db/commands/find_and_modify.cpp`). The reply is the one
/// the write gave: `n`, `nModified` and `upserted` for an update, the document and
/// `lastErrorObject` for `findAndModify` (`parseOplogEntryForUpdate` and
/// `parseOplogEntryForFindAndModify`, `src/mongo/db/ops/write_ops_retryability.cpp`), with
/// the statements not run again named in `retriedStmtIds` (an update) or `retriedStmtId` (a
/// `findAndModify`); no oplog entry is added. jstest
/// `jstests/replsets/retryable_writes_failover.js` runs the same steps. An older
/// `txnNumber` of the session is `TransactionTooOld` (225) there as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_retryable_write_is_answered_from_its_record_after_a_failover() {
    let set = set::three_with_quick_elections().await;
    let client = set.new_client();
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(client.start_session().await.unwrap());
    }
    client
        .database("d")
        .collection::<Document>("c")
        .insert_many([doc! {"_id": "f", "n": 0}, doc! {"_id": "u", "n": 0}])
        .await
        .unwrap();
    let commands = [
        doc! {
            "update": "c", "updates": [{"q": {"_id": "u"}, "u": {"$inc": {"n": 1}}}],
            "txnNumber": 1_i64,
        },
        doc! {
            "update": "c",
            "updates": [{"q": {"_id": "up"}, "u": {"$inc": {"n": 1}}, "upsert": true}],
            "txnNumber": 3_i64,
        },
        doc! {
            "findAndModify": "c", "query": {"_id": "f"}, "update": {"$inc": {"n": 1}},
            "new": true, "txnNumber": 7_i64,
        },
    ];
    let mut firsts = Vec::new();
    for (cmd, session) in commands.iter().zip(&mut sessions) {
        // The default write concern is majority: a majority applied it when it answers.
        firsts.push(on_primary(&client, session, cmd).await);
    }
    assert_eq!(
        (firsts[0].get_i32("n"), firsts[0].get_i32("nModified")),
        (Ok(1), Ok(1))
    );
    assert_eq!(
        firsts[1].get_array("upserted").unwrap(),
        &vec![Bson::Document(doc! {"index": 0, "_id": "up"})]
    );
    assert_eq!(
        firsts[2].get_document("value").unwrap(),
        &doc! {"_id": "f", "n": 1}
    );
    let entries = set.oplog("d", "c").len();

    let new = step_down(&set, 0).await;
    for ((cmd, first), session) in commands.iter().zip(&firsts).zip(&mut sessions) {
        let retried = on_primary(&client, session, cmd).await;
        assert_eq!(outcome(&retried), outcome(first), "{cmd}: {retried}");
        if cmd.contains_key("findAndModify") {
            assert_eq!(retried.get_i32("retriedStmtId"), Ok(0), "{retried}");
            assert!(!retried.contains_key("retriedStmtIds"), "{retried}");
        } else {
            assert_eq!(
                retried.get_array("retriedStmtIds").unwrap(),
                &vec![Bson::Int32(0)],
                "{retried}"
            );
        }
    }
    assert_eq!(set.primary(), Some(new));
    assert_eq!(
        docs(&set, new).await,
        [
            doc! {"_id": "f", "n": 1},
            doc! {"_id": "u", "n": 1},
            doc! {"_id": "up", "n": 1},
        ],
        "each write applied once"
    );
    assert_eq!(set.oplog("d", "c").len(), entries, "no oplog entry added");

    let mut older = commands[1].clone();
    older.insert("txnNumber", 2_i64);
    let error = client
        .database("d")
        .run_command(older)
        .session(&mut sessions[1])
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), 225, "{error}");
    set.shutdown().await;
}

/// A retryable write that wrote no oplog entry (an update that matched nothing) left no
/// record of its statement: mongod records a statement when its oplog entry is written
/// (`onWriteOpCompleted`, `src/mongo/db/op_observer/op_observer_impl.cpp`, returns when the
/// write has no optime; `TransactionParticipant::Participant::onWriteOpCompletedOnPrimary`
/// registers the statements written), and `performUpdates`
/// (`src/mongo/db/ops/write_ops_exec.cpp`) runs any statement
/// `checkStatementExecutedAndFetchOplogEntry` does not find. So its retry runs it again, on
/// the member that ran it and on the next primary alike: once the document exists, the retry
/// updates it, and nothing in the reply says it was a retry. Once it wrote, it is replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_write_that_wrote_nothing_runs_again_on_the_same_and_the_next_primary() {
    let set = set::three_with_quick_elections().await;
    let client = set.new_client();
    let mut same = client.start_session().await.unwrap();
    let mut next = client.start_session().await.unwrap();
    let coll = client.database("d").collection::<Document>("c");
    let set_seen = |id: &str| {
        doc! {
            "update": "c", "updates": [{"q": {"_id": id}, "u": {"$set": {"seen": true}}}],
            "txnNumber": 1_i64,
        }
    };

    let nothing = on_primary(&client, &mut same, &set_seen("a")).await;
    assert_eq!(
        (nothing.get_i32("n"), nothing.get_i32("nModified")),
        (Ok(0), Ok(0))
    );
    coll.insert_one(doc! {"_id": "a"}).await.unwrap();
    let again = on_primary(&client, &mut same, &set_seen("a")).await;
    assert_eq!(
        (again.get_i32("n"), again.get_i32("nModified")),
        (Ok(1), Ok(1)),
        "{again}"
    );
    assert!(!again.contains_key("retriedStmtIds"), "it ran: {again}");
    // It wrote this time: a retry now is answered from its record.
    let replayed = on_primary(&client, &mut same, &set_seen("a")).await;
    assert_eq!(
        replayed.get_array("retriedStmtIds").unwrap(),
        &vec![Bson::Int32(0)],
        "{replayed}"
    );

    let nothing = on_primary(&client, &mut next, &set_seen("b")).await;
    assert_eq!(nothing.get_i32("n"), Ok(0));
    coll.insert_one(doc! {"_id": "b"}).await.unwrap();
    let new = step_down(&set, 0).await;
    let again = on_primary(&client, &mut next, &set_seen("b")).await;
    assert_eq!(
        (again.get_i32("n"), again.get_i32("nModified")),
        (Ok(1), Ok(1)),
        "{again}"
    );
    assert!(!again.contains_key("retriedStmtIds"), "it ran: {again}");
    assert_eq!(
        docs(&set, new).await,
        [
            doc! {"_id": "a", "seen": true},
            doc! {"_id": "b", "seen": true}
        ]
    );
    set.shutdown().await;
}

/// A retryable `w: 1` write of a partitioned primary that the rollback undid runs again when
/// retried: the rollback undoes the session's record with the data. mongod invalidates every
/// session when a rolled-back entry belonged to one and recovers `config.transactions`, a
/// collection like the others, to the stable timestamp (`RollbackImpl`,
/// `src/mongo/db/repl/rollback_impl.cpp`: "If there were rolled back operations on any
/// session, invalidate all sessions", `MongoDSessionCatalog::invalidateAllSessions`, then
/// `_recoverToStableTimestamp`); a session is then read again from `config.transactions`
/// and the oplog (`fetchActiveTransactionHistory`), where the undone write is not. So the
/// retry runs on the primary the majority elected, which never had it, and on the former
/// primary itself once it is primary again: each counter is incremented once. The former
/// primary, having applied the new primary's run of the first retry, answers that one from
/// its record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_write_undone_by_a_rollback_runs_again_when_retried() {
    let set = set::three_with_quick_elections().await;
    let client = set.new_client();
    let mut first = client.start_session().await.unwrap();
    let mut second = client.start_session().await.unwrap();
    client
        .database("d")
        .collection::<Document>("c")
        .insert_many([doc! {"_id": "a", "n": 0}, doc! {"_id": "b", "n": 0}])
        .await
        .unwrap();
    let inc = |id: &str| {
        doc! {
            "update": "c", "updates": [{"q": {"_id": id}, "u": {"$inc": {"n": 1}}}],
            "txnNumber": 1_i64, "writeConcern": {"w": 1},
        }
    };

    set.partition(0);
    for (session, id) in [(&mut first, "a"), (&mut second, "b")] {
        let reply = on_primary(&client, session, &inc(id)).await;
        assert_eq!(reply.get_i32("nModified"), Ok(1), "{reply}");
    }
    assert_eq!(set.primary(), Some(0), "the partitioned primary took both");
    let elected = new_primary(&set, 0, Duration::from_secs(5)).await;
    set.heal(0);
    assert!(set.wait_for_rollbacks(0, 1, Duration::from_secs(5)).await);
    assert_eq!(
        docs(&set, 0).await,
        [doc! {"_id": "a", "n": 0}, doc! {"_id": "b", "n": 0}],
        "both increments were undone"
    );

    // On the primary the majority elected, which never had it.
    let again = on_primary(&client, &mut first, &inc("a")).await;
    assert_eq!(again.get_i32("nModified"), Ok(1), "{again}");
    assert!(!again.contains_key("retriedStmtIds"), "it ran: {again}");

    // On the former primary, elected again (the third member stopped, so the handoff goes
    // to it).
    let started = Instant::now();
    while set.applied(0) < set.applied(elected) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "member 0 never caught up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    set.stop(3 - elected);
    assert_eq!(step_down(&set, elected).await, 0);
    let again = on_primary(&client, &mut second, &inc("b")).await;
    assert_eq!(again.get_i32("nModified"), Ok(1), "{again}");
    assert!(!again.contains_key("retriedStmtIds"), "it ran: {again}");
    let replayed = on_primary(&client, &mut first, &inc("a")).await;
    assert_eq!(
        replayed.get_array("retriedStmtIds").unwrap(),
        &vec![Bson::Int32(0)],
        "the new primary's run of it reached member 0 with its record: {replayed}"
    );
    assert_eq!(
        docs(&set, 0).await,
        [doc! {"_id": "a", "n": 1}, doc! {"_id": "b", "n": 1}],
        "each write applied once"
    );
    set.shutdown().await;
}
