//! Locks on several resources at once: [`MultiLock`], made by [`LockClient::multi`], and the
//! [`MultiGuard`] it returns.
//!
//! All or nothing, without deadlock, without a lease on part of the set while it waits for
//! the rest, and in its turn, however many wait for its members:
//!
//! 1. The resources are put in one order (sorted, duplicates dropped), so two sets that
//!    overlap are always taken in the same order, whatever order their callers named them.
//! 2. A round tries each resource once, in that order, as a mutex attempt under one lock id
//!    for the whole set (a group: [`LockClient::unlock`] with it frees the whole set). If
//!    every attempt is granted, the set is held. If one is refused, everything taken in the
//!    round is released at once.
//! 3. The set then waits for its turn at each member, in member order: it stands in the
//!    member's line, woken as a [`Mutex`](crate::Mutex) waiter is, and its turn comes when
//!    its place heads the line and nobody holds the member. Its attempts there are never
//!    granted (they only wait for the turn), so it holds no lease while it waits. A turn it
//!    has reached is kept while it waits for the next: nobody else takes that member
//!    meanwhile (waiters stand behind the set, and single attempts are refused while anybody
//!    waits).
//! 4. With its turn at every member, one more round takes them all: as the head of every
//!    line, with nobody holding the member, each attempt is granted.
//!
//! Turns are reached in member order, so a set that keeps turns waits only for a member
//! above them, and two sets never wait for each other in a cycle. Code that holds a member
//! and then waits for a lower one (nested locks taken in another order) could wait for a
//! set that keeps its turn at the lower member while it waits for the held one; so a set
//! keeps its turns for a TTL at most: if the rest have not come by then, it lets them go and
//! waits again from the end of the lines, keeping them twice as long each time (an hour at
//! most). Waiters that come and go at its members cannot starve it, and nested locks are
//! held up for that long at worst. Each member is a lease of its own with the set's TTL,
//! renewed by the client's keeper in the one renewal command of all its leases, so a crash
//! in the middle of an acquire leaves nothing that outlives the TTL (a place in line lapses
//! within two), and a dropped acquire releases what it took and leaves the lines, in the
//! background.
//!
//! A [minimum hold](crate::LockDetails::min_hold) applies to a set held whole: the members
//! of a round that was refused (or whose call was dropped) were never worked under, so they
//! are let go of without it, and the set's next attempts find them free.
//!
//! Round trips: an uncontended acquire of `n` resources is `n` attempts, one
//! `findAndModify` each, one after another (MongoDB changes one document atomically; a
//! transaction would take as many writes and could not hold a lease); a release is `n`
//! releases, sent together. A refused round costs the attempts made and the releases of the
//! members taken; then come an attempt per member for its turn (more while it waits), and
//! the round that takes them.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::{Error, ErrorKind, Result};
use crate::guard::LockGuard;
use crate::lock::{LeaseState, LockKind, LossReason};
use crate::request::{AcquireRequest, Nonce};
use crate::run;
use crate::wait::{self, LeaseOptions, LeaseTiming, Reached, Turn, Wait, fresh_lock_id};

impl LockClient {
    /// A lock on every resource of `resources` at once, all or nothing. See [`MultiLock`].
    /// The order the resources are named in does not matter, and a resource named twice
    /// counts once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let both = locks.multi(["account-17", "account-4"]).acquire().await?;
    /// let token = both.fencing_token("account-4").expect("a member");
    /// both.release().await?;
    /// # let _ = token;
    /// # Ok(()) }
    /// ```
    pub fn multi<I, S>(&self, resources: I) -> MultiLock
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLock {
            client: self.clone(),
            resources: resources
                .into_iter()
                .map(Into::into)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            options: LeaseOptions::default(),
        }
    }
}

