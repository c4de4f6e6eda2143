//! A step of the server's clock while the reply to a grant is on its way
//! ([`ClockSteps`], [`ExtraFault::ClockStepInFlight`]).
//!
//! The worker sent for it connects a second client of its slot through a [`ReplyHold`] in
//! front of the slot's proxy, with no clock uncertainty ([`ClockSteps::uncertainty`]). That
//! client takes the resource once and releases
//! it (so that it knows the server's clock from a grant's `$$NOW`), then asks again while the
//! relay holds back the reply to its attempt. Once the attempt has run, the emulator's clock
//! steps (forward or back); another write of the same client (a `force_release` of a
//! witness resource it took low-level before the attempt, so that the write changes a
//! document) returns and shows the step; only then does the grant's reply go on. The step
//! is recorded as [`OpKind::ClockStep`], naming the holder it judges, with a reading of the
//! server's clock right after it.
//!
//! - **Forward**: the server counts the lease from its clock before the step, so it ends
//!   that much earlier; the holder must count the step. Its client's renewals are dropped
//!   from the moment the reply goes on (none lands), and the worker's own client asks for
//!   the resource every 20 ms: (3) judges that the
//!   holder knew it had lost the lease before that client was granted it, and (1) that they
//!   never both believed.
//! - **Back**: the server ends the lease later by its reckoning; the holder holds half its
//!   TTL and must not be told it lost the lease for it.
//! - **Back, then forward**: the clock steps back 0.5–1 s after the witness is taken and
//!   before the attempt is sent (no reply shows it before the grant's), then forward 2–3 s
//!   once the attempt has run, as at a failover to a member behind and then to one ahead.
//!   The grant's reading shows the step back and the witness's reply the step forward after
//!   it; judged as a forward step. Whether the grant ran between the two steps (its `$$NOW`
//!   below the clock before the step back) is recorded with how it went.
//!
//! Whether the other reply showed the step is checked, not assumed: the step counts as shown
//! only if that reply's `operationTime` passed every one the client read before and reached
//! the server's clock after the step (the stepped client's write replies are watched by
//! command monitoring). On a replica set the cluster time often stands ahead of the
//! primary's clock (after a failover from a primary whose clock was ahead), and a write that
//! wrote nothing answers the newest oplog entry's time (hence the witness the client holds,
//! whose force release writes one): the reply then shows no step, the library cannot count
//! it (its server clock's documentation says so), and the step is recorded unjudged,
//! excusing its holder as a jump does. Before this check, every
//! `--replset --long` run reported (1) and (3) on the holder of such a step.
//!
//! How each went is recorded ([`crate::history::Recorder::extra`]), so that a step whose
//! reply was not held past it (or that never ran) is told apart: a fault that did not happen
//! proves nothing.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mongodb::event::command::CommandEvent;
use mongolock::LockClient;
use rand::Rng;

use super::line::Asked;
use super::step_back::ClearOnDrop;
use super::{COLLECTION, ClockSteps, DB, Held, StepWay, Worker, lock, owner_label};
use crate::history::{
    AcquireCall, ExtraFault, FaultKind, FromLibrary, HolderLog, LetGo, OpEvent, OpKind,
    ReleaseResult, watch_until,
};
use crate::relay::ReplyHold;

/// How long the relay waits for the attempt's reply before the step is given up.
const HOLD_WITHIN: Duration = Duration::from_secs(3);

/// The outcome of a forward step whose holder believed past the other client's grant (a
/// violation of (1) and (3), unless another fault excused it).
const BELIEVED_PAST: &str = "believed past the other client's grant";

