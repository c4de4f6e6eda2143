//! Leader election: [`Election`], made by [`LockClient::election`], with the
//! [`Leadership`] a campaign wins and the [`Leader`] anyone can read or observe.
//!
//! An election is a mutex on the resource named after it, whose holder is the leader:
//!
//! - **Campaign** acquires that mutex, storing the campaigner's value as the lock's owner
//!   (so `mongolock status --resource <name>` shows it too). Campaigners wait in the
//!   resource's line, in the order they came, and the next one leads as soon as the leader
//!   resigns, or when its lease ends if it died.
//! - **Resuming** (a campaign under a stable lock id whose process restarted within the TTL)
//!   takes back the lease, with its term, and advertises the value it was campaigned with
//!   from that moment: the one write that makes the lease this client's also stores the
//!   new value (and this host), so no read sees the old value under the resumed term, and
//!   [`Leadership::value`] says the same (see [`Election::campaign`]).
//! - **The term** is the grant's fencing token: greater for every new leader, also after the
//!   election's document was cleaned up unless the server's clock went back by more than
//!   the retention (see [Guarantees](crate#guarantees)). Pass it with every write the leader makes, so that
//!   the store can refuse a deposed leader's late writes.
//! - **Leadership is a lease**, kept alive in the background: [`Leadership::lost`] fires no
//!   later than the local deadline, before anyone else can be elected (under the conditions
//!   of [Guarantees](crate#guarantees)).
//! - **Proclaim** changes the stored value in one write that the server applies only while
//!   it still holds this very grant live, kept by this client ([`crate::command::proclaim`]):
//!   a leader displaced by another client that resumed its lock id is refused, and told
//!   that it lost.
//! - **The leader** is read from the server ([`LockClient::status`]): the live exclusive
//!   holder of the resource, by the server's clock.
//! - **Observe** opens a change stream on the election's document first and then reads the
//!   leader, so no change falls between the read and the stream's start; each change (or
//!   the leader's lease running out, which makes no event) leads to a new read, and the
//!   stream yields the leader whenever its term or value differ from the last yielded.
//!   Without change streams (a standalone server) it polls. Two changes closer together
//!   than one read may be seen as one: the observer always ends on the latest leader, and
//!   the terms it yields never decrease.

use std::time::Duration;

use bson::Document;
use futures_util::{Stream, StreamExt};
use mongodb::change_stream::ChangeStream;
use mongodb::change_stream::event::ChangeStreamEvent;
use tokio::time::Instant;

use crate::client::LockClient;
use crate::command;
use crate::error::{Effect, Error, ErrorKind, Result};
use crate::guard::LockGuard;
use crate::handle::Mutex;
use crate::lock::{LeaseState, LockKind, LossReason};
use crate::query::Filter;
use crate::request::check_label;
use crate::run;
use crate::wait::RECHECK;

/// How often an observer reads the leader where change streams are not available, by
/// default.
pub const DEFAULT_OBSERVE_POLL: Duration = Duration::from_millis(500);

/// The server's code for "change streams are only supported on replica sets".
const CHANGE_STREAM_NOT_SUPPORTED: i32 = 40573;

impl LockClient {
    /// An election named `name`: a mutex on the resource `name` whose holder leads. See
    /// [`Election`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let election = locks.election("scheduler");
    /// let leading = election.campaign("host-a:8080").await?;
    /// let leader = election.leader().await?.expect("someone leads");
    /// assert_eq!((leader.value(), leader.term()), ("host-a:8080", leading.term()));
    /// leading.resign().await?;
    /// assert!(election.leader().await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> Election {
        let name = name.into();
        Election {
            mutex: self.mutex(name.clone()),
            client: self.clone(),
            name,
            poll: DEFAULT_OBSERVE_POLL,
        }
    }
}

/// A leader election: at most one leader at a time, each with a greater term than the last.
/// Made by [`LockClient::election`].
///
/// The settings are the lease's, as on a [`Mutex`]: TTL (how long a dead leader keeps
/// leading), lock-delay, renewal period, safety margin, host and lock id.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use std::time::Duration;
///
/// let election = locks.election("scheduler").ttl(Duration::from_secs(10));
/// let leading = election.campaign("host-a").await?;
/// assert!(election.try_campaign("host-b").await?.is_none(), "one leader");
/// leading.proclaim("host-a, draining").await?;
/// assert_eq!(election.leader().await?.unwrap().value(), "host-a, draining");
/// let term = leading.term();
/// leading.resign().await?;
/// let next = election.try_campaign("host-b").await?.expect("free at once");
/// assert!(next.term() > term);
/// # drop(next);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is used"]
pub struct Election {
    mutex: Mutex,
    client: LockClient,
    name: String,
    poll: Duration,
}

