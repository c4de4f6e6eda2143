//! A failed call says whether the server may have applied it, and repeating it with the same
//! lock id (and nonce) resolves the doubt instead of guessing. Fail points make the server
//! misbehave on cue; they need the emulator (or a mongod with test commands enabled).

mod common;

use bson::{Document, doc};
use common::{Env, emulator_env};
use mongolock::{AcquireRequest, Attempt, ErrorKind, Filter, LockDetails};

async fn fail_point(env: &Env, command: Document) {
    env.db
        .client()
        .database("admin")
        .run_command(command)
        .await
        .expect("configureFailPoint");
}

#[tokio::test]
async fn emulator_only_a_write_concern_error_leaves_a_grant_that_asking_again_finds() {
    let Some(env) = emulator_env("ambiguous_wce").await else {
        return;
    };
    fail_point(
        &env,
        doc! {
            "configureFailPoint": "failCommand", "mode": { "times": 1 },
            "data": {
                "failCommands": ["findAndModify"],
                "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" },
            },
        },
    )
    .await;
    let error = env
        .locks
        .xlock("r", "job", LockDetails::default())
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::Database { code: Some(64), .. }),
        "{error:?}"
    );
    assert!(error.is_outcome_unknown());
    assert!(error.is_retryable());
    assert!(
        std::error::Error::source(&error).is_some(),
        "the driver's error is kept"
    );

    let grant = env
        .locks
        .xlock("r", "job", LockDetails::default())
        .await
        .unwrap();
    assert!(!grant.is_new(), "the failed call had been applied");
    assert_eq!(env.locks.status(&Filter::default()).await.unwrap().len(), 1);
}

#[tokio::test]
async fn emulator_only_a_connection_lost_after_the_write_is_retried_without_a_second_grant() {
    let Some(env) = emulator_env("ambiguous_close").await else {
        return;
    };
    fail_point(
        &env,
        doc! {
            "configureFailPoint": "onPrimaryTransactionalWrite", "mode": { "times": 1 },
            "data": { "closeConnection": true },
        },
    )
    .await;
    // The write commits, the reply is lost, the driver retries the same command: the server
    // answers from its record of the first execution.
    let request = AcquireRequest::exclusive("r", "job", LockDetails::default());
    let Attempt::Granted(grant) = env.locks.acquire(&request).await.unwrap() else {
        panic!("nobody else holds r")
    };
    assert!(grant.is_new(), "granted by this attempt, once");
    let held = env.locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].fencing_token(), grant.fencing_token());
}

#[tokio::test]
async fn emulator_only_a_transient_failure_is_retryable_and_the_retry_succeeds() {
    let Some(env) = emulator_env("ambiguous_transient").await else {
        return;
    };
    // Twice: the driver's own retry fails too, so the error reaches the caller.
    fail_point(
        &env,
        doc! {
            "configureFailPoint": "failCommand", "mode": { "times": 2 },
            "data": { "failCommands": ["findAndModify"], "errorCode": 91 },
        },
    )
    .await;
    let error = env
        .locks
        .xlock("r", "job", LockDetails::default())
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::Database { code: Some(91), .. }),
        "{error:?}"
    );
    assert!(error.is_retryable());
    assert!(!error.is_already_locked());

    let grant = env
        .locks
        .xlock("r", "job", LockDetails::default())
        .await
        .unwrap();
    assert!(grant.is_new(), "the failed attempts never ran");
}
