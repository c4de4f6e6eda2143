//! Which of mongolock's commands a request is, read from the command document a fault proxy
//! parsed ([`Requests::matching`](mongolock_testkit::faults::proxy::Requests::matching)), so
//! that a fault can pick out one kind of command of one client. The harness's clients lock
//! in one collection, so the matchers do not look at its name.
//!
//! The library sends every lock write as one command on the lock collection (see its
//! `command` module): an acquire attempt is an upserting `findAndModify` that returns the
//! document after the change (`new: true`); a withdrawal of an attempt is an upserting one
//! that returns the document before it (`new: false`, it leaves a tombstone); the release of
//! one grant is a `findAndModify` without upsert whose query names the grant's entry
//! (`exclusive.token`, or `shared` with `$elemMatch`), or, for a grant whose attempt must
//! never be granted again (its outcome was once unknown, or it was resumed), a withdrawal of
//! that attempt, which retires it; renewals and adoptions are `update`s.
//! `tests/commands.rs` runs the library through a proxy and checks that each matcher picks
//! out what it says, so that a change of the library's commands cannot silently leave a
//! fault with nothing to hit.

use bson::{Bson, Document};

/// `HostUnreachable`: the error a mongos answers for a shard it cannot reach. The command did
/// not run; mongolock retries it (a transient code).
pub const HOST_UNREACHABLE: i32 = 6;

/// `ExceededTimeLimit`: the error a mongos answers when its request to a shard timed out,
/// which the shard may have applied. mongolock takes a write's outcome as unknown.
pub const EXCEEDED_TIME_LIMIT: i32 = 262;

/// True for a `findAndModify`.
fn find_and_modify(command: &Document) -> bool {
    command.get_str("findAndModify").is_ok()
}

/// The value of a boolean option of `command` (`false` when absent).
fn flag(command: &Document, name: &str) -> bool {
    matches!(command.get(name), Some(Bson::Boolean(true)))
}

/// The resource a `findAndModify` is about (its query's `_id`).
pub fn resource(command: &Document) -> Option<&str> {
    if !find_and_modify(command) {
        return None;
    }
    command.get_document("query").ok()?.get_str("_id").ok()
}

/// An acquire attempt (of a handle, a multi-lock member, a campaign, or `xlock`).
pub fn is_attempt(command: &Document) -> bool {
    find_and_modify(command) && flag(command, "upsert") && flag(command, "new")
}

/// A withdrawal of an attempt (`release_attempt`, what a dropped or refused acquire sends).
pub fn is_withdrawal(command: &Document) -> bool {
    find_and_modify(command) && flag(command, "upsert") && !flag(command, "new")
}

/// The release of one grant (a guard's release, background or awaited).
pub fn is_release(command: &Document) -> bool {
    find_and_modify(command)
        && !flag(command, "upsert")
        && command.get_document("query").is_ok_and(|query| {
            query.contains_key("exclusive.token") || query.contains_key("shared")
        })
}

/// What a holder's let-go of `resource` sends: a release, or a withdrawal that retires the
/// grant's attempt.
pub fn is_let_go_of(command: &Document, resource: &str) -> bool {
    (is_release(command) || is_withdrawal(command)) && self::resource(command) == Some(resource)
}

/// An `unlock` of a lock id: an `update` whose statement spares the entries that name the
/// unlock call (its query mentions `exclusive.afterUnlocks`, which nothing else the library
/// sends queries).
pub fn is_unlock(command: &Document) -> bool {
    command.get_str("update").is_ok()
        && command.get_array("updates").is_ok_and(|updates| {
            updates.iter().any(|statement| {
                let query = statement.as_document().and_then(|s| s.get("q"));
                query.is_some_and(|q| mentions(q, "exclusive.afterUnlocks"))
            })
        })
}

/// True if `value` has a key `key` at any depth.
fn mentions(value: &Bson, key: &str) -> bool {
    match value {
        Bson::Document(doc) => doc.iter().any(|(k, v)| k == key || mentions(v, key)),
        Bson::Array(items) => items.iter().any(|v| mentions(v, key)),
        _ => false,
    }
}

/// Any lock write: an attempt, a withdrawal, a release, a renewal, an adoption, an unlock (a
/// `findAndModify`, `update` or `delete`).
pub fn is_lock_write(command: &Document) -> bool {
    find_and_modify(command)
        || command.get_str("update").is_ok()
        || command.get_str("delete").is_ok()
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;
    use crate::workload::COLLECTION;

    #[test]
    fn each_kind_of_command_is_told_apart() {
        let attempt = doc! {
            "findAndModify": COLLECTION, "query": {"_id": "r0", "mongolock": 1},
            "update": [], "upsert": true, "new": true,
        };
        let withdrawal = doc! {
            "findAndModify": COLLECTION, "query": {"_id": "r0", "mongolock": 1},
            "update": [], "upsert": true, "new": false,
        };
        let release = doc! {
            "findAndModify": COLLECTION,
            "query": {"_id": "r0", "exclusive.lockId": "a", "exclusive.token": 3_i64},
            "update": [], "new": false,
        };
        let renewal = doc! { "update": COLLECTION, "updates": [] };
        let read = doc! { "find": COLLECTION, "filter": {"_id": "r0"} };
        assert!(is_attempt(&attempt) && !is_withdrawal(&attempt) && !is_release(&attempt));
        assert!(is_withdrawal(&withdrawal) && !is_attempt(&withdrawal) && !is_release(&withdrawal));
        assert!(is_release(&release) && !is_attempt(&release) && !is_withdrawal(&release));
        assert!(!is_attempt(&renewal) && !is_release(&renewal) && is_lock_write(&renewal));
        assert!(!is_attempt(&read) && !is_lock_write(&read));
        let unlock = doc! { "update": COLLECTION, "updates": [{ "q": { "$and": [
            { "mongolock": 1 },
            { "$or": [{ "exclusive.lockId": "a", "exclusive.afterUnlocks": { "$ne": 1 } }] },
        ]}, "u": [], "multi": true }] };
        assert!(is_unlock(&unlock) && is_lock_write(&unlock) && !is_unlock(&renewal));
        assert_eq!(resource(&release), Some("r0"));
        assert!(is_let_go_of(&release, "r0") && is_let_go_of(&withdrawal, "r0"));
        assert!(!is_let_go_of(&release, "r1") && !is_let_go_of(&attempt, "r0"));
        assert_eq!(resource(&renewal), None);
    }
}
