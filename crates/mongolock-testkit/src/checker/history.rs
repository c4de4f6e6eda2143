//! The history of a run: what every holder did and saw, what operators did, and what the
//! guarded record accepted, all on one process's monotonic clock ([`Instant`]).
//!
//! Every client runs in one process, so the instants of all holders are comparable. Each
//! holder keeps its own [`HolderLog`]; the checker ([`super::check`]) reads the finished
//! [`History`]. Everything here is plain data: whoever drives the locks fills it in (the
//! harness from its guards, `mongolock demo` from its event log).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How a resource is locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// A mutex: one holder at a time.
    Exclusive,
    /// A semaphore with this many permits.
    Shared {
        /// The number of permits.
        permits: u32,
    },
    /// A reader-writer lock (`LockClient::rwlock`): many readers or one writer.
    ReadWrite,
    /// One of a pool of resources taken in groups under one lock id with the low-level API
    /// (`xlock`, `renew` and `unlock` by lock id): exclusive, renewed by its holder.
    Group,
    /// One of a pool of resources taken several at a time with `LockClient::multi` (all
    /// or nothing, one lock id for the set): each member is an exclusive lease of its own.
    Multi,
    /// An election (`LockClient::election`): its leader holds the resource exclusively,
    /// and the grant's fencing token is the leader's term.
    Election,
}

impl Mode {
    /// True if every holder of the resource holds it exclusively (a mutex, a group or
    /// multi-lock member, a leader).
    pub fn is_exclusive(self) -> bool {
        matches!(
            self,
            Mode::Exclusive | Mode::Group | Mode::Multi | Mode::Election
        )
    }
}

/// What one holder holds: the whole resource, or a share of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// A mutex holder, a writer, a group member.
    Exclusive,
    /// A semaphore permit, a reader.
    Shared,
}

/// The role of a holder, as counted in the report: which handle (or API) made its grant,
/// and with what access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// `mutex(..)`.
    Mutex,
    /// `semaphore(..)`.
    Semaphore,
    /// `rwlock(..).read_timeout(..)`.
    Reader,
    /// `rwlock(..).write_timeout(..)`.
    Writer,
    /// `xlock` under a group's lock id.
    Group,
    /// A member of a set taken with `multi(..)`.
    Multi,
    /// A leader of an election (`election(..).campaign_timeout(..)`).
    Leader,
}

impl Role {
    /// Every role, in report order.
    pub const ALL: [Role; 7] = [
        Role::Mutex,
        Role::Semaphore,
        Role::Reader,
        Role::Writer,
        Role::Group,
        Role::Multi,
        Role::Leader,
    ];

    /// The role of a holder with `access` on a resource locked as `mode`.
    pub fn of(mode: Mode, access: Access) -> Self {
        match (mode, access) {
            (Mode::Exclusive, _) => Role::Mutex,
            (Mode::Shared { .. }, _) => Role::Semaphore,
            (Mode::ReadWrite, Access::Shared) => Role::Reader,
            (Mode::ReadWrite, Access::Exclusive) => Role::Writer,
            (Mode::Group, _) => Role::Group,
            (Mode::Multi, _) => Role::Multi,
            (Mode::Election, _) => Role::Leader,
        }
    }

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Role::Mutex => "mutex",
            Role::Semaphore => "semaphore",
            Role::Reader => "rwlock readers",
            Role::Writer => "rwlock writers",
            Role::Group => "lock groups (low-level)",
            Role::Multi => "multi-lock members",
            Role::Leader => "election leaders",
        }
    }
}

/// How a holder learnt that its lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossKind {
    /// The local deadline passed.
    Deadline,
    /// The server said the lease is gone.
    Revoked,
    /// Anything else the library reports (released, or a reason added later).
    Other,
}

/// One write a holder made to the guarded record.
#[derive(Debug, Clone, Copy)]
pub struct WriteLog {
    /// When the record took it.
    pub at: Instant,
    /// The fencing token it carried.
    pub token: i64,
    /// The value written.
    pub value: u64,
    /// Whether the record accepted it.
    pub accepted: bool,
}

/// What a holder's `release()` call returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseResult {
    /// `Ok(())`: the library says the server still held the grant, and released it.
    Ok,
    /// `ErrorKind::LeaseLost`, with its reason: the lease was lost before the call, or the
    /// server no longer held the grant (revoked).
    Lost(LossKind),
    /// Another error: the release could not be sent, or its outcome is unknown.
    Failed,
}

impl ReleaseResult {
    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            ReleaseResult::Ok => "Ok",
            ReleaseResult::Lost(LossKind::Revoked) => "LeaseLost(revoked)",
            ReleaseResult::Lost(LossKind::Deadline) => "LeaseLost(deadline)",
            ReleaseResult::Lost(LossKind::Other) => "LeaseLost(other)",
            ReleaseResult::Failed => "error",
        }
    }
}

/// How a holder let go of its lease (its belief ends then: see [`HolderLog::released_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LetGo {
    /// It awaited `release()` to the end (its result is in [`HolderLog::release`]).
    Released,
    /// Its `release()` future was raced against a short timer and dropped before it
    /// completed.
    ReleaseCancelled,
    /// It dropped the guard in its runtime: a background task releases it.
    Dropped,
    /// It moved the guard to a thread without a tokio runtime and dropped it there: nothing
    /// releases it, and only the TTL may end it.
    DroppedWithoutRuntime,
    /// It dropped the guard inside a short-lived runtime on another thread, which then ended:
    /// the background release the drop spawned never ran. The release is owed: the client's
    /// keeper, or its next attempt of the lock id on the resource, may still send it.
    DroppedOnEndingRuntime,
    /// It unlocked its lock id (a lock group on the low-level API).
    Unlocked,
    /// It stopped believing and did nothing more: a broken holder of a negative control, or
    /// an incarnation whose lease another client resumed, asked to forget its guard.
    Abandoned,
}

