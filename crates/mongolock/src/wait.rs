//! Acquiring a lease, waiting if asked to: attempts, backoff and wake-ups.
//!
//! One acquisition, from the handle's call to the wire:
//!
//! 1. `Mutex::acquire` (or a reader, writer or permit) checks its settings once, into the
//!    [`AcquireRequest`] its attempts send, and calls [`acquire`].
//! 2. Local waiters on one resource take turns (a per-resource gate), so the waiters of one
//!    process do not all hit the server at once.
//! 3. The waiter subscribes to changes of its resource (one change stream per client,
//!    [`crate::changes`]), *then* sends the attempt: [`LockClient::acquire`], one
//!    `findAndModify` ([`crate::command::acquire`]).
//! 4. Granted: the lease starts with the send time of that attempt as its base, the keeper
//!    renews it from then on ([`crate::lease`]), and the guard is returned. A grant whose
//!    reply came back after its own deadline is not trusted: it is withdrawn and the waiter
//!    tries again.
//! 5. Refused: the first refused attempt of a waiting call also joined the resource's line
//!    (waiters are granted in the order they joined; see [`crate::schema`]). The reply says
//!    how long the current lease has left, computed by the server, and the waiter's place in
//!    line. The waiter sleeps until then at most, and wakes earlier when a change may have
//!    let it in. Such a change (a release, a waiter ahead leaving the line, a reader granted
//!    before it: never a renewal or a join) names the keeper of the waiter at the head of
//!    the line, and only that client's change stream passes it ([`crate::changes`]): one
//!    release wakes one waiter. On a replica set the sleep is also capped by a safety-net
//!    re-check ([`RECHECK`], and half of the place's life), since notifications can be lost
//!    and a dead waiter's place or an expiry produces none; only the head of the line also
//!    wakes when the holders' leases run out. Where change streams
//!    are not available (a standalone server), it polls with a backoff from 10 ms with
//!    jitter, capped by its place: every 25 ms at most at the head of the line, 25 ms more
//!    for each place behind, up to [`MAX_BACKOFF`]. The client keeps the waiter's place in
//!    line ([`crate::places`]): one command refreshes the places of all its waiters, so a
//!    waiter's refused attempts write nothing.
//! 6. The same attempt (same nonce) is sent again, so an attempt whose outcome was unknown
//!    is resolved by the server, never granted twice at once: a repeat returns the grant
//!    still in force, and only if that first grant expired unseen is the attempt granted
//!    anew, with a new, higher token (the first one's holder never believed in it).
//!
//! Dropping the future at any point never leaves a grant that nobody holds: once an attempt
//! was sent and until its outcome is settled, a drop withdraws it in the background
//! ([`LockClient::release_attempt`], which also refuses a late copy of it). A waiter that
//! stops waiting without the lock (its deadline passed, its future was dropped) leaves the
//! line the same way, so it holds up nobody behind it.

use std::sync::Arc;
use std::time::Duration;

use bson::oid::ObjectId;
use rand::Rng;
use tokio::time::Instant;
use tracing::Instrument;

use crate::attempt::Attempt;
use crate::changes::{Availability, WakeCause};
use crate::client::LockClient;
use crate::clock::Stamp;
use crate::command::keepalive;
use crate::command::refresh_places::Place;
use crate::error::{Error, ErrorKind, Result};
use crate::guard::LockGuard;
use crate::lease::{Chore, Lease, default_margin};
use crate::lock::{Grant, LockKind};
use crate::observe::{self, Wakeup};
use crate::request::{AcquireRequest, LockDetails, Nonce, ttl_millis};

/// The longest a waiter sleeps without asking the server again while change streams are
/// on: notifications can be lost, and a waiter ahead may be gone without a word, so this
/// bounds how late either is noticed.
pub const RECHECK: Duration = Duration::from_secs(10);

/// The longest backoff between attempts without change streams.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The first backoff without change streams; it doubles each time, with jitter.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// The longest the head of a resource's line sleeps between attempts without change
/// streams: only it can take the lock next, so it polls briskly, and each place behind it
/// a step more slowly (up to [`MAX_BACKOFF`]): the waiter at place `n` polls every
/// `(n + 1) × HEAD_POLL` at most, so the line costs the server little, and a waiter that
/// moved up to the head while it slept learns it within a few steps.
const HEAD_POLL: Duration = Duration::from_millis(25);

/// The longest sleep between polls for a waiter with `ahead` waiters before it.
fn poll_cap(ahead: u64) -> Duration {
    let steps = u32::try_from(ahead.saturating_add(1)).unwrap_or(u32::MAX);
    HEAD_POLL.saturating_mul(steps).min(MAX_BACKOFF)
}

/// The shortest renewal period a lease accepts: a shorter one would be a renewal storm.
pub(crate) const MIN_EXTEND_EVERY: Duration = Duration::from_millis(10);

/// The shortest TTL a lease accepts: its default renewal period (a third) stays above
/// [`MIN_EXTEND_EVERY`].
pub(crate) const MIN_LEASE_TTL: Duration = Duration::from_millis(50);

/// The default TTL of a lease: thirty seconds.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// How long a waiter's place in a resource's line lasts from its last refresh: twice the
/// lease's TTL, within what a TTL may be (so any legal TTL is taken). The client refreshes
/// the places of its waiters six times in a life (every third of the TTL), in one command
/// whatever their number ([`crate::places`]), so a place survives a few failed refreshes; a
/// waiter that died leaves the line when its place lapses, and holds up the waiters behind
/// it that long at most.
pub(crate) fn place_life(ttl: Duration) -> Duration {
    ttl.saturating_mul(2).min(crate::request::MAX_TTL)
}

/// A lock id of its own for a holder that was given none: 128 random bits, in hex.
pub(crate) fn fresh_lock_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// How a lease is held: the settings shared by the mutex, reader-writer lock and semaphore
/// handles, in the low-level API's words. Who holds it and for how long are the
/// [`LockDetails`] every acquire carries (here always with a TTL, [`DEFAULT_LEASE_TTL`]
/// unless set); the rest is the lease's own: its lock id and how it is kept.
#[derive(Debug, Clone)]
pub(crate) struct LeaseOptions {
    pub(crate) details: LockDetails,
    pub(crate) lock_id: Option<String>,
    pub(crate) every: Option<Duration>,
    pub(crate) margin: Option<Duration>,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            details: LockDetails::default().ttl(DEFAULT_LEASE_TTL),
            lock_id: None,
            every: None,
            margin: None,
        }
    }
}

