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
//!   a lock id of its own per campaign; the campaign is logged as it begins
//!   ([`CampaignLog`]), so that an observer who sees a campaigner lead whose grant never
//!   reached it is not taken for a liar. The leader is logged as an exclusive holder of the
//!   election's resource whose token is its term; it leads in steps while `!is_lost()`,
//!   writing with its term and then **proclaiming** a new value (its owner label, a slash,
//!   the campaign's number and the step: unique in the run, and still its label for the
//!   liveness probe), then resigns. Each proclaim is raced against the loss (noticed when
//!   it comes) and against a timer of one TTL (dropped then: its value is in flight), and
//!   logged ([`ProclaimLog`]) with its term, value, times, outcome and `is_lost()` right
//!   after; a refusal as lost ends the leadership at once.
//!
//! Both are paused and killed at a step as the other holders are (a kill forgets the set or
//! the leadership); pauses and kills aimed at a client that is acquiring reach them too.
//! They publish what they hold in [`super::ClientCtl::held`] (every member of a set, or the
//! election's resource) and that it is a recipe ([`super::ClientCtl::recipe`]), so the
//! nemeses on a holder's let-go ([`FaultKind::is_let_go`]) are aimed at them too: asked for
//! while they hold, it is carried out within 10 ms, on the whole recipe (a set's members
//! are let go of together, by the set's one release or drop), with no tail afterwards;
//! asked for just before their release, with that release. An operator's force-release of
//! one lease of several reaches a multi-lock's member, and the holder holds on afterwards
//! unless it notices (the set's one loss signal must fire). The observers of elections
//! and the end-of-run reads of the leader are in [`crate::observers`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mongolock::{Leadership, LeaseState, LockClient, LockGuard, LossReason, MultiGuard};
use mongolock_testkit::faults::proxy::{RequestFault, RequestRule, Requests};
use rand::Rng;
use rand::seq::{IndexedRandom, SliceRandom};

use super::hold::{Release, let_go_of};
use super::{ClientCtl, Held, Target, Worker, attach_acquiring_pauses, lock, owner_label};
use crate::commands::{self, EXCEEDED_TIME_LIMIT, HOST_UNREACHABLE};
use crate::history::{
    AcquireCall, CampaignLog, Ending, FromLibrary, GuardLog, HolderLog, LossKind, Mode, NemesisLog,
    ProclaimLog, ProclaimOutcome,
};
use crate::history::{ExtraFault, FaultKind};

/// The faults [`Worker::arm_multi_unknown`] armed, and the contender to send once the set is
/// held.
struct ArmedMulti {
    contender: Option<Arc<ClientCtl>>,
    lost: RequestRule,
    refused: RequestRule,
}

/// What a recipe holder holds, as the steps of work need it: its guards (the members of a
/// multi-lock, or the one under a leadership), its state and its one loss signal.
trait Recipe: Release {
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
    /// The leadership, for an election (its leader proclaims).
    fn leadership(&self) -> Option<&Leadership> {
        None
    }
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
    fn leadership(&self) -> Option<&Leadership> {
        Some(self)
    }
}