/// A stretch during which the holder's whole client stopped (a process pause).
#[derive(Debug, Clone, Copy)]
pub struct PauseLog {
    /// When the client stopped.
    pub start: Instant,
    /// When it ran again.
    pub end: Instant,
    /// The holder's local deadline when the pause began.
    pub deadline_before: Instant,
    /// `guard.is_lost()` right after the pause.
    pub lost_on_resume: bool,
}

/// Everything one holder (one acquired guard) did and saw.
#[derive(Debug, Clone)]
pub struct HolderLog {
    /// Unique in the run.
    pub id: u64,
    /// The client slot it ran in.
    pub client: usize,
    /// A fake holder of a negative control (its log may lie on purpose).
    pub fake: bool,
    /// The locked resource.
    pub resource: String,
    /// How the resource is locked.
    pub mode: Mode,
    /// What this holder holds (a reader's share, a writer's whole resource...).
    pub access: Access,
    /// The lock id it held the lock with.
    pub lock_id: String,
    /// For a member of a lock group or of a multi-lock: the set's number (shared by its
    /// members).
    pub group: Option<u64>,
    /// When the acquire call that granted it began.
    pub invoked_at: Instant,
    /// When the attempt that was granted was sent: the server granted the lock between this
    /// and `granted_at`.
    pub attempt_sent_at: Instant,
    /// When the grant reached the holder: its belief starts here.
    pub granted_at: Instant,
    /// When the server made the grant, on this process's clock, where the server's clock can
    /// be read on it (an emulator in this process, whose clock is the wall clock, never
    /// moved): the loss check (3) then compares a loss notice with this, earlier than
    /// [`HolderLog::granted_at`], rather than with the grant's arrival. `None` (the harness,
    /// whose emulator's clock jumps): the arrival counts.
    pub server_granted_at: Option<Instant>,
    /// The fencing token of the grant (as the holder uses it).
    pub token: i64,
    /// The lease's TTL, if known.
    pub ttl: Option<Duration>,
    /// The latest local deadline seen while the lease was held (`now + time_left()`).
    pub max_deadline: Option<Instant>,
    /// Writes to the guarded record.
    pub writes: Vec<WriteLog>,
    /// The first time the holder learnt of the loss (`lost()` resolved, or `is_lost()` was
    /// true at a check), with how.
    pub notified: Option<(Instant, LossKind)>,
    /// Pauses of the holder's client while it held.
    pub pauses: Vec<PauseLog>,
    /// When the holder let go of the lease by its own choice: it called release, or dropped
    /// the guard (how: [`HolderLog::let_go`]).
    pub released_at: Option<Instant>,
    /// How it let go.
    pub let_go: Option<LetGo>,
    /// What its release call returned, if it awaited one to the end.
    pub release: Option<ReleaseResult>,
    /// When the holder's client was killed while holding (no release).
    pub killed_at: Option<Instant>,
    /// For fake holders: the end of their belief, as they (wrongly) see it.
    pub believed_until: Option<Instant>,
    /// The lease's lock-delay, as the grant reports it (`Holder::lock_delay`): after a lease
    /// that ends without a release, nobody is granted the resource for that long (judged by
    /// [`Check::LockDelay`](super::check::Check::LockDelay)).
    pub lock_delay: Option<Duration>,
    /// The grant's server time (`Holder::created_at`, ms since the epoch); for a resumed
    /// lease, the grant it resumed.
    pub server_granted_ms: Option<i64>,
    /// The lease's end by the server's clock as the grant reported it (`Holder::expires_at`,
    /// ms since the epoch): renewals only move it later.
    pub server_expires_ms: Option<i64>,
    /// For a lease resumed under its lock id by another client (after a kill, or beside a
    /// paused incarnation): the log of the incarnation it continues, as the harness saw it
    /// (the checker finds continuations by resource, lock id and token, not by this).
    pub resumed_from: Option<u64>,
    /// When the log was handed to the history, if the recorder says (the harness's stamps
    /// it): every call of its holder had returned by then. A release refused as lost told
    /// its holder when it returned, which comes between [`HolderLog::released_at`] and this.
    pub logged_at: Option<Instant>,
}

impl HolderLog {
    /// A log, with id `id`, of an exclusive grant of `token` on `resource` that reached its
    /// holder now, with nothing done or seen yet: callers set what else they know.
    pub fn granted(id: u64, client: usize, mode: Mode, resource: &str, token: i64) -> Self {
        let now = Instant::now();
        HolderLog {
            id,
            client,
            fake: false,
            resource: resource.to_owned(),
            mode,
            access: Access::Exclusive,
            lock_id: String::new(),
            group: None,
            invoked_at: now,
            attempt_sent_at: now,
            granted_at: now,
            server_granted_at: None,
            token,
            ttl: None,
            max_deadline: None,
            writes: Vec::new(),
            notified: None,
            pauses: Vec::new(),
            released_at: None,
            let_go: None,
            release: None,
            killed_at: None,
            believed_until: None,
            lock_delay: None,
            server_granted_ms: None,
            server_expires_ms: None,
            resumed_from: None,
            logged_at: None,
        }
    }
    /// Records `deadline`, the holder's local deadline as seen now (now plus the guard's
    /// time left), if it is the latest yet: call it only while the lease is held.
    pub fn observe_deadline(&mut self, deadline: Instant) {
        if self.max_deadline.is_none_or(|d| d < deadline) {
            self.max_deadline = Some(deadline);
        }
    }

    /// Records the first notice of the loss (later ones change nothing).
    pub fn notice(&mut self, at: Instant, kind: LossKind) {
        if self.notified.is_none() {
            self.notified = Some((at, kind));
        }
    }

    /// Records that the holder lets go now, in the way `how`: its belief ends.
    pub fn lets_go(&mut self, how: LetGo) {
        self.released_at = Some(Instant::now());
        self.let_go = Some(how);
    }

