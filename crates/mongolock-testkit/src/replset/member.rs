//! The set's shared state (term, primary, the oplog, each member's progress) and what a
//! member's commands ask of it: `hello`'s fields, whether a command may run here, write
//! concern, `replSetStepDown`. The sources each behaviour follows are listed in the
//! module's parent ([`crate::replset`]).

use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use bson::{Bson, DateTime, Document, doc, oid::ObjectId};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use tokio::sync::watch;

use super::apply::apply;
use crate::commands::identity::{REPLICA_SET_NAME, ServerVersion};
use crate::commands::state::ServerState;
use crate::engine::changes::ChangeEvent;
use crate::engine::error::{CommandError, Result};

/// Commands mongod never runs on a secondary (`AllowedOnSecondary::kNever`).
const WRITE_COMMANDS: &[&str] = &[
    "insert",
    "update",
    "delete",
    "findAndModify",
    "create",
    "drop",
    "dropDatabase",
    "createIndexes",
    "dropIndexes",
    "collMod",
    "renameCollection",
];

/// Reads a secondary runs only when the client opted in (`AllowedOnSecondary::kOptIn`).
const OPT_IN_READS: &[&str] = &[
    "find",
    "count",
    "distinct",
    "aggregate",
    "listCollections",
    "listIndexes",
    "listDatabases",
];

/// Codes drivers treat as a state change (SDAM "not writable primary" and "node is
/// recovering"); their replies carry the member's `topologyVersion`.
const STATE_CHANGE_CODES: &[i32] = &[91, 189, 10058, 10107, 11600, 11602, 13435, 13436];

/// One operation of the primary's oplog.
#[derive(Debug, Clone)]
struct Entry {
    /// The term it was written in.
    term: i64,
    /// What it did.
    event: Arc<ChangeEvent>,
    /// When the primary wrote it; a secondary applies it its lag later.
    at: Instant,
}

/// A member's history after the point it shares with the set's: the operations it wrote
/// as primary that no member of the majority that elected the next primary had applied.
/// mongod's rollback undoes them once the member reaches a sync source again.
#[derive(Debug, Clone)]
struct Diverged {
    /// The common point: how many of the set's oplog entries both histories share.
    common: usize,
    /// Its own entries after the common point.
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct MemberInner {
    up: bool,
    /// Neither primary nor secondary: rolling back, or an entry failed to apply.
    recovering: bool,
    /// Partitioned from every other member (clients still reach it).
    isolated: bool,
    /// Its history diverged from the set's: it rolls back when it reaches the others.
    diverged: Option<Diverged>,
    /// Rollbacks it went through, and the operations they undid.
    rollbacks: usize,
    rolled_back: usize,
    /// Oplog entries applied (a primary's own writes included).
    applied: usize,
    /// For each oplog entry of its history, the position in its own change log of the last
    /// event applying (or, as primary, writing) it appended: what its change streams may
    /// deliver once the entry is majority-committed.
    seqs: Vec<u64>,
    /// The majority commit point as this member knows it (a count of oplog entries): it
    /// learns the set's while it reaches the others, and keeps the last it learned while
    /// partitioned or stopped.
    known_commit: usize,
    /// As primary: the last sequence number of its change log already in the oplog.
    published_seq: u64,
    process_id: ObjectId,
    counter: i64,
    unelectable_until: Option<Instant>,
    lag: Duration,
    /// A `replSetStepDown` is waiting for a secondary to catch up: writes are refused.
    stepping_down: bool,
}

impl MemberInner {
    /// How many of the set's oplog entries its majority reads and change streams see: the
    /// commit point it knows, no further than what it shares with the set's history (a
    /// diverged member: the common point) and than its own log holds.
    fn commit_point(&self) -> usize {
        let shared = self.diverged.as_ref().map_or(self.applied, |d| d.common);
        self.known_commit.min(shared).min(self.seqs.len())
    }
}

#[derive(Debug)]
struct SetInner {
    term: i64,
    primary: Option<usize>,
    oplog: Vec<Entry>,
    members: Vec<MemberInner>,
    /// Since when the set has had no primary.
    primary_lost_at: Option<Instant>,
    /// Since when the primary has not seen a majority of the set (itself included).
    minority_since: Option<Instant>,
}

impl SetInner {
    /// Whether members `a` and `b` reach each other: the same member, or two that are up
    /// and not partitioned.
    fn sees(&self, a: usize, b: usize) -> bool {
        let (ma, mb) = (&self.members[a], &self.members[b]);
        a == b || (ma.up && mb.up && !ma.isolated && !mb.isolated)
    }

    /// How far into the set's oplog the members that `index` reaches (a sync source for it)
    /// have applied: the most any of them holds, 0 when it reaches none.
    fn sync_sources(&self, index: usize) -> usize {
        (0..self.members.len())
            .filter(|&other| other != index && self.sees(index, other))
            .map(|other| &self.members[other])
            .filter(|m| !m.recovering && m.diverged.is_none())
            .map(|m| m.applied)
            .max()
            .unwrap_or(0)
    }

    /// A member that may vote and run: up, reachable by the others, its history the set's.
    fn live(member: &MemberInner) -> bool {
        member.up && !member.recovering && !member.isolated && member.diverged.is_none()
    }

    /// Starts or stops the primary's count towards stepping down for want of a majority.
    fn refresh_minority(&mut self, majority: usize, now: Instant) {
        let Some(primary) = self.primary else {
            self.minority_since = None;
            return;
        };
        let seen = (0..self.members.len())
            .filter(|&j| self.sees(primary, j))
            .count();
        if seen >= majority {
            self.minority_since = None;
        } else if self.minority_since.is_none() {
            self.minority_since = Some(now);
        }
    }
}

/// What every member of one set shares.
#[derive(Debug)]
pub struct SetShared {
    hosts: Vec<String>,
    election_timeout: Duration,
    version: ServerVersion,
    states: OnceLock<Vec<Weak<ServerState>>>,
    inner: Mutex<SetInner>,
    /// Per member, the replication state transition lock: writes hold it shared while
    /// they run, a state change takes it exclusively.
    rstl: Vec<RwLock<()>>,
    /// Per member, held while it applies oplog entries.
    applying: Vec<Mutex<()>>,
    /// Per member, its data as of its majority commit point, which reads at majority read
    /// concern read (see [`SetShared::read_committed`]); built on the first such read.
    committed: Vec<Mutex<Option<Snapshot>>>,
    /// Bumped on every change waiters care about (applied, state, term).
    changed: watch::Sender<u64>,
    /// The cluster time of the set's first entry, `replSetInitiate`'s "initiating set"
    /// no-op, which every member has (see [`SetShared::become_initial_primary`]).
    initiated: OnceLock<bson::Timestamp>,
}

impl SetShared {
    /// A set of `hosts`, not yet attached to its members' servers.
    pub fn new(
        hosts: Vec<String>,
        lag: Duration,
        election_timeout: Duration,
        version: ServerVersion,
    ) -> Self {
        let members = hosts
            .iter()
            .map(|_| MemberInner {
                up: true,
                recovering: false,
                isolated: false,
                diverged: None,
                rollbacks: 0,
                rolled_back: 0,
                applied: 0,
                seqs: Vec::new(),
                known_commit: 0,
                published_seq: 0,
                process_id: ObjectId::new(),
                counter: 0,
                unelectable_until: None,
                lag,
                stepping_down: false,
            })
            .collect();
        Self {
            rstl: hosts.iter().map(|_| RwLock::new(())).collect(),
            applying: hosts.iter().map(|_| Mutex::new(())).collect(),
            committed: hosts.iter().map(|_| Mutex::new(None)).collect(),
            hosts,
            election_timeout,
            version,
            states: OnceLock::new(),
            inner: Mutex::new(SetInner {
                term: 0,
                primary: None,
                oplog: Vec::new(),
                members,
                primary_lost_at: Some(Instant::now()),
                minority_since: None,
            }),
            changed: watch::channel(0).0,
            initiated: OnceLock::new(),
        }
    }

