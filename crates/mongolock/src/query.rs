//! What [`LockClient::status`](crate::LockClient::status) reports ([`LockStatus`], chosen
//! with a [`Filter`]) and what the purges report ([`Purged`]).

use std::time::Duration;

use bson::DateTime;

use crate::lock::{Holder, LockKind};

/// A lock as reported by [`LockClient::status`](crate::LockClient::status): the stored entry
/// and its remaining TTL, computed by the server at the time of the query.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use std::time::Duration;
/// use mongolock::{Filter, LockDetails, LockKind};
///
/// let details = LockDetails::default().ttl(Duration::from_secs(60)).owner("me").host("h");
/// let grant = locks.xlock("r", "g", details).await?;
/// let held = locks.status(&Filter::default().owner("me")).await?;
/// assert_eq!(held.len(), 1);
/// let status = &held[0];
/// assert_eq!((status.resource(), status.lock_id(), status.kind()), ("r", "g", LockKind::Exclusive));
/// assert_eq!((status.owner(), status.host()), (Some("me"), Some("h")));
/// assert_eq!(status.fencing_token(), grant.fencing_token());
/// assert!(status.ttl_remaining().unwrap() <= Duration::from_secs(60));
/// assert!(!status.is_expired());
/// assert_eq!(status.created_at(), status.renewed_at());
/// assert_eq!(status.holder().lock_id(), "g");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LockStatus {
    pub(crate) holder: Holder,
    pub(crate) remaining: Option<Duration>,
    pub(crate) expired: bool,
    pub(crate) delay_left: Option<Duration>,
    pub(crate) hold_left: Option<Duration>,
}

impl LockStatus {
    /// The locked resource.
    pub fn resource(&self) -> &str {
        &self.holder.resource
    }
    /// The lock id holding it.
    pub fn lock_id(&self) -> &str {
        &self.holder.lock_id
    }
    /// Exclusive or shared.
    pub fn kind(&self) -> LockKind {
        self.holder.kind
    }
    /// The owner given at acquire time, if any.
    pub fn owner(&self) -> Option<&str> {
        self.holder.owner.as_deref()
    }
    /// The host given (or detected) at acquire time.
    pub fn host(&self) -> Option<&str> {
        self.holder.host.as_deref()
    }
    /// When the lock was granted (server time).
    pub fn created_at(&self) -> DateTime {
        self.holder.created_at
    }
    /// When the lock was last granted or renewed (server time).
    pub fn renewed_at(&self) -> DateTime {
        self.holder.renewed_at
    }
    /// How long the lock has left, computed by the server when it answered (zero once
    /// expired); `None` for a lock without TTL.
    pub fn ttl_remaining(&self) -> Option<Duration> {
        self.remaining
    }
    /// Whether the lock's lease had ended when the server answered: its holder holds
    /// nothing. Unless it is within its lock-delay ([`lock_delay_remaining`](Self::lock_delay_remaining))
    /// or its minimum hold ([`min_hold_remaining`](Self::min_hold_remaining)), it blocks
    /// nobody either, and stays in the collection until an acquire on its resource
    /// or a purge clears it.
    pub fn is_expired(&self) -> bool {
        self.expired
    }
    /// For a lease that ended without a release and has a lock-delay: how much of the delay
    /// was left when the server answered, during which nobody is granted the resource (a
    /// reader's delay keeps writers out); `None` otherwise.
    pub fn lock_delay_remaining(&self) -> Option<Duration> {
        self.delay_left
    }
    /// For a lock its holder let go of within its minimum hold
    /// ([`LockDetails::min_hold`](crate::LockDetails::min_hold)): how much of the hold was
    /// left when the server answered, during which the lock stays in force (an exclusive
    /// one keeps everybody out, its own lock id included; a reader's share keeps writers
    /// out; a permit stays taken). Its lease ended at the release
    /// ([`is_expired`](Self::is_expired) is true) and nobody holds it. `None` otherwise.
    pub fn min_hold_remaining(&self) -> Option<Duration> {
        self.hold_left
    }
    /// The fencing token.
    pub fn fencing_token(&self) -> i64 {
        self.holder.token
    }
    /// The lock as stored.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }
}

