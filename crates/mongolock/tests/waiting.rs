//! Waiting for a held lock: a waiter gets the lock the moment it frees, without loading the
//! server while it waits.
//!
//! - **Woken by the change.** On a replica set a waiter watches its resource through the
//!   client's one change stream. A lock held without TTL gives the server no time to report,
//!   so the waiter sleeps up to the safety-net re-check ([`mongolock::RECHECK`], ten seconds);
//!   released, the change wakes it and it takes the lock at once: well within a timeout
//!   shorter than the re-check.
//! - **Backoff without change streams.** A standalone server refuses change streams; the
//!   waiter still gets the lock, by retrying with a growing, jittered backoff: a few attempts,
//!   not a busy loop.
//! - **A broken stream resumes.** When the stream's `getMore` fails, the stream is reopened
//!   from where it stopped: a release made while it was broken still wakes the waiter, before
//!   the re-check would.
//! - **Quiet while held.** A waiter on a held lock (a mutex waiter, or a reader-writer
//!   lock's waiting writer) asks the server once, then again only when the resource changes
//!   or the re-check comes: a handful of commands in seconds.
//! - **Refused attempts write nothing**: no change event comes from a waiter.
//! - **Local waiters take turns.** The waiters of one client on one resource queue behind a
//!   local gate: only the head of the line asks the server. Released, the lock goes to each of
//!   them in turn.
//! - **Giving up is clean.** A wait that outlives its deadline returns `None` and leaves no
//!   trace of the waiter in the collection.
//!
//! No test asserts how fast something happens: time bounds are generous timeouts chosen so
//! that a wrong mechanism (polling instead of a wake-up, a lost wake-up) cannot meet them.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bson::{Bson, Document, doc};
use common::recorder::{Command, Recorder, recorded_client};
use futures_util::StreamExt;
use mongodb::change_stream::event::OperationType;
use mongodb::{Collection, Database};
use mongolock::{Filter, LockClient, LockDetails, RECHECK};
use mongolock_testkit::{ServerVersion, TestServer};
use tokio::time::{Instant, sleep, timeout};

/// A guard against hangs only: nothing asserts that something is this fast.
const HANG_GUARD: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// Where the tests run, and what they watch.
// ---------------------------------------------------------------------------------------

