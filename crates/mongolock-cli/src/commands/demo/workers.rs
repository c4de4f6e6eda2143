//! The workers: ordinary ones that take locks in turn, one that crashes while holding, and
//! one whose network is cut while holding.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongolock::{LockClient, LockGuard, LossReason};
use mongolock_testkit::FaultProxy;
use mongolock_testkit::checker::history::LossKind;
use tokio::sync::watch;

use super::log::{GPU_PERMITS, Lock, Log, Mode, What};
use super::store::Store;

/// The demo's lease TTL: short, so a lease left by a dead holder runs out within the demo
/// without moving any clock.
pub(crate) const TTL: Duration = Duration::from_secs(2);

/// A wait for a lock is shown once it lasts this long.
const WAIT_SHOWN_AFTER: Duration = Duration::from_millis(200);

/// The loss reason in words.
pub(crate) fn reason_text(reason: LossReason) -> &'static str {
    match reason {
        LossReason::Deadline => "no renewal succeeded before its lease's deadline",
        LossReason::Revoked => "the server no longer has its lease",
        LossReason::Released => "it was released",
        _ => "the lease is gone",
    }
}

/// The loss reason as the checker counts it.
fn loss_kind(reason: LossReason) -> LossKind {
    match reason {
        LossReason::Deadline => LossKind::Deadline,
        LossReason::Revoked => LossKind::Revoked,
        _ => LossKind::Other,
    }
}

/// What a worker was told of its loss: the reason in words, and as the checker counts it.
pub(crate) fn told(reason: LossReason, words: String) -> What {
    What::Lost {
        reason: words,
        kind: loss_kind(reason),
    }
}

/// Waits for `guard`'s loss until `until`, noting the hold's local deadline in the log every
/// 10 ms meanwhile (so the checker knows how long its worker may believe it holds); the
/// reason, if the loss came first.
pub(crate) async fn watch(
    log: &Log,
    hold: u64,
    guard: &LockGuard,
    until: Instant,
) -> Option<LossReason> {
    loop {
        if !guard.is_lost() {
            log.deadline(hold, Instant::now() + guard.time_left());
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        if let Ok(reason) =
            tokio::time::timeout(left.min(Duration::from_millis(10)), guard.lost()).await
        {
            return Some(reason);
        }
    }
}

/// What every worker shares.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    /// The event log.
    pub(crate) log: Arc<Log>,
    /// The resource name of each lock: its name, prefixed on a shared deployment.
    pub(crate) prefix: String,
    /// Set to true when the workers should stop taking locks.
    pub(crate) stop: watch::Receiver<bool>,
    /// Maps the server's clock onto this machine's monotonic clock, when it can (the
    /// emulator reads this machine's wall clock): a reading of both at one moment.
    pub(crate) server_clock: Option<(Instant, i64)>,
    /// The database holding the locks.
    pub(crate) db: String,
    /// The lock collection.
    pub(crate) collection: String,
}

impl Shared {
    /// A lock client for one worker, on `client`: each worker is its own "host", with its
    /// own keeper.
    pub(crate) fn lock_client(&self, client: &mongodb::Client) -> LockClient {
        LockClient::new(client.database(&self.db).collection(&self.collection))
    }

    /// The guarded store, seen through `client`.
    pub(crate) fn store(&self, client: &mongodb::Client) -> Store {
        Store::new(&client.database(&self.db), &self.prefix)
    }

    /// When the server granted `guard`, on this machine's monotonic clock, if the clocks can
    /// be compared.
    fn granted_at(&self, guard: &LockGuard) -> Option<Instant> {
        let (at, server_ms) = self.server_clock?;
        let granted_ms = guard.grant().holder().created_at().timestamp_millis();
        let delta = granted_ms - server_ms;
        if delta >= 0 {
            at.checked_add(Duration::from_millis(delta as u64))
        } else {
            at.checked_sub(Duration::from_millis(delta.unsigned_abs()))
        }
    }

