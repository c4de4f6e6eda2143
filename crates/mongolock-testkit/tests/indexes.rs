//! Index creation, listing, dropping, unique enforcement and the TTL monitor.

mod common;

use std::time::Duration;

use bson::{Document, doc};
use futures_util::TryStreamExt;
use mongodb::IndexModel;
use mongodb::options::IndexOptions;

#[tokio::test]
async fn create_indexes_is_idempotent_and_conflicts_are_errors() {
    let t = common::target("idx_create").await;
    let cmd =
        doc! {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1", "unique": true}]};
    let first = t.db.run_command(cmd.clone()).await.unwrap();
    assert_eq!(first.get_i32("numIndexesBefore"), Ok(1));
    assert_eq!(first.get_i32("numIndexesAfter"), Ok(2));
    assert_eq!(first.get_bool("createdCollectionAutomatically"), Ok(true));
    let again = t.db.run_command(cmd).await.unwrap();
    assert_eq!(again.get_i32("numIndexesAfter"), Ok(2));
    assert_eq!(again.get_str("note"), Ok("all indexes already exist"));
    let (code, _) = t
        .error_code(doc! {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1", "unique": false}]})
        .await;
    assert_eq!(
        code, 85,
        "same name and key, other options: IndexOptionsConflict"
    );
    let (code, _) = t
        .error_code(doc! {"createIndexes": "c", "indexes": [{"key": {"b": 1}, "name": "a_1"}]})
        .await;
    assert_eq!(code, 86, "same name, other key: IndexKeySpecsConflict");
}

#[tokio::test]
async fn unique_index_violation_answers_like_mongod() {
    let t = common::target("idx_unique").await;
    let coll = t.coll("c");
    coll.create_index(
        IndexModel::builder()
            .keys(doc! {"tenant": 1, "name": 1})
            .options(IndexOptions::builder().unique(true).build())
            .build(),
    )
    .await
    .unwrap();
    coll.insert_one(doc! {"tenant": 3, "name": "x"})
        .await
        .unwrap();
    coll.insert_one(doc! {"tenant": 4, "name": "x"})
        .await
        .unwrap();
    let err = coll
        .insert_one(doc! {"tenant": 3, "name": "x"})
        .await
        .unwrap_err();
    let (code, message) = common::command_error(&err);
    assert_eq!(code, 11000);
    assert_eq!(
        message,
        format!(
            "E11000 duplicate key error collection: {}.c index: tenant_1_name_1 dup key: {{ tenant: 3, name: \"x\" }}",
            t.db.name()
        )
    );
    // An update that would collide is refused too, and leaves the document as it was.
    let err = coll
        .update_one(doc! {"tenant": 4}, doc! {"$set": {"tenant": 3}})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 11000);
    assert_eq!(coll.count_documents(doc! {"tenant": 4}).await.unwrap(), 1);
    // findAndModify reports it as a top-level command error with keyPattern and keyValue.
    let reply =
        t.db.run_command(
            doc! {"findAndModify": "c", "query": {"tenant": 4}, "update": {"$set": {"tenant": 3}}},
        )
        .await
        .unwrap_err();
    let mongodb::error::ErrorKind::Command(e) = reply.kind.as_ref() else {
        panic!("{reply:?}")
    };
    assert_eq!(e.code, 11000);
    assert_eq!(e.code_name, "DuplicateKey");
}

#[tokio::test]
async fn list_and_drop_indexes() {
    let t = common::target("idx_list").await;
    let coll = t.coll("c");
    coll.create_index(
        IndexModel::builder()
            .keys(doc! {"expiresAt": 1})
            .options(
                IndexOptions::builder()
                    .expire_after(Duration::from_secs(0))
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    let listed: Vec<IndexModel> = coll
        .list_indexes()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1].keys, doc! {"expiresAt": 1});
    assert_eq!(
        listed[1].options.as_ref().unwrap().expire_after,
        Some(Duration::from_secs(0))
    );
    coll.drop_index("expiresAt_1").await.unwrap();
    assert_eq!(coll.list_index_names().await.unwrap(), vec!["_id_"]);
    let (code, _) = t
        .error_code(doc! {"dropIndexes": "c", "index": "nope_1"})
        .await;
    assert_eq!(code, 27);
    let (code, _) = t.error_code(doc! {"listIndexes": "missing"}).await;
    assert_eq!(code, 26);
}

#[tokio::test]
async fn emulator_only_ttl_monitor_deletes_expired_documents_by_the_server_clock() {
    let server = mongolock_testkit::TestServer::builder()
        .ttl_monitor_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let coll = server.client().database("ttl").collection::<Document>("c");
    coll.create_index(
        IndexModel::builder()
            .keys(doc! {"at": 1})
            .options(
                IndexOptions::builder()
                    .expire_after(Duration::from_secs(60))
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    let now = server.clock().now();
    coll.insert_many(vec![
        doc! {"_id": "date", "at": now},
        doc! {"_id": "string", "at": "not a date"},
        doc! {"_id": "missing"},
    ])
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        coll.count_documents(doc! {}).await.unwrap(),
        3,
        "not expired yet"
    );
    server.clock().advance(Duration::from_secs(61));
    let mut remaining = 3;
    for _ in 0..100 {
        remaining = coll.count_documents(doc! {}).await.unwrap();
        if remaining == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(remaining, 2);
    assert_eq!(coll.find_one(doc! {"_id": "date"}).await.unwrap(), None);
}
