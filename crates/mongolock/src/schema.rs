//! The stored document: its fields and decoding. The expressions the commands' pipelines
//! share over it (whose document it is, the live entries, the document after a change) are in
//! `command/expr.rs`.
//!
//! One document per resource:
//!
//! ```text
//! { _id:       <resource name>,
//!   mongolock: 1,                     // the mark: written by this crate (the format's version)
//!   fence:     Int64,                 // the last fencing token granted on this resource
//!   exclusive: null | <entry>,
//!   shared:    [ <entry>, ... ],
//!   released:  [ { nonce: ObjectId, until: Date }, ... ],  // withdrawn attempts (tombstones)
//!   cap:       Int64 | null,          // the cap of the live shared entries (null: none)
//!   queue:     [ { lockId: String, kind: "exclusive" | "shared", until: Date,
//!                  call: ObjectId,    // the waiting call that holds it
//!                  keeper: String }, ... ],         // the line
//!   wake:      String,                // "<the head's keeper> <stamp>": whom the last
//!                                     // change that let the head of the line in woke
//!   idleSince: Date | null }          // see below
//!
//! <entry> = { lockId: String, nonce: ObjectId, owner: String|null, host: String|null,
//!             keeper: String|null,    // the lease keeper renewing it (see `lease`)
//!             token: Int64, createdAt: Date,
//!             renewedAt: Date,        // the last renewal; missing until the first
//!             expiresAt: Date|null,   // null: no TTL; the end of the lease plus its
//!                                     // lock-delay, if any (see below)
//!             ttlMs: Int32|Int64|null,
//!             delayMs: Int32|Int64,   // the lock-delay; missing: none
//!             minHoldMs: Int32|Int64, // the minimum hold; missing: none
//!             letGoAt: Date,          // let go of within its hold; missing: not
//!             adopted: true,          // resumed by a client; missing: never
//!             afterUnlocks: [ObjectId] }  // unlocks that leave it; missing: none
//! ```
//!
//! `cap` is stored with the shared entries: the first shared grant sets it, and a shared
//! request with another cap is refused while any shared entry is live (a second, silent limit
//! would be worse). It is cleared when the last shared entry goes.
//!
//! `queue` is the resource's line: the waiters, in the order they joined, each with the kind
//! it waits for and a heartbeat (`until`). A waiting acquire joins with its first refused
//! attempt; its client refreshes its place where it stands (`crate::places`); a grant goes
//! only past places that let it: an exclusive grant to the head of the live line, a shared
//! one when only readers stand before it (and, under a cap, fewer than the free permits). A
//! place whose `until` has passed counts for nothing and is dropped by the next write, so a
//! crashed waiter holds up the line only until then; one that gives up takes its place out.
//! A place names the waiting call that holds it (`call`, an id made for each call): a
//! waiter that gives up (`leave_line`, a withdrawal) takes out its own call's place only,
//! so a late copy of it leaves the place of its lock id's next call where it stands. A
//! call of the lock id that finds its lock id's place named otherwise (its restarted
//! process's predecessor's, or written by a version before places named their call) takes
//! it over, its turn kept, and names it; until then such a place is nobody's to take out,
//! and lapses at its `until`. A grant takes out every place of its lock id.
//! A single attempt joins no line. Places do not count in `idleSince`: a line keeps no
//! document from the TTL index or `purge`.
//!
//! `wake` names the waiter to wake. A change that may let the head of the line
//! in (a release, a withdrawal, a force release, an unlock or purge, a waiter leaving the
//! line, a shared grant with a reader next in line) and that leaves the resource open to it
//! (no exclusive entry, and no shared entry either or a reader at the head with a permit
//! left) sets `wake` to the head place's `keeper` and a stamp new to that change (64 random
//! bits, in hex), so that it changes even when the same waiter is
//! woken twice. A grant clears a `wake` left from before (the waiter it named was woken by
//! the change that set it), so that later whole-document events (every pipeline update on a
//! 4.4 server, its holder's renewals among them) do not name it. Each lock client's change
//! stream passes only the changes that
//! name its own keeper (and deletes), so one release wakes one waiter, and grants, renewals
//! and joins wake nobody. A waiter whose turn comes otherwise (the head's place lapsed, the
//! holder's lease ran out) is woken by its timer.
//!
//! `delayMs` is the entry's lock-delay ([`LockDetails::lock_delay`](crate::LockDetails::lock_delay)).
//! An entry with one stays in force for that long after its lease ends, so a lease that ends
//! without a release keeps the resource from everybody until the delay has passed. Its
//! `expiresAt` is therefore the end of the delay, and the lease ends `delayMs` before it:
//! the expressions that ask whether an entry is in force (acquire, purge, `idleSince`, the
//! TTL index) read `expiresAt` as it is, and those that ask whether its holder still holds
//! the lease (renewals, a release's report, proclaim, the keeper's read of its leases,
//! status) subtract the delay (`command/expr.rs`: `is_live` and `holds`). The client
//! decodes the lease's end ([`Holder::expires_at`](crate::Holder::expires_at)). A force
//! release ends such an entry's lease at once instead of removing it; a release by its
//! holder removes it, delay or not.
//!
//! `keeper` names the process-local lease keeper that renews the entry (one command renews
//! every entry of a keeper, whatever their number), and in a place in line the lock client
//! the waiter waits in. A lease's renewals, release and withdrawal match it, so that when
//! another client resumes the lease (it rewrites `keeper`: see `command/keepalive.rs`,
//! `adopt`) the client that held it before renews and removes nothing of it.
//!
//! `minHoldMs` is the entry's minimum hold ([`LockDetails::min_hold`](crate::LockDetails::min_hold)).
//! When its holder lets go (a release, a retiring release, an unlock) before `createdAt +
//! minHoldMs`, the entry is not removed: its lease ends (`delayMs` becomes the hold and
//! `expiresAt` `createdAt + minHoldMs`, so the lease counts as ended at `createdAt`) and it
//! stays in force until then, as in a lock-delay (`command/expr.rs`: `let_go`), marked
//! `letGoAt` (when it was let go of). Such an entry is not an abandoned lock
//! (`purge_abandoned_groups` leaves its lock id's other locks alone), and the change that
//! lets go of it wakes the head of the line as if it were gone, so that the waiter learns
//! from its next attempt when the hold ends and sleeps until then. For a shared entry (a
//! reader's, a semaphore's permit) the hold keeps that share in force: writers stay out and
//! the permit stays taken, and other readers come in as they could before.
//!
//! `adopted` marks an entry whose lease a client resumed (`command/keepalive.rs`, `adopt`):
//! a retiring release removes a re-grant of its attempt (the same nonce under another token,
//! which only a late copy makes, and which nobody holds), but not one that a client adopted
//! since, which its adopter holds.
//!
//! `afterUnlocks` names the [`unlock`](crate::LockClient::unlock) calls of the entry's lock
//! id that its client had sent, and did not know the fate of every copy of, when it asked
//! for the entry (or resumed it): an unlock leaves an entry that names it, so a late copy of
//! an unlock never removes a grant made after it was sent (see `crate::unlocks`).
//!
//! `released` holds the nonces of attempts withdrawn by `release_attempt` (or retired by
//! the release of a grant whose attempt had an unknown outcome): an acquire that carries
//! one of them is never granted, so a late copy of a dropped acquire cannot land after it
//! was given up. A tombstone lives for the attempt's TTL, and at least
//! [`TOMBSTONE_MIN_LIFE`]; dropping one early could let its attempt through. A force
//! release leaves one too, under a nonce of its own, so that a repeated copy of it changes
//! nothing. Their number is bounded by [`MAX_TOMBSTONES`]: a withdrawal that finds that
//! many in force seals the resource instead, with one tombstone whose nonce is null (always
//! the first, where an acquire's reply reads it): until
//! it ends (the latest end of the tombstones it stands for), *every* attempt is refused
//! ([`Attempt::Sealed`](crate::Attempt::Sealed)), so no late copy can be granted and the
//! document stays bounded. Grants made before it stay held, and are renewed and released.
//!
//! `idleSince` is the server time from which the resource is free if nobody renews: when it
//! holds no entry, the time it became free; when every entry has a TTL, the latest
//! `expiresAt`; when some entry has no TTL, null. Live tombstones push it to their end. A TTL
//! index deletes the document `retention` after `idleSince`, so it never deletes a document
//! with a live entry. Deleting is safe for fencing because a grant's token is at least
//! `$$NOW` in microseconds (`toLong($$NOW) * 1000`): a deleted counter is replaced by the
//! clock, which has moved on by at least the retention period unless it stepped back by more
//! than that.
//!
//! Every write rewrites the fields it changes (an acquire all of the above; a release its
//! entry's side, the line, `idleSince` and the wake; expired tombstones stay until an
//! acquire drops them) and keeps any other top-level field as it is. It sets the mark,
//! `mongolock: 1`, and changes only documents that carry it (or are just seeded by an
//! upsert, with nothing but an `_id`): a document without it is another application's, and
//! is left unchanged; the command then reports
//! [`ErrorKind::UnexpectedDocument`](crate::ErrorKind::UnexpectedDocument) (see
//! `command/expr.rs`). The client decodes every entry it reads and reports a field of the
//! wrong type the same way, so a marked document changed by hand is a typed error too,
//! though the write that read it may have been applied.

