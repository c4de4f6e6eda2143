//! Periodic jobs with a minimum hold ([`Periodic`]): a job that must run at most once per
//! period across hosts whose timers do not agree (ShedLock's `lockAtLeastFor`).
//!
//! A worker that picks them becomes a *host* for a few periods. Its timer fires at the start
//! of each period (counted from the fleet's start), late by its own lateness (client `i`: `i`
//! times [`Periodic::lateness`]), and runs three short jobs, in a random order, each under a
//! lock with the minimum hold [`Periodic::min_hold`] (a little shorter than the period) and
//! without waiting (a job whose lock is taken skips this period):
//!
//! - **a mutex** (`mutex(..).min_hold(..).try_acquire()`), let go of by a release, or by
//!   dropping the guard in the runtime a quarter of the time;
//! - **a multi-lock** (`multi([..]).min_hold(..).try_acquire()`), each member logged as an
//!   exclusive holder of its resource, let go of by the set's release or drop;
//! - **the low-level calls**: `LockClient::acquire(&AcquireRequest)` and, once the job is
//!   done, `release_attempt(&request)` (the retiring release); an attempt whose outcome is
//!   unknown is withdrawn the same way. There is no keeper: the holder keeps a local deadline
//!   of its send plus the TTL less a tenth, and works well within it.
//!
//! A job writes under its lock, works for [`Periodic::job_ms`], and lets go, well within the
//! hold: the lock stays in force until the grant plus the hold, and the hosts whose timers
//! fire later in the period (or early in the next one) find it taken. What each holder asked
//! for is recorded ([`crate::history::Recorder::min_hold`]) for the oracle's (S12). The
//! mutex and multi-lock holders publish what they hold, so the nemeses on a holder's let-go,
//! pauses, kills and force-releases reach them as they reach other holders.
//!
//! Beside the hosts, an operator ([`operator`]) calls `purge_abandoned_groups` and `purge`
//! every few seconds while faults are injected: neither may cut short a hold under way.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mongolock::{
    AcquireRequest, Attempt, Filter, LeaseState, LockClient, LockDetails, LockGuard, LossReason,
    MultiGuard,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::hold::{Release, let_go_of};
use super::{Held, Periodic, Worker, Workload, attach_acquiring_pauses, lock, owner_label};
use crate::history::{
    AcquireCall, FaultKind, FromLibrary, GuardLog, HolderLog, LetGo, LossKind, Mode, OpKind,
    Recorder, ReleaseResult,
};

/// The three jobs a host's timer runs.
#[derive(Debug, Clone, Copy)]
enum Job {
    Mutex,
    Multi,
    LowLevel,
}

/// What a job holds through a handle: a mutex's guard, or a multi-lock's set.
trait JobLock: Release {
    /// The guards under it, in the order of their logs.
    fn guards(&self) -> Vec<&LockGuard>;
    /// Its state: lost as soon as any guard is.
    fn state(&self) -> LeaseState;
    /// Resolves when it is lost, with the reason.
    async fn lost_reason(&self) -> LossReason;
}

impl JobLock for LockGuard {
    fn guards(&self) -> Vec<&LockGuard> {
        vec![self]
    }
    fn state(&self) -> LeaseState {
        LockGuard::state(self)
    }
    async fn lost_reason(&self) -> LossReason {
        self.lost().await
    }
}

impl JobLock for MultiGuard {
    fn guards(&self) -> Vec<&LockGuard> {
        MultiGuard::guards(self).iter().collect()
    }
    fn state(&self) -> LeaseState {
        MultiGuard::state(self)
    }
    async fn lost_reason(&self) -> LossReason {
        self.lost().await
    }
}

/// Records a notice by every log if `held` counts as lost now; true if it does.
fn noticed(held: &impl JobLock, logs: &mut [HolderLog]) -> bool {
    if let LeaseState::Lost(reason) = held.state() {
        let now = Instant::now();
        for log in logs {
            log.notice(now, LossKind::of(&reason));
        }
        return true;
    }
    false
}