/// How a step forward went for its holder `log`, watched to the end, given when the other client's grant reached it (`granted`) and the operator actions and
/// clock moves recorded by then (`ops`): read as (3) reads it. (3) compares the holder's
/// loss as its log has it ([`HolderLog::lost_at`]: its first notice) with the other
/// client's grant, and excuses a holder whose lease something else may have ended unseen
/// (a clock jump of the fleet's faults, which does not wait for a step to end, or another
/// forward step, or a force release of the resource, from its attempt's send to the grant:
/// [`OpKind::ends_leases_of`]). The label once read the holder's deadline as sampled
/// (`max_deadline`, the latest seen, which misses a shortening the library made after it)
/// and excused nothing: in a `--long` run (seed 5555557) it counted 3 "believed past the
/// other client's grant" where (3) judged none.
fn forward_outcome(log: &HolderLog, granted: Option<Instant>, ops: &[OpEvent]) -> &'static str {
    let excused = |granted: Instant| {
        ops.iter().any(|op| {
            op.kind.ends_leases_of(&log.resource, log.id)
                && op.start <= granted
                && op.end > log.attempt_sent_at
        })
    };
    match (log.lost_at(), granted) {
        (Some(lost), Some(granted)) if lost <= granted => {
            "told of the loss before the other client's grant"
        }
        (Some(_), Some(granted)) if excused(granted) => {
            "told after the other client's grant, its lease ended unseen (excused by (3))"
        }
        (Some(_), Some(_)) => BELIEVED_PAST,
        (Some(_), None) => "told of the loss, the other client not granted",
        (None, _) => "never told of the loss",
    }
}

impl Worker {
    /// Carries out a clock step (`way`) while a grant's reply is held back (see the module's
    /// documentation), unless another client is carrying one out.
    pub(super) async fn clock_step(&mut self, locks: &LockClient, way: StepWay) -> Held {
        let Some(steps) = self.workload.clock_steps.clone() else {
            return Held::Done;
        };
        let kind = ExtraFault::ClockStepInFlight;
        if self.stepping.swap(true, Ordering::SeqCst) {
            self.recorder
                .extra(kind, self.index, "not carried out: another step under way");
            return Held::Done;
        }
        // Cleared however this ends, a kill that drops the runtime mid-step included: left
        // set, it would stop every later step of the run, both kinds.
        let _stepping = ClearOnDrop(self.stepping.clone());
        let ended = match ReplyHold::start(self.proxy.addr()).await {
            Ok(relay) => self.step_in_flight(locks, &steps, &relay, way).await,
            Err(_) => "not carried out: the relay did not start".to_owned(),
        };
        self.recorder.extra(kind, self.index, ended);
        Held::Done
    }

