//! Release: give locks back. Every form is one round trip, and the server decides what goes
//! in the write itself: nothing is read first.
//!
//! One grant (by resource, lock id and token):
//!
//! ```text
//! findAndModify: <collection>, new: false,
//!   query: { _id: <resource>, mongolock: 1,                  // the mark
//!            "exclusive.lockId": <id>, "exclusive.token": <token> },
//!       or { ..., shared: { $elemMatch: { lockId: <id>, token: <token> } } },
//!   update: [ { $replaceWith: <the document without the entry of that token> } ],
//!   fields: { live: <whether that entry was live> },
//!   collation: { locale: "simple" }, writeConcern, maxTimeMS
//! ```
//!
//! The query finds the entry, so the reply says whether it was removed (a document, or
//! none), and the stage, which runs only on a document that has it, takes it out by its token
//! without looking again.
//!
//! One attempt (by resource, lock id and nonce), whatever became of it:
//!
//! ```text
//! findAndModify: <collection>, query: { _id: <resource>, mongolock: 1 }, new: false,
//!   upsert: true,
//!   update: [ { $replaceWith: <the document without the entry {lockId, nonce}, with a
//!                              tombstone for the nonce> } ],
//!   fields: { r: { removed, live } }, ...
//! ```
//!
//! Every lock on a resource, whoever holds it (force release, for operators):
//!
//! ```text
//! findAndModify: <collection>, query: { _id: <resource> }, new: false,
//!   update: [ { $replaceWith: <a lock document> ? <the document without entries> : <fail> } ],
//!   fields: { removed: <the number of entries before> }, ...
//! ```
//!
//! Whose document it is is checked once. A release and a withdrawal ask for the mark in their
//! query: another application's document (one without the mark) is never matched; a
//! release then finds nothing, and a withdrawal's upsert meets a duplicate key (see
//! `command/acquire.rs`); both report that nothing was removed. A force release finds the
//! document by `_id` alone and checks it in the stage: on another application's document
//! the command fails and writes nothing, so its projection (read from the document before
//! the change) only ever sees a lock document, and it reports
//! [`ErrorKind::UnexpectedDocument`](crate::ErrorKind::UnexpectedDocument).
//!
//! A release rewrites only its grant's side of the document (the exclusive entry, or the
//! shared ones and their cap), the line, `idleSince` and the wake; a withdrawal, which may
//! seed the document, writes every field an acquire writes.
//!
//! A whole lock id (unlock):
//!
//! ```text
//! update: <collection>, updates: [{
//!   q: { $or: [{ "exclusive.lockId": <id> }, { "shared.lockId": <id> }],   // by index
//!        mongolock: 1 },                                                  // the mark
//!   u: [ { $replaceWith: <the document without the entries of <id>> } ],
//!   multi: true, collation: { locale: "simple" } }], writeConcern, maxTimeMS
//! ```
//!
//! The unlock command is the same size for 1 or 10,000 locks, and each document it touches
//! costs the same: its size does not depend on the group. `nModified` counts the documents
//! that lost an entry, which is the number of locks released (a lock id holds at most one
//! lock per resource).

use bson::oid::ObjectId;
use bson::{Bson, Document, bson, doc};

use crate::command::expr::{self, is_of, literal};
use crate::command::{Context, Upsert, count};
use crate::error::{Effect, Error, Result};
use crate::lock::{Grant, LockKind};
use crate::request::{AcquireRequest, check_id};
use crate::schema;

/// The projection `{r: {removed: <whether an entry of kind `kind` matching `matches` is in
/// the document>, live: <whether such an entry was live>}}`, evaluated on the document before
/// the change, which the update's stage found to be a lock document.
fn removed_projection(kind: LockKind, matches: impl Fn(&str) -> Bson) -> Document {
    let found = match kind {
        LockKind::Exclusive => bson!({ "$let": {
            "vars": { "m": matches("$exclusive") },
            "in": { "removed": "$$m", "live": { "$and": ["$$m", expr::holds("$exclusive")] } },
        }}),
        LockKind::Shared => bson!({ "$let": {
            "vars": { "m": expr::shared_where(matches("$$e")) },
            "in": {
                "removed": { "$gt": [{ "$size": "$$m" }, 0] },
                "live": { "$anyElementTrue": [{ "$map": { "input": "$$m", "as": "e", "in": expr::holds("$$e") } }] },
            },
        }}),
    };
    doc! { "_id": 0, "r": found }
}

