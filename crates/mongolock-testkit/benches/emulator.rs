//! The emulator under load: must not be the bottleneck of the lock benchmarks.
//!
//! Every group has a baseline in the same run (a `ping` round trip over the same
//! connections), so the figures to read are ratios, not absolute times:
//! - `find_and_modify/distinct` vs `find_and_modify/hot`: contention on one document;
//! - `ping` vs `find_and_modify/*`: what the engine adds to a round trip;
//! - `lock/plain_upsert_delete` vs `lock/mongolock_acquire_release`: a plain
//!   `findOneAndUpdate` upsert + `deleteOne` against mongolock's own uncontended exclusive
//!   acquire (a `findAndModify` whose update is the library's whole pipeline, with its
//!   projection) + release, both one task at a time on fresh resources. Their ratio is the
//!   weight of evaluating the library's pipelines in the engine; the run prints it.
//! - `insert/streams_0` vs `insert/streams_32_idle` (32 open streams on another collection)
//!   vs `insert/streams_32_consuming` (32 streams receiving every insert): what change
//!   streams cost writers, with and without their events to deliver.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

#[path = "../examples/support/pairs.rs"]
mod pairs;

use std::time::{Duration, Instant};

use bson::{Document, doc};
use criterion::{Criterion, criterion_group, criterion_main};
use futures_util::StreamExt;
use mongodb::Collection;
use mongolock::LockClient;
use mongolock_testkit::TestServer;
use tokio::runtime::Runtime;

const TASKS: usize = 16;

/// Runs `iters` operations spread over `TASKS` concurrent tasks; returns the wall time.
async fn spread<F, Fut>(iters: u64, op: F) -> Duration
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let start = Instant::now();
    let mut handles = Vec::with_capacity(TASKS);
    for task in 0..TASKS {
        let op = op.clone();
        let share = iters / TASKS as u64 + u64::from((task as u64) < iters % TASKS as u64);
        handles.push(tokio::spawn(async move {
            for i in 0..share {
                op(task, i).await;
            }
        }));
    }
    for handle in handles {
        handle.await.expect("bench task");
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let runtime = Runtime::new().expect("runtime");
    let server = runtime.block_on(TestServer::start()).expect("server");
    let client = runtime.block_on(async {
        let uri = format!("{}&maxPoolSize={TASKS}", server.uri());
        mongodb::Client::with_uri_str(uri).await.expect("client")
    });
    let coll: Collection<Document> = client.database("bench").collection("locks");
    runtime.block_on(async {
        let docs: Vec<Document> = (0..TASKS as i32).map(|i| doc! {"_id": i, "n": 0}).collect();
        coll.insert_many(docs).await.expect("seed");
        coll.insert_one(doc! {"_id": "hot", "n": 0})
            .await
            .expect("seed");
    });

    lock_pairs(c, &runtime, &client);

    let mut group = c.benchmark_group("emulator");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    let db = client.database("bench");
    group.bench_function("ping", |b| {
        b.to_async(&runtime).iter_custom(|iters| {
            let db = db.clone();
            spread(iters, move |_, _| {
                let db = db.clone();
                async move {
                    db.run_command(doc! {"ping": 1}).await.expect("ping");
                }
            })
        })
    });
    for (name, hot) in [
        ("find_and_modify/distinct", false),
        ("find_and_modify/hot", true),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter_custom(|iters| {
                let coll = coll.clone();
                spread(iters, move |task, _| {
                    let coll = coll.clone();
                    async move {
                        let id = if hot {
                            bson::Bson::from("hot")
                        } else {
                            bson::Bson::Int32(task as i32)
                        };
                        coll.find_one_and_update(
                            doc! {"_id": id},
                            vec![doc! {"$set": {"n": {"$add": ["$n", 1]}, "at": "$$NOW"}}],
                        )
                        .await
                        .expect("findAndModify");
                    }
                })
            })
        });
    }
    for (label, streams, watched) in [
        ("streams_0", 0usize, "events"),
        ("streams_32_idle", 32, "other"),
        ("streams_32_consuming", 32, "events"),
    ] {
        // Watchers are other processes in real life: their own client and connection pool, so
        // their awaiting getMores never hold the writers' connections.
        let watcher_client = runtime.block_on(async {
            let uri = format!("{}&maxPoolSize={}", server.uri(), streams.max(1) + 4);
            mongodb::Client::with_uri_str(uri)
                .await
                .expect("watcher client")
        });
        let watchers: Vec<_> = runtime.block_on(async {
            let mut open = Vec::new();
            for _ in 0..streams {
                let mut stream = watcher_client
                    .database("bench")
                    .collection::<Document>(watched)
                    .watch()
                    .max_await_time(Duration::from_millis(200))
                    .await
                    .expect("watch");
                open.push(tokio::spawn(async move {
                    while stream.next().await.is_some() {}
                }));
            }
            open
        });
        let events: Collection<Document> = client.database("bench").collection("events");
        group.bench_function(format!("insert/{label}"), |b| {
            b.to_async(&runtime).iter_custom(|iters| {
                let events = events.clone();
                spread(iters, move |_, _| {
                    let events = events.clone();
                    async move {
                        events.insert_one(doc! {"x": 1}).await.expect("insert");
                    }
                })
            })
        });
        for watcher in watchers {
            watcher.abort();
        }
    }
    group.finish();
    runtime.block_on(server.shutdown());
}

