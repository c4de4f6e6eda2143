//! Waiters whose own entry is still in force ([`OwnEntryLine`]): a lock id let go of within
//! its minimum hold, or whose lease ended without a release and sits in its lock-delay, waits
//! for the resource again under the same lock id while another client waits after it. The
//! library promises arrival order: it must stand in line like anybody, and be served first.
//!
//! A worker that picks this target takes the resource once under a lock id of its own, in
//! one of two ways, half of the time each:
//!
//! - **a minimum hold**: `mutex(..).min_hold(..).lock_id(..)`, released at once, so that the
//!   entry stays in force until the grant plus the hold;
//! - **a lock-delay**: `xlock` with a short TTL and a lock-delay (the low-level API: nothing
//!   renews it), never released: the holder believes until its local deadline, and once the
//!   server's clock is past the lease's end the entry sits in its delay.
//!
//! Then it asks again under the same lock id (`acquire_timeout`, with the same hold or
//! delay), and a little later a second client of its slot (a [`LockClient`] of its own,
//! through the same proxy) asks for the resource under another lock id. Each holds briefly
//! once granted and releases. The oracle's (S9) judges the order the server served them in,
//! and counts the places taken while a lock id's own entry was in force, and those served.
//! The scenario sets neither `acquiring` nor `holding`: the pauses and kills aimed at
//! holders and waiters leave it alone; network faults on its client do not.

use std::time::{Duration, Instant};

use mongolock::{LockClient, LockDetails};
use rand::Rng;

use super::{COLLECTION, DB, Held, OwnEntryLine, Worker, owner_label};
use crate::history::FromLibrary;
use crate::history::{
    AcquireCall, GuardLog, HolderLog, LetGo, LossKind, Mode, ReleaseResult, work_step,
};

/// How the first lease keeps its entry in force after its holder is done with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InForce {
    /// Let go of within its minimum hold.
    Hold,
    /// Ended without a release: in its lock-delay.
    Delay,
}

impl Worker {
    /// One round of the scenario (see the module's documentation).
    pub(super) async fn own_entry_line(&mut self, locks: &LockClient) -> Held {
        let Some(line) = self.workload.own_entry.clone() else {
            return Held::Done;
        };
        let owner = owner_label(self.index, self.incarnation);
        self.calls += 1;
        let lock_id = format!("{owner}.line-{}", self.calls);
        let in_force = if self.rng.random_bool(0.5) {
            InForce::Hold
        } else {
            InForce::Delay
        };
        let first = match in_force {
            InForce::Hold => self.let_go_within_hold(locks, &line, &lock_id).await,
            InForce::Delay => self.left_to_its_delay(locks, &line, &lock_id).await,
        };
        if !first {
            return Held::Done;
        }
        let contender = self.contender_locks();
        let mutex = |locks: &LockClient, lock_id: &str| {
            let mutex = (locks.mutex(&line.resource).ttl(self.workload.ttl))
                .owner(owner.clone())
                .lock_id(lock_id.to_owned());
            match in_force {
                InForce::Hold => mutex.min_hold(line.min_hold),
                InForce::Delay => mutex.lock_delay(line.lock_delay),
            }
        };
        let again = mutex(locks, &lock_id);
        let after_id = format!("{lock_id}-after");
        let after = mutex(&contender, &after_id);
        let later = line.contender_after;
        let hold = (in_force == InForce::Hold).then_some(line.min_hold);
        let asked = Asked {
            recorder: self.recorder.clone(),
            client: self.index,
            resource: line.resource.clone(),
            timeout: self.workload.acquire_timeout,
            hold,
        };
        // Each holds a short step once granted and releases, so that the other is served.
        tokio::join!(asked.wait(again, &lock_id), async {
            tokio::time::sleep(later).await;
            asked.wait(after, &after_id).await;
        });
        Held::Done
    }

    /// The first lease of the minimum-hold way: granted, one write, released at once.
    async fn let_go_within_hold(
        &mut self,
        locks: &LockClient,
        line: &OwnEntryLine,
        lock_id: &str,
    ) -> bool {
        let invoked = Instant::now();
        let mutex = (locks.mutex(&line.resource).ttl(self.workload.ttl))
            .min_hold(line.min_hold)
            .owner(owner_label(self.index, self.incarnation))
            .lock_id(lock_id.to_owned());
        let got = mutex.acquire_timeout(self.workload.acquire_timeout).await;
        self.call(&line.resource, lock_id, invoked, matches!(got, Ok(Some(_))));
        self.recorder
            .attempt(matches!(got, Ok(None)), got.as_ref().is_err());
        let Ok(Some(guard)) = got else {
            return false;
        };
        let mut log = self.log_exclusive_and_write(invoked, &guard);
        self.recorder.min_hold(log.id, line.min_hold);
        log.lets_go(LetGo::Released);
        let released = guard.release().await;
        log.release = Some(ReleaseResult::of(&released));
        self.recorder.holder(log);
        released.is_ok()
    }

