//! Leases: what a held guard knows about its lock, and the keeper that renews every lease of
//! one [`LockClient`](crate::LockClient) in the background.
//!
//! # The local deadline
//!
//! A lease keeps a deadline on the lease clock ([`crate::clock`]: monotonic, and counting
//! the time the machine was suspended): the time the last successful grant or renewal was
//! *sent*, plus the TTL, minus a safety margin. The server starts counting the TTL when it
//! executes the command, which is after it was sent, so the server's expiry is later than
//! the local deadline (clock rates differ by far less than the margin). When the deadline
//! passes without a renewal, the lease is lost: [`LockGuard::is_lost`] turns true at once,
//! by reading the clock, even if no task ran in between (a paused process, or a suspended
//! machine, learns it the moment it resumes), and [`LockGuard::lost`] resolves. That is
//! before the server can grant the lock to anyone else, under the conditions of
//! [Guarantees](crate#guarantees).
//!
//! # The keeper
//!
//! One background task per client renews every lease the client still tracks with one
//! `update` per tick ([`command::keepalive`]), whatever their number, each by its own TTL,
//! and nothing else: an entry whose guard is gone is never renewed. A tick runs at the
//! shortest renewal period among the leases (a third of the TTL by default), and each
//! renewal's time limit is shorter than the time the most urgent lease has left (and than
//! its renewal period or a quarter of its TTL, whichever is longer), so a hung call cannot
//! hide a loss and is retried in time; failed renewals are retried every 250 ms at most.
//!
//! The command names each lease (resource, lock id, token) in a statement of its own that
//! matches only while that lease is live, so the reply's count is the number of leases the
//! server renewed. When it is all of them, each was confirmed. Otherwise, or when the
//! command failed, one read lists the keeper's live entries with the time each has left,
//! computed by the server: a lease on that list counts from the read's send time for that
//! long, and a lease missing from it is lost as [`LossReason::Revoked`] (force-released,
//! its group purged, expired by the server's clock).
//!
//! # Chores
//!
//! A release or a withdrawal that could not be done at once (a guard dropped where no
//! runtime runs, a `release()` whose future was dropped or failed, a background release or
//! withdrawal that failed) is queued as a chore. A second task retries the chores with
//! backoff until each is done or can no longer matter (the entry's TTL, or the tombstone's
//! life, has surely passed). Until then the entry is not renewed, so it ends with its TTL
//! at the latest.
//!
//! [`LockGuard::is_lost`]: crate::LockGuard::is_lost
//! [`LockGuard::lost`]: crate::LockGuard::lost
//! [`command::keepalive`]: crate::command::keepalive

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tracing::Instrument;

use crate::clock::{Clock, SUSPEND_CHECK, ServerClock, Stamp};
use crate::command::{Context, keepalive, release};
use crate::lock::{Grant, LeaseState, LossReason};
use crate::request::AcquireRequest;

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
    /// When the attempt that was granted was first sent, on the lease clock (its first copy:
    /// a later copy may have found the grant an earlier one made).
    pub(crate) sent_at: Instant,
    /// Whether its release must also retire the attempt that was granted (leave a tombstone
    /// for its nonce): a copy of that attempt may still reach the server after the release.
    /// True when a copy of the attempt had an unknown outcome, and for a resumed lease (its
    /// attempt was another process's, whose history is unknown).
    pub(crate) retire: bool,
    /// Set while nobody is to work under the grant (a member a multi-lock took in a round
    /// it has not finished): its release then lets go of it without its minimum hold.
    hold_waived: AtomicBool,
    clock: Clock,
    /// The forward steps of the server's clock the client notices: each one noticed after
    /// the command the deadline counts from was sent shortens the deadline by as much.
    /// `None`: none are followed (unit tests).
    server: Option<Arc<ServerClock>>,
    deadline: Mutex<Stamp>,
    state: watch::Sender<LeaseState>,
}

