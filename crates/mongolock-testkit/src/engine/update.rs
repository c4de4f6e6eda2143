//! Updates: operator documents (`$set`, `$inc`, `$push`, positional `$`, `$[]`, `$[id]`, ...),
//! replacements and aggregation-pipeline updates, plus upsert seeding.
//!
//! Operator updates follow mongod 5.0+: every path is checked for conflicts at parse time,
//! and the operations are applied in path order (string components lexicographically,
//! numeric components numerically), so new fields are appended in that order.

// `CommandError` (the engine-wide error type) is large by design; boxing it is the lead's call.

mod decimal;
mod format;

use std::cmp::Ordering;

use bson::{Bson, Document, Timestamp, doc};

use super::compare::{compare, is_number, type_alias, values_equal};
use super::error::codes;
use super::matcher::{MatchDetails, Matcher, ValueMatcher};
use super::pipeline::Pipeline;
use super::{CommandError, EvalContext, Result};

/// mongod refuses to pad an array with more than this many nulls (`kMaxPaddingAllowed`).
pub const MAX_ARRAY_PADDING: usize = 1_500_000;

/// mongod's nesting limit for stored documents (`BSONDepth::getMaxDepthForUserStorage()`).
pub const MAX_NESTING_DEPTH: usize = 180;

fn too_deep() -> CommandError {
    err(
        15,
        format!("Document exceeds maximum nesting depth of {MAX_NESTING_DEPTH}"),
    )
}

/// A parsed update (`u` of an update statement, `update` of findAndModify).
#[derive(Debug, Clone)]
pub enum Update {
    /// An operator update (`{$set: ..., $inc: ...}`).
    Operators(OperatorUpdate),
    /// A replacement document (no `$`-prefixed top-level field).
    Replacement(Document),
    /// An aggregation-pipeline update (`[{$set: ...}, ...]`).
    Pipeline(Pipeline),
}

/// The kind of update that changed a document, which decides how the oplog records it and
/// so which change event a stream sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateStyle {
    /// A replacement document: a `replace` event.
    Replacement,
    /// Update operators: an `update` event.
    Operators,
    /// A pipeline: an `update` event when the server logs it as a delta, `replace` otherwise
    /// (see [`super::delta`]).
    Pipeline,
}

/// A parsed operator update: the operations in application order plus the array filters.
#[derive(Debug, Clone)]
pub struct OperatorUpdate {
    ops: Vec<Op>,
    filters: Vec<(String, Matcher)>,
}

/// Everything an update needs besides the document.
#[derive(Debug, Clone)]
pub struct UpdateContext<'a> {
    /// `$$NOW`, `$currentDate`, let variables.
    pub eval: &'a EvalContext,
    /// True when the update runs on an upsert's seed document (`$setOnInsert` applies).
    pub is_insert: bool,
    /// What the query matched, for the positional `$` operator.
    pub matched: Option<&'a MatchDetails>,
}

/// One component of an update path.
#[derive(Debug, Clone, PartialEq)]
enum Comp {
    Field(String),
    /// `$`
    Positional,
    /// `$[]`
    All,
    /// `$[id]`
    Filter(String),
}

impl Comp {
    fn text(&self) -> String {
        match self {
            Comp::Field(f) => f.clone(),
            Comp::Positional => "$".to_string(),
            Comp::All => "$[]".to_string(),
            Comp::Filter(id) => format!("$[{id}]"),
        }
    }
}

#[derive(Debug, Clone)]
struct Op {
    operator: &'static str,
    path: Vec<Comp>,
    dotted: String,
    kind: OpKind,
}

#[derive(Debug, Clone)]
enum OpKind {
    Set(Bson),
    SetOnInsert(Bson),
    Unset,
    Inc(Bson),
    Mul(Bson),
    Min(Bson),
    Max(Bson),
    CurrentDate {
        timestamp: bool,
    },
    Rename {
        from: Vec<Comp>,
        from_dotted: String,
    },
    Push(PushSpec),
    AddToSet(Vec<Bson>),
    Pop {
        first: bool,
    },
    Pull(PullCond),
    PullAll(Vec<Bson>),
    Bit(Vec<(BitOp, Bson)>),
}

impl OpKind {
    /// Whether the operation creates the field (and the path to it) when it is missing.
    fn creates(&self) -> bool {
        !matches!(
            self,
            OpKind::Unset | OpKind::Pop { .. } | OpKind::Pull(_) | OpKind::PullAll(_)
        )
    }
}

#[derive(Debug, Clone)]
struct PushSpec {
    each: Vec<Bson>,
    slice: Option<i64>,
    sort: Option<PushSort>,
    position: Option<i64>,
}

#[derive(Debug, Clone)]
enum PushSort {
    Whole(bool),
    Fields(Vec<(String, bool)>),
}

#[derive(Debug, Clone)]
enum PullCond {
    Equal(Bson),
    Matcher(ValueMatcher),
}

#[derive(Debug, Clone, Copy)]
enum BitOp {
    And,
    Or,
    Xor,
}

/// What an operation does to the value at its path.
enum Action {
    Keep,
    /// Store the value; a no-op when it is identical to the current one.
    Set(Bson),
    /// Store the value and count the document as modified even if nothing changed, as
    /// mongod does for `$currentDate` and for `$push` with `$sort`.
    Write(Bson),
    Remove,
}

fn err(code: i32, msg: impl Into<String>) -> CommandError {
    CommandError::new(code, msg)
}

impl Update {
    /// Parses an update; `array_filters` are the statement's `arrayFilters`.
    ///
    /// A document whose first field starts with `$` is an operator update, any other document
    /// a replacement, an array a pipeline.
    pub fn parse(update: &Bson, array_filters: Option<&[Bson]>) -> Result<Update> {
        let filters = array_filters.unwrap_or(&[]);
        match update {
            Bson::Array(stages) => {
                if !filters.is_empty() {
                    return Err(CommandError::failed_to_parse(
                        "arrayFilters may not be specified for pipeline-style updates",
                    ));
                }
                Ok(Update::Pipeline(Pipeline::parse_update(stages)?))
            }
            Bson::Document(d) => match d.keys().next() {
                Some(first) if first.starts_with('$') => {
                    Ok(Update::Operators(OperatorUpdate::parse(d, filters)?))
                }
                _ => Ok(Update::Replacement(d.clone())),
            },
            _ => Err(CommandError::failed_to_parse(
                "Update argument must be either an object or an array",
            )),
        }
    }

    /// Whether this is a replacement document (no operators, not a pipeline).
    pub fn is_replacement(&self) -> bool {
        matches!(self, Update::Replacement(_))
    }

    /// Which kind of update this is, as the oplog (and so a change stream) records it.
    pub fn style(&self) -> UpdateStyle {
        match self {
            Update::Operators(_) => UpdateStyle::Operators,
            Update::Replacement(_) => UpdateStyle::Replacement,
            Update::Pipeline(_) => UpdateStyle::Pipeline,
        }
    }

