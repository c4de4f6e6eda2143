//! Command dispatch: one request document in, one reply document out.
//!
//! `dispatch` reads the command name, applies what every command shares (`$db`, sessions,
//! retryable-write replay, transactions refused, cluster time on replies) and hands the
//! command to its family's module.
//!
//! The layout runs one way, from this dispatcher down:
//! - the handlers, one file per command family (`admin.rs`, `aggregate/` with its
//!   `$out`/`$merge` and `$changeStream` stages, `collection_admin.rs`, `cursor.rs`,
//!   `find.rs`, `find_and_modify.rs`, `handshake.rs`, `indexes.rs`, `views.rs`,
//!   `write.rs`), and `ttl.rs`, the TTL monitor's pass;
//! - what handlers and the dispatcher share, importing neither: `context.rs` (`Ctx`, the
//!   command context, and `ConnectionInfo`), `state.rs` (`ServerState` and the cluster
//!   time on replies), `identity.rs` (`REPLICA_SET_NAME`, the versions, `buildInfo`),
//!   `cursor_batch.rs` (the `cursor: {batchSize}` option and cursor replies),
//!   `cursor_table.rs` (the open cursors), `change_stream.rs` (an open change stream),
//!   `session.rs` (sessions and retryable writes), `local_sessions.rs`,
//!   `view_catalog.rs` (view definitions), `blocking_pool.rs` (`off_runtime`),
//!   `read_after.rs` (the wait for `readConcern.afterClusterTime` before a command runs) and
//!   `args.rs` (argument parsing).

// The handlers, one file per command family; the dispatcher below calls them.
pub mod admin;
pub mod aggregate;
pub mod collection_admin;
pub mod cursor;
pub mod find;
pub mod find_and_modify;
pub mod handshake;
pub mod indexes;
pub mod views;
pub mod write;

// What handlers and the dispatcher share; these import neither.
pub mod args;
pub mod blocking_pool;
pub mod change_stream;
pub mod context;
pub mod cursor_batch;
pub mod cursor_table;
pub mod identity;
pub mod local_sessions;
pub mod read_after;
pub mod session;
pub mod state;
pub mod view_catalog;
pub mod write_concern;

// The TTL monitor's pass, which the server runs in the background.
pub mod ttl;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{Bson, DateTime, Document};

use crate::engine::error::{CommandError, Result, codes};
use crate::wire::{Request, RequestKind};
use blocking_pool::off_runtime;
use context::{ConnectionInfo, Ctx};
use session::Completion;
use state::{ServerState, cluster_fields};

/// What the connection does after a command.
#[derive(Debug)]
pub enum Outcome {
    /// Send this reply body.
    Reply(Document),
    /// Close the socket without replying.
    CloseConnection,
}

/// Commands that are retryable writes: replayed from the session history when retried.
const RETRYABLE_WRITES: &[&str] = &["insert", "update", "delete", "findAndModify"];

/// Codes mongod labels `RetryableWriteError` on a retryable write.
const RETRYABLE_CODES: &[i32] = &[
    6, 7, 89, 91, 134, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436,
];

