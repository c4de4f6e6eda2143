//! Connection strings: where their user info is, how they are shown without it, and how
//! they are turned into a driver client without ever printing the driver's message about a
//! string that does not parse (it quotes what it took for a host or an option, which may be
//! a piece of the password).
//!
//! The user info is everything between `://` and the last `@`: a password may hold `?`,
//! `/`, `:` or even `@` unescaped (the driver then refuses the string, or reads a piece of
//! the password as a host or an option), so the widest reading is the one kept secret.

use std::fmt;
use std::time::Duration;

use mongodb::error::ErrorKind;
use mongodb::options::{ClientOptions, ConnectionString};

/// A connection string cut around its user info.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts<'a> {
    /// The scheme with its `://` (`mongodb://`), or empty for a string without one.
    pub scheme: &'a str,
    /// Between `://` (or the start) and the last `@`; `None` without an `@`.
    pub user_info: Option<&'a str>,
    /// What follows the user info (or the scheme): hosts, database, options.
    pub rest: &'a str,
}

/// `uri` cut around its user info. A `://` counts as the end of a scheme only after a
/// scheme's characters (a letter, then letters, digits, `+`, `-` or `.`).
pub fn split(uri: &str) -> Parts<'_> {
    let scheme_len = uri
        .find("://")
        .filter(|&end| is_scheme(&uri[..end]))
        .map_or(0, |end| end + 3);
    let (scheme, after) = uri.split_at(scheme_len);
    match after.rfind('@') {
        Some(at) => Parts {
            scheme,
            user_info: Some(&after[..at]),
            rest: &after[at + 1..],
        },
        None => Parts {
            scheme,
            user_info: None,
            rest: after,
        },
    }
}

/// Whether `name` can be a URI scheme.
fn is_scheme(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// `uri` as messages show it: the user info replaced by `<redacted>`, and the options
/// (which may hold other secrets, such as a key file's password) by `...`:
/// `mongodb://<redacted>@db1:27017,db2/app?...`.
pub fn redacted(uri: &str) -> String {
    let parts = split(uri);
    let hosts = match parts.rest.split_once('?') {
        Some((hosts, _options)) => format!("{hosts}?..."),
        None => parts.rest.to_owned(),
    };
    match parts.user_info {
        Some(_) => format!("{}<redacted>@{hosts}", parts.scheme),
        None => format!("{}{hosts}", parts.scheme),
    }
}

/// A connection string the driver refuses, told without the driver's own message when
/// that could quote the user info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriError {
    /// The string, [`redacted`].
    shown: String,
    /// What is wrong with it.
    problem: Problem,
}

/// What is wrong with a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Problem {
    /// The string parses with another user info in place of its own: the user name or the
    /// password holds a character that must be percent-encoded.
    UserInfo,
    /// Something outside the user info, in the driver's words for the string with a
    /// stand-in user info (so the words cannot quote the real one).
    Other(String),
}

impl fmt::Display for UriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            Problem::UserInfo => write!(
                f,
                "cannot use the connection string {}: the user name or password must be \
                 percent-encoded (write @ : / ? # [ ] % as %40 %3A %2F %3F %23 %5B %5D %25)",
                self.shown
            ),
            Problem::Other(reason) => {
                write!(
                    f,
                    "cannot use the connection string {}: {reason}",
                    self.shown
                )
            }
        }
    }
}

impl std::error::Error for UriError {}

impl UriError {
    /// Why the driver refused `uri`, found by parsing it again with a stand-in user info of
    /// the same shape (`user`, or `user:password`).
    fn diagnose(uri: &str) -> UriError {
        let parts = split(uri);
        let stand_in = match parts.user_info {
            Some(info) if info.contains(':') => {
                format!("{}user:password@{}", parts.scheme, parts.rest)
            }
            Some(_) => format!("{}user@{}", parts.scheme, parts.rest),
            None => uri.to_owned(),
        };
        let problem = match ConnectionString::parse(&stand_in) {
            Ok(_) => Problem::UserInfo,
            Err(error) => Problem::Other(match *error.kind {
                ErrorKind::InvalidArgument { message, .. } => message,
                other => other.to_string(),
            }),
        };
        UriError {
            shown: redacted(uri),
            problem,
        }
    }
}

/// Parses `uri` (without resolving an SRV record yet).
///
/// # Errors
///
/// A [`UriError`] that never quotes the user info.
pub fn parse(uri: &str) -> Result<ConnectionString, UriError> {
    ConnectionString::parse(uri).map_err(|_| UriError::diagnose(uri))
}

