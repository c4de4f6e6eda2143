//! Query filters (`{a: {$gt: 1}}`, `$and`, `$elemMatch`, `$expr`, ...) with dotted paths
//! through arrays.
//!
//! Semantics follow mongod's match expressions:
//!
//! * a path is resolved through documents and arrays of documents (`"a.b"` reaches every `b`
//!   of every document in the array `a`); a numeric component (`"a.0"`) indexes an array;
//! * a leaf that is an array is tested as a whole *and* element by element, so `{a: 5}`
//!   matches `{a: [1, 5]}` and `{a: [1, 5]}` matches it too (`$size` and `$elemMatch` only see
//!   the array itself);
//! * comparison operators only match values of the operand's canonical type bracket;
//! * `$ne`, `$nin` and `$not` are negations of the positive predicate over all values;
//! * equality with `null` matches missing fields (a path that stops at a scalar is missing),
//!   but an empty array, or an array without documents, yields no value at all for the rest of
//!   the path (`{"a.b": null}` does not match `{a: []}`; `{"a.b": {$exists: false}}` does);
//! * a numeric component (`"a.0"`) is both an array index and a field name in the array's
//!   documents.
//!
//! Not implemented, and rejected with mongod's "unknown operator" errors rather than
//! ignored: `$where`, `$text`, `$jsonSchema`, `$sampleRate` and the geospatial operators.
//! Collation is not supported (strings compare by bytes).
//!
//! Regular expressions use the emulator's own engine ([`Regex`], a PCRE subset) so the
//! crate's dependencies stay as they are; unsupported constructs fail at parse time.

// `CommandError` is large (reply extras, labels); boxing it is the lead's call (error.rs).

mod regex;

use bson::{Bson, Document};

use super::compare::{self, as_f64, canonical_rank, is_number};
use super::expr::Expr;
use super::{CommandError, EvalContext, Result};

pub use self::regex::Regex;

/// A parsed query filter.
#[derive(Debug, Clone)]
pub struct Matcher {
    root: Node,
}

/// Extra facts about a successful match.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MatchDetails {
    /// For the positional update operator `$`: the index of the array element the filter
    /// matched, for the first array the filter traversed.
    pub elem_match_index: Option<usize>,
}

/// A node of the parsed filter tree.
#[derive(Debug, Clone)]
enum Node {
    And(Vec<Node>),
    Or(Vec<Node>),
    Nor(Vec<Node>),
    Expr(Box<Expr>),
    Const(bool),
    Field { path: Vec<String>, pred: Pred },
}

