//! The server behaviours mongolock's commands (`crates/mongolock/src/command/*.rs`) depend
//! on, one test each, each naming the mongod source it comes from. An emulator change that
//! breaks one of the library's assumptions fails here first, with the assumption's name.
//!
//! Run against a real server with `MONGODB_URI` (see `common`), the same tests check that
//! the assumptions hold there too.

mod common;

use std::time::Duration;

use bson::{Bson, DateTime, Document, bson, doc};
use futures_util::TryStreamExt;
use mongodb::change_stream::ChangeStream;
use mongodb::change_stream::event::{ChangeStreamEvent, OperationType};

const DUPLICATE_KEY: i32 = 11000;
const QUERY_FEATURE_NOT_ALLOWED: i32 = 224;
const CONVERSION_FAILURE: i32 = 241;
const MAX_TIME_MS_EXPIRED: i32 = 50;
const SHUTDOWN_IN_PROGRESS: i32 = 91;

/// The lock library's mark and its value.
const MARK: &str = "mongolock";

async fn rows(t: &common::Target, pipeline: Vec<Document>) -> Vec<Document> {
    t.coll("c")
        .aggregate(pipeline)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// Evaluates `expr` on `doc` (stored as `_id: 1`) with `$project`.
async fn eval_on(t: &common::Target, doc: Document, expr: Bson) -> Option<Bson> {
    let mut stored = doc! {"_id": 1};
    stored.extend(doc);
    t.coll("c").insert_one(stored).await.unwrap();
    let out = rows(t, vec![doc! {"$project": {"_id": 0, "v": expr}}]).await;
    t.coll("c").delete_many(doc! {}).await.unwrap();
    out[0].get("v").cloned()
}

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

// ---------------------------------------------------------------------------------------
// Upserts (acquire, release: `findAndModify` with `upsert: true`)
// ---------------------------------------------------------------------------------------

/// Acquire's upsert seeds the new document from the query's equalities (`_id` and the mark)
/// and runs the pipeline on it; `new: true` with `fields` returns the projected new
/// document and `lastErrorObject.upserted` its `_id`.
/// mongod: `src/mongo/db/update/update_driver.cpp` (`populateDocumentWithQueryFields`),
/// `src/mongo/db/commands/find_and_modify.cpp`.
#[tokio::test]
async fn an_upsert_is_seeded_from_the_query_equalities() {
    let t = common::target("cf_seed").await;
    let reply = t
        .db
        .run_command(doc! {
            "findAndModify": "c",
            "query": {"_id": "r", MARK: 1},
            "update": [{"$replaceWith": {"$mergeObjects": ["$$ROOT", {"seen": {"$type": "$mongolock"}}]}}],
            "upsert": true,
            "new": true,
            "fields": {"_id": 0, "r": {"mark": "$mongolock", "seen": "$seen"}},
        })
        .await
        .unwrap();
    assert_eq!(
        reply.get_document("value").unwrap(),
        &doc! {"r": {"mark": 1, "seen": "int"}}
    );
    let last = reply.get_document("lastErrorObject").unwrap();
    assert_eq!(last.get_bool("updatedExisting"), Ok(false));
    assert_eq!(last.get_str("upserted"), Ok("r"));
}

/// A foreign document with the resource's `_id` (no mark): the query matches nothing and the
/// upsert's insert meets the `_id` index, E11000, top-level in `findAndModify`. The server
/// does not retry it: the query's equalities (`_id`, mark) are not exactly the index's key.
/// mongod: `src/mongo/db/ops/write_ops_exec.cpp` (`shouldRetryDuplicateKeyException`).
#[tokio::test]
async fn an_upsert_over_a_foreign_document_is_a_duplicate_key() {
    let t = common::target("cf_foreign").await;
    t.coll("c")
        .insert_one(doc! {"_id": "r", "other": true})
        .await
        .unwrap();
    let (code, _) = t
        .error_code(doc! {
            "findAndModify": "c",
            "query": {"_id": "r", MARK: 1},
            "update": [{"$set": {"x": 1}}],
            "upsert": true,
            "new": true,
        })
        .await;
    assert_eq!(code, DUPLICATE_KEY);
    assert_eq!(
        t.coll("c").find_one(doc! {}).await.unwrap(),
        Some(doc! {"_id": "r", "other": true})
    );
}

/// `$expr` is refused in an upsert's query, matched or not (code 224): the library never
/// sends one. mongod: `src/mongo/db/ops/parsed_update.cpp` (`parseQueryToCQ`).
#[tokio::test]
async fn expr_in_an_upsert_query_is_refused() {
    let t = common::target("cf_upsert_expr").await;
    let (code, message) = t
        .error_code(doc! {
            "findAndModify": "c",
            "query": {"_id": "r", "$expr": true},
            "update": [{"$set": {"x": 1}}],
            "upsert": true,
        })
        .await;
    assert_eq!(code, QUERY_FEATURE_NOT_ALLOWED);
    assert_eq!(
        message,
        "$expr is not allowed in the query predicate for an upsert"
    );
}

// ---------------------------------------------------------------------------------------
// Pipeline updates (every lock write)
// ---------------------------------------------------------------------------------------

/// The guard of a single-document write: `$replaceWith: {$cond: [<is ours>, <new>,
/// {$toInt: <text that reads the document>}]}` fails with ConversionFailure (241) only on
/// a foreign document, and writes nothing then; on a lock document the refusal is never
/// evaluated (update pipelines are evaluated lazily, not optimized).
/// mongod: `src/mongo/db/pipeline/expression.cpp` (`ExpressionConvert`, `ExpressionCond`),
/// `src/mongo/db/update/pipeline_executor.cpp`.
#[tokio::test]
async fn the_refusal_fails_only_on_a_foreign_document() {
    let t = common::target("cf_refusal").await;
    let coll = t.coll("c");
    coll.insert_many([doc! {"_id": "ours", MARK: 1}, doc! {"_id": "theirs"}])
        .await
        .unwrap();
    let guarded = |then: Bson| {
        vec![doc! {"$replaceWith": {"$cond": [
            {"$eq": ["$mongolock", 1]},
            then,
            {"$toInt": {"$concat": ["not a lock document; _id is a ", {"$type": "$_id"}]}},
        ]}}]
    };
    let write = |id: &str| {
        doc! {
            "findAndModify": "c",
            "query": {"_id": id},
            "update": guarded(bson!({"$mergeObjects": ["$$ROOT", {"x": 1}]})),
            "new": true,
        }
    };
    let reply = t.db.run_command(write("ours")).await.unwrap();
    assert_eq!(
        reply.get_document("value").unwrap(),
        &doc! {"_id": "ours", MARK: 1, "x": 1}
    );
    let (code, _) = t.error_code(write("theirs")).await;
    assert_eq!(code, CONVERSION_FAILURE);
    assert_eq!(
        coll.find_one(doc! {"_id": "theirs"}).await.unwrap(),
        Some(doc! {"_id": "theirs"})
    );
}

/// `$$NOW` is one value for the whole command: every stage and every document of a
/// multi-document update sees the same time.
/// mongod: `src/mongo/db/pipeline/variables.cpp` (`generateRuntimeConstants`, once per
/// command), `src/mongo/db/ops/write_ops_exec.cpp` (applied to each update of the batch).
#[tokio::test]
async fn now_is_fixed_for_the_whole_command() {
    let t = common::target("cf_now").await;
    let coll = t.coll("c");
    coll.insert_many((0..50).map(|i| doc! {"_id": i}))
        .await
        .unwrap();
    t.db.run_command(doc! {
        "update": "c",
        "updates": [
            {"q": {}, "u": [{"$set": {"a": "$$NOW"}}, {"$set": {"b": "$$NOW"}}], "multi": true},
            {"q": {"_id": 0}, "u": [{"$set": {"c": "$$NOW"}}]},
        ],
    })
    .await
    .unwrap();
    let all: Vec<Document> = coll
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let first = all[0].get_datetime("a").unwrap();
    for d in &all {
        assert_eq!(d.get_datetime("a").unwrap(), first);
        assert_eq!(d.get_datetime("b").unwrap(), first);
    }
    assert_eq!(all[0].get_datetime("c").unwrap(), first);
}

/// A pipeline whose result equals the stored document writes nothing: `nModified` 0, no
/// change event (a refused acquire leaves the document as it is).
/// mongod: `src/mongo/db/update/object_replace_executor.cpp` (a replacement equal to the
/// document is a no-op), `src/mongo/db/update/pipeline_executor.cpp` (no oplog entry for a
/// no-op).
#[tokio::test]
async fn an_unchanged_result_is_a_no_op() {
    let t = common::target("cf_noop").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1, "a": 1}).await.unwrap();
    let mut stream = coll.watch().await.unwrap();
    let result = coll
        .update_one(
            doc! {"_id": 1},
            vec![doc! {"$replaceWith": {"$mergeObjects": ["$$ROOT", {"a": 1}]}}],
        )
        .await
        .unwrap();
    assert_eq!((result.matched_count, result.modified_count), (1, 0));
    coll.insert_one(doc! {"_id": 2}).await.unwrap();
    // The next event is the insert: the no-op logged nothing.
    let event = next_event(&mut stream).await;
    assert_eq!(event.operation_type, OperationType::Insert);
}

