//! Late copies: a request that reaches the server after its sender gave up on it (it timed
//! out, and sent the same attempt again) is executed then. Once an attempt's outcome was
//! ever unknown, ending its grant leaves the attempt unusable (a tombstone), so a late copy
//! of it is refused instead of granting a lock that nobody keeps.
//!
//! Every late copy here is held on the wire by the fault proxy and delivered to the server
//! after the test did what the copy must not undo; each test asserts that the copy was not
//! delivered before that, and that it then ran (the server's reply to it, recorded by the
//! proxy, says `ok: 1`). A command held on the server instead (`failCommand`'s
//! `blockConnection`) would not do: held past its `maxTimeMS`, which every copy carries, it
//! fails without running, and such a test passes whether or not the copy is refused.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::Document;
use common::{Proxied, secs};
use mongolock::{AcquireRequest, Attempt, Filter, LockClient, LockDetails};
use mongolock_testkit::FaultProxy;
use mongolock_testkit::faults::proxy::{RequestFault, RequestRule, Requests};

/// A client through `proxy` on the database `db`, with commands limited to 300 ms: it times
/// out on a request the proxy holds, and sends the next copy on another connection.
fn impatient_client(proxy: &FaultProxy, db: &str) -> LockClient {
    let client = mongodb::Client::with_options(proxy.client_options()).unwrap();
    LockClient::builder(client.database(db).collection("locks"))
        .command_timeout(Duration::from_millis(300))
        .build()
        .expect("valid settings")
}

/// Holds the next `times` `command`s that go through `proxy` on their way for `hold`, then
/// delivers each to the server on a connection of its own, where it runs whatever its sender
/// did meanwhile (its `maxTimeMS` counts from then). With `cut_after`, the proxy resets the
/// sender's connection that long after it took the request out, and the sender cannot know
/// whether it ran (the driver finds the server again at its next heartbeat, half a second
/// later at most: then the client may repeat the write); without, the sender waits for its
/// own timeout. The rule records the server's reply to each late copy.
fn deliver_late(
    proxy: &FaultProxy,
    command: &str,
    times: u64,
    hold: Duration,
    cut_after: Option<Duration>,
) -> RequestRule {
    proxy.fault_requests(
        Requests::named(&[command]).times(times),
        RequestFault::Late { hold, cut_after },
    )
}

/// As [`deliver_late`], cutting the sender's connection 50 ms after each request was held.
fn deliver_late_and_cut(
    proxy: &FaultProxy,
    command: &str,
    times: u64,
    hold_ms: u64,
) -> RequestRule {
    let hold = Duration::from_millis(hold_ms);
    deliver_late(proxy, command, times, hold, Some(Duration::from_millis(50)))
}

/// The late copies have not reached the server yet: what the test did meanwhile came first.
/// (Otherwise a copy met the state before it, and the test would prove nothing.)
fn not_delivered_yet(rule: &RequestRule) {
    assert!(rule.applied() >= 1, "no request was held");
    assert_eq!(
        rule.delivered(),
        0,
        "a late copy reached the server before the test was ready for it"
    );
}

/// Waits (at most half a minute) until the `times` copies `rule` held were delivered and
/// answered, and asserts that each ran on the server (`ok: 1`); returns the replies.
async fn late_copies_ran(rule: &RequestRule, times: usize) -> Vec<Document> {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    while rule.late_replies().len() < times && tokio::time::Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let replies = rule.late_replies();
    assert_eq!(rule.applied(), times as u64, "requests held");
    assert_eq!(replies.len(), times, "late copies answered: {replies:?}");
    for reply in &replies {
        let ok = reply
            .get("ok")
            .and_then(bson::Bson::as_f64)
            .or_else(|| reply.get("ok").and_then(|ok| ok.as_i32().map(f64::from)));
        assert_eq!(ok, Some(1.0), "the late copy did not run: {reply:?}");
    }
    replies
}

/// The locks on `job`, as the client straight to the server sees them.
async fn held_on_job(direct: &LockClient) -> Vec<mongolock::LockStatus> {
    direct
        .status(&Filter::default().resource("job"))
        .await
        .unwrap()
}

