//! Keepalive: renew every live lease of one lease keeper (one `LockClient`'s background
//! task), whatever their number, in one command. Each entry is renewed by its own TTL.
//!
//! ```text
//! update: <collection>, updates: [{
//!   q: { $or: [{ "exclusive.keeper": <k> }, { "shared.keeper": <k> }],      // by index
//!        $expr: <a lock document with a live entry of <k>> },
//!   u: [ { $replaceWith: <the document, each live entry of <k> renewed by its ttlMs> } ],
//!   multi: true, collation: { locale: "simple" } }], writeConcern, maxTimeMS
//! ```
//!
//! The reply's `n` counts the documents renewed. The lease layer knows how many resources
//! its leases are on; when the count differs, or it cannot be sure what the count means
//! (an acquire of the same keeper was in flight, or two leases share a resource), it asks
//! which leases are live with the [`live_leases`] aggregation:
//!
//! ```text
//! aggregate: <collection>, readConcern: majority, pipeline: [
//!   { $match: <the query above> }, { $project: entries }, { $unwind },
//!   { $match: <entry of <k>, live> }, { $project: { resource, lockId } } ]
//! ```

use std::time::Duration;

use bson::{Bson, Document, bson, doc};

use crate::command::{Context, Upsert, count, renew};
use crate::error::{Error, Result};
use crate::schema::{self, literal};

/// `{ $or: [{ "exclusive.keeper": k }, { "shared.keeper": k }] }`: the documents where the
/// keeper has an entry, found by index.
fn kept_by(keeper: &str) -> Document {
    doc! { "$or": [{ "exclusive.keeper": keeper }, { "shared.keeper": keeper }] }
}

/// An expression: is the entry at `entry` a live entry of `keeper`?
fn live_of(entry: &str, keeper: &str) -> Bson {
    bson!({ "$and": [
        { "$eq": [format!("{entry}.keeper"), literal(keeper)] },
        schema::is_live(entry),
    ]})
}

/// The command that renews every live entry of `keeper` by its own TTL.
pub(crate) fn command(ctx: &Context, keeper: &str) -> Document {
    let has_ttl =
        |entry: &str| bson!({ "$in": [{ "$type": format!("{entry}.ttlMs") }, ["long", "int"]] });
    let selects = |entry: &str| bson!({ "$and": [live_of(entry, keeper), has_ttl(entry)] });
    let renewed = |entry: &str| {
        bson!({ "$mergeObjects": [entry, {
            "renewedAt": "$$NOW",
            "expiresAt": { "$add": ["$$NOW", format!("{entry}.ttlMs")] },
        }]})
    };
    doc! {
        "update": ctx.collection_name(),
        "updates": [renew::statement(kept_by(keeper), selects, renewed)],
    }
}

/// Renews every live entry of `keeper`, within `limit`; returns the number of documents
/// (resources) renewed.
pub(crate) async fn renew(ctx: &Context, keeper: &str, limit: Duration) -> Result<u64> {
    let reply = ctx
        .write_within(command(ctx, keeper), Upsert::No, limit)
        .await?;
    Ok(count(&reply, "n"))
}

/// The aggregation listing the live entries of `keeper` as `{resource, lockId}`.
pub(crate) fn live_leases(keeper: &str) -> Vec<Document> {
    vec![
        doc! { "$match": kept_by(keeper) },
        doc! { "$match": { "$expr": schema::is_lock_document() } },
        doc! { "$project": { "e": schema::all_entries() } },
        doc! { "$unwind": "$e" },
        doc! { "$match": { "$expr": live_of("$e", keeper) } },
        doc! { "$project": { "_id": 0, "resource": "$_id", "lockId": "$e.lockId" } },
    ]
}

/// The live entries of `keeper`, as `(resource, lock id)` pairs.
pub(crate) async fn live(
    ctx: &Context,
    keeper: &str,
    limit: Duration,
) -> Result<Vec<(String, String)>> {
    let rows = ctx.aggregate_within(live_leases(keeper), limit).await?;
    rows.iter()
        .map(
            |row| match (row.get_str("resource"), row.get_str("lockId")) {
                (Ok(resource), Ok(lock_id)) => Ok((resource.to_owned(), lock_id.to_owned())),
                _ => Err(Error::unexpected(
                    &row.get("resource").cloned().unwrap_or(Bson::Null),
                    "a lease entry without a resource or lock id",
                )),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_statement_whose_size_does_not_depend_on_the_leases() {
        let ctx = crate::command::test_context();
        let command = command(&ctx, "$k");
        let updates = command.get_array("updates").unwrap();
        assert_eq!(updates.len(), 1);
        let text = Bson::Document(command.clone())
            .into_relaxed_extjson()
            .to_string();
        assert!(
            text.contains(r#"{"$eq":["$$e.keeper",{"$literal":"$k"}]}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""expiresAt":{"$add":["$$NOW","$$e.ttlMs"]}"#),
            "{text}"
        );
        assert!(text.contains(r#""multi":true"#), "{text}");
    }
}
