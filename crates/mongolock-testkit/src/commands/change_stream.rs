//! Change streams: `aggregate` with a leading `$changeStream`, and the awaiting `getMore`
//! that returns new events as they commit.

use std::time::Duration;

use bson::{Bson, Document, RawDocumentBuf, Timestamp, doc};

use super::{Ctx, admin};
use crate::engine::EvalContext;
use crate::engine::changes::{ChangeEvent, ChangeKind, resume_token, token_seq, unstored};
use crate::engine::error::{CommandError, Result, codes};
use crate::engine::pipeline::Pipeline;
use crate::server::ServerState;

/// How long a `getMore` waits for events when the client gives no `maxTimeMS` (as mongod).
pub const DEFAULT_AWAIT: Duration = Duration::from_millis(1000);

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

/// Codes mongod labels `ResumableChangeStreamError` on a change stream's `aggregate` or
/// `getMore`: the RetriableError, NetworkError and NeedRetargettingError categories, plus
/// RetryChangeStream (234) and FailedToSatisfyReadPreference (133).
const RESUMABLE_CODES: &[i32] = &[
    // RetriableError (and NetworkError: 6, 7, 89, 9001, 50915).
    6, 7, 89, 91, 134, 189, 262, 358, 402, 406, 407, 412, 453, 462, 9001, 10107, 11600, 11602,
    13435, 13436, 50915, 91331, // NeedRetargettingError.
    63, 150, 13388, 249, // Change-stream specific.
    234, 133,
];

/// Codes mongod labels `NonResumableChangeStreamError` (ChangeStreamFatalError,
/// ChangeStreamHistoryLost).
pub const NON_RESUMABLE_CODES: &[i32] = &[280, 286];

/// Adds mongod's `ResumableChangeStreamError` label to an error raised by a change stream's
/// `aggregate` or by `getMore` on its cursor, unless the labels are already dictated.
pub fn label_error(mut error: CommandError) -> CommandError {
    if error.labels.is_none() && RESUMABLE_CODES.contains(&error.code) {
        error.labels = Some(vec!["ResumableChangeStreamError".to_string()]);
    }
    error
}

/// `ChangeStreamHistoryLost`: the events a stream needs are no longer in the change log.
fn history_lost() -> CommandError {
    CommandError::new(
        286,
        "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
    )
}

/// Which writes a stream sees.
#[derive(Debug, Clone)]
enum Scope {
    Collection { db: String, coll: String },
    Database { db: String },
    Cluster,
}

/// The `fullDocument` option: what update events carry as `fullDocument`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FullDocument {
    /// Nothing.
    Default,
    /// The document as it is when the event is read.
    UpdateLookup,
    /// The post-image, or null when the collection does not record images.
    WhenAvailable,
    /// The post-image; its absence fails the stream.
    Required,
}

/// The `fullDocumentBeforeChange` option: the pre-image of updates, replaces and deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BeforeChange {
    Off,
    WhenAvailable,
    Required,
}

/// An open change stream.
#[derive(Debug)]
pub struct ChangeStream {
    scope: Scope,
    /// The next log position to read.
    next_seq: u64,
    pipeline: Option<Pipeline>,
    full_document: FullDocument,
    before_change: BeforeChange,
    /// `showExpandedEvents`: DDL events, `collectionUUID`, `disambiguatedPaths`.
    expanded: bool,
    /// An invalidate event was returned: the cursor closes.
    pub invalidated: bool,
    /// Events produced but not yet returned (a batch size cut them off).
    pending: Vec<Document>,
}

/// Whether a stream with `scope` sees `event`. A rename is seen from both its source and
/// its target namespace.
fn scope_matches(scope: &Scope, event: &ChangeEvent) -> bool {
    let renamed_to = match &event.kind {
        ChangeKind::Rename { to_db, to_coll, .. } => Some((to_db.as_str(), to_coll.as_str())),
        _ => None,
    };
    match scope {
        Scope::Collection { db, coll } => {
            (&event.db == db
                && (&event.coll == coll || matches!(event.kind, ChangeKind::DropDatabase)))
                || renamed_to == Some((db.as_str(), coll.as_str()))
        }
        Scope::Database { db } => &event.db == db || renamed_to.is_some_and(|(d, _)| d == db),
        Scope::Cluster => true,
    }
}

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
    let mut start: Option<u64> = None;
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
                let seq = token_seq(token).ok_or_else(|| {
                    CommandError::new(260, format!("Invalid resume token: {token}"))
                })?;
                if seq + 1 < ctx.state.catalog.changes.first_seq() {
                    return Err(history_lost());
                }
                start = Some(seq + 1);
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
    let log = &ctx.state.catalog.changes;
    let next_seq = match (start, start_at_time) {
        (Some(seq), _) => seq,
        (None, Some(ts)) => log.seq_at_time(ts),
        (None, None) => log.last_seq() + 1,
    };
    let mut stream = ChangeStream {
        scope,
        next_seq,
        pipeline,
        full_document,
        before_change,
        expanded,
        invalidated: false,
        pending: Vec::new(),
    };
    let batch_size = admin::cursor_batch_size(cmd, "aggregate")?;
    let eval = ctx.eval_context(cmd, "aggregate")?;
    let batch = stream.next_batch(ctx.state, batch_size, &eval)?;
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
    let mut reply = super::cursor_reply(id, &ns, batch, true);
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

