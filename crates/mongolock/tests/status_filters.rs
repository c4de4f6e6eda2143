//! Status lists locks by resource, lock id, owner, kind, creation time and remaining TTL.

mod common;

use common::{emulator_env, env, secs};
use mongolock::{Filter, LockDetails, LockKind, LockStatus};

fn ids(statuses: &[LockStatus]) -> Vec<String> {
    let mut ids: Vec<String> = statuses
        .iter()
        .map(|s| format!("{}/{}", s.resource(), s.lock_id()))
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn filters_by_resource_lock_id_owner_and_kind() {
    let env = env("status_fields").await;
    let locks = &env.locks;
    let me = || LockDetails::default().owner("me").host("h1");
    let _ = locks.xlock("a", "1", me()).await.unwrap();
    let _ = locks.slock("b", "1", me(), None).await.unwrap();
    let _ = locks
        .slock("b", "2", LockDetails::default().owner("you"), None)
        .await
        .unwrap();

    let all = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(ids(&all), ["a/1", "b/1", "b/2"]);
    let by = |filter: Filter| {
        let locks = locks.clone();
        async move { ids(&locks.status(&filter).await.unwrap()) }
    };
    assert_eq!(by(Filter::default().resource("b")).await, ["b/1", "b/2"]);
    assert_eq!(by(Filter::default().lock_id("1")).await, ["a/1", "b/1"]);
    assert_eq!(by(Filter::default().owner("you")).await, ["b/2"]);
    assert_eq!(
        by(Filter::default().kind(LockKind::Shared)).await,
        ["b/1", "b/2"]
    );
    assert_eq!(
        by(Filter::default().owner("me").resource("b")).await,
        ["b/1"]
    );
    assert!(by(Filter::default().owner("nobody")).await.is_empty());

    let a = all.iter().find(|s| s.resource() == "a").unwrap();
    assert_eq!(
        (a.owner(), a.host(), a.kind()),
        (Some("me"), Some("h1"), LockKind::Exclusive)
    );
    let b2 = all.iter().find(|s| s.lock_id() == "2").unwrap();
    assert!(
        b2.host().is_some_and(|h| !h.is_empty()),
        "the host defaults to this machine's"
    );
}

#[tokio::test]
async fn filters_by_creation_time() {
    let env = env("status_created").await;
    let locks = &env.locks;
    let first = locks.xlock("a", "1", LockDetails::default()).await.unwrap();
    let created = first.holder().created_at();
    let after = Filter::default().created_after(created);
    let before = Filter::default()
        .created_before(bson::DateTime::from_millis(created.timestamp_millis() + 1));
    assert!(locks.status(&after).await.unwrap().is_empty());
    assert_eq!(locks.status(&before).await.unwrap().len(), 1);
    assert!(
        locks
            .status(&Filter::default().created_before(created))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn filters_by_remaining_ttl() {
    let env = env("status_ttl").await;
    let locks = &env.locks;
    let _ = locks
        .xlock("short", "1", LockDetails::default().ttl(secs(10)))
        .await
        .unwrap();
    let _ = locks
        .xlock("long", "2", LockDetails::default().ttl(secs(3600)))
        .await
        .unwrap();
    let _ = locks
        .xlock("forever", "3", LockDetails::default())
        .await
        .unwrap();
    let resources = |statuses: Vec<LockStatus>| {
        let mut r: Vec<String> = statuses.iter().map(|s| s.resource().to_owned()).collect();
        r.sort();
        r
    };
    let below = locks
        .status(&Filter::default().ttl_below(secs(60)))
        .await
        .unwrap();
    assert_eq!(resources(below), ["short"]);
    let at_least = locks
        .status(&Filter::default().ttl_at_least(secs(60)))
        .await
        .unwrap();
    assert_eq!(resources(at_least), ["forever", "long"]);
    let window = Filter::default()
        .ttl_at_least(secs(60))
        .ttl_below(secs(7200));
    assert_eq!(resources(locks.status(&window).await.unwrap()), ["long"]);
}

#[tokio::test]
async fn emulator_only_remaining_ttl_is_the_servers() {
    let Some(env) = emulator_env("status_server_ttl").await else {
        return;
    };
    let _ = env
        .locks
        .xlock("r", "1", LockDetails::default().ttl(secs(100)))
        .await
        .unwrap();
    env.advance(secs(60));
    let status = env.locks.status(&Filter::default()).await.unwrap();
    let remaining = status[0].ttl_remaining().unwrap();
    assert!(
        remaining <= secs(40) && remaining > secs(30),
        "{remaining:?}"
    );
    let below = env
        .locks
        .status(&Filter::default().ttl_below(secs(41)))
        .await
        .unwrap();
    assert_eq!(below.len(), 1);
}
