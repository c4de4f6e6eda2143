//! Keepalive: renew the leases one lease keeper (one `LockClient`'s background task) still
//! tracks, and no other entry, in one command whatever their number. Each lease is named by
//! its resource, lock id and fencing token, and renewed by its own TTL:
//!
//! ```text
//! update: <collection>, ordered: false, updates: [                  // one per lease
//!   { q: { _id: <resource>, mongolock: 1,
//!          "exclusive.lockId": <id>, "exclusive.token": <token>,
//!          "exclusive.keeper": <this keeper>,       // adopted by another: not ours to renew
//!          $expr: { $gt: ["$exclusive.expiresAt", "$$NOW"] } },     // live: never revived
//!     u: [ { $set: { exclusive: <the entry, expiresAt = $$NOW + the grant's TTL> } },
//!          // with a lock-delay d: $$NOW + d in the $expr, $$NOW + TTL + d here
//!          { $set: { idleSince: <at least the entry's new expiresAt, if not null> } } ] },
//!   { q: { _id: <resource>, mongolock: 1,
//!          shared: { $elemMatch: { lockId: <id>, token: <token>, keeper: <this keeper> } },
//!          $expr: <that shared entry is live> },
//!     u: [ { $set: { shared: <that entry renewed, the others as they are> } },
//!          { $set: { idleSince: <at least its new expiresAt, if not null> } } ] },
//!   ... ], writeConcern, maxTimeMS
//! ```
//!
//! A statement matches one document at most (by `_id`), and only while that very lease is
//! live there, so the reply's `n` is the number of leases renewed: when it equals the number
//! of statements, every lease was confirmed by the server. An entry the keeper no longer
//! tracks (its guard was dropped, its release failed) is never named, so it is never renewed
//! and ends with its TTL at the latest.
//!
//! When `n` is short, or the command failed, one read asks which of the keeper's entries are
//! live and how long each has left, computed by the server ([`live_leases`]); a lease missing
//! from it was revoked:
//!
//! ```text
//! aggregate: <collection>, readConcern: majority, pipeline: [
//!   { $match: { $or: [{ "exclusive.keeper": <k> }, { "shared.keeper": <k> }],   // by index
//!               mongolock: 1 } },                                         // the mark
//!   { $project: entries }, { $unwind },
//!   { $match: <entry of <k>, live> },
//!   { $project: { resource, lockId, token, remainingMs: expiresAt - $$NOW } } ]
//! ```
//!
//! The command grows with the leases: about 660 bytes each for an exclusive lease and 1,030
//! for a shared one, with 32-character names. Up to [`MAX_COMMAND_BYTES`](crate::command::MAX_COMMAND_BYTES) (half of the
//! 16 MiB limit of a command: about 14,000 exclusive or 8,000 shared leases) it is one
//! command; beyond, the statements are split over as few commands as keep each under it.

use std::time::Duration;

use bson::oid::ObjectId;
use bson::{Bson, Document, bson, doc};

use crate::command::expr::{self, literal};
use crate::command::{Context, batched, send_batched};
use crate::error::{Error, Result};
use crate::lock::{Grant, LockKind};
use crate::request::LockDetails;
use crate::schema::{self, FORMAT, LET_GO_AT, MARK};

/// `{ $or: [{ "exclusive.keeper": k }, { "shared.keeper": k }] }`: the documents where the
/// keeper has an entry, found by index.
fn kept_by(keeper: &str) -> Document {
    doc! { "$or": [{ "exclusive.keeper": keeper }, { "shared.keeper": keeper }] }
}

/// `entry` (a path) renewed from `$$NOW` by the TTL its lease was granted with, its
/// lock-delay (`delay_ms`, the grant's) added: the entry stays in force that long after its
/// lease (see `crate::schema`). The TTL is the grant's, not the one stored now: the holder's
/// local deadline counts by the grant's, whatever another call wrote since.
fn renewed(entry: &str, grant: &Grant, delay_ms: Option<i64>) -> Bson {
    let ttl = match grant.holder.ttl {
        Some(ttl) => expr::int(crate::clock::saturating_millis(ttl)),
        None => bson!(format!("{entry}.ttlMs")),
    };
    let mut end = vec![bson!("$$NOW"), ttl];
    end.extend(delay_ms.map(expr::int));
    bson!({ "$mergeObjects": [entry, {
        "renewedAt": "$$NOW",
        "expiresAt": { "$add": end },
    }]})
}

