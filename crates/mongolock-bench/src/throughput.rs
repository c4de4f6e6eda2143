//! Throughput: acquire + release pairs per second, with many tasks of one process sharing
//! one client, each task on its own resource or all on one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::measure::PerOp;
use crate::monitor::Monitor;
use crate::peers::{Lib, Peer, Result};

/// One throughput run.
#[derive(Debug, Clone)]
pub(crate) struct Throughput {
    /// Pairs completed within the run, per second of it.
    pub(crate) pairs_per_sec: f64,
    /// Commands per completed pair (including the waiting of the others).
    pub(crate) commands: PerOp,
}

/// How long the tasks have, once the run is over, to finish the pair they are in.
const DRAIN: Duration = Duration::from_secs(10);

/// `tasks` tasks share one client of `lib`; task `i` works on resource `i % resources`. Each
/// loops acquire (waiting the library's way) and release for `duration`; a pair counts if
/// its release returned within it. At the end each task finishes its pair and stops (those
/// still waiting after [`DRAIN`] are dropped).
pub(crate) async fn run(
    lib: Lib,
    uri: &str,
    tasks: usize,
    resources: usize,
    duration: Duration,
) -> Result<Throughput> {
    let monitor = Monitor::new(lib.db());
    let peer = Arc::new(Peer::connect(lib, uri, &monitor).await?);
    peer.prepare().await?;
    // Warm-up: the connection pool's first connection.
    let warm = format!("throughput-warm-{tasks}-{resources}");
    let held = peer
        .try_acquire(&warm)
        .await?
        .ok_or("refused although nobody holds the lock")?;
    peer.release(held).await?;

    let pairs = Arc::new(AtomicU64::new(0));
    let before = monitor.snapshot();
    let start = Instant::now();
    let end = start + duration;
    let mut set = tokio::task::JoinSet::new();
    for i in 0..tasks {
        let (peer, pairs) = (peer.clone(), pairs.clone());
        let resource = format!("throughput-{tasks}-{resources}-{}", i % resources);
        set.spawn(async move {
            while Instant::now() < end {
                let held = peer.acquire(&resource).await?;
                peer.release(held).await?;
                if Instant::now() <= end {
                    pairs.fetch_add(1, Ordering::Relaxed);
                }
            }
            Result::Ok(())
        });
    }
    let stopped = tokio::time::timeout_at(end.into(), async {
        while let Some(joined) = set.join_next().await {
            joined??;
        }
        Result::Ok(())
    })
    .await;
    if let Ok(Err(e)) = stopped {
        return Err(e);
    }
    let counts = monitor.snapshot().since(&before);
    // The tasks finish the pair they are in (not counted) and stop; whoever is still
    // waiting after DRAIN is dropped, each library's own cancellation. Dropping 64 calls at
    // once leaves them in the driver's wait queue for a pooled connection, which it serves
    // one at a time (mongodb 3.9.1, `src/cmap/worker.rs`), and closing the client then
    // waits on them for seconds: the run's time, not what it measures.
    let drained =
        tokio::time::timeout(DRAIN, async { while set.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        set.abort_all();
        while set.join_next().await.is_some() {}
    }
    let done = pairs.load(Ordering::Relaxed);
    if let Ok(peer) = Arc::try_unwrap(peer) {
        peer.close().await;
    }
    if done == 0 {
        return Err("no pair completed".into());
    }
    Ok(Throughput {
        pairs_per_sec: done as f64 / duration.as_secs_f64(),
        commands: PerOp::new(&counts, done),
    })
}
