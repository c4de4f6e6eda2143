//! Conformance: the model's server step against the library's real commands on the emulator.
//!
//! For generated lock documents and requests, each case seeds the document straight into the
//! collection (the format of `mongolock/src/schema.rs`), runs the request through the
//! library's public API, and runs the model's [`Server::execute`] on the same document. Both
//! must reach the same document, projected to the model's fields (the exclusive entry's lock
//! id, nonce, token, keeper, expiry and `afterUnlocks`; the fence; the live tombstones of the
//! case's nonces; the live places of the line, with their lock id, `until`, kind and call), and
//! the same reply class. Requests: an acquire (`acquire` with a chosen
//! nonce), a withdrawal (`release_attempt`), a release of a grant (`release`, with the keeper
//! the grant names), a renewal by lock id (`renew`), `unlock` and `force_release`.
//!
//! `afterUnlocks`: the client's `unlock` of lock id 1 is made doubted first (a write concern
//! error: it ran, its outcome is unknown, the library's repeat is answered), so its
//! attempts of lock id 1 carry that call's id, learnt from a grant's entry; seeded entries
//! name it or other ids. An `unlock` in a case is a new call, whose id no seeded entry
//! names: the model's is a fresh one. A second test delays an `unlock` past its client's
//! time limit, has the client granted meanwhile, and compares what the late copy leaves.
//!
//! Times: a model tick is a second; the model's `now` is 10 when the command runs, and
//! expiries are read back rounded to the second. A step back of the server's clock is a
//! document whose times are ahead of `now`: some cases hold an entry let go of within its
//! minimum hold whose `createdAt` is after `now` (the clock stepped back before its grant
//! since), mostly of the lock id the request names, which the time-only "held" of before
//! d44da17 reads as held (the mutant [`HELD_BY_TIME`], told apart on acquires, renewals by
//! lock id, force releases and waiting attempts). A force release marks the entry it keeps
//! for its lock-delay (`letGoAt`, read as the model's `let_go`): the mutant
//! [`FORCE_UNMARKED`], the step of control (ag), leaves it unmarked.

mod common;
use common::{Captured, for_call};

use std::time::Duration;

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Document, doc};
use mongolock::{AcquireRequest, Attempt, Grant, LockClient, LockDetails, Nonce};
use mongolock_model::server::{
    Bugs, Doc, Entry, Kind, Place, Reply, Request, Server, Time, UnlockOp, Unlocks,
};
use mongolock_testkit::TestServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The model's clock when a command runs.
const NOW: Time = 10;
/// The TTL of every acquire, in ticks (seconds).
const TTL: Time = 3;
/// Stored tokens are the model's plus this: far above the clock's floor on tokens
/// (`$$NOW` in microseconds, which the model leaves out), so that a grant's token is the
/// fence's next, as in the model.
static BASE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();

fn base() -> i64 {
    *BASE.get().expect("set at the start")
}

/// Sets [`BASE`] from `locks`'s server, an hour of its clock ahead (once for the tests of
/// this file, whose emulators start together).
async fn set_base(locks: &LockClient) {
    let floor = server_now(locks).await.timestamp_millis() * 1000;
    let _ = BASE.set(floor + 3_600_000_000);
}

/// The resource every case uses.
const RESOURCE: &str = "r";

fn lock_id(id: u8) -> String {
    format!("L{id}")
}

fn keeper(id: u8) -> String {
    format!("k{id}")
}

/// Real nonces for the model's nonces 0..3, learnt from the grants of attempts made with
/// them (a `Nonce` does not show its value).
struct Nonces {
    requests: Vec<Nonce>,
    ids: Vec<ObjectId>,
}

impl Nonces {
    async fn learn(locks: &LockClient) -> Nonces {
        let mut requests = vec![];
        let mut ids = vec![];
        for i in 0..3 {
            let nonce = Nonce::new();
            let resource = format!("calibration-{i}");
            let request =
                AcquireRequest::exclusive(&resource, "calibration", LockDetails::default())
                    .nonce(nonce);
            assert!(matches!(
                locks.acquire(&request).await.unwrap(),
                Attempt::Granted(_)
            ));
            let stored = (locks.collection())
                .find_one(doc! { "_id": &resource })
                .await
                .unwrap()
                .expect("the grant's document");
            let id = stored
                .get_document("exclusive")
                .unwrap()
                .get_object_id("nonce")
                .unwrap();
            requests.push(nonce);
            ids.push(id);
        }
        Nonces { requests, ids }
    }

    fn model(&self, id: &ObjectId) -> Option<u8> {
        self.ids
            .iter()
            .position(|known| known == id)
            .map(|i| i as u8)
    }
}

/// Real ids of the model's `unlock` calls (operation ids), by index: some random, some
/// learnt from the entries of grants made while the call was doubted.
struct Ops {
    ids: Vec<ObjectId>,
}

impl Ops {
    fn model(&self, id: &ObjectId) -> UnlockOp {
        (self.ids.iter().position(|known| known == id)).expect("an unlock of the case") as UnlockOp
    }
}

/// The `afterUnlocks` of a stored entry, as ids.
fn after_unlocks(entry: &Document) -> Vec<ObjectId> {
    match entry.get("afterUnlocks") {
        Some(Bson::Array(ids)) => ids.iter().map(|id| id.as_object_id().unwrap()).collect(),
        _ => vec![],
    }
}

/// The exclusive entry stored for `resource`.
async fn stored_entry(locks: &LockClient, resource: &str) -> Document {
    let stored = (locks.collection())
        .find_one(doc! { "_id": resource })
        .await
        .unwrap()
        .expect("the grant's document");
    stored.get_document("exclusive").unwrap().clone()
}

/// The document `doc` of `resource` as stored, with times relative to the server's `now`.
fn stored(resource: &str, doc: &Doc, nonces: &Nonces, ops: &Ops, now: DateTime) -> Document {
    let at = |t: Time| {
        DateTime::from_millis(now.timestamp_millis() + (i64::from(t) - i64::from(NOW)) * 1000)
    };
    let write = |e: &Entry| {
        let mut entry = doc! {
            "lockId": lock_id(e.lock_id),
            "nonce": nonces.ids[e.nonce as usize],
            "owner": Bson::Null,
            "host": "h",
            "token": base() + i64::from(e.token),
            "createdAt": at(NOW.saturating_sub(1)),
            "expiresAt": e.expires_at.map_or(Bson::Null, |t| Bson::DateTime(at(t))),
            "ttlMs": e.expires_at.map_or(Bson::Null, |_| Bson::Int64(i64::from(TTL) * 1000)),
        };
        if let Some(k) = e.keeper {
            entry.insert("keeper", keeper(k));
        }
        if doc.shared.contains(e) {
            entry.insert("kind", "shared");
        }
        if !e.after_unlocks.is_empty() {
            let ids: Vec<Bson> = (e.after_unlocks.ops())
                .map(|op| Bson::ObjectId(ops.ids[op as usize]))
                .collect();
            entry.insert("afterUnlocks", ids);
        }
        if e.adopted {
            entry.insert("adopted", true);
        }
        if e.delay > 0 {
            entry.insert("delayMs", i64::from(e.delay) * 1000);
        }
        if e.min_hold > 0 {
            entry.insert("createdAt", at(e.created_at));
            entry.insert("minHoldMs", i64::from(e.min_hold) * 1000);
        }
        if e.let_go {
            // Let go of at or after its grant, by the clock of the time (a clock stepped back
            // since reads a `now` before both).
            entry.insert("letGoAt", at(e.created_at.max(NOW.saturating_sub(1))));
        }
        Bson::Document(entry)
    };
    let exclusive = doc.entry.as_ref().map_or(Bson::Null, write);
    let shared: Vec<Bson> = doc.shared.iter().map(write).collect();
    // Live for ten minutes, as a withdrawal leaves it (five at least).
    let until = DateTime::from_millis(now.timestamp_millis() + 600_000);
    let released: Vec<Bson> = (doc.tombstones.iter())
        .map(|&n| {
            Bson::Document(doc! {
                "nonce": nonces.ids[n as usize],
                "until": until,
            })
        })
        .collect();
    // The line: each place with its lock id, kind, `until` and call, if it names one (no
    // keeper: nobody is woken).
    let queue: Vec<Bson> = (doc.queue.iter())
        .map(|p| {
            let mut place = doc! {
                "lockId": lock_id(p.lock_id),
                "kind": if p.shared { "shared" } else { "exclusive" },
                "until": at(p.until),
            };
            if let Some(call) = p.call {
                place.insert("call", nonces.ids[call as usize]);
            }
            Bson::Document(place)
        })
        .collect();
    // `idleSince` as the write that left the document set it: null while an entry has no
    // TTL, else the latest end of its entries and tombstones. (A write that changes no entry
    // then leaves it as it is, and an `unlock`'s `nModified` counts what the model counts.)
    let ends: Vec<Option<Time>> = doc.entries().map(|e| e.expires_at).collect();
    let idle_since = if ends.is_empty() || ends.contains(&None) {
        Bson::Null
    } else {
        let latest = at(ends.iter().flatten().copied().max().expect("an entry"));
        Bson::DateTime(if doc.tombstones.is_empty() {
            latest
        } else {
            latest.max(until)
        })
    };
    doc! {
        "_id": resource,
        "mongolock": 1,
        "fence": base() + i64::from(doc.fence),
        "exclusive": exclusive,
        "shared": shared,
        "cap": doc.cap.map_or(Bson::Null, |c| Bson::Int32(i32::from(c))),
        "released": released,
        "queue": queue,
        "idleSince": idle_since,
    }
}

/// The stored document, projected to the model's fields, read at server time `now`.
fn project(stored: Option<Document>, nonces: &Nonces, ops: &Ops, now: DateTime) -> Doc {
    let Some(stored) = stored else {
        return Doc::default();
    };
    let tick = |d: &DateTime| {
        let ms = d.timestamp_millis() - now.timestamp_millis();
        (i64::from(NOW) + (ms as f64 / 1000.0).round() as i64) as Time
    };
    let fence = match stored.get("fence") {
        Some(Bson::Int64(f)) => (*f - base()) as u8,
        _ => 0,
    };
    let read = |e: &Document| {
        Entry {
            lock_id: e.get_str("lockId").unwrap()[1..].parse().unwrap(),
            nonce: nonces
                .model(&e.get_object_id("nonce").unwrap())
                .expect("a nonce of the case"),
            token: (e.get_i64("token").unwrap() - base()) as u8,
            keeper: e.get_str("keeper").ok().map(|k| match k.strip_prefix('k') {
                Some(n) => n.parse().unwrap(),
                // A handle's own keeper (the waiting variant's, captured).
                None => HANDLE_KEEPER,
            }),
            expires_at: e.get_datetime("expiresAt").ok().map(tick),
            after_unlocks: (after_unlocks(e).iter()).fold(Unlocks::NONE, |set, id| {
                set.union(Unlocks::of(ops.model(id)))
            }),
            adopted: e.get_bool("adopted").unwrap_or(false),
            // The model keeps `createdAt` only for an entry with a minimum hold.
            created_at: match e.get("minHoldMs") {
                Some(_) => tick(e.get_datetime("createdAt").unwrap()),
                None => 0,
            },
            delay: millis_to_ticks(e.get("delayMs")),
            min_hold: millis_to_ticks(e.get("minHoldMs")),
            let_go: e.get_datetime("letGoAt").is_ok(),
        }
    };
    let entry = match stored.get("exclusive") {
        Some(Bson::Document(e)) => Some(read(e)),
        _ => None,
    };
    let shared: Vec<Entry> = match stored.get("shared") {
        Some(Bson::Array(list)) => list
            .iter()
            .filter_map(|e| e.as_document())
            .map(read)
            .collect(),
        _ => vec![],
    };
    let cap = match stored.get("cap") {
        Some(Bson::Int32(c)) => Some(*c as u8),
        Some(Bson::Int64(c)) => Some(*c as u8),
        _ => None,
    };
    let mut tombstones: Vec<u8> = match stored.get("released") {
        Some(Bson::Array(list)) => (list.iter())
            .filter_map(|t| t.as_document())
            .filter(|t| t.get_datetime("until").is_ok_and(|until| *until > now))
            .filter_map(|t| nonces.model(&t.get_object_id("nonce").ok()?))
            .collect(),
        _ => vec![],
    };
    tombstones.sort();
    tombstones.dedup();
    // The live places of the line, in order (a lapsed place counts for nothing).
    let queue = match stored.get("queue") {
        Some(Bson::Array(list)) => (list.iter())
            .filter_map(|p| p.as_document())
            .filter(|p| p.get_datetime("until").is_ok_and(|until| *until > now))
            .map(|p| Place {
                lock_id: p.get_str("lockId").unwrap()[1..].parse().unwrap(),
                until: tick(p.get_datetime("until").unwrap()),
                shared: p.get_str("kind") == Ok("shared"),
                call: p
                    .get_object_id("call")
                    .ok()
                    .map(|call| nonces.model(&call).expect("a call of the case")),
            })
            .collect(),
        _ => vec![],
    };
    Doc {
        entry,
        shared,
        cap,
        fence,
        tombstones,
        queue,
    }
}

