//! The blocking API, for code that is not async: every call blocks the calling thread until
//! it is done. Enabled by the `blocking` feature:
//!
//! ```toml
//! mongolock = { version = "0.1", features = ["blocking"] }
//! ```
//!
//! Each type here is the async type of the same name, with the same settings and the same
//! promises (see [Guarantees](crate#guarantees)); its calls run on a tokio runtime that this
//! module owns, as the driver's `sync` API does. [`LockClient::connect`] makes the driver's
//! client there too, so a program needs no runtime of its own:
//!
//! ```
//! # let setup = tokio::runtime::Runtime::new().unwrap();
//! # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
//! # let uri = server.uri();
//! use std::time::Duration;
//! use mongolock::blocking::LockClient;
//!
//! let locks = LockClient::connect(&uri, "app", "locks")?;
//! locks.create_indexes()?;
//!
//! let guard = locks.mutex("nightly-report").ttl(Duration::from_secs(30)).acquire()?;
//! // ... work, passing guard.fencing_token() to the store, checking guard.is_lost() ...
//! guard.release()?;
//!
//! locks.shutdown()?;
//! # Ok::<(), mongolock::Error>(())
//! ```
//!
//! # The runtime
//!
//! One multi-thread tokio runtime for the process, with two worker threads, made at the
//! first use and never ended (the driver's `sync` API has one too). Its threads renew the
//! leases of every blocking client and send the releases of dropped guards, so a thread that
//! holds a guard needs to do nothing to keep it, and dropping a guard never blocks.
//!
//! # Inside async code
//!
//! A blocking call made on a thread in a tokio runtime's context (an async task, a
//! `block_on`, a `spawn_blocking` closure, under `Handle::enter`) does not block and does not
//! panic: it returns [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
//! naming `runtime`, and nothing is sent. (Tokio's own `block_on` panics there; blocking a
//! runtime's thread could stall the very runtime the call waits for.) Async code uses
//! [`crate::LockClient`]: [`LockClient::as_async`] is the one a blocking client wraps, and
//! [`LockClient::from_async`] wraps one, so that both kinds of code share one client.
//!
//! # What is left out
//!
//! The low-level calls ([`crate::LockClient::xlock`] and its kin) and the closure forms
//! ([`crate::Mutex::run`] and its kin) have no blocking face yet: run them with
//! [`block_on`], on the async client [`LockClient::as_async`] gives.

mod client;
mod election;
mod guard;
mod handle;
mod runtime;

pub use client::{LockClient, LockClientBuilder};
pub use election::{Election, LeaderChanges, Leadership};
pub use guard::{LockGuard, MultiGuard};
pub use handle::{MultiLock, Mutex, RwLock, Semaphore};

/// Runs `future` to its end on the blocking runtime, blocking this thread: for the async
/// calls this module has no blocking face for.
///
/// ```
/// # let setup = tokio::runtime::Runtime::new().unwrap();
/// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
/// # let locks = mongolock::blocking::LockClient::connect(&server.uri(), "doc", "locks")?;
/// use mongolock::{LockDetails, blocking};
///
/// let grant = blocking::block_on(locks.as_async().xlock("report", "job-1", LockDetails::default()))??;
/// assert_eq!(blocking::block_on(locks.as_async().unlock("job-1"))??, 1);
/// # let _ = grant;
/// # locks.shutdown()?;
/// # Ok::<(), mongolock::Error>(())
/// ```
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime` when
/// called on a thread inside a tokio runtime (see [the module](self)): `future` is dropped
/// without being polled, inside the blocking runtime.
///
/// # Panics
///
/// If the blocking runtime cannot start (the system refuses threads), at its first use; and
/// if `future` panics.
pub fn block_on<F: std::future::Future>(future: F) -> crate::Result<F::Output> {
    runtime::block_on(future)
}
