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

/// Validates `readConcern.level`.
pub fn check_read_concern(cmd: &Document) -> Result<()> {
    let Some(rc) = opt_document(cmd, "command", "readConcern")? else {
        return Ok(());
    };
    for (field, value) in rc {
        match (field.as_str(), value) {
            ("level", Bson::String(level))
                if ["local", "majority", "linearizable", "available"].contains(&level.as_str()) => {
            }
            ("level", Bson::String(level)) if level == "snapshot" => {
                return Err(CommandError::new(
                    72,
                    "readConcern level 'snapshot' is not supported by this emulator",
                ));
            }
            ("level", other) => {
                return Err(CommandError::bad_value(format!(
                    "Enumeration value '{other}' for field 'readConcern.level' is not a valid value."
                )));
            }
            ("afterClusterTime", Bson::Timestamp(_)) | ("afterOpTime", _) | ("provenance", _) => {}
            (other, _) => {
                return Err(CommandError::new(
                    codes::UNKNOWN_BSON_FIELD,
                    format!("BSON field 'readConcern.{other}' is an unknown field."),
                ));
            }
        }
    }
    Ok(())
}
