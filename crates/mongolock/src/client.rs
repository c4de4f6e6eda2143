//! [`LockClient`]: the handle every lock operation goes through, and its settings.
//!
//! Each method checks its arguments, then hands over to the one file in `command/` that
//! builds the command and reads the reply; [`Context`] sends it with the settings pinned.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bson::Document;
use mongodb::Collection;
use mongodb::options::WriteConcern;
use tokio_util::task::TaskTracker;

use crate::attempt::Attempt;
use crate::changes::Wakeups;
use crate::command::{self, Context, MAX_COMMAND_TIMEOUT};
use crate::error::{Error, Result};
use crate::lease::{Chore, Keeper};
use crate::lock::Grant;
use crate::places::Places;
use crate::query::{Filter, LockStatus, Purged};
use crate::request::{AcquireRequest, LockDetails};

/// How long an idle resource document is kept by default before the TTL index deletes it:
/// one day.
///
/// ```
/// assert_eq!(mongolock::DEFAULT_RETENTION.as_secs(), 86_400);
/// ```
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// How long one call may take by default before it fails with
/// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout): ten seconds, a repeated attempt
/// included.
///
/// ```
/// assert_eq!(mongolock::DEFAULT_COMMAND_TIMEOUT.as_secs(), 10);
/// ```
pub const DEFAULT_COMMAND_TIMEOUT: Duration = command::DEFAULT_COMMAND_TIMEOUT;

/// Locks stored in one MongoDB collection: one document per resource.
///
/// Cheap to clone (an `Arc`), `Send` and `Sync`, so background tasks can own one. Every
/// command goes to the primary, with the simple collation and a time limit, whatever the
/// settings of the driver's client, database or collection. Writes wait for a majority of
/// the replica set and the journal (`{w: "majority", j: true}`) unless you opt out with
/// [`unsafe_write_concern`](LockClientBuilder::unsafe_write_concern); reads use read
/// concern `majority` (`local` after such an opt-out, so that reads see this client's
/// writes).
///
/// **Share one client per process and collection.** Its clones share one lease keeper (one
/// renewal command per tick for all of its leases) and one change stream for its waiters.
/// Each separate client opens its own stream once one of its handles waits, and a change
/// stream's awaiting read holds a connection of the driver's pool: many separate clients on
/// one driver client can starve its pool (ten connections by default).
///
/// **A lock id belongs to one holder.** Use one per task or process that holds locks, and
/// never share it between processes: the server takes every call with a lock id as coming
/// from the same holder (acquiring again returns the existing lock, unlocking releases
/// every lock of the id).
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
    ctx: Arc<Context>,
    shared: Arc<Shared>,
}

/// What the clones of one client share: the lease keeper, the change stream that wakes
/// waiters, background tasks, and the turns of local waiters.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) keeper: Arc<Keeper>,
    /// Keeps the places of this client's waiters in their lines.
    pub(crate) places: Arc<Places>,
    pub(crate) wakeups: Wakeups,
    /// The unlocks whose copies may still land, which this client's attempts carry.
    pub(crate) unlocks: crate::unlocks::DoubtedUnlocks,
    tasks: TaskTracker,
    /// Cancelled by [`LockClient::shutdown`], which ends every election observer started
    /// before it (and closes its change stream); replaced then by a fresh one.
    observers: std::sync::Mutex<tokio_util::sync::CancellationToken>,
    gates: std::sync::Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Shared {
    fn new(ctx: &Arc<Context>) -> Self {
        let keeper = Arc::new(Keeper::new(ctx.clone()));
        Shared {
            wakeups: Wakeups::new(ctx.collection.clone(), keeper.id.clone()),
            keeper,
            places: Arc::new(Places::new(ctx.clone())),
            unlocks: crate::unlocks::DoubtedUnlocks::default(),
            tasks: TaskTracker::new(),
            observers: std::sync::Mutex::new(tokio_util::sync::CancellationToken::new()),
            gates: std::sync::Mutex::new(HashMap::new()),
        }
    }
}

/// The settings of a [`LockClient`], made with [`LockClient::builder`] and checked by
/// [`build`](LockClientBuilder::build), which makes one client: one lease keeper, one
/// change stream for its waiters, shared by all of its clones.
///
/// Every setting has a default, so `LockClient::builder(collection).build()` is
/// [`LockClient::new(collection)`](LockClient::new). One rule for every setting: a length
/// (the command time limit, the retention) must be more than zero, an allowance (the clock
/// uncertainty) may be zero, which means none; and a value outside a setting's range is
/// refused by `build` with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
/// naming the setting, before anything is sent.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// use std::time::Duration;
/// use mongolock::LockClient;
///
/// let locks = LockClient::builder(server.client().database("app").collection("locks"))
///     .command_timeout(Duration::from_secs(2))
///     .retention(Duration::from_secs(7 * 24 * 3600))
///     .clock_uncertainty(Duration::from_secs(1))
///     .build()?;
/// # let _ = locks;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder makes nothing until `build` is called"]
pub struct LockClientBuilder {
    collection: Collection<Document>,
    settings: Settings,
}

/// What a builder sets, apart from where the locks are: shared by the async builder and the
/// blocking one, which learns its collection only when it connects.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    write_concern: Option<WriteConcern>,
    retention: Duration,
    command_timeout: Duration,
    clock_uncertainty: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            write_concern: None,
            retention: DEFAULT_RETENTION,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            clock_uncertainty: Duration::ZERO,
        }
    }
}

impl Settings {
    pub(crate) fn unsafe_write_concern(&mut self, write_concern: WriteConcern) {
        self.write_concern = Some(write_concern);
    }

    pub(crate) fn retention(&mut self, retention: Duration) {
        self.retention = retention;
    }

