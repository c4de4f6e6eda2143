//! A fault-injection harness for mongolock: it runs lock workloads on the emulator while
//! injecting faults, records what every holder did and saw, and checks the history against
//! the library's promises (exclusion, fencing, loss notification, caps, liveness, writer
//! preference, one leader per term, proclaims, what observers of an election see, lock-delays,
//! resumed leases) for the handles (mutex, reader-writer lock, semaphore),
//! for lock groups held with the low-level API, and for the recipes: multi-locks and
//! elections.
//!
//! One run: an emulator; [`Workload::clients`](workload::Workload) clients, each in its own
//! thread and runtime with its own [`LockClient`] behind its own fault proxy; an observer
//! connected directly. Faults are drawn from the seed ([`faults`]); the history
//! ([`history`]) is checked ([`check`]); thirty-two negative controls ([`controls`]) prove
//! that the checker catches the bugs it looks for; [`report`] prints it all. Observers
//! ([`observers`]) follow each election with `observe()` and poll its `leader()` during the
//! run, and read it fresh at the end.
//!
//! **On a three-member replica set** (`--replset`, [`Options::replset`]): the same
//! workload and faults run against the testkit's [`ReplicaSet`](mongolock_testkit::ReplicaSet)
//! with the default write concern (`w: "majority"`), and a failover nemesis beside them
//! ([`replset::Failover`]): `replSetStepDown` of the primary, the primary stopped and
//! restarted, the primary partitioned from the others while the clients still reach it
//! (healed later, rolling back what it wrote alone), a member's clock 1–5 s ahead or behind,
//! replication lag. The report counts each as picked and as done (step-downs that changed
//! the primary, partitions during which the others elected, rollbacks and the entries they
//! undid, the terms reached); a run whose primary never changed fails as vacuous. The
//! oracle's change stream follows the primary and keeps the events the set kept, at the
//! writing primary's clock ([`replset`] says how, and why). The controls are then the set's
//! ([`replset::control`]): a grant acknowledged with `w: 1` by a partitioned primary and
//! rolled back must be caught as two holders by (1), and the same schedule with the default
//! write concern must show nothing.
//!
//! ```text
//! cargo run --release -p mongolock-harness -- --replset --quick --seed N
//! ```
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let report = mongolock_harness::run(&mongolock_harness::Options::quick(42)).await?;
//! println!("{report}");
//! assert!(report.passed());
//! # Ok(()) }
//! ```

pub mod commands;
pub mod controls;
pub mod faults;
pub mod history;
pub mod observers;
pub mod oracle;
pub mod relay;
pub mod replset;
pub mod report;
pub mod workload;

/// The checker, shared with `mongolock demo`: it lives in the testkit
/// ([`mongolock_testkit::checker::check`]).
pub use mongolock_testkit::checker::check;

use std::time::{Duration, Instant};

use mongolock::{Filter, LockClient};
use mongolock_testkit::TestServer;

use crate::faults::Injector;
use crate::history::{FromLibrary, GuardLog};
use crate::history::{Mode, Recorder};
use crate::report::{Report, RunResult};
use crate::workload::{COLLECTION, DB, Fleet, Workload};

/// The time a waiter may take to notice a freed lock, on top of the TTL, in the liveness
/// check.
pub const WAKE_BOUND: Duration = Duration::from_secs(1);

/// How long after healing the liveness check waits for a worker to go for each resource
/// set: one that nobody asked for by then is reported (the workers go round every target
/// after healing, so this bounds a round).
pub const ASK_BOUND: Duration = Duration::from_secs(30);

/// What a session runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The seed: run `i` uses `seed + i`.
    pub seed: u64,
    /// How many runs.
    pub runs: u32,
    /// How long faults are injected in each run.
    pub fault_phase: Duration,
    /// The workload.
    pub workload: Workload,
    /// Whether to run the negative controls.
    pub controls: bool,
    /// Run on a three-member replica set with the failover nemesis ([`replset`]) instead
    /// of one server; the controls are then the set's ([`replset::control`]).
    pub replset: bool,
}

