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
}

#[cfg(test)]
impl Stamp {
    /// `at`, with no step noticed.
    pub(crate) fn plain(at: Instant) -> Self {
        Stamp {
            at,
            stepped: Duration::ZERO,
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
/// ahead of the server's clock): the server had read at least that by the time the reply
/// came back. Without a step the offset stays put (clock rates differ by far less than a
/// lease's margin); when a lower bound passes the upper one, the server's clock jumped
/// forward by at least the difference: that much is added to [`ServerClock::stepped`] at
/// once, which shortens every lease's deadline by as much, and the upper bound moves up.
///
/// A reply can tell of a step only once the step happened: a step between two renewals is
/// noticed at the next reply at the earliest. The clock uncertainty a client is given
/// ([`LockClient::with_clock_uncertainty`](crate::LockClient::with_clock_uncertainty))
/// covers steps up to that size before any reply. A server that sends no `operationTime`
/// (a standalone) tells of steps only through grants.
#[derive(Debug)]
pub(crate) struct ServerClock {
    clock: Clock,
    /// The lease clock's reading that local times are counted from.
    origin: Instant,
    offset: std::sync::Mutex<Offset>,
    /// The forward steps noticed so far, in all, in nanoseconds.
    stepped: AtomicU64,
}

/// The bounds on the server's clock minus the lease clock, in milliseconds since the Unix
/// epoch minus milliseconds since [`ServerClock::origin`].
#[derive(Debug, Default)]
struct Offset {
    upper: Option<i128>,
    lower: Option<i128>,
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

    /// Now on the lease clock, with the steps noticed so far.
    pub(crate) fn stamp(&self) -> Stamp {
        Stamp {
            at: self.clock.now(),
            stepped: self.stepped(),
        }
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
    /// but for what another reply showed beyond this one.
    pub(crate) fn read_exactly(&self, sent: Stamp, server_ms: i64) -> Duration {
        let received = self.clock.now();
        let upper = i128::from(server_ms) - self.local_ms(sent.at);
        let lower = i128::from(server_ms) - self.local_ms(received);
        self.update(Some(upper), lower);
        let beyond = {
            let offset = self.offset.lock().unwrap_or_else(|e| e.into_inner());
            offset.lower.map_or(0, |known| (known - upper).max(0))
        };
        let beyond = Duration::from_millis(u64::try_from(beyond).unwrap_or(u64::MAX));
        self.stepped().saturating_sub(beyond).max(sent.stepped)
    }

    /// A write's reply, here now, carried the `operationTime` `seconds` (since the Unix
    /// epoch): the server's clock had read at least that much.
    pub(crate) fn read_at_least(&self, seconds: u32) {
        let received = self.clock.now();
        let lower = i128::from(seconds) * 1_000 - self.local_ms(received);
        self.update(None, lower);
    }

    /// Narrows the bounds with a new reading; a lower bound past the upper one is a forward
    /// step of at least the difference. An exact reading below the lower bound is a step
    /// back (which only makes leases last longer): the bounds start over from it.
    fn update(&self, upper: Option<i128>, lower: i128) {
        let mut offset = self.offset.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(upper) = upper {
            if offset.lower.is_some_and(|known| upper < known) {
                *offset = Offset {
                    upper: Some(upper),
                    lower: Some(lower),
                };
                return;
            }
            offset.upper = Some(offset.upper.map_or(upper, |known| known.min(upper)));
        }
        offset.lower = Some(offset.lower.map_or(lower, |known| known.max(lower)));
        let (Some(upper), Some(lower)) = (offset.upper, offset.lower) else {
            return;
        };
        if lower <= upper {
            return;
        }
        // The server's clock is that much ahead of where the bounds said it could be.
        offset.upper = Some(lower);
        drop(offset);
        let step = Duration::from_millis(u64::try_from(lower - upper).unwrap_or(u64::MAX));
        self.stepped.fetch_add(
            u64::try_from(step.as_nanos()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
        if step >= Duration::from_millis(100) {
            tracing::warn!(
                ?step,
                "the server's clock stepped forward: every lease's deadline is shortened by as much"
            );
        } else {
            tracing::debug!(?step, "the server's clock ran ahead");
        }
    }

    /// The bounds now (lower, upper), for tests.
    #[cfg(test)]
    fn bounds(&self) -> (Option<i128>, Option<i128>) {
        let offset = self.offset.lock().unwrap_or_else(|e| e.into_inner());
        (offset.lower, offset.upper)
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
        server.read_exactly(sent, at_ms)
    }

    const BASE_MS: i64 = 1_800_000_000_000;

    #[tokio::test(start_paused = true)]
    async fn a_steady_server_clock_shows_no_step() {
        let server = ServerClock::new(Clock::system());
        exact(&server, BASE_MS, Duration::from_millis(10)).await;
        for second in 1..=30 {
            tokio::time::advance(Duration::from_secs(1)).await;
            // `operationTime`: whole seconds, never ahead of the server's clock.
            server.read_at_least(u32::try_from((BASE_MS / 1000) + second).unwrap());
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
        // bounds leave out up to the round trip and the second's fraction).
        server.read_at_least(u32::try_from(BASE_MS / 1000 + 11).unwrap());
        let first = server.stepped();
        assert!(first >= Duration::from_millis(9_000) && first <= Duration::from_secs(10));
        // An exact reading after a second step of 5 s: noticed, and it shows every step so
        // far had happened when it ran.
        tokio::time::advance(Duration::from_secs(1)).await;
        let counted = exact(&server, BASE_MS + 17_000, Duration::from_millis(10)).await;
        let total = server.stepped();
        assert!(total >= first + Duration::from_millis(4_000), "{total:?}");
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
}
