//! Group operations scale with the group: `unlock` and `renew` of a lock id holding
//! thousands of locks with long resource names are one command of constant size, and they
//! succeed with exact counts.
//!
//! The defect this guards against: group operations used to embed the group's list of
//! resource names in the command twice and `$in` over it for every entry, so the command grew
//! with the group (past MongoDB's 16 MiB limit near 8,000 locks with 500-byte names) and the
//! server's work grew quadratically. Here, observed with the driver's command monitoring:
//!
//! - the started `update` command of `renew` and of `unlock` has the same byte size
//!   (`bson::to_vec(&event.command).len()`) for a group of 10 and for a group of [`N`] locks,
//!   and names none of the resources;
//! - a group of [`N`] locks with [`NAME_LEN`]-byte resource names (1.6 MB of names; 5 MB
//!   with `MONGOLOCK_GROUP_SCALE_N=10000`) is renewed and unlocked in one command each, the
//!   counts returned are exactly the group's size, every lock really got the new TTL, and
//!   after the unlock nothing of the group is left (`status`), and its resources are free.
//!
//! Runs on the emulator, or on the MongoDB named by `MONGODB_URI`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use mongodb::Database;
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::ClientOptions;
use mongolock::{Filter, LockClient, LockDetails, MAX_ID_LEN};
use mongolock_testkit::TestServer;

/// Locks in the large group, unless `MONGOLOCK_GROUP_SCALE_N` says otherwise (see [`n`]).
///
/// The natural size is 10,000 (5 MB of 500-byte names, which the old command, carrying two
/// copies of the names and `$in` over them, could not send), but this test should stay near
/// 20 s and not go below 3,200 locks. Setting up is one acquire per lock, 16 at a time, and
/// in a debug build against the emulator on the 2-core machine it was written on an acquire
/// costs 4.5 to 5.5 ms: 4,010 locks took 18.1 s with the machine idle, 10,010 took 42 to 54 s
/// (renew, status and unlock of the group add under 2 s at 4,000, under 5 s at 10,000). So
/// the default is the floor, 3,200: the whole test took 17 to 18 s (1.6 MB of names). The
/// proof of the fix does not depend on the size: the command sizes are compared exactly, and
/// the old command for 3,200 locks was megabytes where this one is a few kilobytes.
/// `MONGOLOCK_GROUP_SCALE_N=10000` runs the full size (passes; about 60 s in a debug build).
const N: usize = 3_200;

/// The size of the large group: [`N`], or `MONGOLOCK_GROUP_SCALE_N`.
fn n() -> usize {
    std::env::var("MONGOLOCK_GROUP_SCALE_N")
        .ok()
        .map(|v| v.parse().expect("MONGOLOCK_GROUP_SCALE_N is a number"))
        .unwrap_or(N)
}

/// Locks in the small group.
const SMALL: usize = 10;

/// Bytes in each resource name.
const NAME_LEN: usize = 500;

// The library accepts names that long.
const _: () = assert!(
    NAME_LEN <= MAX_ID_LEN,
    "NAME_LEN must not exceed MAX_ID_LEN"
);

/// Acquires in flight at once during setup.
const CONCURRENCY: usize = 16;

/// A resource name of exactly [`NAME_LEN`] bytes.
fn resource(group: &str, i: usize) -> String {
    let mut name = format!("{group}/{i:06}/");
    name.extend(std::iter::repeat_n('r', NAME_LEN - name.len()));
    name
}

/// A lock client whose commands (other than the acquires of the setup) are recorded as
/// `(command name, byte size, whether it names a resource of the test)`.
struct Monitored {
    db: Database,
    sizes: Arc<Mutex<Vec<(String, usize, bool)>>>,
    _server: Option<TestServer>,
}

impl Monitored {
    async fn start(name: &str) -> Monitored {
        let db_name = format!("mongolock_scale_{name}_{}", std::process::id());
        let (uri, server) = common::server_uri().await;
        let mut options = ClientOptions::parse(&uri).await.expect("a valid URI");
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&sizes);
        let watched = db_name.clone();
        options.command_event_handler = Some(EventHandler::callback(move |event| {
            if let CommandEvent::Started(started) = event
                && started.db == watched
                && started.command_name != "findAndModify"
            {
                let bytes = bson::to_vec(&started.command).expect("a command encodes");
                let marker = b"/000001/rrrr";
                let names_a_resource = bytes.windows(marker.len()).any(|w| w == marker);
                sink.lock()
                    .unwrap()
                    .push((started.command_name, bytes.len(), names_a_resource));
            }
        }));
        let client = mongodb::Client::with_options(options).expect("valid client options");
        let db = client.database(&db_name);
        db.drop().await.expect("drop the test database");
        Monitored {
            db,
            sizes,
            _server: server,
        }
    }

    /// The one command sent since the last call: its name, size and whether it names a
    /// resource.
    fn only_command(&self, call: &str) -> (String, usize, bool) {
        let mut sizes = std::mem::take(&mut *self.sizes.lock().unwrap());
        assert_eq!(sizes.len(), 1, "{call} sent {sizes:?}");
        sizes.pop().unwrap()
    }

    fn clear(&self) {
        self.sizes.lock().unwrap().clear();
    }
}