    /// Gives the set its members' servers.
    pub fn attach(&self, states: Vec<Weak<ServerState>>) {
        let _ = self.states.set(states);
    }

    fn state(&self, index: usize) -> Option<Arc<ServerState>> {
        self.states.get()?.get(index)?.upgrade()
    }

    fn notify(&self) {
        self.refresh_committed();
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Gives each member's change log its majority commit point: the set's (the newest
    /// entry a majority applied) for a member that reaches the others, the last it learned
    /// for one that does not, no further than what the member applied of the set's history.
    /// Its change streams deliver events up to there (mongod's read at majority read
    /// concern, see [`crate::commands::change_stream`]).
    fn refresh_committed(&self) {
        let mut points = Vec::new();
        {
            let mut inner = self.inner.lock();
            let majority = majority_point(&inner, self.majority());
            let reaching: Vec<bool> = (0..inner.members.len())
                .map(|i| (0..inner.members.len()).any(|j| j != i && inner.sees(i, j)))
                .collect();
            for (index, member) in inner.members.iter_mut().enumerate() {
                if member.up && reaching[index] && member.diverged.is_none() {
                    member.known_commit = majority;
                }
            }
            let inner = &*inner;
            for (index, member) in inner.members.iter().enumerate() {
                let point = member.commit_point();
                let Some(at) = point.checked_sub(1) else {
                    // Nothing committed yet: nothing to deliver.
                    points.push((index, 0, None));
                    continue;
                };
                let (Some(seq), Some(entry)) = (member.seqs.get(at), inner.oplog.get(at)) else {
                    continue;
                };
                points.push((index, *seq, Some(entry.event.cluster_time)));
            }
        }
        for (index, seq, time) in points {
            if let Some(state) = self.state(index) {
                state.catalog.changes.set_committed(seq, time);
            }
        }
    }

    /// The members' `host:port`.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The primary now.
    pub fn primary(&self) -> Option<usize> {
        self.inner.lock().primary
    }

    /// The current term.
    pub fn term(&self) -> i64 {
        self.inner.lock().term
    }

    /// The set's oplog: each entry's term and the primary's change event, in order.
    pub fn oplog(&self) -> Vec<(i64, Arc<ChangeEvent>)> {
        let inner = self.inner.lock();
        (inner.oplog.iter())
            .map(|e| (e.term, e.event.clone()))
            .collect()
    }

    /// Oplog entries member `index` applied.
    pub fn applied(&self, index: usize) -> usize {
        self.inner.lock().members[index].applied
    }

    /// Sets member `index`'s replication lag.
    pub fn set_lag(&self, index: usize, lag: Duration) {
        self.inner.lock().members[index].lag = lag;
        self.notify();
    }

    fn majority(&self) -> usize {
        self.hosts.len() / 2 + 1
    }

    /// The first election: member `index` becomes primary in term 1.
    pub fn become_initial_primary(&self, index: usize) {
        let mut inner = self.inner.lock();
        inner.term = 1;
        inner.primary = Some(index);
        inner.primary_lost_at = None;
        for member in &mut inner.members {
            member.counter += 1;
        }
        drop(inner);
        // The set starts with a cluster time: `replSetInitiate` writes the "initiating set"
        // no-op, whose time every member has before anything else.
        if let Some(state) = self.state(index) {
            let _ = self.initiated.set(state.catalog.changes.cluster_time());
        }
        self.gossip();
        self.notify();
    }

    /// Stops member `index` (see [`super::ReplicaSet::stop`]).
    pub fn stop(&self, index: usize) {
        {
            let mut inner = self.inner.lock();
            inner.members[index].up = false;
            inner.members[index].stepping_down = false;
            if inner.primary == Some(index) {
                inner.primary = None;
                inner.primary_lost_at = Some(Instant::now());
            }
            for member in &mut inner.members {
                member.counter += 1;
            }
            inner.refresh_minority(self.majority(), Instant::now());
        }
        self.notify();
    }

    /// Partitions member `index` from the others, or heals it (see
    /// [`super::ReplicaSet::partition`]).
    pub fn set_isolated(&self, index: usize, isolated: bool) {
        {
            let mut inner = self.inner.lock();
            if inner.members[index].isolated == isolated {
                return;
            }
            inner.members[index].isolated = isolated;
            for member in &mut inner.members {
                member.counter += 1;
            }
            inner.refresh_minority(self.majority(), Instant::now());
            if isolated && inner.primary.is_some_and(|p| p == index) {
                // The others stop hearing from their primary now; their election timeout
                // counts from here.
                inner.primary_lost_at = Some(Instant::now());
            }
        }
        self.notify();
    }

    /// Whether member `index` is partitioned from the others.
    pub fn is_isolated(&self, index: usize) -> bool {
        self.inner.lock().members[index].isolated
    }

    /// Rollbacks member `index` went through, and the operations they undid.
    pub fn rollbacks(&self, index: usize) -> (usize, usize) {
        let inner = self.inner.lock();
        let member = &inner.members[index];
        (member.rollbacks, member.rolled_back)
    }

    /// Whether member `index`'s history diverged and awaits its rollback.
    pub fn is_diverged(&self, index: usize) -> bool {
        self.inner.lock().members[index].diverged.is_some()
    }

    /// Restarts member `index` (see [`super::ReplicaSet::restart`]).
    pub fn restart(&self, index: usize) {
        {
            let mut inner = self.inner.lock();
            let len = inner.oplog.len();
            let member = &mut inner.members[index];
            member.up = true;
            member.process_id = ObjectId::new();
            member.counter = 0;
            if member.applied > len && member.diverged.is_none() {
                // Entries the set no longer has (an election dropped them): rolled back
                // once it reaches a sync source.
                member.diverged = Some(Diverged {
                    common: len,
                    entries: Vec::new(),
                });
                member.applied = len;
                member.known_commit = member.known_commit.min(len);
            }
            for member in &mut inner.members {
                member.counter += 1;
            }
            inner.refresh_minority(self.majority(), Instant::now());
        }
        self.notify();
    }

    /// Moves the primary's new change-log events into the oplog. Returns the oplog length.
    fn publish(&self, index: usize) -> usize {
        let Some(state) = self.state(index) else {
            return self.inner.lock().oplog.len();
        };
        let mut inner = self.inner.lock();
        if inner.primary != Some(index) {
            return inner.oplog.len();
        }
        let from = inner.members[index].published_seq + 1;
        let events = state
            .catalog
            .changes
            .read_from(from, usize::MAX)
            .unwrap_or_default();
        if events.is_empty() {
            return inner.oplog.len();
        }
        let term = inner.term;
        let now = Instant::now();
        for event in events {
            inner.members[index].published_seq = event.seq;
            let len = inner.oplog.len();
            let member = &mut inner.members[index];
            member.seqs.truncate(len);
            member.seqs.push(event.seq);
            inner.oplog.push(Entry {
                term,
                event,
                at: now,
            });
        }
        let len = inner.oplog.len();
        inner.members[index].applied = len;
        drop(inner);
        self.notify();
        len
    }

    /// Elects `candidate` (on a blocking thread: it applies what it lacks first). Nothing
    /// happens if the set found a primary meanwhile or the candidate went down.
    fn elect(&self, candidate: usize) {
        let _applying = self.applying[candidate].lock();
        let state = self.state(candidate);
        // Catch-up: the newest oplog entry a reachable member has. What only unreachable
        // members have (a partitioned or stopped former primary's writes that no member of
        // this majority applied) leaves the set's history: those members diverged, and
        // roll back to this common point when they reach the others again.
        let entries = {
            let mut inner = self.inner.lock();
            if inner.primary.is_some() || !inner.members[candidate].up {
                return;
            }
            let target = inner
                .members
                .iter()
                .filter(|m| SetInner::live(m))
                .map(|m| m.applied)
                .max()
                .unwrap_or(0);
            if target < inner.oplog.len() {
                let dropped = inner.oplog.split_off(target);
                for member in inner.members.iter_mut() {
                    if member.applied > target && member.diverged.is_none() {
                        let end = (member.applied - target).min(dropped.len());
                        member.diverged = Some(Diverged {
                            common: target,
                            entries: dropped[..end].to_vec(),
                        });
                        // Its progress in the set's history is the common point: its own
                        // entries acknowledge none of the new primary's.
                        member.applied = target;
                        member.known_commit = member.known_commit.min(target);
                    }
                }
            }
            let from = inner.members[candidate].applied.min(target);
            inner.oplog[from..target].to_vec()
        };
        let mut caught_up = Vec::new();
        for entry in entries.iter().filter(|_| state.is_some()) {
            let state = state.as_ref().expect("filtered");
            if let Err(error) = apply_to_member(state, entry) {
                tracing::error!(%error, member = candidate, "catch-up failed to apply an entry");
            }
            caught_up.push(state.catalog.changes.last_seq());
        }
        // The votes it asked for carried the voters' cluster times.
        self.gossip();
        let mut inner = self.inner.lock();
        if inner.primary.is_some() || !inner.members[candidate].up {
            return;
        }
        let len = inner.oplog.len();
        inner.term += 1;
        inner.primary = Some(candidate);
        inner.primary_lost_at = None;
        inner.refresh_minority(self.majority(), Instant::now());
        let member = &mut inner.members[candidate];
        let from = member.applied.min(member.seqs.len());
        member.seqs.truncate(from);
        member.seqs.extend(caught_up);
        member
            .seqs
            .resize(len, member.seqs.last().copied().unwrap_or(0));
        member.applied = len;
        member.published_seq = state.as_ref().map_or(0, |s| s.catalog.changes.last_seq());
        for member in &mut inner.members {
            member.counter += 1;
        }
        let term = inner.term;
        drop(inner);
        tracing::debug!(member = candidate, term, "elected primary");
        self.notify();
    }

    /// The primary, when it has not seen a majority of the set (itself included) for the
    /// election timeout: mongod's `TopologyCoordinator::checkMemberTimeouts`
    /// (`src/mongo/db/repl/topology_coordinator.cpp`) marks a member not heard from for
    /// `getElectionTimeoutPeriod()` down, and a primary that then cannot see a majority
    /// steps down ("Can't see a majority of the set, relinquishing primary").
    fn unable_to_see_majority(&self, now: Instant) -> Option<usize> {
        let mut inner = self.inner.lock();
        inner.refresh_minority(self.majority(), now);
        let since = inner.minority_since?;
        (now >= since + self.election_timeout)
            .then_some(inner.primary)
            .flatten()
    }

    /// Steps `primary` down for want of a majority (on a blocking thread: it takes the
    /// state transition lock, so writes in progress finish first and the replication
    /// waiters fail with `PrimarySteppedDown`). The others lost it when it stopped seeing
    /// them: their election timeout counts from then.
    fn relinquish(&self, primary: usize) {
        let _rstl = self.rstl[primary].write();
        let mut inner = self.inner.lock();
        if inner.primary != Some(primary) {
            return;
        }
        let since = inner.minority_since.take().unwrap_or_else(Instant::now);
        inner.primary = None;
        inner.primary_lost_at = Some(since);
        for member in &mut inner.members {
            member.counter += 1;
        }
        let term = inner.term;
        drop(inner);
        tracing::debug!(
            member = primary,
            term,
            "can't see a majority of the set, relinquishing primary"
        );
        self.notify();
    }

    /// The candidate the reachable members would elect now, if the set may elect one.
    fn candidate(&self, now: Instant, ignore_timeout: bool) -> Option<usize> {
        let inner = self.inner.lock();
        if inner.primary.is_some() {
            return None;
        }
        let reachable = inner.members.iter().filter(|m| SetInner::live(m)).count();
        if reachable < self.majority() {
            return None;
        }
        if !ignore_timeout
            && inner
                .primary_lost_at
                .is_some_and(|at| now < at + self.election_timeout)
        {
            return None;
        }
        // The electable member with the newest data runs; a voter refuses a candidate
        // whose last applied optime is older than its own (README "Voter Perspective"), so
        // it wins with the votes of the members no newer than itself.
        let live = |m: &&MemberInner| SetInner::live(m);
        let (index, candidate) = inner
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| live(m) && m.unelectable_until.is_none_or(|until| now >= until))
            .max_by_key(|(i, m)| (m.applied, std::cmp::Reverse(*i)))?;
        let votes = inner
            .members
            .iter()
            .filter(live)
            .filter(|m| m.applied <= candidate.applied)
            .count();
        (votes >= self.majority()).then_some(index)
    }
}

/// The set's majority commit point: how many oplog entries a `majority` of members applied.
fn majority_point(inner: &SetInner, majority: usize) -> usize {
    let mut applied: Vec<usize> = inner.members.iter().map(|m| m.applied).collect();
    applied.sort_unstable_by(|a, b| b.cmp(a));
    applied
        .get(majority - 1)
        .copied()
        .unwrap_or(0)
        .min(inner.oplog.len())
}

/// A member's data as of its majority commit point: a catalog of its own that holds the
/// set's first `applied` oplog entries, applied as a secondary applies them.
#[derive(Debug)]
struct Snapshot {
    /// How many of the set's oplog entries it holds.
    applied: usize,
    /// The term and time of the last of them, to know the set's history still holds it.
    last: Option<(i64, bson::Timestamp)>,
    catalog: crate::engine::collection::Catalog,
}

impl Snapshot {
    fn empty() -> Self {
        let changes = crate::engine::changes::ChangeLog::with_window(
            crate::faults::clock::Clock::default(),
            1,
            usize::MAX,
        );
        Self {
            applied: 0,
            last: None,
            catalog: crate::engine::collection::Catalog::new(Arc::new(changes)),
        }
    }
}

impl SetShared {
    /// Runs `read` on member `index`'s data as of the majority commit point it knows (the
    /// point its change streams read up to, see `refresh_committed`): a read at majority
    /// read concern, which mongod serves from "a view of the data at the majority-commit
    /// point" each member keeps (MongoDB's manual, "Read Concern "majority"",
    /// `reference/read-concern-majority`), never waiting for newer writes to commit. The
    /// snapshot is brought forward by applying the set's entries up to that point; the
    /// point never passes the member's common point with the set, so a rollback leaves it
    /// as it was. Entries committed stay in the set's history; should the history no longer
    /// hold the snapshot's last entry, it is rebuilt from the start.
    ///
    /// Returns the cluster time of the snapshot's last entry (none before anything is
    /// committed): a majority read's `operationTime`.
    ///
    /// # Errors
    /// An entry that does not apply (the snapshot's data diverged from the set's history).
    pub fn read_committed(
        &self,
        index: usize,
        read: &mut dyn FnMut(&crate::engine::collection::Catalog),
    ) -> Result<Option<bson::Timestamp>> {
        let Some(slot) = self.committed.get(index) else {
            return Err(CommandError::internal("no such member"));
        };
        let mut slot = slot.lock();
        let (entries, rebuild) = {
            let inner = self.inner.lock();
            let member = &inner.members[index];
            let point = member.commit_point().min(inner.oplog.len());
            let snapshot = slot.get_or_insert_with(Snapshot::empty);
            let still_held = match (snapshot.applied.checked_sub(1), snapshot.last) {
                (None, _) => true,
                (Some(at), Some(last)) => inner
                    .oplog
                    .get(at)
                    .is_some_and(|e| (e.term, e.event.cluster_time) == last),
                (Some(_), None) => false,
            };
            let rebuild = !still_held || snapshot.applied > point;
            let from = if rebuild { 0 } else { snapshot.applied };
            (inner.oplog[from..point.max(from)].to_vec(), rebuild)
        };
        if rebuild {
            *slot = Some(Snapshot::empty());
        }
        let mut failed = None;
        let mut time = None;
        {
            let snapshot = slot.as_mut().expect("set above");
            for entry in &entries {
                let catalog = &snapshot.catalog;
                if let Err(error) = catalog.changes.unlogged(|| apply_entry(catalog, entry)) {
                    failed = Some(error);
                    break;
                }
                snapshot.applied += 1;
                snapshot.last = Some((entry.term, entry.event.cluster_time));
            }
            if failed.is_none() {
                read(&snapshot.catalog);
                time = snapshot.last.map(|(_, time)| time);
            }
        }
        match failed {
            Some(error) => {
                tracing::error!(%error, member = index, "the committed snapshot failed to apply an entry");
                // Built again from the start by the next read.
                *slot = None;
                Err(error)
            }
            None => Ok(time),
        }
    }
}

/// Applies one oplog entry to a member's `catalog`: its change log then holds the entry as
/// the primary wrote it (time, wall clock time, event), as a secondary's oplog does, and its
/// cluster time moves up to the entry's (`LogicalClock::advanceClusterTime`,
/// `src/mongo/db/logical_clock.cpp`).
fn apply_entry(catalog: &crate::engine::collection::Catalog, entry: &Entry) -> Result<()> {
    (catalog.changes).applying(&entry.event, || apply(catalog, &entry.event))
}

/// Applies one oplog entry to member `state`: its data ([`apply_entry`]) and, for an entry of
/// a retryable write, the session's record, which moves with the data. A secondary applying
/// an entry that carries a session writes the session's `config.transactions` record from it
/// (`src/mongo/db/repl/session_update_tracker.cpp`, `createMatchingTransactionTableUpdate`),
/// so after it becomes primary a retry of the write finds it executed
/// ([`crate::commands::session`]).
fn apply_to_member(state: &ServerState, entry: &Entry) -> Result<()> {
    apply_entry(&state.catalog, entry)?;
    if let Some(write) = &entry.event.retryable {
        state.sessions.applied(write);
    }
    Ok(())
}

impl SetShared {
    /// Cluster-time gossip: the members that reach each other (up, not partitioned) each
    /// take the highest cluster time among them. mongod's members send their `$clusterTime`
    /// with every message between them (heartbeats, oplog fetching) and each advances its
    /// own to a higher one it receives (`LogicalClock::advanceClusterTime`,
    /// `src/mongo/db/logical_clock.cpp`; `VectorClock::gossipIn` in newer trees), so a
    /// member's cluster time never falls behind the highest it heard from the set, whatever
    /// its own system clock reads.
    fn gossip(&self) {
        let reaching: Vec<usize> = {
            let inner = self.inner.lock();
            (0..inner.members.len())
                .filter(|&i| inner.members[i].up && !inner.members[i].isolated)
                .collect()
        };
        let states: Vec<Arc<ServerState>> =
            reaching.iter().filter_map(|&i| self.state(i)).collect();
        let Some(highest) = states
            .iter()
            .map(|s| s.catalog.changes.current_cluster_time())
            .max_by_key(|t| (t.time, t.increment))
        else {
            return;
        };
        for state in &states {
            state.catalog.changes.advance_cluster_time(highest);
        }
    }
}

/// Steps down a primary that has not seen a majority of the set for the election timeout,
/// and elects a primary whenever the set has been without one for the election timeout.
/// Every tick the members that reach each other gossip their cluster times
/// ([`SetShared::gossip`]).
pub async fn monitor(set: Arc<SetShared>) {
    let tick = (set.election_timeout / 4).max(Duration::from_millis(5));
    loop {
        tokio::time::sleep(tick).await;
        set.gossip();
        if let Some(primary) = set.unable_to_see_majority(Instant::now()) {
            let stepping = set.clone();
            let _ = tokio::task::spawn_blocking(move || stepping.relinquish(primary)).await;
        }
        if let Some(candidate) = set.candidate(Instant::now(), false) {
            let electing = set.clone();
            let _ = tokio::task::spawn_blocking(move || electing.elect(candidate)).await;
        }
    }
}

/// Member `index`'s replication: as primary it moves its writes into the oplog (the TTL
/// monitor's deletes included), as secondary it applies the oplog in order, each entry its
/// lag after the primary wrote it.
pub async fn replicate(set: Arc<SetShared>, index: usize) {
    let mut changed = set.changed.subscribe();
    loop {
        let mut wait = Duration::from_millis(50);
        let mut rollback = false;
        let batch = {
            let inner = set.inner.lock();
            let member = &inner.members[index];
            let reaches_others =
                (0..inner.members.len()).any(|other| other != index && inner.sees(index, other));
            if !member.up || member.recovering {
                None
            } else if inner.primary == Some(index) {
                drop(inner);
                set.publish(index);
                None
            } else if member.diverged.is_some() {
                rollback = reaches_others;
                None
            } else {
                let now = Instant::now();
                let start = member.applied.min(inner.oplog.len());
                // Only what a member it reaches has applied: its sync source may be any
                // member ahead of it, not only the primary (chaining: jstest
                // `jstests/replsets/slavedelay3.js`), so a cut-off primary's committed
                // writes still reach it through another member, and what that primary
                // wrote alone stays on it.
                let available = inner.sync_sources(index).min(inner.oplog.len());
                let mut end = start;
                while let Some(entry) = inner.oplog.get(end).filter(|_| end < available) {
                    let due = entry.at + member.lag;
                    if due > now {
                        wait = wait.min(due - now);
                        break;
                    }
                    end += 1;
                }
                (end > start).then(|| (start, inner.oplog[start..end].to_vec()))
            }
        };
        if rollback {
            let rolling_back = set.clone();
            let _ = tokio::task::spawn_blocking(move || rolling_back.roll_back(index)).await;
            continue;
        }
        if let Some((start, entries)) = batch {
            let applying = set.clone();
            let _ = tokio::task::spawn_blocking(move || {
                applying.apply_batch(index, start, &entries);
            })
            .await;
            continue;
        }
        tokio::select! {
            _ = changed.changed() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

impl SetShared {
    /// Rolls member `index` back to the point its history shares with the set's, then
    /// brings it up to the set's oplog, as mongod's rollback does when a member whose
    /// oplog diverged reaches a sync source (`src/mongo/db/repl/rollback_impl.cpp`,
    /// `RollbackImpl::runRollback`: state ROLLBACK, the common point found, the data
    /// recovered to the stable timestamp, which is majority-committed, so no
    /// majority-committed write is undone; then the sync source's entries applied, and the
    /// member is SECONDARY again). Here the data is rebuilt from the set's history up to
    /// now (its oplog from the start), which leaves exactly what the common point had plus
    /// what the set applied since; the member's own entries past the common point are the
    /// ones undone. While it runs the member refuses reads (13436, as in ROLLBACK).
    fn roll_back(&self, index: usize) {
        let _applying = self.applying[index].lock();
        let Some(state) = self.state(index) else {
            return;
        };
        let (history, diverged, common) = {
            let mut inner = self.inner.lock();
            let len = inner.oplog.len();
            let member = &mut inner.members[index];
            let Some(diverged) = member.diverged.clone() else {
                return;
            };
            member.recovering = true;
            member.counter += 1;
            // Its change log keeps the entries up to the common point; the events after it
            // (its own entries, what it wrote as primary and never published) are undone.
            let common = diverged.common.min(len).min(member.seqs.len());
            member.seqs.truncate(common);
            let kept = common.checked_sub(1).map_or(0, |i| member.seqs[i]);
            state
                .catalog
                .changes
                .mark_rolled_back(kept + 1, state.catalog.changes.last_seq());
            (inner.oplog.clone(), diverged, common)
        };
        self.notify();
        tracing::debug!(
            member = index,
            common = diverged.common,
            undone = diverged.entries.len(),
            "rollback"
        );
        // The data is rebuilt up to the common point without a change event (what the log
        // already holds), then the set's entries after it are applied as a secondary
        // applies them, each appending its events. The sessions' records are rebuilt with
        // it: those of the undone entries go with them (`Sessions::invalidate_all`).
        let mut failed = false;
        let mut seqs = Vec::new();
        state.sessions.invalidate_all();
        state.catalog.changes.unlogged(|| {
            for db in state.catalog.database_names() {
                state.catalog.drop_database(&db);
            }
            for entry in &history[..common] {
                if let Err(error) = apply_to_member(&state, entry) {
                    tracing::error!(%error, member = index, "rollback failed to apply an entry");
                    failed = true;
                    break;
                }
            }
        });
        for entry in history[common..].iter().take_while(|_| !failed) {
            if let Err(error) = apply_to_member(&state, entry) {
                tracing::error!(%error, member = index, "rollback failed to apply an entry");
                failed = true;
                break;
            }
            seqs.push(state.catalog.changes.last_seq());
        }
        let mut inner = self.inner.lock();
        let member = &mut inner.members[index];
        member.seqs.truncate(common);
        member.seqs.extend(seqs);
        member.applied = history.len();
        member.diverged = None;
        member.recovering = failed;
        member.rollbacks += 1;
        member.rolled_back += diverged.entries.len();
        member.counter += 1;
        drop(inner);
        self.notify();
    }

    fn apply_batch(&self, index: usize, start: usize, entries: &[Entry]) {
        let _applying = self.applying[index].lock();
        let Some(state) = self.state(index) else {
            return;
        };
        {
            let inner = self.inner.lock();
            if inner.members[index].applied != start || inner.primary == Some(index) {
                return;
            }
        }
        let mut seqs = Vec::new();
        for entry in entries {
            if let Err(error) = apply_to_member(&state, entry) {
                tracing::error!(%error, member = index, "failed to apply an oplog entry");
                break;
            }
            seqs.push(state.catalog.changes.last_seq());
        }
        let done = seqs.len();
        let mut inner = self.inner.lock();
        if inner.members[index].applied == start && inner.primary != Some(index) {
            let member = &mut inner.members[index];
            member.seqs.truncate(start);
            member.seqs.extend(seqs);
            inner.members[index].applied = start + done;
            if done < entries.len() {
                inner.members[index].recovering = true;
            }
        }
        drop(inner);
        self.notify();
    }
}

/// A member's link to its set, held by its server's state.
#[derive(Debug, Clone)]
pub struct Replica {
    set: Arc<SetShared>,
    index: usize,
}

impl crate::commands::state::WriteIntent for WriteIntent<'_> {}

/// The member as its server's commands see it: each method is the inherent one of the same
/// name.
impl crate::commands::state::Member for Replica {
    fn members(&self) -> usize {
        Replica::members(self)
    }

    fn read_committed(
        &self,
        read: &mut dyn FnMut(&crate::engine::collection::Catalog),
    ) -> Result<Option<bson::Timestamp>> {
        self.set.read_committed(self.index, read)
    }

    fn await_op_time<'a>(
        &'a self,
        target: (bson::Timestamp, i64),
        majority: bool,
        deadline: Option<Instant>,
    ) -> crate::commands::state::Pending<'a, Result<()>> {
        Box::pin(Replica::await_op_time(self, target, majority, deadline))
    }

    fn is_down(&self) -> bool {
        Replica::is_down(self)
    }

    fn is_primary(&self) -> bool {
        Replica::is_primary(self)
    }

    fn hello_fields(&self, reply: &mut Document, legacy: bool) {
        Replica::hello_fields(self, reply, legacy);
    }

    fn await_topology_change<'a>(
        &'a self,
        cmd: &'a Document,
    ) -> crate::commands::state::Pending<'a, bool> {
        Box::pin(Replica::await_topology_change(self, cmd))
    }

