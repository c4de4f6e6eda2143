//! The workloads: K clients, each in a thread of its own with a current-thread runtime (so
//! one can be paused or killed alone), each with its own [`LockClient`] whose driver client
//! goes through its own [`FaultProxy`] and names itself (`appName`) for fail points.
//!
//! A client runs one worker: it picks a resource (a mutex or a semaphore), acquires it with
//! `acquire_timeout`, then does a few steps of work. Before each step it checks
//! `guard.is_lost()` and stops when lost; each step writes `(token, value)` to the guarded
//! record, then works for a while, racing the work against `guard.lost()` and sampling the
//! local deadline. Then it releases. Everything goes to the holder's [`HolderLog`].
//!
//! Pauses and kills are asked for through [`ClientCtl`] and carried out by the worker
//! itself at its next step: a pause is a `std::thread::sleep` that stops the whole runtime
//! (the worker, its keeper, its driver), a kill forgets the guard (`mem::forget`, no
//! release) and ends the thread, dropping the runtime and with it the keeper.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mongolock::{LockClient, LockGuard};
use mongolock_testkit::FaultProxy;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::{HolderLog, LossKind, Mode, PauseLog, Recorder};

/// The database and collection every client locks in.
pub const DB: &str = "harness";
/// See [`DB`].
pub const COLLECTION: &str = "locks";

/// The shape of a workload.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Number of clients.
    pub clients: usize,
    /// The lease TTL of every guard.
    pub ttl: Duration,
    /// How long an acquire waits at most.
    pub acquire_timeout: Duration,
    /// The resources and how they are locked.
    pub resources: Vec<(String, Mode)>,
    /// Steps of work per holder (inclusive range).
    pub steps: (u32, u32),
    /// Length of one step, in milliseconds (inclusive range).
    pub step_ms: (u64, u64),
}

impl Workload {
    /// Two mutexes and one semaphore with two permits, five clients, TTL 1.5 s.
    pub fn standard() -> Self {
        Workload {
            clients: 5,
            ttl: Duration::from_millis(1_500),
            acquire_timeout: Duration::from_secs(3),
            resources: vec![
                ("m0".into(), Mode::Exclusive),
                ("m1".into(), Mode::Exclusive),
                ("s0".into(), Mode::Shared { permits: 2 }),
            ],
            steps: (2, 5),
            step_ms: (40, 200),
        }
    }

    /// The mode of each resource.
    pub fn modes(&self) -> HashMap<String, Mode> {
        self.resources.iter().cloned().collect()
    }
}

/// What the harness asks of one client; the worker reads it at every step.
#[derive(Debug, Default)]
pub struct ClientCtl {
    /// Pause the whole client for this many milliseconds at the next step (0: none).
    pub pause_ms: AtomicU64,
    /// Die at the next step, without releasing.
    pub kill: AtomicBool,
    /// Finish the current holder (release) and stop.
    pub stop: AtomicBool,
    /// Set while the worker holds a guard (faults prefer holders).
    pub holding: AtomicBool,
}

/// How a worker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Asked to stop: released what it held.
    Stopped,
    /// Killed: what it held was never released.
    Killed,
}

/// One client slot: its proxy, its controls, its thread.
#[derive(Debug)]
pub struct Slot {
    /// The slot's index (the client's number).
    pub index: usize,
    /// The `appName` its driver client sends.
    pub app_name: String,
    /// Its fault proxy.
    pub proxy: Arc<FaultProxy>,
    /// The controls of its current incarnation.
    pub ctl: Arc<ClientCtl>,
    /// When it was last killed, if it is dead and not restarted yet.
    pub killed_at: Option<Instant>,
    incarnation: u64,
    thread: Option<JoinHandle<Exit>>,
}

impl Slot {
    /// True if the client's thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
}

/// All the clients of a run.
#[derive(Debug)]
pub struct Fleet {
    /// The client slots.
    pub slots: Vec<Slot>,
    workload: Workload,
    recorder: Recorder,
    seed: u64,
}

