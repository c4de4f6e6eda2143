//! The commands sent to the server, one file per operation, the expressions they share
//! (`expr.rs`: whose document it is, live entries, the document after a change), and the
//! [`Context`] every one of them is sent through.
//!
//! The context pins everything that decides what a command means, so that no setting of the
//! driver, the database or the collection can change it:
//!
//! - **read preference `primary`** for every command: a secondary may lag, and a decision
//!   made on stale data can strand a lock;
//! - **the simple collation**: a collection created with a case-insensitive default collation
//!   would otherwise make `"a"` and `"A"` the same resource or lock id;
//! - **write concern** `{w: "majority", j: true}` (unless the caller opted out) with
//!   `wtimeout`, and **read concern** `majority` for reads;
//! - **a time limit** on every command (`maxTimeMS`, `wtimeout` and a client-side timer).
//!
//! Writes go through [`Context::write`], which sends them with `runCommand`: the driver never
//! retries those, so the library knows exactly which attempts were made and whether an
//! error leaves the outcome unknown (see [`Error`]). Each write is idempotent (keyed by
//! resource, lock id and nonce), and [`Context::write`] repeats it once after an error that
//! repeating can fix. An acquire attempt is the exception ([`Context::write_attempt`]): after
//! an error that leaves its outcome unknown it is not repeated here, since its first copy may
//! still land after the repeat was answered; its caller accounts for that copy.

pub(crate) mod acquire;
pub(crate) mod compat;
pub(crate) mod expr;
pub(crate) mod indexes;
pub(crate) mod keepalive;
pub(crate) mod proclaim;
pub(crate) mod purge;
pub(crate) mod refresh_places;
pub(crate) mod release;
pub(crate) mod renew_group;
pub(crate) mod status;

use std::time::Duration;

use bson::{Bson, Document, RawDocumentBuf, doc};
use futures_util::TryStreamExt;
use mongodb::options::{
    Acknowledgment, Collation, ReadConcern, ReadPreference, SelectionCriteria, WriteConcern,
};
use mongodb::{Collection, Database};
use tokio::time::Instant;

use crate::error::{Effect, Error, ErrorKind, Result};

/// How long a command may take by default, retries included.
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// MongoDB's duplicate key error. For an upsert whose query names the document by `_id` and
/// the mark, it means the query matched nothing though a document with that `_id` exists:
/// once, a racing upsert created it in between; again after a repeat, the document is not a
/// lock document (see [`is_not_ours`]).
const DUPLICATE_KEY: i32 = 11000;

/// Whether `error`, the final error of an upsert whose query asks for the mark, says the
/// document with that `_id` is not a lock document: the upsert met a duplicate key twice
/// ([`Context::write`] repeats it once), so a document exists that its query does not match.
pub(crate) fn is_not_ours(error: &Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Database {
            code: Some(DUPLICATE_KEY)
        }
    )
}

/// The longest command time limit accepted: `i32::MAX` milliseconds, the most `maxTimeMS` a
/// server takes.
pub(crate) const MAX_COMMAND_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// The most statements one batched command (the keepalive, the places' refresh) carries,
/// in bytes: half of MongoDB's 16 MiB limit of a command. About 14,000 exclusive or 8,000 shared leases fit (with 32-character
/// names); more leases than that are renewed by as few commands as keep each under it.
pub(crate) const MAX_COMMAND_BYTES: usize = 8 * 1024 * 1024;

/// Unordered `update` commands carrying `statements`, in order: one, unless they pass
/// [`MAX_COMMAND_BYTES`], then as few as keep each under it.
pub(crate) fn batched(ctx: &Context, statements: impl Iterator<Item = Document>) -> Vec<Document> {
    let command = |updates: Vec<Document>| {
        doc! {
            "update": ctx.collection_name(),
            "updates": updates,
            "ordered": false,
        }
    };
    let mut commands = Vec::new();
    let (mut batch, mut bytes) = (Vec::new(), 0);
    for statement in statements {
        // The statement's size, and its array key (up to 6 digits and a type byte).
        let size = bson::to_vec(&statement).map_or(0, |b| b.len()) + 8;
        if !batch.is_empty() && bytes + size > MAX_COMMAND_BYTES {
            commands.push(command(std::mem::take(&mut batch)));
            bytes = 0;
        }
        bytes += size;
        batch.push(statement);
    }
    if !batch.is_empty() || commands.is_empty() {
        commands.push(command(batch));
    }
    commands
}

