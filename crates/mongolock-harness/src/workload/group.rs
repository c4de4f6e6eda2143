//! Lock groups on the low-level API: a worker takes some members of the group pool with
//! `xlock` under one fresh lock id (all or nothing), holds them while renewing the group
//! itself with `renew(lock_id)`, and releases the whole group with `unlock(lock_id)`.
//!
//! There is no keeper: the holder keeps its own local deadline, as the low-level API asks:
//! the send time of its last renewal that renewed every member (at first, of its first
//! `xlock`) plus the TTL minus a margin of a tenth of the TTL. A renewal that renews fewer
//! members than it holds is a loss noticed then; the deadline passing is a loss noticed
//! then; a grant whose reply arrives after its own deadline is not believed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mongolock::{LockClient, LockDetails};
use mongolock_testkit::faults::proxy::{RequestFault, RequestRule, Requests};
use rand::Rng;

use super::{ClientCtl, Held, Target, Worker, lock, owner_label};
use crate::commands;
use crate::history::{ExtraFault, HolderLog, LetGo, LossKind, Mode, PauseLog, ReleaseResult};

/// [`ExtraFault::LateUnlock`] armed on a group being taken: the late delivery of its first
/// round's unlock, and the contender to send once the group is held again.
struct LateUnlock {
    contender: Option<Arc<ClientCtl>>,
    rule: RequestRule,
    /// The late copy has landed by then, at the latest.
    landed_by: Instant,
}

impl Worker {
    /// Takes some members of `pool` as one group with the low-level API, holds them
    /// (renewing the group itself), and releases the group with `unlock`.
    pub(super) async fn group(&mut self, locks: &LockClient, pool: &[String], number: u64) -> Held {
        let (low, high) = self.workload.group_size;
        let size = self.rng.random_range(low..=high).clamp(1, pool.len());
        let mut members: Vec<String> = pool.to_vec();
        while members.len() > size {
            let out = self.rng.random_range(0..members.len());
            members.remove(out);
        }
        // Members are taken in one order by every group, so two groups never wait on each
        // other in a cycle.
        members.sort();
        let invoked_at = Instant::now();
        let gives_up_at = invoked_at + self.workload.acquire_timeout;
        // Under [`ExtraFault::LateUnlock`] every round asks under one lock id, and the first
        // is given up after its first member, its unlock delivered late.
        let contender = lock(&self.ctl.late_unlock).take();
        let mut late_unlock = contender.map(|contender| self.arm_late_unlock(contender));
        let mut round = 0_u32;
        self.ctl.acquiring.store(true, Ordering::SeqCst);
        let mut taken = loop {
            round += 1;
            let lock_id = match late_unlock {
                Some(_) => format!("group-{}.{}.{number}", self.index, self.incarnation),
                None => format!("group-{}.{}.{number}.{round}", self.index, self.incarnation),
            };
            let give_up_early = late_unlock.is_some() && round == 1;
            match self
                .take_group(locks, &members, &lock_id, gives_up_at, give_up_early)
                .await
            {
                Ok(group) => break Some(group),
                Err(partial) => {
                    for log in partial {
                        self.recorder.holder(log);
                    }
                }
            }
            if Instant::now() >= gives_up_at {
                break None;
            }
            let backoff = self.rng.random_range(40..120);
            tokio::time::sleep(Duration::from_millis(backoff)).await;
        };
        self.ctl.acquiring.store(false, Ordering::SeqCst);
        self.recorder.attempt(taken.is_none(), false);
        if let Some(armed) = late_unlock.take() {
            self.late_unlock_ended(armed, taken.as_mut(), &members);
        }
        let Some(mut group) = taken else {
            return Held::Done;
        };
        self.ctl.holding.store(true, Ordering::SeqCst);
        let held = self.hold_group(locks, &mut group).await;
        self.ctl.holding.store(false, Ordering::SeqCst);
        for log in group.logs {
            self.recorder.holder(log);
        }
        held
    }

