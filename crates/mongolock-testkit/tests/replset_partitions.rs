//! The emulated replica set under a partition: a primary cut off from the others (clients
//! still reach it) keeps taking `w: 1` writes, its `w: "majority"` writes wait, and it steps
//! down after the election timeout while the majority elects a new primary in a higher term;
//! when it rejoins, what it wrote alone is rolled back. Each test names the mongod source it
//! follows.

use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongodb::Client;

use mongolock_testkit::ReplicaSet;

mod set;
use set::{ELECTION_TIMEOUT, code_of, election_id, hello, member_options, new_primary};

/// A client connected to member `index` alone (`directConnection=true`; the driver then
/// reads with `primaryPreferred`, so any member serves reads); its writes are not retried.
fn direct(set: &ReplicaSet, index: usize) -> Client {
    Client::with_options(member_options(set, index)).unwrap()
}

async fn ids(client: &Client) -> Vec<Document> {
    set::sorted(client, "c").await
}

/// A primary partitioned from the others, clients still reaching it, stays primary until it
/// has not seen a majority for the election timeout: `TopologyCoordinator::checkMemberTimeouts`
/// (`src/mongo/db/repl/topology_coordinator.cpp`) marks the members it has not heard from
/// for `getElectionTimeoutPeriod()` down and steps down with "Can't see a majority of the set,
/// relinquishing primary". Until then it takes `w: 1` writes, and a `w: "majority"` write
/// waits and fails on `wtimeout` with the write applied locally
/// (`replication_coordinator_impl.cpp`, `awaitReplication`; `src/mongo/db/commands.cpp`,
/// `appendCommandWCStatus`: `writeConcernError {code: 64, errInfo: {wtimeout: true}}`), while
/// one without `wtimeout` is failed by the step-down with 189 `PrimarySteppedDown` "Primary
/// stepped down while waiting for replication". The majority elects a new primary in a
/// higher term (`electionId` = `OID::fromTerm`); the old one, now a secondary that reaches no
/// primary, names none in `hello` and refuses writes with `NotWritablePrimary` (10107).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_primary_takes_w1_writes_until_it_steps_down_and_the_majority_elects() {
    let set = set::three_with_quick_elections().await;
    let old = direct(&set, 0);
    let db = old.database("d");
    db.run_command(
        doc! {"insert": "c", "documents": [{"_id": 0}], "writeConcern": {"w": "majority"}},
    )
    .await
    .unwrap();

    set.partition(0);
    let partitioned_at = Instant::now();
    assert!(set.is_partitioned(0));
    assert!(hello(&old).await.get_bool("isWritablePrimary").unwrap());
    let w1 = db
        .run_command(doc! {"insert": "c", "documents": [{"_id": 1}], "writeConcern": {"w": 1}})
        .await
        .unwrap();
    assert_eq!(w1.get_i32("n").unwrap(), 1);
    assert!(!w1.contains_key("writeConcernError"), "{w1}");
    let timed_out = db
        .run_command(doc! {
            "insert": "c", "documents": [{"_id": 2}],
            "writeConcern": {"w": "majority", "wtimeout": 150},
        })
        .await
        .unwrap();
    assert_eq!(timed_out.get_i32("n").unwrap(), 1, "{timed_out}");
    let wce = timed_out.get_document("writeConcernError").unwrap();
    assert_eq!(wce.get_i32("code").unwrap(), 64, "{wce}");
    assert!(
        wce.get_document("errInfo")
            .unwrap()
            .get_bool("wtimeout")
            .unwrap()
    );
    // Applied on the partitioned primary, on no other member.
    assert_eq!(ids(&old).await.len(), 3);
    for other in [1, 2] {
        assert_eq!(ids(&direct(&set, other)).await, vec![doc! {"_id": 0}]);
    }
    // A majority write with no wtimeout waits until the step-down ends it.
    let waiting = {
        let db = db.clone();
        tokio::spawn(async move {
            db.run_command(doc! {
                "insert": "c", "documents": [{"_id": 3}], "writeConcern": {"w": "majority"},
            })
            .await
        })
    };
    assert!(set.primary() == Some(0), "still primary before the timeout");

    let elected = new_primary(&set, 0, Duration::from_secs(5)).await;
    let took = partitioned_at.elapsed();
    assert!(took >= ELECTION_TIMEOUT, "stepped down after {took:?}");
    assert_eq!(set.term(), 2);
    let stepped_down = waiting.await.unwrap().unwrap();
    let wce = stepped_down.get_document("writeConcernError").unwrap();
    assert_eq!(
        (wce.get_i32("code").unwrap(), wce.get_str("errmsg").unwrap()),
        (189, "Primary stepped down while waiting for replication")
    );

    let reply = hello(&old).await;
    assert!(!reply.get_bool("isWritablePrimary").unwrap(), "{reply}");
    assert!(reply.get_bool("secondary").unwrap(), "{reply}");
    assert!(
        !reply.contains_key("primary"),
        "it reaches no primary: {reply}"
    );
    let refused = old
        .database("d")
        .collection::<Document>("c")
        .insert_one(doc! {"_id": 4})
        .await
        .unwrap_err();
    assert_eq!(code_of(&refused), 10107, "{refused}");
    let reply = hello(&direct(&set, elected)).await;
    assert!(reply.get_bool("isWritablePrimary").unwrap());
    assert_eq!(reply.get_object_id("electionId").unwrap(), election_id(2));
    let other = 3 - elected;
    let reply = hello(&direct(&set, other)).await;
    assert_eq!(
        reply.get_str("primary").unwrap(),
        set.hosts()[elected],
        "{reply}"
    );
    set.shutdown().await;
}

