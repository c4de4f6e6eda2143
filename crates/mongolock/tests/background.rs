//! The work a client does in the background for guards dropped without `release()`: each
//! such guard's release is sent by the client, and a burst of them is sent a few at a time,
//! not all at once. A release waiting for its turn is a small queued item; a release on its
//! way holds a driver operation (its command, its wait for a connection), so ten thousand
//! guards dropped together must not become ten thousand operations waiting on the pool.
//!
//! What is watched is the driver's connection pool (its CMAP events): how many operations
//! are waiting for a connection at once while a burst of dropped guards is released.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bson::{Document, doc};
use mongodb::event::cmap::CmapEvent;
use mongolock::LockClient;

/// Guards dropped at once.
const BURST: usize = 200;

/// The most operations that may wait for a connection at once: the releases a client runs
/// at once (the client sends at most 16 at once), with room for the keeper's own work.
const WAITING_MAX: i64 = 40;

/// Counts the operations waiting for a connection (checkout started, not yet ended), and the
/// most seen at once.
#[derive(Default)]
struct Checkouts {
    waiting: AtomicI64,
    most: AtomicI64,
}

impl Checkouts {
    fn record(&self, event: &CmapEvent) {
        match event {
            CmapEvent::ConnectionCheckoutStarted(_) => {
                let now = self.waiting.fetch_add(1, Ordering::SeqCst) + 1;
                self.most.fetch_max(now, Ordering::SeqCst);
            }
            CmapEvent::ConnectionCheckedOut(_) | CmapEvent::ConnectionCheckoutFailed(_) => {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_burst_of_dropped_guards_is_released_a_few_at_a_time() {
    let (uri, _server) = common::server_uri().await;
    let checkouts = Arc::new(Checkouts::default());
    let mut options = mongodb::options::ClientOptions::parse(&uri)
        .await
        .expect("a valid URI");
    let sink = checkouts.clone();
    options.cmap_event_handler = Some(mongodb::event::EventHandler::callback(
        move |event: CmapEvent| sink.record(&event),
    ));
    let client = mongodb::Client::with_options(options).expect("a client");
    let db = client.database(&format!("mongolock_background_{}", std::process::id()));
    let collection = db.collection::<Document>("locks");
    collection.drop().await.expect("drop");
    let locks = LockClient::new(collection.clone());

    let mut guards = Vec::with_capacity(BURST);
    for i in 0..BURST {
        let guard = locks
            .mutex(format!("burst-{i:03}"))
            .ttl(Duration::from_secs(60))
            .acquire()
            .await
            .expect("acquire");
        guards.push(guard);
    }
    checkouts.most.store(0, Ordering::SeqCst);
    drop(guards);
    locks.shutdown().await;

    // Every lock was released by the client, long before its TTL.
    let held = collection
        .count_documents(doc! { "exclusive": { "$ne": null } })
        .await
        .expect("count");
    assert_eq!(held, 0, "every dropped guard's lock is released");
    let most = checkouts.most.load(Ordering::SeqCst);
    eprintln!("at most {most} operations waited for a connection at once");
    assert!(
        most <= WAITING_MAX,
        "{most} operations waited for a connection at once (at most {WAITING_MAX})"
    );
    db.drop().await.expect("drop the database");
    client.shutdown().await;
}