/// `$$NOW`, or for a lease with a lock-delay `$$NOW` plus the delay: an entry's lease is
/// live while its `expiresAt` is after it.
fn lease_now(delay_ms: Option<i64>) -> Bson {
    match delay_ms {
        None => bson!("$$NOW"),
        Some(ms) => bson!({ "$add": ["$$NOW", expr::int(ms)] }),
    }
}

/// The second stage of a renewal: `idleSince` after the entries were renewed. Null stays
/// null (an entry without TTL holds the document); otherwise the later of itself and
/// `renewed_expiry`, the renewed entry's new expiry read from the first stage's output.
fn idle_since(renewed_expiry: Bson) -> Document {
    doc! { "$set": { "idleSince": { "$cond": [
        { "$eq": [{ "$ifNull": ["$idleSince", null] }, null] },
        null,
        { "$max": ["$idleSince", renewed_expiry] },
    ]}}}
}

/// The query that finds one lease's entry while its holder holds it: by resource, lock id,
/// token and the keeper it names (`keeper`: a keeper's id, or an `$in` of the keepers an
/// adoption may find, see [`adopted_keepers`]); never a marked entry (`letGoAt`, see
/// `expr::was_let_go`), which holds nothing, whatever its `expiresAt` and the clock
/// read: neither renewed nor adopted. Its holder let go of it within its minimum hold (a
/// late release of a dead holder landing between its restarted process's attempt and its
/// adoption), or a force release broke its lease and keeps it for its lock-delay (a step
/// back of the server's clock by more than the delay would read it as live again, and its
/// revoked holder would never be told).
fn lease_query(grant: &Grant, keeper: Bson) -> Document {
    let (resource, lock_id, token) = (grant.resource(), grant.lock_id(), grant.fencing_token());
    let now = lease_now(delay_millis(grant));
    match grant.kind() {
        LockKind::Exclusive => {
            let mut query = doc! {
                "_id": resource, MARK: FORMAT,
                "exclusive.lockId": lock_id, "exclusive.token": token,
            };
            query.insert("exclusive.keeper", keeper);
            query.insert(format!("exclusive.{LET_GO_AT}"), doc! { "$exists": false });
            query.insert("$expr", bson!({ "$gt": ["$exclusive.expiresAt", now] }));
            query
        }
        LockKind::Shared => {
            // Within a document a token names one entry (every grant takes `fence + 1`), and
            // the query's `$elemMatch` finds it holding this lock id.
            let mut entry = doc! { "lockId": lock_id, "token": token };
            entry.insert(schema::KEEPER, keeper);
            entry.insert(LET_GO_AT, doc! { "$exists": false });
            doc! {
                "_id": resource, MARK: FORMAT,
                "shared": { "$elemMatch": entry },
                "$expr": { "$anyElementTrue": [{ "$map": {
                    "input": "$shared", "as": "e",
                    "in": { "$and": [this_token("$$e", token), { "$gt": ["$$e.expiresAt", now] }] },
                }}]},
            }
        }
    }
}

/// An expression: is the entry at `entry` the one of `token`?
fn this_token(entry: &str, token: i64) -> Bson {
    bson!({ "$eq": [format!("{entry}.token"), token] })
}

/// The grant's lock-delay in milliseconds, if any: only such a lease's statements pay for it.
fn delay_millis(grant: &Grant) -> Option<i64> {
    (grant.holder.lock_delay).map(crate::clock::saturating_millis)
}

/// The statement that renews one lease of `keeper`, matching only while it is live and
/// names `keeper`: a lease another keeper adopted (see [`adopt_command`]) is no longer this
/// keeper's to renew, so its renewal comes up short and the keeper's read reports it lost.
/// Two stages: the entry renewed, then `idleSince` moved to its new expiry.
fn statement(grant: &Grant, keeper: &str) -> Document {
    let token = grant.fencing_token();
    let delay_ms = delay_millis(grant);
    let update = match grant.kind() {
        LockKind::Exclusive => vec![
            doc! { "$set": { "exclusive": renewed("$exclusive", grant, delay_ms) } },
            idle_since(bson!("$exclusive.expiresAt")),
        ],
        LockKind::Shared => vec![
            doc! { "$set": { "shared": { "$map": {
                "input": "$shared", "as": "e",
                "in": { "$cond": [this_token("$$e", token), renewed("$$e", grant, delay_ms), "$$e"] },
            }}}},
            // The renewed entry is the one renewed at `$$NOW`: the others of the document
            // were renewed earlier.
            idle_since(bson!({ "$max": { "$map": {
                "input": "$shared", "as": "e",
                "in": { "$cond": [{ "$eq": ["$$e.renewedAt", "$$NOW"] }, "$$e.expiresAt", null] },
            }}})),
        ],
    };
    doc! {
        "q": lease_query(grant, Bson::from(keeper)),
        "u": update,
        "collation": Context::collation(),
    }
}