/// When the former primary rejoins, what it wrote alone is rolled back: mongod's rollback
/// (`src/mongo/db/repl/rollback_impl.cpp`, `RollbackImpl::runRollback`; "Rollback common
/// point") finds the point its oplog shares with the sync source's, recovers the data to the
/// stable timestamp (majority-committed, so the common point is never before the commit
/// point and no majority-committed write is undone), and applies the sync source's entries
/// from there (`src/mongo/db/repl/README.md`, "Rollback: Recover To A Timestamp"). While
/// partitioned it is a secondary serving its own, diverged, data. A `w: 1` insert and a
/// `w: 1` update acknowledged by the partitioned primary disappear; the majority-acknowledged
/// document keeps its committed value, and the member then follows the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_w1_write_of_a_partitioned_primary_is_rolled_back_and_a_majority_write_never_is() {
    let set = set::three_with_quick_elections().await;
    let old = direct(&set, 0);
    let db = old.database("d");
    db.run_command(doc! {
        "insert": "c", "documents": [{"_id": "committed", "x": 1}],
        "writeConcern": {"w": "majority"},
    })
    .await
    .unwrap();

    set.partition(0);
    db.run_command(doc! {
        "insert": "c", "documents": [{"_id": "lost"}], "writeConcern": {"w": 1},
    })
    .await
    .unwrap();
    db.run_command(doc! {
        "update": "c", "updates": [{"q": {"_id": "committed"}, "u": {"$set": {"x": 2}}}],
        "writeConcern": {"w": 1},
    })
    .await
    .unwrap();
    let elected = new_primary(&set, 0, Duration::from_secs(5)).await;
    direct(&set, elected)
        .database("d")
        .run_command(doc! {
            "insert": "c", "documents": [{"_id": "after"}], "writeConcern": {"w": "majority"},
        })
        .await
        .unwrap();
    assert!(set.is_diverged(0));
    // Partitioned, it serves its own history as a secondary.
    assert_eq!(
        ids(&old).await,
        vec![doc! {"_id": "committed", "x": 2}, doc! {"_id": "lost"}]
    );
    assert_eq!(set.rollbacks(0), (0, 0));

    set.heal(0);
    assert!(
        set.wait_for_rollbacks(0, 1, Duration::from_secs(5)).await,
        "no rollback"
    );
    assert_eq!(
        set.rollbacks(0),
        (1, 2),
        "one rollback undid both w:1 writes"
    );
    assert!(!set.is_diverged(0));
    assert_eq!(
        ids(&old).await,
        vec![doc! {"_id": "after"}, doc! {"_id": "committed", "x": 1},]
    );
    // It follows the new primary from now on.
    direct(&set, elected)
        .database("d")
        .run_command(doc! {
            "insert": "c", "documents": [{"_id": "later"}], "writeConcern": {"w": 3, "wtimeout": 5000},
        })
        .await
        .unwrap();
    assert_eq!(ids(&old).await.len(), 3);
    let reply = hello(&old).await;
    assert!(reply.get_bool("secondary").unwrap(), "{reply}");
    assert_eq!(reply.get_str("primary").unwrap(), set.hosts()[elected]);
    set.shutdown().await;
}

