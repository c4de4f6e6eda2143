//! `aggregate`.

use bson::{Bson, Document};

mod change_stream;
mod out_merge;

use super::context::Ctx;
use super::cursor_batch::{cursor_batch_size, cursor_reply};
use super::write::{check_hint, unsupported};
use super::{args, local_sessions};
use crate::engine::collation;
use crate::engine::error::{CommandError, Result, codes};
use crate::engine::expr::Expr;
use crate::engine::pipeline::Pipeline;
use out_merge::{Output, is_output_stage};

/// Stages that produce the input of a `{aggregate: 1}` pipeline instead of a collection.
const SOURCE_STAGES: &[&str] = &["$documents", "$listLocalSessions"];

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
    collation::check(cmd.get("collation"), "aggregate.collation")?;
    let batch_size = cursor_batch_size(cmd, "aggregate")?;
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
    let stage_name = |stage: &Bson| {
        stage
            .as_document()
            .and_then(|s| s.keys().next())
            .cloned()
            .unwrap_or_default()
    };
    for (position, stage) in pipeline.iter().enumerate() {
        if let Some(name) = is_output_stage(stage)
            && position + 1 != pipeline.len()
        {
            return Err(CommandError::new(
                40601,
                format!("{name} can only be the final stage in the pipeline"),
            ));
        }
        let name = stage_name(stage);
        if position > 0 && (SOURCE_STAGES.contains(&name.as_str()) || name == "$changeStream") {
            return Err(CommandError::new(
                40602,
                format!("{name} is only valid as the first stage in a pipeline"),
            ));
        }
    }
    let (source, rest) = match pipeline.split_first() {
        Some((first, rest)) if SOURCE_STAGES.contains(&stage_name(first).as_str()) => {
            (Some(first), rest)
        }
        _ => (None, pipeline.as_slice()),
    };
    let (rest, output) = match rest.split_last() {
        Some((last, rest)) if is_output_stage(last).is_some() => (rest, Some(last)),
        _ => (rest, None),
    };
    if let Some(name) = output.and_then(is_output_stage) {
        let level = cmd
            .get_document("readConcern")
            .ok()
            .and_then(|rc| rc.get_str("level").ok());
        if level == Some("linearizable") {
            return Err(CommandError::new(
                codes::INVALID_OPTIONS,
                format!("{name} cannot be used with a 'linearizable' read concern level"),
            ));
        }
    }
    let command_vars = args::opt_document(cmd, "aggregate", "let")?
        .cloned()
        .unwrap_or_default();
    let output = output
        .map(|stage| Output::parse(stage, ctx.db, &command_vars))
        .transpose()?;
    let mut pipeline = Pipeline::parse_with_let(rest, &command_vars)?;
    let eval = ctx.eval_context(cmd, "aggregate")?;
    // mongod optimizes the pipeline before it runs it (`Pipeline::optimizePipeline`).
    pipeline.optimize(&eval)?;
    // A leading `$match` runs as the documents are read: only the matching ones are copied,
    // and an `_id` equality or `$in` looks them up by `_id`.
    let leading_match = pipeline.take_leading_match().map(|matcher| {
        let filter = rest
            .first()
            .and_then(Bson::as_document)
            .and_then(|stage| stage.get_document("$match").ok())
            .cloned()
            .unwrap_or_default();
        (filter, matcher)
    });
    let mut first_stage_done = false;
    let (ns, input) = match (&collection, source) {
        (None, None) => {
            return Err(CommandError::new(
                codes::INVALID_NAMESPACE,
                "{aggregate: 1} is not valid for this pipeline; a collection is required.",
            ));
        }
        (Some(_), Some(source)) => {
            return Err(CommandError::new(
                codes::INVALID_NAMESPACE,
                format!(
                    "{} must be run against a database with {{aggregate: 1}}, not a collection",
                    stage_name(source)
                ),
            ));
        }
        (None, Some(source)) => {
            let (name, spec) = source
                .as_document()
                .and_then(|d| d.iter().next())
                .ok_or_else(|| CommandError::internal("source stage"))?;
            let mut input = if name == "$listLocalSessions" {
                local_sessions::list_local_sessions(&ctx.state.local_sessions, spec, ctx.now)?
            } else {
                documents_stage(spec, &eval)?
            };
            if let Some((_, matcher)) = &leading_match {
                let mut kept = Vec::with_capacity(input.len());
                for doc in input {
                    if matcher.matches(&doc, &eval)? {
                        kept.push(doc);
                    }
                }
                input = kept;
            }
            (format!("{}.$cmd.aggregate", ctx.db), input)
        }
        (Some(collection), None) => {
            let input = match super::views::read_source(ctx, collection)? {
                None => Vec::new(),
                Some(coll) => {
                    let coll = ctx.lock(&coll)?;
                    check_hint(Some(&coll), cmd.get("hint"))?;
                    let mut read = Vec::new();
                    match &leading_match {
                        Some((filter, matcher)) => {
                            for record in coll.candidates(filter) {
                                eval.check_deadline()?;
                                let doc = coll.get(record).expect("candidate records exist");
                                if matcher.matches(doc, &eval)? {
                                    read.push(doc);
                                }
                            }
                        }
                        None => read.extend(coll.iter().map(|(_, d)| d)),
                    }
                    // A first stage that computes each document from one reads them in
                    // place: only its output is built, no copy of the stored documents.
                    let mut input = Vec::with_capacity(read.len());
                    for doc in read {
                        eval.check_deadline()?;
                        match pipeline.first_stage_of(doc, &eval) {
                            Some(computed) => {
                                input.push(computed?);
                                first_stage_done = true;
                            }
                            None => input.push(doc.clone()),
                        }
                    }
                    input
                }
            };
            (format!("{}.{collection}", ctx.db), input)
        }
    };
    let results = if first_stage_done {
        pipeline.run_after_first(input, &eval)?
    } else {
        pipeline.run(input, &eval)?
    };
    if let Some(output) = output {
        match &ctx.state.replica {
            // On a member that was not primary when the command arrived, the pipeline read
            // this member's data and the stage writes on the primary, as mongod 4.4+ sends
            // a secondary's `$out`/`$merge` writes there (`ReplicaSetNodeProcessInterface`,
            // `src/mongo/db/pipeline/process_interface/replica_set_node_process_interface.cpp`).
            Some(replica) if ctx.admitted.is_none() => {
                let mut results = Some(results);
                let wait = replica.write_through_primary(cmd, &mut |primary| {
                    let ctx = Ctx {
                        state: primary,
                        snapshot: None,
                        ..*ctx
                    };
                    output.write(&ctx, &eval, results.take().unwrap_or_default())
                })?;
                *ctx.primary_wait.lock() = Some(wait);
            }
            _ => output.write(ctx, &eval, results)?,
        }
        return Ok(cursor_reply(0, &ns, Vec::new(), true));
    }
    Ok(ctx
        .state
        .cursors
        .first_batch(&ns, results, batch_size, false))
}

/// `$documents`: an expression that evaluates to an array of documents.
fn documents_stage(spec: &Bson, eval: &crate::engine::EvalContext) -> Result<Vec<Document>> {
    let value = Expr::parse(spec)?.eval(&Document::new(), eval)?;
    let Some(Bson::Array(items)) = value else {
        return Err(CommandError::new(
            5858203,
            "error during lookup inside $documents: an array is expected",
        ));
    };
    items
        .into_iter()
        .map(|item| match item {
            Bson::Document(d) => Ok(d),
            other => Err(CommandError::type_mismatch(format!(
                "$documents elements must be objects, found {}",
                crate::engine::compare::type_alias(&other)
            ))),
        })
        .collect()
}
