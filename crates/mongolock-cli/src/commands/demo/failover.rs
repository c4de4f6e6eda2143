//! The failover scene, on the embedded emulator only: the same three locks on an emulated
//! three-member replica set. While workers hold locks, the primary steps down
//! (`replSetStepDown`) and a secondary is elected; w1 keeps `nightly-report` through it and
//! writes the report again afterwards with the same token. The scene has its own log, and
//! the same verification runs on it.
//!
//! What it shows: a grant acknowledged by a majority lives on through the new primary (the
//! holder's renewals reach it), and a holder whose lease does not survive is told before
//! anyone else is granted the lock. A deployment given with `--uri` never sees this scene:
//! the demo does not step down a user's primary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bson::doc;
use mongolock_testkit::ReplicaSet;
use serde::Serialize;
use tokio::sync::watch;

use super::log::{Lock, Log, Mode, Output, What};
use super::verify::{self, Report};
use super::workers::{self, Shared, TTL};

/// The scene's members.
const MEMBERS: usize = 3;

/// How far behind the primary each secondary applies its writes.
const LAG: Duration = Duration::from_millis(1);

/// How long the scene runs at least: the step-down, the election, and one lease's renewal
/// through the new primary.
const SCENE_MIN: Duration = Duration::from_secs(5);

/// How long after w1's grant the primary steps down (others have taken locks by then).
const STEP_DOWN_AFTER_GRANT: Duration = Duration::from_millis(700);

/// What the failover scene did, and its verification.
#[derive(Debug, Serialize)]
pub(crate) struct FailoverReport {
    /// Members of the set.
    pub(crate) members: usize,
    /// The member that stepped down, if the step-down happened.
    pub(crate) stepped_down: Option<usize>,
    /// The member elected after it.
    pub(crate) new_primary: Option<usize>,
    /// The term before the step-down, and after the election.
    pub(crate) terms: (i64, i64),
    /// Seconds from the scene's start to the step-down.
    pub(crate) step_down_at_s: Option<f64>,
    /// Who held what when the primary stepped down (`w1 nightly-report`).
    pub(crate) held_at_step_down: Vec<String>,
    /// Holds granted before the step-down and released normally after the election: leases
    /// that lived on through the new primary.
    pub(crate) held_through: usize,
    /// Whether w1's write after the failover, with the token of its grant from before it,
    /// was accepted (`None`: it did not write, having lost its lease or never held).
    pub(crate) write_after_failover_accepted: Option<bool>,
    /// The scene's verification, as for the first scene.
    pub(crate) report: Report,
}

/// The scene's step-down, as it happened.
#[derive(Debug, Clone, Copy)]
struct StepDown {
    /// When the step-down was asked.
    at: Instant,
    /// The member that was primary.
    from: usize,
    /// Its term.
    term: i64,
}

