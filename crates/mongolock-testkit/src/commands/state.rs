//! The server's state: what every connection and command shares (the catalog, cursors,
//! sessions, views, fail points, the clock), and the cluster time it stamps on replies.
//!
//! It also says what the commands need of the replica set their server is a member of: the
//! state holds its member as a trait ([`ServerState::replica`], [`Member`]), which the set's
//! member (`crate::replset`) implements, so that the commands never import the set (the set
//! imports them: it starts its members as servers and reads their state).

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use bson::{Document, Timestamp};
use tokio::sync::watch;

use super::cursor_table::Cursors;
use super::identity::ServerVersion;
use super::local_sessions::LocalSessions;
use super::session::Sessions;
use super::view_catalog::Views;
use crate::engine::collection::Catalog;
use crate::engine::error::Result;
use crate::faults::clock::Clock;
use crate::faults::fail_point::FailPoints;

/// State shared by every connection.
#[derive(Debug)]
pub struct ServerState {
    /// `127.0.0.1:PORT`, as the replica-set fields report it.
    pub address: String,
    /// Standalone (no replica-set features) or a one-member replica set.
    pub standalone: bool,
    /// The MongoDB release the server reports itself as.
    pub version: ServerVersion,
    /// Whether pipeline-style updates are run (false: refused, as some servers that speak
    /// MongoDB's protocol do).
    pub pipeline_updates: bool,
    /// Extra delay before every reply.
    pub latency: Duration,
    /// TTL monitor period.
    pub ttl_monitor_interval: Duration,
    /// The server clock.
    pub clock: Clock,
    /// Databases and collections.
    pub catalog: Catalog,
    /// Open cursors.
    pub cursors: Cursors,
    /// Logical sessions and their retryable-write history.
    pub sessions: Sessions,
    /// The logical sessions commands used, for `$listLocalSessions`.
    pub local_sessions: LocalSessions,
    /// Read-only views, by database and name.
    pub views: Views,
    /// `failCommand` and `onPrimaryTransactionalWrite`.
    pub fail_points: FailPoints,
    /// The id the listener gives its next connection.
    pub next_connection_id: AtomicI64,
    /// Turns true when the server stops: the listener, connections and TTL monitor end.
    pub shutdown: watch::Receiver<bool>,
    /// The replica set this server is a member of (`None`: a one-member set or a
    /// standalone, as the server was started).
    pub replica: Option<std::sync::Arc<dyn Member>>,
}

impl ServerState {
    /// The next cluster time: the server clock's seconds with an increasing counter.
    pub fn cluster_time(&self) -> Timestamp {
        self.catalog.changes.cluster_time()
    }
}

/// Builds the reply fields every replica-set reply carries, for a command that wrote
/// nothing: a fresh cluster time for both.
pub fn cluster_fields(state: &ServerState, reply: &mut Document) {
    cluster_fields_after(state, reply, None);
}

/// Builds the reply fields every replica-set reply carries. `last_op` is the cluster time of
/// the last oplog entry the command wrote, if it wrote any: the reply's `operationTime`, as
/// mongod's (`computeOperationTime` in `src/mongo/db/service_entry_point_common.cpp` reads
/// the client's `lastOp`; MongoDB's manual, `fact-runCommand-results.rst`: "The logical time
/// of the operation"), also when the reply waited for write concern. `$clusterTime` is the
/// server's cluster time when it replies.
///
/// A command that wrote nothing: on a member of an emulated replica set, `$clusterTime` is
/// the member's cluster time as it stands (mongod reads it, `LogicalClock::getClusterTime`;
/// only a write reserves a tick, which is where a member's own system clock enters the
/// set's cluster time) and `operationTime` the newest entry of its oplog ("the timestamp of
/// the most recent entry in the oplog" for read concern local, the manual's
/// `fact-runCommand-results.rst`), or for a change stream's reply its majority commit point
/// (a majority read's reply gets its commit point as `last_op`, `crate::commands`'s `Job`).
/// The one-member emulator gives a fresh cluster time for both, as it always did (never
/// older than mongod's).
pub fn cluster_fields_after(state: &ServerState, reply: &mut Document, last_op: Option<Timestamp>) {
    if state.standalone {
        return;
    }
    let changes = &state.catalog.changes;
    let current = changes.current_cluster_time();
    let (time, newest) = if state.replica.is_some() && current.time != 0 {
        (current, changes.newest_time().unwrap_or(current))
    } else {
        let time = state.cluster_time();
        (time, time)
    };
    // A change stream's reply (the only one with a `postBatchResumeToken`) is a read at
    // majority read concern: on a set member its `operationTime` is the majority commit
    // point (`computeOperationTime`, `src/mongo/db/service_entry_point_common.cpp`: a read
    // at `kMajorityReadConcern` answers `getCurrentCommittedSnapshotOpTime()`), never the
    // time of an entry the stream has not delivered.
    let stream_reply = reply
        .get_document("cursor")
        .is_ok_and(|c| c.contains_key("postBatchResumeToken"));
    let newest = match changes.committed_time() {
        Some(committed) if stream_reply && state.replica.is_some() => committed,
        _ => newest,
    };
    let last_op = last_op.or(Some(newest));
    reply.insert(
        "$clusterTime",
        bson::doc! {
            "clusterTime": time,
            "signature": {
                "hash": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![0; 20] },
                "keyId": 0i64,
            },
        },
    );
    reply.insert("operationTime", last_op.unwrap_or(time));
}

