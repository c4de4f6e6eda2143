//! Proclaim: a leader changes the value it advertises (its entry's `owner`), in one round
//! trip, only while the server still holds its very grant live, kept by its own client:
//!
//! ```text
//! update: <collection>, updates: [{
//!   q: { _id: <election>, "exclusive.lockId": <id>, "exclusive.token": <term>,
//!        "exclusive.keeper": <its keeper>,   // resumed by another client: no longer its own
//!        mongolock: 1, $expr: <the exclusive entry is live> },
//!   u: { $set: { "exclusive.owner": <value> } },
//!   collation: { locale: "simple" } }], writeConcern, maxTimeMS
//! ```
//!
//! The reply's `n` is 1 if the grant was live (the value is set, or was already), 0 if the
//! server no longer holds it: the leadership is lost. A lock id, a term and a keeper name
//! the one leadership: when another client resumes the same lock id (a restarted process),
//! it takes the entry over with the same term and names its own keeper (see
//! `command/keepalive.rs`, `adopt`), so the leader it displaced matches nothing from then
//! on, as its renewals and its release do not. The update touches no other field: it
//! grants, renews and wakes nothing, and the `wake` of the document stays as it was, so no
//! waiter's change stream passes it. Repeating it is harmless, so a lost reply may be sent
//! again.

use bson::{Bson, Document, doc};

use crate::command::expr::{self, checked};
use crate::command::{Context, Upsert, count};
use crate::error::Result;
use crate::lock::Grant;
use crate::schema::{KEEPER, LOCK_ID, OWNER, TOKEN};

/// The command that sets the advertised value of the exclusive `grant`: its resource, lock
/// id, token and keeper (an entry without one is matched only while it names none).
pub(crate) fn command(ctx: &Context, grant: &Grant, value: &str) -> Document {
    let keeper = grant
        .holder
        .keeper
        .as_deref()
        .map_or(Bson::Null, Bson::from);
    let query = doc! {
        "_id": grant.resource(),
        format!("exclusive.{LOCK_ID}"): grant.lock_id(),
        format!("exclusive.{TOKEN}"): grant.fencing_token(),
        format!("exclusive.{KEEPER}"): keeper,
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

/// Sets the advertised value; false if the server no longer holds the grant live, or holds
/// it for another keeper.
pub(crate) async fn run(ctx: &Context, grant: &Grant, value: &str) -> Result<bool> {
    let reply = ctx.write(command(ctx, grant, value), Upsert::No).await?;
    Ok(count(&reply, "n") == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::lock::LockKind;

    /// The query and the `$set` of the proclaim of `grant`.
    fn sent(grant: &Grant) -> (Document, Document) {
        let ctx = crate::command::test_context();
        let command = command(&ctx, grant, "$value");
        let update = command.get_array("updates").unwrap()[0]
            .as_document()
            .unwrap();
        let set = update.get_document("u").unwrap().get_document("$set");
        (
            update.get_document("q").unwrap().clone(),
            set.unwrap().clone(),
        )
    }

    #[tokio::test]
    async fn sets_only_the_owner_of_the_live_grant_its_keeper_keeps() {
        let mut grant = Grant::for_test("$leader", "$id", LockKind::Exclusive, 7);
        grant.holder.keeper = Some("$keeper".to_owned());
        let (query, set) = sent(&grant);
        // Query values are data, whatever they start with.
        assert_eq!(query.get_str("_id").unwrap(), "$leader");
        assert_eq!(query.get_str("exclusive.lockId").unwrap(), "$id");
        assert_eq!(query.get_i64("exclusive.token").unwrap(), 7);
        assert_eq!(query.get_str("exclusive.keeper").unwrap(), "$keeper");
        assert_eq!(query.get_i32(crate::schema::MARK).unwrap(), 1);
        assert!(query.contains_key("$expr"));
        assert_eq!(set, doc! { "exclusive.owner": "$value" });
        // A grant without a keeper matches only an entry that names none.
        grant.holder.keeper = None;
        let (query, _) = sent(&grant);
        assert_eq!(query.get("exclusive.keeper"), Some(&Bson::Null));
    }
}
