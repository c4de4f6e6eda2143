//! Release: remove entries, by identity. Used by unlock (a whole lock id), by purge, and by
//! the release of one grant.
//!
//! An entry is identified by `{r: resource, l: lockId, t: token}`: a token is granted once per
//! resource, so a released entry can never be confused with a later grant to the same lock id.
//!
//! Unlock, on the wire (2 round trips):
//!
//! ```text
//! 1. aggregate (see status): the entries of the lock id          -> what is reported
//! 2. update: <collection>, writeConcern: { w: "majority", j: true }
//!      updates: [{ q: { _id: { $in: [<resources of 1>] } },
//!                  u: [ { $replaceWith: <the document without the entries of 1> } ],
//!                  multi: true }]
//! ```
//!
//! Release of one grant (or of one acquire attempt, by lock id and nonce), on the wire
//! (1 round trip):
//!
//! ```text
//! findAndModify: <collection>, query: { _id: <resource> }, new: false,
//!   update: [ { $replaceWith: <the document without {lockId, token} (or {lockId, nonce})> } ]
//! ```

use bson::{Bson, Document, bson, doc};
use mongodb::options::ReturnDocument;

use crate::AcquireRequest;
use crate::client::LockClient;
use crate::command::status;
use crate::error::{Error, Result};
use crate::schema::{self, literal};
use crate::types::{Filter, Grant, Holder, LockStatus, check_id};

/// The key `{r, l, t}` of an entry, in the field order the pipeline builds it.
pub(crate) fn entry_key(resource: &str, lock_id: &str, token: i64) -> Bson {
    bson!({ "r": resource, "l": lock_id, "t": token })
}

/// The pipeline that removes every entry for which `matches(entry)` (an expression over the
/// entry at a path such as `"$exclusive"` or `"$$e"`) is true.
fn remove_where(matches: impl Fn(&str) -> Bson) -> Vec<Document> {
    let exclusive = bson!({ "$cond": [
        { "$and": [
            { "$eq": [{ "$type": "$exclusive" }, "object"] },
            { "$not": [matches("$exclusive")] },
        ]},
        "$exclusive",
        null,
    ]});
    let shared = bson!({ "$filter": {
        "input": schema::shared_or_empty(), "as": "e", "cond": { "$not": [matches("$$e")] },
    }});
    let fence = bson!({ "$ifNull": ["$fence", 0_i64] });
    vec![schema::replace_if_lock_document(schema::lock_document(
        fence, exclusive, shared,
    ))]
}

/// The pipeline that removes every entry whose key is in `keys` from a document.
pub(crate) fn remove_pipeline(keys: Vec<Bson>) -> Vec<Document> {
    let keys = literal(keys);
    remove_where(|entry| {
        bson!({ "$in": [
            { "r": "$_id", "l": format!("{entry}.lockId"), "t": format!("{entry}.token") },
            keys.clone(),
        ]})
    })
}

/// The pipeline that removes the entry an acquire attempt created, by lock id and nonce.
pub(crate) fn remove_attempt_pipeline(request: &AcquireRequest) -> Vec<Document> {
    let lock_id = literal(request.lock_id.as_str());
    let nonce = literal(request.nonce.0);
    remove_where(|entry| {
        bson!({ "$and": [
            { "$eq": [format!("{entry}.lockId"), lock_id.clone()] },
            { "$eq": [format!("{entry}.nonce"), nonce.clone()] },
        ]})
    })
}

/// Removes the entries of `statuses` (which the caller read first) with one `updateMany`.
pub(crate) async fn remove(client: &LockClient, statuses: &[LockStatus]) -> Result<()> {
    if statuses.is_empty() {
        return Ok(());
    }
    let mut resources: Vec<&str> = statuses.iter().map(|s| s.resource()).collect();
    resources.sort_unstable();
    resources.dedup();
    let keys = statuses
        .iter()
        .map(|s| entry_key(s.resource(), s.lock_id(), s.fencing_token()))
        .collect();
    client
        .collection
        .update_many(doc! { "_id": { "$in": resources } }, remove_pipeline(keys))
        .write_concern(client.write_concern.clone())
        .await
        .map_err(Error::database)?;
    Ok(())
}

/// Unlocks every lock of `lock_id`: read them, then remove exactly those.
pub(crate) async fn unlock(client: &LockClient, lock_id: &str) -> Result<Vec<LockStatus>> {
    check_id("lock_id", lock_id)?;
    let released = status::run_sorted(client, &Filter::default().lock_id(lock_id)).await?;
    remove(client, &released).await?;
    tracing::debug!(lock_id, released = released.len(), "unlocked");
    Ok(released)
}

/// Releases one grant; true if this call removed it.
pub(crate) async fn release(client: &LockClient, grant: &Grant) -> Result<bool> {
    let pipeline = remove_pipeline(vec![entry_key(
        grant.resource(),
        grant.lock_id(),
        grant.fencing_token(),
    )]);
    let removed = remove_from_resource(client, grant.resource(), pipeline, |h| {
        h.lock_id == grant.lock_id() && h.token == grant.fencing_token()
    })
    .await?;
    tracing::debug!(
        resource = grant.resource(),
        lock_id = grant.lock_id(),
        removed,
        "released"
    );
    Ok(removed)
}

/// Releases the lock an acquire attempt created, if it did; true if this call removed it.
pub(crate) async fn release_attempt(client: &LockClient, request: &AcquireRequest) -> Result<bool> {
    request.validate()?;
    let removed = remove_from_resource(
        client,
        &request.resource,
        remove_attempt_pipeline(request),
        |h| h.lock_id == request.lock_id && h.nonce == Some(request.nonce.0),
    )
    .await?;
    tracing::debug!(resource = %request.resource, lock_id = %request.lock_id, removed, "attempt released");
    Ok(removed)
}

/// Runs a removing pipeline on one resource's document (one round trip) and tells, from the
/// document as it was before, whether an entry the pipeline removes was there.
async fn remove_from_resource(
    client: &LockClient,
    resource: &str,
    pipeline: Vec<Document>,
    was_removed: impl Fn(&Holder) -> bool,
) -> Result<bool> {
    let before = client
        .collection
        .find_one_and_update(doc! { "_id": resource }, pipeline)
        .return_document(ReturnDocument::Before)
        .write_concern(client.write_concern.clone())
        .await
        .map_err(Error::database)?;
    let Some(before) = before else {
        return Ok(false);
    };
    Ok(schema::decode_document(&before)?.entries().any(was_removed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_literal_and_match_the_built_key() {
        let pipeline = remove_pipeline(vec![entry_key("$r", "id", 5)]);
        assert_eq!(pipeline.len(), 1);
        let text = Bson::Document(pipeline[0].clone())
            .into_relaxed_extjson()
            .to_string();
        assert!(
            text.contains(r#"{"$literal":[{"r":"$r","l":"id","t":5}]}"#),
            "{text}"
        );
        assert!(
            text.contains(r#"{"r":"$_id","l":"$exclusive.lockId","t":"$exclusive.token"}"#),
            "{text}"
        );
        assert!(
            text.contains(r#"{"r":"$_id","l":"$$e.lockId","t":"$$e.token"}"#),
            "{text}"
        );
    }
}
