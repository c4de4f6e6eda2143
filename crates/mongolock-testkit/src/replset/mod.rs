//! A replica set of N emulated members: each a server on its own port with its own data,
//! a primary whose writes the secondaries apply in order (with a lag the test sets), write
//! concern that waits for them, and elections with terms.
//!
//! What each part follows in mongod (`mongodb/mongo`):
//! - `hello` per member state: `src/mongo/db/repl/hello/hello_response.cpp`
//!   (`HelloResponse::addToBSON`): `topologyVersion` first, then `hosts`, `setName`,
//!   `setVersion`, `isWritablePrimary`/`ismaster`, `secondary`, `primary` when known, `me`,
//!   `electionId` on the primary only, `lastWrite`. `electionId` is `OID::fromTerm(term)`
//!   (`src/mongo/bson/oid.cpp`, its test `FromTerm`: `7fffffff` then the term).
//! - Commands a secondary refuses: `src/mongo/db/service_entry_point_common.cpp`: a command
//!   never allowed on a secondary fails `NotWritablePrimary` (10107) "not primary"; a read
//!   that could opt in but did not (no `$readPreference` other than `primary`) fails
//!   `NotPrimaryNoSecondaryOk` (13435) "not primary and secondaryOk=false".
//! - Write concern: `src/mongo/db/repl/replication_coordinator_impl.cpp`
//!   (`awaitReplication`): on `wtimeout` the reply keeps the write's result and carries
//!   `writeConcernError: {code: 64, errmsg: "waiting for replication timed out",
//!   errInfo: {wtimeout: true}}`; a waiter whose primary steps down gets 189
//!   `PrimarySteppedDown` "Primary stepped down while waiting for replication". With no
//!   `writeConcern` the implicit default is `{w: "majority"}` from 5.0 on
//!   (`src/mongo/db/repl/README.md`, "Implicit Default Write Concern").
//! - `replSetStepDown`: arguments as `src/mongo/db/repl/repl_set_commands.cpp` parses them;
//!   the wait for a caught-up electable secondary and `ExceededTimeLimit` (262) "No
//!   electable secondaries caught up as of ..." from `replication_coordinator_impl.cpp`
//!   (`stepDown`); writes are refused while the step-down is attempted, and in-progress
//!   writes hold the replication state transition lock that step-down takes
//!   (`src/mongo/db/repl/README.md`, "Conditional" step-down): a write that was admitted
//!   under the old primary's term and had not started when the state changed fails
//!   `InterruptedDueToReplStateChange` (11602). After a non-forced step-down the
//!   caught-up secondary is elected at once (election handoff, README "Step Up").
//! - Sync sources: a secondary fetches from any member it reaches that applied more than it
//!   has, not only from the primary (chaining, on by default: jstest
//!   `jstests/replsets/slavedelay3.js`), so a write a cut-off primary committed before the
//!   cut still reaches a member that lagged behind it, through a member that has it.
//! - Elections: a member of the reachable majority with the newest applied optime wins
//!   (voters refuse candidates older than themselves, README "Voter Perspective"), after
//!   `electionTimeoutMillis` without a primary; the term goes up by one. The new primary
//!   first catches up on what reachable members have (README "Transitioning to PRIMARY").
//!
//! - Partitions: a member partitioned from the others (clients still reach it) neither
//!   fetches nor serves oplog entries, votes or counts towards a majority. A primary that
//!   cannot see a majority steps down after the election timeout
//!   (`src/mongo/db/repl/topology_coordinator.cpp`, `TopologyCoordinator::checkMemberTimeouts`:
//!   members not heard from for `getElectionTimeoutPeriod()` are marked down, then "Can't
//!   see a majority of the set, relinquishing primary"); until then it takes `w: 1` writes
//!   and its `w: "majority"` writes wait. The other side's election timeout counts from the
//!   partition, so it elects (in a higher term) as the old primary steps down. In mongod
//!   the two can overlap for a moment (two nodes saying primary, in different terms); here
//!   the step-down comes first, in the same monitor tick.
//! - Rollback: an election drops from the set's history what no member of the electing
//!   majority had applied; a member holding such entries diverged, and when it reaches the
//!   others again it rolls back to the common point and follows the new primary
//!   (`src/mongo/db/repl/rollback_impl.cpp`, `RollbackImpl::runRollback`, "Rollback common
//!   point"; recover to the stable timestamp, which is majority-committed, so a
//!   majority-committed write is never undone; `src/mongo/db/repl/README.md`, "Rollback").
//!
//! - Clocks: each member has its own system clock, the set's shared clock plus an offset
//!   the test sets ([`ReplicaSet::set_clock_offset`]), so `$$NOW` (mongod's system clock,
//!   `Variables::generateRuntimeConstants`, `src/mongo/db/pipeline/variables.cpp`) jumps
//!   when the primary changes to a member whose clock is ahead or behind. The cluster time
//!   does not: a member's never goes below the highest it has seen from the set. It applies
//!   the primary's entries at their times and moves its cluster time up to them, and the
//!   members that reach each other gossip their cluster times, each taking a higher one it
//!   receives (`src/mongo/db/logical_clock.cpp`, `LogicalClock::advanceClusterTime`: "if
//!   (newTime > _clusterTime) _clusterTime = newTime"); a tick takes the system clock's
//!   seconds only when they are ahead (`LogicalClock::reserveTicks`). So after a failover
//!   to a member whose clock is behind, `operationTime` stays ahead of its `$$NOW` until
//!   its clock catches up.
//! - `operationTime`: a write's reply carries its own oplog entry's time (its `lastOp`),
//!   also when it waited for write concern (see `crate::commands::state::cluster_fields_after`).
//!
//! - Change streams: a stream on a member delivers only majority-committed events, as
//!   mongod's, whose `$changeStream` reads at majority read concern asked for or not
//!   (jstest `change_stream_require_majority_read_concern.js`: a `w: 1` insert
//!   with replication stopped is not returned until `awaitLastOpCommitted`; the
//!   change-streams spec, "Server Specification"). Each member's change log holds what it
//!   applied; its streams read it up to the majority commit point as the member knows it (the
//!   newest entry a majority applied, learned while it reaches the others, kept from before
//!   while partitioned), no further than what it applied, so a partitioned primary's `w: 1`
//!   writes wait on its streams and a secondary's applied entry waits for the commit point. A
//!   rollback keeps the log up to the common point and marks the member's entries after it as
//!   undone: no stream delivers them, and rebuilding the data appends no event. A batch's
//!   `postBatchResumeToken` does not pass the commit point, and a stream reply's
//!   `operationTime` is the commit point's time (`computeOperationTime`,
//!   `src/mongo/db/service_entry_point_common.cpp`: a majority read answers
//!   `getCurrentCommittedSnapshotOpTime()`). A stream with no start point starts after the
//!   member's last applied entry, as mongod's (`DocumentSourceChangeStream` building its
//!   pipeline: `startFrom = replCoord->getMyLastAppliedOpTime()`), so its first batch's
//!   token names that start, committed or not, and an entry applied but not yet committed
//!   when it opened is not delivered on it.
//! - Resume tokens name the same event on every member, so a stream resumes on any member
//!   after a failover, as the driver does. mongod's token encodes the event's cluster time
//!   (its oplog entry's `ts`) and identity (`src/mongo/db/pipeline/resume_token.cpp`,
//!   `ResumeToken(const ResumeTokenData&)`: clusterTime, version, tokenType, txnOpIndex,
//!   fromInvalidate, uuid, eventIdentifier, as a hex KeyString in `_data`); here `_data` is
//!   the hex of the time, the token type and the event's namespace, operation type and
//!   document key, sorting as mongod's do (a high-water mark before an event at the same
//!   time), not mongod's bytes. A secondary's log holds each oplog entry as the primary
//!   wrote it (its time and wall clock time, not what applying it wrote), so every member
//!   produces the same events with the same tokens. Resuming (`resumeAfter`, `startAfter`)
//!   reads the member's log from the token's time, as mongod scans its oplog from it: the
//!   event the token names is swallowed and the stream goes on right after it; if the first
//!   event of the stream's scope at or past that time is another one (the token's event is
//!   not in this member's history: a rollback undid it, or it belongs to another
//!   namespace), the stream fails with `ChangeStreamFatalError` (280) "cannot resume
//!   stream; the resume token was not found"
//!   (`document_source_change_stream_ensure_resume_token_present.cpp`); while the member has
//!   not applied up to that time, batches are empty and `postBatchResumeToken` stays the
//!   given token. A high-water mark (a `postBatchResumeToken` past the last event: a
//!   batch's token becomes one at the last entry the stream read once it read past the last
//!   event it returned, `plan_executor_pipeline.cpp`, `_performChangeStreamsAccounting`) and
//!   `startAtOperationTime` deliver every event at or after their time
//!   (`document_source_change_stream_check_resumability.cpp`). A resume point whose history
//!   left the log fails with `ChangeStreamHistoryLost` (286).
//!
//! - Read concern: what a read sees at each level on a member.
//!   - `local` (and `available`, and none given): the member's data as it stands, its
//!     applied writes whether or not they are majority-committed (a partitioned primary's
//!     `w: 1` writes too, until a rollback undoes them).
//!   - `majority`: the member's data as of the majority commit point it knows (the point its
//!     change streams read up to), as mongod's: "Each replica set member maintains, in
//!     memory, a view of the data at the majority-commit point [...] To fulfill read
//!     concern "majority", the node returns data from this view" (MongoDB's manual, "Read
//!     Concern "majority"", `reference/read-concern-majority`). The read answers at once
//!     with the committed version; it does not wait for newer writes to commit. Each member
//!     keeps that view as a catalog of its own, brought forward on a majority read by
//!     applying the set's entries up to the point as a secondary applies them; the point
//!     never passes the member's common point with the set, so a rollback leaves the view
//!     as it was. `find`, `count`, `distinct` and `aggregate` read it (`$out` and `$merge`
//!     read the view and write the primary's data: the member's own on the primary, through
//!     the primary on a secondary, see below; mongod's `$merge` at majority read concern
//!     reads committed data and writes over what is not: jstest
//!     `jstests/noPassthrough/query/out_merge/aggWrite/out_merge_majority_read.js`); a
//!     `$changeStream` reads the member's log up to the same point. Any other command at
//!     `majority` is refused with `InvalidOptions` (72) rather than answered from local
//!     data. View definitions are the member's current ones (their data is the view's).
//!   - `linearizable`: mongod serves it on the primary only and confirms after the read
//!     that it still is primary with a majority write (a partitioned primary's read waits
//!     and fails); not emulated, refused on a member with `InvalidOptions` (72).
//!   - `snapshot`: refused (72), as on a single server.
//!
//!   - `afterClusterTime` (`local` or `majority` only) and `afterOpTime`: before the command
//!     runs, the member waits until its last applied optime (at `majority`, its majority
//!     commit point as it knows it) reaches the time, as mongod's `waitForReadConcernImpl`
//!     (`src/mongo/db/read_concern_mongod.cpp`) and
//!     `ReplicationCoordinatorImpl::_waitUntilClusterTimeForRead` / `_waitUntilOpTime` /
//!     `_waitUntilMajorityOpTime` (`src/mongo/db/repl/replication_coordinator_impl.cpp`); a
//!     cluster time compares by timestamp alone, an optime by term, then timestamp
//!     (`src/mongo/db/repl/optime.h`). So a lagging secondary serves a causally consistent
//!     session's own write (the causal-consistency spec) once it applied it. Past `maxTimeMS`
//!     the read fails with `MaxTimeMSExpired` (50) (jstest
//!     `jstests/replsets/read_after_optime.js`); a member that rolls back meanwhile fails it
//!     with `InterruptedDueToReplStateChange` (11602), as the rollback kills user operations
//!     (`src/mongo/db/repl/rollback_impl.cpp`). A primary behind the time waits as a secondary
//!     does: mongod writes a no-op to move it only in a sharded cluster
//!     (`makeNoopWriteIfNeeded`). A time ahead of the member's cluster time is refused with
//!     `InvalidOptions` (72), after the client's `$clusterTime` was taken in (below); the
//!     argument errors are `ReadConcernArgs::parse`'s
//!     (`src/mongo/db/repl/read_concern_args.cpp`). See `crate::commands::read_after`.
//!
//!   A majority read's reply (and a change stream's) carries the commit point's time as its
//!   `operationTime`, unless it wrote (`$out`, `$merge`), a local read's the newest entry's
//!   (`computeOperationTime`, `src/mongo/db/service_entry_point_common.cpp`; jstest
//!   `jstests/replsets/operation_time_read_and_write_concern.js`). A server outside a set
//!   reads its latest data at every level, as before; the one-member emulator serves an
//!   `afterClusterTime` it reached at once (it holds every write it acknowledged), and a
//!   standalone refuses `afterClusterTime` (`IllegalOperation`, 20) and `afterOpTime`
//!   (`NotAReplicaSet`, 123) as mongod's (jstest `jstests/core/read_after_optime.js`).
//!
//! - A client's `$clusterTime`: a member moves its cluster time up to the one a command
//!   carries, as mongod's `readRequestMetadata` (`src/mongo/rpc/metadata.cpp`) gossips it in
//!   (`VectorClock::gossipIn`); no signature is checked (the emulator runs without auth).
//!
//! - Retryable writes: the record of a retryable write moves with its data. The primary's
//!   oplog entries of a retryable write (its inserts, updates and deletes) carry its session
//!   (`lsid`, `txnNumber`), and a member that applies one records the session's write, as
//!   mongod's secondaries write the session's `config.transactions` record from the entry
//!   (`src/mongo/db/repl/session_update_tracker.cpp`, `createMatchingTransactionTableUpdate`).
//!   After it becomes primary, a retry of the write (same `lsid` and `txnNumber`) is answered
//!   with the write's reply instead of running again (`performUpdates`,
//!   `src/mongo/db/ops/write_ops_exec.cpp`; the reply rebuilt from the oplog entry,
//!   `src/mongo/db/ops/write_ops_retryability.cpp`: an update's `n`, `nModified` and
//!   `upserted`, a `findAndModify`'s document and `lastErrorObject`; jstest
//!   `jstests/replsets/retryable_writes_failover.js`), naming the statements not run again
//!   in `retriedStmtIds`, or `retriedStmtId` for `findAndModify`
//!   (`src/mongo/db/commands/find_and_modify.cpp`); an older `txnNumber` of the session is
//!   `TransactionTooOld` (225). A write that wrote no oplog entry (an update that matched
//!   nothing) left no record of its statement, on the member that ran it or any other, and
//!   runs again when retried (`onWriteOpCompleted`,
//!   `src/mongo/db/op_observer/op_observer_impl.cpp`, records only a written entry). A
//!   rollback undoes the records with the data: each member's records are rebuilt from the
//!   set's history with its data, so a retry of a write the rollback undid runs again
//!   (`src/mongo/db/repl/rollback_impl.cpp`: every session invalidated when a rolled-back
//!   entry had one, `MongoDSessionCatalog::invalidateAllSessions`, and `config.transactions`
//!   recovered to the stable timestamp with the other collections). See
//!   `crate::commands::session`.
//!
//! - `$out` and `$merge` on a secondary: an `aggregate` with either stage is an opt-in read
//!   like the others (a read preference other than `primary`), and mongod 4.4 and later runs
//!   it there (the CRUD spec, "Read preferences and server selection", lets drivers send it
//!   to a secondary from 5.0 on; DRIVERS-823): the pipeline reads the secondary's own data at
//!   the read concern asked, and the stage's writes are sent to the primary as commands
//!   (`src/mongo/db/pipeline/process_interface/replica_set_node_process_interface.cpp`,
//!   `ReplicaSetNodeProcessInterface` and its `_executeCommandOnPrimary`; for `$out` the
//!   temporary collection, its inserts and the rename over the target all happen on the
//!   primary). Here they run on the primary's data as the primary's own writes (admitted
//!   there, in its oplog, replicated back to every member), with the aggregate's write
//!   concern waited for there; a write-concern failure, a write error or the primary's
//!   refusal is the aggregate's own error at the top level, with no `writeConcernError`
//!   (jstests `out_merge_on_secondary_write_concern.js`, `merge_on_secondary.js`,
//!   `merge_out_on_secondary_fail_on_stepdown.js` in
//!   `jstests/noPassthrough/query/out_merge/aggWrite/`). A secondary that reaches no
//!   primary fails it with `PrimarySteppedDown` (189) "No primary exists currently" (mongod
//!   says so when it knows no primary; a primary it still believes in but cannot reach
//!   fails there with a network error until its heartbeats give it up, which is not
//!   emulated). The reply's `operationTime` is the primary's write's
//!   (`CommonProcessInterface::updateClientOperationTime`,
//!   `src/mongo/db/pipeline/process_interface/common_process_interface.cpp`) and the
//!   secondary takes in the primary's cluster time from its reply
//!   (`src/mongo/db/vector_clock/vector_clock_metadata_hook.cpp`, `readReplyMetadata`), so
//!   its `$clusterTime` is not behind that `operationTime`. See `primary_writes`.
//!
//! Not yet here (later slices): rollback files, partitions other than one member from all
//! the others, collection UUIDs that are the same on every member (each member gives a
//! collection its own, in `listCollections`; a change event carries the UUID of the primary
//! that wrote it, so an expanded event's `collectionUUID` for the same collection differs
//! before and after a failover).

