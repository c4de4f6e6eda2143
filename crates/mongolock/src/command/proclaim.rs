//! Proclaim: a leader changes the value it advertises (its entry's `owner`), in one round
//! trip, only while the server still holds its very grant live:
//!
//! ```text
//! update: <collection>, updates: [{
//!   q: { _id: <election>, "exclusive.lockId": <id>, "exclusive.token": <term>,
//!        mongolock: 1, $expr: <the exclusive entry is live> },
//!   u: { $set: { "exclusive.owner": <value> } },
//!   collation: { locale: "simple" } }], writeConcern, maxTimeMS
//! ```
//!
//! The reply's `n` is 1 if the grant was live (the value is set, or was already), 0 if the
//! server no longer holds it: the leadership is lost. The update touches no other field: it
//! grants, renews and wakes nothing, and the `wake` of the document stays as it was, so no
//! waiter's change stream passes it. Repeating it is harmless, so a lost reply may be sent
//! again.

use bson::{Document, doc};

use crate::command::expr::{self, checked};
use crate::command::{Context, Upsert, count};
use crate::error::Result;
use crate::schema::{LOCK_ID, OWNER, TOKEN};

/// The command that sets the advertised value of the grant `(lock_id, token)` on `resource`.
pub(crate) fn command(
    ctx: &Context,
    resource: &str,
    lock_id: &str,
    token: i64,
    value: &str,
) -> Document {
    let query = doc! {
        "_id": resource,
        format!("exclusive.{LOCK_ID}"): lock_id,
        format!("exclusive.{TOKEN}"): token,
    };
    doc! {
        "update": ctx.collection_name(),
        "updates": [{
            "q": checked(query, Some(expr::holds("$exclusive"))),
            "u": { "$set": { format!("exclusive.{OWNER}"): value } },
            "collation": Context::collation(),
        }],
    }
}

/// Sets the advertised value; false if the server no longer holds the grant live.
pub(crate) async fn run(
    ctx: &Context,
    resource: &str,
    lock_id: &str,
    token: i64,
    value: &str,
) -> Result<bool> {
    let reply = ctx
        .write(command(ctx, resource, lock_id, token, value), Upsert::No)
        .await?;
    Ok(count(&reply, "n") == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sets_only_the_owner_of_the_live_grant() {
        let ctx = crate::command::test_context();
        let command = command(&ctx, "$leader", "$id", 7, "$value");
        let update = command.get_array("updates").unwrap()[0]
            .as_document()
            .unwrap();
        let query = update.get_document("q").unwrap();
        // Query values are data, whatever they start with.
        assert_eq!(query.get_str("_id").unwrap(), "$leader");
        assert_eq!(query.get_str("exclusive.lockId").unwrap(), "$id");
        assert_eq!(query.get_i64("exclusive.token").unwrap(), 7);
        assert_eq!(query.get_i32(crate::schema::MARK).unwrap(), 1);
        assert!(query.contains_key("$expr"));
        let set = update
            .get_document("u")
            .unwrap()
            .get_document("$set")
            .unwrap();
        assert_eq!(set, &doc! { "exclusive.owner": "$value" });
    }
}
