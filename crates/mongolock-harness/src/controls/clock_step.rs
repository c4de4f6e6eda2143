//! The control of a server clock step shown while a grant's reply is on its way (issue 39,
//! item 2): a holder that ignores the step another reply showed believes the TTL from its
//! send, by its own clock, while the server ends the lease the step earlier.
//!
//! The same for a brand-new client (the library's fix `0a26365`): its first command is the
//! attempt, so it knows nothing of the server's clock when the step comes; the other reply
//! (an `unlock`, whose reply carries only an `operationTime`) shows the step before the
//! grant's reply is read. A library that reads the first grant ignoring the step believes
//! its send plus the TTL (less margin and uncertainty) while the server ends the lease the
//! step earlier.
//!
//! And for a grant between a step back no reply showed and a step forward (issue 41,
//! `--replset --long --seed 41090`): the library before `41d37e7` took the grant's reading
//! for a step back alone and started its bounds over from it, so that only the part of the
//! step forward past its bounds from before the step back counted (rounded up to the
//! second): the holder believes that much too long.

use std::time::{Duration, Instant};

use mongolock_testkit::TestServer;

use super::{ControlResult, RESOURCE, finish, hold_honestly, locks, read_clock};
use crate::check::Check;
use crate::history::{GuardLog, HolderLog, LetGo, LossKind, Mode, OpKind, Recorder, watch_until};
use crate::relay::ReplyHold;
use crate::workload::{COLLECTION, DB};

/// The lease of the holder whose grant's reply is held: long enough that, after the step
/// (counted to the whole second), the margin and the uncertainty, some of it is left.
const TTL: Duration = Duration::from_secs(6);
/// Its client's clock uncertainty (a reply shows a step to the whole second only).
const UNCERTAINTY: Duration = Duration::from_secs(1);
/// The step forward.
const STEP: Duration = Duration::from_secs(3);
/// The step back before the attempt, in the scenario of [`steps_around_grant_undercounted`].
const BACK: Duration = Duration::from_secs(2);
/// The step forward after it: a second past where the clock stood before the step back, so
/// that the witness's `operationTime` begins a later second than the held grant's (the
/// cluster time, which stood ahead of the clock after the step back). Its client has no
/// clock uncertainty: the second the old behaviour left out would hide in one. (A larger
/// step leaves the library's lease nothing once counted, and its waiting acquire asks
/// again: the grant judged would be another.)
const STEP_AFTER_BACK: Duration = Duration::from_secs(3);

/// A's grant runs, the server's clock steps 3 s forward, another write of A's client
/// returns and shows the step, then the grant's reply is read; A's renewals are dropped and
/// B asks for the lock every 20 ms. The old behaviour, planted: A believes until its send plus the TTL less the
/// margin and its uncertainty, by its own clock, as if the step had not been shown; the
/// server ended the lease 3 s earlier and B is granted while A believes.
pub(super) async fn step_ignored() -> Result<ControlResult, Box<dyn std::error::Error>> {
    step_in_flight(true, Client::Seasoned).await
}

/// The same for a brand-new client, whose first command is the held attempt and whose
/// other reply is an `unlock`'s: A believes as if the step had not been shown, as the
/// library's first grant did before `0a26365`; B is granted at the server's earlier end.
pub(super) async fn first_grant_step_ignored() -> Result<ControlResult, Box<dyn std::error::Error>>
{
    step_in_flight(true, Client::BrandNew).await
}

/// A (no clock uncertainty) is granted and releases a lock; the server's clock steps 2 s
/// back, which no reply shows; A's grant runs, the clock steps 3 s forward, another write of
/// A's client shows it, then the grant's reply is read. The old behaviour, planted: A counts
/// only the 1 s the step went past its bounds from before the step back, rounded up to the
/// second (2 s), and believes until its send plus the TTL less the margin and those 2 s;
/// the server ended the lease 3 s early, and B is granted while A believes.
pub(super) async fn steps_around_grant_undercounted()
-> Result<ControlResult, Box<dyn std::error::Error>> {
    step_in_flight(true, Client::SteppedBack).await
}