impl Options {
    /// One run with 15 s of faults, and the controls (well under a minute).
    pub fn quick(seed: u64) -> Self {
        Options {
            seed,
            runs: 1,
            fault_phase: Duration::from_secs(15),
            workload: Workload::standard(),
            controls: true,
            replset: false,
        }
    }

    /// Five runs with a minute of faults each, and the controls (about six minutes).
    pub fn long(seed: u64) -> Self {
        Options {
            seed,
            runs: 5,
            fault_phase: Duration::from_secs(60),
            workload: Workload::standard(),
            controls: true,
            replset: false,
        }
    }
}

/// Runs a session: every run, then the controls.
///
/// # Errors
/// The emulator, a proxy or a lock call of the setup failed (not a fault: those are
/// expected and recorded).
pub async fn run(options: &Options) -> Result<Report, Box<dyn std::error::Error>> {
    let mut report = Report {
        seed: options.seed,
        ttl: options.workload.ttl,
        ..Report::default()
    };
    for i in 0..options.runs {
        let seed = options.seed.wrapping_add(u64::from(i));
        let result = if options.replset {
            run_once_on_set(seed, &options.workload, options.fault_phase).await?
        } else {
            run_once(seed, &options.workload, options.fault_phase).await?
        };
        report.runs.push(result);
    }
    if options.controls && options.replset {
        report.set_control = Some(replset::control::run().await?);
    } else if options.controls {
        report.controls = controls::run_all().await?;
    }
    Ok(report)
}

/// One run: the workload under faults for `fault_phase`, then healing, the liveness probe
/// and the check.
///
/// # Errors
/// As [`run`].
pub async fn run_once(
    seed: u64,
    workload: &Workload,
    fault_phase: Duration,
) -> Result<RunResult, Box<dyn std::error::Error>> {
    run_on(
        Stage::Single(TestServer::start().await?),
        seed,
        workload,
        fault_phase,
    )
    .await
}

/// One run on a three-member replica set with the failover nemesis beside the faults
/// ([`replset`]).
///
/// # Errors
/// As [`run`].
pub async fn run_once_on_set(
    seed: u64,
    workload: &Workload,
    fault_phase: Duration,
) -> Result<RunResult, Box<dyn std::error::Error>> {
    let stage = Stage::Set(replset::SetStage::start().await?);
    run_on(stage, seed, workload, fault_phase).await
}

/// What a run runs on.
enum Stage {
    /// One server.
    Single(TestServer),
    /// A replica set, reached through its router.
    Set(replset::SetStage),
}

impl Stage {
    /// A new driver client on the server (on the set: one that discovers it).
    fn new_client(&self) -> mongodb::Client {
        match self {
            Stage::Single(server) => server.new_client(),
            Stage::Set(stage) => stage.new_client(),
        }
    }

    /// The options of [`Stage::new_client`]'s clients.
    fn client_options(&self) -> mongodb::options::ClientOptions {
        match self {
            Stage::Single(server) => server.client_options(),
            Stage::Set(stage) => stage.client_options(),
        }
    }

    /// The address the fleet's proxies forward to.
    fn addr(&self) -> std::net::SocketAddr {
        match self {
            Stage::Single(server) => server.addr(),
            Stage::Set(stage) => stage.router.addr(),
        }
    }

    /// The clock the workload's clock faults move (on the set: every member's).
    fn clock(&self) -> &mongolock_testkit::Clock {
        match self {
            Stage::Single(server) => server.clock(),
            Stage::Set(stage) => stage.set.shared_clock(),
        }
    }

    async fn shutdown(self) {
        match self {
            Stage::Single(server) => server.shutdown().await,
            Stage::Set(stage) => stage.shutdown().await,
        }
    }
}

/// The oracle's tap on either stage.
enum AnyTap {
    Single(oracle::Tap),
    Set(replset::SetTap),
}

