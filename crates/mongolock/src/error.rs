//! The one error type of this crate.
//!
//! Every fallible call returns [`Error`]. Match on [`Error::kind`] to tell a busy lock
//! ([`ErrorKind::AlreadyLocked`]) from bad input ([`ErrorKind::InvalidArgument`]), a document
//! that is not a lock ([`ErrorKind::UnexpectedDocument`]) or a failure of the database
//! ([`ErrorKind::Database`]). The driver's own error is kept as [`std::error::Error::source`],
//! never in this crate's signatures, so a driver upgrade does not change this API.

use std::fmt;
use std::time::Duration;

use bson::DateTime;

use crate::lock::Holder;

/// A `Result` whose error is this crate's [`Error`].
///
/// ```
/// fn check(details: &mongolock::LockDetails) -> mongolock::Result<()> {
///     details.validate()
/// }
/// assert!(check(&Default::default()).is_ok());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from a lock operation.
///
/// Besides [`kind`](Error::kind), two predicates say what to do next:
/// [`is_outcome_unknown`](Error::is_outcome_unknown) (the server may have applied the write:
/// resolve it, do not guess) and [`is_retryable`](Error::is_retryable) (repeating the same
/// call may succeed).
///
/// # Examples
///
/// ```
/// use mongolock::ErrorKind;
///
/// fn describe(error: &mongolock::Error) -> String {
///     match error.kind() {
///         ErrorKind::AlreadyLocked { resource, holder_count, .. } => {
///             format!("{resource} is held by {holder_count} lock(s)")
///         }
///         ErrorKind::InvalidArgument { argument, .. } => format!("bad {argument}"),
///         _ if error.is_outcome_unknown() => "maybe applied: ask again".to_owned(),
///         _ => error.to_string(),
///     }
/// }
/// # let _ = describe;
/// ```
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    retryable: bool,
    outcome_unknown: bool,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// What went wrong. New kinds may be added in minor releases.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> mongolock::Result<()> {
