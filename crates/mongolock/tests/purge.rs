//! Purge removes expired locks and every lock that shares a lock id with an expired one.

mod common;

use common::{emulator_env, env, secs};
use mongolock::{Filter, LockDetails};

#[tokio::test]
async fn emulator_only_purge_removes_expired_locks_and_their_groups() {
    let Some(env) = emulator_env("purge_groups").await else {
        return;
    };
    let locks = &env.locks;
    locks
        .xlock("a", "g", LockDetails::default().ttl(secs(5)))
        .await
        .unwrap();
    locks
        .slock("b", "g", LockDetails::default(), None)
        .await
        .unwrap();
    locks
        .slock("b", "live", LockDetails::default().ttl(secs(60)), None)
        .await
        .unwrap();
    locks
        .xlock("c", "forever", LockDetails::default())
        .await
        .unwrap();
    env.advance(secs(6));

    let purged = locks.purge().await.unwrap();
    let mut purged: Vec<(String, String, bool)> = purged
        .iter()
        .map(|s| {
            (
                s.resource().to_owned(),
                s.lock_id().to_owned(),
                s.is_expired(),
            )
        })
        .collect();
    purged.sort();
    assert_eq!(
        purged,
        [
            ("a".into(), "g".into(), true),
            ("b".into(), "g".into(), false)
        ]
    );

    let mut left: Vec<String> = locks
        .status(&Filter::default())
        .await
        .unwrap()
        .iter()
        .map(|s| s.lock_id().to_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["forever", "live"]);
    assert!(
        locks.purge().await.unwrap().is_empty(),
        "nothing left to purge"
    );
}

#[tokio::test]
async fn purge_without_expired_locks_removes_nothing() {
    let env = env("purge_nothing").await;
    env.locks
        .xlock("a", "g", LockDetails::default().ttl(secs(600)))
        .await
        .unwrap();
    env.locks
        .xlock("b", "h", LockDetails::default())
        .await
        .unwrap();
    assert!(env.locks.purge().await.unwrap().is_empty());
    assert_eq!(env.locks.status(&Filter::default()).await.unwrap().len(), 2);
}
