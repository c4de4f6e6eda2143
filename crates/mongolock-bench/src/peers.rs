//! The libraries under test, behind one interface: connect, try once, wait, release.
//!
//! Every library gets its own driver clients (with a [`Monitor`]) and its own database, so
//! the commands counted are that library's alone.

use std::sync::Arc;
use std::time::Duration;

use distributed_lock_core::traits::{DistributedLock, LockHandle};
use mongodb::options::ClientOptions;

use crate::monitor::Monitor;

/// A boxed error from any library.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A result with a [`BoxError`].
pub(crate) type Result<T> = std::result::Result<T, BoxError>;

/// Lease (TTL) given to every lock that has one.
pub(crate) const TTL: Duration = Duration::from_secs(30);

/// Poll interval for `mongo-lock-async`, which has no default: the value its own test uses.
pub(crate) const MONGO_LOCK_ASYNC_POLL: Duration = Duration::from_millis(100);

/// How long closing a driver client may take.
const CLOSE_LIMIT: Duration = Duration::from_secs(2);

/// How long a blocking acquire may wait before the run counts it as a failure.
const WAIT_LIMIT: Duration = Duration::from_secs(600);

/// One of the libraries compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lib {
    /// This workspace's crate, through its `mutex` handle.
    Mongolock,
    /// `mongodb-lock` 0.3 (`Mutex<String>`).
    MongodbLock,
    /// `mongo-lock-async` 0.4 (the async variant of `mongo-lock`).
    MongoLockAsync,
    /// `distributed-lock-mongo` 0.2.
    DistributedLockMongo,
}

impl Lib {
    /// Every library, ours first.
    pub(crate) const ALL: [Lib; 4] = [
        Lib::Mongolock,
        Lib::MongodbLock,
        Lib::MongoLockAsync,
        Lib::DistributedLockMongo,
    ];

    /// Name and version as printed in the tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Lib::Mongolock => "mongolock (this workspace)",
            Lib::MongodbLock => "mongodb-lock 0.3.0",
            Lib::MongoLockAsync => "mongo-lock-async 0.4.0",
            Lib::DistributedLockMongo => "distributed-lock-mongo 0.2.0",
        }
    }

    /// The database the library's locks live in.
    pub(crate) fn db(self) -> &'static str {
        match self {
            Lib::Mongolock => "bench_mongolock",
            Lib::MongodbLock => "bench_mongodb_lock",
            // The crate uses the client's default database (set in the URI options below)
            // and always the collection `locks`.
            Lib::MongoLockAsync => "bench_mongo_lock_async",
            Lib::DistributedLockMongo => "bench_distributed_lock_mongo",
        }
    }

    /// How the library waits, for the handoff table.
    pub(crate) fn waiting(self) -> &'static str {
        match self {
            Lib::Mongolock => {
                "`acquire()`: a release wakes the head of the line only, through its client's change stream (replica set); the head re-checks at the lease end"
            }
            Lib::MongodbLock => {
                "`lock(.., DEFAULT_WAIT, ..)`: insert retried every 500 ms (its default)"
            }
            Lib::MongoLockAsync => {
                "`try_acquire_with_timeout(.., 100 ms)`: upsert retried every 100 ms (no default; its test's value)"
            }
            Lib::DistributedLockMongo => {
                "`acquire(None)`: findAndModify retried every 10 ms (its default)"
            }
        }
    }

    /// How the library waits on a standalone server, where that differs from [`Lib::waiting`].
    pub(crate) fn waiting_standalone(self) -> Option<&'static str> {
        match self {
            Lib::Mongolock => Some(
                "polls with a jittered backoff, every 25 ms at most at the head of the line and 25 ms more per place behind it, never sleeping past the lease end the server reports",
            ),
            _ => None,
        }
    }

    /// Whether the library can renew a held lock.
    pub(crate) fn can_renew(self) -> bool {
        matches!(self, Lib::Mongolock)
    }
}

