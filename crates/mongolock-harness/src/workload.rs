//! The workloads: K clients, each in a thread of its own with a current-thread runtime (so
//! one can be paused or killed alone), each with its own [`LockClient`] whose driver client
//! goes through its own [`FaultProxy`] and names itself (`appName`) for fail points.
//!
//! A client runs one worker: it picks a target (a mutex, a semaphore, a reader-writer lock,
//! or a group of the group pool), acquires it (`acquire_timeout`, `read_timeout` or
//! `write_timeout`; for a group, each member with `xlock` under one fresh lock id: see the
//! `group` submodule), then does a few steps of work. Before each step it checks that
//! it still holds and stops when it does not; each step writes `(token, value)` to the
//! guarded record (a reader reads it), then works for a while, racing the work against
//! `guard.lost()` and sampling the local deadline. Then it releases. Everything goes to the
//! holder's [`HolderLog`].
//!
//! A group has no keeper: its holder renews it and keeps its own local deadline (the
//! `group` submodule).
//!
//! Some handle resources are held with a *lock-delay* ([`Workload::lock_delays`]): a lease on
//! one that ends without a release (a pause past the TTL, a kill, a partition, a force
//! release, a clock jump) keeps the resource from everybody for the delay, by the server's
//! clock. Others are *resumable* ([`Workload::resumable`]): held under a lock id fixed per
//! client slot, so that a killed client's next incarnation, or a twin beside a paused one,
//! resumes the lease with its token (the `resume` submodule). While faults are injected, the
//! holders of both also kill or pause their own client now and then, so that a short run
//! sees these cases.
//!
//! Two recipes of the library have targets of their own (the `recipes` submodule): a
//! *multi-lock* (`LockClient::multi`: two or three resources of the multi-lock pool at once,
//! all or nothing, each member an exclusive lease with its own token, one loss signal) and
//! an *election* (`LockClient::election`: the leader holds the election's resource, its
//! term is the grant's fencing token, and it writes with it and proclaims new values). Each
//! member of a multi-lock, and each leader, is logged as an exclusive holder of its
//! resource; recipe holders publish what they hold, so the nemeses on a holder's let-go
//! reach them too.
//!
//! A worker may also take a *pair*: two of the handle resources at once (in name order, so
//! pair holders never wait on each other in a cycle), and work under both. The `hold`
//! submodule holds one lease or a pair, and carries out the nemeses aimed at a holder's
//! let-go ([`FaultKind::is_let_go`]: a guard dropped on a thread without a runtime, a
//! release future dropped mid-flight, a release under a blip, a partition or lost replies)
//! on one of its leases; a pair holder keeps the other one for a long tail (2–3 × TTL)
//! afterwards, so that a keeper that renews what it should not has time to show it. An
//! acquire future can be dropped mid-flight too, in the runtime or on a thread without one.
//!
//! A small share of the picks ([`Workload::periodic_share`]) makes the worker a *host* of
//! periodic jobs for a few periods ([`Periodic`], the `periodic` submodule): its timer fires
//! at the start of each period, late by a lateness of its own, and runs three short jobs
//! under locks with a minimum hold a little shorter than the period (a mutex, a multi-lock,
//! and the low-level `acquire` and `release_attempt`), so that hosts whose timers differ run
//! each job at most once per period. An operator purges now and then meanwhile
//! ([`periodic::operator`]).
//!
//! Some faults of the harness's own ([`ExtraFault`]) are carried out by the worker too, so
//! that they come with the command they are for: a holder of a resumable lease has its
//! release refused by its proxy and asks for the resource again at once under the same lock
//! id (the `hold` submodule); a worker sent for a multi-lock has the outcome of its member
//! attempts made unknown and its withdrawals refused as it begins (the `recipes`
//! submodule); a guard is dropped right after its grant. The injector sends another client
//! for what such a fault may free under its holder ([`ClientCtl::go_for_next`]), so that a
//! lease ended behind its holder's back is taken while the holder still believes.
//!
//! Three scenarios of their own take resources no other target takes. A small share of the
//! picks ([`Workload::own_entry_share`]) makes the worker ask again under a lock id whose own
//! entry is still in force (let go of within its minimum hold, or in its lock-delay), with a
//! second client of its slot asking after it: it must stand in line and be served first
//! ([`OwnEntryLine`], the `line` submodule). The injector sends a worker to step the server's
//! clock, forward or back, while the reply to its grant is held back on its way and another
//! reply of its client is read first ([`ClockSteps`], the `step` submodule). And a guard of
//! the resumable lease dropped inside a runtime that then ends (its background release never
//! runs) is followed by the same client asking for it again under the same lock id, which
//! must return within its timeout ([`FaultKind::DropOnEndingRuntime`], the `hold` submodule).
//!
//! Pauses and kills are asked for through [`ClientCtl`]. Those aimed at a holder are carried
//! out by the worker itself at its next step: a pause is a `std::thread::sleep` that stops
//! the whole runtime (the worker, its keeper, its driver), a kill forgets the guard
//! (`mem::forget`, no release) and ends the thread, dropping the runtime and with it the
//! keeper. Those aimed at a client that is acquiring are carried out at once, with the
//! acquire in flight: a pause by a watcher task in the client's runtime (which stops the
//! thread), a kill by dropping the worker (and the acquire future with it) and at once the
//! runtime, so that nothing the dropped acquire would do afterwards (withdrawing its attempt
//! or an announcement) ever runs, as in a crash.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mongolock::{LockClient, LockGuard};
use mongolock_testkit::{Clock, FaultProxy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::{ExtraFault, FaultKind};
use crate::history::{GuardLog, HolderLog, Mode, PauseLog, Recorder, WriteLog};

pub mod adoption;
mod group;
mod hold;
mod line;
pub mod periodic;
mod recipes;
mod resume;
mod step;
pub mod step_back;

use group::attach_acquiring_pauses;

/// The database and collection every client locks in.
pub const DB: &str = "harness";
/// See [`DB`].
pub const COLLECTION: &str = "locks";

/// The shape of a workload.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Number of clients.
    pub clients: usize,
    /// The lease TTL of every guard.
    pub ttl: Duration,
    /// How long an acquire waits at most.
    pub acquire_timeout: Duration,
    /// The resources and how they are locked.
    pub resources: Vec<(String, Mode)>,
    /// Steps of work per holder (inclusive range).
    pub steps: (u32, u32),
    /// Length of one step, in milliseconds (inclusive range).
    pub step_ms: (u64, u64),
    /// How many members of the group pool one group takes (inclusive range).
    pub group_size: (usize, usize),
    /// How many members of the multi-lock pool one multi-lock takes (inclusive range).
    pub multi_size: (usize, usize),
    /// The chance that a holder of a reader-writer lock is a writer.
    pub writer_share: f64,
    /// The chance that a worker goes for a pair of handle resources (two held at once)
    /// rather than for one of [`Workload::targets`], while faults are injected.
    pub pair_share: f64,
    /// Handle resources whose holders use a lock-delay, with the delay: after a lease on
    /// one ends without a release, nobody is granted it until the delay has passed by the
    /// server's clock (see the `hold` submodule).
    pub lock_delays: Vec<(String, Duration)>,
    /// Handle resources taken under a lock id fixed per client slot (`resume-{index}`), the
    /// same in every incarnation: a client killed while holding one is restarted to resume
    /// it, and a holder of one that is paused may find a twin resuming it meanwhile (the
    /// `resume` submodule).
    pub resumable: Vec<String>,
    /// Whether an incarnation whose resumable lease a twin resumed releases it when it lets
    /// go of it, as any holder does (`true`, the default), or forgets the guard (`false`).
    /// Its release must remove nothing the twin holds: before the library's releases
    /// matched the keeper an entry names (commit `daa79aa`), it removed the twin's entry and
    /// a third client was granted the resource while the twin believed it held (found by
    /// this workload, as (1) and (3) violations).
    pub release_after_resume: bool,
    /// Periodic jobs with a minimum hold, if any (the `periodic` submodule).
    pub periodic: Option<Periodic>,
    /// The chance that a worker becomes a host of the periodic jobs for a few periods rather
    /// than go for one of [`Workload::targets`], while faults are injected.
    pub periodic_share: f64,
    /// Waiters whose own entry is still in force, if any (the `line` submodule).
    pub own_entry: Option<OwnEntryLine>,
    /// The chance that a worker plays one round of [`Workload::own_entry`] rather than go
    /// for one of [`Workload::targets`], while faults are injected.
    pub own_entry_share: f64,
    /// Steps of the server's clock while a grant's reply is on its way, if any (the `step`
    /// submodule; the injector sends a client for one: [`ExtraFault::ClockStepInFlight`]).
    pub clock_steps: Option<ClockSteps>,
    /// Steps of the server's clock back past the grant of a job's lock let go of within its
    /// minimum hold, if any (the `step_back` submodule; the injector sends a client for one:
    /// [`ExtraFault::StepBackUnderHold`]).
    pub step_back: Option<StepBackHold>,
    /// A restarted holder's adoption racing its dead process's late release, if any (the
    /// `adoption` submodule; the injector sends a client for one:
    /// [`ExtraFault::AdoptionRace`]).
    pub adoption: Option<AdoptionRace>,
}