/// One test's server (an emulator of its own, or `MONGODB_URI`), database and lock client.
struct Setup {
    uri: String,
    db: Database,
    locks: LockClient,
    /// Kept alive for the test; `None` on a real server.
    server: Option<TestServer>,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn db_name(name: &str) -> String {
    format!(
        "mongolock_{name}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

impl Setup {
    /// A replica-set emulator, or the real server named by `MONGODB_URI`.
    async fn new(name: &str) -> Setup {
        if let Ok(uri) = std::env::var("MONGODB_URI")
            && !uri.is_empty()
        {
            let client = mongodb::Client::with_uri_str(&uri)
                .await
                .expect("MONGODB_URI is valid");
            let db = client.database(&db_name(name));
            db.drop().await.expect("drop the test database");
            return Setup {
                uri,
                locks: LockClient::new(db.collection("locks")),
                db,
                server: None,
            };
        }
        Self::emulator(name, false).await
    }

    /// An emulator of its own, whatever `MONGODB_URI` says: a one-member replica set, or a
    /// standalone server (no change streams).
    async fn emulator(name: &str, standalone: bool) -> Setup {
        Self::emulating(name, standalone, ServerVersion::default()).await
    }

    /// An emulator of its own that reports and behaves as `version` (on 4.4, every
    /// pipeline update is logged, and seen by change streams, as a whole document).
    async fn emulating(name: &str, standalone: bool, version: ServerVersion) -> Setup {
        let server = TestServer::builder()
            .standalone(standalone)
            .server_version(version)
            .ttl_monitor_interval(Duration::from_millis(20))
            .start()
            .await
            .expect("emulator starts");
        let db = server.client().database(&db_name(name));
        Setup {
            uri: server.uri(),
            locks: LockClient::new(db.collection("locks")),
            db,
            server: Some(server),
        }
    }

    fn collection(&self) -> Collection<Document> {
        self.db.collection("locks")
    }

    /// A lock client on a driver client of its own (its own pool, its own change stream),
    /// named `app_name` in the handshake, whose commands are recorded.
    async fn recorded(&self, app_name: &str) -> (Recorder, LockClient) {
        let (recorder, client) = recorded_client(&self.uri, Some(app_name)).await;
        let locks = LockClient::new(client.database(self.db.name()).collection("locks"));
        (recorder, locks)
    }

    /// Whether the server delivers change streams (a real standalone server does not).
    async fn has_change_streams(&self) -> bool {
        match self.collection().watch().await {
            Ok(_) => true,
            Err(error) => {
                eprintln!("skipped: change streams need a replica set ({error})");
                false
            }
        }
    }
}

/// What the waiting tests read from a recorded client.
impl Recorder {
    /// The acquire attempts sent (each is one `findAndModify`), with their send times.
    fn attempts(&self) -> Vec<Instant> {
        self.all()
            .into_iter()
            .filter(|c| c.name == "findAndModify")
            .map(|c| Instant::from_std(c.at))
            .collect()
    }

    fn count(&self, name: &str, succeeded: Option<bool>) -> usize {
        self.all()
            .iter()
            .filter(|c| c.name == name && c.succeeded == succeeded)
            .count()
    }

    /// Change streams opened: `(asked, succeeded)`.
    fn change_streams(&self) -> (usize, usize) {
        let opens: Vec<Command> = self
            .all()
            .into_iter()
            .filter(Command::opens_change_stream)
            .collect();
        let ok = opens.iter().filter(|c| c.succeeded == Some(true)).count();
        (opens.len(), ok)
    }

    /// Waits until `done` holds for the recorded commands (a hang guard, not a time bound).
    async fn wait_until(&self, what: &str, done: impl Fn(&Recorder) -> bool) {
        let started = Instant::now();
        while !done(self) {
            assert!(started.elapsed() < HANG_GUARD, "never happened: {what}");
            sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Opens the change stream of `locks` and waits until it is streaming (its first `getMore`
/// is sent only once the stream is open and reported as such), then forgets what
/// `recorder` saw. From then on a waiter of `locks` sleeps until a change or the re-check.
async fn open_stream(locks: &LockClient, recorder: &Recorder) {
    // Any wait subscribes, which starts the client's stream.
    let guard = locks
        .mutex("warm-up")
        .acquire_timeout(HANG_GUARD)
        .await
        .unwrap()
        .expect("nobody holds warm-up");
    guard.release().await.unwrap();
    recorder
        .wait_until("the change stream opens", |r| {
            r.change_streams().1 >= 1
                && r.count("getMore", None) + r.count("getMore", Some(true)) >= 1
        })
        .await;
    recorder.clear();
}

/// A fail point on the emulator (admin command `configureFailPoint`).
async fn fail_point(db: &Database, name: &str, mode: Bson, data: Document) {
    db.client()
        .database("admin")
        .run_command(doc! { "configureFailPoint": name, "mode": mode, "data": data })
        .await
        .expect("configureFailPoint");
}

/// The resource's document as relaxed extended JSON, for looking for a lock id in it.
async fn document_text(collection: &Collection<Document>, resource: &str) -> String {
    let document = collection
        .find_one(doc! { "_id": resource })
        .await
        .unwrap()
        .unwrap_or_default();
    Bson::Document(document).into_relaxed_extjson().to_string()
}

// ---------------------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------------------

/// The holder's lock has no TTL, so the server reports no time to wait and the waiter
/// sleeps up to the re-check (10 s) after its attempt: only a change can wake it sooner. It
/// gets the lock within 5 s of asking, so the release woke it.
#[tokio::test]
async fn a_waiter_is_woken_by_the_release() {
    let setup = Setup::new("wake").await;
    if !setup.has_change_streams().await {
        return;
    }
    let (recorder, waiter) = setup.recorded("waiter").await;
    open_stream(&waiter, &recorder).await;
    let _held = setup
        .locks
        .xlock("job", "holder", LockDetails::default())
        .await
        .unwrap();

    let patience = Duration::from_secs(5);
    assert!(patience < RECHECK);
    let waiting = tokio::spawn({
        let mutex = waiter.mutex("job");
        async move { mutex.acquire_timeout(patience).await }
    });
    recorder
        .wait_until("the waiter's first attempt", |r| {
            // Answered: the waiter stands in line.
            r.count("findAndModify", Some(true)) == 1
        })
        .await;
    // Held for a while: a polling waiter would ask several times by now (its backoff starts
    // at 10 ms and doubles); a waiter that sleeps until the change asks once.
    sleep(Duration::from_secs(1)).await;
    assert_eq!(
        recorder.attempts().len(),
        1,
        "the waiter asked once and slept"
    );
    assert_eq!(setup.locks.unlock("holder").await.unwrap(), 1);

    let guard = timeout(HANG_GUARD, waiting)
        .await
        .expect("acquire_timeout ends by its deadline")
        .unwrap()
        .unwrap()
        .expect("woken by the release, the waiter takes the lock before its 5 s timeout");
    assert_eq!(
        recorder.attempts().len(),
        2,
        "one more attempt: the winning one"
    );
    guard.release().await.unwrap();
}

/// On a standalone server (no change streams) waiters poll, and the line says how briskly:
/// the head, which alone can take the lock next, at most every 25 ms (backoff from 10 ms,
/// doubling, with jitter); the waiter behind it at most every 50 ms, and so on, doubling
/// with each place. Neither hammers the server, and both get the lock in turn.
#[tokio::test]
async fn without_change_streams_the_head_polls_briskly_and_the_line_slowly() {
    let setup = Setup::emulator("standalone", true).await;
    let (head_recorder, head) = setup.recorded("head").await;
    let (second_recorder, second) = setup.recorded("second").await;
    let _held = setup
        .locks
        .xlock("job", "holder", LockDetails::default())
        .await
        .unwrap();

    let head_waiting = tokio::spawn({
        let mutex = head.mutex("job");
        async move { mutex.acquire_timeout(Duration::from_secs(15)).await }
    });
    head_recorder
        .wait_until("the head's first attempt", |r| {
            // Answered: the head stands in line before the second is sent.
            r.count("findAndModify", Some(true)) >= 1
        })
        .await;
    let second_waiting = tokio::spawn({
        let mutex = second.mutex("job");
        async move { mutex.acquire_timeout(Duration::from_secs(15)).await }
    });
    second_recorder
        .wait_until("the second's first attempt", |r| {
            r.count("findAndModify", Some(true)) >= 1
        })
        .await;
    let (head_before, second_before) = (
        head_recorder.attempts().len(),
        second_recorder.attempts().len(),
    );
    sleep(Duration::from_millis(1500)).await;
    let head_polls = head_recorder.attempts().len() - head_before;
    let second_polls = second_recorder.attempts().len() - second_before;
    assert_eq!(setup.locks.unlock("holder").await.unwrap(), 1);

    for waiting in [head_waiting, second_waiting] {
        let guard = timeout(HANG_GUARD, waiting)
            .await
            .expect("acquire_timeout ends by its deadline")
            .unwrap()
            .unwrap()
            .expect("polling brings each waiter to the free lock in turn");
        guard.release().await.unwrap();
    }

    let (asked, opened) = head_recorder.change_streams();
    assert!(asked >= 1, "the waiter tried to open a change stream");
    assert_eq!(opened, 0, "a standalone server opens no change stream");
    // 1.5 s at one poll every 25 to 37 ms is about 50 polls; a busy loop on a local server
    // would make hundreds. The second waiter, at one every 50 to 75 ms, about half as many.
    assert!(
        (5..=80).contains(&head_polls),
        "the head polled {head_polls} times in 1.5 s of holding"
    );
    assert!(
        second_polls < head_polls,
        "the second waiter polled {second_polls} times, the head {head_polls}"
    );
}

/// The stream's `getMore` fails three times (a resumable error); the holder releases while
/// the stream is broken. The stream is reopened from where it stopped, so the release is
/// still delivered and wakes the waiter, before the 10 s re-check would.
#[tokio::test]
async fn emulator_only_a_waiter_is_woken_through_a_resumed_change_stream() {
    let setup = Setup::new("resume").await;
    if setup.server.is_none() {
        eprintln!("skipped: needs the emulator's fail points");
        return;
    }
    let (recorder, waiter) = setup.recorded("waiter").await;
    open_stream(&waiter, &recorder).await;
    let _held = setup
        .locks
        .xlock("job", "holder", LockDetails::default())
        .await
        .unwrap();

    let patience = Duration::from_secs(8);
    assert!(patience < RECHECK);
    let waiting = tokio::spawn({
        let mutex = waiter.mutex("job");
        async move { mutex.acquire_timeout(patience).await }
    });
    recorder
        .wait_until("the waiter's first attempt", |r| {
            // Answered: the waiter stands in line.
            r.count("findAndModify", Some(true)) == 1
        })
        .await;
    // HostUnreachable (6): resumable, and not a state-change error that would make the
    // driver drop its pool. Only the waiter's client is affected.
    fail_point(
        &setup.db,
        "failCommand",
        bson::bson!({ "times": 3 }),
        doc! { "failCommands": ["getMore"], "errorCode": 6, "appName": "waiter" },
    )
    .await;
    // The stream's read in flight waits up to ten seconds for an event: end it with one for
    // this client (a change naming its keeper, which its place in line carries), so that the
    // next read meets the fail point.
    let keeper = setup
        .collection()
        .find_one(doc! { "_id": "job" })
        .await
        .unwrap()
        .and_then(|job| {
            let queue = job.get_array("queue").ok()?.clone();
            let place = queue.first()?.as_document()?.clone();
            place.get_str("keeper").ok().map(str::to_owned)
        })
        .expect("the waiter's place names its keeper");
    setup
        .collection()
        .insert_one(doc! { "_id": "poke" })
        .await
        .unwrap();
    setup
        .collection()
        .update_one(
            doc! { "_id": "poke" },
            doc! { "$set": { "wake": format!("{keeper} 1") } },
        )
        .await
        .unwrap();
    recorder
        .wait_until("the stream's getMore fails", |r| {
            r.count("getMore", Some(false)) >= 1
        })
        .await;
    // Released while the stream is broken.
    assert_eq!(setup.locks.unlock("holder").await.unwrap(), 1);

    let guard = timeout(HANG_GUARD, waiting)
        .await
        .expect("acquire_timeout ends by its deadline")
        .unwrap()
        .unwrap()
        .expect("the resumed stream delivers the release before the 8 s timeout");
    let attempts = recorder.attempts().len();
    // The stream broke (the third failure may still be to come: a reopened stream can
    // deliver the release in its first batch, without a getMore).
    assert!(recorder.count("getMore", Some(false)) >= 1);
    let reopened: Vec<Document> = recorder
        .all()
        .into_iter()
        .filter(Command::opens_change_stream)
        .filter_map(|c| {
            let stages = c.body.get_array("pipeline").ok()?.clone();
            stages
                .first()?
                .as_document()?
                .get_document("$changeStream")
                .ok()
                .cloned()
        })
        .collect();
    assert!(
        !reopened.is_empty()
            && reopened
                .iter()
                .all(|stage| stage.contains_key("resumeAfter")
                    || stage.contains_key("startAtOperationTime")),
        "every reopen resumes where the stream stopped: {reopened:?}"
    );
    assert_eq!(
        attempts, 2,
        "the first attempt and the winning one: nothing was polled"
    );
    guard.release().await.unwrap();
}

/// A live holder (a lease with a 30 s TTL, renewed every 10 s) holds the lock while a waiter
/// waits 3 s. The server tells the waiter the lease has 30 s left; the waiter sleeps until
/// then, at most the re-check (10 s), or until the resource changes.
#[tokio::test]
async fn a_held_lock_costs_its_waiter_almost_nothing() {
    let setup = Setup::new("load").await;
    let (recorder, waiter) = setup.recorded("waiter").await;
    let streaming = setup.has_change_streams().await;
    if streaming {
        open_stream(&waiter, &recorder).await;
    }
    let holder = setup
        .locks
        .mutex("job")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();

    let waiting = tokio::spawn({
        let mutex = waiter.mutex("job");
        async move { mutex.acquire_timeout(Duration::from_secs(3)).await }
    });
    let gave_up = timeout(HANG_GUARD, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        gave_up.is_none(),
        "held for 30 s: the waiter gives up at 3 s"
    );
    let attempts = recorder.attempts().len();
    if streaming {
        // The budget: one attempt when the wait starts; then the waiter sleeps until the
        // lease could end (30 s, capped by the 10 s re-check) unless the resource changes,
        // and the only changes are the holder's renewals, every 10 s: none in these 3 s.
        // So one attempt is expected; two spare ones allow for a stream that had to reopen
        // (a reopen without continuity wakes every waiter once). A waiter that polled would
        // make dozens.
        assert!(attempts <= 3, "{attempts} attempts in 3 s of waiting");
    } else {
        // No change streams (a real standalone server): the head of the line polls at most
        // every 25 ms.
        assert!(attempts <= 120, "{attempts} attempts in 3 s of waiting");
    }
    holder.release().await.unwrap();
}

/// Like the mutex waiter above, a reader-writer lock's waiting writer stays quiet while the
/// readers hold: it announces itself (which keeps new readers out), then sleeps until the
/// readers change something or the re-check comes.
#[tokio::test]
async fn a_waiting_writer_costs_almost_nothing() {
    let setup = Setup::new("writer_load").await;
    if !setup.has_change_streams().await {
        return;
    }
    let (recorder, writer) = setup.recorded("writer").await;
    open_stream(&writer, &recorder).await;
    let reader = setup
        .locks
        .rwlock("config")
        .ttl(Duration::from_secs(30))
        .read()
        .await
        .unwrap();

    let waiting = tokio::spawn({
        let rwlock = writer.rwlock("config");
        async move { rwlock.write_timeout(Duration::from_secs(2)).await }
    });
    let gave_up = timeout(HANG_GUARD, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(gave_up.is_none(), "the reader holds for 30 s");
    // The same budget as a mutex waiter: the first attempt, plus spares for a reopened
    // stream. A writer whose own announcement woke it would ask again at once, every round
    // trip.
    let attempts = recorder.attempts().len();
    assert!(
        attempts <= 3,
        "{attempts} attempts in 2 s of waiting: is the writer woken by its own announcement?"
    );
    reader.release().await.unwrap();
}

/// A waiter writes its place in the resource's line, and nothing else: a change stream
/// opened by the test on the collection sees it join (one write) and leave when it gives up
/// (one write); its other refused attempts leave the document as it was (the holder has no
/// TTL, so there are no renewals either).
#[tokio::test]
async fn a_waiter_writes_only_its_place_in_line() {
    let setup = Setup::new("quiet").await;
    if !setup.has_change_streams().await {
        return;
    }
    let collection = setup.collection();
    let _held = setup
        .locks
        .xlock("job", "holder", LockDetails::default())
        .await
        .unwrap();
    let mut events = collection.watch().await.unwrap();

    let (recorder, waiter) = setup.recorded("waiter").await;
    let gave_up = waiter
        .mutex("job")
        .lock_id("the-waiter")
        .acquire_timeout(Duration::from_millis(1500))
        .await
        .unwrap();
    assert!(gave_up.is_none());
    assert!(
        !recorder.attempts().is_empty(),
        "the waiter did ask the server"
    );
    waiter.shutdown().await;

    // A marker, to know when every earlier change has been seen.
    collection
        .insert_one(doc! { "_id": "marker" })
        .await
        .unwrap();
    let mut before_marker = Vec::new();
    loop {
        let event = timeout(HANG_GUARD, events.next())
            .await
            .expect("the marker's event comes")
            .expect("an event")
            .expect("a change event");
        let key = event.document_key.clone().expect("a document key");
        if key == doc! { "_id": "marker" } {
            break;
        }
        before_marker.push(event);
    }
    // Two writes: it joined the line with its first attempt (its place, and nothing else),
    // and left it when it gave up (nobody else waited, so leaving woke nobody). Its other
    // attempts, its place still fresh, wrote nothing. mongod logs each as a delta of the
    // line, or as the whole document when the delta is not smaller
    // (`update/document_diff_calculator.cpp`): either way, the line is all that changed.
    assert_eq!(
        before_marker.len(),
        2,
        "the waiter's writes: {before_marker:?}"
    );
    for event in &before_marker {
        let Some(description) = event.update_description.as_ref() else {
            assert_eq!(event.operation_type, OperationType::Replace, "{event:?}");
            continue;
        };
        let mut fields: Vec<&str> = (description.updated_fields.keys())
            .map(|path| path.split('.').next().unwrap_or(path))
            .chain(description.removed_fields.iter().map(String::as_str))
            .chain((description.truncated_arrays.iter().flatten()).map(|t| t.field.as_str()))
            .collect();
        fields.dedup();
        assert_eq!(fields, ["queue"], "only its place changed: {event:?}");
    }
    assert!(
        !document_text(&collection, "job")
            .await
            .contains("the-waiter")
    );
}

/// One recorded client per name, each with its change stream open.
async fn streaming_clients(setup: &Setup, names: &[&str]) -> Vec<(Recorder, LockClient)> {
    let mut clients = Vec::new();
    for name in names {
        let (recorder, locks) = setup.recorded(name).await;
        open_stream(&locks, &recorder).await;
        clients.push((recorder, locks));
    }
    clients
}

/// Whether `recorder`'s change stream delivered an event about `resource`.
fn delivered(recorder: &Recorder, resource: &str) -> bool {
    recorder.all().iter().any(|c| c.delivered(resource))
}

/// Three clients wait in line for a held mutex. Each release wakes the client whose waiter is
/// at the head of the line, and no other: the others' streams deliver nothing and they send
/// nothing, until their turn.
#[tokio::test]
async fn a_release_wakes_only_the_client_at_the_head_of_the_line() {
    let setup = Setup::new("wake_one").await;
    if !setup.has_change_streams().await {
        return;
    }
    wake_only_the_head(&setup).await;
}

/// The same on a 4.4 server, which logs every change as a whole document (`replace`
/// events): the stream still passes only a change that names the client's waiter.
#[tokio::test]
async fn on_4_4_a_release_wakes_only_the_client_at_the_head_of_the_line() {
    let setup = Setup::emulating("wake_one_44", false, ServerVersion::V4_4).await;
    wake_only_the_head(&setup).await;
}

/// `held` (a 600 ms lease on `job`) is renewed several times (every 200 ms, each a `replace`
/// in a 4.4 log), and its client's stream delivers none of those renewals; then released.
async fn none_of_its_renewals_delivered(recorder: &Recorder, held: mongolock::LockGuard) {
    recorder.clear();
    sleep(Duration::from_millis(1_500)).await;
    assert!(
        recorder.count("update", Some(true)) >= 3,
        "the keeper renewed: {:?}",
        recorder.take_names()
    );
    assert!(
        !delivered(recorder, "job"),
        "a renewal of its own was delivered"
    );
    held.release().await.unwrap();
}

/// On a 4.4 server, a client that holds a lease and waits for nothing receives no event
/// for its own renewals, although each is logged as a whole document.
#[tokio::test]
async fn on_4_4_a_holder_receives_none_of_its_own_renewals() {
    let setup = Setup::emulating("own_renewals_44", false, ServerVersion::V4_4).await;
    let (recorder, locks) = setup.recorded("holder").await;
    // A wait first, so that the client's stream is open.
    let first = locks.mutex("job").acquire().await.unwrap();
    first.release().await.unwrap();
    let held = (locks.mutex("job").ttl(Duration::from_millis(600)))
        .acquire()
        .await
        .unwrap();
    none_of_its_renewals_delivered(&recorder, held).await;
}

/// On a 4.4 server, a client that got its lock by waiting (a release woke it: the
/// resource's `wake` named it) receives no event for its own renewals either: its grant
/// clears the wake that named it.
#[tokio::test]
async fn on_4_4_a_holder_woken_into_its_lock_receives_none_of_its_own_renewals() {
    let setup = Setup::emulating("own_renewals_woken_44", false, ServerVersion::V4_4).await;
    let (recorder, locks) = setup.recorded("woken").await;
    // Streaming, so that the release's change is what wakes it (a client whose stream is
    // still opening polls, every few milliseconds at first).
    open_stream(&locks, &recorder).await;
    let holder = setup
        .locks
        .xlock("job", "holder", LockDetails::default())
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let mutex = locks.mutex("job").ttl(Duration::from_millis(600));
        async move { mutex.acquire_timeout(HANG_GUARD).await }
    });
    recorder
        .wait_until("the waiter's first attempt", |r| {
            // Answered: the waiter stands in line (its re-check may have followed).
            r.count("findAndModify", Some(true)) >= 1
        })
        .await;
    setup.locks.release(&holder).await.unwrap();
    let held = waiter.await.unwrap().unwrap().expect("woken into the lock");
    none_of_its_renewals_delivered(&recorder, held).await;
}

/// Three clients wait for one mutex; each release must wake the head's client only.
async fn wake_only_the_head(setup: &Setup) {
    let clients = streaming_clients(setup, &["w0", "w1", "w2"]).await;
    let _held = setup
        .locks
        .xlock("job", "holder", LockDetails::default())
        .await
        .unwrap();
    let mut waiting = Vec::new();
    for (recorder, locks) in &clients {
        let mutex = locks.mutex("job");
        waiting.push(tokio::spawn(async move {
            mutex.acquire_timeout(HANG_GUARD).await
        }));
        // Answered, so that `clear` below forgets it.
        recorder
            .wait_until("the waiter's first attempt", |r| {
                r.count("findAndModify", Some(true)) == 1
            })
            .await;
    }
    for (recorder, _) in &clients {
        recorder.clear();
    }
    assert_eq!(setup.locks.unlock("holder").await.unwrap(), 1);
    let mut waiting = waiting.into_iter();
    for turn in 0..clients.len() {
        let guard = timeout(HANG_GUARD, waiting.next().unwrap())
            .await
            .expect("the head is woken")
            .unwrap()
            .unwrap()
            .expect("the head takes the lock");
        let (head, _) = &clients[turn];
        assert!(delivered(head, "job"), "w{turn} was woken by the release");
        // A wrongly woken waiter would ask within a round trip; give it plenty.
        sleep(Duration::from_millis(300)).await;
        for (i, (recorder, _)) in clients.iter().enumerate().skip(turn + 1) {
            assert!(
                !delivered(recorder, "job"),
                "w{i} was woken while w{turn} was at the head"
            );
            assert!(
                recorder.attempts().is_empty(),
                "w{i} asked while w{turn} was at the head"
            );
        }
        guard.release().await.unwrap();
    }
}

/// Three readers of three clients wait behind a writer. Released, the writer's lock goes to
/// the first reader, whose grant wakes the second, whose grant wakes the third: every reader
/// is woken by a change (its stream delivers it), none waits for its re-check.
#[tokio::test]
async fn a_line_of_readers_is_let_in_one_after_another() {
    let setup = Setup::new("wake_readers").await;
    if !setup.has_change_streams().await {
        return;
    }
    let clients = streaming_clients(&setup, &["r0", "r1", "r2"]).await;
    let writing = setup.locks.rwlock("doc").write().await.unwrap();
    let mut waiting = Vec::new();
    for (recorder, locks) in &clients {
        let rwlock = locks.rwlock("doc");
        // Shorter than the re-check: a reader left to its timer misses it.
        let patience = RECHECK - Duration::from_secs(2);
        waiting.push(tokio::spawn(
            async move { rwlock.read_timeout(patience).await },
        ));
        recorder
            // Answered, not only sent: a reader whose first attempt reached the server after
            // the writer's release would be let in by it, not woken.
            .wait_until("the reader's first attempt", |r| {
                r.count("findAndModify", Some(true)) == 1
            })
            .await;
    }
    writing.release().await.unwrap();
    let mut readers = Vec::new();
    for (i, reader) in waiting.into_iter().enumerate() {
        let guard = timeout(HANG_GUARD, reader)
            .await
            .expect("no hang")
            .unwrap()
            .unwrap();
        let guard = guard.unwrap_or_else(|| panic!("r{i} was never woken"));
        assert!(
            delivered(&clients[i].0, "doc"),
            "r{i} was woken by a change"
        );
        readers.push(guard);
    }
    for guard in readers {
        guard.release().await.unwrap();
    }
}

/// The place in line of a waiter, as stored: `(lockId, until)` of the first place.
async fn first_place(
    collection: &Collection<Document>,
    resource: &str,
) -> (String, bson::DateTime) {
    let document = collection
        .find_one(doc! { "_id": resource })
        .await
        .unwrap()
        .expect("the resource's document");
    let queue = document.get_array("queue").expect("a line");
    let place = queue.first().and_then(Bson::as_document).expect("a place");
    (
        place.get_str("lockId").unwrap().to_owned(),
        *place.get_datetime("until").unwrap(),
    )
}

/// A waiter keeps its place in line for many times its life: its client refreshes it, in one
/// command for all of its waiters (without those refreshes the place would move only with
/// the waiter's own attempts, and no `update` would be sent).
#[tokio::test]
async fn the_client_keeps_its_waiters_places() {
    let setup = Setup::new("places_kept").await;
    if !setup.has_change_streams().await {
        return;
    }
    let (recorder, waiter) = setup.recorded("waiter").await;
    open_stream(&waiter, &recorder).await;
    let _held = setup
        .locks
        .xlock("job", "holder", LockDetails::default())
        .await
        .unwrap();
    // A place lasts twice the TTL; the holder has none, so the waiter sleeps for its
    // re-check.
    let ttl = Duration::from_millis(600);
    let waiting = tokio::spawn({
        let mutex = waiter.mutex("job").lock_id("the-waiter").ttl(ttl);
        async move { mutex.acquire_timeout(HANG_GUARD).await }
    });
    recorder
        .wait_until("the waiter's first attempt", |r| {
            r.count("findAndModify", Some(true)) == 1
        })
        .await;
    let (lock_id, joined) = first_place(&setup.collection(), "job").await;
    assert_eq!(lock_id, "the-waiter");
    sleep(Duration::from_secs(3)).await;
    let (lock_id, until) = first_place(&setup.collection(), "job").await;
    assert_eq!(lock_id, "the-waiter", "it kept its place");
    assert!(
        until.timestamp_millis() - joined.timestamp_millis() >= 2_000,
        "the place was refreshed: {joined} then {until}"
    );
    // The waiter still re-checks every half of its place's life (0.6 s here), but those
    // attempts find the place fresh and write nothing: the refreshes are the client's.
    let attempts = recorder.attempts().len();
    assert!(attempts <= 8, "{attempts} attempts in 3 s");
    let refreshes = recorder.count("update", Some(true));
    assert!(
        (3..=20).contains(&refreshes),
        "{refreshes} refreshes in 3 s, one every 200 ms"
    );
    assert_eq!(setup.locks.unlock("holder").await.unwrap(), 1);
    let guard = timeout(HANG_GUARD, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .expect("woken by the release");
    guard.release().await.unwrap();
}

/// A waiter whose future is no longer polled (forgotten here; stuck behind something else in
/// an application) is not kept in line for ever: its client stops refreshing its place once
/// the waiter is overdue (its sleep, a command's time limit and a life), and the place
/// lapses.
#[tokio::test]
async fn a_forgotten_waiters_place_is_no_longer_kept() {
    let setup = Setup::new("places_forgotten").await;
    if !setup.has_change_streams().await {
        return;
    }
    let (recorder, waiter) = setup.recorded("waiter").await;
    let waiter = LockClient::builder(waiter.collection().clone())
        .command_timeout(Duration::from_secs(1))
        .build()
        .expect("valid settings");
    open_stream(&waiter, &recorder).await;
    // Held (and renewed) with a 2 s TTL: the waiter sleeps about that long between attempts.
    let _held = setup
        .locks
        .mutex("job")
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let mut waiting = Box::pin({
        let mutex = waiter
            .mutex("job")
            .lock_id("forgotten")
            .ttl(Duration::from_millis(300));
        async move { mutex.acquire().await }
    });
    tokio::select! {
        outcome = &mut waiting => panic!("the lock is held: {outcome:?}"),
        () = recorder.wait_until("the waiter's first attempt", |r| {
            r.count("findAndModify", Some(true)) == 1
        }) => {}
    }
    std::mem::forget(waiting);
    // Overdue after its sleep (about 2 s), the time limit (1 s) and a life (0.3 s).
    sleep(Duration::from_secs(5)).await;
    let (lock_id, until) = first_place(&setup.collection(), "job").await;
    assert_eq!(lock_id, "forgotten");
    sleep(Duration::from_secs(1)).await;
    let (_, still) = first_place(&setup.collection(), "job").await;
    assert_eq!(until, still, "the place is no longer refreshed");
}

/// Twenty tasks of one client wait for one held resource. They queue behind a local gate,
/// so only the head of the line asks the server while the lock is held. Released, the lock
/// goes to each of them in turn (each releases right away), never to two at once.
#[tokio::test]
async fn local_waiters_take_turns() {
    let setup = Setup::new("turns").await;
    let (recorder, waiters) = setup.recorded("waiters").await;
    let streaming = setup.has_change_streams().await;
    if streaming {
        open_stream(&waiters, &recorder).await;
    }
    let _held = setup
        .locks
        .xlock("job", "holder", LockDetails::default())
        .await
        .unwrap();

    let inside = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let mutex = waiters.mutex("job");
            let (inside, served) = (inside.clone(), served.clone());
            tokio::spawn(async move {
                let guard = mutex.acquire().await?;
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                served.fetch_add(1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                guard.release().await
            })
        })
        .collect();
    sleep(Duration::from_secs(2)).await;
    let while_held = recorder.attempts().len();
    assert_eq!(served.load(Ordering::SeqCst), 0, "the lock is held");
    // One waiter at a time asks: the head of the line, once (it then sleeps until a change
    // or the 10 s re-check), with spares for a reopened stream. Without the gate every one
    // of the 20 would ask at least once.
    // Without change streams the head of the line polls at most every 25 ms.
    let budget = if streaming { 3 } else { 80 };
    assert!(
        (1..=budget).contains(&while_held),
        "{while_held} attempts by 20 waiters in 2 s of holding"
    );

    assert_eq!(setup.locks.unlock("holder").await.unwrap(), 1);
    for task in tasks {
        timeout(HANG_GUARD, task)
            .await
            .expect("every waiter gets its turn")
            .unwrap()
            .expect("acquired and released");
    }
    assert_eq!(served.load(Ordering::SeqCst), 20);
    assert!(
        setup
            .locks
            .status(&Filter::default())
            .await
            .unwrap()
            .is_empty()
    );
}

/// `acquire_timeout` on a lock that stays held returns `Ok(None)` at its deadline, and the
/// waiter leaves nothing behind: no lease, no entry, no trace of its lock id.
#[tokio::test]
async fn a_wait_that_outlives_its_deadline_gives_up_cleanly() {
    let setup = Setup::new("give_up").await;
    let locks = &setup.locks;
    let _held = locks
        .xlock("job", "holder", LockDetails::default())
        .await
        .unwrap();
    let waiter = locks.mutex("job").lock_id("the-waiter");
    let gave_up = waiter
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap();
    assert!(gave_up.is_none(), "still held at the deadline");
    locks.shutdown().await;

    assert_eq!(locks.leases(), 0);
    let held = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].lock_id(), "holder");
    assert!(
        !document_text(&setup.collection(), "job")
            .await
            .contains("the-waiter")
    );
    // And it can wait again later, now that the lock is free.
    assert_eq!(locks.unlock("holder").await.unwrap(), 1);
    let guard = waiter
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("free");
    assert_eq!(guard.lock_id(), "the-waiter");
    guard.release().await.unwrap();
}

/// A client whose stream is open (it waited once) and that now holds leases and waits for
/// nothing gets no event for its own renewals, nor for its grants: only a change that may
/// let a waiter in (a release) reaches the waiters' stream.
#[tokio::test]
async fn renewals_and_grants_reach_no_waiter() {
    let setup = Setup::new("renewals_quiet").await;
    if !setup.has_change_streams().await {
        return;
    }
    let (recorder, holder) = setup.recorded("holder").await;
    open_stream(&holder, &recorder).await;
    let mut guards = Vec::new();
    for i in 0..5 {
        let guard = holder
            .mutex(format!("kept-{i}"))
            .ttl(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        guards.push(guard);
    }
    // Renewed every 100 ms: about ten renewals of each in a second.
    sleep(Duration::from_secs(1)).await;
    let renewed = recorder.count("update", Some(true));
    assert!(renewed >= 3, "the leases were renewed ({renewed} updates)");
    let about_them = |r: &Recorder| {
        r.all()
            .iter()
            .filter(|c| (0..5).any(|i| c.delivered(&format!("kept-{i}"))))
            .count()
    };
    assert_eq!(
        about_them(&recorder),
        0,
        "the stream delivered grants or renewals"
    );
    // Releasing its own leases wakes nobody here (it has no waiter). A release that lets
    // one of its waiters in does reach it.
    guards.pop().unwrap().release().await.unwrap();
    let elsewhere = setup.locks.mutex("other").acquire().await.unwrap();
    let sent = recorder.count("findAndModify", Some(true));
    let waiting = tokio::spawn({
        let mutex = holder.mutex("other");
        async move { mutex.acquire_timeout(HANG_GUARD).await }
    });
    recorder
        .wait_until("the waiter's first attempt", |r| {
            r.count("findAndModify", Some(true)) > sent
        })
        .await;
    elsewhere.release().await.unwrap();
    let taken = timeout(HANG_GUARD, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(taken.is_some(), "the waiter takes it");
    assert!(
        recorder.all().iter().any(|c| c.delivered("other")),
        "the release reached the waiter's stream"
    );
    assert_eq!(
        about_them(&recorder),
        0,
        "its own release reached its stream"
    );
    for guard in guards {
        guard.release().await.unwrap();
    }
}
