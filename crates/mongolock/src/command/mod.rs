//! The commands sent to the server, one file per operation. Each file opens with the command
//! as it goes on the wire, builds its filter and pipeline in plain functions (unit-tested
//! without a server), and runs them in one `run`.
//!
//! Every write is a single-stage aggregation pipeline (`$replaceWith`) that computes the whole
//! new document from the old one with `$$NOW`, so deciding and writing are one atomic step on
//! the server and time is always the server's.

pub(crate) mod acquire;
pub(crate) mod indexes;
pub(crate) mod purge;
pub(crate) mod release;
pub(crate) mod renew;
pub(crate) mod status;
