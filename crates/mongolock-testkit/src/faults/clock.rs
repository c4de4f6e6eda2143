//! The emulator's clock: `$$NOW`, `$currentDate`, the TTL monitor and every server-side
//! timestamp read it. Tests move it forward to make leases expire without waiting.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bson::DateTime;

/// A handle on the server clock. Clones share the same clock.
///
/// The clock is the machine's wall clock plus an offset that only grows, so it never runs
/// backwards: [`Clock::advance`] jumps it forward, and readings never decrease.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    inner: Arc<ClockInner>,
}

#[derive(Debug, Default)]
struct ClockInner {
    offset_ms: AtomicI64,
    last_ms: AtomicI64,
}

impl Clock {
    /// A clock that reads the wall clock with no offset.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current server time, in milliseconds (BSON dates have millisecond precision).
    pub fn now(&self) -> DateTime {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let reading = wall.saturating_add(self.inner.offset_ms.load(Ordering::SeqCst));
        // Never go backwards, even if the wall clock is stepped back.
        let previous = self.inner.last_ms.fetch_max(reading, Ordering::SeqCst);
        DateTime::from_millis(previous.max(reading))
    }

    /// Moves the clock forward by `by` (rounded down to milliseconds) and returns the new time.
    pub fn advance(&self, by: Duration) -> DateTime {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.inner.offset_ms.fetch_add(ms, Ordering::SeqCst);
        self.now()
    }

    /// How far the clock has been moved ahead of the wall clock.
    pub fn offset(&self) -> Duration {
        Duration::from_millis(self.inner.offset_ms.load(Ordering::SeqCst).max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_moves_now_forward_by_at_least_the_step() {
        let clock = Clock::new();
        let before = clock.now().timestamp_millis();
        let after = clock.advance(Duration::from_secs(3600)).timestamp_millis();
        assert!(after - before >= 3_600_000, "{before} -> {after}");
        assert!(clock.now().timestamp_millis() >= after);
        assert_eq!(clock.offset(), Duration::from_secs(3600));
    }

    #[test]
    fn clones_share_the_clock() {
        let clock = Clock::new();
        let other = clock.clone();
        other.advance(Duration::from_secs(10));
        assert_eq!(clock.offset(), Duration::from_secs(10));
    }
}
