#![doc = include_str!("../README.md")]
// Command errors carry the reply fields mongod sends (extra info, labels); they are built
// on the error path only, so their size costs nothing where it matters.
#![allow(clippy::result_large_err)]
// Every fallible function users can reach says when it fails.
#![warn(clippy::missing_errors_doc)]

pub mod arena;
pub mod checker;
pub(crate) mod commands;
pub(crate) mod engine;
pub mod faults;
pub mod replset;
pub mod server;
pub(crate) mod wire;

pub use faults::clock::Clock;
pub use faults::proxy::FaultProxy;
pub use replset::{ReplicaSet, ReplicaSetBuilder};
pub use server::{ServerVersion, TestServer, TestServerBuilder};
