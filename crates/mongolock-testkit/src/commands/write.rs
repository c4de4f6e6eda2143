//! `insert`, `update` and `delete`, and the single-document write core that
//! `findAndModify` shares with them.

use bson::{Bson, Document, doc, oid::ObjectId};

use super::args;
use super::context::Ctx;
use super::write_concern;
use crate::engine::EvalContext;
use crate::engine::collation;
use crate::engine::collection::Collection;
use crate::engine::error::{CommandError, Result, codes};
use crate::engine::matcher::{MatchDetails, Matcher};
use crate::engine::size;
use crate::engine::sort::SortSpec;
use crate::engine::update::{
    Update, UpdateContext, upsert_seed, validate_document_for_insert, validate_document_for_storage,
};

/// Rejects options this emulator does not implement, in mongod's error shape.
pub fn unsupported(option: &str) -> CommandError {
    CommandError::new(
        codes::INVALID_OPTIONS,
        format!("'{option}' is not supported by this emulator"),
    )
}

/// Checks that a `hint` names an existing index. A valid hint does not change which
/// documents match, so nothing else is done with it.
pub fn check_hint(coll: Option<&Collection>, hint: Option<&Bson>) -> Result<()> {
    let Some(hint) = hint else { return Ok(()) };
    let found = match (coll, hint) {
        (None, _) => false,
        (Some(c), Bson::String(name)) => c.indexes().iter().any(|i| &i.name == name),
        (Some(c), Bson::Document(key)) => c
            .indexes()
            .iter()
            .any(|i| crate::engine::compare::compare_documents(&i.key, key).is_eq()),
        _ => {
            return Err(CommandError::failed_to_parse(
                "hint must be a string or an object",
            ));
        }
    };
    if found || coll.is_none() {
        Ok(())
    } else {
        Err(CommandError::bad_value(
            "hint provided does not correspond to an existing index",
        ))
    }
}

/// Gives a document an `_id` (a new ObjectId, first) if it has none and checks it for storage.
pub fn prepare_for_insert(mut doc: Document) -> Result<Document> {
    if !doc.contains_key("_id") {
        let mut with_id = doc! {"_id": ObjectId::new()};
        with_id.extend(doc);
        doc = with_id;
    } else if doc.keys().next().map(String::as_str) != Some("_id") {
        let id = doc.remove("_id").expect("checked above");
        let mut with_id = doc! {"_id": id};
        with_id.extend(doc);
        doc = with_id;
    }
    validate_document_for_insert(&doc)?;
    Ok(doc)
}

/// What one update statement did.
#[derive(Debug, Default)]
pub struct UpdateOutcome {
    /// Documents matched (1 for an upsert that inserted).
    pub matched: u64,
    /// Documents whose content changed.
    pub modified: u64,
    /// `_id` of the inserted document, when the upsert inserted.
    pub upserted: Option<Bson>,
    /// The document before the (first) change.
    pub before: Option<Document>,
    /// The document after the (first) change.
    pub after: Option<Document>,
}

/// One update statement, parsed.
#[derive(Debug)]
pub struct UpdateStatement<'a> {
    /// The raw filter (for upsert seeding and the `_id` fast path).
    pub filter: &'a Document,
    /// The parsed filter.
    pub matcher: Matcher,
    /// The parsed update.
    pub update: Update,
    /// Insert when nothing matches.
    pub upsert: bool,
    /// Update every match, not only the first.
    pub multi: bool,
    /// Which match is first (findAndModify's `sort`; 7.0 has no update `sort`).
    pub sort: Option<SortSpec>,
}

impl UpdateStatement<'_> {
    /// Refuses what mongod refuses when it parses the statement, before it looks at any
    /// document: an upsert whose query uses `$expr`, anywhere in it, is code 224 whether or
    /// not a document matches (`ParsedUpdate::parseQueryToCQ` in mongod's
    /// `src/mongo/db/ops/parsed_update.cpp` parses an upsert's query without the `$expr`
    /// feature and rewrites the parser's error into this message).
    pub fn check(&self) -> Result<()> {
        if self.upsert && self.matcher.has_expr() {
            return Err(CommandError::new(
                codes::QUERY_FEATURE_NOT_ALLOWED,
                "$expr is not allowed in the query predicate for an upsert",
            ));
        }
        Ok(())
    }
}

