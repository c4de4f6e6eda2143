//! The harness on a three-member replica set (`--replset`): the standard workload runs
//! against the testkit's [`ReplicaSet`] (default write concern, `w: "majority"`), with a
//! failover nemesis ([`Failover`]) beside the usual faults, and the server-side oracle reads
//! a change stream that follows the set from primary to primary.
//!
//! # What runs where
//!
//! - **The fleet** reaches the set through a [`Router`], one address that forwards each new
//!   connection to the member the harness points it at: the primary, found as it changes
//!   (as a load balancer or a virtual IP in front of a set would, and as a driver's own
//!   discovery ends up doing). When the primary changes the router closes every connection
//!   it carries, so the clients see network errors, as they do when a primary goes away,
//!   and reconnect to the new one. Until a new primary is elected it keeps forwarding to
//!   the old one: a stopped primary refuses connections, a partitioned primary still takes
//!   the clients' writes (the minority side with clients still reaching it). Each client's
//!   [`FaultProxy`](mongolock_testkit::FaultProxy) sits in front of the router, so every
//!   fault of [`crate::faults`] applies as on one server. Fail points are armed on the
//!   primary of the moment; a failover leaves them behind on the old one.
//! - **The observer** (operator actions, the liveness probe, the final reads), the
//!   direct election observers and the oracle's tap use driver clients that discover the
//!   set (`replicaSet=`) and follow its primary themselves.
//! - **The clocks**: the workload's clock faults (jumps, steps) move the set's shared clock,
//!   so every member's at once, as NTP stepping every host would; [`Failover::ClockOffset`]
//!   puts one member ahead or behind (the primary's half of the time). The history's readings of "the server's clock" are of
//!   the primary's: each is taken from the shared clock plus the primary's offset
//!   ([`crate::history::Recorder::set_reading_offset`]). When the primary changes to a
//!   member whose clock differs, `$$NOW` steps by the difference: the history records it as
//!   an operator's clock step ([`OpKind::ClockStep`]), forward (which, as a clock jump,
//!   may end leases their holders were not told of) or back (which excuses nothing).
//!
//! # The failover nemesis
//!
//! Every 1.2–2.5 s it takes the next kind of a seeded shuffle of [`Failover::ALL`] (so every
//! kind comes up in any five picks), one fault on the primary at a time:
//! a `replSetStepDown` of the primary (mongod's election handoff elects a caught-up
//! secondary at once); the primary stopped, restarted 0.8–2 s later (the others elect after
//! the election timeout); the primary partitioned from the others while the clients still
//! reach it, healed 1–2.5 s later, which rolls back what it wrote alone (mongod's
//! `RollbackImpl`); one member's clock set 1–5 s ahead or behind for 2–6 s; one member's
//! replication lag raised to 20–300 ms for 1–4 s. Each is recorded in the history as what
//! every client sees of it ([`Failover::recorded_as`]: a step-down's errors, a stopped
//! primary's lost replies, a partitioned primary's write-concern failures, a lagging
//! member's latency), and counted twice in the report: as picked and as done (a step-down
//! that changed the primary, a partition during which the others elected, a rollback that
//! undid entries, the terms reached). A fault that never ran proves nothing: a run in which
//! the primary never changed fails as vacuous.
//!
//! # The oracle on the set
//!
//! mongod's change streams deliver only majority-committed events, so a write that a
//! partitioned primary took and later rolled back never appears on them, and every event's
//! `wallTime` is the writing primary's clock (the oplog entry's `wall`). The emulator's
//! members each serve their own change log, read only up to the majority commit point the
//! member knows (since `74d3ab3`; before, a partitioned primary's writes were delivered at
//! once and a rolled-back one could be), and stamp an applied entry with the applying
//! member's clock. The tap ([`SetTap`]) therefore reads the stream of the primary of the moment
//! (resuming on the new primary 10 s before the last cluster time it read when the old one
//! fails or steps down, events read twice skipped, counted as resumes: a partitioned
//! primary's rolled-back writes may carry cluster times ahead of the new primary's first
//! writes), and at the end keeps, in the set's oplog order, exactly
//! the events the set kept ([`ReplicaSet::oplog`]: the primary's oplog once rollbacks are
//! done), each with the writing primary's wall clock. Events read and not kept (rolled back)
//! are counted, and stay 0 now that the streams deliver only committed events; a write the set kept that the stream never delivered makes the oracle
//! incomplete rather than judged on a partial log. (S1)-(S13) are then judged as on one
//! server, on the server's time of the primary that committed each write.
//!
//! # Server times of two primaries
//!
//! The checks that compare server times with each other or with our instants ((9), and
//! (S7), (S11), (S12), (S13) through the readings) see times stamped by the primary of the
//! moment, each by its own clock: a failover to a member whose clock is apart moves them by
//! the difference. Taken as one clock's, a next grant on a primary whose clock is behind
//! read as inside the previous lease's lock-delay although the previous primary removed
//! that entry after the delay by its own clock ((9), `--replset --quick --seed 41003`), and
//! an entry renewed by a primary whose clock is ahead read as outliving its holder by the
//! step ((S7), seeds 41002 and 41003). The nemesis therefore records, with every change of
//! the primary or of its clock, the offset of the serving member's clock from the set's
//! shared clock ([`Recorder::set_reading_offset`], kept as
//! [`History::server_offsets`](crate::history::History::server_offsets)), and
//! each check counts the two times it compares on one clock: a time stamped by a primary
//! whose clock was behind is moved up by what the fastest primary serving in the window
//! it is judged against was ahead of it (any of them may have decided, by its own clock,
//! that the lease or the delay was over), never by more. A grant before the delay ended by
//! every serving primary's clock is still caught; on one server no offset is recorded and
//! every check is as it was.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bson::{Bson, Document, Timestamp, doc};
use mongodb::Database;
use mongolock_testkit::ReplicaSet;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::history::{FaultKind, OpKind, Recorder};
use crate::oracle::ServerEvent;

