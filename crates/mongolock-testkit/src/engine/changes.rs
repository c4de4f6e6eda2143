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
    /// The `operationType` of the event documents it produces.
    pub fn operation_type(&self) -> &'static str {
        match self {
            ChangeKind::Insert { .. } => "insert",
            ChangeKind::Update { .. } => "update",
            ChangeKind::Replace { .. } => "replace",
            ChangeKind::Delete { .. } => "delete",
            ChangeKind::Drop => "drop",
            ChangeKind::DropDatabase => "dropDatabase",
            ChangeKind::Rename { .. } => "rename",
            ChangeKind::Create { .. } => "create",
            ChangeKind::CreateIndexes { .. } => "createIndexes",
            ChangeKind::DropIndexes { .. } => "dropIndexes",
            ChangeKind::Modify { .. } => "modify",
        }
    }

    /// The `_id` of the document a document write wrote (its `documentKey`).
    pub fn document_id(&self) -> Option<Bson> {
        match self {
            ChangeKind::Insert { doc } | ChangeKind::Replace { doc, .. } => Some(
                (doc.get("_id").ok().flatten())
                    .and_then(|id| id.to_raw_bson().try_into().ok())
                    .unwrap_or(Bson::Null),
            ),
            ChangeKind::Update { id, .. } | ChangeKind::Delete { id, .. } => Some(id.clone()),
            _ => None,
        }
    }

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
    /// Position in this log (its own: another member's log numbers the same event
    /// differently; its resume token, [`ResumeToken::of_event`], names it on every member).
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
    /// Set while a secondary applies an oplog entry on this thread ([`ChangeLog::applying`]):
    /// what applying it writes appends nothing, the entry itself is appended after.
    static APPLYING: Cell<bool> = const { Cell::new(false) };
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

/// The token type of a high-water mark: mongod's `ResumeTokenData::kHighWaterMarkToken`
/// (`src/mongo/db/pipeline/resume_token.h`), which sorts before an event's at the same time.
const HIGH_WATER_MARK: u8 = 0;

/// The token type of an event: mongod's `ResumeTokenData::kEventToken` (128).
const EVENT: u8 = 128;

/// A resume token as a stream is asked to resume from it, decoded from its `_data`.
///
/// Tokens name an event the same way on every member, as mongod's do
/// (`src/mongo/db/pipeline/resume_token.cpp`, `ResumeToken(const ResumeTokenData&)`: a
/// KeyString of the event's clusterTime, version, tokenType, txnOpIndex, fromInvalidate,
/// uuid and eventIdentifier, hex-encoded as `_data`): `_data` here is the hex of the
/// cluster time (its oplog entry's `ts`: seconds, then increment, big-endian), the token
/// type, and for an event the BSON of its identity (namespace, operation type, document
/// key). So tokens compare as strings in the order of the events' times, a high-water mark
/// before an event at the same time, like mongod's; their bytes are not mongod's KeyString.
/// No index within a time is needed (mongod's `txnOpIndex` tells apart the operations of one
/// transaction, which share its commit time): every write here takes its own tick
/// ([`ChangeLog::cluster_time`]), `insertMany`'s documents too, transactions are refused,
/// and a secondary's log holds the primary's entries one for one
/// ([`ChangeLog::applying`]). An `invalidate` carries its `drop`'s token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeToken {
    /// The cluster time it names.
    pub time: Timestamp,
    /// Its `_data`, upper-case hex; for an event token, what identifies the event.
    data: String,
    /// A high-water mark (a point in time, `postBatchResumeToken` of a batch that passed
    /// the last event) rather than an event.
    pub high_water_mark: bool,
}

impl ResumeToken {
    /// The token of `event`, the `_id` of the change event documents it produces.
    pub fn of_event(event: &ChangeEvent) -> Self {
        let mut identity = doc! {
            "db": event.db.as_str(),
            "coll": event.coll.as_str(),
            "op": event.kind.operation_type(),
        };
        if let Some(key) = event.kind.document_id() {
            identity.insert("documentKey", doc! {"_id": key});
        }
        let mut data = time_hex(event.cluster_time, EVENT);
        for byte in stored(&identity).as_bytes() {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            data.push(char::from(HEX[usize::from(byte >> 4)]));
            data.push(char::from(HEX[usize::from(byte & 0xF)]));
        }
        Self {
            time: event.cluster_time,
            data,
            high_water_mark: false,
        }
    }