/// A predicate on the value(s) at one path.
#[derive(Debug, Clone)]
enum Pred {
    /// Equality (`{a: v}`, `$eq`); `null` also matches missing.
    Eq(Bson),
    /// `$gt` (Greater), `$gte`, `$lt`, `$lte`.
    Cmp(CmpOp, Bson),
    /// A regular expression (`$regex`, `{a: /re/}`).
    Regex(Box<Regex>),
    /// `$in`: equality with any value or a match of any regex.
    In(Vec<Bson>, Vec<Regex>),
    /// `$exists: true` (`$exists: false` is its negation).
    Exists,
    /// `$type`.
    Type(Vec<TypeSel>),
    /// `$size`.
    Size(usize),
    /// `$mod: [divisor, remainder]`.
    Mod(i64, i64),
    /// `$bitsAllSet`, `$bitsAnySet`, `$bitsAllClear`, `$bitsAnyClear` over bit positions.
    Bits(BitOp, Vec<u32>),
    /// `$elemMatch` with a query on document elements.
    ElemMatchObj(Box<Node>),
    /// `$elemMatch` with operators on the elements themselves.
    ElemMatchValue(Vec<Pred>),
    /// All predicates must hold (`$all`, multiple operators on a field).
    All(Vec<Pred>),
    /// Negation of the conjunction (`$ne`, `$nin`, `$not`).
    Not(Vec<Pred>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum CmpOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum BitOp {
    AllSet,
    AnySet,
    AllClear,
    AnyClear,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum TypeSel {
    Number,
    Code(i32),
}

/// Operators that apply to a field's value (mongod's path-accepting keywords).
const FIELD_OPERATORS: &[&str] = &[
    "$eq",
    "$ne",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$exists",
    "$type",
    "$size",
    "$all",
    "$elemMatch",
    "$not",
    "$regex",
    "$options",
    "$mod",
    "$bitsAllSet",
    "$bitsAnySet",
    "$bitsAllClear",
    "$bitsAnyClear",
];

/// Operators that apply to a whole document (mongod's pathless parsers).
const PATHLESS_OPERATORS: &[&str] = &[
    "$and",
    "$or",
    "$nor",
    "$expr",
    "$where",
    "$text",
    "$comment",
    "$alwaysTrue",
    "$alwaysFalse",
    "$jsonSchema",
    "$sampleRate",
    "$ref",
    "$id",
    "$db",
];

fn bad(msg: impl Into<String>) -> CommandError {
    CommandError::bad_value(msg)
}

/// Whether a document is an operator document: its first field name starts with `$` and it
/// is not a DBRef (`$ref` and `$id` both present), as mongod's `isExpressionDocument`.
fn is_operator_doc(doc: &Document) -> bool {
    doc.keys().next().is_some_and(|k| k.starts_with('$'))
        && !(doc.contains_key("$ref") && doc.contains_key("$id"))
}

/// Splits a dotted path.
fn split_path(path: &str) -> Vec<String> {
    path.split('.').map(str::to_string).collect()
}

fn parse_tree(filter: &Document) -> Result<Node> {
    let mut children = Vec::new();
    for (key, value) in filter {
        if let Some(op) = key.strip_prefix('$') {
            match op {
                "and" | "or" | "nor" => {
                    let Bson::Array(items) = value else {
                        return Err(bad(format!("{key} must be an array")));
                    };
                    if items.is_empty() {
                        return Err(bad("$and/$or/$nor must be a nonempty array"));
                    }
                    let mut subs = Vec::with_capacity(items.len());
                    for item in items {
                        let Bson::Document(d) = item else {
                            return Err(bad("$or/$and/$nor entries need to be full objects"));
                        };
                        subs.push(parse_tree(d)?);
                    }
                    children.push(match op {
                        "and" => Node::And(subs),
                        "or" => Node::Or(subs),
                        _ => Node::Nor(subs),
                    });
                }
                "expr" => children.push(Node::Expr(Box::new(Expr::parse(value)?))),
                "comment" => {}
                "alwaysTrue" | "alwaysFalse" => {
                    if !is_number(value) {
                        return Err(CommandError::failed_to_parse(format!(
                            "Expected a number in: {key}: {value}"
                        )));
                    }
                    if let Bson::Double(d) = value
                        && (d.is_nan() || d.fract() != 0.0)
                    {
                        let why = if d.is_nan() {
                            "Expected an integer, but found NaN in"
                        } else {
                            "Expected an integer"
                        };
                        return Err(CommandError::failed_to_parse(format!(
                            "{why}: {key}: {value}"
                        )));
                    }
                    if as_f64(value) != Some(1.0) {
                        return Err(CommandError::failed_to_parse(format!(
                            "{key} must be an integer value of 1"
                        )));
                    }
                    children.push(Node::Const(op == "alwaysTrue"));
                }
                // DBRef fields are matched by equality, as mongod's pathless `$ref`/`$id`/`$db`.
                "ref" | "id" | "db" => children.push(Node::Field {
                    path: vec![key.clone()],
                    pred: Pred::Eq(value.clone()),
                }),
                // Includes operators mongod has but the emulator does not implement
                // (`$where`, `$text`, `$jsonSchema`, `$sampleRate`): rejected, never ignored.
                _ => {
                    return Err(bad(format!(
                        "unknown top level operator: {key}. If you have a field name that starts \
                         with a '$' symbol, consider using $getField or $setField."
                    )));
                }
            }
            continue;
        }
        let path = split_path(key);
        children.push(Node::Field {
            path,
            pred: parse_field_value(key, value)?,
        });
    }
    Ok(if children.len() == 1 {
        children.pop().unwrap_or(Node::Const(true))
    } else {
        Node::And(children)
    })
}

/// Parses the value of a field in a filter: an operator document or an equality value.
fn parse_field_value(field: &str, value: &Bson) -> Result<Pred> {
    match value {
        Bson::Document(d) if is_operator_doc(d) => parse_operator_doc(field, d),
        Bson::RegularExpression(re) => {
            Ok(Pred::Regex(Box::new(Regex::new(&re.pattern, &re.options)?)))
        }
        other => Ok(Pred::Eq(other.clone())),
    }
}

/// Parses `{$gt: 1, $lt: 5, ...}` into a conjunction of predicates.
fn parse_operator_doc(field: &str, ops: &Document) -> Result<Pred> {
    let mut preds = Vec::new();
    let mut regex_options: Option<&Bson> = None;
    let mut regex_pattern: Option<&Bson> = None;
    for (op, arg) in ops {
        match op.as_str() {
            "$regex" => regex_pattern = Some(arg),
            "$options" => regex_options = Some(arg),
            _ => preds.push(parse_operator(field, op, arg)?),
        }
    }
    if let Some(options) = regex_options {
        if regex_pattern.is_none() {
            return Err(bad("$options needs a $regex"));
        }
        if !matches!(options, Bson::String(_)) {
            return Err(bad("$options has to be a string"));
        }
    }
    if let Some(pattern) = regex_pattern {
        let opts = match regex_options {
            Some(Bson::String(s)) => s.as_str(),
            _ => "",
        };
        let re = match pattern {
            Bson::String(p) => Regex::new(p, opts)?,
            Bson::RegularExpression(r) => {
                if !opts.is_empty() && !r.options.is_empty() {
                    return Err(CommandError::new(
                        51075,
                        "options set in both $regex and $options",
                    ));
                }
                let o = if opts.is_empty() {
                    r.options.as_str()
                } else {
                    opts
                };
                Regex::new(&r.pattern, o)?
            }
            _ => return Err(bad("$regex has to be a string")),
        };
        preds.push(Pred::Regex(Box::new(re)));
    }
    Ok(if preds.len() == 1 {
        preds.pop().unwrap_or(Pred::All(Vec::new()))
    } else {
        Pred::All(preds)
    })
}

fn parse_operator(field: &str, op: &str, arg: &Bson) -> Result<Pred> {
    Ok(match op {
        "$eq" => Pred::Eq(arg.clone()),
        "$ne" => {
            if matches!(arg, Bson::RegularExpression(_)) {
                return Err(bad("Can't have regex as arg to $ne."));
            }
            Pred::Not(vec![Pred::Eq(arg.clone())])
        }
        "$gt" | "$gte" | "$lt" | "$lte" => {
            if matches!(arg, Bson::RegularExpression(_)) {
                return Err(bad(format!(
                    "Can't have RegEx as arg to predicate over field '{field}'."
                )));
            }
            let cmp = match op {
                "$gt" => CmpOp::Gt,
                "$gte" => CmpOp::Gte,
                "$lt" => CmpOp::Lt,
                _ => CmpOp::Lte,
            };
            Pred::Cmp(cmp, arg.clone())
        }
        "$in" | "$nin" => {
            let Bson::Array(items) = arg else {
                return Err(bad(format!("{op} needs an array")));
            };
            let mut values = Vec::new();
            let mut regexes = Vec::new();
            for item in items {
                match item {
                    Bson::Document(d) if is_operator_doc(d) => {
                        return Err(bad(format!("cannot nest $ under {op}")));
                    }
                    Bson::RegularExpression(re) => {
                        regexes.push(Regex::new(&re.pattern, &re.options)?)
                    }
                    other => values.push(other.clone()),
                }
            }
            let pred = Pred::In(values, regexes);
            if op == "$in" {
                pred
            } else {
                Pred::Not(vec![pred])
            }
        }
        // mongod parses `$exists: false` as the negation of `$exists: true`.
        "$exists" if truthy(arg) => Pred::Exists,
        "$exists" => Pred::Not(vec![Pred::Exists]),
        "$type" => Pred::Type(parse_type(arg)?),
        "$size" => {
            let size: i64 = match arg {
                Bson::Int32(i) => i64::from(*i),
                Bson::Int64(l) => {
                    if i32::try_from(*l).is_err() {
                        return Err(bad("$size must be representable as a 32-bit integer"));
                    }
                    *l
                }
                Bson::Double(d) => {
                    if d.fract() != 0.0 || !d.is_finite() || d.abs() > f64::from(i32::MAX) {
                        return Err(bad("$size must be a whole number"));
                    }
                    *d as i64
                }
                _ => return Err(bad("$size needs a number")),
            };
            let Ok(size) = usize::try_from(size) else {
                return Err(bad("$size may not be negative"));
            };
            Pred::Size(size)
        }
        "$mod" => parse_mod(arg)?,
        "$bitsAllSet" => Pred::Bits(BitOp::AllSet, parse_bit_positions(op, arg)?),
        "$bitsAnySet" => Pred::Bits(BitOp::AnySet, parse_bit_positions(op, arg)?),
        "$bitsAllClear" => Pred::Bits(BitOp::AllClear, parse_bit_positions(op, arg)?),
        "$bitsAnyClear" => Pred::Bits(BitOp::AnyClear, parse_bit_positions(op, arg)?),
        "$all" => parse_all(field, arg)?,
        "$elemMatch" => {
            let Bson::Document(d) = arg else {
                return Err(bad("$elemMatch needs an Object"));
            };
            parse_elem_match(field, d)?
        }
        "$not" => match arg {
            Bson::RegularExpression(re) => Pred::Not(vec![Pred::Regex(Box::new(Regex::new(
                &re.pattern,
                &re.options,
            )?))]),
            Bson::Document(d) => {
                if d.is_empty() {
                    return Err(bad("$not cannot be empty"));
                }
                if !is_operator_doc(d) {
                    let first = d.keys().next().map(String::as_str).unwrap_or_default();
                    return Err(bad(format!("unknown operator: {first}")));
                }
                match parse_operator_doc(field, d)? {
                    Pred::All(preds) => Pred::Not(preds),
                    pred => Pred::Not(vec![pred]),
                }
            }
            _ => return Err(bad("$not needs a regex or a document")),
        },
        "$options" | "$regex" => unreachable_regex()?,
        "$where" => return Err(bad("$where cannot be applied to a field")),
        _ => return Err(bad(format!("unknown operator: {op}"))),
    })
}

/// `$regex`/`$options` are collected by [`parse_operator_doc`] before dispatch; reaching
/// [`parse_operator`] with them is an emulator bug, reported rather than panicking.
fn unreachable_regex() -> Result<Pred> {
    Err(CommandError::internal(
        "$regex reached the generic operator parser",
    ))
}

/// mongod's `BSONElement::trueValue`.
fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        other if is_number(other) => as_f64(other).is_some_and(|f| f != 0.0),
        _ => true,
    }
}

const TYPE_ALIASES: &[(&str, i32)] = &[
    ("double", 1),
    ("string", 2),
    ("object", 3),
    ("array", 4),
    ("binData", 5),
    ("undefined", 6),
    ("objectId", 7),
    ("bool", 8),
    ("date", 9),
    ("null", 10),
    ("regex", 11),
    ("dbPointer", 12),
    ("javascript", 13),
    ("symbol", 14),
    ("javascriptWithScope", 15),
    ("int", 16),
    ("timestamp", 17),
    ("long", 18),
    ("decimal", 19),
    ("minKey", -1),
    ("maxKey", 127),
];

fn parse_one_type(v: &Bson) -> Result<TypeSel> {
    match v {
        Bson::String(s) => {
            if s == "number" {
                return Ok(TypeSel::Number);
            }
            TYPE_ALIASES
                .iter()
                .find(|(name, _)| name == s)
                .map(|(_, code)| TypeSel::Code(*code))
                .ok_or_else(|| bad(format!("Unknown type name alias: {s}")))
        }
        n if is_number(n) => {
            let f = as_f64(n).unwrap_or(f64::NAN);
            if f.fract() != 0.0 || !f.is_finite() {
                return Err(bad(format!("Invalid numerical type code: {f}")));
            }
            let code = f as i64;
            if code == -1 || code == 127 || (1..=19).contains(&code) {
                Ok(TypeSel::Code(code as i32))
            } else {
                Err(bad(format!("Invalid numerical type code: {code}")))
            }
        }
        _ => Err(CommandError::type_mismatch(
            "type must be represented as a number or a string",
        )),
    }
}

fn parse_type(arg: &Bson) -> Result<Vec<TypeSel>> {
    match arg {
        Bson::Array(items) => {
            if items.is_empty() {
                return Err(CommandError::failed_to_parse(
                    "$type must match at least one type",
                ));
            }
            items.iter().map(parse_one_type).collect()
        }
        other => Ok(vec![parse_one_type(other)?]),
    }
}

fn parse_mod(arg: &Bson) -> Result<Pred> {
    let Bson::Array(items) = arg else {
        return Err(bad("malformed mod, needs to be an array"));
    };
    if items.len() < 2 {
        return Err(bad("malformed mod, not enough elements"));
    }
    if items.len() > 2 {
        return Err(bad("malformed mod, too many elements"));
    }
    if !is_number(&items[0]) {
        return Err(bad("malformed mod, divisor not a number"));
    }
    if !is_number(&items[1]) {
        return Err(bad("malformed mod, remainder not a number"));
    }
    let to_long = |v: &Bson, what: &str| -> Result<i64> {
        let f = as_f64(v).unwrap_or(f64::NAN);
        if !f.is_finite() {
            return Err(bad(format!("malformed mod, {what} value is invalid")));
        }
        Ok(match v {
            Bson::Int32(i) => i64::from(*i),
            Bson::Int64(i) => *i,
            _ => f.trunc() as i64,
        })
    };
    let divisor = to_long(&items[0], "divisor")?;
    let remainder = to_long(&items[1], "remainder")?;
    if divisor == 0 {
        return Err(bad("divisor cannot be 0"));
    }
    Ok(Pred::Mod(divisor, remainder))
}

/// 2^63: doubles in `[-2^63, 2^63)` convert to `i64` exactly.
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// The bit positions of a bitwise operator's argument: an array of positions, a non-negative
/// integral bitmask, or a BinData bitmask (mongod's messages).
fn parse_bit_positions(op: &str, arg: &Bson) -> Result<Vec<u32>> {
    match arg {
        Bson::Array(items) => {
            let mut positions = Vec::with_capacity(items.len());
            for e in items {
                let shown = format!("{e}");
                let n: i64 = match e {
                    Bson::Int32(i) => i64::from(*i),
                    Bson::Int64(l) => *l,
                    Bson::Double(d) => {
                        if d.is_nan() {
                            return Err(bad(format!("bit positions cannot take a NaN: {shown}")));
                        }
                        if *d > f64::from(i32::MAX) || *d < f64::from(i32::MIN) {
                            return Err(bad(format!(
                                "bit positions cannot be represented as a 32-bit signed integer: {shown}"
                            )));
                        }
                        if d.fract() != 0.0 {
                            return Err(bad(format!(
                                "bit positions must be an integer but got: {shown}"
                            )));
                        }
                        *d as i64
                    }
                    Bson::Decimal128(_) => as_f64(e).map_or(-1, |f| f.trunc() as i64),
                    _ => {
                        return Err(bad(format!(
                            "bit positions must be an integer but got: {shown}"
                        )));
                    }
                };
                if i32::try_from(n).is_err() {
                    return Err(bad(format!(
                        "bit positions cannot be represented as a 32-bit signed integer: {shown}"
                    )));
                }
                let Ok(position) = u32::try_from(n) else {
                    return Err(bad(format!("bit positions must be >= 0 but got: {shown}")));
                };
                positions.push(position);
            }
            Ok(positions)
        }
        Bson::Binary(bin) => Ok(bin
            .bytes
            .iter()
            .enumerate()
            .flat_map(|(i, byte)| {
                (0..8u32)
                    .filter(move |b| byte & (1 << b) != 0)
                    .map(move |b| i as u32 * 8 + b)
            })
            .collect()),
        n if is_number(n) => {
            let mask: i64 = match n {
                Bson::Int32(i) => i64::from(*i),
                Bson::Int64(l) => *l,
                other => {
                    let f = as_f64(other).unwrap_or(f64::NAN);
                    if f.is_nan() {
                        return Err(CommandError::failed_to_parse(format!(
                            "Expected an integer, but found NaN in: {op}: {n}"
                        )));
                    }
                    if !(-TWO_POW_63..TWO_POW_63).contains(&f) {
                        return Err(CommandError::failed_to_parse(format!(
                            "Cannot represent as a 64-bit integer: {op}: {n}"
                        )));
                    }
                    if f.fract() != 0.0 {
                        return Err(CommandError::failed_to_parse(format!(
                            "Expected an integer: {op}: {n}"
                        )));
                    }
                    f as i64
                }
            };
            if mask < 0 {
                return Err(CommandError::failed_to_parse(format!(
                    "Expected a positive number in: {op}: {n}"
                )));
            }
            Ok((0..63u32).filter(|b| mask & (1 << b) != 0).collect())
        }
        other => Err(bad(format!(
            "{op} takes an Array, a number, or a BinData but received: {op}: {other}"
        ))),
    }
}

/// Bit `position` of a value for the bitwise operators: integral numbers (two's complement,
/// sign-extended) and BinData (little-endian bytes); `None` for values never matched.
fn bit_of(value: &Bson, position: u32) -> Option<bool> {
    let int = match value {
        Bson::Int32(i) => i64::from(*i),
        Bson::Int64(l) => *l,
        Bson::Binary(bin) => {
            let byte = bin.bytes.get((position / 8) as usize).copied().unwrap_or(0);
            return Some(byte & (1 << (position % 8)) != 0);
        }
        other if is_number(other) => {
            let f = as_f64(other)?;
            if f.fract() != 0.0 || !(-TWO_POW_63..TWO_POW_63).contains(&f) {
                return None;
            }
            f as i64
        }
        _ => return None,
    };
    Some(if position >= 64 {
        int < 0
    } else {
        (int >> position) & 1 == 1
    })
}

fn parse_all(field: &str, arg: &Bson) -> Result<Pred> {
    let Bson::Array(items) = arg else {
        return Err(bad("$all needs an array"));
    };
    let first_key = |item: &Bson| match item {
        Bson::Document(d) => d.keys().next().cloned(),
        _ => None,
    };
    let mut preds = Vec::with_capacity(items.len());
    if items.first().and_then(first_key).as_deref() == Some("$elemMatch") {
        // `$all: [{$elemMatch: ..}, ...]`: every element must be an `$elemMatch`.
        for item in items {
            match (item, first_key(item).as_deref()) {
                (Bson::Document(d), Some("$elemMatch")) => {
                    let Some(Bson::Document(inner)) = d.get("$elemMatch") else {
                        return Err(bad("$elemMatch needs an Object"));
                    };
                    preds.push(parse_elem_match(field, inner)?);
                }
                _ => return Err(bad("$all/$elemMatch has to be consistent")),
            }
        }
        return Ok(Pred::All(preds));
    }
    for item in items {
        match item {
            Bson::RegularExpression(re) => {
                preds.push(Pred::Regex(Box::new(Regex::new(&re.pattern, &re.options)?)))
            }
            Bson::Document(_)
                if first_key(item).is_some_and(|k| FIELD_OPERATORS.contains(&k.as_str())) =>
            {
                return Err(bad("no $ expressions in $all"));
            }
            other => preds.push(Pred::Eq(other.clone())),
        }
    }
    if preds.is_empty() {
        // `$all: []` matches nothing.
        return Ok(Pred::In(Vec::new(), Vec::new()));
    }
    Ok(Pred::All(preds))
}

/// Whether an `$elemMatch` argument is a value form (`{$gt: 1}`) rather than a query on
/// document elements: as in mongod, its first field is an operator that is not a pathless
/// (top-level) one, and it has no DBRef field.
fn is_elem_match_value(doc: &Document) -> bool {
    let Some(first) = doc.keys().next() else {
        return false;
    };
    first.starts_with('$')
        && !["$ref", "$id", "$db"].iter().any(|k| doc.contains_key(*k))
        && !PATHLESS_OPERATORS.contains(&first.as_str())
}

fn parse_elem_match(field: &str, doc: &Document) -> Result<Pred> {
    if is_elem_match_value(doc) {
        match parse_operator_doc(field, doc)? {
            Pred::All(preds) => Ok(Pred::ElemMatchValue(preds)),
            pred => Ok(Pred::ElemMatchValue(vec![pred])),
        }
    } else {
        Ok(Pred::ElemMatchObj(Box::new(parse_nested_query(doc)?)))
    }
}

/// Parses a query applied to array elements (`$elemMatch`, `$pull`), where `$expr` is not
/// allowed.
fn parse_nested_query(doc: &Document) -> Result<Node> {
    let node = parse_tree(doc)?;
    if node.has_expr() {
        return Err(bad("$expr can only be applied to the top-level document"));
    }
    Ok(node)
}

impl Node {
    fn optimize(&mut self, ctx: &EvalContext) -> Result<()> {
        match self {
            Node::Expr(expr) => expr.optimize(ctx),
            Node::And(v) | Node::Or(v) | Node::Nor(v) => {
                v.iter_mut().try_for_each(|child| child.optimize(ctx))
            }
            Node::Const(_) => Ok(()),
            Node::Field { pred, .. } => pred.optimize(ctx),
        }
    }