use std::time::Duration;

use bson::{Bson, Document};

use crate::error::{Error, Result};
use crate::lock::{Holder, LockKind};
use crate::query::LockStatus;

pub(crate) const ID: &str = "_id";
/// The field every write sets on a lock document: the mark that tells this crate's
/// documents from any other. Its value is the stored format's version, [`FORMAT`].
pub(crate) const MARK: &str = "mongolock";
/// The version of the stored format, the value of [`MARK`].
pub(crate) const FORMAT: i32 = 1;
pub(crate) const IDLE_SINCE: &str = "idleSince";

pub(crate) const LOCK_ID: &str = "lockId";
pub(crate) const NONCE: &str = "nonce";
pub(crate) const OWNER: &str = "owner";
pub(crate) const HOST: &str = "host";
pub(crate) const TOKEN: &str = "token";
pub(crate) const CREATED_AT: &str = "createdAt";
pub(crate) const RENEWED_AT: &str = "renewedAt";
pub(crate) const EXPIRES_AT: &str = "expiresAt";
pub(crate) const TTL_MS: &str = "ttlMs";
pub(crate) const KEEPER: &str = "keeper";
/// A place's waiting call (see `queue` above).
pub(crate) const CALL: &str = "call";
pub(crate) const DELAY_MS: &str = "delayMs";
/// The minimum hold of an entry (see [`crate::LockDetails::min_hold`]).
pub(crate) const MIN_HOLD_MS: &str = "minHoldMs";
/// When the holder of an entry let go of it within its minimum hold (a date; missing: it
/// did not): the entry is then only in force for what is left of the hold (see
/// `command/expr.rs`: `let_go`).
pub(crate) const LET_GO_AT: &str = "letGoAt";
/// Set (true) on an entry adopted by a client that resumed its lease (see
/// `command/keepalive.rs`): a retiring release of its attempt by an earlier incarnation
/// leaves it, though it may be a re-grant of that attempt.
pub(crate) const ADOPTED: &str = "adopted";
/// The unlock calls an entry was granted after, whose late copies leave it (see
/// `crate::unlocks`).
pub(crate) const AFTER_UNLOCKS: &str = "afterUnlocks";

