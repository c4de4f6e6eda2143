//! Group operations: `renew` and `unlock` of one lock id holding 10, 1,000 or 10,000 locks,
//! timed and counted, per lock.
//!
//! Only `mongolock` has groups (many resources under one lock id, renewed or released in one
//! command); the other crates hold one lock per call and have no renew, so their rows say
//! so. Each group size gets a collection of its own, so a command only meets its own group.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mongolock::{LockClient, LockDetails};

use crate::monitor::Monitor;
use crate::peers::{Lib, Result, monitored_client};

/// Long enough that nothing expires during the run.
const TTL: Duration = Duration::from_secs(3_600);

/// Acquisitions in flight while a group is set up.
const CONCURRENCY: usize = 32;

/// Renews timed per group (renewing is repeatable; the median is reported).
const RENEWS: usize = 5;

/// One operation on one group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupOp {
    /// Median time of the operation.
    pub(crate) time: Duration,
    /// Commands per operation (whatever the size).
    pub(crate) commands: f64,
}

impl GroupOp {
    /// Time per lock in the group.
    pub(crate) fn per_lock(&self, size: usize) -> Duration {
        self.time / size as u32
    }
}

/// Renew and unlock of one group size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Group {
    pub(crate) renew: GroupOp,
    pub(crate) unlock: GroupOp,
}

/// Times `renew` ([`RENEWS`] times) and `unlock` of a group of `size` locks; unlock is timed
/// `unlocks(size)` times, the group taken again before each. `Ok(None)` for a library
/// without groups.
pub(crate) async fn run(lib: Lib, uri: &str, size: usize) -> Result<Option<Group>> {
    if lib != Lib::Mongolock {
        return Ok(None);
    }
    let monitor = Monitor::new(lib.db());
    let client = monitored_client(lib, uri, &monitor).await?;
    let locks = LockClient::new(
        client
            .database(lib.db())
            .collection(&format!("groups_{size}")),
    );
    locks.create_indexes().await?;
    let lock_id = format!("group-{size:06}");

    hold(&locks, &lock_id, size).await?;
    let mut times = Vec::new();
    let before = monitor.snapshot();
    for _ in 0..RENEWS {
        let start = Instant::now();
        let renewed = locks.renew(&lock_id, TTL).await?;
        times.push(start.elapsed());
        if renewed != size as u64 {
            return Err(format!("renewed {renewed} of {size} locks").into());
        }
    }
    let renew = GroupOp {
        commands: monitor.snapshot().since(&before).total() as f64 / RENEWS as f64,
        time: median(&mut times),
    };

    let mut times = Vec::new();
    let mut commands = 0;
    for run in 0..unlocks(size) {
        if run > 0 {
            hold(&locks, &lock_id, size).await?;
        }
        let before = monitor.snapshot();
        let start = Instant::now();
        let released = locks.unlock(&lock_id).await?;
        times.push(start.elapsed());
        commands += monitor.snapshot().since(&before).total();
        if released != size as u64 {
            return Err(format!("unlocked {released} of {size} locks").into());
        }
    }
    let unlock = GroupOp {
        commands: commands as f64 / times.len() as f64,
        time: median(&mut times),
    };
    locks.shutdown().await;
    client.shutdown().immediate(true).await;
    Ok(Some(Group { renew, unlock }))
}

/// Unlocks timed for a group of `size` (each needs the group taken again).
pub(crate) fn unlocks(size: usize) -> usize {
    if size <= 1_000 { 5 } else { 1 }
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Takes `size` exclusive locks under `lock_id`, [`CONCURRENCY`] at a time.
async fn hold(locks: &LockClient, lock_id: &str, size: usize) -> Result<()> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY.min(size) {
        let (locks, next, lock_id) = (locks.clone(), next.clone(), lock_id.to_string());
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= size {
                    return Result::Ok(());
                }
                let details = LockDetails::default().ttl(TTL);
                let _grant = locks
                    .xlock(&format!("{lock_id}-{i:06}"), &lock_id, details)
                    .await?;
            }
        });
    }
    while let Some(joined) = set.join_next().await {
        joined??;
    }
    Ok(())
}
