//! A cap on shared locks turns a shared lock into a semaphore.

mod common;

use common::{env, invalid_argument};
use mongolock::{ErrorKind, LockDetails};

#[tokio::test]
async fn the_cap_limits_live_shared_locks() {
    let env = env("caps_limit").await;
    let locks = &env.locks;
    for id in ["a", "b", "c"] {
        let _ = locks
            .slock("r", id, LockDetails::default(), Some(3))
            .await
            .unwrap();
    }
    let error = locks
        .slock("r", "d", LockDetails::default(), Some(3))
        .await
        .unwrap_err();
    let ErrorKind::AlreadyLocked { holders, .. } = error.kind() else {
        panic!("{error:?}")
    };
    assert_eq!(holders.len(), 3);

    locks.unlock("b").await.unwrap();
    let _ = locks
        .slock("r", "d", LockDetails::default(), Some(3))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_cap_is_stored_and_another_cap_is_refused_not_applied() {
    let env = env("caps_stored").await;
    let locks = &env.locks;
    let _ = locks
        .slock("r", "a", LockDetails::default(), Some(1))
        .await
        .unwrap();
    assert!(
        locks
            .slock("r", "b", LockDetails::default(), Some(1))
            .await
            .unwrap_err()
            .is_already_locked()
    );
    // A second, larger cap would let b in past the first one: it is refused instead.
    for other in [Some(2), None] {
        let error = locks
            .slock("r", "b", LockDetails::default(), other)
            .await
            .unwrap_err();
        match error.kind() {
            ErrorKind::CapMismatch {
                resource,
                requested,
                stored,
                ..
            } => {
                assert_eq!(resource, "r");
                assert_eq!((*requested, *stored), (other, Some(1)));
            }
            kind => panic!("expected CapMismatch, got {kind:?}"),
        }
    }
    assert_eq!(locks.status(&Default::default()).await.unwrap().len(), 1);
    // Once the last shared holder is gone, the next one sets the cap.
    locks.unlock("a").await.unwrap();
    let _ = locks
        .slock("r", "b", LockDetails::default(), Some(2))
        .await
        .unwrap();
    let _ = locks
        .slock("r", "c", LockDetails::default(), Some(2))
        .await
        .unwrap();
    let error = locks
        .slock("r", "d", LockDetails::default(), Some(1))
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::CapMismatch { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_holder_asking_again_is_not_counted_twice() {
    let env = env("caps_again").await;
    let locks = &env.locks;
    let first = locks
        .slock("r", "a", LockDetails::default(), Some(1))
        .await
        .unwrap();
    let again = locks
        .slock("r", "a", LockDetails::default(), Some(1))
        .await
        .unwrap();
    assert_eq!(again.fencing_token(), first.fencing_token());
    assert!(!again.is_new());
}

#[tokio::test]
async fn a_cap_of_zero_is_refused_and_nothing_is_written() {
    let env = env("caps_zero").await;
    let error = env
        .locks
        .slock("r", "a", LockDetails::default(), Some(0))
        .await
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "max");
    assert_eq!(
        env.collection()
            .count_documents(bson::doc! {})
            .await
            .unwrap(),
        0
    );
}
