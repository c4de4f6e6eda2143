//! `configureFailPoint` with `failCommand` and `onPrimaryTransactionalWrite`, as mongod runs
//! them with test commands enabled.

mod common;

use bson::doc;

#[tokio::test]
async fn fail_command_times_fails_the_next_commands_with_a_code() {
    let t = common::target("fp_times").await;
    let coll = t.coll("c");
    let admin = t.client.database("admin");
    admin
        .run_command(
            doc! {"configureFailPoint": "failCommand", "mode": {"times": 2},
            "data": {"failCommands": ["find"], "errorCode": 2, "errorLabels": []}},
        )
        .await
        .unwrap();
    for _ in 0..2 {
        let err = coll.find_one(doc! {}).await.unwrap_err();
        let (code, message) = common::command_error(&err);
        assert_eq!(code, 2);
        assert_eq!(message, "Failing command via 'failCommand' failpoint");
    }
    assert_eq!(
        coll.find_one(doc! {}).await.unwrap(),
        None,
        "third find runs"
    );
    admin.run_command(common::fail_command_off()).await.unwrap();
}

#[tokio::test]
async fn close_connection_means_the_write_did_not_happen_and_the_driver_retries() {
    let t = common::target("fp_close").await;
    let coll = t.coll("c");
    let admin = t.client.database("admin");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    admin
        .run_command(
            doc! {"configureFailPoint": "failCommand", "mode": {"times": 1},
            "data": {"failCommands": ["insert"], "closeConnection": true}},
        )
        .await
        .unwrap();
    // The retryable insert fails on the network, the driver retries once, and it lands once.
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 2);
}

#[tokio::test]
async fn retryable_error_codes_are_labelled_and_retried() {
    let t = common::target("fp_label").await;
    let coll = t.coll("c");
    let admin = t.client.database("admin");
    admin
        .run_command(
            doc! {"configureFailPoint": "failCommand", "mode": {"times": 1},
            "data": {"failCommands": ["update"], "errorCode": 91}},
        )
        .await
        .unwrap();
    // 91 (ShutdownInProgress) is retryable: the server labels it and the driver retries.
    let result = coll
        .update_one(doc! {"_id": 1}, doc! {"$set": {"a": 1}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(result.upserted_id, Some(bson::Bson::Int32(1)));
}

#[tokio::test]
async fn write_concern_error_is_reported_after_the_write_commits() {
    let t = common::target("fp_wce").await;
    let coll = t.coll("c");
    let admin = t.client.database("admin");
    admin
        .run_command(doc! {"configureFailPoint": "failCommand", "mode": {"times": 1},
            "data": {"failCommands": ["insert"], "writeConcernError": {"code": 64, "errmsg": "waiting for replication timed out"}}})
        .await
        .unwrap();
    let err = coll.insert_one(doc! {"_id": 1}).await.unwrap_err();
    assert!(
        matches!(err.kind.as_ref(), mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteConcernError(e)) if e.code == 64),
        "{err:?}"
    );
    assert_eq!(
        coll.count_documents(doc! {}).await.unwrap(),
        1,
        "the write happened"
    );
}

#[tokio::test]
async fn app_name_limits_the_fail_point_to_one_client() {
    let t = common::target("fp_app").await;
    let admin = t.client.database("admin");
    admin
        .run_command(
            doc! {"configureFailPoint": "failCommand", "mode": "alwaysOn",
            "data": {"failCommands": ["ping"], "errorCode": 8, "appName": "victim"}},
        )
        .await
        .unwrap();
    t.db.run_command(doc! {"ping": 1}).await.unwrap();
    let uri = match &t.server {
        Some(server) => server.uri(),
        None => std::env::var("MONGODB_URI").unwrap(),
    };
    let mut options = mongodb::options::ClientOptions::parse(&uri).await.unwrap();
    options.app_name = Some("victim".into());
    let victim = mongodb::Client::with_options(options).unwrap();
    let err = victim
        .database("x")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 8);
    admin.run_command(common::fail_command_off()).await.unwrap();
    victim
        .database("x")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap();
}

