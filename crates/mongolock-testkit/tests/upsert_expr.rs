//! An upsert whose query uses `$expr` is refused when the statement is parsed, before any
//! document is looked at: code 224 (QueryFeatureNotAllowed), "$expr is not allowed in the
//! query predicate for an upsert", whether or not a document matches, for `update` and
//! `findAndModify` alike, and wherever the `$expr` sits in the query.
//!
//! mongod's source: `src/mongo/db/ops/parsed_update.cpp`, `ParsedUpdate::parseQueryToCQ`
//! (an upsert's query is parsed without the `$expr` feature, and the parser's
//! QueryFeatureNotAllowed is rewritten to this message; newer releases keep it in
//! `canonical_update.cpp`).

mod common;

use bson::doc;

const QUERY_FEATURE_NOT_ALLOWED: i32 = 224;
const MESSAGE: &str = "$expr is not allowed in the query predicate for an upsert";

#[tokio::test]
async fn refused_whether_or_not_a_document_matches() {
    let t = common::target("ue_update").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1, "n": 1}).await.unwrap();
    let filters = [
        // Matches the stored document.
        doc! {"_id": 1, "$expr": {"$eq": ["$n", 1]}},
        // Matches nothing.
        doc! {"_id": 2, "$expr": {"$eq": ["$n", 1]}},
        // Nested in `$and` / `$or`.
        doc! {"$and": [{"_id": 1}, {"$expr": true}]},
        doc! {"$or": [{"_id": 1}, {"$expr": true}]},
    ];
    for filter in filters {
        let error = coll
            .update_one(filter.clone(), doc! {"$set": {"touched": true}})
            .upsert(true)
            .await
            .unwrap_err();
        assert_eq!(
            common::command_error(&error),
            (QUERY_FEATURE_NOT_ALLOWED, MESSAGE.to_string()),
            "{filter}"
        );
        let error = coll
            .find_one_and_update(filter.clone(), doc! {"$set": {"touched": true}})
            .upsert(true)
            .await
            .unwrap_err();
        assert_eq!(
            common::command_error(&error),
            (QUERY_FEATURE_NOT_ALLOWED, MESSAGE.to_string()),
            "{filter}"
        );
    }
    // Nothing was written.
    let stored = coll.find(doc! {}).await.unwrap();
    let stored: Vec<_> = futures_util::TryStreamExt::try_collect(stored)
        .await
        .unwrap();
    assert_eq!(stored, vec![doc! {"_id": 1, "n": 1}]);
}

#[tokio::test]
async fn without_upsert_expr_is_allowed() {
    let t = common::target("ue_plain").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1, "n": 1}).await.unwrap();
    let result = coll
        .update_one(
            doc! {"_id": 1, "$expr": {"$eq": ["$n", 1]}},
            doc! {"$set": {"n": 2}},
        )
        .await
        .unwrap();
    assert_eq!(result.modified_count, 1);
}

#[tokio::test]
async fn the_statement_fails_alone_in_a_batch() {
    let t = common::target("ue_batch").await;
    t.coll("c").insert_one(doc! {"_id": 1}).await.unwrap();
    let reply =
        t.db.run_command(doc! {
            "update": "c",
            "ordered": false,
            "updates": [
                {"q": {"_id": 1}, "u": {"$set": {"a": 1}}},
                {"q": {"_id": 1, "$expr": true}, "u": {"$set": {"b": 1}}, "upsert": true},
                {"q": {"_id": 1}, "u": {"$set": {"c": 1}}},
            ],
        })
        .await
        .unwrap();
    assert_eq!(reply.get_i32("n"), Ok(2));
    let errors = reply.get_array("writeErrors").unwrap();
    assert_eq!(errors.len(), 1);
    let error = errors[0].as_document().unwrap();
    assert_eq!(error.get_i32("index"), Ok(1));
    assert_eq!(error.get_i32("code"), Ok(QUERY_FEATURE_NOT_ALLOWED));
    assert_eq!(error.get_str("errmsg"), Ok(MESSAGE));
}
