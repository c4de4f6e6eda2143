//! A mutex across a failover: two lock clients contend for one mutex on the testkit's
//! three-member replica set, and the primary steps down (twice) while one of them holds it.
//! There must never be two holders (a grant while another holder's lease is not yet
//! reported lost), and fencing tokens must only go up.
//!
//! The set follows mongod's replica set where it matters here (see
//! `mongolock_testkit::replset`): `replSetStepDown` as `src/mongo/db/repl/repl_set_commands.cpp`
//! parses it, election handoff to the caught-up secondary (`src/mongo/db/repl/README.md`,
//! "Step Up"), writes on the former primary refused with `NotWritablePrimary` and the
//! `RetryableWriteError` label (`src/mongo/db/service_entry_point_common.cpp`,
//! `src/mongo/db/error_labels.cpp`), and `w: "majority"` waiting for a majority of members.
//!
//! The write-concern control (issue 41) partitions the primary from the others while clients
//! still reach it, and rolls it back when it rejoins: with `w: 1` a grant acknowledged by the
//! partitioned primary alone gives two holders (the test asserts it does, so the schedule is
//! shown to catch a double grant), and with the default `w: "majority"` the same schedule
//! gives none. Both assert that the fault ran (the partitioned member had the first grant
//! and rolled it back).
//!
//! These tests always run on the emulator (a real replica set cannot be stepped down or
//! partitioned from a test safely), whatever `MONGODB_URI` says.

use std::sync::Arc;
use std::time::Duration;

use mongolock::{LockClient, LockGuard};
use mongolock_testkit::ReplicaSet;
use tokio::sync::Mutex;
use tokio::time::{Instant, sleep};

#[derive(Default)]
struct Book {
    /// The client holding the mutex now, as its worker saw its grant, with its guard.
    holder: Option<(usize, Arc<LockGuard>)>,
    /// Every grant in the order the workers saw them: (worker, token, after how many
    /// step-downs).
    grants: Vec<(usize, i64, usize)>,
    /// Failed attempts and releases (allowed during a failover: unknown outcomes or
    /// refusals), as text.
    errors: Vec<String>,
    /// What must never happen.
    violations: Vec<String>,
    step_downs: usize,
    /// Releases that found the lease held throughout (the server still had the grant).
    held_throughout: usize,
}