    fn check_command(&self, name: &str, cmd: &Document) -> Result<()> {
        Replica::check_command(self, name, cmd)
    }

    fn write_intent<'a>(
        &'a self,
        name: &str,
        cmd: &Document,
        admitted: Option<i64>,
    ) -> Result<Option<Box<dyn crate::commands::state::WriteIntent + 'a>>> {
        Ok(Replica::write_intent(self, name, cmd, admitted)?
            .map(|intent| Box::new(intent) as Box<dyn crate::commands::state::WriteIntent + 'a>))
    }

    fn admitted_term(&self) -> Option<i64> {
        Replica::admitted_term(self)
    }

    fn annotate_error(&self, reply: &mut Document) {
        Replica::annotate_error(self, reply);
    }

    fn await_write_concern<'a>(
        &'a self,
        name: &'a str,
        cmd: &'a Document,
        term: Option<i64>,
    ) -> crate::commands::state::Pending<'a, Option<Document>> {
        Box::pin(Replica::await_write_concern(self, name, cmd, term))
    }

    fn step_down<'a>(
        &'a self,
        cmd: &'a Document,
    ) -> crate::commands::state::Pending<'a, Result<Document>> {
        Box::pin(Replica::step_down(self, cmd))
    }

    fn write_through_primary(
        &self,
        cmd: &Document,
        write: &mut dyn FnMut(&ServerState) -> Result<()>,
    ) -> Result<crate::commands::state::PrimaryWait> {
        Replica::write_through_primary(self, cmd, write)
    }
}

