//! The clock leases count on: monotonic, and counting the time the machine was suspended.
//!
//! A lease's local deadline must pass while a laptop sleeps or a virtual machine is paused:
//! a holder that resumes after its TTL must know at once that it lost the lock. Rust's
//! `Instant` (and tokio's) is `CLOCK_MONOTONIC` on Linux, which stops during suspend. This
//! clock is tokio's `Instant` plus the time spent suspended since the process started, which
//! on Linux and Android is read as the growth of `CLOCK_BOOTTIME - CLOCK_MONOTONIC` (both
//! read through `nix`, so without `unsafe` here).
//!
//! Keeping tokio's `Instant` as the base means tokio's timers and its paused test clock
//! still drive everything; only a suspension moves this clock further. Timers themselves do
//! not count suspended time, so the keeper never sleeps longer than [`SUSPEND_CHECK`] at a
//! time while it has leases: after a resume it notices a passed deadline within that much
//! and signals the loss; [`LockGuard::is_lost`](crate::LockGuard::is_lost) reads this clock
//! and is right at once.
//!
//! On other platforms the suspended time is taken as zero, and a lease counts suspended time
//! only if the platform's monotonic clock does: on macOS and iOS it does not
//! (`CLOCK_UPTIME_RAW`); on Windows, `QueryPerformanceCounter` does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// A duration in whole milliseconds, rounded down, and `i64::MAX` beyond that: for
/// durations already checked against [`MAX_TTL`](crate::MAX_TTL) or
/// [`MAX_COMMAND_TIMEOUT`](crate::command::MAX_COMMAND_TIMEOUT), where the saturation never
/// shows.
pub(crate) fn saturating_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The longest the keeper sleeps while it has leases, so that a deadline that passed while
/// the machine was suspended is signalled soon after it resumes.
pub(crate) const SUSPEND_CHECK: Duration = Duration::from_secs(1);

/// A clock that counts suspended time. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Clock {
    /// Suspended time added by tests, in nanoseconds (never set outside them).
    simulated: Option<Arc<AtomicU64>>,
}

impl Clock {
    /// The system's clock.
    pub(crate) fn system() -> Self {
        Clock::default()
    }

    /// Now: tokio's monotonic instant plus the time suspended since the process started.
    pub(crate) fn now(&self) -> Instant {
        Instant::now() + self.suspended()
    }

    /// The time the machine spent suspended since this process first read the clock.
    pub(crate) fn suspended(&self) -> Duration {
        let simulated = self
            .simulated
            .as_ref()
            .map_or(0, |s| s.load(Ordering::SeqCst));
        system::suspended() + Duration::from_nanos(simulated)
    }

    /// A clock whose suspensions a test makes with [`Clock::suspend`].
    #[cfg(test)]
    pub(crate) fn simulated() -> Self {
        Clock {
            simulated: Some(Arc::new(AtomicU64::new(0))),
        }
    }

    /// As if the machine had been suspended for `by` (for tests).
    #[cfg(test)]
    pub(crate) fn suspend(&self, by: Duration) {
        if let Some(simulated) = &self.simulated {
            simulated.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
        }
    }
}

/// A moment on the lease clock, with the forward steps of the server's clock the client had
/// noticed by then ([`ServerClock::stepped`]). A lease's deadline counts from the stamp of
/// the command that set it: every step noticed after that stamp shortens it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    /// The moment, on the lease clock.
    pub(crate) at: Instant,
    /// The forward steps noticed by then, in all.
    pub(crate) stepped: Duration,
    /// Forward steps that came after the command stamped here ran and that no
    /// [`ServerClock::stepped`] counts (another reply's exact reading, taken after them,
    /// set the bounds): they shorten this stamp's deadline alone (see
    /// [`ServerClock::read_exactly`]).
    pub(crate) unseen: Duration,
    /// The lower bound on the server's clock known then (see [`ServerClock`]), if any: an
    /// exact reading by a command sent at this moment that is below it shows that the
    /// server's clock stepped back.
    pub(crate) lower: Option<i128>,
    /// The readings of the server's clock taken by then: a later one was read after this
    /// moment.
    pub(crate) readings: u64,
}

#[cfg(test)]
impl Stamp {
    /// `at`, with no step noticed and nothing known of the server's clock.
    pub(crate) fn plain(at: Instant) -> Self {
        Stamp {
            at,
            stepped: Duration::ZERO,
            unseen: Duration::ZERO,
            lower: None,
            readings: 0,
        }
    }
}

/// A reply's `operationTime`: the cluster time of the operation, which orders the
/// operations of a replica set. A write's is the time of the oplog entry it wrote, so two
/// writes' times are in the order they ran; a command that wrote nothing has the time of
/// the newest entry when it ran (the `operationTime` field of a command's reply in
/// MongoDB's manual, `fact-runCommand-results.rst`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct OperationTime {
    /// Whole seconds since the Unix epoch.
    pub(crate) seconds: u32,
    /// The counter within that second.
    pub(crate) increment: u32,
}

impl From<bson::Timestamp> for OperationTime {
    fn from(time: bson::Timestamp) -> Self {
        OperationTime {
            seconds: time.time,
            increment: time.increment,
        }
    }
}

/// What the client learns of the server's clock from its replies, to notice a forward step
/// (an NTP step on the primary, or a failover to a primary whose clock is ahead): the server
/// then ends leases earlier than their holders' deadlines, which were counted from the
/// server's clock as it was.
///
/// The offset of the server's clock from the lease clock (server time minus local time) is
/// kept between two bounds. An upper bound comes from a reply that says exactly what time
/// the server read (`$$NOW`, from a grant: its expiry minus what it had left): the server
/// read it after the command was sent, so the offset was at most that time minus the send
/// time. A lower bound comes from any write's `operationTime` (whole seconds, and never
/// ahead of the server's clock but after a step back, see below): the server had read at
/// least that by the time the reply came back. Without a step the offset stays put (clock
/// rates differ by far less than a lease's margin); when a lower bound passes the upper
/// one, the server's clock jumped forward by at least the difference: that much is added to
/// [`ServerClock::stepped`] at once, which shortens every lease's deadline by as much, and
/// the upper bound moves up.
///
/// A reply can tell of a step only once the step happened: a step between two renewals is
/// noticed at the next reply at the earliest. The clock uncertainty a client is given
/// ([`LockClientBuilder::clock_uncertainty`](crate::LockClientBuilder::clock_uncertainty))
/// covers steps up to that size before any reply. A server that sends no `operationTime`
/// (a standalone) tells of steps only through grants.
///
/// # Replies out of order
///
/// Replies do not come back in the order their commands ran: a grant's reply can be read
/// after another reply of the client that shows a step the server made after the grant.
/// The grant's reading is then below the lower bound: older than what the client knows,
/// not a step back. It leaves the bounds as they are, and the lease it grants counts the
/// steps noticed since its command was sent as shortening it, up to how far its reading is
/// below the upper bound (the steps that came after the grant, counted as every step is: an
/// `operationTime`'s rounded up to the end of its second): see
/// [`ServerClock::read_exactly`]. Where no count holds such a step (the reply that showed
/// it was the client's first exact reading, which set the bounds above it and counted no
/// step), the lease's own stamp carries it ([`Stamp::unseen`]); where the client had no
/// exact reading before the grant's, the grant's reading counts it for every lease. Both
/// only when the grant's own `operationTime` is not ahead of its reading, or when the
/// bound above the reading was set by a reply read since the grant was sent whose
/// `operationTime` began a later second than the grant's: the server's cluster time stands
/// ahead of its clock after a step back, and would look the same, but it takes a new
/// second only from the clock.
///
/// # Steps back
///
/// mongod's `$$NOW` is its system clock (`Variables::generateRuntimeConstants` sets it to
/// `Date_t::now()`, which reads `gettimeofday`: `src/mongo/db/pipeline/variables.cpp`,
/// `src/mongo/util/time_support.cpp`), which an NTP step or an operator can move back. Its
/// cluster time, which `operationTime` reports, never goes back: `LogicalClock::reserveTicks`
/// (`src/mongo/db/logical_clock.cpp`) takes the system clock's seconds only when they are
/// ahead of the cluster time's, and otherwise counts up the increment. After a step back
/// the server's expiries (`$$NOW` plus a TTL) come later by its own reckoning, so every
/// deadline the client counted before stays on the safe side, and the client shortens
/// nothing. What it must not do is take the stale cluster time for a step forward. So:
///
/// - an exact reading below the lower bound known when its command was sent is a step back
///   (that bound was learned before the command ran): the bounds start over from that
///   reading, and the lease it grants is not shortened for it; but when a reply that ran
///   after the grant (read since its send, its `operationTime` a later second) set a lower
///   bound above the reading, the clock stepped back before the grant and forward after it,
///   and the lease is shortened by as far as that bound is above the reading, counted to the
///   upper bound as every step is (a step back and a step forward around a grant, as at two
///   failovers of a replica set);
/// - an `operationTime` whose seconds are not past the highest seen tells nothing (the
///   cluster time stands still until the system clock catches up with it, and a reply read
///   later in the same second only gives a lower bound below one already had): it is
///   ignored.
///
/// Until the server's clock has caught up with its cluster time, a later step forward shows
/// only in grants. A step back the client has not seen (no grant since) hides as much of a
/// step forward that follows it: a step back and forward again while a lease is held is
/// covered only by the safety margin and the clock uncertainty.
#[derive(Debug)]
pub(crate) struct ServerClock {
    clock: Clock,
    /// The lease clock's reading that local times are counted from.
    origin: Instant,
    offset: std::sync::Mutex<Offset>,
    /// The forward steps noticed so far, in all, in nanoseconds (changed only with `offset`
    /// locked, so that the two agree for whoever holds the lock).
    stepped: AtomicU64,
}

