//! The history of a run, as the harness records it: the checker's plain history types
//! ([`mongolock_testkit::checker::history`], re-exported here), filled in from mongolock's
//! guards, results and leaders by the conversions below ([`FromLibrary`], [`GuardLog`]),
//! a [`Recorder`] that collects it while a run goes on, and the [`GuardedRecord`] the
//! workers write to.
//!
//! Every client runs in this process, so the instants of all holders are comparable. Each
//! holder keeps its own [`HolderLog`] and hands it to the [`Recorder`] when it is done
//! (released, lost, or killed); the checker reads the finished [`History`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mongolock::{ErrorKind, LeaseState, LockGuard, LockKind, LossReason};

pub use mongolock_testkit::checker::history::*;

/// Faults of the harness's own that the checker's history has no kind for. Each is recorded
/// in the history as the kind whose effect on a client it shares ([`ExtraFault::recorded_as`],
/// for the checks that excuse what a fault explains), counted in the report under its own
/// name, and logged with how it ended ([`ExtraLog`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExtraFault {
    /// One lock write of a client (its next `findAndModify`, `update` or `delete` on the lock
    /// collection) is delivered late: held by its proxy for 0.5–3 s and then run on the
    /// server, while the client's connection is cut 20–300 ms after the request left it, so
    /// the client sees an unknown outcome and goes on (sends the same attempt again, queues
    /// the release, ...). The late copy lands after that.
    LateRequest,
    /// A guard dropped right after its grant reached its holder (in its runtime: the release
    /// goes to the background), half of the time with the client's next acquire attempt
    /// delivered late, so that a late copy of the granted attempt can land after the release.
    DropAfterGrant,
    /// A holder of a resumable lease releases it while its next four releases of it are
    /// refused by its proxy (answered `HostUnreachable`, never run): the release and the
    /// library's repeat fail, and so does the first try (and its repeat) of the retry queued
    /// in the background; the holder asks again at once with the
    /// same lock id (resuming the lease, if the library hands it back) and holds on for a
    /// TTL, while another client, sent for the resource, waits for it. A later retry of the
    /// release lands.
    ReleaseFailsThenResume,
    /// A client goes for a multi-lock, and as it begins its next two acquire attempts run but
    /// are answered `ExceededTimeLimit` (applied, their outcome unknown to it) and its
    /// withdrawals are refused for 300–700 ms, so a member attempt's withdrawal fails and is
    /// retried while the next round asks for that member again under the set's lock id; the
    /// set, once held, holds on for a TTL, and another client is sent for its first member.
    MultiUnknown,
    /// A client goes for a group that keeps one lock id across its rounds (the low-level API:
    /// `xlock`, `renew`, `unlock`): its first round is given up after its first member, and
    /// that round's `unlock` is delivered late (held by its proxy for 0.8–2 s, the connection
    /// cut 20–300 ms after it left, so the library sends it again and the caller goes on).
    /// The next round takes the members again under the same lock id and holds on until the
    /// late copy has landed and a TTL more, while another client is sent for its first
    /// member. A late unlock must leave what the lock id was granted after it.
    LateUnlock,
    /// A client takes a lease on the clock-step resource (TTL 6 s, no clock uncertainty),
    /// then asks for it again while its relay holds back the reply to the attempt: the
    /// attempt runs, the server's clock steps (forward 2–3 s, or back 0.5–1 s), another
    /// write of the same client (a `force_release` of nothing) returns and shows the step,
    /// and only then is the grant's reply let go. After a step forward the client's renewals
    /// are dropped, so that nothing renews the lease, and another client asks for it: the
    /// holder must know it lost the lease before that client is granted it, by the server's
    /// earlier end. After a step back it holds a while: no lease may be reported lost for it.
    ClockStepInFlight,
    /// A client hosts a periodic job with a minimum hold on several hosts (a client each,
    /// each under a lock id of its own that it keeps); after the first job let go of within
    /// its hold, the server's clock steps back by more than the hold, past that grant, and
    /// the host renews its lock id and asks again at once: nothing may give it its let-go
    /// lease back inside its hold (the workload's `step_back` submodule). Recorded as
    /// carried out only if the clock read before the grant with the let-go entry in force.
    StepBackUnderHold,
    /// A client's holder with a minimum hold lets go and dies, its release held on the wire;
    /// its restarted process asks under the same lock id before the release lands, 300 ms
    /// away, and sends its adoption after: it must not adopt the let-go entry (the workload's
    /// `adoption` submodule). Recorded as carried out only if the release ran late and the
    /// adoption was sent.
    AdoptionRace,
}