/// A holder with a minimum hold lets go and dies, its release late on the wire, and its
/// restarted process asks under the same lock id before the release lands (the `adoption`
/// submodule); its resource is among [`Workload::resources`] but no other target's.
#[derive(Debug, Clone)]
pub struct AdoptionRace {
    /// The resource (a mutex).
    pub resource: String,
    /// The TTL of the job's lock.
    pub ttl: Duration,
    /// Its minimum hold.
    pub hold: Duration,
    /// How long the first process's release is held on the wire.
    pub late: Duration,
    /// The latency each way between the restarted process and the server.
    pub far: Duration,
}

impl AdoptionRace {
    /// The race on `resource`: a 3 s TTL, a 1.8 s hold, the release 850 ms late, the
    /// restarted process 300 ms away each way. Its adoption cannot reach the server before
    /// the release lands (it is sent 50 ms after the release, and its attempt's round trip
    /// and its own way take three times 300 ms), and its attempt, due 350 ms after the
    /// release was sent, has 500 ms to spare before the release lands: a machine under
    /// load (CI's) delays the attempt, and with 250 ms to spare (a release 600 ms late)
    /// the race was often not made there. The hold outlasts the planted adoption, sent
    /// once the release landed and 300 ms on its way. (Farther away, the restarted
    /// process's attempts would outrun their command time limit.)
    pub fn on(resource: &str) -> Self {
        AdoptionRace {
            resource: resource.to_owned(),
            ttl: Duration::from_secs(3),
            hold: Duration::from_millis(1_800),
            late: Duration::from_millis(850),
            far: Duration::from_millis(300),
        }
    }
}

/// Periodic jobs with a minimum hold on several hosts, each under a lock id of its own that
/// it keeps, while the server's clock steps back past a let-go grant (the `step_back`
/// submodule); its resource is among [`Workload::resources`] but no other target's.
#[derive(Debug, Clone)]
pub struct StepBackHold {
    /// The resource (a mutex).
    pub resource: String,
    /// How many hosts (two or more).
    pub hosts: usize,
    /// The minimum hold of every job's lock.
    pub hold: Duration,
    /// The period of the hosts' timers.
    pub period: Duration,
    /// Host `k`'s timer fires `k` times this late.
    pub lateness: Duration,
    /// How many periods the hosts run.
    pub periods: u32,
    /// How much further back than the hold and the time since the grant the clock steps, in
    /// milliseconds (inclusive range).
    pub beyond_ms: (u64, u64),
}

impl StepBackHold {
    /// The shape the fleet and the control run (with a resource of their own): three hosts,
    /// a 600 ms hold, three one-second periods, timers 80 ms apart, and a step back of the
    /// hold, the time since the grant and 100–400 ms more.
    pub const THREE_HOSTS: StepBackHold = StepBackHold {
        resource: String::new(),
        hosts: 3,
        hold: Duration::from_millis(600),
        period: Duration::from_millis(1_000),
        lateness: Duration::from_millis(80),
        periods: 3,
        beyond_ms: (100, 400),
    };
}

/// A step of the server's clock while the reply to a grant is held back on its way, with
/// another reply of the same client read first (the `step` submodule); its resource is among
/// [`Workload::resources`] but no other target's.
#[derive(Debug, Clone)]
pub struct ClockSteps {
    /// The resource (a mutex).
    pub resource: String,
    /// The TTL of the leases taken there.
    pub ttl: Duration,
    /// The clock uncertainty of the client that takes them
    /// (`LockClient::with_clock_uncertainty`). Zero in the standard workload: a reply's
    /// `operationTime` shows a step only to the whole second, but the library counts a step
    /// of 100 ms and more rounded up to the second its whole seconds may leave out (`e87044e`),
    /// and the steps here are 2–3 s forward, so the step shown must be counted whole. An
    /// uncertainty of a second (as before) made the holder's deadline that much earlier,
    /// which hid an undercount of up to a second: the 0.95 s of a 2.85 s step counted as
    /// 1.9 s, which `e87044e` fixed, is the size of what it would hide.
    pub uncertainty: Duration,
    /// A step forward, in milliseconds (inclusive range).
    pub forward_ms: (u64, u64),
    /// A step back, in milliseconds (inclusive range).
    pub back_ms: (u64, u64),
}

/// Which way the server's clock steps while a grant's reply is held ([`Target::ClockStep`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepWay {
    /// Forward, after the grant ran.
    Forward,
    /// Back, after the grant ran.
    Back,
    /// Back before the attempt is sent (no reply shows it before the grant's reading),
    /// then forward, further, after the grant ran: the grant's reading shows a step back,
    /// and the other reply a step forward after it (two failovers of a set, to a member
    /// behind and then to one ahead).
    BackThenForward,
}

