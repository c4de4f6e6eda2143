//! The blocking API (`--features blocking`): the same locks from threads that are not
//! async, with a runtime the library owns. Each test runs the server (the emulator, or the
//! one `MONGODB_URI` names) on a runtime of its own, and the blocking clients on plain
//! threads, as a program without async code would.

#![cfg(feature = "blocking")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use mongolock::blocking::LockClient;
use mongolock::{ErrorKind, Filter, LossReason};

/// A server for one test, on a runtime of the test's own, and a database of its own.
struct Setup {
    uri: String,
    database: String,
    _server: Option<mongolock_testkit::TestServer>,
    runtime: tokio::runtime::Runtime,
}

static DATABASES: AtomicUsize = AtomicUsize::new(0);

impl Setup {
    fn new(name: &str) -> Setup {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the test's runtime");
        let (uri, server) = runtime.block_on(common::server_uri());
        let database = format!(
            "mongolock_blocking_{name}_{}_{}",
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::SeqCst)
        );
        Setup {
            uri,
            database,
            _server: server,
            runtime,
        }
    }

    /// A blocking client with a driver's client of its own.
    fn blocking(&self) -> LockClient {
        LockClient::connect(&self.uri, &self.database, "locks").expect("connect")
    }

    /// An async client on the test's runtime, as another (async) process would have.
    fn async_client(&self) -> mongolock::LockClient {
        self.runtime.block_on(async {
            let driver = mongodb::Client::with_uri_str(&self.uri)
                .await
                .expect("a valid URI");
            mongolock::LockClient::new(driver.database(&self.database).collection("locks"))
        })
    }
}

/// Runs `work` on a thread of its own and returns what it returns; fails if it takes longer
/// than `limit` (a blocking call that blocks for ever fails the test instead of hanging it).
fn within<T: Send + 'static>(limit: Duration, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = mpsc::channel();
    let thread = thread::spawn(move || {
        let value = work();
        let _ = done.send(());
        value
    });
    match finished.recv_timeout(limit) {
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("not done within {limit:?}"),
        _ => thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
    }
}

/// The argument an `InvalidArgument` error names (panics on any other error).
fn invalid_argument(error: &mongolock::Error) -> &'static str {
    common::invalid_argument(error)
}

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn two_blocking_clients_on_threads_exclude_each_other() {
    let setup = Setup::new("exclusion");
    let clients = [setup.blocking(), setup.blocking()];
    let inside = Arc::new(AtomicBool::new(false));
    let entered = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for locks in clients
        .iter()
        .flat_map(|locks| [locks.clone(), locks.clone()])
    {
        let (inside, entered) = (inside.clone(), entered.clone());
        threads.push(thread::spawn(move || {
            for _ in 0..3 {
                let guard = locks.mutex("counter").acquire().expect("acquire");
                assert!(
                    !inside.swap(true, Ordering::SeqCst),
                    "two holders of the mutex at once"
                );
                entered.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(20));
                inside.store(false, Ordering::SeqCst);
                guard.release().expect("held throughout");
            }
        }));
    }
    within(LIMIT, move || {
        for thread in threads {
            thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        }
    });
    assert_eq!(entered.load(Ordering::SeqCst), 12);
    for locks in clients {
        locks.shutdown().expect("outside any runtime");
    }
}

#[test]
fn try_acquire_is_refused_while_held() {
    let setup = Setup::new("try_acquire");
    let (a, b) = (setup.blocking(), setup.blocking());
    let guard = a.mutex("report").acquire().expect("free");
    let refused = within(LIMIT, move || {
        b.mutex("report").try_acquire().map(|g| (g, b))
    });
    let (refused, b) = refused.expect("no error");
    assert!(refused.is_none(), "held by the other client");
    guard.release().expect("held throughout");
    let granted = b.mutex("report").try_acquire().expect("no error");
    assert!(granted.is_some(), "free once released");
    drop(granted);
    a.shutdown().expect("shutdown");
    b.shutdown().expect("shutdown");
}

