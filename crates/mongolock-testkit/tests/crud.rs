//! Inserts, queries, updates and deletes through the official driver, checked against
//! MongoDB's documented behaviour.

mod common;

use bson::{Bson, Document, doc};
use futures_util::TryStreamExt;
use mongodb::options::ReturnDocument;

async fn all(coll: &mongodb::Collection<Document>, filter: Document) -> Vec<Document> {
    coll.find(filter)
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test]
async fn insert_generates_object_ids_and_keeps_field_order() {
    let t = common::target("insert_ids").await;
    let coll = t.coll("c");
    let result = coll.insert_one(doc! {"b": 1, "a": 2}).await.unwrap();
    assert!(matches!(result.inserted_id, Bson::ObjectId(_)));
    let stored = coll.find_one(doc! {}).await.unwrap().unwrap();
    assert_eq!(stored.keys().collect::<Vec<_>>(), vec!["_id", "b", "a"]);
}

#[tokio::test]
async fn duplicate_id_is_e11000_with_key_pattern_and_value() {
    let t = common::target("dup_id").await;
    let coll = t.coll("locks");
    coll.insert_one(doc! {"_id": "job-7"}).await.unwrap();
    let err = coll.insert_one(doc! {"_id": "job-7"}).await.unwrap_err();
    let (code, message) = common::command_error(&err);
    assert_eq!(code, 11000);
    assert_eq!(
        message,
        format!(
            "E11000 duplicate key error collection: {}.locks index: _id_ dup key: {{ _id: \"job-7\" }}",
            t.db.name()
        )
    );
}

#[tokio::test]
async fn unordered_insert_continues_after_an_error() {
    let t = common::target("unordered").await;
    let coll = t.coll("c");
    let err = coll
        .insert_many(vec![doc! {"_id": 1}, doc! {"_id": 1}, doc! {"_id": 2}])
        .ordered(false)
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 11000);
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 2);
}

