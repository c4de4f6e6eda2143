//! The document engine: comparison, matching, projection, sorting, expressions, updates and
//! aggregation stages. Pure functions over `bson` values; storage and commands live elsewhere.

pub mod changes;
pub mod collation;
pub mod collection;
pub mod compare;
pub mod error;
pub mod expr;
pub mod index;
pub mod matcher;
pub mod pipeline;
pub mod projection;
pub mod size;
pub mod sort;
pub mod update;

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
}

impl EvalContext {
    /// A context at time `now` with no cluster time and no user variables.
    pub fn at(now: DateTime) -> Self {
        Self {
            now,
            cluster_time: None,
            vars: Document::new(),
        }
    }
}
