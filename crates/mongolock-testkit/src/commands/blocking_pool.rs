//! Synchronous work (a command, a TTL pass) run on tokio's blocking pool.

use crate::engine::error::{CommandError, Result};

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
