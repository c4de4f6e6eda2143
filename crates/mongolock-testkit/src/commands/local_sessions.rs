//! The logical sessions this server has seen, for `$listLocalSessions`.
//!
//! mongod keeps a cache of the sessions its commands used (an `lsid` registers or refreshes
//! one); `endSessions` removes them and they expire after `localLogicalSessionTimeoutMinutes`
//! (30) without use. The emulator has no users, so every session belongs to the
//! unauthenticated user, whose `uid` is the SHA-256 of the empty string, as in mongod.

use std::collections::HashMap;

use bson::{Binary, Bson, DateTime, Document, doc, spec::BinarySubtype};
use parking_lot::Mutex;

use crate::engine::compare::type_alias;
use crate::engine::error::{CommandError, Result, codes};

/// SHA-256 of "": the `uid` of sessions used without authentication.
const NO_AUTH_UID: [u8; 32] = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
    0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

/// `localLogicalSessionTimeoutMinutes`, in milliseconds.
const SESSION_TIMEOUT_MS: i64 = 30 * 60 * 1000;

#[derive(Debug, Clone)]
struct Entry {
    id: Binary,
    uid: Binary,
    last_use: DateTime,
}

/// The local logical session cache.
#[derive(Debug, Default)]
pub struct LocalSessions {
    sessions: Mutex<HashMap<Vec<u8>, Entry>>,
}

impl LocalSessions {
    /// Records (or refreshes) the session of a command that carries a valid `lsid`.
    pub fn touch(&self, cmd: &Document, now: DateTime) {
        let Ok(lsid) = cmd.get_document("lsid") else {
            return;
        };
        let Some(Bson::Binary(id)) = lsid.get("id") else {
            return;
        };
        let uid = match lsid.get("uid") {
            Some(Bson::Binary(uid)) => uid.clone(),
            _ => Binary {
                subtype: BinarySubtype::Generic,
                bytes: NO_AUTH_UID.to_vec(),
            },
        };
        self.sessions.lock().insert(
            id.bytes.clone(),
            Entry {
                id: id.clone(),
                uid,
                last_use: now,
            },
        );
    }

    /// Forgets ended sessions (`endSessions`), given their `id` bytes.
    pub fn end(&self, ids: &[Vec<u8>]) {
        let mut sessions = self.sessions.lock();
        for id in ids {
            sessions.remove(id);
        }
    }

    /// The documents `$listLocalSessions` returns: `{_id: {id, uid}, lastUse}`.
    pub fn list(&self, now: DateTime) -> Vec<Document> {
        let mut sessions = self.sessions.lock();
        sessions.retain(|_, e| {
            now.timestamp_millis() - e.last_use.timestamp_millis() < SESSION_TIMEOUT_MS
        });
        let mut entries: Vec<&Entry> = sessions.values().collect();
        entries.sort_by_key(|e| std::cmp::Reverse(e.last_use));
        entries
            .into_iter()
            .map(
                |e| doc! {"_id": {"id": e.id.clone(), "uid": e.uid.clone()}, "lastUse": e.last_use},
            )
            .collect()
    }
}

/// Runs a `$listLocalSessions` stage: `{}`, `{allUsers: true}` or `{users: [{user, db}]}`.
/// Without authentication there are no users, so a `users` list matches no session.
pub fn list_local_sessions(
    sessions: &LocalSessions,
    spec: &Bson,
    now: DateTime,
) -> Result<Vec<Document>> {
    let Bson::Document(spec) = spec else {
        return Err(CommandError::type_mismatch(format!(
            "$listLocalSessions options must be a document, not {}",
            type_alias(spec)
        )));
    };
    let mut all_users = false;
    let mut users: Option<&Vec<Bson>> = None;
    for (field, value) in spec {
        match (field.as_str(), value) {
            ("allUsers", Bson::Boolean(b)) => all_users = *b,
            ("users", Bson::Array(list)) => users = Some(list),
            ("allUsers", other) | ("users", other) => {
                let expected = if field == "allUsers" { "bool" } else { "array" };
                return Err(CommandError::type_mismatch(format!(
                    "BSON field '$listLocalSessions.{field}' is the wrong type '{}', expected type '{expected}'",
                    type_alias(other)
                )));
            }
            (other, _) => {
                return Err(CommandError::new(
                    codes::UNKNOWN_BSON_FIELD,
                    format!("BSON field '$listLocalSessions.{other}' is an unknown field."),
                ));
            }
        }
    }
    if all_users && users.is_some() {
        return Err(CommandError::bad_value(
            "$listLocalSessions: May not specify both 'users' and 'allUsers'",
        ));
    }
    match users {
        Some(list) if !list.is_empty() => Ok(Vec::new()),
        _ => Ok(sessions.list(now)),
    }
}