impl Fleet {
    /// Starts one proxy per client in front of `server` and a worker thread per client.
    ///
    /// # Errors
    /// A proxy could not bind.
    pub async fn start(
        server: std::net::SocketAddr,
        workload: &Workload,
        recorder: &Recorder,
        seed: u64,
    ) -> std::io::Result<Fleet> {
        let mut slots = Vec::new();
        for index in 0..workload.clients {
            let proxy = Arc::new(FaultProxy::start(server).await?);
            slots.push(Slot {
                index,
                app_name: format!("harness-client-{index}"),
                proxy,
                ctl: Arc::new(ClientCtl::default()),
                killed_at: None,
                incarnation: 0,
                thread: None,
            });
        }
        let mut fleet = Fleet {
            slots,
            workload: workload.clone(),
            recorder: recorder.clone(),
            seed,
        };
        for index in 0..fleet.slots.len() {
            fleet.spawn(index);
        }
        Ok(fleet)
    }

    fn spawn(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        slot.incarnation += 1;
        slot.ctl = Arc::new(ClientCtl::default());
        slot.killed_at = None;
        let mut options = slot.proxy.client_options();
        options.app_name = Some(slot.app_name.clone());
        let worker = Worker {
            index,
            incarnation: slot.incarnation,
            ctl: slot.ctl.clone(),
            workload: self.workload.clone(),
            recorder: self.recorder.clone(),
            rng: StdRng::seed_from_u64(
                self.seed
                    ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ slot.incarnation.wrapping_mul(0xD1B5_4A32_D192_ED03),
            ),
        };
        slot.thread = Some(std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let client = mongodb::Client::with_options(options).expect("valid options");
                let locks = LockClient::new(client.database(DB).collection(COLLECTION));
                let exit = worker.run(&locks).await;
                if exit == Exit::Stopped {
                    locks.shutdown().await;
                }
                exit
            })
            // Dropping the runtime here ends the keeper and the driver's tasks: a killed
            // client renews nothing and releases nothing.
        }));
    }

    /// True if `owner` (a status entry's owner label) names a client incarnation that is
    /// still running.
    pub fn is_live_owner(&self, owner: &str) -> bool {
        self.slots.iter().any(|s| {
            owner == owner_label(s.index, s.incarnation)
                && s.killed_at.is_none()
                && !s.is_finished()
        })
    }

    /// Asks client `index` to pause for `pause` at its next step.
    pub fn pause(&self, index: usize, pause: Duration) {
        let ms = pause.as_millis() as u64;
        self.slots[index].ctl.pause_ms.store(ms, Ordering::SeqCst);
    }

    /// Asks client `index` to die at its next step, without releasing.
    pub fn kill(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        slot.ctl.kill.store(true, Ordering::SeqCst);
        slot.killed_at = Some(Instant::now());
    }

    /// Restarts killed clients whose thread has ended at least `after` ago.
    pub fn restart_dead(&mut self, after: Duration) {
        for index in 0..self.slots.len() {
            let slot = &self.slots[index];
            if slot.killed_at.is_some_and(|t| t.elapsed() >= after) && slot.is_finished() {
                if let Some(thread) = self.slots[index].thread.take() {
                    let _ = thread.join();
                }
                self.spawn(index);
            }
        }
    }

    /// Cancels pending pauses and kills.
    pub fn calm(&mut self) {
        for slot in &mut self.slots {
            slot.ctl.pause_ms.store(0, Ordering::SeqCst);
            if slot.ctl.kill.swap(false, Ordering::SeqCst) {
                slot.killed_at = None;
            }
        }
    }

    /// Asks every client to stop and waits up to `limit` for all of them; returns the
    /// indices of the clients that did not stop in time.
    pub async fn stop(&mut self, limit: Duration) -> Vec<usize> {
        for slot in &self.slots {
            slot.ctl.stop.store(true, Ordering::SeqCst);
        }
        let until = Instant::now() + limit;
        while Instant::now() < until && !self.slots.iter().all(Slot::is_finished) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut late = Vec::new();
        for slot in &mut self.slots {
            if slot.is_finished() {
                if let Some(thread) = slot.thread.take() {
                    let _ = thread.join();
                }
            } else {
                late.push(slot.index);
            }
        }
        late
    }
}

/// The owner label a client incarnation's locks carry.
fn owner_label(index: usize, incarnation: u64) -> String {
    format!("client-{index}.{incarnation}")
}

/// One client's worker.
struct Worker {
    index: usize,
    incarnation: u64,
    ctl: Arc<ClientCtl>,
    workload: Workload,
    recorder: Recorder,
    rng: StdRng,
}

/// How one holding ended.
enum Held {
    Done,
    Killed,
}