    /// Records a grant, to a call of `acquire` made at `invoked_at`.
    fn acquired(
        &self,
        worker: usize,
        lock: Lock,
        mode: Mode,
        guard: &LockGuard,
        invoked_at: Instant,
    ) -> u64 {
        let hold = self.log.new_hold();
        self.log.record(
            worker,
            lock,
            hold,
            What::Acquired {
                mode,
                token: guard.fencing_token(),
                lock_id: guard.lock_id().to_owned(),
                invoked_at,
                sent_at: guard.attempt_sent_at(),
                granted_at: self.granted_at(guard),
            },
        );
        hold
    }

    /// Resolves once the demo is stopping.
    async fn stopped(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|stop| *stop).await;
    }

    /// Waits for `lock` in `mode` with `locks` (see [`Shared::acquire`]) and records the
    /// grant: the guard, its hold and its token; `None` if the demo stopped or the acquire
    /// failed (said in the log).
    pub(crate) async fn take(
        &self,
        locks: &LockClient,
        worker: usize,
        lock: Lock,
        mode: Mode,
    ) -> Option<(LockGuard, u64, i64)> {
        let invoked_at = Instant::now();
        let Acquired::Held(guard) = self.acquire(locks, worker, lock, mode).await else {
            return None;
        };
        let hold = self.acquired(worker, lock, mode, &guard, invoked_at);
        let token = guard.fencing_token();
        Some((guard, hold, token))
    }

    /// Tells every worker to stop once it finishes what it holds (`stop`), says so, and
    /// waits for `workers`.
    ///
    /// # Cancel safety
    /// Dropped while waiting, the workers go on until they stop (the join set aborts them
    /// when it is dropped).
    pub(crate) async fn stop_all(
        &self,
        stop: &watch::Sender<bool>,
        workers: &mut tokio::task::JoinSet<()>,
    ) {
        let _ = stop.send(true);
        self.log.say(&format!(
            "{:>8}        (time is up: every worker finishes what it holds, then stops)",
            self.log.time(Instant::now())
        ));
        while workers.join_next().await.is_some() {}
    }

    /// Waits for `resource`'s lock in `mode` with `locks`, unless the demo stops first; an
    /// error is said in the log.
    async fn acquire(&self, locks: &LockClient, worker: usize, lock: Lock, mode: Mode) -> Acquired {
        match self.acquire_or_stop(locks, worker, lock, mode).await {
            None => Acquired::Stopped,
            Some(Ok(guard)) => Acquired::Held(guard),
            Some(Err(error)) => {
                self.log.say(&format!(
                    "          w{worker} could not acquire {}: {error}",
                    lock.name()
                ));
                Acquired::Failed
            }
        }
    }

    /// Waits for `resource`'s lock in `mode` with `locks`, unless the demo stops first.
    async fn acquire_or_stop(
        &self,
        locks: &LockClient,
        worker: usize,
        lock: Lock,
        mode: Mode,
    ) -> Option<mongolock::Result<LockGuard>> {
        let resource = format!("{}{}", self.prefix, lock.name());
        let owner = format!("demo-w{worker}");
        let acquiring = async {
            match mode {
                Mode::Mutex => locks.mutex(resource).ttl(TTL).owner(owner).acquire().await,
                Mode::Permit => {
                    locks
                        .semaphore(resource, GPU_PERMITS)
                        .ttl(TTL)
                        .owner(owner)
                        .acquire()
                        .await
                }
                Mode::Read => locks.rwlock(resource).ttl(TTL).owner(owner).read().await,
                Mode::Write => locks.rwlock(resource).ttl(TTL).owner(owner).write().await,
            }
        };
        let mut acquiring = std::pin::pin!(acquiring);
        tokio::select! {
            guard = &mut acquiring => return Some(guard),
            _ = self.stopped() => return None,
            _ = tokio::time::sleep(WAIT_SHOWN_AFTER) => {}
        }
        self.log.record(worker, lock, 0, What::Waiting { mode });
        tokio::select! {
            guard = acquiring => Some(guard),
            _ = self.stopped() => None,
        }
    }

    /// Writes `lock`'s guarded record with the guard's token, and records the outcome.
    pub(crate) async fn write(
        &self,
        store: &Store,
        worker: usize,
        lock: Lock,
        hold: u64,
        token: i64,
        late: bool,
    ) {
        match store.write(lock, token, &format!("w{worker}")).await {
            Ok(accepted) => {
                self.log.record(
                    worker,
                    lock,
                    hold,
                    What::Wrote {
                        token,
                        accepted,
                        late,
                    },
                );
            }
            Err(error) => self
                .log
                .say(&format!("          w{worker} could not write: {error:#}")),
        }
    }
}