impl LeaseOptions {
    /// The lease's TTL.
    pub(crate) fn ttl(&self) -> Duration {
        self.details.ttl_value().unwrap_or(DEFAULT_LEASE_TTL)
    }

    /// The request of one acquire call of `kind` on `resource` (`max`: a semaphore's
    /// permits), by the lock id set or a random one, and the timing of its lease. Every
    /// setting is checked here, once per call: the attempts of the call repeat this request
    /// with fresh nonces. A waiting call holds its place in the resource's line for
    /// [`place_life`] from each attempt (a single attempt joins no line, see [`acquire`]).
    pub(crate) fn request(
        &self,
        kind: LockKind,
        resource: &str,
        max: Option<u32>,
    ) -> Result<(AcquireRequest, LeaseTiming)> {
        let timing = self.timing()?;
        if max == Some(0) {
            return Err(Error::invalid(
                "permits",
                "a semaphore needs at least one permit",
            ));
        }
        let lock_id = self.lock_id.clone().unwrap_or_else(fresh_lock_id);
        let details = self.details.clone();
        let mut request = match kind {
            LockKind::Exclusive => AcquireRequest::exclusive(resource, lock_id, details),
            LockKind::Shared => AcquireRequest::shared(resource, lock_id, details, max),
        };
        request.announce = Some(place_life(timing.ttl));
        request.validate()?;
        Ok((request, timing))
    }

    /// Checks the lease's settings.
    fn timing(&self) -> Result<LeaseTiming> {
        let ttl = self.ttl();
        if ttl.is_zero() {
            return Err(Error::invalid("ttl", "a lease needs a positive TTL"));
        }
        ttl_millis(ttl)?;
        if ttl < MIN_LEASE_TTL {
            return Err(Error::invalid("ttl", "a lease needs at least 50 ms"));
        }
        let margin = self.margin.unwrap_or_else(|| default_margin(ttl));
        if margin >= ttl {
            return Err(Error::invalid(
                "safety_margin",
                format!("{margin:?} leaves nothing of the TTL {:?}", ttl),
            ));
        }
        let every = self.every.unwrap_or(ttl / 3);
        if every < MIN_EXTEND_EVERY || every >= ttl - margin {
            return Err(Error::invalid(
                "extend_every",
                format!(
                    "{every:?} must be at least {MIN_EXTEND_EVERY:?} (no renewal storm) and shorter than the TTL less the safety margin ({:?})",
                    ttl - margin
                ),
            ));
        }
        Ok(LeaseTiming { ttl, every, margin })
    }
}

/// How a granted lease is kept: the checked settings of a handle.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseTiming {
    ttl: Duration,
    every: Duration,
    margin: Duration,
}

impl LeaseTiming {
    /// The same timing, its margin grown by the client's clock uncertainty (see
    /// [`LockClient::with_clock_uncertainty`]), checked again.
    fn with_uncertainty(self, uncertainty: Duration) -> Result<LeaseTiming> {
        if uncertainty.is_zero() {
            return Ok(self);
        }
        let margin = self.margin.saturating_add(uncertainty);
        if margin >= self.ttl || self.every >= self.ttl - margin {
            return Err(Error::invalid(
                "clock_uncertainty",
                format!(
                    "{uncertainty:?} and the safety margin {:?} leave too little of the TTL {:?} for a renewal every {:?}",
                    self.margin, self.ttl, self.every
                ),
            ));
        }
        Ok(LeaseTiming { margin, ..self })
    }
}

/// How long to wait.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// One attempt.
    Once,
    /// Until this instant.
    Until(Instant),
    /// As long as it takes.
    Forever,
}

impl Wait {
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Wait::Until(deadline) => Some(deadline),
            _ => None,
        }
    }
}

/// An attempt sent and not settled: dropping it withdraws the attempt in the background.
///
/// Once any copy of the attempt had an unknown outcome (it failed or timed out after it was
/// sent), a later refusal settles nothing: the first copy may still be queued on the server
/// and land after the waiter stopped. Such an attempt is withdrawn (tombstoned) whenever its
/// waiter stops without the lock.
#[derive(Debug)]
struct Pending {
    client: LockClient,
    request: AcquireRequest,
    /// Sent, and not known to be refused or settled: it may be granted.
    open: bool,
    /// A copy was sent whose outcome the waiter never learnt.
    uncertain: bool,
    /// A waiting attempt was sent: it may hold a place in the resource's line, which keeps
    /// the waiters behind it out until it leaves (or the place lapses).
    announced: bool,
    /// When its first copy was sent, on the lease clock: a grant of it (found by a later
    /// copy) was made after that.
    first_sent: Option<Instant>,
}

impl Pending {
    fn new(client: &LockClient, request: AcquireRequest) -> Self {
        Pending {
            client: client.clone(),
            request,
            open: false,
            uncertain: false,
            announced: false,
            first_sent: None,
        }
    }

    /// Called before each send: from now on the attempt may be granted.
    fn sending(&mut self) {
        self.open = true;
        self.announced |= self.request.announce.is_some();
    }

    /// The copy just sent failed: its outcome is unknown.
    fn failed(&mut self) {
        self.uncertain = true;
    }

    /// The attempt was refused: nothing is held by it (its announcement may be), unless an
    /// earlier copy with an unknown outcome may still land.
    fn refused(&mut self) {
        if !self.uncertain {
            self.open = false;
        }
    }

    /// The attempt's grant was handed to a guard (a grant also ends the announcement), or
    /// the attempt was withdrawn.
    fn settled(&mut self) {
        self.open = false;
        self.uncertain = false;
        self.announced = false;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // An attempt that may be granted is withdrawn for good (with a tombstone); one that
        // was refused only leaves the line.
        let chore = if self.open {
            // Nobody was handed its grant: no minimum hold is owed.
            Chore::Withdraw(self.request.clone(), crate::command::release::Hold::Waived)
        } else if self.announced {
            Chore::Leave(self.request.clone())
        } else {
            return;
        };
        self.client.finish_in_background(chore);
    }
}

