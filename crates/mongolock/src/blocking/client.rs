//! [`LockClient`]: the blocking client, a [`crate::LockClient`] whose calls block.

use std::time::Duration;

use bson::Document;
use mongodb::Collection;
use mongodb::options::WriteConcern;

use super::runtime::{Entered, block_on};
use super::{Election, MultiLock, Mutex, RwLock, Semaphore};
use crate::client::Settings;
use crate::error::{Effect, Error, Result};
use crate::query::{Filter, LockStatus, Purged};

/// Locks stored in one MongoDB collection, for code that is not async: the
/// [`crate::LockClient`] it wraps, every call blocking the calling thread until it is done.
///
/// Cheap to clone, `Send` and `Sync`: share one per process and collection, across threads,
/// as the async client is shared. Its leases are renewed, and the releases of dropped guards
/// sent, by the blocking runtime's threads (see [the module](super)), so a thread that
/// holds a guard need not do anything to keep it.
///
/// ```
/// # let setup = tokio::runtime::Runtime::new().unwrap();
/// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
/// # let uri = server.uri();
/// use std::time::Duration;
/// use mongolock::blocking::LockClient;
///
/// let locks = LockClient::connect(&uri, "app", "locks")?;
/// locks.create_indexes()?; // once, idempotent
///
/// // Waits as long as needed; the lease is renewed in the background every 10 s.
/// let guard = locks.mutex("nightly-report").ttl(Duration::from_secs(30)).acquire()?;
/// let token = guard.fencing_token(); // pass it to what you protect
/// assert!(locks.mutex("nightly-report").try_acquire()?.is_none(), "held");
/// // ... work; check guard.is_lost() between steps ...
/// guard.release()?;
///
/// // At most two at once, waiting up to five seconds for a permit.
/// let permit = locks.semaphore("gpu", 2).acquire_timeout(Duration::from_secs(5))?;
/// drop(permit); // released in the background
///
/// locks.shutdown()?; // waits for that release, then shuts the driver's client down
/// # let _ = token;
/// # Ok::<(), mongolock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct LockClient {
    locks: Entered<crate::LockClient>,
    /// The driver's client made by [`LockClient::connect`], shut down by
    /// [`LockClient::shutdown`]; `None` when the caller owns it.
    driver: Option<Entered<mongodb::Client>>,
}

impl LockClient {
    /// Connects to the MongoDB deployment at `uri` (a connection string) and keeps the locks
    /// in `collection` of `database`. The driver's client is made on the blocking runtime,
    /// so that its connections live there; this client owns it, and
    /// [`shutdown`](Self::shutdown) shuts it down.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) if the connection string is not
    /// valid (or names hosts that cannot be resolved: `mongodb+srv://` is looked up here);
    /// the source is the driver's error. Nothing is sent to the deployment yet: the first
    /// call connects. [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// naming `runtime` when called inside an async runtime.
    ///
    /// # Panics
    ///
    /// If the blocking runtime cannot start (the system refuses threads), at its first use.
    pub fn connect(uri: &str, database: &str, collection: &str) -> Result<Self> {
        Self::connect_builder(uri, database, collection).build()
    }

    /// Settings for a client that connects to `uri`, as [`connect`](Self::connect) does: see
    /// [`LockClientBuilder`]. Nothing is checked or connected until
    /// [`build`](LockClientBuilder::build).
    pub fn connect_builder(uri: &str, database: &str, collection: &str) -> LockClientBuilder {
        LockClientBuilder {
            source: Source::Connect {
                uri: uri.to_owned(),
                database: database.to_owned(),
                collection: collection.to_owned(),
            },
            settings: Settings::default(),
        }
    }

    /// Settings for a client on `collection`, of a driver client the caller made and shuts
    /// down, as [`new`](Self::new) makes one: see [`LockClientBuilder`].
    ///
    /// ```
    /// # let setup = tokio::runtime::Runtime::new().unwrap();
    /// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
    /// # let collection = setup.block_on(async { server.client().database("app").collection("locks") });
    /// use std::time::Duration;
    ///
    /// let locks = mongolock::blocking::LockClient::builder(collection)
    ///     .retention(Duration::from_secs(7 * 24 * 3600))
    ///     .build()?;
    /// # Ok::<(), mongolock::Error>(())
    /// ```
    pub fn builder(collection: Collection<Document>) -> LockClientBuilder {
        LockClientBuilder {
            source: Source::Collection(collection),
            settings: Settings::default(),
        }
    }