/// What a release found: whether it removed the entry, and whether that entry was still
/// live (by the server's clock) when it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Released {
    pub(crate) removed: bool,
    pub(crate) live: bool,
}

/// Nothing removed: no document, or one of another shape (left as it is).
const NOTHING: Released = Released {
    removed: false,
    live: false,
};

/// Reads the reply of a withdrawal, or of its meeting a document that is not a lock document.
fn removed(reply: Result<Document>) -> Result<Released> {
    let reply = match reply {
        Err(error) if crate::command::is_not_ours(&error) => return Ok(NOTHING),
        reply => reply?,
    };
    let bad = |what: &str| Error::bad_reply(Effect::Write, format!("the release reply {what}"));
    let before = match reply.get("value") {
        None | Some(Bson::Null) => return Ok(NOTHING),
        Some(Bson::Document(before)) => before,
        Some(_) => return Err(bad("is not a document")),
    };
    let Ok(found) = before.get_document("r") else {
        return Err(bad("has no 'r'"));
    };
    let flag = |field: &str| match found.get(field) {
        Some(Bson::Boolean(value)) => Ok(*value),
        _ => Err(bad(&format!("has no '{field}'"))),
    };
    Ok(Released {
        removed: flag("removed")?,
        live: flag("live")?,
    })
}

/// The query that finds the document holding `grant`: its resource, the mark, and the
/// grant's entry by lock id, token and, for a lease's grant, the keeper it names. A release
/// changes nothing else, so it needs no check of its own in the update: a document without
/// the mark, or without that entry (released already, never granted, or adopted by another
/// client that resumed the lease: see `command/keepalive.rs`), is not matched, and nothing
/// is written.
fn holding(grant: &Grant) -> Document {
    let (lock_id, token) = (grant.lock_id(), grant.fencing_token());
    let keeper = grant.holder.keeper.as_deref();
    let mut query = doc! { "_id": grant.resource() };
    match grant.kind() {
        LockKind::Exclusive => {
            query.insert("exclusive.lockId", lock_id);
            query.insert("exclusive.token", token);
            if let Some(keeper) = keeper {
                query.insert("exclusive.keeper", keeper);
            }
        }
        LockKind::Shared => {
            let mut entry = doc! { "lockId": lock_id, "token": token };
            if let Some(keeper) = keeper {
                entry.insert(schema::KEEPER, keeper);
            }
            query.insert("shared", doc! { "$elemMatch": entry });
        }
    }
    expr::checked(query, None)
}

/// The command that releases one grant: the query finds the document that holds it (see
/// [`holding`]), the stage takes the entry out (a fencing token is granted once on a
/// resource, so it names the entry), and the projection says whether the entry was live.
pub(crate) fn release_command(ctx: &Context, grant: &Grant) -> Document {
    let token = grant.fencing_token();
    let mut next = expr::NextDocument::unchanged();
    // The entry goes; one with a minimum hold stays in force for what is left of it.
    let held = grant.holder.min_hold.is_some();
    let live = match grant.kind() {
        LockKind::Exclusive if held => {
            next.exclusive = Some(expr::let_go("$exclusive"));
            expr::holds("$exclusive")
        }
        LockKind::Exclusive => {
            next.no_exclusive = true;
            next.exclusive = Some(Bson::Null);
            expr::holds("$exclusive")
        }
        LockKind::Shared => {
            // No exclusive entry is beside shared ones: each grant requires it.
            next.no_exclusive = true;
            next.shared = Some(if held {
                bson!({ "$filter": {
                    "input": { "$map": {
                        "input": "$shared", "as": "e",
                        "in": { "$cond": [{ "$eq": ["$$e.token", token] }, expr::let_go("$$e"), "$$e"] },
                    }},
                    "cond": { "$ne": ["$$this", null] },
                }})
            } else {
                bson!({ "$filter": {
                    "input": "$shared", "as": "e", "cond": { "$ne": ["$$e.token", token] },
                }})
            });
            // A document that holds shared entries has their cap.
            next.cap = bson!("$cap");
            bson!({ "$anyElementTrue": [{ "$map": {
                "input": "$shared", "as": "e",
                "in": { "$and": [{ "$eq": ["$$e.token", token] }, expr::holds("$$e")] },
            }}] })
        }
    };
    next.frees = Some(Bson::Boolean(true));
    next.lets_go = held;
    doc! {
        "findAndModify": ctx.collection_name(),
        "query": holding(grant),
        "update": [expr::replace_stage(next.document())],
        "new": false,
        "fields": { "_id": 0, "live": live },
        "collation": Context::collation(),
    }
}

