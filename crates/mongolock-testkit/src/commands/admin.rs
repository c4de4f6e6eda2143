//! Server and namespace administration: `ping`, `buildInfo`, `endSessions`,
//! `listDatabases`, `listCollections`, `create`, `drop`, `dropDatabase`.

use bson::{Bson, Document, doc};

use super::context::Ctx;
use super::cursor_batch::cursor_batch_size;
use super::identity;
use super::write_concern;
use super::{args, session, views};
use crate::engine::EvalContext;
use crate::engine::error::{CommandError, Result, codes};
use crate::engine::matcher::Matcher;

/// `ping`.
pub fn ping(_ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "ping", &[])?;
    Ok(Document::new())
}

/// `buildInfo`.
pub fn build_info(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "buildInfo", &[])?;
    Ok(identity::build_info(ctx.state.version))
}

/// `endSessions`: forgets the sessions' retryable-write history.
pub fn end_sessions(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "endSessions", &[])?;
    let Some(Bson::Array(ids)) = cmd.get("endSessions") else {
        return Err(CommandError::type_mismatch(
            "endSessions takes an array of session ids",
        ));
    };
    let mut lsids = Vec::new();
    for id in ids {
        if let Bson::Document(lsid) = id {
            lsids.push(session::lsid_bytes(lsid)?);
        }
    }
    ctx.state.local_sessions.end(&lsids);
    ctx.state.sessions.end(lsids);
    Ok(Document::new())
}

fn require_admin(ctx: &Ctx<'_>, command: &str) -> Result<()> {
    if ctx.db != "admin" {
        return Err(CommandError::new(
            13,
            format!("{command} may only be run against the admin database."),
        ));
    }
    Ok(())
}

/// `listDatabases`.
pub fn list_databases(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(
        cmd,
        "listDatabases",
        &["nameOnly", "filter", "authorizedDatabases"],
    )?;
    require_admin(ctx, "listDatabases")?;
    let name_only = args::opt_bool(cmd, "listDatabases", "nameOnly")?.unwrap_or(false);
    let filter = args::opt_document(cmd, "listDatabases", "filter")?
        .map(Matcher::parse)
        .transpose()?;
    let eval = EvalContext::at(ctx.now);
    let mut databases = Vec::new();
    let mut total = 0i64;
    for name in ctx.state.catalog.database_names() {
        let size: i64 = ctx
            .state
            .catalog
            .collections(&name)
            .iter()
            .map(|(_, c)| c.lock().len() as i64 * 64)
            .sum();
        let entry = if name_only {
            doc! {"name": name}
        } else {
            doc! {"name": name, "sizeOnDisk": size, "empty": size == 0}
        };
        if let Some(filter) = &filter
            && !filter.matches(&entry, &eval)?
        {
            continue;
        }
        total += size;
        databases.push(entry);
    }
    let mut reply = doc! {"databases": databases};
    if !name_only {
        reply.insert("totalSize", total);
        reply.insert("totalSizeMb", total / (1024 * 1024));
    }
    Ok(reply)
}

/// `listCollections`.
pub fn list_collections(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(
        cmd,
        "listCollections",
        &["filter", "nameOnly", "authorizedCollections", "cursor"],
    )?;
    let name_only = args::opt_bool(cmd, "listCollections", "nameOnly")?.unwrap_or(false);
    let filter = args::opt_document(cmd, "listCollections", "filter")?
        .map(Matcher::parse)
        .transpose()?;
    let batch_size = cursor_batch_size(cmd, "listCollections")?;
    let eval = EvalContext::at(ctx.now);
    let mut out = Vec::new();
    for entry in views::list_entries(ctx, name_only) {
        if let Some(filter) = &filter
            && !filter.matches(&entry, &eval)?
        {
            continue;
        }
        out.push(entry);
    }
    for (name, coll) in ctx.state.catalog.collections(ctx.db) {
        let entry = if name_only {
            doc! {"name": name, "type": "collection"}
        } else {
            let (uuid, options) = {
                let coll = coll.lock();
                (coll.uuid, coll.options())
            };
            doc! {
                "name": name,
                "type": "collection",
                "options": options,
                "info": {"readOnly": false, "uuid": uuid},
                "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"},
            }
        };
        if let Some(filter) = &filter
            && !filter.matches(&entry, &eval)?
        {
            continue;
        }
        out.push(entry);
    }
    let ns = format!("{}.$cmd.listCollections", ctx.db);
    Ok(ctx.state.cursors.first_batch(&ns, out, batch_size, false))
}

