//! The blocking election: [`Election`], [`Leadership`] and [`LeaderChanges`], the async
//! election's blocking face.

use std::fmt;
use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};

use super::runtime::{Entered, block_on};
use crate::election::Leader;
use crate::error::Result;
use crate::lock::{LeaseState, LossReason};

/// A leader election whose campaigns block: at most one leader at a time, each with a
/// greater term than the last. Made by [`LockClient::election`](super::LockClient::election);
/// the blocking face of [`crate::Election`], which says what is promised.
///
/// ```
/// # let setup = tokio::runtime::Runtime::new().unwrap();
/// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
/// # let locks = mongolock::blocking::LockClient::connect(&server.uri(), "doc", "locks")?;
/// use std::time::Duration;
///
/// let election = locks.election("scheduler").ttl(Duration::from_secs(10));
/// let leading = election.campaign("host-a")?;
/// assert!(election.try_campaign("host-b")?.is_none(), "one leader");
/// assert_eq!(election.leader()?.unwrap().value(), "host-a");
/// let term = leading.term();
/// leading.resign()?;
/// let next = election.try_campaign("host-b")?.expect("free at once");
/// assert!(next.term() > term);
/// # drop(next);
/// # locks.shutdown()?;
/// # Ok::<(), mongolock::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is used"]
pub struct Election {
    inner: Entered<crate::Election>,
}

impl Election {
    pub(crate) fn new(inner: crate::Election) -> Self {
        Election {
            inner: Entered::new(inner),
        }
    }

    /// The leader's lease TTL: as [`crate::Election::ttl`].
    pub fn ttl(self, ttl: Duration) -> Self {
        Self::new(self.inner.into_inner().ttl(ttl))
    }

    /// Nobody leads for `delay` more after a leader's lease ends without a resignation: as
    /// [`crate::Election::lock_delay`].
    pub fn lock_delay(self, delay: Duration) -> Self {
        Self::new(self.inner.into_inner().lock_delay(delay))
    }

    /// Renews the leader's lease this often: as [`crate::Election::extend_every`].
    pub fn extend_every(self, every: Duration) -> Self {
        Self::new(self.inner.into_inner().extend_every(every))
    }

    /// How much earlier than the server a leader counts its lease as lost: as
    /// [`crate::Election::safety_margin`].
    pub fn safety_margin(self, margin: Duration) -> Self {
        Self::new(self.inner.into_inner().safety_margin(margin))
    }

    /// The host recorded with the leadership: as [`crate::Election::host`].
    pub fn host(self, host: impl Into<String>) -> Self {
        Self::new(self.inner.into_inner().host(host))
    }

    /// Campaigns with this lock id instead of a random one: as
    /// [`crate::Election::lock_id`].
    pub fn lock_id(self, lock_id: impl Into<String>) -> Self {
        Self::new(self.inner.into_inner().lock_id(lock_id))
    }

    /// How often [`observe`](Self::observe) reads the leader where the server has no change
    /// streams: as [`crate::Election::poll_every`].
    pub fn poll_every(self, every: Duration) -> Self {
        Self::new(self.inner.into_inner().poll_every(every))
    }

    /// The election's name: the resource its mutex locks.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Waits as long as needed to lead, advertising `value`: as
    /// [`crate::Election::campaign`].
    ///
    /// # Errors
    ///
    /// As [`crate::Election::campaign`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime (nothing is sent then).
    pub fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        block_on(self.inner.campaign(value))?.map(Leadership::new)
    }

    /// One attempt to lead: `None` if someone else leads, as
    /// [`crate::Election::try_campaign`].
    ///
    /// # Errors
    ///
    /// As [`crate::Election::try_campaign`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime (nothing is sent then).
    pub fn try_campaign(&self, value: impl Into<String>) -> Result<Option<Leadership>> {
        Ok(block_on(self.inner.try_campaign(value))??.map(Leadership::new))
    }

    /// Waits up to `timeout` to lead: `None` if the wait gave up, as
    /// [`crate::Election::campaign_timeout`].
    ///
    /// # Errors
    ///
    /// As [`crate::Election::campaign_timeout`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime (nothing is sent then).
    pub fn campaign_timeout(
        &self,
        value: impl Into<String>,
        timeout: Duration,
    ) -> Result<Option<Leadership>> {
        Ok(block_on(self.inner.campaign_timeout(value, timeout))??.map(Leadership::new))
    }

    /// The leader now, by the server's clock: `None` if nobody leads. One round trip.
    ///
    /// # Errors
    ///
    /// As [`crate::Election::leader`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn leader(&self) -> Result<Option<Leader>> {
        block_on(self.inner.leader())?
    }

    /// Every change of leader, starting with the leader now, as
    /// [`crate::Election::observe`] yields them: an iterator whose `next` blocks until the
    /// next change. It ends (`None`) once the lock client is shut down; drop it to stop
    /// observing.
    ///
    /// ```
    /// # let setup = tokio::runtime::Runtime::new().unwrap();
    /// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
    /// # let locks = mongolock::blocking::LockClient::connect(&server.uri(), "doc", "locks")?;
    /// let election = locks.election("scheduler");
    /// let mut changes = election.observe();
    /// assert!(changes.next().unwrap()?.is_none(), "nobody leads yet");
    /// let leading = election.campaign("host-a")?;
    /// let leader = changes.next().unwrap()?.expect("a leader");
    /// assert_eq!(leader.term(), leading.term());
    /// # drop((changes, leading));
    /// # locks.shutdown()?;
    /// # Ok::<(), mongolock::Error>(())
    /// ```
    pub fn observe(&self) -> LeaderChanges {
        LeaderChanges {
            changes: Entered::new(Box::pin(self.inner.observe())),
        }
    }
}