    /// When the lease was lost as far as the holder could know: its notice, or the local
    /// deadline it passed while its client was paused (its `is_lost()` turned true then,
    /// even though no task ran).
    pub fn lost_at(&self) -> Option<Instant> {
        let paused = self
            .pauses
            .iter()
            .filter(|p| p.end > p.deadline_before)
            .map(|p| p.deadline_before.max(p.start))
            .min();
        match (self.notified.map(|n| n.0), paused) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the holder stopped believing it held: the first of its release call, its loss,
    /// its death; for a fake holder, whatever it says.
    pub fn belief_end(&self, run_end: Instant) -> Instant {
        if let Some(until) = self.believed_until {
            return until;
        }
        [self.released_at, self.lost_at(), self.killed_at]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(run_end)
    }

    /// The holder's role (which handle, what access).
    pub fn role(&self) -> Role {
        Role::of(self.mode, self.access)
    }

    /// True if `later` continues this holder's lease: the same lease resumed under the same
    /// lock id (same resource and token) by another holder log, an incarnation after it.
    pub fn continued_by(&self, later: &HolderLog) -> bool {
        self.id != later.id
            && self.resource == later.resource
            && !self.lock_id.is_empty()
            && self.lock_id == later.lock_id
            && self.token == later.token
    }

    /// True if the holder may have sent a release (or an unlock) by its own choice before
    /// `t`: a release awaited, dropped mid-flight or left to a background task (a guard
    /// dropped without a runtime too: the library hands its release to the client's keeper,
    /// which runs it). Its entry may have been removed from then on, lock-delay or not. Only
    /// a holder that forgot its guard, or died, surely sent none.
    pub fn may_have_released_before(&self, t: Instant) -> bool {
        let sends = matches!(
            self.let_go,
            Some(
                LetGo::Released
                    | LetGo::ReleaseCancelled
                    | LetGo::Dropped
                    | LetGo::DroppedWithoutRuntime
                    | LetGo::DroppedOnEndingRuntime
                    | LetGo::Unlocked
            )
        );
        sends && self.released_at.is_some_and(|r| r < t)
    }

    /// True if the lease ended without the holder's release: it was lost first.
    pub fn ended_by_loss(&self) -> bool {
        match (self.lost_at(), self.released_at) {
            (Some(lost), Some(released)) => lost <= released,
            (Some(_), None) => true,
            _ => false,
        }
    }
}

/// What an operator (or the harness playing one) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpKind {
    /// `force_release(resource)` from the observer.
    ForceRelease(String),
    /// `purge()` from the observer.
    Purge,
    /// The emulator's clock jumped forward by this much.
    ClockJump(Duration),
    /// The emulator's clock stepped by `by_ms` (forward if positive, back if negative) while
    /// the reply to a grant was held back on its way to the holder `judged`, whose client
    /// was shown the step by another reply before it read the grant's. A step forward ends
    /// other leases without their holders' consent, as a [`OpKind::ClockJump`] does, and
    /// excuses them likewise; the library promises that a step a client was shown shortens
    /// that client's deadlines at once, so the holder `judged` is not excused. A step back
    /// ends no lease and excuses nobody.
    ClockStep {
        /// The step, in ms: positive forward, negative back.
        by_ms: i64,
        /// The holder whose grant's reply was held back past the step, if it was granted.
        judged: Option<u64>,
    },
}

impl OpKind {
    /// True if the action may end the lease of `holder` on `resource` without its holder's
    /// consent (a force-release of the resource, a forward jump or step of the server's
    /// clock that the holder was not shown), whatever else it excuses.
    pub fn ends_leases_of(&self, resource: &str, holder: u64) -> bool {
        match self {
            OpKind::ForceRelease(r) => r == resource,
            OpKind::Purge => false,
            OpKind::ClockJump(_) => true,
            OpKind::ClockStep { by_ms, judged } => *by_ms > 0 && *judged != Some(holder),
        }
    }
}

/// An operator action, from its call to its reply.
#[derive(Debug, Clone)]
pub struct OpEvent {
    /// What was done.
    pub kind: OpKind,
    /// When the call began.
    pub start: Instant,
    /// When it returned.
    pub end: Instant,
}

/// One write (or, for a reader, one read) as the guarded record saw it.
#[derive(Debug, Clone, Copy)]
pub struct RecordEntry {
    /// When the record took it.
    pub at: Instant,
    /// The writing holder.
    pub holder: u64,
    /// Its token.
    pub token: i64,
    /// A write (exclusive) or a reader's read (shared).
    pub access: Access,
    /// Whether the record accepted it.
    pub accepted: bool,
}