/// The error for an event whose required pre- or post-image is missing (NoMatchingDocument).
fn image_missing(which: &str, event: &ChangeEvent) -> CommandError {
    CommandError::new(
        47,
        format!(
            "Change stream was configured to require a {which}-image for all update, delete and replace events, but the {which}-image was not found for event: {{ns: \"{}.{}\", resumeToken: {}}}",
            event.db,
            event.coll,
            resume_token(event.seq)
        ),
    )
}

impl ChangeStream {
    /// The resume token that covers everything this stream has looked at.
    pub fn post_batch_token(&self) -> Document {
        resume_token(self.next_seq.saturating_sub(1))
    }

    /// The newest log position this stream has read past.
    pub fn seen_seq(&self) -> u64 {
        self.next_seq.saturating_sub(1)
    }

    /// `fullDocumentBeforeChange` for an update, replace or delete, when asked for.
    fn add_pre_image(
        &self,
        out: &mut Document,
        pre_image: &Option<RawDocumentBuf>,
        event: &ChangeEvent,
    ) -> Result<()> {
        match (self.before_change, pre_image) {
            (BeforeChange::Off, _) => {}
            (_, Some(doc)) => {
                out.insert("fullDocumentBeforeChange", unstored(doc));
            }
            (BeforeChange::WhenAvailable, None) => {
                out.insert("fullDocumentBeforeChange", Bson::Null);
            }
            (BeforeChange::Required, None) => return Err(image_missing("pre", event)),
        }
        Ok(())
    }