    pub(crate) fn command_timeout(&mut self, limit: Duration) {
        self.command_timeout = limit;
    }

    pub(crate) fn clock_uncertainty(&mut self, uncertainty: Duration) {
        self.clock_uncertainty = uncertainty;
    }

    /// Checks every setting: a length must be positive, an allowance may be zero, and each
    /// must be within its range.
    pub(crate) fn check(&self) -> Result<()> {
        if self.command_timeout.is_zero() || self.command_timeout > MAX_COMMAND_TIMEOUT {
            return Err(Error::invalid(
                "command_timeout",
                format!(
                    "{:?} is outside 1 ms ..= {MAX_COMMAND_TIMEOUT:?} (maxTimeMS is an i32 of milliseconds)",
                    self.command_timeout
                ),
            ));
        }
        if self.retention < MIN_RETENTION || self.retention > MAX_RETENTION {
            return Err(Error::invalid(
                "retention",
                format!(
                    "{:?} is outside {MIN_RETENTION:?} ..= {MAX_RETENTION:?} (expireAfterSeconds is an i32 of seconds)",
                    self.retention
                ),
            ));
        }
        if self.clock_uncertainty > crate::MAX_TTL {
            return Err(Error::invalid(
                "clock_uncertainty",
                format!(
                    "{:?} is longer than any lease may be ({:?})",
                    self.clock_uncertainty,
                    crate::MAX_TTL
                ),
            ));
        }
        Ok(())
    }

    /// The client of these settings on `collection`, once they are checked.
    pub(crate) fn build(self, collection: Collection<Document>) -> Result<LockClient> {
        self.check()?;
        let mut ctx = Context::new(collection);
        if let Some(write_concern) = self.write_concern {
            ctx.write_concern = write_concern;
        }
        ctx.retention = self.retention;
        ctx.timeout = self.command_timeout;
        ctx.clock_uncertainty = self.clock_uncertainty;
        Ok(LockClient::from_context(ctx))
    }
}

/// The shortest retention: the TTL index counts in whole seconds.
const MIN_RETENTION: Duration = Duration::from_secs(1);
/// The longest retention: `expireAfterSeconds` is an `i32` (about 68 years).
const MAX_RETENTION: Duration = Duration::from_secs(i32::MAX as u64);

impl LockClientBuilder {
    /// Uses `write_concern` for every write instead of `{w: "majority", j: true}`. A `w` left
    /// unset stays `"majority"` (as the server's own default is since MongoDB 5.0), and a
    /// `j` left unset is the server's default; `w_timeout` is replaced by the call's time
    /// limit ([`command_timeout`](LockClientBuilder::command_timeout)). Reads use read
    /// concern `local` then, so that they see this client's writes.
    ///
    /// **This can break mutual exclusion.** A grant acknowledged by fewer than a majority can
    /// be rolled back when the primary fails over, and then the same lock is granted to a
    /// second holder while the first believes it still holds it. Use it only on a standalone
    /// server, in tests, or where a rare double grant is acceptable.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// use mongodb::options::WriteConcern;
    ///
    /// let locks = mongolock::LockClient::builder(server.client().database("app").collection("locks"))
    ///     .unsafe_write_concern(WriteConcern::nodes(1))
    ///     .build()?;
    /// # let _ = locks;
    /// # Ok(()) }
    /// ```
    pub fn unsafe_write_concern(mut self, write_concern: WriteConcern) -> Self {
        self.settings.unsafe_write_concern(write_concern);
        self
    }

    /// Keeps an idle resource document for `retention` (default [`DEFAULT_RETENTION`]) before
    /// the TTL index made by [`create_indexes`](LockClient::create_indexes) deletes it.
    ///
    /// Fencing tokens stay monotonic across that deletion as long as the server's clock never
    /// steps back by more than `retention`, so keep it long (hours, not seconds). From one
    /// second to `i32::MAX` seconds (about 68 years); [`build`](Self::build) refuses anything
    /// else, zero included.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// use std::time::Duration;
    /// let locks = mongolock::LockClient::builder(server.client().database("app").collection("locks"))
    ///     .retention(Duration::from_secs(7 * 24 * 3600))
    ///     .build()?;
    /// # let _ = locks;
    /// # Ok(()) }
    /// ```
    pub fn retention(mut self, retention: Duration) -> Self {
        self.settings.retention(retention);
        self
    }

