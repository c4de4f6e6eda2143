//! [`LockGuard`]: a held lease, kept alive in the background until it is released or
//! dropped.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::client::LockClient;
use crate::error::{Error, ErrorKind, Result};
use crate::lease::{Chore, Keeper, Lease};
use crate::lock::{Grant, LeaseState, LockKind, LossReason};

/// A held lock: a lease that the client renews in the background until the guard is released
/// or dropped.
///
/// Check [`is_lost`](LockGuard::is_lost) before each step of protected work, or race the work
/// against [`lost`](LockGuard::lost); pass [`fencing_token`](LockGuard::fencing_token) to the
/// store you protect. The guard reports the loss no later than its local deadline, which
/// comes before the server can grant the lock to anyone else under the conditions of
/// [Guarantees](crate#guarantees) (no server clock step past the margin, a monotonic clock
/// that counts suspended time).
///
/// Dropping the guard releases the lock in a background task (never blocking);
/// [`LockClient::shutdown`] waits for such releases. From the drop on, the lock is never
/// renewed. Dropped where no tokio runtime runs (after `block_on` returned, say), the guard
/// leaves the release to the runtime its lease was kept alive in; a release that fails is
/// retried in the background (the keeper's chores), and so is one whose task was dropped
/// with its runtime before it ran (a guard dropped in a runtime that ends right after). The
/// client's next attempt of the lock id on the resource carries out such a release first
/// (each try within the command time limit), and is never granted before it. If nothing
/// gets through (no runtime of the client runs any more, or the server is out of reach),
/// the lock ends with its TTL at the latest. Leaking the guard (`std::mem::forget`) leaks the lease: the client
/// keeps renewing it for as long as the client lives.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use mongolock::{LeaseState, LockKind};
///
/// let guard = locks.mutex("nightly-report").acquire().await?;
/// assert_eq!(guard.resource(), "nightly-report");
/// assert_eq!(guard.kind(), LockKind::Exclusive);
/// assert_eq!(guard.lock_id().len(), 32, "128 random bits, in hex");
/// assert_eq!(guard.state(), LeaseState::Held);
/// assert!(!guard.is_lost());
/// let token = guard.fencing_token();
/// guard.release().await?;
/// # let _ = token;
/// # Ok(()) }
/// ```
#[must_use = "dropping a guard releases its lock at once (in the background); hold it while you work"]
#[derive(Debug)]
pub struct LockGuard {
    client: LockClient,
    lease: Arc<Lease>,
    key: u64,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(client: LockClient, lease: Arc<Lease>, key: u64) -> Self {
        LockGuard {
            client,
            lease,
            key,
            released: false,
        }
    }

    /// The fencing token of this grant: greater than every token granted on the resource
    /// before. Pass it to what the lock protects, and have that reject lower tokens.
    pub fn fencing_token(&self) -> i64 {
        self.lease.grant.fencing_token()
    }

