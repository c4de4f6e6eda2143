//! The fault injector: picks faults at random from the seed and applies them while the
//! workload runs, then heals everything.
//!
//! Network faults go through one client's [`FaultProxy`](mongolock_testkit::FaultProxy), so
//! one client can be cut off alone. Fail points (`failCommand`) are scoped to one client
//! with `appName`; the emulator has one `failCommand` slot, so a new fail point replaces the
//! last. Pauses and kills are carried out by the client's worker
//! ([`ClientCtl`]): at a holder's next step, or at once when
//! they are aimed at a client that is acquiring (the acquire in flight). Operators act from
//! the observer, and the emulator's clock can jump forward.
//!
//! Pauses and kills aim at a holder of a resumable lease (see the workload's `resume`
//! submodule) or of one with a lock-delay half the time, if there is one.
//!
//! Every fault aimed at a client is also recorded with its start and end
//! ([`Recorder::fault`]), for the checks that excuse what a fault explains.
//!
//! Faults on single requests go through the client's proxy too
//! ([`FaultProxy::fault_requests`](mongolock_testkit::FaultProxy::fault_requests)), picked
//! out by what the library's command is ([`commands`]): a lock write delivered late (armed
//! here), the releases of one resource refused, a multi-lock's attempts answered with an
//! error after they ran and its withdrawals refused (armed by the client when it lets go or
//! begins, so that the fault comes with the command it is for). These, and a guard dropped
//! right after its grant, are the harness's own kinds ([`ExtraFault`]), drawn from the same
//! seed ([`EXTRA_MIX`]); the refused release and the multi-lock's faults also send another
//! client for what they may free under its holder.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongolock::LockClient;
use mongolock_testkit::Clock;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use mongolock_testkit::faults::proxy::{RequestFault, RequestRule, Requests};

use crate::commands;
use crate::history::{Ending, ExtraFault, FaultKind, Mode, NemesisLog, OpKind, Recorder};
use crate::workload::{ClientCtl, DropAcquire, Fleet, StepWay, Target, Workload};

/// How long after a nemesis let go of a lease its client still counts it among its leases
/// when the operator looks for a client with several (its entry may be on the server still).
const ABANDONED_FOR: Duration = Duration::from_secs(5);

/// How long a nemesis that leaves an orphan waits for a client holding two leases.
const WAIT_FOR_PAIR: Duration = Duration::from_secs(3);

/// How often the injector reads the server's clock against ours, besides right after each
/// jump (see [`crate::history::History::server_ms`]).
const CLOCK_READING_EVERY: Duration = Duration::from_millis(500);

/// The commands the library sends for locks (fail points target them).
const LOCK_COMMANDS: [&str; 5] = ["findAndModify", "update", "delete", "aggregate", "find"];
/// Step-down and shutdown codes: ShutdownInProgress, PrimarySteppedDown, NotWritablePrimary,
/// InterruptedAtShutdown.
const STEP_DOWN_CODES: [i32; 4] = [91, 189, 10107, 11600];

/// Every kind of fault, with its weight in the mix.
pub const MIX: [(FaultKind, u32); 23] = [
    (FaultKind::Latency, 3),
    (FaultKind::Partition, 3),
    (FaultKind::Reset, 2),
    (FaultKind::LostReplies, 3),
    (FaultKind::StepDownError, 3),
    (FaultKind::CloseConnection, 2),
    (FaultKind::BlockConnection, 2),
    (FaultKind::WriteConcernError, 2),
    (FaultKind::Pause, 3),
    (FaultKind::Kill, 2),
    (FaultKind::PauseAcquiring, 2),
    (FaultKind::KillAcquiring, 2),
    (FaultKind::ForceRelease, 1),
    (FaultKind::Purge, 1),
    (FaultKind::ClockJump, 1),
    (FaultKind::DropWithoutRuntime, 3),
    (FaultKind::DropOnEndingRuntime, 3),
    (FaultKind::ReleaseCancelled, 3),
    (FaultKind::ReleaseBlip, 2),
    (FaultKind::ReleaseUnderPartition, 1),
    (FaultKind::ReleaseUnderLostReplies, 1),
    (FaultKind::AcquireDropped, 2),
    (FaultKind::ForceReleaseOne, 3),
];

/// The harness's own faults, with their weights in the mix (beside [`MIX`]).
pub const EXTRA_MIX: [(ExtraFault, u32); 8] = [
    (ExtraFault::LateRequest, 3),
    (ExtraFault::DropAfterGrant, 3),
    (ExtraFault::ReleaseFailsThenResume, 3),
    (ExtraFault::MultiUnknown, 3),
    (ExtraFault::LateUnlock, 3),
    (ExtraFault::ClockStepInFlight, 6),
    (ExtraFault::StepBackUnderHold, 4),
    (ExtraFault::AdoptionRace, 2),
];

