//! What goes into an acquire: the [`AcquireRequest`], the holder's [`LockDetails`], the
//! attempt's [`Nonce`], and the limits every argument is checked against before anything is
//! sent.

use std::sync::OnceLock;
use std::time::Duration;

use bson::oid::ObjectId;

use crate::error::{Error, Result};
use crate::lock::LockKind;

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

/// The longest TTL (and lock-delay) accepted: 100 years (of 365 days). It keeps `$$NOW + ttl` far inside the
/// range of a BSON date and of the server's date arithmetic.
///
/// ```
/// use mongolock::{LockDetails, MAX_TTL};
/// assert!(LockDetails::default().ttl(MAX_TTL).validate().is_ok());
/// assert!(LockDetails::default().ttl(MAX_TTL * 2).validate().is_err());
/// ```
pub const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// Who asks for a lock and for how long: owner, host, TTL and lock-delay, all optional.
///
/// Without a TTL the lock never expires and only an explicit unlock frees it. The host
/// defaults to this machine's host name. Without a lock-delay, a lease that ends without
/// a release frees the resource at once.
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
#[must_use = "a builder does nothing until it is used"]
pub struct LockDetails {
    owner: Option<String>,
    host: Option<String>,
    ttl: Option<Duration>,
    lock_delay: Option<Duration>,
    min_hold: Option<Duration>,
}

impl LockDetails {
    /// Sets who holds the lock (free text for people and for [`Filter::owner`](crate::Filter::owner)).
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

