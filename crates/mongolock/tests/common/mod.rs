//! Where the integration tests run: on a fresh emulator, or on the real MongoDB named by
//! `MONGODB_URI` (then each test gets a database of its own, dropped first). Tests that need
//! the emulator (its clock, fail points or fault proxy) are named `emulator_only_...`: those
//! that take [`emulator_env`] skip themselves on a real server, and a few start an emulator
//! of their own whatever `MONGODB_URI` says (they add no coverage of a real server).

#![allow(dead_code)]

pub mod recorder;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bson::Document;
use mongodb::{Collection, Database};
use mongolock::LockClient;

/// One test's lock client and what it runs on.
pub struct Env {
    /// Locks in the collection `locks` of the test's database.
    pub locks: LockClient,
    /// The test's database.
    pub db: Database,
    server: Option<mongolock_testkit::TestServer>,
}

impl Env {
    /// The lock collection, for looking at or tampering with documents directly.
    pub fn collection(&self) -> Collection<Document> {
        self.db.collection("locks")
    }

    /// Whether the server's clock can be moved (only the emulator's can).
    pub fn has_clock(&self) -> bool {
        self.server.is_some()
    }

    /// Steps the server's clock back. Only for `emulator_only_` tests.
    pub fn step_back(&self, by: Duration) {
        self.server
            .as_ref()
            .expect("the server's clock can only be moved on the emulator")
            .clock()
            .step_back(by);
    }

    /// Moves the server's clock forward. Only for `emulator_only_` tests.
    pub fn advance(&self, by: Duration) {
        self.server
            .as_ref()
            .expect("the server's clock can only be moved on the emulator")
            .clock()
            .advance(by);
    }

    /// Waits (boundedly) until the TTL monitor has deleted the documents matching `filter`;
    /// false if they are still there after many passes.
    pub async fn wait_for_ttl_monitor(
        &self,
        collection: &Collection<Document>,
        filter: Document,
    ) -> bool {
        for _ in 0..250 {
            if collection
                .count_documents(filter.clone())
                .await
                .expect("count")
                == 0
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// The server's URI: the emulator's, or `MONGODB_URI`.
    pub fn uri(&self) -> String {
        match &self.server {
            Some(server) => server.uri(),
            None => std::env::var("MONGODB_URI").expect("a real server is configured"),
        }
    }

    /// A client on the same server and database whose commands are recorded (the driver's
    /// command monitoring), with its own connection pool.
    pub async fn monitored(&self) -> (Monitor, Database) {
        let uri = match &self.server {
            Some(server) => server.uri(),
            None => std::env::var("MONGODB_URI").expect("a real server is configured"),
        };
        let (monitor, client) = recorder::recorded_client(&uri, None).await;
        (monitor, client.database(self.db.name()))
    }

    /// A second client on the same database, with its own connection pool.
    pub async fn other_client(&self) -> LockClient {
        if let Some(server) = &self.server {
            let db = server.new_client().database(self.db.name());
            return LockClient::new(db.collection("locks"));
        }
        let uri = std::env::var("MONGODB_URI").expect("a real server is configured");
        let client = mongodb::Client::with_uri_str(&uri)
            .await
            .expect("MONGODB_URI is valid");
        LockClient::new(client.database(self.db.name()).collection("locks"))
    }
}

/// The commands a monitored client started, in order.
pub type Monitor = recorder::Recorder;

/// Where a test that builds its own clients connects: the server named by `MONGODB_URI`, or a
/// fresh emulator (returned too, so that it lives as long as the test holds it).
pub async fn server_uri() -> (String, Option<mongolock_testkit::TestServer>) {
    match std::env::var("MONGODB_URI") {
        Ok(uri) if !uri.is_empty() => (uri, None),
        _ => {
            let server = mongolock_testkit::TestServer::start()
                .await
                .expect("emulator starts");
            (server.uri(), Some(server))
        }
    }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The environment for a test named `name`: the emulator, or `MONGODB_URI` when set.
pub async fn env(name: &str) -> Env {
    let db_name = format!(
        "mongolock_{name}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    if let Ok(uri) = std::env::var("MONGODB_URI")
        && !uri.is_empty()
    {
        let client = mongodb::Client::with_uri_str(&uri)
            .await
            .expect("MONGODB_URI is valid");
        let db = client.database(&db_name);
        db.drop().await.expect("drop the test database");
        return Env {
            locks: LockClient::new(db.collection("locks")),
            db,
            server: None,
        };
    }
    // The TTL monitor runs every 20 ms so that tests of cleanup need not wait.
    let server = mongolock_testkit::TestServer::builder()
        .ttl_monitor_interval(Duration::from_millis(20))
        .start()
        .await
        .expect("emulator starts");
    let db = server.client().database(&db_name);
    Env {
        locks: LockClient::new(db.collection("locks")),
        db,
        server: Some(server),
    }
}

/// The environment for a test that moves the server's clock: `None` (the test skips) on a
/// real server.
pub async fn emulator_env(name: &str) -> Option<Env> {
    let env = env(name).await;
    if env.has_clock() {
        Some(env)
    } else {
        eprintln!("skipped: {name} needs the emulator's clock");
        None
    }
}

/// The argument name of an `InvalidArgument` error (panics on any other error).
pub fn invalid_argument(error: &mongolock::Error) -> &'static str {
    match error.kind() {
        mongolock::ErrorKind::InvalidArgument { argument, .. } => argument,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// Seconds as a `Duration`.
pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Asserts that an exclusive lock on `resource` for `lock_id` is refused because someone
/// holds it (and not for any other reason).
pub async fn assert_xlock_refused(locks: &LockClient, resource: &str, lock_id: &str) {
    let error = locks
        .xlock(resource, lock_id, mongolock::LockDetails::default())
        .await
        .expect_err("the resource is held, so the lock must be refused");
    assert!(
        error.is_already_locked(),
        "refused for another reason: {error:?}"
    );
}

/// An emulator, a lock client that reaches it through a fault proxy (cut it off to make its
/// process as good as dead), and one that goes straight to it, both on the database `db`:
/// `None` (the test skips, and says so) on a real server, which has no movable clock.
pub async fn proxied(db: &str) -> Option<Proxied> {
    if std::env::var("MONGODB_URI").is_ok_and(|uri| !uri.is_empty()) {
        eprintln!("skipped: {db} needs the emulator's clock and a fault proxy");
        return None;
    }
    let server = mongolock_testkit::TestServer::start()
        .await
        .expect("emulator starts");
    let proxy = mongolock_testkit::FaultProxy::start(server.addr())
        .await
        .expect("proxy starts");
    let cut_off = LockClient::new(proxy.client().database(db).collection("locks"));
    let direct = LockClient::new(server.new_client().database(db).collection("locks"));
    Some(Proxied {
        server,
        proxy,
        cut_off,
        direct,
    })
}

/// What [`proxied`] starts.
pub struct Proxied {
    /// The emulator (its clock moves).
    pub server: mongolock_testkit::TestServer,
    /// The fault proxy in front of it.
    pub proxy: mongolock_testkit::FaultProxy,
    /// A client through the proxy: the one to cut off.
    pub cut_off: LockClient,
    /// A client straight to the server.
    pub direct: LockClient,
}
