//! The expressions the commands share: the check of a document's shape, the live entries,
//! the document after a change, and how a lock id's entries are found. The stored document
//! itself (its fields and decoding) is described in [`crate::schema`].
//!
//! # The shape check, once per command
//!
//! Every write checks [`is_lock_document`] once, where it decides, and nothing after it
//! checks again:
//!
//! - A `findAndModify` (acquire, release, withdraw, force release) changes one document, in
//!   one stage: [`guarded`] replaces it if it is a lock document, and otherwise makes the
//!   command fail with [`REFUSED`] (evaluating [`refusal`]). A failed command writes nothing,
//!   so the document is left exactly as it is, and its projection is never evaluated on a
//!   document of another shape: it reads a lock document only, and needs no check of its own.
//!   The caller turns that error into
//!   [`ErrorKind::UnexpectedDocument`](crate::ErrorKind::UnexpectedDocument) (or, for a
//!   release, "nothing removed") with [`is_refusal`].
//! - An `update` of many documents (unlock, renew, purge) must not fail on one of them: its
//!   query's `$expr` starts with the check, so a document of another shape is not matched,
//!   not changed and not counted, and the update ([`replace_stage`]) runs only on the
//!   documents the query matched (the server matches a document again if it changed in
//!   between).
//! - The status aggregation checks each document once and reports one marked row for a
//!   document of another shape (see `command/status.rs`).
//!
//! # What the check costs
//!
//! About 2.0 KB of every write (`tests/command_size.rs` prints the sizes): a mutex acquire
//! is 5.5 KB with it and would be about 3.4 KB without; a release 4.7 KB, about 2.6 KB
//! without. Measured alternatives that keep the same promise: one `$regexMatch` over the
//! document's type signature is about 1.5 KB (500 B saved), and one- or two-letter stored
//! field names save about 400 B a command while making the documents unreadable to an
//! operator. Neither brings an acquire under 4 KiB or a release under 2 KiB, so the check
//! stays as it is, readable. The way to those sizes is to move it out of the commands: a
//! collection validator (`$expr` of this check) installed by `create_indexes` makes the
//! server refuse any write that leaves a document of another shape, whoever sends it; a
//! client that finds it in place could then send its commands without the check, and one
//! that lacks the privilege keeps sending it.

use bson::{Bson, Document, bson, doc};

use crate::error::{Error, ErrorKind};
use crate::schema::{
    CREATED_AT, EXPIRES_AT, HOST, KEEPER, LOCK_ID, OWNER, RENEWED_AT, TOKEN, TTL_MS,
};

/// The server's error code when a single-document write meets a document of another shape:
/// `ConversionFailure`, raised by [`refusal`]. Nothing else in a lock command converts a
/// value that can fail (`$toLong` of `$$NOW` cannot), so the code says which it was.
pub(crate) const REFUSED: i32 = 241;

/// A value the server must take as data, never as a field path or operator (a lock id may
/// well start with `$`).
pub(crate) fn literal(value: impl Into<Bson>) -> Bson {
    bson!({ "$literal": value.into() })
}

/// `{ $type: path }`.
fn type_of(path: &str) -> Bson {
    bson!({ "$type": path })
}

/// True when the value at `path` has one of `types` (`"missing"` for an absent field).
fn type_in(path: &str, types: &[&str]) -> Bson {
    bson!({ "$in": [type_of(path), types] })
}

/// True when the current document (`$$ROOT`) has this crate's shape, or none of its fields
/// yet (a document just seeded by an upsert). It checks every field the decoder reads, so a
/// document the client would reject is never changed. `$and` stops at the first false term,
/// so the entries are only looked at once `shared` is known to be an array.
pub(crate) fn is_lock_document() -> Bson {
    shape(true)
}