/// The write concern a command asked for (or the implicit default).
enum Wanted {
    Members(usize),
    Majority,
}

/// A write admitted on the primary: holds the member's state transition lock shared while
/// the write runs, and publishes it to the oplog when dropped.
pub struct WriteIntent<'a> {
    replica: &'a Replica,
    _rstl: RwLockReadGuard<'a, ()>,
}

impl Drop for WriteIntent<'_> {
    fn drop(&mut self) {
        self.replica.set.publish(self.replica.index);
    }
}

impl Replica {
    /// Member `index` of `set`.
    pub fn new(set: Arc<SetShared>, index: usize) -> Self {
        Self { set, index }
    }

    /// The set's size (its data-bearing members).
    pub fn members(&self) -> usize {
        self.set.hosts.len()
    }

    /// Whether this member is stopped (its connections close).
    pub fn is_down(&self) -> bool {
        !self.set.inner.lock().members[self.index].up
    }

    /// Whether this member is primary now (the TTL monitor runs only there).
    pub fn is_primary(&self) -> bool {
        self.set.inner.lock().primary == Some(self.index)
    }

    /// `{processId, counter}`.
    pub fn topology_version(&self) -> Document {
        let inner = self.set.inner.lock();
        let member = &inner.members[self.index];
        doc! {"processId": member.process_id, "counter": member.counter}
    }

