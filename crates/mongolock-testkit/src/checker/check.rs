//! The checker: reads a finished [`History`] and reports every broken promise.
//!
//! A holder *believes* it holds from the moment its grant reached it until the first of its
//! release call, the loss it learnt of, or its death ([`HolderLog::belief_end`]); a client
//! paused past its local deadline stops believing at that deadline, because `is_lost()` is
//! true from then on even though no task ran.
//!
//! Two events end a lease without its holder's consent, and the holder learns of them only
//! at its next renewal: an operator's `force_release` of the resource, and a jump of the
//! server's clock (which breaks the premise that the server's clock runs at the rate of
//! ours). A holder whose belief spans such an event is *excused* for grants made after the
//! event began: its overlap with them is not an exclusion or cap violation, and its late
//! notice not a loss violation. Its guarded writes are still checked, and so are its tokens.
//! A clock jump excuses the rest of the belief. A force-release excuses it only for as long
//! as the holder may take to learn of it: until the force-release returned plus the lease's
//! TTL (and [`DEADLINE_TOLERANCE`]). Its next renewal tells it the lease is gone; if no
//! renewal gets through, its local deadline — at most the TTL after the send of its last
//! successful renewal, which came before the force-release returned — passes by then. A
//! holder granted before a force-release began that still believes past that bound is a
//! **revocation not noticed** ([`Check::RevocationNoticed`]).
//!
//! Holders *conflict* when one of them holds exclusively: on a mutex or a group member
//! always, on a reader-writer lock unless both are readers. Exclusion, guarded writes and
//! loss before the next grant are judged between conflicting holders; semaphore holders are
//! counted against the cap instead.
//!
//! **Writer preference** (a reader-writer lock's promise that a waiting writer keeps new
//! readers out): a reader whose call began more than [`ANNOUNCE_ALLOWANCE`] after a writer
//! began waiting, and that was granted before the writer got the lock or gave up, jumped the
//! queue. A reader's call, not its granted attempt, is what counts: waiters are served in
//! the order they joined the line, so a reader that stood in line before the writer goes
//! first even when the attempt that got it the lock came long after the writer's call. A wait during which the writer's client was hit by a fault, or the
//! resource was force-released, or the server's clock jumped, is excused (the announcement
//! may not have been made or may have lapsed), and so is a reader whose own client was hit
//! while it acquired (the copy of its attempt that was granted may have been sent earlier
//! than the send the guard reports).
//!
//! **Elections**: a leader is an exclusive holder of the election's resource whose token is
//! its term, so (1)–(3) judge leaders as they judge mutex holders; (6) adds that every
//! leader's term is above the terms of all leaders whose grants reached them earlier
//! ([`Check::ElectionTerms`]). The members of a multi-lock are exclusive holders of their
//! resources, each with its own token: "no two holders of any member" is (1). Recipe holders
//! are targets of the nemeses on a holder's let-go too, so (3) and the oracle judge a
//! multi-lock's set or a leadership dropped, cancelled mid-release or released under faults.
//!
//! **Proclaims** (7): a proclaim that returned `Ok` was applied while the server held the
//! leader's grant live, at some moment between its call and its return; a later term whose
//! grant reached its leader before the call began had ended that grant for good, so such a
//! proclaim is a breach ([`Check::ProclaimWhileLeading`], judged by intervals as (2) is).
//! One refused as lost must leave `is_lost()` true right after it, and the leader leading
//! no more ([`Check::ProclaimRefused`]).
//!
//! **Observers** (8): every read behind an observation was made between its `from` and
//! `at` (a stream reads only while it is polled for its next item). The terms one stream,
//! or one poller, reports never decrease ([`Check::ObservedTerms`]); two changes closer than
//! one read may be seen as one, so skipped terms and values are fine. Every leader reported
//! was elected under that lock id (or is a campaign's grant its campaigner never heard of),
//! advertising its campaign's value or a value proclaimed in its term by a call begun before
//! `at` (a proclaim in flight or failed may have landed); none is reported after a later
//! term reached its leader before `from`, and nobody is reported while an unexcused leader
//! believed throughout the read ([`Check::ObservedLeaders`]). At the end of a run, once the
//! election is quiet, a fresh `leader()` and each stream's last item must be the leader the
//! history shows, with its last value, or nobody ([`Check::FinalLeader`]: the stream ends
//! on the latest leader).
//!
//! **Lock-delay** (9): after a lease with a lock-delay ends without a release (its TTL ran
//! out, or a force release revoked it), nobody, its own lock id included, is granted the
//! resource until the delay has passed by the server's clock; a release by the holder, even
//! a late one, frees it at once. The server time (`Holder::created_at`) of the first
//! conflicting grant after each lease with a lock-delay is compared with a lower bound of
//! that lease's end (see [`Check::LockDelay`]) plus its delay, unless that lease's holder
//! may have sent a release before the grant reached its holder (a later grant came after
//! that one, and reads as earlier by server time only across a step back of the clock).
//!
//! **Resumed leases** (10): a holder asking with the lock id of a lease that lives, granted
//! to another client (its process before a restart, or a twin beside a paused one), gets that
//! lease back with its token. Such a grant *continues* the lease ([`HolderLog::continued_by`]:
//! same resource, lock id and token): (1) does not count the two incarnations' overlap, the
//! guarded record counts them as one writer, (2) accepts the token again, and (3) looks past
//! it for the next grant. (10) bounds what that allows ([`Check::Resume`]): a lease that
//! surely lived is resumed, never granted anew with another token; a lease released with `Ok`
//! is not resumed; and an incarnation still alive stops believing within the TTL
//! (+ [`DEADLINE_TOLERANCE`]) of the resumed grant, since its next renewal finds the entry
//! naming another keeper (or its local deadline passes).
//!
//! **Calls within their timeout** (11): an acquire call given a timeout (`acquire_timeout`
//! and the like: [`AcquireCall::timeout`]) returns within it (+ [`CALL_SLACK`]), whatever
//! its client owes for the lock id (a release a dropped guard never sent, a withdrawal): a
//! debt that cannot be paid must not hold the call, and neither may a slow reply: a later
//! attempt on the wire, or the withdrawal of a grant that came too late, is cut at the
//! call's deadline, not left to the command time limit. A call during which its client was
//! paused (its thread stopped) is excused.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use super::history::{
    Access, AcquireCall, CampaignLog, FaultKind, FinalRead, History, HolderLog, LossKind, Mode,
    Observation, OpKind, ProclaimLog, ProclaimOutcome, RecordEntry, ReleaseResult, Role,
    SeenLeader, Source, WriterWait,
};

/// How long an election goes without a change before a fresh read of its leader is judged
/// ([`Check::FinalLeader`]): the harness waits this long before its reads at the end of a run.
pub const QUIET: Duration = Duration::from_secs(1);

/// How late past its last sampled local deadline a holder may learn of a loss by deadline:
/// the sampling period (10 ms) plus scheduling delays on a loaded machine.
pub const DEADLINE_TOLERANCE: Duration = Duration::from_millis(200);

/// The error allowed, in ms, in (9)'s mapping of our instants to the server's clock (a
/// millisecond of rounding each way, and drift).
pub const DELAY_SLACK_MS: i64 = 50;

/// How long after a writer begins waiting its announcement is surely in force, if nothing
/// hit its client: the round trip of its first attempt, on a loaded machine.
pub const ANNOUNCE_ALLOWANCE: Duration = Duration::from_secs(1);

/// How late past its timeout an acquire call may return ([`Check::CallTimeout`]): the last
/// attempt's round trip, under up to 400 ms of injected latency, on a loaded machine.
pub const CALL_SLACK: Duration = Duration::from_secs(1);

/// How long after a fault on a client its effects may still be felt (a retry after a reset,
/// a reply held back by a proxy), when deciding what the fault excuses.
pub const FAULT_SLACK: Duration = Duration::from_secs(1);

/// The promises checked, as numbered in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Check {
    /// (1) Believed intervals of exclusive holders on one resource never overlap.
    Exclusion,
    /// (1) Accepted guarded writes of exclusive holders never interleave, and the record
    /// rejects no write of a holder whose lease nothing excused.
    GuardedWrites,
    /// (2) Tokens are unique and increase in real-time order of acquisition.
    Fencing,
    /// (3) No guarded write after the holder's lease was lost (per its own log).
    WriteAfterLoss,
    /// (3) No belief past the local deadline; `is_lost()` true after a pause past it.
    LocalDeadline,
    /// (3) A lease that ended without release was reported before the next grant: before
    /// the grant reached its holder, or before the server made it where the history knows
    /// when on this process's clock ([`HolderLog::server_granted_at`]).
    LossBeforeNextGrant,
    /// (3) A holder whose lease was force-released after its grant stops believing within
    /// the TTL (+ [`DEADLINE_TOLERANCE`]) of the force-release.
    RevocationNoticed,
    /// (4) Never more concurrent holders than permits.
    Caps,
    /// (5) After the faults stop, every lock frees or is held by a live client in time.
    Liveness,
    /// (5) A waiting writer keeps new readers out (no starvation by a stream of readers).
    WriterPreference,
    /// (6) An election has at most one leader per term, and terms strictly increase from
    /// leader to leader in the order their grants reached them.
    ElectionTerms,
    /// (7) A proclaim that returned `Ok` did not begin after a later term's grant reached
    /// its leader.
    ProclaimWhileLeading,
    /// (7) A proclaim refused as lost leaves the leadership lost: `is_lost()` right after,
    /// and the leader leads no longer.
    ProclaimRefused,
    /// (8) The terms an observer sees (one `observe()` stream, or one poller's reads in
    /// turn) never decrease.
    ObservedTerms,
    /// (8) Every leader an observer reports was elected (a term granted to that lock id, or
    /// a campaign's grant it never heard of), advertising a value that term's leader held,
    /// and was not superseded before the read; nobody is reported while a leader surely
    /// led.
    ObservedLeaders,
    /// (8) Once the election is quiet, a fresh `leader()` and every observer's last item
    /// are the leader the history shows (its term, lock id and last value), or nobody.
    FinalLeader,
    /// (9) No grant on a resource within the lock-delay of an earlier lease on it that
    /// ended without a release, by the server's clock.
    LockDelay,
    /// (10) A lease resumed under its lock id while it surely lived keeps its token, and
    /// the incarnation it continues, if alive, stops believing within the TTL.
    Resume,
    /// (11) An acquire call given a timeout returns within it (+ [`CALL_SLACK`]).
    CallTimeout,
}

impl Check {
    /// Every check, in report order.
    pub const ALL: [Check; 19] = [
        Check::Exclusion,
        Check::GuardedWrites,
        Check::Fencing,
        Check::WriteAfterLoss,
        Check::LocalDeadline,
        Check::LossBeforeNextGrant,
        Check::RevocationNoticed,
        Check::Caps,
        Check::Liveness,
        Check::WriterPreference,
        Check::ElectionTerms,
        Check::ProclaimWhileLeading,
        Check::ProclaimRefused,
        Check::ObservedTerms,
        Check::ObservedLeaders,
        Check::FinalLeader,
        Check::LockDelay,
        Check::Resume,
        Check::CallTimeout,
    ];

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Check::Exclusion => "(1) exclusion",
            Check::GuardedWrites => "(1) guarded writes",
            Check::Fencing => "(2) fencing",
            Check::WriteAfterLoss => "(3) write after loss",
            Check::LocalDeadline => "(3) belief past local deadline",
            Check::LossBeforeNextGrant => "(3) loss noticed before next grant",
            Check::RevocationNoticed => "(3) revocation noticed in time",
            Check::Caps => "(4) caps",
            Check::Liveness => "(5) liveness",
            Check::WriterPreference => "(5) writer preference",
            Check::ElectionTerms => "(6) one leader per term, terms increase",
            Check::ProclaimWhileLeading => "(7) proclaim Ok only while leading",
            Check::ProclaimRefused => "(7) refused proclaim means lost",
            Check::ObservedTerms => "(8) observed terms never decrease",
            Check::ObservedLeaders => "(8) observed leaders were elected",
            Check::FinalLeader => "(8) final leader matches the history",
            Check::LockDelay => "(9) no grant inside a lock-delay",
            Check::Resume => "(10) resumed lease keeps its token, old incarnation learns",
            Check::CallTimeout => "(11) calls return within their timeout",
        }
    }
}

/// One broken promise, with the evidence.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Which promise.
    pub check: Check,
    /// The resource it concerns (`None`: a liveness problem, which names its resources in
    /// its detail).
    pub resource: Option<String>,
    /// What happened, with holder ids, tokens and times (ms since the first grant).
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.check.name(), self.detail)
    }
}