/// The command(s) that renew exactly `leases` of `keeper`: one, unless its statements pass
/// [`MAX_COMMAND_BYTES`](crate::command::MAX_COMMAND_BYTES).
pub(crate) fn commands<'a>(
    ctx: &Context,
    keeper: &str,
    leases: impl IntoIterator<Item = &'a Grant>,
) -> Vec<Document> {
    batched(
        ctx,
        leases.into_iter().map(|grant| statement(grant, keeper)),
    )
}

/// Renews `leases` of `keeper` within `limit`; returns how many the server renewed (each at
/// most once). Beyond [`MAX_COMMAND_BYTES`](crate::command::MAX_COMMAND_BYTES) of
/// statements, the commands are sent one after the other, and the first that fails fails the
/// renewal.
pub(crate) async fn renew(
    ctx: &Context,
    keeper: &str,
    leases: &[&Grant],
    limit: Duration,
) -> Result<u64> {
    send_batched(ctx, commands(ctx, keeper, leases.iter().copied()), limit).await
}

/// The command that makes `keeper` the keeper of a lease granted to another (a process
/// that held the same lock id and restarted): one `update` whose query is the lease's while
/// its holder holds it, naming the keeper the waiting attempt's "already held" reply showed
/// (`grant`'s) or `keeper` (see [`adopted_keepers`]), and whose stage names `keeper` in its
/// entry, with the owner and host of the process that resumes it (`details`'), so that
/// status and an election's leader show who holds it now. From then on only `keeper`
/// renews it, and the keeper named before finds it gone.
///
/// The adopting call's place in the resource's line goes in the same update: the waiting
/// attempt answered "already held" kept it (named by `call`, the call's first attempt's
/// nonce), so that a refused adoption keeps the call's turn (see `command/acquire.rs`), and
/// a lease held keeps no place. So does a place of the lock id that names no call (written
/// before places named their call), which the lock id's attempt would have taken over. A
/// place of the lock id that names another call stays: it is that call's, and an adoption
/// that lands late (a copy held on the wire, or sent again, after its call ended) may find
/// the lease still live while the lock id's next call waits in line, answered "already
/// held" too; should that call's own adoption be refused (the lease ended meanwhile), it
/// waits in its turn (issue 40). The price: a place that a late attempt copy of an ended
/// call renamed to that call (a dead process's attempt, whose withdrawal never came,
/// landing between this call's attempt and its adoption) stays too, and keeps the waiters
/// behind it out until it lapses (its `until`, a life at most: twice the TTL), as a dead
/// waiter's place does.
///
/// ```text
/// update: <collection>, updates: [{ q: <the lease, live, naming the keeper the reply
///                                        showed or this one: { $in: [<k>, <this>] }>,
///   u: [ { $set: { exclusive: <the entry, keeper, owner, host = this process's>,
///                                                           // or that shared entry
///                  queue: <the line without the call's place, nor a place of the
///                          lock id that names no call> } } ] }]
/// ```
pub(crate) fn adopt_command(
    ctx: &Context,
    grant: &Grant,
    keeper: &str,
    details: &LockDetails,
    after_unlocks: &[ObjectId],
    call: ObjectId,
) -> Document {
    let token = grant.fencing_token();
    let owner = details.owner_value().map_or(Bson::Null, literal);
    let host = literal(details.host_value());
    let adopted = |entry: &str| {
        let mut fields = doc! {
            schema::KEEPER: literal(keeper), "owner": owner.clone(), "host": host.clone(),
            schema::ADOPTED: true,
        };
        // The unlocks of the lock id that may still land leave the resumed lease.
        if !after_unlocks.is_empty() {
            fields.insert(
                schema::AFTER_UNLOCKS,
                expr::also_naming(entry, after_unlocks),
            );
        }
        bson!({ "$mergeObjects": [entry, fields] })
    };
    let mut update = match grant.kind() {
        LockKind::Exclusive => doc! { "exclusive": adopted("$exclusive") },
        LockKind::Shared => doc! { "shared": { "$map": {
            "input": "$shared", "as": "e",
            "in": { "$cond": [this_token("$$e", token), adopted("$$e"), "$$e"] },
        }}},
    };
    // The call holds the resource: it is not waiting. Its attempt answered "already held"
    // kept (or took) its place in line, named by the call, and took over a place of the
    // lock id that named no call (see `command/acquire.rs`), so that a refused adoption
    // keeps the call's turn; an adopted lease leaves no place behind, which would keep the
    // next waiters out after it releases. A place goes if it names this call, or names
    // none and is the lock id's (its call, or where it has none its lock id, is one of
    // the two: a call is an ObjectId, a lock id a string, so neither matches the other). A
    // place of another call of the lock id is that call's: a late copy of an ended call's
    // adoption must not take it.
    let call = Bson::ObjectId(call);
    update.insert(
        "queue",
        bson!({ "$filter": {
            "input": { "$ifNull": ["$queue", []] },
            "cond": { "$not": { "$in": [
                { "$ifNull": [format!("$$this.{}", schema::CALL), "$$this.lockId"] },
                [call, literal(grant.lock_id())],
            ]}},
        }}),
    );
    let update = doc! { "$set": update };
    doc! {
        "update": ctx.collection_name(),
        "updates": [{
            "q": lease_query(grant, adopted_keepers(grant, keeper)),
            "u": [update],
            "collation": Context::collation(),
        }],
    }
}