    /// The step itself, through `relay`; how it went, in a few words.
    async fn step_in_flight(
        &mut self,
        locks: &LockClient,
        steps: &ClockSteps,
        relay: &ReplyHold,
        step_way: StepWay,
    ) -> String {
        let forward = step_way != StepWay::Back;
        let way = match step_way {
            StepWay::Forward => "forward",
            StepWay::Back => "back",
            StepWay::BackThenForward => "back then forward",
        };
        let mut options = relay.client_options(self.options.clone());
        let replies = ReplyTimes::default();
        replies.watch(&mut options);
        let Ok(client) = mongodb::Client::with_options(options) else {
            return format!("{way}: not carried out: no client");
        };
        let Ok(stepped) = LockClient::builder(client.database(DB).collection(COLLECTION))
            .clock_uncertainty(steps.uncertainty)
            .build()
        else {
            return format!("{way}: not carried out: the clock uncertainty is out of range");
        };
        let owner = owner_label(self.index, self.incarnation);
        self.calls += 1;
        let lock_id = format!("{owner}.step-{}", self.calls);
        let wait = steps.ttl + self.workload.acquire_timeout;
        let asked = Asked {
            recorder: self.recorder.clone(),
            client: self.index,
            resource: steps.resource.clone(),
            timeout: wait,
            hold: None,
        };
        let mutex = |locks: &LockClient, lock_id: &str| {
            (locks.mutex(&steps.resource).ttl(steps.ttl))
                .owner(owner.clone())
                .lock_id(lock_id.to_owned())
        };
        // A grant first: the client learns the server's clock from its `$$NOW`.
        let first = format!("{lock_id}-first");
        if asked.wait(mutex(&stepped, &first), &first).await.is_none() {
            stepped.shutdown().await;
            return format!("{way}: not carried out: the first grant failed");
        }
        // The witness: a resource this client takes low-level now and force-releases after
        // the step, so that the write changes a document (on a set it writes an oplog
        // entry at the server's time after the step; a write that changed nothing would
        // answer the newest entry's, from before it). Not taken, the witness is a write
        // that changes nothing, and the check below tells whether it showed the step. Its
        // TTL is the longest (S6) lets a grant nobody believes in live (the acquire timeout
        // plus the run's TTL): a witness left behind (its force release failed, or a kill
        // dropped the step's runtime) ends within it. A witness that ended before its force
        // release (a reply held long, a long step) still changes the document: the force
        // release takes every entry out, ended ones too.
        let witness = format!("{}-witness", steps.resource);
        let witness_ttl = self.workload.acquire_timeout + self.workload.ttl;
        let witness_details = mongolock::LockDetails::default().ttl(witness_ttl);
        let _ = stepped
            .xlock(&witness, &format!("{lock_id}-witness"), witness_details)
            .await;
        // Back before the attempt, unseen by any reply before the grant's.
        let back_before = match step_way {
            StepWay::BackThenForward => {
                let by_ms = -(self.rng.random_range(steps.back_ms.0..=steps.back_ms.1) as i64);
                let (at, before_ms) = self.step_clock(by_ms);
                let judged = None;
                self.recorder
                    .op(OpKind::ClockStep { by_ms, judged }, at, at);
                Some(before_ms)
            }
            _ => None,
        };
        relay.arm();
        let invoked = Instant::now();
        let again = mutex(&stepped, &lock_id);
        let mut attempt = Box::pin(again.acquire_timeout(wait));
        let held = tokio::select! {
            biased;
            _ = &mut attempt => None,
            held = relay.held(HOLD_WITHIN) => held,
        };
        let Some(held_at) = held else {
            relay.release();
            let _ = attempt.await;
            release_witness(&stepped, &witness).await;
            stepped.shutdown().await;
            return format!("{way}: not carried out: no reply held");
        };
        let by_ms = if forward {
            self.rng
                .random_range(steps.forward_ms.0..=steps.forward_ms.1) as i64
        } else {
            -(self.rng.random_range(steps.back_ms.0..=steps.back_ms.1) as i64)
        };
        let (stepped_at, _) = self.step_clock(by_ms);
        let after_step_ms = self.recorder.server_ms(Instant::now());
        // Another reply of the same client, read before the grant's.
        let read_first = release_witness(&stepped, &witness).await && relay.holding();
        let witness_read = Instant::now();
        if forward {
            // Its renewals dropped as soon as the reply is on its way: none lands.
            relay.release_then_blackhole();
        } else {
            relay.release();
        }
        let got = attempt.await;
        let released_at = Instant::now();
        // Whether that reply could show the step: its `operationTime` past every other one
        // the client read, the grant's own included (read by now: the cluster time when it
        // ran). On a set, after a failover from a primary whose clock was ahead (or after a
        // step back), the cluster time stands ahead of the primary's clock, and a write's
        // `operationTime` stays at it until the clock catches up: a step forward smaller
        // than that lead shows in no reply but a grant, as the library's documentation of
        // its server clock says. Such a step was not shown: it is recorded as unjudged, and
        // excuses its holder as a jump does. A step back shows in no `operationTime` (the
        // cluster time never goes back): it is judged by whether the holder kept its lease,
        // whatever the reply showed.
        let shown =
            read_first && (!forward || replies.showed(stepped_at..witness_read, after_step_ms));
        let kind = ExtraFault::ClockStepInFlight.recorded_as();
        self.recorder
            .fault(kind, Some(self.index), held_at, released_at);
        self.recorder.acquire_call(AcquireCall {
            client: self.index,
            resource: steps.resource.clone(),
            lock_id: lock_id.clone(),
            invoked_at: invoked,
            ended_at: released_at,
            granted: matches!(got, Ok(Some(_))),
            timeout: Some(wait),
        });
        let judged_if_granted = shown || !forward;
        let shown = match (read_first, shown) {
            (true, true) => "held past the step, another reply read first",
            (true, false) => {
                "held past the step, another reply read first but its operationTime showed \
                 no step (the cluster time stood ahead of the server's clock, or the reply \
                 carried the time of an earlier oplog entry: a write that changed nothing)"
            }
            (false, _) => "held past the step, no other reply read first",
        };
        let cut_at = released_at;
        let Ok(Some(guard)) = got else {
            relay.blackhole(false);
            self.recorder.op(
                OpKind::ClockStep {
                    by_ms,
                    judged: None,
                },
                stepped_at,
                stepped_at,
            );
            stepped.shutdown().await;
            return format!("{way}: {shown}, not granted");
        };
        let mut log = self.log_exclusive_and_write(invoked, &guard);
        // The grant's `$$NOW` below the clock before the step back: it ran between the two.
        let grant_ms = guard.grant().holder().created_at().timestamp_millis();
        let between = match back_before {
            Some(before_ms) if grant_ms < before_ms => ", the grant ran between the steps",
            Some(_) => ", the grant ran before the step back",
            None => "",
        };
        self.recorder.op(
            OpKind::ClockStep {
                by_ms,
                judged: judged_if_granted.then_some(log.id),
            },
            stepped_at,
            stepped_at,
        );
        let outcome = if forward {
            // No renewal since the reply went on; the worker's own client asks for the lease.
            let until = cut_at + steps.ttl + Duration::from_secs(1);
            let other = format!("{lock_id}-other");
            // It polls, so that it is granted as soon as the server frees the lock, whatever
            // it knows of the server's clock.
            let (_, granted) = tokio::join!(
                watch_until(&mut log, &guard, until),
                asked.poll(mutex(locks, &other), &other)
            );
            relay.blackhole(false);
            self.recorder.fault(
                FaultKind::Partition,
                Some(self.index),
                cut_at,
                Instant::now(),
            );
            let outcome = forward_outcome(&log, granted, &self.recorder.ops());
            if outcome == BELIEVED_PAST {
                // What the client read of the server's clock, for the report to trace: the
                // `operationTime` of each write reply (seconds, with when it was read, from
                // the step), the server's clock after the step, and the grant's `$$NOW`.
                format!(
                    "{outcome} (replies' operationTime s at ms from the step: {}; server's \
                     clock after the step {after_step_ms:?} ms; grant's $$NOW {grant_ms} ms)",
                    replies.since(stepped_at)
                )
            } else {
                outcome.to_owned()
            }
        } else {
            let until = Instant::now() + steps.ttl / 2;
            match watch_until(&mut log, &guard, until).await {
                Some(_) => "lease reported lost",
                None => "lease kept",
            }
            .to_owned()
        };
        log.lets_go(LetGo::Released);
        log.release = Some(ReleaseResult::of(&guard.release().await));
        self.recorder.holder(log);
        stepped.shutdown().await;
        format!("{way}: {shown}{between}, {outcome}")
    }

