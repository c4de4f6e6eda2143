//! Purge removes expired locks and never a live one. The Go library's group rule (a lock id
//! with an expired lock is abandoned, and all its locks go) is a separate, named call that
//! only removes the locks that existed when the member expired, judged by the server inside
//! the write.

mod common;

use common::{emulator_env, env, secs};
use mongolock::{Filter, LockDetails};

fn sorted(mut items: Vec<String>) -> Vec<String> {
    items.sort();
    items
}

async fn held(locks: &mongolock::LockClient) -> Vec<String> {
    sorted(
        locks
            .status(&Filter::default())
            .await
            .unwrap()
            .iter()
            .filter(|s| !s.is_expired())
            .map(|s| format!("{}/{}", s.resource(), s.lock_id()))
            .collect(),
    )
}

#[tokio::test]
async fn emulator_only_purge_removes_expired_locks_and_never_a_live_one() {
    let Some(env) = emulator_env("purge_expired").await else {
        return;
    };
    let locks = &env.locks;
    let _ = locks
        .xlock("a", "g", LockDetails::default().ttl(secs(5)))
        .await
        .unwrap();
    // A live lock of the same lock id, still renewed by its holder.
    let _ = locks
        .slock("b", "g", LockDetails::default().ttl(secs(60)), None)
        .await
        .unwrap();
    let _ = locks
        .slock("b", "live", LockDetails::default().ttl(secs(60)), None)
        .await
        .unwrap();
    let _ = locks
        .xlock("c", "forever", LockDetails::default())
        .await
        .unwrap();
    env.advance(secs(6));
    assert_eq!(locks.renew("g", secs(60)).await.unwrap(), 1, "b is renewed");

    let purged = locks.purge().await.unwrap();
    assert_eq!(purged.resources(), 1, "only a had an expired lock");
    assert!(purged.lock_ids().is_empty());
    assert_eq!(held(locks).await, ["b/g", "b/live", "c/forever"]);
    assert!(
        locks
            .status(&Filter::default().resource("a"))
            .await
            .unwrap()
            .is_empty(),
        "the expired lock is gone"
    );
    // The live shared lock of g still blocks an exclusive lock on b.
    common::assert_xlock_refused(locks, "b", "intruder").await;
    assert_eq!(locks.purge().await.unwrap().resources(), 0, "nothing left");
}

#[tokio::test]
async fn purge_without_expired_locks_removes_nothing() {
    let env = env("purge_nothing").await;
    let _ = env
        .locks
        .xlock("a", "g", LockDetails::default().ttl(secs(600)))
        .await
        .unwrap();
    let _ = env
        .locks
        .xlock("b", "h", LockDetails::default())
        .await
        .unwrap();
    assert_eq!(env.locks.purge().await.unwrap().resources(), 0);
    assert_eq!(env.locks.status(&Filter::default()).await.unwrap().len(), 2);
}

#[tokio::test]
async fn emulator_only_the_group_rule_is_opt_in_and_spares_later_grants() {
    let Some(env) = emulator_env("purge_groups").await else {
        return;
    };
    let locks = &env.locks;
    let _ = locks
        .xlock("a", "g", LockDetails::default().ttl(secs(5)))
        .await
        .unwrap();
    // Granted before a expired: taken as part of the abandoned group.
    let _ = locks
        .slock("b", "g", LockDetails::default(), None)
        .await
        .unwrap();
    let _ = locks
        .xlock("c", "other", LockDetails::default().ttl(secs(5)))
        .await
        .unwrap();
    env.advance(secs(6));
    // Granted to g after its member expired: a new lease, which the group rule must spare.
    let _ = locks
        .xlock("d", "g", LockDetails::default().ttl(secs(60)))
        .await
        .unwrap();
    let _ = locks
        .xlock("e", "bystander", LockDetails::default())
        .await
        .unwrap();

    let purged = locks.purge_abandoned_groups().await.unwrap();
    assert_eq!(sorted(purged.lock_ids().to_vec()), ["g", "other"]);
    assert_eq!(purged.resources(), 3, "a, b and c");
    assert_eq!(held(locks).await, ["d/g", "e/bystander"]);
    assert!(locks.status(&Filter::default()).await.unwrap().len() == 2);
    let again = locks.purge_abandoned_groups().await.unwrap();
    assert_eq!((again.resources(), again.lock_ids().len()), (0, 0));
}
