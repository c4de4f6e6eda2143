//! Shutting down: [`LockClient::shutdown`] stops what the client runs in the background, so
//! that the driver's own shutdown, called next, returns. Each test ends with the sequence the
//! docs give, word for word:
//!
//! ```ignore
//! locks.shutdown().await;
//! client.shutdown().await;
//! ```
//!
//! - **The driver shuts down after a wait.** A client whose mutex waited once has a change
//!   stream (a cursor and a session, which the driver's shutdown waits for). After the
//!   sequence, the driver's shutdown returns.
//! - **The stream is stopped, and the client stays usable.** `shutdown` kills the stream's
//!   cursor; a later wait opens a new stream, and the release it waits for reaches it through
//!   that stream.
//! - **Either order works.** The driver's client shut down first, after a wait and with a
//!   lease still held, returns too: the change stream closes once nobody waits (a short
//!   linger later), and the lock client's shutdown after it returns.
//! - **A wait across a shutdown still ends.** A waiter already waiting when `shutdown` stops
//!   the stream is not left hanging: it gets the lock once it is released.
//! - **A shutdown dropped midway loses no release.** The releases it had taken and not sent
//!   stay owed: calling it again (or the client's background retries) sends them.
//!
//! Time limits are hang detectors only: nothing asserts how fast something happens.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bson::Document;
use common::recorder::{Command, Recorder, recorded_client};
use mongodb::{Client, Database};
use mongolock::{LockClient, LockGuard};
use tokio::task::JoinHandle;
use tokio::time::timeout;

/// A guard against hangs only: nothing asserts that something is this fast.
const HANG_GUARD: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// Where the tests run, and what they watch.
// ---------------------------------------------------------------------------------------

/// What the shutdown tests read from the waiter's recorded client.
impl Recorder {
    /// The commands sent since the `opened`-th change stream was asked for (all of them for
    /// 0).
    fn since_stream(&self, opened: usize) -> Vec<Command> {
        let all = self.all();
        if opened == 0 {
            return all;
        }
        let start = all
            .iter()
            .enumerate()
            .filter(|(_, c)| c.opens_change_stream())
            .nth(opened - 1)
            .map_or(all.len(), |(i, _)| i);
        all[start..].to_vec()
    }

    /// How many change streams the server opened (their `aggregate` succeeded).
    fn streams_opened(&self) -> usize {
        self.all()
            .iter()
            .filter(|c| c.opens_change_stream() && c.reply.is_some())
            .count()
    }

    /// Whether the `n`-th change stream opened and is reading (its first `getMore` went out).
    fn stream_reading(&self, n: usize) -> bool {
        let since = self.since_stream(n);
        since
            .first()
            .is_some_and(|open| open.opens_change_stream() && open.reply.is_some())
            && since.iter().any(|c| c.name == "getMore")
    }

    /// Whether the `n`-th change stream delivered an event about `resource`.
    fn stream_delivered(&self, n: usize, resource: &str) -> bool {
        let since = self.since_stream(n);
        let next = since
            .iter()
            .skip(1)
            .position(Command::opens_change_stream)
            .map_or(since.len(), |i| i + 1);
        since[..next].iter().any(|c| c.delivered(resource))
    }

    /// How many `killCursors` went out.
    fn cursors_killed(&self) -> usize {
        self.all()
            .iter()
            .filter(|c| c.name == "killCursors")
            .count()
    }
}

