//! The `$changeStream` stage: `aggregate` with a leading `$changeStream` opens a change
//! stream (see [`crate::commands::change_stream`]) and answers its first batch.

use bson::{Bson, Document, Timestamp};

use crate::commands::change_stream::{BeforeChange, ChangeStream, FullDocument, Scope, Start};
use crate::commands::context::Ctx;
use crate::commands::cursor_batch::{cursor_batch_size, cursor_reply};
use crate::engine::changes::ResumeToken;
use crate::engine::error::{CommandError, Result, codes};
use crate::engine::pipeline::Pipeline;

/// Stages a change stream's pipeline may hold after `$changeStream`.
const ALLOWED_STAGES: &[&str] = &[
    "$match",
    "$project",
    "$addFields",
    "$set",
    "$unset",
    "$replaceRoot",
    "$replaceWith",
];

/// Stages mongod knows; one of these that a change stream does not allow is refused as not
/// permitted, any other name is an unrecognized stage.
const KNOWN_STAGES: &[&str] = &[
    "$addFields",
    "$bucket",
    "$bucketAuto",
    "$changeStream",
    "$changeStreamSplitLargeEvent",
    "$collStats",
    "$count",
    "$currentOp",
    "$densify",
    "$documents",
    "$facet",
    "$fill",
    "$geoNear",
    "$graphLookup",
    "$group",
    "$indexStats",
    "$limit",
    "$listLocalSessions",
    "$listSampledQueries",
    "$listSearchIndexes",
    "$listSessions",
    "$lookup",
    "$match",
    "$merge",
    "$out",
    "$planCacheStats",
    "$project",
    "$redact",
    "$replaceRoot",
    "$replaceWith",
    "$sample",
    "$search",
    "$searchMeta",
    "$set",
    "$setWindowFields",
    "$shardedDataDistribution",
    "$skip",
    "$sort",
    "$sortByCount",
    "$unionWith",
    "$unset",
    "$unwind",
    "$vectorSearch",
];

/// Opens a change stream for `aggregate` and returns the first-batch reply.
pub fn open(
    ctx: &Ctx<'_>,
    cmd: &Document,
    stages: &[Bson],
    collection: Option<&str>,
) -> Result<Document> {
    if ctx.state.standalone {
        return Err(CommandError::new(
            codes::LOCATION_40573,
            "The $changeStream stage is only supported on replica sets",
        ));
    }
    let options = stages[0]
        .as_document()
        .and_then(|s| s.get_document("$changeStream").ok())
        .ok_or_else(|| {
            CommandError::failed_to_parse("the $changeStream stage specification must be an object")
        })?;
    let mut full_document = FullDocument::Default;
    let mut before_change = BeforeChange::Off;
    let mut expanded = false;
    let mut cluster_wide = false;
    let mut start: Option<ResumeToken> = None;
    let mut start_at_time: Option<Timestamp> = None;
    for (field, value) in options {
        match (field.as_str(), value) {
            ("fullDocument", Bson::String(mode)) => {
                full_document = match mode.as_str() {
                    "default" => FullDocument::Default,
                    "updateLookup" => FullDocument::UpdateLookup,
                    "whenAvailable" => FullDocument::WhenAvailable,
                    "required" => FullDocument::Required,
                    other => return Err(bad_enum("fullDocument", other)),
                }
            }
            ("fullDocumentBeforeChange", Bson::String(mode)) => {
                before_change = match mode.as_str() {
                    "off" => BeforeChange::Off,
                    "whenAvailable" => BeforeChange::WhenAvailable,
                    "required" => BeforeChange::Required,
                    other => return Err(bad_enum("fullDocumentBeforeChange", other)),
                }
            }
            ("resumeAfter" | "startAfter", Bson::Document(token)) => {
                start = Some(ResumeToken::parse(token)?);
            }
            ("startAtOperationTime", Bson::Timestamp(ts)) => start_at_time = Some(*ts),
            ("allChangesForCluster", Bson::Boolean(b)) => cluster_wide = *b,
            ("showExpandedEvents", Bson::Boolean(b)) => expanded = *b,
            (other, _) => {
                return Err(CommandError::new(
                    codes::UNKNOWN_BSON_FIELD,
                    format!(
                        "BSON field '$changeStream.{other}' is an unknown field or has the wrong type."
                    ),
                ));
            }
        }
    }
    if [
        options.contains_key("resumeAfter"),
        options.contains_key("startAfter"),
        start_at_time.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count()
        > 1
    {
        return Err(CommandError::new(
            40674,
            "Only one type of resume option is allowed, but multiple were found.",
        ));
    }
    let scope = match (collection, cluster_wide) {
        (Some(coll), false) => Scope::Collection {
            db: ctx.db.to_string(),
            coll: coll.to_string(),
        },
        (None, false) => Scope::Database {
            db: ctx.db.to_string(),
        },
        (None, true) if ctx.db == "admin" => Scope::Cluster,
        _ => {
            return Err(CommandError::new(
                codes::INVALID_NAMESPACE,
                "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' database, and with no collection name",
            ));
        }
    };
    let user_stages = &stages[1..];
    for stage in user_stages {
        let name = stage
            .as_document()
            .and_then(|s| s.keys().next())
            .map(String::as_str)
            .unwrap_or("");
        if !KNOWN_STAGES.contains(&name) {
            return Err(CommandError::new(
                40324,
                format!("Unrecognized pipeline stage name: '{name}'"),
            ));
        }
        if !ALLOWED_STAGES.contains(&name) {
            return Err(CommandError::new(
                codes::ILLEGAL_OPERATION,
                format!("{name} is not permitted in a $changeStream pipeline"),
            ));
        }
    }
    let pipeline = if user_stages.is_empty() {
        None
    } else {
        Some(Pipeline::parse(user_stages)?)
    };
    let start = match (start, start_at_time) {
        (Some(token), _) => Start::Token(token),
        (None, Some(time)) => Start::At(time),
        (None, None) => Start::Now,
    };
    let mut stream = ChangeStream::open(
        &ctx.state.catalog.changes,
        scope,
        start,
        pipeline,
        full_document,
        before_change,
        expanded,
    )?;
    let batch_size = cursor_batch_size(cmd, "aggregate")?;
    let eval = ctx.eval_context(cmd, "aggregate")?;
    let batch = stream.next_batch(&ctx.state.catalog, batch_size, &eval)?;
    let ns = match &stream.scope {
        Scope::Collection { db, coll } => format!("{db}.{coll}"),
        Scope::Database { db } => format!("{db}.$cmd.aggregate"),
        Scope::Cluster => "admin.$cmd.aggregate".to_string(),
    };
    let token = stream.post_batch_token();
    let id = if stream.invalidated {
        0
    } else {
        ctx.state.cursors.open_stream(&ns, stream)
    };
    let mut reply = cursor_reply(id, &ns, batch, true);
    if let Ok(cursor) = reply.get_document_mut("cursor") {
        cursor.insert("postBatchResumeToken", token);
    }
    Ok(reply)
}

/// mongod's error for an unknown enum value of a `$changeStream` option.
fn bad_enum(field: &str, value: &str) -> CommandError {
    CommandError::bad_value(format!(
        "Enumeration value '{value}' for field '$changeStream.{field}' is not a valid value."
    ))
}
