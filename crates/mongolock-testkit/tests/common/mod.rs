//! Where the conformance tests run: on a fresh emulator, or on the real MongoDB named by
//! `MONGODB_URI` (a replica set, started with `--setParameter enableTestCommands=1` for the
//! fail-point tests, which change server-wide state: run those with `--test-threads=1`
//! there). Each test gets a database of its own.

#![allow(dead_code)]

use bson::{Document, doc};
use mongodb::{Client, Collection, Database};
use mongolock_testkit::TestServer;

/// One test's server, client and database.
pub struct Target {
    /// The emulator, when no `MONGODB_URI` is set.
    pub server: Option<TestServer>,
    /// A client for the target.
    pub client: Client,
    /// A database private to this test.
    pub db: Database,
}

impl Target {
    /// A collection of the test's database.
    pub fn coll(&self, name: &str) -> Collection<Document> {
        self.db.collection(name)
    }

    /// Runs a command and returns the server's error code (panics if it succeeded).
    pub async fn error_code(&self, cmd: Document) -> (i32, String) {
        match self.db.run_command(cmd.clone()).await {
            Ok(reply) => panic!("{cmd} succeeded: {reply}"),
            Err(error) => command_error(&error),
        }
    }

    /// Whether this target is the emulator (emulator-only tests skip otherwise).
    pub fn is_emulator(&self) -> bool {
        self.server.is_some()
    }
}

/// Code and message of a server error, whatever shape the driver gave it.
pub fn command_error(error: &mongodb::error::Error) -> (i32, String) {
    use mongodb::error::{ErrorKind, WriteFailure};
    match error.kind.as_ref() {
        ErrorKind::Command(e) => (e.code, e.message.clone()),
        ErrorKind::Write(WriteFailure::WriteError(e)) => (e.code, e.message.clone()),
        ErrorKind::InsertMany(e) => {
            let first = &e.write_errors.as_ref().expect("write errors")[0];
            (first.code, first.message.clone())
        }
        other => panic!("not a server error: {other:?}"),
    }
}

/// The target for a test named `name`.
pub async fn target(name: &str) -> Target {
    let db_name = format!("conf_{name}_{}", std::process::id());
    match std::env::var("MONGODB_URI") {
        Ok(uri) if !uri.is_empty() => {
            let client = Client::with_uri_str(&uri)
                .await
                .expect("MONGODB_URI is valid");
            let db = client.database(&db_name);
            db.drop().await.expect("drop the test database");
            Target {
                server: None,
                client,
                db,
            }
        }
        _ => {
            let server = TestServer::start().await.expect("emulator starts");
            let client = server.client();
            let db = client.database(&db_name);
            Target {
                server: Some(server),
                client,
                db,
            }
        }
    }
}

/// An admin command document that turns `failCommand` off.
pub fn fail_command_off() -> Document {
    doc! {"configureFailPoint": "failCommand", "mode": "off"}
}