/// An unordered batch of statements (the keepalive, the places' refresh): each statement
/// stands alone, `n` counts the matched documents of all, a failing statement is a write
/// error with its index and the others still run.
/// mongod: `src/mongo/db/ops/write_ops_exec.cpp` (`performUpdates`, `handleError`).
#[tokio::test]
async fn an_unordered_batch_reports_each_statement() {
    let t = common::target("cf_batch").await;
    t.coll("c")
        .insert_many([doc! {"_id": 1, "n": 1}, doc! {"_id": 2, "n": 1}])
        .await
        .unwrap();
    let reply =
        t.db.run_command(doc! {
            "update": "c",
            "ordered": false,
            "updates": [
                {"q": {"_id": 1}, "u": [{"$set": {"n": {"$add": ["$n", 1]}}}]},
                {"q": {"_id": 2}, "u": [{"$set": {"_id": 3}}]},
                {"q": {"_id": 2}, "u": [{"$set": {"n": 5}}]},
                {"q": {"_id": 9}, "u": [{"$set": {"n": 5}}]},
            ],
        })
        .await
        .unwrap();
    assert_eq!(reply.get_i32("n"), Ok(2));
    assert_eq!(reply.get_i32("nModified"), Ok(2));
    let errors = reply.get_array("writeErrors").unwrap();
    assert_eq!(errors.len(), 1);
    let error = errors[0].as_document().unwrap();
    assert_eq!(error.get_i32("index"), Ok(1));
    assert_eq!(error.get_i32("code"), Ok(66)); // ImmutableField
}