/// [`is_lock_document`], leaving out the `_id` term when `check_id` is false: for a command
/// that finds its document by `_id` equal to a string, which only a string `_id` matches.
fn shape(check_id: bool) -> Bson {
    let entry_ok = bson!({ "$and": [
        { "$eq": [
            [
                type_of("$$e"),
                type_of(&format!("$$e.{LOCK_ID}")),
                type_of(&format!("$$e.{CREATED_AT}")),
                type_of(&format!("$$e.{RENEWED_AT}")),
            ],
            ["object", "string", "date", "date"],
        ]},
        type_in(&format!("$$e.{TOKEN}"), &["long", "int"]),
        type_in(&format!("$$e.{EXPIRES_AT}"), &["date", "null", "missing"]),
        type_in(&format!("$$e.{TTL_MS}"), &["long", "int", "null", "missing"]),
        { "$allElementsTrue": [{ "$map": {
            "input": [type_of(&format!("$$e.{OWNER}")), type_of(&format!("$$e.{HOST}")), type_of(&format!("$$e.{KEEPER}"))],
            "as": "y",
            "in": { "$in": ["$$y", ["string", "null", "missing"]] },
        }}]},
    ]});
    let mut terms = Vec::new();
    if check_id {
        terms.push(bson!({ "$eq": [type_of("$_id"), "string"] }));
    }
    terms.extend([
        type_in("$fence", &["long", "int", "missing"]),
        type_in("$idleSince", &["date", "null", "missing"]),
        type_in("$freed", &["date", "missing"]),
        type_in("$cap", &["long", "int", "null", "missing"]),
        type_in("$exclusive", &["object", "null", "missing"]),
        bson!({ "$allElementsTrue": [{ "$map": {
            "input": [type_of("$shared"), type_of("$queue"), type_of("$released")],
            "as": "y",
            "in": { "$in": ["$$y", ["array", "missing"]] },
        }}]}),
        bson!({ "$allElementsTrue": [{ "$map": { "input": all_entries(), "as": "e", "in": entry_ok }}]}),
        bson!({ "$allElementsTrue": [{ "$map": {
            "input": { "$ifNull": ["$queue", []] }, "as": "q",
            "in": { "$eq": [[type_of("$$q.until"), type_of("$$q.lockId")], ["date", "string"]] },
        }}]}),
        bson!({ "$allElementsTrue": [{ "$map": {
            "input": { "$ifNull": ["$released", []] }, "as": "t",
            "in": { "$eq": [type_of("$$t.until"), "date"] },
        }}]}),
    ]);
    bson!({ "$and": terms })
}

/// An expression that fails with [`REFUSED`] when evaluated. It reads the document (its
/// `_id`'s type), so the server cannot evaluate it ahead of time, and its message says why.
pub(crate) fn refusal() -> Bson {
    bson!({ "$toInt": { "$concat": ["mongolock: not a lock document; _id is a ", type_of("$_id")] } })
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
    doc! { "$replaceWith": { "$cond": [shape(false), then, refusal()] } }
}

/// The one stage of an update whose query checked the shape: replace the document with
/// `then`.
pub(crate) fn replace_stage(then: Bson) -> Document {
    doc! { "$replaceWith": then }
}