/// Runs one command and builds its reply.
///
/// Only the handshake and a few other commands that touch no collection run on the async
/// runtime; every other command runs on tokio's blocking pool (see [`off_runtime`]), so a
/// heavy command, or one waiting for a collection lock a heavy command holds, never keeps
/// other connections (the drivers' heartbeats included) from being answered.
///
/// # Cancel safety
/// Once a command starts it runs to completion on its own thread, so dropping the future
/// (the connection closed) either prevents a write or leaves it complete, never half done;
/// a retryable write is recorded in its session together with the write. A change
/// stream's `getMore` dropped while it waits closes that cursor.
pub async fn dispatch(
    state: &Arc<ServerState>,
    conn: &mut ConnectionInfo,
    request: Request,
) -> Outcome {
    let Request {
        command: cmd,
        kind,
        duplicate_field,
        error,
        ..
    } = request;
    if let Some(error) = error {
        return Outcome::Reply(finish(state, Err(error), false));
    }
    let name = match cmd.keys().next() {
        Some(name) => canonical_name(name).to_string(),
        None => {
            let error = CommandError::failed_to_parse("empty command");
            return Outcome::Reply(finish(state, Err(error), false));
        }
    };
    if let Some(field) = duplicate_field {
        let error = CommandError::new(
            40413,
            format!("BSON field '{name}.{field}' is a duplicate field"),
        );
        return Outcome::Reply(finish(state, Err(error), false));
    }
    let retryable = cmd.contains_key("txnNumber") && !cmd.contains_key("autocommit");
    // A member of a replica set: closed when stopped; an awaitable hello waits for a
    // topology change (see `crate::replset`).
    let replica = state.replica.clone();
    if let Some(replica) = &replica {
        if replica.is_down() {
            return Outcome::CloseConnection;
        }
        if (name == "hello" || name == "isMaster") && !replica.await_topology_change(&cmd).await {
            return Outcome::CloseConnection;
        }
        // A client's `$clusterTime` moves the member's cluster time up, as mongod's
        // `readRequestMetadata` (`src/mongo/rpc/metadata.cpp`) gossips in the request's
        // `$clusterTime` (`VectorClock::gossipIn`), so that a causally consistent read's
        // `afterClusterTime` is never ahead of the member it reaches (see `read_after`).
        if let Ok(Bson::Timestamp(time)) = cmd
            .get_document("$clusterTime")
            .map(|gossiped| gossiped.get("clusterTime").cloned().unwrap_or(Bson::Null))
        {
            state.catalog.changes.advance_cluster_time(time);
        }
    }
    let ns = match cmd.iter().next() {
        Some((_, Bson::String(coll))) => cmd.get_str("$db").ok().map(|db| format!("{db}.{coll}")),
        _ => None,
    };
    // `maxTimeMS` counts from here, the time a fail point blocks the command included.
    let started = Instant::now();
    let injection = state
        .fail_points
        .fail_command(&name, conn.app_name.as_deref(), ns.as_deref());
    if let Some(injection) = &injection {
        if let Some(block) = injection.block {
            tokio::time::sleep(block).await;
        }
        if injection.close_connection {
            return Outcome::CloseConnection;
        }
        if let Some(error) = &injection.error {
            return Outcome::Reply(finish(state, Err(error.clone()), retryable));
        }
    }
    let deadline = match command_deadline(&name, &cmd, started) {
        Ok(deadline) => deadline,
        Err(error) => return Outcome::Reply(finish(state, Err(error), retryable)),
    };
    // On a replica-set member, whether the command may run here is checked after the
    // `failCommand` fail point, as `service_entry_point_common.cpp` orders them; a write
    // that passes remembers the term it was admitted in.
    let mut member_cmd = None;
    let admitted = replica.as_ref().and_then(|r| r.admitted_term());
    if let Some(replica) = &replica {
        let checked = replica.check_command(&name, &cmd);
        let result = match checked {
            Err(error) => Some(Err(error)),
            Ok(()) if name == "replSetStepDown" => Some(if cmd.get_str("$db") == Ok("admin") {
                replica.step_down(&cmd).await
            } else {
                Err(CommandError::new(
                    13,
                    "replSetStepDown may only be run against the admin database.",
                ))
            }),
            Ok(()) => None,
        };
        if let Some(result) = result {
            let mut reply = finish(state, result, retryable);
            replica.annotate_error(&mut reply);
            return Outcome::Reply(reply);
        }
        member_cmd = Some(cmd.clone());
    }
    let (result, last_op, primary_wait) =
        match run(state, conn, &name, cmd, kind, deadline, admitted).await {
            (Completion::Done(result), last_op, wait) => (result, last_op, wait),
            (Completion::CloseConnection, ..) => return Outcome::CloseConnection,
        };
    // A `$out` or `$merge` a secondary sent to the primary waits for its write concern there;
    // a failure is the aggregate's own error (see `crate::replset`).
    let result = match (result, primary_wait) {
        (Ok(reply), Some(wait)) => wait.0.await.map(|()| reply),
        (result, _) => result,
    };
    let mut reply = finish(state, result, retryable);
    // A write's `operationTime` is its own oplog entry's time (see `cluster_fields_after`).
    if last_op.is_some() {
        state::cluster_fields_after(state, &mut reply, last_op);
    }
    if let (Some(replica), Some(cmd)) = (&replica, &member_cmd) {
        if replica.is_down() {
            // Stopped while the command ran: a killed process sends no reply.
            return Outcome::CloseConnection;
        }
        replica.annotate_error(&mut reply);
        if reply.get_f64("ok") == Ok(1.0)
            && let Some(wce) = replica.await_write_concern(&name, cmd, admitted).await
        {
            let code = wce.get_i32("code").unwrap_or(64);
            reply.insert("writeConcernError", wce);
            if retryable && RETRYABLE_CODES.contains(&code) {
                reply.insert("errorLabels", vec!["RetryableWriteError"]);
            }
            // The reply's `$clusterTime` is taken again after the wait; its `operationTime`
            // stays the write's.
            state::cluster_fields_after(state, &mut reply, last_op);
        }
        if replica.is_down() {
            return Outcome::CloseConnection;
        }
    }
    if let Some(wce) = injection.and_then(|i| i.write_concern_error.map(|w| (w, i.labels)))
        && reply.get_f64("ok") == Ok(1.0)
    {
        let (wce, labels) = wce;
        let code = wce.get_i32("code").unwrap_or(64);
        let labels = labels.unwrap_or_else(|| {
            if retryable && RETRYABLE_CODES.contains(&code) {
                vec!["RetryableWriteError".to_string()]
            } else {
                Vec::new()
            }
        });
        reply.insert("writeConcernError", wce);
        if !labels.is_empty() {
            reply.insert("errorLabels", labels);
        }
    }
    Outcome::Reply(reply)
}

