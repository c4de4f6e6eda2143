//! Conformance: the model's server step against the library's real commands on the emulator.
//!
//! For generated lock documents and requests, each case seeds the document straight into the
//! collection (the format of `mongolock/src/schema.rs`), runs the request through the
//! library's public API, and runs the model's [`Server::execute`] on the same document. Both
//! must reach the same document, projected to the model's fields (the exclusive entry's lock
//! id, nonce, token, keeper and expiry; the fence; the live tombstones of the case's nonces),
//! and the same reply class. Requests: an acquire (`acquire` with a chosen nonce), a
//! withdrawal (`release_attempt`), a release of a grant (`release`, with the keeper the
//! grant names), a renewal by lock id (`renew`), `unlock` and `force_release`.
//!
//! Times: a model tick is a second; the model's `now` is 10 when the command runs, and
//! expiries are read back rounded to the second.

use std::time::Duration;

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Document, doc};
use mongolock::{AcquireRequest, Attempt, Grant, LockClient, LockDetails, Nonce};
use mongolock_model::server::{Bugs, Doc, Entry, Reply, Request, Server, Time};
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

/// The document `doc` as stored, with times relative to the server's `now`.
fn stored(doc: &Doc, nonces: &Nonces, now: DateTime) -> Document {
    let at = |t: Time| {
        DateTime::from_millis(now.timestamp_millis() + (i64::from(t) - i64::from(NOW)) * 1000)
    };
    let exclusive = match &doc.entry {
        None => Bson::Null,
        Some(e) => {
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
            Bson::Document(entry)
        }
    };
    let released: Vec<Bson> = (doc.tombstones.iter())
        .map(|&n| {
            Bson::Document(doc! {
                "nonce": nonces.ids[n as usize],
                // Live for ten minutes, as a withdrawal leaves it (five at least).
                "until": DateTime::from_millis(now.timestamp_millis() + 600_000),
            })
        })
        .collect();
    doc! {
        "_id": RESOURCE,
        "mongolock": 1,
        "fence": base() + i64::from(doc.fence),
        "exclusive": exclusive,
        "shared": [],
        "released": released,
        "queue": [],
        "idleSince": Bson::Null,
    }
}

/// The stored document, projected to the model's fields, read at server time `now`.
fn project(stored: Option<Document>, nonces: &Nonces, now: DateTime) -> Doc {
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
    let entry = match stored.get("exclusive") {
        Some(Bson::Document(e)) => Some(Entry {
            lock_id: e.get_str("lockId").unwrap()[1..].parse().unwrap(),
            nonce: nonces
                .model(&e.get_object_id("nonce").unwrap())
                .expect("a nonce of the case"),
            token: (e.get_i64("token").unwrap() - base()) as u8,
            keeper: e.get_str("keeper").ok().map(|k| k[1..].parse().unwrap()),
            expires_at: e.get_datetime("expiresAt").ok().map(tick),
        }),
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
    Doc {
        entry,
        fence,
        tombstones,
    }
}

/// Server steps with a bug put back, each of which some case must tell from the library.
const MUTANTS: [(&str, Bugs); 2] = [
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
];

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
};

