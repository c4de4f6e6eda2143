//! Keeping waiters' places in line: one command per client, whatever the number of waiters.
//!
//! A waiting acquire joins its resource's line with its first refused attempt (see
//! `command/acquire.rs`), and its place lasts [`place_life`](crate::wait::place_life) from then. Rather
//! than each waiter attempting again to keep its place, the client's [`Places`] refreshes
//! every place its waiters hold, in one `update` a sixth of a life apart (a third of the TTL)
//! ([`refresh_places`](crate::command::refresh_places)):
//!
//! ```text
//! update: <collection>, ordered: false, updates: [                   // one per place
//!   { q: { _id: <resource>, mongolock: 1, queue: { $elemMatch: { lockId: <id> } },
//!          $expr: <that place is live> },                              // never revived
//!     u: [ { $set: { queue: <the line, that place's until = $$NOW + life> } } ] },
//!   ... ]
//! ```
//!
//! A waiter holds its place through a [`Held`]: dropping it (the waiter got the lock, gave
//! up, or its future was dropped) stops the refreshes at once, so a place is never kept for
//! a waiter that is gone. A waiter also says until when it is surely back
//! ([`Held::keep_until`]: the end of its sleep or attempt, and a life more): a waiter whose
//! future is no longer polled (forgotten, or stuck behind something else) stops being
//! refreshed then, and its place lapses a life later, as if its process had died. A refresh
//! only ever extends a live place: a place that lapsed (its waiter's client was cut off
//! longer than a life) stays lapsed, and the waiter's next attempt joins the line again at
//! its end. A failed refresh is logged and tried again at
//! the next period, so a place outlives an outage of up to five periods; the waiter's own
//! attempts leave its place as it is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::command::Context;
use crate::command::refresh_places::{self, Place};

impl Place {
    /// How often the place is refreshed: six times in a life, so that a place outlives a
    /// few failed refreshes.
    fn period(&self) -> Duration {
        self.life / 6
    }
}

/// The places the waiters of one client hold, and the task that refreshes them.
#[derive(Debug)]
pub(crate) struct Places {
    ctx: Arc<Context>,
    state: Mutex<Registry>,
    /// Wakes the task when a place is added (its period may be shorter).
    added: Notify,
}

#[derive(Debug, Default)]
struct Registry {
    /// Each place, with the instant after which it is no longer refreshed.
    places: HashMap<u64, (Place, Instant)>,
    next_key: u64,
    /// The refreshing task runs.
    running: bool,
}

/// A waiter's hold on its place: the place is refreshed while this lives.
#[derive(Debug)]
pub(crate) struct Held {
    places: Arc<Places>,
    key: u64,
}

impl Held {
    /// Refreshes the place until `until` at most (see the module docs); a later call moves
    /// it.
    pub(crate) fn keep_until(&self, until: Instant) {
        if let Some((_, kept)) = self.places.registry().places.get_mut(&self.key) {
            *kept = until;
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.places.registry().places.remove(&self.key);
    }
}

impl Places {
    pub(crate) fn new(ctx: Arc<Context>) -> Self {
        Places {
            ctx,
            state: Mutex::new(Registry::default()),
            added: Notify::new(),
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `place` refreshed until the returned [`Held`] is dropped, or `until` passes
    /// (see [`Held::keep_until`]), starting the task if needed. Call it inside a tokio
    /// runtime.
    pub(crate) fn hold(self: &Arc<Self>, place: Place, until: Instant) -> Held {
        let mut registry = self.registry();
        let key = registry.next_key;
        registry.next_key += 1;
        registry.places.insert(key, (place, until));
        if !registry.running {
            registry.running = true;
            tokio::spawn(refresh_all(Arc::downgrade(self)));
        }
        drop(registry);
        self.added.notify_one();
        Held {
            places: self.clone(),
            key,
        }
    }

    /// The number of places held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.registry().places.len()
    }

    /// The places held, or None (and the task marked stopped) when there are none. A place
    /// whose waiter is overdue ([`Held::keep_until`]) is held but not listed.
    fn snapshot(&self) -> Option<Vec<Place>> {
        let mut registry = self.registry();
        if registry.places.is_empty() {
            registry.running = false;
            return None;
        }
        let now = Instant::now();
        Some(
            registry
                .places
                .values()
                .filter(|(_, until)| *until >= now)
                .map(|(place, _)| place.clone())
                .collect(),
        )
    }
}

/// The refreshing task: every shortest period, one command refreshes every place held; it
/// ends when no place is held, or the client is gone.
async fn refresh_all(places: Weak<Places>) {
    // The first refresh of a place comes a period after it joined.
    let mut due: Option<Instant> = None;
    loop {
        let Some(keeper) = places.upgrade() else {
            return;
        };
        let Some(held) = keeper.snapshot() else {
            return;
        };
        let period = held
            .iter()
            .map(Place::period)
            .min()
            .unwrap_or(Duration::from_secs(1));
        let now = Instant::now();
        let next = *due.get_or_insert(now + period);
        if now >= next {
            // Places of overdue waiters only: nothing to send this period.
            if !held.is_empty() {
                // A refresh may take a period: a later one would come too late to matter.
                match refresh_places::refresh(&keeper.ctx, &held, period).await {
                    Ok(refreshed) => {
                        tracing::debug!(places = held.len(), refreshed, "places in line refreshed")
                    }
                    Err(error) => tracing::warn!(
                        %error, places = held.len(),
                        "could not refresh the places in line; trying again next period"
                    ),
                }
            }
            due = Some(Instant::now() + period);
            continue;
        }
        // Until the next refresh, or a new place (whose period may be shorter).
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = keeper.added.notified() => {
                due = Some(next.min(Instant::now() + period));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(resource: &str) -> Place {
        Place {
            resource: resource.to_owned(),
            lock_id: "waiter".to_owned(),
            life: Duration::from_secs(30),
        }
    }

    #[tokio::test]
    async fn a_place_is_kept_while_it_is_held_and_no_longer() {
        let places = Arc::new(Places::new(Arc::new(crate::command::test_context())));
        let later = Instant::now() + Duration::from_secs(60);
        let a = places.hold(place("a"), later);
        let b = places.hold(place("b"), later);
        assert_eq!(places.len(), 2);
        drop(a);
        assert_eq!(places.len(), 1);
        assert_eq!(places.snapshot(), Some(vec![place("b")]));
        drop(b);
        assert_eq!(places.len(), 0);
        assert_eq!(places.snapshot(), None, "nothing left to refresh");
    }

    /// A waiter that is not back when it said (its future is not polled any more) is no
    /// longer refreshed; one that comes back is again.
    #[tokio::test]
    async fn an_overdue_waiters_place_is_not_refreshed() {
        let places = Arc::new(Places::new(Arc::new(crate::command::test_context())));
        let held = places.hold(place("a"), Instant::now() - Duration::from_millis(1));
        assert_eq!(places.snapshot(), Some(vec![]), "held, not refreshed");
        held.keep_until(Instant::now() + Duration::from_secs(60));
        assert_eq!(places.snapshot(), Some(vec![place("a")]));
        drop(held);
        assert_eq!(places.snapshot(), None);
    }

    #[test]
    fn a_place_is_refreshed_six_times_a_life() {
        assert_eq!(place("a").period(), Duration::from_secs(5));
    }
}
