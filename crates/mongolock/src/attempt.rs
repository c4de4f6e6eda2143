//! What one acquire attempt comes back with: an [`Attempt`], and for a refusal the
//! [`Contention`] that explains it.

use std::time::Duration;

use bson::DateTime;

use crate::error::{Error, ErrorKind, Result};
use crate::lock::{Grant, Holder};

/// The most holders a refusal names. A resource can have any number of shared holders; a
/// refusal names a few of them and counts the rest, so that its size stays bounded.
///
/// ```
/// assert_eq!(mongolock::MAX_NAMED_HOLDERS, 8);
/// ```
pub const MAX_NAMED_HOLDERS: usize = 8;

/// The outcome of one acquire attempt that reached the server.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use mongolock::{AcquireRequest, Attempt, LockDetails};
///
/// let first = locks.acquire(&AcquireRequest::exclusive("r", "a", LockDetails::default())).await?;
/// assert!(matches!(first, Attempt::Granted(_)));
/// match locks.acquire(&AcquireRequest::exclusive("r", "b", LockDetails::default())).await? {
///     Attempt::Contended(c) => assert_eq!(c.holders()[0].lock_id(), "a"),
///     other => unreachable!("a holds it: {other:?}"),
/// }
/// // The same lock id again, in a new attempt: it holds the lock already.
/// let again = locks.acquire(&AcquireRequest::exclusive("r", "a", LockDetails::default())).await?;
/// assert!(matches!(again, Attempt::AlreadyHeld(_)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Attempt {
    /// This attempt (its nonce) holds the lock: granted now, or by an earlier send of the
    /// same request whose reply was lost.
    Granted(Grant),
    /// The lock id already held the resource with this kind, from another attempt; the
    /// grant is that lock, unchanged. A lock id belongs to one holder, so this is a repeat by
    /// the same holder, not a second holder.
    AlreadyHeld(Grant),
    /// The lock id holds the resource with the other kind of lock. Nothing was granted; it
    /// will not be while that lock is held.
    HeldWithOtherKind(Holder),
    /// Others hold the resource.
    Contended(Contention),
    /// This attempt's nonce was withdrawn with
    /// [`LockClient::release_attempt`](crate::LockClient::release_attempt): it is never
    /// granted. Build a new request.
    Withdrawn,
    /// The resource is sealed: more attempts were withdrawn on it than it keeps tombstones for
    /// ([`MAX_TOMBSTONES`](crate::MAX_TOMBSTONES)), so it refuses every new attempt until
    /// `until` (by the server's clock), when the last of them can no longer land. Nothing
    /// was granted; locks granted before stay held.
    Sealed {
        /// The resource.
        resource: String,
        /// When it takes attempts again, by the server's clock.
        until: DateTime,
    },
    /// A shared request whose cap differs from the cap stored with the resource's live shared
    /// locks (the first shared grant stores it). Nothing was granted: two callers with two
    /// caps would each enforce their own, which is no cap at all.
    CapMismatch {
        /// The resource.
        resource: String,
        /// The cap this request asked for (`None`: no cap).
        requested: Option<u32>,
        /// The cap stored with the live shared locks (`None`: they have no cap).
        stored: Option<u32>,
    },
}

impl Attempt {
    /// The grant, for [`Granted`](Attempt::Granted) and
    /// [`AlreadyHeld`](Attempt::AlreadyHeld).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use mongolock::{AcquireRequest, LockDetails};
    /// let attempt = locks.acquire(&AcquireRequest::exclusive("r", "a", LockDetails::default())).await?;
    /// assert!(attempt.grant().is_some());
    /// # Ok(()) }
    /// ```
    pub fn grant(&self) -> Option<&Grant> {
        match self {
            Attempt::Granted(grant) | Attempt::AlreadyHeld(grant) => Some(grant),
            _ => None,
        }
    }