    /// The replica-set fields of `hello` for this member's state
    /// (`HelloResponse::addToBSON`).
    pub fn hello_fields(&self, reply: &mut Document, legacy: bool) {
        let inner = self.set.inner.lock();
        let member = &inner.members[self.index];
        let primary = inner.primary == Some(self.index);
        let secondary = !primary && !member.recovering;
        let mut fields = Document::new();
        fields.insert(
            "topologyVersion",
            doc! {"processId": member.process_id, "counter": member.counter},
        );
        fields.insert("hosts", self.set.hosts.clone());
        fields.insert("setName", REPLICA_SET_NAME);
        fields.insert("setVersion", 1);
        fields.insert(
            if legacy {
                "ismaster"
            } else {
                "isWritablePrimary"
            },
            primary,
        );
        fields.insert("secondary", secondary);
        // The primary as this member knows it: one it cannot reach (it is partitioned from
        // it) it does not name.
        if let Some(p) = inner.primary.filter(|&p| inner.sees(self.index, p)) {
            fields.insert("primary", self.set.hosts[p].clone());
        }
        fields.insert("me", self.set.hosts[self.index].clone());
        if primary {
            fields.insert("electionId", election_id(inner.term));
        }
        let applied = member.applied.min(inner.oplog.len());
        // A diverged member's last write is its own newest entry.
        let last = member
            .diverged
            .as_ref()
            .and_then(|d| d.entries.last())
            .or_else(|| applied.checked_sub(1).and_then(|i| inner.oplog.get(i)));
        if let Some(last) = last {
            let committed = self.majority_point(&inner);
            let mut last_write = doc! {
                "opTime": {"ts": last.event.cluster_time, "t": last.term},
                "lastWriteDate": second_precision(last.event.wall_time),
            };
            if let Some(c) = committed.checked_sub(1).and_then(|i| inner.oplog.get(i)) {
                last_write.insert(
                    "majorityOpTime",
                    doc! {"ts": c.event.cluster_time, "t": c.term},
                );
                last_write.insert("majorityWriteDate", second_precision(c.event.wall_time));
            }
            fields.insert("lastWrite", last_write);
        }
        drop(inner);
        for key in ["ismaster", "isWritablePrimary"] {
            reply.remove(key);
        }
        let rest = std::mem::take(reply);
        *reply = fields;
        reply.extend(rest);
    }

