//! Leases: what a held guard knows about its lock, and the keeper that renews every lease of
//! one [`LockClient`](crate::LockClient) in the background.
//!
//! # The local deadline
//!
//! A lease keeps a deadline on the monotonic clock: the time the last successful grant or
//! renewal was *sent*, plus the TTL, minus a safety margin. The server starts counting the
//! TTL when it executes the command, which is after it was sent, so the server's expiry is
//! later than the local deadline (clock rates differ by far less than the margin). When the
//! deadline passes without a renewal, the lease is lost: [`LockGuard::is_lost`] turns true
//! at once, by reading the clock, even if no task ran in between (a paused process learns it
//! the moment it resumes), and [`LockGuard::lost`] resolves. That is before the server can
//! grant the lock to anyone else.
//!
//! # The keeper
//!
//! Every lease carries its client's keeper id in its stored entry. One background task per
//! client renews them all with one `update` per tick ([`command::keepalive`]), whatever
//! their number, each by its own TTL. A tick runs at the shortest renewal period among the
//! leases (a third of the TTL by default), and each renewal's time limit is shorter than
//! the time the most urgent lease has left (and than its renewal period, or a quarter of its
//! TTL), so a hung call cannot hide a loss and is retried in time; failed renewals are
//! retried every 250 ms at most.
//!
//! The reply counts the resources renewed. When that is exactly the number of resources the
//! client holds leases on, with one lease each and no acquire of this client in flight, every
//! lease was renewed. Otherwise one more read lists the live leases of the keeper, and a lease
//! missing from it is lost: the server no longer has it (force-released, purged, expired by
//! the server's clock).
//!
//! [`LockGuard::is_lost`]: crate::LockGuard::is_lost
//! [`LockGuard::lost`]: crate::LockGuard::lost
//! [`command::keepalive`]: crate::command::keepalive

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tracing::Instrument;

use crate::command::{Context, keepalive};
use crate::lock::Grant;

/// Where a lease stands, as its holder sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseState {
    /// Held: the last renewal (or the grant) succeeded and the local deadline is ahead.
    Held,
    /// Renewals are failing, but the local deadline has not passed: the lease may still be
    /// held, and the keeper keeps trying.
    Suspended,
    /// Lost: the local deadline passed, the server said the lease is gone, or the guard was
    /// released. Stop touching what the lock protects.
    Lost(LossReason),
}

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// No renewal succeeded before the local deadline (server unreachable, replies too
    /// slow, or this process paused).
    Deadline,
    /// The server no longer has the lease: it was force-released, purged, or expired by the
    /// server's clock.
    Revoked,
    /// The guard released it.
    Released,
}

/// One held lease, shared by its guard and the keeper.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) grant: Grant,
    /// The TTL the lease is renewed for.
    pub(crate) ttl: Duration,
    /// Subtracted from every deadline.
    pub(crate) margin: Duration,
    /// How often the keeper renews it.
    pub(crate) every: Duration,
    /// When the attempt that was granted was sent.
    pub(crate) sent_at: Instant,
    deadline: Mutex<Instant>,
    state: watch::Sender<LeaseState>,
}

impl Lease {
    /// A lease granted by an attempt sent at `sent_at`.
    ///
    /// The deadline counts from the send of the copy of the attempt whose reply came back,
    /// for what the server said the grant had left when it executed that copy (the TTL for
    /// a grant that copy made; less when an earlier copy made it and its reply was lost):
    /// the copy executed after it was sent, so the server's expiry is no earlier.
    pub(crate) fn new(
        grant: Grant,
        ttl: Duration,
        margin: Duration,
        every: Duration,
        sent_at: Instant,
    ) -> Self {
        let left = grant.remaining.map_or(ttl, |remaining| remaining.min(ttl));
        let deadline = sent_at + left.saturating_sub(margin);
        Lease {
            grant,
            ttl,
            margin,
            every,
            sent_at,
            deadline: Mutex::new(deadline),
            state: watch::Sender::new(LeaseState::Held),
        }
    }

