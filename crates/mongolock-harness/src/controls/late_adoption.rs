//! The control of a late adoption (issue 40; the library's fix `32daed2`): an adoption (a
//! restarted process taking over its lock id's live lease, `keepalive::adopt_command`)
//! takes out its own call's place in line and no other call's. The lease of `svc` outlives
//! its process. The restarted process's first call is answered "already held" and sends its
//! adoption, whose every copy the fault proxy holds on the wire, and gives up; the lock id's
//! next call stands in line, `other` behind it, its own adoptions refused, waiting for the
//! lease to end. The first call's copies land then, while the lease is live: they adopt it,
//! and must leave the next call's place, so that the next call is served first. Planted:
//! once they landed, the adoption of before the fix is sent raw (the entry renamed as an
//! adoption does, and every place of the lock id taken out), which takes the next call's
//! place while it waits; it joins again behind `other`, which is served first. The adoption
//! changes no field of the entry that makes a grant (token, times, nonce), so (S9) judges
//! the place it took as taken granting nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongolock::{LockClient, LockDetails};
use mongolock_testkit::FaultProxy;
use mongolock_testkit::faults::proxy::{RequestFault, Requests};

use super::line::{Waiter, late_replies, line_becomes, line_without, record_call, two_in_line};
use super::{ControlResult, Expected, RESOURCE, Watched, locks};
use crate::oracle::ServerCheck;
use crate::workload::{COLLECTION, DB};

/// The lease of `svc`'s dead process: it ends while both waiters stand in line, after the
/// late copies landed.
const TTL: Duration = Duration::from_secs(6);
/// How long the first call waits before it gives up.
const FIRST_WAIT: Duration = Duration::from_millis(700);
/// How long each copy of the first call's adoption is held on the wire.
const LATE_BY: Duration = Duration::from_millis(2_500);
/// How long the next call and `other` may wait: past the lease's end.
const WAIT: Duration = Duration::from_secs(12);

/// What [`late_adoption`] saw happen.
#[derive(Debug, Default)]
pub(super) struct LateAdoption {
    /// Copies of the first call's adoption the proxy held.
    pub(super) held: u64,
    /// Adoptions of the next call the proxy refused.
    pub(super) refused: u64,
    /// The line (lock ids, in order) once the next call and `other` stood in it, before the
    /// late copies landed.
    pub(super) line_before: Vec<String>,
    /// How many late copies ran on the server and adopted the live lease (`n: 1`).
    pub(super) adopted: usize,
    /// The line once they landed (and, planted, once the old adoption ran).
    pub(super) line_after: Vec<String>,
    /// The lock ids in the order they were served.
    pub(super) served: Vec<String>,
}

/// The late adoption of before the fix takes the next call's place: caught by (S9).
pub(super) async fn late_adoption_takes_the_next_calls_place()
-> Result<ControlResult, Box<dyn std::error::Error>> {
    let (result, went) = late_adoption(true).await?;
    // The fault happened as planned: the late copies adopted the live lease once both
    // waiters stood in line, and the planted adoption took `svc`'s place, so that `other`
    // was served first.
    let planned = went.held >= 1
        && went.adopted >= 1
        && went.refused >= 1
        && went.line_before == ["svc", "other"]
        && went.line_after.first().is_none_or(|id| id != "svc")
        && went.served == ["other", "svc"];
    if !planned {
        return Err(format!("the late adoption did not happen as planned: {went:?}").into());
    }
    Ok(result)
}

/// Whether `command` is an adoption of [`RESOURCE`]: an `update` whose stage marks the
/// resumed entry `adopted`.
fn is_adoption(command: &Document) -> bool {
    let Some(statement) = (command.get_str("update").ok())
        .and_then(|_| command.get_array("updates").ok()?.first()?.as_document())
    else {
        return false;
    };
    let on_resource = (statement.get_document("q")).is_ok_and(|q| q.get_str("_id") == Ok(RESOURCE));
    let adopted = (statement.get_array("u").ok())
        .and_then(|u| u.first()?.as_document()?.get_document("$set").ok())
        .and_then(|set| {
            (set.get_document("exclusive").ok()?)
                .get_array("$mergeObjects")
                .ok()
        })
        .and_then(|merged| merged.get(1)?.as_document()?.get_bool("adopted").ok());
    on_resource && adopted == Some(true)
}

