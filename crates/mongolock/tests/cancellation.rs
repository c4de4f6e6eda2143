//! Dropping a call's future at any point leaves a state that repeating the call (same lock
//! id) or unlocking resolves: a grant made by a dropped acquire is found again, never lost.

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
        locks
            .xlock(&format!("a{polls}"), &id, LockDetails::default())
            .await
            .unwrap();
        locks
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
