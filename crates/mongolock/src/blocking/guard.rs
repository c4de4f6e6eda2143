//! The blocking guards: [`LockGuard`] and [`MultiGuard`], each the async guard of the same
//! name, whose release and wait for loss block, and whose drop releases in the background.

use std::time::Duration;

use super::runtime::{Entered, block_on};
use crate::error::Result;
use crate::lock::{Grant, LeaseState, LockKind, LossReason};

/// A held lock whose lease the blocking runtime renews until the guard is released or
/// dropped: the blocking face of [`crate::LockGuard`], which says what is promised.
///
/// Check [`is_lost`](Self::is_lost) before each step of protected work (it reads the clock,
/// so it is right even if nothing ran for a while), or wait for the loss on a thread of its
/// own with [`wait_lost`](Self::wait_lost); pass [`fencing_token`](Self::fencing_token) to
/// the store you protect.
///
/// Dropping the guard never blocks: its release is sent by the blocking runtime in the
/// background, and [`LockClient::shutdown`](super::LockClient::shutdown) waits for it.
///
/// ```
/// # let setup = tokio::runtime::Runtime::new().unwrap();
/// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
/// # let locks = mongolock::blocking::LockClient::connect(&server.uri(), "doc", "locks")?;
/// use std::time::Duration;
/// use mongolock::{LeaseState, LockKind};
///
/// let guard = locks.mutex("nightly-report").acquire()?;
/// assert_eq!((guard.resource(), guard.kind()), ("nightly-report", LockKind::Exclusive));
/// assert_eq!(guard.state(), LeaseState::Held);
/// assert!(!guard.is_lost() && guard.time_left() > Duration::ZERO);
/// assert_eq!(guard.wait_lost_timeout(Duration::from_millis(10))?, None, "still held");
/// let token = guard.fencing_token();
/// guard.release()?;
/// # let _ = token;
/// # locks.shutdown()?;
/// # Ok::<(), mongolock::Error>(())
/// ```
#[must_use = "dropping a guard releases its lock at once (in the background); hold it while you work"]
#[derive(Debug)]
pub struct LockGuard {
    inner: Entered<crate::LockGuard>,
}

impl LockGuard {
    pub(crate) fn new(inner: crate::LockGuard) -> Self {
        LockGuard {
            inner: Entered::new(inner),
        }
    }

    /// The async guard this one wraps, for what only it has.
    pub fn as_async(&self) -> &crate::LockGuard {
        &self.inner
    }

    /// The fencing token of this grant: greater than every token granted on the resource
    /// before. Pass it to what the lock protects, and have that reject lower tokens.
    pub fn fencing_token(&self) -> i64 {
        self.inner.fencing_token()
    }

    /// A [`Fence`](crate::Fence) with this grant's fencing token.
    pub fn fence(&self) -> crate::Fence {
        self.inner.fence()
    }

    /// The locked resource.
    pub fn resource(&self) -> &str {
        self.inner.resource()
    }

    /// The lock id this guard holds the lock with.
    pub fn lock_id(&self) -> &str {
        self.inner.lock_id()
    }

    /// Exclusive (mutex, writer) or shared (reader, semaphore permit).
    pub fn kind(&self) -> LockKind {
        self.inner.kind()
    }

    /// The grant as the server made it (its times are the server's).
    pub fn grant(&self) -> &Grant {
        self.inner.grant()
    }

    /// Held, suspended (renewals failing, deadline ahead) or lost, read against the
    /// monotonic clock at the call.
    pub fn state(&self) -> LeaseState {
        self.inner.state()
    }

    /// True once the lease is lost (or released): stop touching what the lock protects.
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// How long the lease is sure to last without another successful renewal (zero once
    /// lost).
    pub fn time_left(&self) -> Duration {
        self.inner.time_left()
    }

