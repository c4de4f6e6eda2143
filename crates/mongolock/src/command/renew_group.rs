//! Renew: extend every live lock of a lock id, by the server's clock. One round trip:
//!
//! ```text
//! update: <collection>, updates: [{
//!   q: { $or: [{ "exclusive.lockId": <id> }, { "shared.lockId": <id> }],   // by index
//!        mongolock: 1, $expr: <a live entry of <id>> },
//!   u: [ { $replaceWith: <the document, each live entry of <id> renewed> } ],  // no 2nd check
//!   multi: true, collation: { locale: "simple" } }], writeConcern, maxTimeMS
//! ```
//!
//! A renewed entry gets `renewedAt = $$NOW`, `expiresAt = $$NOW + ttl` (plus its lock-delay,
//! if it has one) and `ttlMs = ttl`, except an entry a lease keeper renews (a handle's
//! lease: it names its keeper): its holder keeps a local deadline from the TTL it was granted
//! with, and its keeper renews it by that TTL, so a renewal here never shortens it: its
//! `expiresAt` becomes the later of its own and `$$NOW + ttl` (plus its delay), and its
//! `ttlMs` stays. An
//! entry without TTL keeps none (it is held, so it counts as renewed). An expired entry is
//! never revived: its holder lost it, and must acquire again and get a new token. The reply's
//! `n` (documents matched) is the number of locks renewed, since the query matches exactly
//! the documents where the lock id has a live entry, and a lock id has at most one entry per
//! resource. The command's size does not depend on the number of locks.

use std::time::Duration;

use bson::{Bson, Document, bson, doc};

use crate::command::expr::{self, held_by, is_of};
use crate::command::{Context, Upsert, count};
use crate::error::Result;
use crate::request::{check_id, ttl_millis};

/// The command that renews every live lock of `lock_id` for `ttl_ms`.
pub(crate) fn command(ctx: &Context, lock_id: &str, ttl_ms: i64) -> Document {
    // Held: an entry whose lease ended is never renewed, within its lock-delay or not.
    let live_of_id = |entry: &str| bson!({ "$and": [is_of(entry, lock_id), expr::holds(entry)] });
    let renewed = |entry: &str| {
        let has_ttl = bson!({ "$eq": [{ "$type": format!("{entry}.expiresAt") }, "date"] });
        // An entry with a lock-delay stays in force that long after its lease.
        let delay = bson!({ "$ifNull": [format!("{entry}.{}", crate::schema::DELAY_MS), 0] });
        let kept =
            bson!({ "$eq": [{ "$type": format!("{entry}.{}", crate::schema::KEEPER) }, "string"] });
        bson!({ "$let": {
            "vars": { "end": { "$add": ["$$NOW", ttl_ms, delay] }, "kept": kept, "t": has_ttl },
            "in": { "$mergeObjects": [entry, {
                "renewedAt": "$$NOW",
                "expiresAt": { "$cond": [
                    "$$t",
                    { "$cond": ["$$kept", { "$max": [format!("{entry}.expiresAt"), "$$end"] }, "$$end"] },
                    null,
                ]},
                "ttlMs": { "$cond": ["$$t", { "$cond": ["$$kept", format!("{entry}.ttlMs"), ttl_ms] }, null] },
            }]},
        }})
    };
    doc! {
        "update": ctx.collection_name(),
        "updates": [statement(held_by(lock_id), live_of_id, renewed)],
    }
}

/// One `update` statement that rewrites, in every document `query` finds (by index), each
/// entry for which `selects` is true as `renewed` says; a document with no such entry is not
/// matched, so the reply's `n` counts the documents renewed. Both closures take an entry's
/// path (`"$exclusive"` or `"$$e"`). Used by renew (by lock id) and the keepalive (by keeper).
pub(crate) fn statement(
    query: Document,
    selects: impl Fn(&str) -> Bson,
    renewed: impl Fn(&str) -> Bson,
) -> Document {
    let renew = |entry: &str| bson!({ "$cond": [selects(entry), renewed(entry), entry] });
    let exclusive = bson!({ "$cond": [
        { "$eq": [{ "$type": "$exclusive" }, "object"] },
        renew("$exclusive"),
        null,
    ]});
    let shared =
        bson!({ "$map": { "input": expr::shared_or_empty(), "as": "e", "in": renew("$$e") } });
    let selected = bson!({ "$anyElementTrue": [{ "$map": {
        "input": expr::all_entries(), "as": "e", "in": selects("$$e"),
    }}]});
    doc! {
        "q": expr::checked(query, Some(selected)),
        "u": [expr::replace_stage(expr::with_entries(exclusive, shared))],
        "multi": true,
        "collation": Context::collation(),
    }
}

/// Renews the live locks of `lock_id`; returns how many.
pub(crate) async fn run(ctx: &Context, lock_id: &str, ttl: Duration) -> Result<u64> {
    check_id("lock_id", lock_id)?;
    let ttl_ms = ttl_millis(ttl)?;
    let reply = ctx.write(command(ctx, lock_id, ttl_ms), Upsert::No).await?;
    let renewed = count(&reply, "n");
    tracing::debug!(lock_id, renewed, "renewed");
    Ok(renewed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn renews_only_live_entries_of_the_lock_id_and_keeps_no_ttl() {
        let ctx = crate::command::test_context();
        let command = command(&ctx, "$id", 2_000);
        let text = Bson::Document(command.clone())
            .into_relaxed_extjson()
            .to_string();
        assert!(
            text.contains(r#"{"$eq":["$$e.lockId",{"$literal":"$id"}]}"#),
            "{text}"
        );
        assert!(
            text.contains(r#"{"$gt":[{"$cond":["$$e.letGoAt",null,{"$ifNull":["$$e.expiresAt",{"$maxKey":1}]}]},{"$add":["$$NOW",{"$ifNull":["$$e.delayMs",0]}]}]}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""t":{"$eq":[{"$type":"$$e.expiresAt"},"date"]}"#)
                && text.contains(r#""expiresAt":{"$cond":["$$t",{"$cond":["$$kept",{"$max":["$$e.expiresAt","$$end"]},"$$end"]},null]}"#),
            "a lease's keeper counts on its TTL: never shortened; {text}"
        );
        assert!(
            text.contains(r#""vars":{"end":{"$add":["$$NOW",2000,{"$ifNull":["$$e.delayMs",0]}]},"kept":{"$eq":[{"$type":"$$e.keeper"},"string"]},"t":"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#""ttlMs":{"$cond":["$$t",{"$cond":["$$kept","$$e.ttlMs",2000]},null]}"#
            ),
            "{text}"
        );
        let update = command.get_array("updates").unwrap()[0]
            .as_document()
            .unwrap();
        let query = update.get_document("q").unwrap();
        assert_eq!(
            query.get_array("$or").unwrap(),
            held_by("$id").get_array("$or").unwrap()
        );
        assert!(query.contains_key("$expr"));
    }
}