pub mod control;

/// The members of the set.
pub const MEMBERS: usize = 3;

/// The set's election timeout (mongod's `electionTimeoutMillis`, 10 s there).
pub const ELECTION_TIMEOUT: Duration = Duration::from_millis(500);

/// Every member's replication lag outside [`Failover::Lag`].
pub const BASE_LAG: Duration = Duration::from_millis(2);

/// The kinds of failover fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Failover {
    /// `replSetStepDown` of the primary (3 s, catch-up period 2 s).
    StepDown,
    /// The primary stopped as if killed, restarted 0.8–2 s later.
    StopRestart,
    /// The primary partitioned from the other members while clients still reach it, healed
    /// 1–2.5 s later (after the others elected): what it wrote alone is rolled back.
    PrimaryPartition,
    /// One member's clock 1–5 s ahead or behind the others for 2–6 s.
    ClockOffset,
    /// One member's replication lag raised to 20–300 ms for 1–4 s.
    Lag,
}

impl Failover {
    /// Every kind, in report order.
    pub const ALL: [Failover; 5] = [
        Failover::StepDown,
        Failover::StopRestart,
        Failover::PrimaryPartition,
        Failover::ClockOffset,
        Failover::Lag,
    ];

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Failover::StepDown => "replSetStepDown of the primary",
            Failover::StopRestart => "primary stopped, restarted",
            Failover::PrimaryPartition => "primary partitioned (clients reach it), healed",
            Failover::ClockOffset => "a member's clock 1-5 s ahead/behind",
            Failover::Lag => "a member's replication lag 20-300 ms",
        }
    }

    /// What every client sees of it, as the history records it for each client: a
    /// step-down answers their writes with step-down errors (10107, 11602, 189); a stopped
    /// primary closes their connections, so writes it applied are answered by no reply; a
    /// partitioned primary applies their writes and fails the `w: "majority"` wait (64, or
    /// 189 when it steps down); a lagging member slows the majority wait. A clock offset
    /// hits no client: it is recorded as a step of the primary's clock when it is the
    /// primary's ([`OpKind::ClockStep`]).
    pub fn recorded_as(self) -> Option<FaultKind> {
        match self {
            Failover::StepDown => Some(FaultKind::StepDownError),
            Failover::StopRestart => Some(FaultKind::LostReplies),
            Failover::PrimaryPartition => Some(FaultKind::WriteConcernError),
            Failover::Lag => Some(FaultKind::Latency),
            Failover::ClockOffset => None,
        }
    }

    /// True for the faults aimed at the primary (one at a time).
    fn on_primary(self) -> bool {
        matches!(
            self,
            Failover::StepDown | Failover::StopRestart | Failover::PrimaryPartition
        )
    }
}

/// What the failover nemesis and the tap did in one run.
#[derive(Debug, Clone, Default)]
pub struct FailoverStats {
    /// Faults picked and begun, by kind.
    pub injected: BTreeMap<Failover, u64>,
    /// Step-downs that returned `ok` and left another member primary.
    pub step_downs: u64,
    /// Step-downs the primary refused (no caught-up electable secondary: 262, ...).
    pub step_downs_refused: u64,
    /// Primaries stopped, and restarted.
    pub stops: u64,
    /// See [`FailoverStats::stops`].
    pub restarts: u64,
    /// Primaries partitioned, and of those, partitions during which the others elected a
    /// new primary (the old one stepped down for want of a majority).
    pub partitions: u64,
    /// See [`FailoverStats::partitions`].
    pub partitions_elected: u64,
    /// Rollbacks the members went through, and the oplog entries they undid.
    pub rollbacks: usize,
    /// See [`FailoverStats::rollbacks`].
    pub rolled_back_entries: usize,
    /// Clock offsets set (on any member), and steps of the primary's clock they caused
    /// (forward, back): set on the primary, or a failover to a member whose clock differs.
    pub clock_offsets: u64,
    /// See [`FailoverStats::clock_offsets`].
    pub primary_clock_steps: (u64, u64),
    /// The largest step of the primary's clock each way, in ms.
    pub largest_steps_ms: (i64, i64),
    /// Lag raised on a member.
    pub lag_changes: u64,
    /// Times the router followed a new primary.
    pub primary_changes: u64,
    /// The term at the end (the set starts in term 1).
    pub final_term: i64,
    /// Times the tap's change stream resumed on the primary of the moment.
    pub tap_resumes: u64,
    /// Change events the tap read that the set did not keep (rolled back).
    pub events_rolled_back: usize,
    /// Change events the tap read and the set kept (the oracle's log).
    pub events_kept: usize,
}