/// The bounds on the server's clock minus the lease clock, in milliseconds since the Unix
/// epoch minus milliseconds since [`ServerClock::origin`].
#[derive(Debug, Default)]
struct Offset {
    upper: Option<i128>,
    lower: Option<i128>,
    /// The highest `operationTime` seen, in seconds since the Unix epoch.
    cluster_seconds: Option<u32>,
    /// The `operationTime` of the reply that last moved the upper bound, if it had one: a
    /// reading from a command that ran before it may come from before a step back that set
    /// the bounds afresh (see [`ServerClock::read_exactly`]).
    upper_by: Option<OperationTime>,
    /// The readings taken so far (replies that told something of the server's clock).
    readings: u64,
    /// The lower bound from the newest reply by its `operationTime`, whether or not it is
    /// the highest: a grant's reading that shows a step back is still shortened by a step
    /// forward that a reply which ran after it showed (see [`ServerClock::read_exactly`]).
    latest: Option<Latest>,
}

/// A lower bound on the server's clock, with the reply that gave it.
#[derive(Debug, Clone, Copy)]
struct Latest {
    /// The bound (the server's clock minus the lease clock, as [`Offset`]'s).
    lower: i128,
    /// The reply's `operationTime`.
    time: OperationTime,
    /// The bound is an exact reading's (a grant's `$$NOW`), not an `operationTime`'s.
    exact: bool,
    /// [`Offset::readings`] once it was taken.
    reading: u64,
}

impl Latest {
    /// True if the reply ran after the command timed `own`, and its bound holds for the
    /// server's clock as it read after that command: an exact reading's always; an
    /// `operationTime`'s when its second is past `own`'s, for the cluster time then took a
    /// new second, which it does only from the server's clock (`LogicalClock::reserveTicks`,
    /// `src/mongo/db/logical_clock.cpp`): a cluster time left ahead of the clock by a step
    /// back only counts up within its second.
    fn ran_after(self, own: OperationTime) -> bool {
        if self.exact {
            self.time > own
        } else {
            self.time.seconds > own.seconds
        }
    }
}

impl Offset {
    /// Counts a reading, which gave the lower bound `lower`; it is the newest if no reply
    /// with a later `operationTime` gave one.
    fn note_reading(&mut self, lower: i128, time: OperationTime, exact: bool) {
        self.readings += 1;
        if self.latest.is_none_or(|latest| time >= latest.time) {
            let reading = self.readings;
            self.latest = Some(Latest {
                lower,
                time,
                exact,
                reading,
            });
        }
    }

    /// Notes that the reply timed `by` moved the upper bound, if it moved from `before`.
    fn note_upper(&mut self, before: Option<i128>, by: Option<OperationTime>) {
        if self.upper != before {
            self.upper_by = by;
        }
    }
}

/// What an `operationTime`'s whole seconds may leave out of the server's clock, in
/// milliseconds: a step it shows is counted as this much larger (see
/// [`ServerClock::read_at_least`]).
const FLOORED_MS: i128 = 999;

/// The smallest step shown by an `operationTime` that is counted rounded up: a smaller one
/// may be the drift of two clocks' rates adding up between two exact readings, which
/// rounding up would turn into a second lost for every lease. A real step under about a
/// second can therefore be counted short by up to a second, which
/// [`LockClientBuilder::clock_uncertainty`](crate::LockClientBuilder::clock_uncertainty) covers.
const ROUNDED_FROM: Duration = Duration::from_millis(100);

/// Milliseconds as a duration (zero when negative).
fn millis(ms: i128) -> Duration {
    Duration::from_millis(u64::try_from(ms.max(0)).unwrap_or(u64::MAX))
}

impl ServerClock {
    /// A server clock followed on the lease clock `clock`.
    pub(crate) fn new(clock: Clock) -> Self {
        let origin = clock.now();
        ServerClock {
            clock,
            origin,
            offset: std::sync::Mutex::new(Offset::default()),
            stepped: AtomicU64::new(0),
        }
    }

    /// The forward steps of the server's clock noticed so far, in all.
    pub(crate) fn stepped(&self) -> Duration {
        Duration::from_nanos(self.stepped.load(Ordering::SeqCst))
    }

    /// Now on the lease clock, with the steps noticed so far and what is known of the
    /// server's clock.
    pub(crate) fn stamp(&self) -> Stamp {
        let offset = self.offset();
        Stamp {
            at: self.clock.now(),
            stepped: self.stepped(),
            unseen: Duration::ZERO,
            lower: offset.lower,
            readings: offset.readings,
        }
    }

    fn offset(&self) -> std::sync::MutexGuard<'_, Offset> {
        self.offset.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Milliseconds from the origin to `at`, on the lease clock.
    fn local_ms(&self, at: Instant) -> i128 {
        let since = at.saturating_duration_since(self.origin).as_millis();
        i128::try_from(since).unwrap_or(i128::MAX)
    }