async fn run_on(
    stage: Stage,
    seed: u64,
    workload: &Workload,
    fault_phase: Duration,
) -> Result<RunResult, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let direct = stage.new_client();
    let observer = LockClient::new(direct.database(DB).collection(COLLECTION));
    observer.create_indexes().await?;
    let tap = match &stage {
        Stage::Single(_) => {
            AnyTap::Single(oracle::Tap::start(&direct.database(DB), COLLECTION).await?)
        }
        Stage::Set(_) => {
            AnyTap::Set(replset::SetTap::start(&direct.database(DB), COLLECTION).await?)
        }
    };
    let recorder = Recorder::new();
    let read_clock = || {
        let ms = stage.clock().now().timestamp_millis();
        recorder.server_clock(Instant::now(), ms);
    };
    read_clock();
    let mut observers = observers::Observers::start_on(
        &|| stage.client_options(),
        stage.addr(),
        &workload.pool(Mode::Election),
        &recorder,
        seed,
    )
    .await?;
    let mut fleet = Fleet::start(
        stage.addr(),
        stage.clock().clone(),
        workload,
        &recorder,
        seed,
    )
    .await?;
    let operator = tokio::spawn(workload::periodic::operator(
        observer.clone(),
        recorder.clone(),
        workload.clone(),
        seed,
    ));
    let mut injector = Injector::new(
        seed,
        observer.clone(),
        direct.database("admin"),
        stage.clock().clone(),
        workload,
        &recorder,
    );
    let until = Instant::now() + fault_phase;
    let nemesis = match &stage {
        Stage::Set(set) => {
            let nemesis = replset::Nemesis::new(set, seed, &recorder, workload.clients);
            Some(tokio::spawn(nemesis.run(until)))
        }
        Stage::Single(_) => None,
    };
    injector.run(&mut fleet, until).await;
    let mut failover = match nemesis {
        Some(nemesis) => Some(nemesis.await?.stats),
        None => None,
    };
    let healed = Instant::now();
    recorder.healed(healed);

    liveness(&mut fleet, &observer, &recorder, workload, healed).await?;
    // The operator of the periodic jobs stopped at its first look after healing.
    let _ = operator.await;
    // Every late delivery was due by now: the liveness probe took longer than any hold.
    injector.record_rules();
    observers.calm().await;
    observers::final_reads(&observer, &observers, &recorder, workload).await?;
    observers.stop().await;
    read_clock();

    let history = recorder.finish(workload.modes());
    let outcome = check::check(&history);
    if std::env::var_os("MONGOLOCK_HARNESS_EXPLAIN").is_some() {
        explain(&history, &outcome);
    }
    let permits = workload
        .modes()
        .into_iter()
        .filter_map(|(resource, mode)| match mode {
            Mode::Shared { permits } => Some((resource, permits)),
            _ => None,
        })
        .collect();
    let finished = match (tap, &stage, failover.as_mut()) {
        (AnyTap::Single(tap), _, _) => tap.finish().await,
        (AnyTap::Set(tap), Stage::Set(set), Some(stats)) => tap.finish(&set.set, stats).await,
        (AnyTap::Set(_), ..) => Err("the set's tap without its set".to_owned()),
    };
    let oracle = match finished {
        Ok(events) => {
            let explaining = std::env::var_os("MONGOLOCK_HARNESS_EXPLAIN").is_some();
            if explaining {
                let named = (outcome.violations.iter())
                    .filter_map(|v| v.resource.as_deref())
                    .collect();
                explain_server(&events, &named);
            }
            let mut outcome = oracle::check(
                &events,
                &history,
                &permits,
                workload.acquire_timeout + workload.ttl,
                &recorder.min_holds(),
            );
            if workload.periodic.is_some() {
                oracle::min_hold_vacuous(&mut outcome);
            }
            if workload.step_back.is_some()
                && workload::step_back::carried_out(&recorder.extras()) == 0
            {
                // A fault that did not happen proves nothing: the run says so.
                outcome.violations.push((
                    oracle::ServerCheck::MinHold,
                    "vacuous: the server's clock never went back past a let-go entry's grant \
                     in its hold (the step back under a hold was not carried out)"
                        .to_owned(),
                ));
            }
            if workload.step_back.is_some()
                && workload::step_back::forced_carried_out(&recorder.extras()) == 0
            {
                outcome.violations.push((
                    oracle::ServerCheck::MinHold,
                    "vacuous: no operator force-released a let-go entry's resource while the \
                     server's clock read before its grant (the force release after a step back \
                     was not carried out)"
                        .to_owned(),
                ));
            }
            if workload.adoption.is_some()
                && workload::adoption::carried_out(&recorder.extras()) == 0
            {
                outcome.violations.push((
                    oracle::ServerCheck::MinHold,
                    "vacuous: no restarted process sent its adoption after its dead process's \
                     late release landed (the adoption race was not carried out)"
                        .to_owned(),
                ));
            }
            if explaining {
                explain_oracle(&events, &history, &outcome);
            }
            outcome
        }
        Err(why) => oracle::Outcome::incomplete(why),
    };
    drop(fleet);
    stage.shutdown().await;
    Ok(RunResult {
        seed,
        outcome,
        faults: injector.counts.clone(),
        extra_faults: injector.extra_counts.clone(),
        extras: recorder.extras(),
        attempts: history.attempts,
        timeouts: history.timeouts,
        errors: history.errors,
        elapsed: started.elapsed(),
        oracle,
        failover,
    })
}