impl Worker {
    /// Hosts the periodic jobs for a few periods (see the module's documentation); stops
    /// early when asked to stop or once the faults are healed.
    pub(super) async fn periodic(&mut self, locks: &LockClient) -> Held {
        let Some(jobs) = self.workload.periodic.clone() else {
            return Held::Done;
        };
        let periods = self.rng.random_range(jobs.periods.0..=jobs.periods.1);
        let late = jobs.lateness * self.index as u32;
        let period_ms = (jobs.period.as_millis() as u64).max(1);
        for _ in 0..periods {
            // The timer: the start of the next period, late by this host's lateness.
            let since = self.epoch.elapsed().as_millis() as u64;
            let fires = self.epoch + Duration::from_millis((since / period_ms + 1) * period_ms);
            let fires = fires + late;
            loop {
                if self.ctl.stop.load(Ordering::SeqCst) || self.recorder.is_healed() {
                    return Held::Done;
                }
                let left = fires.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                tokio::time::sleep(left.min(Duration::from_millis(20))).await;
            }
            let mut order = [Job::Mutex, Job::Multi, Job::LowLevel];
            order.shuffle(&mut self.rng);
            for job in order {
                let held = match job {
                    Job::Mutex => self.mutex_job(locks, &jobs).await,
                    Job::Multi => self.multi_job(locks, &jobs).await,
                    Job::LowLevel => self.low_level_job(locks, &jobs).await,
                };
                if let Held::Killed = held {
                    return Held::Killed;
                }
            }
        }
        Held::Done
    }

    /// A fresh lock id for one job of this client, and its owner label.
    fn job_lock_id(&mut self) -> (String, String) {
        let owner = owner_label(self.index, self.incarnation);
        self.calls += 1;
        let lock_id = format!("{owner}.job-{}", self.calls);
        (owner, lock_id)
    }

    /// Records an acquire call of a job on `resources` that began at `invoked_at`.
    fn job_call(&self, resources: &[String], lock_id: &str, invoked_at: Instant, granted: bool) {
        let ended_at = Instant::now();
        for resource in resources {
            self.recorder.acquire_call(AcquireCall {
                client: self.index,
                resource: resource.clone(),
                lock_id: lock_id.to_owned(),
                invoked_at,
                ended_at,
                granted,
                timeout: None,
            });
        }
    }

    /// The mutex job: one try, a short job, a release (or a drop).
    async fn mutex_job(&mut self, locks: &LockClient, jobs: &Periodic) -> Held {
        let (owner, lock_id) = self.job_lock_id();
        let mutex = (locks.mutex(&jobs.mutex).ttl(self.workload.ttl))
            .min_hold(jobs.min_hold)
            .owner(owner)
            .lock_id(lock_id.clone());
        let invoked_at = Instant::now();
        self.ctl.acquiring.store(true, Ordering::SeqCst);
        let got = mutex.try_acquire().await;
        self.ctl.acquiring.store(false, Ordering::SeqCst);
        let resources = [jobs.mutex.clone()];
        self.job_call(&resources, &lock_id, invoked_at, matches!(got, Ok(Some(_))));
        self.recorder.attempt(false, got.is_err());
        let Ok(Some(guard)) = got else {
            return Held::Done;
        };
        let id = self.recorder.next_id();
        let mut logs = vec![HolderLog::new(
            id,
            self.index,
            Mode::Exclusive,
            invoked_at,
            &guard,
        )];
        attach_acquiring_pauses(&self.ctl, &mut logs);
        self.run_job(guard, logs, jobs).await
    }

    /// The multi-lock job: one round at every member, a short job, the set's release (or
    /// drop).
    async fn multi_job(&mut self, locks: &LockClient, jobs: &Periodic) -> Held {
        let (owner, lock_id) = self.job_lock_id();
        let multi = (locks.multi(jobs.multi.clone()).ttl(self.workload.ttl))
            .min_hold(jobs.min_hold)
            .owner(owner)
            .lock_id(lock_id.clone());
        let invoked_at = Instant::now();
        self.ctl.acquiring.store(true, Ordering::SeqCst);
        let got = multi.try_acquire().await;
        self.ctl.acquiring.store(false, Ordering::SeqCst);
        self.job_call(
            &jobs.multi,
            &lock_id,
            invoked_at,
            matches!(got, Ok(Some(_))),
        );
        self.recorder.attempt(false, got.is_err());
        let Ok(Some(set)) = got else {
            return Held::Done;
        };
        let number = self.recorder.next_id();
        let mut logs: Vec<HolderLog> = set
            .guards()
            .iter()
            .map(|guard| {
                let id = self.recorder.next_id();
                let mut log = HolderLog::new(id, self.index, Mode::Multi, invoked_at, guard);
                log.group = Some(number);
                log
            })
            .collect();
        attach_acquiring_pauses(&self.ctl, &mut logs);
        self.run_job(set, logs, jobs).await
    }

