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
}