/// Reads the reply of a grant's release: no document means nothing was removed, and a
/// document (the one before the change, projected) says whether the entry was live.
fn released(reply: Document) -> Result<Released> {
    let bad = |what: &str| Error::bad_reply(Effect::Write, format!("the release reply {what}"));
    match reply.get("value") {
        None | Some(Bson::Null) => Ok(NOTHING),
        Some(Bson::Document(before)) => match before.get("live") {
            Some(Bson::Boolean(live)) => Ok(Released {
                removed: true,
                live: *live,
            }),
            _ => Err(bad("has no 'live'")),
        },
        Some(_) => Err(bad("is not a document")),
    }
}

/// Releases one grant: whether this call removed it, and whether it was live then. With
/// `retire`, the attempt that was granted is retired too (see [`retire_command`]): a copy
/// of it that reaches the server later is refused instead of granting the lock again.
pub(crate) async fn release(ctx: &Context, grant: &Grant, retire: bool) -> Result<Released> {
    let retirement = retire.then(|| Retirement::grant(grant)).flatten();
    let released = match retirement {
        Some(retirement) => removed(
            ctx.write(retire_command(ctx, &retirement), Upsert::Yes)
                .await,
        )?,
        None => released(ctx.write(release_command(ctx, grant), Upsert::No).await?)?,
    };
    tracing::debug!(
        resource = grant.resource(),
        lock_id = grant.lock_id(),
        removed = released.removed,
        live = released.live,
        "released"
    );
    Ok(released)
}

/// An attempt to retire for good: its entry removed, if it is there, and its nonce
/// tombstoned so that a late copy of it is never granted. Either a withdrawn attempt (its
/// entry found by its nonce) or the grant of an attempt whose outcome was once unknown,
/// released by its holder (its entry found by its token, as a release finds it).
pub(crate) struct Retirement<'a> {
    resource: &'a str,
    lock_id: &'a str,
    kind: LockKind,
    nonce: ObjectId,
    /// The keeper a handle's attempt names: an entry another client adopted since (it
    /// resumed the lease: see `command/keepalive.rs`) is not this attempt's to remove.
    keeper: Option<&'a str>,
    /// The attempt's TTL in milliseconds: its tombstone lives that long, and at least
    /// [`schema::TOMBSTONE_MIN_LIFE`].
    ttl_ms: Option<i64>,
    /// The grant's token, for a release: the entry of that grant only.
    token: Option<i64>,
    /// For a withdrawn attempt, its call: the call's place in line goes with it (see
    /// `crate::schema`). None for a released grant, whose grant took its call's place out.
    call: Option<ObjectId>,
    /// Whether the entry it reports on is let go of, not removed (see `expr::let_go`): a
    /// released grant with a minimum hold, or a withdrawn attempt whose hold is kept.
    min_hold: bool,
}

/// What a withdrawal does with the minimum hold of a grant it ends (see
/// [`LockDetails::min_hold`](crate::LockDetails::min_hold)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Kept: the caller may have worked under the grant ([`LockClient::release_attempt`]).
    ///
    /// [`LockClient::release_attempt`]: crate::LockClient::release_attempt
    Kept,
    /// Waived: the grant was never handed to anybody (a waiting acquire's attempt given up
    /// or dropped, a multi-lock's unfinished round).
    Waived,
}