mod apply;
mod member;
mod primary_writes;
pub mod schedule;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::faults::clock::Clock;
use crate::server::{TestServer, TestServerBuilder};

pub(crate) use member::Replica;
use member::SetShared;

pub use crate::commands::identity::REPLICA_SET_NAME;

/// How a replica set is started. Build one with [`ReplicaSet::builder`].
#[derive(Debug, Clone)]
pub struct ReplicaSetBuilder {
    members: usize,
    lag: Duration,
    election_timeout: Duration,
    ports: Vec<u16>,
    server: TestServerBuilder,
}

impl Default for ReplicaSetBuilder {
    fn default() -> Self {
        Self {
            members: 3,
            lag: Duration::ZERO,
            election_timeout: Duration::from_millis(500),
            ports: Vec::new(),
            server: TestServerBuilder::default(),
        }
    }
}

impl ReplicaSetBuilder {
    /// The number of members, all voting and data-bearing (three by default, at least one).
    pub fn members(mut self, members: usize) -> Self {
        self.members = members.max(1);
        self
    }

    /// How long after the primary writes an operation each secondary applies it (zero by
    /// default). Change it per member later with [`ReplicaSet::set_lag`].
    pub fn lag(mut self, lag: Duration) -> Self {
        self.lag = lag;
        self
    }

