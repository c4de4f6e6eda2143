//! The values that go into and come out of lock operations: [`LockDetails`] (what a request
//! says about its holder), [`Grant`] (what a successful acquire returns), [`Holder`] (one
//! entry as stored), [`LockStatus`] (an entry as reported with its remaining TTL) and
//! [`Filter`] (which entries [`LockClient::status`](crate::LockClient::status) reports).

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use bson::DateTime;
use bson::oid::ObjectId;

use crate::error::{Error, Result};

/// The longest resource name or lock id accepted, in bytes of UTF-8.
///
/// Both are indexed (the resource is the document's `_id`), and index keys should stay small.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// let too_long = "r".repeat(mongolock::MAX_ID_LEN + 1);
/// let error = locks.xlock(&too_long, "id", Default::default()).await.unwrap_err();
/// assert!(matches!(error.kind(), mongolock::ErrorKind::InvalidArgument { argument: "resource", .. }));
/// # }
/// ```
pub const MAX_ID_LEN: usize = 512;

/// The longest owner or host accepted, in bytes of UTF-8.
///
/// ```
/// let details = mongolock::LockDetails::default().owner("o".repeat(mongolock::MAX_LABEL_LEN + 1));
/// assert!(details.validate().is_err());
/// ```
pub const MAX_LABEL_LEN: usize = 1024;

/// The longest TTL accepted: 100 years (of 365 days). It keeps `$$NOW + ttl` far inside the
/// range of a BSON date and of the server's date arithmetic.
///
/// ```
/// use mongolock::{LockDetails, MAX_TTL};
/// assert!(LockDetails::default().ttl(MAX_TTL).validate().is_ok());
/// assert!(LockDetails::default().ttl(MAX_TTL * 2).validate().is_err());
/// ```
pub const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// Which kind of lock an entry is.
///
/// ```
/// use mongolock::LockKind;
/// assert_eq!(LockKind::Exclusive.to_string(), "exclusive");
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

/// Who asks for a lock and for how long: owner, host and TTL, all optional.
///
/// Without a TTL the lock never expires and only an explicit unlock frees it. The host
/// defaults to this machine's host name.
///
/// ```
/// use std::time::Duration;
/// use mongolock::LockDetails;
///
/// let details = LockDetails::default().ttl(Duration::from_secs(30)).owner("nightly-report");
/// assert_eq!(details.ttl_value(), Some(Duration::from_secs(30)));
/// assert_eq!(details.owner_value(), Some("nightly-report"));
/// assert!(!details.host_value().is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockDetails {
    owner: Option<String>,
    host: Option<String>,
    ttl: Option<Duration>,
}

impl LockDetails {
    /// Sets who holds the lock (free text for people and for [`Filter::owner`]).
    ///
    /// ```
    /// let details = mongolock::LockDetails::default().owner("billing-worker-3");
    /// assert_eq!(details.owner_value(), Some("billing-worker-3"));
    /// ```
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Sets the host recorded with the lock, instead of this machine's host name.
    ///
    /// ```
    /// let details = mongolock::LockDetails::default().host("db-migrator");
    /// assert_eq!(details.host_value(), "db-migrator");
    /// ```
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// Sets the time to live: the server ends the lock this long after it is granted or
    /// renewed, by its own clock. It is kept in whole milliseconds, rounded up.
    ///
    /// ```
    /// use std::time::Duration;
    /// let details = mongolock::LockDetails::default().ttl(Duration::from_secs(30));
    /// assert_eq!(details.ttl_value(), Some(Duration::from_secs(30)));
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The owner, if set.
    ///
    /// ```
    /// assert_eq!(mongolock::LockDetails::default().owner_value(), None);
    /// ```
    pub fn owner_value(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The host: the one set, or this machine's host name (from
    /// `/proc/sys/kernel/hostname`, else `$HOSTNAME` or `$COMPUTERNAME`, else `"unknown"`).
    ///
    /// ```
    /// assert!(!mongolock::LockDetails::default().host_value().is_empty());
    /// ```
    pub fn host_value(&self) -> &str {
        self.host.as_deref().unwrap_or_else(|| this_host())
    }

    /// The TTL, if set.
    ///
    /// ```
    /// assert_eq!(mongolock::LockDetails::default().ttl_value(), None);
    /// ```
    pub fn ttl_value(&self) -> Option<Duration> {
        self.ttl
    }

    /// Checks the details the way every lock call does, without contacting the server.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mongolock::LockDetails;
    ///
    /// assert!(LockDetails::default().ttl(Duration::from_secs(1)).validate().is_ok());
    /// assert!(LockDetails::default().ttl(Duration::ZERO).validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        if let Some(owner) = &self.owner {
            check_label("owner", owner)?;
        }
        check_label("host", self.host_value())?;
        if let Some(ttl) = self.ttl {
            ttl_millis(ttl)?;
        }
        Ok(())
    }
}

