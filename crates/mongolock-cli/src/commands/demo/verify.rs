//! The verification: turns the event log into the history the shared checker reads
//! ([`mongolock_testkit::checker`], the reliability harness's checker too), runs it, and
//! reports from its outcome.
//!
//! A hold is a holder of the history ([`HolderLog`]): it believes it holds from the moment
//! its `acquire` returned until its worker called `release` or was told the lease was lost;
//! a worker that crashed is taken as told at its lease's end by its own clock (when it would
//! have been told, had it lived); a worker cut off and never told believes until the end.
//! The checker judges, among its promises:
//!
//! - exclusion on the mutex and the rwlock (a writer alone, readers only), and the
//!   semaphore's cap ((1) and (4));
//! - each takeover (the first conflicting grant to another holder after a hold that ended by
//!   a loss) came after that hold was told (3): compared with the server's grant time where
//!   the server's clock can be read on this machine's clock (the emulator), else with the
//!   time the grant reached the worker;
//! - the guarded store took tokens in order only (never one smaller than the one before), and never refused a write from
//!   a holder that had not been told it lost its lease ((1) guarded writes); tokens are
//!   unique and increase with the grants (2);
//! - no worker believed it held past its local deadline (3): the cut-off worker watches it,
//!   so one never told is caught.
//!
//! The demo adds its own figures (the most holders at once come from the checker; handoffs,
//! here, are grants to a worker other than the one of the grant before on the lock) and one
//! check of its own, which the harness has no need of: the MongoDB store holds as many
//! accepted writes as the workers saw accepted. The writes a cut-off worker makes on
//! purpose with its lost lease's token are shown, not checked: they are the demonstration of
//! fencing, and a holder that writes after its loss is what the checker would flag.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use mongolock_testkit::checker::check::{self, Check, Outcome};
use mongolock_testkit::checker::history::{
    Access, History, HolderLog, LetGo, LossKind, Mode as Locked, RecordEntry, WriteLog,
};
use serde::Serialize;

use super::log::{Entry, GPU_PERMITS, Lock, Log, Mode, What};

/// One lock's figures.
#[derive(Debug, Serialize)]
pub(crate) struct LockReport {
    /// The lock's name.
    pub(crate) name: &'static str,
    /// `mutex`, `semaphore` or `rwlock`.
    pub(crate) kind: &'static str,
    /// The most holders allowed at once (for the rwlock: writers).
    pub(crate) limit: u32,
    /// How many grants.
    pub(crate) grants: usize,
    /// Grants to a worker other than the one of the grant before.
    pub(crate) handoffs: usize,
    /// The most holders at once, of any kind.
    pub(crate) max_concurrent: usize,
    /// For the rwlock: the most readers at once.
    pub(crate) max_readers: Option<usize>,
    /// For the rwlock: the most writers at once.
    pub(crate) max_writers: Option<usize>,
    /// For the rwlock: whether a writer ever held it together with anyone.
    pub(crate) writer_shared: Option<bool>,
    /// Whether the lock kept its promise.
    pub(crate) ok: bool,
}

/// One guarded record's figures.
#[derive(Debug, Serialize)]
pub(crate) struct StoreReport {
    /// The lock whose holders write it.
    pub(crate) lock: &'static str,
    /// Writes the store took.
    pub(crate) accepted: usize,
    /// Whether no token it took was smaller than the one before.
    pub(crate) increasing: bool,
}

/// The fencing figures.
#[derive(Debug, Serialize)]
pub(crate) struct FencingReport {
    /// Per guarded record.
    pub(crate) records: Vec<StoreReport>,
    /// Whether no accepted write carried a smaller token than the one before, everywhere.
    pub(crate) tokens_increasing: bool,
    /// Writes refused although their holder had not been told it lost the lease (a broken
    /// promise: someone newer was granted the lock while it held it).
    pub(crate) refused_from_live_holders: usize,
    /// Writes made on purpose with a lost lease's token.
    pub(crate) stale_writes: usize,
    /// Of those, how many the store refused.
    pub(crate) stale_writes_refused: usize,
}