    /// Steps the server's clock by `by_ms` (back if negative), with readings of it just
    /// before and just after, so that every instant maps to the server's time through the
    /// last reading before it (`History::server_ms`), across a step back too. Returns when
    /// it stepped and the server's clock just before (ms since the epoch).
    fn step_clock(&mut self, by_ms: i64) -> (Instant, i64) {
        let before_ms = self.clock.now().timestamp_millis();
        self.recorder.server_clock(Instant::now(), before_ms);
        let stepped_at = Instant::now();
        let by = Duration::from_millis(by_ms.unsigned_abs());
        if by_ms >= 0 {
            self.clock.advance(by);
        } else {
            self.clock.step_back(by);
        }
        let now = Instant::now();
        self.recorder
            .server_clock(now, self.clock.now().timestamp_millis());
        (stepped_at, before_ms)
    }
}

/// Force-releases the witness, trying again a few times (100 ms apart) if the write fails
/// (a failover on a set): left in force, its grant, which nobody believes in, would outlive
/// (S6)'s bound (its TTL is ten of the workload's) and keep the probe from it
/// (`--replset --long --seed 41140`, run 41144). True if it was released.
async fn release_witness(stepped: &LockClient, witness: &str) -> bool {
    for _ in 0..5 {
        if stepped.force_release(witness).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The `operationTime` of every write reply a client read (the commands whose reply the
/// library reads the server's clock from: `Context::write`), with when it was read.
#[derive(Clone, Default)]
struct ReplyTimes(Arc<Mutex<Vec<(Instant, bson::Timestamp)>>>);

impl ReplyTimes {
    /// Has the client of `options` report its write replies here (command monitoring).
    fn watch(&self, options: &mut mongodb::options::ClientOptions) {
        let seen = self.0.clone();
        options.command_event_handler = Some(mongodb::event::EventHandler::callback(
            move |event: CommandEvent| {
                if let CommandEvent::Succeeded(reply) = event
                    && WRITES.contains(&reply.command_name.as_str())
                    && let Ok(time) = reply.reply.get_timestamp("operationTime")
                {
                    lock(&seen).push((Instant::now(), time));
                }
            },
        ));
    }

    /// True if a reply read within `witness` (from the step) showed the server's clock as it
    /// read after the step (`after_ms`, ms since the epoch, if known; see [`showed`]).
    fn showed(&self, witness: std::ops::Range<Instant>, after_ms: Option<i64>) -> bool {
        showed(&lock(&self.0), witness, after_ms)
    }

    /// Every reply's `operationTime` (seconds) with when it was read, in ms from `at`
    /// (negative before it), for a report.
    fn since(&self, at: Instant) -> String {
        let seen = lock(&self.0);
        let ms = |t: Instant| {
            if t >= at {
                (t - at).as_millis() as i64
            } else {
                -((at - t).as_millis() as i64)
            }
        };
        (seen.iter())
            .map(|(t, time)| format!("{}.{} at {}", time.time, time.increment, ms(*t)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The commands the library sends through its write path.
const WRITES: [&str; 4] = ["update", "findAndModify", "delete", "insert"];

/// True if a reply of `seen` read within `witness` (from the step to the witness's return)
/// showed a step of the server's clock at its start: its `operationTime`'s seconds are past
/// those of every other reply, read before the step or after the witness (the held grant's
/// own, the cluster time when it ran), and not behind the server's clock after the step,
/// `after_ms` (a write that wrote nothing answers the newest oplog entry's time, which may
/// come from before the step).
///
/// A second not past every one read before, the library takes as showing nothing. A second
/// not past the held grant's own tells nothing either: after a step back the cluster time
/// stands ahead of the server's clock, and a write then answers it, in that second,
/// whether or not the clock stepped forward since the grant (the library's
/// `a_grant_held_across_steps_is_not_believed_past_its_end_once_a_reply_showed_the_step`,
/// its seed 8: back 1,221 ms, forward 911 ms, the grant and the witness in one second).
fn showed(
    seen: &[(Instant, bson::Timestamp)],
    witness: std::ops::Range<Instant>,
    after_ms: Option<i64>,
) -> bool {
    let others = (seen.iter().filter(|(t, _)| !witness.contains(t)))
        .map(|(_, time)| time.time)
        .max();
    let caught_up = |seconds: u32| after_ms.is_none_or(|ms| i64::from(seconds) >= ms / 1000);
    (seen.iter().filter(|(t, _)| witness.contains(t)))
        .any(|(_, time)| others.is_none_or(|b| time.time > b) && caught_up(time.time))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{LossKind, Mode};

    #[test]
    fn the_forward_step_label_reads_the_loss_and_the_excuses_as_3_does() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut log = HolderLog::granted(7, 0, Mode::Exclusive, "c0", 3);
        (log.invoked_at, log.attempt_sent_at, log.granted_at) = (at(0), at(0), at(100));
        // Sampled once with 5 s left; told at 3,000 ms; the other client granted at 2,000.
        log.max_deadline = Some(at(5_000));
        log.notice(at(3_000), LossKind::Deadline);
        assert_eq!(
            forward_outcome(&log, Some(at(2_000)), &[]),
            "believed past the other client's grant"
        );
        // A clock jump of the fleet's faults in between ended the lease unseen: (3)
        // excuses it, and so does the label (the old one said "believed past").
        let jump = OpEvent {
            kind: OpKind::ClockJump(Duration::from_secs(3)),
            start: at(1_000),
            end: at(1_001),
        };
        assert_eq!(
            forward_outcome(&log, Some(at(2_000)), std::slice::from_ref(&jump)),
            "told after the other client's grant, its lease ended unseen (excused by (3))"
        );
        // The step this holder was shown excuses nothing.
        let own = OpEvent {
            kind: OpKind::ClockStep {
                by_ms: 2_500,
                judged: Some(7),
            },
            ..jump
        };
        assert_eq!(
            forward_outcome(&log, Some(at(2_000)), &[own]),
            "believed past the other client's grant"
        );
        // A first notice before the grant counts, whenever the watch saw it.
        let mut early = log.clone();
        early.notified = Some((at(1_500), LossKind::Deadline));
        assert_eq!(
            forward_outcome(&early, Some(at(2_000)), &[]),
            "told of the loss before the other client's grant"
        );
    }

    /// A reply shows a step only if its `operationTime`'s seconds pass every one read
    /// before the step (the library ignores the rest) and the held grant's own, and reach
    /// the server's clock after it: on a set after a failover from a primary whose clock
    /// was ahead, the cluster time stands still while the step happens, and a write that
    /// wrote nothing answers the newest entry's time, which may be older than the step.
    #[test]
    fn only_a_reply_past_every_earlier_operation_time_and_the_step_shows_it() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let ts = |time: u32, increment: u32| bson::Timestamp { time, increment };
        // The witness is read between the step and 1.2 s.
        let stepped_at = at(1_000)..at(1_200);
        let showed = |seen: &[_], witness: &std::ops::Range<Instant>, after| {
            showed(seen, witness.clone(), after)
        };
        // The clock at 100.2 s, then stepped 2.5 s forward: the witness at 102 s.
        let after = Some(102_700);
        let plain = [(at(0), ts(100, 1)), (at(1_100), ts(102, 1))];
        assert!(showed(&plain, &stepped_at, after));
        assert!(showed(&plain, &stepped_at, None));
        // The cluster time at 104 s from a faster primary: the step shows only as the
        // cluster time ticking its increment.
        let ahead = [(at(0), ts(104, 7)), (at(1_100), ts(104, 9))];
        assert!(!showed(&ahead, &stepped_at, after));
        // Another client's entry written in the next second before the step: past the
        // earlier reply, but not the step.
        let stale = [(at(0), ts(100, 1)), (at(1_100), ts(101, 4))];
        assert!(!showed(&stale, &stepped_at, after));
        assert!(showed(&stale, &stepped_at, None));
        // No reply after the step shows nothing; a first reply after it shows it.
        assert!(!showed(&plain[..1], &stepped_at, after));
        assert!(showed(&plain[1..], &stepped_at, after));
        // The held grant's reply, read after the witness, ran in the witness's second (the
        // cluster time stood there, ahead of the clock after a step back): nothing shown.
        let same_second = [
            (at(0), ts(100, 1)),
            (at(1_100), ts(102, 5)),
            (at(1_300), ts(102, 2)),
        ];
        assert!(!showed(&same_second, &stepped_at, after));
        // In an earlier second: shown.
        let earlier = [
            (at(0), ts(100, 1)),
            (at(1_100), ts(102, 5)),
            (at(1_300), ts(101, 2)),
        ];
        assert!(showed(&earlier, &stepped_at, after));
    }
}
