//! One lock id can hold many resources; unlock and renew act on the whole group.

mod common;

use common::{env, secs};
use mongolock::{Filter, LockDetails};

#[tokio::test]
async fn unlock_releases_the_whole_group() {
    let env = env("groups_unlock").await;
    let locks = &env.locks;
    let _ = locks.xlock("a", "g", LockDetails::default()).await.unwrap();
    let _ = locks
        .slock("b", "g", LockDetails::default(), None)
        .await
        .unwrap();
    let _ = locks
        .xlock("c", "g", LockDetails::default().ttl(secs(60)))
        .await
        .unwrap();
    let _ = locks
        .xlock("d", "other", LockDetails::default())
        .await
        .unwrap();

    assert_eq!(locks.unlock("g").await.unwrap(), 3, "a, b and c");

    let left = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].lock_id(), "other");
    for resource in ["a", "b", "c"] {
        let _ = locks
            .xlock(resource, "next", LockDetails::default())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn unlocking_an_unknown_group_releases_nothing() {
    let env = env("groups_unknown").await;
    let _ = env
        .locks
        .xlock("a", "g", LockDetails::default())
        .await
        .unwrap();
    assert_eq!(env.locks.unlock("nobody").await.unwrap(), 0);
    assert_eq!(env.locks.status(&Filter::default()).await.unwrap().len(), 1);
}

#[tokio::test]
async fn release_frees_one_lock_of_a_group() {
    let env = env("groups_release").await;
    let locks = &env.locks;
    let a = locks.xlock("a", "g", LockDetails::default()).await.unwrap();
    let _ = locks.xlock("b", "g", LockDetails::default()).await.unwrap();
    assert!(locks.release(&a).await.unwrap());
    assert!(!locks.release(&a).await.unwrap(), "already released");
    let left = locks.status(&Filter::default().lock_id("g")).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].resource(), "b");
}

#[tokio::test]
async fn a_stale_grant_does_not_release_a_newer_one() {
    let env = env("groups_stale").await;
    let locks = &env.locks;
    let old = locks.xlock("a", "g", LockDetails::default()).await.unwrap();
    locks.unlock("g").await.unwrap();
    let new = locks.xlock("a", "g", LockDetails::default()).await.unwrap();
    assert!(!locks.release(&old).await.unwrap());
    let held = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held[0].fencing_token(), new.fencing_token());
}

/// The same for a shared lock: the release of the earlier grant finds no entry of its
/// token, removes nothing and says so, and the newer entry of the same lock id stays.
#[tokio::test]
async fn a_stale_shared_grant_does_not_release_a_newer_one() {
    let env = env("groups_stale_shared").await;
    let locks = &env.locks;
    let old = locks
        .slock("a", "g", LockDetails::default(), None)
        .await
        .unwrap();
    locks.unlock("g").await.unwrap();
    let new = locks
        .slock("a", "g", LockDetails::default(), None)
        .await
        .unwrap();
    assert!(!locks.release(&old).await.unwrap());
    let held = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].fencing_token(), new.fencing_token());
    assert!(locks.release(&new).await.unwrap());
}
