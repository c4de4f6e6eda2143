//! `$out`, `$merge`, `$documents`, `$listLocalSessions` and `$rand` through the official
//! driver, plus the 5.0+ rules for `$`-prefixed field names and 7.0's refusal of update
//! `sort`, checked against MongoDB's documented behaviour.

mod common;

use bson::{Bson, Document, doc};
use futures_util::TryStreamExt;

async fn all(coll: &mongodb::Collection<Document>) -> Vec<Document> {
    coll.find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

async fn aggregate(
    coll: &mongodb::Collection<Document>,
    pipeline: Vec<Document>,
) -> mongodb::error::Result<Vec<Document>> {
    coll.aggregate(pipeline).await?.try_collect().await
}

#[tokio::test]
async fn out_replaces_the_target_and_keeps_its_indexes() {
    let t = common::target("out_replace").await;
    let src = t.coll("src");
    let dst = t.coll("dst");
    src.insert_many(vec![doc! {"_id": 1, "x": 1}, doc! {"_id": 2, "x": 2}])
        .await
        .unwrap();
    dst.insert_one(doc! {"_id": 9, "old": true}).await.unwrap();
    dst.create_index(
        mongodb::IndexModel::builder()
            .keys(doc! {"x": 1})
            .options(
                mongodb::options::IndexOptions::builder()
                    .unique(true)
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    let out = aggregate(
        &src,
        vec![doc! {"$match": {"x": {"$gt": 0}}}, doc! {"$out": "dst"}],
    )
    .await
    .unwrap();
    assert!(out.is_empty());
    assert_eq!(
        all(&dst).await,
        vec![doc! {"_id": 1, "x": 1}, doc! {"_id": 2, "x": 2}]
    );
    let names = dst.list_index_names().await.unwrap();
    assert!(names.contains(&"x_1".to_string()), "{names:?}");

    // A failing $out (duplicate _id) leaves the target as it was.
    let error = aggregate(&src, vec![doc! {"$set": {"_id": 7}}, doc! {"$out": "dst"}])
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&error).0, 11000);
    assert_eq!(all(&dst).await.len(), 2);

    // ... and creates no collection.
    let error = aggregate(
        &src,
        vec![doc! {"$set": {"_id": 7}}, doc! {"$out": "never"}],
    )
    .await
    .unwrap_err();
    assert_eq!(common::command_error(&error).0, 11000);
    let names = t.db.list_collection_names().await.unwrap();
    assert!(!names.contains(&"never".to_string()), "{names:?}");
}

#[tokio::test]
async fn out_and_merge_must_be_last() {
    let t = common::target("out_last").await;
    let src = t.coll("src");
    src.insert_one(doc! {"_id": 1}).await.unwrap();
    for stage in [doc! {"$out": "x"}, doc! {"$merge": {"into": "x"}}] {
        let error = aggregate(&src, vec![stage, doc! {"$match": {}}])
            .await
            .unwrap_err();
        assert_eq!(common::command_error(&error).0, 40601);
    }
    // Not allowed in an update pipeline either.
    let error = src
        .update_one(doc! {}, vec![doc! {"$out": "x"}])
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&error).0, 72);
}

