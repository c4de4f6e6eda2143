//! Purge: clear expired locks, by the server's clock.
//!
//! [`run`] removes expired entries and nothing else, in one round trip. An expired entry
//! blocks nobody already (every acquire ignores it); purging tidies the collection and its
//! status reports. It never ends a live lease.
//!
//! ```text
//! update: <collection>, updates: [{
//!   q: { mongolock: 1, $expr: <an expired entry> },            // scans the collection
//!   u: [ { $replaceWith: <the document without its expired entries> } ],   // no 2nd check
//!   multi: true, collation: { locale: "simple" } }], writeConcern, maxTimeMS
//! ```
//!
//! [`run_groups`] also applies the group rule of the Go library this crate's API follows:
//! a lock id with an expired lock is taken as abandoned, and its other locks go too. That
//! ends live leases without warning their holders (they learn it at their next renewal), so it is a separately named call. It only
//! removes the entries that existed when the group's member expired (granted before its
//! lease ended: its `expiresAt` less its lock-delay); a lock granted to the same lock id
//! afterwards survives. A marked entry (`letGoAt`: its holder let go of it within its
//! minimum hold, or a force release kept it for its lock-delay) expires too, but was
//! released, or broken by an operator (whose force release removes an entry without a delay
//! outright): it makes no group abandoned. Two round trips:
//!
//! ```text
//! 1. aggregate: the lock ids with an abandoned entry (expired, not let go of), each with
//!    the earliest end T of such an entry's lease
//! 2. update: one statement per lock id L (up to GROUPS_PER_COMMAND a command):
//!      q: { $or: [{ "exclusive.lockId": L }, { "shared.lockId": L }],           // by index
//!           mongolock: 1 },
//!      u: remove every entry that is expired, or is L's and was created before T
//! ```
//!
//! The comparison with T is made by the server inside the write, so a grant that lands
//! between the two round trips is judged by when it was granted, not by what the read saw.

use bson::{Bson, DateTime, Document, bson, doc};

use crate::command::expr::{self, held_by, is_of};
use crate::command::{Context, Upsert, count};
use crate::error::{Error, Result};
use crate::query::Purged;
use crate::schema;

/// The most group statements sent in one `update` command (each carries its own pipeline,
/// about 4 KiB), keeping a command far below MongoDB's 16 MiB limit.
pub(crate) const GROUPS_PER_COMMAND: usize = 1_000;

/// A lock document with an expired entry.
fn has_expired_entry() -> Document {
    let expired = bson!({ "$anyElementTrue": [{ "$map": {
        "input": expr::all_entries(), "as": "e", "in": { "$not": [expr::is_live("$$e")] },
    }}]});
    expr::checked(Document::new(), Some(expired))
}

/// The command that removes expired entries everywhere.
pub(crate) fn command(ctx: &Context) -> Document {
    doc! {
        "update": ctx.collection_name(),
        "updates": [{
            "q": has_expired_entry(),
            "u": [expr::replace_stage(expr::without_entries(|entry| bson!({ "$not": [expr::is_live(entry)] })))],
            "multi": true,
            "collation": Context::collation(),
        }],
    }
}

/// Removes expired entries.
pub(crate) async fn run(ctx: &Context) -> Result<Purged> {
    let reply = ctx.write(command(ctx), Upsert::No).await?;
    let resources = count(&reply, "nModified");
    tracing::debug!(resources, "purged expired locks");
    Ok(Purged {
        resources,
        lock_ids: Vec::new(),
    })
}

/// The aggregation that finds each lock id with an abandoned entry, and when the first such
/// entry's lease ended. An entry is abandoned when it expired unmarked: one marked `letGoAt`
/// (see `expr::was_let_go`) was let go of within its minimum hold, or force-released. Its
/// lease ended at `expiresAt` less its lock-delay: a lock its lock id took after that, while
/// the entry was still in force for its delay, is not of the abandoned group.
pub(crate) fn abandoned_groups() -> Vec<Document> {
    let lease_end = bson!({ "$subtract": [
        "$e.expiresAt",
        { "$ifNull": [format!("$e.{}", schema::DELAY_MS), 0] },
    ]});
    vec![
        doc! { "$match": has_expired_entry() },
        doc! { "$project": { "_id": 0, "e": expr::all_entries() } },
        doc! { "$unwind": "$e" },
        doc! { "$match": { "$expr": { "$and": [
            { "$not": [expr::is_live("$e")] },
            { "$not": [expr::was_let_go("$e")] },
        ]}}},
        doc! { "$group": { "_id": "$e.lockId", "expiredAt": { "$min": lease_end } } },
    ]
}

/// One statement of the group purge: every expired entry, and the entries of `lock_id`
/// granted before `expired_at`.
fn group_statement(lock_id: &str, expired_at: DateTime) -> Document {
    let remove = |entry: &str| {
        bson!({ "$or": [
            { "$not": [expr::is_live(entry)] },
            { "$and": [is_of(entry, lock_id), { "$lt": [format!("{entry}.createdAt"), expired_at] }] },
        ]})
    };
    doc! {
        "q": expr::checked(held_by(lock_id), None),
        "u": [expr::replace_stage(expr::without_entries(remove))],
        "multi": true,
        "collation": Context::collation(),
    }
}

/// Removes expired entries and the abandoned groups.
pub(crate) async fn run_groups(ctx: &Context) -> Result<Purged> {
    let rows = ctx.aggregate(abandoned_groups()).await?;
    let mut groups = rows
        .iter()
        .map(|row| match (row.get("_id"), row.get("expiredAt")) {
            (Some(Bson::String(id)), Some(Bson::DateTime(at))) => Ok((id.clone(), *at)),
            _ => Err(Error::unexpected(
                &row.get("_id").cloned().unwrap_or(Bson::Null),
                "an expired entry without a lock id or expiry",
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    groups.sort();
    let mut resources = 0;
    for chunk in groups.chunks(GROUPS_PER_COMMAND) {
        let statements: Vec<Document> = chunk
            .iter()
            .map(|(id, at)| group_statement(id, *at))
            .collect();
        let command = doc! {
            "update": ctx.collection_name(),
            "updates": statements,
            "ordered": false,
        };
        let reply = ctx.write(command, Upsert::No).await?;
        resources += count(&reply, "nModified");
    }
    let lock_ids: Vec<String> = groups.into_iter().map(|(id, _)| id).collect();
    tracing::debug!(
        resources,
        groups = lock_ids.len(),
        "purged abandoned groups"
    );
    Ok(Purged {
        resources,
        lock_ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_statement_keeps_what_was_granted_after_the_expiry() {
        let statement = group_statement("$g", DateTime::from_millis(5_000));
        let text = Bson::Document(statement).into_relaxed_extjson().to_string();
        assert!(text.contains(r#"{"$literal":"$g"}"#), "{text}");
        assert!(
            text.contains(r#"{"$lt":["$$e.createdAt",{"$date":"1970-01-01T00:00:05Z"}]}"#),
            "{text}"
        );
    }

    #[test]
    fn a_full_command_of_group_statements_stays_far_below_16_mib() {
        let long_id = "g".repeat(crate::MAX_ID_LEN);
        let statements: Vec<Document> = (0..GROUPS_PER_COMMAND)
            .map(|_| group_statement(&long_id, DateTime::from_millis(1)))
            .collect();
        let size = bson::to_vec(&doc! { "update": "locks", "updates": statements })
            .unwrap()
            .len();
        assert!(size < 8 * 1024 * 1024, "{size} bytes");
    }
}
