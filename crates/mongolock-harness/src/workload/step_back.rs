//! A step back of the server's clock past the grant of a lock let go of within its minimum
//! hold, while periodic jobs run on several hosts ([`StepBackHold`],
//! [`ExtraFault::StepBackUnderHold`]).
//!
//! mongod's `$$NOW` follows the system clock, which can step back. A job's lock let go of
//! within its minimum hold stays in force until its grant plus the hold, marked `letGoAt`:
//! before `d44da17`, once the clock had stepped back past the grant, the library read such
//! an entry as held again (its `expiresAt`, the hold's end, ahead of `$$NOW` plus its
//! `delayMs`): `renew(lock_id)` renewed it, and the lock id's next acquire got it back with
//! its old token inside its hold, so the job ran twice in one period on one host.
//!
//! The scenario ([`run`]): a few hosts, each a client of its own under a lock id of its own
//! that it keeps (ShedLock's way: the host's name), run a job every period on one resource
//! with `min_hold` and `try_acquire`, their timers late by a few tens of ms each; a job
//! writes once, works 50 ms and lets go, well within the hold. After the first job let go
//! of within its hold, its entry is read (it must be the let-go entry of that grant), and
//! the server's clock steps back by more than the hold and past the grant; the entry is read
//! again with the clock (it must still be there, let go, and the clock before its grant):
//! the scenario checks that the fault happened and says so in how it ended. Then that host,
//! under its lock id, renews (`renew(lock_id)`) and asks again (`try_acquire`) at once; a
//! renewal that renewed anything is logged as a holder believing in that grant again (what
//! a host would do), and a grant as any grant: (10) judges a lease given back after its
//! release returned `Ok`, (S12) a new grant inside the hold, (1) and (2) exclusion and
//! tokens. The hosts' timers go on for the remaining periods.
//!
//! Then, with the host's grant not given back, an operator force-releases the resource
//! ([`Force`]; the fleet uses the library's `force_release`) while the clock still reads
//! before the let-go entry's grant, the entry still let go and in force (checked, and said in
//! how the scenario ended: a run where it never happened fails as vacuous). Before
//! `224dfb8`, a force release counted a let-go entry's delay (its hold) from `$$NOW`, and,
//! the clock stepped back past the grant, the hold ended early by the server's clock; the
//! next host asks every 50 ms until it is granted, and (S12) judges its grant against the
//! hold (a force release after the let-go mark does not excuse a hold).
//!
//! The negative controls (`controls::step_back`) plant the old behaviours: the host renews
//! with the old time-only test of a holding entry, sent as a raw update; the operator's force
//! release with the old pipeline's entry part, sent as a raw update.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongodb::Collection;
use mongolock::LockClient;
use mongolock_testkit::Clock;
use rand::Rng;
use rand::rngs::StdRng;

use super::{Held, StepBackHold, Worker, owner_label};
use crate::history::{
    AcquireCall, ExtraFault, ExtraLog, FromLibrary, GuardLog, HolderLog, LetGo, Mode, OpKind,
    Recorder, ReleaseResult,
};

/// How long a job works under its lock.
const JOB: Duration = Duration::from_millis(50);

/// What one run of the scenario works with, wherever it runs (a worker of the fleet, or a
/// control on an emulator of its own).
pub struct Stage<'a> {
    /// One lock client per host (two or more).
    pub hosts: Vec<LockClient>,
    /// A plain client of the lock collection: reads the entry (and, planted, renews it).
    pub raw: Collection<Document>,
    /// The server's clock.
    pub clock: Clock,
    /// Where the history goes.
    pub recorder: &'a Recorder,
    /// The client slot the holders are logged under.
    pub client: usize,
    /// The prefix of the hosts' lock ids.
    pub owner: String,
    /// The shape of the scenario.
    pub shape: StepBackHold,
    /// The TTL of the jobs' leases.
    pub ttl: Duration,
    /// Plant the old behaviour: the host renews its let-go entry with the old time-only test.
    pub planted: bool,
    /// Whether, and how, an operator force-releases the resource after the step (and the
    /// host's renewal and retry), the clock still before the let-go entry's grant.
    pub force: Force,
}