    fn has_expr(&self) -> bool {
        match self {
            Node::Expr(_) => true,
            Node::And(v) | Node::Or(v) | Node::Nor(v) => v.iter().any(Node::has_expr),
            Node::Const(_) => false,
            Node::Field { pred, .. } => pred.has_expr(),
        }
    }

    /// `Some(index)` when matched (`index` is the positional element, if any).
    fn eval(&self, doc: &Document, ctx: &EvalContext) -> Result<Option<Option<usize>>> {
        match self {
            Node::Const(b) => Ok(b.then_some(None)),
            Node::And(children) => {
                let mut idx = None;
                for child in children {
                    match child.eval(doc, ctx)? {
                        None => return Ok(None),
                        Some(i) => idx = idx.or(i),
                    }
                }
                Ok(Some(idx))
            }
            Node::Or(children) => {
                for child in children {
                    if let Some(i) = child.eval(doc, ctx)? {
                        return Ok(Some(i));
                    }
                }
                Ok(None)
            }
            Node::Nor(children) => {
                for child in children {
                    if child.eval(doc, ctx)?.is_some() {
                        return Ok(None);
                    }
                }
                Ok(Some(None))
            }
            Node::Expr(expr) => {
                let value = expr.eval(doc, ctx)?;
                Ok(value.as_ref().is_some_and(truthy).then_some(None))
            }
            Node::Field { path, pred } => pred.eval_path(doc, path, ctx),
        }
    }
}

/// One value reached by a path: `None` is missing; `idx` is the element index in the first
/// array traversed.
struct Cand<'a> {
    value: Option<&'a Bson>,
    idx: Option<usize>,
}

/// Resolves `path` from `cur`, expanding arrays as mongod does.
fn walk<'a>(
    cur: Option<&'a Bson>,
    path: &[String],
    idx: Option<usize>,
    expand_leaf: bool,
    out: &mut Vec<Cand<'a>>,
) {
    let Some((head, rest)) = path.split_first() else {
        if let (Some(Bson::Array(items)), true) = (cur, expand_leaf) {
            for (i, item) in items.iter().enumerate() {
                out.push(Cand {
                    value: Some(item),
                    idx: idx.or(Some(i)),
                });
            }
        }
        out.push(Cand { value: cur, idx });
        return;
    };
    match cur {
        Some(Bson::Document(d)) => walk(d.get(head), rest, idx, expand_leaf, out),
        Some(Bson::Array(items)) => {
            // A numeric component is both an index into the array and a field name looked up
            // in its document elements (mongod's array iteration). An index past the end, or
            // an array with no documents, yields no value at all (not a missing one).
            if let Ok(n) = head.parse::<usize>()
                && head.bytes().all(|b| b.is_ascii_digit())
                && let Some(item) = items.get(n)
            {
                walk(Some(item), rest, idx, expand_leaf, out);
            }
            for (i, item) in items.iter().enumerate() {
                if let Bson::Document(d) = item {
                    walk(d.get(head), rest, idx.or(Some(i)), expand_leaf, out);
                }
            }
        }
        _ => out.push(Cand { value: None, idx }),
    }
}

