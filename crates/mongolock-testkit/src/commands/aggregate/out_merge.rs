//! `$out` and `$merge`: the aggregation stages that write their input to a collection.
//!
//! They need the catalog, so they are not [`Pipeline`] stages: `aggregate` parses the last
//! stage here, runs the rest of the pipeline, and hands the results to [`Output::write`].

use bson::{Bson, Document};

use crate::commands::context::Ctx;
use crate::commands::write::prepare_for_insert;
use crate::engine::EvalContext;
use crate::engine::collection::{Collection, validate_collection_name, validate_db_name};
use crate::engine::compare::{type_alias, values_equal};
use crate::engine::error::{CommandError, Result, codes};
use crate::engine::expr::Expr;
use crate::engine::index::Index;
use crate::engine::pipeline::Pipeline;
use crate::engine::update::{UpdateStyle, validate_document_for_storage};

/// A parsed `$out` or `$merge` stage.
#[derive(Debug)]
pub enum Output {
    /// `$out`: replace the target's contents.
    Out {
        /// Target database.
        db: String,
        /// Target collection.
        coll: String,
    },
    /// `$merge`: fold each result into the target.
    Merge(Box<Merge>),
}

/// A parsed `$merge` specification.
#[derive(Debug)]
pub struct Merge {
    db: String,
    coll: String,
    on: Vec<String>,
    when_matched: WhenMatched,
    when_not_matched: WhenNotMatched,
    /// `let` (default `{new: "$$ROOT"}`), evaluated against each result document.
    vars: Vec<(String, Expr)>,
}

#[derive(Debug)]
enum WhenMatched {
    Replace,
    KeepExisting,
    Merge,
    Fail,
    Pipeline(Pipeline),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WhenNotMatched {
    Insert,
    Discard,
    Fail,
}

/// Whether a stage is `$out` or `$merge`.
pub fn is_output_stage(stage: &Bson) -> Option<&str> {
    let name = stage.as_document()?.keys().next()?;
    ["$out", "$merge"]
        .contains(&name.as_str())
        .then_some(name.as_str())
}

fn unknown_field(path: &str, field: &str) -> CommandError {
    CommandError::new(
        codes::UNKNOWN_BSON_FIELD,
        format!("BSON field '{path}.{field}' is an unknown field."),
    )
}

fn string_field(path: &str, field: &str, value: &Bson) -> Result<String> {
    match value {
        Bson::String(s) => Ok(s.clone()),
        other => Err(CommandError::type_mismatch(format!(
            "BSON field '{path}.{field}' is the wrong type '{}', expected type 'string'",
            type_alias(other)
        ))),
    }
}

fn check_target(db: &str, coll: &str) -> Result<()> {
    validate_db_name(db)?;
    validate_collection_name(db, coll)?;
    if ["admin", "config", "local"].contains(&db) {
        return Err(CommandError::new(
            codes::INVALID_NAMESPACE,
            format!(
                "Invalid target namespace: {db}.{coll} (writing to the {db} database is not supported by this emulator)"
            ),
        ));
    }
    Ok(())
}

impl Output {
    /// Parses the last stage of a pipeline; `db` is the aggregate's database and `vars` the
    /// names of the command's `let` variables.
    pub fn parse(stage: &Bson, db: &str, command_vars: &Document) -> Result<Output> {
        let spec = stage
            .as_document()
            .and_then(|d| d.iter().next())
            .ok_or_else(|| CommandError::internal("output stage"))?;
        match spec {
            (name, spec) if name == "$out" => parse_out(spec, db),
            (_, spec) => Ok(Output::Merge(Box::new(parse_merge(
                spec,
                db,
                command_vars,
            )?))),
        }
    }