    fn majority_point(&self, inner: &SetInner) -> usize {
        majority_point(inner, self.set.majority())
    }

    /// This member's last applied optime (`majority`: its majority commit point as it knows
    /// it, the point its majority reads read at), the set's "initiating set" entry's at the
    /// least. A diverged member's last applied entry is its own newest.
    fn reached_op_time(&self, inner: &SetInner, majority: bool) -> (bson::Timestamp, i64) {
        let member = &inner.members[self.index];
        let entry = if majority {
            let point = member.commit_point().min(inner.oplog.len());
            point.checked_sub(1).and_then(|i| inner.oplog.get(i))
        } else {
            let applied = member.applied.min(inner.oplog.len());
            (member.diverged.as_ref())
                .and_then(|d| d.entries.last())
                .or_else(|| applied.checked_sub(1).and_then(|i| inner.oplog.get(i)))
        };
        let initiated = (self.set.initiated.get().copied())
            .map(|ts| (ts, crate::commands::read_after::UNINITIALIZED_TERM));
        let time = |t: &(bson::Timestamp, i64)| (t.0.time, t.0.increment);
        match (entry.map(|e| (e.event.cluster_time, e.term)), initiated) {
            (Some(entry), Some(initiated)) if time(&initiated) > time(&entry) => initiated,
            (Some(entry), _) => entry,
            (None, Some(initiated)) => initiated,
            (None, None) => (
                bson::Timestamp {
                    time: 0,
                    increment: 0,
                },
                crate::commands::read_after::UNINITIALIZED_TERM,
            ),
        }
    }

    /// Waits until this member has reached the optime `target`: its last applied optime, or
    /// with `majority` its majority commit point (mongod's `_waitUntilOpTime` and
    /// `_waitUntilMajorityOpTime`, `src/mongo/db/repl/replication_coordinator_impl.cpp`), for
    /// a read at `readConcern: {afterClusterTime}` or `{afterOpTime}`
    /// ([`crate::commands::read_after`]).
    ///
    /// # Errors
    /// `MaxTimeMSExpired` (50) once `deadline` passes, with mongod's message;
    /// `InterruptedDueToReplStateChange` (11602) if the member starts a rollback (or fails to
    /// apply an entry) meanwhile: mongod's rollback kills the user operations
    /// (`RollbackImpl::_killAllUserOperations`, `src/mongo/db/repl/rollback_impl.cpp`);
    /// `ShutdownInProgress` (91) if it stops.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting changes nothing.
    pub async fn await_op_time(
        &self,
        target: (bson::Timestamp, i64),
        majority: bool,
        deadline: Option<Instant>,
    ) -> Result<()> {
        use crate::commands::read_after::{op_time_reached, time_left, wait_timed_out};
        let mut changed = self.set.changed.subscribe();
        let rollbacks = self.set.inner.lock().members[self.index].rollbacks;
        loop {
            let reached = {
                let inner = self.set.inner.lock();
                let member = &inner.members[self.index];
                if !member.up {
                    return Err(CommandError::new(91, "Shutdown in progress"));
                }
                if member.recovering || member.rollbacks != rollbacks {
                    return Err(CommandError::new(11602, "operation was interrupted"));
                }
                let reached = self.reached_op_time(&inner, majority);
                if op_time_reached(reached, target) {
                    return Ok(());
                }
                reached
            };
            let Some(left) = time_left(deadline) else {
                return Err(wait_timed_out(majority, target, reached));
            };
            tokio::select! {
                _ = changed.changed() => {}
                _ = tokio::time::sleep(left) => {}
            }
        }
    }

    /// Waits, for an awaitable `hello` (`topologyVersion` and `maxAwaitTimeMS` given), until
    /// this member's topology version is newer than the client's or the time is up
    /// (server-monitoring spec, "Awaitable hello"). Returns at once when the process ids
    /// differ. Returns false if the member stopped meanwhile.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting changes nothing.
    pub async fn await_topology_change(&self, cmd: &Document) -> bool {
        let (Ok(known), Some(wait)) = (
            cmd.get_document("topologyVersion"),
            cmd.get("maxAwaitTimeMS").and_then(as_millis),
        ) else {
            return true;
        };
        let until = Instant::now() + wait;
        let mut changed = self.set.changed.subscribe();
        loop {
            {
                let inner = self.set.inner.lock();
                let member = &inner.members[self.index];
                if !member.up {
                    return false;
                }
                let same_process = known.get_object_id("processId") == Ok(member.process_id);
                let counter = match known.get("counter") {
                    Some(Bson::Int64(n)) => *n,
                    Some(Bson::Int32(n)) => i64::from(*n),
                    _ => -1,
                };
                if !same_process || member.counter > counter {
                    return true;
                }
            }
            let now = Instant::now();
            if now >= until {
                return true;
            }
            tokio::select! {
                _ = changed.changed() => {}
                _ = tokio::time::sleep(until - now) => return true,
            }
        }
    }