/// How long the first connection is waited for when neither `--connect-timeout` nor the
/// connection string says.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The driver's options for `uri`: parsed as [`parse`] does, its SRV record resolved for
/// `mongodb+srv://`, and the wait for a connection set: `connect_timeout` (from
/// `--connect-timeout`) as the server selection timeout and the connect timeout; without it,
/// those of the string, else [`DEFAULT_CONNECT_TIMEOUT`] (the driver's own default server
/// selection timeout is 30 s).
///
/// # Errors
///
/// A [`UriError`], or a driver error (an SRV record that cannot be resolved) in the context
/// of the [`redacted`] string.
///
/// # Cancel safety
///
/// Cancel safe: nothing is started until it returns.
pub async fn options(
    uri: &str,
    connect_timeout: Option<Duration>,
) -> anyhow::Result<ClientOptions> {
    let parsed = parse(uri)?;
    let mut options = ClientOptions::parse(parsed)
        .await
        .map_err(|error| anyhow::Error::new(error).context(cannot_use(uri)))?;
    if connect_timeout.is_some() || options.server_selection_timeout.is_none() {
        options.server_selection_timeout = Some(connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT));
    }
    if connect_timeout.is_some() || options.connect_timeout.is_none() {
        options.connect_timeout = Some(connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT));
    }
    Ok(options)
}

/// The driver client for `uri`, with the [`options`] for it.
///
/// # Errors
///
/// As [`options`], and a driver error for options that do not go together, in the context
/// of the [`redacted`] string.
///
/// # Cancel safety
///
/// Cancel safe: nothing is started until it returns.
pub async fn client(
    uri: &str,
    connect_timeout: Option<Duration>,
) -> anyhow::Result<mongodb::Client> {
    let options = options(uri, connect_timeout).await?;
    mongodb::Client::with_options(options)
        .map_err(|error| anyhow::Error::new(error).context(cannot_use(uri)))
}

/// The context of a driver error about `uri`.
fn cannot_use(uri: &str) -> String {
    format!("cannot use the connection string {}", redacted(uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_info_ends_at_the_last_at_sign() {
        let cases = [
            ("mongodb://a:b@h/", "mongodb://", Some("a:b"), "h/"),
            (
                "mongodb://a:b?c@h:1/?x=y",
                "mongodb://",
                Some("a:b?c"),
                "h:1/?x=y",
            ),
            ("mongodb://a:b/c@h", "mongodb://", Some("a:b/c"), "h"),
            ("mongodb://a:b@c@h", "mongodb://", Some("a:b@c"), "h"),
            ("mongodb+srv://a@h", "mongodb+srv://", Some("a"), "h"),
            ("mongodb://h:1/db", "mongodb://", None, "h:1/db"),
            ("a:b@h", "", Some("a:b"), "h"),
            // A "://" inside what cannot be a scheme is not one.
            ("a:b://c@h", "", Some("a:b://c"), "h"),
            ("", "", None, ""),
        ];
        for (uri, scheme, user_info, rest) in cases {
            assert_eq!(
                split(uri),
                Parts {
                    scheme,
                    user_info,
                    rest
                },
                "{uri}"
            );
        }
    }

    #[test]
    fn redacted_hides_the_user_info_and_the_options() {
        assert_eq!(
            redacted("mongodb://alice:S3cret?Pw0rd@127.0.0.1:1/"),
            "mongodb://<redacted>@127.0.0.1:1/"
        );
        assert_eq!(
            redacted("mongodb://a:p@db1,db2/app?tlsCertificateKeyFilePassword=k"),
            "mongodb://<redacted>@db1,db2/app?..."
        );
        assert_eq!(redacted("mongodb://db1/"), "mongodb://db1/");
        assert_eq!(redacted("a:b@h"), "<redacted>@h");
    }

    #[test]
    fn the_problem_is_named_without_the_drivers_words_about_the_user_info() {
        let error = parse("mongodb://alice:S3cret?Pw0rd@127.0.0.1:1/").unwrap_err();
        assert_eq!(error.problem, Problem::UserInfo);
        let error = parse("mongodb://alice:Pa55@w0rd@127.0.0.1:1/").unwrap_err();
        assert_eq!(error.problem, Problem::UserInfo);
        let error = parse("mongodb://alice:S3cret@127.0.0.1:1/?authMechanism=BOGUS").unwrap_err();
        assert!(
            matches!(&error.problem, Problem::Other(reason) if reason.contains("BOGUS")),
            "{error:?}"
        );
        assert!(!error.to_string().contains("S3cret"), "{error}");
        let error = parse("mongodb://127.0.0.1:x/").unwrap_err();
        assert!(matches!(error.problem, Problem::Other(_)), "{error:?}");
        assert!(parse("mongodb://alice:S3cret%3F@127.0.0.1:1/").is_ok());
    }
}
