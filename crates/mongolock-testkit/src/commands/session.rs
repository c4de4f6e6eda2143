//! Logical sessions and retryable writes.
//!
//! mongod remembers, per session, the highest `txnNumber` it has seen and the reply of the
//! write it executed under it. A retry with the same `lsid` and `txnNumber` gets the stored
//! reply instead of running again, and a retry that arrives while the first attempt still
//! runs waits for it (the per-session lock below).
//!
//! The `onPrimaryTransactionalWrite` fail point is consulted here, after the replay check:
//! like mongod's, it acts only on a write that really executes, never on a replayed retry.

use std::collections::HashMap;
use std::sync::Arc;

use bson::{Bson, Document};
use parking_lot::Mutex;

use super::blocking_pool::off_runtime;
use crate::engine::error::{CommandError, Result, codes};
use crate::faults::fail_point::FailPoints;

/// The retryable-write history of one session.
#[derive(Debug, Default)]
struct TxnState {
    txn_number: Option<i64>,
    reply: Option<Document>,
}

/// Every session the server has seen a retryable write on.
#[derive(Debug, Default)]
pub struct Sessions {
    by_lsid: Mutex<HashMap<Vec<u8>, Arc<tokio::sync::Mutex<TxnState>>>>,
}

impl Sessions {
    fn slot(&self, lsid: Vec<u8>) -> Arc<tokio::sync::Mutex<TxnState>> {
        self.by_lsid.lock().entry(lsid).or_default().clone()
    }

    /// Forgets sessions (`endSessions`).
    pub fn end(&self, lsids: impl IntoIterator<Item = Vec<u8>>) {
        let mut map = self.by_lsid.lock();
        for lsid in lsids {
            map.remove(&lsid);
        }
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

/// Runs a retryable write at most once per `(lsid, txnNumber)`. The write runs on the
/// blocking pool (see [`off_runtime`]) with the session held, and is recorded in the
/// session's history on the same thread, right after it is applied.
///
/// # Cancel safety
/// Cancel safe: dropped while waiting for the session (a retry racing its first attempt),
/// nothing ran; once the write has started it completes, and is recorded, on its own
/// thread.
pub async fn run_retryable(
    sessions: &Sessions,
    fail_points: &FailPoints,
    lsid: Vec<u8>,
    txn_number: i64,
    execute: impl FnOnce() -> Result<Document> + Send + 'static,
) -> Completion {
    let slot = sessions.slot(lsid);
    let mut txn = slot.lock_owned().await;
    if let Some(current) = txn.txn_number {
        if txn_number < current {
            return Completion::Done(Err(CommandError::new(
                codes::TRANSACTION_TOO_OLD,
                format!(
                    "Cannot start transaction {txn_number} on session because a newer transaction {current} has already started"
                ),
            )));
        }
        if txn_number == current
            && let Some(reply) = &txn.reply
        {
            let mut replayed = reply.clone();
            replayed.insert("retriedStmtIds", vec![Bson::Int32(0)]);
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
    let result = off_runtime(move || {
        let result = execute();
        if let Ok(reply) = &result {
            // Only a write that succeeded is recorded; a failed one may be run again.
            let failed = reply.get_array("writeErrors").is_ok_and(|e| !e.is_empty());
            txn.txn_number = Some(txn_number);
            txn.reply = if failed { None } else { Some(reply.clone()) };
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
