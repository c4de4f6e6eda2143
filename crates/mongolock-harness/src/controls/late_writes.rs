//! The controls of writes that land late: a release queued for a retry, the withdrawal of an
//! attempt, a copy of an attempt. Each puts back, from outside the library (its low-level API
//! and direct writes to the collection), a way such a write used to end a lock it should not
//! touch, or to grant one nobody waits for.

use std::time::{Duration, Instant};

use bson::Document;
use mongolock::{AcquireRequest, LockDetails};

use super::{
    ControlResult, Expected, RESOURCE, TTL, Watched, hold_honestly, locks, write, xlock_logged,
};
use crate::check::Check;
use crate::history::{FromLibrary, GuardLog, HolderLog, LetGo, LossKind, Mode, ReleaseResult};
use crate::oracle::ServerCheck;
use crate::workload::{COLLECTION, DB};

/// How long a control waits for a lock it expects at once (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(3);

/// A release queued after a failure lands after the same lock id resumed the lease: A holds
/// under a fixed lock id; its release fails (it stays queued, to be retried); the same process
/// asks again with that lock id and is handed the lease back (B, same token); then the queued
/// release of A's grant, which names the same resource, lock id and token, lands and removes
/// the entry B holds. C is granted at once while B believes it holds; B learns at its next
/// renewal.
pub(super) async fn release_after_resume() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let stage = Watched::start().await?;
    let (recorder, locks) = (&stage.recorder, &stage.locks);
    let lock_id = "svc";
    let details = LockDetails::default().ttl(TTL).owner(lock_id);
    let (a, mut a_log) = xlock_logged(recorder, locks, RESOURCE, lock_id, details.clone()).await?;
    write(recorder, &mut a_log, a.fencing_token());
    // Its release fails: the client keeps it, to retry.
    a_log.lets_go(LetGo::Released);
    a_log.release = Some(ReleaseResult::Failed);
    let a_id = a_log.id;
    recorder.holder(a_log);

    // Asked again at once with the same lock id: the lease is handed back.
    let (b, mut b_log) = xlock_logged(recorder, locks, RESOURCE, lock_id, details).await?;
    if b.fencing_token() != a.fencing_token() {
        return Err("the lease was not handed back under its lock id".into());
    }
    b_log.resumed_from = Some(a_id);
    write(recorder, &mut b_log, b.fencing_token());

    // The bug: the queued release of A's grant lands now, on the entry B holds.
    if !locks.release(&a).await? {
        return Err("the queued release found nothing to remove".into());
    }
    granted_past_a_believer(stage, b_log, lock_id, "release after resume").await
}

/// A late copy of an unlock lands after its lock id was granted again: a holder on the
/// low-level API takes the resource under a lock id and unlocks it (a copy of the unlock is
/// delayed in the network, as after a cut connection the library repeats it); it takes the
/// resource again under the same lock id, and works. Then the late copy lands and, as an
/// unlock that spares nothing granted after it would, removes the new grant's entry (written
/// directly: the entry of that lock id). C is granted at once while the holder believes; it
/// learns at its next renewal.
pub(super) async fn late_unlock() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let stage = Watched::start().await?;
    let (recorder, locks) = (&stage.recorder, &stage.locks);
    let lock_id = "batch";
    let details = LockDetails::default().ttl(TTL).owner(lock_id);
    let (a, mut a_log) = xlock_logged(recorder, locks, RESOURCE, lock_id, details.clone()).await?;
    write(recorder, &mut a_log, a.fencing_token());
    a_log.lets_go(LetGo::Unlocked);
    if locks.unlock(lock_id).await? != 1 {
        return Err("the unlock released nothing".into());
    }
    a_log.release = Some(ReleaseResult::Ok);
    recorder.holder(a_log);

    // Granted again under the same lock id: a new lease.
    let (b, mut b_log) = xlock_logged(recorder, locks, RESOURCE, lock_id, details).await?;
    if !b.is_new() {
        return Err("the lock id was not granted anew".into());
    }
    write(recorder, &mut b_log, b.fencing_token());

    // The bug: the late copy of the first unlock lands now, on the entry B holds.
    remove_exclusive_entry(&stage, RESOURCE, lock_id).await?;
    granted_past_a_believer(stage, b_log, lock_id, "late unlock").await
}

