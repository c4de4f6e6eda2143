//! What each call puts on the wire, observed with the driver's command monitoring (every
//! `CommandStarted` event of the test's database), not inferred from the library's source:
//!
//! - **round trips**: `xlock`, `slock`, `acquire`, `release`, `release_attempt` send one
//!   `findAndModify`; `unlock`, `renew`, `purge` one `update` and no read before it;
//!   `purge_abandoned_groups` one `aggregate` then one `update` (for a few groups); `status`
//!   one `aggregate`; `create_indexes` one `update` (the compatibility check) and one
//!   `createIndexes`;
//! - **pinned settings**, even when the collection (and, in a second variant, the client and
//!   database) asks for `secondaryPreferred` and read concern `local`: every command goes
//!   to the primary (`$readPreference` absent or `primary`), every command that takes a
//!   collation carries `{locale: "simple"}` (and so do the `lockId` index specs), reads carry
//!   read concern `majority`, writes carry `{w: "majority", j: true, wtimeout > 0}`, and
//!   every command carries a positive `maxTimeMS`, bounded by
//!   [`LockClientBuilder::command_timeout`](mongolock::LockClientBuilder::command_timeout).
//!
//! A control command (a plain `collection.aggregate` through the same monitored collection)
//! is checked to carry `secondaryPreferred` and `local`: the checks can see a command that
//! is not pinned, so they would fail if the library used the collection's own settings.
//!
//! Runs on the emulator (a one-member replica set), or on the MongoDB named by `MONGODB_URI`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{Bson, Document, doc};
use futures_util::TryStreamExt;
use mongodb::event::EventHandler;
use mongodb::event::command::{CommandEvent, CommandStartedEvent};
use mongodb::options::{
    ClientOptions, CollectionOptions, DatabaseOptions, ReadConcern, ReadPreference,
    SelectionCriteria,
};
use mongodb::{Collection, Database};
use mongolock::{AcquireRequest, Filter, LockClient, LockDetails};
use mongolock_testkit::TestServer;

/// Commands that are not the test's own round trips (session clean-up, handshakes; the
/// latter go on monitoring connections and are not command-monitored anyway).
const IGNORED: &[&str] = &["endSessions", "hello", "isMaster", "ismaster"];

/// The command time limit used by the settings test.
const LIMIT_MS: i64 = 1_500;

/// A client whose commands are recorded, on the emulator or on `MONGODB_URI`.
struct Monitored {
    /// The test's database, as the monitored client sees it.
    db: Database,
    /// `CommandStarted` events on the test's database, in order.
    events: Arc<Mutex<Vec<CommandStartedEvent>>>,
    /// Whether the driver talks to one server directly (then it turns `primary` into
    /// `primaryPreferred` on the wire, as the server-selection spec requires).
    direct: bool,
    /// Whether the server is a standalone (then the driver sends no `$readPreference`).
    standalone: bool,
    server: Option<TestServer>,
}

impl Monitored {
    /// A monitored client on a fresh database. With `client_level_settings`, the client
    /// and the database also default to `secondaryPreferred` and read concern `local`.
    async fn start(name: &str, client_level_settings: bool) -> Monitored {
        let db_name = format!("mongolock_wire_{name}_{}", std::process::id());
        let (uri, server) = common::server_uri().await;
        let mut options = ClientOptions::parse(&uri).await.expect("a valid URI");
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let watched = db_name.clone();
        options.command_event_handler = Some(EventHandler::callback(move |event| {
            if let CommandEvent::Started(started) = event
                && started.db == watched
                && !IGNORED.contains(&started.command_name.as_str())
            {
                sink.lock().unwrap().push(started);
            }
        }));
        if client_level_settings {
            options.selection_criteria = Some(secondary_preferred());
            options.read_concern = Some(ReadConcern::local());
        }
        // The driver uses the single-server topology only when told to connect directly.
        let direct = options.direct_connection == Some(true);
        let client = mongodb::Client::with_options(options).expect("valid client options");
        let db = if client_level_settings {
            client.database_with_options(
                &db_name,
                DatabaseOptions::builder()
                    .selection_criteria(secondary_preferred())
                    .read_concern(ReadConcern::local())
                    .build(),
            )
        } else {
            client.database(&db_name)
        };
        db.drop().await.expect("drop the test database");
        let hello = db.run_command(doc! { "hello": 1 }).await.expect("hello");
        let standalone = !hello.contains_key("setName") && hello.get_str("msg") != Ok("isdbgrid");
        let monitored = Monitored {
            db,
            events,
            direct,
            standalone,
            server,
        };
        monitored.take();
        monitored
    }

