//! The runtime the blocking API runs on: one multi-thread tokio runtime for the process,
//! made at the first use, as the driver's `sync` API has one. Every blocking call is a
//! `block_on` on it, refused with a typed error where tokio's would panic; everything the
//! blocking types own that may spawn when dropped is dropped inside it.

use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle, Runtime};

use crate::error::{Error, Result};

/// The worker threads of the blocking runtime: leases are renewed and background releases
/// sent there, while callers wait on their own threads.
const WORKER_THREADS: usize = 2;

/// The process's blocking runtime, made at its first use.
static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The blocking runtime, made now if this is its first use.
fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("mongolock-blocking")
            .enable_all()
            .build()
            .unwrap_or_else(|error| panic!("mongolock: the blocking runtime cannot start: {error}"))
    })
}

/// Runs `future` to its end on the blocking runtime, blocking this thread.
///
/// Refused where a thread is in a tokio runtime's context (an async task, a `block_on`, a
/// `spawn_blocking` closure, under `Handle::enter`): there, tokio's own `block_on` would
/// panic, and blocking a runtime's thread can stall the very runtime the call waits for.
/// The future is then dropped unpolled, inside the blocking runtime, so that what it owns
/// (a guard being released, say) is dropped as it would be anywhere else.
pub(crate) fn block_on<F: Future>(future: F) -> Result<F::Output> {
    if Handle::try_current().is_ok() {
        let _entered = runtime().enter();
        drop(future);
        return Err(inside_runtime());
    }
    Ok(runtime().block_on(future))
}

/// The error of a blocking call made inside an async runtime.
fn inside_runtime() -> Error {
    Error::invalid(
        "runtime",
        "a blocking call was made on a thread inside a tokio runtime; \
         use the async API there (`mongolock::LockClient`)",
    )
}

/// A value that is dropped inside the blocking runtime: a guard's drop spawns its release
/// on the runtime of the dropping thread, which is then the blocking runtime, whatever
/// thread drops it (one of another runtime included), so that the release is sent by the
/// runtime that keeps the lease.
pub(crate) struct Entered<T>(Option<T>);

impl<T> Entered<T> {
    pub(crate) fn new(value: T) -> Self {
        Entered(Some(value))
    }

    /// The value, to be moved into a future run by [`block_on`] or wrapped again.
    pub(crate) fn into_inner(mut self) -> T {
        self.0.take().expect("present until dropped")
    }
}

impl<T> Deref for Entered<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0.as_ref().expect("present until dropped")
    }
}

impl<T> DerefMut for Entered<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().expect("present until dropped")
    }
}

impl<T> Drop for Entered<T> {
    fn drop(&mut self) {
        let Some(value) = self.0.take() else {
            return;
        };
        // Before the runtime's first use, nothing it could run was started either: no
        // runtime is made just to drop a value.
        let _entered = RUNTIME.get().map(Runtime::enter);
        drop(value);
    }
}

impl<T: Clone> Clone for Entered<T> {
    fn clone(&self) -> Self {
        Entered::new(T::clone(self))
    }
}

impl<T: fmt::Debug> fmt::Debug for Entered<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        T::fmt(self, f)
    }
}
