//! The first measurements: commands per operation, uncontended latency, handoff latency;
//! and the settings of every measurement.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::monitor::{Counts, Monitor};
use crate::peers::{Lib, Peer, Result};

/// A measurement's figure, or what went wrong (for the tables).
pub(crate) type Outcome<T> = std::result::Result<T, String>;

/// How much of everything to do.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Uncontended acquire + release iterations measured (after a few warm-up ones).
    pub(crate) iterations: usize,
    /// Failed attempts counted.
    pub(crate) failed_attempts: usize,
    /// Waiter counts for the handoff measurement, each with the handoffs measured.
    pub(crate) handoffs: Vec<(usize, usize)>,
    /// Whether the peers are measured on the three-member set too (mongolock always is).
    pub(crate) peers_on_three_members: bool,
    /// Group sizes for renew.
    pub(crate) renew_sizes: Vec<usize>,
    /// How long each holder keeps the lock in the handoff measurement: uniformly at random
    /// in this range, so that releases fall at random phases of the pollers' cycles.
    pub(crate) hold: std::ops::Range<Duration>,
    /// How long the first holder keeps the lock while the waiters start.
    pub(crate) startup: Duration,
    /// Limit for one handoff run.
    pub(crate) handoff_limit: Duration,
    /// Limit for any other single measurement.
    pub(crate) limit: Duration,
    /// How long each throughput run lasts.
    pub(crate) throughput_for: Duration,
    /// Tasks in the throughput runs (on as many resources, and on one).
    pub(crate) throughput_tasks: usize,
    /// Waiters in the server-load measurement.
    pub(crate) load_waiters: usize,
    /// How long the lock is held (and the waiters' commands counted) in the server-load
    /// measurement.
    pub(crate) load_window: Duration,
    /// Numbers of leases kept alive in the keepalive measurement.
    pub(crate) keepalive_leases: Vec<usize>,
    /// The TTL of the kept leases.
    pub(crate) keepalive_ttl: Duration,
    /// How long the keepalive commands are counted.
    pub(crate) keepalive_window: Duration,
    /// Group sizes for the group operations.
    pub(crate) group_sizes: Vec<usize>,
    /// Leases held, and waiters waiting, in the memory measurement.
    pub(crate) memory_leases: usize,
    pub(crate) memory_waiters: usize,
    /// The server-modes scenario (`--server-modes`).
    pub(crate) modes: ModeSettings,
}

/// How much the server-modes scenario (`crate::modes`) does.
#[derive(Debug, Clone)]
pub(crate) struct ModeSettings {
    /// Waiter counts, each with the handoffs measured.
    pub(crate) handoffs: Vec<(usize, usize)>,
    /// How long each holder keeps the lock (uniformly at random in this range).
    pub(crate) hold: std::ops::Range<Duration>,
    /// Leases the keeper holds.
    pub(crate) leases: usize,
    /// Their TTL (renewed every third of it).
    pub(crate) ttl: Duration,
    /// How long the keeper's commands and both clients' events are counted.
    pub(crate) window: Duration,
    /// Both modes at once (the quick run's), rather than one after the other.
    pub(crate) concurrent: bool,
}

/// Warm-up iterations before the uncontended measurement (connections, first documents).
const WARMUP: usize = 5;

/// Commands per operation: total, and the breakdown by command name.
#[derive(Debug, Clone)]
pub(crate) struct PerOp {
    /// Commands per operation.
    pub(crate) per_op: f64,
    /// `1 findAndModify + 1 delete`.
    pub(crate) breakdown: String,
}

impl PerOp {
    pub(crate) fn new(counts: &Counts, ops: u64) -> PerOp {
        PerOp {
            per_op: counts.total() as f64 / ops as f64,
            breakdown: counts.describe(ops),
        }
    }
}

/// p50 and p99 of a set of durations, and how many there were.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Percentiles {
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) n: usize,
}