/// Sends `commands` (unordered `update`s, see [`batched`]) one after the other within
/// `limit` each, and returns the documents they changed (`n`, summed); the first that fails
/// fails the whole.
///
/// # Cancel safety
///
/// Dropping the future stops before the next command; a command already sent may have been
/// applied.
pub(crate) async fn send_batched(
    ctx: &Context,
    commands: Vec<Document>,
    limit: Duration,
) -> Result<u64> {
    let mut changed = 0;
    for command in commands {
        let reply = ctx.write_within(command, Upsert::No, limit).await?;
        changed += count(&reply, "n");
    }
    Ok(changed)
}

/// When [`Context`] repeats a failed write by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repeat {
    /// After any failure that repeating can fix: a late copy of the write does no harm (a
    /// release by token, a renewal, a withdrawal, ...).
    AfterAnyFailure,
    /// Only after a failure that says the write was not applied: an acquire attempt, whose
    /// late copy could grant a lock after its caller moved on. Its caller tracks the unknown
    /// outcome instead, and decides what to do about it (see `crate::wait`).
    OnlyIfNotApplied,
}

/// Everything a command needs besides its own arguments.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    pub(crate) collection: Collection<Document>,
    pub(crate) write_concern: WriteConcern,
    pub(crate) retention: Duration,
    pub(crate) timeout: Duration,
    /// How far the server's clock may step forward unnoticed: subtracted from every lease's
    /// deadline (see [`crate::clock::ServerClock`]).
    pub(crate) clock_uncertainty: Duration,
    /// What the replies tell of the server's clock, shared by every clone.
    pub(crate) server_clock: std::sync::Arc<crate::clock::ServerClock>,
}

/// Whether a write may create the resource document (an upsert), and so may meet a
/// duplicate key error when it races another upsert of the same resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upsert {
    Yes,
    No,
}

impl Context {
    /// Checks the settings every command depends on (the time limit), so that no call sends
    /// anything with a bad one, whether a caller's or one left to the background.
    pub(crate) fn ready(&self) -> Result<&Context> {
        if self.timeout.is_zero() {
            return Err(Error::invalid("command_timeout", "must be positive"));
        }
        if self.timeout > MAX_COMMAND_TIMEOUT {
            return Err(Error::invalid(
                "command_timeout",
                format!(
                    "{:?} is longer than the server's limit of {MAX_COMMAND_TIMEOUT:?} (maxTimeMS is an i32)",
                    self.timeout
                ),
            ));
        }
        Ok(self)
    }

    pub(crate) fn new(collection: Collection<Document>) -> Self {
        Context {
            collection,
            write_concern: WriteConcern::builder()
                .w(Acknowledgment::Majority)
                .journal(true)
                .build(),
            retention: crate::DEFAULT_RETENTION,
            timeout: DEFAULT_COMMAND_TIMEOUT,
            clock_uncertainty: Duration::ZERO,
            server_clock: std::sync::Arc::new(crate::clock::ServerClock::new(
                crate::clock::Clock::system(),
            )),
        }
    }

    /// The collection's name, as commands name it.
    pub(crate) fn collection_name(&self) -> &str {
        self.collection.name()
    }

    fn database(&self) -> Database {
        self.collection
            .client()
            .database(&self.collection.namespace().db)
    }

    /// The simple collation: binary comparison of strings, whatever the collection's default.
    pub(crate) fn collation() -> Document {
        doc! { "locale": "simple" }
    }

    /// Reads see what this client's writes made durable: `majority` with majority writes.
    /// With an unsafe write concern the writes may not be majority-committed yet, and a
    /// majority read would miss them, so reads are `local`.
    pub(crate) fn read_concern(&self) -> ReadConcern {
        if self.write_concern.w == Some(Acknowledgment::Majority) {
            ReadConcern::majority()
        } else {
            ReadConcern::local()
        }
    }

    fn write_concern_document(&self, limit: Duration) -> Document {
        let mut wc = Document::new();
        match &self.write_concern.w {
            Some(Acknowledgment::Nodes(n)) => {
                wc.insert("w", i64::from(*n));
            }
            Some(Acknowledgment::Majority) | None => {
                wc.insert("w", "majority");
            }
            Some(Acknowledgment::Custom(tag)) => {
                wc.insert("w", tag.as_str());
            }
            Some(_) => {
                wc.insert("w", "majority");
            }
        }
        if let Some(journal) = self.write_concern.journal {
            wc.insert("j", journal);
        }
        wc.insert("wtimeout", millis(limit));
        wc
    }

