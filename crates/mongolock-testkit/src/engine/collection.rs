//! Collections and the catalog of databases that holds them.
//!
//! A collection keeps its documents in record order (insertion order, which is what an
//! unsorted `find` returns), an `_id` map for point lookups, and its indexes. Each collection
//! sits behind its own mutex: a command holds it for the whole of one document's
//! read-decide-write, which is what makes every single-document write atomic.

use std::collections::BTreeMap;
use std::sync::Arc;

use bson::{Bson, Document, Uuid, doc};
use parking_lot::{Mutex, RwLock};

use super::changes::{ChangeKind, ChangeLog, stored};
use super::compare::OrdBson;
use super::error::{CommandError, Result, codes};
use super::index::Index;
use super::update::UpdateStyle;
use super::update_description::diff;

/// One collection: documents in record order plus indexes.
#[derive(Debug)]
pub struct Collection {
    /// `db.coll`.
    pub ns: String,
    db: String,
    name: String,
    changes: Arc<ChangeLog>,
    /// The collection's UUID, as `listCollections` reports it.
    pub uuid: Uuid,
    records: BTreeMap<u64, Document>,
    ids: BTreeMap<OrdBson, u64>,
    indexes: Vec<Index>,
    next_record: u64,
    /// `changeStreamPreAndPostImages.enabled`: change events keep the document before and
    /// after each update, replace and delete.
    pub pre_and_post_images: bool,
}

impl Collection {
    /// An empty collection with its `_id_` index, recording its writes in `changes`.
    pub fn new(db: &str, name: &str, changes: Arc<ChangeLog>) -> Self {
        Self {
            ns: format!("{db}.{name}"),
            db: db.to_string(),
            name: name.to_string(),
            changes,
            uuid: Uuid::new(),
            records: BTreeMap::new(),
            ids: BTreeMap::new(),
            indexes: vec![Index::id_index()],
            next_record: 1,
            pre_and_post_images: false,
        }
    }

    /// The collection's options as `create` and `listCollections` show them.
    pub fn options(&self) -> Document {
        let mut options = Document::new();
        if self.pre_and_post_images {
            options.insert("changeStreamPreAndPostImages", doc! {"enabled": true});
        }
        options
    }

    /// Records a change of this collection in the change log.
    pub fn record(&self, kind: ChangeKind) {
        self.changes
            .append(&self.db, &self.name, Some(self.uuid), kind);
    }

    fn set_namespace(&mut self, db: &str, name: &str) {
        self.db = db.to_string();
        self.name = name.to_string();
        self.ns = format!("{db}.{name}");
    }

    /// A collection that is not in the catalog, holding `docs` as they are (a view's
    /// documents, which may lack `_id` or repeat one): for reading only.
    pub fn scratch(db: &str, name: &str, changes: Arc<ChangeLog>, docs: Vec<Document>) -> Self {
        let mut coll = Self::new(db, name, changes);
        for (record, doc) in (1u64..).zip(docs) {
            if let Some(id) = doc.get("_id") {
                coll.ids.entry(OrdBson(id.clone())).or_insert(record);
            }
            coll.records.insert(record, doc);
        }
        coll.next_record = coll.records.len() as u64 + 1;
        coll
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// The document stored as `record`.
    pub fn get(&self, record: u64) -> Option<&Document> {
        self.records.get(&record)
    }

    /// Every `(record, document)` in record order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Document)> {
        self.records.iter().map(|(r, d)| (*r, d))
    }

    /// The records a filter can possibly match, in record order: point lookups when the
    /// filter pins `_id` to a plain value or to one of a `$in` list of plain values, every
    /// record otherwise.
    pub fn candidates(&self, filter: &Document) -> Vec<u64> {
        // A scratch collection may hold documents the `_id` map does not cover.
        let indexed = self.ids.len() == self.records.len();
        if let Some(id) = filter.get("_id").filter(|_| indexed) {
            if is_plain(id) {
                return self
                    .ids
                    .get(&OrdBson(id.clone()))
                    .copied()
                    .into_iter()
                    .collect();
            }
            if let Bson::Document(condition) = id
                && condition.len() == 1
                && let Ok(values) = condition.get_array("$in")
                && values.iter().all(is_plain)
            {
                let mut found: Vec<u64> = values
                    .iter()
                    .filter_map(|v| self.ids.get(&OrdBson(v.clone())).copied())
                    .collect();
                found.sort_unstable();
                found.dedup();
                return found;
            }
        }
        self.records.keys().copied().collect()
    }

