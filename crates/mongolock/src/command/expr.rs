//! The expressions the commands share: whose document it is, the live entries, the document
//! after a change, and how a lock id's entries are found. The stored document itself (its
//! fields and decoding) is described in [`crate::schema`].
//!
//! # Whose document: the mark, once per command
//!
//! Every write sets the mark ([`schema::MARK`](crate::schema::MARK), `mongolock: 1`) and
//! changes a document only if it carries it. Each command checks it once, where it decides,
//! and nothing after it checks again:
//!
//! - Most writes ask for the mark in their query ([`checked`]), so another application's
//!   document is not matched, not changed and not counted, and the stage
//!   ([`replace_stage`]) runs only on the documents the query matched:
//!   - an acquire and a withdrawal, which are upserts: where no document exists the upsert
//!     seeds `{_id, mongolock: 1}` from the query, and where one exists without the mark the
//!     upsert's insert meets a duplicate key, which the client, after one repeat (the first
//!     may be a racing upsert's), reads as "not a lock document"
//!     ([`is_not_ours`](crate::command::is_not_ours));
//!   - a release of a grant, whose query names the entry too;
//!   - the `update`s of many documents (unlock, renew, purge), which must not fail on one of
//!     them; the keepalive's and the places' statements.
//! - A force release finds the document by `_id` alone, in one stage: [`guarded`] replaces
//!   it if [`is_ours`], and otherwise makes the command fail with [`REFUSED`] (evaluating
//!   [`refusal`]). A failed command writes nothing, so the document is left exactly as it
//!   is, and its projection is never evaluated on another application's document. The
//!   caller turns that error into
//!   [`ErrorKind::UnexpectedDocument`](crate::ErrorKind::UnexpectedDocument) with
//!   [`is_refusal`].
//! - The status aggregation reports one marked row for a document without the mark (see
//!   `command/status.rs`), and so does the keeper's read of its live leases skip it.
//!
//! # Why a mark, not a check of every field
//!
//! Until the mark, every write checked the document's shape: the type of every field the
//! decoder reads, about 2.0 KB of aggregation expression in every command (a mutex acquire
//! weighed 6.9 KB with it, a release 5.5 KB). The mark costs about 90 bytes. What it tells
//! apart is what happens: the collection shared with another application's documents, or a
//! resource name taken by one. What it does not catch is a document of this crate changed by
//! hand, field by field; the client still decodes every entry it reads and reports a field
//! of the wrong type as
//! [`ErrorKind::UnexpectedDocument`](crate::ErrorKind::UnexpectedDocument), but the command
//! that read it may have written (`tests/bad_input.rs` holds such documents to a typed error
//! and no panic). No promise to a holder depends on the check: only the commands of this
//! crate write lock documents, and they write them whole.

use bson::oid::ObjectId;
use bson::{Bson, Document, bson, doc};

use crate::error::{Error, ErrorKind};
use crate::schema::{
    AFTER_UNLOCKS, DELAY_MS, EXPIRES_AT, FORMAT, KEEPER, LET_GO_AT, LOCK_ID, MARK, MIN_HOLD_MS,
};

/// The server's error code when a force release meets a document of another shape:
/// `ConversionFailure`, raised by [`refusal`]. Nothing else in a lock command converts a
/// value that can fail (`$toLong` of `$$NOW` cannot), so the code says which it was.
pub(crate) const REFUSED: i32 = 241;

/// A string the server must take as data, never as a field path or variable (a lock id may
/// well start with `$`): in an aggregation expression only a string that starts with `$` is
/// read as a path, so such a string is wrapped in `$literal`, and any other is sent as it is.
pub(crate) fn literal(value: &str) -> Bson {
    if value.starts_with('$') {
        bson!({ "$literal": value })
    } else {
        Bson::String(value.to_owned())
    }
}

/// `n` as the smallest BSON integer that holds it: an `Int32` (4 bytes) when it fits, else an
/// `Int64`. The server's arithmetic and comparisons mix the two freely (`$add` of a date and
/// either is a date, of a long and an int a long), and the decoders read both.
pub(crate) fn int(n: i64) -> Bson {
    i32::try_from(n).map_or(Bson::Int64(n), Bson::Int32)
}

