//! A waiting writer keeps new readers out for as long as it waits, even when its TTL (and so
//! its announcement's life) is much shorter than what the readers ahead of it have left:
//! it attempts again before its announcement lapses.

mod common;

use std::time::Duration;

use common::env;
use mongolock::LockClient;

#[tokio::test]
async fn a_writer_with_a_short_ttl_keeps_readers_out_while_it_waits() {
    let env = env("short_writer").await;
    let readers = LockClient::new(env.locks.collection().clone());
    let writers = LockClient::new(env.locks.collection().clone());
    let reading = readers
        .rwlock("config")
        .ttl(Duration::from_secs(30))
        .read()
        .await
        .expect("read");
    // The writer's place lasts twice its TTL (400 ms), refreshed by its client; the reader ahead
    // has 30 s left.
    let waiting = tokio::spawn(async move {
        writers
            .rwlock("config")
            .ttl(Duration::from_millis(200))
            .write_timeout(Duration::from_secs(3))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..8 {
        // Well past the first announcement's life: it must have been refreshed.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let late = readers
            .rwlock("config")
            .ttl(Duration::from_secs(30))
            .try_read()
            .await
            .expect("ok");
        assert!(late.is_none(), "a reader got in while a writer waited");
    }
    reading.release().await.expect("released");
    let written = waiting.await.expect("task").expect("ok");
    assert!(
        written.is_some(),
        "the writer got the lock once the reader left"
    );
}
