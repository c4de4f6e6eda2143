//! The shared event log: every grant, release, loss, crash, network cut and guarded write,
//! with the monotonic time it happened. Each event is printed as it is recorded, with who
//! holds what after it; the verification at the end reads the log again from scratch. The
//! takeover lines printed live are narration: the verdicts are the checker's, at the end.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mongolock_testkit::checker::history::LossKind;

/// The demo's three locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Lock {
    /// A mutex: one holder at a time, who writes the report.
    Report,
    /// A semaphore with [`GPU_PERMITS`] permits.
    Gpu,
    /// A reader-writer lock: many readers, or one writer, who writes the config.
    Config,
}

/// The number of permits of the `gpu` semaphore.
pub(crate) const GPU_PERMITS: u32 = 2;

impl Lock {
    /// Every lock, in display order.
    pub(crate) const ALL: [Lock; 3] = [Lock::Report, Lock::Gpu, Lock::Config];

    /// The lock's name, as printed (the resource name, without any prefix).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Lock::Report => "nightly-report",
            Lock::Gpu => "gpu",
            Lock::Config => "config",
        }
    }

    /// The kind of handle, as printed and in the JSON report.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Lock::Report => "mutex",
            Lock::Gpu => "semaphore",
            Lock::Config => "rwlock",
        }
    }
}

/// How one hold holds its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The mutex.
    Mutex,
    /// A semaphore permit.
    Permit,
    /// A read lock.
    Read,
    /// The write lock.
    Write,
}

impl Mode {
    /// Whether a holder in this mode and one in `other` may not hold the same lock at once.
    /// Permits never conflict one with one: the semaphore counts them instead.
    pub(crate) fn conflicts(self, other: Mode) -> bool {
        !matches!(
            (self, other),
            (Mode::Permit, _) | (_, Mode::Permit) | (Mode::Read, Mode::Read)
        )
    }

    /// Whether the holder writes the guarded store with its token.
    pub(crate) fn writes(self) -> bool {
        matches!(self, Mode::Mutex | Mode::Write)
    }
}

/// What happened.
#[derive(Debug, Clone)]
pub(crate) enum What {
    /// The worker got the lock: its `acquire` returned a guard.
    Acquired {
        /// How it holds it.
        mode: Mode,
        /// The fencing token of the grant.
        token: i64,
        /// The lease's lock id.
        lock_id: String,
        /// When the worker called `acquire`.
        invoked_at: Instant,
        /// When the attempt that was granted was sent.
        sent_at: Instant,
        /// When the server granted it, on this machine's monotonic clock, when the server's
        /// clock can be compared with it (the embedded emulator); `None` otherwise.
        granted_at: Option<Instant>,
    },
    /// The worker has been waiting a while for the lock (shown, not verified).
    Waiting {
        /// How it wants it.
        mode: Mode,
    },
    /// The worker stopped holding and called `release`.
    Released,
    /// The worker wrote the guarded store through its fencing token.
    Wrote {
        /// The token written with.
        token: i64,
        /// Whether the store took it.
        accepted: bool,
        /// A write made on purpose after the lease was lost (a holder that did not check).
        late: bool,
    },
    /// The worker was told (`guard.lost()` resolved) that its lease is lost.
    Lost {
        /// Why, in words.
        reason: String,
        /// Why, as the checker counts it.
        kind: LossKind,
    },
    /// The worker's process died while holding: no release, no more renewals.
    Crashed {
        /// When its lease runs out by its own clock (its local deadline at the crash): the
        /// moment it would have been told, had it lived.
        lease_end: Instant,
    },
    /// The worker's network was cut while it held the lock.
    CutOff,
    /// The worker was still not told of its loss long after its network was cut.
    NeverTold,
    /// The worker's network came back.
    Healed,
}

/// One event.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// When it was recorded (monotonic).
    pub(crate) at: Instant,
    /// The worker, from 1.
    pub(crate) worker: usize,
    /// The lock concerned.
    pub(crate) lock: Lock,
    /// The hold (one grant to one worker) concerned.
    pub(crate) hold: u64,
    /// What happened.
    pub(crate) what: What,
}

/// Where the live lines go.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Output {
    /// Standard output (text mode).
    Stdout,
    /// Standard error (with `--json`, which keeps standard output for the report).
    Stderr,
}