/// The kinds of fault a run may inject, as counted in the report. The checker names them
/// only to count them and to tell the nemeses (faults a client carries out on its own
/// release or acquire) from the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// Added latency on one client's proxy, for a while.
    Latency,
    /// One client's proxy blackholed for longer than the TTL, then healed.
    Partition,
    /// One client's connections reset.
    Reset,
    /// One client's replies lost for a while: its commands run on the server (a grant or a
    /// renewal is committed) and it sees its connection reset, so the outcome is unknown.
    LostReplies,
    /// A fail point: step-down or shutdown error codes for one client.
    StepDownError,
    /// A fail point: the connection closed instead of a reply, for one client.
    CloseConnection,
    /// A fail point: one client's commands blocked for longer than the TTL.
    BlockConnection,
    /// A fail point: a write concern error after the write, for one client.
    WriteConcernError,
    /// One client paused (every task stopped) for longer than the TTL.
    Pause,
    /// One client killed without releasing (restarted later).
    Kill,
    /// One client paused for longer than the TTL while it was acquiring (waiting).
    PauseAcquiring,
    /// One client killed while it was acquiring, the acquire in flight.
    KillAcquiring,
    /// An operator's `force_release` of a resource.
    ForceRelease,
    /// An operator's `purge`.
    Purge,
    /// The emulator's clock jumped forward by more than the TTL.
    ClockJump,
    /// A holder drops one guard inside a short-lived runtime on another thread, which then
    /// ends: the background release the drop spawned never runs. The same client then asks
    /// for the resource again under the same lock id.
    DropOnEndingRuntime,
    /// A holder moves one guard to a plain thread (no tokio runtime) and drops it there:
    /// nothing releases it.
    DropWithoutRuntime,
    /// A holder's `release()` future is dropped mid-flight: polled once (the release has
    /// begun, nothing is sent yet), or raced against a very short timer (by then it is
    /// usually sent, its reply never awaited).
    ReleaseCancelled,
    /// A holder drops one guard (a background release) while its client's lock commands
    /// fail with `closeConnection` for a few commands: the release never lands.
    ReleaseBlip,
    /// A holder awaits a release while its client is cut off (for 0.3–1.5 × TTL).
    ReleaseUnderPartition,
    /// A holder awaits a release while its client's replies are lost (the release is
    /// applied, its reply never arrives).
    ReleaseUnderLostReplies,
    /// An acquire future is dropped mid-flight (in the runtime: withdrawn in the
    /// background; or on a thread without a runtime: never withdrawn), sometimes with
    /// latency on its client so that a grant is on its way back.
    AcquireDropped,
    /// An operator's `force_release` of one lease of a client that has several (a pair, or
    /// a lease and one it let go of by a nemesis); the holder then holds on for TTL + 0.5 s
    /// unless it notices.
    ForceReleaseOne,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 23] = [
        FaultKind::Latency,
        FaultKind::Partition,
        FaultKind::Reset,
        FaultKind::LostReplies,
        FaultKind::StepDownError,
        FaultKind::CloseConnection,
        FaultKind::BlockConnection,
        FaultKind::WriteConcernError,
        FaultKind::Pause,
        FaultKind::Kill,
        FaultKind::PauseAcquiring,
        FaultKind::KillAcquiring,
        FaultKind::ForceRelease,
        FaultKind::Purge,
        FaultKind::ClockJump,
        FaultKind::DropWithoutRuntime,
        FaultKind::DropOnEndingRuntime,
        FaultKind::ReleaseCancelled,
        FaultKind::ReleaseBlip,
        FaultKind::ReleaseUnderPartition,
        FaultKind::ReleaseUnderLostReplies,
        FaultKind::AcquireDropped,
        FaultKind::ForceReleaseOne,
    ];

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Latency => "proxy latency",
            FaultKind::Partition => "partition > TTL",
            FaultKind::Reset => "connection reset",
            FaultKind::LostReplies => "replies lost (write applied)",
            FaultKind::StepDownError => "step-down/shutdown error",
            FaultKind::CloseConnection => "closeConnection",
            FaultKind::BlockConnection => "blockConnection > TTL",
            FaultKind::WriteConcernError => "writeConcernError",
            FaultKind::Pause => "client pause > TTL",
            FaultKind::Kill => "client killed",
            FaultKind::PauseAcquiring => "client pause > TTL while acquiring",
            FaultKind::KillAcquiring => "client killed while acquiring",
            FaultKind::ForceRelease => "operator force_release",
            FaultKind::Purge => "operator purge",
            FaultKind::ClockJump => "server clock jump",
            FaultKind::DropWithoutRuntime => "guard dropped without a runtime",
            FaultKind::DropOnEndingRuntime => "guard dropped on a runtime that ends",
            FaultKind::ReleaseCancelled => "release future dropped mid-flight",
            FaultKind::ReleaseBlip => "background release in a network blip",
            FaultKind::ReleaseUnderPartition => "release under partition",
            FaultKind::ReleaseUnderLostReplies => "release under lost replies",
            FaultKind::AcquireDropped => "acquire future dropped mid-flight",
            FaultKind::ForceReleaseOne => "operator force_release of one of several",
        }
    }

    /// True for the nemeses a client carries out on its own release or acquire (and the
    /// operator's force-release of one lease of several): each is logged with how it ended
    /// ([`NemesisLog`]).
    pub fn is_nemesis(self) -> bool {
        self.is_let_go() || matches!(self, FaultKind::AcquireDropped | FaultKind::ForceReleaseOne)
    }

    /// True for the nemeses a holder carries out when it lets go of a lease: a holder
    /// through a handle, or a recipe holder (a multi-lock's set, a leadership), which lets
    /// go of the whole recipe that way (every kind applies to a recipe: each has one
    /// release, which can be awaited, dropped mid-flight or under a fault, and one drop).
    pub fn is_let_go(self) -> bool {
        matches!(
            self,
            FaultKind::DropWithoutRuntime
                | FaultKind::DropOnEndingRuntime
                | FaultKind::ReleaseCancelled
                | FaultKind::ReleaseBlip
                | FaultKind::ReleaseUnderPartition
                | FaultKind::ReleaseUnderLostReplies
        )
    }
}

/// A fault aimed at one client (or at every client), from its start to its end.
#[derive(Debug, Clone, Copy)]
pub struct FaultEvent {
    /// What it was.
    pub kind: FaultKind,
    /// The client it hit (`None`: the server, every client).
    pub client: Option<usize>,
    /// When it began.
    pub start: Instant,
    /// When it was healed (or, for a fail point, replaced or turned off).
    pub end: Instant,
}

/// How a nemesis aimed at a holder's release or at an acquire ended, as its client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The holder awaited its release to the end, which returned this.
    Released(ReleaseResult),
    /// The release future was dropped before it completed.
    ReleaseCancelled,
    /// The guard was dropped in the runtime (released in the background).
    Dropped,
    /// The guard was dropped on a thread without a tokio runtime.
    DroppedWithoutRuntime,
    /// The guard was dropped inside a runtime that then ended, its background release unrun.
    DroppedOnEndingRuntime,
    /// The acquire future was dropped in the runtime (its attempt withdrawn in the
    /// background).
    AcquireDropped,
    /// The acquire future was dropped on a thread without a tokio runtime (nothing
    /// withdraws its attempt).
    AcquireDroppedWithoutRuntime,
    /// The acquire call returned before the drop came: nothing was dropped.
    AcquireReturnedFirst,
    /// An operator force-released one lease of a client that had `leases` leases (believed,
    /// or let go of by a nemesis shortly before); `removed` locks went.
    ForceReleased {
        /// What `force_release` returned.
        removed: u64,
        /// The leases the client had then.
        leases: usize,
    },
    /// The request was not carried out (the client stopped holding or acquiring first).
    NotCarriedOut,
}