/// True when the current document (`$$ROOT`) is this crate's: it carries the mark. (An upsert
/// that seeds a document asks for the mark in its query, so the seed carries it too.)
pub(crate) fn is_ours() -> Bson {
    bson!({ "$eq": [format!("${MARK}"), FORMAT] })
}

/// An expression that fails with [`REFUSED`] when evaluated. It reads the document (its
/// `_id`'s type), so the server cannot evaluate it ahead of time, and its message says why.
pub(crate) fn refusal() -> Bson {
    bson!({ "$toInt": { "$concat": ["mongolock: not a lock document; _id is a ", { "$type": "$_id" }] } })
}

/// Whether `error` is the server refusing a document of another shape (see [`refusal`]).
pub(crate) fn is_refusal(error: &Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Database {
            code: Some(REFUSED)
        }
    )
}

/// The one stage of a single-document write: replace the document with `then` if it is a
/// lock document, else fail the command (nothing is written).
pub(crate) fn guarded(then: Bson) -> Document {
    doc! { "$replaceWith": { "$cond": [is_ours(), then, refusal()] } }
}

/// The one stage of an update whose query asked for the mark ([`checked`]): replace the
/// document with `then`.
pub(crate) fn replace_stage(then: Bson) -> Document {
    doc! { "$replaceWith": then }
}

/// True when the entry at `entry` (a path such as `"$exclusive"` or `"$$e"`) is in force at
/// `$$NOW`, keeping the resource from others: it has no TTL (`expiresAt` null or missing),
/// or its `expiresAt` is still ahead. For an entry with a lock-delay that is the end of the
/// delay, not of the lease (see [`holds`]). Only for entries of a lock document, whose
/// `expiresAt` is a date, null or missing.
pub(crate) fn is_live(entry: &str) -> Bson {
    // MaxKey sorts after every date.
    bson!({ "$gt": [{ "$ifNull": [format!("{entry}.{EXPIRES_AT}"), Bson::MaxKey] }, "$$NOW"] })
}

/// True when the holder of the entry at `entry` still holds its lease at `$$NOW`: as
/// [`is_live`], but an entry with a lock-delay (`delayMs`) counts its lease as ended that
/// long before its `expiresAt`, and a marked entry (`letGoAt`, see [`was_let_go`]) holds
/// nothing, whatever the clock reads: one its holder let go of within its minimum hold
/// ([`let_go`]), whose hold a clock stepped back before the lease's grant would otherwise
/// read as a lease again, and one a force release kept in force for its lock-delay
/// (`command/release.rs`, `force_command`), whose delay a clock stepped back by more than
/// the delay would read as a lease again, renewed by its revoked holder. What acquires,
/// renewals, a release's report, proclaim and the keeper's read of its leases ask.
pub(crate) fn holds(entry: &str) -> Bson {
    // A marked entry's end reads as null, which sorts before every date. (`letGoAt` is a
    // date or missing: only a marked entry's is true.)
    bson!({ "$gt": [
        { "$cond": [
            format!("{entry}.{LET_GO_AT}"),
            null,
            { "$ifNull": [format!("{entry}.{EXPIRES_AT}"), Bson::MaxKey] },
        ]},
        { "$add": ["$$NOW", { "$ifNull": [format!("{entry}.{DELAY_MS}"), 0] }] },
    ]})
}

/// `$shared` as an array (missing becomes empty).
pub(crate) fn shared_or_empty() -> Bson {
    bson!({ "$ifNull": ["$shared", []] })
}

/// `$exclusive` if it is an entry (not null or missing) and `keep` is true of it, else null.
pub(crate) fn exclusive_where(keep: Bson) -> Bson {
    bson!({ "$cond": [keep, { "$ifNull": ["$exclusive", null] }, null] })
}

/// The shared entries `e` for which `keep` (an expression over `$$e`) is true.
pub(crate) fn shared_where(keep: Bson) -> Bson {
    bson!({ "$filter": { "input": shared_or_empty(), "as": "e", "cond": keep } })
}

/// The live shared entries (see [`is_live`]).
pub(crate) fn live_shared() -> Bson {
    bson!({ "$filter": { "input": shared_or_empty(), "cond": is_live("$$this") } })
}