    /// The lock collection with a non-primary read preference and read concern `local`.
    fn secondary_collection(&self) -> Collection<Document> {
        self.db.collection_with_options(
            "locks",
            CollectionOptions::builder()
                .selection_criteria(secondary_preferred())
                .read_concern(ReadConcern::local())
                .build(),
        )
    }

    /// The commands recorded since the last call.
    fn take(&self) -> Vec<CommandStartedEvent> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }

    /// The names of the commands recorded since the last call.
    fn names(&self) -> Vec<String> {
        self.take().into_iter().map(|e| e.command_name).collect()
    }

    /// Makes the locks granted with [`SHORT_TTL`] expire: moves the emulator's clock, or
    /// waits on a real server.
    async fn expire(&self) {
        match &self.server {
            Some(server) => {
                server.clock().advance(Duration::from_secs(2));
            }
            None => tokio::time::sleep(SHORT_TTL * 4).await,
        }
    }
}

/// A TTL short enough that a real server can be waited out.
const SHORT_TTL: Duration = Duration::from_millis(300);

fn secondary_preferred() -> SelectionCriteria {
    SelectionCriteria::ReadPreference(ReadPreference::SecondaryPreferred {
        options: Default::default(),
    })
}

fn simple() -> Document {
    doc! { "locale": "simple" }
}

/// An integer field of a command, whatever its BSON integer type.
fn int(command: &Document, field: &str) -> Option<i64> {
    match command.get(field) {
        Some(Bson::Int32(v)) => Some(i64::from(*v)),
        Some(Bson::Int64(v)) => Some(*v),
        Some(Bson::Double(v)) => Some(*v as i64),
        _ => None,
    }
}

/// The read preference mode the command carries, if any.
fn read_preference_mode(command: &Document) -> Option<String> {
    command
        .get_document("$readPreference")
        .ok()
        .map(|rp| rp.get_str("mode").unwrap_or("<no mode>").to_owned())
}