impl ExtraFault {
    /// Every kind, in report order.
    pub const ALL: [ExtraFault; 8] = [
        ExtraFault::LateRequest,
        ExtraFault::DropAfterGrant,
        ExtraFault::ReleaseFailsThenResume,
        ExtraFault::MultiUnknown,
        ExtraFault::LateUnlock,
        ExtraFault::ClockStepInFlight,
        ExtraFault::StepBackUnderHold,
        ExtraFault::AdoptionRace,
    ];

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            ExtraFault::LateRequest => "lock write delivered late",
            ExtraFault::DropAfterGrant => "guard dropped right after its grant",
            ExtraFault::ReleaseFailsThenResume => "release refused, same lock id asks again",
            ExtraFault::MultiUnknown => "multi attempts unknown, withdrawals refused",
            ExtraFault::LateUnlock => "unlock delivered late, same lock id asks again",
            ExtraFault::ClockStepInFlight => "server clock step while a grant's reply is held",
            ExtraFault::StepBackUnderHold => "server clock back past a let-go grant in its hold",
            ExtraFault::AdoptionRace => "restarted holder's adoption races its late release",
        }
    }

    /// The kind the history records it as: a late request (and a drop whose attempt may
    /// be late) and a late unlock as a blocked connection, whose command also runs on the
    /// server whenever the block ends; a refused release as an error reply (the command never ran); attempts
    /// answered with an error after they ran as a write concern error; a reply held back
    /// while the server's clock steps as latency.
    pub fn recorded_as(self) -> FaultKind {
        match self {
            ExtraFault::LateRequest | ExtraFault::DropAfterGrant | ExtraFault::LateUnlock => {
                FaultKind::BlockConnection
            }
            ExtraFault::ReleaseFailsThenResume => FaultKind::StepDownError,
            ExtraFault::AdoptionRace => FaultKind::BlockConnection,
            ExtraFault::MultiUnknown => FaultKind::WriteConcernError,
            ExtraFault::ClockStepInFlight | ExtraFault::StepBackUnderHold => FaultKind::Latency,
        }
    }
}

/// How one [`ExtraFault`] aimed at a client ended, as the client saw it.
#[derive(Debug, Clone)]
pub struct ExtraLog {
    /// What it was.
    pub kind: ExtraFault,
    /// The client it hit.
    pub client: usize,
    /// When it was carried out (or given up).
    pub at: Instant,
    /// How it ended, in a few words (the report counts each wording).
    pub ended: String,
}

/// What a value the library returned says, as the history records it.
pub trait FromLibrary<T: ?Sized> {
    /// The history's reading of `value`.
    fn of(value: &T) -> Self;
}

impl FromLibrary<LockGuard> for Access {
    /// The access a guard holds.
    fn of(guard: &LockGuard) -> Self {
        match guard.kind() {
            LockKind::Exclusive => Access::Exclusive,
            _ => Access::Shared,
        }
    }
}

impl FromLibrary<LossReason> for LossKind {
    /// How the library says the lease was lost.
    fn of(reason: &LossReason) -> Self {
        match reason {
            LossReason::Deadline => LossKind::Deadline,
            LossReason::Revoked => LossKind::Revoked,
            _ => LossKind::Other,
        }
    }
}

impl FromLibrary<mongolock::Result<()>> for ReleaseResult {
    /// What `result` (of `LockGuard::release`) says.
    fn of(result: &mongolock::Result<()>) -> Self {
        match result {
            Ok(()) => ReleaseResult::Ok,
            Err(error) => match error.kind() {
                ErrorKind::LeaseLost { reason, .. } => ReleaseResult::Lost(LossKind::of(reason)),
                _ => ReleaseResult::Failed,
            },
        }
    }
}

impl FromLibrary<mongolock::Result<()>> for ProclaimOutcome {
    /// What `result` (of `Leadership::proclaim`) says.
    fn of(result: &mongolock::Result<()>) -> Self {
        match result {
            Ok(()) => ProclaimOutcome::Ok,
            Err(error) if matches!(error.kind(), ErrorKind::LeaseLost { .. }) => {
                ProclaimOutcome::Lost
            }
            Err(_) => ProclaimOutcome::Failed,
        }
    }
}

