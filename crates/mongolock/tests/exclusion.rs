//! A resource has one live exclusive holder, or live shared holders, or none.

mod common;

use common::{env, secs};
use mongolock::{ErrorKind, LockDetails, LockKind};

#[tokio::test]
async fn an_exclusive_lock_keeps_out_everybody_else() {
    let env = env("exclusion_x").await;
    let locks = &env.locks;
    let grant = locks
        .xlock(
            "r",
            "a",
            LockDetails::default().owner("alice").ttl(secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(grant.kind(), LockKind::Exclusive);

    let error = locks
        .xlock("r", "b", LockDetails::default())
        .await
        .unwrap_err();
    let ErrorKind::AlreadyLocked {
        resource,
        holders,
        free_at,
        ..
    } = error.kind()
    else {
        panic!("{error:?}")
    };
    assert_eq!(resource, "r");
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].lock_id(), "a");
    assert_eq!(holders[0].owner(), Some("alice"));
    assert_eq!(holders[0].fencing_token(), grant.fencing_token());
    assert_eq!(
        *free_at,
        grant.expires_at(),
        "free when the holder's lease ends"
    );

    let error = locks
        .slock("r", "c", LockDetails::default(), None)
        .await
        .unwrap_err();
    assert!(error.is_already_locked());
}

#[tokio::test]
async fn shared_locks_keep_out_exclusive_ones_but_not_each_other() {
    let env = env("exclusion_s").await;
    let locks = &env.locks;
    let _ = locks
        .slock("r", "a", LockDetails::default(), None)
        .await
        .unwrap();
    let _ = locks
        .slock("r", "b", LockDetails::default(), None)
        .await
        .unwrap();
    let error = locks
        .xlock("r", "c", LockDetails::default())
        .await
        .unwrap_err();
    let ErrorKind::AlreadyLocked {
        holders, free_at, ..
    } = error.kind()
    else {
        panic!()
    };
    assert_eq!(holders.len(), 2);
    assert_eq!(*free_at, None, "the readers have no TTL");
}

#[tokio::test]
async fn a_released_resource_can_be_taken_again() {
    let env = env("exclusion_release").await;
    let locks = &env.locks;
    let first = locks.xlock("r", "a", LockDetails::default()).await.unwrap();
    locks.unlock("a").await.unwrap();
    let second = locks.xlock("r", "b", LockDetails::default()).await.unwrap();
    assert!(second.fencing_token() > first.fencing_token());
    assert!(locks.release(&second).await.unwrap());
    let reader = locks
        .slock("r", "c", LockDetails::default(), None)
        .await
        .unwrap();
    assert!(reader.fencing_token() > second.fencing_token());
}

#[tokio::test]
async fn resources_are_independent() {
    let env = env("exclusion_independent").await;
    let locks = &env.locks;
    let a = locks
        .xlock("one", "a", LockDetails::default())
        .await
        .unwrap();
    let b = locks
        .xlock("two", "b", LockDetails::default())
        .await
        .unwrap();
    assert_eq!((a.resource(), b.resource()), ("one", "two"));
}

#[tokio::test]
async fn two_clients_see_the_same_locks() {
    let env = env("exclusion_clients").await;
    let other = env.other_client().await;
    let _ = env
        .locks
        .xlock("r", "a", LockDetails::default())
        .await
        .unwrap();
    common::assert_xlock_refused(&other, "r", "b").await;
}
