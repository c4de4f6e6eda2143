//! A grant learnt from a re-sent attempt: the first copy of an acquire attempt is applied
//! on the server but its reply is lost; the waiter sends the same attempt again later and
//! the server answers with the grant the first copy made (same token, same expiry). The
//! guard must still report its loss before the server can grant the lock to anyone else,
//! even though its renewals fail from then on.
//!
//! The server's expiry counts from the first copy's execution, earlier than the send of the
//! copy whose reply arrived by the time the replies were lost; so the lease counts from
//! that send for only what the server said the grant had left when it executed the copy.
//! (It used to count the whole TTL from the re-send, and this test failed.)

use std::time::{Duration, Instant};

use mongolock::{Filter, LockClient};
use mongolock_testkit::{FaultProxy, TestServer};

const RESOURCE: &str = "resent";

fn locks(client: mongodb::Client) -> LockClient {
    LockClient::new(client.database("harness").collection("locks"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_learnt_from_a_resent_attempt_is_lost_before_anyone_else_is_granted() {
    let server = TestServer::start().await.expect("emulator");
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    // A short command time limit: a call whose reply is lost fails after 500 ms (outcome
    // unknown), and the waiter sends the same attempt again.
    let a = LockClient::builder(locks(proxy.client()).collection().clone())
        .command_timeout(Duration::from_millis(500))
        .build()
        .expect("valid settings");
    let b = locks(server.new_client());
    b.create_indexes().await.expect("indexes");
    a.status(&Filter::default()).await.expect("A connects");

    let ttl = Duration::from_secs(3);
    // Every reply to A is lost from now on: its first attempt is applied, unanswered.
    proxy.lose_replies();
    let a_task = a.clone();
    let acquiring = tokio::spawn(async move {
        a_task
            .mutex(RESOURCE)
            .ttl(ttl)
            .acquire_timeout(Duration::from_secs(20))
            .await
    });
    // The observer sees the grant the first copy made.
    let seen_at;
    let first_token = loop {
        let held = b
            .status(&Filter::default().resource(RESOURCE))
            .await
            .expect("status");
        if let Some(lock) = held.first() {
            seen_at = Instant::now();
            break lock.fencing_token();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // Replies are lost for 600 ms more (well inside the TTL), then delivered again: the
    // first call has failed by then, and the attempt was sent again.
    tokio::time::sleep(Duration::from_millis(600)).await;
    proxy.heal();
    let guard = acquiring
        .await
        .expect("task")
        .expect("acquire")
        .expect("granted within 20 s");
    // From now on A's renewals cannot reach the server.
    proxy.blackhole();
    let returned_at = Instant::now();
    assert_eq!(
        guard.fencing_token(),
        first_token,
        "the scenario needs the grant of the first copy (not a fresh one after expiry)"
    );
    let sent_late_by = guard.attempt_sent_at().saturating_duration_since(seen_at);
    println!(
        "grant seen on the server at 0 ms; A's guard: attempt sent at {:.0} ms, returned at {:.0} ms, {:.0} ms left",
        sent_late_by.as_secs_f64() * 1e3,
        returned_at.duration_since(seen_at).as_secs_f64() * 1e3,
        guard.time_left().as_secs_f64() * 1e3
    );

    // B takes the lock as soon as the server lets it.
    let b_guard = loop {
        if let Some(g) = b
            .mutex(RESOURCE)
            .ttl(ttl)
            .try_acquire()
            .await
            .expect("B's attempt")
        {
            break g;
        }
        assert!(
            seen_at.elapsed() < Duration::from_secs(10),
            "B was never granted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let b_granted = seen_at.elapsed();
    let a_lost = guard.is_lost();
    println!(
        "B granted at {:.0} ms; A's guard lost then: {a_lost} ({:.0} ms left)",
        b_granted.as_secs_f64() * 1e3,
        guard.time_left().as_secs_f64() * 1e3
    );
    assert!(
        a_lost,
        "A still believed it held the lock when B was granted, {:.0} ms after the grant A holds \
         was made: its deadline counts from the re-send ({:.0} ms after that grant), not from the \
         first copy",
        b_granted.as_secs_f64() * 1e3,
        sent_late_by.as_secs_f64() * 1e3
    );
    drop(b_guard);
    std::mem::forget(guard);
    server.shutdown().await;
}
