//! The stored document: its fields, the expressions every pipeline shares, and decoding.
//!
//! One document per resource:
//!
//! ```text
//! { _id:       <resource name>,
//!   fence:     Int64,                 // the last fencing token granted on this resource
//!   exclusive: null | <entry>,
//!   shared:    [ <entry>, ... ],
//!   idleSince: Date | null }          // see below
//!
//! <entry> = { lockId: String, nonce: ObjectId, owner: String|null, host: String|null,
//!             token: Int64, createdAt: Date, renewedAt: Date,
//!             expiresAt: Date|null,   // null: no TTL
//!             ttlMs: Int64|null,
//!             renewOp: ObjectId }     // only after a renew: which renew call touched it last
//! ```
//!
//! `idleSince` is the server time from which the resource is free if nobody renews: when it
//! holds no entry, the time it became free; when every entry has a TTL, the latest
//! `expiresAt`; when some entry has no TTL, null. A TTL index deletes the document
//! `retention` after `idleSince`, so it never deletes a document with a live entry. Deleting
//! is safe for fencing because a grant's token is at least `$$NOW` in microseconds
//! (`toLong($$NOW) * 1000`): a deleted counter is replaced by the clock, which has moved on by
//! at least the retention period.
//!
//! Every write pipeline first checks [`is_lock_document`]: a document of another shape is
//! passed through unchanged, and decoding it afterwards yields
//! [`ErrorKind::UnexpectedDocument`](crate::ErrorKind::UnexpectedDocument).

use std::time::Duration;

use bson::{Bson, Document, bson, doc};

use crate::error::{Error, Result};
use crate::types::{Holder, LockKind, LockStatus};

pub(crate) const ID: &str = "_id";
pub(crate) const FENCE: &str = "fence";
pub(crate) const EXCLUSIVE: &str = "exclusive";
pub(crate) const SHARED: &str = "shared";
pub(crate) const IDLE_SINCE: &str = "idleSince";

pub(crate) const LOCK_ID: &str = "lockId";
pub(crate) const NONCE: &str = "nonce";
pub(crate) const OWNER: &str = "owner";
pub(crate) const HOST: &str = "host";
pub(crate) const TOKEN: &str = "token";
pub(crate) const CREATED_AT: &str = "createdAt";
pub(crate) const RENEWED_AT: &str = "renewedAt";
pub(crate) const EXPIRES_AT: &str = "expiresAt";
pub(crate) const TTL_MS: &str = "ttlMs";
pub(crate) const RENEW_OP: &str = "renewOp";

/// Fields added by the status aggregation to each reported entry.
pub(crate) const RESOURCE: &str = "resource";
pub(crate) const KIND: &str = "kind";
pub(crate) const REMAINING_MS: &str = "remainingMs";

/// A value the server must take as data, never as a field path or operator (a lock id may
/// well start with `$`).
pub(crate) fn literal(value: impl Into<Bson>) -> Bson {
    bson!({ "$literal": value.into() })
}

/// True when the current document (`$$ROOT`) has this crate's shape, or none of its fields
/// yet (a document just seeded by an upsert). It checks every field the decoder reads, so a
/// document the client would reject is never changed.
pub(crate) fn is_lock_document() -> Bson {
    let entry_ok = |e: &str| {
        let type_in = |field: &str, types: &[&str]| bson!({ "$in": [{ "$type": format!("{e}.{field}") }, types] });
        bson!({ "$and": [
            { "$eq": [{ "$type": e }, "object"] },
            type_in(LOCK_ID, &["string"]),
            type_in(TOKEN, &["long", "int"]),
            type_in(CREATED_AT, &["date"]),
            type_in(RENEWED_AT, &["date"]),
            type_in(EXPIRES_AT, &["date", "null", "missing"]),
            type_in(TTL_MS, &["long", "int", "null", "missing"]),
            type_in(OWNER, &["string", "null", "missing"]),
            type_in(HOST, &["string", "null", "missing"]),
        ]})
    };
    bson!({ "$and": [
        { "$eq": [{ "$type": "$_id" }, "string"] },
        { "$in": [{ "$type": "$fence" }, ["long", "int", "missing"]] },
        { "$in": [{ "$type": "$idleSince" }, ["date", "null", "missing"]] },
        { "$or": [
            { "$in": [{ "$type": "$exclusive" }, ["null", "missing"]] },
            entry_ok("$exclusive"),
        ]},
        { "$or": [
            { "$eq": [{ "$type": "$shared" }, "missing"] },
            { "$and": [
                { "$isArray": "$shared" },
                { "$allElementsTrue": [{ "$map": {
                    "input": "$shared", "as": "e", "in": entry_ok("$$e"),
                }}]},
            ]},
        ]},
    ]})
}