/// A lock id whose own entry is still in force waits again, with another client after it
/// (the `line` submodule); its resource is among [`Workload::resources`] but no other
/// target's.
#[derive(Debug, Clone)]
pub struct OwnEntryLine {
    /// The resource (a mutex).
    pub resource: String,
    /// The minimum hold of the first lease, in the hold way.
    pub min_hold: Duration,
    /// The lock-delay of the first lease, in the delay way.
    pub lock_delay: Duration,
    /// The TTL of the first lease in the delay way (nothing renews it).
    pub short_ttl: Duration,
    /// How long after the lock id asks again the other client asks.
    pub contender_after: Duration,
}

/// Periodic jobs run at most once per period across hosts whose timers differ, each under a
/// lock with a minimum hold (`min_hold`) a little shorter than the period; their resources
/// are among [`Workload::resources`] but no other target's.
#[derive(Debug, Clone)]
pub struct Periodic {
    /// The period: every host's timer fires at each multiple of it (from the fleet's start),
    /// late by its lateness.
    pub period: Duration,
    /// The minimum hold of every job's lock.
    pub min_hold: Duration,
    /// Client `i`'s timer fires `i` times this late.
    pub lateness: Duration,
    /// For how many periods a host runs its timer (inclusive range).
    pub periods: (u32, u32),
    /// How long one job works, in milliseconds (inclusive range).
    pub job_ms: (u64, u64),
    /// The mutex job's resource.
    pub mutex: String,
    /// The multi-lock job's resources (taken at once).
    pub multi: Vec<String>,
    /// The low-level job's resource (`LockClient::acquire`, then `release_attempt`).
    pub low_level: String,
    /// How long the operator waits between purges, in milliseconds (inclusive range).
    pub purge_every_ms: (u64, u64),
}

impl Periodic {
    /// Every resource of the jobs.
    pub fn resources(&self) -> Vec<String> {
        let mut all = vec![self.mutex.clone(), self.low_level.clone()];
        all.extend(self.multi.iter().cloned());
        all
    }
}

/// What a worker goes for: one resource through its handle, a group of the group pool, a
/// multi-lock of the multi-lock pool, an election, or a pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A resource that is not in the group pool, and its mode.
    Resource(String, Mode),
    /// Some members of the group pool.
    Group(Vec<String>),
    /// Two of these resources (outside the group pool), held at once.
    Pair(Vec<(String, Mode)>),
    /// Some members of the multi-lock pool, taken at once with `LockClient::multi`.
    Multi(Vec<String>),
    /// An election to campaign in: its resource.
    Election(String),
    /// The periodic jobs, as one host, for a few periods ([`Workload::periodic`]).
    Periodic,
    /// One round of a lock id asking again while its own entry is in force
    /// ([`Workload::own_entry`]).
    OwnEntry,
    /// A step of the server's clock while the reply to this client's grant is held back
    /// ([`Workload::clock_steps`]).
    ClockStep(StepWay),
    /// A step of the server's clock back past a let-go grant in its minimum hold, with jobs
    /// on several hosts ([`Workload::step_back`]).
    StepBack,
    /// A restarted holder's adoption racing its dead process's late release
    /// ([`Workload::adoption`]).
    Adoption,
}

impl Target {
    /// The resources this target goes for (for a group or a multi-lock, its pool).
    pub fn resources(&self) -> Vec<String> {
        match self {
            Target::Resource(resource, _) | Target::Election(resource) => vec![resource.clone()],
            Target::Group(pool) | Target::Multi(pool) => pool.clone(),
            Target::Pair(pair) => pair.iter().map(|(resource, _)| resource.clone()).collect(),
            Target::Periodic
            | Target::OwnEntry
            | Target::ClockStep(_)
            | Target::StepBack
            | Target::Adoption => Vec::new(),
        }
    }
}

impl Workload {
    /// Two mutexes, a semaphore with two permits, two reader-writer locks, a pool of four
    /// resources taken two or three at a time in groups, a pool of four taken two or three
    /// at a time as multi-locks, and an election; six clients, TTL 1.5 s; one pick in four
    /// is a pair of handle resources held at once. Of the mutexes, `d0` is held with a
    /// lock-delay of 700 ms and `r0` under a lock id fixed per client, which is resumed after
    /// a kill and, beside some pauses, by a twin. One pick in twenty makes a host of the
    /// periodic jobs (a period of 1 s, a minimum hold of 800 ms, timers late by 0–300 ms) on
    /// `job0` (a mutex), `jobm0` and `jobm1` (a multi-lock) and `jobl0` (low level). One
    /// pick in twenty-five is a round of a lock id asking again on `q0` while its own entry
    /// is in force (a minimum hold of 600 ms, or a lock-delay of 600 ms after a 300 ms
    /// lease), with the slot's second client asking 150 ms later. The server's clock steps
    /// forward by 2–3 s, or back by 0.5–1 s, or back by 0.5–1 s before the attempt and then
    /// forward by 2–3 s, while a grant's reply on `c0` (TTL 6 s, no clock uncertainty) is
    /// held back. And it steps back past the grant of a job's lock let
    /// go of within its minimum hold (600 ms), by the hold, the time since the grant and
    /// 100–400 ms more, while three hosts run a job on `h0` every second under lock ids they
    /// keep. And a restarted holder's adoption races its dead process's late release on `a0`
    /// ([`AdoptionRace::on`]).
    pub fn standard() -> Self {
        Workload {
            clients: 6,
            ttl: Duration::from_millis(1_500),
            acquire_timeout: Duration::from_secs(3),
            resources: vec![
                ("m0".into(), Mode::Exclusive),
                ("m1".into(), Mode::Exclusive),
                ("d0".into(), Mode::Exclusive),
                ("r0".into(), Mode::Exclusive),
                ("s0".into(), Mode::Shared { permits: 2 }),
                ("rw0".into(), Mode::ReadWrite),
                ("rw1".into(), Mode::ReadWrite),
                ("g0".into(), Mode::Group),
                ("g1".into(), Mode::Group),
                ("g2".into(), Mode::Group),
                ("g3".into(), Mode::Group),
                ("x0".into(), Mode::Multi),
                ("x1".into(), Mode::Multi),
                ("x2".into(), Mode::Multi),
                ("x3".into(), Mode::Multi),
                ("e0".into(), Mode::Election),
                ("job0".into(), Mode::Exclusive),
                ("jobm0".into(), Mode::Multi),
                ("jobm1".into(), Mode::Multi),
                ("jobl0".into(), Mode::Exclusive),
                ("q0".into(), Mode::Exclusive),
                ("c0".into(), Mode::Exclusive),
                ("h0".into(), Mode::Exclusive),
                ("a0".into(), Mode::Exclusive),
            ],
            steps: (2, 5),
            step_ms: (40, 200),
            group_size: (2, 3),
            multi_size: (2, 3),
            writer_share: 0.35,
            pair_share: 0.25,
            lock_delays: vec![("d0".into(), Duration::from_millis(700))],
            resumable: vec!["r0".into()],
            release_after_resume: true,
            periodic: Some(Periodic {
                period: Duration::from_millis(1_000),
                min_hold: Duration::from_millis(800),
                lateness: Duration::from_millis(60),
                periods: (2, 3),
                job_ms: (30, 120),
                mutex: "job0".into(),
                multi: vec!["jobm0".into(), "jobm1".into()],
                low_level: "jobl0".into(),
                purge_every_ms: (1_500, 3_000),
            }),
            periodic_share: 0.05,
            own_entry: Some(OwnEntryLine {
                resource: "q0".into(),
                min_hold: Duration::from_millis(600),
                lock_delay: Duration::from_millis(600),
                short_ttl: Duration::from_millis(300),
                contender_after: Duration::from_millis(150),
            }),
            own_entry_share: 0.04,
            clock_steps: Some(ClockSteps {
                resource: "c0".into(),
                ttl: Duration::from_secs(6),
                uncertainty: Duration::ZERO,
                forward_ms: (2_000, 3_000),
                back_ms: (500, 1_000),
            }),
            step_back: Some(StepBackHold {
                resource: "h0".into(),
                ..StepBackHold::THREE_HOSTS
            }),
            adoption: Some(AdoptionRace::on("a0")),
        }
    }

