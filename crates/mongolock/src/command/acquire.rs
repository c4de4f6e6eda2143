//! Acquire: one `findAndModify` that decides and grants atomically, by the server's clock.
//!
//! On the wire (1 round trip):
//!
//! ```text
//! findAndModify: <collection>
//!   query:  { _id: <resource>, mongolock: 1 }   // the mark: a lock document, or none yet
//!   update: [ { $replaceWith: ... } ]      // the pipeline below, one stage
//!   upsert: true, new: true
//!   fields: { ... }                        // the projection below: a bounded reply
//!   collation: { locale: "simple" }
//!   writeConcern: { w: "majority", j: true, wtimeout: <limit> }, maxTimeMS: <limit>
//! ```
//!
//! Whose document it is, the query says, once: it matches the resource's document only if it
//! carries the mark; when there is none, the upsert seeds `{_id, mongolock: 1}` and the stage
//! fills it. When a document with that `_id` exists without the mark (another
//! application's), the query matches nothing and the upsert's insert meets a duplicate key:
//! the command writes nothing, and after one repeat (the first may be a racing upsert's
//! doing) the client reports
//! [`ErrorKind::UnexpectedDocument`](crate::ErrorKind::UnexpectedDocument) (see
//! `command/expr.rs`).
//!
//! The stage, in words (each step is one `$let` level of [`pipeline`]):
//! 1. `x`, `s`, `t`, `q`: the live exclusive entry (or null), the live shared entries, the
//!    tombstones and the live places of the resource's line, in the order they joined.
//!    Expired entries and places are dropped here, so they never block anybody.
//! 2. `a`: the places before this lock id's own in the line, or every place if it has none
//!    (a first or a single attempt). For a waiting attempt also `o` (out of the line):
//!    whether this attempt's nonce was given up by `release_attempt`, or the attempt is
//!    answered with a lock it does not wait for: for an exclusive one, the exclusive entry
//!    is this attempt's grant, held, or this lock id holds a shared lease (an error); for a
//!    shared one, this lock id has an entry in force. An exclusive attempt answered
//!    "already held" (its lock id's exclusive lease, from another attempt: a restarted
//!    process's) stays in line: the adoption of the lease takes its place out, and if the
//!    adoption is refused the call keeps its turn. An entry only in force, within its
//!    lock-delay or minimum hold, makes an exclusive attempt wait in line like anybody; for
//!    a waiting shared one `y`, whether the requested cap is
//!    the live shared entries' (or there are none).
//! 3. `g` (grant): the nonce not withdrawn, no live exclusive entry; for an exclusive lock
//!    no live shared entry and nobody before it in line; for a shared lock no live shared
//!    entry of this lock id, the cap of the live shared entries (if any) the requested one,
//!    only readers before it in line, and the live shared entries plus those readers fewer
//!    than `max`. Only the terms of the request's kind are sent; a request that only waits
//!    for its turn (a multi-lock's, see `crate::multi`) adds `false`. `f`: the token a grant
//!    gets, `max(fence + 1, toLong($$NOW) * 1000)`.
//! 4. The new document: on a grant the new entry (token `f`, `expiresAt = $$NOW + ttl` or
//!    null; with a lock-delay, `$$NOW + ttl + delay` and `delayMs`: the entry stays in
//!    force, and refuses everybody, for the delay after its lease) as the exclusive entry or added to the shared ones, `fence = f`, and this lock
//!    id's place out of the line; otherwise the live entries only, the fence unchanged, and
//!    for a waiting attempt its place (naming its call and its keeper): added at the end of
//!    the line if it had none, kept where it is, named by its call, if it has one (its
//!    client refreshes it); a waiting attempt answered out of the line takes its call's
//!    place out, and no other (see `line_after`). A shared
//!    grant that leaves a reader at the head of the line, with a permit left for it, wakes
//!    it (`wake`, see [`crate::schema`]): a line of readers is let in one after
//!    another.
//!
//! A refused attempt whose document had nothing expired to drop leaves it unchanged: no
//! write, no change event. An exclusive grant wakes
//! nobody: nobody can follow it in.
//!
//! The projection reads the document after the change, which the stage wrote as a lock
//! document (so it needs no check of its own), and returns only raw, bounded facts whatever
//! the number of holders (see [`projection`]): the server's `$$NOW`, the exclusive entry,
//! this lock id's shared entry, the first [`MAX_NAMED_HOLDERS`] shared entries and their
//! number, whether the nonce was withdrawn, this lock id's place in line, and the latest (or
//! for a shared request the earliest) shared `expiresAt`; for a shared request also whether a
//! writer stands in line. [`interpret`] derives the outcome
//! from them: granted now if this lock id's entry carries this attempt's nonce, held from
//! before, or refused with the blockers and how long until they are gone (an `expiresAt`
//! minus the server's `$$NOW`, both server times, so no client clock is read).

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Document, bson, doc};

use crate::attempt::{Attempt, Contention, MAX_NAMED_HOLDERS};
use crate::command::Context;
use crate::command::expr::{self, literal};
use crate::error::{Effect, Error, Result};
use crate::lock::{Grant, LockKind};
use crate::request::AcquireRequest;
use crate::schema;

/// The command for one attempt; `ttl_ms` is the validated TTL, `after_unlocks` the unlocks
/// of the lock id whose copies may still land (see `crate::unlocks`): a grant names them.
pub(crate) fn command(
    ctx: &Context,
    request: &AcquireRequest,
    ttl_ms: Option<i64>,
    after_unlocks: &[ObjectId],
) -> Document {
    doc! {
        "findAndModify": ctx.collection_name(),
        "query": expr::checked(doc! { "_id": &request.resource }, None),
        "update": pipeline(request, ttl_ms, after_unlocks),
        "upsert": true,
        "new": true,
        "fields": projection(request),
        "collation": Context::collation(),
    }
}

/// The update pipeline; see the module docs for the steps, each built by a named term
/// below and nested as one `$let` level: [`live`] (step 1), [`ahead`] (step 2), [`decision`]
/// (step 3) and [`next_document`] (step 4). Only the terms that can apply to the request's
/// kind are sent: an exclusive request is refused by any live entry, held by this lock id or
/// not, so it needs no `held` term; a shared one has a cap and writers to respect.
pub(crate) fn pipeline(
    request: &AcquireRequest,
    ttl_ms: Option<i64>,
    after_unlocks: &[ObjectId],
) -> Vec<Document> {
    let waiting = request.announce.map(crate::clock::saturating_millis);
    let (live, keeper) = live(request, waiting);
    let terms = Terms::new(request);
    let ahead = ahead(request, &terms, waiting);
    let decision = decision(request, &terms, waiting);
    let result = next_document(request, &terms, ttl_ms, after_unlocks, waiting, &keeper);
    let nested = [live, ahead, decision].into_iter().rev().fold(
        result,
        |inner, vars| bson!({ "$let": { "vars": vars, "in": inner } }),
    );
    vec![expr::replace_stage(nested)]
}

/// What the steps' terms name more than once: this attempt's nonce, the lock id (bound as
/// `l` by step 1) and the cap the request asks for.
struct Terms {
    lock_id: Bson,
    nonce: Bson,
    requested_cap: Bson,
}

impl Terms {
    fn new(request: &AcquireRequest) -> Self {
        Terms {
            lock_id: bson!("$$l"),
            // An ObjectId is a constant in an expression: it needs no `$literal`.
            nonce: Bson::ObjectId(request.nonce.0),
            requested_cap: match request.max_shared {
                Some(max) => expr::int(i64::from(max)),
                None => Bson::Null,
            },
        }
    }

