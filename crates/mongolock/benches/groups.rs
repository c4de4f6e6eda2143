//! Group operations cost the same per lock whatever the size of the group.
//!
//! Benchmarks `renew` and `unlock` of one lock id holding 10, 100, 1,000 and (in full mode)
//! 10,000 locks, against an in-process emulator. Each group size has a collection of its own,
//! so a command only ever meets its own group. Criterion reports a throughput in locks per
//! second (`Throughput::Elements(n)`): a flat per-lock cost shows as the same rate for every
//! size. Only the operation is timed: a renew group is set up once (renewing is repeatable),
//! and an unlock group is re-created before every unlock, outside the timed part.
//!
//! At the end a summary pass, timed with `Instant` in the same run, prints the per-lock time
//! of each size divided by that of the 100-lock group (`renew 10000: 1.05x per-lock of 100`).
//! The 10-lock group carries the fixed cost of one round trip over few locks, so its ratio
//! is above 1; the defect this guards against (the command carried the group's names, and
//! the server compared each entry with all of them) made the ratio grow with the size.
//!
//! Quick mode for CI (`MONGOLOCK_BENCH_QUICK=1`, or criterion's `--quick`): sizes up to
//! 1,000 only, few samples; it finishes in well under a minute.
//!
//! ```text
//! cargo bench -p mongolock --bench groups
//! MONGOLOCK_BENCH_QUICK=1 cargo bench -p mongolock --bench groups
//! ```

use std::time::{Duration, Instant};

use bson::{Document, doc};
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use futures_util::{StreamExt, TryStreamExt};
use mongodb::{Collection, Database};
use mongolock::{LockClient, LockDetails};
use mongolock_testkit::TestServer;
use tokio::runtime::Runtime;

/// The size every ratio is relative to.
const BASE: usize = 100;

/// Acquires in flight at once while a group is set up.
const CONCURRENCY: usize = 16;

/// A TTL long enough that no lock expires during the run.
const TTL: Duration = Duration::from_secs(3_600);

struct Settings {
    quick: bool,
    sizes: &'static [usize],
    /// Criterion only lists the benchmarks: nothing to set up.
    listing: bool,
    /// Criterion lists the benchmarks or smoke-tests them once each (`--test`, or run
    /// without `--bench` as `cargo test --benches` does): no summary.
    not_measuring: bool,
}

fn settings() -> Settings {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let listing = has("--list");
    let not_measuring = listing || has("--test") || !has("--bench");
    // A smoke test runs each benchmark once: the small sizes are enough.
    let quick = std::env::var("MONGOLOCK_BENCH_QUICK").is_ok_and(|v| v == "1")
        || has("--quick")
        || (not_measuring && !listing);
    Settings {
        quick,
        sizes: if quick {
            &[10, 100, 1_000]
        } else {
            &[10, 100, 1_000, 10_000]
        },
        listing,
        not_measuring,
    }
}

/// The lock id of a group of `n` locks (all of the same length).
fn lock_id(n: usize) -> String {
    format!("group-{n:06}")
}