/// The model's keeper id for a handle's own keeper (a random id of its lock client).
const HANDLE_KEEPER: u8 = 7;

/// A request's name.
fn class_of(request: &Request) -> String {
    (format!("{request:?}").split(' ').next().unwrap()).to_owned()
}

/// A stored span of milliseconds (`delayMs`, `minHoldMs`) in ticks; missing: 0.
fn millis_to_ticks(value: Option<&Bson>) -> Time {
    match value {
        Some(Bson::Int32(ms)) => (*ms / 1000) as Time,
        Some(Bson::Int64(ms)) => (*ms / 1000) as Time,
        _ => 0,
    }
}

/// Server steps with a bug put back, each of which some case must tell from the library.
const MUTANTS: [(&str, Bugs); 10] = [
    (
        "a release that ignores the keeper",
        Bugs {
            no_keeper_match: true,
            ..NO_BUGS
        },
    ),
    (
        "a fence that restarts",
        Bugs {
            counter_reset: true,
            ..NO_BUGS
        },
    ),
    (
        "an answer that leaves its lock id's entry unmarked",
        Bugs {
            held_answer_unmarked: true,
            ..NO_BUGS
        },
    ),
    (
        "a retiring release that removes an adopted re-grant",
        Bugs {
            release_ignores_adopted: true,
            ..NO_BUGS
        },
    ),
    (
        "a release_attempt that drops the minimum hold",
        Bugs {
            withdraw_drops_hold: true,
            ..NO_BUGS
        },
    ),
    (
        "an acquire that takes an entry within its lock-delay for gone",
        Bugs {
            delay_ignored: true,
            ..NO_BUGS
        },
    ),
    (
        HELD_BY_TIME,
        Bugs {
            let_go_held: true,
            ..NO_BUGS
        },
    ),
    (
        "a force release that counts a delay from $$NOW alone, cutting a hold under way",
        Bugs {
            force_cuts_hold: true,
            ..NO_BUGS
        },
    ),
    (
        FORCE_UNMARKED,
        Bugs {
            force_leaves_unmarked: true,
            ..NO_BUGS
        },
    ),
    (
        "a renew(lock_id) that shortens a kept lease",
        Bugs {
            renew_by_id_shortens: true,
            ..NO_BUGS
        },
    ),
];

/// The mutant whose force release leaves the entry it keeps for its lock-delay unmarked
/// (before issue 40's fix: read as held again once the clock steps back by more than the
/// delay).
const FORCE_UNMARKED: &str = "a force release that leaves a delayed entry unmarked";

/// The mutant whose "held" is a time test only (before d44da17: a let-go entry read as held
/// once the clock stepped back before its grant).
const HELD_BY_TIME: &str = "held by time alone, a let-go entry held again after a step back";

/// Makes `e` an entry let go of within a minimum hold of `min_hold`, read at a clock that
/// stepped back before its grant since: `createdAt` (and the hold's end) after the command's
/// `now`. The old time-only test reads it as held (`createdAt + minHoldMs > now + minHoldMs`).
fn let_go_before_grant(e: &mut Entry, min_hold: Time) {
    e.min_hold = min_hold;
    e.created_at = NOW + 1;
    e.let_go = true;
    e.delay = min_hold;
    e.expires_at = Some(e.created_at + min_hold);
}

/// Whether `doc` holds an entry let go of and read before its grant (a stepped-back clock).
fn stepped_back(doc: &Doc) -> bool {
    doc.entries().any(|e| e.let_go && e.created_at > NOW)
}

const NO_BUGS: Bugs = Bugs {
    no_settle_releases: false,
    no_settle_withdrawals: false,
    no_retire_on_release: false,
    release_by_token_only: false,
    xlock_no_withdraw: false,
    keeper_by_lock_id: false,
    keeper_trusts_count: false,
    refusal_settles: false,
    no_keeper_match: false,
    counter_reset: false,
    long_deadline: false,
    release_ok_when_gone: false,
    unlock_spares_nothing: false,
    unlock_repeat_settles: false,
    held_answer_unmarked: false,
    release_ignores_adopted: false,
    withdraw_drops_hold: false,
    delay_ignored: false,
    purge_takes_let_go: false,
    release_attempt_not_owed: false,
    shared_ignores_cap: false,
    reader_beside_writer: false,
    writer_beside_readers: false,
    shared_release_takes_all: false,
    let_go_held: false,
    keeper_ignores_let_go: false,
    purge_by_lease_end: false,
    ttl_resets_fence: false,
    force_cuts_hold: false,
    unlock_limit_truncates: false,
    seal_ignored: false,
    force_leaves_unmarked: false,
    held_answer_leaves_line: false,
    line_jumper: false,
    line_removal_by_lock_id: false,
    adoption_by_lock_id: false,
    adoption_ignores_keeper: false,
    renew_by_id_shortens: false,
    w1_rollback: false,
};

/// The model's `unlock` calls of the generated cases: two random ids, and the client's
/// doubted unlock of lock id 1 (learnt), which its attempts of lock id 1 carry.
const DOUBTED: UnlockOp = 2;
/// The operation id of an `unlock` made in a case: a new call, named by no seeded entry.
const FRESH: UnlockOp = 3;

/// A generated document: maybe an entry (of lock id 0 or 1, nonce 0 or 1, a keeper or
/// none, live, expired or without TTL, naming some of the unlock calls 0..=2, adopted or
/// not), a fence at or above its token, some tombstones.
fn document(rng: &mut StdRng, extra: &mut StdRng) -> Doc {
    let token = rng.random_range(3..6);
    let mut entry = rng.random_bool(0.75).then(|| Entry {
        lock_id: rng.random_range(0..2),
        nonce: rng.random_range(0..2),
        token,
        keeper: [None, Some(1), Some(2)][rng.random_range(0..3)],
        expires_at: [Some(NOW + 2), Some(NOW - 2), None][rng.random_range(0..3)],
        after_unlocks: (0..=DOUBTED)
            .filter(|_| rng.random_bool(0.3))
            .fold(Unlocks::NONE, |set, op| set.union(Unlocks::of(op))),
        adopted: rng.random_bool(0.5),
        created_at: 0,
        delay: 0,
        min_hold: 0,
        let_go: false,
    });
    // From a generator of their own (the cases drawn from `rng` stay as they were): a
    // lock-delay (the lease live, ended within the delay, or the entry gone), a minimum hold
    // (that runs past the command, or not), an entry let go of within its hold.
    if let Some(e) = &mut entry
        && extra.random_bool(0.4)
    {
        if extra.random_bool(0.5) {
            e.delay = [1, 3][extra.random_range(0..2)];
            if e.expires_at.is_none() && extra.random_bool(0.5) {
                e.delay = 0;
            }
        }
        if extra.random_bool(0.5) {
            e.min_hold = [1, 2, 4][extra.random_range(0..3)];
            e.created_at = NOW - 1;
            if extra.random_bool(0.3) && e.created_at + e.min_hold > NOW {
                e.let_go = true;
                e.delay = e.min_hold;
                e.expires_at = Some(e.created_at + e.min_hold);
            }
        }
    }
    let tombstones = (0..3).filter(|_| rng.random_bool(0.3)).collect();
    Doc {
        entry,
        fence: token + rng.random_range(0..2),
        tombstones,
        ..Doc::default()
    }
}

/// A request the public API can send, and what the model calls it.
#[derive(Debug, Clone, Copy)]
enum Call {
    Acquire {
        lock_id: u8,
        nonce: u8,
    },
    Withdraw {
        lock_id: u8,
        nonce: u8,
    },
    Release {
        keeper: Option<u8>,
        token_offset: u8,
    },
    /// A resumed guard's release, which retires its attempt: of the document's entry's
    /// nonce, under its token or the next (then the entry is a re-grant of the attempt).
    RetiringRelease {
        token_offset: u8,
    },
    /// `renew(lock_id, ttl)`: the TTL a guard's (`TTL`) or a tick, shorter than a seeded
    /// entry's time left, which a kept lease keeps.
    Renew {
        lock_id: u8,
        ttl: Time,
    },
    Unlock {
        lock_id: u8,
    },
    ForceRelease,
}

fn call(rng: &mut StdRng) -> Call {
    let lock_id = rng.random_range(0..2);
    let nonce = rng.random_range(0..3);
    match rng.random_range(0..7) {
        0 => Call::Acquire { lock_id, nonce },
        1 => Call::Withdraw { lock_id, nonce },
        2 => Call::Release {
            keeper: [None, Some(1), Some(2)][rng.random_range(0..3)],
            token_offset: rng.random_range(0..2),
        },
        3 => Call::Renew {
            lock_id,
            ttl: [TTL, 1][rng.random_range(0..2)],
        },
        4 => Call::Unlock { lock_id },
        5 => Call::RetiringRelease {
            token_offset: rng.random_range(0..2),
        },
        _ => Call::ForceRelease,
    }
}

/// A grant of lock id 0 with `token` and `keeper`, got by resuming a seeded entry (the
/// public API makes grants only from replies).
async fn grant(
    locks: &LockClient,
    nonces: &Nonces,
    ops: &Ops,
    token: u8,
    keeper: Option<u8>,
    min_hold: Time,
) -> Grant {
    let seeded = Doc {
        entry: Some(Entry {
            lock_id: 0,
            nonce: 2,
            token,
            keeper,
            expires_at: Some(NOW + 2),
            after_unlocks: Unlocks::NONE,
            adopted: false,
            created_at: if min_hold > 0 { NOW - 1 } else { 0 },
            delay: 0,
            min_hold,
            let_go: false,
        }),
        fence: token,
        tombstones: vec![],
        ..Doc::default()
    };
    seed(locks, RESOURCE, &seeded, nonces, ops).await;
    let request =
        AcquireRequest::exclusive(RESOURCE, "L0", LockDetails::default()).nonce(nonces.requests[0]);
    match locks.acquire(&request).await.unwrap() {
        Attempt::AlreadyHeld(grant) => grant,
        other => panic!("expected the seeded grant, got {other:?}"),
    }
}