    /// Was this attempt withdrawn? Its nonce has a tombstone, or the seal (a tombstone
    /// whose nonce is null, see `crate::schema`) refuses every attempt.
    fn withdrawn(&self) -> Bson {
        bson!({ "$or": [
            { "$in": [self.nonce.clone(), "$$t.nonce"] },
            { "$in": [null, "$$t.nonce"] },
        ]})
    }

    /// A shared request asks for the cap of the live shared entries, if there are any.
    fn cap_agrees(&self) -> Bson {
        bson!({ "$or": [
            { "$eq": [{ "$size": "$$s" }, 0] },
            { "$eq": ["$cap", self.requested_cap.clone()] },
        ]})
    }
}

/// Step 1, the variables: `l`, the lock id, written once; `x`, `s`, `t`, `q`, the live
/// exclusive entry, the live shared entries, the live tombstones and the live places in
/// line; for a waiting attempt of a keeper, `k`, its keeper. Returns them with the keeper
/// as the entry and the place name it (a variable, a literal or null).
fn live(request: &AcquireRequest, waiting: Option<i64>) -> (Document, Bson) {
    let mut live = doc! {
        "l": literal(request.lock_id.as_str()),
        "x": expr::exclusive_where(expr::is_live("$exclusive")),
        "s": expr::live_shared(),
        "t": expr::live_tombstones(),
        "q": expr::live_queue(),
    };
    // The keeper, named by the entry and by a waiting attempt's place: written once.
    let keeper = match (&request.keeper, waiting) {
        (Some(keeper), Some(_)) => {
            live.insert("k", literal(keeper.as_str()));
            bson!("$$k")
        }
        (keeper, _) => keeper.as_deref().map_or(Bson::Null, literal),
    };
    (live, keeper)
}

/// Step 2, the variables: `a`, the live waiters ahead of this attempt, in arrival order:
/// those before its own place in the line, or all of them if it has none (a first or a
/// single attempt): the line up to the first place of its lock id in the line with that
/// lock id added last. For a waiting attempt, `o` (out of the line, [`out_of_line`]) and,
/// for a shared one, `y`: whether it asks for the live shared entries' cap.
fn ahead(request: &AcquireRequest, terms: &Terms, waiting: Option<i64>) -> Document {
    let lock_id = &terms.lock_id;
    let mut ahead = doc! {
        "a": { "$slice": [
            "$$q",
            { "$indexOfArray": [{ "$concatArrays": ["$$q.lockId", [lock_id.clone()]] }, lock_id.clone()] },
        ]},
    };
    if waiting.is_some() {
        if request.kind == LockKind::Shared {
            ahead.insert("y", terms.cap_agrees());
        }
        ahead.insert("o", out_of_line(request, terms));
    }
    ahead
}

/// For a waiting attempt, `o` (out of the line): it was withdrawn, or it is answered with a
/// lock and not made to wait. For an exclusive request: the exclusive entry is this
/// attempt's grant, held (a repeat finds it), or this lock id holds a shared lease
/// (answered with an error, which ends the call). An exclusive entry of this lock id from
/// another attempt does not take it out: held, the attempt is answered "already held" and
/// keeps (or takes) its place, which the adoption of that lease takes out
/// (`keepalive::adopt_command`); if the adoption is refused (the lease was let go of
/// meanwhile, into its minimum hold), the call's next attempt finds its place and waits in
/// its turn. Only in force (its lease ended, within its lock-delay or minimum hold), it
/// keeps this lock id out as it keeps everybody out, and the attempt waits in line for it
/// to end, in arrival order. A shared request counts every entry of its lock id in force
/// (the shorter expression keeps a waiting permit's command within its bound): one whose
/// own share is held is answered "already held" outside the line, and one whose own share
/// is in its hold asks again when the hold ends, outside the line (see
/// `LockDetails::min_hold`).
fn out_of_line(request: &AcquireRequest, terms: &Terms) -> Bson {
    let lock_id = &terms.lock_id;
    let mut out = vec![
        bson!({ "$in": [terms.nonce.clone(), "$$t.nonce"] }),
        bson!({ "$in": [null, "$$t.nonce"] }),
    ];
    match request.kind {
        LockKind::Exclusive => {
            // This attempt's own grant, held (a repeat is answered with it). Its lease
            // ended, within its lock-delay, it keeps the attempt waiting in line.
            out.push(bson!({ "$and": [
                { "$eq": ["$$x.nonce", terms.nonce.clone()] },
                expr::holds("$$x"),
            ]}));
            // The lock ids of the shared entries whose lease is held.
            let holding = bson!({ "$map": {
                "input": "$$s",
                "in": { "$cond": [expr::holds("$$this"), "$$this.lockId", null] },
            }});
            out.push(bson!({ "$in": [lock_id.clone(), holding] }));
        }
        LockKind::Shared => {
            out.push(bson!({ "$in": [
                lock_id.clone(),
                { "$concatArrays": [["$$x.lockId"], "$$s.lockId"] },
            ]}));
        }
    }
    bson!({ "$or": out })
}

/// Step 3, the variables: `g` (granted), the terms of the request's kind all true
/// ([`grant_terms`]); `f`, the fencing token a grant gets: above every earlier one, even if
/// the document was deleted.
fn decision(request: &AcquireRequest, terms: &Terms, waiting: Option<i64>) -> Document {
    doc! {
        "g": { "$and": grant_terms(request, terms, waiting) },
        "f": { "$max": [
            // No fence yet (a document just seeded): `$add` gives null, which `$max` passes.
            { "$add": ["$fence", 1] },
            { "$multiply": [{ "$toLong": "$$NOW" }, 1000] },
        ]},
    }
}

/// Is it granted? Not withdrawn (for a waiting attempt, not out of the line), no live
/// exclusive entry; for an exclusive lock no live shared entry and nobody before it in
/// line; for a shared lock not held by this lock id, the same cap as the live shared
/// entries, no writer waiting ahead, and room under the cap. An exclusive request needs no
/// `held` term: any live entry, this lock id's or not, refuses it. A request that only
/// waits for its turn is never granted (it keeps its place).
fn grant_terms(request: &AcquireRequest, terms: &Terms, waiting: Option<i64>) -> Vec<Bson> {
    let mut all = vec![
        // `$not` of one expression needs no argument list (nor does any one-argument operator).
        bson!({ "$not": if waiting.is_some() { bson!("$$o") } else { terms.withdrawn() } }),
        bson!({ "$eq": ["$$x", null] }),
    ];
    match request.kind {
        // Nobody holds it, and nobody waits ahead.
        LockKind::Exclusive => {
            all.push(bson!({ "$eq": [{ "$size": "$$s" }, 0] }));
            all.push(bson!({ "$eq": [{ "$size": "$$a" }, 0] }));
        }
        // Only readers wait ahead (they share with this one), and with a cap, the slots left
        // are more than the permits they wait for.
        LockKind::Shared => {
            // No shared entry of this lock id in force (for a waiting attempt, `o` says
            // it): a lock id has one shared entry at most.
            if waiting.is_none() {
                all.push(bson!({ "$not": { "$in": [terms.lock_id.clone(), "$$s.lockId"] } }));
            }
            all.push(match waiting {
                Some(_) => bson!("$$y"),
                None => terms.cap_agrees(),
            });
            all.push(bson!({ "$not": { "$in": ["exclusive", "$$a.kind"] } }));
            if let Some(max) = request.max_shared {
                all.push(bson!({ "$lt": [
                    { "$add": [{ "$size": "$$s" }, { "$size": "$$a" }] },
                    expr::int(i64::from(max)),
                ]}));
            }
        }
    }
    if request.turn_only {
        all.push(Bson::Boolean(false));
    }
    all
}

