//! The change log: every committed write, in commit order, for change streams.
//!
//! Collections append here while they hold their own lock, so the log's order is the commit
//! order. It keeps a bounded window, like an oplog (a capped collection, bounded by size): the
//! newest [`WINDOW`] events at most, and no more than [`WINDOW_BYTES`] of them. A stream that
//! resumes from before the window, or whose cursor falls behind it, fails with
//! `ChangeStreamHistoryLost` (286), as mongod does when the oplog rolled over.
//!
//! The documents an event holds (an inserted document, an update's description, pre- and
//! post-images) are kept as BSON bytes, as an oplog keeps them: the window's byte count is
//! then what the log really holds in memory, not a fraction of it (a parsed document takes
//! several times its BSON size), and streams read them back when they deliver the event.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bson::{Bson, DateTime, Document, RawDocumentBuf, Timestamp, Uuid, doc};
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::update_description::UpdateDescription;
use crate::faults::clock::Clock;

/// Events kept for resuming streams, at most.
pub const WINDOW: usize = 100_000;

/// The size of the events kept, at most, counted as their documents' BSON size plus a fixed
/// overhead per event ([`ChangeEvent::counted_size`]), as an oplog is capped by its size.
/// Events keep their documents as BSON bytes, so this is about what the log holds in
/// memory. 8 MiB keeps about 25,000 renewals of a lock document (2.5 renewals of 10,000
/// leases, two and a half seconds of history for a client holding them, at least ten times
/// what a stream of a live client lags behind).
pub const WINDOW_BYTES: usize = 8 * 1024 * 1024;

/// The fixed part of an event's counted size: what an oplog entry holds besides the
/// document (time, namespace, UUID, operation), and the event's own bookkeeping.
const EVENT_OVERHEAD: usize = 256;

/// What a write did.
#[derive(Debug, Clone)]
pub enum ChangeKind {
    /// A document was inserted (also by an upsert).
    Insert {
        /// The new document.
        doc: RawDocumentBuf,
    },
    /// A document was modified by an update with operators or a pipeline.
    Update {
        /// The document's `_id`.
        id: Bson,
        /// What changed: the `updateDescription` with `disambiguatedPaths`
        /// ([`UpdateDescription::to_document`] expanded); a stream without
        /// `showExpandedEvents` leaves that field out.
        description: RawDocumentBuf,
        /// The document before, when the collection records pre- and post-images.
        pre_image: Option<RawDocumentBuf>,
        /// The document after, when the collection records pre- and post-images.
        post_image: Option<RawDocumentBuf>,
    },
    /// A document was replaced by a replacement update.
    Replace {
        /// The new document.
        doc: RawDocumentBuf,
        /// The document before, when the collection records pre-images.
        pre_image: Option<RawDocumentBuf>,
    },
    /// A document was deleted (also by the TTL monitor).
    Delete {
        /// The document's `_id`.
        id: Bson,
        /// The document before, when the collection records pre-images.
        pre_image: Option<RawDocumentBuf>,
    },
    /// The collection was dropped.
    Drop,
    /// The database was dropped.
    DropDatabase,
    /// The collection was renamed.
    Rename {
        /// The new database.
        to_db: String,
        /// The new collection name.
        to_coll: String,
        /// The UUID of the collection `dropTarget` replaced, if one existed.
        drop_target: Option<Uuid>,
    },
    /// A collection was created, explicitly or by a first write (expanded event).
    Create {
        /// `operationDescription`.
        description: Document,
    },
    /// Indexes were built (expanded event).
    CreateIndexes {
        /// The index specifications.
        indexes: Vec<Document>,
    },
    /// Indexes were dropped (expanded event).
    DropIndexes {
        /// The index specifications.
        indexes: Vec<Document>,
    },
    /// `collMod` changed the collection's options (expanded event).
    Modify {
        /// `operationDescription`: the options given.
        description: Document,
    },
}

