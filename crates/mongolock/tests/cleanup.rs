//! Idle resource documents are deleted by a TTL index once the retention period has passed
//! since the resource became free; the TTL index never ends a live lock.

mod common;

use common::{emulator_env, secs};
use mongolock::{Filter, LockClient, LockDetails};

#[tokio::test]
async fn emulator_only_idle_documents_go_and_held_ones_stay() {
    let Some(env) = emulator_env("cleanup").await else {
        return;
    };
    let locks = LockClient::builder(env.collection())
        .retention(secs(60))
        .build()
        .expect("valid settings");
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
    let locks = LockClient::builder(env.collection())
        .retention(secs(60))
        .build()
        .expect("valid settings");
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

/// A shared lock without TTL keeps its document from the TTL index whatever the other shared
/// locks' ends (`idleSince` null), through grants, a release of another and a renewal;
/// once it goes, the document is idle from the latest end. Read from the stored document, so
/// it runs on a real server too.
#[tokio::test]
async fn a_shared_lock_without_ttl_keeps_the_document_whatever_the_others_ends() {
    let env = common::env("cleanup_shared_no_ttl").await;
    let locks = &env.locks;
    let idle_since = || async { stored(&env).await.get("idleSince").cloned() };
    let forever = locks
        .slock("r", "forever", LockDetails::default(), None)
        .await
        .unwrap();
    let short = locks
        .slock("r", "short", LockDetails::default().ttl(secs(60)), None)
        .await
        .unwrap();
    let _other = locks
        .slock("r", "other", LockDetails::default().ttl(secs(120)), None)
        .await
        .unwrap();
    assert_eq!(
        idle_since().await,
        Some(bson::Bson::Null),
        "after the grants"
    );
    assert!(locks.release(&short).await.unwrap(), "released");
    assert_eq!(
        idle_since().await,
        Some(bson::Bson::Null),
        "after a release"
    );
    assert_eq!(locks.renew("other", secs(120)).await.unwrap(), 1);
    assert_eq!(
        idle_since().await,
        Some(bson::Bson::Null),
        "after a renewal"
    );
    assert!(locks.release(&forever).await.unwrap(), "released");
    let document = stored(&env).await;
    let Some(bson::Bson::DateTime(at)) = document.get("idleSince") else {
        panic!("idle from the last end once the lock without TTL is gone: {document}")
    };
    assert_eq!(Some(*at), shared_end(&document, "other"), "{document}");
}

/// A grant only ever pushes `idleSince` later: a shorter lease granted beside a longer one
/// leaves it at the longer one's end (the TTL index must not delete the document while the
/// longer lease lives), and one granted after an expired entry moves it to its own end. An
/// acquire computes `idleSince` only when it grants, from the stored one (see
/// `command/acquire.rs`), so this holds it to what it must cover. Needs no clock of its own:
/// it runs on a real server too.
#[tokio::test]
async fn a_shorter_grant_never_pulls_idle_since_before_a_longer_lease() {
    let env = common::env("cleanup_shorter_grant").await;
    let locks = &env.locks;
    let _long = locks
        .slock("r", "long", LockDetails::default().ttl(secs(3600)), None)
        .await
        .unwrap();
    let _short = locks
        .slock("r", "short", LockDetails::default().ttl(secs(60)), None)
        .await
        .unwrap();
    let document = stored(&env).await;
    let Some(bson::Bson::DateTime(at)) = document.get("idleSince") else {
        panic!("an idleSince date: {document}")
    };
    assert_eq!(Some(*at), shared_end(&document, "long"), "{document}");
    assert!(Some(*at) > shared_end(&document, "short"), "{document}");
}

/// The stored document of `r`.
async fn stored(env: &common::Env) -> bson::Document {
    env.collection()
        .find_one(bson::doc! { "_id": "r" })
        .await
        .unwrap()
        .expect("the document")
}

/// The `expiresAt` of `lock_id`'s shared entry in `document`.
fn shared_end(document: &bson::Document, lock_id: &str) -> Option<bson::DateTime> {
    document
        .get_array("shared")
        .ok()?
        .iter()
        .filter_map(|e| e.as_document())
        .find(|e| e.get_str("lockId") == Ok(lock_id))
        .and_then(|e| e.get_datetime("expiresAt").ok().copied())
}
