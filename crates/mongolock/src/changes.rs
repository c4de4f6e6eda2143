//! Waking lock waiters when the resource they wait for changes.
//!
//! A blocking acquire that finds its resource taken waits before it tries again. Instead of
//! only polling, it can be woken when the resource's document changes (the holder released
//! it, its lock expired and was cleared, the document was deleted): [`Wakeups`] keeps **one**
//! change stream per lock client on the lock collection, whatever the number of waiters, and
//! fans its events out locally by resource name (the document's `_id`).
//!
//! A waiter:
//!
//! 1. subscribes ([`Wakeups::subscribe`]),
//! 2. sends its attempt,
//! 3. if the resource is taken, races [`Subscription::changed`] against its own timer with
//!    `tokio::select!`, and goes back to 2 when either fires.
//!
//! A change made after step 1 returned is never missed once the stream is open, even if it
//! happens before the waiter reaches step 3: each resource has a generation counter (a
//! [`tokio::sync::watch`] channel) that the subscription compares against.
//!
//! # What the timer still covers
//!
//! Change streams are not always there: a standalone server refuses them
//! ([`Availability::Unavailable`]), and while the stream is being opened or reopened
//! ([`Availability::Unknown`]) events cannot be delivered yet. The waiter therefore always keeps
//! its timer, and uses a short jittered exponential backoff whenever [`Wakeups::availability`]
//! is not [`Availability::Streaming`]. Two further rules keep a waiter from sleeping through a
//! change:
//!
//! - Whenever the stream is opened *without* continuity (the first open, a reopen after the
//!   server lost the stream's history, after the collection was dropped), every current
//!   subscriber is woken once with [`WakeCause::Resync`]: a change may have happened while
//!   there was no stream, and the waiter must look again. A waiter that subscribed before the
//!   first open therefore gets one spurious wake-up; that is the price of never missing the
//!   release that happened while the stream was opening.
//! - A stream that fails is reopened after the resume token of the last event it delivered
//!   (or, before any event, at the cluster time it opened), so the events in between are
//!   delivered after the reopen rather than lost.
//!
//! # Stopping
//!
//! The stream holds a cursor and a session of the driver, and `mongodb::Client::shutdown`
//! waits for both to be dropped: [`Wakeups::stop`] (called by `LockClient::shutdown`) cancels
//! the task and waits until it has dropped them (the cursor's drop kills it on the server).
//! Stopping is not final: the next [`subscribe`](Wakeups::subscribe) starts a new task, whose
//! fresh stream resyncs every subscriber.
//!
//! The stream also closes on its own once nobody has subscribed for [`UNWATCHED_LINGER`]
//! (the task ends; the next subscription starts a new one, whose fresh stream resyncs its
//! subscribers), so that a driver client shut down *before* the lock client does not wait
//! for it for ever. The driver's shutdown waits for every handle that registered an async
//! drop (mongodb 3.9.1: `src/client/action/shutdown.rs` waits on `pending_drops`, which every
//! `ClientSession` and cursor joins, `src/client/session.rs` and
//! `src/cursor/raw_batch.rs`; its doc, `src/action/shutdown.rs`: "Any live resource handles
//! that are not dropped will cause this method to wait indefinitely"), and operations keep
//! working until it ends, so the stream cannot tell it has begun. Subscriptions alive across a stop are woken once
//! with [`WakeCause::Resync`] and, until something restarts the stream, see
//! [`Availability::Unknown`], so their waiters fall back to their timers.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::Timestamp;
use bson::{Bson, Document, doc};
use mongodb::{ClientSession, Collection, SessionCursor};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Server code for "The $changeStream stage is only supported on replica sets".
const CHANGE_STREAM_NOT_SUPPORTED: i32 = 40573;
/// Server code ChangeStreamFatalError: the stream cannot go on (or be resumed).
const CHANGE_STREAM_FATAL: i32 = 280;
/// Server code ChangeStreamHistoryLost: the resume point is no longer in the oplog.
const CHANGE_STREAM_HISTORY_LOST: i32 = 286;

/// Consecutive failures (opens or streams that failed before reading anything) after which
/// [`Wakeups::availability`] reports [`Availability::Unavailable`].
const FAILURES_BEFORE_UNAVAILABLE: u32 = 3;
/// The first pause before reopening a failed stream (before jitter).
const REOPEN_BACKOFF_BASE: Duration = Duration::from_millis(50);
/// The longest pause between two reopen attempts (before jitter).
const REOPEN_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A stream that stayed open this long before it failed counts as healthy: the next reopen
/// starts from the shortest backoff again.
const HEALTHY_STREAM: Duration = Duration::from_secs(10);
/// How long the server holds a read of the stream while nothing happens (each `getMore`'s
/// `maxTimeMS`; an event ends it at once). The server's default is one second: one
/// `getMore` a second for every idle client. At ten seconds an idle stream costs the server
/// one command per [`crate::RECHECK`], as an idle waiter does.
const IDLE_READ: Duration = Duration::from_secs(10);
/// How long a stream stays open once nobody waits: a waiter soon after reuses it, and a
/// driver client shut down first (`mongodb::Client::shutdown` waits for every live cursor
/// and session) returns this long after the last waiter left at most.
pub(crate) const UNWATCHED_LINGER: Duration = Duration::from_secs(2);
/// How long to wait before asking again a server that refused change streams (code 40573):
/// it only changes its mind when it is restarted as a replica set member.
const UNSUPPORTED_RETRY: Duration = Duration::from_secs(60);

/// Whether change streams currently deliver wake-ups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Availability {
    /// Not started yet, stopped ([`Wakeups::stop`]), or the stream is being opened or
    /// reopened: events may not be delivered yet. Wait with a short backoff.
    Unknown,
    /// The stream is open: every change made from now on wakes its subscribers.
    Streaming,
    /// The server refused change streams (a standalone server), there is no tokio runtime, or
    /// opening the stream failed several times in a row. Wait with a short backoff; the
    /// background task keeps trying (except without a runtime).
    Unavailable,
}

/// Why a [`Subscription::changed`] call returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WakeCause {
    /// The resource's document was inserted, updated, replaced or deleted.
    Change,
    /// The stream was (re)opened without continuity: changes may have been missed, so every
    /// subscriber was woken to look again.
    Resync,
}

/// Counters for metrics: how often the stream woke waiters and how often it had to reopen.
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WakeStats {
    /// Change events read from the stream (for any resource).
    pub(crate) events: u64,
    /// Events that had at least one subscriber to wake.
    pub(crate) change_wakeups: u64,
    /// Times every subscriber was woken because the stream opened without continuity or was
    /// stopped.
    pub(crate) resyncs: u64,
    /// Streams opened, the first one included.
    pub(crate) opens: u64,
    /// Streams reopened with a resume token after an error.
    pub(crate) resumes: u64,
    /// Failed opens and stream errors.
    pub(crate) failures: u64,
}

/// The value a resource's watch channel holds: bumped on every wake-up.
#[derive(Debug, Clone, Copy)]
struct Wake {
    /// How many times this resource's subscribers were woken since the entry was created.
    generation: u64,
    /// Why the last wake-up happened.
    cause: WakeCause,
}

/// The per-resource state: the channel that wakes its subscribers, and how many there are.
#[derive(Debug)]
struct Entry {
    /// Bumped (with `send_modify`, which never fails) on every wake-up.
    sender: watch::Sender<Wake>,
    /// Live [`Subscription`]s on this resource; the entry goes when it drops to zero.
    subscribers: usize,
    /// The last `wake` this client was woken by on this resource: a replacement that
    /// carries it again (a renewal or a grant the server logged as a whole document) moved
    /// nobody's turn, and wakes nobody.
    last_wake: Option<String>,
}