/// The scenario of this module's docs; `planted`: the adoption of before the fix sent raw
/// once the late copies landed.
pub(super) async fn late_adoption(
    planted: bool,
) -> Result<(ControlResult, LateAdoption), Box<dyn std::error::Error>> {
    let stage = Watched::start().await?;
    let recorder = &stage.recorder;
    let proxy = FaultProxy::start(stage.server.addr()).await?;
    let svc_locks = locks(proxy.client());
    let b_locks = locks(stage.server.new_client());
    let raw = (stage.server.new_client().database(DB)).collection::<Document>(COLLECTION);
    // The first call's adoptions (phase 1) are held and land late; the next call's (phase 2)
    // are refused (a mongos that cannot reach the shard), so that it waits in line.
    let phase = Arc::new(AtomicU8::new(1));
    let in_phase = |n: u8| {
        let phase = phase.clone();
        Requests::matching(move |command| phase.load(Ordering::SeqCst) == n && is_adoption(command))
    };
    let late = proxy.fault_requests(
        in_phase(1),
        RequestFault::Late {
            hold: LATE_BY,
            cut_after: Some(Duration::from_millis(50)),
        },
    );
    let refused = proxy.fault_requests(in_phase(2), RequestFault::Refuse { code: 6 });
    let job = |locks: &LockClient, lock_id: &str| locks.mutex(RESOURCE).ttl(TTL).lock_id(lock_id);

    // The lease of `svc`, granted to a process that died: nobody renews it.
    let _lease = stage
        .locks
        .xlock(RESOURCE, "svc", LockDetails::default().ttl(TTL))
        .await?;
    let invoked = Instant::now();
    let first = job(&svc_locks, "svc").acquire_timeout(FIRST_WAIT).await?;
    record_call(recorder, 0, "svc", invoked, first.is_some(), FIRST_WAIT);
    if first.is_some() {
        return Err("svc's first call resumed the lease".into());
    }
    if late.applied() == 0 {
        return Err("svc's first call sent no adoption".into());
    }
    // Its place goes with its `leave_line`.
    phase.store(2, Ordering::SeqCst);
    line_becomes(&raw, &[]).await?;

    let waiter = |client: usize, locks: &LockClient, lock_id: &'static str| Waiter {
        client,
        mutex: job(locks, lock_id),
        lock_id,
        timeout: WAIT,
    };
    // The next call joins first, then `other` behind it; then the late copies land.
    let svc = waiter(0, &svc_locks, "svc");
    let other = waiter(1, &b_locks, "other");
    let in_line = two_in_line(recorder, &raw, svc, other, || async {
        if late.delivered() != 0 {
            return Err(format!(
                "a copy of the first call's adoption was not held until then ({} held, {} \
                 delivered)",
                late.applied(),
                late.delivered()
            )
            .into());
        }
        let replies = late_replies(&late, late.applied() as usize, LATE_BY).await;
        let adopted = (replies.iter())
            .filter(|reply| reply.get("n").and_then(bson::Bson::as_i32) == Some(1))
            .count();
        if planted {
            // The adoption of before the fix: the entry renamed, every place of the lock id
            // taken out.
            let old = vec![doc! { "$set": {
                "exclusive": { "$mergeObjects": [
                    "$exclusive", { "keeper": "dead-process", "adopted": true },
                ]},
                "queue": line_without("svc"),
            }}];
            raw.update_one(
                doc! { "_id": RESOURCE, "mongolock": 1, "exclusive.lockId": "svc" },
                old,
            )
            .await?;
        }
        Ok(adopted)
    })
    .await?;
    let went = LateAdoption {
        held: late.applied(),
        refused: refused.applied(),
        line_before: in_line.before,
        adopted: in_line.landed,
        line_after: in_line.after,
        served: in_line.served,
    };
    svc_locks.shutdown().await;
    b_locks.shutdown().await;
    let result = stage
        .finish(
            "a late adoption takes the lock id's next call's place",
            Expected::Server(ServerCheck::Order),
            &[RESOURCE],
        )
        .await?;
    Ok((result, went))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library: the late copies adopt the live lease and leave the next call's place;
    /// `svc` is served first, and nothing is found.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_adoption_leaves_the_next_calls_place() {
        let (result, went) = late_adoption(false).await.expect("the scenario runs");
        println!("library: {went:?}; found {:?}", result.found());
        assert_eq!(went.line_before, ["svc", "other"], "{went:?}");
        assert!(went.adopted >= 1, "a late copy adopted the lease: {went:?}");
        assert!(
            went.refused >= 1,
            "the next call's adoption was refused: {went:?}"
        );
        assert_eq!(went.line_after, ["svc", "other"], "{went:?}");
        assert_eq!(went.served, ["svc", "other"], "{went:?}");
        assert_eq!(result.found(), vec![], "nothing at all");
    }

    /// Planted: the adoption of before the fix, sent raw once the late copies landed, takes
    /// `svc`'s place while its call waits, and `other` is served first: (S9) catches it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_adoption_that_takes_the_next_calls_place_is_caught_by_s9() {
        let (result, went) = late_adoption(true).await.expect("the control runs");
        println!("planted: {went:?}; found {:?}", result.found());
        assert!(went.adopted >= 1, "a late copy adopted the lease: {went:?}");
        assert_eq!(went.served, ["other", "svc"], "{went:?}");
        assert!(result.caught(), "not caught: {:?}", result.found());
        assert_eq!(
            result.found(),
            vec![(ServerCheck::Order.to_string(), 1)],
            "only (S9)"
        );
    }
}