    /// A high-water mark at `time` (mongod's `ResumeToken::makeHighWaterMarkToken`): a
    /// stream resumed from it delivers the events at or after `time`.
    pub fn high_water_mark(time: Timestamp) -> Self {
        Self {
            time,
            data: time_hex(time, HIGH_WATER_MARK),
            high_water_mark: true,
        }
    }

    /// The token as a client sees it: `{_data: hex}`.
    pub fn to_document(&self) -> Document {
        doc! {"_data": self.data.clone()}
    }

    /// Whether `event` is the event this token names.
    pub fn names(&self, event: &ChangeEvent) -> bool {
        !self.high_water_mark
            && event.cluster_time == self.time
            && Self::of_event(event).data == self.data
    }

    /// Decodes a token a client gave (`resumeAfter`, `startAfter`).
    ///
    /// # Errors
    ///
    /// As mongod's `ResumeToken::parse` and `getData` (`resume_token.cpp`): 40647 when
    /// `_data` is missing or not a string, `FailedToParse` (9) when it is not hex; a hex
    /// string that is no token of this emulator is `InvalidResumeToken` (260).
    pub fn parse(token: &Document) -> Result<Self, crate::engine::error::CommandError> {
        use crate::engine::error::CommandError;
        let Ok(data) = token.get_str("_data") else {
            return Err(CommandError::new(
                40647,
                format!(
                    "Bad resume token: _data of missing or of wrong type. Expected string, got {token}"
                ),
            ));
        };
        if data.len() % 2 != 0 || !data.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CommandError::new(
                9,
                "resume token string was not a valid hex string",
            ));
        }
        let data = data.to_ascii_uppercase();
        let invalid = || CommandError::new(260, format!("Invalid resume token: {token}"));
        let byte = |at: usize| u8::from_str_radix(data.get(2 * at..2 * at + 2)?, 16).ok();
        let word = |at: usize| u32::from_str_radix(data.get(2 * at..2 * at + 8)?, 16).ok();
        let (Some(secs), Some(increment), Some(kind)) = (word(0), word(4), byte(8)) else {
            return Err(invalid());
        };
        let time = Timestamp {
            time: secs,
            increment,
        };
        match kind {
            HIGH_WATER_MARK if data.len() == 18 => Ok(Self::high_water_mark(time)),
            EVENT if data.len() > 18 => Ok(Self {
                time,
                data,
                high_water_mark: false,
            }),
            _ => Err(invalid()),
        }
    }
}

/// The hex of a token's fixed part: the time and the token type.
fn time_hex(time: Timestamp, kind: u8) -> String {
    format!("{:08X}{:08X}{kind:02X}", time.time, time.increment)
}

/// Whether `time` is at or after `from`, comparing as mongod's timestamps do (seconds,
/// then increment).
pub fn at_or_after(time: Timestamp, from: Timestamp) -> bool {
    (time.time, time.increment) >= (from.time, from.increment)
}

