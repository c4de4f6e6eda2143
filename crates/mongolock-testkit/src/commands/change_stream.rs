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
//!
//! Resume tokens name an event by its cluster time and identity, the same on every member
//! ([`ResumeToken`]), as mongod's do, so a stream resumes on any member. Resuming reads the
//! member's log from the token's time, as mongod scans the oplog from it: events before the
//! token are passed over; for an event's token (`resumeAfter`, `startAfter`) the first event
//! the stream sees at or past that time must be the token's own, which is swallowed, and
//! anything else fails the stream with `ChangeStreamFatalError` (280) "cannot resume stream;
//! the resume token was not found"
//! (`src/mongo/db/pipeline/document_source_change_stream_ensure_resume_token_present.cpp`);
//! for a high-water mark (and `startAtOperationTime`) every event at or past its time is
//! delivered (`document_source_change_stream_check_resumability.cpp`). A member that has not
//! applied up to the token's time yet returns empty batches meanwhile, and a resume point
//! whose history left the log fails with `ChangeStreamHistoryLost` (286). The check is made on
//! the events of the stream's scope before its own pipeline runs. A batch's
//! `postBatchResumeToken` is the last event's token, or, once the stream read past that event
//! (events it does not deliver), a high-water mark at the time of the last one it read
//! (`src/mongo/db/pipeline/plan_executor_pipeline.cpp`, `_performChangeStreamsAccounting`).

use std::time::Duration;

use bson::{Bson, Document, RawDocumentBuf, Timestamp, doc};

use crate::engine::EvalContext;
use crate::engine::changes::{
    ChangeEvent, ChangeKind, ChangeLog, ResumeToken, at_or_after, next_tick, unstored,
};
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

/// Where a new stream starts.
#[derive(Debug, Clone)]
pub(super) enum Start {
    /// After the member's last applied entry (no start point given).
    Now,
    /// After the event a token names, or from a high-water mark's time (`resumeAfter`,
    /// `startAfter`).
    Token(ResumeToken),
    /// At a cluster time (`startAtOperationTime`).
    At(Timestamp),
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
    /// Events produced but not yet returned (a batch size cut them off), with their tokens.
    pending: Vec<(Document, ResumeToken)>,
    /// The resume point the stream has not yet read past: events before it are passed
    /// over, and for an event's token its event must come first.
    resume: Option<ResumeToken>,
    /// The `postBatchResumeToken`.
    token: ResumeToken,
    /// The cluster time `token` stands at: the last returned event's, or the high-water
    /// mark's (mongod's `_latestOplogTimestamp`).
    token_time: Timestamp,
    /// The time of the newest entry the stream read, delivered or not.
    read_time: Option<Timestamp>,
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
            ResumeToken::of_event(event).to_document()
        ),
    )
}

impl ChangeStream {
    /// A stream on `log` starting at `start`, the rest as given.
    ///
    /// mongod's initial `postBatchResumeToken` is the token it resumes from, a high-water
    /// mark at `startAtOperationTime`, or with no start point a high-water mark one tick
    /// past the member's last applied entry (`DocumentSourceChangeStream::getStartTimeForNewStream`,
    /// `src/mongo/db/pipeline/document_source_change_stream.cpp`: "We always start one tick
    /// beyond the most recent operation"; `DocumentSourceChangeStreamTransform` sets it as
    /// the initial token).
    ///
    /// # Errors
    ///
    /// `ChangeStreamHistoryLost` (286) when the history from the start point on is no longer
    /// all in the log.
    pub(super) fn open(
        log: &ChangeLog,
        scope: Scope,
        start: Start,
        pipeline: Option<Pipeline>,
        full_document: FullDocument,
        before_change: BeforeChange,
        expanded: bool,
    ) -> Result<Self> {
        let (next_seq, resume, token) = match start {
            Start::Now => {
                let time = next_tick(log.last_applied_time().unwrap_or(Timestamp {
                    time: 0,
                    increment: 0,
                }));
                (log.last_seq() + 1, None, ResumeToken::high_water_mark(time))
            }
            Start::Token(token) => (log.seq_at_time(token.time), Some(token.clone()), token),
            Start::At(time) => {
                let token = ResumeToken::high_water_mark(time);
                (log.seq_at_time(time), Some(token.clone()), token)
            }
        };
        if resume.is_some() && log.lost_since(token.time) {
            return Err(history_lost());
        }
        Ok(Self {
            scope,
            next_seq,
            pipeline,
            full_document,
            before_change,
            expanded,
            invalidated: false,
            pending: Vec::new(),
            resume,
            token_time: token.time,
            token,
            read_time: None,
        })
    }