/// Atomic counterparts of [`WakeStats`].
#[derive(Debug, Default)]
struct Counters {
    /// See [`WakeStats::events`].
    events: AtomicU64,
    /// See [`WakeStats::change_wakeups`].
    change_wakeups: AtomicU64,
    /// See [`WakeStats::resyncs`].
    resyncs: AtomicU64,
    /// See [`WakeStats::opens`].
    opens: AtomicU64,
    /// See [`WakeStats::resumes`].
    resumes: AtomicU64,
    /// See [`WakeStats::failures`].
    failures: AtomicU64,
}

/// What the background task, the [`Wakeups`] and every [`Subscription`] share.
#[derive(Debug)]
struct Shared {
    /// Resources with at least one subscriber. Lookups and subscriptions both happen under
    /// this lock, so an event dispatched after `subscribe` returned always reaches it.
    resources: Mutex<HashMap<String, Entry>>,
    /// The current [`Availability`]; a channel so that [`Wakeups::wait_ready`] can wait.
    availability: watch::Sender<Availability>,
    /// Counters for [`Wakeups::stats`].
    counters: Counters,
    /// The lock client's keeper id: the stream passes the changes that name it in `wake`.
    keeper: String,
    /// Whether any resource has a subscriber, kept with `resources` (under its lock), so
    /// that the stream can close once nobody waits ([`Shared::unwatched`]).
    watched: watch::Sender<bool>,
}

impl Shared {
    /// Locks the resource map (a poisoned lock still holds a consistent map: every critical
    /// section only inserts, removes or bumps one entry).
    fn resources(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.resources.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns once nobody has subscribed for `linger`, having set `ended` under the
    /// resource lock: a [`Wakeups::start`] after that (a subscription made since) starts a
    /// new task instead of counting on this one.
    ///
    /// # Cancel safety
    /// Cancel safe: `ended` is set only when it returns.
    async fn unwatched(&self, linger: Duration, ended: &AtomicBool) {
        let mut watched = self.watched.subscribe();
        loop {
            let _ = watched.wait_for(|watched| !*watched).await;
            tokio::time::sleep(linger).await;
            let resources = self.resources();
            if resources.is_empty() {
                ended.store(true, Ordering::SeqCst);
                return;
            }
        }
    }

    /// Sets the availability, waking [`Wakeups::wait_ready`] callers if it changed.
    fn set_availability(&self, availability: Availability) {
        self.availability.send_if_modified(|current| {
            let changed = *current != availability;
            *current = availability;
            changed
        });
    }

    /// Sets the availability on behalf of the task that `cancel` stops, unless it was stopped:
    /// a stopped task must not overwrite the [`Availability::Unknown`] that
    /// [`Wakeups::stop`] set. The check runs under the channel's lock, and `stop` cancels
    /// before it sets, so whichever order the two take, a stopped task's value never stays.
    fn report_availability(&self, cancel: &CancellationToken, availability: Availability) {
        self.availability.send_if_modified(|current| {
            let changed = !cancel.is_cancelled() && *current != availability;
            if changed {
                *current = availability;
            }
            changed
        });
    }

    /// Wakes the subscribers of the resource an event is about, if it has any, unless the
    /// event carries the same `wake` as the last one that woke them (see [`pipeline`]).
    fn dispatch(&self, event: &Document) {
        self.counters.events.fetch_add(1, Ordering::Relaxed);
        let Some(Bson::String(resource)) = event
            .get_document("documentKey")
            .ok()
            .and_then(|key| key.get("_id"))
        else {
            return; // not a lock document (lock documents are keyed by a string)
        };
        let wake = event.get_str("wake").ok();
        let mut resources = self.resources();
        if let Some(entry) = resources.get_mut(resource) {
            if wake.is_some() && entry.last_wake.as_deref() == wake {
                return;
            }
            entry.last_wake = wake.map(str::to_owned);
            bump(&entry.sender, WakeCause::Change);
            self.counters.change_wakeups.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Wakes every subscriber once with [`WakeCause::Resync`].
    fn wake_all(&self) {
        let resources = self.resources();
        for entry in resources.values() {
            bump(&entry.sender, WakeCause::Resync);
        }
        self.counters.resyncs.fetch_add(1, Ordering::Relaxed);
    }
}

/// Bumps a resource's generation, which marks it changed for every receiver.
fn bump(sender: &watch::Sender<Wake>, cause: WakeCause) {
    sender.send_modify(|wake| {
        wake.generation = wake.generation.wrapping_add(1);
        wake.cause = cause;
    });
}

/// Wakes lock waiters when their resource changes, from one change stream per lock client.
///
/// Created idle by [`Wakeups::new`]; the first [`subscribe`](Wakeups::subscribe) (or
/// [`start`](Wakeups::start)) spawns the background task that owns the stream.
/// [`stop`](Wakeups::stop) ends it and waits until the stream is closed; dropping the
/// `Wakeups` ends it without waiting. See the [module docs](self) for the guarantees.
#[allow(dead_code)]
pub(crate) struct Wakeups {
    /// The lock collection to watch.
    collection: Collection<Document>,
    /// State shared with the task and the subscriptions.
    shared: Arc<Shared>,
    /// The background task, while it runs.
    task: Mutex<Option<Task>>,
}

/// The running background task, and how to stop it.
struct Task {
    /// Cancelled to stop the task: it then drops its cursor and session and returns.
    cancel: CancellationToken,
    /// Set by the task when it closed its stream because nobody waited: it is ending.
    ended: Arc<AtomicBool>,
    /// The task, to wait for its end.
    handle: JoinHandle<()>,
}

impl fmt::Debug for Wakeups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wakeups")
            .field("namespace", &self.collection.namespace())
            .field("availability", &self.availability())
            .field("resources", &self.tracked_resources())
            .finish()
    }
}

#[allow(dead_code)]
impl Wakeups {
    /// Prepares wake-ups for `collection`, for the waiters of the lock client whose keeper is
    /// `keeper` (the id its waiters' places in line carry), without starting anything: no
    /// task, no stream, no command is sent until the first [`subscribe`](Self::subscribe).
    pub(crate) fn new(collection: Collection<Document>, keeper: impl Into<String>) -> Self {
        let (availability, _) = watch::channel(Availability::Unknown);
        Self {
            collection,
            shared: Arc::new(Shared {
                resources: Mutex::new(HashMap::new()),
                availability,
                counters: Counters::default(),
                keeper: keeper.into(),
                watched: watch::channel(false).0,
            }),
            task: Mutex::new(None),
        }
    }

    /// Starts the background task that opens the change stream, if it is not running yet
    /// (or is ending: it closes its stream once nobody has waited for
    /// [`UNWATCHED_LINGER`]). Idempotent; [`subscribe`](Self::subscribe) calls it.
    ///
    /// Without a tokio runtime nothing is started and the availability becomes
    /// [`Availability::Unavailable`]; a later call from within a runtime starts the task.
    pub(crate) fn start(&self) {
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if task
            .as_ref()
            .is_some_and(|task| !task.ended.load(Ordering::SeqCst))
        {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.shared.set_availability(Availability::Unknown);
                let cancel = CancellationToken::new();
                let ended = Arc::new(AtomicBool::new(false));
                let handle = runtime.spawn(run(
                    self.collection.clone(),
                    self.shared.clone(),
                    cancel.clone(),
                    ended.clone(),
                ));
                // An ended task closes its stream on its own; its handle is not needed.
                *task = Some(Task {
                    cancel,
                    ended,
                    handle,
                });
            }
            Err(_) => {
                tracing::warn!(
                    namespace = %self.collection.namespace(),
                    "no tokio runtime: lock waiters will poll instead of being woken by a change stream"
                );
                self.shared.set_availability(Availability::Unavailable);
            }
        }
    }

