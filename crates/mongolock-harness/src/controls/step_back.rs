//! The control of a step back of the server's clock past a let-go grant (issue 39; the
//! library's fix `d44da17`): the harness's [`step_back`](crate::workload::step_back) scenario
//! with the old behaviour planted: after the step, the host renews its lock id with the old
//! time-only test of a holding entry (sent as a raw update), which renews its let-go entry,
//! and runs its job again under the old grant inside its hold.
//!
//! The same scenario also controls a force release after the step back (the library's fix
//! `224dfb8`): the host's renewal and retry refused, an operator force-releases the resource
//! while the clock reads before the let-go entry's grant, with the old pipeline planted (its
//! hold counted from `$$NOW`), and the next host, asking every 50 ms, is granted inside the
//! hold by the server's clock.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::{ControlResult, Expected, RESOURCE, Watched, locks};
use crate::check::Check;
use crate::oracle::ServerCheck;
use crate::workload::step_back::{self, Force, Stage, Went};
use crate::workload::{COLLECTION, DB, StepBackHold};

/// The scenario's shape here: the fleet's ([`StepBackHold::THREE_HOSTS`]) on the control's
/// resource.
fn shape() -> StepBackHold {
    StepBackHold {
        resource: RESOURCE.to_owned(),
        ..StepBackHold::THREE_HOSTS
    }
}

/// The host renews its let-go entry after the step back with the old test and believes it
/// holds it again: caught by (10), a lease given back after its release returned `Ok`.
pub(super) async fn step_back_renewed() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let (result, went) = step_back_under_hold(true, Force::None).await?;
    if went.renewed == 0 {
        return Err(format!("the planted renewal renewed nothing: {went:?}").into());
    }
    Ok(result)
}

/// After the step back, an operator force-releases the resource with the old pipeline (the
/// let-go entry's hold counted from `$$NOW`, stepped back past the grant), and the next host
/// is granted inside the hold by the server's clock: caught by (S12).
pub(super) async fn force_after_step_back() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let (result, went) = step_back_under_hold(false, Force::OldPipeline).await?;
    if went.after_force_ms.is_none_or(|ms| ms >= 0) {
        return Err(format!("nobody was granted inside the hold: {went:?}").into());
    }
    Ok(result)
}

/// The scenario on an emulator of its own, planted or with the library as it is, with a
/// force release after the step as `force` says; an error if the clock did not go back past
/// a let-go entry's grant while it was in force, or if a force release was asked for and
/// did not land so.
async fn step_back_under_hold(
    planted: bool,
    force: Force,
) -> Result<(ControlResult, Went), Box<dyn std::error::Error>> {
    let stage = Watched::start().await?;
    let hosts = (0..3)
        .map(|_| locks(stage.server.new_client()))
        .collect::<Vec<_>>();
    let raw = stage
        .server
        .new_client()
        .database(DB)
        .collection(COLLECTION);
    let scenario = Stage {
        hosts: hosts.clone(),
        raw,
        clock: stage.server.clock().clone(),
        recorder: &stage.recorder,
        client: 0,
        owner: "control".into(),
        shape: shape(),
        ttl: Duration::from_millis(1_500),
        planted,
        force,
    };
    let went = step_back::run(&scenario, &mut StdRng::seed_from_u64(39)).await;
    for host in hosts {
        host.shutdown().await;
    }
    if went.past_grant_ms.is_none() {
        return Err(format!("the step back did not happen: {}", went.ended()).into());
    }
    if force != Force::None && went.forced_before_grant_ms.is_none() {
        return Err(format!("the force release did not happen: {}", went.ended()).into());
    }
    let (name, expected) = match force {
        Force::None => (
            "step back, let-go entry renewed",
            Expected::Client(Check::Resume),
        ),
        _ => (
            "force release after a step back",
            Expected::Server(ServerCheck::MinHold),
        ),
    };
    let result = stage.finish(name, expected, &[RESOURCE]).await?;
    Ok((result, went))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_host_that_renews_its_let_go_entry_after_a_step_back_is_caught_by_10() {
        let (result, went) = step_back_under_hold(true, Force::None)
            .await
            .expect("the control runs");
        println!("planted: {went:?}; found {:?}", result.found());
        assert!(went.renewed > 0, "the plant renewed nothing: {went:?}");
        assert_eq!(
            went.most_in_a_period, 2,
            "the job ran twice in a period: {went:?}"
        );
        assert!(result.caught(), "not caught: {:?}", result.found());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_library_gives_nothing_back_after_a_step_back_and_passes() {
        let (result, went) = step_back_under_hold(false, Force::None)
            .await
            .expect("the scenario runs");
        println!("library: {went:?}; found {:?}", result.found());
        assert!(went.past_grant_ms.is_some_and(|ms| ms > 0), "{went:?}");
        assert!(went.by_ms > 600, "a step by more than the hold: {went:?}");
        assert_eq!((went.renewed, went.regranted), (0, None), "{went:?}");
        assert!(went.jobs >= 2, "jobs in a later period too: {went:?}");
        assert_eq!(
            went.most_in_a_period, 1,
            "at most once per period: {went:?}"
        );
        assert_eq!(result.found(), vec![], "nothing at all");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_old_force_release_after_a_step_back_is_caught_by_s12() {
        let (result, went) = step_back_under_hold(false, Force::OldPipeline)
            .await
            .expect("the control runs");
        println!("planted: {went:?}; found {:?}", result.found());
        assert!(
            went.forced_before_grant_ms.is_some_and(|ms| ms > 0),
            "{went:?}"
        );
        assert!(went.after_force_ms.is_some_and(|ms| ms < 0), "{went:?}");
        assert!(result.caught(), "not caught: {:?}", result.found());
        assert_eq!(
            result.found(),
            vec![(ServerCheck::MinHold.to_string(), 1)],
            "(S12) alone"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_library_s_force_release_after_a_step_back_keeps_the_hold_and_passes() {
        let (result, went) = step_back_under_hold(false, Force::Library)
            .await
            .expect("the scenario runs");
        println!("library: {went:?}; found {:?}", result.found());
        assert!(
            went.forced_before_grant_ms.is_some_and(|ms| ms > 0),
            "{went:?}"
        );
        assert!(
            went.after_force_ms.is_some_and(|ms| ms >= 0),
            "granted at the hold's end or later: {went:?}"
        );
        assert_eq!(
            went.most_in_a_period, 1,
            "at most once per period: {went:?}"
        );
        assert!(went.ended().contains("force-released"), "{}", went.ended());
        assert_eq!(result.found(), vec![], "nothing at all");
    }
}