/// One lease that ended without a release, and who took the lock next.
#[derive(Debug, Serialize)]
pub(crate) struct LossReport {
    /// The worker that lost it.
    pub(crate) worker: String,
    /// The lock.
    pub(crate) lock: String,
    /// `cut off`, `crashed`, `lost` (an ordinary worker) or `never told`.
    pub(crate) how: &'static str,
    /// Seconds from the start to when it was told (crashed: when its lease ran out by its
    /// own clock).
    pub(crate) ended_at_s: Option<f64>,
    /// The worker that took the lock over.
    pub(crate) taken_over_by: Option<String>,
    /// Seconds from the start to the takeover's grant.
    pub(crate) taken_over_at_s: Option<f64>,
    /// `server` (the grant time by the server's clock) or `reply` (when the grant reached
    /// the worker: the server's clock cannot be compared with this machine's).
    pub(crate) takeover_clock: &'static str,
    /// Whether the loss came first; `None` if nobody took the lock over before the end.
    pub(crate) before_takeover: Option<bool>,
}

/// The whole verification, printed as text or as one JSON object.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// Every promise held.
    pub(crate) ok: bool,
    /// `emulator` or `uri`.
    pub(crate) server: &'static str,
    /// Workers.
    pub(crate) workers: usize,
    /// Seconds the demo ran.
    pub(crate) seconds: f64,
    /// The leases' TTL, in milliseconds.
    pub(crate) lease_ttl_ms: u64,
    /// Handoffs, all locks together.
    pub(crate) handoffs: usize,
    /// Takeovers of a lease lost without a release.
    pub(crate) takeovers: usize,
    /// Per lock.
    pub(crate) locks: Vec<LockReport>,
    /// The guarded store.
    pub(crate) fencing: FencingReport,
    /// Leases that ended without a release.
    pub(crate) losses: Vec<LossReport>,
    /// Whether every loss was signalled (or, crashed, ran out) before the takeover.
    pub(crate) losses_before_takeover: bool,
    /// Parts of the demo that did not run, and why.
    pub(crate) skipped: Vec<String>,
    /// Every broken promise, in words.
    pub(crate) violations: Vec<String>,
}

/// How `lock` is locked, as the checker sees it.
fn locked(lock: Lock) -> Locked {
    match lock {
        Lock::Report => Locked::Exclusive,
        Lock::Gpu => Locked::Shared {
            permits: GPU_PERMITS,
        },
        Lock::Config => Locked::ReadWrite,
    }
}

/// What a hold in `mode` holds.
fn access(mode: Mode) -> Access {
    match mode {
        Mode::Mutex | Mode::Write => Access::Exclusive,
        Mode::Permit | Mode::Read => Access::Shared,
    }
}