/// Warms `locks` up (its connection pool, the server found): a lock taken and released,
/// awaited, so that nothing of it is left to send.
async fn warm(locks: &LockClient) {
    let guard = locks.mutex("warm").acquire().await.unwrap();
    guard.release().await.unwrap();
}

/// A guard's attempt timed out and was sent again (granted); the guard is released; then the
/// first copy runs. It must not grant the lock again: another client can take it.
#[tokio::test]
async fn emulator_only_a_late_copy_of_a_guards_attempt_grants_nothing_after_release() {
    let Some(Proxied {
        server: _server,
        proxy,
        direct,
        ..
    }) = common::proxied("late_guard").await
    else {
        return;
    };
    let locks = impatient_client(&proxy, "late_guard");
    warm(&locks).await;
    let late = deliver_late(&proxy, "findAndModify", 1, secs(2), None);
    let guard = (locks.mutex("job").ttl(secs(6)))
        .acquire_timeout(secs(10))
        .await
        .unwrap()
        .expect("the repeated attempt is granted");
    guard.release().await.expect("released while held");
    not_delivered_yet(&late);
    late_copies_ran(&late, 1).await;
    let held = direct.status(&Filter::default()).await.unwrap();
    assert!(
        held.is_empty(),
        "the late copy granted a lock nobody keeps: {held:?}"
    );
    assert!(direct.mutex("job").try_acquire().await.unwrap().is_some());
    direct.shutdown().await;
    locks.shutdown().await;
}

/// The low-level calls: `xlock` times out, the repeated `xlock` is granted, `unlock` returns
/// 1; the late first copy must not hold a lock (here without TTL: for ever).
#[tokio::test]
async fn emulator_only_a_late_copy_of_a_repeated_xlock_grants_nothing_after_unlock() {
    let Some(Proxied {
        server: _server,
        proxy,
        direct,
        ..
    }) = common::proxied("late_xlock").await
    else {
        return;
    };
    let locks = impatient_client(&proxy, "late_xlock");
    warm(&locks).await;
    let late = deliver_late(&proxy, "findAndModify", 1, secs(2), None);
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
    not_delivered_yet(&late);
    late_copies_ran(&late, 1).await;
    let held = direct.status(&Filter::default()).await.unwrap();
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
    let Some(Proxied {
        server: _server,
        proxy,
        direct,
        ..
    }) = common::proxied("late_request").await
    else {
        return;
    };
    let locks = impatient_client(&proxy, "late_request");
    warm(&locks).await;
    let late = deliver_late(&proxy, "findAndModify", 1, secs(2), None);
    let request = AcquireRequest::exclusive("job", "batch-2", LockDetails::default());
    let error = locks.acquire(&request).await.expect_err("timed out");
    assert!(error.is_outcome_unknown(), "{error:?}");
    let Attempt::Granted(grant) = locks.acquire(&request).await.unwrap() else {
        panic!("the repeated request is granted")
    };
    assert_eq!(grant.lock_id(), "batch-2");
    assert!(locks.release_attempt(&request).await.unwrap());
    not_delivered_yet(&late);
    late_copies_ran(&late, 1).await;
    let held = direct.status(&Filter::default()).await.unwrap();
    assert!(held.is_empty(), "{held:?}");
    assert_eq!(locks.acquire(&request).await.unwrap(), Attempt::Withdrawn);
    locks.shutdown().await;
}