#[tokio::test]
async fn query_operators_follow_mongodb_semantics() {
    let t = common::target("query_ops").await;
    let coll = t.coll("c");
    coll.insert_many(vec![
        doc! {"_id": 1, "n": 5, "tags": ["a", "b"], "sub": {"x": 1}},
        doc! {"_id": 2, "n": 10.5, "tags": ["b"], "sub": [{"x": 2}, {"x": 3}]},
        doc! {"_id": 3, "n": "text", "tags": []},
        doc! {"_id": 4, "n": Bson::Null},
    ])
    .await
    .unwrap();
    let ids = |docs: Vec<Document>| {
        docs.iter()
            .map(|d| d.get_i32("_id").unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(all(&coll, doc! {"n": {"$gt": 4}}).await),
        vec![1, 2],
        "numbers only"
    );
    assert_eq!(
        ids(all(&coll, doc! {"n": {"$type": "string"}}).await),
        vec![3]
    );
    assert_eq!(
        ids(all(&coll, doc! {"n": Bson::Null}).await),
        vec![4],
        "null matches null"
    );
    assert_eq!(
        ids(all(&coll, doc! {"missing": Bson::Null}).await),
        vec![1, 2, 3, 4],
        "and missing"
    );
    assert_eq!(
        ids(all(&coll, doc! {"tags": "b"}).await),
        vec![1, 2],
        "array contains"
    );
    assert_eq!(ids(all(&coll, doc! {"tags": {"$size": 0}}).await), vec![3]);
    assert_eq!(
        ids(all(&coll, doc! {"tags": {"$all": ["a", "b"]}}).await),
        vec![1]
    );
    assert_eq!(
        ids(all(&coll, doc! {"sub.x": 3}).await),
        vec![2],
        "dotted path through an array"
    );
    assert_eq!(
        ids(all(&coll, doc! {"sub": {"$elemMatch": {"x": {"$gt": 2}}}}).await),
        vec![2]
    );
    assert_eq!(
        ids(all(&coll, doc! {"$or": [{"_id": 1}, {"n": 10.5}]}).await),
        vec![1, 2]
    );
    assert_eq!(
        ids(all(&coll, doc! {"n": {"$nin": [5, Bson::Null]}}).await),
        vec![2, 3]
    );
    assert_eq!(
        ids(all(&coll, doc! {"n": {"$not": {"$gt": 6}}}).await),
        vec![1, 3, 4]
    );
    assert_eq!(
        ids(all(&coll, doc! {"sub": {"$exists": false}}).await),
        vec![3, 4]
    );
    assert_eq!(
        ids(all(&coll, doc! {"$expr": {"$eq": ["$_id", 2]}}).await),
        vec![2]
    );
}

#[tokio::test]
async fn unknown_query_operator_is_bad_value() {
    let t = common::target("bad_op").await;
    t.coll("c").insert_one(doc! {"a": 1}).await.unwrap();
    let (code, message) = t
        .error_code(doc! {"find": "c", "filter": {"a": {"$frob": 1}}})
        .await;
    assert_eq!(code, 2);
    assert!(message.contains("unknown operator: $frob"), "{message}");
    let (code, message) = t
        .error_code(doc! {"find": "c", "filter": {"$frob": 1}})
        .await;
    assert_eq!(code, 2);
    assert!(
        message.contains("unknown top level operator: $frob"),
        "{message}"
    );
}

#[tokio::test]
async fn sort_skip_limit_projection_and_batches() {
    let t = common::target("cursor").await;
    let coll = t.coll("c");
    let docs: Vec<Document> = (0..250)
        .map(|i| doc! {"_id": i, "v": i % 7, "w": i})
        .collect();
    coll.insert_many(docs).await.unwrap();
    let found: Vec<Document> = coll
        .find(doc! {"v": 3})
        .sort(doc! {"w": -1})
        .skip(2)
        .limit(5)
        .projection(doc! {"w": 1, "_id": 0})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        found,
        vec![
            doc! {"w": 234},
            doc! {"w": 227},
            doc! {"w": 220},
            doc! {"w": 213},
            doc! {"w": 206}
        ]
    );
    // 250 documents need getMore after the first batch of 101, and a small batch size more.
    let every: Vec<Document> = coll
        .find(doc! {})
        .batch_size(7)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(every.len(), 250);
    assert_eq!(
        every[249].get_i32("_id"),
        Ok(249),
        "record order is insertion order"
    );
}

#[tokio::test]
async fn operator_updates_and_upserts() {
    let t = common::target("updates").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1, "n": 1, "list": [1, 2, 3]})
        .await
        .unwrap();
    let r = coll
        .update_one(
            doc! {"_id": 1},
            doc! {"$inc": {"n": 2}, "$push": {"list": 4}, "$set": {"a.b": true}},
        )
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 1));
    assert_eq!(
        coll.find_one(doc! {"_id": 1}).await.unwrap().unwrap(),
        doc! {"_id": 1, "n": 3, "list": [1, 2, 3, 4], "a": {"b": true}}
    );
    let noop = coll
        .update_one(doc! {"_id": 1}, doc! {"$set": {"n": 3}})
        .await
        .unwrap();
    assert_eq!(
        (noop.matched_count, noop.modified_count),
        (1, 0),
        "no-op updates modify nothing"
    );
    let up = coll
        .update_one(
            doc! {"_id": 2, "kind": "x"},
            doc! {"$setOnInsert": {"created": true}},
        )
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(up.upserted_id, Some(Bson::Int32(2)));
    assert_eq!(
        coll.find_one(doc! {"_id": 2}).await.unwrap().unwrap(),
        doc! {"_id": 2, "kind": "x", "created": true},
        "the upsert is seeded from the query's equality fields"
    );
    let many = coll
        .update_many(doc! {}, doc! {"$set": {"all": 1}})
        .await
        .unwrap();
    assert_eq!(many.modified_count, 2);
    let err = coll
        .update_one(doc! {"_id": 1}, doc! {"$set": {"_id": 5}})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 66, "_id is immutable");
    let err = coll
        .update_one(doc! {"_id": 1}, doc! {"$frob": {"a": 1}})
        .await
        .unwrap_err();
    assert_eq!(
        common::command_error(&err).0,
        9,
        "unknown modifier is FailedToParse"
    );
}