    /// How long the set is without a primary before a reachable majority elects one
    /// (mongod's `electionTimeoutMillis`, 10 s there; 500 ms by default here so tests stay
    /// fast). A non-forced `replSetStepDown` elects at once (election handoff).
    pub fn election_timeout(mut self, timeout: Duration) -> Self {
        self.election_timeout = timeout;
        self
    }

    /// The ports of 127.0.0.1 the members listen on, one per member (free ports by default).
    pub fn ports(mut self, ports: Vec<u16>) -> Self {
        self.ports = ports;
        self
    }

    /// The options every member's server starts with (latency, TTL monitor period, server
    /// version, ...); its port, clock and standalone setting are the set's own.
    pub fn server(mut self, server: TestServerBuilder) -> Self {
        self.server = server;
        self
    }

    /// Binds every member's listener, makes member 0 primary in term 1 and starts
    /// replication.
    ///
    /// # Errors
    ///
    /// The I/O error of binding a listener (a port is taken, say).
    ///
    /// # Cancel safety
    /// Dropping the future before it completes stops the members started so far.
    pub async fn start(self) -> std::io::Result<ReplicaSet> {
        let mut listeners = Vec::new();
        for i in 0..self.members {
            let port = self.ports.get(i).copied().unwrap_or(0);
            listeners.push(tokio::net::TcpListener::bind(("127.0.0.1", port)).await?);
        }
        let mut hosts = Vec::new();
        for listener in &listeners {
            hosts.push(format!("127.0.0.1:{}", listener.local_addr()?.port()));
        }
        let set = Arc::new(SetShared::new(
            hosts,
            self.lag,
            self.election_timeout,
            self.server.version(),
        ));
        let clock = Clock::new();
        let mut servers = Vec::new();
        for (index, listener) in listeners.into_iter().enumerate() {
            let server = self
                .server
                .clone()
                .clock(Clock::following(&clock))
                .standalone(false)
                .start_member(listener, Arc::new(Replica::new(set.clone(), index)))?;
            servers.push(server);
        }
        set.attach(servers.iter().map(TestServer::state_weak).collect());
        set.become_initial_primary(0);
        let mut tasks = Vec::new();
        for index in 0..servers.len() {
            tasks.push(tokio::spawn(member::replicate(set.clone(), index)));
        }
        tasks.push(tokio::spawn(member::monitor(set.clone())));
        let mut replica_set = ReplicaSet {
            set,
            clock,
            servers,
            tasks,
            client: None,
        };
        replica_set.client = Some(replica_set.new_client());
        Ok(replica_set)
    }
}