/// True when the entry at `entry` (a path such as `"$exclusive"` or `"$$e"`) is live at
/// `$$NOW`: it has no TTL, or its `expiresAt` is still ahead.
pub(crate) fn is_live(entry: &str) -> Bson {
    let expires_at = format!("{entry}.expiresAt");
    bson!({ "$or": [
        { "$ne": [{ "$type": &expires_at }, "date"] },
        { "$gt": [&expires_at, "$$NOW"] },
    ]})
}

/// `$shared` as an array (missing becomes empty).
pub(crate) fn shared_or_empty() -> Bson {
    bson!({ "$ifNull": ["$shared", []] })
}

/// The new `idleSince` for a document whose entries become `exclusive` (an entry or null) and
/// `shared` (an array), given as expressions; see the module docs.
pub(crate) fn idle_since(exclusive: Bson, shared: Bson) -> Bson {
    bson!({ "$let": {
        "vars": { "all": { "$concatArrays": [
            { "$cond": [{ "$eq": [exclusive.clone(), null] }, [], [exclusive]] },
            shared,
        ]}},
        "in": { "$cond": [
            { "$eq": [{ "$size": "$$all" }, 0] },
            // Free now: keep the time it became free, unless that lies ahead (an early release).
            { "$min": ["$idleSince", "$$NOW"] },
            { "$cond": [
                { "$allElementsTrue": [{ "$map": {
                    "input": "$$all", "as": "e", "in": { "$eq": [{ "$type": "$$e.expiresAt" }, "date"] },
                }}]},
                { "$max": { "$map": { "input": "$$all", "as": "e", "in": "$$e.expiresAt" } } },
                null,
            ]},
        ]},
    }})
}

/// The whole document after a change: `fence`, `exclusive`, `shared` and `idleSince` given as
/// expressions over the current one. Written out in full so that a change that changes
/// nothing is a no-op on the server (no write, no change event).
pub(crate) fn lock_document(fence: Bson, exclusive: Bson, shared: Bson) -> Bson {
    bson!({ "$let": {
        "vars": { "fence": fence, "exclusive": exclusive, "shared": shared },
        "in": {
            "_id": "$_id",
            "fence": "$$fence",
            "exclusive": "$$exclusive",
            "shared": "$$shared",
            "idleSince": idle_since(bson!("$$exclusive"), bson!("$$shared")),
        },
    }})
}

/// The one stage every write pipeline consists of: replace the document with `then` if it is
/// a lock document, else leave it exactly as it is.
pub(crate) fn replace_if_lock_document(then: Bson) -> Document {
    doc! { "$replaceWith": { "$cond": { "if": is_lock_document(), "then": then, "else": "$$ROOT" } } }
}

/// A lock document as decoded by the client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LockDocument {
    pub(crate) resource: String,
    pub(crate) fence: i64,
    pub(crate) exclusive: Option<Holder>,
    pub(crate) shared: Vec<Holder>,
}

impl LockDocument {
    /// Every entry, exclusive first.
    pub(crate) fn entries(&self) -> impl Iterator<Item = &Holder> {
        self.exclusive.iter().chain(self.shared.iter())
    }
}

/// Decodes a whole resource document, as returned by `findOneAndUpdate`.
pub(crate) fn decode_document(doc: &Document) -> Result<LockDocument> {
    let id = doc.get(ID).cloned().unwrap_or(Bson::Null);
    let resource = match &id {
        Bson::String(s) => s.clone(),
        _ => return Err(Error::unexpected(&id, "_id is not a string")),
    };
    let fence = match doc.get(FENCE) {
        Some(Bson::Int64(v)) => *v,
        Some(Bson::Int32(v)) => i64::from(*v),
        None => return Err(Error::unexpected(&id, "no fence")),
        Some(_) => return Err(Error::unexpected(&id, "fence is not an integer")),
    };
    let exclusive = match doc.get(EXCLUSIVE) {
        None | Some(Bson::Null) => None,
        Some(Bson::Document(entry)) => {
            Some(decode_entry(&id, &resource, LockKind::Exclusive, entry)?)
        }
        Some(_) => return Err(Error::unexpected(&id, "exclusive is not a document")),
    };
    let shared = match doc.get(SHARED) {
        None => Vec::new(),
        Some(Bson::Array(items)) => items
            .iter()
            .map(|item| match item {
                Bson::Document(entry) => decode_entry(&id, &resource, LockKind::Shared, entry),
                _ => Err(Error::unexpected(&id, "a shared entry is not a document")),
            })
            .collect::<Result<_>>()?,
        Some(_) => return Err(Error::unexpected(&id, "shared is not an array")),
    };
    Ok(LockDocument {
        resource,
        fence,
        exclusive,
        shared,
    })
}

