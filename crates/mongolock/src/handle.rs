//! The handles: [`Mutex`], [`RwLock`] and [`Semaphore`], made by
//! [`LockClient::mutex`], [`LockClient::rwlock`] and [`LockClient::semaphore`]. Each is a
//! cheap description of what to lock; every acquire returns a [`LockGuard`] holding a lease
//! of its own, with its own random lock id.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock::LockKind;
use crate::query::{Filter, LockStatus};
use crate::request::AcquireRequest;
use crate::run;
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

/// The closure forms of one kind of lock: its three acquires, with work run under the guard
/// (see [running work under a lock](crate::Mutex#running-work-under-a-lock)).
macro_rules! run_methods {
    (
        $run:ident, $try_run:ident, $run_timeout:ident,
        $acquire:ident, $try_acquire:ident, $acquire_timeout:ident,
        $what:literal, $handle:literal, $block:ident
    ) => {
        #[doc = concat!("Waits as long as needed for ", $what, ", runs `work` with its guard, and releases it when `work` returns: `work`'s result. See [running work under a lock](crate::Mutex#running-work-under-a-lock) for what each outcome means.")]
        ///
        /// # Errors
        ///
        #[doc = concat!("This crate's errors, as `E`: those of [`", stringify!($acquire), "`](Self::", stringify!($acquire), ") if the lock was not granted, and [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) if the lease was lost before `work` returned (`work` was dropped). `work`'s own error, untouched. A release that fails after `work` returned is logged, not returned.")]
        ///
        /// # Cancel safety
        ///
        #[doc = concat!("Dropping the future drops `work` and lets go of the lock in the background, as dropping its guard does (before the grant, as [`", stringify!($acquire), "`](Self::", stringify!($acquire), ")).")]
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
        /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
        /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
        #[doc = concat!("let handle = ", $handle, ";")]
        #[doc = concat!("let token = handle.", stringify!($run), "(async |guard| {")]
        ///     // ... write to the store, passing guard.fencing_token() or through guard.fence() ...
        ///     assert!(!guard.is_lost());
        ///     Ok::<_, mongolock::Error>(guard.fencing_token())
        /// }).await?;
        /// assert!(token > 0);
        /// # Ok(()) }
        /// ```
        pub async fn $run<T, E>(
            &self,
            work: impl AsyncFnOnce(&LockGuard) -> std::result::Result<T, E>,
        ) -> std::result::Result<T, E>
        where
            E: From<Error>,
        {
            run::under(self.$acquire().await?, work).await
        }

        #[doc = concat!("One attempt at ", $what, ": runs `work` with its guard if granted, as [`", stringify!($run), "`](Self::", stringify!($run), ") does, and `None` without running it if others hold it.")]
        ///
        /// # Errors
        ///
        #[doc = concat!("As [`", stringify!($run), "`](Self::", stringify!($run), "), with those of [`", stringify!($try_acquire), "`](Self::", stringify!($try_acquire), ") for the attempt.")]
        ///
        /// # Cancel safety
        ///
        #[doc = concat!("As [`", stringify!($run), "`](Self::", stringify!($run), ").")]
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
        /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
        /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
        #[doc = concat!("let handle = ", $handle, ";")]
        #[doc = concat!("let other = handle.", stringify!($block), "().await?;")]
        #[doc = concat!("let ran = handle.", stringify!($try_run), "(async |_guard| Ok::<_, mongolock::Error>(1)).await?;")]
        /// assert_eq!(ran, None, "taken: the work was skipped");
        /// other.release().await?;
        #[doc = concat!("let ran = handle.", stringify!($try_run), "(async |_guard| Ok::<_, mongolock::Error>(1)).await?;")]
        /// assert_eq!(ran, Some(1));
        /// # Ok(()) }
        /// ```
        pub async fn $try_run<T, E>(
            &self,
            work: impl AsyncFnOnce(&LockGuard) -> std::result::Result<T, E>,
        ) -> std::result::Result<Option<T>, E>
        where
            E: From<Error>,
        {
            match self.$try_acquire().await? {
                Some(guard) => run::under(guard, work).await.map(Some),
                None => Ok(None),
            }
        }

        #[doc = concat!("Waits up to `timeout` for ", $what, ": runs `work` with its guard if granted, as [`", stringify!($run), "`](Self::", stringify!($run), ") does, and `None` without running it if the wait gave up. The timeout bounds the wait only, not the work.")]
        ///
        /// # Errors
        ///
        #[doc = concat!("As [`", stringify!($run), "`](Self::", stringify!($run), "), with those of [`", stringify!($acquire_timeout), "`](Self::", stringify!($acquire_timeout), ") for the wait.")]
        ///
        /// # Cancel safety
        ///
        #[doc = concat!("As [`", stringify!($run), "`](Self::", stringify!($run), ").")]
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
        /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
        /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
        /// use std::time::Duration;
        ///
        #[doc = concat!("let handle = ", $handle, ";")]
        #[doc = concat!("let other = handle.", stringify!($block), "().await?;")]
        #[doc = concat!("let ran = handle.", stringify!($run_timeout), "(Duration::from_millis(50), async |_guard| {")]
        ///     Ok::<_, mongolock::Error>(1)
        /// }).await?;
        /// assert_eq!(ran, None, "still taken after 50 ms: the work was skipped");
        /// other.release().await?;
        #[doc = concat!("let ran = handle.", stringify!($run_timeout), "(Duration::from_secs(5), async |_guard| {")]
        ///     Ok::<_, mongolock::Error>(1)
        /// }).await?;
        /// assert_eq!(ran, Some(1));
        /// # Ok(()) }
        /// ```
        pub async fn $run_timeout<T, E>(
            &self,
            timeout: Duration,
            work: impl AsyncFnOnce(&LockGuard) -> std::result::Result<T, E>,
        ) -> std::result::Result<Option<T>, E>
        where
            E: From<Error>,
        {
            match self.$acquire_timeout(timeout).await? {
                Some(guard) => run::under(guard, work).await.map(Some),
                None => Ok(None),
            }
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
///
/// # Running work under a lock
///
/// Each way to acquire has a closure form: [`run`](Mutex::run) waits as long as needed,
/// [`try_run`](Mutex::try_run) skips the work (`Ok(None)`) when the lock is taken, and
/// [`run_timeout`](Mutex::run_timeout) skips it when the wait gives up. So do the
/// [`RwLock`]'s ([`run_read`](RwLock::run_read), [`run_write`](RwLock::run_write) and their
/// kin), the [`Semaphore`]'s, the [`MultiLock`](crate::MultiLock)'s, and an
/// [`Election`](crate::Election)'s for a leader's term ([`lead`](crate::Election::lead)).
/// Each acquires, calls the work with a reference to the guard the acquire returns (its
/// fencing token and [`fence`](LockGuard::fence), [`lost`](LockGuard::lost),
/// [`time_left`](LockGuard::time_left)), and lets go of the lock when the work returns.
///
/// The work is fallible: it returns `Result<T, E>`, and so does the call, with the lock's
/// own errors converted into `E` (`E: From<mongolock::Error>`), as sqlx's and diesel's
/// `transaction` do: no `Result` inside a `Result`, and the work's own error comes back
/// untouched, never wrapped. `mongolock::Error` and `anyhow::Error` work as they are; an
/// error type of your own with a `#[from] mongolock::Error` variant tells a lock error from a
/// work error. Work that cannot fail returns `Ok::<_, mongolock::Error>(value)`.
///
/// Once the lock is granted, the call returns:
///
/// - **The lease was lost before the work returned**: the work is dropped (stopped at its
///   next `.await`; a value it returns once the guard's clock shows the loss is dropped too)
///   and the call fails with [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost). What the
///   work did up to then may have overlapped with the next holder: only fencing tokens
///   protect the store from that. Work can look at `guard.time_left()` between steps to
///   stop cleanly before then; work that must clean up after a loss acquires the guard itself
///   and races against [`lost`](LockGuard::lost).
/// - **The work returned an error**: that error, and the lock is released.
/// - **The work returned a value**: that value, and the lock is released. `Ok` means the
///   work returned while its lease was believed held: the value is never thrown away for
///   what the release says afterwards. If the release finds the lease already gone, that is
///   logged (a `tracing` warning, and the lease-loss metric), not returned: a lease that
///   ended by its deadline ended after the work (the guard's deadline comes before the
///   server's); one revoked (an operator's force release, a purge of abandoned groups, a
///   clock step larger than the margin) may have been revoked while the work ran, which the
///   holder learns only at its next renewal, with or without the closure form: fencing
///   tokens are what protect the store from it. To have that as a value, acquire and release
///   the guard yourself: [`LockGuard::release`] returns `ErrorKind::LeaseLost` then. A
///   release that fails (the server out of reach) is retried in the background, as a dropped
///   guard's is.
///
/// Dropping the call's future drops the work and lets go of the lock in the background, as
/// dropping a guard does.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let db = server.client().database("doc");
/// # let locks = mongolock::LockClient::new(db.collection("locks"));
/// use bson::doc;
///
/// /// The job's own error: a lock error, or one of the job's.
/// #[derive(Debug)]
/// enum JobError {
///     Lock(mongolock::Error),
///     NothingToImport,
/// }
///
/// impl From<mongolock::Error> for JobError {
///     fn from(error: mongolock::Error) -> Self {
///         JobError::Lock(error)
///     }
/// }
///
/// let rows = db.collection::<bson::Document>("rows");
/// let imported = locks.mutex("import").run(async |guard| -> Result<u32, JobError> {
///     // A write that a later holder's writes make stale (ErrorKind::StaleToken).
///     let update = doc! {"$set": {"n": 1}};
///     guard.fence().update_one(&rows, doc! {"_id": 1}, update).upsert(true).await?;
///     Ok(1)
/// }).await;
/// assert!(matches!(imported, Ok(1)));
///
/// let failed = locks.mutex("import").run(async |_guard| Err::<u32, _>(JobError::NothingToImport)).await;
/// assert!(matches!(failed, Err(JobError::NothingToImport)), "the work's error, untouched");
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
    run_methods!(
        run,
        try_run,
        run_timeout,
        acquire,
        try_acquire,
        acquire_timeout,
        "the mutex",
        "locks.mutex(\"import\")",
        acquire
    );
    holders_method!();
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
    run_methods!(
        run_read,
        try_run_read,
        run_read_timeout,
        read,
        try_read,
        read_timeout,
        "a read lock",
        "locks.rwlock(\"config\")",
        write
    );
    run_methods!(
        run_write,
        try_run_write,
        run_write_timeout,
        write,
        try_write,
        write_timeout,
        "the write lock",
        "locks.rwlock(\"config\")",
        read
    );
    holders_method!();
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
    run_methods!(
        run,
        try_run,
        run_timeout,
        acquire,
        try_acquire,
        acquire_timeout,
        "a permit",
        "locks.semaphore(\"gpu\", 1)",
        acquire
    );
    holders_method!();
}
