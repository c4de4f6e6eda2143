//! Cursors: batches for `find` and `aggregate`, `getMore` and `killCursors`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bson::{Bson, Document, doc};
use parking_lot::Mutex;

use super::change_stream::{ChangeStream, DEFAULT_AWAIT};
use super::{Ctx, args, cursor_reply};
use crate::engine::error::{CommandError, Result, codes};

/// Documents a first batch holds when the client names no `batchSize` (as mongod).
pub const DEFAULT_FIRST_BATCH: usize = 101;
/// Bytes a batch may hold (as mongod, about 16 MiB).
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug)]
struct Cursor {
    ns: String,
    kind: CursorKind,
}

#[derive(Debug)]
enum CursorKind {
    /// The rest of a query's results.
    Results(VecDeque<Document>),
    /// A change stream: batches come from the change log as writes commit.
    Stream(Box<ChangeStream>),
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
                    kind: CursorKind::Results(remaining),
                },
            );
            id
        };
        cursor_reply(id, ns, batch, true)
    }

    /// Keeps a change stream open under a new cursor id.
    pub fn open_stream(&self, ns: &str, stream: ChangeStream) -> i64 {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        self.open.lock().insert(
            id,
            Cursor {
                ns: ns.to_string(),
                kind: CursorKind::Stream(Box::new(stream)),
            },
        );
        id
    }

    fn take(&self, id: i64, ns: &str) -> Result<Cursor> {
        let mut open = self.open.lock();
        let cursor = open.get(&id).ok_or_else(|| {
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
        Ok(open.remove(&id).expect("present"))
    }

    fn put_back(&self, id: i64, cursor: Cursor) {
        self.open.lock().insert(id, cursor);
    }

    /// Closes a cursor; returns whether it was open.
    pub fn kill(&self, id: i64) -> bool {
        self.open.lock().remove(&id).is_some()
    }
}

/// `getMore`.
///
/// On a change stream with no new events it waits up to `maxTimeMS` (default one second)
/// for one, as mongod's awaitData cursors do.
///
/// # Cancel safety
/// Not cancel safe: the cursor is out of the cursor table while the command runs, so
/// dropping the future mid-wait closes it (the next getMore answers CursorNotFound).
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
    let max_time = args::opt_non_negative(cmd, "getMore", "maxTimeMS")?
        .map(|ms| Duration::from_millis(ms as u64));
    let ns = format!("{}.{}", ctx.db, collection);
    let eval = ctx.eval_context(cmd, "getMore")?;
    let cursors = &ctx.state.cursors;
    let mut cursor = cursors.take(id, &ns)?;
    // The cursor is out of the table while this getMore runs; it goes back unless exhausted
    // or the getMore fails (mongod deletes a cursor whose getMore failed).
    let is_stream = matches!(cursor.kind, CursorKind::Stream(_));
    if let Some(error) = ctx.state.fail_points.fail_get_more_after_cursor_checkout() {
        return Err(label_stream_error(error, is_stream));
    }
    let result = match &mut cursor.kind {
        CursorKind::Results(remaining) => {
            let batch = take_batch(remaining, batch_size);
            let exhausted = remaining.is_empty();
            Ok((batch, exhausted, None))
        }
        CursorKind::Stream(stream) => {
            let deadline = tokio::time::Instant::now() + max_time.unwrap_or(DEFAULT_AWAIT);
            loop {
                match stream.next_batch(ctx.state, batch_size, &eval) {
                    Err(error) => break Err(error),
                    Ok(batch) if !batch.is_empty() || stream.invalidated => {
                        break Ok((batch, stream.invalidated, Some(stream.post_batch_token())));
                    }
                    Ok(_) => {}
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    break Ok((Vec::new(), false, Some(stream.post_batch_token())));
                }
                ctx.state
                    .catalog
                    .changes
                    .wait_for_append(stream.seen_seq(), deadline - now)
                    .await;
            }
        }
    };
    let (batch, exhausted, token) = match result {
        Ok(done) => done,
        Err(error) => return Err(label_stream_error(error, is_stream)),
    };
    let reply_id = if exhausted { 0 } else { id };
    if !exhausted {
        cursors.put_back(id, cursor);
    }
    let mut reply = cursor_reply(reply_id, &ns, batch, false);
    if let (Some(token), Ok(body)) = (token, reply.get_document_mut("cursor")) {
        body.insert("postBatchResumeToken", token);
    }
    Ok(reply)
}

/// A change stream's getMore error carries mongod's resumability label.
fn label_stream_error(error: CommandError, is_stream: bool) -> CommandError {
    if is_stream {
        super::change_stream::label_error(error)
    } else {
        error
    }
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