/// Every entry, exclusive first, as one array. It reads only an object as the exclusive entry
/// and only an array as the shared ones, so a marked document changed by hand fails no read.
pub(crate) fn all_entries() -> Bson {
    bson!({ "$concatArrays": [
        { "$cond": [{ "$eq": [{ "$type": "$exclusive" }, "object"] }, ["$exclusive"], []] },
        { "$cond": [{ "$isArray": "$shared" }, "$shared", []] },
    ]})
}

/// The tombstones still in force.
pub(crate) fn live_tombstones() -> Bson {
    bson!({ "$filter": {
        "input": { "$ifNull": ["$released", []] },
        "cond": { "$gt": ["$$this.until", "$$NOW"] },
    }})
}

/// The waiters whose announcement is still in force.
pub(crate) fn live_queue() -> Bson {
    bson!({ "$filter": {
        "input": { "$ifNull": ["$queue", []] },
        "cond": { "$gt": ["$$this.until", "$$NOW"] },
    }})
}

/// `query` narrowed to lock documents (those with the mark) for which `also` (if any) is
/// true: an update of many documents asks for the mark in its query, so another
/// application's document is not matched, not changed and not counted (see the module docs).
pub(crate) fn checked(mut query: Document, also: Option<Bson>) -> Document {
    query.insert(MARK, FORMAT);
    if let Some(also) = also {
        query.insert("$expr", also);
    }
    query
}

/// `{ $or: [{ "exclusive.lockId": id }, { "shared.lockId": id }] }`: the documents where a
/// lock id holds something, found by index.
pub(crate) fn held_by(lock_id: &str) -> Document {
    doc! { "$or": [{ "exclusive.lockId": lock_id }, { "shared.lockId": lock_id }] }
}

/// An expression: is the entry at `entry` this lock id's?
pub(crate) fn is_of(entry: &str, lock_id: &str) -> Bson {
    bson!({ "$eq": [format!("{entry}.{LOCK_ID}"), literal(lock_id)] })
}

/// Every stored field of the document after a change, as expressions over the current one.
/// A field left `None` is not written: the change keeps it as it is, and says nothing of it
/// on the wire.
pub(crate) struct NextDocument {
    /// The last token granted; `None`: unchanged (only a grant changes it).
    pub(crate) fence: Option<Bson>,
    /// The exclusive entry, or null; `None`: unchanged.
    pub(crate) exclusive: Option<Bson>,
    /// The shared entries, an array; `None`: unchanged, and so is their cap.
    pub(crate) shared: Option<Bson>,
    /// The tombstones, an array; `None`: unchanged (expired ones stay until a write that
    /// rewrites them drops them: they count for nothing).
    pub(crate) released: Option<Bson>,
    /// The shared entries' cap, written with them; cleared whatever it says when no shared
    /// entry is left.
    pub(crate) cap: Bson,
    /// The line. Always rewritten: a change that may wake its head must see its live places
    /// only.
    pub(crate) queue: Bson,
    /// When this change may let the waiter at the head of the line in (a condition; `true`
    /// for a change that only removes entries or places): if the new document then lets it
    /// in, the change names its keeper in [`WAKE`], which is what wakes it. `None`: this
    /// change lets nobody in. A removal that removed nothing (a repeated withdrawal) may wake
    /// the head too, if it can take the lock: it then does, so that costs one attempt.
    pub(crate) frees: Option<Bson>,
    /// When [`frees`](Self::frees) is a shared grant, whether the shared entries leave a
    /// permit (a condition): then there is no exclusive entry and there is a shared one, so
    /// only a reader at the head, with a permit left for it, can be let in (the check says no
    /// more). `None`: another change.
    pub(crate) shared_grant: Option<Bson>,
    /// The new document is known to hold no exclusive entry: the change is a release of a
    /// grant (of the exclusive entry, or of a shared one: a document holds shared entries
    /// only without an exclusive one, since each grant requires it). The expressions that
    /// would look for one are left out.
    pub(crate) no_exclusive: bool,
    /// `idleSince` as the change computes it; `None`: derived from the new entries (see
    /// [`document`](Self::document)).
    pub(crate) idle_since: Option<Bson>,
    /// When this condition holds (a grant), `wake` is cleared instead of kept when the change
    /// wakes nobody: the waiter it named was woken by the change that set it, and a stale
    /// name would let the whole-document events of later changes (every pipeline update on a
    /// 4.4 server: its holder's renewals) through that waiter's stream. `None`: kept.
    pub(crate) clears_wake: Option<Bson>,
    /// The change lets go of entries within their minimum hold (see [`let_go`]): when it
    /// [`frees`](Self::frees), entries let go of count as gone in the test of whether the
    /// head is let in, so that it is woken, refused until the hold ends, and learns when
    /// that is (its timer counted on the lease's old end). Only such a change needs it: the
    /// waiter it woke knows the hold's end from then on.
    pub(crate) lets_go: bool,
}

