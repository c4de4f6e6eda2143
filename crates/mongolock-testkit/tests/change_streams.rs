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

/// Opens a change stream on `coll` with a raw `aggregate` and these `$changeStream` options.
async fn raw_watch(db: &mongodb::Database, coll: &str, options: Document) -> i64 {
    let reply = db
        .run_command(
            doc! {"aggregate": coll, "pipeline": [{"$changeStream": options}], "cursor": {}},
        )
        .await
        .unwrap();
    reply.get_document("cursor").unwrap().get_i64("id").unwrap()
}

/// The next non-empty batch of a raw change stream.
async fn raw_next(
    db: &mongodb::Database,
    coll: &str,
    id: i64,
) -> mongodb::error::Result<Vec<Document>> {
    for _ in 0..10 {
        let reply = db
            .run_command(doc! {"getMore": id, "collection": coll, "maxTimeMS": 1000})
            .await?;
        let batch = reply
            .get_document("cursor")
            .unwrap()
            .get_array("nextBatch")
            .unwrap();
        if !batch.is_empty() {
            return Ok(batch
                .iter()
                .map(|e| e.as_document().unwrap().clone())
                .collect());
        }
    }
    panic!("no event within 10 getMores");
}

#[tokio::test]
async fn update_descriptions_name_inner_paths_and_truncated_arrays() {
    let t = common::target("cs_desc").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1, "a": {"b": 1, "c": 1}, "arr": [1, 2, 3]})
        .await
        .unwrap();
    let id = raw_watch(&t.db, "c", doc! {}).await;
    coll.update_one(doc! {"_id": 1}, doc! {"$set": {"a.b": 2}})
        .await
        .unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$push": {"arr": 4}})
        .await
        .unwrap();
    coll.update_one(doc! {"_id": 1}, vec![doc! {"$set": {"arr": [1, 2]}}])
        .await
        .unwrap();
    let mut events = Vec::new();
    while events.len() < 3 {
        events.extend(raw_next(&t.db, "c", id).await.unwrap());
    }
    let description = |i: usize| events[i].get_document("updateDescription").unwrap().clone();
    assert_eq!(
        description(0).get_document("updatedFields").unwrap(),
        &doc! {"a.b": 2}
    );
    assert_eq!(
        description(1).get_document("updatedFields").unwrap(),
        &doc! {"arr.3": 4}
    );
    let truncation = description(2);
    assert_eq!(truncation.get_document("updatedFields").unwrap(), &doc! {});
    assert_eq!(
        truncation.get_array("truncatedArrays").unwrap(),
        &vec![bson::Bson::Document(doc! {"field": "arr", "newSize": 2})]
    );
    assert!(
        !truncation.contains_key("disambiguatedPaths"),
        "only with showExpandedEvents"
    );
}

#[tokio::test]
async fn rename_reports_the_target_and_invalidates_the_collection_stream() {
    let t = common::target("cs_rename").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let id = raw_watch(&t.db, "c", doc! {}).await;
    let db = t.db.name();
    t.client
        .database("admin")
        .run_command(doc! {"renameCollection": format!("{db}.c"), "to": format!("{db}.d")})
        .await
        .unwrap();
    let mut events = Vec::new();
    while events.len() < 2 {
        events.extend(raw_next(&t.db, "c", id).await.unwrap());
    }
    assert_eq!(events[0].get_str("operationType"), Ok("rename"));
    assert_eq!(
        events[0].get_document("to").unwrap(),
        &doc! {"db": db, "coll": "d"}
    );
    assert_eq!(events[1].get_str("operationType"), Ok("invalidate"));
    assert_eq!(t.coll("d").count_documents(doc! {}).await.unwrap(), 1);
    // An existing target needs dropTarget.
    t.coll("e").insert_one(doc! {"_id": 1}).await.unwrap();
    let err = t
        .client
        .database("admin")
        .run_command(doc! {"renameCollection": format!("{db}.d"), "to": format!("{db}.e")})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 48);
    t.client
        .database("admin")
        .run_command(
            doc! {"renameCollection": format!("{db}.d"), "to": format!("{db}.e"), "dropTarget": true},
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn pre_and_post_images_follow_the_collection_option() {
    let t = common::target("cs_images").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1, "n": 0}).await.unwrap();
    let options = doc! {"fullDocument": "whenAvailable", "fullDocumentBeforeChange": "required"};
    // Without images, a required pre-image fails the stream (NoMatchingDocument).
    let id = raw_watch(&t.db, "c", options.clone()).await;
    coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .await
        .unwrap();
    let err = raw_next(&t.db, "c", id).await.unwrap_err();
    assert_eq!(common::command_error(&err).0, 47);

    t.db.run_command(doc! {"collMod": "c", "changeStreamPreAndPostImages": {"enabled": true}})
        .await
        .unwrap();
    let id = raw_watch(&t.db, "c", options).await;
    coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .await
        .unwrap();
    let event = raw_next(&t.db, "c", id).await.unwrap().remove(0);
    assert_eq!(
        event.get_document("fullDocumentBeforeChange").unwrap(),
        &doc! {"_id": 1, "n": 1}
    );
    assert_eq!(
        event.get_document("fullDocument").unwrap(),
        &doc! {"_id": 1, "n": 2}
    );
}