#[tokio::test]
async fn merge_modes() {
    let t = common::target("merge_modes").await;
    let src = t.coll("src");
    let dst = t.coll("dst");
    src.insert_many(vec![doc! {"_id": 1, "a": 1}, doc! {"_id": 2, "a": 2}])
        .await
        .unwrap();
    dst.insert_one(doc! {"_id": 1, "a": 10, "b": 5})
        .await
        .unwrap();

    // Default: merge into matches, insert the rest.
    aggregate(&src, vec![doc! {"$merge": {"into": "dst"}}])
        .await
        .unwrap();
    assert_eq!(
        all(&dst).await,
        vec![doc! {"_id": 1, "a": 1, "b": 5}, doc! {"_id": 2, "a": 2}]
    );

    // keepExisting leaves matches alone.
    src.update_many(doc! {}, doc! {"$set": {"a": 100}})
        .await
        .unwrap();
    aggregate(
        &src,
        vec![doc! {"$merge": {"into": "dst", "whenMatched": "keepExisting"}}],
    )
    .await
    .unwrap();
    assert_eq!(all(&dst).await[0], doc! {"_id": 1, "a": 1, "b": 5});

    // replace drops the fields the result does not have.
    aggregate(
        &src,
        vec![doc! {"$merge": {"into": "dst", "whenMatched": "replace"}}],
    )
    .await
    .unwrap();
    assert_eq!(all(&dst).await[0], doc! {"_id": 1, "a": 100});

    // A pipeline sees the result as $$new (or the `let` variables).
    aggregate(
        &src,
        vec![doc! {"$merge": {
            "into": "dst",
            "let": {"incoming": "$a"},
            "whenMatched": [{"$set": {"sum": {"$add": ["$a", "$$incoming"]}}}],
        }}],
    )
    .await
    .unwrap();
    assert_eq!(all(&dst).await[0], doc! {"_id": 1, "a": 100, "sum": 200});

    // whenNotMatched: discard / fail.
    src.insert_one(doc! {"_id": 3, "a": 3}).await.unwrap();
    aggregate(
        &src,
        vec![doc! {"$merge": {"into": "dst", "whenNotMatched": "discard"}}],
    )
    .await
    .unwrap();
    assert_eq!(all(&dst).await.len(), 2);
    let error = aggregate(
        &src,
        vec![doc! {"$merge": {"into": "dst", "whenMatched": "keepExisting", "whenNotMatched": "fail"}}],
    )
    .await
    .unwrap_err();
    assert_eq!(common::command_error(&error).0, 51181);
    let error = aggregate(
        &src,
        vec![doc! {"$merge": {"into": "dst", "whenNotMatched": "fail"}}],
    )
    .await
    .unwrap_err();
    assert_eq!(common::command_error(&error).0, 13113);
}

#[tokio::test]
async fn merge_fail_reports_the_duplicate_key() {
    let t = common::target("merge_fail").await;
    let src = t.coll("src");
    t.coll("dst").insert_one(doc! {"_id": 2}).await.unwrap();
    src.insert_one(doc! {"_id": 2, "x": 1}).await.unwrap();
    let error = aggregate(
        &src,
        vec![doc! {"$merge": {"into": "dst", "whenMatched": "fail"}}],
    )
    .await
    .unwrap_err();
    let mongodb::error::ErrorKind::Command(e) = error.kind.as_ref() else {
        panic!("{error:?}");
    };
    assert_eq!(e.code, 11000);
    let raw = error.server_response().expect("raw reply");
    let reply = Document::try_from(raw.clone()).unwrap();
    assert_eq!(reply.get_document("keyPattern").unwrap(), &doc! {"_id": 1});
    assert_eq!(reply.get_document("keyValue").unwrap(), &doc! {"_id": 2});
}

#[tokio::test]
async fn merge_on_other_fields_needs_a_unique_index() {
    let t = common::target("merge_on").await;
    let src = t.coll("src");
    let dst = t.coll("dst");
    src.insert_one(doc! {"_id": 1, "k": "a", "v": 1})
        .await
        .unwrap();
    dst.insert_one(doc! {"_id": 50, "k": "a", "v": 0})
        .await
        .unwrap();
    let merge = doc! {"$merge": {"into": "dst", "on": "k", "whenMatched": "merge"}};
    let error = aggregate(&src, vec![doc! {"$project": {"_id": 0}}, merge.clone()])
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&error).0, 51183);
    dst.create_index(
        mongodb::IndexModel::builder()
            .keys(doc! {"k": 1})
            .options(
                mongodb::options::IndexOptions::builder()
                    .unique(true)
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    aggregate(&src, vec![doc! {"$project": {"_id": 0}}, merge])
        .await
        .unwrap();
    assert_eq!(all(&dst).await, vec![doc! {"_id": 50, "k": "a", "v": 1}]);
}

#[tokio::test]
async fn collectionless_sources() {
    let t = common::target("collectionless").await;
    let reply =
        t.db.run_command(doc! {
            "aggregate": 1,
            "pipeline": [{"$documents": [{"a": 1}, {"a": 2}]}, {"$match": {"a": 2}}],
            "cursor": {},
        })
        .await
        .unwrap();
    let batch = reply
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap();
    assert_eq!(batch, &vec![Bson::Document(doc! {"a": 2})]);

    // The driver's implicit session makes this command's own lsid known to the server.
    let session_docs: Vec<Document> =
        t.db.aggregate(vec![doc! {"$listLocalSessions": {}}])
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
    assert!(!session_docs.is_empty());
    let id = session_docs[0].get_document("_id").unwrap();
    assert!(matches!(id.get("id"), Some(Bson::Binary(_))));
    assert!(matches!(id.get("uid"), Some(Bson::Binary(_))));
    assert!(matches!(
        session_docs[0].get("lastUse"),
        Some(Bson::DateTime(_))
    ));

    let error =
        t.db.run_command(doc! {
            "aggregate": 1,
            "pipeline": [{"$match": {}}, {"$documents": []}],
            "cursor": {},
        })
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&error).0, 40602);
}

