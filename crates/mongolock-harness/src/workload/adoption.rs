//! A restarted holder's adoption racing its dead process's late release
//! ([`AdoptionRace`], [`ExtraFault::AdoptionRace`]; the library's fix `1e762e7`).
//!
//! A holder with a minimum hold lets go and dies, its release late on the wire; its
//! restarted process (same lock id, so it may resume the lease) asks before the release
//! lands, is answered "already held" with the entry, and sends its adoption after the
//! release landed and marked the entry let go (`letGoAt`). Before `1e762e7` the keeper's
//! lease query did not exclude a let-go entry: the adoption took it, and the restarted
//! process believed a lease the server keeps for nobody, while another host was granted
//! when the hold ended.
//!
//! The scenario ([`run`]), on three fault proxies of its own in front of the upstream (the
//! slot's proxy, or an emulator): the first process takes the job's lock under a fixed lock
//! id with a minimum hold, writes once and lets go, its release held on the wire (a late
//! request of its proxy) and its process gone before the reply; 50 ms later its restarted
//! process, 300 ms from the server each way, asks under the same lock id (`acquire_timeout`),
//! and, where the stage asks for one ([`Stage::contender`]), a contender on another host
//! waits in line (`acquire_timeout`). That the race happened
//! is checked and said in how it ended ([`Went::ended`]): the release ran late (its reply
//! recorded by the proxy) and the restarted process sent its adoption (an `update` naming
//! the lock id, counted by its proxy), so its attempt was answered before the release landed.
//! The library's restarted process is then granted anew once the hold ends; (10), (1) and
//! (S12) judge what each believed and what the server granted.
//!
//! The negative control (`controls::adoption`) plants the old adoption: the keepalive's lease
//! query without `letGoAt: {$exists: false}`, sent raw once the late release has landed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongodb::Collection;
use mongolock::LockClient;
use mongolock_testkit::FaultProxy;
use mongolock_testkit::faults::proxy::{RequestFault, RequestRule, Requests};

use super::{AdoptionRace, COLLECTION, DB, Held, Worker, owner_label};
use crate::commands;
use crate::history::{
    AcquireCall, ExtraFault, ExtraLog, FromLibrary, GuardLog, HolderLog, LetGo, Mode, Recorder,
    ReleaseResult,
};

/// How long the contender holds once granted.
const CONTENDER_HOLDS: Duration = Duration::from_millis(300);

/// What one run of the scenario works with, wherever it runs.
pub struct Stage<'a> {
    /// Where the proxies connect: the slot's proxy in the fleet, or an emulator.
    pub upstream: SocketAddr,
    /// Where the history goes.
    pub recorder: &'a Recorder,
    /// The client slot the holders are logged under.
    pub client: usize,
    /// The owner every lock of the race is taken under: the slot's, so that the liveness
    /// probe knows a race under way at its end for a live client's.
    pub owner: String,
    /// The job's lock id, the same for both processes.
    pub lock_id: String,
    /// The shape of the scenario.
    pub shape: AdoptionRace,
    /// Plant the old adoption (no `letGoAt` test), sent raw once the release landed.
    pub planted: bool,
    /// Send a contender on another host, waiting in line from the start. The fleet sends
    /// one: the restarted process, whose attempt was answered "already held" before its
    /// adoption was refused, keeps its place in the line and is served first, which (S9)
    /// judges (before `4b66416` it waited outside the line and the contender was served
    /// first).
    pub contender: bool,
}

/// How a run of the scenario went.
#[derive(Debug, Clone, Default)]
pub struct Went {
    /// The first process's token.
    pub token: i64,
    /// Whether its release ran late (the proxy recorded the late reply).
    pub release_late: bool,
    /// Adoptions the restarted process sent (the library's, or the planted one).
    pub adoptions: u64,
    /// Whether the planted adoption took the let-go entry.
    pub adopted: bool,
    /// The token the restarted process's call was granted, if any.
    pub regranted: Option<i64>,
    /// Whether the contender was granted.
    pub contender: bool,
    /// Why the race was not made, if it was not.
    pub not_made: Option<String>,
}

impl Went {
    /// How it ended, in a few words (the report counts each wording).
    pub fn ended(&self) -> String {
        if let Some(why) = &self.not_made {
            return format!("not carried out: {why}");
        }
        if !self.release_late {
            return "not carried out: the release did not run late".into();
        }
        if self.adoptions == 0 {
            return "not carried out: no adoption sent (answered after the release landed)".into();
        }
        let restarted = match self.regranted {
            _ if self.adopted => "adopted the let-go entry",
            Some(t) if t == self.token => "given the let-go entry back",
            Some(_) => "granted anew",
            None => "not granted",
        };
        format!("{CARRIED_OUT}: the restarted process {restarted}")
    }
}

