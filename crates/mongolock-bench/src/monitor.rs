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
    /// Change events received, by the `_id` of the document they are about
    /// (`documentKey._id`; `?` when the event carries none).
    events_by_document: Mutex<BTreeMap<String, u64>>,
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

    /// The counts of all of `parts`, added per name.
    pub(crate) fn sum(parts: &[Counts]) -> Counts {
        let mut out = BTreeMap::new();
        for part in parts {
            for (name, n) in &part.0 {
                *out.entry(name.clone()).or_default() += n;
            }
        }
        Counts(out)
    }

    /// The count of `name` (0 if none).
    pub(crate) fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
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
                events_by_document: Mutex::new(BTreeMap::new()),
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
                let batch = match e.reply.get_document("cursor") {
                    Ok(cursor) if ours && e.command_name == "getMore" => {
                        cursor.get_array("nextBatch").ok()
                    }
                    _ => None,
                };
                if let Some(batch) = batch.filter(|b| !b.is_empty()) {
                    *lock(&inner.started).entry(EVENTS.to_owned()).or_default() +=
                        batch.len() as u64;
                    let mut by_document = lock(&inner.events_by_document);
                    for event in batch {
                        *by_document.entry(event_document(event)).or_default() += 1;
                    }
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

    /// The change events received so far, by the `_id` of the document each is about.
    pub(crate) fn events_by_document(&self) -> BTreeMap<String, u64> {
        lock(&self.inner.events_by_document).clone()
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

/// The `_id` of the document a change event is about (`documentKey._id`), as text; `?`
/// when it has none.
fn event_document(event: &mongodb::bson::Bson) -> String {
    match event
        .as_document()
        .and_then(|e| e.get_document("documentKey").ok())
        .and_then(|k| k.get("_id"))
    {
        Some(mongodb::bson::Bson::String(id)) => id.clone(),
        Some(other) => other.to_string(),
        None => "?".into(),
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
    fn counts_of_several_clients_add_up_per_name() {
        let a = Counts(BTreeMap::from([
            ("getMore".to_string(), 2),
            (EVENTS.to_string(), 1),
        ]));
        let b = Counts(BTreeMap::from([
            ("getMore".to_string(), 1),
            ("update".to_string(), 4),
        ]));
        let sum = Counts::sum(&[a, b]);
        assert_eq!((sum.get("getMore"), sum.get("update")), (3, 4));
        assert_eq!((sum.get(EVENTS), sum.get("delete")), (1, 0));
        assert_eq!(sum.total(), 7);
    }

    #[test]
    fn the_document_of_a_change_event() {
        let event = mongodb::bson::Bson::Document(doc! { "documentKey": { "_id": "r" } });
        assert_eq!(event_document(&event), "r");
        assert_eq!(event_document(&mongodb::bson::Bson::Document(doc! {})), "?");
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