/// A connection of one library: its own driver client, monitored.
pub(crate) struct Peer {
    lib: Lib,
    client: mongodb::Client,
    monitor: Monitor,
    state: State,
}

enum State {
    Mongolock(mongolock::LockClient),
    MongodbLock(Arc<mongodb_lock::Mutex<String>>),
    MongoLockAsync,
    DistributedLockMongo(mongodb::Database),
}

/// A held lock.
pub(crate) enum Held<'a> {
    /// Ours.
    Mongolock(mongolock::LockGuard),
    /// Released by dropping it (the crate deletes from a blocking task).
    MongodbLock(mongodb_lock::MutexGuard<'a, String>),
    /// Released with `release().await`.
    MongoLockAsync(mongo_lock_async::Lock),
    /// Released with `release().await`.
    DistributedLockMongo(distributed_lock_mongo::handle::MongoLockHandle),
}

impl Peer {
    /// A new client of `lib` on the server at `uri`, its commands counted by `monitor`.
    pub(crate) async fn connect(lib: Lib, uri: &str, monitor: &Monitor) -> Result<Peer> {
        let client = monitored_client(lib, uri, monitor).await?;
        let db = client.database(lib.db());
        let state = match lib {
            Lib::Mongolock => State::Mongolock(mongolock::LockClient::new(db.collection("locks"))),
            Lib::MongodbLock => State::MongodbLock(Arc::new(
                mongodb_lock::Mutex::new_uninit(&db, "locks").await,
            )),
            Lib::MongoLockAsync => State::MongoLockAsync,
            Lib::DistributedLockMongo => State::DistributedLockMongo(db),
        };
        Ok(Peer {
            lib,
            client,
            monitor: monitor.clone(),
            state,
        })
    }

    /// One-time setup each library documents (indexes), not measured.
    pub(crate) async fn prepare(&self) -> Result<()> {
        match &self.state {
            State::Mongolock(locks) => locks.create_indexes().await?,
            State::MongodbLock(_) => {
                // `Mutex::new` creates the unique index on `key`.
                let db = self.client.database(self.lib.db());
                mongodb_lock::Mutex::<String>::new(&db, "locks").await?;
            }
            State::MongoLockAsync => mongo_lock_async::prepare_database(&self.client).await?,
            // No index to create: the lock document's `_id` is the resource.
            State::DistributedLockMongo(_) => {}
        }
        Ok(())
    }