fn decode_entry(id: &Bson, resource: &str, kind: LockKind, entry: &Document) -> Result<Holder> {
    let what = |field: &str, expected: &str| {
        Error::unexpected(id, format!("{kind} entry field {field} is not {expected}"))
    };
    let string = |field: &str| match entry.get(field) {
        Some(Bson::String(s)) => Ok(s.clone()),
        _ => Err(what(field, "a string")),
    };
    let optional_string = |field: &str| match entry.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s.clone())),
        _ => Err(what(field, "a string or null")),
    };
    let date = |field: &str| match entry.get(field) {
        Some(Bson::DateTime(d)) => Ok(*d),
        _ => Err(what(field, "a date")),
    };
    let token = match entry.get(TOKEN) {
        Some(Bson::Int64(v)) => *v,
        Some(Bson::Int32(v)) => i64::from(*v),
        _ => return Err(what(TOKEN, "an integer")),
    };
    let expires_at = match entry.get(EXPIRES_AT) {
        None | Some(Bson::Null) => None,
        Some(Bson::DateTime(d)) => Some(*d),
        _ => return Err(what(EXPIRES_AT, "a date or null")),
    };
    let ttl = match entry.get(TTL_MS) {
        None | Some(Bson::Null) => None,
        Some(Bson::Int64(v)) => u64::try_from(*v).ok().map(Duration::from_millis),
        Some(Bson::Int32(v)) => u64::try_from(*v).ok().map(Duration::from_millis),
        _ => return Err(what(TTL_MS, "an integer or null")),
    };
    let nonce = match entry.get(NONCE) {
        Some(Bson::ObjectId(oid)) => Some(*oid),
        _ => None,
    };
    Ok(Holder {
        resource: resource.to_owned(),
        lock_id: string(LOCK_ID)?,
        kind,
        owner: optional_string(OWNER)?,
        host: optional_string(HOST)?,
        token,
        nonce,
        created_at: date(CREATED_AT)?,
        renewed_at: date(RENEWED_AT)?,
        expires_at,
        ttl,
    })
}

/// Decodes one row of the status aggregation: an entry plus `resource`, `kind` and
/// `remainingMs` (null without TTL).
pub(crate) fn decode_status(row: &Document) -> Result<LockStatus> {
    let id = row.get(RESOURCE).cloned().unwrap_or(Bson::Null);
    let resource = match &id {
        Bson::String(s) => s.clone(),
        _ => return Err(Error::unexpected(&id, "_id is not a string")),
    };
    let kind = match row.get_str(KIND) {
        Ok("exclusive") => LockKind::Exclusive,
        Ok("shared") => LockKind::Shared,
        _ => return Err(Error::unexpected(&id, "unknown lock kind")),
    };
    let holder = decode_entry(&id, &resource, kind, row)?;
    let remaining_ms = match row.get(REMAINING_MS) {
        None | Some(Bson::Null) => None,
        Some(Bson::Int64(v)) => Some(*v),
        Some(Bson::Int32(v)) => Some(i64::from(*v)),
        Some(Bson::Double(v)) => Some(*v as i64),
        Some(_) => return Err(Error::unexpected(&id, "remainingMs is not a number")),
    };
    let renew_op = match row.get(RENEW_OP) {
        Some(Bson::ObjectId(oid)) => Some(*oid),
        _ => None,
    };
    Ok(LockStatus {
        holder,
        remaining: remaining_ms.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        expired: remaining_ms.is_some_and(|ms| ms <= 0),
        renew_op,
    })
}