impl Went {
    /// True if the race happened ([`Went::ended`] says so).
    pub fn carried_out(&self) -> bool {
        self.ended().starts_with(CARRIED_OUT)
    }
}

/// How the ending of a race that happened begins.
const CARRIED_OUT: &str = "adoption sent after the late release landed";

/// How many adoption races `extras` show carried out ([`Went::ended`]).
pub fn carried_out(extras: &[ExtraLog]) -> usize {
    (extras.iter())
        .filter(|e| e.kind == ExtraFault::AdoptionRace && e.ended.starts_with(CARRIED_OUT))
        .count()
}

/// How many times a worker stages its adoption race before it gives up on it.
const RACE_TRIES: usize = 3;

/// One adoption race at a time in the fleet: two at once on the race's resource would each
/// be the other's contender beside its own (see [`Stage::contender`]), a shape the race does
/// not judge.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl Worker {
    /// Carries out an adoption race (see the module's documentation), once no other worker's
    /// race is under way. A race not made (a fault of the slot's proxy, such as its latency,
    /// delayed the restarted process's attempt past the late release) is staged again, up to
    /// [`RACE_TRIES`] times in all, each try recorded with how it ended: a quick run has one
    /// race, and a run whose races were none made fails as vacuous.
    pub(super) async fn adoption_race(&mut self) -> Held {
        let Some(shape) = self.workload.adoption.clone() else {
            return Held::Done;
        };
        let _alone = ONE_AT_A_TIME.lock().await;
        for _ in 0..RACE_TRIES {
            // A try takes several seconds (three warm-ups, the first grant, the late release
            // and the restarted process's patience): once the run is stopping, none more is
            // staged, or the worker outlasts the stop's limit and holds the race's resource
            // from the liveness probe (`--replset --long --seed 41110`, run 41113: "client 3
            // did not stop after healing", and `a0` could not be taken).
            if self.ctl.stop.load(Ordering::SeqCst) {
                break;
            }
            self.calls += 1;
            let stage = Stage {
                upstream: self.proxy.addr(),
                recorder: &self.recorder,
                client: self.index,
                owner: owner_label(self.index, self.incarnation),
                lock_id: format!(
                    "{}.adopt-{}",
                    owner_label(self.index, self.incarnation),
                    self.calls
                ),
                shape: shape.clone(),
                planted: false,
                contender: true,
            };
            let went = run(&stage).await;
            self.recorder
                .extra(ExtraFault::AdoptionRace, self.index, went.ended());
            if went.carried_out() {
                break;
            }
        }
        Held::Done
    }
}

/// A lock client and a plain client of the lock collection through `proxy`.
fn clients(proxy: &FaultProxy) -> (LockClient, Collection<Document>) {
    let client = proxy.client();
    let collection = client.database(DB).collection(COLLECTION);
    (LockClient::new(collection.clone()), collection)
}

/// Takes and releases three locks at once (of `resource` and two beside it) through
/// `locks`, so that three of its connections are open before any fault: a waiting call's
/// change stream holds one while it waits for changes, and an attempt that found none free
/// would open one through the proxy's latency (a handshake's round trips), reaching the
/// server too late for the race under load.
/// The locks have the race's `ttl`: a take whose reply a failover lost leaves a grant
/// nobody believes in, which must end within (S6)'s bound (seed 41190 found one left with
/// the default TTL of 30 s).
async fn warm(locks: &LockClient, resource: &str, ttl: Duration) -> bool {
    let take = |name: String| async move {
        match locks.mutex(&name).ttl(ttl).try_acquire().await {
            Ok(Some(guard)) => guard.release().await.is_ok(),
            _ => false,
        }
    };
    let (a, b, c) = tokio::join!(
        take(resource.to_owned()),
        take(format!("{resource}-2")),
        take(format!("{resource}-3")),
    );
    a && b && c
}

/// Runs the scenario on `stage` (see the module's documentation).
pub async fn run(stage: &Stage<'_>) -> Went {
    let proxies = (
        FaultProxy::start(stage.upstream).await,
        FaultProxy::start(stage.upstream).await,
        FaultProxy::start(stage.upstream).await,
    );
    let (Ok(dying), Ok(far), Ok(near)) = proxies else {
        return not_made("a proxy did not start");
    };
    let went = race(stage, &dying, &far, &near).await;
    for proxy in [dying, far, near] {
        proxy.shutdown().await;
    }
    went
}

fn not_made(why: &str) -> Went {
    Went {
        not_made: Some(why.to_owned()),
        ..Went::default()
    }
}