/// The matching records, in the order the statement visits them, each with what the filter
/// matched (for the positional operator).
pub fn matching_records(
    coll: &Collection,
    filter: &Document,
    matcher: &Matcher,
    sort: Option<&SortSpec>,
    eval: &EvalContext,
    first_only: bool,
) -> Result<Vec<(u64, MatchDetails)>> {
    let mut found = Vec::new();
    for record in coll.candidates(filter) {
        eval.check_deadline()?;
        let doc = coll.get(record).expect("candidate records exist");
        if let Some(details) = matcher.match_details(doc, eval)? {
            found.push((record, details));
            if first_only && sort.is_none() {
                break;
            }
        }
    }
    if let Some(sort) = sort {
        found.sort_by(|(a, _), (b, _)| {
            sort.compare(coll.get(*a).expect("exists"), coll.get(*b).expect("exists"))
        });
        if first_only {
            found.truncate(1);
        }
    }
    Ok(found)
}

/// Runs one update statement against a locked collection. Atomic per document: the
/// collection lock is held by the caller for the whole read-decide-write.
pub fn run_update(
    coll: &mut Collection,
    statement: &UpdateStatement<'_>,
    eval: &EvalContext,
) -> Result<UpdateOutcome> {
    let mut outcome = UpdateOutcome::default();
    let records = matching_records(
        coll,
        statement.filter,
        &statement.matcher,
        statement.sort.as_ref(),
        eval,
        !statement.multi,
    )?;
    for (record, details) in records {
        // Each document is written whole or not at all: what was written before the
        // deadline stays written.
        eval.check_deadline()?;
        let mut after = coll.get(record).expect("matched records exist").clone();
        let changed = statement.update.apply(
            &mut after,
            &UpdateContext {
                eval,
                is_insert: false,
                matched: Some(&details),
            },
        )?;
        outcome.matched += 1;
        // The reply shows the first document only: the others are not copied.
        let first = outcome.after.is_none();
        if changed {
            validate_document_for_storage(&after)?;
            size::check_update_result(&after)?;
            let style = statement.update.style();
            if first {
                outcome.before = Some(coll.replace(record, after.clone(), style)?);
                outcome.after = Some(after);
            } else {
                coll.replace(record, after, style)?;
            }
            outcome.modified += 1;
        } else if first {
            outcome.before = coll.get(record).cloned();
            outcome.after = Some(after);
        }
    }
    if outcome.matched == 0 && statement.upsert {
        let mut doc = upsert_seed(statement.filter, statement.update.is_replacement())?;
        statement.update.apply(
            &mut doc,
            &UpdateContext {
                eval,
                is_insert: true,
                matched: None,
            },
        )?;
        let doc = prepare_for_insert(doc)?;
        size::check_upsert_result(&doc)?;
        let id = doc
            .get("_id")
            .cloned()
            .expect("prepare_for_insert adds _id");
        coll.insert(doc.clone())?;
        outcome.matched = 0;
        outcome.upserted = Some(id);
        outcome.after = Some(doc);
    }
    Ok(outcome)
}

/// The statements of a write command: between 1 and `maxWriteBatchSize` (100,000, as the
/// handshake advertises), as mongod checks.
fn write_batch<'a>(cmd: &'a Document, command: &str, field: &str) -> Result<&'a Vec<Bson>> {
    let batch = args::array(cmd, command, field)?;
    if batch.is_empty() || batch.len() > 100_000 {
        return Err(CommandError::new(
            codes::INVALID_LENGTH,
            format!(
                "Write batch sizes must be between 1 and 100000. Got {} operations.",
                batch.len()
            ),
        ));
    }
    Ok(batch)
}

/// Whether an error fails the whole write command instead of its statement: running out of
/// time does (`handleError` in mongod's `src/mongo/db/ops/write_ops_exec.cpp` rethrows
/// interruptions, "These have always failed the whole batch"); the statements before it
/// stay applied.
fn is_interruption(error: &CommandError) -> bool {
    error.code == codes::MAX_TIME_MS_EXPIRED
}

/// A write error entry as mongod reports it inside `writeErrors`.
fn write_error(index: usize, error: &CommandError) -> Document {
    let mut entry =
        doc! {"index": index as i32, "code": error.code, "errmsg": error.errmsg.clone()};
    for (k, v) in &error.extra {
        entry.insert(k.clone(), v.clone());
    }
    entry
}

fn ordered(cmd: &Document, command: &str) -> Result<bool> {
    Ok(args::opt_bool(cmd, command, "ordered")?.unwrap_or(true))
}

fn finish_write(mut reply: Document, errors: Vec<Document>) -> Document {
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    reply
}

