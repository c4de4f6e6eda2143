//! Which change event a pipeline-style update produces: mongod logs it as a delta (an
//! `update` event with an `updateDescription`) only when the delta is smaller than the new
//! document, and as the whole new document (a `replace` event) otherwise; before 5.0 it
//! always logged a replacement.
//!
//! mongod's source: `src/mongo/db/update/pipeline_executor.cpp` (`applyUpdate` asks
//! `doc_diff::computeOplogDiff` for a delta, padded by the 15 bytes of
//! `kSizeOfDeltaOplogEntryMetadata`, and falls back to a replacement entry), and
//! `src/mongo/db/update/document_diff_calculator.cpp` with
//! `src/mongo/db/update/document_diff_serialization.{h,cpp}` (the diff is built with an
//! approximate size and given up, at any level, once that size is not below the new value's;
//! the serialized top-level diff must also be strictly smaller than the new document). The
//! event's fields come from `src/mongo/db/pipeline/change_stream_document_diff_parser.cpp`.

mod common;

use std::time::Duration;

use bson::{Bson, Document, doc};
use mongodb::change_stream::ChangeStream;
use mongodb::change_stream::event::{ChangeStreamEvent, OperationType};
use mongolock_testkit::{ServerVersion, TestServer};

async fn next_event(
    stream: &mut ChangeStream<ChangeStreamEvent<Document>>,
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

/// Stores `before`, applies the pipeline update `pipeline` to it and returns the event.
async fn event_of(
    coll: &mongodb::Collection<Document>,
    before: Document,
    pipeline: Vec<Document>,
) -> ChangeStreamEvent<Document> {
    let id = before.get("_id").cloned().unwrap();
    coll.insert_one(before).await.unwrap();
    let mut stream = coll.watch().await.unwrap();
    let result = coll.update_one(doc! {"_id": id}, pipeline).await.unwrap();
    assert_eq!(result.modified_count, 1);
    next_event(&mut stream).await
}

/// A string field of `n` bytes.
fn pad(n: usize) -> String {
    "x".repeat(n)
}

#[tokio::test]
async fn a_small_document_is_logged_whole() {
    let t = common::target("pce_small").await;
    let coll = t.coll("c");
    // {_id: 1, a: 1} is 21 bytes; the delta {u: {a: 2}} is 20, but its approximation with
    // the oplog entry's 15 bytes is 35, not below 21: a replacement.
    let event = event_of(
        &coll,
        doc! {"_id": 1, "a": 1},
        vec![doc! {"$set": {"a": 2}}],
    )
    .await;
    assert_eq!(event.operation_type, OperationType::Replace);
    assert_eq!(event.full_document, Some(doc! {"_id": 1, "a": 2}));
    assert!(event.update_description.is_none());
}

#[tokio::test]
async fn the_delta_must_be_smaller_than_the_new_document_with_its_padding() {
    let t = common::target("pce_edge").await;
    let coll = t.coll("c");
    // {_id, a: int32, p: string of n bytes} is 29 + n bytes. Setting `a` costs 35 in the
    // approximation (15 + 5 + (1 + 2 + 4) + 8): a document of 35 bytes (n = 6) is replaced,
    // one of 36 bytes (n = 7) gets a delta.
    let replaced = event_of(
        &coll,
        doc! {"_id": 1, "a": 1, "p": pad(6)},
        vec![doc! {"$set": {"a": 2}}],
    )
    .await;
    assert_eq!(replaced.operation_type, OperationType::Replace);
    let updated = event_of(
        &coll,
        doc! {"_id": 2, "a": 1, "p": pad(7)},
        vec![doc! {"$set": {"a": 2}}],
    )
    .await;
    assert_eq!(updated.operation_type, OperationType::Update);
    let description = updated.update_description.unwrap();
    assert_eq!(description.updated_fields, doc! {"a": 2});
    assert!(description.removed_fields.is_empty());
}

#[tokio::test]
async fn a_large_document_gets_a_delta_naming_what_changed() {
    let t = common::target("pce_large").await;
    let coll = t.coll("c");
    let event = event_of(
        &coll,
        doc! {"_id": 1, "pad": pad(200), "gone": 1, "arr": [1, 2, 3], "n": 1},
        vec![
            doc! {"$unset": "gone"},
            doc! {"$set": {"arr": [1, 2], "n": 2, "added": true}},
        ],
    )
    .await;
    assert_eq!(event.operation_type, OperationType::Update);
    let description = event.update_description.unwrap();
    assert_eq!(description.updated_fields, doc! {"n": 2, "added": true});
    assert_eq!(description.removed_fields, vec!["gone".to_string()]);
    let truncated = description.truncated_arrays.unwrap();
    assert_eq!(truncated.len(), 1);
    assert_eq!(
        (truncated[0].field.as_str(), truncated[0].new_size),
        ("arr", 2)
    );
}

#[tokio::test]
async fn an_inner_diff_not_smaller_than_its_value_sets_the_field_whole() {
    let t = common::target("pce_inner").await;
    let coll = t.coll("c");
    // `s` is 19 bytes; its diff {u: {b: 5}} approximates to 5 + (1 + 2 + 4) + 8 = 20, not
    // below 19: the whole of `s` is updated.
    let whole = event_of(
        &coll,
        doc! {"_id": 1, "pad": pad(200), "s": {"b": 1, "c": 2}},
        vec![doc! {"$set": {"s.b": 5}}],
    )
    .await;
    assert_eq!(whole.operation_type, OperationType::Update);
    assert_eq!(
        whole.update_description.unwrap().updated_fields,
        doc! {"s": {"b": 5, "c": 2}}
    );
    // With a larger `s`, the inner diff is kept and names the inner path.
    let inner = event_of(
        &coll,
        doc! {"_id": 2, "pad": pad(200), "s": {"b": 1, "c": pad(40)}},
        vec![doc! {"$set": {"s.b": 5}}],
    )
    .await;
    assert_eq!(
        inner.update_description.unwrap().updated_fields,
        doc! {"s.b": 5}
    );
}

#[tokio::test]
async fn a_moved_field_is_reported_as_set() {
    let t = common::target("pce_moved").await;
    let coll = t.coll("c");
    // The same fields in another order: `a` is deleted where it was and inserted at the
    // end, so the delta sets it.
    let event = event_of(
        &coll,
        doc! {"_id": 1, "a": 1, "pad": pad(200)},
        vec![doc! {"$replaceWith": {"_id": "$_id", "pad": "$pad", "a": "$a"}}],
    )
    .await;
    assert_eq!(event.operation_type, OperationType::Update);
    let description = event.update_description.unwrap();
    assert_eq!(description.updated_fields, doc! {"a": 1});
    assert!(description.removed_fields.is_empty());
}

#[tokio::test]
async fn a_4_4_server_reports_itself_and_logs_every_pipeline_update_whole() {
    let server = TestServer::builder()
        .server_version(ServerVersion::V4_4)
        .start()
        .await
        .unwrap();
    let admin = server.client().database("admin");
    let hello = admin.run_command(doc! {"hello": 1}).await.unwrap();
    assert_eq!(hello.get_i32("maxWireVersion"), Ok(9));
    let info = admin.run_command(doc! {"buildInfo": 1}).await.unwrap();
    assert_eq!(info.get_str("version"), Ok("4.4.29"));
    assert_eq!(
        info.get_array("versionArray").unwrap(),
        &vec![
            Bson::Int32(4),
            Bson::Int32(4),
            Bson::Int32(29),
            Bson::Int32(0)
        ]
    );

    let coll = server.client().database("d").collection::<Document>("c");
    // The document a 5.0+ server logs as a delta (see above).
    let event = event_of(
        &coll,
        doc! {"_id": 1, "pad": pad(200), "n": 1},
        vec![doc! {"$set": {"n": 2}}],
    )
    .await;
    assert_eq!(event.operation_type, OperationType::Replace);
    assert_eq!(
        event.full_document,
        Some(doc! {"_id": 1, "pad": pad(200), "n": 2})
    );
    // Operator updates are still deltas.
    let mut stream = coll.watch().await.unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$set": {"n": 3}})
        .await
        .unwrap();
    let event = next_event(&mut stream).await;
    assert_eq!(event.operation_type, OperationType::Update);
    assert_eq!(
        event.update_description.unwrap().updated_fields,
        doc! {"n": 3}
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_default_server_is_7_0() {
    let server = TestServer::start().await.unwrap();
    let admin = server.client().database("admin");
    let hello = admin.run_command(doc! {"hello": 1}).await.unwrap();
    assert_eq!(hello.get_i32("maxWireVersion"), Ok(21));
    let info = admin.run_command(doc! {"buildInfo": 1}).await.unwrap();
    assert_eq!(info.get_str("version"), Ok("7.0.14"));
    server.shutdown().await;
}