impl ChangeKind {
    /// Whether only streams with `showExpandedEvents` see this event.
    pub fn is_expanded(&self) -> bool {
        matches!(
            self,
            ChangeKind::Create { .. }
                | ChangeKind::CreateIndexes { .. }
                | ChangeKind::DropIndexes { .. }
                | ChangeKind::Modify { .. }
        )
    }
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
    /// The collection's UUID (`collectionUUID` in expanded events), when there is one.
    pub collection_uuid: Option<Uuid>,
    /// What happened.
    pub kind: ChangeKind,
    /// The retryable write that appended it, if one did: a primary's oplog entry carries
    /// the write's session (`lsid`, `txnNumber`, `stmtId`), so the members that apply it
    /// know the write ran (see [`RetryableWrite`]).
    pub retryable: Option<Arc<RetryableWrite>>,
}

/// A retryable write (a write command with `lsid` and `txnNumber`) as the oplog entries it
/// writes carry it: its session and transaction number, and how it ended.
///
/// mongod's oplog entries of a retryable write carry its `lsid`, `txnNumber` and `stmtId`,
/// and a member that applies one records the session's `txnNumber` and last write in
/// `config.transactions` (`src/mongo/db/repl/session_update_tracker.cpp`,
/// `createMatchingTransactionTableUpdate`); after it becomes primary, a retry of the
/// statement is answered from the oplog entry (`src/mongo/db/ops/write_ops_retryability.cpp`,
/// `parseOplogEntryForUpdate`, `parseOplogEntryForFindAndModify`), whose reply is the one
/// the write gave. Here the events of the write share this record, and the member that ran
/// the write leaves its reply on it as soon as the write ends.
#[derive(Debug)]
pub struct RetryableWrite {
    /// The session's id (the bytes of `lsid.id`).
    pub lsid: Vec<u8>,
    /// The command's `txnNumber`.
    pub txn_number: i64,
    /// Whether it appended an event (wrote an oplog entry).
    logged: AtomicBool,
    /// How it ended, once it did.
    outcome: tokio::sync::watch::Sender<WriteOutcome>,
}

/// How a [`RetryableWrite`] ended.
#[derive(Debug, Clone)]
enum WriteOutcome {
    /// It still runs on the member that took it.
    Running,
    /// It succeeded with this reply (kept as BSON, as the events are): a retry gets it
    /// back.
    Replied(RawDocumentBuf),
    /// It failed (an error, or write errors): a retry runs it again.
    Failed,
}

impl RetryableWrite {
    /// A write of session `lsid` under `txn_number`, about to run.
    pub fn new(lsid: Vec<u8>, txn_number: i64) -> Self {
        Self {
            lsid,
            txn_number,
            logged: AtomicBool::new(false),
            outcome: tokio::sync::watch::channel(WriteOutcome::Running).0,
        }
    }

    /// Whether it appended an event to a change log (wrote an oplog entry).
    pub fn is_logged(&self) -> bool {
        self.logged.load(Ordering::Acquire)
    }

    /// Records how it ended: the reply a retry gets back, or `None` when a retry runs it
    /// again. Only the first call counts.
    pub fn finish(&self, reply: Option<&Document>) {
        self.outcome.send_if_modified(|outcome| {
            if !matches!(outcome, WriteOutcome::Running) {
                return false;
            }
            *outcome = match reply {
                Some(reply) => WriteOutcome::Replied(stored(reply)),
                None => WriteOutcome::Failed,
            };
            true
        });
    }

    /// The reply a retry gets back, once the write ended: `None` if it failed. A member
    /// that applied the write's entries while the member that took it had not yet answered
    /// waits for that answer.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting changes nothing.
    pub async fn reply(&self) -> Option<Document> {
        let mut outcome = self.outcome.subscribe();
        let ended = outcome
            .wait_for(|o| !matches!(o, WriteOutcome::Running))
            .await;
        match ended.as_deref() {
            Ok(WriteOutcome::Replied(reply)) => Some(unstored(reply)),
            _ => None,
        }
    }
}

