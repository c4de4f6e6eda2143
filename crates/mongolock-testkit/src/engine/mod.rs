//! The document engine: comparison, matching, projection, sorting, expressions, updates and
//! aggregation stages. Pure functions over `bson` values; storage and commands live elsewhere.

pub mod changes;
pub mod collation;
pub mod collection;
pub mod compare;
pub mod delta;
pub mod error;
pub mod expr;
pub mod index;
pub mod matcher;
pub mod pipeline;
pub mod projection;
pub mod size;
pub mod sort;
pub mod update;
pub mod update_description;

use std::time::Instant;

use bson::{DateTime, Document, Timestamp};

pub use error::{CommandError, Result};

/// What an operation evaluates against besides the document itself.
///
/// `now` is fixed for the whole operation, as `$$NOW` is in mongod: every stage and every
/// document of one command sees the same value.
#[derive(Debug, Clone)]
pub struct EvalContext {
    /// `$$NOW`: the server clock when the command started.
    pub now: DateTime,
    /// `$$CLUSTER_TIME`; `None` on a standalone, where using it is an error.
    pub cluster_time: Option<Timestamp>,
    /// User variables from the command's `let`, already evaluated to constants.
    pub vars: Document,
    /// When the command's `maxTimeMS` runs out, if it has one.
    pub deadline: Option<Instant>,
}

impl EvalContext {
    /// A context at time `now` with no cluster time, no user variables and no deadline.
    pub fn at(now: DateTime) -> Self {
        Self {
            now,
            cluster_time: None,
            vars: Document::new(),
            deadline: None,
        }
    }

    /// Fails with `MaxTimeMSExpired` once the command's deadline has passed. Called where
    /// mongod checks for interruption while it works: before each document it reads or
    /// writes, as its plan executors do at their yield points.
    ///
    /// # Errors
    ///
    /// `MaxTimeMSExpired` (50) when the deadline has passed.
    pub fn check_deadline(&self) -> Result<()> {
        check_deadline(self.deadline)
    }
}

/// Fails with `MaxTimeMSExpired` (50, "operation exceeded time limit", mongod's message for
/// an operation whose deadline passed) once `deadline` has passed.
///
/// # Errors
///
/// `MaxTimeMSExpired` when the deadline has passed.
pub fn check_deadline(deadline: Option<Instant>) -> Result<()> {
    match deadline {
        Some(at) if Instant::now() >= at => Err(CommandError::new(
            error::codes::MAX_TIME_MS_EXPIRED,
            "operation exceeded time limit",
        )),
        _ => Ok(()),
    }
}
