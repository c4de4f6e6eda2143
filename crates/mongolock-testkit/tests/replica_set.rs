//! The three-member emulated replica set, driven by the `mongodb` driver: discovery, where
//! writes go, secondaries refusing writes, replication lag and write concern, step-down and
//! elections. Each test names the mongod source or document it follows.

use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongodb::Client;
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::options::{ClientOptions, ServerAddress, WriteConcern};
use mongolock_testkit::ReplicaSet;

mod set;
use set::{code_of, election_id, member_options};

/// A client connected to member `index` alone (`directConnection=true`).
fn direct(set: &ReplicaSet, index: usize, retry_writes: bool) -> Client {
    let mut options = member_options(set, index);
    options.retry_writes = Some(retry_writes);
    Client::with_options(options).unwrap()
}

async fn hello(set: &ReplicaSet, index: usize) -> Document {
    set::hello(&direct(set, index, true)).await
}

/// `hello` per member state follows `src/mongo/db/repl/hello/hello_response.cpp`
/// (`HelloResponse::addToBSON`): every member reports the set's `hosts`, `setName`,
/// `setVersion`, its own `me`, the `primary`, and `topologyVersion`; only the primary says
/// `isWritablePrimary: true` and carries `electionId`. The driver then discovers the set
/// from any seed (SDAM, `[spec] server-discovery-and-monitoring.md`) and writes to the
/// primary.
#[tokio::test]
async fn hello_reports_each_members_state_and_the_driver_discovers_the_set() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let hosts = set.hosts();
    for (index, host) in hosts.iter().enumerate() {
        let reply = hello(&set, index).await;
        assert_eq!(reply.get_str("setName").unwrap(), "rs0");
        let reported: Vec<&str> = reply
            .get_array("hosts")
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap())
            .collect();
        assert_eq!(
            reported,
            hosts.iter().map(String::as_str).collect::<Vec<_>>()
        );
        assert_eq!(reply.get_str("me").unwrap(), host);
        assert_eq!(reply.get_str("primary").unwrap(), hosts[0]);
        assert_eq!(reply.get_i32("setVersion").unwrap(), 1);
        assert_eq!(reply.get_bool("isWritablePrimary").unwrap(), index == 0);
        assert_eq!(reply.get_bool("secondary").unwrap(), index != 0);
        assert_eq!(
            reply.get_object_id("electionId").ok(),
            (index == 0).then(|| election_id(1))
        );
        let topology = reply.get_document("topologyVersion").unwrap();
        assert!(topology.get_object_id("processId").is_ok());
        assert!(topology.get_i64("counter").is_ok());
        assert!(reply.contains_key("$clusterTime") && reply.contains_key("operationTime"));
    }
    // Seeded with a secondary only, the driver still finds the primary and writes there.
    let seeded = Client::with_uri_str(format!(
        "mongodb://{}/?replicaSet=rs0&serverSelectionTimeoutMS=5000",
        hosts[2]
    ))
    .await
    .unwrap();
    let coll = seeded.database("d").collection::<Document>("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let on_primary = direct(&set, 0, true)
        .database("d")
        .collection::<Document>("c")
        .find_one(doc! {"_id": 1})
        .await
        .unwrap();
    assert_eq!(on_primary, Some(doc! {"_id": 1}));
    set.shutdown().await;
}

