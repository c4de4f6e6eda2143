//! Refreshing waiters' places in line: one unordered `update` for every place a client's
//! waiters hold, sent by the client's places task (`crate::places`), whatever their number:
//!
//! ```text
//! update: <collection>, ordered: false, updates: [                   // one per place
//!   { q: { _id: <resource>, mongolock: 1, queue: { $elemMatch: { call: <call> } },
//!          $expr: <that place is live> },                              // never revived
//!     u: [ { $set: { queue: <the line, that place's until = $$NOW + life> } } ] },
//!   ... ]
//! ```
//!
//! A place is found by the waiting call it names (see `crate::schema`), which its first
//! refused attempt wrote (or took it over with), so a late refresh of an earlier call of the
//! lock id never makes the place of its next call last. A statement matches only while its
//! place is live, so a place that lapsed stays lapsed
//! (its waiter joins the line again at its end with its next attempt), and the reply's `n`
//! is the number of places refreshed.

use std::time::Duration;

use bson::oid::ObjectId;
use bson::{Document, bson, doc};

use crate::command::{Context, batched, send_batched};
use crate::error::Result;
use crate::schema::{self, FORMAT, MARK};

/// One waiter's place: the resource, the waiting call it names, and how long a refresh makes
/// it last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) resource: String,
    pub(crate) call: ObjectId,
    pub(crate) life: Duration,
}

/// The statement that refreshes one waiter's place in line, matching only while it is live
/// (see [`crate::places`]).
fn place_statement(place: &Place) -> Document {
    let life_ms = crate::clock::saturating_millis(place.life);
    let this = bson!({ "$eq": ["$$q.call", place.call] });
    doc! {
        "q": {
            "_id": &place.resource, MARK: FORMAT,
            "queue": { "$elemMatch": { schema::CALL: place.call } },
            "$expr": { "$anyElementTrue": [{ "$map": {
                "input": "$queue", "as": "q",
                "in": { "$and": [this.clone(), { "$gt": ["$$q.until", "$$NOW"] }] },
            }}]},
        },
        "u": [{ "$set": { "queue": { "$map": {
            "input": "$queue", "as": "q",
            "in": { "$cond": [
                this,
                { "$mergeObjects": ["$$q", { "until": { "$add": ["$$NOW", life_ms] } }] },
                "$$q",
            ]},
        }}}}],
        "collation": Context::collation(),
    }
}

/// The command(s) that refresh `places` (see [`crate::places`]): one, unless its statements
/// pass [`MAX_COMMAND_BYTES`](crate::command::MAX_COMMAND_BYTES).
pub(crate) fn commands(ctx: &Context, places: &[Place]) -> Vec<Document> {
    batched(ctx, places.iter().map(place_statement))
}

/// Refreshes `places` within `limit`; returns how many were live and refreshed.
///
/// # Cancel safety
///
/// Dropping the future stops before the next command; a command already sent may have
/// refreshed its places.
pub(crate) async fn refresh(ctx: &Context, places: &[Place], limit: Duration) -> Result<u64> {
    send_batched(ctx, commands(ctx, places), limit).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::Bson;

    #[tokio::test]
    async fn a_place_is_refreshed_only_while_it_is_live_and_only_that_place() {
        let ctx = crate::command::test_context();
        let call = ObjectId::new();
        let places = [Place {
            resource: "$r".into(),
            call,
            life: Duration::from_millis(1_500),
        }];
        let commands = commands(&ctx, &places);
        assert_eq!(commands.len(), 1);
        let text = Bson::Document(commands[0].clone())
            .into_relaxed_extjson()
            .to_string();
        // Found by its resource, the mark and the place's call (never upserted: an update
        // without `upsert`), only while live; the place of that call only is refreshed.
        let found = format!(
            r#""_id":"$r","mongolock":1,"queue":{{"$elemMatch":{{"call":{{"$oid":"{call}"}}}}}}"#
        );
        assert!(text.contains(&found), "{text}");
        assert!(text.contains(r#"{"$gt":["$$q.until","$$NOW"]}"#), "{text}");
        let this = format!(r#"{{"$eq":["$$q.call",{{"$oid":"{call}"}}]}}"#);
        assert!(text.contains(&this), "{text}");
        assert!(
            text.contains(r#""until":{"$add":["$$NOW",1500]}"#),
            "{text}"
        );
        assert!(!text.contains("upsert"), "{text}");
    }
}