/// An operator's force release of the job's resource after the step back, while the let-go
/// entry's hold is under way and the clock reads before its grant; then another host asks
/// every 50 ms until it is granted (or the clock is [`FORCE_POLL_PAST_MS`] past the hold's
/// end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Force {
    /// No force release.
    None,
    /// `force_release(resource)`, the library as it is: the hold stays until grant + hold.
    Library,
    /// The old force release, planted as a raw update (the entry's part of the pipeline of
    /// before `224dfb8`): a let-go entry's delay (its hold) counted from `$$NOW`, which,
    /// stepped back past the grant, ends the hold early by the server's clock.
    OldPipeline,
}

/// How far past the hold's end (by the server's clock) the host after a force release goes
/// on asking.
pub const FORCE_POLL_PAST_MS: i64 = 500;

/// How a run of the scenario went.
#[derive(Debug, Clone, Default)]
pub struct Went {
    /// How far the server's clock went back below the let-go entry's grant, in ms: `None`
    /// if the step was not made (or did not go past it).
    pub past_grant_ms: Option<i64>,
    /// The step, in ms.
    pub by_ms: u64,
    /// What the host's `renew` of its lock id right after the step renewed.
    pub renewed: u64,
    /// The token the host's `try_acquire` right after the step was granted, if any.
    pub regranted: Option<i64>,
    /// The let-go entry's token.
    pub token: i64,
    /// Jobs granted over all periods (the first included).
    pub jobs: usize,
    /// The most jobs run in one period, over all hosts: 1 if each ran at most once per
    /// period (a job run again under a renewed let-go grant, or under a grant given back or
    /// anew right after the step, counts in its period).
    pub most_in_a_period: usize,
    /// Why the step was not made, if it was not.
    pub not_made: Option<String>,
    /// How far before the let-go entry's grant the server's clock read when the operator's
    /// force release was sent (ms), the entry still let go and in force: `None` if no force
    /// release was sent so.
    pub forced_before_grant_ms: Option<i64>,
    /// Why no force release was sent after the step, if one was asked for and the step made.
    pub not_forced: Option<String>,
    /// After the force release: the next grant's server time less the hold's end (ms;
    /// negative: inside the hold), if another host was granted by
    /// [`FORCE_POLL_PAST_MS`] past it.
    pub after_force_ms: Option<i64>,
}

impl Went {
    /// How it ended, in a few words (the report counts each wording).
    pub fn ended(&self) -> String {
        if let Some(why) = &self.not_made {
            return format!("not carried out: {why}");
        }
        let renew = if self.renewed == 0 {
            "renew renewed nothing"
        } else {
            "renew renewed the let-go entry"
        };
        let retry = match self.regranted {
            None => "its retry refused",
            Some(token) if token == self.token => "its retry given the let-go entry back",
            Some(_) => "its retry granted anew",
        };
        // No figures: the report counts each wording.
        let force = match (self.forced_before_grant_ms, &self.not_forced) {
            (Some(_), _) => {
                let next = match self.after_force_ms {
                    Some(m) if m < 0 => "the next grant inside the hold",
                    Some(_) => "the next grant at the hold's end or later",
                    None => "no grant by the hold's end",
                };
                format!("; {FORCED} before the grant, {next}")
            }
            (None, Some(why)) => format!("; no force release: {why}"),
            (None, None) => String::new(),
        };
        format!("{CARRIED_OUT}: {renew}, {retry}{force}")
    }
}

impl Worker {
    /// Carries out a step back under a hold (see the module's documentation), unless another
    /// client is stepping the clock.
    pub(super) async fn step_back(&mut self) -> Held {
        let Some(shape) = self.workload.step_back.clone() else {
            return Held::Done;
        };
        let kind = ExtraFault::StepBackUnderHold;
        if self.stepping.swap(true, Ordering::SeqCst) {
            self.recorder
                .extra(kind, self.index, "not carried out: another step under way");
            return Held::Done;
        }
        // Cleared however this ends, a kill that drops the runtime included.
        let _stepping = ClearOnDrop(self.stepping.clone());
        let clients: Result<Vec<mongodb::Client>, _> = (0..shape.hosts)
            .map(|_| mongodb::Client::with_options(self.options.clone()))
            .collect();
        let ended = match clients {
            Ok(clients) => {
                let hosts: Vec<LockClient> = (clients.iter())
                    .map(|c| LockClient::new(c.database(super::DB).collection(super::COLLECTION)))
                    .collect();
                let raw = clients[0].database(super::DB).collection(super::COLLECTION);
                self.calls += 1;
                let stage = Stage {
                    hosts: hosts.clone(),
                    raw,
                    clock: self.clock.clone(),
                    recorder: &self.recorder,
                    client: self.index,
                    owner: format!(
                        "{}.back-{}",
                        owner_label(self.index, self.incarnation),
                        self.calls
                    ),
                    shape,
                    ttl: self.workload.ttl,
                    planted: false,
                    force: Force::Library,
                };
                let went = run(&stage, &mut self.rng).await;
                for host in hosts {
                    host.shutdown().await;
                }
                went.ended()
            }
            Err(_) => "not carried out: no client".to_owned(),
        };
        self.recorder.extra(kind, self.index, ended);
        Held::Done
    }
}