impl<'a> Retirement<'a> {
    /// A withdrawn attempt; with `hold`, its entry, if it was granted, is let go of (its
    /// minimum hold kept: its caller may have worked under it), else removed (nobody held
    /// it: a waiter gave it up before it was handed over, a multi-lock's round).
    pub(crate) fn attempt(request: &'a AcquireRequest, ttl_ms: Option<i64>, hold: Hold) -> Self {
        Retirement {
            resource: &request.resource,
            lock_id: &request.lock_id,
            kind: request.kind,
            nonce: request.nonce.0,
            keeper: request.keeper.as_deref(),
            ttl_ms,
            token: None,
            call: Some(request.call),
            min_hold: hold == Hold::Kept && request.details.min_hold_value().is_some(),
        }
    }

    /// A grant released by its holder; `None` when the grant does not name its attempt's
    /// nonce (a document written by an older version), which a plain release must do.
    fn grant(grant: &'a Grant) -> Option<Self> {
        Some(Retirement {
            resource: grant.resource(),
            lock_id: grant.lock_id(),
            kind: grant.kind(),
            nonce: grant.holder.nonce?,
            keeper: grant.holder.keeper.as_deref(),
            ttl_ms: grant.holder.ttl.map(crate::clock::saturating_millis),
            token: Some(grant.fencing_token()),
            call: None,
            min_hold: grant.holder.min_hold.is_some(),
        })
    }

    /// An expression: is the entry at `entry` one to remove? For a withdrawal, the attempt's
    /// entry (by its nonce, of this keeper). For a release, the grant's (by its token, of this
    /// keeper), and a re-grant of its attempt: the same nonce under another token, which only
    /// a late copy of the attempt makes, after the grant was gone (whatever keeper that copy
    /// named: an earlier incarnation's, say), unless a client adopted it since (it resumed
    /// it: its adopter holds it). Nobody else holds it.
    fn removes(&self, entry: &str) -> Bson {
        let by_nonce = bson!({ "$eq": [format!("{entry}.nonce"), self.nonce] });
        match self.token {
            Some(token) => bson!({ "$or": [
                self.of_this_holder(entry, bson!({ "$eq": [format!("{entry}.token"), token] })),
                { "$and": [
                    is_of(entry, self.lock_id),
                    by_nonce,
                    { "$ne": [format!("{entry}.token"), token] },
                    { "$ne": [format!("{entry}.{}", schema::ADOPTED), true] },
                ]},
            ]}),
            None => self.of_this_holder(entry, by_nonce),
        }
    }

    /// An expression: is the entry at `entry` the one the reply reports on? The grant's (by
    /// its token) for a release, the attempt's (by its nonce) for a withdrawal.
    fn reports(&self, entry: &str) -> Bson {
        self.of_this_holder(
            entry,
            match self.token {
                Some(token) => bson!({ "$eq": [format!("{entry}.token"), token] }),
                None => bson!({ "$eq": [format!("{entry}.nonce"), self.nonce] }),
            },
        )
    }

    /// `which` of this lock id, and of this keeper if it names one.
    fn of_this_holder(&self, entry: &str, which: Bson) -> Bson {
        let mut terms = vec![is_of(entry, self.lock_id), which];
        if let Some(keeper) = self.keeper {
            terms.push(bson!({ "$eq": [format!("{entry}.{}", schema::KEEPER), literal(keeper)] }));
        }
        bson!({ "$and": terms })
    }
}