/// Fields added by the status aggregation to each reported entry.
pub(crate) const RESOURCE: &str = "resource";
pub(crate) const KIND: &str = "kind";
pub(crate) const REMAINING_MS: &str = "remainingMs";
/// The `kind` of the one row the status aggregation reports for a document that is not a
/// lock document.
pub(crate) const NOT_A_LOCK_DOCUMENT: &str = "not a lock document";

/// The error for a document of another shape under `id`, which every command leaves as it
/// is.
pub(crate) fn not_a_lock_document(id: &Bson) -> Error {
    Error::unexpected(id, "not a lock document; it was left unchanged")
}

/// A span of milliseconds the server computed (`expiresAt - $$NOW`), none if negative.
pub(crate) fn millis_left(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// The shortest life of a tombstone left by `release_attempt`: long past any time a dropped
/// command could still be in flight.
pub(crate) const TOMBSTONE_MIN_LIFE: Duration = Duration::from_secs(5 * 60);

/// The most tombstones one resource keeps in force (about 40 bytes each): a withdrawal past
/// them seals the resource instead (see the module docs).
///
/// ```
/// assert_eq!(mongolock::MAX_TOMBSTONES, 1_000);
/// ```
pub const MAX_TOMBSTONES: usize = 1_000;

/// A number the server returned (int, long or double; a double is truncated), as an `i64`.
pub(crate) fn number(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(n) => Some(*n as i64),
        _ => None,
    }
}

