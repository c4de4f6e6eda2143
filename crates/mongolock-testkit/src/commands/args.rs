//! Reading command arguments the way mongod's IDL parser does: unknown fields and wrong
//! types are errors with mongod's codes and messages.

use bson::{Bson, Document};

use crate::engine::compare::{as_f64, type_alias};
use crate::engine::error::{CommandError, Result, codes};

/// Fields any command may carry (sessions, concerns, routing, API version).
pub const GENERIC_FIELDS: &[&str] = &[
    "$db",
    "lsid",
    "txnNumber",
    "$clusterTime",
    "$readPreference",
    "readConcern",
    "writeConcern",
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
    "comment",
    "maxTimeMS",
    "autocommit",
    "startTransaction",
    "$client",
];

/// Rejects fields that are neither `allowed` for `command` nor generic (code 40415).
pub fn check_fields(cmd: &Document, command: &str, allowed: &[&str]) -> Result<()> {
    for (index, field) in cmd.keys().enumerate() {
        if index == 0
            || allowed.contains(&field.as_str())
            || GENERIC_FIELDS.contains(&field.as_str())
        {
            continue;
        }
        return Err(CommandError::new(
            codes::UNKNOWN_BSON_FIELD,
            format!("BSON field '{command}.{field}' is an unknown field."),
        ));
    }
    Ok(())
}

pub(super) fn wrong_type(command: &str, field: &str, value: &Bson, expected: &str) -> CommandError {
    CommandError::type_mismatch(format!(
        "BSON field '{command}.{field}' is the wrong type '{}', expected type{expected}",
        type_alias(value)
    ))
}

/// The collection named by the command's first field.
pub fn collection_name(cmd: &Document, command: &str) -> Result<String> {
    match cmd.iter().next() {
        Some((_, Bson::String(name))) if !name.is_empty() => Ok(name.clone()),
        Some((_, Bson::String(_))) => Err(CommandError::new(
            codes::INVALID_NAMESPACE,
            format!("Invalid namespace specified for {command}: empty collection name"),
        )),
        Some((_, other)) => Err(CommandError::new(
            codes::INVALID_NAMESPACE,
            format!("collection name has invalid type {}", type_alias(other)),
        )),
        None => Err(CommandError::failed_to_parse("empty command")),
    }
}

/// An optional document argument.
pub fn opt_document<'a>(
    cmd: &'a Document,
    command: &str,
    field: &str,
) -> Result<Option<&'a Document>> {
    match cmd.get(field) {
        None => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d)),
        Some(other) => Err(wrong_type(command, field, other, " 'object'")),
    }
}

/// An optional array argument.
pub fn opt_array<'a>(
    cmd: &'a Document,
    command: &str,
    field: &str,
) -> Result<Option<&'a Vec<Bson>>> {
    match cmd.get(field) {
        None => Ok(None),
        Some(Bson::Array(a)) => Ok(Some(a)),
        Some(other) => Err(wrong_type(command, field, other, " 'array'")),
    }
}

/// A required array argument.
pub fn array<'a>(cmd: &'a Document, command: &str, field: &str) -> Result<&'a Vec<Bson>> {
    opt_array(cmd, command, field)?.ok_or_else(|| missing(command, field))
}

/// The error for a missing required field (code 40414).
pub fn missing(command: &str, field: &str) -> CommandError {
    CommandError::new(
        40414,
        format!("BSON field '{command}.{field}' is missing but a required field"),
    )
}

/// An optional boolean argument (numbers are accepted as mongod does).
pub fn opt_bool(cmd: &Document, command: &str, field: &str) -> Result<Option<bool>> {
    match cmd.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(v) => match as_f64(v) {
            Some(n) => Ok(Some(n != 0.0)),
            None => Err(wrong_type(command, field, v, " 'bool'")),
        },
    }
}

/// An optional integer argument; doubles must be integral.
pub fn opt_i64(cmd: &Document, command: &str, field: &str) -> Result<Option<i64>> {
    match cmd.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int32(n)) => Ok(Some(i64::from(*n))),
        Some(Bson::Int64(n)) => Ok(Some(*n)),
        Some(Bson::Double(d)) if d.fract() == 0.0 && d.abs() < 9.2e18 => Ok(Some(*d as i64)),
        Some(Bson::Double(d)) => Err(CommandError::new(
            codes::FAILED_TO_PARSE,
            format!("Expected field {field} to be an integer, got {d}"),
        )),
        Some(other) => Err(wrong_type(
            command,
            field,
            other,
            "s '[long, int, decimal, double]'",
        )),
    }
}

/// An optional non-negative integer argument.
pub fn opt_non_negative(cmd: &Document, command: &str, field: &str) -> Result<Option<i64>> {
    match opt_i64(cmd, command, field)? {
        Some(n) if n < 0 => Err(CommandError::bad_value(format!(
            "BSON field '{field}' value must be >= 0, actual value '{n}'"
        ))),
        other => Ok(other),
    }
}

/// A command's `readConcern`, as mongod parses it (`ReadConcernArgs::parse`,
/// `src/mongo/db/repl/read_concern_args.cpp`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadConcern {
    /// `level`, when given (none reads as `local`).
    pub level: Option<String>,
    /// `afterClusterTime`: the read waits until the member has reached this cluster time.
    pub after_cluster_time: Option<bson::Timestamp>,
    /// `afterOpTime` (`{ts, t}`): the read waits until the member has reached this optime.
    pub after_op_time: Option<(bson::Timestamp, i64)>,
}

impl ReadConcern {
    /// Whether the level is `majority`.
    pub fn is_majority(&self) -> bool {
        self.level.as_deref() == Some("majority")
    }
}