/// The race itself, through the proxies of the first process (`dying`), its restarted
/// process (`far`) and the contender (`near`).
async fn race(stage: &Stage<'_>, dying: &FaultProxy, far: &FaultProxy, near: &FaultProxy) -> Went {
    let shape = &stage.shape;
    let recorder = stage.recorder;
    let (first, _) = clients(dying);
    let (restarted, raw) = clients(far);
    let (contender, _) = clients(near);
    let warm_resource = format!("{}-warm", shape.resource);
    for locks in [&first, &restarted, &contender] {
        if !warm(locks, &warm_resource, shape.ttl).await {
            return not_made("a client could not take a lock first");
        }
    }
    let job = |locks: &LockClient| {
        (locks.mutex(&shape.resource).ttl(shape.ttl))
            .min_hold(shape.hold)
            .owner(stage.owner.clone())
            .lock_id(stage.lock_id.clone())
    };
    let invoked = Instant::now();
    let got = job(&first).acquire_timeout(shape.ttl).await;
    call(stage, invoked, &got, shape.ttl);
    let Ok(Some(guard)) = got else {
        return not_made("the first process was not granted");
    };
    let mut went = Went {
        token: guard.fencing_token(),
        ..Went::default()
    };
    let mut log = recorder.job_holder(stage.client, invoked, &guard, shape.hold);
    // Its release is held on the wire; the process dies before the reply.
    let resource = shape.resource.clone();
    let late = dying.fault_requests(
        Requests::matching(move |c| commands::is_let_go_of(c, &resource)).times(1),
        RequestFault::Late {
            hold: shape.late,
            cut_after: None,
        },
    );
    // The restarted process's adoptions are counted as they pass its proxy (the matcher
    // applies no fault).
    let adoptions = Arc::new(AtomicU64::new(0));
    let _counted = far.fault_requests(
        Requests::matching({
            let (lock_id, adoptions) = (stage.lock_id.clone(), adoptions.clone());
            move |c| {
                if is_adoption(c, &lock_id) {
                    adoptions.fetch_add(1, Ordering::SeqCst);
                }
                false
            }
        }),
        RequestFault::Cut,
    );
    log.lets_go(LetGo::ReleaseCancelled);
    recorder.holder(log);
    let dying_release = tokio::spawn(async move { guard.release().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    far.add_latency(shape.far);
    let patience = shape.hold + shape.ttl + Duration::from_secs(1);
    let contending = async { stage.contender && contend(stage, &contender, patience).await };
    let restarting = async {
        if stage.planted {
            adopt_the_old_way(stage, &raw, &late, went.token).await
        } else {
            let invoked = Instant::now();
            let got = job(&restarted).acquire_timeout(patience).await;
            call(stage, invoked, &got, patience);
            let Ok(Some(guard)) = got else {
                return (false, None);
            };
            let mut log = recorder.job_holder(stage.client, invoked, &guard, shape.hold);
            tokio::time::sleep(Duration::from_millis(50)).await;
            log.check_lost(&guard);
            log.lets_go(LetGo::Released);
            let token = guard.fencing_token();
            log.release = Some(ReleaseResult::of(&guard.release().await));
            recorder.holder(log);
            (false, Some(token))
        }
    };
    let ((adopted, regranted), contender_granted) = tokio::join!(restarting, contending);
    dying_release.abort();
    went.adopted = adopted;
    went.regranted = regranted;
    went.contender = contender_granted;
    went.release_late = late.late_replies().len() == 1;
    went.adoptions = if stage.planted {
        u64::from(adopted)
    } else {
        adoptions.load(Ordering::SeqCst)
    };
    for locks in [first, restarted, contender] {
        locks.shutdown().await;
    }
    went
}

/// True for the restarted process's adoption of a lease under `lock_id`: an `update` whose
/// statement names the lock id (the keeper's statements are the only `update`s that do).
fn is_adoption(command: &Document, lock_id: &str) -> bool {
    command.get_str("update").is_ok() && format!("{command:?}").contains(lock_id)
}

/// Records a call of the scenario (given `timeout`), which returned `got`.
fn call<T>(
    stage: &Stage<'_>,
    invoked_at: Instant,
    got: &mongolock::Result<Option<T>>,
    timeout: Duration,
) {
    stage.recorder.acquire_call(AcquireCall {
        client: stage.client,
        resource: stage.shape.resource.clone(),
        lock_id: stage.lock_id.clone(),
        invoked_at,
        ended_at: Instant::now(),
        granted: matches!(got, Ok(Some(_))),
        timeout: Some(timeout),
    });
    stage
        .recorder
        .attempt(matches!(got, Ok(None)), got.is_err());
}

/// The contender: waits in line for up to `patience` (it joins the line at once, before
/// the restarted process's attempt, 300 ms away, reaches the server); granted, it writes,
/// holds a while and releases. Whether it was granted.
async fn contend(stage: &Stage<'_>, locks: &LockClient, patience: Duration) -> bool {
    let recorder = stage.recorder;
    let lock_id = format!("{}-contender", stage.lock_id);
    let mutex = (locks.mutex(&stage.shape.resource).ttl(stage.shape.ttl))
        .owner(stage.owner.clone())
        .lock_id(lock_id.clone());
    let invoked = Instant::now();
    let got = mutex.acquire_timeout(patience).await;
    stage.recorder.acquire_call(AcquireCall {
        client: stage.client,
        resource: stage.shape.resource.clone(),
        lock_id,
        invoked_at: invoked,
        ended_at: Instant::now(),
        granted: matches!(got, Ok(Some(_))),
        timeout: Some(patience),
    });
    let Ok(Some(guard)) = got else {
        return false;
    };
    let mut log = HolderLog::new(
        recorder.next_id(),
        stage.client,
        Mode::Exclusive,
        invoked,
        &guard,
    );
    let until = Instant::now() + CONTENDER_HOLDS;
    while Instant::now() < until {
        let step_end = (Instant::now() + Duration::from_millis(100)).min(until);
        if crate::history::work_step(&mut log, &guard, &recorder.record, step_end).await {
            break;
        }
    }
    log.check_lost(&guard);
    log.lets_go(LetGo::Released);
    log.release = Some(ReleaseResult::of(&guard.release().await));
    recorder.holder(log);
    true
}

/// The old behaviour, planted: once the late release has landed (the entry let go), the
/// restarted process adopts the entry with the keepalive's lease query of before `1e762e7`
/// (by resource, lock id and token, its `expiresAt` ahead of `$$NOW`, and no test of
/// `letGoAt`), sent raw; it takes it and believes it holds the old grant past the hold's
/// end, writing. Whether it adopted the entry, and no grant of its own call.
async fn adopt_the_old_way(
    stage: &Stage<'_>,
    raw: &Collection<Document>,
    late: &RequestRule,
    token: i64,
) -> (bool, Option<i64>) {
    let recorder = stage.recorder;
    let shape = &stage.shape;
    let invoked = Instant::now();
    let landed_by = invoked + shape.late + Duration::from_secs(2);
    while late.late_replies().is_empty() && Instant::now() < landed_by {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let old_lease_query = doc! {
        "_id": &shape.resource,
        "exclusive.lockId": &stage.lock_id,
        "exclusive.token": token,
        "$expr": { "$gt": ["$exclusive.expiresAt", "$$NOW"] },
    };
    let adoption = doc! { "$set": { "exclusive.keeper": format!("{}-restarted", stage.lock_id) } };
    let adopted = raw
        .update_one(old_lease_query, adoption)
        .await
        .is_ok_and(|r| r.modified_count == 1);
    if !adopted {
        return (false, None);
    }
    // It believes it holds the old grant, and works under it past the hold's end.
    let mut log = HolderLog {
        lock_id: stage.lock_id.clone(),
        invoked_at: invoked,
        attempt_sent_at: invoked,
        ttl: Some(shape.ttl),
        max_deadline: Some(invoked + shape.ttl - shape.ttl / 10),
        fake: true,
        ..HolderLog::granted(
            recorder.next_id(),
            stage.client,
            Mode::Exclusive,
            &shape.resource,
            token,
        )
    };
    log.granted_at = Instant::now();
    let until = invoked + shape.hold + Duration::from_millis(800);
    while Instant::now() < until {
        recorder.record.write_for(&mut log, token);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    log.lets_go(LetGo::Abandoned);
    recorder.holder(log);
    (true, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_race_whose_release_ran_late_and_whose_adoption_was_sent_counts() {
        let log = |ended: String| ExtraLog {
            kind: ExtraFault::AdoptionRace,
            client: 4,
            at: Instant::now(),
            ended,
        };
        let made = Went {
            token: 5,
            release_late: true,
            adoptions: 1,
            regranted: Some(6),
            ..Went::default()
        };
        let early = Went {
            adoptions: 0,
            ..made.clone()
        };
        assert_eq!(
            made.ended(),
            "adoption sent after the late release landed: the restarted process granted anew"
        );
        assert_eq!(carried_out(&[log(made.ended())]), 1);
        assert_eq!(carried_out(&[log(early.ended())]), 0);
        assert_eq!(carried_out(&[log(not_made("no proxy").ended())]), 0);
    }
}