/// `create`.
pub fn create(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(
        cmd,
        "create",
        &[
            "viewOn",
            "pipeline",
            "collation",
            "changeStreamPreAndPostImages",
        ],
    )?;
    let name = args::collection_name(cmd, "create")?;
    write_concern::check(cmd, ctx.state)?;
    crate::engine::collation::check(cmd.get("collation"), "create.collation")?;
    let images = cmd
        .get("changeStreamPreAndPostImages")
        .map(|v| super::collection_admin::pre_and_post_images_option("create", v))
        .transpose()?;
    if cmd.contains_key("viewOn") || cmd.contains_key("pipeline") {
        if images.is_some() {
            return Err(CommandError::new(
                codes::INVALID_OPTIONS,
                "option not supported on a view: changeStreamPreAndPostImages",
            ));
        }
        views::create_view(ctx, &name, cmd)?;
        return Ok(Document::new());
    }
    if ctx.state.views.get(ctx.db, &name).is_some() {
        return Err(CommandError::new(
            codes::NAMESPACE_EXISTS,
            format!("Namespace already exists: {}.{name}", ctx.db),
        ));
    }
    let coll = ctx.state.catalog.create(ctx.db, &name)?;
    if let Some(enabled) = images {
        coll.lock().pre_and_post_images = enabled;
    }
    Ok(Document::new())
}

/// `drop`.
pub fn drop(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "drop", &[])?;
    let name = args::collection_name(cmd, "drop")?;
    write_concern::check(cmd, ctx.state)?;
    let ns = format!("{}.{name}", ctx.db);
    if ctx.state.views.drop_view(ctx.db, &name) {
        return Ok(Document::new());
    }
    match ctx.state.catalog.drop_collection(ctx.db, &name) {
        Some(coll) => {
            let indexes = coll.lock().indexes().len() as i32;
            Ok(doc! {"nIndexesWas": indexes, "ns": ns})
        }
        // MongoDB 7.0 answers ok for a missing collection.
        None => Ok(Document::new()),
    }
}

/// `dropDatabase`.
pub fn drop_database(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "dropDatabase", &[])?;
    write_concern::check(cmd, ctx.state)?;
    ctx.state.catalog.drop_database(ctx.db);
    ctx.state.views.drop_database(ctx.db);
    Ok(doc! {"dropped": ctx.db})
}

/// `configureFailPoint` (admin only, as with mongod's test commands).
pub fn configure_fail_point(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "configureFailPoint", &["mode", "data"])?;
    require_admin(ctx, "configureFailPoint")?;
    let count = ctx.state.fail_points.configure(cmd)?;
    Ok(doc! {"count": count})
}

/// `emulatorClock`: reads the server clock, or moves it forward by `advanceMs`.
/// Emulator-only; lets processes other than the test (the CLI, other drivers) drive time.
pub fn emulator_clock(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "emulatorClock", &["advanceMs"])?;
    require_admin(ctx, "emulatorClock")?;
    let now = match args::opt_non_negative(cmd, "emulatorClock", "advanceMs")? {
        Some(ms) => ctx
            .state
            .clock
            .advance(std::time::Duration::from_millis(ms as u64)),
        None => ctx.state.clock.now(),
    };
    Ok(doc! {"now": now})
}
