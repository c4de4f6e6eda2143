//! What a lock is once granted: its [`LockKind`], the stored entry ([`Holder`]), what an
//! acquire returns ([`Grant`]), and where a held lease stands ([`LeaseState`],
//! [`LossReason`]).

use std::fmt;
use std::time::Duration;

use bson::DateTime;
use bson::oid::ObjectId;

/// Which kind of lock an entry is.
///
/// ```
/// use mongolock::LockKind;
/// assert_eq!(LockKind::Exclusive.to_string(), "exclusive");
/// assert_eq!(LockKind::Shared.to_string(), "shared");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// The only holder of its resource.
    Exclusive,
    /// One of possibly many holders of its resource, none of them exclusive.
    Shared,
}

impl LockKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LockKind::Exclusive => "exclusive",
            LockKind::Shared => "shared",
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One lock as stored: who holds which resource, of which kind, with which fencing token,
/// since when and until when. Every time is the server's.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use std::time::Duration;
/// use mongolock::{LockDetails, LockKind};
///
/// let details = LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
/// let grant = locks.xlock("report", "job-1", details).await?;
/// let holder = grant.holder();
/// assert_eq!((holder.resource(), holder.lock_id(), holder.kind()), ("report", "job-1", LockKind::Exclusive));
/// assert_eq!((holder.owner(), holder.host()), (Some("me"), Some("h")));
/// assert_eq!(holder.fencing_token(), grant.fencing_token());
/// assert_eq!(holder.ttl(), Some(Duration::from_secs(30)));
/// assert_eq!(holder.created_at(), holder.renewed_at());
/// assert!(holder.expires_at().unwrap() > holder.created_at());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub(crate) resource: String,
    pub(crate) lock_id: String,
    pub(crate) kind: LockKind,
    pub(crate) owner: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) token: i64,
    pub(crate) nonce: Option<ObjectId>,
    pub(crate) created_at: DateTime,
    pub(crate) renewed_at: DateTime,
    pub(crate) expires_at: Option<DateTime>,
    pub(crate) ttl: Option<Duration>,
    pub(crate) lock_delay: Option<Duration>,
    pub(crate) min_hold: Option<Duration>,
    /// When the holder let go of the entry within its minimum hold (`letGoAt`), if it did:
    /// the entry then holds nothing, whatever the clock reads.
    pub(crate) let_go_at: Option<DateTime>,
    /// The lease keeper the entry names (see `crate::schema`), if any: a release or a
    /// withdrawal by a lease's client matches it, so that it never removes an entry another
    /// client adopted.
    pub(crate) keeper: Option<String>,
}

impl Holder {
    /// The locked resource.
    pub fn resource(&self) -> &str {
        &self.resource
    }
    /// The lock id: the one holder this lock belongs to, and the group it is unlocked and
    /// renewed with.
    pub fn lock_id(&self) -> &str {
        &self.lock_id
    }
    /// Exclusive or shared.
    pub fn kind(&self) -> LockKind {
        self.kind
    }
    /// The owner given at acquire time, if any.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
    /// The host given (or detected) at acquire time.
    pub fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }
    /// The fencing token: greater than every token granted on this resource before it.
    pub fn fencing_token(&self) -> i64 {
        self.token
    }
    /// When the lock was granted (server time).
    pub fn created_at(&self) -> DateTime {
        self.created_at
    }
    /// When the lock was last granted or renewed (server time).
    pub fn renewed_at(&self) -> DateTime {
        self.renewed_at
    }
    /// When the lock ends unless renewed (server time); `None` without TTL. It is the
    /// server's time: never compare it with a local clock.
    pub fn expires_at(&self) -> Option<DateTime> {
        self.expires_at
    }
    /// The TTL of the last grant or renewal; `None` without TTL.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }
    /// The lock-delay given at acquire time, if any (see
    /// [`LockDetails::lock_delay`](crate::LockDetails::lock_delay)).
    pub fn lock_delay(&self) -> Option<Duration> {
        self.lock_delay
    }
    /// The minimum hold given at acquire time, if any (see
    /// [`LockDetails::min_hold`](crate::LockDetails::min_hold)).
    pub fn min_hold(&self) -> Option<Duration> {
        self.min_hold
    }
    /// When the entry was marked as held by nobody (server time), if it was: its holder let
    /// go of it within its minimum hold, or an operator's
    /// [`force_release`](crate::LockClient::force_release) broke its lease while it had a
    /// lock-delay. It is then held by nobody, its own lock id included, whatever the server's
    /// clock reads, and only keeps the resource from everybody until its hold or delay ends
    /// ([`in_force_until`](Self::in_force_until); [`LockStatus`](crate::LockStatus) tells
    /// which).
    pub fn let_go_at(&self) -> Option<DateTime> {
        self.let_go_at
    }
    /// Until when the entry keeps the resource from others (server time): its lease's end
    /// plus its lock-delay; `None` without TTL.
    pub fn in_force_until(&self) -> Option<DateTime> {
        let delay = self.lock_delay.map_or(0, crate::clock::saturating_millis);
        self.expires_at
            .map(|end| DateTime::from_millis(end.timestamp_millis().saturating_add(delay)))
    }
}

