//! Unlocks whose copies may still land.
//!
//! [`unlock`](crate::LockClient::unlock) removes every entry of its lock id that it finds
//! when it runs. A copy of it that reaches the server late (the call timed out, its
//! connection was cut, its future was dropped) would also remove a grant the same lock id
//! was given *after* the unlock was sent, while that grant's holder believes it holds the
//! lock.
//!
//! So every unlock call names itself with an operation id, and the client remembers, per
//! lock id, the calls whose every copy it does not know the fate of: from the moment the
//! call starts until a late copy is no longer taken to be possible (the life of a
//! tombstone, [`TOMBSTONE_MIN_LIFE`], plus the command time limit), unless the call ends
//! with every copy answered. Every attempt of that lock id by this client carries those ids,
//! and a grant stores them in its entry (`afterUnlocks`, see `crate::schema`); resuming a
//! lease adds them to its entry too. An unlock leaves an entry that names it: its late copy
//! removes only what was granted before it was sent.
//!
//! What it does not cover: another process using the same lock id (a lock id belongs to
//! one holder), and a copy later than that life (as for tombstones).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bson::oid::ObjectId;

use crate::error::{Error, Result};
use crate::schema::TOMBSTONE_MIN_LIFE;

/// The most unlocks of one lock id whose copies may still land that an attempt carries
/// (12 bytes each, in the command and in the entry): an attempt of a lock id with more is
/// refused until some of them are answered or age out.
pub(crate) const MAX_DOUBTED_UNLOCKS: usize = 16;

/// The fewest lock ids the map holds before it is swept of those whose unlocks all aged out.
const SWEEP_FROM: usize = 64;

/// The unlocks of each lock id whose copies may still land, each until when.
///
/// The map holds every lock id with such an unlock, and those whose unlocks aged out since
/// the last sweep: a lock id's list is pruned whenever the lock id is used, and the whole
/// map whenever it has doubled since it was last swept, so that it stays within twice the
/// lock ids with a live doubt (and [`SWEEP_FROM`]) however many lock ids come and go.
#[derive(Debug, Default)]
pub(crate) struct DoubtedUnlocks {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_lock_id: HashMap<String, Vec<Doubted>>,
    /// The map's size that sweeps it next.
    sweep_at: usize,
}

/// One unlock whose copies may still land.
#[derive(Debug)]
struct Doubted {
    op: ObjectId,
    /// When a late copy of it is no longer taken to be possible.
    until: Instant,
    /// Still on its way (its call has not ended), or ended with an unknown outcome (it
    /// failed so, its future was dropped, or a copy of it was never answered).
    in_flight: bool,
}

/// An unlock on its way, doubted until [`settled`](Unlocking::settled) says every copy was
/// answered. Dropped otherwise, its outcome is unknown: it stays doubted for its life.
#[derive(Debug)]
pub(crate) struct Unlocking<'a> {
    doubts: &'a DoubtedUnlocks,
    lock_id: String,
    op: ObjectId,
}

impl Unlocking<'_> {
    /// The unlock's operation id, which its command carries.
    pub(crate) fn op(&self) -> ObjectId {
        self.op
    }

    /// Every copy of the unlock was answered: none can land later.
    pub(crate) fn settled(self) {
        let mut inner = self.doubts.lock();
        if let Some(doubted) = inner.by_lock_id.get_mut(&self.lock_id) {
            doubted.retain(|d| d.op != self.op);
            if doubted.is_empty() {
                inner.by_lock_id.remove(&self.lock_id);
            }
        }
        // Dropped next, it finds nothing left to mark.
    }
}

impl Drop for Unlocking<'_> {
    fn drop(&mut self) {
        let mut inner = self.doubts.lock();
        if let Some(doubted) = inner.by_lock_id.get_mut(&self.lock_id)
            && let Some(d) = doubted.iter_mut().find(|d| d.op == self.op)
        {
            d.in_flight = false;
        }
    }
}

