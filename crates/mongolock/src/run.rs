//! Work run under a lock: the closure forms of every handle ([`Mutex::run`] and its kin,
//! [`MultiLock::run`], [`Election::lead`]) share [`under`], which runs the work with its
//! guard, stops it if the lease is lost first, and lets go of the lock after.
//!
//! What the call returns, once the lock was granted:
//!
//! - The lease was seen lost before the work returned: the work is dropped (at its next
//!   `.await`, or as soon as it returns) and the call fails with
//!   [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost).
//! - The work returned an error: that error, untouched.
//! - The work returned a value with its lease not seen lost: that value, whatever the
//!   release says after (a late loss, or a release that failed and is retried in the
//!   background). The release's outcome is logged.
//!
//! [`Mutex::run`]: crate::Mutex::run
//! [`MultiLock::run`]: crate::MultiLock::run
//! [`Election::lead`]: crate::Election::lead

use std::future::Future;

use crate::error::{Error, ErrorKind, Result};
use crate::guard::LockGuard;
use crate::lock::{LeaseState, LossReason};
use crate::wait;

/// What the work runs under: a guard, a multi-lock's guard (its impl is in `multi.rs`), or a
/// leadership (in `election.rs`).
pub(crate) trait Held: Sync {
    /// Resolves when the lease (any member's) is lost, with the reason.
    fn lost(&self) -> impl Future<Output = LossReason> + Send;

    /// Held, suspended or lost, read against the clock now.
    fn state(&self) -> LeaseState;

    /// The error that says the lease was lost for `reason`, naming the resource.
    fn lost_error(&self, reason: LossReason) -> Error;

    /// Lets go of the lock, in one round trip (one per member).
    fn release(self) -> impl Future<Output = Result<()>> + Send;
}

impl Held for LockGuard {
    fn lost(&self) -> impl Future<Output = LossReason> + Send {
        LockGuard::lost(self)
    }

    fn state(&self) -> LeaseState {
        LockGuard::state(self)
    }

    fn lost_error(&self, reason: LossReason) -> Error {
        wait::lease_lost(self.resource(), reason)
    }

    fn release(self) -> impl Future<Output = Result<()>> + Send {
        LockGuard::release(self)
    }
}

/// Runs `work` with `held`, and lets go of the lock after (see the module docs for what it
/// returns).
///
/// # Cancel safety
///
/// Dropping the future drops the work and `held`, which lets go of the lock in the
/// background.
pub(crate) async fn under<H, T, E>(
    held: H,
    work: impl AsyncFnOnce(&H) -> Result<T, E>,
) -> Result<T, E>
where
    H: Held,
    E: From<Error>,
{
    // The work borrows `held`: it is dropped at the end of this block, before the release.
    let finished = {
        let work = work(&held);
        tokio::select! {
            biased;
            reason = held.lost() => Err(reason),
            result = work => Ok(result),
        }
    };
    match finished {
        // Lost first: the work was dropped unfinished. Dropping `held` lets go of the rest
        // (a multi-lock's other members) in the background.
        Err(reason) => Err(held.lost_error(reason).into()),
        Ok(Err(error)) => {
            let_go(held).await;
            Err(error)
        }
        Ok(Ok(value)) => {
            // The loss may be known by the clock before the watcher fired: the work then
            // ran past its lease, and its value does not count.
            if let LeaseState::Lost(reason) = held.state() {
                return Err(held.lost_error(reason).into());
            }
            let_go(held).await;
            Ok(value)
        }
    }
}

/// Releases `held` after the work returned: the release's outcome is logged, not returned
/// (the work is done either way).
async fn let_go(held: impl Held) {
    match held.release().await {
        Ok(()) => {}
        Err(error) if matches!(error.kind(), ErrorKind::LeaseLost { .. }) => {
            tracing::warn!(
                %error,
                "the work under the lock had finished when its release found the lease already gone"
            );
        }
        Err(error) => {
            tracing::warn!(
                %error,
                "the work under the lock finished, but its release failed; the client retries it"
            );
        }
    }
}