/// Runs the scene: starts the set, the workers and the step-down, and verifies the log.
/// `workers` workers take part (w1 holds through the failover; the others are ordinary).
///
/// # Errors
///
/// The set does not start or elect, or the scene's setup (indexes, the store) fails.
pub(crate) async fn scene(
    out: Output,
    db: &str,
    collection: &str,
    workers: usize,
    seconds: u64,
) -> anyhow::Result<FailoverReport> {
    let set = ReplicaSet::builder()
        .members(MEMBERS)
        .lag(LAG)
        .start()
        .await
        .context("cannot start the emulated replica set")?;
    set.wait_for_primary(Duration::from_secs(10))
        .await
        .context("the emulated replica set elected no primary")?;
    let start = Instant::now();
    let log = Arc::new(Log::new(start, out));
    let (stop_tx, stop_rx) = watch::channel(false);
    let shared = Shared {
        log: log.clone(),
        prefix: String::new(),
        stop: stop_rx,
        // Every member's clock is this machine's (no offsets are set in this scene).
        server_clock: Some((Instant::now(), set.shared_clock().now().timestamp_millis())),
        db: db.to_owned(),
        collection: collection.to_owned(),
    };
    let setup = set.client();
    shared
        .lock_client(&setup)
        .create_indexes()
        .await
        .context("cannot create the lock collection's indexes on the set")?;
    let store = shared.store(&setup);
    store.reset().await?;
    introduce(&log, &set, workers);

    let (over_tx, over_rx) = watch::channel(None);
    let holder = tokio::spawn(hold_through(shared.clone(), 1, set.new_client(), over_rx));
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 2..=workers {
        tasks.spawn(workers::ordinary(shared.clone(), worker, set.new_client()));
    }

    let scene_end = start + SCENE_MIN.max(Duration::from_secs(seconds));
    let (step_down, held_at_step_down, skipped) = match step_down(&set, &log, scene_end).await {
        Ok((step, held)) => (Some(step), held, Vec::new()),
        Err(why) => {
            log.say(&format!("          (no failover: {why})"));
            (None, Vec::new(), vec![format!("the failover: {why}")])
        }
    };
    let _ = over_tx.send(Some(Instant::now()));
    tokio::time::sleep_until(scene_end.into()).await;
    let give_up = Instant::now() + TTL * 3;
    while !holder.is_finished() && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shared.stop_all(&stop_tx, &mut tasks).await;
    holder.abort();
    let _ = holder.await;
    let finish = Instant::now();

    let mut accepted = std::collections::HashMap::new();
    for lock in super::store::Store::GUARDED {
        accepted.insert(lock, store.accepted(lock).await?);
    }
    let report = verify::verify(&log, finish, &accepted, "emulated set", workers, skipped);
    let entries = log.entries();
    let new_primary = set.primary();
    let result = FailoverReport {
        members: MEMBERS,
        stepped_down: step_down.map(|s| s.from),
        new_primary: step_down.and(new_primary),
        terms: (step_down.map_or(set.term(), |s| s.term), set.term()),
        step_down_at_s: step_down.map(|s| s.at.saturating_duration_since(start).as_secs_f64()),
        held_at_step_down,
        held_through: step_down.map_or(0, |s| held_through(&entries, s.at)),
        write_after_failover_accepted: entries.iter().find_map(|e| match e.what {
            What::Wrote { accepted, .. }
                if e.worker == 1 && step_down.is_some_and(|s| e.at > s.at) =>
            {
                Some(accepted)
            }
            _ => None,
        }),
        report,
    };
    set.shutdown().await;
    Ok(result)
}

/// What the scene is about to show.
fn introduce(log: &Log, set: &ReplicaSet, workers: usize) {
    let others = if workers == 2 {
        "w2".to_owned()
    } else {
        format!("w2..w{workers}")
    };
    let pad = others.len().max(2);
    log.say(&format!(
        "\n\
         Scene 2, a failover: the same locks on an emulated {MEMBERS}-member replica set at\n\
         {hosts}.\n\
         Secondaries apply each write {lag} ms after the primary, and every grant waits for a\n\
         majority of the members.\n\
         \n\
         \x20 {w1:<pad$}  takes nightly-report and keeps it through the failover, then writes the\n\
         \x20 {blank:<pad$}  report again with the same token.\n\
         \x20 {others:<pad$}  take locks in turn, as before.\n\
         \n\
         While they hold, the primary steps down and a secondary is elected. A lease granted\n\
         before must live on through the new primary, or its holder be told it lost it\n\
         before anyone else is granted the lock.\n\
         \n\
         {:>8}  {:<4} {:<width$} | {}",
        "time",
        "who",
        "what happened",
        "who holds what after it",
        w1 = "w1",
        blank = "",
        hosts = set.hosts().join(", "),
        lag = LAG.as_millis(),
        width = super::log::WIDTH,
    ));
}

