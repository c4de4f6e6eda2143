//! The cursor table: the open cursors of the server, each the rest of a query's results or
//! a change stream, under the id that `getMore` and `killCursors` name.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};

use bson::Document;
use parking_lot::Mutex;

use super::change_stream::ChangeStream;
use super::cursor_batch::cursor_reply;
use crate::engine::error::{CommandError, Result, codes};

/// Documents a first batch holds when the client names no `batchSize` (as mongod).
pub const DEFAULT_FIRST_BATCH: usize = 101;
/// Bytes a batch may hold (as mongod, about 16 MiB).
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// One open cursor.
#[derive(Debug)]
pub(super) struct Cursor {
    ns: String,
    pub(super) kind: CursorKind,
}

/// What an open cursor returns batches from.
#[derive(Debug)]
pub(super) enum CursorKind {
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

/// Takes the next batch: up to `limit` documents and [`MAX_BATCH_BYTES`] (at least one).
pub(super) fn take_batch(docs: &mut VecDeque<Document>, limit: Option<usize>) -> Vec<Document> {
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

    /// Takes cursor `id` of namespace `ns` out of the table, for a `getMore` to read.
    pub(super) fn take(&self, id: i64, ns: &str) -> Result<Cursor> {
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

    /// Puts a cursor taken out by [`Cursors::take`] back under its id.
    pub(super) fn put_back(&self, id: i64, cursor: Cursor) {
        self.open.lock().insert(id, cursor);
    }

    /// Closes a cursor; returns whether it was open.
    pub fn kill(&self, id: i64) -> bool {
        self.open.lock().remove(&id).is_some()
    }
}