    /// A [`Fence`](crate::Fence) with this grant's fencing token: writes to a MongoDB
    /// collection that a later holder's writes make stale.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let db = server.client().database("doc");
    /// # let locks = mongolock::LockClient::new(db.collection("locks"));
    /// let accounts = db.collection::<bson::Document>("accounts");
    /// let guard = locks.mutex("account-1").acquire().await?;
    /// assert_eq!(guard.fence().token(), guard.fencing_token());
    /// let update = bson::doc! {"$inc": {"balance": 1}};
    /// guard.fence().update_one(&accounts, bson::doc! {"_id": 1}, update).upsert(true).await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fence(&self) -> crate::Fence {
        crate::Fence::new(self.fencing_token())
    }

    /// The locked resource.
    pub fn resource(&self) -> &str {
        self.lease.grant.resource()
    }

    /// The lock id this guard holds the lock with (random, 128 bits, unless the handle was
    /// given one).
    pub fn lock_id(&self) -> &str {
        self.lease.grant.lock_id()
    }

    /// Exclusive (mutex, writer) or shared (reader, semaphore permit).
    pub fn kind(&self) -> LockKind {
        self.lease.grant.kind()
    }

    /// When the attempt that was granted was first sent, on the lease clock: this process's
    /// monotonic clock plus the time the machine was suspended since the process started
    /// (on Linux; elsewhere the monotonic clock alone). The server granted the lock after
    /// this instant and before `acquire` returned (a copy of the attempt sent again after a
    /// failure may have found the grant an earlier copy made: this is the first copy's
    /// send). The lease's first deadline is counted from the copy whose reply said what the
    /// server had left of it.
    pub fn attempt_sent_at(&self) -> std::time::Instant {
        self.lease.sent_at.into_std()
    }

    /// The grant as the server made it (its times are the server's).
    pub fn grant(&self) -> &Grant {
        &self.lease.grant
    }

    /// Held, suspended (renewals failing, deadline ahead) or lost. Read against the
    /// monotonic clock at the call, so it is right even if no task ran for a while.
    pub fn state(&self) -> LeaseState {
        self.lease.state()
    }

    /// True once the lease is lost (or released): stop touching what the lock protects.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// How long the lease is sure to last without another successful renewal: the time to
    /// the local deadline (zero once lost).
    pub fn time_left(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.lease.time_left()
    }

    /// Resolves when the lease is lost, with the reason: no later than the local deadline,
    /// before the server can grant the lock to anyone else (under the conditions of
    /// [Guarantees](crate#guarantees)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches. Dropping the future changes nothing.
    pub async fn lost(&self) -> LossReason {
        self.lease.lost().await
    }

    /// Whether releasing the lock (or dropping the guard) lets go of it without its minimum
    /// hold: true while nobody is to work under it (a member a multi-lock took in a round
    /// it has not finished).
    pub(crate) fn waive_hold(&self, waived: bool) {
        self.lease.waive_hold(waived);
    }

    /// The server said it no longer holds this grant live: the lease is lost, revoked.
    pub(crate) fn revoked(&self) {
        self.lease.lose(LossReason::Revoked);
    }

    /// Releases the lock now, in one round trip, and stops its keepalive.
    ///
    /// `Ok` means the lease was held throughout, as far as the server knows: the server
    /// still had this very grant, live, when it removed it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LeaseLost`] if the lease had been lost before this call (with the reason
    /// it was lost for), or if the server no longer held this grant live when the release
    /// reached it: [`LossReason::Deadline`] if the local deadline had passed by the time the
    /// reply came (the release was too slow, and the server may have let the lease expire),
    /// otherwise [`LossReason::Revoked`] (force-released, its group purged, or expired by the server's
    /// clock before the keeper noticed). Either way, whatever was done under the lock may
    /// have overlapped with another holder. The entry, if the server still had it, is released
    /// all the same. A database error if the release could not be done; the client then
    /// retries it in the background, and the lock ends with its TTL at the latest.
    ///
    /// # Cancel safety
    ///
    /// The keepalive stops as soon as this is called. If the future is dropped before the
    /// release completes, the client retries the release in the background, and the lock
    /// ends with its TTL at the latest.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let lost_before = match self.lease.state() {
            LeaseState::Lost(reason) => Some(reason),
            _ => None,
        };
        let keeper = self.client.shared().keeper.clone();
        keeper.remove(self.key);
        self.lease.lose(LossReason::Released);
        crate::observe::released(true);
        let span = tracing::debug_span!(
            "mongolock.release",
            resource = self.resource(),
            token = self.fencing_token()
        );
        // Owed until the server answered, and the keeper's duty if this stops before: an
        // attempt of this lock id on this resource waits for it meanwhile.
        let chore = self.lease.release_chore();
        keeper.owe(&chore);
        let mut duty = ReleaseDuty(Some((keeper.clone(), chore)));
        let released = self
            .client
            .release_grant(&self.lease.grant_to_release(), self.lease.retire)
            .instrument(span)
            .await?;
        if let Some((keeper, chore)) = duty.0.take() {
            keeper.paid(&chore);
        }
        let lost = |reason| {
            Err(Error::new(ErrorKind::LeaseLost {
                resource: self.resource().to_owned(),
                reason,
            }))
        };
        match lost_before {
            Some(reason) => lost(reason),
            None if !released.live => {
                // Past the local deadline, the server may have let the lease expire by its
                // clock: that is a loss by the deadline. Before it, only someone else can
                // have ended it.
                let reason = if self.lease.time_left().is_zero() {
                    LossReason::Deadline
                } else {
                    LossReason::Revoked
                };
                tracing::warn!(
                    resource = self.resource(),
                    token = self.fencing_token(),
                    ?reason,
                    "released a lease the server no longer held"
                );
                crate::observe::lease_lost(&self.lease.grant, reason);
                lost(reason)
            }
            None => Ok(()),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.client.shared().keeper.remove(self.key);
        self.lease.lose(LossReason::Released);
        crate::observe::released(false);
        self.client.finish_in_background(self.lease.release_chore());
    }
}

/// A release that has not been answered yet: dropped before that (the future dropped, or
/// the release failed), it hands the release to the keeper's chores.
struct ReleaseDuty(Option<(Arc<Keeper>, Chore)>);

impl Drop for ReleaseDuty {
    fn drop(&mut self) {
        if let Some((keeper, chore)) = self.0.take() {
            keeper.retry_later(chore);
        }
    }
}