    /// Applies the update to `doc` in place; returns whether the document changed.
    /// `_id` may not change (code 66). On error `doc` is left untouched.
    pub fn apply(&self, doc: &mut Document, ctx: &UpdateContext<'_>) -> Result<bool> {
        match self {
            Update::Operators(ops) => ops.apply(doc, ctx),
            Update::Replacement(replacement) => {
                validate_replacement(replacement)?;
                replace_keeping_id(doc, replacement)
            }
            Update::Pipeline(pipeline) => {
                let result = pipeline.apply_update(doc, ctx.eval)?;
                // Pipeline results may hold top-level `$` fields (made with `$setField`).
                validate_document_for_storage(&result)?;
                replace_keeping_id(doc, &result)
            }
        }
    }
}

/// Replaces every field but `_id`; the old `_id` stays first, and a different `_id` in the
/// replacement is code 66.
fn replace_keeping_id(doc: &mut Document, replacement: &Document) -> Result<bool> {
    let mut new = Document::new();
    match (doc.get("_id"), replacement.get("_id")) {
        (Some(old), Some(newer)) if !values_equal(old, newer) => {
            return Err(err(
                codes::IMMUTABLE_FIELD,
                format!(
                    "After applying the update, the (immutable) field '_id' was found to have been altered to {}",
                    format::element("_id", newer)
                ),
            ));
        }
        (Some(old), _) => {
            new.insert("_id", old.clone());
        }
        (None, Some(newer)) => {
            new.insert("_id", newer.clone());
        }
        (None, None) => {}
    }
    for (k, v) in replacement {
        if k != "_id" {
            new.insert(k.clone(), v.clone());
        }
    }
    let changed = !docs_identical(doc, &new);
    *doc = new;
    Ok(changed)
}

/// Checks a replacement document (an update's `u` without operators): since 5.0 only a
/// replacement may not hold `$`-prefixed top-level fields (code 52); then the checks every
/// stored document gets.
pub fn validate_replacement(doc: &Document) -> Result<()> {
    if let Some(k) = doc.keys().find(|k| k.starts_with('$')) {
        return Err(err(
            codes::DOLLAR_PREFIXED_FIELD_NAME,
            format!(
                "The dollar ($) prefixed field '{k}' in '{k}' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith."
            ),
        ));
    }
    validate_document_for_storage(doc)
}

/// Checks a document about to be stored by an update: an `_id` that is not an array, regex
/// or undefined (code 53) and holds no `$`-prefixed field names (code 52). Since 5.0,
/// `$`-prefixed top-level fields are allowed (an update pipeline makes them with
/// `$setField`); only a replacement document may not hold them ([`validate_replacement`]).
pub fn validate_document_for_storage(doc: &Document) -> Result<()> {
    if let Some(id) = doc.get("_id") {
        check_id_type(id)?;
    }
    Ok(())
}

fn check_id_type(v: &Bson) -> Result<()> {
    if matches!(
        v,
        Bson::Array(_) | Bson::RegularExpression(_) | Bson::Undefined
    ) {
        return Err(err(
            codes::INVALID_ID_FIELD,
            format!("The '_id' value cannot be of type {}", type_alias(v)),
        ));
    }
    check_id_subfields(v)
}

/// `_id` sub-documents may not hold `$`-prefixed field names (code 52), at any depth.
fn check_id_subfields(v: &Bson) -> Result<()> {
    let mut pending = vec![v];
    while let Some(value) = pending.pop() {
        if let Bson::Document(d) = value {
            for (k, child) in d {
                if k.starts_with('$') {
                    return Err(err(
                        codes::DOLLAR_PREFIXED_FIELD_NAME,
                        format!(
                            "_id fields may not contain '$'-prefixed fields: {k} is not valid for storage."
                        ),
                    ));
                }
                pending.push(child);
            }
        }
    }
    Ok(())
}

