//! A failed call says whether the server may have applied it, and repeating it with the same
//! lock id (and nonce) resolves the doubt instead of guessing. Fail points make the server
//! misbehave on cue; they need the emulator (or a mongod with test commands enabled). Each
//! test shows, from the commands sent or the error seen, that its fail point really fired.

mod common;

use std::time::Duration;

use bson::{Document, doc};
use common::{Env, emulator_env};
use mongolock::{AcquireRequest, Attempt, ErrorKind, Filter, LockClient, LockDetails};

async fn fail_point(env: &Env, command: Document) {
    env.db
        .client()
        .database("admin")
        .run_command(command)
        .await
        .expect("configureFailPoint");
}

fn fail_find_and_modify(times: i32, data: Document) -> Document {
    let mut data = data;
    data.insert("failCommands", vec!["findAndModify"]);
    doc! { "configureFailPoint": "failCommand", "mode": { "times": times }, "data": data }
}

#[tokio::test]
async fn emulator_only_a_write_concern_error_is_withdrawn_and_asking_again_is_granted_anew() {
    let Some(env) = emulator_env("ambiguous_wce").await else {
        return;
    };
    let (monitor, db) = env.monitored().await;
    let locks = LockClient::new(db.collection("locks"));
    // Once: an attempt whose outcome is unknown is not repeated by the library (a copy of it
    // could land after the repeat was answered), so the error reaches the caller.
    let wce =
        doc! { "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" } };
    fail_point(&env, fail_find_and_modify(1, wce)).await;
    let error = locks
        .xlock("r", "job", LockDetails::default())
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::Database { code: Some(64), .. }),
        "{error:?}"
    );
    assert!(
        error.is_outcome_unknown(),
        "the write ran; its durability is unknown"
    );
    assert!(error.is_retryable());
    assert!(
        std::error::Error::source(&error).is_some(),
        "the driver's error is kept"
    );

    // The failed call had been applied: `xlock` withdrew its attempt (a late copy of it could
    // still land), and the repeated call, which waits for that withdrawal, is granted anew.
    let before = env.locks.status(&Filter::default()).await.unwrap();
    let grant = locks
        .xlock("r", "job", LockDetails::default())
        .await
        .unwrap();
    assert!(grant.is_new());
    // The attempt (sent once), its withdrawal, and the new attempt.
    assert_eq!(
        monitor.take_names(),
        ["findAndModify", "findAndModify", "findAndModify"]
    );
    let held = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].fencing_token(), grant.fencing_token());
    assert!(
        before
            .iter()
            .all(|s| s.fencing_token() < grant.fencing_token()),
        "{before:?}"
    );
}

/// A waiting acquire repeats an attempt whose first copy was applied but answered with an
/// error, and the repeat finds that very attempt's grant. The guard's `attempt_sent_at` is
/// when the first copy was sent: the server granted the lock after that instant (its entry's
/// `createdAt`), not after the repeat was sent. Found by the harness: an election observer
/// saw a leader "before the attempt that was granted that term was sent" (check (8), seed
/// 707556), since that instant was the repeat's.
#[tokio::test]
async fn emulator_only_a_grant_found_by_a_repeat_dates_from_its_first_copy() {
    let Some(env) = emulator_env("ambiguous_first_copy").await else {
        return;
    };
    let wce =
        doc! { "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" } };
    fail_point(&env, fail_find_and_modify(1, wce)).await;
    let guard = env
        .locks
        .mutex("r")
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("granted on the repeat");
    // The attempt's send, on the wall clock (the emulator's `$$NOW` is the wall clock).
    let (wall, now) = (std::time::SystemTime::now(), std::time::Instant::now());
    let sent = wall - now.duration_since(guard.attempt_sent_at());
    let sent_ms = sent
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let created_ms = guard.grant().holder().created_at().timestamp_millis();
    // Both read to the millisecond; the repeat came at least 10 ms (its backoff) after.
    assert!(
        sent_ms <= created_ms + 2,
        "the attempt that was granted was sent {} ms after the grant",
        sent_ms - created_ms
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn emulator_only_an_attempt_repeated_after_a_write_concern_error_is_not_granted_twice() {
    let Some(env) = emulator_env("ambiguous_wce_once").await else {
        return;
    };
    let (monitor, db) = env.monitored().await;
    let locks = LockClient::new(db.collection("locks"));
    let wce =
        doc! { "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" } };
    fail_point(&env, fail_find_and_modify(1, wce)).await;
    let request = AcquireRequest::exclusive("r", "job", LockDetails::default());
    let error = locks.acquire(&request).await.unwrap_err();
    assert!(error.is_outcome_unknown(), "{error:?}");
    assert_eq!(monitor.take_names(), ["findAndModify"], "sent once");
    // The caller repeats the same request: the server answers for that attempt.
    let Attempt::Granted(grant) = locks.acquire(&request).await.unwrap() else {
        panic!("nobody else holds r")
    };
    assert!(grant.is_new(), "granted to this attempt, by its first send");
    let held = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].fencing_token(), grant.fencing_token());
}