fn this_host() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| std::env::var("COMPUTERNAME").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty() && h.len() <= MAX_LABEL_LEN)
            .unwrap_or_else(|| "unknown".to_owned())
    })
}

pub(crate) fn check_id(argument: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(argument, "must not be empty"));
    }
    if value.len() > MAX_ID_LEN {
        return Err(Error::invalid(
            argument,
            format!("is {} bytes long, the limit is {MAX_ID_LEN}", value.len()),
        ));
    }
    Ok(())
}

fn check_label(argument: &'static str, value: &str) -> Result<()> {
    if value.len() > MAX_LABEL_LEN {
        return Err(Error::invalid(
            argument,
            format!(
                "is {} bytes long, the limit is {MAX_LABEL_LEN}",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// A TTL in whole milliseconds, rounded up, or an error for zero and for anything above
/// [`MAX_TTL`].
pub(crate) fn ttl_millis(ttl: Duration) -> Result<i64> {
    if ttl.is_zero() {
        return Err(Error::invalid(
            "ttl",
            "must be positive (leave it unset for a lock without expiry)",
        ));
    }
    if ttl > MAX_TTL {
        return Err(Error::invalid(
            "ttl",
            format!("{ttl:?} is longer than the limit of {MAX_TTL:?}"),
        ));
    }
    let millis = ttl.as_nanos().div_ceil(1_000_000);
    // MAX_TTL keeps this far below i64::MAX.
    Ok(millis as i64)
}

/// A value unique to one acquire attempt, stored with the entry it creates.
///
/// Acquiring again with the same lock id returns the existing grant; the nonce tells whether
/// that grant came from this attempt ([`Grant::is_new`]).
///
/// ```
/// let (a, b) = (mongolock::Nonce::new(), mongolock::Nonce::new());
/// assert_ne!(a, b);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nonce(pub(crate) ObjectId);

impl Nonce {
    /// A fresh nonce.
    ///
    /// ```
    /// let nonce = mongolock::Nonce::new();
    /// # let _ = nonce;
    /// ```
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Nonce(ObjectId::new())
    }
}

/// One lock as stored: who holds which resource, of which kind, with which fencing token,
/// since when and until when (server time).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use mongolock::{LockDetails, LockKind};
///
/// let grant = locks.xlock("report", "job-1", LockDetails::default().owner("me")).await?;
/// let holder = grant.holder();
/// assert_eq!((holder.resource(), holder.lock_id(), holder.kind()), ("report", "job-1", LockKind::Exclusive));
/// assert_eq!(holder.owner(), Some("me"));
/// assert_eq!(holder.expires_at(), None); // no TTL
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
}

impl Holder {
    /// The locked resource.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let holder = locks.xlock("report", "job-1", details).await?.holder().clone();
    /// assert_eq!(holder.resource(), "report");
    /// # Ok(()) }
    /// ```
    pub fn resource(&self) -> &str {
        &self.resource
    }
    /// The lock id (the group this lock belongs to).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let holder = locks.xlock("report", "job-1", details).await?.holder().clone();
    /// assert_eq!(holder.lock_id(), "job-1");
    /// # Ok(()) }
    /// ```
    pub fn lock_id(&self) -> &str {
        &self.lock_id
    }
    /// Exclusive or shared.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let holder = locks.xlock("report", "job-1", details).await?.holder().clone();
    /// assert_eq!(holder.kind(), mongolock::LockKind::Exclusive);
    /// # Ok(()) }
    /// ```
    pub fn kind(&self) -> LockKind {
        self.kind
    }
    /// The owner given when the lock was taken.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let holder = locks.xlock("report", "job-1", details).await?.holder().clone();
    /// assert_eq!(holder.owner(), Some("me"));
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
    /// The host given (or defaulted) when the lock was taken.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let holder = locks.xlock("report", "job-1", details).await?.holder().clone();
    /// assert_eq!(holder.host(), Some("h"));
    /// # Ok(()) }
    /// ```
    pub fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }
    /// The fencing token of this grant: greater than every token granted before on this
    /// resource.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let holder = locks.xlock("report", "job-1", details).await?.holder().clone();
    /// assert!(holder.fencing_token() > 0);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> i64 {
        self.token
    }
    /// When the lock was granted (server time).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let holder = locks.xlock("report", "job-1", details).await?.holder().clone();
    /// assert!(holder.created_at() <= holder.renewed_at());
    /// # Ok(()) }
    /// ```
    pub fn created_at(&self) -> DateTime {
        self.created_at
    }
    /// When the lock was last granted or renewed (server time).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let holder = locks.xlock("report", "job-1", details).await?.holder().clone();
    /// assert_eq!(holder.renewed_at(), holder.created_at()); // not renewed yet
    /// # Ok(()) }
    /// ```
    pub fn renewed_at(&self) -> DateTime {
        self.renewed_at
    }
    /// When the lock ends unless renewed (server time); `None` for a lock without TTL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let holder = locks.xlock("report", "job-1", details).await?.holder().clone();
    /// let expires = holder.expires_at().unwrap();
    /// assert_eq!(expires.timestamp_millis() - holder.renewed_at().timestamp_millis(), 30_000);
    /// # Ok(()) }
    /// ```
    pub fn expires_at(&self) -> Option<DateTime> {
        self.expires_at
    }
    /// The TTL of the last grant or renewal; `None` for a lock without TTL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let holder = locks.xlock("report", "job-1", details).await?.holder().clone();
    /// assert_eq!(holder.ttl(), Some(Duration::from_secs(30)));
    /// # Ok(()) }
    /// ```
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }
}