    /// Holds `held` (whose guards' logs are `logs`) for one job: publishes it for the
    /// nemeses, works, and lets go of it (as a nemesis asks, if one did), or, killed, forgets
    /// it. Hands the logs to the recorder.
    async fn run_job(
        &mut self,
        held: impl JobLock,
        mut logs: Vec<HolderLog>,
        jobs: &Periodic,
    ) -> Held {
        for log in &logs {
            self.recorder.min_hold(log.id, jobs.min_hold);
        }
        self.ctl.start_holding();
        *lock(&self.ctl.held) = logs.iter().map(|l| l.resource.clone()).collect();
        self.ctl.recipe.store(logs.len() > 1, Ordering::SeqCst);
        self.ctl.holding.store(true, Ordering::SeqCst);
        let (killed, nemesis) = self.job_work(&held, &mut logs, jobs).await;
        self.ctl.holding.store(false, Ordering::SeqCst);
        lock(&self.ctl.held).clear();
        self.ctl.recipe.store(false, Ordering::SeqCst);
        lock(&self.ctl.hold_until).take();
        if killed {
            std::mem::forget(held);
            for log in logs {
                self.recorder.holder(log);
            }
            return Held::Killed;
        }
        // A nemesis asked for just now comes with this let-go.
        let nemesis = nemesis.or_else(|| lock(&self.ctl.let_go).take());
        noticed(&held, &mut logs);
        if nemesis.is_none() && self.rng.random_bool(0.25) {
            // The job's guard goes out of scope: released in the background.
            for log in &mut logs {
                log.lets_go(LetGo::Dropped);
            }
            drop(held);
        } else {
            let ended = let_go_of(&mut self.rng, held, &mut logs, nemesis).await;
            if let (Some(kind), Some(ended)) = (nemesis, ended) {
                self.log_let_go_nemesis(kind, ended, &logs);
            }
        }
        for log in logs {
            self.recorder.holder(log);
        }
        Held::Done
    }

    /// The job under `held`: a pause or a kill asked for is carried out first; unless the
    /// lock is lost, one write under every guard, then work for a while racing the loss and
    /// sampling the local deadlines. True if the client is to die now (the caller forgets
    /// what it holds); with the nemesis for its let-go, if one was asked for meanwhile.
    async fn job_work(
        &mut self,
        held: &impl JobLock,
        logs: &mut [HolderLog],
        jobs: &Periodic,
    ) -> (bool, Option<FaultKind>) {
        for (log, guard) in logs.iter_mut().zip(held.guards()) {
            log.sample(guard);
        }
        if self.pause_or_kill(&held.guards(), logs) {
            return (true, None);
        }
        if noticed(held, logs) {
            return (false, None);
        }
        for log in logs.iter_mut() {
            self.write(log);
        }
        let length = self.rng.random_range(jobs.job_ms.0..=jobs.job_ms.1);
        let end = Instant::now() + Duration::from_millis(length);
        loop {
            let now = Instant::now();
            if now >= end {
                return (false, None);
            }
            if let Some(nemesis) = lock(&self.ctl.let_go).take() {
                return (false, Some(nemesis));
            }
            let tick = (end - now).min(Duration::from_millis(10));
            match tokio::time::timeout(tick, held.lost_reason()).await {
                Ok(reason) => {
                    let now = Instant::now();
                    for log in logs.iter_mut() {
                        log.notice(now, LossKind::of(&reason));
                    }
                    return (false, None);
                }
                Err(_) => {
                    for (log, guard) in logs.iter_mut().zip(held.guards()) {
                        log.sample(guard);
                    }
                }
            }
        }
    }