/// Exclusive locks on several resources, taken all or nothing. Made by
/// [`LockClient::multi`].
///
/// Every acquire returns a [`MultiGuard`]: one lease for the set, with one fencing token
/// per resource and one loss signal. A waiting caller holds no lease while it waits: it
/// waits for its turn at each member in member order, keeps the turns it reached (for a TTL
/// at most, then longer each time), and takes every member in one round once all are its
/// turn. So callers that ask for overlapping sets in any order never deadlock, and waiters
/// that keep coming at its members do not starve it. An uncontended acquire of `n`
/// resources takes `n` round trips, one after another (see the module's source for the
/// steps).
///
/// While a set keeps its turn at a free member, that member is kept for it: code that holds
/// another member and waits for this one waits up to that long. Take nested locks in sorted
/// order, or as one set.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use std::time::Duration;
///
/// let transfer = locks.multi(["account-4", "account-17"]).ttl(Duration::from_secs(10));
/// let held = locks.mutex("account-17").acquire().await?;
/// assert!(transfer.try_acquire().await?.is_none(), "all or nothing");
/// assert!(locks.mutex("account-4").try_acquire().await?.is_some(), "nothing of it held");
/// held.release().await?;
/// let both = transfer.acquire().await?;
/// assert_eq!(both.resources().collect::<Vec<_>>(), ["account-17", "account-4"]);
/// both.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is used"]
pub struct MultiLock {
    client: LockClient,
    /// Sorted, without duplicates.
    resources: Vec<String>,
    options: LeaseOptions,
}

impl MultiLock {
    crate::handle::lease_settings!();

    /// The resources, in the order they are taken (sorted).
    pub fn resources(&self) -> impl Iterator<Item = &str> {
        self.resources.iter().map(String::as_str)
    }

    /// Waits as long as needed for every resource, and returns the set's guard.
    ///
    /// # Errors
    ///
    /// Bad settings or no resource at all
    /// ([`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)), a database
    /// error that waiting cannot fix, a member sealed
    /// ([`ErrorKind::Sealed`](crate::ErrorKind::Sealed)), or a release of a member taken in a refused round that
    /// failed (the client then retries that release in the background). Transient errors
    /// are retried.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point leaves nothing held: the members taken so far are
    /// released, an attempt in flight is withdrawn, and the set's places leave the members'
    /// lines, in the background ([`LockClient::shutdown`] waits for that).
    pub async fn acquire(&self) -> Result<MultiGuard> {
        let guard = self.acquire_within(Wait::Forever).await?;
        Ok(guard.expect("waiting forever returns a guard or an error"))
    }

