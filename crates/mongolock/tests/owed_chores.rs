//! A lock id that asks again while its own release or withdrawal is still owed: the
//! release (or withdrawal) of the earlier grant is carried out first, so the call never
//! adopts an entry that a queued chore of its own client is about to remove. Only one
//! process and one guard exist at a time in these tests: this is not the documented hazard
//! of two live processes sharing a lock id.

mod common;

use std::time::Duration;

use bson::doc;
use common::{Env, emulator_env, secs};
use mongolock::LockClient;

/// A client named `app_name` on the test's database, with commands limited to `timeout`.
async fn named_client(env: &Env, app_name: &str, timeout: Duration) -> LockClient {
    let mut options = mongodb::options::ClientOptions::parse(env.uri())
        .await
        .unwrap();
    options.app_name = Some(app_name.to_owned());
    let client = mongodb::Client::with_options(options).unwrap();
    LockClient::builder(client.database(env.db.name()).collection("locks"))
        .command_timeout(timeout)
        .build()
        .expect("valid settings")
}

/// The next four `findAndModify`s of `app_name` fail with ShutdownInProgress (91, transient)
/// without being applied: a release and the driver's retry of it, then the client's first
/// retry of that release in the background and the driver's retry of that. The client then
/// owes the release, and tries it again after a pause.
async fn fail_a_release_twice(env: &Env, app_name: &str) {
    env.db
        .client()
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand", "mode": { "times": 4 },
            "data": { "failCommands": ["findAndModify"], "appName": app_name, "errorCode": 91 },
        })
        .await
        .expect("configureFailPoint");
}

/// Guard A's release fails (transiently), so the client owes it; the same process asks again
/// with the same lock id. The new guard must not be one that the owed release removes a
/// moment later: while it believes it holds the lock, nobody else is granted it.
#[tokio::test]
async fn emulator_only_asking_again_after_a_failed_release_never_adopts_what_that_release_removes()
{
    let Some(env) = emulator_env("owed_release").await else {
        return;
    };
    let locks = named_client(&env, "owed_release", secs(5)).await;
    let mutex = locks.mutex("job").lock_id("svc").ttl(secs(6));
    let a = mutex.acquire().await.unwrap();
    let first_token = a.fencing_token();
    fail_a_release_twice(&env, "owed_release").await;
    let error = a.release().await.expect_err("the fail point fired");
    assert!(error.is_retryable(), "{error:?}");
    // The background retry fails too: the release waits for its next try.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let b = mutex
        .try_acquire()
        .await
        .unwrap()
        .expect("the lock is this lock id's");
    nobody_else_while_believed(&env, &b).await;
    assert!(!b.is_lost());
    // The owed release was carried out first: this is a new grant, not A's lease adopted.
    assert!(b.fencing_token() > first_token, "A's lease was adopted");
    b.release().await.unwrap();
    locks.shutdown().await;
}

/// Past the keeper's retry of what it owed (250 ms after a failure), another client asks for
/// `job`: it must not be granted while `b` believes it holds it.
async fn nobody_else_while_believed(env: &Env, b: &mongolock::LockGuard) {
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let other = env.other_client().await;
    let taken = other.mutex("job").try_acquire().await.unwrap();
    assert!(
        b.is_lost() || taken.is_none(),
        "another client was granted the lock while B believed it held it"
    );
    drop(taken);
    other.shutdown().await;
}

/// The same after a guard that was dropped, whose release (left to the background) failed.
#[tokio::test]
async fn emulator_only_asking_again_after_a_lost_guards_failed_release_is_safe() {
    let Some(env) = emulator_env("owed_lost_release").await else {
        return;
    };
    let locks = named_client(&env, "owed_lost_release", secs(5)).await;
    let mutex = locks.mutex("job").lock_id("svc").ttl(secs(6));
    let a = mutex.acquire().await.unwrap();
    // Dropped: its release goes to the background, and fails there.
    fail_a_release_twice(&env, "owed_lost_release").await;
    drop(a);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = mutex
        .try_acquire()
        .await
        .unwrap()
        .expect("the lock is this lock id's");
    nobody_else_while_believed(&env, &b).await;
    b.release().await.unwrap();
    locks.shutdown().await;
}

/// Whether `lock_id` holds `resource` on the server, read straight from the collection.
async fn held_by(env: &common::Proxied, resource: &str, lock_id: &str) -> bool {
    let status = env
        .direct
        .status(&mongolock::Filter::default())
        .await
        .unwrap();
    status
        .iter()
        .any(|s| s.resource() == resource && s.lock_id() == lock_id && !s.is_expired())
}

/// A multi-lock member's attempt is applied on the server but its reply is lost, and the
/// withdrawal of that attempt fails too (the same network trouble). The next round, under
/// the same lock id, must not return a set whose member that owed withdrawal removes later.
#[tokio::test]
async fn emulator_only_a_multi_lock_never_keeps_a_member_its_own_owed_withdrawal_removes() {
    let Some(env) = common::proxied("owed_withdrawal").await else {
        return;
    };
    let locks = LockClient::builder(env.cut_off.collection().clone())
        .command_timeout(Duration::from_millis(300))
        .build()
        .expect("valid settings");
    let set = locks.multi(["a", "b"]).lock_id("the-set").ttl(secs(6));
    let acquiring = tokio::spawn(async move { set.acquire_timeout(secs(30)).await });
    // The member's attempt lands; then the client is cut off before it hears of it, and
    // before its withdrawal gets through.
    let landed = async {
        while !held_by(&env, "a", "the-set").await {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(secs(10), landed)
        .await
        .expect("the attempt landed");
    env.proxy.reset_connections();
    env.proxy.refuse_new();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    env.proxy.heal();
    let guard = acquiring
        .await
        .unwrap()
        .unwrap()
        .expect("the set is free: it is granted");
    // Past the keeper's retries of anything owed.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let taken = env.direct.mutex("a").try_acquire().await.unwrap();
    assert!(
        guard.is_lost() || taken.is_none(),
        "another client holds a member while the set says it is held"
    );
    drop(taken);
    guard.release().await.unwrap();
}
