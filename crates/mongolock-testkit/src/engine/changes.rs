//! The change log: every committed write, in commit order, for change streams.
//!
//! Collections append here while they hold their own lock, so the log's order is the commit
//! order. It keeps a bounded window (like an oplog); a stream that resumes from before the
//! window fails with `ChangeStreamHistoryLost`, as mongod does when the oplog rolled over.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bson::{Bson, DateTime, Document, Timestamp, doc};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::faults::clock::Clock;

/// Events kept for resuming streams.
const WINDOW: usize = 100_000;

/// What a write did.
#[derive(Debug, Clone)]
pub enum ChangeKind {
    /// A document was inserted (also by an upsert).
    Insert {
        /// The new document.
        doc: Document,
    },
    /// A document was modified by an update with operators or a pipeline.
    Update {
        /// The document's `_id`.
        id: Bson,
        /// Fields set, by top-level name.
        updated: Document,
        /// Fields removed.
        removed: Vec<String>,
    },
    /// A document was replaced by a replacement update.
    Replace {
        /// The new document.
        doc: Document,
    },
    /// A document was deleted (also by the TTL monitor).
    Delete {
        /// The document's `_id`.
        id: Bson,
    },
    /// The collection was dropped.
    Drop,
    /// The database was dropped.
    DropDatabase,
}

/// One committed change.
#[derive(Debug, Clone)]
pub struct ChangeEvent {
    /// Position in the log; the resume token encodes it.
    pub seq: u64,
    /// The cluster time of the write.
    pub cluster_time: Timestamp,
    /// The server clock at the write.
    pub wall_time: DateTime,
    /// Database name.
    pub db: String,
    /// Collection name (empty for `DropDatabase`).
    pub coll: String,
    /// What happened.
    pub kind: ChangeKind,
}

/// The resume token of the event at `seq`: an opaque `{_data: hex}` that sorts in log order.
pub fn resume_token(seq: u64) -> Document {
    doc! {"_data": format!("{seq:016X}")}
}

/// The log position a resume token names, if it is one of ours.
pub fn token_seq(token: &Document) -> Option<u64> {
    let data = token.get_str("_data").ok()?;
    u64::from_str_radix(data, 16).ok()
}

#[derive(Debug, Default)]
struct Inner {
    events: VecDeque<Arc<ChangeEvent>>,
    /// Sequence number the next event gets; events start at 1.
    next_seq: u64,
}

/// The server-wide change log.
#[derive(Debug)]
pub struct ChangeLog {
    clock: Clock,
    counter: AtomicU32,
    inner: Mutex<Inner>,
    appended: Notify,
}

impl ChangeLog {
    /// An empty log reading time from `clock`.
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            counter: AtomicU32::new(1),
            inner: Mutex::new(Inner {
                events: VecDeque::new(),
                next_seq: 1,
            }),
            appended: Notify::new(),
        }
    }

    /// The next cluster time: the clock's seconds and an increasing counter.
    pub fn cluster_time(&self) -> Timestamp {
        let secs = (self.clock.now().timestamp_millis() / 1000).max(0) as u32;
        Timestamp {
            time: secs,
            increment: self.counter.fetch_add(1, Ordering::SeqCst),
        }
    }

    /// Appends an event and wakes waiting streams.
    pub fn append(&self, db: &str, coll: &str, kind: ChangeKind) {
        let cluster_time = self.cluster_time();
        let wall_time = self.clock.now();
        {
            let mut inner = self.inner.lock();
            let seq = inner.next_seq;
            inner.next_seq += 1;
            inner.events.push_back(Arc::new(ChangeEvent {
                seq,
                cluster_time,
                wall_time,
                db: db.to_string(),
                coll: coll.to_string(),
                kind,
            }));
            if inner.events.len() > WINDOW {
                inner.events.pop_front();
            }
        }
        self.appended.notify_waiters();
    }

    /// The sequence number of the newest event (0 when none).
    pub fn last_seq(&self) -> u64 {
        self.inner.lock().next_seq - 1
    }

    /// The oldest sequence number still in the window.
    pub fn first_seq(&self) -> u64 {
        let inner = self.inner.lock();
        inner.events.front().map_or(inner.next_seq, |e| e.seq)
    }

    /// The first sequence number whose cluster time is at or after `time`.
    pub fn seq_at_time(&self, time: Timestamp) -> u64 {
        let inner = self.inner.lock();
        inner
            .events
            .iter()
            .find(|e| {
                (e.cluster_time.time, e.cluster_time.increment) >= (time.time, time.increment)
            })
            .map_or(inner.next_seq, |e| e.seq)
    }

    /// Events with `seq >= from`, at most `limit`.
    pub fn read_from(&self, from: u64, limit: usize) -> Vec<Arc<ChangeEvent>> {
        let inner = self.inner.lock();
        let first = inner.events.front().map_or(inner.next_seq, |e| e.seq);
        let skip = from.saturating_sub(first) as usize;
        inner
            .events
            .iter()
            .skip(skip)
            .take(limit)
            .cloned()
            .collect()
    }

    /// Waits until an event is appended after this call started, or `timeout` passes.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting consumes nothing.
    pub async fn wait_for_append(&self, since_seq: u64, timeout: std::time::Duration) {
        let notified = self.appended.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.last_seq() > since_seq {
            return;
        }
        let _ = tokio::time::timeout(timeout, notified).await;
    }
}

/// The top-level difference between two versions of a document, as `updateDescription`.
pub fn diff(before: &Document, after: &Document) -> (Document, Vec<String>) {
    let mut updated = Document::new();
    for (key, value) in after {
        if before.get(key) != Some(value) {
            updated.insert(key.clone(), value.clone());
        }
    }
    let removed = before
        .keys()
        .filter(|k| !after.contains_key(*k))
        .cloned()
        .collect();
    (updated, removed)
}
