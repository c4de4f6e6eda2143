//! Keepalive cost: the commands per second one client sends to keep N leases alive.
//!
//! Only `mongolock` renews leases by itself; the other crates have no keepalive (and no
//! renew), so their rows say so.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mongolock::{LockClient, LockGuard};

use crate::measure::PerOp;
use crate::monitor::Monitor;
use crate::peers::{Lib, Result, monitored_client};

/// Acquisitions in flight while the leases are taken (on one client).
const CONCURRENCY: usize = 32;

/// What keeping the leases alive cost.
#[derive(Debug, Clone)]
pub(crate) struct Keepalive {
    /// Commands per second.
    pub(crate) per_sec: f64,
    /// Breakdown, per second.
    pub(crate) commands: PerOp,
    /// Leases lost during the window (must be 0).
    pub(crate) lost: usize,
    /// The largest renewal command (an `update` naming every lease), in bytes.
    pub(crate) command_bytes: usize,
}

/// One `LockClient` takes `leases` mutex guards with `ttl` (the keeper renews every third of
/// it, the default ratio), lets the keeper settle for a renewal period, then counts its
/// commands for `window`. `Ok(None)` for a library without keepalive.
pub(crate) async fn run(
    lib: Lib,
    uri: &str,
    leases: usize,
    ttl: Duration,
    window: Duration,
) -> Result<Option<Keepalive>> {
    if lib != Lib::Mongolock {
        return Ok(None);
    }
    let monitor = Monitor::new(lib.db());
    let client = monitored_client(lib, uri, &monitor).await?;
    let locks = LockClient::new(client.database(lib.db()).collection("locks"));
    locks.create_indexes().await?;
    let guards = take(&locks, &format!("keepalive-{leases}"), leases, ttl).await?;
    // One renewal period with no acquire in flight, so the window sees steady ticks only.
    tokio::time::sleep(ttl / 3).await;
    let before = monitor.snapshot();
    tokio::time::sleep(window).await;
    let counts = monitor.snapshot().since(&before);
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    // Released explicitly, a bounded number at a time: dropping 10,000 guards at once
    // queues 10,000 background releases on the client, and in this benchmark's runs that
    // grew the process by 2 GB and `shutdown` never returned (see docs/benchmarks.md).
    // A lease lost here is counted above; its release says so again.
    release(guards)
        .await
        .or_else(|e| if lost > 0 { Ok(()) } else { Err(e) })?;
    locks.shutdown().await;
    client.shutdown().immediate(true).await;
    let secs = window.as_secs_f64();
    Ok(Some(Keepalive {
        per_sec: counts.total() as f64 / secs,
        commands: PerOp {
            per_op: counts.total() as f64 / secs,
            breakdown: counts.describe_rate(secs),
        },
        lost,
        command_bytes: monitor.largest("update"),
    }))
}

/// Takes `n` mutex guards `{prefix}-{i}` with `ttl` on `locks`, [`CONCURRENCY`] attempts at
/// a time.
pub(crate) async fn take(
    locks: &LockClient,
    prefix: &str,
    n: usize,
    ttl: Duration,
) -> Result<Vec<LockGuard>> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY.min(n) {
        let (locks, next, prefix) = (locks.clone(), next.clone(), prefix.to_string());
        set.spawn(async move {
            let mut mine = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Result::Ok(mine);
                }
                let guard = locks
                    .mutex(format!("{prefix}-{i}"))
                    .ttl(ttl)
                    .try_acquire()
                    .await?
                    .ok_or("refused although nobody holds the lock")?;
                mine.push(guard);
            }
        });
    }
    let mut guards = Vec::with_capacity(n);
    while let Some(joined) = set.join_next().await {
        guards.extend(joined??);
    }
    Ok(guards)
}

/// Releases `guards`, [`CONCURRENCY`] at a time.
pub(crate) async fn release(guards: Vec<LockGuard>) -> Result<()> {
    let queue = Arc::new(std::sync::Mutex::new(guards));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let queue = queue.clone();
        set.spawn(async move {
            loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop();
                match next {
                    Some(guard) => guard.release().await?,
                    None => return Result::Ok(()),
                }
            }
        });
    }
    while let Some(joined) = set.join_next().await {
        joined??;
    }
    Ok(())
}