/// A generated document: maybe an entry (of lock id 0 or 1, nonce 0 or 1, a keeper or
/// none, live, expired or without TTL), a fence at or above its token, some tombstones.
fn document(rng: &mut StdRng) -> Doc {
    let token = rng.random_range(3..6);
    let entry = rng.random_bool(0.75).then(|| Entry {
        lock_id: rng.random_range(0..2),
        nonce: rng.random_range(0..2),
        token,
        keeper: [None, Some(1), Some(2)][rng.random_range(0..3)],
        expires_at: [Some(NOW + 2), Some(NOW - 2), None][rng.random_range(0..3)],
    });
    let tombstones = (0..3).filter(|_| rng.random_bool(0.3)).collect();
    Doc {
        entry,
        fence: token + rng.random_range(0..2),
        tombstones,
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
    Renew {
        lock_id: u8,
    },
    Unlock {
        lock_id: u8,
    },
    ForceRelease,
}

fn call(rng: &mut StdRng) -> Call {
    let lock_id = rng.random_range(0..2);
    let nonce = rng.random_range(0..3);
    match rng.random_range(0..6) {
        0 => Call::Acquire { lock_id, nonce },
        1 => Call::Withdraw { lock_id, nonce },
        2 => Call::Release {
            keeper: [None, Some(1), Some(2)][rng.random_range(0..3)],
            token_offset: rng.random_range(0..2),
        },
        3 => Call::Renew { lock_id },
        4 => Call::Unlock { lock_id },
        _ => Call::ForceRelease,
    }
}

/// A grant of lock id 0 with `token` and `keeper`, got by resuming a seeded entry (the
/// public API makes grants only from replies).
async fn grant(locks: &LockClient, nonces: &Nonces, token: u8, keeper: Option<u8>) -> Grant {
    let seeded = Doc {
        entry: Some(Entry {
            lock_id: 0,
            nonce: 2,
            token,
            keeper,
            expires_at: Some(NOW + 2),
        }),
        fence: token,
        tombstones: vec![],
    };
    seed(locks, &seeded, nonces).await;
    let request =
        AcquireRequest::exclusive(RESOURCE, "L0", LockDetails::default()).nonce(nonces.requests[0]);
    match locks.acquire(&request).await.unwrap() {
        Attempt::AlreadyHeld(grant) => grant,
        other => panic!("expected the seeded grant, got {other:?}"),
    }
}

async fn seed(locks: &LockClient, doc: &Doc, nonces: &Nonces) {
    let coll = locks.collection();
    coll.delete_many(doc! { "_id": RESOURCE }).await.unwrap();
    coll.insert_one(stored(doc, nonces, server_now(locks).await))
        .await
        .unwrap();
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
    // An hour of the clock ahead.
    let floor = server_now(&locks).await.timestamp_millis() * 1000;
    BASE.set(floor + 3_600_000_000).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for case in 0..240 {
        let doc = document(&mut rng);
        let call = call(&mut rng);
        // The grant of a release is made first (it seeds a document of its own).
        let grant = match call {
            Call::Release {
                keeper,
                token_offset,
            } => {
                let token = doc.entry.as_ref().map_or(4, |e| e.token) + token_offset;
                Some((grant(&locks, &nonces, token, keeper).await, token))
            }
            _ => None,
        };
        seed(&locks, &doc, &nonces).await;
        let mut model = Server {
            docs: vec![doc.clone()],
        };
        let ttl = LockDetails::default().ttl(Duration::from_secs(u64::from(TTL)));
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
                        expires_at: None,
                        now: 0,
                    },
                    Attempt::Contended(_) => Reply::Refused,
                    Attempt::Withdrawn => Reply::Withdrawn,
                    other => panic!("unexpected {other:?}"),
                };
                let request = Request::Acquire {
                    resource: 0,
                    lock_id: l,
                    nonce,
                    keeper: None,
                    ttl: Some(TTL),
                };
                (request, real)
            }
            Call::Withdraw { lock_id: l, nonce } => {
                let request = AcquireRequest::exclusive(RESOURCE, lock_id(l), ttl)
                    .nonce(nonces.requests[nonce as usize]);
                let removed = locks.release_attempt(&request).await.unwrap();
                let request = Request::Withdraw {
                    resource: 0,
                    lock_id: l,
                    nonce,
                    keeper: None,
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
                };
                (
                    request,
                    Reply::Released {
                        removed,
                        live: false,
                    },
                )
            }
            Call::Renew { lock_id: l } => {
                let n = locks
                    .renew(&lock_id(l), Duration::from_secs(u64::from(TTL)))
                    .await
                    .unwrap();
                (
                    Request::RenewLockId {
                        lock_id: l,
                        ttl: TTL,
                    },
                    Reply::Count(n as u8),
                )
            }
            Call::Unlock { lock_id: l } => {
                let n = locks.unlock(&lock_id(l)).await.unwrap();
                (Request::Unlock { lock_id: l }, Reply::Count(n as u8))
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
        let real_doc = project(after, &nonces, now);
        let expected = model.execute(&request, NOW, &Bugs::default());
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
            }
        }
        *counts.entry(class(&real)).or_default() += 1;
        *counts
            .entry(
                format!("{:?}", request)
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_owned(),
            )
            .or_default() += 1;
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
    for (name, _) in MUTANTS {
        assert!(
            counts.contains_key(&format!("mutant differs: {name}")),
            "no case tells the library from the model with {name}"
        );
    }
    assert!(counts.keys().any(|k| k.starts_with("granted")));
    assert!(counts.keys().any(|k| k.starts_with("already held")));
}
