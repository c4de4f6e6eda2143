//! Keeping waiters' places in line: one command per client, whatever the number of waiters.
//!
//! A waiting acquire joins its resource's line with its first refused attempt (see
//! `command/acquire.rs`), and its place lasts [`place_life`](crate::wait::place_life) from
//! then. Rather than each waiter attempting again to keep its place, the client's [`Places`]
//! refreshes its waiters' places, each a sixth of a life (a third of the TTL) after it was
//! last made to last, and with it every other place due within half that, in one `update`
//! ([`refresh_places`](crate::command::refresh_places)):
//!
//! ```text
//! update: <collection>, ordered: false, updates: [                   // one per place
//!   { q: { _id: <resource>, mongolock: 1, queue: { $elemMatch: { call: <call> } },
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
//! its end. A failed refresh is logged and tried again a period later, so a place outlives
//! an outage of up to four periods; the waiter's own attempts leave its place as it is.
//!
//! A waiter that gets the lock within a period of joining the line costs no refresh: in a
//! line that turns over in less than a third of the TTL, keeping places costs nothing.

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
    /// Wakes the task when a place is added (it may be due sooner) or a waiter is back.
    added: Notify,
}

/// One place held, and when it is next refreshed.
#[derive(Debug)]
struct Kept {
    place: Place,
    /// After this instant the place is no longer refreshed ([`Held::keep_until`]).
    until: Instant,
    /// When the place is refreshed next: a period after it was last made to last a life (its
    /// waiter's joining attempt was sent, or a refresh of it was), or a period after a refresh
    /// that failed.
    due: Instant,
}

#[derive(Debug, Default)]
struct Registry {
    places: HashMap<u64, Kept>,
    next_key: u64,
    /// The refreshing task runs.
    running: bool,
}

/// What the task does next (see [`Registry::plan`]).
#[derive(Debug, PartialEq)]
enum Plan {
    /// No place is held: the task ends.
    Stop,
    /// Refresh these places now (by key), in one command.
    Refresh(Vec<(u64, Place)>),
    /// Nothing is due: sleep until then (or until a place is added), or, when no waiter is
    /// back, until one is.
    Sleep(Option<Instant>),
}

impl Registry {
    /// What is due at `now`. When a place's refresh comes due, the places of waiters that
    /// are back and due within half their period are refreshed with it, in the same command.
    fn plan(&self, now: Instant) -> Plan {
        if self.places.is_empty() {
            return Plan::Stop;
        }
        let live = || self.places.iter().filter(|(_, kept)| kept.until >= now);
        let Some(next) = live().map(|(_, kept)| kept.due).min() else {
            return Plan::Sleep(None);
        };
        if next > now {
            return Plan::Sleep(Some(next));
        }
        let mut due: Vec<(u64, Place)> = live()
            .filter(|(_, kept)| kept.due <= now + kept.place.period() / 2)
            .map(|(key, kept)| (*key, kept.place.clone()))
            .collect();
        due.sort_by_key(|(key, _)| *key);
        Plan::Refresh(due)
    }