/// The model's keeper id for the guards' client (whose real keeper id is its own): no
/// seeded entry names it.
const GUARDS_KEEPER: u8 = 9;

/// A guard of lock id 0 holding the grant of `token` and attempt `nonce`, got by resuming a
/// seeded entry (a mutex of that lock id is answered "already held", and adopts the entry):
/// its release retires its attempt.
async fn resumed_guard(
    locks: &LockClient,
    nonces: &Nonces,
    ops: &Ops,
    token: u8,
    nonce: u8,
) -> mongolock::LockGuard {
    let seeded = Doc {
        entry: Some(Entry {
            lock_id: 0,
            nonce,
            token,
            keeper: None,
            expires_at: Some(NOW + 100),
            after_unlocks: Unlocks::NONE,
            adopted: false,
            created_at: 0,
            delay: 0,
            min_hold: 0,
            let_go: false,
        }),
        fence: token,
        tombstones: vec![],
        ..Doc::default()
    };
    seed(locks, RESOURCE, &seeded, nonces, ops).await;
    let guard = (locks.mutex(RESOURCE).lock_id(lock_id(0)))
        .ttl(Duration::from_secs(u64::from(TTL)))
        .try_acquire()
        .await
        .unwrap()
        .expect("the seeded entry, resumed");
    assert_eq!(guard.fencing_token(), base() + i64::from(token));
    let entry = stored_entry(locks, RESOURCE).await;
    assert_eq!(entry.get_bool("adopted"), Ok(true), "the adoption marks it");
    guard
}

async fn seed(locks: &LockClient, resource: &str, doc: &Doc, nonces: &Nonces, ops: &Ops) {
    let coll = locks.collection();
    coll.delete_many(doc! { "_id": resource }).await.unwrap();
    coll.insert_one(stored(resource, doc, nonces, ops, server_now(locks).await))
        .await
        .unwrap();
}

/// Configures the server's `failCommand` fail point for the next `update` (an `unlock`).
async fn fail_next_update(locks: &LockClient, data: Document) {
    let mut data = data;
    data.insert("failCommands", vec!["update"]);
    (locks.collection().client().database("admin"))
        .run_command(doc! {
            "configureFailPoint": "failCommand", "mode": { "times": 1 }, "data": data,
        })
        .await
        .expect("configureFailPoint");
}

/// Makes an `unlock` of `lock_id` doubted in `locks`: its command runs but its reply is a
/// write concern error (the outcome is unknown), and the library's one repeat is answered.
/// Returns its id, learnt from the entry of a grant of `lock_id` made afterwards.
async fn doubted_unlock(locks: &LockClient, lock_id: &str) -> ObjectId {
    let wce =
        doc! { "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" } };
    fail_next_update(locks, wce).await;
    locks.unlock(lock_id).await.expect("the repeat is answered");
    let grant = locks
        .xlock("calibration-unlock", lock_id, LockDetails::default())
        .await
        .unwrap();
    let ids = after_unlocks(&stored_entry(locks, "calibration-unlock").await);
    assert_eq!(
        ids.len(),
        1,
        "a grant made while the unlock is doubted names it"
    );
    locks.release(&grant).await.unwrap();
    ids[0]
}

/// The server's clock, read from the server (`$$NOW`).
async fn server_now(locks: &LockClient) -> DateTime {
    let db = locks.collection().namespace().db;
    let reply = (locks.collection().client().database(&db))
        .run_command(doc! { "hello": 1 })
        .await
        .unwrap();
    *reply
        .get_datetime("localTime")
        .expect("hello reports the server's time")
}

#[tokio::test]
async fn the_models_server_step_matches_the_librarys_commands() {
    let server = TestServer::start().await.unwrap();
    let locks = LockClient::new(server.client().database("model").collection("locks"));
    let nonces = Nonces::learn(&locks).await;
    set_base(&locks).await;
    let mut rng = StdRng::seed_from_u64(7);
    let mut extra = StdRng::seed_from_u64(8);
    // The let-go entries read at a clock stepped back before their grant: a generator of
    // their own (the cases drawn from the others stay as they were).
    let mut back = StdRng::seed_from_u64(9);
    let ops = Ops {
        ids: vec![
            ObjectId::new(),
            ObjectId::new(),
            doubted_unlock(&locks, &lock_id(1)).await,
        ],
    };
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for case in 0..240 {
        let mut doc = document(&mut rng, &mut extra);
        let call = call(&mut rng);
        // The request's lock-delay and minimum hold (an acquire's, a withdrawal's, the
        // released grant's), in ticks.
        let delay = [0, 0, 1][extra.random_range(0..3)];
        let mut min_hold = [0, 0, 2][extra.random_range(0..3)];
        // Now and then, the entry is the one a release or a withdrawal with a minimum hold
        // names, within its hold: it is let go of.
        if let Some(e) = &mut doc.entry
            && extra.random_bool(0.3)
        {
            let named = match call {
                Call::Release {
                    keeper,
                    token_offset: 0,
                } => Some((0, e.nonce, keeper)),
                Call::Withdraw { lock_id, nonce } => Some((lock_id, nonce, e.keeper)),
                _ => None,
            };
            if let Some((lock_id, nonce, keeper)) = named {
                (e.lock_id, e.nonce, e.keeper) = (lock_id, nonce, keeper);
                (e.min_hold, e.created_at, e.let_go) = (2, NOW - 1, false);
                e.delay = e.delay.min(1);
                min_hold = 2;
            }
        }
        // Now and then, the entry was let go of within its hold and the server's clock has
        // stepped back before its grant since; mostly the entry of the lock id (and now and
        // then of the attempt) the request names, so that what it asks of "held" decides.
        if let Some(e) = &mut doc.entry
            && back.random_bool(0.25)
        {
            let_go_before_grant(e, [1, 2][back.random_range(0..2)]);
            let named = match call {
                Call::Acquire { lock_id, .. }
                | Call::Withdraw { lock_id, .. }
                | Call::Renew { lock_id, .. }
                | Call::Unlock { lock_id } => Some(lock_id),
                Call::Release { .. } | Call::RetiringRelease { .. } => Some(0),
                Call::ForceRelease => None,
            };
            if let Some(l) = named
                && back.random_bool(0.8)
            {
                e.lock_id = l;
            }
            if let Call::Acquire { nonce, .. } | Call::Withdraw { nonce, .. } = call
                && back.random_bool(0.4)
            {
                e.nonce = nonce;
            }
        }
        // The grant of a release is made first (it seeds a document of its own).
        let grant = match call {
            Call::Release {
                keeper,
                token_offset,
            } => {
                let token = doc.entry.as_ref().map_or(4, |e| e.token) + token_offset;
                Some((
                    grant(&locks, &nonces, &ops, token, keeper, min_hold).await,
                    token,
                ))
            }
            _ => None,
        };
        // A resumed guard (it seeds a document of its own too), of the entry's attempt.
        let guard = match call {
            Call::RetiringRelease { token_offset } => {
                let (token, nonce) = doc.entry.as_ref().map_or((4, 0), |e| (e.token, e.nonce));
                let token = token + token_offset;
                Some((
                    resumed_guard(&locks, &nonces, &ops, token, nonce).await,
                    token,
                    nonce,
                ))
            }
            _ => None,
        };
        seed(&locks, RESOURCE, &doc, &nonces, &ops).await;
        let mut model = Server {
            docs: vec![doc.clone()],
        };
        let secs = |ticks: Time| Duration::from_secs(u64::from(ticks));
        let ttl = LockDetails::default()
            .ttl(secs(TTL))
            .lock_delay(secs(delay))
            .min_hold(secs(min_hold));
        let (request, real) = match call {
            Call::Acquire { lock_id: l, nonce } => {
                let request = AcquireRequest::exclusive(RESOURCE, lock_id(l), ttl)
                    .nonce(nonces.requests[nonce as usize]);
                let real = match locks.acquire(&request).await.unwrap() {
                    Attempt::Granted(g) => Reply::Granted {
                        token: (g.fencing_token() - base()) as u8,
                        expires_at: None,
                        now: 0,
                    },
                    Attempt::AlreadyHeld(g) => Reply::AlreadyHeld {
                        token: (g.fencing_token() - base()) as u8,
                        nonce: 0,
                        // Not compared here (a grant does not show it): the waiting
                        // variant's replies, read raw, are (`class_of_raw`).
                        keeper: None,
                        expires_at: None,
                        now: 0,
                    },
                    Attempt::Contended(_) => Reply::Refused,
                    Attempt::Withdrawn => Reply::Withdrawn,
                    other => panic!("unexpected {other:?}"),
                };
                // The client's doubted unlock of lock id 1 goes with its attempts.
                let after_unlocks = if l == 1 {
                    Unlocks::of(DOUBTED)
                } else {
                    Unlocks::NONE
                };
                let request = Request::Acquire {
                    resource: 0,
                    kind: Kind::Exclusive,
                    lock_id: l,
                    nonce,
                    keeper: None,
                    ttl: Some(TTL),
                    after_unlocks,
                    delay,
                    min_hold,
                    announce: None,
                    call: nonce,
                };
                (request, real)
            }
            Call::Withdraw { lock_id: l, nonce } => {
                let request = AcquireRequest::exclusive(RESOURCE, lock_id(l), ttl)
                    .nonce(nonces.requests[nonce as usize]);
                let removed = locks.release_attempt(&request).await.unwrap();
                // `release_attempt`: `Hold::Kept`.
                let request = Request::Withdraw {
                    resource: 0,
                    lock_id: l,
                    nonce,
                    keeper: None,
                    hold: min_hold > 0,
                    shared: false,
                    call: nonce,
                };
                (
                    request,
                    Reply::Released {
                        removed,
                        live: false,
                    },
                )
            }
            Call::Release { keeper, .. } => {
                let (grant, token) = grant.expect("made above");
                let removed = locks.release(&grant).await.unwrap();
                let request = Request::Release {
                    resource: 0,
                    lock_id: 0,
                    token,
                    keeper,
                    retire: None,
                    hold: min_hold > 0,
                };
                (
                    request,
                    Reply::Released {
                        removed,
                        live: false,
                    },
                )
            }
            Call::RetiringRelease { .. } => {
                let (guard, token, nonce) = guard.expect("made above");
                // `Ok` only for a grant removed while live (else `LeaseLost`).
                let ok = guard.release().await.is_ok();
                let request = Request::Release {
                    resource: 0,
                    lock_id: 0,
                    token,
                    keeper: Some(GUARDS_KEEPER),
                    retire: Some(nonce),
                    hold: false,
                };
                (
                    request,
                    Reply::Released {
                        removed: ok,
                        live: false,
                    },
                )
            }
            Call::Renew { lock_id: l, ttl } => {
                let n = locks
                    .renew(&lock_id(l), Duration::from_secs(u64::from(ttl)))
                    .await
                    .unwrap();
                (
                    Request::RenewLockId { lock_id: l, ttl },
                    Reply::Count(n as u8),
                )
            }
            Call::Unlock { lock_id: l } => {
                let n = locks.unlock(&lock_id(l)).await.unwrap();
                let request = Request::Unlock {
                    lock_id: l,
                    op: FRESH,
                };
                (request, Reply::Count(n as u8))
            }
            Call::ForceRelease => {
                let n = locks.force_release(RESOURCE).await.unwrap();
                (Request::ForceRelease { resource: 0 }, Reply::Count(n as u8))
            }
        };
        let now = server_now(&locks).await;
        let after = (locks.collection())
            .find_one(doc! { "_id": RESOURCE })
            .await
            .unwrap();
        let real_doc = project(after, &nonces, &ops, now);
        let mut expected = model.execute(&request, NOW, &Bugs::default());
        // A guard's release tells `Ok` only for a grant removed while live.
        if let (
            Call::RetiringRelease { .. },
            Reply::Released {
                removed: true,
                live: false,
            },
        ) = (call, &expected)
        {
            expected = Reply::Released {
                removed: false,
                live: false,
            };
        }
        // The reply's class and token (the model's expiry and clock are not compared here;
        // the document's expiry is).
        let class = |reply: &Reply| match reply {
            Reply::Granted { token, .. } => format!("granted t{token}"),
            Reply::AlreadyHeld { token, .. } => format!("already held t{token}"),
            Reply::Released { removed, .. } => format!("removed {removed}"),
            other => format!("{other:?}"),
        };
        assert_eq!(
            (class(&real), &real_doc),
            (class(&expected), &model.docs[0]),
            "case {case}: {call:?} on {doc:?}"
        );
        // The comparison can fail: a server step with a bug put back differs from the
        // library on some cases.
        for (name, bugs) in MUTANTS {
            let mut mutant = Server {
                docs: vec![doc.clone()],
            };
            let reply = mutant.execute(&request, NOW, &bugs);
            if (class(&reply), &mutant.docs[0]) != (class(&real), &real_doc) {
                *counts.entry(format!("mutant differs: {name}")).or_default() += 1;
                if name == HELD_BY_TIME {
                    *counts
                        .entry(format!("held by time differs: {}", class_of(&request)))
                        .or_default() += 1;
                }
            }
        }
        *counts.entry(class(&real)).or_default() += 1;
        if stepped_back(&doc) {
            *counts
                .entry(format!(
                    "let go of, before its grant: {}",
                    class_of(&request)
                ))
                .or_default() += 1;
        }
        // The minimum hold and the lock-delay: an entry let go of by this request (kept in
        // force for the rest of its hold), and an attempt refused by an entry within its
        // lock-delay or hold.
        if real_doc.entry.as_ref().is_some_and(|e| e.let_go)
            && !doc.entry.as_ref().is_some_and(|e| e.let_go)
        {
            let name = format!("let go of by {}", class_of(&request));
            *counts.entry(name).or_default() += 1;
        }
        if let (Request::Acquire { .. }, Reply::Refused, Some(e)) = (&request, &real, &doc.entry)
            && e.is_live(NOW)
            && !e.holds(NOW)
        {
            *counts
                .entry("refused by an entry within its delay or hold".to_owned())
                .or_default() += 1;
        }
        // The cases where `afterUnlocks` decides: an unlock meets an entry of its lock id
        // that names other calls (it goes), an acquire of lock id 1 is granted (its entry
        // names the doubted call).
        let named = doc.entry.as_ref().filter(|e| !e.after_unlocks.is_empty());
        if let (Request::Unlock { lock_id, .. }, Some(e)) = (&request, named)
            && e.lock_id == *lock_id
        {
            *counts
                .entry("unlock of an entry naming other unlocks".to_owned())
                .or_default() += 1;
        }
        // The first fix of 9119560: an attempt of lock id 1 (carrying the doubted unlock)
        // answered from an entry of lock id 1 held from before, which gains the unlock.
        if let (
            Request::Acquire { lock_id: 1, .. },
            Reply::AlreadyHeld { .. } | Reply::Granted { .. } | Reply::Withdrawn,
            Some(e),
        ) = (&request, &real, &doc.entry)
            && e.lock_id == 1
            && e.is_live(NOW)
            && !e.after_unlocks.contains(DOUBTED)
            && real_doc
                .entry
                .as_ref()
                .is_some_and(|e| e.after_unlocks.contains(DOUBTED))
        {
            *counts
                .entry("held entry answering lock id 1 gains the doubted unlock".to_owned())
                .or_default() += 1;
        }
        // The second: a retiring release meets a re-grant of its attempt (same nonce, another
        // token), adopted (it stays) or not (it goes).
        if let (
            Request::Release {
                token,
                retire: Some(nonce),
                ..
            },
            Some(e),
        ) = (&request, &doc.entry)
            && e.lock_id == 0
            && e.nonce == *nonce
            && e.token != *token
        {
            let name = if e.adopted {
                "retiring release meets an adopted re-grant"
            } else {
                "retiring release meets a re-grant"
            };
            *counts.entry(name.to_owned()).or_default() += 1;
        }
        if let (Request::Acquire { lock_id: 1, .. }, Reply::Granted { .. }) = (&request, &real)
            && real_doc
                .entry
                .as_ref()
                .is_some_and(|e| e.after_unlocks == Unlocks::of(DOUBTED))
        {
            *counts
                .entry("grant naming the doubted unlock".to_owned())
                .or_default() += 1;
        }
        *counts.entry(class_of(&request)).or_default() += 1;
    }
    println!("{counts:#?}");
    // Every request and every reply class came up.
    for needed in [
        "Acquire",
        "Withdraw",
        "Release",
        "RenewLockId",
        "Unlock",
        "ForceRelease",
        "Refused",
        "Withdrawn",
        "removed true",
        "removed false",
    ] {
        assert!(
            counts.keys().any(|k| k.starts_with(needed)),
            "no case of {needed}: {counts:?}"
        );
    }
    for needed in [
        "let go of by Release",
        "let go of by Withdraw",
        "let go of by Unlock",
        "refused by an entry within its delay or hold",
        "unlock of an entry naming other unlocks",
        "grant naming the doubted unlock",
        "held entry answering lock id 1 gains the doubted unlock",
        "retiring release meets an adopted re-grant",
        "retiring release meets a re-grant",
    ] {
        assert!(
            counts.contains_key(needed),
            "no case of {needed}: {counts:?}"
        );
    }
    // The time-only "held" differs from the library on a let-go entry read before its
    // grant for each command here that asks it and tells it: the acquire's answer, the
    // renewal by lock id, the force release's count. (A release's and a withdrawal's `live`
    // is not told by the calls these cases make: `release` and `release_attempt` return
    // whether something was removed, and a retiring release's guard names a keeper no
    // seeded entry names.)
    for needed in ["Acquire", "RenewLockId", "ForceRelease"] {
        assert!(
            counts.contains_key(&format!("held by time differs: {needed}")),
            "no {needed} case tells the time-only held from the library: {counts:#?}"
        );
    }
    // Every request that asks whether an entry is held met a let-go entry read at a clock
    // stepped back before its grant.
    for needed in [
        "Acquire",
        "Withdraw",
        "Release",
        "RenewLockId",
        "Unlock",
        "ForceRelease",
    ] {
        assert!(
            counts.contains_key(&format!("let go of, before its grant: {needed}")),
            "no case of {needed} on a let-go entry read before its grant: {counts:#?}"
        );
    }
    for (name, _) in MUTANTS {
        assert!(
            counts.contains_key(&format!("mutant differs: {name}")),
            "no case tells the library from the model with {name}"
        );
    }
    assert!(counts.keys().any(|k| k.starts_with("granted")));
    assert!(counts.keys().any(|k| k.starts_with("already held")));
}