    /// Whether a command may run on this member in its state
    /// (`service_entry_point_common.cpp`): writes only on the primary, reads on a secondary
    /// only when the client opted in with a read preference other than `primary`.
    ///
    /// # Errors
    ///
    /// 10107 `NotWritablePrimary`, 13435 `NotPrimaryNoSecondaryOk`, or 13436
    /// `NotPrimaryOrSecondary` on a member that is neither.
    pub fn check_command(&self, name: &str, cmd: &Document) -> Result<()> {
        if self.is_primary() {
            return Ok(());
        }
        if WRITE_COMMANDS.contains(&name) {
            return Err(CommandError::new(10107, "not primary"));
        }
        // An `aggregate` with `$out` or `$merge` is an opt-in read like the others: it
        // reads here and writes through the primary (`super::primary_writes`).
        if OPT_IN_READS.contains(&name) {
            let opted_in = cmd
                .get_document("$readPreference")
                .ok()
                .and_then(|rp| rp.get_str("mode").ok())
                .is_some_and(|mode| mode != "primary");
            if !opted_in {
                return Err(CommandError::new(
                    13435,
                    "not primary and secondaryOk=false",
                ));
            }
            // Neither primary nor secondary (its history needs a rollback): mongod refuses
            // with `NotPrimaryOrSecondary` (13436), "node is recovering".
            if self.set.inner.lock().members[self.index].recovering {
                return Err(CommandError::new(13436, "node is recovering"));
            }
        }
        Ok(())
    }

    /// Admits a write command on this member: takes the state transition lock shared for
    /// as long as the write runs. `None` for commands that are not writes.
    ///
    /// # Errors
    ///
    /// 11602 `InterruptedDueToReplStateChange` if the member was primary in `term` (when
    /// the command arrived) and no longer is; 10107 `NotWritablePrimary` if it is not
    /// primary (or a step-down is being attempted).
    pub fn write_intent(
        &self,
        name: &str,
        cmd: &Document,
        admitted: Option<i64>,
    ) -> Result<Option<WriteIntent<'_>>> {
        // A `$out` or `$merge` that arrived on a secondary writes through the primary, which
        // admits it there (`super::primary_writes`).
        let is_write = WRITE_COMMANDS.contains(&name)
            || (name == "aggregate" && writes_out(cmd) && admitted.is_some());
        if !is_write {
            return Ok(None);
        }
        let guard = self.set.rstl[self.index].read();
        let inner = self.set.inner.lock();
        let member = &inner.members[self.index];
        let primary = inner.primary == Some(self.index);
        if primary && !member.stepping_down && admitted == Some(inner.term) {
            drop(inner);
            return Ok(Some(WriteIntent {
                replica: self,
                _rstl: guard,
            }));
        }
        if admitted.is_some_and(|term| term != inner.term || !primary) {
            // Admitted on the primary, and the state changed before it could run: killed
            // with the state change's code; the message is the one every killed operation
            // gets (`OperationContext::checkForInterruptNoAssert`,
            // `src/mongo/db/operation_context.cpp`).
            return Err(CommandError::new(11602, "operation was interrupted"));
        }
        Err(CommandError::new(10107, "not primary"))
    }

    /// The primary this member knows of and reaches (itself when it is primary), with that
    /// member's server state and this one's: where a `$out` or `$merge` run here writes
    /// (`super::primary_writes`). `None` when it reaches no primary.
    pub(super) fn reached_primary(&self) -> Option<(Replica, Arc<ServerState>, Arc<ServerState>)> {
        let primary = {
            let inner = self.set.inner.lock();
            inner.primary.filter(|&p| inner.sees(self.index, p))?
        };
        Some((
            Replica::new(self.set.clone(), primary),
            self.set.state(primary)?,
            self.set.state(self.index)?,
        ))
    }

    /// The term, when this member is primary: a write remembers it when it arrives.
    pub fn admitted_term(&self) -> Option<i64> {
        let inner = self.set.inner.lock();
        (inner.primary == Some(self.index)).then_some(inner.term)
    }

    /// Adds this member's `topologyVersion` to a state-change error reply.
    pub fn annotate_error(&self, reply: &mut Document) {
        if let Ok(code) = reply.get_i32("code")
            && STATE_CHANGE_CODES.contains(&code)
        {
            reply.insert("topologyVersion", self.topology_version());
        }
    }

    /// Waits for the write concern of a write command that succeeded on the primary.
    /// Returns the `writeConcernError` to add to the reply, if any.
    ///
    /// # Cancel safety
    /// Cancel safe: the write is done; only the wait is dropped.
    pub async fn await_write_concern(
        &self,
        name: &str,
        cmd: &Document,
        term: Option<i64>,
    ) -> Option<Document> {
        // A secondary's `$out` or `$merge` waited on the primary (`super::primary_writes`).
        if !(WRITE_COMMANDS.contains(&name)
            || (name == "aggregate" && writes_out(cmd) && term.is_some()))
        {
            return None;
        }
        let wc = cmd.get_document("writeConcern").ok();
        let wanted = match wc.and_then(|wc| wc.get("w")) {
            Some(Bson::String(mode)) if mode == "majority" => Wanted::Majority,
            Some(w) => Wanted::Members(as_number(w).map_or(1, |n| n.max(0.0) as usize)),
            // 4.2 and 4.4 default to w: 1.
            None if !matches!(self.set.version, ServerVersion::V4_2 | ServerVersion::V4_4) => {
                Wanted::Majority
            }
            None => Wanted::Members(1),
        };
        let needed = match wanted {
            Wanted::Majority => self.set.majority(),
            Wanted::Members(n) => n,
        };
        if needed <= 1 {
            return None;
        }
        let timeout = wc
            .and_then(|wc| wc.get("wtimeout").or_else(|| wc.get("wtimeoutMS")))
            .and_then(as_millis)
            .filter(|d| !d.is_zero());
        let started = Instant::now();
        let mut changed = self.set.changed.subscribe();
        let target = self.set.publish(self.index);
        loop {
            {
                let inner = self.set.inner.lock();
                if inner.primary != Some(self.index) || Some(inner.term) != term {
                    return Some(wc_error(
                        189,
                        "Primary stepped down while waiting for replication",
                        false,
                    ));
                }
                let acked = inner.members.iter().filter(|m| m.applied >= target).count();
                if acked >= needed {
                    return None;
                }
            }
            let left = match timeout {
                Some(t) => match t.checked_sub(started.elapsed()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return Some(wc_error(64, "waiting for replication timed out", true)),
                },
                None => Duration::from_secs(3600),
            };
            tokio::select! {
                _ = changed.changed() => {}
                _ = tokio::time::sleep(left) => {}
            }
        }
    }

    /// `replSetStepDown` (arguments as `repl_set_commands.cpp` parses them).
    ///
    /// # Errors
    ///
    /// `BadValue` (2) and `TypeMismatch` (14) for bad arguments, 10107 if not primary, 262
    /// `ExceededTimeLimit` when no electable secondary caught up in time.
    ///
    /// # Cancel safety
    /// Dropping the future while it waits for a secondary ends the attempt (writes are
    /// accepted again).
    pub async fn step_down(&self, cmd: &Document) -> Result<Document> {
        let force = cmd.get("force").is_some_and(truthy);
        let mut period = match cmd.get("replSetStepDown").and_then(as_number) {
            Some(n) => n as i64,
            None => 0,
        };
        if period == 0 {
            period = 60;
        } else if period < 0 {
            return Err(CommandError::bad_value(
                "stepdown period must be a positive integer",
            ));
        }
        let catch_up = match cmd.get("secondaryCatchUpPeriodSecs") {
            None => {
                if force {
                    0
                } else {
                    10
                }
            }
            Some(value) => match as_number(value) {
                Some(n) => n as i64,
                None => {
                    return Err(CommandError::type_mismatch(format!(
                        "\"secondaryCatchUpPeriodSecs\" had the wrong type. Expected number, found {}",
                        crate::engine::compare::type_alias(value)
                    )));
                }
            },
        };
        if catch_up < 0 {
            return Err(CommandError::bad_value(
                "secondaryCatchUpPeriodSecs period must be a positive or absent",
            ));
        }
        if period < catch_up {
            return Err(CommandError::bad_value(
                "stepdown period must be longer than secondaryCatchUpPeriodSecs",
            ));
        }
        {
            let mut inner = self.set.inner.lock();
            if inner.primary != Some(self.index) {
                return Err(CommandError::new(10107, "not primary so can't step down"));
            }
            inner.members[self.index].stepping_down = true;
        }
        let attempt = SteppingDown(self);
        let until = Instant::now() + Duration::from_secs(catch_up as u64);
        let mut changed = self.set.changed.subscribe();
        let handoff = loop {
            let target = self.set.publish(self.index);
            if let Some(caught_up) = self.caught_up_secondary(target) {
                break Some(caught_up);
            }
            let now = Instant::now();
            if now >= until {
                if force {
                    break None;
                }
                return Err(CommandError::new(
                    262,
                    format!(
                        "No electable secondaries caught up as of {}. Please use the replSetStepDown command with the argument {{force: true}} to force node to step down.",
                        DateTime::now().try_to_rfc3339_string().unwrap_or_default()
                    ),
                ));
            }
            tokio::select! {
                _ = changed.changed() => {}
                _ = tokio::time::sleep(until - now) => {}
            }
        };
        // Take the state transition lock: writes in progress finish first.
        let set = self.set.clone();
        let index = self.index;
        tokio::task::spawn_blocking(move || {
            let _rstl = set.rstl[index].write();
            let mut inner = set.inner.lock();
            if inner.primary == Some(index) {
                inner.primary = None;
                inner.primary_lost_at = Some(Instant::now());
                inner.members[index].unelectable_until =
                    Some(Instant::now() + Duration::from_secs(period as u64));
                for member in &mut inner.members {
                    member.counter += 1;
                }
            }
            inner.members[index].stepping_down = false;
            drop(inner);
            set.notify();
            // Election handoff: the caught-up secondary runs at once.
            if let Some(next) = handoff {
                set.elect(next);
            }
        })
        .await
        .map_err(|_| CommandError::internal("step-down task failed"))?;
        drop(attempt);
        Ok(Document::new())
    }

    /// A secondary that has applied `target` entries and is electable, when a majority
    /// (this primary included) has applied them too.
    fn caught_up_secondary(&self, target: usize) -> Option<usize> {
        let inner = self.set.inner.lock();
        let caught_up = inner.members.iter().filter(|m| m.applied >= target).count();
        if caught_up < self.set.majority() {
            return None;
        }
        let now = Instant::now();
        inner.members.iter().enumerate().position(|(i, m)| {
            i != self.index
                && SetInner::live(m)
                && inner.sees(self.index, i)
                && m.applied >= target
                && m.unelectable_until.is_none_or(|until| now >= until)
        })
    }
}

