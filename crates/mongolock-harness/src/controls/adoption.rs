//! The control of a restarted holder's adoption racing its dead process's late release
//! (issue 39; the library's fix `1e762e7`): the harness's
//! [`adoption`](crate::workload::adoption) scenario with the old adoption planted: once the
//! late release has landed and marked the entry let go, the restarted process adopts it
//! with the keepalive's lease query of before the fix (no `letGoAt: {$exists: false}`), sent
//! raw, and works under the old grant past the hold's end, while a contender is granted
//! when the hold ends.

use super::{ControlResult, Expected, Watched};
use crate::check::Check;
use crate::workload::AdoptionRace;
use crate::workload::adoption::{self, Stage, Went};

/// The race's resource here.
const RESOURCE: &str = "adopt";

/// The restarted process adopts the let-go entry the old way and believes it holds it:
/// caught by (1), its belief overlapping the contender's grant at the hold's end.
pub(super) async fn adopted_let_go_entry() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let (result, went) = race(true, true).await?;
    if !went.adopted {
        return Err(format!("the planted adoption took nothing: {went:?}").into());
    }
    Ok(result)
}

/// How many times the race is staged before its not happening is an error: under load the
/// restarted process's attempt can reach the server after the late release landed (it has
/// 500 ms to spare, see [`AdoptionRace::on`]), and then no adoption is sent.
const TRIES: usize = 3;

/// The scenario on an emulator of its own, planted or with the library as it is, staged
/// again on a fresh emulator (up to [`TRIES`] times) when the race did not happen; an error
/// if it never did (the release not late, or no adoption sent).
async fn race(
    planted: bool,
    contender: bool,
) -> Result<(ControlResult, Went), Box<dyn std::error::Error>> {
    let mut endings = Vec::new();
    while endings.len() < TRIES {
        let stage = Watched::start().await?;
        let scenario = Stage {
            upstream: stage.server.addr(),
            recorder: &stage.recorder,
            client: 0,
            owner: "control".into(),
            lock_id: "host-a".into(),
            shape: AdoptionRace::on(RESOURCE),
            planted,
            contender,
        };
        let went = adoption::run(&scenario).await;
        if !went.carried_out() {
            endings.push(went.ended());
            stage.server.shutdown().await;
            continue;
        }
        let result = stage
            .finish(
                "restarted holder adopts its let-go entry",
                Expected::Client(Check::Exclusion),
                &[RESOURCE],
            )
            .await?;
        return Ok((result, went));
    }
    Err(format!("the race did not happen in {TRIES} tries: {endings:?}").into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restarted_holder_that_adopts_its_let_go_entry_is_caught_by_1() {
        let (result, went) = race(true, true).await.expect("the control runs");
        println!("planted: {went:?}; found {:?}", result.found());
        assert!(went.adopted && went.contender, "{went:?}");
        assert!(result.caught(), "not caught: {:?}", result.found());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_library_adopts_nothing_after_its_late_release_and_passes() {
        let (result, went) = race(false, false).await.expect("the scenario runs");
        println!("library: {went:?}; found {:?}", result.found());
        assert!(went.release_late && went.adoptions > 0, "{went:?}");
        assert!(
            went.regranted.is_none_or(|t| t > went.token),
            "the let-go entry given back: {went:?}"
        );
        assert_eq!(result.found(), vec![], "nothing at all");
    }

    /// With a contender in line beside it, the restarted process (its adoption refused, its
    /// own let-go entry in force) is served in its turn. Before `4b66416` it waited outside
    /// the line and was served about 1.4 s after the hold's end, after the contender, which
    /// (S9) reported ("host-a, whose own entry was in force, had waited since ... outside the
    /// line"): its attempt answered "already held" took no place in the line.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_restarted_process_is_served_in_its_turn_beside_a_contender() {
        let (result, went) = race(false, true).await.expect("the scenario runs");
        println!("library: {went:?}; found {:?}", result.found());
        assert!(went.contender && went.regranted.is_some(), "{went:?}");
        assert_eq!(result.found(), vec![], "nothing at all");
    }
}