    /// Sets the lock-delay: when this lock's lease ends without a release (its TTL ran out
    /// or it was revoked by a force release), nobody is granted the resource, this lock id
    /// included, until the delay has passed by the server's clock. A holder that was only
    /// slow, and still acts on what it believes it holds, then cannot race a successor for
    /// that long. A release by the holder frees the resource at once, even within the
    /// delay: the holder says it has stopped. Kept in whole milliseconds, rounded up; zero
    /// is no delay.
    ///
    /// The entry stays in the document during its delay (its `expiresAt` is the end of the
    /// delay, see `schema.rs`), so status shows who caused it, and a purge keeps it.
    ///
    /// **What it covers after a revocation.** A force release ends the lease at once, and
    /// the delay runs from then (from the grant, if the server's clock then reads before it,
    /// stepped back: the delay is never shorter by that clock); the revoked holder's guard learns of it at its next renewal:
    /// within the renewal period plus two time limits (that renewal's, and the read of the
    /// live leases that follows a renewal that did not renew every lease; each the longer of
    /// the period and a quarter of the TTL, at most), if it can reach the server, and at its
    /// local deadline (up to the TTL after its last renewal) if it cannot. So a lock-delay of
    /// at least the renewal period plus two of its time limits (the whole TTL with the
    /// default period of a third of it) keeps a reachable revoked holder from overlapping its
    /// successor, and a lock-delay of at least the TTL covers one that cannot reach the
    /// server. A shorter delay narrows the overlap but promises nothing. After a lease that simply ran out, any delay adds to
    /// what the local deadline already guarantees (see the crate's promises).
    ///
    /// **With the other features.** A purge and
    /// [`purge_abandoned_groups`](crate::LockClient::purge_abandoned_groups) keep an entry
    /// within its delay. A lease resumed by a restarted process (the same lock id) keeps the
    /// delay it was granted with, whatever the new call asks; once the delay has begun there
    /// is nothing to resume, and that lock id waits like anyone else, in line in the order it
    /// came (for a shared lock, a waiter whose own share is in its delay asks again when the
    /// delay ends, outside the line, as with [`min_hold`](Self::min_hold)). Each member of a [multi-lock](crate::MultiLock) carries the set's delay; the
    /// members a round took and let go of because the round was refused are released, so no
    /// delay keeps them. The delay is measured by the server's clock from the lease's end: a
    /// step of that clock moves its end as it moves the end of every lease, and the client
    /// learns of such a step as described in the crate's promises.
    ///
    /// ```
    /// use std::time::Duration;
    /// let details = mongolock::LockDetails::default()
    ///     .ttl(Duration::from_secs(30))
    ///     .lock_delay(Duration::from_secs(10));
    /// assert_eq!(details.lock_delay_value(), Some(Duration::from_secs(10)));
    /// assert!(details.validate().is_ok());
    /// ```
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = (!delay.is_zero()).then_some(delay);
        self
    }

    /// Sets a minimum hold: a holder that lets go of the lock within `min_hold` of its grant
    /// (by the server's clock) keeps its lock in force until the grant's time plus
    /// `min_hold`; a later release frees it at once. For an exclusive lock (a mutex, a
    /// writer, [`xlock`](crate::LockClient::xlock)) that keeps the resource from everybody,
    /// its own lock id included. For a shared lock it keeps that share in force: a reader's
    /// hold keeps writers out while other readers come in as they could beside it, and a
    /// semaphore holder's hold keeps its permit taken. The lease itself ends at the release:
    /// the entry only stays in force, shown by status as a lock-delay. For jobs that must run
    /// at most once per period across hosts whose clocks and timers differ (ShedLock's
    /// `lockAtLeastFor`): with a minimum hold longer than the spread of the hosts' timers and
    /// shorter than the period less that spread, a host whose timer fires late in the same
    /// period finds the job's lock still taken, even when the job finished at once, and the
    /// next period's first host finds it free. Kept in whole milliseconds, rounded up; zero is none.
    ///
    /// It applies when the holder lets go: [`release`](crate::LockGuard::release), a dropped
    /// guard, [`LockClient::release`](crate::LockClient::release),
    /// [`unlock`](crate::LockClient::unlock), and
    /// [`release_attempt`](crate::LockClient::release_attempt) of a granted attempt (its
    /// caller may have worked under it). It does not apply to a grant nobody was handed: a
    /// waiting acquire's attempt given up or dropped, or the members a
    /// [multi-lock](crate::MultiLock) took in a round it did not finish. Waiters are woken
    /// when a holder lets go into its hold and are granted when it ends, in the order they
    /// came, a waiter of the same lock id included (for a shared lock, a waiter whose own
    /// lock id's share is in its hold asks again when the hold ends, outside the line).
    ///
    /// Against an operator: a hold under way (its holder let go) is not cut short by
    /// [`force_release`](crate::LockClient::force_release) nor by a purge, like a lock-delay
    /// under way; it ends at grant + hold by the server's clock, also when that clock
    /// stepped back past the grant before the force release. A force release of a lease still held ends it at once, as it ends any
    /// lease: the hold, which starts when the holder lets go, never starts (a lock-delay, if
    /// the entry has one, still applies). [`purge_abandoned_groups`] takes a lock let go of
    /// within its hold for released, not abandoned. A holder that dies leaves the resource to
    /// its TTL (and its [`lock_delay`](Self::lock_delay), which covers that case: give both to
    /// cover both). A lease resumed by a restarted process
    /// ([`LockClient`](crate::LockClient) with the same lock id) keeps the hold it was
    /// granted with. The hold is measured by the server's clock, from the grant's
    /// `createdAt`: a step of that clock moves its end as it moves the end of every lease. A
    /// step back, even to before the grant, never gives a lock let go of back to its lock
    /// id: no acquire, renewal or keepalive takes it for held again (the entry is marked,
    /// see [`Holder::let_go_at`](crate::Holder::let_go_at)), so it stays held by nobody
    /// until its hold ends.
    ///
    /// [`purge_abandoned_groups`]: crate::LockClient::purge_abandoned_groups
    ///
    /// ```
    /// use std::time::Duration;
    /// let hourly = mongolock::LockDetails::default()
    ///     .ttl(Duration::from_secs(30))
    ///     .min_hold(Duration::from_secs(55 * 60));
    /// assert_eq!(hourly.min_hold_value(), Some(Duration::from_secs(3300)));
    /// assert!(hourly.validate().is_ok());
    /// ```
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = (!min_hold.is_zero()).then_some(min_hold);
        self
    }

    /// The minimum hold, if set (see [`min_hold`](Self::min_hold)).
    ///
    /// ```
    /// assert_eq!(mongolock::LockDetails::default().min_hold_value(), None);
    /// ```
    pub fn min_hold_value(&self) -> Option<std::time::Duration> {
        self.min_hold
    }

    /// The lock-delay, if set (see [`lock_delay`](Self::lock_delay)).
    ///
    /// ```
    /// assert_eq!(mongolock::LockDetails::default().lock_delay_value(), None);
    /// ```
    pub fn lock_delay_value(&self) -> Option<Duration> {
        self.lock_delay
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
    /// # Errors
    ///
    /// `InvalidArgument` naming the setting: an owner or host longer than
    /// [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN), a TTL of zero or above [`MAX_TTL`](crate::MAX_TTL), a
    /// lock-delay or a minimum hold above it.
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
        self.delay_millis()?;
        self.hold_millis()?;
        Ok(())
    }

    /// The lock-delay in whole milliseconds, rounded up, if set; an error above
    /// [`MAX_TTL`].
    pub(crate) fn delay_millis(&self) -> Result<Option<i64>> {
        bounded_millis("lock_delay", self.lock_delay)
    }

    /// The minimum hold in whole milliseconds, rounded up, if set; an error above
    /// [`MAX_TTL`].
    pub(crate) fn hold_millis(&self) -> Result<Option<i64>> {
        bounded_millis("min_hold", self.min_hold)
    }
}