    /// Sends the write `command` (a findAndModify, update or createIndexes document without
    /// its concerns and limits, which this adds) to the primary and returns the reply.
    ///
    /// One attempt, and one more if the first failed in a way that repeating can fix (a
    /// step-down, a dropped connection, a write concern error), all within the command time
    /// limit; for an upsert, also one more after its first duplicate key (a racing upsert
    /// created the document: the repeat finds it), whichever attempt met it, so that a second
    /// one says the document is not ours ([`is_not_ours`]). If any attempt may have been
    /// applied, the error says the outcome is unknown.
    ///
    /// Only for writes whose late copy does no harm: an acquire attempt goes through
    /// [`Context::write_attempt`].
    pub(crate) async fn write(&self, command: Document, upsert: Upsert) -> Result<Document> {
        self.write_repeating(command, upsert, self.timeout, Repeat::AfterAnyFailure)
            .await
            .map(|(reply, _)| reply)
    }

    /// As [`Context::write`], and says whether a copy of the write had an unknown outcome
    /// before the repeat that answered: that copy may still reach the server, late.
    pub(crate) async fn write_noting_doubt(
        &self,
        command: Document,
        upsert: Upsert,
    ) -> Result<(Document, bool)> {
        self.write_repeating(command, upsert, self.timeout, Repeat::AfterAnyFailure)
            .await
    }

    /// As [`Context::write`], within `limit` instead of the configured time limit (never
    /// more than it).
    pub(crate) async fn write_within(
        &self,
        command: Document,
        upsert: Upsert,
        limit: Duration,
    ) -> Result<Document> {
        self.write_repeating(command, upsert, limit, Repeat::AfterAnyFailure)
            .await
            .map(|(reply, _)| reply)
    }

    /// Sends an acquire attempt (an upsert): as [`Context::write`], but never repeated after
    /// a failure whose outcome is unknown. A copy that may have been applied may also still
    /// be on its way, and land after a repeat was answered (refused, say) and its caller
    /// moved on: the error goes back to the caller, who knows what the attempt is for and
    /// accounts for that copy (a waiting call retires the attempt when it ends; a single
    /// call withdraws it).
    pub(crate) async fn write_attempt(&self, command: Document) -> Result<Document> {
        self.write_repeating(command, Upsert::Yes, self.timeout, Repeat::OnlyIfNotApplied)
            .await
            .map(|(reply, _)| reply)
    }

    async fn write_repeating(
        &self,
        command: Document,
        upsert: Upsert,
        limit: Duration,
        repeat: Repeat,
    ) -> Result<(Document, bool)> {
        let limit = limit.min(self.timeout);
        let deadline = Instant::now() + limit;
        let mut unknown = false;
        let mut attempt = 0;
        let mut duplicates = 0;
        // The command's bytes, encoded once (by the first try that gets that far) and copied
        // for each try, instead of a copy of the `Document` for each try that the driver then
        // encoded and dropped.
        let mut encoded = None;
        loop {
            attempt += 1;
            let error = match self
                .write_once(&command, &mut encoded, deadline, limit)
                .await
            {
                Ok(reply) => return Ok((reply, unknown)),
                Err(error) => error,
            };
            unknown |= error.is_outcome_unknown();
            let duplicate_key = upsert == Upsert::Yes
                && matches!(
                    error.kind(),
                    ErrorKind::Database {
                        code: Some(DUPLICATE_KEY)
                    }
                );
            duplicates += u32::from(duplicate_key);
            let again = if unknown && repeat == Repeat::OnlyIfNotApplied {
                false
            } else if duplicate_key {
                duplicates < 2
            } else {
                attempt < 2 && error.is_retryable()
            };
            if !again {
                return Err(if unknown {
                    error.with_unknown_outcome()
                } else {
                    error
                });
            }
            tracing::debug!(%error, "repeating a write");
        }
    }

    /// The bytes of one try of the write `command`: the command's bytes (encoded into
    /// `encoded` by the first try, copied from it by the others) with `writeConcern` and
    /// `maxTimeMS` for `limit` appended, as `Document::insert` added them to a copy of the
    /// command before (no command given here carries either). An encoding error is the
    /// driver's own, as `Database::run_command` returned it.
    fn try_bytes(
        &self,
        command: &Document,
        encoded: &mut Option<RawDocumentBuf>,
        limit: Duration,
    ) -> Result<RawDocumentBuf> {
        debug_assert!(
            !command.contains_key("writeConcern") && !command.contains_key("maxTimeMS"),
            "a write is given without its concerns and limits: {command}"
        );
        let encoding_error = |e| Error::database(mongodb::error::Error::from(e), Effect::Write);
        let mut bytes = match encoded {
            Some(bytes) => bytes.clone(),
            None => encoded
                .insert(RawDocumentBuf::from_document(command).map_err(encoding_error)?)
                .clone(),
        };
        bytes.append(
            "writeConcern",
            RawDocumentBuf::from_document(&self.write_concern_document(limit))
                .map_err(encoding_error)?,
        );
        bytes.append("maxTimeMS", millis(limit));
        Ok(bytes)
    }