/// The `_id` of a document, as reported in errors.
pub(crate) fn id_of(doc: &Document) -> Bson {
    doc.get(ID).cloned().unwrap_or(Bson::Null)
}

pub(crate) fn decode_entry(
    id: &Bson,
    resource: &str,
    kind: LockKind,
    entry: &Document,
) -> Result<Holder> {
    let what = |field: &str, expected: &str| {
        Error::unexpected(id, format!("{kind} entry field {field} is not {expected}"))
    };
    let string = |field: &str| match entry.get(field) {
        Some(Bson::String(s)) => Ok(s.clone()),
        _ => Err(what(field, "a string")),
    };
    let optional_string = |field: &str| match entry.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s.clone())),
        _ => Err(what(field, "a string or null")),
    };
    let date = |field: &str| match entry.get(field) {
        Some(Bson::DateTime(d)) => Ok(*d),
        _ => Err(what(field, "a date")),
    };
    let token = match entry.get(TOKEN) {
        Some(Bson::Int64(v)) => *v,
        Some(Bson::Int32(v)) => i64::from(*v),
        _ => return Err(what(TOKEN, "an integer")),
    };
    let expires_at = match entry.get(EXPIRES_AT) {
        None | Some(Bson::Null) => None,
        Some(Bson::DateTime(d)) => Some(*d),
        _ => return Err(what(EXPIRES_AT, "a date or null")),
    };
    let millis = |field: &str| match entry.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int64(v)) => Ok(u64::try_from(*v).ok().map(Duration::from_millis)),
        Some(Bson::Int32(v)) => Ok(u64::try_from(*v).ok().map(Duration::from_millis)),
        _ => Err(what(field, "an integer or null")),
    };
    let ttl = millis(TTL_MS)?;
    let lock_delay = millis(DELAY_MS)?.filter(|delay| !delay.is_zero());
    // The stored `expiresAt` is the end of the entry's lock-delay: its lease ends that
    // much earlier.
    let expires_at = match (expires_at, lock_delay) {
        (Some(end), Some(delay)) => Some(bson::DateTime::from_millis(
            end.timestamp_millis()
                .saturating_sub(crate::clock::saturating_millis(delay)),
        )),
        (end, _) => end,
    };
    let nonce = match entry.get(NONCE) {
        Some(Bson::ObjectId(oid)) => Some(*oid),
        _ => None,
    };
    Ok(Holder {
        resource: resource.to_owned(),
        lock_id: string(LOCK_ID)?,
        kind,
        owner: optional_string(OWNER)?,
        host: optional_string(HOST)?,
        token,
        nonce,
        created_at: date(CREATED_AT)?,
        // Written by the first renewal: until then, the entry's creation.
        renewed_at: match entry.get(RENEWED_AT) {
            None => date(CREATED_AT)?,
            Some(_) => date(RENEWED_AT)?,
        },
        expires_at,
        ttl,
        lock_delay,
        min_hold: millis(MIN_HOLD_MS)?.filter(|hold| !hold.is_zero()),
        let_go_at: match entry.get(LET_GO_AT) {
            Some(Bson::DateTime(at)) => Some(*at),
            _ => None,
        },
        keeper: optional_string(KEEPER)?,
    })
}

