//! Leases taken through the handles (mutex, semaphore, reader-writer lock): one at a time, or
//! a pair at once; and the nemeses a client carries out on its own acquire or let-go.
//!
//! A holder works in steps. Before each step it lets go of the leases it finds lost, checks
//! the others and writes under each at once; during the step it races the work against the
//! loss of every lease it holds and samples their local deadlines every 10 ms. A nemesis
//! asked for its next let-go ([`FaultKind::is_let_go`]) is carried out within those 10 ms on
//! one of its leases (chosen at random); a pair holder keeps the other one for a long tail of
//! 2–3 × TTL afterwards (cut short when the faults stop). Every nemesis is logged ([`NemesisLog`]) with how it ended, and
//! the lease's log says how it was let go ([`LetGo`]) and what a release returned
//! ([`ReleaseResult`]).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, Instant};

use mongolock::{LockClient, LockGuard, LossReason};
use mongolock_testkit::faults::proxy::{RequestFault, Requests};
use rand::Rng;
use rand::seq::IndexedRandom;

use super::{ClientCtl, Held, Target, Worker, attach_acquiring_pauses, lock, owner_label};
use crate::commands::{self, HOST_UNREACHABLE};
use crate::history::{
    AcquireCall, Ending, FromLibrary, GuardLog, HolderLog, LetGo, LossKind, Mode, NemesisLog,
    PauseLog, ReleaseResult, WriterWait,
};
use crate::history::{ExtraFault, FaultKind};

/// The lock id the client slot `index` holds resumable resources with, in every
/// incarnation (see the `resume` module).
pub fn resume_lock_id(index: usize) -> String {
    format!("resume-{index}")
}

/// One lease held through a handle, and its holder's log.
pub(super) struct Lease {
    pub(super) guard: LockGuard,
    pub(super) log: HolderLog,
    /// A twin resumed it while its client was paused (the `resume` submodule).
    pub(super) twinned: bool,
}

/// One acquire call through the handle of `resource`, owning everything it uses (so that its
/// future can be moved to another thread and dropped there).
#[allow(clippy::too_many_arguments)]
async fn acquire_call(
    locks: LockClient,
    resource: String,
    mode: Mode,
    writer: bool,
    owner: String,
    lock_id: String,
    ttl: Duration,
    timeout: Duration,
    delay: Duration,
) -> mongolock::Result<Option<LockGuard>> {
    match mode {
        Mode::Exclusive | Mode::Group | Mode::Multi | Mode::Election => {
            let mutex = locks.mutex(&resource).ttl(ttl).owner(owner);
            let mutex = mutex.lock_delay(delay);
            mutex.lock_id(lock_id).acquire_timeout(timeout).await
        }
        Mode::Shared { permits } => {
            let semaphore = locks.semaphore(&resource, permits).ttl(ttl).owner(owner);
            let semaphore = semaphore.lock_delay(delay);
            semaphore.lock_id(lock_id).acquire_timeout(timeout).await
        }
        Mode::ReadWrite => {
            let rwlock = locks
                .rwlock(&resource)
                .ttl(ttl)
                .lock_delay(delay)
                .owner(owner)
                .lock_id(lock_id);
            if writer {
                rwlock.write_timeout(timeout).await
            } else {
                rwlock.read_timeout(timeout).await
            }
        }
    }
}