/// Checks a document about to be inserted, with the insert path's wording (code 2):
/// "can't use an array for _id", "can't use a regex for _id", "can't use a undefined for
/// _id"; and `$`-prefixed names inside an `_id` document (code 52). Since 5.0, other
/// `$`-prefixed field names (top-level or nested) are allowed in inserted documents.
pub fn validate_document_for_insert(doc: &Document) -> Result<()> {
    for (k, v) in doc {
        if k == "_id" {
            let what = match v {
                Bson::Array(_) => "an array",
                Bson::RegularExpression(_) => "a regex",
                Bson::Undefined => "a undefined",
                _ => {
                    check_id_subfields(v)?;
                    continue;
                }
            };
            return Err(CommandError::bad_value(format!("can't use {what} for _id")));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------

fn parse_path(dotted: &str) -> Result<Vec<Comp>> {
    if dotted.is_empty() {
        return Err(err(
            codes::EMPTY_FIELD_NAME,
            "An empty update path is not valid.",
        ));
    }
    let mut out = Vec::new();
    for part in dotted.split('.') {
        if part.is_empty() {
            return Err(err(
                codes::EMPTY_FIELD_NAME,
                format!(
                    "The update path '{dotted}' contains an empty field name, which is not allowed."
                ),
            ));
        }
        let comp = if part == "$" {
            Comp::Positional
        } else if part == "$[]" {
            Comp::All
        } else if let Some(id) = part.strip_prefix("$[").and_then(|r| r.strip_suffix(']')) {
            Comp::Filter(id.to_string())
        } else if part.starts_with('$') {
            return Err(err(
                codes::DOLLAR_PREFIXED_FIELD_NAME,
                format!(
                    "The dollar ($) prefixed field '{part}' in '{dotted}' is not valid for storage."
                ),
            ));
        } else {
            Comp::Field(part.to_string())
        };
        out.push(comp);
    }
    if out.iter().filter(|c| **c == Comp::Positional).count() > 1 {
        return Err(CommandError::bad_value(format!(
            "Too many positional (i.e. '$') elements found in path '{dotted}'"
        )));
    }
    match out.first() {
        Some(Comp::Positional) => {
            return Err(CommandError::bad_value(format!(
                "Cannot have positional (i.e. '$') element in the first position in path '{dotted}'"
            )));
        }
        Some(Comp::All | Comp::Filter(_)) => {
            return Err(CommandError::bad_value(format!(
                "Cannot have array filter identifier (i.e. '$[<id>]') element in the first position in path '{dotted}'"
            )));
        }
        _ => {}
    }
    Ok(out)
}

fn is_dynamic(path: &[Comp]) -> bool {
    path.iter().any(|c| !matches!(c, Comp::Field(_)))
}

fn number_as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Some(*d as i64),
        _ => None,
    }
}

/// The top-level field names (identifiers) a filter uses, looking inside `$and`, `$or` and
/// `$nor`; other `$` operators (such as `$expr`) name no identifier.
fn filter_identifiers(filter: &Document, out: &mut Vec<String>) {
    for (key, value) in filter {
        match (key.as_str(), value) {
            ("$and" | "$or" | "$nor", Bson::Array(clauses)) => {
                for clause in clauses {
                    if let Bson::Document(c) = clause {
                        filter_identifiers(c, out);
                    }
                }
            }
            (k, _) if k.starts_with('$') => {}
            (k, _) => out.push(k.split('.').next().unwrap_or_default().to_string()),
        }
    }
}

fn parse_array_filters(filters: &[Bson]) -> Result<Vec<(String, Matcher)>> {
    let mut out: Vec<(String, Matcher)> = Vec::new();
    for filter in filters {
        let Bson::Document(f) = filter else {
            return Err(CommandError::type_mismatch(format!(
                "Each array filter must be an object, found {}",
                type_alias(filter)
            )));
        };
        let mut ids = Vec::new();
        filter_identifiers(f, &mut ids);
        let mut id: Option<String> = None;
        for top in ids {
            match &id {
                Some(existing) if *existing != top => {
                    return Err(CommandError::failed_to_parse(format!(
                        "Error parsing array filter :: caused by :: Expected a single top-level field name, found '{existing}' and '{top}'"
                    )));
                }
                Some(_) => {}
                None => id = Some(top),
            }
        }
        let Some(id) = id else {
            return Err(CommandError::failed_to_parse(
                "Cannot use an expression without a top-level field name in arrayFilters",
            ));
        };
        let valid = id.starts_with(|c: char| c.is_ascii_lowercase())
            && id.chars().all(|c| c.is_ascii_alphanumeric());
        if !valid {
            return Err(CommandError::bad_value(format!(
                "Error parsing array filter :: caused by :: The top-level field name must be an alphanumeric string beginning with a lowercase letter, found '{id}'"
            )));
        }
        if out.iter().any(|(existing, _)| *existing == id) {
            return Err(CommandError::failed_to_parse(format!(
                "Found multiple array filters with the same top-level field name {id}"
            )));
        }
        out.push((id, Matcher::parse(f)?));
    }
    Ok(out)
}

const OPERATORS: &[&str] = &[
    "$set",
    "$setOnInsert",
    "$unset",
    "$inc",
    "$mul",
    "$min",
    "$max",
    "$currentDate",
    "$rename",
    "$push",
    "$addToSet",
    "$pop",
    "$pull",
    "$pullAll",
    "$bit",
];

impl OperatorUpdate {
    fn parse(update: &Document, array_filters: &[Bson]) -> Result<OperatorUpdate> {
        let filters = parse_array_filters(array_filters)?;
        let mut ops: Vec<Op> = Vec::new();
        let mut registered: Vec<Vec<String>> = Vec::new();
        for (name, spec) in update {
            let Some(operator) = OPERATORS.iter().copied().find(|o| *o == name) else {
                return Err(CommandError::failed_to_parse(format!(
                    "Unknown modifier: {name}. Expected a valid update modifier or pipeline-style update specified as an array"
                )));
            };
            let Bson::Document(fields) = spec else {
                return Err(CommandError::failed_to_parse(format!(
                    "Modifiers operate on fields but we found type {} instead. For example: {{$mod: {{<field>: ...}}}} not {{{}}}",
                    type_alias(spec),
                    format::element(name, spec)
                )));
            };
            for (field, arg) in fields {
                let path = parse_path(field)?;
                for comp in &path {
                    if let Comp::Filter(id) = comp
                        && !filters.iter().any(|(f, _)| f == id)
                    {
                        return Err(CommandError::bad_value(format!(
                            "No array filter found for identifier '{id}' in path '{field}'"
                        )));
                    }
                }
                let kind = parse_kind(operator, field, &path, arg)?;
                let (path, dotted) = if let OpKind::Rename { from, from_dotted } = &kind {
                    // A rename occupies its source and, where it is applied, its destination.
                    register(&mut registered, from_dotted, from)?;
                    let Bson::String(to) = arg else {
                        return Err(CommandError::internal("$rename target vanished"));
                    };
                    let to_path = parse_path(to)?;
                    register(&mut registered, to, &to_path)?;
                    (to_path, to.clone())
                } else {
                    register(&mut registered, field, &path)?;
                    (path, field.clone())
                };
                ops.push(Op {
                    operator,
                    path,
                    dotted,
                    kind,
                });
            }
        }
        for (id, _) in &filters {
            let token = Comp::Filter(id.clone());
            if !ops.iter().any(|op| op_uses(op, &token)) {
                return Err(CommandError::failed_to_parse(format!(
                    "The array filter for identifier '{id}' was not used in the update {}",
                    format::document(update)
                )));
            }
        }
        ops.sort_by(|a, b| cmp_paths(&a.path, &b.path));
        Ok(OperatorUpdate { ops, filters })
    }
}

fn op_uses(op: &Op, token: &Comp) -> bool {
    op.path.contains(token)
}

/// Records a path for conflict detection (code 40).
fn register(registered: &mut Vec<Vec<String>>, dotted: &str, path: &[Comp]) -> Result<()> {
    let parts: Vec<String> = path.iter().map(Comp::text).collect();
    for existing in registered.iter() {
        let common = existing.len().min(parts.len());
        if existing[..common] == parts[..common] {
            return Err(err(
                codes::CONFLICTING_UPDATE_OPERATORS,
                format!(
                    "Updating the path '{dotted}' would create a conflict at '{}'",
                    parts[..common].join(".")
                ),
            ));
        }
    }
    registered.push(parts);
    Ok(())
}

/// mongod's `cmpPathsAndArrayIndexes` applied component by component.
fn cmp_paths(a: &[Comp], b: &[Comp]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let ord = cmp_component(&x.text(), &y.text());
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.len().cmp(&b.len())
}

fn cmp_component(a: &str, b: &str) -> Ordering {
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if numeric(a) && numeric(b) {
        let (ta, tb) = (a.trim_start_matches('0'), b.trim_start_matches('0'));
        ta.len()
            .cmp(&tb.len())
            .then_with(|| ta.cmp(tb))
            .then_with(|| a.len().cmp(&b.len()))
    } else {
        a.as_bytes().cmp(b.as_bytes())
    }
}

fn parse_kind(operator: &str, field: &str, path: &[Comp], arg: &Bson) -> Result<OpKind> {
    Ok(match operator {
        "$set" => OpKind::Set(arg.clone()),
        "$setOnInsert" => OpKind::SetOnInsert(arg.clone()),
        "$unset" => OpKind::Unset,
        "$inc" | "$mul" => {
            if !is_number(arg) {
                return Err(CommandError::type_mismatch(format!(
                    "Cannot {} with non-numeric argument: {{{}}}",
                    if operator == "$inc" {
                        "increment"
                    } else {
                        "multiply"
                    },
                    format::element(field, arg)
                )));
            }
            if operator == "$inc" {
                OpKind::Inc(arg.clone())
            } else {
                OpKind::Mul(arg.clone())
            }
        }
        "$min" => OpKind::Min(arg.clone()),
        "$max" => OpKind::Max(arg.clone()),
        "$currentDate" => parse_current_date(arg)?,
        "$rename" => {
            let Bson::String(to) = arg else {
                return Err(CommandError::bad_value(format!(
                    "The 'to' field for $rename must be a string: {}",
                    format::element(field, arg)
                )));
            };
            let to_path = parse_path(to)?;
            if is_dynamic(path) {
                return Err(CommandError::bad_value(format!(
                    "The source field for $rename may not be dynamic: {field}"
                )));
            }
            if is_dynamic(&to_path) {
                return Err(CommandError::bad_value(format!(
                    "The destination field for $rename may not be dynamic: {to}"
                )));
            }
            if field == to {
                return Err(CommandError::bad_value(format!(
                    "The source and target field for $rename must differ: {}",
                    format::element(field, arg)
                )));
            }
            let common = path.len().min(to_path.len());
            if path[..common] == to_path[..common] {
                return Err(CommandError::bad_value(format!(
                    "The source and target field for $rename must not be on the same path: {}",
                    format::element(field, arg)
                )));
            }
            OpKind::Rename {
                from: path.to_vec(),
                from_dotted: field.to_string(),
            }
        }
        "$push" => OpKind::Push(parse_push(arg)?),
        "$addToSet" => OpKind::AddToSet(parse_add_to_set(arg)?),
        "$pop" => {
            // mongod reads the argument with `parseIntegerElementToLong`.
            if !is_number(arg) {
                return Err(CommandError::failed_to_parse(format!(
                    "Expected a number in: {}",
                    format::element(field, arg)
                )));
            }
            let Some(n) = number_as_i64(arg).or_else(|| {
                super::compare::as_f64(arg)
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                    .map(|f| f as i64)
            }) else {
                return Err(CommandError::failed_to_parse(format!(
                    "Expected an integer: {}",
                    format::element(field, arg)
                )));
            };
            if n != 1 && n != -1 {
                return Err(CommandError::failed_to_parse(format!(
                    "$pop expects 1 or -1, found: {n}"
                )));
            }
            OpKind::Pop { first: n < 0 }
        }
        "$pull" => {
            let needs_matcher = matches!(arg, Bson::Document(_) | Bson::RegularExpression(_));
            if needs_matcher {
                OpKind::Pull(PullCond::Matcher(ValueMatcher::parse(arg)?))
            } else {
                OpKind::Pull(PullCond::Equal(arg.clone()))
            }
        }
        "$pullAll" => {
            let Bson::Array(values) = arg else {
                return Err(CommandError::bad_value(format!(
                    "$pullAll requires an array argument but was given a {}",
                    type_alias(arg)
                )));
            };
            OpKind::PullAll(values.clone())
        }
        "$bit" => OpKind::Bit(parse_bit(arg)?),
        _ => {
            return Err(CommandError::internal(format!(
                "unhandled update operator {operator}"
            )));
        }
    })
}

fn parse_current_date(arg: &Bson) -> Result<OpKind> {
    match arg {
        Bson::Boolean(_) => Ok(OpKind::CurrentDate { timestamp: false }),
        Bson::Document(d) => {
            let bad_type = || {
                CommandError::bad_value(
                    "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}",
                )
            };
            let mut timestamp = None;
            for (k, v) in d {
                if k != "$type" {
                    return Err(CommandError::bad_value(format!(
                        "Unrecognized $currentDate option: {k}"
                    )));
                }
                timestamp = match v {
                    Bson::String(s) if s == "date" => Some(false),
                    Bson::String(s) if s == "timestamp" => Some(true),
                    _ => return Err(bad_type()),
                };
            }
            match timestamp {
                Some(timestamp) => Ok(OpKind::CurrentDate { timestamp }),
                None => Err(bad_type()),
            }
        }
        other => Err(CommandError::bad_value(format!(
            "{} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({{$type: 'timestamp/date'}}).",
            type_alias(other)
        ))),
    }
}

fn parse_push(arg: &Bson) -> Result<PushSpec> {
    let plain = PushSpec {
        each: vec![arg.clone()],
        slice: None,
        sort: None,
        position: None,
    };
    let Bson::Document(d) = arg else {
        return Ok(plain);
    };
    if !d.contains_key("$each") {
        return Ok(plain);
    }
    let mut spec = PushSpec {
        each: Vec::new(),
        slice: None,
        sort: None,
        position: None,
    };
    for (k, v) in d {
        match k.as_str() {
            "$each" => {
                let Bson::Array(each) = v else {
                    return Err(CommandError::bad_value(format!(
                        "The argument to $each in $push must be an array but it was of type: {}",
                        type_alias(v)
                    )));
                };
                spec.each = each.clone();
            }
            "$slice" => {
                let Some(n) = number_as_i64(v) else {
                    return Err(CommandError::bad_value(format!(
                        "The value for $slice must be an integer value but was given type: {}",
                        type_alias(v)
                    )));
                };
                spec.slice = Some(n);
            }
            "$position" => {
                let Some(n) = number_as_i64(v) else {
                    return Err(CommandError::bad_value(format!(
                        "The value for $position must be an integer value, not of type: {}",
                        type_alias(v)
                    )));
                };
                spec.position = Some(n);
            }
            "$sort" => spec.sort = Some(parse_push_sort(v)?),
            other => {
                return Err(CommandError::bad_value(format!(
                    "Unrecognized clause in $push: {other}"
                )));
            }
        }
    }
    Ok(spec)
}

fn parse_push_sort(v: &Bson) -> Result<PushSort> {
    let invalid = || {
        CommandError::bad_value(
            "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields",
        )
    };
    let direction = |v: &Bson| match number_as_i64(v) {
        Some(1) if is_number(v) => Some(true),
        Some(-1) if is_number(v) => Some(false),
        _ => None,
    };
    match v {
        Bson::Document(d) => {
            if d.is_empty() {
                return Err(CommandError::bad_value(
                    "The $sort pattern is empty when it should be a set of fields.",
                ));
            }
            let mut fields = Vec::new();
            for (k, dir) in d {
                if k.is_empty() || k.split('.').any(str::is_empty) {
                    return Err(CommandError::bad_value(format!(
                        "The $sort field is a dotted field but has an empty part: {k}"
                    )));
                }
                let Some(ascending) = direction(dir) else {
                    return Err(CommandError::bad_value(
                        "The $sort element value must be either 1 or -1",
                    ));
                };
                fields.push((k.clone(), ascending));
            }
            Ok(PushSort::Fields(fields))
        }
        other => Ok(PushSort::Whole(direction(other).ok_or_else(invalid)?)),
    }
}

fn parse_add_to_set(arg: &Bson) -> Result<Vec<Bson>> {
    if let Bson::Document(d) = arg
        && d.keys().next().map(String::as_str) == Some("$each")
    {
        let each = d.get("$each").cloned().unwrap_or(Bson::Null);
        let Bson::Array(values) = each else {
            return Err(CommandError::bad_value(format!(
                "The argument to $each in $addToSet must be an array but it was of type {}",
                type_alias(&each)
            )));
        };
        if d.len() != 1 {
            return Err(CommandError::bad_value(format!(
                "Found unexpected fields after $each in $addToSet: {}",
                format::document(d)
            )));
        }
        let mut unique: Vec<Bson> = Vec::new();
        for v in values {
            if !unique.iter().any(|u| values_equal(u, &v)) {
                unique.push(v);
            }
        }
        return Ok(unique);
    }
    Ok(vec![arg.clone()])
}

fn parse_bit(arg: &Bson) -> Result<Vec<(BitOp, Bson)>> {
    let Bson::Document(d) = arg else {
        return Err(CommandError::bad_value(format!(
            "The $bit modifier is not compatible with a {}. You must pass in an embedded document: {{$bit: {{field: {{and/or/xor: #}}}}",
            type_alias(arg)
        )));
    };
    if d.is_empty() {
        return Err(CommandError::bad_value(
            "You must pass in at least one bitwise operation. The format is: {$bit: {field: {and/or/xor: #}}",
        ));
    }
    let mut out = Vec::new();
    for (k, v) in d {
        let op = match k.as_str() {
            "and" => BitOp::And,
            "or" => BitOp::Or,
            "xor" => BitOp::Xor,
            _ => {
                return Err(CommandError::bad_value(format!(
                    "The $bit modifier only supports 'and', 'or', and 'xor', not '{k}' which is an unknown operator: {{{}}}",
                    format::element(k, v)
                )));
            }
        };
        if !matches!(v, Bson::Int32(_) | Bson::Int64(_)) {
            return Err(CommandError::bad_value(format!(
                "The $bit modifier field must be an Integer(32/64 bit); a '{}' is not supported here: {{{}}}",
                type_alias(v),
                format::element(k, v)
            )));
        }
        out.push((op, v.clone()));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Application
// ---------------------------------------------------------------------------------------

struct Env<'a> {
    eval: &'a EvalContext,
    filters: &'a [(String, Matcher)],
    /// `_id: <value>` of the document being updated, for messages.
    id_elem: String,
}

impl Env<'_> {
    fn filter_matches(&self, id: &str, elem: &Bson) -> Result<bool> {
        let Some((_, matcher)) = self.filters.iter().find(|(f, _)| f == id) else {
            return Err(CommandError::internal(format!(
                "array filter '{id}' vanished"
            )));
        };
        let mut wrapper = Document::new();
        wrapper.insert(id, elem.clone());
        matcher.matches(&wrapper, self.eval)
    }
}

impl OperatorUpdate {
    fn apply(&self, doc: &mut Document, ctx: &UpdateContext<'_>) -> Result<bool> {
        let original_id = doc.get("_id").cloned();
        let env = Env {
            eval: ctx.eval,
            filters: &self.filters,
            id_elem: original_id
                .as_ref()
                .map(|v| format::element("_id", v))
                .unwrap_or_default(),
        };
        let mut root = Bson::Document(doc.clone());
        let mut changed = false;
        for op in &self.ops {
            if matches!(op.kind, OpKind::SetOnInsert(_)) && !ctx.is_insert {
                continue;
            }
            let path = resolve_positional(&op.path, ctx)?;
            let (touched_id, op_changed) = match &op.kind {
                OpKind::Rename { from, from_dotted } => (
                    first_is_id(from) || first_is_id(&path),
                    apply_rename(&mut root, op, &path, from, from_dotted, &env)?,
                ),
                _ => (
                    first_is_id(&path),
                    walk(&mut root, "", "", op, &path, 0, &env)?,
                ),
            };
            changed |= op_changed;
            // Any real modification under `_id` is refused (a no-op `$set` of the same value
            // is fine); an upsert's seed without `_id` may still receive one.
            if touched_id && op_changed && original_id.is_some() {
                return Err(err(
                    codes::IMMUTABLE_FIELD,
                    format!(
                        "Performing an update on the path '{}' would modify the immutable field '_id'",
                        match &op.kind {
                            OpKind::Rename { from_dotted, .. } if first_is_id_str(from_dotted) => {
                                from_dotted
                            }
                            _ => &op.dotted,
                        }
                    ),
                ));
            }
        }
        let Bson::Document(result) = root else {
            return Err(CommandError::internal(
                "update turned the document into a non-document",
            ));
        };
        if let Some(id) = result.get("_id") {
            check_id_type(id)?;
        }
        *doc = result;
        Ok(changed)
    }
}

fn first_is_id(path: &[Comp]) -> bool {
    matches!(path.first(), Some(Comp::Field(f)) if f == "_id")
}

fn first_is_id_str(dotted: &str) -> bool {
    dotted.split('.').next() == Some("_id")
}

fn resolve_positional(path: &[Comp], ctx: &UpdateContext<'_>) -> Result<Vec<Comp>> {
    if !path.contains(&Comp::Positional) {
        return Ok(path.to_vec());
    }
    let Some(index) = ctx.matched.and_then(|m| m.elem_match_index) else {
        return Err(CommandError::bad_value(
            "The positional operator did not find the match needed from the query.",
        ));
    };
    Ok(path
        .iter()
        .map(|c| {
            if *c == Comp::Positional {
                Comp::Field(index.to_string())
            } else {
                c.clone()
            }
        })
        .collect())
}

/// A strict array index: digits without leading zeros, small enough for `usize`.
fn parse_index(name: &str) -> Option<usize> {
    if name.is_empty()
        || !name.bytes().all(|c| c.is_ascii_digit())
        || (name.len() > 1 && name.starts_with('0'))
    {
        return None;
    }
    name.parse().ok()
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

fn dotted_prefix(path: &[Comp]) -> String {
    path.iter().map(Comp::text).collect::<Vec<_>>().join(".")
}

/// Applies `op` below `node` (named `node_name` in its parent), at `path[depth]`.
fn walk(
    node: &mut Bson,
    node_name: &str,
    taken: &str,
    op: &Op,
    path: &[Comp],
    depth: usize,
    env: &Env<'_>,
) -> Result<bool> {
    let Some(comp) = path.get(depth) else {
        return Err(CommandError::internal("update path walked past its end"));
    };
    match comp {
        Comp::Field(name) => {
            if let Bson::Document(d) = node {
                return apply_in_doc(d, name, &join(taken, name), op, path, depth, env);
            }
            if let Bson::Array(a) = node
                && let Some(index) = parse_index(name)
            {
                return apply_in_array(a, index, name, &join(taken, name), op, path, depth, env);
            }
            if op.kind.creates() {
                return Err(err(
                    codes::PATH_NOT_VIABLE,
                    format!(
                        "Cannot create field '{name}' in element {{{}}}",
                        format::element(node_name, node)
                    ),
                ));
            }
            Ok(false)
        }
        Comp::All | Comp::Filter(_) => {
            let Bson::Array(a) = node else {
                return Err(CommandError::bad_value(format!(
                    "Cannot apply array updates to non-array element {}",
                    format::element(node_name, node)
                )));
            };
            let mut changed = false;
            for i in 0..a.len() {
                if let Comp::Filter(id) = comp
                    && !env.filter_matches(id, &a[i])?
                {
                    continue;
                }
                let name = i.to_string();
                changed |= apply_in_array(a, i, &name, &join(taken, &name), op, path, depth, env)?;
            }
            Ok(changed)
        }
        Comp::Positional => Err(CommandError::internal("unresolved positional operator")),
    }
}

fn apply_in_doc(
    d: &mut Document,
    name: &str,
    taken: &str,
    op: &Op,
    path: &[Comp],
    depth: usize,
    env: &Env<'_>,
) -> Result<bool> {
    let last = depth + 1 == path.len();
    let remove = match d.get_mut(name) {
        Some(child) if !last => return walk(child, name, taken, op, path, depth + 1, env),
        Some(current) => match compute(op, Some(current), name, taken, env)? {
            Action::Keep => return Ok(false),
            Action::Set(v) => {
                if identical(current, &v) {
                    return Ok(false);
                }
                *current = v;
                return Ok(true);
            }
            Action::Write(v) => {
                *current = v;
                return Ok(true);
            }
            Action::Remove => true,
        },
        None => false,
    };
    if remove {
        d.remove(name);
        return Ok(true);
    }
    match create_value(op, path, depth + 1, env)? {
        Some(v) => {
            d.insert(name, v);
            Ok(true)
        }
        None => Ok(false),
    }
}

#[allow(clippy::too_many_arguments)]
fn apply_in_array(
    a: &mut Vec<Bson>,
    index: usize,
    name: &str,
    taken: &str,
    op: &Op,
    path: &[Comp],
    depth: usize,
    env: &Env<'_>,
) -> Result<bool> {
    let last = depth + 1 == path.len();
    if let Some(current) = a.get_mut(index) {
        if !last {
            return walk(current, name, taken, op, path, depth + 1, env);
        }
        return Ok(match compute(op, Some(current), name, taken, env)? {
            Action::Keep => false,
            Action::Set(v) if identical(current, &v) => false,
            Action::Set(v) | Action::Write(v) => {
                *current = v;
                true
            }
            // $unset on an array element leaves a null in its place.
            Action::Remove if *current == Bson::Null => false,
            Action::Remove => {
                *current = Bson::Null;
                true
            }
        });
    }
    match create_value(op, path, depth + 1, env)? {
        Some(v) => {
            if index - a.len() > MAX_ARRAY_PADDING {
                return Err(err(
                    34,
                    format!("can't backfill more than {MAX_ARRAY_PADDING} elements"),
                ));
            }
            a.resize(index, Bson::Null);
            a.push(v);
            Ok(true)
        }
        None => Ok(false),
    }
}

/// The value to create for a missing field whose remaining path is `path[rest..]`, or
/// `None` when the operation does nothing on a missing field.
fn create_value(op: &Op, path: &[Comp], rest: usize, env: &Env<'_>) -> Result<Option<Bson>> {
    if let Some(pos) = path[rest..]
        .iter()
        .position(|c| matches!(c, Comp::All | Comp::Filter(_)))
    {
        return Err(CommandError::bad_value(format!(
            "The path '{}' must exist in the document in order to apply array updates.",
            dotted_prefix(&path[..rest + pos])
        )));
    }
    if !op.kind.creates() {
        return Ok(None);
    }
    if path.len() > MAX_NESTING_DEPTH {
        return Err(too_deep());
    }
    let field = path.last().map(Comp::text).unwrap_or_default();
    let (Action::Set(mut value) | Action::Write(mut value)) = compute(op, None, &field, "", env)?
    else {
        return Ok(None);
    };
    for comp in path[rest..].iter().rev() {
        let mut d = Document::new();
        d.insert(comp.text(), value);
        value = Bson::Document(d);
    }
    Ok(Some(value))
}

fn apply_rename(
    root: &mut Bson,
    op: &Op,
    to: &[Comp],
    from: &[Comp],
    from_dotted: &str,
    env: &Env<'_>,
) -> Result<bool> {
    let names = |p: &[Comp]| p.iter().map(Comp::text).collect::<Vec<_>>();
    let in_doc_with = if env.id_elem.is_empty() {
        "no id".to_string()
    } else {
        env.id_elem.clone()
    };
    // The source: a missing field is a no-op, a path through a scalar (or through an array
    // by name) is not viable, and no ancestor of the source may be an array.
    let from_names = names(from);
    let mut chain: Vec<(&str, bool)> = Vec::new();
    let mut current: &Bson = root;
    for name in &from_names {
        let next = match current {
            Bson::Document(d) => d.get(name),
            Bson::Array(a) if parse_index(name).is_some() => {
                parse_index(name).and_then(|i| a.get(i))
            }
            _ => {
                let holder = chain.last().map(|(n, _)| *n).unwrap_or_default();
                return Err(err(
                    codes::PATH_NOT_VIABLE,
                    format!(
                        "cannot use the part ({name} of {from_dotted}) to traverse the element ({{{}}})",
                        format::element(holder, current)
                    ),
                ));
            }
        };
        let Some(next) = next else { return Ok(false) };
        chain.push((name, matches!(next, Bson::Array(_))));
        current = next;
    }
    let ancestors = &chain[..chain.len().saturating_sub(1)];
    if let Some((array, _)) = ancestors.iter().rev().find(|(_, is_array)| *is_array) {
        return Err(CommandError::bad_value(format!(
            "The source field cannot be an array element, '{from_dotted}' in doc with {in_doc_with} has an array field called '{array}'"
        )));
    }
    let value = current.clone();
    // The destination: neither its deepest existing ancestor nor any above it may be an
    // array (an existing destination may itself be one: it is overwritten).
    let to_names = names(to);
    let mut chain: Vec<(&str, bool)> = Vec::new();
    let mut current: &Bson = root;
    let mut complete = true;
    for name in &to_names {
        let next = match current {
            Bson::Document(d) => d.get(name),
            Bson::Array(a) => parse_index(name).and_then(|i| a.get(i)),
            _ => None,
        };
        let Some(next) = next else {
            complete = false;
            break;
        };
        chain.push((name, matches!(next, Bson::Array(_))));
        current = next;
    }
    let considered = if complete {
        &chain[..chain.len().saturating_sub(1)]
    } else {
        &chain[..]
    };
    if let Some((array, _)) = considered.iter().rev().find(|(_, is_array)| *is_array) {
        return Err(CommandError::bad_value(format!(
            "The destination field cannot be an array element, '{}' in doc with {in_doc_with} has an array field called '{array}'",
            op.dotted
        )));
    }
    // A $set of the destination (in place when it exists) and an $unset of the source.
    let set_to = Op {
        operator: op.operator,
        path: to.to_vec(),
        dotted: op.dotted.clone(),
        kind: OpKind::Set(value),
    };
    let unset_from = Op {
        operator: op.operator,
        path: from.to_vec(),
        dotted: from_dotted.to_string(),
        kind: OpKind::Unset,
    };
    walk(root, "", "", &set_to, to, 0, env)?;
    walk(root, "", "", &unset_from, from, 0, env)?;
    Ok(true)
}

fn non_numeric_error(op: &Op, field: &str, current: &Bson, env: &Env<'_>) -> CommandError {
    CommandError::type_mismatch(format!(
        "Cannot apply {} to a value of non-numeric type. {{{}}} has the field '{field}' of non-numeric type {}",
        op.operator,
        env.id_elem,
        type_alias(current)
    ))
}

fn safe_num(v: &Bson) -> String {
    match v {
        Bson::Int32(i) => format!("(NumberInt){i}"),
        Bson::Int64(i) => format!("(NumberLong){i}"),
        Bson::Double(d) => format!("(NumberDouble){d}"),
        Bson::Decimal128(d) => format!("(NumberDecimal){d}"),
        other => format::value(other),
    }
}

/// `a + b` or `a * b` with mongod's type promotion; `Ok(None)` on 64-bit overflow.
fn arithmetic(multiply: bool, a: &Bson, b: &Bson) -> Result<Option<Bson>> {
    let int = |v: &Bson| match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        _ => None,
    };
    if matches!(a, Bson::Decimal128(_)) || matches!(b, Bson::Decimal128(_)) {
        return decimal::arithmetic(multiply, a, b)
            .map(Some)
            .ok_or_else(|| CommandError::internal("decimal arithmetic on non-numbers"));
    }
    if let (Some(x), Some(y)) = (int(a), int(b)) {
        let result = if multiply {
            x.checked_mul(y)
        } else {
            x.checked_add(y)
        };
        let both32 = matches!((a, b), (Bson::Int32(_), Bson::Int32(_)));
        return Ok(result.map(|r| match i32::try_from(r) {
            Ok(small) if both32 => Bson::Int32(small),
            _ => Bson::Int64(r),
        }));
    }
    let (Some(x), Some(y)) = (super::compare::as_f64(a), super::compare::as_f64(b)) else {
        return Err(CommandError::internal("arithmetic on non-numbers"));
    };
    Ok(Some(Bson::Double(if multiply { x * y } else { x + y })))
}

/// `field` is the field's own name, `taken` its full dotted path (for messages).
fn compute(
    op: &Op,
    current: Option<&Bson>,
    field: &str,
    taken: &str,
    env: &Env<'_>,
) -> Result<Action> {
    Ok(match &op.kind {
        OpKind::Set(v) | OpKind::SetOnInsert(v) => Action::Set(v.clone()),
        OpKind::Unset => {
            if current.is_some() {
                Action::Remove
            } else {
                Action::Keep
            }
        }
        OpKind::Inc(arg) | OpKind::Mul(arg) => {
            let multiply = matches!(op.kind, OpKind::Mul(_));
            match current {
                // A missing field counts as 0: the result is `arg * 0`, of the argument's type.
                None if multiply => match arithmetic(true, arg, &Bson::Int32(0))? {
                    Some(zero) => Action::Set(zero),
                    None => return Err(CommandError::internal("multiplying by zero overflowed")),
                },
                None => Action::Set(arg.clone()),
                Some(c) if !is_number(c) => return Err(non_numeric_error(op, field, c, env)),
                Some(c) => match arithmetic(multiply, c, arg)? {
                    Some(v) => Action::Set(v),
                    None => {
                        return Err(CommandError::bad_value(format!(
                            "Failed to apply {} operations to current value ({}) for document {{{}}}",
                            op.operator,
                            safe_num(c),
                            env.id_elem
                        )));
                    }
                },
            }
        }
        OpKind::Min(arg) | OpKind::Max(arg) => {
            let want = if matches!(op.kind, OpKind::Min(_)) {
                Ordering::Less
            } else {
                Ordering::Greater
            };
            match current {
                Some(c) if compare(arg, c) != want => Action::Keep,
                _ => Action::Set(arg.clone()),
            }
        }
        OpKind::CurrentDate { timestamp } => {
            if *timestamp {
                let ts = env.eval.cluster_time.unwrap_or(Timestamp {
                    time: u32::try_from(env.eval.now.timestamp_millis().div_euclid(1000))
                        .unwrap_or(0),
                    increment: 1,
                });
                Action::Write(Bson::Timestamp(ts))
            } else {
                Action::Write(Bson::DateTime(env.eval.now))
            }
        }
        OpKind::Push(spec) => {
            let mut array = match current {
                None => Vec::new(),
                Some(Bson::Array(a)) => a.clone(),
                Some(other) => {
                    return Err(CommandError::bad_value(format!(
                        "The field '{taken}' must be an array but is of type {} in document {{{}}}",
                        type_alias(other),
                        if env.id_elem.is_empty() {
                            "no id"
                        } else {
                            &env.id_elem
                        }
                    )));
                }
            };
            let len = array.len() as i64;
            let at = match spec.position {
                None => len,
                Some(p) if p < 0 => (len + p).max(0),
                Some(p) => p.min(len),
            };
            let at = usize::try_from(at).unwrap_or(array.len()).min(array.len());
            array.splice(at..at, spec.each.iter().cloned());
            match &spec.sort {
                Some(PushSort::Whole(asc)) => array.sort_by(|x, y| directed(compare(x, y), *asc)),
                Some(PushSort::Fields(fields)) => array.sort_by(|x, y| {
                    for (f, asc) in fields {
                        let ord = directed(compare(&sort_key(x, f), &sort_key(y, f)), *asc);
                        if ord != Ordering::Equal {
                            return ord;
                        }
                    }
                    Ordering::Equal
                }),
                None => {}
            }
            if let Some(slice) = spec.slice {
                let keep = usize::try_from(slice.unsigned_abs()).unwrap_or(usize::MAX);
                if slice >= 0 {
                    array.truncate(keep);
                } else if array.len() > keep {
                    array.drain(..array.len() - keep);
                }
            }
            if spec.sort.is_some() {
                Action::Write(Bson::Array(array))
            } else {
                Action::Set(Bson::Array(array))
            }
        }
        OpKind::AddToSet(values) => match current {
            None => Action::Set(Bson::Array(values.clone())),
            Some(Bson::Array(a)) => {
                let mut array = a.clone();
                for v in values {
                    if !array.iter().any(|x| values_equal(x, v)) {
                        array.push(v.clone());
                    }
                }
                Action::Set(Bson::Array(array))
            }
            Some(other) => {
                return Err(CommandError::bad_value(format!(
                    "Cannot apply $addToSet to non-array field. Field named '{field}' has non-array type {}",
                    type_alias(other)
                )));
            }
        },
        OpKind::Pop { first } => match current {
            None => Action::Keep,
            Some(Bson::Array(a)) if a.is_empty() => Action::Keep,
            Some(Bson::Array(a)) => {
                let mut array = a.clone();
                if *first {
                    array.remove(0);
                } else {
                    array.pop();
                }
                Action::Set(Bson::Array(array))
            }
            Some(other) => {
                return Err(CommandError::type_mismatch(format!(
                    "Path '{taken}' contains an element of non-array type '{}'",
                    type_alias(other)
                )));
            }
        },
        OpKind::Pull(_) | OpKind::PullAll(_) => match current {
            None => Action::Keep,
            Some(Bson::Array(a)) => {
                let mut kept = Vec::with_capacity(a.len());
                for elem in a {
                    let pull = match &op.kind {
                        OpKind::Pull(PullCond::Equal(v)) => values_equal(elem, v),
                        OpKind::Pull(PullCond::Matcher(m)) => m.matches(elem, env.eval)?,
                        OpKind::PullAll(values) => values.iter().any(|v| values_equal(elem, v)),
                        _ => false,
                    };
                    if !pull {
                        kept.push(elem.clone());
                    }
                }
                if kept.len() == a.len() {
                    Action::Keep
                } else {
                    Action::Set(Bson::Array(kept))
                }
            }
            Some(_) => {
                return Err(CommandError::bad_value(
                    "Cannot apply $pull to a non-array value",
                ));
            }
        },
        OpKind::Bit(ops) => {
            let start = match current {
                None => Bson::Int32(0),
                Some(c @ (Bson::Int32(_) | Bson::Int64(_))) => c.clone(),
                Some(other) => {
                    return Err(CommandError::bad_value(format!(
                        "Cannot apply $bit to a value of non-integral type.{} has the field {field} of non-integer type {}",
                        env.id_elem,
                        type_alias(other)
                    )));
                }
            };
            let mut value = start;
            for (bit, operand) in ops {
                value = bitwise(*bit, &value, operand);
            }
            Action::Set(value)
        }
        OpKind::Rename { .. } => return Err(CommandError::internal("$rename applied as a leaf")),
    })
}

fn bitwise(op: BitOp, a: &Bson, b: &Bson) -> Bson {
    let f = |x: i64, y: i64| match op {
        BitOp::And => x & y,
        BitOp::Or => x | y,
        BitOp::Xor => x ^ y,
    };
    match (a, b) {
        (Bson::Int32(x), Bson::Int32(y)) => Bson::Int32(f(i64::from(*x), i64::from(*y)) as i32),
        _ => {
            let wide = |v: &Bson| match v {
                Bson::Int32(i) => i64::from(*i),
                Bson::Int64(i) => *i,
                _ => 0,
            };
            Bson::Int64(f(wide(a), wide(b)))
        }
    }
}

fn directed(ord: Ordering, ascending: bool) -> Ordering {
    if ascending { ord } else { ord.reverse() }
}

/// The value at dotted `path` inside `value` for `$push`'s `$sort`; missing is null.
fn sort_key(value: &Bson, path: &str) -> Bson {
    let mut current = value;
    for part in path.split('.') {
        current = match current {
            Bson::Document(d) => match d.get(part) {
                Some(v) => v,
                None => return Bson::Null,
            },
            Bson::Array(a) => match parse_index(part).and_then(|i| a.get(i)) {
                Some(v) => v,
                None => return Bson::Null,
            },
            _ => return Bson::Null,
        };
    }
    current.clone()
}

/// Type- and order-exact equality (mongod's binary comparison of values).
pub(crate) fn identical(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Double(x), Bson::Double(y)) => x.to_bits() == y.to_bits(),
        (Bson::Document(x), Bson::Document(y)) => docs_identical(x, y),
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| identical(p, q))
        }
        _ => a == b,
    }
}

