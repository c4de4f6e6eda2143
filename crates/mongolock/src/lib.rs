//! Distributed locks stored in MongoDB, decided by the server's clock, with fencing tokens
//! and leases that tell their holder in time when they are lost.
//!
//! A [`LockClient`] wraps one collection; every lock is a document in it, and every decision
//! is made by the server in one atomic command. Start with a handle:
//!
//! | you want | use | a guard is |
//! |---|---|---|
//! | one holder at a time (a migration, a job that must not overlap itself) | [`LockClient::mutex`] | exclusive |
//! | a scheduled job run at most once per period on one of several hosts (cron on three hosts) | [`LockClient::mutex`] with [`min_hold`](Mutex::min_hold) longer than the spread of the hosts' timers and shorter than the period less that spread, and `try_acquire` | exclusive, kept for the hold after release |
//! | many readers or one writer, writers not starved (a config, a cache rebuild) | [`LockClient::rwlock`] | shared (read) or exclusive (write) |
//! | at most N holders at once (GPUs, API quota, connections) | [`LockClient::semaphore`] | shared, counted against N |
//! | one leader among replicas, with a term, a value and a way to watch it | [`LockClient::election`] | a [`Leadership`]: exclusive |
//! | several resources at once, all or nothing, without deadlock | [`LockClient::multi`] | a [`MultiGuard`]: exclusive on each |
//! | to decide yourself, one command per call (groups of locks, your own waiting) | [`LockClient::xlock`], [`LockClient::slock`], [`LockClient::acquire`] and the table below | a [`Grant`]; nothing is renewed for you |
//!
//! Code that is not async uses the same handles, with calls that block, from the `blocking`
//! module (the `blocking` feature, off by default): see
#![cfg_attr(feature = "blocking", doc = "[`blocking`].")]
#![cfg_attr(not(feature = "blocking"), doc = "`mongolock::blocking`.")]
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
//! // Or run work under the lock: it gets the guard, is stopped if the lease is lost, and the
//! // lock is released when it returns (see "Running work under a lock" on `Mutex`).
//! let rows = locks.mutex("import").run(async |guard| {
//!     // ... writes that carry guard.fencing_token() ...
//!     Ok::<_, mongolock::Error>(42)
//! }).await?;
//! # let _ = (token, rows);
//!
//! // Shutting down: the lock client waits for releases left to the background by dropped
//! // guards and closes its change stream; then the driver's client shuts down at once. (The
//! // other order works too, without those releases: see `LockClient::shutdown`.)
//! locks.shutdown().await;
//! client.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Configuring a client
//!
//! [`LockClient::new`] takes the defaults: majority, journaled writes, a time limit of
//! [`DEFAULT_COMMAND_TIMEOUT`] on every call, idle documents kept for [`DEFAULT_RETENTION`],
//! no clock uncertainty. Anything else is set on a [`LockClientBuilder`], which
//! [`build`](LockClientBuilder::build) checks (a length must be more than zero, an allowance
//! may be zero, and each setting has a range; a value outside it is an
//! [`ErrorKind::InvalidArgument`] naming the setting) and turns into one client: one lease
//! keeper and one change stream, shared by all its clones, which one
//! [`shutdown`](LockClient::shutdown) ends.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
//! # let server = mongolock_testkit::TestServer::start().await.unwrap();
//! # let client = server.client();
//! use std::time::Duration;
//! use mongolock::LockClient;
//!
//! let locks = LockClient::builder(client.database("app").collection("locks"))
//!     .command_timeout(Duration::from_secs(2)) // each call, retries included
//!     .retention(Duration::from_secs(7 * 24 * 3600)) // idle documents, for create_indexes
//!     .clock_uncertainty(Duration::from_secs(1)) // forward steps of the server's clock
//!     .build()?;
//! # let _ = locks;
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
//! operator's [`LockClient::force_release`] or
//! [`purge_abandoned_groups`](LockClient::purge_abandoned_groups); a plain
//! [`purge`](LockClient::purge) never ends a live lease), the guard is lost:
//! [`LockGuard::is_lost`] turns true and [`LockGuard::lost`] resolves. For a lease that runs
//! out, that is before the server can grant the lock to anyone else; for a revoked one, at
//! the next renewal (see [Guarantees](#guarantees) for both, and the conditions).
//! [`LockGuard::state`] also tells when renewals are failing but the deadline is still ahead
//! ([`LeaseState::Suspended`]).
//!
//! A lease can still be lost while work is under way (a pause longer than the TTL), so the
//! lock alone does not keep a late writer out: pass the fencing token to the store you
//! protect and have it reject tokens lower than the highest it has seen.
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
//! # Guarantees
//!
//! This is the one list of what mongolock promises and what it does not; the READMEs and
//! the guides link here. Each promise names the test that shows it
//! (`crates/mongolock/tests/`).
//!
//! ## What holds
//!
//! - **Exclusion, by the server's clock.** Every acquire is one `findAndModify` whose update
//!   is an aggregation pipeline: it drops expired entries, decides and writes in one atomic
//!   step using `$$NOW`. Client clocks decide nothing, and an expired lock never blocks
//!   anybody, whatever its kind (`exclusion.rs`, `expiry.rs`).
//! - **A lease that runs out is reported lost before anyone else can be granted the lock.**
//!   A guard's local deadline is the send time of its last confirmed grant or renewal, plus
//!   the TTL, minus the safety margin (and minus the client's [`clock_uncertainty`]), on a
//!   monotonic clock that counts the time the machine was suspended. The server counts the
//!   TTL from when it runs the command, later, so the deadline comes first. When it passes
//!   (server unreachable, replies slow, the process paused, the machine suspended),
//!   [`LockGuard::is_lost`] is true at once (it reads the clock) and [`LockGuard::lost`]
//!   resolves within a second of the process running again (`leases.rs`, `expiry.rs`).
//!   This holds under the conditions listed below: the server's clock does not step forward
//!   by more than the margin plus the clock uncertainty, and the machine's monotonic clock
//!   counts suspended time.
//! - **A revoked lease is reported at the next renewal.** An operator's
//!   [`force_release`](LockClient::force_release) or
//!   [`purge_abandoned_groups`](LockClient::purge_abandoned_groups) (or a hand edit) ends a
//!   lease on the server, and nobody can be warned before the operator acts. The holder is
//!   told ([`LossReason::Revoked`]) at the keeper's next renewal: at most one renewal period
//!   (a third of the TTL by default) after the revocation, plus that renewal and one read of
//!   the live leases (two round trips, each cut off at the renewal's time limit: the longer
//!   of the renewal period and a quarter of the TTL), and at its local deadline at the
//!   latest. Meanwhile another holder may be granted the lock: fencing tokens, or a
//!   lock-delay at least that long, protect the resource then (`revocation.rs`,
//!   `lock_delay.rs`). [`LockGuard::release`] never returns `Ok` for a grant the server no
//!   longer held: it returns [`ErrorKind::LeaseLost`] with `Revoked` (or `Deadline` if the
//!   reply came after the local deadline).
//! - **Fencing tokens only grow.** Every grant carries a token greater than every token
//!   granted before on its resource, across releases, expiry, purges and force releases
//!   (`fencing.rs`). Once the TTL index has deleted an idle resource's document (after the
//!   retention, a day by default), the next token is `max(last + 1, server time in µs)`: it
//!   is still greater unless the server's clock went back by more than the time since the
//!   last grant, that is, at least the retention (a step back, or a failover to a primary
//!   whose clock is behind).
//! - **A call whose outcome is unknown can be repeated.** An error says whether the write
//!   may have been applied ([`Error::is_outcome_unknown`]). A repeated
//!   [`xlock`](LockClient::xlock) or [`slock`](LockClient::slock) after such an error waits
//!   for the background withdrawal of the first attempt, then is granted anew, with a new
//!   token, or refused as usual (`ambiguous_outcome.rs`). Asking again with a lock id that
//!   holds the resource (a call that succeeded) returns that grant unchanged, same token
//!   (`idempotent_retry.rs`). [`acquire`](LockClient::acquire) with the same request (its
//!   nonce) returns [`Attempt::Granted`] with the same token if an earlier copy got
//!   through, never a second grant. The handles' waiting calls repeat their attempt
//!   themselves. Details in [Unknown outcomes and late copies](#unknown-outcomes-and-late-copies).
//! - **Waiters are served in the order they joined the resource's line,** whatever their
//!   client and their kind: a waiting acquire joins with its first refused attempt and keeps
//!   its place (twice its TTL, refreshed by its client) until it is granted or gives up. A
//!   waiting mutex or writer attempt answered "already held" (a restarted process finding
//!   its lock id's lease, see [`Mutex::lock_id`]) joins too, and resuming the lease takes
//!   the place out: if the lease was let go of meanwhile, the process keeps its turn
//!   (`min_hold.rs`). A place names the call that holds it: a call that gives up takes out
//!   its own place only, so a copy of its leaving that lands late, after the next call of
//!   the same lock id joined, leaves that call where it stands (`late_copies.rs`); a
//!   restarted process's call takes over its predecessor's place. Readers that joined
//!   before a waiting writer go before it, and readers after it wait (writers are not
//!   starved); semaphore permits go in line order; a single
//!   attempt (`try_acquire`) joins no line and is refused while anybody waits
//!   (`fairness.rs`, `writer_announcement.rs`). A waiting [`MultiLock`] holds no lease on part of its set
//!   while it waits, and two sets never deadlock (`multi.rs`).
//! - **Caps.** A semaphore never has more holders than permits, and a request with another
//!   cap than the one stored is refused with [`ErrorKind::CapMismatch`] (`shared_caps.rs`).
//! - **Minimum hold.** A holder with [`min_hold`](Mutex::min_hold) that lets go of its lock
//!   (a release, a dropped guard, [`unlock`](LockClient::unlock),
//!   [`release_attempt`](LockClient::release_attempt) of a granted attempt) within the hold
//!   keeps it in force until grant + hold, by the server's clock: an exclusive lock from
//!   everybody, its own lock id included, whatever the server's clock does meanwhile; a
//!   reader's share or a permit stays taken; a force release or a purge after the let-go
//!   leaves the hold as it is. It does not apply to a holder that dies or is cut off (its
//!   TTL and lock-delay do), nor to a lease force-released while it is held (`min_hold.rs`,
//!   `clock_steps.rs`).
//! - **Lock-delay.** After a lease that ends without a release (it ran out, or was
//!   force-released), nobody, its own lock id included, is granted the lock for the delay
//!   more, by the server's clock; a release frees it at once (`lock_delay.rs`).
//! - **Nothing stranded.** A lock with a TTL ends by itself, and a dropped guard or acquire
//!   leaves no lock behind (`cancellation.rs`, `dropped_runtime.rs`).
//!   [`purge`](LockClient::purge) removes expired entries and **never ends a live lease**;
//!   [`purge_abandoned_groups`](LockClient::purge_abandoned_groups) and
//!   [`force_release`](LockClient::force_release) do end live leases, which their holders
//!   learn as revocations (`purge.rs`, `force_release.rs`). The TTL index deletes only
//!   documents idle for the retention (`cleanup.rs`).
//! - **Bounded in time.** Every command carries a time limit (`maxTimeMS`, `wtimeout` and a
//!   client-side timer; [`LockClientBuilder::command_timeout`], 10 s by default), and a
//!   waiting call returns at its own timeout (`late_copies.rs`).
//! - **Majority writes.** Every write is sent with `{w: "majority", j: true}` and every read
//!   with read concern `majority`, whatever the driver's settings, unless you opt out with
//!   [`LockClientBuilder::unsafe_write_concern`] (`write_concern.rs`, `wire_settings.rs`).
//!
//! ## What does not hold
//!
//! - **A lease can be lost while its holder works.** The guard tells, but a holder paused
//!   past its TTL (a garbage-collection pause, a stopped VM) can still act when it resumes,
//!   before it looks. The lock alone never stops its writes: pass the fencing token to the
//!   store you protect and have it refuse tokens lower than the highest it has seen
//!   ([`Fence`] does that for a MongoDB collection).
//! - **Clock steps larger than the margin plus the clock uncertainty.** If the server's
//!   clock steps forward (an NTP step, a failover to a primary whose clock is ahead) by more
//!   than the safety margin plus the client's [`clock_uncertainty`] (default 0), a holder can
//!   believe in a lease the server has already ended, by up to the step less those two,
//!   until the next reply that carries the server's time (at the latest the next renewal).
//!   A step smaller than the TTL less the renewal period is harmless whatever the margin:
//!   the next renewal lands first (`clock_steps.rs`). A step back ends no lease (leases last
//!   longer by the server's reckoning) and can break the fencing promise above once a
//!   document was deleted. Keep the members' clocks synchronised.
//! - **Suspended machines on macOS and iOS.** The deadline counts suspended time on Linux
//!   and Android (`CLOCK_BOOTTIME`) and on Windows; on macOS and iOS the monotonic clock
//!   stops while the machine sleeps, so a holder that wakes after its TTL may believe it
//!   still holds a lock the server has given to someone else.
//! - **Two processes under one lock id.** The server takes every call with a lock id as
//!   coming from one holder: asking again returns the lock it holds, `unlock` releases all
//!   of it, and a release or withdrawal one process owes can remove what the other was
//!   granted. Never give one lock id to two live processes or tasks.
//! - **Late copies past the tombstone's life.** A withdrawn attempt's tombstone lives the
//!   attempt's TTL, and at least five minutes; an `unlock` whose outcome was unknown is
//!   named by this client's attempts for five minutes. A copy delivered later than that is
//!   not refused.
//! - **Sealing.** A resource keeps at most [`MAX_TOMBSTONES`] tombstones; one more
//!   withdrawal seals it: every new attempt on it, waiting ones included, is refused with
//!   [`ErrorKind::Sealed`] (or [`Attempt::Sealed`]) until the last attempt it stands for can
//!   no longer land, while locks already granted stay held (`withdrawal.rs`). A waiting
//!   acquire returns that error rather than waiting.
//! - **Unsafe write concern.** With [`LockClientBuilder::unsafe_write_concern`], a grant
//!   acknowledged by fewer than a majority can be rolled back by a failover, and the same
//!   lock granted again to a second holder while the first believes it holds it.
//! - **What is tested where.** Every test in CI runs against the embedded emulator, not a
//!   real `mongod`: as one member, and as an emulated three-member replica set, where
//!   `tests/failover.rs` and the reliability harness's `--replset` mode show a
//!   `w: "majority"` grant surviving step-downs, a stopped primary and a partitioned one
//!   with rollback, while the `w: 1` control gives two holders. Neither has run against a
//!   real replica set or a sharded cluster. The tests run against a real server when
//!   `MONGODB_URI` is set; the CI job that does so has not run yet.
//!
//! [`clock_uncertainty`]: LockClientBuilder::clock_uncertainty
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
//! a [`Fence`] refused is [`ErrorKind::StaleToken`]. A resource sealed by too many withdrawn
//! attempts refuses every new one, a waiting acquire's included, with
//! [`ErrorKind::Sealed`] until the time it names. The server's and the network's failures
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
#[cfg(feature = "blocking")]
pub mod blocking;
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
mod run;
mod schema;
mod unlocks;
mod wait;

pub use attempt::{Attempt, Contention, MAX_NAMED_HOLDERS};
pub use client::{DEFAULT_COMMAND_TIMEOUT, DEFAULT_RETENTION, LockClient, LockClientBuilder};
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