async fn worker(
    index: usize,
    locks: LockClient,
    book: Arc<Mutex<Book>>,
    until: Instant,
) -> LockClient {
    while Instant::now() < until {
        let attempt = locks
            .mutex("failover")
            .ttl(Duration::from_secs(1))
            .acquire_timeout(Duration::from_secs(3))
            .await;
        let guard = match attempt {
            Ok(Some(guard)) => Arc::new(guard),
            Ok(None) => continue,
            Err(error) => {
                book.lock().await.errors.push(format!("acquire: {error}"));
                sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        {
            let mut book = book.lock().await;
            let token = guard.fencing_token();
            if let Some((other, held)) = &book.holder
                && !held.is_lost()
            {
                let message = format!(
                    "worker {index} granted token {token} while worker {other} holds token {}",
                    held.fencing_token()
                );
                book.violations.push(message);
            }
            if let Some((_, last, _)) = book.grants.last()
                && token <= *last
            {
                let message = format!("token {token} after token {last}");
                book.violations.push(message);
            }
            let step_downs = book.step_downs;
            book.grants.push((index, token, step_downs));
            book.holder = Some((index, guard.clone()));
        }
        // Hold it a while, across renewals (the step-downs come while someone holds it).
        tokio::select! {
            _ = sleep(Duration::from_millis(400)) => {}
            _ = guard.lost() => {}
        }
        {
            let mut book = book.lock().await;
            if book.holder.as_ref().is_some_and(|(i, _)| *i == index) {
                book.holder = None;
            }
        }
        let guard = Arc::try_unwrap(guard).expect("only this worker keeps the guard now");
        match guard.release().await {
            Ok(()) => book.lock().await.held_throughout += 1,
            Err(error) => book.lock().await.errors.push(format!("release: {error}")),
        }
        // Let the other one in now and then.
        sleep(Duration::from_millis(10)).await;
    }
    locks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_has_one_holder_and_rising_tokens_across_step_downs() {
    let set = ReplicaSet::builder()
        .members(3)
        .lag(Duration::from_millis(5))
        .start()
        .await
        .expect("the replica set starts");
    let db = "mongolock_failover";
    let first = LockClient::new(set.new_client().database(db).collection("locks"));
    first.create_indexes().await.unwrap();
    let second = LockClient::new(set.new_client().database(db).collection("locks"));
    let book = Arc::new(Mutex::new(Book::default()));
    let until = Instant::now() + Duration::from_secs(4);
    let workers = [
        tokio::spawn(worker(0, first, book.clone(), until)),
        tokio::spawn(worker(1, second, book.clone(), until)),
    ];

    let admin = set.client().database("admin");
    for round in 0..2 {
        sleep(Duration::from_millis(800)).await;
        // Wait until someone holds the mutex, then step the primary down under it.
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            if book.lock().await.holder.is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "nobody got the mutex");
            sleep(Duration::from_millis(5)).await;
        }
        let before = set.primary();
        admin
            .run_command(bson::doc! {"replSetStepDown": 10})
            .await
            .unwrap_or_else(|e| panic!("step-down {round}: {e}"));
        let after = set.primary();
        assert!(
            after.is_some() && after != before,
            "{before:?} -> {after:?}"
        );
        book.lock().await.step_downs += 1;
    }
    assert_eq!(set.term(), 3);

    let mut clients = Vec::new();
    for worker in workers {
        clients.push(worker.await.unwrap());
    }
    for locks in clients {
        locks.shutdown().await;
    }
    let book = book.lock().await;
    eprintln!(
        "{} grants ({} after the first step-down, {} after the second), {} released held \
         throughout, {} errors: {:?}",
        book.grants.len(),
        book.grants.iter().filter(|g| g.2 >= 1).count(),
        book.grants.iter().filter(|g| g.2 >= 2).count(),
        book.held_throughout,
        book.errors.len(),
        book.errors
    );
    assert!(book.violations.is_empty(), "{:?}", book.violations);
    assert!(
        book.grants.iter().any(|g| g.2 == 2),
        "no grant on the last primary: {:?}",
        book.grants
    );
    drop(book);
    set.shutdown().await;
}

/// What one run of [`partition_schedule`] saw.
struct PartitionRun {
    /// The first client's grant from the partitioned primary (or its error).
    first: Result<Option<Arc<LockGuard>>, String>,
    /// Whether the first grant was still believed held (not lost) when the second client
    /// was granted on the new primary.
    first_held_at_second_grant: bool,
    /// The second client's outcome on the new primary: granted or not.
    second_granted: bool,
    /// The lock's holder on the partitioned member before the partition healed, and after
    /// its rollback.
    on_old_before: Option<String>,
    on_old_after: Option<String>,
    /// The first client's lock id.
    first_lock_id: Option<String>,
    /// Member 0's rollbacks and the operations they undid.
    rollbacks: (usize, usize),
}

/// The lock id holding `resource` in member `index`'s own data (a direct connection, which
/// reads with `primaryPreferred`, so a secondary answers too).
async fn holder_on(set: &ReplicaSet, index: usize, db: &str, resource: &str) -> Option<String> {
    let options = mongodb::options::ClientOptions::builder()
        .hosts(vec![mongodb::options::ServerAddress::Tcp {
            host: "127.0.0.1".into(),
            port: Some(set.member(index).addr().port()),
        }])
        .direct_connection(true)
        .build();
    let client = mongodb::Client::with_options(options).unwrap();
    let doc = client
        .database(db)
        .collection::<bson::Document>("locks")
        .find_one(bson::doc! {"_id": resource})
        .await
        .unwrap();
    client.shutdown().immediate(true).await;
    doc.and_then(|d| {
        d.get_document("exclusive")
            .ok()
            .and_then(|e| e.get_str("lockId").ok())
            .map(str::to_string)
    })
}

/// The schedule of the write-concern control: the primary (member 0) is partitioned from the
/// others while clients still reach it; client A asks for a mutex there; the majority elects
/// a new primary after the election timeout (the old one steps down: mongod's
/// `TopologyCoordinator::checkMemberTimeouts`, `src/mongo/db/repl/topology_coordinator.cpp`);
/// client B asks for the same mutex on the new primary; the partition heals and member 0
/// rolls back what no majority applied (`src/mongo/db/repl/rollback_impl.cpp`,
/// `RollbackImpl::runRollback`). `w1` makes both clients use `w: 1`
/// (`with_unsafe_write_concern`).
async fn partition_schedule(w1: bool) -> PartitionRun {
    use mongodb::options::WriteConcern;
    let set = ReplicaSet::builder()
        .members(3)
        .election_timeout(Duration::from_millis(800))
        .start()
        .await
        .expect("the replica set starts");
    let db = "mongolock_partition";
    let make = |client: mongodb::Client| {
        let locks = LockClient::new(client.database(db).collection("locks"));
        if w1 {
            locks.with_unsafe_write_concern(WriteConcern::nodes(1))
        } else {
            locks
        }
    };
    let a = make(set.new_client());
    let b = make(set.new_client());
    a.create_indexes().await.unwrap();
    // Both clients have found the primary, and every member has the indexes.
    for locks in [&a, &b] {
        let warm = locks.mutex("warm-up").try_acquire().await.unwrap().unwrap();
        warm.release().await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while (1..3).any(|i| set.applied(i) < set.applied(0)) {
        assert!(Instant::now() < deadline, "the secondaries caught up");
        sleep(Duration::from_millis(10)).await;
    }

    set.partition(0);
    let mutex_a = a.mutex("job").ttl(Duration::from_secs(30));
    let first = tokio::spawn(async move { mutex_a.try_acquire().await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while set.primary().is_none_or(|p| p == 0) {
        assert!(Instant::now() < deadline, "no new primary");
        sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(set.term(), 2, "the majority elected in a higher term");
    let first = match first.await.unwrap() {
        Ok(granted) => Ok(granted.map(Arc::new)),
        Err(error) => Err(error.to_string()),
    };
    let on_old_before = holder_on(&set, 0, db, "job").await;

    // B asks on the new primary until it is answered (its driver may first try the old
    // primary and be refused).
    let deadline = Instant::now() + Duration::from_secs(10);
    let second = loop {
        match b
            .mutex("job")
            .ttl(Duration::from_secs(30))
            .try_acquire()
            .await
        {
            Ok(granted) => break granted,
            Err(error) => {
                assert!(Instant::now() < deadline, "B never answered: {error}");
                sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let first_held_at_second_grant = second.is_some()
        && first
            .as_ref()
            .is_ok_and(|g| g.as_ref().is_some_and(|g| !g.is_lost()));

    set.heal(0);
    assert!(
        set.wait_for_rollbacks(0, 1, Duration::from_secs(10)).await,
        "the former primary rolled back"
    );
    let on_old_after = holder_on(&set, 0, db, "job").await;
    let run = PartitionRun {
        first_lock_id: first
            .as_ref()
            .ok()
            .and_then(|g| g.as_ref().map(|g| g.lock_id().to_string())),
        first,
        first_held_at_second_grant,
        second_granted: second.is_some(),
        on_old_before,
        on_old_after,
        rollbacks: set.rollbacks(0),
    };
    drop(second);
    a.shutdown().await;
    b.shutdown().await;
    set.shutdown().await;
    run
}

/// The negative control: with `w: 1` (`with_unsafe_write_concern`), A's grant is acknowledged
/// by the partitioned primary alone, B is granted the same mutex on the new primary while A's
/// guard still believes it holds it (two holders), and the fault really ran: A's grant was
/// in member 0's data before the heal and is gone after its rollback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_w1_a_grant_rolled_back_by_a_partition_gives_two_holders() {
    let run = partition_schedule(true).await;
    let first = run.first.as_ref().expect("A is answered at once with w: 1");
    assert!(first.is_some(), "A is granted by the partitioned primary");
    let a_id = run.first_lock_id.clone().unwrap();
    assert_eq!(run.on_old_before.as_deref(), Some(a_id.as_str()));
    assert!(run.second_granted, "B is granted on the new primary");
    assert!(
        run.first_held_at_second_grant,
        "two holders: A's guard still believed it held the mutex when B was granted"
    );
    assert!(run.rollbacks.1 >= 1, "{:?}", run.rollbacks);
    assert_ne!(
        run.on_old_after.as_deref(),
        Some(a_id.as_str()),
        "A's grant was rolled back"
    );
    assert!(run.on_old_after.is_some(), "member 0 follows B's grant");
}

/// The same schedule with the default write concern (`w: "majority"`): A's grant cannot be
/// acknowledged by the partitioned primary; it waits, and is either refused or answered with
/// an unknown outcome, or survives (retried on the new primary, where it is majority
/// committed, so B is refused). Never two holders; and the fault ran: A's write, applied on
/// the partitioned primary alone, was rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_majority_the_same_partition_gives_no_double_holder() {
    let run = partition_schedule(false).await;
    eprintln!(
        "A: {:?}, B granted: {}, on member 0 before {:?} after {:?}, rollbacks {:?}",
        run.first
            .as_ref()
            .map(|g| g.as_ref().map(|g| g.lock_id().to_string())),
        run.second_granted,
        run.on_old_before,
        run.on_old_after,
        run.rollbacks
    );
    assert!(!run.first_held_at_second_grant, "two holders");
    let a_granted = matches!(run.first, Ok(Some(_)));
    assert!(!(a_granted && run.second_granted), "A and B both granted");
    assert!(
        run.on_old_before.is_some(),
        "A's write was applied on member 0"
    );
    assert!(run.rollbacks.1 >= 1, "{:?}", run.rollbacks);
}