fn docs_identical(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
}

// ---------------------------------------------------------------------------------------
// Upsert seeding
// ---------------------------------------------------------------------------------------

/// The document an upsert starts from: the filter's equality predicates (for operator and
/// pipeline updates), or only `_id` (for replacements).
///
/// Equalities are `{a: v}` (unless `v` is an operator document or a regex), `{a: {$eq: v}}`,
/// a one-value `$in`, and those inside `$and` or a one-clause `$or` (which the optimizer
/// reduces to its clause). Dotted paths become nested documents, fields come in path order
/// with `_id` first. Two equalities on one path, or on a path and its prefix, are code 54.
pub fn upsert_seed(filter: &Document, replacement: bool) -> Result<Document> {
    let mut found: Vec<(String, Bson)> = Vec::new();
    collect_equalities(filter, &mut found)?;
    // The canonical query orders equality predicates by path; conflicts are reported in
    // that order, each new path against the accepted paths that are equal to or above it.
    found.sort_by(|(a, _), (b, _)| a.as_bytes().cmp(b.as_bytes()));
    let mut equalities: Vec<(String, Bson)> = Vec::new();
    for (path, value) in found {
        if replacement {
            if !first_is_id_str(&path) {
                continue;
            }
            if path != "_id" {
                return Err(err(
                    111,
                    format!(
                        "field at '_id' must be exactly specified, field at sub-path '{path}'found"
                    ),
                ));
            }
        }
        let parent = equalities.iter().find(|(accepted, _)| {
            path == *accepted
                || (path.starts_with(accepted.as_str())
                    && path.as_bytes().get(accepted.len()) == Some(&b'.'))
        });
        if let Some((accepted, _)) = parent {
            let msg = if *accepted == path {
                format!("cannot infer query fields to set, path '{path}' is matched twice")
            } else {
                format!(
                    "cannot infer query fields to set, both paths '{path}' and '{accepted}' are matched"
                )
            };
            return Err(err(codes::NOT_SINGLE_VALUE_FIELD, msg));
        }
        equalities.push((path, value));
    }
    let mut seed = Document::new();
    for (path, value) in equalities {
        let parts: Vec<&str> = path.split('.').collect();
        if parts.len() > MAX_NESTING_DEPTH {
            return Err(too_deep());
        }
        insert_nested(&mut seed, &parts, value);
    }
    if let Some(id) = seed.remove("_id") {
        let mut ordered = doc! {"_id": id};
        ordered.extend(seed);
        seed = ordered;
    }
    Ok(seed)
}

