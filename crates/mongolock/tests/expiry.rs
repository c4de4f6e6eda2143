//! Locks end when their TTL passes by the server's clock, whatever their kind, and an expired
//! lock never blocks anybody.

mod common;

use common::{emulator_env, env, secs};
use mongolock::{Filter, LockDetails};

#[tokio::test]
async fn emulator_only_an_expired_exclusive_lock_blocks_nobody() {
    let Some(env) = emulator_env("expiry_x").await else {
        return;
    };
    let locks = &env.locks;
    let old = locks
        .xlock("r", "a", LockDetails::default().ttl(secs(10)))
        .await
        .unwrap();
    common::assert_xlock_refused(locks, "r", "b").await;
    env.advance(secs(11));
    let _ = locks
        .slock("r", "reader", LockDetails::default(), None)
        .await
        .unwrap();
    locks.unlock("reader").await.unwrap();
    let new = locks.xlock("r", "b", LockDetails::default()).await.unwrap();
    assert!(new.fencing_token() > old.fencing_token());
}

#[tokio::test]
async fn emulator_only_expired_shared_locks_block_nobody_and_free_their_slot() {
    let Some(env) = emulator_env("expiry_s").await else {
        return;
    };
    let locks = &env.locks;
    let _ = locks
        .slock("r", "a", LockDetails::default().ttl(secs(5)), Some(2))
        .await
        .unwrap();
    let _ = locks
        .slock("r", "b", LockDetails::default().ttl(secs(20)), Some(2))
        .await
        .unwrap();
    assert!(
        locks
            .slock("r", "c", LockDetails::default(), Some(2))
            .await
            .unwrap_err()
            .is_already_locked()
    );
    env.advance(secs(6));
    let _ = locks
        .slock("r", "c", LockDetails::default(), Some(2))
        .await
        .unwrap();
    common::assert_xlock_refused(locks, "r", "x").await;
    locks.unlock("c").await.unwrap();
    env.advance(secs(15));
    let _ = locks.xlock("r", "x", LockDetails::default()).await.unwrap();
}

#[tokio::test]
async fn emulator_only_a_lock_lives_until_its_ttl_has_passed() {
    let Some(env) = emulator_env("expiry_edge").await else {
        return;
    };
    let locks = &env.locks;
    let _ = locks
        .xlock("r", "a", LockDetails::default().ttl(secs(10)))
        .await
        .unwrap();
    env.advance(secs(9));
    common::assert_xlock_refused(locks, "r", "b").await;
    env.advance(secs(2));
    let _ = locks.xlock("r", "b", LockDetails::default()).await.unwrap();
}

#[tokio::test]
async fn emulator_only_the_contention_says_when_the_lease_ends() {
    let Some(env) = emulator_env("expiry_free_at").await else {
        return;
    };
    let locks = &env.locks;
    let grant = locks
        .xlock("r", "a", LockDetails::default().ttl(secs(10)))
        .await
        .unwrap();
    let expires = grant.expires_at().expect("a TTL was set");
    assert_eq!(
        expires.timestamp_millis() - grant.holder().created_at().timestamp_millis(),
        10_000
    );
    let error = locks
        .xlock("r", "b", LockDetails::default())
        .await
        .unwrap_err();
    let mongolock::ErrorKind::AlreadyLocked { free_at, .. } = error.kind() else {
        panic!()
    };
    assert_eq!(*free_at, Some(expires));
}

#[tokio::test]
async fn emulator_only_status_reports_expired_locks_until_cleared() {
    let Some(env) = emulator_env("expiry_status").await else {
        return;
    };
    let locks = &env.locks;
    let _ = locks
        .xlock("r", "a", LockDetails::default().ttl(secs(1)))
        .await
        .unwrap();
    env.advance(secs(2));
    let status = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(status.len(), 1);
    assert!(status[0].is_expired());
    assert_eq!(status[0].ttl_remaining(), Some(std::time::Duration::ZERO));
    let _ = locks.xlock("r", "b", LockDetails::default()).await.unwrap();
    let status = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(status.len(), 1, "the acquire cleared the expired lock");
    assert_eq!(status[0].lock_id(), "b");
}

#[tokio::test]
async fn a_lock_without_ttl_does_not_expire() {
    let env = env("expiry_none").await;
    let grant = env
        .locks
        .xlock("r", "a", LockDetails::default())
        .await
        .unwrap();
    assert_eq!(grant.expires_at(), None);
    if env.has_clock() {
        env.advance(secs(365 * 24 * 3600));
    }
    common::assert_xlock_refused(&env.locks, "r", "b").await;
    let status = env.locks.status(&Filter::default()).await.unwrap();
    assert_eq!(status[0].ttl_remaining(), None);
    assert!(!status[0].is_expired());
}