impl Ending {
    /// True if the nemesis took effect (an acquire that returned before its drop, or a
    /// request the client never got to, did not).
    pub fn carried_out(self) -> bool {
        !matches!(self, Ending::AcquireReturnedFirst | Ending::NotCarriedOut)
    }

    /// The name in the report.
    pub fn name(self) -> String {
        match self {
            Ending::Released(r) => format!("release returned {}", r.name()),
            Ending::ReleaseCancelled => "release dropped mid-flight".into(),
            Ending::Dropped => "guard dropped (background release)".into(),
            Ending::DroppedWithoutRuntime => "guard dropped without a runtime".into(),
            Ending::DroppedOnEndingRuntime => "guard dropped on a runtime that ended".into(),
            Ending::AcquireDropped => "acquire dropped (withdrawn in the background)".into(),
            Ending::AcquireDroppedWithoutRuntime => "acquire dropped without a runtime".into(),
            Ending::AcquireReturnedFirst => "acquire returned first".into(),
            Ending::ForceReleased { leases, .. } => {
                format!("force-released one of {leases} leases")
            }
            Ending::NotCarriedOut => "not carried out".into(),
        }
    }
}

/// One nemesis carried out by a client (or by the operator on a client's lease), with how it
/// ended.
#[derive(Debug, Clone)]
pub struct NemesisLog {
    /// Which nemesis.
    pub kind: FaultKind,
    /// The client it hit.
    pub client: usize,
    /// When it was carried out.
    pub at: Instant,
    /// The holder it hit, if a grant had reached one.
    pub holder: Option<u64>,
    /// The resource.
    pub resource: Option<String>,
    /// How it ended.
    pub ended: Ending,
}

/// One acquire call through a handle, under the lock id the harness gave it (unique in the
/// run), whatever became of it.
#[derive(Debug, Clone)]
pub struct AcquireCall {
    /// The client that made it.
    pub client: usize,
    /// The resource.
    pub resource: String,
    /// Its lock id.
    pub lock_id: String,
    /// When it began.
    pub invoked_at: Instant,
    /// When it returned, or its future was dropped: nothing it sends later but the
    /// withdrawal of its attempt.
    pub ended_at: Instant,
    /// Whether it returned a guard.
    pub granted: bool,
    /// How long the call may wait at most, if it waits (`acquire_timeout` and the like): it
    /// must return within that (judged by
    /// [`Check::CallTimeout`](super::check::Check::CallTimeout)). `None`: not judged.
    pub timeout: Option<Duration>,
}

/// One wait of a reader-writer lock's writer (`write_timeout`), granted or not.
#[derive(Debug, Clone)]
pub struct WriterWait {
    /// The writer's client.
    pub client: usize,
    /// The resource.
    pub resource: String,
    /// When the call began.
    pub invoked_at: Instant,
    /// When it would give up: the call's start plus its timeout. Its announcement is not
    /// withdrawn before.
    pub gives_up_at: Instant,
    /// When the grant reached it, if it was granted.
    pub granted_at: Option<Instant>,
    /// When the call returned.
    pub returned_at: Instant,
}

/// One campaign in an election, recorded when the call begins (so that a client killed
/// while campaigning leaves it too): the value it advertises and its lock id, which an
/// observer may see lead even if the campaigner never heard of its grant.
#[derive(Debug, Clone)]
pub struct CampaignLog {
    /// The campaigner's client.
    pub client: usize,
    /// The election (its resource).
    pub resource: String,
    /// The lock id it campaigns under (unique in the run).
    pub lock_id: String,
    /// The value it advertises once elected (before any proclaim).
    pub value: String,
    /// When the call began.
    pub invoked_at: Instant,
    /// When it gives up at the latest (its start plus its timeout): no grant of it is made
    /// later.
    pub gives_up_at: Instant,
}

/// What a leader's `Leadership::proclaim` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProclaimOutcome {
    /// `Ok(())`: the server set the value while it held the leader's grant live.
    Ok,
    /// `ErrorKind::LeaseLost`: refused, leadership lost (before the call, or the server no
    /// longer held the grant).
    Lost,
    /// Another error: the value may or may not have been set.
    Failed,
    /// The call was raced against a timer and dropped before it returned: the value may
    /// or may not have been set (it is *in flight*).
    Dropped,
}

impl ProclaimOutcome {
    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            ProclaimOutcome::Ok => "Ok",
            ProclaimOutcome::Lost => "LeaseLost",
            ProclaimOutcome::Failed => "error",
            ProclaimOutcome::Dropped => "dropped in flight",
        }
    }
}

/// One `Leadership::proclaim` call by a leader.
#[derive(Debug, Clone)]
pub struct ProclaimLog {
    /// The leader's client.
    pub client: usize,
    /// The leader's holder log ([`HolderLog::id`]).
    pub holder: u64,
    /// The election.
    pub resource: String,
    /// The leader's term.
    pub term: i64,
    /// The value proclaimed (unique in the run).
    pub value: String,
    /// When the call began.
    pub invoked_at: Instant,
    /// When it returned (or was dropped).
    pub returned_at: Instant,
    /// What it returned.
    pub outcome: ProclaimOutcome,
    /// `Leadership::is_lost()` right after it returned.
    pub lost_after: bool,
}

/// Where an observation of an election's leader came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// An item of `Election::observe()`.
    Stream,
    /// A call of `Election::leader()`.
    Poll,
}