impl FromLibrary<mongolock::Leader> for SeenLeader {
    /// What `leader` (as the library returns it) says.
    fn of(leader: &mongolock::Leader) -> Self {
        SeenLeader {
            term: leader.term(),
            value: leader.value().to_owned(),
            lock_id: leader.lock_id().to_owned(),
        }
    }
}

/// A [`HolderLog`] kept from a live guard.
pub trait GuardLog {
    /// A log, with id `id`, for a guard granted now.
    fn new(id: u64, client: usize, mode: Mode, invoked_at: Instant, guard: &LockGuard) -> Self;

    /// Records the guard's local deadline now, if it still holds.
    fn sample(&mut self, guard: &LockGuard);

    /// Records a notice if the guard says it is lost now; true if it is.
    fn check_lost(&mut self, guard: &LockGuard) -> bool;
}

impl GuardLog for HolderLog {
    fn new(id: u64, client: usize, mode: Mode, invoked_at: Instant, guard: &LockGuard) -> Self {
        let held = guard.grant().holder();
        let mut log = HolderLog {
            access: Access::of(guard),
            lock_id: guard.lock_id().to_owned(),
            ttl: held.ttl(),
            lock_delay: held.lock_delay(),
            server_granted_ms: Some(held.created_at().timestamp_millis()),
            server_expires_ms: held.expires_at().map(|e| e.timestamp_millis()),
            invoked_at,
            attempt_sent_at: guard.attempt_sent_at(),
            ..HolderLog::granted(id, client, mode, guard.resource(), guard.fencing_token())
        };
        log.sample(guard);
        log
    }

    fn sample(&mut self, guard: &LockGuard) {
        if guard.is_lost() {
            return;
        }
        self.observe_deadline(Instant::now() + guard.time_left());
    }

    fn check_lost(&mut self, guard: &LockGuard) -> bool {
        match guard.state() {
            LeaseState::Lost(reason) => {
                self.notice(Instant::now(), LossKind::of(&reason));
                true
            }
            _ => false,
        }
    }
}

/// Watches `guard` until `until`: races `guard.lost()` in 10 ms slices, sampling its local
/// deadline between them. Returns when the holder learnt of the loss (recorded as a notice)
/// if it came first.
///
/// # Cancel safety
/// Cancel safe: a cancelled watch has recorded every sample and notice it made.
pub async fn watch_until(
    log: &mut HolderLog,
    guard: &LockGuard,
    until: Instant,
) -> Option<Instant> {
    while Instant::now() < until {
        match tokio::time::timeout(Duration::from_millis(10), guard.lost()).await {
            Ok(reason) => {
                let now = Instant::now();
                log.notice(now, LossKind::of(&reason));
                return Some(now);
            }
            Err(_) => log.sample(guard),
        }
    }
    None
}

/// One step of an honest holder's work: unless the guard says it is lost, writes to
/// `record` with the guard's token, then watches the guard until `step_end`
/// ([`watch_until`]). Returns true, with the notice recorded, if the lease was lost.
///
/// # Cancel safety
/// Cancel safe, as [`watch_until`]: the write, if made, is logged before the watch.
pub async fn work_step(
    log: &mut HolderLog,
    guard: &LockGuard,
    record: &GuardedRecord,
    step_end: Instant,
) -> bool {
    if log.check_lost(guard) {
        return true;
    }
    record.write_for(log, guard.fencing_token());
    watch_until(log, guard, step_end).await.is_some()
}

#[derive(Debug, Default)]
struct RecordState {
    /// The highest token of an accepted write.
    highest: Option<i64>,
    /// The highest token of an accepted read (reader-writer resources).
    highest_read: Option<i64>,
    entries: Vec<RecordEntry>,
}

/// The in-process store the locks protect: one record per resource, shared by every
/// worker, fenced by tokens as a real store would be.
///
/// - A mutex, a group or multi-lock member, an election (its leader writes with its term):
///   a write is rejected if its token is lower than the highest accepted.
/// - A semaphore: every write is accepted (concurrent permit holders are fine; the checker
///   counts them against the cap instead).
/// - A reader-writer lock: a reader's read is rejected if a write with a higher token was
///   accepted (the reader would see a writer's work while it believes no writer holds); a
///   writer's write is rejected if a write or a read with a higher token was accepted.
#[derive(Debug, Default)]
pub struct GuardedRecord {
    records: Mutex<HashMap<String, RecordState>>,
}

