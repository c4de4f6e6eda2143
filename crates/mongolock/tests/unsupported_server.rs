//! A server that cannot run the library's commands (MongoDB before 4.4, or a server that
//! speaks MongoDB's protocol without pipeline updates and `$$NOW`) is told at the client's
//! first operation, with one typed error that names what is missing and the minimum
//! version, before anything is written. The emulator impersonates each case.

use mongolock::{ErrorKind, LockClient, LockDetails};
use mongolock_testkit::{ServerVersion, TestServer, TestServerBuilder};

/// A lock client on an emulator built by `builder`, and the emulator.
async fn client_on(builder: TestServerBuilder) -> (LockClient, TestServer) {
    let server = builder.start().await.expect("emulator starts");
    let locks = LockClient::new(server.client().database("compat").collection("locks"));
    (locks, server)
}

/// The `missing` and `minimum` of an unsupported-server error (panics on any other).
fn unsupported(error: &mongolock::Error) -> (&str, &str) {
    match error.kind() {
        ErrorKind::UnsupportedServer {
            missing, minimum, ..
        } => (missing.as_str(), *minimum),
        other => panic!("expected UnsupportedServer, got {other:?}"),
    }
}

#[tokio::test]
async fn a_server_before_4_4_is_refused_by_every_first_operation() {
    let (locks, _server) =
        client_on(TestServer::builder().server_version(ServerVersion::V4_2)).await;
    let error = locks.create_indexes().await.unwrap_err();
    let (missing, minimum) = unsupported(&error);
    assert_eq!(minimum, "4.4");
    // The driver refuses it first, by its wire version (8): the library says so, typed.
    assert!(missing.contains("wire version 8"), "{missing}");
    let error = locks.mutex("job").try_acquire().await.unwrap_err();
    unsupported(&error);
    let error = locks
        .xlock("job", "id", LockDetails::default())
        .await
        .unwrap_err();
    unsupported(&error);
    assert!(!error.is_retryable());
    let error = locks
        .status(&mongolock::Filter::default())
        .await
        .unwrap_err();
    unsupported(&error);
    assert!(
        error.to_string().contains("MongoDB has from 4.4 on"),
        "one clear line: {error}"
    );
}

#[tokio::test]
async fn a_server_without_pipeline_updates_is_refused_by_every_first_operation() {
    let (locks, _server) = client_on(TestServer::builder().without_pipeline_updates()).await;
    let error = locks.mutex("job").try_acquire().await.unwrap_err();
    let (missing, minimum) = unsupported(&error);
    assert_eq!(minimum, "4.4");
    assert!(missing.contains("pipeline updates"), "{missing}");
    unsupported(&locks.create_indexes().await.unwrap_err());
    // Nothing was written: the check's probe matches no document.
    let count = locks
        .collection()
        .count_documents(bson::doc! {})
        .await
        .unwrap();
    assert_eq!(count, 0);
}

#[tokio::test]
async fn a_4_4_server_is_taken() {
    let (locks, _server) =
        client_on(TestServer::builder().server_version(ServerVersion::V4_4)).await;
    locks.create_indexes().await.unwrap();
    let guard = locks
        .mutex("job")
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    guard.release().await.unwrap();
}
