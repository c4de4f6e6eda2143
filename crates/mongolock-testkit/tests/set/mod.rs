//! What the replica-set tests share: a set of three whose partitioned primary steps down
//! quickly, a client for one member, and the shapes of mongod's replies they compare.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use bson::{Document, doc, oid::ObjectId};
use mongodb::Client;
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::options::{ClientOptions, ServerAddress};
use mongolock_testkit::ReplicaSet;

/// The partition tests' election timeout: a cut-off primary steps down, and the majority
/// elects, well within a test.
pub const ELECTION_TIMEOUT: Duration = Duration::from_millis(600);

/// Three members whose primary, cut off from the others, steps down after
/// [`ELECTION_TIMEOUT`].
pub async fn three_with_quick_elections() -> ReplicaSet {
    ReplicaSet::builder()
        .members(3)
        .election_timeout(ELECTION_TIMEOUT)
        .start()
        .await
        .unwrap()
}

/// Options for a client of member `index` alone (a direct connection, named `direct-{index}`),
/// whose writes are not retried: a test sees each member's own answer.
pub fn member_options(set: &ReplicaSet, index: usize) -> ClientOptions {
    ClientOptions::builder()
        .hosts(vec![ServerAddress::Tcp {
            host: "127.0.0.1".into(),
            port: Some(set.member(index).addr().port()),
        }])
        .direct_connection(true)
        .retry_writes(false)
        .app_name(format!("direct-{index}"))
        .server_selection_timeout(Duration::from_secs(5))
        .build()
}

/// A client of member `index` alone that retries neither writes nor reads.
pub fn direct(set: &ReplicaSet, index: usize) -> Client {
    let mut options = member_options(set, index);
    options.retry_reads = Some(false);
    Client::with_options(options).unwrap()
}

/// Every document of collection `d.{coll}` as `client` reads it, by `_id`.
pub async fn sorted(client: &Client, coll: &str) -> Vec<Document> {
    use futures_util::TryStreamExt;
    client
        .database("d")
        .collection::<Document>(coll)
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// The member's `hello` reply.
pub async fn hello(client: &Client) -> Document {
    client
        .database("admin")
        .run_command(doc! {"hello": 1})
        .await
        .unwrap()
}

/// The server's error code of a failed command, write or write concern.
pub fn code_of(error: &mongodb::error::Error) -> i32 {
    match error.kind.as_ref() {
        ErrorKind::Command(e) => e.code,
        ErrorKind::Write(WriteFailure::WriteError(e)) => e.code,
        ErrorKind::Write(WriteFailure::WriteConcernError(e)) => e.code,
        other => panic!("not a server error: {other:?}"),
    }
}

/// The `electionId` of a primary elected in `term` (`OID::fromTerm`, `src/mongo/bson/oid.cpp`:
/// `7fffffff`, then the term's eight bytes, big-endian).
pub fn election_id(term: i64) -> ObjectId {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
    bytes[4..].copy_from_slice(&term.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

/// The member elected primary in place of `old`, waiting `timeout` at most.
pub async fn new_primary(set: &ReplicaSet, old: usize, timeout: Duration) -> usize {
    let until = Instant::now() + timeout;
    loop {
        if let Some(p) = set.primary().filter(|&p| p != old) {
            return p;
        }
        assert!(Instant::now() < until, "no new primary");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
