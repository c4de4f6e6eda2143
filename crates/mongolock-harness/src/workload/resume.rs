//! Resuming a lease under a lock id fixed per client slot ([`Workload::resumable`]).
//!
//! A holder of a resumable resource holds it under `resume-{index}`, the same lock id in
//! every incarnation of its client slot. Two ways make another client ask for it with that
//! lock id while the lease still lives:
//!
//! - **after a kill**: a client killed while it held one (the guard forgotten, its runtime
//!   and keeper dropped: nothing released) is restarted about 300 ms later, within the TTL,
//!   and its new incarnation goes for that resource first: the library hands it the lease
//!   back with the same fencing token;
//! - **beside a pause**: when a pause hits a holder of one, in some cases it is shortened to
//!   0.35–0.6 × TTL (so that the old incarnation wakes with its lease still live by its own
//!   clock) and a *twin* starts in a thread and runtime of its own, with its own driver
//!   client through the same proxy, and acquires the resource with the same lock id and TTL:
//!   it resumes the lease, the entry names the twin's keeper, and the paused incarnation
//!   must learn at its next renewal that it lost the lease (revoked; or by its deadline),
//!   while the twin writes under the same token for at least the TTL (+ 300 ms) and
//!   releases. It must not release sooner, not even when it learns early that it lost the
//!   lease (its deadline counts from what the server had left when it asked): its release
//!   ends the lease the paused incarnation may still believe in until its next renewal or
//!   its local deadline, and the next holder would then overlap it (a lock id belongs to one
//!   live holder; the harness plays a restarted process that keeps the lease it resumed).
//!
//! The paused incarnation, once it lets go of the lease, releases its guard as any holder
//! does ([`Workload::release_after_resume`], the default; off, it forgets it): that release
//! must remove nothing the twin holds now. The twin in the end releases the lease too (or,
//! with that option off, dies without releasing, and the lease runs out). While the twin
//! runs, its slot does not ask for the resource: it would resume the twin's lease, and
//! releasing it early (a nemesis on the release) would free the resource under the twin,
//! which believes until its next renewal (seed 21 showed it, as (1) and (3) violations). A
//! lease gets one twin at most.
//!
//! Each resumed grant is logged as a holder of its own, with the same lock id and token as
//! the incarnation it continues ([`HolderLog::resumed_from`]); the checker judges the pair
//! by (10) (`crate::check::Check::Resume`) and lets (1)–(3) treat it as one lease.
//!
//! [`Workload::resumable`]: super::Workload::resumable
//! [`Workload::release_after_resume`]: super::Workload::release_after_resume

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mongolock::LockClient;
use rand::Rng;

use super::hold::{Lease, resume_lock_id as lock_id};
use super::{COLLECTION, DB, Worker, lock, owner_label};
use crate::history::{
    self, FromLibrary, GuardLog, HolderLog, LetGo, Mode, Recorder, ReleaseResult,
};

/// The chance that a pause of a resumable holder comes with a twin.
const TWIN_SHARE: f64 = 0.6;

/// The chance, at each step of a holder of a resumable lease or of one with a lock-delay
/// while faults are injected, that its client kills itself (and another that it pauses):
/// the nemeses alone hit such holders too rarely in a short run.
const SELF_INFLICTED: f64 = 0.1;

/// How long past the TTL after its grant a twin holds on (see [`Twin::run`]).
const HOLD_PAST_TTL: Duration = Duration::from_millis(300);

/// What a twin needs: whose lease it resumes and how.
struct Twin {
    options: mongodb::options::ClientOptions,
    recorder: Recorder,
    index: usize,
    owner: String,
    resource: String,
    ttl: Duration,
    timeout: Duration,
    /// The paused incarnation's log id and token.
    predecessor: (u64, i64),
    steps: u32,
    /// Release at the end ([`Workload::release_after_resume`]); else forget the guard.
    ///
    /// [`Workload::release_after_resume`]: super::Workload::release_after_resume
    release: bool,
}

impl Worker {
    /// While faults are injected, a holder of a resumable lease, or of one with a
    /// lock-delay, sometimes kills its own client (at once, as the kill nemesis does:
    /// nothing released; the fleet restarts it, and the new incarnation resumes a resumable
    /// lease), or asks for a pause: of half the TTL with a twin ([`Worker::twin_for_pause`])
    /// beside a resumable lease, else of 1.1–1.6 × TTL (the lease runs out unreleased, and
    /// its lock-delay must keep the next holder out).
    pub(super) fn crash_or_twin(&mut self, leases: &[Lease]) {
        let live = |l: &&Lease| !l.guard.is_lost();
        let resumable =
            (leases.iter().filter(live)).any(|l| self.workload.is_resumable(&l.log.resource));
        let delayed = (leases.iter().filter(live))
            .any(|l| self.workload.lock_delay(&l.log.resource).is_some());
        if !(resumable || delayed)
            || self.recorder.is_healed()
            || self.ctl.calmed.load(Ordering::SeqCst)
            || self.ctl.pause_ms.load(Ordering::SeqCst) != 0
        {
            return;
        }
        let roll: f64 = self.rng.random();
        if roll < SELF_INFLICTED {
            self.ctl.crashed.store(true, Ordering::SeqCst);
            self.ctl.kill.store(true, Ordering::SeqCst);
        } else if roll < 2.0 * SELF_INFLICTED {
            // Beside a resumable lease, half the TTL with a twin; else past the TTL, so that
            // the lease runs out and its lock-delay begins.
            let pause = if resumable {
                self.twin = true;
                self.workload.ttl / 2
            } else {
                self.workload.ttl.mul_f64(self.rng.random_range(1.1..1.6))
            };
            self.ctl
                .pause_ms
                .store(pause.as_millis() as u64, Ordering::SeqCst);
        }
    }