/// Acquires a lease by attempts of `request` (each with a fresh nonce), kept as `timing`
/// says, waiting as `wait` allows. `Ok(None)`: not acquired in time (or, for one attempt,
/// held by others). Runs in a `mongolock.acquire` span; each sleep between attempts is a
/// `mongolock.wait` span.
pub(crate) async fn acquire(
    client: &LockClient,
    mut request: AcquireRequest,
    timing: LeaseTiming,
    wait: Wait,
) -> Result<Option<LockGuard>> {
    request.turn_only = false;
    let span = acquire_span(&request);
    let reached = acquire_in_span(client, request, timing, wait, &[])
        .instrument(span)
        .await?;
    Ok(match reached {
        Some(Reached::Lease(guard)) => Some(guard),
        // Only a request that waits for its turn reaches one, and this one does not.
        Some(Reached::Turn(_)) | None => None,
    })
}

/// What a wait reached: the lease, or (for a request that only waits for its turn) the turn.
#[derive(Debug)]
pub(crate) enum Reached {
    Lease(LockGuard),
    Turn(Box<Turn>),
}

/// A waiter's turn at a resource: its place heads the resource's line and nobody holds the
/// resource, so the next attempt of its lock id is granted, and nobody else's is (they stand
/// behind it, or join no line and are refused while anybody waits). A multi-lock keeps
/// a turn at each member until it takes them all (see `crate::multi`). While it lives, its
/// client refreshes its place; dropping it takes the place out of the line (in the
/// background).
#[derive(Debug)]
pub(crate) struct Turn {
    pending: Pending,
    in_line: crate::places::Held,
}

impl Turn {
    /// The resource was granted to the turn's lock id, which took its place out of the line:
    /// nothing is left to take out, unless a copy of the turn's attempt may still land (it is
    /// then withdrawn, so that it never joins the line again).
    pub(crate) fn taken(mut self) {
        if !self.pending.uncertain {
            self.pending.settled();
        }
    }
}

/// Waits, as `wait` allows, for the turn of `request`'s lock id at its resource: its place at
/// the head of the line, the resource free. Each attempt only waits for its turn (it is never
/// granted: see [`AcquireRequest::turn_only`]). The places of `earlier` turns are kept as
/// long as this wait's own. `Ok(None)`: not reached in time. A lease already held by the lock
/// id (a restarted holder's) is resumed and returned instead.
pub(crate) async fn wait_turn(
    client: &LockClient,
    mut request: AcquireRequest,
    timing: LeaseTiming,
    wait: Wait,
    earlier: &[Turn],
) -> Result<Option<Reached>> {
    request.turn_only = true;
    if matches!(wait, Wait::Once) {
        return Err(Error::invalid("wait", "a turn is waited for"));
    }
    let span = acquire_span(&request);
    acquire_in_span(client, request, timing, wait, earlier)
        .instrument(span)
        .await
}

/// The `mongolock.acquire` span of a wait for `request`'s lease, or (`turn_only`) its turn.
fn acquire_span(request: &AcquireRequest) -> tracing::Span {
    tracing::info_span!(
        "mongolock.acquire",
        resource = %request.resource,
        kind = %request.kind,
        permits = request.max_shared,
        turn_only = request.turn_only,
    )
}

/// The attempt loop of one acquire call (see the module's steps): each attempt's outcome is
/// one named step of [`Waiter`], which says whether the call is done, attempts again at
/// once, or sleeps until a change or a timer before the next attempt.
async fn acquire_in_span(
    client: &LockClient,
    request: AcquireRequest,
    timing: LeaseTiming,
    wait: Wait,
    earlier: &[Turn],
) -> Result<Option<Reached>> {
    let timing = timing.with_uncertainty(client.clock_uncertainty())?;
    let _waiting = (!matches!(wait, Wait::Once)).then(observe::Waiting::start);
    let request = joining_the_line(client, request, wait);
    let (kind, resource) = (request.kind, request.resource.clone());
    // Local waiters on one resource take turns.
    let gate = match wait {
        Wait::Once => None,
        _ => Some(client.gate(&resource)),
    };
    let _turn = match &gate {
        None => None,
        Some(gate) => match within(wait, gate.lock()).await {
            Some(turn) => Some(turn),
            None => {
                observe::timed_out(kind);
                return Ok(None);
            }
        },
    };
    let mut changes = match wait {
        Wait::Once => None,
        _ => Some(client.shared().wakeups.subscribe(&resource)),
    };
    let mut waiter = Waiter::new(client, request, timing, wait);
    loop {
        // The call's first attempt is made to the end, whatever its timeout (as a single
        // attempt is); a later one is cut short at the deadline.
        let first = waiter.first_sent.is_none();
        let Some((sent_at, outcome)) = send(client, &mut waiter.pending, wait, first).await else {
            // Out of time while a release or withdrawal this client owes for the lock id
            // was still on its way: nothing was sent.
            observe::timed_out(kind);
            return Ok(None);
        };
        let in_line_from = *waiter.first_sent.get_or_insert(sent_at.at);
        let step = match outcome {
            Ok(Attempt::Granted(grant)) => waiter.granted(grant, sent_at).await,
            Ok(Attempt::Contended(contention)) => waiter.contended(contention, in_line_from),
            Ok(Attempt::AlreadyHeld(grant)) => waiter.already_held(grant, sent_at).await,
            Ok(other) => {
                waiter.pending.settled();
                Step::Done(other.into_result().map(|_| None))
            }
            Err(error) => waiter.failed(error).await,
        };
        let contention = match step {
            Step::Done(result) => return result,
            Step::Again => continue,
            Step::Turn(in_line) => {
                let pending = waiter.pending;
                return Ok(Some(Reached::Turn(Box::new(Turn { pending, in_line }))));
            }
            Step::Sleep(contention) => contention,
        };
        let Some(changes) = changes.as_mut() else {
            return Ok(None);
        };
        let sleep = waiter.sleep_after(&contention);
        waiter.keep_places(sleep, earlier);
        if !sleep_or_wake(changes, sleep, wait, contention.holder_count()).await {
            // Slept to the deadline without a change: give up.
            observe::timed_out(kind);
            tracing::debug!(
                resource = %resource, waited = ?waiter.started.elapsed(), "gave up waiting"
            );
            return Ok(None);
        }
    }
}