    /// The `postBatchResumeToken`: the last returned event's token, or a high-water mark at
    /// the time of the last entry the stream read past it.
    pub fn post_batch_token(&self) -> Document {
        self.token.to_document()
    }

    /// An event document of `token` was returned: the batch's token is its `_id` now.
    fn returned(&mut self, token: ResumeToken) {
        self.token_time = token.time;
        self.token = token;
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

    /// The event documents one log entry, whose token is `token`, produces for this stream
    /// (none, one, or the event and an `invalidate`).
    fn event_document(
        &self,
        catalog: &Catalog,
        event: &ChangeEvent,
        token: &ResumeToken,
    ) -> Result<Vec<Document>> {
        if event.kind.is_expanded() && !self.expanded {
            return Ok(Vec::new());
        }
        let token = token.to_document();
        let mut out = doc! {
            "_id": token.clone(),
            "operationType": event.kind.operation_type(),
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
                out.insert("fullDocument", doc);
                out.insert("ns", ns);
                out.insert("documentKey", key);
            }
            ChangeKind::Replace { doc, pre_image } => {
                let doc = unstored(doc);
                let key = doc! {"_id": doc.get("_id").cloned().unwrap_or(Bson::Null)};
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
                out.insert("ns", ns);
                out.insert("documentKey", doc! {"_id": id.clone()});
                self.add_pre_image(&mut out, pre_image, event)?;
            }
            ChangeKind::Drop => {
                out.insert("ns", ns);
                invalidate = matches!(self.scope, Scope::Collection { .. });
            }
            ChangeKind::DropDatabase => {
                out.insert("ns", doc! {"db": event.db.clone()});
                invalidate = !matches!(self.scope, Scope::Cluster);
            }
            ChangeKind::Rename {
                to_db,
                to_coll,
                drop_target,
            } => {
                let to = doc! {"db": to_db.clone(), "coll": to_coll.clone()};
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
                out.insert("ns", ns);
                out.insert("operationDescription", description.clone());
            }
            ChangeKind::CreateIndexes { indexes } | ChangeKind::DropIndexes { indexes } => {
                out.insert("ns", ns);
                out.insert("operationDescription", doc! {"indexes": indexes.clone()});
            }
            ChangeKind::Modify { description } => {
                out.insert("ns", ns);
                out.insert("operationDescription", description.clone());
            }
        }
        let mut events = vec![out];
        if invalidate {
            events.push(doc! {
                "_id": token,
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
        for (event, token) in self.pending.drain(..take).collect::<Vec<_>>() {
            self.returned(token);
            batch.push(event);
        }
        let mut at_end = false;
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
                at_end = true;
                break;
            }
            for event in events {
                self.next_seq = event.seq + 1;
                if catalog.changes.is_rolled_back(event.seq) {
                    continue;
                }
                self.read_time = Some(event.cluster_time);
                if !scope_matches(&self.scope, &event)
                    || (event.kind.is_expanded() && !self.expanded)
                    || !self.past_resume_point(&event)?
                {
                    continue;
                }
                let token = ResumeToken::of_event(&event);
                for produced in self.event_document(catalog, &event, &token)? {
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
                            self.returned(token.clone());
                            batch.push(output);
                        } else {
                            self.pending.push((output, token.clone()));
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
        // Read to the end with nothing pending: when the stream read past the last event it
        // returned, the token becomes a high-water mark at the newest entry it read, which a
        // stream resumed from it reads again without delivering (mongod moves it only when
        // the scan's latest timestamp passed the last returned event's).
        if at_end
            && self.pending.is_empty()
            && let Some(read) = self.read_time
            && !at_or_after(self.token_time, read)
        {
            self.token = ResumeToken::high_water_mark(read);
            self.token_time = read;
        }
        Ok(batch)
    }

    /// Whether `event` (of the stream's scope) is past the resume point, which it then
    /// leaves behind: an event before the point's time is not; the event an event token
    /// names is not either, and is swallowed; any other event is, and for an event token
    /// that means the token's event is not in this member's history.
    ///
    /// # Errors
    ///
    /// `ChangeStreamFatalError` (280) for an event token whose event is not the first at
    /// or past its time (`DocumentSourceChangeStreamEnsureResumeTokenPresent::doGetNext`).
    fn past_resume_point(&mut self, event: &ChangeEvent) -> Result<bool> {
        let Some(resume) = &self.resume else {
            return Ok(true);
        };
        if !at_or_after(event.cluster_time, resume.time) {
            return Ok(false);
        }
        if resume.high_water_mark {
            self.resume = None;
            return Ok(true);
        }
        if resume.names(event) {
            self.resume = None;
            return Ok(false);
        }
        Err(CommandError::new(
            280,
            format!(
                "cannot resume stream; the resume token was not found. {{_data: \"{}\"}}",
                ResumeToken::of_event(event)
                    .to_document()
                    .get_str("_data")
                    .unwrap_or_default()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bson::DateTime;

    use super::*;
    use crate::engine::changes::stored;
    use crate::faults::clock::Clock;

    fn insert(log: &ChangeLog, id: &str) -> ResumeToken {
        let kind = ChangeKind::Insert {
            doc: stored(&doc! {"_id": id}),
        };
        log.append("d", "c", None, kind);
        let seq = log.last_seq();
        ResumeToken::of_event(&log.read_from(seq, 1).unwrap()[0])
    }

    fn stream(log: &ChangeLog, start: Start) -> ChangeStream {
        let scope = Scope::Collection {
            db: "d".into(),
            coll: "c".into(),
        };
        let (full, before) = (FullDocument::Default, BeforeChange::Off);
        ChangeStream::open(log, scope, start, None, full, before, false).unwrap()
    }

    fn ids(batch: &[Document]) -> Vec<&str> {
        (batch.iter())
            .map(|e| {
                e.get_document("documentKey")
                    .unwrap()
                    .get_str("_id")
                    .unwrap()
            })
            .collect()
    }

    /// The token of an event a rollback undid names nothing in the member's history: a
    /// stream resumed from it waits while nothing at or past its time is there, then fails
    /// with `ChangeStreamFatalError` (280) once another event is the first past it, as
    /// mongod's `DocumentSourceChangeStreamEnsureResumeTokenPresent::doGetNext` does
    /// ("cannot resume stream; the resume token was not found"). A token of an event that
    /// is there resumes after it, passing over the undone one.
    #[test]
    fn a_token_of_an_event_a_rollback_undid_fails_the_stream() {
        let log = Arc::new(ChangeLog::with_window(Clock::default(), 100, usize::MAX));
        let catalog = Catalog::new(log.clone());
        let eval = EvalContext::at(DateTime::from_millis(0));
        let kept = insert(&log, "a");
        let lost = insert(&log, "lost");
        log.mark_rolled_back(2, 2);

        let mut resumed = stream(&log, Start::Token(lost.clone()));
        assert!(
            resumed
                .next_batch(&catalog, None, &eval)
                .unwrap()
                .is_empty()
        );
        assert_eq!(resumed.post_batch_token(), lost.to_document());
        let next = insert(&log, "b");
        let error = resumed.next_batch(&catalog, None, &eval).unwrap_err();
        assert_eq!(error.code, 280);
        assert_eq!(
            error.errmsg,
            format!(
                "cannot resume stream; the resume token was not found. {{_data: \"{}\"}}",
                next.to_document().get_str("_data").unwrap()
            )
        );

        let mut after_kept = stream(&log, Start::Token(kept));
        let batch = after_kept.next_batch(&catalog, None, &eval).unwrap();
        assert_eq!(ids(&batch), ["b"]);
        assert_eq!(after_kept.post_batch_token(), next.to_document());
    }

    /// A batch's token is the last returned event's; once the stream read past it (events
    /// of another collection) a high-water mark at the last one read, from which a stream
    /// resumes with the events at or after its time. A new stream starts one tick past the
    /// last entry.
    #[test]
    fn the_post_batch_token_moves_to_a_high_water_mark_past_the_last_event() {
        let log = Arc::new(ChangeLog::with_window(Clock::default(), 100, usize::MAX));
        let catalog = Catalog::new(log.clone());
        let eval = EvalContext::at(DateTime::from_millis(0));
        let before = insert(&log, "before");
        let mut watching = stream(&log, Start::Now);
        let start = ResumeToken::high_water_mark(next_tick(before.time));
        assert_eq!(watching.post_batch_token(), start.to_document());
        assert!(
            watching
                .next_batch(&catalog, None, &eval)
                .unwrap()
                .is_empty()
        );
        assert_eq!(watching.post_batch_token(), start.to_document());

        let a = insert(&log, "a");
        let batch = watching.next_batch(&catalog, None, &eval).unwrap();
        assert_eq!(ids(&batch), ["a"]);
        assert_eq!(watching.post_batch_token(), a.to_document());
        log.append("d", "other", None, ChangeKind::Drop);
        assert!(
            watching
                .next_batch(&catalog, None, &eval)
                .unwrap()
                .is_empty()
        );
        let mark = ResumeToken::high_water_mark(log.newest_time().unwrap());
        assert_eq!(watching.post_batch_token(), mark.to_document());
        insert(&log, "b");
        let mut resumed = stream(&log, Start::Token(mark));
        assert_eq!(
            ids(&resumed.next_batch(&catalog, None, &eval).unwrap()),
            ["b"]
        );
    }
}