/// Checks that one command of the library carries every pinned setting; returns a list of
/// what is wrong (empty when all is well).
fn check_pinned(m: &Monitored, event: &CommandStartedEvent, limit_ms: i64) -> Vec<String> {
    let c = &event.command;
    let name = event.command_name.as_str();
    let mut wrong = Vec::new();
    let mut expect = |ok: bool, what: String| {
        if !ok {
            wrong.push(format!("{name}: {what}"));
        }
    };

    // Read preference: absent or primary. A direct connection turns `primary` into
    // `primaryPreferred` on the wire (the only server is used either way).
    match read_preference_mode(c) {
        None => {}
        Some(mode) => expect(
            mode == "primary" || (m.direct && mode == "primaryPreferred"),
            format!("$readPreference is {mode}, not primary"),
        ),
    }

    // A positive time limit, within the configured one.
    match int(c, "maxTimeMS") {
        Some(ms) => expect(
            ms > 0 && ms <= limit_ms,
            format!("maxTimeMS {ms} is not in 1..={limit_ms}"),
        ),
        None => expect(false, "no maxTimeMS".into()),
    }

    let is_write = matches!(name, "findAndModify" | "update" | "createIndexes");
    if is_write {
        match c.get_document("writeConcern") {
            Ok(wc) => {
                expect(
                    wc.get_str("w") == Ok("majority"),
                    format!("writeConcern.w is {:?}", wc.get("w")),
                );
                expect(
                    wc.get_bool("j") == Ok(true),
                    format!("writeConcern.j is {:?}", wc.get("j")),
                );
                match int(wc, "wtimeout") {
                    Some(ms) => expect(
                        ms > 0 && ms <= limit_ms,
                        format!("wtimeout {ms} is not in 1..={limit_ms}"),
                    ),
                    None => expect(false, "no writeConcern.wtimeout".into()),
                }
            }
            Err(_) => expect(false, "no writeConcern".into()),
        }
    }

    match name {
        "findAndModify" | "aggregate" => expect(
            c.get_document("collation") == Ok(&simple()),
            format!("collation is {:?}", c.get("collation")),
        ),
        "update" => {
            let updates = c.get_array("updates").map(|a| a.as_slice()).unwrap_or(&[]);
            expect(!updates.is_empty(), "no update statements".into());
            for (i, statement) in updates.iter().enumerate() {
                let collation = statement.as_document().and_then(|s| s.get("collation"));
                expect(
                    collation == Some(&Bson::Document(simple())),
                    format!("updates[{i}].collation is {collation:?}"),
                );
            }
        }
        "createIndexes" => {
            let specs = c.get_array("indexes").map(|a| a.as_slice()).unwrap_or(&[]);
            let by_lock_id = specs
                .iter()
                .filter_map(Bson::as_document)
                .filter(|spec| {
                    spec.get_document("key")
                        .is_ok_and(|key| key.keys().any(|k| k.ends_with("lockId")))
                })
                .collect::<Vec<_>>();
            expect(
                by_lock_id.len() == 2,
                format!("{} lockId indexes, not 2", by_lock_id.len()),
            );
            for spec in by_lock_id {
                expect(
                    spec.get_document("collation") == Ok(&simple()),
                    format!(
                        "index {:?} has collation {:?}",
                        spec.get("name"),
                        spec.get("collation")
                    ),
                );
            }
        }
        other => expect(false, format!("unexpected command {other}")),
    }

    if name == "aggregate" {
        let level = c
            .get_document("readConcern")
            .ok()
            .and_then(|rc| rc.get_str("level").ok());
        expect(
            level == Some("majority"),
            format!("readConcern is {:?}", c.get("readConcern")),
        );
    }
    wrong
}

#[tokio::test]
async fn each_call_is_the_documented_number_of_round_trips() {
    let m = Monitored::start("round_trips", false).await;
    let locks = LockClient::new(m.db.collection("locks"));
    let one = |what: &str, names: Vec<String>, expected: &[&str]| {
        assert_eq!(names, expected, "{what} sent {names:?}");
    };

    locks.create_indexes().await.unwrap();
    // A pipeline update that matches nothing first: the server runs the commands.
    one("create_indexes", m.names(), &["update", "createIndexes"]);

    let a = locks.xlock("a", "g", LockDetails::default()).await.unwrap();
    one("xlock", m.names(), &["findAndModify"]);
    let _ = locks
        .slock("b", "g", LockDetails::default(), Some(3))
        .await
        .unwrap();
    one("slock", m.names(), &["findAndModify"]);
    let request = AcquireRequest::exclusive("c", "g", LockDetails::default());
    assert!(locks.acquire(&request).await.unwrap().grant().is_some());
    one("acquire", m.names(), &["findAndModify"]);
    // Refused: still one command, which reports the holder.
    assert!(
        locks
            .xlock("a", "other", LockDetails::default())
            .await
            .unwrap_err()
            .is_already_locked()
    );
    one("a refused xlock", m.names(), &["findAndModify"]);

    assert!(locks.release(&a).await.unwrap());
    one("release", m.names(), &["findAndModify"]);
    assert!(locks.release_attempt(&request).await.unwrap());
    one("release_attempt", m.names(), &["findAndModify"]);

    // A group of several locks: renew and unlock stay one write, with no read first.
    for resource in ["d", "e", "f", "h"] {
        let _ = locks
            .xlock(
                resource,
                "g",
                LockDetails::default().ttl(Duration::from_secs(60)),
            )
            .await
            .unwrap();
    }
    m.take();
    assert_eq!(locks.renew("g", Duration::from_secs(60)).await.unwrap(), 5);
    one("renew", m.names(), &["update"]);
    assert_eq!(locks.status(&Filter::default()).await.unwrap().len(), 5);
    one("status", m.names(), &["aggregate"]);
    assert_eq!(locks.unlock("g").await.unwrap(), 5);
    one("unlock", m.names(), &["update"]);

    // Expired locks of three groups, and a live member of each group.
    for group in ["g1", "g2", "g3"] {
        let _ = locks
            .xlock(
                &format!("{group}-short"),
                group,
                LockDetails::default().ttl(SHORT_TTL),
            )
            .await
            .unwrap();
        let _ = locks
            .xlock(&format!("{group}-long"), group, LockDetails::default())
            .await
            .unwrap();
    }
    m.expire().await;
    m.take();
    assert_eq!(locks.purge().await.unwrap().resources(), 3);
    one("purge", m.names(), &["update"]);

    for group in ["g4", "g5", "g6"] {
        let _ = locks
            .xlock(
                &format!("{group}-short"),
                group,
                LockDetails::default().ttl(SHORT_TTL),
            )
            .await
            .unwrap();
    }
    m.expire().await;
    m.take();
    let purged = locks.purge_abandoned_groups().await.unwrap();
    assert_eq!(purged.lock_ids(), ["g4", "g5", "g6"]);
    one(
        "purge_abandoned_groups",
        m.names(),
        &["aggregate", "update"],
    );
    assert_eq!(locks.status(&Filter::default()).await.unwrap().len(), 3);
    m.take();
}