    /// One round: one attempt at each resource, `None` if any is held by others (then
    /// nothing of the set is held when this returns).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), and transient errors: after one, a member's attempt is
    /// sent once more at once, and a second one is returned.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<Option<MultiGuard>> {
        self.acquire_within(Wait::Once).await
    }

    /// Waits up to `timeout` for every resource: `None` if the wait gave up (then nothing
    /// of the set is held when this returns). A `timeout` too long for the clock waits as
    /// long as needed.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<MultiGuard>> {
        let wait = Instant::now()
            .checked_add(timeout)
            .map_or(Wait::Forever, Wait::Until);
        self.acquire_within(wait).await
    }

    /// Waits as long as needed for every resource, runs `work` with the set's guard, and
    /// releases the set when `work` returns: `work`'s result. The set counts as lost as soon
    /// as any member is: `work` is dropped then. As the handles' closure forms do, see
    /// [running work under a lock](crate::Mutex#running-work-under-a-lock).
    ///
    /// # Errors
    ///
    /// This crate's errors, as `E`: those of [`acquire`](Self::acquire) if the set was not
    /// granted, and [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) naming the member
    /// lost if one was lost before `work` returned (`work` was dropped). `work`'s own error,
    /// untouched. A release that fails after `work` returned is logged, not returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and lets go of every member in the background, as
    /// dropping the set's guard does (before the grant, as [`acquire`](Self::acquire)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let moved = locks.multi(["account-4", "account-17"]).run(async |both| {
    ///     // ... debit one and credit the other, each write fenced with its token ...
    ///     let from = both.fencing_token("account-4").expect("a member");
    ///     let to = both.fencing_token("account-17").expect("a member");
    ///     Ok::<_, mongolock::Error>((from, to))
    /// }).await?;
    /// assert!(moved.0 > 0 && moved.1 > 0);
    /// # Ok(()) }
    /// ```
    pub async fn run<T, E>(
        &self,
        work: impl AsyncFnOnce(&MultiGuard) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E>
    where
        E: From<Error>,
    {
        run::under(self.acquire().await?, work).await
    }

    /// One round at every resource: runs `work` with the set's guard if the set was taken,
    /// as [`run`](Self::run) does, and `None` without running it if any member is held by
    /// others.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run), with those of [`try_acquire`](Self::try_acquire) for the round.
    ///
    /// # Cancel safety
    ///
    /// As [`run`](Self::run).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let set = locks.multi(["a", "b"]);
    /// let b = locks.mutex("b").acquire().await?;
    /// assert_eq!(set.try_run(async |_both| Ok::<_, mongolock::Error>(1)).await?, None);
    /// b.release().await?;
    /// assert_eq!(set.try_run(async |_both| Ok::<_, mongolock::Error>(1)).await?, Some(1));
    /// # Ok(()) }
    /// ```
    pub async fn try_run<T, E>(
        &self,
        work: impl AsyncFnOnce(&MultiGuard) -> std::result::Result<T, E>,
    ) -> std::result::Result<Option<T>, E>
    where
        E: From<Error>,
    {
        match self.try_acquire().await? {
            Some(guard) => run::under(guard, work).await.map(Some),
            None => Ok(None),
        }
    }

    /// Waits up to `timeout` for every resource: runs `work` with the set's guard if the set
    /// was taken, as [`run`](Self::run) does, and `None` without running it if the wait gave
    /// up. The timeout bounds the wait only, not the work.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run), with those of [`acquire_timeout`](Self::acquire_timeout) for
    /// the wait.
    ///
    /// # Cancel safety
    ///
    /// As [`run`](Self::run).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// use std::time::Duration;
    ///
    /// let set = locks.multi(["a", "b"]);
    /// let a = locks.mutex("a").acquire().await?;
    /// let wait = Duration::from_millis(50);
    /// assert_eq!(set.run_timeout(wait, async |_both| Ok::<_, mongolock::Error>(1)).await?, None);
    /// a.release().await?;
    /// let wait = Duration::from_secs(5);
    /// assert_eq!(set.run_timeout(wait, async |_both| Ok::<_, mongolock::Error>(1)).await?, Some(1));
    /// # Ok(()) }
    /// ```
    pub async fn run_timeout<T, E>(
        &self,
        timeout: Duration,
        work: impl AsyncFnOnce(&MultiGuard) -> std::result::Result<T, E>,
    ) -> std::result::Result<Option<T>, E>
    where
        E: From<Error>,
    {
        match self.acquire_timeout(timeout).await? {
            Some(guard) => run::under(guard, work).await.map(Some),
            None => Ok(None),
        }
    }

    async fn acquire_within(&self, wait: Wait) -> Result<Option<MultiGuard>> {
        if self.resources.is_empty() {
            return Err(Error::invalid(
                "resources",
                "a multi-lock needs at least one resource",
            ));
        }
        let mut options = self.options.clone();
        options.lock_id.get_or_insert_with(fresh_lock_id);
        // Every member's request is built, and so checked, before anything is sent.
        let members = (self.resources.iter())
            .map(|resource| options.request(LockKind::Exclusive, resource, None))
            .collect::<Result<Vec<_>>>()?;
        let set = Set {
            client: &self.client,
            members,
        };
        // How long the set keeps its turns at free members while it waits for the rest.
        let mut keep_turns_for = options.ttl();
        loop {
            // 1. One attempt at each member: an uncontended set is taken so.
            let held = set.nothing_held();
            if let Some(guard) = set.round(held, wait).await? {
                return Ok(Some(guard));
            }
            if out_of_time(wait) {
                return Ok(None);
            }
            // 2. Its turn at each member, in member order.
            let (turns, held) = match set.turns(wait, keep_turns_for).await? {
                Gathered::All { turns, held } => (turns, held),
                Gathered::OutOfTime => return Ok(None),
                Gathered::KeptTooLong => {
                    // Let go of the turns (a resource held elsewhere may wait for one of
                    // them), and take them again from the end of the lines, keeping them
                    // longer next time.
                    keep_turns_for = keep_turns_for.saturating_mul(2).min(MAX_KEEP_TURNS);
                    continue;
                }
            };
            // 3. Every member at once: as the head of every line, each attempt is granted.
            if let Some(guard) = set.round(held, wait).await? {
                for turn in turns {
                    turn.taken();
                }
                return Ok(Some(guard));
            }
            // A place lapsed meanwhile (its client cut off for longer than its life), or the
            // resource was given to somebody else by an operator: start again.
            drop(turns);
            if out_of_time(wait) {
                return Ok(None);
            }
        }
    }
}

/// The longest a set keeps its turns at free members while it waits for the rest.
const MAX_KEEP_TURNS: Duration = Duration::from_secs(3_600);

/// Whether `wait` has no time left.
fn out_of_time(wait: Wait) -> bool {
    match wait {
        Wait::Once => true,
        Wait::Until(deadline) => Instant::now() >= deadline,
        Wait::Forever => false,
    }
}