/// The changes of leader of an election, as a blocking iterator. Made by
/// [`Election::observe`].
///
/// Each item is the leader after a change (`None`: nobody leads), or an error the stream
/// goes on after. Called inside an async runtime, `next` yields
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`.
#[must_use = "an iterator does nothing until it is used"]
pub struct LeaderChanges {
    changes: Entered<Changes>,
}

/// The async election's stream of changes.
type Changes = Pin<Box<dyn Stream<Item = Result<Option<Leader>>> + Send>>;

impl fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderChanges").finish_non_exhaustive()
    }
}

impl Iterator for LeaderChanges {
    type Item = Result<Option<Leader>>;

    fn next(&mut self) -> Option<Self::Item> {
        match block_on(self.changes.next()) {
            Ok(item) => item,
            Err(inside_runtime) => Some(Err(inside_runtime)),
        }
    }
}

/// Leading an election, with its lease renewed by the blocking runtime: the blocking face
/// of [`crate::Leadership`], which says what is promised. Dropping it resigns in the
/// background.
#[must_use = "dropping a leadership resigns at once (in the background); hold it while you lead"]
#[derive(Debug)]
pub struct Leadership {
    inner: Entered<crate::Leadership>,
}

impl Leadership {
    fn new(inner: crate::Leadership) -> Self {
        Leadership {
            inner: Entered::new(inner),
        }
    }

    /// The async leadership this one wraps, for what only it has.
    pub fn as_async(&self) -> &crate::Leadership {
        &self.inner
    }

    /// The term: this leadership's fencing token, greater than every earlier leader's.
    pub fn term(&self) -> i64 {
        self.inner.term()
    }

    /// A [`Fence`](crate::Fence) with the term as its token.
    pub fn fence(&self) -> crate::Fence {
        self.inner.fence()
    }

    /// The value advertised, as last set by the campaign or a successful
    /// [`proclaim`](Self::proclaim).
    pub fn value(&self) -> String {
        self.inner.value()
    }

    /// Held, suspended (renewals failing, deadline ahead) or lost.
    pub fn state(&self) -> LeaseState {
        self.inner.state()
    }

    /// True once leadership is lost (or resigned): stop leading.
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// How long leadership is sure to last without another successful renewal.
    pub fn time_left(&self) -> Duration {
        self.inner.time_left()
    }

    /// Blocks until leadership is lost, and returns the reason.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn wait_lost(&self) -> Result<LossReason> {
        block_on(self.inner.lost())
    }

    /// Blocks until leadership is lost or `timeout` has passed: the reason, or `None` if it
    /// was still held at the timeout.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn wait_lost_timeout(&self, timeout: Duration) -> Result<Option<LossReason>> {
        block_on(async { tokio::time::timeout(timeout, self.inner.lost()).await.ok() })
    }

    /// Changes the advertised value without giving up leadership: as
    /// [`crate::Leadership::proclaim`].
    ///
    /// # Errors
    ///
    /// As [`crate::Leadership::proclaim`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime (nothing is sent then).
    pub fn proclaim(&self, value: impl Into<String>) -> Result<()> {
        block_on(self.inner.proclaim(value))?
    }

    /// Gives up leadership now, so that the next campaigner leads at once: as
    /// [`crate::Leadership::resign`].
    ///
    /// # Errors
    ///
    /// As [`crate::Leadership::resign`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime: the leadership is dropped then, which resigns
    /// in the background.
    pub fn resign(self) -> Result<()> {
        let leading = self.inner.into_inner();
        block_on(leading.resign())?
    }
}