/// A secondary refuses writes as `src/mongo/db/service_entry_point_common.cpp` does: a
/// command never allowed on a secondary fails `NotWritablePrimary` (10107) "not primary",
/// with the `RetryableWriteError` label on a retryable write
/// (`src/mongo/db/error_labels.cpp`: 10107 is a `RetriableError`), and `replSetStepDown`
/// there fails 10107 "not primary so can't step down" (`replication_coordinator_impl.cpp`).
/// Reads that opted in with a read preference run on it and see the replicated data.
#[tokio::test]
async fn a_secondary_refuses_a_direct_write_and_serves_reads_that_opt_in() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    set.client()
        .database("d")
        .collection::<Document>("c")
        .insert_one(doc! {"_id": 1})
        .await
        .unwrap();
    let secondary = direct(&set, 1, false);
    let error = secondary
        .database("d")
        .collection::<Document>("c")
        .insert_one(doc! {"_id": 2})
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), 10107, "{error}");
    assert!(error.to_string().contains("not primary"), "{error}");
    let error = secondary
        .database("admin")
        .run_command(doc! {"replSetStepDown": 10})
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), 10107);
    assert!(error.to_string().contains("not primary so can't step down"));
    // With a direct connection the driver reads with `primaryPreferred` (server-selection
    // spec, "Topology type: Single"), which a secondary serves; the insert above was
    // majority-acknowledged, so it is there.
    let found = secondary
        .database("d")
        .collection::<Document>("c")
        .find_one(doc! {"_id": 1})
        .await
        .unwrap();
    assert_eq!(found, Some(doc! {"_id": 1}));
    assert_eq!(
        secondary
            .database("d")
            .collection::<Document>("c")
            .count_documents(doc! {"_id": 2})
            .await
            .unwrap(),
        0
    );
    set.shutdown().await;
}

/// Write concern as `replication_coordinator_impl.cpp` (`awaitReplication`) answers it:
/// `w: "majority"` waits until a majority applied the write; on `wtimeout` the command
/// still succeeds, with `writeConcernError {code: 64, errmsg: "waiting for replication
/// timed out", errInfo: {wtimeout: true}}`, and the write stays applied on the primary
/// (`src/mongo/db/repl/README.md`, "Doing a Write"). `w: 1` does not wait.
#[tokio::test]
async fn majority_waits_for_the_lag_and_times_out_with_mongods_shape() {
    let lag = Duration::from_millis(300);
    let set = ReplicaSet::builder()
        .members(3)
        .lag(lag)
        .start()
        .await
        .unwrap();
    let client = set.client();
    let db = client.database("d");
    // Warm up: the driver has found the primary and the collection exists.
    db.collection::<Document>("c")
        .insert_one(doc! {"_id": 0})
        .with_options(
            mongodb::options::InsertOneOptions::builder()
                .write_concern(WriteConcern::nodes(1))
                .build(),
        )
        .await
        .unwrap();

    let started = Instant::now();
    let reply = db
        .run_command(doc! {
            "insert": "c", "documents": [{"_id": 1}],
            "writeConcern": {"w": "majority", "wtimeout": 5000},
        })
        .await
        .unwrap();
    let waited = started.elapsed();
    assert_eq!(reply.get_i32("n").unwrap(), 1);
    assert!(!reply.contains_key("writeConcernError"), "{reply}");
    assert!(waited >= lag - Duration::from_millis(20), "{waited:?}");
    assert!(set.applied(1) >= 2 || set.applied(2) >= 2);

    let started = Instant::now();
    db.run_command(doc! {
        "insert": "c", "documents": [{"_id": 2}], "writeConcern": {"w": 1},
    })
    .await
    .unwrap();
    assert!(started.elapsed() < lag / 2, "{:?}", started.elapsed());

    set.set_lag(1, Duration::from_secs(30));
    set.set_lag(2, Duration::from_secs(30));
    let started = Instant::now();
    let reply = db
        .run_command(doc! {
            "insert": "c", "documents": [{"_id": 3}],
            "writeConcern": {"w": "majority", "wtimeout": 200},
        })
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(reply.get_f64("ok").unwrap(), 1.0);
    assert_eq!(reply.get_i32("n").unwrap(), 1);
    let wce = reply.get_document("writeConcernError").unwrap();
    assert_eq!(wce.get_i32("code").unwrap(), 64);
    assert_eq!(
        wce.get_str("errmsg").unwrap(),
        "waiting for replication timed out"
    );
    assert_eq!(
        wce.get_document("errInfo").unwrap(),
        &doc! {"wtimeout": true}
    );
    // The driver's CRUD API reports it as a write-concern error.
    let error = db
        .collection::<Document>("c")
        .insert_one(doc! {"_id": 4})
        .with_options(
            mongodb::options::InsertOneOptions::builder()
                .write_concern(
                    WriteConcern::builder()
                        .w(mongodb::options::Acknowledgment::Majority)
                        .w_timeout(Duration::from_millis(100))
                        .build(),
                )
                .build(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind.as_ref(), ErrorKind::Write(WriteFailure::WriteConcernError(e)) if e.code == 64),
        "{error:?}"
    );
    // Both writes stayed applied on the primary.
    let on_primary = direct(&set, 0, true)
        .database("d")
        .collection::<Document>("c")
        .count_documents(doc! {"_id": {"$in": [3, 4]}})
        .await
        .unwrap();
    assert_eq!(on_primary, 2);
    set.shutdown().await;
}

