//! Client memory per held lease and per waiter, from a counting global allocator.
//!
//! The binary's global allocator is `stats_alloc`'s wrapper of the system allocator, which
//! counts the bytes allocated and freed. The emulator runs in a child process
//! ([`crate::emulator`]), so everything counted here is client side: the library, its
//! driver client, and the benchmark's own bookkeeping (the vector of held guards, the
//! waiting tasks), which a user would have too.
//!
//! Live bytes are sampled before and after taking N leases (or starting N waiters), each
//! time as the median of a few samples after the client has settled, and the difference is
//! divided by N. Background work (driver monitoring, pollers' commands in flight) moves the
//! figure by a few kilobytes at any instant, which is why N is large.

use std::alloc::System;
use std::sync::Arc;
use std::time::Duration;

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

use crate::monitor::Monitor;
use crate::peers::{Held, Lib, Peer, Result};

/// The counting allocator, installed in `main.rs`.
pub(crate) static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// How long the client is left to settle before sampling.
const SETTLE: Duration = Duration::from_millis(1_000);

/// Samples per reading (the median is taken).
const SAMPLES: usize = 7;

/// Bytes per held lease and per waiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memory {
    pub(crate) per_lease: f64,
    pub(crate) per_waiter: f64,
}

/// Bytes allocated and not freed, by the whole process.
fn live_bytes() -> i64 {
    let stats = ALLOCATOR.stats();
    stats.bytes_allocated as i64 - stats.bytes_deallocated as i64
}

/// The median of [`SAMPLES`] readings of [`live_bytes`], 50 ms apart, after [`SETTLE`].
async fn settled_live_bytes() -> i64 {
    tokio::time::sleep(SETTLE).await;
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        samples.push(live_bytes());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    samples.sort();
    samples[SAMPLES / 2]
}

/// Measures the bytes per held lease (`leases` held by one client) and per waiter (`waiters`
/// tasks of one client waiting for a lock another client holds).
pub(crate) async fn run(lib: Lib, uri: &str, leases: usize, waiters: usize) -> Result<Memory> {
    let per_lease = per_lease(lib, uri, leases).await?;
    let per_waiter = per_waiter(lib, uri, waiters).await?;
    Ok(Memory {
        per_lease,
        per_waiter,
    })
}

async fn per_lease(lib: Lib, uri: &str, n: usize) -> Result<f64> {
    let peer = Peer::connect(lib, uri, &Monitor::new(lib.db())).await?;
    peer.prepare().await?;
    // Warm-up: connection, first documents, the keeper's task.
    let warm = peer
        .try_acquire("memory-warm")
        .await?
        .ok_or("refused although nobody holds the lock")?;
    let mut held: Vec<Held<'_>> = Vec::with_capacity(n);
    let before = settled_live_bytes().await;
    for i in 0..n {
        let resource = format!("memory-lease-{i}");
        held.push(
            peer.try_acquire(&resource)
                .await?
                .ok_or("refused although nobody holds the lock")?,
        );
    }
    let after = settled_live_bytes().await;
    for h in held {
        peer.release(h).await?;
    }
    peer.release(warm).await?;
    peer.close().await;
    Ok((after - before) as f64 / n as f64)
}

async fn per_waiter(lib: Lib, uri: &str, n: usize) -> Result<f64> {
    let holder = Peer::connect(lib, uri, &Monitor::new(lib.db())).await?;
    let resource = "memory-wanted";
    let held = holder
        .try_acquire(resource)
        .await?
        .ok_or("refused although nobody holds the lock")?;
    let peer = Arc::new(Peer::connect(lib, uri, &Monitor::new(lib.db())).await?);
    // Warm-up: the waiting client's connection (and, for ours, its change stream).
    let warm = peer
        .try_acquire("memory-waiter-warm")
        .await?
        .ok_or("refused although nobody holds the lock")?;
    peer.release(warm).await?;
    let before = settled_live_bytes().await;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let peer = peer.clone();
        // Returns only if granted (wrongly) or failed.
        set.spawn(async move {
            peer.acquire(resource)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
    }
    let after = settled_live_bytes().await;
    set.abort_all();
    let (mut granted, mut failed) = (0, None);
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(())) => granted += 1,
            Ok(Err(e)) => failed = Some(e),
            Err(_) => {}
        }
    }
    holder.release(held).await?;
    holder.close().await;
    if let Ok(peer) = Arc::try_unwrap(peer) {
        peer.close().await;
    }
    if let Some(e) = failed {
        return Err(format!("a waiter failed: {e}").into());
    }
    if granted > 0 {
        return Err(format!("{granted} waiters were granted a lock held by another").into());
    }
    Ok((after - before) as f64 / n as f64)
}
