//! Many tasks, on several connection pools, fight over a few resources with exclusive locks
//! and capped shared locks (each resource has one cap that every caller uses). Some holders
//! take a TTL and crash; the emulator's clock is moved past their TTL so that others take
//! over, and the crashed holders come back later with a stale write.
//!
//! # The guarded record
//!
//! Every resource has a record in memory that stands for the storage the lock protects. It
//! is fencing-aware and keeps its full history:
//!
//! - an exclusive holder *writes* with its token; the write is rejected if the token is lower
//!   than the highest token the record has accepted from anybody;
//! - a shared holder *reads* with its token; the read is rejected if the token is lower than
//!   the highest token the record has accepted from an exclusive holder (readers do not fence
//!   each other, so concurrent readers may come in any order).
//!
//! Each holder accesses the record when it enters (right after the grant) and, unless it
//! crashes, again when it exits (right before the release). All events take a ticket from one
//! global logical counter, so "before" below means "with a lower ticket", which implies
//! before in real time. A holder's interval is `[enter, exit]`; a crashed holder's is
//! `[enter, the ticket taken just before the clock move that ended its lease]` (clock moves
//! wait until no acquire is between its request and its `enter`, so this end is exact).
//!
//! # Challenges: why a double grant is caught by construction
//!
//! When an attempt starts, it *pins* every holder inside the record that has not begun to
//! leave; a pinned holder does not exit (nor release) before the attempt has completed, and a
//! crashed holder's lease does not end (the clock does not move) while an attempt is in
//! flight. So the server decides a pinned attempt while all its pinned holders hold their
//! leases, and it **must refuse** it when it pinned an exclusive holder, when it is exclusive
//! and pinned any holder, or when it is shared and pinned `cap` shared holders.
//!
//! A holder (that does not crash) stays inside until it has been challenged: an exclusive
//! holder until an exclusive and a shared attempt pinned it; a shared holder until an
//! exclusive attempt and a shared attempt that pinned `cap` shared holders (itself included)
//! did. Tasks not holding anything keep attempting, so every hold meets these challengers,
//! and a library that granted any of them would be caught on the spot, whatever the timing.
//! (Only when every task has had its quota of grants do the last holders leave unchallenged.)
//!
//! # What is checked
//!
//! During the run, failing at once:
//! - every must-refuse attempt is refused (`Contended`), and nothing else than `Granted` or
//!   `Contended` comes back (lock ids are fresh per attempt);
//! - at `enter`, the record sees no holder inside if the newcomer is exclusive, and no
//!   exclusive holder and fewer than `cap` shared holders if it is shared (a crashed holder
//!   counts as inside until the clock moves past its TTL);
//! - every access of a live holder is accepted by the record; a crashed holder's late access,
//!   made after its lease was ended by the clock and someone else took the resource over
//!   (anybody, for a crashed exclusive holder; an exclusive holder, for a crashed shared
//!   one), is rejected; releasing a live grant finds it.
//!
//! After the run, from the histories, for every resource:
//! 1. the accepted accesses obey the record's rule in ticket order, every rejected access is a
//!    late one of a crashed holder after its lease ended, and every live holder's accesses
//!    were accepted;
//! 2. no exclusive interval overlaps any other interval (exclusive or shared);
//! 3. at no ticket are more than `cap` shared intervals open;
//! 4. tokens are unique, and a grant whose acquire completed before another's acquire was sent
//!    has the lower token; every holder named in a refusal had asked before the refusal came;
//!
//! and, so that the run cannot silently test less: every resource had challenged exclusive and
//! shared holds, its shared holders reached the cap, every kind of must-refuse attempt
//! happened, and (with the clock) holders crashed, were taken over after their TTL, and had
//! late writes rejected. In the end no lock is left but expired ones of crashed holders.
//!
//! `exclusive_and_capped_shared_holders_are_fenced` runs without clock moves (also on a real
//! server); `emulator_only_takeovers_after_expiry_are_fenced` adds the crashes.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Env, emulator_env, env};
use mongolock::{AcquireRequest, Attempt, Filter, LockClient, LockDetails, LockKind};
use tokio::sync::RwLock;