    /// Writes the pipeline's results to the target.
    pub fn write(&self, ctx: &Ctx<'_>, eval: &EvalContext, results: Vec<Document>) -> Result<()> {
        match self {
            Output::Out { db, coll } => write_out(ctx, db, coll, results),
            Output::Merge(merge) => merge.write(ctx, eval, results),
        }
    }
}

fn parse_out(spec: &Bson, db: &str) -> Result<Output> {
    let (db, coll) = match spec {
        Bson::String(coll) => (db.to_string(), coll.clone()),
        Bson::Document(d) => {
            let (mut out_db, mut out_coll) = (None, None);
            for (field, value) in d {
                match field.as_str() {
                    "db" => out_db = Some(string_field("$out", "db", value)?),
                    "coll" => out_coll = Some(string_field("$out", "coll", value)?),
                    "timeseries" => {
                        return Err(CommandError::new(
                            codes::INVALID_OPTIONS,
                            "'$out.timeseries' is not supported by this emulator",
                        ));
                    }
                    other => return Err(unknown_field("$out", other)),
                }
            }
            let missing = |f: &str| {
                CommandError::new(
                    40414,
                    format!("BSON field '$out.{f}' is missing but a required field"),
                )
            };
            (
                out_db.ok_or_else(|| missing("db"))?,
                out_coll.ok_or_else(|| missing("coll"))?,
            )
        }
        other => {
            return Err(CommandError::new(
                16990,
                format!(
                    "$out only supports a string or object argument, not {}",
                    type_alias(other)
                ),
            ));
        }
    };
    check_target(&db, &coll)?;
    Ok(Output::Out { db, coll })
}

/// `$out` as mongod runs it (`src/mongo/db/pipeline/document_source_out.cpp`): the results
/// go into a temporary collection `tmp.agg_out.<uuid>` of the target's database, created with
/// the target's options and indexes, which is then renamed over the target with
/// `dropTarget`; if an insert fails, the temporary collection is dropped and the target is
/// left as it was (no collection is created). Each step is a logged write (the creation, its
/// indexes, the inserts, the rename), as each is an oplog entry in mongod, so a replica
/// set's secondaries apply the `$out` as they apply any write (jstest
/// `jstests/replsets/pipelineout.js`: the secondary has the primary's output).
fn write_out(ctx: &Ctx<'_>, db: &str, coll: &str, results: Vec<Document>) -> Result<()> {
    let docs = results
        .into_iter()
        .map(prepare_for_insert)
        .collect::<Result<Vec<_>>>()?;
    crate::commands::views::refuse_view(ctx, db, coll)?;
    let catalog = &ctx.state.catalog;
    let (images, indexes) = match catalog.get(db, coll) {
        Some(target) => {
            let target = target.lock();
            let indexes: Vec<_> = target.indexes()[1..].iter().map(Index::emptied).collect();
            (target.pre_and_post_images, indexes)
        }
        None => (false, Vec::new()),
    };
    let temp_name = format!("tmp.agg_out.{}", bson::Uuid::new());
    let (temp, _) = catalog.get_or_create(db, &temp_name)?;
    let filled = {
        let mut temp = temp.lock();
        // The options are the target's (set as `create` sets them, unlogged there too).
        temp.pre_and_post_images = images;
        fill(&mut temp, indexes, docs)
    };
    if let Err(error) = filled {
        catalog.drop_collection(db, &temp_name);
        return Err(error);
    }
    catalog.rename((db, &temp_name), (db, coll), true)
}

/// Builds `$out`'s temporary collection: the target's indexes, then the results.
fn fill(temp: &mut Collection, indexes: Vec<Index>, docs: Vec<Document>) -> Result<()> {
    for index in indexes {
        temp.create_index(index)?;
    }
    for doc in docs {
        temp.insert(doc)?;
    }
    Ok(())
}

fn parse_merge(spec: &Bson, db: &str, command_vars: &Document) -> Result<Merge> {
    let mut merge = Merge {
        db: db.to_string(),
        coll: String::new(),
        on: vec!["_id".to_string()],
        when_matched: WhenMatched::Merge,
        when_not_matched: WhenNotMatched::Insert,
        vars: Vec::new(),
    };
    let spec = match spec {
        Bson::String(coll) => {
            merge.coll = coll.clone();
            check_target(&merge.db, &merge.coll)?;
            merge.vars = vec![("new".to_string(), Expr::parse(&Bson::from("$$ROOT"))?)];
            return Ok(merge);
        }
        Bson::Document(d) => d,
        other => {
            return Err(CommandError::new(
                51182,
                format!(
                    "$merge only supports a string or object argument, not {}",
                    type_alias(other)
                ),
            ));
        }
    };
    let mut into = None;
    let mut when_matched = None;
    let mut let_vars = None;
    for (field, value) in spec {
        match field.as_str() {
            "into" => into = Some(value),
            "on" => merge.on = parse_on(value)?,
            "whenMatched" => when_matched = Some(value),
            "whenNotMatched" => {
                merge.when_not_matched = match value {
                    Bson::String(s) if s == "insert" => WhenNotMatched::Insert,
                    Bson::String(s) if s == "discard" => WhenNotMatched::Discard,
                    Bson::String(s) if s == "fail" => WhenNotMatched::Fail,
                    Bson::String(s) => {
                        return Err(CommandError::bad_value(format!(
                            "Enumeration value '{s}' for field '$merge.whenNotMatched' is not a valid value."
                        )));
                    }
                    other => {
                        return Err(CommandError::type_mismatch(format!(
                            "BSON field '$merge.whenNotMatched' is the wrong type '{}', expected type 'string'",
                            type_alias(other)
                        )));
                    }
                }
            }
            "let" => match value {
                Bson::Document(d) => let_vars = Some(d),
                other => {
                    return Err(CommandError::type_mismatch(format!(
                        "BSON field '$merge.let' is the wrong type '{}', expected type 'object'",
                        type_alias(other)
                    )));
                }
            },
            "targetCollectionVersion" => {
                return Err(CommandError::new(
                    51123,
                    "Unexpected target chunk version specified",
                ));
            }
            other => return Err(unknown_field("$merge", other)),
        }
    }
    match into {
        None => {
            return Err(CommandError::new(
                40414,
                "BSON field '$merge.into' is missing but a required field",
            ));
        }
        Some(Bson::String(coll)) => merge.coll = coll.clone(),
        Some(Bson::Document(d)) => {
            let mut coll = None;
            for (field, value) in d {
                match field.as_str() {
                    "db" => merge.db = string_field("$merge.into", "db", value)?,
                    "coll" => coll = Some(string_field("$merge.into", "coll", value)?),
                    other => return Err(unknown_field("$merge.into", other)),
                }
            }
            merge.coll = coll.ok_or_else(|| {
                CommandError::new(
                    40414,
                    "BSON field '$merge.into.coll' is missing but a required field",
                )
            })?;
        }
        Some(other) => {
            return Err(CommandError::new(
                51178,
                format!(
                    "$merge 'into' field  must be either a string or an object, but found {}",
                    type_alias(other)
                ),
            ));
        }
    }
    check_target(&merge.db, &merge.coll)?;
    let is_pipeline = matches!(when_matched, Some(Bson::Array(_)));
    if let Some(vars) = let_vars {
        if !is_pipeline {
            return Err(CommandError::new(
                51199,
                "Cannot use 'let' variables with 'whenMatched' mode other than a pipeline",
            ));
        }
        for (name, value) in vars {
            merge.vars.push((name.clone(), Expr::parse(value)?));
        }
    } else {
        merge.vars = vec![("new".to_string(), Expr::parse(&Bson::from("$$ROOT"))?)];
    }
    merge.when_matched = match when_matched {
        None => WhenMatched::Merge,
        Some(Bson::String(s)) => match s.as_str() {
            "replace" => WhenMatched::Replace,
            "keepExisting" => WhenMatched::KeepExisting,
            "merge" => WhenMatched::Merge,
            "fail" => WhenMatched::Fail,
            other => {
                return Err(CommandError::bad_value(format!(
                    "Enumeration value '{other}' for field '$merge.whenMatched' is not a valid value."
                )));
            }
        },
        Some(Bson::Array(stages)) => {
            let mut names = command_vars.clone();
            for (name, _) in &merge.vars {
                names.insert(name.clone(), Bson::Null);
            }
            WhenMatched::Pipeline(Pipeline::parse_update_with_let(stages, &names)?)
        }
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '$merge.whenMatched' is the wrong type '{}', expected type 'string' or 'array'",
                type_alias(other)
            )));
        }
    };
    let supported = match (&merge.when_matched, merge.when_not_matched) {
        (WhenMatched::Fail, WhenNotMatched::Insert) => true,
        (WhenMatched::Fail, _) => false,
        (WhenMatched::KeepExisting, WhenNotMatched::Insert) => true,
        (WhenMatched::KeepExisting, _) => false,
        _ => true,
    };
    if !supported {
        let matched = match &merge.when_matched {
            WhenMatched::Fail => "fail",
            _ => "keepExisting",
        };
        let not_matched = match merge.when_not_matched {
            WhenNotMatched::Discard => "discard",
            _ => "fail",
        };
        return Err(CommandError::new(
            51181,
            format!(
                "Combination of {{whenMatched: {matched}, whenNotMatched: {not_matched}}} is not supported"
            ),
        ));
    }
    Ok(merge)
}