/// A set being acquired: its client, and each member's request (all under the set's lock id),
/// in member order.
struct Set<'a> {
    client: &'a LockClient,
    members: Vec<(AcquireRequest, LeaseTiming)>,
}

/// How waiting for the set's turns ended (see [`Set::turns`]).
enum Gathered {
    /// Its turn at every member (or, at some, the lease its lock id held already).
    All {
        turns: Vec<Turn>,
        held: Vec<Option<LockGuard>>,
    },
    /// The call's time ran out.
    OutOfTime,
    /// The turns reached were kept as long as allowed before the rest came.
    KeptTooLong,
}

impl Set<'_> {
    fn nothing_held(&self) -> Vec<Option<LockGuard>> {
        self.members.iter().map(|_| None).collect()
    }

    /// One attempt at each member not `held` yet, in member order, each a new one (a nonce of
    /// its own): the set, or `None` if a member was refused (everything the round holds is
    /// released then). A transient error counts as a refusal for a call that waits (which
    /// retries), and is returned by one that does not.
    async fn round(
        &self,
        mut held: Vec<Option<LockGuard>>,
        wait: Wait,
    ) -> Result<Option<MultiGuard>> {
        for (index, (request, timing)) in self.members.iter().enumerate() {
            if held[index].is_some() {
                continue;
            }
            let request = request.clone().nonce(Nonce::new());
            match wait::acquire(self.client, request, *timing, Wait::Once).await {
                Ok(Some(guard)) => {
                    // Nobody works under it until the set is whole: let go of before then
                    // (a refused round, a dropped call), it starts no minimum hold.
                    guard.waive_hold(true);
                    held[index] = Some(guard);
                }
                Ok(None) => {
                    release_all(held, wait).await?;
                    return Ok(None);
                }
                Err(error) if error.is_retryable() && !matches!(wait, Wait::Once) => {
                    release_all(held, wait).await?;
                    return Ok(None);
                }
                Err(error) => {
                    release_all(held, wait).await?;
                    return Err(error);
                }
            }
        }
        let guards: Vec<LockGuard> = held.into_iter().flatten().collect();
        // The set is whole: its holder works under every member from now on.
        for guard in &guards {
            guard.waive_hold(false);
        }
        Ok(Some(MultiGuard { guards }))
    }

    /// Waits for the set's turn at each member, in member order (see the module docs), as
    /// `wait` allows; once the first is reached, for `keep_for` at most. A member whose lease
    /// the set's lock id holds already (a restarted holder's) is resumed instead.
    async fn turns(&self, wait: Wait, keep_for: Duration) -> Result<Gathered> {
        let mut turns = Vec::new();
        let mut held = self.nothing_held();
        let mut first_reached: Option<Instant> = None;
        for (index, (request, timing)) in self.members.iter().enumerate() {
            let limit = match first_reached.and_then(|at| at.checked_add(keep_for)) {
                Some(until) => Wait::Until(wait.deadline().map_or(until, |d| d.min(until))),
                None => wait,
            };
            let request = request.clone().nonce(Nonce::new());
            let reached = wait::wait_turn(self.client, request, *timing, limit, &turns).await;
            match reached {
                Ok(Some(Reached::Turn(turn))) => turns.push(*turn),
                Ok(Some(Reached::Lease(guard))) => held[index] = Some(guard),
                Ok(None) => {
                    drop(turns);
                    release_all(held, wait).await?;
                    return Ok(if out_of_time(wait) {
                        Gathered::OutOfTime
                    } else {
                        Gathered::KeptTooLong
                    });
                }
                Err(error) => {
                    drop(turns);
                    release_all(held, wait).await?;
                    return Err(error);
                }
            }
            first_reached.get_or_insert_with(Instant::now);
        }
        Ok(Gathered::All { turns, held })
    }
}

/// Releases the members taken in a refused round, all at once. A member the server no
/// longer held is not held: that is no error here. A release that failed is owed from then
/// on: the client retries it in the background, and the next attempt of the set's lock id on
/// that member carries it out first (see `Keeper::settle`), so the next round never meets
/// its own lock id still holding a member. A call that waits goes on after a transient
/// failure, as it does after a failed attempt; any other failure is returned.
async fn release_all(held: Vec<Option<LockGuard>>, wait: Wait) -> Result<()> {
    let results = join_all(held.into_iter().flatten().map(LockGuard::release)).await;
    for result in results {
        match result {
            Err(error) if matches!(error.kind(), ErrorKind::LeaseLost { .. }) => {}
            Err(error) if error.is_retryable() && !matches!(wait, Wait::Once) => {
                tracing::warn!(%error, "could not release a member; the client retries it");
            }
            Err(error) => return Err(error),
            Ok(()) => {}
        }
    }
    Ok(())
}

