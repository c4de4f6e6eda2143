//! No entry outlives its guard: the keeper renews only the leases it tracks, so a lock whose
//! guard is gone ends by release, or at the latest with its TTL, even while the same client
//! keeps other leases alive. Each way an entry can lose its guard is tried here: a guard
//! dropped on a thread with no runtime, a `release()` future dropped before it reached the
//! server, a release that failed, and a background release that failed.
//!
//! These tests need the emulator's fault proxy, so they are named `emulator_only_`.

use std::time::Duration;

use mongolock::{LockClient, LockGuard};
use mongolock_testkit::{FaultProxy, TestServer};

const TTL: Duration = Duration::from_secs(2);

/// A holder behind a fault proxy that keeps another lease alive all along (so its keeper
/// runs), and a rival that goes straight to the server.
struct Setup {
    _server: TestServer,
    proxy: FaultProxy,
    holder: LockClient,
    rival: LockClient,
    _kept: LockGuard,
}

async fn setup(db: &str) -> Setup {
    let server = TestServer::start().await.expect("emulator starts");
    let proxy = FaultProxy::start(server.addr())
        .await
        .expect("proxy starts");
    let holder = LockClient::new(proxy.client().database(db).collection("locks"));
    let rival = LockClient::new(server.new_client().database(db).collection("locks"));
    let kept = holder.mutex("kept").ttl(TTL).acquire().await.expect("kept");
    Setup {
        _server: server,
        proxy,
        holder,
        rival,
        _kept: kept,
    }
}

/// Cuts the holder off: its connections are reset and new ones refused, so nothing it sends
/// meanwhile reaches the server.
fn cut(proxy: &FaultProxy) {
    proxy.refuse_new();
    proxy.reset_connections();
}

/// Through the holder with a 300 ms command timeout (so that a release fails fast): takes
/// one more lease to keep and a lock on `r`, then cuts the holder off. Returns both guards.
async fn hold_then_cut(s: &Setup) -> (LockGuard, LockGuard) {
    let holder = LockClient::builder(s.holder.collection().clone())
        .command_timeout(Duration::from_millis(300))
        .build()
        .expect("valid settings");
    let kept = holder
        .mutex("kept-too")
        .ttl(TTL)
        .acquire()
        .await
        .expect("kept");
    let guard = holder.mutex("r").ttl(TTL).acquire().await.expect("held");
    cut(&s.proxy);
    (kept, guard)
}

/// Tries to take `resource` for up to three TTLs; true once it got it. A lock nobody holds
/// must be free within one TTL (the keeper does not renew it).
async fn rival_takes(rival: &LockClient, resource: &str) -> bool {
    rival
        .mutex(resource)
        .acquire_timeout(TTL * 3)
        .await
        .expect("no error")
        .is_some()
}

#[tokio::test]
async fn emulator_only_a_guard_dropped_without_a_runtime_is_not_renewed() {
    let s = setup("orphan_no_runtime").await;
    let guard = s.holder.mutex("r").ttl(TTL).acquire().await.expect("held");
    std::thread::spawn(move || drop(guard))
        .join()
        .expect("thread");
    assert_eq!(s.holder.leases(), 1, "only the kept lease is tracked");
    assert!(
        rival_takes(&s.rival, "r").await,
        "the dropped guard's lock was kept alive by the keeper"
    );
}

#[tokio::test]
async fn emulator_only_a_release_dropped_before_it_reached_the_server_is_not_renewed() {
    let s = setup("orphan_release_dropped").await;
    let guard = s.holder.mutex("r").ttl(TTL).acquire().await.expect("held");
    cut(&s.proxy);
    let dropped = tokio::time::timeout(Duration::from_millis(200), guard.release()).await;
    assert!(
        dropped.is_err(),
        "the release could not finish while cut off"
    );
    s.proxy.heal();
    assert!(
        rival_takes(&s.rival, "r").await,
        "the lock whose release was dropped was kept alive by the keeper"
    );
}

#[tokio::test]
async fn emulator_only_a_release_that_failed_is_not_renewed() {
    let s = setup("orphan_release_failed").await;
    let (_kept, guard) = hold_then_cut(&s).await;
    let released = guard.release().await;
    assert!(released.is_err(), "the release failed: {released:?}");
    s.proxy.heal();
    assert!(
        rival_takes(&s.rival, "r").await,
        "the lock whose release failed was kept alive by the keeper"
    );
}

#[tokio::test]
async fn emulator_only_a_background_release_that_failed_is_not_renewed() {
    let s = setup("orphan_background_failed").await;
    let (_kept, guard) = hold_then_cut(&s).await;
    drop(guard);
    // Let the background release fail while cut off.
    tokio::time::sleep(Duration::from_millis(800)).await;
    s.proxy.heal();
    assert!(
        rival_takes(&s.rival, "r").await,
        "the lock whose background release failed was kept alive by the keeper"
    );
}
