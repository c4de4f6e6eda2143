//! An operator's force release is safe to repeat: a copy of it that runs again (the write is
//! repeated once after an error that left its outcome unknown) never breaks a lock granted
//! between the two copies.
//!
//! It needs the emulator's fail points, so it is named `emulator_only_`.

use std::time::Duration;

use bson::doc;
use mongolock::{Filter, LockClient, LockDetails};
use mongolock_testkit::TestServer;

#[tokio::test]
async fn emulator_only_a_repeated_force_release_spares_the_next_holder() {
    let server = TestServer::start().await.expect("emulator");
    let db = "force_twice";
    let direct = LockClient::new(server.new_client().database(db).collection("locks"));
    let dead = direct
        .xlock("r", "dead-host", LockDetails::default())
        .await
        .expect("held");
    // Each copy of the operator's write waits a second on the server, runs, and is answered
    // with a write concern error, so the client repeats it: the fault behind a repeated copy.
    let mut options = mongodb::options::ClientOptions::parse(server.uri())
        .await
        .expect("uri");
    options.app_name = Some("operator".to_owned());
    let operator = LockClient::new(
        mongodb::Client::with_options(options)
            .expect("client")
            .database(db)
            .collection("locks"),
    );
    let admin = server.client().database("admin");
    admin
        .run_command(doc! {
            "configureFailPoint": "failCommand", "mode": { "times": 2 },
            "data": {
                "failCommands": ["findAndModify"], "appName": "operator",
                "blockConnection": true, "blockTimeMS": 1_000,
                "writeConcernError": { "code": 91, "codeName": "ShutdownInProgress", "errmsg": "test" },
            },
        })
        .await
        .expect("fail point");
    let forcing = tokio::spawn({
        let operator = operator.clone();
        async move { operator.force_release("r").await }
    });
    // The first copy removes the dead host's lock; the next holder takes it at once, before
    // the second copy runs.
    let next = loop {
        match direct.xlock("r", "next", LockDetails::default()).await {
            Ok(grant) => break grant,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert!(next.fencing_token() > dead.fencing_token());
    let forced = forcing.await.expect("task");
    assert!(
        forced.is_err(),
        "both copies had a write concern error: {forced:?}"
    );
    let held = direct
        .status(&Filter::default().resource("r"))
        .await
        .expect("status");
    assert_eq!(
        held.iter().map(|s| s.lock_id()).collect::<Vec<_>>(),
        ["next"],
        "the repeated copy of the force release broke the next holder's lock"
    );
}
