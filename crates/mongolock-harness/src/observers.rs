//! Observers of elections: tasks that follow each election during a run with
//! `Election::observe()` and poll `Election::leader()` now and then, logging every leader
//! (or nobody) they are told of ([`Observation`]); and, at the end of a run, the fresh reads
//! of the leader once the election is quiet ([`FinalRead`]).
//!
//! Each stream observer has a driver client of its own; the first one connects directly,
//! the others through a fault proxy of their own that shakes now and then (its connections
//! reset, or replies delayed for a while), so that their change streams break and are
//! reopened and their reads are slow. The poller connects directly. Faults aimed at the
//! workers do not reach the observers: what they see is what the server had.
//!
//! At the end of a run, with every client stopped and every lease long over, each election
//! is read fresh twice: with nobody leading, and with a leader of the harness's own that
//! proclaimed a value, each after [`QUIET`] without a change. The check compares each read,
//! and each stream observer's last item before it, with the leader the history says leads
//! then ([`crate::check::Check::FinalLeader`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::ClientOptions;
use mongolock::{Election, LockClient};
use mongolock_testkit::{FaultProxy, TestServer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;

use crate::history::{
    CampaignLog, FinalRead, FromLibrary, GuardLog, HolderLog, LetGo, Mode, Observation,
    ProclaimLog, ProclaimOutcome, Recorder, ReleaseResult, SeenLeader, Source,
};
use crate::workload::{COLLECTION, DB, Workload};

/// How long an election goes without a change before the fresh read at the end of a run
/// (the checker's, which judges such reads).
pub use crate::check::QUIET;

/// How often the poller reads each election's leader.
pub const POLL_EVERY: Duration = Duration::from_millis(250);

/// How many stream observers follow each election.
pub const STREAMS: usize = 2;

/// The observers of a run's elections, running.
#[derive(Debug)]
pub struct Observers {
    tasks: Vec<JoinHandle<()>>,
    shakers: Vec<JoinHandle<()>>,
    proxies: Vec<Arc<FaultProxy>>,
    stop: Arc<AtomicBool>,
    recorder: Recorder,
}

impl Observers {
    /// Starts [`STREAMS`] stream observers and one poller on each of `elections` of
    /// `server`; the shaky proxies' faults follow `seed`.
    ///
    /// # Errors
    /// A proxy could not bind.
    pub async fn start(
        server: &TestServer,
        elections: &[String],
        recorder: &Recorder,
        seed: u64,
    ) -> Result<Observers, Box<dyn std::error::Error>> {
        Self::start_on(
            &|| server.client_options(),
            server.addr(),
            elections,
            recorder,
            seed,
        )
        .await
    }

    /// As [`Observers::start`], with direct observers on clients built with `client_options` and the
    /// shaky proxies in front of `upstream` (on a replica set: clients that discover the
    /// set, and the router that follows its primary, [`crate::replset::Router`]).
    ///
    /// # Errors
    /// A proxy could not bind.
    pub async fn start_on(
        client_options: &(dyn Fn() -> ClientOptions + Sync),
        upstream: std::net::SocketAddr,
        elections: &[String],
        recorder: &Recorder,
        seed: u64,
    ) -> Result<Observers, Box<dyn std::error::Error>> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        let mut shakers = Vec::new();
        let mut proxies = Vec::new();
        let on =
            |client: mongodb::Client| LockClient::new(client.database(DB).collection(COLLECTION));
        let direct = || on(mongodb::Client::with_options(client_options()).expect("valid options"));
        for (e, resource) in elections.iter().enumerate() {
            for s in 0..STREAMS {
                let observer = e * STREAMS + s;
                let locks = if s == 0 {
                    direct()
                } else {
                    let proxy = Arc::new(FaultProxy::start(upstream).await?);
                    let rng = StdRng::seed_from_u64(seed ^ ((observer as u64 + 1) << 32));
                    shakers.push(tokio::spawn(shake(proxy.clone(), rng, stop.clone())));
                    let locks = LockClient::new(proxy.client().database(DB).collection(COLLECTION));
                    proxies.push(proxy);
                    locks
                };
                let election = locks.election(resource.clone());
                tasks.push(tokio::spawn(follow(election, observer, recorder.clone())));
            }
            let served = ServedBy::default();
            let mut options = client_options();
            options.command_event_handler = Some(served.handler());
            let locks = on(mongodb::Client::with_options(options)?);
            let election = locks.election(resource.clone());
            tasks.push(tokio::spawn(poll(election, e, served, recorder.clone())));
        }
        Ok(Observers {
            tasks,
            shakers,
            proxies,
            stop,
            recorder: recorder.clone(),
        })
    }

    /// The last item each stream observer of `resource` received before `before`.
    pub fn last_items(&self, resource: &str, before: Instant) -> Vec<(usize, Option<SeenLeader>)> {
        let mut last: std::collections::BTreeMap<usize, (Instant, Option<SeenLeader>)> =
            std::collections::BTreeMap::new();
        for o in self.recorder.observations() {
            if o.source != Source::Stream || o.resource != resource || o.at >= before {
                continue;
            }
            if last.get(&o.observer).is_none_or(|(at, _)| *at <= o.at) {
                last.insert(o.observer, (o.at, o.leader));
            }
        }
        last.into_iter().map(|(o, (_, l))| (o, l)).collect()
    }

    /// Stops shaking the observers' proxies, and heals them: the observers follow on.
    pub async fn calm(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for shaker in self.shakers.drain(..) {
            shaker.abort();
            let _ = shaker.await;
        }
        for proxy in &self.proxies {
            proxy.heal();
        }
    }

    /// Stops every observer (and heals its proxy).
    pub async fn stop(mut self) {
        self.calm().await;
        for task in &self.tasks {
            task.abort();
        }
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Follows `election` with `observe()`, logging every item (an error is counted).
async fn follow(election: Election, observer: usize, recorder: Recorder) {
    follow_keeping(election, observer, recorder, |_| true).await;
}

/// Follows `election` with `observe()`, logging the items `keep` keeps (an error is
/// counted): a broken observer of a negative control drops some.
pub(crate) async fn follow_keeping(
    election: Election,
    observer: usize,
    recorder: Recorder,
    mut keep: impl FnMut(&Option<mongolock::Leader>) -> bool,
) {
    let resource = election.name().to_owned();
    let mut stream = Box::pin(election.observe());
    let mut from = Instant::now();
    while let Some(item) = stream.next().await {
        let at = Instant::now();
        match item {
            Ok(leader) if !keep(&leader) => {}
            Ok(leader) => recorder.observation(Observation {
                observer,
                source: Source::Stream,
                resource: resource.clone(),
                from,
                at,
                leader: leader.as_ref().map(SeenLeader::of),
                served: None,
            }),
            Err(_) => recorder.observer_error(),
        }
        from = at;
    }
}

/// How the poller's last read was served, from its client's command monitoring: the member
/// that answered its `aggregate`, the reply's `operationTime` (on a majority read, the
/// snapshot's last write) and the rows it returned, or the error. The poller's reads are
/// one at a time, so the last reply is the last read's.
#[derive(Clone, Default)]
struct ServedBy(Arc<std::sync::Mutex<Option<String>>>);

impl ServedBy {
    /// The command monitor that records the poller's replies.
    fn handler(&self) -> EventHandler<CommandEvent> {
        let last = self.0.clone();
        EventHandler::callback(move |event: CommandEvent| {
            let told = match event {
                CommandEvent::Succeeded(done) if done.command_name == "aggregate" => {
                    let rows = done
                        .reply
                        .get_document("cursor")
                        .and_then(|cursor| cursor.get_array("firstBatch"))
                        .map(|rows| {
                            rows.iter()
                                .filter_map(bson::Bson::as_document)
                                .map(|row| {
                                    format!(
                                        "{} {}",
                                        row.get("lockId").map_or("-".into(), ToString::to_string),
                                        row.get("remainingMs")
                                            .map_or("-".into(), ToString::to_string)
                                    )
                                })
                                .collect::<Vec<_>>()
                        })
                        .unwrap_or_default();
                    format!(
                        "{} answered, operationTime {}, rows {rows:?}",
                        done.connection.address,
                        done.reply
                            .get("operationTime")
                            .map_or("-".into(), ToString::to_string),
                    )
                }
                CommandEvent::Failed(failed) if failed.command_name == "aggregate" => {
                    format!("{} failed: {}", failed.connection.address, failed.failure)
                }
                _ => return,
            };
            *last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(told);
        })
    }

    /// Takes the last read's account.
    fn take(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// Reads `election`'s leader every [`POLL_EVERY`], logging every answer with how it was
/// served.
async fn poll(election: Election, observer: usize, served: ServedBy, recorder: Recorder) {
    let resource = election.name().to_owned();
    loop {
        tokio::time::sleep(POLL_EVERY).await;
        let from = Instant::now();
        served.take();
        let read = election.leader().await;
        let at = Instant::now();
        match read {
            Ok(leader) => recorder.observation(Observation {
                observer,
                source: Source::Poll,
                resource: resource.clone(),
                from,
                at,
                leader: leader.as_ref().map(SeenLeader::of),
                served: served.take(),
            }),
            Err(_) => recorder.observer_error(),
        }
    }
}

/// Shakes an observer's proxy until `stop`: every 1–4 s, its connections reset, or its
/// replies delayed by 20–300 ms for a second.
async fn shake(proxy: Arc<FaultProxy>, mut rng: StdRng, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1_000..=4_000))).await;
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if rng.random_bool(0.5) {
            proxy.reset_connections();
        } else {
            proxy.add_latency(Duration::from_millis(rng.random_range(20..=300)));
            tokio::time::sleep(Duration::from_secs(1)).await;
            proxy.heal();
        }
    }
    proxy.heal();
}

