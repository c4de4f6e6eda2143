//! The error a command answers with: MongoDB's `{ok: 0, code, codeName, errmsg}` shape.

use bson::{Bson, Document, doc};

/// Result of anything that can fail the way a MongoDB command fails.
pub type Result<T> = std::result::Result<T, CommandError>;

/// A command failure, answered to the client as `{ok: 0, errmsg, code, codeName, ...extra}`.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandError {
    /// mongod's numeric error code.
    pub code: i32,
    /// Human-readable message, in mongod's wording where we know it.
    pub errmsg: String,
    /// Extra top-level reply fields (for example `keyPattern` and `keyValue` on E11000).
    pub extra: Document,
    /// Exact error labels, when something (a fail point) dictates them; `None` lets the
    /// server's own labelling rules decide.
    pub labels: Option<Vec<String>>,
}

/// mongod error codes used by the emulator (`src/mongo/base/error_codes.yml`).
pub mod codes {
    #![allow(missing_docs)]
    pub const INTERNAL_ERROR: i32 = 1;
    pub const BAD_VALUE: i32 = 2;
    pub const FAILED_TO_PARSE: i32 = 9;
    pub const TYPE_MISMATCH: i32 = 14;
    pub const ILLEGAL_OPERATION: i32 = 20;
    pub const INDEX_NOT_FOUND: i32 = 27;
    pub const PATH_NOT_VIABLE: i32 = 28;
    pub const CONFLICTING_UPDATE_OPERATORS: i32 = 40;
    pub const CURSOR_NOT_FOUND: i32 = 43;
    pub const NAMESPACE_NOT_FOUND: i32 = 26;
    pub const NAMESPACE_EXISTS: i32 = 48;
    pub const DOLLAR_PREFIXED_FIELD_NAME: i32 = 52;
    pub const INVALID_ID_FIELD: i32 = 53;
    pub const NOT_SINGLE_VALUE_FIELD: i32 = 54;
    pub const EMPTY_FIELD_NAME: i32 = 56;
    pub const COMMAND_NOT_FOUND: i32 = 59;
    pub const IMMUTABLE_FIELD: i32 = 66;
    pub const CANNOT_CREATE_INDEX: i32 = 67;
    pub const INVALID_OPTIONS: i32 = 72;
    pub const INVALID_NAMESPACE: i32 = 73;
    pub const INDEX_OPTIONS_CONFLICT: i32 = 85;
    pub const INDEX_KEY_SPECS_CONFLICT: i32 = 86;
    pub const QUERY_FEATURE_NOT_ALLOWED: i32 = 224;
    pub const TRANSACTION_TOO_OLD: i32 = 225;
    pub const FAIL_POINT_SET_FAILED: i32 = 266;
    pub const INVALID_PIPELINE_OPERATOR: i32 = 168;
    pub const LOCATION_40573: i32 = 40573;
    pub const DUPLICATE_KEY: i32 = 11000;
    pub const UNKNOWN_BSON_FIELD: i32 = 40415;
    pub const INVALID_LENGTH: i32 = 16;
    pub const BSON_OBJECT_TOO_LARGE: i32 = 10334;
    pub const MISSING_REQUIRED_FIELD: i32 = 40414;
    pub const MAX_TIME_MS_EXPIRED: i32 = 50;
}