/// A holder as the live board shows it.
#[derive(Debug, Clone)]
struct Seat {
    /// The lock held.
    lock: Lock,
    /// The holder.
    worker: usize,
    /// The hold.
    hold: u64,
    /// How it holds it.
    mode: Mode,
    /// `(crashed)`, `(cut off)`, or empty.
    tag: &'static str,
}

/// A hold that ended without a release (lost, crashed, cut off) and whose lock nobody has
/// taken since: the next conflicting grant is a takeover.
#[derive(Debug, Clone)]
struct Trouble {
    /// The lock.
    lock: Lock,
    /// The worker that lost it.
    worker: usize,
    /// Its hold.
    hold: u64,
    /// How it held it.
    mode: Mode,
    /// When it was told it lost the lease, or when its lease ran out for a crashed holder.
    ended: Option<Instant>,
    /// Whether its worker crashed (rather than being told).
    crashed: bool,
}

/// The log's state, behind its lock.
#[derive(Debug, Default)]
struct Inner {
    /// Every event, in time order.
    entries: Vec<Entry>,
    /// Who holds what now, for the live board.
    seats: Vec<Seat>,
    /// Holds lost without a release whose lock nobody has taken since.
    troubles: Vec<Trouble>,
    /// The latest local deadline seen by each hold whose worker watches it (not printed).
    deadlines: HashMap<u64, Instant>,
}

/// The shared log. Recording takes the time under the log's lock, so the entries are in
/// time order and printed in that order.
#[derive(Debug)]
pub(crate) struct Log {
    /// Time zero.
    start: Instant,
    /// Where the lines go.
    out: Output,
    /// The next hold id.
    next_hold: AtomicU64,
    /// The entries and the live state.
    inner: Mutex<Inner>,
}

