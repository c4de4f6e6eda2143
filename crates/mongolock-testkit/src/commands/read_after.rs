//! `readConcern.afterClusterTime` and `afterOpTime`: before a command runs, the server waits
//! until it has reached the time the client asks for, as mongod's `waitForReadConcernImpl`
//! (`src/mongo/db/read_concern_mongod.cpp`) does, called for every command before it runs
//! (`ExecCommandDatabase`, `src/mongo/db/service_entry_point_common.cpp`). Drivers send
//! `afterClusterTime` in a causally consistent session (the causal-consistency spec), so a
//! secondary that has not yet applied the session's last write waits for it.
//!
//! In order, as mongod checks them:
//! - a command that does not allow `afterClusterTime` (`getMore`: `allowsAfterClusterTime`
//!   is false in `src/mongo/db/commands/getmore_cmd.cpp`): `InvalidOptions` (72)
//!   "afterClusterTime is not allowed for this command";
//! - `linearizable` with `afterOpTime`: `FailedToParse` (9);
//! - a standalone: `afterClusterTime` is `IllegalOperation` (20) "Cannot specify
//!   afterClusterTime readConcern without replication enabled", `afterOpTime`
//!   `NotAReplicaSet` (123) "node needs to be a replica set member to use read concern"
//!   (`ReplicationCoordinatorImpl::waitUntilOpTimeForReadUntil`,
//!   `src/mongo/db/repl/replication_coordinator_impl.cpp`; jstest
//!   `jstests/core/read_after_optime.js`);
//! - an `afterClusterTime` ahead of the server's cluster time: `InvalidOptions` (72)
//!   "readConcern afterClusterTime value must not be greater than the current clusterTime"
//!   (a client's `$clusterTime` moved the cluster time up before, see `crate::commands`'s
//!   `dispatch`);
//! - then the wait (`_waitUntilClusterTimeForRead`, `_waitUntilOpTime`,
//!   `_waitUntilMajorityOpTime` in `replication_coordinator_impl.cpp`): at `local` (or no
//!   level) until the member's last applied optime reaches the time, at `majority` until its
//!   majority commit point does. A cluster time is compared as an optime of uninitialized
//!   term, by its timestamp alone (`OpTime::operator<`, `src/mongo/db/repl/optime.h`); an
//!   `afterOpTime` by term, then timestamp. Past the command's `maxTimeMS` the wait fails
//!   with `MaxTimeMSExpired` (50) (jstest `jstests/replsets/read_after_optime.js`); without
//!   one it waits as long as it takes. On a primary whose applied optime is behind the time,
//!   mongod in a replica set that is not part of a sharded cluster writes no no-op to move
//!   its optime (`makeNoopWriteIfNeeded` returns at once for `ClusterRole::None`), and
//!   neither does the emulator: the primary waits as a secondary does.
//!
//! The one-member emulator (not a standalone, no set) holds every write it acknowledged, so it
//! has applied everything up to its cluster time: an `afterClusterTime` not ahead of it is
//! reached at once, and an `afterOpTime` waits until the cluster time reaches its timestamp
//! (its term is not compared: the one-member emulator has no oplog terms).

use std::time::{Duration, Instant};

use bson::{Document, Timestamp};

use super::args;
use super::state::ServerState;
use crate::engine::error::{CommandError, Result, codes};