impl Worker {
    async fn run(mut self, locks: &LockClient) -> Exit {
        loop {
            if self.ctl.stop.load(Ordering::SeqCst) {
                return Exit::Stopped;
            }
            let pick = self.rng.random_range(0..self.workload.resources.len());
            let (resource, mode) = self.workload.resources[pick].clone();
            let ttl = self.workload.ttl;
            let timeout = self.workload.acquire_timeout;
            let invoked_at = Instant::now();
            let owner = owner_label(self.index, self.incarnation);
            let got = match mode {
                Mode::Exclusive => {
                    let mutex = locks.mutex(&resource).ttl(ttl).owner(owner);
                    mutex.acquire_timeout(timeout).await
                }
                Mode::Shared { permits } => {
                    let semaphore = locks.semaphore(&resource, permits).ttl(ttl).owner(owner);
                    semaphore.acquire_timeout(timeout).await
                }
            };
            self.recorder
                .attempt(matches!(got, Ok(None)), got.as_ref().is_err_and(|_| true));
            match got {
                Ok(Some(guard)) => {
                    if let Held::Killed = self.hold(guard, mode, invoked_at).await {
                        return Exit::Killed;
                    }
                }
                Ok(None) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
            let idle = self.rng.random_range(0..30);
            tokio::time::sleep(Duration::from_millis(idle)).await;
        }
    }

    /// Stops the whole client (this thread, hence its runtime) if a pause was asked for;
    /// returns the pause's start and end.
    fn take_pause(&self) -> Option<(Instant, Instant)> {
        let ms = self.ctl.pause_ms.swap(0, Ordering::SeqCst);
        if ms == 0 {
            return None;
        }
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(ms));
        Some((start, Instant::now()))
    }

    async fn hold(&mut self, guard: LockGuard, mode: Mode, invoked_at: Instant) -> Held {
        let id = self.recorder.next_id();
        let mut log = HolderLog::new(id, self.index, mode, invoked_at, &guard);
        self.ctl.holding.store(true, Ordering::SeqCst);
        let held = self.steps(guard, &mut log, mode).await;
        self.ctl.holding.store(false, Ordering::SeqCst);
        self.recorder.holder(log);
        held
    }

    /// The steps of work under `guard`, then the release (or the death).
    async fn steps(&mut self, guard: LockGuard, log: &mut HolderLog, mode: Mode) -> Held {
        let id = log.id;
        let steps = self
            .rng
            .random_range(self.workload.steps.0..=self.workload.steps.1);
        'steps: for _ in 0..steps {
            // The faults that hit this holder's process.
            if !guard.is_lost() {
                log.sample(&guard);
                let deadline_before = log.max_deadline.unwrap_or_else(Instant::now);
                if let Some((start, end)) = self.take_pause() {
                    log.pauses.push(PauseLog {
                        start,
                        end,
                        deadline_before,
                        lost_on_resume: guard.is_lost(),
                    });
                }
            }
            if self.ctl.kill.swap(false, Ordering::SeqCst) {
                log.killed_at = Some(Instant::now());
                std::mem::forget(guard);
                return Held::Killed;
            }
            // Check, then write at once: nothing else runs in between.
            if log.check_lost(&guard) {
                break;
            }
            let value = self.rng.random::<u64>();
            let (at, accepted) =
                self.recorder
                    .record
                    .write(&log.resource, mode, id, log.token, value);
            log.writes.push(crate::history::WriteLog {
                at,
                token: log.token,
                value,
                accepted,
            });
            // Work, watching for the loss and sampling the deadline.
            let length = self
                .rng
                .random_range(self.workload.step_ms.0..=self.workload.step_ms.1);
            let step_end = Instant::now() + Duration::from_millis(length);
            loop {
                let now = Instant::now();
                if now >= step_end {
                    break;
                }
                let tick = (step_end - now).min(Duration::from_millis(10));
                match tokio::time::timeout(tick, guard.lost()).await {
                    Ok(reason) => {
                        log.notice(Instant::now(), LossKind::from(reason));
                        break 'steps;
                    }
                    Err(_) => log.sample(&guard),
                }
            }
            if self.ctl.stop.load(Ordering::SeqCst) {
                break;
            }
        }
        log.check_lost(&guard);
        log.released_at = Some(Instant::now());
        let released = guard.release().await;
        log.release_ok = Some(released.is_ok());
        Held::Done
    }
}
