//! A held lease is kept alive in the background, all of a client's leases with one command
//! per tick; and a holder learns that its lease is lost no later than its local deadline,
//! before the server can grant the lock to anyone else: cut off from the server, with replies
//! delayed, with its process paused past the TTL, and when an operator force-releases it.
//!
//! Faults come from the emulator's fault proxy between the holder and the server; the other
//! contender talks to the server directly. These tests need the emulator (its proxy and
//! clock), so they are named `emulator_only_`.

mod common;

use std::time::Duration;

use common::env;
use mongolock::{Filter, LeaseState, LockClient, LossReason};
use mongolock_testkit::{FaultProxy, TestServer};

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// An emulator, a holder's client that goes through a fault proxy, and a client that goes
/// straight to the server.
struct Setup {
    server: TestServer,
    proxy: FaultProxy,
    holder: LockClient,
    direct: LockClient,
}

async fn setup() -> Setup {
    let server = TestServer::start().await.expect("emulator starts");
    let proxy = FaultProxy::start(server.addr())
        .await
        .expect("proxy starts");
    let holder = LockClient::new(proxy.client().database("leases").collection("locks"));
    let direct = LockClient::new(server.new_client().database("leases").collection("locks"));
    Setup {
        server,
        proxy,
        holder,
        direct,
    }
}

/// Polls `check` every 10 ms for up to `limit`; true once it held.
async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < until {
        if check() {
            return true;
        }
        tokio::time::sleep(ms(10)).await;
    }
    check()
}

#[tokio::test]
async fn leases_outlive_their_ttl_while_renewed_with_one_command_per_tick_for_all() {
    let env = env("leases_keepalive").await;
    let (monitor, db) = env.monitored().await;
    let locks = LockClient::new(db.collection("locks"));
    let ttl = ms(1_500);
    let every = ms(150);
    let mut guards = Vec::new();
    for i in 0..40 {
        let mutex = locks.mutex(format!("r{i}")).ttl(ttl).extend_every(every);
        guards.push(mutex.acquire().await.unwrap());
    }
    // Let the renewals that overlapped the acquires finish before watching the steady state.
    tokio::time::sleep(every * 2).await;
    monitor.take();
    // Twice the TTL: without renewals every lease would have ended on the server.
    let window = ttl * 2;
    tokio::time::sleep(window).await;
    for guard in &guards {
        assert_eq!(guard.state(), LeaseState::Held, "{}", guard.resource());
    }
    let sent = monitor.take();
    let held = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 40);
    assert!(held.iter().all(|s| !s.is_expired()), "the server agrees");
    let renewals: Vec<_> = sent.iter().filter(|(name, _)| name == "update").collect();
    // One update per tick for all 40 leases, naming each lease in a statement of its own: the
    // number of commands follows the ticks (at most window / period, plus slack for the
    // first and last), never the leases.
    assert!(renewals.len() >= 2, "{} renewals", renewals.len());
    let ticks = (window.as_millis() / every.as_millis()) as usize + 2;
    assert!(
        renewals.len() <= ticks,
        "{} renewals for {ticks} ticks",
        renewals.len()
    );
    for (_, command) in &renewals {
        assert_eq!(command.get_array("updates").unwrap().len(), 40);
    }
    assert!(
        !sent.iter().any(|(name, _)| name == "aggregate"),
        "a full count needs no check, lease by lease"
    );
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert_eq!(locks.leases(), 0);
}

#[tokio::test]
async fn emulator_only_a_holder_cut_off_learns_before_anyone_else_can_take_over() {
    let s = setup().await;
    let guard = s
        .holder
        .mutex("job")
        .ttl(ms(3_000))
        .extend_every(ms(200))
        .safety_margin(ms(1_000))
        .acquire()
        .await
        .unwrap();
    s.proxy.blackhole();
    assert!(
        eventually(ms(2_000), || guard.state() == LeaseState::Suspended).await,
        "renewals fail: suspended first, {:?}",
        guard.state()
    );
    let reason = tokio::time::timeout(ms(5_000), guard.lost())
        .await
        .expect("lost() resolves by the deadline");
    assert_eq!(reason, LossReason::Deadline);
    assert!(guard.is_lost());
    // The holder knows; the server still counts the lease, so nobody else has it yet.
    assert!(
        s.direct.mutex("job").try_acquire().await.unwrap().is_none(),
        "the loss was reported before the server could grant the lock to another"
    );
    let next = s
        .direct
        .mutex("job")
        .acquire_timeout(ms(5_000))
        .await
        .unwrap()
        .expect("the lease ends on the server after its TTL");
    assert!(next.fencing_token() > guard.fencing_token());
    s.proxy.heal();
    drop(guard);
    s.holder.shutdown().await;
    // The background release of the lost guard removes nothing of the new holder's.
    let held = s.direct.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].fencing_token(), next.fencing_token());
    drop(s.server);
}

#[tokio::test]
async fn emulator_only_replies_slower_than_the_lease_are_a_loss() {
    let s = setup().await;
    let guard = s
        .holder
        .mutex("job")
        .ttl(ms(1_200))
        .extend_every(ms(100))
        .safety_margin(ms(200))
        .acquire()
        .await
        .unwrap();
    // Every renewal now takes 2 s to come back: longer than the whole lease.
    s.proxy.add_latency(ms(1_000));
    let reason = tokio::time::timeout(ms(5_000), guard.lost())
        .await
        .expect("lost() resolves by the deadline");
    assert_eq!(reason, LossReason::Deadline);
    s.proxy.heal();
}

