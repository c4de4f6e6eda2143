//! Load on the server under contention: the commands that waiters send while a lock they
//! want is held.

use std::time::Duration;

use crate::measure::PerOp;
use crate::monitor::Monitor;
use crate::peers::{Lib, Peer, Result};

/// How long the waiters get to start waiting before counting starts.
const SETTLE: Duration = Duration::from_millis(500);

/// The waiters' commands while the lock is held.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    /// Commands per second from all waiters together.
    pub(crate) per_sec: f64,
    /// Breakdown, per second.
    pub(crate) commands: PerOp,
}

/// One client holds a lock; `waiters` others (each with its own client, as separate
/// processes) wait for it the library's way. After [`SETTLE`], the waiters' commands are
/// counted for `window`; then the waiters are dropped and the holder releases.
pub(crate) async fn run(lib: Lib, uri: &str, waiters: usize, window: Duration) -> Result<Load> {
    let holder = Peer::connect(lib, uri, &Monitor::new(lib.db())).await?;
    holder.prepare().await?;
    let resource = format!("load-{waiters}");
    let held = holder
        .try_acquire(&resource)
        .await?
        .ok_or("refused although nobody holds the lock")?;
    let monitor = Monitor::new(lib.db());
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..waiters {
        let peer = Peer::connect(lib, uri, &monitor).await?;
        let resource = resource.clone();
        set.spawn(async move {
            let granted = peer.acquire(&resource).await.map(|_| ());
            (granted, peer)
        });
    }
    tokio::time::sleep(SETTLE).await;
    let before = monitor.snapshot();
    tokio::time::sleep(window).await;
    let counts = monitor.snapshot().since(&before);
    // A waiter that returned while the lock was held got it wrongly, or failed.
    let mut problem = None;
    set.abort_all();
    while let Some(joined) = set.join_next().await {
        if let Ok((granted, peer)) = joined {
            problem = Some(match granted {
                Ok(()) => "a waiter was granted a lock held by another".to_string(),
                Err(e) => format!("a waiter failed: {e}"),
            });
            peer.close().await;
        }
    }
    holder.release(held).await?;
    holder.close().await;
    if let Some(p) = problem {
        return Err(p.into());
    }
    let secs = window.as_secs_f64();
    Ok(Load {
        per_sec: counts.total() as f64 / secs,
        commands: PerOp {
            per_op: counts.total() as f64 / secs,
            breakdown: counts.describe_rate(secs),
        },
    })
}