/// After the faults stop: within the longest pause, plus the TTL, plus [`WAKE_BOUND`],
/// every lock is free or held by a live client, and within as long again from when a worker
/// first went for it (at most [`ASK_BOUND`] after healing) every resource was granted
/// again; once
/// the clients stop, nothing stays held past the TTL and the observer can take every lock.
async fn liveness(
    fleet: &mut Fleet,
    observer: &LockClient,
    recorder: &Recorder,
    workload: &Workload,
    healed: Instant,
) -> Result<(), Box<dyn std::error::Error>> {
    let ttl = workload.ttl;
    // A pause under way may last up to twice the TTL; then the TTL; then the wake-up.
    let settle = healed + ttl * 2 + ttl + WAKE_BOUND;
    while Instant::now() < settle {
        fleet.restart_dead(Duration::ZERO);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for status in observer.status(&Filter::default()).await? {
        if status.is_expired() {
            continue;
        }
        let owner = status.owner().unwrap_or("");
        if !fleet.is_live_owner(owner) {
            recorder.liveness(format!(
                "{}: still held by {owner:?} (not a live client) {:.0} ms after healing, \
                 {:?} left",
                status.resource(),
                healed.elapsed().as_secs_f64() * 1e3,
                status.ttl_remaining()
            ));
        }
    }
    // A set is judged once a worker went for it after healing and that long again has
    // passed: a resource nobody asked for yet says nothing of the library (each worker goes
    // round the targets, busy with the one before meanwhile: a multi-lock's wait, a
    // periodic host's periods). A set nobody asked for within `ASK_BOUND` is reported.
    let span = settle.duration_since(healed);
    let sets = workload.liveness_sets();
    while Instant::now() < healed + ASK_BOUND {
        let now = Instant::now();
        let unjudged = (sets.iter()).any(|set| {
            recorder
                .first_asked(set)
                .is_none_or(|asked| now < asked + span)
        });
        if !unjudged {
            break;
        }
        fleet.restart_dead(Duration::ZERO);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let healed_ms = recorder.server_ms(healed);
    for resources in sets {
        let mut granted: usize = resources
            .iter()
            .map(|r| recorder.grants_after(r, healed))
            .sum();
        // A holder is recorded when it lets go: one granted after healing that still holds
        // counts too (by the server's time of its grant).
        for resource in &resources {
            let filter = Filter::default().resource(resource.as_str());
            for status in observer.status(&filter).await? {
                let live =
                    !status.is_expired() && fleet.is_live_owner(status.owner().unwrap_or(""));
                let since_healing =
                    healed_ms.is_some_and(|ms| status.created_at().timestamp_millis() > ms);
                if live && since_healing {
                    granted += 1;
                }
            }
        }
        if granted == 0 {
            // What holds them now, and who stands in their lines, to tell why.
            let mut now_held = Vec::new();
            for resource in &resources {
                let filter = Filter::default().resource(resource.as_str());
                for status in observer.status(&filter).await? {
                    now_held.push(format!(
                        "{} held by {:?} ({}, since {}, expired: {})",
                        status.resource(),
                        status.lock_id(),
                        status.owner().unwrap_or("no owner"),
                        status.created_at(),
                        status.is_expired()
                    ));
                }
                let document = observer
                    .collection()
                    .find_one(bson::doc! { "_id": resource.as_str() })
                    .await?;
                let line = document
                    .as_ref()
                    .and_then(|d| d.get_array("queue").ok())
                    .map_or(0, Vec::len);
                now_held.push(format!("{resource}: {line} place(s) in line"));
            }
            let asked = match recorder.first_asked(&resources) {
                Some(at) => format!(
                    "first asked for {:.0} ms after healing",
                    at.duration_since(healed).as_secs_f64() * 1e3
                ),
                None => "never asked for".to_owned(),
            };
            recorder.liveness(format!(
                "{}: not granted to anyone in the {:.0} ms after healing ({asked}; now: {})",
                resources.join("+"),
                healed.elapsed().as_secs_f64() * 1e3,
                now_held.join("; ")
            ));
        }
    }
    let late = fleet.stop(workload.acquire_timeout + ttl * 3).await;
    for index in late {
        recorder.liveness(format!("client {index} did not stop after healing"));
    }
    let stopped = Instant::now();
    // A lease that ended unreleased keeps its resource for its lock-delay after its TTL.
    tokio::time::sleep(ttl + workload.max_lock_delay() + Duration::from_millis(200)).await;
    for status in observer.status(&Filter::default()).await? {
        if !status.is_expired() {
            recorder.liveness(format!(
                "{}: stranded, held by {:?} {:.0} ms after every client stopped",
                status.resource(),
                status.owner(),
                stopped.elapsed().as_secs_f64() * 1e3
            ));
        }
    }
    for (resource, mode) in &workload.resources {
        if *mode == Mode::Election {
            probe_election(observer, recorder, workload, resource).await;
            continue;
        }
        let mut guards = Vec::new();
        for _ in 0..workload::capacity(*mode) {
            match workload::try_take(observer, resource, *mode, ttl).await {
                Ok(Some(guard)) => guards.push(guard),
                other => recorder.liveness(format!(
                    "{resource}: the observer could not take it once every client stopped: {other:?}"
                )),
            }
        }
        for guard in guards {
            let _ = guard.release().await;
        }
        if let Some(problem) = workload::readers_let_in(observer, resource, *mode, ttl).await {
            recorder.liveness(problem);
        }
    }
    Ok(())
}

/// The liveness probe's one attempt to lead the election `resource` once every client
/// stopped, resigning at once; logged as a leader of client number `workload.clients` (with
/// its campaign), since the observers see it lead.
async fn probe_election(
    observer: &LockClient,
    recorder: &Recorder,
    workload: &Workload,
    resource: &str,
) {
    let lock_id = format!("harness.probe.{resource}");
    let invoked_at = Instant::now();
    recorder.campaign(history::CampaignLog {
        client: workload.clients,
        resource: resource.to_owned(),
        lock_id: lock_id.clone(),
        value: "harness".to_owned(),
        invoked_at,
        gives_up_at: invoked_at,
    });
    let election = observer
        .election(resource)
        .ttl(workload.ttl)
        .lock_id(lock_id);
    match election.try_campaign("harness").await {
        Ok(Some(leading)) => {
            let mut log = history::HolderLog::new(
                recorder.next_id(),
                workload.clients,
                Mode::Election,
                invoked_at,
                leading.guard(),
            );
            log.token = leading.term();
            log.lets_go(history::LetGo::Released);
            log.release = Some(history::ReleaseResult::of(&leading.resign().await));
            recorder.holder(log);
        }
        other => recorder.liveness(format!(
            "{resource}: the observer could not lead once every client stopped: {other:?}"
        )),
    }
}

/// With `MONGOLOCK_HARNESS_EXPLAIN` set: for each resource a server-side violation names (its
/// text begins with the resource), the server's writes on it ([`explain_server`]) and every
/// acquire call on it, in server ms: a place taken out of the line reads against the calls
/// of its lock id.
fn explain_oracle(
    events: &[oracle::ServerEvent],
    history: &history::History,
    outcome: &oracle::Outcome,
) {
    let resources: std::collections::BTreeSet<&str> = (outcome.violations.iter())
        .filter_map(|(_, text)| text.split_once(':').map(|(resource, _)| resource))
        .filter(|r| events.iter().any(|e| e.resource == *r))
        .collect();
    explain_server(events, &resources);
    if !resources.is_empty() {
        let at = |t| {
            history
                .server_ms(t)
                .map_or("-".to_owned(), |ms| format!("{ms} (server ms)"))
        };
        // What may have moved the server's time under an entry's absolute stamps.
        eprintln!("operator actions and clock moves (kind, start, end):");
        for op in &history.ops {
            eprintln!("  {:?} {} {}", op.kind, at(op.start), at(op.end));
        }
        explain_set(history, &at);
    }
    for resource in resources {
        eprintln!("acquire calls on {resource} (server ms):");
        for call in history
            .acquire_calls
            .iter()
            .filter(|c| c.resource == resource)
        {
            let at = |t| {
                history
                    .server_ms(t)
                    .map_or("-".to_owned(), |ms| ms.to_string())
            };
            eprintln!(
                "  client {} lock id {} from {} to {} granted {} timeout {:?}",
                call.client,
                call.lock_id,
                at(call.invoked_at),
                at(call.ended_at),
                call.granted,
                call.timeout,
            );
        }
    }
}

/// With `MONGOLOCK_HARNESS_EXPLAIN` set, on a set: what the failover nemesis did and saw, and
/// the primary's clock offsets it recorded, each at its instant as `at` shows it.
fn explain_set(history: &history::History, at: &dyn Fn(std::time::Instant) -> String) {
    if !history.set_events.is_empty() {
        eprintln!("the failover nemesis (at, what):");
        for (t, what) in &history.set_events {
            eprintln!("  {} {what}", at(*t));
        }
    }
    if !history.server_offsets.is_empty() {
        eprintln!("the primary's clock ahead of the set's (from, ms):");
        for (from, offset) in &history.server_offsets {
            eprintln!("  {} {offset}", at(*from));
        }
    }
}

/// With `MONGOLOCK_HARNESS_EXPLAIN` set: every committed write on each of `resources` (those
/// a violation names), as the server's change stream saw it (server time in ms, the columns
/// `explain` prints as "server"), with the entries it left and the line's places (lock id
/// and call): what removed a holder's entry or a place, and when, reads from it.
fn explain_server(events: &[oracle::ServerEvent], resources: &std::collections::BTreeSet<&str>) {
    let text = |d: &bson::Document, field: &str| match d.get(field) {
        Some(bson::Bson::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "-".to_owned(),
    };
    let entry = |e: &bson::Document| {
        format!(
            "{{lock id {} token {} nonce {} keeper {} adopted {} expires {} delay {}}}",
            text(e, "lockId"),
            text(e, "token"),
            text(e, "nonce"),
            text(e, "keeper"),
            text(e, "adopted"),
            e.get_datetime("expiresAt")
                .map_or_else(|_| "-".to_owned(), |t| t.timestamp_millis().to_string()),
            text(e, "delayMs"),
        )
    };
    for &resource in resources {
        eprintln!("server writes on {resource}:");
        for event in events.iter().filter(|e| e.resource == resource) {
            let Some(doc) = &event.doc else {
                eprintln!("  {} deleted", event.at_ms);
                continue;
            };
            let exclusive = match doc.get_document("exclusive") {
                Ok(e) => entry(e),
                Err(_) => "-".to_owned(),
            };
            let shared: Vec<String> = doc
                .get_array("shared")
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e.as_document())
                        .map(entry)
                        .collect()
                })
                .unwrap_or_default();
            let released = doc.get_array("released").map_or(0, |a| a.len());
            let line: Vec<String> = doc
                .get_array("queue")
                .map(|a| {
                    (a.iter().filter_map(|p| p.as_document()))
                        .map(|p| format!("{} call {}", text(p, "lockId"), text(p, "call")))
                        .collect()
                })
                .unwrap_or_default();
            eprintln!(
                "  {} fence {} exclusive {exclusive} shared {shared:?} tombstones {released} line {line:?} wake {}",
                event.at_ms,
                text(doc, "fence"),
                text(doc, "wake"),
            );
        }
    }
}