/// What the checker found, with the figures the report shows.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Every violation.
    pub violations: Vec<Violation>,
    /// Grants (holders).
    pub grants: usize,
    /// Grants that followed a conflicting grant to another holder (semaphores aside).
    pub handoffs: usize,
    /// Guarded writes made, and how many the record rejected.
    pub writes: usize,
    /// See [`Outcome::writes`].
    pub rejected_writes: usize,
    /// Holders whose lease a force-release ended (excused from overlap and notice checks).
    pub excused_force_release: usize,
    /// Holders whose lease a clock jump may have ended (excused likewise).
    pub excused_clock_jump: usize,
    /// Holders that lost their lease before releasing it (killed ones aside).
    pub losses: usize,
    /// Margins between a loss notice and the next grant on the resource, in ms.
    pub notice_margins_ms: Vec<f64>,
    /// Takeovers after a crash, in ms: from the moment a killed mutex holder's lock became
    /// free (its last local deadline plus its lock-delay) to the grant of a waiter that was
    /// already in line then. Kills whose lease was resumed, and grants to calls made after
    /// the lock became free, are not counted (see `Checker::takeover_ms`).
    pub takeovers_ms: Vec<f64>,
    /// Grants and handoffs by role.
    pub by_role: BTreeMap<Role, RoleCounts>,
    /// Writer waits judged by the writer-preference check.
    pub writer_waits_checked: usize,
    /// Writer waits excused from it (a fault on the writer's client, an operator, a clock
    /// jump).
    pub writer_waits_excused: usize,
    /// Faults carried out, by kind, as the clients recorded them (pauses and kills aimed at
    /// acquiring clients take effect only if the client is still acquiring; a nemesis on a
    /// release or an acquire, only if the client still held or acquired).
    pub carried_out: BTreeMap<FaultKind, usize>,
    /// The nemeses on releases and acquires carried out, by kind, and how they ended.
    pub nemeses: BTreeMap<FaultKind, BTreeMap<String, usize>>,
    /// What the handle holders' release calls returned, by result.
    pub releases: BTreeMap<&'static str, usize>,
    /// Holders whose lease was force-released after their grant (judged by
    /// [`Check::RevocationNoticed`]).
    pub revocations: usize,
    /// Leaders judged by [`Check::ElectionTerms`] against the leaders before them.
    pub leaders_checked: usize,
    /// Of those, leaders whose term was not above every earlier one, excused by an event
    /// that ended a lease without its holder's consent (a force-release of the election, a
    /// clock jump: see the check).
    pub leaders_excused: usize,
    /// Leaders' proclaims, by outcome.
    pub proclaims: BTreeMap<&'static str, usize>,
    /// Proclaims judged by (7): those that returned `Ok` or were refused as lost.
    pub proclaims_checked: usize,
    /// Observations judged by (8), by source (stream items, polls).
    pub observations: BTreeMap<&'static str, usize>,
    /// Errors the observers met.
    pub observer_errors: u64,
    /// Fresh end-of-run reads judged by [`Check::FinalLeader`], with how many observers'
    /// last items were compared with them.
    pub final_reads_checked: usize,
    /// See [`Outcome::final_reads_checked`].
    pub final_items_checked: usize,
    /// Fresh end-of-run reads not judged: the election was not quiet then.
    pub final_reads_unjudged: usize,
    /// Let-go nemeses carried out on recipe holders: on multi-lock sets, and on leaders.
    pub recipe_let_gos: (usize, usize),
    /// Grants judged by (9) against an earlier lease with a lock-delay that ended without a
    /// release before them (not excused by that lease's own release).
    pub delay_grants_checked: usize,
    /// Of those, grants whose server time was counted on a faster clock than the one that
    /// stamped it: on a replica set, a primary whose clock was ahead served between the
    /// lease and the grant ([`History::server_offsets`]).
    pub delay_grants_across_clocks: usize,
    /// The shortest margin, in server ms, by which such a grant came after the delay's
    /// end as (9) bounds it (from below); negative margins are violations.
    pub delay_margins_ms: Vec<f64>,
    /// Leases resumed under their lock id (same token), judged by (10): after a kill of the
    /// incarnation before, and beside a live (paused) one.
    pub resumes: (usize, usize),
    /// How the live incarnations learnt that their lease was resumed elsewhere: revoked,
    /// by their deadline, other (or not at all, if their belief had ended otherwise).
    pub resume_notices: BTreeMap<&'static str, usize>,
    /// Guarded writes (or reads) the record rejected from holders whose lease nothing
    /// excused, by resource: each is also a [`Check::GuardedWrites`] violation.
    pub refused: BTreeMap<String, usize>,
    /// The most holders at once on each resource, counted from the believed intervals
    /// (excuses aside).
    pub at_once: BTreeMap<String, AtOnce>,
    /// Every lease that ended by a loss its holder learnt of (or that its holder believed
    /// in to the end of the run, never told), with the next conflicting grant on its
    /// resource, as [`Check::LossBeforeNextGrant`] judged it (excused ones aside).
    pub handovers: Vec<Handover>,
    /// Acquire calls with a timeout judged by (11), and those excused (their client paused
    /// during the call).
    pub timed_calls: (usize, usize),
    /// Guards dropped on a runtime that ended ([`FaultKind::DropOnEndingRuntime`]) after
    /// which the same client asked for the resource again under the same lock id, and of
    /// those the calls that returned within their timeout (judged by (11)) and were granted.
    pub asked_again_after_ending_runtime: (usize, usize, usize),
}

/// The most holders that believed they held one resource at the same time, from the
/// intervals the checker judges (a holder that lets go at the instant another is granted
/// does not overlap it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AtOnce {
    /// Holders of any access.
    pub holders: usize,
    /// Holders of a share (semaphore permits, readers).
    pub shared: usize,
    /// Exclusive holders (mutex holders, writers, group or multi-lock members, leaders).
    pub exclusive: usize,
    /// Whether an exclusive holder ever held together with anyone else.
    pub exclusive_with_others: bool,
}

/// A lease that ended without its holder's release, and the next conflicting grant on its
/// resource to another holder (see [`Outcome::handovers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handover {
    /// The holder whose lease ended ([`HolderLog::id`]).
    pub from: u64,
    /// When it learnt of the loss ([`HolderLog::lost_at`]); `None`: never, it believed to
    /// the end of the run.
    pub noticed_at: Option<Instant>,
    /// The holder of the next conflicting grant.
    pub to: u64,
    /// When that grant was made, as the check compares it: by the server's clock where it
    /// is known ([`HolderLog::server_granted_at`]), else when the grant reached its holder.
    pub granted_at: Instant,
    /// Whether the loss was noticed no later than that grant.
    pub in_time: bool,
}

/// The grants of one role, and how many of them were handoffs: grants that followed a
/// conflicting grant on their resource (to another holder).
#[derive(Debug, Clone, Copy, Default)]
pub struct RoleCounts {
    /// Grants.
    pub grants: usize,
    /// Handoffs among them.
    pub handoffs: usize,
}

/// True if `a` and `b` may not hold their resource at the same time.
pub fn conflict(a: &HolderLog, b: &HolderLog) -> bool {
    a.access == Access::Exclusive || b.access == Access::Exclusive
}

impl Outcome {
    /// Violations by check.
    pub fn by_check(&self) -> BTreeMap<Check, usize> {
        let mut counts = BTreeMap::new();
        for v in &self.violations {
            *counts.entry(v.check).or_default() += 1;
        }
        counts
    }

    /// True if some violation is of `check`.
    pub fn has(&self, check: Check) -> bool {
        self.violations.iter().any(|v| v.check == check)
    }

    /// True if some violation is of `check`, on `resource`.
    pub fn has_on(&self, check: Check, resource: &str) -> bool {
        self.violations
            .iter()
            .any(|v| v.check == check && v.resource.as_deref() == Some(resource))
    }
}

/// Checks a history.
pub fn check(history: &History) -> Outcome {
    Checker::new(history).run()
}

struct Checker<'a> {
    h: &'a History,
    origin: Instant,
    /// Holders by resource, sorted by grant time.
    by_resource: BTreeMap<&'a str, Vec<&'a HolderLog>>,
    out: Outcome,
}

impl<'a> Checker<'a> {
    fn new(h: &'a History) -> Self {
        let mut by_resource: BTreeMap<&str, Vec<&HolderLog>> = BTreeMap::new();
        for holder in &h.holders {
            by_resource
                .entry(holder.resource.as_str())
                .or_default()
                .push(holder);
        }
        for list in by_resource.values_mut() {
            list.sort_by_key(|l| (l.granted_at, l.id));
        }
        let origin = h
            .holders
            .iter()
            .map(|l| l.invoked_at)
            .min()
            .unwrap_or(h.end);
        Checker {
            h,
            origin,
            by_resource,
            out: Outcome::default(),
        }
    }

