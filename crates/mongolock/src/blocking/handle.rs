//! The blocking handles: [`Mutex`], [`RwLock`], [`Semaphore`] and [`MultiLock`], each the
//! async handle of the same name, whose acquires block.

use std::time::Duration;

use super::runtime::{Entered, block_on};
use super::{LockGuard, MultiGuard};
use crate::error::Result;
use crate::query::LockStatus;

/// The lease settings every handle has, each handed to the async handle's.
macro_rules! lease_settings {
    ($async:ident) => {
        #[doc = concat!("The lease's TTL (default thirty seconds): as [`", stringify!($async), "::ttl`](crate::", stringify!($async), "::ttl).")]
        pub fn ttl(self, ttl: Duration) -> Self {
            Self::new(self.inner.into_inner().ttl(ttl))
        }

        #[doc = concat!("Nobody is granted the lock for `delay` more after a lease that ends without a release: as [`", stringify!($async), "::lock_delay`](crate::", stringify!($async), "::lock_delay).")]
        pub fn lock_delay(self, delay: Duration) -> Self {
            Self::new(self.inner.into_inner().lock_delay(delay))
        }

        #[doc = concat!("A holder that lets go within `min_hold` of its grant keeps its lock in force until then: as [`", stringify!($async), "::min_hold`](crate::", stringify!($async), "::min_hold).")]
        pub fn min_hold(self, min_hold: Duration) -> Self {
            Self::new(self.inner.into_inner().min_hold(min_hold))
        }

        #[doc = concat!("Renews the lease this often instead of every third of the TTL: as [`", stringify!($async), "::extend_every`](crate::", stringify!($async), "::extend_every).")]
        pub fn extend_every(self, every: Duration) -> Self {
            Self::new(self.inner.into_inner().extend_every(every))
        }

        #[doc = concat!("How much earlier than the server the guard counts its lease as lost: as [`", stringify!($async), "::safety_margin`](crate::", stringify!($async), "::safety_margin).")]
        pub fn safety_margin(self, margin: Duration) -> Self {
            Self::new(self.inner.into_inner().safety_margin(margin))
        }

        #[doc = concat!("A label stored with the lock, shown by status queries: as [`", stringify!($async), "::owner`](crate::", stringify!($async), "::owner).")]
        pub fn owner(self, owner: impl Into<String>) -> Self {
            Self::new(self.inner.into_inner().owner(owner))
        }

        #[doc = concat!("The host recorded with the lock: as [`", stringify!($async), "::host`](crate::", stringify!($async), "::host).")]
        pub fn host(self, host: impl Into<String>) -> Self {
            Self::new(self.inner.into_inner().host(host))
        }

        #[doc = concat!("Holds the lock with this lock id instead of a random one, to resume a lease after a restart: as [`", stringify!($async), "::lock_id`](crate::", stringify!($async), "::lock_id). A lock id belongs to one holder.")]
        pub fn lock_id(self, lock_id: impl Into<String>) -> Self {
            Self::new(self.inner.into_inner().lock_id(lock_id))
        }
    };
}

/// `holders`, for the handles of one resource.
macro_rules! holders_method {
    ($async:ident) => {
        #[doc = concat!("Who holds the resource now: as [`", stringify!($async), "::holders`](crate::", stringify!($async), "::holders).")]
        ///
        /// # Errors
        ///
        #[doc = concat!("As [`", stringify!($async), "::holders`](crate::", stringify!($async), "::holders);")]
        /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming
        /// `runtime` when called inside an async runtime.
        pub fn holders(&self) -> Result<Vec<LockStatus>> {
            block_on(self.inner.holders())?
        }
    };
}

/// The three ways to acquire, each handed to the async handle's.
macro_rules! acquire_methods {
    ($async:ident, $acquire:ident, $try_acquire:ident, $acquire_timeout:ident, $guard:ident, $what:literal) => {
        #[doc = concat!("Waits as long as needed for ", $what, ", and returns its guard: as [`", stringify!($async), "::", stringify!($acquire), "`](crate::", stringify!($async), "::", stringify!($acquire), ").")]
        ///
        /// # Errors
        ///
        #[doc = concat!("As [`", stringify!($async), "::", stringify!($acquire), "`](crate::", stringify!($async), "::", stringify!($acquire), ");")]
        /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming
        /// `runtime` when called inside an async runtime (nothing is sent then).
        pub fn $acquire(&self) -> Result<$guard> {
            block_on(self.inner.$acquire())?.map($guard::new)
        }

        #[doc = concat!("One attempt at ", $what, ": `None` if others hold it, as [`", stringify!($async), "::", stringify!($try_acquire), "`](crate::", stringify!($async), "::", stringify!($try_acquire), ").")]
        ///
        /// # Errors
        ///
        #[doc = concat!("As [`", stringify!($async), "::", stringify!($try_acquire), "`](crate::", stringify!($async), "::", stringify!($try_acquire), ");")]
        /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming
        /// `runtime` when called inside an async runtime (nothing is sent then).
        pub fn $try_acquire(&self) -> Result<Option<$guard>> {
            Ok(block_on(self.inner.$try_acquire())??.map($guard::new))
        }

        #[doc = concat!("Waits up to `timeout` for ", $what, ": `None` if the wait gave up, as [`", stringify!($async), "::", stringify!($acquire_timeout), "`](crate::", stringify!($async), "::", stringify!($acquire_timeout), ") (an attempt still on its way then is withdrawn in the background).")]
        ///
        /// # Errors
        ///
        #[doc = concat!("As [`", stringify!($async), "::", stringify!($acquire_timeout), "`](crate::", stringify!($async), "::", stringify!($acquire_timeout), ");")]
        /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming
        /// `runtime` when called inside an async runtime (nothing is sent then).
        pub fn $acquire_timeout(&self, timeout: Duration) -> Result<Option<$guard>> {
            Ok(block_on(self.inner.$acquire_timeout(timeout))??.map($guard::new))
        }
    };
}