    /// Stops the background task, if it runs, and waits until it has dropped its change
    /// stream's cursor and session, so that `mongodb::Client::shutdown` does not wait for
    /// them. Dropping the cursor kills it on the server (the driver sends `killCursors` from
    /// a cleanup task that its own shutdown waits for).
    ///
    /// Every current subscriber is woken once with [`WakeCause::Resync`] and the availability
    /// becomes [`Availability::Unknown`], so that waiters fall back to their timers instead of
    /// waiting for events that will not come. Nothing else is lost: the next
    /// [`subscribe`](Self::subscribe) or [`start`](Self::start) opens a new stream, which
    /// resyncs every subscriber, those from before the stop included.
    ///
    /// A task started while this runs (a concurrent `subscribe`) is not stopped; a concurrent
    /// second `stop` returns at once, without waiting for the task the first one stopped.
    ///
    /// # Cancel safety
    /// Cancel safe. Once the future was polled, the task is told to stop, subscribers are
    /// woken and the availability is [`Availability::Unknown`]; dropping it then only stops
    /// waiting for the task, which still ends and drops its stream promptly on its own.
    pub(crate) async fn stop(&self) {
        let stopped = {
            let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
            let Some(stopped) = task.take() else {
                return;
            };
            // Cancel first: from here the task cannot overwrite the availability set next.
            stopped.cancel.cancel();
            self.shared.set_availability(Availability::Unknown);
            self.shared.wake_all();
            stopped
        };
        if let Err(error) = stopped.handle.await
            && error.is_panic()
        {
            tracing::error!(
                namespace = %self.collection.namespace(), %error,
                "the change stream task had panicked"
            );
        }
        tracing::debug!(namespace = %self.collection.namespace(), "change stream stopped");
    }

    /// Subscribes to changes of `resource`, starting the change stream if needed.
    ///
    /// Every change of the resource's document that the stream delivers after this returned
    /// makes the next [`Subscription::changed`] return, even if it is only called later.
    pub(crate) fn subscribe(&self, resource: &str) -> Subscription {
        let receiver = {
            let mut resources = self.shared.resources();
            let entry = resources
                .entry(resource.to_owned())
                .or_insert_with(|| Entry {
                    sender: watch::channel(Wake {
                        generation: 0,
                        cause: WakeCause::Change,
                    })
                    .0,
                    subscribers: 0,
                    last_wake: None,
                });
            entry.subscribers += 1;
            self.shared.watched.send_replace(true);
            // A new receiver has seen the current value: only later bumps count.
            entry.sender.subscribe()
        };
        // After the entry is in: a task that found nobody subscribed has marked itself
        // ended by now, and a new one starts.
        self.start();
        Subscription {
            shared: self.shared.clone(),
            resource: resource.to_owned(),
            receiver,
        }
    }

    /// Whether change streams deliver wake-ups right now.
    pub(crate) fn availability(&self) -> Availability {
        *self.shared.availability.borrow()
    }

    /// Starts the stream if needed and waits until it is open or known to be unavailable, at
    /// most `limit`. Returns the availability at that point ([`Availability::Unknown`] if
    /// `limit` ran out first).
    ///
    /// A change made before the stream is open is not delivered as a [`WakeCause::Change`];
    /// subscribers that existed then get a [`WakeCause::Resync`] when it opens, and the
    /// waiter's timer covers the rest.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads state. Dropping the future leaves the stream starting.
    pub(crate) async fn wait_ready(&self, limit: Duration) -> Availability {
        self.start();
        let mut availability = self.shared.availability.subscribe();
        let _ = tokio::time::timeout(
            limit,
            availability.wait_for(|a| *a != Availability::Unknown),
        )
        .await;
        *availability.borrow()
    }

    /// How many resources have at least one subscriber (the per-resource state kept).
    pub(crate) fn tracked_resources(&self) -> usize {
        self.shared.resources().len()
    }

