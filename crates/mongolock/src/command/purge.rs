//! Purge: remove expired locks and, as square/mongo-lock does, every lock sharing a lock id
//! with an expired one (a group whose member expired is considered abandoned). 3 round trips:
//!
//! ```text
//! 1. aggregate (see status) with { remainingMs: { $lte: 0 } }  -> the lock ids with an expired lock
//! 2. aggregate (see status) with { lockId: { $in: <ids> } }    -> every lock of those ids (reported)
//! 3. update ... multi: true (see release)                      -> remove exactly the entries of 2
//! ```
//!
//! Expired entries are also dropped by any acquire on their resource; purge is for the ones
//! nobody contends for, and for the rest of their group.

use crate::client::LockClient;
use crate::command::{release, status};
use crate::error::Result;
use crate::types::{Filter, LockStatus};

pub(crate) async fn run(client: &LockClient) -> Result<Vec<LockStatus>> {
    let expired = status::run(
        client,
        &Filter {
            expired_only: true,
            ..Filter::default()
        },
    )
    .await?;
    if expired.is_empty() {
        return Ok(Vec::new());
    }
    let mut lock_ids: Vec<String> = expired.iter().map(|s| s.lock_id().to_owned()).collect();
    lock_ids.sort_unstable();
    lock_ids.dedup();
    let purged = status::run_sorted(
        client,
        &Filter {
            lock_ids: Some(lock_ids),
            ..Filter::default()
        },
    )
    .await?;
    release::remove(client, &purged).await?;
    tracing::debug!(purged = purged.len(), "purged");
    Ok(purged)
}
