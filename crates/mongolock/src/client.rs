//! [`LockClient`]: the handle every lock operation goes through, and its settings.

use std::time::Duration;

use bson::Document;
use mongodb::Collection;
use mongodb::options::{Acknowledgment, ReadConcern, WriteConcern};

use crate::command;
use crate::error::{Error, Result};
use crate::types::{Filter, Grant, LockDetails, LockStatus};
use crate::{AcquireRequest, Attempt};

/// How long an idle resource document is kept by default before the TTL index deletes it:
/// one day.
///
/// ```
/// assert_eq!(mongolock::DEFAULT_RETENTION.as_secs(), 86_400);
/// ```
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// Locks stored in one MongoDB collection: one document per resource.
///
/// Cheap to clone (it holds a driver `Collection`, itself a shared handle), `Send` and `Sync`.
/// Every write waits for a majority of the replica set and the journal
/// (`{w: "majority", j: true}`) unless you opt out with
/// [`with_unsafe_write_concern`](LockClient::with_unsafe_write_concern); reads use read
/// concern `majority` (`local` after such an opt-out, so that reads see this client's writes).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let client = server.client();
/// use std::time::Duration;
/// use mongolock::{LockClient, LockDetails};
///
/// let locks = LockClient::new(client.database("app").collection("locks"));
/// locks.create_indexes().await?;
/// let grant = locks
///     .xlock("nightly-report", "worker-1", LockDetails::default().ttl(Duration::from_secs(30)))
///     .await?;
/// println!("fencing token {}", grant.fencing_token());
/// locks.unlock("worker-1").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LockClient {
    pub(crate) collection: Collection<Document>,
    pub(crate) write_concern: WriteConcern,
    pub(crate) retention: Duration,
}

impl LockClient {
    /// Locks stored in `collection` (for example `db.collection("locks")`), with majority,
    /// journaled writes and a retention of one day for idle resource documents.
    ///
    /// The collection must hold nothing but this crate's documents. Nothing is sent to the
    /// server until the first operation.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// # let _ = locks;
    /// # }
    /// ```
    pub fn new(collection: Collection<Document>) -> Self {
        LockClient {
            collection,
            write_concern: WriteConcern::builder()
                .w(Acknowledgment::Majority)
                .journal(true)
                .build(),
            retention: DEFAULT_RETENTION,
        }
    }

    /// Uses `write_concern` for every write instead of `{w: "majority", j: true}`.
    ///
    /// **This can break mutual exclusion.** A grant acknowledged by fewer than a majority can
    /// be rolled back when the primary fails over, and then the same lock is granted to a
    /// second holder while the first believes it still holds it. Use it only on a standalone
    /// server, in tests, or where a rare double grant is acceptable.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// use mongodb::options::WriteConcern;
    ///
    /// let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"))
    ///     .with_unsafe_write_concern(WriteConcern::nodes(1));
    /// # let _ = locks;
    /// # }
    /// ```
    pub fn with_unsafe_write_concern(mut self, write_concern: WriteConcern) -> Self {
        self.write_concern = write_concern;
        self
    }

    /// Keeps an idle resource document for `retention` (default [`DEFAULT_RETENTION`]) before
    /// the TTL index made by [`create_indexes`](LockClient::create_indexes) deletes it.
    ///
    /// Fencing tokens stay monotonic across that deletion as long as the server's clock never
    /// steps back by more than `retention`, so keep it long (hours, not seconds). Between
    /// one second and 68 years; checked by `create_indexes`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// use std::time::Duration;
    /// let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"))
    ///     .with_retention(Duration::from_secs(7 * 24 * 3600));
    /// # let _ = locks;
    /// # }
    /// ```
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Reads see what this client's writes made durable: `majority` with majority writes.
    /// With an unsafe write concern the writes may not be majority-committed yet, and a
    /// majority read would miss them (renew reads back what it renewed), so reads are `local`.
    pub(crate) fn read_concern(&self) -> ReadConcern {
        if self.write_concern.w == Some(Acknowledgment::Majority) {
            ReadConcern::majority()
        } else {
            ReadConcern::local()
        }
    }