    /// Covers forward steps of the server's clock up to `uncertainty`: every lease of this
    /// client ends that much earlier on its holder's side (its deadline is shortened by it,
    /// on top of its safety margin). Default: zero, none. At most [`MAX_TTL`](crate::MAX_TTL);
    /// [`build`](Self::build) refuses more.
    ///
    /// The server decides expiry by its own clock. If that clock steps forward (an NTP step
    /// on the primary, or a failover to a primary whose clock is ahead), a lease ends on the
    /// server earlier than its holder's deadline, which counts from the clock as it was. The
    /// client notices a step from the next reply that tells it the server's time (a write's
    /// `operationTime` on a replica set, a grant's `$$NOW`), and shortens every deadline by
    /// the step at once; a step that ends a lease before such a reply came (a step larger
    /// than the lease had left, between two renewals) is covered only by the safety margin
    /// plus this uncertainty. What is promised:
    ///
    /// - a step up to the safety margin plus `uncertainty` never lets a holder believe past
    ///   the server's expiry;
    /// - a larger step is noticed from the next reply that carries the server's time (at the
    ///   latest the lease's next renewal), and every deadline is shortened by it then;
    ///   between the step and that reply, a holder can believe in a lease the server has
    ///   ended, by up to the step less the margin and the uncertainty. An `operationTime`
    ///   is whole seconds: a step it shows is counted rounded up to the second it may have
    ///   left out, but one under about a second may show as less than it was (by up to a
    ///   second), which the margin and this uncertainty cover;
    /// - a step smaller than the TTL less the renewal period is harmless whatever its size:
    ///   the next renewal lands before the shortened lease ends.
    ///
    /// A lease whose TTL does not leave room for its margin, this uncertainty and its
    /// renewal period is refused by its acquire with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming
    /// `clock_uncertainty`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// use std::time::Duration;
    /// let locks = mongolock::LockClient::builder(server.client().database("app").collection("locks"))
    ///     .clock_uncertainty(Duration::from_secs(5))
    ///     .build()?;
    /// let guard = locks.mutex("job").ttl(Duration::from_secs(30)).acquire().await?;
    /// // 30 s, less the default margin (2 s) and the uncertainty (5 s).
    /// assert!(guard.time_left() <= Duration::from_secs(23));
    /// # guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn clock_uncertainty(mut self, uncertainty: Duration) -> Self {
        self.settings.clock_uncertainty(uncertainty);
        self
    }

    /// Bounds every call by `limit` (default [`DEFAULT_COMMAND_TIMEOUT`]): the server is
    /// told (`maxTimeMS`, and `wtimeout` for the write concern) and the client stops waiting
    /// when it passes. A call that times out fails with
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout); for a write its outcome is unknown
    /// ([`Error::is_outcome_unknown`]). Without a limit, a write waiting for a majority that
    /// is gone would wait forever.
    ///
    /// From one millisecond to `i32::MAX` milliseconds (about 24.8 days, the most
    /// `maxTimeMS` a server takes); [`build`](Self::build) refuses anything else, zero
    /// included.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// use std::time::Duration;
    /// let locks = mongolock::LockClient::builder(server.client().database("app").collection("locks"))
    ///     .command_timeout(Duration::from_secs(2))
    ///     .build()?;
    /// # let _ = locks;
    /// # Ok(()) }
    /// ```
    pub fn command_timeout(mut self, limit: Duration) -> Self {
        self.settings.command_timeout(limit);
        self
    }

    /// The client, once every setting is checked. Nothing is sent to the server until its
    /// first operation.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming the first
    /// setting outside its range: `command_timeout` (zero, or above `i32::MAX`
    /// milliseconds), `retention` (under a second, or above `i32::MAX` seconds) or
    /// `clock_uncertainty` (above [`MAX_TTL`](crate::MAX_TTL)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// use std::time::Duration;
    /// use mongolock::{ErrorKind, LockClient};
    ///
    /// let error = LockClient::builder(server.client().database("app").collection("locks"))
    ///     .command_timeout(Duration::ZERO)
    ///     .build()
    ///     .unwrap_err();
    /// assert!(matches!(error.kind(), ErrorKind::InvalidArgument { argument: "command_timeout", .. }));
    /// # }
    /// ```
    pub fn build(self) -> Result<LockClient> {
        self.settings.build(self.collection)
    }
}