impl FailoverStats {
    /// True if the primary never changed: the run proves nothing of a failover.
    pub fn vacuous(&self) -> bool {
        self.primary_changes == 0
    }

    /// Adds `other` (another run's) to these.
    pub fn add(&mut self, other: &FailoverStats) {
        for (kind, n) in &other.injected {
            *self.injected.entry(*kind).or_default() += n;
        }
        self.step_downs += other.step_downs;
        self.step_downs_refused += other.step_downs_refused;
        self.stops += other.stops;
        self.restarts += other.restarts;
        self.partitions += other.partitions;
        self.partitions_elected += other.partitions_elected;
        self.rollbacks += other.rollbacks;
        self.rolled_back_entries += other.rolled_back_entries;
        self.clock_offsets += other.clock_offsets;
        self.primary_clock_steps.0 += other.primary_clock_steps.0;
        self.primary_clock_steps.1 += other.primary_clock_steps.1;
        self.largest_steps_ms.0 = self.largest_steps_ms.0.max(other.largest_steps_ms.0);
        self.largest_steps_ms.1 = self.largest_steps_ms.1.min(other.largest_steps_ms.1);
        self.lag_changes += other.lag_changes;
        self.primary_changes += other.primary_changes;
        self.final_term = self.final_term.max(other.final_term);
        self.tap_resumes += other.tap_resumes;
        self.events_rolled_back += other.events_rolled_back;
        self.events_kept += other.events_kept;
    }

    /// The report's rows: (what, how many).
    pub fn rows(&self) -> Vec<(String, String)> {
        let mut rows = Vec::new();
        for kind in Failover::ALL {
            let n = self.injected.get(&kind).copied().unwrap_or(0);
            rows.push((format!("picked: {}", kind.name()), n.to_string()));
        }
        rows.push((
            "step-downs done (refused)".into(),
            format!("{} ({})", self.step_downs, self.step_downs_refused),
        ));
        rows.push((
            "primaries stopped / restarted".into(),
            format!("{} / {}", self.stops, self.restarts),
        ));
        rows.push((
            "primaries partitioned (others elected)".into(),
            format!("{} ({})", self.partitions, self.partitions_elected),
        ));
        rows.push((
            "rollbacks (oplog entries undone)".into(),
            format!("{} ({})", self.rollbacks, self.rolled_back_entries),
        ));
        rows.push((
            "clock offsets set; primary's clock stepped fwd / back".into(),
            format!(
                "{}; {} / {} (largest +{} / {} ms)",
                self.clock_offsets,
                self.primary_clock_steps.0,
                self.primary_clock_steps.1,
                self.largest_steps_ms.0,
                self.largest_steps_ms.1
            ),
        ));
        rows.push(("lag raised".into(), self.lag_changes.to_string()));
        rows.push((
            "primary changes followed; last term".into(),
            format!("{}; {}", self.primary_changes, self.final_term),
        ));
        rows.push((
            "tap: resumes; events kept (rolled back)".into(),
            format!(
                "{}; {} ({})",
                self.tap_resumes, self.events_kept, self.events_rolled_back
            ),
        ));
        rows
    }
}

/// What the router's handle and its connections share.
#[derive(Debug)]
struct RouterShared {
    members: Vec<SocketAddr>,
    target: AtomicUsize,
    /// Bumped on every retarget: each connection closes when it changes.
    switch: watch::Sender<u64>,
}

/// One address in front of the set that forwards each new connection to the member it
/// points at, byte for byte, and closes every connection when it is pointed elsewhere.
#[derive(Debug)]
pub struct Router {
    addr: SocketAddr,
    shared: Arc<RouterShared>,
    task: JoinHandle<()>,
}

impl Router {
    /// Starts a router on a free port of 127.0.0.1, pointed at member `target` of
    /// `members`.
    ///
    /// # Errors
    /// The listener could not bind.
    ///
    /// # Cancel safety
    /// Dropping the future before it completes leaves nothing running.
    pub async fn start(members: Vec<SocketAddr>, target: usize) -> std::io::Result<Router> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(RouterShared {
            members,
            target: AtomicUsize::new(target),
            switch: watch::channel(0).0,
        });
        let task = tokio::spawn(accept(listener, shared.clone()));
        Ok(Router { addr, shared, task })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The member new connections go to.
    pub fn target(&self) -> usize {
        self.shared.target.load(Ordering::SeqCst)
    }

    /// Points new connections at member `member` and closes every current one.
    pub fn retarget(&self, member: usize) {
        self.shared.target.store(member, Ordering::SeqCst);
        self.shared.switch.send_modify(|n| *n += 1);
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        self.task.abort();
        self.shared.switch.send_modify(|n| *n += 1);
    }
}

async fn accept(listener: TcpListener, shared: Arc<RouterShared>) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        let _ = inbound.set_nodelay(true);
        let upstream = shared.members[shared.target.load(Ordering::SeqCst)];
        let mut switched = shared.switch.subscribe();
        tokio::spawn(async move {
            let Ok(mut outbound) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = outbound.set_nodelay(true);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                _ = switched.changed() => {}
            }
        });
    }
}