/// A late copy of an `unlock`, on the emulator and in the model. The client's `unlock` of
/// lock id 1 is held on its way (the fault proxy) and its connection cut: its outcome is
/// unknown, the library's repeat removes the entry of lock id 1 on `r-old`, and the call
/// stays doubted. The client is then granted `r` under lock id 1, and the entry names the
/// unlock; then the held copy runs, and must leave that grant. At each step the documents
/// are the model's, with the same operation id; a step that spares nothing differs.
#[tokio::test]
async fn a_late_unlock_leaves_what_the_model_leaves() {
    let server = TestServer::start().await.unwrap();
    let proxy = mongolock_testkit::FaultProxy::start(server.addr())
        .await
        .unwrap();
    let locks = LockClient::new(proxy.client().database("model").collection("locks"));
    let direct = LockClient::new(server.new_client().database("model").collection("locks"));
    // Through the proxy first: the client's first command (its compatibility check) is done.
    let mut nonces = Nonces::learn(&locks).await;
    set_base(&direct).await;
    let mut ops = Ops { ids: vec![] };
    // Model resource 0 is `r`, 1 is `r-old`.
    let resources = [RESOURCE, "r-old"];
    let free = Doc {
        entry: None,
        fence: 4,
        tombstones: vec![],
        ..Doc::default()
    };
    let old = || Doc {
        entry: Some(Entry {
            lock_id: 1,
            nonce: 0,
            token: 4,
            keeper: None,
            expires_at: None,
            after_unlocks: Unlocks::NONE,
            adopted: false,
            created_at: 0,
            delay: 0,
            min_hold: 0,
            let_go: false,
        }),
        fence: 4,
        tombstones: vec![],
        ..Doc::default()
    };
    seed(&direct, resources[0], &free, &nonces, &ops).await;
    seed(&direct, resources[1], &old(), &nonces, &ops).await;
    let mut model = Server {
        docs: vec![free, old()],
    };
    let read = async |ops: &Ops, nonces: &Nonces| {
        let now = server_now(&direct).await;
        let mut docs = vec![];
        for resource in resources {
            let stored = (direct.collection())
                .find_one(doc! { "_id": resource })
                .await
                .unwrap();
            docs.push(project(stored, nonces, ops, now));
        }
        docs
    };

    // The first copy is held two seconds on its way, the connection cut after 50 ms; the
    // library's repeat is answered.
    proxy.fault_requests(
        mongolock_testkit::faults::proxy::Requests::named(&["update"]).times(1),
        mongolock_testkit::faults::proxy::RequestFault::Late {
            hold: Duration::from_millis(2_000),
            cut_after: Some(Duration::from_millis(50)),
        },
    );
    assert_eq!(locks.unlock(&lock_id(1)).await.unwrap(), 1, "the repeat");
    let grant = locks
        .xlock(resources[0], &lock_id(1), LockDetails::default())
        .await
        .expect("r is free");
    // The grant's entry names the doubted unlock: learn its id and the attempt's nonce.
    let entry = stored_entry(&direct, resources[0]).await;
    let named = after_unlocks(&entry);
    assert_eq!(
        named.len(),
        1,
        "the grant names the doubted unlock: {entry:?}"
    );
    ops.ids.push(named[0]);
    nonces.ids.push(entry.get_object_id("nonce").unwrap());
    let op = ops.model(&named[0]);
    let nonce = nonces
        .model(&entry.get_object_id("nonce").unwrap())
        .unwrap();
    let unlock = Request::Unlock { lock_id: 1, op };
    assert_eq!(
        model.execute(&unlock, NOW, &Bugs::default()),
        Reply::Count(1)
    );
    let granted = model.execute(
        &Request::Acquire {
            resource: 0,
            kind: Kind::Exclusive,
            lock_id: 1,
            nonce,
            keeper: None,
            ttl: None,
            after_unlocks: Unlocks::of(op),
            delay: 0,
            min_hold: 0,
            announce: None,
            call: nonce,
        },
        NOW,
        &Bugs::default(),
    );
    assert!(
        matches!(granted, Reply::Granted { token, .. } if i64::from(token) + base() == grant.fencing_token()),
        "{granted:?}"
    );
    assert_eq!(
        read(&ops, &nonces).await,
        model.docs,
        "the repeat and the grant"
    );

    // An entry that does not name the unlock, as one granted before it was sent: the held
    // copy removes it (which shows the copy ran).
    seed(&direct, resources[1], &old(), &nonces, &ops).await;
    model.docs[1] = old();

    // The held copy runs.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let before = model.clone();
    assert_eq!(
        model.execute(&unlock, NOW, &Bugs::default()),
        Reply::Count(1)
    );
    let real = read(&ops, &nonces).await;
    assert_eq!(real, model.docs, "what the late copy left");
    assert!(real[0].entry.is_some(), "the later grant stays");
    assert!(real[1].entry.is_none(), "the copy ran");
    // A step that spares nothing differs from the library here.
    let mut mutant = before;
    let bugs = Bugs {
        unlock_spares_nothing: true,
        ..NO_BUGS
    };
    mutant.execute(&unlock, NOW, &bugs);
    assert_ne!(real, mutant.docs, "the mutant step removes the later grant");
}

