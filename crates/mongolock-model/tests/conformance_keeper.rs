//! Conformance of the keeper's renewal and of resume's adoption: the model's
//! [`Request::Renew`] and [`Request::Adopt`] against the commands the library sends.
//!
//! Both commands are internal (`command/keepalive.rs`), reached only through handles: a
//! handle of lock id `L0` resumes a seeded entry on a resource of its own (its attempt is
//! answered "already held", and it adopts the entry), and its lease keeper renews it every
//! 100 ms. Command monitoring captures the adoption (`update` of one statement), the
//! renewal (`update` with `ordered: false`) and, once the entry's token is bumped so that a
//! renewal comes up short, the keeper's read of which of its leases are live (`aggregate`,
//! `keepalive::live_leases`). Each generated case seeds two documents (`r0`, `r1`: the
//! named resource and another holding entries of the same lock id and keeper), runs that
//! very command with its query's `_id` made the named resource, and runs the model's step
//! on the same two documents. The projected documents (every entry with its lock id,
//! nonce, token, keeper, expiry to the second, `afterUnlocks`, `adopted`, `delayMs`,
//! `minHoldMs`, `letGoAt`, `createdAt` with a hold; the cap, the fence, the live places of
//! the line) and the reply class (a renewal: `n` and, per lease, whether the keeper's read
//! lists it; an adoption: whether it matched) must be equal.
//!
//! The cases: an exclusive lease and a reader's share, each granted without and with a
//! lock-delay of a tick; the adoption also from a client that doubts an `unlock` of `L0`
//! (a write concern error: its adoption names that call). Generated (seeds 50–52, 100
//! cases each): the lease's entry live, live one more second, run out at the boundary
//! (`expiresAt` at the command's second plus the grant's delay), expired, or without TTL;
//! naming the handle's keeper, another or none; let go of within a minimum hold (a tick
//! ago, or read before its grant: a clock stepped back); revoked (force-released at the
//! command's second, so that an entry with a lock-delay stays marked in force, or removed);
//! other entries of the same lock id under other tokens, of other lock ids, in both
//! documents; places of the lock id and others in line, each naming the adopting call
//! (every captured adoption is made one call's, [`ADOPTING`]), another call or none; the
//! adoption's attempt answered with the entry naming the lease's keeper, the adopting
//! client's own, none, or a keeper the entry no longer names (every captured adoption is
//! made that answer's, its query's first keeper replaced). Mutant
//! steps that must each differ from the library on some case, so that the comparison can
//! fail: a keeper that renews by lock id alone (control (e)), the keeper's statements
//! without the `letGoAt` test (control (aa)), "held" by time alone (control (z)), and an
//! adoption that takes every place of its lock id (control (al), as before issue 40's fix),
//! and an adoption whatever keeper the entry names (control (am), as before the adoption
//! asked for the keeper its attempt was answered with).

mod common;
use common::{Captured, for_call};

use std::collections::BTreeMap;
use std::time::Duration;

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Document, doc};
use mongolock::{LockClient, LockDetails};
use mongolock_model::server::{
    Bugs, Doc, Entry, Place, Reply, Request, Server, Time, UnlockOp, Unlocks,
};
use mongolock_testkit::TestServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The model's clock when a command runs (a tick is a second).
const NOW: Time = 10;
/// The TTL of every lease, in ticks (seconds).
const TTL: Time = 3;
/// The lease's token (the model's; stored above [`Fixture::base`]).
const TOKEN: u8 = 5;
/// The resources of a case, by the model's index.
const RESOURCES: [&str; 2] = ["r0", "r1"];
/// The model's keeper id for the capturing client's own keeper (its real id is random).
const HANDLE_KEEPER: u8 = 7;
/// The model's keeper id for the keeper of the client that doubts an `unlock`.
const DOUBTING_KEEPER: u8 = 8;
/// The model's nonce naming the adopting call (the ids 0 to 2 are other attempts' and
/// calls'): every captured adoption is made that call's ([`for_call`]).
const ADOPTING: u8 = 3;
/// The model's id of the doubted `unlock` (the ids 0 and 1 are other calls).
const DOUBTED: UnlockOp = 2;

/// What a case's documents are written and read with: the tokens' base, the nonces'
/// and unlock calls' real ids, the real ids of the model's keepers.
struct Fixture {
    /// Stored tokens are the model's plus this: far above the clock's floor on tokens
    /// (`$$NOW` in microseconds, which the model leaves out).
    base: i64,
    nonces: Vec<ObjectId>,
    ops: Vec<ObjectId>,
    keepers: BTreeMap<u8, String>,
}