    /// Inserts a document that already has an `_id`; enforces unique indexes.
    pub fn insert(&mut self, doc: Document) -> Result<u64> {
        let id = doc
            .get("_id")
            .cloned()
            .ok_or_else(|| CommandError::internal("document without _id reached storage"))?;
        let record = self.next_record;
        if self.ids.contains_key(&OrdBson(id.clone())) {
            let index = &self.indexes[0];
            return Err(index.duplicate_key_error(&self.ns, &[OrdBson(id)]));
        }
        for index in &self.indexes[1..] {
            index.check_unique(&doc, record, &self.ns)?;
        }
        for index in &mut self.indexes[1..] {
            index.add(&doc, record);
        }
        self.ids.insert(OrdBson(id), record);
        self.record(ChangeKind::Insert { doc: stored(&doc) });
        self.records.insert(record, doc);
        self.next_record += 1;
        Ok(record)
    }

    /// Replaces the document stored as `record` (its `_id` must not change) and returns the
    /// document it replaced. `style` says what did it, which decides the change event: a
    /// replacement document a `replace` event, update operators an `update` event, a
    /// pipeline an `update` event when the change log records it as a delta and a `replace`
    /// event otherwise ([`ChangeLog::pipeline_change`]).
    pub fn replace(&mut self, record: u64, doc: Document, style: UpdateStyle) -> Result<Document> {
        let old = self
            .records
            .get(&record)
            .ok_or_else(|| CommandError::internal("replacing a missing record"))?;
        for index in &self.indexes[1..] {
            index.check_unique(&doc, record, &self.ns)?;
        }
        for index in &mut self.indexes[1..] {
            index.remove(old, record);
            index.add(&doc, record);
        }
        let images = self.pre_and_post_images;
        let description = match style {
            UpdateStyle::Replacement => None,
            UpdateStyle::Operators => Some(diff(old, &doc)),
            UpdateStyle::Pipeline => self.changes.pipeline_change(old, &doc),
        };
        let change = match description {
            None => ChangeKind::Replace {
                doc: stored(&doc),
                pre_image: images.then(|| stored(old)),
            },
            Some(description) => ChangeKind::Update {
                id: doc.get("_id").cloned().unwrap_or(Bson::Null),
                description: stored(&description.to_document(true)),
                pre_image: images.then(|| stored(old)),
                post_image: images.then(|| stored(&doc)),
            },
        };
        self.changes
            .append(&self.db, &self.name, Some(self.uuid), change);
        let old = self.records.insert(record, doc);
        old.ok_or_else(|| CommandError::internal("replacing a missing record"))
    }

    /// Removes the document stored as `record`.
    pub fn remove(&mut self, record: u64) -> Option<Document> {
        let doc = self.records.remove(&record)?;
        if let Some(id) = doc.get("_id") {
            self.ids.remove(&OrdBson(id.clone()));
        }
        for index in &mut self.indexes[1..] {
            index.remove(&doc, record);
        }
        let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
        let pre_image = self.pre_and_post_images.then(|| stored(&doc));
        self.record(ChangeKind::Delete { id, pre_image });
        Some(doc)
    }

    /// The indexes, `_id_` first.
    pub fn indexes(&self) -> &[Index] {
        &self.indexes
    }

    /// Adds an index, building it over the existing documents. `Ok(false)` when an identical
    /// index already exists; conflicting specifications are errors as in mongod.
    pub fn create_index(&mut self, mut index: Index) -> Result<bool> {
        for existing in &self.indexes {
            if existing.name == index.name {
                if existing.same_spec(&index) {
                    return Ok(false);
                }
                if existing.same_key(&index) {
                    return Err(CommandError::new(
                        codes::INDEX_OPTIONS_CONFLICT,
                        format!(
                            "An existing index has the same name as the requested index. When index names are not specified, they are auto generated and can cause conflicts. Please refer to our documentation. Requested index: {}, existing index: {}",
                            index.describe(),
                            existing.describe()
                        ),
                    ));
                }
                return Err(CommandError::new(
                    codes::INDEX_KEY_SPECS_CONFLICT,
                    format!(
                        "An existing index has the same name as the requested index. When index names are not specified, they are auto generated and can cause conflicts. Please refer to our documentation. Requested index: {}, existing index: {}",
                        index.describe(),
                        existing.describe()
                    ),
                ));
            }
            if existing.same_key(&index) {
                if existing.same_spec(&index) {
                    return Err(CommandError::new(
                        codes::INDEX_OPTIONS_CONFLICT,
                        format!(
                            "Index already exists with a different name: {}",
                            existing.name
                        ),
                    ));
                }
                return Err(CommandError::new(
                    codes::INDEX_OPTIONS_CONFLICT,
                    format!(
                        "An equivalent index already exists with the same name but different options. Requested index: {}, existing index: {}",
                        index.describe(),
                        existing.describe()
                    ),
                ));
            }
        }
        for (record, doc) in &self.records {
            index.check_unique(doc, *record, &self.ns)?;
            index.add(doc, *record);
        }
        self.record(ChangeKind::CreateIndexes {
            indexes: vec![index.describe()],
        });
        self.indexes.push(index);
        Ok(true)
    }