    /// True if `resource` is one of the periodic jobs' ([`Workload::periodic`]): no other
    /// target takes it.
    pub fn is_periodic(&self, resource: &str) -> bool {
        (self.periodic.as_ref()).is_some_and(|p| p.resources().iter().any(|r| r == resource))
    }

    /// True if `resource` is the one of [`Workload::own_entry`]: no other target takes it.
    pub fn is_own_entry(&self, resource: &str) -> bool {
        (self.own_entry.as_ref()).is_some_and(|o| o.resource == resource)
    }

    /// True if `resource` belongs to a scenario of its own (the periodic jobs, a lock id
    /// asking again while its own entry is in force) rather than to the targets.
    fn is_set_apart(&self, resource: &str) -> bool {
        self.is_periodic(resource)
            || self.is_own_entry(resource)
            || (self.clock_steps.as_ref()).is_some_and(|c| c.resource == resource)
            || (self.step_back.as_ref()).is_some_and(|s| s.resource == resource)
            || (self.adoption.as_ref()).is_some_and(|a| a.resource == resource)
    }

    /// The lock-delay of `resource`'s holders, if it has one ([`Workload::lock_delays`]).
    pub fn lock_delay(&self, resource: &str) -> Option<Duration> {
        self.lock_delays
            .iter()
            .find(|(r, _)| r == resource)
            .map(|(_, delay)| *delay)
    }

    /// The longest lock-delay of the workload (zero without one).
    pub fn max_lock_delay(&self) -> Duration {
        self.lock_delays
            .iter()
            .map(|(_, delay)| *delay)
            .max()
            .unwrap_or_default()
    }

    /// True if `resource` is taken under a lock id fixed per client slot
    /// ([`Workload::resumable`]).
    pub fn is_resumable(&self, resource: &str) -> bool {
        self.resumable.iter().any(|r| r == resource)
    }

    /// The mode of each resource.
    pub fn modes(&self) -> HashMap<String, Mode> {
        self.resources.iter().cloned().collect()
    }

    /// What workers pick from: every handle resource, the group pool and the multi-lock
    /// pool (if any) as one target each, and every election.
    pub fn targets(&self) -> Vec<Target> {
        let mut targets: Vec<Target> = self
            .resources
            .iter()
            .filter(|(r, mode)| is_handle(*mode) && !self.is_set_apart(r))
            .map(|(r, mode)| Target::Resource(r.clone(), *mode))
            .collect();
        let pool = self.group_pool();
        if !pool.is_empty() {
            targets.push(Target::Group(pool));
        }
        let pool = self.pool(Mode::Multi);
        if !pool.is_empty() {
            targets.push(Target::Multi(pool));
        }
        targets.extend(self.pool(Mode::Election).into_iter().map(Target::Election));
        targets
    }

    /// What a pair is taken from ([`Workload::pair_share`] of the picks): the handle
    /// resources (mutexes, semaphores, reader-writer locks), if there are two; else `None`.
    pub fn pair_target(&self) -> Option<Target> {
        let singles: Vec<(String, Mode)> = self
            .resources
            .iter()
            .filter(|(r, mode)| is_handle(*mode) && !self.is_set_apart(r))
            .cloned()
            .collect();
        (singles.len() >= 2).then_some(Target::Pair(singles))
    }

    /// The resources of the group pool.
    pub fn group_pool(&self) -> Vec<String> {
        self.pool(Mode::Group)
    }

    /// The resources locked as `mode`, in order (those of the periodic jobs aside).
    pub fn pool(&self, mode: Mode) -> Vec<String> {
        self.resources
            .iter()
            .filter(|(r, m)| *m == mode && !self.is_set_apart(r))
            .map(|(r, _)| r.clone())
            .collect()
    }

    /// The sets of resources the liveness probe expects a grant on after healing: each
    /// handle resource and each election, and the group pool and the multi-lock pool each
    /// as a whole (a group or a multi-lock takes only some of their members).
    pub fn liveness_sets(&self) -> Vec<Vec<String>> {
        self.targets()
            .into_iter()
            .filter_map(|t| match t {
                Target::Resource(r, _) => Some(vec![r]),
                Target::Group(pool) | Target::Multi(pool) => Some(pool),
                Target::Election(r) => Some(vec![r]),
                Target::Pair(_)
                | Target::Periodic
                | Target::OwnEntry
                | Target::ClockStep(_)
                | Target::StepBack
                | Target::Adoption => None,
            })
            .collect()
    }
}

/// True for the resources taken through a handle (mutex, semaphore, reader-writer lock):
/// single targets, and what pairs are made of.
pub fn is_handle(mode: Mode) -> bool {
    matches!(
        mode,
        Mode::Exclusive | Mode::Shared { .. } | Mode::ReadWrite
    )
}

/// How many holders `mode` admits at once: the number of locks the observer takes to show
/// that a resource is free.
pub fn capacity(mode: Mode) -> u32 {
    match mode {
        Mode::Shared { permits } => permits,
        _ => 1,
    }
}

/// For a reader-writer lock: one read attempt by `observer`, released at once. Once every
/// client has stopped, a refusal means a writer's announcement outlived its writer (or
/// a lock its holder); the problem is returned. Other modes: nothing to check.
pub async fn readers_let_in(
    observer: &LockClient,
    resource: &str,
    mode: Mode,
    ttl: Duration,
) -> Option<String> {
    if mode != Mode::ReadWrite {
        return None;
    }
    match observer.rwlock(resource).ttl(ttl).try_read().await {
        Ok(Some(guard)) => {
            let _ = guard.release().await;
            None
        }
        other => Some(format!(
            "{resource}: the observer could not read once every client stopped (a writer's \
             announcement left behind?): {other:?}"
        )),
    }
}

/// One attempt by `observer` at the whole of `resource` (a permit, for a semaphore; the
/// write lock, for a reader-writer lock).
///
/// # Errors
/// As the handles' `try_acquire`.
///
/// # Cancel safety
/// As the handles' `try_acquire`: dropping it leaves no lock.
pub async fn try_take(
    observer: &LockClient,
    resource: &str,
    mode: Mode,
    ttl: Duration,
) -> mongolock::Result<Option<LockGuard>> {
    match mode {
        Mode::Exclusive | Mode::Group | Mode::Multi | Mode::Election => {
            observer.mutex(resource).ttl(ttl).try_acquire().await
        }
        Mode::Shared { permits } => {
            observer
                .semaphore(resource, permits)
                .ttl(ttl)
                .try_acquire()
                .await
        }
        Mode::ReadWrite => observer.rwlock(resource).ttl(ttl).try_write().await,
    }
}

