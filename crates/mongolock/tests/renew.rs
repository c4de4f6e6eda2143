//! Renew extends every live lock of a group by the server's clock, in one command, and never
//! revives an expired one.

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
    let _ = locks
        .slock("b", "g", LockDetails::default().ttl(secs(10)), None)
        .await
        .unwrap();
    let _ = locks
        .xlock("c", "other", LockDetails::default().ttl(secs(10)))
        .await
        .unwrap();
    assert_eq!(locks.renew("g", secs(3600)).await.unwrap(), 2);
    let renewed = locks.status(&Filter::default().lock_id("g")).await.unwrap();
    assert_eq!(renewed.len(), 2);
    for status in &renewed {
        assert!(status.ttl_remaining().unwrap() > secs(3000));
        assert_eq!(status.holder().ttl(), Some(secs(3600)));
    }
    let a_now = renewed.iter().find(|s| s.resource() == "a").unwrap();
    assert_eq!(
        a_now.fencing_token(),
        a.fencing_token(),
        "renew keeps the token"
    );
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
    let grant = locks
        .xlock("r", "g", LockDetails::default().ttl(secs(10)))
        .await
        .unwrap();
    env.advance(secs(8));
    assert_eq!(locks.renew("g", secs(10)).await.unwrap(), 1);
    let status = locks.status(&Filter::default().lock_id("g")).await.unwrap();
    // The server's clock moved 8 s: renewedAt records it, and the expiry is counted from it.
    let moved =
        status[0].renewed_at().timestamp_millis() - grant.holder().created_at().timestamp_millis();
    assert!(
        (8_000..9_000).contains(&moved),
        "renewed {moved} ms after the grant"
    );
    assert_eq!(
        status[0].holder().expires_at().unwrap().timestamp_millis(),
        status[0].renewed_at().timestamp_millis() + 10_000
    );
    env.advance(secs(8));
    common::assert_xlock_refused(locks, "r", "x").await;
    env.advance(secs(3));
    let _ = locks.xlock("r", "x", LockDetails::default()).await.unwrap();
}

#[tokio::test]
async fn emulator_only_renew_never_revives_an_expired_lock() {
    let Some(env) = emulator_env("renew_expired").await else {
        return;
    };
    let locks = &env.locks;
    let _ = locks
        .xlock("gone", "g", LockDetails::default().ttl(secs(5)))
        .await
        .unwrap();
    let _ = locks
        .xlock("live", "g", LockDetails::default().ttl(secs(60)))
        .await
        .unwrap();
    env.advance(secs(6));
    assert_eq!(locks.renew("g", secs(60)).await.unwrap(), 1);
    let live = locks
        .status(&Filter::default().resource("live"))
        .await
        .unwrap();
    assert!(live[0].ttl_remaining().unwrap() > secs(55), "renewed");
    let gone = locks
        .status(&Filter::default().resource("gone"))
        .await
        .unwrap();
    assert!(gone[0].is_expired(), "still expired");
    let _ = locks
        .xlock("gone", "x", LockDetails::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_lock_without_ttl_stays_without_ttl() {
    let env = env("renew_no_ttl").await;
    let _ = env
        .locks
        .xlock("r", "g", LockDetails::default())
        .await
        .unwrap();
    assert_eq!(env.locks.renew("g", secs(30)).await.unwrap(), 1);
    let renewed = env.locks.status(&Filter::default()).await.unwrap();
    assert_eq!(renewed[0].ttl_remaining(), None);
    assert_eq!(renewed[0].holder().expires_at(), None);
}

#[tokio::test]
async fn renewing_an_unknown_group_renews_nothing() {
    let env = env("renew_unknown").await;
    let _ = env
        .locks
        .xlock("r", "g", LockDetails::default().ttl(secs(10)))
        .await
        .unwrap();
    assert_eq!(env.locks.renew("nobody", secs(30)).await.unwrap(), 0);
    let status = env.locks.status(&Filter::default()).await.unwrap();
    assert!(status[0].ttl_remaining().unwrap() <= secs(10), "untouched");
}

#[tokio::test]
async fn renew_checks_its_arguments() {
    let env = env("renew_args").await;
    let error = env.locks.renew("g", Duration::ZERO).await.unwrap_err();
    assert_eq!(invalid_argument(&error), "ttl");
    let error = env.locks.renew("", secs(1)).await.unwrap_err();
    assert_eq!(invalid_argument(&error), "lock_id");
}

/// A lease's guard keeps a local deadline from the TTL it was granted with. `renew` with a
/// shorter TTL on its lock id must not end the lease on the server before that deadline:
/// neither at once, nor through the keeper's next renewals.
#[tokio::test]
async fn emulator_only_renew_never_shortens_a_lease_a_guard_keeps() {
    let Some(env) = emulator_env("renew_shorter").await else {
        return;
    };
    let guard = (env.locks.mutex("r").lock_id("svc").ttl(secs(6)))
        .acquire()
        .await
        .unwrap();
    assert_eq!(
        env.locks
            .renew("svc", Duration::from_secs(1))
            .await
            .unwrap(),
        1
    );
    let other = env.other_client().await;
    // Past the shorter TTL, and past the keeper's next renewals (every 2 s).
    for _ in 0..16 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Some(taken) = other.mutex("r").try_acquire().await.unwrap() {
            assert!(
                guard.is_lost(),
                "granted to another client while the guard believed it held the lock"
            );
            drop(taken);
            break;
        }
    }
    assert!(!guard.is_lost());
    let held = env.locks.status(&Filter::default()).await.unwrap();
    assert_eq!(
        held[0].holder().ttl(),
        Some(secs(6)),
        "the lease's TTL is kept"
    );
    guard.release().await.unwrap();
    other.shutdown().await;
}