/// Step 4: the new document (see [`expr::NextDocument`]): on a grant, the new entry
/// ([`new_entry`]) in place, the fence `f` and this lock id out of the line; otherwise the
/// live entries, the fence as it was, and for a waiting attempt its place ([`line_after`]).
fn next_document(
    request: &AcquireRequest,
    terms: &Terms,
    ttl_ms: Option<i64>,
    after_unlocks: &[ObjectId],
    waiting: Option<i64>,
    keeper: &Bson,
) -> Bson {
    let (entry, expires_at) = new_entry(request, terms, ttl_ms, after_unlocks, keeper);
    let (x, s) = held_from_before(terms, after_unlocks);
    let (exclusive, shared, cap) = match request.kind {
        LockKind::Exclusive => (bson!({ "$cond": ["$$g", entry, x] }), s, bson!("$cap")),
        LockKind::Shared => (
            x,
            bson!({ "$cond": ["$$g", { "$concatArrays": ["$$s", [entry]] }, s] }),
            bson!({ "$cond": ["$$g", terms.requested_cap.clone(), "$cap"] }),
        ),
    };
    expr::NextDocument {
        // A refusal keeps it (a document just seeded is never refused: it holds nothing).
        fence: Some(bson!({ "$cond": ["$$g", "$$f", "$fence"] })),
        exclusive: Some(exclusive),
        shared: Some(shared),
        released: Some(bson!("$$t")),
        cap,
        queue: line_after(request, terms, waiting, keeper),
        // An exclusive grant lets nobody in, nor does a refusal (an expired entry it drops
        // already let the waiters in, by their timers). A shared grant may let the next
        // reader in line in: then it wakes it, and so on down a line of readers.
        frees: match request.kind {
            LockKind::Exclusive => None,
            LockKind::Shared => Some(bson!("$$g")),
        },
        // A permit is left for the next reader: the cap, if any, is the requested one.
        shared_grant: match (request.kind, request.max_shared) {
            (LockKind::Exclusive, _) => None,
            (LockKind::Shared, None) => Some(Bson::Boolean(true)),
            (LockKind::Shared, Some(max)) => {
                Some(bson!({ "$lt": [{ "$size": "$$ns" }, expr::int(i64::from(max))] }))
            }
        },
        no_exclusive: false,
        idle_since: Some(idle_since(request, ttl_ms, &expires_at)),
        // A grant clears a wake that stayed from an earlier change (see `NextDocument`).
        clears_wake: Some(bson!("$$g")),
        lets_go: false,
    }
    .document()
}

/// The entry a grant writes, and its `expiresAt`. An entry with a lock-delay is in force
/// that much longer than its lease (see `crate::schema`): its `expiresAt` is the end of the
/// delay.
fn new_entry(
    request: &AcquireRequest,
    terms: &Terms,
    ttl_ms: Option<i64>,
    after_unlocks: &[ObjectId],
    keeper: &Bson,
) -> (Bson, Bson) {
    let details = &request.details;
    let delay_ms = details.delay_millis().ok().flatten();
    let (expires_at, ttl) = match ttl_ms {
        Some(ms) => (
            bson!({ "$add": ["$$NOW", expr::int(ms.saturating_add(delay_ms.unwrap_or(0)))] }),
            expr::int(ms),
        ),
        None => (Bson::Null, Bson::Null),
    };
    let mut entry = doc! {
        "lockId": terms.lock_id.clone(),
        "nonce": terms.nonce.clone(),
        "owner": details.owner_value().map_or(Bson::Null, literal),
        "host": literal(details.host_value()),
        "keeper": keeper.clone(),
        "token": "$$f",
        // `renewedAt` comes with the first renewal (see `crate::schema`).
        "createdAt": "$$NOW",
        "expiresAt": expires_at.clone(),
        "ttlMs": ttl,
    };
    if let Some(delay_ms) = delay_ms {
        entry.insert(schema::DELAY_MS, expr::int(delay_ms));
    }
    if let Some(hold_ms) = details.hold_millis().ok().flatten() {
        entry.insert(schema::MIN_HOLD_MS, expr::int(hold_ms));
    }
    if !after_unlocks.is_empty() {
        entry.insert(schema::AFTER_UNLOCKS, expr::unlock_ids(after_unlocks));
    }
    (Bson::Document(entry), expires_at)
}

/// The live entries `x` and `s` as a refusal leaves them. Not granted, this lock id's own
/// live entries (held from before: the attempt is answered with them) name the unlocks the
/// attempt carries too, as a grant would: its holder goes on believing, so a late copy of
/// those unlocks must leave them.
fn held_from_before(terms: &Terms, after_unlocks: &[ObjectId]) -> (Bson, Bson) {
    if after_unlocks.is_empty() {
        return (bson!("$$x"), bson!("$$s"));
    }
    let marked = |e: &str| {
        bson!({ "$cond": [
            { "$eq": [format!("{e}.lockId"), terms.lock_id.clone()] },
            { "$mergeObjects": [e, { schema::AFTER_UNLOCKS: expr::also_naming(e, after_unlocks) }] },
            e,
        ]})
    };
    (
        marked("$$x"),
        bson!({ "$map": { "input": "$$s", "as": "e", "in": marked("$$e") } }),
    )
}

/// `idleSince` after the change. It changes only with a grant (see `crate::schema`):
/// dropping expired entries and tombstones never lowers what it must cover, and it already
/// covers the live ones. A grant without TTL makes it null; one with a TTL pushes it to the
/// entry's end (`expires_at`), unless it is null (a live entry has no TTL: no entry without
/// TTL expires, and the change that removes one computes it again). A request that only
/// waits for its turn may seed the document (nobody held the resource): it is free from now.
fn idle_since(request: &AcquireRequest, ttl_ms: Option<i64>, expires_at: &Bson) -> Bson {
    let idle_since = match ttl_ms {
        Some(_) => bson!({ "$cond": [
            { "$and": ["$$g", { "$ne": [{ "$type": "$idleSince" }, "null"] }] },
            { "$max": ["$idleSince", expires_at.clone()] },
            "$idleSince",
        ]}),
        None => bson!({ "$cond": ["$$g", null, "$idleSince"] }),
    };
    if !request.turn_only {
        return idle_since;
    }
    bson!({ "$cond": [
        { "$eq": [{ "$type": "$idleSince" }, "missing"] },
        "$$NOW",
        idle_since,
    ]})
}