/// The model's nonce for a waiting acquire's own attempt (its real nonce is learnt from the
/// command captured for the case).
const OWN: u8 = 3;

/// Control (aj)'s step: a withdrawal, a retiring release, `leave_line` and a waiting
/// attempt answered out of the line take out every place of their lock id (before issue
/// 40's fix).
const LINE_BY_LOCK_ID: &str = "removals that take every place of their lock id (before issue 40)";

/// A generated document for the shared cases: an exclusive entry (a third of them), or up
/// to two shared entries under a cap (none, one or two permits), of lock ids 0..3, each
/// live, live for one more tick, run out at the boundary (`expiresAt` at the command's
/// second, which has passed when it runs), expired, or without TTL; some with a lock-delay
/// of a tick (the lease ended at the boundary, in force for the delay) or a minimum hold;
/// tombstones of nonces 0..=3 (3: the waiting attempt's own).
fn shared_document(rng: &mut StdRng) -> Doc {
    let mut tokens = [3, 4, 5];
    let mut nonces = [0, 1, 2, OWN];
    let mut lock_ids = [0u8, 1, 2];
    let entry = |rng: &mut StdRng, i: usize, lock_id: u8, nonce: u8, token: u8| {
        let expires_at =
            [Some(NOW + 2), Some(NOW + 1), Some(NOW), Some(NOW - 2), None][rng.random_range(0..5)];
        let mut e = Entry {
            lock_id,
            nonce,
            token,
            keeper: [None, Some(1), Some(2)][rng.random_range(0..3)],
            expires_at,
            after_unlocks: Unlocks::NONE,
            adopted: rng.random_bool(0.3),
            created_at: 0,
            delay: 0,
            min_hold: 0,
            let_go: false,
        };
        let _ = i;
        if expires_at.is_some() && rng.random_bool(0.2) {
            e.delay = 1;
        }
        if rng.random_bool(0.2) {
            (e.min_hold, e.created_at) = (2, NOW - 1);
        }
        e
    };
    let shuffle = |rng: &mut StdRng, list: &mut [u8]| {
        for i in (1..list.len()).rev() {
            list.swap(i, rng.random_range(0..=i));
        }
    };
    shuffle(rng, &mut tokens);
    shuffle(rng, &mut nonces);
    shuffle(rng, &mut lock_ids);
    let mut doc = Doc::default();
    if rng.random_bool(0.3) {
        doc.entry = Some(entry(rng, 0, lock_ids[0], nonces[0], tokens[0]));
    } else {
        let n = rng.random_range(0..=2);
        for i in 0..n {
            doc.shared
                .push(entry(rng, i, lock_ids[i], nonces[i], tokens[i]));
        }
        if n > 0 {
            doc.cap = [None, Some(1), Some(2)][rng.random_range(0..3)];
        }
    }
    let top = doc.entries().map(|e| e.token).max().unwrap_or(3);
    doc.fence = top + rng.random_range(0..2);
    doc.tombstones = (0..=OWN).filter(|_| rng.random_bool(0.25)).collect();
    doc
}

/// A shared case's request.
#[derive(Debug, Clone, Copy)]
enum SharedCall {
    /// A single shared attempt (`acquire` of `AcquireRequest::shared`) with the cap `cap`.
    Acquire {
        lock_id: u8,
        nonce: u8,
        cap: Option<u8>,
    },
    /// A waiting acquire's attempt (the variant with a place in line): a mutex or writer
    /// (`kind` exclusive), a reader (shared without cap) or a permit of a semaphore.
    Waiting {
        lock_id: u8,
        kind: Kind,
    },
    /// `release_attempt` of a shared attempt.
    Withdraw {
        lock_id: u8,
        nonce: u8,
        cap: Option<u8>,
    },
    /// `release` of a shared grant of lock id 0 (a reader's, or a permit's: `cap`), got by
    /// resuming a seeded share, naming `keeper`.
    Release {
        keeper: Option<u8>,
        cap: Option<u8>,
    },
    Renew {
        lock_id: u8,
    },
    Unlock {
        lock_id: u8,
    },
    ForceRelease,
}

fn shared_call(rng: &mut StdRng) -> SharedCall {
    let lock_id = rng.random_range(0..3);
    let nonce = rng.random_range(0..=OWN);
    let cap = [None, Some(1), Some(2)][rng.random_range(0..3)];
    let kind = [Kind::Exclusive, Kind::Shared { cap }][rng.random_range(0..2)];
    match rng.random_range(0..10) {
        0 | 1 => SharedCall::Acquire {
            lock_id,
            nonce,
            cap,
        },
        2..=4 => SharedCall::Waiting { lock_id, kind },
        5 => SharedCall::Withdraw {
            lock_id,
            nonce,
            cap,
        },
        6 | 7 => SharedCall::Release {
            keeper: [None, Some(1), Some(2)][rng.random_range(0..3)],
            cap,
        },
        8 => [
            SharedCall::Renew { lock_id },
            SharedCall::Unlock { lock_id },
        ][rng.random_range(0..2)],
        _ => SharedCall::ForceRelease,
    }
}

/// The first `findAndModify` captured for `resource`, as a command to send again: the
/// fields the driver adds (session, transaction number, cluster time, `$db`) left off, and
/// its `_id` made `to`.
fn replayable(captured: &Captured, resource: &str, to: &str) -> Document {
    let commands = captured.lock().unwrap();
    let command = (commands.iter())
        .find(|c| {
            c.contains_key("findAndModify")
                && c.get_document("query")
                    .is_ok_and(|q| q.get_str("_id") == Ok(resource))
        })
        .expect("the waiting attempt, captured");
    let mut out = doc! {};
    for (key, value) in command {
        if [
            "findAndModify",
            "query",
            "update",
            "upsert",
            "new",
            "fields",
            "collation",
        ]
        .contains(&key.as_str())
        {
            out.insert(key, value.clone());
        }
    }
    let mut query = out.get_document("query").unwrap().clone();
    query.insert("_id", to);
    out.insert("query", query);
    out
}

/// The reply class of an acquire's raw reply (the projection the library reads, see
/// `command/acquire.rs`'s `interpret`), for an attempt of `lock_id`, `nonce` and `kind`.
fn class_of_raw(reply: &Document, lock_id: &str, nonce: ObjectId, kind: Kind) -> Reply {
    let r = reply
        .get_document("value")
        .unwrap()
        .get_document("r")
        .unwrap();
    let now = *r.get_datetime("now").unwrap();
    // A let-go entry holds nothing, whatever the clock reads (`Holder::let_go_at`).
    let holds = |e: &Document| match e.get_datetime("expiresAt") {
        _ if e.get_datetime("letGoAt").is_ok() => false,
        Ok(at) => {
            let delay = e
                .get("delayMs")
                .and_then(Bson::as_i64)
                .or_else(|| e.get("delayMs").and_then(Bson::as_i32).map(i64::from));
            at.timestamp_millis() - delay.unwrap_or(0) > now.timestamp_millis()
        }
        Err(_) => true,
    };
    let token = |e: &Document| (e.get_i64("token").unwrap() - base()) as u8;
    let x = r
        .get_document("x")
        .ok()
        .filter(|x| x.get_str("lockId") == Ok(lock_id));
    let m = (r.get_array("m").ok())
        .and_then(|m| m.first())
        .and_then(|e| e.as_document());
    let (mine, mine_shared) = match x {
        Some(x) => (Some(x), false),
        None => (m, true),
    };
    let mine = mine.filter(|e| holds(e));
    if let Some(e) = mine
        && e.get_object_id("nonce") == Ok(nonce)
    {
        return Reply::Granted {
            token: token(e),
            expires_at: None,
            now: 0,
        };
    }
    if r.get_bool("w") == Ok(true) {
        return Reply::Withdrawn;
    }
    if let Some(e) = mine {
        return if mine_shared == kind.is_shared() {
            Reply::AlreadyHeld {
                token: token(e),
                nonce: 0,
                // The keeper the entry names, which the lock id's adoption asks for.
                keeper: e.get_str("keeper").ok().map(|k| match k.strip_prefix('k') {
                    Some(n) => n.parse().unwrap(),
                    None => HANDLE_KEEPER,
                }),
                expires_at: None,
                now: 0,
            }
        } else {
            Reply::HeldOtherKind
        };
    }
    if let Kind::Shared { cap } = kind {
        let n = r
            .get_i32("n")
            .map(i64::from)
            .or_else(|_| r.get_i64("n"))
            .unwrap_or(0);
        let stored = match r.get("cap") {
            Some(Bson::Int32(c)) => Some(*c as u8),
            Some(Bson::Int64(c)) => Some(*c as u8),
            _ => None,
        };
        if n > 0 && stored != cap {
            return Reply::CapMismatch;
        }
    }
    Reply::Refused
}

/// A grant of a share of lock id 0 (`token`, naming `keeper`, under `cap`), got by resuming
/// a seeded share (the public API makes grants only from replies).
async fn shared_grant(
    locks: &LockClient,
    nonces: &Nonces,
    ops: &Ops,
    token: u8,
    keeper: Option<u8>,
    cap: Option<u8>,
    min_hold: Time,
) -> Grant {
    let seeded = Doc {
        shared: vec![Entry {
            lock_id: 0,
            nonce: 2,
            token,
            keeper,
            expires_at: Some(NOW + 2),
            after_unlocks: Unlocks::NONE,
            adopted: false,
            created_at: if min_hold > 0 { NOW - 1 } else { 0 },
            delay: 0,
            min_hold,
            let_go: false,
        }],
        cap,
        fence: token,
        ..Doc::default()
    };
    seed(locks, RESOURCE, &seeded, nonces, ops).await;
    let request =
        AcquireRequest::shared(RESOURCE, "L0", LockDetails::default(), cap.map(u32::from))
            .nonce(nonces.requests[0]);
    match locks.acquire(&request).await.unwrap() {
        Attempt::AlreadyHeld(grant) => grant,
        other => panic!("expected the seeded share, got {other:?}"),
    }
}

