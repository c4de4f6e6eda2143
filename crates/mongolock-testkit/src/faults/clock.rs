//! The emulator's clock: `$$NOW`, `$currentDate`, the TTL monitor and every server-side
//! timestamp read it. Tests move it forward to make leases expire without waiting, and back
//! as a real server's system clock can be stepped back.
//!
//! mongod reads `$$NOW` from its system clock (`Variables::generateRuntimeConstants` sets it
//! to `Date_t::now()`, `src/mongo/db/pipeline/variables.cpp`, which is `curTimeMillis64()`:
//! `gettimeofday`, `src/mongo/util/time_support.cpp`), and an NTP step or an operator moves
//! that clock either way. Its cluster time never goes back: `LogicalClock::reserveTicks`
//! (`src/mongo/db/logical_clock.cpp`) moves the cluster time's seconds to the system clock's
//! only when the system clock is ahead, and otherwise counts up the increment. The emulator
//! follows both: [`Clock::now`] steps back with [`Clock::step_back`], [`Clock::highest`]
//! (which its cluster time reads) does not.
//!
//! The members of a replica set each have their own system clock: a member's clock
//! ([`Clock::following`]) reads a clock the set shares plus an offset of its own
//! ([`Clock::set_offset`]), so a test moves every member's clock at once through the shared
//! one and puts one member ahead or behind the others with its offset.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bson::DateTime;
use parking_lot::Mutex;

/// A handle on the server clock. Clones share the same clock.
///
/// The clock is the machine's wall clock plus an offset that tests move:
/// [`Clock::advance`] jumps it forward, [`Clock::step_back`] jumps it back. Apart from
/// those steps back its readings never decrease, even when the machine's wall clock is
/// stepped back.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    inner: Arc<Mutex<ClockInner>>,
}

#[derive(Debug, Default)]
struct ClockInner {
    /// Added to the wall clock, in milliseconds: the steps forward less the steps back.
    offset_ms: i64,
    /// The latest reading since the last step back (less that step): no reading is below.
    last_ms: i64,
    /// The latest reading ever, steps back ignored.
    highest_ms: i64,
    /// The clock this one reads instead of the wall clock (a replica-set member's reads the
    /// set's): its steps are this clock's too, and this clock's own steps and offset come
    /// on top.
    base: Option<Clock>,
}

impl Clock {
    /// A clock that reads the wall clock with no offset.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current server time, in milliseconds (BSON dates have millisecond precision):
    /// what `$$NOW` reads.
    pub fn now(&self) -> DateTime {
        let base = self.inner.lock().base.clone();
        if let Some(base) = base {
            // The base clock already never goes back but by its own steps back, which this
            // clock takes as they come; its own offset moves it either way.
            let reading = base
                .now()
                .timestamp_millis()
                .saturating_add(self.inner.lock().offset_ms);
            let mut inner = self.inner.lock();
            inner.last_ms = reading;
            inner.highest_ms = inner.highest_ms.max(reading);
            return DateTime::from_millis(reading);
        }
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let mut inner = self.inner.lock();
        // Never go backwards but by a step back, even if the wall clock is stepped back.
        let reading = wall.saturating_add(inner.offset_ms).max(inner.last_ms);
        inner.last_ms = reading;
        inner.highest_ms = inner.highest_ms.max(reading);
        DateTime::from_millis(reading)
    }

    /// A clock that reads `base` plus an offset of its own (zero until
    /// [`Clock::set_offset`], [`Clock::advance`] or [`Clock::step_back`] move it): a
    /// replica-set member's system clock, `base` being the set's.
    pub fn following(base: &Clock) -> Self {
        let clock = Self::new();
        clock.inner.lock().base = Some(base.clone());
        clock
    }

