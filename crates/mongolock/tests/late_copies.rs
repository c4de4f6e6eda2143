//! Late copies: a request that reaches the server after its sender gave up on it (it timed
//! out, and sent the same attempt again) is executed then. Once an attempt's outcome was
//! ever unknown, ending its grant leaves the attempt unusable (a tombstone), so a late copy
//! of it is refused instead of granting a lock that nobody keeps.

mod common;

use std::time::Duration;

use bson::doc;
use common::{Env, emulator_env, secs};
use mongolock::{AcquireRequest, Attempt, Filter, LockClient, LockDetails};

/// A client named `app_name` on the test's database, with commands limited to 300 ms.
async fn impatient_client(env: &Env, app_name: &str) -> LockClient {
    let mut options = mongodb::options::ClientOptions::parse(env.uri())
        .await
        .unwrap();
    options.app_name = Some(app_name.to_owned());
    let client = mongodb::Client::with_options(options).unwrap();
    LockClient::new(client.database(env.db.name()).collection("locks"))
        .with_command_timeout(Duration::from_millis(300))
}

/// The next `findAndModify` of `app_name` waits a second on the server before it runs: its
/// sender times out first, and the command is executed late (mongod's `failCommand` with
/// `blockConnection`: the connection's thread sleeps, then runs the command).
async fn deliver_next_attempt_late(env: &Env, app_name: &str) {
    env.db
        .client()
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand", "mode": { "times": 1 },
            "data": {
                "failCommands": ["findAndModify"], "appName": app_name,
                "blockConnection": true, "blockTimeMS": 1_000,
            },
        })
        .await
        .expect("configureFailPoint");
}

/// Long enough for the late copy to have run: it was held a second on the server.
async fn after_the_late_copy() {
    tokio::time::sleep(Duration::from_millis(1_600)).await;
}

/// Holds the next `times` `command`s of the proxied client on their way for `hold_ms`, and
/// cuts the client's connection 50 ms after each left: the client cannot know whether they
/// ran. (The driver finds the server again at its next heartbeat, half a second later at
/// most: then the client may repeat the write.)
fn deliver_late(proxy: &mongolock_testkit::FaultProxy, command: &str, times: u64, hold_ms: u64) {
    proxy.fault_requests(
        mongolock_testkit::faults::proxy::Requests::named(&[command]).times(times),
        mongolock_testkit::faults::proxy::RequestFault::Late {
            hold: Duration::from_millis(hold_ms),
            cut_after: Some(Duration::from_millis(50)),
        },
    );
}

/// The locks on `job`, as the client straight to the server sees them.
async fn held_on_job(direct: &LockClient) -> Vec<mongolock::LockStatus> {
    direct
        .status(&Filter::default().resource("job"))
        .await
        .unwrap()
}

/// A guard's attempt timed out and was sent again (granted); the guard is released; then the
/// first copy runs. It must not grant the lock again: another client can take it.
#[tokio::test]
async fn emulator_only_a_late_copy_of_a_guards_attempt_grants_nothing_after_release() {
    let Some(env) = emulator_env("late_guard").await else {
        return;
    };
    let locks = impatient_client(&env, "late_guard").await;
    deliver_next_attempt_late(&env, "late_guard").await;
    let guard = (locks.mutex("job").ttl(secs(6)))
        .acquire_timeout(secs(10))
        .await
        .unwrap()
        .expect("the repeated attempt is granted");
    guard.release().await.expect("released while held");
    after_the_late_copy().await;
    let held = env.locks.status(&Filter::default()).await.unwrap();
    assert!(
        held.is_empty(),
        "the late copy granted a lock nobody keeps: {held:?}"
    );
    let other = env.other_client().await;
    assert!(other.mutex("job").try_acquire().await.unwrap().is_some());
    other.shutdown().await;
    locks.shutdown().await;
}