    fn ms(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.origin).as_secs_f64() * 1e3
    }

    /// A time as milliseconds since the origin, or "-" for none (for violation details).
    fn at(&self, t: Option<Instant>) -> String {
        t.map_or_else(|| "-".to_owned(), |t| format!("{:.0}", self.ms(t)))
    }

    fn violation(&mut self, check: Check, resource: &str, detail: String) {
        self.out.violations.push(Violation {
            check,
            resource: Some(resource.to_owned()),
            detail,
        });
    }

    fn end(&self, l: &HolderLog) -> Instant {
        l.belief_end(self.h.end)
    }

    /// The events that may have ended `l`'s lease without its consent (a force-release of
    /// its resource, or a clock jump, during its belief), each with the window of grants it
    /// excuses: from the event's start to, for a force-release, its end plus the lease's TTL
    /// and [`DEADLINE_TOLERANCE`] (by then the holder must have noticed: see the module
    /// docs), and for a clock jump, the end of the belief (`None`). The lease exists on the
    /// server from the grant's execution, which lies between the send of the granted attempt
    /// and the reply: an event in that window (the reply still on its way) may end the lease
    /// before the holder starts believing, and the holder learns it at its next renewal, as
    /// for any force-release.
    fn excuses(&self, l: &HolderLog) -> Vec<(Instant, Option<Instant>, &'static str)> {
        let end = self.end(l);
        self.h
            .ops
            .iter()
            .filter(|op| op.start < end && op.end > l.attempt_sent_at)
            .filter_map(|op| match &op.kind {
                OpKind::ForceRelease(r) if *r == l.resource => Some((
                    op.start,
                    l.ttl.map(|ttl| op.end + ttl + DEADLINE_TOLERANCE),
                    "force_release",
                )),
                OpKind::ClockJump(_) => Some((op.start, None, "clock jump")),
                OpKind::ClockStep { .. } if op.kind.ends_leases_of(&l.resource, l.id) => {
                    Some((op.start, None, "clock jump"))
                }
                _ => None,
            })
            .collect()
    }

    /// The start of the earliest event that may have ended `l`'s lease without its consent,
    /// if any (see [`Checker::excuses`]).
    fn excused_since(&self, l: &HolderLog) -> Option<(Instant, &'static str)> {
        self.excuses(l)
            .into_iter()
            .map(|(start, _, what)| (start, what))
            .min_by_key(|(t, _)| *t)
    }

    /// True if `l`'s overlap with a grant at `at` is excused.
    fn excused_at(&self, l: &HolderLog, at: Instant) -> bool {
        self.excuses(l)
            .iter()
            .any(|(start, until, _)| *start <= at && until.is_none_or(|u| at <= u))
    }

    /// (3) A holder whose lease was force-released after its grant reached it stops
    /// believing within the TTL (+ [`DEADLINE_TOLERANCE`]) of the force-release's return.
    fn revocation_noticed(&mut self, l: &HolderLog) {
        let Some(ttl) = l.ttl else {
            return;
        };
        let end = self.end(l);
        let Some(op) = self.h.ops.iter().find(|op| {
            matches!(&op.kind, OpKind::ForceRelease(r) if *r == l.resource)
                && op.start >= l.granted_at
                && op.start < end
        }) else {
            return;
        };
        self.out.revocations += 1;
        let due = op.end + ttl + DEADLINE_TOLERANCE;
        if end > due {
            let detail = format!(
                "{}: {} still believed it held at {:.0} ms, {:.0} ms \
                 after the TTL that followed the force-release of {:.0}-{:.0} ms (notice {} {:?}, \
                 release {} returned {:?})",
                l.resource,
                holder(l),
                self.ms(end),
                (end - due + DEADLINE_TOLERANCE).as_secs_f64() * 1e3,
                self.ms(op.start),
                self.ms(op.end),
                self.at(l.notified.map(|n| n.0)),
                l.notified.map(|n| n.1),
                self.at(l.released_at),
                l.release
            );
            self.violation(Check::RevocationNoticed, &l.resource, detail);
        }
    }

    fn run(mut self) -> Outcome {
        self.out.grants = self.h.holders.len();
        for l in &self.h.holders {
            self.out.writes += l.writes.len();
            self.out.rejected_writes += l.writes.iter().filter(|w| !w.accepted).count();
            self.out.losses += usize::from(l.ended_by_loss() && l.killed_at.is_none());
            match self.excused_since(l) {
                Some((_, "clock jump")) => self.out.excused_clock_jump += 1,
                Some(_) => self.out.excused_force_release += 1,
                None => {}
            }
        }
        for f in self.h.faults.iter().filter(|f| !f.kind.is_nemesis()) {
            *self.out.carried_out.entry(f.kind).or_default() += 1;
        }
        let modes: HashMap<u64, Mode> = self.h.holders.iter().map(|l| (l.id, l.mode)).collect();
        for n in &self.h.nemeses {
            if n.ended.carried_out() {
                *self.out.carried_out.entry(n.kind).or_default() += 1;
                match n.holder.and_then(|id| modes.get(&id)) {
                    Some(Mode::Multi) if n.kind.is_let_go() => self.out.recipe_let_gos.0 += 1,
                    Some(Mode::Election) if n.kind.is_let_go() => self.out.recipe_let_gos.1 += 1,
                    _ => {}
                }
            }
            *self
                .out
                .nemeses
                .entry(n.kind)
                .or_default()
                .entry(n.ended.name())
                .or_default() += 1;
        }
        for l in &self.h.holders {
            // A group's members share one unlock, a multi-lock's one release: not counted.
            let set = matches!(l.mode, Mode::Group | Mode::Multi);
            if let (Some(result), false) = (l.release, set) {
                *self.out.releases.entry(result.name()).or_default() += 1;
            }
        }
        let resources: Vec<&str> = self.by_resource.keys().copied().collect();
        for resource in resources {
            let mode = self
                .h
                .modes
                .get(resource)
                .copied()
                .unwrap_or(Mode::Exclusive);
            self.fencing(resource);
            self.count_roles(resource);
            self.at_once(resource);
            self.resume(resource);
            if !matches!(mode, Mode::Shared { .. }) {
                self.lock_delay(resource);
            }
            match mode {
                Mode::Exclusive | Mode::Group | Mode::Multi | Mode::ReadWrite => {
                    self.exclusion(resource);
                    self.guarded_writes(resource);
                    self.next_grant(resource);
                }
                Mode::Election => {
                    self.exclusion(resource);
                    self.guarded_writes(resource);
                    self.next_grant(resource);
                    self.election_terms(resource);
                }
                Mode::Shared { permits } => self.caps(resource, permits),
            }
        }
        for wait in &self.h.writer_waits {
            self.writer_preference(wait);
        }
        let holders = &self.h.holders;
        for l in holders {
            self.loss(l);
            self.revocation_noticed(l);
        }
        for problem in &self.h.liveness {
            self.out.violations.push(Violation {
                check: Check::Liveness,
                resource: None,
                detail: problem.clone(),
            });
        }
        for call in &self.h.acquire_calls {
            self.call_timeout(call);
        }
        self.asked_again_after_ending_runtime();
        self.proclaims();
        self.observations();
        for read in &self.h.final_reads {
            self.final_read(read);
        }
        self.out
    }

    fn exclusion(&mut self, resource: &str) {
        let list = self.by_resource[resource].clone();
        for (i, a) in list.iter().enumerate() {
            let a_end = self.end(a);
            for b in &list[i + 1..] {
                if b.granted_at >= a_end {
                    break;
                }
                // A lease resumed under its lock id is the same lease: (10) bounds how long
                // the incarnation before may go on believing.
                if !conflict(a, b) || a.continued_by(b) {
                    continue;
                }
                if self.excused_at(a, b.granted_at) || self.excused_at(b, b.granted_at) {
                    continue;
                }
                let detail = format!(
                    "{resource}: {} believed from {:.0} to {:.0} ms; {} was granted at {:.0} ms",
                    holder(a),
                    self.ms(a.granted_at),
                    self.ms(a_end),
                    holder(b),
                    self.ms(b.granted_at)
                );
                self.violation(Check::Exclusion, resource, detail);
            }
        }
    }

    fn guarded_writes(&mut self, resource: &str) {
        let entries = self.h.record.get(resource).cloned().unwrap_or_default();
        let holders: HashMap<u64, &HolderLog> = self.h.holders.iter().map(|l| (l.id, l)).collect();
        // The writer whose accepted writes came last, and the writers that were followed
        // by another holder's accepted write (or read): they must not write again.
        let mut finished: HashSet<u64> = HashSet::new();
        let mut current: Option<u64> = None;
        let mut last_token: Option<i64> = None;
        // The incarnations of one resumed lease write as one writer: the first one's id.
        let list = self.by_resource.get(resource).cloned().unwrap_or_default();
        let writer = |id: u64| {
            let Some(l) = holders.get(&id) else {
                return id;
            };
            list.iter()
                .find(|a| a.continued_by(l))
                .map_or(id, |a| a.id.min(id))
        };
        for e in entries.iter().filter(|e| e.accepted) {
            let e = RecordEntry {
                holder: writer(e.holder),
                ..*e
            };
            if e.access == Access::Shared {
                // A reader's read ends the current writer's run.
                if let Some(writer) = current.take() {
                    finished.insert(writer);
                }
                continue;
            }
            if let Some(token) = last_token
                && e.token < token
            {
                self.violation(
                    Check::GuardedWrites,
                    resource,
                    format!("{resource}: token {} accepted after token {token}", e.token),
                );
            }
            if current != Some(e.holder)
                && let Some(writer) = current.replace(e.holder)
            {
                finished.insert(writer);
            }
            if finished.contains(&e.holder) {
                self.violation(
                    Check::GuardedWrites, resource,
                    format!(
                        "{resource}: holder {}'s writes (token {}) interleave with another's, at {:.0} ms",
                        e.holder,
                        e.token,
                        self.ms(e.at)
                    ),
                );
            }
            last_token = Some(e.token);
        }
        for e in entries.iter().filter(|e| !e.accepted) {
            let Some(l) = holders.get(&e.holder) else {
                continue;
            };
            if self.excused_at(l, e.at) {
                continue;
            }
            *self.out.refused.entry(resource.to_owned()).or_default() += 1;
            self.violation(
                Check::GuardedWrites, resource,
                format!(
                    "{resource}: the record rejected holder {}'s {} ({}, client {}, token {}) at {:.0} ms: \
                     a newer token had written (or read) while its lease was believed intact",
                    l.id,
                    if e.access == Access::Shared { "read" } else { "write" },
                    l.role().name(),
                    l.client,
                    e.token,
                    self.ms(e.at)
                ),
            );
        }
    }

    fn fencing(&mut self, resource: &str) {
        let list = self.by_resource[resource].clone();
        let mut seen: HashMap<i64, &HolderLog> = HashMap::new();
        for l in &list {
            // A lease resumed under its lock id keeps its token: (10) judges when.
            if let Some(other) = seen.insert(l.token, l)
                && !other.continued_by(l)
            {
                self.violation(
                    Check::Fencing,
                    resource,
                    format!(
                        "{resource}: token {} granted to holders {} and {}",
                        l.token, other.id, l.id
                    ),
                );
            }
        }
        // prefix[i]: the holder with the highest token among the first i+1 grants.
        let mut prefix: Vec<&HolderLog> = Vec::with_capacity(list.len());
        for l in &list {
            let best = match prefix.last() {
                Some(p) if p.token >= l.token => *p,
                _ => *l,
            };
            prefix.push(best);
        }
        for b in &list {
            // Grants that reached their holder before b's acquire call began.
            let before = list.partition_point(|a| a.granted_at < b.invoked_at);
            if before == 0 {
                continue;
            }
            let a = prefix[before - 1];
            if a.token >= b.token && a.id != b.id && !a.continued_by(b) {
                let detail = format!(
                    "{resource}: holder {} got token {} at {:.0} ms, after holder {} got token {} at {:.0} ms \
                     (before the later acquire began at {:.0} ms)",
                    b.id,
                    b.token,
                    self.ms(b.granted_at),
                    a.id,
                    a.token,
                    self.ms(a.granted_at),
                    self.ms(b.invoked_at)
                );
                self.violation(Check::Fencing, resource, detail);
            }
        }
    }

    /// The takeover after `a`, killed at `killed`, by `next`, in ms: from when the lock
    /// became free (its last local deadline, the lease's end less the safety margin, plus
    /// its lock-delay) to `next`'s grant. Measured only where it says how long a waiter
    /// waits for a dead holder's lock: on mutexes (the next grant on a group member or after
    /// a reader waits for someone to ask, not for the lock to free), when `next` was already
    /// asking when the lock became free (a waiter in line, not a later call), and when the
    /// killed lease was not resumed by its next incarnation (then the lock stayed held).
    fn takeover_ms(
        &self,
        a: &HolderLog,
        next: &HolderLog,
        killed: Instant,
        list: &[&HolderLog],
    ) -> Option<f64> {
        let measured = a.mode == Mode::Exclusive
            && a.lost_at().is_none_or(|t| t > killed)
            && !self.excused_at(a, next.granted_at)
            && !list.iter().any(|b| a.continued_by(b));
        if !measured {
            return None;
        }
        let free = a.max_deadline?.max(killed) + a.lock_delay.unwrap_or_default();
        if next.invoked_at > free || next.granted_at < free {
            return None;
        }
        Some(next.granted_at.duration_since(free).as_secs_f64() * 1e3)
    }

    fn next_grant(&mut self, resource: &str) {
        let list = self.by_resource[resource].clone();
        for (i, a) in list.iter().enumerate() {
            let Some(next) = list[i + 1..]
                .iter()
                .find(|b| b.id != a.id && conflict(a, b) && !a.continued_by(b))
            else {
                continue;
            };
            if let Some(killed) = a.killed_at {
                if let Some(ms) = self.takeover_ms(a, next, killed, &list) {
                    self.out.takeovers_ms.push(ms);
                }
                continue;
            }
            // Believed to the end of the run, never told: the overlap is (1)'s to judge.
            let unended =
                a.released_at.is_none() && a.lost_at().is_none() && a.believed_until.is_none();
            if !a.ended_by_loss() && !unended {
                continue;
            }
            if self.excused_at(a, next.granted_at) {
                continue;
            }
            // The grant as the server made it, where its clock can be read on ours.
            let granted = next.server_granted_at.unwrap_or(next.granted_at);
            let Some(lost) = a.lost_at() else {
                self.out.handovers.push(Handover {
                    from: a.id,
                    noticed_at: None,
                    to: next.id,
                    granted_at: granted,
                    in_time: false,
                });
                continue;
            };
            let margin_ms = if granted >= lost {
                granted.duration_since(lost).as_secs_f64() * 1e3
            } else {
                -(lost.duration_since(granted).as_secs_f64() * 1e3)
            };
            self.out.notice_margins_ms.push(margin_ms);
            self.out.handovers.push(Handover {
                from: a.id,
                noticed_at: Some(lost),
                to: next.id,
                granted_at: granted,
                in_time: margin_ms >= 0.0,
            });
            if margin_ms < 0.0 {
                let detail = format!(
                    "{resource}: holder {} (client {}, token {}) learnt of its loss at {:.0} ms, \
                     {:.0} ms after holder {} (token {}) was granted",
                    a.id,
                    a.client,
                    a.token,
                    self.ms(lost),
                    -margin_ms,
                    next.id,
                    next.token
                );
                self.violation(Check::LossBeforeNextGrant, resource, detail);
            }
        }
    }

    /// (6) On an election: every leader's term is above the term of every leader whose
    /// grant reached it earlier (so no two leaders share a term, and terms strictly increase
    /// from leader to leader in grant order).
    ///
    /// (2) fencing gives part of it: it finds a term granted twice, and a term not above
    /// those of the leaders granted before the later campaign *began*; but a campaigner
    /// waiting in line while the leader before it was elected is compared with nobody
    /// there, and (1) exclusion compares times, not terms. This compares every leader with
    /// all those granted before it. A leader's grant can reach it after a later leader's
    /// only if its lease ended on the server while its reply travelled: a force-release of
    /// the election (or a clock jump) in the window that excuses overlaps
    /// ([`Checker::excused_at`]) excuses that, and is counted; a term granted twice never is.
    fn election_terms(&mut self, resource: &str) {
        let list = self.by_resource[resource].clone();
        let mut highest: Option<&HolderLog> = None;
        for b in list {
            if let Some(a) = highest {
                self.out.leaders_checked += 1;
                if b.token <= a.token {
                    let excused = b.token < a.token
                        && (self.excused_at(a, b.granted_at) || self.excused_at(b, b.granted_at));
                    if excused {
                        self.out.leaders_excused += 1;
                    } else {
                        let what = if b.token == a.token {
                            "a second leader in the same term"
                        } else {
                            "a lower term after a higher one"
                        };
                        let detail = format!(
                            "{resource}: {what}: {} led from {:.0} ms, after {} led from {:.0} ms",
                            holder(b),
                            self.ms(b.granted_at),
                            holder(a),
                            self.ms(a.granted_at)
                        );
                        self.violation(Check::ElectionTerms, resource, detail);
                    }
                }
            }
            if highest.is_none_or(|a| b.token > a.token) {
                highest = Some(b);
            }
        }
    }

    /// The leaders of the election `resource` (its holders), in grant order.
    fn leaders(&self, resource: &str) -> Vec<&'a HolderLog> {
        self.by_resource
            .get(resource)
            .map(|list| {
                list.iter()
                    .filter(|l| l.mode == Mode::Election)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The campaign made under `lock_id` in the election `resource`, if the history has it.
    fn campaign(&self, resource: &str, lock_id: &str) -> Option<&'a CampaignLog> {
        self.h
            .campaigns
            .iter()
            .find(|c| c.resource == resource && c.lock_id == lock_id)
    }

    /// When campaign `c` could be granted last: when its call returned (or was dropped),
    /// or else (its client was killed while campaigning) when it would have given up.
    fn campaign_end(&self, c: &CampaignLog) -> Instant {
        self.h
            .acquire_calls
            .iter()
            .find(|a| a.resource == c.resource && a.lock_id == c.lock_id)
            .map_or(c.gives_up_at, |a| a.ended_at.min(c.gives_up_at))
    }

    /// (7) Proclaims. One that returned `Ok` was applied by the server, at some moment
    /// between its call and its return, while it held the leader's grant live; a later
    /// term's grant that reached its leader before the call began had ended that grant for
    /// good (the server grants one leader at a time, in term order), so the proclaim cannot
    /// have been applied. No excuse applies: a force-release or a clock jump ends a grant
    /// sooner, never revives it. One refused as lost must leave the leadership lost:
    /// `is_lost()` true right after it returned, and the leader's belief over by then
    /// (+ [`DEADLINE_TOLERANCE`]).
    fn proclaims(&mut self) {
        let holders: HashMap<u64, &HolderLog> = self.h.holders.iter().map(|l| (l.id, l)).collect();
        for p in &self.h.proclaims {
            *self.out.proclaims.entry(p.outcome.name()).or_default() += 1;
            match p.outcome {
                ProclaimOutcome::Ok => {
                    self.out.proclaims_checked += 1;
                    let later = self
                        .leaders(&p.resource)
                        .into_iter()
                        .filter(|l| l.token > p.term && l.granted_at < p.invoked_at)
                        .min_by_key(|l| l.granted_at);
                    if let Some(l) = later {
                        let detail = format!(
                            "{}: a proclaim of {:?} in term {} (client {}) returned Ok; it began \
                             at {:.0} ms, after {} led from {:.0} ms",
                            p.resource,
                            p.value,
                            p.term,
                            p.client,
                            self.ms(p.invoked_at),
                            holder(l),
                            self.ms(l.granted_at)
                        );
                        self.violation(Check::ProclaimWhileLeading, &p.resource, detail);
                    }
                }
                ProclaimOutcome::Lost => {
                    self.out.proclaims_checked += 1;
                    if !p.lost_after {
                        let detail = format!(
                            "{}: a proclaim of {:?} in term {} (client {}) was refused as lost \
                             at {:.0} ms, and is_lost() was false right after",
                            p.resource,
                            p.value,
                            p.term,
                            p.client,
                            self.ms(p.returned_at)
                        );
                        self.violation(Check::ProclaimRefused, &p.resource, detail);
                    }
                    if let Some(l) = holders.get(&p.holder) {
                        let end = self.end(l);
                        if end > p.returned_at + DEADLINE_TOLERANCE {
                            let detail = format!(
                                "{}: {} led on until {:.0} ms after its proclaim of {:?} was \
                                 refused as lost at {:.0} ms",
                                p.resource,
                                holder(l),
                                self.ms(end),
                                p.value,
                                self.ms(p.returned_at)
                            );
                            self.violation(Check::ProclaimRefused, &p.resource, detail);
                        }
                    }
                }
                ProclaimOutcome::Failed | ProclaimOutcome::Dropped => {}
            }
        }
    }

    /// (8) What the observers saw: per stream (and per poller), terms never decrease; every
    /// observation is judged by [`Checker::observed`].
    fn observations(&mut self) {
        self.out.observer_errors = self.h.observer_errors;
        let mut sequences: BTreeMap<(Source, usize, &str), Vec<&Observation>> = BTreeMap::new();
        for o in &self.h.observations {
            sequences
                .entry((o.source, o.observer, o.resource.as_str()))
                .or_default()
                .push(o);
        }
        for ((source, observer, resource), mut list) in sequences {
            list.sort_by_key(|o| o.at);
            let mut highest: Option<&Observation> = None;
            for o in list {
                let Some(seen) = &o.leader else {
                    continue;
                };
                if let Some(h) = highest
                    && let Some(top) = &h.leader
                    && seen.term < top.term
                {
                    let detail = format!(
                        "{resource}: {} {observer} reported term {} ({:?}) at {:.0} ms, after \
                         term {} ({:?}) at {:.0} ms",
                        source_name(source),
                        seen.term,
                        seen.value,
                        self.ms(o.at),
                        top.term,
                        top.value,
                        self.ms(h.at)
                    );
                    self.violation(Check::ObservedTerms, resource, detail);
                }
                if highest
                    .and_then(|h| h.leader.as_ref())
                    .is_none_or(|top| seen.term > top.term)
                {
                    highest = Some(o);
                }
            }
        }
        for o in &self.h.observations {
            self.observed(o);
        }
    }

    /// (8) One observation, whose read was made between `o.from` and `o.at`.
    ///
    /// A leader reported must be explained by the history: its term granted to its lock
    /// id (a leader's log with that token, whose granted attempt was sent before `o.at`),
    /// or, for a term no leader's log has, a campaign under its lock id begun before
    /// `o.at` (a grant whose reply never reached its campaigner, or whose campaigner was
    /// killed; if that lock id led, only with a lower term than it led with: an earlier
    /// grant of its attempt that expired unseen). Its value must be one that term's leader held by then: the campaign's
    /// value, or a value proclaimed in that term by a call begun before `o.at` (whatever
    /// the call returned: a proclaim in flight, failed or even refused may have been
    /// applied). And no later term may have reached its leader before `o.from`: that
    /// grant had ended this one for good before the read began.
    ///
    /// Nobody reported: no leader may have led throughout the read, that is, have been
    /// granted before `o.from` and believed past `o.at` (+ [`DEADLINE_TOLERANCE`]) with
    /// nothing that ends a lease without its holder's consent (a force-release of the
    /// election, a clock jump) before `o.at`: a leader's belief ends before its lease does.
    fn observed(&mut self, o: &Observation) {
        *self
            .out
            .observations
            .entry(source_name(o.source))
            .or_default() += 1;
        let leaders = self.leaders(&o.resource);
        let what = format!(
            "{}: {} {} reported {} at {:.0} ms (read from {:.0} ms)",
            o.resource,
            source_name(o.source),
            o.observer,
            match &o.leader {
                Some(seen) => format!(
                    "term {} by {} advertising {:?}",
                    seen.term, seen.lock_id, seen.value
                ),
                None => "nobody".to_owned(),
            },
            self.ms(o.at),
            self.ms(o.from)
        ) + &o
            .served
            .as_ref()
            .map_or(String::new(), |served| format!(" [{served}]"));
        let Some(seen) = &o.leader else {
            let led = leaders.iter().find(|l| {
                l.granted_at < o.from
                    && self.end(l) > o.at + DEADLINE_TOLERANCE
                    && self.excuses(l).iter().all(|(start, _, _)| *start > o.at)
            });
            if let Some(l) = led {
                let detail = format!(
                    "{what}, while {} led from {:.0} to {:.0} ms",
                    holder(l),
                    self.ms(l.granted_at),
                    self.ms(self.end(l))
                );
                self.violation(Check::ObservedLeaders, &o.resource, detail);
            }
            return;
        };
        let superseded = leaders
            .iter()
            .filter(|l| l.token > seen.term && l.granted_at < o.from)
            .min_by_key(|l| l.granted_at);
        if let Some(l) = superseded {
            let detail = format!(
                "{what}: superseded, {} led from {:.0} ms",
                holder(l),
                self.ms(l.granted_at)
            );
            self.violation(Check::ObservedLeaders, &o.resource, detail);
        }
        let campaign = self
            .campaign(&o.resource, &seen.lock_id)
            .filter(|c| c.invoked_at < o.at);
        match leaders.iter().find(|l| l.token == seen.term) {
            Some(l) if l.lock_id != seen.lock_id => {
                let detail = format!("{what}: term {} was granted to {}", l.token, l.lock_id);
                self.violation(Check::ObservedLeaders, &o.resource, detail);
                return;
            }
            Some(l) if l.attempt_sent_at >= o.at => {
                let detail = format!(
                    "{what}: before the attempt that was granted that term was sent, at \
                     {:.0} ms",
                    self.ms(l.attempt_sent_at)
                );
                self.violation(Check::ObservedLeaders, &o.resource, detail);
                return;
            }
            Some(_) => {}
            // A grant its campaigner never heard of: if the campaign's lock id led later
            // (its attempt repeated after that grant expired unseen), with a greater term.
            None if campaign.is_some()
                && leaders
                    .iter()
                    .filter(|l| l.lock_id == seen.lock_id)
                    .all(|l| l.token > seen.term) => {}
            None => {
                let detail = format!(
                    "{what}: no leader had that term, nor could a campaign under that lock id \
                     have been granted it unseen"
                );
                self.violation(Check::ObservedLeaders, &o.resource, detail);
                return;
            }
        }
        let held = campaign.is_some_and(|c| c.value == seen.value)
            || self.h.proclaims.iter().any(|p| {
                p.resource == o.resource
                    && p.term == seen.term
                    && p.value == seen.value
                    && p.invoked_at < o.at
            });
        if !held {
            let detail = format!(
                "{what}: the leader of term {} never advertised that value by then",
                seen.term
            );
            self.violation(Check::ObservedLeaders, &o.resource, detail);
        }
    }

    /// (8) A fresh read at the end of a run (see [`FinalRead`]). The leader the history
    /// shows at the read is the one whose grant reached it before the read and who still
    /// believed when it returned, with its campaign's value or the value of its last
    /// proclaim (which returned `Ok`); or nobody. The read is judged only if the election
    /// was quiet: no other leader believed, or campaigned (before the read returned),
    /// within twice the TTL plus
    /// [`QUIET`] of the read (a dead leader's lease, or a grant nobody heard of, lasts at
    /// most about that much longer; a campaign counts until its call returned, see
    /// [`Checker::campaign_end`]), and the current leader's grant and proclaims (all
    /// `Ok`) were over [`QUIET`] before it. Then the read and each stream observer's last
    /// item before it must be that leader: the stream ends on the latest leader.
    fn final_read(&mut self, r: &FinalRead) {
        let leaders = self.leaders(&r.resource);
        let ttl = leaders.iter().filter_map(|l| l.ttl).max().unwrap_or(QUIET);
        let settle = ttl * 2 + QUIET;
        let believing: Vec<&HolderLog> = leaders
            .iter()
            .filter(|l| l.granted_at <= r.from && self.end(l) >= r.at)
            .copied()
            .collect();
        let current = match believing.as_slice() {
            [] => None,
            [l] => Some(*l),
            _ => {
                self.out.final_reads_unjudged += 1;
                return;
            }
        };
        let others_quiet = leaders
            .iter()
            .filter(|l| current.is_none_or(|c| c.id != l.id) && l.invoked_at < r.at)
            .all(|l| self.end(l) + settle <= r.from)
            && self
                .h
                .campaigns
                .iter()
                .filter(|c| c.resource == r.resource)
                .filter(|c| current.is_none_or(|l| l.lock_id != c.lock_id))
                .filter(|c| c.invoked_at < r.at)
                .all(|c| self.campaign_end(c) + settle <= r.from);
        let expected = match current {
            None => Some(None),
            Some(l) => {
                let proclaims: Vec<&ProclaimLog> = self
                    .h
                    .proclaims
                    .iter()
                    .filter(|p| p.resource == r.resource && p.term == l.token)
                    .filter(|p| p.invoked_at < r.at)
                    .collect();
                let settled = l.granted_at + QUIET <= r.from
                    && proclaims.iter().all(|p| {
                        p.outcome == ProclaimOutcome::Ok && p.returned_at + QUIET <= r.from
                    });
                let value = match proclaims.iter().max_by_key(|p| p.returned_at) {
                    Some(p) => Some(p.value.clone()),
                    None => self
                        .campaign(&r.resource, &l.lock_id)
                        .map(|c| c.value.clone()),
                };
                value.filter(|_| settled).map(|value| {
                    Some(SeenLeader {
                        term: l.token,
                        value,
                        lock_id: l.lock_id.clone(),
                    })
                })
            }
        };
        let Some(expected) = expected.filter(|_| others_quiet) else {
            self.out.final_reads_unjudged += 1;
            return;
        };
        self.out.final_reads_checked += 1;
        let show = |l: &Option<SeenLeader>| match l {
            Some(l) => format!("term {} by {} advertising {:?}", l.term, l.lock_id, l.value),
            None => "nobody".to_owned(),
        };
        if r.leader != expected {
            let detail = format!(
                "{}: a fresh leader() at {:.0} ms read {}; the history shows {}",
                r.resource,
                self.ms(r.from),
                show(&r.leader),
                show(&expected)
            );
            self.violation(Check::FinalLeader, &r.resource, detail);
        }
        for (observer, last) in &r.observers {
            self.out.final_items_checked += 1;
            if *last != expected {
                let detail = format!(
                    "{}: stream observer {observer}'s last item before {:.0} ms was {}; the \
                     history shows {}",
                    r.resource,
                    self.ms(r.from),
                    show(last),
                    show(&expected)
                );
                self.violation(Check::FinalLeader, &r.resource, detail);
            }
        }
    }

    /// The most holders at once on `resource` ([`AtOnce`]).
    fn at_once(&mut self, resource: &str) {
        let list = &self.by_resource[resource];
        // Ends sort before starts at the same instant.
        let mut points: Vec<(Instant, i8, Access)> = Vec::with_capacity(list.len() * 2);
        for l in list {
            points.push((l.granted_at, 1, l.access));
            points.push((self.end(l).max(l.granted_at), -1, l.access));
        }
        points.sort_by_key(|(at, delta, _)| (*at, *delta));
        let (mut shared, mut exclusive) = (0_i64, 0_i64);
        let mut most = AtOnce::default();
        for (_, delta, access) in points {
            match access {
                Access::Shared => shared += i64::from(delta),
                Access::Exclusive => exclusive += i64::from(delta),
            }
            let count = |n: i64| usize::try_from(n).unwrap_or(0);
            most.holders = most.holders.max(count(shared + exclusive));
            most.shared = most.shared.max(count(shared));
            most.exclusive = most.exclusive.max(count(exclusive));
            most.exclusive_with_others |= exclusive > 0 && shared + exclusive > 1;
        }
        self.out.at_once.insert(resource.to_owned(), most);
    }

    /// Counts grants by role, and handoffs: grants that followed a conflicting grant to
    /// another holder (for a semaphore, none are counted).
    fn count_roles(&mut self, resource: &str) {
        let list = self.by_resource[resource].clone();
        for (i, b) in list.iter().enumerate() {
            let counts = self.out.by_role.entry(b.role()).or_default();
            counts.grants += 1;
            let handoff = i > 0
                && !matches!(b.mode, Mode::Shared { .. })
                && list[..i]
                    .iter()
                    .rev()
                    .find(|a| conflict(a, b))
                    .is_some_and(|a| a.id != b.id);
            if handoff {
                counts.handoffs += 1;
                self.out.handoffs += 1;
            }
        }
    }

    /// True if a fault aimed at `client` overlaps `from..=to` (with [`FAULT_SLACK`] after
    /// it).
    fn client_hit(&self, client: usize, from: Instant, to: Instant) -> bool {
        self.h
            .faults
            .iter()
            .any(|f| f.client == Some(client) && f.start <= to && f.end + FAULT_SLACK >= from)
    }

    /// (11) An acquire call given a timeout returns within it (+ [`CALL_SLACK`]), unless its
    /// client was paused meanwhile.
    fn call_timeout(&mut self, call: &AcquireCall) {
        let Some(timeout) = call.timeout else {
            return;
        };
        let paused = self.h.faults.iter().any(|f| {
            matches!(f.kind, FaultKind::Pause | FaultKind::PauseAcquiring)
                && f.client == Some(call.client)
                && f.start <= call.ended_at
                && f.end >= call.invoked_at
        });
        if paused {
            self.out.timed_calls.1 += 1;
            return;
        }
        self.out.timed_calls.0 += 1;
        let took = call.ended_at.duration_since(call.invoked_at);
        if took > timeout + CALL_SLACK {
            let detail = format!(
                "{}: client {}'s call under lock id {} (timeout {} ms) returned after {:.0} ms \
                 ({:.0}-{:.0} ms, granted: {})",
                call.resource,
                call.client,
                call.lock_id,
                timeout.as_millis(),
                took.as_secs_f64() * 1e3,
                self.ms(call.invoked_at),
                self.ms(call.ended_at),
                call.granted
            );
            self.violation(Check::CallTimeout, &call.resource, detail);
        }
    }

    /// Counts the guards dropped on a runtime that ended after which their client asked for
    /// the resource again under the same lock id, and how those calls went.
    fn asked_again_after_ending_runtime(&mut self) {
        let holders: HashMap<u64, &HolderLog> = self.h.holders.iter().map(|l| (l.id, l)).collect();
        for n in &self.h.nemeses {
            if n.kind != FaultKind::DropOnEndingRuntime || !n.ended.carried_out() {
                continue;
            }
            let Some(dropped) = n.holder.and_then(|id| holders.get(&id)) else {
                continue;
            };
            let next = (self.h.acquire_calls.iter())
                .filter(|c| {
                    c.client == n.client
                        && c.resource == dropped.resource
                        && c.lock_id == dropped.lock_id
                        && c.invoked_at >= n.at
                })
                .min_by_key(|c| c.invoked_at);
            let Some(next) = next else {
                continue;
            };
            let counts = &mut self.out.asked_again_after_ending_runtime;
            counts.0 += 1;
            let in_time = next
                .timeout
                .is_none_or(|t| next.ended_at.duration_since(next.invoked_at) <= t + CALL_SLACK);
            counts.1 += usize::from(in_time);
            counts.2 += usize::from(next.granted);
        }
    }

    /// A waiting writer keeps new readers out (see the module docs).
    fn writer_preference(&mut self, w: &WriterWait) {
        let end = w.granted_at.unwrap_or(w.gives_up_at).min(w.gives_up_at);
        let operator = self.h.ops.iter().any(|op| {
            op.start <= end
                && op.end + FAULT_SLACK >= w.invoked_at
                && match &op.kind {
                    OpKind::ForceRelease(r) => *r == w.resource,
                    OpKind::ClockJump(_) | OpKind::ClockStep { .. } => true,
                    OpKind::Purge => false,
                }
        });
        if operator || self.client_hit(w.client, w.invoked_at, end) {
            self.out.writer_waits_excused += 1;
            return;
        }
        self.out.writer_waits_checked += 1;
        let announced_by = w.invoked_at + ANNOUNCE_ALLOWANCE;
        let readers: Vec<&HolderLog> = self
            .by_resource
            .get(w.resource.as_str())
            .map(|list| {
                list.iter()
                    .filter(|r| r.mode == Mode::ReadWrite && r.access == Access::Shared)
                    .filter(|r| r.invoked_at > announced_by && r.granted_at < end)
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        for r in readers {
            if self.client_hit(r.client, r.invoked_at, r.granted_at) {
                continue;
            }
            let detail = format!(
                "{}: reader {} (client {}, token {}, called at {:.0} ms) sent its attempt at {:.0} ms \
                 and was granted at {:.0} ms, while the writer of client {} waited from {:.0} ms ({})",
                w.resource,
                r.id,
                r.client,
                r.token,
                self.ms(r.invoked_at),
                self.ms(r.attempt_sent_at),
                self.ms(r.granted_at),
                w.client,
                self.ms(w.invoked_at),
                match w.granted_at {
                    Some(g) => format!("granted at {:.0} ms", self.ms(g)),
                    None => format!("gave up at {:.0} ms", self.ms(w.gives_up_at)),
                }
            );
            self.violation(Check::WriterPreference, &w.resource, detail);
        }
    }

    /// (9) No grant inside a lock-delay, by the server's clock. For every grant `b` on the
    /// resource and every earlier conflicting lease `a` with a lock-delay `d` that `b` does
    /// not continue: unless `a`'s holder may have sent a release before `b`'s grant reached
    /// it (a release frees the resource at once, even a late one after the lease ended),
    /// `b`'s server grant time must be at least `a`'s lease end plus `d`.
    ///
    /// The lease end is bounded from below, so the check never blames a correct server:
    /// the grant's own expiry (renewals only move it later), and the TTL past the lowest
    /// server time of the window in which the last renewal behind the holder's latest local
    /// deadline may have run (the local deadline is the renewal's send plus the TTL less the
    /// safety margin, so the renewal ran from the deadline less the TTL on, and before the
    /// deadline, since its reply set it); a force release of the resource after the lease's
    /// attempt was sent may have ended it sooner, at the lowest server time of the call's
    /// window at the earliest. The server's clock can step back (the harness steps it back
    /// 0.5–1 s while a command is in flight): a step back between the send and the run puts
    /// the run below the send's server time, so the lowest reading of each window
    /// ([`History::lowest_server_ms`]) counts, not its start's server time (that took a
    /// correct server for one granting 564 ms inside a delay, --long --seed 1009001).
    /// [`DELAY_SLACK_MS`] covers the mapping of our instants to the server's clock. A clock
    /// jump needs no excuse: the delay counts in the server's time.
    ///
    /// On a replica set the lease's end and `b`'s grant may be stamped by two primaries
    /// whose clocks are apart ([`History::server_offsets`]). A primary decides by its own
    /// clock against the stored end: any primary serving between `a`'s attempt and `b`'s
    /// grant may have found the delay over and removed the entry, so `b`'s grant time is
    /// counted on the fastest of their clocks, the highest offset of that window, from the
    /// lowest offset of `b`'s own window (it was stamped somewhere in it). A failover to a
    /// member whose clock is behind then excuses what it is behind, no more (a grant before
    /// the delay ended by every primary's clock is still caught); one to a member ahead
    /// counts in the server's time, as a jump does; on one server nothing changes.
    fn lock_delay(&mut self, resource: &str) {
        let list = self.by_resource[resource].clone();
        // A lease's delay is judged against the first conflicting grant after it alone: a
        // later one came after that grant, so after the delay if that grant was (and if it
        // was not, that grant is reported). Judged by server times, a later grant can read
        // as inside the delay only because the server's clock stepped back between the two
        // grants (seen in `--long --seed 10000019`, run 10000021: tokens the fence + 1 of a
        // grant past the delay's end).
        let successor = |a: &HolderLog, b: &HolderLog| {
            conflict(a, b) && !a.continued_by(b) && !b.continued_by(a)
        };
        // (One with a server time: a grant without one is not judged, and proves nothing.)
        let first_successor: Vec<Option<usize>> = (0..list.len())
            .map(|i| {
                (i + 1..list.len())
                    .find(|&j| list[j].server_granted_ms.is_some() && successor(list[i], list[j]))
            })
            .collect();
        for (j, b) in list.iter().enumerate() {
            let Some(b_ms) = b.server_granted_ms else {
                continue;
            };
            let mut margin: Option<(i64, &HolderLog, i64, i64)> = None;
            for (i, a) in list[..j].iter().enumerate() {
                let Some(delay) = a.lock_delay else {
                    continue;
                };
                if first_successor[i] != Some(j)
                    || !successor(a, b)
                    || a.may_have_released_before(b.granted_at)
                {
                    continue;
                }
                let Some(end) = self.lease_end_lower_ms(a) else {
                    continue;
                };
                let until = end + delay.as_millis() as i64;
                let (_, fastest) =
                    (self.h).offset_range(a.attempt_sent_at.min(b.attempt_sent_at), b.granted_at);
                let (stamped, _) = self.h.offset_range(b.attempt_sent_at, b.granted_at);
                let moved = (fastest - stamped).max(0);
                let b_on_fastest = b_ms + moved;
                if margin.is_none_or(|(m, _, _, _)| b_on_fastest - until < m) {
                    margin = Some((b_on_fastest - until, a, until, moved));
                }
            }
            let Some((margin, a, until, moved)) = margin else {
                continue;
            };
            self.out.delay_grants_checked += 1;
            if moved > 0 {
                self.out.delay_grants_across_clocks += 1;
            }
            self.out.delay_margins_ms.push(margin as f64);
            if margin < 0 {
                let detail = format!(
                    "{resource}: {} was granted at server time {b_ms} (+{moved} ms on the \
                     fastest primary's clock since), {} ms before the \
                     lock-delay ({:?}) of {} ended at {until} at the earliest (its lease \
                     ended at {} at the earliest, without a release: let go {:?} at {}, \
                     notice {} {:?}, death {})",
                    holder(b),
                    -margin,
                    a.lock_delay.unwrap_or_default(),
                    holder(a),
                    until - a.lock_delay.unwrap_or_default().as_millis() as i64,
                    a.let_go,
                    self.at(a.released_at),
                    self.at(a.notified.map(|n| n.0)),
                    a.notified.map(|n| n.1),
                    self.at(a.killed_at),
                );
                self.violation(Check::LockDelay, resource, detail);
            }
        }
    }

    /// A lower bound of the server time at which `a`'s lease ended (see
    /// [`Checker::lock_delay`]), `None` without a server grant time.
    ///
    /// The grant's own expiry bounds it only while the server's clock never read below the
    /// grant's time afterwards: a renewal run after a step back below it sets `expiresAt`
    /// from the stepped-back clock, below the grant's expiry by the server's reckoning
    /// (later in real time). Then only the last renewal's window bounds it.
    fn lease_end_lower_ms(&self, a: &HolderLog) -> Option<i64> {
        let granted = a.server_expires_ms.or(a.server_granted_ms)?;
        let renewed = match (a.max_deadline, a.ttl) {
            (Some(deadline), Some(ttl)) => (deadline.checked_sub(ttl))
                .and_then(|sent| self.h.lowest_server_ms(sent, deadline))
                .map(|ran| ran + ttl.as_millis() as i64 - DELAY_SLACK_MS),
            _ => None,
        };
        let went_below = match (a.server_granted_ms, a.max_deadline) {
            (Some(at), Some(deadline)) => self
                .h
                .lowest_server_ms(a.granted_at, deadline)
                .is_some_and(|low| low < at),
            _ => false,
        };
        let mut end = match renewed {
            Some(renewed) if went_below => renewed,
            Some(renewed) => granted.max(renewed),
            None => granted,
        };
        for op in &self.h.ops {
            if matches!(&op.kind, OpKind::ForceRelease(r) if *r == a.resource)
                && op.end > a.attempt_sent_at
                && let Some(ran) = self.h.lowest_server_ms(op.start, op.end)
            {
                end = end.min(ran - DELAY_SLACK_MS);
            }
        }
        Some(end)
    }

    /// (10) Resumed leases. For every holder `b` and the latest holder `a` granted before
    /// it on the resource under the same lock id:
    ///
    /// - if `b`'s token is not `a`'s, `a`'s lease must not have surely lived throughout
    ///   `b`'s attempt: `a` sent no release before `b`'s grant reached it, its latest local
    ///   deadline was past that (+ [`DEADLINE_TOLERANCE`]), and no force release of the
    ///   resource or clock jump came between `a`'s attempt and `b`'s grant. Such a lease is
    ///   adopted, with its token, never granted anew;
    /// - if the tokens match (a resume), `a` must not have had a release return `Ok` before
    ///   `b`'s call began (a removed lease is not resumed), and `a`, unless it was dead by
    ///   `b`'s grant, must stop believing within the TTL (+ [`DEADLINE_TOLERANCE`]) of that
    ///   grant: the adoption names `b`'s keeper, so `a`'s next renewal finds the lease gone,
    ///   and if none gets through its local deadline, at most a TTL after its last renewal
    ///   (sent before the adoption), passes by then.
    fn resume(&mut self, resource: &str) {
        let list = self.by_resource[resource].clone();
        for (j, b) in list.iter().enumerate() {
            if b.lock_id.is_empty() {
                continue;
            }
            let Some(a) = list[..j].iter().rev().find(|a| a.lock_id == b.lock_id) else {
                continue;
            };
            if a.token != b.token {
                let interrupted = self.h.ops.iter().any(|op| {
                    op.start < b.granted_at
                        && op.end > a.attempt_sent_at
                        && op.kind.ends_leases_of(&a.resource, a.id)
                });
                let lived = !a.may_have_released_before(b.granted_at)
                    && a.max_deadline
                        .is_some_and(|d| d > b.granted_at + DEADLINE_TOLERANCE)
                    && !interrupted;
                if lived {
                    let detail = format!(
                        "{resource}: {} under lock id {:?} was granted at {:.0} ms with a new \
                         token, while the lease of {} under that lock id surely lived (its \
                         local deadline {}, no release sent): it was not resumed",
                        holder(b),
                        b.lock_id,
                        self.ms(b.granted_at),
                        holder(a),
                        self.at(a.max_deadline)
                    );
                    self.violation(Check::Resume, resource, detail);
                }
                continue;
            }
            if a.release == Some(ReleaseResult::Ok)
                && a.released_at.is_some_and(|r| r < b.invoked_at)
            {
                let detail = format!(
                    "{resource}: {} resumed token {} under lock id {:?}, whose release by {} \
                     had returned Ok before the call began",
                    holder(b),
                    b.token,
                    b.lock_id,
                    holder(a)
                );
                self.violation(Check::Resume, resource, detail);
                continue;
            }
            if a.killed_at.is_some_and(|k| k <= b.granted_at) {
                self.out.resumes.0 += 1;
                continue;
            }
            self.out.resumes.1 += 1;
            let end = self.end(a);
            let how = match a.notified {
                _ if end <= b.granted_at => "belief had ended before",
                Some((_, LossKind::Revoked)) => "revoked",
                Some((_, LossKind::Deadline)) => "deadline",
                Some((_, LossKind::Other)) => "other",
                None if a.release == Some(ReleaseResult::Ok) => "released Ok, no notice",
                None => "no notice",
            };
            *self.out.resume_notices.entry(how).or_default() += 1;
            let Some(ttl) = a.ttl else {
                continue;
            };
            let due = b.granted_at + ttl + DEADLINE_TOLERANCE;
            if end > due {
                let detail = format!(
                    "{resource}: {} resumed the lease (token {}, lock id {:?}) at {:.0} ms, \
                     and {} still believed it held at {:.0} ms, past the TTL after it \
                     (notice {} {:?}, let go {:?} at {})",
                    holder(b),
                    b.token,
                    b.lock_id,
                    self.ms(b.granted_at),
                    holder(a),
                    self.ms(end),
                    self.at(a.notified.map(|n| n.0)),
                    a.notified.map(|n| n.1),
                    a.let_go,
                    self.at(a.released_at)
                );
                self.violation(Check::Resume, resource, detail);
            }
        }
    }

    fn caps(&mut self, resource: &str, permits: u32) {
        let list = self.by_resource[resource].clone();
        for (j, b) in list.iter().enumerate() {
            let holding: Vec<&HolderLog> = list[..j]
                .iter()
                .filter(|a| self.end(a) > b.granted_at)
                .filter(|a| !self.excused_at(a, b.granted_at))
                .copied()
                .collect();
            if holding.len() as u32 + 1 > permits && !self.excused_at(b, b.granted_at) {
                let ids: Vec<String> = holding.iter().map(|a| a.id.to_string()).collect();
                let detail = format!(
                    "{resource}: holder {} granted at {:.0} ms while holders {} believed they held \
                     ({} permits)",
                    b.id,
                    self.ms(b.granted_at),
                    ids.join(", "),
                    permits
                );
                self.violation(Check::Caps, resource, detail);
            }
        }
    }

    fn loss(&mut self, l: &HolderLog) {
        let lost = [l.lost_at(), l.killed_at].into_iter().flatten().min();
        if let Some(lost) = lost
            && let Some(w) = l.writes.iter().find(|w| w.at > lost)
        {
            let detail = format!(
                "{}: holder {} (client {}, token {}) wrote at {:.0} ms, after it lost its lease at {:.0} ms",
                l.resource,
                l.id,
                l.client,
                l.token,
                self.ms(w.at),
                self.ms(lost)
            );
            self.violation(Check::WriteAfterLoss, &l.resource, detail);
        }
        for p in &l.pauses {
            if p.end > p.deadline_before + DEADLINE_TOLERANCE && !p.lost_on_resume {
                let detail = format!(
                    "{}: holder {} resumed {:.0} ms past its local deadline and is_lost() was false",
                    l.resource,
                    l.id,
                    (p.end - p.deadline_before).as_secs_f64() * 1e3
                );
                self.violation(Check::LocalDeadline, &l.resource, detail);
            }
        }
        if let Some(deadline) = l.max_deadline {
            let end = self.end(l);
            if end > deadline + DEADLINE_TOLERANCE {
                let detail = format!(
                    "{}: {} believed it held until {:.0} ms, {:.0} ms past \
                     its local deadline (granted {:.0}, notice {} {:?}, release {}, death {}, {} pause(s))",
                    l.resource,
                    holder(l),
                    self.ms(end),
                    (end - deadline).as_secs_f64() * 1e3,
                    self.ms(l.granted_at),
                    self.at(l.notified.map(|n| n.0)),
                    l.notified.map(|n| n.1),
                    self.at(l.released_at),
                    self.at(l.killed_at),
                    l.pauses.len()
                );
                self.violation(Check::LocalDeadline, &l.resource, detail);
            }
        }
    }
}

/// The name of an observation's source in violation details and the report.
fn source_name(source: Source) -> &'static str {
    match source {
        Source::Stream => "stream observer",
        Source::Poll => "poller",
    }
}

/// A holder as violation details name it: id, role, client and token.
fn holder(l: &HolderLog) -> String {
    format!(
        "holder {} ({}, client {}, token {})",
        l.id,
        l.role().name(),
        l.client,
        l.token
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::history::{LetGo, LossKind, OpEvent};

    /// A mutex holder whose belief runs from `granted` to `released` (ms after `t0`), whose
    /// granted attempt was sent at `sent`.
    fn holder(t0: Instant, id: u64, sent: u64, granted: u64, released: u64) -> HolderLog {
        let ms = |m: u64| t0 + Duration::from_millis(m);
        HolderLog {
            lock_id: format!("id-{id}"),
            invoked_at: ms(0),
            attempt_sent_at: ms(sent),
            granted_at: ms(granted),
            ttl: Some(Duration::from_millis(1_500)),
            released_at: Some(ms(released)),
            let_go: Some(LetGo::Released),
            release: Some(ReleaseResult::Ok),
            ..HolderLog::granted(id, id as usize, Mode::Exclusive, "m", id as i64)
        }
    }

    fn history(t0: Instant, force_release: (u64, u64)) -> History {
        let ms = |m: u64| t0 + Duration::from_millis(m);
        History {
            // Holder 1's grant executes between 100 and 400 ms (its reply is slow); holder 2
            // is granted at 500 ms, while holder 1 still believes.
            holders: vec![holder(t0, 1, 100, 400, 900), holder(t0, 2, 450, 500, 600)],
            ops: vec![OpEvent {
                kind: OpKind::ForceRelease("m".into()),
                start: ms(force_release.0),
                end: ms(force_release.1),
            }],
            modes: HashMap::from([("m".to_owned(), Mode::Exclusive)]),
            attempts: 2,
            ..History::new(ms(1_000))
        }
    }

    fn exclusion_violations(history: &History) -> usize {
        check(history)
            .violations
            .iter()
            .filter(|v| v.check == Check::Exclusion)
            .count()
    }

    #[test]
    fn a_force_release_while_the_grant_reply_travels_excuses_the_overlap() {
        let t0 = Instant::now();
        // The operator broke the lock after the grant executed, before its reply arrived:
        // the holder learns at its next renewal, as for any force-release.
        assert_eq!(exclusion_violations(&history(t0, (200, 250))), 0);
    }

    #[test]
    fn a_force_release_before_the_attempt_was_sent_excuses_nothing() {
        let t0 = Instant::now();
        // It ended before the granted attempt was even sent: it cannot have ended that
        // lease, so the overlap is a double grant.
        assert_eq!(exclusion_violations(&history(t0, (20, 60))), 1);
    }

    /// A holder of the reader-writer lock "rw" with `access`, believing from `granted` to
    /// `released` (ms after `t0`), its attempt sent at `sent`, on `client`.
    fn rw_holder(
        t0: Instant,
        id: u64,
        access: Access,
        sent: u64,
        granted: u64,
        released: u64,
    ) -> HolderLog {
        let mut l = holder(t0, id, sent, granted, released);
        l.resource = "rw".into();
        l.mode = Mode::ReadWrite;
        l.access = access;
        l.invoked_at = t0 + Duration::from_millis(sent);
        l
    }

    fn rw_history(t0: Instant, holders: Vec<HolderLog>, waits: Vec<WriterWait>) -> History {
        let mut h = history(t0, (0, 0));
        h.ops.clear();
        h.holders = holders;
        h.writer_waits = waits;
        h.modes = HashMap::from([("rw".to_owned(), Mode::ReadWrite)]);
        h
    }

    fn count(history: &History, check: Check) -> usize {
        self::check(history)
            .violations
            .iter()
            .filter(|v| v.check == check)
            .count()
    }

    #[test]
    fn a_loss_is_compared_with_the_server_grant_where_it_is_known() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut h = history(t0, (0, 0));
        h.ops.clear();
        // Holder 1 learns of its loss at 600 ms; holder 2's grant reaches it at 610 ms.
        let mut lost = holder(t0, 1, 0, 10, 900);
        lost.notified = Some((ms(600), LossKind::Deadline));
        h.holders = vec![lost, holder(t0, 2, 590, 610, 700)];
        let outcome = check(&h);
        assert!(!outcome.has(Check::LossBeforeNextGrant));
        assert_eq!(
            outcome.handovers,
            vec![Handover {
                from: 1,
                noticed_at: Some(ms(600)),
                to: 2,
                granted_at: ms(610),
                in_time: true,
            }]
        );
        assert_eq!(outcome.at_once["m"].holders, 1);
        // The server made that grant at 595 ms, before the notice.
        h.holders[1].server_granted_at = Some(ms(595));
        let outcome = check(&h);
        assert!(outcome.has_on(Check::LossBeforeNextGrant, "m"));
        assert!(!outcome.handovers[0].in_time);
    }

    #[test]
    fn a_takeover_counts_from_the_lock_freeing_for_a_waiter_already_in_line() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        // Holder 1 is killed at 200 ms; its last local deadline is 1,000 ms, its lock-delay
        // 300 ms: the lock is free from 1,300 ms.
        let mut killed = holder(t0, 1, 0, 10, 0);
        (killed.released_at, killed.let_go, killed.release) = (None, None, None);
        killed.killed_at = Some(ms(200));
        killed.max_deadline = Some(ms(1_000));
        killed.lock_delay = Some(Duration::from_millis(300));
        let takeovers = |next: HolderLog, also: Option<HolderLog>| {
            let mut h = history(t0, (0, 0));
            h.ops.clear();
            h.holders = vec![killed.clone(), next];
            h.holders.extend(also);
            check(&h).takeovers_ms
        };
        // A waiter in line since 500 ms, granted at 1,450 ms: 150 ms.
        let mut waiter = holder(t0, 2, 1_400, 1_450, 2_000);
        waiter.invoked_at = ms(500);
        assert_eq!(takeovers(waiter.clone(), None), vec![150.0]);
        // A call made after the lock became free measures nobody's wait for it.
        let mut later = waiter.clone();
        later.invoked_at = ms(5_000);
        (later.attempt_sent_at, later.granted_at) = (ms(5_000), ms(5_010));
        later.released_at = Some(ms(6_000));
        assert!(takeovers(later, None).is_empty());
        // A kill whose lease the next incarnation resumed (same lock id and token) left the
        // lock held: no takeover.
        let mut resumed = holder(t0, 3, 300, 310, 400);
        (resumed.lock_id, resumed.token) = (killed.lock_id.clone(), killed.token);
        assert!(takeovers(waiter, Some(resumed)).is_empty());
    }

    #[test]
    fn readers_may_overlap_but_a_writer_overlaps_nobody() {
        let t0 = Instant::now();
        let readers = vec![
            rw_holder(t0, 1, Access::Shared, 0, 10, 500),
            rw_holder(t0, 2, Access::Shared, 50, 60, 400),
        ];
        assert_eq!(
            count(&rw_history(t0, readers.clone(), vec![]), Check::Exclusion),
            0
        );
        let mut with_writer = readers;
        with_writer.push(rw_holder(t0, 3, Access::Exclusive, 100, 200, 300));
        // The writer overlaps both readers.
        let outcome = check(&rw_history(t0, with_writer, vec![]));
        assert_eq!(outcome.by_check(), BTreeMap::from([(Check::Exclusion, 2)]));
        let most = outcome.at_once["rw"];
        assert_eq!((most.holders, most.shared, most.exclusive), (3, 2, 1));
        assert!(most.exclusive_with_others);
    }

    #[test]
    fn a_reader_noticing_its_loss_after_the_next_writer_was_granted_is_caught() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut reader = rw_holder(t0, 1, Access::Shared, 0, 10, 900);
        reader.notified = Some((ms(700), LossKind::Deadline));
        // Another reader granted meanwhile is no conflict; a writer granted at 600 is.
        let other_reader = rw_holder(t0, 2, Access::Shared, 640, 650, 680);
        let writer_late = rw_holder(t0, 3, Access::Exclusive, 750, 760, 800);
        let ok = rw_history(
            t0,
            vec![reader.clone(), other_reader.clone(), writer_late],
            vec![],
        );
        assert_eq!(count(&ok, Check::LossBeforeNextGrant), 0);
        let writer_early = rw_holder(t0, 3, Access::Exclusive, 590, 600, 800);
        let bad = rw_history(t0, vec![reader, other_reader, writer_early], vec![]);
        assert_eq!(count(&bad, Check::LossBeforeNextGrant), 1);
    }

    fn wait(t0: Instant, client: usize, invoked: u64, granted: Option<u64>) -> WriterWait {
        let ms = |m: u64| t0 + Duration::from_millis(m);
        WriterWait {
            client,
            resource: "rw".into(),
            invoked_at: ms(invoked),
            gives_up_at: ms(invoked + 3_000),
            granted_at: granted.map(ms),
            returned_at: ms(granted.unwrap_or(invoked + 3_000)),
        }
    }

    #[test]
    fn a_reader_sent_after_a_writer_announced_must_not_be_granted_before_it() {
        let t0 = Instant::now();
        // The writer (client 9) waits from 0 ms and is granted at 2,500 ms.
        let writer = rw_holder(t0, 9, Access::Exclusive, 2_400, 2_500, 2_600);
        // A reader sent at 500 ms (within the allowance) may have got in first.
        let early = rw_holder(t0, 1, Access::Shared, 500, 520, 900);
        let ok = rw_history(
            t0,
            vec![early, writer.clone()],
            vec![wait(t0, 9, 0, Some(2_500))],
        );
        let outcome = check(&ok);
        assert_eq!(outcome.writer_waits_checked, 1);
        assert!(!outcome.has(Check::WriterPreference));
        // A reader sent at 1,500 ms and granted at 1,520 ms jumped the queue.
        let late = rw_holder(t0, 2, Access::Shared, 1_500, 1_520, 1_900);
        let bad = rw_history(
            t0,
            vec![late.clone(), writer.clone()],
            vec![wait(t0, 9, 0, Some(2_500))],
        );
        assert_eq!(count(&bad, Check::WriterPreference), 1);
        // A reader that called at 300 ms (it stood in line before the writer's place) and
        // whose granted attempt came at 1,500 ms went first by right.
        let mut in_line_first = late.clone();
        in_line_first.invoked_at = t0 + Duration::from_millis(300);
        let first = rw_history(
            t0,
            vec![in_line_first, writer.clone()],
            vec![wait(t0, 9, 0, Some(2_500))],
        );
        assert!(!check(&first).has(Check::WriterPreference));
        // ... unless a fault hit the writer's client while it waited.
        let mut excused = rw_history(t0, vec![late, writer], vec![wait(t0, 9, 0, Some(2_500))]);
        excused.faults.push(crate::checker::history::FaultEvent {
            kind: FaultKind::Partition,
            client: Some(9),
            start: t0 + Duration::from_millis(200),
            end: t0 + Duration::from_millis(2_000),
        });
        let outcome = check(&excused);
        assert_eq!(outcome.writer_waits_excused, 1);
        assert!(!outcome.has(Check::WriterPreference));
    }

    /// Holder 1 (TTL 1.5 s) believes from 10 to `released` ms; its lease is force-released
    /// at 1,000-1,010 ms; holder 2 is granted at 1,200 ms and holder 3 at 3,000 ms.
    fn force_released(t0: Instant, released: u64) -> History {
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut h = history(t0, (1_000, 1_010));
        h.holders = vec![
            holder(t0, 1, 0, 10, released),
            holder(t0, 2, 1_100, 1_200, 1_300),
            holder(t0, 3, 2_900, 3_000, 3_100),
        ];
        h.end = ms(5_000);
        h
    }

    #[test]
    fn a_force_release_excuses_overlaps_only_until_the_holder_must_have_noticed() {
        let t0 = Instant::now();
        // Holder 1 stops believing at 1,600 ms, within the TTL of the force-release: its
        // overlap with holder 2 is excused, and it noticed in time.
        let noticed = check(&force_released(t0, 1_600));
        assert_eq!(
            noticed.by_check(),
            BTreeMap::new(),
            "{:?}",
            noticed.violations
        );
        assert_eq!(noticed.revocations, 1);
        // Believing until 4,000 ms: past 1,010 + 1,500 + 200 ms it is a revocation not
        // noticed, and the grant to holder 3 (after that) is not excused; holder 2's is.
        let unnoticed = check(&force_released(t0, 4_000));
        assert_eq!(
            unnoticed.by_check(),
            BTreeMap::from([(Check::Exclusion, 1), (Check::RevocationNoticed, 1)]),
            "{:?}",
            unnoticed.violations
        );
    }

    #[test]
    fn a_force_release_before_the_grant_reached_its_holder_asks_for_no_notice() {
        let t0 = Instant::now();
        // The operator acted while holder 1's grant was on its way (sent at 0, granted at
        // 1,200): the lease may have outlived it, so its long belief is no revocation
        // missed; but holder 3, granted after the excuse ran out, overlaps it.
        let mut h = force_released(t0, 4_000);
        h.holders[0].granted_at = t0 + Duration::from_millis(1_200);
        h.holders.remove(1);
        let outcome = check(&h);
        assert_eq!(outcome.revocations, 0);
        assert!(!outcome.has(Check::RevocationNoticed));
        assert!(outcome.has(Check::Exclusion), "{:?}", outcome.violations);
    }

    /// A leader of the election "e" with `term`, campaigning from `sent`, leading from
    /// `granted` to `released` (ms after `t0`).
    fn leader(
        t0: Instant,
        id: u64,
        term: i64,
        sent: u64,
        granted: u64,
        released: u64,
    ) -> HolderLog {
        let mut l = holder(t0, id, sent, granted, released);
        l.resource = "e".into();
        l.mode = Mode::Election;
        l.token = term;
        l.invoked_at = t0 + Duration::from_millis(sent);
        l
    }

    fn election_history(t0: Instant, holders: Vec<HolderLog>) -> History {
        let mut h = history(t0, (0, 0));
        h.ops.clear();
        h.holders = holders;
        h.modes = HashMap::from([("e".to_owned(), Mode::Election)]);
        h
    }

    #[test]
    fn terms_must_increase_from_leader_to_leader_in_grant_order() {
        let t0 = Instant::now();
        // Leader 1 (term 5) leads from 10 to 300 ms; leader 2, campaigning since 5 ms (in
        // line before leader 1 was elected), leads from 400 ms.
        let first = leader(t0, 1, 5, 0, 10, 300);
        let ok = check(&election_history(
            t0,
            vec![first.clone(), leader(t0, 2, 7, 5, 400, 600)],
        ));
        assert_eq!(ok.by_check(), BTreeMap::new(), "{:?}", ok.violations);
        assert_eq!(ok.leaders_checked, 1);
        // Term 4 after term 5: (2) fencing does not see it (leader 2's campaign began
        // before leader 1 was elected), (6) does.
        let lower = election_history(t0, vec![first.clone(), leader(t0, 2, 4, 5, 400, 600)]);
        assert_eq!(
            check(&lower).by_check(),
            BTreeMap::from([(Check::ElectionTerms, 1)])
        );
        // Two leaders in term 5.
        let same = election_history(t0, vec![first, leader(t0, 2, 5, 5, 400, 600)]);
        assert_eq!(count(&same, Check::ElectionTerms), 1);
        assert!(check(&same).has(Check::Fencing));
    }

    #[test]
    fn a_lower_term_whose_grant_was_force_released_on_its_way_is_excused() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        // Leader 1's attempt (term 8) was sent at 100 ms and its reply came at 700 ms; the
        // operator force-released the election at 200-250 ms, and leader 2 (term 9) led
        // from 320 to 500 ms meanwhile.
        let holders = vec![
            leader(t0, 1, 8, 100, 700, 900),
            leader(t0, 2, 9, 280, 320, 500),
        ];
        let unexcused = election_history(t0, holders.clone());
        assert_eq!(count(&unexcused, Check::ElectionTerms), 1);
        let mut excused = election_history(t0, holders);
        excused.ops.push(OpEvent {
            kind: OpKind::ForceRelease("e".into()),
            start: ms(200),
            end: ms(250),
        });
        let outcome = check(&excused);
        assert!(
            !outcome.has(Check::ElectionTerms),
            "{:?}",
            outcome.violations
        );
        assert_eq!(outcome.leaders_excused, 1);
    }

    /// Leader 1 (term 5, lock id "id-1", campaigning with "a") leads from 10 to 300 ms and
    /// proclaims "v" at 100-105 ms; leader 2 (term 7, "id-2", "b") leads from 400 to 600 ms.
    fn proclaimed(t0: Instant) -> History {
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut h = election_history(
            t0,
            vec![leader(t0, 1, 5, 0, 10, 300), leader(t0, 2, 7, 5, 400, 600)],
        );
        h.campaigns = [(1, "a"), (2, "b")]
            .into_iter()
            .map(|(id, value)| CampaignLog {
                client: id,
                resource: "e".into(),
                lock_id: format!("id-{id}"),
                value: value.into(),
                invoked_at: ms(0),
                gives_up_at: ms(3_000),
            })
            .collect();
        h.proclaims = vec![ProclaimLog {
            client: 1,
            holder: 1,
            resource: "e".into(),
            term: 5,
            value: "v".into(),
            invoked_at: ms(100),
            returned_at: ms(105),
            outcome: ProclaimOutcome::Ok,
            lost_after: false,
        }];
        h
    }

    /// A stream observer's report of `(term, lock id, value)` read between `from` and `at`.
    fn seen(t0: Instant, from: u64, at: u64, leader: Option<(i64, &str, &str)>) -> Observation {
        Observation {
            observer: 0,
            source: Source::Stream,
            resource: "e".into(),
            from: t0 + Duration::from_millis(from),
            at: t0 + Duration::from_millis(at),
            leader: leader.map(|(term, lock_id, value)| SeenLeader {
                term,
                value: value.into(),
                lock_id: lock_id.into(),
            }),
            served: None,
        }
    }

    #[test]
    fn an_ok_proclaim_begun_after_a_later_term_was_granted_is_caught() {
        let t0 = Instant::now();
        let ok = proclaimed(t0);
        assert_eq!(check(&ok).by_check(), BTreeMap::new());
        let mut late = proclaimed(t0);
        late.proclaims[0].invoked_at = t0 + Duration::from_millis(450);
        assert_eq!(count(&late, Check::ProclaimWhileLeading), 1);
        // Refused as lost: is_lost() must be true after, and the belief over.
        let mut refused = proclaimed(t0);
        refused.proclaims[0].outcome = ProclaimOutcome::Lost;
        refused.proclaims[0].invoked_at = t0 + Duration::from_millis(40);
        refused.proclaims[0].returned_at = t0 + Duration::from_millis(50);
        assert_eq!(count(&refused, Check::ProclaimRefused), 2);
        refused.proclaims[0].lost_after = true;
        refused.holders[0].released_at = Some(t0 + Duration::from_millis(60));
        assert_eq!(count(&refused, Check::ProclaimRefused), 0);
    }

    #[test]
    fn observers_must_report_elected_leaders_in_term_order() {
        let t0 = Instant::now();
        let mut h = proclaimed(t0);
        h.observations = vec![
            seen(t0, 0, 5, None),
            seen(t0, 5, 60, Some((5, "id-1", "a"))),
            seen(t0, 60, 150, Some((5, "id-1", "v"))),
            seen(t0, 150, 350, None),
            seen(t0, 350, 450, Some((7, "id-2", "b"))),
        ];
        let outcome = check(&h);
        assert_eq!(
            outcome.by_check(),
            BTreeMap::new(),
            "{:?}",
            outcome.violations
        );
        // Back to term 5 after term 7 (superseded too, since 7 led before the read).
        let mut back = h.clone();
        back.observations
            .push(seen(t0, 450, 500, Some((5, "id-1", "v"))));
        assert_eq!(
            check(&back).by_check(),
            BTreeMap::from([(Check::ObservedTerms, 1), (Check::ObservedLeaders, 1)])
        );
        // A term nobody was granted; a value before it was proclaimed; nobody while leader 1
        // surely led.
        let mut invented = h.clone();
        invented.observations = vec![seen(t0, 20, 60, Some((6, "id-1", "a")))];
        assert_eq!(count(&invented, Check::ObservedLeaders), 1);
        let mut early = h.clone();
        early.observations = vec![seen(t0, 20, 60, Some((5, "id-1", "v")))];
        assert_eq!(count(&early, Check::ObservedLeaders), 1);
        let mut nobody = h;
        nobody.observations = vec![seen(t0, 20, 60, None)];
        assert_eq!(count(&nobody, Check::ObservedLeaders), 1);
    }

    /// A holder on "d0" with a lock-delay of 700 ms and a TTL of 1,500 ms, its attempt sent
    /// at `sent` and granted at `granted` (ms after `t0`), granted at server time
    /// `server_ms`, its local deadline the send plus the TTL less 150 ms; killed at
    /// `killed` if given, never released.
    fn delayed(
        t0: Instant,
        id: u64,
        (sent, granted): (u64, u64),
        server_ms: i64,
        killed: Option<u64>,
    ) -> HolderLog {
        let ms = |m: u64| t0 + Duration::from_millis(m);
        HolderLog {
            lock_id: format!("id-{id}"),
            invoked_at: ms(sent),
            attempt_sent_at: ms(sent),
            granted_at: ms(granted),
            ttl: Some(Duration::from_millis(1_500)),
            lock_delay: Some(Duration::from_millis(700)),
            server_granted_ms: Some(server_ms),
            server_expires_ms: Some(server_ms + 1_500),
            max_deadline: Some(ms(sent + 1_350)),
            killed_at: killed.map(ms),
            ..HolderLog::granted(id, id as usize, Mode::Exclusive, "d0", server_ms * 1_000)
        }
    }

    /// The margin of the grant (9) judged, and whether it called it a violation.
    fn delay_judged(history: &History) -> (Vec<f64>, bool) {
        let outcome = check(history);
        (
            outcome.delay_margins_ms.clone(),
            outcome.has(Check::LockDelay),
        )
    }

    #[test]
    fn a_step_back_between_a_lease_send_and_its_execution_is_no_lock_delay_violation() {
        // The false (9) of --long --seed 1009001 (run 1009004): the server's clock steps
        // back 800 ms between the send of holder 1's attempt and its execution, so the
        // server's time at the send is above the grant's. Holder 1 (killed, never released)
        // is granted at server time 999,330: its entry, 1,500 ms of TTL and 700 ms of
        // delay, frees the resource at 1,001,530; holder 2 is granted 6 ms after.
        let t0 = Instant::now();
        let mut h = History::new(t0 + Duration::from_secs(10));
        h.modes = HashMap::from([("d0".to_owned(), Mode::Exclusive)]);
        h.server_clock = vec![
            (t0, 1_000_000),
            (t0 + Duration::from_millis(120), 1_000_120),
            (t0 + Duration::from_millis(121), 999_321),
        ];
        let a = delayed(t0, 1, (100, 135), 999_330, Some(300));
        // 1,001,536 in server time is 2,336 ms after t0.
        let b = delayed(t0, 2, (2_300, 2_340), 1_001_536, None);
        h.holders = vec![a.clone(), b];
        assert_eq!(delay_judged(&h), (vec![6.0], false));
        // Granted before the delay ended, it is caught.
        let early = delayed(t0, 2, (2_100, 2_140), 1_001_330, None);
        h.holders = vec![a, early];
        assert_eq!(delay_judged(&h), (vec![-200.0], true));
    }

    #[test]
    fn a_step_back_during_a_force_release_is_no_lock_delay_violation() {
        // Holder 1 holds from server time 1,000,010; a force release of "d0" runs from 500
        // to 600 ms, the server's clock stepping back 800 ms at 520 ms before it executes
        // (at 550 ms, server time 999,750): the lease ends there, and the delay at
        // 1,000,450. Holder 2 is granted 6 ms after.
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut h = History::new(t0 + Duration::from_secs(10));
        h.modes = HashMap::from([("d0".to_owned(), Mode::Exclusive)]);
        h.server_clock = vec![(ms(0), 1_000_000), (ms(519), 1_000_519), (ms(520), 999_720)];
        h.ops = vec![OpEvent {
            kind: OpKind::ForceRelease("d0".into()),
            start: ms(500),
            end: ms(600),
        }];
        let a = delayed(t0, 1, (5, 15), 1_000_010, Some(400));
        // 1,000,456 in server time is 1,256 ms after t0.
        let b = delayed(t0, 2, (1_220, 1_260), 1_000_456, None);
        h.holders = vec![a.clone(), b];
        // The bound: the lowest reading in the call (999,720) less 50 ms of slack, plus
        // the delay.
        assert_eq!(delay_judged(&h), (vec![86.0], false));
        let early = delayed(t0, 2, (1_100, 1_150), 1_000_350, None);
        h.holders = vec![a, early];
        assert_eq!(delay_judged(&h), (vec![-20.0], true));
    }

    #[test]
    fn a_renewal_after_a_step_back_below_the_grant_is_no_lock_delay_violation() {
        // The shape of --long --seed 3141592 (run 3141593): holder 1 is granted at server
        // time 1,000,100; the server's clock steps back 900 ms at 550 ms; its keeper's
        // renewal, sent at 600 ms, runs at server time 999,700 and sets the entry's end to
        // 1,001,200 (its delay to 1,001,900), below the grant's own expiry (1,001,600);
        // killed at 700 ms, never released. Holder 2 is granted 6 ms after the delay.
        let t0 = Instant::now();
        let mut h = History::new(t0 + Duration::from_secs(10));
        h.modes = HashMap::from([("d0".to_owned(), Mode::Exclusive)]);
        h.server_clock = vec![
            (t0, 1_000_000),
            (t0 + Duration::from_millis(549), 1_000_549),
            (t0 + Duration::from_millis(550), 999_650),
        ];
        let mut a = delayed(t0, 1, (90, 100), 1_000_100, Some(700));
        a.max_deadline = Some(t0 + Duration::from_millis(600 + 1_350));
        let b = delayed(t0, 2, (2_300, 2_360), 1_001_906, None);
        h.holders = vec![a.clone(), b];
        let (margins, violation) = delay_judged(&h);
        assert!(
            !violation && margins.len() == 1 && margins[0] > 0.0,
            "{margins:?}"
        );
        // A grant inside that delay is still caught.
        let early = delayed(t0, 2, (2_000, 2_050), 1_001_700, None);
        h.holders = vec![a, early];
        assert!(delay_judged(&h).1);
    }

    #[test]
    fn a_grant_on_a_new_primary_whose_clock_is_behind_after_the_delay_is_no_violation() {
        // The false (9) of `--replset --quick --seed 41003` (q0): the primary, its clock
        // 4,000 ms ahead of the set's shared clock, grants holder 1 (killed, never released)
        // at its time 1,004,105: the lease ends at 1,005,605 and the delay at 1,006,305 by
        // its clock, 2,305 ms after t0. At 2,400 ms a failover makes primary a member whose
        // clock is the shared one: the server's times step 4,000 ms back. Holder 2 is granted
        // at 2,505 ms, after the delay, at the new primary's time 1,002,505: 3,800 ms "inside"
        // the delay by the two clocks' numbers.
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut h = History::new(t0 + Duration::from_secs(10));
        h.modes = HashMap::from([("d0".to_owned(), Mode::Exclusive)]);
        h.server_clock = vec![(ms(0), 1_004_000), (ms(2_400), 1_002_400)];
        h.server_offsets = vec![(ms(0), 4_000), (ms(2_400), 0)];
        let a = delayed(t0, 1, (100, 110), 1_004_105, Some(300));
        let b = delayed(t0, 2, (2_500, 2_510), 1_002_505, None);
        h.holders = vec![a, b];
        // 200 ms after the delay, counted on the old primary's clock.
        assert_eq!(delay_judged(&h), (vec![200.0], false));
    }

    #[test]
    fn a_grant_inside_the_delay_across_a_failover_is_still_caught() {
        // The primary's clock is the shared one; holder 1 is granted at 1,000,105, its delay
        // ends at 1,002,305 (2,305 ms after t0). At 1,500 ms a failover makes primary a
        // member whose clock is 3,000 ms behind, which grants holder 2 at 2,010 ms, its time
        // 999,005: 295 ms before the delay ended by any clock (the new primary's own reads
        // 1,002,305 only at 5,305 ms). The failover excuses the 3,000 ms its clock is
        // behind, not the rest.
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut h = History::new(t0 + Duration::from_secs(10));
        h.modes = HashMap::from([("d0".to_owned(), Mode::Exclusive)]);
        h.server_clock = vec![(ms(0), 1_000_000), (ms(1_500), 998_500)];
        h.server_offsets = vec![(ms(1_500), -3_000)];
        let a = delayed(t0, 1, (100, 110), 1_000_105, Some(300));
        let early = delayed(t0, 2, (2_000, 2_010), 999_005, None);
        h.holders = vec![a.clone(), early];
        assert_eq!(delay_judged(&h), (vec![-300.0], true));
        // A failover between members whose clocks agree excuses nothing: as on one server.
        let same = delayed(t0, 2, (2_000, 2_010), 1_002_005, None);
        h.server_clock = vec![(ms(0), 1_000_000)];
        h.server_offsets = vec![(ms(1_500), 0)];
        h.holders = vec![a, same];
        assert_eq!(delay_judged(&h), (vec![-300.0], true));
    }
}