/// What A's client knows of the server's clock before its held attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    /// It was granted and released a lock before (its clock bounds are set).
    Seasoned,
    /// The attempt is its first command: it knows nothing of the server's clock.
    BrandNew,
    /// As [`Client::Seasoned`], and the server's clock stepped back [`BACK`] since, which no
    /// reply showed; the step forward is [`STEP_AFTER_BACK`].
    SteppedBack,
}

/// The scenario of [`step_ignored`]; `planted`: with the old behaviour put back, else with
/// the library as it is (A watches its guard until it says the lease is lost); `client`:
/// whether A was granted a lock before (the other reply is then a `force_release`'s) or
/// is brand-new (the other reply is then an `unlock`'s).
async fn step_in_flight(
    planted: bool,
    client: Client,
) -> Result<ControlResult, Box<dyn std::error::Error>> {
    let uncertainty = match client {
        Client::SteppedBack => Duration::ZERO,
        Client::Seasoned | Client::BrandNew => UNCERTAINTY,
    };
    let server = TestServer::start().await?;
    let recorder = Recorder::new();
    read_clock(&server, &recorder);
    let relay = ReplyHold::start(server.addr()).await?;
    let direct = mongodb::options::ClientOptions::builder()
        .direct_connection(true)
        .build();
    let a_client = mongodb::Client::with_options(relay.client_options(direct))?;
    let a_locks = mongolock::LockClient::builder(a_client.database(DB).collection(COLLECTION))
        .clock_uncertainty(uncertainty)
        .build()?;
    let b_locks = locks(server.new_client());
    b_locks.create_indexes().await?;
    if client != Client::BrandNew {
        // A learns the server's clock from a grant.
        let first = a_locks.mutex(RESOURCE).ttl(TTL).acquire().await;
        let first = first.map_err(|e| format!("A's first grant: {e}"))?;
        let released = first.release().await;
        released.map_err(|e| format!("A's first release: {e}"))?;
    }
    let mut before_back = None;
    let step = match client {
        Client::SteppedBack => {
            before_back = Some(server.clock().now().timestamp_millis());
            let back_at = Instant::now();
            server.clock().step_back(BACK);
            read_clock(&server, &recorder);
            let by_ms = -(BACK.as_millis() as i64);
            let judged = None;
            recorder.op(OpKind::ClockStep { by_ms, judged }, back_at, back_at);
            STEP_AFTER_BACK
        }
        Client::Seasoned | Client::BrandNew => STEP,
    };

    relay.arm();
    let invoked = Instant::now();
    let attempt = tokio::spawn({
        let a_locks = a_locks.clone();
        async move {
            (a_locks.mutex(RESOURCE).ttl(TTL))
                .acquire_timeout(Duration::from_secs(8))
                .await
        }
    });
    relay
        .held(Duration::from_secs(5))
        .await
        .ok_or("the grant's reply was not held")?;
    let stepped_at = Instant::now();
    server.clock().advance(step);
    read_clock(&server, &recorder);
    let witness = match client {
        Client::Seasoned | Client::SteppedBack => a_locks.force_release("witness").await,
        Client::BrandNew => a_locks.unlock("nobody").await,
    };
    witness.map_err(|e| format!("the witness: {e}"))?;
    if !relay.holding() {
        return Err("the grant's reply went on before the step was shown".into());
    }
    // A's renewals are dropped as soon as the reply is on its way: nothing renews the lease.
    relay.release_then_blackhole();
    let a = attempt.await??.ok_or("A was not granted the lock")?;
    // The fault happened: the grant judged ran between the two steps.
    let granted_ms = a.grant().holder().created_at().timestamp_millis();
    if before_back.is_some_and(|before| granted_ms >= before) {
        return Err("A's grant did not run between the step back and the step forward".into());
    }
    let mut a_log = HolderLog::new(recorder.next_id(), 0, Mode::Exclusive, invoked, &a);
    a_log.fake = planted;
    recorder.op(
        OpKind::ClockStep {
            by_ms: step.as_millis() as i64,
            judged: Some(a_log.id),
        },
        stepped_at,
        stepped_at,
    );

    let b_task = tokio::spawn({
        let (b_locks, recorder) = (b_locks.clone(), recorder.clone());
        async move {
            // B asks every 20 ms, so that it is granted as soon as the server frees the lock.
            let invoked = Instant::now();
            let mut b = Ok(None);
            while matches!(b, Ok(None)) && invoked.elapsed() < Duration::from_secs(8) {
                b = b_locks.mutex(RESOURCE).ttl(TTL).try_acquire().await;
                if matches!(b, Ok(None)) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            match b {
                Ok(Some(b)) => {
                    Some(hold_honestly(&recorder, 1, b, invoked, Duration::from_millis(300)).await)
                }
                _ => None,
            }
        }
    });
    if planted {
        // The bug: the step shown is forgotten for this grant, but for what went past the
        // bounds from before a step back, rounded up to the second.
        let counted = match client {
            Client::SteppedBack => step - BACK + Duration::from_millis(999),
            Client::Seasoned | Client::BrandNew => Duration::ZERO,
        };
        let believed = a_log.attempt_sent_at + TTL - TTL / 10 - uncertainty - counted;
        a_log.max_deadline = Some(believed);
        a_log.believed_until = Some(believed);
        tokio::time::sleep_until(believed.into()).await;
        // Told of the loss only at that deadline, by its own clock.
        a_log.notice(believed, LossKind::Deadline);
    } else {
        watch_until(&mut a_log, &a, Instant::now() + TTL).await;
        a_log.check_lost(&a);
        a_log.lets_go(LetGo::Released);
    }
    recorder.holder(a_log);
    std::mem::forget(a);
    if let Some(b_log) = b_task.await? {
        recorder.holder(b_log);
    }
    b_locks.shutdown().await;
    drop(relay);
    server.shutdown().await;
    let name = match client {
        Client::Seasoned => "step shown, ignored",
        Client::BrandNew => "first grant, step shown, ignored",
        Client::SteppedBack => "step back, grant, step forward: counted past the old bounds",
    };
    Ok(finish(name, Check::LossBeforeNextGrant, &recorder))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scenario of `client` with the library as it is finds nothing at all.
    async fn the_library_passes(client: Client) {
        let result = step_in_flight(false, client)
            .await
            .expect("the scenario runs");
        assert!(!result.caught(), "caught: {:?}", result.found());
        assert_eq!(result.found(), vec![], "nothing at all");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_holder_that_ignores_a_step_shown_in_flight_is_caught_by_3() {
        let result = step_ignored().await.expect("the control runs");
        assert!(result.caught(), "not caught: {:?}", result.found());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_library_counts_the_step_and_passes() {
        the_library_passes(Client::Seasoned).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_holder_that_counts_a_step_only_past_bounds_from_before_a_step_back_is_caught_by_3() {
        let result = steps_around_grant_undercounted()
            .await
            .expect("the control runs");
        assert!(result.caught(), "not caught: {:?}", result.found());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_library_counts_a_step_forward_after_a_step_back_around_its_grant_and_passes() {
        the_library_passes(Client::SteppedBack).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_brand_new_client_that_ignores_the_step_for_its_first_grant_is_caught_by_3() {
        let result = first_grant_step_ignored().await.expect("the control runs");
        assert!(result.caught(), "not caught: {:?}", result.found());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_library_shortens_a_brand_new_client_s_first_grant_by_the_step_and_passes() {
        the_library_passes(Client::BrandNew).await;
    }
}
