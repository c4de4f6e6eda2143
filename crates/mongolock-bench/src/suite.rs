//! Every measurement for one library, in order, against the emulators of the run.

use crate::emulator::Topology;
use crate::groups::{self, Group};
use crate::keepalive::{self, Keepalive};
use crate::load::{self, Load};
use crate::measure::{self, Handoff, Outcome, PerOp, Settings, Uncontended, brief};
use crate::memory::{self, Memory};
use crate::peers::Lib;
use crate::throughput::{self, Throughput};

/// The measurements, by the names `--measure` takes.
pub(crate) const SECTIONS: [&str; 9] = [
    "basics",
    "handoff",
    THREE_MEMBERS,
    "throughput",
    "load",
    "keepalive",
    "groups",
    "memory",
    SERVER_MODES,
];

/// The measurement of mongolock on each server mode (see [`crate::modes`]), run once after
/// the libraries.
pub(crate) const SERVER_MODES: &str = "server-modes";

/// The uncontended pair and the handoffs on the three-member set.
pub(crate) const THREE_MEMBERS: &str = "three-members";

/// What a peer's measurement on the three-member set reports in quick mode.
pub(crate) const PEERS_NOT_ON_THE_SET: &str = "not measured in quick mode (mongolock only)";

/// What a measurement left out by `--measure` reports.
pub(crate) const NOT_RUN: &str = "not measured in this run (--measure)";

/// The servers of the run: a replica set, and a standalone server for the polling rows.
pub(crate) struct Servers {
    pub(crate) replica_set: String,
    pub(crate) standalone: String,
    pub(crate) three_members: String,
}

/// The throughput scenarios: (tasks, resources) for the given number of tasks.
pub(crate) fn throughput_scenarios(tasks: usize) -> [(usize, usize); 2] {
    [(tasks, tasks), (tasks, 1)]
}

/// Handoff figures per waiter count.
pub(crate) type HandoffSeries = Vec<(usize, Outcome<Handoff>)>;

/// Everything measured for one library.
pub(crate) struct LibResults {
    pub(crate) lib: Lib,
    pub(crate) uncontended: Outcome<Uncontended>,
    pub(crate) failed: Outcome<PerOp>,
    /// Per group size: `Ok(None)` when the library cannot renew.
    pub(crate) renew: Vec<(usize, Outcome<Option<u64>>)>,
    /// Per waiter count, on the replica set (change streams available).
    pub(crate) handoff: HandoffSeries,
    /// Per waiter count, on the standalone server (no change streams).
    pub(crate) handoff_standalone: HandoffSeries,
    /// On the three-member set: the uncontended pair, and the handoffs per waiter count.
    pub(crate) three_members: (Outcome<Uncontended>, HandoffSeries),
    /// Per scenario of [`throughput_scenarios`].
    pub(crate) throughput: Vec<((usize, usize), Outcome<Throughput>)>,
    /// Per topology.
    pub(crate) load: Vec<(Topology, Outcome<Load>)>,
    /// Per number of leases: `Ok(None)` without keepalive.
    pub(crate) keepalive: Vec<(usize, Outcome<Option<Keepalive>>)>,
    /// Per group size: `Ok(None)` without groups.
    pub(crate) groups: Vec<(usize, Outcome<Option<Group>>)>,
    pub(crate) memory: Outcome<Memory>,
}

fn text<T>(r: crate::peers::Result<T>) -> Outcome<T> {
    r.map_err(|e| e.to_string())
}

/// `work`, or an error if it takes longer than `limit` (a hang becomes a row's error
/// instead of stopping the run).
async fn limited<T>(
    limit: std::time::Duration,
    work: impl std::future::Future<Output = crate::peers::Result<T>>,
) -> Outcome<T> {
    match tokio::time::timeout(limit, work).await {
        Ok(r) => text(r),
        Err(_) => Err(format!("did not finish within {limit:?}")),
    }
}

