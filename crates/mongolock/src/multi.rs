//! Locks on several resources at once: [`MultiLock`], made by [`LockClient::multi`], and the
//! [`MultiGuard`] it returns.
//!
//! All or nothing, without deadlock, and without holding a part of the set while waiting
//! for the rest:
//!
//! 1. The resources are put in one order (sorted, duplicates dropped), so two sets that
//!    overlap are always taken in the same order, whatever order their callers named them.
//! 2. A round tries each resource once, in that order, as a mutex attempt under one lock id
//!    for the whole set (a group: [`LockClient::unlock`] with it frees the whole set).
//! 3. If every attempt is granted, the set is held. If one is refused, everything taken in
//!    the round is released at once, and the call waits for the resource that refused it
//!    (in its line, woken by its release, as a [`Mutex`](crate::Mutex) waits) while holding
//!    nothing else. Once it holds that one, it tries the rest once each, in order, and so on.
//!
//! So a caller never waits while it holds anything but the one resource it waited for, and
//! holds that only for one attempt at each other member: two callers that want overlapping
//! sets in opposite orders cannot deadlock. Each member is a lease of its own with the
//! set's TTL, renewed by the client's keeper in the one renewal command of all its leases,
//! so a crash in the middle of an acquire leaves nothing that outlives the TTL, and a
//! dropped acquire releases what it took in the background.
//!
//! Round trips: an uncontended acquire of `n` resources is `n` attempts, one
//! `findAndModify` each, one after another (MongoDB changes one document atomically; a
//! transaction would take as many writes and could not hold a lease); a release is `n`
//! releases, sent together. A refused round costs the attempts made, the releases of the
//! members taken, and the wait.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::{Error, ErrorKind, Result};
use crate::guard::LockGuard;
use crate::lock::{LeaseState, LockKind, LossReason};
use crate::request::Nonce;
use crate::wait::{self, LeaseOptions, Wait, fresh_lock_id};

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
/// per resource and one loss signal. A caller never waits while holding a part of the set
/// beyond one attempt at each other member, so callers that ask for overlapping sets in
/// any order never deadlock. An uncontended acquire of `n` resources takes `n` round trips,
/// one after another (see the module's source for the steps).
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
    /// error that waiting cannot fix, or a release of a member taken in a refused round that
    /// failed (the client then retries that release in the background). Transient errors
    /// are retried.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point leaves nothing held: the members taken so far are
    /// released, and an attempt in flight is withdrawn, in the background
    /// ([`LockClient::shutdown`] waits for that).
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

    async fn acquire_within(&self, wait: Wait) -> Result<Option<MultiGuard>> {
        if self.resources.is_empty() {
            return Err(Error::invalid(
                "resources",
                "a multi-lock needs at least one resource",
            ));
        }
        let mut options = self.options.clone();
        options.lock_id.get_or_insert_with(fresh_lock_id);
        // Every member's request is built, and so checked, before anything is sent; each
        // attempt at a member is a new one (a nonce of its own).
        let requests = (self.resources.iter())
            .map(|resource| options.request(LockKind::Exclusive, resource, None))
            .collect::<Result<Vec<_>>>()?;
        let attempt = |index: usize, wait: Wait| {
            let (request, timing) = &requests[index];
            let request = request.clone().nonce(Nonce::new());
            let timing = *timing;
            async move { wait::acquire(&self.client, request, timing, wait).await }
        };
        let mut blocked: Option<usize> = None;
        loop {
            let mut held: Vec<Option<LockGuard>> = self.resources.iter().map(|_| None).collect();
            if let Some(index) = blocked {
                // The only wait, holding nothing else.
                match attempt(index, wait).await? {
                    Some(guard) => held[index] = Some(guard),
                    None => return Ok(None),
                }
            }
            let mut refused = None;
            for index in 0..self.resources.len() {
                if held[index].is_some() {
                    continue;
                }
                match attempt(index, Wait::Once).await {
                    Ok(Some(guard)) => held[index] = Some(guard),
                    Ok(None) => {
                        refused = Some(index);
                        break;
                    }
                    Err(error) if error.is_retryable() && !matches!(wait, Wait::Once) => {
                        // Waited for instead, where transient errors are retried.
                        refused = Some(index);
                        break;
                    }
                    Err(error) => {
                        release_all(held, wait).await?;
                        return Err(error);
                    }
                }
            }
            let Some(index) = refused else {
                let guards: Vec<LockGuard> = held.into_iter().flatten().collect();
                return Ok(Some(MultiGuard { guards }));
            };
            release_all(held, wait).await?;
            let out_of_time = match wait {
                Wait::Once => true,
                Wait::Until(deadline) => Instant::now() >= deadline,
                Wait::Forever => false,
            };
            if out_of_time {
                return Ok(None);
            }
            blocked = Some(index);
        }
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