impl Percentiles {
    /// Nearest-rank percentiles.
    pub(crate) fn of(mut samples: Vec<Duration>) -> Option<Percentiles> {
        if samples.is_empty() {
            return None;
        }
        samples.sort();
        let rank = |p: f64| {
            let r = (p * samples.len() as f64).ceil() as usize;
            samples[r.clamp(1, samples.len()) - 1]
        };
        Some(Percentiles {
            p50: rank(0.50),
            p99: rank(0.99),
            n: samples.len(),
        })
    }
}

/// The uncontended acquire + release: latency and commands.
#[derive(Debug, Clone)]
pub(crate) struct Uncontended {
    pub(crate) latency: Percentiles,
    pub(crate) commands: PerOp,
}

/// One handoff run.
#[derive(Debug, Clone)]
pub(crate) struct Handoff {
    pub(crate) latency: Percentiles,
    /// Commands sent by all participants per handoff, in steady state.
    pub(crate) commands: PerOp,
}

/// Runs the uncontended, refused-attempt and renew measurements for `lib` against the
/// server at `uri`.
pub(crate) async fn basics(lib: Lib, uri: &str, s: &Settings) -> Basics {
    let uncontended = uncontended(lib, uri, s).await.map_err(|e| e.to_string());
    eprintln!("   uncontended: {}", brief(&uncontended));
    let failed = failed_attempt(lib, uri, s).await.map_err(|e| e.to_string());
    eprintln!("   failed attempt: {}", brief(&failed));
    let mut renew = Vec::new();
    for &k in &s.renew_sizes {
        let r = renew_group(lib, uri, k).await.map_err(|e| e.to_string());
        renew.push((k, r));
    }
    Basics {
        uncontended,
        failed,
        renew,
    }
}

/// The uncontended, refused-attempt and renew figures of one library. `Err` holds what
/// went wrong, for the tables.
pub(crate) struct Basics {
    pub(crate) uncontended: std::result::Result<Uncontended, String>,
    pub(crate) failed: std::result::Result<PerOp, String>,
    /// Per group size: `Ok(None)` when the library cannot renew.
    pub(crate) renew: Vec<(usize, std::result::Result<Option<u64>, String>)>,
}

/// Handoffs with each waiter count of the settings, against the server at `uri`.
pub(crate) async fn handoff_series(
    lib: Lib,
    uri: &str,
    s: &Settings,
    topology: &str,
) -> Vec<(usize, std::result::Result<Handoff, String>)> {
    let mut out = Vec::new();
    for &(w, count) in &s.handoffs {
        let r = match tokio::time::timeout(s.handoff_limit, handoffs(lib, uri, w, count, s)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("did not finish within {:?}", s.handoff_limit)),
        };
        let r = match r {
            Ok(h) if h.latency.n < count => {
                Err(format!("only {} of {count} handoffs measured", h.latency.n))
            }
            other => other,
        };
        eprintln!("   handoff ({topology}), {w} waiter(s): {}", brief(&r));
        out.push((w, r));
    }
    out
}

pub(crate) fn brief<T: std::fmt::Debug>(r: &std::result::Result<T, String>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("ERROR {e}"),
    }
}

pub(crate) async fn uncontended(lib: Lib, uri: &str, s: &Settings) -> Result<Uncontended> {
    let monitor = Monitor::new(lib.db());
    let peer = Peer::connect(lib, uri, &monitor).await?;
    peer.prepare().await?;
    let resource = "uncontended";
    let mut samples = Vec::with_capacity(s.iterations);
    let mut before = monitor.snapshot();
    for i in 0..WARMUP + s.iterations {
        if i == WARMUP {
            before = monitor.snapshot();
        }
        let start = Instant::now();
        let held = peer
            .try_acquire(resource)
            .await?
            .ok_or("refused although nobody holds the lock")?;
        peer.release(held).await?;
        if i >= WARMUP {
            samples.push(start.elapsed());
        }
    }
    let counts = monitor.snapshot().since(&before);
    peer.close().await;
    Ok(Uncontended {
        latency: Percentiles::of(samples).ok_or("no samples")?,
        commands: PerOp::new(&counts, s.iterations as u64),
    })
}

