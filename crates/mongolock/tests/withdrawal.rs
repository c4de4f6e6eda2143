//! An attempt whose outcome was ever unknown is withdrawn when its waiter stops, so a late
//! copy of it is never granted; the record of withdrawn attempts is bounded without ever
//! letting one through (past its bound the resource is sealed); and a withdrawal that fails
//! is retried rather than reported as bad input.
//!
//! They need the emulator's fail points, so they are named `emulator_only_`.

use std::time::Duration;

use bson::{Document, doc};
use mongolock::{AcquireRequest, Attempt, ErrorKind, Filter, LockClient, LockDetails};
use mongolock_testkit::TestServer;

async fn fail_point(server: &TestServer, mode: bson::Bson, data: Document) {
    server
        .client()
        .database("admin")
        .run_command(doc! { "configureFailPoint": "failCommand", "mode": mode, "data": data })
        .await
        .expect("configureFailPoint");
}

async fn client_named(server: &TestServer, app_name: &str, db: &str) -> LockClient {
    let mut options = mongodb::options::ClientOptions::parse(server.uri())
        .await
        .expect("uri");
    options.app_name = Some(app_name.to_owned());
    let client = mongodb::Client::with_options(options).expect("client");
    LockClient::new(client.database(db).collection("locks"))
}

#[tokio::test]
async fn emulator_only_a_late_copy_of_an_attempt_refused_on_retry_is_never_granted() {
    let server = TestServer::start().await.expect("emulator");
    let db = "late_copy";
    let direct = LockClient::new(server.new_client().database(db).collection("locks"));
    // The holder's lock ends by its TTL at 1.5 s; nothing renews it.
    let _held = direct
        .xlock(
            "r",
            "holder",
            LockDetails::default().ttl(Duration::from_millis(1_500)),
        )
        .await
        .expect("held");
    let waiter = LockClient::builder(
        client_named(&server, "waiter", db)
            .await
            .collection()
            .clone(),
    )
    .command_timeout(Duration::from_millis(300))
    .build()
    .expect("valid settings");
    // The waiter's first attempt sits on the server for 2.5 s: the client times out, the
    // retry of the same attempt is refused (held), and the waiter gives up at 1 s. The first
    // copy then runs after the holder's lock expired.
    fail_point(
        &server,
        bson::bson!({ "times": 1 }),
        doc! {
            "failCommands": ["findAndModify"], "appName": "waiter",
            "blockConnection": true, "blockTimeMS": 2_500,
        },
    )
    .await;
    let got = waiter
        .mutex("r")
        .ttl(Duration::from_secs(20))
        .acquire_timeout(Duration::from_secs(1))
        .await
        .expect("no error");
    assert!(got.is_none(), "held by the holder until 1.5 s");
    waiter.shutdown().await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let held = direct
        .status(&Filter::default().resource("r"))
        .await
        .expect("status");
    assert!(
        held.iter().all(|s| s.is_expired()),
        "the late copy of a given-up attempt was granted: {held:?}"
    );
}

#[tokio::test]
async fn emulator_only_many_withdrawals_never_let_an_old_one_through() {
    let server = TestServer::start().await.expect("emulator");
    let locks = LockClient::new(server.client().database("tombstones").collection("locks"));
    let first = AcquireRequest::exclusive("r", "w-0", LockDetails::default());
    assert!(!locks.release_attempt(&first).await.expect("withdrawn"));
    for i in 1..=40 {
        let request = AcquireRequest::exclusive("r", format!("w-{i}"), LockDetails::default());
        locks.release_attempt(&request).await.expect("withdrawn");
    }
    assert_eq!(
        locks.acquire(&first).await.expect("attempt"),
        Attempt::Withdrawn,
        "an attempt withdrawn 40 withdrawals ago was granted"
    );
}

/// The number of tombstones a resource keeps, read from its document.
async fn tombstones(locks: &LockClient, resource: &str) -> usize {
    let stored = (locks.collection().find_one(doc! { "_id": resource }).await)
        .expect("read")
        .expect("the document");
    stored.get_array("released").map_or(0, Vec::len)
}