/// A multi-document update whose query asks for the mark and, in `$expr`, for a condition
/// on `$$NOW` (purge, the group renewal): only the documents that satisfy both change.
/// mongod: `src/mongo/db/matcher/expression_expr.cpp`.
#[tokio::test]
async fn a_multi_update_selects_by_mark_and_expr() {
    let t = common::target("cf_multi").await;
    let past = DateTime::from_millis(0);
    let future = DateTime::from_millis(i64::MAX / 2);
    t.coll("c")
        .insert_many([
            doc! {"_id": 1, MARK: 1, "until": past},
            doc! {"_id": 2, MARK: 1, "until": future},
            doc! {"_id": 3, "until": past},
        ])
        .await
        .unwrap();
    let reply =
        t.db.run_command(doc! {
            "update": "c",
            "updates": [{
                "q": {MARK: 1, "$expr": {"$lt": ["$until", "$$NOW"]}},
                "u": [{"$set": {"expired": true}}],
                "multi": true,
            }],
        })
        .await
        .unwrap();
    assert_eq!(reply.get_i32("n"), Ok(1));
    let expired = t
        .coll("c")
        .find(doc! {"expired": true})
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].get_i32("_id"), Ok(1));
}

// ---------------------------------------------------------------------------------------
// Expressions the commands are built from
// ---------------------------------------------------------------------------------------

