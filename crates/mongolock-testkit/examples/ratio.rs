//! The weight of mongolock's own commands in the emulator, in one run of any profile.
//!
//! Runs `ROUNDS` rounds of a plain `findOneAndUpdate` upsert + `deleteOne` and of mongolock's
//! uncontended exclusive acquire + release, alternately (so both see the same machine load),
//! one at a time against one embedded server in this process with no added latency, and
//! prints the mean of each pair and their ratio. The same pairs as the `lock/*` group of the
//! `emulator` benchmark, which runs only in release; this one also measures a debug build.
//!
//! ```text
//! cargo run -p mongolock-testkit --example ratio [ROUNDS]
//! cargo run --release -p mongolock-testkit --example ratio [ROUNDS]
//! ```

#[path = "support/pairs.rs"]
mod pairs;

use std::time::{Duration, Instant};

use bson::Document;
use mongodb::Collection;
use mongolock::LockClient;
use mongolock_testkit::TestServer;

/// Rounds of each pair per batch; batches alternate between the two.
const BATCH: u64 = 50;

#[tokio::main]
async fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .map_or(2_000, |n| n.parse().expect("ROUNDS"));
    let server = TestServer::start().await.expect("server");
    let client = mongodb::Client::with_uri_str(server.uri())
        .await
        .expect("client");
    let plain: Collection<Document> = client.database("ratio").collection("plain");
    let locks = LockClient::new(client.database("ratio").collection("mongolock"));
    locks.create_indexes().await.expect("create_indexes");

    let mut next = 0u64;
    let plain_pair = async |next: &mut u64| {
        *next += 1;
        pairs::plain_pair(&plain, &format!("r{next}")).await;
    };
    let lock_pair = async |next: &mut u64| {
        *next += 1;
        pairs::lock_pair(&locks, &format!("r{next}")).await;
    };

    // Warm-up: connections, allocator, the first documents of each collection.
    for _ in 0..BATCH {
        plain_pair(&mut next).await;
        lock_pair(&mut next).await;
    }
    let (mut plain_time, mut lock_time) = (Duration::ZERO, Duration::ZERO);
    let mut done = 0;
    while done < rounds {
        let batch = BATCH.min(rounds - done);
        let started = Instant::now();
        for _ in 0..batch {
            plain_pair(&mut next).await;
        }
        plain_time += started.elapsed();
        let started = Instant::now();
        for _ in 0..batch {
            lock_pair(&mut next).await;
        }
        lock_time += started.elapsed();
        done += batch;
    }
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "{profile}, {rounds} rounds each: plain upsert+delete {:?}, mongolock acquire+release {:?}, ratio {:.2}x",
        plain_time / rounds as u32,
        lock_time / rounds as u32,
        lock_time.as_secs_f64() / plain_time.as_secs_f64(),
    );
    server.shutdown().await;
}