    /// A command sent at `sent` read the server's clock as `server_ms` (since the Unix
    /// epoch), exactly: a grant's `$$NOW`. The reply is here now. Returns the steps noticed
    /// so far that this reading shows already happened when the command ran (what it
    /// decided counts from the clock as stepped, so they need not shorten it): all of them,
    /// but for those noticed since `sent` that the reading shows came after it (as far as
    /// it is below the upper bound: a reply read after the other replies that showed them).
    ///
    /// A reading below the lower bound known at `sent` is a step back (see
    /// [`ServerClock`]): the bounds start over from it.
    ///
    /// `own` is the `operationTime` of the reply that carried the reading. With no exact
    /// reading before this one (a client's first grant), a lower bound above the reading can
    /// be a step shown by another reply, or a cluster time left ahead of the server's clock
    /// by a step back before the command ran; only the reply's own `operationTime` tells them
    /// apart: not past the reading's second, the server's clock was not behind its cluster
    /// time when it answered, and the step is counted.
    ///
    /// A reading above the upper bound from a command that ran before the reply that set
    /// that bound (its `operationTime` is older) shows no step forward: the server's clock
    /// read more then than it did later, so it went back in between, and the later reading
    /// set the bounds from the clock as stepped back. It tells nothing of the clock now and
    /// is left out; its lease is shortened by every step noticed since its send. (A reading
    /// older only than replies that did not set the bound is counted as usual: a step
    /// forward after the bound was set is shown by it alone when the cluster time stands
    /// ahead of the server's clock, after an earlier step back.)
    pub(crate) fn read_exactly(
        &self,
        sent: Stamp,
        server_ms: i64,
        own: Option<OperationTime>,
    ) -> Stamp {
        let received = self.clock.now();
        let upper = i128::from(server_ms) - self.local_ms(sent.at);
        let lower = i128::from(server_ms) - self.local_ms(received);
        let own_seconds = own.map(|own| own.seconds);
        let mut offset = self.offset();
        let ran_before_bound = own.zip(offset.upper_by).is_some_and(|(own, by)| own < by);
        if ran_before_bound && offset.upper.is_some_and(|known| lower > known) {
            drop(offset);
            tracing::debug!("a reading from before a step back, read after it: left out");
            return sent;
        }
        let upper_before = offset.upper;
        let stepped = self.stepped();
        if let Some(own) = own {
            offset.note_reading(lower, own, true);
        }
        let Some(known) = offset.lower.filter(|known| upper < *known) else {
            let step = self.narrow(&mut offset, Some(upper), lower);
            let stepped = self.stepped();
            offset.note_upper(upper_before, own);
            drop(offset);
            report(step);
            return Stamp { stepped, ..sent };
        };
        // A reply read since the send that ran after this command gave a lower bound above
        // this reading: the server's clock stepped forward since, whatever came before (a
        // step back this reading shows, or a cluster time that stood ahead of the clock
        // when it ran).
        let shown_after = offset.latest.filter(|latest| {
            latest.reading > sent.readings
                && latest.lower > upper
                && own.is_some_and(|own| latest.ran_after(own))
        });
        // Below what was known before the command was even sent, and no later reply above
        // it: the server's clock went back, and the bounds start over from this reading.
        let went_back = shown_after.is_none() && sent.lower.is_some_and(|before| upper < before);
        // The cluster time was not ahead of the server's clock when it answered: no step
        // back hides behind the lower bound. The reply's own `operationTime` was taken after
        // its `$$NOW` (a write's, when it wrote), so its second may have begun since: what it
        // shows is held against this reading's upper bound (the clock can have moved on by
        // the round trip at most), not against the `$$NOW` alone, which put a step forward
        // down to a step back whenever a second began between the two.
        let clock_caught_up = own_seconds
            .is_some_and(|seconds| i128::from(seconds) * 1_000 - self.local_ms(received) <= upper);
        // No exact reading before this one: the step the other replies showed could not be
        // counted against anything, and this reading shows it (it is older than they are).
        let (stepped, first) = match offset.upper {
            None if !went_back && clock_caught_up => {
                let step = self.narrow(&mut offset, Some(upper), lower);
                (self.stepped(), step)
            }
            _ => (stepped, None),
        };
        // A step forward after a step back that no reply had shown: the `operationTime` that
        // showed it was held against bounds from before the step back, which it passed by
        // less than the step (by too little, maybe, to be counted rounded up). Against this
        // reading it is a step of its own, counted as every step an `operationTime` shows:
        // rounded up to the end of its second, the upper bound moved with it.
        let stepped = match shown_after {
            Some(latest) => self.count_from(&mut offset, upper, latest),
            None => stepped,
        };
        // Older than what other replies showed: the steps noticed since the send, as far
        // as the reading is below them as counted (up to the upper bound, which a step
        // counted rounded up moved), came after the command ran.
        let counted = offset.upper.map_or(known, |counted| counted.max(known));
        let after = millis(counted - upper).min(stepped.saturating_sub(sent.stepped));
        if let Some(before) = sent.lower.filter(|before| went_back && upper < *before) {
            // The server's clock went back. Leases last longer by its reckoning; nothing is
            // shortened.
            let back = millis(before - upper);
            *offset = Offset {
                upper: Some(upper),
                lower: Some(lower),
                cluster_seconds: offset.cluster_seconds,
                upper_by: own,
                ..*offset
            };
            tracing::info!(
                ?back,
                "the server's clock stepped back: leases last longer by its reckoning"
            );
        }
        // The steps this reading shows came after the command ran, as far as the bounds
        // (the lower one never ahead of the server's clock but after a step back, which
        // `clock_caught_up` or a reply that ran after this one rules out) are above it,
        // counted to the upper bound as `after` is: a step an `operationTime` showed moved
        // it up by the second's fraction its seconds leave out, and the step may be that
        // much larger than the lower bound says (from the lower bound, a 2.9 s step was
        // counted 2.07 s: `c0`'s holder believed past the next grant in `--long --seed
        // 19260821`). Those the steps noticed since the send do not count (an exact reading
        // taken after them set the bounds, counting none) are this lease's alone.
        let unseen = if went_back || !(clock_caught_up || shown_after.is_some()) {
            Duration::ZERO
        } else {
            millis(counted - upper).saturating_sub(after)
        };
        offset.note_upper(upper_before, own);
        drop(offset);
        report(first);
        Stamp {
            stepped: stepped.saturating_sub(after),
            unseen,
            ..sent
        }
    }

    /// A write's reply, here now, carried the `operationTime` `time`: the server's clock had
    /// read at least its seconds (since the Unix epoch). Ignored unless past the
    /// highest seen (see [`ServerClock`]: after a step back it stands still, ahead of the
    /// server's clock). A step it shows of at least [`ROUNDED_FROM`] is counted rounded up by
    /// the second's fraction the seconds leave out ([`FLOORED_MS`]): the server's clock may
    /// have read that much more.
    pub(crate) fn read_at_least(&self, time: OperationTime) {
        let seconds = time.seconds;
        let received = self.clock.now();
        let lower = i128::from(seconds) * 1_000 - self.local_ms(received);
        let mut offset = self.offset();
        if offset.cluster_seconds.is_some_and(|seen| seconds <= seen) {
            return;
        }
        offset.cluster_seconds = Some(seconds);
        let upper_before = offset.upper;
        offset.note_reading(lower, time, false);
        let step = self.narrow(&mut offset, None, lower).map(|step| {
            if step < ROUNDED_FROM {
                // As small as the drift of two clocks over a long while: taken as shown.
                return step;
            }
            // The seconds are floored: the server's clock read up to a second more than
            // they say, so the step may be up to that much larger. It is counted so, which
            // keeps every deadline on the safe side, and the upper bound moves up with it,
            // so that the rest of that second is not counted again by the next reply.
            offset.upper = Some(lower + FLOORED_MS);
            self.stepped.fetch_add(
                u64::try_from(Duration::from_millis(FLOORED_MS as u64).as_nanos())
                    .unwrap_or(u64::MAX),
                Ordering::SeqCst,
            );
            step + Duration::from_millis(FLOORED_MS as u64)
        });
        offset.note_upper(upper_before, Some(time));
        drop(offset);
        report(step);
    }