/// `insert`.
pub fn insert(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(
        cmd,
        "insert",
        &["documents", "ordered", "bypassDocumentValidation"],
    )?;
    let name = args::collection_name(cmd, "insert")?;
    super::views::refuse_write(ctx, &name)?;
    write_concern::check(cmd, ctx.state)?;
    let ordered = ordered(cmd, "insert")?;
    let documents = write_batch(cmd, "insert", "documents")?;
    let (coll, _) = ctx.state.catalog.get_or_create(ctx.db, &name)?;
    let mut coll = ctx.lock(&coll)?;
    let mut n = 0;
    let mut errors = Vec::new();
    for (index, doc) in documents.iter().enumerate() {
        // Running out of time fails the whole command; what was inserted stays.
        ctx.check_deadline()?;
        let result = match doc {
            Bson::Document(doc) => size::check_insert(doc)
                .and_then(|()| prepare_for_insert(doc.clone()))
                .and_then(|d| coll.insert(d)),
            other => Err(CommandError::type_mismatch(format!(
                "BSON field 'insert.documents.{index}' is the wrong type '{}', expected type 'object'",
                crate::engine::compare::type_alias(other)
            ))),
        };
        match result {
            Ok(_) => n += 1,
            Err(error) if is_interruption(&error) => return Err(error),
            Err(error) => {
                errors.push(write_error(index, &error));
                if ordered {
                    break;
                }
            }
        }
    }
    Ok(finish_write(doc! {"n": n}, errors))
}

const UPDATE_STATEMENT_FIELDS: &[&str] = &[
    "q",
    "u",
    "upsert",
    "multi",
    "arrayFilters",
    "hint",
    "collation",
    "c",
    "upsertSupplied",
];

/// Update statements' fields are parsed with the whole command, as mongod's IDL does: an
/// unknown one (such as 8.0's `sort`, which 7.0 does not know) fails the command.
fn check_update_statement_fields(statements: &[Bson], command: &str) -> Result<()> {
    for raw in statements.iter().filter_map(Bson::as_document) {
        for field in raw.keys() {
            if !UPDATE_STATEMENT_FIELDS.contains(&field.as_str()) {
                return Err(CommandError::new(
                    codes::UNKNOWN_BSON_FIELD,
                    format!("BSON field '{command}.updates.{field}' is an unknown field."),
                ));
            }
        }
    }
    Ok(())
}

fn parse_update_statement<'a>(raw: &'a Document, command: &str) -> Result<UpdateStatement<'a>> {
    for field in raw.keys() {
        if !UPDATE_STATEMENT_FIELDS.contains(&field.as_str()) {
            return Err(CommandError::new(
                codes::UNKNOWN_BSON_FIELD,
                format!("BSON field '{command}.updates.{field}' is an unknown field."),
            ));
        }
    }
    if raw.contains_key("c") {
        return Err(unsupported("c (constants)"));
    }
    collation::check(raw.get("collation"), "update.updates.collation")?;
    let filter = raw
        .get_document("q")
        .map_err(|_| args::missing("update.updates", "q"))?;
    let update = raw
        .get("u")
        .ok_or_else(|| args::missing("update.updates", "u"))?;
    let array_filters = args::opt_array(raw, "update.updates", "arrayFilters")?;
    let multi = args::opt_bool(raw, "update.updates", "multi")?.unwrap_or(false);
    let update = Update::parse(update, array_filters.map(Vec::as_slice))?;
    if multi && update.is_replacement() {
        return Err(CommandError::failed_to_parse(
            "multi update is not supported for replacement-style update",
        ));
    }
    let statement = UpdateStatement {
        filter,
        matcher: Matcher::parse(filter)?,
        update,
        upsert: args::opt_bool(raw, "update.updates", "upsert")?.unwrap_or(false),
        multi,
        sort: None,
    };
    statement.check()?;
    Ok(statement)
}

/// `update`.
/// The refusal of a server without pipeline-style updates
/// ([`TestServerBuilder::without_pipeline_updates`](crate::TestServerBuilder::without_pipeline_updates)).
pub fn pipeline_updates_refused() -> CommandError {
    CommandError::new(
        238,
        "pipeline-style updates are not supported by this server",
    )
}