/// Newest first: by grant time, then resource and lock id, so reports are deterministic.
pub(crate) fn sort_newest_first(statuses: &mut [LockStatus]) {
    statuses.sort_by(|a, b| {
        b.holder
            .created_at
            .cmp(&a.holder.created_at)
            .then_with(|| a.holder.resource.cmp(&b.holder.resource))
            .then_with(|| a.holder.lock_id.cmp(&b.holder.lock_id))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use bson::DateTime;
    use bson::oid::ObjectId;

    fn entry(lock_id: &str, token: i64) -> Document {
        doc! {
            "lockId": lock_id, "nonce": ObjectId::new(), "owner": "me", "host": "h",
            "token": token, "createdAt": DateTime::from_millis(1_000),
            "renewedAt": DateTime::from_millis(2_000),
            "expiresAt": DateTime::from_millis(32_000), "ttlMs": 30_000_i64,
        }
    }

    fn unexpected(result: Result<LockDocument>) -> String {
        match result.unwrap_err().kind() {
            ErrorKind::UnexpectedDocument { reason, .. } => reason.clone(),
            other => panic!("expected UnexpectedDocument, got {other:?}"),
        }
    }

    #[test]
    fn decodes_a_lock_document() {
        let mut no_ttl = entry("b", 6);
        no_ttl.insert("expiresAt", Bson::Null);
        no_ttl.insert("ttlMs", Bson::Null);
        no_ttl.insert("owner", Bson::Null);
        let doc = doc! {
            "_id": "r", "fence": 7_i64, "exclusive": Bson::Null,
            "shared": [entry("a", 5), no_ttl], "idleSince": Bson::Null,
        };
        let decoded = decode_document(&doc).unwrap();
        assert_eq!(decoded.resource, "r");
        assert_eq!(decoded.fence, 7);
        assert!(decoded.exclusive.is_none());
        assert_eq!(decoded.shared.len(), 2);
        let a = &decoded.shared[0];
        assert_eq!(
            (a.lock_id(), a.kind(), a.fencing_token()),
            ("a", LockKind::Shared, 5)
        );
        assert_eq!(a.expires_at(), Some(DateTime::from_millis(32_000)));
        assert_eq!(a.ttl(), Some(Duration::from_secs(30)));
        let b = &decoded.shared[1];
        assert_eq!((b.owner(), b.expires_at(), b.ttl()), (None, None, None));
        assert_eq!(decoded.entries().count(), 2);
    }

    #[test]
    fn foreign_documents_are_typed_errors() {
        // square/mongo-lock's shape: ObjectId _id, shared as an object.
        let go = doc! {
            "_id": ObjectId::new(), "resource": "r",
            "exclusive": { "lockId": Bson::Null, "acquired": false },
            "shared": { "count": 0, "locks": [] },
        };
        assert_eq!(unexpected(decode_document(&go)), "_id is not a string");
        let go_string_id = doc! { "_id": "r", "shared": { "count": 0 } };
        assert_eq!(unexpected(decode_document(&go_string_id)), "no fence");
        let bad_fence = doc! { "_id": "r", "fence": "7" };
        assert_eq!(
            unexpected(decode_document(&bad_fence)),
            "fence is not an integer"
        );
        let bad_shared = doc! { "_id": "r", "fence": 1_i64, "shared": { "count": 0 } };
        assert_eq!(
            unexpected(decode_document(&bad_shared)),
            "shared is not an array"
        );
        let bad_item = doc! { "_id": "r", "fence": 1_i64, "shared": [1] };
        assert_eq!(
            unexpected(decode_document(&bad_item)),
            "a shared entry is not a document"
        );
        let mut no_token = entry("a", 1);
        no_token.remove("token");
        let doc = doc! { "_id": "r", "fence": 1_i64, "exclusive": no_token };
        assert!(unexpected(decode_document(&doc)).contains("token"));
        let mut bad_date = entry("a", 1);
        bad_date.insert("createdAt", "yesterday");
        let doc = doc! { "_id": "r", "fence": 1_i64, "exclusive": bad_date };
        assert!(unexpected(decode_document(&doc)).contains("createdAt"));
        let mut bad_ttl = entry("a", 1);
        bad_ttl.insert("ttlMs", "30s");
        let doc = doc! { "_id": "r", "fence": 1_i64, "shared": [bad_ttl] };
        assert!(unexpected(decode_document(&doc)).contains("ttlMs"));
    }

    #[test]
    fn decodes_status_rows() {
        let mut row = entry("a", 3);
        row.insert("resource", "r");
        row.insert("kind", "exclusive");
        row.insert("remainingMs", 1_500_i64);
        let status = decode_status(&row).unwrap();
        assert_eq!(status.ttl_remaining(), Some(Duration::from_millis(1_500)));
        assert!(!status.is_expired());
        assert_eq!(status.kind(), LockKind::Exclusive);

        row.insert("remainingMs", -20_i64);
        let status = decode_status(&row).unwrap();
        assert_eq!(status.ttl_remaining(), Some(Duration::ZERO));
        assert!(status.is_expired());

        row.insert("remainingMs", Bson::Null);
        assert_eq!(decode_status(&row).unwrap().ttl_remaining(), None);

        row.insert("kind", "upgradable");
        assert!(matches!(
            decode_status(&row).unwrap_err().kind(),
            ErrorKind::UnexpectedDocument { .. }
        ));
    }

    #[test]
    fn user_strings_are_sent_as_literals() {
        assert_eq!(literal("$$NOW"), bson!({ "$literal": "$$NOW" }));
    }

    #[test]
    fn only_one_stage_and_foreign_documents_pass_through() {
        let stage = replace_if_lock_document(bson!("$$ROOT"));
        let cond = stage
            .get_document("$replaceWith")
            .unwrap()
            .get_document("$cond")
            .unwrap();
        assert_eq!(cond.get_str("else").unwrap(), "$$ROOT");
        assert_eq!(cond.get("if").unwrap(), &is_lock_document());
    }
}