/// The deadline `maxTimeMS` sets for a command, counted from `started` (when the command
/// arrived, before a `failCommand` fail point blocked it), as mongod sets it: 0 or no
/// `maxTimeMS` sets none, and `getMore` uses it for something else (how long a tailable
/// cursor waits).
///
/// mongod (`ExecCommandDatabase::_initiateCommand`, `src/mongo/db/service_entry_point_common.cpp`)
/// records the time a command starts, evaluates `failCommand` (whose `blockConnection`
/// sleeps with no deadline set yet, so the block is never cut short), then sets the deadline
/// to that start plus `maxTimeMS` and checks it before the command runs: a command blocked
/// for at least its `maxTimeMS` fails with `MaxTimeMSExpired` once the block ends, without
/// running. The value is checked as `parseMaxTimeMS` does
/// (`src/mongo/db/query/max_time_ms_parser.cpp`).
fn command_deadline(name: &str, cmd: &Document, started: Instant) -> Result<Option<Instant>> {
    if name == "getMore" {
        return Ok(None);
    }
    let Some(value) = cmd.get("maxTimeMS") else {
        return Ok(None);
    };
    let (number, integral) = match value {
        Bson::Int32(n) => (f64::from(*n), true),
        Bson::Int64(n) => (*n as f64, true),
        Bson::Double(d) => (*d, d.fract() == 0.0),
        Bson::Decimal128(d) => {
            let parsed = d.to_string().parse::<f64>().unwrap_or(0.0);
            (parsed, true)
        }
        _ => {
            return Err(CommandError::bad_value("maxTimeMS must be a number"));
        }
    };
    let whole = if number.is_nan() { 0.0 } else { number.trunc() };
    if !(0.0..=f64::from(i32::MAX)).contains(&whole) {
        return Err(CommandError::bad_value(format!(
            "{whole} value for maxTimeMS is out of range [0, {}]",
            i32::MAX
        )));
    }
    if !integral {
        return Err(CommandError::bad_value("maxTimeMS has non-integral value"));
    }
    Ok((whole > 0.0).then(|| started + Duration::from_millis(whole as u64)))
}

/// Commands that run on the async runtime itself: they touch no collection lock and do
/// little work, so the handshake and heartbeats never wait for the blocking pool.
const INLINE_COMMANDS: &[&str] = &[
    "hello",
    "isMaster",
    "ping",
    "buildInfo",
    "endSessions",
    "killCursors",
    "configureFailPoint",
    "emulatorClock",
];

