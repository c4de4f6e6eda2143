//! Indexes: one `createIndexes` with exactly the indexes the commands use, after one
//! `update` that checks the server runs the commands at all (see `command/compat.rs`).
//!
//! ```text
//! update: <collection>, updates: [{ q: { _id: "mongolock compatibility check",
//!   mongolock: -1 }, u: [ { $set: { checkedAt: "$$NOW" } } ] }]    // matches nothing
//! createIndexes: <collection>, writeConcern, maxTimeMS, indexes: [
//!   { key: { "exclusive.lockId": 1 }, name: "exclusive.lockId_1", collation: simple },
//!   { key: { "shared.lockId": 1 },    name: "shared.lockId_1",    collation: simple },
//!   { key: { "exclusive.keeper": 1 }, name: "exclusive.keeper_1", collation: simple },
//!   { key: { "shared.keeper": 1 },    name: "shared.keeper_1",    collation: simple },
//!   { key: { idleSince: 1 }, name: "idleSince_ttl", expireAfterSeconds: <retention> },
//! ]
//! ```
//!
//! The two `lockId` indexes serve every query by lock id: unlock, renew, the group purge and
//! status by lock id. The two `keeper` indexes serve the keepalive of leases, which renews
//! every lease of one client by its keeper id. An acquire or release finds its document by `_id`. Nothing queries by
//! `expiresAt` with an index (expiry is judged with `$$NOW` inside `$expr`, which a plain
//! index cannot serve), so there is no index on it. The indexes use the simple collation, as
//! the queries do, whatever the collection's default.
//!
//! Creating an index that exists with the same options is a no-op, so this is idempotent.
//! The TTL index deletes a resource document `retention` after it became free (see
//! [`schema`](crate::schema)); it never ends a live lock.

use std::time::Duration;

use bson::{Document, doc};

use crate::command::{Context, Upsert};
use crate::error::Result;
use crate::schema;

/// The name of the TTL index on `idleSince`.
pub(crate) const TTL_INDEX: &str = "idleSince_ttl";

/// The index specifications.
pub(crate) fn specs(retention: Duration) -> Vec<Document> {
    let by_field = |field: &str| {
        doc! {
            "key": { field: 1 },
            "name": format!("{field}_1"),
            "collation": Context::collation(),
        }
    };
    vec![
        by_field("exclusive.lockId"),
        by_field("shared.lockId"),
        by_field("exclusive.keeper"),
        by_field("shared.keeper"),
        doc! {
            "key": { schema::IDLE_SINCE: 1 },
            "name": TTL_INDEX,
            "expireAfterSeconds": i32::try_from(retention.as_secs()).unwrap_or(i32::MAX),
        },
    ]
}

pub(crate) async fn run(ctx: &Context) -> Result<()> {
    // Setting up is where a server that cannot run the commands is best told: a pipeline
    // update with `$$NOW`, which changes nothing.
    super::compat::check(ctx).await?;
    let command = doc! {
        "createIndexes": ctx.collection_name(),
        "indexes": specs(ctx.retention),
    };
    ctx.write(command, Upsert::No).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_index_uses_the_retention_and_the_others_the_simple_collation() {
        let specs = specs(Duration::from_secs(86_400));
        assert_eq!(specs.len(), 5);
        let ttl = specs.last().unwrap();
        assert_eq!(ttl.get_document("key").unwrap(), &doc! { "idleSince": 1 });
        assert_eq!(ttl.get_i32("expireAfterSeconds"), Ok(86_400));
        assert_eq!(ttl.get_str("name"), Ok(TTL_INDEX));
        for spec in &specs[..4] {
            assert_eq!(
                spec.get_document("collation").unwrap(),
                &doc! { "locale": "simple" }
            );
        }
    }
}
