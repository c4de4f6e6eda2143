//! Lock-delay: after a lease ends without a release (its TTL ran out, or it was revoked),
//! nobody is granted the resource until the delay has passed by the server's clock; a
//! release frees it at once.

mod common;

use std::time::Duration;

use common::{emulator_env, env, secs};
use mongolock::{Attempt, Filter, LeaseState, LockDetails, LossReason};

fn delayed(ttl: u64, delay: u64) -> LockDetails {
    LockDetails::default()
        .ttl(secs(ttl))
        .lock_delay(secs(delay))
}

#[tokio::test]
async fn emulator_only_an_expired_lease_keeps_the_resource_for_its_delay() {
    let Some(env) = emulator_env("delay_expired").await else {
        return;
    };
    let locks = &env.locks;
    let old = locks.xlock("r", "a", delayed(10, 5)).await.unwrap();
    // The grant counts its lease, not its delay.
    let lease_end = old.holder().expires_at().unwrap();
    assert_eq!(
        lease_end.timestamp_millis() - old.holder().created_at().timestamp_millis(),
        10_000
    );
    assert_eq!(old.holder().lock_delay(), Some(secs(5)));

    env.advance(secs(11));
    // The lease ended: it cannot be renewed, and its lock id holds nothing.
    assert_eq!(locks.renew("a", secs(10)).await.unwrap(), 0);
    let status = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(status.len(), 1, "the entry stays for its delay: {status:?}");
    assert!(status[0].is_expired());
    // What is left of the delay, by the server's clock.
    let left = status[0]
        .lock_delay_remaining()
        .expect("within its lock-delay");
    assert!(
        left > Duration::from_millis(3_500) && left <= secs(4),
        "{left:?}"
    );
    // Nobody is granted it within the delay: not another lock id, not a reader, not the
    // lock id that lost it.
    let error = locks
        .xlock("r", "b", LockDetails::default())
        .await
        .unwrap_err();
    assert!(error.is_already_locked(), "{error}");
    assert!(
        locks
            .slock("r", "reader", LockDetails::default(), None)
            .await
            .unwrap_err()
            .is_already_locked()
    );
    let again = mongolock::AcquireRequest::exclusive("r", "a", delayed(10, 5));
    let Attempt::Contended(contention) = locks.acquire(&again).await.unwrap() else {
        panic!("the lock id that lost its lease must not get it back within the delay");
    };
    // The wait the server gives is until the delay's end (the emulator's clock runs on
    // between the two calls).
    let wait = contention.wait().unwrap();
    assert!(
        wait > Duration::from_millis(3_500) && wait <= secs(4),
        "{wait:?}"
    );

    // Still within it (more than 3.5 s were left; the emulator's clock also runs on in real
    // time, so the step leaves half a second to spare).
    env.advance(Duration::from_millis(3_000));
    common::assert_xlock_refused(locks, "r", "b").await;
    env.advance(Duration::from_millis(1_100));
    let status = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(status[0].lock_delay_remaining(), None, "the delay is over");
    let next = locks.xlock("r", "b", LockDetails::default()).await.unwrap();
    assert!(next.fencing_token() > old.fencing_token());
}

