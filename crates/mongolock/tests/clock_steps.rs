//! The server's clock stepping forward (an NTP step, a failover to a primary whose clock is
//! ahead): the server then ends leases earlier than their holders' deadlines, which counted
//! from its clock as it was. The client notices a step from the next reply that tells it
//! the server's time, and shortens every deadline by the step at once; a clock uncertainty
//! set on the client covers steps before any reply. A grant's reply read after another
//! reply that showed a step made after the grant counts that step too.
//!
//! And the server's clock stepping back: mongod's `$$NOW` is its system clock, which can go
//! back, while its cluster time (`operationTime`) never does. Leases then last longer by
//! the server's reckoning; the client reports none lost for it.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::doc;
use common::{emulator_env, invalid_argument, secs};
use mongolock::LockClient;
use mongolock_testkit::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A step noticed from a grant's `$$NOW` (another acquire of the same client) shortens the
/// deadline of a lease already held, at once.
#[tokio::test]
async fn emulator_only_a_forward_step_seen_in_a_grant_shortens_every_deadline_at_once() {
    let Some(env) = emulator_env("step_grant").await else {
        return;
    };
    let guard = env
        .locks
        .mutex("held")
        .ttl(secs(30))
        .acquire()
        .await
        .unwrap();
    assert!(guard.time_left() > secs(27), "{:?}", guard.time_left());
    env.advance(secs(10));
    let other = env
        .locks
        .mutex("other")
        .ttl(secs(30))
        .acquire()
        .await
        .unwrap();
    // 30 s, less the margin (2 s), less the step (10 s, less the round trips the bounds
    // leave out: the step noticed is a lower bound).
    assert!(
        guard.time_left() <= secs(18) + Duration::from_millis(100),
        "{:?}",
        guard.time_left()
    );
    assert!(guard.time_left() > secs(15), "{:?}", guard.time_left());
    assert!(!guard.is_lost());
    // The new lease counts from after the step: it is whole.
    assert!(other.time_left() > secs(27), "{:?}", other.time_left());
    other.release().await.unwrap();
    guard.release().await.unwrap();
}

/// A step noticed from a renewal's `operationTime` shortens the deadline at once; the next
/// renewal, sent after the step was noticed, gives the lease its whole TTL back.
#[tokio::test]
async fn emulator_only_a_forward_step_seen_in_a_renewal_shortens_the_deadline_until_the_next() {
    let Some(env) = emulator_env("step_renewal").await else {
        return;
    };
    let guard = (env.locks.mutex("held").ttl(secs(30)))
        .extend_every(Duration::from_millis(500))
        .acquire()
        .await
        .unwrap();
    env.advance(secs(10));
    let mut shortest = guard.time_left();
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(25)).await;
        shortest = shortest.min(guard.time_left());
    }
    assert!(
        shortest <= secs(19),
        "the step was never noticed: {shortest:?}"
    );
    assert!(!guard.is_lost());
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(guard.time_left() > secs(26), "{:?}", guard.time_left());
    guard.release().await.unwrap();
}

/// A step larger than the lease had left before any reply: the server ends the lease, and
/// only the clock uncertainty keeps the holder from believing past that.
#[tokio::test]
async fn emulator_only_a_clock_uncertainty_ends_every_lease_that_much_earlier() {
    let Some(env) = emulator_env("step_uncertainty").await else {
        return;
    };
    let locks = LockClient::builder(env.collection())
        .clock_uncertainty(secs(5))
        .build()
        .expect("valid settings");
    let guard = locks.mutex("held").ttl(secs(30)).acquire().await.unwrap();
    // 30 s, less the margin (2 s), less the uncertainty (5 s).
    assert!(guard.time_left() <= secs(23), "{:?}", guard.time_left());
    assert!(guard.time_left() > secs(21), "{:?}", guard.time_left());
    guard.release().await.unwrap();
    // No room left for a renewal: refused, naming the setting.
    let error = (locks.mutex("held").ttl(secs(6)))
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "clock_uncertainty");
    locks.shutdown().await;
}