/// `replSetStepDown` as `src/mongo/db/repl/repl_set_commands.cpp` parses it (a negative
/// period is `BadValue`, a period shorter than `secondaryCatchUpPeriodSecs` is `BadValue`)
/// and as `replication_coordinator_impl.cpp` (`stepDown`) runs it: without a caught-up
/// electable secondary it fails `ExceededTimeLimit` (262) after the catch-up period and the
/// node stays primary.
#[tokio::test]
async fn step_down_arguments_and_no_caught_up_secondary() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let admin = direct(&set, 0, true).database("admin");
    let error = admin
        .run_command(doc! {"replSetStepDown": -1})
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), 2);
    let error = admin
        .run_command(doc! {"replSetStepDown": 5, "secondaryCatchUpPeriodSecs": 10})
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), 2);
    assert!(
        error
            .to_string()
            .contains("stepdown period must be longer than secondaryCatchUpPeriodSecs")
    );
    let error = admin
        .run_command(doc! {"replSetStepDown": 5, "secondaryCatchUpPeriodSecs": "x"})
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), 14);

    set.set_lag(1, Duration::from_secs(30));
    set.set_lag(2, Duration::from_secs(30));
    set.client()
        .database("d")
        .collection::<Document>("c")
        .insert_one(doc! {"_id": 1})
        .with_options(
            mongodb::options::InsertOneOptions::builder()
                .write_concern(WriteConcern::nodes(1))
                .build(),
        )
        .await
        .unwrap();
    let error = admin
        .run_command(doc! {"replSetStepDown": 2, "secondaryCatchUpPeriodSecs": 1})
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), 262);
    assert!(
        error
            .to_string()
            .contains("No electable secondaries caught up as of")
    );
    assert_eq!(set.primary(), Some(0));
    assert_eq!(set.term(), 1);
    set.shutdown().await;
}