/// # let server = mongolock_testkit::TestServer::start().await.unwrap();
/// # let locks = mongolock::LockClient::new(server.client().database("doc").collection("locks"));
/// use mongolock::{ErrorKind, LockDetails};
///
/// locks.xlock("report", "job-1", LockDetails::default()).await?;
/// match locks.xlock("report", "job-2", LockDetails::default()).await {
///     Err(e) if matches!(e.kind(), ErrorKind::AlreadyLocked { .. }) => {} // try later
///     other => panic!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The resource is held by others, so the lock was not granted. Nothing was written for
    /// this request (expired entries may have been cleared on the way).
    #[error(
        "resource {resource:?} is already locked by {}",
        describe_holders(holders, *holder_count)
    )]
    #[non_exhaustive]
    AlreadyLocked {
        /// The contended resource.
        resource: String,
        /// Some of the live holders that stand in the way, as the server saw them (at most
        /// [`MAX_NAMED_HOLDERS`](crate::MAX_NAMED_HOLDERS)).
        holders: Vec<Holder>,
        /// How many live holders stand in the way in all.
        holder_count: u64,
        /// How long, by the server's clock, until the blocking leases end if nobody renews
        /// them; `None` when a blocker has no TTL. Computed by the server.
        wait: Option<Duration>,
        /// The same moment as a server time, for display; never compare it with a local clock.
        free_at: Option<DateTime>,
    },
    /// The lock id already holds the resource with the other kind of lock. Locks are not
    /// upgraded or downgraded: release the one held first. Waiting would not help, since the
    /// caller itself stands in the way.
    #[error(
        "lock id {:?} already holds {resource:?} as a {} lock",
        held.lock_id(),
        held.kind()
    )]
    #[non_exhaustive]
    HeldWithOtherKind {
        /// The resource.
        resource: String,
        /// The lock the lock id holds.
        held: Holder,
    },
    /// A shared lock was asked for with a cap other than the one stored with the resource's
    /// live shared locks ([`Attempt::CapMismatch`](crate::Attempt::CapMismatch)).
    #[error(
        "resource {resource:?} is shared with a cap of {}, not {}",
        describe_cap(*stored),
        describe_cap(*requested)
    )]
    #[non_exhaustive]
    CapMismatch {
        /// The resource.
        resource: String,
        /// The cap asked for (`None`: no cap).
        requested: Option<u32>,
        /// The cap stored with the live shared locks (`None`: no cap).
        stored: Option<u32>,
    },
    /// The server cannot run this crate's commands: they need MongoDB `minimum` or later,
    /// for `missing`. Found before the client's first command is sent (one check per
    /// client), so nothing was changed. Servers that speak MongoDB's protocol without
    /// pipeline updates and `$$NOW` (Amazon DocumentDB, Azure Cosmos DB's API for MongoDB)
    /// are refused this way too.
    #[error("unsupported server: mongolock needs {missing}, which MongoDB has from {minimum} on")]
    #[non_exhaustive]
    UnsupportedServer {
        /// What the server lacks.
        missing: String,
        /// The oldest MongoDB release that has it.
        minimum: &'static str,
    },
    /// The resource refuses every attempt until `until`, by the server's clock: more
    /// attempts were withdrawn on it than it keeps tombstones for
    /// ([`Attempt::Sealed`](crate::Attempt::Sealed)). Retry after `until`.
    #[error(
        "resource {resource:?} refuses new attempts until {until} (server time): too many withdrawn attempts"
    )]
    #[non_exhaustive]
    Sealed {
        /// The resource.
        resource: String,
        /// When it takes attempts again, by the server's clock.
        until: bson::DateTime,
    },
    /// A lease was lost while it was used: by
    /// [`LockGuard::release`](crate::LockGuard::release) (and
    /// [`MultiGuard::release`](crate::MultiGuard::release)) when the loss came first, and by
    /// every closure form when the work was stopped: [`Mutex::run`](crate::Mutex::run),
    /// [`Mutex::try_run`](crate::Mutex::try_run) and
    /// [`Mutex::run_timeout`](crate::Mutex::run_timeout), their kin on
    /// [`Semaphore`](crate::Semaphore) and [`RwLock`](crate::RwLock)
    /// ([`run_read`](crate::RwLock::run_read), [`run_write`](crate::RwLock::run_write), ...),
    /// [`MultiLock::run`](crate::MultiLock::run) and its kin, and a leader's term
    /// ([`Election::lead`](crate::Election::lead),
    /// [`try_lead`](crate::Election::try_lead), [`lead_timeout`](crate::Election::lead_timeout)).
    /// The blocking API runs these forms through `blocking::block_on` on the async client,
    /// and reports the same error; its guards' `release` does too.
    #[error("the lease on {resource:?} was lost ({reason:?})")]
    #[non_exhaustive]
    LeaseLost {
        /// The resource.
        resource: String,
        /// Why.
        reason: crate::lock::LossReason,
    },
    /// An argument was rejected before anything was sent to the server.
    #[error("invalid {argument}: {reason}")]
    #[non_exhaustive]
    InvalidArgument {
        /// Which argument.
        argument: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// The collection holds a document that is not a lock document of this crate (another
    /// library's schema, or data written by hand). It was left unchanged.
    #[error("document {id} is not a mongolock document: {reason}")]
    #[non_exhaustive]
    UnexpectedDocument {
        /// The document's `_id`, printed as relaxed extended JSON.
        id: String,
        /// What did not fit.
        reason: String,
    },
    /// A write through a [`Fence`](crate::Fence) was refused because the document holds a
    /// newer fencing token than the one presented: a newer holder of the lock wrote it, so
    /// this holder's lease ended before the write (it was paused, cut off, or revoked).
    /// Nothing was written. Stop the work the lock protected; repeating the write cannot
    /// succeed.
    #[error(
        "stale fencing token: document {id} holds token {stored}, newer than {presented}; \
         a newer holder wrote it, so the write was refused"
    )]
    #[non_exhaustive]
    StaleToken {
        /// The document's `_id`, printed as relaxed extended JSON.
        id: String,
        /// The token stored in the document: the newer holder's.
        stored: i64,
        /// The token the refused write presented.
        presented: i64,
    },
    /// The call did not complete within its time limit (see
    /// [`LockClientBuilder::command_timeout`](crate::LockClientBuilder::command_timeout)). For a
    /// write, the server may still have applied it: the outcome is unknown.
    #[error("no answer from the server within {limit:?}")]
    #[non_exhaustive]
    Timeout {
        /// The limit that passed.
        limit: Duration,
    },
    /// The database or the connection to it failed; see [`std::error::Error::source`].
    #[error("database error{}", code.map(|c| format!(" (code {c})")).unwrap_or_default())]
    #[non_exhaustive]
    Database {
        /// The server's error code, when the server answered with one.
        code: Option<i32>,
    },
}