/// The line after the change. A grant ends this lock id's wait: every place of the lock id
/// goes. A waiting attempt that stops waiting otherwise takes its call's place out (a place
/// of its lock id that names another call is not its to take: a late copy's call is over,
/// and the place is its lock id's next call's): withdrawn (a late copy of a dropped one: its
/// waiter is gone), answered with a lock it is not asked to wait for (`o`: a place would
/// keep others out after it releases), or, shared, refused for asking another cap than the
/// live shared locks' (answered with an error, not made to wait). An exclusive attempt
/// answered "already held" keeps its place, which the adoption takes out. Otherwise it joins
/// at the end if it has no place yet, with a place that names its call and its keeper (its
/// lock client, whom a change that lets it in wakes); else its place stays where it is,
/// named by its call (a place its restarted process's predecessor held, or one written
/// before places named their call, is taken over with its turn): its client refreshes it
/// (`crate::places`), so a refused attempt leaves the line, and the document, unchanged.
fn line_after(
    request: &AcquireRequest,
    terms: &Terms,
    waiting: Option<i64>,
    keeper: &Bson,
) -> Bson {
    let others_waiting = bson!({ "$filter": {
        "input": "$$q", "cond": { "$ne": ["$$this.lockId", terms.lock_id.clone()] },
    }});
    let Some(bound_ms) = waiting else {
        return bson!({ "$cond": ["$$g", others_waiting, "$$q"] });
    };
    let mut stop = vec![bson!("$$o")];
    if request.kind == LockKind::Shared {
        stop.push(bson!({ "$not": "$$y" }));
    }
    let call = Bson::ObjectId(request.call);
    let mut place = doc! {
        "lockId": terms.lock_id.clone(),
        "kind": request.kind.to_string(),
        "until": { "$add": ["$$NOW", expr::int(bound_ms)] },
        schema::CALL: call.clone(),
    };
    if request.keeper.is_some() {
        place.insert(schema::KEEPER, keeper.clone());
    }
    let own = bson!({ "$eq": ["$$this.lockId", terms.lock_id.clone()] });
    bson!({ "$cond": [
        "$$g",
        others_waiting,
        { "$cond": [
            { "$or": stop },
            { "$filter": { "input": "$$q", "cond": { "$ne": ["$$this.call", call.clone()] } } },
            { "$cond": [
                { "$eq": [{ "$size": "$$a" }, { "$size": "$$q" }] },
                { "$concatArrays": ["$$q", [place]] },
                { "$map": { "input": "$$q", "in": { "$cond": [
                    own,
                    { "$mergeObjects": ["$$this", { schema::CALL: call }] },
                    "$$this",
                ]}}},
            ]},
        ]},
    ]})
}

/// The projection of the document after the change: a bounded reply whatever the number of
/// holders, from which [`interpret`] derives the outcome. It only ever reads a lock document
/// as the pipeline wrote it (another application's document is never matched):
/// `exclusive` is an entry or null, `shared`, `released` and `queue` are arrays, and every
/// entry is live (the pipeline dropped the expired ones).
///
/// `{ now: $$NOW, x: <the exclusive entry or null>, m: <this lock id's shared entries (one at most)>,
///    s: <the first MAX_NAMED_HOLDERS shared entries>, n: <their number>,
///    w: <this nonce was withdrawn>, z: <the first tombstone: the seal, if the resource has one>,
///    waiting attempt: p: <this lock id's place in line, -1 if none>,
///    exclusive request: e: <the latest shared expiresAt>, f: <a shared entry without TTL>,
///    shared request: e: <the earliest shared expiresAt>, q: <a writer waits>, cap }`
pub(crate) fn projection(request: &AcquireRequest) -> Document {
    let lock_id = literal(request.lock_id.as_str());
    let mut reply = doc! {
        "now": "$$NOW",
        "x": "$exclusive",
        "m": { "$filter": { "input": "$shared", "cond": { "$eq": ["$$this.lockId", lock_id.clone()] } } },
        "s": { "$slice": ["$shared", MAX_NAMED_HOLDERS as i64] },
        "n": { "$size": "$shared" },
        "w": { "$in": [request.nonce.0, "$released.nonce"] },
        // A seal is always the first tombstone (see `command/release.rs`).
        "z": { "$first": "$released" },
    };
    // A single attempt holds no place in line.
    if request.announce.is_some() {
        reply.insert("p", bson!({ "$indexOfArray": ["$queue.lockId", lock_id] }));
    }
    match request.kind {
        // Every holder must go: the latest end, unless one has no TTL (every entry has an
        // `expiresAt`, null without TTL).
        LockKind::Exclusive => {
            reply.insert("e", bson!({ "$max": "$shared.expiresAt" }));
            reply.insert("f", bson!({ "$in": [null, "$shared.expiresAt"] }));
        }
        // The first shared lease to end frees a slot. A writer waits if a place in line is
        // for an exclusive lock: this request's own place, if any, is for a shared one.
        LockKind::Shared => {
            reply.insert("e", bson!({ "$min": "$shared.expiresAt" }));
            reply.insert("q", bson!({ "$in": ["exclusive", "$queue.kind"] }));
            reply.insert("cap", "$cap");
        }
    }
    // `_id` comes too: a projection keeps it unless it says otherwise.
    doc! { "r": reply }
}

/// Sends one attempt (see [`command`]).
pub(crate) async fn run(
    ctx: &Context,
    request: &AcquireRequest,
    after_unlocks: &[ObjectId],
) -> Result<Attempt> {
    let ttl_ms = request.validate()?;
    let command = command(ctx, request, ttl_ms, after_unlocks);
    let reply = match ctx.write_attempt(command).await {
        Err(error) if crate::command::is_not_ours(&error) => {
            let id = Bson::String(request.resource.clone());
            return Err(schema::not_a_lock_document(&id));
        }
        reply => reply?,
    };
    let attempt = interpret(request, &reply)?;
    match &attempt {
        Attempt::Granted(grant) | Attempt::AlreadyHeld(grant) => tracing::debug!(
            resource = %request.resource, lock_id = %request.lock_id, kind = %request.kind,
            token = grant.fencing_token(), new = grant.is_new(), "lock granted"
        ),
        Attempt::Contended(c) => tracing::debug!(
            resource = %request.resource, lock_id = %request.lock_id, kind = %request.kind,
            holders = c.holder_count,
            wait_ms = c.wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
            "lock contended"
        ),
        other => tracing::debug!(
            resource = %request.resource, lock_id = %request.lock_id, kind = %request.kind,
            outcome = ?other, "lock refused"
        ),
    }
    Ok(attempt)
}

/// Reads the findAndModify reply (`{value: {_id, r: <the projection>}, ...}`).
pub(crate) fn interpret(request: &AcquireRequest, reply: &Document) -> Result<Attempt> {
    let bad = |reason: &str| Error::bad_reply(Effect::Write, reason);
    let value = match reply.get("value") {
        Some(Bson::Document(value)) => value,
        // An upsert with `new: true` always returns a document.
        _ => return Err(bad("the server returned no document for an upsert")),
    };
    let id = schema::id_of(value);
    let Ok(fields) = value.get_document("r") else {
        return Err(bad("the acquire reply has no fields"));
    };
    let resource = request.resource.as_str();
    let entry = |field: &str, kind: LockKind| match fields.get(field) {
        Some(Bson::Document(entry)) => schema::decode_entry(&id, resource, kind, entry).map(Some),
        None | Some(Bson::Null) => Ok(None),
        Some(_) => Err(Error::unexpected(&id, format!("{field} is not an entry"))),
    };
    let exclusive = entry("x", LockKind::Exclusive)?;
    let mine = match &exclusive {
        Some(x) if x.lock_id == request.lock_id => Some(x.clone()),
        // This lock id's shared entries: one at most.
        _ => match fields.get("m") {
            Some(Bson::Array(found)) => match found.first() {
                Some(Bson::Document(entry)) => Some(schema::decode_entry(
                    &id,
                    resource,
                    LockKind::Shared,
                    entry,
                )?),
                None => None,
                Some(_) => return Err(Error::unexpected(&id, "m is not an entry")),
            },
            None | Some(Bson::Null) => None,
            Some(_) => return Err(Error::unexpected(&id, "m is not a list of entries")),
        },
    };
    let now = match fields.get("now") {
        Some(Bson::DateTime(now)) => Some(*now),
        _ => None,
    };
    let until = |at: Option<DateTime>| millis_from(now, at);
    // What the server's clock left of the grant when it executed this copy of the attempt.
    let remaining =
        |holder: &crate::lock::Holder| until(holder.expires_at).map(schema::millis_left);
    let operation_time = reply
        .get_timestamp("operationTime")
        .ok()
        .map(crate::clock::OperationTime::from);
    // This lock id's entry holds nothing once its lease has ended, or once its holder let
    // go of it within its minimum hold (whatever the clock reads: a clock stepped back
    // before its grant would read the hold as a lease again): within its lock-delay or hold
    // it is only in force, keeping the resource from everybody, this lock id included.
    let mine = mine.filter(|mine| {
        mine.let_go_at.is_none() && until(mine.expires_at).is_none_or(|left| left > 0)
    });
    if let Some(mine) = &mine
        && mine.nonce == Some(request.nonce.0)
    {
        return Ok(Attempt::Granted(Grant {
            holder: mine.clone(),
            new: true,
            remaining: remaining(mine),
            operation_time,
        }));
    }
    if fields.get_bool("w") == Ok(true) {
        return Ok(Attempt::Withdrawn);
    }
    if let Some(mine) = mine {
        return Ok(if mine.kind == request.kind {
            Attempt::AlreadyHeld(Grant {
                remaining: remaining(&mine),
                holder: mine,
                new: false,
                operation_time,
            })
        } else {
            Attempt::HeldWithOtherKind(mine)
        });
    }
    if let Ok(seal) = fields.get_document("z")
        && seal.get("nonce") == Some(&Bson::Null)
        && let Ok(until) = seal.get_datetime("until")
    {
        return Ok(Attempt::Sealed {
            resource: request.resource.clone(),
            until: *until,
        });
    }
    refused(request, &id, fields, exclusive, now)
}