/// A non-forced step-down hands the primary to the caught-up secondary at once (election
/// handoff, `src/mongo/db/repl/README.md` "Step Up"): the term goes up, `electionId`
/// follows it (`OID::fromTerm`), the old primary reports itself a secondary naming the new
/// one, and the driver follows: a retryable write sent right after the step-down succeeds,
/// applied once (retryable-writes spec: one retry on `RetryableWriteError`).
#[tokio::test]
async fn step_down_elects_another_primary_and_the_driver_follows() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let client = set.client();
    let coll = client.database("d").collection::<Document>("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    client
        .database("admin")
        .run_command(doc! {"replSetStepDown": 60})
        .await
        .unwrap();
    let primary = set
        .primary()
        .expect("the handoff elected a primary at once");
    assert_ne!(primary, 0);
    assert_eq!(set.term(), 2);
    let new = hello(&set, primary).await;
    assert!(new.get_bool("isWritablePrimary").unwrap());
    assert_eq!(new.get_object_id("electionId").unwrap(), election_id(2));
    let old = hello(&set, 0).await;
    assert!(!old.get_bool("isWritablePrimary").unwrap());
    assert!(old.get_bool("secondary").unwrap());
    assert_eq!(old.get_str("primary").unwrap(), set.hosts()[primary]);
    assert!(!old.contains_key("electionId"));

    coll.insert_one(doc! {"_id": 2}).await.unwrap();
    let on_new = direct(&set, primary, true)
        .database("d")
        .collection::<Document>("c")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(on_new, 2);
    // The old primary is unelectable for the step-down period and applies the new
    // primary's writes.
    let started = Instant::now();
    while set.applied(0) < set.applied(primary) {
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    set.shutdown().await;
}

/// A write the primary received before it stepped down and that had not yet passed the
/// "can run here" check (it was held by a `failCommand` block, which
/// `service_entry_point_common.cpp` evaluates before that check) fails `NotWritablePrimary`
/// (10107) "not primary" with `RetryableWriteError`; the driver retries it once on the new
/// primary (retryable-writes spec), where it applies once.
#[tokio::test]
async fn a_retryable_write_blocked_across_a_step_down_is_retried_on_the_new_primary() {
    use mongodb::event::{EventHandler, command::CommandEvent};
    use std::sync::{Arc, Mutex};

    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let failures = Arc::new(Mutex::new(Vec::new()));
    let seen = failures.clone();
    let options = ClientOptions::builder()
        .hosts(
            set.hosts()
                .iter()
                .map(|h| ServerAddress::parse(h).unwrap())
                .collect::<Vec<_>>(),
        )
        .repl_set_name("rs0".to_string())
        .app_name("writer".to_string())
        .command_event_handler(EventHandler::callback(move |event: CommandEvent| {
            if let CommandEvent::Failed(failed) = event {
                seen.lock()
                    .unwrap()
                    .push((failed.command_name, code_of(&failed.failure)));
            }
        }))
        .build();
    let client = Client::with_options(options).unwrap();
    let coll = client.database("d").collection::<Document>("c");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    direct(&set, 0, true)
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand", "mode": {"times": 1},
            "data": {"failCommands": ["insert"], "blockConnection": true, "blockTimeMS": 300,
                     "appName": "writer"},
        })
        .await
        .unwrap();
    let blocked = tokio::spawn({
        let coll = coll.clone();
        async move { coll.insert_one(doc! {"_id": 1}).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    direct(&set, 0, true)
        .database("admin")
        .run_command(doc! {"replSetStepDown": 30})
        .await
        .unwrap();
    blocked.await.unwrap().unwrap();
    assert_eq!(*failures.lock().unwrap(), [("insert".to_string(), 10107)]);
    let new = set.primary().unwrap();
    assert_ne!(new, 0);
    let count = direct(&set, new, true)
        .database("d")
        .collection::<Document>("c")
        .count_documents(doc! {"_id": 1})
        .await
        .unwrap();
    assert_eq!(count, 1);

    // Without retries the driver shows the old primary's answer as it is.
    let once = direct(&set, 0, false);
    let error = once
        .database("d")
        .collection::<Document>("c")
        .insert_one(doc! {"_id": 2})
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), 10107, "{error}");
    set.shutdown().await;
}