    /// Drops an index by name. `_id_` cannot be dropped.
    pub fn drop_index(&mut self, name: &str) -> Result<()> {
        if name == "_id_" {
            return Err(CommandError::new(
                codes::INVALID_OPTIONS,
                "cannot drop _id index",
            ));
        }
        let position = self
            .indexes
            .iter()
            .position(|i| i.name == name)
            .ok_or_else(|| {
                CommandError::new(
                    codes::INDEX_NOT_FOUND,
                    format!("index not found with name [{name}]"),
                )
            })?;
        let dropped = self.indexes.remove(position);
        self.record(ChangeKind::DropIndexes {
            indexes: vec![dropped.describe()],
        });
        Ok(())
    }

    /// Drops every index but `_id_`.
    pub fn drop_all_indexes(&mut self) {
        let dropped: Vec<Document> = self.indexes.drain(1..).map(|i| i.describe()).collect();
        if !dropped.is_empty() {
            self.record(ChangeKind::DropIndexes { indexes: dropped });
        }
    }
}

/// A shared handle on a collection.
pub type CollectionRef = Arc<Mutex<Collection>>;

/// Every database and collection of the server.
#[derive(Debug)]
pub struct Catalog {
    databases: RwLock<BTreeMap<String, BTreeMap<String, CollectionRef>>>,
    /// Every committed write, for change streams.
    pub changes: Arc<ChangeLog>,
}

/// Whether an `_id` condition is a plain value that equality on the `_id` map decides: not
/// an operator document, an array or a regular expression (which match otherwise).
fn is_plain(id: &Bson) -> bool {
    match id {
        Bson::Document(d) => !d.keys().any(|k| k.starts_with('$')),
        Bson::Array(_) | Bson::RegularExpression(_) => false,
        _ => true,
    }
}

/// Checks a database name as mongod does.
pub fn validate_db_name(db: &str) -> Result<()> {
    if db.is_empty() || db.len() >= 64 || db.chars().any(|c| "/\\. \"$\0".contains(c)) {
        return Err(CommandError::new(
            codes::INVALID_NAMESPACE,
            format!("Invalid database name: '{db}'"),
        ));
    }
    Ok(())
}

/// Checks a collection name as mongod does.
pub fn validate_collection_name(db: &str, coll: &str) -> Result<()> {
    if coll.is_empty() || coll.contains('\0') || coll.starts_with('.') || coll.contains('$') {
        return Err(CommandError::new(
            codes::INVALID_NAMESPACE,
            format!("Invalid namespace specified '{db}.{coll}'"),
        ));
    }
    if coll.starts_with("system.") {
        return Err(CommandError::new(
            codes::INVALID_NAMESPACE,
            format!(
                "Invalid system namespace: {db}.{coll} (system collections are not supported by this emulator)"
            ),
        ));
    }
    Ok(())
}

impl Catalog {
    /// An empty catalog whose writes go to `changes`.
    pub fn new(changes: Arc<ChangeLog>) -> Self {
        Self {
            databases: RwLock::new(BTreeMap::new()),
            changes,
        }
    }

    /// The collection, if it exists.
    pub fn get(&self, db: &str, coll: &str) -> Option<CollectionRef> {
        self.databases.read().get(db)?.get(coll).cloned()
    }