/// Clears the fleet's stepping flag when dropped (both clock-step faults hold one while
/// they step).
pub(super) struct ClearOnDrop(pub(super) Arc<AtomicBool>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// How many steps back under a hold `extras` show carried out: the clock read before a
/// let-go entry's grant while the entry was in force ([`Went::ended`]).
pub fn carried_out(extras: &[ExtraLog]) -> usize {
    (extras.iter())
        .filter(|e| e.kind == ExtraFault::StepBackUnderHold && e.ended.starts_with(CARRIED_OUT))
        .count()
}

/// How the ending of a step back that happened begins.
const CARRIED_OUT: &str = "back past a let-go entry's grant";

/// How many steps back under a hold `extras` show followed by an operator's force release
/// while the clock read before the let-go entry's grant, the entry still in force.
pub fn forced_carried_out(extras: &[ExtraLog]) -> usize {
    (extras.iter())
        .filter(|e| e.kind == ExtraFault::StepBackUnderHold && e.ended.contains(FORCED))
        .filter(|e| e.ended.starts_with(CARRIED_OUT))
        .count()
}

/// How the ending says a force release landed after the step, within the hold.
const FORCED: &str = "force-released";

/// Runs the scenario on `stage` (see the module's documentation).
pub async fn run(stage: &Stage<'_>, rng: &mut StdRng) -> Went {
    let shape = &stage.shape;
    let lock_ids: Vec<String> = (0..stage.hosts.len())
        .map(|k| format!("{}.host-{k}", stage.owner))
        .collect();
    let mut went = Went {
        not_made: Some("no job let go of within its hold".into()),
        ..Went::default()
    };
    let epoch = Instant::now();
    for period in 0..shape.periods {
        let before =
            went.jobs + usize::from(went.renewed > 0) + usize::from(went.regranted.is_some());
        for (k, lock_id) in lock_ids.iter().enumerate() {
            let fires = epoch + shape.period * period + shape.lateness * k as u32;
            tokio::time::sleep_until(fires.into()).await;
            let Some((token, released_ok)) = job(stage, k, lock_id).await else {
                continue;
            };
            went.jobs += 1;
            if went.past_grant_ms.is_none() && went.by_ms == 0 && released_ok {
                step_and_ask_again(stage, rng, k, lock_id, token, &mut went).await;
            }
        }
        let after =
            went.jobs + usize::from(went.renewed > 0) + usize::from(went.regranted.is_some());
        went.most_in_a_period = went.most_in_a_period.max(after - before);
    }
    went
}

/// One job of host `k`: `try_acquire` under its lock id, one write, 50 ms of work, a
/// release. The token and whether the release returned `Ok`, if it was granted.
async fn job(stage: &Stage<'_>, k: usize, lock_id: &str) -> Option<(i64, bool)> {
    let (invoked, got) = ask(stage, k, lock_id).await;
    let Ok(Some(guard)) = got else {
        return None;
    };
    let recorder = stage.recorder;
    let mut log = recorder.job_holder(stage.client, invoked, &guard, stage.shape.hold);
    tokio::time::sleep(JOB).await;
    log.check_lost(&guard);
    log.sample(&guard);
    log.lets_go(LetGo::Released);
    let released = ReleaseResult::of(&guard.release().await);
    log.release = Some(released);
    let token = log.token;
    recorder.holder(log);
    Some((token, released == ReleaseResult::Ok))
}

/// Host `k`'s `try_acquire` of the job under `lock_id` (the job's TTL, hold and owner),
/// recorded: when the call began, and what it returned.
async fn ask(
    stage: &Stage<'_>,
    k: usize,
    lock_id: &str,
) -> (Instant, mongolock::Result<Option<mongolock::LockGuard>>) {
    let mutex = (stage.hosts[k].mutex(&stage.shape.resource).ttl(stage.ttl))
        .min_hold(stage.shape.hold)
        .owner(stage.owner.clone())
        .lock_id(lock_id.to_owned());
    let invoked = Instant::now();
    let got = mutex.try_acquire().await;
    call(stage, lock_id, invoked, &got);
    (invoked, got)
}

/// Records a `try_acquire` of the scenario, which returned `got`.
fn call<T>(
    stage: &Stage<'_>,
    lock_id: &str,
    invoked_at: Instant,
    got: &mongolock::Result<Option<T>>,
) {
    let granted = matches!(got, Ok(Some(_)));
    stage.recorder.acquire_call(AcquireCall {
        client: stage.client,
        resource: stage.shape.resource.clone(),
        lock_id: lock_id.to_owned(),
        invoked_at,
        ended_at: Instant::now(),
        granted,
        timeout: None,
    });
    stage.recorder.attempt(false, got.is_err());
}

/// The let-go entry of `token` under `lock_id`, as the server has it: its grant's server
/// time (ms), if the resource's exclusive entry is that one and marked `letGoAt`.
async fn let_go_entry(stage: &Stage<'_>, lock_id: &str, token: i64) -> Result<i64, String> {
    let found = stage
        .raw
        .find_one(doc! { "_id": &stage.shape.resource })
        .await
        .map_err(|e| format!("the entry could not be read ({e})"))?;
    let entry = (found.as_ref())
        .and_then(|d| d.get_document("exclusive").ok())
        .ok_or("no entry in force after the release")?;
    let named =
        entry.get_str("lockId").ok() == Some(lock_id) && entry.get_i64("token").ok() == Some(token);
    if !named {
        return Err("the entry in force is another grant's".into());
    }
    if entry.get_datetime("letGoAt").is_err() {
        return Err("the entry is not marked let go".into());
    }
    let created = entry
        .get_datetime("createdAt")
        .map_err(|_| "the entry has no createdAt")?;
    Ok(created.timestamp_millis())
}

/// The step back past the grant of host `k`'s let-go entry (`token`), checked to have
/// happened, then the host's renewal and retry under its lock id.
async fn step_and_ask_again(
    stage: &Stage<'_>,
    rng: &mut StdRng,
    k: usize,
    lock_id: &str,
    token: i64,
    went: &mut Went,
) {
    let recorder = stage.recorder;
    let granted_ms = match let_go_entry(stage, lock_id, token).await {
        Ok(ms) => ms,
        Err(why) => {
            went.not_made = Some(why);
            return;
        }
    };
    let hold_ms = stage.shape.hold.as_millis() as u64;
    let before = Instant::now();
    let now_ms = stage.clock.now().timestamp_millis();
    recorder.server_clock(before, now_ms);
    let since_grant = (now_ms - granted_ms).max(0) as u64;
    let beyond = rng.random_range(stage.shape.beyond_ms.0..=stage.shape.beyond_ms.1);
    let by_ms = since_grant + hold_ms + beyond;
    let stepped_at = Instant::now();
    stage.clock.step_back(Duration::from_millis(by_ms));
    let after = Instant::now();
    let after_ms = stage.clock.now().timestamp_millis();
    recorder.server_clock(after, after_ms);
    recorder.op(
        OpKind::ClockStep {
            by_ms: -(by_ms as i64),
            judged: None,
        },
        stepped_at,
        stepped_at,
    );
    went.by_ms = by_ms;
    went.token = token;
    // The fault happened only if the clock now reads before the grant and the let-go entry
    // is still in force.
    if after_ms >= granted_ms {
        went.not_made = Some("the clock did not go back past the grant".into());
        return;
    }
    if let Err(why) = let_go_entry(stage, lock_id, token).await {
        went.not_made = Some(format!("after the step: {why}"));
        return;
    }
    went.past_grant_ms = Some(granted_ms - after_ms);
    went.not_made = None;

    // The host renews its lock id, as a job that keeps its lock id would.
    let invoked = Instant::now();
    went.renewed = if stage.planted {
        renew_with_old_test(stage, lock_id).await
    } else {
        stage.hosts[k]
            .renew(lock_id, stage.ttl)
            .await
            .unwrap_or_default()
    };
    if went.renewed > 0 {
        believe_again(stage, k, lock_id, token, invoked).await;
    }
    // The same lock id's next run asks at once.
    let (invoked, got) = ask(stage, k, lock_id).await;
    if let Ok(Some(guard)) = got {
        went.regranted = Some(guard.fencing_token());
        let mut log = recorder.job_holder(stage.client, invoked, &guard, stage.shape.hold);
        log.lets_go(LetGo::Released);
        log.release = Some(ReleaseResult::of(&guard.release().await));
        recorder.holder(log);
    }
    if stage.force != Force::None {
        if went.renewed > 0 || went.regranted.is_some() {
            went.not_forced = Some("the host had its grant back".into());
            return;
        }
        force_and_ask(stage, k, lock_id, token, granted_ms, went).await;
    }
}

/// The operator's force release of the resource while host `k`'s let-go entry (`token`,
/// granted at `granted_ms`) is in force and the clock reads before its grant, checked to have
/// happened so; then the next host asks every 50 ms until granted, or until the clock is
/// [`FORCE_POLL_PAST_MS`] past the hold's end. Its job, if granted, runs as any (one write,
/// 50 ms, a release).
async fn force_and_ask(
    stage: &Stage<'_>,
    k: usize,
    lock_id: &str,
    token: i64,
    granted_ms: i64,
    went: &mut Went,
) {
    let recorder = stage.recorder;
    let resource = &stage.shape.resource;
    if let Err(why) = let_go_entry(stage, lock_id, token).await {
        went.not_forced = Some(format!("before it: {why}"));
        return;
    }
    let start = Instant::now();
    let now_ms = stage.clock.now().timestamp_millis();
    recorder.server_clock(start, now_ms);
    if now_ms >= granted_ms {
        went.not_forced = Some("the clock read past the grant again".into());
        return;
    }
    let operator = (k + 1) % stage.hosts.len();
    let sent = match stage.force {
        Force::Library => stage.hosts[operator]
            .force_release(resource)
            .await
            .map_err(|e| e.to_string()),
        Force::OldPipeline => old_force_release(stage).await,
        Force::None => return,
    };
    recorder.op(
        OpKind::ForceRelease(resource.clone()),
        start,
        Instant::now(),
    );
    if let Err(why) = sent {
        went.not_forced = Some(format!("it failed ({why})"));
        return;
    }
    went.forced_before_grant_ms = Some(granted_ms - now_ms);
    let hold_end = granted_ms + stage.shape.hold.as_millis() as i64;
    let next = format!("{}.host-{operator}", stage.owner);
    while stage.clock.now().timestamp_millis() < hold_end + FORCE_POLL_PAST_MS {
        let (invoked, got) = ask(stage, operator, &next).await;
        if let Ok(Some(guard)) = got {
            let mut log = recorder.job_holder(stage.client, invoked, &guard, stage.shape.hold);
            went.after_force_ms = log.server_granted_ms.map(|ms| ms - hold_end);
            tokio::time::sleep(JOB).await;
            log.check_lost(&guard);
            log.sample(&guard);
            log.lets_go(LetGo::Released);
            log.release = Some(ReleaseResult::of(&guard.release().await));
            recorder.holder(log);
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The old force release, planted: the resource's exclusive entry, if it has a lock-delay
/// (a let-go entry's is its hold) and is in force, stays in force until `$$NOW` plus its
/// delay at most (before `224dfb8`: from `$$NOW`, not from the later of `$$NOW` and its
/// grant); without one, it is removed. The part of the force release's pipeline that
/// changed, sent as a raw update.
async fn old_force_release(stage: &Stage<'_>) -> Result<u64, String> {
    let delay = "$exclusive.delayMs";
    let in_force = doc! { "$gt": [
        { "$ifNull": ["$exclusive.expiresAt", bson::Bson::MaxKey] }, "$$NOW",
    ]};
    let ended = doc! { "$set": { "exclusive": { "$cond": [
        { "$and": [{ "$gt": [{ "$ifNull": [delay, 0] }, 0] }, in_force] },
        { "$mergeObjects": ["$exclusive", { "expiresAt": {
            "$min": ["$exclusive.expiresAt", { "$add": ["$$NOW", delay] }],
        }}]},
        bson::Bson::Null,
    ]}}};
    let filter = doc! { "_id": &stage.shape.resource, "exclusive": { "$type": "object" } };
    match stage.raw.update_one(filter, vec![ended]).await {
        Ok(result) if result.modified_count == 1 => Ok(1),
        Ok(_) => Err("it changed nothing".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The old behaviour, planted: the host's renewal of its lock id with the old test of a
/// holding entry (its `expiresAt` ahead of `$$NOW` plus its `delayMs`), which a step back
/// past the grant makes true again for a let-go entry. How many entries it renewed.
async fn renew_with_old_test(stage: &Stage<'_>, lock_id: &str) -> u64 {
    let old_holds = doc! { "$gt": [
        { "$ifNull": ["$exclusive.expiresAt", bson::Bson::MaxKey] },
        { "$add": ["$$NOW", { "$ifNull": ["$exclusive.delayMs", 0] }] },
    ]};
    let ttl_ms = stage.ttl.as_millis() as i64;
    let renewal = doc! { "$set": { "exclusive": { "$mergeObjects": ["$exclusive", {
        "renewedAt": "$$NOW",
        "expiresAt": { "$add": [
            "$$NOW", ttl_ms, { "$ifNull": ["$exclusive.delayMs", 0] },
        ]},
    }]}}};
    let filter = doc! {
        "_id": &stage.shape.resource,
        "exclusive.lockId": lock_id,
        "$expr": old_holds,
    };
    match stage.raw.update_one(filter, vec![renewal]).await {
        Ok(result) => result.modified_count,
        Err(_) => 0,
    }
}

/// Host `k` believes it holds its grant `token` again, from `invoked` (when it renewed):
/// it runs the job again under it (one write, 50 ms) and lets go, as a host whose renewal
/// succeeded would.
async fn believe_again(stage: &Stage<'_>, k: usize, lock_id: &str, token: i64, invoked: Instant) {
    let recorder = stage.recorder;
    let now = Instant::now();
    let mut log = HolderLog {
        lock_id: lock_id.to_owned(),
        invoked_at: invoked,
        attempt_sent_at: invoked,
        ttl: Some(stage.ttl),
        max_deadline: Some(invoked + stage.ttl - stage.ttl / 10),
        ..HolderLog::granted(
            recorder.next_id(),
            stage.client,
            Mode::Exclusive,
            &stage.shape.resource,
            token,
        )
    };
    log.granted_at = now;
    recorder.min_hold(log.id, stage.shape.hold);
    recorder.record.write_for(&mut log, token);
    tokio::time::sleep(JOB).await;
    log.lets_go(LetGo::Released);
    let released = stage.hosts[k].unlock(lock_id).await;
    log.release = Some(match released {
        Ok(n) if n > 0 => ReleaseResult::Ok,
        Ok(_) => ReleaseResult::Lost(crate::history::LossKind::Other),
        Err(_) => ReleaseResult::Failed,
    });
    recorder.holder(log);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_step_that_went_past_a_let_go_grant_counts_as_carried_out() {
        let log = |ended: String| ExtraLog {
            kind: ExtraFault::StepBackUnderHold,
            client: 3,
            at: Instant::now(),
            ended,
        };
        let made = Went {
            past_grant_ms: Some(700),
            ..Went::default()
        };
        let not_made = Went {
            not_made: Some("the entry is not marked let go".into()),
            ..Went::default()
        };
        let other = ExtraLog {
            kind: ExtraFault::ClockStepInFlight,
            ..log(made.ended())
        };
        assert_eq!(carried_out(&[log(made.ended())]), 1);
        assert_eq!(carried_out(&[log(not_made.ended()), other]), 0);
        assert_eq!(
            made.ended(),
            "back past a let-go entry's grant: renew renewed nothing, its retry refused"
        );
    }

    #[test]
    fn only_a_force_release_sent_before_the_grant_after_a_step_counts_as_forced() {
        let log = |went: &Went| ExtraLog {
            kind: ExtraFault::StepBackUnderHold,
            client: 3,
            at: Instant::now(),
            ended: went.ended(),
        };
        let forced = Went {
            past_grant_ms: Some(700),
            forced_before_grant_ms: Some(650),
            after_force_ms: Some(20),
            ..Went::default()
        };
        let refused = Went {
            past_grant_ms: Some(700),
            not_forced: Some("the clock read past the grant again".into()),
            ..Went::default()
        };
        let not_made = Went {
            not_made: Some("no job let go of within its hold".into()),
            ..Went::default()
        };
        assert_eq!(forced_carried_out(&[log(&forced)]), 1);
        assert_eq!(forced_carried_out(&[log(&refused), log(&not_made)]), 0);
        assert_eq!(carried_out(&[log(&forced), log(&refused)]), 2);
        assert_eq!(
            forced.ended(),
            "back past a let-go entry's grant: renew renewed nothing, its retry refused; \
             force-released before the grant, the next grant at the hold's end or later"
        );
    }
}