impl Pred {
    fn optimize(&mut self, ctx: &EvalContext) -> Result<()> {
        match self {
            Pred::ElemMatchObj(node) => node.optimize(ctx),
            Pred::ElemMatchValue(preds) | Pred::All(preds) | Pred::Not(preds) => {
                preds.iter_mut().try_for_each(|p| p.optimize(ctx))
            }
            _ => Ok(()),
        }
    }

    fn has_expr(&self) -> bool {
        match self {
            Pred::ElemMatchObj(node) => node.has_expr(),
            Pred::ElemMatchValue(preds) | Pred::All(preds) | Pred::Not(preds) => {
                preds.iter().any(Pred::has_expr)
            }
            _ => false,
        }
    }

    /// Whether a leaf array is also tested element by element.
    fn expands_leaf(&self) -> bool {
        !matches!(
            self,
            Pred::Size(_) | Pred::ElemMatchObj(_) | Pred::ElemMatchValue(_)
        )
    }

    /// Evaluates the predicate on the values at `path` under `root`.
    fn eval_path(
        &self,
        root: &Document,
        path: &[String],
        ctx: &EvalContext,
    ) -> Result<Option<Option<usize>>> {
        match self {
            Pred::All(preds) => {
                let mut idx = None;
                for p in preds {
                    match p.eval_path(root, path, ctx)? {
                        None => return Ok(None),
                        Some(i) => idx = idx.or(i),
                    }
                }
                Ok(Some(idx))
            }
            Pred::Not(preds) => {
                for p in preds {
                    if p.eval_path(root, path, ctx)?.is_none() {
                        return Ok(Some(None));
                    }
                }
                Ok(None)
            }
            _ => {
                let mut cands = Vec::new();
                if let Some((head, rest)) = path.split_first() {
                    walk(root.get(head), rest, None, self.expands_leaf(), &mut cands);
                }
                for cand in &cands {
                    if self.test(cand.value, ctx)? {
                        let mut idx = cand.idx;
                        if let (
                            None,
                            Some(Bson::Array(items)),
                            Pred::ElemMatchObj(_) | Pred::ElemMatchValue(_),
                        ) = (idx, cand.value, self)
                        {
                            idx = self.first_matching_element(items, ctx)?;
                        }
                        return Ok(Some(idx));
                    }
                }
                Ok(None)
            }
        }
    }

    /// Tests one value (no array expansion); `None` is a missing value.
    fn test(&self, value: Option<&Bson>, ctx: &EvalContext) -> Result<bool> {
        Ok(match self {
            Pred::Eq(target) => eq_match(value, target),
            Pred::Cmp(op, target) => cmp_match(*op, value, target),
            Pred::Regex(re) => regex_match(re, value)?,
            Pred::In(values, regexes) => {
                if values.iter().any(|t| eq_match(value, t)) {
                    return Ok(true);
                }
                for re in regexes {
                    if regex_match(re, value)? {
                        return Ok(true);
                    }
                }
                false
            }
            Pred::Exists => value.is_some(),
            Pred::Type(types) => value.is_some_and(|v| {
                types.iter().any(|t| match t {
                    TypeSel::Number => is_number(v),
                    TypeSel::Code(c) => compare::type_code(v) == *c,
                })
            }),
            Pred::Size(n) => matches!(value, Some(Bson::Array(items)) if items.len() == *n),
            Pred::Bits(op, positions) => {
                let Some(v) = value else {
                    return Ok(false);
                };
                if bit_of(v, 0).is_none() {
                    return Ok(false);
                }
                let mut bits = positions.iter().map(|p| bit_of(v, *p).unwrap_or(false));
                match op {
                    BitOp::AllSet => bits.all(|b| b),
                    BitOp::AnySet => bits.any(|b| b),
                    BitOp::AllClear => bits.all(|b| !b),
                    BitOp::AnyClear => bits.any(|b| !b),
                }
            }
            Pred::Mod(divisor, remainder) => match value {
                Some(v) if is_number(v) => {
                    let as_long = match v {
                        Bson::Int32(i) => Some(i64::from(*i)),
                        Bson::Int64(i) => Some(*i),
                        other => as_f64(other)
                            .filter(|f| f.is_finite())
                            .map(|f| f.trunc() as i64),
                    };
                    as_long.is_some_and(|x| x.wrapping_rem(*divisor) == *remainder)
                }
                _ => false,
            },
            Pred::ElemMatchObj(node) => match value {
                Some(Bson::Array(items)) => {
                    for item in items {
                        if elem_matches_query(node, item, ctx)? {
                            return Ok(true);
                        }
                    }
                    false
                }
                _ => false,
            },
            Pred::ElemMatchValue(preds) => match value {
                Some(Bson::Array(items)) => {
                    for item in items {
                        if all_test(preds, Some(item), ctx)? {
                            return Ok(true);
                        }
                    }
                    false
                }
                _ => false,
            },
            Pred::All(preds) => all_test(preds, value, ctx)?,
            Pred::Not(preds) => !all_test(preds, value, ctx)?,
        })
    }

    /// For `$elemMatch` over arrays: the index of the first element that matched.
    fn first_matching_element(&self, items: &[Bson], ctx: &EvalContext) -> Result<Option<usize>> {
        for (i, item) in items.iter().enumerate() {
            let ok = match self {
                Pred::ElemMatchObj(node) => elem_matches_query(node, item, ctx)?,
                Pred::ElemMatchValue(preds) => all_test(preds, Some(item), ctx)?,
                other => other.test(Some(item), ctx)?,
            };
            if ok {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }
}

/// An `$elemMatch` query on one array element: documents are queried as they are, arrays as
/// documents keyed by their indexes (`{$elemMatch: {"0": "x"}}` matches `[["x"]]`), other
/// values never match.
fn elem_matches_query(node: &Node, item: &Bson, ctx: &EvalContext) -> Result<bool> {
    match item {
        Bson::Document(d) => Ok(node.eval(d, ctx)?.is_some()),
        Bson::Array(items) => {
            let d: Document = items
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v.clone()))
                .collect();
            Ok(node.eval(&d, ctx)?.is_some())
        }
        _ => Ok(false),
    }
}