/// The keepers an adoption by `keeper` of `grant` (as its waiting attempt was answered
/// "already held" with it) may find the entry naming: the keeper the reply showed (null
/// for an entry that names none, written by a low-level call: an `$in` holding null
/// matches a missing field, mongod's `InMatchExpression::matchesSingleElement`,
/// `src/mongo/db/matcher/expression_leaf.cpp`, also within `$elemMatch`), or `keeper`
/// itself, so that a copy of an adoption that landed already (a retry) still matches;
/// nothing else. An entry another process's adoption renamed
/// since the reply is no longer the one the attempt was answered with: a late copy of a
/// dead process's adoption, landing after the lock id's live successor adopted the lease,
/// would otherwise rename it to the dead keeper, and the successor's release and renewals
/// would find nothing (issue 40). Should the successor's own adoption be the one to find
/// the entry renamed (the dead process's adoption landing first), it is refused, and the
/// call's next attempt is answered with the entry as it is then.
fn adopted_keepers(grant: &Grant, keeper: &str) -> Bson {
    let answered = grant
        .holder
        .keeper
        .as_deref()
        .map_or(Bson::Null, Bson::from);
    // Always both, the same one twice when the reply showed this keeper (the retry of an
    // adoption that landed): one shape of the command.
    bson!({ "$in": [answered, keeper] })
}

/// Makes `keeper` the keeper of the lease `grant`, under `details`' owner and host, for the
/// waiting call `call`, whose place in line goes (see [`adopt_command`]); false if its
/// holder no longer holds it.
pub(crate) async fn adopt(
    ctx: &Context,
    grant: &Grant,
    keeper: &str,
    details: &LockDetails,
    after_unlocks: &[ObjectId],
    call: ObjectId,
) -> Result<bool> {
    let reply = ctx
        .write(
            adopt_command(ctx, grant, keeper, details, after_unlocks, call),
            crate::command::Upsert::No,
        )
        .await?;
    Ok(crate::command::count(&reply, "n") == 1)
}

/// The aggregation listing the live entries of `keeper` as `{resource, lockId, token,
/// remainingMs}`.
pub(crate) fn live_leases(keeper: &str) -> Vec<Document> {
    vec![
        doc! { "$match": { "$and": [kept_by(keeper), { MARK: FORMAT }] } },
        doc! { "$project": { "e": expr::all_entries() } },
        doc! { "$unwind": "$e" },
        doc! { "$match": { "$expr": { "$and": [
            { "$eq": ["$e.keeper", literal(keeper)] },
            expr::holds("$e"),
        ]}}},
        doc! { "$project": {
            "_id": 0, "resource": "$_id", "lockId": "$e.lockId", "token": "$e.token",
            // The lease's end: its lock-delay, if any, before `expiresAt`.
            "remainingMs": { "$subtract": [
                "$e.expiresAt",
                { "$add": ["$$NOW", { "$ifNull": [format!("$e.{}", schema::DELAY_MS), 0] }] },
            ]},
        }},
    ]
}

/// One live entry of a keeper, as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LiveEntry {
    pub(crate) resource: String,
    pub(crate) lock_id: String,
    pub(crate) token: i64,
}

