//! The library's recipes as workloads: a multi-lock (`LockClient::multi`) and an election
//! (`LockClient::election`).
//!
//! - **A multi-lock**: two or three resources of the multi-lock pool, named in a random
//!   order (the library sorts them), taken all or nothing with `acquire_timeout` under a
//!   lock id of the worker's own per call. Each member is logged as an exclusive holder of
//!   its resource with that member's token (so the exclusion, fencing and guarded-write
//!   checks judge "no two holders of any member"); the members share the set's number
//!   ([`HolderLog::group`]). The set's one loss signal ends the belief of every member: the
//!   holder checks `is_lost()` before each step, races each step against `lost()`, samples
//!   every member's local deadline, writes under every member, and releases the set.
//! - **An election**: the worker campaigns with `campaign_timeout`, advertising its owner
//!   label (the value is stored as the lock's owner, which the liveness probe reads), under
//!   a lock id of its own per campaign. The leader is logged as an exclusive holder of the
//!   election's resource whose token is its term; it leads in steps while `!is_lost()`,
//!   writing with its term, then resigns.
//!
//! Both are paused and killed at a step as the other holders are (a kill forgets the set or
//! the leadership); pauses and kills aimed at a client that is acquiring reach them too.
//! The nemeses on a holder's let-go are not aimed at them: they do not publish what they
//! hold in [`super::ClientCtl::held`].

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mongolock::{Leadership, LeaseState, LockClient, LockGuard, LossReason, MultiGuard};
use rand::Rng;
use rand::seq::{IndexedRandom, SliceRandom};

use super::{Held, Worker, attach_acquiring_pauses, owner_label};
use crate::history::{AcquireCall, HolderLog, LetGo, LossKind, Mode, PauseLog, ReleaseResult};

/// What a recipe holder holds, as the steps of work need it: its guards (the members of a
/// multi-lock, or the one under a leadership), its state and its one loss signal.
trait Recipe {
    /// The guards under it, in the order of their logs.
    fn guards(&self) -> Vec<&LockGuard>;
    /// Its state: lost as soon as any guard is.
    fn state(&self) -> LeaseState;
    /// True once it counts as lost.
    fn is_lost(&self) -> bool {
        matches!(self.state(), LeaseState::Lost(_))
    }
    /// Resolves when it is lost, with the reason.
    async fn lost_reason(&self) -> LossReason;
}

impl Recipe for MultiGuard {
    fn guards(&self) -> Vec<&LockGuard> {
        MultiGuard::guards(self).iter().collect()
    }
    fn state(&self) -> LeaseState {
        MultiGuard::state(self)
    }
    fn is_lost(&self) -> bool {
        MultiGuard::is_lost(self)
    }
    async fn lost_reason(&self) -> LossReason {
        self.lost().await
    }
}

impl Recipe for Leadership {
    fn guards(&self) -> Vec<&LockGuard> {
        vec![self.guard()]
    }
    fn state(&self) -> LeaseState {
        Leadership::state(self)
    }
    fn is_lost(&self) -> bool {
        Leadership::is_lost(self)
    }
    async fn lost_reason(&self) -> LossReason {
        self.lost().await
    }
}

/// Records a notice by every log if `held` counts as lost now; true if it does.
fn check_lost(held: &impl Recipe, logs: &mut [HolderLog]) -> bool {
    if let LeaseState::Lost(reason) = held.state() {
        let now = Instant::now();
        for log in logs {
            log.notice(now, LossKind::from(reason));
        }
        return true;
    }
    false
}

/// Samples the local deadline of each guard into its log.
fn sample(held: &impl Recipe, logs: &mut [HolderLog]) {
    for (log, guard) in logs.iter_mut().zip(held.guards()) {
        log.sample(guard);
    }
}

