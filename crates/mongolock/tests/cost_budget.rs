//! The client's cost of the common path, in counts that do not depend on timing: how many
//! heap allocations (and how many bytes) one uncontended acquire and release of a mutex
//! make in this process, the driver's share included. The emulator runs on a thread of its
//! own, whose allocations are not counted. A change that makes the common path heavier
//! than its budget fails here, so the next feature cannot slow it silently (issue 43's
//! cost budget; the timed figures are the benchmark crate's).
//!
//! The figures are printed (`cargo test -p mongolock --test cost_budget -- --nocapture`).

use std::time::Duration;

use mongolock::LockClient;
use mongolock_testkit::TestServer;

/// The most allocations one uncontended acquire and release may make on the client side
/// (the library's and the driver's): 5% over the 1,970 measured when this budget was set
/// (2026-12-06, debug build, as `cargo test` runs it).
const ALLOCATIONS_PER_PAIR: u64 = 2_070;

/// The most bytes those allocations may ask for: 5% over the 371,656 measured then.
const BYTES_PER_PAIR: u64 = 390_000;

const PAIRS: u64 = 50;

#[test]
fn an_uncontended_acquire_and_release_stays_within_its_allocation_budget() {
    if std::env::var("MONGODB_URI").is_ok_and(|uri| !uri.is_empty()) {
        eprintln!("skipped: the budget is measured against the embedded emulator");
        return;
    }
    // The emulator, on a thread of its own: its allocations are not counted.
    let (uri_tx, uri_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server_thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let server = TestServer::start().await.unwrap();
            uri_tx.send(server.uri()).unwrap();
            let _ = stop_rx.await;
            server.shutdown().await;
        });
    });
    let uri = uri_rx.recv().unwrap();
    // The client, on this thread alone: its runtime runs every task of the library and the
    // driver here, and only while `block_on` runs.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (client, locks) = runtime.block_on(async {
        let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
        let locks = LockClient::new(client.database("cost_budget").collection("locks"));
        (client, locks)
    });
    let mutex = locks.mutex("job").ttl(Duration::from_secs(30));
    let pairs = |n: u64| {
        runtime.block_on(async {
            for _ in 0..n {
                mutex.acquire().await.unwrap().release().await.unwrap();
            }
        })
    };
    // The baseline: the two round trips a lock without a lease makes with the driver alone
    // (an upsert that takes the resource, a delete that frees it).
    let raw = client
        .database("cost_budget")
        .collection::<bson::Document>("raw");
    let raw_pairs = |n: u64| {
        runtime.block_on(async {
            for _ in 0..n {
                raw.find_one_and_update(
                    bson::doc! {"_id": "job", "holder": null},
                    bson::doc! {"$set": {"holder": "me"}},
                )
                .upsert(true)
                .await
                .unwrap();
                raw.delete_one(bson::doc! {"_id": "job", "holder": "me"})
                    .await
                    .unwrap();
            }
        })
    };
    // Warm: connections, the change stream, the first command's checks.
    pairs(10);
    raw_pairs(10);
    let (raw_per_pair, raw_bytes_per_pair) = (0..3)
        .map(|_| {
            let info = allocation_counter::measure(|| raw_pairs(PAIRS));
            (info.count_total / PAIRS, info.bytes_total / PAIRS)
        })
        .min()
        .unwrap();
    // The least of three batches: a driver heartbeat or a pool's upkeep adds to one.
    let (per_pair, bytes_per_pair) = (0..3)
        .map(|_| {
            let info = allocation_counter::measure(|| pairs(PAIRS));
            (info.count_total / PAIRS, info.bytes_total / PAIRS)
        })
        .min()
        .unwrap();
    runtime.block_on(async {
        locks.shutdown().await;
        client.shutdown().await;
    });
    stop_tx.send(()).unwrap();
    server_thread.join().unwrap();
    println!(
        "one uncontended acquire + release: {per_pair} allocations, {bytes_per_pair} bytes \
         (budget {ALLOCATIONS_PER_PAIR}, {BYTES_PER_PAIR}); the driver's upsert + delete: \
         {raw_per_pair} allocations, {raw_bytes_per_pair} bytes ({:.2}x, {:.2}x)",
        per_pair as f64 / raw_per_pair as f64,
        bytes_per_pair as f64 / raw_bytes_per_pair as f64,
    );
    assert!(per_pair > 0, "nothing was counted: the measure is broken");
    assert!(
        per_pair <= ALLOCATIONS_PER_PAIR,
        "{per_pair} allocations per acquire and release, over the budget of \
         {ALLOCATIONS_PER_PAIR}"
    );
    assert!(
        bytes_per_pair <= BYTES_PER_PAIR,
        "{bytes_per_pair} bytes allocated per acquire and release, over the budget of \
         {BYTES_PER_PAIR}"
    );
}
