//! Command monitoring: counts the commands a library's own driver clients send to its
//! database, through the driver's `command_event_handler`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use mongodb::bson::Document;
use mongodb::bson::oid::ObjectId;
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use tokio::sync::watch;

/// Counts the `CommandStarted` events for one database, by command name, and signals when
/// a `delete` of a document by its `ObjectId` completes (to wait for the releases
/// `mongodb-lock` fires and forgets).
#[derive(Clone)]
pub(crate) struct Monitor {
    inner: Arc<Inner>,
}

struct Inner {
    db: String,
    started: Mutex<BTreeMap<String, u64>>,
    /// The largest command of each name, in bytes.
    largest: Mutex<BTreeMap<String, usize>>,
    /// Request ids of commands started on `db` and not finished yet.
    pending: Mutex<HashSet<i32>>,
    /// `delete` commands in flight by request id, with the `_id` they delete.
    deleting: Mutex<HashMap<i32, ObjectId>>,
    /// `_id`s whose `delete` completed and nobody has waited for yet.
    deleted: Mutex<HashSet<ObjectId>>,
    /// Bumped on every completed `delete`.
    deletes_done: watch::Sender<u64>,
}

/// Commands started between two snapshots, by name, and under [`EVENTS`] the change events
/// their `getMore`s received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Counts(pub(crate) BTreeMap<String, u64>);

/// The key under which [`Counts`] holds the change events received (in the batches of
/// `getMore` replies): they are not commands, so [`Counts::total`] leaves them out.
pub(crate) const EVENTS: &str = "events received";

impl Counts {
    /// The number of commands (`getMore`s included, the events they received not).
    pub(crate) fn total(&self) -> u64 {
        self.0
            .iter()
            .filter(|(name, _)| name.as_str() != EVENTS)
            .map(|(_, n)| n)
            .sum()
    }

    /// `b - a`, per command name.
    pub(crate) fn since(&self, before: &Counts) -> Counts {
        let mut out = BTreeMap::new();
        for (name, n) in &self.0 {
            let d = n - before.0.get(name).copied().unwrap_or(0);
            if d > 0 {
                out.insert(name.clone(), d);
            }
        }
        Counts(out)
    }

