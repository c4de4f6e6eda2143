//! Logical sessions and retryable writes.
//!
//! mongod remembers, per session, the highest `txnNumber` it has seen and the statements it
//! executed under it. A retry with the same `lsid` and `txnNumber` gets the reply back
//! instead of running again, and a retry that arrives while the first attempt still runs
//! waits for it (the per-session turn below).
//!
//! On a replica-set member the record of a write is the one its oplog entries carry (see
//! [`RetryableWrite`]): the member that runs it keeps it, the members that apply its
//! entries take it ([`Sessions::applied`]), and a rollback rebuilds it with the data
//! ([`Sessions::invalidate_all`]), so a retry on the next primary is answered from it. A
//! write that wrote no oplog entry (an update that matched nothing) leaves no record of its
//! statement there, and a retry runs it again, as mongod records a statement when its oplog
//! entry is written (`onWriteOpCompleted`, `src/mongo/db/op_observer/op_observer_impl.cpp`;
//! `TransactionParticipant::Participant::onWriteOpCompletedOnPrimary`,
//! `src/mongo/db/transaction/transaction_participant.cpp`) and runs any statement it does
//! not find executed (`performUpdates`, `src/mongo/db/ops/write_ops_exec.cpp`). A server
//! outside a set has no oplog and keeps the reply of every write that succeeded.
//!
//! The `onPrimaryTransactionalWrite` fail point is consulted here, after the replay check:
//! like mongod's, it acts only on a write that really executes, never on a replayed retry.

use std::collections::HashMap;
use std::sync::Arc;

use bson::{Bson, Document};
use parking_lot::Mutex;

use super::blocking_pool::off_runtime;
use crate::engine::changes::{RetryableWrite, in_retryable_write};
use crate::engine::error::{CommandError, Result, codes};
use crate::faults::fail_point::FailPoints;

/// One session: its turn, and its retryable-write history.
#[derive(Debug, Default)]
struct Session {
    /// Held while a retryable write of the session runs here: a retry waits for it.
    turn: Arc<tokio::sync::Mutex<()>>,
    history: Mutex<History>,
}

/// What a member knows of a session's retryable writes (mongod's `config.transactions`
/// record and the session's oplog chain).
#[derive(Debug, Default)]
struct History {
    /// The highest `txnNumber` seen.
    txn_number: Option<i64>,
    /// The write run under it, when a retry may get its reply back.
    write: Option<Arc<RetryableWrite>>,
}

/// Every session the server has seen a retryable write on.
#[derive(Debug, Default)]
pub struct Sessions {
    by_lsid: Mutex<HashMap<Vec<u8>, Arc<Session>>>,
}

impl Sessions {
    fn session(&self, lsid: Vec<u8>) -> Arc<Session> {
        self.by_lsid.lock().entry(lsid).or_default().clone()
    }

    /// Forgets sessions (`endSessions`).
    pub fn end(&self, lsids: impl IntoIterator<Item = Vec<u8>>) {
        let mut map = self.by_lsid.lock();
        for lsid in lsids {
            map.remove(&lsid);
        }
    }

    /// A replica-set member applied an oplog entry of `write`: the session's record moves
    /// to it, as a secondary writes the entry's `txnNumber` and optime to the session's
    /// `config.transactions` record (`src/mongo/db/repl/session_update_tracker.cpp`,
    /// `createMatchingTransactionTableUpdate`), whatever the member knew of the session
    /// before.
    pub fn applied(&self, write: &Arc<RetryableWrite>) {
        let session = self.session(write.lsid.clone());
        let mut history = session.history.lock();
        history.txn_number = Some(write.txn_number);
        history.write = Some(write.clone());
    }

    /// Forgets every session's history, before a rollback rebuilds it with the data: mongod
    /// invalidates every session when a rolled-back entry belonged to one and recovers
    /// `config.transactions` with the other collections (`src/mongo/db/repl/rollback_impl.cpp`,
    /// `MongoDSessionCatalog::invalidateAllSessions`, then `_recoverToStableTimestamp`).
    pub fn invalidate_all(&self) {
        self.by_lsid.lock().clear();
    }
}

/// The session key of a command's `lsid`, if it has one.
pub fn lsid_key(cmd: &Document) -> Result<Option<Vec<u8>>> {
    match cmd.get("lsid") {
        None => Ok(None),
        Some(Bson::Document(lsid)) => lsid_bytes(lsid).map(Some),
        Some(_) => Err(CommandError::type_mismatch(
            "BSON field 'lsid' is the wrong type, expected type 'object'",
        )),
    }
}

/// The bytes of `{id: UUID}`.
pub fn lsid_bytes(lsid: &Document) -> Result<Vec<u8>> {
    match lsid.get("id") {
        Some(Bson::Binary(bin)) => Ok(bin.bytes.clone()),
        _ => Err(CommandError::new(
            40414,
            "BSON field 'OperationSessionInfo.lsid.id' is missing but a required field",
        )),
    }
}

/// How a retryable write ended.
#[derive(Debug)]
pub enum Completion {
    /// Reply with this result.
    Done(Result<Document>),
    /// Close the connection without replying (`onPrimaryTransactionalWrite`).
    CloseConnection,
}