impl GuardedRecord {
    /// Writes `value` with `token` to `resource`'s record (for a reader: reads it); returns
    /// when it was taken and whether it was accepted.
    pub fn write(
        &self,
        resource: &str,
        mode: Mode,
        access: Access,
        holder: u64,
        token: i64,
    ) -> (Instant, bool) {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let record = records.entry(resource.to_owned()).or_default();
        let at = Instant::now();
        let above = |bound: Option<i64>| bound.is_none_or(|h| token >= h);
        let accepted = match (mode, access) {
            (Mode::Shared { .. }, _) => true,
            (Mode::ReadWrite, Access::Shared) => above(record.highest),
            (Mode::ReadWrite, Access::Exclusive) => {
                above(record.highest) && above(record.highest_read)
            }
            (Mode::Exclusive | Mode::Group | Mode::Multi | Mode::Election, _) => {
                above(record.highest)
            }
        };
        if accepted && !matches!(mode, Mode::Shared { .. }) {
            let slot = match access {
                Access::Exclusive => &mut record.highest,
                Access::Shared => &mut record.highest_read,
            };
            *slot = Some(slot.map_or(token, |h| h.max(token)));
        }
        record.entries.push(RecordEntry {
            at,
            holder,
            token,
            access,
            accepted,
        });
        (at, accepted)
    }

    /// Writes (or, for a reader, reads) on behalf of `log` with `token`, and logs the write
    /// in it.
    pub fn write_for(&self, log: &mut HolderLog, token: i64) {
        let value = log.writes.len() as u64;
        let (at, accepted) = self.write(&log.resource, log.mode, log.access, log.id, token);
        log.writes.push(WriteLog {
            at,
            token,
            value,
            accepted,
        });
    }

    /// Every write so far, by resource, in the order the record took them.
    pub fn entries(&self) -> HashMap<String, Vec<RecordEntry>> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records
            .iter()
            .map(|(r, s)| (r.clone(), s.entries.clone()))
            .collect()
    }
}

#[derive(Debug, Default)]
struct Inner {
    holders: Vec<HolderLog>,
    ops: Vec<OpEvent>,
    attempts: u64,
    timeouts: u64,
    errors: u64,
    liveness: Vec<String>,
    faults: Vec<FaultEvent>,
    writer_waits: Vec<WriterWait>,
    healed_at: Option<Instant>,
    nemeses: Vec<NemesisLog>,
    acquire_calls: Vec<AcquireCall>,
    server_clock: Vec<(Instant, i64)>,
    server_offsets: Vec<(Instant, i64)>,
    set_events: Vec<(Instant, String)>,
    campaigns: Vec<CampaignLog>,
    proclaims: Vec<ProclaimLog>,
    observations: Vec<Observation>,
    observer_errors: u64,
    final_reads: Vec<FinalRead>,
    extras: Vec<ExtraLog>,
    min_holds: HashMap<u64, Duration>,
    /// When a worker first went for each resource after healing.
    asked_after_healing: HashMap<String, Instant>,
}

/// Collects the history while a run goes on; shared by every client thread.
#[derive(Debug, Default, Clone)]
pub struct Recorder {
    inner: Arc<Mutex<Inner>>,
    next_id: Arc<AtomicU64>,
    /// The guarded record the workers write to.
    pub record: Arc<GuardedRecord>,
    /// Added to every reading of the server's clock ([`Recorder::set_reading_offset`]).
    reading_offset_ms: Arc<AtomicI64>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A fresh holder id.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Adds a finished holder's log.
    pub fn holder(&self, mut log: HolderLog) {
        // Its calls have all returned: a release refused as lost said so by now.
        log.logged_at.get_or_insert_with(Instant::now);
        self.with(|i| i.holders.push(log));
    }

    /// Adds an operator action.
    pub fn op(&self, kind: OpKind, start: Instant, end: Instant) {
        self.with(|i| i.ops.push(OpEvent { kind, start, end }));
    }

    /// The operator actions and moves of the server's clock recorded so far.
    pub fn ops(&self) -> Vec<OpEvent> {
        self.with(|i| i.ops.clone())
    }

