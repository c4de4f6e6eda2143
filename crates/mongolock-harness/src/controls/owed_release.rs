//! The control of a release owed for ever: a guard dropped inside a runtime that then ends
//! leaves its background release unrun, and a client that waits for that debt before its
//! next call of the lock id blocks the lock id for good (issue 39, item 6, before `be7e380`).

use std::time::{Duration, Instant};

use mongolock::LockClient;
use mongolock_testkit::TestServer;

use super::{ControlResult, RESOURCE, TTL, finish, hold_honestly, locks, write};
use crate::check::Check;
use crate::history::{
    AcquireCall, Ending, FaultKind, GuardLog, HolderLog, LetGo, Mode, NemesisLog, Recorder,
};

/// The lock id the control's job keeps across its calls.
const LOCK_ID: &str = "job";

/// How long the call after the drop may wait.
const TIMEOUT: Duration = Duration::from_secs(1);

/// A job under a fixed lock id drops its guard inside a short-lived runtime, which ends
/// before the release runs; the same client then asks for the lock with the same lock id
/// and `acquire_timeout(1 s)`. The old behaviour, planted: the client waits for the release
/// it owes before it sends anything, and that release never runs, so the call never returns
/// (the control gives up on it after three times its timeout).
pub(super) async fn stuck_lock_id() -> Result<ControlResult, Box<dyn std::error::Error>> {
    owed_release(true).await
}

/// The scenario of [`stuck_lock_id`]; `planted`: with the old behaviour put back, else with
/// the library as it is.
async fn owed_release(planted: bool) -> Result<ControlResult, Box<dyn std::error::Error>> {
    let server = TestServer::start().await?;
    let recorder = Recorder::new();
    let locks = locks(server.new_client());
    locks.create_indexes().await?;
    let job = |locks: &LockClient| locks.mutex(RESOURCE).ttl(TTL).lock_id(LOCK_ID);
    let invoked = Instant::now();
    let guard = job(&locks).acquire().await?;
    let mut log = HolderLog::new(recorder.next_id(), 0, Mode::Exclusive, invoked, &guard);
    write(&recorder, &mut log, guard.fencing_token());
    log.lets_go(LetGo::DroppedOnEndingRuntime);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move { drop(guard) });
    })
    .join()
    .map_err(|_| "the thread that dropped the guard panicked")?;
    recorder.nemesis(NemesisLog {
        kind: FaultKind::DropOnEndingRuntime,
        client: 0,
        at: log.released_at.unwrap_or_else(Instant::now),
        holder: Some(log.id),
        resource: Some(RESOURCE.to_owned()),
        ended: Ending::DroppedOnEndingRuntime,
    });
    recorder.holder(log);

    let invoked = Instant::now();
    let call = async {
        if planted {
            // The bug: the debt is waited for before anything is sent; it is never paid.
            std::future::pending::<()>().await;
        }
        job(&locks).acquire_timeout(TIMEOUT).await
    };
    let got = tokio::time::timeout(TIMEOUT * 3, call).await;
    let ended_at = Instant::now();
    let granted = matches!(got, Ok(Ok(Some(_))));
    recorder.acquire_call(AcquireCall {
        client: 0,
        resource: RESOURCE.to_owned(),
        lock_id: LOCK_ID.to_owned(),
        invoked_at: invoked,
        ended_at,
        granted,
        timeout: Some(TIMEOUT),
    });
    if let Ok(Ok(Some(guard))) = got {
        let log = hold_honestly(&recorder, 0, guard, invoked, Duration::from_millis(100)).await;
        recorder.holder(log);
    }
    locks.shutdown().await;
    server.shutdown().await;
    Ok(finish("stuck lock id", Check::CallTimeout, &recorder))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_held_by_a_debt_never_paid_is_caught_by_11_alone() {
        let result = stuck_lock_id().await.expect("the control runs");
        assert!(result.caught(), "not caught: {:?}", result.found());
        assert_eq!(
            result.found(),
            vec![(Check::CallTimeout.name().to_owned(), 1)],
            "only (11)"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_library_under_the_same_drop_returns_in_time_and_passes() {
        let result = owed_release(false).await.expect("the scenario runs");
        assert!(!result.caught(), "caught: {:?}", result.found());
        assert_eq!(result.found(), vec![], "nothing at all");
    }
}