/// A relay between a client and the emulator that holds back one reply on its way: the
/// reply to the first `findAndModify`, once armed, that names a marker. The command runs on
/// the server at once; its reply waits in the relay until [`Relay::release`], while the
/// client's other connections go on.
struct Relay {
    addr: SocketAddr,
    shared: Arc<RelayShared>,
    task: tokio::task::JoinHandle<()>,
}

struct RelayShared {
    /// What the request to pick out names, until it is seen.
    marker: Mutex<Option<Vec<u8>>>,
    /// True once the picked-out request's reply came back from the server and is held.
    held: watch::Sender<bool>,
    /// True once the held reply may go on.
    released: watch::Sender<bool>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(RelayShared {
            marker: Mutex::new(None),
            held: watch::Sender::new(false),
            released: watch::Sender::new(false),
        });
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(relay(client, upstream, shared.clone()));
                }
            }
        });
        Relay { addr, shared, task }
    }

    /// A driver client that goes through the relay (a direct connection: the emulator names
    /// its own address).
    fn client(&self) -> mongodb::Client {
        let options = mongodb::options::ClientOptions::builder()
            .hosts(vec![mongodb::options::ServerAddress::Tcp {
                host: self.addr.ip().to_string(),
                port: Some(self.addr.port()),
            }])
            .direct_connection(true)
            .build();
        mongodb::Client::with_options(options).unwrap()
    }

    /// Holds back the reply to the next `findAndModify` that names `marker`.
    fn hold_reply_to(&self, marker: &str) {
        *self.shared.marker.lock().unwrap() = Some(marker.as_bytes().to_vec());
    }

    /// Waits until that reply is held: its command ran.
    async fn held(&self) {
        let mut held = self.shared.held.subscribe();
        tokio::time::timeout(secs(10), held.wait_for(|held| *held))
            .await
            .expect("the picked-out command ran within 10 s")
            .unwrap();
    }

    /// Whether the reply is held still.
    fn holding(&self) -> bool {
        *self.shared.held.borrow() && !*self.shared.released.borrow()
    }

    /// Lets the held reply go on.
    fn release(&self) {
        self.shared.released.send_replace(true);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.release();
        self.task.abort();
    }
}

/// Whether `haystack` contains `needle`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Relays one connection, holding back the reply to the picked-out request.
async fn relay(client: TcpStream, upstream: SocketAddr, shared: Arc<RelayShared>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let picked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let requests = {
        let (shared, picked) = (shared.clone(), picked.clone());
        async move {
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                let n = client_read.read(&mut buffer).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                let chunk = &buffer[..n];
                {
                    let mut marker = shared.marker.lock().unwrap();
                    if marker.as_ref().is_some_and(|marker| {
                        contains(chunk, marker) && contains(chunk, b"findAndModify\0")
                    }) {
                        *marker = None;
                        picked.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                if server_write.write_all(chunk).await.is_err() {
                    break;
                }
            }
        }
    };
    let replies = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = server_read.read(&mut buffer).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            if picked.swap(false, std::sync::atomic::Ordering::SeqCst) {
                shared.held.send_replace(true);
                let mut released = shared.released.subscribe();
                let _ = released.wait_for(|released| *released).await;
            }
            if client_write.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        () = requests => {}
        () = replies => {}
    }
}

/// Issue 39, item 2: the grant's command runs, the server's clock steps forward, another
/// reply of the same client shows the step and is read first, then the grant's reply. The
/// server counts the grant's lease from its clock before the step, so it ends that much
/// earlier: the guard must count the step, and know it lost the lease before anyone else is
/// granted the lock.
#[tokio::test]
async fn emulator_only_a_step_shown_before_a_grant_s_reply_is_read_shortens_that_grant() {
    grant_shortened_by_a_step(Known::Yes, Witness::Grant).await;
}

