//! `findAndModify`: one document found, changed (or removed) and returned, atomically.

use bson::{Bson, Document, doc};

use super::args;
use super::context::Ctx;
use super::write::{UpdateStatement, check_hint, run_delete, run_update};
use super::write_concern;
use crate::engine::collation;
use crate::engine::error::{CommandError, Result};
use crate::engine::matcher::Matcher;
use crate::engine::projection::Projection;
use crate::engine::sort::SortSpec;
use crate::engine::update::Update;

const FIELDS: &[&str] = &[
    "query",
    "sort",
    "remove",
    "update",
    "new",
    "fields",
    "upsert",
    "bypassDocumentValidation",
    "collation",
    "arrayFilters",
    "hint",
    "let",
];

/// `findAndModify` (and its alias `findandmodify`).
pub fn find_and_modify(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "findAndModify", FIELDS)?;
    let name = args::collection_name(cmd, "findAndModify")?;
    super::views::refuse_write(ctx, &name)?;
    write_concern::check(cmd, ctx.state)?;
    collation::check(cmd.get("collation"), "findAndModify.collation")?;
    let empty = Document::new();
    let filter = args::opt_document(cmd, "findAndModify", "query")?.unwrap_or(&empty);
    let sort = args::opt_document(cmd, "findAndModify", "sort")?
        .filter(|s| !s.is_empty())
        .map(SortSpec::parse)
        .transpose()?;
    let remove = args::opt_bool(cmd, "findAndModify", "remove")?.unwrap_or(false);
    let return_new = args::opt_bool(cmd, "findAndModify", "new")?.unwrap_or(false);
    let upsert = args::opt_bool(cmd, "findAndModify", "upsert")?.unwrap_or(false);
    let update = cmd.get("update");
    let fields = args::opt_document(cmd, "findAndModify", "fields")?
        .filter(|f| !f.is_empty())
        .map(|f| Projection::parse_for_query(f, filter))
        .transpose()?;
    match (remove, update) {
        (true, Some(_)) => {
            return Err(CommandError::failed_to_parse(
                "Cannot specify both an update and remove=true",
            ));
        }
        (false, None) => {
            return Err(CommandError::failed_to_parse(
                "Either an update or remove=true must be specified",
            ));
        }
        (true, None) if upsert => {
            return Err(CommandError::failed_to_parse(
                "Cannot specify both upsert=true and remove=true ",
            ));
        }
        (true, None) if return_new => {
            return Err(CommandError::failed_to_parse(
                "Cannot specify both new=true and remove=true; 'remove' always returns the deleted document",
            ));
        }
        _ => {}
    }
    if remove && cmd.contains_key("arrayFilters") {
        return Err(CommandError::failed_to_parse(
            "Cannot specify arrayFilters and remove=true",
        ));
    }
    let eval = ctx.eval_context(cmd, "findAndModify")?;
    let mut matcher = Matcher::parse(filter)?;
    matcher.optimize(&eval)?;
    let project = |doc: Option<Document>| -> Result<Bson> {
        match (doc, &fields) {
            (None, _) => Ok(Bson::Null),
            (Some(doc), None) => Ok(Bson::Document(doc)),
            (Some(doc), Some(projection)) => {
                let details = matcher.match_details(&doc, &eval)?.unwrap_or_default();
                Ok(Bson::Document(super::find::project(
                    projection,
                    &doc,
                    &details,
                    &eval,
                    "findAndModify",
                )?))
            }
        }
    };
    if remove {
        let Some(coll) = ctx.state.catalog.get(ctx.db, &name) else {
            return Ok(doc! {"lastErrorObject": {"n": 0}, "value": Bson::Null});
        };
        let mut coll = ctx.lock(&coll)?;
        check_hint(Some(&coll), cmd.get("hint"))?;
        let removed = run_delete(&mut coll, filter, &matcher, sort.as_ref(), true, &eval)?;
        let n = removed.len() as i32;
        return Ok(
            doc! {"lastErrorObject": {"n": n}, "value": project(removed.into_iter().next())?},
        );
    }
    let update = update.expect("checked above");
    if !ctx.state.pipeline_updates && matches!(update, Bson::Array(_)) {
        return Err(super::write::pipeline_updates_refused());
    }
    let array_filters = args::opt_array(cmd, "findAndModify", "arrayFilters")?;
    let statement = UpdateStatement {
        filter,
        matcher: matcher.clone(),
        update: Update::parse(update, array_filters.map(Vec::as_slice))?,
        upsert,
        multi: false,
        sort,
    };
    statement.check()?;
    let (coll, _) = ctx.state.catalog.get_or_create(ctx.db, &name)?;
    let mut coll = ctx.lock(&coll)?;
    check_hint(Some(&coll), cmd.get("hint"))?;
    let outcome = run_update(&mut coll, &statement, &eval)?;
    let mut last_error = doc! {
        "n": if outcome.upserted.is_some() { 1 } else { outcome.matched as i32 },
        "updatedExisting": outcome.matched > 0,
    };
    let value = if let Some(id) = outcome.upserted {
        last_error.insert("upserted", id);
        if return_new { outcome.after } else { None }
    } else if return_new {
        outcome.after
    } else {
        outcome.before
    };
    Ok(doc! {"lastErrorObject": last_error, "value": project(value)?})
}