/// A stopped primary: the reachable majority elects a new one after the election timeout
/// (`src/mongo/db/repl/README.md`, "Step Up"), in a higher term; the restarted member
/// comes back as a secondary with a new `topologyVersion.processId` and catches up.
#[tokio::test]
async fn a_stopped_primary_is_replaced_and_rejoins_as_a_secondary() {
    let set = ReplicaSet::builder()
        .members(3)
        .election_timeout(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let client = set.client();
    let coll = client.database("d").collection::<Document>("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let before = hello(&set, 0).await;
    set.stop(0);
    assert_eq!(set.primary(), None);
    let primary = set.wait_for_primary(Duration::from_secs(5)).await.unwrap();
    assert_ne!(primary, 0);
    assert_eq!(set.term(), 2);
    coll.insert_one(doc! {"_id": 2}).await.unwrap();
    set.restart(0);
    let after = hello(&set, 0).await;
    assert!(after.get_bool("secondary").unwrap());
    assert_ne!(
        after
            .get_document("topologyVersion")
            .unwrap()
            .get_object_id("processId"),
        before
            .get_document("topologyVersion")
            .unwrap()
            .get_object_id("processId")
    );
    let started = Instant::now();
    while set.applied(0) < set.applied(primary) {
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let on_old = direct(&set, 0, true)
        .database("d")
        .collection::<Document>("c")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(on_old, 2);
    set.shutdown().await;
}

/// A `w: "majority"` wait on a primary that steps down fails as
/// `replication_coordinator_impl.cpp` fails its replication waiters on a state change:
/// `writeConcernError {code: 189 PrimarySteppedDown, errmsg: "Primary stepped down while
/// waiting for replication"}`, labelled `RetryableWriteError` on a retryable write
/// (`error_labels.cpp`: the write-concern error's code counts); the write itself stays, and
/// the new primary caught up on it before taking writes (`src/mongo/db/repl/README.md`,
/// "Transitioning to PRIMARY"). A forced step-down needs no caught-up secondary
/// (`repl_set_commands.cpp`: `secondaryCatchUpPeriodSecs` is 0 with `force`).
#[tokio::test]
async fn a_majority_wait_ends_with_primary_stepped_down() {
    let set = ReplicaSet::builder()
        .members(3)
        .election_timeout(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let primary = direct(&set, 0, false);
    let db = primary.database("d");
    db.collection::<Document>("c")
        .insert_one(doc! {"_id": 0})
        .await
        .unwrap();
    set.set_lag(1, Duration::from_secs(30));
    set.set_lag(2, Duration::from_secs(30));
    // An explicit session gives the command its lsid; the txnNumber is ours to choose.
    let mut session = primary.start_session().await.unwrap();
    let waiting = tokio::spawn({
        let db = db.clone();
        async move {
            db.run_command(doc! {
                "insert": "c", "documents": [{"_id": 1}],
                "writeConcern": {"w": "majority"}, "txnNumber": 1_i64,
            })
            .session(&mut session)
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    direct(&set, 0, true)
        .database("admin")
        .run_command(doc! {"replSetStepDown": 30, "force": true})
        .await
        .unwrap();
    let reply = waiting.await.unwrap().unwrap();
    assert_eq!(reply.get_i32("n").unwrap(), 1, "{reply}");
    let wce = reply.get_document("writeConcernError").unwrap();
    assert_eq!(wce.get_i32("code").unwrap(), 189);
    assert_eq!(wce.get_str("codeName").unwrap(), "PrimarySteppedDown");
    assert_eq!(
        wce.get_str("errmsg").unwrap(),
        "Primary stepped down while waiting for replication"
    );
    let labels: Vec<&str> = reply
        .get_array("errorLabels")
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    assert_eq!(labels, ["RetryableWriteError"]);
    let new = set.wait_for_primary(Duration::from_secs(5)).await.unwrap();
    assert_ne!(new, 0);
    let on_new = direct(&set, new, true)
        .database("d")
        .collection::<Document>("c")
        .count_documents(doc! {"_id": 1})
        .await
        .unwrap();
    assert_eq!(on_new, 1);
    set.shutdown().await;
}

/// A primary stopped with a `w: 1` write no other member applied: the others elect a new
/// primary without it (the write is not on it), and the old primary, restarted, has a
/// history that diverged. It rolls back as mongod does (`src/mongo/db/repl/README.md`,
/// "Rollback"; `src/mongo/db/repl/rollback_impl.cpp`, `RollbackImpl::runRollback`): the
/// write is undone and the member comes back as a secondary of the new primary. (The
/// partition cases are in `replset_partitions.rs`.)
#[tokio::test]
async fn a_restarted_primary_whose_writes_were_lost_rolls_them_back() {
    let set = ReplicaSet::builder()
        .members(3)
        .election_timeout(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let primary = direct(&set, 0, false);
    let coll = primary.database("d").collection::<Document>("c");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    set.set_lag(1, Duration::from_secs(30));
    set.set_lag(2, Duration::from_secs(30));
    coll.insert_one(doc! {"_id": 1})
        .with_options(
            mongodb::options::InsertOneOptions::builder()
                .write_concern(WriteConcern::nodes(1))
                .build(),
        )
        .await
        .unwrap();
    set.stop(0);
    let new = set.wait_for_primary(Duration::from_secs(5)).await.unwrap();
    assert_ne!(new, 0);
    let on_new = direct(&set, new, true)
        .database("d")
        .collection::<Document>("c")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(on_new, 1, "the w:1 write was only on the stopped primary");
    set.restart(0);
    assert!(set.wait_for_rollbacks(0, 1, Duration::from_secs(5)).await);
    assert_eq!(set.rollbacks(0), (1, 1), "the w:1 insert was undone");
    let reply = hello(&set, 0).await;
    assert!(!reply.get_bool("isWritablePrimary").unwrap());
    assert!(reply.get_bool("secondary").unwrap(), "{reply}");
    let on_old = direct(&set, 0, true)
        .database("d")
        .collection::<Document>("c")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(on_old, 1, "only the replicated write is left");
    set.shutdown().await;
}

/// `$readPreference: {mode: "secondaryPreferred"}`: a direct client sends it as it is
/// (server-selection spec, "Topology type: Single"), so a secondary runs the command.
fn secondary_preferred() -> mongodb::options::SelectionCriteria {
    mongodb::options::ReadPreference::SecondaryPreferred { options: None }.into()
}

/// Collection `d.{coll}` as member `index` holds it, by `_id`.
async fn held_by(set: &ReplicaSet, index: usize, coll: &str) -> Vec<Document> {
    set::sorted(&direct(set, index, true), coll).await
}

/// Waits until member `index` has applied everything the primary wrote.
async fn caught_up(set: &ReplicaSet, index: usize) {
    let started = Instant::now();
    while set.applied(index) < set.applied(set.primary().unwrap()) {
        assert!(started.elapsed() < Duration::from_secs(5), "no catch-up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// mongod's `$out` writes a temporary collection and renames it over the target
/// (`src/mongo/db/pipeline/document_source_out.cpp`: inserts into `tmp.agg_out.*`, then
/// `renameCollection` with `dropTarget`), each an oplog entry the secondaries apply: jstest
/// `jstests/replsets/pipelineout.js` runs a `$out` on the primary and finds the same output
/// on the secondary.
#[tokio::test]
async fn a_primarys_out_is_replicated_to_every_member() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let db = set.client().database("d");
    db.collection::<Document>("in")
        .insert_many([doc! {"_id": 1, "v": 1}, doc! {"_id": 2, "v": 2}])
        .await
        .unwrap();
    db.collection::<Document>("out")
        .insert_one(doc! {"_id": "old"})
        .await
        .unwrap();
    db.run_command(doc! {
        "aggregate": "in", "pipeline": [{"$out": "out"}], "cursor": {},
        "writeConcern": {"w": 3, "wtimeout": 5000},
    })
    .await
    .unwrap();
    for index in 0..3 {
        assert_eq!(
            held_by(&set, index, "out").await,
            [doc! {"_id": 1, "v": 1}, doc! {"_id": 2, "v": 2}],
            "member {index}"
        );
    }
    set.shutdown().await;
}

/// mongod 4.4+ runs an aggregate with `$out` or `$merge` on a secondary that the read
/// preference allows (CRUD spec, "Read preferences and server selection"; DRIVERS-823):
/// the pipeline reads the secondary's own data and the stage's writes are sent to the
/// primary as commands (`src/mongo/db/pipeline/process_interface/replica_set_node_process_interface.cpp`,
/// `ReplicaSetNodeProcessInterface::insert`/`update` and `_executeCommandOnPrimary`; jstest
/// `jstests/noPassthrough/query/out_merge/aggWrite/merge_on_secondary.js` finds the output
/// on the primary), with the aggregate's write concern, so they replicate as any primary
/// write. The reply's `operationTime` is the primary's write's
/// (`CommonProcessInterface::updateClientOperationTime`,
/// `src/mongo/db/pipeline/process_interface/common_process_interface.cpp`: "the secondary must
/// propagate the primary's operation time to the client"), never ahead of its `$clusterTime`
/// (`appendClusterAndOperationTime`, `src/mongo/db/service_entry_point_common.cpp`).
#[tokio::test]
async fn out_and_merge_on_a_secondary_read_there_and_write_through_the_primary() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let input = set.client().database("d").collection::<Document>("in");
    input
        .insert_many([
            doc! {"_id": 1, "k": "a", "v": 1},
            doc! {"_id": 2, "k": "a", "v": 2},
            doc! {"_id": 3, "k": "b", "v": 3},
        ])
        .with_options(
            mongodb::options::InsertManyOptions::builder()
                .write_concern(WriteConcern::nodes(3))
                .build(),
        )
        .await
        .unwrap();
    // Member 1 does not get this one yet: what it reads is its own data.
    set.set_lag(1, Duration::from_secs(30));
    input
        .insert_one(doc! {"_id": 4, "k": "b", "v": 10})
        .with_options(
            mongodb::options::InsertOneOptions::builder()
                .write_concern(WriteConcern::nodes(1))
                .build(),
        )
        .await
        .unwrap();
    let secondary = direct(&set, 1, false);
    let reply = secondary
        .database("d")
        .run_command(doc! {
            "aggregate": "in",
            "pipeline": [{"$group": {"_id": "$k", "sum": {"$sum": "$v"}}}, {"$out": "out"}],
            "cursor": {},
            "writeConcern": {"w": "majority", "wtimeout": 5000},
        })
        .selection_criteria(secondary_preferred())
        .await
        .unwrap();
    assert!(
        reply
            .get_document("cursor")
            .unwrap()
            .get_array("firstBatch")
            .unwrap()
            .is_empty()
    );
    let expected = [doc! {"_id": "a", "sum": 3}, doc! {"_id": "b", "sum": 3}];
    assert_eq!(held_by(&set, 0, "out").await, expected, "on the primary");
    // The primary's last write is the `$out`'s; the reply names its time.
    let primary_hello = set::hello(&direct(&set, 0, true)).await;
    let last_write = primary_hello
        .get_document("lastWrite")
        .unwrap()
        .get_document("opTime")
        .unwrap()
        .get_timestamp("ts")
        .unwrap();
    let operation_time = reply.get_timestamp("operationTime").unwrap();
    assert_eq!(operation_time, last_write, "{reply}");
    let cluster_time = reply
        .get_document("$clusterTime")
        .unwrap()
        .get_timestamp("clusterTime")
        .unwrap();
    assert!(cluster_time >= operation_time, "{reply}");
    // Replicated like any primary write: member 1 gets it once it catches up.
    set.set_lag(1, Duration::ZERO);
    caught_up(&set, 1).await;
    for index in 0..3 {
        assert_eq!(
            held_by(&set, index, "out").await,
            expected,
            "member {index}"
        );
    }

    // `$merge` the same way, now that member 1 has every input document; `w: 3` waited for
    // every member.
    secondary
        .database("d")
        .run_command(doc! {
            "aggregate": "in",
            "pipeline": [
                {"$group": {"_id": "$k", "n": {"$sum": 1}}},
                {"$merge": {"into": "out", "whenMatched": "merge", "whenNotMatched": "insert"}},
            ],
            "cursor": {},
            "writeConcern": {"w": 3, "wtimeout": 5000},
        })
        .selection_criteria(secondary_preferred())
        .await
        .unwrap();
    for index in 0..3 {
        assert_eq!(
            held_by(&set, index, "out").await,
            [
                doc! {"_id": "a", "sum": 3, "n": 2},
                doc! {"_id": "b", "sum": 3, "n": 2},
            ],
            "member {index}"
        );
    }
    set.shutdown().await;
}

/// The writes a secondary sends to the primary carry the aggregate's write concern, and a
/// write-concern failure there fails the aggregate itself, with no `writeConcernError`
/// field (jstest `jstests/noPassthrough/query/out_merge/aggWrite/out_merge_on_secondary_write_concern.js`:
/// `WriteConcernFailed` (64) at the top level; `_executeCommandOnPrimary` returns the
/// reply's write-concern status as the command's). The write itself stays on the primary.
#[tokio::test]
async fn a_secondarys_out_and_merge_fail_on_the_primarys_write_concern() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    set.client()
        .database("d")
        .collection::<Document>("in")
        .insert_one(doc! {"_id": 1, "v": 1})
        .with_options(
            mongodb::options::InsertOneOptions::builder()
                .write_concern(WriteConcern::nodes(3))
                .build(),
        )
        .await
        .unwrap();
    set.set_lag(2, Duration::from_secs(30));
    let secondary = direct(&set, 1, false);
    for stage in [
        doc! {"$out": "out"},
        doc! {"$merge": {"into": "merged", "whenMatched": "fail", "whenNotMatched": "insert"}},
    ] {
        let error = secondary
            .database("d")
            .run_command(doc! {
                "aggregate": "in", "pipeline": [stage.clone()], "cursor": {},
                "writeConcern": {"w": 3, "wtimeout": 200},
            })
            .selection_criteria(secondary_preferred())
            .await
            .unwrap_err();
        assert!(
            matches!(error.kind.as_ref(), ErrorKind::Command(e) if e.code == 64),
            "{stage}: {error:?}"
        );
    }
    assert_eq!(held_by(&set, 0, "out").await, [doc! {"_id": 1, "v": 1}]);
    assert_eq!(held_by(&set, 0, "merged").await, [doc! {"_id": 1, "v": 1}]);
    set.shutdown().await;
}

/// A secondary that knows no primary fails a `$out` or `$merge` as
/// `ReplicaSetNodeProcessInterface::_executeCommandOnPrimary` does
/// (`src/mongo/db/pipeline/process_interface/replica_set_node_process_interface.cpp`):
/// `PrimarySteppedDown` (189) "No primary exists currently", before anything is written.
#[tokio::test]
async fn a_secondary_without_a_primary_fails_out_and_merge() {
    let set = ReplicaSet::builder()
        .members(3)
        .election_timeout(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    set.client()
        .database("d")
        .collection::<Document>("in")
        .insert_one(doc! {"_id": 1})
        .with_options(
            mongodb::options::InsertOneOptions::builder()
                .write_concern(WriteConcern::nodes(3))
                .build(),
        )
        .await
        .unwrap();
    set.stop(0);
    let secondary = direct(&set, 1, false);
    for stage in [doc! {"$out": "out"}, doc! {"$merge": {"into": "merged"}}] {
        let error = secondary
            .database("d")
            .run_command(doc! {"aggregate": "in", "pipeline": [stage.clone()], "cursor": {}})
            .selection_criteria(secondary_preferred())
            .await
            .unwrap_err();
        assert_eq!(code_of(&error), 189, "{stage}: {error}");
        assert!(
            error.to_string().contains("No primary exists currently"),
            "{error}"
        );
    }
    assert!(held_by(&set, 1, "out").await.is_empty());
    assert!(held_by(&set, 1, "merged").await.is_empty());
    set.shutdown().await;
}