impl DoubtedUnlocks {
    /// An unlock of `lock_id` is about to be sent, within the command time limit `limit`:
    /// doubted from now on, until the returned token says it settled.
    pub(crate) fn sending(&self, lock_id: &str, limit: Duration) -> Unlocking<'_> {
        self.sending_at(lock_id, limit, Instant::now())
    }

    fn sending_at(&self, lock_id: &str, limit: Duration, now: Instant) -> Unlocking<'_> {
        let op = ObjectId::new();
        let until = now + TOMBSTONE_MIN_LIFE + limit;
        let mut inner = self.lock();
        let doubted = inner.by_lock_id.entry(lock_id.to_owned()).or_default();
        prune(doubted, now);
        doubted.push(Doubted {
            op,
            until,
            in_flight: true,
        });
        inner.sweep(now);
        Unlocking {
            doubts: self,
            lock_id: lock_id.to_owned(),
            op,
        }
    }

    /// The unlocks of `lock_id` whose copies may still land, for an attempt (or an
    /// adoption) of that lock id to carry.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when there are more than [`MAX_DOUBTED_UNLOCKS`].
    pub(crate) fn of(&self, lock_id: &str) -> Result<Vec<ObjectId>> {
        self.of_at(lock_id, Instant::now())
    }

    fn of_at(&self, lock_id: &str, now: Instant) -> Result<Vec<ObjectId>> {
        let mut inner = self.lock();
        let Some(doubted) = inner.by_lock_id.get_mut(lock_id) else {
            return Ok(Vec::new());
        };
        prune(doubted, now);
        if doubted.len() > MAX_DOUBTED_UNLOCKS {
            return Err(too_many(lock_id, doubted));
        }
        let ids = doubted.iter().map(|d| d.op).collect();
        if doubted.is_empty() {
            inner.by_lock_id.remove(lock_id);
        }
        Ok(ids)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// Forgets the lock ids whose unlocks all aged out, once the map has doubled since it
    /// was last swept (amortized: a sweep visits at most twice the lock ids added since).
    fn sweep(&mut self, now: Instant) {
        if self.by_lock_id.len() < self.sweep_at.max(SWEEP_FROM) {
            return;
        }
        self.by_lock_id.retain(|_, doubted| {
            prune(doubted, now);
            !doubted.is_empty()
        });
        self.sweep_at = self.by_lock_id.len() * 2;
    }
}

/// Forgets the unlocks whose late copies are no longer taken to be possible.
fn prune(doubted: &mut Vec<Doubted>, now: Instant) {
    doubted.retain(|d| d.until > now);
}

