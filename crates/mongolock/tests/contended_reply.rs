//! A refused attempt learns from the server how long to wait, computed by the server's clock
//! (`expiresAt - $$NOW`) in the same command, so a waiter never compares a server time with
//! its own wall clock. The reply is bounded: a few named blockers and a count, however many
//! holders the resource has.

mod common;

use std::time::Duration;

use common::{emulator_env, env, secs};
use mongolock::{AcquireRequest, Attempt, Contention, LockDetails, MAX_NAMED_HOLDERS};

async fn contended(locks: &mongolock::LockClient, request: &AcquireRequest) -> Contention {
    match locks.acquire(request).await.unwrap() {
        Attempt::Contended(contention) => contention,
        other => panic!("expected contention, got {other:?}"),
    }
}

#[tokio::test]
async fn emulator_only_the_wait_is_server_time_left_whatever_the_client_clock_says() {
    let Some(env) = emulator_env("wait_server_time").await else {
        return;
    };
    let locks = &env.locks;
    // The server's clock runs a day ahead of this client's: an absolute server time compared
    // with the client's clock would say "wait a day".
    env.advance(secs(24 * 3600));
    let _ = locks
        .xlock("r", "holder", LockDetails::default().ttl(secs(10)))
        .await
        .unwrap();
    env.advance(secs(4));
    let request = AcquireRequest::exclusive("r", "waiter", LockDetails::default());
    let contention = contended(locks, &request).await;
    let wait = contention.wait().expect("the holder has a TTL");
    assert!(
        wait <= secs(6) && wait > secs(5),
        "about 6 s of the lease are left: {wait:?}"
    );
    env.advance(wait + Duration::from_millis(1));
    assert!(matches!(
        locks.acquire(&request).await.unwrap(),
        Attempt::Granted(_)
    ));
}

#[tokio::test]
async fn emulator_only_the_wait_names_the_lease_that_frees_the_resource() {
    let Some(env) = emulator_env("wait_which_lease").await else {
        return;
    };
    let locks = &env.locks;
    for (id, ttl) in [("short", 5), ("long", 50)] {
        let _ = locks
            .slock("r", id, LockDetails::default().ttl(secs(ttl)), Some(2))
            .await
            .unwrap();
    }
    // A writer needs both readers gone: the later expiry.
    let writer = AcquireRequest::exclusive("r", "writer", LockDetails::default());
    let wait = contended(locks, &writer).await.wait().unwrap();
    assert!(wait > secs(45) && wait <= secs(50), "{wait:?}");
    // A third reader needs one slot: the earlier expiry.
    let reader = AcquireRequest::shared("r", "reader", LockDetails::default(), Some(2));
    let wait = contended(locks, &reader).await.wait().unwrap();
    assert!(wait <= secs(5), "{wait:?}");
    // A holder without TTL never frees the resource by itself: no wait to report.
    let _ = locks
        .xlock("forever", "holder", LockDetails::default())
        .await
        .unwrap();
    let request = AcquireRequest::exclusive("forever", "waiter", LockDetails::default());
    assert_eq!(contended(locks, &request).await.wait(), None);
}

#[tokio::test]
async fn the_reply_is_bounded_however_many_hold_the_resource() {
    let env = env("bounded_reply").await;
    let locks = &env.locks;
    let holders = 3 * MAX_NAMED_HOLDERS + 1;
    for i in 0..holders {
        let _ = locks
            .slock("r", &format!("reader-{i}"), LockDetails::default(), None)
            .await
            .unwrap();
    }
    let request = AcquireRequest::exclusive("r", "writer", LockDetails::default());
    let contention = contended(locks, &request).await;
    assert_eq!(contention.holder_count(), holders as u64);
    assert_eq!(contention.holders().len(), MAX_NAMED_HOLDERS);
    assert!(
        contention
            .holders()
            .iter()
            .all(|h| h.lock_id().starts_with("reader-"))
    );
    let error = locks
        .xlock("r", "writer", LockDetails::default())
        .await
        .unwrap_err();
    let more = holders - MAX_NAMED_HOLDERS;
    assert!(
        error.to_string().contains(&format!("{more} more")),
        "{error}"
    );
}
