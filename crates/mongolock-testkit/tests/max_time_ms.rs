//! `maxTimeMS`: a deadline for the whole command, counted from when it arrived.
//!
//! mongod's source:
//! - `src/mongo/db/service_entry_point_common.cpp`, `ExecCommandDatabase::_initiateCommand`:
//!   the start time is taken first ("so that maxTimeMS ... considers the time spent before
//!   the deadline is set"), then `failCommand` is evaluated (its `blockConnection` sleeps with
//!   no deadline set yet, so it is never cut short, and its `errorCode` is raised right
//!   after), then the deadline is set to that start plus `maxTimeMS` (not for `getMore`) and
//!   checked before the command runs. A command blocked for at least its `maxTimeMS` thus
//!   fails with MaxTimeMSExpired (50) once the block ends, without running.
//! - `src/mongo/db/query/max_time_ms_parser.cpp`: the value must be a number, an integer,
//!   in `[0, 2147483647]` (BadValue otherwise); 0 means no limit.
//! - While it runs, the operation is interrupted at its deadline (its plan executors check
//!   for interruption as they go); `src/mongo/db/ops/write_ops_exec.cpp` (`handleError`)
//!   rethrows an interruption, so it fails the whole write command, not one statement, and
//!   what the statements before it wrote stays written (each document is written in its own
//!   unit of work).

mod common;

use std::time::{Duration, Instant};

use bson::{Document, doc};

const MAX_TIME_MS_EXPIRED: i32 = 50;
const BAD_VALUE: i32 = 2;

fn block(command: &str, ms: i32) -> Document {
    doc! {
        "configureFailPoint": "failCommand",
        "mode": {"times": 1},
        "data": {"failCommands": [command], "blockConnection": true, "blockTimeMS": ms},
    }
}

fn claim(max_time_ms: i32) -> Document {
    doc! {
        "findAndModify": "c",
        "query": {"_id": 1},
        "update": {"$set": {"claimed": true}},
        "new": true,
        "maxTimeMS": max_time_ms,
    }
}

#[tokio::test]
async fn a_command_blocked_past_its_max_time_fails_after_the_block_without_running() {
    let t = common::target("mt_blocked").await;
    let coll = t.coll("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let admin = t.client.database("admin");
    admin
        .run_command(block("findAndModify", 400))
        .await
        .unwrap();
    let started = Instant::now();
    let (code, message) = t.error_code(claim(100)).await;
    let took = started.elapsed();
    admin.run_command(common::fail_command_off()).await.unwrap();
    assert_eq!(code, MAX_TIME_MS_EXPIRED, "{message}");
    assert_eq!(message, "operation exceeded time limit");
    // The block is not cut short by the deadline.
    assert!(took >= Duration::from_millis(380), "{took:?}");
    // The write did not happen.
    assert_eq!(coll.find_one(doc! {}).await.unwrap(), Some(doc! {"_id": 1}));
}

#[tokio::test]
async fn a_shorter_block_leaves_the_rest_of_the_time_to_the_command() {
    let t = common::target("mt_short").await;
    t.coll("c").insert_one(doc! {"_id": 1}).await.unwrap();
    let admin = t.client.database("admin");
    admin.run_command(block("findAndModify", 50)).await.unwrap();
    let reply = t.db.run_command(claim(5_000)).await.unwrap();
    admin.run_command(common::fail_command_off()).await.unwrap();
    assert_eq!(
        reply.get_document("value").unwrap(),
        &doc! {"_id": 1, "claimed": true}
    );
}

#[tokio::test]
async fn the_fail_points_error_comes_before_the_deadline() {
    let t = common::target("mt_error").await;
    t.coll("c").insert_one(doc! {"_id": 1}).await.unwrap();
    let admin = t.client.database("admin");
    admin
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {
                "failCommands": ["findAndModify"], "blockConnection": true, "blockTimeMS": 200,
                "errorCode": 91,
            },
        })
        .await
        .unwrap();
    let (code, _) = t.error_code(claim(50)).await;
    admin.run_command(common::fail_command_off()).await.unwrap();
    assert_eq!(code, 91);
}