    /// The collection holding the locks.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// assert_eq!(locks.collection().name(), "locks");
    /// # }
    /// ```
    pub fn collection(&self) -> &Collection<Document> {
        &self.collection
    }

    /// Creates the indexes the lock commands use, and the TTL index that deletes idle resource
    /// documents after the retention period. Idempotent: call it at start-up. One round trip.
    ///
    /// Changing the retention of an existing collection fails (the server refuses a TTL index
    /// that differs only in its options); drop the index `idleSince_ttl` first.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave some of the indexes created; calling again completes them.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// locks.create_indexes().await?;
    /// locks.create_indexes().await?; // nothing to do
    /// # Ok(()) }
    /// ```
    pub async fn create_indexes(&self) -> Result<()> {
        if self.retention < Duration::from_secs(1)
            || self.retention > Duration::from_secs(i32::MAX as u64)
        {
            return Err(Error::invalid(
                "retention",
                format!("{:?} is outside 1 s ..= {} s", self.retention, i32::MAX),
            ));
        }
        command::indexes::run(self).await
    }

    /// Takes an exclusive lock on `resource` for the group `lock_id`, in one round trip.
    ///
    /// Granted when no live lock of any kind is on the resource; expired locks never stand in
    /// the way. If `lock_id` already holds the resource exclusively, the existing grant is
    /// returned unchanged (same token, same expiry; [`Grant::is_new`] is false), so repeating
    /// a call whose outcome was unknown is safe. Holding it shared is not upgraded: that is
    /// [`ErrorKind::AlreadyLocked`](crate::ErrorKind::AlreadyLocked), like any other holder.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::AlreadyLocked`](crate::ErrorKind::AlreadyLocked) with the holders and when
    /// their leases end; [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// an empty or over-long resource or lock id, or a TTL of zero or above
    /// [`MAX_TTL`](crate::MAX_TTL); [`ErrorKind::UnexpectedDocument`](crate::ErrorKind::UnexpectedDocument)
    /// when the resource's document is not a lock document.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the command was sent, the lock may have been granted
    /// with nobody told: it lasts until its TTL passes or `lock_id` is unlocked. Repeating the
    /// call with the same `lock_id` returns that grant.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use std::time::Duration;
    /// use mongolock::LockDetails;
    ///
    /// let details = LockDetails::default().ttl(Duration::from_secs(30)).owner("me");
    /// let grant = locks.xlock("resource1", "lock-id", details.clone()).await?;
    /// let error = locks.xlock("resource1", "other-id", details).await.unwrap_err();
    /// assert!(error.is_already_locked());
    /// # let _ = grant;
    /// # Ok(()) }
    /// ```
    pub async fn xlock(
        &self,
        resource: &str,
        lock_id: &str,
        details: LockDetails,
    ) -> Result<Grant> {
        let request = AcquireRequest::exclusive(resource, lock_id, details);
        match command::acquire::run(self, &request).await? {
            Attempt::Granted(grant) => Ok(grant),
            Attempt::Contended(contention) => Err(contention.into_error()),
        }
    }

    /// Takes a shared lock on `resource` for the group `lock_id`, in one round trip.
    ///
    /// Granted when no live exclusive lock is on the resource and fewer than `max` live shared
    /// locks are (`None`: no cap). The cap is checked by this call and not stored: every caller
    /// on a resource should pass the same one. If `lock_id` already holds the resource shared,
    /// the existing grant is returned unchanged, whatever the cap.
    ///
    /// # Errors
    ///
    /// As [`xlock`](LockClient::xlock), and `InvalidArgument` for a cap of zero.
    ///
    /// # Cancel safety
    ///
    /// As [`xlock`](LockClient::xlock): a grant made by a dropped call lasts until its TTL or an
    /// unlock of `lock_id`, and repeating the call returns it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use mongolock::LockDetails;
    ///
    /// locks.slock("resource2", "reader-1", LockDetails::default(), Some(2)).await?;
    /// locks.slock("resource2", "reader-2", LockDetails::default(), Some(2)).await?;
    /// let third = locks.slock("resource2", "reader-3", LockDetails::default(), Some(2)).await;
    /// assert!(third.unwrap_err().is_already_locked());
    /// # Ok(()) }
    /// ```
    pub async fn slock(
        &self,
        resource: &str,
        lock_id: &str,
        details: LockDetails,
        max: Option<u32>,
    ) -> Result<Grant> {
        let request = AcquireRequest::shared(resource, lock_id, details, max);
        match command::acquire::run(self, &request).await? {
            Attempt::Granted(grant) => Ok(grant),
            Attempt::Contended(contention) => Err(contention.into_error()),
        }
    }