#[test]
fn acquire_timeout_gives_up_at_its_timeout() {
    let setup = Setup::new("acquire_timeout");
    let (a, b) = (setup.blocking(), setup.blocking());
    let guard = a.mutex("report").acquire().expect("free");
    let timeout = Duration::from_millis(400);
    let (outcome, waited) = within(LIMIT, move || {
        let start = Instant::now();
        let outcome = b.mutex("report").acquire_timeout(timeout);
        (outcome.map(|g| g.is_none()), start.elapsed())
    });
    assert!(outcome.expect("no error"), "gave up: the mutex is held");
    assert!(
        waited >= timeout,
        "waited {waited:?}, less than the timeout"
    );
    assert!(
        waited < timeout + Duration::from_secs(5),
        "waited {waited:?}"
    );
    guard.release().expect("held throughout");
    a.shutdown().expect("shutdown");
}

#[test]
fn a_dropped_guard_is_released_and_another_thread_acquires() {
    let setup = Setup::new("dropped_guard");
    let locks = setup.blocking();
    let (holder, waiter) = (locks.clone(), locks.clone());
    // A TTL far longer than the wait: only the release of the dropped guard frees it.
    let ttl = Duration::from_secs(60);
    let (held, release) = (mpsc::channel(), mpsc::channel::<()>());
    let holding = thread::spawn(move || {
        let guard = holder.mutex("job").ttl(ttl).acquire().expect("free");
        held.0.send(()).expect("the test waits");
        release.1.recv().expect("the test says when");
        drop(guard); // never blocks: released in the background
    });
    held.1.recv().expect("the holder holds");
    let taken = within(LIMIT, move || {
        let guard = waiter
            .mutex("job")
            .ttl(ttl)
            .try_acquire()
            .expect("no error");
        assert!(guard.is_none(), "held by the other thread");
        release.0.send(()).expect("the holder waits");
        let start = Instant::now();
        let guard = waiter
            .mutex("job")
            .ttl(ttl)
            .acquire_timeout(Duration::from_secs(5))
            .expect("no error")
            .expect("released by the drop, long before the TTL");
        (guard.fencing_token(), start.elapsed())
    });
    holding.join().expect("the holder");
    assert!(taken.0 > 0);
    locks.shutdown().expect("shutdown");
    let left = setup.blocking().status(&Filter::default()).expect("status");
    assert!(left.iter().all(|lock| lock.is_expired()), "{left:?}");
}

#[test]
fn a_lost_lease_is_seen_by_the_blocking_guard() {
    let setup = Setup::new("lost_lease");
    let locks = setup.blocking();
    let operator = setup.async_client();
    let guard = locks
        .mutex("job")
        .ttl(Duration::from_secs(3))
        .acquire()
        .expect("free");
    assert_eq!(
        guard
            .wait_lost_timeout(Duration::from_millis(50))
            .expect("outside any runtime"),
        None,
        "held"
    );
    let broken = setup
        .runtime
        .block_on(operator.force_release("job"))
        .expect("force release");
    assert_eq!(broken, 1);
    // Seen at the next renewal, within a renewal period (a third of the TTL) and a round trip.
    let (reason, guard) = within(LIMIT, move || {
        (guard.wait_lost_timeout(Duration::from_secs(5)), guard)
    });
    assert_eq!(reason.expect("no error"), Some(LossReason::Revoked));
    assert!(guard.is_lost());
    assert_eq!(guard.time_left(), Duration::ZERO);
    assert_eq!(guard.wait_lost().expect("no error"), LossReason::Revoked);
    let error = guard.release().expect_err("the lease was lost");
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
    locks.shutdown().expect("shutdown");
    let driver = operator.collection().client().clone();
    setup.runtime.block_on(async move {
        operator.shutdown().await;
        driver.shutdown().await;
    });
}