#[tokio::test]
async fn replacement_keeps_id() {
    let t = common::target("replace").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1, "a": 1}).await.unwrap();
    coll.replace_one(doc! {"a": 1}, doc! {"b": 2})
        .await
        .unwrap();
    assert_eq!(
        coll.find_one(doc! {}).await.unwrap().unwrap(),
        doc! {"_id": 1, "b": 2}
    );
}

#[tokio::test]
async fn pipeline_updates_see_now_and_fields() {
    let t = common::target("pipeline_update").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1, "fence": 5_i64})
        .await
        .unwrap();
    coll.update_one(
        doc! {"_id": 1},
        vec![
            doc! {"$set": {"fence": {"$add": ["$fence", 1]}, "at": "$$NOW"}},
            doc! {"$set": {"later": {"$gt": ["$at", {"$toDate": 0_i64}]}}},
            doc! {"$unset": "nothing"},
        ],
    )
    .await
    .unwrap();
    let stored = coll.find_one(doc! {}).await.unwrap().unwrap();
    assert_eq!(stored.get_i64("fence"), Ok(6));
    assert!(stored.get_datetime("at").is_ok());
    assert_eq!(stored.get_bool("later"), Ok(true));
}

#[tokio::test]
async fn expr_in_an_upsert_filter_is_refused() {
    let t = common::target("expr_upsert").await;
    let err = t
        .coll("c")
        .update_one(
            doc! {"_id": 1, "$expr": {"$eq": [1, 1]}},
            doc! {"$set": {"a": 1}},
        )
        .upsert(true)
        .await
        .unwrap_err();
    let (code, message) = common::command_error(&err);
    assert_eq!(code, 224);
    assert!(
        message.contains("$expr is not allowed in the query predicate for an upsert"),
        "{message}"
    );
}

#[tokio::test]
async fn find_one_and_update_returns_before_or_after() {
    let t = common::target("fam").await;
    let coll = t.coll("c");
    coll.insert_many(vec![doc! {"_id": 1, "n": 1}, doc! {"_id": 2, "n": 2}])
        .await
        .unwrap();
    let before = coll
        .find_one_and_update(doc! {}, doc! {"$inc": {"n": 10}})
        .sort(doc! {"n": -1})
        .await
        .unwrap();
    assert_eq!(
        before,
        Some(doc! {"_id": 2, "n": 2}),
        "sort picks the document, pre-image by default"
    );
    let after = coll
        .find_one_and_update(doc! {"_id": 3}, doc! {"$set": {"n": 0}})
        .upsert(true)
        .return_document(ReturnDocument::After)
        .projection(doc! {"_id": 0})
        .await
        .unwrap();
    assert_eq!(after, Some(doc! {"n": 0}));
    let missing = coll
        .find_one_and_update(doc! {"_id": 9}, doc! {"$set": {"n": 0}})
        .await
        .unwrap();
    assert_eq!(missing, None);
    let deleted = coll.find_one_and_delete(doc! {"_id": 1}).await.unwrap();
    assert_eq!(deleted, Some(doc! {"_id": 1, "n": 1}));
    let replaced = coll
        .find_one_and_replace(doc! {"_id": 2}, doc! {"r": true})
        .return_document(ReturnDocument::After)
        .await
        .unwrap();
    assert_eq!(replaced, Some(doc! {"_id": 2, "r": true}));
}