/// The command that retires an attempt (see [`Retirement`]): removes its entry, if any, and
/// the lock id's place among the waiters, and leaves a tombstone so that a late copy of the
/// attempt is never granted. It always writes the tombstone (an upsert), whether or not the
/// entry is still there: a late copy can land after the entry expired and was cleared.
pub(crate) fn retire_command(ctx: &Context, retirement: &Retirement<'_>) -> Document {
    let nonce = retirement.nonce;
    let life_ms = retirement
        .ttl_ms
        .unwrap_or(0)
        .max(schema::TOMBSTONE_MIN_LIFE.as_millis() as i64);
    // Dropping a tombstone early could let its attempt through: past MAX_TOMBSTONES in force,
    // this one goes into the seal (the tombstone whose nonce is null) instead, which refuses
    // every attempt until the latest end of those it stands for (see `crate::schema`).
    let until = bson!({ "$add": ["$$NOW", life_ms] });
    let tombstones = bson!({ "$let": {
        "vars": { "o": { "$filter": {
            "input": { "$ifNull": ["$released", []] }, "as": "t",
            "cond": { "$and": [{ "$gt": ["$$t.until", "$$NOW"] }, { "$ne": ["$$t.nonce", nonce] }] },
        }}},
        "in": { "$let": {
            "vars": {
                "n": { "$filter": { "input": "$$o", "cond": { "$ne": ["$$this.nonce", null] } } },
                "z": { "$filter": { "input": "$$o", "cond": { "$eq": ["$$this.nonce", null] } } },
            },
            "in": { "$cond": [
                { "$lt": [{ "$size": "$$n" }, schema::MAX_TOMBSTONES as i64] },
                { "$concatArrays": ["$$o", [{ "nonce": nonce, "until": until.clone() }]] },
                // The seal goes first, where an acquire's reply reads it.
                { "$concatArrays": [[{
                    "nonce": null,
                    "until": { "$max": [until, { "$max": "$$z.until" }] },
                }], "$$n"] },
            ]},
        }},
    }});
    // Unlike a release, it may seed the document (an upsert, for the tombstone): then it
    // writes every field an acquire writes, so that a late copy of the attempt, refused,
    // finds nothing to change.
    // A released grant's entry is let go of (its minimum hold kept); a re-grant of its
    // attempt, and a withdrawn attempt's entry, are removed.
    let mut next = if retirement.min_hold {
        expr::NextDocument::letting_go(
            |entry| retirement.reports(entry),
            |entry| retirement.removes(entry),
        )
    } else {
        expr::NextDocument::without_entries(|entry| retirement.removes(entry))
    };
    next.fence = Some(bson!({ "$ifNull": ["$fence", 0_i64] }));
    next.released = Some(tombstones);
    // A withdrawn attempt's call stops waiting too: its place in line goes, and only its
    // (a late copy leaves the place of its lock id's next call). A released grant's call
    // left the line with its grant.
    next.queue = match retirement.call {
        Some(call) => bson!({ "$filter": {
            "input": expr::live_queue(), "as": "q",
            "cond": { "$ne": ["$$q.call", call] },
        }}),
        None => expr::live_queue(),
    };
    doc! {
        "findAndModify": ctx.collection_name(),
        // The mark, as in an acquire: another application's document is never matched.
        "query": expr::checked(doc! { "_id": retirement.resource }, None),
        "update": [expr::replace_stage(next.document())],
        "upsert": true,
        "new": false,
        "fields": removed_projection(retirement.kind, |entry| retirement.reports(entry)),
        "collation": Context::collation(),
    }
}

/// The command that withdraws an attempt (see [`retire_command`]).
pub(crate) fn release_attempt_command(
    ctx: &Context,
    request: &AcquireRequest,
    ttl_ms: Option<i64>,
    hold: Hold,
) -> Document {
    retire_command(ctx, &Retirement::attempt(request, ttl_ms, hold))
}

/// Withdraws an attempt; true if this call removed the lock it had created (or let go of
/// it, its minimum hold kept, with [`Hold::Kept`]).
pub(crate) async fn release_attempt(
    ctx: &Context,
    request: &AcquireRequest,
    hold: Hold,
) -> Result<bool> {
    let ttl_ms = request.validate()?;
    let command = release_attempt_command(ctx, request, ttl_ms, hold);
    let removed = removed(ctx.write(command, Upsert::Yes).await)?.removed;
    tracing::debug!(resource = %request.resource, lock_id = %request.lock_id, removed, "attempt withdrawn");
    Ok(removed)
}

