//! `create_indexes` makes the indexes the commands use and the TTL index, idempotently.

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
            "exclusive.expiresAt_1",
            "exclusive.lockId_1",
            "idleSince_ttl",
            "shared.expiresAt_1",
            "shared.lockId_1",
        ]
    );
    let ttl = indexes
        .iter()
        .find(|i| i.get_str("name") == Ok("idleSince_ttl"))
        .unwrap();
    let seconds = ttl
        .get("expireAfterSeconds")
        .and_then(|v| v.as_i64().or(v.as_i32().map(i64::from)));
    assert_eq!(seconds, Some(86_400));
}

#[tokio::test]
async fn retention_is_checked() {
    let env = env("indexes_retention").await;
    let error = env
        .locks
        .clone()
        .with_retention(secs(0))
        .create_indexes()
        .await
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "retention");
}