/// Issue 39, item 2, for a brand-new client: its first command is the attempt, so it knows
/// nothing of the server's clock when the step comes. The grant's command runs, the
/// server's clock steps forward, another write of the same client (an unlock, whose reply
/// carries only an `operationTime`) shows the step and is read first, then the grant's
/// reply. The grant's own `operationTime`, taken when it ran, is not ahead of its `$$NOW`,
/// so the gap is a step after the grant: it shortens the guard.
#[tokio::test]
async fn emulator_only_a_brand_new_client_s_first_grant_is_shortened_by_a_step_an_unlock_showed() {
    grant_shortened_by_a_step(Known::No, Witness::Unlock).await;
}

/// The same, the other reply a grant of another lock: its exact reading, the client's
/// first, sets what the client knows of the server's clock above the step and counts no
/// step, so the held grant alone is shortened by it, and the witness's lease is whole.
#[tokio::test]
async fn emulator_only_a_brand_new_client_s_first_grant_is_shortened_by_a_step_a_later_grant_showed()
 {
    grant_shortened_by_a_step(Known::No, Witness::Grant).await;
}

/// Whether the client knows the server's clock when the step comes (a grant before), or is
/// brand-new (the attempt is its first command).
enum Known {
    Yes,
    No,
}

/// The reply of the same client read while a grant's reply is held.
enum Witness {
    Unlock,
    Grant,
}

/// A grant's command runs, the server's clock steps 6 s forward, the `witness` reply of the
/// same client shows the step and is read first, then the grant's reply: the guard counts
/// the step, knows it lost the lease before anyone else is granted the lock, and a lease
/// granted after the step is whole.
async fn grant_shortened_by_a_step(known: Known, witness: Witness) {
    let db = "grant_step";
    let Some((server, relay, locks)) = relayed(db).await else {
        return;
    };
    let other = LockClient::new(server.new_client().database(db).collection("locks"));
    // A lease whose deadline shows when the client notices the step.
    let first = match known {
        Known::Yes => {
            let first = locks.mutex("first").ttl(secs(60)).acquire().await.unwrap();
            assert!(first.time_left() > secs(56), "{:?}", first.time_left());
            Some(first)
        }
        Known::No => None,
    };
    let resource = "contested-after-the-step";
    let (attempt, before_step) =
        held_across_a_forward_step(&server, &relay, &locks, resource).await;
    let witness = match witness {
        Witness::Unlock => {
            assert_eq!(locks.unlock("nobody").await.unwrap(), 0);
            None
        }
        Witness::Grant => Some(
            locks
                .mutex("witness")
                .ttl(secs(10))
                .acquire()
                .await
                .unwrap(),
        ),
    };
    // The fault happened: the witness's reply came back while the grant's reply was held.
    assert!(relay.holding() && !attempt.is_finished());
    if let Some(first) = &first {
        assert!(
            first.time_left() < secs(54),
            "the client noticed the step before the grant's reply was read: {:?}",
            first.time_left()
        );
    }
    let guard = held_grant(&relay, attempt).await;
    let expires = guard.grant().expires_at().unwrap().timestamp_millis();
    assert!(
        expires <= before_step + 10_000,
        "granted after the step: expires at {expires}, the step came at {before_step}"
    );
    // 10 s, less the margin (1 s), less the step (6 s, less what the bounds leave out):
    // about 3 s, and less than the 4 s the server gives it.
    let taken = taken_once_the_server_ends(&guard, &other, resource).await;
    // A lease granted after the step is not shortened by it.
    if let Some(witness) = witness {
        assert!(
            !witness.is_lost() && witness.time_left() > secs(2),
            "a lease granted after the step was shortened by it: {:?}",
            witness.state()
        );
        witness.release().await.unwrap();
    }
    taken.release().await.unwrap();
    if let Some(first) = first {
        first.release().await.unwrap();
    }
    drop(guard);
    locks.shutdown().await;
    other.shutdown().await;
}