/// The history of the demo, from its event log (`deadlines`: the local deadlines the
/// watching workers noted), as the checker reads it. Writes made on purpose with a lost
/// lease's token are left out (see the module docs).
fn history(entries: &[Entry], deadlines: &HashMap<u64, Instant>, finish: Instant) -> History {
    let mut history = History::new(finish);
    history.modes = Lock::ALL
        .iter()
        .map(|&lock| (lock.name().to_owned(), locked(lock)))
        .collect();
    let mut holders: BTreeMap<u64, HolderLog> = BTreeMap::new();
    for entry in entries {
        match &entry.what {
            What::Acquired {
                mode,
                token,
                lock_id,
                invoked_at,
                sent_at,
                granted_at,
            } => {
                let mut log = HolderLog::granted(
                    entry.hold,
                    entry.worker,
                    locked(entry.lock),
                    entry.lock.name(),
                    *token,
                );
                log.access = access(*mode);
                log.lock_id = lock_id.clone();
                log.invoked_at = *invoked_at;
                log.attempt_sent_at = *sent_at;
                log.granted_at = entry.at;
                log.server_granted_at = *granted_at;
                log.ttl = Some(super::workers::TTL);
                log.max_deadline = deadlines.get(&entry.hold).copied();
                holders.insert(entry.hold, log);
            }
            What::Wrote {
                token,
                accepted,
                late: false,
            } => {
                let Some(log) = holders.get_mut(&entry.hold) else {
                    continue;
                };
                log.writes.push(WriteLog {
                    at: entry.at,
                    token: *token,
                    value: log.writes.len() as u64,
                    accepted: *accepted,
                });
                history
                    .record
                    .entry(entry.lock.name().to_owned())
                    .or_default()
                    .push(RecordEntry {
                        at: entry.at,
                        holder: entry.hold,
                        token: *token,
                        access: log.access,
                        accepted: *accepted,
                    });
            }
            What::Released => {
                if let Some(log) = holders.get_mut(&entry.hold) {
                    log.released_at = Some(entry.at);
                    log.let_go = Some(LetGo::Released);
                }
            }
            What::Lost { kind, .. } => {
                if let Some(log) = holders.get_mut(&entry.hold) {
                    log.notice(entry.at, *kind);
                }
            }
            What::Crashed { lease_end } => {
                if let Some(log) = holders.get_mut(&entry.hold) {
                    log.notice(*lease_end, LossKind::Deadline);
                }
            }
            What::Wrote { late: true, .. }
            | What::Waiting { .. }
            | What::CutOff
            | What::NeverTold
            | What::Healed => {}
        }
    }
    history.holders = holders.into_values().collect();
    history
}

/// Grants to a worker other than the one of the grant before, on `resource`.
fn handoffs(history: &History, resource: &str) -> usize {
    let mut grants: Vec<&HolderLog> = history
        .holders
        .iter()
        .filter(|h| h.resource == resource)
        .collect();
    grants.sort_by_key(|h| (h.granted_at, h.id));
    grants
        .windows(2)
        .filter(|w| w[0].client != w[1].client)
        .count()
}

/// How a hold that did not release ended, in the report's words, from its events.
fn how(entries: &[Entry], hold: u64) -> Option<&'static str> {
    let mine = || entries.iter().filter(move |e| e.hold == hold);
    let has = |f: fn(&What) -> bool| mine().any(|e| f(&e.what));
    if has(|w| matches!(w, What::Released)) {
        None
    } else if has(|w| matches!(w, What::Crashed { .. })) {
        Some("crashed")
    } else if has(|w| matches!(w, What::NeverTold)) {
        Some("never told")
    } else if has(|w| matches!(w, What::Lost { .. })) {
        Some(if has(|w| matches!(w, What::CutOff)) {
            "cut off"
        } else {
            "lost"
        })
    } else {
        None
    }
}

/// Checks every promise.
pub(crate) fn verify(
    log: &Log,
    finish: Instant,
    accepted: &HashMap<Lock, Vec<i64>>,
    server: &'static str,
    workers: usize,
    skipped: Vec<String>,
) -> Report {
    let entries = log.entries();
    let history = history(&entries, &log.deadlines(), finish);
    let outcome = check::check(&history);
    report(
        &entries,
        &history,
        &outcome,
        accepted,
        log.start(),
        server,
        workers,
        skipped,
    )
}