/// A granted lock, as returned by [`LockClient::xlock`](crate::LockClient::xlock) and
/// [`LockClient::slock`](crate::LockClient::slock).
///
/// Dropping it does not release anything: the lock lasts until its TTL passes or its lock id
/// is unlocked.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// let grant = locks.xlock("ledger", "tx-7", mongolock::LockDetails::default()).await?;
/// assert!(grant.is_new());
/// let again = locks.xlock("ledger", "tx-7", mongolock::LockDetails::default()).await?;
/// assert!(!again.is_new());
/// assert_eq!(again.fencing_token(), grant.fencing_token());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub(crate) holder: Holder,
    pub(crate) new: bool,
}

impl Grant {
    /// The fencing token: pass it to whatever the lock protects, which should reject a token
    /// lower than the highest it has seen.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// let token = grant.fencing_token(); // send it along with every protected write
    /// assert!(token > 0);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> i64 {
        self.holder.token
    }
    /// The locked resource.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// assert_eq!(grant.resource(), "report");
    /// # Ok(()) }
    /// ```
    pub fn resource(&self) -> &str {
        &self.holder.resource
    }
    /// The lock id.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// assert_eq!(grant.lock_id(), "job-1");
    /// # Ok(()) }
    /// ```
    pub fn lock_id(&self) -> &str {
        &self.holder.lock_id
    }
    /// Exclusive or shared.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// assert_eq!(grant.kind(), mongolock::LockKind::Exclusive);
    /// # Ok(()) }
    /// ```
    pub fn kind(&self) -> LockKind {
        self.holder.kind
    }
    /// When the lock ends unless renewed (server time); `None` without TTL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// assert!(grant.expires_at().is_some());
    /// # Ok(()) }
    /// ```
    pub fn expires_at(&self) -> Option<DateTime> {
        self.holder.expires_at
    }
    /// Whether this attempt created the lock (`false`: the lock id already held it and the
    /// existing grant was returned unchanged).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// assert!(grant.is_new());
    /// # Ok(()) }
    /// ```
    pub fn is_new(&self) -> bool {
        self.new
    }
    /// The stored entry.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// assert_eq!(grant.holder().ttl(), Some(Duration::from_secs(30)));
    /// # Ok(()) }
    /// ```
    pub fn holder(&self) -> &Holder {
        &self.holder
    }
}