/// One entry of the set's oplog ([`ReplicaSet::oplog`]).
#[derive(Debug, Clone, PartialEq)]
pub struct OplogEntry {
    /// The term it was written in.
    pub term: i64,
    /// Its cluster time (the oplog's `ts`, a change event's `clusterTime`).
    pub cluster_time: bson::Timestamp,
    /// The writing primary's clock when it wrote it (the oplog's `wall`, a change event's
    /// `wallTime`).
    pub wall_time: bson::DateTime,
    /// The `_id` of the document it wrote, for a document write.
    pub id: Option<bson::Bson>,
}

/// A running replica set of emulated members. Dropping it stops every member.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use mongolock_testkit::ReplicaSet;
/// let set = ReplicaSet::builder().members(3).start().await?;
/// let coll = set.client().database("app").collection::<bson::Document>("things");
/// coll.insert_one(bson::doc! {"_id": 1}).await?; // waits for a majority by default
/// assert_eq!(set.primary(), Some(0));
/// set.shutdown().await;
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct ReplicaSet {
    set: Arc<SetShared>,
    /// The clock every member's follows.
    clock: Clock,
    servers: Vec<TestServer>,
    tasks: Vec<JoinHandle<()>>,
    client: Option<mongodb::Client>,
}

impl ReplicaSet {
    /// Options for a replica set to start.
    pub fn builder() -> ReplicaSetBuilder {
        ReplicaSetBuilder::default()
    }