/// Resolves once a drop of the acquire in flight was asked for, and the delay it asks for
/// has passed.
async fn drop_requested(ctl: &ClientCtl) {
    loop {
        let request = *lock(&ctl.drop_acquire);
        if let Some(request) = request {
            tokio::time::sleep(request.after).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The first of `leases` to be lost, and why; never resolves without leases. A holder holds
/// one lease or two.
async fn first_loss(leases: &[Lease]) -> (usize, LossReason) {
    match leases {
        [] => std::future::pending().await,
        [a] => (0, a.guard.lost().await),
        [a, b, ..] => tokio::select! {
            reason = a.guard.lost() => (0, reason),
            reason = b.guard.lost() => (1, reason),
        },
    }
}

/// Awaits `fut` while watching `leases` (those still held beside what `fut` does), as the
/// steps of work do: the first loss among them is noticed when it comes, not once `fut` is
/// done, which may take seconds (a release under a partition, the acquire of a pair's second
/// lease), and their local deadlines are sampled every 10 ms. With `mirror`, a copy of their
/// logs is kept up to date where a kill while acquiring finds it.
async fn watching<T>(
    fut: impl Future<Output = T>,
    leases: &mut [Lease],
    mirror: Option<&ClientCtl>,
) -> T {
    tokio::pin!(fut);
    let mut watch = !leases.is_empty();
    loop {
        if let Some(ctl) = mirror {
            let mut partial = lock(&ctl.partial);
            partial.clear();
            partial.extend(leases.iter().map(|l| l.log.clone()));
        }
        tokio::select! {
            biased;
            out = &mut fut => return out,
            (i, reason) = first_loss(leases), if watch => {
                leases[i].log.notice(Instant::now(), LossKind::of(&reason));
                watch = false;
            }
            () = tokio::time::sleep(Duration::from_millis(10)) => {
                for lease in leases.iter_mut() {
                    lease.log.sample(&lease.guard);
                }
            }
        }
    }
}

/// What a holder lets go of: a guard, a multi-lock's set, a leadership. Releasing it
/// awaits the server's answer; dropping it releases in the background.
pub(super) trait Release: Send + 'static {
    /// Releases it (a leadership resigns).
    fn release(self) -> impl Future<Output = mongolock::Result<()>>;
}

impl Release for LockGuard {
    fn release(self) -> impl Future<Output = mongolock::Result<()>> {
        LockGuard::release(self)
    }
}

impl Release for mongolock::MultiGuard {
    fn release(self) -> impl Future<Output = mongolock::Result<()>> {
        mongolock::MultiGuard::release(self)
    }
}

impl Release for mongolock::Leadership {
    fn release(self) -> impl Future<Output = mongolock::Result<()>> {
        self.resign()
    }
}

/// Lets go of `held`, whose logs are `logs` (one lease's, or every member's of a set): by
/// awaiting its release, or as the nemesis says ([`FaultKind::is_let_go`]). Marks in every
/// log how it let go and what an awaited release returned; returns how the nemesis ended,
/// if one was asked for.
pub(super) async fn let_go_of(
    rng: &mut impl Rng,
    held: impl Release,
    logs: &mut [HolderLog],
    nemesis: Option<FaultKind>,
) -> Option<Ending> {
    let lets_go = |logs: &mut [HolderLog], how: LetGo| logs.iter_mut().for_each(|l| l.lets_go(how));
    let returned = |logs: &mut [HolderLog], result: ReleaseResult| {
        for log in logs.iter_mut() {
            log.let_go = Some(LetGo::Released);
            log.release = Some(result);
        }
    };
    match nemesis {
        None => {
            lets_go(logs, LetGo::Released);
            returned(logs, ReleaseResult::of(&held.release().await));
            None
        }
        Some(FaultKind::DropWithoutRuntime) => {
            lets_go(logs, LetGo::DroppedWithoutRuntime);
            // A plain thread has no tokio runtime: the drop cannot spawn the release.
            let _ = std::thread::spawn(move || drop(held)).join();
            Some(Ending::DroppedWithoutRuntime)
        }
        Some(FaultKind::DropOnEndingRuntime) => {
            lets_go(logs, LetGo::DroppedOnEndingRuntime);
            // A runtime of its own on another thread, ended once the drop is done: the
            // background release the drop spawned there is dropped unrun with it.
            let _ = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async move { drop(held) });
            })
            .join();
            Some(Ending::DroppedOnEndingRuntime)
        }
        Some(FaultKind::ReleaseCancelled) => {
            lets_go(logs, LetGo::ReleaseCancelled);
            let mut release = Box::pin(held.release());
            let done = match rng.random_range(0..4) {
                // Polled once: the release begins (the lease leaves the keeper) and waits
                // for a connection; dropped before anything is sent.
                0 | 1 => {
                    match std::future::poll_fn(|cx| Poll::Ready(release.as_mut().poll(cx))).await {
                        Poll::Ready(released) => Some(released),
                        Poll::Pending => None,
                    }
                }
                // A timer of 1 µs, which tokio rounds up to its next millisecond: the release
                // is polled a few times first, and is usually sent.
                2 => tokio::time::timeout(Duration::from_micros(1), release)
                    .await
                    .ok(),
                _ => {
                    let timer = Duration::from_millis(rng.random_range(0..=3));
                    tokio::select! {
                        biased;
                        released = &mut release => Some(released),
                        () = tokio::time::sleep(timer) => None,
                    }
                }
            };
            match done {
                Some(released) => {
                    let result = ReleaseResult::of(&released);
                    returned(logs, result);
                    Some(Ending::Released(result))
                }
                None => Some(Ending::ReleaseCancelled),
            }
        }
        Some(FaultKind::ReleaseBlip) => {
            lets_go(logs, LetGo::Dropped);
            drop(held);
            Some(Ending::Dropped)
        }
        Some(_) => {
            // Under a partition or lost replies, armed by the injector.
            lets_go(logs, LetGo::Released);
            let result = ReleaseResult::of(&held.release().await);
            returned(logs, result);
            Some(Ending::Released(result))
        }
    }
}