#[tokio::test]
async fn group_writes_read_nothing_first() {
    let m = Monitored::start("no_read_first", false).await;
    let locks = LockClient::new(m.db.collection("locks"));
    let reads = ["find", "aggregate", "count", "distinct", "getMore"];
    for resource in ["a", "b", "c"] {
        let _ = locks
            .xlock(
                resource,
                "g",
                LockDetails::default().ttl(Duration::from_secs(60)),
            )
            .await
            .unwrap();
    }
    m.take();
    assert_eq!(locks.renew("g", Duration::from_secs(60)).await.unwrap(), 3);
    let renew = m.names();
    assert_eq!(locks.unlock("g").await.unwrap(), 3);
    let unlock = m.names();
    let _ = locks
        .xlock("y", "h", LockDetails::default().ttl(SHORT_TTL))
        .await
        .unwrap();
    m.expire().await;
    m.take();
    assert_eq!(locks.purge().await.unwrap().resources(), 1);
    let purge = m.names();
    for (call, names) in [("renew", renew), ("unlock", unlock), ("purge", purge)] {
        assert!(
            names.iter().all(|n| !reads.contains(&n.as_str())),
            "{call} read before writing: {names:?}"
        );
        assert_eq!(names, ["update"], "{call}");
    }
}

/// Runs every operation through a collection that asks for `secondaryPreferred` and
/// `local`, and checks every command the library sent.
async fn settings_are_pinned(name: &str, client_level_settings: bool) {
    let m = Monitored::start(name, client_level_settings).await;
    let collection = m.secondary_collection();
    let locks = LockClient::builder(collection.clone())
        .command_timeout(Duration::from_millis(LIMIT_MS as u64))
        .build()
        .unwrap();

    locks.create_indexes().await.unwrap();
    let a = locks.xlock("a", "g", LockDetails::default()).await.unwrap();
    let _ = locks
        .slock("b", "g", LockDetails::default(), Some(2))
        .await
        .unwrap();
    let request = AcquireRequest::shared("c", "g", LockDetails::default(), None);
    locks.acquire(&request).await.unwrap();
    let _ = locks.xlock("a", "other", LockDetails::default()).await;
    locks.release(&a).await.unwrap();
    locks.release_attempt(&request).await.unwrap();
    for resource in ["d", "e"] {
        let _ = locks
            .xlock(
                resource,
                "g",
                LockDetails::default().ttl(Duration::from_secs(60)),
            )
            .await
            .unwrap();
    }
    locks.renew("g", Duration::from_secs(60)).await.unwrap();
    locks.status(&Filter::default()).await.unwrap();
    locks
        .status(&Filter::default().lock_id("g").owner("nobody"))
        .await
        .unwrap();
    locks.unlock("g").await.unwrap();
    for group in ["g1", "g2"] {
        let _ = locks
            .xlock(
                &format!("{group}-short"),
                group,
                LockDetails::default().ttl(SHORT_TTL),
            )
            .await
            .unwrap();
        let _ = locks
            .xlock(&format!("{group}-long"), group, LockDetails::default())
            .await
            .unwrap();
    }
    let _ = locks
        .xlock("z-short", "g3", LockDetails::default().ttl(SHORT_TTL))
        .await
        .unwrap();
    m.expire().await;
    // One expired lock for purge, the rest for the group purge.
    locks.purge().await.unwrap();
    for group in ["g4", "g5"] {
        let _ = locks
            .xlock(
                &format!("{group}-short"),
                group,
                LockDetails::default().ttl(SHORT_TTL),
            )
            .await
            .unwrap();
    }
    m.expire().await;
    let purged = locks.purge_abandoned_groups().await.unwrap();
    assert_eq!(purged.lock_ids(), ["g4", "g5"]);

    let events = m.take();
    let mut seen: Vec<&str> = events.iter().map(|e| e.command_name.as_str()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen,
        ["aggregate", "createIndexes", "findAndModify", "update"],
        "every kind of command was checked"
    );
    let wrong: Vec<String> = events
        .iter()
        .flat_map(|event| check_pinned(&m, event, LIMIT_MS))
        .collect();
    assert!(
        wrong.is_empty(),
        "settings not pinned:\n{}",
        wrong.join("\n")
    );

    // Control: the same collection's own aggregate carries its own settings, so the check
    // above would have caught the library using them.
    let rows: Vec<Document> = collection
        .aggregate(vec![doc! { "$limit": 1 }])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let _ = rows;
    let control = m.take();
    assert_eq!(control.len(), 1, "{control:?}");
    let control = &control[0];
    assert_eq!(
        control
            .command
            .get_document("readConcern")
            .ok()
            .and_then(|rc| rc.get_str("level").ok()),
        Some("local"),
        "the control read carries the collection's read concern"
    );
    if m.standalone {
        eprintln!("standalone server: the driver sends no $readPreference at all");
    } else {
        assert_eq!(
            read_preference_mode(&control.command).as_deref(),
            Some("secondaryPreferred"),
            "the control read carries the collection's read preference: {:?}",
            control.command
        );
        let problems = check_pinned(&m, control, i64::MAX);
        assert!(
            problems.iter().any(|p| p.contains("$readPreference")),
            "the check must reject the control read: {problems:?}"
        );
    }
}

#[tokio::test]
async fn settings_are_pinned_against_the_collections_own() {
    settings_are_pinned("collection_settings", false).await;
}

#[tokio::test]
async fn settings_are_pinned_against_client_and_database_defaults() {
    settings_are_pinned("client_settings", true).await;
}

#[tokio::test]
async fn the_default_time_limit_is_on_every_command() {
    let m = Monitored::start("default_limit", false).await;
    let locks = LockClient::new(m.db.collection("locks"));
    locks.create_indexes().await.unwrap();
    let _ = locks.xlock("a", "g", LockDetails::default()).await.unwrap();
    locks.renew("g", Duration::from_secs(5)).await.unwrap();
    locks.status(&Filter::default()).await.unwrap();
    locks.unlock("g").await.unwrap();
    let limit = mongolock::DEFAULT_COMMAND_TIMEOUT.as_millis() as i64;
    let events = m.take();
    // create_indexes sends two (its compatibility check, then the indexes).
    assert_eq!(events.len(), 6);
    let wrong: Vec<String> = events
        .iter()
        .flat_map(|event| check_pinned(&m, event, limit))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