/// The report of the checker's `outcome` on the demo's `history`, with the demo's own
/// figures and check.
#[allow(clippy::too_many_arguments)]
fn report(
    entries: &[Entry],
    history: &History,
    outcome: &Outcome,
    accepted: &HashMap<Lock, Vec<i64>>,
    start: Instant,
    server: &'static str,
    workers: usize,
    skipped: Vec<String>,
) -> Report {
    let mut violations: Vec<String> = outcome.violations.iter().map(|v| v.to_string()).collect();

    let mut locks = Vec::new();
    for lock in Lock::ALL {
        let name = lock.name();
        let most = outcome.at_once.get(name).copied().unwrap_or_default();
        let limit = match lock {
            Lock::Gpu => GPU_PERMITS,
            Lock::Report | Lock::Config => 1,
        };
        let is_rw = lock == Lock::Config;
        locks.push(LockReport {
            name,
            kind: lock.kind(),
            limit,
            grants: history
                .holders
                .iter()
                .filter(|h| h.resource == name)
                .count(),
            handoffs: handoffs(history, name),
            max_concurrent: most.holders,
            max_readers: is_rw.then_some(most.shared),
            max_writers: is_rw.then_some(most.exclusive),
            writer_shared: is_rw.then_some(most.exclusive_with_others),
            ok: !outcome.has_on(Check::Exclusion, name) && !outcome.has_on(Check::Caps, name),
        });
    }

    // Fencing: the checker's guarded writes, and the store's own count (the demo's check).
    let mut records = Vec::new();
    for lock in super::store::Store::GUARDED {
        let name = lock.name();
        let tokens = accepted.get(&lock).map_or(0, Vec::len);
        let logged = entries
            .iter()
            .filter(|e| e.lock == lock && matches!(e.what, What::Wrote { accepted: true, .. }))
            .count();
        if logged != tokens {
            violations.push(format!(
                "the {name} record holds {tokens} accepted writes, the workers saw {logged} accepted"
            ));
        }
        // Every guarded-writes violation on the record that is not a refusal is a token
        // taken out of order (or a holder's writes interleaved with another's).
        let guarded = outcome
            .violations
            .iter()
            .filter(|v| v.check == Check::GuardedWrites && v.resource.as_deref() == Some(name))
            .count();
        let refused = outcome.refused.get(name).copied().unwrap_or(0);
        records.push(StoreReport {
            lock: name,
            accepted: tokens,
            increasing: guarded == refused,
        });
    }
    let stale: Vec<bool> = entries
        .iter()
        .filter_map(|e| match e.what {
            What::Wrote {
                accepted,
                late: true,
                ..
            } => Some(accepted),
            _ => None,
        })
        .collect();
    let fencing = FencingReport {
        tokens_increasing: records.iter().all(|r| r.increasing),
        records,
        refused_from_live_holders: outcome.refused.values().sum(),
        stale_writes: stale.len(),
        stale_writes_refused: stale.iter().filter(|accepted| !**accepted).count(),
    };

    // Losses and takeovers, as the checker judged them.
    let server_clock = history
        .holders
        .iter()
        .any(|h| h.server_granted_at.is_some());
    let since = |at: Instant| at.saturating_duration_since(start).as_secs_f64();
    let clients: HashMap<u64, usize> = history.holders.iter().map(|h| (h.id, h.client)).collect();
    let mut losses = Vec::new();
    for holder in &history.holders {
        if matches!(holder.mode, Locked::Shared { .. }) {
            // Permits do not conflict one by one; the cap covers the semaphore.
            continue;
        }
        let Some(how) = how(entries, holder.id) else {
            continue;
        };
        let handover = outcome.handovers.iter().find(|h| h.from == holder.id);
        losses.push(LossReport {
            worker: format!("w{}", holder.client),
            lock: holder.resource.clone(),
            how,
            ended_at_s: holder.lost_at().map(since),
            taken_over_by: handover
                .map(|h| format!("w{}", clients.get(&h.to).copied().unwrap_or(0))),
            taken_over_at_s: handover.map(|h| since(h.granted_at)),
            takeover_clock: if server_clock { "server" } else { "reply" },
            before_takeover: handover.map(|h| h.in_time),
        });
    }

    Report {
        ok: violations.is_empty(),
        server,
        workers,
        seconds: history.end.saturating_duration_since(start).as_secs_f64(),
        lease_ttl_ms: super::workers::TTL.as_millis() as u64,
        handoffs: locks.iter().map(|l| l.handoffs).sum(),
        takeovers: losses.iter().filter(|l| l.taken_over_by.is_some()).count(),
        locks,
        fencing,
        losses_before_takeover: !outcome.has(Check::LossBeforeNextGrant)
            && !outcome.has(Check::LocalDeadline)
            && losses.iter().all(|l| l.before_takeover != Some(false)),
        losses,
        skipped,
        violations,
    }
}