/// The command that breaks every lock on `resource`, whoever holds it, as the operation
/// `op`: the first copy to run ends every lease and leaves a tombstone for `op`; a copy
/// that finds that tombstone (the write repeated after an unknown outcome) changes nothing,
/// so it never breaks a lock granted between the two.
///
/// Ending a lease removes its entry, unless the entry has a lock-delay and is in force: then
/// its lease ends now and it stays in force for its delay (`expiresAt` becomes at most
/// `$$NOW + delayMs`), so that its revoked holder cannot race a successor (see
/// `crate::schema`). A delay under way is never cut short, nor made longer.
///
/// Such an entry is marked `letGoAt` (`$$NOW`; an entry its holder let go of within its
/// minimum hold keeps its own), as a let-go entry is (`expr::was_let_go`): it holds nothing,
/// whatever the clock reads. Unmarked, a step back of the server's clock by more than the
/// delay would read `expiresAt > $$NOW + delayMs` true again: the revoked holder's keeper
/// would renew the lease (`keepalive::lease_query`) and its lock id's next attempt be
/// answered "already held" (`expr::holds`), and the holder would never be told that an
/// operator broke its lock (issue 40, the model's finding `FORCED_BACK`). The mark changes
/// nothing else of the entry: it stays in force for the rest of its delay, and a release by
/// its holder with a minimum hold lets go of it as of any entry (`expr::let_go`).
///
/// A repeated copy (its tombstone found) leaves the document exactly as it is.
pub(crate) fn force_command(ctx: &Context, resource: &str, op: ObjectId) -> Document {
    let repeat = bson!({ "$in": [op, "$$t.nonce"] });
    let life_ms = schema::TOMBSTONE_MIN_LIFE.as_millis() as i64;
    // The entry at `entry` after the break: its delay, from now, or nothing. From its grant
    // when the server's clock reads before it (stepped back past it): a let-go entry's
    // delay is its minimum hold, which then stays as it is, in force until grant + hold
    // (from `$$NOW`, it would end earlier by the stepped-back clock); a lease's delay then
    // lasts longer, never shorter. (A missing or null `delayMs` is not greater than 0: they
    // sort before numbers.)
    let delayed = |entry: &str| {
        let delay = format!("{entry}.{}", schema::DELAY_MS);
        let from = bson!({ "$max": ["$$NOW", format!("{entry}.createdAt")] });
        bson!({ "$cond": [
            { "$and": [{ "$gt": [&delay, 0] }, expr::is_live(entry)] },
            { "$mergeObjects": [entry, {
                "expiresAt": {
                    // `$min` passes over null: an entry without TTL gets the delay's end.
                    "$min": [format!("{entry}.expiresAt"), { "$add": [from, &delay] }],
                },
                // Marked: it holds nothing, whatever the clock reads (`expr::holds`).
                schema::LET_GO_AT: { "$ifNull": [format!("{entry}.{}", schema::LET_GO_AT), "$$NOW"] },
            }]},
            null,
        ]})
    };
    let mut next = expr::NextDocument::entries(
        bson!({ "$cond": [{ "$eq": [{ "$type": "$exclusive" }, "object"] }, delayed("$exclusive"), null] }),
        bson!({ "$filter": {
            "input": { "$map": { "input": expr::shared_or_empty(), "as": "e", "in": delayed("$$e") } },
            "cond": { "$ne": ["$$this", null] },
        }}),
    );
    next.released = Some(bson!({ "$concatArrays": [
        "$$t",
        [{ "nonce": op, "until": { "$add": ["$$NOW", life_ms] } }],
    ]}));
    next.frees = Some(Bson::Boolean(true));
    // A repeated copy leaves the document exactly as it is.
    let document = bson!({ "$let": {
        "vars": { "t": expr::live_tombstones() },
        "in": { "$cond": [repeat.clone(), "$$ROOT", next.document()] },
    }});
    doc! {
        "findAndModify": ctx.collection_name(),
        "query": { "_id": resource },
        "update": [expr::guarded(document)],
        "new": false,
        // On the document before, which the stage checked: the leases it ended (an entry
        // already within its lock-delay held none); 0 for a repeated copy.
        "fields": { "_id": 0, "removed": { "$let": {
            "vars": { "t": expr::live_tombstones() },
            "in": { "$cond": [repeat, 0, { "$size": { "$filter": {
                "input": expr::all_entries(), "as": "e", "cond": expr::holds("$$e"),
            }}}]},
        }}},
        "collation": Context::collation(),
    }
}