    /// The event documents one log entry produces for this stream (none, one, or the event
    /// and an `invalidate`).
    fn event_document(&self, state: &ServerState, event: &ChangeEvent) -> Result<Vec<Document>> {
        if event.kind.is_expanded() && !self.expanded {
            return Ok(Vec::new());
        }
        let mut out = doc! {
            "_id": resume_token(event.seq),
            "operationType": "",
            "clusterTime": event.cluster_time,
            "wallTime": event.wall_time,
        };
        if self.expanded
            && let Some(uuid) = event.collection_uuid
        {
            out.insert("collectionUUID", uuid);
        }
        let ns = doc! {"db": event.db.clone(), "coll": event.coll.clone()};
        let mut invalidate = false;
        match &event.kind {
            ChangeKind::Insert { doc } => {
                let doc = unstored(doc);
                let key = doc! {"_id": doc.get("_id").cloned().unwrap_or(Bson::Null)};
                out.insert("operationType", "insert");
                out.insert("fullDocument", doc);
                out.insert("ns", ns);
                out.insert("documentKey", key);
            }
            ChangeKind::Replace { doc, pre_image } => {
                let doc = unstored(doc);
                let key = doc! {"_id": doc.get("_id").cloned().unwrap_or(Bson::Null)};
                out.insert("operationType", "replace");
                out.insert("fullDocument", doc);
                out.insert("ns", ns);
                out.insert("documentKey", key);
                self.add_pre_image(&mut out, pre_image, event)?;
            }
            ChangeKind::Update {
                id,
                description,
                pre_image,
                post_image,
            } => {
                out.insert("operationType", "update");
                match (self.full_document, post_image) {
                    (FullDocument::Default, _) => {}
                    (FullDocument::UpdateLookup, _) => {
                        let current = state
                            .catalog
                            .get(&event.db, &event.coll)
                            .and_then(|c| {
                                let c = c.lock();
                                let filter = doc! {"_id": id.clone()};
                                c.candidates(&filter)
                                    .first()
                                    .and_then(|r| c.get(*r).cloned())
                            })
                            .map_or(Bson::Null, Bson::Document);
                        out.insert("fullDocument", current);
                    }
                    (_, Some(doc)) => {
                        out.insert("fullDocument", unstored(doc));
                    }
                    (FullDocument::WhenAvailable, None) => {
                        out.insert("fullDocument", Bson::Null);
                    }
                    (FullDocument::Required, None) => {
                        return Err(image_missing("post", event));
                    }
                }
                out.insert("ns", ns);
                out.insert("documentKey", doc! {"_id": id.clone()});
                let mut description = unstored(description);
                if !self.expanded {
                    description.remove("disambiguatedPaths");
                }
                out.insert("updateDescription", description);
                self.add_pre_image(&mut out, pre_image, event)?;
            }
            ChangeKind::Delete { id, pre_image } => {
                out.insert("operationType", "delete");
                out.insert("ns", ns);
                out.insert("documentKey", doc! {"_id": id.clone()});
                self.add_pre_image(&mut out, pre_image, event)?;
            }
            ChangeKind::Drop => {
                out.insert("operationType", "drop");
                out.insert("ns", ns);
                invalidate = matches!(self.scope, Scope::Collection { .. });
            }
            ChangeKind::DropDatabase => {
                out.insert("operationType", "dropDatabase");
                out.insert("ns", doc! {"db": event.db.clone()});
                invalidate = !matches!(self.scope, Scope::Cluster);
            }
            ChangeKind::Rename {
                to_db,
                to_coll,
                drop_target,
            } => {
                let to = doc! {"db": to_db.clone(), "coll": to_coll.clone()};
                out.insert("operationType", "rename");
                out.insert("ns", ns);
                out.insert("to", to.clone());
                if self.expanded {
                    let mut description = doc! {"to": to};
                    if let Some(uuid) = drop_target {
                        description.insert("dropTarget", *uuid);
                    }
                    out.insert("operationDescription", description);
                }
                invalidate = matches!(self.scope, Scope::Collection { .. });
            }
            ChangeKind::Create { description } => {
                out.insert("operationType", "create");
                out.insert("ns", ns);
                out.insert("operationDescription", description.clone());
            }
            ChangeKind::CreateIndexes { indexes } | ChangeKind::DropIndexes { indexes } => {
                let kind = if matches!(event.kind, ChangeKind::CreateIndexes { .. }) {
                    "createIndexes"
                } else {
                    "dropIndexes"
                };
                out.insert("operationType", kind);
                out.insert("ns", ns);
                out.insert("operationDescription", doc! {"indexes": indexes.clone()});
            }
            ChangeKind::Modify { description } => {
                out.insert("operationType", "modify");
                out.insert("ns", ns);
                out.insert("operationDescription", description.clone());
            }
        }
        let mut events = vec![out];
        if invalidate {
            events.push(doc! {
                "_id": resume_token(event.seq),
                "operationType": "invalidate",
                "clusterTime": event.cluster_time,
                "wallTime": event.wall_time,
            });
        }
        Ok(events)
    }

    /// Reads the events committed since the last call, up to `batch_size`, through the
    /// stream's pipeline. Never waits.
    pub fn next_batch(
        &mut self,
        state: &ServerState,
        batch_size: Option<usize>,
        eval: &EvalContext,
    ) -> Result<Vec<Document>> {
        let limit = batch_size.unwrap_or(usize::MAX);
        let mut batch: Vec<Document> = Vec::new();
        let take = limit.min(self.pending.len());
        batch.extend(self.pending.drain(..take));
        while batch.len() < limit && !self.invalidated {
            // A cursor that fell behind the window fails as mongod's does when the oplog
            // rolled past its position: nothing it skipped is delivered as if it were next.
            let events = state
                .catalog
                .changes
                .read_from(self.next_seq, 1024)
                .ok_or_else(history_lost)?;
            if events.is_empty() {
                break;
            }
            for event in events {
                self.next_seq = event.seq + 1;
                if !scope_matches(&self.scope, &event) {
                    continue;
                }
                for produced in self.event_document(state, &event)? {
                    let invalidates = produced.get_str("operationType") == Ok("invalidate");
                    let outputs = match &self.pipeline {
                        Some(pipeline) if !invalidates => {
                            pipeline.run(vec![produced.clone()], eval)?
                        }
                        _ => vec![produced.clone()],
                    };
                    for output in outputs {
                        if output.get("_id") != produced.get("_id") {
                            return Err(CommandError::new(
                                280,
                                "Encountered an event whose _id field, which contains the resume token, was modified by the pipeline. Modifying the _id field of an event makes it impossible to resume the stream from that point. Only transformations that retain the unmodified _id field are allowed.",
                            ));
                        }
                        if batch.len() < limit {
                            batch.push(output);
                        } else {
                            self.pending.push(output);
                        }
                    }
                    if invalidates {
                        self.invalidated = true;
                        break;
                    }
                }
                if self.invalidated || batch.len() >= limit {
                    break;
                }
            }
        }
        Ok(batch)
    }
}
