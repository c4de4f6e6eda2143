//! Asking again with a lock id that holds the resource returns the existing grant, so a retry
//! after an unknown outcome is safe.

mod common;

use common::{env, secs};
use mongolock::{AcquireRequest, Attempt, Filter, LockDetails};

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
async fn holding_one_kind_does_not_grant_the_other() {
    let env = env("retry_kind").await;
    let locks = &env.locks;
    locks
        .slock("r", "a", LockDetails::default(), None)
        .await
        .unwrap();
    common::assert_xlock_refused(locks, "r", "a").await;
    locks.xlock("q", "b", LockDetails::default()).await.unwrap();
    assert!(
        locks
            .slock("q", "b", LockDetails::default(), None)
            .await
            .unwrap_err()
            .is_already_locked()
    );
}

#[tokio::test]
async fn contention_is_a_value_for_acquire() {
    let env = env("retry_contended").await;
    env.locks
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
