//! The handles: [`Mutex`], [`RwLock`] and [`Semaphore`], made by
//! [`LockClient::mutex`], [`LockClient::rwlock`] and [`LockClient::semaphore`]. Each is a
//! cheap description of what to lock; every acquire returns a [`LockGuard`] holding a lease
//! of its own, with its own random lock id.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::lock::LockKind;
use crate::query::{Filter, LockStatus};
use crate::request::AcquireRequest;
use crate::wait::{self, LeaseOptions, LeaseTiming, Wait};

/// The handles are made by the lock client.
impl LockClient {
    /// A mutex on `resource`: one holder at a time, with a lease kept alive in the
    /// background. See [`Mutex`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let guard = locks.mutex("nightly-report").acquire().await?;
    /// // ... work, passing guard.fencing_token() to the store ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn mutex(&self, resource: impl Into<String>) -> Mutex {
        Mutex::new(self.clone(), resource.into())
    }

    /// A reader-writer lock on `resource`: many readers or one writer, writers first. See
    /// [`RwLock`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let reading = locks.rwlock("config").read().await?;
    /// # drop(reading);
    /// # Ok(()) }
    /// ```
    pub fn rwlock(&self, resource: impl Into<String>) -> RwLock {
        RwLock::new(self.clone(), resource.into())
    }

    /// A semaphore on `resource` with `permits` permits. See [`Semaphore`]. Zero permits
    /// is refused by the first acquire.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let permit = locks.semaphore("gpu", 4).acquire().await?;
    /// # drop(permit);
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, resource: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(self.clone(), resource.into(), permits)
    }
}

/// The lease settings every handle has, as builder methods.
macro_rules! lease_settings {
    () => {
        /// The lease's TTL (default thirty seconds, at least 50 ms): how long the lock
        /// outlives its holder if the holder dies. The lease is renewed in the background
        /// every third of it.
        pub fn ttl(mut self, ttl: Duration) -> Self {
            self.options.details = self.options.details.ttl(ttl);
            self
        }

        /// After a lease that ends without a release (its TTL ran out, or an operator
        /// revoked it with a force release), nobody is granted the lock for `delay` more,
        /// by the server's clock: a holder that was only slow cannot race its successor
        /// (Chubby's and Consul's lock-delay). A release frees it at once. Default: none.
        /// After an operator's force release, a revoked holder is covered only by a delay of
        /// at least its renewal period plus two renewal time limits (the TTL with the
        /// default period; at least the TTL if it cannot reach the server): see
        /// [`LockDetails::lock_delay`](crate::LockDetails::lock_delay).
        pub fn lock_delay(mut self, delay: Duration) -> Self {
            self.options.details = self.options.details.lock_delay(delay);
            self
        }

        /// A holder that lets go within `min_hold` of its grant keeps its lock in force
        /// until then, by the server's clock (a mutex or a writer: from everybody; a reader
        /// or a permit: its share): a job that must run at most once per period across
        /// hosts (ShedLock's `lockAtLeastFor`). Default: none. See
        /// [`LockDetails::min_hold`](crate::LockDetails::min_hold).
        pub fn min_hold(mut self, min_hold: Duration) -> Self {
            self.options.details = self.options.details.min_hold(min_hold);
            self
        }

        /// Renews the lease this often instead of every third of the TTL. Must be at least
        /// 10 ms (a shorter period would be a renewal storm) and shorter than the TTL less
        /// the safety margin; otherwise acquiring fails with
        /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument).
        pub fn extend_every(mut self, every: Duration) -> Self {
            self.options.every = Some(every);
            self
        }

        /// How much earlier than the server the guard counts its lease as lost (default a
        /// tenth of the TTL, at most two seconds). It covers the difference between this
        /// machine's and the server's clock rates, and leaves the holder time to stop. Must be
        /// shorter than the TTL; otherwise acquiring fails with
        /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument).
        pub fn safety_margin(mut self, margin: Duration) -> Self {
            self.options.margin = Some(margin);
            self
        }

        /// A label stored with the lock, shown by status queries (for example the job or the
        /// host).
        pub fn owner(mut self, owner: impl Into<String>) -> Self {
            self.options.details = self.options.details.owner(owner);
            self
        }

        /// The host recorded with the lock, shown by status queries (default: this
        /// machine's host name, see [`LockDetails::host_value`](crate::LockDetails::host_value)).
        pub fn host(mut self, host: impl Into<String>) -> Self {
            self.options.details = self.options.details.host(host);
            self
        }

        /// Holds the lock with this lock id instead of a random one. A lock id belongs to one
        /// holder: never give two guards, or two live processes, the same one.
        ///
        /// A lock id taken from the process's own persistent identity lets it **resume after
        /// a restart**: when the lock id holds the lock already, granted to another client
        /// (this process before it died), acquiring gets that lease back at once, with its
        /// fencing token and what is left of its TTL, instead of waiting for the TTL. The
        /// lease is adopted first: its entry names this client's keeper from then on, so a
        /// client that held it before (still alive after all) finds it gone at its next
        /// renewal and reports it lost ([`LossReason::Revoked`](crate::LossReason::Revoked)).
        /// The TTL must be the one the lease was granted with, else acquiring fails with
        /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `ttl`; a
        /// second guard in the same client fails naming `lock_id`. A lease that ended (within
        /// its lock-delay, say) is not resumed. An adoption that fails on the way (a lost
        /// connection) is tried again as any failed attempt is, while the call may wait;
        /// `try_acquire` returns the error.
        ///
        /// The server cannot tell two processes with one lock id apart: that is what lets a
        /// restarted process resume. If the first is still alive after all (it was paused or
        /// cut off, not dead), both believe they hold the lock, with the same fencing token,
        /// until the first learns it lost it at its next renewal (within its renewal period,
        /// or its lease's deadline if the server is out of its reach). Resume only from an
        /// identity that one live process has at a time (a host's, a pod's, under a
        /// supervisor that starts one), or leave the lock id unset.
        pub fn lock_id(mut self, lock_id: impl Into<String>) -> Self {
            self.options.lock_id = Some(lock_id.into());
            self
        }
    };
}

