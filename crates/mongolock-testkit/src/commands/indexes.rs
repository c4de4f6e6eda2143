//! `createIndexes`, `listIndexes` and `dropIndexes`.

use bson::{Bson, Document, doc};

use super::args;
use super::context::Ctx;
use super::cursor_batch::cursor_batch_size;
use super::write_concern;
use crate::engine::error::{CommandError, Result, codes};
use crate::engine::index::Index;

/// `createIndexes`: idempotent for identical specifications, an error for conflicting ones.
pub fn create_indexes(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(
        cmd,
        "createIndexes",
        &["indexes", "commitQuorum", "ignoreUnknownIndexOptions"],
    )?;
    let name = args::collection_name(cmd, "createIndexes")?;
    super::views::refuse_write(ctx, &name)?;
    write_concern::check(cmd, ctx.state)?;
    let specs = args::array(cmd, "createIndexes", "indexes")?;
    if specs.is_empty() {
        return Err(CommandError::bad_value(
            "Must specify at least one index to create",
        ));
    }
    let mut indexes = Vec::new();
    for spec in specs {
        let Bson::Document(spec) = spec else {
            return Err(CommandError::type_mismatch(
                "BSON field 'createIndexes.indexes' is the wrong type, expected type 'object'",
            ));
        };
        indexes.push(Index::from_spec(spec)?);
    }
    let (coll, created) = ctx.state.catalog.get_or_create(ctx.db, &name)?;
    let mut coll = coll.lock();
    let before = coll.indexes().len() as i32;
    let mut added = 0;
    for index in indexes {
        if coll.create_index(index)? {
            added += 1;
        }
    }
    let mut reply = doc! {
        "numIndexesBefore": before,
        "numIndexesAfter": before + added,
        "createdCollectionAutomatically": created,
    };
    if added == 0 {
        reply.insert("note", "all indexes already exist");
    }
    if !ctx.state.standalone {
        reply.insert("commitQuorum", "votingMembers");
    }
    Ok(reply)
}

/// `listIndexes`.
pub fn list_indexes(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(
        cmd,
        "listIndexes",
        &["cursor", "includeBuildUUIDs", "includeIndexBuildInfo"],
    )?;
    let name = args::collection_name(cmd, "listIndexes")?;
    super::views::refuse_write(ctx, &name)?;
    let batch_size = cursor_batch_size(cmd, "listIndexes")?;
    let ns = format!("{}.{name}", ctx.db);
    let coll = ctx.state.catalog.get(ctx.db, &name).ok_or_else(|| {
        CommandError::new(
            codes::NAMESPACE_NOT_FOUND,
            format!("ns does not exist: {ns}"),
        )
    })?;
    let described: Vec<Document> = coll.lock().indexes().iter().map(Index::describe).collect();
    Ok(ctx
        .state
        .cursors
        .first_batch(&ns, described, batch_size, false))
}

/// `dropIndexes`: by name, by key pattern, a list of names, or `"*"` for all but `_id_`.
pub fn drop_indexes(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "dropIndexes", &["index"])?;
    let name = args::collection_name(cmd, "dropIndexes")?;
    super::views::refuse_write(ctx, &name)?;
    write_concern::check(cmd, ctx.state)?;
    let ns = format!("{}.{name}", ctx.db);
    let coll = ctx.state.catalog.get(ctx.db, &name).ok_or_else(|| {
        CommandError::new(codes::NAMESPACE_NOT_FOUND, format!("ns not found {ns}"))
    })?;
    let mut coll = coll.lock();
    let was = coll.indexes().len() as i32;
    match cmd.get("index") {
        Some(Bson::String(star)) if star == "*" => coll.drop_all_indexes(),
        Some(Bson::String(index)) => coll.drop_index(index)?,
        Some(Bson::Array(names)) => {
            for index in names {
                let Bson::String(index) = index else {
                    return Err(CommandError::type_mismatch(
                        "dropIndexes index names must be strings",
                    ));
                };
                if !coll.indexes().iter().any(|i| &i.name == index) {
                    return Err(CommandError::new(
                        codes::INDEX_NOT_FOUND,
                        format!("index not found with name [{index}]"),
                    ));
                }
            }
            for index in names {
                coll.drop_index(index.as_str().expect("checked above"))?;
            }
        }
        Some(Bson::Document(key)) => {
            let found = coll
                .indexes()
                .iter()
                .find(|i| crate::engine::compare::compare_documents(&i.key, key).is_eq())
                .map(|i| i.name.clone())
                .ok_or_else(|| {
                    CommandError::new(
                        codes::INDEX_NOT_FOUND,
                        format!("can't find index with key: {key}"),
                    )
                })?;
            coll.drop_index(&found)?;
        }
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'dropIndexes.index' is the wrong type, expected types '[string, object, array]'",
            ));
        }
        None => return Err(args::missing("dropIndexes", "index")),
    }
    Ok(doc! {"nIndexesWas": was})
}
