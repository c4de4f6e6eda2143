//! The negative control on the set (issue 41): a grant acknowledged by a primary that is then
//! rolled back. The primary is partitioned from the other members while clients still reach
//! it; client A asks for a mutex there; the majority elects a new primary after the election
//! timeout (the old one steps down: mongod's `TopologyCoordinator::checkMemberTimeouts`,
//! `src/mongo/db/repl/topology_coordinator.cpp`); client B asks for the same mutex on the new
//! primary; the partition heals and the former primary rolls back what no majority applied
//! (`src/mongo/db/repl/rollback_impl.cpp`, `RollbackImpl::runRollback`). Both clients' faults
//! are in the history as in a run ([`super::Failover::PrimaryPartition`] is recorded as a
//! write-concern error for every client).
//!
//! With `LockClient::with_unsafe_write_concern(w: 1)` A's grant is acknowledged by the
//! partitioned primary alone and B is granted the same mutex while A believes it holds it:
//! (1) must catch the two holders. With the default write concern (`w: "majority"`) the same
//! schedule must show no violation at all. Either way the control says whether the fault
//! really ran (A's attempt was applied on the partitioned primary, and rolled back).
//!
//! The set's steps are the testkit's [`PartitionRollback`], which
//! `crates/mongolock/tests/failover.rs` runs too.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use mongodb::options::WriteConcern;
use mongolock::{LockClient, LockGuard};
use mongolock_testkit::replset::schedule::{PARTITIONED, PartitionRollback};

use crate::check::{self, Check, Outcome};
use crate::controls::{ControlResult, Expected};
use crate::history::{FaultKind, GuardLog, HolderLog, LetGo, Mode, Recorder, ReleaseResult};
use crate::history::{FromLibrary, watch_until};

/// The mutex both clients ask for.
const RESOURCE: &str = "set-control";

/// The lease both ask for.
const TTL: Duration = Duration::from_secs(5);

/// The set's election timeout in the control.
const ELECTION_TIMEOUT: Duration = Duration::from_millis(800);

/// The control, both ways: with `w: 1` (must be caught) and the default (must show nothing).
#[derive(Debug, Clone)]
pub struct SetControl {
    /// With `w: 1`: (1) must catch it.
    pub w1: ControlResult,
    /// What the `w: 1` schedule saw.
    pub w1_ran: Schedule,
    /// With the default write concern: nothing may be found.
    pub majority: Outcome,
    /// What the default schedule saw.
    pub majority_ran: Schedule,
}

impl SetControl {
    /// True if the `w: 1` control was caught with its fault carried out, and the default
    /// write concern showed no violation with its fault carried out.
    pub fn passed(&self) -> bool {
        self.w1.caught()
            && self.w1_ran.carried_out()
            && self.majority.violations.is_empty()
            && self.majority_ran.carried_out()
    }
}

/// What one run of the schedule saw.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    /// A's outcome on the partitioned primary: granted, refused, or the error.
    pub a: String,
    /// Whether B was granted on the new primary.
    pub b_granted: bool,
    /// Whether A's attempt was applied on the partitioned primary (its data named A's lock
    /// id before the heal).
    pub applied_on_old: bool,
    /// The former primary's rollbacks, and the oplog entries they undid.
    pub rollbacks: (usize, usize),
    /// The term the set reached.
    pub term: i64,
}

impl Schedule {
    /// True if the fault ran: A's write was applied on the partitioned primary, the others
    /// elected in a higher term, and the former primary rolled back.
    pub fn carried_out(&self) -> bool {
        self.applied_on_old && self.term >= 2 && self.rollbacks.1 >= 1
    }
}

/// Runs the control both ways, one after the other.
///
/// # Errors
/// The set could not start, or a setup step (indexes, a warm-up grant) failed.
pub async fn run() -> Result<SetControl, Box<dyn std::error::Error>> {
    let (w1, w1_ran) = schedule(true).await?;
    let (majority, majority_ran) = schedule(false).await?;
    Ok(SetControl {
        w1: ControlResult {
            name: "w: 1 grant rolled back by a partition (the set)",
            expected: Expected::Client(Check::Exclusion),
            outcome: w1,
            oracle: None,
        },
        w1_ran,
        majority,
        majority_ran,
    })
}

