//! Asking again with a lock id that holds the resource returns the existing grant, so a retry
//! after an unknown outcome is safe.

mod common;

use common::{env, secs};
use mongolock::{AcquireRequest, Attempt, ErrorKind, Filter, LockDetails, LockKind};

#[tokio::test]
async fn xlock_again_returns_the_same_grant() {
    let env = env("retry_x").await;
    let locks = &env.locks;
    let first = locks
        .xlock("r", "a", LockDetails::default().ttl(secs(30)))
        .await
        .unwrap();
    assert!(first.is_new());
    let again = locks
        .xlock("r", "a", LockDetails::default().ttl(secs(300)))
        .await
        .unwrap();
    assert!(!again.is_new());
    assert_eq!(again.fencing_token(), first.fencing_token());
    assert_eq!(
        again.expires_at(),
        first.expires_at(),
        "asking again does not renew"
    );
    assert_eq!(locks.status(&Filter::default()).await.unwrap().len(), 1);
}

#[tokio::test]
async fn slock_again_returns_the_same_grant() {
    let env = env("retry_s").await;
    let locks = &env.locks;
    let first = locks
        .slock("r", "a", LockDetails::default(), None)
        .await
        .unwrap();
    let again = locks
        .slock("r", "a", LockDetails::default(), None)
        .await
        .unwrap();
    assert_eq!(
        (again.fencing_token(), again.is_new()),
        (first.fencing_token(), false)
    );
    assert_eq!(locks.status(&Filter::default()).await.unwrap().len(), 1);
}

#[tokio::test]
async fn the_same_attempt_sent_twice_is_recognised_by_its_nonce() {
    let env = env("retry_nonce").await;
    let request = AcquireRequest::exclusive("r", "a", LockDetails::default());
    let Attempt::Granted(first) = env.locks.acquire(&request).await.unwrap() else {
        panic!()
    };
    let Attempt::Granted(resent) = env.locks.acquire(&request).await.unwrap() else {
        panic!()
    };
    assert!(first.is_new() && resent.is_new());
    assert_eq!(first.fencing_token(), resent.fencing_token());
}

#[tokio::test]
async fn holding_one_kind_is_its_own_outcome_when_asking_for_the_other() {
    let env = env("retry_kind").await;
    let locks = &env.locks;
    let shared = locks
        .slock("r", "a", LockDetails::default().ttl(secs(30)), None)
        .await
        .unwrap();
    // Not "already locked by a": a waiting layer would wait on itself forever.
    let error = locks
        .xlock("r", "a", LockDetails::default())
        .await
        .unwrap_err();
    assert!(!error.is_already_locked(), "{error:?}");
    let ErrorKind::HeldWithOtherKind { resource, held, .. } = error.kind() else {
        panic!("{error:?}")
    };
    assert_eq!(resource, "r");
    assert_eq!((held.lock_id(), held.kind()), ("a", LockKind::Shared));
    assert_eq!(held.fencing_token(), shared.fencing_token());

    let _ = locks.xlock("q", "b", LockDetails::default()).await.unwrap();
    let request = AcquireRequest::shared("q", "b", LockDetails::default(), None);
    let Attempt::HeldWithOtherKind(held) = locks.acquire(&request).await.unwrap() else {
        panic!("b holds q exclusively")
    };
    assert_eq!(held.kind(), LockKind::Exclusive);
    let q = locks
        .status(&Filter::default().resource("q"))
        .await
        .unwrap();
    assert_eq!(q.len(), 1, "nothing was added");
}

#[tokio::test]
async fn another_attempt_by_a_lock_id_that_holds_the_resource_is_told_so() {
    let env = env("retry_other_attempt").await;
    let locks = &env.locks;
    let first = AcquireRequest::exclusive("r", "a", LockDetails::default());
    let Attempt::Granted(grant) = locks.acquire(&first).await.unwrap() else {
        panic!("r is free")
    };
    // Another nonce: a different attempt, perhaps another task that was wrongly given the
    // same lock id. It is not told "granted".
    let second = AcquireRequest::exclusive("r", "a", LockDetails::default());
    match locks.acquire(&second).await.unwrap() {
        Attempt::AlreadyHeld(existing) => {
            assert!(!existing.is_new());
            assert_eq!(existing.fencing_token(), grant.fencing_token());
        }
        other => panic!("expected AlreadyHeld, got {other:?}"),
    }
    // The same nonce again is the same attempt: granted, as a blind retry expects.
    assert!(matches!(
        locks.acquire(&first).await.unwrap(),
        Attempt::Granted(_)
    ));
}

#[tokio::test]
async fn contention_is_a_value_for_acquire() {
    let env = env("retry_contended").await;
    let _ = env
        .locks
        .xlock("r", "a", LockDetails::default())
        .await
        .unwrap();
    let request = AcquireRequest::shared("r", "b", LockDetails::default(), None);
    let Attempt::Contended(contention) = env.locks.acquire(&request).await.unwrap() else {
        panic!("a holds it")
    };
    assert_eq!(contention.resource(), "r");
    assert_eq!(contention.holders()[0].lock_id(), "a");
    assert_eq!(contention.free_at(), None);
}