impl Fixture {
    fn keeper_name(&self, k: u8) -> String {
        self.keepers.get(&k).cloned().unwrap_or(format!("k{k}"))
    }

    fn keeper_id(&self, name: &str) -> u8 {
        match self.keepers.iter().find(|(_, real)| *real == name) {
            Some((&k, _)) => k,
            None => name[1..].parse().expect("a seeded keeper"),
        }
    }

    /// The document `doc` of `resource` as stored, with times relative to the server's
    /// `now` (a tick a second, `NOW` being `now`).
    fn stored(&self, resource: &str, doc: &Doc, now: DateTime) -> Document {
        let at = |t: Time| {
            DateTime::from_millis(now.timestamp_millis() + (i64::from(t) - i64::from(NOW)) * 1000)
        };
        let write = |e: &Entry, shared: bool| {
            let mut entry = doc! {
                "lockId": format!("L{}", e.lock_id),
                "nonce": self.nonces[e.nonce as usize],
                "owner": Bson::Null,
                "host": "h",
                "token": self.base + i64::from(e.token),
                "createdAt": at(NOW - 1),
                "renewedAt": at(NOW - 1),
                "expiresAt": e.expires_at.map_or(Bson::Null, |t| Bson::DateTime(at(t))),
                "ttlMs": e.expires_at.map_or(Bson::Null, |_| Bson::Int64(i64::from(TTL) * 1000)),
            };
            if let Some(k) = e.keeper {
                entry.insert("keeper", self.keeper_name(k));
            }
            if shared {
                entry.insert("kind", "shared");
            }
            if !e.after_unlocks.is_empty() {
                let ids: Vec<Bson> = (e.after_unlocks.ops())
                    .map(|op| Bson::ObjectId(self.ops[op as usize]))
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
                entry.insert("letGoAt", at(e.created_at.max(NOW - 1)));
            }
            Bson::Document(entry)
        };
        let queue: Vec<Bson> = (doc.queue.iter())
            .map(|p| {
                let mut place = doc! {
                    "lockId": format!("L{}", p.lock_id),
                    "kind": if p.shared { "shared" } else { "exclusive" },
                    "until": at(p.until),
                };
                if let Some(call) = p.call {
                    place.insert("call", self.nonces[call as usize]);
                }
                Bson::Document(place)
            })
            .collect();
        let ends: Vec<Option<Time>> = doc.entries().map(|e| e.expires_at).collect();
        let idle_since = match ends.iter().copied().collect::<Option<Vec<Time>>>() {
            Some(ends) if !ends.is_empty() => {
                Bson::DateTime(at(ends.into_iter().max().expect("an entry")))
            }
            _ => Bson::Null,
        };
        doc! {
            "_id": resource,
            "mongolock": 1,
            "fence": self.base + i64::from(doc.fence),
            "exclusive": doc.entry.as_ref().map_or(Bson::Null, |e| write(e, false)),
            "shared": doc.shared.iter().map(|e| write(e, true)).collect::<Vec<_>>(),
            "cap": doc.cap.map_or(Bson::Null, |c| Bson::Int32(i32::from(c))),
            "released": [],
            "queue": queue,
            "idleSince": idle_since,
        }
    }