/// One pick from the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pick {
    Kind(FaultKind),
    Extra(ExtraFault),
}

/// A late delivery an [`ExtraFault`] put on a client's proxy, kept to tell in the end what
/// it did.
#[derive(Debug)]
struct ArmedRule {
    kind: ExtraFault,
    client: usize,
    rule: RequestRule,
}

/// Applies random faults to a fleet.
#[derive(Debug)]
pub struct Injector {
    rng: StdRng,
    observer: LockClient,
    admin: mongodb::Database,
    clock: Clock,
    workload: Workload,
    recorder: Recorder,
    /// Until when each client's proxy is busy with a fault (and when to heal it), with the
    /// fault and its start.
    proxy_until: Vec<Option<(Instant, FaultKind, Instant)>>,
    /// The fail point armed last: its fault, its client and its start.
    fail_point_armed: Option<(FaultKind, usize, Instant)>,
    /// Faults injected, by kind.
    pub counts: BTreeMap<FaultKind, u64>,
    /// The time between faults, in milliseconds (inclusive range).
    pub gap_ms: (u64, u64),
    /// A nemesis that leaves an orphan (a guard dropped without a runtime, a release dropped
    /// mid-flight or in a blip), waiting for a client that holds two leases, since when.
    waiting: Option<(FaultKind, Instant)>,
    /// The harness's own faults injected, by kind.
    pub extra_counts: BTreeMap<ExtraFault, u64>,
    /// One of the harness's own faults waiting for a client to aim at (a holder of a
    /// resumable lease, a client taking a multi-lock), since when.
    waiting_extra: Option<(ExtraFault, Instant)>,
    /// The request rules the harness's own faults armed.
    armed: Vec<ArmedRule>,
}

impl Injector {
    /// An injector whose choices follow `seed`. `observer` is a lock client connected
    /// directly to the server; `admin` the admin database on the same connection.
    pub fn new(
        seed: u64,
        observer: LockClient,
        admin: mongodb::Database,
        clock: Clock,
        workload: &Workload,
        recorder: &Recorder,
    ) -> Self {
        Injector {
            rng: StdRng::seed_from_u64(seed),
            observer,
            admin,
            clock,
            workload: workload.clone(),
            recorder: recorder.clone(),
            proxy_until: vec![None; workload.clients],
            fail_point_armed: None,
            counts: BTreeMap::new(),
            gap_ms: (150, 600),
            waiting: None,
            extra_counts: BTreeMap::new(),
            waiting_extra: None,
            armed: Vec::new(),
        }
    }

