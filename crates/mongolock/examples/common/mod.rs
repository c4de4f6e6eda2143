//! How every example starts: a server (the embedded emulator, or the real one `MONGODB_URI`
//! names), and the example's own database on it, emptied, with the lock collection's
//! indexes.

// Each example uses the part it needs.
#![allow(dead_code)]

use mongodb::{Client, Database};
use mongolock::LockClient;
use mongolock_testkit::TestServer;

/// What [`start`] gives an example.
pub struct Start {
    /// The server's URI, for the clients of the example's other "processes".
    pub uri: String,
    /// A client of the server.
    pub client: Client,
    /// The example's database, emptied.
    pub db: Database,
    /// The lock client on `db`'s `locks` collection, whose indexes are created.
    pub locks: LockClient,
    /// The embedded emulator when `MONGODB_URI` is not set: it runs while this lives.
    emulator: Option<TestServer>,
}

/// Connects to `MONGODB_URI`, or starts the emulator, then empties the database `db_name`
/// and creates the lock collection's indexes in it.
pub async fn start(db_name: &str) -> Result<Start, Box<dyn std::error::Error>> {
    let (client, uri, emulator) = match std::env::var("MONGODB_URI") {
        Ok(uri) if !uri.is_empty() => (Client::with_uri_str(&uri).await?, uri, None),
        _ => {
            let server = TestServer::start().await?;
            (server.client(), server.uri(), Some(server))
        }
    };
    let db = client.database(db_name);
    db.drop().await?;
    let locks = LockClient::new(db.collection("locks"));
    locks.create_indexes().await?;
    Ok(Start {
        uri,
        client,
        db,
        locks,
        emulator,
    })
}

impl Start {
    /// Shuts down in the order `LockClient::shutdown` asks for: the lock client (it sends
    /// what it still owes), then the driver's client, then the emulator.
    pub async fn shutdown(self) {
        self.locks.shutdown().await;
        self.client.shutdown().await;
        if let Some(emulator) = self.emulator {
            emulator.shutdown().await;
        }
    }
}