    /// Locks stored in `collection`, from a driver client the caller made and shuts down.
    ///
    /// The driver's client drives its connections on the runtime it was made in: that
    /// runtime must keep running while this client is used (a multi-thread runtime, or one
    /// made with [`block_on`](super::block_on)). Without a runtime of your own, use
    /// [`connect`](Self::connect).
    pub fn new(collection: Collection<Document>) -> Self {
        Self::from_async(crate::LockClient::new(collection))
    }

    /// The blocking face of `locks`, with its settings: how to share one client, its leases
    /// and its change stream, between async and blocking code. The driver's client stays
    /// the caller's.
    ///
    /// ```
    /// # let setup = tokio::runtime::Runtime::new().unwrap();
    /// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
    /// # let collection = setup.block_on(async { server.client().database("app").collection("locks") });
    /// use std::time::Duration;
    ///
    /// let locks = mongolock::LockClient::builder(collection)
    ///     .command_timeout(Duration::from_secs(2))
    ///     .build()?;
    /// let locks = mongolock::blocking::LockClient::from_async(locks);
    /// # Ok::<(), mongolock::Error>(())
    /// ```
    pub fn from_async(locks: crate::LockClient) -> Self {
        LockClient {
            locks: Entered::new(locks),
            driver: None,
        }
    }

    /// The async client this one wraps: for async code in the same process, and for the
    /// calls this API leaves out (the low-level ones, the closure forms), run with
    /// [`block_on`](super::block_on).
    pub fn as_async(&self) -> &crate::LockClient {
        &self.locks
    }

    /// A mutex on `resource`: one holder at a time. See [`Mutex`].
    pub fn mutex(&self, resource: impl Into<String>) -> Mutex {
        Mutex::new(self.locks.mutex(resource))
    }

    /// A reader-writer lock on `resource`: many readers or one writer. See [`RwLock`].
    pub fn rwlock(&self, resource: impl Into<String>) -> RwLock {
        RwLock::new(self.locks.rwlock(resource))
    }

    /// A semaphore on `resource` with `permits` permits. See [`Semaphore`].
    pub fn semaphore(&self, resource: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(self.locks.semaphore(resource, permits))
    }

    /// Exclusive locks on every resource of `resources`, all or nothing. See [`MultiLock`].
    pub fn multi<I, S>(&self, resources: I) -> MultiLock
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLock::new(self.locks.multi(resources))
    }

    /// A leader election named `name`. See [`Election`].
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(self.locks.election(name))
    }

    /// The number of leases this client keeps alive.
    pub fn leases(&self) -> usize {
        self.locks.leases()
    }

    /// Creates the indexes the lock commands use, as
    /// [`crate::LockClient::create_indexes`] does. Idempotent: call it at start-up.
    ///
    /// # Errors
    ///
    /// As [`crate::LockClient::create_indexes`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn create_indexes(&self) -> Result<()> {
        block_on(self.locks.create_indexes())?
    }

    /// The locks matching `filter`, as [`crate::LockClient::status`] reads them.
    ///
    /// # Errors
    ///
    /// As [`crate::LockClient::status`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn status(&self, filter: &Filter) -> Result<Vec<LockStatus>> {
        block_on(self.locks.status(filter))?
    }

    /// Releases every lock of `lock_id`, as [`crate::LockClient::unlock`] does: the number
    /// released.
    ///
    /// # Errors
    ///
    /// As [`crate::LockClient::unlock`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn unlock(&self, lock_id: &str) -> Result<u64> {
        block_on(self.locks.unlock(lock_id))?
    }

    /// Extends every live lock of `lock_id` by `ttl`, as [`crate::LockClient::renew`] does:
    /// the number extended.
    ///
    /// # Errors
    ///
    /// As [`crate::LockClient::renew`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn renew(&self, lock_id: &str, ttl: Duration) -> Result<u64> {
        block_on(self.locks.renew(lock_id, ttl))?
    }

    /// Breaks every lock on `resource`, whoever holds it (operators), as
    /// [`crate::LockClient::force_release`] does: the number broken. Their holders learn it
    /// as a revocation.
    ///
    /// # Errors
    ///
    /// As [`crate::LockClient::force_release`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn force_release(&self, resource: &str) -> Result<u64> {
        block_on(self.locks.force_release(resource))?
    }

    /// Clears expired locks, never a live one, as [`crate::LockClient::purge`] does.
    ///
    /// # Errors
    ///
    /// As [`crate::LockClient::purge`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn purge(&self) -> Result<Purged> {
        block_on(self.locks.purge())?
    }

    /// Clears expired locks and ends their lock ids' other locks, as
    /// [`crate::LockClient::purge_abandoned_groups`] does.
    ///
    /// # Errors
    ///
    /// As [`crate::LockClient::purge_abandoned_groups`];
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime.
    pub fn purge_abandoned_groups(&self) -> Result<Purged> {
        block_on(self.locks.purge_abandoned_groups())?
    }

    /// Stops what this client runs in the background, as [`crate::LockClient::shutdown`]
    /// does (for every clone: election observers end, releases left by dropped guards are
    /// sent and waited for, the change stream closes), then, for a client made by
    /// [`connect`](Self::connect), shuts its driver's client down: every call after that
    /// fails, on every clone. A guard still held keeps its lock until its TTL ends: release
    /// guards first. Without `connect`, shut the driver's client down yourself, after this.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming `runtime`
    /// when called inside an async runtime (nothing is done then).
    pub fn shutdown(&self) -> Result<()> {
        let driver = self.driver.as_deref().cloned();
        block_on(async {
            self.locks.shutdown().await;
            if let Some(driver) = driver {
                driver.shutdown().await;
            }
        })
    }
}

