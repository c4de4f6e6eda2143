//! Renew: extend every live lock of a lock id, by the server's clock (2 round trips).
//!
//! On the wire:
//!
//! ```text
//! 1. update: <collection>, writeConcern: { w: "majority", j: true }
//!      updates: [{ q: { $or: [{ "exclusive.lockId": <id> }, { "shared.lockId": <id> }] },
//!                  u: [ { $replaceWith: <the document, each live entry of <id> renewed> } ],
//!                  multi: true }]
//! 2. aggregate (see status): the entries of <id>; those stamped with this call's
//!    renewOp are the ones it renewed
//! ```
//!
//! A renewed entry gets `renewedAt = $$NOW`, `expiresAt = $$NOW + ttl`, `ttlMs = ttl` and
//! `renewOp = <a fresh ObjectId for this call>`. An entry without TTL keeps none (it is
//! stamped and reported, since it is held). An expired entry is never revived: its holder lost
//! it, and must acquire again and get a new token.
//!
//! The write comes first so that what is reported was renewed, not merely seen: the stamp
//! tells this call's renewals from others. A concurrent renew of the same lock id may
//! overwrite the stamp, and then this call reports fewer locks than it renewed (never more).

use std::time::Duration;

use bson::oid::ObjectId;
use bson::{Document, bson, doc};

use crate::client::LockClient;
use crate::command::status;
use crate::error::{Error, Result};
use crate::schema::{self, literal};
use crate::types::{Filter, LockStatus, check_id, ttl_millis};

/// The query: documents where the lock id holds something.
pub(crate) fn filter(lock_id: &str) -> Document {
    doc! { "$or": [{ "exclusive.lockId": lock_id }, { "shared.lockId": lock_id }] }
}

/// The update pipeline.
pub(crate) fn pipeline(lock_id: &str, ttl_ms: i64, op: ObjectId) -> Vec<Document> {
    let renew = |entry: &str| {
        let expires_at = format!("{entry}.expiresAt");
        let has_ttl = bson!({ "$eq": [{ "$type": &expires_at }, "date"] });
        bson!({ "$cond": [
            { "$and": [{ "$eq": [format!("{entry}.lockId"), literal(lock_id)] }, schema::is_live(entry)] },
            { "$mergeObjects": [entry, {
                "renewedAt": "$$NOW",
                "expiresAt": { "$cond": [has_ttl.clone(), { "$add": ["$$NOW", ttl_ms] }, null] },
                "ttlMs": { "$cond": [has_ttl, ttl_ms, null] },
                "renewOp": literal(op),
            }]},
            entry,
        ]})
    };
    let exclusive = bson!({ "$cond": [
        { "$eq": [{ "$type": "$exclusive" }, "object"] },
        renew("$exclusive"),
        null,
    ]});
    let shared =
        bson!({ "$map": { "input": schema::shared_or_empty(), "as": "e", "in": renew("$$e") } });
    let fence = bson!({ "$ifNull": ["$fence", 0_i64] });
    vec![schema::replace_if_lock_document(schema::lock_document(
        fence, exclusive, shared,
    ))]
}

/// Renews the live locks of `lock_id` and reports them, newest first.
pub(crate) async fn run(
    client: &LockClient,
    lock_id: &str,
    ttl: Duration,
) -> Result<Vec<LockStatus>> {
    check_id("lock_id", lock_id)?;
    let ttl_ms = ttl_millis(ttl)?;
    let op = ObjectId::new();
    client
        .collection
        .update_many(filter(lock_id), pipeline(lock_id, ttl_ms, op))
        .write_concern(client.write_concern.clone())
        .await
        .map_err(Error::database)?;
    let mut renewed = status::run_sorted(client, &Filter::default().lock_id(lock_id)).await?;
    renewed.retain(|s| s.renew_op == Some(op));
    tracing::debug!(lock_id, renewed = renewed.len(), "renewed");
    Ok(renewed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::Bson;

    #[test]
    fn renews_only_live_entries_of_the_lock_id_and_keeps_no_ttl() {
        let op = ObjectId::new();
        let pipeline = pipeline("$id", 2_000, op);
        assert_eq!(pipeline.len(), 1);
        let text = Bson::Document(pipeline[0].clone())
            .into_relaxed_extjson()
            .to_string();
        assert!(
            text.contains(r#"{"$eq":["$$e.lockId",{"$literal":"$id"}]}"#),
            "{text}"
        );
        assert!(
            text.contains(r#"{"$gt":["$$e.expiresAt","$$NOW"]}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""expiresAt":{"$cond":[{"$eq":[{"$type":"$$e.expiresAt"},"date"]},{"$add":["$$NOW",2000]},null]}"#),
            "{text}"
        );
        assert!(text.contains(&op.to_hex()), "{text}");
    }

    #[test]
    fn filter_uses_the_lock_id_indexes() {
        assert_eq!(
            filter("g"),
            doc! { "$or": [{ "exclusive.lockId": "g" }, { "shared.lockId": "g" }] }
        );
    }
}