/// Waits, before command `name` (`cmd`) runs, until the server has reached the
/// `afterClusterTime` or `afterOpTime` of its `readConcern`; returns at once when it has
/// neither. `deadline` is the command's `maxTimeMS`.
///
/// # Errors
/// See the module's notes: the combinations mongod refuses, a time ahead of the server's
/// cluster time, `MaxTimeMSExpired` (50) past the deadline, and on a set member the errors of
/// [`super::state::Member::await_op_time`].
///
/// # Cancel safety
/// Cancel safe: waiting changes nothing.
pub async fn wait(
    state: &ServerState,
    name: &str,
    cmd: &Document,
    deadline: Option<Instant>,
) -> Result<()> {
    let rc = args::read_concern(cmd)?;
    let target = match (rc.after_cluster_time, rc.after_op_time) {
        (Some(time), _) => (time, UNINITIALIZED_TERM),
        (None, Some(op_time)) => op_time,
        (None, None) => return Ok(()),
    };
    let after_cluster_time = rc.after_cluster_time.is_some();
    if after_cluster_time && name == "getMore" {
        return Err(CommandError::new(
            codes::INVALID_OPTIONS,
            "afterClusterTime is not allowed for this command",
        ));
    }
    if rc.level.as_deref() == Some("linearizable") {
        if state.standalone {
            return Err(not_a_replica_set());
        }
        if rc.after_op_time.is_some() {
            return Err(CommandError::new(
                codes::FAILED_TO_PARSE,
                "afterOpTime not compatible with linearizable read concern",
            ));
        }
    }
    if state.standalone {
        return Err(if after_cluster_time {
            CommandError::new(
                codes::ILLEGAL_OPERATION,
                "Cannot specify afterClusterTime readConcern without replication enabled",
            )
        } else {
            not_a_replica_set()
        });
    }
    let changes = &state.catalog.changes;
    if after_cluster_time {
        let current = changes.current_cluster_time();
        if (target.0.time, target.0.increment) > (current.time, current.increment) {
            return Err(CommandError::new(
                codes::INVALID_OPTIONS,
                format!(
                    "readConcern afterClusterTime value must not be greater than the current \
                     clusterTime. Requested clusterTime: {}; current clusterTime: {}",
                    logical_time_string(target.0),
                    logical_time_string(current),
                ),
            ));
        }
    }
    if let Some(replica) = &state.replica {
        return replica
            .await_op_time(target, rc.is_majority(), deadline)
            .await;
    }
    // The one-member emulator: applied up to its cluster time.
    loop {
        let current = changes.current_cluster_time();
        if (current.time, current.increment) >= (target.0.time, target.0.increment) {
            return Ok(());
        }
        let Some(left) = time_left(deadline) else {
            return Err(wait_timed_out(
                rc.is_majority(),
                target,
                (current, UNINITIALIZED_TERM),
            ));
        };
        // Each write (and each reply) moves the cluster time on; look again after a write or
        // a short while.
        changes
            .wait_for_append(changes.last_seq(), left.min(Duration::from_millis(50)))
            .await;
    }
}

/// How long a wait for the read concern may still take before `deadline` (the command's
/// `maxTimeMS`; without one, an hour at a time); `None` once it has passed.
pub fn time_left(deadline: Option<Instant>) -> Option<Duration> {
    match deadline {
        Some(at) => at
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero()),
        None => Some(Duration::from_secs(3600)),
    }
}

/// The term of an optime that has none, compared by its timestamp alone
/// (`OpTime::kUninitializedTerm`, `src/mongo/db/repl/optime.h`).
pub const UNINITIALIZED_TERM: i64 = -1;

/// Whether an optime `reached` is at or past `target` (`OpTime`'s comparison,
/// `src/mongo/db/repl/optime.h`: by timestamp alone when either term is uninitialized, else by
/// term, then timestamp).
pub fn op_time_reached(reached: (Timestamp, i64), target: (Timestamp, i64)) -> bool {
    let ts = |t: Timestamp| (t.time, t.increment);
    if reached.1 == UNINITIALIZED_TERM || target.1 == UNINITIALIZED_TERM {
        ts(reached.0) >= ts(target.0)
    } else {
        (reached.1, ts(reached.0)) >= (target.1, ts(target.0))
    }
}

/// mongod's error for a read-concern wait cut short by `maxTimeMS`: `MaxTimeMSExpired` (50),
/// its message with the wait's context (`_waitUntilOpTime` and `_waitUntilMajorityOpTime`,
/// `src/mongo/db/repl/replication_coordinator_impl.cpp`, `Status::withContext`).
pub fn wait_timed_out(
    majority: bool,
    target: (Timestamp, i64),
    current: (Timestamp, i64),
) -> CommandError {
    let waited_for = if majority {
        "snapshot not less than"
    } else {
        "optime"
    };
    CommandError::new(
        codes::MAX_TIME_MS_EXPIRED,
        format!(
            "Error waiting for {waited_for} {}, current relevant optime is {}. :: caused by :: \
             operation exceeded time limit",
            op_time_string(target),
            op_time_string(current),
        ),
    )
}

/// An optime as mongod prints it (`OpTime::toString`): `{ ts: Timestamp(1, 2), t: 1 }`.
pub fn op_time_string((ts, term): (Timestamp, i64)) -> String {
    format!(
        "{{ ts: Timestamp({}, {}), t: {term} }}",
        ts.time, ts.increment
    )
}

/// A cluster time as mongod prints it (`LogicalTime::toString`): `{ ts: Timestamp(1, 2) }`
/// (jstest `jstests/replsets/arbiter_afterClusterTime_read_concern.js`).
fn logical_time_string(ts: Timestamp) -> String {
    format!("{{ ts: Timestamp({}, {}) }}", ts.time, ts.increment)
}

fn not_a_replica_set() -> CommandError {
    CommandError::new(
        123,
        "node needs to be a replica set member to use read concern",
    )
}