    /// Injects faults until `until`, restarting killed clients as it goes; then heals
    /// everything.
    pub async fn run(&mut self, fleet: &mut Fleet, until: Instant) {
        self.read_clock();
        let mut last_reading = Instant::now();
        while Instant::now() < until {
            let gap = self.rng.random_range(self.gap_ms.0..=self.gap_ms.1);
            let wake = (Instant::now() + Duration::from_millis(gap)).min(until);
            while Instant::now() < wake {
                if last_reading.elapsed() >= CLOCK_READING_EVERY {
                    self.read_clock();
                    last_reading = Instant::now();
                }
                self.heal_expired(fleet);
                fleet.restart_dead(Duration::from_millis(300));
                self.try_waiting(fleet).await;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            if Instant::now() >= until {
                break;
            }
            match self.pick() {
                Pick::Kind(kind) => {
                    if self.apply(kind, fleet).await {
                        *self.counts.entry(kind).or_default() += 1;
                    }
                }
                Pick::Extra(kind) => {
                    if self.apply_extra(kind, fleet) {
                        *self.extra_counts.entry(kind).or_default() += 1;
                    }
                }
            }
        }
        self.heal_all(fleet).await;
    }

    /// Carries out the nemesis waiting for a client with two leases if there is one now;
    /// gives it up after [`WAIT_FOR_PAIR`].
    async fn try_waiting(&mut self, fleet: &mut Fleet) {
        if let Some((kind, since)) = self.waiting_extra {
            if since.elapsed() > WAIT_FOR_PAIR {
                self.waiting_extra = None;
            } else if self.apply_extra(kind, fleet) {
                self.waiting_extra = None;
                *self.extra_counts.entry(kind).or_default() += 1;
            }
        }
        let Some((kind, since)) = self.waiting else {
            return;
        };
        if since.elapsed() > WAIT_FOR_PAIR {
            self.waiting = None;
            return;
        }
        let pair_held = fleet
            .slots
            .iter()
            .any(|s| s.killed_at.is_none() && s.ctl.holds_several_or_recipe());
        if pair_held {
            self.waiting = None;
            if self.apply(kind, fleet).await {
                *self.counts.entry(kind).or_default() += 1;
            }
        }
    }

    /// Records a reading of the server's clock against ours.
    fn read_clock(&self) {
        let at = Instant::now();
        let ms = self.clock.now().timestamp_millis();
        self.recorder.server_clock(at, ms);
    }

    fn pick(&mut self) -> Pick {
        let mix = MIX.map(|(kind, weight)| (Pick::Kind(kind), weight));
        let extra = EXTRA_MIX.map(|(kind, weight)| (Pick::Extra(kind), weight));
        let total: u32 = mix.iter().chain(&extra).map(|(_, w)| w).sum();
        let mut ticket = self.rng.random_range(0..total);
        for (pick, weight) in mix.into_iter().chain(extra) {
            if ticket < weight {
                return pick;
            }
            ticket -= weight;
        }
        Pick::Kind(FaultKind::Latency)
    }

    fn ttl(&self) -> Duration {
        self.workload.ttl
    }

    /// `preferred` if its proxy is free, else a client whose proxy is free, if any.
    fn free_proxy(&mut self, preferred: usize) -> Option<usize> {
        if self.proxy_until[preferred].is_none() {
            return Some(preferred);
        }
        let free: Vec<usize> = (0..self.proxy_until.len())
            .filter(|&i| self.proxy_until[i].is_none())
            .collect();
        if free.is_empty() {
            return None;
        }
        Some(free[self.rng.random_range(0..free.len())])
    }

    fn heal_expired(&mut self, fleet: &Fleet) {
        for (i, busy) in self.proxy_until.iter_mut().enumerate() {
            if let Some((until, kind, start)) = *busy
                && Instant::now() >= until
            {
                fleet.slots[i].proxy.heal();
                self.recorder.fault(kind, Some(i), start, Instant::now());
                *busy = None;
            }
        }
    }

    /// Applies one fault; false if there was nothing to apply it to.
    async fn apply(&mut self, kind: FaultKind, fleet: &mut Fleet) -> bool {
        let ttl = self.ttl();
        // Faults aimed at one client hit a holder four times out of five, if there is one.
        let holders: Vec<usize> = (0..fleet.slots.len())
            .filter(|&i| fleet.slots[i].ctl.holding.load(Ordering::SeqCst))
            .collect();
        let mut client = if !holders.is_empty() && self.rng.random_bool(0.8) {
            holders[self.rng.random_range(0..holders.len())]
        } else {
            self.rng.random_range(0..fleet.slots.len())
        };
        // Pauses and kills hit a holder of a resumable lease or of one with a lock-delay half
        // the time, if there is one: its next incarnation (after a kill) or a twin (beside a
        // pause) resumes the first; the second ends unreleased, and its delay must hold.
        if matches!(kind, FaultKind::Pause | FaultKind::Kill) {
            let resumable: Vec<usize> = (0..fleet.slots.len())
                .filter(|&i| {
                    let held = fleet.slots[i].ctl.held();
                    held.iter().any(|r| {
                        self.workload.is_resumable(r) || self.workload.lock_delay(r).is_some()
                    })
                })
                .collect();
            if !resumable.is_empty() && self.rng.random_bool(0.5) {
                client = resumable[self.rng.random_range(0..resumable.len())];
            }
        }
        let app = fleet.slots[client].app_name.clone();
        // Faults aimed at a client that is acquiring: any such client, or none.
        let acquiring: Vec<usize> = (0..fleet.slots.len())
            .filter(|&i| {
                fleet.slots[i].ctl.acquiring.load(Ordering::SeqCst)
                    && fleet.slots[i].killed_at.is_none()
            })
            .collect();
        let waiter = if acquiring.is_empty() {
            None
        } else {
            Some(acquiring[self.rng.random_range(0..acquiring.len())])
        };
        match kind {
            FaultKind::Latency => {
                let Some(i) = self.free_proxy(client) else {
                    return false;
                };
                let latency = Duration::from_millis(self.rng.random_range(20..=400));
                let hold = ttl.mul_f64(self.rng.random_range(0.5..2.0));
                fleet.slots[i].proxy.add_latency(latency);
                let now = Instant::now();
                self.proxy_until[i] = Some((now + hold, kind, now));
            }
            FaultKind::Partition => {
                let Some(i) = self.free_proxy(client) else {
                    return false;
                };
                let hold = ttl.mul_f64(self.rng.random_range(1.2..2.5));
                fleet.slots[i].proxy.blackhole();
                let now = Instant::now();
                self.proxy_until[i] = Some((now + hold, kind, now));
            }
            FaultKind::LostReplies => {
                // Aimed at a client that is acquiring when there is one, so grants are
                // committed whose holder never hears of them.
                let Some(i) = self.free_proxy(waiter.unwrap_or(client)) else {
                    return false;
                };
                let hold = Duration::from_millis(self.rng.random_range(50..=600));
                fleet.slots[i].proxy.lose_replies();
                let now = Instant::now();
                self.proxy_until[i] = Some((now + hold, kind, now));
            }
            FaultKind::Reset => {
                let now = Instant::now();
                fleet.slots[client].proxy.reset_connections();
                self.recorder.fault(kind, Some(client), now, Instant::now());
            }
            FaultKind::StepDownError => {
                let code = STEP_DOWN_CODES[self.rng.random_range(0..STEP_DOWN_CODES.len())];
                let times = self.rng.random_range(1..=4);
                self.fail_point(
                    kind,
                    client,
                    times,
                    doc! { "errorCode": code, "appName": app },
                )
                .await;
            }
            FaultKind::CloseConnection => {
                let times = self.rng.random_range(1..=3);
                self.fail_point(
                    kind,
                    client,
                    times,
                    doc! { "closeConnection": true, "appName": app },
                )
                .await;
            }
            FaultKind::BlockConnection => {
                let block = ttl + Duration::from_millis(self.rng.random_range(100..=1_000));
                let times = self.rng.random_range(1..=2);
                let data = doc! {
                    "blockConnection": true,
                    "blockTimeMS": block.as_millis() as i64,
                    "appName": app,
                };
                self.fail_point(kind, client, times, data).await;
            }
            FaultKind::WriteConcernError => {
                let times = self.rng.random_range(1..=3);
                let data = doc! {
                    "writeConcernError": {
                        "code": 64,
                        "codeName": "WriteConcernFailed",
                        "errmsg": "waiting for replication timed out",
                        "errInfo": { "wtimeout": true },
                    },
                    "appName": app,
                };
                self.fail_point(kind, client, times, data).await;
            }
            FaultKind::Pause => {
                let pause = ttl.mul_f64(self.rng.random_range(1.1..2.0));
                fleet.pause(client, pause);
            }
            FaultKind::Kill => {
                if fleet.slots.iter().any(|s| s.killed_at.is_some()) {
                    return false; // one dead client at a time
                }
                fleet.kill(client);
            }
            FaultKind::PauseAcquiring => {
                let Some(waiter) = waiter else {
                    return false;
                };
                let pause = ttl.mul_f64(self.rng.random_range(1.1..2.0));
                fleet.pause_acquiring(waiter, pause);
            }
            FaultKind::KillAcquiring => {
                let Some(waiter) = waiter else {
                    return false;
                };
                if fleet.slots.iter().any(|s| s.killed_at.is_some()) {
                    return false; // one dead client at a time
                }
                fleet.kill_acquiring(waiter);
            }
            FaultKind::ForceRelease => {
                let pick = self.rng.random_range(0..self.workload.resources.len());
                let resource = self.workload.resources[pick].0.clone();
                let start = Instant::now();
                let done = self.observer.force_release(&resource).await;
                self.recorder
                    .op(OpKind::ForceRelease(resource), start, Instant::now());
                return done.is_ok();
            }
            FaultKind::Purge => {
                let start = Instant::now();
                let done = self.observer.purge().await;
                self.recorder.op(OpKind::Purge, start, Instant::now());
                return done.is_ok();
            }
            FaultKind::DropWithoutRuntime | FaultKind::ReleaseCancelled => {
                let Some(holder) = self.pair_holder(kind, fleet) else {
                    return false;
                };
                fleet.let_go(holder, kind);
            }
            FaultKind::DropOnEndingRuntime => {
                // The resumable lease, whose lock id is fixed per slot, so that the client
                // asks again under it at once (see the workload's `hold` submodule): dropped
                // at a step of its holder, or, if none holds it now, of a live client sent for
                // it.
                let live: Vec<usize> = (0..fleet.slots.len())
                    .filter(|&i| fleet.slots[i].killed_at.is_none())
                    .collect();
                let holders: Vec<usize> = (live.iter().copied())
                    .filter(|&i| !fleet.slots[i].ctl.recipe.load(Ordering::SeqCst))
                    .filter(|&i| {
                        let held = fleet.slots[i].ctl.held();
                        held.iter().any(|r| self.workload.is_resumable(r))
                    })
                    .collect();
                let Some(resource) = self.workload.resumable.first().cloned() else {
                    return false;
                };
                let (pool, send) = if holders.is_empty() {
                    (&live, true)
                } else {
                    (&holders, false)
                };
                let Some(&i) = pool.choose(&mut self.rng) else {
                    return false;
                };
                let ctl = &fleet.slots[i].ctl;
                ctl.drop_on_ending_runtime.store(true, Ordering::SeqCst);
                if send {
                    ctl.go_for_next(Target::Resource(resource, Mode::Exclusive));
                }
            }
            FaultKind::ReleaseBlip => {
                let Some(holder) = self.pair_holder(kind, fleet) else {
                    return false;
                };
                // The release and the driver's retry of it fail, and maybe a renewal.
                let times = self.rng.random_range(3..=4);
                let app = fleet.slots[holder].app_name.clone();
                let data = doc! { "closeConnection": true, "appName": app };
                self.fail_point(kind, holder, times, data).await;
                fleet.let_go(holder, kind);
            }
            FaultKind::ReleaseUnderPartition | FaultKind::ReleaseUnderLostReplies => {
                let Some(holder) = self.let_go_target(fleet, true) else {
                    return false;
                };
                let proxy = &fleet.slots[holder].proxy;
                let hold = if kind == FaultKind::ReleaseUnderPartition {
                    proxy.blackhole();
                    ttl.mul_f64(self.rng.random_range(0.3..1.5))
                } else {
                    proxy.lose_replies();
                    Duration::from_millis(self.rng.random_range(100..=600))
                };
                let now = Instant::now();
                self.proxy_until[holder] = Some((now + hold, kind, now));
                fleet.let_go(holder, kind);
            }
            FaultKind::AcquireDropped => {
                let waiters: Vec<usize> = (0..fleet.slots.len())
                    .filter(|&i| {
                        let slot = &fleet.slots[i];
                        slot.ctl.acquiring_handle.load(Ordering::SeqCst) && slot.killed_at.is_none()
                    })
                    .collect();
                let Some(&waiter) = waiters.choose(&mut self.rng) else {
                    return false;
                };
                // Half of the time with latency on its client, so that a grant made by the
                // attempt in flight is still on its way back when the future is dropped.
                let latency = if self.proxy_until[waiter].is_none() && self.rng.random_bool(0.5) {
                    let latency = Duration::from_millis(self.rng.random_range(20..=80));
                    fleet.slots[waiter].proxy.add_latency(latency);
                    let now = Instant::now();
                    self.proxy_until[waiter] = Some((now + ttl, kind, now));
                    latency
                } else {
                    Duration::from_millis(10)
                };
                let after = self.rng.random_range(0..=3 * latency.as_millis() as u64);
                fleet.drop_acquire(
                    waiter,
                    DropAcquire {
                        without_runtime: self.rng.random_bool(0.5),
                        after: Duration::from_millis(after),
                    },
                );
            }
            FaultKind::ForceReleaseOne => return self.force_release_one(fleet).await,
            FaultKind::ClockJump => {
                let by = ttl.mul_f64(self.rng.random_range(1.5..3.0));
                let start = Instant::now();
                self.clock.advance(by);
                self.read_clock();
                self.recorder
                    .op(OpKind::ClockJump(by), start, Instant::now());
            }
        }
        true
    }

    /// Applies one of the harness's own faults; false if there was nothing to apply it to
    /// now (a fault that needs a certain client then waits for one, up to
    /// [`WAIT_FOR_PAIR`]).
    fn apply_extra(&mut self, kind: ExtraFault, fleet: &mut Fleet) -> bool {
        let live: Vec<usize> = (0..fleet.slots.len())
            .filter(|&i| fleet.slots[i].killed_at.is_none())
            .collect();
        let free: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&i| self.proxy_until[i].is_none())
            .collect();
        let recorded = kind.recorded_as();
        let now = Instant::now();
        match kind {
            ExtraFault::LateRequest => {
                // A client that is acquiring, if there is one (its attempt is late), else
                // a holder (its renewal or release is), else anyone.
                let acquiring: Vec<usize> = (free.iter().copied())
                    .filter(|&i| fleet.slots[i].ctl.acquiring.load(Ordering::SeqCst))
                    .collect();
                let holding: Vec<usize> = (free.iter().copied())
                    .filter(|&i| fleet.slots[i].ctl.holding.load(Ordering::SeqCst))
                    .collect();
                let pool = [acquiring, holding, free]
                    .into_iter()
                    .find(|pool| !pool.is_empty());
                let Some(&i) = pool.as_ref().and_then(|p| p.choose(&mut self.rng)) else {
                    return false;
                };
                let hold =
                    self.late_request(fleet, (i, kind), commands::is_lock_write, (500, 3_000));
                self.proxy_until[i] = Some((now + hold, recorded, now));
            }
            ExtraFault::DropAfterGrant => {
                let acquiring: Vec<usize> = (live.iter().copied())
                    .filter(|&i| fleet.slots[i].ctl.acquiring_handle.load(Ordering::SeqCst))
                    .collect();
                let pool = if acquiring.is_empty() {
                    &live
                } else {
                    &acquiring
                };
                let Some(&i) = pool.choose(&mut self.rng) else {
                    return false;
                };
                fleet.slots[i]
                    .ctl
                    .drop_after_grant
                    .store(true, Ordering::SeqCst);
                if self.proxy_until[i].is_none() && self.rng.random_bool(0.5) {
                    let hold =
                        self.late_request(fleet, (i, kind), commands::is_attempt, (600, 2_500));
                    self.proxy_until[i] = Some((now + hold, recorded, now));
                } else {
                    self.recorder.fault(recorded, Some(i), now, now);
                }
            }
            ExtraFault::ReleaseFailsThenResume => {
                // The holder has its own releases refused when it lets go (see the workload's
                // `hold` submodule), so that the fault comes with the release, whenever that is.
                let holders: Vec<(usize, String)> = (live.iter().copied())
                    .filter(|&i| !fleet.slots[i].ctl.recipe.load(Ordering::SeqCst))
                    .filter_map(|i| {
                        let held = fleet.slots[i].ctl.held();
                        let resumable = held.into_iter().find(|r| self.workload.is_resumable(r));
                        resumable.map(|r| (i, r))
                    })
                    .collect();
                let Some((i, resource)) = holders.choose(&mut self.rng).cloned() else {
                    self.waiting_extra = Some((kind, now));
                    return false;
                };
                let ctl = &fleet.slots[i].ctl;
                ctl.release_then_ask_again(&resource);
                // It holds on until it has carried that out.
                ctl.hold_on_until(now + Duration::from_secs(1));
                if let Some(contender) = self.contender(fleet, i) {
                    contender.go_for_next(Target::Resource(resource, Mode::Exclusive));
                }
            }
            ExtraFault::MultiUnknown => {
                // The client goes for a multi-lock next and arms the faults as it begins (see
                // the workload's `recipes` submodule); once it holds the set, it sends the
                // contender for the member whose attempt was lost.
                let target = Target::Multi(self.workload.pool(Mode::Multi));
                return self.go_with_contender(fleet, &live, ClientCtl::multi_unknown, target);
            }
            ExtraFault::ClockStepInFlight => {
                // One at a time; the client carries it out as its next target (see the
                // workload's `step` submodule), each way one time in three.
                if fleet.stepping.load(Ordering::SeqCst) {
                    return false;
                }
                let Some(&i) = live.choose(&mut self.rng) else {
                    return false;
                };
                let way = [StepWay::Forward, StepWay::Back, StepWay::BackThenForward]
                    [self.rng.random_range(0..3)];
                fleet.slots[i].ctl.go_for_next(Target::ClockStep(way));
            }
            ExtraFault::StepBackUnderHold => {
                // One clock step at a time; the client carries it out as its next target (see
                // the workload's `step_back` submodule).
                if fleet.stepping.load(Ordering::SeqCst) {
                    return false;
                }
                let Some(&i) = live.choose(&mut self.rng) else {
                    return false;
                };
                fleet.slots[i].ctl.go_for_next(Target::StepBack);
            }
            ExtraFault::AdoptionRace => {
                // The client carries it out as its next target (see the workload's
                // `adoption` submodule).
                let Some(&i) = live.choose(&mut self.rng) else {
                    return false;
                };
                fleet.slots[i].ctl.go_for_next(Target::Adoption);
            }
            ExtraFault::LateUnlock => {
                // The client goes for a group next and arms the fault as its first round is
                // given up (see the workload's `group` submodule); once the next round holds
                // the group, it sends the contender for the first member.
                let target = Target::Group(self.workload.pool(Mode::Group));
                return self.go_with_contender(fleet, &live, ClientCtl::late_unlock, target);
            }
        }
        true
    }

