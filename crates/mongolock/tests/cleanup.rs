//! Idle resource documents are deleted by a TTL index once the retention period has passed
//! since the resource became free; the TTL index never ends a live lock.

mod common;

use common::{emulator_env, secs};
use mongolock::{Filter, LockDetails};

#[tokio::test]
async fn emulator_only_idle_documents_go_and_held_ones_stay() {
    let Some(env) = emulator_env("cleanup").await else {
        return;
    };
    let locks = env.locks.clone().with_retention(secs(60));
    locks.create_indexes().await.unwrap();
    // Freed by release: idle from now.
    let _ = locks
        .xlock("released", "a", LockDetails::default())
        .await
        .unwrap();
    locks.unlock("a").await.unwrap();
    // Held with a TTL longer than the retention, and held without TTL.
    let _ = locks
        .xlock("long-lease", "b", LockDetails::default().ttl(secs(3600)))
        .await
        .unwrap();
    let _ = locks
        .xlock("no-ttl", "c", LockDetails::default())
        .await
        .unwrap();

    env.advance(secs(1800));
    let gone = env
        .wait_for_ttl_monitor(&env.collection(), bson::doc! { "_id": "released" })
        .await;
    assert!(
        gone,
        "the idle document was deleted after the retention period"
    );
    // The monitor has run past the retention: the held resources are still there and held.
    let held = locks.status(&Filter::default()).await.unwrap();
    let mut resources: Vec<&str> = held.iter().map(|s| s.resource()).collect();
    resources.sort_unstable();
    assert_eq!(resources, ["long-lease", "no-ttl"]);
    common::assert_xlock_refused(&locks, "long-lease", "x").await;

    // Once the lease has ended and the retention has passed, that document goes too.
    env.advance(secs(1800 + 120));
    let gone = env
        .wait_for_ttl_monitor(&env.collection(), bson::doc! { "_id": "long-lease" })
        .await;
    assert!(gone, "the expired lease's document was deleted");
    assert_eq!(
        locks.status(&Filter::default()).await.unwrap().len(),
        1,
        "no-ttl stays"
    );
}

#[tokio::test]
async fn emulator_only_an_early_release_makes_the_document_idle_from_the_release() {
    let Some(env) = emulator_env("cleanup_early").await else {
        return;
    };
    let locks = env.locks.clone().with_retention(secs(60));
    locks.create_indexes().await.unwrap();
    let _ = locks
        .xlock("r", "a", LockDetails::default().ttl(secs(24 * 3600)))
        .await
        .unwrap();
    locks.unlock("a").await.unwrap();
    env.advance(secs(120));
    let gone = env
        .wait_for_ttl_monitor(&env.collection(), bson::doc! { "_id": "r" })
        .await;
    assert!(
        gone,
        "idle since the release, not since the lease would have ended"
    );
}