    /// One try of [`Context::write_repeating`]: `command` with its write concern and time
    /// limit for what is left until `deadline`. `encoded` keeps the command's bytes for the
    /// next try: the first try that gets past the deadline's check encodes it, each try sends
    /// a copy of those bytes with `writeConcern` and `maxTimeMS` appended.
    ///
    /// The bytes are those `Database::run_command` sent: it encodes its `Document` with
    /// `RawDocumentBuf::try_from` and builds the same action `run_raw_command` builds from the
    /// bytes given (mongodb 3.9.1, `src/action/run_command.rs`; `run_raw_command` was added
    /// in 3.3.0 for this, RUST-2198), so the driver adds the same fields (`$db`, `lsid`,
    /// `$clusterTime`, the read preference), the command monitoring sees the same command,
    /// and an encoding error is the driver's own (`mongodb::error::Error::from`, as its
    /// `RunCommand` future returns it). The appended fields land where `Document::insert`
    /// put them, at the end: no command given here carries either.
    async fn write_once(
        &self,
        command: &Document,
        encoded: &mut Option<RawDocumentBuf>,
        deadline: Instant,
        total: Duration,
    ) -> Result<Document> {
        let limit = deadline.saturating_duration_since(Instant::now());
        if limit.is_zero() {
            return Err(Error::timeout(total, Effect::Write));
        }
        let bytes = self.try_bytes(command, encoded, limit)?;
        let database = self.database();
        let send = database
            .run_raw_command(bytes)
            .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary));
        let reply = match tokio::time::timeout(limit, send).await {
            Err(_) => return Err(Error::timeout(total, Effect::Write)),
            Ok(reply) => reply.map_err(|e| Error::database(e, Effect::Write))?,
        };
        // The server's clock had read at least this much: a forward step shows here.
        if let Ok(time) = reply.get_timestamp("operationTime") {
            self.server_clock.read_at_least(time.into());
        }
        if let Ok(wce) = reply.get_document("writeConcernError") {
            let code = match wce.get("code") {
                Some(Bson::Int32(c)) => *c,
                Some(Bson::Int64(c)) => i32::try_from(*c).unwrap_or(i32::MAX),
                _ => 0,
            };
            let message = wce.get_str("errmsg").unwrap_or("write concern error");
            return Err(Error::write_concern(code, message.to_owned()));
        }
        if let Ok(errors) = reply.get_array("writeErrors")
            && let Some(Bson::Document(first)) = errors.first()
        {
            let code = first.get_i32("code").ok();
            let message = first.get_str("errmsg").unwrap_or("write error").to_owned();
            return Err(Error::write_error(code, message));
        }
        Ok(reply)
    }

    /// Runs the aggregation `pipeline` on the primary, with majority read concern, the simple
    /// collation and the time limit, and returns every result.
    pub(crate) async fn aggregate(&self, pipeline: Vec<Document>) -> Result<Vec<Document>> {
        self.aggregate_within(pipeline, self.timeout).await
    }

    /// As [`Context::aggregate`], within `limit` (never more than the configured limit).
    pub(crate) async fn aggregate_within(
        &self,
        pipeline: Vec<Document>,
        limit: Duration,
    ) -> Result<Vec<Document>> {
        let limit = limit.min(self.timeout);
        let deadline = Instant::now() + limit;
        let run = async {
            self.collection
                .aggregate(pipeline)
                .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary))
                .read_concern(self.read_concern())
                .collation(Collation::builder().locale("simple").build())
                .max_time(limit)
                .await?
                .try_collect::<Vec<Document>>()
                .await
        };
        match tokio::time::timeout_at(deadline, run).await {
            Err(_) => Err(Error::timeout(limit, Effect::Read)),
            Ok(rows) => rows.map_err(|e| Error::database(e, Effect::Read)),
        }
    }
}

/// A duration in whole milliseconds, at least 1 (`maxTimeMS: 0` means no limit).
fn millis(duration: Duration) -> i64 {
    crate::clock::saturating_millis(duration).max(1)
}

/// Reads a count (`n`, `nModified`) from a write reply.
pub(crate) fn count(reply: &Document, field: &str) -> u64 {
    reply
        .get(field)
        .and_then(crate::schema::number)
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(0)
}

