//! Indexes: one `createIndexes` with every index the commands use.
//!
//! ```text
//! createIndexes: <collection>, writeConcern: { w: "majority", j: true }, indexes: [
//!   { key: { "exclusive.lockId": 1 },  name: "exclusive.lockId_1" },    // unlock, renew, status
//!   { key: { "shared.lockId": 1 },     name: "shared.lockId_1" },
//!   { key: { "exclusive.expiresAt": 1 }, name: "exclusive.expiresAt_1" }, // purge, status by TTL
//!   { key: { "shared.expiresAt": 1 },  name: "shared.expiresAt_1" },
//!   { key: { idleSince: 1 }, name: "idleSince_ttl", expireAfterSeconds: <retention> },
//! ]
//! ```
//!
//! Creating an index that exists with the same options is a no-op, so this is idempotent. The
//! TTL index deletes a resource document `retention` after it became free (see
//! [`schema`](crate::schema)); it never ends a live lock.

use std::time::Duration;

use bson::doc;
use mongodb::IndexModel;
use mongodb::options::IndexOptions;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::schema;

/// The name of the TTL index on `idleSince`.
pub(crate) const TTL_INDEX: &str = "idleSince_ttl";

pub(crate) fn models(retention: Duration) -> Vec<IndexModel> {
    let plain = |field: &str| {
        IndexModel::builder()
            .keys(doc! { field: 1 })
            .options(IndexOptions::builder().name(format!("{field}_1")).build())
            .build()
    };
    vec![
        plain("exclusive.lockId"),
        plain("shared.lockId"),
        plain("exclusive.expiresAt"),
        plain("shared.expiresAt"),
        IndexModel::builder()
            .keys(doc! { schema::IDLE_SINCE: 1 })
            .options(
                IndexOptions::builder()
                    .name(TTL_INDEX.to_owned())
                    .expire_after(retention)
                    .build(),
            )
            .build(),
    ]
}

pub(crate) async fn run(client: &LockClient) -> Result<()> {
    client
        .collection
        .create_indexes(models(client.retention))
        .write_concern(client.write_concern.clone())
        .await
        .map_err(Error::database)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_index_uses_the_retention() {
        let models = models(Duration::from_secs(86_400));
        assert_eq!(models.len(), 5);
        let ttl = models.last().unwrap();
        assert_eq!(ttl.keys, doc! { "idleSince": 1 });
        let options = ttl.options.as_ref().unwrap();
        assert_eq!(options.expire_after, Some(Duration::from_secs(86_400)));
        assert_eq!(options.name.as_deref(), Some(TTL_INDEX));
    }
}