    /// The grant, or the error [`xlock`](crate::LockClient::xlock) would return:
    /// [`AlreadyLocked`](ErrorKind::AlreadyLocked) for contention,
    /// [`HeldWithOtherKind`](ErrorKind::HeldWithOtherKind), or
    /// [`InvalidArgument`](ErrorKind::InvalidArgument) for a withdrawn attempt.
    ///
    /// # Errors
    ///
    /// The refusal this attempt stands for, as above, and `CapMismatch` for a cap that
    /// differs from the stored one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # use mongolock::{AcquireRequest, LockDetails};
    /// locks.xlock("r", "a", LockDetails::default()).await?;
    /// let attempt = locks.acquire(&AcquireRequest::exclusive("r", "b", LockDetails::default())).await?;
    /// assert!(attempt.into_result().unwrap_err().is_already_locked());
    /// # Ok(()) }
    /// ```
    pub fn into_result(self) -> Result<Grant> {
        match self {
            Attempt::Granted(grant) | Attempt::AlreadyHeld(grant) => Ok(grant),
            Attempt::HeldWithOtherKind(held) => Err(Error::new(ErrorKind::HeldWithOtherKind {
                resource: held.resource.clone(),
                held,
            })),
            Attempt::Contended(contention) => Err(contention.into_error()),
            Attempt::CapMismatch {
                resource,
                requested,
                stored,
            } => Err(Error::new(ErrorKind::CapMismatch {
                resource,
                requested,
                stored,
            })),
            Attempt::Sealed { resource, until } => {
                Err(Error::new(ErrorKind::Sealed { resource, until }))
            }
            Attempt::Withdrawn => Err(Error::invalid(
                "request",
                "this attempt was withdrawn with release_attempt; build a new request",
            )),
        }
    }
}

/// Who stood in the way of an acquire attempt, as the server saw them, and how long their
/// leases have left by the server's clock.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use std::time::Duration;
/// use mongolock::{AcquireRequest, Attempt, LockDetails};
///
/// locks.xlock("report", "job-1", LockDetails::default().ttl(Duration::from_secs(30))).await?;
/// let request = AcquireRequest::exclusive("report", "job-2", LockDetails::default());
/// let Attempt::Contended(contention) = locks.acquire(&request).await? else { unreachable!() };
/// assert_eq!(contention.resource(), "report");
/// assert_eq!(contention.holders()[0].lock_id(), "job-1");
/// assert_eq!(contention.holder_count(), 1);
/// // A waiter sleeps about this long, instead of guessing: the server computed it.
/// assert!(contention.wait().unwrap() <= Duration::from_secs(30));
/// assert!(contention.free_at().is_some());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Contention {
    pub(crate) resource: String,
    pub(crate) holders: Vec<Holder>,
    pub(crate) holder_count: u64,
    pub(crate) wait: Option<Duration>,
    pub(crate) free_at: Option<DateTime>,
    pub(crate) writer_waiting: bool,
    pub(crate) place: Option<u64>,
}

impl Contention {
    /// The contended resource.
    pub fn resource(&self) -> &str {
        &self.resource
    }
    /// Live holders that stand in the way: all of them, or the first
    /// [`MAX_NAMED_HOLDERS`] when there are more.
    pub fn holders(&self) -> &[Holder] {
        &self.holders
    }
    /// How many live holders stand in the way.
    pub fn holder_count(&self) -> u64 {
        self.holder_count
    }
    /// How long until the blocking leases end if nobody renews them, as the server computed
    /// it (`expiresAt - $$NOW`) in the same command that refused the lock: the earliest a new
    /// attempt could succeed. For a shared request refused only by the cap, the first lease
    /// to end frees a slot. `None` when a blocker has no TTL.
    pub fn wait(&self) -> Option<Duration> {
        self.wait
    }
    /// The same moment as [`wait`](Contention::wait), as a server time, for display. It is
    /// the server's clock: never compare it with a local one.
    pub fn free_at(&self) -> Option<DateTime> {
        self.free_at
    }

    /// Whether a writer of a reader-writer lock waits for this resource and keeps new shared
    /// locks out until it has had its turn (or its place in line lapsed). Told to shared
    /// requests, whom it concerns; always false for an exclusive one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// use mongolock::{AcquireRequest, Attempt, LockDetails};
    ///
    /// locks.xlock("r", "writer", LockDetails::default()).await?;
    /// let reader = AcquireRequest::shared("r", "reader", LockDetails::default(), None);
    /// let Attempt::Contended(contention) = locks.acquire(&reader).await? else { unreachable!() };
    /// assert!(!contention.writer_waiting());
    /// # Ok(()) }
    /// ```
    pub fn writer_waiting(&self) -> bool {
        self.writer_waiting
    }

    /// This attempt's place in the resource's line, after it: how many waiters stand before
    /// it (0: it is next). Waiters are served in the order they joined, so it is granted
    /// only once it is at the head (and the holders are gone). A waiting acquire joins the
    /// line with its first refused attempt; `None` for an attempt that holds no place: a
    /// single attempt (`try_acquire`, [`LockClient::acquire`]) joins no line, and every
    /// waiter stands before it.
    ///
    /// [`LockClient::acquire`]: crate::LockClient::acquire
    pub fn place_in_line(&self) -> Option<u64> {
        self.place
    }

    pub(crate) fn into_error(self) -> Error {
        Error::new(ErrorKind::AlreadyLocked {
            resource: self.resource,
            holders: self.holders,
            holder_count: self.holder_count,
            wait: self.wait,
            free_at: self.free_at,
        })
    }
}