    /// `findAndModify 1, delete 1`, each count divided by `per` (one decimal if not whole).
    pub(crate) fn describe(&self, per: u64) -> String {
        self.0
            .iter()
            .map(|(name, n)| format!("{} {name}", per_op(*n, per)))
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

impl Counts {
    /// `2.0/s getMore + 1.0/s findAndModify`: each count per second of `secs`.
    pub(crate) fn describe_rate(&self, secs: f64) -> String {
        self.0
            .iter()
            .map(|(name, n)| format!("{:.1}/s {name}", *n as f64 / secs))
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

/// `n / per`, whole when exact, else with one decimal (two below 0.1).
pub(crate) fn per_op(n: u64, per: u64) -> String {
    if per == 0 {
        return "-".into();
    }
    if n.is_multiple_of(per) {
        format!("{}", n / per)
    } else if n * 10 < per {
        format!("{:.2}", n as f64 / per as f64)
    } else {
        format!("{:.1}", n as f64 / per as f64)
    }
}

impl Monitor {
    /// A monitor for commands on `db`.
    pub(crate) fn new(db: &str) -> Self {
        let (deletes_done, _) = watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                db: db.to_string(),
                started: Mutex::new(BTreeMap::new()),
                largest: Mutex::new(BTreeMap::new()),
                pending: Mutex::new(HashSet::new()),
                deleting: Mutex::new(HashMap::new()),
                deleted: Mutex::new(HashSet::new()),
                deletes_done,
            }),
        }
    }

    /// The handler to install on a client as its `command_event_handler`.
    pub(crate) fn handler(&self) -> EventHandler<CommandEvent> {
        let inner = self.inner.clone();
        EventHandler::callback(move |event: CommandEvent| match event {
            CommandEvent::Started(e) if e.db == inner.db => {
                if e.command_name == "delete"
                    && let Some(id) = deleted_object_id(&e.command)
                {
                    lock(&inner.deleting).insert(e.request_id, id);
                }
                let size = mongodb::bson::to_vec(&e.command).map_or(0, |bytes| bytes.len());
                let mut largest = lock(&inner.largest);
                let seen = largest.entry(e.command_name.clone()).or_default();
                *seen = (*seen).max(size);
                drop(largest);
                *lock(&inner.started).entry(e.command_name).or_default() += 1;
                lock(&inner.pending).insert(e.request_id);
            }
            CommandEvent::Succeeded(e) => {
                let ours = inner.finished(e.request_id, &e.command_name);
                let events = match e.reply.get_document("cursor") {
                    Ok(cursor) if ours && e.command_name == "getMore" => cursor
                        .get_array("nextBatch")
                        .map_or(0, |batch| batch.len() as u64),
                    _ => 0,
                };
                if events > 0 {
                    *lock(&inner.started).entry(EVENTS.to_owned()).or_default() += events;
                }
            }
            CommandEvent::Failed(e) => {
                inner.finished(e.request_id, &e.command_name);
            }
            _ => {}
        })
    }

    /// The largest command of each name sent so far, in bytes of BSON.
    pub(crate) fn largest(&self, name: &str) -> usize {
        lock(&self.inner.largest).get(name).copied().unwrap_or(0)
    }

    /// The commands started so far.
    pub(crate) fn snapshot(&self) -> Counts {
        Counts(lock(&self.inner.started).clone())
    }

    /// Waits until the `delete` of the document `id` has completed (once per `id`).
    pub(crate) async fn wait_deleted(&self, id: ObjectId) {
        let mut rx = self.inner.deletes_done.subscribe();
        loop {
            if lock(&self.inner.deleted).remove(&id) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

/// The `_id` a one-statement `delete` command deletes: `deletes: [{q: {_id: <ObjectId>}}]`.
fn deleted_object_id(command: &Document) -> Option<ObjectId> {
    let deletes = command.get_array("deletes").ok()?;
    let [statement] = deletes.as_slice() else {
        return None;
    };
    let q = statement.as_document()?.get_document("q").ok()?;
    q.get_object_id("_id").ok()
}

impl Inner {
    /// A command ended; true if it was one of `db`'s.
    fn finished(&self, request_id: i32, name: &str) -> bool {
        let ours = lock(&self.pending).remove(&request_id);
        if ours && name == "delete" {
            if let Some(id) = lock(&self.deleting).remove(&request_id) {
                lock(&self.deleted).insert(id);
            }
            self.deletes_done.send_modify(|n| *n += 1);
        }
        ours
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use mongodb::bson::doc;

    use super::*;

    #[test]
    fn counts_between_snapshots_and_their_description() {
        let before = Counts(BTreeMap::from([("findAndModify".to_string(), 3)]));
        let after = Counts(BTreeMap::from([
            ("findAndModify".to_string(), 7),
            ("getMore".to_string(), 2),
        ]));
        let d = after.since(&before);
        assert_eq!(d.total(), 6);
        assert_eq!(d.describe(2), "2 findAndModify + 1 getMore");
        assert_eq!(d.describe(4), "1 findAndModify + 0.5 getMore");
        assert_eq!(d.describe_rate(2.0), "2.0/s findAndModify + 1.0/s getMore");
        assert_eq!(per_op(1, 40), "0.03");
        assert_eq!(per_op(1, 0), "-");
    }

    #[test]
    fn events_received_are_described_and_not_counted_as_commands() {
        let counts = Counts(BTreeMap::from([
            ("getMore".to_string(), 2),
            (EVENTS.to_string(), 3),
        ]));
        assert_eq!(counts.total(), 2);
        assert_eq!(counts.describe(1), "3 events received + 2 getMore");
    }

    #[test]
    fn the_deleted_id_of_a_one_statement_delete() {
        let id = ObjectId::new();
        let one = doc! { "delete": "locks", "deletes": [{ "q": { "_id": id }, "limit": 1 }] };
        assert_eq!(deleted_object_id(&one), Some(id));
        let two = doc! { "delete": "locks", "deletes": [{ "q": { "_id": id } }, { "q": {} }] };
        assert_eq!(deleted_object_id(&two), None);
        let by_key = doc! { "delete": "locks", "deletes": [{ "q": { "_id": "key" } }] };
        assert_eq!(deleted_object_id(&by_key), None);
    }
}