/// The refusal of an attempt of `lock_id` with more than [`MAX_DOUBTED_UNLOCKS`] unlocks
/// whose copies may still land: it says how many are on their way and how many ended with
/// an unknown outcome.
fn too_many(lock_id: &str, doubted: &[Doubted]) -> Error {
    let in_flight = doubted.iter().filter(|d| d.in_flight).count();
    let unknown = doubted.len() - in_flight;
    let what = match (in_flight, unknown) {
        (n, 0) => format!("{n} unlocks of {lock_id:?} are still in flight"),
        (0, n) => format!("{n} unlocks of {lock_id:?} had an unknown outcome in the last minutes"),
        (n, m) => format!(
            "{n} unlocks of {lock_id:?} are still in flight and {m} had an unknown outcome in the last minutes"
        ),
    };
    Error::invalid(
        "lock_id",
        format!(
            "{what} (more than {MAX_DOUBTED_UNLOCKS} in all): a late copy of one could remove a new lock of it; wait for them, or use another lock id"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(1);

    #[test]
    fn an_unlock_is_doubted_until_every_copy_was_answered() {
        let doubts = DoubtedUnlocks::default();
        let unlocking = doubts.sending("job", LIMIT);
        let op = unlocking.op();
        assert_eq!(doubts.of("job").unwrap(), [op]);
        assert!(doubts.of("other").unwrap().is_empty());
        unlocking.settled();
        assert!(doubts.of("job").unwrap().is_empty());
        // One that ended with an unknown outcome stays doubted.
        let unknown = doubts.sending("job", LIMIT);
        let op = unknown.op();
        drop(unknown);
        assert_eq!(doubts.of("job").unwrap(), [op]);
    }

    /// The refusal's message, for `in_flight` unlocks of "job" still on their way and
    /// `unknown` ones that ended with an unknown outcome.
    fn refusal(in_flight: usize, unknown: usize) -> String {
        let doubts = DoubtedUnlocks::default();
        let on_their_way: Vec<_> = (0..in_flight)
            .map(|_| doubts.sending("job", LIMIT))
            .collect();
        for _ in 0..unknown {
            drop(doubts.sending("job", LIMIT));
        }
        let error = doubts.of("job").unwrap_err();
        drop(on_their_way);
        match error.kind() {
            crate::ErrorKind::InvalidArgument {
                argument: "lock_id",
                ..
            } => error.to_string(),
            other => panic!("refused for another reason: {other:?}"),
        }
    }

    #[test]
    fn too_many_doubted_unlocks_refuse_the_lock_id_saying_what_they_are() {
        let n = MAX_DOUBTED_UNLOCKS + 1;
        let in_flight = refusal(n, 0);
        assert!(
            in_flight.contains(&format!("{n} unlocks of \"job\" are still in flight")),
            "{in_flight}"
        );
        assert!(!in_flight.contains("unknown outcome"), "{in_flight}");

        let unknown = refusal(0, n);
        assert!(
            unknown.contains(&format!("{n} unlocks of \"job\" had an unknown outcome")),
            "{unknown}"
        );
        assert!(!unknown.contains("in flight"), "{unknown}");

        let both = refusal(10, 7);
        assert!(
            both.contains("10 unlocks of \"job\" are still in flight and 7 had an unknown outcome"),
            "{both}"
        );
    }

    #[test]
    fn as_many_doubted_unlocks_as_an_attempt_carries_are_not_refused() {
        let doubts = DoubtedUnlocks::default();
        for _ in 0..MAX_DOUBTED_UNLOCKS {
            drop(doubts.sending("job", LIMIT));
        }
        assert_eq!(doubts.of("job").unwrap().len(), MAX_DOUBTED_UNLOCKS);
    }

    #[test]
    fn the_map_stays_bounded_as_distinct_lock_ids_come_and_go() {
        let doubts = DoubtedUnlocks::default();
        let life = TOMBSTONE_MIN_LIFE + LIMIT;
        let start = Instant::now();
        let per_round = 1_000;
        // Rounds of unlocks of lock ids never used again, each with an unknown outcome (the
        // call returned, but a copy may land), one life apart: by each round, the last
        // round's can no longer land.
        for round in 0..10u32 {
            let now = start + life * round + Duration::from_millis(1) * round;
            for i in 0..per_round {
                drop(doubts.sending_at(&format!("job-{round}-{i}"), LIMIT, now));
            }
            let held = doubts.lock().by_lock_id.len();
            assert!(
                held <= 2 * per_round + SWEEP_FROM,
                "round {round}: {held} lock ids kept, of which {per_round} may still see a late copy"
            );
        }
        // And those answered in full leave nothing behind.
        let doubts = DoubtedUnlocks::default();
        for i in 0..per_round {
            doubts.sending(&format!("job-{i}"), LIMIT).settled();
        }
        assert_eq!(doubts.lock().by_lock_id.len(), 0);
    }

    #[test]
    fn a_lock_id_whose_unlocks_aged_out_carries_none() {
        let doubts = DoubtedUnlocks::default();
        let start = Instant::now();
        drop(doubts.sending_at("job", LIMIT, start));
        assert_eq!(doubts.of_at("job", start).unwrap().len(), 1);
        let later = start + TOMBSTONE_MIN_LIFE + LIMIT;
        assert!(doubts.of_at("job", later).unwrap().is_empty());
        assert_eq!(doubts.lock().by_lock_id.len(), 0);
    }
}