/// Breaks every lock on `resource`; returns how many it removed.
pub(crate) async fn force_release(ctx: &Context, resource: &str) -> Result<u64> {
    check_id("resource", resource)?;
    let reply = match ctx
        .write(force_command(ctx, resource, ObjectId::new()), Upsert::No)
        .await
    {
        Err(error) if expr::is_refusal(&error) => {
            return Err(schema::not_a_lock_document(&Bson::String(
                resource.to_owned(),
            )));
        }
        reply => reply?,
    };
    let removed = match reply.get("value") {
        None | Some(Bson::Null) => 0,
        Some(Bson::Document(before)) => match before.get("removed") {
            Some(Bson::Int32(n)) if *n >= 0 => *n as u64,
            Some(Bson::Int64(n)) if *n >= 0 => *n as u64,
            _ => {
                return Err(Error::bad_reply(
                    Effect::Write,
                    "the reply has no 'removed'",
                ));
            }
        },
        Some(_) => {
            return Err(Error::bad_reply(
                Effect::Write,
                "the reply is not a document",
            ));
        }
    };
    tracing::warn!(resource, removed, "locks force-released");
    Ok(removed)
}

/// The command that releases every lock of `lock_id`, as the unlock call `op`: every entry
/// of the lock id goes, except one granted after `op` was sent, which names it in
/// `afterUnlocks` (see `crate::unlocks`): a late copy of an unlock removes nothing granted
/// since.
pub(crate) fn unlock_command(ctx: &Context, lock_id: &str, op: ObjectId) -> Document {
    let unspared = |entry: &str| {
        bson!({ "$and": [
            is_of(entry, lock_id),
            { "$not": [{ "$in": [op, expr::unlocks_named(entry)] }] },
        ]})
    };
    // By index, and only a document that holds such an entry: `nModified` counts the locks
    // released.
    let query = doc! { "$or": [
        { "exclusive.lockId": lock_id, format!("exclusive.{}", schema::AFTER_UNLOCKS): { "$ne": op } },
        { "shared": { "$elemMatch": { "lockId": lock_id, schema::AFTER_UNLOCKS: { "$ne": op } } } },
    ]};
    doc! {
        "update": ctx.collection_name(),
        "updates": [{
            "q": expr::checked(query, None),
            "u": [expr::replace_stage(
                expr::NextDocument::letting_go(unspared, |_| Bson::Boolean(false)).document(),
            )],
            "multi": true,
            "collation": Context::collation(),
        }],
    }
}

/// Releases every lock of `lock_id` as the unlock call `op` (see [`unlock_command`]);
/// returns how many, and whether a copy of it had an unknown outcome (it may still land).
pub(crate) async fn unlock(ctx: &Context, lock_id: &str, op: ObjectId) -> Result<(u64, bool)> {
    let (reply, doubted) = ctx
        .write_noting_doubt(unlock_command(ctx, lock_id, op), Upsert::No)
        .await?;
    let released = count(&reply, "nModified");
    tracing::debug!(lock_id, released, "unlocked");
    Ok((released, doubted))
}

/// The command that takes the place of the waiting call `call` out of the line of
/// `resource`, for a waiter that stops waiting and whose attempts were all refused: no grant
/// of it can land later, so it needs no tombstone (see [`release_attempt_command`] for one
/// that may). Only that call's place goes (see `crate::schema`): a copy that lands late,
/// after its lock id's next call joined the line, leaves that call's place where it stands.
/// Expired places of others go too.
///
/// ```text
/// update: <collection>, updates: [{
///   q: { _id: <resource>, "queue.call": <call>, mongolock: 1 },
///   u: [ { $replaceWith: <the document, its line without <call>'s place> } ] }], ...
/// ```
pub(crate) fn leave_line_command(ctx: &Context, resource: &str, call: ObjectId) -> Document {
    let mut next = expr::NextDocument::unchanged();
    next.queue = bson!({ "$filter": {
        "input": expr::live_queue(), "as": "q",
        "cond": { "$ne": ["$$q.call", call] },
    }});
    next.frees = Some(Bson::Boolean(true));
    doc! {
        "update": ctx.collection_name(),
        "updates": [{
            "q": expr::checked(doc! { "_id": resource, "queue.call": call }, None),
            "u": [expr::replace_stage(next.document())],
            "collation": Context::collation(),
        }],
    }
}