fn describe_cap(cap: Option<u32>) -> String {
    cap.map_or_else(|| "none".to_owned(), |n| n.to_string())
}

fn describe_holders(holders: &[Holder], count: u64) -> String {
    let mut ids: Vec<String> = holders
        .iter()
        .map(|h| format!("{:?} ({})", h.lock_id(), h.kind()))
        .collect();
    let unnamed = count.saturating_sub(holders.len() as u64);
    if unnamed > 0 {
        ids.push(format!("{unnamed} more"));
    }
    if ids.is_empty() {
        "nobody known".to_owned()
    } else {
        ids.join(", ")
    }
}

/// Server error codes after which the same command may succeed: the node stepped down, is
/// shutting down or is unreachable, or a time limit passed.
const TRANSIENT_CODES: &[i32] = &[
    6, 7, 50, 89, 91, 189, 262, 9001, 10058, 10107, 11600, 11602, 13435, 13436,
];

/// Codes that mean a time limit passed while the command ran: for a write, it may have been
/// applied.
const TIME_LIMIT_CODES: &[i32] = &[50, 262];

/// Whether a failed command could have changed anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    /// A read: nothing was written, whatever happened.
    Read,
    /// A write: a failure after sending leaves its outcome unknown.
    Write,
}

/// The oldest MongoDB release the commands run on (see `command/compat.rs`).
pub(crate) const MINIMUM_VERSION: &str = "4.4";

/// Refusals that mean the server lacks what the commands use: CommandNotSupported (115),
/// InvalidPipelineOperator (168: an unknown expression operator), NotImplemented (238), an
/// undefined variable such as `$$NOW` (17276), an unknown pipeline stage (40324).
pub(crate) const UNSUPPORTED_CODES: [i32; 5] = [115, 168, 238, 17276, 40324];

/// The error for a server that refused a command with `code`, if that code means it lacks
/// what the commands use.
fn unsupported_refusal(code: i32, message: &str) -> Option<Error> {
    UNSUPPORTED_CODES.contains(&code).then(|| {
        unsupported(format!(
            "pipeline updates with $$NOW (the server refused one with code {code}: {message})"
        ))
    })
}

/// The error for a server that lacks `missing`, which MongoDB has from [`MINIMUM_VERSION`].
fn unsupported(missing: String) -> Error {
    Error::new(ErrorKind::UnsupportedServer {
        missing,
        minimum: MINIMUM_VERSION,
    })
}