/// Issue 41 (`--replset --long --seed 41090`: `c0`'s holder believed 1.2 s past the next
/// grant): the server's clock steps 3 s back unseen (as at a failover to a member whose
/// clock is behind), a grant's command runs and its reply is held; the clock steps 6 s
/// forward, past the cluster time that stood ahead, and a grant of another lock shows it
/// and is read first; then the held reply. Its reading shows the step back (it is below
/// what the client knew at the send), and the other grant, which ran after it, shows the
/// step forward since: the server ends the lease 6 s early, and the guard must know it
/// lost the lease before anyone else is granted the lock. (Before, the reading started the
/// client's bounds over as a step back alone, and only the 3 s the step forward went past
/// the old bounds counted.)
#[tokio::test]
async fn emulator_only_a_grant_between_a_step_back_and_a_step_forward_is_shortened_by_the_step_forward()
 {
    let db = "grant_between_steps";
    let Some((server, relay, locks)) = relayed(db).await else {
        return;
    };
    let other = LockClient::new(server.new_client().database(db).collection("locks"));
    // The client knows the server's clock from a grant.
    let first = locks.mutex("first").ttl(secs(60)).acquire().await.unwrap();
    let clock_back = server
        .clock()
        .step_back(Duration::from_secs(3))
        .timestamp_millis();
    let resource = "granted-between-the-steps";
    let (attempt, before_step) =
        held_across_a_forward_step(&server, &relay, &locks, resource).await;
    let (witness, guard) = witness_then_held(&locks, &relay, attempt, "witness").await;
    // The faults happened: the grant ran after the step back and the witness after the
    // step forward.
    let expires = |guard: &mongolock::LockGuard| guard.grant().expires_at().unwrap();
    let granted = expires(&guard).timestamp_millis() - 10_000;
    assert!(
        (clock_back..=before_step).contains(&granted),
        "the grant ran at {granted}, between the step back ({clock_back}) and the step \
         forward ({before_step})"
    );
    assert!(
        expires(&witness).timestamp_millis() - 10_000 >= before_step + 6_000,
        "the witness ran after the step forward"
    );
    let taken = taken_once_the_server_ends(&guard, &other, resource).await;
    taken.release().await.unwrap();
    witness.release().await.unwrap();
    first.release().await.unwrap();
    drop(guard);
    locks.shutdown().await;
    other.shutdown().await;
}