#[tokio::test]
async fn expanded_events_report_index_builds_with_the_collection_uuid() {
    let t = common::target("cs_expanded").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let id = raw_watch(&t.db, "c", doc! {"showExpandedEvents": true}).await;
    t.db.run_command(doc! {"createIndexes": "c", "indexes": [{"key": {"x": 1}, "name": "x_1"}]})
        .await
        .unwrap();
    let event = raw_next(&t.db, "c", id).await.unwrap().remove(0);
    assert_eq!(event.get_str("operationType"), Ok("createIndexes"));
    assert!(event.contains_key("collectionUUID"));
    let indexes = event
        .get_document("operationDescription")
        .unwrap()
        .get_array("indexes")
        .unwrap();
    assert_eq!(indexes[0].as_document().unwrap().get_str("name"), Ok("x_1"));
}

#[tokio::test]
async fn unknown_stages_and_coll_mod_options_are_refused() {
    let t = common::target("cs_refuse").await;
    t.coll("c").insert_one(doc! {"_id": 1}).await.unwrap();
    let (code, _) = t
        .error_code(
            doc! {"aggregate": "c", "pipeline": [{"$changeStream": {}}, {"$nope": 1}], "cursor": {}},
        )
        .await;
    assert_eq!(code, 40324);
    let (code, _) = t
        .error_code(
            doc! {"aggregate": "c", "pipeline": [{"$changeStream": {}}, {"$group": {"_id": null}}], "cursor": {}},
        )
        .await;
    assert_eq!(code, 20, "known stage, not allowed in a change stream");
    let (code, _) = t
        .error_code(doc! {"collMod": "missing", "changeStreamPreAndPostImages": {"enabled": true}})
        .await;
    assert_eq!(code, 26);
}

#[tokio::test]
async fn emulator_only_unimplemented_coll_mod_options_are_refused() {
    let t = common::target("cs_collmod").await;
    if !t.is_emulator() {
        return;
    }
    t.coll("c").insert_one(doc! {"_id": 1}).await.unwrap();
    let (code, _) = t
        .error_code(doc! {"collMod": "c", "validator": {"a": 1}})
        .await;
    assert_eq!(code, 72);
}

#[tokio::test]
async fn emulator_only_history_is_bounded_and_lost_history_is_reported() {
    // A window of 4 events: the oldest go as new ones come, as an oplog rolls over.
    let server = mongolock_testkit::TestServer::builder()
        .change_stream_history(4, usize::MAX)
        .start()
        .await
        .unwrap();
    let db = server.client().database("d");
    let coll = db.collection::<Document>("c");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    let lagging = raw_watch(&db, "c", doc! {}).await;
    let first = raw_watch(&db, "c", doc! {}).await;
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let token = raw_next(&db, "c", first).await.unwrap()[0]
        .get_document("_id")
        .unwrap()
        .clone();
    for id in 2..8 {
        coll.insert_one(doc! {"_id": id}).await.unwrap();
    }
    // Resuming after an event that left the window, and reading on from a position that
    // left it, both fail with ChangeStreamHistoryLost, labelled non-resumable.
    for cmd in [
        doc! {"aggregate": "c", "pipeline": [{"$changeStream": {"resumeAfter": token}}], "cursor": {}},
        doc! {"getMore": lagging, "collection": "c"},
    ] {
        let err = db.run_command(cmd).await.unwrap_err();
        let (code, message) = common::command_error(&err);
        assert_eq!(code, 286);
        assert_eq!(
            message,
            "Resume of change stream was not possible, as the resume point may no longer be in the oplog."
        );
        assert!(
            err.contains_label("NonResumableChangeStreamError"),
            "{err:?}"
        );
    }
    // A stream opened now reads what comes next.
    let fresh = raw_watch(&db, "c", doc! {}).await;
    coll.insert_one(doc! {"_id": 8}).await.unwrap();
    let events = raw_next(&db, "c", fresh).await.unwrap();
    assert_eq!(
        events[0].get_document("documentKey").unwrap(),
        &doc! {"_id": 8}
    );
}