/// A waiting call sends its attempt again after a failed send (here the connection is cut
/// while the first copy is held on its way): the repeat is granted, and the first copy lands
/// after the release. It must be refused: the release retires the attempt.
#[tokio::test]
async fn emulator_only_a_late_copy_of_an_attempt_the_client_repeated_itself_grants_nothing() {
    let Some(Proxied {
        server: _server,
        proxy,
        cut_off: locks,
        direct,
    }) = common::proxied("late_repeat").await
    else {
        return;
    };
    warm(&locks).await;
    let late = deliver_late_and_cut(&proxy, "findAndModify", 1, 2_000);
    let guard = (locks.mutex("job").ttl(secs(6)))
        .acquire_timeout(secs(10))
        .await
        .unwrap()
        .expect("the repeated copy is granted");
    guard.release().await.expect("released while held");
    not_delivered_yet(&late);
    late_copies_ran(&late, 1).await;
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
    let Some(Proxied {
        server: _server,
        proxy,
        cut_off: locks,
        direct,
    }) = common::proxied("late_refused").await
    else {
        return;
    };
    warm(&locks).await;
    let holder = direct.mutex("job").ttl(secs(6)).acquire().await.unwrap();
    let late = deliver_late_and_cut(&proxy, "findAndModify", 1, 3_000);
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
    not_delivered_yet(&late);
    late_copies_ran(&late, 1).await;
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
    let Some(Proxied {
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
    let late = deliver_late_and_cut(&proxy, "findAndModify", 1, 2_000);
    let error = locks
        .xlock("job", "caller", details)
        .await
        .expect_err("the lock is held, or the outcome unknown");
    assert!(
        error.is_already_locked() || error.is_outcome_unknown(),
        "{error:?}"
    );
    assert_eq!(direct.unlock("holder").await.unwrap(), 1);
    not_delivered_yet(&late);
    late_copies_ran(&late, 1).await;
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
    let Some(Proxied {
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
    let late = deliver_late_and_cut(&proxy, "update", 1, 2_000);
    assert_eq!(
        locks.unlock("batch").await.unwrap(),
        1,
        "the repeat removed it"
    );
    let second = locks.xlock("job", "batch", details).await.unwrap();
    assert!(second.fencing_token() > first.fencing_token());
    not_delivered_yet(&late);
    late_copies_ran(&late, 1).await;
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
    let Some(Proxied {
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
    let late = deliver_late_and_cut(&proxy, "update", 2, 2_000);
    let error = locks.unlock("batch").await.expect_err("both copies cut");
    assert!(error.is_outcome_unknown(), "{error:?}");
    let again = locks.xlock("job", "batch", details).await.unwrap();
    assert_eq!(
        again.fencing_token(),
        first.fencing_token(),
        "held from before"
    );
    not_delivered_yet(&late);
    late_copies_ran(&late, 2).await;
    let held = held_on_job(&direct).await;
    assert!(
        held.iter()
            .any(|lock| lock.fencing_token() == first.fencing_token()),
        "the late unlock removed a grant its caller was told it holds: {held:?}"
    );
}

/// A waiting call's later attempt (after a wake-up) held on the wire past the call's
/// timeout: the call gives up at its own time, not at the command time limit (10 s here),
/// and never returns a grant that came after it gave up. The attempt, whose outcome is then
/// unknown, is withdrawn in the background, so its copy, delivered after the call returned,
/// grants nothing. (The call's first attempt is made to the end, as a single attempt is.)
#[tokio::test]
async fn emulator_only_a_waiting_call_gives_up_at_its_timeout_while_its_attempt_is_on_the_wire() {
    let Some(Proxied {
        server: _server,
        proxy,
        cut_off: locks,
        direct,
    }) = common::proxied("late_wait").await
    else {
        return;
    };
    warm(&locks).await;
    let holder = direct.mutex("job").ttl(secs(20)).acquire().await.unwrap();
    let waiting = tokio::spawn({
        let locks = locks.clone();
        async move {
            let job = locks.mutex("job").ttl(secs(20));
            tokio::time::timeout(secs(30), job.acquire_timeout(secs(2))).await
        }
    });
    // The first attempt was refused (the waiter is in line); hold the next one.
    let give_up = tokio::time::Instant::now() + secs(10);
    while direct.status(&Filter::default()).await.unwrap().is_empty()
        && tokio::time::Instant::now() < give_up
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let late = deliver_late(&proxy, "findAndModify", 1, secs(4), None);
    holder.release().await.unwrap();
    let got = waiting
        .await
        .unwrap()
        .expect("returned within the hang guard");
    // Returned before its attempt even reached the server: at its own timeout.
    not_delivered_yet(&late);
    assert!(
        matches!(got, Ok(None)),
        "expected a timeout, got {:?}",
        got.map(|g| g.map(|g| g.fencing_token()))
    );
    // The fault happened: the held attempt ran on the server once delivered.
    late_copies_ran(&late, 1).await;
    // And granted nothing that stays: the withdrawal came first, or removes it.
    let give_up = tokio::time::Instant::now() + secs(15);
    while !held_on_job(&direct).await.is_empty() && tokio::time::Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held = held_on_job(&direct).await;
    assert!(held.is_empty(), "a grant nobody keeps: {held:?}");
    assert!(direct.mutex("job").try_acquire().await.unwrap().is_some());
    direct.shutdown().await;
    locks.shutdown().await;
}

/// The lock ids of the places in `job`'s line, in their order, read straight from the server.
async fn line_on_job(server: &mongolock_testkit::TestServer, db: &str) -> Vec<String> {
    let locks = server
        .new_client()
        .database(db)
        .collection::<Document>("locks");
    let doc = locks.find_one(bson::doc! { "_id": "job" }).await.unwrap();
    let queue = doc
        .as_ref()
        .and_then(|doc| doc.get_array("queue").ok())
        .cloned()
        .unwrap_or_default();
    queue
        .iter()
        .filter_map(|place| {
            place
                .as_document()?
                .get_str("lockId")
                .ok()
                .map(str::to_owned)
        })
        .collect()
}

/// Waits (at most 15 s) until `job`'s line is `expected`.
async fn line_becomes(server: &mongolock_testkit::TestServer, db: &str, expected: &[&str]) {
    let give_up = tokio::time::Instant::now() + secs(15);
    while line_on_job(server, db).await != expected && tokio::time::Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(line_on_job(server, db).await, expected, "the line");
}

/// Issue 40: a place in line is its call's, not its lock id's. A waiting call of the lock id
/// `svc` gives up; its `leave_line` is held on the wire and the connection cut, so it is
/// sent again (answered: the place goes). The lock id's next call then joins the line, and
/// another waiter (`other`) behind it. The first `leave_line` copy lands after
/// both: it must leave the next call's place where it is, so that the next call is served
/// before the waiter that came after it. Before places named their call, the late copy
/// took out every place of its lock id: the next call joined again at the end, behind
/// `other`, which was granted first.
#[tokio::test]
async fn emulator_only_a_late_leave_line_leaves_the_lock_ids_next_call_in_its_place() {
    let db = "late_leave";
    let Some(Proxied {
        server,
        proxy,
        cut_off: locks,
        direct,
    }) = common::proxied(db).await
    else {
        return;
    };
    warm(&locks).await;
    let holder = direct.mutex("job").ttl(secs(20)).acquire().await.unwrap();
    // `leave_line`: the only `update` of one statement on `job` here (a place's refresh comes
    // a third of the TTL after it joined, long after this call gives up).
    let late = proxy.fault_requests(
        Requests::matching(|command| {
            command.get_str("update").is_ok()
                && command
                    .get_array("updates")
                    .ok()
                    .and_then(|updates| updates.first()?.as_document()?.get_document("q").ok())
                    .is_some_and(|q| q.get_str("_id") == Ok("job"))
        })
        .times(1),
        RequestFault::Late {
            hold: secs(5),
            cut_after: Some(Duration::from_millis(50)),
        },
    );
    let svc = || locks.mutex("job").lock_id("svc").ttl(secs(20));
    let first = svc().acquire_timeout(Duration::from_millis(500)).await;
    assert!(matches!(first, Ok(None)), "the first call gives up");
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let wait = |handle: mongolock::Mutex, name: &'static str| {
        let served = served.clone();
        tokio::spawn(async move {
            let guard = handle
                .acquire_timeout(secs(40))
                .await
                .unwrap()
                .expect("served in its turn");
            served.lock().unwrap().push(name);
            guard.release().await.unwrap();
        })
    };
    // The first call's place goes once a later copy of its `leave_line` is answered (the
    // driver's repeat, or the client's chores task); only then does the next call of `svc`
    // join the line, then `other` behind it.
    line_becomes(&server, db, &[]).await;
    let next = wait(svc(), "svc");
    line_becomes(&server, db, &["svc"]).await;
    let other = wait(direct.mutex("job").lock_id("other").ttl(secs(20)), "other");
    line_becomes(&server, db, &["svc", "other"]).await;
    not_delivered_yet(&late);
    late_copies_ran(&late, 1).await;
    assert_eq!(
        line_on_job(&server, db).await,
        ["svc", "other"],
        "the late leave_line took the next call's place"
    );
    holder.release().await.unwrap();
    next.await.unwrap();
    other.await.unwrap();
    assert_eq!(
        *served.lock().unwrap(),
        ["svc", "other"],
        "served in arrival order"
    );
    direct.shutdown().await;
    locks.shutdown().await;
}

/// Whether `command` is an adoption (`keepalive::adopt_command`): an `update` of `job` whose
/// stage marks the resumed entry `adopted`.
fn is_adoption_on_job(command: &Document) -> bool {
    let Some(statement) = (command.get_str("update").ok())
        .and_then(|_| command.get_array("updates").ok()?.first()?.as_document())
    else {
        return false;
    };
    let on_job = (statement.get_document("q")).is_ok_and(|q| q.get_str("_id") == Ok("job"));
    let adopted = (statement.get_array("u").ok())
        .and_then(|u| u.first()?.as_document()?.get_document("$set").ok())
        .and_then(|set| {
            set.get_document("exclusive")
                .ok()?
                .get_array("$mergeObjects")
                .ok()
        })
        .and_then(|merged| merged.get(1)?.as_document()?.get_bool("adopted").ok());
    on_job && adopted == Some(true)
}

/// Issue 40: an adoption takes out its own call's place in line only. The lease of `svc`
/// outlives its process; the restarted process's first call is answered "already held"
/// and sends its adoption, whose every copy is held on the wire (the connection cut), and
/// gives up. The lock id's next call is answered "already held" too, and stands in line,
/// `other` behind it; its adoptions are refused (a mongos that cannot reach the shard), so
/// it waits for the lease to end. The first call's adoption copies land then, while the
/// lease is live: they adopt it, and must leave the next call's place where it is, so
/// that once the lease ends the next call is served before the waiter that came after
/// it. Before, an adoption took out every place of its lock id: the next call joined again
/// behind `other`, which was granted first.
#[tokio::test]
async fn emulator_only_a_late_adoption_leaves_the_lock_ids_next_call_in_its_place() {
    use std::sync::atomic::{AtomicU8, Ordering};
    let db = "late_adopt";
    let Some(Proxied {
        server,
        proxy,
        cut_off: locks,
        direct,
    }) = common::proxied(db).await
    else {
        return;
    };
    warm(&locks).await;
    // The adoptions of the first call (phase 1) are held and land late; those of the next
    // (phase 2) are refused.
    let phase = Arc::new(AtomicU8::new(1));
    let in_phase = |n: u8| {
        let phase = phase.clone();
        Requests::matching(move |command| {
            phase.load(Ordering::SeqCst) == n && is_adoption_on_job(command)
        })
    };
    let late = proxy.fault_requests(
        in_phase(1),
        RequestFault::Late {
            hold: secs(5),
            cut_after: Some(Duration::from_millis(50)),
        },
    );
    let refused = proxy.fault_requests(in_phase(2), RequestFault::Refuse { code: 6 });
    // The lease of `svc`, granted to a process that died: nobody renews it.
    let ttl = secs(10);
    let _lease = direct
        .xlock("job", "svc", LockDetails::default().ttl(ttl))
        .await
        .unwrap();
    let svc = || locks.mutex("job").lock_id("svc").ttl(ttl);
    let first = svc().acquire_timeout(Duration::from_millis(700)).await;
    assert!(
        !matches!(first, Ok(Some(_))),
        "the first call resumed the lease"
    );
    assert!(late.applied() >= 1, "the first call sent no adoption");
    // Its place goes with its `leave_line`; then the next call stands in line, `other`
    // behind it.
    phase.store(2, Ordering::SeqCst);
    line_becomes(&server, db, &[]).await;
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let wait = |handle: mongolock::Mutex, name: &'static str| {
        let served = served.clone();
        tokio::spawn(async move {
            let guard = handle
                .acquire_timeout(secs(60))
                .await
                .unwrap()
                .expect("served in its turn");
            served.lock().unwrap().push(name);
            guard.release().await.unwrap();
        })
    };
    let next = wait(svc(), "svc");
    line_becomes(&server, db, &["svc"]).await;
    let other = wait(direct.mutex("job").lock_id("other").ttl(ttl), "other");
    line_becomes(&server, db, &["svc", "other"]).await;
    assert!(refused.applied() >= 1, "the next call sent no adoption");
    not_delivered_yet(&late);
    // The late copies ran while the lease was live: each adopted it.
    let copies = late.applied() as usize;
    for reply in late_copies_ran(&late, copies).await {
        assert_eq!(
            reply.get("n").and_then(bson::Bson::as_i32),
            Some(1),
            "a late copy found the lease gone: {reply:?}"
        );
    }
    assert_eq!(
        line_on_job(&server, db).await,
        ["svc", "other"],
        "the late adoption took the next call's place"
    );
    next.await.unwrap();
    other.await.unwrap();
    assert_eq!(
        *served.lock().unwrap(),
        ["svc", "other"],
        "served in arrival order"
    );
    direct.shutdown().await;
    locks.shutdown().await;
}

/// Issue 40: an adoption takes over only the lease as its waiting attempt was answered
/// (the entry naming the keeper the "already held" reply showed), or one it adopted
/// already (its own keeper). The lease of `svc` outlives its first process (a guard's,
/// naming that process's keeper); the second process's call is answered "already held" and
/// sends its adoption, whose every copy is held on the wire, and gives up: that process
/// dies. The third process's call is answered "already held" too, adopts the lease and
/// holds it. The second process's adoption copies land then, while the lease is live: they
/// must match nothing (the entry names the third process's keeper now), so that the third
/// process's release frees the resource. Before, the adoption's query did not ask which
/// keeper the entry named: the late copy renamed the entry to its dead keeper, the live
/// holder's release found nothing, and the resource stayed blocked until the TTL ran out
/// (found by the model checker in "two guards in line" at 0,3,0,0,2,2,0,1).
#[tokio::test]
async fn emulator_only_a_late_adoption_of_a_dead_process_leaves_its_successors_lease() {
    let db = "late_adopt_dead";
    let Some(Proxied {
        server,
        proxy,
        cut_off: second,
        direct: third,
    }) = common::proxied(db).await
    else {
        return;
    };
    warm(&second).await;
    warm(&third).await;
    let late = proxy.fault_requests(
        Requests::matching(is_adoption_on_job),
        RequestFault::Late {
            hold: secs(5),
            cut_after: Some(Duration::from_millis(50)),
        },
    );
    // The first process: granted, and gone without a release (its keeper with it).
    let ttl = secs(30);
    let first = LockClient::new(server.new_client().database(db).collection("locks"));
    let lease = (first.mutex("job").lock_id("svc").ttl(ttl))
        .acquire()
        .await
        .unwrap();
    let token = lease.fencing_token();
    std::mem::forget(lease);
    drop(first);
    // The second process: answered "already held", its adoption held on the wire; it gives
    // up, and dies.
    let gave_up = (second.mutex("job").lock_id("svc").ttl(ttl))
        .acquire_timeout(Duration::from_millis(700))
        .await;
    assert!(
        !matches!(gave_up, Ok(Some(_))),
        "the second process resumed the lease"
    );
    assert!(late.applied() >= 1, "the second process sent no adoption");
    // The third process resumes the lease (straight to the server: its adoption is not held).
    let held = (third.mutex("job").lock_id("svc").ttl(ttl))
        .acquire_timeout(secs(5))
        .await
        .unwrap()
        .expect("the third process resumes the lease");
    assert_eq!(held.fencing_token(), token, "the first process's lease");
    not_delivered_yet(&late);
    // Every copy of the second process's adoption ran while the lease was live, and matched
    // nothing.
    let copies = late.applied() as usize;
    for reply in late_copies_ran(&late, copies).await {
        assert_eq!(
            reply.get("n").and_then(bson::Bson::as_i32),
            Some(0),
            "a late adoption of the dead process took the lease over: {reply:?}"
        );
    }
    assert!(!held.is_lost(), "the third process's lease");
    held.release().await.unwrap();
    let next = (third.mutex("job").lock_id("other").ttl(ttl))
        .try_acquire()
        .await
        .unwrap();
    assert!(
        next.is_some(),
        "the resource is blocked after its holder's release: {:?}",
        held_on_job(&third).await
    );
    drop(next);
    second.shutdown().await;
    third.shutdown().await;
}