impl Election {
    /// The leader's lease TTL (default thirty seconds, at least 50 ms): how long a leader
    /// that died keeps the others from leading. Renewed in the background every third of it.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.mutex = self.mutex.ttl(ttl);
        self
    }

    /// After a leader's lease ends without a resignation (it died, stalled past its TTL, or
    /// was revoked), nobody leads for `delay` more (as [`Mutex::lock_delay`]): a leader that
    /// was only slow stops before the next one starts. A resignation hands over at once.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.mutex = self.mutex.lock_delay(delay);
        self
    }

    /// Renews the leader's lease this often instead of every third of the TTL (as
    /// [`Mutex::extend_every`]).
    pub fn extend_every(mut self, every: Duration) -> Self {
        self.mutex = self.mutex.extend_every(every);
        self
    }

    /// How much earlier than the server a leader counts its lease as lost (as
    /// [`Mutex::safety_margin`]).
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.mutex = self.mutex.safety_margin(margin);
        self
    }

    /// The host recorded with the leadership (default: this machine's host name).
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.mutex = self.mutex.host(host);
        self
    }

    /// Campaigns with this lock id instead of a random one (as [`Mutex::lock_id`]).
    pub fn lock_id(mut self, lock_id: impl Into<String>) -> Self {
        self.mutex = self.mutex.lock_id(lock_id);
        self
    }

    /// How often [`observe`](Self::observe) reads the leader where the server has no change
    /// streams (a standalone server); default [`DEFAULT_OBSERVE_POLL`].
    pub fn poll_every(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// The election's name: the resource its mutex locks.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits as long as needed to lead, advertising `value` (at most
    /// [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) bytes) while leading.
    ///
    /// With a [`lock_id`](Self::lock_id) that leads already (this process before a restart),
    /// the campaign resumes that leadership, in its term, and the write that takes the lease
    /// back stores `value` (and this host) in place of what was stored before: the
    /// leadership it returns advertises `value`, on the server and in
    /// [`Leadership::value`], from the moment it leads. A take-back that fails on the way is
    /// tried again as a failed attempt is.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let db = server.client().database("doc");
    /// use mongolock::LockClient;
    ///
    /// // A process leads under its own lock id, and dies without resigning.
    /// let before = LockClient::new(db.collection("locks"));
    /// let leading = before.election("scheduler").lock_id("node-1").campaign("10.0.0.1:80").await?;
    /// let term = leading.term();
    /// std::mem::forget(leading); // no resignation...
    /// drop(before);               // ...and nothing renews it any more: the process is gone
    ///
    /// // Started again within the TTL, at another address: the same term, the new address.
    /// let after = LockClient::new(db.collection("locks"));
    /// let election = after.election("scheduler").lock_id("node-1");
    /// let leading = election.campaign("10.0.0.2:80").await?;
    /// assert_eq!((leading.term(), leading.value().as_str()), (term, "10.0.0.2:80"));
    /// assert_eq!(election.leader().await?.unwrap().value(), "10.0.0.2:80");
    /// # leading.resign().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Mutex::acquire`]; a value too long is
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `value`.
    ///
    /// # Cancel safety
    ///
    /// As [`Mutex::acquire`]: dropping the future leaves no leadership behind.
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let leading = self.elect(value.into(), Within::Forever).await?;
        Ok(leading.expect("a campaign without end leads or fails"))
    }

    /// One attempt to lead: `None` if someone else leads (or others campaign before this
    /// one: campaigners are served in the order they came). A resumed leadership advertises
    /// `value` as with [`campaign`](Self::campaign).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign), and transient errors: after one, the attempt is sent
    /// once more at once, and a second one is returned.
    ///
    /// # Cancel safety
    ///
    /// As [`campaign`](Self::campaign).
    pub async fn try_campaign(&self, value: impl Into<String>) -> Result<Option<Leadership>> {
        self.elect(value.into(), Within::Once).await
    }

    /// Waits up to `timeout` to lead: `None` if the wait gave up. A resumed leadership
    /// advertises `value` as with [`campaign`](Self::campaign).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    ///
    /// As [`campaign`](Self::campaign).
    pub async fn campaign_timeout(
        &self,
        value: impl Into<String>,
        timeout: Duration,
    ) -> Result<Option<Leadership>> {
        // A timeout past what the clock can represent is a campaign without end.
        let within = Instant::now()
            .checked_add(timeout)
            .map_or(Within::Forever, Within::Until);
        self.elect(value.into(), within).await
    }

    /// Campaigns as long as needed, then runs `work` with the leadership for as long as it
    /// lasts, and resigns when `work` returns: `work`'s result. Leadership lost while `work`
    /// runs drops `work` (it stops at its next `.await`), as the handles' closure forms do:
    /// see [running work under a lock](crate::Mutex#running-work-under-a-lock). A
    /// leader that should lead until it is deposed runs a `work` that never returns, and
    /// campaigns again after [`ErrorKind::LeaseLost`].
    ///
    /// # Errors
    ///
    /// This crate's errors, as `E`: those of [`campaign`](Self::campaign) if it did not lead,
    /// and [`ErrorKind::LeaseLost`] if leadership was lost before `work` returned (`work`
    /// was dropped). `work`'s own error, untouched. A resignation that fails after `work`
    /// returned is logged, not returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and resigns in the background, as dropping the
    /// leadership does (before it leads, as [`campaign`](Self::campaign)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let election = locks.election("scheduler");
    /// let term = election.lead("host-a", async |leading| {
    ///     // ... lead, passing leading.term() (or leading.fence()) with every write ...
    ///     Ok::<_, mongolock::Error>(leading.term())
    /// }).await?;
    /// assert!(term > 0);
    /// assert!(election.leader().await?.is_none(), "resigned when the work returned");
    /// # Ok(()) }
    /// ```
    pub async fn lead<T, E>(
        &self,
        value: impl Into<String>,
        work: impl AsyncFnOnce(&Leadership) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E>
    where
        E: From<Error>,
    {
        run::under(self.campaign(value).await?, work).await
    }

    /// One attempt to lead: runs `work` with the leadership if it leads, as
    /// [`lead`](Self::lead) does, and `None` without running it if someone else leads (or
    /// others campaign before this one).
    ///
    /// # Errors
    ///
    /// As [`lead`](Self::lead), with those of [`try_campaign`](Self::try_campaign) for the
    /// attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`lead`](Self::lead).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let election = locks.election("scheduler");
    /// let leading = election.campaign("host-a").await?;
    /// let ran = election.try_lead("host-b", async |_leading| Ok::<_, mongolock::Error>(1)).await?;
    /// assert_eq!(ran, None, "host-a leads: skipped");
    /// leading.resign().await?;
    /// let ran = election.try_lead("host-b", async |_leading| Ok::<_, mongolock::Error>(1)).await?;
    /// assert_eq!(ran, Some(1));
    /// # Ok(()) }
    /// ```
    pub async fn try_lead<T, E>(
        &self,
        value: impl Into<String>,
        work: impl AsyncFnOnce(&Leadership) -> std::result::Result<T, E>,
    ) -> std::result::Result<Option<T>, E>
    where
        E: From<Error>,
    {
        match self.try_campaign(value).await? {
            Some(leading) => run::under(leading, work).await.map(Some),
            None => Ok(None),
        }
    }

    /// Campaigns up to `timeout`: runs `work` with the leadership if it leads by then, as
    /// [`lead`](Self::lead) does, and `None` without running it if the wait gave up. The
    /// timeout bounds the campaign only, not the term.
    ///
    /// # Errors
    ///
    /// As [`lead`](Self::lead), with those of [`campaign_timeout`](Self::campaign_timeout)
    /// for the campaign.
    ///
    /// # Cancel safety
    ///
    /// As [`lead`](Self::lead).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// use std::time::Duration;
    ///
    /// let election = locks.election("scheduler");
    /// let leading = election.campaign("host-a").await?;
    /// let wait = Duration::from_millis(50);
    /// let ran = election.lead_timeout("host-b", wait, async |_| Ok::<_, mongolock::Error>(1)).await?;
    /// assert_eq!(ran, None, "host-a still leads after 50 ms: skipped");
    /// leading.resign().await?;
    /// let wait = Duration::from_secs(5);
    /// let ran = election.lead_timeout("host-b", wait, async |_| Ok::<_, mongolock::Error>(1)).await?;
    /// assert_eq!(ran, Some(1));
    /// # Ok(()) }
    /// ```
    pub async fn lead_timeout<T, E>(
        &self,
        value: impl Into<String>,
        timeout: Duration,
        work: impl AsyncFnOnce(&Leadership) -> std::result::Result<T, E>,
    ) -> std::result::Result<Option<T>, E>
    where
        E: From<Error>,
    {
        match self.campaign_timeout(value, timeout).await? {
            Some(leading) => run::under(leading, work).await.map(Some),
            None => Ok(None),
        }
    }

    /// The leader now, by the server's clock: `None` if nobody leads. One round trip.
    ///
    /// # Errors
    ///
    /// A database error, or [`ErrorKind::UnexpectedDocument`](crate::ErrorKind::UnexpectedDocument)
    /// if the election's document is not a lock document.
    ///
    /// # Cancel safety
    ///
    /// Reads only: dropping the future has no effect.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let filter = Filter::default()
            .resource(self.name.clone())
            .kind(LockKind::Exclusive);
        let held = self.client.status(&filter).await?;
        Ok(held
            .into_iter()
            .find(|status| !status.is_expired())
            .map(|status| Leader {
                value: status.owner().unwrap_or_default().to_owned(),
                term: status.fencing_token(),
                lock_id: status.lock_id().to_owned(),
                host: status.host().map(str::to_owned),
                remaining: status.ttl_remaining(),
            }))
    }

    /// Every change of leader, starting with the leader now (`None`: nobody leads): a new
    /// leader, a new value, or nobody leading any more.
    ///
    /// A change stream on the election's document is opened first, and the leader read
    /// after, so no change falls between the read and the stream's start; each change of the
    /// document (or the leader's lease running out, which no write reports) leads to a new
    /// read, and the leader is yielded whenever its term or value differs from the last one
    /// yielded. Without change streams (a standalone server) it reads every
    /// [`poll_every`](Self::poll_every). Two changes closer together than one read may be
    /// seen as one: the stream always ends on the latest leader, and the terms it yields
    /// never decrease. An error is yielded as an item, and the stream goes on after it (reading
    /// again after a pause).
    ///
    /// The stream never ends by itself; drop it to stop observing, or shut the lock client
    /// down ([`LockClient::shutdown`]): then the stream yields `None`. It is driven by a task
    /// of its own from its first poll, which reads one item ahead of the consumer at most,
    /// and holds a change stream cursor (and so one of the driver's pooled connections while
    /// it waits) on a replica set; dropping the stream or shutting the lock client down ends
    /// the task and closes the cursor, whether or not the stream is polled again, so the
    /// driver's `Client::shutdown` does not wait for it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// use futures_util::StreamExt;
    ///
    /// let election = locks.election("scheduler");
    /// let mut changes = Box::pin(election.observe());
    /// assert!(changes.next().await.unwrap()?.is_none(), "nobody leads yet");
    /// let leading = election.campaign("host-a").await?;
    /// let leader = changes.next().await.unwrap()?.expect("a leader");
    /// assert_eq!(leader.term(), leading.term());
    /// # drop(leading);
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> impl Stream<Item = Result<Option<Leader>>> + Send + 'static {
        let observer = Observer {
            election: self.clone(),
            changes: None,
            streams: true,
            waits: false,
            last: None,
            leader_ends: None,
        };
        // Started at the first poll (where a runtime runs), with the token of the shutdown to
        // come: one that began earlier does not stop it.
        let stop = self.client.observers_token();
        futures_util::stream::unfold(Feed::Idle(Box::new(observer), stop), |feed| async move {
            let mut items = match feed {
                Feed::Idle(observer, stop) => observer.spawn(stop),
                Feed::Running(items) => items,
            };
            let item = items.recv().await?;
            Some((item, Feed::Running(items)))
        })
    }

    /// A campaign advertising `value`, for as long as `within` says. `None` if the wait gave
    /// up.
    ///
    /// # Cancel safety
    ///
    /// As [`Mutex::acquire`].
    async fn elect(&self, value: String, within: Within) -> Result<Option<Leadership>> {
        check_label("value", &value)?;
        let mutex = self.mutex.clone().owner(value.clone());
        let Some(guard) = within.acquire(&mutex).await? else {
            return Ok(None);
        };
        Ok(Some(Leadership {
            guard,
            client: self.client.clone(),
            value: std::sync::Mutex::new(value),
        }))
    }
}

