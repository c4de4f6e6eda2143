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
//! The clock tests (issue 41) fail over to a member whose clock is 5 s ahead or behind
//! (`ReplicaSet::set_clock_offset`): mongod's `$$NOW` is each member's own system clock
//! (`Variables::generateRuntimeConstants`, `src/mongo/db/pipeline/variables.cpp`), so it jumps
//! with the primary, while the cluster time (`operationTime`) never goes back
//! (`LogicalClock::advanceClusterTime` and `reserveTicks`, `src/mongo/db/logical_clock.cpp`).
//! Ahead, the holder learns of the step and nobody else is granted its lock while it believes
//! it holds it; behind, no lease is reported lost and nothing is granted twice. Both assert
//! from the grants' `$$NOW` that the new primary's clock really was ahead or behind.
//!
//! These tests always run on the emulator (a real replica set cannot be stepped down or
//! partitioned from a test safely), whatever `MONGODB_URI` says.

use std::sync::Arc;
use std::time::Duration;

use mongolock::{LockClient, LockGuard};
use mongolock_testkit::ReplicaSet;
use mongolock_testkit::replset::schedule::{PARTITIONED, PartitionRollback};
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

/// The lock id holding `resource` in member `index`'s own data.
async fn holder_on(
    schedule: &PartitionRollback,
    index: usize,
    db: &str,
    resource: &str,
) -> Option<String> {
    let doc = schedule.document_on(index, db, "locks", resource).await?;
    doc.get_document("exclusive")
        .ok()
        .and_then(|e| e.get_str("lockId").ok())
        .map(str::to_string)
}