/// What the harness asks of one client; the worker reads it at every step.
#[derive(Debug, Default)]
pub struct ClientCtl {
    /// Pause the whole client for this many milliseconds at the next step (0: none).
    pub pause_ms: AtomicU64,
    /// Die at the next step, without releasing.
    pub kill: AtomicBool,
    /// Finish the current holder (release) and stop.
    pub stop: AtomicBool,
    /// Set while the worker holds a guard (faults prefer holders).
    pub holding: AtomicBool,
    /// Set while the worker is in an acquire call (or taking a group, a multi-lock, or
    /// campaigning).
    pub acquiring: AtomicBool,
    /// Pause the whole client for this many milliseconds while it is acquiring (0: none).
    pub pause_acquiring_ms: AtomicU64,
    /// Die while acquiring, with the acquire in flight.
    pub kill_acquiring: AtomicBool,
    /// The pauses carried out while acquiring (start, end), for the holders of partial
    /// groups.
    pub acquiring_pauses: std::sync::Mutex<Vec<(Instant, Instant)>>,
    /// A copy of the logs of the members of a group being taken, for a kill while
    /// acquiring to record (the worker's own copy is dropped with it).
    pub partial: std::sync::Mutex<Vec<HolderLog>>,
    /// Set while the worker is in an acquire call of a handle (not a group).
    pub acquiring_handle: AtomicBool,
    /// A nemesis for the holder's next let-go of a lease ([`FaultKind::is_let_go`]): carried
    /// out within 10 ms while it holds, or at its release.
    pub let_go: std::sync::Mutex<Option<FaultKind>>,
    /// Drop the acquire future in flight, as asked.
    pub drop_acquire: std::sync::Mutex<Option<DropAcquire>>,
    /// The resources the worker believes it holds now through handles, or as a recipe
    /// holder (the members of a multi-lock, an election's resource): what the nemeses on a
    /// holder's let-go aim at.
    pub held: std::sync::Mutex<Vec<String>>,
    /// Set while what [`ClientCtl::held`] lists is one recipe's (a multi-lock's set, a
    /// leadership): all of it is let go of at once, by one release.
    pub recipe: AtomicBool,
    /// Resources the worker let go of by a nemesis that may have left their entry on the
    /// server, with when.
    pub abandoned: std::sync::Mutex<Vec<(String, Instant)>>,
    /// Hold on at least until then, unless the lease is lost (after a force-release of one
    /// lease: does the holder notice?).
    pub hold_until: std::sync::Mutex<Option<Instant>>,
    /// Set when the faults stop: a pair holder's long tail after a nemesis ends, so that
    /// the liveness probe does not mistake it for a stuck lock.
    pub calmed: AtomicBool,
    /// Set by a worker that killed itself (the `resume` submodule): restarted as a killed
    /// client is.
    pub crashed: AtomicBool,
    /// The threads of the twins that resumed this client's lease while it was paused (the
    /// `resume` submodule), joined when the fleet stops.
    pub twins: std::sync::Mutex<Vec<JoinHandle<()>>>,
    /// Drop the next guard a handle grants as soon as it is granted
    /// ([`ExtraFault::DropAfterGrant`]).
    pub drop_after_grant: AtomicBool,
    /// What to go for next, before any random pick ([`ClientCtl::go_for_next`]).
    pub next_target: std::sync::Mutex<Option<Target>>,
    /// A resumable resource whose lease to release at the next step and ask for again at
    /// once under the same lock id ([`ExtraFault::ReleaseFailsThenResume`]).
    pub release_again: std::sync::Mutex<Option<String>>,
    /// Hold what the next acquire grants at least this long, unless it is lost.
    pub hold_next: std::sync::Mutex<Option<Duration>>,
    /// Arm [`ExtraFault::MultiUnknown`] as the next multi-lock acquire begins, and then send
    /// this contender (if any) for the member whose attempt was lost.
    pub multi_unknown: std::sync::Mutex<Option<Option<Arc<ClientCtl>>>>,
    /// Carry out [`ExtraFault::LateUnlock`] in the next group taken, and then send this
    /// contender (if any) for its first member.
    pub late_unlock: std::sync::Mutex<Option<Option<Arc<ClientCtl>>>>,
    /// Drop the guard of the resumable lease on a runtime that ends
    /// ([`FaultKind::DropOnEndingRuntime`]) at a step of its current or next holding, or
    /// when that holding lets go of it.
    pub drop_on_ending_runtime: AtomicBool,
}

/// How to drop an acquire future mid-flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropAcquire {
    /// Move the future to a thread without a tokio runtime and drop it there (nothing
    /// withdraws its attempt); otherwise drop it in the runtime.
    pub without_runtime: bool,
    /// How long after the request is seen.
    pub after: Duration,
}

/// Locks `m`, whatever a panicking holder left behind.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ClientCtl {
    /// The resources the worker believes it holds now (see [`ClientCtl::held`]).
    pub fn held(&self) -> Vec<String> {
        lock(&self.held).clone()
    }

    /// The resources let go of by a nemesis since `since`.
    pub fn abandoned_since(&self, since: Instant) -> Vec<String> {
        lock(&self.abandoned)
            .iter()
            .filter(|(_, at)| *at >= since)
            .map(|(r, _)| r.clone())
            .collect()
    }

    /// True if the worker holds several leases now, or one recipe's (a let-go of it may
    /// leave orphans: see [`FaultKind::is_let_go`]).
    pub fn holds_several_or_recipe(&self) -> bool {
        let held = lock(&self.held).len();
        held > 1 || (held > 0 && self.recipe.load(Ordering::SeqCst))
    }

    /// Asks the holder to hold on at least until `until`, unless its lease is lost.
    pub fn hold_on_until(&self, until: Instant) {
        *lock(&self.hold_until) = Some(until);
    }

    /// Asks the worker to go for `target` next (a contender for what a fault may free); a
    /// clock step or adoption race it was sent for ([`Target::ClockStep`],
    /// [`Target::StepBack`], [`Target::Adoption`]) is not replaced.
    pub fn go_for_next(&self, target: Target) {
        let mut next = lock(&self.next_target);
        let kept = matches!(
            *next,
            Some(Target::ClockStep(_) | Target::StepBack | Target::Adoption)
        );
        if !kept {
            *next = Some(target);
        }
    }

    /// Asks the holder of a lease of `resource` (a resumable one) to release it at its next
    /// step and ask for it again at once under the same lock id.
    pub fn release_then_ask_again(&self, resource: &str) {
        *lock(&self.release_again) = Some(resource.to_owned());
    }

    /// Asks the worker to arm [`ExtraFault::MultiUnknown`] as its next multi-lock acquire
    /// begins, and to send `contender` for the member whose attempt was lost once it holds
    /// the set.
    pub fn multi_unknown(&self, contender: Option<Arc<ClientCtl>>) {
        *lock(&self.multi_unknown) = Some(contender);
    }

    /// Asks the worker to carry out [`ExtraFault::LateUnlock`] in the next group it takes,
    /// and to send `contender` for the group's first member once it holds the group again.
    pub fn late_unlock(&self, contender: Option<Arc<ClientCtl>>) {
        *lock(&self.late_unlock) = Some(contender);
    }

    /// Asks the worker to hold what its next acquire grants at least `at_least`, unless it
    /// is lost.
    pub fn hold_next_at_least(&self, at_least: Duration) {
        *lock(&self.hold_next) = Some(at_least);
    }

    /// The hold-on asked for a holding that starts now: what [`ClientCtl::hold_next_at_least`]
    /// asked for (taken), or none; requests left from an earlier holding are not for this one.
    fn start_holding(&self) {
        lock(&self.let_go).take();
        let until = lock(&self.hold_next).take().map(|d| Instant::now() + d);
        *lock(&self.hold_until) = until;
    }
}

