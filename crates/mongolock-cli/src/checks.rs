//! What can be checked before connecting: every value the library refuses without asking
//! the server (empty or over-long names and lock ids, over-long labels, TTLs out of range),
//! the database and collection names the server refuses, and durations as typed.
//!
//! A value refused here is a usage error (status 2, [`Cli::check`](crate::cli::Cli::check)),
//! told with the flag's name and, for a value that may be long, only its first
//! [`SHOWN_CHARS`] characters ([`shown`]).

use std::time::Duration;

use mongolock::{LockDetails, MAX_ID_LEN, MAX_LABEL_LEN, MAX_TTL};

use crate::output::escape;

/// How many characters of a refused value a message quotes; a longer one is cut, with `…`.
pub const SHOWN_CHARS: usize = 40;

/// The shortest lease TTL the library accepts (its `MIN_LEASE_TTL`, which it does not
/// export; keep them equal).
pub const MIN_LEASE_TTL: Duration = Duration::from_millis(50);

/// The longest retention `indexes` takes: the most `expireAfterSeconds` a server stores.
pub const MAX_RETENTION: Duration = Duration::from_secs(i32::MAX as u64);

/// The longest database name a server takes, in bytes.
pub const MAX_DB_NAME: usize = 63;

/// The longest namespace (`database.collection`) a server takes, in bytes.
pub const MAX_NAMESPACE: usize = 255;

/// The characters a database name must not hold (MongoDB's list for every platform, and
/// the NUL character).
const DB_NAME_FORBIDDEN: &[char] = &[
    '/', '\\', '.', ' ', '"', '$', '*', '<', '>', ':', '|', '?', '\0',
];

/// `value` as messages quote it: escaped, in double quotes, and cut after [`SHOWN_CHARS`]
/// characters with `…`.
///
/// ```text
/// "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr…"
/// ```
pub fn shown(value: &str) -> String {
    match value.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("\"{}…\"", escape(&value[..cut])),
        None => format!("\"{}\"", escape(value)),
    }
}

/// [`MAX_TTL`] as the help texts, the docs and the messages say it: `36500d (100 years of
/// 365 days)`. (`100y` is longer: humantime's years have 365.25 days.)
pub fn max_ttl_text() -> String {
    let days = MAX_TTL.as_secs() / 86_400;
    format!("{days}d ({} years of 365 days)", days / 365)
}

/// Parses a duration as typed on the command line (`30s`, `10m`, `1h30m`, `250ms`):
/// humantime's units, no sign, with a message of its own for a negative value (which clap
/// would otherwise take for an option).
///
/// # Errors
///
/// What is wrong with `text`, for clap's "invalid value" message.
pub fn duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("a duration is needed, such as 30s, 10m or 1h30m".to_owned());
    }
    if let Some(rest) = trimmed.strip_prefix('-') {
        return Err(if rest.starts_with(|c: char| c.is_ascii_digit()) {
            "a duration cannot be negative: give one such as 30s, 10m or 1h30m".to_owned()
        } else {
            format!(
                "{} is not a duration (a value is missing before it?): give one such as 30s, \
                 10m or 1h30m",
                shown(trimmed)
            )
        });
    }
    humantime::parse_duration(trimmed)
        .map_err(|error| format!("{error}: give a duration such as 30s, 10m or 1h30m"))
}

/// Checks a resource name, an election's name or a lock id: not empty, at most
/// [`MAX_ID_LEN`] bytes (the library's `check_id`).
///
/// # Errors
///
/// The message, naming `flag`.
pub fn id(flag: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{flag} must not be empty"));
    }
    if value.len() > MAX_ID_LEN {
        return Err(format!(
            "{flag} {} is {} bytes long; the limit is {MAX_ID_LEN} bytes",
            shown(value),
            value.len()
        ));
    }
    Ok(())
}

/// Checks an owner, a host or an election's value: at most [`MAX_LABEL_LEN`] bytes (the
/// library's `check_label`).
///
/// # Errors
///
/// The message, naming `flag`.
pub fn label(flag: &str, value: &str) -> Result<(), String> {
    if value.len() > MAX_LABEL_LEN {
        return Err(format!(
            "{flag} {} is {} bytes long; the limit is {MAX_LABEL_LEN} bytes",
            shown(value),
            value.len()
        ));
    }
    Ok(())
}

/// Checks a lease's TTL: from [`MIN_LEASE_TTL`] to [`MAX_TTL`].
///
/// # Errors
///
/// The message, naming `flag`.
pub fn lease_ttl(flag: &str, ttl: Duration) -> Result<(), String> {
    if ttl.is_zero() {
        return Err(format!(
            "{flag} must be longer than zero (at least {})",
            humantime::format_duration(MIN_LEASE_TTL)
        ));
    }
    if ttl < MIN_LEASE_TTL {
        return Err(format!(
            "{flag} {} is too short: a lease needs at least {}",
            humantime::format_duration(ttl),
            humantime::format_duration(MIN_LEASE_TTL)
        ));
    }
    if ttl > MAX_TTL {
        return Err(format!(
            "{flag} {} is longer than the limit, {}",
            humantime::format_duration(ttl),
            max_ttl_text()
        ));
    }
    Ok(())
}

/// Checks a lock-delay: at most [`MAX_TTL`].
///
/// # Errors
///
/// The message.
pub fn lock_delay(delay: Duration) -> Result<(), String> {
    at_most_max("--lock-delay", delay)
}

