//! Dropping a call's future at any point leaves a state that repeating the call (same lock
//! id) or unlocking resolves: a grant made by a dropped acquire is found again, never lost.
//! A handle's acquire goes further: dropped at any point, it leaves no lock and no waiter's
//! announcement behind once `shutdown` has waited for the background withdrawals.

mod common;

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use common::env;
use mongolock::{AcquireRequest, Attempt, Filter, LockDetails};

/// Polls `future` `polls` times (yielding in between, so the I/O can progress), then drops it.
async fn poll_then_drop<F: Future>(future: F, polls: usize) -> bool {
    let mut future = pin!(future);
    for _ in 0..polls {
        let ready = std::future::poll_fn(|cx| match future.as_mut().poll(cx) {
            Poll::Ready(_) => Poll::Ready(true),
            Poll::Pending => Poll::Ready(false),
        })
        .await;
        if ready {
            return true;
        }
        tokio::task::yield_now().await;
    }
    false
}

// Each round uses its own resource: a command whose future was dropped may still reach the
// server later, and must not disturb the next round.

#[tokio::test]
async fn a_dropped_acquire_is_resolved_by_asking_again() {
    let env = env("cancel_acquire").await;
    let locks = &env.locks;
    for polls in 0..40 {
        let (resource, id) = (format!("r{polls}"), format!("attempt-{polls}"));
        let completed =
            poll_then_drop(locks.xlock(&resource, &id, LockDetails::default()), polls).await;
        // Whatever happened, the same lock id gets the lock (the earlier grant, or a new one)...
        let grant = locks
            .xlock(&resource, &id, LockDetails::default())
            .await
            .unwrap();
        if completed {
            assert!(!grant.is_new(), "the completed attempt holds it");
        }
        // ...and unlocking releases that one lock.
        let held = locks.status(&Filter::default().lock_id(&id)).await.unwrap();
        assert_eq!(held.len(), 1, "after {polls} polls");
        assert_eq!(held[0].fencing_token(), grant.fencing_token());
        assert_eq!(locks.unlock(&id).await.unwrap(), 1, "after {polls} polls");
    }
}

#[tokio::test]
async fn a_dropped_unlock_is_completed_by_unlocking_again() {
    let env = env("cancel_unlock").await;
    let locks = &env.locks;
    for polls in 0..40 {
        let id = format!("g{polls}");
        let _ = locks
            .xlock(&format!("a{polls}"), &id, LockDetails::default())
            .await
            .unwrap();
        let _ = locks
            .slock(&format!("b{polls}"), &id, LockDetails::default(), None)
            .await
            .unwrap();
        poll_then_drop(locks.unlock(&id), polls).await;
        locks.unlock(&id).await.unwrap();
        let left = locks.status(&Filter::default().lock_id(&id)).await.unwrap();
        assert!(left.is_empty(), "after {polls} polls: {left:?}");
    }
}

#[tokio::test]
async fn a_dropped_attempt_is_withdrawn_by_its_nonce_for_good() {
    let env = env("cancel_attempt").await;
    let locks = &env.locks;
    for polls in 0..40 {
        let resource = format!("r{polls}");
        let request = AcquireRequest::exclusive(&resource, "job", LockDetails::default());
        poll_then_drop(locks.acquire(&request), polls).await;
        locks.release_attempt(&request).await.unwrap();
        // The dropped command may still reach the server after the withdrawal: a copy of the
        // attempt is refused by its tombstone, so no grant is left that nobody holds.
        assert_eq!(
            locks.acquire(&request).await.unwrap(),
            Attempt::Withdrawn,
            "after {polls} polls"
        );
        let held = locks
            .status(&Filter::default().lock_id("job"))
            .await
            .unwrap();
        assert!(held.is_empty(), "after {polls} polls: {held:?}");
        // A new attempt of the same holder is not affected.
        let next = AcquireRequest::exclusive(&resource, "job", LockDetails::default());
        let Attempt::Granted(grant) = locks.acquire(&next).await.unwrap() else {
            panic!("nobody else uses {resource}")
        };
        assert!(grant.is_new(), "after {polls} polls");
        assert!(
            locks.release_attempt(&next).await.unwrap(),
            "after {polls} polls"
        );
    }
}

