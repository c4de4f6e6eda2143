//! The server's state: what every connection and command shares (the catalog, cursors,
//! sessions, views, fail points, the clock), and the cluster time it stamps on replies.

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
    pub replica: Option<std::sync::Arc<dyn super::member::Member>>,
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