/// The set a run uses, with its router.
#[derive(Debug)]
pub struct SetStage {
    /// The set.
    pub set: Arc<ReplicaSet>,
    /// The router the fleet reaches it through.
    pub router: Arc<Router>,
}

impl SetStage {
    /// Starts a set of [`MEMBERS`] (member 0 primary) and a router pointed at its primary.
    ///
    /// # Errors
    /// A member or the router could not bind.
    pub async fn start() -> std::io::Result<SetStage> {
        let set = ReplicaSet::builder()
            .members(MEMBERS)
            .lag(BASE_LAG)
            .election_timeout(ELECTION_TIMEOUT)
            .start()
            .await?;
        let members = (0..set.len()).map(|i| set.member(i).addr()).collect();
        let router = Router::start(members, set.primary().unwrap_or(0)).await?;
        Ok(SetStage {
            set: Arc::new(set),
            router: Arc::new(router),
        })
    }

    /// A new driver client that discovers the set.
    pub fn new_client(&self) -> mongodb::Client {
        self.set.new_client()
    }

    /// The options of [`SetStage::new_client`]'s clients.
    pub fn client_options(&self) -> mongodb::options::ClientOptions {
        self.set.client_options()
    }

    /// Stops the set.
    pub async fn shutdown(self) {
        drop(self.router);
        match Arc::try_unwrap(self.set) {
            Ok(set) => set.shutdown().await,
            Err(set) => drop(set),
        }
    }
}

/// A heal the nemesis owes, and when.
#[derive(Debug, Clone, Copy)]
enum Heal {
    Restart(usize),
    Rejoin(usize),
    Offset(usize),
    Lag(usize),
}

/// The failover nemesis: picks failover faults from the seed and applies them to the set
/// while the workload runs, follows the primary with the router, then heals everything.
#[derive(Debug)]
pub struct Nemesis {
    set: Arc<ReplicaSet>,
    router: Arc<Router>,
    admin: Database,
    recorder: Recorder,
    clients: usize,
    rng: StdRng,
    /// The next kinds to pick, a shuffle of every kind.
    bag: Vec<Failover>,
    /// Heals owed: when, what, and the fault with its start.
    owed: Vec<(Instant, Heal, Failover, Instant)>,
    /// Each member's clock offset, as set.
    offsets: Vec<i64>,
    /// The last time the router's member was seen primary: a change of primary seen later
    /// happened after it, and clients that discover the set themselves (the observers, the
    /// tap) may have been served by the new primary from then on.
    confirmed: Instant,
    /// What was done.
    pub stats: FailoverStats,
}

impl Nemesis {
    /// A nemesis on `stage`'s set whose choices follow `seed`, recording in `recorder` for
    /// `clients` clients.
    pub fn new(stage: &SetStage, seed: u64, recorder: &Recorder, clients: usize) -> Nemesis {
        let members = (0..stage.set.len())
            .map(|i| format!("{i} at {}", stage.set.member(i).addr()))
            .collect::<Vec<_>>();
        recorder.set_event(Instant::now(), format!("members: {}", members.join(", ")));
        Nemesis {
            set: stage.set.clone(),
            router: stage.router.clone(),
            admin: stage.set.client().database("admin"),
            recorder: recorder.clone(),
            clients,
            rng: StdRng::seed_from_u64(seed ^ 0x5EED_FA11_0FE4_0001),
            bag: Vec::new(),
            owed: Vec::new(),
            offsets: vec![0; stage.set.len()],
            confirmed: Instant::now(),
            stats: FailoverStats::default(),
        }
    }