    /// The stored document, projected to the model's fields, read at server time `now`.
    fn project(&self, stored: Option<Document>, now: DateTime) -> Doc {
        let Some(stored) = stored else {
            return Doc::default();
        };
        let tick = |d: &DateTime| {
            let ms = d.timestamp_millis() - now.timestamp_millis();
            (i64::from(NOW) + (ms as f64 / 1000.0).round() as i64) as Time
        };
        let ticks = |value: Option<&Bson>| match value {
            Some(Bson::Int32(ms)) => (*ms / 1000) as Time,
            Some(Bson::Int64(ms)) => (*ms / 1000) as Time,
            _ => 0,
        };
        let read = |e: &Document| Entry {
            lock_id: e.get_str("lockId").unwrap()[1..].parse().unwrap(),
            nonce: (self.nonces.iter())
                .position(|n| Ok(*n) == e.get_object_id("nonce"))
                .expect("a nonce of the case") as u8,
            token: (e.get_i64("token").unwrap() - self.base) as u8,
            keeper: e.get_str("keeper").ok().map(|k| self.keeper_id(k)),
            expires_at: e.get_datetime("expiresAt").ok().map(tick),
            after_unlocks: match e.get("afterUnlocks") {
                Some(Bson::Array(ids)) => ids.iter().fold(Unlocks::NONE, |set, id| {
                    let op = (self.ops.iter())
                        .position(|known| Some(*known) == id.as_object_id())
                        .expect("an unlock of the case");
                    set.union(Unlocks::of(op as UnlockOp))
                }),
                _ => Unlocks::NONE,
            },
            adopted: e.get_bool("adopted").unwrap_or(false),
            created_at: match e.get("minHoldMs") {
                Some(_) => tick(e.get_datetime("createdAt").unwrap()),
                None => 0,
            },
            delay: ticks(e.get("delayMs")),
            min_hold: ticks(e.get("minHoldMs")),
            let_go: e.get_datetime("letGoAt").is_ok(),
        };
        let shared = match stored.get("shared") {
            Some(Bson::Array(list)) => list
                .iter()
                .filter_map(|e| e.as_document())
                .map(read)
                .collect(),
            _ => vec![],
        };
        let queue = match stored.get("queue") {
            Some(Bson::Array(list)) => (list.iter())
                .filter_map(|p| p.as_document())
                .filter(|p| p.get_datetime("until").is_ok_and(|until| *until > now))
                .map(|p| Place {
                    lock_id: p.get_str("lockId").unwrap()[1..].parse().unwrap(),
                    until: tick(p.get_datetime("until").unwrap()),
                    shared: p.get_str("kind") == Ok("shared"),
                    call: (p.get_object_id("call").ok())
                        .map(|c| self.nonces.iter().position(|n| *n == c).expect("a call") as u8),
                })
                .collect(),
            _ => vec![],
        };
        Doc {
            entry: stored.get_document("exclusive").ok().map(read),
            shared,
            cap: match stored.get("cap") {
                Some(Bson::Int32(c)) => Some(*c as u8),
                Some(Bson::Int64(c)) => Some(*c as u8),
                _ => None,
            },
            fence: match stored.get("fence") {
                Some(Bson::Int64(f)) => (*f - self.base) as u8,
                _ => 0,
            },
            tombstones: vec![],
            queue,
        }
    }
}

/// The server's clock (`hello`'s `localTime`).
async fn server_now(client: &mongodb::Client) -> DateTime {
    let reply = (client.database("model"))
        .run_command(doc! { "hello": 1 })
        .await
        .unwrap();
    *reply.get_datetime("localTime").expect("the server's time")
}

/// `n` of a write's reply.
fn count(reply: &Document) -> u8 {
    match reply.get("n") {
        Some(Bson::Int32(n)) => *n as u8,
        Some(Bson::Int64(n)) => *n as u8,
        _ => 0,
    }
}

/// The commands one lease sent: the adoption, the keeper's renewal and its read, each with
/// the fields the driver adds (session, cluster time, `$db`) left off.
#[derive(Clone)]
struct Commands {
    adopt: Document,
    renew: Document,
    read: Document,
}

/// The captured commands of `name` (`update`, `aggregate`) since `from`, as sent.
fn captured_since(captured: &Captured, from: usize, name: &str) -> Vec<Document> {
    (captured.lock().unwrap().iter().skip(from))
        .filter(|c| c.contains_key(name))
        .cloned()
        .collect()
}

/// Whether `command`'s first statement's query names `resource`.
fn names(command: &Document, resource: &str) -> bool {
    (command.get_array("updates").ok())
        .and_then(|u| u.first()?.as_document()?.get_document("q").ok())
        .is_some_and(|q| q.get_str("_id") == Ok(resource))
}

/// `command` with only `keys` kept.
fn only(command: &Document, keys: &[&str]) -> Document {
    let mut out = doc! {};
    for (key, value) in command {
        if keys.contains(&key.as_str()) {
            out.insert(key, value.clone());
        }
    }
    out
}