fn parse_on(value: &Bson) -> Result<Vec<String>> {
    let fields = match value {
        Bson::String(s) => vec![s.clone()],
        Bson::Array(items) => {
            if items.is_empty() {
                return Err(CommandError::new(
                    51187,
                    "If explicitly specifying $merge 'on', must include at least one field",
                ));
            }
            let mut fields: Vec<String> = Vec::new();
            for item in items {
                let Bson::String(s) = item else {
                    return Err(CommandError::new(
                        51134,
                        format!(
                            "$merge 'on' array elements must be strings, but found {}",
                            type_alias(item)
                        ),
                    ));
                };
                if fields.contains(s) {
                    return Err(CommandError::new(
                        31465,
                        format!("Found a duplicate field '{s}'"),
                    ));
                }
                fields.push(s.clone());
            }
            fields
        }
        other => {
            return Err(CommandError::new(
                51186,
                format!(
                    "$merge 'on' field  must be either a string or an array of strings, but found {}",
                    type_alias(other)
                ),
            ));
        }
    };
    for field in &fields {
        if field.is_empty() || field.starts_with('$') || field.split('.').any(str::is_empty) {
            return Err(CommandError::new(
                codes::FAILED_TO_PARSE,
                format!("Invalid $merge 'on' field path: '{field}'"),
            ));
        }
    }
    Ok(fields)
}