    /// The first lease of the lock-delay way: `xlock` with a short TTL, believed until its
    /// local deadline, never released; returns once the server's clock is past the lease's
    /// end (its entry in its delay), or false if it was not granted.
    async fn left_to_its_delay(
        &mut self,
        locks: &LockClient,
        line: &OwnEntryLine,
        lock_id: &str,
    ) -> bool {
        let ttl = line.short_ttl;
        let details = LockDetails::default()
            .ttl(ttl)
            .lock_delay(line.lock_delay)
            .owner(owner_label(self.index, self.incarnation));
        let sent = Instant::now();
        let Ok(grant) = locks.xlock(&line.resource, lock_id, details).await else {
            return false;
        };
        let deadline = sent + ttl - ttl / 10;
        let granted_ms = grant.holder().created_at().timestamp_millis();
        if Instant::now() >= deadline {
            // The reply came after the lease's deadline: nobody believes this grant (a
            // handle's call would withdraw it), and no holder is logged. Its entry is left to
            // its TTL and its delay all the same.
            self.wait_for_server_past(granted_ms + ttl.as_millis() as i64 + 100)
                .await;
            return true;
        }
        let mut log = HolderLog {
            lock_id: lock_id.to_owned(),
            invoked_at: sent,
            attempt_sent_at: sent,
            ttl: Some(ttl),
            lock_delay: Some(line.lock_delay),
            max_deadline: Some(deadline),
            server_granted_ms: Some(granted_ms),
            ..HolderLog::granted(
                self.recorder.next_id(),
                self.index,
                Mode::Exclusive,
                grant.resource(),
                grant.fencing_token(),
            )
        };
        if Instant::now() < deadline {
            self.write(&mut log);
            tokio::time::sleep_until(deadline.into()).await;
        }
        log.notice(Instant::now().max(deadline), LossKind::Deadline);
        self.recorder.holder(log);
        // Past the lease's end by the server's clock: the entry is in its delay, not live
        // (a live one would be resumed under the lock id, not waited for).
        self.wait_for_server_past(granted_ms + ttl.as_millis() as i64 + 100)
            .await;
        true
    }

    /// Waits until the server's clock, as the recorder maps it, is past `ms`.
    async fn wait_for_server_past(&self, ms: i64) {
        while self
            .recorder
            .server_ms(Instant::now())
            .is_none_or(|now| now < ms)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Records a waiting call of the scenario.
    fn call(&self, resource: &str, lock_id: &str, invoked_at: Instant, granted: bool) {
        self.recorder.acquire_call(AcquireCall {
            client: self.index,
            resource: resource.to_owned(),
            lock_id: lock_id.to_owned(),
            invoked_at,
            ended_at: Instant::now(),
            granted,
            timeout: Some(self.workload.acquire_timeout),
        });
    }

    /// The slot's second client, for the waiter after: a [`LockClient`] of its own through
    /// the slot's proxy, made at its first use.
    fn contender_locks(&mut self) -> LockClient {
        if let Some(locks) = &self.contender {
            return locks.clone();
        }
        let client = mongodb::Client::with_options(self.options.clone()).expect("valid options");
        let locks = LockClient::new(client.database(DB).collection(COLLECTION));
        self.contender = Some(locks.clone());
        locks
    }
}

/// A waiter of a scenario (the two waits here, the other client of the `step` submodule).
pub(super) struct Asked {
    /// Where its call and holding are recorded.
    pub(super) recorder: crate::history::Recorder,
    /// Its client slot.
    pub(super) client: usize,
    /// The resource.
    pub(super) resource: String,
    /// How long it waits at most.
    pub(super) timeout: Duration,
    /// The minimum hold asked for (the hold way), for (S12).
    pub(super) hold: Option<Duration>,
}

impl Asked {
    /// Waits for the lock with `mutex` (under `lock_id`) and records the call; if granted,
    /// holds a short step (one write) and releases. Returns when the grant reached it.
    pub(super) async fn wait(&self, mutex: mongolock::Mutex, lock_id: &str) -> Option<Instant> {
        let invoked = Instant::now();
        let got = mutex.acquire_timeout(self.timeout).await;
        self.hold(lock_id, invoked, got, Some(self.timeout)).await
    }

    /// Asks for the lock with `mutex` (under `lock_id`) every 20 ms (`try_acquire`, outside
    /// the line) until it is granted or the timeout has passed, as one call (not judged by
    /// (11)); then as [`Asked::wait`]. Granted as soon as the server frees the lock, whatever
    /// the client knows of the server's clock.
    pub(super) async fn poll(&self, mutex: mongolock::Mutex, lock_id: &str) -> Option<Instant> {
        let invoked = Instant::now();
        let got = loop {
            let got = mutex.try_acquire().await;
            if !matches!(got, Ok(None)) || invoked.elapsed() >= self.timeout {
                break got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        self.hold(lock_id, invoked, got, None).await
    }

    /// Records the call that began at `invoked` and returned `got`; if granted, holds a
    /// short step (one write) and releases. Returns when the grant reached it.
    async fn hold(
        &self,
        lock_id: &str,
        invoked: Instant,
        got: mongolock::Result<Option<mongolock::LockGuard>>,
        timeout: Option<Duration>,
    ) -> Option<Instant> {
        self.recorder.acquire_call(AcquireCall {
            client: self.client,
            resource: self.resource.clone(),
            lock_id: lock_id.to_owned(),
            invoked_at: invoked,
            ended_at: Instant::now(),
            granted: matches!(got, Ok(Some(_))),
            timeout,
        });
        self.recorder
            .attempt(matches!(got, Ok(None)), got.as_ref().is_err());
        let Ok(Some(guard)) = got else {
            return None;
        };
        let id = self.recorder.next_id();
        let mut log = HolderLog::new(id, self.client, Mode::Exclusive, invoked, &guard);
        if let Some(hold) = self.hold {
            self.recorder.min_hold(id, hold);
        }
        let step_end = Instant::now() + Duration::from_millis(50);
        work_step(&mut log, &guard, &self.recorder.record, step_end).await;
        log.check_lost(&guard);
        log.lets_go(LetGo::Released);
        log.release = Some(ReleaseResult::of(&guard.release().await));
        let granted_at = log.granted_at;
        self.recorder.holder(log);
        Some(granted_at)
    }
}