/// How a worker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Asked to stop: released what it held.
    Stopped,
    /// Killed: what it held was never released.
    Killed,
}

/// One client slot: its proxy, its controls, its thread.
#[derive(Debug)]
pub struct Slot {
    /// The slot's index (the client's number).
    pub index: usize,
    /// The `appName` its driver client sends.
    pub app_name: String,
    /// Its fault proxy.
    pub proxy: Arc<FaultProxy>,
    /// The controls of its current incarnation.
    pub ctl: Arc<ClientCtl>,
    /// When it was last killed, if it is dead and not restarted yet.
    pub killed_at: Option<Instant>,
    incarnation: u64,
    thread: Option<JoinHandle<Exit>>,
}

impl Slot {
    /// True if the client's thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
}

/// All the clients of a run.
#[derive(Debug)]
pub struct Fleet {
    /// The client slots.
    pub slots: Vec<Slot>,
    workload: Workload,
    recorder: Recorder,
    seed: u64,
    /// When the periods of the periodic jobs begin.
    epoch: Instant,
    /// The server's clock.
    clock: Clock,
    /// Set while a client carries out a clock step ([`Target::ClockStep`]): one at a time.
    pub stepping: Arc<AtomicBool>,
}

impl Fleet {
    /// Starts one proxy per client in front of `server` (whose clock is `clock`) and a worker
    /// thread per client.
    ///
    /// # Errors
    /// A proxy could not bind.
    pub async fn start(
        server: std::net::SocketAddr,
        clock: Clock,
        workload: &Workload,
        recorder: &Recorder,
        seed: u64,
    ) -> std::io::Result<Fleet> {
        let mut slots = Vec::new();
        for index in 0..workload.clients {
            let proxy = Arc::new(FaultProxy::start(server).await?);
            slots.push(Slot {
                index,
                app_name: format!("harness-client-{index}"),
                proxy,
                ctl: Arc::new(ClientCtl::default()),
                killed_at: None,
                incarnation: 0,
                thread: None,
            });
        }
        let mut fleet = Fleet {
            slots,
            workload: workload.clone(),
            recorder: recorder.clone(),
            seed,
            epoch: Instant::now(),
            clock,
            stepping: Arc::default(),
        };
        for index in 0..fleet.slots.len() {
            fleet.spawn(index);
        }
        Ok(fleet)
    }

