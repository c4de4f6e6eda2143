//! A guard dropped inside a runtime that ends right after: the release it hands to a
//! background task of that runtime never runs (the task is dropped with the runtime). That
//! release is owed all the same, and the same client's next attempt of the lock id on the
//! resource must neither wait for it for ever nor land before it: it pays it itself, and is
//! then granted. Every later call returns within its own time limit.

mod common;

use std::time::Duration;

use bson::doc;
use common::{Env, secs};
use mongolock::LockClient;

/// How long a call may take before the test takes it to hang: far more than its own limit.
const HANG: Duration = Duration::from_secs(60);

/// The command time limit of the tests' clients.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// The lock client of the test, with a short command time limit.
fn client(env: &Env) -> LockClient {
    LockClient::builder(env.collection())
        .command_timeout(COMMAND_TIMEOUT)
        .build()
        .expect("valid settings")
}

/// Takes `resource` for `lock_id` and drops the guard inside a runtime of its own, on
/// another thread, which then ends: the guard's release is left to a background task of that
/// runtime, which is dropped unrun.
async fn drop_a_guard_in_a_runtime_that_ends(locks: &LockClient, resource: &str, lock_id: &str) {
    let locks = locks.clone();
    let (resource, lock_id) = (resource.to_owned(), lock_id.to_owned());
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let guard = locks
                .mutex(resource)
                .lock_id(lock_id)
                .ttl(secs(60))
                .try_acquire()
                .await
                .expect("the attempt is answered")
                .expect("the resource is free");
            // Released in the background: a task of this runtime, which ends before it runs.
            drop(guard);
        });
        drop(runtime);
    })
    .await
    .expect("the short-lived runtime's thread ends");
}

/// Whether `lock_id` holds an exclusive entry on `resource`, read straight from the
/// collection: the dropped guard's release never ran while this is true.
async fn still_held(env: &Env, resource: &str, lock_id: &str) -> bool {
    env.collection()
        .count_documents(doc! {"_id": resource, "exclusive.lockId": lock_id})
        .await
        .expect("count")
        > 0
}