impl NextDocument {
    /// Only the line rewritten (its live places kept), and every other field as it is.
    pub(crate) fn unchanged() -> Self {
        NextDocument {
            fence: None,
            exclusive: None,
            shared: None,
            released: None,
            cap: bson!({ "$ifNull": ["$cap", null] }),
            queue: live_queue(),
            frees: None,
            shared_grant: None,
            no_exclusive: false,
            idle_since: None,
            clears_wake: None,
            lets_go: false,
        }
    }

    /// The entries replaced by `exclusive` and `shared` (expressions over the current
    /// document), the rest as in [`unchanged`](Self::unchanged).
    pub(crate) fn entries(exclusive: Bson, shared: Bson) -> Self {
        NextDocument {
            exclusive: Some(exclusive),
            shared: Some(shared),
            ..Self::unchanged()
        }
    }

    /// Both sides' entries, every entry for which `lets_go` is true let go of by its holder
    /// ([`let_go`]: removed, or kept in force for what is left of its minimum hold) and
    /// every other one for which `removes` is true removed (`matches` and `removes` are
    /// functions from an entry path such as `"$exclusive"` or `"$$e"` to a condition on it): a
    /// release, which may let the head of the line in.
    pub(crate) fn letting_go(
        lets_go: impl Fn(&str) -> Bson,
        removes: impl Fn(&str) -> Bson,
    ) -> Self {
        let next = |entry: &str| {
            bson!({ "$cond": [
                lets_go(entry),
                let_go(entry),
                { "$cond": [removes(entry), null, entry] },
            ]})
        };
        let mut next = Self::entries(
            bson!({ "$cond": [
                { "$eq": [{ "$type": "$exclusive" }, "object"] },
                next("$exclusive"),
                null,
            ]}),
            bson!({ "$filter": {
                "input": { "$map": { "input": shared_or_empty(), "as": "e", "in": next("$$e") } },
                "cond": { "$ne": ["$$this", null] },
            }}),
        );
        next.frees = Some(Bson::Boolean(true));
        next.lets_go = true;
        next
    }

    /// Both sides' entries without every entry for which `matches` (a function from an
    /// entry path such as `"$exclusive"` or `"$$e"` to a condition on it) is true: a removal,
    /// which may let the head of the line in.
    pub(crate) fn without_entries(matches: impl Fn(&str) -> Bson) -> Self {
        let mut next = Self::entries(
            exclusive_where(bson!({ "$not": [matches("$exclusive")] })),
            shared_where(bson!({ "$not": [matches("$$e")] })),
        );
        next.frees = Some(Bson::Boolean(true));
        next
    }