#[tokio::test]
async fn every_command_the_library_sends_is_held_to_it() {
    let t = common::target("mt_all").await;
    t.coll("c").insert_one(doc! {"_id": 1}).await.unwrap();
    let admin = t.client.database("admin");
    let commands = [
        (
            "insert",
            doc! {"insert": "c", "documents": [{"_id": 2}], "maxTimeMS": 50},
        ),
        (
            "update",
            doc! {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"a": 1}}}], "maxTimeMS": 50},
        ),
        (
            "delete",
            doc! {"delete": "c", "deletes": [{"q": {"_id": 1}, "limit": 1}], "maxTimeMS": 50},
        ),
        ("find", doc! {"find": "c", "maxTimeMS": 50}),
        (
            "aggregate",
            doc! {"aggregate": "c", "pipeline": [], "cursor": {}, "maxTimeMS": 50},
        ),
    ];
    for (name, command) in commands {
        admin.run_command(block(name, 150)).await.unwrap();
        let (code, _) = t.error_code(command).await;
        assert_eq!(code, MAX_TIME_MS_EXPIRED, "{name}");
    }
    admin.run_command(common::fail_command_off()).await.unwrap();
    // None of the writes happened.
    assert_eq!(
        t.coll("c").find_one(doc! {}).await.unwrap(),
        Some(doc! {"_id": 1})
    );
}

/// Documents the long-running statements work through.
async fn fill(coll: &mongodb::Collection<Document>, n: i32) {
    let docs: Vec<Document> = (0..n)
        .map(|i| doc! {"_id": i, "values": (0..40).map(|v| v + i).collect::<Vec<i32>>()})
        .collect();
    coll.insert_many(docs).await.unwrap();
}

/// A pipeline update that does real work for every document.
fn heavy_update() -> Vec<Document> {
    vec![doc! {"$set": {
        "squares": {"$map": {"input": "$values", "in": {"$multiply": ["$$this", "$$this"]}}},
        "touched": true,
    }}]
}

#[tokio::test]
async fn a_write_running_past_its_time_fails_whole_and_keeps_what_it_wrote() {
    let t = common::target("mt_running").await;
    let coll = t.coll("c");
    const DOCS: i32 = 20_000;
    fill(&coll, DOCS).await;
    coll.insert_one(doc! {"_id": "first"}).await.unwrap();
    let error =
        t.db.run_command(doc! {
            "update": "c",
            "updates": [
                {"q": {"_id": "first"}, "u": {"$set": {"done": true}}},
                {"q": {}, "u": heavy_update(), "multi": true},
                {"q": {"_id": "first"}, "u": {"$set": {"after": true}}},
            ],
            "maxTimeMS": 200,
        })
        .await
        .unwrap_err();
    // The whole command failed, not its second statement.
    assert_eq!(common::command_error(&error).0, MAX_TIME_MS_EXPIRED);
    // The first statement's write stays; the third never ran.
    assert_eq!(
        coll.find_one(doc! {"_id": "first"}).await.unwrap(),
        Some(doc! {"_id": "first", "done": true})
    );
    // The second stopped part way: the documents it wrote stay written.
    let touched = coll.count_documents(doc! {"touched": true}).await.unwrap();
    assert!(touched < DOCS as u64, "{touched}");
}

#[tokio::test]
async fn a_read_running_past_its_time_fails() {
    let t = common::target("mt_read").await;
    let coll = t.coll("c");
    fill(&coll, 20_000).await;
    let (code, _) = t
        .error_code(doc! {
            "aggregate": "c",
            "pipeline": [
                {"$set": {"squares": {"$map": {"input": "$values", "in": {"$multiply": ["$$this", "$$this"]}}}}},
                {"$group": {"_id": null, "n": {"$sum": {"$sum": "$squares"}}}},
            ],
            "cursor": {},
            "maxTimeMS": 20,
        })
        .await;
    assert_eq!(code, MAX_TIME_MS_EXPIRED);
}

#[tokio::test]
async fn the_value_is_checked() {
    let t = common::target("mt_value").await;
    for (value, message) in [
        (
            bson::Bson::from("x"),
            "maxTimeMS must be a number".to_string(),
        ),
        (
            bson::Bson::Int32(-1),
            "-1 value for maxTimeMS is out of range [0, 2147483647]".to_string(),
        ),
        (
            bson::Bson::Double(1.5),
            "maxTimeMS has non-integral value".to_string(),
        ),
    ] {
        let (code, got) = t
            .error_code(doc! {"find": "c", "maxTimeMS": value.clone()})
            .await;
        assert_eq!((code, got), (BAD_VALUE, message), "{value}");
    }
    // 0 is no limit.
    t.db.run_command(doc! {"find": "c", "maxTimeMS": 0})
        .await
        .unwrap();
}