/// A retryable write command about to run.
#[derive(Debug)]
pub struct Retryable {
    /// Its session's id (the bytes of `lsid.id`).
    pub lsid: Vec<u8>,
    /// Its `txnNumber`.
    pub txn_number: i64,
    /// The field a replay of it adds, naming the statements not run again
    /// ([`retried_statements`]).
    pub retried: (&'static str, Bson),
    /// Whether the server is a replica-set member, where only a write that wrote an oplog
    /// entry leaves a record a retry gets back (see the module's notes).
    pub replicated: bool,
}

/// The field a replayed reply of command `name` adds to name the statements it did not run
/// again: `findAndModify` names its one statement in `retriedStmtId`
/// (`src/mongo/db/commands/find_and_modify.cpp`: `setRetriedStmtId(stmtId)`); an `insert`,
/// `update` or `delete` lists every statement of its batch in `retriedStmtIds`
/// (`performInserts`, `performUpdates`, `performDeletes`, `src/mongo/db/ops/write_ops_exec.cpp`:
/// `out.retriedStmtIds`), statement `i` being the batch's `i`th, as drivers send no
/// `stmtIds`. The emulator keeps a command's reply whole, so a replay names every statement
/// of the batch.
pub fn retried_statements(name: &str, cmd: &Document) -> (&'static str, Bson) {
    let batch = match name {
        "findAndModify" => return ("retriedStmtId", Bson::Int32(0)),
        "insert" => "documents",
        "update" => "updates",
        _ => "deletes",
    };
    let count = cmd.get_array(batch).map_or(1, Vec::len).max(1);
    let ids = (0..count).map(|i| Bson::Int32(i32::try_from(i).unwrap_or(i32::MAX)));
    ("retriedStmtIds", Bson::Array(ids.collect()))
}

/// Runs a retryable write at most once per `(lsid, txnNumber)`. The write runs on the
/// blocking pool (see [`off_runtime`]) with the session's turn held; the events it appends
/// carry it (its oplog entries, on a set member), and it is recorded in the session's
/// history on the same thread, right after it is applied.
///
/// A retry of the write that recorded a reply gets it back, with the statements it did not
/// run again named (`retried`). The reply is the one the write gave, which is what mongod
/// rebuilds from the write's oplog entries on any member (`write_ops_retryability.cpp`:
/// an update's `n`, `nModified` and `upserted`, a `findAndModify`'s document and
/// `lastErrorObject`). On a member that applied the write's entries while the member that
/// ran it had not yet answered, the retry waits for that answer.
///
/// # Cancel safety
/// Cancel safe: dropped while waiting for the session (a retry racing its first attempt),
/// nothing ran; once the write has started it completes, and is recorded, on its own
/// thread.
pub async fn run_retryable(
    sessions: &Sessions,
    fail_points: &FailPoints,
    command: Retryable,
    execute: impl FnOnce() -> Result<Document> + Send + 'static,
) -> Completion {
    let Retryable {
        lsid,
        txn_number,
        retried,
        replicated,
    } = command;
    let session = sessions.session(lsid.clone());
    let turn = session.turn.clone().lock_owned().await;
    let (current, previous) = {
        let history = session.history.lock();
        (history.txn_number, history.write.clone())
    };
    if let Some(current) = current {
        if txn_number < current {
            return Completion::Done(Err(CommandError::new(
                codes::TRANSACTION_TOO_OLD,
                format!(
                    "Cannot start transaction {txn_number} on session because a newer transaction {current} has already started"
                ),
            )));
        }
        if txn_number == current
            && let Some(previous) = previous
            && let Some(mut replayed) = previous.reply().await
        {
            replayed.insert(retried.0, retried.1);
            return Completion::Done(Ok(replayed));
        }
    }
    let fault = fail_points.on_primary_transactional_write();
    if let Some(code) = fault.and_then(|f| f.fail_before_commit) {
        // The write fails before it commits: nothing is applied or recorded.
        if fault.is_some_and(|f| f.close_connection) {
            return Completion::CloseConnection;
        }
        return Completion::Done(Err(CommandError::new(
            code,
            "Failing write before commit due to the onPrimaryTransactionalWrite failpoint. The write must not be reflected.",
        )));
    }
    let write = Arc::new(RetryableWrite::new(lsid, txn_number));
    let result = off_runtime(move || {
        let _turn = turn;
        // Ends the write as failed if it errs or panics: a retry runs it again, and no
        // member that applied its entries waits for it.
        let _ended = FailUnlessEnded(write.clone());
        // On a set member its oplog entries carry it; a server outside a set needs no
        // stamp on its events.
        let result = if replicated {
            in_retryable_write(&write, execute)
        } else {
            execute()
        };
        if let Ok(reply) = &result {
            // Only a write that succeeded is replayed; a failed one may be run again.
            let failed = reply.get_array("writeErrors").is_ok_and(|e| !e.is_empty());
            write.finish((!failed).then_some(reply));
            let mut history = session.history.lock();
            history.txn_number = Some(txn_number);
            history.write = (!replicated || write.is_logged()).then(|| write.clone());
        }
        result
    })
    .await
    .and_then(|result| result);
    if result.is_ok() && fault.is_some_and(|f| f.close_connection) {
        // Committed (and recorded for the retry), but the client never hears of it.
        return Completion::CloseConnection;
    }
    Completion::Done(result)
}

/// Ends a retryable write as failed when dropped, unless it ended already.
struct FailUnlessEnded(Arc<RetryableWrite>);

impl Drop for FailUnlessEnded {
    fn drop(&mut self) {
        self.0.finish(None);
    }
}