/// The low-level calls: `xlock` times out, the repeated `xlock` is granted, `unlock` returns
/// 1; the late first copy must not hold a lock (here without TTL: for ever).
#[tokio::test]
async fn emulator_only_a_late_copy_of_a_repeated_xlock_grants_nothing_after_unlock() {
    let Some(env) = emulator_env("late_xlock").await else {
        return;
    };
    let locks = impatient_client(&env, "late_xlock").await;
    deliver_next_attempt_late(&env, "late_xlock").await;
    let error = locks
        .xlock("job", "batch-1", LockDetails::default())
        .await
        .expect_err("the first copy timed out");
    assert!(error.is_outcome_unknown(), "{error:?}");
    // Repeating a call whose outcome was unknown.
    let grant = locks
        .xlock("job", "batch-1", LockDetails::default())
        .await
        .expect("the repeated call is granted");
    assert_eq!(grant.lock_id(), "batch-1");
    assert_eq!(locks.unlock("batch-1").await.unwrap(), 1);
    after_the_late_copy().await;
    let held = env.locks.status(&Filter::default()).await.unwrap();
    assert!(
        held.is_empty(),
        "the late copy holds a lock for ever: {held:?}"
    );
    locks.shutdown().await;
}

/// With a request of its own, a caller repeats the same attempt (its nonce) after an unknown
/// outcome, and ends it with `release_attempt`, which retires the nonce: the late copy is
/// refused.
#[tokio::test]
async fn emulator_only_release_attempt_retires_a_repeated_requests_late_copy() {
    let Some(env) = emulator_env("late_request").await else {
        return;
    };
    let locks = impatient_client(&env, "late_request").await;
    deliver_next_attempt_late(&env, "late_request").await;
    let request = AcquireRequest::exclusive("job", "batch-2", LockDetails::default());
    let error = locks.acquire(&request).await.expect_err("timed out");
    assert!(error.is_outcome_unknown(), "{error:?}");
    let Attempt::Granted(grant) = locks.acquire(&request).await.unwrap() else {
        panic!("the repeated request is granted")
    };
    assert_eq!(grant.lock_id(), "batch-2");
    assert!(locks.release_attempt(&request).await.unwrap());
    after_the_late_copy().await;
    let held = env.locks.status(&Filter::default()).await.unwrap();
    assert!(held.is_empty(), "{held:?}");
    assert_eq!(locks.acquire(&request).await.unwrap(), Attempt::Withdrawn);
    locks.shutdown().await;
}

/// A waiting call sends its attempt again after a failed send (here the connection is cut
/// while the first copy is held on its way): the repeat is granted, and the first copy lands
/// after the release. It must be refused: the release retires the attempt.
#[tokio::test]
async fn emulator_only_a_late_copy_of_an_attempt_the_client_repeated_itself_grants_nothing() {
    let Some(common::Proxied {
        server: _server,
        proxy,
        cut_off: locks,
        direct,
    }) = common::proxied("late_repeat").await
    else {
        return;
    };
    // Warm: the connection pool and the wake-up stream are set up.
    drop(locks.mutex("warm").acquire().await.unwrap());
    deliver_late(&proxy, "findAndModify", 1, 1_000);
    let guard = (locks.mutex("job").ttl(secs(6)))
        .acquire_timeout(secs(10))
        .await
        .unwrap()
        .expect("the repeated copy is granted");
    guard.release().await.expect("released while held");
    after_the_late_copy().await;
    let held = held_on_job(&direct).await;
    assert!(
        held.is_empty(),
        "the late copy granted a lock nobody keeps: {held:?}"
    );
}

/// A waiting attempt's copy is held on its way while another client holds the lock, and the
/// connection is cut; the next copy of the attempt is refused (the lock is taken), and a
/// later one is granted once the holder lets go. The guard is released; then the first copy
/// lands. It must be refused: a copy of that attempt had an unknown outcome, whatever the
/// next copy was told.
#[tokio::test]
async fn emulator_only_a_late_copy_sent_before_a_refusal_grants_nothing_after_release() {
    let Some(common::Proxied {
        server: _server,
        proxy,
        cut_off: locks,
        direct,
    }) = common::proxied("late_refused").await
    else {
        return;
    };
    drop(locks.mutex("warm").acquire().await.unwrap());
    let holder = direct.mutex("job").ttl(secs(6)).acquire().await.unwrap();
    deliver_late(&proxy, "findAndModify", 1, 2_000);
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            let guard = (locks.mutex("job").ttl(secs(6)))
                .acquire_timeout(secs(10))
                .await
                .unwrap()
                .expect("granted once the holder lets go");
            guard.release().await.expect("released while held");
        }
    });
    // The copy after the cut (once the driver found the server again) is refused while this
    // holds on.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    holder.release().await.unwrap();
    waiter.await.unwrap();
    // The first copy lands two seconds after it left.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let held = held_on_job(&direct).await;
    assert!(
        held.is_empty(),
        "the late copy granted a lock nobody keeps: {held:?}"
    );
}