/// A leader as an observer reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenLeader {
    /// Its term.
    pub term: i64,
    /// The value it advertised.
    pub value: String,
    /// Its lock id.
    pub lock_id: String,
}

/// One leader (or nobody) an observer reported. The read behind it was made between
/// [`Observation::from`] and [`Observation::at`]: for a poll, its call; for a stream item,
/// from the receipt of the item before it (the stream reads only while it is polled for
/// the next item) or the stream's opening, to the item's receipt.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The observer (streams and pollers are numbered apart: see [`Observation::source`]).
    pub observer: usize,
    /// A stream item or a poll.
    pub source: Source,
    /// The election.
    pub resource: String,
    /// The read was made after this.
    pub from: Instant,
    /// And before this (when the item was received, or the call returned).
    pub at: Instant,
    /// The leader, or `None`: nobody led.
    pub leader: Option<SeenLeader>,
    /// How the read was served, where the observer knows (the member that answered, the
    /// snapshot, the rows): printed with a report on the read.
    pub served: Option<String>,
}

/// A fresh `Election::leader()` read at the end of a run, once the election was quiet, with
/// the last item each observer's stream had yielded by then.
#[derive(Debug, Clone)]
pub struct FinalRead {
    /// The election.
    pub resource: String,
    /// When the read was made (its call began).
    pub from: Instant,
    /// When it returned.
    pub at: Instant,
    /// What it returned.
    pub leader: Option<SeenLeader>,
    /// Each stream observer's last item received before [`FinalRead::from`], by observer
    /// (`None`: nobody led; an observer that yielded nothing is left out).
    pub observers: Vec<(usize, Option<SeenLeader>)>,
}

/// A finished history, ready for the checker.
#[derive(Debug, Clone)]
pub struct History {
    /// Every holder's log.
    pub holders: Vec<HolderLog>,
    /// Operator actions.
    pub ops: Vec<OpEvent>,
    /// The guarded record's writes, by resource.
    pub record: HashMap<String, Vec<RecordEntry>>,
    /// The mode of each resource.
    pub modes: HashMap<String, Mode>,
    /// Acquire calls made.
    pub attempts: u64,
    /// Acquire calls that gave up waiting.
    pub timeouts: u64,
    /// Acquire calls that failed with an error.
    pub errors: u64,
    /// Problems found by the liveness probe at the end of the run.
    pub liveness: Vec<String>,
    /// Faults aimed at clients or the server, as carried out.
    pub faults: Vec<FaultEvent>,
    /// Waits of reader-writer writers.
    pub writer_waits: Vec<WriterWait>,
    /// When the faults stopped (everything healed).
    pub healed_at: Option<Instant>,
    /// The nemeses carried out on releases, acquires and one lease of several.
    pub nemeses: Vec<NemesisLog>,
    /// The acquire calls made through handles.
    pub acquire_calls: Vec<AcquireCall>,
    /// Readings of the server's clock (ms since the epoch) against ours, taken at the start,
    /// now and then, and right after every jump of the server's clock: see
    /// [`History::server_ms`].
    pub server_clock: Vec<(Instant, i64)>,
    /// On a replica set: from each of our instants on, how far the clock of the member
    /// serving as primary read ahead of (negative: behind) the set's shared clock, in ms, as
    /// the harness set it (each member's clock is the shared one plus its own offset). Every
    /// server time the checks compare (a grant's `createdAt` and `expiresAt`, a change
    /// event's `wallTime`, the readings of [`History::server_clock`]) was stamped by the
    /// primary of the moment by its own clock, so a failover to a member whose clock is
    /// apart moves them by the difference: [`History::offset_range`] says by how much at
    /// most between two instants. Empty on one server (offset 0 throughout), where nothing
    /// changes.
    pub server_offsets: Vec<(Instant, i64)>,
    /// On a replica set: what the failover nemesis did to the set and each change of
    /// primary it saw, in words, for reading a report by (no check judges them).
    pub set_events: Vec<(Instant, String)>,
    /// The campaigns in elections, as they began.
    pub campaigns: Vec<CampaignLog>,
    /// The leaders' proclaims.
    pub proclaims: Vec<ProclaimLog>,
    /// What the observers of elections reported, streams and polls.
    pub observations: Vec<Observation>,
    /// Errors the observers met (yielded by a stream, or returned by a poll).
    pub observer_errors: u64,
    /// The fresh reads of each election's leader at the end of the run.
    pub final_reads: Vec<FinalRead>,
    /// When the run ended.
    pub end: Instant,
}

impl History {
    /// An empty history of a run that ended at `end`, with no readings of the server's
    /// clock: fill in what the run recorded.
    pub fn new(end: Instant) -> Self {
        History {
            holders: Vec::new(),
            ops: Vec::new(),
            record: HashMap::new(),
            modes: HashMap::new(),
            attempts: 0,
            timeouts: 0,
            errors: 0,
            liveness: Vec::new(),
            faults: Vec::new(),
            writer_waits: Vec::new(),
            healed_at: None,
            nemeses: Vec::new(),
            acquire_calls: Vec::new(),
            server_clock: Vec::new(),
            server_offsets: Vec::new(),
            set_events: Vec::new(),
            campaigns: Vec::new(),
            proclaims: Vec::new(),
            observations: Vec::new(),
            observer_errors: 0,
            final_reads: Vec::new(),
            end,
        }
    }

    /// The server's clock at our instant `t`, in ms since the epoch: the last reading taken
    /// at or before `t` (the first one if `t` is earlier), plus the time since. The server's
    /// clock is the wall clock plus an offset that only the harness moves (and reads again
    /// right after), so this is off by no more than the wall clock's drift from the
    /// monotonic clock since the reading, and a millisecond of rounding. `None` without
    /// readings.
    pub fn server_ms(&self, t: Instant) -> Option<i64> {
        let (at, ms) = self
            .server_clock
            .iter()
            .filter(|(at, _)| *at <= t)
            .max_by_key(|(at, _)| *at)
            .or_else(|| self.server_clock.iter().min_by_key(|(at, _)| *at))?;
        let since = if t >= *at {
            t.duration_since(*at).as_millis() as i64
        } else {
            -(at.duration_since(t).as_millis() as i64)
        };
        Some(ms + since)
    }

