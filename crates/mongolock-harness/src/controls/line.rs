//! The control of a waiter whose own entry is still in force: it must stand in line like
//! anybody (issue 39, item 5). Before the fix, its attempts met its own entry, and it asked
//! again at the entry's end outside the line, so a waiter that came after it was served
//! first.

use std::time::{Duration, Instant};

use mongolock::LockClient;

use super::{ControlResult, Expected, RESOURCE, Watched, hold_honestly, locks, write};
use crate::history::{AcquireCall, FromLibrary, GuardLog, HolderLog, LetGo, Mode, ReleaseResult};
use crate::oracle::{JOIN_ALLOWANCE, ServerCheck};

/// The job's lease and minimum hold.
const TTL: Duration = Duration::from_secs(4);
/// See [`TTL`].
const HOLD: Duration = Duration::from_secs(2);
/// How long each waiter may wait.
const WAIT: Duration = Duration::from_secs(6);

/// Host A's job (lock id `host-a`, a 2 s minimum hold) lets go at once and asks again under
/// the same lock id; host B asks a little over a second later. The old behaviour, planted:
/// A does not join the line while its own entry is in force, and asks again and again outside
/// it (`try_acquire`), so B, the only one in line, is served at the hold's end before A.
pub(super) async fn own_entry_outside_line() -> Result<ControlResult, Box<dyn std::error::Error>> {
    own_entry_waits(true).await
}

/// The scenario of [`own_entry_outside_line`]; `planted`: with the old behaviour put back,
/// else with the library as it is (A waits with `acquire_timeout`).
async fn own_entry_waits(planted: bool) -> Result<ControlResult, Box<dyn std::error::Error>> {
    let stage = Watched::start().await?;
    let (recorder, a_locks) = (&stage.recorder, &stage.locks);
    let b_locks = locks(stage.server.new_client());
    let job = |locks: &LockClient, host: &str| {
        (locks.mutex(RESOURCE).ttl(TTL).min_hold(HOLD)).lock_id(host)
    };
    let invoked = Instant::now();
    let first = job(a_locks, "host-a").acquire().await?;
    let mut log = HolderLog::new(recorder.next_id(), 0, Mode::Exclusive, invoked, &first);
    recorder.min_hold(log.id, HOLD);
    write(recorder, &mut log, first.fencing_token());
    log.lets_go(LetGo::Released);
    log.release = Some(ReleaseResult::of(&first.release().await));
    recorder.holder(log);

    // A asks again under its lock id at once; B a little over the allowance later.
    let a = async {
        let invoked = Instant::now();
        let got = if planted {
            // The bug: asked again outside the line until granted.
            let mut got = None;
            while got.is_none() && invoked.elapsed() < WAIT {
                got = job(a_locks, "host-a").try_acquire().await?;
                if got.is_none() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            got
        } else {
            job(a_locks, "host-a").acquire_timeout(WAIT).await?
        };
        Ok::<_, mongolock::Error>((invoked, Instant::now(), got))
    };
    let b = async {
        tokio::time::sleep(JOIN_ALLOWANCE + Duration::from_millis(200)).await;
        let invoked = Instant::now();
        let got = job(&b_locks, "host-b").acquire_timeout(WAIT).await?;
        Ok::<_, mongolock::Error>((invoked, Instant::now(), got))
    };
    // Each holds 200 ms once granted, then releases, so that the other is served.
    let hold = |client: usize, lock_id: &'static str, got: mongolock::Result<_>| async move {
        let (invoked, ended, guard): (Instant, Instant, Option<mongolock::LockGuard>) = got?;
        recorder.acquire_call(AcquireCall {
            client,
            resource: RESOURCE.to_owned(),
            lock_id: lock_id.to_owned(),
            invoked_at: invoked,
            ended_at: ended,
            granted: guard.is_some(),
            timeout: Some(WAIT),
        });
        if let Some(guard) = guard {
            let log = hold_honestly(recorder, client, guard, invoked, Duration::from_millis(200));
            let log = log.await;
            recorder.min_hold(log.id, HOLD);
            recorder.holder(log);
        }
        Ok::<_, mongolock::Error>(())
    };
    let (a, b) = tokio::join!(async { hold(0, "host-a", a.await).await }, async {
        hold(1, "host-b", b.await).await
    });
    a?;
    b?;
    b_locks.shutdown().await;
    let result = stage
        .finish(
            "own entry outside the line",
            Expected::Server(ServerCheck::Order),
            &[RESOURCE],
        )
        .await?;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_with_its_own_entry_in_force_outside_the_line_is_caught_by_s9_alone() {
        let result = own_entry_outside_line().await.expect("the control runs");
        assert!(result.caught(), "not caught: {:?}", result.found());
        assert_eq!(
            result.found(),
            vec![(ServerCheck::Order.to_string(), 1)],
            "only (S9)"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_library_puts_such_a_waiter_in_line_and_serves_it_first() {
        let result = own_entry_waits(false).await.expect("the scenario runs");
        assert!(!result.caught(), "caught: {:?}", result.found());
        assert_eq!(result.found(), vec![], "nothing at all");
        let oracle = result.oracle.expect("the oracle ran");
        assert_eq!(
            oracle.own_entry_places,
            (1, 1),
            "A stood in line and was served"
        );
    }
}