/// The resources and their caps on shared locks.
const RESOURCES: [(&str, u32); 3] = [("res-a", 2), ("res-b", 3), ("res-c", 2)];
/// More tasks than the most holders the resources admit at once (7), so that somebody is
/// always free to challenge.
const TASKS: usize = 10;
/// Connection pools shared among the tasks.
const POOLS: usize = 3;
/// Grants each task must get before the run may end.
const GRANTS_PER_TASK: usize = 8;
/// With crashes, every `CRASH_EVERY`th grant of a task goes to a holder that crashes.
const CRASH_EVERY: usize = 4;
/// Upper bounds, so that nothing can loop forever.
const MAX_ATTEMPTS_PER_TASK: usize = 20_000;
const MAX_POLLS: usize = 20_000;
const POLL: Duration = Duration::from_millis(1);
/// The TTL of a holder that crashes, and how far the clock moves each time.
const CRASH_TTL: Duration = Duration::from_secs(600);
const CLOCK_STEP: Duration = Duration::from_secs(601);
/// The TTL of some holders that do not crash: far beyond all clock moves together.
const LONG_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_and_capped_shared_holders_are_fenced() {
    let env = env("contention").await;
    run(&env, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_only_takeovers_after_expiry_are_fenced() {
    let Some(env) = emulator_env("contention_expiry").await else {
        return;
    };
    run(&env, true).await;
}

/// One access to the guarded record.
#[derive(Debug, Clone)]
struct Access {
    ticket: u64,
    token: i64,
    lock_id: String,
    kind: LockKind,
    late: bool,
}

/// One grant, as the test saw it.
#[derive(Debug, Clone)]
struct GrantLog {
    lock_id: String,
    kind: LockKind,
    token: i64,
    /// Taken before the acquire was sent.
    start: u64,
    /// Taken after the acquire came back; also the `enter` ticket.
    enter: u64,
    /// `exit`, or for a crashed holder the clock move that ended its lease.
    end: Option<u64>,
    crashed: bool,
    challenged: bool,
    late_accepted: Option<bool>,
}

/// One acquire attempt.
#[derive(Debug, Clone)]
struct AttemptLog {
    lock_id: String,
    kind: LockKind,
    start: u64,
    done: Option<u64>,
    pinned: Vec<String>,
    /// Why the server must refuse it, if it must.
    must_refuse: Option<Category>,
    granted: Option<i64>,
    /// The holders a refusal named.
    named: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Category {
    ExclusiveVsExclusive,
    SharedVsExclusive,
    ExclusiveVsShared,
    SharedOverCap,
}

/// A holder whose lease is live (for a crashed one: until the clock moves).
#[derive(Debug)]
struct Presence {
    grant: usize,
    kind: LockKind,
    crashed: bool,
    leaving: bool,
    /// Attempts in flight that pinned this holder.
    pins: u32,
    saw_exclusive: bool,
    saw_shared: bool,
    saw_full: bool,
}

/// The guarded record of one resource and the test's bookkeeping about it.
#[derive(Debug, Default)]
struct Ledger {
    accepted: Vec<Access>,
    rejected: Vec<Access>,
    max_token: i64,
    max_exclusive: i64,
    inside: HashMap<String, Presence>,
    grants: Vec<GrantLog>,
    attempts: Vec<AttemptLog>,
}

impl Ledger {
    /// The record's rule: a write (exclusive) is rejected below the highest token accepted,
    /// a read (shared) below the highest exclusive token accepted.
    fn access(
        &mut self,
        ticket: u64,
        token: i64,
        lock_id: &str,
        kind: LockKind,
        late: bool,
    ) -> bool {
        let floor = match kind {
            LockKind::Exclusive => self.max_token,
            LockKind::Shared => self.max_exclusive,
        };
        let access = Access {
            ticket,
            token,
            lock_id: lock_id.to_owned(),
            kind,
            late,
        };
        if token < floor {
            self.rejected.push(access);
            return false;
        }
        self.max_token = self.max_token.max(token);
        if kind == LockKind::Exclusive {
            self.max_exclusive = self.max_exclusive.max(token);
        }
        self.accepted.push(access);
        true
    }

    fn describe_inside(&self) -> String {
        let mut holders: Vec<String> = self
            .inside
            .iter()
            .map(|(id, p)| {
                let g = &self.grants[p.grant];
                let crashed = if p.crashed { " crashed" } else { "" };
                format!("{id} ({} token {}{crashed})", p.kind, g.token)
            })
            .collect();
        holders.sort();
        holders.join(", ")
    }
}

struct Resource {
    name: &'static str,
    cap: u32,
    ledger: Mutex<Ledger>,
}

/// Everything the tasks share.
struct Run {
    tickets: AtomicU64,
    resources: Vec<Resource>,
    finished: AtomicUsize,
    all_done: AtomicBool,
    failed: AtomicBool,
    failures: Mutex<Vec<String>>,
    /// Read: from an acquire's request to its `enter`. Write: a clock move.
    gate: RwLock<()>,
    clock_moves: AtomicUsize,
}

impl Run {
    fn new() -> Self {
        Run {
            tickets: AtomicU64::new(1),
            resources: RESOURCES
                .iter()
                .map(|&(name, cap)| Resource {
                    name,
                    cap,
                    ledger: Mutex::default(),
                })
                .collect(),
            finished: AtomicUsize::new(0),
            all_done: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            failures: Mutex::default(),
            gate: RwLock::new(()),
            clock_moves: AtomicUsize::new(0),
        }
    }

    fn ticket(&self) -> u64 {
        self.tickets.fetch_add(1, Ordering::SeqCst)
    }

    fn fail(&self, message: String) {
        self.failures.lock().unwrap().push(message);
        self.failed.store(true, Ordering::SeqCst);
    }

    fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    fn stopping(&self) -> bool {
        self.failed() || self.all_done.load(Ordering::SeqCst)
    }

    fn ledger(&self, r: usize) -> std::sync::MutexGuard<'_, Ledger> {
        self.resources[r].ledger.lock().unwrap()
    }

    /// Registers an attempt about to be sent: pins the holders inside that are not leaving.
    fn start_attempt(&self, r: usize, lock_id: &str, kind: LockKind) -> usize {
        let cap = self.resources[r].cap;
        let mut ledger = self.ledger(r);
        let start = self.ticket();
        let mut pinned = Vec::new();
        let (mut exclusive, mut shared) = (false, 0);
        for (id, presence) in ledger.inside.iter_mut() {
            if presence.leaving {
                continue;
            }
            if !presence.crashed {
                presence.pins += 1;
            }
            pinned.push(id.clone());
            match presence.kind {
                LockKind::Exclusive => exclusive = true,
                LockKind::Shared => shared += 1,
            }
        }
        let must_refuse = match kind {
            LockKind::Exclusive if exclusive => Some(Category::ExclusiveVsExclusive),
            LockKind::Exclusive if shared > 0 => Some(Category::ExclusiveVsShared),
            LockKind::Shared if exclusive => Some(Category::SharedVsExclusive),
            LockKind::Shared if shared >= cap => Some(Category::SharedOverCap),
            _ => None,
        };
        ledger.attempts.push(AttemptLog {
            lock_id: lock_id.to_owned(),
            kind,
            start,
            done: None,
            pinned,
            must_refuse,
            granted: None,
            named: Vec::new(),
        });
        ledger.attempts.len() - 1
    }

    /// Records how an attempt ended, unpins its holders and, for a grant, lets the new holder
    /// enter the record (checking who is inside, and accessing the record).
    fn finish_attempt(
        &self,
        r: usize,
        attempt: usize,
        outcome: Result<(i64, bool), Vec<String>>,
    ) -> Result<(), String> {
        let Resource { name, cap, .. } = self.resources[r];
        let mut ledger = self.ledger(r);
        let done = self.ticket();
        let log = ledger.attempts[attempt].clone();
        let full = log.must_refuse == Some(Category::SharedOverCap);
        for id in &log.pinned {
            let presence = ledger
                .inside
                .get_mut(id)
                .expect("a pinned holder stays inside until the attempt completes");
            if !presence.crashed {
                presence.pins -= 1;
            }
            match log.kind {
                LockKind::Exclusive => presence.saw_exclusive = true,
                LockKind::Shared => {
                    presence.saw_shared = true;
                    presence.saw_full |= full;
                }
            }
        }
        ledger.attempts[attempt].done = Some(done);
        let (token, crashing) = match outcome {
            Err(named) => {
                ledger.attempts[attempt].named = named;
                return Ok(());
            }
            Ok(granted) => granted,
        };
        ledger.attempts[attempt].granted = Some(token);
        let kind = log.kind;
        if let Some(why) = log.must_refuse {
            return Err(format!(
                "{name}: {kind} {} was granted (token {token}) although it must be refused \
                 ({why:?}): it pinned {:?}; inside: {}",
                log.lock_id,
                log.pinned,
                ledger.describe_inside()
            ));
        }
        let exclusive_inside = ledger
            .inside
            .values()
            .any(|p| p.kind == LockKind::Exclusive);
        let shared_inside = ledger
            .inside
            .values()
            .filter(|p| p.kind == LockKind::Shared)
            .count();
        let compatible = match kind {
            LockKind::Exclusive => ledger.inside.is_empty(),
            LockKind::Shared => !exclusive_inside && shared_inside < cap as usize,
        };
        if !compatible {
            return Err(format!(
                "{name}: {kind} {} (token {token}) entered while inside: {} (cap {cap})",
                log.lock_id,
                ledger.describe_inside()
            ));
        }
        ledger.grants.push(GrantLog {
            lock_id: log.lock_id.clone(),
            kind,
            token,
            start: log.start,
            enter: done,
            end: None,
            crashed: crashing,
            challenged: false,
            late_accepted: None,
        });
        let grant = ledger.grants.len() - 1;
        ledger.inside.insert(
            log.lock_id.clone(),
            Presence {
                grant,
                kind,
                crashed: crashing,
                leaving: false,
                pins: 0,
                saw_exclusive: false,
                saw_shared: false,
                saw_full: false,
            },
        );
        if !ledger.access(done, token, &log.lock_id, kind, false) {
            return Err(format!(
                "{name}: the record rejected the first access of live {kind} holder {} \
                 (token {token}; highest accepted {}, highest exclusive {})",
                log.lock_id, ledger.max_token, ledger.max_exclusive
            ));
        }
        Ok(())
    }

    /// Whether the holder has met all its challengers.
    fn challenged(&self, r: usize, lock_id: &str) -> bool {
        let ledger = self.ledger(r);
        let p = &ledger.inside[lock_id];
        p.saw_exclusive
            && match p.kind {
                LockKind::Exclusive => p.saw_shared,
                LockKind::Shared => p.saw_full,
            }
    }

    fn begin_leave(&self, r: usize, lock_id: &str) {
        self.ledger(r).inside.get_mut(lock_id).unwrap().leaving = true;
    }

    fn pins(&self, r: usize, lock_id: &str) -> u32 {
        self.ledger(r).inside[lock_id].pins
    }

    /// The holder's last access, then it leaves the record (its release follows).
    fn exit(&self, r: usize, lock_id: &str, challenged: bool) -> Result<(), String> {
        let name = self.resources[r].name;
        let mut ledger = self.ledger(r);
        let exit = self.ticket();
        let presence = ledger.inside.remove(lock_id).unwrap();
        let (token, kind) = {
            let g = &mut ledger.grants[presence.grant];
            g.end = Some(exit);
            g.challenged = challenged;
            (g.token, g.kind)
        };
        if !ledger.access(exit, token, lock_id, kind, false) {
            return Err(format!(
                "{name}: the record rejected the last access of live {kind} holder {lock_id} \
                 (token {token}; highest accepted {}, highest exclusive {})",
                ledger.max_token, ledger.max_exclusive
            ));
        }
        Ok(())
    }

    fn crashed_inside(&self) -> bool {
        (0..self.resources.len()).any(|r| self.ledger(r).inside.values().any(|p| p.crashed))
    }

    /// Moves the clock past every crashed holder's TTL, ending their leases. Holds the gate,
    /// so no acquire is between its request and its `enter`.
    async fn move_clock(&self, env: &Env) {
        let _gate = self.gate.write().await;
        let moved = self.ticket();
        env.advance(CLOCK_STEP);
        self.clock_moves.fetch_add(1, Ordering::SeqCst);
        for r in 0..self.resources.len() {
            let mut ledger = self.ledger(r);
            let crashed: Vec<String> = ledger
                .inside
                .iter()
                .filter(|(_, p)| p.crashed)
                .map(|(id, _)| id.clone())
                .collect();
            for id in crashed {
                let presence = ledger.inside.remove(&id).unwrap();
                ledger.grants[presence.grant].end = Some(moved);
            }
        }
    }

    /// A crashed holder comes back and accesses the record with its old token, once its lease
    /// has ended and someone it must yield to has entered since. `None`: not yet.
    fn late_access(&self, r: usize, lock_id: &str) -> Option<Result<(), String>> {
        let name = self.resources[r].name;
        let mut ledger = self.ledger(r);
        let index = ledger.grants.iter().position(|g| g.lock_id == lock_id)?;
        let crashed = ledger.grants[index].clone();
        let ended = crashed.end?;
        let taken_over = ledger.grants.iter().any(|g| {
            g.enter > ended
                && (crashed.kind == LockKind::Exclusive || g.kind == LockKind::Exclusive)
        });
        if !taken_over {
            return None;
        }
        let ticket = self.ticket();
        let accepted = ledger.access(ticket, crashed.token, lock_id, crashed.kind, true);
        ledger.grants[index].late_accepted = Some(accepted);
        Some(if accepted {
            Err(format!(
                "{name}: the late access of crashed {} holder {lock_id} (token {}) was accepted \
                 after it was taken over; highest accepted {}",
                crashed.kind, crashed.token, ledger.max_token
            ))
        } else {
            Ok(())
        })
    }
}

fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// One task: attempts, holds until challenged, releases; sometimes crashes instead. Returns
/// the crashed holders whose late access is still to come.
async fn worker(
    run: Arc<Run>,
    locks: LockClient,
    task: usize,
    crashes: bool,
) -> Vec<(usize, String)> {
    let mut rng = 0x9E37_79B9_7F4A_7C15_u64 ^ (task as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D);
    let mut granted = 0;
    let mut pending: Vec<(usize, String)> = Vec::new();
    for attempt in 1..=MAX_ATTEMPTS_PER_TASK {
        if run.stopping() {
            return pending;
        }
        let mut late_failure = None;
        pending.retain(|(r, id)| match run.late_access(*r, id) {
            None => true,
            Some(Ok(())) => false,
            Some(Err(e)) => {
                late_failure = Some(e);
                false
            }
        });
        if let Some(e) = late_failure {
            run.fail(e);
            return pending;
        }

        let r = (next(&mut rng) % RESOURCES.len() as u64) as usize;
        let Resource { name, cap, .. } = run.resources[r];
        // Readers join readers and keep writers out; asking for more writes keeps both kinds
        // of holders common.
        let kind = if !next(&mut rng).is_multiple_of(3) {
            LockKind::Exclusive
        } else {
            LockKind::Shared
        };
        let crashing =
            crashes && granted < GRANTS_PER_TASK && granted % CRASH_EVERY == CRASH_EVERY - 1;
        let lock_id = format!("t{task}-{attempt}");
        let details = if crashing {
            LockDetails::default().ttl(CRASH_TTL)
        } else if attempt % 2 == 0 {
            LockDetails::default().ttl(LONG_TTL)
        } else {
            LockDetails::default()
        };
        let request = match kind {
            LockKind::Exclusive => AcquireRequest::exclusive(name, &lock_id, details),
            LockKind::Shared => AcquireRequest::shared(name, &lock_id, details, Some(cap)),
        };

        let gate = run.gate.read().await;
        let index = run.start_attempt(r, &lock_id, kind);
        let outcome = match locks.acquire(&request).await {
            Ok(outcome) => outcome,
            Err(e) => {
                run.fail(format!("{name}: acquire by {lock_id} failed: {e:?}"));
                return pending;
            }
        };
        let grant = match outcome {
            Attempt::Granted(grant) => {
                let fields = (
                    grant.resource(),
                    grant.lock_id(),
                    grant.kind(),
                    grant.is_new(),
                );
                if fields != (name, lock_id.as_str(), kind, true) {
                    run.fail(format!("{name}: {lock_id} got a grant for {fields:?}"));
                    return pending;
                }
                let entered = run.finish_attempt(r, index, Ok((grant.fencing_token(), crashing)));
                if let Err(e) = entered {
                    run.fail(e);
                    return pending;
                }
                grant
            }
            Attempt::Contended(contention) => {
                let named = contention
                    .holders()
                    .iter()
                    .map(|h| h.lock_id().to_owned())
                    .collect();
                let result = run.finish_attempt(r, index, Err(named));
                drop(gate);
                if contention.resource() != name || contention.holder_count() == 0 {
                    run.fail(format!("{name}: odd refusal for {lock_id}: {contention:?}"));
                    return pending;
                }
                if let Err(e) = result {
                    run.fail(e);
                    return pending;
                }
                tokio::time::sleep(POLL * (1 + (next(&mut rng) % 3) as u32)).await;
                continue;
            }
            other => {
                run.fail(format!("{name}: {lock_id} got {other:?}"));
                return pending;
            }
        };
        drop(gate);

        granted += 1;
        if granted == GRANTS_PER_TASK && run.finished.fetch_add(1, Ordering::SeqCst) + 1 == TASKS {
            run.all_done.store(true, Ordering::SeqCst);
        }
        if crashing {
            // Never releases, never writes again while its lease lasts.
            pending.push((r, lock_id));
            continue;
        }

        let mut challenged = false;
        for _ in 0..MAX_POLLS {
            challenged = run.challenged(r, &lock_id);
            if challenged || run.stopping() {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        if !challenged && !run.stopping() {
            run.fail(format!("{name}: nobody challenged {kind} holder {lock_id}"));
            return pending;
        }
        run.begin_leave(r, &lock_id);
        for _ in 0..MAX_POLLS {
            if run.pins(r, &lock_id) == 0 || run.failed() {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        if run.pins(r, &lock_id) != 0 {
            if !run.failed() {
                run.fail(format!(
                    "{name}: attempts pinning {lock_id} never completed"
                ));
            }
            return pending;
        }
        if let Err(e) = run.exit(r, &lock_id, challenged) {
            run.fail(e);
            return pending;
        }
        match locks.release(&grant).await {
            Ok(true) => {}
            Ok(false) => {
                run.fail(format!(
                    "{name}: live {kind} lock {lock_id} was gone at release"
                ));
                return pending;
            }
            Err(e) => {
                run.fail(format!("{name}: release of {lock_id} failed: {e:?}"));
                return pending;
            }
        }
    }
    run.fail(format!("task {task} ran out of attempts"));
    pending
}

async fn run(env: &Env, crashes: bool) {
    let run = Arc::new(Run::new());
    let mut pools = vec![env.locks.clone()];
    for _ in 1..POOLS {
        pools.push(env.other_client().await);
    }
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| tokio::spawn(worker(run.clone(), pools[t % POOLS].clone(), t, crashes)))
        .collect();

    // The controller: ends crashed holders' leases by moving the clock.
    let controller = async {
        if !crashes {
            return;
        }
        for _ in 0..MAX_POLLS {
            if run.stopping() {
                return;
            }
            if run.crashed_inside() {
                run.move_clock(env).await;
            }
            tokio::time::sleep(POLL * 3).await;
        }
        run.fail("the controller ran out of rounds".to_owned());
    };
    let joined = async {
        let mut pending = Vec::new();
        for task in tasks {
            pending.extend(task.await.expect("task"));
        }
        pending
    };
    let ((), pending) = tokio::join!(controller, joined);
    let failures = run.failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "{failures:#?}");

    // The last crashed holders: end their leases, then they come back.
    if run.crashed_inside() {
        run.move_clock(env).await;
    }
    for (r, id) in &pending {
        if let Some(Err(e)) = run.late_access(*r, id) {
            panic!("{e}");
        }
    }
    let moves = run.clock_moves.load(Ordering::SeqCst) as u32;
    assert!(
        CLOCK_STEP * moves < LONG_TTL,
        "long-TTL holders might have expired"
    );

    let mut crashed = Vec::new();
    let mut counts: HashMap<Category, usize> = HashMap::new();
    let (mut late_rejected, mut takeovers) = (0, 0);
    for resource in &run.resources {
        let ledger = resource.ledger.lock().unwrap();
        let stats = check_history(resource, &ledger);
        eprintln!("{}: {stats:?}", resource.name);
        for attempt in &ledger.attempts {
            if let Some(category) = attempt.must_refuse {
                *counts.entry(category).or_default() += 1;
            }
        }
        late_rejected += ledger
            .grants
            .iter()
            .filter(|g| g.late_accepted == Some(false))
            .count();
        takeovers += stats.takeovers;
        crashed.extend(
            ledger
                .grants
                .iter()
                .filter(|g| g.crashed)
                .map(|g| g.lock_id.clone()),
        );
    }
    eprintln!(
        "must-refuse attempts {counts:?}; {} crashed, {takeovers} taken over, {late_rejected} \
         late accesses rejected, {moves} clock moves",
        crashed.len()
    );
    for category in [
        Category::ExclusiveVsExclusive,
        Category::SharedVsExclusive,
        Category::ExclusiveVsShared,
        Category::SharedOverCap,
    ] {
        assert!(
            counts.get(&category).copied().unwrap_or(0) > 0,
            "no {category:?} attempt"
        );
    }
    if crashes {
        assert!(!crashed.is_empty() && takeovers > 0 && late_rejected > 0);
    }

    // Everything released; only expired locks of crashed holders may remain.
    let left = env.locks.status(&Filter::default()).await.expect("status");
    for lock in &left {
        assert!(
            lock.is_expired() && crashed.iter().any(|id| id == lock.lock_id()),
            "left behind: {lock:?}"
        );
    }
}

/// What one resource's run covered (printed; the coverage checks read some of it).
#[derive(Debug, Default)]
#[allow(dead_code)]
struct Stats {
    exclusive: usize,
    shared: usize,
    challenged: usize,
    crashed: usize,
    takeovers: usize,
    max_shared: u32,
    attempts: usize,
}

/// Checks 1-4 of the module doc on one resource's history, and what the run covered.
fn check_history(resource: &Resource, ledger: &Ledger) -> Stats {
    let Resource { name, cap, .. } = *resource;
    let grants = &ledger.grants;
    let by_id: HashMap<&str, &GrantLog> = grants.iter().map(|g| (g.lock_id.as_str(), g)).collect();
    let end = |g: &GrantLog| {
        g.end
            .unwrap_or_else(|| panic!("{name}: {} never ended", g.lock_id))
    };

    // 1. The record's history.
    let (mut highest, mut highest_exclusive) = (i64::MIN, i64::MIN);
    let mut last_ticket = 0;
    for access in &ledger.accepted {
        assert!(access.ticket > last_ticket, "{name}: history out of order");
        last_ticket = access.ticket;
        let floor = match access.kind {
            LockKind::Exclusive => highest,
            LockKind::Shared => highest_exclusive,
        };
        assert!(
            access.token >= floor,
            "{name}: accepted below the fence: {access:?}"
        );
        highest = highest.max(access.token);
        if access.kind == LockKind::Exclusive {
            highest_exclusive = highest_exclusive.max(access.token);
        }
        let g = by_id[access.lock_id.as_str()];
        assert!(
            !access.late && g.enter <= access.ticket && access.ticket <= end(g),
            "{name}: accepted access outside its holder's lease: {access:?} {g:?}"
        );
    }
    for access in &ledger.rejected {
        let g = by_id[access.lock_id.as_str()];
        assert!(
            access.late && g.crashed && access.ticket > end(g),
            "{name}: rejected an access of a live holder: {access:?} {g:?}"
        );
    }
    for g in grants {
        let accesses = ledger
            .accepted
            .iter()
            .filter(|a| a.lock_id == g.lock_id)
            .count();
        let expected = if g.crashed { 1 } else { 2 };
        assert_eq!(accesses, expected, "{name}: accesses of {g:?}");
    }

    // 2. No exclusive interval overlaps another.
    for (i, a) in grants.iter().enumerate() {
        for b in &grants[i + 1..] {
            if a.kind == LockKind::Exclusive || b.kind == LockKind::Exclusive {
                assert!(
                    end(a) < b.enter || end(b) < a.enter,
                    "{name}: overlapping holders {a:?} and {b:?}"
                );
            }
        }
    }

    // 3. Never more than `cap` shared holders.
    let mut events: Vec<(u64, i32)> = grants
        .iter()
        .filter(|g| g.kind == LockKind::Shared)
        .flat_map(|g| [(g.enter, 1), (end(g), -1)])
        .collect();
    events.sort();
    let (mut open, mut max_shared) = (0, 0);
    for (ticket, delta) in events {
        open += delta;
        assert!(
            open <= cap as i32,
            "{name}: {open} shared holders at ticket {ticket}"
        );
        max_shared = max_shared.max(open as u32);
    }

    // 4. Tokens grow in the order of grants; refusals name real holders.
    for a in grants {
        for b in grants {
            if a.lock_id != b.lock_id {
                assert_ne!(a.token, b.token, "{name}: one token twice: {a:?} {b:?}");
            }
            if a.enter < b.start {
                assert!(
                    a.token < b.token,
                    "{name}: token went down: {a:?} then {b:?}"
                );
            }
        }
    }
    for attempt in &ledger.attempts {
        let done = attempt.done.expect("every attempt completed");
        assert!(
            attempt.must_refuse.is_none() || attempt.granted.is_none(),
            "{name}: must-refuse attempt granted: {attempt:?}"
        );
        for named in &attempt.named {
            let g = by_id.get(named.as_str()).unwrap_or_else(|| {
                panic!(
                    "{name}: refusal of {} named unknown {named}",
                    attempt.lock_id
                )
            });
            assert!(
                g.start < done,
                "{name}: {attempt:?} named {g:?} before it asked"
            );
        }
    }

    // Coverage.
    let count = |kind| {
        grants
            .iter()
            .filter(|g| g.kind == kind && g.challenged)
            .count()
    };
    let stats = Stats {
        exclusive: count(LockKind::Exclusive),
        shared: count(LockKind::Shared),
        challenged: grants.iter().filter(|g| g.challenged).count(),
        crashed: grants.iter().filter(|g| g.crashed).count(),
        takeovers: grants
            .iter()
            .filter(|c| c.crashed && grants.iter().any(|g| g.enter > end(c)))
            .count(),
        max_shared,
        attempts: ledger.attempts.len(),
    };
    assert!(
        stats.exclusive > 0 && stats.shared > 0 && max_shared == cap,
        "{name}: the run covered too little: {stats:?}"
    );
    stats
}