/// Shared entries and the waiting variant: the model's server step against the library's
/// commands for readers, writers and permits (single attempts, the waiting acquire's
/// attempt, withdrawals, releases of shares, renewals by lock id, unlocks, force releases),
/// on documents with shared entries under caps, some at the boundary of their expiry or
/// their lock-delay. A waiting acquire's attempt is sent by the library (a handle's
/// `acquire_timeout` on a free resource of its own, its commands captured as they go out),
/// and the very command it sent is run again on the case's document, compared as in
/// [`the_models_server_step_matches_the_librarys_commands`]. Half the cases seed a line (one
/// or two places, live, live one more second or lapsed at the boundary, a writer's or a
/// reader's, often the request's own lock id behind another's), and the line the command
/// leaves is compared too: a waiting attempt with a place ahead, one that joins, keeps its
/// place or leaves the line, one answered "already held" in line (4b66416) each occur, and
/// the steps of controls (ah) and (ai) each differ from the library on some case. Each
/// place names a call (the request's own, another, or none: written before places named
/// their call), compared too: a waiting attempt keeps a place that names each, and names it
/// by its call; a withdrawal takes its own call's place out and leaves another call's, which
/// control (aj)'s step (every place of the lock id) takes: it differs on some case.
#[tokio::test]
async fn shared_entries_and_the_waiting_attempt_match_the_model() {
    let server = TestServer::start().await.unwrap();
    let (monitored, captured) = common::monitored_client(&server.uri(), &["findAndModify"]).await;
    let coll = monitored.database("model").collection::<Document>("locks");
    let locks = LockClient::new(coll.clone());
    let mut nonces = Nonces::learn(&locks).await;
    nonces.ids.push(ObjectId::new());
    set_base(&locks).await;
    let ops = Ops {
        ids: vec![
            ObjectId::new(),
            ObjectId::new(),
            ObjectId::new(),
            ObjectId::new(),
        ],
    };
    let mut rng = StdRng::seed_from_u64(40);
    // Let-go entries, some read before their grant: a generator of their own.
    let mut back = StdRng::seed_from_u64(41);
    // The line: a generator of its own too.
    let mut lines = StdRng::seed_from_u64(42);
    let mutants: [(&str, Bugs); 9] = [
        (
            LINE_BY_LOCK_ID,
            Bugs {
                line_removal_by_lock_id: true,
                ..NO_BUGS
            },
        ),
        (
            "a line jumper",
            Bugs {
                line_jumper: true,
                ..NO_BUGS
            },
        ),
        (
            "an answer \"already held\" out of the line (before 4b66416)",
            Bugs {
                held_answer_leaves_line: true,
                ..NO_BUGS
            },
        ),
        (
            "a shared grant that ignores the cap",
            Bugs {
                shared_ignores_cap: true,
                ..NO_BUGS
            },
        ),
        (
            "a reader admitted beside a writer",
            Bugs {
                reader_beside_writer: true,
                ..NO_BUGS
            },
        ),
        (
            "a writer admitted beside readers",
            Bugs {
                writer_beside_readers: true,
                ..NO_BUGS
            },
        ),
        (
            "a shared release that takes every share",
            Bugs {
                shared_release_takes_all: true,
                ..NO_BUGS
            },
        ),
        (
            HELD_BY_TIME,
            Bugs {
                let_go_held: true,
                ..NO_BUGS
            },
        ),
        (
            FORCE_UNMARKED,
            Bugs {
                force_leaves_unmarked: true,
                ..NO_BUGS
            },
        ),
    ];
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let secs = |ticks: Time| Duration::from_secs(u64::from(ticks));
    for case in 0..300 {
        let mut doc = shared_document(&mut rng);
        let call = shared_call(&mut rng);
        // Now and then an entry was let go of within its hold: read before its grant (the
        // server's clock stepped back since), or within its hold; mostly of the lock id the
        // request names (when no other entry has it: a lock id has one entry at most).
        let named = match call {
            SharedCall::Acquire { lock_id, .. }
            | SharedCall::Waiting { lock_id, .. }
            | SharedCall::Withdraw { lock_id, .. }
            | SharedCall::Renew { lock_id }
            | SharedCall::Unlock { lock_id } => Some(lock_id),
            SharedCall::Release { .. } | SharedCall::ForceRelease => None,
        };
        let lock_ids: Vec<u8> = doc.entries().map(|e| e.lock_id).collect();
        for e in doc.entries_mut() {
            if back.random_bool(0.25) {
                let min_hold = [1, 2][back.random_range(0..2)];
                if back.random_bool(0.7) {
                    let_go_before_grant(e, min_hold);
                } else {
                    (e.min_hold, e.created_at, e.let_go) = (2, NOW - 1, true);
                    (e.delay, e.expires_at) = (2, Some(NOW + 1));
                }
                if let Some(l) = named
                    && !lock_ids.contains(&l)
                    && back.random_bool(0.7)
                {
                    e.lock_id = l;
                }
            }
        }
        // Now and then a line: one or two places of lock ids 0..3, each live, live for one
        // more second, or lapsed at the boundary (`until` at the case's second), a writer's
        // or a reader's; often then the request's own lock id stands behind another's.
        if lines.random_bool(0.5) {
            let mut ids = [0u8, 1, 2];
            for i in (1..ids.len()).rev() {
                ids.swap(i, lines.random_range(0..=i));
            }
            for &l in &ids[..lines.random_range(1..=2)] {
                doc.queue.push(Place {
                    lock_id: l,
                    until: [NOW + 5, NOW + 1, NOW][lines.random_range(0..3)],
                    shared: lines.random_bool(0.3),
                    // The call it names: the case's request's own (the waiting attempt's
                    // `OWN`, a withdrawal's nonce), another (an earlier or a restarted
                    // call's), or none (a place written before places named their call).
                    call: [None, Some(0), Some(1), Some(2), Some(OWN)][lines.random_range(0..5)],
                });
            }
        }
        let ttl = LockDetails::default().ttl(secs(TTL));
        // The grant of a release is made first (it seeds a document of its own); the
        // case's document then holds that share (its token), beside what it had.
        let grant = match call {
            SharedCall::Release { keeper, cap } => {
                doc.entry = None;
                doc.shared.retain(|e| e.lock_id != 0);
                let token = doc.fence + 1;
                doc.fence = token;
                let mut share = Entry {
                    lock_id: 0,
                    nonce: 2,
                    token,
                    keeper,
                    expires_at: [Some(NOW + 2), Some(NOW)][rng.random_range(0..2)],
                    after_unlocks: Unlocks::NONE,
                    adopted: false,
                    created_at: 0,
                    delay: 0,
                    min_hold: 0,
                    let_go: false,
                };
                if rng.random_bool(0.3) {
                    (share.min_hold, share.created_at) = (2, NOW - 1);
                }
                doc.shared.retain(|e| e.nonce != 2);
                doc.shared.push(share.clone());
                doc.cap = cap;
                let g =
                    shared_grant(&locks, &nonces, &ops, token, keeper, cap, share.min_hold).await;
                Some((g, share))
            }
            _ => None,
        };
        // A waiting acquire's attempt: sent by a handle on a free resource of its own,
        // captured, its nonce learnt from the grant.
        let waiting = match call {
            SharedCall::Waiting { lock_id: l, kind } => {
                let resource = format!("capture-{case}");
                captured.lock().unwrap().clear();
                let guard = match kind {
                    Kind::Exclusive if case % 2 == 0 => {
                        (locks.mutex(&resource).lock_id(lock_id(l)).ttl(secs(TTL)))
                            .acquire_timeout(secs(1))
                            .await
                    }
                    Kind::Exclusive => {
                        (locks.rwlock(&resource).lock_id(lock_id(l)).ttl(secs(TTL)))
                            .write_timeout(secs(1))
                            .await
                    }
                    Kind::Shared { cap: None } => {
                        (locks.rwlock(&resource).lock_id(lock_id(l)).ttl(secs(TTL)))
                            .read_timeout(secs(1))
                            .await
                    }
                    Kind::Shared { cap: Some(permits) } => {
                        (locks.semaphore(&resource, u32::from(permits)))
                            .lock_id(lock_id(l))
                            .ttl(secs(TTL))
                            .acquire_timeout(secs(1))
                            .await
                    }
                }
                .unwrap()
                .expect("a free resource");
                let stored = (locks.collection())
                    .find_one(doc! { "_id": &resource })
                    .await
                    .unwrap()
                    .unwrap();
                let entry = match kind {
                    Kind::Exclusive => stored.get_document("exclusive").unwrap().clone(),
                    Kind::Shared { .. } => (stored.get_array("shared").unwrap()[0])
                        .as_document()
                        .unwrap()
                        .clone(),
                };
                nonces.ids[OWN as usize] = entry.get_object_id("nonce").unwrap();
                guard.release().await.unwrap();
                Some(replayable(&captured, &resource, RESOURCE))
            }
            _ => None,
        };
        seed(&locks, RESOURCE, &doc, &nonces, &ops).await;
        let mut model = Server {
            docs: vec![doc.clone()],
        };
        let (request, real) = match call {
            SharedCall::Acquire {
                lock_id: l,
                nonce,
                cap,
            } => {
                // Nonce 3 has no request of its own: the single attempts use 0..3.
                let nonce = nonce.min(2);
                let request = AcquireRequest::shared(RESOURCE, lock_id(l), ttl, cap.map(u32::from))
                    .nonce(nonces.requests[nonce as usize]);
                let real = match locks.acquire(&request).await.unwrap() {
                    Attempt::Granted(g) => Reply::Granted {
                        token: (g.fencing_token() - base()) as u8,
                        expires_at: None,
                        now: 0,
                    },
                    Attempt::AlreadyHeld(g) => Reply::AlreadyHeld {
                        token: (g.fencing_token() - base()) as u8,
                        nonce: 0,
                        // Not compared here (a grant does not show it): the waiting
                        // variant's replies, read raw, are (`class_of_raw`).
                        keeper: None,
                        expires_at: None,
                        now: 0,
                    },
                    Attempt::Contended(_) => Reply::Refused,
                    Attempt::Withdrawn => Reply::Withdrawn,
                    Attempt::HeldWithOtherKind(_) => Reply::HeldOtherKind,
                    Attempt::CapMismatch { .. } => Reply::CapMismatch,
                    other => panic!("unexpected {other:?}"),
                };
                let request = Request::Acquire {
                    resource: 0,
                    kind: Kind::Shared { cap },
                    lock_id: l,
                    nonce,
                    keeper: None,
                    ttl: Some(TTL),
                    after_unlocks: Unlocks::NONE,
                    delay: 0,
                    min_hold: 0,
                    announce: None,
                    call: nonce,
                };
                (request, real)
            }
            SharedCall::Waiting { lock_id: l, kind } => {
                let command = waiting.expect("captured above");
                let db = monitored.database("model");
                let reply = db.run_command(command).await.unwrap();
                let real = class_of_raw(&reply, &lock_id(l), nonces.ids[OWN as usize], kind);
                let request = Request::Acquire {
                    resource: 0,
                    kind,
                    lock_id: l,
                    nonce: OWN,
                    keeper: Some(HANDLE_KEEPER),
                    ttl: Some(TTL),
                    after_unlocks: Unlocks::NONE,
                    delay: 0,
                    min_hold: 0,
                    // A handle's place lasts twice its TTL (`wait::place_life`).
                    announce: Some(2 * TTL),
                    // The call's first attempt, granted on the capture's resource: its
                    // nonce names the call.
                    call: OWN,
                };
                (request, real)
            }
            SharedCall::Withdraw {
                lock_id: l,
                nonce,
                cap,
            } => {
                let nonce = nonce.min(2);
                let request = AcquireRequest::shared(RESOURCE, lock_id(l), ttl, cap.map(u32::from))
                    .nonce(nonces.requests[nonce as usize]);
                let removed = locks.release_attempt(&request).await.unwrap();
                let request = Request::Withdraw {
                    resource: 0,
                    lock_id: l,
                    nonce,
                    keeper: None,
                    hold: false,
                    shared: true,
                    call: nonce,
                };
                (
                    request,
                    Reply::Released {
                        removed,
                        live: false,
                    },
                )
            }
            SharedCall::Release { keeper, .. } => {
                let (grant, share) = grant.expect("made above");
                let removed = locks.release(&grant).await.unwrap();
                let request = Request::Release {
                    resource: 0,
                    lock_id: 0,
                    token: share.token,
                    keeper,
                    retire: None,
                    hold: share.min_hold > 0,
                };
                (
                    request,
                    Reply::Released {
                        removed,
                        live: false,
                    },
                )
            }
            SharedCall::Renew { lock_id: l } => {
                let n = locks.renew(&lock_id(l), secs(TTL)).await.unwrap();
                (
                    Request::RenewLockId {
                        lock_id: l,
                        ttl: TTL,
                    },
                    Reply::Count(n as u8),
                )
            }
            SharedCall::Unlock { lock_id: l } => {
                let n = locks.unlock(&lock_id(l)).await.unwrap();
                let request = Request::Unlock {
                    lock_id: l,
                    op: FRESH,
                };
                (request, Reply::Count(n as u8))
            }
            SharedCall::ForceRelease => {
                let n = locks.force_release(RESOURCE).await.unwrap();
                (Request::ForceRelease { resource: 0 }, Reply::Count(n as u8))
            }
        };
        let now = server_now(&locks).await;
        let after = (locks.collection())
            .find_one(doc! { "_id": RESOURCE })
            .await
            .unwrap();
        let real_doc = project(after, &nonces, &ops, now);
        let expected = model.execute(&request, NOW, &Bugs::default());
        let class = |reply: &Reply| match reply {
            Reply::Granted { token, .. } => format!("granted t{token}"),
            Reply::AlreadyHeld { token, keeper, .. } => {
                format!("already held t{token}, keeper {keeper:?}")
            }
            Reply::Released { removed, .. } => format!("removed {removed}"),
            other => format!("{other:?}"),
        };
        assert_eq!(
            (class(&real), &real_doc),
            (class(&expected), &model.docs[0]),
            "case {case}: {call:?} on {doc:?}"
        );
        for (name, bugs) in &mutants {
            let mut mutant = Server {
                docs: vec![doc.clone()],
            };
            let reply = mutant.execute(&request, NOW, bugs);
            if (class(&reply), &mutant.docs[0]) != (class(&real), &real_doc) {
                *counts.entry(format!("mutant differs: {name}")).or_default() += 1;
            }
        }
        // The line: a waiting attempt with a live place of another lock id ahead of its own
        // (or anywhere, without one); one that joined, kept its place, or left the line; an
        // attempt answered "already held" in line.
        if let SharedCall::Waiting { lock_id: l, kind } = call {
            let name = match kind {
                Kind::Exclusive => "waiting exclusive",
                Kind::Shared { .. } => "waiting shared",
            };
            let live: Vec<&Place> = doc.queue.iter().filter(|p| p.until > NOW).collect();
            let own = live.iter().position(|p| p.lock_id == l);
            if live[..own.unwrap_or(live.len())]
                .iter()
                .any(|p| p.lock_id != l)
            {
                *counts
                    .entry(format!("{name}: a place ahead, {}", class(&real)))
                    .or_default() += 1;
            }
            let had = own.is_some();
            let has = real_doc.queue.iter().any(|p| p.lock_id == l);
            if let (Some(at), true) = (own, has) {
                let named = match live[at].call {
                    Some(OWN) => "its own call",
                    Some(_) => "another call",
                    None => "no call",
                };
                *counts
                    .entry(format!("{name}: kept a place that named {named}"))
                    .or_default() += 1;
            }
            let moved = match (had, has) {
                (false, true) => "joined the line",
                (true, true) => "kept its place",
                (true, false) => "left the line",
                (false, false) => "stayed out of the line",
            };
            *counts.entry(format!("{name}: {moved}")).or_default() += 1;
            if has && matches!(real, Reply::AlreadyHeld { .. }) {
                *counts
                    .entry(format!("{name}: already held, in line"))
                    .or_default() += 1;
            }
        }
        if doc.queue.iter().any(|p| p.until <= NOW) {
            *counts.entry("a lapsed place".to_owned()).or_default() += 1;
        }
        // A withdrawal beside its lock id's place: its own call's goes, another call's (its
        // lock id's next call's) stays.
        if let SharedCall::Withdraw {
            lock_id: l, nonce, ..
        } = call
            && let Some(p) = (doc.queue.iter()).find(|p| p.lock_id == l && p.until > NOW)
        {
            let stays = real_doc.queue.iter().any(|q| q.lock_id == l);
            let whose = if p.call == Some(nonce.min(2)) {
                "its own call's"
            } else {
                "another call's"
            };
            let went = if stays { "stays" } else { "goes" };
            *counts
                .entry(format!("withdraw share: {whose} place {went}"))
                .or_default() += 1;
        }
        let let_go_read_early = stepped_back(&doc);
        let variant = match call {
            SharedCall::Waiting {
                kind: Kind::Exclusive,
                ..
            } => "waiting exclusive",
            SharedCall::Waiting {
                kind: Kind::Shared { cap: None },
                ..
            } => "waiting reader",
            SharedCall::Waiting { .. } => "waiting permit",
            SharedCall::Acquire { cap: None, .. } => "single reader",
            SharedCall::Acquire { .. } => "single permit",
            SharedCall::Withdraw { .. } => "withdraw share",
            SharedCall::Release { cap: None, .. } => "release reader",
            SharedCall::Release { .. } => "release permit",
            SharedCall::Renew { .. } => "renew",
            SharedCall::Unlock { .. } => "unlock",
            SharedCall::ForceRelease => "force release",
        };
        *counts
            .entry(format!("{variant}: {}", class(&real)))
            .or_default() += 1;
        *counts.entry(variant.to_owned()).or_default() += 1;
        if let_go_read_early {
            *counts
                .entry(format!("let go of, before its grant: {variant}"))
                .or_default() += 1;
        }
        // Something removed, let go of or granted: the document's entries changed.
        let keys = |d: &Doc| d.entries().map(|e| (e.token, e.let_go)).collect::<Vec<_>>();
        if keys(&real_doc) != keys(&doc) {
            *counts
                .entry(format!("{variant}: entries changed"))
                .or_default() += 1;
        }
        if doc
            .entries()
            .any(|e| e.expires_at == Some(NOW) || (e.delay > 0 && e.expires_at == Some(NOW + 1)))
        {
            *counts.entry("at a boundary".to_owned()).or_default() += 1;
        }
    }
    println!("{counts:#?}");
    for needed in [
        "waiting exclusive: granted",
        "waiting reader: granted",
        "waiting permit: granted",
        "waiting exclusive: Refused",
        "waiting reader: Refused",
        "waiting permit: Refused",
        "waiting permit: CapMismatch",
        "waiting reader: Withdrawn",
        "single reader: granted",
        "single permit: granted",
        "single permit: Refused",
        "single permit: CapMismatch",
        "release reader: removed true",
        "release permit: removed true",
        "withdraw share: removed true",
        "unlock: entries changed",
        "force release: entries changed",
        "renew",
        "at a boundary",
        "let go of, before its grant: waiting exclusive",
        "let go of, before its grant: waiting reader",
        "let go of, before its grant: waiting permit",
        "let go of, before its grant: single",
        "let go of, before its grant: renew",
        "let go of, before its grant: force release",
        "waiting exclusive: a place ahead, Refused",
        "waiting exclusive: joined the line",
        "waiting exclusive: kept its place",
        "waiting exclusive: left the line",
        "waiting exclusive: already held, in line",
        "waiting exclusive: kept a place that named another call",
        "waiting exclusive: kept a place that named no call",
        "withdraw share: its own call's place goes",
        "withdraw share: another call's place stays",
        "waiting shared: a place ahead",
        "waiting shared: joined the line",
        "a lapsed place",
    ] {
        assert!(
            counts.keys().any(|k| k.starts_with(needed)),
            "no case of {needed}: {counts:#?}"
        );
    }
    for (name, _) in mutants {
        assert!(
            counts.contains_key(&format!("mutant differs: {name}")),
            "no case tells the library from the model with {name}"
        );
    }
}