impl Error {
    pub(crate) fn new(kind: ErrorKind) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                retryable: false,
                outcome_unknown: false,
                source: None,
            }),
        }
    }

    pub(crate) fn invalid(argument: &'static str, reason: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidArgument {
            argument,
            reason: reason.into(),
        })
    }

    pub(crate) fn unexpected(id: &bson::Bson, reason: impl Into<String>) -> Self {
        Error::new(ErrorKind::UnexpectedDocument {
            id: id.clone().into_relaxed_extjson().to_string(),
            reason: reason.into(),
        })
    }

    /// A reply the client cannot read: the command ran, so for a write its effect is unknown.
    pub(crate) fn bad_reply(effect: Effect, reason: impl Into<String>) -> Self {
        let mut error = Error::unexpected(&bson::Bson::String("reply".into()), reason);
        error.inner.outcome_unknown = effect == Effect::Write;
        error
    }

    /// No reply within `limit`: retryable, and unknown for a write.
    pub(crate) fn timeout(limit: Duration, effect: Effect) -> Self {
        let mut error = Error::new(ErrorKind::Timeout { limit });
        error.inner.retryable = true;
        error.inner.outcome_unknown = effect == Effect::Write;
        error
    }

    /// A chore this client owes for the lock id (the release or withdrawal of an earlier
    /// grant) was still on its way after `limit`: the attempt was not sent (it could land
    /// before that chore, which would then end what it was granted). Retryable, and
    /// definite: nothing was written.
    pub(crate) fn still_owed(limit: Duration) -> Self {
        let mut error = Error::new(ErrorKind::Timeout { limit });
        error.inner.retryable = true;
        error.inner.source = Some(
            "an earlier release of this lock id by this client is still on its way; the attempt was not sent"
                .into(),
        );
        error
    }

    /// A write concern error in a reply: the write was applied on the primary but not
    /// confirmed as durable, so its fate is unknown (it may yet be rolled back, or not).
    pub(crate) fn write_concern(code: i32, message: String) -> Self {
        Error {
            inner: Box::new(Inner {
                kind: ErrorKind::Database { code: Some(code) },
                retryable: true,
                outcome_unknown: true,
                source: Some(message.into()),
            }),
        }
    }

    /// A write error in a reply (`writeErrors`): the statement did not apply.
    pub(crate) fn write_error(code: Option<i32>, message: String) -> Self {
        if let Some(unsupported) = code.and_then(|c| unsupported_refusal(c, &message)) {
            return unsupported;
        }
        let mut error = Error::new(ErrorKind::Database { code });
        error.inner.source = Some(message.into());
        error
    }

    /// Wraps a driver error, classifying it once so the predicates need not know the driver.
    /// Deliberately not a `From` impl: that would put the driver's type into this API.
    ///
    /// - An error reply from the server (`ok: 0`) means this command did not run: definite,
    ///   except the time-limit codes, after which a write may have been applied.
    /// - Failing to select a server means nothing was sent: definite.
    /// - Anything that can happen after the command was sent (a network error, a reply that
    ///   cannot be read) leaves a write's outcome unknown.
    ///
    /// The library sends its writes with `runCommand`, which the driver never retries, so the
    /// error always describes the one attempt that was made.
    pub(crate) fn database(error: mongodb::error::Error, effect: Effect) -> Self {
        use mongodb::error::{ErrorKind as Driver, WriteFailure};

        // The driver itself refuses a server older than it supports (before MongoDB 4.4 for
        // the 3.x driver): the library's own answer for such a server. The 3.x driver says so
        // in a server selection error (its topology's compatibility error), whose message is
        // the only mark of it.
        let incompatible = match error.kind.as_ref() {
            Driver::IncompatibleServer { message, .. } => Some(message.clone()),
            Driver::ServerSelection { message, .. }
                if message.contains("driver requires at least") =>
            {
                Some(message.clone())
            }
            _ => None,
        };
        if let Some(message) = incompatible {
            return unsupported(format!(
                "pipeline updates with $$NOW and computed fields in findAndModify's projection (the driver refused the server as too old: {})",
                message.trim_end_matches('.')
            ));
        }

        if let Driver::Command(e) = error.kind.as_ref()
            && let Some(unsupported) = unsupported_refusal(e.code, &e.message)
        {
            return unsupported;
        }
        let (code, retryable, may_have_applied) = match error.kind.as_ref() {
            Driver::Command(e) => (
                Some(e.code),
                TRANSIENT_CODES.contains(&e.code),
                TIME_LIMIT_CODES.contains(&e.code),
            ),
            Driver::Write(WriteFailure::WriteError(e)) => (Some(e.code), false, false),
            Driver::Write(WriteFailure::WriteConcernError(e)) => (Some(e.code), true, true),
            Driver::ServerSelection { .. } => (None, true, false),
            Driver::Io(_) | Driver::ConnectionPoolCleared { .. } => (None, true, true),
            Driver::InvalidArgument { .. }
            | Driver::Authentication { .. }
            | Driver::InvalidTlsConfig { .. }
            | Driver::DnsResolve { .. } => (None, false, false),
            _ => (None, false, true),
        };
        Error {
            inner: Box::new(Inner {
                kind: ErrorKind::Database { code },
                retryable,
                outcome_unknown: may_have_applied && effect == Effect::Write,
                source: Some(Box::new(error)),
            }),
        }
    }

    /// Marks the outcome unknown: an earlier attempt of the same call may have been applied.
    pub(crate) fn with_unknown_outcome(mut self) -> Self {
        self.inner.outcome_unknown = true;
        self
    }

    /// What went wrong.
    ///
    /// ```
    /// # let error = mongolock::LockDetails::default().ttl(std::time::Duration::ZERO).validate().unwrap_err();
    /// assert!(matches!(error.kind(), mongolock::ErrorKind::InvalidArgument { argument: "ttl", .. }));
    /// ```
    pub fn kind(&self) -> &ErrorKind {
        &self.inner.kind
    }

    /// Whether the lock was refused because others hold the resource.
    ///
    /// ```
    /// # let error = mongolock::LockDetails::default().ttl(std::time::Duration::ZERO).validate().unwrap_err();
    /// assert!(!error.is_already_locked());
    /// ```
    pub fn is_already_locked(&self) -> bool {
        matches!(self.inner.kind, ErrorKind::AlreadyLocked { .. })
    }

    /// Whether a fenced write was refused because a newer holder had written the document
    /// ([`ErrorKind::StaleToken`]): the lease this write was made under is over.
    ///
    /// ```
    /// # let error = mongolock::LockDetails::default().ttl(std::time::Duration::ZERO).validate().unwrap_err();
    /// assert!(!error.is_stale_token());
    /// ```
    pub fn is_stale_token(&self) -> bool {
        matches!(self.inner.kind, ErrorKind::StaleToken { .. })
    }

    /// Whether the same call, repeated with the same arguments, may succeed: the connection
    /// failed, the primary stepped down, a time limit passed, and the like. Every operation
    /// of [`LockClient`](crate::LockClient) is safe to repeat with the same lock id (and
    /// nonce). A busy lock is not "retryable" in this sense; see
    /// [`Error::is_already_locked`].
    ///
    /// ```
    /// # let error = mongolock::LockDetails::default().ttl(std::time::Duration::ZERO).validate().unwrap_err();
    /// assert!(!error.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        self.inner.retryable
    }

    /// Whether the server may have applied the write although the call failed: the
    /// connection dropped after the command was sent, no answer came in time, or the write
    /// was not confirmed by a majority (a write concern error). An error reply from the
    /// server (a step-down, a shutdown) means the command did not run, and a failure to
    /// reach any server means nothing was sent: both are definite. Reads are always
    /// definite.
    ///
    /// Resolve an unknown outcome rather than guess: repeat the call with the same lock id
    /// and nonce (acquiring again returns the grant, if there is one), or give the attempt up
    /// with [`LockClient::release_attempt`](crate::LockClient::release_attempt).
    ///
    /// ```
    /// # let error = mongolock::LockDetails::default().ttl(std::time::Duration::ZERO).validate().unwrap_err();
    /// assert!(!error.is_outcome_unknown());
    /// ```
    pub fn is_outcome_unknown(&self) -> bool {
        self.inner.outcome_unknown
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.inner.kind);
        if let Some(source) = &self.inner.source {
            // The driver's Display: its Debug dumps the raw server reply.
            d.field("source", &format_args!("{source}"));
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner.kind, f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Self {
        Error::new(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn error_is_small_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Error>();
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn driver_network_errors_leave_a_write_unknown_and_a_read_definite() {
        let io = || std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let error = Error::database(mongodb::error::Error::from(io()), Effect::Write);
        assert!(error.is_retryable());
        assert!(error.is_outcome_unknown());
        assert_eq!(error.kind(), &ErrorKind::Database { code: None });
        assert!(error.source().is_some());
        let read = Error::database(mongodb::error::Error::from(io()), Effect::Read);
        assert!(read.is_retryable());
        assert!(!read.is_outcome_unknown());
    }

    #[test]
    fn timeouts_and_write_concern_errors_are_unknown() {
        let timeout = Error::timeout(Duration::from_secs(1), Effect::Write);
        assert!(timeout.is_outcome_unknown() && timeout.is_retryable());
        assert_eq!(timeout.to_string(), "no answer from the server within 1s");
        let wce = Error::write_concern(64, "waiting for replication timed out".into());
        assert!(wce.is_outcome_unknown() && wce.is_retryable());
        assert!(wce.source().unwrap().to_string().contains("replication"));
        assert!(
            Error::invalid("x", "y")
                .with_unknown_outcome()
                .is_outcome_unknown()
        );
    }

    #[test]
    fn contention_messages_count_the_unnamed_holders() {
        assert_eq!(describe_holders(&[], 0), "nobody known");
        assert_eq!(describe_holders(&[], 3), "3 more");
    }

    #[test]
    fn stale_tokens_read_well() {
        let error = Error::new(ErrorKind::StaleToken {
            id: "\"acct-1\"".into(),
            stored: 9,
            presented: 7,
        });
        assert_eq!(
            error.to_string(),
            "stale fencing token: document \"acct-1\" holds token 9, newer than 7; \
             a newer holder wrote it, so the write was refused"
        );
        assert!(error.is_stale_token());
        assert!(!error.is_retryable() && !error.is_outcome_unknown());
    }

    #[test]
    fn invalid_argument_reads_well() {
        let error = Error::invalid("lock_id", "must not be empty");
        assert_eq!(error.to_string(), "invalid lock_id: must not be empty");
        assert!(!error.is_retryable());
        assert!(error.source().is_none());
    }
}