/// How long a campaign may go on.
#[derive(Debug, Clone, Copy)]
enum Within {
    /// One attempt.
    Once,
    /// Until this instant.
    Until(Instant),
    /// As long as it takes.
    Forever,
}

impl Within {
    /// Acquires the election's mutex, waiting as this says.
    ///
    /// # Cancel safety
    ///
    /// As [`Mutex::acquire`].
    async fn acquire(self, mutex: &Mutex) -> Result<Option<LockGuard>> {
        match self {
            Within::Once => mutex.try_acquire().await,
            Within::Until(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                mutex.acquire_timeout(left).await
            }
            Within::Forever => mutex.acquire().await.map(Some),
        }
    }
}

/// Who leads an election, as the server had it when asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    value: String,
    term: i64,
    lock_id: String,
    host: Option<String>,
    remaining: Option<Duration>,
}

impl Leader {
    /// The value the leader advertises (empty if the resource is held by a plain mutex that
    /// set no owner).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The leader's term: its grant's fencing token, greater for every new leader.
    pub fn term(&self) -> i64 {
        self.term
    }

    /// The lock id the leader holds the election with.
    pub fn lock_id(&self) -> &str {
        &self.lock_id
    }

    /// The leader's host, as recorded.
    pub fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }
}

/// Leading an election: a lease, renewed in the background, with the election's term.
/// Returned by [`Election::campaign`] and its kin.
///
/// Stop leading work the moment [`lost`](Leadership::lost) fires (or
/// [`is_lost`](Leadership::is_lost) is true), and pass [`term`](Leadership::term) to the
/// stores the leader writes to. Dropping it resigns in the background, as dropping a
/// [`LockGuard`] releases.
#[must_use = "dropping a leadership resigns at once (in the background); hold it while you lead"]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
    client: LockClient,
    value: std::sync::Mutex<String>,
}