/// The first `update` captured whose statement's query names `resource`, as a command to
/// send again (the fields the driver adds left off), its query's `_id` made `to`.
fn replayable_update(captured: &Captured, resource: &str, to: &str) -> Document {
    let commands = captured.lock().unwrap();
    let query_of = |c: &Document| -> Option<Document> {
        let statement = c.get_array("updates").ok()?.first()?.as_document()?;
        statement.get_document("q").ok().cloned()
    };
    let command = (commands.iter())
        .find(|c| {
            c.contains_key("update")
                && query_of(c).is_some_and(|q| q.get_str("_id") == Ok(resource))
        })
        .expect("the adoption, captured");
    let mut statement = command.get_array("updates").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    let mut query = statement.get_document("q").unwrap().clone();
    query.insert("_id", to);
    statement.insert("q", query);
    let mut out = doc! { "update": command.get_str("update").unwrap(), "updates": [statement] };
    if let Ok(concern) = command.get_document("writeConcern") {
        out.insert("writeConcern", concern.clone());
    }
    out
}

/// Resume's adoption (`keepalive::adopt_command`, sent when an attempt of a handle is
/// answered "already held") against the model's [`Request::Adopt`], on entries let go of
/// within their minimum hold: the statement asks whether the lease is live as the keeper's
/// statements do (`expiresAt` after `$$NOW` plus the grant's lock-delay, never a let-go
/// entry). The adoption is captured from a real resume (a mutex of lock id 0 answered
/// "already held" on a resource of its own, its entry with the case's lock-delay), then run
/// again on each case's document: a live entry, let-go entries granted a tick ago and just
/// now, one read before its grant (a clock stepped back), and a live one another process
/// adopted since the attempt's reply (naming another keeper than the reply showed). The
/// document and whether it was adopted must be the model's; the step of control (aa)
/// (`letGoAt` unread, as before the fix: a restarted guard adopted the entry its
/// predecessor's late release let go of) differs, and so does control (am)'s (the
/// adoption whatever keeper the entry names).
#[tokio::test]
async fn the_adoption_matches_the_model_on_let_go_entries() {
    let server = TestServer::start().await.unwrap();
    let (monitored, captured) = common::monitored_client(&server.uri(), &["update"]).await;
    let locks = LockClient::new(monitored.database("model").collection("locks"));
    let nonces = Nonces::learn(&locks).await;
    set_base(&locks).await;
    let ops = Ops { ids: vec![] };
    let token = 5;
    let entry = |delay: Time| Entry {
        lock_id: 0,
        nonce: 2,
        token,
        keeper: Some(1),
        expires_at: Some(NOW + 2 + delay),
        after_unlocks: Unlocks::NONE,
        adopted: false,
        created_at: NOW - 1,
        delay,
        min_hold: 2,
        let_go: false,
    };
    let (mut mutant_differs, mut blind_differs) = (0, 0);
    for delay in [0, 1] {
        // The adoption a resume sends for a grant with this lock-delay.
        let resource = format!("capture-adopt-{delay}");
        let live = Doc {
            entry: Some(entry(delay)),
            fence: token,
            ..Doc::default()
        };
        seed(&locks, &resource, &live, &nonces, &ops).await;
        captured.lock().unwrap().clear();
        let guard = (locks.mutex(&resource).lock_id(lock_id(0)))
            .ttl(Duration::from_secs(u64::from(TTL)))
            .min_hold(Duration::from_secs(2))
            .try_acquire()
            .await
            .unwrap()
            .expect("the seeded entry, resumed");
        assert_eq!(guard.fencing_token(), base() + i64::from(token));
        // Made the adoption of the call of nonce 0, whose place the cases seed.
        let command = for_call(
            &replayable_update(&captured, &resource, RESOURCE),
            nonces.ids[0],
        );
        drop(guard);
        // The cases: the entry live; let go of within its hold (granted a tick ago, or
        // just now); let go of and read before its grant (a clock stepped back).
        let let_go = |e: Entry, created_at: Time| {
            (Entry { created_at, ..e })
                .let_go(NOW)
                .expect("within its hold")
        };
        let cases = [
            ("live", entry(delay)),
            (
                "let go of, granted a tick ago",
                let_go(entry(delay), NOW - 1),
            ),
            ("let go of, granted just now", let_go(entry(delay), NOW)),
            ("let go of, before its grant", {
                let mut e = entry(delay);
                let_go_before_grant(&mut e, 2);
                e
            }),
            // Live, but adopted by another process since the attempt's reply (the
            // adoption is a late copy of a dead process's): it must match nothing.
            (
                "live, naming another keeper than the reply showed",
                Entry {
                    keeper: Some(2),
                    adopted: true,
                    ..entry(delay)
                },
            ),
        ];
        for (name, e) in cases {
            // A place of another lock id, and the adopting call's, which the adoption takes
            // out.
            let queue = vec![
                Place {
                    lock_id: 1,
                    until: NOW + 5,
                    shared: false,
                    call: Some(1),
                },
                Place {
                    lock_id: 0,
                    until: NOW + 5,
                    shared: false,
                    call: Some(0),
                },
            ];
            let doc = Doc {
                entry: Some(e),
                fence: token,
                queue,
                ..Doc::default()
            };
            seed(&locks, RESOURCE, &doc, &nonces, &ops).await;
            let reply = (monitored.database("model"))
                .run_command(command.clone())
                .await
                .unwrap();
            let real = Reply::Adopted(count(&reply) == 1);
            let now = server_now(&locks).await;
            let after = (locks.collection())
                .find_one(doc! { "_id": RESOURCE })
                .await
                .unwrap();
            let real_doc = project(after, &nonces, &ops, now);
            let mut model = Server {
                docs: vec![doc.clone()],
            };
            let request = Request::Adopt {
                resource: 0,
                lock_id: 0,
                token,
                keeper: HANDLE_KEEPER,
                // The captured adoption's attempt was answered with the seeded entry, which
                // names keeper 1.
                answered: Some(1),
                after_unlocks: Unlocks::NONE,
                delay,
                call: 0,
            };
            let expected = model.execute(&request, NOW, &Bugs::default());
            assert_eq!(
                (&real, &real_doc),
                (&expected, &model.docs[0]),
                "delay {delay}, {name}: {doc:?}"
            );
            let mut mutant = Server {
                docs: vec![doc.clone()],
            };
            let bugs = Bugs {
                keeper_ignores_let_go: true,
                ..NO_BUGS
            };
            if (mutant.execute(&request, NOW, &bugs), &mutant.docs[0]) != (real.clone(), &real_doc)
            {
                mutant_differs += 1;
            }
            let mut blind = Server {
                docs: vec![doc.clone()],
            };
            let bugs = Bugs {
                adoption_ignores_keeper: true,
                ..NO_BUGS
            };
            if (blind.execute(&request, NOW, &bugs), &blind.docs[0]) != (real, &real_doc) {
                blind_differs += 1;
            }
        }
    }
    assert!(
        mutant_differs > 0,
        "no case tells control (aa)'s step apart"
    );
    assert!(blind_differs > 0, "no case tells control (am)'s step apart");
}