    /// The new document: the mark, the fields above, `idleSince` derived (see
    /// [`crate::schema`]), every other field kept. A change that changes nothing is a no-op
    /// on the server (no write, no change event).
    ///
    /// `idleSince`: null when some entry has no TTL (`null` among the entries' `expiresAt`);
    /// else the latest `expiresAt`, or when there is no entry (`$max` of nothing is null) the
    /// time it became free (kept, unless it lies ahead: an early release); then pushed to the
    /// end of the last tombstone. `$max` and `$min` pass over null and missing values. A
    /// tombstone kept as it is may have expired: its end is in the past, and `idleSince` was
    /// pushed to it when it was written, so it changes nothing then.
    ///
    /// `wake` (see [`WAKE`]): when the change [`frees`](Self::frees) and the new document
    /// lets the head of the line in, it names the head's keeper and a stamp new to this
    /// command (64 random bits, in hex), so that it changes even when the same waiter is
    /// woken twice. Otherwise it is kept (a missing field stays missing). The head is let in
    /// when there is no exclusive entry and either no shared entry, or the head waits for a
    /// shared lock and the shared entries leave a permit under the cap.
    ///
    pub(crate) fn document(self) -> Bson {
        let no_exclusive = self.no_exclusive;
        let mut vars = doc! {};
        let nx = if no_exclusive {
            String::new()
        } else {
            let exclusive = (self.exclusive.clone())
                .unwrap_or_else(|| bson!({ "$ifNull": ["$exclusive", null] }));
            bind(&mut vars, "nx", exclusive)
        };
        let ns = bind(
            &mut vars,
            "ns",
            self.shared.clone().unwrap_or_else(shared_or_empty),
        );
        let nq = bind(&mut vars, "nq", self.queue);
        // The cap the entries are under: read as stored when they do not change.
        let cap = match self.shared {
            Some(_) => bind(&mut vars, "nc", self.cap),
            None => "$cap".to_owned(),
        };
        let nt = (self.released.clone()).map(|released| bind(&mut vars, "nt", released));
        let mut fields = doc! { MARK: FORMAT };
        if let Some(fence) = self.fence {
            fields.insert("fence", fence);
        }
        if let Some(exclusive) = self.exclusive {
            fields.insert(
                "exclusive",
                if no_exclusive { exclusive } else { bson!(&nx) },
            );
        }
        if self.shared.is_some() {
            fields.insert("shared", &ns);
            fields.insert(
                "cap",
                bson!({ "$cond": [{ "$eq": [{ "$size": &ns }, 0] }, null, &cap] }),
            );
        }
        if let Some(nt) = &nt {
            fields.insert("released", nt);
        }
        fields.insert("queue", &nq);
        let mut inner = doc! {};
        let idle_since = match self.idle_since {
            Some(given) => given,
            None => derived_idle_since(
                &mut inner,
                (!no_exclusive).then_some(&nx),
                &ns,
                nt.as_deref(),
            ),
        };
        fields.insert("idleSince", idle_since);
        // The wake when this change wakes nobody: kept (a missing field stays missing), or
        // cleared by a grant.
        let kept_wake = match &self.clears_wake {
            Some(grant) => bson!({ "$cond": [grant, null, format!("${WAKE}")] }),
            None => bson!(format!("${WAKE}")),
        };
        if self.frees.is_none() && self.clears_wake.is_some() {
            fields.insert(WAKE, kept_wake.clone());
        }
        if let Some(frees) = self.frees {
            let next = Next {
                exclusive: (!no_exclusive).then_some(nx.as_str()),
                shared: &ns,
                queue: &nq,
                cap: &cap,
            };
            let terms = head_let_in(&mut inner, frees, self.shared_grant, self.lets_go, &next);
            let head = format!("$$h.{KEEPER}");
            let stamp = format!(" {:016x}", rand::random::<u64>());
            fields.insert(
                WAKE,
                bson!({ "$cond": [
                    { "$and": terms },
                    { "$concat": [&head, stamp] },
                    kept_wake,
                ]}),
            );
        }
        let mut document = bson!({ "$mergeObjects": ["$$ROOT", fields] });
        if !inner.is_empty() {
            document = bson!({ "$let": { "vars": inner, "in": document } });
        }
        if vars.is_empty() {
            document
        } else {
            bson!({ "$let": { "vars": vars, "in": document } })
        }
    }
}

/// The new document's entries, line and cap, as variables of [`NextDocument::document`]
/// (`exclusive` is `None` when the change leaves no exclusive entry).
struct Next<'a> {
    exclusive: Option<&'a str>,
    shared: &'a str,
    queue: &'a str,
    cap: &'a str,
}

/// `idleSince` derived from the new entries (`nx`, the exclusive one, `None` when there is
/// none; `ns`, the shared ones) and tombstones (`nt`, `None` when they do not change): see
/// [`NextDocument::document`]. Binds `ne` in `inner`.
fn derived_idle_since(inner: &mut Document, nx: Option<&str>, ns: &str, nt: Option<&str>) -> Bson {
    // Every entry has an `expiresAt` (null without TTL).
    let shared_ends = format!("{ns}.expiresAt");
    let ends = match nx {
        None => bson!(shared_ends),
        Some(nx) => bson!({ "$concatArrays": [
            { "$cond": [{ "$eq": [nx, null] }, [], [format!("{nx}.expiresAt")]] },
            shared_ends,
        ]}),
    };
    let ne = bind(inner, "ne", ends);
    let tombstone_ends = match nt {
        Some(nt) => format!("{nt}.until"),
        None => "$released.until".to_owned(),
    };
    bson!({ "$cond": [
        { "$in": [null, &ne] },
        null,
        { "$max": [
            { "$ifNull": [{ "$max": &ne }, { "$min": ["$idleSince", "$$NOW"] }] },
            { "$max": tombstone_ends },
        ]},
    ]})
}