impl LockClient {
    /// Locks stored in `collection` (for example `db.collection("locks")`), with majority,
    /// journaled writes, a command time limit of [`DEFAULT_COMMAND_TIMEOUT`] and a retention
    /// of [`DEFAULT_RETENTION`] for idle resource documents.
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
        Self::from_context(Context::new(collection))
    }

    /// Locks stored in `collection`, with settings of your choice: see
    /// [`LockClientBuilder`]. [`build`](LockClientBuilder::build) checks them and makes one
    /// client (one lease keeper, one change stream), whatever is set.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// use std::time::Duration;
    ///
    /// let locks = mongolock::LockClient::builder(server.client().database("app").collection("locks"))
    ///     .command_timeout(Duration::from_secs(2))
    ///     .build()?;
    /// # let _ = locks;
    /// # Ok(()) }
    /// ```
    pub fn builder(collection: Collection<Document>) -> LockClientBuilder {
        LockClientBuilder {
            collection,
            settings: Settings::default(),
        }
    }

    /// The client of the settings in `ctx`: a keeper and a change stream of its own.
    fn from_context(ctx: Context) -> Self {
        let ctx = Arc::new(ctx);
        LockClient {
            shared: Arc::new(Shared::new(&ctx)),
            ctx,
        }
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// How long one command may take, retries included.
    pub(crate) fn command_timeout(&self) -> Duration {
        self.ctx.timeout
    }

    /// What the replies tell of the server's clock (see [`crate::clock::ServerClock`]).
    pub(crate) fn server_clock(&self) -> &Arc<crate::clock::ServerClock> {
        &self.ctx.server_clock
    }

    /// How far the server's clock may step forward unnoticed (see
    /// [`LockClientBuilder::clock_uncertainty`]).
    pub(crate) fn clock_uncertainty(&self) -> Duration {
        self.ctx.clock_uncertainty
    }

    /// The turn-taking gate of the local waiters on `resource`.
    pub(crate) fn gate(&self, resource: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut gates = self.shared.gates.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gate) = gates.get(resource).and_then(Weak::upgrade) {
            return gate;
        }
        gates.retain(|_, gate| gate.strong_count() > 0);
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        gates.insert(resource.to_owned(), Arc::downgrade(&gate));
        gate
    }

    /// Sends `chore` (a release or a withdrawal that its owner cannot wait for) in the
    /// background, tracked so that [`shutdown`](LockClient::shutdown) waits for it. At most
    /// [`CHORES_AT_ONCE`](crate::lease::CHORES_AT_ONCE) chores are on their way at once, the keeper's retries included; the
    /// others wait for their turn. If it fails, or no tokio runtime runs here, the keeper
    /// retries it. The chore is owed until it is done, and waits in the keeper's queue until
    /// its task claims it: a task never polled (its runtime ended, or lives on undriven, as a
    /// current-thread runtime between two `block_on`s) leaves it there, where the next attempt
    /// of its lock id on its resource finds it and carries it out ([`Keeper::settle`]) instead
    /// of waiting for it for ever, and the keeper's chores task does after a command time
    /// limit. A task dropped midway queues it again ([`Owed`]).
    pub(crate) fn finish_in_background(&self, chore: Chore) {
        let keeper = self.shared.keeper.clone();
        // Owed from now on: the next attempt of its lock id on its resource waits for it.
        keeper.owe(&chore);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(
                resource = chore.resource(),
                "no runtime: the work is queued for the keeper"
            );
            keeper.retry_later(chore);
            return;
        };
        let ctx = self.ctx.clone();
        let turns = keeper.turns.clone();
        let id = keeper.queue_for_task(chore, ctx.timeout);
        let task = async move {
            // The semaphore is never closed, so a turn always comes.
            let _turn = turns.acquire_owned().await;
            // Sent already by an attempt of its lock id, or by the keeper, if gone.
            let Some(chore) = keeper.claim(id) else {
                return;
            };
            let mut owed = Owed {
                keeper,
                chore: Some(chore),
            };
            let chore = owed.chore.as_ref().expect("owed until paid here");
            match chore.run(&ctx).await {
                Ok(()) => {
                    tracing::debug!(resource = chore.resource(), "done in the background");
                    if let Some(chore) = owed.chore.take() {
                        owed.keeper.paid(&chore);
                    }
                }
                Err(error) => {
                    tracing::warn!(
                        %error,
                        resource = chore.resource(),
                        "failed in the background; the client keeps trying"
                    );
                    // Dropping `owed` queues it for the keeper.
                }
            }
        };
        self.shared.tasks.spawn_on(task, &runtime);
    }

    /// The token that [`LockClient::shutdown`] cancels to end the election observers started
    /// before it.
    pub(crate) fn observers_token(&self) -> tokio_util::sync::CancellationToken {
        let token = self.shared.observers.lock();
        token.unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops what this client runs in the background, so that the driver's client can shut
    /// down next. For every clone of this client, it
    ///
    /// 0. ends every stream of [`Election::observe`](crate::Election::observe) started
    ///    before it, and closes their change streams (each yields `None` from then on,
    ///    whether or not anybody polls it), then
    /// 1. sends the releases and withdrawals that dropped guards and dropped acquires left to
    ///    background tasks not started yet, and waits for those on their way, so that no lock
    ///    is left to its TTL (for one command time limit at most: a task whose runtime is no
    ///    longer driven is not waited for), then
    /// 2. tries once more, now, each release and withdrawal that failed earlier (one that
    ///    fails again stays queued for retries, and its lock ends with its TTL at the
    ///    latest), then
    /// 3. stops the change stream that wakes waiters (opened once a handle waited) and waits
    ///    until its cursor and session are dropped: the driver's `Client::shutdown` waits for
    ///    every live cursor and session.
    ///
    /// **It does not end leases still held.** A guard still held keeps its lock, and its
    /// lease is renewed for as long as the driver's client works; release guards before
    /// shutting down (`release().await`, or drop them: steps 1 and 2 see to those releases). A
    /// lease still held when the driver's client shuts down can no longer be renewed (the
    /// driver refuses every call after its shutdown): its guard is reported lost by its
    /// deadline, and the TTL frees the lock.
    ///
    /// The client stays usable until the driver's client is shut down: the next wait opens a
    /// new change stream. A waiter still waiting when the stream stops is not left hanging:
    /// it looks again at once, then retries with backoff, as on a server without change
    /// streams, until a new wait of this client reopens the stream.
    ///
    /// It does not shut the driver's client down, which the application owns. **Either order
    /// works**, before the runtime ends:
    ///
    /// - `locks.shutdown().await; client.shutdown().await;` (as in the example below) sends
    ///   what dropped guards left to the background first, and the driver's shutdown returns
    ///   at once;
    /// - `client.shutdown().await; locks.shutdown().await;` works too, but what was left to
    ///   the background can no longer be sent (those locks end with their TTL), and the
    ///   driver's shutdown waits until this client's waiters are done, its change stream has
    ///   closed on its own (two seconds after the last waiter left: the stream closes once
    ///   nobody waits), and every [`Election::observe`](crate::Election::observe) stream is
    ///   dropped. It waits for any cursor or session still alive, so this client must not
    ///   open a new one meanwhile.
    ///
    /// A driver client dropped while its runtime shuts down can panic in a background task
    /// of the driver (mongodb 3.x: its session cleanup finds the connection pool gone):
    /// shut it down before the runtime ends.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops waiting; calling it again finishes the job. Background
    /// releases go on either way, and the retry queue keeps what step 2 did not finish.
    /// Dropped in step 1 or 2, the change stream is left open; dropped in step 3, the stream
    /// still closes, only nobody waits for it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let client = server.new_client();
    /// # let locks = mongolock::LockClient::new(client.database("doc").collection("locks"));
    /// drop(locks.mutex("job").acquire().await?); // released in the background
    /// locks.shutdown().await; // waits for that release, closes the change stream
    /// client.shutdown().await; // then the driver's client
    /// # let after = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// # assert!(after.status(&mongolock::Filter::default()).await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) {
        // The election observers first: their tasks end, and their streams with them.
        let observers = std::mem::take(
            &mut *self
                .shared
                .observers
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        observers.cancel();
        self.shared.tasks.close();
        // What background tasks have not taken yet goes now, here: a task whose runtime is
        // no longer driven would never take it. Those on their way are waited for, no
        // longer than a command may take.
        self.shared.keeper.flush().await;
        let _ = tokio::time::timeout(self.ctx.timeout, self.shared.tasks.wait()).await;
        self.shared.tasks.reopen();
        // Releases and withdrawals that failed in the background get one more try now.
        self.shared.keeper.flush().await;
        // Last, so that a stream started meanwhile is stopped too.
        self.shared.wakeups.stop().await;
    }

    /// The number of leases this client keeps alive.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let guard = locks.mutex("job").acquire().await?;
    /// assert_eq!(locks.leases(), 1);
    /// guard.release().await?;
    /// assert_eq!(locks.leases(), 0);
    /// # Ok(()) }
    /// ```
    pub fn leases(&self) -> usize {
        self.shared.keeper.len()
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
        &self.ctx.collection
    }

    /// Checks the settings every call depends on.
    pub(crate) fn ready(&self) -> Result<&Context> {
        self.ctx.ready()
    }

    /// Checks that the server runs this crate's commands: one pipeline update with `$$NOW`
    /// that matches no document (it writes nothing). The first operation of a client finds
    /// out anyway; this lets a tool or a service say so before it does anything else.
    /// [`create_indexes`](LockClient::create_indexes) does it too.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::UnsupportedServer`](crate::ErrorKind::UnsupportedServer) on a server older
    /// than MongoDB 4.4 or without pipeline updates and `$$NOW`;
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) for the server's or the network's
    /// failures.
    ///
    /// # Cancel safety
    ///
    /// It writes nothing: dropping the future has no effect.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// locks.check_server().await?;
    /// # Ok(()) }
    /// ```
    pub async fn check_server(&self) -> Result<()> {
        command::compat::check(self.ready()?).await
    }

    /// Creates the indexes the lock commands use, and the TTL index that deletes idle resource
    /// documents after the retention period. Idempotent: call it at start-up. Two round trips:
    /// the [`check_server`](LockClient::check_server) `update` (it matches nothing), then one
    /// `createIndexes`.
    ///
    /// Changing the retention of an existing collection fails (the server refuses a TTL index
    /// that differs only in its options); drop the index `idleSince_ttl` first.
    ///
    /// # Errors
    ///
    /// A database error, such as the server refusing to change the retention of an existing
    /// TTL index; [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) for the server's or the network's
    /// failures ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown) says whether a write may have
    /// been applied).
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
        command::indexes::run(self.ready()?).await
    }

    /// Takes an exclusive lock on `resource` for the holder `lock_id`, in one round trip.
    ///
    /// Granted when no live lock of any kind is on the resource; expired locks never stand in
    /// the way. If `lock_id` already holds the resource exclusively, the existing grant is
    /// returned unchanged (same token, same expiry; [`Grant::is_new`] is false).
    ///
    /// Repeating a call whose outcome was unknown is safe: such a call withdraws its attempt in
    /// the background (its lock removed if it was granted, a late copy of it refused), and the
    /// repeated call waits for that withdrawal, then is granted anew or refused as usual (see
    /// [Unknown outcomes and late copies](crate#unknown-outcomes-and-late-copies)).
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::AlreadyLocked`](crate::ErrorKind::AlreadyLocked) with the holders and
    ///   how long their leases have left;
    /// - [`ErrorKind::HeldWithOtherKind`](crate::ErrorKind::HeldWithOtherKind) when `lock_id`
    ///   holds the resource shared (locks are not upgraded);
    /// - [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for an empty or
    ///   over-long resource or lock id, or a TTL of zero or above [`MAX_TTL`](crate::MAX_TTL);
    /// - [`ErrorKind::UnexpectedDocument`](crate::ErrorKind::UnexpectedDocument) when the
    ///   resource's document is not a lock document;
    /// - [`ErrorKind::Sealed`](crate::ErrorKind::Sealed) when the resource refuses new
    ///   attempts until the time it names;
    /// - [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    ///   [`ErrorKind::Database`](crate::ErrorKind::Database), where
    ///   [`Error::is_outcome_unknown`] says whether the lock may have been granted.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the command was sent, the attempt is withdrawn in the
    /// background, as after an unknown outcome: a lock it was granted is removed, and a late
    /// copy of it is refused. The client's next attempt of `lock_id` on `resource` waits for
    /// that withdrawal.
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
        self.attempt_once(&request).await?.into_result()
    }

    /// Takes a shared lock on `resource` for the holder `lock_id`, in one round trip.
    ///
    /// Granted when no live exclusive lock is on the resource and fewer than `max` live shared
    /// locks are (`None`: no cap). The first shared grant stores the cap with the shared entries,
    /// and a later request with another cap is refused while any shared entry is live
    /// ([`ErrorKind::CapMismatch`](crate::ErrorKind::CapMismatch)); the stored cap is cleared
    /// when the last shared entry goes. If `lock_id` already holds the resource shared,
    /// the existing grant is returned unchanged, whatever the cap.
    ///
    /// # Errors
    ///
    /// As [`xlock`](LockClient::xlock) (with `HeldWithOtherKind` when `lock_id` holds the
    /// resource exclusively), and `InvalidArgument` for a cap of zero.
    ///
    /// # Cancel safety
    ///
    /// As [`xlock`](LockClient::xlock): a dropped call's attempt is withdrawn in the
    /// background, and the next attempt of `lock_id` on `resource` waits for that.
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
        self.attempt_once(&request).await?.into_result()
    }

    /// Sends one acquire attempt and reports every outcome as a value (see [`Attempt`]):
    /// granted to this attempt, already held by this lock id, held by it with the other kind,
    /// contended (with the holders and how long their leases have left, computed by the
    /// server), refused by a shared lock's different cap, withdrawn, or sealed (the resource
    /// refuses new attempts for a while). One round trip. This is what [`xlock`](LockClient::xlock) and
    /// [`slock`](LockClient::slock) call; waiting and leases are built on it.
    ///
    /// # Errors
    ///
    /// Only what no outcome can say: `InvalidArgument` for a bad request (nothing is sent),
    /// `UnexpectedDocument` when the resource's document is not a lock document, and
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) for the server's or the network's
    /// failures ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown) says whether a write may have
    /// been applied). A refusal is an [`Attempt`], not an error. Also a retryable `Timeout`,
    /// with nothing sent, when a release of an earlier grant of the lock id that this client
    /// owes (from a dropped guard or call) is still on its way in a task that has not
    /// finished it within the command time limit: the attempt waits for it, since it could
    /// otherwise land later and end what this attempt is granted.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the command was sent, the attempt may have been
    /// granted with nobody told. Resolve it with the same request: sending it again reports
    /// [`Attempt::Granted`] if the first got through, and
    /// [`release_attempt`](LockClient::release_attempt) withdraws it for good. End an attempt
    /// whose outcome was ever unknown with `release_attempt`, not
    /// [`release`](LockClient::release) or [`unlock`](LockClient::unlock), which leave a late
    /// copy of it grantable (see
    /// [Unknown outcomes and late copies](crate#unknown-outcomes-and-late-copies)). Before it
    /// is sent, an attempt waits for the releases and withdrawals this client still owes for
    /// its lock id on its resource; dropped then, nothing was sent.
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
        let ctx = self.ready()?;
        request.validate()?;
        // A release or withdrawal this client still owes for the lock id on the resource
        // goes first: landing later, it would remove what this attempt is granted. One that
        // another task took and has not finished within the call's time limit (its task
        // stopped being polled midway) is not waited for past it.
        self.shared.keeper.resume_chores();
        let settled = (self.shared.keeper).settle(&request.resource, &request.lock_id);
        tokio::time::timeout(ctx.timeout, settled)
            .await
            .map_err(|_| Error::still_owed(ctx.timeout))??;
        // The unlocks of the lock id that may still land leave what this grants.
        let after_unlocks = self.shared.unlocks.of(&request.lock_id)?;
        command::acquire::run(ctx, request, &after_unlocks).await
    }

    /// One attempt of `request` for [`xlock`](LockClient::xlock) and
    /// [`slock`](LockClient::slock), whose callers repeat a call, not a nonce: if its outcome
    /// is unknown (it failed after it was sent, or the future was dropped meanwhile), the
    /// attempt is withdrawn in the background, and the caller's next attempt of the lock id
    /// on the resource waits for that withdrawal. A late copy of it is then refused.
    async fn attempt_once(&self, request: &AcquireRequest) -> Result<Attempt> {
        // Nobody was handed its grant: no minimum hold is owed.
        let mut unsettled = Unsettled(Some((self, request, command::release::Hold::Waived)));
        let outcome = self.acquire(request).await;
        if !matches!(&outcome, Err(error) if error.is_outcome_unknown()) {
            unsettled.0 = None;
        }
        outcome
    }

    /// Releases every lock of `lock_id` (on every resource, of both kinds, expired ones
    /// included) and returns how many it released. One round trip: an `update` of every
    /// document where the lock id holds an entry, found by index, that removes its entries;
    /// the server decides what goes, so a lock the client never saw is released too.
    /// Releasing nothing is not an error. Another application's document (one without the
    /// mark, `mongolock: 1`, that every write sets) is left alone and not counted
    /// ([`status`](LockClient::status) reports it).
    ///
    /// A copy of the call that reaches the server late leaves what this client was granted
    /// under `lock_id` after the call was sent: its attempts of the lock id name every
    /// `unlock` of it whose copies may still land, for five minutes after one had an unknown
    /// outcome (see [Unknown outcomes and late copies](crate#unknown-outcomes-and-late-copies)).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for an empty or over-long lock id (and, from the attempts of the
    /// lock id, when more than 16 of its unlocks are in flight or had unknown outcomes in
    /// those five minutes); [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) for the server's or the network's
    /// failures ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown) says whether a write may have
    /// been applied).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, all, some or none of the locks may have been released;
    /// calling again releases the rest. A dropped call counts as one whose outcome is
    /// unknown.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use mongolock::LockDetails;
    ///
    /// locks.xlock("a", "batch-9", LockDetails::default()).await?;
    /// locks.slock("b", "batch-9", LockDetails::default(), None).await?;
    /// assert_eq!(locks.unlock("batch-9").await?, 2);
    /// assert_eq!(locks.unlock("batch-9").await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn unlock(&self, lock_id: &str) -> Result<u64> {
        let ctx = self.ready()?;
        crate::request::check_id("lock_id", lock_id)?;
        // Doubted from before it is sent (a dropped future leaves it so) until every copy is
        // answered: this client's grants of the lock id meanwhile are left by its late copies.
        let unlocking = self.shared.unlocks.sending(lock_id, ctx.timeout);
        match command::release::unlock(ctx, lock_id, unlocking.op()).await {
            Ok((released, doubted)) => {
                if !doubted {
                    unlocking.settled();
                }
                Ok(released)
            }
            Err(error) => {
                if !error.is_outcome_unknown() {
                    unlocking.settled();
                }
                Err(error)
            }
        }
    }

    /// Releases one grant (its resource, lock id and token), leaving the other locks of its
    /// lock id alone. One round trip. Returns whether this call removed it (false when it was
    /// already released, purged, or cleared after expiring).
    ///
    /// It leaves the attempt that was granted usable: if that attempt's outcome was ever
    /// unknown, a late copy of it could take the lock again. End such a grant with
    /// [`release_attempt`](LockClient::release_attempt) and the request instead.
    ///
    /// # Errors
    ///
    /// `UnexpectedDocument` when the grant's entry was changed by hand into another shape;
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) for the server's or the network's
    /// failures ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown) says whether a write may have
    /// been applied).
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
        Ok(self.release_grant(grant, false).await?.removed)
    }

    /// Releases one grant, saying whether it was still live when removed; with `retire`, its
    /// attempt is retired too (a tombstone for its nonce).
    pub(crate) async fn release_grant(
        &self,
        grant: &Grant,
        retire: bool,
    ) -> Result<command::release::Released> {
        command::release::release(self.ready()?, grant, retire).await
    }

    /// Withdraws an attempt for good: releases the lock `request` created if this very
    /// attempt (its nonce) was granted, and leaves a tombstone so that the attempt is never
    /// granted afterwards, even if a copy of it still reaches the server late. A grant the
    /// lock id held from another attempt is left alone. One round trip. Returns whether this
    /// call removed a lock.
    ///
    /// This resolves an attempt whose outcome is unknown (its future was dropped, its
    /// connection failed) without knowing the fencing token it may have been given. The
    /// tombstone lasts the request's TTL, and at least five minutes. A grant with a
    /// [minimum hold](crate::LockDetails::min_hold) is let go of as a release lets go of it:
    /// within its hold, it stays in force until the hold ends (the caller may have worked
    /// under it).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad request (nothing is sent); [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) for the server's or the network's
    /// failures ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown) says whether a write may have
    /// been applied).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the attempt may or may not have been withdrawn; calling
    /// again is harmless. A call that fails with an unknown outcome leaves the withdrawal
    /// owed: the client sends it again in the background, and before any later attempt of
    /// the lock id on the resource, so that a late copy of it never ends what that attempt
    /// is answered with.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use mongolock::{AcquireRequest, Attempt, LockDetails};
    ///
    /// let request = AcquireRequest::exclusive("a", "job", LockDetails::default());
    /// let attempt = locks.acquire(&request); // suppose this future gets dropped mid-flight
    /// # let _ = attempt.await?;
    /// assert!(locks.release_attempt(&request).await?, "it had been granted");
    /// assert!(!locks.release_attempt(&request).await?);
    /// // A late copy of the attempt is refused.
    /// assert_eq!(locks.acquire(&request).await?, Attempt::Withdrawn);
    /// # Ok(()) }
    /// ```
    pub async fn release_attempt(&self, request: &AcquireRequest) -> Result<bool> {
        let hold = command::release::Hold::Kept;
        // Of unknown outcome (or dropped), a copy may still land after a later attempt of the
        // lock id was answered with the grant it withdraws: the withdrawal is owed then.
        let mut unsettled = Unsettled(Some((self, request, hold)));
        let outcome = command::release::release_attempt(self.ready()?, request, hold).await;
        if !matches!(&outcome, Err(error) if error.is_outcome_unknown()) {
            unsettled.0 = None;
        }
        outcome
    }

    /// Withdraws an attempt whose grant, if any, nobody was handed (see
    /// [`release_attempt`](Self::release_attempt)): its minimum hold is not kept.
    pub(crate) async fn withdraw_unused(&self, request: &AcquireRequest) -> Result<bool> {
        command::release::release_attempt(self.ready()?, request, command::release::Hold::Waived)
            .await
    }

    /// Renews every live lock of `lock_id`: each expires `ttl` after now, by the server's
    /// clock. Returns how many it renewed. One round trip: an `update` of every document where
    /// the lock id holds a live entry, found by index.
    ///
    /// An expired lock is never revived (it is not counted; its holder must acquire again
    /// and gets a new token). A lock without TTL stays without TTL (it is counted). Locks of
    /// `lock_id` on other resources are renewed in the same command.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for an empty or over-long lock id, or a TTL of zero or above
    /// [`MAX_TTL`](crate::MAX_TTL); [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) for the server's or the network's
    /// failures ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown) says whether a write may have
    /// been applied).
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
    /// use mongolock::{Filter, LockDetails};
    ///
    /// locks.xlock("a", "lease-1", LockDetails::default().ttl(Duration::from_secs(10))).await?;
    /// assert_eq!(locks.renew("lease-1", Duration::from_secs(60)).await?, 1);
    /// let held = locks.status(&Filter::default().lock_id("lease-1")).await?;
    /// assert!(held[0].ttl_remaining().unwrap() > Duration::from_secs(10));
    /// # Ok(()) }
    /// ```
    pub async fn renew(&self, lock_id: &str, ttl: Duration) -> Result<u64> {
        command::renew_group::run(self.ready()?, lock_id, ttl).await
    }

    /// Lists the locks matching `filter`, with their remaining TTL computed by the server,
    /// newest first. Expired locks not cleared yet are included (see
    /// [`LockStatus::is_expired`]). One round trip.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad filter; `UnexpectedDocument` when a matching document is not
    /// a lock document; [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) for the server's or the network's
    /// failures ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown) says whether a write may have
    /// been applied).
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
        command::status::run(self.ready()?, filter).await
    }

    /// Breaks every lock on `resource`, whoever holds it, and returns how many it removed.
    /// For operators: a lock left by a dead holder without a TTL, or a holder that must be
    /// stopped. One round trip. The fencing counter is kept, so the next grant's token is
    /// still higher than every earlier one.
    ///
    /// A holder using a lease ([`LockGuard`](crate::LockGuard)) learns at its next renewal
    /// that its lease is gone and reports it as lost. A low-level holder learns it from
    /// [`renew`](LockClient::renew) (which renews nothing) or from its fencing token being
    /// refused downstream.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for an empty or over-long resource; `UnexpectedDocument` when its
    /// document is not a lock document (it is left as it is); [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) for the server's or the network's
    /// failures ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown) says whether a write may have
    /// been applied).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the locks may or may not have been removed; calling again
    /// is harmless.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use mongolock::LockDetails;
    ///
    /// let dead = locks.xlock("migration", "host-that-died", LockDetails::default()).await?;
    /// assert_eq!(locks.force_release("migration").await?, 1);
    /// let next = locks.xlock("migration", "operator", LockDetails::default()).await?;
    /// assert!(next.fencing_token() > dead.fencing_token());
    /// # Ok(()) }
    /// ```
    pub async fn force_release(&self, resource: &str) -> Result<u64> {
        command::release::force_release(self.ready()?, resource).await
    }

    /// Removes every expired lock, and nothing else: a live lease is never ended by a purge.
    /// One round trip (an `update` that scans the collection; the server judges expiry by
    /// its clock inside the write). Expired locks block nobody already; purging keeps the
    /// collection and its status reports tidy.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) for the server's or the network's
    /// failures ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown) says whether a write may have
    /// been applied).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, all, some or none of the expired locks may have been
    /// removed; calling again removes the rest.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("app").collection("locks"));
    /// use std::time::Duration;
    /// use mongolock::{Filter, LockDetails};
    ///
    /// locks.xlock("a", "g", LockDetails::default().ttl(Duration::from_secs(1))).await?;
    /// locks.xlock("b", "g", LockDetails::default()).await?;
    /// server.clock().advance(Duration::from_secs(2));
    /// assert_eq!(locks.purge().await?.resources(), 1, "the expired lock only");
    /// assert_eq!(locks.status(&Filter::default()).await?.len(), 1, "b is still held");
    /// # Ok(()) }
    /// ```
    pub async fn purge(&self) -> Result<Purged> {
        command::purge::run(self.ready()?).await
    }

    /// Removes every expired lock and, for each lock id with an expired lock, the locks of
    /// that lock id that existed when it expired: the group is taken as abandoned, as the Go
    /// library this API follows does.
    ///
    /// **This ends live leases without warning their holders** (each learns it at its next
    /// renewal, as [`LossReason::Revoked`](crate::LossReason::Revoked)). A holder still renewing
    /// another lock of the group loses it, and another holder can take it while the first
    /// still believes it holds it. Use it only where a group is known to be all-or-nothing;
    /// [`purge`](LockClient::purge) is the safe call. A lock granted to the lock id after its
    /// member expired survives: the server compares grant times inside the write. Two round
    /// trips (one read, one `update`; one more per further 1,000 groups).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) and
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) for the server's or the network's
    /// failures ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown) says whether a write may have
    /// been applied).
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
    /// use mongolock::{Filter, LockDetails};
    ///
    /// locks.xlock("a", "g", LockDetails::default().ttl(Duration::from_secs(1))).await?;
    /// locks.xlock("b", "g", LockDetails::default()).await?;
    /// server.clock().advance(Duration::from_secs(2));
    /// let purged = locks.purge_abandoned_groups().await?;
    /// assert_eq!(purged.lock_ids(), ["g"]);
    /// assert!(locks.status(&Filter::default()).await?.is_empty(), "b went with its group");
    /// # Ok(()) }
    /// ```
    pub async fn purge_abandoned_groups(&self) -> Result<Purged> {
        command::purge::run_groups(self.ready()?).await
    }
}