pub(crate) use lease_settings;

/// `holders`, for every handle.
macro_rules! holders_method {
    () => {
        /// Who holds the resource now: its locks whose lease is held, of either kind
        /// (newest first), as the server answered. A lock only in force (a lease that ended
        /// and sits in its lock-delay, or was let go of within its minimum hold) is held by
        /// nobody and is left out, as expired ones are: [`LockClient::status`] lists those
        /// too. One read; what it says may change at once.
        ///
        /// # Errors
        ///
        /// As [`LockClient::status`].
        ///
        /// # Cancel safety
        ///
        /// It only reads: dropping the future changes nothing.
        pub async fn holders(&self) -> Result<Vec<LockStatus>> {
            let filter = Filter::default().resource(self.resource.clone());
            let mut held = self.client.status(&filter).await?;
            held.retain(|lock| !lock.is_expired());
            Ok(held)
        }
    };
}

/// The three ways to acquire, for one kind of lock.
macro_rules! acquire_methods {
    ($acquire:ident, $try_acquire:ident, $acquire_timeout:ident, $request:ident, $what:literal) => {
        #[doc = concat!("Waits as long as needed for ", $what, ", and returns its guard.")]
        ///
        /// # Errors
        ///
        /// Bad settings ([`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)),
        /// a database error that waiting cannot fix, a stored cap that differs
        /// ([`ErrorKind::CapMismatch`](crate::ErrorKind::CapMismatch)), or a resource
        /// sealed against late copies ([`ErrorKind::Sealed`](crate::ErrorKind::Sealed), with
        /// when the seal ends: it is not waited out). Transient errors are retried.
        ///
        /// # Cancel safety
        ///
        /// Dropping the future at any point leaves no lock held: an attempt in flight is
        /// withdrawn in the background ([`LockClient::shutdown`] waits for that).
        pub async fn $acquire(&self) -> Result<LockGuard> {
            let (request, timing) = self.$request()?;
            let guard = wait::acquire(&self.client, request, timing, Wait::Forever).await?;
            Ok(guard.expect("waiting forever returns a guard or an error"))
        }

        #[doc = concat!("One attempt at ", $what, ": `None` if others hold it.")]
        ///
        /// # Errors
        ///
        #[doc = concat!("As [`", stringify!($acquire), "`](Self::", stringify!($acquire), "), and transient errors: after one, the attempt is sent once more at once (each copy within the command time limit), and a second one is returned.")]
        ///
        /// # Cancel safety
        ///
        #[doc = concat!("As [`", stringify!($acquire), "`](Self::", stringify!($acquire), ").")]
        pub async fn $try_acquire(&self) -> Result<Option<LockGuard>> {
            let (request, timing) = self.$request()?;
            wait::acquire(&self.client, request, timing, Wait::Once).await
        }

        #[doc = concat!("Waits up to `timeout` for ", $what, ": `None` if the wait gave up.")]
        /// A `timeout` too long for the clock (such as `Duration::MAX`) waits as long as
        /// needed. The first attempt is made to the end, whatever the timeout (zero
        /// included: one attempt, as `try_` makes), within the command time limit; after
        /// it the call returns at its timeout even with a later attempt still on its way (a
        /// slow network, a busy server): that attempt is then withdrawn in the background,
        /// so a grant that comes after the call gave up holds nothing.
        ///
        /// # Errors
        ///
        #[doc = concat!("As [`", stringify!($acquire), "`](Self::", stringify!($acquire), ").")]
        ///
        /// # Cancel safety
        ///
        #[doc = concat!("As [`", stringify!($acquire), "`](Self::", stringify!($acquire), ").")]
        pub async fn $acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
            // A timeout past what the clock can represent is a wait without end.
            let how_long = Instant::now()
                .checked_add(timeout)
                .map_or(Wait::Forever, Wait::Until);
            let (request, timing) = self.$request()?;
            wait::acquire(&self.client, request, timing, how_long).await
        }
    };
}

