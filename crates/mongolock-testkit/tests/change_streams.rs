//! Change streams: events in commit order, resume tokens, awaiting getMore, update lookups,
//! TTL deletes, and the standalone refusal.

mod common;

use std::time::Duration;

use bson::{Document, doc};
use mongodb::change_stream::event::{ChangeStreamEvent, OperationType};
use mongodb::options::FullDocumentType;

async fn next_event(
    stream: &mut mongodb::change_stream::ChangeStream<ChangeStreamEvent<Document>>,
) -> ChangeStreamEvent<Document> {
    loop {
        if let Some(event) = tokio::time::timeout(Duration::from_secs(10), stream.next_if_any())
            .await
            .expect("an event within 10 s")
            .unwrap()
        {
            return event;
        }
    }
}

#[tokio::test]
async fn events_arrive_in_commit_order_with_their_details() {
    let t = common::target("cs_order").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 0}).await.unwrap(); // creates the collection before watching
    let mut stream = coll.watch().await.unwrap();
    coll.insert_one(doc! {"_id": 1, "a": 1}).await.unwrap();
    coll.update_one(
        doc! {"_id": 1},
        doc! {"$set": {"b": 2}, "$unset": {"a": ""}},
    )
    .await
    .unwrap();
    coll.replace_one(doc! {"_id": 1}, doc! {"c": 3})
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": 1}).await.unwrap();

    let insert = next_event(&mut stream).await;
    assert_eq!(insert.operation_type, OperationType::Insert);
    assert_eq!(insert.full_document, Some(doc! {"_id": 1, "a": 1}));
    assert_eq!(insert.document_key, Some(doc! {"_id": 1}));
    let ns = insert.ns.as_ref().unwrap();
    assert_eq!(
        (ns.db.as_str(), ns.coll.as_deref()),
        (t.db.name(), Some("c"))
    );
    assert!(insert.cluster_time.is_some());

    let update = next_event(&mut stream).await;
    assert_eq!(update.operation_type, OperationType::Update);
    let description = update.update_description.unwrap();
    assert_eq!(description.updated_fields, doc! {"b": 2});
    assert_eq!(description.removed_fields, vec!["a".to_string()]);
    assert_eq!(update.full_document, None, "no lookup unless asked");

    let replace = next_event(&mut stream).await;
    assert_eq!(replace.operation_type, OperationType::Replace);
    assert_eq!(replace.full_document, Some(doc! {"_id": 1, "c": 3}));

    let delete = next_event(&mut stream).await;
    assert_eq!(delete.operation_type, OperationType::Delete);
    assert_eq!(delete.document_key, Some(doc! {"_id": 1}));
}

#[tokio::test]
async fn a_waiting_get_more_wakes_when_a_write_commits() {
    let t = common::target("cs_wake").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    let mut stream = coll
        .watch()
        .max_await_time(Duration::from_secs(5))
        .await
        .unwrap();
    let writer = {
        let coll = coll.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            coll.insert_one(doc! {"_id": 1}).await.unwrap();
        })
    };
    let event = next_event(&mut stream).await;
    assert_eq!(event.document_key, Some(doc! {"_id": 1}));
    writer.await.unwrap();
}

#[tokio::test]
async fn resume_after_a_token_replays_what_followed() {
    let t = common::target("cs_resume").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    let mut stream = coll.watch().await.unwrap();
    for i in 1..=3 {
        coll.insert_one(doc! {"_id": i}).await.unwrap();
    }
    let first = next_event(&mut stream).await;
    assert_eq!(first.document_key, Some(doc! {"_id": 1}));
    drop(stream);
    let mut resumed = coll.watch().resume_after(first.id).await.unwrap();
    assert_eq!(
        next_event(&mut resumed).await.document_key,
        Some(doc! {"_id": 2})
    );
    assert_eq!(
        next_event(&mut resumed).await.document_key,
        Some(doc! {"_id": 3})
    );
}

#[tokio::test]
async fn update_lookup_and_pipeline_filter() {
    let t = common::target("cs_lookup").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1, "n": 0}).await.unwrap();
    let mut stream = coll
        .watch()
        .pipeline(vec![doc! {"$match": {"operationType": "update"}}])
        .full_document(FullDocumentType::UpdateLookup)
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": 2}).await.unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .await
        .unwrap();
    let event = next_event(&mut stream).await;
    assert_eq!(
        event.operation_type,
        OperationType::Update,
        "the insert was filtered out"
    );
    assert_eq!(event.full_document, Some(doc! {"_id": 1, "n": 1}));
}

#[tokio::test]
async fn database_streams_see_every_collection_and_drops_invalidate_collection_streams() {
    let t = common::target("cs_db").await;
    t.coll("a").insert_one(doc! {"_id": 0}).await.unwrap();
    let mut db_stream = t.db.watch().await.unwrap();
    let mut coll_stream = t.coll("a").watch().await.unwrap();
    t.coll("b").insert_one(doc! {"_id": 1}).await.unwrap();
    t.coll("a").drop().await.unwrap();
    let event = next_event(&mut db_stream).await;
    assert_eq!(event.ns.unwrap().coll.as_deref(), Some("b"));
    assert_eq!(
        next_event(&mut db_stream).await.operation_type,
        OperationType::Drop
    );
    assert_eq!(
        next_event(&mut coll_stream).await.operation_type,
        OperationType::Drop
    );
    assert_eq!(
        next_event(&mut coll_stream).await.operation_type,
        OperationType::Invalidate
    );
}

#[tokio::test]
async fn emulator_only_ttl_deletes_produce_delete_events() {
    let server = mongolock_testkit::TestServer::builder()
        .ttl_monitor_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let coll = server.client().database("d").collection::<Document>("c");
    coll.create_index(
        mongodb::IndexModel::builder()
            .keys(doc! {"at": 1})
            .options(
                mongodb::options::IndexOptions::builder()
                    .expire_after(Duration::from_secs(1))
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    let mut stream = coll.watch().await.unwrap();
    coll.insert_one(doc! {"_id": 1, "at": server.clock().now()})
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut stream).await.operation_type,
        OperationType::Insert
    );
    server.clock().advance(Duration::from_secs(5));
    let delete = next_event(&mut stream).await;
    assert_eq!(delete.operation_type, OperationType::Delete);
    assert_eq!(delete.document_key, Some(doc! {"_id": 1}));
}

#[tokio::test]
async fn emulator_only_standalone_refuses_change_streams() {
    let server = mongolock_testkit::TestServer::builder()
        .standalone(true)
        .start()
        .await
        .unwrap();
    let err = server
        .client()
        .database("d")
        .collection::<Document>("c")
        .watch()
        .await
        .unwrap_err();
    let (code, message) = common::command_error(&err);
    assert_eq!(code, 40573);
    assert_eq!(
        message,
        "The $changeStream stage is only supported on replica sets"
    );
}