/// Runs one command.
///
/// # Cancel safety
/// See [`dispatch`].
async fn run(
    state: &Arc<ServerState>,
    conn: &mut ConnectionInfo,
    name: &str,
    cmd: Document,
    kind: RequestKind,
    deadline: Option<Instant>,
    admitted: Option<i64>,
) -> (
    Completion,
    Option<bson::Timestamp>,
    Option<state::PrimaryWait>,
) {
    let (db, retryable) = match prepare(state, conn, name, &cmd, kind) {
        Ok(prepared) => prepared,
        Err(error) => return (Completion::Done(Err(error)), None, None),
    };
    // `readConcern.afterClusterTime` (or `afterOpTime`): the server waits until it reached
    // that time before the command runs (see [`read_after`]), once the read concern was
    // found one the command takes, as mongod checks that first.
    let waited = match name {
        "getMore" => read_after::wait(state, name, &cmd, deadline).await,
        _ => match committed_read(state, name, &cmd) {
            Ok(_) => read_after::wait(state, name, &cmd, deadline).await,
            Err(error) => Err(error),
        },
    };
    if let Err(error) = waited {
        return (Completion::Done(Err(error)), None, None);
    }
    let last_op = Arc::new(parking_lot::Mutex::new(None));
    let primary_wait = Arc::new(parking_lot::Mutex::new(None));
    let job = Job {
        state: state.clone(),
        conn: conn.clone(),
        db,
        now: state.clock.now(),
        deadline,
        name: name.to_string(),
        cmd,
        admitted,
        last_op: last_op.clone(),
        primary_wait: primary_wait.clone(),
    };
    let completion = match retryable {
        Some((lsid, txn_number)) => {
            let command = session::Retryable {
                lsid,
                txn_number,
                retried: session::retried_statements(name, &job.cmd),
                replicated: state.replica.is_some(),
            };
            session::run_retryable(&state.sessions, &state.fail_points, command, move || {
                job.run()
            })
            .await
        }
        None if name == "getMore" => Completion::Done(cursor::get_more(&job.ctx(), &job.cmd).await),
        None if INLINE_COMMANDS.contains(&name) => Completion::Done(job.run()),
        None => Completion::Done(off_runtime(move || job.run()).await.and_then(|r| r)),
    };
    let last_op = *last_op.lock();
    let primary_wait = primary_wait.lock().take();
    (completion, last_op, primary_wait)
}

/// A synchronous command with everything it needs, owned, so that it can run on another
/// thread.
struct Job {
    state: Arc<ServerState>,
    conn: ConnectionInfo,
    db: String,
    now: DateTime,
    deadline: Option<Instant>,
    name: String,
    cmd: Document,
    /// The term, when the command arrived on a replica-set member that was primary.
    admitted: Option<i64>,
    /// Where the run leaves the time of the last oplog entry it wrote (none when replayed).
    last_op: Arc<parking_lot::Mutex<Option<bson::Timestamp>>>,
    /// Where a `$out` or `$merge` run on a secondary leaves its write-concern wait on the
    /// primary ([`state::Member::write_through_primary`]).
    primary_wait: Arc<parking_lot::Mutex<Option<state::PrimaryWait>>>,
}

impl Job {
    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            state: &self.state,
            db: &self.db,
            conn: &self.conn,
            now: self.now,
            deadline: self.deadline,
            snapshot: None,
            admitted: self.admitted,
            primary_wait: &self.primary_wait,
        }
    }

    /// Runs the command, unless its deadline passed before it could start (blocked by a
    /// fail point, or waiting for a thread).
    fn run(&self) -> Result<Document> {
        let ctx = self.ctx();
        ctx.check_deadline()?;
        // On a replica-set member a write holds the state transition lock while it runs.
        let _intent = match &self.state.replica {
            Some(replica) => replica.write_intent(&self.name, &self.cmd, self.admitted)?,
            None => None,
        };
        let committed = committed_read(&self.state, &self.name, &self.cmd)?;
        // A majority read's `operationTime` is its commit point's time, unless it wrote
        // (`$out`, `$merge`): `computeOperationTime`
        // (`src/mongo/db/service_entry_point_common.cpp`) answers the last committed optime
        // for a read at `kMajorityReadConcern` (jstest
        // `jstests/replsets/operation_time_read_and_write_concern.js`).
        let mut read_at = None;
        let (result, last_op) = crate::engine::changes::recording_last_op(|| match committed {
            None => execute(&ctx, &self.name, &self.cmd),
            Some(replica) => {
                let mut result = None;
                read_at = replica.read_committed(&mut |catalog| {
                    let ctx = Ctx {
                        snapshot: Some(catalog),
                        ..self.ctx()
                    };
                    result = Some(execute(&ctx, &self.name, &self.cmd));
                })?;
                result.unwrap_or_else(|| Err(CommandError::internal("the read did not run")))
            }
        });
        *self.last_op.lock() = last_op.or(read_at);
        result
    }
}