/// The terms, all true, under which a change that `frees` (true, or a condition) lets the
/// head of the new line in (see [`NextDocument::document`]): a shared grant's `room`, or no
/// exclusive entry and either no shared entry or the head waits for a shared lock and the
/// shared entries leave a permit under the cap. With `lets_go`, entries let go of within
/// their minimum hold count as gone. Binds `h` (the head) and, with `lets_go`, `nh` in
/// `inner`.
fn head_let_in(
    inner: &mut Document,
    frees: Bson,
    shared_grant: Option<Bson>,
    lets_go: bool,
    next: &Next<'_>,
) -> Vec<Bson> {
    let head = format!("$$h.{KEEPER}");
    inner.insert("h", bson!({ "$arrayElemAt": [next.queue, 0] }));
    let mut terms = Vec::new();
    if frees != Bson::Boolean(true) {
        terms.push(frees);
    }
    if let Some(room) = shared_grant {
        // A grant writes anyway: with nobody at the head, `wake` becomes null, which wakes
        // nobody.
        terms.extend([bson!({ "$eq": ["$$h.kind", "shared"] }), room]);
        return terms;
    }
    // The head names a keeper (a string, which is true; missing is false).
    terms.push(bson!(&head));
    // When the change lets go of entries within their minimum hold, those count as gone
    // here: the head, woken, is refused until the hold ends and learns when that is, where
    // its timer would otherwise wait for the lease's old end.
    if let Some(nx) = next.exclusive {
        terms.push(if lets_go {
            bson!({ "$or": [{ "$eq": [nx, null] }, was_let_go(nx)] })
        } else {
            bson!({ "$eq": [nx, null] })
        });
    }
    let ns = next.shared;
    let held = if lets_go {
        let held = bson!({ "$size": { "$filter": {
            "input": ns, "as": "e", "cond": { "$not": [was_let_go("$$e")] },
        }}});
        bson!(bind(inner, "nh", held))
    } else {
        bson!({ "$size": ns })
    };
    // The shared entries leave a permit: MaxKey sorts after every number.
    let room = bson!({ "$lt": [held.clone(), { "$ifNull": [next.cap, Bson::MaxKey] }] });
    terms.push(bson!({ "$or": [
        { "$eq": [held, 0] },
        { "$and": [{ "$eq": ["$$h.kind", "shared"] }, room] },
    ]}));
    terms
}

/// A reference to `value` in the expressions that follow: `value` itself when it is a
/// variable (`"$$x"`), which needs no binding of its own, else `"$$name"`, bound in `vars`.
fn bind(vars: &mut Document, name: &str, value: Bson) -> String {
    match value {
        Bson::String(variable) if variable.starts_with("$$") => variable,
        value => {
            vars.insert(name, value);
            format!("$${name}")
        }
    }
}

/// The document with its entries replaced by `exclusive` and `shared` (expressions over the
/// current document), everything else kept.
pub(crate) fn with_entries(exclusive: Bson, shared: Bson) -> Bson {
    NextDocument::entries(exclusive, shared).document()
}

/// Who the last change that let the head of a line in woke: the head's keeper (the lock
/// client it waits in), a space and a stamp new to that change (64 random bits, in hex). Each client's change
/// stream passes only the updates that set it to its own keeper (and deletes), so a release
/// wakes the one waiter that can take the lock, never a grant, a renewal or a waiter joining
/// the line (see `crate::changes`).
pub(crate) const WAKE: &str = "wake";

/// The unlock calls `ids` as an array (see `crate::unlocks`).
pub(crate) fn unlock_ids(ids: &[ObjectId]) -> Bson {
    Bson::Array(ids.iter().copied().map(Bson::ObjectId).collect())
}