/// Takes `n` exclusive locks for the group of `n`, [`CONCURRENCY`] at a time.
async fn hold_group(locks: &LockClient, n: usize) {
    let id = lock_id(n);
    futures_util::stream::iter(0..n)
        .map(|i| {
            let id = &id;
            async move {
                locks
                    .xlock(
                        &format!("resource-{i:06}"),
                        id,
                        LockDetails::default().ttl(TTL),
                    )
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>()
        .await
        .expect("the group is granted");
}

/// Renews the group of `n`, checking that every lock was renewed.
async fn renew(locks: &LockClient, n: usize) {
    let renewed = locks.renew(&lock_id(n), TTL).await.expect("renew");
    assert_eq!(renewed, n as u64);
}

/// Unlocks the group `id` of `n` locks, checking that every lock was released.
async fn unlock(locks: &LockClient, n: usize, id: &str) {
    let released = locks.unlock(id).await.expect("unlock");
    assert_eq!(released, n as u64);
}

/// What an unlock group is re-created from: the document of a real grant to the group's lock
/// id, taken once per size.
async fn template(locks: &LockClient, n: usize) -> Document {
    let id = lock_id(n);
    let _ = locks
        .xlock("template", &id, LockDetails::default().ttl(TTL))
        .await
        .expect("the template lock is granted");
    let document = locks
        .collection()
        .find_one(doc! { "_id": "template" })
        .await
        .expect("read the template")
        .expect("the template document exists");
    unlock(locks, 1, &id).await;
    document
}

/// Re-creates the group of `n` for an unlock: `n` copies of the template, one per resource.
/// Each copy is exactly the document an `xlock` of that resource would leave (one document
/// per resource, keyed by its name), made in one `insert_many` instead of `n` acquires, so
/// that the untimed setup does not dominate the run.
async fn recreate_group(locks: &LockClient, template: &Document, n: usize) {
    let collection = locks.collection();
    collection
        .delete_many(doc! {})
        .await
        .expect("clear the collection");
    let documents = (0..n).map(|i| {
        let mut document = template.clone();
        document.insert("_id", format!("resource-{i:06}"));
        document
    });
    collection
        .insert_many(documents)
        .await
        .expect("insert the group");
}

/// Times `runs` unlocks of a freshly re-created group of `n` (set up untimed each time).
async fn timed_unlocks(
    locks: &LockClient,
    template: &Document,
    n: usize,
    runs: u64,
) -> Vec<Duration> {
    let mut times = Vec::new();
    for _ in 0..runs {
        recreate_group(locks, template, n).await;
        let start = Instant::now();
        unlock(locks, n, &lock_id(n)).await;
        times.push(start.elapsed());
    }
    times
}

/// Times `runs` renewals of the (already held) group of `n`.
async fn timed_renewals(locks: &LockClient, n: usize, runs: u64) -> Vec<Duration> {
    let mut times = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        renew(locks, n).await;
        times.push(start.elapsed());
    }
    times
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// The lock client for groups of `n` locks of `operation`, in a collection of its own with
/// the library's indexes, and (for unlock) the group's template document.
/// Nothing is set up when `set_up` is false (criterion only lists the benchmarks).
fn prepare(
    runtime: &Runtime,
    db: &Database,
    operation: &str,
    n: usize,
    set_up: bool,
) -> (LockClient, Document) {
    let collection: Collection<Document> = db.collection(&format!("{operation}_{n}"));
    // A 10,000-lock command on a busy 2-core machine must not hit the default 10 s limit.
    let locks = LockClient::builder(collection)
        .command_timeout(Duration::from_secs(120))
        .build()
        .expect("valid settings");
    if !set_up {
        return (locks, Document::new());
    }
    runtime.block_on(async {
        if let Err(error) = locks.create_indexes().await {
            eprintln!("warning: create_indexes failed, running without the indexes: {error}");
        }
        let template = if operation == "unlock" {
            template(&locks, n).await
        } else {
            hold_group(&locks, n).await;
            Document::new()
        };
        (locks, template)
    })
}

fn main() {
    let settings = settings();
    let runtime = Runtime::new().expect("a tokio runtime");
    let server = runtime
        .block_on(TestServer::start())
        .expect("the emulator starts");
    let db = runtime.block_on(async { server.client().database("mongolock_bench") });
    let groups: Vec<(&str, usize, LockClient, Document)> = ["renew", "unlock"]
        .into_iter()
        .flat_map(|operation| settings.sizes.iter().map(move |&n| (operation, n)))
        .map(|(operation, n)| {
            let (locks, template) = prepare(&runtime, &db, operation, n, !settings.listing);
            (operation, n, locks, template)
        })
        .collect();

    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(if settings.quick {
            200
        } else {
            1_000
        }))
        .measurement_time(Duration::from_millis(if settings.quick {
            1_000
        } else {
            5_000
        }))
        .configure_from_args();
    for operation in ["renew", "unlock"] {
        let mut group = criterion.benchmark_group(operation);
        group.sampling_mode(SamplingMode::Flat);
        for (_, n, locks, template) in groups.iter().filter(|g| g.0 == operation) {
            let n = *n;
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
                if operation == "renew" {
                    // Renewing the same group again and again is the same work each time.
                    b.to_async(&runtime).iter(|| renew(locks, n));
                } else {
                    // Each timed unlock gets a freshly re-created group, outside the timing.
                    b.to_async(&runtime).iter_custom(|iters| async move {
                        timed_unlocks(locks, template, n, iters)
                            .await
                            .into_iter()
                            .sum()
                    });
                }
            });
        }
        group.finish();
    }
    criterion.final_summary();
    if settings.not_measuring {
        return;
    }

    // Summary: per-lock time of each size relative to the 100-lock group, same run.
    println!();
    println!("per-lock time relative to the {BASE}-lock group (median of several runs, this run)");
    for operation in ["renew", "unlock"] {
        let per_lock: Vec<(usize, Duration)> = groups
            .iter()
            .filter(|g| g.0 == operation)
            .map(|(_, n, locks, template)| {
                let n = *n;
                // Enough runs for a stable median of the small groups; at least 5 for the
                // large ones.
                let runs = (20_000 / n as u64).clamp(5, if settings.quick { 21 } else { 41 });
                let times = runtime.block_on(async {
                    if operation == "renew" {
                        timed_renewals(locks, n, runs).await
                    } else {
                        timed_unlocks(locks, template, n, runs).await
                    }
                });
                (n, median(times) / n as u32)
            })
            .collect();
        let base = per_lock
            .iter()
            .find(|(n, _)| *n == BASE)
            .map(|(_, t)| t.as_secs_f64())
            .expect("the base size is measured");
        for (n, time) in &per_lock {
            println!(
                "{operation} {n:>6}: {:>5.2}x per-lock of {BASE}   ({:>8.2} µs per lock)",
                time.as_secs_f64() / base,
                time.as_secs_f64() * 1e6
            );
        }
    }
    drop(groups);
    drop(db);
    runtime.block_on(server.shutdown());
}
