//! `getMore` and `killCursors`: the next batches of a cursor (see `cursor_table.rs`), and
//! closing it.

use std::time::Duration;

use bson::{Bson, Document, doc};

use super::args;
use super::change_stream::DEFAULT_AWAIT;
use super::context::Ctx;
use super::cursor_batch::cursor_reply;
use super::cursor_table::{CursorKind, take_batch};
use crate::engine::error::{CommandError, Result};

/// `getMore`.
///
/// On a change stream with no new events it waits up to `maxTimeMS` (default one second)
/// for one, as mongod's awaitData cursors do.
///
/// # Cancel safety
/// Not cancel safe: the cursor is out of the cursor table while the command runs, so
/// dropping the future mid-wait closes it (the next getMore answers CursorNotFound).
pub async fn get_more(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(
        cmd,
        "getMore",
        &[
            "collection",
            "batchSize",
            "maxTimeMS",
            "term",
            "lastKnownCommittedOpTime",
        ],
    )?;
    let id = match cmd.get("getMore") {
        Some(Bson::Int64(id)) => *id,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'getMore.getMore' is the wrong type '{}', expected type 'long'",
                crate::engine::compare::type_alias(other)
            )));
        }
        None => return Err(args::missing("getMore", "getMore")),
    };
    let collection = match cmd.get("collection") {
        Some(Bson::String(c)) => c.clone(),
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'getMore.collection' is the wrong type, expected type 'string'",
            ));
        }
        None => return Err(args::missing("getMore", "collection")),
    };
    let batch_size = args::opt_non_negative(cmd, "getMore", "batchSize")?
        .filter(|n| *n > 0)
        .map(|n| n as usize);
    let max_time = args::opt_non_negative(cmd, "getMore", "maxTimeMS")?
        .map(|ms| Duration::from_millis(ms as u64));
    let ns = format!("{}.{}", ctx.db, collection);
    let eval = ctx.eval_context(cmd, "getMore")?;
    let cursors = &ctx.state.cursors;
    let mut cursor = cursors.take(id, &ns)?;
    // The cursor is out of the table while this getMore runs; it goes back unless exhausted
    // or the getMore fails (mongod deletes a cursor whose getMore failed).
    let is_stream = matches!(cursor.kind, CursorKind::Stream(_));
    if let Some(error) = ctx.state.fail_points.fail_get_more_after_cursor_checkout() {
        return Err(label_stream_error(error, is_stream));
    }
    let result = match &mut cursor.kind {
        CursorKind::Results(remaining) => {
            let batch = take_batch(remaining, batch_size);
            let exhausted = remaining.is_empty();
            Ok((batch, exhausted, None))
        }
        CursorKind::Stream(stream) => {
            let deadline = tokio::time::Instant::now() + max_time.unwrap_or(DEFAULT_AWAIT);
            loop {
                match stream.next_batch(&ctx.state.catalog, batch_size, &eval) {
                    Err(error) => break Err(error),
                    Ok(batch) if !batch.is_empty() || stream.invalidated => {
                        break Ok((batch, stream.invalidated, Some(stream.post_batch_token())));
                    }
                    Ok(_) => {}
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    break Ok((Vec::new(), false, Some(stream.post_batch_token())));
                }
                ctx.state
                    .catalog
                    .changes
                    .wait_for_append(stream.seen_seq(), deadline - now)
                    .await;
            }
        }
    };
    let (batch, exhausted, token) = match result {
        Ok(done) => done,
        Err(error) => return Err(label_stream_error(error, is_stream)),
    };
    let reply_id = if exhausted { 0 } else { id };
    if !exhausted {
        cursors.put_back(id, cursor);
    }
    let mut reply = cursor_reply(reply_id, &ns, batch, false);
    if let (Some(token), Ok(body)) = (token, reply.get_document_mut("cursor")) {
        body.insert("postBatchResumeToken", token);
    }
    Ok(reply)
}

/// A change stream's getMore error carries mongod's resumability label.
fn label_stream_error(error: CommandError, is_stream: bool) -> CommandError {
    if is_stream {
        super::change_stream::label_error(error)
    } else {
        error
    }
}

/// `killCursors`.
pub fn kill_cursors(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "killCursors", &["cursors"])?;
    args::collection_name(cmd, "killCursors")?;
    let ids = args::array(cmd, "killCursors", "cursors")?;
    let mut killed = Vec::new();
    let mut not_found = Vec::new();
    for id in ids {
        let Bson::Int64(id) = id else {
            return Err(CommandError::type_mismatch(
                "BSON field 'killCursors.cursors' is the wrong type, expected type 'long'",
            ));
        };
        if ctx.state.cursors.kill(*id) {
            killed.push(Bson::Int64(*id));
        } else {
            not_found.push(Bson::Int64(*id));
        }
    }
    Ok(doc! {
        "cursorsKilled": killed,
        "cursorsNotFound": not_found,
        "cursorsAlive": [],
        "cursorsUnknown": [],
    })
}