/// A distributed mutex: one holder at a time. Made by [`LockClient::mutex`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use std::time::Duration;
///
/// let report = locks.mutex("nightly-report").ttl(Duration::from_secs(30)).owner("cron@host-a");
/// let guard = report.acquire().await?;
/// assert!(report.try_acquire().await?.is_none(), "held");
/// assert!(report.acquire_timeout(Duration::from_millis(50)).await?.is_none());
/// guard.release().await?;
/// let again = report.try_acquire().await?.expect("free again");
/// # drop(again);
/// # Ok(()) }
/// ```
///
/// With a lock-delay, a lease that ends without a release keeps the mutex from everybody
/// for that long more; with a stable lock id, a process that restarts takes its lease back:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let db = server.client().database("doc");
/// use std::time::Duration;
/// use mongolock::LockClient;
///
/// let ttl = Duration::from_secs(10);
/// // A process that holds the mutex under its own lock id, and dies without releasing it.
/// let before = LockClient::new(db.collection("locks"));
/// let job = before.mutex("migration").ttl(ttl).lock_id("host-a").lock_delay(Duration::from_secs(5));
/// let guard = job.acquire().await?;
/// let token = guard.fencing_token();
/// std::mem::forget(guard); // no release...
/// drop(before);            // ...and nothing renews it any more: the process is gone
///
/// // Started again, within the TTL: the same lease, the same token, at once.
/// let after = LockClient::new(db.collection("locks"));
/// let job = after.mutex("migration").ttl(ttl).lock_id("host-a");
/// let guard = job.try_acquire().await?.expect("resumed");
/// assert_eq!(guard.fencing_token(), token);
/// // It stalls past its TTL (the emulator's clock jumps): nobody gets the mutex for the
/// // lock-delay.
/// server.clock().advance(ttl + Duration::from_secs(1));
/// assert!(after.mutex("migration").try_acquire().await?.is_none(), "within the lock-delay");
/// server.clock().advance(Duration::from_secs(5));
/// assert!(after.mutex("migration").try_acquire().await?.is_some(), "after it");
/// # drop(guard);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is used"]
pub struct Mutex {
    client: LockClient,
    resource: String,
    options: LeaseOptions,
}

impl Mutex {
    pub(crate) fn new(client: LockClient, resource: String) -> Self {
        Mutex {
            client,
            resource,
            options: LeaseOptions::default(),
        }
    }

    /// The request of one acquire call, and its lease's timing.
    fn request(&self) -> Result<(AcquireRequest, LeaseTiming)> {
        self.options
            .request(LockKind::Exclusive, &self.resource, None)
    }

    lease_settings!();
    acquire_methods!(acquire, try_acquire, acquire_timeout, request, "the mutex");
    holders_method!();

    /// Runs `work` under the mutex: acquires it (waiting as long as needed), passes the
    /// fencing token, releases it when `work` is done. If the lease is lost first, `work`
    /// is dropped (stopped at its next `.await`) and the call fails with
    /// [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost).
    ///
    /// # Errors
    ///
    /// As acquiring waits (bad settings, a database error waiting cannot fix), and
    /// [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) when the lease is lost before `work`
    /// is done.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the lock in the background.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let rows = locks.mutex("import").run(|token| async move {
    ///     // ... write to the store, passing `token` ...
    ///     42
    /// }).await?;
    /// assert_eq!(rows, 42);
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(i64) -> Fut,
        Fut: Future<Output = T>,
    {
        run_under(self.acquire().await?, work).await
    }
}

/// Runs `work` while `guard` holds, and releases it after.
async fn run_under<F, Fut, T>(guard: LockGuard, work: F) -> Result<T>
where
    F: FnOnce(i64) -> Fut,
    Fut: Future<Output = T>,
{
    let work = work(guard.fencing_token());
    tokio::select! {
        biased;
        reason = guard.lost() => {
            let resource = guard.resource().to_owned();
            drop(guard);
            Err(wait::lease_lost(&resource, reason))
        }
        value = work => {
            guard.release().await?;
            Ok(value)
        }
    }
}

