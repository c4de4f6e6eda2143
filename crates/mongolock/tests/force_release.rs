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

/// Issue 40's finding FORCED_BACK: a force release keeps an entry with a lock-delay in
/// force for the delay, its lease ended. A step back of the server's clock by more than the
/// delay must not make that lease held again: its holder's keeper must not renew it (the
/// guard is told it was revoked), and its lock id's next attempt must not be answered
/// "already held" with it (nor resume it), whatever the clock reads. The force release
/// marks the entry (`letGoAt`), which every command reads as holding nothing.
#[tokio::test]
async fn emulator_only_a_step_back_does_not_revive_a_force_released_lease() {
    if std::env::var("MONGODB_URI").is_ok_and(|uri| !uri.is_empty()) {
        eprintln!("skipped: a step back needs the emulator's clock");
        return;
    }
    let server = TestServer::start().await.expect("emulator");
    let db = "force_step_back";
    let locks = LockClient::new(server.new_client().database(db).collection("locks"));
    let operator = LockClient::new(server.new_client().database(db).collection("locks"));
    let job = || {
        locks
            .mutex("job")
            .lock_id("host-a")
            .ttl(Duration::from_secs(10))
            .lock_delay(Duration::from_secs(1))
            .extend_every(Duration::from_millis(300))
    };
    let guard = job().acquire().await.expect("granted");
    let token = guard.fencing_token();
    assert_eq!(operator.force_release("job").await.expect("forced"), 1);
    // The fault: the server's clock goes back by more than the delay, before the keeper's
    // next renewal (which would otherwise have been refused by the clock alone).
    let before = server.clock().now().timestamp_millis();
    let after = server
        .clock()
        .step_back(Duration::from_secs(5))
        .timestamp_millis();
    assert!(after <= before - 4_900, "{before} -> {after}");
    // The keeper's renewals do not take the lease back: the guard is told it was revoked,
    // long before its local deadline (10 s less the margin).
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost()).await;
    assert_eq!(
        reason,
        Ok(mongolock::LossReason::Revoked),
        "the force-released lease was renewed after the step back ({:?})",
        guard.state()
    );
    // No low-level renewal of its lock id takes it back either.
    assert_eq!(
        locks
            .renew("host-a", Duration::from_secs(10))
            .await
            .expect("renew"),
        0,
        "the force-released lease was renewed by its lock id"
    );
    // Status reports it held by nobody (its lease ended), still in force.
    let status = operator
        .status(&Filter::default().resource("job"))
        .await
        .expect("status");
    assert!(
        status.len() == 1 && status[0].is_expired(),
        "the force-released lease reads as held after the step back: {status:?}"
    );
    // Nor does its lock id's next attempt get the old grant back (answered "already held"
    // and resumed): the entry is still in force (its delay, by the stepped-back clock), so
    // it is refused, here and from another process under the same lock id (a restart).
    let again = job().try_acquire().await.expect("attempt");
    assert!(
        again.as_ref().is_none_or(|g| g.fencing_token() > token),
        "the force-released lease was given back to its lock id (token {token})"
    );
    drop(again);
    let restarted = LockClient::new(server.new_client().database(db).collection("locks"));
    let resumed = (restarted.mutex("job").lock_id("host-a"))
        .ttl(Duration::from_secs(10))
        .lock_delay(Duration::from_secs(1))
        .try_acquire()
        .await
        .expect("attempt");
    assert!(
        resumed.as_ref().is_none_or(|g| g.fencing_token() > token),
        "the force-released lease was resumed by its lock id's restarted process (token {token})"
    );
    drop(resumed);
    restarted.shutdown().await;
    drop(guard);
    // Once the delay has ended by the server's clock, the lock id is granted a new lease.
    server.clock().advance(Duration::from_secs(6));
    let next = job().acquire().await.expect("granted anew");
    assert!(
        next.fencing_token() > token,
        "{} <= {token}",
        next.fencing_token()
    );
    next.release().await.expect("released");
    locks.shutdown().await;
    operator.shutdown().await;
}
