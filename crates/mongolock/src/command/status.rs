//! Status: one `aggregate` that lists entries with their remaining TTL computed by the server.
//!
//! On the wire:
//!
//! ```text
//! aggregate: <collection>, readConcern: { level: "majority" }   // "local" with unsafe writes
//!   $readPreference: primary, collation: { locale: "simple" }, maxTimeMS: <limit>
//! pipeline: [
//!   { $match: <document-level conditions> },   // only what indexes can serve: _id, lockId, owner
//!   { $project: { _id: 0, resource: "$_id",
//!                 entries: <a lock document> ? [<exclusive + kind>, ...<shared + kind>]
//!                                            : [{ kind: "not a lock document" }] } },
//!   { $unwind: "$entries" },
//!   { $replaceWith: { ...entry, resource, kind,
//!                     remainingMs: expiresAt - delayMs - $$NOW | null } },  // ≤ 0 if letGoAt
//!   { $match: { $or: [{ kind: "not a lock document" }, <entry-level conditions>] } },
//! ]
//! ```
//!
//! A document that matches the document-level conditions but is not a lock document
//! contributes one row marked as such (its entries are not read: they may not even be
//! documents), which makes the call fail with
//! [`ErrorKind::UnexpectedDocument`](crate::ErrorKind::UnexpectedDocument) rather than skip
//! it silently or report locks that the other calls would refuse to touch.

use bson::{Bson, Document, bson, doc};

use crate::command::Context;
use crate::command::expr;
use crate::error::{Error, Result};
use crate::query::{Filter, LockStatus};
use crate::request::{check_id, check_label};
use crate::schema;

/// Checks the filter's arguments.
pub(crate) fn validate(filter: &Filter) -> Result<()> {
    if let Some(resource) = &filter.resource {
        check_id("resource", resource)?;
    }
    if let Some(lock_id) = &filter.lock_id {
        check_id("lock_id", lock_id)?;
    }
    // No stored owner is longer: a longer one could only make a command too large to send.
    if let Some(owner) = &filter.owner {
        check_label("owner", owner)?;
    }
    for duration in [filter.ttl_below, filter.ttl_at_least]
        .into_iter()
        .flatten()
    {
        if i64::try_from(duration.as_millis()).is_err() {
            return Err(Error::invalid("filter", "a TTL bound is too large"));
        }
    }
    Ok(())
}

/// `{ $or: [{ "exclusive.<field>": v }, { "shared.<field>": v }] }`: either side, by index.
fn on_either_side(field: &str, value: Bson) -> Document {
    doc! { "$or": [
        { format!("exclusive.{field}"): value.clone() },
        { format!("shared.{field}"): value },
    ]}
}

/// The aggregation for `filter`.
pub(crate) fn pipeline(filter: &Filter) -> Vec<Document> {
    // Document level: narrows by index before anything is computed.
    let mut document_level = Vec::<Document>::new();
    if let Some(resource) = &filter.resource {
        document_level.push(doc! { "_id": resource });
    }
    if let Some(lock_id) = &filter.lock_id {
        document_level.push(on_either_side("lockId", lock_id.into()));
    }
    if let Some(owner) = &filter.owner {
        document_level.push(on_either_side("owner", owner.into()));
    }

    // Entry level.
    let mut entry_level = Vec::<Document>::new();
    if let Some(lock_id) = &filter.lock_id {
        entry_level.push(doc! { "lockId": lock_id });
    }
    if let Some(owner) = &filter.owner {
        entry_level.push(doc! { "owner": owner });
    }
    if let Some(kind) = filter.kind {
        entry_level.push(doc! { "kind": kind.as_str() });
    }
    if let Some(before) = filter.created_before {
        entry_level.push(doc! { "createdAt": { "$lt": before } });
    }
    if let Some(after) = filter.created_after {
        entry_level.push(doc! { "createdAt": { "$gt": after } });
    }
    // A lock without TTL has remainingMs null: "$lt" never matches null, so it is not "below".
    if let Some(below) = filter.ttl_below {
        entry_level.push(doc! { "remainingMs": { "$lt": millis(below) } });
    }
    if let Some(at_least) = filter.ttl_at_least {
        entry_level.push(doc! { "$or": [
            { "remainingMs": Bson::Null },
            { "remainingMs": { "$gte": millis(at_least) } },
        ]});
    }

    let tagged = |entry: &str, kind: &str| bson!({ "$mergeObjects": [entry, { "kind": kind }] });
    let mut pipeline = vec![
        doc! { "$match": and(document_level) },
        doc! { "$project": {
            "_id": 0,
            "resource": "$_id",
            "entries": { "$cond": [
                expr::is_ours(),
                { "$concatArrays": [
                    { "$cond": [
                        { "$eq": [{ "$type": "$exclusive" }, "object"] },
                        [tagged("$exclusive", "exclusive")],
                        [],
                    ]},
                    { "$map": {
                        "input": { "$cond": [{ "$isArray": "$shared" }, "$shared", []] },
                        "as": "e",
                        "in": tagged("$$e", "shared"),
                    }},
                ]},
                [{ "kind": schema::NOT_A_LOCK_DOCUMENT }],
            ]},
        }},
        doc! { "$unwind": "$entries" },
        doc! { "$replaceWith": { "$mergeObjects": ["$entries", {
            "resource": "$resource",
            "remainingMs": { "$cond": [
                { "$eq": [{ "$type": "$entries.expiresAt" }, "date"] },
                // The lease's: an entry with a lock-delay stays in force that much longer.
                // A marked entry (`letGoAt`: let go of within its minimum hold, or
                // force-released) holds nothing whatever the clock reads: at most 0, also
                // when the server's clock stepped back (`$min` passes over null).
                { "$min": [
                    { "$subtract": [
                        "$entries.expiresAt",
                        { "$add": ["$$NOW", { "$ifNull": ["$entries.delayMs", 0] }] },
                    ]},
                    { "$cond": ["$entries.letGoAt", 0, null] },
                ]},
                null,
            ]},
        }]}},
    ];
    if !entry_level.is_empty() {
        pipeline.push(doc! { "$match": { "$or": [
            { "kind": schema::NOT_A_LOCK_DOCUMENT },
            and(entry_level),
        ]}});
    }
    pipeline
}