fn insert_nested(doc: &mut Document, parts: &[&str], value: Bson) {
    match parts {
        [] => {}
        [last] => {
            doc.insert(*last, value);
        }
        [first, rest @ ..] => {
            if !matches!(doc.get(*first), Some(Bson::Document(_))) {
                doc.insert(*first, Document::new());
            }
            if let Some(Bson::Document(child)) = doc.get_mut(*first) {
                insert_nested(child, rest, value);
            }
        }
    }
}

fn add_equality(out: &mut Vec<(String, Bson)>, path: &str, value: &Bson) -> Result<()> {
    out.push((path.to_string(), value.clone()));
    Ok(())
}

fn collect_equalities(filter: &Document, out: &mut Vec<(String, Bson)>) -> Result<()> {
    for (key, value) in filter {
        match key.as_str() {
            "$and" => {
                if let Bson::Array(clauses) = value {
                    for clause in clauses {
                        if let Bson::Document(c) = clause {
                            collect_equalities(c, out)?;
                        }
                    }
                }
            }
            "$or" => {
                // A one-clause $or is rewritten to its clause by the query optimizer.
                if let Bson::Array(clauses) = value
                    && let [Bson::Document(c)] = clauses.as_slice()
                {
                    collect_equalities(c, out)?;
                }
            }
            k if k.starts_with('$') => {}
            _ => match value {
                Bson::RegularExpression(_) => {}
                Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => {
                    // The optimizer turns `$eq`, a one-value `$in` and every value of
                    // `$all` into equality predicates.
                    let literal = |v: &Bson| match v {
                        Bson::RegularExpression(_) => false,
                        Bson::Document(e) => !e.keys().next().is_some_and(|k| k.starts_with('$')),
                        _ => true,
                    };
                    for (op, operand) in d {
                        match (op.as_str(), operand) {
                            ("$eq", v) => add_equality(out, key, v)?,
                            ("$in", Bson::Array(values)) => {
                                if let [single] = values.as_slice()
                                    && literal(single)
                                {
                                    add_equality(out, key, single)?;
                                }
                            }
                            ("$all", Bson::Array(values)) => {
                                for v in values.iter().filter(|v| literal(v)) {
                                    add_equality(out, key, v)?;
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => add_equality(out, key, value)?,
            },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