/// The schedule of the write-concern control: the primary (member 0) is partitioned from the
/// others while clients still reach it; client A asks for a mutex there; the majority elects
/// a new primary after the election timeout (the old one steps down: mongod's
/// `TopologyCoordinator::checkMemberTimeouts`, `src/mongo/db/repl/topology_coordinator.cpp`);
/// client B asks for the same mutex on the new primary; the partition heals and member 0
/// rolls back what no majority applied (`src/mongo/db/repl/rollback_impl.cpp`,
/// `RollbackImpl::runRollback`). `w1` makes both clients use `w: 1`
/// (`with_unsafe_write_concern`). The set's steps are the testkit's [`PartitionRollback`],
/// which the harness's control on the set runs too.
async fn partition_schedule(w1: bool) -> PartitionRun {
    use mongodb::options::WriteConcern;
    let schedule = PartitionRollback::start(Duration::from_millis(800))
        .await
        .expect("the replica set starts");
    let set = schedule.set();
    let db = "mongolock_partition";
    let make = |client: mongodb::Client| {
        let locks = LockClient::new(client.database(db).collection("locks"));
        if w1 {
            LockClient::builder(locks.collection().clone())
                .unsafe_write_concern(WriteConcern::nodes(1))
                .build()
                .expect("the default durations are valid")
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
    assert!(
        schedule.caught_up(Duration::from_secs(5)).await,
        "the secondaries caught up"
    );

    schedule.partition();
    let mutex_a = a.mutex("job").ttl(Duration::from_secs(30));
    let first = tokio::spawn(async move { mutex_a.try_acquire().await });
    assert!(
        schedule.elected(Duration::from_secs(10)).await,
        "no new primary"
    );
    assert_eq!(schedule.term(), 2, "the majority elected in a higher term");
    let first = match first.await.unwrap() {
        Ok(granted) => Ok(granted.map(Arc::new)),
        Err(error) => Err(error.to_string()),
    };
    let on_old_before = holder_on(&schedule, PARTITIONED, db, "job").await;

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

    assert!(
        schedule.heal(Duration::from_secs(10)).await,
        "the former primary rolled back"
    );
    let on_old_after = holder_on(&schedule, PARTITIONED, db, "job").await;
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
        rollbacks: schedule.rollbacks(),
    };
    drop(second);
    a.shutdown().await;
    b.shutdown().await;
    schedule.shutdown().await;
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

/// A set of three whose secondaries' clocks read `offset_ms` off the primary's (the set's
/// shared clock), with two lock clients that have found the primary and a `job` mutex held by
/// the first with `ttl`. Every member has the grant.
async fn clock_failover_setup(
    offset_ms: i64,
    db: &str,
    ttl: Duration,
) -> (ReplicaSet, LockClient, LockClient, LockGuard) {
    let set = ReplicaSet::builder()
        .members(3)
        .start()
        .await
        .expect("the replica set starts");
    let a = LockClient::new(set.new_client().database(db).collection("locks"));
    let b = LockClient::new(set.new_client().database(db).collection("locks"));
    a.create_indexes().await.unwrap();
    for locks in [&a, &b] {
        let warm = locks.mutex("warm-up").try_acquire().await.unwrap().unwrap();
        warm.release().await.unwrap();
    }
    // Whichever secondary the step-down hands over to, its clock is off by `offset_ms`.
    set.set_clock_offset(1, offset_ms);
    set.set_clock_offset(2, offset_ms);
    let guard = a
        .mutex("job")
        .ttl(ttl)
        .try_acquire()
        .await
        .unwrap()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while (1..3).any(|i| set.applied(i) < set.applied(0)) {
        assert!(Instant::now() < deadline, "the secondaries caught up");
        sleep(Duration::from_millis(10)).await;
    }
    (set, a, b, guard)
}

/// Steps the primary down (election handoff to a caught-up secondary); returns the new one.
async fn step_down(set: &ReplicaSet) -> usize {
    let before = set.primary();
    set.client()
        .database("admin")
        .run_command(bson::doc! {"replSetStepDown": 10})
        .await
        .expect("the step-down");
    let after = set.wait_for_primary(Duration::from_secs(10)).await;
    assert!(
        after.is_some() && after != before,
        "{before:?} -> {after:?}"
    );
    after.unwrap()
}

/// A write on the primary that reads `$$NOW`: the `$$NOW` it read (ms) and its reply's
/// `operationTime` (sent again while the driver finds the new primary).
async fn write_now(set: &ReplicaSet, db: &str) -> (i64, bson::Timestamp) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let reply = loop {
        let sent = set
            .client()
            .database(db)
            .run_command(bson::doc! {
                "findAndModify": "probe",
                "query": {"_id": 1},
                "update": [{"$set": {"at": "$$NOW"}}],
                "upsert": true,
                "new": true,
            })
            .await;
        match sent {
            Ok(reply) => break reply,
            Err(error) => {
                assert!(Instant::now() < deadline, "{error}");
                sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let now = reply
        .get_document("value")
        .and_then(|v| v.get_datetime("at"))
        .expect("the probe's $$NOW")
        .timestamp_millis();
    (
        now,
        reply
            .get_timestamp("operationTime")
            .expect("an operationTime"),
    )
}

/// `locks` is granted `resource` (retried while its driver finds the new primary).
async fn granted(locks: &LockClient, resource: &str, ttl: Duration) -> LockGuard {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match locks.mutex(resource).ttl(ttl).try_acquire().await {
            Ok(Some(guard)) => return guard,
            Ok(None) => panic!("{resource} is free"),
            Err(error) => {
                assert!(Instant::now() < deadline, "{resource}: {error}");
                sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A failover to a member whose clock is 5 s ahead (issue 41): the new primary's `$$NOW` is
/// 5 s ahead of the former one's (each member's own system clock, mongod's
/// `Variables::generateRuntimeConstants`), so it ends the held lease 5 s earlier than its
/// holder counted. Once a reply from the new primary shows the step (here a grant of another
/// mutex to the same client, whose `$$NOW` is read exactly; its `operationTime` jumps too,
/// `LogicalClock::reserveTicks`), the held guard's time left shrinks by about the step, its
/// deadline is not after the lease's end by the new primary's clock, and the other client is
/// refused the mutex while the holder believes it holds it. The fault is asserted from the
/// grants: the second one's `$$NOW` is 5 s past the first's beyond the time between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_clock_ahead_shortens_the_held_lease_and_grants_it_to_nobody_else() {
    let ttl = Duration::from_secs(30);
    let (set, a, b, guard) = clock_failover_setup(5_000, "mongolock_clock_ahead", ttl).await;
    let old_now = guard.grant().holder().created_at().timestamp_millis();
    let left_before = guard.time_left();
    let counted_from = Instant::now();
    let primary = step_down(&set).await;
    let other = granted(&a, "other", ttl).await;
    let new_now = other.grant().holder().created_at().timestamp_millis();
    let between = counted_from.elapsed();
    let left_after = guard.time_left();
    let step = new_now - old_now - i64::try_from(between.as_millis()).unwrap();
    assert!(
        (4_500..=5_500).contains(&step),
        "the new primary's $$NOW is 5 s ahead: {old_now} -> {new_now} in {between:?}"
    );
    let shrunk = left_before
        .saturating_sub(between)
        .saturating_sub(left_after);
    eprintln!("time left {left_before:?} -> {left_after:?} in {between:?}: shrunk {shrunk:?}");
    assert!(
        (Duration::from_millis(4_500)..=Duration::from_millis(7_000)).contains(&shrunk),
        "the guard's time left shrank by about the step: {shrunk:?}"
    );
    let ends = guard.grant().expires_at().unwrap().timestamp_millis();
    let server_left = ends - set.clock(primary).now().timestamp_millis();
    assert!(
        i128::from(server_left) >= i128::try_from(guard.time_left().as_millis()).unwrap(),
        "the guard's deadline ({:?} left) is not after the lease's end by the new primary's clock ({server_left} ms)",
        guard.time_left()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let b_granted = loop {
        match b.mutex("job").ttl(ttl).try_acquire().await {
            Ok(granted) => break granted,
            Err(error) => {
                assert!(Instant::now() < deadline, "B never answered: {error}");
                sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(!guard.is_lost(), "A still believes it holds the mutex");
    assert!(b_granted.is_none(), "B was granted the mutex A holds");
    drop(b_granted);
    guard.release().await.unwrap();
    other.release().await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
    set.shutdown().await;
}

/// A failover to a member whose clock is 5 s behind (issue 41): the new primary's `$$NOW`
/// is 5 s behind the former one's, while its cluster time (`operationTime`) stays ahead of
/// it until its clock catches up (it applied the former primary's entries and took their
/// times: `LogicalClock::advanceClusterTime`, `src/mongo/db/logical_clock.cpp`). The client
/// must not take that for a forward step: the held lease (3 s, renewed every second on the
/// new primary) and a lease granted there are never reported lost over 7 s (past the moment
/// the new primary's clock catches up with its cluster time and the seconds move again), and
/// the other
/// client is refused the mutex every time it asks. The fault is asserted from the grants: the
/// second one's `$$NOW` is 5 s before the first's beyond the time between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_clock_behind_loses_no_lease_and_grants_none_twice() {
    let ttl = Duration::from_secs(3);
    let (set, a, b, guard) = clock_failover_setup(-5_000, "mongolock_clock_behind", ttl).await;
    let old_now = guard.grant().holder().created_at().timestamp_millis();
    let counted_from = Instant::now();
    let primary = step_down(&set).await;
    let other = granted(&a, "other", ttl).await;
    let new_now = other.grant().holder().created_at().timestamp_millis();
    let between = counted_from.elapsed();
    let step = new_now - old_now - i64::try_from(between.as_millis()).unwrap();
    assert!(
        (-5_500..=-4_500).contains(&step),
        "the new primary's $$NOW is 5 s behind: {old_now} -> {new_now} in {between:?}"
    );
    let behind =
        set.shared_clock().now().timestamp_millis() - set.clock(primary).now().timestamp_millis();
    assert!((4_900..=5_100).contains(&behind), "{behind}");
    // And a write there has an `operationTime` ahead of its `$$NOW`.
    let (now, time) = write_now(&set, "mongolock_clock_behind").await;
    assert!(
        i64::from(time.time) * 1_000 > now + 3_000,
        "operationTime {time:?} ahead of $$NOW {now}"
    );
    let until = Instant::now() + Duration::from_secs(7);
    let mut refused = 0;
    while Instant::now() < until {
        match b.mutex("job").ttl(ttl).try_acquire().await {
            Ok(Some(granted)) => panic!(
                "B granted token {} while A holds token {} (A's guard lost: {})",
                granted.fencing_token(),
                guard.fencing_token(),
                guard.is_lost()
            ),
            Ok(None) => refused += 1,
            Err(_) => {}
        }
        assert!(!guard.is_lost(), "the held lease was reported lost");
        assert!(
            !other.is_lost(),
            "the lease granted on the new primary was reported lost"
        );
        sleep(Duration::from_millis(200)).await;
    }
    assert!(refused > 0, "B was never answered");
    assert!(
        guard.time_left() > Duration::from_millis(1_000),
        "no false step shortened the held lease: {:?} left",
        guard.time_left()
    );
    guard.release().await.unwrap();
    other.release().await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
    set.shutdown().await;
}