    fn spawn(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        // A client killed while it held a resumable lease comes back for it first.
        let resume_first = slot.killed_at.and_then(|_| {
            slot.ctl
                .held()
                .into_iter()
                .find(|r| self.workload.is_resumable(r))
        });
        slot.incarnation += 1;
        // The twins an earlier incarnation started live on: the new one must know them
        // (it does not ask for their resource while they run), and `stop` joins them.
        let twins = std::mem::take(&mut *lock(&slot.ctl.twins));
        slot.ctl = Arc::new(ClientCtl::default());
        *lock(&slot.ctl.twins) = twins;
        slot.killed_at = None;
        let mut options = slot.proxy.client_options();
        options.app_name = Some(slot.app_name.clone());
        let worker = Worker {
            options: options.clone(),
            proxy: slot.proxy.clone(),
            resume_first,
            twin: false,
            index,
            incarnation: slot.incarnation,
            ctl: slot.ctl.clone(),
            workload: self.workload.clone(),
            recorder: self.recorder.clone(),
            rng: StdRng::seed_from_u64(
                self.seed
                    ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ slot.incarnation.wrapping_mul(0xD1B5_4A32_D192_ED03),
            ),
            calls: 0,
            epoch: self.epoch,
            periodic_first: index < 2 && slot.incarnation == 1,
            own_entry_first: index == 2 && slot.incarnation == 1,
            step_back_first: index == 3 && slot.incarnation == 1,
            adoption_first: index == 4 && slot.incarnation == 1,
            contender: None,
            clock: self.clock.clone(),
            stepping: self.stepping.clone(),
        };
        let ctl = slot.ctl.clone();
        let recorder = self.recorder.clone();
        slot.thread = Some(std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let client = mongodb::Client::with_options(options).expect("valid options");
                let locks = LockClient::new(client.database(DB).collection(COLLECTION));
                tokio::spawn(pause_while_acquiring(ctl.clone(), recorder.clone(), index));
                let exit = tokio::select! {
                    biased;
                    () = killed_while_acquiring(&ctl) => {
                        let now = Instant::now();
                        recorder.fault(FaultKind::KillAcquiring, Some(index), now, now);
                        // The members of a group it was taking die with it.
                        let mut partial: Vec<HolderLog> = std::mem::take(
                            &mut *ctl.partial.lock().unwrap_or_else(|e| e.into_inner()),
                        );
                        attach_acquiring_pauses(&ctl, &mut partial);
                        for mut log in partial {
                            log.killed_at = Some(now);
                            recorder.holder(log);
                        }
                        Exit::Killed
                    }
                    exit = worker.run(&locks) => exit,
                };
                if exit == Exit::Stopped {
                    locks.shutdown().await;
                }
                exit
            })
            // Dropping the runtime here ends the keeper and the driver's tasks, and every
            // task a dropped acquire spawned before it could run: a killed client renews
            // nothing, releases nothing and withdraws nothing.
        }));
    }

    /// True if `owner` (a status entry's owner label, or a value a leader proclaimed: its
    /// label, a slash, and more) names a client incarnation that is still running.
    pub fn is_live_owner(&self, owner: &str) -> bool {
        let label = owner.split('/').next().unwrap_or_default();
        self.slots.iter().any(|s| {
            label == owner_label(s.index, s.incarnation)
                && s.killed_at.is_none()
                && !s.is_finished()
        })
    }

    /// Asks client `index` to pause for `pause` at its next step.
    pub fn pause(&self, index: usize, pause: Duration) {
        let ms = pause.as_millis() as u64;
        self.slots[index].ctl.pause_ms.store(ms, Ordering::SeqCst);
    }

    /// Asks client `index` to die at its next step, without releasing.
    pub fn kill(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        slot.ctl.kill.store(true, Ordering::SeqCst);
        slot.killed_at = Some(Instant::now());
    }

    /// Asks client `index` to pause for `pause` while it is acquiring (at once, if it is).
    pub fn pause_acquiring(&self, index: usize, pause: Duration) {
        let ms = pause.as_millis() as u64;
        let ctl = &self.slots[index].ctl;
        ctl.pause_acquiring_ms.store(ms, Ordering::SeqCst);
    }

    /// Asks client `index` to die while it is acquiring (at once, if it is), with the
    /// acquire in flight.
    pub fn kill_acquiring(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        slot.ctl.kill_acquiring.store(true, Ordering::SeqCst);
        slot.killed_at = Some(Instant::now());
    }

    /// Asks client `index` to let go of one of its leases (the next one it lets go of) by the
    /// nemesis `kind` ([`FaultKind::is_let_go`]).
    pub fn let_go(&self, index: usize, kind: FaultKind) {
        *lock(&self.slots[index].ctl.let_go) = Some(kind);
    }

    /// Asks client `index` to drop its acquire future in flight, as `how` says.
    pub fn drop_acquire(&self, index: usize, how: DropAcquire) {
        *lock(&self.slots[index].ctl.drop_acquire) = Some(how);
    }

    /// Restarts killed clients whose thread has ended at least `after` ago.
    pub fn restart_dead(&mut self, after: Duration) {
        for index in 0..self.slots.len() {
            let slot = &mut self.slots[index];
            if slot.killed_at.is_none() && slot.ctl.crashed.swap(false, Ordering::SeqCst) {
                slot.killed_at = Some(Instant::now());
            }
            let slot = &self.slots[index];
            if slot.killed_at.is_some_and(|t| t.elapsed() >= after) && slot.is_finished() {
                if let Some(thread) = self.slots[index].thread.take() {
                    let _ = thread.join();
                }
                self.spawn(index);
            }
        }
    }

    /// Cancels pending pauses and kills.
    pub fn calm(&mut self) {
        for slot in &mut self.slots {
            lock(&slot.ctl.let_go).take();
            lock(&slot.ctl.drop_acquire).take();
            lock(&slot.ctl.hold_until).take();
            lock(&slot.ctl.hold_next).take();
            match lock(&slot.ctl.next_target).take() {
                Some(Target::ClockStep(_)) => {
                    let kind = ExtraFault::ClockStepInFlight;
                    self.recorder.extra(kind, slot.index, "not carried out");
                }
                Some(Target::StepBack) => {
                    let kind = ExtraFault::StepBackUnderHold;
                    self.recorder.extra(kind, slot.index, "not carried out");
                }
                Some(Target::Adoption) => {
                    let kind = ExtraFault::AdoptionRace;
                    self.recorder.extra(kind, slot.index, "not carried out");
                }
                _ => {}
            }
            slot.ctl
                .drop_on_ending_runtime
                .store(false, Ordering::SeqCst);
            if slot.ctl.drop_after_grant.swap(false, Ordering::SeqCst) {
                let kind = ExtraFault::DropAfterGrant;
                self.recorder.extra(kind, slot.index, "not carried out");
            }
            if lock(&slot.ctl.release_again).take().is_some() {
                let kind = ExtraFault::ReleaseFailsThenResume;
                self.recorder.extra(kind, slot.index, "not carried out");
            }
            if lock(&slot.ctl.multi_unknown).take().is_some() {
                let kind = ExtraFault::MultiUnknown;
                self.recorder.extra(kind, slot.index, "not carried out");
            }
            if lock(&slot.ctl.late_unlock).take().is_some() {
                let kind = ExtraFault::LateUnlock;
                self.recorder.extra(kind, slot.index, "not carried out");
            }
            slot.ctl.calmed.store(true, Ordering::SeqCst);
            slot.ctl.pause_ms.store(0, Ordering::SeqCst);
            slot.ctl.pause_acquiring_ms.store(0, Ordering::SeqCst);
            let kill = slot.ctl.kill.swap(false, Ordering::SeqCst);
            let kill_acquiring = slot.ctl.kill_acquiring.swap(false, Ordering::SeqCst);
            if (kill || kill_acquiring) && !slot.is_finished() {
                slot.killed_at = None;
            }
        }
    }

    /// Asks every client to stop and waits up to `limit` for all of them; returns the
    /// indices of the clients that did not stop in time.
    pub async fn stop(&mut self, limit: Duration) -> Vec<usize> {
        for slot in &self.slots {
            slot.ctl.stop.store(true, Ordering::SeqCst);
        }
        let until = Instant::now() + limit;
        while Instant::now() < until && !self.slots.iter().all(Slot::is_finished) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut late = Vec::new();
        for slot in &mut self.slots {
            // A twin holds for a few steps and gives up acquiring within the acquire timeout.
            let twins = std::mem::take(&mut *lock(&slot.ctl.twins));
            for twin in twins {
                while !twin.is_finished() && Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                if twin.is_finished() {
                    let _ = twin.join();
                }
            }
            if slot.is_finished() {
                if let Some(thread) = slot.thread.take() {
                    let _ = thread.join();
                }
            } else {
                late.push(slot.index);
            }
        }
        late
    }
}

/// The owner label a client incarnation's locks carry.
fn owner_label(index: usize, incarnation: u64) -> String {
    format!("client-{index}.{incarnation}")
}

/// Resolves when a kill was asked for while the client is acquiring.
async fn killed_while_acquiring(ctl: &ClientCtl) {
    loop {
        if ctl.acquiring.load(Ordering::SeqCst) && ctl.kill_acquiring.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs beside the worker in its runtime: when a pause is asked for while the worker is
/// acquiring, stops the thread (the acquire in flight, the driver and the keeper with it).
async fn pause_while_acquiring(ctl: Arc<ClientCtl>, recorder: Recorder, index: usize) {
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if !ctl.acquiring.load(Ordering::SeqCst) {
            continue;
        }
        let ms = ctl.pause_acquiring_ms.swap(0, Ordering::SeqCst);
        if ms == 0 {
            continue;
        }
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(ms));
        let end = Instant::now();
        ctl.acquiring_pauses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((start, end));
        recorder.fault(FaultKind::PauseAcquiring, Some(index), start, end);
    }
}