/// Parses `readConcern`, with mongod's errors (`ReadConcernArgs::parse`,
/// `src/mongo/db/repl/read_concern_args.cpp`; the type errors are `bsonExtractTypedField`'s
/// and `bsonExtractIntegerField`'s, `src/mongo/bson/util/bson_extract.cpp`, and an optime is
/// read by `bsonExtractOpTimeField`, `src/mongo/db/repl/bson_extract_optime.cpp`):
/// `afterClusterTime` with `afterOpTime`, with `atClusterTime`, or with a level other than
/// `local` or `majority`, and a zero `afterClusterTime`, are `InvalidOptions` (72). Level
/// `snapshot` (and so `atClusterTime`) is refused (72): not emulated.
///
/// # Errors
/// As above; an unknown field is 40415.
pub fn read_concern(cmd: &Document) -> Result<ReadConcern> {
    let Some(rc) = opt_document(cmd, "command", "readConcern")? else {
        return Ok(ReadConcern::default());
    };
    let mut parsed = ReadConcern::default();
    let mut at_cluster_time = None;
    for (field, value) in rc {
        match (field.as_str(), value) {
            ("level", Bson::String(level))
                if ["local", "majority", "linearizable", "available", "snapshot"]
                    .contains(&level.as_str()) =>
            {
                parsed.level = Some(level.clone());
            }
            ("level", other) => {
                return Err(CommandError::bad_value(format!(
                    "Enumeration value '{other}' for field 'readConcern.level' is not a valid value."
                )));
            }
            ("afterClusterTime", value) => {
                parsed.after_cluster_time = Some(timestamp_field(field, value)?);
            }
            ("atClusterTime", value) => at_cluster_time = Some(timestamp_field(field, value)?),
            ("afterOpTime", value) => parsed.after_op_time = Some(op_time_field(field, value)?),
            ("provenance", _) => {}
            (other, _) => {
                return Err(CommandError::new(
                    codes::UNKNOWN_BSON_FIELD,
                    format!("BSON field 'readConcern.{other}' is an unknown field."),
                ));
            }
        }
    }
    let level = parsed.level.as_deref().unwrap_or("local");
    let invalid = |message: &str| Err(CommandError::new(codes::INVALID_OPTIONS, message));
    if parsed.after_cluster_time.is_some() && parsed.after_op_time.is_some() {
        return invalid("Can not specify both afterClusterTime and afterOpTime");
    }
    if parsed.after_cluster_time.is_some() && at_cluster_time.is_some() {
        return invalid(
            "Specifying a timestamp for readConcern snapshot in a causally consistent session is \
             not allowed. See \
             https://docs.mongodb.com/manual/core/read-isolation-consistency-recency/#causal-consistency",
        );
    }
    // 'available' never waits and 'linearizable' is causally consistent by itself, so
    // neither takes a cluster time to wait for (the comment in `ReadConcernArgs::parse`).
    if parsed.after_cluster_time.is_some() && !["majority", "local", "snapshot"].contains(&level) {
        return invalid(
            "afterClusterTime field can be set only if level is equal to majority, local, or \
             snapshot",
        );
    }
    if parsed.after_op_time.is_some() && level == "snapshot" {
        return invalid("afterOpTime field cannot be set if level is equal to snapshot");
    }
    if at_cluster_time.is_some() && level != "snapshot" {
        return invalid("atClusterTime field can be set only if level is equal to snapshot");
    }
    // A zero-second `afterClusterTime` is fine, the uninitialized `Timestamp(0, 0)` is not.
    if parsed.after_cluster_time
        == Some(bson::Timestamp {
            time: 0,
            increment: 0,
        })
    {
        return invalid("afterClusterTime cannot be a null timestamp");
    }
    if level == "snapshot" {
        return invalid("readConcern level 'snapshot' is not supported by this emulator");
    }
    Ok(parsed)
}

/// Validates `readConcern` (see [`read_concern`]).
///
/// # Errors
/// See [`read_concern`].
pub fn check_read_concern(cmd: &Document) -> Result<()> {
    read_concern(cmd).map(|_| ())
}

/// A timestamp field of `readConcern` (`bsonExtractTimestampField`).
fn timestamp_field(field: &str, value: &Bson) -> Result<bson::Timestamp> {
    match value {
        Bson::Timestamp(ts) => Ok(*ts),
        other => Err(CommandError::type_mismatch(format!(
            "\"{field}\" had the wrong type. Expected timestamp, found {}",
            type_alias(other)
        ))),
    }
}

/// `afterOpTime`: `{ts: <timestamp>, t: <integer>}` (`bsonExtractOpTimeField`).
fn op_time_field(field: &str, value: &Bson) -> Result<(bson::Timestamp, i64)> {
    let Bson::Document(op_time) = value else {
        return Err(CommandError::type_mismatch(format!(
            "\"{field}\" had the wrong type. Expected object, found {}",
            type_alias(value)
        )));
    };
    let missing = |name: &str| CommandError::new(4, format!("Missing expected field \"{name}\""));
    let ts = timestamp_field("ts", op_time.get("ts").ok_or_else(|| missing("ts"))?)?;
    let term = op_time.get("t").ok_or_else(|| missing("t"))?;
    let Some(number) = as_f64(term) else {
        return Err(CommandError::type_mismatch(format!(
            "Expected field \"t\" to have numeric type, but found {}",
            type_alias(term)
        )));
    };
    if number.fract() != 0.0 || !(-9.2e18..9.2e18).contains(&number) {
        return Err(CommandError::bad_value(format!(
            "Expected field \"t\" to have a value exactly representable as a 64-bit integer, \
             but found t: {term}"
        )));
    }
    let term = match term {
        Bson::Int64(n) => *n,
        _ => number as i64,
    };
    Ok((ts, term))
}
