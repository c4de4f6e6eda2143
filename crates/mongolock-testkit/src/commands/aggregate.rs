//! `aggregate`.

use bson::{Bson, Document};

use super::write::{check_collation, check_hint, unsupported};
use super::{Ctx, admin, args, change_stream};
use crate::engine::error::{CommandError, Result, codes};
use crate::engine::pipeline::Pipeline;

const FIELDS: &[&str] = &[
    "pipeline",
    "cursor",
    "allowDiskUse",
    "bypassDocumentValidation",
    "collation",
    "hint",
    "let",
    "explain",
];

/// `aggregate`.
pub fn aggregate(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "aggregate", FIELDS)?;
    let pipeline = args::array(cmd, "aggregate", "pipeline")?;
    if cmd.contains_key("explain") {
        return Err(unsupported("explain"));
    }
    if !cmd.contains_key("cursor") {
        return Err(CommandError::failed_to_parse(
            "The 'cursor' option is required, except for aggregate with the explain argument",
        ));
    }
    check_collation(cmd.get("collation"))?;
    let batch_size = admin::cursor_batch_size(cmd, "aggregate")?;
    for stage in pipeline {
        if let Some(name) = stage.as_document().and_then(|s| s.keys().next())
            && ["$out", "$merge"].contains(&name.as_str())
        {
            return Err(unsupported(name));
        }
    }
    let collection = match cmd.get("aggregate") {
        Some(Bson::String(name)) if !name.is_empty() => Some(name.clone()),
        Some(value) if crate::engine::compare::as_f64(value) == Some(1.0) => None,
        _ => {
            return Err(CommandError::new(
                codes::INVALID_NAMESPACE,
                "Invalid aggregate namespace: the 'aggregate' field must be a collection name or 1",
            ));
        }
    };
    let first_stage = pipeline
        .first()
        .and_then(Bson::as_document)
        .and_then(|s| s.keys().next());
    if first_stage.is_some_and(|s| s == "$changeStream") {
        return change_stream::open(ctx, cmd, pipeline, collection.as_deref());
    }
    let Some(collection) = collection else {
        return Err(CommandError::new(
            codes::INVALID_NAMESPACE,
            "{aggregate: 1} is not valid for this pipeline; a collection is required.",
        ));
    };
    let pipeline = Pipeline::parse(pipeline)?;
    let eval = ctx.eval_context(cmd, "aggregate")?;
    let input = match ctx.state.catalog.get(ctx.db, &collection) {
        None => Vec::new(),
        Some(coll) => {
            let coll = coll.lock();
            check_hint(Some(&coll), cmd.get("hint"))?;
            coll.iter().map(|(_, d)| d.clone()).collect()
        }
    };
    let results = pipeline.run(input, &eval)?;
    let ns = format!("{}.{collection}", ctx.db);
    Ok(ctx
        .state
        .cursors
        .first_batch(&ns, results, batch_size, false))
}