impl Log {
    /// A log whose times count from `start`.
    pub(crate) fn new(start: Instant, out: Output) -> Self {
        Log {
            start,
            out,
            next_hold: AtomicU64::new(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// When the demo started.
    pub(crate) fn start(&self) -> Instant {
        self.start
    }

    /// A new hold id.
    pub(crate) fn new_hold(&self) -> u64 {
        self.next_hold.fetch_add(1, Ordering::Relaxed)
    }

    /// `at` as seconds since the start, e.g. `2.413s`.
    pub(crate) fn time(&self, at: Instant) -> String {
        secs(at.saturating_duration_since(self.start))
    }

    /// Prints a line of narration.
    pub(crate) fn say(&self, text: &str) {
        let _inner = self.lock();
        self.print(text);
    }

    /// Writes one line (or several) where the live lines go.
    fn print(&self, text: &str) {
        match self.out {
            Output::Stdout => emit(&mut std::io::stdout().lock(), text),
            Output::Stderr => emit(&mut std::io::stderr().lock(), text),
        }
    }

    /// The log's state, locked (a panic elsewhere does not poison it for the summary).
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every entry so far, in time order.
    pub(crate) fn entries(&self) -> Vec<Entry> {
        self.lock().entries.clone()
    }

    /// Notes `deadline`, a hold's local deadline as its worker sees it now, if it is the
    /// latest yet (silently: the checker reads it, the live lines do not show it).
    pub(crate) fn deadline(&self, hold: u64, deadline: Instant) {
        let mut inner = self.lock();
        let latest = inner.deadlines.entry(hold).or_insert(deadline);
        *latest = (*latest).max(deadline);
    }

    /// The latest local deadline noted for each hold (see [`Log::deadline`]).
    pub(crate) fn deadlines(&self) -> HashMap<u64, Instant> {
        self.lock().deadlines.clone()
    }

    /// Who holds which lock now (as the live board shows it), in grant order.
    pub(crate) fn holding(&self) -> Vec<(usize, Lock)> {
        self.lock()
            .seats
            .iter()
            .map(|s| (s.worker, s.lock))
            .collect()
    }

    /// Whether some entry matches.
    pub(crate) fn any(&self, matches: impl Fn(&Entry) -> bool) -> bool {
        self.lock().entries.iter().any(matches)
    }

    /// Records an event now, prints it, and returns its time.
    pub(crate) fn record(&self, worker: usize, lock: Lock, hold: u64, what: What) -> Instant {
        let mut inner = self.lock();
        let at = Instant::now();
        let mut extra = Vec::new();
        let text = match &what {
            What::Acquired {
                mode,
                token,
                granted_at,
                ..
            } => {
                let how = match mode {
                    Mode::Mutex => format!("acquired {}", lock.name()),
                    Mode::Permit => format!("acquired a {} permit", lock.name()),
                    Mode::Read => format!("acquired {} to read", lock.name()),
                    Mode::Write => format!("acquired {} to write", lock.name()),
                };
                let granted = granted_at.unwrap_or(at);
                let (taken, kept): (Vec<Trouble>, Vec<Trouble>) = inner
                    .troubles
                    .drain(..)
                    .partition(|t| t.lock == lock && t.worker != worker && t.mode.conflicts(*mode));
                inner.troubles = kept;
                for trouble in taken {
                    inner.seats.retain(|s| s.hold != trouble.hold);
                    extra.push(self.takeover_line(&trouble, worker, granted, granted_at.is_some()));
                }
                inner.seats.push(Seat {
                    lock,
                    worker,
                    hold,
                    mode: *mode,
                    tag: "",
                });
                format!("{how}, token {token}")
            }
            What::Waiting { mode } => match mode {
                Mode::Mutex => format!("waits for {}", lock.name()),
                Mode::Permit => format!("waits for a {} permit", lock.name()),
                Mode::Read => format!("waits to read {}", lock.name()),
                Mode::Write => format!("waits to write {}", lock.name()),
            },
            What::Released => {
                inner.seats.retain(|s| s.hold != hold);
                format!("released {}", lock.name())
            }
            What::Wrote {
                token,
                accepted,
                late,
            } => {
                let record = match lock {
                    Lock::Config => "the config",
                    _ => "the report",
                };
                match (late, accepted) {
                    (false, true) => format!("wrote {record} with token {token}: ok"),
                    (false, false) => {
                        extra.push(more(
                            "!! the store has seen a newer token: someone else holds the lock too",
                        ));
                        format!("wrote {record} with token {token}: REFUSED")
                    }
                    (true, true) => {
                        extra.push(more("(as a holder that did not check its lease would; nobody newer had written yet)"));
                        format!("writes {record} with its OLD token: accepted")
                    }
                    (true, false) => {
                        extra.push(more(&format!(
                            "(as a holder that did not check its lease would: token {token} is older than the last one written)"
                        )));
                        format!("writes {record} with its OLD token: refused")
                    }
                }
            }
            What::Lost { reason, .. } => {
                inner.seats.retain(|s| s.hold != hold);
                let known = inner.troubles.iter_mut().find(|t| t.hold == hold);
                match known {
                    Some(trouble) => trouble.ended = Some(at),
                    None => {
                        let mode = inner
                            .entries
                            .iter()
                            .find_map(|e| match e.what {
                                What::Acquired { mode, .. } if e.hold == hold => Some(mode),
                                _ => None,
                            })
                            .unwrap_or(Mode::Mutex);
                        inner.troubles.push(Trouble {
                            lock,
                            worker,
                            hold,
                            mode,
                            ended: Some(at),
                            crashed: false,
                        });
                    }
                }
                extra.push(more(&format!("({reason}; it stops using it)")));
                format!("is told it LOST {}", lock.name())
            }
            What::Crashed { lease_end } => {
                let mode = self.tag(&mut inner, hold, "(crashed)");
                inner.troubles.push(Trouble {
                    lock,
                    worker,
                    hold,
                    mode,
                    ended: Some(*lease_end),
                    crashed: true,
                });
                extra.push(more(&format!(
                    "(no release, no more renewals; by its own clock its lease runs out in {})",
                    secs(lease_end.saturating_duration_since(at)),
                )));
                format!("CRASHES holding {}", lock.name())
            }
            What::CutOff => {
                let mode = self.tag(&mut inner, hold, "(cut off)");
                inner.troubles.push(Trouble {
                    lock,
                    worker,
                    hold,
                    mode,
                    ended: None,
                    crashed: false,
                });
                extra.push(more(
                    "(a proxy stops forwarding its traffic: its renewals no longer get through)",
                ));
                format!("is CUT OFF from the server, holding {}", lock.name())
            }
            What::NeverTold => format!("was NEVER told it lost {}", lock.name()),
            What::Healed => "network back".to_owned(),
        };
        inner.entries.push(Entry {
            at,
            worker,
            lock,
            hold,
            what,
        });
        let line = format!(
            "{:>8}  w{:<3} {:<WIDTH$} | {}",
            self.time(at),
            worker,
            text,
            board(&inner.seats)
        );
        self.print(&line);
        for line in extra {
            self.print(&line);
        }
        at
    }

    /// Tags a seat (crashed, cut off) and returns its mode.
    fn tag(&self, inner: &mut Inner, hold: u64, tag: &'static str) -> Mode {
        match inner.seats.iter_mut().find(|s| s.hold == hold) {
            Some(seat) => {
                seat.tag = tag;
                seat.mode
            }
            None => Mode::Mutex,
        }
    }

    /// The lines under a grant that takes over a lease lost without a release.
    fn takeover_line(
        &self,
        trouble: &Trouble,
        taker: usize,
        granted: Instant,
        server_clock: bool,
    ) -> String {
        let clock = if server_clock {
            "by the server's clock"
        } else {
            "when the reply arrived"
        };
        let granted_text = format!("granted at {} ({clock})", self.time(granted));
        let old = trouble.worker;
        let ended_text = |ended: Instant| {
            if trouble.crashed {
                format!(
                    "w{old} crashed; its lease ran out by its own clock at {}",
                    self.time(ended)
                )
            } else {
                format!("w{old} was told it lost it at {}", self.time(ended))
            }
        };
        match trouble.ended {
            Some(ended) if ended < granted => format!(
                "{}\n{}",
                more(&format!("-> TAKEOVER from w{old}: {}", ended_text(ended))),
                more(&format!(
                    "   {} later, w{taker} was {granted_text}",
                    secs(granted - ended)
                )),
            ),
            Some(ended) => format!(
                "{}\n{}",
                more(&format!(
                    "!! TAKEOVER from w{old} TOO EARLY: {}",
                    ended_text(ended)
                )),
                more(&format!("   but w{taker} was {granted_text}, before that")),
            ),
            None => format!(
                "{}\n{}",
                more(&format!(
                    "!! TAKEOVER from w{old}, which had NOT been told it lost the lease:"
                )),
                more(&format!("   w{taker} was {granted_text}")),
            ),
        }
    }
}

/// Who holds what, for the end of a live line.
fn board(seats: &[Seat]) -> String {
    Lock::ALL
        .iter()
        .map(|&lock| {
            let holders: Vec<String> = seats
                .iter()
                .filter(|s| s.lock == lock)
                .map(|s| {
                    let mark = match s.mode {
                        Mode::Read => "r",
                        Mode::Write => "W",
                        _ => "",
                    };
                    format!("{mark}w{}{}", s.worker, s.tag)
                })
                .collect();
            let holders = if holders.is_empty() {
                "-".to_owned()
            } else {
                holders.join(" ")
            };
            format!("{}: {holders}", short(lock))
        })
        .collect::<Vec<_>>()
        .join("  ")
}

/// The lock's name in the board column.
fn short(lock: Lock) -> &'static str {
    match lock {
        Lock::Report => "report",
        Lock::Gpu => "gpu",
        Lock::Config => "config",
    }
}

/// Writes a line (or several), [`scrub`](crate::output::scrub)bed: it may quote an error.
/// Errors are ignored: a reader that went away (`| head`) does not stop the demo.
pub(crate) fn emit(out: &mut impl std::io::Write, text: &str) {
    emit_scrubbed(out, &crate::output::scrub(text));
}

/// Writes text already scrubbed (the JSON report, scrubbed string by string so that it
/// stays JSON), ignoring errors as [`emit`] does.
pub(crate) fn emit_scrubbed(out: &mut impl std::io::Write, text: &str) {
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// The width of the "what happened" column.
pub(crate) const WIDTH: usize = 50;

/// A continuation line under an event.
fn more(text: &str) -> String {
    format!("{:>8}  {:<4} {text}", "", "")
}

/// A duration as seconds with milliseconds, e.g. `0.213s`.
pub(crate) fn secs(duration: Duration) -> String {
    format!("{:.3}s", duration.as_secs_f64())
}
