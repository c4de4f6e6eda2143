//! Command dispatch: one request document in, one reply document out.
//!
//! `dispatch` reads the command name, applies what every command shares (`$db`, sessions,
//! retryable-write replay, transactions refused, cluster time on replies) and hands the
//! command to its family's module.

pub mod admin;
pub mod aggregate;
pub mod args;
pub mod change_stream;
pub mod collection_admin;
pub mod cursor;
pub mod find;
pub mod find_and_modify;
pub mod handshake;
pub mod indexes;
pub mod local_sessions;
pub mod session;
pub mod ttl;
pub mod views;
pub mod write;

use std::sync::Arc;

use bson::{Bson, DateTime, Document, doc};

use crate::engine::EvalContext;
use crate::engine::error::{CommandError, Result, codes};
use crate::engine::expr::Expr;
use crate::server::{ServerState, cluster_fields};
use crate::wire::{Request, RequestKind};
use session::Completion;

/// What one connection remembers between commands.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// The server-assigned connection id (`connectionId` in hello).
    pub id: i64,
    /// `client.application.name` from the handshake, matched by fail points' `appName`.
    pub app_name: Option<String>,
}

impl ConnectionInfo {
    /// A connection that has not shaken hands yet.
    pub fn new(id: i64) -> Self {
        Self { id, app_name: None }
    }
}

/// What the connection does after a command.
#[derive(Debug)]
pub enum Outcome {
    /// Send this reply body.
    Reply(Document),
    /// Close the socket without replying.
    CloseConnection,
}

/// Everything a command handler needs besides its arguments.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The server.
    pub state: &'a ServerState,
    /// The command's `$db`.
    pub db: &'a str,
    /// The connection it arrived on.
    pub conn: &'a ConnectionInfo,
    /// `$$NOW` for this command.
    pub now: DateTime,
}

impl Ctx<'_> {
    /// The evaluation context for this command, with its `let` variables evaluated.
    pub fn eval_context(&self, cmd: &Document, command: &str) -> Result<EvalContext> {
        let mut eval = EvalContext::at(self.now);
        if !self.state.standalone {
            eval.cluster_time = Some(self.state.cluster_time());
        }
        if let Some(vars) = args::opt_document(cmd, command, "let")? {
            let empty = Document::new();
            for (name, value) in vars {
                let valid = name
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_lowercase() || !c.is_ascii())
                    && name.chars().all(|c| c.is_alphanumeric() || c == '_');
                if !valid {
                    return Err(CommandError::new(
                        16870,
                        format!(
                            "'{name}' starts with an invalid character for a user variable name"
                        ),
                    ));
                }
                let evaluated = Expr::parse(value)?
                    .eval(&empty, &eval)?
                    .unwrap_or(Bson::Null);
                eval.vars.insert(name.clone(), evaluated);
            }
        }
        Ok(eval)
    }
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
    let ns = match cmd.iter().next() {
        Some((_, Bson::String(coll))) => cmd.get_str("$db").ok().map(|db| format!("{db}.{coll}")),
        _ => None,
    };
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
    let result = match run(state, conn, &name, cmd, kind).await {
        Completion::Done(result) => result,
        Completion::CloseConnection => return Outcome::CloseConnection,
    };
    let mut reply = finish(state, result, retryable);
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
) -> Completion {
    let (db, retryable) = match prepare(state, conn, name, &cmd, kind) {
        Ok(prepared) => prepared,
        Err(error) => return Completion::Done(Err(error)),
    };
    let job = Job {
        state: state.clone(),
        conn: conn.clone(),
        db,
        now: state.clock.now(),
        name: name.to_string(),
        cmd,
    };
    match retryable {
        Some((lsid, txn)) => session::run_retryable(state, lsid, txn, move || job.run()).await,
        None if name == "getMore" => Completion::Done(cursor::get_more(&job.ctx(), &job.cmd).await),
        None if INLINE_COMMANDS.contains(&name) => Completion::Done(job.run()),
        None => Completion::Done(off_runtime(move || job.run()).await.and_then(|r| r)),
    }
}

/// A synchronous command with everything it needs, owned, so that it can run on another
/// thread.
struct Job {
    state: Arc<ServerState>,
    conn: ConnectionInfo,
    db: String,
    now: DateTime,
    name: String,
    cmd: Document,
}

impl Job {
    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            state: &self.state,
            db: &self.db,
            conn: &self.conn,
            now: self.now,
        }
    }

    fn run(&self) -> Result<Document> {
        execute(&self.ctx(), &self.name, &self.cmd)
    }
}

/// Runs synchronous work (a command, a TTL pass) on tokio's blocking pool and waits for it,
/// so that it holds no runtime thread: a heavy command, or one blocked on a collection lock,
/// cannot keep other connections from being served, even on a current-thread runtime.
/// A panic in `work` is resumed in the caller, as if it had run there; a runtime that shuts
/// down before `work` started is `InterruptedAtShutdown` (11600).
///
/// # Cancel safety
/// Cancel safe in the sense that matters here: dropping the future does not stop `work`,
/// which runs to completion on its own thread; only its result is lost.
pub async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => Ok(value),
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        // Only a runtime shutting down cancels a blocking task before it starts.
        Err(_) => Err(CommandError::new(11600, "interrupted at shutdown")),
    }
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

/// Builds a cursor reply document.
pub fn cursor_reply(id: i64, ns: &str, batch: Vec<Document>, first: bool) -> Document {
    let key = if first { "firstBatch" } else { "nextBatch" };
    doc! { "cursor": { key: batch, "id": id, "ns": ns } }
}