    /// The collection, created if missing; the flag says whether it was created.
    pub fn get_or_create(&self, db: &str, coll: &str) -> Result<(CollectionRef, bool)> {
        if let Some(found) = self.get(db, coll) {
            return Ok((found, false));
        }
        validate_db_name(db)?;
        validate_collection_name(db, coll)?;
        let mut dbs = self.databases.write();
        let collections = dbs.entry(db.to_string()).or_default();
        if let Some(found) = collections.get(coll) {
            return Ok((found.clone(), false));
        }
        let collection = Collection::new(db, coll, self.changes.clone());
        // mongod 7.0 logs every creation, explicit or implicit; expanded streams see it.
        collection.record(ChangeKind::Create {
            description: doc! {"idIndex": Index::id_index().describe()},
        });
        let created = Arc::new(Mutex::new(collection));
        collections.insert(coll.to_string(), created.clone());
        Ok((created, true))
    }

    /// Creates a collection; an existing one is `NamespaceExists`.
    pub fn create(&self, db: &str, coll: &str) -> Result<CollectionRef> {
        let (found, created) = self.get_or_create(db, coll)?;
        if created {
            Ok(found)
        } else {
            Err(CommandError::new(
                codes::NAMESPACE_EXISTS,
                format!("Collection {db}.{coll} already exists."),
            ))
        }
    }

    /// Drops a collection; returns it if it existed.
    pub fn drop_collection(&self, db: &str, coll: &str) -> Option<CollectionRef> {
        let mut dbs = self.databases.write();
        let collections = dbs.get_mut(db)?;
        let dropped = collections.remove(coll)?;
        if collections.is_empty() {
            dbs.remove(db);
        }
        let uuid = dropped.lock().uuid;
        self.changes.append(db, coll, Some(uuid), ChangeKind::Drop);
        Some(dropped)
    }

    /// Renames a collection (`renameCollection`), possibly into another database. An existing
    /// target is `NamespaceExists` unless `drop_target`, which replaces it.
    pub fn rename(
        &self,
        (from_db, from): (&str, &str),
        (to_db, to): (&str, &str),
        drop_target: bool,
    ) -> Result<()> {
        validate_db_name(to_db)?;
        validate_collection_name(to_db, to)?;
        let mut dbs = self.databases.write();
        let source = dbs
            .get(from_db)
            .and_then(|c| c.get(from))
            .cloned()
            .ok_or_else(|| {
                CommandError::new(
                    codes::NAMESPACE_NOT_FOUND,
                    format!("Source collection {from_db}.{from} does not exist"),
                )
            })?;
        if (from_db, from) == (to_db, to) {
            return Err(CommandError::new(
                codes::ILLEGAL_OPERATION,
                "Can't rename a collection to itself",
            ));
        }
        let target = dbs.get(to_db).and_then(|c| c.get(to)).cloned();
        if target.is_some() && !drop_target {
            return Err(CommandError::new(
                codes::NAMESPACE_EXISTS,
                "target namespace exists",
            ));
        }
        let drop_target = target.map(|t| t.lock().uuid);
        let collections = dbs.get_mut(from_db).expect("source exists");
        collections.remove(from);
        if collections.is_empty() {
            dbs.remove(from_db);
        }
        let mut coll = source.lock();
        coll.set_namespace(to_db, to);
        self.changes.append(
            from_db,
            from,
            Some(coll.uuid),
            ChangeKind::Rename {
                to_db: to_db.to_string(),
                to_coll: to.to_string(),
                drop_target,
            },
        );
        drop(coll);
        dbs.entry(to_db.to_string())
            .or_default()
            .insert(to.to_string(), source);
        Ok(())
    }

    /// Drops a database; returns whether it existed.
    pub fn drop_database(&self, db: &str) -> bool {
        let Some(collections) = self.databases.write().remove(db) else {
            return false;
        };
        for (name, coll) in &collections {
            let uuid = coll.lock().uuid;
            self.changes.append(db, name, Some(uuid), ChangeKind::Drop);
        }
        self.changes.append(db, "", None, ChangeKind::DropDatabase);
        true
    }

    /// Names of databases that hold at least one collection.
    pub fn database_names(&self) -> Vec<String> {
        self.databases.read().keys().cloned().collect()
    }

    /// The collections of a database, by name.
    pub fn collections(&self, db: &str) -> Vec<(String, CollectionRef)> {
        self.databases
            .read()
            .get(db)
            .map(|c| c.iter().map(|(n, r)| (n.clone(), r.clone())).collect())
            .unwrap_or_default()
    }

    /// Every collection of every database.
    pub fn all_collections(&self) -> Vec<CollectionRef> {
        self.databases
            .read()
            .values()
            .flat_map(|c| c.values().cloned())
            .collect()
    }
}