#[tokio::test]
async fn emulator_only_a_server_error_reply_is_definite() {
    let Some(env) = emulator_env("ambiguous_transient").await else {
        return;
    };
    let (monitor, db) = env.monitored().await;
    let locks = LockClient::new(db.collection("locks"));
    for code in [91, 10107] {
        // Twice: the library repeats an attempt whose error reply says it did not run, and the
        // repeat fails too, so the error reaches the caller.
        fail_point(&env, fail_find_and_modify(2, doc! { "errorCode": code })).await;
        let error = locks
            .xlock("r", "job", LockDetails::default())
            .await
            .unwrap_err();
        assert!(
            matches!(error.kind(), ErrorKind::Database { code: Some(c), .. } if *c == code),
            "{error:?}"
        );
        assert!(error.is_retryable());
        assert!(
            !error.is_outcome_unknown(),
            "an error reply: the command did not run"
        );
        assert!(!error.is_already_locked());
        assert_eq!(monitor.take_names(), ["findAndModify", "findAndModify"]);
    }
    let grant = locks
        .xlock("r", "job", LockDetails::default())
        .await
        .unwrap();
    assert!(grant.is_new(), "the failed attempts never ran");
}

#[tokio::test]
async fn emulator_only_a_duplicate_key_from_a_racing_upsert_is_not_surfaced() {
    let Some(env) = emulator_env("ambiguous_duplicate").await else {
        return;
    };
    let (monitor, db) = env.monitored().await;
    let locks = LockClient::new(db.collection("locks"));
    // What mongod answers the loser of two upserts creating the same document.
    fail_point(&env, fail_find_and_modify(1, doc! { "errorCode": 11000 })).await;
    let grant = locks
        .xlock("r", "job", LockDetails::default())
        .await
        .unwrap();
    assert!(grant.is_new());
    assert_eq!(monitor.take_names(), ["findAndModify", "findAndModify"]);
}

#[tokio::test]
async fn emulator_only_a_reply_later_than_the_time_limit_is_an_unknown_outcome() {
    let Some(env) = emulator_env("ambiguous_timeout").await else {
        return;
    };
    let (monitor, db) = env.monitored().await;
    let locks = LockClient::builder(db.collection("locks"))
        .command_timeout(Duration::from_millis(300))
        .build()
        .expect("valid settings");
    // The server holds the command for a second (as a primary waiting for a majority that is
    // gone would), then runs it: the caller has given up by then, and cannot know.
    fail_point(
        &env,
        fail_find_and_modify(1, doc! { "blockConnection": true, "blockTimeMS": 1_000 }),
    )
    .await;
    let request = AcquireRequest::exclusive("r", "job", LockDetails::default());
    let error = locks.acquire(&request).await.unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::Timeout { limit, .. } if *limit == Duration::from_millis(300)),
        "{error:?}"
    );
    assert!(error.is_outcome_unknown());
    assert_eq!(
        monitor.take_names(),
        ["findAndModify"],
        "no time left to repeat it"
    );
    let sent = monitor.take();
    assert!(sent.is_empty());

    // Once the server has run it, asking again with the same request finds this attempt's
    // grant (or makes it): the doubt is resolved by the server, not guessed.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let Attempt::Granted(grant) = locks.acquire(&request).await.unwrap() else {
        panic!("nobody else holds r")
    };
    assert!(grant.is_new());
    let held = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 1, "one grant");
    assert_eq!(held[0].fencing_token(), grant.fencing_token());
}

#[tokio::test]
async fn no_server_to_send_to_is_a_definite_outcome() {
    // Nothing listens on this port: server selection fails before anything is sent, so the
    // lock cannot have been granted.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let uri = format!(
        "mongodb://127.0.0.1:{port}/?directConnection=true&serverSelectionTimeoutMS=300&connectTimeoutMS=300"
    );
    let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
    let locks = LockClient::new(client.database("d").collection("locks"));
    let error = locks
        .xlock("r", "job", LockDetails::default())
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::Database { code: None, .. }),
        "{error:?}"
    );
    assert!(!error.is_outcome_unknown(), "nothing was sent: {error:?}");
    assert!(error.is_retryable());
}
