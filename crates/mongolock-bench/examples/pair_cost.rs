//! Uncontended acquire + release pairs against the embedded emulator, laid out so that an
//! instruction counter can tell the client's work from the server's, and the acquire's from
//! the release's: the figures of "Where an uncontended pair's work goes" in
//! `docs/benchmarks.md` come from this program run under `valgrind --tool=callgrind` by
//! `crates/mongolock-bench/callgrind/pair_cost.sh`, which also reads the counts.
//!
//! - The emulator (`mongolock_testkit::TestServer`, a one-member replica set) runs on a
//!   thread of its own named `server`, on a single-threaded runtime (it evaluates each
//!   command on its runtime's blocking pool, here of one thread); the library and the driver run
//!   on the main thread, on another single-threaded runtime, so every task of theirs (the
//!   driver's pool and monitors, the library's keeper and change stream) runs on that thread.
//!   Callgrind's `--separate-threads=yes` keeps the threads apart.
//! - Each pair is three calls, never inlined: [`acquire_once`], [`release_once`], and
//!   [`idle_once`], which does nothing but wait for the next mark: the cost of the marks
//!   themselves and of whatever runs in the background, to subtract. After each call the
//!   client waits for a mark on both server threads ([`server_mark`] on the server's runtime,
//!   [`blocking_mark`] on its blocking pool). With `--dump-after` on these five functions,
//!   callgrind writes one profile per call on each thread: the client blocks in a call until
//!   the server's reply has arrived, and the server finishes the reply's work before the
//!   mark, so the server's work on that command lands in the same profile.
//!
//! ```text
//! cargo run -p mongolock-bench --example pair_cost -- LIB [PAIRS] [WARM]
//! ```
//!
//! `LIB` is `mongolock` (a mutex's guard: `acquire`, then `release`), `mongo-lock-async`
//! (the closest peer: `Lock::try_acquire`, then `release`) or `driver` (the driver alone, a
//! lock without a lease: a `findOneAndUpdate` upsert that takes the resource, a `deleteOne`
//! that frees it). `PAIRS` (default 20) pairs are made after `WARM` (default 10) pairs that
//! open the connections and the change stream. No command monitoring is installed: the
//! driver turns every command and reply into a `Document` for its events when it is, which
//! would be counted as the client's work (for a 3 KB acquire, about a third of it); the
//! commands a pair sends are counted by `crates/mongolock/tests/cost_budget.rs`.

use std::time::Duration;

use mongodb::bson::{Document, doc};
use mongolock_testkit::TestServer;
use tokio::runtime::Runtime;

/// The lease every lock is taken with.
const TTL: Duration = Duration::from_secs(30);

/// The resource every pair takes.
const RESOURCE: &str = "pair-cost";

/// The library the pairs are made with, and what it holds between acquire and release.
enum Lib {
    Mongolock(mongolock::Mutex),
    MongoLockAsync(mongodb::Client),
    Driver(mongodb::Collection<Document>),
}

/// What one acquire returned, for the release.
enum Held {
    Mongolock(mongolock::LockGuard),
    MongoLockAsync(mongo_lock_async::Lock),
    Driver,
}

/// A request for a mark on the server's threads, answered once both are made.
type Mark = tokio::sync::oneshot::Sender<()>;

/// Asks the server's threads for their marks and waits for them.
fn mark(runtime: &Runtime, marks: &tokio::sync::mpsc::UnboundedSender<Mark>) {
    runtime.block_on(async {
        let (done, made) = tokio::sync::oneshot::channel();
        marks.send(done).expect("the marker runs");
        made.await.expect("the marks are made");
    });
}

/// The server runtime's mark (a profile of that thread ends here under `--dump-after`).
#[inline(never)]
fn server_mark() {
    // A body of its own, so that the two marks are not merged into one function.
    std::hint::black_box("server");
}

/// The server's blocking pool's mark (a profile of that thread ends here under
/// `--dump-after`).
#[inline(never)]
fn blocking_mark() {
    std::hint::black_box("blocking");
}

/// The marks on the server's threads, one pair for each request from the client.
async fn marker(mut requests: tokio::sync::mpsc::UnboundedReceiver<Mark>) {
    while let Some(done) = requests.recv().await {
        server_mark();
        tokio::task::spawn_blocking(blocking_mark)
            .await
            .expect("the blocking mark");
        let _ = done.send(());
    }
}

/// Nothing but the marks after the previous call (a profile ends here under
/// `--dump-after`): what the marks and the background cost, to subtract.
#[inline(never)]
fn idle_once(runtime: &Runtime) {
    runtime.block_on(std::future::ready(()));
}

