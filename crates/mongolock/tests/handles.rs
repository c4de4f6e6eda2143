//! The handles' promises: [`Mutex`], [`RwLock`] and [`Semaphore`], and the [`LockGuard`]
//! each acquire returns.
//!
//! - **Mutex.** One guard at a time, across clients. `try_acquire` is `None` while it is
//!   held; `acquire_timeout` is `None` at its deadline and `Some` once the holder releases.
//!   Every guard holds the lock with a lock id of its own (128 random bits, 32 hex digits)
//!   unless the handle was given one, and every guard's fencing token is greater than the
//!   last one's.
//! - **Dropping a guard releases the lock** in the background: after
//!   [`LockClient::shutdown`] the resource is free and the client keeps no lease.
//! - **Reader-writer lock.** Any number of readers at once; a writer excludes readers and
//!   writers. Writers go first: once a writer waits, new readers are refused while the old
//!   ones still hold, and the writer gets the lock when they release. A writer that crashes
//!   while waiting keeps readers out only until its announcement lapses (twice its TTL).
//! - **Semaphore.** At most its number of permits at once; a semaphore on the same resource
//!   with another number is refused with [`ErrorKind::CapMismatch`]; a released permit can
//!   be taken again.
//! - **`holders()`** on each handle lists the locks held on its resource, leaving out those
//!   only in force (a lock-delay, a minimum hold) and expired ones.
//! - **Work run under a lock** (`Mutex::run` and the other closure forms): see
//!   `tests/closures.rs`.
//! - **`LockGuard::release` after a loss** reports it: [`ErrorKind::LeaseLost`].
//! - **Send and Sync.** The handles and guards are `Send + Sync`, and the futures of every
//!   acquire, of the closure forms, `release`, `lost` and `shutdown` are `Send`, so they can
//!   be spawned; so are the election's and the multi-lock's.
//! - **Bad settings** are [`ErrorKind::InvalidArgument`] naming the setting, and nothing is
//!   written.
//!
//! Tests that move the emulator's clock are named `emulator_only_...`; the others also run
//! against the real MongoDB named by `MONGODB_URI`. Time bounds are hang guards, never
//! assertions that something is fast.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bson::doc;
use common::{emulator_env, env, invalid_argument};
use mongolock::{
    AcquireRequest, Attempt, ErrorKind, Filter, LeaseState, LockClient, LockDetails, LockGuard,
    LockKind, LossReason, Mutex, RwLock, Semaphore,
};
use tokio::time::{sleep, timeout};

/// A guard against hangs only.
const HANG_GUARD: Duration = Duration::from_secs(20);

/// Awaits `future`, failing the test if it hangs.
async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    timeout(HANG_GUARD, future)
        .await
        .unwrap_or_else(|_| panic!("hung: {what}"))
}

fn is_hex_lock_id(lock_id: &str) -> bool {
    lock_id.len() == 32 && lock_id.bytes().all(|b| b.is_ascii_hexdigit())
}

// ---------------------------------------------------------------------------------------
// Mutex.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_mutex_has_one_holder_and_hands_over_on_release() {
    let env = env("mutex").await;
    let other = env.other_client().await;
    let job = env.locks.mutex("job");

    let first = job.acquire().await.unwrap();
    assert_eq!(first.kind(), LockKind::Exclusive);
    assert_eq!(first.state(), LeaseState::Held);
    assert!(job.try_acquire().await.unwrap().is_none(), "held");
    assert!(
        other.mutex("job").try_acquire().await.unwrap().is_none(),
        "held, whichever client asks"
    );
    assert!(
        job.acquire_timeout(Duration::from_millis(200))
            .await
            .unwrap()
            .is_none(),
        "still held at the deadline"
    );

    let waiting = tokio::spawn({
        let job = other.mutex("job");
        async move { job.acquire_timeout(HANG_GUARD).await }
    });
    sleep(Duration::from_millis(100)).await;
    let first_token = first.fencing_token();
    let first_id = first.lock_id().to_owned();
    first.release().await.unwrap();
    let second = bounded("the waiter", waiting)
        .await
        .unwrap()
        .unwrap()
        .expect("released: the waiter gets it");

    assert!(is_hex_lock_id(&first_id), "{first_id:?}");
    assert!(is_hex_lock_id(second.lock_id()), "{:?}", second.lock_id());
    assert_ne!(first_id, second.lock_id(), "each guard has its own lock id");
    assert!(second.fencing_token() > first_token);

    let held = env.locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].lock_id(), second.lock_id());
    assert_eq!(held[0].fencing_token(), second.fencing_token());
    second.release().await.unwrap();
}