/// A chore a background task of [`LockClient::finish_in_background`] claimed and owes:
/// dropped before the task paid it (the chore failed, or the task was dropped midway, its
/// runtime ended), it is queued for the keeper's retries, still owed. Without it, a task
/// dropped with its runtime would leave a debt nobody pays, and every later attempt of its
/// lock id on its resource would wait for it for ever.
struct Owed {
    keeper: Arc<Keeper>,
    chore: Option<Chore>,
}

impl Drop for Owed {
    fn drop(&mut self) {
        if let Some(chore) = self.chore.take() {
            self.keeper.retry_later(chore);
        }
    }
}

/// An attempt of [`LockClient::attempt_once`], or a withdrawal of
/// [`LockClient::release_attempt`], whose outcome is not known yet: dropped so, it withdraws
/// the attempt in the background (with what to do with a grant's minimum hold), owed until
/// then: the client's next attempt of the lock id on the resource sends it first
/// (`Keeper::settle`), so that a late copy never ends what that attempt is answered with.
struct Unsettled<'a>(Option<(&'a LockClient, &'a AcquireRequest, command::release::Hold)>);

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if let Some((client, request, hold)) = self.0.take() {
            client.finish_in_background(Chore::Withdraw(request.clone(), hold));
        }
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
        let ctx = crate::command::test_context();
        let locks = LockClient {
            shared: Arc::new(Shared::new(&Arc::new(ctx.clone()))),
            ctx: Arc::new(ctx),
        };
        let request = AcquireRequest::exclusive("r", "l", LockDetails::default());
        assert_send(&locks.xlock("r", "l", LockDetails::default()));
        assert_send(&locks.slock("r", "l", LockDetails::default(), None));
        assert_send(&locks.acquire(&request));
        assert_send(&locks.release_attempt(&request));
        assert_send(&locks.unlock("l"));
        assert_send(&locks.renew("l", Duration::from_secs(1)));
        assert_send(&locks.status(&Filter::default()));
        assert_send(&locks.purge());
        assert_send(&locks.purge_abandoned_groups());
        assert_send(&locks.create_indexes());
    }
}