/// Runs every measurement for `lib` that `on` selects (by the names in [`SECTIONS`]).
pub(crate) async fn run(
    lib: Lib,
    servers: &Servers,
    s: &Settings,
    on: &dyn Fn(&str) -> bool,
) -> LibResults {
    eprintln!("== {}", lib.label());
    let started = std::time::Instant::now();
    let phase = |name: &str| {
        eprintln!(
            "   -- {name} done at {:.1} s",
            started.elapsed().as_secs_f64()
        )
    };
    let uri = servers.replica_set.as_str();
    let basics = if on("basics") {
        measure::basics(lib, uri, s).await
    } else {
        measure::Basics {
            uncontended: Err(NOT_RUN.into()),
            failed: Err(NOT_RUN.into()),
            renew: s
                .renew_sizes
                .iter()
                .map(|k| (*k, Err(NOT_RUN.into())))
                .collect(),
        }
    };
    phase("basics");
    let (handoff, handoff_standalone) = if on("handoff") {
        (
            measure::handoff_series(lib, uri, s, Topology::ReplicaSet.label()).await,
            measure::handoff_series(lib, &servers.standalone, s, Topology::Standalone.label())
                .await,
        )
    } else {
        let none = || {
            s.handoffs
                .iter()
                .map(|(w, _)| (*w, Err(NOT_RUN.into())))
                .collect()
        };
        (none(), none())
    };
    phase("handoffs");
    let three_members = if on(THREE_MEMBERS) && (s.peers_on_three_members || lib == Lib::Mongolock)
    {
        let set = servers.three_members.as_str();
        let uncontended = measure::uncontended(lib, set, s)
            .await
            .map_err(|e| e.to_string());
        eprintln!("   uncontended (three-member set): {}", brief(&uncontended));
        let label = Topology::ThreeMembers.label();
        (
            uncontended,
            measure::handoff_series(lib, set, s, label).await,
        )
    } else {
        let why = if on(THREE_MEMBERS) {
            PEERS_NOT_ON_THE_SET
        } else {
            NOT_RUN
        };
        let none = s.handoffs.iter().map(|(w, _)| (*w, Err(why.into())));
        (Err(why.into()), none.collect())
    };
    phase("three-member set");
    let mut throughput = Vec::new();
    for (tasks, resources) in throughput_scenarios(s.throughput_tasks) {
        let r = if on("throughput") {
            limited(
                s.limit,
                throughput::run(lib, uri, tasks, resources, s.throughput_for),
            )
            .await
        } else {
            Err(NOT_RUN.into())
        };
        eprintln!(
            "   throughput, {tasks} tasks on {resources} resource(s): {}",
            brief(&r)
        );
        throughput.push(((tasks, resources), r));
    }
    phase("throughput");
    let mut load = Vec::new();
    for (topology, uri) in [
        (Topology::ReplicaSet, uri),
        (Topology::Standalone, servers.standalone.as_str()),
    ] {
        let r = if on("load") {
            limited(s.limit, load::run(lib, uri, s.load_waiters, s.load_window)).await
        } else {
            Err(NOT_RUN.into())
        };
        eprintln!("   load ({}): {}", topology.label(), brief(&r));
        load.push((topology, r));
    }
    phase("load");
    let mut keep = Vec::new();
    for &n in &s.keepalive_leases {
        let r = if on("keepalive") {
            limited(
                s.limit,
                keepalive::run(lib, uri, n, s.keepalive_ttl, s.keepalive_window),
            )
            .await
        } else {
            Err(NOT_RUN.into())
        };
        if lib == Lib::Mongolock {
            eprintln!("   keepalive, {n} leases: {}", brief(&r));
        }
        keep.push((n, r));
    }
    phase("keepalive");
    let mut group = Vec::new();
    for &n in &s.group_sizes {
        let r = if on("groups") {
            limited(s.limit, groups::run(lib, uri, n)).await
        } else {
            Err(NOT_RUN.into())
        };
        if lib == Lib::Mongolock {
            eprintln!("   group of {n}: {}", brief(&r));
        }
        group.push((n, r));
    }
    phase("groups");
    let memory = if on("memory") {
        limited(
            s.limit,
            memory::run(lib, uri, s.memory_leases, s.memory_waiters),
        )
        .await
    } else {
        Err(NOT_RUN.into())
    };
    eprintln!("   memory: {}", brief(&memory));
    phase("memory");
    LibResults {
        lib,
        uncontended: basics.uncontended,
        failed: basics.failed,
        renew: basics.renew,
        handoff,
        handoff_standalone,
        three_members,
        throughput,
        load,
        keepalive: keep,
        groups: group,
        memory,
    }
}