impl Lease {
    /// A lease granted by an attempt sent at `sent` (read from `clock`).
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
        sent: Stamp,
        clock: Clock,
    ) -> Self {
        let left = grant.remaining.map_or(ttl, |remaining| remaining.min(ttl));
        let deadline = Stamp {
            at: sent.at + left.saturating_sub(margin),
            ..sent
        };
        Lease {
            grant,
            ttl,
            margin,
            every,
            sent_at: sent.at,
            retire: false,
            hold_waived: AtomicBool::new(false),
            clock,
            server: None,
            deadline: Mutex::new(deadline),
            state: watch::Sender::new(LeaseState::Held),
        }
    }

    /// The same lease, its deadline shortened by every forward step of the server's clock
    /// that `server` notices from now on (see [`ServerClock`]).
    pub(crate) fn following(mut self, server: Arc<ServerClock>) -> Self {
        self.server = Some(server);
        self
    }

    /// The same lease, its attempt's first copy sent at `at` (when that was before the copy
    /// whose reply granted it): the server granted it after that. The deadline still counts
    /// from the copy whose reply said what the server had left.
    pub(crate) fn first_sent(mut self, at: Instant) -> Self {
        self.sent_at = self.sent_at.min(at);
        self
    }

    /// The same lease, whose release retires its attempt (see [`Lease::retire`]).
    pub(crate) fn retiring(mut self) -> Self {
        self.retire = true;
        self
    }

    /// The chore that releases this lease when its holder cannot.
    pub(crate) fn release_chore(&self) -> Chore {
        Chore::Release {
            grant: self.grant_to_release(),
            retire: self.retire,
        }
    }

    /// Whether a release lets go of the grant without its minimum hold (see
    /// [`LockDetails::min_hold`](crate::LockDetails::min_hold)): true while nobody is to
    /// work under it.
    pub(crate) fn waive_hold(&self, waived: bool) {
        self.hold_waived.store(waived, Ordering::Release);
    }

    /// The grant as its release lets go of it: without its minimum hold while that is
    /// waived (see [`waive_hold`](Self::waive_hold)).
    pub(crate) fn grant_to_release(&self) -> Grant {
        let mut grant = self.grant.clone();
        if self.hold_waived.load(Ordering::Acquire) {
            grant.holder.min_hold = None;
        }
        grant
    }

    /// The local deadline, on the lease clock: shortened by the forward steps of the server's
    /// clock noticed since the command it counts from was sent.
    pub(crate) fn deadline(&self) -> Instant {
        let stamp = *self.deadline.lock().unwrap_or_else(|e| e.into_inner());
        self.shortened(stamp)
    }

    /// `stamp`'s moment, less the steps noticed since it and those that came after its
    /// command ran that no count holds (see [`Stamp::unseen`]).
    fn shortened(&self, stamp: Stamp) -> Instant {
        let since = match &self.server {
            Some(server) => server.stepped().saturating_sub(stamp.stepped),
            None => Duration::ZERO,
        } + stamp.unseen;
        stamp
            .at
            .checked_sub(since)
            .unwrap_or(self.sent_at.min(stamp.at))
    }

    /// The time left to the deadline (zero once it passed).
    pub(crate) fn time_left(&self) -> Duration {
        self.deadline().saturating_duration_since(self.clock.now())
    }

    /// The state, with the deadline read against the clock now.
    pub(crate) fn state(&self) -> LeaseState {
        let state = *self.state.borrow();
        match state {
            LeaseState::Lost(_) => state,
            _ if self.clock.now() >= self.deadline() => LeaseState::Lost(LossReason::Deadline),
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

    /// The server had the lease, with `left` to go, when it executed a command sent at
    /// `sent` (on the lease clock). Ignored once the lease is lost: a lost lease is never
    /// revived, and a reply that arrives after the deadline proves nothing.
    fn confirmed(&self, sent: Stamp, left: Duration) {
        if self.is_lost() {
            self.lose(LossReason::Deadline);
            return;
        }
        {
            let mut deadline = self.deadline.lock().unwrap_or_else(|e| e.into_inner());
            let next = Stamp {
                at: sent.at + left.min(self.ttl).saturating_sub(self.margin),
                ..sent
            };
            if self.shortened(next) > self.shortened(*deadline) {
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

    /// A renewal sent at `sent` renewed this very lease by its TTL.
    fn renewed(&self, sent: Stamp) {
        self.confirmed(sent, self.ttl);
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
            // Timers do not count suspended time: look again at least every SUSPEND_CHECK.
            let sleep = self.time_left().min(SUSPEND_CHECK);
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }
}

/// Work the keeper does for a lock whose holder could not: a release or a withdrawal that
/// must still reach the server.
///
/// Until it is done, the client *owes* it for its resource and lock id: an attempt of the
/// same lock id on the same resource first carries it out or waits for it
/// ([`Keeper::settle`]), so that the chore can never land after that attempt and remove
/// what it was granted or resumed.
#[derive(Debug, Clone)]
pub(crate) enum Chore {
    /// Release this grant (by resource, lock id and token); with `retire`, also retire the
    /// attempt that was granted (a tombstone for its nonce).
    Release { grant: Grant, retire: bool },
    /// Withdraw this attempt (by resource, lock id and nonce), leaving its tombstone; what
    /// the withdrawal does with the minimum hold of a grant it ends.
    Withdraw(AcquireRequest, release::Hold),
    /// Take this attempt's lock id out of its resource's line: every copy of it was refused.
    Leave(AcquireRequest),
}

impl Chore {
    pub(crate) fn resource(&self) -> &str {
        match self {
            Chore::Release { grant, .. } => grant.resource(),
            Chore::Withdraw(request, _) | Chore::Leave(request) => request.resource(),
        }
    }

    fn lock_id(&self) -> &str {
        match self {
            Chore::Release { grant, .. } => grant.lock_id(),
            Chore::Withdraw(request, _) | Chore::Leave(request) => request.lock_id(),
        }
    }

    /// What the chore is owed for: its resource and lock id.
    fn debt(&self) -> Debt {
        (self.resource().to_owned(), self.lock_id().to_owned())
    }

    fn is_for(&self, resource: &str, lock_id: &str) -> bool {
        self.resource() == resource && self.lock_id() == lock_id
    }

    /// How long after it was queued the chore can no longer matter: the entry has expired
    /// on the server (nothing renews it), or a late copy of the attempt can no longer land.
    fn lifetime(&self, command_timeout: Duration) -> Duration {
        match self {
            Chore::Release { grant, retire } => {
                let expired = grant.holder.ttl.unwrap_or(Duration::from_secs(60)) + command_timeout;
                if *retire {
                    expired.max(crate::schema::TOMBSTONE_MIN_LIFE)
                } else {
                    expired
                }
            }
            Chore::Withdraw(..) => crate::schema::TOMBSTONE_MIN_LIFE,
            // The place lapses by itself by then.
            Chore::Leave(request) => request.announce.unwrap_or_default() + command_timeout,
        }
    }

    pub(crate) async fn run(&self, ctx: &Context) -> crate::Result<()> {
        let ctx = ctx.ready()?;
        match self {
            Chore::Release { grant, retire } => {
                release::release(ctx, grant, *retire).await.map(drop)
            }
            Chore::Withdraw(request, hold) => release::release_attempt(ctx, request, *hold)
                .await
                .map(drop),
            Chore::Leave(request) => release::leave_line(ctx, request).await,
        }
    }
}

/// A resource and a lock id, for which chores are owed.
type Debt = (String, String);

/// A queued chore and when to try it.
#[derive(Debug)]
struct Queued {
    /// Which chore it is: a background task handed it claims it by this
    /// ([`Keeper::claim`]).
    id: u64,
    chore: Chore,
    next_try: Instant,
    give_up_at: Instant,
    backoff: Duration,
}

/// Chores taken from the queue to be sent now, by an attempt ([`Keeper::settle`]) or a
/// flush ([`Keeper::flush`]): those not done when it stops go back in the queue, still owed.
struct Taken<'a> {
    keeper: &'a Arc<Keeper>,
    chores: Vec<Option<Queued>>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let left: Vec<Queued> = self.chores.drain(..).flatten().collect();
        if !left.is_empty() {
            self.keeper.requeue(left);
        }
    }
}

/// The keeper of one client: its id (stored in every entry it renews), its leases, its
/// chores and its background tasks.
#[derive(Debug)]
pub(crate) struct Keeper {
    pub(crate) id: String,
    ctx: Arc<Context>,
    clock: Clock,
    state: Mutex<Registry>,
    /// Wakes the renewing task when a lease is added (its period may be shorter).
    added: Notify,
    /// Wakes the chores task when a chore is queued.
    queued: Notify,
    /// Wakes the attempts that wait for owed chores ([`Keeper::settle`]) when one is done.
    paid: Notify,
    /// Held while chores are on their way to the server, by the chores task or by
    /// [`Keeper::flush`]: a flush waits for the chores the task has taken, so that once it
    /// returns every chore has been tried ([`LockClient::shutdown`](crate::LockClient::shutdown)
    /// relies on it).
    on_the_way: tokio::sync::Mutex<()>,
    /// Turns for the chores on their way to the server, [`CHORES_AT_ONCE`] in all: the
    /// keeper's retries and the releases of dropped guards and acquires
    /// (`LockClient::finish_in_background`) take them alike, so a burst of either queues here
    /// rather than as as many driver operations.
    pub(crate) turns: Arc<tokio::sync::Semaphore>,
}

#[derive(Debug, Default)]
struct Registry {
    leases: HashMap<u64, Arc<Lease>>,
    next_key: u64,
    renewing: bool,
    /// The renewing task, while `renewing`: finished without clearing it, it was dropped
    /// with the runtime it ran in, and the next lease added starts another.
    renewer: Option<tokio::task::JoinHandle<()>>,
    chores: Vec<Queued>,
    /// The id of the next chore queued.
    next_chore: u64,
    /// How many chores are owed for each resource and lock id: queued, or on their way to
    /// the server (a chore sent in the background by `LockClient::finish_in_background`,
    /// or taken by the chores task, a flush or [`Keeper::settle`]).
    owed: HashMap<Debt, usize>,
    cleaning: bool,
    /// The chores task, while `cleaning`: finished without clearing it, it was dropped with
    /// the runtime it ran in (or spawned in one that had ended), and the next chore queued,
    /// or the client's next acquire, starts another.
    cleaner: Option<tokio::task::JoinHandle<()>>,
    /// The runtime the leases were added in (where the renewing task runs): the chores
    /// task starts there when a chore is queued where no runtime runs, such as a guard
    /// dropped after `block_on` returned.
    runtime: Option<tokio::runtime::Handle>,
}

/// The retry period after a failed renewal, at most: failures are retried sooner than the
/// normal period, so a short outage does not cost the lease.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);

/// The first and the longest pause before a failed chore is tried again.
const CHORE_BACKOFF: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(5));

/// How many chores run at once, in all: the keeper's retries and the releases of dropped
/// guards and acquires (see `LockClient::finish_in_background`) share these turns. A chore on
/// its way holds a driver operation; one waiting for its turn is a small queued item.
pub(crate) const CHORES_AT_ONCE: usize = 16;

impl Keeper {
    pub(crate) fn new(ctx: Arc<Context>) -> Self {
        Keeper {
            id: format!("{:032x}", rand::random::<u128>()),
            ctx,
            clock: Clock::system(),
            state: Mutex::new(Registry::default()),
            added: Notify::new(),
            queued: Notify::new(),
            paid: Notify::new(),
            on_the_way: tokio::sync::Mutex::new(()),
            turns: Arc::new(tokio::sync::Semaphore::new(CHORES_AT_ONCE)),
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The clock leases of this keeper count on.
    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Keeps `lease` alive from now on, starting the background task if needed; returns the
    /// key to remove it with. Call it inside a tokio runtime.
    pub(crate) fn add(self: &Arc<Self>, lease: Arc<Lease>) -> u64 {
        let mut registry = self.registry();
        let key = registry.next_key;
        registry.next_key += 1;
        registry.leases.insert(key, lease);
        crate::observe::lease_kept(true);
        registry.runtime = Some(tokio::runtime::Handle::current());
        if !running(registry.renewing, registry.renewer.as_ref()) {
            registry.renewing = true;
            registry.renewer = Some(tokio::spawn(renew_all(Arc::downgrade(self))));
        }
        drop(registry);
        self.added.notify_one();
        key
    }

    /// Stops keeping the lease `key` alive: from now on it is never renewed.
    pub(crate) fn remove(&self, key: u64) {
        if self.registry().leases.remove(&key).is_some() {
            crate::observe::lease_kept(false);
        }
    }

    /// Whether this keeper keeps a lease of `lock_id` on `resource` (lost or not): then a
    /// guard of this client stands for it.
    pub(crate) fn holds(&self, resource: &str, lock_id: &str) -> bool {
        (self.registry().leases.values())
            .any(|lease| lease.grant.resource() == resource && lease.grant.lock_id() == lock_id)
    }

    /// The number of leases kept alive.
    pub(crate) fn len(&self) -> usize {
        self.registry().leases.len()
    }

    /// Starts the chores task if chores wait (queued where no runtime ran, or for a task
    /// that may never run) and none runs. Called by every attempt, so that such a chore
    /// waits no longer than the client's next acquire.
    pub(crate) fn resume_chores(self: &Arc<Self>) {
        let mut registry = self.registry();
        self.start_cleaning(&mut registry);
    }

    /// Owes `chore` from now on: until [`Keeper::paid`] says it is done, attempts of its lock
    /// id on its resource wait for it ([`Keeper::settle`]).
    pub(crate) fn owe(&self, chore: &Chore) {
        *self.registry().owed.entry(chore.debt()).or_default() += 1;
    }

    /// `chore`, owed, is done (or can no longer be: it failed for good, or its time is up).
    pub(crate) fn paid(&self, chore: &Chore) {
        let mut registry = self.registry();
        let debt = chore.debt();
        if let Some(count) = registry.owed.get_mut(&debt) {
            *count -= 1;
            if *count == 0 {
                registry.owed.remove(&debt);
            }
        }
        drop(registry);
        self.paid.notify_waiters();
    }

    /// Queues `chore`, owed already ([`Keeper::owe`]: it failed on its way, or no runtime
    /// runs here), to be retried until done. Works without a runtime: the chores task is then
    /// started in the runtime the client's leases were added in, or, if the client never held
    /// one, by its next acquire ([`Keeper::resume_chores`]).
    pub(crate) fn retry_later(self: &Arc<Self>, chore: Chore) {
        tracing::debug!(resource = chore.resource(), "chore queued");
        let queued = self.queued_now(chore, Duration::ZERO);
        self.requeue(vec![queued]);
    }

    /// Queues `chore`, owed already, for a background task that is to send it: the task
    /// takes it out of the queue when its turn comes ([`Keeper::claim`]). Until then the
    /// chore waits in the queue like any other, so nothing depends on that task ever
    /// running (it may sit unpolled in a runtime nobody drives): the next attempt of its lock
    /// id on its resource sends it itself ([`Keeper::settle`]), and the chores task does
    /// after `grace` if it runs. The chores task is not started for it here, in a runtime
    /// that may never be driven again; the client's next acquire starts it where that runs
    /// ([`Keeper::resume_chores`]). Returns the id to claim it by.
    pub(crate) fn queue_for_task(&self, chore: Chore, grace: Duration) -> u64 {
        let queued = self.queued_now(chore, grace);
        let id = queued.id;
        self.registry().chores.push(queued);
        id
    }

    /// Takes the chore `id` out of the queue to send it, unless someone took it first.
    pub(crate) fn claim(&self, id: u64) -> Option<Chore> {
        let mut registry = self.registry();
        let at = registry.chores.iter().position(|queued| queued.id == id)?;
        Some(registry.chores.swap_remove(at).chore)
    }

    /// `chore` as queued now, to be tried `after` from now, with an id of its own.
    fn queued_now(&self, chore: Chore, after: Duration) -> Queued {
        let now = self.clock.now();
        let id = {
            let mut registry = self.registry();
            registry.next_chore += 1;
            registry.next_chore
        };
        let give_up_at = now + chore.lifetime(self.ctx.timeout);
        Queued {
            id,
            // A grace past any instant (a call's time limit without bound) is the last try.
            next_try: now.checked_add(after).unwrap_or(give_up_at).min(give_up_at),
            give_up_at,
            chore,
            backoff: CHORE_BACKOFF.0,
        }
    }

    /// Carries out, or waits for, every chore this client owes for `lock_id` on `resource`,
    /// before an attempt of that lock id on that resource is sent. A queued release or
    /// withdrawal of an earlier grant of the same lock id would otherwise land after the
    /// attempt and remove what it was granted, or what it resumed (the entry it adopts is
    /// that earlier grant's). Queued ones are sent now, by the caller; those on their way
    /// elsewhere are waited for. Nothing is owed in the common case: a lookup.
    ///
    /// # Errors
    ///
    /// The error of an owed chore that failed again (it stays queued): the attempt must not
    /// be sent yet.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future puts the chores it took back in the queue.
    pub(crate) async fn settle(
        self: &Arc<Self>,
        resource: &str,
        lock_id: &str,
    ) -> crate::Result<()> {
        loop {
            // Enabled before the count is read: a chore done in between still wakes it.
            let paid = self.paid.notified();
            tokio::pin!(paid);
            paid.as_mut().enable();
            let mine = {
                let mut registry = self.registry();
                let debt = (resource.to_owned(), lock_id.to_owned());
                if !registry.owed.contains_key(&debt) {
                    return Ok(());
                }
                let (mine, others): (Vec<Queued>, Vec<Queued>) =
                    std::mem::take(&mut registry.chores)
                        .into_iter()
                        .partition(|queued| queued.chore.is_for(resource, lock_id));
                registry.chores = others;
                mine
            };
            if mine.is_empty() {
                // On their way, sent by another task: wait until one is done.
                paid.await;
                continue;
            }
            let mut taken = Taken {
                keeper: self,
                chores: mine.into_iter().map(Some).collect(),
            };
            for slot in &mut taken.chores {
                let Some(queued) = slot else { continue };
                match queued.chore.run(&self.ctx).await {
                    Ok(()) => {}
                    Err(error) if !error.is_retryable() => {
                        tracing::warn!(%error, resource, "an owed chore failed for good");
                    }
                    Err(error) => return Err(error),
                }
                let done = slot.take().expect("the slot was full");
                self.paid(&done.chore);
            }
        }
    }

    /// Starts the chores task if chores wait and none runs: in the current runtime, or else
    /// in the one the leases were added in. (Nothing waits on the renewing task for this: it
    /// may have stopped, its last lease removed, just before a dropped guard queued the
    /// release.)
    fn start_cleaning(self: &Arc<Self>, registry: &mut Registry) {
        if running(registry.cleaning, registry.cleaner.as_ref()) || registry.chores.is_empty() {
            return;
        }
        let runtime = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| registry.runtime.clone());
        if let Some(runtime) = runtime {
            registry.cleaning = true;
            registry.cleaner = Some(runtime.spawn(do_chores(Arc::downgrade(self))));
        }
    }

    /// Tries every queued chore once more, now, after those the chores task is sending;
    /// those that fail stay queued. They go [`CHORES_AT_ONCE`] at a time, as the chores
    /// task sends them (taking the same turns), so a flush of many chores on an
    /// unresponsive server takes their number over [`CHORES_AT_ONCE`] command time limits,
    /// not their number.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future puts the chores it took and did not send back in the queue, still
    /// owed, with those on their way (sent again later: a chore may land twice).
    pub(crate) async fn flush(self: &Arc<Self>) {
        let _on_the_way = self.on_the_way.lock().await;
        let chores: Vec<Queued> = std::mem::take(&mut self.registry().chores);
        // What is left in it when it is dropped, here or midway, goes back in the queue.
        let mut taken = Taken {
            keeper: self,
            chores: chores.into_iter().map(Some).collect(),
        };
        futures_util::stream::iter(taken.chores.iter_mut())
            .for_each_concurrent(CHORES_AT_ONCE, |slot| async move {
                // The semaphore is never closed, so a turn always comes.
                let _turn = self.turns.clone().acquire_owned().await;
                let Some(queued) = slot.as_mut() else { return };
                match queued.chore.run(&self.ctx).await {
                    Ok(()) => {
                        let done = slot.take().expect("the slot was full");
                        self.paid(&done.chore);
                    }
                    Err(error) => {
                        tracing::warn!(%error, resource = queued.chore.resource(), "chore failed");
                        queued.next_try = self.clock.now() + queued.backoff;
                    }
                }
            })
            .await;
    }

    /// Puts `chores`, still owed, back in the queue, and starts or wakes the chores task.
    fn requeue(self: &Arc<Self>, chores: Vec<Queued>) {
        let mut registry = self.registry();
        registry.chores.extend(chores);
        self.start_cleaning(&mut registry);
        drop(registry);
        self.queued.notify_one();
    }

    /// The leases not lost yet, or None (and the task marked stopped) when there are none.
    fn snapshot(self: &Arc<Self>) -> Option<Vec<Arc<Lease>>> {
        let mut registry = self.registry();
        registry
            .leases
            .retain(|_, lease| !matches!(*lease.state.borrow(), LeaseState::Lost(_)));
        if registry.leases.is_empty() {
            registry.renewing = false;
            return None;
        }
        Some(registry.leases.values().cloned().collect())
    }
}

/// Whether a background task of the keeper runs: its flag is set, and its task was not
/// dropped with the runtime it was spawned in (a task ends by clearing its flag first).
fn running(flag: bool, task: Option<&tokio::task::JoinHandle<()>>) -> bool {
    flag && !task.is_some_and(tokio::task::JoinHandle::is_finished)
}

/// The renewing task: renews the keeper's leases until it has none, or the keeper is gone.
async fn renew_all(keeper: Weak<Keeper>) {
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
            failed = !tick(&keeper, leases).instrument(span).await;
            continue;
        }
        // Sleep until the next tick, a deadline (to report the loss on time), or a new
        // lease; never longer than SUSPEND_CHECK, since timers do not count suspended time.
        let first_deadline = leases.iter().map(|l| l.time_left()).min();
        let sleep = next_tick
            .saturating_duration_since(Instant::now())
            .min(first_deadline.unwrap_or(SUSPEND_CHECK))
            .min(SUSPEND_CHECK);
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
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
async fn tick(keeper: &Arc<Keeper>, leases: Vec<Arc<Lease>>) -> bool {
    let ctx = &keeper.ctx;
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
        .map(|l| l.time_left().min(l.every.max(l.ttl / 4)))
        .min()
    else {
        return true;
    };
    let grants: Vec<&Grant> = live.iter().map(|l| &l.grant).collect();
    let sent_at = ctx.server_clock.stamp();
    let started = std::time::Instant::now();
    let renewed = keepalive::renew(ctx, &keeper.id, &grants, limit).await;
    crate::observe::renewal(renewed.is_ok(), started.elapsed());
    match &renewed {
        Ok(count) if *count == live.len() as u64 => {
            for lease in &live {
                lease.renewed(sent_at);
            }
            return true;
        }
        Ok(count) => tracing::debug!(count, leases = live.len(), "not every lease renewed"),
        Err(error) => {
            tracing::warn!(%error, leases = live.len(), "renewal failed");
            for lease in &live {
                lease.suspended();
            }
            // Unreachable, or too slow: try again soon. Any other failure (a statement the
            // server refused) may concern one lease only: ask which are live.
            if error.is_retryable() || matches!(error.kind(), crate::ErrorKind::Timeout { .. }) {
                return false;
            }
        }
    }
    // Which of them does the server still have, and for how long?
    let limit = live
        .iter()
        .map(|l| l.time_left().min(l.every.max(l.ttl / 4)))
        .min()
        .unwrap_or_default()
        .max(Duration::from_millis(1));
    let read_at = ctx.server_clock.stamp();
    match keepalive::live(ctx, &keeper.id, limit).await {
        Ok(rows) => {
            let held: HashMap<keepalive::LiveEntry, Option<Duration>> = rows.into_iter().collect();
            for lease in &live {
                let key = keepalive::LiveEntry {
                    resource: lease.grant.resource().to_owned(),
                    lock_id: lease.grant.lock_id().to_owned(),
                    token: lease.grant.fencing_token(),
                };
                match held.get(&key) {
                    Some(left) => lease.confirmed(read_at, left.unwrap_or(lease.ttl)),
                    None => {
                        tracing::warn!(
                            resource = lease.grant.resource(),
                            lock_id = lease.grant.lock_id(),
                            token = lease.grant.fencing_token(),
                            "lease revoked: the server no longer has it"
                        );
                        lease.lose(LossReason::Revoked);
                    }
                }
            }
            renewed.is_ok()
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

/// The chores task: tries each queued chore when due, until none is left or the keeper is
/// gone.
async fn do_chores(keeper: Weak<Keeper>) {
    loop {
        let Some(keeper) = keeper.upgrade() else {
            return;
        };
        // Taken before the due chores are, and held until their results are back in the
        // queue: a flush meanwhile waits for them.
        let on_the_way = keeper.on_the_way.lock().await;
        let now = keeper.clock.now();
        let (due, next) = {
            let mut registry = keeper.registry();
            let (late, chores): (Vec<Queued>, Vec<Queued>) = std::mem::take(&mut registry.chores)
                .into_iter()
                .partition(|queued| queued.give_up_at <= now);
            registry.chores = chores;
            drop(registry);
            for queued in late {
                tracing::warn!(
                    resource = queued.chore.resource(),
                    "a chore could not be done in time; the server's clock has ended it"
                );
                keeper.paid(&queued.chore);
            }
            let mut registry = keeper.registry();
            if registry.chores.is_empty() {
                registry.cleaning = false;
                return;
            }
            let (due, waiting): (Vec<Queued>, Vec<Queued>) = std::mem::take(&mut registry.chores)
                .into_iter()
                .partition(|queued| queued.next_try <= now);
            registry.chores = waiting;
            let next = registry.chores.iter().map(|q| q.next_try).min();
            (due, next)
        };
        if due.is_empty() {
            drop(on_the_way);
            let sleep = next
                .map_or(SUSPEND_CHECK, |next| next.saturating_duration_since(now))
                .min(SUSPEND_CHECK);
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = keeper.queued.notified() => {}
            }
            continue;
        }
        // A bounded number at once: a burst of failed releases (a network blip under many
        // guards) must not open a connection per chore.
        let results: Vec<(Queued, crate::Result<()>)> =
            futures_util::stream::iter(due.into_iter().map(|queued| {
                let ctx = keeper.ctx.clone();
                let turns = keeper.turns.clone();
                async move {
                    // The semaphore is never closed, so a turn always comes.
                    let _turn = turns.acquire_owned().await;
                    let result = queued.chore.run(&ctx).await;
                    (queued, result)
                }
            }))
            .buffer_unordered(CHORES_AT_ONCE)
            .collect()
            .await;
        let now = keeper.clock.now();
        let mut paid = Vec::new();
        let mut registry = keeper.registry();
        for (mut queued, result) in results {
            match result {
                Ok(()) => {
                    tracing::debug!(resource = queued.chore.resource(), "chore done");
                    paid.push(queued.chore);
                }
                Err(error) if !error.is_retryable() => {
                    tracing::warn!(%error, resource = queued.chore.resource(), "chore failed for good");
                    paid.push(queued.chore);
                }
                Err(error) => {
                    tracing::warn!(%error, resource = queued.chore.resource(), retry_in = ?queued.backoff, "chore failed");
                    queued.next_try = now + queued.backoff;
                    queued.backoff = (queued.backoff * 2).min(CHORE_BACKOFF.1);
                    registry.chores.push(queued);
                }
            }
        }
        // Back in the queue first: an attempt woken by a payment finds the rest there.
        drop(registry);
        for chore in &paid {
            keeper.paid(chore);
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
    use crate::clock::Clock;
    use crate::lock::LockKind;

    fn grant() -> Grant {
        Grant::for_test("r", "l", LockKind::Exclusive, 7)
    }

    /// A lease on [`grant`] with a 10 s TTL, a 1 s margin and a 3 s period, granted by an
    /// attempt sent at `sent`.
    fn lease(sent: Instant, clock: Clock) -> Lease {
        Lease::new(
            grant(),
            Duration::from_secs(10),
            Duration::from_secs(1),
            Duration::from_secs(3),
            Stamp::plain(sent),
            clock,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_is_the_send_time_plus_ttl_minus_the_margin() {
        let sent = Instant::now();
        let lease = lease(sent, Clock::system());
        assert_eq!(lease.deadline(), sent + Duration::from_secs(9));
        tokio::time::advance(Duration::from_secs(5)).await;
        lease.renewed(Stamp::plain(sent + Duration::from_secs(4)));
        assert_eq!(lease.deadline(), sent + Duration::from_secs(13));
        // An older renewal never moves the deadline back.
        lease.renewed(Stamp::plain(sent + Duration::from_secs(1)));
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
                Stamp::plain(sent),
                Clock::system(),
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
        let lease = lease(Instant::now(), Clock::system());
        lease.suspended();
        assert_eq!(lease.state(), LeaseState::Suspended);
        tokio::time::advance(Duration::from_millis(8_999)).await;
        assert!(!lease.is_lost());
        tokio::time::advance(Duration::from_millis(1)).await;
        // No task ran: the state is read against the clock.
        assert_eq!(lease.state(), LeaseState::Lost(LossReason::Deadline));
        // A late renewal does not revive it.
        lease.renewed(Stamp::plain(Instant::now()));
        assert!(lease.is_lost());
        assert_eq!(lease.lost().await, LossReason::Deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn a_machine_suspended_past_the_deadline_resumes_with_the_lease_lost() {
        let clock = Clock::simulated();
        let lease = Arc::new(lease(clock.now(), clock.clone()));
        let waiter = tokio::spawn({
            let lease = lease.clone();
            async move { lease.lost().await }
        });
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!lease.is_lost());
        // Suspended for a minute: the monotonic clock (and tokio's) stood still.
        clock.suspend(Duration::from_secs(60));
        assert_eq!(lease.state(), LeaseState::Lost(LossReason::Deadline));
        // The loss is signalled within SUSPEND_CHECK of tokio's time, not at the old deadline
        // 7 s ahead on the monotonic clock.
        let started = Instant::now();
        assert_eq!(waiter.await.unwrap(), LossReason::Deadline);
        assert!(Instant::now() - started <= SUSPEND_CHECK);
    }

    #[tokio::test(start_paused = true)]
    async fn the_server_saying_how_long_is_left_sets_the_deadline_from_the_read() {
        let sent = Instant::now();
        let lease = lease(sent, Clock::system());
        tokio::time::advance(Duration::from_secs(4)).await;
        lease.confirmed(Stamp::plain(Instant::now()), Duration::from_secs(8));
        assert_eq!(lease.deadline(), sent + Duration::from_secs(11));
        // Never more than the TTL from the read, whatever the server says.
        lease.confirmed(Stamp::plain(Instant::now()), Duration::from_secs(60));
        assert_eq!(lease.deadline(), sent + Duration::from_secs(13));
    }

    #[tokio::test(start_paused = true)]
    async fn lost_resolves_at_the_deadline_and_on_revocation() {
        let lease = Arc::new(Lease::new(
            grant(),
            Duration::from_secs(10),
            Duration::ZERO,
            Duration::from_secs(3),
            Stamp::plain(Instant::now()),
            Clock::system(),
        ));
        let start = Instant::now();
        assert_eq!(lease.lost().await, LossReason::Deadline);
        assert_eq!(Instant::now() - start, Duration::from_secs(10));

        let lease = Arc::new(Lease::new(
            grant(),
            Duration::from_secs(10),
            Duration::ZERO,
            Duration::from_secs(3),
            Stamp::plain(Instant::now()),
            Clock::system(),
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