    /// A snapshot of the counters, for metrics.
    pub(crate) fn stats(&self) -> WakeStats {
        let c = &self.shared.counters;
        WakeStats {
            events: c.events.load(Ordering::Relaxed),
            change_wakeups: c.change_wakeups.load(Ordering::Relaxed),
            resyncs: c.resyncs.load(Ordering::Relaxed),
            opens: c.opens.load(Ordering::Relaxed),
            resumes: c.resumes.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Wakeups {
    /// Stops the background task without waiting for it; dropping its change stream kills
    /// the server cursor.
    fn drop(&mut self) {
        let task = self.task.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(task) = task.take() {
            task.cancel.cancel();
            task.handle.abort();
        }
    }
}

/// One waiter's interest in one resource. Dropping it releases the per-resource state when it
/// was the last one.
#[derive(Debug)]
pub(crate) struct Subscription {
    /// State shared with the [`Wakeups`].
    shared: Arc<Shared>,
    /// The resource name, to find the entry again on drop.
    resource: String,
    /// The resource's generation as last seen by this subscription.
    receiver: watch::Receiver<Wake>,
}

#[allow(dead_code)]
impl Subscription {
    /// Waits until the resource was woken since the subscription was made or since the last
    /// `changed()` returned, and returns why (the latest cause when several wake-ups were
    /// coalesced).
    ///
    /// Never returns while change streams are unavailable: race it against a timer.
    ///
    /// # Cancel safety
    /// Cancel safe: a wake-up that happens while the future is pending, or after it was
    /// dropped, is kept for the next call.
    pub(crate) async fn changed(&mut self) -> WakeCause {
        match self.receiver.changed().await {
            Ok(()) => self.receiver.borrow_and_update().cause,
            // The sender lives in the entry as long as this subscription does, so this is not
            // reached; never resolving is the documented behaviour without wake-ups.
            Err(_) => std::future::pending().await,
        }
    }

    /// The resource this subscription is about.
    pub(crate) fn resource(&self) -> &str {
        &self.resource
    }
}

impl Drop for Subscription {
    /// Decrements the resource's subscriber count and removes the entry at zero.
    fn drop(&mut self) {
        let mut resources = self.shared.resources();
        if let Some(entry) = resources.get_mut(&self.resource) {
            entry.subscribers = entry.subscribers.saturating_sub(1);
            if entry.subscribers == 0 {
                resources.remove(&self.resource);
                if resources.is_empty() {
                    self.shared.watched.send_replace(false);
                }
            }
        }
    }
}

/// The stages after `$changeStream`: only the changes that wake one of this client's
/// waiters, and only what a wake-up needs of them. A change that lets the head of a
/// resource's line in (a release, a withdrawal, a waiter ahead leaving the line, a shared
/// grant with a reader next) names the head's keeper in the document's `wake` field, with
/// a stamp new to that command (see `command/expr.rs`); this stream passes the changes
/// whose document names `keeper` there, so a release wakes the one client whose waiter can
/// take the lock, and a grant, a renewal or a waiter joining the line wakes nobody (a
/// client that holds leases and waits for nothing gets no events for its own renewals).
///
/// mongod logs a pipeline update as a delta (an `update` event, with the fields it set)
/// only when the delta is smaller than the new document, and as a whole document (a
/// `replace` event, with `fullDocument`) otherwise, and always so before 5.0: the filter
/// reads `wake` from either, so no event type passes to every client. A replacement that
/// did not change `wake` (a renewal logged whole, while `wake` still names this client from
/// an earlier change) carries the stamp already seen, and [`Shared::dispatch`] drops it. A
/// deleted document passes too. An expiry changes nothing on the server: waiters' timers
/// see to it. `_id` (the resume token) must stay: the server refuses to deliver events
/// whose `_id` a stage changed.
fn pipeline(keeper: &str) -> Vec<Document> {
    let field = crate::command::expr::WAKE;
    let named = doc! { "$regex": format!("^{} ", regex_escaped(keeper)) };
    vec![
        doc! {"$match": {"$or": [
            {"operationType": "delete"},
            {"operationType": "update", format!("updateDescription.updatedFields.{field}"): named.clone()},
            {"operationType": "replace", format!("fullDocument.{field}"): named},
        ]}},
        doc! {"$project": {
            "_id": 1, "documentKey": 1,
            "wake": { "$ifNull": [
                format!("$updateDescription.updatedFields.{field}"),
                format!("$fullDocument.{field}"),
            ]},
        }},
    ]
}

/// `text` with every character but ASCII letters and digits escaped, to match itself in a
/// regular expression.
fn regex_escaped(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if !c.is_ascii_alphanumeric() {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

fn server_code(error: &mongodb::error::Error) -> Option<i32> {
    match error.kind.as_ref() {
        mongodb::error::ErrorKind::Command(command) => Some(command.code),
        _ => None,
    }
}

/// Whether the resume point is gone: the stream must be reopened from now, and subscribers
/// must look again.
fn history_lost(error: &mongodb::error::Error) -> bool {
    matches!(
        server_code(error),
        Some(CHANGE_STREAM_HISTORY_LOST | CHANGE_STREAM_FATAL)
    )
}

/// The pause before the next reopen after `failures` consecutive failures: exponential from
/// [`REOPEN_BACKOFF_BASE`] up to [`REOPEN_BACKOFF_MAX`], with "equal jitter" (between half
/// and all of it) so that many clients do not reopen in step after a failover.
fn reopen_backoff(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(16);
    let full = REOPEN_BACKOFF_BASE
        .saturating_mul(1u32 << exponent)
        .min(REOPEN_BACKOFF_MAX);
    let random = RandomState::new().build_hasher().finish();
    let fraction = (random % 1024) as f64 / 1024.0;
    full / 2 + full.mul_f64(fraction / 2.0)
}

/// Where the next stream starts.
#[derive(Debug, Clone)]
enum ResumePoint {
    /// From now: changes made while there was no stream are not delivered, so every
    /// subscriber is woken when it opens.
    Fresh,
    /// After the event with this resume token (`resumeAfter`).
    After(Bson),
    /// At this cluster time, inclusive (`startAtOperationTime`): the stream opened at that
    /// time and delivered nothing yet.
    At(Timestamp),
}

impl ResumePoint {
    /// The `$changeStream` stage that starts here.
    fn stage(&self) -> Document {
        let options = match self {
            ResumePoint::Fresh => doc! {},
            ResumePoint::After(token) => doc! {"resumeAfter": token.clone()},
            ResumePoint::At(time) => doc! {"startAtOperationTime": *time},
        };
        doc! {"$changeStream": options}
    }
}

/// How a stream that was open came to an end.
enum StreamEnd {
    /// The server closed the cursor (an invalidate: the collection was dropped or renamed).
    Closed,
    /// Reading failed.
    Failed(mongodb::error::Error),
    /// Nobody has waited for [`UNWATCHED_LINGER`]: the task closes it and ends.
    Unwatched,
}

/// Opens a change stream starting at `point`, on a session of its own (whose
/// `operationTime` tells where a fresh stream started).
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the session and any cursor opened.
async fn open(
    collection: &Collection<Document>,
    point: &ResumePoint,
    keeper: &str,
) -> mongodb::error::Result<(ClientSession, SessionCursor<Document>)> {
    let mut session = collection
        .client()
        .start_session()
        .causal_consistency(false)
        .await?;
    let mut stages = vec![point.stage()];
    stages.extend(pipeline(keeper));
    let cursor = collection
        .aggregate(stages)
        .max_await_time(IDLE_READ)
        .session(&mut session)
        .await?;
    Ok((session, cursor))
}

/// The background task: runs [`stream`] until `cancel` is cancelled ([`Wakeups::stop`]),
/// then drops it, which drops the stream's cursor and session, and returns. Also aborted by
/// [`Wakeups`]'s `Drop`.
///
/// # Cancel safety
/// Meant to be cancelled or aborted: dropping it drops the cursor, whose `Drop` kills the
/// server cursor.
async fn run(
    collection: Collection<Document>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    ended: Arc<AtomicBool>,
) {
    tokio::select! {
        biased;
        () = cancel.cancelled() => {}
        () = stream(&collection, &shared, &cancel, &ended) => {}
    }
}

/// Opens the stream, dispatches its events, reopens it when it ends; returns only when
/// nobody has waited for [`UNWATCHED_LINGER`]. Availability changes go through
/// [`Shared::report_availability`] with `cancel`, so that a stopped task leaves the
/// availability alone.
///
/// The stream is a plain `aggregate` cursor with a `$changeStream` stage rather than the
/// driver's `ChangeStream`: the driver's automatic resume sends its resume token only on the
/// first attempt of its `aggregate`, and a retried attempt (a retryable read error, such as a
/// closed connection during a failover) opens a *fresh* stream, silently skipping the events
/// in between (mongodb 3.9.1, `ChangeStreamAggregate::build` takes the token). Here every
/// error comes back to this loop, which reopens from the last event's resume token itself.
///
/// Each turn of the loop is four steps: [`Reopening::open`] (or wait and try again),
/// [`Reopening::opened`], [`Reopening::read`] until the stream ends, and
/// [`Reopening::ended`], which says where the next one starts.
///
/// # Cancel safety
/// Meant to be dropped ([`run`] does): dropping it drops the cursor, whose `Drop` kills the
/// server cursor.
async fn stream(
    collection: &Collection<Document>,
    shared: &Shared,
    cancel: &CancellationToken,
    ended: &AtomicBool,
) {
    let mut reopening = Reopening {
        collection,
        shared,
        cancel,
        resume: ResumePoint::Fresh,
        failures: 0,
    };
    loop {
        let Some((mut session, mut cursor)) = reopening.open().await else {
            continue;
        };
        let opened_at = tokio::time::Instant::now();
        reopening.opened(&session);
        let end = reopening.read(&mut session, &mut cursor, ended).await;
        drop(cursor);
        drop(session);
        reopening.set_availability(Availability::Unknown);
        if let StreamEnd::Unwatched = end {
            tracing::debug!(namespace = %collection.namespace(), "nobody waits: change stream closed");
            return;
        }
        reopening.ended(end, opened_at);
        tokio::time::sleep(reopen_backoff(reopening.failures)).await;
    }
}

/// What [`stream`] keeps from one stream to the next: where the next one starts, and how
/// many times in a row opening or reading failed.
struct Reopening<'a> {
    collection: &'a Collection<Document>,
    shared: &'a Shared,
    cancel: &'a CancellationToken,
    resume: ResumePoint,
    /// Failures since the stream last delivered an event or stayed up for a while.
    failures: u32,
}

impl Reopening<'_> {
    fn set_availability(&self, availability: Availability) {
        self.shared.report_availability(self.cancel, availability);
    }

    /// Opens a stream at the resume point. On failure: a server without change streams
    /// makes the waiters poll, and is asked again after [`UNSUPPORTED_RETRY`]; a resume
    /// point whose history is gone is dropped for a fresh start, at once; any other error
    /// counts a failure (the waiters poll after [`FAILURES_BEFORE_UNAVAILABLE`]) and waits
    /// [`reopen_backoff`]. `None` once it has waited what the failure asks.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it drops the session and any cursor opened.
    async fn open(&mut self) -> Option<(ClientSession, SessionCursor<Document>)> {
        let error = match open(self.collection, &self.resume, &self.shared.keeper).await {
            Ok(opened) => return Some(opened),
            Err(error) => error,
        };
        let namespace = self.collection.namespace();
        let shared = self.shared;
        shared.counters.failures.fetch_add(1, Ordering::Relaxed);
        if server_code(&error) == Some(CHANGE_STREAM_NOT_SUPPORTED) {
            if *shared.availability.borrow() != Availability::Unavailable {
                tracing::warn!(
                    namespace = %namespace, %error,
                    "the server does not support change streams: lock waiters will poll"
                );
            }
            self.set_availability(Availability::Unavailable);
            tokio::time::sleep(UNSUPPORTED_RETRY).await;
            return None;
        }
        if !matches!(self.resume, ResumePoint::Fresh) && history_lost(&error) {
            tracing::warn!(
                namespace = %namespace, %error,
                "cannot resume the change stream: reopening it and waking every waiter"
            );
            self.resume = ResumePoint::Fresh;
            return None;
        }
        self.failures = self.failures.saturating_add(1);
        let failures = self.failures;
        if failures >= FAILURES_BEFORE_UNAVAILABLE
            && *shared.availability.borrow() != Availability::Unavailable
        {
            tracing::warn!(
                namespace = %namespace, %error, failures,
                "cannot open the change stream: lock waiters will poll until it opens"
            );
            self.set_availability(Availability::Unavailable);
        } else {
            tracing::debug!(namespace = %namespace, %error, failures, "opening the change stream failed");
        }
        tokio::time::sleep(reopen_backoff(failures)).await;
        None
    }

    /// A stream opened on `session`: a fresh one starts where the session's
    /// `operationTime` says (a reopen before any event resumes from there) and wakes every
    /// waiter (changes made while there was no stream are not in it); the waiters may wait
    /// on the stream now.
    fn opened(&mut self, session: &ClientSession) {
        let namespace = self.collection.namespace();
        let counters = &self.shared.counters;
        counters.opens.fetch_add(1, Ordering::Relaxed);
        if let ResumePoint::Fresh = self.resume {
            tracing::debug!(namespace = %namespace, "change stream opened");
            if let Some(time) = session.operation_time() {
                self.resume = ResumePoint::At(time);
            }
            self.shared.wake_all();
        } else {
            counters.resumes.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(namespace = %namespace, resume = ?self.resume, "change stream resumed");
        }
        self.set_availability(Availability::Streaming);
    }

    /// Reads events and dispatches them, each moving the resume point past it, until the
    /// stream ends: closed by the server, failed, or nobody has waited for
    /// [`UNWATCHED_LINGER`].
    ///
    /// # Cancel safety
    /// Cancel safe: an event is dispatched in the same poll that reads it.
    async fn read(
        &mut self,
        session: &mut ClientSession,
        cursor: &mut SessionCursor<Document>,
        ended: &AtomicBool,
    ) -> StreamEnd {
        loop {
            let read = tokio::select! {
                biased;
                read = cursor.advance(session) => read,
                () = self.shared.unwatched(UNWATCHED_LINGER, ended) => return StreamEnd::Unwatched,
            };
            match read {
                Ok(true) => {
                    self.failures = 0;
                    match cursor.deserialize_current() {
                        Ok(event) => {
                            // Events always carry their resume token: the server refuses a
                            // pipeline that changes `_id` (code 280).
                            if let Some(token) = event.get("_id") {
                                self.resume = ResumePoint::After(token.clone());
                            }
                            self.shared.dispatch(&event);
                        }
                        Err(error) => return StreamEnd::Failed(error),
                    }
                }
                Ok(false) => return StreamEnd::Closed,
                Err(error) => return StreamEnd::Failed(error),
            }
        }
    }

    /// A stream opened at `opened_at` ended (`end`, not [`StreamEnd::Unwatched`]): a
    /// failure is counted (the count starts over after a stream that stayed up
    /// [`HEALTHY_STREAM`]), and a stream closed by the server, or whose history is gone,
    /// starts fresh next time; any other failure resumes.
    fn ended(&mut self, end: StreamEnd, opened_at: tokio::time::Instant) {
        let namespace = self.collection.namespace();
        if opened_at.elapsed() >= HEALTHY_STREAM {
            self.failures = 0;
        }
        self.failures = self.failures.saturating_add(1);
        match end {
            StreamEnd::Unwatched => {}
            StreamEnd::Closed => {
                tracing::info!(
                    namespace = %namespace,
                    "the change stream was closed by the server (collection dropped or renamed): reopening it"
                );
                self.resume = ResumePoint::Fresh;
            }
            StreamEnd::Failed(error) => {
                self.shared
                    .counters
                    .failures
                    .fetch_add(1, Ordering::Relaxed);
                if history_lost(&error) {
                    tracing::warn!(
                        namespace = %namespace, %error,
                        "the change stream cannot be resumed: reopening it and waking every waiter"
                    );
                    self.resume = ResumePoint::Fresh;
                } else {
                    tracing::warn!(
                        namespace = %namespace, %error, resume = ?self.resume,
                        "the change stream failed: resuming it"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use mongodb::event::EventHandler;
    use mongodb::event::command::CommandEvent;
    use mongodb::options::ClientOptions;
    use mongolock_testkit::TestServer;

    /// A guard against hangs only: nothing asserts how fast something happens.
    const HANG_GUARD: Duration = Duration::from_secs(30);
    /// How long a "stays pending" check waits.
    const PENDING: Duration = Duration::from_millis(200);

    /// Command events one client sent: `(started, failed)` with the commands started and the
    /// names of the commands that failed.
    #[derive(Clone, Default)]
    struct Monitor {
        started: Arc<Mutex<Vec<(String, Document)>>>,
        failed: Arc<Mutex<Vec<String>>>,
    }

    impl Monitor {
        /// The `$changeStream` options of every change stream `aggregate` sent, in order.
        fn change_stream_opens(&self) -> Vec<Document> {
            let started = self.started.lock().expect("monitor lock");
            started
                .iter()
                .filter(|(name, _)| name == "aggregate")
                .filter_map(|(_, command)| {
                    let stages = command.get_array("pipeline").ok()?;
                    let first = stages.first()?.as_document()?;
                    first.get_document("$changeStream").ok().cloned()
                })
                .collect()
        }

        /// How many commands named `name` were started.
        fn started_count(&self, name: &str) -> usize {
            let started = self.started.lock().expect("monitor lock");
            started.iter().filter(|(n, _)| n == name).count()
        }

        /// How many commands named `name` failed.
        fn failed_count(&self, name: &str) -> usize {
            let failed = self.failed.lock().expect("monitor lock");
            failed.iter().filter(|n| *n == name).count()
        }
    }

    /// A client of `server` whose commands are recorded.
    async fn monitored_client(server: &TestServer) -> (mongodb::Client, Monitor) {
        let monitor = Monitor::default();
        let sink = monitor.clone();
        let mut options = ClientOptions::parse(server.uri()).await.expect("valid uri");
        options.server_selection_timeout = Some(Duration::from_secs(10));
        options.command_event_handler = Some(EventHandler::callback(move |event| match event {
            CommandEvent::Started(started) => sink
                .started
                .lock()
                .expect("monitor lock")
                .push((started.command_name, started.command)),
            CommandEvent::Failed(failed) => sink
                .failed
                .lock()
                .expect("monitor lock")
                .push(failed.command_name),
            CommandEvent::Succeeded(_) => {}
            _ => {}
        }));
        let client = mongodb::Client::with_options(options).expect("valid options");
        (client, monitor)
    }

    /// The keeper id of the tests' `Wakeups`.
    const KEEPER: &str = "test-keeper";

    /// A change that lets in a waiter of [`KEEPER`], as a release makes it: it names the
    /// keeper in the document's `wake` field with a new stamp (creating the document first
    /// if need be, which wakes nobody).
    async fn free(collection: &Collection<Document>, id: &str) {
        wake(collection, id, KEEPER).await;
    }

    /// A change that lets in a waiter of `keeper` (see [`free`]).
    async fn wake(collection: &Collection<Document>, id: &str, keeper: &str) {
        static NEXT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
        let stamp = NEXT.fetch_add(1, Ordering::SeqCst);
        let set = doc! {"$set": {crate::command::expr::WAKE: format!("{keeper} {stamp}")}};
        let found = collection
            .update_one(doc! {"_id": id}, set.clone())
            .await
            .expect("update");
        if found.matched_count == 0 {
            collection
                .insert_one(doc! {"_id": id})
                .await
                .expect("insert");
            collection
                .update_one(doc! {"_id": id}, set)
                .await
                .expect("update");
        }
    }

    /// Waits (up to [`HANG_GUARD`]) until `condition` holds.
    async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        while !condition() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Awaits `changed()` under the hang guard.
    async fn woken(subscription: &mut Subscription) -> WakeCause {
        tokio::time::timeout(HANG_GUARD, subscription.changed())
            .await
            .expect("the subscriber was not woken")
    }

    /// Asserts that `changed()` stays pending for [`PENDING`].
    async fn stays_pending(subscription: &mut Subscription) {
        let outcome = tokio::time::timeout(PENDING, subscription.changed()).await;
        assert!(
            outcome.is_err(),
            "{} was woken: {outcome:?}",
            subscription.resource()
        );
    }

    /// A `Wakeups` on `db.locks` of a monitored client, with its stream open.
    async fn streaming(server: &TestServer, db: &str) -> (Wakeups, Collection<Document>, Monitor) {
        let (client, monitor) = monitored_client(server).await;
        let wakeups = Wakeups::new(client.database(db).collection("locks"), KEEPER);
        assert_eq!(wakeups.availability(), Availability::Unknown);
        assert_eq!(
            wakeups.wait_ready(HANG_GUARD).await,
            Availability::Streaming
        );
        // Writes come from another client, as another process's would.
        let other = server.new_client().database(db).collection("locks");
        (wakeups, other, monitor)
    }

    /// Sets the `failCommand` fail point.
    async fn fail_command(server: &TestServer, mode: Bson, data: Document) {
        server
            .client()
            .database("admin")
            .run_command(doc! {"configureFailPoint": "failCommand", "mode": mode, "data": data})
            .await
            .expect("configureFailPoint");
    }

    #[tokio::test]
    async fn a_change_wakes_the_subscribers_of_its_resource_only() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, other, _) = streaming(&server, "wake_own").await;
        let mut a = wakeups.subscribe("a");
        let mut b = wakeups.subscribe("b");
        free(&other, "a").await;
        assert_eq!(woken(&mut a).await, WakeCause::Change);
        // A change that lets nobody in (a grant, a renewal, a waiter joining the line) wakes
        // nobody.
        other
            .update_one(doc! {"_id": "a"}, doc! {"$inc": {"n": 1}})
            .await
            .expect("update");
        stays_pending(&mut a).await;
        free(&other, "a").await;
        assert_eq!(woken(&mut a).await, WakeCause::Change);
        // Both events were dispatched (a saw them): b is not woken by them.
        stays_pending(&mut b).await;
        other
            .delete_one(doc! {"_id": "b"})
            .await
            .expect("delete of a missing document");
        other.delete_one(doc! {"_id": "a"}).await.expect("delete");
        assert_eq!(woken(&mut a).await, WakeCause::Change);
        stays_pending(&mut b).await;
        stays_pending(&mut a).await;
        let stats = wakeups.stats();
        assert_eq!(stats.events, 3, "{stats:?}");
        assert_eq!(stats.opens, 1, "{stats:?}");
    }

    /// A change that lets in a waiter of another client (another keeper) does not reach this
    /// client: one release wakes one client, whatever the number of clients waiting. A
    /// keeper whose name starts like this one's is another keeper.
    #[tokio::test]
    async fn a_change_for_another_client_wakes_nobody_here() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, other, monitor) = streaming(&server, "wake_other").await;
        let mut a = wakeups.subscribe("a");
        wake(&other, "a", "another-keeper").await;
        wake(&other, "a", &format!("{KEEPER}2")).await;
        wake(&other, "a", &format!("x{KEEPER}")).await;
        stays_pending(&mut a).await;
        wake(&other, "a", KEEPER).await;
        assert_eq!(woken(&mut a).await, WakeCause::Change);
        assert_eq!(wakeups.stats().events, 1, "{:?}", wakeups.stats());
        assert_eq!(monitor.failed_count("getMore"), 0);
    }

    /// An idle stream asks the server once per [`IDLE_READ`], not once a second (the
    /// server's default): an idle client is one command per ten seconds.
    #[tokio::test]
    async fn an_idle_stream_reads_rarely() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, _other, monitor) = streaming(&server, "wake_idle").await;
        let _subscription = wakeups.subscribe("r");
        let before = monitor.started_count("getMore");
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let reads = monitor.started_count("getMore") - before;
        assert!(reads <= 1, "{reads} reads in 2.5 s of nothing");
        let started = monitor.started.lock().expect("monitor lock").clone();
        let (_, read) = started
            .iter()
            .find(|(name, _)| name == "getMore")
            .expect("a read");
        assert_eq!(read.get("maxTimeMS"), Some(&Bson::Int32(10_000)), "{read}");
    }

    #[test]
    fn regex_escaping_keeps_letters_and_digits() {
        assert_eq!(regex_escaped("a1b2"), "a1b2");
        assert_eq!(regex_escaped("a.b*"), "a\\.b\\*");
    }

    #[tokio::test]
    async fn a_change_between_subscribe_and_changed_is_not_missed() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, other, _) = streaming(&server, "wake_between").await;
        let mut subscription = wakeups.subscribe("r");
        free(&other, "r").await;
        // Let the event be dispatched before anybody waits.
        let events = || wakeups.stats().events;
        eventually("the event is dispatched", || events() == 1).await;
        assert_eq!(woken(&mut subscription).await, WakeCause::Change);
        stays_pending(&mut subscription).await;
    }