    /// Counts an acquire call and how it ended: granted, timed out, or failed.
    pub fn attempt(&self, timed_out: bool, failed: bool) {
        self.with(|i| {
            i.attempts += 1;
            i.timeouts += u64::from(timed_out);
            i.errors += u64::from(failed);
        });
    }

    /// Records a liveness problem.
    pub fn liveness(&self, problem: String) {
        self.with(|i| i.liveness.push(problem));
    }

    /// Records a fault as carried out.
    pub fn fault(&self, kind: FaultKind, client: Option<usize>, start: Instant, end: Instant) {
        self.with(|i| {
            i.faults.push(FaultEvent {
                kind,
                client,
                start,
                end,
            })
        });
    }

    /// Records how a fault of the harness's own ended ([`ExtraFault`]).
    pub fn extra(&self, kind: ExtraFault, client: usize, ended: impl Into<String>) {
        let log = ExtraLog {
            kind,
            client,
            at: Instant::now(),
            ended: ended.into(),
        };
        self.with(|i| i.extras.push(log));
    }

    /// Records that holder `id` asked for a minimum hold of `hold` (`LockDetails::min_hold`):
    /// what the oracle's (S12) holds the server to.
    pub fn min_hold(&self, id: u64, hold: Duration) {
        self.with(|i| i.min_holds.insert(id, hold));
    }

    /// The log of a mutex holder's grant `guard`, whose call began at `invoked`, in client
    /// slot `client`: its minimum hold `hold` recorded (what its call asked for), and its
    /// first write to the guarded record made unless the guard says it is lost already.
    pub fn job_holder(
        &self,
        client: usize,
        invoked: Instant,
        guard: &LockGuard,
        hold: Duration,
    ) -> HolderLog {
        let mut log = HolderLog::new(self.next_id(), client, Mode::Exclusive, invoked, guard);
        self.min_hold(log.id, hold);
        if !log.check_lost(guard) {
            self.record.write_for(&mut log, guard.fencing_token());
        }
        log
    }

    /// The minimum holds asked for so far, by holder id ([`Recorder::min_hold`]).
    pub fn min_holds(&self) -> HashMap<u64, Duration> {
        self.with(|i| i.min_holds.clone())
    }

    /// What [`Recorder::extra`] recorded so far.
    pub fn extras(&self) -> Vec<ExtraLog> {
        self.with(|i| i.extras.clone())
    }

    /// Records a writer's wait.
    pub fn writer_wait(&self, wait: WriterWait) {
        self.with(|i| i.writer_waits.push(wait));
    }

    /// Records a nemesis carried out, and how it ended.
    pub fn nemesis(&self, log: NemesisLog) {
        self.with(|i| i.nemeses.push(log));
    }

    /// Records an acquire call made through a handle.
    pub fn acquire_call(&self, call: AcquireCall) {
        self.with(|i| i.acquire_calls.push(call));
    }

    /// Records a reading `ms` of the server's clock (ms since the epoch) taken at `at`.
    pub fn server_clock(&self, at: Instant, ms: i64) {
        let ms = ms + self.reading_offset_ms.load(Ordering::SeqCst);
        self.with(|i| i.server_clock.push((at, ms)));
    }

    /// Sets how far the server's clock the history means reads ahead of (negative: behind)
    /// the clock the readings are taken from, in ms (zero by default), from our instant `at`
    /// on. On a replica set the harness reads the set's shared clock and means the
    /// primary's, which reads its own offset ahead of it ([`crate::replset`]); the history
    /// keeps each offset with its instant ([`History::server_offsets`]), so the checks can
    /// tell the server times of two primaries apart.
    pub fn set_reading_offset(&self, at: Instant, offset_ms: i64) {
        self.reading_offset_ms.store(offset_ms, Ordering::SeqCst);
        self.with(|i| i.server_offsets.push((at, offset_ms)));
    }

    /// Logs what the failover nemesis did to the set at our instant `at`, in words
    /// ([`History::set_events`]).
    pub fn set_event(&self, at: Instant, what: String) {
        self.with(|i| i.set_events.push((at, what)));
    }

    /// The server's clock at our instant `t`, from the readings so far (see
    /// [`History::server_ms`]).
    pub fn server_ms(&self, t: Instant) -> Option<i64> {
        let mut readings = History::new(t);
        readings.server_clock = self.with(|i| i.server_clock.clone());
        readings.server_ms(t)
    }