/// Past `MAX_TOMBSTONES` withdrawals in force, a resource is sealed instead of growing: every
/// attempt is refused with a typed error until the last withdrawn one can no longer land,
/// late copies included; locks held stay held; the document stays bounded.
#[tokio::test]
async fn emulator_only_a_resource_keeps_a_bounded_record_and_seals_past_it() {
    let server = TestServer::start().await.expect("emulator");
    let locks = LockClient::new(server.client().database("sealed").collection("locks"));
    let held = locks
        .xlock("r", "holder", LockDetails::default())
        .await
        .expect("granted");
    let withdraw = |i: usize| {
        let locks = locks.clone();
        async move {
            let request = AcquireRequest::exclusive("r", format!("w-{i}"), LockDetails::default());
            locks.release_attempt(&request).await.expect("withdrawn");
            request
        }
    };
    for i in 0..mongolock::MAX_TOMBSTONES {
        let _ = withdraw(i).await;
    }
    assert_eq!(tombstones(&locks, "r").await, mongolock::MAX_TOMBSTONES);
    // One more: the resource is sealed rather than grown.
    let sealing = withdraw(mongolock::MAX_TOMBSTONES).await;
    for i in 0..50 {
        let _ = withdraw(mongolock::MAX_TOMBSTONES + 1 + i).await;
    }
    assert_eq!(tombstones(&locks, "r").await, mongolock::MAX_TOMBSTONES + 1);
    // A new attempt: a typed refusal, with when it ends.
    let error = locks
        .xlock("r", "fresh", LockDetails::default())
        .await
        .expect_err("sealed");
    let ErrorKind::Sealed { until, .. } = error.kind() else {
        panic!("{error:?}")
    };
    assert!(until.timestamp_millis() > bson::DateTime::now().timestamp_millis());
    // A waiting acquire does not wait the seal out: it returns the same refusal at once
    // (the seal lasts minutes; the caller decides whether to come back).
    let waited = tokio::time::timeout(Duration::from_secs(5), locks.mutex("r").acquire())
        .await
        .expect("a waiting acquire returns at once")
        .expect_err("sealed");
    assert!(
        matches!(waited.kind(), ErrorKind::Sealed { .. }),
        "{waited:?}"
    );
    // The late copy of the attempt folded into the seal is refused too.
    assert!(matches!(
        locks.acquire(&sealing).await.expect("attempt"),
        Attempt::Sealed { .. }
    ));
    // The lock granted before stays held, and is released as usual.
    let status = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].fencing_token(), held.fencing_token());
    assert!(locks.release(&held).await.unwrap());
    // Once every tombstone it stands for has ended, the resource takes attempts again.
    server.clock().advance(Duration::from_secs(5 * 60 + 1));
    let grant = locks
        .xlock("r", "fresh", LockDetails::default())
        .await
        .expect("the seal has ended");
    assert!(locks.release(&grant).await.unwrap());
}