/// The read commands that read a replica-set member's committed snapshot at majority read
/// concern (an `aggregate` that opens a change stream reads the member's log up to the
/// commit point instead, see [`change_stream`]).
const COMMITTED_READS: &[&str] = &["find", "aggregate", "count", "distinct"];

/// For a command on a member of an emulated replica set at `readConcern: {level:
/// "majority"}`: the member, whose data as of its majority commit point the command reads
/// (`crate::replset`'s notes). `None` for a command that reads the server's data as it
/// stands: a server outside a set, another level, or a change stream.
///
/// # Errors
/// On a set member: another command at majority read concern (`InvalidOptions`, as mongod
/// answers a command that supports only `local`, e.g. `ping`: jstest
/// `jstests/noPassthrough/read_majority.js`; the emulator reads no other command's data at
/// the commit point, and never answers local data for it); `linearizable` read concern, which mongod serves only on a
/// primary that confirms it still is one with a majority write after the read, not
/// emulated (`InvalidOptions`, as the emulator refuses `snapshot`).
fn committed_read<'s>(
    state: &'s ServerState,
    name: &str,
    cmd: &Document,
) -> Result<Option<&'s std::sync::Arc<dyn state::Member>>> {
    let Some(replica) = &state.replica else {
        return Ok(None);
    };
    let level = cmd
        .get_document("readConcern")
        .ok()
        .and_then(|rc| rc.get_str("level").ok());
    match level {
        Some("majority") => {}
        Some("linearizable") => {
            return Err(CommandError::new(
                codes::INVALID_OPTIONS,
                "readConcern level 'linearizable' is not supported by this emulator on a replica set member",
            ));
        }
        _ => return Ok(None),
    }
    if !COMMITTED_READS.contains(&name) {
        return Err(CommandError::new(
            codes::INVALID_OPTIONS,
            format!("Command {name} does not support {{ readConcern: {{ level: \"majority\" }} }}"),
        ));
    }
    let change_stream = name == "aggregate"
        && cmd
            .get_array("pipeline")
            .ok()
            .and_then(|p| p.first())
            .and_then(Bson::as_document)
            .is_some_and(|stage| stage.contains_key("$changeStream"));
    Ok((!change_stream).then_some(replica))
}

/// What every command shares before it runs: its `$db`, transactions refused, `txnNumber`
/// checked, the handshake's `appName` remembered. Returns the database and, for a retryable
/// write, its session and transaction number.
#[allow(clippy::type_complexity)]
fn prepare(
    state: &ServerState,
    conn: &mut ConnectionInfo,
    name: &str,
    cmd: &Document,
    kind: RequestKind,
) -> Result<(String, Option<(Vec<u8>, i64)>)> {
    // Since 5.1 mongod takes OP_QUERY only for the handshake of old drivers.
    if kind == RequestKind::Query && !matches!(name, "hello" | "isMaster") {
        return Err(CommandError::new(
            352,
            format!(
                "Unsupported OP_QUERY command: {name}. The client driver may require an upgrade. \
                 For more details see https://dochub.mongodb.org/core/legacy-opcode-removal"
            ),
        ));
    }
    let db = match cmd.get("$db") {
        Some(Bson::String(db)) => db.clone(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '$db' is the wrong type '{}', expected type 'string'",
                crate::engine::compare::type_alias(other)
            )));
        }
        None if kind == RequestKind::Query => "admin".to_string(),
        None => {
            return Err(CommandError::new(
                40571,
                "OP_MSG requests require a $db argument",
            ));
        }
    };
    if cmd.contains_key("startTransaction")
        || cmd.contains_key("autocommit")
        || matches!(name, "commitTransaction" | "abortTransaction")
    {
        return Err(CommandError::new(
            codes::ILLEGAL_OPERATION,
            "Transactions are not supported by this emulator (mongolock never uses them)",
        ));
    }
    if cmd.contains_key("txnNumber") {
        if state.standalone {
            return Err(CommandError::new(
                codes::ILLEGAL_OPERATION,
                "Transaction numbers are only allowed on a replica set member or mongos",
            ));
        }
        if !RETRYABLE_WRITES.contains(&name) {
            return Err(CommandError::new(
                50768,
                format!(
                    "txnNumber may only be provided for multi-document transactions and retryable write commands. txnNumber found for command {name}"
                ),
            ));
        }
    }
    args::check_read_concern(cmd)?;
    if matches!(name, "hello" | "isMaster")
        && let Some(app) = conn_app_name(cmd)
    {
        conn.app_name = Some(app);
    }
    state.local_sessions.touch(cmd, state.clock.now());
    if let (Some(lsid), Some(txn)) = (session::lsid_key(cmd)?, cmd.get("txnNumber")) {
        let txn = match txn {
            Bson::Int64(n) => *n,
            Bson::Int32(n) => i64::from(*n),
            other => {
                return Err(CommandError::type_mismatch(format!(
                    "BSON field 'txnNumber' is the wrong type '{}', expected type 'long'",
                    crate::engine::compare::type_alias(other)
                )));
            }
        };
        return Ok((db, Some((lsid, txn))));
    }
    Ok((db, None))
}