/// A lock held: what a successful acquire returns.
///
/// Dropping it does not release anything: the lock lasts until its TTL passes, its lock id is
/// unlocked, or it is released with [`LockClient::release`](crate::LockClient::release).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use mongolock::{LockDetails, LockKind};
///
/// let grant = locks.xlock("ledger", "tx-7", LockDetails::default()).await?;
/// assert!(grant.is_new());
/// assert_eq!((grant.resource(), grant.lock_id(), grant.kind()), ("ledger", "tx-7", LockKind::Exclusive));
/// assert_eq!(grant.expires_at(), None); // no TTL
/// let again = locks.xlock("ledger", "tx-7", LockDetails::default()).await?;
/// assert!(!again.is_new(), "the lock id held it already");
/// assert_eq!(again.fencing_token(), grant.fencing_token());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use = "a grant holds a lock until its TTL passes or it is released; dropping it releases nothing"]
pub struct Grant {
    pub(crate) holder: Holder,
    pub(crate) new: bool,
    /// How long the lock had left when the server executed the attempt that returned it
    /// (`expiresAt - $$NOW`, by the server's clock); `None` without TTL or when unknown.
    /// A repeated attempt can return a grant an earlier copy made, with less than its TTL
    /// left: the lease must count from this, not from the TTL.
    pub(crate) remaining: Option<Duration>,
    /// The reply's `operationTime` (the grant's cluster time), when it had one: read beside
    /// the grant's `$$NOW`, it tells whether the server's clock was behind its cluster time,
    /// as after a step back, and whether the grant ran before a reply already read (see
    /// [`ServerClock::read_exactly`](crate::clock::ServerClock::read_exactly)).
    pub(crate) operation_time: Option<crate::clock::OperationTime>,
}

#[cfg(test)]
impl Grant {
    /// A new grant of `kind` on `resource` to `lock_id` with `token`, for unit tests.
    pub(crate) fn for_test(resource: &str, lock_id: &str, kind: LockKind, token: i64) -> Grant {
        Grant {
            holder: Holder {
                resource: resource.into(),
                lock_id: lock_id.into(),
                kind,
                owner: None,
                host: None,
                token,
                nonce: None,
                created_at: bson::DateTime::from_millis(0),
                renewed_at: bson::DateTime::from_millis(0),
                expires_at: None,
                ttl: None,
                lock_delay: None,
                min_hold: None,
                let_go_at: None,
                keeper: None,
            },
            new: true,
            remaining: None,
            operation_time: None,
        }
    }
}

impl Grant {
    /// The fencing token: pass it to whatever the lock protects, which should reject a token
    /// lower than the highest it has seen.
    pub fn fencing_token(&self) -> i64 {
        self.holder.token
    }
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
    /// When the lock ends unless renewed (server time); `None` without TTL.
    pub fn expires_at(&self) -> Option<DateTime> {
        self.holder.expires_at
    }
    /// Whether this attempt (its nonce) created the lock. False when the lock id held the
    /// resource already, from an earlier attempt.
    pub fn is_new(&self) -> bool {
        self.new
    }
    /// The lock as stored.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }
}

/// Where a lease stands, as its holder sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseState {
    /// Held: the last renewal (or the grant) succeeded and the local deadline is ahead.
    Held,
    /// Renewals are failing, but the local deadline has not passed: the lease may still be
    /// held, and the keeper keeps trying.
    Suspended,
    /// Lost: the local deadline passed, the server said the lease is gone, or the guard was
    /// released. Stop touching what the lock protects.
    Lost(LossReason),
}

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// No renewal succeeded before the local deadline (server unreachable, replies too
    /// slow, or this process paused).
    Deadline,
    /// The server no longer has the lease: it was force-released, removed with its group by
    /// [`purge_abandoned_groups`](crate::LockClient::purge_abandoned_groups), or expired by
    /// the server's clock (a plain [`purge`](crate::LockClient::purge) never ends a live
    /// lease).
    Revoked,
    /// The guard released it.
    Released,
}