/// `MaxKey` sorts after every date (`{$ifNull: [expiresAt, MaxKey]} > $$NOW` is "in force",
/// a missing or null TTL counting as forever).
/// mongod: `src/mongo/bson/bsontypes.cpp` (`canonicalizeBSONType`: MaxKey is last).
#[tokio::test]
async fn max_key_sorts_after_every_date() {
    let t = common::target("cf_maxkey").await;
    let live = bson!({"$gt": [{"$ifNull": ["$e", Bson::MaxKey]}, "$$NOW"]});
    assert_eq!(
        eval_on(&t, doc! {"e": Bson::Null}, live.clone()).await,
        Some(Bson::Boolean(true))
    );
    assert_eq!(
        eval_on(&t, doc! {}, live.clone()).await,
        Some(Bson::Boolean(true))
    );
    assert_eq!(
        eval_on(&t, doc! {"e": DateTime::from_millis(0)}, live).await,
        Some(Bson::Boolean(false))
    );
}

/// `$max`/`$min` pass over null and missing values, and are null with nothing else (the
/// `idleSince` computation); `$max` of an array operand takes its elements.
/// mongod: `src/mongo/db/pipeline/accumulator_min_max.cpp` (nullish values are not
/// processed), `src/mongo/db/pipeline/expression.cpp` (`ExpressionFromAccumulator`: one array
/// operand is its elements).
#[tokio::test]
async fn max_and_min_skip_nulls() {
    let t = common::target("cf_max").await;
    let d = DateTime::from_millis(5);
    assert_eq!(
        eval_on(&t, doc! {"a": d}, bson!({"$max": [null, "$a", "$missing"]})).await,
        Some(Bson::DateTime(d))
    );
    assert_eq!(
        eval_on(&t, doc! {}, bson!({"$max": [[]]})).await,
        Some(Bson::Null)
    );
    assert_eq!(
        eval_on(&t, doc! {"l": [3, null, 7]}, bson!({"$min": "$l"})).await,
        Some(Bson::Int32(3))
    );
}

/// `$add` of a date and a number is a date; `$toLong` of a date is its milliseconds; the
/// product of a long and an int is a long (the fencing token, `expiresAt`).
/// mongod: `src/mongo/db/pipeline/expression.cpp` (`ExpressionAdd`, `ExpressionMultiply`,
/// `ExpressionConvert`'s date-to-long conversion).
#[tokio::test]
async fn date_arithmetic_and_tokens() {
    let t = common::target("cf_dates").await;
    let d = DateTime::from_millis(1_000);
    assert_eq!(
        eval_on(&t, doc! {"d": d}, bson!({"$add": ["$d", 1500]})).await,
        Some(Bson::DateTime(DateTime::from_millis(2_500)))
    );
    assert_eq!(
        eval_on(
            &t,
            doc! {"d": d},
            bson!({"$multiply": [{"$toLong": "$d"}, 1000]})
        )
        .await,
        Some(Bson::Int64(1_000_000))
    );
    // No fence yet: `$add` of missing is null, and `$max` passes over it.
    assert_eq!(
        eval_on(&t, doc! {}, bson!({"$max": [{"$add": ["$fence", 1]}, 7]})).await,
        Some(Bson::Int32(7))
    );
}

/// A field path through an array of entries collects the field of each entry (`"$$s.lockId"`,
/// `"$released.until"`), passing over arrays nested in it.
/// mongod: `src/mongo/db/pipeline/expression.cpp` (`ExpressionFieldPath::evaluatePathArray`).
#[tokio::test]
async fn a_path_through_entries_collects_their_fields() {
    let t = common::target("cf_paths").await;
    assert_eq!(
        eval_on(
            &t,
            doc! {"s": [{"lockId": "a"}, {"lockId": "b"}, {"other": 1}, [{"lockId": "c"}]]},
            bson!({"$let": {"vars": {"s": "$s"}, "in": "$$s.lockId"}}),
        )
        .await,
        Some(bson!(["a", "b"]))
    );
}