/// The jobs an ordinary worker cycles through (each starts at its own place in the cycle).
const JOBS: [(Lock, Mode); 7] = [
    (Lock::Report, Mode::Mutex),
    (Lock::Gpu, Mode::Permit),
    (Lock::Config, Mode::Read),
    (Lock::Gpu, Mode::Permit),
    (Lock::Report, Mode::Mutex),
    (Lock::Config, Mode::Read),
    (Lock::Config, Mode::Write),
];

/// An ordinary worker: takes a lock, works a little (writing the guarded record if it holds
/// an exclusive lock), releases it, rests, and again, until the demo stops. It watches its
/// lease while it works and stops at once if it is told the lease is lost.
pub(crate) async fn ordinary(shared: Shared, worker: usize, client: mongodb::Client) {
    let locks = shared.lock_client(&client);
    let store = shared.store(&client);
    // Spread the first attempts a little.
    tokio::time::sleep(Duration::from_millis(40 * worker as u64)).await;
    let mut round = 0;
    loop {
        if *shared.stop.borrow() {
            break;
        }
        let (lock, mode) = JOBS[(worker * 3 + round) % JOBS.len()];
        let work = Duration::from_millis(150 + 50 * ((worker * 3 + round * 5) % 6) as u64);
        let rest = Duration::from_millis(50 + 25 * ((worker + round * 7) % 5) as u64);
        round += 1;
        let invoked_at = Instant::now();
        let guard = match shared.acquire(&locks, worker, lock, mode).await {
            Acquired::Stopped => break,
            Acquired::Held(guard) => guard,
            Acquired::Failed => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let hold = shared.acquired(worker, lock, mode, &guard, invoked_at);
        let token = guard.fencing_token();
        // First half of the work, then the write, then the second half; a loss stops it.
        let mut lost = None;
        tokio::select! {
            biased;
            reason = guard.lost() => lost = Some(reason),
            _ = tokio::time::sleep(work / 2) => {}
        }
        if lost.is_none() && mode.writes() {
            if guard.is_lost() {
                lost = Some(guard.lost().await);
            } else {
                shared.write(&store, worker, lock, hold, token, false).await;
            }
        }
        if lost.is_none() {
            tokio::select! {
                biased;
                reason = guard.lost() => lost = Some(reason),
                _ = tokio::time::sleep(work / 2) => {}
            }
        }
        if lost.is_none() && guard.is_lost() {
            lost = Some(guard.lost().await);
        }
        match lost {
            Some(reason) => {
                shared.log.record(
                    worker,
                    lock,
                    hold,
                    told(reason, reason_text(reason).to_owned()),
                );
                drop(guard);
            }
            None => {
                shared.log.record(worker, lock, hold, What::Released);
                if let Err(error) = guard.release().await {
                    shared.log.say(&format!(
                        "          w{worker}: releasing {} said: {error}",
                        lock.name()
                    ));
                }
            }
        }
        tokio::time::sleep(rest).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), locks.shutdown()).await;
}

