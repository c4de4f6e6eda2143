//! What every cursor-returning command shares: its `cursor: {batchSize}` option, and the
//! `{cursor: {firstBatch | nextBatch, id, ns}}` reply it answers with.

use bson::{Document, doc};

use super::args;
use crate::engine::error::{CommandError, Result, codes};

/// The `cursor: {batchSize}` option of cursor-returning commands.
pub fn cursor_batch_size(cmd: &Document, command: &str) -> Result<Option<usize>> {
    let Some(cursor) = args::opt_document(cmd, command, "cursor")? else {
        return Ok(None);
    };
    args::check_fields(cursor, "cursor", &["batchSize"]).map_err(|_| {
        CommandError::new(
            codes::UNKNOWN_BSON_FIELD,
            format!("BSON field '{command}.cursor' has an unknown field"),
        )
    })?;
    Ok(args::opt_non_negative(cursor, "cursor", "batchSize")?.map(|n| n as usize))
}

/// Builds a cursor reply document.
pub fn cursor_reply(id: i64, ns: &str, batch: Vec<Document>, first: bool) -> Document {
    let key = if first { "firstBatch" } else { "nextBatch" };
    doc! { "cursor": { key: batch, "id": id, "ns": ns } }
}