/// Takes the place of `request`'s call out of its resource's line (see
/// [`leave_line_command`]).
pub(crate) async fn leave_line(ctx: &Context, request: &AcquireRequest) -> Result<()> {
    request.validate()?;
    let command = leave_line_command(ctx, &request.resource, request.call);
    let reply = ctx.write(command, Upsert::No).await?;
    tracing::debug!(
        resource = %request.resource, lock_id = %request.lock_id, left = count(&reply, "nModified"),
        "left the line"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::LockDetails;

    fn size(doc: &Document) -> usize {
        bson::to_vec(doc).unwrap().len()
    }

    #[tokio::test]
    async fn unlock_is_one_statement_of_constant_size() {
        let ctx = crate::command::test_context();
        let command = unlock_command(&ctx, "$id", ObjectId::new());
        let updates = command.get_array("updates").unwrap();
        assert_eq!(updates.len(), 1);
        let text = Bson::Document(command.clone())
            .into_relaxed_extjson()
            .to_string();
        assert!(text.contains(r#"{"$literal":"$id"}"#), "{text}");
        assert!(text.contains(r#""multi":true"#), "{text}");
        // Nothing but the lock id goes in: its length is all that changes the size.
        let op = ObjectId::new();
        let long = unlock_command(&ctx, "a123456789", op);
        let copies = Bson::Document(long.clone())
            .into_relaxed_extjson()
            .to_string()
            .matches("a123456789")
            .count();
        assert_eq!(
            size(&unlock_command(&ctx, "a", op)) + 9 * copies,
            size(&long)
        );
    }

    #[tokio::test]
    async fn withdrawing_leaves_a_bounded_tombstone() {
        let ctx = crate::command::test_context();
        let request = AcquireRequest::exclusive("r", "id", LockDetails::default());
        let command = release_attempt_command(&ctx, &request, None, Hold::Kept);
        assert_eq!(command.get_bool("upsert"), Ok(true));
        let text = Bson::Document(command).into_relaxed_extjson().to_string();
        assert!(
            text.contains(r#""until":{"$add":["$$NOW",300000]}"#),
            "{text}"
        );
        assert!(!text.contains("$slice"), "no count bound: {text}");
        let long = release_attempt_command(&ctx, &request, Some(3_600_000), Hold::Kept);
        let text = Bson::Document(long).into_relaxed_extjson().to_string();
        assert!(
            text.contains(r#""until":{"$add":["$$NOW",3600000]}"#),
            "{text}"
        );
    }
}

#[cfg(test)]
mod adopted {
    use super::*;
    use crate::attempt::Attempt;
    use crate::command::keepalive;
    use crate::request::LockDetails;

    /// A late withdrawal by the client that made an attempt leaves the entry alone once
    /// another client adopted it (resumed the lease), as a release does.
    #[tokio::test]
    async fn a_withdrawal_leaves_an_adopted_entry_alone() {
        let server = mongolock_testkit::TestServer::start().await.unwrap();
        let collection = server.client().database("d").collection("locks");
        let ctx = Context::new(collection.clone());
        let locks = crate::LockClient::new(collection.clone());
        // A lease: with a TTL (a handle's always has one).
        let details = LockDetails::default().ttl(std::time::Duration::from_secs(30));
        let mut first = AcquireRequest::exclusive("r", "svc", details.clone());
        first.keeper = Some("keeper-a".to_owned());
        let Attempt::Granted(grant) = locks.acquire(&first).await.unwrap() else {
            panic!("granted")
        };
        assert!(
            keepalive::adopt(
                &ctx,
                &grant,
                "keeper-b",
                &LockDetails::default(),
                &[],
                first.call
            )
            .await
            .unwrap()
        );
        // The first client withdraws its attempt (its future was dropped, say): nothing goes.
        assert!(!release_attempt(&ctx, &first, Hold::Kept).await.unwrap());
        let stored = collection
            .find_one(doc! { "_id": "r" })
            .await
            .unwrap()
            .unwrap();
        let entry = stored.get_document("exclusive").unwrap();
        assert_eq!(entry.get_str("keeper"), Ok("keeper-b"), "{stored}");
        // Without the adoption the same withdrawal removes it: the check above can fail.
        let mut second = AcquireRequest::exclusive("s", "svc", details);
        second.keeper = Some("keeper-a".to_owned());
        let _ = locks.acquire(&second).await.unwrap();
        assert!(release_attempt(&ctx, &second, Hold::Kept).await.unwrap());
    }
}