/// `$size` of anything but an array fails (17124): the commands wrap optional arrays in
/// `$ifNull: [..., []]`. mongod: `src/mongo/db/pipeline/expression.cpp` (`ExpressionSize`).
#[tokio::test]
async fn size_needs_an_array() {
    let t = common::target("cf_size").await;
    t.coll("c").insert_one(doc! {"_id": 1}).await.unwrap();
    let (code, _) = t
        .error_code(doc! {
            "aggregate": "c",
            "pipeline": [{"$project": {"n": {"$size": "$missing"}}}],
            "cursor": {},
        })
        .await;
    assert_eq!(code, 17124);
    let ok = rows(
        &t,
        vec![doc! {"$project": {"_id": 0, "n": {"$size": {"$ifNull": ["$missing", []]}}}}],
    )
    .await;
    assert_eq!(ok, vec![doc! {"n": 0}]);
}

/// A string that starts with `$` is a path; wrapped in `$literal` it is data (lock ids and
/// owners are sent that way). mongod: `src/mongo/db/pipeline/expression.cpp`
/// (`Expression::parseOperand`, `ExpressionConstant` for `$literal`).
#[tokio::test]
async fn literal_keeps_dollar_strings_as_data() {
    let t = common::target("cf_literal").await;
    assert_eq!(
        eval_on(&t, doc! {"x": 5}, bson!({"$literal": "$x"})).await,
        Some(Bson::from("$x"))
    );
    assert_eq!(
        eval_on(&t, doc! {"x": 5}, bson!("$x")).await,
        Some(Bson::Int32(5))
    );
}

// ---------------------------------------------------------------------------------------
// Errors and limits the library classifies
// ---------------------------------------------------------------------------------------

/// A command blocked past its `maxTimeMS` fails with MaxTimeMSExpired (50) and does not run
/// (the library treats 50 as a time limit that may have applied a write).
/// mongod: `src/mongo/db/service_entry_point_common.cpp` (`_initiateCommand`).
#[tokio::test]
async fn max_time_ms_expired_is_code_50() {
    let t = common::target("cf_50").await;
    t.coll("c").insert_one(doc! {"_id": 1}).await.unwrap();
    let admin = t.client.database("admin");
    admin
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {"failCommands": ["update"], "blockConnection": true, "blockTimeMS": 200},
        })
        .await
        .unwrap();
    let (code, _) = t
        .error_code(doc! {
            "update": "c",
            "updates": [{"q": {"_id": 1}, "u": {"$set": {"x": 1}}}],
            "maxTimeMS": 20,
        })
        .await;
    admin.run_command(common::fail_command_off()).await.unwrap();
    assert_eq!(code, MAX_TIME_MS_EXPIRED);
    assert_eq!(
        t.coll("c").find_one(doc! {}).await.unwrap(),
        Some(doc! {"_id": 1})
    );
}

/// `failCommand` with `errorCode` fails the command with that code, top-level (the library's
/// transient codes, such as ShutdownInProgress, 91), without a `RetryableWriteError` label
/// on a command sent without a transaction number; `writeConcernError` is reported beside a
/// successful write. mongod: `src/mongo/db/commands.cpp` (`evaluateFailCommandFailPoint`),
/// `src/mongo/db/error_labels.cpp`.
#[tokio::test]
async fn fail_command_errors_and_write_concern_errors() {
    let t = common::target("cf_failcommand").await;
    let admin = t.client.database("admin");
    admin
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {"failCommands": ["findAndModify"], "errorCode": SHUTDOWN_IN_PROGRESS},
        })
        .await
        .unwrap();
    let command = doc! {
        "findAndModify": "c",
        "query": {"_id": 1},
        "update": {"$set": {"x": 1}},
        "upsert": true,
    };
    match t.db.run_command(command.clone()).await {
        Err(error) => {
            assert_eq!(common::command_error(&error).0, SHUTDOWN_IN_PROGRESS);
            assert!(!error.contains_label("RetryableWriteError"));
        }
        Ok(reply) => panic!("{reply}"),
    }
    admin
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {"failCommands": ["findAndModify"], "writeConcernError": {"code": 64, "errmsg": "waiting for replication timed out"}},
        })
        .await
        .unwrap();
    let reply = t.db.run_command(command).await.unwrap();
    assert_eq!(
        reply
            .get_document("writeConcernError")
            .unwrap()
            .get_i32("code"),
        Ok(64)
    );
    assert_eq!(
        t.coll("c").find_one(doc! {}).await.unwrap(),
        Some(doc! {"_id": 1, "x": 1})
    );
}