async fn failed_attempt(lib: Lib, uri: &str, s: &Settings) -> Result<PerOp> {
    let holder = Peer::connect(lib, uri, &Monitor::new(lib.db())).await?;
    let monitor = Monitor::new(lib.db());
    let contender = Peer::connect(lib, uri, &monitor).await?;
    let resource = "held-by-another";
    let held = holder
        .try_acquire(resource)
        .await?
        .ok_or("refused although nobody holds the lock")?;
    // One refused attempt first: the contender's connection and any first-use setup.
    if contender.try_acquire(resource).await?.is_some() {
        return Err("granted a lock held by another".into());
    }
    let before = monitor.snapshot();
    for _ in 0..s.failed_attempts {
        if contender.try_acquire(resource).await?.is_some() {
            return Err("granted a lock held by another".into());
        }
    }
    let counts = monitor.snapshot().since(&before);
    holder.release(held).await?;
    contender.close().await;
    holder.close().await;
    Ok(PerOp::new(&counts, s.failed_attempts as u64))
}

async fn renew_group(lib: Lib, uri: &str, k: usize) -> Result<Option<u64>> {
    if !lib.can_renew() {
        return Ok(None);
    }
    let peer = Peer::connect(lib, uri, &Monitor::new(lib.db())).await?;
    let sent = peer.renew_group(k, "bench").await?;
    peer.close().await;
    Ok(sent)
}

/// State shared by the participants of one handoff run.
struct Shared {
    /// When the current holder called release.
    released_at: Mutex<Option<Instant>>,
    samples: Mutex<Vec<Duration>>,
    /// Each participant's commands at the first release and at the last measured handoff.
    first: Mutex<Option<Vec<Counts>>>,
    last: Mutex<Option<Vec<Counts>>>,
    stop: AtomicBool,
    target: usize,
    /// One per participant (each has its own client).
    monitors: Vec<Monitor>,
    /// Counts acquisitions, so that a releaser queues again only once another has the lock.
    acquisitions: watch::Sender<u64>,
}

/// `waiters + 1` participants, each with its own client, pass one lock around: each holds it
/// for `hold`, notes the time, releases, and queues again once another participant holds
/// the lock (so that it never takes the lock straight back: the handoff is always to a
/// waiter, and `waiters` are always waiting). A handoff is the time from that note to the
/// moment the next holder's acquire returns.
async fn handoffs(
    lib: Lib,
    uri: &str,
    waiters: usize,
    count: usize,
    s: &Settings,
) -> Result<Handoff> {
    Ok(handoffs_by_client(lib, uri, waiters, count, s)
        .await?
        .handoff)
}

/// A handoff run, with what each participant's client sent and received.
pub(crate) struct HandoffByClient {
    pub(crate) handoff: Handoff,
    /// Per participant, in steady state: its commands, and under
    /// [`crate::monitor::EVENTS`] the change events it received.
    pub(crate) clients: Vec<Counts>,
    /// All participants together.
    pub(crate) total: Counts,
}