/// Takes `count` exclusive locks for `lock_id`, [`CONCURRENCY`] at a time.
async fn hold_group(locks: &LockClient, lock_id: &str, count: usize) {
    let details = LockDetails::default().ttl(Duration::from_secs(600));
    futures_util::stream::iter(0..count)
        .map(|i| {
            let details = details.clone();
            async move {
                locks
                    .xlock(&resource(lock_id, i), lock_id, details)
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>()
        .await
        .expect("every lock of the group is granted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_and_unlock_of_a_large_group_are_one_constant_size_command() {
    let large_n = n();
    assert!(large_n > SMALL);
    let m = Monitored::start("large_group").await;
    // The large group's commands touch every document of the group: give them more than the
    // default 10 s, which a debug build of the emulator on a busy machine could come close to.
    let locks = LockClient::builder(m.db.collection("locks"))
        .command_timeout(Duration::from_secs(120))
        .build()
        .expect("valid settings");
    // Lock ids of equal length, so that only the group size differs.
    let (small, large) = ("group-small", "group-large");
    assert_eq!(small.len(), large.len());

    let started = Instant::now();
    hold_group(&locks, small, SMALL).await;
    hold_group(&locks, large, large_n).await;
    eprintln!(
        "setup of {large_n} + {SMALL} locks took {:?}",
        started.elapsed()
    );
    m.clear();

    // Renew: one command, the same size for both groups, exact counts.
    let ttl = Duration::from_secs(3_600);
    let at = Instant::now();
    assert_eq!(locks.renew(small, ttl).await.unwrap(), SMALL as u64);
    let renew_small = m.only_command("renew of the small group");
    assert_eq!(locks.renew(large, ttl).await.unwrap(), large_n as u64);
    let renew_large = m.only_command("renew of the large group");
    eprintln!(
        "renew: {} bytes for {SMALL} locks, {} bytes for {large_n} locks; took {:?}",
        renew_small.1,
        renew_large.1,
        at.elapsed()
    );
    assert_eq!(renew_small.0, "update");
    assert_eq!(renew_large.0, "update");
    assert_eq!(
        renew_small.1, renew_large.1,
        "the renew command does not grow with the group"
    );
    assert!(!renew_large.2, "the renew command names no resource");

    // Every lock of the group got the new TTL (the originals had 600 s).
    let at = Instant::now();
    let held = locks
        .status(&Filter::default().lock_id(large))
        .await
        .unwrap();
    eprintln!("status of {large_n} locks took {:?}", at.elapsed());
    assert_eq!(held.len(), large_n);
    assert!(
        held.iter().all(|s| s
            .ttl_remaining()
            .is_some_and(|r| r > Duration::from_secs(600))),
        "every lock of the group was renewed"
    );
    m.clear();

    // Unlock: one command, the same size for both groups, exact counts.
    let at = Instant::now();
    assert_eq!(locks.unlock(small).await.unwrap(), SMALL as u64);
    let unlock_small = m.only_command("unlock of the small group");
    assert_eq!(locks.unlock(large).await.unwrap(), large_n as u64);
    let unlock_large = m.only_command("unlock of the large group");
    eprintln!(
        "unlock: {} bytes for {SMALL} locks, {} bytes for {large_n} locks; took {:?}",
        unlock_small.1,
        unlock_large.1,
        at.elapsed()
    );
    assert_eq!(unlock_small.0, "update");
    assert_eq!(unlock_large.0, "update");
    assert_eq!(
        unlock_small.1, unlock_large.1,
        "the unlock command does not grow with the group"
    );
    assert!(!unlock_large.2, "the unlock command names no resource");

    // Nothing of either group is left, and the resources are free.
    assert!(
        locks
            .status(&Filter::default().lock_id(large))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(locks.status(&Filter::default()).await.unwrap().is_empty());
    assert_eq!(locks.unlock(large).await.unwrap(), 0);
    assert_eq!(locks.renew(large, ttl).await.unwrap(), 0);
    for i in [0, large_n / 2, large_n - 1] {
        let grant = locks
            .xlock(&resource(large, i), "next", LockDetails::default())
            .await
            .unwrap();
        assert_eq!(grant.resource(), resource(large, i));
    }
}