/// Waits (up to five seconds) for a command captured since `from` that `find` accepts.
async fn wait_for(
    captured: &Captured,
    from: usize,
    name: &str,
    find: impl Fn(&Document) -> bool,
) -> Document {
    for _ in 0..500 {
        if let Some(c) = captured_since(captured, from, name).into_iter().find(&find) {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no {name} captured");
}

/// The lease a capture resumes: lock id 0, token [`TOKEN`], live, naming keeper 1.
fn lease(delay: Time) -> Entry {
    Entry {
        lock_id: 0,
        nonce: 2,
        token: TOKEN,
        keeper: Some(1),
        expires_at: Some(NOW + 5 + delay),
        after_unlocks: Unlocks::NONE,
        adopted: false,
        created_at: 0,
        delay,
        min_hold: 0,
        let_go: false,
    }
}

/// Resumes a seeded lease of lock id 0 (`shared`: a reader's share) with a lock-delay of
/// `delay` ticks through a handle of `locks` on a resource of its own, and captures the
/// adoption, a renewal, and (the entry's token bumped, so that a renewal renews nothing)
/// the keeper's read.
async fn capture(
    fixture: &Fixture,
    locks: &LockClient,
    captured: &Captured,
    keeper: &str,
    shared: bool,
    delay: Time,
    name: &str,
) -> Commands {
    let resource = format!("capture-{name}");
    let doc = match shared {
        false => Doc {
            entry: Some(lease(delay)),
            fence: TOKEN,
            ..Doc::default()
        },
        true => Doc {
            shared: vec![lease(delay)],
            fence: TOKEN,
            ..Doc::default()
        },
    };
    let coll = locks.collection();
    coll.delete_many(doc! { "_id": &resource }).await.unwrap();
    let now = server_now(coll.client()).await;
    coll.insert_one(fixture.stored(&resource, &doc, now))
        .await
        .unwrap();
    let from = captured.lock().unwrap().len();
    let ttl = Duration::from_secs(u64::from(TTL));
    let every = Duration::from_millis(100);
    let guard = match shared {
        false => {
            (locks.mutex(&resource).lock_id("L0"))
                .ttl(ttl)
                .extend_every(every)
                .try_acquire()
                .await
        }
        true => {
            (locks.rwlock(&resource).lock_id("L0"))
                .ttl(ttl)
                .extend_every(every)
                .try_read()
                .await
        }
    };
    let guard = guard.unwrap().expect("the seeded lease, resumed");
    assert_eq!(guard.fencing_token(), fixture.base + i64::from(TOKEN));
    // The adoption sets `adopted`; the renewal, `ordered: false`, does not.
    let adopts = |c: &Document| format!("{c:?}").contains("\"adopted\"");
    let adopt = wait_for(captured, from, "update", |c| {
        names(c, &resource) && adopts(c)
    })
    .await;
    let renew = wait_for(captured, from, "update", |c| {
        names(c, &resource) && c.get_bool("ordered") == Ok(false) && !adopts(c)
    })
    .await;
    // A renewal that renews nothing makes the keeper ask which of its leases are live.
    let path = if shared {
        "shared.0.token"
    } else {
        "exclusive.token"
    };
    let bumped = fixture.base + 50;
    let from = captured.lock().unwrap().len();
    coll.update_one(doc! { "_id": &resource }, doc! { "$set": { path: bumped } })
        .await
        .unwrap();
    let read = wait_for(captured, from, "aggregate", |c| {
        (c.get_array("pipeline")).is_ok_and(|p| format!("{p:?}").contains(keeper))
    })
    .await;
    drop(guard);
    for command in [&adopt, &renew] {
        assert_eq!(
            command.get_array("updates").unwrap().len(),
            1,
            "one statement"
        );
    }
    Commands {
        adopt: only(&adopt, &["update", "updates", "writeConcern"]),
        renew: only(&renew, &["update", "updates", "ordered", "writeConcern"]),
        read: only(&read, &["aggregate", "pipeline", "cursor", "readConcern"]),
    }
}

/// `command` (a captured adoption) made the adoption of an attempt answered "already held"
/// with the entry naming `answered` (a keeper's real id, or null: none): the first of the
/// keepers its query asks for (`keepalive::adopted_keepers`, `{ $in: [<answered>,
/// <this keeper>] }`) replaced, as [`aimed`] replaces the resource.
fn answered_by(command: &Document, answered: Bson) -> Document {
    let mut out = command.clone();
    let Some(Bson::Array(updates)) = out.get_mut("updates") else {
        panic!("an update: {command}");
    };
    let Some(Bson::Document(statement)) = updates.first_mut() else {
        panic!("a statement: {command}");
    };
    let Ok(query) = statement.get_document_mut("q") else {
        panic!("a query: {command}");
    };
    let keepers = match query.get_document_mut("shared") {
        Ok(shared) => (shared.get_document_mut("$elemMatch").ok())
            .and_then(|entry| entry.get_document_mut("keeper").ok()),
        Err(_) => query.get_document_mut("exclusive.keeper").ok(),
    };
    let Some(Bson::Array(keepers)) = keepers.and_then(|k| k.get_mut("$in")) else {
        panic!("the adoption asks for the keepers it may find: {command}");
    };
    assert_eq!(
        keepers.len(),
        2,
        "the answered keeper and its own: {command}"
    );
    keepers[0] = answered;
    out
}

/// `command` (an `update` of one statement) with its query's `_id` made `resource`.
fn aimed(command: &Document, resource: &str) -> Document {
    let mut out = command.clone();
    let mut statement = (out.get_array("updates").unwrap()[0])
        .as_document()
        .unwrap()
        .clone();
    let mut query = statement.get_document("q").unwrap().clone();
    query.insert("_id", resource);
    statement.insert("q", query);
    out.insert("updates", vec![Bson::Document(statement)]);
    out
}

/// A case's lease: its kind, its grant's lock-delay, the client that adopts it.
#[derive(Clone, Copy, Debug)]
struct Lease {
    shared: bool,
    delay: Time,
    /// The adopting client doubts an `unlock` of lock id 0.
    doubting: bool,
}

/// The lease's entry as a case finds it (`keeper`: whose keeper it names), or none.
fn lease_entry(rng: &mut StdRng, l: Lease, keeper: u8) -> Option<Entry> {
    let mut e = lease(l.delay);
    e.keeper = [Some(keeper), Some(keeper), Some(1), None][rng.random_range(0..4)];
    // Live, live one more second, at the boundary (`expiresAt` at the command's second
    // plus the grant's delay: run out when the command runs), expired, without TTL.
    e.expires_at = [
        Some(NOW + 2 + l.delay),
        Some(NOW + 1 + l.delay),
        Some(NOW + l.delay),
        Some(NOW - 2),
        None,
    ][rng.random_range(0..5)];
    e.adopted = rng.random_bool(0.3);
    e.after_unlocks = (0..=DOUBTED)
        .filter(|_| rng.random_bool(0.2))
        .fold(Unlocks::NONE, |set, op| set.union(Unlocks::of(op)));
    match rng.random_range(0..10) {
        // Let go of within a minimum hold, granted a tick ago.
        0 => {
            e.min_hold = 2;
            e.created_at = NOW - 1;
            e.expires_at = Some(NOW + 2 + l.delay);
            e = e.let_go(NOW).expect("within its hold");
        }
        // Let go of, read before its grant (the server's clock stepped back since).
        1 => {
            e.min_hold = 2;
            e.created_at = NOW + 1;
            e.let_go = true;
            e.delay = 2;
            e.expires_at = Some(NOW + 3);
        }
        // Revoked: force-released (with a lock-delay, kept marked in force for it).
        2 | 3 => {
            e.expires_at = Some(NOW + 2 + l.delay);
            let mut server = Server {
                docs: vec![Doc {
                    entry: Some(e.clone()),
                    fence: TOKEN,
                    ..Doc::default()
                }],
            };
            server.execute(
                &Request::ForceRelease { resource: 0 },
                NOW,
                &Bugs::default(),
            );
            return server.docs[0].entry.clone();
        }
        4 => return None,
        _ => {}
    }
    Some(e)
}

/// Another entry of a case's document: of lock id 0 under another token, or of lock id 1
/// or 2, live, run out, or without TTL, naming the lease's keeper or not.
fn other_entry(rng: &mut StdRng, token: u8, keeper: u8) -> Entry {
    Entry {
        lock_id: [0, 0, 1, 2][rng.random_range(0..4)],
        nonce: rng.random_range(0..2),
        token,
        keeper: [Some(keeper), Some(1), None][rng.random_range(0..3)],
        expires_at: [Some(NOW + 2), Some(NOW), Some(NOW - 2), None][rng.random_range(0..4)],
        after_unlocks: Unlocks::NONE,
        adopted: rng.random_bool(0.3),
        created_at: 0,
        delay: 0,
        min_hold: 0,
        let_go: false,
    }
}

/// A case's document: the lease's entry on its side (in the named resource, most often;
/// in the other too, now and then, under the same token of that resource's fence), other
/// entries (an exclusive one of another token beside a share, or up to two shares), a line.
fn document(rng: &mut StdRng, l: Lease, keeper: u8, named: bool) -> Doc {
    let mut doc = Doc::default();
    let lease = match named || rng.random_bool(0.4) {
        true => lease_entry(rng, l, keeper),
        false => None,
    };
    let mut tokens = vec![3, 4, 6];
    let mut other = |rng: &mut StdRng| {
        let token = tokens.remove(rng.random_range(0..tokens.len()));
        other_entry(rng, token, keeper)
    };
    if l.shared {
        doc.shared.extend(lease);
        if rng.random_bool(0.5) {
            doc.shared.push(other(rng));
        }
        doc.cap = [None, Some(2)][rng.random_range(0..2)];
        if doc.shared.is_empty() {
            doc.cap = None;
            if rng.random_bool(0.5) {
                doc.entry = Some(other(rng));
            }
        }
    } else {
        doc.entry = lease.or_else(|| rng.random_bool(0.5).then(|| other(rng)));
        if doc.entry.is_none() && rng.random_bool(0.5) {
            doc.shared.push(other(rng));
        }
    }
    doc.fence = doc.entries().map(|e| e.token).max().unwrap_or(TOKEN) + rng.random_range(0..2);
    // The line: the lock id's place (kept by its waiting attempt answered "already held"),
    // behind another's or alone, naming the adopting call, another call of the lock id (an
    // adoption that lands late, after its call ended, leaves it: issue 40) or none (written
    // before places named their call); another lock id's naming its call or none.
    for lock_id in [1, 0] {
        if rng.random_bool(0.4) {
            let calls = match lock_id {
                0 => [Some(ADOPTING), Some(1), None],
                _ => [Some(0), None, None],
            };
            doc.queue.push(Place {
                lock_id,
                until: [NOW + 1, NOW + 5][rng.random_range(0..2)],
                shared: rng.random_bool(0.3),
                call: calls[rng.random_range(0..3)],
            });
        }
    }
    doc
}

/// Which requests a case makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Call {
    Renew,
    Adopt,
}

/// The keeper's renewal and resume's adoption against the model's steps, on generated
/// documents (see the module docs).
#[tokio::test]
async fn the_keepers_renewal_and_the_adoption_match_the_model() {
    let server = TestServer::start().await.unwrap();
    let (monitored, captured) =
        common::monitored_client(&server.uri(), &["update", "aggregate"]).await;
    let coll = monitored.database("model").collection::<Document>("locks");
    let locks = LockClient::new(coll.clone());
    let doubting = LockClient::new(coll.clone());
    let floor = server_now(&monitored).await.timestamp_millis() * 1000;
    let mut fixture = Fixture {
        base: floor + 3_600_000_000,
        // Three attempts' and calls', and the adopting call's (`ADOPTING`).
        nonces: (0..4).map(|_| ObjectId::new()).collect(),
        ops: vec![ObjectId::new(), ObjectId::new()],
        keepers: BTreeMap::new(),
    };
    // The doubted unlock: it runs, its reply is a write concern error, the library's repeat
    // is answered; its id is learnt from a grant made afterwards, which names it.
    (monitored.database("admin"))
        .run_command(doc! {
            "configureFailPoint": "failCommand", "mode": { "times": 1 },
            "data": {
                "failCommands": ["update"],
                "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" },
            },
        })
        .await
        .unwrap();
    doubting.unlock("L0").await.expect("the repeat is answered");
    let grant = (doubting.xlock("calibration-unlock", "L0", LockDetails::default()))
        .await
        .unwrap();
    let calibration = coll
        .find_one(doc! { "_id": "calibration-unlock" })
        .await
        .unwrap()
        .expect("the grant's document");
    let named = calibration
        .get_document("exclusive")
        .unwrap()
        .get_array("afterUnlocks")
        .expect("a grant made while the unlock is doubted names it")
        .clone();
    fixture.ops.push(named[0].as_object_id().unwrap());
    doubting.release(&grant).await.unwrap();
    // The keepers' ids, learnt from the renewals of leases on resources of their own.
    for (k, client) in [(HANDLE_KEEPER, &locks), (DOUBTING_KEEPER, &doubting)] {
        let resource = format!("keeper-{k}");
        let from = captured.lock().unwrap().len();
        let guard = (client.mutex(&resource))
            .ttl(Duration::from_secs(u64::from(TTL)))
            .extend_every(Duration::from_millis(100))
            .acquire()
            .await
            .unwrap();
        let renewal = wait_for(&captured, from, "update", |c| {
            names(c, &resource) && c.get_bool("ordered") == Ok(false)
        })
        .await;
        let q = (renewal.get_array("updates").unwrap()[0].as_document())
            .unwrap()
            .get_document("q")
            .unwrap()
            .clone();
        let keeper = q.get_str("exclusive.keeper").expect("the keeper named");
        fixture.keepers.insert(k, keeper.to_owned());
        guard.release().await.unwrap();
    }
    // The commands, per lease kind and lock-delay; the adoption also from the doubting client.
    let mut commands = BTreeMap::new();
    for shared in [false, true] {
        for delay in [0, 1] {
            for doubts in [false, true] {
                let (client, k) = match doubts {
                    true => (&doubting, DOUBTING_KEEPER),
                    false => (&locks, HANDLE_KEEPER),
                };
                let keeper = fixture.keeper_name(k);
                let name = format!("{shared}-{delay}-{doubts}");
                let c = capture(&fixture, client, &captured, &keeper, shared, delay, &name);
                commands.insert((shared, delay, doubts), c.await);
            }
        }
    }
    let mutants = [
        (
            "a keeper that renews by lock id alone (control (e))",
            Bugs {
                keeper_by_lock_id: true,
                ..Bugs::default()
            },
        ),
        (
            "the keeper's statements without the letGoAt test (control (aa))",
            Bugs {
                keeper_ignores_let_go: true,
                ..Bugs::default()
            },
        ),
        (
            "held by time alone (control (z))",
            Bugs {
                let_go_held: true,
                ..Bugs::default()
            },
        ),
        (
            "an adoption that takes every place of its lock id (control (al))",
            Bugs {
                adoption_by_lock_id: true,
                ..Bugs::default()
            },
        ),
        (
            "an adoption whatever keeper the entry names (control (am))",
            Bugs {
                adoption_ignores_keeper: true,
                ..Bugs::default()
            },
        ),
    ];
    let mut differs = [0usize; 5];
    let mut seen = BTreeMap::<String, usize>::new();
    let mut note = |what: String| *seen.entry(what).or_default() += 1;
    let mut cases = 0;
    for seed in 50..53u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        for case in 0..100 {
            cases += 1;
            let call = [Call::Renew, Call::Adopt][rng.random_range(0..2)];
            let l = Lease {
                shared: rng.random_bool(0.5),
                delay: rng.random_range(0..2),
                doubting: call == Call::Adopt && rng.random_bool(0.3),
            };
            let keeper = if l.doubting {
                DOUBTING_KEEPER
            } else {
                HANDLE_KEEPER
            };
            let target = rng.random_range(0..2);
            let docs: Vec<Doc> = (0..2)
                .map(|r| document(&mut rng, l, keeper, r == target))
                .collect();
            let now = server_now(&monitored).await;
            for (r, doc) in docs.iter().enumerate() {
                coll.delete_many(doc! { "_id": RESOURCES[r] })
                    .await
                    .unwrap();
                coll.insert_one(fixture.stored(RESOURCES[r], doc, now))
                    .await
                    .unwrap();
            }
            let c = &commands[&(l.shared, l.delay, l.doubting)];
            // An adoption's: the keeper the attempt's "already held" reply showed: the
            // lease's (1), this client's own (an adoption that landed, sent again), none (a
            // low-level call's entry), or a keeper the entry no longer names (a dead
            // process's, whose late adoption lands after another adopted the lease).
            let answered = [Some(1), Some(keeper), None, Some(9)][rng.random_range(0..4)];
            let (request, real) = match call {
                Call::Renew => {
                    let reply = (monitored.database("model"))
                        .run_command(aimed(&c.renew, RESOURCES[target]))
                        .await
                        .unwrap();
                    // The keeper's read, run after every renewal (the keeper runs it when
                    // one comes up short): whether it lists the lease.
                    let rows = (monitored.database("model"))
                        .run_command(c.read.clone())
                        .await
                        .unwrap();
                    let rows = rows
                        .get_document("cursor")
                        .unwrap()
                        .get_array("firstBatch")
                        .unwrap();
                    let listed = rows.iter().filter_map(|r| r.as_document()).any(|r| {
                        r.get_str("resource") == Ok(RESOURCES[target])
                            && r.get_str("lockId") == Ok("L0")
                            && r.get_i64("token") == Ok(fixture.base + i64::from(TOKEN))
                    });
                    let request = Request::Renew {
                        lock_id: 0,
                        keeper,
                        leases: vec![(target as u8, TOKEN)],
                        ttl: TTL,
                        delay: l.delay,
                    };
                    let real = Reply::Renewed {
                        live: vec![listed],
                        count: count(&reply),
                    };
                    (request, real)
                }
                Call::Adopt => {
                    let adopt = answered_by(
                        &for_call(&c.adopt, fixture.nonces[ADOPTING as usize]),
                        answered.map_or(Bson::Null, |k| Bson::from(fixture.keeper_name(k))),
                    );
                    let reply = (monitored.database("model"))
                        .run_command(aimed(&adopt, RESOURCES[target]))
                        .await
                        .unwrap();
                    let request = Request::Adopt {
                        resource: target as u8,
                        lock_id: 0,
                        token: TOKEN,
                        keeper,
                        answered,
                        after_unlocks: match l.doubting {
                            true => Unlocks::of(DOUBTED),
                            false => Unlocks::NONE,
                        },
                        delay: l.delay,
                        call: ADOPTING,
                    };
                    (request, Reply::Adopted(count(&reply) == 1))
                }
            };
            let now = server_now(&monitored).await;
            let mut real_docs = vec![];
            for resource in RESOURCES {
                let stored = coll.find_one(doc! { "_id": resource }).await.unwrap();
                real_docs.push(fixture.project(stored, now));
            }
            let step = |bugs: &Bugs| {
                let mut model = Server { docs: docs.clone() };
                let reply = model.execute(&request, NOW, bugs);
                for doc in &mut model.docs {
                    doc.queue.retain(|p| p.until > NOW);
                }
                (reply, model.docs)
            };
            let expected = step(&Bugs::default());
            assert_eq!(
                (&real, &real_docs),
                (&expected.0, &expected.1),
                "seed {seed}, case {case}: {call:?} of {l:?} on r{target}, documents {docs:?}"
            );
            for (i, (_, bugs)) in mutants.iter().enumerate() {
                if step(bugs) != expected {
                    differs[i] += 1;
                }
            }
            note(format!("{call:?} {real:?}"));
            let lease_of = |doc: &Doc| {
                doc.entries()
                    .find(|e| e.lock_id == 0 && e.token == TOKEN)
                    .cloned()
            };
            if let Some(e) = lease_of(&docs[target]) {
                if e.expires_at == Some(NOW + l.delay) {
                    note(format!("{call:?} at the boundary"));
                }
                if e.let_go {
                    note(format!("{call:?} let go of"));
                }
                if e.keeper != Some(keeper) {
                    note(format!("{call:?} another keeper"));
                }
                if call == Call::Adopt && e.holds(NOW) && !e.let_go {
                    if e.keeper != answered && e.keeper != Some(keeper) {
                        note(format!("{call:?} live, renamed since the reply"));
                    }
                    if e.keeper.is_none() && answered.is_none() {
                        note(format!("{call:?} live, naming no keeper, answered so"));
                    }
                }
                if e.let_go && e.min_hold == 0 {
                    note(format!("{call:?} revoked, in force for its delay"));
                }
            } else {
                note(format!("{call:?} no lease"));
            }
            if let Some(e) = lease_of(&docs[1 - target])
                && e.keeper == Some(keeper)
                && e.holds(NOW)
            {
                note(format!("{call:?} the lease held in the other resource too"));
            }
            if l.doubting {
                note(format!("{call:?} naming a doubted unlock"));
            }
        }
    }
    println!("{cases} cases: {seen:#?}");
    for (what, min) in [
        ("Renew Renewed { live: [true], count: 1 }", 5),
        ("Renew Renewed { live: [false], count: 0 }", 5),
        ("Adopt Adopted(true)", 5),
        ("Adopt Adopted(false)", 5),
        ("Renew at the boundary", 3),
        ("Adopt at the boundary", 3),
        ("Renew let go of", 3),
        ("Adopt let go of", 3),
        ("Renew another keeper", 3),
        ("Adopt another keeper", 3),
        ("Adopt live, renamed since the reply", 3),
        ("Adopt live, naming no keeper, answered so", 1),
        ("Renew revoked, in force for its delay", 1),
        ("Adopt revoked, in force for its delay", 1),
        ("Renew the lease held in the other resource too", 1),
        ("Adopt the lease held in the other resource too", 1),
        ("Adopt naming a doubted unlock", 5),
    ] {
        let n = seen.get(what).copied().unwrap_or(0);
        assert!(n >= min, "{what}: {n} cases, fewer than {min}");
    }
    for ((name, _), n) in mutants.iter().zip(differs) {
        println!("{name}: differs on {n} cases");
        assert!(
            n > 0,
            "no case tells the library from the model with {name}"
        );
    }
}