/// [`handoffs`], each participant's client with a monitor of its own.
pub(crate) async fn handoffs_by_client(
    lib: Lib,
    uri: &str,
    waiters: usize,
    count: usize,
    s: &Settings,
) -> Result<HandoffByClient> {
    let monitors: Vec<Monitor> = (0..=waiters).map(|_| Monitor::new(lib.db())).collect();
    let mut peers = Vec::new();
    for monitor in &monitors {
        peers.push(Arc::new(Peer::connect(lib, uri, monitor).await?));
    }
    // Indexes first (a unique index is what makes `mongodb-lock` exclusive), on this server.
    peers[0].prepare().await?;
    let resource = format!("handoff-{waiters}");
    let shared = Arc::new(Shared {
        released_at: Mutex::new(None),
        samples: Mutex::new(Vec::with_capacity(count)),
        first: Mutex::new(None),
        last: Mutex::new(None),
        stop: AtomicBool::new(false),
        target: count,
        monitors,
        acquisitions: watch::channel(0).0,
    });
    let (started_tx, started_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, peer) in peers.iter().enumerate() {
        let (peer, shared, resource) = (peer.clone(), shared.clone(), resource.clone());
        let (started_tx, mut started_rx) = (started_tx.clone(), started_rx.clone());
        let (hold, startup) = (s.hold.clone(), s.startup);
        tasks.spawn(async move {
            if i == 0 {
                let held = peer.acquire(&resource).await?;
                shared.acquisitions.send_modify(|n| *n += 1);
                let _ = started_tx.send(true);
                // Let every waiter start waiting (and make its first refused attempt).
                tokio::time::sleep(startup).await;
                *lock(&shared.first) = Some(shared.snapshot());
                *lock(&shared.released_at) = Some(Instant::now());
                peer.release(held).await?;
                let mut acquisitions = shared.acquisitions.subscribe();
                let _ = acquisitions.wait_for(|n| *n > 1).await;
            } else {
                let _ = started_rx.wait_for(|s| *s).await;
            }
            participant(&peer, &resource, &shared, hold).await
        });
    }
    drop(started_tx);
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    for peer in peers {
        if let Ok(peer) = Arc::try_unwrap(peer) {
            peer.close().await;
        }
    }
    let samples = std::mem::take(&mut *lock(&shared.samples));
    let n = samples.len() as u64;
    let (first, last) = (lock(&shared.first).clone(), lock(&shared.last).clone());
    let clients: Vec<Counts> = match (first, last) {
        (Some(a), Some(b)) => b.iter().zip(&a).map(|(b, a)| b.since(a)).collect(),
        _ => return Err("no handoff measured".into()),
    };
    let total = Counts::sum(&clients);
    Ok(HandoffByClient {
        handoff: Handoff {
            latency: Percentiles::of(samples).ok_or("no samples")?,
            commands: PerOp::new(&total, n),
        },
        clients,
        total,
    })
}

impl Shared {
    /// Every participant's commands so far.
    fn snapshot(&self) -> Vec<Counts> {
        self.monitors.iter().map(Monitor::snapshot).collect()
    }
}

async fn participant(
    peer: &Peer,
    resource: &str,
    shared: &Shared,
    hold: std::ops::Range<Duration>,
) -> Result<()> {
    loop {
        let held = peer.acquire(resource).await?;
        let now = Instant::now();
        let mut generation = 0;
        shared.acquisitions.send_modify(|n| {
            *n += 1;
            generation = *n;
        });
        if let Some(released) = lock(&shared.released_at).take()
            && !shared.stop.load(Ordering::SeqCst)
        {
            let mut samples = lock(&shared.samples);
            samples.push(now - released);
            if samples.len() >= shared.target {
                *lock(&shared.last) = Some(shared.snapshot());
                shared.stop.store(true, Ordering::SeqCst);
            }
        }
        if shared.stop.load(Ordering::SeqCst) {
            // Pass the lock on so that the other waiters see the stop too.
            peer.release(held).await?;
            return Ok(());
        }
        let pause = rand::random_range(hold.start.as_micros()..hold.end.as_micros());
        tokio::time::sleep(Duration::from_micros(pause as u64)).await;
        *lock(&shared.released_at) = Some(Instant::now());
        peer.release(held).await?;
        let mut acquisitions = shared.acquisitions.subscribe();
        let _ = acquisitions.wait_for(|n| *n > generation).await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn nearest_rank_percentiles() {
        let p = Percentiles::of(ms(&(1..=100).rev().collect::<Vec<_>>())).unwrap();
        assert_eq!(p.p50, Duration::from_millis(50));
        assert_eq!(p.p99, Duration::from_millis(99));
        assert_eq!(p.n, 100);
        let one = Percentiles::of(ms(&[7])).unwrap();
        assert_eq!(
            (one.p50, one.p99),
            (Duration::from_millis(7), Duration::from_millis(7))
        );
        assert!(Percentiles::of(Vec::new()).is_none());
    }
}