    /// The lowest the server's clock read at any of our instants from `from` to `to`
    /// (inclusive): the server's time at `from` ([`History::server_ms`]), or a reading after
    /// it, up to `to`, if lower (the harness reads the clock right after every step back).
    /// A lower bound of the server's time of anything done at some instant in the window,
    /// the clock's steps back included: the server's time at `from` alone is not one, since
    /// a step back after `from` puts later instants below it. `None` without readings.
    pub fn lowest_server_ms(&self, from: Instant, to: Instant) -> Option<i64> {
        let at_from = self.server_ms(from)?;
        let later = (self.server_clock.iter())
            .filter(|(at, _)| *at > from && *at <= to)
            .map(|(_, ms)| *ms);
        Some(later.fold(at_from, i64::min))
    }

    /// The highest the server's clock read at any of our instants from `from` to `to`
    /// (inclusive): the server's time at `to`, or what it read just before a reading in the
    /// window (just before a step back), if higher. An upper bound of the server's time of
    /// anything done at some instant in the window, the clock's steps back included. `None`
    /// without readings.
    pub fn highest_server_ms(&self, from: Instant, to: Instant) -> Option<i64> {
        let at_to = self.server_ms(to)?.max(self.server_ms(from)?);
        let before_readings = (self.server_clock.iter())
            .filter(|(at, _)| *at > from && *at <= to)
            .filter_map(|(at, _)| {
                let (prev_at, prev_ms) = (self.server_clock.iter())
                    .filter(|(p, _)| p < at)
                    .max_by_key(|(p, _)| *p)?;
                Some(prev_ms + at.duration_since(*prev_at).as_millis() as i64)
            });
        Some(before_readings.fold(at_to, i64::max))
    }

    /// The offset of the serving member's clock from the set's shared clock at our instant
    /// `t` ([`History::server_offsets`]): the last one set at or before `t`, 0 before the
    /// first (every member starts with the shared clock).
    pub fn offset_at(&self, t: Instant) -> i64 {
        (self.server_offsets.iter())
            .filter(|(at, _)| *at <= t)
            .max_by_key(|(at, _)| *at)
            .map_or(0, |(_, offset)| *offset)
    }

    /// The lowest and the highest offset of the serving member's clock
    /// ([`History::server_offsets`]) in force at any of our instants from `from` to `to`
    /// (inclusive); `(0, 0)` on one server. A server time stamped at some instant of the
    /// window reads at most `high - low` ahead of, or behind, what one clock would have read
    /// then: the most a failover in the window moves the server's times.
    pub fn offset_range(&self, from: Instant, to: Instant) -> (i64, i64) {
        let at_from = self.offset_at(from);
        (self.server_offsets.iter())
            .filter(|(at, _)| *at > from && *at <= to)
            .fold((at_from, at_from), |(low, high), (_, offset)| {
                (low.min(*offset), high.max(*offset))
            })
    }

    /// The readings in the order they were taken.
    fn readings(&self) -> Vec<(Instant, i64)> {
        let mut readings = self.server_clock.clone();
        readings.sort_by_key(|(at, _)| *at);
        readings
    }

    /// The earliest of our instants at which the server's clock read `ms` or more: anything
    /// the server did at its time `ms` was done then or later, whatever the clock's steps
    /// (back, the clock reads `ms` again later; forward past it, this is the jump).
    /// [`History::server_ms`] inverted; `None` without readings.
    pub fn first_instant_at_server_ms(&self, ms: i64) -> Option<Instant> {
        let readings = self.readings();
        let &(first_at, first_ms) = readings.first()?;
        if ms < first_ms {
            let before = Duration::from_millis((first_ms - ms) as u64);
            return Some(first_at.checked_sub(before).unwrap_or(first_at));
        }
        for (k, &(at, read)) in readings.iter().enumerate() {
            let next = readings.get(k + 1).map(|(n, _)| *n);
            let reached = at + Duration::from_millis((ms - read).max(0) as u64);
            if next.is_none_or(|n| reached < n) {
                return Some(reached);
            }
        }
        None
    }