fn get_path<'d>(doc: &'d Document, path: &str) -> Option<&'d Bson> {
    let mut parts = path.split('.');
    let mut current = doc.get(parts.next()?)?;
    for part in parts {
        current = match current {
            Bson::Document(d) => d.get(part)?,
            _ => return None,
        };
    }
    Some(current)
}

impl Merge {
    fn on_is_id(&self) -> bool {
        self.on.len() == 1 && self.on[0] == "_id"
    }

    /// mongod requires a unique index on exactly the `on` fields (other than `_id`).
    fn check_unique_index(&self, target: Option<&Collection>) -> Result<()> {
        if self.on_is_id() {
            return Ok(());
        }
        let found = target.is_some_and(|coll| {
            coll.indexes().iter().any(|index| {
                index.unique
                    && index.key.len() == self.on.len()
                    && index.key.keys().all(|k| self.on.contains(k))
            })
        });
        if found {
            Ok(())
        } else {
            Err(CommandError::new(
                51183,
                "Cannot find index to verify that join fields will be unique",
            ))
        }
    }

    fn write(&self, ctx: &Ctx<'_>, eval: &EvalContext, results: Vec<Document>) -> Result<()> {
        crate::commands::views::refuse_view(ctx, &self.db, &self.coll)?;
        let catalog = &ctx.state.catalog;
        let mut target = catalog.get(&self.db, &self.coll);
        match &target {
            Some(coll) => self.check_unique_index(Some(&coll.lock()))?,
            None => self.check_unique_index(None)?,
        }
        for doc in results {
            // A missing `_id` is generated when `on` is `_id` (after the `on` checks, so an
            // array `_id` is the `on` error, as in mongod).
            let doc = if self.on_is_id() && !doc.contains_key("_id") {
                prepare_for_insert(doc)?
            } else {
                doc
            };
            let mut key = Vec::with_capacity(self.on.len());
            for field in &self.on {
                match get_path(&doc, field) {
                    None | Some(Bson::Null | Bson::Undefined | Bson::Array(_)) => {
                        return Err(CommandError::new(
                            51132,
                            "$merge write error: 'on' field cannot be missing, null, undefined or an array",
                        ));
                    }
                    Some(value) => key.push(value.clone()),
                }
            }
            let found = target.as_ref().and_then(|coll| {
                let coll = coll.lock();
                let filter = if self.on_is_id() {
                    bson::doc! {"_id": key[0].clone()}
                } else {
                    Document::new()
                };
                coll.candidates(&filter).into_iter().find(|record| {
                    coll.get(*record).is_some_and(|stored| {
                        self.on.iter().zip(&key).all(|(field, value)| {
                            get_path(stored, field).is_some_and(|v| values_equal(v, value))
                        })
                    })
                })
            });
            match found {
                Some(record) => {
                    let coll = target.as_ref().expect("a match implies a target");
                    let mut coll = coll.lock();
                    let stored = coll.get(record).expect("found above").clone();
                    let new = match &self.when_matched {
                        WhenMatched::KeepExisting => continue,
                        WhenMatched::Fail => {
                            // mongod runs this mode as a plain insert: the `_id` index fails it.
                            coll.insert(prepare_for_insert(doc)?)?;
                            continue;
                        }
                        WhenMatched::Replace => replace_keeping_id(&stored, &doc)?,
                        WhenMatched::Merge => {
                            let mut merged = stored.clone();
                            for (k, v) in &doc {
                                merged.insert(k.clone(), v.clone());
                            }
                            check_same_id(&stored, &merged)?;
                            merged
                        }
                        WhenMatched::Pipeline(pipeline) => {
                            let mut vars_eval = eval.clone();
                            for (name, expr) in &self.vars {
                                let value = expr.eval(&doc, eval)?.unwrap_or(Bson::Null);
                                vars_eval.vars.insert(name.clone(), value);
                            }
                            pipeline.apply_update(&stored, &vars_eval)?
                        }
                    };
                    validate_document_for_storage(&new)?;
                    if new != stored {
                        let style = match self.when_matched {
                            WhenMatched::Replace => UpdateStyle::Replacement,
                            WhenMatched::Pipeline(_) => UpdateStyle::Pipeline,
                            _ => UpdateStyle::Operators,
                        };
                        coll.replace(record, new, style)?;
                    }
                }
                None => match self.when_not_matched {
                    WhenNotMatched::Discard => {}
                    WhenNotMatched::Fail => {
                        return Err(CommandError::new(
                            13113,
                            "$merge could not find a matching document in the target collection for at least one document in the source collection",
                        ));
                    }
                    WhenNotMatched::Insert => {
                        let coll = match &target {
                            Some(coll) => coll.clone(),
                            None => {
                                let (coll, _) = catalog.get_or_create(&self.db, &self.coll)?;
                                target = Some(coll.clone());
                                coll
                            }
                        };
                        coll.lock().insert(prepare_for_insert(doc)?)?;
                    }
                },
            }
        }
        Ok(())
    }
}

fn check_same_id(stored: &Document, new: &Document) -> Result<()> {
    match (stored.get("_id"), new.get("_id")) {
        (Some(old), Some(newer)) if !values_equal(old, newer) => Err(CommandError::new(
            codes::IMMUTABLE_FIELD,
            "$merge failed to update the matching document, did you attempt to modify the _id or the shard key?",
        )),
        _ => Ok(()),
    }
}

/// `whenMatched: replace`: the result document replaces the stored one, which keeps its
/// `_id` (first).
fn replace_keeping_id(stored: &Document, doc: &Document) -> Result<Document> {
    check_same_id(stored, doc)?;
    let mut new = Document::new();
    if let Some(id) = stored.get("_id") {
        new.insert("_id", id.clone());
    }
    for (k, v) in doc {
        if k != "_id" {
            new.insert(k.clone(), v.clone());
        }
    }
    Ok(new)
}