/// The end of a run, on each election of `workload` (every client stopped, every lease
/// over): after twice the TTL and [`QUIET`], a fresh read with nobody leading; then a
/// leader of the harness's own (client number `workload.clients`, logged as any leader,
/// with its campaign and its proclaim) proclaims a value, and after [`QUIET`] a fresh read
/// again; then it resigns. Each read is logged with each stream observer's last item.
///
/// # Errors
/// A lock call failed (on a direct connection, without faults).
pub async fn final_reads(
    locks: &LockClient,
    observers: &Observers,
    recorder: &Recorder,
    workload: &Workload,
) -> Result<(), Box<dyn std::error::Error>> {
    let client = workload.clients;
    for resource in workload.pool(Mode::Election) {
        tokio::time::sleep(workload.ttl * 2 + QUIET).await;
        let election = locks.election(resource.clone()).ttl(workload.ttl);
        final_read(&election, observers, recorder).await?;

        let lock_id = format!("harness.final.{resource}");
        let invoked_at = Instant::now();
        recorder.campaign(CampaignLog {
            client,
            resource: resource.clone(),
            lock_id: lock_id.clone(),
            value: "harness".to_owned(),
            invoked_at,
            gives_up_at: invoked_at + workload.acquire_timeout,
        });
        let election = election.lock_id(lock_id);
        let Some(leading) = election
            .campaign_timeout("harness", workload.acquire_timeout)
            .await?
        else {
            recorder.liveness(format!(
                "{resource}: the harness could not lead once every client stopped"
            ));
            continue;
        };
        let mut log = HolderLog::new(
            recorder.next_id(),
            client,
            Mode::Election,
            invoked_at,
            leading.guard(),
        );
        log.token = leading.term();
        let value = "harness/final".to_owned();
        let invoked_at = Instant::now();
        let proclaimed = leading.proclaim(value.clone()).await;
        recorder.proclaim(ProclaimLog {
            client,
            holder: log.id,
            resource: resource.clone(),
            term: leading.term(),
            value,
            invoked_at,
            returned_at: Instant::now(),
            outcome: ProclaimOutcome::of(&proclaimed),
            lost_after: leading.is_lost(),
        });
        tokio::time::sleep(QUIET).await;
        log.sample(leading.guard());
        final_read(&election, observers, recorder).await?;
        log.check_lost(leading.guard());
        log.lets_go(LetGo::Released);
        log.release = Some(ReleaseResult::of(&leading.resign().await));
        recorder.holder(log);
    }
    Ok(())
}

/// One fresh read of `election`'s leader, logged with the stream observers' last items.
async fn final_read(
    election: &Election,
    observers: &Observers,
    recorder: &Recorder,
) -> mongolock::Result<()> {
    let resource = election.name().to_owned();
    let from = Instant::now();
    let observed = observers.last_items(&resource, from);
    let leader = election.leader().await?;
    recorder.final_read(FinalRead {
        resource,
        from,
        at: Instant::now(),
        leader: leader.as_ref().map(SeenLeader::of),
        observers: observed,
    });
    Ok(())
}
