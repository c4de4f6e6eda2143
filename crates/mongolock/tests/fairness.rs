//! Waiters are served in the order they joined the resource's line, whatever their client:
//!
//! - **First come, first served.** Mutex waiters of six clients, each joining once the one
//!   before it has its place, get the lock in that order.
//! - **Readers and writers.** A reader that joined before a writer goes before it; a reader
//!   that came after waits for the writer (writer preference).
//! - **Semaphore permits** are handed out in the order the waiters joined.
//! - **A single attempt never joins, and never jumps the line.** `try_acquire` on a held
//!   resource leaves no place; on a free resource with waiters, it is refused.
//! - **A dead waiter holds up the line only until its place lapses** (emulator only: the
//!   server's clock moves past it).
//! - **Giving up leaves the line.** A waiter whose future is dropped, or whose time is up,
//!   leaves no place behind.
//!
//! Time limits are hang detectors only: nothing asserts how fast something happens.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{Bson, Document, doc};
use mongodb::Collection;
use mongolock::LockClient;
use tokio::task::JoinHandle;

/// A guard against hangs only.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// The waiters in the line of `resource`, in order (lock ids), expired places included.
async fn line(collection: &Collection<Document>, resource: &str) -> Vec<String> {
    let Some(document) = collection
        .find_one(doc! { "_id": resource })
        .await
        .expect("read")
    else {
        return Vec::new();
    };
    document
        .get_array("queue")
        .map(|queue| {
            queue
                .iter()
                .filter_map(Bson::as_document)
                .filter_map(|place| place.get_str("lockId").ok().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (boundedly) until the line of `resource` has `len` places.
async fn line_reaches(collection: &Collection<Document>, resource: &str, len: usize) {
    for _ in 0..1_000 {
        if line(collection, resource).await.len() == len {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the line of {resource} never reached {len} places: {:?}",
        line(collection, resource).await
    );
}

type Order = Arc<Mutex<Vec<String>>>;

/// A waiter named `name` on its own client: acquires with `acquire`, notes its turn, holds
/// the lock briefly and releases it.
fn waiter<F, Fut>(
    collection: &Collection<Document>,
    order: &Order,
    name: &str,
    acquire: F,
) -> JoinHandle<()>
where
    F: FnOnce(LockClient) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = mongolock::Result<mongolock::LockGuard>> + Send,
{
    let locks = LockClient::new(collection.clone());
    let order = order.clone();
    let name = name.to_owned();
    tokio::spawn(async move {
        let guard = tokio::time::timeout(HANG_GUARD, acquire(locks.clone()))
            .await
            .expect("no hang")
            .expect("acquired");
        order.lock().unwrap().push(name);
        tokio::time::sleep(Duration::from_millis(20)).await;
        guard.release().await.expect("released");
        locks.shutdown().await;
    })
}

#[tokio::test]
async fn mutex_waiters_of_many_clients_are_served_in_the_order_they_joined() {
    let env = common::env("fifo_mutex").await;
    let collection = env.collection();
    let ttl = Duration::from_secs(10);
    let holding = env.locks.mutex("line").ttl(ttl).acquire().await.unwrap();
    let order: Order = Arc::default();
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push(waiter(
            &collection,
            &order,
            &format!("w{i}"),
            move |locks| async move { locks.mutex("line").ttl(ttl).acquire().await },
        ));
        line_reaches(&collection, "line", i + 1).await;
    }
    holding.release().await.unwrap();
    for task in tasks {
        task.await.expect("waiter");
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order, ["w0", "w1", "w2", "w3", "w4", "w5"]);
    assert!(
        line(&collection, "line").await.is_empty(),
        "every place left"
    );
}

#[tokio::test]
async fn a_reader_before_a_writer_goes_first_and_one_after_it_waits() {
    let env = common::env("fifo_rw").await;
    let collection = env.collection();
    let ttl = Duration::from_secs(10);
    let writing = env.locks.rwlock("doc").ttl(ttl).write().await.unwrap();
    let order: Order = Arc::default();
    let first_reader = waiter(
        &collection,
        &order,
        "reader before",
        move |locks| async move { locks.rwlock("doc").ttl(ttl).read().await },
    );
    line_reaches(&collection, "doc", 1).await;
    let writer = waiter(&collection, &order, "writer", move |locks| async move {
        locks.rwlock("doc").ttl(ttl).write().await
    });
    line_reaches(&collection, "doc", 2).await;
    let late_reader = waiter(
        &collection,
        &order,
        "reader after",
        move |locks| async move { locks.rwlock("doc").ttl(ttl).read().await },
    );
    line_reaches(&collection, "doc", 3).await;
    writing.release().await.unwrap();
    for task in [first_reader, writer, late_reader] {
        task.await.expect("waiter");
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order, ["reader before", "writer", "reader after"]);
}

#[tokio::test]
async fn semaphore_permits_go_to_waiters_in_the_order_they_joined() {
    let env = common::env("fifo_semaphore").await;
    let collection = env.collection();
    let ttl = Duration::from_secs(10);
    let semaphore = env.locks.semaphore("pool", 2).ttl(ttl);
    let first = semaphore.acquire().await.unwrap();
    let second = semaphore.acquire().await.unwrap();
    let order: Order = Arc::default();
    let mut tasks = Vec::new();
    for i in 0..4 {
        tasks.push(waiter(
            &collection,
            &order,
            &format!("p{i}"),
            move |locks| async move { locks.semaphore("pool", 2).ttl(ttl).acquire().await },
        ));
        line_reaches(&collection, "pool", i + 1).await;
    }
    // One permit frees at a time: the waiters take turns on it.
    first.release().await.unwrap();
    for task in tasks {
        task.await.expect("waiter");
    }
    second.release().await.unwrap();
    let order = order.lock().unwrap().clone();
    assert_eq!(order, ["p0", "p1", "p2", "p3"]);
}

#[tokio::test]
async fn a_single_attempt_joins_no_line_and_jumps_none() {
    let env = common::env("fifo_try").await;
    let collection = env.collection();
    let ttl = Duration::from_secs(10);
    let mutex = env.locks.mutex("r").ttl(ttl);
    let holding = mutex.acquire().await.unwrap();
    let other = LockClient::new(collection.clone());
    assert!(
        other
            .mutex("r")
            .ttl(ttl)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        line(&collection, "r").await.is_empty(),
        "try_acquire joined the line"
    );

    // A waiter joins; the holder releases; a single attempt that comes before the waiter's
    // next attempt is refused: the lock is the waiter's.
    let waiting = tokio::spawn({
        let other = other.clone();
        async move { other.mutex("r").ttl(ttl).acquire_timeout(HANG_GUARD).await }
    });
    line_reaches(&collection, "r", 1).await;
    let third = LockClient::new(collection.clone());
    holding.release().await.unwrap();
    let jumped = third.mutex("r").ttl(ttl).try_acquire().await.unwrap();
    let waited = waiting.await.expect("task").expect("ok");
    assert!(waited.is_some(), "the waiter got the lock");
    // Whether the waiter already held it or still stood in line, the lock was not free for
    // a newcomer.
    assert!(
        jumped.is_none(),
        "a single attempt took the lock while a waiter stood in line"
    );
    drop((jumped, waited));
    other.shutdown().await;
    third.shutdown().await;
}

#[tokio::test]
async fn emulator_only_a_dead_waiter_holds_up_the_line_only_until_its_place_lapses() {
    let env = common::env("fifo_dead").await;
    if !env.has_clock() {
        return;
    }
    let collection = env.collection();
    let holding = env
        .locks
        .mutex("r")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    // A waiter that died at the head of the line: its place lasts another minute.
    let until = bson::DateTime::from_millis(bson::DateTime::now().timestamp_millis() + 60_000);
    collection
        .update_one(
            doc! { "_id": "r" },
            doc! { "$push": { "queue": { "lockId": "dead", "kind": "exclusive", "until": until } } },
        )
        .await
        .unwrap();
    let other = LockClient::new(collection.clone());
    let waiting = tokio::spawn({
        let other = other.clone();
        async move {
            other
                .mutex("r")
                .ttl(Duration::from_millis(500))
                .acquire_timeout(HANG_GUARD)
                .await
        }
    });
    line_reaches(&collection, "r", 2).await;
    holding.release().await.unwrap();
    // Free, but not the live waiter's turn.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !waiting.is_finished(),
        "the waiter behind a live place got the lock"
    );
    assert!(
        env.locks.mutex("r").try_acquire().await.unwrap().is_none(),
        "a single attempt took the lock from the line"
    );
    // The dead waiter's place lapses.
    env.advance(Duration::from_secs(61));
    let guard = waiting.await.expect("task").expect("ok");
    assert!(
        guard.is_some(),
        "the live waiter got the lock once the dead one's place lapsed"
    );
    drop(guard);
    other.shutdown().await;
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_no_place() {
    let env = common::env("fifo_leave").await;
    let collection = env.collection();
    let ttl = Duration::from_secs(10);
    let holding = env.locks.mutex("r").ttl(ttl).acquire().await.unwrap();
    let other = LockClient::new(collection.clone());

    // Dropped while waiting.
    let dropped = tokio::spawn({
        let other = other.clone();
        async move { other.mutex("r").ttl(ttl).acquire().await }
    });
    line_reaches(&collection, "r", 1).await;
    dropped.abort();
    let _ = dropped.await;
    other.shutdown().await;
    line_reaches(&collection, "r", 0).await;

    // Out of time.
    let timed_out = other
        .mutex("r")
        .ttl(ttl)
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap();
    assert!(timed_out.is_none());
    other.shutdown().await;
    line_reaches(&collection, "r", 0).await;
    drop(holding);
}