/// A distributed mutex whose acquires block: one holder at a time. Made by
/// [`LockClient::mutex`](super::LockClient::mutex); the blocking face of [`crate::Mutex`],
/// which says what is promised.
///
/// ```
/// # let setup = tokio::runtime::Runtime::new().unwrap();
/// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
/// # let locks = mongolock::blocking::LockClient::connect(&server.uri(), "doc", "locks")?;
/// use std::time::Duration;
///
/// let report = locks.mutex("nightly-report").ttl(Duration::from_secs(30)).owner("cron@host-a");
/// let guard = report.acquire()?;
/// assert!(report.try_acquire()?.is_none(), "held");
/// assert!(report.acquire_timeout(Duration::from_millis(50))?.is_none());
/// guard.release()?;
/// let again = report.try_acquire()?.expect("free again");
/// # drop(again);
/// # locks.shutdown()?;
/// # Ok::<(), mongolock::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is used"]
pub struct Mutex {
    inner: Entered<crate::Mutex>,
}

impl Mutex {
    pub(crate) fn new(inner: crate::Mutex) -> Self {
        Mutex {
            inner: Entered::new(inner),
        }
    }

    lease_settings!(Mutex);
    acquire_methods!(
        Mutex,
        acquire,
        try_acquire,
        acquire_timeout,
        LockGuard,
        "the mutex"
    );
    holders_method!(Mutex);
}

/// A distributed reader-writer lock whose acquires block: many readers or one writer,
/// writers not starved. Made by [`LockClient::rwlock`](super::LockClient::rwlock); the
/// blocking face of [`crate::RwLock`], which says what is promised.
///
/// ```
/// # let setup = tokio::runtime::Runtime::new().unwrap();
/// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
/// # let locks = mongolock::blocking::LockClient::connect(&server.uri(), "doc", "locks")?;
/// let config = locks.rwlock("config");
/// let reading = config.read()?;
/// assert!(config.try_write()?.is_none(), "a reader holds it");
/// reading.release()?;
/// let writing = config.write()?;
/// assert!(config.try_read()?.is_none(), "the writer holds it");
/// # drop(writing);
/// # locks.shutdown()?;
/// # Ok::<(), mongolock::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is used"]
pub struct RwLock {
    inner: Entered<crate::RwLock>,
}

impl RwLock {
    pub(crate) fn new(inner: crate::RwLock) -> Self {
        RwLock {
            inner: Entered::new(inner),
        }
    }

    lease_settings!(RwLock);
    acquire_methods!(
        RwLock,
        read,
        try_read,
        read_timeout,
        LockGuard,
        "a read lock"
    );
    acquire_methods!(
        RwLock,
        write,
        try_write,
        write_timeout,
        LockGuard,
        "the write lock"
    );
    holders_method!(RwLock);
}

/// A distributed semaphore whose acquires block: at most `permits` holders at once. Made by
/// [`LockClient::semaphore`](super::LockClient::semaphore); the blocking face of
/// [`crate::Semaphore`], which says what is promised.
///
/// ```
/// # let setup = tokio::runtime::Runtime::new().unwrap();
/// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
/// # let locks = mongolock::blocking::LockClient::connect(&server.uri(), "doc", "locks")?;
/// let gpus = locks.semaphore("gpu", 2);
/// let a = gpus.acquire()?;
/// let b = gpus.acquire()?;
/// assert!(gpus.try_acquire()?.is_none(), "both permits are taken");
/// # drop((a, b));
/// # locks.shutdown()?;
/// # Ok::<(), mongolock::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is used"]
pub struct Semaphore {
    inner: Entered<crate::Semaphore>,
}

impl Semaphore {
    pub(crate) fn new(inner: crate::Semaphore) -> Self {
        Semaphore {
            inner: Entered::new(inner),
        }
    }

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.inner.permits()
    }

    lease_settings!(Semaphore);
    acquire_methods!(
        Semaphore,
        acquire,
        try_acquire,
        acquire_timeout,
        LockGuard,
        "a permit"
    );
    holders_method!(Semaphore);
}

/// Exclusive locks on several resources whose acquires block, taken all or nothing, without
/// deadlock. Made by [`LockClient::multi`](super::LockClient::multi); the blocking face of
/// [`crate::MultiLock`], which says what is promised.
///
/// ```
/// # let setup = tokio::runtime::Runtime::new().unwrap();
/// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
/// # let locks = mongolock::blocking::LockClient::connect(&server.uri(), "doc", "locks")?;
/// let transfer = locks.multi(["account-4", "account-17"]);
/// let held = locks.mutex("account-17").acquire()?;
/// assert!(transfer.try_acquire()?.is_none(), "all or nothing");
/// held.release()?;
/// let both = transfer.acquire()?;
/// assert!(both.fencing_token("account-4").is_some());
/// both.release()?;
/// # locks.shutdown()?;
/// # Ok::<(), mongolock::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is used"]
pub struct MultiLock {
    inner: Entered<crate::MultiLock>,
}

impl MultiLock {
    pub(crate) fn new(inner: crate::MultiLock) -> Self {
        MultiLock {
            inner: Entered::new(inner),
        }
    }

    /// The resources, in the order they are taken (sorted).
    pub fn resources(&self) -> impl Iterator<Item = &str> {
        self.inner.resources()
    }

    lease_settings!(MultiLock);
    acquire_methods!(
        MultiLock,
        acquire,
        try_acquire,
        acquire_timeout,
        MultiGuard,
        "every resource"
    );
}