/// A test's two lock clients on one database: `locks`, the one that waits, on a driver client
/// of its own (`client`) whose commands are recorded, and `holder`, on another driver client.
struct Setup {
    client: Client,
    locks: LockClient,
    recorded: Recorder,
    holder_client: Client,
    holder: LockClient,
    db: Database,
    /// Kept alive for the test; `None` on a real server.
    _server: Option<mongolock_testkit::TestServer>,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl Setup {
    /// On the emulator, or on the real server named by `MONGODB_URI`.
    async fn new(name: &str) -> Setup {
        let (uri, server) = common::server_uri().await;
        let db_name = format!(
            "mongolock_{name}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let (recorded, client) = recorded_client(&uri, None).await;
        let holder_client = Client::with_uri_str(&uri).await.expect("a client");
        let db = holder_client.database(&db_name);
        db.drop().await.expect("drop the test database");
        Setup {
            locks: LockClient::new(client.database(&db_name).collection("locks")),
            client,
            recorded,
            holder: LockClient::new(db.collection("locks")),
            holder_client,
            db,
            _server: server,
        }
    }

    /// Whether the server delivers change streams (a real standalone server does not).
    async fn has_change_streams(&self) -> bool {
        match self.db.collection::<Document>("locks").watch().await {
            Ok(_) => true,
            Err(error) => {
                eprintln!("skipped: change streams need a replica set ({error})");
                false
            }
        }
    }

    /// Starts `locks` waiting for `resource`, which `holder` must hold.
    fn wait_for(&self, resource: &str) -> JoinHandle<mongolock::Result<Option<LockGuard>>> {
        let locks = self.locks.clone();
        let resource = resource.to_owned();
        tokio::spawn(async move { locks.mutex(resource).acquire_timeout(HANG_GUARD).await })
    }

    /// Shuts both lock clients and both driver clients down, in the order the docs give.
    async fn shut_down(self) {
        self.locks.shutdown().await;
        timeout(HANG_GUARD, self.client.shutdown())
            .await
            .expect("the driver's shutdown returns after the lock client's");
        self.holder.shutdown().await;
        timeout(HANG_GUARD, self.holder_client.shutdown())
            .await
            .expect("the holder's driver client shuts down");
    }
}

/// Waits (up to [`HANG_GUARD`]) until `condition` holds.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let checks = async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    timeout(HANG_GUARD, checks)
        .await
        .unwrap_or_else(|_| panic!("never happened: {what}"));
}

/// Has `locks` wait once for `resource`: `holder` holds it, the waiter's change stream opens
/// (the `n`-th of the client), `holder` releases, the waiter gets the lock and releases it.
async fn wait_once(setup: &Setup, resource: &str, n: usize) {
    let held = setup.holder.mutex(resource).acquire().await.expect("free");
    let waiting = setup.wait_for(resource);
    eventually("the waiter's change stream is open and reading", || {
        setup.recorded.stream_reading(n)
    })
    .await;
    held.release().await.expect("release");
    let guard = waiting
        .await
        .expect("no panic")
        .expect("no error")
        .expect("the lock, once released");
    guard.release().await.expect("release");
}

// ---------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------

/// Issue 17: the driver's shutdown hung for good after a wait, because the change stream's
/// cursor and session outlived `LockClient::shutdown`.
#[tokio::test]
async fn the_drivers_shutdown_returns_after_a_wait() {
    let setup = Setup::new("shutdown_after_wait").await;
    if !setup.has_change_streams().await {
        return;
    }
    wait_once(&setup, "report", 1).await;
    assert_eq!(setup.recorded.streams_opened(), 1);

    let Setup {
        client,
        locks,
        holder_client,
        holder,
        ..
    } = setup;
    // The sequence of the docs.
    locks.shutdown().await;
    timeout(HANG_GUARD, client.shutdown())
        .await
        .expect("the driver's shutdown returns after the lock client's");

    // The holder's `acquire` was ready to wait too (it subscribed before its first attempt).
    holder.shutdown().await;
    timeout(HANG_GUARD, holder_client.shutdown())
        .await
        .expect("the holder's driver client shuts down");
}

#[tokio::test]
async fn shutdown_stops_the_stream_and_a_later_wait_opens_a_new_one() {
    let setup = Setup::new("shutdown_restart").await;
    if !setup.has_change_streams().await {
        return;
    }
    wait_once(&setup, "report", 1).await;
    setup.locks.shutdown().await;
    eventually("the stream's cursor is killed", || {
        setup.recorded.cursors_killed() == 1
    })
    .await;
    assert_eq!(setup.recorded.streams_opened(), 1);

    // Still usable: the next wait opens a new stream, which delivers the release.
    wait_once(&setup, "report", 2).await;
    assert_eq!(setup.recorded.streams_opened(), 2);
    assert!(
        setup.recorded.stream_delivered(2, "report"),
        "the new stream delivers the release"
    );

    setup.shut_down().await;
}

#[tokio::test]
async fn a_wait_across_a_shutdown_still_gets_the_lock() {
    let setup = Setup::new("shutdown_while_waiting").await;
    if !setup.has_change_streams().await {
        return;
    }
    let held = setup.holder.mutex("report").acquire().await.expect("free");
    let waiting = setup.wait_for("report");
    eventually("the waiter's change stream is open and reading", || {
        setup.recorded.stream_reading(1)
    })
    .await;

    setup.locks.shutdown().await;
    eventually("the stream's cursor is killed", || {
        setup.recorded.cursors_killed() == 1
    })
    .await;
    assert!(!waiting.is_finished(), "the holder still holds the lock");

    held.release().await.expect("release");
    let guard = timeout(HANG_GUARD, waiting)
        .await
        .expect("the waiter is not left hanging")
        .expect("no panic")
        .expect("no error")
        .expect("the lock, once released");
    guard.release().await.expect("release");

    setup.shut_down().await;
}

/// Issue 33: a live `Election::observe` stream, held and no longer polled, kept its change
/// stream's cursor open, so the driver's shutdown never returned. The lock client's shutdown
/// ends the stream's task and closes the cursor; the stream then yields `None`.
#[tokio::test]
async fn the_drivers_shutdown_returns_with_an_election_observer_alive() {
    use futures_util::StreamExt;

    let setup = Setup::new("shutdown_observer").await;
    if !setup.has_change_streams().await {
        return;
    }
    let election = setup.locks.election("scheduler");
    let mut changes = Box::pin(election.observe());
    assert!(changes.next().await.unwrap().unwrap().is_none());
    let leading = election.campaign("host-a").await.unwrap();
    let leader = changes.next().await.unwrap().unwrap().expect("a leader");
    assert_eq!(leader.term(), leading.term());
    leading.resign().await.unwrap();
    // Nobody polls it from here on.
    let Setup {
        client,
        locks,
        holder_client,
        holder,
        ..
    } = setup;
    // The sequence of the docs.
    locks.shutdown().await;
    timeout(HANG_GUARD, client.shutdown())
        .await
        .expect("the driver's shutdown returns with an observer stream alive");
    // At most one item was read ahead before the shutdown ended the stream.
    let mut left = 0;
    while timeout(HANG_GUARD, changes.next())
        .await
        .expect("the stream ends")
        .is_some()
    {
        left += 1;
    }
    assert!(left <= 1, "{left} items after the shutdown");
    holder.shutdown().await;
    timeout(HANG_GUARD, holder_client.shutdown())
        .await
        .expect("the holder's driver client shuts down");
}

/// The other order: the driver's client first, then the lock client. Before the stream
/// closed on its own once nobody waited, the driver's shutdown waited for its cursor and
/// session for ever (this test failed on it at the hang guard).
#[tokio::test]
async fn the_drivers_shutdown_first_returns_after_a_wait_with_a_lease_held() {
    let setup = Setup::new("shutdown_driver_first").await;
    if !setup.has_change_streams().await {
        return;
    }
    wait_once(&setup, "report", 1).await;
    assert_eq!(setup.recorded.streams_opened(), 1);
    // A lease the keeper renews: between two renewals it holds nothing of the driver's.
    let kept = setup.locks.mutex("kept").acquire().await.expect("free");

    let Setup {
        client,
        locks,
        holder_client,
        holder,
        ..
    } = setup;
    timeout(HANG_GUARD, client.shutdown())
        .await
        .expect("the driver's shutdown returns before the lock client's");
    timeout(HANG_GUARD, locks.shutdown())
        .await
        .expect("the lock client's shutdown returns after the driver's");
    // The lease can no longer be renewed; its release fails, and the TTL frees the lock.
    assert!(
        kept.release().await.is_err(),
        "the driver's client is shut down"
    );

    timeout(HANG_GUARD, holder_client.shutdown())
        .await
        .expect("the holder's driver client shuts down first too");
    timeout(HANG_GUARD, holder.shutdown())
        .await
        .expect("the holder's lock client shuts down after it");
}

/// An emulator, and a lock client on it holding `n` mutexes (`r0`, `r1`, ...; 30 s TTL)
/// whose driver client is named `app` (for fail points) and recorded; `None` against a
/// server given by `MONGODB_URI` (fail points are the emulator's).
async fn holding_on_emulator(
    app: &str,
    n: usize,
) -> Option<(
    mongolock_testkit::TestServer,
    Recorder,
    Client,
    LockClient,
    Vec<LockGuard>,
)> {
    if std::env::var("MONGODB_URI").is_ok_and(|uri| !uri.is_empty()) {
        eprintln!("skipped: needs the emulator's fail points");
        return None;
    }
    let server = mongolock_testkit::TestServer::start()
        .await
        .expect("emulator");
    let (recorder, client) = recorded_client(&server.uri(), Some(app)).await;
    let locks = LockClient::new(client.database(app).collection("locks"));
    let mut guards = Vec::new();
    for i in 0..n {
        let mutex = locks.mutex(format!("r{i}")).ttl(Duration::from_secs(30));
        guards.push(mutex.acquire().await.unwrap());
    }
    Some((server, recorder, client, locks, guards))
}

/// Holds the next `times` releases (`findAndModify`s) of the client named `app` 1 s each on
/// `server`.
async fn hold_releases(server: &mongolock_testkit::TestServer, app: &str, times: i32) {
    server
        .client()
        .database("admin")
        .run_command(bson::doc! {
            "configureFailPoint": "failCommand", "mode": {"times": times},
            "data": {
                "failCommands": ["findAndModify"], "appName": app,
                "blockConnection": true, "blockTimeMS": 1_000,
            },
        })
        .await
        .expect("configureFailPoint");
}

/// The resources still locked in database `app` of `server`, once nothing is left or 4 s
/// have passed.
async fn left_locked(server: &mongolock_testkit::TestServer, app: &str) -> Vec<String> {
    let watcher = LockClient::new(server.client().database(app).collection("locks"));
    let mut left = Vec::new();
    for _ in 0..40 {
        left = watcher.status(&mongolock::Filter::default()).await.unwrap();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    left.iter().map(|l| l.resource().to_owned()).collect()
}

/// Two guards dropped, then a shutdown dropped while it sends the first release (held on
/// the server by a fail point): the second release, taken by the shutdown and not sent yet,
/// stays owed: an attempt of its lock id sends it first, and the next shutdown sends what
/// is left ("calling it again finishes the job").
#[tokio::test]
async fn emulator_only_a_shutdown_dropped_midway_keeps_the_releases_it_had_not_sent() {
    let app = "dropped_shutdown";
    let Some((server, _, client, locks, guards)) = holding_on_emulator(app, 2).await else {
        return;
    };
    hold_releases(&server, app, 1).await;
    // Dropped without a yield in between: on this test's one thread, their background
    // releases have not started, so the shutdown takes both.
    let second_id = guards[1].lock_id().to_owned();
    drop(guards);
    let dropped = timeout(Duration::from_millis(300), locks.shutdown()).await;
    assert!(
        dropped.is_err(),
        "the shutdown was held by the fail point and dropped"
    );
    // An attempt of the second guard's lock id waits for that lock id's owed release: it
    // is sent, and the attempt granted anew (a release lost by the shutdown stayed on the
    // books, and every such attempt waited its time limit for it, then failed unsent).
    let again = timeout(
        HANG_GUARD,
        locks.xlock(
            "r1",
            &second_id,
            mongolock::LockDetails::default().ttl(Duration::from_secs(30)),
        ),
    )
    .await
    .expect("returns")
    .expect("granted anew");
    assert!(again.is_new(), "the old grant was released first");
    assert!(locks.release(&again).await.unwrap());
    // The held release lands when its block ends; the other one only if it is still owed.
    timeout(HANG_GUARD, locks.shutdown())
        .await
        .expect("the second shutdown returns");
    let left = left_locked(&server, app).await;
    assert!(
        left.is_empty(),
        "every release was sent, none left to the 30 s TTL: {left:?}"
    );
    client.shutdown().await;
}

/// A shutdown sends the releases it owes together, a bounded number at once, not one after
/// another: eight releases, each held 1 s on the server by a fail point, are all on their way
/// before the first comes back (one after another, a dead server would hold a shutdown for
/// eight command time limits).
#[tokio::test]
async fn emulator_only_a_shutdown_sends_the_releases_it_owes_together() {
    let app = "owed_together";
    let Some((server, recorder, client, locks, guards)) = holding_on_emulator(app, 8).await else {
        return;
    };
    hold_releases(&server, app, 8).await;
    recorder.clear();
    // Dropped without a yield in between: their background releases have not started, so
    // the shutdown takes them all.
    drop(guards);
    timeout(HANG_GUARD, locks.shutdown())
        .await
        .expect("the shutdown returns");
    let releases: Vec<Command> = recorder
        .all()
        .into_iter()
        .filter(|c| c.name == "findAndModify")
        .collect();
    assert_eq!(releases.len(), 8, "one release per guard: {releases:#?}");
    let first_back = releases
        .iter()
        .filter_map(|c| c.ended)
        .min()
        .expect("the releases came back");
    let started_after = releases.iter().filter(|c| c.at > first_back).count();
    assert_eq!(
        started_after, 0,
        "every release was on its way before the first came back"
    );
    assert_eq!(left_locked(&server, app).await, Vec::<String>::new());
    client.shutdown().await;
}