/// A distributed reader-writer lock: many readers or one writer. Made by
/// [`LockClient::rwlock`].
///
/// Waiters are served in the order they joined the resource's line: a reader that came
/// before a waiting writer goes before it (with the other readers), and one that came after
/// waits for the writer, so a steady stream of readers cannot starve it. A waiter's place
/// lasts twice its TTL and is refreshed by its client while it waits; a waiter that stops waiting
/// leaves the line, and if it dies while waiting, its place lapses. A single attempt (`try_read`,
/// `try_write`) joins no line, and is refused while anybody waits.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// let config = locks.rwlock("config");
/// let r1 = config.read().await?;
/// let r2 = config.read().await?;
/// assert!(config.try_write().await?.is_none(), "readers hold it");
/// drop((r1, r2));
/// # locks.shutdown().await;
/// let w = config.write().await?;
/// assert!(config.try_read().await?.is_none(), "the writer holds it");
/// # drop(w);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is used"]
pub struct RwLock {
    client: LockClient,
    resource: String,
    options: LeaseOptions,
}

impl RwLock {
    pub(crate) fn new(client: LockClient, resource: String) -> Self {
        RwLock {
            client,
            resource,
            options: LeaseOptions::default(),
        }
    }

    /// The request of one read call, and its lease's timing.
    fn reader(&self) -> Result<(AcquireRequest, LeaseTiming)> {
        self.options.request(LockKind::Shared, &self.resource, None)
    }

    /// The request of one write call, and its lease's timing.
    fn writer(&self) -> Result<(AcquireRequest, LeaseTiming)> {
        self.options
            .request(LockKind::Exclusive, &self.resource, None)
    }

    lease_settings!();
    acquire_methods!(read, try_read, read_timeout, reader, "a read lock");
    acquire_methods!(write, try_write, write_timeout, writer, "the write lock");
    holders_method!();

    /// Runs `work` under a read lock, as [`Mutex::run`] does under the mutex.
    ///
    /// # Errors
    ///
    /// As acquiring waits (bad settings, a database error waiting cannot fix), and
    /// [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) when the lease is lost before `work`
    /// is done.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the lock in the background.
    pub async fn run_read<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(i64) -> Fut,
        Fut: Future<Output = T>,
    {
        run_under(self.read().await?, work).await
    }

    /// Runs `work` under the write lock, as [`Mutex::run`] does under the mutex.
    ///
    /// # Errors
    ///
    /// As acquiring waits (bad settings, a database error waiting cannot fix), and
    /// [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) when the lease is lost before `work`
    /// is done.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the lock in the background.
    pub async fn run_write<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(i64) -> Fut,
        Fut: Future<Output = T>,
    {
        run_under(self.write().await?, work).await
    }
}

/// A distributed semaphore: at most `permits` holders at once. Made by
/// [`LockClient::semaphore`].
///
/// The number of permits is stored with the resource while it has holders: a semaphore on
/// the same resource with another number fails with
/// [`ErrorKind::CapMismatch`](crate::ErrorKind::CapMismatch) instead of enforcing a second
/// limit.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// let gpus = locks.semaphore("gpu", 2);
/// let a = gpus.acquire().await?;
/// let b = gpus.acquire().await?;
/// assert!(gpus.try_acquire().await?.is_none(), "both permits are taken");
/// let wrong = locks.semaphore("gpu", 3).try_acquire().await.unwrap_err();
/// assert!(matches!(wrong.kind(), mongolock::ErrorKind::CapMismatch { .. }));
/// # drop((a, b));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is used"]
pub struct Semaphore {
    client: LockClient,
    resource: String,
    permits: u32,
    options: LeaseOptions,
}

impl Semaphore {
    pub(crate) fn new(client: LockClient, resource: String, permits: u32) -> Self {
        Semaphore {
            client,
            resource,
            permits,
            options: LeaseOptions::default(),
        }
    }

    /// The request of one permit call, and its lease's timing.
    fn permit(&self) -> Result<(AcquireRequest, LeaseTiming)> {
        self.options
            .request(LockKind::Shared, &self.resource, Some(self.permits))
    }

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    lease_settings!();
    acquire_methods!(acquire, try_acquire, acquire_timeout, permit, "a permit");
    holders_method!();

    /// Runs `work` holding a permit, as [`Mutex::run`] does under the mutex.
    ///
    /// # Errors
    ///
    /// As acquiring waits (bad settings, a database error waiting cannot fix), and
    /// [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) when the lease is lost before `work`
    /// is done.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the permit in the background.
    pub async fn run<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(i64) -> Fut,
        Fut: Future<Output = T>,
    {
        run_under(self.acquire().await?, work).await
    }
}
