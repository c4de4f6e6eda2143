//! Distributed locks stored in MongoDB, decided by the server's clock, with fencing tokens.
//!
//! A [`LockClient`] wraps one collection. A *resource* (any string: a job name, a table, a
//! file) is locked by a *lock id* (a string you choose, unique per holder and attempt of
//! work). Locks are
//!
//! - **exclusive** ([`LockClient::xlock`]): one holder and nobody else, or
//! - **shared** ([`LockClient::slock`]): any number of holders, or at most `max` (a
//!   semaphore), and no exclusive holder.
//!
//! One lock id can hold many resources: a *group* that [`LockClient::unlock`] and
//! [`LockClient::renew`] treat as one.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
//! # let server = mongolock_testkit::TestServer::start().await.unwrap();
//! # let client = server.client();
//! use std::time::Duration;
//! use mongolock::{Filter, LockClient, LockDetails};
//!
//! let locks = LockClient::new(client.database("app").collection("locks"));
//! locks.create_indexes().await?;
//!
//! // Writer: one at a time. The TTL frees the lock if this process dies.
//! let details = LockDetails::default().ttl(Duration::from_secs(30)).owner("me");
//! let grant = locks.xlock("resource1", "lock-id", details).await?;
//! let token = grant.fencing_token(); // hand it to what you protect
//!
//! // Readers: up to 5 at once.
//! locks.slock("resource2", "lock-id", LockDetails::default(), Some(5)).await?;
//!
//! let held = locks.status(&Filter::default().owner("me")).await?;
//! assert_eq!(held.len(), 1);
//! locks.renew("lock-id", Duration::from_secs(30)).await?;
//! let released = locks.unlock("lock-id").await?; // both locks, newest first
//! assert_eq!(released.len(), 2);
//! # let _ = token;
//! # Ok(()) }
//! ```
//!
//! # Which call to use
//!
//! | you want to | call | round trips |
//! |---|---|---|
//! | take a lock, or fail with who holds it | [`xlock`](LockClient::xlock), [`slock`](LockClient::slock) | 1 |
//! | take a lock and handle contention yourself (to wait, to choose the nonce) | [`acquire`](LockClient::acquire) | 1 |
//! | release one grant | [`release`](LockClient::release) | 1 |
//! | undo an attempt whose outcome you do not know | [`release_attempt`](LockClient::release_attempt) | 1 |
//! | release every lock of a lock id | [`unlock`](LockClient::unlock) | 2 |
//! | extend every live lock of a lock id | [`renew`](LockClient::renew) | 2 |
//! | see who holds what, and for how long | [`status`](LockClient::status) | 1 |
//! | clear expired locks and their groups | [`purge`](LockClient::purge) | 3 |
//! | set up the collection (once, idempotent) | [`create_indexes`](LockClient::create_indexes) | 1 |
//!
//! # What is promised
//!
//! - **Exclusion, by the server's clock.** Every acquire is one `findOneAndUpdate` whose update
//!   is an aggregation pipeline: it drops expired entries, decides and writes in one atomic
//!   step using `$$NOW`. Client clocks decide nothing. An expired lock never blocks anybody,
//!   whatever its kind.
//! - **Fencing.** Every grant carries a token greater than every token granted before on its
//!   resource, also after the resource's document was deleted: the token is
//!   `max(last + 1, server time in µs)`. A lock can still be lost while you work (a pause
//!   longer than the TTL): pass the token to the store you protect and have it reject
//!   tokens lower than the highest it has seen.
//! - **Idempotent acquire.** Asking again with a lock id that holds the resource returns the
//!   existing grant (same token) instead of failing, so after a timeout or dropped
//!   connection ([`Error::is_outcome_unknown`]) you just repeat the call.
//! - **Durable grants.** Writes wait for a majority and the journal unless you opt out with
//!   [`LockClient::with_unsafe_write_concern`].
//! - **Nothing stranded.** A lock with a TTL ends by itself; [`LockClient::purge`] clears
//!   expired locks and their groups; a TTL index deletes resource documents idle for the
//!   retention period (a day by default).
//!
//! # When not to use it
//!
//! A lock here is a lease on a remote service: taking one costs a majority write (one round
//! trip, milliseconds), and a holder that stalls past its TTL loses it without noticing unless
//! it renews in time and checks fencing tokens downstream. For locking inside one process use
//! `tokio::sync::Mutex`; for exactly-once effects, prefer idempotent writes guarded by the
//! fencing token.
//!
//! # Errors
//!
//! Every call returns [`Error`]; [`Error::kind`] says what happened. A busy resource is
//! [`ErrorKind::AlreadyLocked`], carrying the holders and the server time at which their
//! leases end ([`LockClient::acquire`] reports the same as a value, for callers that wait).
//! Bad input is [`ErrorKind::InvalidArgument`] and nothing is sent. A document of another
//! shape in the collection is never changed and is reported as
//! [`ErrorKind::UnexpectedDocument`].
//!
//! # Storage
//!
//! One document per resource; see the `schema` module's source for the fields, and the
//! `command` modules for each command as it goes on the wire. Indexes:
//! [`LockClient::create_indexes`].

mod client;
mod command;
mod error;
mod schema;
mod types;

pub use client::{DEFAULT_RETENTION, LockClient};
pub use command::acquire::{AcquireRequest, Attempt, Contention};
pub use error::{Error, ErrorKind, Result};
pub use types::{
    Filter, Grant, Holder, LockDetails, LockKind, LockStatus, MAX_ID_LEN, MAX_LABEL_LEN, MAX_TTL,
    Nonce,
};