/// `guard`'s 10 s lease, granted before a 6 s step forward, ends about 4 s after its grant
/// by the server's clock: the guard believes less than that, and once `other`, asking every
/// 20 ms, is granted the lock (within 15 s), the guard knows it lost it. Returns `other`'s
/// guard.
async fn taken_once_the_server_ends(
    guard: &mongolock::LockGuard,
    other: &LockClient,
    resource: &str,
) -> mongolock::LockGuard {
    assert!(
        guard.time_left() < secs(4),
        "the guard believes it has {:?} left of a lease the server ends about 4 s after it \
         granted it",
        guard.time_left()
    );
    let mut taken = None;
    for _ in 0..750 {
        taken = other
            .mutex(resource)
            .ttl(secs(10))
            .try_acquire()
            .await
            .unwrap();
        if taken.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let taken = taken.expect("the server ended the lease within 15 s");
    assert!(
        guard.is_lost(),
        "another client was granted the lock while the guard still held it ({:?} left)",
        guard.time_left()
    );
    taken
}

/// Lets the reply `relay` holds go on, and returns the grant `attempt` was given.
async fn held_grant(
    relay: &Relay,
    attempt: tokio::task::JoinHandle<mongolock::Result<Option<mongolock::LockGuard>>>,
) -> mongolock::LockGuard {
    relay.release();
    attempt
        .await
        .unwrap()
        .unwrap()
        .expect("granted: the lock was free")
}

/// The emulator with a [`Relay`] in front of it, and a lock client on database `db` that
/// goes through the relay; `None` on a real server (`MONGODB_URI`): these tests hold a
/// reply back while they move the emulator's clock.
async fn relayed(db: &str) -> Option<(TestServer, Relay, LockClient)> {
    if std::env::var("MONGODB_URI").is_ok_and(|uri| !uri.is_empty()) {
        eprintln!("skipped: a reply held while the clock moves needs the emulator's clock");
        return None;
    }
    let server = TestServer::start().await.unwrap();
    let relay = Relay::start(server.addr()).await;
    let locks = LockClient::new(relay.client().database(db).collection("locks"));
    Some((server, relay, locks))
}

/// `locks` tries for `resource` (TTL 10 s) in a task of its own, renewing late (every 8.5 s,
/// after the server has ended the lease, about 4 s after its grant: the guard keeps the lease
/// only as long as the server gave it); its grant runs, `relay` holds the reply back, and
/// the server's clock steps 6 s forward. Returns the attempt's task and the server's clock
/// just before the step (ms since the epoch).
async fn held_across_a_forward_step(
    server: &TestServer,
    relay: &Relay,
    locks: &LockClient,
    resource: &'static str,
) -> (
    tokio::task::JoinHandle<mongolock::Result<Option<mongolock::LockGuard>>>,
    i64,
) {
    relay.hold_reply_to(resource);
    let attempt = tokio::spawn({
        let locks = locks.clone();
        async move {
            (locks.mutex(resource).ttl(secs(10)))
                .extend_every(Duration::from_millis(8_500))
                .try_acquire()
                .await
        }
    });
    relay.held().await;
    let before_step = server.clock().now().timestamp_millis();
    server.clock().advance(Duration::from_secs(6));
    (attempt, before_step)
}

/// The witness: `locks` takes `witness` (TTL 10 s) while `relay` holds the reply to
/// `attempt`'s grant, and checks that the fault happened (the witness's reply came back
/// while the grant's was held); then the held reply goes on. Returns the witness's guard
/// and the held grant's.
async fn witness_then_held(
    locks: &LockClient,
    relay: &Relay,
    attempt: tokio::task::JoinHandle<mongolock::Result<Option<mongolock::LockGuard>>>,
    witness: &str,
) -> (mongolock::LockGuard, mongolock::LockGuard) {
    let witness = locks.mutex(witness).ttl(secs(10)).acquire().await.unwrap();
    assert!(relay.holding() && !attempt.is_finished());
    let guard = held_grant(relay, attempt).await;
    (witness, guard)
}

/// Issue 39, (S13) of the harness: a grant's command runs, the server's clock steps back
/// 3 s, another grant of the same client runs after the step and its reply is read first
/// (it shows the step back: the client's bounds on the server's clock start over from it),
/// then the first grant's reply. That reading is from before the step, and above the new
/// bounds; taken for a step forward, it shortened every lease of the client by about 3 s,
/// and guards were told their leases were lost while the server kept them. Its
/// `operationTime` is older than the other reply's (a write's `operationTime` is the time of
/// the oplog entry it wrote, and the cluster time never goes back:
/// `LogicalClock::reserveTicks`, `src/mongo/db/logical_clock.cpp`; the `operationTime` field
/// in MongoDB's manual, `fact-runCommand-results.rst`): it ran first, and tells nothing of
/// the clock now.
#[tokio::test]
async fn emulator_only_a_grant_read_after_a_step_back_it_came_before_is_no_step_forward() {
    let Some((server, relay, locks)) = relayed("grant_before_step_back").await else {
        return;
    };
    // A lease whose grant tells the client the server's clock, and whose deadline shows a
    // step counted.
    let first = locks.mutex("first").ttl(secs(60)).acquire().await.unwrap();
    let resource = "granted-before-the-step-back";
    relay.hold_reply_to(resource);
    let attempt = tokio::spawn({
        let locks = locks.clone();
        async move { locks.mutex(resource).ttl(secs(10)).try_acquire().await }
    });
    relay.held().await;
    server.clock().step_back(Duration::from_secs(3));
    let (witness, guard) =
        witness_then_held(&locks, &relay, attempt, "granted-after-the-step-back").await;
    // And the grant ran before the step back, the witness after it.
    let expires = |guard: &mongolock::LockGuard| guard.grant().expires_at().unwrap();
    let gap = expires(&guard).timestamp_millis() - expires(&witness).timestamp_millis();
    assert!(
        gap > 2_500,
        "the grant ran {gap} ms after the witness by the clock"
    );
    // No step forward was counted: every lease keeps what it had less the margin (2 s of
    // 60 s, 1 s of 10 s) and less under a second since its send, and none is lost.
    for (name, guard, least) in [
        ("first", &first, secs(57)),
        ("witness", &witness, secs(8)),
        ("held", &guard, secs(8)),
    ] {
        assert!(
            !guard.is_lost() && guard.time_left() > least,
            "{name}: {:?} left (at least {least:?}), lost: {}: a step back was taken for a \
             step forward",
            guard.time_left(),
            guard.is_lost()
        );
    }
    guard.release().await.unwrap();
    witness.release().await.unwrap();
    first.release().await.unwrap();
    locks.shutdown().await;
}

/// A brand-new client's first grant from a server whose clock stepped back 5 s just
/// before: the cluster time stands ahead of the clock (`LogicalClock::reserveTicks`,
/// `src/mongo/db/logical_clock.cpp`), so the grant's own `operationTime` reads ahead of its
/// `$$NOW`. That is no step forward: the guard keeps its whole lease.
#[tokio::test]
async fn emulator_only_a_brand_new_client_s_first_grant_after_a_step_back_keeps_its_lease() {
    if std::env::var("MONGODB_URI").is_ok_and(|uri| !uri.is_empty()) {
        eprintln!("skipped: a step back needs the emulator's clock");
        return;
    }
    let server = TestServer::start().await.unwrap();
    let db = "first_grant_step_back";
    // The cluster time moves to the clock's reading, then the clock steps back.
    let cluster_before = operation_time(&server.new_client()).await;
    let clock_before = server.clock().now().timestamp_millis();
    let clock_after = server
        .clock()
        .step_back(Duration::from_secs(5))
        .timestamp_millis();
    assert!(
        clock_after <= clock_before - 4_000,
        "{clock_before} -> {clock_after}"
    );
    let locks = LockClient::new(server.new_client().database(db).collection("locks"));
    let guard = locks
        .mutex("after-the-step-back")
        .ttl(secs(10))
        .acquire()
        .await
        .unwrap();
    // The fault happened: the grant read the clock behind the cluster time.
    let cluster_after = operation_time(&server.new_client()).await;
    let expires = guard.grant().expires_at().unwrap().timestamp_millis();
    assert!(
        i64::from(cluster_after.time) * 1_000 > expires - 10_000 + 1_000
            && cluster_after >= cluster_before,
        "the grant ran at {} by the clock, the cluster time read {cluster_after:?}",
        expires - 10_000
    );
    // 10 s less the margin (1 s): not shortened by a step that never was.
    assert!(
        guard.time_left() > secs(8),
        "a step back counted as a step forward: {:?} left",
        guard.time_left()
    );
    guard.release().await.unwrap();
    locks.shutdown().await;
}

/// A lock let go of within its minimum hold, then the server's clock steps back past its
/// grant, then an operator force-releases the resource. The hold under way stays until
/// grant + hold by the server's clock (`LockDetails::min_hold`): a force release breaks
/// leases, and a let-go entry holds none. Cut to the force release's `$$NOW` + hold, it
/// would end earlier by the stepped-back clock, and a grant inside the hold would follow.
#[tokio::test]
async fn emulator_only_a_force_release_after_a_step_back_keeps_a_hold_under_way() {
    if std::env::var("MONGODB_URI").is_ok_and(|uri| !uri.is_empty()) {
        eprintln!("skipped: a step back needs the emulator's clock");
        return;
    }
    let server = TestServer::start().await.unwrap();
    let db = "force_after_step_back";
    let locks = LockClient::new(server.new_client().database(db).collection("locks"));
    let details = mongolock::LockDetails::default()
        .ttl(secs(10))
        .min_hold(secs(3));
    let grant = locks.xlock("job", "host-a", details).await.unwrap();
    let granted_at = grant.expires_at().unwrap().timestamp_millis() - 10_000;
    assert!(locks.release(&grant).await.unwrap());
    // Back past the grant, so that `$$NOW` + hold reads before grant + hold.
    let back = server
        .clock()
        .step_back(Duration::from_secs(5))
        .timestamp_millis();
    assert!(back < granted_at - 4_000, "{granted_at} -> {back}");
    locks.force_release("job").await.unwrap();
    // Inside the hold by the server's clock (grant + 1 s), past `$$NOW` + hold.
    let inside = server
        .clock()
        .advance(Duration::from_millis(
            u64::try_from(granted_at + 1_000 - back).unwrap(),
        ))
        .timestamp_millis();
    assert!(
        (granted_at..granted_at + 3_000).contains(&inside) && inside > back + 3_000,
        "grant {granted_at}, back to {back}, now {inside}"
    );
    let refused = locks
        .xlock("job", "host-b", mongolock::LockDetails::default())
        .await;
    assert!(
        refused.as_ref().is_err_and(|e| e.is_already_locked()),
        "granted inside the hold after a force release: {refused:?}"
    );
    // The hold ends at grant + hold.
    server.clock().advance(Duration::from_millis(2_100));
    let next = locks
        .xlock("job", "host-b", mongolock::LockDetails::default())
        .await
        .unwrap();
    assert!(next.fencing_token() > grant.fencing_token());
    locks.shutdown().await;
}

/// The operation time (the cluster time) a reply of `client` carries.
async fn operation_time(client: &mongodb::Client) -> bson::Timestamp {
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap()
        .get_timestamp("operationTime")
        .unwrap()
}

/// The server's clock steps back 30 s while two leases are held and renewed, one granted
/// before the step and one after. mongod's `$$NOW` follows its system clock, which can step
/// back (`Variables::generateRuntimeConstants` sets it to `Date_t::now()`, which reads
/// `gettimeofday`: `src/mongo/db/pipeline/variables.cpp`, `src/mongo/util/time_support.cpp`);
/// its cluster time, which every reply's `operationTime` reports, never goes back
/// (`LogicalClock::reserveTicks`, `src/mongo/db/logical_clock.cpp`). The server then ends
/// leases later than their holders' deadlines: no lease is reported lost for it, and nobody
/// else is granted them.
#[tokio::test]
async fn emulator_only_a_step_back_loses_no_lease_and_grants_none_twice() {
    if std::env::var("MONGODB_URI").is_ok_and(|uri| !uri.is_empty()) {
        eprintln!("skipped: a step back needs the emulator's clock");
        return;
    }
    let server = TestServer::start().await.unwrap();
    let db = "step_back";
    let client = server.new_client();
    let locks = LockClient::new(client.database(db).collection("locks"));
    let other = LockClient::new(server.new_client().database(db).collection("locks"));
    let renewed_often = |resource: &str| {
        locks
            .mutex(resource)
            .ttl(secs(10))
            .extend_every(Duration::from_millis(250))
    };
    let before = renewed_often("before").acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let cluster_before = operation_time(&client).await;
    let clock_before = server.clock().now().timestamp_millis();
    let clock_after = server
        .clock()
        .step_back(Duration::from_secs(30))
        .timestamp_millis();
    assert!(
        clock_after <= clock_before - 29_000,
        "{clock_before} -> {clock_after}"
    );
    let after = renewed_often("after").acquire().await.unwrap();
    // The fault happened: the later grant read the clock as stepped back, and the cluster
    // time did not go back.
    let (before_end, after_end) = (
        before.grant().expires_at().unwrap().timestamp_millis(),
        after.grant().expires_at().unwrap().timestamp_millis(),
    );
    assert!(
        after_end < before_end - 20_000,
        "granted later, it ends earlier by the server's clock: {before_end}, {after_end}"
    );
    // A dozen renewals each, every reply carrying a cluster time that stands still.
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !before.is_lost() && !after.is_lost(),
            "a lease reported lost for a step back: {:?}, {:?}",
            before.state(),
            after.state()
        );
    }
    let cluster_after = operation_time(&client).await;
    assert!(
        cluster_after > cluster_before && cluster_after.time <= cluster_before.time + 4,
        "the cluster time never goes back, and stands still until the clock catches up: \
         {cluster_before:?} -> {cluster_after:?}"
    );
    assert!(before.time_left() > secs(5), "{:?}", before.time_left());
    assert!(after.time_left() > secs(5), "{:?}", after.time_left());
    for resource in ["before", "after"] {
        let taken = other
            .mutex(resource)
            .ttl(secs(10))
            .try_acquire()
            .await
            .unwrap();
        assert!(taken.is_none(), "{resource} granted twice");
    }
    before.release().await.unwrap();
    after.release().await.unwrap();
    locks.shutdown().await;
    other.shutdown().await;
}

