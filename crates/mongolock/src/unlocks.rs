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
/// refused until some of them age out.
pub(crate) const MAX_DOUBTED_UNLOCKS: usize = 16;

/// The unlocks of each lock id whose copies may still land, each until when.
#[derive(Debug, Default)]
pub(crate) struct DoubtedUnlocks {
    by_lock_id: Mutex<HashMap<String, Vec<(ObjectId, Instant)>>>,
}

impl DoubtedUnlocks {
    /// An unlock of `lock_id` is about to be sent, within the command time limit `limit`:
    /// its id, doubted from now on.
    pub(crate) fn sending(&self, lock_id: &str, limit: Duration) -> ObjectId {
        let op = ObjectId::new();
        let until = Instant::now() + TOMBSTONE_MIN_LIFE + limit;
        let mut map = self.lock();
        let doubted = map.entry(lock_id.to_owned()).or_default();
        prune(doubted);
        doubted.push((op, until));
        op
    }

    /// Every copy of the unlock `op` of `lock_id` was answered: none can land later.
    pub(crate) fn settled(&self, lock_id: &str, op: ObjectId) {
        let mut map = self.lock();
        if let Some(doubted) = map.get_mut(lock_id) {
            doubted.retain(|(id, _)| *id != op);
            if doubted.is_empty() {
                map.remove(lock_id);
            }
        }
    }

    /// The unlocks of `lock_id` whose copies may still land, for an attempt (or an
    /// adoption) of that lock id to carry.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when there are more than [`MAX_DOUBTED_UNLOCKS`].
    pub(crate) fn of(&self, lock_id: &str) -> Result<Vec<ObjectId>> {
        let mut map = self.lock();
        let Some(doubted) = map.get_mut(lock_id) else {
            return Ok(Vec::new());
        };
        prune(doubted);
        if doubted.len() > MAX_DOUBTED_UNLOCKS {
            return Err(Error::invalid(
                "lock_id",
                format!(
                    "{} unlocks of {lock_id:?} failed with an unknown outcome in the last minutes (more than {MAX_DOUBTED_UNLOCKS}): a late copy of one could remove a new lock of it; use another lock id",
                    doubted.len()
                ),
            ));
        }
        let ids = doubted.iter().map(|(id, _)| *id).collect();
        if doubted.is_empty() {
            map.remove(lock_id);
        }
        Ok(ids)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<(ObjectId, Instant)>>> {
        self.by_lock_id.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Forgets the unlocks whose late copies are no longer taken to be possible.
fn prune(doubted: &mut Vec<(ObjectId, Instant)>) {
    let now = Instant::now();
    doubted.retain(|(_, until)| *until > now);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlock_is_doubted_until_every_copy_was_answered() {
        let doubts = DoubtedUnlocks::default();
        let op = doubts.sending("job", Duration::from_secs(1));
        assert_eq!(doubts.of("job").unwrap(), [op]);
        assert!(doubts.of("other").unwrap().is_empty());
        doubts.settled("job", op);
        assert!(doubts.of("job").unwrap().is_empty());
    }

    #[test]
    fn too_many_doubted_unlocks_refuse_the_lock_id() {
        let doubts = DoubtedUnlocks::default();
        for _ in 0..=MAX_DOUBTED_UNLOCKS {
            doubts.sending("job", Duration::from_secs(1));
        }
        let error = doubts.of("job").unwrap_err();
        assert!(matches!(
            error.kind(),
            crate::ErrorKind::InvalidArgument {
                argument: "lock_id",
                ..
            }
        ));
    }
}