/// The lock id holding [`RESOURCE`] in member `index`'s own data.
async fn holder_on(schedule: &PartitionRollback, index: usize, db: &str) -> Option<String> {
    let doc = schedule.document_on(index, db, "locks", RESOURCE).await?;
    doc.get_document("exclusive")
        .ok()
        .and_then(|e| e.get_str("lockId").ok())
        .map(str::to_string)
}

/// Holds `guard` (logged in `log`) until `until`, then releases it; returns the log.
async fn hold(mut log: HolderLog, guard: LockGuard, until: Instant) -> HolderLog {
    if watch_until(&mut log, &guard, until).await.is_none() {
        log.check_lost(&guard);
    }
    log.lets_go(LetGo::Released);
    log.release = Some(ReleaseResult::of(&guard.release().await));
    log
}

/// One run of the schedule; `w1` makes both clients use `w: 1`.
async fn schedule(w1: bool) -> Result<(Outcome, Schedule), Box<dyn std::error::Error>> {
    let schedule = PartitionRollback::start(ELECTION_TIMEOUT).await?;
    let set = schedule.set();
    let db = "mongolock_set_control";
    let recorder = Recorder::new();
    let make = |client: mongodb::Client| {
        let locks = LockClient::new(client.database(db).collection("locks"));
        if w1 {
            LockClient::builder(locks.collection().clone())
                .unsafe_write_concern(WriteConcern::nodes(1))
                .build()
                .expect("the default durations are valid")
        } else {
            locks
        }
    };
    let a = make(set.new_client());
    let b = make(set.new_client());
    a.create_indexes().await?;
    // Both clients have found the primary, and every member has the indexes.
    for locks in [&a, &b] {
        if let Some(warm) = locks.mutex("warm-up").try_acquire().await? {
            warm.release().await?;
        }
    }
    schedule.caught_up(Duration::from_secs(5)).await;

    let mut ran = Schedule::default();
    let partitioned_at = schedule.partition();
    let mutex_a = a.mutex(RESOURCE).ttl(TTL);
    let invoked_a = Instant::now();
    let first = tokio::spawn(async move { mutex_a.try_acquire().await });
    schedule.elected(Duration::from_secs(10)).await;
    let first = first.await?;
    ran.applied_on_old = holder_on(&schedule, PARTITIONED, db).await.is_some();
    let until = Instant::now() + Duration::from_secs(3);
    let a_task = match first {
        Ok(Some(guard)) => {
            ran.a = format!("granted token {}", guard.fencing_token());
            let log = HolderLog::new(recorder.next_id(), 0, Mode::Exclusive, invoked_a, &guard);
            Some(tokio::spawn(hold(log, guard, until)))
        }
        Ok(None) => {
            ran.a = "refused".to_owned();
            None
        }
        Err(error) => {
            ran.a = format!("error: {error}");
            None
        }
    };

    // B asks on the new primary until it is answered (its driver may first try the old
    // primary and be refused).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut b_task = None;
    loop {
        let invoked_b = Instant::now();
        match b.mutex(RESOURCE).ttl(TTL).try_acquire().await {
            Ok(Some(guard)) => {
                ran.b_granted = true;
                let log = HolderLog::new(recorder.next_id(), 1, Mode::Exclusive, invoked_b, &guard);
                b_task = Some(tokio::spawn(hold(log, guard, until)));
                break;
            }
            Ok(None) => break,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(_) => break,
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    schedule.heal(Duration::from_secs(10)).await;
    let healed = Instant::now();
    for client in 0..2 {
        recorder.fault(
            FaultKind::WriteConcernError,
            Some(client),
            partitioned_at,
            healed,
        );
    }
    for task in [a_task, b_task].into_iter().flatten() {
        recorder.holder(task.await?);
    }
    ran.rollbacks = schedule.rollbacks();
    ran.term = schedule.term();
    a.shutdown().await;
    b.shutdown().await;
    schedule.shutdown().await;
    let modes: HashMap<String, Mode> = [(RESOURCE.to_owned(), Mode::Exclusive)].into();
    let history = recorder.finish(modes);
    Ok((check::check(&history), ran))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn w1_gives_two_holders_and_the_default_none() {
        let control = run().await.expect("the control runs");
        assert!(control.w1_ran.carried_out(), "{:?}", control.w1_ran);
        assert!(control.w1.caught(), "not caught: {:?}", control.w1.found());
        assert!(
            control.majority_ran.carried_out(),
            "{:?}",
            control.majority_ran
        );
        assert!(
            control.majority.violations.is_empty(),
            "{:?}",
            control.majority.violations
        );
    }
}
