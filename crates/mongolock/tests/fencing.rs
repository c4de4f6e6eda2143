//! Every grant's token is greater than every earlier one on its resource: across releases,
//! expiries, purges and the deletion of the resource's document.

mod common;

use common::{emulator_env, env, secs};
use mongolock::{Filter, LockClient, LockDetails};

#[tokio::test]
async fn tokens_grow_across_releases_and_kinds() {
    let env = env("fencing_release").await;
    let locks = &env.locks;
    let mut last = 0;
    for round in 0..5 {
        let id = format!("x{round}");
        let grant = locks.xlock("r", &id, LockDetails::default()).await.unwrap();
        assert!(grant.fencing_token() > last);
        last = grant.fencing_token();
        locks.unlock(&id).await.unwrap();
        let a = locks
            .slock("r", "sa", LockDetails::default(), None)
            .await
            .unwrap();
        let b = locks
            .slock("r", "sb", LockDetails::default(), None)
            .await
            .unwrap();
        assert!(a.fencing_token() > last && b.fencing_token() > a.fencing_token());
        last = b.fencing_token();
        locks.unlock("sa").await.unwrap();
        locks.unlock("sb").await.unwrap();
    }
}

#[tokio::test]
async fn tokens_grow_after_the_document_is_deleted() {
    let env = env("fencing_delete").await;
    let locks = &env.locks;
    let first = locks.xlock("r", "a", LockDetails::default()).await.unwrap();
    // Many grants in a row push the counter ahead of the clock floor.
    let mut last = first.fencing_token();
    let mut holder = "a".to_owned();
    for i in 0..20 {
        locks.unlock(&holder).await.unwrap();
        holder = format!("n{i}");
        let grant = locks
            .xlock("r", &holder, LockDetails::default())
            .await
            .unwrap();
        assert!(grant.fencing_token() > last);
        last = grant.fencing_token();
    }
    locks.unlock("n19").await.unwrap();
    // What the TTL index does after the retention period, done by hand.
    let deleted = env
        .collection()
        .delete_one(bson::doc! { "_id": "r" })
        .await
        .unwrap();
    assert_eq!(deleted.deleted_count, 1);
    if env.has_clock() {
        env.advance(secs(1));
    } else {
        // A real server's clock must move past the last grant's microsecond floor.
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let after = locks.xlock("r", "b", LockDetails::default()).await.unwrap();
    assert!(
        after.fencing_token() > last,
        "{} > {last}",
        after.fencing_token()
    );
}

#[tokio::test]
async fn emulator_only_tokens_grow_across_expiry_and_purge() {
    let Some(env) = emulator_env("fencing_expiry").await else {
        return;
    };
    let locks = &env.locks;
    let a = locks
        .xlock("r", "a", LockDetails::default().ttl(secs(1)))
        .await
        .unwrap();
    env.advance(secs(2));
    let b = locks
        .xlock("r", "b", LockDetails::default().ttl(secs(1)))
        .await
        .unwrap();
    assert!(b.fencing_token() > a.fencing_token());
    env.advance(secs(2));
    assert_eq!(locks.purge().await.unwrap().resources(), 1);
    let c = locks
        .slock("r", "c", LockDetails::default(), None)
        .await
        .unwrap();
    assert!(c.fencing_token() > b.fencing_token());
}

#[tokio::test]
async fn emulator_only_tokens_grow_after_the_ttl_index_deletes_an_idle_resource() {
    let Some(env) = emulator_env("fencing_ttl_index").await else {
        return;
    };
    let locks = LockClient::builder(env.collection())
        .retention(secs(60))
        .build()
        .expect("valid settings");
    locks.create_indexes().await.unwrap();
    let a = locks
        .xlock("r", "a", LockDetails::default().ttl(secs(5)))
        .await
        .unwrap();
    locks.unlock("a").await.unwrap();
    env.advance(secs(3600));
    // The emulator's TTL monitor runs every few milliseconds in these tests.
    let deleted = env
        .wait_for_ttl_monitor(&env.collection(), bson::doc! { "_id": "r" })
        .await;
    assert!(deleted, "the idle resource document was deleted");
    let b = locks.xlock("r", "b", LockDetails::default()).await.unwrap();
    assert!(b.fencing_token() > a.fencing_token());
    assert_eq!(locks.status(&Filter::default()).await.unwrap().len(), 1);
}
