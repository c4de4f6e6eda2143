//! The view catalog: the definitions of the read-only views of every database (see
//! `views.rs` for what commands do with them).

use std::collections::BTreeMap;

use bson::Bson;
use parking_lot::RwLock;

/// One view's definition.
#[derive(Debug, Clone)]
pub struct ViewDef {
    /// The collection or view it reads.
    pub view_on: String,
    /// Its pipeline, as given.
    pub pipeline: Vec<Bson>,
}

/// The views of every database, by `(db, name)`.
#[derive(Debug, Default)]
pub struct Views {
    /// The definitions; `create` holds the write lock across its checks and the insert.
    pub(super) views: RwLock<BTreeMap<(String, String), ViewDef>>,
}

impl Views {
    /// The view `db.name`, if there is one.
    pub fn get(&self, db: &str, name: &str) -> Option<ViewDef> {
        self.views
            .read()
            .get(&(db.to_string(), name.to_string()))
            .cloned()
    }

    /// Removes a view; returns whether it existed.
    pub fn drop_view(&self, db: &str, name: &str) -> bool {
        self.views
            .write()
            .remove(&(db.to_string(), name.to_string()))
            .is_some()
    }

    /// Removes every view of a database.
    pub fn drop_database(&self, db: &str) {
        self.views.write().retain(|(d, _), _| d != db);
    }

    /// The views of a database, by name.
    pub fn of_database(&self, db: &str) -> Vec<(String, ViewDef)> {
        self.views
            .read()
            .iter()
            .filter(|((d, _), _)| d == db)
            .map(|((_, n), v)| (n.clone(), v.clone()))
            .collect()
    }
}