/// A set of resources held together: one lease per resource, renewed in the background,
/// reported as one. Made by [`MultiLock`]'s acquires.
///
/// The set counts as lost as soon as any member is lost ([`lost`](MultiGuard::lost) fires
/// with that member's reason): stop the work the set protects. The other members are still
/// held until the guard is released or dropped. Pass each resource's
/// [`fencing_token`](MultiGuard::fencing_token) to what that resource protects.
///
/// Dropping the guard releases every member in the background, as dropping a
/// [`LockGuard`] does.
#[must_use = "dropping a multi-guard releases every lock of the set at once (in the background); hold it while you work"]
#[derive(Debug)]
pub struct MultiGuard {
    /// In the order of their resources; never empty.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The resources held, sorted.
    pub fn resources(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(LockGuard::resource)
    }

    /// The fencing token of `resource`'s grant, or `None` if it is not a member.
    pub fn fencing_token(&self, resource: &str) -> Option<i64> {
        self.member(resource).map(LockGuard::fencing_token)
    }

    /// A [`Fence`](crate::Fence) with `resource`'s fencing token, for the documents that
    /// resource protects; `None` if it is not a member.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
    /// # let server = mongolock_testkit::TestServer::start().await.unwrap();
    /// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
    /// let both = locks.multi(["from", "to"]).acquire().await?;
    /// assert_eq!(both.fence("to").map(|f| f.token()), both.fencing_token("to"));
    /// assert!(both.fence("elsewhere").is_none());
    /// # Ok(()) }
    /// ```
    pub fn fence(&self, resource: &str) -> Option<crate::Fence> {
        self.fencing_token(resource).map(crate::Fence::new)
    }

    /// Each member's guard, in the order of their resources.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The lock id every member is held with: [`LockClient::unlock`] with it frees the whole
    /// set.
    pub fn lock_id(&self) -> &str {
        self.guards[0].lock_id()
    }

    /// Lost if any member is lost (the first one's reason, in resource order); else
    /// suspended if any member's renewals are failing; else held.
    pub fn state(&self) -> LeaseState {
        let states = self.guards.iter().map(LockGuard::state);
        let mut worst = LeaseState::Held;
        for state in states {
            match state {
                LeaseState::Lost(_) => return state,
                LeaseState::Suspended => worst = LeaseState::Suspended,
                _ => {}
            }
        }
        worst
    }

    /// True once any member is lost (or the set was released).
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// How long every member is sure to last without another successful renewal: the
    /// shortest of their times left.
    pub fn time_left(&self) -> Duration {
        self.guards
            .iter()
            .map(LockGuard::time_left)
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// Resolves when any member's lease is lost, with its reason.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches. Dropping the future changes nothing.
    pub async fn lost(&self) -> LossReason {
        let losses = self.guards.iter().map(|guard| Box::pin(guard.lost()));
        select_all(losses).await.0
    }

    /// Releases every member, all at once.
    ///
    /// # Errors
    ///
    /// `Ok` only if every member was held throughout. Otherwise the first error in resource
    /// order, as [`LockGuard::release`] gives it: every member is released all the same.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`]: the releases not done when the future is dropped are
    /// retried by the client in the background.
    pub async fn release(self) -> Result<()> {
        let results = join_all(self.guards.into_iter().map(LockGuard::release)).await;
        results.into_iter().collect()
    }

    fn member(&self, resource: &str) -> Option<&LockGuard> {
        self.guards
            .binary_search_by(|guard| guard.resource().cmp(resource))
            .ok()
            .map(|index| &self.guards[index])
    }
}

impl run::Held for MultiGuard {
    fn lost(&self) -> impl Future<Output = LossReason> + Send {
        MultiGuard::lost(self)
    }

    fn state(&self) -> LeaseState {
        MultiGuard::state(self)
    }

    fn lost_error(&self, reason: LossReason) -> Error {
        // The member that was lost (the first, in resource order), else the first member.
        let guards = self.guards();
        let lost = guards.iter().find(|guard| guard.is_lost());
        let resource = lost.or(guards.first()).map_or("", |guard| guard.resource());
        wait::lease_lost(resource, reason)
    }

    fn release(self) -> impl Future<Output = Result<()>> + Send {
        MultiGuard::release(self)
    }
}