    /// `latest`, a lower bound above an exact reading's upper bound `from`, is a step forward
    /// since that reading, counted as every step is: an `operationTime`'s rounded up by the
    /// [`FLOORED_MS`] its seconds may leave out (for a step of at least [`ROUNDED_FROM`]).
    /// The upper bound moves up to it if it is below (it came from before a step back), and
    /// as much as it moves is counted as a step; with no upper bound yet, it is set there.
    /// Returns the steps noticed so far.
    fn count_from(&self, offset: &mut Offset, from: i128, latest: Latest) -> Duration {
        let floored = !latest.exact && millis(latest.lower - from) >= ROUNDED_FROM;
        let to = latest.lower + if floored { FLOORED_MS } else { 0 };
        match offset.upper {
            Some(upper) if to > upper => {
                offset.upper = Some(to);
                self.stepped.fetch_add(
                    u64::try_from(millis(to - upper).as_nanos()).unwrap_or(u64::MAX),
                    Ordering::SeqCst,
                );
            }
            Some(_) => {}
            // No upper bound yet (every exact reading so far met a cluster time ahead of the
            // server's clock): this is the first, and no count held the step, so this
            // lease's own stamp carries it whole (`--replset --long --seed 41150`: counted
            // from the floored bound, without the second's fraction, it fell short).
            None => offset.upper = Some(to),
        }
        self.stepped()
    }