/// Every command carries `{w: "majority", j: true, wtimeout}`, `readConcern: majority`
/// (reads), the simple collation and `maxTimeMS`: all accepted on a replica set.
/// mongod: `src/mongo/db/write_concern_options.cpp`, `src/mongo/db/repl/read_concern_args.cpp`,
/// `src/mongo/db/query/collation/collator_factory_icu.cpp` (`locale: "simple"`).
#[tokio::test]
async fn the_pinned_options_are_accepted() {
    let t = common::target("cf_options").await;
    t.db.run_command(doc! {
        "findAndModify": "c",
        "query": {"_id": 1},
        "update": [{"$set": {"x": 1}}],
        "upsert": true,
        "collation": {"locale": "simple"},
        "writeConcern": {"w": "majority", "j": true, "wtimeout": 2500},
        "maxTimeMS": 2500,
    })
    .await
    .unwrap();
    let reply =
        t.db.run_command(doc! {
            "aggregate": "c",
            "pipeline": [{"$match": {"_id": 1}}],
            "cursor": {},
            "collation": {"locale": "simple"},
            "readConcern": {"level": "majority"},
            "maxTimeMS": 2500,
        })
        .await
        .unwrap();
    let batch = reply
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap();
    assert_eq!(batch.len(), 1);
}

// ---------------------------------------------------------------------------------------
// Indexes and expiry
// ---------------------------------------------------------------------------------------

/// The library's index specifications (simple collation, a TTL index on `idleSince`) are
/// accepted, and sending them again is a no-op.
/// mongod: `src/mongo/db/commands/create_indexes_cmd.cpp`.
#[tokio::test]
async fn the_indexes_are_created_once() {
    let t = common::target("cf_indexes").await;
    let command = doc! {
        "createIndexes": "c",
        "indexes": [
            {"key": {"exclusive.lockId": 1}, "name": "exclusive.lockId_1", "collation": {"locale": "simple"}},
            {"key": {"idleSince": 1}, "name": "idleSince_ttl", "expireAfterSeconds": 86_400},
        ],
    };
    let first = t.db.run_command(command.clone()).await.unwrap();
    assert_eq!(first.get_i32("numIndexesAfter"), Ok(3));
    let again = t.db.run_command(command).await.unwrap();
    assert_eq!(
        (
            again.get_i32("numIndexesBefore"),
            again.get_i32("numIndexesAfter")
        ),
        (Ok(3), Ok(3))
    );
}

