//! Change streams: an open stream reads the change log from its position, through its
//! scope and pipeline, into event documents, for the awaiting `getMore` that returns new
//! events as they commit; and the error labels mongod puts on a stream's failures. A stream
//! is opened by `aggregate` with a leading `$changeStream` (`aggregate/change_stream.rs`).
//!
//! On a member of an emulated replica set a stream delivers only majority-committed events,
//! as mongod's does: `$changeStream` reads at majority read concern, asked for or not
//! (mongod's jstest `change_stream_require_majority_read_concern.js`, "Test
//! not specifying readConcern defaults to "majority" read concern": a `w: 1` insert with
//! replication stopped is not returned until it is majority-committed; the change-streams
//! spec, "Server Specification"). The member's log holds what it applied, committed or not;
//! a stream reads it up to the member's majority commit point
//! ([`crate::engine::changes::ChangeLog::set_committed`]) and waits there, so its
//! `postBatchResumeToken` never passes that point, and events a rollback undid are never
//! delivered. A server that is no member of a set delivers every event as it commits.

use std::time::Duration;

use bson::{Bson, Document, RawDocumentBuf, doc};

use crate::engine::EvalContext;
use crate::engine::changes::{ChangeEvent, ChangeKind, resume_token, unstored};
use crate::engine::collection::Catalog;
use crate::engine::error::{CommandError, Result};
use crate::engine::pipeline::Pipeline;

/// How long a `getMore` waits for events when the client gives no `maxTimeMS` (as mongod).
pub const DEFAULT_AWAIT: Duration = Duration::from_millis(1000);

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
pub(super) fn history_lost() -> CommandError {
    CommandError::new(
        286,
        "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
    )
}

/// Which writes a stream sees.
#[derive(Debug, Clone)]
pub(super) enum Scope {
    Collection { db: String, coll: String },
    Database { db: String },
    Cluster,
}

/// The `fullDocument` option: what update events carry as `fullDocument`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FullDocument {
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
pub(super) enum BeforeChange {
    Off,
    WhenAvailable,
    Required,
}

/// An open change stream.
#[derive(Debug)]
pub struct ChangeStream {
    pub(super) scope: Scope,
    /// The next log position to read.
    pub(super) next_seq: u64,
    pub(super) pipeline: Option<Pipeline>,
    pub(super) full_document: FullDocument,
    pub(super) before_change: BeforeChange,
    /// `showExpandedEvents`: DDL events, `collectionUUID`, `disambiguatedPaths`.
    pub(super) expanded: bool,
    /// An invalidate event was returned: the cursor closes.
    pub invalidated: bool,
    /// Events produced but not yet returned (a batch size cut them off).
    pub(super) pending: Vec<Document>,
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
    fn event_document(&self, catalog: &Catalog, event: &ChangeEvent) -> Result<Vec<Document>> {
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
                        let current = catalog
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
        catalog: &Catalog,
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
            // On a replica-set member only what is majority-committed is read, and what a
            // rollback undid is passed over (see the module's notes).
            let events = catalog
                .changes
                .read_deliverable(self.next_seq, 1024)
                .ok_or_else(history_lost)?;
            if events.is_empty() {
                break;
            }
            for event in events {
                self.next_seq = event.seq + 1;
                if !scope_matches(&self.scope, &event) || catalog.changes.is_rolled_back(event.seq)
                {
                    continue;
                }
                for produced in self.event_document(catalog, &event)? {
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