fn millis(duration: std::time::Duration) -> i64 {
    // validate() checked the range.
    crate::clock::saturating_millis(duration)
}

fn and(mut conditions: Vec<Document>) -> Document {
    match conditions.len() {
        0 => Document::new(),
        1 => conditions.remove(0),
        _ => doc! { "$and": conditions },
    }
}

/// Runs the aggregation and decodes every row, newest first.
pub(crate) async fn run(ctx: &Context, filter: &Filter) -> Result<Vec<LockStatus>> {
    validate(filter)?;
    let rows = ctx.aggregate(pipeline(filter)).await?;
    let mut statuses = rows
        .iter()
        .map(schema::decode_status)
        .collect::<Result<Vec<_>>>()?;
    schema::sort_newest_first(&mut statuses);
    Ok(statuses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LockKind;
    use std::time::Duration;

    #[test]
    fn empty_filter_matches_everything() {
        let pipeline = pipeline(&Filter::default());
        assert_eq!(pipeline[0], doc! { "$match": {} });
        assert_eq!(pipeline.len(), 4, "no entry-level $match");
    }

    #[test]
    fn conditions_go_to_the_right_level() {
        let filter = Filter::default()
            .resource("r")
            .lock_id("$id")
            .owner("me")
            .kind(LockKind::Shared)
            .ttl_below(Duration::from_secs(5))
            .ttl_at_least(Duration::from_millis(10))
            .created_after(bson::DateTime::from_millis(7));
        let pipeline = pipeline(&filter);
        assert_eq!(
            pipeline[0],
            doc! { "$match": { "$and": [
                { "_id": "r" },
                { "$or": [{ "exclusive.lockId": "$id" }, { "shared.lockId": "$id" }] },
                { "$or": [{ "exclusive.owner": "me" }, { "shared.owner": "me" }] },
            ]}}
        );
        assert_eq!(
            pipeline.last().unwrap(),
            &doc! { "$match": { "$or": [
                { "kind": "not a lock document" },
                { "$and": [
                    { "lockId": "$id" },
                    { "owner": "me" },
                    { "kind": "shared" },
                    { "createdAt": { "$gt": bson::DateTime::from_millis(7) } },
                    { "remainingMs": { "$lt": 5_000_i64 } },
                    { "$or": [{ "remainingMs": null }, { "remainingMs": { "$gte": 10_i64 } }] },
                ]},
            ]}}
        );
    }

    #[test]
    fn filter_arguments_are_checked() {
        assert!(validate(&Filter::default().resource("")).is_err());
        assert!(validate(&Filter::default().lock_id("x".repeat(600))).is_err());
        assert!(validate(&Filter::default().ttl_below(Duration::MAX)).is_err());
        assert!(validate(&Filter::default().owner("")).is_ok());
        let long_owner = "o".repeat(crate::MAX_LABEL_LEN + 1);
        assert!(validate(&Filter::default().owner(long_owner)).is_err());
    }
}