/// With `MONGOLOCK_HARNESS_EXPLAIN` set: every holder of each resource a violation names,
/// on stderr, in ms since the first call (the checker's origin), to read a violation by.
fn explain(history: &history::History, outcome: &check::Outcome) {
    let origin = (history.holders.iter().map(|l| l.invoked_at).min()).unwrap_or(history.end);
    let ms = |t: std::time::Instant| t.saturating_duration_since(origin).as_millis();
    let at =
        |t: Option<std::time::Instant>| t.map_or_else(|| "-".to_owned(), |t| ms(t).to_string());
    let resources: std::collections::BTreeSet<&str> = (outcome.violations.iter())
        .filter_map(|v| v.resource.as_deref())
        .collect();
    if outcome.has(check::Check::CallTimeout) {
        eprintln!("faults (kind, client, start, end):");
        for f in &history.faults {
            eprintln!(
                "  {:?} {:?} {} {}",
                f.kind,
                f.client,
                ms(f.start),
                ms(f.end)
            );
        }
        eprintln!("calls with a timeout (client, resource, lock id, invoked, ended, granted):");
        for c in history.acquire_calls.iter().filter(|c| c.timeout.is_some()) {
            eprintln!(
                "  {} {} {} {} {} {}",
                c.client,
                c.resource,
                c.lock_id,
                ms(c.invoked_at),
                ms(c.ended_at),
                c.granted
            );
        }
    }
    if resources.is_empty() && !outcome.has(check::Check::CallTimeout) {
        return;
    }
    // What may have ended a lease unseen, or moved the server's time: the operator's
    // actions and clock moves, and on a set the primary's clock offsets.
    eprintln!("operator actions and clock moves (kind, start, end):");
    for op in &history.ops {
        eprintln!("  {:?} {} {}", op.kind, ms(op.start), ms(op.end));
    }
    explain_set(history, &|t| ms(t).to_string());
    for resource in resources {
        eprintln!("holders of {resource}:");
        let mut holders: Vec<_> = (history.holders.iter())
            .filter(|l| l.resource == resource)
            .collect();
        holders.sort_by_key(|l| l.granted_at);
        for l in holders {
            eprintln!(
                "  {} client {} lock id {:?} token {} resumed from {:?}: sent {} granted {} \
                 (server {}) believed until {} notified {:?} at {} released {} let go {:?} \
                 release {:?} killed {} pauses {:?}",
                l.id,
                l.client,
                l.lock_id,
                l.token,
                l.resumed_from,
                ms(l.attempt_sent_at),
                ms(l.granted_at),
                at(l.server_granted_at),
                ms(l.belief_end(history.end)),
                l.notified.map(|(_, kind)| kind),
                at(l.notified.map(|(t, _)| t)),
                at(l.released_at),
                l.let_go,
                l.release,
                at(l.killed_at),
                l.pauses
                    .iter()
                    .map(|p| (ms(p.start), ms(p.end)))
                    .collect::<Vec<_>>(),
            );
        }
    }
}