/// Milliseconds from the server's `now` to `at`, by the server's clock.
fn millis_from(now: Option<DateTime>, at: Option<DateTime>) -> Option<i64> {
    match (at, now) {
        (Some(at), Some(now)) => Some(at.timestamp_millis().saturating_sub(now.timestamp_millis())),
        _ => None,
    }
}

/// Reads a refusal from the reply's `fields` (of the document `id`, read at the server's
/// `now`; `exclusive`, its exclusive entry): a cap that differs from the request's, or the
/// contention (who holds the resource, for how long, and the request's place in line).
fn refused(
    request: &AcquireRequest,
    id: &Bson,
    fields: &Document,
    exclusive: Option<crate::lock::Holder>,
    now: Option<DateTime>,
) -> Result<Attempt> {
    let resource = request.resource.as_str();
    let until = |at: Option<DateTime>| millis_from(now, at);
    let int = |field: &str| fields.get(field).and_then(schema::number);
    let shared_count = int("n").map_or(0, |n| u64::try_from(n).unwrap_or(0));
    if request.kind == LockKind::Shared && shared_count > 0 {
        let stored = int("cap").map(|cap| u32::try_from(cap).unwrap_or(u32::MAX));
        if stored != request.max_shared {
            return Ok(Attempt::CapMismatch {
                resource: request.resource.clone(),
                requested: request.max_shared,
                stored,
            });
        }
    }
    let shared = match fields.get("s") {
        Some(Bson::Array(items)) => items
            .iter()
            .map(|item| match item {
                Bson::Document(entry) => {
                    schema::decode_entry(id, resource, LockKind::Shared, entry)
                }
                _ => Err(Error::unexpected(id, "a holder is not a document")),
            })
            .collect::<Result<Vec<_>>>()?,
        _ => Vec::new(),
    };
    let shared_end = match fields.get("e") {
        Some(Bson::DateTime(at)) => Some(*at),
        _ => None,
    };
    let (holders, holder_count, wait_ms) = match (request.kind, exclusive) {
        // An exclusive holder blocks alone a shared request.
        (LockKind::Shared, Some(x)) => {
            let wait = until(x.in_force_until());
            (vec![x], 1, wait)
        }
        // Otherwise the cap does, and the first shared lease to end frees a slot.
        (LockKind::Shared, None) => (shared, shared_count, until(shared_end)),
        // Every holder blocks an exclusive request, and all of them must go.
        (LockKind::Exclusive, x) => {
            let forever = fields.get_bool("f") == Ok(true)
                || x.as_ref().is_some_and(|x| x.expires_at.is_none());
            let end = x.as_ref().and_then(|x| x.in_force_until()).max(shared_end);
            let count = shared_count + u64::from(x.is_some());
            let mut holders: Vec<_> = x.into_iter().chain(shared).collect();
            holders.truncate(MAX_NAMED_HOLDERS);
            (holders, count, if forever { None } else { until(end) })
        }
    };
    let wait = wait_ms.map(schema::millis_left);
    let free_at = match (now, wait_ms) {
        (Some(now), Some(ms)) => Some(DateTime::from_millis(
            now.timestamp_millis().saturating_add(ms.max(0)),
        )),
        _ => None,
    };
    Ok(Attempt::Contended(Contention {
        resource: request.resource.clone(),
        holders,
        holder_count,
        wait,
        free_at,
        writer_waiting: fields.get_bool("q") == Ok(true),
        place: int("p").and_then(|n| u64::try_from(n).ok()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{LockDetails, Nonce};
    use std::time::Duration;

    fn stage(request: &AcquireRequest) -> Document {
        let ttl = request.validate().unwrap();
        let mut pipeline = pipeline(request, ttl, &[]);
        assert_eq!(pipeline.len(), 1, "one stage");
        pipeline.remove(0)
    }

    fn text(doc: &Document) -> String {
        Bson::Document(doc.clone())
            .into_relaxed_extjson()
            .to_string()
    }

    #[test]
    fn user_values_go_in_as_literals() {
        let details = LockDetails::default().owner("$owner").host("$$host");
        let request = AcquireRequest::exclusive("$r", "$$NOW", details);
        let text = text(&stage(&request)) + &text(&projection(&request));
        assert!(text.contains(r#"{"$literal":"$$NOW"}"#), "{text}");
        assert!(text.contains(r#"{"$literal":"$owner"}"#), "{text}");
        assert!(text.contains(r#"{"$literal":"$$host"}"#), "{text}");
    }

    #[test]
    fn ttl_becomes_now_plus_millis_and_no_ttl_stays_null() {
        let with = AcquireRequest::exclusive(
            "r",
            "id",
            LockDetails::default().ttl(Duration::from_millis(1500)),
        );
        let text_with = text(&stage(&with));
        assert!(
            text_with.contains(r#""expiresAt":{"$add":["$$NOW",1500]}"#),
            "{text_with}"
        );
        assert!(text_with.contains(r#""ttlMs":1500"#), "{text_with}");
        let without = AcquireRequest::exclusive("r", "id", LockDetails::default());
        let text_without = text(&stage(&without));
        assert!(
            text_without.contains(r#""expiresAt":null"#),
            "{text_without}"
        );
    }

    #[test]
    fn fence_floor_is_server_time_in_microseconds() {
        let request = AcquireRequest::shared("r", "id", LockDetails::default(), Some(3));
        let text = text(&stage(&request));
        assert!(
            text.contains(r#"{"$multiply":[{"$toLong":"$$NOW"},1000]}"#),
            "{text}"
        );
        // The cap counts the holders and the readers waiting ahead.
        assert!(
            text.contains(r#"{"$lt":[{"$add":[{"$size":"$$s"},{"$size":"$$a"}]},3]}"#),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_command_pins_its_meaning_and_its_size_does_not_grow() {
        let ctx = crate::command::test_context();
        let request = AcquireRequest::exclusive("r", "id", LockDetails::default());
        let command = command(&ctx, &request, None, &[]);
        assert_eq!(
            command.get_document("query").unwrap(),
            &doc! { "_id": "r", "mongolock": 1 }
        );
        assert_eq!(
            command.get_document("collation").unwrap(),
            &doc! { "locale": "simple" }
        );
        assert_eq!(command.get_bool("upsert"), Ok(true));
        assert_eq!(command.get_bool("new"), Ok(true));
        let projection = text(command.get_document("fields").unwrap());
        assert!(projection.contains(r#"{"$slice":["#), "{projection}");
    }

    fn entry(lock_id: &str, token: i64, kind: &str, nonce: Option<Nonce>) -> Document {
        doc! {
            "lockId": lock_id, "nonce": nonce.map_or(Bson::Null, |n| Bson::ObjectId(n.0)),
            "owner": Bson::Null, "host": "h", "token": token,
            "createdAt": DateTime::from_millis(1), "renewedAt": DateTime::from_millis(1),
            "expiresAt": Bson::Null, "ttlMs": Bson::Null, "kind": kind,
        }
    }

    fn reply(fields: Document) -> Document {
        doc! { "ok": 1, "value": { "_id": "r", "r": fields } }
    }

    #[test]
    fn tells_this_attempt_from_an_earlier_one_and_from_the_other_kind() {
        let request = AcquireRequest::exclusive("r", "me", LockDetails::default());
        let now = reply(doc! { "x": entry("me", 9, "exclusive", Some(request.nonce)) });
        let Attempt::Granted(grant) = interpret(&request, &now).unwrap() else {
            panic!()
        };
        assert!(grant.is_new());
        assert_eq!(grant.fencing_token(), 9);

        let earlier = reply(doc! { "x": entry("me", 9, "exclusive", Some(Nonce::new())) });
        let Attempt::AlreadyHeld(grant) = interpret(&request, &earlier).unwrap() else {
            panic!()
        };
        assert!(!grant.is_new());

        let other_kind = reply(doc! { "m": [entry("me", 9, "shared", Some(Nonce::new()))] });
        let Attempt::HeldWithOtherKind(held) = interpret(&request, &other_kind).unwrap() else {
            panic!()
        };
        assert_eq!(held.kind(), LockKind::Shared);
        let error = Attempt::HeldWithOtherKind(held).into_result().unwrap_err();
        assert!(!error.is_already_locked());
        assert!(error.to_string().contains("as a shared lock"), "{error}");
    }

    #[test]
    fn a_withdrawn_nonce_is_its_own_outcome() {
        let request = AcquireRequest::exclusive("r", "me", LockDetails::default());
        let withdrawn = reply(doc! { "w": true, "s": [], "n": 0 });
        assert_eq!(interpret(&request, &withdrawn).unwrap(), Attempt::Withdrawn);
    }

    #[test]
    fn contention_carries_the_servers_wait() {
        let request = AcquireRequest::exclusive("r", "me", LockDetails::default());
        let contended = reply(doc! {
            "now": DateTime::from_millis(10_000), "x": Bson::Null, "w": false,
            "s": [entry("a", 8, "shared", None)], "n": 12,
            "e": DateTime::from_millis(12_500), "f": false,
        });
        let Attempt::Contended(c) = interpret(&request, &contended).unwrap() else {
            panic!()
        };
        assert_eq!(c.holders().len(), 1);
        assert_eq!(c.holder_count(), 12);
        assert_eq!(c.wait(), Some(Duration::from_millis(2_500)));
        assert_eq!(c.free_at(), Some(DateTime::from_millis(12_500)));
        let error = c.into_error();
        assert!(error.is_already_locked());
        assert!(
            error.to_string().contains("\"a\" (shared), 11 more"),
            "{error}"
        );

        let forever = reply(doc! {
            "now": DateTime::from_millis(1), "s": [entry("a", 8, "shared", None)], "n": 1,
            "e": DateTime::from_millis(5), "f": true,
        });
        let Attempt::Contended(c) = interpret(&request, &forever).unwrap() else {
            panic!()
        };
        assert_eq!((c.wait(), c.free_at()), (None, None));

        // A shared request is blocked by an exclusive holder alone.
        let reader = AcquireRequest::shared("r", "me", LockDetails::default(), None);
        let mut holder = entry("a", 8, "exclusive", None);
        holder.insert("expiresAt", DateTime::from_millis(10_700));
        let blocked = reply(doc! {
            "now": DateTime::from_millis(10_000), "x": holder,
            "s": [entry("b", 9, "shared", None)], "n": 1, "e": Bson::Null,
        });
        let Attempt::Contended(c) = interpret(&reader, &blocked).unwrap() else {
            panic!()
        };
        assert_eq!((c.holder_count(), c.holders()[0].lock_id()), (1, "a"));
        assert_eq!(c.wait(), Some(Duration::from_millis(700)));
    }

    /// The document of `resource`, read directly.
    async fn document_of(collection: &mongodb::Collection<Document>, resource: &str) -> Document {
        collection
            .find_one(doc! { "_id": resource })
            .await
            .unwrap()
            .expect("the resource's document")
    }

    #[tokio::test]
    async fn a_late_copy_of_a_withdrawn_writer_attempt_announces_nothing() {
        let server = mongolock_testkit::TestServer::start().await.unwrap();
        let collection = server.client().database("d").collection("locks");
        let locks = crate::LockClient::new(collection.clone());
        let _ = locks
            .slock("r", "reader", LockDetails::default(), None)
            .await
            .unwrap();
        let mut writer = AcquireRequest::exclusive("r", "writer", LockDetails::default());
        writer.announce = Some(Duration::from_secs(60));
        // What a dropped writer leaves: the withdrawal reaches the server first, the attempt
        // itself after it.
        assert!(!locks.release_attempt(&writer).await.unwrap());
        assert_eq!(locks.acquire(&writer).await.unwrap(), Attempt::Withdrawn);
        let stored = document_of(&collection, "r").await;
        assert_eq!(stored.get_array("queue").unwrap().len(), 0, "{stored}");
        // A live attempt does announce itself: the check above can see an announcement.
        let live = AcquireRequest::exclusive("r", "writer-2", LockDetails::default());
        let mut live = live;
        live.announce = Some(Duration::from_secs(60));
        assert!(matches!(
            locks.acquire(&live).await.unwrap(),
            Attempt::Contended(_)
        ));
        let stored = document_of(&collection, "r").await;
        assert_eq!(stored.get_array("queue").unwrap().len(), 1, "{stored}");
    }

    /// A waiting exclusive attempt on `r` for `lock_id` (one that joins the line).
    fn waiting_request(lock_id: &str, details: &LockDetails) -> AcquireRequest {
        let mut request = AcquireRequest::exclusive("r", lock_id, details.clone());
        request.announce = Some(Duration::from_secs(60));
        request
    }

    /// The line `stored` holds: each place's lock id and the call it names.
    fn line(stored: &Document) -> Vec<(String, Option<ObjectId>)> {
        (stored.get_array("queue").unwrap().iter())
            .map(|p| {
                let p = p.as_document().unwrap();
                let call = p.get_object_id(schema::CALL).ok();
                (p.get_str("lockId").unwrap().to_owned(), call)
            })
            .collect()
    }

    /// Issue 40: a place names its call. A late withdrawal or `leave_line` of a lock id's
    /// earlier call, landing after the lock id's next call joined the line, leaves that
    /// call's place where it stands (before, both took out every place of the lock id, and
    /// the next call joined again behind `other`). A place of the lock id that names no call
    /// (written before places named their call; or another call's: a restarted process's
    /// predecessor's) is taken over by the lock id's next attempt, its turn kept.
    #[tokio::test]
    async fn only_its_own_calls_removals_take_a_place_out() {
        let server = mongolock_testkit::TestServer::start().await.unwrap();
        let collection = server.client().database("d").collection("locks");
        let locks = crate::LockClient::new(collection.clone());
        let ctx = locks.ready().unwrap();
        let details = LockDetails::default().ttl(Duration::from_secs(30));
        let _holder = locks.xlock("r", "holder", details.clone()).await.unwrap();
        let waiting = |lock_id: &str| waiting_request(lock_id, &details);
        let contended = |attempt: Attempt| assert!(matches!(attempt, Attempt::Contended(_)));
        // The first call joins and leaves (its `leave_line` answered); the lock id's next
        // call joins, then another waiter behind it.
        let first = waiting("svc");
        contended(locks.acquire(&first).await.unwrap());
        crate::command::release::leave_line(ctx, &first)
            .await
            .unwrap();
        let next = waiting("svc");
        contended(locks.acquire(&next).await.unwrap());
        contended(locks.acquire(&waiting("other")).await.unwrap());
        let ours = ("svc".to_owned(), Some(next.call));
        let stored = document_of(&collection, "r").await;
        assert_eq!(line(&stored)[0], ours, "{stored}");
        // Late copies of the first call's `leave_line` and withdrawal: nothing moves.
        crate::command::release::leave_line(ctx, &first)
            .await
            .unwrap();
        let withdrawal = crate::command::release::Hold::Waived;
        crate::command::release::release_attempt(ctx, &first, withdrawal)
            .await
            .unwrap();
        let stored = document_of(&collection, "r").await;
        let after: Vec<String> = line(&stored).into_iter().map(|(l, _)| l).collect();
        assert_eq!(after, ["svc", "other"], "{stored}");
        assert_eq!(line(&stored)[0], ours, "{stored}");

        // A place that names no call: the lock id's next attempt takes it over, in its turn.
        collection
            .update_one(
                doc! { "_id": "r" },
                doc! { "$unset": { "queue.0.call": "" } },
            )
            .await
            .unwrap();
        let stored = document_of(&collection, "r").await;
        assert_eq!(line(&stored)[0], ("svc".to_owned(), None), "{stored}");
        // The call's next attempt: a fresh nonce, the same call.
        let mut again = next.clone();
        again.nonce = Nonce::new();
        contended(locks.acquire(&again).await.unwrap());
        let stored = document_of(&collection, "r").await;
        assert_eq!(line(&stored)[0], ours, "taken over: {stored}");
        assert_eq!(line(&stored).len(), 2, "{stored}");
        // The call's own removals take it out.
        crate::command::release::leave_line(ctx, &next)
            .await
            .unwrap();
        let stored = document_of(&collection, "r").await;
        let after: Vec<String> = line(&stored).into_iter().map(|(l, _)| l).collect();
        assert_eq!(after, ["other"], "{stored}");
    }

    /// A waiting exclusive attempt of a lock id whose lease is held from another attempt (a
    /// restarted process's) is answered "already held" and takes its place in line, so that
    /// a refused adoption keeps the call's turn; the adoption takes the place out. A repeat
    /// of a granted waiting attempt, and a waiting exclusive attempt of a lock id that holds
    /// a shared lease (an error, which ends the call), take no place.
    #[tokio::test]
    async fn an_attempt_answered_already_held_keeps_its_place_until_the_adoption() {
        let server = mongolock_testkit::TestServer::start().await.unwrap();
        let collection = server.client().database("d").collection("locks");
        let locks = crate::LockClient::new(collection.clone());
        let details = LockDetails::default().ttl(Duration::from_secs(30));
        let line = |stored: &Document| stored.get_array("queue").unwrap().len();
        let mut first = AcquireRequest::exclusive("r", "a", details.clone());
        first.announce = Some(Duration::from_secs(60));
        assert!(matches!(
            locks.acquire(&first).await.unwrap(),
            Attempt::Granted(_)
        ));
        // A repeat finds its own grant: no place.
        assert!(matches!(
            locks.acquire(&first).await.unwrap(),
            Attempt::Granted(_)
        ));
        assert_eq!(line(&document_of(&collection, "r").await), 0);
        // The restarted process's attempt: held already, and in line.
        let again = first.clone().nonce(crate::request::Nonce::new());
        let Attempt::AlreadyHeld(grant) = locks.acquire(&again).await.unwrap() else {
            panic!("answered with the lease held")
        };
        let stored = document_of(&collection, "r").await;
        assert_eq!(line(&stored), 1, "{stored}");
        // Its next attempt keeps that place (one place, not two).
        let third = first.clone().nonce(crate::request::Nonce::new());
        assert!(matches!(
            locks.acquire(&third).await.unwrap(),
            Attempt::AlreadyHeld(_)
        ));
        assert_eq!(line(&document_of(&collection, "r").await), 1);
        // The adoption by the call that holds the place now (the last one answered
        // "already held", which took it over) takes it out.
        let ctx = locks.ready().unwrap();
        let adopted =
            crate::command::keepalive::adopt(ctx, &grant, "k2", &details, &[], third.call);
        assert!(adopted.await.unwrap());
        let stored = document_of(&collection, "r").await;
        assert_eq!(line(&stored), 0, "{stored}");

        // A lock id holding a shared lease is answered with an error, out of the line.
        let _reader = locks.slock("s", "b", details.clone(), None).await.unwrap();
        let mut writer = AcquireRequest::exclusive("s", "b", details);
        writer.announce = Some(Duration::from_secs(60));
        assert!(matches!(
            locks.acquire(&writer).await.unwrap(),
            Attempt::HeldWithOtherKind(_)
        ));
        let stored = document_of(&collection, "s").await;
        assert_eq!(line(&stored), 0, "{stored}");
    }

    /// Issue 40: an adoption takes out its own call's place in line, and a place of its
    /// lock id that names no call, and no other place. A late copy of an ended call's
    /// adoption, landing while the lease is still live and the lock id's next call stands
    /// in line (answered "already held" too, its own adoption not landed yet), leaves that
    /// call's place where it is: should the next call's adoption be refused (the lease
    /// ended meanwhile), it waits in its turn. Before, an adoption took every place of its
    /// lock id out, and the next call joined again behind `other`.
    #[tokio::test]
    async fn an_adoption_takes_out_its_own_calls_place_and_no_other_calls() {
        let server = mongolock_testkit::TestServer::start().await.unwrap();
        let collection = server.client().database("d").collection("locks");
        let locks = crate::LockClient::new(collection.clone());
        let ctx = locks.ready().unwrap();
        let details = LockDetails::default().ttl(Duration::from_secs(30));
        // The lease of `svc`, whose process died.
        let _held = locks.xlock("r", "svc", details.clone()).await.unwrap();
        let waiting = |lock_id: &str| waiting_request(lock_id, &details);
        let held = |attempt: Attempt| match attempt {
            Attempt::AlreadyHeld(grant) => grant,
            other => panic!("answered with the lease held, not {other:?}"),
        };
        // The restarted process's first call is answered "already held" and ends without
        // its adoption (its `leave_line` answered); the lock id's next call is answered so
        // too, and stands in line, `other` behind it.
        let first = waiting("svc");
        let grant = held(locks.acquire(&first).await.unwrap());
        crate::command::release::leave_line(ctx, &first)
            .await
            .unwrap();
        let next = waiting("svc");
        let token = held(locks.acquire(&next).await.unwrap()).fencing_token();
        assert_eq!(token, grant.fencing_token());
        let other = waiting("other");
        assert!(matches!(
            locks.acquire(&other).await.unwrap(),
            Attempt::Contended(_)
        ));
        let ours = ("svc".to_owned(), Some(next.call));
        let theirs = ("other".to_owned(), Some(other.call));
        let stored = document_of(&collection, "r").await;
        assert_eq!(line(&stored), [ours.clone(), theirs.clone()], "{stored}");
        // A late copy of the first call's adoption: the lease is live, so it is adopted,
        // and the next call's place stays where it is.
        let adopt = |grant: &Grant, keeper: &'static str, call: ObjectId| {
            let (grant, details) = (grant.clone(), details.clone());
            async move {
                crate::command::keepalive::adopt(ctx, &grant, keeper, &details, &[], call).await
            }
        };
        assert!(
            adopt(&grant, "k1", first.call).await.unwrap(),
            "the lease is live"
        );
        let stored = document_of(&collection, "r").await;
        assert_eq!(
            line(&stored),
            [ours.clone(), theirs.clone()],
            "the late adoption took the next call's place: {stored}"
        );
        // The next call's adoption, of the entry as its attempt was answered (naming no
        // keeper), finds it renamed since (`keepalive::adopted_keepers`) and is refused: its
        // place stays. Asked again, the call is answered with the entry naming k1, and its
        // adoption of that takes its place out.
        assert!(!adopt(&grant, "k2", next.call).await.unwrap());
        let stored = document_of(&collection, "r").await;
        assert_eq!(line(&stored), [ours.clone(), theirs.clone()], "{stored}");
        let again = held(locks.acquire(&next).await.unwrap());
        assert_eq!(again.holder.keeper.as_deref(), Some("k1"));
        assert!(adopt(&again, "k2", next.call).await.unwrap());
        let stored = document_of(&collection, "r").await;
        assert_eq!(line(&stored), std::slice::from_ref(&theirs), "{stored}");
        // A place of the lock id that names no call (written before places named their
        // call) goes with an adoption of the lock id too, and the other lock id's stays.
        let until = DateTime::from_millis(DateTime::now().timestamp_millis() + 60_000);
        let unnamed = doc! { "lockId": "svc", "kind": "exclusive", "until": until };
        let mut queue = stored.get_array("queue").unwrap().clone();
        queue.insert(0, Bson::Document(unnamed));
        collection
            .update_one(doc! { "_id": "r" }, doc! { "$set": { "queue": queue } })
            .await
            .unwrap();
        let stored = document_of(&collection, "r").await;
        assert_eq!(line(&stored)[0], ("svc".to_owned(), None), "{stored}");
        // (Answered with the entry as it is now: naming k2.)
        let mut now_held = again.clone();
        now_held.holder.keeper = Some("k2".to_owned());
        assert!(adopt(&now_held, "k3", ObjectId::new()).await.unwrap());
        let stored = document_of(&collection, "r").await;
        assert_eq!(line(&stored), [theirs], "{stored}");
    }

    /// An adoption takes over the lease only as its attempt was answered with it (the entry
    /// naming the keeper the "already held" reply showed, or none), or as it left it
    /// already (naming its own keeper: a copy sent again), never an entry another process
    /// adopted since: a late copy of a dead process's adoption, landing after its lock id's
    /// live successor adopted the lease, would rename it to the dead keeper, and the
    /// successor's release would find nothing (issue 40). Exclusive and shared entries, one
    /// naming a keeper (a guard's) and one naming none (a low-level call's).
    #[tokio::test]
    async fn an_adoption_takes_the_entry_as_it_was_answered_or_as_it_left_it_only() {
        let server = mongolock_testkit::TestServer::start().await.unwrap();
        let collection = server.client().database("d").collection("locks");
        let locks = crate::LockClient::new(collection.clone());
        let ctx = locks.ready().unwrap();
        let details = LockDetails::default().ttl(Duration::from_secs(30));
        let adopt = |grant: &Grant, keeper: &'static str| {
            let (grant, details) = (grant.clone(), details.clone());
            async move {
                crate::command::keepalive::adopt(
                    ctx,
                    &grant,
                    keeper,
                    &details,
                    &[],
                    ObjectId::new(),
                )
                .await
                .unwrap()
            }
        };
        for kind in [LockKind::Exclusive, LockKind::Shared] {
            for first_keeper in [Some("k1"), None] {
                let resource = format!("r-{kind}-{first_keeper:?}");
                let request = || match kind {
                    LockKind::Exclusive => {
                        AcquireRequest::exclusive(&resource, "svc", details.clone())
                    }
                    LockKind::Shared => {
                        AcquireRequest::shared(&resource, "svc", details.clone(), None)
                    }
                };
                // The lease, granted to a process that died.
                let mut first = request();
                first.keeper = first_keeper.map(str::to_owned);
                assert!(matches!(
                    locks.acquire(&first).await.unwrap(),
                    Attempt::Granted(_)
                ));
                // Two restarted processes' attempts answered "already held" with it.
                let answered = match locks.acquire(&request()).await.unwrap() {
                    Attempt::AlreadyHeld(grant) => grant,
                    other => panic!("answered with the lease held, not {other:?}"),
                };
                assert_eq!(answered.holder.keeper.as_deref(), first_keeper);
                let keeper_of = |stored: &Document| -> Option<String> {
                    let entry = match kind {
                        LockKind::Exclusive => stored.get_document("exclusive").unwrap(),
                        LockKind::Shared => (stored.get_array("shared").unwrap()[0])
                            .as_document()
                            .unwrap(),
                    };
                    entry.get_str(schema::KEEPER).ok().map(str::to_owned)
                };
                // The live successor adopts it; the dead one's late adoption then matches
                // nothing; the successor's adoption sent again still matches.
                assert!(adopt(&answered, "k3").await, "{resource}: the successor");
                assert!(!adopt(&answered, "k2").await, "{resource}: the late copy");
                let stored = document_of(&collection, &resource).await;
                assert_eq!(keeper_of(&stored).as_deref(), Some("k3"), "{stored}");
                assert!(adopt(&answered, "k3").await, "{resource}: sent again");
            }
        }
    }

    /// A request that only waits for its turn is never granted, even on a free resource
    /// whose document it seeds: it takes its place in line (a seeded document is free from
    /// then, `idleSince`), which keeps others' attempts out, and the same lock id's next
    /// attempt is granted and takes the place out of the line.
    #[tokio::test]
    async fn a_turn_is_waited_for_and_never_granted() {
        let server = mongolock_testkit::TestServer::start().await.unwrap();
        let collection = server.client().database("d").collection("locks");
        let locks = crate::LockClient::new(collection.clone());
        let ttl = LockDetails::default().ttl(Duration::from_secs(30));
        let mut turn = AcquireRequest::exclusive("r", "set", ttl.clone());
        turn.announce = Some(Duration::from_secs(60));
        turn.turn_only = true;
        let Attempt::Contended(contention) = locks.acquire(&turn).await.unwrap() else {
            panic!("a turn-only attempt was granted")
        };
        assert_eq!(contention.place_in_line(), Some(0));
        assert_eq!(contention.holder_count(), 0);
        let stored = document_of(&collection, "r").await;
        assert_eq!(stored.get_array("queue").unwrap().len(), 1, "{stored}");
        assert!(stored.get_datetime("idleSince").is_ok(), "{stored}");
        // Again: still its turn, still not granted.
        let again = turn.clone().nonce(crate::request::Nonce::new());
        assert!(matches!(
            locks.acquire(&again).await.unwrap(),
            Attempt::Contended(_)
        ));
        // Another lock id's single attempt is refused: the turn is kept.
        let other = AcquireRequest::exclusive("r", "other", ttl.clone());
        assert!(matches!(
            locks.acquire(&other).await.unwrap(),
            Attempt::Contended(_)
        ));
        // The set's own attempt is granted, and its place leaves the line.
        let take = AcquireRequest::exclusive("r", "set", ttl);
        assert!(matches!(
            locks.acquire(&take).await.unwrap(),
            Attempt::Granted(_)
        ));
        let stored = document_of(&collection, "r").await;
        assert_eq!(stored.get_array("queue").unwrap().len(), 0, "{stored}");
    }
}