impl Report {
    /// The human summary of one scene: one line per check, its verdict first, then each
    /// broken promise (the demo's last line, [`print_verdict`], comes after every scene).
    pub(crate) fn print_checks(&self) {
        use std::fmt::Write as _;
        let mut report = String::new();
        macro_rules! out {
            ($($arg:tt)*) => {{
                let _ = writeln!(report, $($arg)*);
            }};
        }
        let mark = |ok: bool| if ok { "ok    " } else { "BROKEN" };
        let info = "      ";
        let cont = "                  ";
        report.push('\n');
        out!("Verification, from the log of every grant, release and loss above:");
        let per_lock: Vec<String> = self
            .locks
            .iter()
            .map(|l| format!("{} {}", l.name, l.handoffs))
            .collect();
        out!(
            "  {info}  handoffs: {} ({}), {} of them takeovers of a lease lost without a release",
            self.handoffs,
            per_lock.join(", "),
            self.takeovers
        );
        for lock in &self.locks {
            let text = match lock.name {
                "config" => format!(
                    "max concurrent on config: {} writer at a time, never with a reader; up to {} readers together",
                    lock.max_writers.unwrap_or(0),
                    lock.max_readers.unwrap_or(0),
                ),
                _ => format!(
                    "max concurrent on {}: {} (a {} allows {})",
                    lock.name, lock.max_concurrent, lock.kind, lock.limit
                ),
            };
            out!("  {}  {text}", mark(lock.ok));
        }
        let f = &self.fencing;
        let accepted: usize = f.records.iter().map(|r| r.accepted).sum();
        out!(
            "  {}  fencing: {accepted} guarded writes accepted, none with a smaller token than the one before",
            mark(f.tokens_increasing)
        );
        out!(
            "  {}  fencing: {} writes refused from a holder whose lease was live",
            mark(f.refused_from_live_holders == 0),
            f.refused_from_live_holders
        );
        if f.stale_writes > 0 {
            out!(
                "  {info}  fencing: {} of {} writes with a lost lease's token refused",
                f.stale_writes_refused,
                f.stale_writes
            );
        }
        if self.losses.is_empty() {
            out!("  {info}  loss before takeover: no lease was lost");
        }
        for loss in &self.losses {
            let ended = loss
                .ended_at_s
                .map_or("never".to_owned(), |s| format!("{s:.3}s"));
            let what = match loss.how {
                "crashed" => format!(
                    "{} crashed holding {}; its lease ran out by its own clock at {ended}",
                    loss.worker, loss.lock
                ),
                "never told" => format!("{} was never told it lost {}", loss.worker, loss.lock),
                how => format!(
                    "{} ({how}) was told it lost {} at {ended}",
                    loss.worker, loss.lock
                ),
            };
            let clock = if loss.takeover_clock == "server" {
                "by the server's clock"
            } else {
                "when the reply arrived"
            };
            let next = match (&loss.taken_over_by, loss.taken_over_at_s, loss.ended_at_s) {
                (Some(who), Some(at), Some(ended)) => format!(
                    "{who} was granted it at {at:.3}s ({clock}), {:.3}s later",
                    at - ended
                ),
                (Some(who), Some(at), None) => {
                    format!("{who} was granted it at {at:.3}s ({clock})")
                }
                _ => "nobody took it over before the end".to_owned(),
            };
            let verdict = match loss.before_takeover {
                Some(ok) => mark(ok && loss.how != "never told"),
                None => info,
            };
            out!("  {verdict}  loss before takeover: {what};");
            out!("  {cont}{next}");
        }
        for skipped in &self.skipped {
            out!("  {info}  skipped: {skipped}");
        }
        for violation in &self.violations {
            out!("PROMISE BROKEN: {violation}");
        }
        super::log::emit(&mut std::io::stdout().lock(), report.trim_end());
    }
}