/// Checks a duration `flag` that the library bounds as it bounds a TTL (a lock-delay, a
/// minimum hold).
///
/// # Errors
///
/// The message.
pub fn at_most_max(flag: &str, value: Duration) -> Result<(), String> {
    if value > MAX_TTL {
        return Err(format!(
            "{flag} {} is longer than the limit, {}",
            humantime::format_duration(value),
            max_ttl_text()
        ));
    }
    Ok(())
}

/// The library's own check of the lease's details, after the ones above: whatever it
/// refuses that they missed is refused here too, before connecting.
///
/// # Errors
///
/// The library's message.
pub fn details(owner: Option<&str>, ttl: Duration, delay: Option<Duration>) -> Result<(), String> {
    let mut details = LockDetails::default().ttl(ttl);
    if let Some(owner) = owner {
        details = details.owner(owner);
    }
    if let Some(delay) = delay {
        details = details.lock_delay(delay);
    }
    details.validate().map_err(|error| error.to_string())
}

/// Checks `indexes --retention`: from one second to [`MAX_RETENTION`] (as the library's
/// `create_indexes` does).
///
/// # Errors
///
/// The message.
pub fn retention(retention: Duration) -> Result<(), String> {
    if retention < Duration::from_secs(1) || retention > MAX_RETENTION {
        return Err(format!(
            "--retention must be between 1s and {}s (about 68 years)",
            MAX_RETENTION.as_secs()
        ));
    }
    Ok(())
}

/// Checks `--db` as the server would: not empty, at most [`MAX_DB_NAME`] bytes, none of
/// `/\. "$*<>:|?` nor NUL.
///
/// # Errors
///
/// The message.
pub fn database(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("--db must not be empty".to_owned());
    }
    if let Some(c) = name.chars().find(|c| DB_NAME_FORBIDDEN.contains(c)) {
        return Err(format!(
            "--db {} is not a database name: it must not contain {}",
            shown(name),
            escape(&format!("{c:?}"))
        ));
    }
    if name.len() > MAX_DB_NAME {
        return Err(format!(
            "--db {} is {} bytes long; the limit is {MAX_DB_NAME} bytes",
            shown(name),
            name.len()
        ));
    }
    Ok(())
}

/// Checks `--collection` (in `db`) as the server would: not empty, no `$` or NUL, not in
/// the reserved `system.` namespace, and `db.collection` at most [`MAX_NAMESPACE`] bytes.
///
/// # Errors
///
/// The message.
pub fn collection(db: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("--collection must not be empty".to_owned());
    }
    if let Some(c) = name.chars().find(|c| matches!(c, '$' | '\0')) {
        return Err(format!(
            "--collection {} is not a collection name: it must not contain {}",
            shown(name),
            escape(&format!("{c:?}"))
        ));
    }
    if name.starts_with("system.") {
        return Err(format!(
            "--collection {}: names starting with \"system.\" are the server's own",
            shown(name)
        ));
    }
    let namespace = db.len() + 1 + name.len();
    if namespace > MAX_NAMESPACE {
        return Err(format!(
            "--collection {} makes the namespace {namespace} bytes long (with --db and a \
             dot); the limit is {MAX_NAMESPACE} bytes",
            shown(name)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_value_is_shown_cut() {
        let long = "é".repeat(100);
        let quoted = shown(&long);
        assert_eq!(quoted.chars().count(), SHOWN_CHARS + 3, "{quoted}");
        assert!(quoted.ends_with("…\""));
        assert_eq!(shown("short\n"), "\"short\\n\"");
    }

    #[test]
    fn durations_are_positive_and_say_so() {
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(duration("-5s").unwrap_err().contains("cannot be negative"));
        assert!(
            duration("--no-wait")
                .unwrap_err()
                .contains("not a duration")
        );
        assert!(duration("abc").unwrap_err().contains("such as 30s"));
        assert!(duration("").is_err());
    }

    #[test]
    fn the_ttl_limit_is_said_in_days() {
        assert_eq!(max_ttl_text(), "36500d (100 years of 365 days)");
        assert_eq!(
            duration("36500d").map(|d| lease_ttl("--ttl", d)),
            Ok(Ok(()))
        );
        assert!(lease_ttl("--ttl", duration("100y").unwrap()).is_err());
        assert!(lease_ttl("--ttl", Duration::from_millis(49)).is_err());
        assert!(lease_ttl("--ttl", Duration::ZERO).is_err());
    }

    #[test]
    fn names_the_server_refuses_are_refused() {
        assert!(database("mongolock").is_ok());
        assert!(database("a.b").unwrap_err().contains("'.'"));
        assert!(database(&"d".repeat(64)).is_err());
        assert!(collection("db", "locks.v2").is_ok());
        assert!(collection("db", "a$b").is_err());
        assert!(collection("db", "system.js").is_err());
        assert!(collection("db", &"c".repeat(260)).is_err());
    }

    #[test]
    fn ids_and_labels_follow_the_librarys_limits() {
        assert!(id("--resource", "").is_err());
        let long = "x".repeat(20 * 1024);
        let message = id("--resource", &long).unwrap_err();
        assert!(message.len() < 200, "{message}");
        assert!(message.contains("20480 bytes long; the limit is 512 bytes"));
        assert!(label("--owner", &"o".repeat(MAX_LABEL_LEN)).is_ok());
        assert!(label("--owner", &"o".repeat(MAX_LABEL_LEN + 1)).is_err());
    }
}