/// Waits for w1 to hold `nightly-report` (at most until `scene_end`), then asks the
/// primary to step down and waits for the election; the step-down and who held what at
/// that moment, or why there was none.
async fn step_down(
    set: &ReplicaSet,
    log: &Log,
    scene_end: Instant,
) -> Result<(StepDown, Vec<String>), String> {
    loop {
        let granted = log.entries().into_iter().find(|e| {
            e.worker == 1 && e.lock == Lock::Report && matches!(e.what, What::Acquired { .. })
        });
        if let Some(grant) = granted {
            tokio::time::sleep_until((grant.at + STEP_DOWN_AFTER_GRANT).into()).await;
            break;
        }
        if Instant::now() >= scene_end {
            return Err("w1 did not get nightly-report in time".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let from = set.primary().ok_or("the set had no primary")?;
    let term = set.term();
    let held: Vec<String> = log
        .holding()
        .into_iter()
        .map(|(worker, lock)| format!("w{worker} {}", lock.name()))
        .collect();
    let at = Instant::now();
    log.say(&format!(
        "{:>8}        PRIMARY STEPS DOWN: member {from} (term {term}), while {} hold locks",
        log.time(at),
        held.join(", ")
    ));
    let admin = set.client().database("admin");
    let asked = admin
        .run_command(doc! {"replSetStepDown": 10, "secondaryCatchUpPeriodSecs": 5})
        .await;
    let elected = loop {
        match set.primary() {
            Some(primary) if primary != from => break Some(primary),
            _ if at.elapsed() > Duration::from_secs(10) => break None,
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    };
    match (asked, elected) {
        (Ok(_), Some(primary)) => {
            log.say(&format!(
                "{:>8}        member {primary} is ELECTED primary (term {}); the old one is a secondary",
                log.time(Instant::now()),
                set.term()
            ));
            Ok((StepDown { at, from, term }, held))
        }
        (Err(error), _) => Err(format!("replSetStepDown failed: {error}")),
        (Ok(_), None) => Err("no member was elected within 10 s".to_owned()),
    }
}

/// Holds granted before `step_down` and released normally after it.
fn held_through(entries: &[super::log::Entry], step_down: Instant) -> usize {
    entries
        .iter()
        .filter(|e| matches!(e.what, What::Acquired { .. }) && e.at < step_down)
        .filter(|grant| {
            entries.iter().any(|e| {
                e.hold == grant.hold && e.at > step_down && matches!(e.what, What::Released)
            })
        })
        .count()
}

/// w1: takes `nightly-report`, writes the report, and keeps the lock until a lease's TTL
/// after the election (`failover_over`: when the new primary was elected, or when the
/// scene gave up on the failover), watching for its loss; then writes the report again with
/// the same token, and releases. Told of a loss, it stops at once.
async fn hold_through(
    shared: Shared,
    worker: usize,
    client: mongodb::Client,
    failover_over: watch::Receiver<Option<Instant>>,
) {
    let locks = shared.lock_client(&client);
    let store = shared.store(&client);
    let (lock, mode) = (Lock::Report, Mode::Mutex);
    let Some((guard, hold, token)) = shared.take(&locks, worker, lock, mode).await else {
        return;
    };
    shared.write(&store, worker, lock, hold, token, false).await;
    // Hold until a TTL after the election (its renewals then went through the new primary),
    // noting the lease's local deadline meanwhile.
    let lost = loop {
        let over = *failover_over.borrow();
        let until = match over {
            Some(at) => at + TTL + Duration::from_millis(200),
            None => Instant::now() + Duration::from_millis(100),
        };
        match workers::watch(&shared.log, hold, &guard, until).await {
            Some(reason) => break Some(reason),
            None if over.is_some() => break None,
            None => {}
        }
    };
    match lost {
        Some(reason) => {
            let told = workers::told(reason, workers::reason_text(reason).to_owned());
            shared.log.record(worker, lock, hold, told);
        }
        None => {
            shared.write(&store, worker, lock, hold, token, false).await;
            shared.log.record(worker, lock, hold, What::Released);
            if let Err(error) = guard.release().await {
                shared.log.say(&format!(
                    "          w{worker}: releasing {} said: {error}",
                    lock.name()
                ));
            }
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), locks.shutdown()).await;
}

impl FailoverReport {
    /// The scene's verification, then what the failover did.
    pub(crate) fn print(&self) {
        self.report.print_checks();
        let mut text = String::new();
        let info = "      ";
        match (self.stepped_down, self.new_primary, self.step_down_at_s) {
            (Some(from), Some(to), Some(at)) => {
                text += &format!(
                    "  {info}  the failover: member {from} stepped down at {at:.3}s, member {to} was elected (term {} -> {})\n",
                    self.terms.0, self.terms.1
                );
                text += &format!(
                    "  {info}  held at the step-down: {}\n",
                    self.held_at_step_down.join(", ")
                );
                text += &format!(
                    "  {info}  leases that lived on through the new primary (granted before, released after): {}\n",
                    self.held_through
                );
                text += &match self.write_after_failover_accepted {
                    Some(true) => format!(
                        "  {info}  w1 kept nightly-report through it: its write after the failover, with its old grant's token, was accepted"
                    ),
                    Some(false) => format!(
                        "  {info}  w1's write after the failover, with its old grant's token, was REFUSED"
                    ),
                    None => format!(
                        "  {info}  w1 did not write after the failover (it was told it lost nightly-report)"
                    ),
                };
            }
            _ => text += &format!("  {info}  the failover did not happen (see skipped above)"),
        }
        super::log::emit(&mut std::io::stdout().lock(), text.trim_end());
    }
}