/// `n` of a write's reply.
fn count(reply: &Document) -> u64 {
    match reply.get("n") {
        Some(Bson::Int32(n)) => *n as u64,
        Some(Bson::Int64(n)) => *n as u64,
        _ => 0,
    }
}

/// A document for the purge cases: an exclusive entry or up to two shared ones, of lock ids
/// 0..=2 (the two documents of a case share them, so that a group spans both), live, expired,
/// within a lock-delay or without TTL; with `holds` (the group purge, which reads
/// `createdAt`: the model keeps it only for an entry with a minimum hold), each with a
/// minimum hold, granted long before or just now, and some let go of within it (in force,
/// or ended).
fn purge_document(rng: &mut StdRng, holds: bool) -> Doc {
    let entry = |rng: &mut StdRng, token: u8| {
        let expires_at = [
            Some(NOW + 2),
            Some(NOW + 1),
            Some(NOW - 2),
            Some(NOW - 4),
            None,
        ][rng.random_range(0..5)];
        let mut e = Entry {
            lock_id: rng.random_range(0..3),
            nonce: rng.random_range(0..3),
            token,
            keeper: [None, Some(1), Some(2)][rng.random_range(0..3)],
            expires_at,
            after_unlocks: Unlocks::NONE,
            adopted: false,
            created_at: 0,
            delay: 0,
            min_hold: 0,
            let_go: false,
        };
        if expires_at.is_some() && rng.random_bool(0.4) {
            e.delay = [1, 3][rng.random_range(0..2)];
        }
        if holds {
            e.min_hold = [1, 2][rng.random_range(0..2)];
            e.created_at = [NOW - 6, NOW - 1][rng.random_range(0..2)];
            if rng.random_bool(0.35) {
                // Let go of within its hold: in force until createdAt + minHoldMs.
                e.let_go = true;
                e.delay = e.min_hold;
                e.expires_at = Some(e.created_at + e.min_hold);
            }
        }
        e
    };
    let mut doc = Doc::default();
    if rng.random_bool(0.5) {
        doc.entry = Some(entry(rng, 3));
    } else {
        let first = entry(rng, 3);
        let mut second = entry(rng, 4);
        doc.shared.push(first);
        if second.lock_id != doc.shared[0].lock_id && rng.random_bool(0.6) {
            second.nonce = (doc.shared[0].nonce + 1) % 3;
            doc.shared.push(second);
        }
        doc.cap = [None, Some(2)][rng.random_range(0..2)];
    }
    let top = doc.entries().map(|e| e.token).max().unwrap_or(3);
    doc.fence = top + rng.random_range(0..2);
    doc.tombstones = (0..3).filter(|_| rng.random_bool(0.15)).collect();
    doc
}

/// `purge` and `purge_abandoned_groups` against the model's steps ([`Server::purge`],
/// [`Server::purge_groups`]) on two seeded documents, and the `idleSince` the library
/// writes against what the model's TTL index reads ([`Server::ttl_delete`]: the latest
/// `expiresAt`); the mutants of controls (ac) (a purge by the lease's end) and (t) (a let-go
/// entry taken for abandoned) must differ on some case.
#[tokio::test]
async fn purges_match_the_model() {
    let server = TestServer::start().await.unwrap();
    let locks = LockClient::new(server.client().database("model").collection("locks"));
    let nonces = Nonces::learn(&locks).await;
    set_base(&locks).await;
    // A collection of their own: a purge reads every document.
    let purges = LockClient::new(server.client().database("model").collection("purges"));
    let ops = Ops {
        ids: vec![ObjectId::new()],
    };
    let resources = ["p0", "p1"];
    let mut rng = StdRng::seed_from_u64(40);
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for case in 0..120 {
        let groups = case % 2 == 1;
        let docs: Vec<Doc> = (0..2).map(|_| purge_document(&mut rng, groups)).collect();
        for (resource, doc) in resources.iter().zip(&docs) {
            seed(&purges, resource, doc, &nonces, &ops).await;
        }
        let mut model = Server { docs: docs.clone() };
        let step = |server: &mut Server, bugs: &Bugs| match groups {
            true => server.purge_groups(NOW, bugs),
            false => server.purge(NOW, bugs),
        };
        let removed = step(&mut model, &Bugs::default());
        let purged = match groups {
            true => purges.purge_abandoned_groups().await.unwrap(),
            false => purges.purge().await.unwrap(),
        };
        let now = server_now(&purges).await;
        let mut real = vec![];
        for resource in resources {
            let stored = (purges.collection())
                .find_one(doc! { "_id": resource })
                .await
                .unwrap();
            // The TTL index reads `idleSince`: where every entry has a TTL and no tombstone
            // pushes it, the model reads the latest `expiresAt`.
            if let Some(Bson::DateTime(idle)) = stored.as_ref().and_then(|d| d.get("idleSince")) {
                let projected = project(stored.clone(), &nonces, &ops, now);
                let ends: Vec<Option<Time>> = projected.entries().map(|e| e.expires_at).collect();
                if !ends.is_empty() && !ends.contains(&None) && projected.tombstones.is_empty() {
                    let tick = NOW as i64
                        + ((idle.timestamp_millis() - now.timestamp_millis()) as f64 / 1000.0)
                            .round() as i64;
                    let latest = ends.iter().flatten().max().copied().unwrap();
                    assert_eq!(
                        tick,
                        i64::from(latest),
                        "case {case}: idleSince of {resource} in {projected:?}"
                    );
                    *counts.entry("idleSince read".to_owned()).or_default() += 1;
                }
            }
            real.push(project(stored, &nonces, &ops, now));
        }
        assert_eq!(
            real,
            model.docs,
            "case {case}: {} on {docs:?}",
            if groups {
                "purge_abandoned_groups"
            } else {
                "purge"
            }
        );
        let changed = (0..2).filter(|&r| real[r] != docs[r]).count() as u64;
        // A purge counts the documents it changed; a group purge its statements' changes
        // (a document two groups touch counts twice).
        match groups {
            false => assert_eq!(purged.resources(), changed, "case {case}: the count"),
            true => assert!(purged.resources() >= changed, "case {case}: the count"),
        }
        let name = if groups { "groups" } else { "purge" };
        *counts.entry(format!("{name}: cases")).or_default() += 1;
        if !removed.is_empty() {
            *counts
                .entry(format!("{name}: removed something"))
                .or_default() += 1;
        }
        // What decides: an entry in force that stays (within its delay or hold), a live
        // lease a group purge ends, a let-go entry that makes no group.
        let kept = |pick: fn(&Entry) -> bool| {
            (0..2).any(|r| {
                (docs[r].entries())
                    .any(|e| pick(e) && real[r].entries().any(|k| k.token == e.token))
            })
        };
        if kept(|e| e.is_live(NOW) && !e.holds_by_time(NOW)) {
            *counts
                .entry(format!("{name}: kept within a delay or hold"))
                .or_default() += 1;
        }
        if groups
            && removed.iter().any(|&(r, t)| {
                docs[r as usize]
                    .entries()
                    .any(|e| e.token == t && e.is_live(NOW))
            })
        {
            *counts
                .entry("groups: ended a live lease".to_owned())
                .or_default() += 1;
        }
        let mutant = match groups {
            true => Bugs {
                purge_takes_let_go: true,
                ..NO_BUGS
            },
            false => Bugs {
                purge_by_lease_end: true,
                ..NO_BUGS
            },
        };
        let mut other = Server { docs: docs.clone() };
        step(&mut other, &mutant);
        if other.docs != real {
            *counts.entry(format!("{name}: mutant differs")).or_default() += 1;
        }
    }
    println!("{counts:#?}");
    for needed in [
        "purge: removed something",
        "purge: kept within a delay or hold",
        "purge: mutant differs",
        "groups: removed something",
        "groups: ended a live lease",
        "groups: kept within a delay or hold",
        "groups: mutant differs",
        "idleSince read",
    ] {
        assert!(
            counts.contains_key(needed),
            "no case of {needed}: {counts:#?}"
        );
    }
}