    /// Records a campaign as it begins.
    pub fn campaign(&self, log: CampaignLog) {
        self.with(|i| i.campaigns.push(log));
    }

    /// Records a leader's proclaim.
    pub fn proclaim(&self, log: ProclaimLog) {
        self.with(|i| i.proclaims.push(log));
    }

    /// Records what an observer reported.
    pub fn observation(&self, observation: Observation) {
        self.with(|i| i.observations.push(observation));
    }

    /// Counts an error an observer met.
    pub fn observer_error(&self) {
        self.with(|i| i.observer_errors += 1);
    }

    /// Records a fresh read of an election's leader at the end of a run.
    pub fn final_read(&self, read: FinalRead) {
        self.with(|i| i.final_reads.push(read));
    }

    /// The observations received so far.
    pub fn observations(&self) -> Vec<Observation> {
        self.with(|i| i.observations.clone())
    }

    /// Records when every fault was healed.
    pub fn healed(&self, at: Instant) {
        self.with(|i| i.healed_at = Some(at));
    }

    /// True once every fault was healed.
    pub fn is_healed(&self) -> bool {
        self.with(|i| i.healed_at.is_some())
    }

    /// Records that a worker goes for `resources` now; what counts is the first time after
    /// healing (see [`first_asked`](Self::first_asked)).
    pub fn asked(&self, resources: impl IntoIterator<Item = String>) {
        let now = Instant::now();
        self.with(|i| {
            if i.healed_at.is_some() {
                for resource in resources {
                    i.asked_after_healing.entry(resource).or_insert(now);
                }
            }
        });
    }

    /// When a worker first went for one of `resources` after healing, if one did yet.
    pub fn first_asked(&self, resources: &[String]) -> Option<Instant> {
        self.with(|i| {
            (resources.iter())
                .filter_map(|r| i.asked_after_healing.get(r).copied())
                .min()
        })
    }

    /// Holders granted after `after` on `resource` so far.
    pub fn grants_after(&self, resource: &str, after: Instant) -> usize {
        self.with(|i| {
            i.holders
                .iter()
                .filter(|h| h.resource == resource && h.granted_at > after)
                .count()
        })
    }

    /// The history so far, for the resources in `modes`.
    pub fn finish(&self, modes: HashMap<String, Mode>) -> History {
        let record = self.record.entries();
        self.with(|i| History {
            holders: i.holders.clone(),
            ops: i.ops.clone(),
            record,
            modes,
            attempts: i.attempts,
            timeouts: i.timeouts,
            errors: i.errors,
            liveness: i.liveness.clone(),
            faults: i.faults.clone(),
            writer_waits: i.writer_waits.clone(),
            healed_at: i.healed_at,
            nemeses: i.nemeses.clone(),
            acquire_calls: i.acquire_calls.clone(),
            server_clock: i.server_clock.clone(),
            server_offsets: i.server_offsets.clone(),
            set_events: i.set_events.clone(),
            campaigns: i.campaigns.clone(),
            proclaims: i.proclaims.clone(),
            observations: i.observations.clone(),
            observer_errors: i.observer_errors,
            final_reads: i.final_reads.clone(),
            end: Instant::now(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_result_says_what_the_library_returned() {
        assert_eq!(ReleaseResult::of(&Ok(())), ReleaseResult::Ok);
        assert_eq!(LossKind::of(&LossReason::Revoked), LossKind::Revoked);
    }

    #[test]
    fn the_reader_writer_record_rejects_a_read_below_a_write_and_a_write_below_a_read() {
        let record = GuardedRecord::default();
        let rw = Mode::ReadWrite;
        assert!(record.write("r", rw, Access::Shared, 1, 10).1, "a read");
        assert!(
            record.write("r", rw, Access::Shared, 2, 11).1,
            "readers overlap"
        );
        assert!(
            record.write("r", rw, Access::Shared, 1, 10).1,
            "an older reader reads again"
        );
        assert!(
            !record.write("r", rw, Access::Exclusive, 3, 9).1,
            "a write below a read"
        );
        assert!(
            record.write("r", rw, Access::Exclusive, 4, 12).1,
            "a newer writer"
        );
        assert!(
            !record.write("r", rw, Access::Shared, 2, 11).1,
            "a read below a write"
        );
    }
}