/// `request` as this call sends it: renewed by this client's keeper, and joining the
/// resource's line only if the call will wait (a single attempt, or a call with no time left
/// to wait, must not keep anybody out).
fn joining_the_line(
    client: &LockClient,
    mut request: AcquireRequest,
    wait: Wait,
) -> AcquireRequest {
    let shared = client.shared();
    // Chores left where no runtime ran (a guard or an acquire dropped on a plain thread)
    // start now at the latest.
    shared.keeper.resume_chores();
    request.keeper = Some(shared.keeper.id.clone());
    let no_time = wait
        .deadline()
        .is_some_and(|deadline| deadline <= Instant::now());
    if matches!(wait, Wait::Once) || no_time {
        request.announce = None;
    }
    request
}

/// What an attempt's outcome leaves the call to do.
enum Step {
    /// The call returns this.
    Done(Result<Option<Reached>>),
    /// Attempt again at once (the attempt to send is in [`Waiter::pending`]).
    Again,
    /// The turn this call waited for (see [`wait_turn`]): its place in line.
    Turn(crate::places::Held),
    /// Refused: sleep until a change or a timer, then attempt again.
    Sleep(crate::attempt::Contention),
}

/// The state of one acquire call between its attempts.
struct Waiter<'a> {
    client: &'a LockClient,
    /// The call's request; each new attempt is a copy with a fresh nonce.
    request: AcquireRequest,
    timing: LeaseTiming,
    wait: Wait,
    started: Instant,
    /// The attempt being sent (the same nonce each time until it is settled).
    pending: Pending,
    /// This call's place in line, kept by the client while it waits (see `crate::places`).
    in_line: Option<crate::places::Held>,
    backoff: Duration,
    /// A single attempt is sent once more, at once, after a failure that repeating can fix.
    repeated_once: bool,
    /// When this call's first attempt was sent: a place in line it holds was made to last
    /// from then at the earliest (a later attempt leaves the place as it is).
    first_sent: Option<Instant>,
}

impl<'a> Waiter<'a> {
    fn new(
        client: &'a LockClient,
        request: AcquireRequest,
        timing: LeaseTiming,
        wait: Wait,
    ) -> Self {
        Waiter {
            client,
            pending: Pending::new(client, request.clone()),
            request,
            timing,
            wait,
            started: Instant::now(),
            in_line: None,
            backoff: FIRST_BACKOFF,
            repeated_once: false,
            first_sent: None,
        }
    }

    /// The next attempt is a new one (a fresh nonce): the last was withdrawn or settled. It
    /// is the same call's: its place in line is the call's, named by its first attempt's
    /// nonce (see `crate::schema`).
    fn new_attempt(&mut self) {
        let mut request = self.request.clone();
        request.nonce = Nonce::new();
        self.pending = Pending::new(self.client, request);
    }

    /// The call gives up: out of time, or failed with `result`.
    fn give_up<T>(&self, result: Result<Option<T>>) -> Result<Option<T>> {
        observe::timed_out(self.request.kind);
        result
    }

    /// Granted: the lease starts from the attempt's send, `sent_at`, and its guard is
    /// returned. A grant whose reply came after the lease's own deadline is not trusted: it
    /// is withdrawn, and a new attempt follows if there is time.
    async fn granted(&mut self, grant: Grant, sent_at: Stamp) -> Step {
        let shared = self.client.shared();
        let timing = self.timing;
        let lease = Lease::new(
            grant,
            timing.ttl,
            timing.margin,
            timing.every,
            sent_at,
            shared.keeper.clock().clone(),
        )
        .following(self.client.server_clock().clone())
        // The grant may be an earlier copy's, found by this one.
        .first_sent(self.pending.first_sent.unwrap_or(sent_at.at));
        // A copy of this attempt had an unknown outcome: it may still reach the server, so
        // the release must retire the attempt too.
        let lease = Arc::new(if self.pending.uncertain {
            lease.retiring()
        } else {
            lease
        });
        if lease.is_lost() {
            return self.too_late().await;
        }
        let key = shared.keeper.add(lease.clone());
        self.pending.settled();
        let (kind, waited) = (self.request.kind, self.started.elapsed());
        observe::acquired(kind, waited);
        tracing::debug!(
            resource = %self.request.resource, kind = %kind,
            token = lease.grant.fencing_token(), ?waited, "lease acquired"
        );
        Step::Done(Ok(Some(Reached::Lease(LockGuard::new(
            self.client.clone(),
            lease,
            key,
        )))))
    }

    /// The grant's reply came back after the lease's own deadline: not trusted. It is
    /// withdrawn, then a new attempt follows if there is time.
    async fn too_late(&mut self) -> Step {
        tracing::debug!(resource = %self.request.resource, "grant arrived too late to trust");
        match withdraw(self.client, &self.pending.request, self.wait).await {
            Ok(true) => {}
            // Out of time, or failed: `pending` withdraws it in the background from here on;
            // the next attempt would find the lock id still holding the resource.
            Ok(false) => return Step::Done(self.give_up(Ok(None))),
            Err(error) => return Step::Done(self.give_up(Err(error))),
        }
        self.pending.settled();
        let out_of_time = match self.wait {
            Wait::Once => true,
            Wait::Until(deadline) => Instant::now() >= deadline,
            Wait::Forever => false,
        };
        if out_of_time {
            return Step::Done(self.give_up(Ok(None)));
        }
        self.new_attempt();
        Step::Again
    }

    /// Refused: the first refusal that gives the call a place in line makes the client keep
    /// that place from then on, until the call ends. A call waiting for its turn only has
    /// reached it when its place heads the line and nobody holds the resource.
    fn contended(&mut self, contention: crate::attempt::Contention, in_line_from: Instant) -> Step {
        self.pending.refused();
        if let (None, Some(life), Some(_)) = (
            &self.in_line,
            self.request.announce,
            contention.place_in_line(),
        ) {
            // Back from this attempt by now, at the latest.
            self.in_line = Some(self.client.shared().places.hold(
                Place {
                    resource: self.request.resource.clone(),
                    call: self.pending.request.call,
                    life,
                },
                in_line_from,
                Instant::now() + life,
            ));
        }
        if self.request.turn_only
            && contention.place_in_line() == Some(0)
            && contention.holder_count() == 0
            && let Some(in_line) = self.in_line.take()
        {
            return Step::Turn(in_line);
        }
        Step::Sleep(contention)
    }