/// A lock as reported by [`LockClient::status`](crate::LockClient::status),
/// [`unlock`](crate::LockClient::unlock), [`renew`](crate::LockClient::renew) and
/// [`purge`](crate::LockClient::purge), with its remaining TTL computed by the server.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use std::time::Duration;
/// use mongolock::{Filter, LockDetails};
///
/// let details = LockDetails::default().ttl(Duration::from_secs(60)).owner("me");
/// let grant = locks.xlock("r", "g", details).await?;
/// let held = locks.status(&Filter::default().owner("me")).await?;
/// assert_eq!(held.len(), 1);
/// assert_eq!(held[0].fencing_token(), grant.fencing_token());
/// assert!(held[0].ttl_remaining().unwrap() <= Duration::from_secs(60));
/// assert!(!held[0].is_expired());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LockStatus {
    pub(crate) holder: Holder,
    pub(crate) remaining: Option<Duration>,
    pub(crate) expired: bool,
    pub(crate) renew_op: Option<ObjectId>,
}

impl LockStatus {
    /// The locked resource.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// # let status = locks.status(&mongolock::Filter::default()).await?.remove(0);
    /// assert_eq!(status.resource(), "report");
    /// # Ok(()) }
    /// ```
    pub fn resource(&self) -> &str {
        &self.holder.resource
    }
    /// The lock id.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// # let status = locks.status(&mongolock::Filter::default()).await?.remove(0);
    /// assert_eq!(status.lock_id(), "job-1");
    /// # Ok(()) }
    /// ```
    pub fn lock_id(&self) -> &str {
        &self.holder.lock_id
    }
    /// Exclusive or shared.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// # let status = locks.status(&mongolock::Filter::default()).await?.remove(0);
    /// assert_eq!(status.kind(), mongolock::LockKind::Exclusive);
    /// # Ok(()) }
    /// ```
    pub fn kind(&self) -> LockKind {
        self.holder.kind
    }
    /// The owner.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// # let status = locks.status(&mongolock::Filter::default()).await?.remove(0);
    /// assert_eq!(status.owner(), Some("me"));
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> Option<&str> {
        self.holder.owner.as_deref()
    }
    /// The host.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// # let status = locks.status(&mongolock::Filter::default()).await?.remove(0);
    /// assert_eq!(status.host(), Some("h"));
    /// # Ok(()) }
    /// ```
    pub fn host(&self) -> Option<&str> {
        self.holder.host.as_deref()
    }
    /// When the lock was granted (server time).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// # let status = locks.status(&mongolock::Filter::default()).await?.remove(0);
    /// assert_eq!(status.created_at(), grant.holder().created_at());
    /// # Ok(()) }
    /// ```
    pub fn created_at(&self) -> DateTime {
        self.holder.created_at
    }
    /// When the lock was last granted or renewed (server time).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// # let status = locks.status(&mongolock::Filter::default()).await?.remove(0);
    /// assert_eq!(status.renewed_at(), grant.holder().renewed_at());
    /// # Ok(()) }
    /// ```
    pub fn renewed_at(&self) -> DateTime {
        self.holder.renewed_at
    }
    /// The time left before the server ends the lock, as computed by the server when it
    /// answered; zero once expired; `None` for a lock without TTL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// # let status = locks.status(&mongolock::Filter::default()).await?.remove(0);
    /// assert!(status.ttl_remaining().unwrap() <= Duration::from_secs(30));
    /// # Ok(()) }
    /// ```
    pub fn ttl_remaining(&self) -> Option<Duration> {
        self.remaining
    }
    /// Whether the lock had expired when the server answered. An expired lock blocks nobody;
    /// it stays visible until an acquire on its resource or [`purge`](crate::LockClient::purge)
    /// clears it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// # let status = locks.status(&mongolock::Filter::default()).await?.remove(0);
    /// assert!(!status.is_expired());
    /// # Ok(()) }
    /// ```
    pub fn is_expired(&self) -> bool {
        self.expired
    }
    /// The fencing token of the grant.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// # let status = locks.status(&mongolock::Filter::default()).await?.remove(0);
    /// assert_eq!(status.fencing_token(), grant.fencing_token());
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> i64 {
        self.holder.token
    }
    /// The stored entry.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use std::time::Duration;
    /// # let details = mongolock::LockDetails::default().owner("me").host("h").ttl(Duration::from_secs(30));
    /// # let grant = locks.xlock("report", "job-1", details).await?;
    /// # let status = locks.status(&mongolock::Filter::default()).await?.remove(0);
    /// assert_eq!(status.holder(), grant.holder());
    /// # Ok(()) }
    /// ```
    pub fn holder(&self) -> &Holder {
        &self.holder
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
pub struct Filter {
    pub(crate) created_before: Option<DateTime>,
    pub(crate) created_after: Option<DateTime>,
    pub(crate) ttl_below: Option<Duration>,
    pub(crate) ttl_at_least: Option<Duration>,
    pub(crate) resource: Option<String>,
    pub(crate) lock_id: Option<String>,
    pub(crate) owner: Option<String>,
    pub(crate) kind: Option<LockKind>,
    /// Internal: one of these lock ids (purge).
    pub(crate) lock_ids: Option<Vec<String>>,
    /// Internal: only expired locks (purge).
    pub(crate) expired_only: bool,
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
    /// Locks of this owner.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn argument(error: Error) -> &'static str {
        match error.kind() {
            ErrorKind::InvalidArgument { argument, .. } => argument,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn ids_must_be_non_empty_and_bounded() {
        assert_eq!(argument(check_id("lock_id", "").unwrap_err()), "lock_id");
        assert!(check_id("resource", &"r".repeat(MAX_ID_LEN)).is_ok());
        assert_eq!(
            argument(check_id("resource", &"r".repeat(MAX_ID_LEN + 1)).unwrap_err()),
            "resource"
        );
        // Strings that look like operators or paths are fine: they are sent as literals.
        assert!(check_id("resource", "$$NOW").is_ok());
    }

    #[test]
    fn ttl_is_positive_bounded_and_rounded_up_to_millis() {
        assert_eq!(argument(ttl_millis(Duration::ZERO).unwrap_err()), "ttl");
        assert_eq!(
            argument(ttl_millis(MAX_TTL + Duration::from_nanos(1)).unwrap_err()),
            "ttl"
        );
        assert_eq!(argument(ttl_millis(Duration::MAX).unwrap_err()), "ttl");
        assert_eq!(ttl_millis(Duration::from_nanos(1)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_micros(1500)).unwrap(), 2);
        assert_eq!(ttl_millis(Duration::from_secs(30)).unwrap(), 30_000);
        assert_eq!(ttl_millis(MAX_TTL).unwrap(), MAX_TTL.as_millis() as i64);
    }

    #[test]
    fn details_validate_labels() {
        let long = "x".repeat(MAX_LABEL_LEN + 1);
        let owner = LockDetails::default().owner(long.clone());
        assert_eq!(argument(owner.validate().unwrap_err()), "owner");
        assert_eq!(
            argument(LockDetails::default().host(long).validate().unwrap_err()),
            "host"
        );
        assert!(LockDetails::default().owner("").validate().is_ok());
    }

    #[test]
    fn host_defaults_to_something() {
        assert!(!LockDetails::default().host_value().is_empty());
        assert_eq!(LockDetails::default().host("h").host_value(), "h");
    }
}