/// The TTL monitor deletes a document once its indexed date plus `expireAfterSeconds` has
/// passed, and never one whose field is null (a lock without TTL).
/// mongod: `src/mongo/db/ttl.cpp`.
#[tokio::test]
async fn ttl_deletes_expired_dates_only() {
    let server = mongolock_testkit::TestServer::builder()
        .ttl_monitor_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let coll = server.client().database("d").collection::<Document>("c");
    server
        .client()
        .database("d")
        .run_command(doc! {
            "createIndexes": "c",
            "indexes": [{"key": {"idleSince": 1}, "name": "idleSince_ttl", "expireAfterSeconds": 10}],
        })
        .await
        .unwrap();
    let now = server.clock().now().timestamp_millis();
    coll.insert_many([
        doc! {"_id": "old", "idleSince": DateTime::from_millis(now - 60_000)},
        doc! {"_id": "recent", "idleSince": DateTime::from_millis(now)},
        doc! {"_id": "held", "idleSince": Bson::Null},
    ])
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while coll.count_documents(doc! {"_id": "old"}).await.unwrap() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "not deleted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left: Vec<Document> = coll
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(left.len(), 2);
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Change streams (wake-ups)
// ---------------------------------------------------------------------------------------

/// The wake-up stream's filter: an `update` passes when `updateDescription.updatedFields.wake`
/// names the keeper; a `replace` (a small pipeline update is logged whole) and a `delete`
/// pass whatever they hold. A pipeline update of a large document is an `update` with the
/// changed field in `updatedFields`; of a small one, a `replace` with the full document.
/// mongod: `src/mongo/db/update/pipeline_executor.cpp`,
/// `src/mongo/db/update/document_diff_calculator.cpp`,
/// `src/mongo/db/pipeline/change_stream_document_diff_parser.cpp`,
/// `src/mongo/db/pipeline/document_source_change_stream.cpp` (a user `$match` after the
/// event is built).
#[tokio::test]
async fn the_wake_filter_sees_updates_replaces_and_deletes() {
    let t = common::target("cf_wake").await;
    let coll = t.coll("c");
    let pad = "p".repeat(300);
    coll.insert_many([doc! {"_id": "big", "pad": &pad}, doc! {"_id": "small"}])
        .await
        .unwrap();
    let mut stream = coll
        .watch()
        .pipeline([doc! {"$match": {"$or": [
            {"operationType": {"$in": ["replace", "delete"]}},
            {"operationType": "update", "updateDescription.updatedFields.wake": {"$regex": "^k1 "}},
        ]}}])
        .await
        .unwrap();
    let set_wake = |keeper: &str| vec![doc! {"$set": {"wake": format!("{keeper} 0001")}}];
    coll.update_one(doc! {"_id": "big"}, set_wake("k2"))
        .await
        .unwrap();
    coll.update_one(doc! {"_id": "big"}, set_wake("k1"))
        .await
        .unwrap();
    coll.update_one(doc! {"_id": "small"}, set_wake("k2"))
        .await
        .unwrap();
    coll.delete_one(doc! {"_id": "big"}).await.unwrap();

    let woken = next_event(&mut stream).await;
    assert_eq!(woken.operation_type, OperationType::Update);
    assert_eq!(
        woken.update_description.unwrap().updated_fields,
        doc! {"wake": "k1 0001"}
    );
    let replaced = next_event(&mut stream).await;
    assert_eq!(replaced.operation_type, OperationType::Replace);
    assert_eq!(
        replaced.full_document,
        Some(doc! {"_id": "small", "wake": "k2 0001"})
    );
    let deleted = next_event(&mut stream).await;
    assert_eq!(deleted.operation_type, OperationType::Delete);
    assert_eq!(deleted.document_key, Some(doc! {"_id": "big"}));
}

/// The status read: `$match`, `$project` with a `$cond` choosing an array, `$unwind`,
/// `$replaceWith` and a second `$match`, with the server computing remaining time from
/// `$$NOW`. mongod: `src/mongo/db/pipeline/document_source_unwind.cpp`,
/// `src/mongo/db/pipeline/document_source_replace_root.cpp`.
#[tokio::test]
async fn the_status_pipeline_shape_runs() {
    let t = common::target("cf_status").await;
    t.coll("c")
        .insert_many([
            doc! {"_id": "r", MARK: 1, "exclusive": Bson::Null, "shared": [{"lockId": "a"}, {"lockId": "b"}]},
            doc! {"_id": "x"},
        ])
        .await
        .unwrap();
    let out = rows(
        &t,
        vec![
            doc! {"$match": {"_id": {"$in": ["r", "x"]}}},
            doc! {"$project": {"_id": 0, "resource": "$_id", "entries": {"$cond": [
                {"$eq": ["$mongolock", 1]},
                {"$concatArrays": [
                    {"$cond": [{"$eq": [{"$type": "$exclusive"}, "object"]}, ["$exclusive"], []]},
                    {"$cond": [{"$isArray": "$shared"}, "$shared", []]},
                ]},
                [{"kind": "not a lock document"}],
            ]}}},
            doc! {"$unwind": "$entries"},
            doc! {"$replaceWith": {"$mergeObjects": ["$entries", {"resource": "$resource"}]}},
            doc! {"$match": {"$or": [{"kind": "not a lock document"}, {"lockId": {"$in": ["b"]}}]}},
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            doc! {"lockId": "b", "resource": "r"},
            doc! {"kind": "not a lock document", "resource": "x"},
        ]
    );
}