/// A future a member's async method returns, borrowing the member and its arguments.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A write admitted on the primary (see [`Member::write_intent`]): dropped when the write
/// is done, which publishes it to the set.
pub trait WriteIntent {}

/// The write-concern wait of the writes a `$out` or `$merge` sent to the primary from a
/// member that is not primary ([`Member::write_through_primary`]). The dispatcher awaits it
/// once the command ran, on the runtime, so that no thread of the blocking pool (which the
/// members' replication uses too) is held while it waits. It resolves to the aggregate's
/// error when the write concern failed.
pub struct PrimaryWait(pub Pending<'static, Result<()>>);

impl Debug for PrimaryWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrimaryWait")
    }
}

/// A member of a replica set, as its server's commands see it (see `crate::replset` for
/// what each does and the mongod source it follows).
pub trait Member: Send + Sync + Debug {
    /// The set's size (its data-bearing members).
    fn members(&self) -> usize;
    /// Runs `read` on this member's data as of its majority commit point: what a read at
    /// `readConcern: {level: "majority"}` reads (see `crate::replset`). Returns the cluster
    /// time of that point, the read's `operationTime` (none before anything is committed).
    ///
    /// # Errors
    /// The snapshot could not be brought to the commit point.
    fn read_committed(
        &self,
        read: &mut dyn FnMut(&crate::engine::collection::Catalog),
    ) -> Result<Option<bson::Timestamp>>;
    /// Waits until this member has reached the optime `target` (`(timestamp, term)`, the
    /// term [`super::read_after::UNINITIALIZED_TERM`] for a cluster time): its last applied
    /// optime, or with `majority` its majority commit point as it knows it; the wait of a
    /// read at `readConcern: {afterClusterTime}` or `{afterOpTime}` (see
    /// [`super::read_after`] and `crate::replset`).
    ///
    /// # Errors
    /// `MaxTimeMSExpired` (50) once `deadline` passes; `InterruptedDueToReplStateChange`
    /// (11602) if the member rolls back meanwhile (or cannot apply), as mongod's rollback
    /// kills user operations; `ShutdownInProgress` (91) if it stops.
    fn await_op_time<'a>(
        &'a self,
        target: (bson::Timestamp, i64),
        majority: bool,
        deadline: Option<std::time::Instant>,
    ) -> Pending<'a, Result<()>>;
    /// Whether this member is stopped (its connections close).
    fn is_down(&self) -> bool;
    /// Whether this member is primary now.
    fn is_primary(&self) -> bool;
    /// Adds the replica-set fields of `hello` for this member's state to `reply`.
    fn hello_fields(&self, reply: &mut Document, legacy: bool);
    /// For an awaitable `hello` (`cmd`): waits until the topology changes or its time is
    /// up; false when the member stopped meanwhile.
    fn await_topology_change<'a>(&'a self, cmd: &'a Document) -> Pending<'a, bool>;
    /// Whether the command `name` may run on this member in its state.
    ///
    /// # Errors
    /// The error mongod answers with on a member in this state.
    fn check_command(&self, name: &str, cmd: &Document) -> Result<()>;
    /// For a write admitted in term `admitted`, the intent that holds it on the primary
    /// while it runs; `None` for a command that writes nothing.
    ///
    /// # Errors
    /// The member is no longer primary, or no longer in the term the write was admitted in.
    fn write_intent<'a>(
        &'a self,
        name: &str,
        cmd: &Document,
        admitted: Option<i64>,
    ) -> Result<Option<Box<dyn WriteIntent + 'a>>>;
    /// The term, when this member is primary: a write remembers it when it arrives.
    fn admitted_term(&self) -> Option<i64>;
    /// Adds this member's `topologyVersion` to a state-change error reply.
    fn annotate_error(&self, reply: &mut Document);
    /// Waits for the write concern of a write command that succeeded on the primary;
    /// resolves to the `writeConcernError` to add to its reply, if any.
    fn await_write_concern<'a>(
        &'a self,
        name: &'a str,
        cmd: &'a Document,
        term: Option<i64>,
    ) -> Pending<'a, Option<Document>>;
    /// Runs `replSetStepDown` (`cmd`) on this member.
    fn step_down<'a>(&'a self, cmd: &'a Document) -> Pending<'a, Result<Document>>;
    /// For an `aggregate` (`cmd`) with `$out` or `$merge` that arrived while this member was
    /// not primary: runs `write`, the stage's writes, on the primary's server as a write of
    /// the primary's own (replicated like any other), and returns the wait for the command's
    /// write concern there (see `crate::replset`).
    ///
    /// # Errors
    /// No primary reached, the primary's refusal, or `write`'s own error: each the
    /// aggregate's own error, as mongod answers.
    fn write_through_primary(
        &self,
        cmd: &Document,
        write: &mut dyn FnMut(&ServerState) -> Result<()>,
    ) -> Result<PrimaryWait>;
}