/// The dropped guard's release never ran: its entry is still there. (This is the fault:
/// without it, the tests below would prove nothing.)
async fn assert_the_release_never_ran(env: &Env) {
    assert!(
        still_held(env, "job", "worker-1").await,
        "the dropped guard's release ran: its task was not dropped with its runtime"
    );
    // It stays so: nothing of that runtime is left to run it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(still_held(env, "job", "worker-1").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_timeout_after_a_guard_dropped_in_a_runtime_that_ended() {
    let env = common::env("dropped_runtime_acquire_timeout").await;
    let locks = client(&env);
    drop_a_guard_in_a_runtime_that_ends(&locks, "job", "worker-1").await;
    assert_the_release_never_ran(&env).await;

    let mutex = locks.mutex("job").lock_id("worker-1").ttl(secs(60));
    let guard = tokio::time::timeout(HANG, mutex.acquire_timeout(secs(3)))
        .await
        .expect("acquire_timeout waited past its own timeout for a release nobody could send")
        .expect("no error")
        .expect("granted: the owed release was paid first");
    guard.release().await.expect("held throughout");
    locks.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_after_a_guard_dropped_in_a_runtime_that_ended() {
    let env = common::env("dropped_runtime_try_acquire").await;
    let locks = client(&env);
    drop_a_guard_in_a_runtime_that_ends(&locks, "job", "worker-1").await;
    assert_the_release_never_ran(&env).await;

    let mutex = locks.mutex("job").lock_id("worker-1").ttl(secs(60));
    let guard = tokio::time::timeout(HANG, mutex.try_acquire())
        .await
        .expect("try_acquire waited for a release nobody could send")
        .expect("no error")
        .expect("granted: the owed release was paid first");
    guard.release().await.expect("held throughout");
    locks.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xlock_after_a_guard_dropped_in_a_runtime_that_ended() {
    let env = common::env("dropped_runtime_xlock").await;
    let locks = client(&env);
    drop_a_guard_in_a_runtime_that_ends(&locks, "job", "worker-1").await;
    assert_the_release_never_ran(&env).await;

    let details = mongolock::LockDetails::default().ttl(secs(60));
    let grant = tokio::time::timeout(HANG, locks.xlock("job", "worker-1", details))
        .await
        .expect("xlock waited past its own time limit for a release nobody could send")
        .expect("no error");
    assert!(
        grant.is_new(),
        "a fresh grant: the owed release was paid before the attempt was sent"
    );
    assert!(locks.release(&grant).await.unwrap());
    locks.shutdown().await;
}

/// Safety while the debt is paid: another client is never granted the lock while the
/// same client's new guard believes it holds it, and the old entry is gone by then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owed_release_is_paid_before_the_lock_id_is_granted_again() {
    let env = common::env("dropped_runtime_safety").await;
    let locks = client(&env);
    drop_a_guard_in_a_runtime_that_ends(&locks, "job", "worker-1").await;
    assert_the_release_never_ran(&env).await;
    let first_token = env
        .collection()
        .find_one(doc! {"_id": "job"})
        .await
        .unwrap()
        .expect("the resource's document")
        .get_document("exclusive")
        .unwrap()
        .get_i64("token")
        .expect("the entry's fencing token");

    let mutex = locks.mutex("job").lock_id("worker-1").ttl(secs(60));
    let guard = tokio::time::timeout(HANG, mutex.acquire_timeout(secs(3)))
        .await
        .expect("returned")
        .expect("no error")
        .expect("granted");
    assert!(guard.fencing_token() > first_token, "a new grant");
    let other = env.other_client().await;
    common::assert_xlock_refused(&other, "job", "someone-else").await;
    assert!(!guard.is_lost());
    guard.release().await.expect("held throughout");
    locks.shutdown().await;
}

/// Waits (boundedly: `HANG`) until `done` reads true; false if it never does.
async fn eventually<F, Fut>(mut done: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let give_up = tokio::time::Instant::now() + HANG;
    while tokio::time::Instant::now() < give_up {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The client's background work started in the runtime that ended (the renewals of its
/// leases, the retries of its chores) is started again where the client is used next: a
/// later lease is renewed, and a later guard dropped where no runtime runs is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_background_work_outlives_the_runtime_that_ended() {
    let env = common::env("dropped_runtime_background").await;
    let locks = client(&env);
    drop_a_guard_in_a_runtime_that_ends(&locks, "job", "worker-1").await;
    assert_the_release_never_ran(&env).await;

    // Renewed: its entry gets a renewal (3 s TTL, renewed every second).
    let guard = tokio::time::timeout(
        HANG,
        locks
            .mutex("other")
            .lock_id("worker-2")
            .ttl(secs(3))
            .try_acquire(),
    )
    .await
    .expect("returned")
    .expect("no error")
    .expect("granted");
    let collection = env.collection();
    let renewed = eventually(|| {
        let collection = collection.clone();
        async move {
            let filter = doc! {"_id": "other", "exclusive.renewedAt": {"$exists": true}};
            collection.count_documents(filter).await.expect("count") > 0
        }
    })
    .await;
    assert!(renewed, "the later lease was never renewed");
    assert!(!guard.is_lost());

    // Dropped where no runtime runs: released by the keeper's chores, not left to its TTL.
    std::thread::spawn(move || drop(guard)).join().unwrap();
    let released = eventually(|| async { !still_held(&env, "other", "worker-2").await }).await;
    assert!(
        released,
        "the guard dropped where no runtime runs was never released"
    );
    // And the first lock id's debt is paid by then, or by its next attempt.
    let grant = locks
        .xlock("job", "worker-1", mongolock::LockDetails::default())
        .await
        .unwrap();
    assert!(grant.is_new());
    locks.shutdown().await;
}

/// A runtime that stays alive on its thread without being driven again, until the test lets
/// it go: the tasks spawned in it are never polled, yet never dropped either.
struct IdleRuntime {
    release: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for IdleRuntime {
    fn drop(&mut self) {
        let _ = self.release.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Takes `resource` for `lock_id` here and drops the guard inside a current-thread runtime
/// of another thread, whose `block_on` then returns: that runtime lives on, idle, so the
/// background release the drop spawned in it is neither run nor dropped (a `block_on` drives
/// a current-thread runtime's tasks only while it runs). The driver's connections all stay
/// in this runtime, as the driver requires (a `Client` is bound to the runtime it was created
/// in: "Runtime" in its manual's performance chapter).
async fn drop_a_guard_in_a_runtime_left_idle(
    locks: &LockClient,
    resource: &str,
    lock_id: &str,
) -> IdleRuntime {
    let guard = locks
        .mutex(resource)
        .lock_id(lock_id)
        .ttl(secs(60))
        .try_acquire()
        .await
        .expect("the attempt is answered")
        .expect("the resource is free");
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (dropped, was_dropped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move { drop(guard) });
        let _ = dropped.send(());
        // Idle until the test is done: the release spawned in it is never polled.
        let _ = released.recv();
        drop(runtime);
    });
    was_dropped.await.expect("the guard was dropped");
    IdleRuntime {
        release,
        thread: Some(thread),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_after_a_guard_dropped_in_a_runtime_left_idle() {
    let env = common::env("idle_runtime_try_acquire").await;
    let locks = client(&env);
    let idle = drop_a_guard_in_a_runtime_left_idle(&locks, "job", "worker-1").await;
    assert_the_release_never_ran(&env).await;

    let mutex = locks.mutex("job").lock_id("worker-1").ttl(secs(60));
    let guard = tokio::time::timeout(HANG, mutex.try_acquire())
        .await
        .expect("try_acquire waited for a release whose task is never polled")
        .expect("no error: the release was still to send, and this call sent it")
        .expect("granted: the owed release was paid first");
    let other = env.other_client().await;
    common::assert_xlock_refused(&other, "job", "someone-else").await;
    guard.release().await.expect("held throughout");
    tokio::time::timeout(HANG, locks.shutdown())
        .await
        .expect("shutdown waited for a task that is never polled");
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xlock_after_a_guard_dropped_in_a_runtime_left_idle() {
    let env = common::env("idle_runtime_xlock").await;
    let locks = client(&env);
    let idle = drop_a_guard_in_a_runtime_left_idle(&locks, "job", "worker-1").await;
    assert_the_release_never_ran(&env).await;

    let details = mongolock::LockDetails::default().ttl(secs(60));
    let grant = tokio::time::timeout(HANG, locks.xlock("job", "worker-1", details))
        .await
        .expect("xlock waited for a release whose task is never polled")
        .expect("no error");
    assert!(
        grant.is_new(),
        "the owed release was paid before the attempt"
    );
    assert!(locks.release(&grant).await.unwrap());
    tokio::time::timeout(HANG, locks.shutdown())
        .await
        .expect("shutdown waited for a task that is never polled");
    drop(idle);
}

/// Without another attempt of its lock id, the client's next call of any other lock starts
/// the keeper where it runs, which sends the release the idle runtime never will: the lock is
/// free well before its 60 s TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keeper_sends_a_release_whose_task_is_never_polled() {
    let env = common::env("idle_runtime_keeper").await;
    let locks = client(&env);
    let idle = drop_a_guard_in_a_runtime_left_idle(&locks, "job", "worker-1").await;
    assert_the_release_never_ran(&env).await;
    let other = locks
        .mutex("other")
        .try_acquire()
        .await
        .expect("answered")
        .expect("free");
    // Far less than the 60 s TTL: the keeper's turn comes a command time limit (2 s) after
    // the drop.
    let released = tokio::time::timeout(Duration::from_secs(20), async {
        while still_held(&env, "job", "worker-1").await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(released.is_ok(), "the release was left to the lease's TTL");
    other.release().await.expect("held throughout");
    tokio::time::timeout(HANG, locks.shutdown())
        .await
        .expect("shutdown waited for a task that is never polled");
    drop(idle);
}
