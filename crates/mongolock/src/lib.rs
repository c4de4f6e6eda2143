//! Distributed locks stored in MongoDB, decided by the server's clock, with fencing tokens
//! and leases that tell their holder in time when they are lost.
//!
//! A [`LockClient`] wraps one collection; every lock is a document in it, and every decision
//! is made by the server in one atomic command. Start with a handle:
//!
//! | you want | use | a guard is |
//! |---|---|---|
//! | one holder at a time (a migration, a job that must not overlap itself) | [`LockClient::mutex`] | exclusive |
//! | a scheduled job run at most once per period on one of several hosts (cron on three hosts) | [`LockClient::mutex`] with [`min_hold`](Mutex::min_hold) a little shorter than the period, and `try_acquire` | exclusive, kept for the hold after release |
//! | many readers or one writer, writers not starved (a config, a cache rebuild) | [`LockClient::rwlock`] | shared (read) or exclusive (write) |
//! | at most N holders at once (GPUs, API quota, connections) | [`LockClient::semaphore`] | shared, counted against N |
//! | one leader among replicas, with a term, a value and a way to watch it | [`LockClient::election`] | a [`Leadership`]: exclusive |
//! | several resources at once, all or nothing, without deadlock | [`LockClient::multi`] | a [`MultiGuard`]: exclusive on each |
//! | to decide yourself, one command per call (groups of locks, your own waiting) | [`LockClient::xlock`], [`LockClient::slock`], [`LockClient::acquire`] and the table below | a [`Grant`]; nothing is renewed for you |
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
//! # let server = mongolock_testkit::TestServer::start().await.unwrap();
//! # let client = server.client();
//! use std::time::Duration;
//! use mongolock::LockClient;
//!
//! let locks = LockClient::new(client.database("app").collection("locks"));
//! locks.create_indexes().await?; // once, idempotent
//!
//! // Waits as long as needed; the lease is renewed in the background every 10 s.
//! let guard = locks.mutex("nightly-report").ttl(Duration::from_secs(30)).acquire().await?;
//! let token = guard.fencing_token(); // pass it to what you protect
//! // ... work; check guard.is_lost() between steps, or race the work against guard.lost() ...
//! guard.release().await?;
//!
//! // Many readers, or one writer.
//! let config = locks.rwlock("config");
//! let reading = config.read().await?;
//! assert!(config.try_write().await?.is_none());
//! reading.release().await?;
//!
//! // At most two at once.
//! let gpus = locks.semaphore("gpu", 2);
//! let permit = gpus.acquire_timeout(Duration::from_secs(5)).await?.expect("a free permit");
//! permit.release().await?;
//!
//! // Or run work under the lock, stopped if the lease is lost.
//! let rows = locks.mutex("import").run(|token| async move { 42 }).await?;
//! # let _ = (token, rows);
//!
//! // Shutting down, in this order: the lock client waits for releases left to the background
//! // by dropped guards and closes its change stream; then the driver's client can shut down.
//! locks.shutdown().await;
//! client.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Leases
//!
//! A guard holds a lease: the lock lasts its TTL (thirty seconds by default) past the last
//! renewal, so the lock of a holder that dies frees itself. While the guard is held, the
//! client renews it in the background (every third of the TTL), together with every other
//! lease of the same client, in one command whatever their number. The guard keeps a
//! deadline on the monotonic clock: the send time of the last successful renewal, plus the
//! TTL, minus a safety margin. When it passes, or the server says the lease is gone (an
//! operator's [`LockClient::force_release`], a purge), the guard is lost:
//! [`LockGuard::is_lost`] turns true and [`LockGuard::lost`] resolves, before the server can
//! grant the lock to anyone else. [`LockGuard::state`] also tells when renewals are failing
//! but the deadline is still ahead ([`LeaseState::Suspended`]).
//!
//! A lease can still be lost while work is under way (a pause longer than the TTL): pass the
//! fencing token to the store you protect and have it reject tokens lower than the highest it
//! has seen.
//! For a store that is a MongoDB collection, [`Fence`] builds writes that do that.
//!
//! # Waiting
//!
//! `acquire` waits as long as needed, `acquire_timeout` up to a deadline, `try_acquire` makes
//! one attempt. Waiters are served in the order they joined the resource's line, whatever
//! their client: a waiting acquire joins with its first refused attempt, keeps its place
//! while it waits and leaves it when it gives up; a single attempt joins no line and is
//! refused while anybody waits. A refused attempt learns from the server how long the
//! current lease has left and never sleeps past it. On a replica set, a change that lets the
//! head of the line in (a release, a waiter ahead leaving the line, a reader granted just
//! ahead of another) names the head's client, and only that client's change stream (one per
//! client) delivers it: one release wakes one waiter. A re-check every [`RECHECK`] at most
//! is the safety net. On a standalone
//! server, the head of the line polls briskly and each place behind it less often (up to
//! [`MAX_BACKOFF`]). Waiters of one client on one resource take turns, so they do not all
//! ask the server at once. Dropping an acquire at any point leaves no lock behind.
//!
//! # The low-level API
//!
//! A *resource* (any string: a job name, a table, a file) is locked by a *lock id*: a string
//! that names one holder. **A lock id belongs to one holder and is never shared between
//! processes or tasks**: the server takes every call with a lock id as coming from the same
//! holder (asking again returns the lock it holds, unlocking releases all of its locks). The
//! handles give each guard a random one (128 bits), unless `.lock_id(..)` names one (to
//! resume a lease after a restart: [`Mutex::lock_id`]). Locks are
//!
//! - **exclusive** ([`LockClient::xlock`]): one holder and nobody else, or
//! - **shared** ([`LockClient::slock`]): any number of holders, or at most `max` (a
//!   semaphore; the cap is stored with the resource), and no exclusive holder.
//!
//! One lock id can hold many resources: a *group* that [`LockClient::unlock`] and
//! [`LockClient::renew`] treat as one. Nothing is renewed in the background at this level.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
//! # let server = mongolock_testkit::TestServer::start().await.unwrap();
//! # let client = server.client();
//! use std::time::Duration;
//! use mongolock::{Filter, LockClient, LockDetails};
//!
//! let locks = LockClient::new(client.database("app").collection("locks"));
//!
//! // Writer: one at a time. The TTL frees the lock if this process dies.
//! let details = LockDetails::default().ttl(Duration::from_secs(30)).owner("me");
//! let grant = locks.xlock("resource1", "lock-id", details).await?;
//! let token = grant.fencing_token(); // hand it to what you protect
//!
//! // Readers: up to 5 at once.
//! let _ = locks.slock("resource2", "lock-id", LockDetails::default(), Some(5)).await?;
//!
//! let held = locks.status(&Filter::default().owner("me")).await?;
//! assert_eq!(held.len(), 1);
//! locks.renew("lock-id", Duration::from_secs(30)).await?;
//! let released = locks.unlock("lock-id").await?; // both locks, in one command
//! assert_eq!(released, 2);
//! # let _ = token;
//! # Ok(()) }
//! ```
//!
//! # Which low-level call to use
//!
//! | you want to | call | round trips |
//! |---|---|---|
//! | take a lock, or fail with who holds it | [`xlock`](LockClient::xlock), [`slock`](LockClient::slock) | 1 |
//! | take a lock and handle contention yourself (to wait, to choose the nonce) | [`acquire`](LockClient::acquire) | 1 |
//! | release one grant | [`release`](LockClient::release) | 1 |
//! | undo an attempt whose outcome you do not know | [`release_attempt`](LockClient::release_attempt) | 1 |
//! | release every lock of a lock id | [`unlock`](LockClient::unlock) | 1 |
//! | extend every live lock of a lock id | [`renew`](LockClient::renew) | 1 |
//! | see who holds what, and for how long | [`status`](LockClient::status) | 1 |
//! | break every lock on a resource, whoever holds it (operators) | [`force_release`](LockClient::force_release) | 1 |
//! | clear expired locks (never a live one) | [`purge`](LockClient::purge) | 1 |
//! | clear expired locks and end their lock ids' other locks (the Go library's rule) | [`purge_abandoned_groups`](LockClient::purge_abandoned_groups) | 2 |
//! | set up the collection (once, idempotent; it also checks that the server runs the commands) | [`create_indexes`](LockClient::create_indexes) | 2 |
//!
//! Every call is decided by the server inside its write: nothing is read first and acted on
//! later, so a lock the client never saw (a grant still in flight, a read served late) is
//! judged like any other. Group calls send one command whose size does not depend on the
//! number of locks in the group. `purge_abandoned_groups` needs one more `update` per further
//! 1,000 abandoned lock ids.
//!
//! # Unknown outcomes and late copies
//!
//! A write that fails after it was sent (a timeout, a dropped connection, a write concern
//! error: [`Error::is_outcome_unknown`]) may have been applied, and a copy of it may still
//! reach the server later, after the caller moved on: a network can hold a request past the
//! caller's timeout and deliver it then. What holds, per call:
//!
//! - **[`xlock`](LockClient::xlock) and [`slock`](LockClient::slock)**: repeating a call
//!   whose outcome was unknown is safe. Such a call withdraws its attempt in the background
//!   (as a dropped call does), which removes its lock if it was granted and leaves a
//!   tombstone that refuses any late copy of it; the client's next attempt of the same lock
//!   id on the same resource waits for that withdrawal first, and is then granted anew (a
//!   new token) or refused as usual. A late copy never holds a lock after an `unlock`.
//! - **[`acquire`](LockClient::acquire)**, with a request you keep: repeat *the same
//!   request* (its nonce) after an unknown outcome; the server answers for that attempt
//!   ([`Attempt::Granted`] if an earlier copy got through, never a second grant). When you
//!   end such an attempt, end it with [`release_attempt`](LockClient::release_attempt),
//!   which removes its lock and retires its nonce (a tombstone): [`release`](LockClient::release)
//!   and [`unlock`](LockClient::unlock) remove the lock but leave the nonce usable, so a late
//!   copy could take the lock again and hold it, nobody renewing it, until its TTL (for ever
//!   without one). A request whose every copy had a known outcome needs no such care.
//! - **Handles and guards** do this for you: a guard whose attempt ever had an unknown
//!   outcome, and a resumed lease, retire their attempt when released; a dropped acquire
//!   withdraws its attempt.
//! - **One client owes what it left to the background**: a release or a withdrawal that could
//!   not be done at once is retried by the client, and any attempt of that client under the
//!   same lock id on the same resource carries it out (or waits for it) before it is sent, so
//!   the owed write can never land after the attempt and remove what it was granted or
//!   resumed. Another process using the same lock id is not covered: a lock id belongs to
//!   one holder.
//!
//! - **[`unlock`](LockClient::unlock)** removes what the lock id holds when it runs, except
//!   what this client was granted under that lock id after the `unlock` was sent: until
//!   every copy of an `unlock` was answered (and for five minutes after one had an unknown
//!   outcome), the client's attempts of the lock id name it, and a late copy of it leaves
//!   what they were granted. Another process reusing the lock id is not covered: a lock id
//!   belongs to one holder.
//! - The client never repeats an attempt by itself after an unknown outcome (other writes,
//!   whose late copies do no harm, it repeats once): the error comes back to whoever sent
//!   the attempt, your code or a handle's waiting call, so that whatever the next copy is
//!   told (granted, or refused because the lock is taken), the copy that may still land is
//!   accounted for as above.
//!
//! A tombstone lives the attempt's TTL, and at least five minutes: a copy later than that is
//! not refused. A resource keeps at most [`MAX_TOMBSTONES`] in force; a withdrawal past them
//! *seals* it instead: until the last attempt it stands for could still land, every new
//! attempt on it is refused with [`ErrorKind::Sealed`] (saying until when, by the server's
//! clock), late copies included, while locks already granted stay held. The document stays
//! bounded, and no late copy is ever let through to make room.
//!
//! # What is promised
//!
//! - **Exclusion, by the server's clock.** Every acquire is one `findAndModify` whose update
//!   is an aggregation pipeline: it drops expired entries, decides and writes in one atomic
//!   step using `$$NOW`. Client clocks decide nothing. An expired lock never blocks anybody,
//!   whatever its kind.
//! - **Loss is noticed.** A lease that expires (server unreachable, replies slow, the process
//!   paused, the machine suspended) is reported lost no later than its local deadline, which
//!   comes before the server's expiry: before anyone else can be granted the lock. A lease
//!   that is revoked (an operator's force release or group purge) cannot be reported before
//!   the operator acts: it is reported at the keeper's next renewal, and
//!   [`LockGuard::release`] never returns `Ok` for a grant the server no longer held.
//! - **Fencing.** Every grant carries a token greater than every token granted before on its
//!   resource, also after the resource's document was deleted: the token is
//!   `max(last + 1, server time in µs)`. A lock can still be lost while you work (a pause
//!   longer than the TTL): pass the token to the store you protect and have it reject
//!   tokens lower than the highest it has seen.
//! - **Idempotent acquire.** Asking again with a lock id that holds the resource returns the
//!   existing grant (same token) instead of failing, so after a timeout or dropped
//!   connection ([`Error::is_outcome_unknown`]) you just repeat the call.
//!   [`acquire`](LockClient::acquire) tells a repeat of the same attempt (same nonce,
//!   [`Attempt::Granted`]) from another attempt by a lock id that already holds the resource
//!   ([`Attempt::AlreadyHeld`]), and from one that holds it with the other kind
//!   ([`Attempt::HeldWithOtherKind`]; locks are never upgraded or downgraded).
//! - **Bounded in time.** Every command carries a time limit (`maxTimeMS`, `wtimeout`, and a
//!   client-side timer; [`LockClient::with_command_timeout`]). An error says whether the
//!   write may have been applied ([`Error::is_outcome_unknown`]): an error reply from the
//!   server is definite, a lost connection, a timeout or a write concern error is not.
//! - **Durable grants.** Writes wait for a majority and the journal unless you opt out with
//!   [`LockClient::with_unsafe_write_concern`].
//! - **Nothing stranded.** A lock with a TTL ends by itself; [`LockClient::purge`] clears
//!   expired locks and never ends a live lease; the TTL index that
//!   [`LockClient::create_indexes`] makes deletes resource documents idle for the retention
//!   period (a day by default). An attempt whose outcome is unknown is
//!   withdrawn for good by [`LockClient::release_attempt`]: a late copy of it is refused.
//!
//! # When not to use it
//!
//! A lock here is a lease on a remote service: taking one costs a majority write (one round
//! trip, milliseconds), and a holder that stalls past its TTL loses it; the guard tells, but
//! only fencing tokens checked downstream stop a stalled holder's late writes. For locking inside one process use
//! `tokio::sync::Mutex`; for exactly-once effects, prefer idempotent writes guarded by the
//! fencing token.
//!
//! # Errors
//!
//! Every call returns [`Error`]; [`Error::kind`] says what happened. A busy resource is
//! [`ErrorKind::AlreadyLocked`], carrying the first holders, their number and how long until
//! the resource frees, computed by the server ([`LockClient::acquire`] reports the same as a
//! value, [`Contention`], for callers that wait). A lock id asking for the kind of lock other
//! than the one it holds gets [`ErrorKind::HeldWithOtherKind`], and a shared request whose cap
//! differs from the one stored with the resource [`ErrorKind::CapMismatch`]. A lease found
//! lost by [`LockGuard::release`] or [`Mutex::run`] is [`ErrorKind::LeaseLost`], and a write
//! a [`Fence`] refused is [`ErrorKind::StaleToken`]. The server's and the network's failures
//! are [`ErrorKind::Timeout`] and [`ErrorKind::Database`]; [`Error::is_outcome_unknown`] says
//! whether a write may have been applied, [`Error::is_retryable`] whether repeating the call
//! may succeed.
//! Bad input is [`ErrorKind::InvalidArgument`] and nothing is sent. Every write marks the
//! document it writes (`mongolock: 1`); another application's document in the collection
//! (one without the mark) is never changed and is reported as
//! [`ErrorKind::UnexpectedDocument`].
//!
//! # Storage
//!
//! One document per resource; see the `schema` module's source for the fields, and the
//! `command` modules for each command as it goes on the wire. Indexes:
//! [`LockClient::create_indexes`].