/// The end of a control whose bug removed the entry B holds under `lock_id` on the low-level
/// API: C is granted at once and holds honestly; B renews as a holder of the low-level API
/// does, finds nothing of its lock id left and notices; B unlocks. Exclusion must catch it.
async fn granted_past_a_believer(
    stage: Watched,
    mut b_log: HolderLog,
    lock_id: &str,
    name: &'static str,
) -> Result<ControlResult, Box<dyn std::error::Error>> {
    let (recorder, locks) = (&stage.recorder, &stage.locks);
    let invoked = Instant::now();
    let c = locks_of(&stage)
        .mutex(RESOURCE)
        .ttl(TTL)
        .acquire_timeout(PATIENCE)
        .await?
        .ok_or("C was not granted the lock")?;
    let c_log = hold_honestly(recorder, 1, c, invoked, Duration::from_millis(300)).await;
    recorder.holder(c_log);
    if locks.renew(lock_id, TTL).await? == 0 {
        b_log.notice(Instant::now(), LossKind::Revoked);
    }
    b_log.lets_go(LetGo::Unlocked);
    locks.unlock(lock_id).await?;
    recorder.holder(b_log);
    stage
        .finish(name, Expected::Client(Check::Exclusion), &[RESOURCE])
        .await
}

/// Removes the exclusive entry `lock_id` holds on `resource`, written directly (what a late
/// write that should have spared it did).
async fn remove_exclusive_entry(
    stage: &Watched,
    resource: &str,
    lock_id: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let removed = stage
        .server
        .new_client()
        .database(DB)
        .collection::<Document>(COLLECTION)
        .update_one(
            bson::doc! { "_id": resource, "exclusive.lockId": lock_id },
            bson::doc! { "$unset": { "exclusive": "" } },
        )
        .await?;
    if removed.modified_count != 1 {
        return Err(format!("{lock_id} held nothing on {resource} to remove").into());
    }
    Ok(())
}

/// A withdrawal owed by a multi-lock's round lands after the next round took the member back:
/// the set's first attempt at X0 was applied but its outcome unknown (a withdrawal is owed);
/// the multi-lock's next round finds X0 held by the set's own lock id and adopts it; then the
/// withdrawal lands and removes X0's entry (it matched the entry by the lock id and the first
/// attempt's nonce, which the adoption kept: written directly here, whatever the library's
/// withdrawal matches now). C takes X0 at once; the set still says it holds.
pub(super) async fn withdrawal_after_readoption()
-> Result<ControlResult, Box<dyn std::error::Error>> {
    const X0: &str = "control-x0";
    const X1: &str = "control-x1";
    let stage = Watched::start().await?;
    let (recorder, locks) = (&stage.recorder, &stage.locks);
    let c_locks = locks_of(&stage);
    let lock_id = "set";
    // The first round's attempt at X0, applied; its reply never came.
    let first = AcquireRequest::exclusive(X0, lock_id, LockDetails::default().ttl(TTL));
    locks.acquire(&first).await?;

    // The next round, under the same lock id: X0 comes back, X1 is granted.
    let invoked = Instant::now();
    let set = locks
        .multi([X0, X1])
        .ttl(TTL)
        .lock_id(lock_id)
        .acquire_timeout(PATIENCE)
        .await?
        .ok_or("the set was not granted")?;
    let number = recorder.next_id();
    let mut logs: Vec<HolderLog> = set
        .guards()
        .iter()
        .map(|guard| {
            let mut log = HolderLog::new(recorder.next_id(), 0, Mode::Multi, invoked, guard);
            log.group = Some(number);
            write(recorder, &mut log, guard.fencing_token());
            log
        })
        .collect();

    // The bug: the owed withdrawal lands now and removes the member the set holds.
    remove_exclusive_entry(&stage, X0, lock_id).await?;
    let c_recorder = recorder.clone();
    let c_task = tokio::spawn(async move {
        let invoked = Instant::now();
        let c = c_locks.mutex(X0).ttl(TTL).acquire_timeout(PATIENCE).await;
        match c {
            Ok(Some(c)) => {
                Some(hold_honestly(&c_recorder, 1, c, invoked, Duration::from_millis(400)).await)
            }
            _ => None,
        }
    });
    // The set's holder works on until the set says it is lost (its next renewal).
    let watch_until = Instant::now() + TTL;
    tokio::select! {
        reason = set.lost() => {
            let now = Instant::now();
            for log in &mut logs {
                log.notice(now, LossKind::of(&reason));
            }
        }
        () = tokio::time::sleep_until(watch_until.into()) => {}
    }
    for log in &mut logs {
        log.lets_go(LetGo::Released);
    }
    let released = ReleaseResult::of(&set.release().await);
    for mut log in logs {
        log.release = Some(released);
        recorder.holder(log);
    }
    if let Some(c_log) = c_task.await? {
        recorder.holder(c_log);
    }
    stage
        .finish(
            "withdrawal after re-adoption",
            Expected::Client(Check::Exclusion),
            &[X0, X1],
        )
        .await
}