    /// This lock id holds the resource from before (its holder restarted): the lease is
    /// resumed. If it ended meanwhile, or the adoption failed in a way a retry can fix, a
    /// new attempt follows after a pause.
    async fn already_held(&mut self, grant: Grant, sent_at: Stamp) -> Step {
        // Nothing is held by this attempt, unless a copy of it had an unknown outcome: that
        // copy may still land and grant, so `pending` withdraws it when it goes (the
        // withdrawal matches this attempt's nonce, never the entry resumed here). A waiting
        // exclusive attempt answered so kept (or took) its place in line (see
        // `command/acquire.rs`): the adoption takes it out; otherwise the call's next attempt
        // keeps it, and a call that ends here leaves it (`pending` is still announced).
        self.pending.refused();
        let resumed = resume(
            self.client,
            grant,
            &self.timing,
            &self.request.details,
            self.pending.request.call,
            sent_at,
        );
        let failure = match resumed.await {
            Ok(Some(lease)) => {
                // The adoption took the lock id's place out of the line.
                self.pending.announced = false;
                let key = self.client.shared().keeper.add(lease.clone());
                observe::acquired(self.request.kind, self.started.elapsed());
                tracing::info!(
                    resource = %self.request.resource, kind = %self.request.kind,
                    token = lease.grant.fencing_token(), "lease resumed"
                );
                return Step::Done(Ok(Some(Reached::Lease(LockGuard::new(
                    self.client.clone(),
                    lease,
                    key,
                )))));
            }
            // It ended meanwhile, or too little of it is left to trust.
            Ok(None) => None,
            // Whether the adoption landed is unknown: the next attempt finds the lease again,
            // and adopting it again is harmless (it names the same keeper).
            Err(error) if error.is_retryable() && !matches!(self.wait, Wait::Once) => {
                tracing::warn!(
                    %error, resource = %self.request.resource, retry_in = ?self.backoff,
                    "could not resume the lease; trying again"
                );
                Some(error)
            }
            Err(error) => return Step::Done(Err(error)),
        };
        // A new attempt, after a pause.
        if matches!(self.wait, Wait::Once) || !sleep_within(jitter(self.backoff), self.wait).await {
            return Step::Done(self.give_up(failure.map_or(Ok(None), Err)));
        }
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        // The next attempt keeps the call's place in line: the attempt is sent again (a
        // copy with an unknown outcome is the same attempt), or a new one takes over its
        // announcement, so that dropping this one does not take the place out (a withdrawal
        // or a leave owed for the lock id is sent before the next attempt).
        if !self.pending.uncertain {
            let announced = std::mem::replace(&mut self.pending.announced, false);
            self.new_attempt();
            self.pending.announced = announced;
        }
        Step::Again
    }