// Every fallible public function says when it fails.
#![warn(clippy::missing_errors_doc)]

mod attempt;
mod changes;
mod client;
mod clock;
mod command;
mod election;
mod error;
mod fence;

/// The README's examples, compiled as doc tests (they need a server to run).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The project README's examples (its quickstart), compiled as doc tests too.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ProjectReadmeDoctests;
mod guard;
mod handle;
mod lease;
mod lock;
mod multi;
mod observe;
mod places;
mod query;
mod request;
mod schema;
mod unlocks;
mod wait;

pub use attempt::{Attempt, Contention, MAX_NAMED_HOLDERS};
pub use client::{DEFAULT_COMMAND_TIMEOUT, DEFAULT_RETENTION, LockClient};
pub use election::{DEFAULT_OBSERVE_POLL, Election, Leader, Leadership};
pub use error::{Error, ErrorKind, Result};
pub use fence::{DEFAULT_FENCE_FIELD, Fence, FencedWrite};
pub use guard::LockGuard;
pub use handle::{Mutex, RwLock, Semaphore};
pub use lock::{Grant, Holder, LeaseState, LockKind, LossReason};
pub use multi::{MultiGuard, MultiLock};
pub use query::{Filter, LockStatus, Purged};
pub use request::{AcquireRequest, LockDetails, MAX_ID_LEN, MAX_LABEL_LEN, MAX_TTL, Nonce};
pub use schema::MAX_TOMBSTONES;
pub use wait::{DEFAULT_LEASE_TTL, MAX_BACKOFF, RECHECK};