/// The demo's last line: whether every promise held, in every scene.
pub(crate) fn print_verdict(ok: bool) {
    let verdict = if ok {
        "\nall promises held"
    } else {
        "\nsome promises were BROKEN (above)"
    };
    super::log::emit(&mut std::io::stdout().lock(), verdict);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Builds event logs by hand, with times in ms after `t0`.
    struct Script {
        t0: Instant,
        entries: Vec<Entry>,
        deadlines: HashMap<u64, Instant>,
    }

    impl Script {
        fn new() -> Self {
            Script {
                t0: Instant::now(),
                entries: Vec::new(),
                deadlines: HashMap::new(),
            }
        }

        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }

        fn event(&mut self, ms: u64, worker: usize, lock: Lock, hold: u64, what: What) {
            let at = self.at(ms);
            self.entries.push(Entry {
                at,
                worker,
                lock,
                hold,
                what,
            });
        }

        /// Worker `worker` gets `lock` in `mode` as hold `hold` with `token`: its call at
        /// `ms` - 20, the server's grant at `ms` - 5, the reply at `ms`.
        fn acquired(&mut self, ms: u64, worker: usize, lock: Lock, mode: Mode, hold: u64) {
            let what = What::Acquired {
                mode,
                token: hold as i64,
                lock_id: format!("id-{hold}"),
                invoked_at: self.at(ms - 20),
                sent_at: self.at(ms - 10),
                granted_at: Some(self.at(ms - 5)),
            };
            self.event(ms, worker, lock, hold, what);
        }

        fn wrote(&mut self, ms: u64, worker: usize, lock: Lock, hold: u64, accepted: bool) {
            let what = What::Wrote {
                token: hold as i64,
                accepted,
                late: false,
            };
            self.event(ms, worker, lock, hold, what);
        }

        fn lost(&mut self, ms: u64, worker: usize, lock: Lock, hold: u64) {
            let what = What::Lost {
                reason: "deadline".into(),
                kind: LossKind::Deadline,
            };
            self.event(ms, worker, lock, hold, what);
        }

        /// The report, with the store holding what the log says it accepted.
        fn report(&self, finish: u64) -> Report {
            let history = history(&self.entries, &self.deadlines, self.at(finish));
            let outcome = check::check(&history);
            let mut accepted: HashMap<Lock, Vec<i64>> = HashMap::new();
            for e in &self.entries {
                if let What::Wrote {
                    token,
                    accepted: true,
                    ..
                } = e.what
                {
                    accepted.entry(e.lock).or_default().push(token);
                }
            }
            report(
                &self.entries,
                &history,
                &outcome,
                &accepted,
                self.t0,
                "emulator",
                3,
                Vec::new(),
            )
        }
    }

    /// w1 holds the report from 100 ms and is cut off; w2 holds it after.
    fn cut_off(told_at: u64, w2_at: u64) -> Script {
        let mut s = Script::new();
        s.acquired(100, 1, Lock::Report, Mode::Mutex, 1);
        s.wrote(150, 1, Lock::Report, 1, true);
        s.event(200, 1, Lock::Report, 1, What::CutOff);
        s.lost(told_at, 1, Lock::Report, 1);
        s.acquired(w2_at, 2, Lock::Report, Mode::Mutex, 2);
        s.wrote(w2_at + 50, 2, Lock::Report, 2, true);
        s.event(w2_at + 100, 2, Lock::Report, 2, What::Released);
        s
    }

    #[test]
    fn a_loss_told_before_the_takeover_keeps_every_promise() {
        let report = cut_off(1_000, 1_200).report(2_000);
        assert!(report.ok, "{:?}", report.violations);
        assert!(report.losses_before_takeover);
        assert_eq!(report.takeovers, 1);
        let loss = &report.losses[0];
        assert_eq!(
            (loss.how, loss.lock.as_str()),
            ("cut off", "nightly-report")
        );
        assert_eq!(loss.taken_over_by.as_deref(), Some("w2"));
        assert_eq!(loss.before_takeover, Some(true));
        assert_eq!(report.locks[0].max_concurrent, 1);
        assert_eq!(report.locks[0].handoffs, 1);
    }

    #[test]
    fn a_takeover_before_the_loss_was_told_is_a_broken_promise() {
        // The server granted w2 at 995 ms, before w1 was told at 1,000 ms (the reply came
        // at 1,000 ms: by the reply alone it would look in time).
        let report = cut_off(1_000, 1_000).report(2_000);
        assert!(!report.ok);
        assert!(!report.losses_before_takeover);
        assert_eq!(report.losses[0].before_takeover, Some(false));
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.starts_with(Check::LossBeforeNextGrant.name())),
            "{:?}",
            report.violations
        );
    }

    #[test]
    fn a_worker_never_told_is_a_broken_promise_even_if_nobody_took_over() {
        let mut s = Script::new();
        s.acquired(100, 1, Lock::Report, Mode::Mutex, 1);
        s.event(200, 1, Lock::Report, 1, What::CutOff);
        s.deadlines.insert(1, s.at(2_100));
        s.event(6_200, 1, Lock::Report, 1, What::NeverTold);
        let report = s.report(7_000);
        assert!(!report.ok);
        assert_eq!(report.losses[0].how, "never told");
        assert_eq!(report.losses[0].before_takeover, None);
        assert!(!report.losses_before_takeover);
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.starts_with(Check::LocalDeadline.name())),
            "{:?}",
            report.violations
        );
    }

    #[test]
    fn a_refused_write_and_a_third_permit_are_broken_promises() {
        let mut s = cut_off(1_000, 1_200);
        // w1 writes again after w2 did, without having been told: refused.
        s.wrote(1_300, 1, Lock::Report, 1, false);
        let report = s.report(2_000);
        assert_eq!(report.fencing.refused_from_live_holders, 1);
        assert!(report.fencing.tokens_increasing);
        assert!(!report.ok);

        let mut s = Script::new();
        for worker in 1..=3 {
            s.acquired(
                100 * worker as u64,
                worker,
                Lock::Gpu,
                Mode::Permit,
                worker as u64,
            );
        }
        let report = s.report(1_000);
        assert!(!report.ok);
        assert_eq!(report.locks[1].max_concurrent, 3);
        assert!(!report.locks[1].ok);
        assert!(report.locks[0].ok && report.locks[2].ok);
    }

    #[test]
    fn a_crashed_writer_counts_until_its_lease_ran_out() {
        let mut s = Script::new();
        s.acquired(100, 3, Lock::Config, Mode::Write, 1);
        let lease_end = s.at(2_400);
        s.event(500, 3, Lock::Config, 1, What::Crashed { lease_end });
        // A reader granted by the server at 2,385 ms, before the lease ran out, and told
        // at 2,390 ms.
        s.acquired(2_390, 1, Lock::Config, Mode::Read, 2);
        let report = s.report(3_000);
        assert!(!report.ok);
        assert_eq!(report.losses[0].how, "crashed");
        assert_eq!(report.losses[0].before_takeover, Some(false));
        assert!(!report.locks[2].ok, "the reader overlapped the writer");
        assert_eq!(report.locks[2].writer_shared, Some(true));
    }
}