fn all_test(preds: &[Pred], value: Option<&Bson>, ctx: &EvalContext) -> Result<bool> {
    for p in preds {
        if !p.test(value, ctx)? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn eq_match(value: Option<&Bson>, target: &Bson) -> bool {
    match (value, target) {
        // Since MongoDB 8.0, equality to null no longer matches `undefined` values.
        (None, Bson::Null) => true,
        (None, _) => false,
        (Some(v), t) => canonical_rank(v) == canonical_rank(t) && compare::values_equal(v, t),
    }
}

fn cmp_match(op: CmpOp, value: Option<&Bson>, target: &Bson) -> bool {
    let inclusive = matches!(op, CmpOp::Gte | CmpOp::Lte);
    if inclusive && eq_match(value, target) {
        return true;
    }
    let Some(v) = value else {
        return false;
    };
    let cross_type = matches!(target, Bson::MinKey | Bson::MaxKey);
    if !cross_type && canonical_rank(v) != canonical_rank(target) {
        return false;
    }
    let ord = compare::compare(v, target);
    match op {
        CmpOp::Gt => ord.is_gt(),
        CmpOp::Gte => ord.is_ge(),
        CmpOp::Lt => ord.is_lt(),
        CmpOp::Lte => ord.is_le(),
    }
}

fn regex_match(re: &Regex, value: Option<&Bson>) -> Result<bool> {
    match value {
        Some(Bson::String(s) | Bson::Symbol(s)) => re.is_match(s),
        Some(Bson::RegularExpression(r)) => {
            Ok(r.pattern == re.pattern() && r.options == re.options())
        }
        _ => Ok(false),
    }
}

impl Matcher {
    /// Parses a filter document; unknown operators fail with mongod's error.
    pub fn parse(filter: &Document) -> Result<Matcher> {
        Ok(Matcher {
            root: parse_tree(filter)?,
        })
    }

    /// Whether the filter uses `$expr` anywhere (forbidden in upsert filters).
    pub fn has_expr(&self) -> bool {
        self.root.has_expr()
    }

    /// Optimizes every `$expr` of the query for one command, as mongod does when it
    /// canonicalizes a query (`ExprMatchExpression::getOptimizer` in
    /// `src/mongo/db/matcher/expression_expr.cpp`): see [`Expr::optimize`].
    ///
    /// # Errors
    ///
    /// The error of a constant sub-expression of an `$expr`.
    pub fn optimize(&mut self, ctx: &EvalContext) -> Result<()> {
        self.root.optimize(ctx)
    }

    /// Whether `doc` matches.
    pub fn matches(&self, doc: &Document, ctx: &EvalContext) -> Result<bool> {
        Ok(self.match_details(doc, ctx)?.is_some())
    }

    /// `Some(details)` if `doc` matches, `None` if not.
    pub fn match_details(&self, doc: &Document, ctx: &EvalContext) -> Result<Option<MatchDetails>> {
        Ok(self
            .root
            .eval(doc, ctx)?
            .map(|elem_match_index| MatchDetails { elem_match_index }))
    }
}

/// A condition on a single value, as in `$elemMatch` and `$pull`: an operator document
/// (`{$gte: 5}`), a query on a sub-document (`{a: 1}`), or a plain value (equality).
#[derive(Debug, Clone)]
pub struct ValueMatcher {
    kind: ValueKind,
}

#[derive(Debug, Clone)]
enum ValueKind {
    /// Operators applied to the value as if it were a field (arrays are expanded).
    Ops(Pred),
    /// A query on document values; non-documents never match.
    Query(Box<Node>),
    /// Exact equality (MongoDB equality: `1 == 1.0`, field order matters).
    Equals(Bson),
    /// `$elemMatch` semantics over an array's elements.
    ElemMatch(Pred),
}

impl ValueMatcher {
    /// Parses a `$pull` condition, with mongod's `$pull` semantics:
    ///
    /// * a document whose first field is a field operator (`{$gte: 6}`, `{$in: [..]}`)
    ///   applies its operators to each
    ///   element as if the element were a field (an element that is an array is expanded);
    /// * any other document (`{score: 8, item: "B"}`, `{$or: [..]}`) is a query run on each element
    ///   as though it were a top-level document, so extra fields in the element are allowed and
    ///   non-document elements never match;
    /// * a regular expression matches string elements;
    /// * any other value matches elements equal to it.
    pub fn parse(condition: &Bson) -> Result<ValueMatcher> {
        let kind = match condition {
            Bson::Document(d)
                if d.keys()
                    .next()
                    .is_some_and(|k| FIELD_OPERATORS.contains(&k.as_str())) =>
            {
                ValueKind::Ops(parse_operator_doc("", d)?)
            }
            Bson::Document(d) => ValueKind::Query(Box::new(parse_nested_query(d)?)),
            Bson::RegularExpression(re) => {
                ValueKind::Ops(Pred::Regex(Box::new(Regex::new(&re.pattern, &re.options)?)))
            }
            other => ValueKind::Equals(other.clone()),
        };
        Ok(ValueMatcher { kind })
    }

    /// Parses the argument of an `$elemMatch` (`{$gt: 1}` for scalar elements, or a query such
    /// as `{a: 1, b: {$gt: 2}}` for document elements). [`ValueMatcher::matches`] then takes
    /// the *array* and is true if some element satisfies the condition;
    /// [`ValueMatcher::first_match`] gives that element's index (for the `$elemMatch`
    /// projection).
    pub fn elem_match(condition: &Document) -> Result<ValueMatcher> {
        Ok(ValueMatcher {
            kind: ValueKind::ElemMatch(parse_elem_match("", condition)?),
        })
    }

    /// Whether `value` satisfies the condition.
    pub fn matches(&self, value: &Bson, ctx: &EvalContext) -> Result<bool> {
        match &self.kind {
            ValueKind::Ops(pred) => {
                let wrapped = bson::doc! { "": value.clone() };
                Ok(pred.eval_path(&wrapped, &[String::new()], ctx)?.is_some())
            }
            ValueKind::Query(node) => match value {
                Bson::Document(d) => Ok(node.eval(d, ctx)?.is_some()),
                _ => Ok(false),
            },
            ValueKind::Equals(target) => Ok(canonical_rank(value) == canonical_rank(target)
                && compare::values_equal(value, target)),
            ValueKind::ElemMatch(pred) => pred.test(Some(value), ctx),
        }
    }

    /// For an `$elemMatch` matcher: the index of the first element of `array` that satisfies
    /// it. For other matchers: the first element that [`ValueMatcher::matches`].
    pub fn first_match(&self, array: &[Bson], ctx: &EvalContext) -> Result<Option<usize>> {
        match &self.kind {
            ValueKind::ElemMatch(pred) => pred.first_matching_element(array, ctx),
            _ => {
                for (i, item) in array.iter().enumerate() {
                    if self.matches(item, ctx)? {
                        return Ok(Some(i));
                    }
                }
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{DateTime, Regex as BsonRegex, doc, oid::ObjectId};

    fn ctx() -> EvalContext {
        EvalContext::at(DateTime::from_millis(0))
    }

    fn matches(filter: Document, doc: Document) -> bool {
        Matcher::parse(&filter)
            .unwrap_or_else(|e| panic!("parse {filter}: {e}"))
            .matches(&doc, &ctx())
            .unwrap_or_else(|e| panic!("match {filter}: {e}"))
    }

    fn parse_err(filter: Document) -> CommandError {
        match Matcher::parse(&filter) {
            Ok(_) => panic!("{filter} parsed"),
            Err(e) => e,
        }
    }

    fn re(pattern: &str, options: &str) -> Bson {
        Bson::RegularExpression(BsonRegex {
            pattern: pattern.into(),
            options: options.into(),
        })
    }

    #[test]
    fn equality_and_comparison() {
        let d =
            doc! {"a": 5, "s": "abc", "n": Bson::Null, "o": {"x": 1, "y": 2}, "u": Bson::Undefined};
        let cases: Vec<(Document, bool)> = vec![
            (doc! {}, true),
            (doc! {"a": 5}, true),
            (doc! {"a": 5.0}, true),
            (doc! {"a": 6}, false),
            (doc! {"a": "5"}, false),
            (doc! {"a": {"$eq": 5_i64}}, true),
            (doc! {"a": {"$ne": 5}}, false),
            (doc! {"a": {"$ne": 4}}, true),
            (doc! {"a": {"$gt": 4}}, true),
            (doc! {"a": {"$gt": 5}}, false),
            (doc! {"a": {"$gte": 5}}, true),
            (doc! {"a": {"$lt": 5.5}}, true),
            (doc! {"a": {"$lte": 4}}, false),
            (doc! {"a": {"$gt": "4"}}, false),
            (doc! {"s": {"$gt": 4}}, false),
            (doc! {"s": {"$gt": "abb", "$lt": "abd"}}, true),
            (doc! {"a": {"$gt": Bson::MinKey}}, true),
            (doc! {"a": {"$lt": Bson::MaxKey}}, true),
            (doc! {"o": {"x": 1, "y": 2}}, true),
            (doc! {"o": {"y": 2, "x": 1}}, false),
            (doc! {"o.x": 1}, true),
            (doc! {"o.z": Bson::Null}, true),
            (doc! {"missing": Bson::Null}, true),
            (doc! {"n": Bson::Null}, true),
            (doc! {"u": Bson::Null}, false),
            (doc! {"u": {"$ne": Bson::Null}}, true),
            (doc! {"u": {"$type": "undefined"}}, true),
            (doc! {"a": Bson::Null}, false),
            (doc! {"missing": {"$ne": Bson::Null}}, false),
            (doc! {"a": {"$ne": Bson::Null}}, true),
            (doc! {"missing": {"$gte": Bson::Null}}, true),
            (doc! {"missing": {"$gt": Bson::Null}}, false),
            (doc! {"missing": {"$lt": 1}}, false),
            (doc! {"missing": {"$ne": 1}}, true),
            (doc! {"a": {"$in": [1, 5]}}, true),
            (doc! {"a": {"$in": []}}, false),
            (doc! {"missing": {"$in": [Bson::Null]}}, true),
            (doc! {"a": {"$nin": [1, 5]}}, false),
            (doc! {"a": {"$nin": [1, 2]}}, true),
            (doc! {"s": {"$in": [re("^a", "")]}}, true),
            (doc! {"s": {"$nin": [re("^b", "")]}}, true),
            (doc! {"a": 5, "$comment": "ignored"}, true),
            (doc! {"$alwaysTrue": 1}, true),
            (doc! {"$alwaysFalse": 1}, false),
            (doc! {"o": {"$ref": "c", "$id": 1}}, false),
        ];
        for (filter, want) in cases {
            assert_eq!(matches(filter.clone(), d.clone()), want, "{filter}");
        }
    }

    #[test]
    fn logical_operators() {
        let d = doc! {"a": 1, "b": 2};
        let cases: Vec<(Document, bool)> = vec![
            (doc! {"$and": [{"a": 1}, {"b": 2}]}, true),
            (doc! {"$and": [{"a": 1}, {"b": 3}]}, false),
            (doc! {"$or": [{"a": 2}, {"b": 2}]}, true),
            (doc! {"$or": [{"a": 2}, {"b": 3}]}, false),
            (doc! {"$nor": [{"a": 2}, {"b": 3}]}, true),
            (doc! {"$nor": [{"a": 1}, {"b": 3}]}, false),
            (doc! {"a": {"$not": {"$gt": 5}}}, true),
            (doc! {"a": {"$not": {"$lt": 5}}}, false),
            (doc! {"missing": {"$not": {"$gt": 5}}}, true),
            (doc! {"a": {"$not": {"$gt": 0, "$lt": 2}}}, false),
            (doc! {"a": {"$not": {"$gt": 1, "$lt": 2}}}, true),
            (
                doc! {"$or": [{"$and": [{"a": 1}, {"b": {"$gt": 1}}]}, {"a": 9}]},
                true,
            ),
        ];
        for (filter, want) in cases {
            assert_eq!(matches(filter.clone(), d.clone()), want, "{filter}");
        }
    }

    #[test]
    fn arrays_and_dotted_paths() {
        let d = doc! {
            "a": [1, 5],
            "n": [[1, 2], 3],
            "docs": [{"b": 1, "c": "x"}, {"b": 2}, 7],
            "deep": {"e": [{"f": [{"g": 4}]}]},
            "empty": [],
            "scalars": [1, 2],
            "zero": [{"0": "x"}],
        };
        let cases: Vec<(Document, bool)> = vec![
            (doc! {"a": 5}, true),
            (doc! {"a": [1, 5]}, true),
            (doc! {"a": [5, 1]}, false),
            (doc! {"a": {"$gt": 4}}, true),
            (doc! {"a": {"$gt": 5}}, false),
            (doc! {"a": {"$gt": 2, "$lt": 4}}, true), // different elements may satisfy each
            (doc! {"a": {"$elemMatch": {"$gt": 2, "$lt": 4}}}, false),
            (doc! {"a": {"$elemMatch": {"$gt": 4, "$lt": 6}}}, true),
            (doc! {"a": {"$ne": 5}}, false),
            (doc! {"a": {"$nin": [7, 1]}}, false),
            (doc! {"a.0": 1}, true),
            (doc! {"a.1": 1}, false),
            (doc! {"a.5": Bson::Null}, false),
            (doc! {"a.5": {"$exists": false}}, true),
            (doc! {"zero.0": "x"}, true),
            (doc! {"zero.0.0": "x"}, true),
            (doc! {"n": [1, 2]}, true),
            (doc! {"n": 1}, false),
            (doc! {"n.0": [1, 2]}, true),
            (doc! {"n.0.1": 2}, true),
            (doc! {"docs.b": 2}, true),
            (doc! {"docs.b": 3}, false),
            (doc! {"docs.c": Bson::Null}, true),
            (doc! {"docs.b": {"$gte": 2}}, true),
            (doc! {"docs.0.b": 1}, true),
            (doc! {"docs.1.b": 1}, false),
            (doc! {"docs": {"b": 2}}, true),
            (doc! {"docs": {"$elemMatch": {"b": 1, "c": "x"}}}, true),
            (doc! {"docs": {"$elemMatch": {"b": 2, "c": "x"}}}, false),
            (doc! {"docs.b": 2, "docs.c": "x"}, true),
            (doc! {"deep.e.f.g": 4}, true),
            (doc! {"deep.e.f.g": {"$lt": 4}}, false),
            (doc! {"a": {"$size": 2}}, true),
            (doc! {"a": {"$size": 1}}, false),
            (doc! {"n": {"$size": 2}}, true),
            (doc! {"empty": {"$size": 0}}, true),
            (doc! {"a": {"$size": 2.0}}, true),
            (doc! {"a": {"$all": [5, 1]}}, true),
            (doc! {"a": {"$all": [5, 2]}}, false),
            (doc! {"a": {"$all": []}}, false),
            (doc! {"n": {"$all": [[1, 2]]}}, true),
            (
                doc! {"docs": {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"b": 2}}]}},
                true,
            ),
            (
                doc! {"docs": {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"b": 9}}]}},
                false,
            ),
            (doc! {"empty": Bson::Null}, false),
            (doc! {"empty": {"$exists": true}}, true),
            (doc! {"empty": []}, true),
            (doc! {"a": {"$in": [[1, 5]]}}, true),
            // No value of `x.b` exists under an empty array or an array of scalars.
            (doc! {"empty.b": Bson::Null}, false),
            (doc! {"scalars.b": Bson::Null}, false),
            (doc! {"empty.b": {"$exists": false}}, true),
            (doc! {"scalars.b": {"$ne": 1}}, true),
            // A scalar on the path leaves the rest missing.
            (doc! {"a.0.b": Bson::Null}, true),
            (doc! {"deep.e.f.g.h": Bson::Null}, true),
            (doc! {"deep.e.f.g.h": {"$exists": true}}, false),
        ];
        for (filter, want) in cases {
            assert_eq!(matches(filter.clone(), d.clone()), want, "{filter}");
        }
    }

    #[test]
    fn array_cases_from_mongod_jstests() {
        let cases: Vec<(Document, Document, bool)> = vec![
            // array_match2.js: a numeric component is an index and a field name.
            (doc! {"a": [{"1": 4}, 5]}, doc! {"a.1": 4}, true),
            (doc! {"a": [{"1": 4}, 5]}, doc! {"a.1": 5}, true),
            (
                doc! {"a": [{"1": {"foo": 4}}, {"foo": 5}]},
                doc! {"a.1.foo": 4},
                true,
            ),
            (
                doc! {"a": [{"1": {"foo": 4}}, {"foo": 5}]},
                doc! {"a.1.foo": 5},
                true,
            ),
            (
                doc! {"a": [{"1": {"foo": 4}}, {}]},
                doc! {"a.1": {"$exists": true}},
                true,
            ),
            (
                doc! {"a": [{"1": {"foo": 4}}, {}]},
                doc! {"a.1.foo": {"$exists": true}},
                true,
            ),
            // multi.js: leaf arrays expand one level only.
            (doc! {"a": [[[1]]]}, doc! {"a": 1}, false),
            (doc! {"a": [[[1]]]}, doc! {"a": [1]}, false),
            (doc! {"a": [[[1]]]}, doc! {"a": [[1]]}, true),
            (doc! {"a": [[[1]]]}, doc! {"a": [[[1]]]}, true),
            (doc! {"a": [1, 2]}, doc! {"a": {"$ne": 1}}, false),
            (
                doc! {"a": [{"b": 1}, {"b": 2}]},
                doc! {"a.b": {"$ne": 1}},
                false,
            ),
            // arrayfind9.js: $elemMatch forms.
            (
                doc! {"a": [1]},
                doc! {"a": {"$elemMatch": {"$not": {"$ne": 1}}}},
                true,
            ),
            (
                doc! {"a": [{}]},
                doc! {"a": {"$elemMatch": {"$gte": {}}}},
                true,
            ),
            (
                doc! {"a": [[]]},
                doc! {"a": {"$elemMatch": {"$in": [[]]}}},
                true,
            ),
            (
                doc! {"a": [["x"]]},
                doc! {"a": {"$elemMatch": {"0": "x"}}},
                true,
            ),
            // arrayfinda.js: $elemMatch only matches inside arrays.
            (
                doc! {"a": {"b": 1}},
                doc! {"a": {"$elemMatch": {"b": 1}}},
                false,
            ),
            (
                doc! {"a": [{"b": 1}]},
                doc! {"a": {"$elemMatch": {"b": {"$gte": 1}}}},
                true,
            ),
            // array4.js: "a.0" on a document with a field "0"; undefined never matches arrays.
            (doc! {"a": {"0": "1"}}, doc! {"a.0": re("1", "")}, true),
            (doc! {"a": ["2", "1"]}, doc! {"a.0": re("1", "")}, false),
            (
                doc! {"a": [5, "foo"]},
                doc! {"a": {"$in": [Bson::Undefined]}},
                false,
            ),
        ];
        for (d, filter, want) in cases {
            assert_eq!(matches(filter.clone(), d.clone()), want, "{filter} on {d}");
        }
    }

    #[test]
    fn null_through_arrays_follows_mongod() {
        // mongod's jstests/core/null2.js: {"a.b": null} and {"a.b": {$in: [null]}}.
        let docs = [
            (doc! {"a": [{"b": 5}]}, false),
            (doc! {"a": [{}]}, true),
            (doc! {"a": []}, false),
            (doc! {"a": [{}, {"b": 5}]}, true),
            (doc! {"a": [5, {"b": 5}]}, false),
            (doc! {"a": [{"b": []}, {"b": {"c": 1}}]}, false),
        ];
        for (d, want) in docs {
            assert_eq!(matches(doc! {"a.b": Bson::Null}, d.clone()), want, "{d}");
            assert_eq!(
                matches(doc! {"a.b": {"$in": [Bson::Null]}}, d.clone()),
                want,
                "{d}"
            );
        }
        assert!(!matches(
            doc! {"a.b.c": Bson::Null},
            doc! {"a": [{"b": []}, {"b": {"c": 1}}]}
        ));
        assert!(matches(
            doc! {"a": {"$elemMatch": {"b": Bson::Null}}},
            doc! {"a": [{}]}
        ));
        assert!(!matches(
            doc! {"a": {"$elemMatch": {"b": Bson::Null}}},
            doc! {"a": [1]}
        ));
    }

    #[test]
    fn exists_type_mod_regex() {
        let oid = ObjectId::new();
        let d = doc! {
            "docs": [{"c": 1}, {"d": 2}],
            "i": 7, "l": 7_i64, "f": 7.9, "s": "Hello\nworld", "o": {}, "arr": [1, "x"],
            "id": oid, "t": true, "nil": Bson::Null, "r": re("^h", "i"),
        };
        let cases: Vec<(Document, bool)> = vec![
            (doc! {"i": {"$exists": true}}, true),
            (doc! {"i": {"$exists": 0}}, false),
            (doc! {"zz": {"$exists": false}}, true),
            (doc! {"docs.c": {"$exists": false}}, false),
            (doc! {"docs.z": {"$exists": false}}, true),
            (doc! {"nil": {"$exists": true}}, true),
            (doc! {"o.x": {"$exists": true}}, false),
            (doc! {"i": {"$type": "int"}}, true),
            (doc! {"i": {"$type": 16}}, true),
            (doc! {"l": {"$type": "long"}}, true),
            (doc! {"l": {"$type": "int"}}, false),
            (doc! {"f": {"$type": "number"}}, true),
            (doc! {"s": {"$type": "number"}}, false),
            (doc! {"s": {"$type": ["number", "string"]}}, true),
            (doc! {"o": {"$type": "object"}}, true),
            (doc! {"arr": {"$type": "array"}}, true),
            (doc! {"arr": {"$type": "string"}}, true),
            (doc! {"id": {"$type": "objectId"}}, true),
            (doc! {"t": {"$type": 8}}, true),
            (doc! {"nil": {"$type": "null"}}, true),
            (doc! {"zz": {"$type": "null"}}, false),
            (doc! {"r": {"$type": "regex"}}, true),
            (doc! {"i": {"$mod": [4, 3]}}, true),
            (doc! {"i": {"$mod": [4, 2]}}, false),
            (doc! {"f": {"$mod": [4, 3]}}, true),
            (doc! {"i": {"$mod": [-4, 3]}}, true),
            (doc! {"s": {"$mod": [4, 3]}}, false),
            (doc! {"s": re("^hello", "")}, false),
            (doc! {"s": re("^hello", "i")}, true),
            (doc! {"s": re("^world", "m")}, true),
            (doc! {"s": {"$regex": "^world", "$options": "m"}}, true),
            (doc! {"s": {"$regex": "^world"}}, false),
            (doc! {"s": {"$regex": re("O\\sW", "i")}}, true),
            (doc! {"s": {"$not": re("^x", "")}}, true),
            (doc! {"s": {"$not": re("^H", "")}}, false),
            (doc! {"arr": re("x", "")}, true),
            (doc! {"i": re("7", "")}, false),
            (doc! {"r": re("^h", "i")}, true),
            (doc! {"r": {"$eq": re("^h", "i")}}, true),
            (doc! {"s": {"$eq": re("^H", "")}}, false),
        ];
        for (filter, want) in cases {
            assert_eq!(matches(filter.clone(), d.clone()), want, "{filter}");
        }
    }

    #[test]
    fn bitwise_operators() {
        use bson::{Binary, spec::BinarySubtype};
        let bin = |bytes: Vec<u8>| {
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes,
            })
        };
        // 54 = 0b110110; -1 has every bit set.
        let d = doc! {"n": 54, "neg": -1_i64, "f": 54.0, "frac": 54.5, "s": "54", "b": bin(vec![0b0011_0110])};
        let cases: Vec<(Document, bool)> = vec![
            (doc! {"n": {"$bitsAllSet": [1, 5]}}, true),
            (doc! {"n": {"$bitsAllSet": [0, 1]}}, false),
            (doc! {"n": {"$bitsAllSet": 50}}, true), // 0b110010
            (doc! {"n": {"$bitsAnySet": [0, 1]}}, true),
            (doc! {"n": {"$bitsAnySet": [0, 3]}}, false),
            (doc! {"n": {"$bitsAllClear": [0, 3]}}, true),
            (doc! {"n": {"$bitsAllClear": [0, 1]}}, false),
            (doc! {"n": {"$bitsAnyClear": [1, 3]}}, true),
            (doc! {"n": {"$bitsAnyClear": [1, 2]}}, false),
            (doc! {"n": {"$bitsAllSet": bin(vec![0b0011_0000])}}, true),
            (doc! {"neg": {"$bitsAllSet": [0, 63, 200]}}, true),
            (doc! {"f": {"$bitsAllSet": [1, 2]}}, true),
            (doc! {"frac": {"$bitsAllSet": [1]}}, false),
            (doc! {"frac": {"$bitsAllClear": [0]}}, false),
            (doc! {"s": {"$bitsAllClear": [0]}}, false),
            (doc! {"b": {"$bitsAllSet": [1, 2, 4, 5]}}, true),
            (doc! {"b": {"$bitsAnySet": [8, 100]}}, false),
            (doc! {"missing": {"$bitsAllClear": [0]}}, false),
        ];
        for (filter, want) in cases {
            assert_eq!(matches(filter.clone(), d.clone()), want, "{filter}");
        }
        let errors: Vec<(Document, i32, &str)> = vec![
            (
                doc! {"a": {"$bitsAllSet": [-1]}},
                2,
                "bit positions must be >= 0 but got: -1",
            ),
            (
                doc! {"a": {"$bitsAllSet": ["x"]}},
                2,
                "bit positions must be an integer but got: \"x\"",
            ),
            (
                doc! {"a": {"$bitsAllSet": [1.5]}},
                2,
                "bit positions must be an integer but got: 1.5",
            ),
            (
                doc! {"a": {"$bitsAnySet": -1}},
                9,
                "Expected a positive number in: $bitsAnySet: -1",
            ),
            (
                doc! {"a": {"$bitsAnySet": 1.5}},
                9,
                "Expected an integer: $bitsAnySet: 1.5",
            ),
            (
                doc! {"a": {"$bitsAllClear": "x"}},
                2,
                "$bitsAllClear takes an Array, a number, or a BinData but received: $bitsAllClear: \"x\"",
            ),
        ];
        for (filter, code, msg) in errors {
            let err = parse_err(filter.clone());
            assert_eq!((err.code, err.errmsg.as_str()), (code, msg), "{filter}");
        }
    }

    #[test]
    fn elem_match_index_is_reported() {
        let d = doc! {"a": [1, 5, 9], "docs": [{"b": 1}, {"b": 2}, {"b": 2}], "x": 1};
        let cases: Vec<(Document, Option<usize>)> = vec![
            (doc! {"a": 5}, Some(1)),
            (doc! {"a": {"$gt": 4}}, Some(1)),
            (doc! {"a": [1, 5, 9]}, None),
            (doc! {"docs.b": 2}, Some(1)),
            (doc! {"docs": {"$elemMatch": {"b": 2}}}, Some(1)),
            (doc! {"x": 1, "docs.b": 2}, Some(1)),
            (doc! {"x": 1}, None),
            (doc! {"a": {"$elemMatch": {"$gt": 6}}}, Some(2)),
        ];
        for (filter, want) in cases {
            let got = Matcher::parse(&filter)
                .unwrap()
                .match_details(&d, &ctx())
                .unwrap();
            assert_eq!(
                got,
                Some(MatchDetails {
                    elem_match_index: want
                }),
                "{filter}"
            );
        }
        let none = Matcher::parse(&doc! {"a": 7})
            .unwrap()
            .match_details(&d, &ctx())
            .unwrap();
        assert_eq!(none, None);
    }

    #[test]
    fn parse_errors_have_mongod_shape() {
        let cases: Vec<(Document, i32, &str)> = vec![
            (
                doc! {"$foo": 1},
                2,
                "unknown top level operator: $foo. If you have a field name that starts with a '$' \
                 symbol, consider using $getField or $setField.",
            ),
            (doc! {"a": {"$foo": 1}}, 2, "unknown operator: $foo"),
            (doc! {"a": {"$gt": 1, "b": 1}}, 2, "unknown operator: b"),
            (
                doc! {"$and": []},
                2,
                "$and/$or/$nor must be a nonempty array",
            ),
            (doc! {"$or": 1}, 2, "$or must be an array"),
            (
                doc! {"$nor": [1]},
                2,
                "$or/$and/$nor entries need to be full objects",
            ),
            (doc! {"a": {"$in": 1}}, 2, "$in needs an array"),
            (doc! {"a": {"$nin": "x"}}, 2, "$nin needs an array"),
            (
                doc! {"a": {"$in": [{"$gt": 1}]}},
                2,
                "cannot nest $ under $in",
            ),
            (doc! {"a": {"$size": "1"}}, 2, "$size needs a number"),
            (doc! {"a": {"$size": -1}}, 2, "$size may not be negative"),
            (
                doc! {"a": {"$type": "nope"}},
                2,
                "Unknown type name alias: nope",
            ),
            (
                doc! {"a": {"$type": 42}},
                2,
                "Invalid numerical type code: 42",
            ),
            (
                doc! {"a": {"$type": []}},
                9,
                "$type must match at least one type",
            ),
            (
                doc! {"a": {"$type": true}},
                14,
                "type must be represented as a number or a string",
            ),
            (
                doc! {"a": {"$mod": 1}},
                2,
                "malformed mod, needs to be an array",
            ),
            (
                doc! {"a": {"$mod": [1]}},
                2,
                "malformed mod, not enough elements",
            ),
            (
                doc! {"a": {"$mod": [1, 2, 3]}},
                2,
                "malformed mod, too many elements",
            ),
            (
                doc! {"a": {"$mod": ["1", 2]}},
                2,
                "malformed mod, divisor not a number",
            ),
            (
                doc! {"a": {"$mod": [1, "2"]}},
                2,
                "malformed mod, remainder not a number",
            ),
            (doc! {"a": {"$mod": [0, 1]}}, 2, "divisor cannot be 0"),
            (
                doc! {"a": {"$not": 1}},
                2,
                "$not needs a regex or a document",
            ),
            (doc! {"a": {"$not": {}}}, 2, "$not cannot be empty"),
            (
                doc! {"a": {"$elemMatch": 1}},
                2,
                "$elemMatch needs an Object",
            ),
            (doc! {"a": {"$all": 1}}, 2, "$all needs an array"),
            (
                doc! {"a": {"$all": [{"$elemMatch": {"b": 1}}, 1]}},
                2,
                "$all/$elemMatch has to be consistent",
            ),
            (
                doc! {"a": {"$all": [{"$gt": 1}]}},
                2,
                "no $ expressions in $all",
            ),
            (doc! {"a": {"$options": "i"}}, 2, "$options needs a $regex"),
            (doc! {"a": {"$regex": 1}}, 2, "$regex has to be a string"),
            (
                doc! {"a": {"$regex": re("x", "i"), "$options": "m"}},
                51075,
                "options set in both $regex and $options",
            ),
            (
                doc! {"a": {"$regex": "x", "$options": "q"}},
                51108,
                "invalid flag in regex options: q",
            ),
            (
                doc! {"a": {"$gt": re("x", "")}},
                2,
                "Can't have RegEx as arg to predicate over field 'a'.",
            ),
            (
                doc! {"$alwaysTrue": 0},
                9,
                "$alwaysTrue must be an integer value of 1",
            ),
            (
                doc! {"a": {"$elemMatch": {"$expr": {"$eq": ["$b", 1]}}}},
                2,
                "$expr can only be applied to the top-level document",
            ),
        ];
        for (filter, code, msg) in cases {
            let err = parse_err(filter.clone());
            assert_eq!((err.code, err.errmsg.as_str()), (code, msg), "{filter}");
        }
        let more: Vec<(Document, i32, &str)> = vec![
            (
                doc! {"a": {"$size": 1.5}},
                2,
                "$size must be a whole number",
            ),
            (
                doc! {"a": {"$size": 1_i64 << 40}},
                2,
                "$size must be representable as a 32-bit integer",
            ),
            (doc! {"a": {"$size": -1.0}}, 2, "$size may not be negative"),
            (
                doc! {"a": {"$where": "x"}},
                2,
                "$where cannot be applied to a field",
            ),
            (
                doc! {"a": {"$all": [1, {"$elemMatch": {"b": 1}}]}},
                2,
                "no $ expressions in $all",
            ),
            (
                doc! {"$alwaysFalse": "x"},
                9,
                "Expected a number in: $alwaysFalse: \"x\"",
            ),
            (
                doc! {"$alwaysTrue": 1.5},
                9,
                "Expected an integer: $alwaysTrue: 1.5",
            ),
        ];
        assert!(Matcher::parse(&doc! {"$alwaysTrue": 1.0}).is_ok());
        for (filter, code, msg) in more {
            let err = parse_err(filter.clone());
            assert_eq!((err.code, err.errmsg.as_str()), (code, msg), "{filter}");
        }
        for op in ["$where", "$text", "$jsonSchema"] {
            let err = parse_err(doc! {op: {}});
            assert_eq!(err.code, 2);
            assert!(
                err.errmsg
                    .starts_with(&format!("unknown top level operator: {op}.")),
                "{}",
                err.errmsg
            );
        }
        let err = parse_err(doc! {"a": {"$regex": "(x"}});
        assert_eq!(err.code, 51091);
        assert!(
            err.errmsg.starts_with("Regular expression is invalid"),
            "{}",
            err.errmsg
        );
    }

    #[test]
    fn has_expr_finds_nested_expr() {
        let with = [
            doc! {"$expr": {"$eq": ["$a", 1]}},
            doc! {"$or": [{"a": 1}, {"$expr": true}]},
        ];
        for f in with {
            assert!(Matcher::parse(&f).unwrap().has_expr(), "{f}");
        }
        let without = [
            doc! {"a": 1},
            doc! {"$and": [{"a": {"$elemMatch": {"b": 1}}}]},
        ];
        for f in without {
            assert!(!Matcher::parse(&f).unwrap().has_expr(), "{f}");
        }
    }

    #[test]
    fn expr_uses_aggregation_truthiness() {
        let d = doc! {"a": 3, "b": 5, "z": 0};
        let cases: Vec<(Document, bool)> = vec![
            (doc! {"$expr": {"$lt": ["$a", "$b"]}}, true),
            (doc! {"$expr": {"$gt": ["$a", "$b"]}}, false),
            (doc! {"$expr": "$z"}, false),
            (doc! {"$expr": "$missing"}, false),
            (doc! {"$expr": "$a"}, true),
            (doc! {"a": 3, "$expr": {"$eq": ["$b", 5]}}, true),
        ];
        for (filter, want) in cases {
            assert_eq!(matches(filter.clone(), d.clone()), want, "{filter}");
        }
    }

    #[test]
    fn value_matcher_pull_semantics() {
        let c = ctx();
        let vm = |cond: Bson| ValueMatcher::parse(&cond).unwrap();
        let cases: Vec<(Bson, Bson, bool)> = vec![
            (bson::bson!({"$gte": 6}), Bson::Int32(6), true),
            (bson::bson!({"$gte": 6}), Bson::Int32(5), false),
            (bson::bson!({"$gte": 6}), bson::bson!([1, 7]), true),
            (
                bson::bson!({"$in": ["a", "b"]}),
                Bson::String("b".into()),
                true,
            ),
            (
                bson::bson!({"score": 8, "item": "B"}),
                bson::bson!({"item": "B", "score": 8, "extra": 1}),
                true,
            ),
            (
                bson::bson!({"score": 8, "item": "B"}),
                bson::bson!({"item": "A", "score": 8}),
                false,
            ),
            (bson::bson!({"score": 8}), Bson::Int32(8), false),
            (
                bson::bson!({"answers": {"$elemMatch": {"q": 2, "a": {"$gte": 8}}}}),
                bson::bson!({"answers": [{"q": 2, "a": 9}]}),
                true,
            ),
            (Bson::Int32(5), Bson::Double(5.0), true),
            (Bson::Int32(5), Bson::String("5".into()), false),
            (bson::bson!([1, 2]), bson::bson!([1, 2]), true),
            (bson::bson!([1, 2]), Bson::Int32(1), false),
            (re("^a", ""), Bson::String("abc".into()), true),
            (re("^a", ""), Bson::String("cba".into()), false),
        ];
        for (cond, value, want) in cases {
            assert_eq!(
                vm(cond.clone()).matches(&value, &c).unwrap(),
                want,
                "{cond} on {value}"
            );
        }
        assert!(
            ValueMatcher::parse(&bson::bson!({"$bogus": 1}))
                .unwrap_err()
                .errmsg
                .starts_with("unknown top level operator: $bogus.")
        );
        let dbref = vm(bson::bson!({"$ref": "coll", "$id": 1}));
        assert!(
            dbref
                .matches(&bson::bson!({"$ref": "coll", "$id": 1}), &c)
                .unwrap()
        );
        assert!(
            !dbref
                .matches(&bson::bson!({"$ref": "coll", "$id": 2}), &c)
                .unwrap()
        );
        let or = vm(bson::bson!({"$or": [{"a": 1}, {"b": 2}]}));
        assert!(or.matches(&bson::bson!({"b": 2}), &c).unwrap());
        assert!(!or.matches(&bson::bson!({"b": 3}), &c).unwrap());
        let err = ValueMatcher::parse(&bson::bson!({"a": 1, "$expr": true})).unwrap_err();
        assert_eq!(
            err.errmsg,
            "$expr can only be applied to the top-level document"
        );
    }

    #[test]
    fn value_matcher_elem_match_semantics() {
        let c = ctx();
        let scalar = ValueMatcher::elem_match(&doc! {"$gt": 2, "$lt": 4}).unwrap();
        assert!(!scalar.matches(&bson::bson!([1, 5]), &c).unwrap());
        assert!(scalar.matches(&bson::bson!([1, 3]), &c).unwrap());
        assert!(!scalar.matches(&Bson::Int32(3), &c).unwrap());
        let docs = ValueMatcher::elem_match(&doc! {"school": 102, "age": {"$gt": 10}}).unwrap();
        let arr = vec![
            bson::bson!({"school": 102, "age": 10}),
            bson::bson!({"school": 101, "age": 11}),
            bson::bson!({"school": 102, "age": 11}),
        ];
        assert_eq!(docs.first_match(&arr, &c).unwrap(), Some(2));
        assert_eq!(docs.first_match(&arr[..2], &c).unwrap(), None);
        let err = ValueMatcher::elem_match(&doc! {"$foo": 1}).unwrap_err();
        assert_eq!(
            (err.code, err.errmsg.as_str()),
            (2, "unknown operator: $foo")
        );
    }
}