/// `value` in whole milliseconds, rounded up; an error naming `argument` above [`MAX_TTL`].
fn bounded_millis(argument: &'static str, value: Option<Duration>) -> Result<Option<i64>> {
    match value {
        None => Ok(None),
        Some(value) if value > MAX_TTL => Err(Error::invalid(
            argument,
            format!("{value:?} is longer than the limit of {MAX_TTL:?}"),
        )),
        // MAX_TTL keeps this far below i64::MAX.
        Some(value) => Ok(Some(value.as_nanos().div_ceil(1_000_000) as i64)),
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

pub(crate) fn check_label(argument: &'static str, value: &str) -> Result<()> {
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
/// Sending the same request again (same nonce) after an unknown outcome is the same attempt:
/// it reports [`Attempt::Granted`](crate::Attempt::Granted) if the first one got through.
/// [`LockClient::release_attempt`](crate::LockClient::release_attempt) withdraws an attempt by
/// its nonce, for good.
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

/// One acquire attempt: what [`LockClient::acquire`](crate::LockClient::acquire) sends.
///
/// [`LockClient::xlock`](crate::LockClient::xlock) and [`LockClient::slock`](crate::LockClient::slock) build one for you; build it yourself to
/// choose the nonce (to recognise a retried attempt) or to handle contention without an error.
///
/// ```
/// use mongolock::{AcquireRequest, LockDetails, LockKind};
///
/// let request = AcquireRequest::exclusive("ledger", "tx-7", LockDetails::default());
/// assert_eq!(request.kind(), LockKind::Exclusive);
/// let readers = AcquireRequest::shared("ledger", "report-1", LockDetails::default(), Some(4));
/// assert_eq!(readers.max_shared(), Some(4));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use = "a builder does nothing until it is used"]
pub struct AcquireRequest {
    pub(crate) resource: String,
    pub(crate) lock_id: String,
    pub(crate) kind: LockKind,
    pub(crate) details: LockDetails,
    pub(crate) max_shared: Option<u32>,
    pub(crate) nonce: Nonce,
    /// The lease keeper that will renew the grant (set by the lease layer).
    pub(crate) keeper: Option<String>,
    /// For an exclusive request: when refused, announce this waiter in the resource's queue
    /// for this long, which keeps new shared grants out (a reader-writer lock's writer).
    pub(crate) announce: Option<Duration>,
    /// Only wait for its turn: with `announce`, an attempt that is never granted, and joins
    /// (or keeps) its place in line; its reply tells its place and what holds the resource.
    /// A multi-lock waits so for each member's turn (see `crate::multi`).
    pub(crate) turn_only: bool,
    /// The call the request is made for, which its place in line names (see
    /// `crate::schema`): its first attempt's nonce, kept by the call's later attempts (each
    /// with a fresh nonce).
    pub(crate) call: bson::oid::ObjectId,
}

impl AcquireRequest {
    /// A request for an exclusive lock, with a fresh nonce.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::exclusive("r", "id", Default::default());
    /// # let _ = request;
    /// ```
    pub fn exclusive(
        resource: impl Into<String>,
        lock_id: impl Into<String>,
        details: LockDetails,
    ) -> Self {
        let nonce = Nonce::new();
        AcquireRequest {
            resource: resource.into(),
            lock_id: lock_id.into(),
            kind: LockKind::Exclusive,
            details,
            max_shared: None,
            nonce,
            keeper: None,
            announce: None,
            turn_only: false,
            call: nonce.0,
        }
    }

    /// A request for a shared lock granted while fewer than `max` shared locks are live
    /// (`None`: no cap), with a fresh nonce. The cap is checked by this request only; callers
    /// sharing a resource must agree on it.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("r", "id", Default::default(), None);
    /// # let _ = request;
    /// ```
    pub fn shared(
        resource: impl Into<String>,
        lock_id: impl Into<String>,
        details: LockDetails,
        max: Option<u32>,
    ) -> Self {
        AcquireRequest {
            kind: LockKind::Shared,
            max_shared: max,
            ..AcquireRequest::exclusive(resource, lock_id, details)
        }
    }

    /// Uses `nonce` instead of a fresh one, for instance to repeat an attempt whose outcome is
    /// unknown: the repeat is the same attempt. The request's call is then named by this
    /// nonce too (a waiting call's place in line names its first attempt's nonce).
    ///
    /// ```
    /// let nonce = mongolock::Nonce::new();
    /// let request = mongolock::AcquireRequest::exclusive("r", "id", Default::default()).nonce(nonce);
    /// assert_eq!(request.nonce_value(), nonce);
    /// ```
    pub fn nonce(mut self, nonce: Nonce) -> Self {
        self.nonce = nonce;
        self.call = nonce.0;
        self
    }

    /// The resource.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("report", "job-1", Default::default(), Some(3));
    /// assert_eq!(request.resource(), "report");
    /// ```
    pub fn resource(&self) -> &str {
        &self.resource
    }
    /// The lock id.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("report", "job-1", Default::default(), Some(3));
    /// assert_eq!(request.lock_id(), "job-1");
    /// ```
    pub fn lock_id(&self) -> &str {
        &self.lock_id
    }
    /// The kind of lock asked for.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("report", "job-1", Default::default(), Some(3));
    /// assert_eq!(request.kind(), mongolock::LockKind::Shared);
    /// ```
    pub fn kind(&self) -> LockKind {
        self.kind
    }
    /// The cap on live shared locks, for a shared request.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("report", "job-1", Default::default(), Some(3));
    /// assert_eq!(request.max_shared(), Some(3));
    /// ```
    pub fn max_shared(&self) -> Option<u32> {
        self.max_shared
    }
    /// This attempt's nonce.
    ///
    /// ```
    /// let request = mongolock::AcquireRequest::shared("report", "job-1", Default::default(), Some(3));
    /// let resent = request.clone();
    /// assert_eq!(resent.nonce_value(), request.nonce_value());
    /// ```
    pub fn nonce_value(&self) -> Nonce {
        self.nonce
    }

    /// Checks every argument; nothing is sent when this fails.
    pub(crate) fn validate(&self) -> Result<Option<i64>> {
        check_id("resource", &self.resource)?;
        check_id("lock_id", &self.lock_id)?;
        self.details.validate()?;
        if let Some(announce) = self.announce {
            ttl_millis(announce)?;
        }
        if self.max_shared == Some(0) {
            return Err(Error::invalid(
                "max",
                "a cap of zero would never grant; use None for no cap",
            ));
        }
        self.details.ttl_value().map(ttl_millis).transpose()
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