    /// Sends one acquire attempt and reports contention as a value instead of an error, with
    /// the server's view of the holders and when their leases end. One round trip. This is
    /// what [`xlock`](LockClient::xlock) and [`slock`](LockClient::slock) call; waiting and
    /// leases are built on it.
    ///
    /// # Cancel safety
    ///
    /// As [`xlock`](LockClient::xlock). Repeating the same request (same nonce) after an
    /// unknown outcome tells from [`Grant::is_new`] whether the first attempt got through.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use mongolock::{AcquireRequest, Attempt, LockDetails};
    ///
    /// let request = AcquireRequest::exclusive("r", "id", LockDetails::default());
    /// let Attempt::Granted(first) = locks.acquire(&request).await? else { unreachable!() };
    /// let Attempt::Granted(again) = locks.acquire(&request).await? else { unreachable!() };
    /// assert!(first.is_new() && again.is_new(), "same nonce: the same attempt");
    /// assert_eq!(first.fencing_token(), again.fencing_token());
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, request: &AcquireRequest) -> Result<Attempt> {
        command::acquire::run(self, request).await
    }

    /// Releases every lock of `lock_id` (on every resource, of both kinds, expired ones
    /// included) and reports what was released, newest first. Two round trips: one read of
    /// the group, one `updateMany` that removes exactly the locks read (by resource, lock id
    /// and token). A lock granted to `lock_id` after the read survives. Releasing nothing is
    /// not an error: the result is empty.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, all, some or none of the locks may have been released;
    /// calling again releases the rest.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use mongolock::LockDetails;
    ///
    /// locks.xlock("a", "batch-9", LockDetails::default()).await?;
    /// locks.slock("b", "batch-9", LockDetails::default(), None).await?;
    /// let released = locks.unlock("batch-9").await?;
    /// assert_eq!(released.len(), 2);
    /// assert!(locks.unlock("batch-9").await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn unlock(&self, lock_id: &str) -> Result<Vec<LockStatus>> {
        command::release::unlock(self, lock_id).await
    }

    /// Releases one grant (its resource, lock id and token), leaving the other locks of its
    /// lock id alone. One round trip. Returns whether this call removed it (false when it was
    /// already released, purged, or cleared after expiring).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the lock may or may not have been released; calling again
    /// is harmless.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// let grant = locks.xlock("a", "job", mongolock::LockDetails::default()).await?;
    /// assert!(locks.release(&grant).await?);
    /// assert!(!locks.release(&grant).await?);
    /// # Ok(()) }
    /// ```
    pub async fn release(&self, grant: &Grant) -> Result<bool> {
        command::release::release(self, grant).await
    }

    /// Releases the lock that `request` created, if this very attempt (its nonce) was granted;
    /// a grant the lock id held before the attempt is left alone. One round trip. Returns
    /// whether this call removed a lock.
    ///
    /// This resolves an attempt whose outcome is unknown (its future was dropped, its
    /// connection failed) without knowing the fencing token it may have been given.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the lock may or may not have been released; calling again
    /// is harmless.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use mongolock::{AcquireRequest, LockDetails};
    ///
    /// let request = AcquireRequest::exclusive("a", "job", LockDetails::default());
    /// let attempt = locks.acquire(&request); // suppose this future gets dropped mid-flight
    /// # let _ = attempt.await?;
    /// assert!(locks.release_attempt(&request).await?, "it had been granted");
    /// assert!(!locks.release_attempt(&request).await?);
    /// # Ok(()) }
    /// ```
    pub async fn release_attempt(&self, request: &AcquireRequest) -> Result<bool> {
        command::release::release_attempt(self, request).await
    }

    /// Renews every live lock of `lock_id`: each expires `ttl` after now, by the server's
    /// clock. Returns the renewed locks, newest first. Two round trips: one `updateMany`
    /// pipeline, one read.
    ///
    /// An expired lock is never revived (it is not in the result; its holder must acquire
    /// again and gets a new token). A lock without TTL stays without TTL (it is in the
    /// result). Locks of `lock_id` on other resources are renewed in the same command.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the locks may or may not have been renewed; calling again
    /// renews those still live.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use std::time::Duration;
    /// use mongolock::LockDetails;
    ///
    /// locks.xlock("a", "lease-1", LockDetails::default().ttl(Duration::from_secs(10))).await?;
    /// let renewed = locks.renew("lease-1", Duration::from_secs(60)).await?;
    /// assert_eq!(renewed.len(), 1);
    /// assert!(renewed[0].ttl_remaining().unwrap() > Duration::from_secs(10));
    /// # Ok(()) }
    /// ```
    pub async fn renew(&self, lock_id: &str, ttl: Duration) -> Result<Vec<LockStatus>> {
        command::renew::run(self, lock_id, ttl).await
    }

    /// Lists the locks matching `filter`, with their remaining TTL computed by the server,
    /// newest first. Expired locks not cleared yet are included (see
    /// [`LockStatus::is_expired`]). One round trip.
    ///
    /// # Cancel safety
    ///
    /// Reads only: dropping the future has no effect.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use mongolock::{Filter, LockDetails};
    ///
    /// locks.xlock("a", "id-1", LockDetails::default().owner("me")).await?;
    /// locks.xlock("b", "id-2", LockDetails::default().owner("you")).await?;
    /// let mine = locks.status(&Filter::default().owner("me")).await?;
    /// assert_eq!(mine.len(), 1);
    /// assert_eq!(locks.status(&Filter::default()).await?.len(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn status(&self, filter: &Filter) -> Result<Vec<LockStatus>> {
        command::status::run_sorted(self, filter).await
    }

    /// Removes every expired lock, and every lock whose lock id also has an expired lock
    /// (the whole group is considered abandoned, as in square/mongo-lock). Returns what was
    /// removed, newest first. Three round trips: two reads, one `updateMany`.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, all, some or none of the locks may have been removed;
    /// calling again removes the rest.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use std::time::Duration;
    /// use mongolock::LockDetails;
    ///
    /// locks.xlock("a", "g", LockDetails::default().ttl(Duration::from_secs(1))).await?;
    /// locks.xlock("b", "g", LockDetails::default()).await?;
    /// server.clock().advance(Duration::from_secs(2));
    /// let purged = locks.purge().await?;
    /// assert_eq!(purged.len(), 2, "the expired lock and its group");
    /// # Ok(()) }
    /// ```
    pub async fn purge(&self) -> Result<Vec<LockStatus>> {
        command::purge::run(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_is_clone_send_sync() {
        fn assert_traits<T: Clone + Send + Sync + 'static>() {}
        assert_traits::<LockClient>();
    }

    #[tokio::test]
    async fn futures_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let client = mongodb::Client::with_options(mongodb::options::ClientOptions::default())
            .expect("a client without servers");
        let locks = LockClient::new(client.database("d").collection("c"));
        assert_send(&locks.xlock("r", "l", LockDetails::default()));
        assert_send(&locks.unlock("l"));
        assert_send(&locks.renew("l", Duration::from_secs(1)));
        assert_send(&locks.status(&Filter::default()));
        assert_send(&locks.purge());
        assert_send(&locks.create_indexes());
    }

    #[tokio::test]
    async fn writes_are_majority_and_journaled_by_default() {
        let client = mongodb::Client::with_options(mongodb::options::ClientOptions::default())
            .expect("a client without servers");
        let locks = LockClient::new(client.database("d").collection("c"));
        assert_eq!(locks.write_concern.w, Some(Acknowledgment::Majority));
        assert_eq!(locks.write_concern.journal, Some(true));
        assert_eq!(locks.read_concern(), ReadConcern::majority());
        let unsafe_locks = locks.with_unsafe_write_concern(WriteConcern::nodes(1));
        assert_eq!(unsafe_locks.write_concern.w, Some(Acknowledgment::Nodes(1)));
        assert_eq!(unsafe_locks.read_concern(), ReadConcern::local());
    }
}