/// The worker that crashes: its own process, here its own runtime on its own thread, with
/// its own driver client and lock client. It takes the config's write lock, writes the
/// config, and dies: the guard is never released, and the runtime that ran its keeper is
/// dropped, so nothing renews the lease again. Its lease must run out before anyone else
/// gets the config.
pub(crate) fn crashing(shared: Shared, worker: usize, uri: String) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                shared
                    .log
                    .say(&format!("          w{worker} could not start: {error}"));
                return;
            }
        };
        runtime.block_on(async {
            let client = match crate::uri::client(&uri, None).await {
                Ok(client) => client,
                Err(error) => {
                    shared
                        .log
                        .say(&format!("          w{worker} could not connect: {error:#}"));
                    return;
                }
            };
            let locks = shared.lock_client(&client);
            let store = shared.store(&client);
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (lock, mode) = (Lock::Config, Mode::Write);
            let Some((guard, hold, token)) = shared.take(&locks, worker, lock, mode).await else {
                return;
            };
            tokio::time::sleep(Duration::from_millis(200)).await;
            shared.write(&store, worker, lock, hold, token, false).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            // The process dies here. Its lease ends, by its own clock, at its local deadline:
            // when it would have been told, had it lived. No await from here on, so no
            // renewal can slip in.
            let lease_end = Instant::now() + guard.time_left();
            shared
                .log
                .record(worker, lock, hold, What::Crashed { lease_end });
            std::mem::forget(guard);
        });
        // Dropping the runtime drops every task it ran: the keeper that renewed the lease,
        // the driver's connections. The forgotten guard never runs its release.
        drop(runtime);
    })
}

/// What a worker's acquire came to.
enum Acquired {
    /// It holds the lock.
    Held(LockGuard),
    /// The demo is stopping.
    Stopped,
    /// An error, already said in the log.
    Failed,
}

/// The worker that is cut off: its client goes through the fault proxy. It takes the
/// report's mutex and writes the report; then the proxy stops forwarding (a network
/// partition), its renewals fail, and it must be told it lost the lease before anyone else
/// gets the mutex. Once someone else has written the report, the network comes back and it
/// tries its write again with its old token, as a holder that did not check would: the
/// store must refuse it.
pub(crate) async fn cut_off(shared: Shared, worker: usize, proxy: Arc<FaultProxy>) {
    let client = proxy.client();
    let locks = shared.lock_client(&client);
    let store = shared.store(&client);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (lock, mode) = (Lock::Report, Mode::Mutex);
    let Some((guard, hold, token)) = shared.take(&locks, worker, lock, mode).await else {
        return;
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    shared.write(&store, worker, lock, hold, token, false).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    proxy.blackhole();
    let cut_at = shared.log.record(worker, lock, hold, What::CutOff);
    match watch(&shared.log, hold, &guard, cut_at + TTL * 3).await {
        Some(reason) => {
            let words = format!(
                "{}; cut off {} ago",
                reason_text(reason),
                super::log::secs(cut_at.elapsed())
            );
            shared.log.record(worker, lock, hold, told(reason, words));
        }
        None => {
            shared.log.record(worker, lock, hold, What::NeverTold);
        }
    }
    // Wait until someone else has written the report with a newer token (or give up).
    let newer_written = |log: &Log| {
        log.any(|e| {
            e.lock == lock
                && e.worker != worker
                && matches!(e.what, What::Wrote { token: t, accepted: true, .. } if t > token)
        })
    };
    let give_up = Instant::now() + TTL * 4;
    while !newer_written(&shared.log) && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.heal();
    shared.log.record(worker, lock, hold, What::Healed);
    if newer_written(&shared.log) {
        shared.write(&store, worker, lock, hold, token, true).await;
    }
    drop(guard);
    let _ = tokio::time::timeout(Duration::from_secs(5), locks.shutdown()).await;
}
