//! Cursors: batches for `find` and `aggregate`, `getMore` and `killCursors`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};

use bson::{Bson, Document, doc};
use parking_lot::Mutex;

use super::{Ctx, args, cursor_reply};
use crate::engine::error::{CommandError, Result, codes};

/// Documents a first batch holds when the client names no `batchSize` (as mongod).
pub const DEFAULT_FIRST_BATCH: usize = 101;
/// Bytes a batch may hold (as mongod, about 16 MiB).
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug)]
struct Cursor {
    ns: String,
    remaining: VecDeque<Document>,
}

/// Open cursors of the server.
#[derive(Debug)]
pub struct Cursors {
    next_id: AtomicI64,
    open: Mutex<HashMap<i64, Cursor>>,
}

impl Default for Cursors {
    fn default() -> Self {
        // Start from a random point so ids look like mongod's and differ between servers.
        let start = rand::random::<u32>() as i64 * 1000 + 1;
        Self {
            next_id: AtomicI64::new(start),
            open: Mutex::new(HashMap::new()),
        }
    }
}

fn take_batch(docs: &mut VecDeque<Document>, limit: Option<usize>) -> Vec<Document> {
    let mut batch = Vec::new();
    let mut bytes = 0;
    while let Some(doc) = docs.front() {
        if limit.is_some_and(|l| batch.len() >= l) {
            break;
        }
        let size = doc_size(doc);
        if !batch.is_empty() && bytes + size > MAX_BATCH_BYTES {
            break;
        }
        bytes += size;
        batch.push(docs.pop_front().expect("front exists"));
    }
    batch
}

fn doc_size(doc: &Document) -> usize {
    let mut buf = Vec::new();
    doc.to_writer(&mut buf).map(|_| buf.len()).unwrap_or(0)
}

impl Cursors {
    /// Builds a first-batch reply; keeps the rest open under a new id unless `single_batch`.
    pub fn first_batch(
        &self,
        ns: &str,
        results: Vec<Document>,
        batch_size: Option<usize>,
        single_batch: bool,
    ) -> Document {
        let mut remaining: VecDeque<Document> = results.into();
        let batch = take_batch(
            &mut remaining,
            Some(batch_size.unwrap_or(DEFAULT_FIRST_BATCH)),
        );
        let id = if remaining.is_empty() || single_batch {
            0
        } else {
            let id = self.next_id.fetch_add(1, Ordering::SeqCst);
            self.open.lock().insert(
                id,
                Cursor {
                    ns: ns.to_string(),
                    remaining,
                },
            );
            id
        };
        cursor_reply(id, ns, batch, true)
    }

    fn next_batch(&self, id: i64, ns: &str, batch_size: Option<usize>) -> Result<Document> {
        let mut open = self.open.lock();
        let cursor = open.get_mut(&id).ok_or_else(|| {
            CommandError::new(codes::CURSOR_NOT_FOUND, format!("cursor id {id} not found"))
        })?;
        if cursor.ns != ns {
            return Err(CommandError::new(
                13,
                format!(
                    "Requested getMore on namespace '{ns}', but cursor belongs to a different namespace {}",
                    cursor.ns
                ),
            ));
        }
        let batch = take_batch(&mut cursor.remaining, batch_size);
        let reply_id = if cursor.remaining.is_empty() {
            open.remove(&id);
            0
        } else {
            id
        };
        Ok(cursor_reply(reply_id, ns, batch, false))
    }

    /// Closes a cursor; returns whether it was open.
    pub fn kill(&self, id: i64) -> bool {
        self.open.lock().remove(&id).is_some()
    }
}

/// `getMore`.
///
/// # Cancel safety
/// Cancel safe: the batch is taken from the cursor only once the future completes.
pub async fn get_more(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(
        cmd,
        "getMore",
        &[
            "collection",
            "batchSize",
            "maxTimeMS",
            "term",
            "lastKnownCommittedOpTime",
        ],
    )?;
    let id = match cmd.get("getMore") {
        Some(Bson::Int64(id)) => *id,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'getMore.getMore' is the wrong type '{}', expected type 'long'",
                crate::engine::compare::type_alias(other)
            )));
        }
        None => return Err(args::missing("getMore", "getMore")),
    };
    let collection = match cmd.get("collection") {
        Some(Bson::String(c)) => c.clone(),
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'getMore.collection' is the wrong type, expected type 'string'",
            ));
        }
        None => return Err(args::missing("getMore", "collection")),
    };
    let batch_size = args::opt_non_negative(cmd, "getMore", "batchSize")?
        .filter(|n| *n > 0)
        .map(|n| n as usize);
    let ns = format!("{}.{}", ctx.db, collection);
    ctx.state.cursors.next_batch(id, &ns, batch_size)
}

/// `killCursors`.
pub fn kill_cursors(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "killCursors", &["cursors"])?;
    args::collection_name(cmd, "killCursors")?;
    let ids = args::array(cmd, "killCursors", "cursors")?;
    let mut killed = Vec::new();
    let mut not_found = Vec::new();
    for id in ids {
        let Bson::Int64(id) = id else {
            return Err(CommandError::type_mismatch(
                "BSON field 'killCursors.cursors' is the wrong type, expected type 'long'",
            ));
        };
        if ctx.state.cursors.kill(*id) {
            killed.push(Bson::Int64(*id));
        } else {
            not_found.push(Bson::Int64(*id));
        }
    }
    Ok(doc! {
        "cursorsKilled": killed,
        "cursorsNotFound": not_found,
        "cursorsAlive": [],
        "cursorsUnknown": [],
    })
}