    /// Narrows the bounds with a new reading; a lower bound past the upper one is a forward
    /// step of at least the difference, added to the steps noticed and returned.
    fn narrow(&self, offset: &mut Offset, upper: Option<i128>, lower: i128) -> Option<Duration> {
        if let Some(upper) = upper {
            offset.upper = Some(offset.upper.map_or(upper, |known| known.min(upper)));
        }
        offset.lower = Some(offset.lower.map_or(lower, |known| known.max(lower)));
        let (Some(upper), Some(lower)) = (offset.upper, offset.lower) else {
            return None;
        };
        if lower <= upper {
            return None;
        }
        // The server's clock is that much ahead of where the bounds said it could be.
        offset.upper = Some(lower);
        let step = millis(lower - upper);
        self.stepped.fetch_add(
            u64::try_from(step.as_nanos()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
        Some(step)
    }

    /// The bounds now (lower, upper), for tests.
    #[cfg(test)]
    fn bounds(&self) -> (Option<i128>, Option<i128>) {
        let offset = self.offset();
        (offset.lower, offset.upper)
    }
}

/// Logs a forward step just noticed.
fn report(step: Option<Duration>) {
    let Some(step) = step else {
        return;
    };
    if step >= Duration::from_millis(100) {
        tracing::warn!(
            ?step,
            "the server's clock stepped forward: every lease's deadline is shortened by as much"
        );
    } else {
        tracing::debug!(?step, "the server's clock ran ahead");
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod system {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use nix::time::{ClockId, clock_gettime};

    /// `CLOCK_BOOTTIME - CLOCK_MONOTONIC`, in nanoseconds: the time suspended since boot (the
    /// two are read one after the other, so it may read a few nanoseconds off).
    fn gap() -> Option<u64> {
        let boot = clock_gettime(ClockId::CLOCK_BOOTTIME).ok()?;
        let mono = clock_gettime(ClockId::CLOCK_MONOTONIC).ok()?;
        let nanos = |t: nix::sys::time::TimeSpec| {
            i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec())
        };
        u64::try_from(nanos(boot) - nanos(mono)).ok()
    }

    /// The gap when the process first asked, and the largest seen since (so the result
    /// never goes back when two readings jitter).
    static FIRST: OnceLock<u64> = OnceLock::new();
    static LARGEST: AtomicU64 = AtomicU64::new(0);

    pub(super) fn suspended() -> Duration {
        let Some(now) = gap() else {
            return Duration::ZERO;
        };
        let first = *FIRST.get_or_init(|| now);
        let grown = now.saturating_sub(first);
        let largest = LARGEST.fetch_max(grown, Ordering::SeqCst).max(grown);
        // Reading jitter of a microsecond or so is not a suspension.
        if largest < 1_000_000 {
            return Duration::ZERO;
        }
        Duration::from_nanos(largest)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod system {
    use std::time::Duration;

    pub(super) fn suspended() -> Duration {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_reads_no_suspension_while_running() {
        let clock = Clock::system();
        let before = clock.suspended();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(clock.suspended(), before, "nothing was suspended");
    }

    #[tokio::test(start_paused = true)]
    async fn a_suspension_moves_the_clock_but_not_tokio() {
        let clock = Clock::simulated();
        let (t0, c0) = (Instant::now(), clock.now());
        clock.suspend(Duration::from_secs(60));
        assert_eq!(Instant::now(), t0, "tokio's clock did not move");
        assert!(clock.now() >= c0 + Duration::from_secs(60));
    }

    /// The server's clock read exactly as `at_ms` by a command sent now and answered after
    /// `rtt`; returns what [`ServerClock::read_exactly`] returns.
    async fn exact(server: &ServerClock, at_ms: i64, rtt: Duration) -> Duration {
        let sent = server.stamp();
        tokio::time::advance(rtt).await;
        server
            .read_exactly(sent, at_ms, u32::try_from(at_ms / 1_000).ok().map(op))
            .stepped
    }

    const BASE_MS: i64 = 1_800_000_000_000;

    #[tokio::test(start_paused = true)]
    async fn a_steady_server_clock_shows_no_step() {
        let server = ServerClock::new(Clock::system());
        exact(&server, BASE_MS, Duration::from_millis(10)).await;
        for second in 1..=30 {
            tokio::time::advance(Duration::from_secs(1)).await;
            // `operationTime`: whole seconds, never ahead of the server's clock.
            server.read_at_least(op(u32::try_from((BASE_MS / 1000) + second).unwrap()));
            exact(&server, BASE_MS + second * 1000, Duration::ZERO).await;
        }
        assert_eq!(server.stepped(), Duration::ZERO);
        let (lower, upper) = server.bounds();
        assert!(lower.unwrap() <= upper.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_forward_step_is_noticed_from_an_operation_time_and_from_an_exact_reading() {
        let server = ServerClock::new(Clock::system());
        exact(&server, BASE_MS, Duration::from_millis(10)).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        // One second later by the lease clock, the server reads 11 s later: a 10 s step (the
        // bounds leave out up to the round trip; the second's fraction is counted in).
        server.read_at_least(op(u32::try_from(BASE_MS / 1000 + 11).unwrap()));
        let first = server.stepped();
        assert!(first >= Duration::from_millis(9_990) && first <= Duration::from_secs(11));
        // An exact reading after a second step of 5 s: noticed, and it shows every step so
        // far had happened when it ran.
        tokio::time::advance(Duration::from_secs(1)).await;
        let counted = exact(&server, BASE_MS + 17_000, Duration::from_millis(10)).await;
        let total = server.stepped();
        assert!(
            total >= Duration::from_millis(14_900),
            "15 s in all: {total:?}"
        );
        assert_eq!(counted, total);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backward_step_starts_the_bounds_over_and_is_no_forward_step() {
        let server = ServerClock::new(Clock::system());
        exact(&server, BASE_MS, Duration::from_millis(10)).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        exact(&server, BASE_MS - 60_000, Duration::from_millis(10)).await;
        assert_eq!(server.stepped(), Duration::ZERO);
        tokio::time::advance(Duration::from_secs(1)).await;
        exact(&server, BASE_MS - 59_000, Duration::from_millis(10)).await;
        assert_eq!(
            server.stepped(),
            Duration::ZERO,
            "steady again, from the new reading"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_read_after_a_step_it_came_before_is_shortened_by_it_and_starts_nothing_over() {
        let server = ServerClock::new(Clock::system());
        exact(&server, BASE_MS, Duration::from_millis(10)).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        // A grant runs at once; its reply is on its way while the server's clock steps
        // 7.5 s forward and another reply shows the step.
        let sent = server.stamp();
        tokio::time::advance(Duration::from_millis(300)).await;
        server.read_at_least(op(u32::try_from((BASE_MS + 1_300 + 7_500) / 1000).unwrap()));
        let noticed = server.stepped();
        assert!(noticed >= Duration::from_millis(6_500), "{noticed:?}");
        tokio::time::advance(Duration::from_millis(300)).await;
        let counted = server
            .read_exactly(sent, BASE_MS + 1_000, second(BASE_MS + 1_000))
            .stepped;
        // Every step noticed since the send came after the grant: all of it shortens it.
        assert_eq!(counted, Duration::ZERO);
        // What was learned stands: the replies that follow show the same step, not another
        // (the second's fraction the first reply left out was counted with it).
        tokio::time::advance(Duration::from_secs(1)).await;
        server.read_at_least(op(u32::try_from((BASE_MS + 2_600 + 7_500) / 1000).unwrap()));
        exact(&server, BASE_MS + 2_610 + 7_500, Duration::from_millis(10)).await;
        let total = server.stepped();
        assert_eq!(total, noticed, "counted once");
        assert!(total >= Duration::from_millis(7_500), "{total:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_back_is_no_step_forward_while_the_cluster_time_stands_still() {
        let server = ServerClock::new(Clock::system());
        exact(&server, BASE_MS, Duration::from_millis(10)).await;
        server.read_at_least(op(u32::try_from(BASE_MS / 1000).unwrap()));
        tokio::time::advance(Duration::from_secs(1)).await;
        server.read_at_least(op(u32::try_from(BASE_MS / 1000 + 1).unwrap()));
        // The server's clock steps 30 s back; its cluster time stands at its highest second
        // until the clock catches up (30 s later).
        let stuck = u32::try_from(BASE_MS / 1000 + 1).unwrap();
        let back = BASE_MS + 1_000 - 30_000;
        assert_eq!(
            exact(&server, back, Duration::from_millis(10)).await,
            Duration::ZERO
        );
        for second in 1..=20 {
            tokio::time::advance(Duration::from_secs(1)).await;
            server.read_at_least(op(stuck));
            exact(&server, back + second * 1_000, Duration::from_millis(10)).await;
            assert_eq!(server.stepped(), Duration::ZERO, "after {second} s");
        }
        // A step forward of 10 s, still behind the cluster time: a grant shows it.
        tokio::time::advance(Duration::from_secs(1)).await;
        exact(&server, back + 31_000, Duration::from_millis(10)).await;
        assert!(
            server.stepped() >= Duration::from_millis(9_900),
            "{:?}",
            server.stepped()
        );
    }

    /// A step seen in an `operationTime` is counted whole: the reply's seconds are floored,
    /// and a 2.85 s step that they show as under 2 s is counted as at least the 2.85 s it was.
    #[tokio::test(start_paused = true)]
    async fn a_step_shown_in_whole_seconds_is_counted_rounded_up() {
        let server = ServerClock::new(Clock::system());
        // The server reads BASE at the send; the reply comes 10 ms later.
        exact(&server, BASE_MS, Duration::from_millis(10)).await;
        tokio::time::advance(Duration::from_millis(90)).await;
        // 100 ms after the send, the server's clock has stepped 2.85 s forward: it reads
        // BASE + 2.95 s, which a write's reply shows as BASE's second + 2.
        server.read_at_least(op(u32::try_from(BASE_MS / 1000 + 2).unwrap()));
        let counted = server.stepped();
        assert!(
            counted >= Duration::from_millis(2_850),
            "a 2.85 s step counted as {counted:?}"
        );
        // The rest of that second is not counted again.
        tokio::time::advance(Duration::from_millis(500)).await;
        exact(&server, BASE_MS + 3_450, Duration::from_millis(10)).await;
        assert_eq!(server.stepped(), counted);
    }

    /// A client's first grant, whose reply is read after another reply showed a step the
    /// server made after the grant: there was no exact reading to count the step against
    /// when that reply came, so the grant's reading is what shows it, and its lease is
    /// shortened by it.
    #[tokio::test(start_paused = true)]
    async fn a_first_grant_read_after_a_step_is_shortened_by_it() {
        let server = ServerClock::new(Clock::system());
        let sent = server.stamp();
        // The grant runs at once (the server reads BASE); its reply is on its way while
        // the server's clock steps 5 s forward and another reply shows the step.
        tokio::time::advance(Duration::from_millis(300)).await;
        server.read_at_least(op(u32::try_from((BASE_MS + 300 + 5_000) / 1000).unwrap()));
        tokio::time::advance(Duration::from_millis(300)).await;
        // The grant's own reply: its `operationTime` (read first, as `write_once` does) was
        // taken when the grant ran, before the step.
        server.read_at_least(second(BASE_MS).unwrap());
        let read = server.read_exactly(sent, BASE_MS, second(BASE_MS));
        let shortened = shortened(&server, read);
        assert!(
            shortened >= Duration::from_millis(4_000),
            "a 5 s step after the grant shortened it by {shortened:?}"
        );
    }

    /// A brand-new client's first command is a grant, from a server whose clock stepped
    /// back 5 s before: the cluster time stands ahead of the server's clock (mongod's
    /// `LogicalClock::reserveTicks` keeps it), so the grant's own `operationTime` reads
    /// ahead of its `$$NOW`, and so may another reply read while it is on its way. That is
    /// no step forward: the lease is not shortened, and it is not lost for nothing.
    #[tokio::test(start_paused = true)]
    async fn a_first_grant_after_a_step_back_is_not_shortened() {
        let server = ServerClock::new(Clock::system());
        let ahead = second(BASE_MS + 5_000).unwrap();
        let sent = server.stamp();
        tokio::time::advance(Duration::from_millis(150)).await;
        // Another command of the client, sent after the grant, answers first.
        server.read_at_least(ahead);
        tokio::time::advance(Duration::from_millis(150)).await;
        // The grant ran at BASE by the server's clock; its reply carries the cluster time,
        // read first (as `write_once` does).
        server.read_at_least(ahead);
        let read = server.read_exactly(sent, BASE_MS, Some(ahead));
        let shortened = shortened(&server, read);
        assert_eq!(
            shortened,
            Duration::ZERO,
            "a step back counted as a step forward"
        );
        assert_eq!(server.stepped(), Duration::ZERO);
    }

    /// A client's first grant, whose reply is read after the reply of a later grant that
    /// ran after the server's clock stepped 6 s forward: the later grant's exact reading,
    /// the client's first, sets the bounds above the step and counts none, so only the
    /// first grant's own stamp can carry it. The later lease is not shortened.
    #[tokio::test(start_paused = true)]
    async fn a_first_grant_read_after_a_later_grant_showed_a_step_is_shortened_by_it() {
        let server = ServerClock::new(Clock::system());
        let sent = server.stamp();
        tokio::time::advance(Duration::from_millis(150)).await;
        // The step; the later grant is sent and answered while the first reply is held.
        let later_sent = server.stamp();
        tokio::time::advance(Duration::from_millis(10)).await;
        let later_ms = BASE_MS + 150 + 6_000;
        server.read_at_least(second(later_ms).unwrap());
        let later = server.read_exactly(later_sent, later_ms, second(later_ms));
        tokio::time::advance(Duration::from_millis(140)).await;
        server.read_at_least(second(BASE_MS).unwrap());
        let first = server.read_exactly(sent, BASE_MS, second(BASE_MS));
        assert!(
            shortened(&server, first) >= Duration::from_millis(5_000),
            "a 6 s step after the first grant shortened it by {:?}",
            shortened(&server, first)
        );
        assert_eq!(
            shortened(&server, later),
            Duration::ZERO,
            "granted after the step"
        );
    }

    /// What a lease counted from `read` is shortened by now (see `Lease`'s deadline): the
    /// steps noticed since, and those its reading shows came after it that no count holds.
    fn shortened(server: &ServerClock, read: Stamp) -> Duration {
        server.stepped().saturating_sub(read.stepped) + read.unseen
    }

    /// In step: a grant the server ran at `BASE_MS`, its reply read 10 ms after the send
    /// (its `operationTime` that second's, counter 1).
    async fn granted_at_base(server: &ServerClock) {
        let own = OperationTime {
            seconds: u32::try_from(BASE_MS / 1000).unwrap(),
            increment: 1,
        };
        let sent = server.stamp();
        tokio::time::advance(Duration::from_millis(10)).await;
        server.read_at_least(own);
        server.read_exactly(sent, BASE_MS, Some(own));
    }

    /// Asserts that a lease counted from `read` is shortened by at least a step of `step_ms`
    /// that came after its grant.
    fn assert_shortened_by(server: &ServerClock, read: Stamp, step_ms: i64) {
        let by = shortened(server, read);
        assert!(
            by >= Duration::from_millis(step_ms.unsigned_abs()),
            "a {step_ms} ms step after the grant shortened it by {by:?}"
        );
    }

    /// An `operationTime` taken when the server's clock read `ms`.
    fn second(ms: i64) -> Option<OperationTime> {
        u32::try_from(ms / 1_000).ok().map(op)
    }

    /// An `operationTime` of `seconds`, its counter at zero.
    fn op(seconds: u32) -> OperationTime {
        OperationTime {
            seconds,
            increment: 0,
        }
    }

    /// A small deterministic generator for the simulations below (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        /// A number in `0..n`.
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A server whose clock steps at given moments (real milliseconds since the start, by
    /// how much), and whose cluster time's seconds are the highest its clock ever read
    /// (mongod's `LogicalClock::reserveTicks`, as the emulator has it).
    struct SimServer {
        steps: Vec<(u64, i64)>,
    }

    impl SimServer {
        fn clock(&self, t: u64) -> i64 {
            let stepped: i64 = self
                .steps
                .iter()
                .filter(|(at, _)| *at <= t)
                .map(|s| s.1)
                .sum();
            BASE_MS + t as i64 + stepped
        }

        fn cluster_seconds(&self, t: u64) -> u32 {
            let mut highest = self.clock(t);
            for (at, _) in self.steps.iter().filter(|(at, _)| *at <= t) {
                highest = highest.max(self.clock(at.saturating_sub(1)));
            }
            u32::try_from(highest / 1_000).unwrap()
        }
    }

    /// One command of the simulation: sent, run by the server, its reply read (real
    /// milliseconds since the start); a grant carries an exact reading.
    struct SimCommand {
        sent: u64,
        ran: u64,
        read: u64,
        grant: bool,
    }

    /// Runs `commands` against `server` on one client, replies read in the order they come
    /// back; returns the client and, for each grant, the stamp its lease counts from.
    async fn simulate(
        server: &SimServer,
        commands: &[SimCommand],
    ) -> (ServerClock, Vec<(usize, Stamp)>) {
        let client = ServerClock::new(Clock::system());
        let start = tokio::time::Instant::now();
        let mut leases = Vec::new();
        // Events: sends and reads, in time order (sends first at the same moment).
        let mut events: Vec<(u64, bool, usize)> = Vec::new();
        for (i, c) in commands.iter().enumerate() {
            events.push((c.sent, false, i));
            events.push((c.read, true, i));
        }
        events.sort();
        let mut stamps: Vec<Option<Stamp>> = commands.iter().map(|_| None).collect();
        for (at, is_read, i) in events {
            let now = start + Duration::from_millis(at);
            if now > tokio::time::Instant::now() {
                tokio::time::advance(now - tokio::time::Instant::now()).await;
            }
            if !is_read {
                stamps[i] = Some(client.stamp());
                continue;
            }
            let c = &commands[i];
            let seconds = server.cluster_seconds(c.ran);
            // Operations are timed in the order they ran (their counter: when they ran).
            let time = OperationTime {
                seconds,
                increment: u32::try_from(c.ran).unwrap(),
            };
            client.read_at_least(time);
            if c.grant {
                let sent = stamps[i].expect("sent before read");
                let stamp = client.read_exactly(sent, server.clock(c.ran), Some(time));
                leases.push((i, stamp));
            }
        }
        (client, leases)
    }

    /// `count` commands sent over 22 s, most answered within 60 ms each way, one in ten
    /// held up to 1.5 s each way; two in three are grants.
    fn commands(rng: &mut Rng, count: usize) -> Vec<SimCommand> {
        shaped_commands(rng, count, 22_000, 10)
    }

    /// A client that sends little: 4 to 11 commands over 6 s, one in two held up to 1.5 s
    /// each way. Its first exact reading often comes from a slow round trip, so its bounds
    /// stay wide while later replies show a step (the case of
    /// `a_grant_read_after_a_step_shown_in_whole_seconds_is_shortened_by_it_rounded_up`,
    /// which the busy client's simulations never reached).
    fn sparse_commands(rng: &mut Rng) -> Vec<SimCommand> {
        let count = 4 + rng.below(8) as usize;
        shaped_commands(rng, count, 6_000, 2)
    }

    /// `count` commands sent over `span_ms`, one in `slow_one_in` held up to 1.5 s each way,
    /// the others answered within 60 ms each way; two in three are grants.
    fn shaped_commands(
        rng: &mut Rng,
        count: usize,
        span_ms: u64,
        slow_one_in: u64,
    ) -> Vec<SimCommand> {
        (0..count)
            .map(|_| {
                let sent = rng.below(span_ms);
                let mut latency = || {
                    if rng.below(slow_one_in) == 0 {
                        rng.below(1_500)
                    } else {
                        rng.below(60)
                    }
                };
                let (out, back) = (latency(), latency());
                SimCommand {
                    sent,
                    ran: sent + out,
                    read: sent + out + back,
                    grant: rng.below(3) != 0,
                }
            })
            .collect()
    }

    /// Replies in flight around steps back of the server's clock, read out of order: a step
    /// back is never counted as a step forward, whatever the order.
    #[tokio::test(start_paused = true)]
    async fn steps_back_alone_are_never_counted_as_a_step_forward() {
        for seed in 1..=1_000u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut steps: Vec<(u64, i64)> = (0..1 + rng.below(3))
                .map(|_| (rng.below(20_000), -(100 + rng.below(2_400) as i64)))
                .collect();
            steps.sort();
            let server = SimServer { steps };
            let (client, _) = simulate(&server, &commands(&mut rng, 80)).await;
            assert_eq!(
                client.stepped(),
                Duration::ZERO,
                "seed {seed}: a step back counted as a step forward"
            );
        }
    }

    /// For seeds 1 to 1,000: 1 to `most` steps of the server's clock made by `step` (when, by
    /// how many ms), 80 commands in flight around them read out of order, then a grant sent
    /// after every other reply was read and answered at once: no lease's deadline is later
    /// than the server's end of it (but for the 10 ms that last reply took back, which the
    /// bounds leave out).
    async fn no_lease_believed_past_its_end(most: u64, step: impl Fn(&mut Rng) -> (u64, i64)) {
        no_lease_believed_past_its_end_by(most, step, |rng| commands(rng, 80)).await;
    }

    /// [`no_lease_believed_past_its_end`] with the commands `sends` makes.
    async fn no_lease_believed_past_its_end_by(
        most: u64,
        step: impl Fn(&mut Rng) -> (u64, i64),
        sends: impl Fn(&mut Rng) -> Vec<SimCommand>,
    ) {
        const TTL_MS: i64 = 30_000;
        for seed in 1..=1_000u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut steps: Vec<(u64, i64)> =
                (0..1 + rng.below(most)).map(|_| step(&mut rng)).collect();
            steps.sort();
            let server = SimServer { steps };
            let mut commands = sends(&mut rng);
            // After every reply and every step: the last grant shows every step.
            let last_step = server.steps.iter().map(|s| s.0).max().unwrap_or(0);
            let end = commands
                .iter()
                .map(|c| c.read)
                .max()
                .unwrap()
                .max(last_step)
                + 1;
            commands.push(SimCommand {
                sent: end,
                ran: end,
                read: end + 10,
                grant: true,
            });
            let (client, leases) = simulate(&server, &commands).await;
            let now = end + 10;
            for (i, stamp) in leases {
                let c = &commands[i];
                let shortened = client.stepped().saturating_sub(stamp.stepped) + stamp.unseen;
                let shortened = i64::try_from(shortened.as_millis()).unwrap();
                // Milliseconds since the start: believed on the lease clock, and the server's
                // end of the lease on the same clock, no step coming after `now`.
                let believed = c.sent as i64 + TTL_MS - shortened;
                let ends = now as i64 + (server.clock(c.ran) + TTL_MS - server.clock(now));
                assert!(
                    believed <= ends + 10,
                    "seed {seed}: command {i} (sent {}, ran {}, read {}) believed to \
                     {believed}, the server ends it at {ends} (steps, at and by: {:?})",
                    c.sent,
                    c.ran,
                    c.read,
                    server.steps
                );
            }
        }
    }

    /// Replies in flight around forward steps of the server's clock, read out of order:
    /// forward steps shorten every lease by at least what they take off it.
    #[tokio::test(start_paused = true)]
    async fn forward_steps_shorten_every_lease_by_as_much_as_they_end_it_earlier() {
        no_lease_believed_past_its_end(3, |rng| (rng.below(20_000), 300 + rng.below(2_700) as i64))
            .await;
    }

    /// A client that sends little, its first bounds often wide, replies in flight around
    /// forward steps of the server's clock at any fraction of a second: every lease is
    /// shortened by at least what the steps take off it.
    #[tokio::test(start_paused = true)]
    async fn a_sparse_client_with_wide_bounds_believes_no_lease_past_its_end() {
        no_lease_believed_past_its_end_by(
            2,
            |rng| (rng.below(6_000), 300 + rng.below(2_700) as i64),
            sparse_commands,
        )
        .await;
    }

    /// The server's clock steps 3 s back (a grant shows it: the bounds start over), then
    /// 2 s forward, still behind its cluster time, which stands. A grant runs after the
    /// forward step; an unrelated write that ran after it (its `operationTime`, the standing
    /// cluster time with a higher counter, shows nothing) is read first, then the grant's
    /// reply: its reading is the only sign of the forward step, which ends the lease granted
    /// between the two steps 2 s earlier. It must be counted, though the grant ran before a
    /// reply already read: only a reply older than the one that set the bounds tells
    /// nothing.
    #[tokio::test(start_paused = true)]
    async fn a_forward_step_read_behind_a_later_reply_that_shows_nothing_is_counted() {
        let server = ServerClock::new(Clock::system());
        let at = |seconds: u32, increment: u32| OperationTime { seconds, increment };
        let base = u32::try_from(BASE_MS / 1000).unwrap();
        granted_at_base(&server).await;
        // 1 s later the clock steps 3 s back; a grant shows it.
        tokio::time::advance(Duration::from_millis(990)).await;
        let sent = server.stamp();
        tokio::time::advance(Duration::from_millis(10)).await;
        server.read_at_least(at(base + 1, 2));
        let between = server.read_exactly(sent, BASE_MS + 1_000 - 3_000, Some(at(base + 1, 2)));
        assert_eq!(server.stepped(), Duration::ZERO, "a step back");
        // 1 s later the clock steps 2 s forward (still a second behind its cluster time);
        // a grant runs at once, its reply held; an unlock runs after it and is read first.
        tokio::time::advance(Duration::from_millis(990)).await;
        let sent = server.stamp();
        tokio::time::advance(Duration::from_millis(100)).await;
        server.read_at_least(at(base + 1, 4));
        tokio::time::advance(Duration::from_millis(100)).await;
        server.read_at_least(at(base + 1, 3));
        server.read_exactly(sent, BASE_MS + 2_000 - 3_000 + 2_000, Some(at(base + 1, 3)));
        assert!(
            shortened(&server, between) >= Duration::from_millis(1_800),
            "a 2 s forward step shortened the lease granted before it by {:?}",
            shortened(&server, between)
        );
    }

    /// Replies in flight around steps of the server's clock forward and back, read out of
    /// order: no lease is believed past its end.
    #[tokio::test(start_paused = true)]
    async fn steps_both_ways_leave_no_lease_believed_past_its_end() {
        no_lease_believed_past_its_end(4, |rng| {
            let by = 300 + rng.below(2_700) as i64;
            (rng.below(20_000), if rng.below(2) == 0 { by } else { -by })
        })
        .await;
    }

    /// A brand-new client's first grant ran late in a slow round trip (1.7 s: its bounds
    /// are that wide, the server's clock near their lower end). Its next grant runs, its
    /// reply held; the server's clock steps 2.9 s forward; another reply (an
    /// `operationTime` alone, floored to its second) shows the step, counted from the loose
    /// upper bound and rounded up (1.4 s); then the grant's reply is read. The grant ran
    /// before the step, which ends it 2.9 s earlier: it must be shortened by at least that.
    /// It was shortened by its reading's distance to the floored lower bound (2.07 s), not
    /// to the bound rounded up as every other count is, and believed past the server's end
    /// (`--long --seed 19260821`'s run 19260821 replayed: `c0`'s holder believed 138 ms
    /// past the next grant, (1) exclusion).
    #[tokio::test(start_paused = true)]
    async fn a_grant_read_after_a_step_shown_in_whole_seconds_is_shortened_by_it_rounded_up() {
        let server = ServerClock::new(Clock::system());
        // The server's clock is `offset` ahead of the lease clock's milliseconds since the
        // start; the first grant ran at 1,670 ms, its reply read at 1,675 ms.
        let offset = BASE_MS - 805;
        let sent = server.stamp();
        tokio::time::advance(Duration::from_millis(1_675)).await;
        let first = offset + 1_670;
        server.read_at_least(second(first).unwrap());
        server.read_exactly(sent, first, second(first));
        // The grant, sent at 1,730 ms, runs at once.
        tokio::time::advance(Duration::from_millis(55)).await;
        let sent = server.stamp();
        let granted = offset + 1_730;
        // The step, at 1,731 ms; the other reply ran at 1,733 ms, read at 1,735 ms.
        const STEP: i64 = 2_900;
        tokio::time::advance(Duration::from_millis(5)).await;
        server.read_at_least(second(offset + STEP + 1_733).unwrap());
        assert!(
            server.stepped() > Duration::ZERO,
            "the other reply shows the step"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        let own = second(granted);
        server.read_at_least(own.unwrap());
        let read = server.read_exactly(sent, granted, own);
        assert_shortened_by(&server, read, STEP);
    }

    /// A brand-new client's first grant ran at the very end of a second, and its reply's
    /// `operationTime` was taken as the next one began; another reply, read first, showed a
    /// 5 s step the server made after the grant. That `operationTime` is no step back: the
    /// grant is shortened by the step (it was not when the check held the `operationTime`
    /// against the grant's `$$NOW` alone, and the harness's brand-new client believed its
    /// grant past the server's end of it).
    #[tokio::test(start_paused = true)]
    async fn a_first_grant_whose_operation_time_began_a_second_is_shortened_by_a_step() {
        let server = ServerClock::new(Clock::system());
        let now = BASE_MS + 999;
        let sent = server.stamp();
        tokio::time::advance(Duration::from_millis(150)).await;
        server.read_at_least(second(now + 5_150).unwrap());
        tokio::time::advance(Duration::from_millis(150)).await;
        let own = second(now + 2);
        server.read_at_least(own.unwrap());
        let read = server.read_exactly(sent, now, own);
        assert!(
            shortened(&server, read) >= Duration::from_millis(4_000),
            "a 5 s step after the grant shortened it by {:?}",
            shortened(&server, read)
        );
    }

    /// The server's clock steps 1.5 s back unseen (a failover to a member behind), a grant
    /// runs and its reply is held; the clock then steps 2.117 s forward, past the cluster
    /// time, and another write's reply shows it; then the grant's reply is read. Its reading
    /// is a step back (below what was known at its send), and the other reply, which ran
    /// after it (its `operationTime`'s second is past the grant's), showed the clock 2.117 s
    /// further on than the grant's reading allows: the lease must be shortened by at least
    /// the forward step (the shape of `c0`'s holder in `--replset --long --seed 41090`).
    #[tokio::test(start_paused = true)]
    async fn a_grant_read_after_a_step_back_and_a_later_step_forward_is_shortened_by_the_step_forward()
     {
        const BACK: i64 = 1_500;
        const FORWARD: i64 = 2_117;
        let server = ServerClock::new(Clock::system());
        let at = |seconds: u32, increment: u32| OperationTime { seconds, increment };
        let base = u32::try_from(BASE_MS / 1000).unwrap();
        granted_at_base(&server).await;
        // Other clients' writes carry the cluster time to BASE + 1 s.
        tokio::time::advance(Duration::from_millis(1_490)).await;
        // The clock steps back; the grant runs at once (its reply held), its
        // `operationTime` the cluster time standing ahead.
        let sent = server.stamp();
        let granted = BASE_MS + 1_500 - BACK;
        let own = at(base + 1, 7);
        // 100 ms later the clock steps forward; another write runs and is read.
        tokio::time::advance(Duration::from_millis(110)).await;
        let witness_ms = BASE_MS + 1_600 - BACK + FORWARD;
        server.read_at_least(at(u32::try_from(witness_ms / 1000).unwrap(), 1));
        tokio::time::advance(Duration::from_millis(100)).await;
        server.read_at_least(own);
        let read = server.read_exactly(sent, granted, Some(own));
        assert_shortened_by(&server, read, FORWARD);
    }

    /// The harness's clock-step workload, on the simulated server, for seeds 1 to 1,000:
    /// a brand-new client learns the server's clock from a grant (one time in two after a
    /// step back before it started, so that its first reading finds the cluster time ahead
    /// of the clock); the clock may step back (0.3–3 s) before its next attempt, which no reply shows before that attempt's grant; the
    /// attempt runs and its reply is held; the clock steps forward (1.2–4 s: a step under a
    /// second or so may be counted short by up to a second, which the clock uncertainty
    /// covers, see [`ROUNDED_FROM`]; the harness's are 2–3 s, with none); another write
    /// of the client runs and is read first; then the held reply. Whenever that write's
    /// `operationTime` showed the step forward (its second past that of every other reply,
    /// the held grant's own included, and not behind the clock after the step: what the
    /// harness judges as shown), the held lease is not believed past the server's end of it
    /// (but for the witness's way back, which the bounds leave out).
    /// A second no later than the held grant's own tells nothing: the cluster time stands
    /// ahead of the clock after a step back, and a write then answers it whatever the clock
    /// reads (seed 8 here: back 1,221 ms, forward 911 ms, both replies in the same second).
    #[tokio::test(start_paused = true)]
    async fn a_grant_held_across_steps_is_not_believed_past_its_end_once_a_reply_showed_the_step() {
        const TTL_MS: i64 = 6_000;
        let mut shown = 0;
        for seed in 1..=1_000u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let rtt = |rng: &mut Rng| 1 + rng.below(60);
            let first_sent = 2_000 + rng.below(1_000);
            let first_ran = first_sent + rtt(&mut rng);
            let first_read = first_ran + rtt(&mut rng);
            let attempt_sent = first_read + 50 + rng.below(1_500);
            let mut steps = Vec::new();
            // Before the client's first grant, one time in two: its first reading finds the
            // cluster time ahead of the clock (a failover to a member behind, before the
            // client started: `--replset --long --seed 41150`).
            if rng.below(2) == 0 {
                let at = 1 + rng.below(first_sent - 1);
                steps.push((at, -(300 + rng.below(2_700) as i64)));
            }
            if rng.below(3) != 0 {
                let at = first_read + 1 + rng.below(attempt_sent - first_read);
                steps.push((at, -(300 + rng.below(2_700) as i64)));
            }
            let attempt_ran = attempt_sent + rtt(&mut rng);
            let stepped_at = attempt_ran + 1 + rng.below(200);
            steps.push((stepped_at, 1_200 + rng.below(2_800) as i64));
            let witness_sent = stepped_at + rng.below(50);
            let witness_ran = witness_sent + rtt(&mut rng);
            let witness_read = witness_ran + rtt(&mut rng);
            let attempt_read = witness_read + 1 + rng.below(300);
            let server = SimServer { steps };
            let commands = [
                (first_sent, first_ran, first_read, true),
                (attempt_sent, attempt_ran, attempt_read, true),
                (witness_sent, witness_ran, witness_read, false),
            ]
            .map(|(sent, ran, read, grant)| SimCommand {
                sent,
                ran,
                read,
                grant,
            });
            // What the client reads before the witness's `operationTime`, or with the held
            // reply: the first grant's, and the attempt's own (the cluster time when it ran).
            let seen_before = server.cluster_seconds(attempt_ran);
            let witness_seconds = server.cluster_seconds(witness_ran);
            let after_step_ms = server.clock(stepped_at);
            if witness_seconds <= seen_before || i64::from(witness_seconds) < after_step_ms / 1000 {
                continue;
            }
            shown += 1;
            let (client, leases) = simulate(&server, &commands).await;
            let (_, stamp) = leases.into_iter().find(|(i, _)| *i == 1).unwrap();
            let shortened = client.stepped().saturating_sub(stamp.stepped) + stamp.unseen;
            let shortened = i64::try_from(shortened.as_millis()).unwrap();
            let now = attempt_read;
            let believed = attempt_sent as i64 + TTL_MS - shortened;
            let ends = now as i64 + (server.clock(attempt_ran) + TTL_MS - server.clock(now));
            // The witness's way back is left out: its `operationTime` bounds the server's
            // clock only at its read (a lease's safety margin covers a round trip).
            let back = (witness_read - witness_ran) as i64;
            assert!(
                believed <= ends + back,
                "seed {seed}: believed to {believed}, the server ends it at {ends} (steps, at \
                 and by: {:?}; first grant ran {first_ran}, attempt ran {attempt_ran}, \
                 witness ran {witness_ran})",
                server.steps
            );
        }
        assert!(shown > 300, "only {shown} of 1,000 steps were shown");
    }
}