/// Decodes one row of the status aggregation: an entry plus `resource`, `kind` and
/// `remainingMs` (null without TTL).
pub(crate) fn decode_status(row: &Document) -> Result<LockStatus> {
    let id = row.get(RESOURCE).cloned().unwrap_or(Bson::Null);
    let resource = match &id {
        Bson::String(s) => s.clone(),
        _ => return Err(Error::unexpected(&id, "_id is not a string")),
    };
    let kind = match row.get_str(KIND) {
        Ok("exclusive") => LockKind::Exclusive,
        Ok("shared") => LockKind::Shared,
        Ok(NOT_A_LOCK_DOCUMENT) => return Err(not_a_lock_document(&id)),
        _ => return Err(Error::unexpected(&id, "unknown lock kind")),
    };
    let holder = decode_entry(&id, &resource, kind, row)?;
    let remaining_ms = match row.get(REMAINING_MS) {
        None | Some(Bson::Null) => None,
        Some(value) => Some(
            number(value).ok_or_else(|| Error::unexpected(&id, "remainingMs is not a number"))?,
        ),
    };
    // Within its lock-delay: the lease ended, the entry is still in force for the rest of
    // the delay (both by the server's clock, as `remainingMs` is).
    let delay_ms = (holder.lock_delay).map_or(0, crate::clock::saturating_millis);
    // An entry let go of within its minimum hold keeps the hold as its delay.
    let in_force_left = remaining_ms
        .filter(|&ms| ms <= 0)
        .map(|ms| ms.saturating_add(delay_ms))
        .filter(|&left| left > 0)
        .map(|ms| Duration::from_millis(ms as u64));
    let in_hold = in_its_hold(&holder);
    Ok(LockStatus {
        holder,
        remaining: remaining_ms.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        expired: remaining_ms.is_some_and(|ms| ms <= 0),
        delay_left: in_force_left.filter(|_| !in_hold),
        hold_left: in_force_left.filter(|_| in_hold),
    })
}

/// Whether the entry is one its holder let go of within its minimum hold, in force for the
/// rest of the hold: marked `letGoAt`, its delay the hold and its lease ended at its grant
/// (its stored end the grant plus the hold), as `expr::let_go` leaves it. An entry a force
/// release marked keeps its own lock-delay and the end the release gave it: what keeps it
/// in force is its delay.
fn in_its_hold(holder: &Holder) -> bool {
    holder.let_go_at.is_some()
        && holder.min_hold.is_some()
        && holder.lock_delay == holder.min_hold
        && holder.expires_at == Some(holder.created_at)
}

