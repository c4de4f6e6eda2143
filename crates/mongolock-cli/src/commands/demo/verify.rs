//! The verification: rebuilds every hold from the event log, and checks each promise.
//!
//! A hold counts as holding from the moment its `acquire` returned until its worker called
//! `release`, was told the lease was lost, or, for a worker that crashed, until its lease ran
//! out by its own clock (when it would have been told). A worker cut off and never told holds
//! until the end. From these intervals:
//!
//! - the most holders at once, per lock (1 for the mutex, the permits for the semaphore, a
//!   writer alone or readers only for the rwlock);
//! - handoffs: a grant to a worker other than the one of the grant before, per lock;
//! - each takeover (the first conflicting grant to someone else after a hold that ended
//!   without a release) must come after that hold was told it lost the lease (or, crashed,
//!   after its lease ran out): compared with the server's grant time where the server's
//!   clock can be read on this machine's clock (the emulator), else with the time the grant
//!   reached the worker;
//! - the guarded store accepted tokens in increasing order only, and never refused a write
//!   from a holder that had not been told it lost its lease.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use serde::Serialize;

use super::log::{Entry, GPU_PERMITS, Lock, Log, Mode, What};

/// How a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Its worker called release.
    Released,
    /// Its worker was told the lease was lost.
    Lost,
    /// Its worker crashed; the lease ran out by its own clock.
    Crashed,
    /// Its worker was cut off and never told.
    NeverTold,
    /// Still held when the log was read (counted until then).
    Open,
}

/// One grant to one worker, rebuilt from the log.
#[derive(Debug, Clone)]
struct Hold {
    /// The hold's id in the log.
    id: u64,
    /// The worker holding it.
    worker: usize,
    /// The lock.
    lock: Lock,
    /// How it held it.
    mode: Mode,
    /// When `acquire` returned.
    start: Instant,
    /// When the server granted it (its clock mapped on ours), or `start`.
    granted: Instant,
    /// When it stopped holding (see [`End`]).
    end: Instant,
    /// How it ended.
    how: End,
}

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
    /// Whether each token it took was larger than the one before.
    pub(crate) increasing: bool,
}