/// A context on a client that never connects, for tests that only build commands. The
/// driver's client needs a runtime to exist, so call it inside `#[tokio::test]`.
#[cfg(test)]
pub(crate) fn test_context() -> Context {
    let client = mongodb::Client::with_options(mongodb::options::ClientOptions::default())
        .expect("a client without servers");
    Context::new(client.database("d").collection("c"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_are_majority_journaled_and_bounded() {
        let ctx = test_context();
        assert_eq!(
            ctx.write_concern_document(Duration::from_millis(2_500)),
            doc! { "w": "majority", "j": true, "wtimeout": 2_500_i64 }
        );
        assert_eq!(ctx.read_concern(), ReadConcern::majority());
        let mut unsafe_ctx = ctx.clone();
        unsafe_ctx.write_concern = WriteConcern::nodes(1);
        assert_eq!(
            unsafe_ctx.write_concern_document(Duration::from_secs(1)),
            doc! { "w": 1_i64, "wtimeout": 1_000_i64 }
        );
        assert_eq!(unsafe_ctx.read_concern(), ReadConcern::local());
    }

    /// What `write_once` sent before it encoded the command itself: a copy of the command
    /// with the concerns and the limit inserted, as `Database::run_command` encoded it.
    fn sent_by_run_command(ctx: &Context, command: &Document, limit: Duration) -> Vec<u8> {
        let mut copy = command.clone();
        copy.insert("writeConcern", ctx.write_concern_document(limit));
        copy.insert("maxTimeMS", millis(limit));
        RawDocumentBuf::try_from(&copy)
            .expect("the command encodes")
            .into_bytes()
    }

    #[tokio::test]
    async fn every_try_sends_the_bytes_run_command_sent() {
        let command = doc! {
            "findAndModify": "c",
            "query": { "_id": "r", "m": { "$exists": true } },
            "update": [ { "$set": { "x": { "$ifNull": ["$x", 1_i64] }, "at": "$$NOW" } } ],
            "upsert": true,
            "new": true,
            "collation": Context::collation(),
        };
        let majority = test_context();
        let mut one = majority.clone();
        one.write_concern = WriteConcern::nodes(1);
        let mut tagged = majority.clone();
        tagged.write_concern = WriteConcern::builder()
            .w(Acknowledgment::Custom("dc".to_owned()))
            .journal(false)
            .build();
        for ctx in [&majority, &one, &tagged] {
            let mut encoded = None;
            // A first try, then a repeat with less time left: each its own concerns and limit.
            for limit in [Duration::from_millis(9_999), Duration::from_millis(1_234)] {
                let sent = ctx
                    .try_bytes(&command, &mut encoded, limit)
                    .expect("the command encodes");
                assert_eq!(
                    sent.as_bytes(),
                    sent_by_run_command(ctx, &command, limit),
                    "{:?}",
                    sent.to_document()
                );
            }
            // The kept encoding is the command alone, without a try's additions.
            assert_eq!(
                encoded.map(RawDocumentBuf::into_bytes),
                Some(bson::to_vec(&command).expect("the command encodes"))
            );
        }
    }

    #[tokio::test]
    async fn a_command_that_does_not_encode_fails_as_run_command_did() {
        let ctx = test_context();
        let command = doc! { "update": "c", "updates": [ { "q": { "a\0b": 1 } } ] };
        // The driver encodes before it selects a server: no server is needed for its error.
        let driver = ctx
            .database()
            .run_command(command.clone())
            .await
            .expect_err("a key with a NUL does not encode");
        let expected = Error::database(driver, Effect::Write);
        let mut encoded = None;
        let error = ctx
            .try_bytes(&command, &mut encoded, Duration::from_secs(1))
            .expect_err("a key with a NUL does not encode");
        assert!(encoded.is_none());
        assert_eq!(format!("{error:?}"), format!("{expected:?}"));
        assert_eq!(error.kind(), expected.kind());
        assert_eq!(error.is_retryable(), expected.is_retryable());
        assert_eq!(error.is_outcome_unknown(), expected.is_outcome_unknown());
    }

    #[test]
    fn limits_are_whole_positive_milliseconds() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::from_secs(3)), 3_000);
        assert_eq!(millis(Duration::MAX), i64::MAX);
    }

    #[test]
    fn counts_read_any_integer() {
        let reply = doc! { "n": 3, "nModified": 2_i64, "x": "y" };
        assert_eq!(count(&reply, "n"), 3);
        assert_eq!(count(&reply, "nModified"), 2);
        assert_eq!(count(&reply, "x"), 0);
        assert_eq!(count(&reply, "missing"), 0);
    }
}