pub fn update(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(
        cmd,
        "update",
        &["updates", "ordered", "bypassDocumentValidation", "let"],
    )?;
    let name = args::collection_name(cmd, "update")?;
    super::views::refuse_write(ctx, &name)?;
    write_concern::check(cmd, ctx.state)?;
    let ordered = ordered(cmd, "update")?;
    let statements = write_batch(cmd, "update", "updates")?;
    check_update_statement_fields(statements, "update")?;
    if !ctx.state.pipeline_updates
        && statements.iter().any(|s| {
            matches!(
                s.as_document().and_then(|d| d.get("u")),
                Some(Bson::Array(_))
            )
        })
    {
        return Err(pipeline_updates_refused());
    }
    let eval = ctx.eval_context(cmd, "update")?;
    ctx.state.catalog.get_or_create(ctx.db, &name)?;
    let (mut n, mut modified) = (0u64, 0u64);
    let mut upserted = Vec::new();
    let mut errors = Vec::new();
    for (index, raw) in statements.iter().enumerate() {
        // Each statement is a write of its own, as in mongod: it is parsed before the
        // collection is locked, and other commands may run between two statements (a batch
        // of thousands, such as a keepalive's, never holds the collection for its whole run).
        let result = match raw {
            Bson::Document(raw) => {
                parse_update_statement(raw, "update").and_then(|mut statement| {
                    statement.matcher.optimize(&eval)?;
                    let (coll, _) = ctx.state.catalog.get_or_create(ctx.db, &name)?;
                    let mut coll = ctx.lock(&coll)?;
                    check_hint(Some(&coll), raw.get("hint"))?;
                    run_update(&mut coll, &statement, &eval)
                })
            }
            _ => Err(CommandError::type_mismatch(
                "BSON field 'update.updates' is the wrong type, expected type 'object'",
            )),
        };
        match result {
            Ok(outcome) => {
                modified += outcome.modified;
                if let Some(id) = outcome.upserted {
                    n += 1;
                    upserted.push(doc! {"index": index as i32, "_id": id});
                } else {
                    n += outcome.matched;
                }
            }
            Err(error) if is_interruption(&error) => return Err(error),
            Err(error) => {
                errors.push(write_error(index, &error));
                if ordered {
                    break;
                }
            }
        }
    }
    let mut reply = doc! {"n": n as i32, "nModified": modified as i32};
    if !upserted.is_empty() {
        reply.insert("upserted", upserted);
    }
    Ok(finish_write(reply, errors))
}

/// Deletes the first (or every) match of a filter from a locked collection; returns the
/// removed documents.
pub fn run_delete(
    coll: &mut Collection,
    filter: &Document,
    matcher: &Matcher,
    sort: Option<&SortSpec>,
    first_only: bool,
    eval: &EvalContext,
) -> Result<Vec<Document>> {
    let records = matching_records(coll, filter, matcher, sort, eval, first_only)?;
    Ok(records
        .into_iter()
        .filter_map(|(r, _)| coll.remove(r))
        .collect())
}

/// `delete`.
pub fn delete(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "delete", &["deletes", "ordered", "let"])?;
    let name = args::collection_name(cmd, "delete")?;
    super::views::refuse_write(ctx, &name)?;
    write_concern::check(cmd, ctx.state)?;
    let ordered = ordered(cmd, "delete")?;
    let statements = write_batch(cmd, "delete", "deletes")?;
    let eval = ctx.eval_context(cmd, "delete")?;
    let coll = ctx.state.catalog.get(ctx.db, &name);
    let mut guard = coll.as_ref().map(|c| ctx.lock(c)).transpose()?;
    let mut n = 0i32;
    let mut errors = Vec::new();
    for (index, raw) in statements.iter().enumerate() {
        let result = (|| -> Result<usize> {
            let Bson::Document(raw) = raw else {
                return Err(CommandError::type_mismatch(
                    "BSON field 'delete.deletes' is the wrong type, expected type 'object'",
                ));
            };
            for field in raw.keys() {
                if !["q", "limit", "collation", "hint"].contains(&field.as_str()) {
                    return Err(CommandError::new(
                        codes::UNKNOWN_BSON_FIELD,
                        format!("BSON field 'delete.deletes.{field}' is an unknown field."),
                    ));
                }
            }
            collation::check(raw.get("collation"), "delete.deletes.collation")?;
            let filter = raw
                .get_document("q")
                .map_err(|_| args::missing("delete.deletes", "q"))?;
            let limit = args::opt_i64(raw, "delete.deletes", "limit")?
                .ok_or_else(|| args::missing("delete.deletes", "limit"))?;
            if limit != 0 && limit != 1 {
                return Err(CommandError::failed_to_parse(format!(
                    "The limit field in delete objects must be 0 or 1. Got {limit}"
                )));
            }
            let mut matcher = Matcher::parse(filter)?;
            matcher.optimize(&eval)?;
            let Some(coll) = guard.as_deref_mut() else {
                return Ok(0);
            };
            check_hint(Some(coll), raw.get("hint"))?;
            Ok(run_delete(coll, filter, &matcher, None, limit == 1, &eval)?.len())
        })();
        match result {
            Ok(deleted) => n += deleted as i32,
            Err(error) if is_interruption(&error) => return Err(error),
            Err(error) => {
                errors.push(write_error(index, &error));
                if ordered {
                    break;
                }
            }
        }
    }
    Ok(finish_write(doc! {"n": n}, errors))
}