impl ChangeEvent {
    /// The size this event counts for in the window: the BSON size of what it holds plus a
    /// fixed overhead.
    pub fn counted_size(&self) -> usize {
        use super::size::{document_size, value_size};
        let raw = |docs: &[Option<&RawDocumentBuf>]| -> usize {
            docs.iter().flatten().map(|d| d.as_bytes().len()).sum()
        };
        let held = match &self.kind {
            ChangeKind::Insert { doc } => doc.as_bytes().len(),
            ChangeKind::Update {
                id,
                description,
                pre_image,
                post_image,
            } => {
                value_size(id)
                    + description.as_bytes().len()
                    + raw(&[pre_image.as_ref(), post_image.as_ref()])
            }
            ChangeKind::Replace { doc, pre_image } => {
                doc.as_bytes().len() + raw(&[pre_image.as_ref()])
            }
            ChangeKind::Delete { id, pre_image } => value_size(id) + raw(&[pre_image.as_ref()]),
            ChangeKind::Create { description } | ChangeKind::Modify { description } => {
                document_size(description)
            }
            ChangeKind::CreateIndexes { indexes } | ChangeKind::DropIndexes { indexes } => {
                indexes.iter().map(document_size).sum()
            }
            ChangeKind::Drop | ChangeKind::DropDatabase | ChangeKind::Rename { .. } => 0,
        };
        EVENT_OVERHEAD + self.db.len() + self.coll.len() + held
    }
}

/// A document as an event keeps it: its BSON bytes.
pub fn stored(doc: &Document) -> RawDocumentBuf {
    // Every stored document was received or built as BSON, so it encodes; an empty
    // document stands for one that does not (a key with a NUL byte cannot be sent either).
    RawDocumentBuf::from_document(doc).unwrap_or_default()
}

/// A document an event keeps, parsed again for delivery.
pub fn unstored(raw: &RawDocumentBuf) -> Document {
    // The bytes were written by `stored`, so they parse.
    crate::wire::to_document(raw).unwrap_or_default()
}

thread_local! {
    /// The time of the oplog entry being applied on this thread, when a secondary applies one.
    static APPLYING: Cell<Option<Timestamp>> = const { Cell::new(None) };
    /// While a command runs on this thread ([`recording_last_op`]): the time of the last
    /// event it appended, if any.
    static LAST_OP: Cell<Option<Option<Timestamp>>> = const { Cell::new(None) };
    /// Set while a member rebuilds its data in a rollback ([`ChangeLog::unlogged`]): what
    /// it applies then appends nothing.
    static UNLOGGED: Cell<bool> = const { Cell::new(false) };
    /// The retryable write running on this thread ([`in_retryable_write`]): the events it
    /// appends carry it.
    static RETRYABLE: RefCell<Option<Arc<RetryableWrite>>> = const { RefCell::new(None) };
}

/// Runs `run` (a retryable write, on this thread) with every event it appends carrying
/// `write`, as the oplog entries of a retryable write carry its session.
pub fn in_retryable_write<T>(write: &Arc<RetryableWrite>, run: impl FnOnce() -> T) -> T {
    /// Puts the thread's previous write back, also if `run` panics.
    struct Restore(Option<Arc<RetryableWrite>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            RETRYABLE.with(|r| *r.borrow_mut() = self.0.take());
        }
    }
    let _restore = Restore(RETRYABLE.with(|r| r.borrow_mut().replace(write.clone())));
    run()
}

/// Runs `run` (a command, on this thread) and returns its result with the cluster time of the
/// last event it appended to a change log, if it appended any: the time of the last oplog
/// entry the command wrote, mongod's client `lastOp` (`repl::ReplClientInfo::getLastOp`),
/// which a write's reply gives as its `operationTime`.
pub fn recording_last_op<T>(run: impl FnOnce() -> T) -> (T, Option<Timestamp>) {
    /// Puts the thread's previous recording back, also if `run` panics.
    struct Restore(Option<Option<Timestamp>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LAST_OP.with(|last| last.set(self.0));
        }
    }
    let restore = Restore(LAST_OP.with(|last| last.replace(Some(None))));
    let result = run();
    let last = LAST_OP.with(Cell::get).flatten();
    drop(restore);
    (result, last)
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