#[tokio::test]
async fn emulator_only_a_withdrawal_left_where_no_runtime_runs_is_sent_when_the_client_acts_again()
{
    let server = TestServer::start().await.expect("emulator");
    let db = "withdrawal_no_runtime";
    let rival = LockClient::new(server.new_client().database(db).collection("locks"));
    let _busy = rival
        .mutex("busy")
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .expect("busy");
    // The waiter holds no lease, so its keeper has no renewing task to start chores from.
    let waiter = client_named(&server, "waiter", db).await;
    // Its attempt on r sits on the server for 1.5 s, then grants r (nobody holds it).
    fail_point(
        &server,
        bson::bson!({ "times": 1 }),
        doc! {
            "failCommands": ["findAndModify"], "appName": "waiter",
            "blockConnection": true, "blockTimeMS": 1_500,
        },
    )
    .await;
    let mut acquire = Box::pin({
        let waiter = waiter.clone();
        async move {
            waiter
                .mutex("r")
                .ttl(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut acquire)
            .await
            .is_err(),
        "the attempt is held up on the server"
    );
    // Dropped where no runtime runs: the withdrawal cannot be sent from there.
    std::thread::spawn(move || drop(acquire))
        .join()
        .expect("thread");
    // The late copy lands and grants r to nobody.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    // The waiter acts again, taking no lease (busy is held by the rival).
    let refused = waiter.mutex("busy").try_acquire().await.expect("no error");
    assert!(refused.is_none(), "busy is held by the rival");
    // The withdrawal must go out now: the grant is withdrawn, and the rival gets r long
    // before the 30 s TTL.
    let got = rival
        .mutex("r")
        .acquire_timeout(Duration::from_secs(5))
        .await
        .expect("no error");
    assert!(
        got.is_some(),
        "the dropped attempt's grant on r was never withdrawn"
    );
}

/// A waiting acquire never waits for a release its client owes past its own timeout: the
/// dropped guard's release of the same lock id sits on the server for 4 s, and
/// `acquire_timeout(1 s)` gives up at its time, sending nothing (it used to wait for the
/// release and then be granted, 3 s past its timeout). The debt is still paid: once the
/// release is through, the lock id is granted.
#[tokio::test]
async fn emulator_only_a_timeout_is_kept_while_an_owed_release_is_on_its_way() {
    let server = TestServer::start().await.expect("emulator");
    let db = "owed_release";
    let locks = client_named(&server, "owes", db).await;
    let job = || {
        locks
            .mutex("r")
            .lock_id("worker")
            .ttl(Duration::from_secs(20))
    };
    let guard = job().acquire().await.expect("granted");
    fail_point(
        &server,
        bson::bson!({ "times": 1 }),
        doc! {
            "failCommands": ["findAndModify"], "appName": "owes",
            "blockConnection": true, "blockTimeMS": 4_000,
        },
    )
    .await;
    drop(guard);
    // The release is on its way (held by the fail point) before the next acquire begins.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let got = tokio::time::timeout(
        Duration::from_secs(20),
        job().acquire_timeout(Duration::from_secs(1)),
    )
    .await
    .expect("returned within the hang guard")
    .expect("no error");
    assert!(
        got.is_none(),
        "waited for the owed release past its timeout"
    );
    // The fail point really held the release: the entry is still there.
    let direct = LockClient::new(server.new_client().database(db).collection("locks"));
    let held = direct
        .status(&Filter::default().resource("r"))
        .await
        .expect("status");
    assert_eq!(held.len(), 1, "the release was not held: {held:?}");
    let later = job().acquire_timeout(Duration::from_secs(10)).await;
    let later = later
        .expect("no error")
        .expect("granted once the release is through");
    assert!(later.fencing_token() > held[0].fencing_token());
    later.release().await.expect("released");
    locks.shutdown().await;
}

/// A `release_attempt` of unknown outcome stays owed: the client's next attempt of the lock
/// id on the resource sends the withdrawal first, so it is never answered "already held"
/// with the grant that withdrawal ends (whose late copy would then end it under a holder
/// who believes; found by the model at its deep bound).
#[tokio::test]
async fn emulator_only_a_doubted_release_attempt_is_sent_before_the_next_attempt() {
    let server = TestServer::start().await.expect("emulator");
    let db = "doubted_withdrawal";
    let locks = client_named(&server, "doubts", db).await;
    let request = AcquireRequest::exclusive("r", "job", LockDetails::default());
    let Attempt::Granted(first) = locks.acquire(&request).await.expect("no error") else {
        panic!("granted");
    };
    fail_point(
        &server,
        bson::bson!("alwaysOn"),
        doc! { "failCommands": ["findAndModify"], "appName": "doubts", "closeConnection": true },
    )
    .await;
    let error = locks.release_attempt(&request).await.expect_err("cut off");
    assert!(error.is_outcome_unknown(), "{error:?}");
    fail_point(&server, bson::bson!("off"), doc! {}).await;
    // The withdrawal never reached the server: the grant is still there.
    let direct = LockClient::new(server.new_client().database(db).collection("locks"));
    let held = direct
        .status(&Filter::default().resource("r"))
        .await
        .expect("status");
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].fencing_token(), first.fencing_token());
    let next = locks
        .xlock("r", "job", LockDetails::default())
        .await
        .expect("granted");
    assert!(
        next.is_new() && next.fencing_token() > first.fencing_token(),
        "answered with the grant its own withdrawal ends: {next:?}"
    );
    locks.shutdown().await;
}