/// Records a notice by every log if `held` counts as lost now; true if it does.
fn check_lost(held: &impl Recipe, logs: &mut [HolderLog]) -> bool {
    if let LeaseState::Lost(reason) = held.state() {
        let now = Instant::now();
        for log in logs {
            log.notice(now, LossKind::of(&reason));
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
    /// them for a few steps, and releases the set (or dies, or lets it go as a nemesis
    /// asks).
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
        let unknown = lock(&self.ctl.multi_unknown).take();
        let armed = unknown.map(|contender| self.arm_multi_unknown(contender));
        let invoked_at = Instant::now();
        self.ctl.acquiring.store(true, Ordering::SeqCst);
        let got = multi.acquire_timeout(self.workload.acquire_timeout).await;
        self.ctl.acquiring.store(false, Ordering::SeqCst);
        if let Some(armed) = armed {
            self.multi_unknown_ended(armed, &got);
        }
        let returned_at = Instant::now();
        for resource in &members {
            self.recorder.acquire_call(AcquireCall {
                client: self.index,
                resource: resource.clone(),
                lock_id: lock_id.clone(),
                invoked_at,
                ended_at: returned_at,
                granted: matches!(got, Ok(Some(_))),
                timeout: None,
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
        self.hold_recipe(set, logs).await
    }

    /// Arms [`ExtraFault::MultiUnknown`] on this client's proxy as a multi-lock acquire
    /// begins: its next two acquire attempts run but are answered with `ExceededTimeLimit`
    /// (the first copy of a member's attempt and the library's repeat of it: both applied,
    /// the outcome unknown), and its withdrawals are refused for 300–700 ms (the owed
    /// withdrawal of that attempt fails and is retried in the background while the next round
    /// asks for the member again; a retry lands after the window). Answers, not resets: the
    /// driver keeps its connections, so the rounds go on at once.
    fn arm_multi_unknown(&mut self, contender: Option<Arc<ClientCtl>>) -> ArmedMulti {
        let start = Instant::now();
        let window = Duration::from_millis(self.rng.random_range(300..=700));
        let lost = self.proxy.fault_requests(
            Requests::matching(commands::is_attempt)
                .times(2)
                .until(start + window),
            RequestFault::ReplaceReply {
                code: EXCEEDED_TIME_LIMIT,
            },
        );
        let refused = self.proxy.fault_requests(
            Requests::matching(commands::is_withdrawal).until(start + window),
            RequestFault::Refuse {
                code: HOST_UNREACHABLE,
            },
        );
        let kind = ExtraFault::MultiUnknown;
        (self.recorder).fault(kind.recorded_as(), Some(self.index), start, start + window);
        ArmedMulti {
            contender,
            lost,
            refused,
        }
    }

    /// After a multi-lock acquire under [`ExtraFault::MultiUnknown`]: a set that was granted
    /// is held on for a TTL (a withdrawal retried late must not end a member meanwhile), and
    /// the contender is sent for its first member (whose attempt the faults hit first).
    fn multi_unknown_ended(
        &mut self,
        armed: ArmedMulti,
        got: &mongolock::Result<Option<MultiGuard>>,
    ) {
        let hit = match (armed.lost.applied(), armed.refused.applied()) {
            (_, 1..) => "withdrawal refused",
            (1.., 0) => "outcome unknown, no withdrawal",
            _ => "nothing hit",
        };
        let how = match got {
            Ok(Some(set)) => {
                *lock(&self.ctl.hold_next) = Some(self.workload.ttl);
                let first = set.resources().next().map(str::to_owned);
                if let (Some(contender), Some(first)) = (&armed.contender, first) {
                    contender.go_for_next(Target::Multi(vec![first]));
                }
                "set held"
            }
            Ok(None) => "not granted",
            Err(_) => "failed",
        };
        let kind = ExtraFault::MultiUnknown;
        self.recorder
            .extra(kind, self.index, format!("{hit}, {how}"));
    }

    /// Campaigns in the election `resource` with `campaign_timeout`, leads for a few steps
    /// writing with its term and proclaiming, and resigns (or dies, or lets go as a nemesis
    /// asks).
    pub(super) async fn lead(&mut self, locks: &LockClient, resource: String) -> Held {
        let owner = owner_label(self.index, self.incarnation);
        self.calls += 1;
        let lock_id = format!("{owner}.campaign-{}", self.calls);
        let election = locks
            .election(resource.clone())
            .ttl(self.workload.ttl)
            .lock_id(lock_id.clone());
        let invoked_at = Instant::now();
        self.recorder.campaign(CampaignLog {
            client: self.index,
            resource: resource.clone(),
            lock_id: lock_id.clone(),
            value: owner.clone(),
            invoked_at,
            gives_up_at: invoked_at + self.workload.acquire_timeout,
        });
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
            timeout: None,
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
        self.hold_recipe(leading, logs).await
    }

    /// Holds `held` (a multi-lock's set, or a leadership) whose guards' logs are `logs`:
    /// publishes it for the nemeses, works in steps, and lets go of it (as a nemesis asks,
    /// if one did) or, killed, forgets it. Hands the logs to the recorder.
    async fn hold_recipe(&mut self, held: impl Recipe, mut logs: Vec<HolderLog>) -> Held {
        self.ctl.start_holding();
        *lock(&self.ctl.held) = logs.iter().map(|l| l.resource.clone()).collect();
        self.ctl.recipe.store(true, Ordering::SeqCst);
        let (ended, nemesis) = self.steps(&held, &mut logs).await;
        // A nemesis asked for just now comes with this let-go.
        let nemesis = nemesis.or_else(|| lock(&self.ctl.let_go).take());
        lock(&self.ctl.held).clear();
        self.ctl.recipe.store(false, Ordering::SeqCst);
        lock(&self.ctl.hold_until).take();
        if let Held::Killed = ended {
            std::mem::forget(held);
        } else {
            check_lost(&held, &mut logs);
            let ended = let_go_of(&mut self.rng, held, &mut logs, nemesis).await;
            if let (Some(kind), Some(ended)) = (nemesis, ended) {
                self.log_let_go_nemesis(kind, ended, &logs);
            }
        }
        for log in logs {
            self.recorder.holder(log);
        }
        ended
    }

    /// Logs the nemesis `kind` carried out on the let-go of the guards of `logs` (one set,
    /// let go of together), which ended as `ended`; resources whose entries may still be on
    /// the server are noted as abandoned.
    pub(super) fn log_let_go_nemesis(&self, kind: FaultKind, ended: Ending, logs: &[HolderLog]) {
        let at = logs[0].released_at.unwrap_or_else(Instant::now);
        if !matches!(
            ended,
            Ending::Released(
                crate::history::ReleaseResult::Ok | crate::history::ReleaseResult::Lost(_)
            )
        ) {
            // Their entries may still be on the server.
            let mut abandoned = lock(&self.ctl.abandoned);
            abandoned.extend(logs.iter().map(|l| (l.resource.clone(), at)));
        }
        let resources: Vec<&str> = logs.iter().map(|l| l.resource.as_str()).collect();
        self.recorder.nemesis(NemesisLog {
            kind,
            client: self.index,
            at,
            holder: Some(logs[0].id),
            resource: Some(resources.join("+")),
            ended,
        });
    }

    /// The steps of work under `held` (a multi-lock, or a leadership), whose guards' logs
    /// are `logs`: before each, a pause or a kill asked for is carried out, and the loss is
    /// checked; each writes under every guard (a leader then proclaims), then works racing
    /// the one loss signal and sampling the local deadlines. It holds on past its steps
    /// while an operator's force-release asks it to ([`super::ClientCtl::hold_on_until`]),
    /// unless it notices the loss. `Held::Killed` if the client is to die now (the caller
    /// forgets what it holds); with the nemesis for its let-go, if one was asked for while
    /// it held.
    async fn steps(
        &mut self,
        held: &impl Recipe,
        logs: &mut [HolderLog],
    ) -> (Held, Option<FaultKind>) {
        self.ctl.holding.store(true, Ordering::SeqCst);
        let steps = self
            .rng
            .random_range(self.workload.steps.0..=self.workload.steps.1);
        let mut ended = (Held::Done, None);
        let mut step = 0;
        'steps: loop {
            if self.ctl.stop.load(Ordering::SeqCst) {
                break;
            }
            let hold_on = lock(&self.ctl.hold_until).is_some_and(|t| Instant::now() < t);
            if step >= steps && !hold_on {
                break;
            }
            step += 1;
            // A lost recipe takes no pause: it is let go of at the check below.
            let killed = if held.is_lost() {
                self.killed(logs)
            } else {
                sample(held, logs);
                self.pause_or_kill(&held.guards(), logs)
            };
            if killed {
                ended = (Held::Killed, None);
                break;
            }
            // Check, then write under every guard at once.
            if check_lost(held, logs) {
                break;
            }
            for log in logs.iter_mut() {
                self.write(log);
            }
            if let Some(leading) = held.leadership()
                && self.proclaim(leading, &mut logs[0], step).await
            {
                break;
            }
            let step_end = self.step_end();
            loop {
                let now = Instant::now();
                if now >= step_end {
                    break;
                }
                if let Some(nemesis) = lock(&self.ctl.let_go).take() {
                    ended = (Held::Done, Some(nemesis));
                    break 'steps;
                }
                let tick = (step_end - now).min(Duration::from_millis(10));
                match tokio::time::timeout(tick, held.lost_reason()).await {
                    Ok(reason) => {
                        let now = Instant::now();
                        for log in logs.iter_mut() {
                            log.notice(now, LossKind::of(&reason));
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

    /// The leader of `log` proclaims a new value for its step `step`: raced against the
    /// loss (noticed when it comes, the call still awaited) and against a timer of one TTL
    /// (the call dropped then), and logged. True if it was refused as lost: the leadership
    /// ends now (the refusal is noticed in `log` if `is_lost()` says so).
    async fn proclaim(&mut self, leading: &Leadership, log: &mut HolderLog, step: u32) -> bool {
        let owner = owner_label(self.index, self.incarnation);
        let value = format!("{owner}/{}.{step}", self.calls);
        let invoked_at = Instant::now();
        let call = leading.proclaim(value.clone());
        tokio::pin!(call);
        let limit = tokio::time::sleep(self.workload.ttl);
        tokio::pin!(limit);
        let mut watch = true;
        let outcome = loop {
            tokio::select! {
                biased;
                result = &mut call => break ProclaimOutcome::of(&result),
                reason = leading.lost(), if watch => {
                    log.notice(Instant::now(), LossKind::of(&reason));
                    watch = false;
                }
                () = &mut limit => break ProclaimOutcome::Dropped,
                () = tokio::time::sleep(Duration::from_millis(10)) => log.sample(leading.guard()),
            }
        };
        let returned_at = Instant::now();
        let lost_after = leading.is_lost();
        self.recorder.proclaim(ProclaimLog {
            client: self.index,
            holder: log.id,
            resource: log.resource.clone(),
            term: leading.term(),
            value,
            invoked_at,
            returned_at,
            outcome,
            lost_after,
        });
        if outcome == ProclaimOutcome::Lost {
            log.check_lost(leading.guard());
            return true;
        }
        false
    }
}