/// A partition that heals before the election timeout changes nothing: the primary never
/// lost a majority for `getElectionTimeoutPeriod()` (`checkMemberTimeouts`), so it stays
/// primary in the same term, and what it wrote meanwhile reaches the others (nothing
/// diverged, nothing is rolled back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_shorter_than_the_election_timeout_rolls_nothing_back() {
    let set = ReplicaSet::builder()
        .members(3)
        .election_timeout(Duration::from_secs(2))
        .start()
        .await
        .unwrap();
    let primary = direct(&set, 0);
    set.partition(0);
    primary
        .database("d")
        .run_command(doc! {"insert": "c", "documents": [{"_id": 1}], "writeConcern": {"w": 1}})
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(ids(&direct(&set, 1)).await, Vec::<Document>::new());
    set.heal(0);
    primary
        .database("d")
        .run_command(doc! {"insert": "c", "documents": [{"_id": 2}], "writeConcern": {"w": 3, "wtimeout": 5000}})
        .await
        .unwrap();
    assert_eq!((set.primary(), set.term()), (Some(0), 1));
    for member in 0..3 {
        assert_eq!(ids(&direct(&set, member)).await.len(), 2, "member {member}");
        assert_eq!(set.rollbacks(member), (0, 0));
    }
    set.shutdown().await;
}

/// A member whose history diverged acknowledges none of the new primary's writes: what
/// counts towards `w: "majority"` is each member's last applied optime in the set's history
/// (`replication_coordinator_impl.cpp`, `awaitReplication`; `TopologyCoordinator` tracks
/// each member's `lastAppliedOpTime`), and a diverged member's newer entries are not in that
/// history. With the third member lagging, a majority write on the new primary times out
/// (64), however many entries the partitioned former primary wrote alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diverged_member_acknowledges_none_of_the_new_primarys_writes() {
    let set = set::three_with_quick_elections().await;
    let old = direct(&set, 0);
    set.partition(0);
    for id in 0..5 {
        old.database("d")
            .run_command(doc! {"insert": "c", "documents": [{"_id": id}], "writeConcern": {"w": 1}})
            .await
            .unwrap();
    }
    let elected = new_primary(&set, 0, Duration::from_secs(5)).await;
    set.set_lag(3 - elected, Duration::from_secs(30));
    let reply = direct(&set, elected)
        .database("d")
        .run_command(doc! {
            "insert": "c", "documents": [{"_id": "new"}],
            "writeConcern": {"w": "majority", "wtimeout": 300},
        })
        .await
        .unwrap();
    let wce = reply.get_document("writeConcernError");
    assert_eq!(
        wce.ok().and_then(|w| w.get_i32("code").ok()),
        Some(64),
        "{reply}"
    );
    set.shutdown().await;
}

/// A secondary that had not yet applied the old primary's last majority-committed write when
/// the primary was cut off gets it from the member it still reaches, as mongod's secondaries
/// chain (a sync source may be any member ahead of it that it reaches, not only the primary:
/// jstest `jstests/replsets/slavedelay3.js`, where a member cut off from the primary receives
/// the primary's write through another secondary), and then acknowledges the new primary's
/// majority writes. Before, a secondary took an entry only while its writer was reachable, so
/// here it never caught up and the new primary's `w: "majority"` write waited for the heal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_secondary_gets_a_cut_off_primarys_committed_write_from_another_member() {
    let set = set::three_with_quick_elections().await;
    let old = direct(&set, 0);
    // Member 2 applies nothing for now: the write commits with members 0 and 1.
    set.set_lag(2, Duration::from_secs(3600));
    let reply = old
        .database("d")
        .run_command(doc! {
            "insert": "c", "documents": [{"_id": "committed"}],
            "writeConcern": {"w": "majority", "wtimeout": 5000},
        })
        .await
        .unwrap();
    assert!(!reply.contains_key("writeConcernError"), "{reply}");
    assert!(
        set.applied(2) < set.applied(1),
        "member 2 applied the write before the partition: the case is not staged"
    );
    set.partition(0);
    set.set_lag(2, Duration::ZERO);
    let elected = new_primary(&set, 0, Duration::from_secs(5)).await;
    let reply = direct(&set, elected)
        .database("d")
        .run_command(doc! {
            "insert": "c", "documents": [{"_id": "new"}],
            "writeConcern": {"w": "majority", "wtimeout": 3000},
        })
        .await
        .unwrap();
    assert!(!reply.contains_key("writeConcernError"), "{reply}");
    let other = 3 - elected;
    assert_eq!(
        ids(&direct(&set, other)).await,
        [doc! {"_id": "committed"}, doc! {"_id": "new"}]
    );
    set.shutdown().await;
}