#[tokio::test]
async fn releasing_an_attempt_leaves_an_earlier_grant_alone() {
    let env = env("cancel_attempt_earlier").await;
    let locks = &env.locks;
    let first = AcquireRequest::exclusive("r", "job", LockDetails::default());
    let Attempt::Granted(grant) = locks.acquire(&first).await.unwrap() else {
        panic!()
    };
    let second = AcquireRequest::exclusive("r", "job", LockDetails::default());
    let Attempt::AlreadyHeld(same) = locks.acquire(&second).await.unwrap() else {
        panic!("another attempt of the same lock id is told the lock id already holds it")
    };
    assert_eq!(same.fencing_token(), grant.fencing_token());
    assert!(!same.is_new());
    assert!(
        !locks.release_attempt(&second).await.unwrap(),
        "the second attempt created nothing"
    );
    assert!(locks.release_attempt(&first).await.unwrap());
}

/// The entries on `resource` whose lease is live, and the waiters announced on it.
async fn left_on(env: &common::Env, resource: &str) -> (Vec<String>, usize) {
    let held = env
        .locks
        .status(&Filter::default().resource(resource))
        .await
        .unwrap()
        .into_iter()
        .filter(|s| !s.is_expired())
        .map(|s| s.lock_id().to_owned())
        .collect();
    let document = env
        .collection()
        .find_one(bson::doc! { "_id": resource })
        .await
        .unwrap();
    let waiters = document
        .and_then(|d| d.get_array("queue").ok().map(|q| q.len()))
        .unwrap_or(0);
    (held, waiters)
}

#[tokio::test]
async fn dropping_a_handles_acquire_at_any_point_leaves_no_lock() {
    let env = env("cancel_handle_free").await;
    let locks = env.other_client().await;
    for polls in 0..40 {
        let resource = format!("free-{polls}");
        let completed = poll_then_drop(locks.mutex(&resource).acquire(), polls).await;
        // Whatever was granted is withdrawn or released in the background.
        locks.shutdown().await;
        assert_eq!(locks.leases(), 0, "after {polls} polls");
        let (held, _) = left_on(&env, &resource).await;
        assert!(
            held.is_empty(),
            "after {polls} polls (completed: {completed}): {held:?}"
        );
        // And the resource is free for anyone.
        let next = env.locks.mutex(&resource).try_acquire().await.unwrap();
        assert!(next.is_some(), "after {polls} polls");
    }
}

#[tokio::test]
async fn dropping_a_waiting_writer_at_any_point_leaves_no_lock_and_no_announcement() {
    let env = env("cancel_handle_waiting").await;
    let locks = env.other_client().await;
    for polls in 0..40 {
        let resource = format!("held-{polls}");
        let _ = env
            .locks
            .slock(&resource, "reader", LockDetails::default(), None)
            .await
            .unwrap();
        let completed = poll_then_drop(locks.rwlock(&resource).write(), polls).await;
        assert!(!completed, "the reader holds it");
        locks.shutdown().await;
        let (held, waiters) = left_on(&env, &resource).await;
        assert_eq!(held, ["reader"], "after {polls} polls");
        assert_eq!(
            waiters, 0,
            "after {polls} polls: the writer's place is withdrawn"
        );
        // So readers are not kept out by a writer that is gone.
        let reader = locks.rwlock(&resource).try_read().await.unwrap();
        assert!(reader.is_some(), "after {polls} polls");
        drop(reader);
        env.locks.unlock("reader").await.unwrap();
    }
    locks.shutdown().await;
}