/// Ends a step-down attempt when dropped (writes are accepted again if it failed).
struct SteppingDown<'a>(&'a Replica);

impl Drop for SteppingDown<'_> {
    fn drop(&mut self) {
        self.0.set.inner.lock().members[self.0.index].stepping_down = false;
        self.0.set.notify();
    }
}

fn writes_out(cmd: &Document) -> bool {
    cmd.get_array("pipeline").is_ok_and(|stages| {
        stages.iter().any(|s| {
            s.as_document()
                .is_some_and(|d| d.contains_key("$out") || d.contains_key("$merge"))
        })
    })
}

/// `OID::fromTerm`: `7fffffff` followed by the term, big-endian.
fn election_id(term: i64) -> ObjectId {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
    bytes[4..].copy_from_slice(&term.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

fn second_precision(date: DateTime) -> DateTime {
    DateTime::from_millis(date.timestamp_millis() / 1000 * 1000)
}

fn wc_error(code: i32, errmsg: &str, wtimeout: bool) -> Document {
    let mut error = doc! {
        "code": code,
        "codeName": crate::engine::error::code_name(code),
        "errmsg": errmsg,
    };
    if wtimeout {
        error.insert("errInfo", doc! {"wtimeout": true});
    }
    error
}

fn as_number(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(n) => Some(f64::from(*n)),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Double(d) => Some(*d),
        _ => None,
    }
}

fn as_millis(value: &Bson) -> Option<Duration> {
    as_number(value).map(|n| Duration::from_millis(n.max(0.0) as u64))
}

fn truthy(value: &Bson) -> bool {
    match value {
        Bson::Boolean(b) => *b,
        Bson::Null => false,
        other => as_number(other).is_none_or(|n| n != 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> Arc<SetShared> {
        let hosts = (0..3).map(|i| format!("127.0.0.1:{}", 1000 + i)).collect();
        let set = Arc::new(SetShared::new(
            hosts,
            Duration::ZERO,
            Duration::from_millis(100),
            ServerVersion::V7_0,
        ));
        set.become_initial_primary(0);
        set
    }

    /// A write admitted on the primary (past the "can run here" check) that had not taken
    /// the replication state transition lock when the member stepped down is interrupted
    /// with `InterruptedDueToReplStateChange` (11602), as step-down kills the operations
    /// holding that lock (`src/mongo/db/repl/README.md`, "Conditional"); one that arrives
    /// after it fails `NotWritablePrimary` (10107).
    #[test]
    fn a_write_admitted_before_a_state_change_is_interrupted() {
        let set = set();
        let primary = Replica::new(set.clone(), 0);
        let admitted = primary.admitted_term();
        assert_eq!(admitted, Some(1));
        assert!(
            primary
                .write_intent("insert", &doc! {}, admitted)
                .unwrap()
                .is_some()
        );
        assert!(
            primary
                .write_intent("find", &doc! {}, admitted)
                .unwrap()
                .is_none()
        );
        {
            let mut inner = set.inner.lock();
            inner.primary = None;
        }
        let interrupted = primary
            .write_intent("insert", &doc! {}, admitted)
            .err()
            .unwrap();
        assert_eq!(
            (interrupted.code, interrupted.errmsg.as_str()),
            (11602, "operation was interrupted")
        );
        set.elect(1);
        assert_eq!(set.term(), 2);
        let later = primary.admitted_term();
        assert_eq!(later, None);
        let refused = primary
            .write_intent("update", &doc! {}, later)
            .err()
            .unwrap();
        assert_eq!(
            (refused.code, refused.errmsg.as_str()),
            (10107, "not primary")
        );
        let new = Replica::new(set.clone(), 1);
        assert!(
            new.write_intent("insert", &doc! {}, new.admitted_term())
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn election_ids_sort_by_term() {
        assert_eq!(election_id(1).to_hex(), "7fffffff0000000000000001");
        assert!(election_id(2).bytes() > election_id(1).bytes());
    }
}