/// One acquire, run to its end on `runtime` (a profile ends here under `--dump-after`).
#[inline(never)]
fn acquire_once(runtime: &Runtime, lib: &Lib) -> Held {
    runtime.block_on(async {
        match lib {
            Lib::Mongolock(mutex) => Held::Mongolock(mutex.acquire().await.expect("acquire")),
            Lib::MongoLockAsync(client) => Held::MongoLockAsync(
                mongo_lock_async::Lock::try_acquire(client, RESOURCE, TTL)
                    .await
                    .expect("try_acquire")
                    .expect("uncontended: granted"),
            ),
            Lib::Driver(coll) => {
                coll.find_one_and_update(
                    doc! {"_id": RESOURCE, "holder": null},
                    doc! {"$set": {"holder": "me"}},
                )
                .upsert(true)
                .await
                .expect("findOneAndUpdate");
                Held::Driver
            }
        }
    })
}

/// One release, run to its end on `runtime` (a profile ends here under `--dump-after`).
#[inline(never)]
fn release_once(runtime: &Runtime, lib: &Lib, held: Held) {
    runtime.block_on(async {
        match (lib, held) {
            (_, Held::Mongolock(guard)) => guard.release().await.expect("release"),
            (_, Held::MongoLockAsync(lock)) => {
                lock.release().await.expect("release");
            }
            (Lib::Driver(coll), Held::Driver) => {
                let deleted = coll
                    .delete_one(doc! {"_id": RESOURCE, "holder": "me"})
                    .await
                    .expect("deleteOne");
                assert_eq!(deleted.deleted_count, 1);
            }
            _ => unreachable!("each library releases what it acquired"),
        }
    });
}

fn main() {
    let mut args = std::env::args().skip(1);
    let lib_name = args.next().unwrap_or_else(|| "mongolock".to_owned());
    let pairs: u64 = args.next().map_or(20, |n| n.parse().expect("PAIRS"));
    let warm: u64 = args.next().map_or(10, |n| n.parse().expect("WARM"));

    // The emulator, on its own thread and runtime.
    let (uri_tx, uri_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (marks, mark_requests) = tokio::sync::mpsc::unbounded_channel::<Mark>();
    let server_thread = std::thread::Builder::new()
        .name("server".to_owned())
        .spawn(move || {
            // One blocking thread, so that every command the emulator evaluates off its
            // runtime, and the mark after it, run on the same thread (this program sends one
            // command at a time).
            let runtime = tokio::runtime::Builder::new_current_thread()
                .max_blocking_threads(1)
                .enable_all()
                .build()
                .expect("server runtime");
            runtime.block_on(async move {
                let server = TestServer::start().await.expect("server");
                uri_tx.send(server.uri()).expect("uri");
                tokio::spawn(marker(mark_requests));
                let _ = stop_rx.await;
                server.shutdown().await;
            });
        })
        .expect("server thread");
    let uri = uri_rx.recv().expect("the server's address");

    // The client: the library and the driver, on this thread alone.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let (client, locks, lib) = runtime.block_on(async {
        // mongo-lock-async takes its collection from the client's default database.
        let mut options = mongodb::options::ClientOptions::parse(&uri)
            .await
            .expect("uri");
        options.default_database = Some("pair_cost".to_owned());
        let client = mongodb::Client::with_options(options).expect("client");
        let db = client.database("pair_cost");
        let (locks, lib) = match lib_name.as_str() {
            "mongolock" => {
                let locks = mongolock::LockClient::new(db.collection("locks"));
                locks.create_indexes().await.expect("create_indexes");
                let mutex = locks.mutex(RESOURCE).ttl(TTL);
                (Some(locks), Lib::Mongolock(mutex))
            }
            "mongo-lock-async" => {
                mongo_lock_async::prepare_database(&client)
                    .await
                    .expect("prepare_database");
                (None, Lib::MongoLockAsync(client.clone()))
            }
            "driver" => (None, Lib::Driver(db.collection("raw"))),
            other => panic!("unknown library {other:?}: mongolock, mongo-lock-async or driver"),
        };
        (client, locks, lib)
    });

    let pair = || {
        let held = acquire_once(&runtime, &lib);
        mark(&runtime, &marks);
        release_once(&runtime, &lib, held);
        mark(&runtime, &marks);
        idle_once(&runtime);
        mark(&runtime, &marks);
    };
    for _ in 0..warm {
        pair();
    }
    for _ in 0..pairs {
        pair();
    }

    runtime.block_on(async {
        if let Some(locks) = locks {
            locks.shutdown().await;
        }
        client.shutdown().await;
    });
    stop_tx.send(()).expect("stop");
    server_thread.join().expect("server thread");
    println!("{lib_name}: {pairs} pairs after {warm} warm-up pairs");
}