#[test]
fn shutdown_waits_for_releases_ends_observers_and_the_drivers_client() {
    let setup = Setup::new("shutdown");
    let locks = setup.blocking();
    let election = locks.election("scheduler");
    let mut changes = election.observe();
    assert!(
        changes
            .next()
            .expect("an item")
            .expect("no error")
            .is_none()
    );
    drop(locks.mutex("job").acquire().expect("free")); // released in the background
    let observing = thread::spawn(move || changes.next().map(|item| item.map(|_| ())));
    let shutting = locks.clone();
    within(LIMIT, move || shutting.shutdown()).expect("outside any runtime");
    // The observer ends with the shutdown, whether or not it was waiting.
    let ended = within(LIMIT, move || observing.join().expect("the observer"));
    assert!(ended.is_none(), "the observer ended: {ended:?}");
    // The dropped guard's release was sent before the driver's client shut down.
    let left = setup.blocking().status(&Filter::default()).expect("status");
    assert!(left.is_empty(), "nothing held after the shutdown: {left:?}");
    // A client made by `connect` shuts its driver's client down: calls fail from then on.
    let after = locks
        .mutex("job")
        .try_acquire()
        .map(|guard| guard.is_some());
    assert!(
        after.is_err(),
        "the driver's client is shut down: {after:?}"
    );
}

#[test]
fn a_blocking_call_inside_an_async_runtime_is_an_error() {
    let setup = Setup::new("inside_runtime");
    let locks = setup.blocking();
    let held = locks.mutex("job").acquire().expect("free");

    // In an async task of a multi-thread runtime, and in a current-thread runtime's
    // `block_on`: an error, not a panic and not a wait.
    let in_task = {
        let locks = locks.clone();
        setup
            .runtime
            .block_on(async move {
                tokio::spawn(async move { locks.mutex("other").acquire().map(drop) }).await
            })
            .expect("the task did not panic")
    };
    assert_eq!(invalid_argument(&in_task.expect_err("refused")), "runtime");
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let in_block_on = current.block_on(async { locks.mutex("job").acquire() });
    assert_eq!(
        invalid_argument(&in_block_on.expect_err("refused")),
        "runtime"
    );
    let waited = current.block_on(async { held.wait_lost_timeout(Duration::from_secs(60)) });
    assert_eq!(invalid_argument(&waited.expect_err("refused")), "runtime");
    assert!(!held.is_lost(), "nothing was done to the lease");

    // A release refused there drops the guard, which is released in the background.
    let released = current.block_on(async { held.release() });
    assert_eq!(invalid_argument(&released.expect_err("refused")), "runtime");
    let again = locks
        .mutex("job")
        .acquire_timeout(Duration::from_secs(5))
        .expect("outside any runtime: no error");
    assert!(again.is_some(), "the refused release's guard was released");
    drop(again);
    let shutdown = current.block_on(async { locks.shutdown() });
    assert_eq!(invalid_argument(&shutdown.expect_err("refused")), "runtime");
    locks.shutdown().expect("outside any runtime");
}

#[test]
fn a_semaphore_across_threads_never_exceeds_its_permits() {
    let setup = Setup::new("semaphore");
    let locks = setup.blocking();
    let (holding, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (locks, holding, most) = (locks.clone(), holding.clone(), most.clone());
            thread::spawn(move || {
                for _ in 0..3 {
                    let permit = locks.semaphore("gpu", 2).acquire().expect("acquire");
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(30));
                    holding.fetch_sub(1, Ordering::SeqCst);
                    permit.release().expect("held throughout");
                }
            })
        })
        .collect();
    within(LIMIT, move || {
        for thread in threads {
            thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        }
    });
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} holders of two permits at once");
    locks.shutdown().expect("shutdown");
}

#[test]
fn readers_share_and_a_writer_excludes() {
    let setup = Setup::new("rwlock");
    let (a, b) = (setup.blocking(), setup.blocking());
    let first = a.rwlock("config").read().expect("free");
    let second = within(LIMIT, move || b.rwlock("config").try_read().map(|r| (r, b)));
    let (second, b) = second.expect("no error");
    let second = second.expect("readers share");
    assert!(a.rwlock("config").try_write().expect("no error").is_none());
    first.release().expect("held throughout");
    second.release().expect("held throughout");
    let writing = a
        .rwlock("config")
        .write_timeout(Duration::from_secs(5))
        .expect("no error")
        .expect("free once the readers left");
    assert!(b.rwlock("config").try_read().expect("no error").is_none());
    writing.release().expect("held throughout");
    a.shutdown().expect("shutdown");
    b.shutdown().expect("shutdown");
}