fn conn_app_name(cmd: &Document) -> Option<String> {
    cmd.get_document("client")
        .ok()?
        .get_document("application")
        .ok()?
        .get_str("name")
        .ok()
        .map(str::to_string)
}

/// mongod's command aliases.
fn canonical_name(name: &str) -> &str {
    match name {
        "ismaster" => "isMaster",
        "findandmodify" => "findAndModify",
        "buildinfo" => "buildInfo",
        other => other,
    }
}

/// The synchronous commands: everything but the handshake and awaiting getMore.
fn execute(ctx: &Ctx<'_>, name: &str, cmd: &Document) -> Result<Document> {
    match name {
        "ping" => admin::ping(ctx, cmd),
        "buildInfo" => admin::build_info(ctx, cmd),
        "endSessions" => admin::end_sessions(ctx, cmd),
        "listDatabases" => admin::list_databases(ctx, cmd),
        "listCollections" => admin::list_collections(ctx, cmd),
        "create" => admin::create(ctx, cmd),
        "drop" => admin::drop(ctx, cmd),
        "dropDatabase" => admin::drop_database(ctx, cmd),
        "collMod" => collection_admin::coll_mod(ctx, cmd),
        "renameCollection" => collection_admin::rename_collection(ctx, cmd),
        "insert" => write::insert(ctx, cmd),
        "update" => write::update(ctx, cmd),
        "delete" => write::delete(ctx, cmd),
        "findAndModify" => find_and_modify::find_and_modify(ctx, cmd),
        "find" => find::find(ctx, cmd),
        "count" => find::count(ctx, cmd),
        "distinct" => find::distinct(ctx, cmd),
        "killCursors" => cursor::kill_cursors(ctx, cmd),
        "aggregate" => aggregate::aggregate(ctx, cmd),
        "createIndexes" => indexes::create_indexes(ctx, cmd),
        "listIndexes" => indexes::list_indexes(ctx, cmd),
        "dropIndexes" => indexes::drop_indexes(ctx, cmd),
        "configureFailPoint" => admin::configure_fail_point(ctx, cmd),
        "emulatorClock" => admin::emulator_clock(ctx, cmd),
        "hello" | "isMaster" => handshake::hello(ctx, cmd, name),
        other => Err(CommandError::new(
            codes::COMMAND_NOT_FOUND,
            format!("no such command: '{other}'"),
        )),
    }
}

/// Adds `ok`, error labels and cluster time to a handler's result.
fn finish(state: &ServerState, result: Result<Document>, retryable_write: bool) -> Document {
    let mut reply = match result {
        Ok(mut body) => {
            if !body.contains_key("ok") {
                body.insert("ok", 1.0);
            }
            body
        }
        Err(error) => {
            let mut body = error.to_reply();
            let labels = match &error.labels {
                Some(labels) => labels.clone(),
                None if retryable_write && RETRYABLE_CODES.contains(&error.code) => {
                    vec!["RetryableWriteError".to_string()]
                }
                None if change_stream::NON_RESUMABLE_CODES.contains(&error.code) => {
                    vec!["NonResumableChangeStreamError".to_string()]
                }
                None => Vec::new(),
            };
            if !labels.is_empty() {
                body.insert("errorLabels", labels);
            }
            body
        }
    };
    cluster_fields(state, &mut reply);
    reply
}
