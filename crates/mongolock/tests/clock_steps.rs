//! The server's clock stepping forward (an NTP step, a failover to a primary whose clock is
//! ahead): the server then ends leases earlier than their holders' deadlines, which counted
//! from its clock as it was. The client notices a step from the next reply that tells it
//! the server's time, and shortens every deadline by the step at once; a clock uncertainty
//! set on the client covers steps before any reply.

mod common;

use std::time::Duration;

use common::{emulator_env, invalid_argument, secs};

/// A step noticed from a grant's `$$NOW` (another acquire of the same client) shortens the
/// deadline of a lease already held, at once.
#[tokio::test]
async fn emulator_only_a_forward_step_seen_in_a_grant_shortens_every_deadline_at_once() {
    let Some(env) = emulator_env("step_grant").await else {
        return;
    };
    let guard = env
        .locks
        .mutex("held")
        .ttl(secs(30))
        .acquire()
        .await
        .unwrap();
    assert!(guard.time_left() > secs(27), "{:?}", guard.time_left());
    env.advance(secs(10));
    let other = env
        .locks
        .mutex("other")
        .ttl(secs(30))
        .acquire()
        .await
        .unwrap();
    // 30 s, less the margin (2 s), less the step (10 s, less the round trips the bounds
    // leave out: the step noticed is a lower bound).
    assert!(
        guard.time_left() <= secs(18) + Duration::from_millis(100),
        "{:?}",
        guard.time_left()
    );
    assert!(guard.time_left() > secs(15), "{:?}", guard.time_left());
    assert!(!guard.is_lost());
    // The new lease counts from after the step: it is whole.
    assert!(other.time_left() > secs(27), "{:?}", other.time_left());
    other.release().await.unwrap();
    guard.release().await.unwrap();
}

/// A step noticed from a renewal's `operationTime` shortens the deadline at once; the next
/// renewal, sent after the step was noticed, gives the lease its whole TTL back.
#[tokio::test]
async fn emulator_only_a_forward_step_seen_in_a_renewal_shortens_the_deadline_until_the_next() {
    let Some(env) = emulator_env("step_renewal").await else {
        return;
    };
    let guard = (env.locks.mutex("held").ttl(secs(30)))
        .extend_every(Duration::from_millis(500))
        .acquire()
        .await
        .unwrap();
    env.advance(secs(10));
    let mut shortest = guard.time_left();
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(25)).await;
        shortest = shortest.min(guard.time_left());
    }
    assert!(
        shortest <= secs(19),
        "the step was never noticed: {shortest:?}"
    );
    assert!(!guard.is_lost());
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(guard.time_left() > secs(26), "{:?}", guard.time_left());
    guard.release().await.unwrap();
}

/// A step larger than the lease had left before any reply: the server ends the lease, and
/// only the clock uncertainty keeps the holder from believing past that.
#[tokio::test]
async fn emulator_only_a_clock_uncertainty_ends_every_lease_that_much_earlier() {
    let Some(env) = emulator_env("step_uncertainty").await else {
        return;
    };
    let locks = env.locks.clone().with_clock_uncertainty(secs(5));
    let guard = locks.mutex("held").ttl(secs(30)).acquire().await.unwrap();
    // 30 s, less the margin (2 s), less the uncertainty (5 s).
    assert!(guard.time_left() <= secs(23), "{:?}", guard.time_left());
    assert!(guard.time_left() > secs(21), "{:?}", guard.time_left());
    guard.release().await.unwrap();
    // No room left for a renewal: refused, naming the setting.
    let error = (locks.mutex("held").ttl(secs(6)))
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "clock_uncertainty");
    locks.shutdown().await;
}