    /// Blocks until the lease is lost, and returns the reason: no later than the local
    /// deadline, before the server can grant the lock to anyone else (under the conditions
    /// of [Guarantees](crate#guarantees)). For a thread that
    /// watches while others work.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn wait_lost(&self) -> Result<LossReason> {
        block_on(self.inner.lost())
    }

    /// Blocks until the lease is lost or `timeout` has passed: the reason, or `None` if the
    /// lease was still held at the timeout.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn wait_lost_timeout(&self, timeout: Duration) -> Result<Option<LossReason>> {
        block_on(async { tokio::time::timeout(timeout, self.inner.lost()).await.ok() })
    }

    /// Releases the lock now, in one round trip, as [`crate::LockGuard::release`] does: `Ok`
    /// means the lease was held throughout, as far as the server knows.
    ///
    /// # Errors
    ///
    /// As [`crate::LockGuard::release`]: [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost)
    /// if the lease was lost first, a database error if the release could not be done (the
    /// client then retries it in the background).
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime: the guard is dropped then, which releases it in
    /// the background.
    pub fn release(self) -> Result<()> {
        let guard = self.inner.into_inner();
        block_on(guard.release())?
    }
}

/// A set of resources held together whose release and wait for loss block: the blocking
/// face of [`crate::MultiGuard`], which says what is promised. Made by
/// [`MultiLock`](super::MultiLock)'s acquires.
///
/// The set counts as lost as soon as any member is lost. Dropping the guard releases every
/// member in the background, as dropping a [`LockGuard`] does.
#[must_use = "dropping a multi-guard releases every lock of the set at once (in the background); hold it while you work"]
#[derive(Debug)]
pub struct MultiGuard {
    inner: Entered<crate::MultiGuard>,
}

impl MultiGuard {
    pub(crate) fn new(inner: crate::MultiGuard) -> Self {
        MultiGuard {
            inner: Entered::new(inner),
        }
    }

    /// The async guard this one wraps, for what only it has (each member's guard).
    pub fn as_async(&self) -> &crate::MultiGuard {
        &self.inner
    }

    /// The resources held, sorted.
    pub fn resources(&self) -> impl Iterator<Item = &str> {
        self.inner.resources()
    }

    /// The fencing token of `resource`'s grant, or `None` if it is not a member.
    pub fn fencing_token(&self, resource: &str) -> Option<i64> {
        self.inner.fencing_token(resource)
    }

    /// A [`Fence`](crate::Fence) with `resource`'s fencing token; `None` if it is not a
    /// member.
    pub fn fence(&self, resource: &str) -> Option<crate::Fence> {
        self.inner.fence(resource)
    }

    /// The lock id every member is held with.
    pub fn lock_id(&self) -> &str {
        self.inner.lock_id()
    }

    /// Lost if any member is lost; else suspended if any member's renewals are failing;
    /// else held.
    pub fn state(&self) -> LeaseState {
        self.inner.state()
    }

    /// True once any member is lost (or the set was released).
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// The shortest time left of the members' leases.
    pub fn time_left(&self) -> Duration {
        self.inner.time_left()
    }

    /// Blocks until any member's lease is lost, and returns its reason.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn wait_lost(&self) -> Result<LossReason> {
        block_on(self.inner.lost())
    }

    /// Blocks until any member's lease is lost or `timeout` has passed: the reason, or
    /// `None` if every member was still held at the timeout.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn wait_lost_timeout(&self, timeout: Duration) -> Result<Option<LossReason>> {
        block_on(async { tokio::time::timeout(timeout, self.inner.lost()).await.ok() })
    }

    /// Releases every member, all at once, as [`crate::MultiGuard::release`] does.
    ///
    /// # Errors
    ///
    /// As [`crate::MultiGuard::release`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime: the guard is dropped then, which releases every
    /// member in the background.
    pub fn release(self) -> Result<()> {
        let guard = self.inner.into_inner();
        block_on(guard.release())?
    }
}