impl Worker {
    /// Acquires `resource` through its handle, holds it, lets it go.
    pub(super) async fn one(&mut self, locks: &LockClient, resource: String, mode: Mode) -> Held {
        match self.acquire_one(locks, resource, mode).await {
            Some(lease) => self.hold(locks, vec![lease]).await,
            None => Held::Done,
        }
    }

    /// Takes two resources of `pool` at once (in name order), holds both, lets them go. If
    /// the second is not granted, the first is let go of with no work done.
    pub(super) async fn pair(&mut self, locks: &LockClient, pool: &[(String, Mode)]) -> Held {
        // A lock id belongs to one live holder: while a twin of this slot holds the resumable
        // lease, the pair does not pick it (see `Worker::run`, which does the same for a
        // single resource): it would resume the twin's lease and free the resource under it.
        let twin_running = self.twin_running();
        let pool: Vec<&(String, Mode)> = (pool.iter())
            .filter(|(resource, _)| !(twin_running && self.workload.is_resumable(resource)))
            .collect();
        let mut picked: Vec<(String, Mode)> = (pool.choose_multiple(&mut self.rng, 2))
            .map(|&picked| picked.clone())
            .collect();
        picked.sort_by(|a, b| a.0.cmp(&b.0));
        let mut leases: Vec<Lease> = Vec::new();
        for (resource, mode) in picked {
            // A kill while acquiring the second finds the first's log in the mirror.
            let ctl = self.ctl.clone();
            let acquiring = self.acquire_one(locks, resource, mode);
            let got = watching(acquiring, &mut leases, Some(&ctl)).await;
            self.mirror(&[]);
            match got {
                Some(lease) => leases.push(lease),
                None => break,
            }
        }
        let mut logs: Vec<HolderLog> = leases.iter().map(|l| l.log.clone()).collect();
        attach_acquiring_pauses(&self.ctl, &mut logs);
        for (lease, log) in leases.iter_mut().zip(logs) {
            lease.log = log;
        }
        if leases.len() < 2 {
            while !leases.is_empty() {
                let lease = leases.remove(0);
                watching(self.let_go(lease, None), &mut leases, None).await;
            }
            return Held::Done;
        }
        self.hold(locks, leases).await
    }