/// The fencing figures.
#[derive(Debug, Serialize)]
pub(crate) struct FencingReport {
    /// Per guarded record.
    pub(crate) records: Vec<StoreReport>,
    /// Whether every accepted write carried a larger token than the last, everywhere.
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
    pub(crate) lock: &'static str,
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

/// Rebuilds the holds from the log.
fn holds(entries: &[Entry], finish: Instant) -> Vec<Hold> {
    let mut holds: BTreeMap<u64, Hold> = BTreeMap::new();
    for entry in entries {
        match &entry.what {
            What::Acquired {
                mode, granted_at, ..
            } => {
                holds.insert(
                    entry.hold,
                    Hold {
                        id: entry.hold,
                        worker: entry.worker,
                        lock: entry.lock,
                        mode: *mode,
                        start: entry.at,
                        granted: granted_at.unwrap_or(entry.at),
                        end: finish,
                        how: End::Open,
                    },
                );
            }
            What::Released | What::Lost { .. } | What::Crashed { .. } | What::NeverTold => {
                let Some(hold) = holds.get_mut(&entry.hold) else {
                    continue;
                };
                if hold.how != End::Open {
                    continue;
                }
                (hold.end, hold.how) = match &entry.what {
                    What::Released => (entry.at, End::Released),
                    What::Lost { .. } => (entry.at, End::Lost),
                    What::Crashed { lease_end } => (*lease_end, End::Crashed),
                    _ => (finish, End::NeverTold),
                };
            }
            What::Wrote { .. } | What::Waiting { .. } | What::CutOff | What::Healed => {}
        }
    }
    holds.into_values().collect()
}

/// The most holders at once of `lock`: (all, readers, writers, whether a writer ever held
/// it with someone else).
fn concurrency(holds: &[&Hold]) -> (usize, usize, usize, bool) {
    // Ends sort before starts at the same instant: a hold that ends when another starts does
    // not overlap it.
    let mut points: Vec<(Instant, i8, Mode)> = Vec::new();
    for hold in holds {
        points.push((hold.start, 1, hold.mode));
        points.push((hold.end.max(hold.start), -1, hold.mode));
    }
    points.sort_by_key(|(at, delta, _)| (*at, *delta));
    let (mut readers, mut writers, mut others) = (0_i64, 0_i64, 0_i64);
    let (mut max_all, mut max_readers, mut max_writers, mut writer_shared) = (0, 0, 0, false);
    for (_, delta, mode) in points {
        let delta = i64::from(delta);
        match mode {
            Mode::Read => readers += delta,
            Mode::Write => writers += delta,
            Mode::Mutex | Mode::Permit => others += delta,
        }
        max_all = max_all.max((readers + writers + others) as usize);
        max_readers = max_readers.max(readers as usize);
        max_writers = max_writers.max(writers as usize);
        if writers > 0 && readers + writers > 1 {
            writer_shared = true;
        }
    }
    (max_all, max_readers, max_writers, writer_shared)
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
    let holds = holds(&entries, finish);
    let mut violations = Vec::new();

    let mut locks = Vec::new();
    for lock in Lock::ALL {
        let mut mine: Vec<&Hold> = holds.iter().filter(|h| h.lock == lock).collect();
        mine.sort_by_key(|h| h.start);
        let handoffs = mine
            .windows(2)
            .filter(|w| w[0].worker != w[1].worker)
            .count();
        let (max_all, max_readers, max_writers, writer_shared) = concurrency(&mine);
        let (limit, ok) = match lock {
            Lock::Report => (1, max_all <= 1),
            Lock::Gpu => (GPU_PERMITS, max_all <= GPU_PERMITS as usize),
            Lock::Config => (1, max_writers <= 1 && !writer_shared),
        };
        if !ok {
            violations.push(match lock {
                Lock::Config => format!(
                    "{}: a writer held it together with someone else (max writers {max_writers})",
                    lock.name()
                ),
                _ => format!(
                    "{}: {max_all} holders at once, more than {limit}",
                    lock.name()
                ),
            });
        }
        let is_rw = lock == Lock::Config;
        locks.push(LockReport {
            name: lock.name(),
            kind: lock.kind(),
            limit,
            grants: mine.len(),
            handoffs,
            max_concurrent: max_all,
            max_readers: is_rw.then_some(max_readers),
            max_writers: is_rw.then_some(max_writers),
            writer_shared: is_rw.then_some(writer_shared),
            ok,
        });
    }

    // Fencing.
    let mut records = Vec::new();
    for lock in super::store::Store::GUARDED {
        let tokens = accepted.get(&lock).cloned().unwrap_or_default();
        let increasing = tokens.windows(2).all(|w| w[0] < w[1]);
        if !increasing {
            violations.push(format!(
                "the {} record accepted a token not larger than the one before",
                lock.name()
            ));
        }
        let logged = entries
            .iter()
            .filter(|e| e.lock == lock && matches!(e.what, What::Wrote { accepted: true, .. }))
            .count();
        if logged != tokens.len() {
            violations.push(format!(
                "the {} record holds {} accepted writes, the workers saw {logged} accepted",
                lock.name(),
                tokens.len()
            ));
        }
        records.push(StoreReport {
            lock: lock.name(),
            accepted: tokens.len(),
            increasing,
        });
    }
    let refused_from_live_holders = entries
        .iter()
        .filter(|e| {
            matches!(
                e.what,
                What::Wrote {
                    accepted: false,
                    late: false,
                    ..
                }
            )
        })
        .count();
    if refused_from_live_holders > 0 {
        violations.push(format!(
            "{refused_from_live_holders} write(s) refused while their holder still held the lock: someone newer had it too"
        ));
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
        refused_from_live_holders,
        stale_writes: stale.len(),
        stale_writes_refused: stale.iter().filter(|accepted| !**accepted).count(),
    };

    // Losses and takeovers.
    let cut: Vec<u64> = entries
        .iter()
        .filter(|e| matches!(e.what, What::CutOff))
        .map(|e| e.hold)
        .collect();
    let server_clock = entries.iter().any(|e| {
        matches!(
            e.what,
            What::Acquired {
                granted_at: Some(_),
                ..
            }
        )
    });
    let mut losses = Vec::new();
    for hold in &holds {
        if matches!(hold.how, End::Released | End::Open) {
            continue;
        }
        if hold.lock == Lock::Gpu {
            // Permits do not conflict one by one; the count above covers the semaphore.
            continue;
        }
        let how = match hold.how {
            End::Crashed => "crashed",
            End::NeverTold => "never told",
            _ if cut.contains(&hold.id) => "cut off",
            _ => "lost",
        };
        let next = holds
            .iter()
            .filter(|h| {
                h.lock == hold.lock
                    && h.worker != hold.worker
                    && h.start > hold.start
                    && h.mode.conflicts(hold.mode)
            })
            .min_by_key(|h| h.start);
        let ended = (hold.how != End::NeverTold).then_some(hold.end);
        let before = next.map(|n| ended.is_some_and(|e| e < n.granted));
        if before == Some(false) {
            violations.push(format!(
                "w{} ({how}) on {}: w{} was granted it before w{}'s lease had ended",
                hold.worker,
                hold.lock.name(),
                next.map_or(0, |n| n.worker),
                hold.worker
            ));
        }
        if hold.how == End::NeverTold {
            violations.push(format!(
                "w{} was never told it lost {}",
                hold.worker,
                hold.lock.name()
            ));
        }
        let since = |at: Instant| at.saturating_duration_since(log.start()).as_secs_f64();
        losses.push(LossReport {
            worker: format!("w{}", hold.worker),
            lock: hold.lock.name(),
            how,
            ended_at_s: ended.map(since),
            taken_over_by: next.map(|n| format!("w{}", n.worker)),
            taken_over_at_s: next.map(|n| since(n.granted)),
            takeover_clock: if server_clock { "server" } else { "reply" },
            before_takeover: before,
        });
    }

    Report {
        ok: violations.is_empty(),
        server,
        workers,
        seconds: finish.saturating_duration_since(log.start()).as_secs_f64(),
        lease_ttl_ms: super::workers::TTL.as_millis() as u64,
        handoffs: locks.iter().map(|l| l.handoffs).sum(),
        takeovers: losses.iter().filter(|l| l.taken_over_by.is_some()).count(),
        locks,
        fencing,
        losses_before_takeover: losses.iter().all(|l| l.before_takeover != Some(false))
            && losses.iter().all(|l| l.how != "never told"),
        losses,
        skipped,
        violations,
    }
}

impl Report {
    /// The human summary: one line per check, its verdict first.
    pub(crate) fn print(&self) {
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
            "  {}  fencing: {accepted} guarded writes accepted, each with a larger token than the last",
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
        report.push('\n');
        if self.ok {
            out!("all promises held");
        } else {
            for violation in &self.violations {
                out!("PROMISE BROKEN: {violation}");
            }
        }
        super::log::emit(&mut std::io::stdout().lock(), report.trim_end());
    }
}