    /// Sets how far this clock reads ahead of (positive) or behind (negative) the clock it
    /// follows, in milliseconds, and returns the new time. On a clock that follows none it
    /// is the offset from the wall clock; a move back is a step back, as
    /// [`Clock::step_back`]'s.
    pub fn set_offset(&self, offset_ms: i64) -> DateTime {
        {
            let mut inner = self.inner.lock();
            let by = offset_ms.saturating_sub(inner.offset_ms);
            inner.offset_ms = offset_ms;
            if by < 0 {
                inner.last_ms = inner.last_ms.saturating_add(by);
            }
        }
        self.now()
    }

    /// This clock's own offset, in milliseconds: from the clock it follows, or from the
    /// wall clock (negative after steps back past it).
    pub fn offset_ms(&self) -> i64 {
        self.inner.lock().offset_ms
    }

    /// The latest time the clock has read, now included, whatever steps back came since:
    /// what a cluster time follows, whose seconds never go back (see the module's notes).
    pub fn highest(&self) -> DateTime {
        let now = self.now().timestamp_millis();
        let highest = self.inner.lock().highest_ms;
        DateTime::from_millis(highest.max(now))
    }

    /// Moves the clock forward by `by` (rounded down to milliseconds) and returns the new time.
    pub fn advance(&self, by: Duration) -> DateTime {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        {
            let mut inner = self.inner.lock();
            inner.offset_ms = inner.offset_ms.saturating_add(ms);
        }
        self.now()
    }

    /// Moves the clock back by `by` (rounded down to milliseconds), as an NTP step or an
    /// operator moves a server's system clock back, and returns the new time: the reading
    /// before less `by`, give or take the time between the two. [`Clock::highest`] stays
    /// where it was.
    pub fn step_back(&self, by: Duration) -> DateTime {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        {
            let mut inner = self.inner.lock();
            inner.offset_ms = inner.offset_ms.saturating_sub(ms);
            inner.last_ms = inner.last_ms.saturating_sub(ms);
        }
        self.now()
    }

    /// How far the clock has been moved ahead of the wall clock: the steps forward less the
    /// steps back, and zero when the steps back outweigh them.
    pub fn offset(&self) -> Duration {
        Duration::from_millis(self.inner.lock().offset_ms.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_following_clock_reads_its_base_plus_its_offset() {
        let base = Clock::new();
        let member = Clock::following(&base);
        let ahead = member.set_offset(5_000).timestamp_millis();
        let shared = base.now().timestamp_millis();
        assert!(
            (4_900..=5_000).contains(&(ahead - shared)),
            "{shared} {ahead}"
        );
        // The base's steps move it too.
        base.advance(Duration::from_secs(60));
        assert!(member.now().timestamp_millis() >= ahead + 60_000);
        // Behind the base: a step back of its own; its highest reading stays.
        let highest = member.highest().timestamp_millis();
        let behind = member.set_offset(-5_000).timestamp_millis();
        assert!(behind <= base.now().timestamp_millis() - 4_900, "{behind}");
        assert!(member.highest().timestamp_millis() >= highest);
        assert_eq!(member.offset_ms(), -5_000);
    }

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

    #[test]
    fn a_step_back_moves_now_back_but_not_the_highest_reading() {
        let clock = Clock::new();
        clock.advance(Duration::from_secs(120));
        let before = clock.now().timestamp_millis();
        let after = clock.step_back(Duration::from_secs(60)).timestamp_millis();
        assert!(
            (before - 60_000..before - 59_000).contains(&after),
            "{before} -> {after}"
        );
        assert!(clock.highest().timestamp_millis() >= before);
        assert_eq!(clock.offset(), Duration::from_secs(60));
        // It runs on from there, and never below.
        assert!(clock.now().timestamp_millis() >= after);
        // Back past the wall clock: the offset reads zero, the clock reads the earlier time.
        let earlier = clock.step_back(Duration::from_secs(120)).timestamp_millis();
        assert!(earlier < after - 119_000, "{after} -> {earlier}");
        assert_eq!(clock.offset(), Duration::ZERO);
        assert!(clock.highest().timestamp_millis() >= before);
    }
}
