//! The two pairs of commands the weight of mongolock's own commands in the emulator is
//! measured with, shared by the `emulator` benchmark (`lock/*`) and the `ratio` example: a
//! plain upsert + delete, and mongolock's uncontended exclusive acquire + release. Each takes
//! a resource name no document holds yet.

use bson::{Document, doc};
use mongodb::Collection;
use mongolock::{LockClient, LockDetails};

/// A plain `findOneAndUpdate` upsert of the document `id`, then its `deleteOne`.
pub async fn plain_pair(plain: &Collection<Document>, id: &str) {
    plain
        .find_one_and_update(
            doc! {"_id": id},
            doc! {"$set": {"owner": "pair", "at": "x"}},
        )
        .upsert(true)
        .await
        .expect("findOneAndUpdate");
    plain.delete_one(doc! {"_id": id}).await.expect("deleteOne");
}

/// mongolock's exclusive acquire (`xlock`) of the resource `id`, then its release.
pub async fn lock_pair(locks: &LockClient, id: &str) {
    let grant = locks
        .xlock(id, "pair-lock-id", LockDetails::default())
        .await
        .expect("acquire");
    assert!(locks.release(&grant).await.expect("release"));
}