/// A late copy of an attempt is granted after its grant was released: A's attempt was sent
/// twice (its first copy delayed in the network, the second granted); A works and releases;
/// then the first copy reaches the server and is granted a new entry (written directly, as a
/// server that does not refuse a late copy grants it: the attempt's lock id and nonce, the
/// next token), which nobody holds or renews. B waits out its TTL.
pub(super) async fn late_copy() -> Result<ControlResult, Box<dyn std::error::Error>> {
    let stage = Watched::start().await?;
    let (recorder, locks) = (&stage.recorder, &stage.locks);
    let b_locks = locks_of(&stage);
    let collection = stage
        .server
        .new_client()
        .database(DB)
        .collection::<Document>(COLLECTION);
    let lock_id = "late";
    let invoked = Instant::now();
    let a = locks
        .mutex(RESOURCE)
        .ttl(TTL)
        .lock_id(lock_id)
        .acquire()
        .await?;
    let granted = collection
        .find_one(bson::doc! { "_id": RESOURCE })
        .await?
        .ok_or("A's grant has no document")?;
    let nonce = granted
        .get_document("exclusive")
        .ok()
        .and_then(|e| e.get("nonce").cloned())
        .ok_or("A's entry has no nonce")?;
    let a_log = hold_honestly(recorder, 0, a, invoked, Duration::from_millis(200)).await;
    recorder.holder(a_log);

    // The bug: the late copy of A's attempt is granted.
    let ttl_ms = TTL.as_millis() as i64;
    let grant = vec![
        bson::doc! { "$set": { "fence": { "$add": [{ "$ifNull": ["$fence", 0_i64] }, 1_i64] } } },
        bson::doc! { "$set": { "exclusive": {
            "lockId": lock_id,
            "nonce": nonce,
            "token": "$fence",
            "createdAt": "$$NOW",
            "renewedAt": "$$NOW",
            "expiresAt": { "$add": ["$$NOW", ttl_ms] },
            "ttlMs": ttl_ms,
        } } },
    ];
    let landed = collection
        .update_one(bson::doc! { "_id": RESOURCE, "exclusive": null }, grant)
        .await?;
    if landed.modified_count != 1 {
        return Err("the late copy found the lock taken".into());
    }
    let invoked = Instant::now();
    let b = b_locks
        .mutex(RESOURCE)
        .ttl(TTL)
        .acquire_timeout(PATIENCE)
        .await?
        .ok_or("B was not granted the lock")?;
    let b_log = hold_honestly(recorder, 1, b, invoked, Duration::from_millis(200)).await;
    recorder.holder(b_log);
    stage
        .finish(
            "late copy",
            Expected::Server(ServerCheck::LateCopy),
            &[RESOURCE],
        )
        .await
}

/// A lock client of its own on the stage's server (another process).
fn locks_of(stage: &Watched) -> mongolock::LockClient {
    locks(stage.server.new_client())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_late_write_is_caught() {
        for result in [
            release_after_resume().await.expect("runs"),
            withdrawal_after_readoption().await.expect("runs"),
            late_copy().await.expect("runs"),
            late_unlock().await.expect("runs"),
        ] {
            assert!(
                result.caught(),
                "{} not caught: {:?}",
                result.name,
                result.found()
            );
        }
    }
}