/// True when the entry at `entry` (a path such as `"$exclusive"` or `"$$e"`) is live at
/// `$$NOW`: it has no TTL (`expiresAt` null or missing), or its `expiresAt` is still ahead.
/// Only for entries of a lock document, whose `expiresAt` is a date, null or missing.
pub(crate) fn is_live(entry: &str) -> Bson {
    // MaxKey sorts after every date.
    bson!({ "$gt": [{ "$ifNull": [format!("{entry}.{EXPIRES_AT}"), Bson::MaxKey] }, "$$NOW"] })
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

/// Every entry, exclusive first, as one array.
pub(crate) fn all_entries() -> Bson {
    bson!({ "$concatArrays": [
        { "$cond": [{ "$eq": [type_of("$exclusive"), "object"] }, ["$exclusive"], []] },
        shared_or_empty(),
    ]})
}

/// The tombstones still in force.
pub(crate) fn live_tombstones() -> Bson {
    bson!({ "$filter": {
        "input": { "$ifNull": ["$released", []] },
        "as": "t",
        "cond": { "$gt": ["$$t.until", "$$NOW"] },
    }})
}

/// The waiters whose announcement is still in force.
pub(crate) fn live_queue() -> Bson {
    bson!({ "$filter": {
        "input": { "$ifNull": ["$queue", []] },
        "as": "q",
        "cond": { "$gt": ["$$q.until", "$$NOW"] },
    }})
}

/// `query` narrowed to lock documents for which `also` (if any) is true: an update of many
/// documents checks the shape in its query, so one of another shape is not matched, not
/// changed and not counted (see the module docs).
pub(crate) fn checked(mut query: Document, also: Option<Bson>) -> Document {
    let condition = match also {
        None => is_lock_document(),
        Some(also) => bson!({ "$and": [is_lock_document(), also] }),
    };
    query.insert("$expr", condition);
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
pub(crate) struct NextDocument {
    pub(crate) fence: Bson,
    /// The exclusive entry, or null.
    pub(crate) exclusive: Bson,
    /// The shared entries, an array.
    pub(crate) shared: Bson,
    /// The tombstones, an array.
    pub(crate) released: Bson,
    /// The shared entries' cap; cleared whatever it says when no shared entry is left.
    pub(crate) cap: Bson,
    pub(crate) queue: Bson,
    /// When this change may let the waiter at the head of the line in (a condition; `true`
    /// for a change that only removes entries or places): if the new document then lets it
    /// in, the change names its keeper in [`WAKE`], which is what wakes it. `None`: this
    /// change lets nobody in. A removal that removed nothing (a repeated release) may wake
    /// the head too, if it can take the lock: it then does, so that costs one attempt.
    pub(crate) frees: Option<Bson>,
}

impl NextDocument {
    /// The entries and tombstones kept (expressions over the current document), the fence,
    /// the cap and the live waiters kept.
    pub(crate) fn entries(exclusive: Bson, shared: Bson, released: Bson) -> Self {
        NextDocument {
            fence: bson!({ "$ifNull": ["$fence", 0_i64] }),
            exclusive,
            shared,
            released,
            cap: bson!({ "$ifNull": ["$cap", null] }),
            queue: live_queue(),
            frees: None,
        }
    }

    /// The new document: the fields above, `idleSince` derived (see [`crate::schema`]),
    /// every other field kept. A change that changes nothing is a no-op on the server (no
    /// write, no change event).
    ///
    /// `idleSince`: null when some entry has no TTL (`null` among the entries' `expiresAt`);
    /// else the latest `expiresAt`, or when there is no entry (`$max` of nothing is null) the
    /// time it became free (kept, unless it lies ahead: an early release); then pushed to the
    /// end of the last live tombstone. `$max` and `$min` pass over null and missing values.
    ///
    /// `freed` and `wake` (see [`WAKE`]): when the change [`frees`](Self::frees) and the new
    /// document lets the head of the line in, `freed` moves on (strictly later than before,
    /// so that it changes even twice in a millisecond) and `wake` names the head's keeper with
    /// that stamp. Otherwise both are kept (a missing field stays missing). The head is let
    /// in when there is no exclusive entry and either no shared entry, or the head waits for
    /// a shared lock and the shared entries leave a permit under the cap.
    pub(crate) fn document(self) -> Bson {
        let wake = match self.frees {
            Some(frees) => {
                // The shared entries leave a permit: MaxKey sorts after every number.
                let room =
                    bson!({ "$lt": [{ "$size": "$$ns" }, { "$ifNull": ["$$nc", Bson::MaxKey] }] });
                let head_let_in = bson!({ "$and": [
                    frees,
                    { "$eq": [{ "$type": format!("$$h.{KEEPER}") }, "string"] },
                    { "$eq": ["$$nx", null] },
                    { "$or": [
                        { "$eq": [{ "$size": "$$ns" }, 0] },
                        { "$and": [{ "$eq": ["$$h.kind", "shared"] }, room] },
                    ]},
                ]});
                bson!({ "$let": {
                    "vars": {
                        "m": head_let_in,
                        "st": { "$max": ["$$NOW", { "$add": [format!("${FREED}"), 1_i64] }] },
                    },
                    "in": {
                        FREED: { "$cond": ["$$m", "$$st", format!("${FREED}")] },
                        WAKE: { "$cond": [
                            "$$m",
                            { "$concat": [format!("$$h.{KEEPER}"), " ", { "$toString": "$$st" }] },
                            format!("${WAKE}"),
                        ]},
                    },
                }})
            }
            None => bson!({}),
        };
        bson!({ "$let": {
            "vars": {
                "nx": self.exclusive, "ns": self.shared, "nt": self.released, "nq": self.queue,
                "nc": self.cap,
            },
            "in": { "$let": {
                "vars": {
                    "ne": { "$map": {
                        "input": { "$concatArrays": [
                            { "$cond": [{ "$eq": ["$$nx", null] }, [], ["$$nx"]] },
                            "$$ns",
                        ]},
                        "as": "e",
                        "in": { "$ifNull": ["$$e.expiresAt", null] },
                    }},
                    "h": { "$arrayElemAt": ["$$nq", 0] },
                },
                "in": { "$mergeObjects": ["$$ROOT", wake, {
                    "fence": self.fence,
                    "exclusive": "$$nx",
                    "shared": "$$ns",
                    "released": "$$nt",
                    "cap": { "$cond": [{ "$eq": [{ "$size": "$$ns" }, 0] }, null, "$$nc"] },
                    "queue": "$$nq",
                    "idleSince": { "$cond": [
                        { "$in": [null, "$$ne"] },
                        null,
                        { "$max": [
                            { "$ifNull": [{ "$max": "$$ne" }, { "$min": ["$idleSince", "$$NOW"] }] },
                            { "$max": "$$nt.until" },
                        ]},
                    ]},
                }]},
            }},
        }})
    }
}

/// The document with its entries replaced by `exclusive` and `shared` (expressions over the
/// current document), the fence kept and expired tombstones dropped.
pub(crate) fn with_entries(exclusive: Bson, shared: Bson) -> Bson {
    NextDocument::entries(exclusive, shared, live_tombstones()).document()
}

/// The date of the last change that let the head of a line in (a release, a withdrawal, a
/// waiter leaving the line, a shared grant with a reader next in line): strictly
/// increasing, the stamp of [`WAKE`].
pub(crate) const FREED: &str = "freed";

/// Who the last change that let the head of a line in woke: the head's keeper (the lock
/// client it waits in), a space and the new [`FREED`] as a string. Each client's change
/// stream passes only the updates that set it to its own keeper (and deletes), so a release
/// wakes the one waiter that can take the lock, never a grant, a renewal or a waiter joining
/// the line (see `crate::changes`).
pub(crate) const WAKE: &str = "wake";

/// The document without every entry for which `matches` (a function from an entry path such
/// as `"$exclusive"` or `"$$e"` to a condition on it) is true.
pub(crate) fn without_entries(matches: impl Fn(&str) -> Bson) -> Bson {
    let exclusive = exclusive_where(bson!({ "$not": [matches("$exclusive")] }));
    let shared = shared_where(bson!({ "$not": [matches("$$e")] }));
    let mut next = NextDocument::entries(exclusive, shared, live_tombstones());
    next.frees = Some(Bson::Boolean(true));
    next.document()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_strings_are_sent_as_literals() {
        assert_eq!(literal("$$NOW"), bson!({ "$literal": "$$NOW" }));
    }

    #[test]
    fn a_single_document_write_fails_on_a_foreign_document() {
        let stage = guarded(bson!("$$ROOT"));
        let cond = stage
            .get_document("$replaceWith")
            .unwrap()
            .get_array("$cond")
            .unwrap();
        assert_eq!(cond[0], shape(false));
        assert_eq!(cond[2], refusal());
    }

    #[test]
    fn the_shape_check_is_small() {
        let size = bson::to_vec(&doc! { "c": is_lock_document() })
            .unwrap()
            .len();
        assert!(size < 2_200, "{size} bytes");
    }
}
