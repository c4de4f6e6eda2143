//! Retryable writes: the same `lsid` and `txnNumber` never apply a write twice.

mod common;

use bson::{Binary, Bson, doc, spec::BinarySubtype};

fn lsid() -> bson::Document {
    let uuid = bson::Uuid::new();
    doc! {"id": Binary { subtype: BinarySubtype::Uuid, bytes: uuid.bytes().to_vec() }}
}

#[tokio::test]
async fn a_retried_write_returns_the_stored_reply_without_applying_again() {
    let t = common::target("retry_replay").await;
    t.coll("c")
        .insert_one(doc! {"_id": 1, "n": 0})
        .await
        .unwrap();
    // An explicit session gives the commands its lsid; the txnNumber is ours to choose.
    let mut session = t.client.start_session().await.unwrap();
    let cmd = doc! {
        "findAndModify": "c", "query": {"_id": 1}, "update": {"$inc": {"n": 1}}, "new": true,
        "txnNumber": 1_i64,
    };
    let first =
        t.db.run_command(cmd.clone())
            .session(&mut session)
            .await
            .unwrap();
    let retried = t.db.run_command(cmd).session(&mut session).await.unwrap();
    assert_eq!(
        first.get_document("value").unwrap(),
        &doc! {"_id": 1, "n": 1}
    );
    assert_eq!(
        retried.get_document("value").unwrap(),
        &doc! {"_id": 1, "n": 1}
    );
    // A replayed findAndModify names its one statement in `retriedStmtId`
    // (`src/mongo/db/commands/find_and_modify.cpp`: `setRetriedStmtId(stmtId)`).
    assert_eq!(retried.get_i32("retriedStmtId"), Ok(0), "{retried}");
    assert!(!retried.contains_key("retriedStmtIds"), "{retried}");
    assert_eq!(
        t.coll("c")
            .find_one(doc! {})
            .await
            .unwrap()
            .unwrap()
            .get_i32("n"),
        Ok(1)
    );
    let increment = |txn: i64| {
        doc! {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}], "txnNumber": txn}
    };
    let next =
        t.db.run_command(increment(2))
            .session(&mut session)
            .await
            .unwrap();
    assert_eq!(next.get_i32("nModified"), Ok(1));
    let err =
        t.db.run_command(increment(1))
            .session(&mut session)
            .await
            .unwrap_err();
    assert_eq!(
        common::command_error(&err).0,
        225,
        "an older txnNumber is TransactionTooOld"
    );
    assert_eq!(
        t.coll("c")
            .find_one(doc! {})
            .await
            .unwrap()
            .unwrap()
            .get_i32("n"),
        Ok(2)
    );
}

#[tokio::test]
async fn duplicate_command_fields_are_refused() {
    let t = common::target("dup_fields").await;
    // The driver adds its own lsid to run_command, so an lsid in the body is a duplicate.
    let (code, message) = t
        .error_code(
            doc! {"insert": "c", "documents": [{"a": 1}], "lsid": lsid(), "txnNumber": 1_i64},
        )
        .await;
    assert_eq!(code, 40413, "{message}");
    assert!(message.contains("lsid' is a duplicate field"), "{message}");
    assert_eq!(t.coll("c").count_documents(doc! {}).await.unwrap(), 0);
}

#[tokio::test]
async fn emulator_only_standalone_refuses_txn_numbers() {
    let server = mongolock_testkit::TestServer::builder()
        .standalone(true)
        .start()
        .await
        .unwrap();
    let db = server.client().database("d");
    let err = db
        .run_command(doc! {"insert": "c", "documents": [{"a": 1}], "txnNumber": 1_i64})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 20);
    // The driver still works against a standalone (no retryable writes).
    db.collection::<bson::Document>("c")
        .insert_one(doc! {"a": Bson::Int32(1)})
        .await
        .unwrap();
}