    /// The places `keys` were sent a refresh at `sent` (refreshed, if it succeeded): each is
    /// next due a period later.
    fn refreshed(&mut self, keys: &[u64], sent: Instant) {
        for key in keys {
            if let Some(kept) = self.places.get_mut(key) {
                kept.due = sent + kept.place.period();
            }
        }
    }
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
        if let Some(kept) = self.places.registry().places.get_mut(&self.key) {
            kept.until = until;
        }
        // The task may be sleeping until a waiter is back.
        self.places.added.notify_one();
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.places.registry().places.remove(&self.key);
        // The task may be waiting for a waiter that is not back: with none left, it ends.
        self.places.added.notify_one();
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
    /// (see [`Held::keep_until`]), starting the task if needed. `joined` is when the attempt
    /// that joined the line was sent: the place lasts a life from a moment after that, and
    /// is first refreshed a period after it. Call it inside a tokio runtime.
    pub(crate) fn hold(self: &Arc<Self>, place: Place, joined: Instant, until: Instant) -> Held {
        let mut registry = self.registry();
        let key = registry.next_key;
        registry.next_key += 1;
        let due = joined + place.period();
        registry.places.insert(key, Kept { place, until, due });
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

    /// What the task does next; marks it stopped when no place is held.
    fn plan(&self) -> Plan {
        let mut registry = self.registry();
        let plan = registry.plan(Instant::now());
        if plan == Plan::Stop {
            registry.running = false;
        }
        plan
    }
}

/// The refreshing task: when a place's refresh is due, one command refreshes it and every
/// place due soon after; it ends when no place is held, or the client is gone.
async fn refresh_all(places: Weak<Places>) {
    loop {
        let Some(keeper) = places.upgrade() else {
            return;
        };
        let wake_at = match keeper.plan() {
            Plan::Stop => return,
            Plan::Refresh(due) => {
                let (keys, held): (Vec<u64>, Vec<Place>) = due.into_iter().unzip();
                let period = held
                    .iter()
                    .map(Place::period)
                    .min()
                    .unwrap_or(Duration::from_secs(1));
                let sent = Instant::now();
                // A refresh may take a period: a later one would come too late to matter.
                let next_from = match refresh_places::refresh(&keeper.ctx, &held, period).await {
                    Ok(refreshed) => {
                        tracing::debug!(places = held.len(), refreshed, "places in line refreshed");
                        sent
                    }
                    Err(error) => {
                        tracing::warn!(
                            %error, places = held.len(),
                            "could not refresh the places in line; trying again next period"
                        );
                        Instant::now()
                    }
                };
                keeper.registry().refreshed(&keys, next_from);
                continue;
            }
            Plan::Sleep(wake_at) => wake_at,
        };
        // Until the next refresh is due, a place is added or a waiter is back.
        match wake_at {
            Some(wake_at) => tokio::select! {
                _ = tokio::time::sleep_until(wake_at) => {}
                _ = keeper.added.notified() => {}
            },
            None => keeper.added.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(resource: &str) -> Place {
        Place {
            resource: resource.to_owned(),
            call: bson::oid::ObjectId::from_bytes([7; 12]),
            life: Duration::from_secs(30),
        }
    }

    fn keys(plan: Plan) -> Vec<u64> {
        match plan {
            Plan::Refresh(due) => due.into_iter().map(|(key, _)| key).collect(),
            other => panic!("nothing to refresh: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_place_is_kept_while_it_is_held_and_no_longer() {
        let places = Arc::new(Places::new(Arc::new(crate::command::test_context())));
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let a = places.hold(place("a"), now, later);
        let b = places.hold(place("b"), now, later);
        assert_eq!(places.len(), 2);
        drop(a);
        assert_eq!(places.len(), 1);
        let due = now + Duration::from_secs(5);
        assert_eq!(
            places.registry().plan(due),
            Plan::Refresh(vec![(1, place("b"))])
        );
        drop(b);
        assert_eq!(places.len(), 0);
        assert_eq!(
            places.registry().plan(due),
            Plan::Stop,
            "nothing left to refresh"
        );
    }

    /// A waiter that is not back when it said (its future is not polled any more) is no
    /// longer refreshed; one that comes back is again.
    #[tokio::test]
    async fn an_overdue_waiters_place_is_not_refreshed() {
        let places = Arc::new(Places::new(Arc::new(crate::command::test_context())));
        let joined = Instant::now() - Duration::from_secs(10);
        let held = places.hold(
            place("a"),
            joined,
            Instant::now() - Duration::from_millis(1),
        );
        assert_eq!(
            places.registry().plan(Instant::now()),
            Plan::Sleep(None),
            "held, not refreshed"
        );
        held.keep_until(Instant::now() + Duration::from_secs(60));
        assert_eq!(
            places.registry().plan(Instant::now()),
            Plan::Refresh(vec![(0, place("a"))])
        );
        drop(held);
        assert_eq!(places.registry().plan(Instant::now()), Plan::Stop);
    }

    /// Each place is refreshed a period after it was last made to last: a waiter that gets
    /// the lock within a period of joining the line costs no refresh, although its client's
    /// other places (or its own earlier ones) came due meanwhile. This is what a waiter in a
    /// line of 16 that turns over in less than a period sees: before, the client refreshed on
    /// one clock for all its places, so a place that joined just before that clock's tick was
    /// refreshed at once.
    #[tokio::test]
    async fn a_place_is_refreshed_a_period_after_it_joined_and_not_before() {
        let places = Arc::new(Places::new(Arc::new(crate::command::test_context())));
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(600);
        let period = place("a").period();
        // The first place waits most of a period, then gets the lock; the waiter joins again.
        let first = places.hold(place("a"), t0, later);
        assert_eq!(places.registry().plan(t0), Plan::Sleep(Some(t0 + period)));
        drop(first);
        let rejoined = t0 + period - Duration::from_millis(500);
        let _second = places.hold(place("a"), rejoined, later);
        assert_eq!(
            places.registry().plan(t0 + period),
            Plan::Sleep(Some(rejoined + period)),
            "a place that joined half a second ago is not refreshed"
        );
        // Another place comes due: this one, due within half a period, goes with it.
        let _other = places.hold(place("b"), t0 + Duration::from_secs(3), later);
        let at = t0 + Duration::from_secs(3) + period;
        assert_eq!(keys(places.registry().plan(at)), vec![1, 2]);
        places.registry().refreshed(&[1, 2], at);
        assert_eq!(places.registry().plan(at), Plan::Sleep(Some(at + period)));
    }

    #[test]
    fn a_place_is_refreshed_six_times_a_life() {
        assert_eq!(place("a").period(), Duration::from_secs(5));
    }
}