    /// Delivers the next request of client `i` that `which` picks out late, for the fault
    /// `kind`: held for a time drawn from `hold_ms`, its client's connection cut 20–300 ms
    /// after it left. Returns how long the proxy stays busy with it (the hold, and half a
    /// second for the delivery).
    fn late_request(
        &mut self,
        fleet: &Fleet,
        (i, kind): (usize, ExtraFault),
        which: fn(&bson::Document) -> bool,
        hold_ms: (u64, u64),
    ) -> Duration {
        let hold = Duration::from_millis(self.rng.random_range(hold_ms.0..=hold_ms.1));
        let cut_after = Duration::from_millis(self.rng.random_range(20..=300));
        let rule = fleet.slots[i].proxy.fault_requests(
            Requests::matching(which).times(1),
            RequestFault::Late {
                hold,
                cut_after: Some(cut_after),
            },
        );
        self.armed.push(ArmedRule {
            kind,
            client: i,
            rule,
        });
        hold + Duration::from_millis(500)
    }

    /// Sends a live client (at random) for `target` next, with the fault `arm` asks of it and a
    /// contender to send on; false if no client is live.
    fn go_with_contender(
        &mut self,
        fleet: &Fleet,
        live: &[usize],
        arm: fn(&ClientCtl, Option<Arc<ClientCtl>>),
        target: Target,
    ) -> bool {
        let Some(&i) = live.choose(&mut self.rng) else {
            return false;
        };
        let contender = self.contender(fleet, i);
        let ctl = &fleet.slots[i].ctl;
        arm(ctl, contender);
        ctl.go_for_next(target);
        true
    }