/// One client's worker.
struct Worker {
    /// Its driver client's options (a twin that resumes its lease connects with them).
    options: mongodb::options::ClientOptions,
    /// Its client's proxy, on which it arms the faults that must come with its own commands
    /// (a refused release, a multi-lock's attempts of unknown outcome and refused withdrawals).
    proxy: Arc<FaultProxy>,
    /// A resumable resource its previous incarnation held when it was killed: its first
    /// target.
    resume_first: Option<String>,
    /// The next pause comes with a twin that resumes its resumable lease.
    twin: bool,
    index: usize,
    incarnation: u64,
    ctl: Arc<ClientCtl>,
    workload: Workload,
    recorder: Recorder,
    rng: StdRng,
    /// Handle acquire calls, multi-lock acquires and campaigns made so far (each gets a lock
    /// id of its own).
    calls: u64,
    /// When the periods of the periodic jobs begin (the fleet's start).
    epoch: Instant,
    /// Its first pick is the periodic jobs (the first incarnations of clients 0 and 1: every
    /// run has hosts whose timers meet).
    periodic_first: bool,
    /// Its first pick is a round of [`Workload::own_entry`] (the first incarnation of client
    /// 2: every run has one).
    own_entry_first: bool,
    /// Its first pick is a step back under a hold ([`Workload::step_back`]; the first
    /// incarnation of client 3: every run has one, besides those the injector sends for).
    step_back_first: bool,
    /// Its first pick is an adoption race ([`Workload::adoption`]; the first incarnation of
    /// client 4: every run has one, besides those the injector sends for).
    adoption_first: bool,
    /// The slot's second client, for the scenarios that need another client of the slot
    /// (the `line` submodule), made at its first use.
    contender: Option<LockClient>,
    /// The server's clock, which the `step` submodule steps.
    clock: Clock,
    /// Set while a client of the fleet carries out a clock step (one at a time).
    stepping: Arc<AtomicBool>,
}

/// How one holding ended.
enum Held {
    Done,
    Killed,
}

impl Worker {
    async fn run(mut self, locks: &LockClient) -> Exit {
        let targets = self.workload.targets();
        let pair = self.workload.pair_target();
        let mut groups = 0_u64;
        let mut after_healing = 0_usize;
        loop {
            if self.ctl.stop.load(Ordering::SeqCst) {
                return Exit::Stopped;
            }
            // Once the faults are healed, every worker goes round the targets (starting at
            // its own index), so the liveness probe sees each of them asked for at once
            // rather than left to chance.
            let target = if let Some(resource) = self.resume_first.take() {
                Target::Resource(resource, Mode::Exclusive)
            } else if let Some(next) = lock(&self.ctl.next_target).take() {
                next
            } else if self.recorder.is_healed() {
                after_healing += 1;
                targets[(self.index + after_healing - 1) % targets.len()].clone()
            } else if self.workload.step_back.is_some() && std::mem::take(&mut self.step_back_first)
            {
                Target::StepBack
            } else if self.workload.adoption.is_some() && std::mem::take(&mut self.adoption_first) {
                Target::Adoption
            } else if self.workload.own_entry.is_some()
                && (std::mem::take(&mut self.own_entry_first)
                    || self.rng.random_bool(self.workload.own_entry_share))
            {
                Target::OwnEntry
            } else if self.workload.periodic.is_some()
                && (std::mem::take(&mut self.periodic_first)
                    || self.rng.random_bool(self.workload.periodic_share))
            {
                Target::Periodic
            } else if let Some(pair) = pair
                .as_ref()
                .filter(|_| self.rng.random_bool(self.workload.pair_share))
            {
                pair.clone()
            } else {
                targets[self.rng.random_range(0..targets.len())].clone()
            };
            // A lock id belongs to one live holder: while a twin of this slot holds the
            // resumable lease (the `resume` submodule), the slot does not ask for it. It would
            // resume the twin's lease, and its release, as early as a nemesis makes it, would
            // free the resource under the twin, which believes until its next renewal.
            if let Target::Resource(resource, _) = &target
                && self.workload.is_resumable(resource)
                && self.twin_running()
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            self.recorder.asked(target.resources());
            let held = match target {
                Target::Resource(resource, mode) => self.one(locks, resource, mode).await,
                Target::Group(pool) => {
                    groups += 1;
                    self.group(locks, &pool, groups).await
                }
                Target::Pair(pool) => self.pair(locks, &pool).await,
                Target::Multi(pool) => self.multi(locks, &pool).await,
                Target::Election(resource) => self.lead(locks, resource).await,
                Target::Periodic => self.periodic(locks).await,
                Target::OwnEntry => self.own_entry_line(locks).await,
                Target::ClockStep(way) => self.clock_step(locks, way).await,
                Target::StepBack => self.step_back().await,
                Target::Adoption => self.adoption_race().await,
            };
            if let Held::Killed = held {
                return Exit::Killed;
            }
            let idle = self.rng.random_range(0..30);
            tokio::time::sleep(Duration::from_millis(idle)).await;
        }
    }

    /// Whether a twin this slot started (the `resume` submodule) still runs.
    fn twin_running(&self) -> bool {
        lock(&self.ctl.twins).iter().any(|twin| !twin.is_finished())
    }

    /// Stops the whole client (this thread, hence its runtime) if a pause was asked for;
    /// returns the pause's start and end.
    fn take_pause(&self) -> Option<(Instant, Instant)> {
        let ms = self.ctl.pause_ms.swap(0, Ordering::SeqCst);
        if ms == 0 {
            return None;
        }
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(ms));
        let end = Instant::now();
        self.recorder
            .fault(FaultKind::Pause, Some(self.index), start, end);
        Some((start, end))
    }

    /// At a step of holders under `guards` (one log each, in the same order): carries out a
    /// pause asked for ([`Worker::take_pause`]), recorded in every log with the local
    /// deadline each had before it and whether its guard was lost on resuming; then a kill
    /// asked for, recorded in every log. True if the client is to die now (the caller
    /// forgets what it holds).
    fn pause_or_kill(&self, guards: &[&LockGuard], logs: &mut [HolderLog]) -> bool {
        let before: Vec<Instant> = (logs.iter())
            .map(|l| l.max_deadline.unwrap_or_else(Instant::now))
            .collect();
        if let Some((start, end)) = self.take_pause() {
            for ((log, guard), deadline_before) in logs.iter_mut().zip(guards).zip(before) {
                log.pauses.push(PauseLog {
                    start,
                    end,
                    deadline_before,
                    lost_on_resume: guard.is_lost(),
                });
            }
        }
        self.killed(logs)
    }

    /// Records a kill asked for in every log; true if the client is to die now.
    fn killed(&self, logs: &mut [HolderLog]) -> bool {
        if !self.ctl.kill.swap(false, Ordering::SeqCst) {
            return false;
        }
        let now = Instant::now();
        for log in logs.iter_mut() {
            log.killed_at = Some(now);
        }
        true
    }

    /// One write (a reader: one read) of `log`'s holder to the guarded record.
    /// The log of an exclusive holder of `guard`, granted to a call invoked at `invoked`, with
    /// one write made under it unless the guard already says it is lost.
    fn log_exclusive_and_write(&mut self, invoked: Instant, guard: &LockGuard) -> HolderLog {
        let id = self.recorder.next_id();
        let mut log = HolderLog::new(id, self.index, Mode::Exclusive, invoked, guard);
        if !log.check_lost(guard) {
            self.write(&mut log);
        }
        log
    }

    fn write(&mut self, log: &mut HolderLog) {
        let value = self.rng.random::<u64>();
        let (at, accepted) =
            self.recorder
                .record
                .write(&log.resource, log.mode, log.access, log.id, log.token);
        log.writes.push(WriteLog {
            at,
            token: log.token,
            value,
            accepted,
        });
    }

    /// When a step of work that starts now ends.
    fn step_end(&mut self) -> Instant {
        let length = self
            .rng
            .random_range(self.workload.step_ms.0..=self.workload.step_ms.1);
        Instant::now() + Duration::from_millis(length)
    }
}