#[tokio::test]
async fn find_and_modify_reports_last_error_object() {
    let t = common::target("fam_raw").await;
    let reply = t
        .db
        .run_command(doc! {"findAndModify": "c", "query": {"_id": "r"}, "update": {"$set": {"a": 1}}, "upsert": true})
        .await
        .unwrap();
    assert_eq!(
        reply.get("value"),
        Some(&Bson::Null),
        "pre-image of an upsert is null"
    );
    let last = reply.get_document("lastErrorObject").unwrap();
    assert_eq!(last.get_i32("n"), Ok(1));
    assert_eq!(last.get_bool("updatedExisting"), Ok(false));
    assert_eq!(last.get_str("upserted"), Ok("r"));
    let (code, _) = t.error_code(doc! {"findAndModify": "c", "query": {}}).await;
    assert_eq!(code, 9, "neither update nor remove");
}

#[tokio::test]
async fn deletes_count_documents_and_distinct() {
    let t = common::target("delete").await;
    let coll = t.coll("c");
    coll.insert_many((0..10).map(|i| doc! {"_id": i, "k": i % 3, "t": [i % 2]}))
        .await
        .unwrap();
    assert_eq!(
        coll.delete_one(doc! {"k": 0}).await.unwrap().deleted_count,
        1
    );
    assert_eq!(
        coll.delete_many(doc! {"k": 1}).await.unwrap().deleted_count,
        3
    );
    assert_eq!(coll.count_documents(doc! {"k": 2}).await.unwrap(), 3);
    assert_eq!(coll.estimated_document_count().await.unwrap(), 6);
    let mut kinds = coll.distinct("t", doc! {}).await.unwrap();
    kinds.sort_by_key(|b| b.as_i32());
    assert_eq!(
        kinds,
        vec![Bson::Int32(0), Bson::Int32(1)],
        "distinct flattens arrays"
    );
}

#[tokio::test]
async fn aggregate_groups_and_counts() {
    let t = common::target("aggregate").await;
    let coll = t.coll("c");
    coll.insert_many((0..10).map(|i| doc! {"_id": i, "k": i % 2, "tags": ["x", "y"]}))
        .await
        .unwrap();
    let groups: Vec<Document> = coll
        .aggregate(vec![
            doc! {"$match": {"_id": {"$gte": 2}}},
            doc! {"$group": {"_id": "$k", "n": {"$sum": 1}, "ids": {"$push": "$_id"}}},
            doc! {"$sort": {"_id": 1}},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        groups,
        vec![
            doc! {"_id": 0, "n": 4, "ids": [2, 4, 6, 8]},
            doc! {"_id": 1, "n": 4, "ids": [3, 5, 7, 9]}
        ]
    );
    let unwound: Vec<Document> = coll
        .aggregate(vec![doc! {"$unwind": "$tags"}, doc! {"$count": "n"}])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(unwound, vec![doc! {"n": 20}]);
    let (code, _) = t
        .error_code(doc! {"aggregate": "c", "pipeline": [{"$frob": {}}], "cursor": {}})
        .await;
    assert_eq!(code, 40324, "unknown stage");
}

#[tokio::test]
async fn aggregate_leading_match_by_id_then_computed_stages() {
    let t = common::target("aggregate_by_id").await;
    let coll = t.coll("c");
    coll.insert_many((0..10).map(|i| doc! {"_id": i, "k": i % 3}))
        .await
        .unwrap();
    let run = |pipeline: Vec<Document>| {
        let coll = coll.clone();
        async move {
            coll.aggregate(pipeline)
                .await
                .unwrap()
                .try_collect::<Vec<Document>>()
                .await
                .unwrap()
        }
    };
    // `$in` on `_id`: every listed value that exists (a numeric value of another type
    // included), in the order the documents were stored, each once.
    let found = run(vec![
        doc! {"$match": {"_id": {"$in": [7, 2.0, 2, 42, "2"]}, "k": {"$gte": 0}}},
        doc! {"$project": {"_id": 0, "id": "$_id", "double": {"$multiply": ["$k", 2]}}},
    ])
    .await;
    assert_eq!(
        found,
        vec![doc! {"id": 2, "double": 4}, doc! {"id": 7, "double": 2}]
    );
    // The other conditions of the `$match` still apply.
    let found = run(vec![
        doc! {"$match": {"_id": {"$in": [3, 4]}, "k": 1}},
        doc! {"$replaceWith": {"k": "$k"}},
    ])
    .await;
    assert_eq!(found, vec![doc! {"k": 1}]);
    // `_id` equality, then a computed first stage and more stages.
    let found = run(vec![
        doc! {"$match": {"_id": 5}},
        doc! {"$set": {"n": 1}},
        doc! {"$unwind": {"path": "$n", "preserveNullAndEmptyArrays": true}},
        doc! {"$count": "c"},
    ])
    .await;
    assert_eq!(found, vec![doc! {"c": 1}]);
    // A computed first stage over the whole collection.
    let found = run(vec![
        doc! {"$set": {"even": {"$eq": [{"$mod": ["$_id", 2]}, 0]}}},
        doc! {"$match": {"even": true}},
        doc! {"$count": "c"},
    ])
    .await;
    assert_eq!(found, vec![doc! {"c": 5}]);
}

#[tokio::test]
async fn concurrent_increments_are_never_lost() {
    let t = common::target("concurrent_inc").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1, "n": 0}).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let coll = coll.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        coll.find_one(doc! {}).await.unwrap().unwrap().get_i32("n"),
        Ok(400)
    );
}