/// Six tasks on two clients take the mutex three times each; a flag set while holding
/// proves no two guards are ever held at once, and the tokens grow with every grant.
#[tokio::test]
async fn two_guards_of_a_mutex_are_never_held_at_once() {
    let env = env("mutex_exclusion").await;
    let clients = [env.locks.clone(), env.other_client().await];
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..6)
        .map(|task| {
            let job = clients[task % 2].mutex("job");
            let (inside, tokens) = (inside.clone(), tokens.clone());
            tokio::spawn(async move {
                for _ in 0..3 {
                    let guard = job.acquire().await.unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tokens.lock().unwrap().push(guard.fencing_token());
                    sleep(Duration::from_millis(5)).await;
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        bounded("a task's three turns", task).await.unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 18);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens increase grant after grant: {tokens:?}"
    );
}

#[tokio::test]
async fn the_lock_id_owner_and_host_settings_are_honoured() {
    let env = env("lock_id").await;
    let guard = env
        .locks
        .mutex("job")
        .lock_id("worker-7")
        .owner("cron@host-a")
        .host("batch-runner")
        .acquire()
        .await
        .unwrap();
    assert_eq!(guard.lock_id(), "worker-7");
    let held = env
        .locks
        .status(&Filter::default().lock_id("worker-7"))
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].resource(), "job");
    assert_eq!(held[0].owner(), Some("cron@host-a"));
    assert_eq!(held[0].host(), Some("batch-runner"));
    guard.release().await.unwrap();
    assert!(
        env.locks
            .status(&Filter::default())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn dropping_a_guard_releases_the_lock_in_the_background() {
    let env = env("drop").await;
    let guard = env.locks.mutex("job").acquire().await.unwrap();
    let permit = env.locks.semaphore("pool", 2).acquire().await.unwrap();
    assert_eq!(env.locks.leases(), 2);
    drop(guard);
    drop(permit);
    env.locks.shutdown().await;
    assert!(
        env.locks
            .status(&Filter::default())
            .await
            .unwrap()
            .is_empty(),
        "both released"
    );
    assert_eq!(env.locks.leases(), 0);
    let other = env.other_client().await;
    let again = other.mutex("job").try_acquire().await.unwrap();
    again.expect("free for anybody").release().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// Reader-writer lock.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn readers_share_and_a_writer_excludes_everybody() {
    let env = env("rwlock").await;
    let other = env.other_client().await;
    let config = env.locks.rwlock("config");

    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(config.read().await.unwrap());
    }
    readers.push(
        other
            .rwlock("config")
            .try_read()
            .await
            .unwrap()
            .expect("a fourth reader"),
    );
    assert!(readers.iter().all(|r| r.kind() == LockKind::Shared));
    assert_eq!(env.locks.status(&Filter::default()).await.unwrap().len(), 4);
    assert!(
        other.rwlock("config").try_write().await.unwrap().is_none(),
        "readers hold it"
    );
    for reader in readers {
        reader.release().await.unwrap();
    }

    let writer = config.write().await.unwrap();
    assert_eq!(writer.kind(), LockKind::Exclusive);
    assert!(
        other.rwlock("config").try_read().await.unwrap().is_none(),
        "the writer holds it"
    );
    assert!(
        other.rwlock("config").try_write().await.unwrap().is_none(),
        "the writer holds it"
    );
    assert!(
        config.try_write().await.unwrap().is_none(),
        "even for the same handle"
    );
    writer.release().await.unwrap();
}

/// Whether a shared request on `resource` is held back by a waiting writer (a granted probe
/// is released at once).
async fn writer_waiting(probe: &LockClient, resource: &str) -> bool {
    let request = AcquireRequest::shared(resource, "probe", LockDetails::default(), None);
    match probe.acquire(&request).await.unwrap() {
        Attempt::Contended(contention) => contention.writer_waiting(),
        Attempt::Granted(grant) => {
            probe.release(&grant).await.unwrap();
            false
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Polls until a writer has announced itself on `resource`.
async fn until_writer_waits(probe: &LockClient, resource: &str) {
    bounded("the writer announces itself", async {
        while !writer_waiting(probe, resource).await {
            sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// Two readers hold; a writer waits. From its first attempt on, new readers are refused
/// even though only readers hold the lock, and when the two readers leave, the writer gets
/// it.
#[tokio::test]
async fn a_waiting_writer_goes_before_new_readers() {
    let env = env("writer_first").await;
    let writers = env.other_client().await;
    let probe = env.other_client().await;
    let config = env.locks.rwlock("config");
    let (r1, r2) = (config.read().await.unwrap(), config.read().await.unwrap());

    let writing = tokio::spawn({
        let config = writers.rwlock("config");
        async move { config.write_timeout(Duration::from_secs(10)).await }
    });
    until_writer_waits(&probe, "config").await;
    assert!(
        probe.rwlock("config").try_read().await.unwrap().is_none(),
        "a new reader waits behind the writer"
    );
    assert!(!writing.is_finished(), "the readers still hold");

    r1.release().await.unwrap();
    assert!(probe.rwlock("config").try_read().await.unwrap().is_none());
    r2.release().await.unwrap();
    let writer = bounded("the writer", writing)
        .await
        .unwrap()
        .unwrap()
        .expect("the readers left: the writer gets the lock");
    assert_eq!(writer.kind(), LockKind::Exclusive);
    assert!(probe.rwlock("config").try_read().await.unwrap().is_none());
    writer.release().await.unwrap();
    // The writer had its turn: readers come in again.
    let reader = probe.rwlock("config").try_read().await.unwrap();
    reader
        .expect("no writer waits any more")
        .release()
        .await
        .unwrap();
}

/// A writer (TTL 1 s) crashes while waiting: its future is forgotten, so not even a drop
/// handler runs, as when the process dies. Its announcement keeps new readers out until it
/// lapses, twice the TTL after its last refresh; then readers come in again.
#[tokio::test]
async fn emulator_only_a_crashed_writers_announcement_lapses() {
    let Some(env) = emulator_env("writer_crash").await else {
        return;
    };
    let probe = env.other_client().await;
    // A client of its own: the forgotten future keeps its local state (a turn at the gate).
    let crashing = env.other_client().await;
    let reader = env.locks.rwlock("config").read().await.unwrap();

    let writer = crashing.rwlock("config").ttl(Duration::from_secs(1));
    let mut writing = Box::pin(async move { writer.write().await });
    tokio::select! {
        outcome = &mut writing => panic!("the reader holds: {outcome:?}"),
        () = until_writer_waits(&probe, "config") => {}
    }
    std::mem::forget(writing);
    // Let an attempt already on the wire land before the clock moves.
    sleep(Duration::from_millis(100)).await;
    assert!(
        probe.rwlock("config").try_read().await.unwrap().is_none(),
        "the announcement keeps new readers out"
    );

    env.advance(Duration::from_secs(3));
    assert!(!writer_waiting(&probe, "config").await, "lapsed after 2 s");
    let late = probe.rwlock("config").try_read().await.unwrap();
    late.expect("a new reader gets in next to the old one")
        .release()
        .await
        .unwrap();
    assert!(!reader.is_lost(), "the reader's 30 s lease is untouched");
    reader.release().await.unwrap();
}

/// Holds a read lock on `resource`, lets `stop_writing` have a writer (of another client)
/// refused, then checks that a new reader still gets in.
async fn assert_readers_not_kept_out<F, Fut>(resource: &str, stop_writing: F)
where
    F: FnOnce(RwLock) -> Fut,
    Fut: Future<Output = mongolock::Result<Option<LockGuard>>>,
{
    let env = env(resource).await;
    let other = env.other_client().await;
    let reader = env.locks.rwlock(resource).read().await.unwrap();
    let refused = stop_writing(other.rwlock(resource)).await.unwrap();
    assert!(refused.is_none(), "the reader holds");
    other.shutdown().await;
    let late = env.locks.rwlock(resource).try_read().await.unwrap();
    assert!(
        late.is_some(),
        "a writer that is not waiting keeps readers out (its announcement stays for twice \
         its TTL, here 60 s)"
    );
    late.unwrap().release().await.unwrap();
    reader.release().await.unwrap();
}

/// Only a waiting writer announces itself: a `try_write` that was refused is not waiting,
/// and new readers still get in.
#[tokio::test]
async fn a_refused_try_write_does_not_keep_readers_out() {
    assert_readers_not_kept_out("probed", |writer| async move { writer.try_write().await }).await;
}

/// A `write_timeout` that gave up is not waiting any more: new readers get in. (A writer
/// that crashed while waiting is covered by its announcement lapsing, above.)
#[tokio::test]
async fn a_writer_that_gave_up_does_not_keep_readers_out() {
    assert_readers_not_kept_out("gave_up", |writer| async move {
        writer.write_timeout(Duration::from_millis(200)).await
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Semaphore.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_semaphore_grants_at_most_its_permits() {
    let env = env("semaphore").await;
    let other = env.other_client().await;
    let gpus = env.locks.semaphore("gpu", 2);
    assert_eq!(gpus.permits(), 2);

    let a = gpus.acquire().await.unwrap();
    let b = other.semaphore("gpu", 2).acquire().await.unwrap();
    assert!(
        gpus.try_acquire().await.unwrap().is_none(),
        "both permits are taken"
    );
    assert!(
        other
            .semaphore("gpu", 2)
            .acquire_timeout(Duration::from_millis(200))
            .await
            .unwrap()
            .is_none()
    );

    for permits in [1, 3] {
        for wrong in [
            other
                .semaphore("gpu", permits)
                .try_acquire()
                .await
                .unwrap_err(),
            bounded(
                "a mismatched acquire",
                other.semaphore("gpu", permits).acquire(),
            )
            .await
            .unwrap_err(),
        ] {
            match wrong.kind() {
                ErrorKind::CapMismatch {
                    resource,
                    requested,
                    stored,
                    ..
                } => {
                    assert_eq!(resource, "gpu");
                    assert_eq!(*requested, Some(permits));
                    assert_eq!(*stored, Some(2));
                }
                other => panic!("expected CapMismatch, got {other:?}"),
            }
        }
    }

    a.release().await.unwrap();
    let c = other
        .semaphore("gpu", 2)
        .try_acquire()
        .await
        .unwrap()
        .expect("a permit was freed");
    assert!(gpus.try_acquire().await.unwrap().is_none(), "full again");
    b.release().await.unwrap();
    c.release().await.unwrap();
}

/// Eight tasks on two clients share a semaphore of three permits: never more than three
/// hold one at once, and every task gets its turns.
#[tokio::test]
async fn a_semaphore_never_has_more_holders_than_permits() {
    let env = env("semaphore_load").await;
    let clients = [env.locks.clone(), env.other_client().await];
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let permits = clients[task % 2].semaphore("pool", 3);
            let (holding, most) = (holding.clone(), most.clone());
            tokio::spawn(async move {
                for _ in 0..2 {
                    let permit = permits.acquire().await.unwrap();
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    sleep(Duration::from_millis(10)).await;
                    holding.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        bounded("a task's two turns", task).await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "{most} holders at once");
}

// ---------------------------------------------------------------------------------------
// Losing a lease.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn release_after_a_loss_reports_the_loss() {
    let env = env("release_lost").await;
    let operator = env.other_client().await;
    let guard = env
        .locks
        .mutex("job")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    assert_eq!(operator.force_release("job").await.unwrap(), 1);
    assert_eq!(bounded("the loss", guard.lost()).await, LossReason::Revoked);
    assert!(guard.is_lost());
    assert_eq!(guard.state(), LeaseState::Lost(LossReason::Revoked));
    assert_eq!(guard.time_left(), Duration::ZERO);

    let error = guard.release().await.expect_err("the loss is reported");
    assert!(
        matches!(
            error.kind(),
            ErrorKind::LeaseLost {
                reason: LossReason::Revoked,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(env.locks.leases(), 0);
}

// ---------------------------------------------------------------------------------------
// Types.
// ---------------------------------------------------------------------------------------

/// Compile-time: the handles and guards can be shared between tasks, and every future can
/// be spawned. (The futures are created, never polled.)
#[tokio::test]
async fn handles_guards_and_their_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<LockGuard>();
    assert_send_sync::<Mutex>();
    assert_send_sync::<RwLock>();
    assert_send_sync::<Semaphore>();

    let env = env("send").await;
    let locks = &env.locks;
    let (mutex, rwlock, semaphore) = (
        locks.mutex("m"),
        locks.rwlock("rw"),
        locks.semaphore("s", 2),
    );
    assert_send(&mutex.acquire());
    assert_send(&mutex.try_acquire());
    assert_send(&mutex.acquire_timeout(Duration::from_secs(1)));
    let work = async |guard: &LockGuard| Ok::<_, mongolock::Error>(guard.fencing_token());
    assert_send(&mutex.run(work));
    assert_send(&mutex.try_run(work));
    assert_send(&mutex.run_timeout(Duration::from_secs(1), work));
    assert_send(&rwlock.run_read(work));
    assert_send(&rwlock.try_run_write(work));
    assert_send(&semaphore.run_timeout(Duration::from_secs(1), work));
    assert_send(&rwlock.read());
    assert_send(&rwlock.try_read());
    assert_send(&rwlock.read_timeout(Duration::from_secs(1)));
    assert_send(&rwlock.write());
    assert_send(&rwlock.try_write());
    assert_send(&rwlock.write_timeout(Duration::from_secs(1)));
    assert_send(&semaphore.acquire());
    assert_send(&semaphore.try_acquire());
    assert_send(&semaphore.acquire_timeout(Duration::from_secs(1)));
    assert_send(&locks.shutdown());

    let guard = mutex.acquire().await.unwrap();
    assert_send(&guard.lost());
    assert_send(&guard.release());

    // The recipes: leader election and several resources at once.
    assert_send_sync::<mongolock::Election>();
    assert_send_sync::<mongolock::Leadership>();
    assert_send_sync::<mongolock::MultiLock>();
    assert_send_sync::<mongolock::MultiGuard>();
    let election = locks.election("e");
    assert_send(&election.campaign("v"));
    assert_send(&election.try_campaign("v"));
    assert_send(&election.campaign_timeout("v", Duration::from_secs(1)));
    assert_send(&election.leader());
    assert_send(&election.observe());
    let leading = election.campaign("v").await.unwrap();
    assert_send(&leading.proclaim("w"));
    assert_send(&leading.lost());
    assert_send(&leading.resign());
    let set = locks.multi(["a", "b"]);
    assert_send(&set.acquire());
    assert_send(&set.try_acquire());
    assert_send(&set.acquire_timeout(Duration::from_secs(1)));
    assert_send(&set.run(async |both| Ok::<_, mongolock::Error>(both.lock_id().len())));
    assert_send(&election.lead("v", async |l| Ok::<_, mongolock::Error>(l.term())));
    let both = set.acquire().await.unwrap();
    assert_send(&both.lost());
    assert_send(&both.release());
}

// ---------------------------------------------------------------------------------------
// Bad settings.
// ---------------------------------------------------------------------------------------

/// Every bad setting is refused by every way to acquire, as `InvalidArgument` naming the
/// setting, and nothing reaches the collection.
#[tokio::test]
async fn bad_settings_are_refused_and_nothing_is_written() {
    let env = env("bad_settings").await;
    let locks = &env.locks;
    let ttl = Duration::from_secs(3);
    let cases: Vec<(&str, Mutex)> = vec![
        ("ttl", locks.mutex("job").ttl(Duration::ZERO)),
        (
            "extend_every",
            locks.mutex("job").ttl(ttl).extend_every(ttl),
        ),
        (
            "extend_every",
            locks
                .mutex("job")
                .ttl(ttl)
                .extend_every(Duration::from_secs(9)),
        ),
        (
            "extend_every",
            locks.mutex("job").ttl(ttl).extend_every(Duration::ZERO),
        ),
        (
            "safety_margin",
            locks.mutex("job").ttl(ttl).safety_margin(ttl),
        ),
        ("lock_id", locks.mutex("job").lock_id("")),
        ("resource", locks.mutex("")),
    ];
    for (argument, mutex) in cases {
        let errors = [
            mutex.acquire().await.unwrap_err(),
            mutex.try_acquire().await.unwrap_err(),
            mutex
                .acquire_timeout(Duration::from_secs(1))
                .await
                .unwrap_err(),
            mutex
                .run(async |_| -> mongolock::Result<()> { panic!("never runs") })
                .await
                .unwrap_err(),
        ];
        for error in &errors {
            assert_eq!(invalid_argument(error), argument, "{error}");
        }
    }

    let rwlock = locks.rwlock("config").ttl(ttl).safety_margin(ttl);
    for error in [
        rwlock.read().await.unwrap_err(),
        rwlock.try_read().await.unwrap_err(),
        rwlock.write().await.unwrap_err(),
        rwlock
            .write_timeout(Duration::from_secs(1))
            .await
            .unwrap_err(),
    ] {
        assert_eq!(invalid_argument(&error), "safety_margin");
    }
    let semaphore = locks
        .semaphore("gpu", 2)
        .extend_every(Duration::from_secs(60));
    assert_eq!(
        invalid_argument(&semaphore.acquire().await.unwrap_err()),
        "extend_every"
    );

    // Zero permits would never grant. (The error names the request's cap, `max`.)
    let none = locks.semaphore("gpu", 0);
    for error in [
        none.acquire().await.unwrap_err(),
        none.try_acquire().await.unwrap_err(),
        none.acquire_timeout(Duration::from_secs(1))
            .await
            .unwrap_err(),
    ] {
        let argument = invalid_argument(&error);
        assert!(matches!(argument, "permits" | "max"), "{error}");
    }

    assert_eq!(
        env.collection().count_documents(doc! {}).await.unwrap(),
        0,
        "nothing was written"
    );
    assert_eq!(locks.leases(), 0);
}

/// `holders()` on a handle says who holds its resource, without a filter: the guards'
/// lock ids while they hold, nobody once they let go, and nobody for a lock only in force
/// for the rest of its minimum hold.
#[tokio::test]
async fn a_handle_says_who_holds_its_resource() {
    let env = env("holders").await;
    let mutex = env.locks.mutex("ledger");
    assert!(mutex.holders().await.unwrap().is_empty());
    let guard = mutex.acquire().await.unwrap();
    let held = mutex.holders().await.unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].lock_id(), guard.lock_id());
    assert_eq!(held[0].fencing_token(), guard.fencing_token());
    guard.release().await.unwrap();
    assert!(mutex.holders().await.unwrap().is_empty());

    let config = env.locks.rwlock("config");
    let (a, b) = (config.read().await.unwrap(), config.read().await.unwrap());
    let mut ids: Vec<String> = (config.holders().await.unwrap().iter())
        .map(|lock| lock.lock_id().to_owned())
        .collect();
    ids.sort();
    let mut expected = vec![a.lock_id().to_owned(), b.lock_id().to_owned()];
    expected.sort();
    assert_eq!(ids, expected);
    a.release().await.unwrap();
    b.release().await.unwrap();

    let held_for = env
        .locks
        .semaphore("gpu", 2)
        .min_hold(Duration::from_secs(60));
    held_for.acquire().await.unwrap().release().await.unwrap();
    assert!(
        held_for.holders().await.unwrap().is_empty(),
        "held by nobody"
    );
    let status = env
        .locks
        .status(&mongolock::Filter::default())
        .await
        .unwrap();
    assert!(
        status.iter().any(|lock| lock.resource() == "gpu"),
        "in force all the same: {status:?}"
    );
}