#[tokio::test]
async fn a_release_frees_the_resource_at_once() {
    let env = env("delay_release").await;
    let locks = &env.locks;
    let grant = locks.xlock("r", "a", delayed(30, 60)).await.unwrap();
    assert!(locks.release(&grant).await.unwrap());
    let next = locks.xlock("r", "b", LockDetails::default()).await.unwrap();
    assert!(next.fencing_token() > grant.fencing_token());

    // So does the unlock of a group, and the release of a guard.
    let _ = locks.xlock("s", "g", delayed(30, 60)).await.unwrap();
    assert_eq!(locks.unlock("g").await.unwrap(), 1);
    let _ = locks.xlock("s", "h", LockDetails::default()).await.unwrap();
    let mutex = locks.mutex("m").ttl(secs(30)).lock_delay(secs(60));
    mutex.acquire().await.unwrap().release().await.unwrap();
    assert!(locks.mutex("m").try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn emulator_only_a_late_release_by_the_holder_ends_its_delay() {
    // The holder says it has stopped: nothing is left for the delay to guard against.
    let Some(env) = emulator_env("delay_late_release").await else {
        return;
    };
    let locks = &env.locks;
    let grant = locks.xlock("r", "a", delayed(10, 30)).await.unwrap();
    env.advance(secs(11));
    common::assert_xlock_refused(locks, "r", "b").await;
    assert!(locks.release(&grant).await.unwrap());
    let _ = locks.xlock("r", "b", LockDetails::default()).await.unwrap();
}

#[tokio::test]
async fn emulator_only_a_revoked_lease_keeps_the_resource_for_its_delay() {
    let Some(env) = emulator_env("delay_revoked").await else {
        return;
    };
    let locks = &env.locks;
    let mutex = (locks.mutex("r").ttl(secs(30)).lock_delay(secs(10)))
        .extend_every(Duration::from_millis(200));
    let guard = mutex.acquire().await.unwrap();
    let token = guard.fencing_token();
    assert_eq!(locks.force_release("r").await.unwrap(), 1);
    // A second break finds no lease left to end, and does not stretch the delay.
    assert_eq!(locks.force_release("r").await.unwrap(), 0);
    // The holder learns that it lost the lease: it was revoked.
    let reason = tokio::time::timeout(secs(30), guard.lost()).await.unwrap();
    assert_eq!(reason, LossReason::Revoked);
    assert!(matches!(guard.state(), LeaseState::Lost(_)));
    // Nobody gets it within the delay, counted from the break.
    env.advance(secs(9));
    assert!(locks.mutex("r").try_acquire().await.unwrap().is_none());
    env.advance(Duration::from_millis(1_100));
    let next = locks.mutex("r").try_acquire().await.unwrap().unwrap();
    assert!(next.fencing_token() > token);
}

#[tokio::test]
async fn emulator_only_a_lock_without_ttl_is_delayed_only_when_revoked() {
    let Some(env) = emulator_env("delay_no_ttl").await else {
        return;
    };
    let locks = &env.locks;
    let details = LockDetails::default().lock_delay(secs(5));
    let _ = locks.xlock("r", "a", details).await.unwrap();
    env.advance(secs(3600));
    common::assert_xlock_refused(locks, "r", "b").await;
    assert_eq!(locks.force_release("r").await.unwrap(), 1);
    common::assert_xlock_refused(locks, "r", "b").await;
    env.advance(Duration::from_millis(5_100));
    let _ = locks.xlock("r", "b", LockDetails::default()).await.unwrap();
}

#[tokio::test]
async fn emulator_only_a_readers_delay_keeps_writers_out_not_readers() {
    // A slow reader may still read: another reader cannot race it, a writer can.
    let Some(env) = emulator_env("delay_shared").await else {
        return;
    };
    let locks = &env.locks;
    let _ = locks
        .slock("r", "a", delayed(10, 5), Some(2))
        .await
        .unwrap();
    env.advance(secs(11));
    common::assert_xlock_refused(locks, "r", "w").await;
    // Its permit still counts under the cap.
    let _ = locks
        .slock("r", "b", LockDetails::default(), Some(2))
        .await
        .unwrap();
    assert!(
        locks
            .slock("r", "c", LockDetails::default(), Some(2))
            .await
            .unwrap_err()
            .is_already_locked()
    );
    locks.unlock("b").await.unwrap();
    env.advance(secs(5));
    let _ = locks.xlock("r", "w", LockDetails::default()).await.unwrap();
}

#[tokio::test]
async fn emulator_only_a_leader_that_stalls_past_its_lease_leads_nobody_for_the_delay() {
    let Some(env) = emulator_env("delay_election").await else {
        return;
    };
    let election = env.locks.election("e").ttl(secs(10)).lock_delay(secs(5));
    let leading = election.campaign("a").await.unwrap();
    assert_eq!(election.leader().await.unwrap().unwrap().value(), "a");
    env.advance(secs(11));
    assert!(election.leader().await.unwrap().is_none(), "no leader");
    assert!(election.try_campaign("b").await.unwrap().is_none());
    env.advance(secs(5));
    let next = election.try_campaign("b").await.unwrap().unwrap();
    assert!(next.term() > leading.term());
}

#[tokio::test]
async fn a_delay_too_long_is_a_typed_error() {
    let env = env("delay_invalid").await;
    let details = LockDetails::default().lock_delay(mongolock::MAX_TTL * 2);
    let error = env.locks.xlock("r", "a", details).await.unwrap_err();
    assert_eq!(common::invalid_argument(&error), "lock_delay");
    let error = env
        .locks
        .mutex("r")
        .lock_delay(mongolock::MAX_TTL * 2)
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(common::invalid_argument(&error), "lock_delay");
    // Zero is no delay.
    assert_eq!(
        LockDetails::default()
            .lock_delay(Duration::ZERO)
            .lock_delay_value(),
        None
    );
}

/// Polls `try_acquire` on `resource` through `locks` until it is granted; returns when, on
/// the test's clock.
async fn granted_at(locks: &mongolock::LockClient, resource: &str) -> std::time::Instant {
    loop {
        if let Some(guard) = locks.mutex(resource).try_acquire().await.unwrap() {
            let at = std::time::Instant::now();
            guard.release().await.unwrap();
            return at;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The bound the lock-delay docs state, for a revoked holder that can reach the server: it
/// learns of the revocation at its next renewal, within its renewal period plus that
/// renewal's time limit (here 1 s + 1 s); a lock-delay at least that long (here 2.5 s)
/// keeps it from overlapping its successor.
#[tokio::test]
async fn emulator_only_a_reachable_revoked_holder_is_told_within_the_delay_it_is_given() {
    let Some(env) = emulator_env("delay_bound_reachable").await else {
        return;
    };
    let locks = &env.locks;
    let mutex = (locks.mutex("r").ttl(secs(3)))
        .lock_delay(Duration::from_millis(2_500))
        .extend_every(secs(1));
    let guard = mutex.acquire().await.unwrap();
    // Just after a renewal: the holder learns at the next one, a full period later.
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    let other = env.other_client().await;
    assert_eq!(other.force_release("r").await.unwrap(), 1);
    let successor = granted_at(&other, "r");
    let told = async {
        guard.lost().await;
        std::time::Instant::now()
    };
    let (successor, told) = tokio::join!(successor, told);
    assert!(
        told < successor,
        "the successor was granted before the holder was told"
    );
    other.shutdown().await;
}

/// A revoked holder cut off from the server learns only at its local deadline, up to the
/// TTL after its last renewal: a lock-delay of at least the TTL keeps it from overlapping
/// its successor even then.
#[tokio::test]
async fn emulator_only_a_cut_off_revoked_holder_is_covered_by_a_delay_of_the_ttl() {
    let Some(common::Proxied {
        server: _server,
        proxy,
        cut_off,
        direct,
    }) = common::proxied("delay_bound_cut_off").await
    else {
        return;
    };
    let mutex = (cut_off.mutex("r").ttl(secs(3))).lock_delay(secs(3));
    let guard = mutex.acquire().await.unwrap();
    proxy.blackhole();
    assert_eq!(direct.force_release("r").await.unwrap(), 1);
    let successor = granted_at(&direct, "r");
    let told = async {
        guard.lost().await;
        std::time::Instant::now()
    };
    let (successor, told) = tokio::join!(successor, told);
    assert!(
        told < successor,
        "the successor was granted before the holder was told"
    );
    proxy.heal();
}

/// A restarted process resumes its lease with the lock-delay it was granted with, even when
/// it does not ask for one: when the resumed lease then ends without a release, nobody is
/// granted the resource within that delay.
#[tokio::test]
async fn emulator_only_a_resumed_lease_keeps_the_delay_it_was_granted_with() {
    let Some(env) = emulator_env("delay_resumed").await else {
        return;
    };
    // The first process: granted, then gone without a release (no keeper renews it).
    let first = env.other_client().await;
    let grant = first.xlock("job", "svc-1", delayed(10, 5)).await.unwrap();
    // Started again under the same lock id, without a lock-delay of its own.
    let resumed = (env.locks.mutex("job").lock_id("svc-1").ttl(secs(10)))
        .try_acquire()
        .await
        .unwrap()
        .expect("resumed");
    assert_eq!(resumed.fencing_token(), grant.fencing_token(), "resumed");
    assert_eq!(resumed.grant().holder().lock_delay(), Some(secs(5)));
    // Its lease ends without a release: the server's clock steps past it.
    env.advance(secs(11));
    common::assert_xlock_refused(&first, "job", "other").await;
    env.advance(secs(5));
    let next = first.xlock("job", "other", LockDetails::default()).await;
    assert!(next.is_ok(), "granted once the delay passed: {next:?}");
    drop(resumed);
    first.shutdown().await;
}

/// Every member of a multi-lock carries the set's lock-delay: when the set's lease ends
/// without a release, each member stays taken for the delay. Members a round took and let go
/// of when the round was refused were released, not lost: no delay keeps them.
#[tokio::test]
async fn emulator_only_a_multi_locks_members_keep_its_delay_and_a_refused_round_leaves_none() {
    let Some(env) = emulator_env("delay_multi").await else {
        return;
    };
    let other = env.other_client().await;
    let set = || {
        env.locks
            .multi(["a", "b"])
            .ttl(secs(10))
            .lock_delay(secs(5))
    };

    // A refused round: b is taken, a is let go of at once, with no delay.
    let blocker = other
        .xlock("b", "blocker", LockDetails::default())
        .await
        .unwrap();
    assert!(set().try_acquire().await.unwrap().is_none());
    let a = other.xlock("a", "third", LockDetails::default()).await;
    assert!(
        a.is_ok(),
        "a, let go of by the refused round, is free: {a:?}"
    );
    assert!(other.release(&a.unwrap()).await.unwrap());
    assert!(other.release(&blocker).await.unwrap());

    // The whole set, held, then lost to the clock.
    let held = set().try_acquire().await.unwrap().expect("both free");
    env.advance(secs(11));
    common::assert_xlock_refused(&other, "a", "third").await;
    common::assert_xlock_refused(&other, "b", "third").await;
    env.advance(secs(5));
    for member in ["a", "b"] {
        let next = other.xlock(member, "third", LockDetails::default()).await;
        assert!(
            next.is_ok(),
            "{member} granted once the delay passed: {next:?}"
        );
    }
    drop(held);
    other.shutdown().await;
}

/// A restarted process whose lease ended without a release and sits in its lock-delay waits
/// in line like anybody: it asks before another host and is served first, once the delay
/// has passed.
#[tokio::test]
async fn a_waiter_whose_own_lease_is_in_its_delay_keeps_its_place_in_line() {
    let env = env("delay_own_line").await;
    let first_process = env.other_client().await;
    let host_b = env.other_client().await;
    // Granted to host A's first process, which dies: nothing renews or releases it.
    let details = LockDetails::default()
        .ttl(Duration::from_millis(1_000))
        .lock_delay(Duration::from_millis(2_000));
    let _left_to_its_ttl = first_process
        .xlock("hourly", "host-a", details)
        .await
        .unwrap();
    // Its lease has ended; its delay runs until about 3 s.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let job = |locks: &mongolock::LockClient, host: &str| {
        locks
            .mutex("hourly")
            .ttl(Duration::from_millis(5_000))
            .lock_id(host)
    };
    let served_at = |locks: mongolock::LockClient, host: &'static str| async move {
        let guard = job(&locks, host)
            .acquire_timeout(Duration::from_millis(8_000))
            .await
            .unwrap()
            .expect("granted once the delay passed");
        let at = std::time::Instant::now();
        guard.release().await.unwrap();
        at
    };
    let a = tokio::spawn(served_at(env.locks.clone(), "host-a"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = tokio::spawn(served_at(host_b.clone(), "host-b"));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert!(a < b, "host B, which came later, was served first");
    first_process.shutdown().await;
    host_b.shutdown().await;
}

/// The README's nightly job: a lease with a minimum hold and a lock-delay, lost mid-job (the
/// server's clock passed its end while the holder was paused), and its guard then dropped
/// (the `lost()` arm of the README's `select!`). The dropped guard's release is a late
/// release by the holder: it ends the delay, as above, but the hold still keeps the lock from
/// everybody until its grant plus the hold, so the next host to fire that night does not run
/// the job again.
#[tokio::test]
async fn emulator_only_a_lost_guard_dropped_within_its_hold_keeps_the_lock_until_the_holds_end() {
    let Some(env) = emulator_env("delay_lost_guard_hold").await else {
        return;
    };
    let locks = &env.locks;
    let job = (locks.mutex("nightly").ttl(secs(10)))
        .min_hold(secs(3600))
        .lock_delay(secs(600));
    let guard = job.acquire().await.unwrap();
    let token = guard.fencing_token();
    env.advance(secs(11));
    // Lost by its deadline or told by the server: either way the README's arm drops it.
    tokio::time::timeout(secs(30), guard.lost()).await.unwrap();
    drop(guard);
    // The release in the background lands (the entry is marked let go of), and the lock is
    // still taken: by the hold, not the delay.
    let let_go = async {
        loop {
            let status = locks.status(&Filter::default()).await.unwrap();
            if status.iter().any(|s| s.holder().let_go_at().is_some()) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let status = tokio::time::timeout(secs(30), let_go).await.unwrap();
    assert_eq!(status.len(), 1, "{status:?}");
    assert_eq!(status[0].fencing_token(), token);
    assert!(status[0].min_hold_remaining().is_some(), "{status:?}");
    let next_host = locks.mutex("nightly");
    assert!(next_host.try_acquire().await.unwrap().is_none());
    // Past the delay's end, still within the hold: still taken.
    env.advance(secs(1200));
    assert!(next_host.try_acquire().await.unwrap().is_none());
    // Past the hold: free.
    env.advance(secs(3600));
    let next = next_host.try_acquire().await.unwrap();
    assert!(next.expect("free once the hold is over").fencing_token() > token);
}