/// Runs `iters` rounds of `op` one after another (each with a fresh round number).
async fn serial<F, Fut>(iters: u64, op: F) -> Duration
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    for i in 0..iters {
        op(i).await;
    }
    start.elapsed()
}

/// `lock/*`: mongolock's acquire + release against a plain upsert + delete, on one connection
/// at a time, each round on a resource that no document holds yet (the uncontended case).
fn lock_pairs(c: &mut Criterion, runtime: &Runtime, client: &mongodb::Client) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    let plain: Collection<Document> = client.database("bench").collection("plain");
    let locks = LockClient::new(client.database("bench").collection("mongolock"));
    runtime
        .block_on(locks.create_indexes())
        .expect("create_indexes");
    // Every round of every run gets its own resource name.
    let round = Arc::new(AtomicU64::new(0));
    let mut group = c.benchmark_group("lock");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    let plain_op = {
        let (plain, round) = (plain.clone(), round.clone());
        move || {
            let (plain, round) = (plain.clone(), round.clone());
            async move {
                let id = format!("r{}", round.fetch_add(1, Ordering::Relaxed));
                pairs::plain_pair(&plain, &id).await;
            }
        }
    };
    let lock_op = {
        let (locks, round) = (locks.clone(), round.clone());
        move || {
            let (locks, round) = (locks.clone(), round.clone());
            async move {
                let resource = format!("r{}", round.fetch_add(1, Ordering::Relaxed));
                pairs::lock_pair(&locks, &resource).await;
            }
        }
    };
    group.bench_function("plain_upsert_delete", |b| {
        let op = plain_op.clone();
        b.to_async(runtime).iter_custom(move |iters| {
            let op = op.clone();
            serial(iters, move |_| op())
        })
    });
    group.bench_function("mongolock_acquire_release", |b| {
        let op = lock_op.clone();
        b.to_async(runtime).iter_custom(move |iters| {
            let op = op.clone();
            serial(iters, move |_| op())
        })
    });
    group.finish();

    // The ratio, from one interleaved pass in this run (criterion does not print ratios).
    let measuring = std::env::args().any(|a| a == "--bench");
    if measuring {
        let rounds = 300;
        let (mut plain_time, mut lock_time) = (Duration::ZERO, Duration::ZERO);
        runtime.block_on(async {
            for _ in 0..5 {
                plain_time += serial(rounds, |_| plain_op()).await;
                lock_time += serial(rounds, |_| lock_op()).await;
            }
        });
        println!(
            "lock: mongolock acquire+release = {:.2}x plain upsert+delete ({:?} vs {:?} per pair)",
            lock_time.as_secs_f64() / plain_time.as_secs_f64(),
            lock_time / (5 * rounds as u32),
            plain_time / (5 * rounds as u32),
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