    /// Arms [`ExtraFault::LateUnlock`] on this client's proxy as a group is begun: its next
    /// unlock is held 0.8–2 s, its connection cut 20–300 ms after it left.
    fn arm_late_unlock(&mut self, contender: Option<Arc<ClientCtl>>) -> LateUnlock {
        let start = Instant::now();
        let hold = Duration::from_millis(self.rng.random_range(800..=2_000));
        let cut_after = Duration::from_millis(self.rng.random_range(20..=300));
        let rule = self.proxy.fault_requests(
            Requests::matching(commands::is_unlock).times(1),
            RequestFault::Late {
                hold,
                cut_after: Some(cut_after),
            },
        );
        let kind = ExtraFault::LateUnlock;
        // The unlock comes within the acquire's patience; it lands a hold later.
        let landed_by = start + self.workload.acquire_timeout + hold;
        (self.recorder).fault(kind.recorded_as(), Some(self.index), start, landed_by);
        LateUnlock {
            contender,
            rule,
            landed_by,
        }
    }

    /// After a group taken under [`ExtraFault::LateUnlock`]: a group held again holds on until
    /// the late unlock has landed and a TTL more, and the contender is sent for its first
    /// member.
    fn late_unlock_ended(
        &mut self,
        armed: LateUnlock,
        taken: Option<&mut Group>,
        members: &[String],
    ) {
        let how = match (armed.rule.applied(), taken) {
            (0, _) => "no unlock delivered late",
            (_, None) => "not granted again",
            (_, Some(group)) => {
                group.hold_on_until = Some(armed.landed_by + group.ttl);
                if let (Some(contender), Some(first)) = (&armed.contender, members.first()) {
                    contender.go_for_next(Target::Group(vec![first.clone()]));
                }
                "group held again under its lock id"
            }
        };
        self.recorder.extra(ExtraFault::LateUnlock, self.index, how);
    }

    /// One round of taking a group: `xlock` on each member in order under `lock_id`. All
    /// taken: the group. Otherwise (contended, an error, an unknown outcome, the local
    /// deadline or the patience passed, or `give_up_early` once the first member is
    /// granted) the lock id is unlocked and given up, and the logs of the members it held
    /// (released at the unlock call) are returned.
    async fn take_group(
        &mut self,
        locks: &LockClient,
        members: &[String],
        lock_id: &str,
        gives_up_at: Instant,
        give_up_early: bool,
    ) -> Result<Group, Vec<HolderLog>> {
        let ttl = self.workload.ttl;
        let details = LockDetails::default()
            .ttl(ttl)
            .owner(owner_label(self.index, self.incarnation));
        let group_id = self.recorder.next_id();
        let mut group = Group {
            lock_id: lock_id.to_owned(),
            deadline: None,
            ttl,
            margin: ttl / 10,
            logs: Vec::new(),
            hold_on_until: None,
        };
        let mut complete = true;
        for resource in members {
            if group.deadline.is_some_and(|d| Instant::now() >= d) {
                group.notice_all(LossKind::Deadline);
                complete = false;
                break;
            }
            let limit = group.deadline.map_or(gives_up_at, |d| d.min(gives_up_at));
            let sent = Instant::now();
            let reply = tokio::time::timeout_at(
                limit.into(),
                locks.xlock(resource, lock_id, details.clone()),
            )
            .await;
            let now = Instant::now();
            let grant = match reply {
                // A grant from before (an unlock of this lock id that did not land): its lease
                // ends sooner than this round would think; the unlock below ends it.
                Ok(Ok(grant)) if !grant.is_new() => {
                    complete = false;
                    break;
                }
                Ok(Ok(grant)) => grant,
                Err(_) if group.deadline.is_some_and(|d| now >= d) => {
                    group.notice_all(LossKind::Deadline);
                    complete = false;
                    break;
                }
                _ => {
                    complete = false;
                    break;
                }
            };
            let deadline = group.deadline.unwrap_or(sent + ttl - group.margin);
            if now >= deadline {
                // The reply came after the lease's own deadline (the first member's reply was
                // slow, or a later one's came with the timer): not trusted, never believed,
                // as the handles do; the unlock below ends it.
                group.notice_all(LossKind::Deadline);
                complete = false;
                break;
            }
            group.deadline = Some(deadline);
            let id = self.recorder.next_id();
            group.logs.push(HolderLog {
                lock_id: lock_id.to_owned(),
                group: Some(group_id),
                invoked_at: sent,
                attempt_sent_at: sent,
                granted_at: now,
                ttl: Some(ttl),
                max_deadline: group.deadline,
                ..HolderLog::granted(id, self.index, Mode::Group, resource, grant.fencing_token())
            });
            self.mirror(&group.logs);
            if give_up_early {
                complete = false;
                break;
            }
        }
        attach_acquiring_pauses(&self.ctl, &mut group.logs);
        if complete && group.deadline.is_some_and(|d| Instant::now() < d) {
            self.mirror(&[]);
            return Ok(group);
        }
        if complete {
            group.notice_all(LossKind::Deadline);
        }
        group.stop_believing();
        self.mirror(&group.logs);
        group.unlock(locks).await;
        self.mirror(&[]);
        Err(group.logs)
    }