#[cfg(test)]
mod robustness {
    use super::*;
    use bson::{Binary, DateTime, Decimal128, doc, spec::BinarySubtype};

    /// Odd values: every one is used as a filter operand, a document value and a regex
    /// subject; nothing may panic, whatever the outcome.
    fn odd_values() -> Vec<Bson> {
        vec![
            Bson::Double(f64::NAN),
            Bson::Double(f64::INFINITY),
            Bson::Double(-0.0),
            Bson::Double(1e300),
            Bson::Int64(i64::MIN),
            Bson::Int64(i64::MAX),
            Bson::Int32(i32::MIN),
            Bson::Decimal128(Decimal128::from_bytes([0; 16])),
            Bson::String(String::new()),
            Bson::String("\u{1F600}é\n".into()),
            Bson::Array(vec![]),
            bson::bson!([[[]], {}, null]),
            Bson::Document(doc! {}),
            Bson::Document(doc! {"$ref": "c", "$id": 1}),
            Bson::Null,
            Bson::Undefined,
            Bson::MinKey,
            Bson::MaxKey,
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: vec![1, 2],
            }),
            Bson::DateTime(DateTime::from_millis(i64::MIN)),
            Bson::RegularExpression(bson::Regex {
                pattern: "(".into(),
                options: "z".into(),
            }),
        ]
    }

    #[test]
    fn odd_input_never_panics() {
        let ctx = EvalContext::at(DateTime::from_millis(0));
        let ops: Vec<&str> = FIELD_OPERATORS.iter().copied().chain(["$foo"]).collect();
        let values = odd_values();
        let docs: Vec<Document> = values
            .iter()
            .map(|v| doc! {"a": v.clone(), "b": [v.clone(), {"c": v.clone()}]})
            .collect();
        let mut parsed = 0;
        for op in ops {
            for arg in &values {
                for path in ["a", "b.c", "b.0", "a.5.x", ""] {
                    let filter = doc! {path: {op: arg.clone()}};
                    if let Ok(m) = Matcher::parse(&filter) {
                        parsed += 1;
                        for d in &docs {
                            let _ = m.match_details(d, &ctx);
                        }
                    }
                    let _ = ValueMatcher::parse(&Bson::Document(doc! {op: arg.clone()}));
                }
            }
        }
        assert!(parsed > 100, "only {parsed} filters parsed");
        for v in &values {
            for top in ["$and", "$or", "$nor", "$alwaysTrue", "$comment"] {
                let _ = Matcher::parse(&doc! {top: v.clone()});
            }
        }
    }
}