/// Which events of a replica-set member's log its change streams may deliver
/// ([`ChangeLog::set_committed`]).
#[derive(Debug, Default)]
struct Committed {
    /// The newest position at or before the member's majority commit point, and the cluster
    /// time of that point; `None` on a server that is no member of an emulated set, where
    /// every event is delivered.
    point: Option<(u64, Option<Timestamp>)>,
    /// Ranges of positions whose events a rollback undid: never delivered.
    rolled_back: Vec<(u64, u64)>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each event with its counted size.
    events: VecDeque<(Arc<ChangeEvent>, usize)>,
    /// The sum of the counted sizes of `events`.
    bytes: usize,
    /// Sequence number the next event gets; events start at 1.
    next_seq: u64,
}

impl Inner {
    fn first_seq(&self) -> u64 {
        self.events.front().map_or(self.next_seq, |(e, _)| e.seq)
    }
}

/// The server-wide change log.
#[derive(Debug)]
pub struct ChangeLog {
    clock: Clock,
    /// The most events kept.
    max_events: usize,
    /// The most bytes of events kept (see [`ChangeEvent::counted_size`]).
    max_bytes: usize,
    /// The cluster time: its seconds and its counter (which, unlike mongod's, does not start
    /// over with each second; times still compare as mongod's do, seconds first).
    time: Mutex<(u32, u32)>,
    inner: Mutex<Inner>,
    /// What change streams may deliver (everything, unless the server is a set member).
    committed: Mutex<Committed>,
    appended: Notify,
    /// Whether a pipeline update may be logged as a delta (MongoDB 5.0 and later); before
    /// 5.0 every one is logged as a replacement.
    pipeline_deltas: bool,
}

impl ChangeLog {
    /// An empty log that keeps at most `max_events` events and `max_bytes` of them (counted
    /// by [`ChangeEvent::counted_size`]); the newest event is always kept.
    pub fn with_window(clock: Clock, max_events: usize, max_bytes: usize) -> Self {
        Self {
            clock,
            max_events: max_events.max(1),
            max_bytes,
            time: Mutex::new((0, 0)),
            inner: Mutex::new(Inner {
                events: VecDeque::new(),
                bytes: 0,
                next_seq: 1,
            }),
            committed: Mutex::new(Committed::default()),
            appended: Notify::new(),
            pipeline_deltas: true,
        }
    }

    /// Logs every pipeline update as a replacement, as MongoDB did before 5.0.
    pub fn without_pipeline_deltas(mut self) -> Self {
        self.pipeline_deltas = false;
        self
    }

    /// What a pipeline update from `before` to `after` logs: its `updateDescription` when
    /// it is logged as a delta, `None` when it is logged as a replacement (see
    /// [`super::delta`]).
    pub fn pipeline_change(
        &self,
        before: &Document,
        after: &Document,
    ) -> Option<UpdateDescription> {
        if self.pipeline_deltas {
            super::delta::pipeline_delta(before, after)
        } else {
            None
        }
    }

    /// The next cluster time (a tick, as `LogicalClock::reserveTicks` reserves one,
    /// `src/mongo/db/logical_clock.cpp`): the clock's seconds when they are ahead of the
    /// cluster time's, else the cluster time's, with an increasing counter. Its seconds never
    /// go back, when the clock does (see [`Clock::highest`]), and never fall below a time
    /// the server took from the rest of the set ([`ChangeLog::advance_cluster_time`]).
    pub fn cluster_time(&self) -> Timestamp {
        let secs = (self.clock.highest().timestamp_millis() / 1000).max(0) as u32;
        let mut time = self.time.lock();
        time.0 = time.0.max(secs);
        time.1 = time.1.wrapping_add(1);
        Timestamp {
            time: time.0,
            increment: time.1,
        }
    }

    /// The cluster time now, without a tick (what the server gossips to the others).
    pub fn current_cluster_time(&self) -> Timestamp {
        let time = self.time.lock();
        Timestamp {
            time: time.0,
            increment: time.1,
        }
    }