#[tokio::test]
async fn rand_gives_doubles_in_unit_interval() {
    let t = common::target("rand").await;
    let coll = t.coll("c");
    coll.insert_many((0..5).map(|i| doc! {"_id": i}).collect::<Vec<_>>())
        .await
        .unwrap();
    let docs = aggregate(&coll, vec![doc! {"$project": {"r": {"$rand": {}}}}])
        .await
        .unwrap();
    for d in docs {
        let r = d.get_f64("r").unwrap();
        assert!((0.0..1.0).contains(&r), "{r}");
    }
}

#[tokio::test]
async fn dollar_prefixed_fields_since_5_0() {
    let t = common::target("dollar_fields").await;
    let coll = t.coll("c");
    // Inserts may hold top-level `$` fields ...
    coll.insert_one(doc! {"_id": 1, "$a": 1}).await.unwrap();
    // ... and so may pipeline updates ...
    coll.update_one(
        doc! {"_id": 1},
        vec![doc! {"$replaceWith": {"$setField": {
        "field": {"$literal": "$b"}, "value": 2, "input": "$$ROOT"}}}],
    )
    .await
    .unwrap();
    assert_eq!(all(&coll).await, vec![doc! {"_id": 1, "$a": 1, "$b": 2}]);
    // ... but not `_id` sub-documents.
    let error = coll.insert_one(doc! {"_id": {"$x": 1}}).await.unwrap_err();
    assert_eq!(common::command_error(&error).0, 52);
}

#[tokio::test]
async fn update_sort_is_unknown_on_7_0() {
    let t = common::target("update_sort").await;
    t.coll("c").insert_one(doc! {"_id": 1}).await.unwrap();
    let (code, message) = t
        .error_code(doc! {
            "update": "c",
            "updates": [{"q": {}, "u": {"$set": {"x": 1}}, "sort": {"_id": 1}}],
        })
        .await;
    assert_eq!(code, 40415);
    assert_eq!(
        message,
        "BSON field 'update.updates.sort' is an unknown field."
    );
}

#[tokio::test]
async fn read_only_views() {
    let t = common::target("views").await;
    let src = t.coll("src");
    src.insert_many((0..5).map(|i| doc! {"_id": i, "x": i}).collect::<Vec<_>>())
        .await
        .unwrap();
    t.db.run_command(doc! {
        "create": "v",
        "viewOn": "src",
        "pipeline": [{"$match": {"x": {"$gte": 2}}}, {"$project": {"_id": 0, "x": 1}}],
    })
    .await
    .unwrap();
    let view = t.coll("v");
    assert_eq!(view.estimated_document_count().await.unwrap(), 3);
    assert_eq!(view.count_documents(doc! {"x": 3}).await.unwrap(), 1);
    let found: Vec<Document> = view
        .find(doc! {"x": {"$ne": 3}})
        .sort(doc! {"x": -1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found, vec![doc! {"x": 4}, doc! {"x": 2}]);
    let counted = aggregate(&view, vec![doc! {"$count": "n"}]).await.unwrap();
    assert_eq!(counted, vec![doc! {"n": 3}]);

    let error = view.insert_one(doc! {"x": 9}).await.unwrap_err();
    assert_eq!(common::command_error(&error).0, 166);
    let error = view
        .update_many(doc! {}, doc! {"$set": {"y": 1}})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&error).0, 166);
    let (code, _) = t.error_code(doc! {"create": "v"}).await;
    assert_eq!(code, 48);

    let reply =
        t.db.run_command(doc! {"listCollections": 1, "filter": {"name": "v"}})
            .await
            .unwrap();
    let listed = reply
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap();
    assert_eq!(listed.len(), 1);
    let listed = listed[0].as_document().unwrap();
    assert_eq!(listed.get_str("type").unwrap(), "view");
    assert_eq!(
        listed.get_document("options").unwrap().get_str("viewOn"),
        Ok("src")
    );

    view.drop().await.unwrap();
    assert_eq!(view.estimated_document_count().await.unwrap(), 0);
}