#[test]
fn a_multi_lock_is_all_or_nothing_and_an_election_has_one_leader() {
    let setup = Setup::new("multi_election");
    let (a, b) = (setup.blocking(), setup.blocking());
    let held = a.mutex("account-4").acquire().expect("free");
    let transfer = b.multi(["account-17", "account-4"]);
    assert!(
        transfer.try_acquire().expect("no error").is_none(),
        "all or nothing"
    );
    assert!(
        b.mutex("account-17")
            .try_acquire()
            .expect("no error")
            .is_some()
    );
    held.release().expect("held throughout");
    let both = transfer.acquire().expect("free");
    assert!(
        both.fencing_token("account-4").is_some() && both.fencing_token("account-17").is_some()
    );
    both.release().expect("held throughout");

    let leading = a.election("scheduler").campaign("host-a").expect("free");
    let rival = b.clone();
    let refused = within(LIMIT, move || {
        rival
            .election("scheduler")
            .try_campaign("host-b")
            .map(|l| l.is_none())
    });
    assert!(refused.expect("no error"), "one leader");
    assert_eq!(
        b.election("scheduler")
            .leader()
            .expect("read")
            .expect("a leader")
            .value(),
        "host-a"
    );
    let term = leading.term();
    leading.resign().expect("held throughout");
    let next = b.election("scheduler").campaign("host-b").expect("free");
    assert!(next.term() > term);
    drop(next);
    a.shutdown().expect("shutdown");
    b.shutdown().expect("shutdown");
}

#[test]
fn a_blocking_client_wraps_an_async_one_and_shares_its_leases() {
    let setup = Setup::new("from_async");
    let async_locks = setup.async_client();
    let locks = LockClient::from_async(async_locks.clone());
    let guard = locks.mutex("job").acquire().expect("free");
    assert_eq!(async_locks.leases(), 1, "one client, one keeper");
    let refused = setup
        .runtime
        .block_on(async_locks.mutex("job").try_acquire())
        .expect("no error");
    assert!(refused.is_none(), "held by the blocking side");
    guard.release().expect("held throughout");
    assert_eq!(async_locks.leases(), 0);
    // Shut down in the order the async client needs, the driver's client last: it is the
    // caller's (made on the test's runtime), not the blocking client's.
    locks.shutdown().expect("shutdown");
    let driver = async_locks.collection().client().clone();
    setup
        .runtime
        .block_on(async move { driver.shutdown().await });
}

/// The blocking types can be shared with and sent to other threads (a compile-time check).
#[allow(dead_code)]
fn blocking_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<LockClient>();
    send_sync::<mongolock::blocking::Mutex>();
    send_sync::<mongolock::blocking::RwLock>();
    send_sync::<mongolock::blocking::Semaphore>();
    send_sync::<mongolock::blocking::MultiLock>();
    send_sync::<mongolock::blocking::Election>();
    send_sync::<mongolock::blocking::LockGuard>();
    send_sync::<mongolock::blocking::MultiGuard>();
    send_sync::<mongolock::blocking::Leadership>();
    send::<mongolock::blocking::LeaderChanges>();
}

#[test]
fn a_guard_dropped_inside_another_runtime_is_released_by_the_blocking_one() {
    let setup = Setup::new("dropped_elsewhere");
    let (locks, other) = (setup.blocking(), setup.blocking());
    let ttl = Duration::from_secs(60);
    let guard = locks.mutex("job").ttl(ttl).acquire().expect("free");
    // Dropped in a runtime that is not driven after its `block_on`, and then ends: a
    // release spawned there would never run.
    let elsewhere = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    elsewhere.block_on(async move { drop(guard) });
    drop(elsewhere);
    let taken = within(LIMIT, move || {
        other
            .mutex("job")
            .ttl(ttl)
            .acquire_timeout(Duration::from_secs(5))
            .map(|guard| guard.is_some())
    });
    assert!(taken.expect("no error"), "released long before the TTL");
    locks.shutdown().expect("shutdown");
}
