//! Read-only views: `create` with `viewOn` and `pipeline`.
//!
//! A view stores no documents: `find`, `count`, `distinct` and `aggregate` on it run its
//! pipeline over the collection (or view) it is defined on, as mongod does by rewriting them
//! into aggregations. Writes and index commands on a view fail with
//! `CommandNotSupportedOnView` (166). What the emulator leaves out: view collations, and the
//! `system.views` collection mongod lists in a database that has views. The definitions
//! themselves are kept in the view catalog (`view_catalog.rs`).

use std::sync::Arc;

use bson::{Bson, Document, doc};
use parking_lot::Mutex;

use super::context::Ctx;
use super::view_catalog::ViewDef;
use crate::engine::changes::ChangeKind;
use crate::engine::collection::{Collection, CollectionRef};
use crate::engine::compare::type_alias;
use crate::engine::error::{CommandError, Result, codes};
use crate::engine::pipeline::Pipeline;

/// mongod's `CommandNotSupportedOnView`.
pub const COMMAND_NOT_SUPPORTED_ON_VIEW: i32 = 166;
/// mongod's `OptionNotSupportedOnView`.
pub const OPTION_NOT_SUPPORTED_ON_VIEW: i32 = 167;
/// mongod's `ViewDepthLimitExceeded`.
pub const VIEW_DEPTH_LIMIT_EXCEEDED: i32 = 13;
/// How deep views may be nested (mongod's `ViewGraph::kMaxViewDepth`).
const MAX_VIEW_DEPTH: usize = 20;

/// Fails with mongod's error when `name` is a view (writes and index commands).
pub fn refuse_view(ctx: &Ctx<'_>, db: &str, name: &str) -> Result<()> {
    if ctx.state.views.get(db, name).is_some() {
        return Err(CommandError::new(
            COMMAND_NOT_SUPPORTED_ON_VIEW,
            format!("Namespace {db}.{name} is a view, not a collection"),
        ));
    }
    Ok(())
}

/// `create` with `viewOn` (and optionally `pipeline`).
pub fn create_view(ctx: &Ctx<'_>, name: &str, cmd: &Document) -> Result<()> {
    let view_on = match cmd.get("viewOn") {
        Some(Bson::String(s)) if s.is_empty() => {
            return Err(CommandError::bad_value("'viewOn' cannot be empty"));
        }
        Some(Bson::String(s)) => s.clone(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'create.viewOn' is the wrong type '{}', expected type 'string'",
                type_alias(other)
            )));
        }
        None => {
            return Err(CommandError::new(
                codes::INVALID_OPTIONS,
                "'pipeline' requires 'viewOn' to also be specified",
            ));
        }
    };
    let pipeline = match cmd.get("pipeline") {
        None => Vec::new(),
        Some(Bson::Array(stages)) => stages.clone(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'create.pipeline' is the wrong type '{}', expected type 'array'",
                type_alias(other)
            )));
        }
    };
    for (position, stage) in pipeline.iter().enumerate() {
        if let Some(stage_name) = stage.as_document().and_then(|d| d.keys().next())
            && ["$out", "$merge", "$changeStream"].contains(&stage_name.as_str())
        {
            return Err(CommandError::new(
                OPTION_NOT_SUPPORTED_ON_VIEW,
                format!(
                    "The aggregation stage {stage_name} in location {position} of the pipeline cannot be used in the view definition of {}.{name} because it writes to disk",
                    ctx.db
                ),
            ));
        }
    }
    Pipeline::parse(&pipeline)?;
    crate::engine::collection::validate_collection_name(ctx.db, name)?;
    let exists = || {
        CommandError::new(
            codes::NAMESPACE_EXISTS,
            format!("Namespace already exists: {}.{name}", ctx.db),
        )
    };
    if ctx.state.catalog.get(ctx.db, name).is_some() {
        return Err(exists());
    }
    let mut views = ctx.state.views.views.write();
    let key = (ctx.db.to_string(), name.to_string());
    if views.contains_key(&key) {
        return Err(exists());
    }
    // A view may not (even indirectly) read itself.
    let mut next = view_on.clone();
    for _ in 0..=MAX_VIEW_DEPTH {
        if next == name {
            return Err(CommandError::new(
                93,
                format!("View cycle detected: {}.{name}", ctx.db),
            ));
        }
        match views.get(&(ctx.db.to_string(), next.clone())) {
            Some(def) => next = def.view_on.clone(),
            None => break,
        }
    }
    // mongod records view creation in the oplog too; expanded change streams report it.
    ctx.state.catalog.changes.append(
        ctx.db,
        name,
        None,
        ChangeKind::Create {
            description: doc! {"viewOn": view_on.clone(), "pipeline": pipeline.clone()},
        },
    );
    views.insert(key, ViewDef { view_on, pipeline });
    Ok(())
}

/// The documents a view holds: its pipeline (and those of the views it is defined on) run
/// over the collection at the bottom. `None` when `name` is not a view.
pub fn view_documents(ctx: &Ctx<'_>, name: &str) -> Result<Option<Vec<Document>>> {
    let Some(def) = ctx.state.views.get(ctx.db, name) else {
        return Ok(None);
    };
    let mut pipelines = vec![def.pipeline];
    let mut source = def.view_on;
    while let Some(inner) = ctx.state.views.get(ctx.db, &source) {
        if pipelines.len() >= MAX_VIEW_DEPTH {
            return Err(CommandError::new(
                VIEW_DEPTH_LIMIT_EXCEEDED,
                format!(
                    "View depth too deep or view cycle detected; maximum depth is {MAX_VIEW_DEPTH}"
                ),
            ));
        }
        pipelines.push(inner.pipeline);
        source = inner.view_on;
    }
    let mut docs: Vec<Document> = match ctx.read_catalog().get(ctx.db, &source) {
        Some(coll) => coll.lock().iter().map(|(_, d)| d.clone()).collect(),
        None => Vec::new(),
    };
    let eval = ctx.eval_context(&doc! {}, "aggregate")?;
    for stages in pipelines.iter().rev() {
        docs = Pipeline::parse(stages)?.run(docs, &eval)?;
    }
    Ok(Some(docs))
}

/// What a read command reads: the collection, or for a view a scratch collection holding
/// the view's documents.
pub fn read_source(ctx: &Ctx<'_>, name: &str) -> Result<Option<CollectionRef>> {
    match view_documents(ctx, name)? {
        Some(docs) => {
            let coll = Collection::scratch(ctx.db, name, ctx.state.catalog.changes.clone(), docs);
            Ok(Some(Arc::new(Mutex::new(coll))))
        }
        None => Ok(ctx.read_catalog().get(ctx.db, name)),
    }
}

/// `listCollections` entries for the views of the command's database.
pub fn list_entries(ctx: &Ctx<'_>, name_only: bool) -> Vec<Document> {
    ctx.state
        .views
        .of_database(ctx.db)
        .into_iter()
        .map(|(name, def)| {
            if name_only {
                doc! {"name": name, "type": "view"}
            } else {
                doc! {
                    "name": name,
                    "type": "view",
                    "options": {"viewOn": def.view_on, "pipeline": def.pipeline},
                    "info": {"readOnly": true},
                }
            }
        })
        .collect()
}

/// Refuses a write to a view in the command's database.
pub fn refuse_write(ctx: &Ctx<'_>, name: &str) -> Result<()> {
    refuse_view(ctx, ctx.db, name)
}