    /// The latest of our instants at which the server's clock read `ms` or less: anything
    /// the server did at its time `ms` was done then or earlier, whatever the clock's steps
    /// (after a step back, the clock reads `ms` again). `None` without readings.
    pub fn last_instant_at_server_ms(&self, ms: i64) -> Option<Instant> {
        let readings = self.readings();
        let &(first_at, first_ms) = readings.first()?;
        for (k, &(at, read)) in readings.iter().enumerate().rev() {
            if read > ms {
                continue;
            }
            let reached = at + Duration::from_millis((ms - read) as u64);
            return Some(match readings.get(k + 1) {
                Some(&(next, _)) => reached.min(next),
                None => reached,
            });
        }
        let before = Duration::from_millis((first_ms - ms) as u64);
        Some(first_at.checked_sub(before).unwrap_or(first_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_clock_is_read_from_the_last_reading_before() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut history = History::new(t0);
        assert_eq!(history.server_ms(t0), None, "no readings");
        // 1,000,000 at t0; the server's clock jumped 5 s forward at 300 ms.
        history.server_clock = vec![(at(0), 1_000_000), (at(300), 1_005_300)];
        assert_eq!(history.server_ms(at(100)), Some(1_000_100));
        assert_eq!(history.server_ms(at(300)), Some(1_005_300));
        assert_eq!(history.server_ms(at(1_000)), Some(1_006_000));
        // Before the first reading: counted back from it.
        history.server_clock.remove(0);
        assert_eq!(history.server_ms(at(100)), Some(1_005_100));
    }

    #[test]
    fn the_server_clock_is_read_across_a_step_back() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut history = History::new(t0);
        // Read just before and just after a step back of 800 ms at 300 ms.
        history.server_clock = vec![(at(0), 1_000_000), (at(299), 1_000_299), (at(300), 999_500)];
        assert_eq!(
            history.server_ms(at(200)),
            Some(1_000_200),
            "before the step"
        );
        assert_eq!(history.server_ms(at(299)), Some(1_000_299));
        assert_eq!(history.server_ms(at(300)), Some(999_500), "after it, back");
        assert_eq!(history.server_ms(at(1_300)), Some(1_000_500));
    }

    #[test]
    fn a_window_of_instants_is_bounded_in_server_time_across_a_step_back() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut history = History::new(t0);
        assert_eq!(history.lowest_server_ms(at(0), at(10)), None, "no readings");
        // A step back of 800 ms at 300 ms, read just before and just after.
        history.server_clock = vec![(at(0), 1_000_000), (at(299), 1_000_299), (at(300), 999_500)];
        // A window before the step: its ends.
        assert_eq!(history.lowest_server_ms(at(100), at(200)), Some(1_000_100));
        assert_eq!(history.highest_server_ms(at(100), at(200)), Some(1_000_200));
        // Across the step: the reading after it is the lowest, the time just before it the
        // highest (the window's end reads lower than its start).
        assert_eq!(history.lowest_server_ms(at(100), at(400)), Some(999_500));
        assert_eq!(history.highest_server_ms(at(100), at(400)), Some(1_000_300));
        // After it.
        assert_eq!(history.lowest_server_ms(at(400), at(600)), Some(999_600));
        assert_eq!(history.highest_server_ms(at(400), at(600)), Some(999_800));
        // A jump forward raises the highest, not the lowest.
        history.server_clock.push((at(700), 1_010_000));
        assert_eq!(history.lowest_server_ms(at(600), at(800)), Some(999_800));
        assert_eq!(history.highest_server_ms(at(600), at(800)), Some(1_010_100));
    }

    #[test]
    fn a_server_time_maps_back_to_the_instants_it_was_read_at() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut history = History::new(t0);
        assert_eq!(history.first_instant_at_server_ms(5), None, "no readings");
        // A step back of 800 ms at 300 ms, then a jump of 5 s forward at 2,000 ms.
        history.server_clock = vec![
            (at(0), 1_000_000),
            (at(299), 1_000_299),
            (at(300), 999_500),
            (at(2_000), 1_006_200),
        ];
        // Read once: before the step back's range.
        assert_eq!(
            history.first_instant_at_server_ms(999_400),
            Some(at(0) - Duration::from_millis(600))
        );
        assert_eq!(
            history.last_instant_at_server_ms(999_400),
            Some(at(0) - Duration::from_millis(600))
        );
        // Read twice, before and after the step back.
        assert_eq!(history.first_instant_at_server_ms(1_000_100), Some(at(100)));
        assert_eq!(history.last_instant_at_server_ms(1_000_100), Some(at(900)));
        // Skipped by the jump: it is the jump.
        assert_eq!(
            history.first_instant_at_server_ms(1_003_000),
            Some(at(2_000))
        );
        assert_eq!(
            history.last_instant_at_server_ms(1_003_000),
            Some(at(2_000))
        );
        // After it.
        assert_eq!(
            history.first_instant_at_server_ms(1_006_300),
            Some(at(2_100))
        );
        assert_eq!(
            history.last_instant_at_server_ms(1_006_300),
            Some(at(2_100))
        );
    }

    #[test]
    fn the_serving_member_s_clock_offset_is_read_over_a_window() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut history = History::new(t0);
        assert_eq!(history.offset_at(at(100)), 0, "one server");
        assert_eq!(history.offset_range(at(0), at(1_000)), (0, 0));
        // A primary 4,839 ms ahead from 100 ms; a failover at 500 ms to one 3,000 ms behind.
        history.server_offsets = vec![(at(100), 4_839), (at(500), -3_000)];
        assert_eq!(
            history.offset_at(at(50)),
            0,
            "before the first: the shared clock"
        );
        assert_eq!(history.offset_at(at(100)), 4_839);
        assert_eq!(history.offset_at(at(700)), -3_000);
        assert_eq!(history.offset_range(at(0), at(99)), (0, 0));
        assert_eq!(history.offset_range(at(0), at(200)), (0, 4_839));
        assert_eq!(history.offset_range(at(200), at(400)), (4_839, 4_839));
        assert_eq!(history.offset_range(at(200), at(500)), (-3_000, 4_839));
        assert_eq!(history.offset_range(at(600), at(900)), (-3_000, -3_000));
    }

    #[test]
    fn a_clock_step_excuses_every_holder_but_the_one_it_judges() {
        let forward = OpKind::ClockStep {
            by_ms: 2_000,
            judged: Some(7),
        };
        assert!(forward.ends_leases_of("r", 8), "another holder is excused");
        assert!(
            !forward.ends_leases_of("r", 7),
            "the holder shown the step is not"
        );
        let back = OpKind::ClockStep {
            by_ms: -800,
            judged: None,
        };
        assert!(!back.ends_leases_of("r", 8), "a step back ends no lease");
        assert!(OpKind::ClockJump(Duration::from_secs(3)).ends_leases_of("r", 7));
        assert!(OpKind::ForceRelease("r".into()).ends_leases_of("r", 7));
        assert!(!OpKind::ForceRelease("s".into()).ends_leases_of("r", 7));
    }

    #[test]
    fn names_say_what_happened() {
        assert_eq!(
            ReleaseResult::Lost(LossKind::Revoked).name(),
            "LeaseLost(revoked)"
        );
        assert!(!Ending::AcquireReturnedFirst.carried_out());
        assert!(Ending::DroppedWithoutRuntime.carried_out());
        assert!(FaultKind::ReleaseBlip.is_let_go() && FaultKind::ReleaseBlip.is_nemesis());
        assert!(!FaultKind::Partition.is_nemesis());
    }
}
