//! Renew extends every live lock of a group by the server's clock, and never revives one.

mod common;

use std::time::Duration;

use common::{emulator_env, env, invalid_argument, secs};
use mongolock::{Filter, LockDetails};

#[tokio::test]
async fn renew_extends_every_lock_of_the_group() {
    let env = env("renew_group").await;
    let locks = &env.locks;
    let a = locks
        .xlock("a", "g", LockDetails::default().ttl(secs(10)))
        .await
        .unwrap();
    locks
        .slock("b", "g", LockDetails::default().ttl(secs(10)), None)
        .await
        .unwrap();
    locks
        .xlock("c", "other", LockDetails::default().ttl(secs(10)))
        .await
        .unwrap();
    let renewed = locks.renew("g", secs(3600)).await.unwrap();
    assert_eq!(renewed.len(), 2);
    for status in &renewed {
        assert_eq!(status.lock_id(), "g");
        assert!(status.ttl_remaining().unwrap() > secs(3000));
        assert_eq!(status.holder().ttl(), Some(secs(3600)));
    }
    let a_now = renewed.iter().find(|s| s.resource() == "a").unwrap();
    assert_eq!(
        a_now.fencing_token(),
        a.fencing_token(),
        "renew keeps the token"
    );
    assert!(a_now.renewed_at() >= a_now.created_at());
    let other = locks
        .status(&Filter::default().lock_id("other"))
        .await
        .unwrap();
    assert!(
        other[0].ttl_remaining().unwrap() <= secs(10),
        "other groups are untouched"
    );
}

#[tokio::test]
async fn emulator_only_renew_moves_the_expiry_from_now() {
    let Some(env) = emulator_env("renew_now").await else {
        return;
    };
    let locks = &env.locks;
    locks
        .xlock("r", "g", LockDetails::default().ttl(secs(10)))
        .await
        .unwrap();
    env.advance(secs(8));
    let renewed = locks.renew("g", secs(10)).await.unwrap();
    assert_eq!(renewed.len(), 1);
    env.advance(secs(8));
    common::assert_xlock_refused(locks, "r", "x").await;
    env.advance(secs(3));
    locks.xlock("r", "x", LockDetails::default()).await.unwrap();
}

#[tokio::test]
async fn emulator_only_renew_never_revives_an_expired_lock() {
    let Some(env) = emulator_env("renew_expired").await else {
        return;
    };
    let locks = &env.locks;
    locks
        .xlock("gone", "g", LockDetails::default().ttl(secs(5)))
        .await
        .unwrap();
    locks
        .xlock("live", "g", LockDetails::default().ttl(secs(60)))
        .await
        .unwrap();
    env.advance(secs(6));
    let renewed = locks.renew("g", secs(60)).await.unwrap();
    assert_eq!(renewed.len(), 1);
    assert_eq!(renewed[0].resource(), "live");
    let gone = locks
        .status(&Filter::default().resource("gone"))
        .await
        .unwrap();
    assert!(gone[0].is_expired(), "still expired");
    locks
        .xlock("gone", "x", LockDetails::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_lock_without_ttl_stays_without_ttl() {
    let env = env("renew_no_ttl").await;
    env.locks
        .xlock("r", "g", LockDetails::default())
        .await
        .unwrap();
    let renewed = env.locks.renew("g", secs(30)).await.unwrap();
    assert_eq!(renewed.len(), 1);
    assert_eq!(renewed[0].ttl_remaining(), None);
    assert_eq!(renewed[0].holder().expires_at(), None);
}

#[tokio::test]
async fn renewing_an_unknown_group_renews_nothing() {
    let env = env("renew_unknown").await;
    assert!(
        env.locks
            .renew("nobody", secs(30))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn renew_checks_its_arguments() {
    let env = env("renew_args").await;
    let error = env.locks.renew("g", Duration::ZERO).await.unwrap_err();
    assert_eq!(invalid_argument(&error), "ttl");
    let error = env.locks.renew("", secs(1)).await.unwrap_err();
    assert_eq!(invalid_argument(&error), "lock_id");
}