    /// One attempt: `Some` if granted, `None` if another holder has it.
    pub(crate) async fn try_acquire(&self, resource: &str) -> Result<Option<Held<'_>>> {
        Ok(match &self.state {
            State::Mongolock(locks) => locks
                .mutex(resource)
                .ttl(TTL)
                .try_acquire()
                .await?
                .map(Held::Mongolock),
            State::MongodbLock(mutex) => {
                // No try-once call: a timeout shorter than the wait makes `lock` try exactly
                // once (it checks the timeout only before each try, and sleeps `wait` after a
                // refused one).
                match mutex
                    .lock(
                        Duration::from_millis(50),
                        Duration::from_millis(100),
                        resource.to_string(),
                    )
                    .await
                {
                    Ok(guard) => Some(Held::MongodbLock(guard)),
                    Err(mongodb_lock::MutexLockError::LockTimeout) => None,
                    Err(e) => return Err(e.into()),
                }
            }
            State::MongoLockAsync => {
                mongo_lock_async::Lock::try_acquire(&self.client, resource, TTL)
                    .await?
                    .map(Held::MongoLockAsync)
            }
            State::DistributedLockMongo(db) => dlm(resource, db)
                .try_acquire()
                .await?
                .map(Held::DistributedLockMongo),
        })
    }

    /// Waits for the lock with the library's own waiting (see [`Lib::waiting`]).
    pub(crate) async fn acquire(&self, resource: &str) -> Result<Held<'_>> {
        Ok(match &self.state {
            State::Mongolock(locks) => {
                Held::Mongolock(locks.mutex(resource).ttl(TTL).acquire().await?)
            }
            State::MongodbLock(mutex) => Held::MongodbLock(
                mutex
                    .lock(WAIT_LIMIT, mongodb_lock::DEFAULT_WAIT, resource.to_string())
                    .await?,
            ),
            State::MongoLockAsync => {
                match mongo_lock_async::Lock::try_acquire_with_timeout(
                    &self.client,
                    resource,
                    TTL,
                    WAIT_LIMIT,
                    MONGO_LOCK_ASYNC_POLL,
                )
                .await?
                {
                    Some(lock) => Held::MongoLockAsync(lock),
                    None => return Err("mongo-lock-async: wait timed out".into()),
                }
            }
            State::DistributedLockMongo(db) => {
                Held::DistributedLockMongo(dlm(resource, db).acquire(None).await?)
            }
        })
    }

    /// Releases `held` and returns once the release is done on the server.
    ///
    /// `mongodb-lock` releases in its guard's `Drop`, from a blocking task it does not wait
    /// for; this waits for that `delete` to complete (seen through command monitoring).
    pub(crate) async fn release(&self, held: Held<'_>) -> Result<()> {
        match held {
            Held::Mongolock(guard) => guard.release().await?,
            Held::MongodbLock(guard) => {
                let id = guard.id;
                drop(guard);
                self.monitor.wait_deleted(id).await;
            }
            Held::MongoLockAsync(lock) => {
                lock.release().await?;
            }
            Held::DistributedLockMongo(handle) => handle.release().await?,
        }
        Ok(())
    }

    /// Takes `k` resources under one lock id (low-level API) and renews them all; `None` for
    /// a library without renew. Returns the commands the renew alone sent.
    pub(crate) async fn renew_group(&self, k: usize, tag: &str) -> Result<Option<u64>> {
        let State::Mongolock(locks) = &self.state else {
            return Ok(None);
        };
        let lock_id = format!("renew-{tag}-{k}");
        for i in 0..k {
            let details = mongolock::LockDetails::default().ttl(TTL);
            let _grant = locks
                .xlock(&format!("renew-{tag}-{k}-{i}"), &lock_id, details)
                .await?;
        }
        let before = self.monitor.snapshot();
        let renewed = locks.renew(&lock_id, TTL).await?;
        let sent = self.monitor.snapshot().since(&before).total();
        if renewed != k as u64 {
            return Err(format!("renewed {renewed} of {k} locks").into());
        }
        locks.unlock(&lock_id).await?;
        Ok(Some(sent))
    }

    /// Closes the client (and, for ours, waits for background releases).
    ///
    /// The driver's shutdown can wait many seconds after operations were dropped mid-flight
    /// (as the throughput and load runs do at their end); it gets [`CLOSE_LIMIT`], then the
    /// client is dropped.
    pub(crate) async fn close(self) {
        if let State::Mongolock(locks) = &self.state {
            locks.shutdown().await;
        }
        let _ = tokio::time::timeout(CLOSE_LIMIT, self.client.shutdown().immediate(true)).await;
    }
}

/// A new driver client for `lib` on the server at `uri`, its commands counted by `monitor`.
pub(crate) async fn monitored_client(
    lib: Lib,
    uri: &str,
    monitor: &Monitor,
) -> Result<mongodb::Client> {
    let mut options = ClientOptions::parse(uri).await?;
    options.command_event_handler = Some(monitor.handler());
    options.app_name = Some(format!("bench-{}", lib.db()));
    if lib == Lib::MongoLockAsync {
        options.default_database = Some(lib.db().to_string());
    }
    Ok(mongodb::Client::with_options(options)?)
}

fn dlm(resource: &str, db: &mongodb::Database) -> distributed_lock_mongo::MongoDistributedLock {
    distributed_lock_mongo::MongoDistributedLock::new(resource.to_string(), db.clone(), None, None)
}