    /// If a pause is asked for while the worker holds a resumable lease, sometimes shortens
    /// it and starts a twin that resumes that lease while the worker is paused.
    pub(super) fn twin_for_pause(&mut self, leases: &mut [Lease]) {
        if self.ctl.pause_ms.load(Ordering::SeqCst) == 0 {
            return;
        }
        let Some(lease) = leases.iter_mut().find(|l| {
            // One twin per lease: a second would supersede the first, whose let-go
            // would then end the second's lease (see `Workload::release_after_resume`).
            self.workload.is_resumable(&l.log.resource) && !l.guard.is_lost() && !l.twinned
        }) else {
            return;
        };
        if !std::mem::take(&mut self.twin) && !self.rng.random_bool(TWIN_SHARE) {
            return;
        }
        lease.twinned = true;
        let pause = self.workload.ttl.mul_f64(self.rng.random_range(0.35..0.6));
        self.ctl
            .pause_ms
            .store(pause.as_millis() as u64, Ordering::SeqCst);
        let twin = Twin {
            options: self.options.clone(),
            recorder: self.recorder.clone(),
            index: self.index,
            owner: owner_label(self.index, self.incarnation),
            resource: lease.log.resource.clone(),
            ttl: self.workload.ttl,
            timeout: self.workload.acquire_timeout,
            predecessor: (lease.log.id, lease.log.token),
            steps: self.rng.random_range(2..=4),
            release: self.workload.release_after_resume,
        };
        let handle = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(twin.run());
        });
        lock(&self.ctl.twins).push(handle);
    }
}

impl Twin {
    /// Acquires the resource under the slot's lock id, holds it for a few steps of about
    /// 120 ms and at least the TTL (+ 300 ms) (writing under it, watching for its loss),
    /// then releases it, or, unless [`Twin::release`], dies without releasing; logs it.
    async fn run(self) {
        let Ok(client) = mongodb::Client::with_options(self.options.clone()) else {
            return;
        };
        let locks = LockClient::new(client.database(DB).collection(COLLECTION));
        let invoked_at = Instant::now();
        let mutex = (locks.mutex(&self.resource).ttl(self.ttl))
            .owner(self.owner.clone())
            .lock_id(lock_id(self.index));
        let got = mutex.acquire_timeout(self.timeout).await;
        self.recorder
            .attempt(matches!(got, Ok(None)), got.as_ref().is_err());
        if let Ok(Some(guard)) = got {
            let mut log = HolderLog::new(
                self.recorder.next_id(),
                self.index,
                Mode::Exclusive,
                invoked_at,
                &guard,
            );
            if log.token == self.predecessor.1 {
                log.resumed_from = Some(self.predecessor.0);
            }
            // It holds on until the incarnation it resumed has surely stopped believing (its
            // local deadline, at most a TTL after its last renewal, has passed): a release
            // before that would free the resource under a holder that still believes it
            // holds, which no library can prevent (a lock id belongs to one live holder).
            let hold_until = Instant::now() + self.ttl + HOLD_PAST_TTL;
            let mut step = 0;
            while step < self.steps || Instant::now() < hold_until {
                step += 1;
                let step_end = Instant::now() + Duration::from_millis(120);
                if history::work_step(&mut log, &guard, &self.recorder.record, step_end).await {
                    break;
                }
            }
            log.check_lost(&guard);
            // A twin that learnt early that it lost the lease (its renewals failed while its
            // deadline, counted from the server's time left when it asked, came before the
            // paused incarnation's) still waits until then: its release, even a late one,
            // frees the resource at once, under an incarnation that may still believe.
            tokio::time::sleep_until(tokio::time::Instant::from_std(hold_until)).await;
            if !self.release {
                // Asked to forget it (`Workload::release_after_resume` off): it dies, as a
                // killed client does (the runtime dropped with the keeper), and the lease
                // runs out or is resumed again.
                log.lets_go(LetGo::Abandoned);
                std::mem::forget(guard);
                self.recorder.holder(log);
                return;
            }
            log.lets_go(LetGo::Released);
            log.release = Some(ReleaseResult::of(&guard.release().await));
            self.recorder.holder(log);
        }
        locks.shutdown().await;
    }
}