/// The time one tick after `time` (mongod's `LogicalTime::addTicks(1)`: the timestamp as
/// one 64-bit count, seconds high, increment low).
pub fn next_tick(time: Timestamp) -> Timestamp {
    match time.increment.checked_add(1) {
        Some(increment) => Timestamp {
            time: time.time,
            increment,
        },
        None => Timestamp {
            time: time.time.wrapping_add(1),
            increment: 0,
        },
    }
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
    /// The newest cluster time of an event that left the window (none a rollback undid):
    /// history from there back is lost.
    dropped_through: Option<Timestamp>,
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
                dropped_through: None,
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

    /// Runs `apply` (a secondary applying the oplog entry `entry`, a primary's change
    /// event) and, when it succeeds, appends the entry itself: a secondary's oplog holds the
    /// primary's entries as they are, with their times (`ts`) and wall clock times (`wall`),
    /// so its change streams deliver the same events as the primary's, with the same resume
    /// tokens. What applying writes appends nothing of its own. The cluster time moves up to
    /// the entry's first (`LogicalClock::advanceClusterTime`, `src/mongo/db/logical_clock.cpp`).
    ///
    /// # Errors
    ///
    /// `apply`'s error; nothing is appended then.
    pub fn applying<E>(
        &self,
        entry: &ChangeEvent,
        apply: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        /// Puts the thread's previous setting back, also if `apply` panics (the thread is a
        /// pool's, and runs other work after).
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                APPLYING.with(|a| a.set(self.0));
            }
        }
        self.advance_cluster_time(entry.cluster_time);
        {
            let _restore = Restore(APPLYING.with(|a| a.replace(true)));
            apply()?;
        }
        if !UNLOGGED.with(Cell::get) {
            self.push(ChangeEvent {
                seq: 0,
                cluster_time: entry.cluster_time,
                wall_time: entry.wall_time,
                db: entry.db.clone(),
                coll: entry.coll.clone(),
                collection_uuid: entry.collection_uuid,
                kind: entry.kind.clone(),
                retryable: entry.retryable.clone(),
            });
        }
        Ok(())
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
        if UNLOGGED.with(Cell::get) || APPLYING.with(Cell::get) {
            return;
        }
        let cluster_time = self.cluster_time();
        // Only the member that runs a retryable write stamps it on its events (a
        // secondary's log holds the primary's entries as they are, with their session; see
        // [`ChangeLog::applying`]), and only on document writes: mongod puts the session on
        // the oplog entries of inserts, updates and deletes (`appendOplogEntryChainInfo`,
        // called by `_logInsertOps`, `replLogUpdate` and `replLogDelete`,
        // `src/mongo/db/op_observer/op_observer_impl.cpp`), not on the `create` of a
        // collection the write created (`onCreateCollection` logs it without one).
        let retryable = match &kind {
            ChangeKind::Insert { .. }
            | ChangeKind::Update { .. }
            | ChangeKind::Replace { .. }
            | ChangeKind::Delete { .. } => RETRYABLE.with(|r| r.borrow().clone()),
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
        self.push(ChangeEvent {
            seq: 0,
            cluster_time,
            wall_time: self.clock.now(),
            db: db.to_string(),
            coll: coll.to_string(),
            collection_uuid,
            kind,
            retryable,
        });
    }

    /// Appends `event` at the next position, drops what leaves the window, and wakes
    /// waiting streams.
    fn push(&self, mut event: ChangeEvent) {
        {
            let mut inner = self.inner.lock();
            event.seq = inner.next_seq;
            inner.next_seq += 1;
            let size = event.counted_size();
            inner.events.push_back((Arc::new(event), size));
            inner.bytes += size;
            while inner.events.len() > self.max_events
                || (inner.bytes > self.max_bytes && inner.events.len() > 1)
            {
                let Some((dropped, size)) = inner.events.pop_front() else {
                    break;
                };
                inner.bytes -= size;
                // Lock order: `inner`, then `committed`, never the other way.
                if !self.is_rolled_back(dropped.seq) {
                    let time = dropped.cluster_time;
                    inner.dropped_through = Some(match inner.dropped_through {
                        Some(t) if (t.time, t.increment) > (time.time, time.increment) => t,
                        _ => time,
                    });
                }
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
    #[cfg(test)]
    pub fn first_seq(&self) -> u64 {
        self.inner.lock().first_seq()
    }

    /// The number of events kept and their counted size in bytes.
    #[cfg(test)]
    pub fn window(&self) -> (usize, usize) {
        let inner = self.inner.lock();
        (inner.events.len(), inner.bytes)
    }

    /// The position of the first event at or after `time` that no rollback undid (the next
    /// position when there is none yet): where a stream resuming from `time` reads from,
    /// as mongod's scans the oplog from the resume point's `ts`.
    pub fn seq_at_time(&self, time: Timestamp) -> u64 {
        let rolled_back = self.committed.lock().rolled_back.clone();
        let undone = |seq: u64| (rolled_back.iter()).any(|&(from, to)| (from..=to).contains(&seq));
        let inner = self.inner.lock();
        inner
            .events
            .iter()
            .find(|(e, _)| !undone(e.seq) && at_or_after(e.cluster_time, time))
            .map_or(inner.next_seq, |(e, _)| e.seq)
    }

    /// Whether the history from `time` on is no longer all in the window: an event at or
    /// after `time` left it. mongod fails a stream whose resume point fell off the oplog
    /// with `ChangeStreamHistoryLost` (286,
    /// `document_source_change_stream_check_resumability.cpp`).
    pub fn lost_since(&self, time: Timestamp) -> bool {
        (self.inner.lock().dropped_through).is_some_and(|dropped| at_or_after(dropped, time))
    }

    /// The cluster time of the newest event no rollback undid: the member's last applied
    /// entry's `ts`, from which mongod starts a stream with no start point.
    pub fn last_applied_time(&self) -> Option<Timestamp> {
        let rolled_back = self.committed.lock().rolled_back.clone();
        let undone = |seq: u64| (rolled_back.iter()).any(|&(from, to)| (from..=to).contains(&seq));
        let inner = self.inner.lock();
        (inner.events.iter().rev())
            .find(|(e, _)| !undone(e.seq))
            .map(|(e, _)| e.cluster_time)
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

    /// A command's last op is the time of the last event it appended; a secondary's log
    /// holds an applied entry as the primary wrote it (its time and wall clock time, not
    /// what applying it wrote) and moves its cluster time up to it; an entry that fails to
    /// apply is not appended.
    #[test]
    fn a_command_s_last_op_and_an_applied_entry() {
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
        let entry = ChangeEvent {
            seq: 41,
            cluster_time: ahead,
            wall_time: DateTime::from_millis(5),
            db: "d".into(),
            coll: "c".into(),
            collection_uuid: None,
            kind: insert(3, 0),
            retryable: None,
        };
        log.applying(&entry, || {
            log.append("d", "c", None, insert(4, 0));
            Ok::<_, ()>(())
        })
        .unwrap();
        let applied = log.read_from(3, 10).unwrap();
        assert_eq!(applied.len(), 1);
        assert_eq!(
            (
                applied[0].seq,
                applied[0].cluster_time,
                applied[0].wall_time
            ),
            (3, ahead, entry.wall_time)
        );
        assert_eq!(applied[0].kind.document_id(), Some(Bson::Int32(3)));
        assert_eq!(
            ResumeToken::of_event(&applied[0]),
            ResumeToken::of_event(&entry),
            "the same token as the primary's event"
        );
        let next = log.cluster_time();
        assert_eq!((next.time, next.increment), (ahead.time, 8));
        assert_eq!(log.applying(&entry, || Err("diverged")), Err("diverged"));
        assert_eq!(log.last_seq(), 3);
    }

    /// Tokens sort by time, a high-water mark before an event at the same time; they decode
    /// back; malformed ones fail as mongod's `ResumeToken` parsing does.
    #[test]
    fn resume_tokens_sort_by_time_and_decode() {
        let at = |time, increment| Timestamp { time, increment };
        let event = |time| ChangeEvent {
            seq: 1,
            cluster_time: time,
            wall_time: DateTime::from_millis(0),
            db: "d".into(),
            coll: "c".into(),
            collection_uuid: None,
            kind: insert(1, 0),
            retryable: None,
        };
        let data = |token: &ResumeToken| token.to_document().get_str("_data").unwrap().to_string();
        let tokens = [
            ResumeToken::high_water_mark(at(5, u32::MAX)),
            ResumeToken::of_event(&event(at(5, u32::MAX))),
            ResumeToken::high_water_mark(at(6, 0)),
            ResumeToken::of_event(&event(at(6, 0))),
            ResumeToken::of_event(&event(at(6, 1))),
        ];
        for pair in tokens.windows(2) {
            assert!(data(&pair[0]) < data(&pair[1]), "{pair:?}");
        }
        for token in &tokens {
            assert_eq!(&ResumeToken::parse(&token.to_document()).unwrap(), token);
        }
        assert_eq!(next_tick(at(5, u32::MAX)), at(6, 0));
        assert!(tokens[1].names(&event(at(5, u32::MAX))));
        assert!(!tokens[0].names(&event(at(5, u32::MAX))));
        let code = |token: Document| ResumeToken::parse(&token).unwrap_err().code;
        assert_eq!(code(doc! {}), 40647);
        assert_eq!(code(doc! {"_data": 1}), 40647);
        assert_eq!(code(doc! {"_data": "xyz1"}), 9);
        assert_eq!(code(doc! {"_data": "0000000000000001"}), 260);
        assert_eq!(code(doc! {"_data": "000000050000000700FF"}), 260);
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
        let mut times = Vec::new();
        for n in 0..5 {
            log.append("d", "c", None, insert(n, 0));
            times.push(log.newest_time().unwrap());
        }
        assert_eq!((log.first_seq(), log.last_seq()), (3, 5));
        assert!(log.read_from(2, 10).is_none());
        // History from the second event's time on is lost, from the third's it is kept.
        assert!(log.lost_since(times[0]) && log.lost_since(times[1]));
        assert!(!log.lost_since(times[2]));
        assert_eq!(log.seq_at_time(times[2]), 3);
        assert_eq!(log.seq_at_time(next_tick(times[4])), 6);
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