    /// The low-level job: `acquire` of a fresh request, a short job within the local
    /// deadline, `release_attempt` of the request.
    async fn low_level_job(&mut self, locks: &LockClient, jobs: &Periodic) -> Held {
        let (owner, lock_id) = self.job_lock_id();
        let ttl = self.workload.ttl;
        let details = LockDetails::default()
            .ttl(ttl)
            .min_hold(jobs.min_hold)
            .owner(owner);
        let request = AcquireRequest::exclusive(jobs.low_level.clone(), lock_id.clone(), details);
        let sent = Instant::now();
        self.ctl.acquiring.store(true, Ordering::SeqCst);
        let got = locks.acquire(&request).await;
        self.ctl.acquiring.store(false, Ordering::SeqCst);
        let grant = match &got {
            Ok(Attempt::Granted(grant)) => Some(grant.clone()),
            _ => None,
        };
        let resources = [jobs.low_level.clone()];
        self.job_call(&resources, &lock_id, sent, grant.is_some());
        self.recorder.attempt(false, got.is_err());
        let Some(grant) = grant else {
            if got.is_err_and(|e| e.is_outcome_unknown()) {
                // It may have been granted: withdrawn for good.
                let _ = locks.release_attempt(&request).await;
            }
            return Held::Done;
        };
        let deadline = sent + ttl - ttl / 10;
        if Instant::now() >= deadline {
            // Its acquire took longer than its lease may last: never believed (as a handle's
            // call withdraws such a grant), only let go of. It used to be logged as a holder
            // told of its loss at its grant, which (3) judged as a belief past the deadline
            // (--long seed 528491, run 528492).
            let _ = locks.release_attempt(&request).await;
            return Held::Done;
        }
        let id = self.recorder.next_id();
        let mut log = HolderLog {
            lock_id,
            invoked_at: sent,
            attempt_sent_at: sent,
            ttl: Some(ttl),
            max_deadline: Some(deadline),
            server_granted_ms: Some(grant.holder().created_at().timestamp_millis()),
            ..HolderLog::granted(
                id,
                self.index,
                Mode::Exclusive,
                grant.resource(),
                grant.fencing_token(),
            )
        };
        attach_acquiring_pauses(&self.ctl, std::slice::from_mut(&mut log));
        self.recorder.min_hold(log.id, jobs.min_hold);
        let length = self.rng.random_range(jobs.job_ms.0..=jobs.job_ms.1);
        let end = Instant::now() + Duration::from_millis(length);
        if Instant::now() < deadline {
            self.write(&mut log);
            tokio::time::sleep_until(end.min(deadline).into()).await;
        } else {
            // Paused since the look above: past the deadline, it writes nothing.
            log.notice(Instant::now(), LossKind::Deadline);
        }
        log.lets_go(LetGo::Released);
        log.release = Some(match locks.release_attempt(&request).await {
            Ok(true) => ReleaseResult::Ok,
            Ok(false) => ReleaseResult::Lost(LossKind::Other),
            Err(_) => ReleaseResult::Failed,
        });
        self.recorder.holder(log);
        Held::Done
    }
}

/// The operator beside the periodic jobs: until the faults are healed, every
/// [`Periodic::purge_every_ms`], `purge_abandoned_groups` and then `purge`, each recorded as
/// a purge. `purge_abandoned_groups` ends the live locks of a lock id with an expired lock
/// (a group taken as abandoned): each resource where a lock id it purged held a live lock
/// just before is recorded as force-released too, since its holder was not told.
pub async fn operator(observer: LockClient, recorder: Recorder, workload: Workload, seed: u64) {
    let Some(jobs) = workload.periodic else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0BE4_A70B_5EED_0F0F);
    loop {
        let wait = rng.random_range(jobs.purge_every_ms.0..=jobs.purge_every_ms.1);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        if recorder.is_healed() {
            return;
        }
        // The live locks of each lock id, just before.
        let mut live: HashMap<String, Vec<String>> = HashMap::new();
        for status in observer
            .status(&Filter::default())
            .await
            .unwrap_or_default()
        {
            if !status.is_expired() {
                (live.entry(status.lock_id().to_owned()).or_default())
                    .push(status.resource().to_owned());
            }
        }
        let start = Instant::now();
        let groups = observer.purge_abandoned_groups().await;
        let end = Instant::now();
        recorder.op(OpKind::Purge, start, end);
        if let Ok(purged) = &groups {
            for lock_id in purged.lock_ids() {
                for resource in live.get(lock_id).into_iter().flatten() {
                    recorder.op(OpKind::ForceRelease(resource.clone()), start, end);
                }
            }
        }
        let start = Instant::now();
        let _ = observer.purge().await;
        recorder.op(OpKind::Purge, start, Instant::now());
    }
}
