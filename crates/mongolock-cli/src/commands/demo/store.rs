//! The guarded store: one MongoDB document per exclusive lock (the report, the config) that
//! takes a write only if its fencing token is at least the last one written (a holder may
//! write again under its own grant; a holder whose grant is older is refused), and keeps
//! every accepted token in order so the verification can check them.

use anyhow::Context as _;
use bson::{Document, doc};
use mongodb::Collection;

use super::log::Lock;

/// The collection the demo writes its guarded records to, in `--db`.
pub(crate) const STORE_COLLECTION: &str = "demo_store";

/// The guarded records, seen through one driver client.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    /// The store's collection.
    collection: Collection<Document>,
    /// Prefixed to every record id.
    prefix: String,
}

impl Store {
    /// The store in `database`, with record ids prefixed by `prefix` (empty on the emulator,
    /// a run id on a shared deployment).
    pub(crate) fn new(database: &mongodb::Database, prefix: &str) -> Self {
        Store {
            collection: database.collection(STORE_COLLECTION),
            prefix: prefix.to_owned(),
        }
    }

    /// The record id of `lock`.
    fn id(&self, lock: Lock) -> String {
        format!("{}{}", self.prefix, lock.name())
    }

    /// The locks whose holders write a record.
    pub(crate) const GUARDED: [Lock; 2] = [Lock::Report, Lock::Config];

    /// Creates (or resets) the records: token 0, nothing accepted.
    pub(crate) async fn reset(&self) -> anyhow::Result<()> {
        for lock in Self::GUARDED {
            self.collection
                .replace_one(
                    doc! {"_id": self.id(lock)},
                    doc! {"token": 0_i64, "writer": "", "accepted": []},
                )
                .upsert(true)
                .await
                .context("cannot reset the demo's guarded store")?;
        }
        Ok(())
    }

    /// Writes `lock`'s record with `token` if it is at least the last token written, in
    /// one atomic update; returns whether the store took it.
    pub(crate) async fn write(&self, lock: Lock, token: i64, writer: &str) -> anyhow::Result<bool> {
        let result = self
            .collection
            .update_one(
                doc! {"_id": self.id(lock), "token": {"$lte": token}},
                doc! {"$set": {"token": token, "writer": writer}, "$push": {"accepted": token}},
            )
            .await
            .context("guarded write failed")?;
        Ok(result.modified_count == 1)
    }

    /// Every token the store accepted for `lock`, in the order it accepted them.
    pub(crate) async fn accepted(&self, lock: Lock) -> anyhow::Result<Vec<i64>> {
        let record = self
            .collection
            .find_one(doc! {"_id": self.id(lock)})
            .await
            .context("cannot read the demo's guarded store")?
            .unwrap_or_default();
        let tokens = record
            .get_array("accepted")
            .map(|tokens| tokens.iter().filter_map(|t| t.as_i64()).collect())
            .unwrap_or_default();
        Ok(tokens)
    }

    /// Removes the records (on a shared deployment, at the end).
    pub(crate) async fn remove(&self) -> anyhow::Result<()> {
        for lock in Self::GUARDED {
            self.collection
                .delete_one(doc! {"_id": self.id(lock)})
                .await
                .context("cannot remove the demo's guarded store")?;
        }
        Ok(())
    }
}