impl Leadership {
    /// The term: this leadership's fencing token, greater than every earlier leader's.
    pub fn term(&self) -> i64 {
        self.guard.fencing_token()
    }

    /// A [`Fence`](crate::Fence) with the term as its token: the leader's writes to a
    /// MongoDB collection, which a deposed leader can no longer make once a newer leader
    /// wrote.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let db = server.client().database("doc");
    /// # let locks = mongolock::LockClient::new(db.collection("locks"));
    /// let leading = locks.election("scheduler").campaign("host-a").await?;
    /// assert_eq!(leading.fence().token(), leading.term());
    /// # Ok(()) }
    /// ```
    pub fn fence(&self) -> crate::Fence {
        crate::Fence::new(self.term())
    }

    /// The value advertised, as last set by the campaign or a successful
    /// [`proclaim`](Leadership::proclaim).
    pub fn value(&self) -> String {
        self.value
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Held, suspended (renewals failing, deadline ahead) or lost.
    pub fn state(&self) -> LeaseState {
        self.guard.state()
    }

    /// True once leadership is lost (or resigned): stop leading.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// How long leadership is sure to last without another successful renewal.
    pub fn time_left(&self) -> Duration {
        self.guard.time_left()
    }

    /// Resolves when leadership is lost, with the reason: no later than the local deadline,
    /// before anyone else can be elected (under the conditions of
    /// [Guarantees](crate#guarantees)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn lost(&self) -> LossReason {
        self.guard.lost().await
    }

