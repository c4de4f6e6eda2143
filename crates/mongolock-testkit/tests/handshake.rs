//! Handshake and server commands: what the drivers learn about the server, and the error
//! shape of commands the server does not know.

mod common;

use bson::doc;

#[tokio::test]
async fn hello_reports_a_writable_replica_set_primary() {
    let t = common::target("hello").await;
    let reply = t
        .client
        .database("admin")
        .run_command(doc! {"hello": 1})
        .await
        .unwrap();
    assert_eq!(reply.get_bool("isWritablePrimary"), Ok(true));
    assert!(reply.get_i32("maxBsonObjectSize").unwrap() >= 16 * 1024 * 1024);
    assert!(reply.get_i32("maxMessageSizeBytes").unwrap() >= 48_000_000);
    assert!(reply.get_i32("maxWireVersion").unwrap() >= 8);
    assert!(reply.contains_key("logicalSessionTimeoutMinutes"));
    assert!(reply.contains_key("connectionId"));
    assert_eq!(
        reply.get_str("setName").is_ok(),
        reply.contains_key("hosts")
    );
    let legacy = t
        .client
        .database("admin")
        .run_command(doc! {"isMaster": 1})
        .await
        .unwrap();
    assert_eq!(legacy.get_bool("ismaster"), Ok(true));
}

#[tokio::test]
async fn build_info_and_ping_answer() {
    let t = common::target("buildinfo").await;
    let info = t.db.run_command(doc! {"buildInfo": 1}).await.unwrap();
    assert!(info.get_str("version").is_ok());
    assert!(!info.get_array("versionArray").unwrap().is_empty());
    let pong = t.db.run_command(doc! {"ping": 1}).await.unwrap();
    assert_eq!(pong.get_f64("ok"), Ok(1.0));
}

#[tokio::test]
async fn unknown_command_is_command_not_found() {
    let t = common::target("unknown_cmd").await;
    let (code, message) = t.error_code(doc! {"frobnicate": 1}).await;
    assert_eq!(code, 59);
    assert!(
        message.contains("no such command: 'frobnicate'"),
        "{message}"
    );
}

#[tokio::test]
async fn unknown_command_field_is_rejected() {
    let t = common::target("unknown_field").await;
    let (code, message) = t.error_code(doc! {"find": "c", "frobnicate": true}).await;
    assert_eq!(code, 40415);
    assert!(
        message.contains("'find.frobnicate' is an unknown field"),
        "{message}"
    );
}

#[tokio::test]
async fn list_databases_and_collections_show_what_exists() {
    let t = common::target("listing").await;
    t.coll("a").insert_one(doc! {"x": 1}).await.unwrap();
    t.db.create_collection("b").await.unwrap();
    let mut names = t.db.list_collection_names().await.unwrap();
    names.sort();
    assert_eq!(names, vec!["a", "b"]);
    let dbs = t.client.list_database_names().await.unwrap();
    assert!(dbs.contains(&t.db.name().to_string()));
    let (code, _) = t.error_code(doc! {"create": "a"}).await;
    assert_eq!(
        code, 48,
        "creating an existing collection is NamespaceExists"
    );
    t.coll("a").drop().await.unwrap();
    assert_eq!(t.db.list_collection_names().await.unwrap(), vec!["b"]);
    t.db.drop().await.unwrap();
    assert!(
        !t.client
            .list_database_names()
            .await
            .unwrap()
            .contains(&t.db.name().to_string())
    );
}

#[tokio::test]
async fn emulator_only_transactions_are_refused() {
    let t = common::target("transactions").await;
    if !t.is_emulator() {
        return; // emulator-specific: real MongoDB supports transactions
    }
    let mut session = t.client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    let err = t
        .coll("c")
        .insert_one(doc! {"a": 1})
        .session(&mut session)
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 20);
}