    /// The attempt failed. One that repeating can fix is sent again, the same attempt (if
    /// the first copy got through, the server says so, and never grants it twice): a single
    /// attempt once more at once (as every write is repeated once, see `Context::write`, but
    /// here, where `pending` knows of the copy whose outcome is unknown), a waiting one after
    /// a backoff, for as long as the wait allows.
    async fn failed(&mut self, error: Error) -> Step {
        if !error.is_retryable() {
            return Step::Done(Err(error));
        }
        if matches!(self.wait, Wait::Once) {
            if self.repeated_once {
                return Step::Done(Err(error));
            }
            self.repeated_once = true;
            tracing::debug!(
                %error, resource = %self.request.resource, "attempt failed; sending it again"
            );
            return Step::Again;
        }
        tracing::warn!(
            %error, resource = %self.request.resource, retry_in = ?self.backoff,
            "attempt failed; trying again (the wait goes on while the server is unreachable)"
        );
        let pause = jitter(self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        if !sleep_within(pause, self.wait).await {
            return Step::Done(self.give_up(Err(error)));
        }
        Step::Again
    }

    /// How long to sleep after a refusal at most: until the server could decide otherwise,
    /// capped by the re-check (change streams) or the poll's backoff (none), and by half of
    /// the place's life.
    fn sleep_after(&mut self, contention: &crate::attempt::Contention) -> Duration {
        let streaming = self.client.shared().wakeups.availability() == Availability::Streaming;
        let place = contention.place_in_line();
        let until_free = contention
            .wait()
            .map(|wait| wait + Duration::from_millis(2));
        let sleep = if streaming {
            // When the holders' leases run out, only the head of the line can take the lock:
            // the waiters behind it are woken when a change lets them in (they are then the
            // head), and otherwise by the re-check.
            let until_free = until_free.filter(|_| place.unwrap_or(0) == 0);
            until_free.map_or(RECHECK, |free| free.min(RECHECK))
        } else {
            // Polling: the head of the line briskly, each place behind it a step slower.
            let cap = poll_cap(place.unwrap_or(0));
            self.backoff = self.backoff.min(cap);
            let pause = jitter(self.backoff);
            self.backoff = (self.backoff * 2).min(cap);
            until_free.map_or(pause, |free| free.min(pause))
        };
        // A waiter attempts again at least every half of its place's life, whatever the
        // holders have left: if the waiters ahead of it are gone without a word (their
        // client died, or was cut off), it finds out by then that it heads the line. Its
        // client keeps its place fresh, so these attempts write nothing.
        let sleep = match self.request.announce {
            Some(announce) => sleep.min(announce / 2),
            None => sleep,
        };
        spread(sleep)
    }

    /// Keeps this call's place in line, and those of the `earlier` turns, until it is back
    /// from a `sleep` and the next attempt: a waiter whose future is no longer polled stops
    /// being kept in line (see `crate::places`).
    fn keep_places(&self, sleep: Duration, earlier: &[Turn]) {
        let (Some(in_line), Some(life)) = (&self.in_line, self.request.announce) else {
            return;
        };
        let back = sleep
            .saturating_add(self.client.command_timeout())
            .saturating_add(life);
        let now = Instant::now();
        let until = now.checked_add(back).unwrap_or(now + MAX_BACKOFF);
        in_line.keep_until(until);
        for turn in earlier {
            turn.in_line.keep_until(until);
        }
    }
}

/// Sleeps for `sleep`, or less: until a change of the resource may have let the waiter in,
/// or `wait`'s deadline. False when it slept to the deadline without a change.
async fn sleep_or_wake(
    changes: &mut crate::changes::Subscription,
    sleep: Duration,
    wait: Wait,
    holders: u64,
) -> bool {
    let waited = async {
        let wake_at = Instant::now() + sleep;
        let (wake_at, at_deadline) = match wait.deadline() {
            Some(deadline) if deadline <= wake_at => (deadline, true),
            _ => (wake_at, false),
        };
        tokio::select! {
            cause = changes.changed() => {
                observe::woke(match cause {
                    WakeCause::Change => Wakeup::Change,
                    WakeCause::Resync => Wakeup::Resync,
                });
                true
            }
            _ = tokio::time::sleep_until(wake_at) => {
                observe::woke(Wakeup::Timer);
                !at_deadline
            }
        }
    };
    let span = tracing::debug_span!("mongolock.wait", ?sleep, holders);
    waited.instrument(span).await
}

/// Sends one attempt of `pending`, after the chores this client owes for its lock id on its
/// resource ([`Keeper::settle`](crate::lease::Keeper::settle): a queued release or
/// withdrawal of an earlier grant of the same lock id must not land after this attempt).
/// Returns when the attempt was sent, on the lease clock, and what came back; `None` when
/// `wait`'s deadline came while the owed chores were still on their way or, for a later
/// attempt, before it was sent (nothing was sent: a call never waits past its own time),
/// or, unless it is the call's `first`
/// attempt (made to the end, as a single attempt is, within the command time limit), while
/// the attempt was (its outcome is unknown: `pending` withdraws it when it goes). An error
/// before anything was sent (a bad request, an owed chore that failed again) leaves the
/// attempt as it was; one after it was sent makes its outcome unknown.
async fn send(
    client: &LockClient,
    pending: &mut Pending,
    wait: Wait,
    first: bool,
) -> Option<(Stamp, Result<Attempt>)> {
    // Past the deadline (woken by a change as it came), a later attempt is not sent.
    if !first
        && wait
            .deadline()
            .is_some_and(|deadline| deadline <= Instant::now())
    {
        return None;
    }
    let keeper = &client.shared().keeper;
    let server = client.server_clock();
    let request = &pending.request;
    // Dropped on time, `settle` leaves every chore owed (see `Keeper::settle`).
    let settled = within(wait, keeper.settle(&request.resource, &request.lock_id)).await?;
    if let Err(error) = settled {
        return Some((server.stamp(), Err(error)));
    }
    pending.sending();
    let mut sent_at = server.stamp();
    pending.first_sent.get_or_insert(sent_at.at);
    // Out of time with the attempt on its way: its outcome is unknown, and `pending`
    // withdraws it when the call ends (a call never waits past its own time for a reply,
    // which could come as late as the command time limit).
    let bound = if first { Wait::Forever } else { wait };
    let Some(outcome) = within(bound, client.acquire(&pending.request)).await else {
        pending.failed();
        return None;
    };
    // A grant says exactly what the server's clock read: its lease's end less what it had
    // left (see `ServerClock`). A step it shows came before the grant, which counts from
    // the clock as stepped: such steps do not shorten this lease.
    if let Ok(Attempt::Granted(grant) | Attempt::AlreadyHeld(grant)) = &outcome
        && let (Some(end), Some(left)) = (grant.holder.expires_at, grant.remaining)
    {
        let left = crate::clock::saturating_millis(left);
        let now = end.timestamp_millis().saturating_sub(left);
        sent_at = server.read_exactly(sent_at, now, grant.operation_time);
    }
    match &outcome {
        // Refused before anything was sent: there is nothing to withdraw.
        Err(error) if matches!(error.kind(), ErrorKind::InvalidArgument { .. }) => {
            pending.settled();
        }
        Err(_) => pending.failed(),
        Ok(_) => {}
    }
    Some((sent_at, outcome))
}

/// Resumes a lease that `grant`'s lock id holds from before this call: granted to the same
/// lock id in another process (this one, before it restarted), or in another client. The
/// lease keeps its fencing token and what the server has left of it. Its entry is adopted
/// first (`command/keepalive.rs`: [`adopt`](keepalive::adopt)): it names this client's keeper
/// from then on, so that only this client renews it, and a keeper that renewed it before
/// finds it gone and reports it lost.
///
/// The adoption takes the place in line of `call` (the waiting call, named by its first
/// attempt's nonce) out with it, and no other call's place of the lock id.
///
/// `Ok(None)` when too little of the lease is left to trust (less than the safety margin;
/// then it is not adopted, and the call keeps its place), or when it ended before it was
/// adopted. An error when this client keeps a lease of that lock
/// id on that resource already (a second guard for one holder), or when the lease's TTL is
/// not `timing`'s (its keepalive renews it by the TTL it was granted with).
async fn resume(
    client: &LockClient,
    mut grant: Grant,
    timing: &LeaseTiming,
    details: &LockDetails,
    call: ObjectId,
    sent_at: Stamp,
) -> Result<Option<Arc<Lease>>> {
    let keeper = &client.shared().keeper;
    if keeper.holds(grant.resource(), grant.lock_id()) {
        return Err(Error::invalid(
            "lock_id",
            format!(
                "{:?} already holds {:?} through a guard of this client: a lock id belongs to one holder; leave it unset for a fresh one",
                grant.lock_id(),
                grant.resource()
            ),
        ));
    }
    // Compared as stored: in whole milliseconds, rounded up.
    let same_ttl = match grant.holder.ttl {
        Some(held) => ttl_millis(held).ok() == ttl_millis(timing.ttl).ok(),
        None => false,
    };
    if !same_ttl {
        return Err(Error::invalid(
            "ttl",
            format!(
                "{:?} holds {:?} with {}: resume it with that TTL, not {:?}",
                grant.lock_id(),
                grant.resource(),
                match grant.holder.ttl {
                    Some(ttl) => format!("a TTL of {ttl:?}"),
                    None => "no TTL".to_owned(),
                },
                timing.ttl
            ),
        ));
    }
    // The lease as this client would keep it; too little of it left to trust, it is not
    // adopted: the adoption would take the call's place out of the line while the call goes
    // on waiting for the lease to run out, and a waiter that joined meanwhile would pass it.
    // Not adopted, the call keeps its place (its next attempt keeps it), and the lease runs
    // out, or, renewed by the process that keeps it, is adopted by a later attempt.
    let lease = |grant: Grant| {
        Lease::new(
            grant,
            timing.ttl,
            timing.margin,
            timing.every,
            sent_at,
            keeper.clock().clone(),
        )
        .following(client.server_clock().clone())
    };
    if lease(grant.clone()).is_lost() {
        return Ok(None);
    }
    let after_unlocks = client.shared().unlocks.of(grant.lock_id())?;
    if !keepalive::adopt(
        client.ready()?,
        &grant,
        &keeper.id,
        details,
        &after_unlocks,
        call,
    )
    .await?
    {
        return Ok(None);
    }
    // Its entry names this client's keeper now (the release matches that), and this
    // process's owner and host.
    grant.holder.keeper = Some(keeper.id.clone());
    grant.holder.owner = details.owner_value().map(str::to_owned);
    grant.holder.host = Some(details.host_value().to_owned());
    // Its attempt was another process's, whose outcome may have been unknown: releasing it
    // retires that attempt too.
    let lease = lease(grant).retiring();
    Ok((!lease.is_lost()).then(|| Arc::new(lease)))
}

/// Withdraws an attempt whose grant is not trusted, retrying a transient failure with backoff
/// as long as `wait` allows: the next attempt of the same lock id could not be granted
/// before it is gone. `Ok(false)` when `wait`'s deadline came first (a call never waits past
/// its own time for a reply): whether it was withdrawn is then unknown.
async fn withdraw(client: &LockClient, request: &AcquireRequest, wait: Wait) -> Result<bool> {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let Some(withdrawn) = within(wait, client.withdraw_unused(request)).await else {
            return Ok(false);
        };
        match withdrawn {
            Ok(_) => return Ok(true),
            Err(error) if error.is_retryable() && !matches!(wait, Wait::Once) => {
                tracing::warn!(%error, "could not withdraw a grant that came too late; retrying");
                let pause = jitter(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
                if !sleep_within(pause, wait).await {
                    return Err(error);
                }
            }
            Err(error) => return Err(error),
        }
    }
}

/// Runs `work` until `wait`'s deadline: `None` (`work` dropped) if the deadline came first.
async fn within<T>(wait: Wait, work: impl std::future::Future<Output = T>) -> Option<T> {
    match wait.deadline() {
        Some(deadline) => tokio::time::timeout_at(deadline, work).await.ok(),
        None => Some(work.await),
    }
}

/// Sleeps `pause`, or until the deadline; false if the deadline came first.
async fn sleep_within(pause: Duration, wait: Wait) -> bool {
    let wake_at = Instant::now() + pause;
    match wait.deadline() {
        Some(deadline) if deadline <= wake_at => {
            tokio::time::sleep_until(deadline).await;
            false
        }
        _ => {
            tokio::time::sleep_until(wake_at).await;
            true
        }
    }
}

/// `base` with up to half of it again at random: backoffs of many waiters drift apart.
fn jitter(base: Duration) -> Duration {
    base.mul_f64(1.0 + rand::rng().random_range(0.0..0.5))
}

/// A few milliseconds at random on top of `sleep`, so that waiters of several processes do not
/// all try at the instant a lease ends.
fn spread(sleep: Duration) -> Duration {
    sleep + Duration::from_micros(rand::rng().random_range(0..5_000))
}

/// The error of work stopped because its lease was lost.
pub(crate) fn lease_lost(resource: &str, reason: crate::lock::LossReason) -> Error {
    Error::new(ErrorKind::LeaseLost {
        resource: resource.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock client on a fresh emulator (kept alive by the returned server).
    async fn client() -> (mongolock_testkit::TestServer, LockClient) {
        let server = mongolock_testkit::TestServer::start().await.unwrap();
        let locks = LockClient::new(server.client().database("wait").collection("locks"));
        (server, locks)
    }

    fn request(resource: &str) -> AcquireRequest {
        let (request, _) = LeaseOptions::default()
            .request(LockKind::Exclusive, resource, None)
            .unwrap();
        request
    }

    fn contention(place: Option<u64>, holders: u64) -> crate::attempt::Contention {
        crate::attempt::Contention {
            resource: "r".into(),
            holders: Vec::new(),
            holder_count: holders,
            wait: Some(Duration::from_secs(20)),
            free_at: None,
            writer_waiting: false,
            place,
        }
    }

    #[tokio::test]
    async fn only_a_call_that_will_wait_joins_the_line() {
        let (_server, locks) = client().await;
        let keeper = Some(locks.shared().keeper.id.clone());
        let once = joining_the_line(&locks, request("r"), Wait::Once);
        assert_eq!((once.announce, &once.keeper), (None, &keeper));
        let past = Wait::Until(Instant::now() - Duration::from_millis(1));
        assert_eq!(joining_the_line(&locks, request("r"), past).announce, None);
        let waits = joining_the_line(&locks, request("r"), Wait::Forever);
        assert_eq!(waits.announce, Some(place_life(DEFAULT_LEASE_TTL)));
        locks.shutdown().await;
    }

    #[tokio::test]
    async fn a_refusal_keeps_the_place_and_a_turn_is_reached_only_at_the_head_of_a_free_line() {
        let (_server, locks) = client().await;
        let timing = LeaseOptions::default().timing().unwrap();
        let request = joining_the_line(&locks, request("r"), Wait::Forever);
        let mut waiter = Waiter::new(&locks, request.clone(), timing, Wait::Forever);
        // Not in line (a single attempt's refusal): nothing to keep, sleep.
        let step = waiter.contended(contention(None, 1), Instant::now());
        assert!(matches!(step, Step::Sleep(_)) && waiter.in_line.is_none());
        // In line: the client keeps the place from then on.
        let step = waiter.contended(contention(Some(2), 1), Instant::now());
        assert!(matches!(step, Step::Sleep(_)) && waiter.in_line.is_some());
        // A call for its turn only: at the head of a free line it has it, not before.
        let mut turn_only = request;
        turn_only.turn_only = true;
        let mut waiter = Waiter::new(&locks, turn_only, timing, Wait::Forever);
        let step = waiter.contended(contention(Some(0), 1), Instant::now());
        assert!(matches!(step, Step::Sleep(_)), "the resource is held");
        let step = waiter.contended(contention(Some(0), 0), Instant::now());
        assert!(matches!(step, Step::Turn(_)) && waiter.in_line.is_none());
        locks.shutdown().await;
    }

    #[tokio::test]
    async fn a_failed_attempt_is_sent_again_once_alone_and_for_as_long_as_a_wait_allows() {
        let (_server, locks) = client().await;
        let timing = LeaseOptions::default().timing().unwrap();
        let unreachable = || Error::timeout(Duration::from_secs(1), crate::error::Effect::Write);
        let mut once = Waiter::new(&locks, request("r"), timing, Wait::Once);
        assert!(matches!(once.failed(unreachable()).await, Step::Again));
        assert!(matches!(
            once.failed(unreachable()).await,
            Step::Done(Err(_))
        ));
        let bad = || Error::invalid("resource", "bad");
        let mut waits = Waiter::new(&locks, request("r"), timing, Wait::Forever);
        assert!(matches!(waits.failed(bad()).await, Step::Done(Err(_))));
        for _ in 0..3 {
            assert!(matches!(waits.failed(unreachable()).await, Step::Again));
        }
        assert!(
            waits.backoff > FIRST_BACKOFF,
            "backs off: {:?}",
            waits.backoff
        );
        let ending = Wait::Until(Instant::now() + Duration::from_millis(5));
        let mut ends = Waiter::new(&locks, request("r"), timing, ending);
        ends.backoff = Duration::from_secs(1);
        assert!(matches!(
            ends.failed(unreachable()).await,
            Step::Done(Err(_))
        ));
        locks.shutdown().await;
    }

    #[tokio::test]
    async fn a_waiter_sleeps_at_most_half_its_place_s_life_and_polls_by_its_place() {
        let (_server, locks) = client().await;
        let timing = LeaseOptions::default().timing().unwrap();
        let request = joining_the_line(&locks, request("r"), Wait::Forever);
        let life = request.announce.unwrap();
        let mut waiter = Waiter::new(&locks, request, timing, Wait::Forever);
        for place in [0, 3, 40] {
            let sleep = waiter.sleep_after(&contention(Some(place), 1));
            assert!(sleep <= life / 2, "{sleep:?} past half of {life:?}");
            if locks.shared().wakeups.availability() != Availability::Streaming {
                assert!(sleep <= poll_cap(place), "place {place}: {sleep:?}");
            }
        }
        locks.shutdown().await;
    }

    #[test]
    fn settings_are_checked() {
        let ok = LeaseOptions::default();
        let timing = ok.timing().unwrap();
        assert_eq!(timing.every, Duration::from_secs(10));
        assert_eq!(timing.margin, Duration::from_secs(2));
        let bad = |options: LeaseOptions| match options
            .request(LockKind::Exclusive, "r", None)
            .unwrap_err()
            .kind()
        {
            ErrorKind::InvalidArgument { argument, .. } => *argument,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            bad(LeaseOptions {
                details: LockDetails::default().ttl(Duration::ZERO),
                ..ok.clone()
            }),
            "ttl"
        );
        assert_eq!(
            bad(LeaseOptions {
                details: LockDetails::default().ttl(Duration::from_millis(5)),
                ..ok.clone()
            }),
            "ttl"
        );
        assert_eq!(
            bad(LeaseOptions {
                every: Some(Duration::from_secs(29)),
                ..ok.clone()
            }),
            "extend_every"
        );
        assert_eq!(
            bad(LeaseOptions {
                every: Some(Duration::ZERO),
                ..ok.clone()
            }),
            "extend_every"
        );
        assert_eq!(
            bad(LeaseOptions {
                every: Some(MIN_EXTEND_EVERY - Duration::from_nanos(1)),
                ..ok.clone()
            }),
            "extend_every"
        );
        let floor = LeaseOptions {
            every: Some(MIN_EXTEND_EVERY),
            ..ok.clone()
        };
        assert_eq!(floor.timing().unwrap().every, MIN_EXTEND_EVERY);
        let shortest = LeaseOptions {
            details: LockDetails::default().ttl(MIN_LEASE_TTL),
            ..ok.clone()
        };
        assert!(
            shortest.timing().is_ok(),
            "the shortest TTL works with its defaults"
        );
        assert_eq!(
            bad(LeaseOptions {
                margin: Some(Duration::from_secs(30)),
                ..ok.clone()
            }),
            "safety_margin"
        );
        assert_eq!(
            bad(LeaseOptions {
                lock_id: Some(String::new()),
                ..ok.clone()
            }),
            "lock_id"
        );
        let no_permits = ok.request(LockKind::Shared, "r", Some(0));
        assert!(matches!(
            no_permits.unwrap_err().kind(),
            ErrorKind::InvalidArgument {
                argument: "permits",
                ..
            }
        ));
        let empty = ok.request(LockKind::Exclusive, "", None);
        assert!(matches!(
            empty.unwrap_err().kind(),
            ErrorKind::InvalidArgument {
                argument: "resource",
                ..
            }
        ));
    }

    #[test]
    fn the_poll_cap_grows_a_step_per_place_and_stays_bounded() {
        assert_eq!(poll_cap(0), HEAD_POLL);
        assert_eq!(poll_cap(1), HEAD_POLL * 2);
        assert_eq!(poll_cap(63), HEAD_POLL * 64);
        assert_eq!(poll_cap(10_000), MAX_BACKOFF);
        assert_eq!(poll_cap(u64::MAX), MAX_BACKOFF);
    }

    #[test]
    fn jitter_stays_within_half_again() {
        for _ in 0..100 {
            let j = jitter(Duration::from_millis(100));
            assert!(
                j >= Duration::from_millis(100) && j < Duration::from_millis(150),
                "{j:?}"
            );
        }
    }
}
