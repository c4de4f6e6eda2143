//! A revoked lease is reported lost, whatever else its client holds: the keeper marks a
//! lease renewed only when the server confirmed that very lease. And `release()` says so
//! when the server no longer held the grant: `Ok` means held throughout, as far as the
//! server knows. (Work run under a lock, `Mutex::run` and its kin, keeps its value when the
//! release finds such a revocation after the work returned: see `tests/closures.rs`.)

mod common;

use std::time::Duration;

use bson::doc;
use common::env;
use mongolock::{ErrorKind, LockClient, LossReason};
use mongolock_testkit::TestServer;

const TTL: Duration = Duration::from_secs(3);

/// Polls `check` every 10 ms for up to `limit`; true once it held.
async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < until {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check()
}

/// Asserts that `error` is a lost lease, for `reason`.
fn assert_lost(error: &mongolock::Error, reason: LossReason) {
    assert!(
        matches!(error.kind(), ErrorKind::LeaseLost { reason: r, .. } if *r == reason),
        "expected LeaseLost({reason:?}), got {error:?}"
    );
}

#[tokio::test]
async fn a_force_released_lease_is_reported_lost_while_an_orphan_of_its_client_lives() {
    let env = env("revoked_with_orphan").await;
    let holder = env.locks.clone();
    let other = LockClient::new(env.locks.collection().clone());
    let a = holder.mutex("a").ttl(TTL).acquire().await.expect("a");
    let b = holder.mutex("b").ttl(TTL).acquire().await.expect("b");
    // B becomes an entry nobody holds (its guard dropped where nothing can release it).
    std::thread::spawn(move || drop(b)).join().expect("thread");
    assert_eq!(env.locks.force_release("a").await.expect("forced"), 1);
    let taken = other.mutex("a").ttl(TTL).try_acquire().await.expect("ok");
    assert!(taken.is_some(), "the operator freed a");
    assert!(
        eventually(TTL, || a.is_lost()).await,
        "the holder of a was never told that a was revoked"
    );
    assert_eq!(a.lost().await, LossReason::Revoked);
}

#[tokio::test]
async fn a_force_released_lease_is_reported_lost_among_several_of_its_client() {
    let env = env("revoked_among_several").await;
    let holder = env.locks.clone();
    let a = holder.mutex("a").ttl(TTL).acquire().await.expect("a");
    let b = holder.mutex("b").ttl(TTL).acquire().await.expect("b");
    let c = holder
        .semaphore("c", 2)
        .ttl(TTL)
        .acquire()
        .await
        .expect("c");
    assert_eq!(env.locks.force_release("b").await.expect("forced"), 1);
    assert!(
        eventually(TTL, || b.is_lost()).await,
        "the holder of b was never told"
    );
    assert_eq!(b.lost().await, LossReason::Revoked);
    assert!(!a.is_lost() && !c.is_lost(), "the others are still held");
    a.release().await.expect("a was held throughout");
    c.release().await.expect("c was held throughout");
}

#[tokio::test]
async fn release_after_a_revocation_says_the_lease_was_lost() {
    let env = env("release_after_revocation").await;
    // A long renewal period: the keeper has not noticed yet when the guard releases.
    let guard = env
        .locks
        .mutex("r")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("held");
    assert_eq!(env.locks.force_release("r").await.expect("forced"), 1);
    assert!(!guard.is_lost(), "not noticed yet");
    let error = guard.release().await.expect_err("the lease was revoked");
    assert_lost(&error, LossReason::Revoked);
}

#[tokio::test]
async fn emulator_only_a_release_that_reaches_the_server_after_the_deadline_says_deadline() {
    let server = TestServer::start().await.expect("emulator");
    let mut options = mongodb::options::ClientOptions::parse(server.uri())
        .await
        .expect("uri");
    options.app_name = Some("holder".to_owned());
    let client = mongodb::Client::with_options(options).expect("client");
    let locks = LockClient::new(client.database("late_release").collection("locks"));
    let guard = locks
        .mutex("r")
        .ttl(Duration::from_millis(1_000))
        .acquire()
        .await
        .expect("held");
    // The release sits on the server past the TTL: the server finds the lease expired by
    // its clock, and by then the holder's own deadline has passed too. That is a loss by
    // the deadline, not an operator's revocation.
    server
        .client()
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand", "mode": { "times": 1 },
            "data": {
                "failCommands": ["findAndModify"], "appName": "holder",
                "blockConnection": true, "blockTimeMS": 1_500,
            },
        })
        .await
        .expect("configureFailPoint");
    let error = guard.release().await.expect_err("the lease expired");
    assert_lost(&error, LossReason::Deadline);
}