    /// Keeps a copy of the logs of a group being taken where a kill while acquiring finds
    /// them (the worker, and the logs with it, are dropped).
    pub(super) fn mirror(&self, logs: &[HolderLog]) {
        let mut partial = self.ctl.partial.lock().unwrap_or_else(|e| e.into_inner());
        partial.clear();
        partial.extend_from_slice(logs);
    }

    /// The steps of work under a group, renewing it, then `unlock` (or the death).
    async fn hold_group(&mut self, locks: &LockClient, group: &mut Group) -> Held {
        let steps = self
            .rng
            .random_range(self.workload.steps.0..=self.workload.steps.1);
        let every = group.ttl / 3;
        let mut next_renewal = group.logs[0].attempt_sent_at + every;
        'steps: for step in 0.. {
            let held_on = group.hold_on_until.is_none_or(|t| Instant::now() >= t);
            if step >= steps && held_on {
                break;
            }
            let deadline_before = group.deadline();
            if let Some((start, end)) = self.take_pause() {
                for log in &mut group.logs {
                    log.pauses.push(PauseLog {
                        start,
                        end,
                        deadline_before,
                        lost_on_resume: end >= deadline_before,
                    });
                }
            }
            if self.ctl.kill.swap(false, Ordering::SeqCst) {
                let now = Instant::now();
                for log in &mut group.logs {
                    log.killed_at = Some(now);
                }
                return Held::Killed;
            }
            // Check, then write at once.
            if Instant::now() >= group.deadline() {
                group.notice_all(LossKind::Deadline);
                break;
            }
            for log in &mut group.logs {
                self.write(log);
            }
            let step_end = self.step_end();
            loop {
                let now = Instant::now();
                if now >= group.deadline() {
                    group.notice_all(LossKind::Deadline);
                    break 'steps;
                }
                if now >= step_end {
                    break;
                }
                if now >= next_renewal {
                    match group.renew(locks).await {
                        Renewal::All(sent) => next_renewal = sent + every,
                        Renewal::Failed => next_renewal = Instant::now() + every / 5,
                        Renewal::Lost(kind) => {
                            group.notice_all(kind);
                            break 'steps;
                        }
                    }
                    continue;
                }
                let tick = (step_end - now)
                    .min(next_renewal.saturating_duration_since(now))
                    .min(Duration::from_millis(10));
                tokio::time::sleep(tick).await;
            }
            if self.ctl.stop.load(Ordering::SeqCst) {
                break;
            }
        }
        if Instant::now() >= group.deadline() {
            group.notice_all(LossKind::Deadline);
        }
        group.release(locks).await;
        Held::Done
    }
}