impl Worker {
    /// Takes some members of `pool` at once with `multi(..).acquire_timeout(..)`, holds
    /// them for a few steps, and releases the set (or dies).
    pub(super) async fn multi(&mut self, locks: &LockClient, pool: &[String]) -> Held {
        let (low, high) = self.workload.multi_size;
        let size = self.rng.random_range(low..=high).clamp(1, pool.len());
        let mut members: Vec<String> = pool.choose_multiple(&mut self.rng, size).cloned().collect();
        // Named in a random order: the library puts them in its own.
        members.shuffle(&mut self.rng);
        let owner = owner_label(self.index, self.incarnation);
        self.calls += 1;
        let lock_id = format!("{owner}.multi-{}", self.calls);
        let multi = locks
            .multi(members.clone())
            .ttl(self.workload.ttl)
            .owner(owner)
            .lock_id(lock_id.clone());
        let invoked_at = Instant::now();
        self.ctl.acquiring.store(true, Ordering::SeqCst);
        let got = multi.acquire_timeout(self.workload.acquire_timeout).await;
        self.ctl.acquiring.store(false, Ordering::SeqCst);
        let returned_at = Instant::now();
        for resource in &members {
            self.recorder.acquire_call(AcquireCall {
                client: self.index,
                resource: resource.clone(),
                lock_id: lock_id.clone(),
                invoked_at,
                ended_at: returned_at,
                granted: matches!(got, Ok(Some(_))),
            });
        }
        self.recorder
            .attempt(matches!(got, Ok(None)), got.as_ref().is_err());
        let set = match got {
            Ok(Some(set)) => set,
            Ok(None) => return Held::Done,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Held::Done;
            }
        };
        let number = self.recorder.next_id();
        let mut logs: Vec<HolderLog> = set
            .guards()
            .iter()
            .map(|guard| {
                let mut log = HolderLog::new(
                    self.recorder.next_id(),
                    self.index,
                    Mode::Multi,
                    invoked_at,
                    guard,
                );
                log.group = Some(number);
                log
            })
            .collect();
        attach_acquiring_pauses(&self.ctl, &mut logs);
        let held = self.steps(&set, &mut logs).await;
        if let Held::Killed = held {
            std::mem::forget(set);
        } else {
            check_lost(&set, &mut logs);
            for log in &mut logs {
                log.lets_go(LetGo::Released);
            }
            // `Ok` says every member was held throughout; an error is the set's (the first
            // member's in resource order), given to every member.
            let released = ReleaseResult::of(&set.release().await);
            for log in &mut logs {
                log.release = Some(released);
            }
        }
        for log in logs {
            self.recorder.holder(log);
        }
        held
    }

    /// Campaigns in the election `resource` with `campaign_timeout`, leads for a few steps
    /// writing with its term, and resigns (or dies).
    pub(super) async fn lead(&mut self, locks: &LockClient, resource: String) -> Held {
        let owner = owner_label(self.index, self.incarnation);
        self.calls += 1;
        let lock_id = format!("{owner}.campaign-{}", self.calls);
        let election = locks
            .election(resource.clone())
            .ttl(self.workload.ttl)
            .lock_id(lock_id.clone());
        let invoked_at = Instant::now();
        self.ctl.acquiring.store(true, Ordering::SeqCst);
        let got = election
            .campaign_timeout(owner, self.workload.acquire_timeout)
            .await;
        self.ctl.acquiring.store(false, Ordering::SeqCst);
        self.recorder.acquire_call(AcquireCall {
            client: self.index,
            resource,
            lock_id,
            invoked_at,
            ended_at: Instant::now(),
            granted: matches!(got, Ok(Some(_))),
        });
        self.recorder
            .attempt(matches!(got, Ok(None)), got.as_ref().is_err());
        let leading = match got {
            Ok(Some(leading)) => leading,
            Ok(None) => return Held::Done,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Held::Done;
            }
        };
        let mut log = HolderLog::new(
            self.recorder.next_id(),
            self.index,
            Mode::Election,
            invoked_at,
            leading.guard(),
        );
        // The leader's term is its token: what it writes with, what the checks judge.
        log.token = leading.term();
        let mut logs = vec![log];
        attach_acquiring_pauses(&self.ctl, &mut logs);
        let held = self.steps(&leading, &mut logs).await;
        if let Held::Killed = held {
            std::mem::forget(leading);
        } else {
            check_lost(&leading, &mut logs);
            logs[0].lets_go(LetGo::Released);
            logs[0].release = Some(ReleaseResult::of(&leading.resign().await));
        }
        for log in logs {
            self.recorder.holder(log);
        }
        held
    }

    /// The steps of work under `held` (a multi-lock, or a leadership), whose guards' logs
    /// are `logs`: before each, a pause or a kill asked for is carried out, and the loss is
    /// checked; each writes under every guard, then works racing the one loss signal and
    /// sampling the local deadlines. `Held::Killed` if the client is to die now (the caller
    /// forgets what it holds).
    async fn steps(&mut self, held: &impl Recipe, logs: &mut [HolderLog]) -> Held {
        self.ctl.holding.store(true, Ordering::SeqCst);
        let steps = self
            .rng
            .random_range(self.workload.steps.0..=self.workload.steps.1);
        let mut ended = Held::Done;
        'steps: for _ in 0..steps {
            if self.ctl.stop.load(Ordering::SeqCst) {
                break;
            }
            if !held.is_lost() {
                sample(held, logs);
                let before: Vec<Instant> = logs
                    .iter()
                    .map(|l| l.max_deadline.unwrap_or_else(Instant::now))
                    .collect();
                if let Some((start, end)) = self.take_pause() {
                    for ((log, guard), deadline_before) in
                        logs.iter_mut().zip(held.guards()).zip(before)
                    {
                        log.pauses.push(PauseLog {
                            start,
                            end,
                            deadline_before,
                            lost_on_resume: guard.is_lost(),
                        });
                    }
                }
            }
            if self.ctl.kill.swap(false, Ordering::SeqCst) {
                let now = Instant::now();
                for log in logs.iter_mut() {
                    log.killed_at = Some(now);
                }
                ended = Held::Killed;
                break;
            }
            // Check, then write under every guard at once.
            if check_lost(held, logs) {
                break;
            }
            for log in logs.iter_mut() {
                self.write(log);
            }
            let step_end = self.step_end();
            loop {
                let now = Instant::now();
                if now >= step_end {
                    break;
                }
                let tick = (step_end - now).min(Duration::from_millis(10));
                match tokio::time::timeout(tick, held.lost_reason()).await {
                    Ok(reason) => {
                        let now = Instant::now();
                        for log in logs.iter_mut() {
                            log.notice(now, LossKind::from(reason));
                        }
                        break 'steps;
                    }
                    Err(_) => sample(held, logs),
                }
            }
        }
        self.ctl.holding.store(false, Ordering::SeqCst);
        ended
    }
}