    /// The lease under the leadership.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Changes the advertised value without giving up leadership, in one round trip that
    /// the server applies only while it still holds this leadership live, kept by this
    /// client.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LeaseLost`] if leadership was lost before the call, or if the server no
    /// longer held it (it ended, was revoked, or another client resumed its lock id: then
    /// leadership is lost from now on, as [`LossReason::Revoked`]); a value too long
    /// ([`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)); a database
    /// error, after which the value may or may not have been set.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the value may or may not have been set; proclaiming again
    /// is harmless.
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<()> {
        let value = value.into();
        check_label("value", &value)?;
        if let LeaseState::Lost(reason) = self.guard.state() {
            return Err(self.lost_error(reason));
        }
        let live = command::proclaim::run(self.client.ready()?, self.guard.grant(), &value).await?;
        if !live {
            self.guard.revoked();
            return Err(self.lost_error(LossReason::Revoked));
        }
        *self
            .value
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = value;
        Ok(())
    }

    /// Gives up leadership now, so that the next campaigner leads at once.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`]: [`ErrorKind::LeaseLost`] if leadership had been lost.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`].
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }

    fn lost_error(&self, reason: LossReason) -> Error {
        Error::new(ErrorKind::LeaseLost {
            resource: self.guard.resource().to_owned(),
            reason,
        })
    }
}