/// A lease let go within its minimum hold stays in force for the rest of the hold, from
/// everybody, its own lock id included (`LockDetails::min_hold`). A step back of the
/// server's clock must not make it held again: the hold's entry says it was let go, and no
/// acquire, renewal or keepalive of its lock id takes it back, however the clock reads.
#[tokio::test]
async fn emulator_only_a_step_back_does_not_give_a_let_go_lease_back_to_its_lock_id() {
    if std::env::var("MONGODB_URI").is_ok_and(|uri| !uri.is_empty()) {
        eprintln!("skipped: a step back needs the emulator's clock");
        return;
    }
    let server = TestServer::start().await.unwrap();
    let locks = LockClient::new(server.new_client().database("let_go").collection("locks"));
    let job = || {
        locks
            .mutex("job")
            .lock_id("host-a")
            .ttl(secs(10))
            .min_hold(Duration::from_millis(1_500))
    };
    let first = job().acquire().await.unwrap();
    let token = first.fencing_token();
    first.release().await.unwrap();
    // The hold is in force: its own lock id is refused, as everybody is.
    assert!(job().try_acquire().await.unwrap().is_none());
    // The fault: the server's clock goes back past the lease's grant.
    let before = server.clock().now().timestamp_millis();
    let after = server.clock().step_back(secs(3)).timestamp_millis();
    assert!(after <= before - 2_900, "{before} -> {after}");
    // No renewal takes the let-go entry back.
    assert_eq!(locks.renew("host-a", secs(10)).await.unwrap(), 0);
    // Nor an attempt of its lock id: the hold still keeps it out.
    let again = job().try_acquire().await.unwrap();
    assert!(
        again.is_none(),
        "the let-go lease was given back to its lock id (token {:?}, first {token})",
        again.as_ref().map(|g| g.fencing_token())
    );
    // Once the hold has ended by the server's clock, the lock id is granted a new lease.
    server.clock().advance(secs(6));
    let next = job().acquire().await.unwrap();
    assert!(
        next.fencing_token() > token,
        "{} <= {token}",
        next.fencing_token()
    );
    next.release().await.unwrap();

    // A reader's share let go of within its hold: the same after a step back.
    let reader = || {
        locks
            .rwlock("shelf")
            .lock_id("reader-a")
            .ttl(secs(10))
            .min_hold(Duration::from_millis(1_500))
    };
    let first = reader().read().await.unwrap();
    let token = first.fencing_token();
    first.release().await.unwrap();
    server.clock().step_back(secs(3));
    assert_eq!(locks.renew("reader-a", secs(10)).await.unwrap(), 0);
    let again = reader().try_read().await.unwrap();
    assert!(
        again.as_ref().is_none_or(|g| g.fencing_token() > token),
        "the let-go share was given back to its lock id with token {token}"
    );
    drop(again);
    locks.shutdown().await;
}