    /// Moves the cluster time up to `to` if it is behind it, as mongod's
    /// `LogicalClock::advanceClusterTime` does with a time it receives
    /// (`src/mongo/db/logical_clock.cpp`: "if (newTime > _clusterTime) _clusterTime =
    /// newTime"): from an oplog entry it applies, and from the `$clusterTime` the other
    /// members gossip. Its next tick is then past `to`.
    pub fn advance_cluster_time(&self, to: Timestamp) {
        let mut time = self.time.lock();
        if (to.time, to.increment) > *time {
            *time = (to.time, to.increment);
        }
    }

    /// Runs `apply` (a secondary applying an oplog entry) with every event it appends
    /// stamped with the entry's time `at`, the cluster time moved up to it first: a
    /// secondary's oplog holds the primary's entries with their times.
    pub fn applying<T>(&self, at: Timestamp, apply: impl FnOnce() -> T) -> T {
        /// Puts the thread's previous stamp back, also if `apply` panics (the thread is a
        /// pool's, and runs other work after).
        struct Restore(Option<Timestamp>);
        impl Drop for Restore {
            fn drop(&mut self) {
                APPLYING.with(|a| a.set(self.0));
            }
        }
        self.advance_cluster_time(at);
        let _restore = Restore(APPLYING.with(|a| a.replace(Some(at))));
        apply()
    }

