//! Collection-level administration that change streams report: `collMod` (only
//! `changeStreamPreAndPostImages`) and `renameCollection`.

use bson::{Bson, Document, doc};

use super::args;
use super::context::Ctx;
use super::write_concern;
use crate::engine::changes::ChangeKind;
use crate::engine::error::{CommandError, Result, codes};

/// `collMod` options mongod knows that this emulator does not implement: refused, never
/// ignored.
const UNSUPPORTED_COLLMOD: &[&str] = &[
    "validator",
    "validationLevel",
    "validationAction",
    "index",
    "viewOn",
    "pipeline",
    "expireAfterSeconds",
    "timeseries",
    "clusteredIndex",
    "cappedSize",
    "cappedMax",
    "dryRun",
    "collectionUUID",
];

/// Parses `changeStreamPreAndPostImages: {enabled: bool}` (of `collMod` and `create`).
pub fn pre_and_post_images_option(command: &str, value: &Bson) -> Result<bool> {
    let field = "changeStreamPreAndPostImages";
    let Bson::Document(spec) = value else {
        return Err(CommandError::type_mismatch(format!(
            "BSON field '{command}.{field}' is the wrong type '{}', expected type 'object'",
            crate::engine::compare::type_alias(value)
        )));
    };
    if let Some(unknown) = spec.keys().find(|k| *k != "enabled") {
        return Err(CommandError::new(
            codes::UNKNOWN_BSON_FIELD,
            format!("BSON field '{field}.{unknown}' is an unknown field."),
        ));
    }
    match spec.get("enabled") {
        Some(Bson::Boolean(b)) => Ok(*b),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "BSON field '{field}.enabled' is the wrong type '{}', expected type 'bool'",
            crate::engine::compare::type_alias(other)
        ))),
        None => Err(CommandError::new(
            40414,
            format!("BSON field '{field}.enabled' is missing but a required field"),
        )),
    }
}

/// `collMod`.
pub fn coll_mod(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    for field in cmd.keys().skip(1) {
        if UNSUPPORTED_COLLMOD.contains(&field.as_str()) {
            return Err(CommandError::new(
                codes::INVALID_OPTIONS,
                format!("collMod option '{field}' is not supported by this emulator"),
            ));
        }
    }
    args::check_fields(cmd, "collMod", &["changeStreamPreAndPostImages"])?;
    let name = args::collection_name(cmd, "collMod")?;
    write_concern::check(cmd, ctx.state)?;
    let images = cmd
        .get("changeStreamPreAndPostImages")
        .map(|v| pre_and_post_images_option("collMod", v))
        .transpose()?;
    let coll = ctx.state.catalog.get(ctx.db, &name).ok_or_else(|| {
        CommandError::new(
            codes::NAMESPACE_NOT_FOUND,
            format!("ns does not exist: {}.{name}", ctx.db),
        )
    })?;
    let mut coll = coll.lock();
    let mut description = Document::new();
    if let Some(enabled) = images {
        coll.pre_and_post_images = enabled;
        description.insert("changeStreamPreAndPostImages", doc! {"enabled": enabled});
    }
    coll.record(ChangeKind::Modify { description });
    Ok(Document::new())
}

fn namespace(cmd: &Document, field: &str) -> Result<(String, String)> {
    let ns = match cmd.get(field) {
        Some(Bson::String(ns)) => ns,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'renameCollection.{field}' is the wrong type '{}', expected type 'string'",
                crate::engine::compare::type_alias(other)
            )));
        }
        None => return Err(args::missing("renameCollection", field)),
    };
    match ns.split_once('.') {
        Some((db, coll)) if !db.is_empty() && !coll.is_empty() => {
            Ok((db.to_string(), coll.to_string()))
        }
        _ => Err(CommandError::new(
            codes::INVALID_NAMESPACE,
            format!(
                "Invalid {} namespace: {ns}",
                if field == "to" { "target" } else { "source" }
            ),
        )),
    }
}

/// `renameCollection` (admin only): `{renameCollection: "db.from", to: "db.to", dropTarget}`.
pub fn rename_collection(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "renameCollection", &["to", "dropTarget"])?;
    if ctx.db != "admin" {
        return Err(CommandError::new(
            13,
            "renameCollection may only be run against the admin database.",
        ));
    }
    write_concern::check(cmd, ctx.state)?;
    let (from_db, from) = namespace(cmd, "renameCollection")?;
    let (to_db, to) = namespace(cmd, "to")?;
    let drop_target = args::opt_bool(cmd, "renameCollection", "dropTarget")?.unwrap_or(false);
    ctx.state
        .catalog
        .rename((&from_db, &from), (&to_db, &to), drop_target)?;
    Ok(Document::new())
}
