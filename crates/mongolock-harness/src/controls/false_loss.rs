//! The control of a loss reported for a step back of the server's clock (issue 39, "a clock
//! that steps back on a real replica set"): mongod's `$$NOW` follows the system clock, which
//! can step back, while `operationTime` never goes back. A holder that takes the server's
//! clock going back for a loss tells its user the lease is lost while its keeper goes on
//! renewing it and the server keeps it: (S13) must catch it, and the same scenario with the
//! library as it is must show nothing.

use std::time::{Duration, Instant};

use super::{ControlResult, Expected, RESOURCE, Watched, write};
use crate::history::{
    FromLibrary, GuardLog, HolderLog, LetGo, LossKind, Mode, OpKind, ReleaseResult, watch_until,
};
use crate::oracle::ServerCheck;

/// The holder's lease: renewed every second.
const TTL: Duration = Duration::from_secs(3);
/// How long the holder holds before the step.
const BEFORE: Duration = Duration::from_millis(1_300);
/// The step back.
const STEP: Duration = Duration::from_millis(900);
/// How long the holder keeps its guard after the step (its keeper renews meanwhile).
const AFTER: Duration = Duration::from_millis(2_200);

/// A holds a lease; the server's clock steps back 900 ms; A reads the server's clock, sees
/// it went back, and reports its lease lost (as by its local deadline), while its keeper
/// goes on renewing it for 2.2 s and the server keeps it: caught by (S13).
pub(super) async fn step_back_taken_for_loss() -> Result<ControlResult, Box<dyn std::error::Error>>
{
    step_back_under_lease(true).await
}

/// The scenario of [`step_back_taken_for_loss`]; `planted`: with the old behaviour put
/// back, else with the library as it is (A watches its guard through the step and after).
async fn step_back_under_lease(planted: bool) -> Result<ControlResult, Box<dyn std::error::Error>> {
    let stage = Watched::start().await?;
    let recorder = &stage.recorder;
    let clock = stage.server.clock().clone();
    let invoked = Instant::now();
    let a = stage.locks.mutex(RESOURCE).ttl(TTL).acquire().await?;
    let mut log = HolderLog::new(recorder.next_id(), 0, Mode::Exclusive, invoked, &a);
    write(recorder, &mut log, a.fencing_token());
    watch_until(&mut log, &a, Instant::now() + BEFORE).await;
    let before_ms = clock.now().timestamp_millis();
    recorder.server_clock(Instant::now(), before_ms);
    let stepped_at = Instant::now();
    clock.step_back(STEP);
    let after_ms = clock.now().timestamp_millis();
    recorder.server_clock(Instant::now(), after_ms);
    recorder.op(
        OpKind::ClockStep {
            by_ms: -(STEP.as_millis() as i64),
            judged: None,
        },
        stepped_at,
        stepped_at,
    );
    if after_ms >= before_ms {
        return Err("the server's clock did not go back".into());
    }
    if planted {
        // The bug: the clock went back, so the lease is taken for lost; the guard (and its
        // keeper) lives on.
        log.notice(Instant::now(), LossKind::Deadline);
        tokio::time::sleep(AFTER).await;
    } else {
        watch_until(&mut log, &a, Instant::now() + AFTER).await;
        log.check_lost(&a);
    }
    log.lets_go(LetGo::Released);
    log.release = Some(ReleaseResult::of(&a.release().await));
    recorder.holder(log);
    stage
        .finish(
            "step back taken for a loss",
            Expected::Server(ServerCheck::FalseLoss),
            &[RESOURCE],
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_holder_that_takes_a_step_back_for_a_loss_is_caught_by_s13() {
        let result = step_back_taken_for_loss().await.expect("the control runs");
        let oracle = result.oracle.as_ref().expect("the oracle ran");
        assert_eq!(oracle.losses_judged, (1, 1), "{:?}", oracle.violations);
        assert!(result.caught(), "not caught: {:?}", result.found());
        assert_eq!(
            result.found(),
            vec![(ServerCheck::FalseLoss.to_string(), 1)],
            "(S13) alone"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_library_keeps_its_lease_through_a_step_back_and_passes() {
        let result = step_back_under_lease(false)
            .await
            .expect("the scenario runs");
        assert!(!result.caught(), "caught: {:?}", result.found());
        assert_eq!(result.found(), vec![], "nothing at all");
    }
}
