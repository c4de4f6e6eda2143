//! The control of a waiting call's later attempt bounded only by the command time limit
//! (before `c9b00e8` and `e715c59`): a slow reply to a later attempt (or to the withdrawal
//! of a grant that came too late) held the call past its timeout. Check (11), calls return
//! within their timeout, must catch it; the library as it is cuts the attempt at the call's
//! deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mongolock::{LockClient, LockDetails};
use mongolock_testkit::faults::proxy::{RequestFault, Requests};
use mongolock_testkit::{FaultProxy, TestServer};

use super::{ControlResult, RESOURCE, finish, hold_honestly, locks};
use crate::check::Check;
use crate::commands;
use crate::history::{AcquireCall, Recorder};

/// The waiter's lock id.
const LOCK_ID: &str = "waiter";
/// The waiting call's timeout.
const TIMEOUT: Duration = Duration::from_secs(1);
/// How long the holder holds before it releases (which wakes the waiter's later attempt).
const HOLDS: Duration = Duration::from_millis(400);
/// How long the waiter's later attempt is held on the wire.
const LATE: Duration = Duration::from_secs(4);
/// The waiter's command time limit (the old bound of a later attempt).
const COMMAND_LIMIT: Duration = Duration::from_secs(3);

/// A waiter written against the low-level API (`xlock` by lock id until its deadline) whose
/// later attempt, sent when the holder let go, is held on the wire (a late request of its
/// proxy): awaited to its command time limit (3 s), it returns about 3.4 s into a call
/// given 1 s. Caught by (11).
pub(super) async fn unbounded_later_attempt() -> Result<ControlResult, Box<dyn std::error::Error>> {
    late_later_attempt(true).await
}

/// The scenario of [`unbounded_later_attempt`]; `planted`: the low-level waiter, else the
/// library's `acquire_timeout` through the same fault.
async fn late_later_attempt(planted: bool) -> Result<ControlResult, Box<dyn std::error::Error>> {
    let server = TestServer::start().await?;
    let proxy = FaultProxy::start(server.addr()).await?;
    let recorder = Recorder::new();
    let holder = locks(server.new_client());
    holder.create_indexes().await?;
    let waiter = LockClient::builder(locks(proxy.client()).collection().clone())
        .command_timeout(COMMAND_LIMIT)
        .build()?;
    // Connections open before the fault.
    let warm = waiter.mutex("warm").acquire().await?;
    warm.release().await?;
    let invoked = Instant::now();
    let held = holder
        .mutex(RESOURCE)
        .ttl(Duration::from_secs(3))
        .acquire()
        .await?;
    // Every attempt of the waiter but its first is held on the wire, once.
    let attempts = Arc::new(AtomicU64::new(0));
    let late = proxy.fault_requests(
        Requests::matching({
            let attempts = attempts.clone();
            move |c| commands::is_attempt(c) && attempts.fetch_add(1, Ordering::SeqCst) >= 1
        })
        .times(1),
        RequestFault::Late {
            hold: LATE,
            cut_after: None,
        },
    );
    let holding = hold_honestly(&recorder, 1, held, invoked, HOLDS);
    let waiting = async {
        let started = Instant::now();
        let granted = if planted {
            wait_by_xlock(&waiter, started + TIMEOUT).await
        } else {
            let mutex = waiter.mutex(RESOURCE).ttl(Duration::from_secs(3));
            let got = mutex.lock_id(LOCK_ID).acquire_timeout(TIMEOUT).await;
            match got {
                Ok(Some(guard)) => {
                    let _ = guard.release().await;
                    true
                }
                _ => false,
            }
        };
        (started, Instant::now(), granted)
    };
    let (holder_log, (started, ended, granted)) = tokio::join!(holding, waiting);
    recorder.holder(holder_log);
    recorder.acquire_call(AcquireCall {
        client: 0,
        resource: RESOURCE.to_owned(),
        lock_id: LOCK_ID.to_owned(),
        invoked_at: started,
        ended_at: ended,
        granted,
        timeout: Some(TIMEOUT),
    });
    if late.applied() == 0 {
        return Err("no later attempt was held on the wire".into());
    }
    waiter.shutdown().await;
    holder.shutdown().await;
    drop(proxy);
    server.shutdown().await;
    Ok(finish(
        "later attempt unbounded",
        Check::CallTimeout,
        &recorder,
    ))
}

/// The old waiting call, planted: `xlock` under the waiter's lock id, again every 50 ms
/// while the resource is held and the deadline has not passed, each attempt awaited to its
/// end, bounded only by the client's command time limit. Whether it was granted (its grant
/// is unlocked at once).
async fn wait_by_xlock(waiter: &LockClient, deadline: Instant) -> bool {
    let details = LockDetails::default().ttl(Duration::from_secs(3));
    loop {
        match waiter.xlock(RESOURCE, LOCK_ID, details.clone()).await {
            Ok(_) => {
                let _ = waiter.unlock(LOCK_ID).await;
                return true;
            }
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_later_attempt_awaited_to_the_command_limit_is_caught_by_11() {
        let result = unbounded_later_attempt().await.expect("the control runs");
        assert!(result.caught(), "not caught: {:?}", result.found());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_library_cuts_its_later_attempt_at_the_deadline_and_passes() {
        let result = late_later_attempt(false).await.expect("the scenario runs");
        assert_eq!(result.found(), vec![], "nothing at all");
    }
}
