//! The one error type of this crate.
//!
//! Every fallible call returns [`Error`]. Match on [`Error::kind`] to tell a busy lock
//! ([`ErrorKind::AlreadyLocked`]) from bad input ([`ErrorKind::InvalidArgument`]), a document
//! that is not a lock ([`ErrorKind::UnexpectedDocument`]) or a failure of the database
//! ([`ErrorKind::Database`]). The driver's own error is kept as [`std::error::Error::source`],
//! never in this crate's signatures, so a driver upgrade does not change this API.

use std::fmt;

use bson::DateTime;

use crate::types::Holder;

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
/// # Examples
///
/// ```
/// use mongolock::ErrorKind;
///
/// fn describe(error: &mongolock::Error) -> String {
///     match error.kind() {
///         ErrorKind::AlreadyLocked { resource, holders, .. } => {
///             format!("{resource} is held by {} lock(s)", holders.len())
///         }
///         ErrorKind::InvalidArgument { argument, .. } => format!("bad {argument}"),
///         _ if error.is_retryable() => "try again".to_owned(),
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
    /// The resource is held by others, so the lock was not granted. Nothing was written
    /// for this request (expired entries may have been cleared on the way).
    #[error(
        "resource {resource:?} is already locked by {}",
        describe_holders(holders)
    )]
    #[non_exhaustive]
    AlreadyLocked {
        /// The contended resource.
        resource: String,
        /// The live holders that stand in the way, as the server saw them.
        holders: Vec<Holder>,
        /// The server time at which the holders' leases end if nobody renews them, so the
        /// earliest time a new attempt could succeed; `None` when a holder has no TTL.
        free_at: Option<DateTime>,
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
    /// The database or the connection to it failed; see [`std::error::Error::source`].
    #[error("database error{}", code.map(|c| format!(" (code {c})")).unwrap_or_default())]
    #[non_exhaustive]
    Database {
        /// The server's error code, when the server answered with one.
        code: Option<i32>,
    },
}

fn describe_holders(holders: &[Holder]) -> String {
    let ids: Vec<String> = holders
        .iter()
        .map(|h| format!("{:?} ({})", h.lock_id(), h.kind()))
        .collect();
    if ids.is_empty() {
        "nobody known".to_owned()
    } else {
        ids.join(", ")
    }
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

    /// Wraps a driver error, classifying it once so the predicates need not know the driver.
    /// Deliberately not a `From` impl: that would put the driver's type into this API.
    pub(crate) fn database(error: mongodb::error::Error) -> Self {
        use mongodb::error::{ErrorKind as Driver, WriteFailure};

        const TRANSIENT_CODES: &[i32] = &[
            6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 50,
        ];
        let labelled = error.contains_label(mongodb::error::RETRYABLE_WRITE_ERROR)
            || error.contains_label(mongodb::error::TRANSIENT_TRANSACTION_ERROR);
        let (code, network, write_concern) = match error.kind.as_ref() {
            Driver::Command(e) => (Some(e.code), false, false),
            Driver::Write(WriteFailure::WriteError(e)) => (Some(e.code), false, false),
            Driver::Write(WriteFailure::WriteConcernError(e)) => (Some(e.code), false, true),
            Driver::Io(_)
            | Driver::ConnectionPoolCleared { .. }
            | Driver::ServerSelection { .. } => (None, true, false),
            _ => (None, false, false),
        };
        let transient = code.is_some_and(|c| TRANSIENT_CODES.contains(&c));
        Error {
            inner: Box::new(Inner {
                kind: ErrorKind::Database { code },
                retryable: labelled || network || write_concern || transient,
                // A network error or a write-concern error may come after the server applied
                // the write; 50 (MaxTimeMSExpired) and 262 (ExceededTimeLimit) likewise.
                outcome_unknown: network
                    || write_concern
                    || labelled
                    || matches!(code, Some(50) | Some(262)),
                source: Some(Box::new(error)),
            }),
        }
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

    /// Whether the same call, repeated with the same arguments, may succeed: the connection
    /// failed, the primary stepped down, a write concern timed out, and the like. Every
    /// operation of [`LockClient`](crate::LockClient) is safe to repeat with the same lock id.
    /// A busy lock is not "retryable" in this sense; see [`Error::is_already_locked`].
    ///
    /// ```
    /// # let error = mongolock::LockDetails::default().ttl(std::time::Duration::ZERO).validate().unwrap_err();
    /// assert!(!error.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        self.inner.retryable
    }

    /// Whether the server may have applied the write although the call failed (a dropped
    /// connection, a write-concern error, a time limit). Resolve it rather than guess: repeat
    /// the call with the same lock id (acquiring again returns the existing grant), or read
    /// [`LockClient::status`](crate::LockClient::status).
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
    fn driver_network_errors_are_retryable_and_ambiguous() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let error = Error::database(mongodb::error::Error::from(io));
        assert!(error.is_retryable());
        assert!(error.is_outcome_unknown());
        assert_eq!(error.kind(), &ErrorKind::Database { code: None });
        assert!(error.source().is_some());
    }

    #[test]
    fn invalid_argument_reads_well() {
        let error = Error::invalid("lock_id", "must not be empty");
        assert_eq!(error.to_string(), "invalid lock_id: must not be empty");
        assert!(!error.is_retryable());
        assert!(error.source().is_none());
    }
}