/// The `codeName` mongod reports for a code; unknown codes get `Location<code>` as in mongod.
pub fn code_name(code: i32) -> String {
    let known = match code {
        1 => "InternalError",
        2 => "BadValue",
        4 => "NoSuchKey",
        6 => "HostUnreachable",
        7 => "HostNotFound",
        8 => "UnknownError",
        9 => "FailedToParse",
        11 => "UserNotFound",
        13 => "Unauthorized",
        14 => "TypeMismatch",
        15 => "Overflow",
        16 => "InvalidLength",
        20 => "IllegalOperation",
        22 => "InvalidBSON",
        24 => "LockTimeout",
        26 => "NamespaceNotFound",
        27 => "IndexNotFound",
        28 => "PathNotViable",
        34 => "CannotBackfillArray",
        40 => "ConflictingUpdateOperators",
        43 => "CursorNotFound",
        48 => "NamespaceExists",
        50 => "MaxTimeMSExpired",
        51 => "DollarPrefixedFieldName",
        52 => "DollarPrefixedFieldName",
        53 => "InvalidIdField",
        54 => "NotSingleValueField",
        55 => "InvalidDBRef",
        56 => "EmptyFieldName",
        57 => "DottedFieldName",
        59 => "CommandNotFound",
        64 => "WriteConcernFailed",
        66 => "ImmutableField",
        67 => "CannotCreateIndex",
        68 => "IndexAlreadyExists",
        72 => "InvalidOptions",
        73 => "InvalidNamespace",
        79 => "UnknownReplWriteConcern",
        85 => "IndexOptionsConflict",
        86 => "IndexKeySpecsConflict",
        89 => "NetworkTimeout",
        91 => "ShutdownInProgress",
        96 => "OperationFailed",
        100 => "UnsatisfiableWriteConcern",
        111 => "NotExactValueField",
        112 => "WriteConflict",
        115 => "CommandNotSupported",
        121 => "DocumentValidationFailure",
        134 => "ReadConcernMajorityNotAvailableYet",
        136 => "CappedPositionLost",
        168 => "InvalidPipelineOperator",
        241 => "ConversionFailure",
        189 => "PrimarySteppedDown",
        224 => "QueryFeatureNotAllowed",
        225 => "TransactionTooOld",
        251 => "NoSuchTransaction",
        262 => "ExceededTimeLimit",
        263 => "OperationNotSupportedInTransaction",
        266 => "FailPointSetFailed",
        280 => "ChangeStreamFatalError",
        286 => "ChangeStreamHistoryLost",
        291 => "NoQueryExecutionPlans",
        352 => "UnsupportedOpQueryCommand",
        9001 => "SocketException",
        10107 => "NotWritablePrimary",
        10334 => "BSONObjectTooLarge",
        10058 => "LegacyNotPrimary",
        11000 => "DuplicateKey",
        11600 => "InterruptedAtShutdown",
        11601 => "Interrupted",
        11602 => "InterruptedDueToReplStateChange",
        13435 => "NotPrimaryNoSecondaryOk",
        13436 => "NotPrimaryOrSecondary",
        40415 => "Location40415",
        _ => return format!("Location{code}"),
    };
    known.to_string()
}

impl CommandError {
    /// An error with `code` and message; the code name follows from the code.
    pub fn new(code: i32, errmsg: impl Into<String>) -> Self {
        Self {
            code,
            errmsg: errmsg.into(),
            extra: Document::new(),
            labels: None,
        }
    }

    /// Code 2, `BadValue`.
    pub fn bad_value(errmsg: impl Into<String>) -> Self {
        Self::new(codes::BAD_VALUE, errmsg)
    }

    /// Code 9, `FailedToParse`.
    pub fn failed_to_parse(errmsg: impl Into<String>) -> Self {
        Self::new(codes::FAILED_TO_PARSE, errmsg)
    }

    /// Code 14, `TypeMismatch`.
    pub fn type_mismatch(errmsg: impl Into<String>) -> Self {
        Self::new(codes::TYPE_MISMATCH, errmsg)
    }

    /// Code 1, `InternalError`: a bug in the emulator, never a client mistake.
    pub fn internal(errmsg: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, errmsg)
    }

    /// Adds an extra top-level reply field.
    pub fn with_extra(mut self, key: &str, value: impl Into<Bson>) -> Self {
        self.extra.insert(key, value.into());
        self
    }

    /// mongod's `codeName` for this error.
    pub fn code_name(&self) -> String {
        code_name(self.code)
    }

    /// The reply body fields (`ok: 0`, `errmsg`, `code`, `codeName`, extras).
    pub fn to_reply(&self) -> Document {
        let mut reply = doc! {
            "ok": 0.0,
            "errmsg": self.errmsg.clone(),
            "code": self.code,
            "codeName": self.code_name(),
        };
        for (k, v) in &self.extra {
            reply.insert(k.clone(), v.clone());
        }
        reply
    }
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code_name(), self.code, self.errmsg)
    }
}

impl std::error::Error for CommandError {}

/// A value as mongod prints it in error messages (`"text"`, `5`, `5.0`, `ObjectId('...')`).
pub fn shell_repr(value: &Bson) -> String {
    match value {
        Bson::String(s) => format!("{s:?}"),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Double(d) if d.fract() == 0.0 && d.is_finite() => format!("{d:.1}"),
        Bson::Double(d) => d.to_string(),
        Bson::ObjectId(oid) => format!("ObjectId('{oid}')"),
        Bson::Boolean(b) => b.to_string(),
        Bson::Null => "null".into(),
        Bson::Undefined => "undefined".into(),
        Bson::DateTime(d) => format!("new Date({})", d.timestamp_millis()),
        Bson::Document(d) => {
            let fields: Vec<String> = d
                .iter()
                .map(|(k, v)| format!("{k}: {}", shell_repr(v)))
                .collect();
            if fields.is_empty() {
                "{}".into()
            } else {
                format!("{{ {} }}", fields.join(", "))
            }
        }
        Bson::Array(items) => {
            let fields: Vec<String> = items.iter().map(shell_repr).collect();
            format!("[ {} ]", fields.join(", "))
        }
        other => other.to_string(),
    }
}
