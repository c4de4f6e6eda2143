//! Constant folding: mongod optimizes a query's `$expr` and an `aggregate` pipeline before it
//! evaluates them for any document, and optimizing evaluates every constant sub-expression,
//! in every branch: a constant that fails to convert fails the command even in a `$cond`
//! branch no document takes, and a constant that decides an `$and`/`$or` spares the other
//! operands. Pipeline-style updates are not optimized, so their expressions stay lazy.
//!
//! mongod's source: `src/mongo/db/pipeline/expression.cpp` (`ExpressionNary::optimize`
//! evaluates an operator whose operands are all constant; `ExpressionConvert::optimize` does
//! the same for `$convert` and `$toInt`...; `ExpressionCond::optimize` optimizes all three
//! parts before it picks a branch for a constant condition; `ExpressionAnd::optimize` and
//! `ExpressionOr::optimize` replace the whole by a deciding constant;
//! `ExpressionFieldPath::optimize` folds variables with constant values), the `$expr`
//! optimizer of `src/mongo/db/matcher/expression_expr.cpp`, and
//! `src/mongo/db/update/pipeline_executor.cpp`, which parses an update's pipeline and never
//! optimizes it.

mod common;

use bson::{Document, doc};
use futures_util::TryStreamExt;

/// ConversionFailure.
const CONVERSION_FAILURE: i32 = 241;
/// TypeMismatch.
const TYPE_MISMATCH: i32 = 14;

async fn aggregate(t: &common::Target, pipeline: Vec<Document>) -> Result<Vec<Document>, i32> {
    match t.coll("c").aggregate(pipeline).await {
        Ok(cursor) => cursor
            .try_collect()
            .await
            .map_err(|e| common::command_error(&e).0),
        Err(e) => Err(common::command_error(&e).0),
    }
}

#[tokio::test]
async fn a_failing_constant_in_a_branch_not_taken_fails_a_query() {
    let t = common::target("cf_query").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let untaken = doc! {"$expr": {"$cond": [false, {"$toInt": "abc"}, true]}};
    let error = coll.find(untaken.clone()).await.unwrap_err();
    assert_eq!(common::command_error(&error).0, CONVERSION_FAILURE);
    // Even with no collection to read.
    let error = t.coll("missing").find(untaken.clone()).await.unwrap_err();
    assert_eq!(common::command_error(&error).0, CONVERSION_FAILURE);
    // The same for the writes' queries.
    let error = coll
        .update_one(untaken.clone(), doc! {"$set": {"x": 1}})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&error).0, CONVERSION_FAILURE);
    let error = coll.delete_one(untaken.clone()).await.unwrap_err();
    assert_eq!(common::command_error(&error).0, CONVERSION_FAILURE);
    let error = coll
        .find_one_and_update(untaken, doc! {"$set": {"x": 1}})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&error).0, CONVERSION_FAILURE);
    // A branch that reads the document is not constant: nothing is evaluated for it.
    let lazy = doc! {"$expr": {"$cond": [false, {"$toInt": "$missing_or_text"}, true]}};
    assert_eq!(coll.count_documents(lazy).await.unwrap(), 1);
}

#[tokio::test]
async fn constant_arithmetic_in_a_switch_fails_an_aggregation() {
    let t = common::target("cf_switch").await;
    t.coll("c")
        .insert_one(doc! {"_id": 1, "n": 5})
        .await
        .unwrap();
    let pipeline = vec![doc! {"$project": {"v": {"$switch": {
        "branches": [
            {"case": {"$gt": ["$n", 0]}, "then": "positive"},
            {"case": {"$lt": ["$n", 0]}, "then": {"$add": [1, "one"]}},
        ],
        "default": "zero",
    }}}}];
    assert_eq!(aggregate(&t, pipeline).await, Err(TYPE_MISMATCH));
    // The `$$NOW` of the command is a constant too: a date does not convert to an int.
    let now = vec![doc! {"$project": {"v": {"$cond": [
        {"$eq": ["$n", 5]}, "five", {"$toInt": "$$NOW"},
    ]}}}];
    assert_eq!(aggregate(&t, now).await, Err(CONVERSION_FAILURE));
}

#[tokio::test]
async fn a_deciding_constant_spares_the_other_operands() {
    let t = common::target("cf_and_or").await;
    t.coll("c")
        .insert_one(doc! {"_id": 1, "a": "abc"})
        .await
        .unwrap();
    // `{$toInt: "$a"}` fails for this document, but the constant decides first.
    let pipeline = vec![doc! {"$project": {
        "_id": 0,
        "and": {"$and": [{"$toInt": "$a"}, false]},
        "or": {"$or": [{"$toInt": "$a"}, {"$literal": 1}]},
    }}];
    assert_eq!(
        aggregate(&t, pipeline).await,
        Ok(vec![doc! {"and": false, "or": true}])
    );
    // A constant that does not decide is dropped: the operand is still evaluated.
    let pipeline = vec![doc! {"$project": {"and": {"$and": [{"$toInt": "$a"}, true]}}}];
    assert_eq!(aggregate(&t, pipeline).await, Err(CONVERSION_FAILURE));
}

#[tokio::test]
async fn command_let_variables_are_constants_but_let_bound_ones_are_not() {
    let t = common::target("cf_let").await;
    t.coll("c").insert_one(doc! {"_id": 1}).await.unwrap();
    let command = doc! {
        "find": "c",
        "filter": {"$expr": {"$cond": [false, {"$toInt": "$$v"}, true]}},
        "let": {"v": "abc"},
    };
    assert_eq!(t.error_code(command).await.0, CONVERSION_FAILURE);
    // A `$let` binds its variables per evaluation: nothing to fold.
    let bound = doc! {"$expr": {"$let": {
        "vars": {"v": "abc"},
        "in": {"$cond": [false, {"$toInt": "$$v"}, true]},
    }}};
    assert_eq!(t.coll("c").count_documents(bound).await.unwrap(), 1);
}

#[tokio::test]
async fn a_pipeline_update_is_not_optimized() {
    let t = common::target("cf_update").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    coll.update_one(
        doc! {"_id": 1},
        vec![doc! {"$set": {"x": {"$cond": [false, {"$toInt": "abc"}, 1]}}}],
    )
    .await
    .unwrap();
    assert_eq!(
        coll.find_one(doc! {}).await.unwrap(),
        Some(doc! {"_id": 1, "x": 1})
    );
}