/// Adds the pauses the client took while acquiring (and empties their list) to the logs
/// of a group's members it held then, each against the member's local deadline.
pub(super) fn attach_acquiring_pauses(ctl: &ClientCtl, logs: &mut [HolderLog]) {
    let pauses: Vec<(Instant, Instant)> = ctl
        .acquiring_pauses
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
        .collect();
    for log in logs {
        let Some(deadline) = log.max_deadline else {
            continue;
        };
        for &(start, end) in pauses.iter().filter(|p| p.1 > log.granted_at) {
            log.pauses.push(PauseLog {
                start,
                end,
                deadline_before: deadline,
                lost_on_resume: end >= deadline,
            });
        }
    }
}

/// A group held with the low-level API: its lock id, its members' logs and its local
/// deadline, which its holder keeps itself (there is no keeper).
struct Group {
    lock_id: String,
    /// Send time of the last renewal that renewed every member (at first, of the first
    /// `xlock`) + TTL − margin. `None` until a member is granted.
    deadline: Option<Instant>,
    ttl: Duration,
    margin: Duration,
    logs: Vec<HolderLog>,
    /// Hold on at least until then, unless lost ([`ExtraFault::LateUnlock`]).
    hold_on_until: Option<Instant>,
}

/// What one renewal of a group found.
enum Renewal {
    /// Every member renewed by the renewal sent then.
    All(Instant),
    /// No answer (an error): nothing renewed, as far as the holder knows.
    Failed,
    /// Fewer members renewed than held (revoked), or the deadline passed while waiting.
    Lost(LossKind),
}

impl Group {
    fn deadline(&self) -> Instant {
        self.deadline.unwrap_or_else(Instant::now)
    }

    /// Renews the group by lock id, waiting no later than the local deadline.
    async fn renew(&mut self, locks: &LockClient) -> Renewal {
        let sent = Instant::now();
        let deadline = self.deadline();
        let reply =
            tokio::time::timeout_at(deadline.into(), locks.renew(&self.lock_id, self.ttl)).await;
        match reply {
            Err(_) => Renewal::Lost(LossKind::Deadline),
            Ok(Ok(n)) if n as usize >= self.logs.len() => {
                if Instant::now() >= deadline {
                    // The reply came after the deadline: it proves nothing.
                    return Renewal::Lost(LossKind::Deadline);
                }
                let next = sent + self.ttl - self.margin;
                self.deadline = Some(next.max(deadline));
                for log in &mut self.logs {
                    log.max_deadline = self.deadline;
                }
                Renewal::All(sent)
            }
            Ok(Ok(_)) => Renewal::Lost(LossKind::Revoked),
            Ok(Err(_)) => Renewal::Failed,
        }
    }

    /// Records a loss noticed now by every member (the first notice stays).
    fn notice_all(&mut self, kind: LossKind) {
        let now = Instant::now();
        for log in &mut self.logs {
            log.notice(now, kind);
        }
    }

    /// Stops believing, then releases the whole group with `unlock(lock_id)`.
    async fn release(&mut self, locks: &LockClient) {
        self.stop_believing();
        self.unlock(locks).await;
    }

    /// Stops believing: the release call begins.
    fn stop_believing(&mut self) {
        let now = Instant::now();
        for log in &mut self.logs {
            log.released_at = Some(now);
        }
    }

    /// Releases the whole group with `unlock(lock_id)`.
    async fn unlock(&mut self, locks: &LockClient) {
        let unlocked = locks.unlock(&self.lock_id).await;
        for log in &mut self.logs {
            log.let_go = Some(LetGo::Unlocked);
            log.release = Some(if unlocked.is_ok() {
                ReleaseResult::Ok
            } else {
                ReleaseResult::Failed
            });
        }
    }
}