/// Newest first: by grant time, then resource and lock id, so reports are deterministic.
pub(crate) fn sort_newest_first(statuses: &mut [LockStatus]) {
    statuses.sort_by(|a, b| {
        b.holder
            .created_at
            .cmp(&a.holder.created_at)
            .then_with(|| a.holder.resource.cmp(&b.holder.resource))
            .then_with(|| a.holder.lock_id.cmp(&b.holder.lock_id))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use bson::oid::ObjectId;
    use bson::{DateTime, doc};

    fn entry(lock_id: &str, token: i64) -> Document {
        doc! {
            "lockId": lock_id, "nonce": ObjectId::new(), "owner": "me", "host": "h",
            "token": token, "createdAt": DateTime::from_millis(1_000),
            "renewedAt": DateTime::from_millis(2_000),
            "expiresAt": DateTime::from_millis(32_000), "ttlMs": 30_000_i64,
        }
    }

    /// A let-go entry in its hold reads as a hold; an entry a force release marked (issue 40)
    /// reads as within its lock-delay, though both are marked `letGoAt`.
    #[test]
    fn a_force_released_entry_is_in_its_delay_and_a_let_go_one_in_its_hold() {
        let row = |entry: Document| {
            let mut row = entry;
            row.insert("resource", "r");
            row.insert("kind", "exclusive");
            row
        };
        // Granted at 1 s with a 3 s hold and let go of at 1.5 s: in force until 4 s, read
        // at 2 s.
        let mut let_go = entry("a", 5);
        let_go.extend(doc! {
            "minHoldMs": 3_000_i64, "delayMs": 3_000_i64,
            "expiresAt": DateTime::from_millis(4_000), "letGoAt": DateTime::from_millis(1_500),
            "remainingMs": -1_000_i64,
        });
        let status = decode_status(&row(let_go)).unwrap();
        assert_eq!(
            (status.min_hold_remaining(), status.lock_delay_remaining()),
            (Some(Duration::from_secs(2)), None)
        );
        // The same grant with a 5 s lock-delay, force-released at 1.5 s: in force until
        // 6.5 s, read at 2 s.
        let mut forced = entry("a", 5);
        forced.extend(doc! {
            "minHoldMs": 3_000_i64, "delayMs": 5_000_i64,
            "expiresAt": DateTime::from_millis(6_500), "letGoAt": DateTime::from_millis(1_500),
            "remainingMs": -500_i64,
        });
        let status = decode_status(&row(forced)).unwrap();
        assert_eq!(
            (status.min_hold_remaining(), status.lock_delay_remaining()),
            (None, Some(Duration::from_millis(4_500)))
        );
    }

    #[test]
    fn decodes_an_entry_and_refuses_a_bad_one() {
        let id = Bson::String("r".into());
        let holder = decode_entry(&id, "r", LockKind::Shared, &entry("a", 5)).unwrap();
        assert_eq!(
            (holder.lock_id(), holder.kind(), holder.fencing_token()),
            ("a", LockKind::Shared, 5)
        );
        assert_eq!(holder.expires_at(), Some(DateTime::from_millis(32_000)));
        assert_eq!(holder.ttl(), Some(Duration::from_secs(30)));
        let mut no_ttl = entry("b", 6);
        no_ttl.insert("expiresAt", Bson::Null);
        no_ttl.insert("ttlMs", Bson::Null);
        no_ttl.insert("owner", Bson::Null);
        let b = decode_entry(&id, "r", LockKind::Shared, &no_ttl).unwrap();
        assert_eq!((b.owner(), b.expires_at(), b.ttl()), (None, None, None));

        let unexpected = |e: Document| match decode_entry(&id, "r", LockKind::Exclusive, &e)
            .unwrap_err()
            .kind()
        {
            ErrorKind::UnexpectedDocument { reason, .. } => reason.clone(),
            other => panic!("expected UnexpectedDocument, got {other:?}"),
        };
        let mut no_token = entry("a", 1);
        no_token.remove("token");
        assert!(unexpected(no_token).contains("token"));
        let mut bad_date = entry("a", 1);
        bad_date.insert("createdAt", "yesterday");
        assert!(unexpected(bad_date).contains("createdAt"));
        let mut bad_ttl = entry("a", 1);
        bad_ttl.insert("ttlMs", "30s");
        assert!(unexpected(bad_ttl).contains("ttlMs"));
        let mut bad_renewal = entry("a", 1);
        bad_renewal.insert("renewedAt", Bson::Null);
        assert!(unexpected(bad_renewal).contains("renewedAt"));
    }

    #[test]
    fn an_entry_not_yet_renewed_was_renewed_when_it_was_created() {
        let id = Bson::String("r".into());
        let mut fresh = entry("a", 5);
        fresh.remove("renewedAt");
        fresh.insert("ttlMs", 30_000_i32);
        let holder = decode_entry(&id, "r", LockKind::Exclusive, &fresh).unwrap();
        assert_eq!(holder.renewed_at(), DateTime::from_millis(1_000));
        assert_eq!(holder.ttl(), Some(Duration::from_secs(30)));
    }

    #[test]
    fn decodes_status_rows() {
        let mut row = entry("a", 3);
        row.insert("resource", "r");
        row.insert("kind", "exclusive");
        row.insert("remainingMs", 1_500_i64);
        let status = decode_status(&row).unwrap();
        assert_eq!(status.ttl_remaining(), Some(Duration::from_millis(1_500)));
        assert!(!status.is_expired());
        assert_eq!(status.kind(), LockKind::Exclusive);

        row.insert("remainingMs", -20_i64);
        let status = decode_status(&row).unwrap();
        assert_eq!(status.ttl_remaining(), Some(Duration::ZERO));
        assert!(status.is_expired());

        row.insert("remainingMs", Bson::Null);
        assert_eq!(decode_status(&row).unwrap().ttl_remaining(), None);

        row.insert("kind", "upgradable");
        assert!(matches!(
            decode_status(&row).unwrap_err().kind(),
            ErrorKind::UnexpectedDocument { .. }
        ));
    }
}