    /// Injects failover faults until `until` (following the primary every 10 ms), then
    /// heals everything and waits (at most 20 s) for a primary and every rollback.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the set as it is (faults unhealed); the run is over then.
    pub async fn run(mut self, until: Instant) -> Nemesis {
        let mut next = Instant::now() + self.gap();
        while Instant::now() < until {
            self.follow();
            self.heal_due(false).await;
            if Instant::now() >= next {
                self.pick_and_apply().await;
                next = Instant::now() + self.gap();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.heal_due(true).await;
        let settle = Instant::now() + Duration::from_secs(20);
        while Instant::now() < settle {
            self.follow();
            let diverged = (0..self.set.len()).any(|i| self.set.is_diverged(i));
            if self.set.primary().is_some() && !diverged {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.follow();
        for i in 0..self.set.len() {
            let (rollbacks, undone) = self.set.rollbacks(i);
            self.stats.rollbacks += rollbacks;
            self.stats.rolled_back_entries += undone;
        }
        self.stats.final_term = self.set.term();
        self
    }

    fn gap(&mut self) -> Duration {
        Duration::from_millis(self.rng.random_range(1_200..=2_500))
    }

    /// Follows the primary: points the router at a new one, recording the step of the
    /// primary's clock it brings and a reading of it.
    fn follow(&mut self) {
        let Some(primary) = self.set.primary() else {
            return;
        };
        let old = self.router.target();
        if primary == old {
            self.confirmed = Instant::now();
            return;
        }
        self.router.retarget(primary);
        self.stats.primary_changes += 1;
        self.log(format!(
            "primary now member {primary} (term {}), last seen member {old}",
            self.set.term()
        ));
        let step = self.offsets[primary] - self.offsets[old];
        // The new primary may have served the clients that discover the set themselves
        // since the old one was last seen primary (the nemesis looks every 10 ms, and not
        // while it waits for a fault to be carried out): the step is recorded from then.
        self.primary_clock_step(step, self.confirmed);
        self.confirmed = Instant::now();
    }

    /// Records that the primary's clock reads `step` ms ahead of what it read at `since`
    /// (negative: behind), with a reading of it: the step came between `since` and now.
    fn primary_clock_step(&mut self, step: i64, since: Instant) {
        let primary = self.router.target();
        let now = Instant::now();
        self.recorder.set_reading_offset(now, self.offsets[primary]);
        let shared = self.set.shared_clock().now().timestamp_millis();
        self.recorder.server_clock(now, shared);
        if step == 0 {
            return;
        }
        self.recorder.op(
            OpKind::ClockStep {
                by_ms: step,
                judged: None,
            },
            since.min(now),
            now,
        );
        if step > 0 {
            self.stats.primary_clock_steps.0 += 1;
            self.stats.largest_steps_ms.0 = self.stats.largest_steps_ms.0.max(step);
        } else {
            self.stats.primary_clock_steps.1 += 1;
            self.stats.largest_steps_ms.1 = self.stats.largest_steps_ms.1.min(step);
        }
    }

    /// Sets member `member`'s clock offset, recording the step if it is the primary's.
    fn set_offset(&mut self, member: usize, offset_ms: i64) {
        self.log(format!("member {member}'s clock offset {offset_ms} ms"));
        let step = offset_ms - self.offsets[member];
        self.offsets[member] = offset_ms;
        self.set.set_clock_offset(member, offset_ms);
        if member == self.router.target() {
            self.primary_clock_step(step, Instant::now());
        }
    }

    /// Logs what was done or seen, now ([`Recorder::set_event`]).
    fn log(&self, what: String) {
        self.recorder.set_event(Instant::now(), what);
    }

    /// Records fault `kind` for every client, from `start` to now.
    fn record(&self, kind: Failover, start: Instant) {
        if let Some(recorded) = kind.recorded_as() {
            let end = Instant::now();
            for client in 0..self.clients {
                self.recorder.fault(recorded, Some(client), start, end);
            }
        }
    }

    fn busy_with_primary(&self) -> bool {
        self.owed.iter().any(|(_, _, kind, _)| kind.on_primary())
    }

    async fn pick_and_apply(&mut self) {
        if self.bag.is_empty() {
            self.bag = Failover::ALL.to_vec();
            self.bag.shuffle(&mut self.rng);
        }
        // The first kind in the bag that can run now; the others wait their turn.
        let ready = (0..self.bag.len()).find(|&i| {
            let kind = self.bag[i];
            !kind.on_primary() || (!self.busy_with_primary() && self.set.primary().is_some())
        });
        let Some(i) = ready else {
            return;
        };
        let kind = self.bag.remove(i);
        *self.stats.injected.entry(kind).or_default() += 1;
        self.apply(kind).await;
    }

    async fn apply(&mut self, kind: Failover) {
        let start = Instant::now();
        let Some(primary) = self.set.primary() else {
            return;
        };
        match kind {
            Failover::StepDown => {
                self.log(format!("member {primary} asked to step down"));
                let command = doc! {"replSetStepDown": 3, "secondaryCatchUpPeriodSecs": 2};
                let done = self.admin.run_command(command).await;
                let after = self.set.wait_for_primary(Duration::from_secs(3)).await;
                if done.is_ok() && after.is_some_and(|p| p != primary) {
                    self.stats.step_downs += 1;
                } else {
                    self.stats.step_downs_refused += 1;
                }
                self.follow();
                self.record(kind, start);
            }
            Failover::StopRestart => {
                self.set.stop(primary);
                self.log(format!("member {primary} (primary) stopped"));
                self.stats.stops += 1;
                let hold = Duration::from_millis(self.rng.random_range(800..=2_000));
                self.owed
                    .push((start + hold, Heal::Restart(primary), kind, start));
            }
            Failover::PrimaryPartition => {
                self.set.partition(primary);
                self.log(format!(
                    "member {primary} (primary) partitioned from the others"
                ));
                self.stats.partitions += 1;
                let hold = Duration::from_millis(self.rng.random_range(1_000..=2_500));
                self.owed
                    .push((start + hold, Heal::Rejoin(primary), kind, start));
            }
            Failover::ClockOffset => {
                // The primary's half of the time (its `$$NOW` steps at once), else a member
                // that may become primary while it lasts.
                let member = if self.rng.random_bool(0.5) {
                    primary
                } else {
                    self.rng.random_range(0..self.set.len())
                };
                if self.offsets[member] != 0 {
                    self.log(format!(
                        "member {member}'s clock offset left at {} ms",
                        self.offsets[member]
                    ));
                    return;
                }
                let magnitude = self.rng.random_range(1_000..=5_000);
                let offset = if self.rng.random_bool(0.5) {
                    magnitude
                } else {
                    -magnitude
                };
                self.set_offset(member, offset);
                self.stats.clock_offsets += 1;
                let hold = Duration::from_millis(self.rng.random_range(2_000..=6_000));
                self.owed
                    .push((start + hold, Heal::Offset(member), kind, start));
            }
            Failover::Lag => {
                let member = self.rng.random_range(0..self.set.len());
                let lag = Duration::from_millis(self.rng.random_range(20..=300));
                self.set.set_lag(member, lag);
                self.log(format!("member {member} lags {} ms", lag.as_millis()));
                self.stats.lag_changes += 1;
                let hold = Duration::from_millis(self.rng.random_range(1_000..=4_000));
                self.owed
                    .push((start + hold, Heal::Lag(member), kind, start));
            }
        }
    }

    /// Carries out the heals that are due (all of them with `all`).
    async fn heal_due(&mut self, all: bool) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.owed)
            .into_iter()
            .partition(|(at, ..)| all || *at <= now);
        self.owed = later;
        for (_, heal, kind, start) in due {
            match heal {
                Heal::Restart(member) => {
                    self.log(format!("member {member} restarted"));
                    self.set.restart(member);
                    self.stats.restarts += 1;
                }
                Heal::Rejoin(member) => {
                    if self.set.primary().is_some_and(|p| p != member) {
                        self.stats.partitions_elected += 1;
                    }
                    self.log(format!("member {member} rejoined"));
                    self.set.heal(member);
                }
                Heal::Offset(member) => self.set_offset(member, 0),
                Heal::Lag(member) => {
                    self.log(format!("member {member} lag back to the base"));
                    self.set.set_lag(member, BASE_LAG);
                }
            }
            self.follow();
            self.record(kind, start);
        }
    }
}

/// The `_id` of the marker document the set's tap writes last.
const MARKER: &str = "mongolock-harness/oracle-marker";

/// How long one `getMore` waits for events.
const POLL: Duration = Duration::from_millis(200);

/// How long the tap tries to resume before it gives up (the log would be partial).
const RESUME_FOR: Duration = Duration::from_secs(30);

/// How far before the last cluster time it read the tap resumes (past the newest
/// invalidation it read, if later).
const RESUME_BACK: Duration = Duration::from_secs(10);

/// How long [`SetTap::finish`] waits for the marker (longer than [`RESUME_FOR`], so that a
/// stream that could not resume says why).
const MARKER_WAIT: Duration = Duration::from_secs(45);

/// A change event as the tap read it: its cluster time, and the event.
type Read = (Timestamp, ServerEvent);

/// Reads the lock collection's change stream on the set while a run goes on, following the
/// primary (see the module's notes).
#[derive(Debug)]
pub struct SetTap {
    db: Database,
    collection: String,
    stop: Arc<AtomicBool>,
    task: JoinHandle<Result<(Vec<Read>, u64), String>>,
}

impl SetTap {
    /// Records post-images on `collection` (`collMod`) and opens its change stream on the
    /// primary; every write committed after this returns is seen.
    ///
    /// # Errors
    /// The collection does not exist, or the primary refused the stream.
    ///
    /// # Cancel safety
    /// Dropping the future may leave post-images switched on; no task is left running.
    pub async fn start(db: &Database, collection: &str) -> Result<SetTap, String> {
        db.run_command(doc! {
            "collMod": collection,
            "changeStreamPreAndPostImages": {"enabled": true},
        })
        .await
        .map_err(|e| e.to_string())?;
        let (id, first) = open(db, collection, None).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(read(
            db.clone(),
            collection.to_owned(),
            id,
            first,
            stop.clone(),
        ));
        Ok(SetTap {
            db: db.clone(),
            collection: collection.to_owned(),
            stop,
            task,
        })
    }

    /// Writes the marker (`w: "majority"`), reads up to it, and returns the events the set
    /// kept, in its oplog order, each at the writing primary's clock (see the module's
    /// notes), with what the tap did in `stats`.
    ///
    /// # Errors
    /// The stream failed for good, the marker was not seen within 30 s, or the set kept a
    /// write the stream never delivered.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the reading task to end by itself.
    pub async fn finish(
        mut self,
        set: &ReplicaSet,
        stats: &mut FailoverStats,
    ) -> Result<Vec<ServerEvent>, String> {
        let marked = self
            .db
            .collection::<Document>(&self.collection)
            .insert_one(doc! {"_id": MARKER})
            .await;
        self.stop.store(true, Ordering::SeqCst);
        if let Err(e) = marked {
            self.task.abort();
            return Err(format!("the end marker could not be written: {e}"));
        }
        let (read, resumes) = match tokio::time::timeout(MARKER_WAIT, &mut self.task).await {
            Ok(joined) => joined.map_err(|e| format!("the change-stream reader failed: {e}"))??,
            Err(_) => {
                self.task.abort();
                return Err(format!(
                    "the end marker was not seen on the change stream within {MARKER_WAIT:?}"
                ));
            }
        };
        stats.tap_resumes = resumes;
        let oplog = set.oplog(self.db.name(), &self.collection);
        let (kept, rolled_back, missed) = reconcile(read, &oplog);
        stats.events_kept = kept.len();
        stats.events_rolled_back = rolled_back;
        if missed > 0 {
            return Err(format!(
                "the change stream missed {missed} write(s) the set kept ({} read, {} kept, \
                 {rolled_back} rolled back, {resumes} resumes)",
                stats.events_kept + rolled_back,
                stats.events_kept
            ));
        }
        Ok(kept)
    }
}

/// Keeps, in the oplog's order, the events of `read` that the set kept (matched by cluster
/// time and `_id`), each at its oplog entry's wall clock. Returns them, how many events read
/// the set did not keep, and how many of the set's writes (the marker's aside) were never
/// read.
fn reconcile(
    read: Vec<Read>,
    oplog: &[mongolock_testkit::replset::OplogEntry],
) -> (Vec<ServerEvent>, usize, usize) {
    let key = |time: Timestamp, id: &str| (time.time, time.increment, id.to_owned());
    let mut by_key: HashMap<(u32, u32, String), ServerEvent> = HashMap::new();
    let mut rolled_back = 0;
    let in_oplog: HashSet<(u32, u32, String)> = (oplog.iter())
        .filter_map(|e| match &e.id {
            Some(Bson::String(id)) => Some(key(e.cluster_time, id)),
            _ => None,
        })
        .collect();
    for (time, event) in read {
        let k = key(time, &event.resource);
        if in_oplog.contains(&k) {
            by_key.insert(k, event);
        } else {
            rolled_back += 1;
        }
    }
    let mut kept = Vec::new();
    let mut missed = 0;
    for entry in oplog {
        let Some(Bson::String(id)) = &entry.id else {
            continue;
        };
        if id == MARKER {
            continue;
        }
        match by_key.remove(&key(entry.cluster_time, id)) {
            Some(mut event) => {
                event.at_ms = entry.wall_time.timestamp_millis();
                kept.push(event);
            }
            None => missed += 1,
        }
    }
    (kept, rolled_back, missed)
}

/// Opens the stream on the primary of the moment, at `at` (a cluster time) if given.
async fn open(
    db: &Database,
    collection: &str,
    at: Option<Timestamp>,
) -> Result<(i64, Vec<Document>), String> {
    let mut stage = doc! {"fullDocument": "required"};
    if let Some(at) = at {
        stage.insert("startAtOperationTime", at);
    }
    let reply = db
        .run_command(doc! {
            "aggregate": collection,
            "pipeline": [{"$changeStream": stage}],
            "cursor": {},
        })
        .await
        .map_err(|e| e.to_string())?;
    batch(&reply, "firstBatch")
}

/// A cursor id and the named batch of a cursor reply.
fn batch(reply: &Document, name: &str) -> Result<(i64, Vec<Document>), String> {
    let cursor = reply
        .get_document("cursor")
        .map_err(|_| format!("no cursor in {reply}"))?;
    let id = cursor.get_i64("id").unwrap_or(0);
    let docs = cursor
        .get_array(name)
        .map_err(|_| format!("no {name} in {reply}"))?
        .iter()
        .filter_map(|b| b.as_document().cloned())
        .collect();
    Ok((id, docs))
}

/// The reading task: events until the marker, once asked to stop, resuming on the primary
/// of the moment at the last cluster time read when the stream fails or closes. Returns the
/// events (each once) and the number of resumes.
async fn read(
    db: Database,
    collection: String,
    mut id: i64,
    first: Vec<Document>,
    stop: Arc<AtomicBool>,
) -> Result<(Vec<Read>, u64), String> {
    let mut events = Vec::new();
    let mut seen: HashMap<(u32, u32, String), Vec<Option<Document>>> = HashMap::new();
    let mut last: Option<Timestamp> = None;
    // The newest invalidation read (a member's rollback drops its data and rebuilds it):
    // a resume starts after it, or it would read it again and close again.
    let mut floor: Option<Timestamp> = None;
    let mut resumes = 0;
    let mut pending = first;
    loop {
        for raw in pending.drain(..) {
            let Ok(time) = raw.get_timestamp("clusterTime") else {
                return Err(format!("change event without clusterTime: {raw}"));
            };
            last = Some(last.map_or(time, |l| l.max(time)));
            let op = raw.get_str("operationType").unwrap_or("");
            if matches!(op, "invalidate" | "drop" | "dropDatabase" | "rename") {
                floor = Some(floor.map_or(time, |f| f.max(time)));
            }
            let Some(event) = event(&raw)? else {
                continue;
            };
            if event.resource == MARKER {
                let _ = db
                    .run_command(doc! {"killCursors": &collection, "cursors": [id]})
                    .await;
                return Ok((events, resumes));
            }
            let same = seen
                .entry((time.time, time.increment, event.resource.clone()))
                .or_default();
            if !same.contains(&event.doc) {
                same.push(event.doc.clone());
                events.push((time, event));
            }
        }
        let next = if id == 0 {
            Err("the change stream's cursor closed".to_owned())
        } else {
            db.run_command(doc! {
                "getMore": id,
                "collection": &collection,
                "maxTimeMS": POLL.as_millis() as i64,
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|reply| batch(&reply, "nextBatch"))
        };
        match next {
            Ok((_, docs)) => pending = docs,
            Err(why) => {
                // The primary changed (or the cursor closed): resume on the primary of the
                // moment, `RESUME_BACK` before the last cluster time read (events read
                // again are skipped). Not at that time itself: it may be a time a partitioned
                // primary gave a write it later rolled back, ahead of the times the new
                // primary gave its first writes meanwhile.
                let until = Instant::now() + RESUME_FOR;
                let back = last.map(|l| Timestamp {
                    time: l.time.saturating_sub(RESUME_BACK.as_secs() as u32),
                    increment: 0,
                });
                let after_floor = floor.map(|f| Timestamp {
                    time: f.time,
                    increment: f.increment + 1,
                });
                let at = back.max(after_floor);
                loop {
                    match open(&db, &collection, at).await {
                        Ok((new_id, docs)) => {
                            id = new_id;
                            pending = docs;
                            resumes += 1;
                            break;
                        }
                        Err(again) if Instant::now() < until => {
                            let _ = again;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(again) => {
                            return Err(format!(
                                "the change stream failed after {} events{} ({why}) and \
                                 could not resume: {again}",
                                events.len(),
                                if stop.load(Ordering::SeqCst) {
                                    " (while finishing)"
                                } else {
                                    ""
                                }
                            ));
                        }
                    }
                }
            }
        }
    }
}

/// One change event as a [`ServerEvent`] (at its `wallTime`, replaced later by the oplog's);
/// `None` for events that change no lock document: on the set a member's change log also
/// holds the drops its rollback made (it rebuilds its data), which are not the lock
/// collection going away.
fn event(raw: &Document) -> Result<Option<ServerEvent>, String> {
    crate::oracle::document_event(raw)
}

/// The report's section on the set: the failover faults picked and done over every run
/// (`runs`: each run's seed and what the set did in it), and the set's control. Writes
/// nothing for a session on one server.
pub fn report(
    t: &mut String,
    runs: &[(u64, Option<&FailoverStats>)],
    set_control: Option<&control::SetControl>,
) {
    use std::fmt::Write;
    let on_set: Vec<&FailoverStats> = runs.iter().filter_map(|(_, stats)| *stats).collect();
    if on_set.is_empty() && set_control.is_none() {
        return;
    }
    let mut total = FailoverStats::default();
    for stats in &on_set {
        total.add(stats);
    }
    let _ = writeln!(
        t,
        "on a three-member replica set ({} run(s), w: \"majority\")",
        on_set.len()
    );
    for (what, n) in total.rows() {
        let _ = writeln!(t, "  {what:<56} {n}");
    }
    for (seed, stats) in runs {
        if stats.is_some_and(FailoverStats::vacuous) {
            let _ = writeln!(
                t,
                "  seed {seed}: VACUOUS, the primary never changed (proves nothing of a failover)",
            );
        }
    }
    if let Some(control) = set_control {
        let found: Vec<String> = (control.w1.found().iter())
            .map(|(k, n)| format!("{k} x{n}"))
            .collect();
        let _ = writeln!(
            t,
            "  {:<56} {} by {} [{}] (A {}, B granted {}, fault ran {}: rollbacks {:?})",
            control.w1.name,
            if control.w1.caught() {
                "caught"
            } else {
                "MISSED"
            },
            control.w1.expected.name(),
            found.join("; "),
            control.w1_ran.a,
            control.w1_ran.b_granted,
            control.w1_ran.carried_out(),
            control.w1_ran.rollbacks,
        );
        let found: Vec<String> = (control.majority.by_check().into_iter())
            .map(|(c, n)| format!("{} x{n}", c.name()))
            .collect();
        let _ = writeln!(
            t,
            "  {:<56} {} [{}] (A {}, B granted {}, fault ran {}: rollbacks {:?})",
            "the same schedule, default write concern",
            if control.majority.violations.is_empty() {
                "none"
            } else {
                "VIOLATIONS"
            },
            found.join("; "),
            control.majority_ran.a,
            control.majority_ran.b_granted,
            control.majority_ran.carried_out(),
            control.majority_ran.rollbacks,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongolock_testkit::replset::OplogEntry;

    fn read_event(time: u32, id: &str) -> Read {
        (
            Timestamp { time, increment: 1 },
            ServerEvent {
                resource: id.to_owned(),
                at_ms: i64::from(time),
                doc: None,
            },
        )
    }

    fn entry(time: u32, id: &str, wall_ms: i64) -> OplogEntry {
        OplogEntry {
            term: 1,
            cluster_time: Timestamp { time, increment: 1 },
            wall_time: bson::DateTime::from_millis(wall_ms),
            id: Some(Bson::String(id.to_owned())),
        }
    }

    #[test]
    fn reconcile_keeps_what_the_set_kept_at_the_writers_clock_and_counts_the_rest() {
        let read = vec![
            read_event(1, "a"),
            read_event(2, "a"), // rolled back
            read_event(3, "b"),
        ];
        let oplog = vec![
            entry(1, "a", 1_000),
            entry(3, "b", 9_000),
            entry(4, "c", 9_500), // never read
            entry(5, MARKER, 9_600),
        ];
        let (kept, rolled_back, missed) = reconcile(read, &oplog);
        assert_eq!(
            kept.iter()
                .map(|e| (e.resource.as_str(), e.at_ms))
                .collect::<Vec<_>>(),
            vec![("a", 1_000), ("b", 9_000)]
        );
        assert_eq!((rolled_back, missed), (1, 1));
    }

    #[test]
    fn a_rollback_drop_is_no_lock_event() {
        let raw = doc! {
            "operationType": "drop",
            "clusterTime": Timestamp { time: 1, increment: 1 },
            "wallTime": bson::DateTime::from_millis(1),
        };
        assert_eq!(event(&raw), Ok(None));
    }
}