/// `xlock` on a lock another holder has: its first copy is held on its way and the
/// connection cut, so whatever the call reports, that copy may still land. Once the holder
/// unlocks and the copy lands, the lock must not be held by the caller's lock id, which was
/// never told it was granted.
#[tokio::test]
async fn emulator_only_a_late_copy_of_a_refused_xlock_grants_nothing() {
    let Some(common::Proxied {
        server: _server,
        proxy,
        cut_off: locks,
        direct,
    }) = common::proxied("late_refused_xlock").await
    else {
        return;
    };
    let details = LockDetails::default();
    let _held = direct
        .xlock("job", "holder", details.clone())
        .await
        .unwrap();
    deliver_late(&proxy, "findAndModify", 1, 2_000);
    let error = locks
        .xlock("job", "caller", details)
        .await
        .expect_err("the lock is held, or the outcome unknown");
    assert!(
        error.is_already_locked() || error.is_outcome_unknown(),
        "{error:?}"
    );
    assert_eq!(direct.unlock("holder").await.unwrap(), 1);
    // The first copy lands two seconds after it left.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let held = held_on_job(&direct).await;
    assert!(
        held.iter().all(|lock| lock.lock_id() != "caller"),
        "the late copy holds a lock nobody was told of: {held:?}"
    );
}

/// `unlock` has a copy held on its way, and the client's repeat of it answers `Ok`; the
/// caller takes the lock again under the same lock id. The late copy of the unlock must not
/// remove that new grant: its holder was told it holds the lock.
#[tokio::test]
async fn emulator_only_a_late_copy_of_an_unlock_leaves_a_later_grant() {
    let Some(common::Proxied {
        server: _server,
        proxy,
        cut_off: locks,
        direct,
    }) = common::proxied("late_unlock").await
    else {
        return;
    };
    let details = LockDetails::default();
    let first = locks.xlock("job", "batch", details.clone()).await.unwrap();
    deliver_late(&proxy, "update", 1, 2_000);
    assert_eq!(
        locks.unlock("batch").await.unwrap(),
        1,
        "the repeat removed it"
    );
    let second = locks.xlock("job", "batch", details).await.unwrap();
    assert!(second.fencing_token() > first.fencing_token());
    // The first copy of the unlock lands two seconds after it left.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let held = held_on_job(&direct).await;
    assert!(
        held.iter()
            .any(|lock| lock.fencing_token() == second.fencing_token()),
        "the late unlock removed a grant made after it was sent: {held:?}"
    );
    // A later unlock, all of whose copies are answered, removes it.
    assert_eq!(locks.unlock("batch").await.unwrap(), 1);
    assert!(held_on_job(&direct).await.is_empty());
}

/// `unlock` whose every copy is held on its way (its outcome unknown), then `xlock` of the
/// same lock id, answered with the grant it holds from before: the caller goes on believing.
/// The late copies of the unlock must leave that grant.
#[tokio::test]
async fn emulator_only_a_late_unlock_leaves_a_grant_answered_again_after_it() {
    let Some(common::Proxied {
        server: _server,
        proxy,
        cut_off: locks,
        direct,
    }) = common::proxied("late_unlock_held").await
    else {
        return;
    };
    let details = LockDetails::default();
    let first = locks.xlock("job", "batch", details.clone()).await.unwrap();
    deliver_late(&proxy, "update", 2, 2_000);
    let error = locks.unlock("batch").await.expect_err("both copies cut");
    assert!(error.is_outcome_unknown(), "{error:?}");
    let again = locks.xlock("job", "batch", details).await.unwrap();
    assert_eq!(
        again.fencing_token(),
        first.fencing_token(),
        "held from before"
    );
    // Both copies of the unlock land two seconds after they left.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let held = held_on_job(&direct).await;
    assert!(
        held.iter()
            .any(|lock| lock.fencing_token() == first.fencing_token()),
        "the late unlock removed a grant its caller was told it holds: {held:?}"
    );
}
