//! Applying a primary's oplog entry to a secondary's own catalog.
//!
//! The entries are the primary's change events (its oplog, in commit order); a secondary
//! applies each one to its own data as mongod's oplog application does
//! (`src/mongo/db/repl/oplog.cpp`, `applyOperation_inlock`): an insert inserts the document,
//! an update applies its delta to the document with that `_id`, a replacement replaces it, a
//! delete removes it, and the collection and index commands are repeated. Applying writes
//! the secondary's own change log, as a secondary's oplog holds what it applied.

use bson::{Bson, Document, doc};

use crate::engine::changes::{ChangeEvent, ChangeKind, unstored};
use crate::engine::collection::Catalog;
use crate::engine::error::{CommandError, Result};
use crate::engine::index::Index;
use crate::engine::update::UpdateStyle;

/// Applies one entry to `catalog`.
///
/// # Errors
///
/// An entry that cannot apply (its document is missing): the secondary's data diverged,
/// which replication never causes by itself.
pub fn apply(catalog: &Catalog, event: &ChangeEvent) -> Result<()> {
    let (db, name) = (event.db.as_str(), event.coll.as_str());
    match &event.kind {
        ChangeKind::Insert { doc } => {
            let (coll, _) = catalog.get_or_create(db, name)?;
            coll.lock().insert(unstored(doc))?;
        }
        ChangeKind::Update {
            id, description, ..
        } => {
            let coll = existing(catalog, db, name)?;
            let mut coll = coll.lock();
            let record = record_of(&coll, id)?;
            let mut updated = coll.get(record).cloned().unwrap_or_default();
            apply_delta(&mut updated, &unstored(description));
            coll.replace(record, updated, UpdateStyle::Operators)?;
        }
        ChangeKind::Replace { doc, .. } => {
            let doc = unstored(doc);
            let coll = existing(catalog, db, name)?;
            let mut coll = coll.lock();
            let record = record_of(&coll, doc.get("_id").unwrap_or(&Bson::Null))?;
            coll.replace(record, doc, UpdateStyle::Replacement)?;
        }
        ChangeKind::Delete { id, .. } => {
            let coll = existing(catalog, db, name)?;
            let mut coll = coll.lock();
            let record = record_of(&coll, id)?;
            coll.remove(record);
        }
        ChangeKind::Drop => {
            catalog.drop_collection(db, name);
        }
        ChangeKind::DropDatabase => {
            catalog.drop_database(db);
        }
        ChangeKind::Rename {
            to_db,
            to_coll,
            drop_target,
        } => catalog.rename((db, name), (to_db, to_coll), drop_target.is_some())?,
        ChangeKind::Create { .. } => {
            catalog.get_or_create(db, name)?;
        }
        ChangeKind::CreateIndexes { indexes } => {
            let (coll, _) = catalog.get_or_create(db, name)?;
            let mut coll = coll.lock();
            for spec in indexes {
                coll.create_index(Index::from_spec(spec)?)?;
            }
        }
        ChangeKind::DropIndexes { indexes } => {
            let coll = existing(catalog, db, name)?;
            let mut coll = coll.lock();
            for spec in indexes {
                coll.drop_index(spec.get_str("name").unwrap_or_default())?;
            }
        }
        ChangeKind::Modify { description } => {
            let coll = existing(catalog, db, name)?;
            let mut coll = coll.lock();
            if let Ok(images) = description.get_document("changeStreamPreAndPostImages") {
                coll.pre_and_post_images = images.get_bool("enabled").unwrap_or(false);
            }
            coll.record(ChangeKind::Modify {
                description: description.clone(),
            });
        }
    }
    Ok(())
}

fn existing(
    catalog: &Catalog,
    db: &str,
    name: &str,
) -> Result<crate::engine::collection::CollectionRef> {
    catalog
        .get(db, name)
        .ok_or_else(|| CommandError::internal(format!("oplog entry for a missing {db}.{name}")))
}

fn record_of(coll: &crate::engine::collection::Collection, id: &Bson) -> Result<u64> {
    coll.candidates(&doc! {"_id": id.clone()})
        .into_iter()
        .next()
        .ok_or_else(|| CommandError::internal(format!("oplog entry for a missing _id {id}")))
}

/// Applies an `updateDescription` (`updatedFields`, `removedFields`, `truncatedArrays`) to
/// a document: the delta an update's oplog entry carries.
fn apply_delta(doc: &mut Document, description: &Document) {
    if let Ok(truncated) = description.get_array("truncatedArrays") {
        for entry in truncated.iter().filter_map(Bson::as_document) {
            let field = entry.get_str("field").unwrap_or_default();
            let size = match entry.get("newSize") {
                Some(Bson::Int32(n)) => *n as usize,
                Some(Bson::Int64(n)) => *n as usize,
                _ => continue,
            };
            if let Some(Bson::Array(array)) = get_mut(doc, field) {
                array.truncate(size);
            }
        }
    }
    if let Ok(removed) = description.get_array("removedFields") {
        for path in removed.iter().filter_map(Bson::as_str) {
            unset(doc, path);
        }
    }
    if let Ok(updated) = description.get_document("updatedFields") {
        for (path, value) in updated {
            set(doc, path, value.clone());
        }
    }
}

fn get_mut<'d>(doc: &'d mut Document, path: &str) -> Option<&'d mut Bson> {
    let mut parts = path.split('.');
    let mut current = doc.get_mut(parts.next()?)?;
    for part in parts {
        current = match current {
            Bson::Document(d) => d.get_mut(part)?,
            Bson::Array(a) => a.get_mut(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(current)
}

fn set(doc: &mut Document, path: &str, value: Bson) {
    match path.rsplit_once('.') {
        None => {
            doc.insert(path, value);
        }
        Some((parent, last)) => match get_mut(doc, parent) {
            Some(Bson::Document(d)) => {
                d.insert(last, value);
            }
            Some(Bson::Array(a)) => {
                if let Ok(index) = last.parse::<usize>() {
                    while a.len() <= index {
                        a.push(Bson::Null);
                    }
                    a[index] = value;
                }
            }
            _ => {
                // The delta names a path whose parent is not there yet: build it.
                let mut nested = Document::new();
                nested.insert(last, value);
                set(doc, parent, Bson::Document(nested));
            }
        },
    }
}

fn unset(doc: &mut Document, path: &str) {
    match path.rsplit_once('.') {
        None => {
            doc.remove(path);
        }
        Some((parent, last)) => {
            if let Some(Bson::Document(d)) = get_mut(doc, parent) {
                d.remove(last);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delta_sets_removes_and_truncates_along_paths() {
        let mut d = doc! {"_id": 1, "a": {"b": 1, "c": 2}, "arr": [1, 2, 3], "gone": true};
        apply_delta(
            &mut d,
            &doc! {
                "updatedFields": {"a.b": 5, "arr.0": 9, "n.m": 1},
                "removedFields": ["gone", "a.c"],
                "truncatedArrays": [{"field": "arr", "newSize": 2}],
            },
        );
        assert_eq!(
            d,
            doc! {"_id": 1, "a": {"b": 5}, "arr": [9, 2], "n": {"m": 1}}
        );
    }
}