#[tokio::test]
async fn on_primary_transactional_write_applies_then_closes() {
    let t = common::target("fp_optw").await;
    let coll = t.coll("c");
    let admin = t.client.database("admin");
    coll.insert_one(doc! {"_id": 1, "n": 0}).await.unwrap();
    admin
        .run_command(
            doc! {"configureFailPoint": "onPrimaryTransactionalWrite", "mode": {"times": 1},
            "data": {"closeConnection": true}},
        )
        .await
        .unwrap();
    // The first attempt applies and the connection drops; the driver's retry (same lsid and
    // txnNumber) gets the stored reply, so the increment happens exactly once.
    let after = coll
        .find_one_and_update(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .return_document(mongodb::options::ReturnDocument::After)
        .await
        .unwrap();
    assert_eq!(after, Some(doc! {"_id": 1, "n": 1}));
    assert_eq!(
        coll.find_one(doc! {}).await.unwrap().unwrap().get_i32("n"),
        Ok(1)
    );
}

#[tokio::test]
async fn bad_fail_point_configuration_is_an_error() {
    let t = common::target("fp_bad").await;
    let admin = t.client.database("admin");
    let err = admin
        .run_command(doc! {"configureFailPoint": "noSuchPoint", "mode": "alwaysOn"})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 266);
    let err = admin
        .run_command(doc! {"configureFailPoint": "failCommand"})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 20, "mode is required");
}

#[tokio::test]
async fn fail_before_commit_applies_nothing_and_the_retry_applies_once() {
    let t = common::target("fp_fbc").await;
    let coll = t.coll("c");
    let admin = t.client.database("admin");
    coll.insert_one(doc! {"_id": 1, "n": 0}).await.unwrap();
    admin
        .run_command(
            doc! {"configureFailPoint": "onPrimaryTransactionalWrite", "mode": {"times": 1},
            "data": {"failBeforeCommitExceptionCode": 1}},
        )
        .await
        .unwrap();
    // The first attempt is dropped before commit and the connection closes; the retry runs.
    coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .await
        .unwrap();
    assert_eq!(
        coll.find_one(doc! {}).await.unwrap().unwrap().get_i32("n"),
        Ok(1)
    );
}

#[tokio::test]
async fn fail_before_commit_without_closing_replies_with_the_code() {
    let t = common::target("fp_fbc_code").await;
    let coll = t.coll("c");
    let admin = t.client.database("admin");
    coll.insert_one(doc! {"_id": 0}).await.unwrap();
    admin
        .run_command(
            doc! {"configureFailPoint": "onPrimaryTransactionalWrite", "mode": {"times": 1},
            "data": {"closeConnection": false, "failBeforeCommitExceptionCode": 1}},
        )
        .await
        .unwrap();
    // Code 1 (InternalError) is not retryable: the client sees it and nothing was written.
    let err = coll.insert_one(doc! {"_id": 1}).await.unwrap_err();
    assert_eq!(common::command_error(&err).0, 1);
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);
}

/// Opens a change stream with a raw `aggregate`; returns its cursor id.
async fn raw_stream(t: &common::Target, coll: &str) -> i64 {
    let reply = t
        .db
        .run_command(doc! {"aggregate": coll, "pipeline": [{"$changeStream": {}}], "cursor": {}})
        .await
        .unwrap();
    reply.get_document("cursor").unwrap().get_i64("id").unwrap()
}

#[tokio::test]
async fn get_more_failing_after_checkout_is_labelled_resumable() {
    let t = common::target("fp_gmac").await;
    t.coll("c").insert_one(doc! {"_id": 0}).await.unwrap();
    let id = raw_stream(&t, "c").await;
    let admin = t.client.database("admin");
    admin
        .run_command(
            doc! {"configureFailPoint": "failGetMoreAfterCursorCheckout", "mode": {"times": 1},
            "data": {"errorCode": 6}},
        )
        .await
        .unwrap();
    let err =
        t.db.run_command(doc! {"getMore": id, "collection": "c", "maxTimeMS": 10})
            .await
            .unwrap_err();
    assert_eq!(common::command_error(&err).0, 6);
    assert!(err.contains_label("ResumableChangeStreamError"), "{err:?}");
}