    /// A live client other than `but` (at random): a contender to send for what a fault may
    /// free under its holder.
    fn contender(&mut self, fleet: &Fleet, but: usize) -> Option<Arc<ClientCtl>> {
        let others: Vec<usize> = (0..fleet.slots.len())
            .filter(|&i| i != but && fleet.slots[i].killed_at.is_none())
            .collect();
        let &i = others.choose(&mut self.rng)?;
        Some(fleet.slots[i].ctl.clone())
    }

    /// Records how the request rules of the harness's own faults ended: call it once the
    /// run's late deliveries are due (after the liveness probe).
    pub fn record_rules(&mut self) {
        for armed in self.armed.drain(..) {
            let (applied, delivered) = (armed.rule.applied(), armed.rule.delivered());
            let ended = match (applied, delivered) {
                (0, _) => "no request to hold",
                (_, 0) => "held, never delivered",
                _ if armed.kind == ExtraFault::DropAfterGrant => "its attempt delivered late",
                _ => "delivered late",
            };
            self.recorder.extra(armed.kind, armed.client, ended);
        }
    }

    /// A client that holds two leases through handles, for a nemesis `kind` that may leave
    /// its lease an orphan: the client keeps its other lease for a long tail, during which a
    /// keeper that renews what it should not shows it. Or, a third of the time (or when no
    /// client holds a pair), a recipe holder (a multi-lock's set, a leadership): it lets go
    /// of the whole recipe that way, which tries the recipe's own drop and release (a set
    /// dropped without a runtime leaves every member an orphan the keeper must not renew),
    /// with no tail: a recipe is let go of at once. If there is none, the nemesis waits for
    /// one (up to [`WAIT_FOR_PAIR`]) and `None` is returned.
    fn pair_holder(&mut self, kind: FaultKind, fleet: &Fleet) -> Option<usize> {
        let live: Vec<usize> = (0..fleet.slots.len())
            .filter(|&i| fleet.slots[i].killed_at.is_none())
            .collect();
        let recipes: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&i| fleet.slots[i].ctl.recipe.load(Ordering::SeqCst))
            .filter(|&i| fleet.slots[i].ctl.holds_several_or_recipe())
            .collect();
        let pairs: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&i| !fleet.slots[i].ctl.recipe.load(Ordering::SeqCst))
            .filter(|&i| fleet.slots[i].ctl.held().len() > 1)
            .collect();
        let pool = if pairs.is_empty() || (!recipes.is_empty() && self.rng.random_bool(1.0 / 3.0)) {
            recipes
        } else {
            pairs
        };
        let holder = pool.choose(&mut self.rng).copied();
        if holder.is_none() {
            self.waiting = Some((kind, Instant::now()));
        }
        holder
    }

    /// A client that holds a lease through a handle or a recipe (a multi-lock's set, a
    /// leadership), for a nemesis on its next let-go; with `free_proxy`, only clients whose
    /// proxy is free. One holding two leases (a pair, or a multi-lock's set) nine times in
    /// ten if there is one; if there is none, half of the time none at all (the nemesis
    /// waits for a better chance), else any holder.
    fn let_go_target(&mut self, fleet: &Fleet, free_proxy: bool) -> Option<usize> {
        let holders: Vec<(usize, usize)> = (0..fleet.slots.len())
            .filter(|&i| fleet.slots[i].killed_at.is_none())
            .filter(|&i| !free_proxy || self.proxy_until[i].is_none())
            .map(|i| (i, fleet.slots[i].ctl.held().len()))
            .filter(|&(_, n)| n > 0)
            .collect();
        let pairs: Vec<usize> = holders
            .iter()
            .filter(|(_, n)| *n > 1)
            .map(|(i, _)| *i)
            .collect();
        if !pairs.is_empty() && self.rng.random_bool(0.9) {
            return pairs.choose(&mut self.rng).copied();
        }
        if pairs.is_empty() && self.rng.random_bool(0.5) {
            return None;
        }
        holders.choose(&mut self.rng).map(|(i, _)| *i)
    }

    /// The operator force-releases one lease of a client that has several (believed, or let
    /// go of by a nemesis in the last [`ABANDONED_FOR`]), preferring a client with one let go
    /// of; if there is no such client, half of the time none at all (waiting for a better
    /// chance). False if nothing was force-released.
    async fn force_release_one(&mut self, fleet: &Fleet) -> bool {
        let since = Instant::now()
            .checked_sub(ABANDONED_FOR)
            .unwrap_or_else(Instant::now);
        let mut candidates = Vec::new();
        for (i, slot) in fleet.slots.iter().enumerate() {
            if slot.killed_at.is_some() {
                continue;
            }
            let held = slot.ctl.held();
            let abandoned: Vec<String> = slot
                .ctl
                .abandoned_since(since)
                .into_iter()
                .filter(|r| !held.contains(r))
                .collect();
            if !held.is_empty() && held.len() + abandoned.len() >= 2 {
                candidates.push((i, held, abandoned.len()));
            }
        }
        let with_abandoned: Vec<_> = candidates.iter().filter(|c| c.2 > 0).cloned().collect();
        let pool = if !with_abandoned.is_empty() {
            with_abandoned
        } else if self.rng.random_bool(0.5) {
            return false;
        } else {
            candidates
        };
        let Some((client, held, abandoned)) = pool.choose(&mut self.rng).cloned() else {
            return false;
        };
        let Some(resource) = held.choose(&mut self.rng).cloned() else {
            return false;
        };
        let start = Instant::now();
        let done = self.observer.force_release(&resource).await;
        let end = Instant::now();
        self.recorder
            .op(OpKind::ForceRelease(resource.clone()), start, end);
        // The holder holds on for a while, unless it notices the loss.
        fleet.slots[client]
            .ctl
            .hold_on_until(end + self.ttl() + Duration::from_millis(500));
        self.recorder.nemesis(NemesisLog {
            kind: FaultKind::ForceReleaseOne,
            client,
            at: start,
            holder: None,
            resource: Some(resource),
            ended: Ending::ForceReleased {
                removed: *done.as_ref().unwrap_or(&0),
                leases: held.len() + abandoned,
            },
        });
        done.is_ok()
    }

    /// Records the end of the fail point armed last, if any.
    fn fail_point_over(&mut self) {
        if let Some((kind, client, start)) = self.fail_point_armed.take() {
            self.recorder
                .fault(kind, Some(client), start, Instant::now());
        }
    }

    /// Arms `failCommand` on the lock commands of `client` for `times` commands, with
    /// `data` (which names the client's `appName`); it replaces the one armed before.
    async fn fail_point(&mut self, kind: FaultKind, client: usize, times: i32, mut data: Document) {
        self.fail_point_over();
        self.fail_point_armed = Some((kind, client, Instant::now()));
        data.insert("failCommands", LOCK_COMMANDS.to_vec());
        let command = doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": times },
            "data": data,
        };
        if let Err(error) = self.admin.run_command(command).await {
            eprintln!("configureFailPoint failed: {error}");
        }
    }

    /// Heals every proxy and turns the fail point off.
    pub async fn heal_all(&mut self, fleet: &mut Fleet) {
        for (i, slot) in fleet.slots.iter().enumerate() {
            slot.proxy.heal();
            if let Some((_, kind, start)) = self.proxy_until[i].take() {
                self.recorder.fault(kind, Some(i), start, Instant::now());
            }
        }
        self.fail_point_over();
        self.waiting_extra = None;
        let off = doc! { "configureFailPoint": "failCommand", "mode": "off" };
        if let Err(error) = self.admin.run_command(off).await {
            eprintln!("turning the fail point off failed: {error}");
        }
        fleet.calm();
        fleet.restart_dead(Duration::ZERO);
    }
}
