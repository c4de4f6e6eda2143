//! Configuring a client: one way, [`LockClient::builder`], checked when the client is built,
//! which makes one client with one lease keeper and one change stream.
//!
//! - **A configured client is one client.** Its `shutdown` sends what its dropped guards
//!   left and stops its change stream, so that the driver's shutdown returns next.
//! - **Bad settings are refused by `build`**, with `InvalidArgument` naming the setting,
//!   under one rule: a length (`command_timeout`, `retention`) must be more than zero, an
//!   allowance (`clock_uncertainty`) may be zero (none), and each has a range.
//! - The blocking client's builders take the same settings under the same rule.

mod common;

use std::time::Duration;

use common::invalid_argument;
use mongodb::{Client, Collection};
use mongolock::{Filter, LockClient, MAX_TTL};
use tokio::time::timeout;

/// A guard against hangs only: nothing asserts that something is this fast.
const HANG_GUARD: Duration = Duration::from_secs(20);

/// The trap of the earlier `with_*` methods: `locks.clone().with_command_timeout(..)` made a
/// second client with its own keeper and change stream, which the first one's `shutdown`
/// missed, so the driver's shutdown then waited for that stream as long as its waiter
/// waited. (This test, written with `base.clone().with_command_timeout(..)` and
/// `base.shutdown()`, failed at the hang guard on the driver's shutdown.) A configured
/// client is one client: its `shutdown` sends what its dropped guards left and stops its
/// change stream, while a clone of it still waits.
#[tokio::test]
async fn a_configured_clients_shutdown_ends_its_keeper_and_its_change_stream() {
    let (uri, _server) = common::server_uri().await;
    let db_name = format!("mongolock_configured_shutdown_{}", std::process::id());
    let client = Client::with_uri_str(&uri).await.expect("a client");
    let other = Client::with_uri_str(&uri).await.expect("a client");
    other.database(&db_name).drop().await.expect("drop");
    let holder = LockClient::new(other.database(&db_name).collection("locks"));

    let locks = LockClient::builder(client.database(&db_name).collection("locks"))
        .command_timeout(Duration::from_secs(5))
        .build()
        .expect("valid settings");

    // A wait opens the configured client's change stream.
    let held = holder.mutex("report").acquire().await.expect("free");
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move { locks.mutex("report").acquire_timeout(HANG_GUARD).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.expect("release");
    let guard = waiter
        .await
        .expect("no panic")
        .expect("no error")
        .expect("granted");
    // Its release is left to the background, which shutdown must see to.
    drop(guard);

    // A task still waits, on the configured client, when the application shuts down in
    // the order the docs give.
    let held = holder.mutex("job").acquire().await.expect("free");
    let still_waiting = tokio::spawn({
        let locks = locks.clone();
        async move { locks.mutex("job").acquire_timeout(HANG_GUARD * 3).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    locks.shutdown().await;
    timeout(HANG_GUARD, client.shutdown())
        .await
        .expect("the driver's shutdown returns after the lock client's");
    still_waiting.abort();
    held.release().await.expect("release");
    drop(locks);
    let left = holder
        .status(&Filter::default().resource("report"))
        .await
        .expect("status");
    assert!(
        left.is_empty(),
        "the dropped guard's release was sent: {left:?}"
    );
    holder.shutdown().await;
    other.shutdown().await;
}

/// A collection on a driver client that never connects: building checks settings only.
async fn collection() -> Collection<bson::Document> {
    Client::with_uri_str("mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=100")
        .await
        .expect("a valid URI")
        .database("app")
        .collection("locks")
}

/// Every setting outside its range is refused by `build`, naming the setting; the bounds of
/// each range are taken. (Written before the builder: the earlier `with_command_timeout`
/// took zero, and only the first call refused it; `with_retention(0)` only
/// `create_indexes`.)
#[tokio::test]
async fn build_refuses_each_setting_outside_its_range_and_takes_its_bounds() {
    let refused = [
        (
            "command_timeout",
            LockClient::builder(collection().await).command_timeout(Duration::ZERO),
        ),
        (
            "command_timeout",
            LockClient::builder(collection().await)
                .command_timeout(Duration::from_millis(i32::MAX as u64 + 1)),
        ),
        (
            "retention",
            LockClient::builder(collection().await).retention(Duration::ZERO),
        ),
        (
            "retention",
            LockClient::builder(collection().await).retention(Duration::from_millis(999)),
        ),
        (
            "retention",
            LockClient::builder(collection().await)
                .retention(Duration::from_secs(i32::MAX as u64 + 1)),
        ),
        (
            "clock_uncertainty",
            LockClient::builder(collection().await)
                .clock_uncertainty(MAX_TTL + Duration::from_millis(1)),
        ),
    ];
    for (setting, builder) in refused {
        let error = builder.build().expect_err(setting);
        assert_eq!(invalid_argument(&error), setting);
    }
    let taken = [
        LockClient::builder(collection().await).command_timeout(Duration::from_millis(1)),
        LockClient::builder(collection().await)
            .command_timeout(Duration::from_millis(i32::MAX as u64)),
        LockClient::builder(collection().await).retention(Duration::from_secs(1)),
        LockClient::builder(collection().await).retention(Duration::from_secs(i32::MAX as u64)),
        LockClient::builder(collection().await).clock_uncertainty(Duration::ZERO),
        LockClient::builder(collection().await).clock_uncertainty(MAX_TTL),
        LockClient::builder(collection().await),
    ];
    for builder in taken {
        let description = format!("{builder:?}");
        builder.build().expect(&description);
    }
}

/// The blocking builders refuse the same settings, the connecting one before it connects
/// (its URI names no server that answers).
#[cfg(feature = "blocking")]
#[test]
fn the_blocking_builders_refuse_the_same_settings() {
    use mongolock::blocking;

    let uri = "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=100";
    let error = blocking::LockClient::connect_builder(uri, "app", "locks")
        .command_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "command_timeout");
    let error = blocking::LockClient::connect_builder(uri, "app", "locks")
        .retention(Duration::from_millis(500))
        .build()
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "retention");
    let connected = blocking::LockClient::connect_builder(uri, "app", "locks")
        .clock_uncertainty(Duration::from_secs(1))
        .build()
        .expect("valid settings: nothing is sent yet");
    connected.shutdown().expect("outside any runtime");
}
