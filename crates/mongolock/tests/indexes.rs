//! `create_indexes` makes exactly the indexes the commands filter on (lock ids and lease
//! keepers, by the simple collation the commands use) and the TTL index, idempotently; nothing on `expiresAt`, which
//! no query can use an index for (expiry is judged with `$$NOW` inside `$expr`).

mod common;

use bson::Document;
use common::{env, invalid_argument, secs};
use futures_util::TryStreamExt;

#[tokio::test]
async fn create_indexes_is_idempotent() {
    let env = env("indexes").await;
    env.locks.create_indexes().await.unwrap();
    env.locks.create_indexes().await.unwrap();
    let indexes: Vec<Document> = env
        .db
        .run_cursor_command(bson::doc! { "listIndexes": "locks" })
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut names: Vec<&str> = indexes.iter().map(|i| i.get_str("name").unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "_id_",
            "exclusive.keeper_1",
            "exclusive.lockId_1",
            "idleSince_ttl",
            "shared.keeper_1",
            "shared.lockId_1",
        ]
    );
    for name in [
        "exclusive.lockId_1",
        "shared.lockId_1",
        "exclusive.keeper_1",
        "shared.keeper_1",
    ] {
        let index = indexes
            .iter()
            .find(|i| i.get_str("name") == Ok(name))
            .unwrap();
        let field = name.trim_end_matches("_1");
        assert_eq!(index.get_document("key").unwrap(), &bson::doc! { field: 1 });
        // mongod reports the simple collation by leaving it out; anything else would make the
        // index unusable for the commands' simple-collation queries.
        if let Ok(collation) = index.get_document("collation") {
            assert_eq!(collation.get_str("locale"), Ok("simple"), "{index}");
        }
    }
    let ttl = indexes
        .iter()
        .find(|i| i.get_str("name") == Ok("idleSince_ttl"))
        .unwrap();
    let seconds = ttl
        .get("expireAfterSeconds")
        .and_then(|v| v.as_i64().or(v.as_i32().map(i64::from)));
    assert_eq!(seconds, Some(86_400));
}

/// A retention the TTL index cannot keep is refused when the client is built, before
/// `create_indexes` could send it.
#[tokio::test]
async fn retention_is_checked_when_the_client_is_built() {
    let env = env("indexes_retention").await;
    let error = mongolock::LockClient::builder(env.collection())
        .retention(secs(0))
        .build()
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "retention");
}