    /// Runs `rebuild` (a member rebuilding its data from the set's history in a rollback)
    /// with nothing it does appended to the log: the log keeps the entries the member had,
    /// as a rollback keeps the oplog up to the common point.
    pub fn unlogged<T>(&self, rebuild: impl FnOnce() -> T) -> T {
        /// Puts the thread's previous setting back, also if `rebuild` panics.
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                UNLOGGED.with(|u| u.set(self.0));
            }
        }
        let _restore = Restore(UNLOGGED.with(|u| u.replace(true)));
        rebuild()
    }

    /// Appends an event and wakes waiting streams.
    pub fn append(&self, db: &str, coll: &str, collection_uuid: Option<Uuid>, kind: ChangeKind) {
        if UNLOGGED.with(Cell::get) {
            return;
        }
        let applying = APPLYING.with(Cell::get);
        let cluster_time = applying.unwrap_or_else(|| self.cluster_time());
        // Only the member that runs a retryable write stamps it on its events (a
        // secondary's are its own record of the entries it applies), and only on document
        // writes: mongod puts the session on the oplog entries of inserts, updates and
        // deletes (`appendOplogEntryChainInfo`, called by `_logInsertOps`, `replLogUpdate`
        // and `replLogDelete`, `src/mongo/db/op_observer/op_observer_impl.cpp`), not on the
        // `create` of a collection the write created (`onCreateCollection` logs it without
        // one).
        let retryable = match (applying, &kind) {
            (
                None,
                ChangeKind::Insert { .. }
                | ChangeKind::Update { .. }
                | ChangeKind::Replace { .. }
                | ChangeKind::Delete { .. },
            ) => RETRYABLE.with(|r| r.borrow().clone()),
            _ => None,
        };
        if let Some(write) = &retryable {
            write.logged.store(true, Ordering::Release);
        }
        LAST_OP.with(|last| {
            if last.get().is_some() {
                last.set(Some(Some(cluster_time)));
            }
        });
        let wall_time = self.clock.now();
        {
            let mut inner = self.inner.lock();
            let seq = inner.next_seq;
            inner.next_seq += 1;
            let event = ChangeEvent {
                seq,
                cluster_time,
                wall_time,
                db: db.to_string(),
                coll: coll.to_string(),
                collection_uuid,
                kind,
                retryable,
            };
            let size = event.counted_size();
            inner.events.push_back((Arc::new(event), size));
            inner.bytes += size;
            while inner.events.len() > self.max_events
                || (inner.bytes > self.max_bytes && inner.events.len() > 1)
            {
                let Some((_, size)) = inner.events.pop_front() else {
                    break;
                };
                inner.bytes -= size;
            }
        }
        self.appended.notify_waiters();
    }

    /// Marks this log as a replica-set member's, its change streams delivering events up to
    /// position `seq`, the member's majority commit point (whose cluster time is `time`;
    /// none before anything is committed), and wakes waiting streams when it moved. mongod's
    /// change streams read at majority read concern (see [`crate::commands::change_stream`]).
    pub fn set_committed(&self, seq: u64, time: Option<Timestamp>) {
        let moved = {
            let mut committed = self.committed.lock();
            let moved = committed.point.is_none_or(|(s, _)| s != seq);
            committed.point = Some((seq, time));
            moved
        };
        if moved {
            self.appended.notify_waiters();
        }
    }

    /// Marks the positions `from..=to` as undone by a rollback: no stream delivers them.
    pub fn mark_rolled_back(&self, from: u64, to: u64) {
        if from <= to {
            self.committed.lock().rolled_back.push((from, to));
        }
    }

    /// Whether the event at `seq` was undone by a rollback.
    pub fn is_rolled_back(&self, seq: u64) -> bool {
        (self.committed.lock().rolled_back.iter()).any(|&(from, to)| (from..=to).contains(&seq))
    }

    /// The newest position change streams may deliver: the last one, or on a set member the
    /// last at or before its majority commit point.
    pub fn deliverable_seq(&self) -> u64 {
        let last = self.last_seq();
        match self.committed.lock().point {
            Some((seq, _)) => seq.min(last),
            None => last,
        }
    }

    /// The cluster time of the member's majority commit point, on a set member that has one.
    pub fn committed_time(&self) -> Option<Timestamp> {
        self.committed.lock().point.and_then(|(_, time)| time)
    }

    /// The cluster time of the newest event, if any: the newest oplog entry's time.
    pub fn newest_time(&self) -> Option<Timestamp> {
        self.inner.lock().events.back().map(|(e, _)| e.cluster_time)
    }

    /// The sequence number of the newest event (0 when none).
    pub fn last_seq(&self) -> u64 {
        self.inner.lock().next_seq - 1
    }

    /// The oldest sequence number still in the window.
    pub fn first_seq(&self) -> u64 {
        self.inner.lock().first_seq()
    }

    /// The number of events kept and their counted size in bytes.
    #[cfg(test)]
    pub fn window(&self) -> (usize, usize) {
        let inner = self.inner.lock();
        (inner.events.len(), inner.bytes)
    }

    /// The first sequence number whose cluster time is at or after `time`.
    pub fn seq_at_time(&self, time: Timestamp) -> u64 {
        let inner = self.inner.lock();
        inner
            .events
            .iter()
            .find(|(e, _)| {
                (e.cluster_time.time, e.cluster_time.increment) >= (time.time, time.increment)
            })
            .map_or(inner.next_seq, |(e, _)| e.seq)
    }

    /// Events with `seq >= from`, at most `limit`; `None` when events from `from` on are no
    /// longer all in the window (the history a reader needs was lost).
    pub fn read_from(&self, from: u64, limit: usize) -> Option<Vec<Arc<ChangeEvent>>> {
        let inner = self.inner.lock();
        let first = inner.first_seq();
        if from < first {
            return None;
        }
        let skip = (from - first) as usize;
        Some(
            inner
                .events
                .iter()
                .skip(skip)
                .take(limit)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }

    /// Events a change stream may deliver with `seq >= from` (see
    /// [`ChangeLog::deliverable_seq`]), at most `limit`, rolled-back ones included (the
    /// stream reads past them); `None` when events from `from` on are no longer all in the
    /// window.
    pub fn read_deliverable(&self, from: u64, limit: usize) -> Option<Vec<Arc<ChangeEvent>>> {
        let until = self.deliverable_seq();
        let mut events = self.read_from(from, limit)?;
        events.retain(|e| e.seq <= until);
        Some(events)
    }

    /// Waits until an event past `since_seq` is deliverable (appended, and on a set member
    /// majority-committed) or `timeout` passes.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting consumes nothing.
    pub async fn wait_for_append(&self, since_seq: u64, timeout: std::time::Duration) {
        let notified = self.appended.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.deliverable_seq() > since_seq {
            return;
        }
        let _ = tokio::time::timeout(timeout, notified).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(n: i32, pad: usize) -> ChangeKind {
        ChangeKind::Insert {
            doc: stored(&doc! {"_id": n, "pad": "x".repeat(pad)}),
        }
    }

    /// A command's last op is the time of the last event it appended; a secondary's applied
    /// events keep the primary's time and move its cluster time up to it.
    #[test]
    fn a_command_s_last_op_and_an_applied_entry_s_time() {
        let log = ChangeLog::with_window(Clock::default(), 10, usize::MAX);
        let (_, none) = recording_last_op(|| ());
        assert_eq!(none, None);
        let ((), last) = recording_last_op(|| {
            log.append("d", "c", None, insert(1, 0));
            log.append("d", "c", None, insert(2, 0));
        });
        assert_eq!(last, log.newest_time());
        let ahead = Timestamp {
            time: u32::MAX - 1,
            increment: 7,
        };
        log.applying(ahead, || log.append("d", "c", None, insert(3, 0)));
        assert_eq!(log.newest_time(), Some(ahead));
        let next = log.cluster_time();
        assert_eq!((next.time, next.increment), (ahead.time, 8));
    }

    /// A log that is no set member's delivers every event; a member's delivers up to its
    /// commit point (nothing before one is known), never an event a rollback undid, and a
    /// waiting stream wakes when the point moves.
    #[tokio::test]
    async fn a_member_s_log_delivers_up_to_its_commit_point_and_no_rolled_back_event() {
        let log = Arc::new(ChangeLog::with_window(Clock::default(), 100, usize::MAX));
        for n in 0..3 {
            log.append("d", "c", None, insert(n, 0));
        }
        assert_eq!(log.deliverable_seq(), 3);
        assert_eq!(log.committed_time(), None);
        log.set_committed(0, None);
        assert_eq!(log.deliverable_seq(), 0);
        assert!(log.read_deliverable(1, 10).unwrap().is_empty());
        let time = log.read_from(2, 1).unwrap()[0].cluster_time;
        log.set_committed(2, Some(time));
        let seqs: Vec<u64> = (log.read_deliverable(1, 10).unwrap().iter())
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [1, 2]);
        assert_eq!(log.committed_time(), Some(time));
        log.mark_rolled_back(3, 3);
        assert!(log.is_rolled_back(3) && !log.is_rolled_back(2) && !log.is_rolled_back(4));
        let waiting = {
            let log = log.clone();
            tokio::spawn(async move {
                log.wait_for_append(2, std::time::Duration::from_secs(30))
                    .await
            })
        };
        tokio::task::yield_now().await;
        log.append("d", "c", None, insert(3, 0));
        log.set_committed(4, Some(time));
        tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect("the waiter woke when the commit point moved")
            .unwrap();
        assert_eq!(log.deliverable_seq(), 4);
    }

    #[test]
    fn the_window_is_bounded_by_count_and_by_size() {
        let log = ChangeLog::with_window(Clock::default(), 3, usize::MAX);
        for n in 0..5 {
            log.append("d", "c", None, insert(n, 0));
        }
        assert_eq!((log.first_seq(), log.last_seq()), (3, 5));
        assert!(log.read_from(2, 10).is_none());
        let seqs: Vec<u64> = log
            .read_from(3, 10)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [3, 4, 5]);

        let log = ChangeLog::with_window(Clock::default(), usize::MAX, 2_000);
        for n in 0..10 {
            log.append("d", "c", None, insert(n, 500));
        }
        let (events, bytes) = log.window();
        assert!(bytes <= 2_000, "{bytes}");
        assert_eq!(events, 2); // 782 bytes each
        assert_eq!(log.first_seq(), 9);
        // An event larger than the whole window is still kept (the newest always is).
        log.append("d", "c", None, insert(10, 5_000));
        assert_eq!(log.window().0, 1);
        assert_eq!(log.read_from(11, 10).unwrap()[0].seq, 11);
    }
}