    /// One acquire call through the handle of `resource`, which a drop asked for while it is
    /// in flight may end early (the future dropped in the runtime, or moved to a thread
    /// without one and dropped there). The lease, if granted.
    async fn acquire_one(
        &mut self,
        locks: &LockClient,
        resource: String,
        mode: Mode,
    ) -> Option<Lease> {
        let ttl = self.workload.ttl;
        let timeout = self.workload.acquire_timeout;
        let owner = owner_label(self.index, self.incarnation);
        let writer = mode == Mode::ReadWrite && self.rng.random_bool(self.workload.writer_share);
        // A lock id of its own, so that the server's log tells which call a grant came from;
        // on a resumable resource, the slot's fixed one (the same in every incarnation).
        self.calls += 1;
        let lock_id = if self.workload.is_resumable(&resource) {
            resume_lock_id(self.index)
        } else {
            format!("{owner}.call-{}", self.calls)
        };
        // Zero is no delay.
        let delay = self.workload.lock_delay(&resource).unwrap_or_default();
        let mut call = Box::pin(acquire_call(
            locks.clone(),
            resource.clone(),
            mode,
            writer,
            owner,
            lock_id.clone(),
            ttl,
            timeout,
            delay,
        ));
        // A request left from an earlier call is not for this one.
        lock(&self.ctl.drop_acquire).take();
        let invoked_at = Instant::now();
        self.ctl.acquiring.store(true, Ordering::SeqCst);
        self.ctl.acquiring_handle.store(true, Ordering::SeqCst);
        let got = tokio::select! {
            biased;
            got = &mut call => Some(got),
            () = drop_requested(&self.ctl) => None,
        };
        self.ctl.acquiring_handle.store(false, Ordering::SeqCst);
        self.ctl.acquiring.store(false, Ordering::SeqCst);
        let returned_at = Instant::now();
        self.recorder.acquire_call(AcquireCall {
            client: self.index,
            resource: resource.clone(),
            lock_id,
            invoked_at,
            ended_at: returned_at,
            granted: matches!(got, Some(Ok(Some(_)))),
            timeout: Some(timeout),
        });
        let request = lock(&self.ctl.drop_acquire).take();
        let Some(got) = got else {
            let without_runtime = request.is_some_and(|r| r.without_runtime);
            let ended = if without_runtime {
                // No runtime on a plain thread: the dropped acquire cannot spawn the
                // withdrawal of its attempt.
                let _ = std::thread::spawn(move || drop(call)).join();
                Ending::AcquireDroppedWithoutRuntime
            } else {
                drop(call);
                Ending::AcquireDropped
            };
            lock(&self.ctl.abandoned).push((resource.clone(), returned_at));
            self.recorder.nemesis(NemesisLog {
                kind: FaultKind::AcquireDropped,
                client: self.index,
                at: returned_at,
                holder: None,
                resource: Some(resource),
                ended,
            });
            return None;
        };
        if request.is_some() {
            self.recorder.nemesis(NemesisLog {
                kind: FaultKind::AcquireDropped,
                client: self.index,
                at: returned_at,
                holder: None,
                resource: Some(resource.clone()),
                ended: Ending::AcquireReturnedFirst,
            });
        }
        self.recorder
            .attempt(matches!(got, Ok(None)), got.as_ref().is_err_and(|_| true));
        if writer && got.is_ok() {
            self.recorder.writer_wait(WriterWait {
                client: self.index,
                resource: resource.clone(),
                invoked_at,
                gives_up_at: invoked_at + timeout,
                granted_at: got
                    .as_ref()
                    .ok()
                    .and_then(|g| g.as_ref())
                    .map(|_| returned_at),
                returned_at,
            });
        }
        match got {
            Ok(Some(guard)) => {
                let mut log = HolderLog::new(
                    self.recorder.next_id(),
                    self.index,
                    mode,
                    invoked_at,
                    &guard,
                );
                if self.ctl.drop_after_grant.swap(false, Ordering::SeqCst) {
                    // Dropped at once, in the runtime: released in the background.
                    log.lets_go(LetGo::Dropped);
                    drop(guard);
                    self.recorder.holder(log);
                    self.recorder.extra(
                        ExtraFault::DropAfterGrant,
                        self.index,
                        "guard dropped at its grant",
                    );
                    return None;
                }
                Some(Lease {
                    guard,
                    log,
                    twinned: false,
                })
            }
            Ok(None) => None,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                None
            }
        }
    }

    /// Holds `leases` (one, or a pair) for a few steps of work, carrying out the nemeses
    /// asked for on the way, then lets go of each (or dies).
    async fn hold(&mut self, locks: &LockClient, mut leases: Vec<Lease>) -> Held {
        self.ctl.start_holding();
        self.ctl.holding.store(true, Ordering::SeqCst);
        self.publish(&leases);
        let held = self.work(locks, &mut leases).await;
        while !leases.is_empty() {
            // A nemesis asked for just now comes with this let-go; none is asked for a lease
            // it is letting go of.
            let nemesis = (self.take_let_go()).or_else(|| self.ending_runtime_due(&leases[..1]));
            let lease = leases.remove(0);
            self.publish(&leases);
            watching(self.let_go(lease, nemesis), &mut leases, None).await;
        }
        lock(&self.ctl.hold_until).take();
        self.ctl.holding.store(false, Ordering::SeqCst);
        held
    }

    /// The steps of work under `leases`; what is left in it afterwards is still held (unless
    /// the client was killed: then nothing is).
    async fn work(&mut self, locks: &LockClient, leases: &mut Vec<Lease>) -> Held {
        let steps = self
            .rng
            .random_range(self.workload.steps.0..=self.workload.steps.1);
        let mut tail_until: Option<Instant> = None;
        let mut step = 0;
        loop {
            if leases.is_empty() || self.ctl.stop.load(Ordering::SeqCst) {
                return Held::Done;
            }
            let now = Instant::now();
            let tail =
                tail_until.is_some_and(|t| now < t) && !self.ctl.calmed.load(Ordering::SeqCst);
            let hold_on = tail || lock(&self.ctl.hold_until).is_some_and(|t| now < t);
            if step >= steps && !hold_on {
                return Held::Done;
            }
            step += 1;
            // The faults that hit this holder's process.
            let before: Vec<Option<Instant>> = leases
                .iter_mut()
                .map(|l| {
                    if l.guard.is_lost() {
                        return None;
                    }
                    l.log.sample(&l.guard);
                    Some(l.log.max_deadline.unwrap_or_else(Instant::now))
                })
                .collect();
            self.crash_or_twin(leases);
            self.twin_for_pause(leases.as_mut_slice());
            if before.iter().any(Option::is_some)
                && let Some((start, end)) = self.take_pause()
            {
                for (l, deadline_before) in leases.iter_mut().zip(before) {
                    if let Some(deadline_before) = deadline_before {
                        l.log.pauses.push(PauseLog {
                            start,
                            end,
                            deadline_before,
                            lost_on_resume: l.guard.is_lost(),
                        });
                    }
                }
            }
            if self.ctl.kill.swap(false, Ordering::SeqCst) {
                let now = Instant::now();
                for Lease { guard, mut log, .. } in leases.drain(..) {
                    log.killed_at = Some(now);
                    std::mem::forget(guard);
                    self.recorder.holder(log);
                }
                return Held::Killed;
            }
            // Let go of the leases found lost; then, with nothing run in between the last
            // check and the writes, write under the others.
            while let Some(i) = leases.iter_mut().position(|l| l.log.check_lost(&l.guard)) {
                let lease = leases.remove(i);
                self.publish(leases);
                watching(self.let_go(lease, None), leases, None).await;
            }
            if leases.is_empty() {
                return Held::Done;
            }
            for lease in leases.iter_mut() {
                self.write(&mut lease.log);
            }
            // Work, watching for losses and nemeses, sampling the deadlines.
            let step_end = self.step_end();
            loop {
                let now = Instant::now();
                if now >= step_end {
                    break;
                }
                if let Some(i) = self.release_again_asked(leases) {
                    let lease = leases.remove(i);
                    self.publish(leases);
                    // Asking again is acquiring: a kill then finds the other lease's log in
                    // the mirror, and a pause then stopped it too.
                    let ctl = self.ctl.clone();
                    let again = self.release_then_ask_again(locks, lease);
                    let again = watching(again, leases, Some(&ctl)).await;
                    self.mirror(&[]);
                    let mut logs: Vec<HolderLog> = leases.iter().map(|l| l.log.clone()).collect();
                    attach_acquiring_pauses(&self.ctl, &mut logs);
                    for (lease, log) in leases.iter_mut().zip(logs) {
                        lease.log = log;
                    }
                    if let Some(again) = again {
                        leases.push(again);
                        self.publish(leases);
                    }
                    break;
                }
                if let Some(nemesis) = self
                    .take_let_go()
                    .or_else(|| self.ending_runtime_due(leases))
                {
                    // A guard dropped on a runtime that ends is the resumable one, if held:
                    // its lock id is asked for again next (see `Worker::let_go`).
                    let resumable = (leases.iter())
                        .position(|l| self.workload.is_resumable(&l.log.resource) && !l.twinned)
                        .filter(|_| nemesis == FaultKind::DropOnEndingRuntime);
                    let i = resumable.unwrap_or_else(|| self.rng.random_range(0..leases.len()));
                    let lease = leases.remove(i);
                    self.publish(leases);
                    watching(self.let_go(lease, Some(nemesis)), leases, None).await;
                    if tail_until.is_none() && !leases.is_empty() {
                        let tail = self.workload.ttl.mul_f64(self.rng.random_range(2.0..3.0));
                        tail_until = Some(Instant::now() + tail);
                    }
                    break;
                }
                let tick = (step_end - now).min(Duration::from_millis(10));
                match tokio::time::timeout(tick, first_loss(leases)).await {
                    Ok((i, reason)) => {
                        leases[i].log.notice(Instant::now(), LossKind::of(&reason));
                        let lease = leases.remove(i);
                        self.publish(leases);
                        watching(self.let_go(lease, None), leases, None).await;
                        break;
                    }
                    Err(_) => {
                        for lease in leases.iter_mut() {
                            lease.log.sample(&lease.guard);
                        }
                    }
                }
            }
        }
    }

    /// The nemesis asked for the next let-go, if any (taken: it is carried out once).
    fn take_let_go(&self) -> Option<FaultKind> {
        lock(&self.ctl.let_go).take()
    }

    /// [`FaultKind::DropOnEndingRuntime`] if it was asked for the resumable lease
    /// ([`ClientCtl::drop_on_ending_runtime`], taken) and `leases` holds that lease through a
    /// guard of its own.
    fn ending_runtime_due(&self, leases: &[Lease]) -> Option<FaultKind> {
        let held = leases
            .iter()
            .any(|l| self.workload.is_resumable(&l.log.resource) && !l.twinned);
        (held
            && self
                .ctl
                .drop_on_ending_runtime
                .swap(false, Ordering::SeqCst))
        .then_some(FaultKind::DropOnEndingRuntime)
    }

    /// Which of `leases` to release and ask for again ([`ExtraFault::ReleaseFailsThenResume`]),
    /// if that was asked for (taken) and the worker holds it through a guard of its own (not
    /// lost, no twin resumed it).
    fn release_again_asked(&self, leases: &[Lease]) -> Option<usize> {
        let resource = lock(&self.ctl.release_again).take()?;
        let found = leases
            .iter()
            .position(|l| l.log.resource == resource && !l.twinned && !l.guard.is_lost());
        if found.is_none() {
            let ended = "the lease was not held as asked";
            self.recorder
                .extra(ExtraFault::ReleaseFailsThenResume, self.index, ended);
        }
        found
    }

    /// Releases `lease` (its releases refused for a moment: the release fails, and the client
    /// retries it in the background) and asks for its resource again at once, under the same
    /// lock id, as a process that retries a failed step does: the library may hand the lease
    /// back (resumed, with its token) or grant a new one. What it grants is held on for a TTL
    /// (unless lost), while another client asks for the resource: a release retried later
    /// must not end it. Returns the lease asked for again, if granted.
    async fn release_then_ask_again(&mut self, locks: &LockClient, lease: Lease) -> Option<Lease> {
        let (resource, first) = (lease.log.resource.clone(), (lease.log.id, lease.log.token));
        let kind = ExtraFault::ReleaseFailsThenResume;
        // The next four releases of this resource are refused (never run), as a mongos
        // refuses a command for a shard it cannot reach: the release and the library's repeat
        // of it, then the first try of the retry it queues and its repeat, fail; a later retry
        // lands.
        let start = Instant::now();
        let window = Duration::from_millis(2_000);
        let only = resource.clone();
        let refused = self.proxy.fault_requests(
            Requests::matching(move |c| commands::is_let_go_of(c, &only))
                .times(4)
                .until(start + window),
            RequestFault::Refuse {
                code: HOST_UNREACHABLE,
            },
        );
        let mut log = lease.log;
        log.check_lost(&lease.guard);
        log.lets_go(LetGo::Released);
        let result = ReleaseResult::of(&lease.guard.release().await);
        log.release = Some(result);
        self.recorder.holder(log);
        let (recorded, client) = (kind.recorded_as(), Some(self.index));
        self.recorder.fault(recorded, client, start, start + window);
        let result = match refused.applied() {
            0 => format!("{} (not refused)", result.name()),
            _ => result.name().to_owned(),
        };
        if self.twin_running() {
            // The slot does not ask for a resource its twin holds (see `Worker::run`).
            let ended = format!("release {result}, not asked again (a twin runs)");
            self.recorder.extra(kind, self.index, ended);
            return None;
        }
        let again = self.acquire_one(locks, resource, Mode::Exclusive).await;
        let how = match &again {
            Some(again) if again.log.token == first.1 => "resumed",
            Some(_) => "granted anew",
            None => "not granted",
        };
        let ended = format!("release {result}, asked again: {how}");
        self.recorder.extra(kind, self.index, ended);
        let mut again = again?;
        if again.log.token == first.1 {
            again.log.resumed_from = Some(first.0);
        }
        self.ctl.hold_on_until(Instant::now() + self.workload.ttl);
        Some(again)
    }

    /// Tells the injector which handle resources the worker holds now.
    fn publish(&self, leases: &[Lease]) {
        *lock(&self.ctl.held) = leases.iter().map(|l| l.log.resource.clone()).collect();
    }

    /// Lets go of `lease`: by awaiting its release, or as the nemesis says; logs it, and the
    /// nemesis with how it ended.
    async fn let_go(&mut self, lease: Lease, nemesis: Option<FaultKind>) {
        let Lease {
            guard,
            mut log,
            twinned,
        } = lease;
        log.check_lost(&guard);
        if twinned && !self.workload.release_after_resume {
            // Asked to forget it (see `Workload::release_after_resume`), as a crash would.
            log.lets_go(LetGo::Abandoned);
            std::mem::forget(guard);
            self.recorder.holder(log);
            return;
        }
        let ended = let_go_of(
            &mut self.rng,
            guard,
            std::slice::from_mut(&mut log),
            nemesis,
        )
        .await;
        if let (Some(kind), Some(ended)) = (nemesis, ended) {
            if kind == FaultKind::DropOnEndingRuntime && self.workload.is_resumable(&log.resource) {
                // The same client asks again at once under the same lock id (the slot's):
                // the release it owes must not hold that call past its timeout.
                let again = Target::Resource(log.resource.clone(), Mode::Exclusive);
                self.ctl.go_for_next(again);
            }
            let at = log.released_at.unwrap_or_else(Instant::now);
            if !matches!(
                ended,
                Ending::Released(ReleaseResult::Ok | ReleaseResult::Lost(_))
            ) {
                // Its entry may still be on the server.
                lock(&self.ctl.abandoned).push((log.resource.clone(), at));
            }
            self.recorder.nemesis(NemesisLog {
                kind,
                client: self.index,
                at,
                holder: Some(log.id),
                resource: Some(log.resource.clone()),
                ended,
            });
        }
        self.recorder.holder(log);
    }
}