    /// The local deadline.
    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state, with the deadline read against the clock now.
    pub(crate) fn state(&self) -> LeaseState {
        let state = *self.state.borrow();
        match state {
            LeaseState::Lost(_) => state,
            _ if Instant::now() >= self.deadline() => LeaseState::Lost(LossReason::Deadline),
            _ => state,
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        matches!(self.state(), LeaseState::Lost(_))
    }

    /// Marks the lease lost (once; the first reason stays).
    pub(crate) fn lose(&self, reason: LossReason) {
        let changed = self.state.send_if_modified(|state| match state {
            LeaseState::Lost(_) => false,
            _ => {
                *state = LeaseState::Lost(reason);
                true
            }
        });
        if changed && reason != LossReason::Released {
            crate::observe::lease_lost(&self.grant, reason);
        }
    }

    /// A renewal sent at `sent_at` succeeded. Ignored once the lease is lost: a lost lease
    /// is never revived, and a reply that arrives after the deadline proves nothing.
    fn renewed(&self, sent_at: Instant) {
        if self.is_lost() {
            self.lose(LossReason::Deadline);
            return;
        }
        {
            let mut deadline = self.deadline.lock().unwrap_or_else(|e| e.into_inner());
            let next = sent_at + self.ttl.saturating_sub(self.margin);
            if next > *deadline {
                *deadline = next;
            }
        }
        self.state.send_if_modified(|state| {
            if *state == LeaseState::Suspended {
                *state = LeaseState::Held;
                true
            } else {
                false
            }
        });
    }

    /// A renewal failed: the lease may still be held until its deadline.
    fn suspended(&self) {
        if self.is_lost() {
            self.lose(LossReason::Deadline);
            return;
        }
        self.state.send_if_modified(|state| {
            if *state == LeaseState::Held {
                *state = LeaseState::Suspended;
                true
            } else {
                false
            }
        });
    }

    /// Resolves when the lease is lost, with the reason.
    pub(crate) async fn lost(&self) -> LossReason {
        let mut changes = self.state.subscribe();
        loop {
            if let LeaseState::Lost(reason) = self.state() {
                // Make the loss visible to every observer, not only to this clock reading.
                self.lose(reason);
                return reason;
            }
            let deadline = self.deadline();
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

/// The keeper of one client: its id (stored in every entry it renews), its leases and its
/// background task.
#[derive(Debug)]
pub(crate) struct Keeper {
    pub(crate) id: String,
    leases: Mutex<Registry>,
    /// Acquire attempts of this keeper sent and not settled yet: while one is, a renewal
    /// count may include its grant, so the keeper checks leases one by one.
    in_flight: AtomicUsize,
    /// Wakes the task when a lease is added (its period may be shorter).
    added: Notify,
}

#[derive(Debug, Default)]
struct Registry {
    leases: HashMap<u64, Arc<Lease>>,
    next_key: u64,
    running: bool,
}

/// Counts one acquire attempt in flight for as long as it lives.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Keeper>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The retry period after a failed renewal, at most: failures are retried sooner than the
/// normal period, so a short outage does not cost the lease.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);

impl Keeper {
    pub(crate) fn new() -> Self {
        Keeper {
            id: format!("{:032x}", rand::random::<u128>()),
            leases: Mutex::new(Registry::default()),
            in_flight: AtomicUsize::new(0),
            added: Notify::new(),
        }
    }

    /// Counts an attempt in flight until the returned value is dropped.
    pub(crate) fn in_flight(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Keeps `lease` alive from now on, starting the background task if needed; returns the
    /// key to remove it with.
    pub(crate) fn add(self: &Arc<Self>, ctx: &Arc<Context>, lease: Arc<Lease>) -> u64 {
        let mut registry = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        let key = registry.next_key;
        registry.next_key += 1;
        registry.leases.insert(key, lease);
        if !registry.running {
            registry.running = true;
            tokio::spawn(run(Arc::downgrade(self), ctx.clone()));
        }
        drop(registry);
        self.added.notify_one();
        key
    }

    /// Stops keeping the lease `key` alive.
    pub(crate) fn remove(&self, key: u64) {
        let mut registry = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        registry.leases.remove(&key);
    }

    /// The number of leases kept alive.
    pub(crate) fn len(&self) -> usize {
        let registry = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        registry.leases.len()
    }

    /// The leases not lost yet, or None (and the task marked stopped) when there are none.
    fn snapshot(&self) -> Option<Vec<Arc<Lease>>> {
        let mut registry = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        registry
            .leases
            .retain(|_, lease| !matches!(*lease.state.borrow(), LeaseState::Lost(_)));
        if registry.leases.is_empty() {
            registry.running = false;
            return None;
        }
        Some(registry.leases.values().cloned().collect())
    }
}

/// The background task: renews the keeper's leases until it has none, or the keeper is
/// gone.
async fn run(keeper: Weak<Keeper>, ctx: Arc<Context>) {
    let mut last_tick = Instant::now();
    let mut failed = false;
    loop {
        let Some(keeper) = keeper.upgrade() else {
            return;
        };
        let Some(leases) = keeper.snapshot() else {
            return;
        };
        let period = leases
            .iter()
            .map(|l| l.every)
            .min()
            .unwrap_or(RETRY_AFTER_FAILURE);
        let next_tick = last_tick
            + if failed {
                period.min(RETRY_AFTER_FAILURE)
            } else {
                period
            };
        if Instant::now() >= next_tick {
            last_tick = Instant::now();
            let span = tracing::debug_span!("mongolock.renew", leases = leases.len());
            failed = !tick(&keeper, &ctx).instrument(span).await;
            continue;
        }
        // Sleep until the next tick, a deadline (to report the loss on time), or a new lease.
        let first_deadline = leases.iter().map(|l| l.deadline()).min();
        let wake_at = first_deadline.map_or(next_tick, |d| d.min(next_tick));
        tokio::select! {
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = keeper.added.notified() => {}
        }
        for lease in &leases {
            if lease.is_lost() {
                lease.lose(LossReason::Deadline);
            }
        }
    }
}

/// One renewal of every lease the keeper holds; false if it failed.
async fn tick(keeper: &Arc<Keeper>, ctx: &Context) -> bool {
    let Some(leases) = keeper.snapshot() else {
        return true;
    };
    let now = Instant::now();
    let mut live = Vec::new();
    for lease in leases {
        if lease.is_lost() {
            lease.lose(LossReason::Deadline);
        } else {
            live.push(lease);
        }
    }
    // A renewal may take the time the most urgent lease has left, and no more than a
    // renewal period (a quarter of its TTL at least): a hung call fails early enough to be
    // retried before the deadline.
    let Some(limit) = live
        .iter()
        .map(|l| {
            let left = l.deadline().saturating_duration_since(now);
            left.min(l.every.max(l.ttl / 4))
        })
        .min()
    else {
        return true;
    };
    let resources: HashSet<&str> = live.iter().map(|l| l.grant.resource()).collect();
    let in_flight_before = keeper.in_flight.load(Ordering::SeqCst);
    let sent_at = Instant::now();
    let renewed = keepalive::renew(ctx, &keeper.id, limit).await;
    let in_flight_after = keeper.in_flight.load(Ordering::SeqCst);
    crate::observe::renewal(renewed.is_ok());
    let count = match renewed {
        Ok(count) => count,
        Err(error) => {
            tracing::warn!(%error, leases = live.len(), "renewal failed");
            for lease in &live {
                lease.suspended();
            }
            return false;
        }
    };
    let certain = in_flight_before == 0
        && in_flight_after == 0
        && resources.len() == live.len()
        && count == resources.len() as u64;
    if certain {
        for lease in &live {
            lease.renewed(sent_at);
        }
        return true;
    }
    // Which of them does the server still have?
    let limit = live
        .iter()
        .map(|l| l.deadline().saturating_duration_since(Instant::now()))
        .min()
        .unwrap_or_default();
    match keepalive::live(ctx, &keeper.id, limit.max(Duration::from_millis(1))).await {
        Ok(held) => {
            let held: HashSet<(String, String)> = held.into_iter().collect();
            for lease in &live {
                let key = (
                    lease.grant.resource().to_owned(),
                    lease.grant.lock_id().to_owned(),
                );
                if held.contains(&key) {
                    lease.renewed(sent_at);
                } else {
                    tracing::warn!(
                        resource = lease.grant.resource(),
                        lock_id = lease.grant.lock_id(),
                        "lease revoked: the server no longer has it"
                    );
                    lease.lose(LossReason::Revoked);
                }
            }
            true
        }
        Err(error) => {
            tracing::warn!(%error, "could not check which leases are live");
            for lease in &live {
                lease.suspended();
            }
            false
        }
    }
}

/// The safety margin for a TTL when the caller sets none: a tenth of it, at most two
/// seconds.
pub(crate) fn default_margin(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Holder, LockKind};
    use bson::DateTime;

    fn grant() -> Grant {
        Grant {
            holder: Holder {
                resource: "r".into(),
                lock_id: "l".into(),
                kind: LockKind::Exclusive,
                owner: None,
                host: None,
                token: 7,
                nonce: None,
                created_at: DateTime::from_millis(0),
                renewed_at: DateTime::from_millis(0),
                expires_at: None,
                ttl: None,
            },
            new: true,
            remaining: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_is_the_send_time_plus_ttl_minus_the_margin() {
        let sent = Instant::now();
        let lease = Lease::new(
            grant(),
            Duration::from_secs(10),
            Duration::from_secs(1),
            Duration::from_secs(3),
            sent,
        );
        assert_eq!(lease.deadline(), sent + Duration::from_secs(9));
        tokio::time::advance(Duration::from_secs(5)).await;
        lease.renewed(sent + Duration::from_secs(4));
        assert_eq!(lease.deadline(), sent + Duration::from_secs(13));
        // An older renewal never moves the deadline back.
        lease.renewed(sent + Duration::from_secs(1));
        assert_eq!(lease.deadline(), sent + Duration::from_secs(13));
        assert_eq!(lease.state(), LeaseState::Held);
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_an_earlier_copy_made_counts_from_what_the_server_left_of_it() {
        let sent = Instant::now();
        let lease = |remaining| {
            let grant = Grant {
                remaining,
                ..grant()
            };
            Lease::new(
                grant,
                Duration::from_secs(10),
                Duration::from_secs(1),
                Duration::from_secs(3),
                sent,
            )
        };
        // A repeated attempt returned the grant of a copy whose reply was lost, 4 s earlier.
        assert_eq!(
            lease(Some(Duration::from_secs(6))).deadline(),
            sent + Duration::from_secs(5)
        );
        // A fresh grant: the whole TTL; a server clock that reads more never lengthens it.
        assert_eq!(
            lease(Some(Duration::from_secs(10))).deadline(),
            sent + Duration::from_secs(9)
        );
        assert_eq!(
            lease(Some(Duration::from_secs(60))).deadline(),
            sent + Duration::from_secs(9)
        );
        // Less left than the margin: lost at once.
        assert!(lease(Some(Duration::from_millis(500))).is_lost());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_lost_at_its_deadline_even_if_nothing_runs() {
        let lease = Lease::new(
            grant(),
            Duration::from_secs(10),
            Duration::from_secs(1),
            Duration::from_secs(3),
            Instant::now(),
        );
        lease.suspended();
        assert_eq!(lease.state(), LeaseState::Suspended);
        tokio::time::advance(Duration::from_millis(8_999)).await;
        assert!(!lease.is_lost());
        tokio::time::advance(Duration::from_millis(1)).await;
        // No task ran: the state is read against the clock.
        assert_eq!(lease.state(), LeaseState::Lost(LossReason::Deadline));
        // A late renewal does not revive it.
        lease.renewed(Instant::now());
        assert!(lease.is_lost());
        assert_eq!(lease.lost().await, LossReason::Deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn lost_resolves_at_the_deadline_and_on_revocation() {
        let lease = Arc::new(Lease::new(
            grant(),
            Duration::from_secs(10),
            Duration::ZERO,
            Duration::from_secs(3),
            Instant::now(),
        ));
        let start = Instant::now();
        assert_eq!(lease.lost().await, LossReason::Deadline);
        assert_eq!(Instant::now() - start, Duration::from_secs(10));

        let lease = Arc::new(Lease::new(
            grant(),
            Duration::from_secs(10),
            Duration::ZERO,
            Duration::from_secs(3),
            Instant::now(),
        ));
        let waiter = tokio::spawn({
            let lease = lease.clone();
            async move { lease.lost().await }
        });
        tokio::task::yield_now().await;
        lease.lose(LossReason::Revoked);
        lease.lose(LossReason::Deadline);
        assert_eq!(
            waiter.await.unwrap(),
            LossReason::Revoked,
            "the first reason stays"
        );
    }

    #[test]
    fn the_default_margin_is_a_tenth_at_most_two_seconds() {
        assert_eq!(
            default_margin(Duration::from_secs(3)),
            Duration::from_millis(300)
        );
        assert_eq!(
            default_margin(Duration::from_secs(300)),
            Duration::from_secs(2)
        );
    }
}