#[tokio::test]
async fn emulator_only_a_grant_that_arrives_too_late_is_not_returned() {
    let s = setup().await;
    // A round trip of 600 ms against a lease of 400 ms: every grant is stale on arrival.
    s.proxy.add_latency(ms(300));
    let acquired = s
        .holder
        .mutex("job")
        .ttl(ms(400))
        .extend_every(ms(100))
        .safety_margin(ms(50))
        .acquire_timeout(ms(2_000))
        .await
        .unwrap();
    assert!(
        acquired.is_none(),
        "never a guard whose lease already ran out"
    );
    s.proxy.heal();
    s.holder.shutdown().await;
    let live: Vec<_> = s
        .direct
        .status(&Filter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|s| !s.is_expired())
        .collect();
    assert!(live.is_empty(), "withdrawn: {live:?}");
}

#[test]
fn emulator_only_a_paused_holder_knows_it_lost_the_lease_the_moment_it_resumes() {
    let main = tokio::runtime::Runtime::new().unwrap();
    let s = main.block_on(setup());
    let (holder, direct) = (s.holder.clone(), s.direct.clone());
    // The holder runs on a runtime of its own, on one thread, which we then stall: no task
    // of the holder (its keepalive included) runs while it is paused.
    let paused = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let guard = runtime
            .block_on(
                holder
                    .mutex("job")
                    .ttl(ms(600))
                    .extend_every(ms(100))
                    .acquire(),
            )
            .unwrap();
        assert!(!guard.is_lost());
        std::thread::sleep(ms(1_500)); // the pause: longer than the TTL
        // First thing on resuming, before any task could run: the guard knows.
        let lost_at_once = guard.is_lost();
        let state = guard.state();
        drop(guard);
        (lost_at_once, state)
    });
    // Meanwhile the lease ends on the server, and another holder takes over.
    let taken = main.block_on(async {
        tokio::time::sleep(ms(300)).await;
        direct
            .mutex("job")
            .acquire_timeout(ms(3_000))
            .await
            .unwrap()
            .expect("the paused holder's lease ends by its TTL")
    });
    let (lost_at_once, state) = paused.join().unwrap();
    assert!(
        lost_at_once,
        "the paused holder still believed it held the lock"
    );
    assert_eq!(state, LeaseState::Lost(LossReason::Deadline));
    main.block_on(async {
        taken.release().await.unwrap();
        drop(s);
    });
}

#[tokio::test]
async fn emulator_only_a_force_release_is_reported_as_revoked() {
    let s = setup().await;
    let guard = s
        .holder
        .mutex("migration")
        .ttl(ms(30_000))
        .extend_every(ms(100))
        .acquire()
        .await
        .unwrap();
    assert_eq!(s.direct.force_release("migration").await.unwrap(), 1);
    let reason = tokio::time::timeout(ms(5_000), guard.lost())
        .await
        .expect("the next renewal finds the lease gone");
    assert_eq!(reason, LossReason::Revoked);
    let error = guard.release().await.unwrap_err();
    assert!(
        matches!(error.kind(), mongolock::ErrorKind::LeaseLost { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn emulator_only_a_lease_ended_by_the_servers_clock_is_reported_as_revoked() {
    let s = setup().await;
    let guard = s
        .holder
        .mutex("job")
        .ttl(ms(30_000))
        .extend_every(ms(100))
        .acquire()
        .await
        .unwrap();
    let other = s
        .holder
        .mutex("other")
        .ttl(ms(30_000))
        .acquire()
        .await
        .unwrap();
    // The server's clock jumps past the TTL: the server ends the lease, which no local
    // clock could have foreseen. The next renewal finds it gone; its reply also shows the
    // step, which shortens the deadline past: whichever is seen first is the reason.
    s.server.clock().advance(Duration::from_secs(31));
    let reason = tokio::time::timeout(ms(5_000), guard.lost()).await.unwrap();
    assert!(
        matches!(reason, LossReason::Revoked | LossReason::Deadline),
        "{reason:?}"
    );
    assert!(other.is_lost(), "both leases ended on the server");
    drop((guard, other));
    s.holder.shutdown().await;
}

#[tokio::test]
async fn emulator_only_one_revoked_lease_among_many_is_the_only_one_lost() {
    let s = setup().await;
    let mut guards = Vec::new();
    for i in 0..5 {
        let mutex = s
            .holder
            .mutex(format!("r{i}"))
            .ttl(ms(30_000))
            .extend_every(ms(100));
        guards.push(mutex.acquire().await.unwrap());
    }
    // Two permits of one semaphore on one resource: the renewal count alone cannot tell
    // their leases apart, so the keeper checks them one by one.
    let gpus = s
        .holder
        .semaphore("gpu", 2)
        .ttl(ms(30_000))
        .extend_every(ms(100));
    let (a, b) = (gpus.acquire().await.unwrap(), gpus.acquire().await.unwrap());
    s.direct.force_release("r2").await.unwrap();
    s.direct.unlock(b.lock_id()).await.unwrap();
    assert_eq!(
        tokio::time::timeout(ms(5_000), guards[2].lost())
            .await
            .unwrap(),
        LossReason::Revoked
    );
    assert_eq!(
        tokio::time::timeout(ms(5_000), b.lost()).await.unwrap(),
        LossReason::Revoked
    );
    // A few more ticks: the others are still held.
    tokio::time::sleep(ms(400)).await;
    for (i, guard) in guards.iter().enumerate() {
        assert_eq!(guard.is_lost(), i == 2, "r{i}");
    }
    assert!(!a.is_lost());
}