    #[tokio::test]
    async fn subscribers_from_before_the_stream_opened_are_woken_when_it_opens() {
        let server = TestServer::start().await.expect("server");
        let (client, _) = monitored_client(&server).await;
        let wakeups = Wakeups::new(client.database("wake_first").collection("locks"), KEEPER);
        let mut early = wakeups.subscribe("r");
        assert_eq!(
            wakeups.wait_ready(HANG_GUARD).await,
            Availability::Streaming
        );
        assert_eq!(woken(&mut early).await, WakeCause::Resync);
        let mut late = wakeups.subscribe("r");
        stays_pending(&mut late).await;
        stays_pending(&mut early).await;
    }

    #[tokio::test]
    async fn many_subscribers_share_one_stream() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, other, monitor) = streaming(&server, "wake_many").await;
        let mut subscriptions: Vec<_> = (0..50).map(|_| wakeups.subscribe("hot")).collect();
        let mut elsewhere: Vec<_> = (0..5)
            .map(|i| wakeups.subscribe(&format!("cold{i}")))
            .collect();
        free(&other, "hot").await;
        for subscription in &mut subscriptions {
            assert_eq!(woken(subscription).await, WakeCause::Change);
        }
        for subscription in &mut elsewhere {
            stays_pending(subscription).await;
        }
        assert_eq!(wakeups.tracked_resources(), 6);
        let opens = monitor.change_stream_opens();
        assert_eq!(opens.len(), 1, "{opens:?}");
        assert_eq!(opens[0], doc! {}, "a fresh stream, no resume option");
        // The pipeline sent: only what a wake-up needs.
        let started = monitor.started.lock().expect("monitor lock").clone();
        let (_, aggregate) = started
            .iter()
            .find(|(name, _)| name == "aggregate")
            .expect("an aggregate");
        let stages = aggregate.get_array("pipeline").expect("pipeline");
        assert_eq!(
            &stages[1..],
            &pipeline(KEEPER)
                .into_iter()
                .map(Bson::Document)
                .collect::<Vec<_>>()[..]
        );
    }

    #[tokio::test]
    async fn a_standalone_server_makes_wakeups_unavailable() {
        let server = TestServer::builder()
            .standalone(true)
            .start()
            .await
            .expect("server");
        let (client, monitor) = monitored_client(&server).await;
        let wakeups = Wakeups::new(
            client.database("wake_standalone").collection("locks"),
            KEEPER,
        );
        let mut subscription = wakeups.subscribe("r");
        assert_eq!(
            wakeups.wait_ready(HANG_GUARD).await,
            Availability::Unavailable
        );
        server
            .new_client()
            .database("wake_standalone")
            .collection::<Document>("locks")
            .insert_one(doc! {"_id": "r"})
            .await
            .expect("insert");
        stays_pending(&mut subscription).await;
        assert_eq!(wakeups.availability(), Availability::Unavailable);
        assert_eq!(monitor.change_stream_opens().len(), 1, "no retry loop");
    }

    #[tokio::test]
    async fn without_a_runtime_wakeups_are_unavailable() {
        let server = TestServer::start().await.expect("server");
        let wakeups = Arc::new(Wakeups::new(
            server.client().database("wake_no_rt").collection("locks"),
            KEEPER,
        ));
        let shared = wakeups.clone();
        let availability = std::thread::spawn(move || {
            let subscription = shared.subscribe("r");
            drop(subscription);
            shared.availability()
        })
        .join()
        .expect("no panic");
        assert_eq!(availability, Availability::Unavailable);
        assert_eq!(wakeups.tracked_resources(), 0);
        // From within a runtime it starts after all.
        assert_eq!(
            wakeups.wait_ready(HANG_GUARD).await,
            Availability::Streaming
        );
    }

    /// The stream fails with an error the driver does not resume by itself, and reopening it
    /// fails for a while: a change made in that gap is delivered once the task reopens the
    /// stream with its resume token.
    #[tokio::test]
    async fn a_failed_stream_is_resumed_without_losing_the_changes_in_between() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, other, monitor) = streaming(&server, "wake_resume").await;
        let mut subscription = wakeups.subscribe("r");
        let mut unrelated = wakeups.subscribe("s");
        // An event first, so that the stream resumes after its token.
        free(&other, "z").await;
        eventually("the event is read", || wakeups.stats().events == 1).await;
        // 91 without labels: a server error the driver does not resume from.
        fail_command(
            &server,
            Bson::String("alwaysOn".into()),
            doc! {"failCommands": ["getMore", "aggregate"], "errorCode": 91, "errorLabels": []},
        )
        .await;
        eventually("the stream failed and a reopen failed too", || {
            monitor.failed_count("getMore") >= 1 && monitor.failed_count("aggregate") >= 1
        })
        .await;
        eventually("unavailable after repeated failures", || {
            wakeups.availability() == Availability::Unavailable
        })
        .await;
        // The change happens while there is no stream.
        free(&other, "r").await;
        fail_command(&server, Bson::String("off".into()), doc! {}).await;
        assert_eq!(woken(&mut subscription).await, WakeCause::Change);
        stays_pending(&mut unrelated).await;
        assert_eq!(wakeups.availability(), Availability::Streaming);
        let opens = monitor.change_stream_opens();
        assert!(opens.len() >= 2, "{opens:?}");
        assert!(
            opens[1..].iter().all(|o| o.contains_key("resumeAfter")),
            "every reopen resumes after the last event: {opens:?}"
        );
        assert!(wakeups.stats().resumes >= 1);
        // And the stream goes on.
        free(&other, "r").await;
        assert_eq!(woken(&mut subscription).await, WakeCause::Change);
    }

    /// Closed connections, also on the reopen and on the driver's retry of it: the stream,
    /// which saw no event yet, resumes from the time it opened, and a change made after the
    /// failure is delivered.
    #[tokio::test]
    async fn a_stream_whose_connection_closes_is_resumed() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, other, monitor) = streaming(&server, "wake_close").await;
        let mut subscription = wakeups.subscribe("r");
        fail_command(
            &server,
            doc! {"times": 3}.into(),
            doc! {"failCommands": ["getMore", "aggregate"], "closeConnection": true},
        )
        .await;
        eventually("the stream failed and was reopened", || {
            monitor.failed_count("getMore") >= 1
                && monitor.failed_count("aggregate") >= 2
                && wakeups.availability() == Availability::Streaming
        })
        .await;
        free(&other, "r").await;
        assert_eq!(woken(&mut subscription).await, WakeCause::Change);
        let opens = monitor.change_stream_opens();
        assert!(opens.len() >= 3, "{opens:?}");
        assert!(
            opens[1..]
                .iter()
                .all(|o| o.contains_key("startAtOperationTime")),
            "every reopen resumes (the driver's retry included): {opens:?}"
        );
        assert_eq!(wakeups.stats().resyncs, 1, "no resync after a resume");
    }

    /// Why [`run`] does not use the driver's `ChangeStream`: when the `aggregate` of its
    /// automatic resume is retried (a retryable read error), the retry goes out without the
    /// resume token and opens a fresh stream. If this test fails, the driver was fixed and
    /// `ChangeStream` could be used again.
    #[tokio::test]
    async fn the_drivers_resume_retry_loses_its_resume_token() {
        let server = TestServer::start().await.expect("server");
        let (client, monitor) = monitored_client(&server).await;
        let coll = client
            .database("wake_driver")
            .collection::<Document>("locks");
        let mut stream = coll.watch().await.expect("watch");
        fail_command(
            &server,
            doc! {"times": 2}.into(),
            doc! {"failCommands": ["getMore", "aggregate"], "closeConnection": true},
        )
        .await;
        // getMore fails, the resume aggregate fails, its retry succeeds; then the stream
        // waits for events.
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        while monitor.change_stream_opens().len() < 3 && tokio::time::Instant::now() < deadline {
            stream.next_if_any().await.expect("the driver resumes");
        }
        let opens = monitor.change_stream_opens();
        assert!(opens.len() >= 3, "{opens:?}");
        assert!(opens[1].contains_key("resumeAfter"), "{opens:?}");
        assert_eq!(
            opens[2],
            doc! {},
            "the retry opens a fresh stream: {opens:?}"
        );
    }

    /// When the server lost the stream's history, the task opens a fresh stream and wakes
    /// every subscriber once.
    #[tokio::test]
    async fn lost_history_reopens_fresh_and_wakes_everybody() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, other, monitor) = streaming(&server, "wake_lost").await;
        let mut a = wakeups.subscribe("a");
        let mut b = wakeups.subscribe("b");
        fail_command(
            &server,
            doc! {"times": 1}.into(),
            doc! {"failCommands": ["getMore"], "errorCode": CHANGE_STREAM_HISTORY_LOST},
        )
        .await;
        assert_eq!(woken(&mut a).await, WakeCause::Resync);
        assert_eq!(woken(&mut b).await, WakeCause::Resync);
        let opens = monitor.change_stream_opens();
        assert_eq!(opens.len(), 2, "{opens:?}");
        assert_eq!(opens[1], doc! {}, "a fresh stream: {opens:?}");
        stays_pending(&mut a).await;
        free(&other, "b").await;
        assert_eq!(woken(&mut b).await, WakeCause::Change);
        stays_pending(&mut a).await;
    }

    /// A dropped collection invalidates the stream: it is reopened fresh, and everybody
    /// looks again (the locks are gone).
    #[tokio::test]
    async fn a_dropped_collection_reopens_the_stream_and_wakes_everybody() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, other, monitor) = streaming(&server, "wake_drop").await;
        free(&other, "x").await;
        let mut a = wakeups.subscribe("a");
        other.drop().await.expect("drop");
        assert_eq!(woken(&mut a).await, WakeCause::Resync);
        eventually("a second stream", || {
            monitor.change_stream_opens().len() >= 2
        })
        .await;
        assert_eq!(
            wakeups.wait_ready(HANG_GUARD).await,
            Availability::Streaming
        );
        free(&other, "a").await;
        assert_eq!(woken(&mut a).await, WakeCause::Change);
    }

    #[tokio::test]
    async fn dropping_the_subscriptions_removes_the_resource_state() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, other, _) = streaming(&server, "wake_leak").await;
        let first = wakeups.subscribe("r");
        let second = wakeups.subscribe("r");
        let third = wakeups.subscribe("q");
        assert_eq!(wakeups.tracked_resources(), 2);
        drop(first);
        assert_eq!(wakeups.tracked_resources(), 2);
        drop(second);
        assert_eq!(wakeups.tracked_resources(), 1);
        drop(third);
        assert_eq!(wakeups.tracked_resources(), 0);
        // Events for resources nobody waits for leave nothing behind either.
        free(&other, "r").await;
        let events = || wakeups.stats().events;
        eventually("the event is read", || events() == 1).await;
        assert_eq!(wakeups.tracked_resources(), 0);
        // A new subscription starts from the current state.
        let mut again = wakeups.subscribe("r");
        stays_pending(&mut again).await;
    }

    #[tokio::test]
    async fn dropping_wakeups_stops_the_stream() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, _, monitor) = streaming(&server, "wake_stop").await;
        let subscription = wakeups.subscribe("r");
        drop(wakeups);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let get_mores = monitor.started_count("getMore");
        let kills = monitor.started_count("killCursors");
        // An awaiting getMore lasts a second on the server: wait longer than that.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(monitor.started_count("getMore"), get_mores);
        assert_eq!(kills, 1, "the cursor is killed");
        drop(subscription);
    }

    #[tokio::test]
    async fn stopping_closes_the_stream_and_a_new_subscription_reopens_it() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, other, monitor) = streaming(&server, "wake_stop_restart").await;
        let mut before = wakeups.subscribe("r");
        wakeups.stop().await;
        // Everybody looks again, and waits with a timer from now on.
        assert_eq!(woken(&mut before).await, WakeCause::Resync);
        assert_eq!(wakeups.availability(), Availability::Unknown);
        eventually("the cursor is killed", || {
            monitor.started_count("killCursors") == 1
        })
        .await;
        // Nothing reopens the stream by itself: a change now reaches nobody.
        free(&other, "r").await;
        stays_pending(&mut before).await;
        assert_eq!(wakeups.stats().opens, 1);

        // A new subscription reopens it; the fresh stream resyncs the older subscriber too.
        let mut after = wakeups.subscribe("r");
        assert_eq!(
            wakeups.wait_ready(HANG_GUARD).await,
            Availability::Streaming
        );
        assert_eq!(woken(&mut before).await, WakeCause::Resync);
        assert_eq!(woken(&mut after).await, WakeCause::Resync);
        free(&other, "r").await;
        assert_eq!(woken(&mut before).await, WakeCause::Change);
        assert_eq!(woken(&mut after).await, WakeCause::Change);
        let stats = wakeups.stats();
        assert_eq!((stats.opens, stats.resyncs), (2, 3), "{stats:?}");
        assert_eq!(monitor.change_stream_opens(), [doc! {}, doc! {}]);
    }

    /// Once nobody has subscribed for [`UNWATCHED_LINGER`], the stream closes on its own (so
    /// that a driver client shut down first does not wait for it for ever); a subscription
    /// made later opens a fresh one, which resyncs it. (With the stream kept open until
    /// `stop`, the cursor was never killed here.)
    #[tokio::test]
    async fn a_stream_nobody_waits_for_closes_and_a_new_subscription_reopens_it() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, other, monitor) = streaming(&server, "wake_unwatched").await;
        let first = wakeups.subscribe("r");
        drop(first);
        eventually("the unwatched stream's cursor is killed", || {
            monitor.started_count("killCursors") == 1
        })
        .await;
        assert_eq!(wakeups.availability(), Availability::Unknown);

        let mut later = wakeups.subscribe("r");
        assert_eq!(
            wakeups.wait_ready(HANG_GUARD).await,
            Availability::Streaming
        );
        assert_eq!(woken(&mut later).await, WakeCause::Resync);
        free(&other, "r").await;
        assert_eq!(woken(&mut later).await, WakeCause::Change);
        assert_eq!(wakeups.stats().opens, 2);
        assert_eq!(monitor.change_stream_opens(), [doc! {}, doc! {}]);
        wakeups.stop().await;
    }

    #[tokio::test]
    async fn after_stop_the_drivers_shutdown_returns() {
        let server = TestServer::start().await.expect("server");
        let (wakeups, _, _) = streaming(&server, "wake_stop_driver").await;
        let _subscription = wakeups.subscribe("r");
        let client = wakeups.collection.client().clone();
        wakeups.stop().await;
        tokio::time::timeout(HANG_GUARD, client.shutdown())
            .await
            .expect("the driver's shutdown returns");
    }

    #[tokio::test]
    async fn stopping_what_never_started_does_nothing() {
        let server = TestServer::start().await.expect("server");
        let (client, monitor) = monitored_client(&server).await;
        let wakeups = Wakeups::new(
            client.database("wake_stop_idle").collection("locks"),
            KEEPER,
        );
        wakeups.stop().await;
        assert_eq!(wakeups.availability(), Availability::Unknown);
        assert_eq!(wakeups.stats(), WakeStats::default());
        assert_eq!(monitor.started.lock().expect("monitor lock").len(), 0);
    }

    #[test]
    fn a_stopped_task_leaves_the_availability_alone() {
        let (availability, _) = watch::channel(Availability::Unknown);
        let shared = Shared {
            resources: Mutex::new(HashMap::new()),
            availability,
            counters: Counters::default(),
            keeper: KEEPER.to_owned(),
            watched: watch::channel(false).0,
        };
        let cancel = CancellationToken::new();
        shared.report_availability(&cancel, Availability::Streaming);
        assert_eq!(*shared.availability.borrow(), Availability::Streaming);
        cancel.cancel();
        shared.set_availability(Availability::Unknown);
        shared.report_availability(&cancel, Availability::Streaming);
        shared.report_availability(&cancel, Availability::Unavailable);
        assert_eq!(*shared.availability.borrow(), Availability::Unknown);
    }

    #[test]
    fn reopen_backoff_grows_and_stays_bounded() {
        for failures in 0..100 {
            let pause = reopen_backoff(failures);
            assert!(pause >= REOPEN_BACKOFF_BASE / 2, "{failures}: {pause:?}");
            assert!(pause <= REOPEN_BACKOFF_MAX, "{failures}: {pause:?}");
        }
        assert!(reopen_backoff(10) >= REOPEN_BACKOFF_MAX / 2);
    }
}