#[tokio::test]
async fn emulator_only_dropping_an_acquire_while_its_command_is_on_the_wire_leaves_no_lock() {
    let Some(_env) = common::emulator_env("cancel_handle_wire").await else {
        return;
    };
    // Replies take 2 x 4 ms: dropping after 0 to 12 ms lands before, during and after the
    // round trip of the attempt.
    let server = mongolock_testkit::TestServer::start().await.unwrap();
    let proxy = mongolock_testkit::FaultProxy::start(server.addr())
        .await
        .unwrap();
    let locks = mongolock::LockClient::new(proxy.client().database("c").collection("locks"));
    let direct = mongolock::LockClient::new(server.new_client().database("c").collection("locks"));
    locks.mutex("warm-up").try_acquire().await.unwrap();
    locks.shutdown().await;
    proxy.add_latency(std::time::Duration::from_millis(4));
    for micros in (0..12_000).step_by(500) {
        let resource = format!("r{micros}");
        let limit = std::time::Duration::from_micros(micros);
        let outcome = tokio::time::timeout(limit, locks.mutex(&resource).acquire()).await;
        drop(outcome);
        locks.shutdown().await;
        let live: Vec<_> = direct
            .status(&Filter::default().resource(&resource))
            .await
            .unwrap()
            .into_iter()
            .filter(|s| !s.is_expired())
            .collect();
        assert!(live.is_empty(), "dropped after {micros} µs: {live:?}");
    }
}

/// A guard of `resource` with a 60 s TTL, acquired on `runtime` and returned outside it.
fn held_a_minute(
    runtime: &tokio::runtime::Runtime,
    locks: &mongolock::LockClient,
    resource: &str,
) -> mongolock::LockGuard {
    let mutex = locks
        .mutex(resource)
        .ttl(std::time::Duration::from_secs(60));
    runtime.block_on(mutex.acquire()).unwrap()
}

#[test]
fn a_guard_dropped_without_a_runtime_is_released_by_the_client_long_before_its_ttl() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let env = runtime.block_on(env("cancel_no_runtime"));
    let other = runtime.block_on(env.other_client());
    // Dropped right after its grant, a guard races the renewing task's first round, which
    // stops the task once the lease is removed: the release must not depend on that task
    // (it once did, and a third of these drops were left to their TTL). Several rounds, so
    // that the race is met.
    for round in 0..12 {
        let resource = format!("r{round}");
        let guard = held_a_minute(&runtime, &env.locks, &resource);
        // Outside the runtime: no task can be spawned here, and dropping must neither panic
        // nor block. The release is queued on the client, whose keeper sends it from the
        // runtime its leases were added in.
        drop(guard);
        runtime.block_on(async {
            // Half the TTL: long enough for the waiter's 10 s re-check to come once, should
            // a wake-up be missed; the promise here is the release, not the wake-up.
            let got = other
                .mutex(&resource)
                .acquire_timeout(std::time::Duration::from_secs(30))
                .await
                .unwrap();
            assert!(
                got.is_some(),
                "round {round}: the dropped guard's lock was left to its 60 s TTL"
            );
        });
    }
}

#[test]
fn a_guard_dropped_after_its_runtime_is_gone_neither_panics_nor_blocks() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let env = runtime.block_on(env("cancel_runtime_gone"));
    let guard = held_a_minute(&runtime, &env.locks, "r");
    // The runtime the lease was added in, where the keeper would start the release, is gone
    // (and the emulator with it): the release is lost with it, and the lock is left to its
    // TTL, but the drop itself must be harmless.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    // A panic here fails the test; a blocked drop hangs it.
    drop(guard);
    drop(env);
}

#[test]
fn shutdown_waits_for_the_releases_of_guards_dropped_without_a_runtime() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let env = runtime.block_on(env("cancel_no_runtime_shutdown"));
    let mut lost = 0;
    for round in 0..12 {
        let resource = format!("r{round}");
        let guard = held_a_minute(&runtime, &env.locks, &resource);
        drop(guard);
        // Once `shutdown` returns, the release is on the server, whoever sent it.
        runtime.block_on(env.locks.shutdown());
        let held = runtime
            .block_on(env.locks.status(&Filter::default().resource(&resource)))
            .unwrap();
        if held.iter().any(|s| !s.is_expired()) {
            lost += 1;
        }
    }
    assert_eq!(lost, 0, "releases shutdown did not wait for, of 12");
}