#[tokio::test]
async fn fail_command_on_get_more_is_not_labelled_resumable() {
    let t = common::target("fp_gm_fc").await;
    t.coll("c").insert_one(doc! {"_id": 0}).await.unwrap();
    let id = raw_stream(&t, "c").await;
    let admin = t.client.database("admin");
    admin
        .run_command(
            doc! {"configureFailPoint": "failCommand", "mode": {"times": 1},
            "data": {"failCommands": ["getMore"], "errorCode": 6}},
        )
        .await
        .unwrap();
    // failCommand fails the command before the cursor is checked out: no change-stream label.
    let err =
        t.db.run_command(doc! {"getMore": id, "collection": "c", "maxTimeMS": 10})
            .await
            .unwrap_err();
    assert_eq!(common::command_error(&err).0, 6);
    assert!(!err.contains_label("ResumableChangeStreamError"), "{err:?}");
    admin.run_command(common::fail_command_off()).await.unwrap();
}

#[tokio::test]
async fn skip_mode_lets_the_first_commands_through() {
    let t = common::target("fp_skip").await;
    let admin = t.client.database("admin");
    admin
        .run_command(
            doc! {"configureFailPoint": "failCommand", "mode": {"skip": 2},
            "data": {"failCommands": ["count"], "errorCode": 2}},
        )
        .await
        .unwrap();
    let count = doc! {"count": "c"};
    t.db.run_command(count.clone()).await.unwrap();
    t.db.run_command(count.clone()).await.unwrap();
    for _ in 0..2 {
        let err = t.db.run_command(count.clone()).await.unwrap_err();
        assert_eq!(
            common::command_error(&err).0,
            2,
            "after the skipped ones it is always on"
        );
    }
    admin.run_command(common::fail_command_off()).await.unwrap();
    t.db.run_command(count).await.unwrap();
}

#[tokio::test]
async fn activation_probability_zero_never_fires_and_one_always_fires() {
    let t = common::target("fp_probability").await;
    let admin = t.client.database("admin");
    let count = doc! {"count": "c"};
    admin
        .run_command(
            doc! {"configureFailPoint": "failCommand", "mode": {"activationProbability": 0.0},
            "data": {"failCommands": ["count"], "errorCode": 2}},
        )
        .await
        .unwrap();
    for _ in 0..20 {
        t.db.run_command(count.clone()).await.unwrap();
    }
    admin
        .run_command(
            doc! {"configureFailPoint": "failCommand", "mode": {"activationProbability": 1.0},
            "data": {"failCommands": ["count"], "errorCode": 2}},
        )
        .await
        .unwrap();
    for _ in 0..20 {
        assert_eq!(
            common::command_error(&t.db.run_command(count.clone()).await.unwrap_err()).0,
            2
        );
    }
    let err = admin
        .run_command(
            doc! {"configureFailPoint": "failCommand", "mode": {"activationProbability": 1.5},
            "data": {"failCommands": ["count"], "errorCode": 2}},
        )
        .await
        .unwrap_err();
    assert_eq!(
        common::command_error(&err).0,
        2,
        "a probability above 1 is BadValue"
    );
    admin.run_command(common::fail_command_off()).await.unwrap();
}

#[tokio::test]
async fn block_connection_delays_the_reply_and_then_runs_the_command() {
    let t = common::target("fp_block").await;
    let admin = t.client.database("admin");
    admin
        .run_command(
            doc! {"configureFailPoint": "failCommand", "mode": {"times": 1},
            "data": {"failCommands": ["insert"], "blockConnection": true, "blockTimeMS": 300}},
        )
        .await
        .unwrap();
    let started = std::time::Instant::now();
    t.coll("c").insert_one(doc! {"_id": 1}).await.unwrap();
    // A lower bound only: the command waited at least as long as the fail point blocks.
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    assert_eq!(
        t.coll("c").count_documents(doc! {}).await.unwrap(),
        1,
        "then it ran"
    );
}

#[tokio::test]
async fn error_labels_replace_the_servers_own_and_namespace_filters() {
    let t = common::target("fp_labels_ns").await;
    let admin = t.client.database("admin");
    let ns = format!("{}.target", t.db.name());
    admin
        .run_command(doc! {"configureFailPoint": "failCommand", "mode": "alwaysOn",
            "data": {"failCommands": ["find"], "errorCode": 8, "errorLabels": ["MyLabel"], "namespace": ns}})
        .await
        .unwrap();
    assert_eq!(
        t.coll("other").find_one(doc! {}).await.unwrap(),
        None,
        "other namespaces run"
    );
    let err = t.coll("target").find_one(doc! {}).await.unwrap_err();
    assert_eq!(common::command_error(&err).0, 8);
    assert!(err.contains_label("MyLabel"), "{err:?}");
    admin.run_command(common::fail_command_off()).await.unwrap();
}