    /// The members' `host:port`, as `hello` reports them, member 0 first.
    pub fn hosts(&self) -> Vec<String> {
        self.set.hosts().to_vec()
    }

    /// A connection string naming every member and the set.
    pub fn uri(&self) -> String {
        format!(
            "mongodb://{}/?replicaSet={REPLICA_SET_NAME}",
            self.hosts().join(",")
        )
    }

    /// A driver client on the set, shared by every caller.
    pub fn client(&self) -> mongodb::Client {
        match &self.client {
            Some(client) => client.clone(),
            None => self.new_client(),
        }
    }

    /// A new driver client on the set (seeded with every member, `replicaSet` set), with
    /// its own connection pool.
    pub fn new_client(&self) -> mongodb::Client {
        mongodb::Client::with_options(self.client_options()).expect("client options are valid")
    }

    /// The options [`ReplicaSet::new_client`] builds its clients with, for a client that
    /// needs one more (a command monitor, say).
    pub fn client_options(&self) -> mongodb::options::ClientOptions {
        mongodb::options::ClientOptions::builder()
            .hosts(
                self.servers
                    .iter()
                    .map(|s| mongodb::options::ServerAddress::Tcp {
                        host: "127.0.0.1".into(),
                        port: Some(s.addr().port()),
                    })
                    .collect::<Vec<_>>(),
            )
            .repl_set_name(Some(REPLICA_SET_NAME.to_string()))
            .server_selection_timeout(Duration::from_secs(10))
            .build()
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Always false: a set has at least one member.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Member `index`'s server: its address and clock. Its [`TestServer::client`] is seeded
    /// with this member and names the set, so it discovers and uses the whole set; for this
    /// member alone connect with `directConnection=true` to [`TestServer::addr`].
    ///
    /// # Panics
    ///
    /// If there is no such member.
    pub fn member(&self, index: usize) -> &TestServer {
        &self.servers[index]
    }

    /// Member `index`'s clock: its `$$NOW` and cluster time come from it. It reads the
    /// set's clock ([`ReplicaSet::shared_clock`]) plus its own offset; moving it moves this
    /// member's alone.
    ///
    /// # Panics
    ///
    /// If there is no such member.
    pub fn clock(&self, index: usize) -> &Clock {
        self.servers[index].clock()
    }

    /// The clock every member's follows: moving it moves them all.
    pub fn shared_clock(&self) -> &Clock {
        &self.clock
    }

    /// Sets how far member `index`'s clock reads ahead of (positive) or behind (negative)
    /// the set's, in milliseconds, as an NTP step or a misconfigured host would put it; the
    /// member's `$$NOW` moves at once, its cluster time only forward (see the module's
    /// notes). Returns the member's time now.
    ///
    /// # Panics
    ///
    /// If there is no such member.
    pub fn set_clock_offset(&self, index: usize, offset_ms: i64) -> bson::DateTime {
        self.servers[index].clock().set_offset(offset_ms)
    }

    /// The member that is primary now, if any.
    pub fn primary(&self) -> Option<usize> {
        self.set.primary()
    }

    /// The current term.
    pub fn term(&self) -> i64 {
        self.set.term()
    }

    /// Waits until some member is primary (at most `timeout`) and returns it.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting changes nothing.
    pub async fn wait_for_primary(&self, timeout: Duration) -> Option<usize> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(primary) = self.primary() {
                return Some(primary);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sets how long after the primary writes an operation member `index` applies it.
    pub fn set_lag(&self, index: usize, lag: Duration) {
        self.set.set_lag(index, lag);
    }

    /// How many of the primary's operations member `index` has applied.
    pub fn applied(&self, index: usize) -> usize {
        self.set.applied(index)
    }

    /// The set's oplog on namespace `db.coll`, oldest first: what a majority applied, or the
    /// primary wrote since, and no rollback undid. It is what mongod's `local.oplog.rs` holds
    /// on the primary once the set has settled: a rollback truncates a member's oplog after
    /// the common point (`src/mongo/db/repl/rollback_impl.cpp`, `RollbackImpl::runRollback`,
    /// "truncate the oplog"), so only the entries the set kept remain. Each entry carries the
    /// writing primary's wall clock (an oplog entry's `wall`, `jstests/replsets/oplog_wallclock.js`,
    /// which a change event's `wallTime` copies on every member:
    /// `src/mongo/db/pipeline/change_stream_event_transform.cpp`, `kWallClockTimeFieldName`)
    /// and its cluster time (`ts`).
    pub fn oplog(&self, db: &str, coll: &str) -> Vec<OplogEntry> {
        (self.set.oplog().into_iter())
            .filter(|(_, e)| e.db == db && e.coll == coll)
            .map(|(term, e)| OplogEntry {
                term,
                cluster_time: e.cluster_time,
                wall_time: e.wall_time,
                id: e.kind.document_id(),
            })
            .collect()
    }

    /// Stops member `index` as if its process was killed: it closes its connections,
    /// refuses new ones and stops replicating; its data is kept for [`ReplicaSet::restart`].
    /// A stopped primary leaves the set without one until the others elect a new primary
    /// after the election timeout.
    pub fn stop(&self, index: usize) {
        self.set.stop(index);
    }

    /// Restarts a stopped member with the data it had: it comes back as a secondary (with a
    /// new `topologyVersion.processId`) and catches up. A member whose history diverged
    /// from the set's (it was primary and wrote what no other member has) rolls back first.
    pub fn restart(&self, index: usize) {
        self.set.restart(index);
    }

    /// Partitions member `index` from every other member: clients still reach it, but it
    /// neither replicates to nor from the others, nor votes. A partitioned primary stays
    /// primary (it takes `w: 1` writes; `w: "majority"` writes wait) until it has not seen a
    /// majority for the election timeout, then steps down; the others elect a new primary,
    /// in a higher term, after the same timeout.
    pub fn partition(&self, index: usize) {
        self.set.set_isolated(index, true);
    }

    /// Ends member `index`'s partition. If its history diverged meanwhile (it was primary
    /// and took writes no member of the majority applied), it rolls back to the common
    /// point and then follows the primary.
    pub fn heal(&self, index: usize) {
        self.set.set_isolated(index, false);
    }

    /// Whether member `index` is partitioned from the others now.
    pub fn is_partitioned(&self, index: usize) -> bool {
        self.set.is_isolated(index)
    }

    /// Whether member `index`'s history diverged from the set's and waits for its rollback
    /// (it was a primary whose writes the majority that elected the next one lacked).
    pub fn is_diverged(&self, index: usize) -> bool {
        self.set.is_diverged(index)
    }

    /// How many rollbacks member `index` went through, and how many of its oplog entries
    /// they undid.
    pub fn rollbacks(&self, index: usize) -> (usize, usize) {
        self.set.rollbacks(index)
    }

    /// Waits until member `index` has gone through `count` rollbacks (at most `timeout`);
    /// returns whether it did.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting changes nothing.
    pub async fn wait_for_rollbacks(&self, index: usize, count: usize, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            if self.rollbacks(index).0 >= count {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops every member and its background tasks.
    ///
    /// # Cancel safety
    /// Dropping the future after it started still stops the set (the tasks are aborted on
    /// drop).
    pub async fn shutdown(mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
            let _ = task.await;
        }
        if let Some(client) = self.client.take() {
            client.shutdown().immediate(true).await;
        }
        for server in std::mem::take(&mut self.servers) {
            server.shutdown().await;
        }
    }
}

impl Drop for ReplicaSet {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