/// The live entries of `keeper`, each with how long it has left (none for an entry without
/// TTL).
pub(crate) async fn live(
    ctx: &Context,
    keeper: &str,
    limit: Duration,
) -> Result<Vec<(LiveEntry, Option<Duration>)>> {
    let rows = ctx.aggregate_within(live_leases(keeper), limit).await?;
    rows.iter()
        .map(|row| {
            let token = row.get("token").and_then(schema::number);
            match (row.get_str("resource"), row.get_str("lockId"), token) {
                (Ok(resource), Ok(lock_id), Some(token)) => {
                    let left = row
                        .get("remainingMs")
                        .and_then(schema::number)
                        .map(schema::millis_left);
                    let entry = LiveEntry {
                        resource: resource.to_owned(),
                        lock_id: lock_id.to_owned(),
                        token,
                    };
                    Ok((entry, left))
                }
                _ => Err(Error::unexpected(
                    &row.get("resource").cloned().unwrap_or(Bson::Null),
                    "a lease entry without a resource, lock id or token",
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::MAX_COMMAND_BYTES;
    use crate::lock::Holder;
    use bson::DateTime;

    fn grant(resource: &str, kind: LockKind, token: i64) -> Grant {
        Grant {
            holder: Holder {
                resource: resource.into(),
                lock_id: format!("{:032x}", token),
                kind,
                owner: None,
                host: None,
                token,
                nonce: None,
                created_at: DateTime::from_millis(0),
                renewed_at: DateTime::from_millis(0),
                expires_at: None,
                ttl: None,
                lock_delay: None,
                min_hold: None,
                let_go_at: None,
                keeper: None,
            },
            new: true,
            remaining: None,
            operation_time: None,
        }
    }

    #[tokio::test]
    async fn one_statement_per_lease_each_naming_its_grant() {
        let ctx = crate::command::test_context();
        let leases = [
            grant("a", LockKind::Exclusive, 7),
            grant("$b", LockKind::Shared, 8),
        ];
        let commands = commands(&ctx, "k", &leases);
        assert_eq!(commands.len(), 1, "one command");
        let command = &commands[0];
        assert_eq!(command.get_bool("ordered"), Ok(false));
        let updates = command.get_array("updates").unwrap();
        assert_eq!(updates.len(), 2);
        let text = Bson::Document(command.clone())
            .into_relaxed_extjson()
            .to_string();
        assert!(
            text.contains(r#""_id":"a","mongolock":1,"exclusive.lockId":"00000000000000000000000000000007","exclusive.token":7"#),
            "{text}"
        );
        assert!(
            text.contains(r#"{"$gt":["$exclusive.expiresAt","$$NOW"]}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""_id":"$b","mongolock":1,"shared":{"$elemMatch""#),
            "{text}"
        );
        assert!(!text.contains(r#""multi":true"#), "{text}");
    }

    #[tokio::test]
    async fn the_command_grows_by_a_bounded_size_per_lease() {
        let ctx = crate::command::test_context();
        let size = |n: i64, kind: LockKind| {
            let leases: Vec<Grant> = (0..n)
                .map(|i| grant(&format!("{i:032}"), kind, i))
                .collect();
            let commands = commands(&ctx, "k", &leases);
            assert_eq!(commands.len(), 1, "one command for {n} leases");
            bson::to_vec(&commands[0]).unwrap().len()
        };
        let per_lease = |kind| (size(101, kind) - size(1, kind)) / 100;
        let exclusive = per_lease(LockKind::Exclusive);
        assert!(exclusive < 680, "{exclusive} bytes an exclusive lease");
        let shared = per_lease(LockKind::Shared);
        assert!(shared < 1_150, "{shared} bytes a shared lease");
        assert!(size(10_000, LockKind::Exclusive) < MAX_COMMAND_BYTES);
    }

    #[tokio::test]
    async fn past_half_the_command_limit_the_leases_are_split_and_none_is_left_out() {
        let ctx = crate::command::test_context();
        let leases: Vec<Grant> = (0..10_000)
            .map(|i| grant(&format!("{i:032}"), LockKind::Shared, i))
            .collect();
        let commands = commands(&ctx, "k", &leases);
        assert!(commands.len() >= 2, "10,000 shared leases pass 8 MiB");
        let mut named = Vec::new();
        for command in &commands {
            assert!(bson::to_vec(command).unwrap().len() <= MAX_COMMAND_BYTES + 1024);
            for update in command.get_array("updates").unwrap() {
                let q = update.as_document().unwrap().get_document("q").unwrap();
                named.push(q.get_str("_id").unwrap().to_owned());
            }
        }
        let expected: Vec<String> = leases.iter().map(|g| g.resource().to_owned()).collect();
        assert_eq!(named, expected, "every lease once, in order");
    }
}