/// The state of one [`Election::observe`] stream.
/// An observer's stream: its observer before the first poll, then the items its task sends.
enum Feed {
    Idle(Box<Observer>, tokio_util::sync::CancellationToken),
    Running(tokio::sync::mpsc::Receiver<Result<Option<Leader>>>),
}

struct Observer {
    election: Election,
    /// The change stream on the election's document, once open.
    changes: Option<ChangeStream<ChangeStreamEvent<Document>>>,
    /// False once the server refused change streams: poll.
    streams: bool,
    /// Whether the next read waits for a change first (every read but the first).
    waits: bool,
    /// The term and value last yielded (`Some(None)`: nobody led).
    last: Option<Option<(i64, String)>>,
    /// When the leader last read stops leading unless renewed, by the server's count.
    leader_ends: Option<Instant>,
}

impl Observer {
    /// Runs this observer in a task of its own, which ends when `stop` is cancelled or the
    /// receiver it returns is dropped (and drops its change stream then): the items, one
    /// read ahead at most.
    fn spawn(
        mut self: Box<Self>,
        stop: tokio_util::sync::CancellationToken,
    ) -> tokio::sync::mpsc::Receiver<Result<Option<Leader>>> {
        let (items, receiver) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            loop {
                // The next reading is taken once the consumer took the last one (its slot is
                // free): one reading ahead of the consumer at most, never a second one held
                // here while the first waits in the channel.
                let slot = tokio::select! {
                    () = stop.cancelled() => return,
                    slot = items.reserve() => match slot {
                        Ok(slot) => slot,
                        Err(_) => return,
                    },
                };
                let item = tokio::select! {
                    () = stop.cancelled() => return,
                    () = items.closed() => return,
                    item = self.next() => item,
                };
                slot.send(item);
            }
        });
        receiver
    }

    /// The next change of leader, or an error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future loses nothing: the next call reads the leader again.
    async fn next(&mut self) -> Result<Option<Leader>> {
        loop {
            if self.waits {
                self.wait().await;
            }
            self.waits = true;
            // The stream first, then the read: a change after the read is an event.
            if self.changes.is_none() && self.streams {
                let stream = self
                    .election
                    .client
                    .collection()
                    .watch()
                    .pipeline([bson::doc! { "$match": { "documentKey._id": &self.election.name } }])
                    .max_await_time(RECHECK)
                    .await;
                match stream {
                    Ok(stream) => self.changes = Some(stream),
                    Err(error)
                        if matches!(
                            *error.kind,
                            mongodb::error::ErrorKind::Command(ref e)
                                if e.code == CHANGE_STREAM_NOT_SUPPORTED
                        ) =>
                    {
                        self.streams = false;
                    }
                    Err(error) => return Err(Error::database(error, Effect::Read)),
                }
            }
            let leader = self.election.leader().await?;
            self.leader_ends = leader
                .as_ref()
                .and_then(|leader| leader.remaining)
                .and_then(|left| Instant::now().checked_add(left + Duration::from_millis(2)));
            let seen = leader
                .as_ref()
                .map(|leader| (leader.term, leader.value.clone()));
            if self.last.as_ref() != Some(&seen) {
                self.last = Some(seen);
                return Ok(leader);
            }
        }
    }

    /// Until a change of the election's document, the leader's lease's end, or the next
    /// re-check (a poll without change streams).
    async fn wait(&mut self) {
        let mut pause = if self.changes.is_some() {
            RECHECK
        } else {
            self.election.poll
        };
        if let Some(ends) = self.leader_ends {
            pause = pause.min(ends.saturating_duration_since(Instant::now()));
        }
        let Some(changes) = self.changes.as_mut() else {
            tokio::time::sleep(pause).await;
            return;
        };
        tokio::select! {
            event = changes.next() => {
                if !matches!(event, Some(Ok(_))) {
                    // Ended or failed: reopen before the next read.
                    self.changes = None;
                }
            }
            () = tokio::time::sleep(pause) => {}
        }
    }
}

impl run::Held for Leadership {
    fn lost(&self) -> impl Future<Output = LossReason> + Send {
        Leadership::lost(self)
    }

    fn state(&self) -> LeaseState {
        Leadership::state(self)
    }

    fn lost_error(&self, reason: LossReason) -> Error {
        crate::wait::lease_lost(self.guard().resource(), reason)
    }

    fn release(self) -> impl Future<Output = Result<()>> + Send {
        self.resign()
    }
}