/// The unlock calls the entry at `entry` names in `afterUnlocks` (an empty array for none).
pub(crate) fn unlocks_named(entry: &str) -> Bson {
    bson!({ "$ifNull": [format!("{entry}.{AFTER_UNLOCKS}"), []] })
}

/// What the entry at `entry` names in `afterUnlocks` once an attempt or an adoption that
/// carries the unlocks `ids` meets it: those it named, and `ids` (see `crate::unlocks`).
pub(crate) fn also_naming(entry: &str, ids: &[ObjectId]) -> Bson {
    bson!({ "$setUnion": [unlocks_named(entry), unlock_ids(ids)] })
}

/// The entry at `entry` once its holder lets go of it: nothing, unless its minimum hold
/// (`minHoldMs`, see `crate::schema`) runs past `$$NOW`: then the same entry in force until
/// `createdAt + minHoldMs`, its lease ended (`delayMs` the hold, so that the lease counts as
/// ended at `createdAt`), as an entry within its lock-delay, marked `letGoAt` (`$$NOW`): its
/// holder let go of it, so it is no abandoned lock (`command/purge.rs`), and a waiter woken
/// by the change learns when it ends (see [`NextDocument::document`]).
pub(crate) fn let_go(entry: &str) -> Bson {
    let hold = format!("{entry}.{MIN_HOLD_MS}");
    let until = bson!({ "$add": [format!("{entry}.createdAt"), { "$ifNull": [&hold, 0] }] });
    bson!({ "$cond": [
        { "$gt": [until.clone(), "$$NOW"] },
        { "$mergeObjects": [entry, {
            EXPIRES_AT: until,
            DELAY_MS: &hold,
            // A repeated release keeps the first one's time.
            LET_GO_AT: { "$ifNull": [format!("{entry}.{LET_GO_AT}"), "$$NOW"] },
        }] },
        null,
    ]})
}

/// True when the entry at `entry` is marked `letGoAt`: its lease ended and it holds nothing,
/// whatever the clock reads, and is only in force for what is left of its delay. Either its
/// holder let go of it within its minimum hold (see [`let_go`]: in force until `createdAt +
/// minHoldMs`), or a force release broke its lease and keeps it in force for its lock-delay
/// (`command/release.rs`, `force_command`; a let-go entry stays as it was). Neither is an
/// abandoned lock (`command/purge.rs`: a force release removes an entry without a delay,
/// which makes no group abandoned either), and the renewals and adoptions of the keeper
/// (`keepalive::lease_query`) never match one.
pub(crate) fn was_let_go(entry: &str) -> Bson {
    bson!({ "$eq": [{ "$type": format!("{entry}.{LET_GO_AT}") }, "date"] })
}

/// The document without every entry for which `matches` (a function from an entry path such
/// as `"$exclusive"` or `"$$e"` to a condition on it) is true.
pub(crate) fn without_entries(matches: impl Fn(&str) -> Bson) -> Bson {
    NextDocument::without_entries(matches).document()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_strings_are_sent_as_literals() {
        assert_eq!(literal("$$NOW"), bson!({ "$literal": "$$NOW" }));
        assert_eq!(literal("$x"), bson!({ "$literal": "$x" }));
        // Only a leading `$` makes a path: any other string is data as it is.
        assert_eq!(literal("a$b"), bson!("a$b"));
        assert_eq!(literal(""), bson!(""));
    }

    #[test]
    fn a_single_document_write_fails_on_a_foreign_document() {
        let stage = guarded(bson!("$$ROOT"));
        let cond = stage
            .get_document("$replaceWith")
            .unwrap()
            .get_array("$cond")
            .unwrap();
        assert_eq!(cond[0], is_ours());
        assert_eq!(cond[2], refusal());
    }

    #[test]
    fn an_update_of_many_documents_asks_for_the_mark() {
        let query = checked(doc! { "_id": "r" }, Some(bson!(true)));
        assert_eq!(query, doc! { "_id": "r", MARK: FORMAT, "$expr": true });
        assert_eq!(checked(doc! {}, None), doc! { MARK: FORMAT });
    }

    #[test]
    fn every_write_sets_the_mark() {
        let next = with_entries(bson!(null), bson!([]));
        let text = next.into_relaxed_extjson().to_string();
        assert!(text.contains(&format!(r#""{MARK}":{FORMAT}"#)), "{text}");
    }
}