/// The settings of a blocking [`LockClient`], made with [`LockClient::builder`] (on a driver
/// client of yours) or [`LockClient::connect_builder`] (on one this client makes and owns),
/// and checked by [`build`](LockClientBuilder::build): the same settings, defaults and
/// rule as the async [`crate::LockClientBuilder`], whose pages say what each does.
///
/// ```
/// # let setup = tokio::runtime::Runtime::new().unwrap();
/// # let server = setup.block_on(mongolock_testkit::TestServer::start()).unwrap();
/// # let uri = server.uri();
/// use std::time::Duration;
///
/// let locks = mongolock::blocking::LockClient::connect_builder(&uri, "app", "locks")
///     .command_timeout(Duration::from_secs(2))
///     .build()?;
/// # locks.shutdown()?;
/// # Ok::<(), mongolock::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder makes nothing until `build` is called"]
pub struct LockClientBuilder {
    source: Source,
    settings: Settings,
}

/// Where the locks are: a collection of the caller's driver client, or a deployment to
/// connect to.
#[derive(Debug, Clone)]
enum Source {
    Collection(Collection<Document>),
    Connect {
        uri: String,
        database: String,
        collection: String,
    },
}

impl LockClientBuilder {
    /// As [`crate::LockClientBuilder::unsafe_write_concern`]: **this can break mutual
    /// exclusion** on a replica set.
    pub fn unsafe_write_concern(mut self, write_concern: WriteConcern) -> Self {
        self.settings.unsafe_write_concern(write_concern);
        self
    }

    /// As [`crate::LockClientBuilder::retention`]: how long an idle resource document is
    /// kept (one second to `i32::MAX` seconds).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.settings.retention(retention);
        self
    }

    /// As [`crate::LockClientBuilder::clock_uncertainty`]: how far the server's clock may
    /// step forward unnoticed (zero, the default, is none).
    pub fn clock_uncertainty(mut self, uncertainty: Duration) -> Self {
        self.settings.clock_uncertainty(uncertainty);
        self
    }

    /// As [`crate::LockClientBuilder::command_timeout`]: how long one call may take (one
    /// millisecond to `i32::MAX` milliseconds).
    pub fn command_timeout(mut self, limit: Duration) -> Self {
        self.settings.command_timeout(limit);
        self
    }

    /// The client, once every setting is checked; from
    /// [`connect_builder`](LockClient::connect_builder), connected (nothing is sent to the
    /// deployment yet: the first call connects).
    ///
    /// # Errors
    ///
    /// As [`crate::LockClientBuilder::build`], checked before connecting; as
    /// [`LockClient::connect`] for a client that connects.
    ///
    /// # Panics
    ///
    /// As [`LockClient::connect`], if the blocking runtime cannot start.
    pub fn build(self) -> Result<LockClient> {
        self.settings.check()?;
        match self.source {
            Source::Collection(collection) => {
                Ok(LockClient::from_async(self.settings.build(collection)?))
            }
            Source::Connect {
                uri,
                database,
                collection,
            } => {
                let driver = block_on(mongodb::Client::with_uri_str(&uri))?
                    .map_err(|error| Error::database(error, Effect::Read))?;
                let collection = driver.database(&database).collection(&collection);
                Ok(LockClient {
                    locks: Entered::new(self.settings.build(collection)?),
                    driver: Some(Entered::new(driver)),
                })
            }
        }
    }
}
