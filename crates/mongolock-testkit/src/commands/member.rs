//! What the commands need of the replica set their server is a member of: the server's
//! state holds its member as this trait ([`ServerState::replica`]), which the set's member
//! (`crate::replset`) implements, so that the commands never import the set (the set
//! imports them: it starts its members as servers and reads their state).
//!
//! [`ServerState::replica`]: super::state::ServerState::replica

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;

use bson::Document;

use super::state::ServerState;
use crate::engine::error::Result;

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