/// What a purge removed.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// let purged = locks.purge().await?;
/// assert_eq!(purged.resources(), 0);
/// assert!(purged.lock_ids().is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Purged {
    pub(crate) resources: u64,
    pub(crate) lock_ids: Vec<String>,
}

impl Purged {
    /// How many resource documents had locks removed.
    pub fn resources(&self) -> u64 {
        self.resources
    }
    /// For [`LockClient::purge_abandoned_groups`](crate::LockClient::purge_abandoned_groups):
    /// the lock ids whose groups were purged, sorted. Empty for a plain purge.
    pub fn lock_ids(&self) -> &[String] {
        &self.lock_ids
    }
}

/// Which locks [`LockClient::status`](crate::LockClient::status) reports. Every condition set
/// must hold; the default filter matches every lock, expired ones included.
///
/// Times are compared with the times the server stored; remaining TTLs are computed by the
/// server. A lock without TTL has an unbounded remaining TTL: it never matches
/// [`ttl_below`](Filter::ttl_below) and always matches [`ttl_at_least`](Filter::ttl_at_least).
///
/// ```
/// use std::time::Duration;
/// use mongolock::Filter;
///
/// let expiring_soon = Filter::default().owner("me").ttl_below(Duration::from_secs(5));
/// # let _ = expiring_soon;
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use = "a builder does nothing until it is used"]
pub struct Filter {
    pub(crate) created_before: Option<DateTime>,
    pub(crate) created_after: Option<DateTime>,
    pub(crate) ttl_below: Option<Duration>,
    pub(crate) ttl_at_least: Option<Duration>,
    pub(crate) resource: Option<String>,
    pub(crate) lock_id: Option<String>,
    pub(crate) owner: Option<String>,
    pub(crate) kind: Option<LockKind>,
}

impl Filter {
    /// Locks granted strictly before `time`.
    ///
    /// ```
    /// let old = mongolock::Filter::default().created_before(std::time::SystemTime::now());
    /// # let _ = old;
    /// ```
    pub fn created_before(mut self, time: impl Into<DateTime>) -> Self {
        self.created_before = Some(time.into());
        self
    }
    /// Locks granted strictly after `time`.
    ///
    /// ```
    /// let recent = mongolock::Filter::default().created_after(bson::DateTime::now());
    /// # let _ = recent;
    /// ```
    pub fn created_after(mut self, time: impl Into<DateTime>) -> Self {
        self.created_after = Some(time.into());
        self
    }
    /// Locks whose remaining TTL is below `ttl` (expired ones included).
    ///
    /// ```
    /// let soon = mongolock::Filter::default().ttl_below(std::time::Duration::from_secs(5));
    /// # let _ = soon;
    /// ```
    pub fn ttl_below(mut self, ttl: Duration) -> Self {
        self.ttl_below = Some(ttl);
        self
    }
    /// Locks whose remaining TTL is at least `ttl` (locks without TTL included).
    ///
    /// ```
    /// let safe = mongolock::Filter::default().ttl_at_least(std::time::Duration::from_secs(5));
    /// # let _ = safe;
    /// ```
    pub fn ttl_at_least(mut self, ttl: Duration) -> Self {
        self.ttl_at_least = Some(ttl);
        self
    }
    /// Locks on this resource.
    ///
    /// ```
    /// let on_ledger = mongolock::Filter::default().resource("ledger");
    /// # let _ = on_ledger;
    /// ```
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }
    /// Locks of this lock id.
    ///
    /// ```
    /// let group = mongolock::Filter::default().lock_id("tx-7");
    /// # let _ = group;
    /// ```
    pub fn lock_id(mut self, lock_id: impl Into<String>) -> Self {
        self.lock_id = Some(lock_id.into());
        self
    }
    /// Locks of this owner (at most [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) bytes, as stored
    /// owners are; a longer one is refused by the query).
    ///
    /// ```
    /// let mine = mongolock::Filter::default().owner("me");
    /// # let _ = mine;
    /// ```
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
    /// Locks of this kind.
    ///
    /// ```
    /// let writers = mongolock::Filter::default().kind(mongolock::LockKind::Exclusive);
    /// # let _ = writers;
    /// ```
    pub fn kind(mut self, kind: LockKind) -> Self {
        self.kind = Some(kind);
        self
    }
}
