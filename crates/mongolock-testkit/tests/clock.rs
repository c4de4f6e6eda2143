//! The emulator's controllable clock, seen through `$$NOW` and the `emulatorClock` command.

mod common;

use std::time::Duration;

use bson::doc;

#[tokio::test]
async fn emulator_only_advancing_the_clock_moves_now() {
    let server = mongolock_testkit::TestServer::start().await.unwrap();
    let admin = server.client().database("admin");
    let before = admin.run_command(doc! {"emulatorClock": 1}).await.unwrap();
    let before = before.get_datetime("now").unwrap().timestamp_millis();
    server.clock().advance(Duration::from_secs(3600));
    let coll = server
        .client()
        .database("d")
        .collection::<bson::Document>("c");
    coll.update_one(doc! {"_id": 1}, vec![doc! {"$set": {"at": "$$NOW"}}])
        .upsert(true)
        .await
        .unwrap();
    let at = coll
        .find_one(doc! {})
        .await
        .unwrap()
        .unwrap()
        .get_datetime("at")
        .unwrap()
        .timestamp_millis();
    assert!(
        at - before >= 3_600_000,
        "$$NOW follows the clock: {before} -> {at}"
    );
    let advanced = admin
        .run_command(doc! {"emulatorClock": 1, "advanceMs": 60_000})
        .await
        .unwrap();
    let advanced = advanced.get_datetime("now").unwrap().timestamp_millis();
    assert!(advanced - at >= 60_000);
    let err = server
        .client()
        .database("d")
        .run_command(doc! {"emulatorClock": 1})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 13, "admin only");
}