#[tokio::test]
async fn concurrent_conditional_updates_have_one_winner() {
    let t = common::target("concurrent_cas").await;
    let coll = t.coll("c");
    for round in 0..20 {
        coll.insert_one(doc! {"_id": round, "owner": Bson::Null})
            .await
            .unwrap();
        let mut tasks = Vec::new();
        for who in 0..8 {
            let coll = coll.clone();
            tasks.push(tokio::spawn(async move {
                coll.update_one(
                    doc! {"_id": round, "owner": Bson::Null},
                    doc! {"$set": {"owner": who}},
                )
                .await
                .unwrap()
                .modified_count
            }));
        }
        let mut winners = 0;
        for task in tasks {
            winners += task.await.unwrap();
        }
        assert_eq!(winners, 1, "round {round}");
    }
}

#[tokio::test]
async fn an_empty_write_batch_is_invalid_length() {
    let t = common::target("empty_batch").await;
    for cmd in [
        doc! {"insert": "c", "documents": []},
        doc! {"update": "c", "updates": []},
        doc! {"delete": "c", "deletes": []},
    ] {
        let (code, message) = t.error_code(cmd).await;
        assert_eq!(code, 16, "{message}");
        assert_eq!(
            message,
            "Write batch sizes must be between 1 and 100000. Got 0 operations."
        );
    }
}

#[tokio::test]
async fn aggregate_rejects_an_undefined_variable_at_parse_time() {
    let t = common::target("aggregate_vars").await;
    // No collection, so no document reaches the stage: mongod still refuses the pipeline.
    let (code, _) = t
        .error_code(doc! {
            "aggregate": "empty", "pipeline": [{"$project": {"a": "$$nope"}}], "cursor": {},
        })
        .await;
    assert_eq!(code, 17276, "undefined variable");
    // The command's `let`, the system variables and variables bound by `$let` are defined.
    let coll = t.coll("empty");
    let rows: Vec<Document> = coll
        .aggregate(vec![doc! {"$project": {
            "a": "$$nope",
            "b": {"$let": {"vars": {"x": 1}, "in": "$$x"}},
            "c": "$$ROOT",
            "d": "$$NOW",
        }}])
        .let_vars(doc! {"nope": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert!(rows.is_empty());
}
