//! Aggregation expressions (`$add`, `$cond`, `$$NOW`, field paths, ...).
//!
//! Interface contract: `Expr::parse` validates the whole expression up front (unknown
//! operators fail with mongod's code and message); `Expr::eval` returns `Ok(None)` for a
//! missing value (a missing field path or `$$REMOVE`).
//!
//! One difference in timing from mongod: a reference to a variable that is neither a
//! builtin nor bound by an enclosing `$let`/`$map`/`$filter`/`$reduce` is resolved against
//! the command's `let` variables at evaluation time (code 17276 when undefined), because
//! those are not known at parse time.

// `CommandError` (owned by `engine::error`) is large; every fallible function here returns it.

mod arith;
mod convert;
mod optimize;

use std::cmp::Ordering;

use bson::{Bson, DateTime, Document};

use super::compare::{compare, type_alias, values_equal};
use super::{CommandError, EvalContext, Result};

pub(crate) use arith::{Num, Sum};
pub(crate) use convert::{fmt_obj, fmt_value};

/// How deeply expressions may nest before parsing refuses them (guards the stack).
const MAX_DEPTH: usize = 150;

/// A parsed aggregation expression.
#[derive(Debug, Clone)]
pub struct Expr {
    node: Node,
}

#[derive(Debug, Clone, PartialEq)]
enum Var {
    Root,
    Now,
    ClusterTime,
    Remove,
    User(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
    Cmp,
    Not,
    Add,
    Subtract,
    Multiply,
    Divide,
    Mod,
    Abs,
    Floor,
    Ceil,
    Max,
    Min,
    Sum,
    Avg,
    ToLong,
    ToInt,
    ToDouble,
    ToDate,
    ToString,
    ToBool,
    ToObjectId,
    Type,
    IsArray,
    IsNumber,
    Size,
    ConcatArrays,
    In,
    ArrayElemAt,
    First,
    Last,
    MergeObjects,
    Concat,
    ToLower,
    ToUpper,
    IndexOfArray,
    Slice,
    SetUnion,
    AllElementsTrue,
    AnyElementTrue,
    Rand,
}

#[derive(Debug, Clone)]
enum Node {
    Const(Bson),
    /// A path from `$$CURRENT` (`"$a.b"`).
    Path(Vec<String>),
    Var(Var, Vec<String>),
    Object(Vec<(String, Node)>),
    Array(Vec<Node>),
    Op(Op, Vec<Node>),
    And(Vec<Node>),
    Or(Vec<Node>),
    IfNull(Vec<Node>),
    Cond(Box<[Node; 3]>),
    Switch {
        branches: Vec<(Node, Node)>,
        default: Option<Box<Node>>,
    },
    Let {
        vars: Vec<(String, Node)>,
        body: Box<Node>,
    },
    Map {
        input: Box<Node>,
        var: String,
        body: Box<Node>,
    },
    Filter {
        input: Box<Node>,
        var: String,
        cond: Box<Node>,
        limit: Option<Box<Node>>,
    },
    Reduce {
        input: Box<Node>,
        init: Box<Node>,
        body: Box<Node>,
    },
    Convert {
        input: Box<Node>,
        to: Box<Node>,
        on_error: Option<Box<Node>>,
        on_null: Option<Box<Node>>,
    },
    GetField {
        field: String,
        input: Box<Node>,
    },
    SetField {
        field: String,
        input: Box<Node>,
        value: Box<Node>,
    },
    DateToString {
        date: Box<Node>,
        format: Option<Box<Node>>,
        on_null: Option<Box<Node>>,
    },
    /// `$dateAdd` (`subtract: false`) and `$dateSubtract`, in UTC.
    DateArith {
        subtract: bool,
        start: Box<Node>,
        unit: Box<Node>,
        amount: Box<Node>,
    },
}

/// Parse-time state: the variables bound by enclosing expressions, and the nesting depth.
struct Scope {
    bound: Vec<String>,
    depth: usize,
    /// Whether every user variable is known at parse time (so unknown ones fail here, with
    /// code 17276, as in mongod) rather than looked up in the command's `let` at evaluation.
    strict: bool,
}

fn err(code: i32, msg: impl Into<String>) -> CommandError {
    CommandError::new(code, msg)
}

/// Whether a value counts as true in aggregation (`false`, null, missing, undefined and
/// numeric zero are false; everything else, including `[]` and `""`, is true).
pub fn truthy(value: Option<&Bson>) -> bool {
    match value {
        None | Some(Bson::Null | Bson::Undefined) => false,
        Some(Bson::Boolean(b)) => *b,
        Some(Bson::Int32(i)) => *i != 0,
        Some(Bson::Int64(i)) => *i != 0,
        Some(Bson::Double(d)) => *d != 0.0,
        Some(Bson::Decimal128(d)) => d.to_string().parse::<f64>() != Ok(0.0),
        Some(_) => true,
    }
}

/// Checks a field name used in an expression object or a stage (code 16410 for a leading `$`,
/// 15998 for an empty name, 16411 for a NUL byte).
pub(crate) fn check_field_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(err(
            15998,
            "FieldPath field names may not be empty strings.",
        ));
    }
    if name.starts_with('$') {
        return Err(err(
            16410,
            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
        ));
    }
    if name.contains('\0') {
        return Err(err(16411, "FieldPath field names may not contain '\0'."));
    }
    Ok(())
}

/// Splits and validates a dotted path (`a.b.c`).
pub(crate) fn parse_field_path(path: &str) -> Result<Vec<String>> {
    if path.is_empty() {
        return Err(err(
            40352,
            "FieldPath cannot be constructed with empty string",
        ));
    }
    path.split('.')
        .map(|p| {
            check_field_name(p)?;
            Ok(p.to_string())
        })
        .collect()
}

/// Checks a variable name. Definitions (`$let` vars, `as`; `write`) must start with a
/// lowercase letter or a non-ASCII character (codes 16866-16868); references may also start
/// with an uppercase letter (codes 16869-16871). Later characters: letters, digits, `_` or
/// non-ASCII.
fn check_var_name(name: &str, write: bool) -> Result<()> {
    let (empty, start, contains) = if write {
        (16866, 16867, 16868)
    } else {
        (16869, 16870, 16871)
    };
    let mut chars = name.chars();
    match chars.next() {
        None => return Err(err(empty, "empty variable names are not allowed")),
        Some(c)
            if c.is_ascii() && !c.is_ascii_lowercase() && (write || !c.is_ascii_uppercase()) =>
        {
            let what = if write {
                "a user variable name"
            } else {
                "a variable name"
            };
            return Err(err(
                start,
                format!("'{name}' starts with an invalid character for {what}"),
            ));
        }
        Some(_) => {}
    }
    for c in chars {
        if !(c.is_ascii_alphanumeric() || c == '_' || !c.is_ascii()) {
            return Err(err(
                contains,
                format!("'{name}' contains an invalid character for a variable name: '{c}'"),
            ));
        }
    }
    Ok(())
}

/// Looks `path` up in `value`, descending into arrays the way aggregation field paths do:
/// `"$a.b"` on `a: [{b: 1}, {b: 2}]` is `[1, 2]`.
///
/// Only the documents of an array are searched: an array nested in the array, and any other
/// element, is passed over, so `"$a.b"` on `a: [{b: 1}, [{b: 2}]]` is `[1]`
/// (`ExpressionFieldPath::evaluatePathArray` in mongod's `src/mongo/db/pipeline/expression.cpp`
/// skips every element that is not an object). Elements without the field add nothing.
pub(crate) fn lookup_path(value: &Bson, path: &[String]) -> Option<Bson> {
    let Some((first, rest)) = path.split_first() else {
        return Some(value.clone());
    };
    match value {
        Bson::Document(d) => lookup_path(d.get(first)?, rest),
        Bson::Array(items) => Some(Bson::Array(
            items
                .iter()
                .filter(|item| matches!(item, Bson::Document(_)))
                .filter_map(|item| lookup_path(item, path))
                .collect(),
        )),
        _ => None,
    }
}

/// [`lookup_path`] starting from a document.
pub(crate) fn lookup_doc_path(doc: &Document, path: &[String]) -> Option<Bson> {
    let (first, rest) = path.split_first()?;
    lookup_path(doc.get(first)?, rest)
}

fn op_by_name(name: &str) -> Option<Op> {
    Some(match name {
        "$eq" => Op::Eq,
        "$ne" => Op::Ne,
        "$gt" => Op::Gt,
        "$gte" => Op::Gte,
        "$lt" => Op::Lt,
        "$lte" => Op::Lte,
        "$cmp" => Op::Cmp,
        "$not" => Op::Not,
        "$add" => Op::Add,
        "$subtract" => Op::Subtract,
        "$multiply" => Op::Multiply,
        "$divide" => Op::Divide,
        "$mod" => Op::Mod,
        "$abs" => Op::Abs,
        "$floor" => Op::Floor,
        "$ceil" => Op::Ceil,
        "$max" => Op::Max,
        "$min" => Op::Min,
        "$sum" => Op::Sum,
        "$avg" => Op::Avg,
        "$toLong" => Op::ToLong,
        "$toInt" => Op::ToInt,
        "$toDouble" => Op::ToDouble,
        "$toDate" => Op::ToDate,
        "$toString" => Op::ToString,
        "$toBool" => Op::ToBool,
        "$toObjectId" => Op::ToObjectId,
        "$type" => Op::Type,
        "$isArray" => Op::IsArray,
        "$isNumber" => Op::IsNumber,
        "$size" => Op::Size,
        "$concatArrays" => Op::ConcatArrays,
        "$in" => Op::In,
        "$arrayElemAt" => Op::ArrayElemAt,
        "$first" => Op::First,
        "$last" => Op::Last,
        "$mergeObjects" => Op::MergeObjects,
        "$concat" => Op::Concat,
        "$toLower" => Op::ToLower,
        "$toUpper" => Op::ToUpper,
        "$indexOfArray" => Op::IndexOfArray,
        "$slice" => Op::Slice,
        "$setUnion" => Op::SetUnion,
        "$allElementsTrue" => Op::AllElementsTrue,
        "$anyElementTrue" => Op::AnyElementTrue,
        _ => return None,
    })
}

/// `(min, max)` argument counts; `None` for "any number".
fn arity(op: Op) -> Option<(usize, usize)> {
    use Op::*;
    match op {
        Eq | Ne | Gt | Gte | Lt | Lte | Cmp | Subtract | Divide | Mod | In | ArrayElemAt => {
            Some((2, 2))
        }
        Not | Abs | Floor | Ceil | ToLong | ToInt | ToDouble | ToDate | ToString | ToBool
        | ToObjectId | Type | IsArray | IsNumber | Size | First | Last | ToLower | ToUpper
        | AllElementsTrue | AnyElementTrue => Some((1, 1)),
        IndexOfArray => Some((2, 4)),
        Rand => Some((0, 0)),
        Slice => Some((2, 3)),
        Add | Multiply | Max | Min | Sum | Avg | ConcatArrays | MergeObjects | Concat
        | SetUnion => None,
    }
}

fn check_arity(name: &str, n: usize, min: usize, max: usize) -> Result<()> {
    if min == max && n != min {
        return Err(err(
            16020,
            format!("Expression {name} takes exactly {min} arguments. {n} were passed in."),
        ));
    }
    if n < min || n > max {
        return Err(err(
            28667,
            format!(
                "Expression {name} takes at least {min} arguments, and at most {max}, but {n} were passed in."
            ),
        ));
    }
    Ok(())
}

fn object_arg<'a>(name: &str, arg: &'a Bson, code: i32) -> Result<&'a Document> {
    match arg {
        Bson::Document(d) => Ok(d),
        _ => Err(err(
            code,
            format!("{name} only supports an object as its argument"),
        )),
    }
}

impl Scope {
    fn parse(&mut self, value: &Bson) -> Result<Node> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(err(15, "expression nesting exceeds the maximum depth"));
        }
        let node = self.parse_inner(value);
        self.depth -= 1;
        node
    }

    fn boxed(&mut self, value: &Bson) -> Result<Box<Node>> {
        self.parse(value).map(Box::new)
    }

    fn parse_inner(&mut self, value: &Bson) -> Result<Node> {
        match value {
            Bson::String(s) if s.starts_with("$$") => self.parse_var(&s[2..]),
            Bson::String(s) if s.starts_with('$') => {
                if s.len() == 1 {
                    return Err(err(16872, "'$' by itself is not a valid FieldPath"));
                }
                Ok(Node::Path(parse_field_path(&s[1..])?))
            }
            Bson::Array(items) => Ok(Node::Array(
                items.iter().map(|v| self.parse(v)).collect::<Result<_>>()?,
            )),
            Bson::Document(d) => self.parse_object(d),
            other => Ok(Node::Const(other.clone())),
        }
    }

    fn parse_var(&mut self, text: &str) -> Result<Node> {
        let (name, path) = match text.split_once('.') {
            Some((n, p)) => (n, parse_field_path(p)?),
            None => (text, Vec::new()),
        };
        check_var_name(name, false)?;
        let var = match name {
            "ROOT" | "CURRENT" => Var::Root,
            "NOW" => Var::Now,
            "CLUSTER_TIME" => Var::ClusterTime,
            "REMOVE" => Var::Remove,
            _ if self.bound.iter().any(|b| b == name) => Var::User(name.to_string()),
            // Command `let` variables follow the definition rules, so an uppercase name that
            // is neither a builtin nor bound here can never be defined.
            _ if name.starts_with(|c: char| c.is_ascii_uppercase()) => {
                return Err(err(17276, format!("Use of undefined variable: {name}")));
            }
            _ if self.strict => {
                return Err(err(17276, format!("Use of undefined variable: {name}")));
            }
            _ => Var::User(name.to_string()),
        };
        Ok(match (var, path.is_empty()) {
            (Var::Root, _) => Node::Path(path),
            (v, _) => Node::Var(v, path),
        })
    }

    fn parse_object(&mut self, d: &Document) -> Result<Node> {
        let Some((first, _)) = d.iter().next() else {
            return Ok(Node::Object(Vec::new()));
        };
        if first.starts_with('$') {
            if d.len() != 1 {
                return Err(err(
                    15983,
                    format!(
                        "An object representing an expression must have exactly one field: {}",
                        convert::fmt_obj(d)
                    ),
                ));
            }
            let (name, arg) = d.iter().next().expect("one field");
            return self.parse_operator(name, arg);
        }
        let mut fields: Vec<(String, Node)> = Vec::with_capacity(d.len());
        for (k, v) in d {
            check_field_name(k)?;
            if k.contains('.') {
                return Err(err(16412, "FieldPath field names may not contain '.'."));
            }
            fields.push((k.clone(), self.parse(v)?));
        }
        Ok(Node::Object(fields))
    }

    fn args(&mut self, arg: &Bson) -> Result<Vec<Node>> {
        match arg {
            Bson::Array(items) => items.iter().map(|v| self.parse(v)).collect(),
            other => Ok(vec![self.parse(other)?]),
        }
    }

    fn with_bound<T>(
        &mut self,
        names: &[String],
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let before = self.bound.len();
        self.bound.extend(names.iter().cloned());
        let r = f(self);
        self.bound.truncate(before);
        r
    }

    fn parse_operator(&mut self, name: &str, arg: &Bson) -> Result<Node> {
        match name {
            "$literal" => return Ok(Node::Const(arg.clone())),
            "$and" => return Ok(Node::And(self.args(arg)?)),
            "$or" => return Ok(Node::Or(self.args(arg)?)),
            "$ifNull" => {
                let args = self.args(arg)?;
                if args.len() < 2 {
                    return Err(err(
                        1257300,
                        format!("$ifNull needs at least two arguments, had: {}", args.len()),
                    ));
                }
                return Ok(Node::IfNull(args));
            }
            "$cond" => return self.parse_cond(arg),
            "$switch" => return self.parse_switch(arg),
            "$let" => return self.parse_let(arg),
            "$map" => return self.parse_map(arg),
            "$filter" => return self.parse_filter(arg),
            "$reduce" => return self.parse_reduce(arg),
            "$convert" => return self.parse_convert(arg),
            "$getField" => return self.parse_get_field(arg),
            "$setField" => return self.parse_set_field(arg),
            "$dateToString" => return self.parse_date_to_string(arg),
            "$dateAdd" => return self.parse_date_arith(arg, false),
            "$dateSubtract" => return self.parse_date_arith(arg, true),
            "$rand" => {
                let Bson::Document(d) = arg else {
                    return Err(err(10065, "invalid parameter: expected an object ($rand)"));
                };
                if !d.is_empty() {
                    return Err(err(3040501, "$rand does not currently accept arguments"));
                }
                return Ok(Node::Op(Op::Rand, Vec::new()));
            }
            _ => {}
        }
        let Some(op) = op_by_name(name) else {
            return Err(err(168, format!("Unrecognized expression '{name}'")));
        };
        let args = self.args(arg)?;
        if let Some((min, max)) = arity(op) {
            check_arity(name, args.len(), min, max)?;
        }
        Ok(Node::Op(op, args))
    }

    fn parse_cond(&mut self, arg: &Bson) -> Result<Node> {
        if let Bson::Document(d) = arg {
            let (mut i, mut t, mut e) = (None, None, None);
            for (k, v) in d {
                match k.as_str() {
                    "if" => i = Some(self.parse(v)?),
                    "then" => t = Some(self.parse(v)?),
                    "else" => e = Some(self.parse(v)?),
                    _ => return Err(err(17083, format!("Unrecognized parameter to $cond: {k}"))),
                }
            }
            let i = i.ok_or_else(|| err(17080, "Missing 'if' parameter to $cond"))?;
            let t = t.ok_or_else(|| err(17081, "Missing 'then' parameter to $cond"))?;
            let e = e.ok_or_else(|| err(17082, "Missing 'else' parameter to $cond"))?;
            return Ok(Node::Cond(Box::new([i, t, e])));
        }
        let args = self.args(arg)?;
        check_arity("$cond", args.len(), 3, 3)?;
        let [i, t, e]: [Node; 3] = args
            .try_into()
            .map_err(|_| CommandError::internal("$cond arity"))?;
        Ok(Node::Cond(Box::new([i, t, e])))
    }

    fn parse_switch(&mut self, arg: &Bson) -> Result<Node> {
        let Bson::Document(d) = arg else {
            return Err(err(
                40060,
                format!(
                    "$switch requires an object as an argument, found: {}",
                    type_alias(arg)
                ),
            ));
        };
        let mut branches = Vec::new();
        let mut default = None;
        for (k, v) in d {
            match k.as_str() {
                "branches" => {
                    let Bson::Array(items) = v else {
                        return Err(err(
                            40061,
                            format!(
                                "$switch expected an array for 'branches', found: {}",
                                type_alias(v)
                            ),
                        ));
                    };
                    for b in items {
                        let Bson::Document(bd) = b else {
                            return Err(err(
                                40062,
                                format!(
                                    "$switch expected each branch to be an object, found: {}",
                                    type_alias(b)
                                ),
                            ));
                        };
                        let (mut case, mut then) = (None, None);
                        for (bk, bv) in bd {
                            match bk.as_str() {
                                "case" => case = Some(self.parse(bv)?),
                                "then" => then = Some(self.parse(bv)?),
                                _ => {
                                    return Err(err(
                                        40063,
                                        format!(
                                            "$switch found an unknown argument to a branch: {bk}"
                                        ),
                                    ));
                                }
                            }
                        }
                        let case = case.ok_or_else(|| {
                            err(
                                40064,
                                "$switch requires each branch have a 'case' expression",
                            )
                        })?;
                        let then = then.ok_or_else(|| {
                            err(
                                40065,
                                "$switch requires each branch have a 'then' expression.",
                            )
                        })?;
                        branches.push((case, then));
                    }
                }
                "default" => default = Some(self.boxed(v)?),
                _ => {
                    return Err(err(
                        40067,
                        format!("$switch found an unknown argument: {k}"),
                    ));
                }
            }
        }
        if branches.is_empty() {
            return Err(err(40068, "$switch requires at least one branch."));
        }
        Ok(Node::Switch { branches, default })
    }

    fn parse_let(&mut self, arg: &Bson) -> Result<Node> {
        let d = object_arg("$let", arg, 16874)?;
        let (mut vars_doc, mut body) = (None, None);
        for (k, v) in d {
            match k.as_str() {
                "vars" => vars_doc = Some(v),
                "in" => body = Some(v),
                _ => return Err(err(16875, format!("Unrecognized parameter to $let: {k}"))),
            }
        }
        let vars_doc = vars_doc.ok_or_else(|| err(16876, "Missing 'vars' parameter to $let"))?;
        let body = body.ok_or_else(|| err(16877, "Missing 'in' parameter to $let"))?;
        let Bson::Document(vars_doc) = vars_doc else {
            return Err(err(10065, "invalid parameter: expected an object (vars)"));
        };
        let mut vars = Vec::new();
        for (name, v) in vars_doc {
            check_var_name(name, true)?;
            // Definitions see the enclosing scope, not each other.
            vars.push((name.clone(), self.parse(v)?));
        }
        let names: Vec<String> = vars.iter().map(|(n, _)| n.clone()).collect();
        let body = self.with_bound(&names, |s| s.boxed(body))?;
        Ok(Node::Let { vars, body })
    }

    fn parse_map(&mut self, arg: &Bson) -> Result<Node> {
        let d = object_arg("$map", arg, 16878)?;
        let (mut input, mut var, mut body) = (None, "this".to_string(), None);
        for (k, v) in d {
            match k.as_str() {
                "input" => input = Some(self.boxed(v)?),
                "as" => var = as_name(v)?,
                "in" => body = Some(v),
                _ => return Err(err(16879, format!("Unrecognized parameter to $map: {k}"))),
            }
        }
        let input = input.ok_or_else(|| err(16880, "Missing 'input' parameter to $map"))?;
        let body = body.ok_or_else(|| err(16882, "Missing 'in' parameter to $map"))?;
        let body = self.with_bound(std::slice::from_ref(&var), |s| s.boxed(body))?;
        Ok(Node::Map { input, var, body })
    }

    fn parse_filter(&mut self, arg: &Bson) -> Result<Node> {
        let d = object_arg("$filter", arg, 28646)?;
        let (mut input, mut var, mut cond, mut limit) = (None, "this".to_string(), None, None);
        for (k, v) in d {
            match k.as_str() {
                "input" => input = Some(self.boxed(v)?),
                "as" => var = as_name(v)?,
                "cond" => cond = Some(v),
                "limit" => limit = Some(self.boxed(v)?),
                _ => {
                    return Err(err(
                        28647,
                        format!("Unrecognized parameter to $filter: {k}"),
                    ));
                }
            }
        }
        let input = input.ok_or_else(|| err(28648, "Missing 'input' parameter to $filter"))?;
        let cond = cond.ok_or_else(|| err(28650, "Missing 'cond' parameter to $filter"))?;
        let cond = self.with_bound(std::slice::from_ref(&var), |s| s.boxed(cond))?;
        Ok(Node::Filter {
            input,
            var,
            cond,
            limit,
        })
    }

    fn parse_reduce(&mut self, arg: &Bson) -> Result<Node> {
        let Bson::Document(d) = arg else {
            return Err(err(
                40075,
                format!(
                    "$reduce requires an object as an argument, found: {}",
                    type_alias(arg)
                ),
            ));
        };
        let (mut input, mut init, mut body) = (None, None, None);
        for (k, v) in d {
            match k.as_str() {
                "input" => input = Some(self.boxed(v)?),
                "initialValue" => init = Some(self.boxed(v)?),
                "in" => body = Some(v),
                _ => {
                    return Err(err(
                        40076,
                        format!("$reduce found an unknown argument: {k}"),
                    ));
                }
            }
        }
        let input = input.ok_or_else(|| err(40077, "$reduce requires 'input' to be specified"))?;
        let init =
            init.ok_or_else(|| err(40078, "$reduce requires 'initialValue' to be specified"))?;
        let body = body.ok_or_else(|| err(40079, "$reduce requires 'in' to be specified"))?;
        let names = ["this".to_string(), "value".to_string()];
        let body = self.with_bound(&names, |s| s.boxed(body))?;
        Ok(Node::Reduce { input, init, body })
    }

    fn parse_convert(&mut self, arg: &Bson) -> Result<Node> {
        let Bson::Document(d) = arg else {
            return Err(CommandError::failed_to_parse(format!(
                "$convert expects an object of named arguments but found: {}",
                type_alias(arg)
            )));
        };
        let (mut input, mut to, mut on_error, mut on_null) = (None, None, None, None);
        for (k, v) in d {
            match k.as_str() {
                "input" => input = Some(self.boxed(v)?),
                "to" => to = Some(self.boxed(v)?),
                "onError" => on_error = Some(self.boxed(v)?),
                "onNull" => on_null = Some(self.boxed(v)?),
                _ => {
                    return Err(CommandError::failed_to_parse(format!(
                        "$convert found an unknown argument: {k}"
                    )));
                }
            }
        }
        let input = input.ok_or_else(|| {
            CommandError::failed_to_parse("Missing 'input' parameter to $convert")
        })?;
        let to =
            to.ok_or_else(|| CommandError::failed_to_parse("Missing 'to' parameter to $convert"))?;
        Ok(Node::Convert {
            input,
            to,
            on_error,
            on_null,
        })
    }

    fn parse_get_field(&mut self, arg: &Bson) -> Result<Node> {
        let (field, input) = match arg {
            Bson::Document(d) if d.keys().next().is_some_and(|k| !k.starts_with('$')) => {
                let (mut field, mut input) = (None, None);
                for (k, v) in d {
                    match k.as_str() {
                        "field" => field = Some(v),
                        "input" => input = Some(self.boxed(v)?),
                        _ => {
                            return Err(err(
                                3041701,
                                format!("$getField found an unknown argument: {k}"),
                            ));
                        }
                    }
                }
                let field = field
                    .ok_or_else(|| err(3041702, "$getField requires 'field' to be specified"))?;
                (
                    field,
                    input.unwrap_or_else(|| Box::new(Node::Path(Vec::new()))),
                )
            }
            other => (other, Box::new(Node::Path(Vec::new()))),
        };
        Ok(Node::GetField {
            field: constant_field_name(field, "$getField")?,
            input,
        })
    }

    fn parse_set_field(&mut self, arg: &Bson) -> Result<Node> {
        let Bson::Document(d) = arg else {
            return Err(err(
                4161100,
                format!(
                    "$setField only supports an object as its argument, found: {}",
                    type_alias(arg)
                ),
            ));
        };
        let (mut field, mut input, mut value) = (None, None, None);
        for (k, v) in d {
            match k.as_str() {
                "field" => field = Some(v),
                "input" => input = Some(self.boxed(v)?),
                "value" => value = Some(self.boxed(v)?),
                _ => {
                    return Err(err(
                        4161101,
                        format!("$setField found an unknown argument: {k}"),
                    ));
                }
            }
        }
        let field =
            field.ok_or_else(|| err(4161102, "$setField requires 'field' to be specified"))?;
        let value =
            value.ok_or_else(|| err(4161103, "$setField requires 'value' to be specified"))?;
        let input =
            input.ok_or_else(|| err(4161109, "$setField requires 'input' to be specified"))?;
        Ok(Node::SetField {
            field: constant_field_name(field, "$setField")?,
            input,
            value,
        })
    }

    fn parse_date_to_string(&mut self, arg: &Bson) -> Result<Node> {
        let Bson::Document(d) = arg else {
            return Err(err(
                18629,
                "$dateToString only supports an object as its argument",
            ));
        };
        let (mut date, mut format, mut on_null) = (None, None, None);
        for (k, v) in d {
            match k.as_str() {
                "date" => date = Some(self.boxed(v)?),
                "format" => format = Some(self.boxed(v)?),
                "onNull" => on_null = Some(self.boxed(v)?),
                "timezone" => {
                    // Only UTC is supported; anything else must not be silently ignored.
                    if !matches!(v, Bson::String(s) if s == "UTC" || s == "Z" || s == "+00:00" || s == "GMT")
                    {
                        return Err(CommandError::bad_value(
                            "$dateToString: only the UTC timezone is supported by the mongolock test server",
                        ));
                    }
                }
                _ => {
                    return Err(err(
                        18534,
                        format!("Unrecognized argument to $dateToString: {k}"),
                    ));
                }
            }
        }
        let date = date.ok_or_else(|| err(18628, "Missing 'date' parameter to $dateToString"))?;
        Ok(Node::DateToString {
            date,
            format,
            on_null,
        })
    }

    /// `$dateAdd` / `$dateSubtract`: `{startDate, unit, amount, timezone?}`, as mongod 5.0+
    /// parses them. Only UTC is supported as a timezone; anything else is refused.
    fn parse_date_arith(&mut self, arg: &Bson, subtract: bool) -> Result<Node> {
        let op = if subtract {
            "$dateSubtract"
        } else {
            "$dateAdd"
        };
        let Bson::Document(d) = arg else {
            return Err(err(
                5166400,
                format!("{op} expects an object as its argument"),
            ));
        };
        let (mut start, mut unit, mut amount) = (None, None, None);
        for (k, v) in d {
            match k.as_str() {
                "startDate" => start = Some(self.boxed(v)?),
                "unit" => unit = Some(self.boxed(v)?),
                "amount" => amount = Some(self.boxed(v)?),
                "timezone" => {
                    if !matches!(v, Bson::String(s) if s == "UTC" || s == "Z" || s == "+00:00" || s == "GMT")
                    {
                        return Err(CommandError::bad_value(format!(
                            "{op}: only the UTC timezone is supported by the mongolock test server"
                        )));
                    }
                }
                _ => {
                    return Err(err(
                        5166401,
                        format!(
                            "Unrecognized argument to {op}: {k}. Expected arguments are startDate, unit, amount, and optionally timezone."
                        ),
                    ));
                }
            }
        }
        let (Some(start), Some(unit), Some(amount)) = (start, unit, amount) else {
            return Err(err(
                5166402,
                format!("{op} requires startDate, unit, and amount to be present"),
            ));
        };
        Ok(Node::DateArith {
            subtract,
            start,
            unit,
            amount,
        })
    }
}

/// The `as` name of `$map`/`$filter`: a non-string reads as the empty name (as
/// `BSONElement::str()` does in mongod), which then fails validation.
fn as_name(v: &Bson) -> Result<String> {
    let name = match v {
        Bson::String(s) => s.clone(),
        _ => String::new(),
    };
    check_var_name(&name, true)?;
    Ok(name)
}

fn constant_field_name(field: &Bson, op: &str) -> Result<String> {
    match field {
        Bson::String(s) if !s.starts_with('$') => Ok(s.clone()),
        Bson::Document(d) if d.len() == 1 && d.contains_key("$literal") => {
            match d.get("$literal") {
                Some(Bson::String(s)) => Ok(s.clone()),
                _ => Err(err(
                    5654602,
                    format!("{op} requires 'field' to evaluate to type String"),
                )),
            }
        }
        _ => Err(err(
            5654601,
            format!(
                "{op} requires 'field' to evaluate to a constant, but got a non-constant argument"
            ),
        )),
    }
}

/// Evaluation state: the root document, the operation context and the bound variables.
struct Env<'a> {
    root: &'a Document,
    ctx: &'a EvalContext,
    locals: Vec<(&'a str, Bson)>,
}

type Val = Option<Bson>;

fn nullish(v: &Val) -> bool {
    matches!(v, None | Some(Bson::Null | Bson::Undefined))
}

fn type_name(v: &Val) -> &'static str {
    v.as_ref().map(type_alias).unwrap_or("missing")
}

fn int_arg(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Some(*d as i64),
        _ => None,
    }
}

/// A value evaluated without copying it where it can be borrowed: from the root document, a
/// constant of the expression, the command's `let` variables or a variable bound by an
/// enclosing expression. Operators that only inspect an operand (`$type`, `$eq`, `$in`,
/// `$size`, truthiness, ...) read it through [`Env::get`], so a field path to a large
/// sub-document or array is never cloned to be looked at.
enum Ref<'a> {
    /// A missing value.
    Missing,
    /// A value that lives as long as the evaluation.
    Borrowed(&'a Bson),
    /// A path into the bound variable at this index of `Env::locals` (its value was there
    /// when the reference was made; evaluations in between restore the stack's depth).
    Local(usize, &'a [String]),
    /// A value computed for this reference.
    Owned(Bson),
}

impl Ref<'_> {
    fn from_val(v: Val) -> Self {
        match v {
            Some(v) => Ref::Owned(v),
            None => Ref::Missing,
        }
    }
}

/// Where a field path leads inside a value, without copying.
enum Walk<'v> {
    Found(&'v Bson),
    Missing,
    /// The path crosses an array: the value is built by [`lookup_path`].
    Traverse,
}

/// Follows `path` into `value` through sub-documents only, as [`lookup_path`] does.
fn walk<'v>(value: &'v Bson, path: &[String]) -> Walk<'v> {
    let mut current = value;
    for step in path {
        match current {
            Bson::Document(d) => match d.get(step) {
                Some(v) => current = v,
                None => return Walk::Missing,
            },
            Bson::Array(_) => return Walk::Traverse,
            _ => return Walk::Missing,
        }
    }
    Walk::Found(current)
}

/// A reference to `value` at `path` when the path does not cross an array.
fn borrow_path<'v>(value: &'v Bson, path: &[String]) -> Ref<'v> {
    match walk(value, path) {
        Walk::Found(v) => Ref::Borrowed(v),
        Walk::Missing => Ref::Missing,
        Walk::Traverse => Ref::from_val(lookup_path(value, path)),
    }
}

/// `$type`'s answers, built once: `$type` is evaluated often (document-shape checks) and
/// usually compared at once, so it lends its result instead of allocating it.
fn type_name_value(name: &'static str) -> &'static Bson {
    static NAMES: std::sync::LazyLock<Vec<Bson>> = std::sync::LazyLock::new(|| {
        [
            "double",
            "string",
            "object",
            "array",
            "binData",
            "undefined",
            "objectId",
            "bool",
            "date",
            "null",
            "regex",
            "dbPointer",
            "javascript",
            "symbol",
            "javascriptWithScope",
            "int",
            "timestamp",
            "long",
            "decimal",
            "minKey",
            "maxKey",
            "missing",
        ]
        .into_iter()
        .map(Bson::from)
        .collect()
    });
    static MISSING: std::sync::LazyLock<Bson> = std::sync::LazyLock::new(|| Bson::from("missing"));
    NAMES
        .iter()
        .find(|v| v.as_str() == Some(name))
        .unwrap_or(&MISSING)
}

impl<'a> Env<'a> {
    fn eval(&mut self, node: &'a Node) -> Result<Val> {
        match node {
            Node::Const(v) => Ok(Some(v.clone())),
            Node::Path(p) => Ok(if p.is_empty() {
                Some(Bson::Document(self.root.clone()))
            } else {
                lookup_doc_path(self.root, p)
            }),
            Node::Var(var, path) => self.eval_var(var, path),
            Node::Object(fields) => {
                let mut out = Document::new();
                for (k, v) in fields {
                    if let Some(val) = self.eval(v)? {
                        out.insert(k.clone(), val);
                    }
                }
                Ok(Some(Bson::Document(out)))
            }
            Node::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(self.eval(item)?.unwrap_or(Bson::Null));
                }
                Ok(Some(Bson::Array(out)))
            }
            Node::And(args) => {
                for a in args {
                    if !self.eval_truthy(a)? {
                        return Ok(Some(Bson::Boolean(false)));
                    }
                }
                Ok(Some(Bson::Boolean(true)))
            }
            Node::Or(args) => {
                for a in args {
                    if self.eval_truthy(a)? {
                        return Ok(Some(Bson::Boolean(true)));
                    }
                }
                Ok(Some(Bson::Boolean(false)))
            }
            Node::IfNull(args) => {
                let (last, init) = args
                    .split_last()
                    .ok_or_else(|| CommandError::internal("$ifNull"))?;
                for a in init {
                    let v = self.eval(a)?;
                    if !nullish(&v) {
                        return Ok(v);
                    }
                }
                self.eval(last)
            }
            Node::Cond(parts) => {
                let [i, t, e] = &**parts;
                if self.eval_truthy(i)? {
                    self.eval(t)
                } else {
                    self.eval(e)
                }
            }
            Node::Switch { branches, default } => {
                for (case, then) in branches {
                    if self.eval_truthy(case)? {
                        return self.eval(then);
                    }
                }
                match default {
                    Some(d) => self.eval(d),
                    None => Err(err(
                        40066,
                        "$switch could not find a matching branch for an input, and no default was specified.",
                    )),
                }
            }
            Node::Let { vars, body } => {
                let mut values = Vec::with_capacity(vars.len());
                for (name, v) in vars {
                    values.push((name.as_str(), self.eval(v)?.unwrap_or(Bson::Undefined)));
                }
                let before = self.locals.len();
                self.locals.extend(values);
                let r = self.eval(body);
                self.locals.truncate(before);
                r
            }
            Node::Map { input, var, body } => {
                let items = match self.eval(input)? {
                    None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::Array(items)) => items,
                    v => {
                        return Err(err(
                            16883,
                            format!("input to $map must be an array not {}", type_name(&v)),
                        ));
                    }
                };
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    self.locals.push((var.as_str(), item));
                    let r = self.eval(body);
                    self.locals.pop();
                    out.push(r?.unwrap_or(Bson::Null));
                }
                Ok(Some(Bson::Array(out)))
            }
            Node::Filter {
                input,
                var,
                cond,
                limit,
            } => self.eval_filter(input, var, cond, limit.as_deref()),
            Node::Reduce { input, init, body } => {
                let items = match self.eval(input)? {
                    None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::Array(items)) => items,
                    v => {
                        return Err(err(
                            40080,
                            format!(
                                "$reduce requires that 'input' be an array, found: {}",
                                v.as_ref()
                                    .map(fmt_value)
                                    .unwrap_or_else(|| "MISSING".into())
                            ),
                        ));
                    }
                };
                let mut acc = self.eval(init)?;
                for item in items {
                    self.locals.push(("this", item));
                    self.locals
                        .push(("value", acc.take().unwrap_or(Bson::Undefined)));
                    let r = self.eval(body);
                    self.locals.truncate(self.locals.len() - 2);
                    acc = r?;
                }
                Ok(acc)
            }
            Node::Convert {
                input,
                to,
                on_error,
                on_null,
            } => self.eval_convert(input, to, on_error.as_deref(), on_null.as_deref()),
            Node::GetField { field, input } => {
                let r = self.eval_ref(input)?;
                match self.get(&r) {
                    None | Some(Bson::Null | Bson::Undefined) => Ok(Some(Bson::Null)),
                    Some(Bson::Document(d)) => Ok(d.get(field).cloned()),
                    v => Err(err(
                        3041705,
                        format!(
                            "$getField requires 'input' to evaluate to type Object, but got {}",
                            v.map_or("missing", type_alias)
                        ),
                    )),
                }
            }
            Node::SetField {
                field,
                input,
                value,
            } => match self.eval(input)? {
                None | Some(Bson::Null | Bson::Undefined) => Ok(Some(Bson::Null)),
                Some(Bson::Document(mut d)) => {
                    match self.eval(value)? {
                        Some(v) => {
                            d.insert(field.clone(), v);
                        }
                        None => {
                            d.remove(field);
                        }
                    }
                    Ok(Some(Bson::Document(d)))
                }
                v => Err(err(
                    4161105,
                    format!(
                        "$setField requires 'input' to evaluate to type Object, but got {}",
                        type_name(&v)
                    ),
                )),
            },
            Node::DateToString {
                date,
                format,
                on_null,
            } => {
                let d = self.eval(date)?;
                let date = match d {
                    None | Some(Bson::Null | Bson::Undefined) => {
                        return match on_null {
                            Some(n) => self.eval(n),
                            None => Ok(Some(Bson::Null)),
                        };
                    }
                    Some(v) => date_of(&v, "$dateToString")?,
                };
                let fmt = match format {
                    None => None,
                    Some(f) => match self.eval(f)? {
                        None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                        Some(Bson::String(s)) => Some(s),
                        v => {
                            return Err(err(
                                18533,
                                format!(
                                    "$dateToString requires that 'format' be a string, found: {}",
                                    type_name(&v)
                                ),
                            ));
                        }
                    },
                };
                Ok(Some(Bson::String(match fmt {
                    None => convert::format_date_iso(date),
                    Some(f) => format_date(date, &f)?,
                })))
            }
            Node::DateArith {
                subtract,
                start,
                unit,
                amount,
            } => {
                let op = if *subtract {
                    "$dateSubtract"
                } else {
                    "$dateAdd"
                };
                let (start, unit, amount) =
                    (self.eval(start)?, self.eval(unit)?, self.eval(amount)?);
                if nullish(&start) || nullish(&unit) || nullish(&amount) {
                    return Ok(Some(Bson::Null));
                }
                let start = match start.as_ref().map(|v| date_of(v, op)) {
                    Some(Ok(d)) => d,
                    _ => {
                        return Err(err(
                            5166403,
                            format!("{op} requires startDate to be convertible to a date"),
                        ));
                    }
                };
                let Some(Bson::String(unit)) = unit else {
                    return Err(err(
                        5166404,
                        format!("{op} expects string defining the time unit"),
                    ));
                };
                let unit = convert::TimeUnit::parse(&unit)?;
                let Some(amount) = amount.as_ref().and_then(int_arg) else {
                    return Err(err(
                        5166405,
                        format!("{op} expects integer amount of time units"),
                    ));
                };
                let amount = if *subtract {
                    amount.checked_neg()
                } else {
                    Some(amount)
                };
                amount
                    .and_then(|a| convert::date_add(start, unit, a))
                    .map(|d| Some(Bson::DateTime(d)))
                    .ok_or_else(|| err(5166406, format!("{op} overflowed")))
            }
            Node::Op(op, args) => self.eval_op(*op, args),
        }
    }

    /// Evaluates `node`, borrowing the result where it can (see [`Ref`]).
    fn eval_ref(&mut self, node: &'a Node) -> Result<Ref<'a>> {
        Ok(match node {
            Node::Const(v) => Ref::Borrowed(v),
            Node::Path(p) if !p.is_empty() => match self.root.get(&p[0]) {
                Some(v) => borrow_path(v, &p[1..]),
                None => Ref::Missing,
            },
            Node::Var(Var::User(name), path) => {
                if let Some(i) = self.locals.iter().rposition(|(n, _)| *n == name) {
                    let v = &self.locals[i].1;
                    if matches!(v, Bson::Undefined) && path.is_empty() {
                        Ref::Missing
                    } else {
                        match walk(v, path) {
                            Walk::Found(_) => Ref::Local(i, path),
                            Walk::Missing => Ref::Missing,
                            Walk::Traverse => Ref::from_val(lookup_path(v, path)),
                        }
                    }
                } else {
                    match self.ctx.vars.get(name) {
                        Some(v) => borrow_path(v, path),
                        None => {
                            return Err(err(17276, format!("Use of undefined variable: {name}")));
                        }
                    }
                }
            }
            Node::Op(Op::Type, args) => {
                let r = self.eval_ref(&args[0])?;
                let name = self.get(&r).map_or("missing", type_alias);
                Ref::Borrowed(type_name_value(name))
            }
            _ => Ref::from_val(self.eval(node)?),
        })
    }

    /// The value a [`Ref`] stands for (`None` when missing).
    fn get<'s>(&'s self, r: &'s Ref<'a>) -> Option<&'s Bson> {
        match r {
            Ref::Missing => None,
            Ref::Borrowed(v) => Some(v),
            Ref::Owned(v) => Some(v),
            Ref::Local(i, path) => match walk(&self.locals[*i].1, path) {
                Walk::Found(v) => Some(v),
                _ => None,
            },
        }
    }

    /// Whether `node` evaluates to a true value, without copying it.
    fn eval_truthy(&mut self, node: &'a Node) -> Result<bool> {
        let r = self.eval_ref(node)?;
        Ok(truthy(self.get(&r)))
    }

    fn eval_var(&mut self, var: &Var, path: &[String]) -> Result<Val> {
        let base = match var {
            Var::Root => unreachable_missing()?,
            Var::Now => Bson::DateTime(self.ctx.now),
            Var::ClusterTime => match self.ctx.cluster_time {
                Some(ts) => Bson::Timestamp(ts),
                None => {
                    return Err(err(
                        51144,
                        "Builtin variable '$$CLUSTER_TIME' is not available",
                    ));
                }
            },
            Var::Remove => return Ok(None),
            Var::User(name) => {
                if let Some((_, v)) = self.locals.iter().rev().find(|(n, _)| *n == name) {
                    return Ok(if matches!(v, Bson::Undefined) && path.is_empty() {
                        None
                    } else {
                        lookup_path(v, path)
                    });
                }
                match self.ctx.vars.get(name) {
                    Some(v) => return Ok(lookup_path(v, path)),
                    None => return Err(err(17276, format!("Use of undefined variable: {name}"))),
                }
            }
        };
        Ok(lookup_path(&base, path))
    }

    fn eval_filter(
        &mut self,
        input: &'a Node,
        var: &'a str,
        cond: &'a Node,
        limit: Option<&'a Node>,
    ) -> Result<Val> {
        let items = match self.eval(input)? {
            None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(Bson::Array(items)) => items,
            v => {
                return Err(err(
                    28651,
                    format!("input to $filter must be an array not {}", type_name(&v)),
                ));
            }
        };
        if items.is_empty() {
            return Ok(Some(Bson::Array(items)));
        }
        let limit = match limit {
            None => None,
            Some(l) => match self.eval(l)? {
                None | Some(Bson::Null | Bson::Undefined) => None,
                Some(v) => match int_arg(&v).and_then(|n| i32::try_from(n).ok()) {
                    Some(n) if n > 0 => Some(n as usize),
                    Some(_) => {
                        return Err(err(
                            327392,
                            format!("$filter: limit must be greater than 0: {}", fmt_value(&v)),
                        ));
                    }
                    None => {
                        return Err(err(
                            327391,
                            format!(
                                "$filter: limit must be represented as a 32-bit integral value: {}",
                                fmt_value(&v)
                            ),
                        ));
                    }
                },
            },
        };
        let mut out = Vec::new();
        for item in items {
            if limit.is_some_and(|l| out.len() >= l) {
                break;
            }
            self.locals.push((var, item));
            let keep = self.eval(cond).map(|v| truthy(v.as_ref()));
            let (_, item) = self
                .locals
                .pop()
                .ok_or_else(|| CommandError::internal("$filter scope"))?;
            if keep? {
                out.push(item);
            }
        }
        Ok(Some(Bson::Array(out)))
    }

    fn eval_convert(
        &mut self,
        input: &'a Node,
        to: &'a Node,
        on_error: Option<&'a Node>,
        on_null: Option<&'a Node>,
    ) -> Result<Val> {
        let value = self.eval(input)?;
        let to_value = self.eval(to)?;
        let target = match to_value.as_ref().and_then(convert::Target::from_bson) {
            Some(Ok(t)) => Some(t),
            Some(Err(msg)) => return Err(CommandError::bad_value(msg)),
            None if nullish(&to_value) => None,
            None => {
                return Err(err(
                    CONVERSION_FAILURE,
                    format!(
                        "$convert's 'to' argument must be a string or number, but is {}",
                        type_name(&to_value)
                    ),
                ));
            }
        };
        if nullish(&value) {
            return match on_null {
                Some(n) => self.eval(n),
                None => Ok(Some(Bson::Null)),
            };
        }
        let Some(target) = target else {
            return Ok(Some(Bson::Null));
        };
        let value = value.unwrap_or(Bson::Null);
        match convert::convert(&value, target) {
            Ok(v) => Ok(Some(v)),
            Err(e) => match on_error {
                Some(n) => self.eval(n),
                None => Err(err(CONVERSION_FAILURE, e.message())),
            },
        }
    }

    fn eval_args(&mut self, args: &'a [Node]) -> Result<Vec<Val>> {
        args.iter().map(|a| self.eval(a)).collect()
    }

    fn eval_op(&mut self, op: Op, args: &'a [Node]) -> Result<Val> {
        use Op::*;
        match op {
            Eq | Ne | Gt | Gte | Lt | Lte | Cmp => {
                let a = self.eval_ref(&args[0])?;
                let b = self.eval_ref(&args[1])?;
                let undef = Bson::Undefined;
                let ord = compare(
                    self.get(&a).unwrap_or(&undef),
                    self.get(&b).unwrap_or(&undef),
                );
                Ok(Some(match op {
                    Eq => Bson::Boolean(ord == Ordering::Equal),
                    Ne => Bson::Boolean(ord != Ordering::Equal),
                    Gt => Bson::Boolean(ord == Ordering::Greater),
                    Gte => Bson::Boolean(ord != Ordering::Less),
                    Lt => Bson::Boolean(ord == Ordering::Less),
                    Lte => Bson::Boolean(ord != Ordering::Greater),
                    _ => Bson::Int32(ord as i32),
                }))
            }
            Not => Ok(Some(Bson::Boolean(!self.eval_truthy(&args[0])?))),
            Add => self.eval_add(args),
            Subtract => {
                let a = self.eval(&args[0])?;
                let b = self.eval(&args[1])?;
                eval_subtract(a, b)
            }
            Multiply => {
                let mut p = arith::Product::default();
                for a in args {
                    let v = match self.eval(a)? {
                        None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                        Some(v) => v,
                    };
                    match Num::of(&v, "$multiply")? {
                        Some(n) => p.mul(n),
                        None => {
                            return Err(CommandError::type_mismatch(format!(
                                "$multiply only supports numeric types, not {}",
                                type_alias(&v)
                            )));
                        }
                    }
                }
                Ok(Some(p.result().into_bson()))
            }
            Divide | Mod => {
                let a = self.eval(&args[0])?;
                let b = self.eval(&args[1])?;
                let name = if op == Divide { "$divide" } else { "$mod" };
                if nullish(&a) || nullish(&b) {
                    return Ok(Some(Bson::Null));
                }
                let (av, bv) = (a.unwrap_or(Bson::Null), b.unwrap_or(Bson::Null));
                let (Some(x), Some(y)) = (Num::of(&av, name)?, Num::of(&bv, name)?) else {
                    let code = if op == Divide { 14 } else { 16611 };
                    return Err(err(
                        code,
                        format!(
                            "{name} only supports numeric types, not {} and {}",
                            type_alias(&av),
                            type_alias(&bv)
                        ),
                    ));
                };
                if y.is_zero() {
                    return Err(if op == Divide {
                        CommandError::bad_value("can't $divide by zero")
                    } else {
                        err(16610, "can't $mod by zero")
                    });
                }
                Ok(Some(if op == Divide {
                    Bson::Double(x.to_f64() / y.to_f64())
                } else {
                    arith::modulo(x, y).into_bson()
                }))
            }
            Abs | Floor | Ceil => {
                let v = self.eval(&args[0])?;
                if nullish(&v) {
                    return Ok(Some(Bson::Null));
                }
                let v = v.unwrap_or(Bson::Null);
                let name = match op {
                    Abs => "$abs",
                    Floor => "$floor",
                    _ => "$ceil",
                };
                let Some(n) = Num::of(&v, name)? else {
                    return Err(err(
                        28765,
                        format!("{name} only supports numeric types, not {}", type_alias(&v)),
                    ));
                };
                Ok(Some(match (op, n) {
                    (Abs, _) => arith::abs(n)?.into_bson(),
                    (Floor, Num::Double(d)) => Bson::Double(d.floor()),
                    (Ceil, Num::Double(d)) => Bson::Double(d.ceil()),
                    _ => n.into_bson(),
                }))
            }
            Max | Min => {
                let values = self.eval_args(args)?;
                let candidates: Vec<Bson> = match values.as_slice() {
                    [Some(Bson::Array(items))] => items.clone(),
                    _ => values.into_iter().flatten().collect(),
                };
                let mut best: Option<Bson> = None;
                for v in candidates {
                    if matches!(v, Bson::Null | Bson::Undefined) {
                        continue;
                    }
                    let better = match &best {
                        None => true,
                        Some(b) => {
                            let ord = compare(&v, b);
                            if op == Max {
                                ord == Ordering::Greater
                            } else {
                                ord == Ordering::Less
                            }
                        }
                    };
                    if better {
                        best = Some(v);
                    }
                }
                Ok(Some(best.unwrap_or(Bson::Null)))
            }
            Sum | Avg => {
                let values = self.eval_args(args)?;
                let candidates: Vec<Bson> = match values.as_slice() {
                    [Some(Bson::Array(items))] => items.clone(),
                    _ => values.into_iter().flatten().collect(),
                };
                let name = if op == Sum { "$sum" } else { "$avg" };
                let mut s = arith::Sum::default();
                for v in &candidates {
                    if let Some(n) = Num::of(v, name)? {
                        s.add(n);
                    }
                }
                Ok(Some(if op == Sum {
                    s.result().into_bson()
                } else if s.count == 0 {
                    Bson::Null
                } else {
                    Bson::Double(s.result().to_f64() / s.count as f64)
                }))
            }
            ToLong | ToInt | ToDouble | ToDate | ToString | ToBool | ToObjectId => {
                let v = self.eval(&args[0])?;
                if nullish(&v) {
                    return Ok(Some(Bson::Null));
                }
                let target = match op {
                    ToLong => convert::Target::Long,
                    ToInt => convert::Target::Int,
                    ToDouble => convert::Target::Double,
                    ToDate => convert::Target::Date,
                    ToString => convert::Target::String,
                    ToBool => convert::Target::Bool,
                    _ => convert::Target::ObjectId,
                };
                convert::convert(&v.unwrap_or(Bson::Null), target)
                    .map(Some)
                    .map_err(|e| err(CONVERSION_FAILURE, e.message()))
            }
            Type => {
                let r = self.eval_ref(&args[0])?;
                Ok(Some(Bson::String(
                    self.get(&r).map_or("missing", type_alias).to_string(),
                )))
            }
            IsArray => {
                let r = self.eval_ref(&args[0])?;
                Ok(Some(Bson::Boolean(matches!(
                    self.get(&r),
                    Some(Bson::Array(_))
                ))))
            }
            IsNumber => {
                let r = self.eval_ref(&args[0])?;
                Ok(Some(Bson::Boolean(
                    self.get(&r).is_some_and(super::compare::is_number),
                )))
            }
            Size => {
                let r = self.eval_ref(&args[0])?;
                match self.get(&r) {
                    Some(Bson::Array(a)) => Ok(Some(size_bson(a.len()))),
                    v => Err(err(
                        17124,
                        format!(
                            "The argument to $size must be an array, but was of type: {}",
                            v.map_or("missing", type_alias)
                        ),
                    )),
                }
            }
            ConcatArrays => {
                let mut out = Vec::new();
                // Operands are evaluated lazily: the first null one ends the evaluation.
                for a in args {
                    match self.eval(a)? {
                        None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                        Some(Bson::Array(items)) => out.extend(items),
                        v => {
                            return Err(err(
                                28664,
                                format!(
                                    "$concatArrays only supports arrays, not {}",
                                    type_name(&v)
                                ),
                            ));
                        }
                    }
                }
                Ok(Some(Bson::Array(out)))
            }
            Rand => Ok(Some(Bson::Double(rand::random::<f64>()))),
            AllElementsTrue | AnyElementTrue => {
                let (name, code) = if op == AllElementsTrue {
                    ("$allElementsTrue", 17040)
                } else {
                    ("$anyElementTrue", 17041)
                };
                let r = self.eval_ref(&args[0])?;
                match self.get(&r) {
                    Some(Bson::Array(items)) => {
                        let mut truths = items.iter().map(|v| truthy(Some(v)));
                        Ok(Some(Bson::Boolean(if op == AllElementsTrue {
                            truths.all(|t| t)
                        } else {
                            truths.any(|t| t)
                        })))
                    }
                    v => Err(err(
                        code,
                        format!(
                            "{name}'s argument must be an array, but is {}",
                            v.map_or("missing", type_alias)
                        ),
                    )),
                }
            }
            SetUnion => {
                let mut out: Vec<Bson> = Vec::new();
                // Operands are evaluated lazily: the first null one ends the evaluation.
                for a in args {
                    match self.eval(a)? {
                        None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                        Some(Bson::Array(items)) => out.extend(items),
                        v => {
                            return Err(err(
                                17043,
                                format!(
                                    "All operands of $setUnion must be arrays. One argument is of type: {}",
                                    type_name(&v)
                                ),
                            ));
                        }
                    }
                }
                out.sort_by(compare);
                out.dedup_by(|a, b| values_equal(a, b));
                Ok(Some(Bson::Array(out)))
            }
            In => {
                let needle = self.eval_ref(&args[0])?;
                let haystack = self.eval_ref(&args[1])?;
                match self.get(&haystack) {
                    Some(Bson::Array(items)) => {
                        let undef = Bson::Undefined;
                        let n = self.get(&needle).unwrap_or(&undef);
                        Ok(Some(Bson::Boolean(
                            items.iter().any(|i| values_equal(i, n)),
                        )))
                    }
                    v => Err(err(
                        40081,
                        format!(
                            "$in requires an array as a second argument, found: {}",
                            v.map_or("missing", type_alias)
                        ),
                    )),
                }
            }
            ArrayElemAt => {
                let a = self.eval(&args[0])?;
                let i = self.eval(&args[1])?;
                if nullish(&a) || nullish(&i) {
                    return Ok(Some(Bson::Null));
                }
                let Some(Bson::Array(items)) = a else {
                    return Err(err(
                        28689,
                        format!(
                            "$arrayElemAt's first argument must be an array, but is {}",
                            type_name(&a)
                        ),
                    ));
                };
                let i = i.unwrap_or(Bson::Null);
                if !super::compare::is_number(&i) {
                    return Err(err(
                        28690,
                        format!(
                            "$arrayElemAt's second argument must be a numeric value, but is {}",
                            type_alias(&i)
                        ),
                    ));
                }
                let Some(idx) = int_arg(&i).and_then(|n| i32::try_from(n).ok()) else {
                    return Err(err(
                        28691,
                        format!(
                            "$arrayElemAt's second argument must be representable as a 32-bit integer: {}",
                            fmt_value(&i)
                        ),
                    ));
                };
                Ok(elem_at(items, i64::from(idx)))
            }
            First | Last => {
                let name = if op == First { "$first" } else { "$last" };
                match self.eval(&args[0])? {
                    None | Some(Bson::Null | Bson::Undefined) => Ok(Some(Bson::Null)),
                    Some(Bson::Array(items)) => {
                        Ok(elem_at(items, if op == First { 0 } else { -1 }))
                    }
                    v => Err(err(
                        28689,
                        format!(
                            "{name}'s argument must be an array, but is {}",
                            type_name(&v)
                        ),
                    )),
                }
            }
            MergeObjects => {
                let mut out = Document::new();
                for v in self.eval_args(args)? {
                    match v {
                        None | Some(Bson::Null | Bson::Undefined) => {}
                        Some(Bson::Document(d)) => {
                            for (k, val) in d {
                                out.insert(k, val);
                            }
                        }
                        Some(v) => {
                            return Err(err(
                                40400,
                                format!(
                                    "$mergeObjects requires object inputs, but input {} is of type {}",
                                    fmt_value(&v),
                                    type_alias(&v)
                                ),
                            ));
                        }
                    }
                }
                Ok(Some(Bson::Document(out)))
            }
            Concat => {
                let mut out = String::new();
                // Operands are evaluated lazily: the first null one ends the evaluation.
                for a in args {
                    match self.eval(a)? {
                        None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                        Some(Bson::String(s)) => out.push_str(&s),
                        v => {
                            return Err(err(
                                16702,
                                format!("$concat only supports strings, not {}", type_name(&v)),
                            ));
                        }
                    }
                }
                Ok(Some(Bson::String(out)))
            }
            ToLower | ToUpper => {
                let v = self.eval(&args[0])?;
                let s = match v {
                    None | Some(Bson::Null | Bson::Undefined) => String::new(),
                    Some(Bson::String(s)) => s,
                    Some(
                        other @ (Bson::Int32(_)
                        | Bson::Int64(_)
                        | Bson::Double(_)
                        | Bson::DateTime(_)),
                    ) => convert::convert(&other, convert::Target::String)
                        .map(|b| b.as_str().unwrap_or_default().to_string())
                        .unwrap_or_default(),
                    Some(other) => {
                        return Err(err(
                            16007,
                            format!(
                                "can't convert from BSON type {} to String",
                                type_alias(&other)
                            ),
                        ));
                    }
                };
                Ok(Some(Bson::String(if op == ToLower {
                    s.to_ascii_lowercase()
                } else {
                    s.to_ascii_uppercase()
                })))
            }
            IndexOfArray => self.eval_index_of_array(args),
            Slice => self.eval_slice(args),
        }
    }

    /// `$add`, as mongod: operands left to right, the first null or missing one makes the
    /// result null, at most one date (then numbers are added to its milliseconds, doubles
    /// rounded), overflow of a date is code 15.
    fn eval_add(&mut self, args: &'a [Node]) -> Result<Val> {
        let mut sum = arith::Sum::default();
        let mut date: Option<i64> = None;
        let overflow = || err(15, "date overflow");
        for a in args {
            let v = match self.eval(a)? {
                None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                Some(v) => v,
            };
            if let Bson::DateTime(d) = v {
                if date.is_some() {
                    return Err(err(16612, "only one date allowed in an $add expression"));
                }
                let so_far = sum.as_millis().ok_or_else(overflow)?;
                date = Some(
                    d.timestamp_millis()
                        .checked_add(so_far)
                        .ok_or_else(overflow)?,
                );
                continue;
            }
            let Some(n) = Num::of(&v, "$add")? else {
                return Err(CommandError::type_mismatch(format!(
                    "$add only supports numeric or date types, not {}",
                    type_alias(&v)
                )));
            };
            match &mut date {
                None => sum.add(n),
                Some(ms) => {
                    let delta = match n {
                        Num::Double(d) if !(d >= i64::MIN as f64 && d < i64::MAX as f64) => {
                            return Err(overflow());
                        }
                        Num::Double(d) => d.round() as i64,
                        other => other.to_i64().unwrap_or_default(),
                    };
                    *ms = ms.checked_add(delta).ok_or_else(overflow)?;
                }
            }
        }
        Ok(Some(match date {
            Some(ms) => Bson::DateTime(DateTime::from_millis(ms)),
            None => sum.result().into_bson(),
        }))
    }

    fn eval_index_of_array(&mut self, args: &'a [Node]) -> Result<Val> {
        let values = self.eval_args(args)?;
        let items = match &values[0] {
            v if nullish(v) => return Ok(Some(Bson::Null)),
            Some(Bson::Array(items)) => items,
            v => {
                return Err(err(
                    40090,
                    format!(
                        "$indexOfArray requires an array as a first argument, found: {}",
                        type_name(v)
                    ),
                ));
            }
        };
        let index_arg = |v: &Val, which: &str, code_type: i32, code_neg: i32| -> Result<usize> {
            let b = v.clone().unwrap_or(Bson::Null);
            let n = int_arg(&b).filter(|n| i32::try_from(*n).is_ok()).ok_or_else(|| {
                err(
                    code_type,
                    format!("$indexOfArrayrequires an integral {which}, found a value of type: {}, with value: {}", type_alias(&b), fmt_value(&b)),
                )
            })?;
            usize::try_from(n).map_err(|_| {
                err(
                    code_neg,
                    format!("$indexOfArray requires a nonnegative {which}, found: {n}"),
                )
            })
        };
        let start = match values.get(2) {
            Some(v) => index_arg(v, "starting index", 9711600, 9711601)?,
            None => 0,
        };
        let end = match values.get(3) {
            Some(v) => index_arg(v, "ending index", 9711600, 9711601)?.min(items.len()),
            None => items.len(),
        };
        let undef = Bson::Undefined;
        let needle = values[1].as_ref().unwrap_or(&undef);
        let found = (start..end).find(|&i| values_equal(&items[i], needle));
        Ok(Some(match found {
            Some(i) => size_bson(i),
            None => Bson::Int32(-1),
        }))
    }

    fn eval_slice(&mut self, args: &'a [Node]) -> Result<Val> {
        let values = self.eval_args(args)?;
        if values.iter().any(nullish) {
            return Ok(Some(Bson::Null));
        }
        let values: Vec<Bson> = values.into_iter().flatten().collect();
        let Bson::Array(items) = &values[0] else {
            return Err(err(
                28724,
                format!(
                    "First argument to $slice must be an array, but is of type: {}",
                    type_alias(&values[0])
                ),
            ));
        };
        let int = |v: &Bson, which: &str, code_type: i32, code_int: i32| -> Result<i64> {
            if !super::compare::is_number(v) {
                return Err(err(
                    code_type,
                    format!(
                        "{which} argument to $slice must be a numeric value, but is of type: {}",
                        type_alias(v)
                    ),
                ));
            }
            int_arg(v).filter(|n| i32::try_from(*n).is_ok()).ok_or_else(|| {
                err(code_int, format!("{which} argument to $slice can't be represented as a 32-bit integer: {}", fmt_value(v)))
            })
        };
        let len = items.len() as i64;
        let (start, count) = if values.len() == 2 {
            let n = int(&values[1], "Second", 28725, 28726)?;
            if n >= 0 {
                (0, n)
            } else {
                ((len + n).max(0), -n)
            }
        } else {
            let pos = int(&values[1], "Second", 28725, 28726)?;
            let n = int(&values[2], "Third", 28727, 28728)?;
            if n <= 0 {
                return Err(err(
                    28729,
                    format!(
                        "Third argument to $slice must be positive: {}",
                        fmt_value(&values[2])
                    ),
                ));
            }
            let start = if pos < 0 {
                (len + pos).max(0)
            } else {
                pos.min(len)
            };
            (start, n)
        };
        let start = start.min(len) as usize;
        let end = (start as i64 + count).min(len) as usize;
        Ok(Some(Bson::Array(items[start..end].to_vec())))
    }
}

/// mongod's `ConversionFailure` code.
const CONVERSION_FAILURE: i32 = 241;

fn unreachable_missing<T>() -> Result<T> {
    Err(CommandError::internal(
        "expression evaluation reached an impossible state",
    ))
}

fn size_bson(n: usize) -> Bson {
    match i32::try_from(n) {
        Ok(i) => Bson::Int32(i),
        Err(_) => Bson::Int64(n as i64),
    }
}

fn elem_at(items: Vec<Bson>, idx: i64) -> Val {
    let len = items.len() as i64;
    let i = if idx < 0 { len + idx } else { idx };
    if i < 0 || i >= len {
        return None;
    }
    items.into_iter().nth(i as usize)
}

/// `$subtract`, in mongod's order: two numbers, then null, then date minus date/number.
fn eval_subtract(a: Val, b: Val) -> Result<Val> {
    let undef = Bson::Undefined;
    let (av, bv) = (a.as_ref().unwrap_or(&undef), b.as_ref().unwrap_or(&undef));
    let overflow = || err(15, "date overflow");
    if let (Some(x), Some(y)) = (Num::of(av, "$subtract")?, Num::of(bv, "$subtract")?) {
        return Ok(Some(arith::subtract(x, y).into_bson()));
    }
    if nullish(&a) || nullish(&b) {
        return Ok(Some(Bson::Null));
    }
    let Bson::DateTime(x) = av else {
        return Err(CommandError::type_mismatch(format!(
            "can't $subtract {} from {}",
            type_alias(bv),
            type_alias(av)
        )));
    };
    let ms = x.timestamp_millis();
    let result = match bv {
        Bson::DateTime(y) => {
            return ms
                .checked_sub(y.timestamp_millis())
                .map(|d| Some(Bson::Int64(d)))
                .ok_or_else(overflow);
        }
        Bson::Int32(_) | Bson::Int64(_) => ms
            .checked_sub(int_arg(bv).unwrap_or_default())
            .ok_or_else(overflow)?,
        Bson::Double(d) => {
            if !(*d >= i64::MIN as f64 && *d < i64::MAX as f64) {
                return Err(overflow());
            }
            ms.checked_sub(d.round() as i64).ok_or_else(overflow)?
        }
        other => {
            return Err(CommandError::type_mismatch(format!(
                "can't $subtract {} from Date",
                type_alias(other)
            )));
        }
    };
    Ok(Some(Bson::DateTime(DateTime::from_millis(result))))
}

fn date_of(v: &Bson, op: &str) -> Result<DateTime> {
    match v {
        Bson::DateTime(d) => Ok(*d),
        Bson::Timestamp(t) => Ok(DateTime::from_millis(i64::from(t.time) * 1000)),
        Bson::ObjectId(o) => Ok(o.timestamp()),
        other => {
            let _ = op;
            Err(err(
                16006,
                format!("can't convert from BSON type {} to Date", type_alias(other)),
            ))
        }
    }
}

/// `$dateToString` formatting (UTC), with mongod's format specifiers.
fn format_date(date: DateTime, fmt: &str) -> Result<String> {
    let p = convert::date_parts(date);
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&format!("{:04}", p.year)),
            Some('m') => out.push_str(&format!("{:02}", p.month)),
            Some('d') => out.push_str(&format!("{:02}", p.day)),
            Some('H') => out.push_str(&format!("{:02}", p.hour)),
            Some('M') => out.push_str(&format!("{:02}", p.minute)),
            Some('S') => out.push_str(&format!("{:02}", p.second)),
            Some('L') => out.push_str(&format!("{:03}", p.millis)),
            Some('j') => out.push_str(&format!("{:03}", p.yearday)),
            Some('w') => out.push_str(&p.weekday.to_string()),
            Some('z') => out.push_str("+0000"),
            Some('Z') => out.push('0'),
            Some('%') => out.push('%'),
            Some(other) => {
                return Err(err(
                    18536,
                    format!("Invalid format character '%{other}' in format string"),
                ));
            }
            None => return Err(err(18535, "Unmatched '%' at end of format string")),
        }
    }
    Ok(out)
}

impl Expr {
    /// Parses an expression (a literal, a `"$path"`, a `"$$var"`, an operator document or an
    /// object of expressions).
    pub fn parse(value: &Bson) -> Result<Expr> {
        let mut scope = Scope {
            bound: Vec::new(),
            depth: 0,
            strict: false,
        };
        Ok(Expr {
            node: scope.parse(value)?,
        })
    }

    /// Parses an operator expression given as its name and argument (`{name: arg}`), as
    /// [`Expr::parse`] would parse that one-field document, without building it.
    pub fn parse_operator(name: &str, arg: &Bson) -> Result<Expr> {
        let mut scope = Scope {
            bound: Vec::new(),
            depth: 1,
            strict: false,
        };
        Ok(Expr {
            node: scope.parse_operator(name, arg)?,
        })
    }

    /// Parses an expression of a command whose `let` variables are `let_vars` (the same
    /// document later given as [`EvalContext::vars`]): a reference to any other user variable
    /// fails here with code 17276, as mongod rejects it at parse time.
    pub fn parse_with_let(value: &Bson, let_vars: &Document) -> Result<Expr> {
        let mut scope = Scope {
            bound: let_vars.keys().cloned().collect(),
            depth: 0,
            strict: true,
        };
        Ok(Expr {
            node: scope.parse(value)?,
        })
    }

    /// Optimizes the expression for one command, as mongod does before it evaluates it for
    /// any document: constant sub-expressions are evaluated now, in every branch, and fail
    /// the command if they fail (see [`optimize`]). `ctx` gives the command's constants
    /// (`$$NOW`, `$$CLUSTER_TIME`, its `let` variables).
    ///
    /// # Errors
    ///
    /// The error of a constant sub-expression.
    pub fn optimize(&mut self, ctx: &EvalContext) -> Result<()> {
        let node = std::mem::replace(&mut self.node, Node::Const(Bson::Null));
        self.node = optimize::Folder::new(ctx).fold(node)?;
        Ok(())
    }

    /// Evaluates against `root` (`$$ROOT` and `$$CURRENT`). `Ok(None)` means missing.
    pub fn eval(&self, root: &Document, ctx: &EvalContext) -> Result<Option<Bson>> {
        let mut env = Env {
            root,
            ctx,
            locals: Vec::new(),
        };
        env.eval(&self.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{Timestamp, bson, doc};

    const NOW_MS: i64 = 1_700_000_000_000;

    fn ctx() -> EvalContext {
        let mut c = EvalContext::at(DateTime::from_millis(NOW_MS));
        c.vars = doc! {"limit": 3, "who": {"name": "x"}};
        c
    }

    fn sample() -> Document {
        doc! {
            "_id": 1,
            "a": 5,
            "b": 2.5,
            "l": 7_i64,
            "s": "str",
            "n": null,
            "arr": [1, 2, 3],
            "objs": [{"b": 1}, {"b": 2}, {"c": 3}, 4, [{"b": 5}]],
            "sub": {"x": {"y": 9}},
            "when": DateTime::from_millis(1000),
            "shared": [
                {"owner": "a", "expiresAt": DateTime::from_millis(NOW_MS - 1)},
                {"owner": "b", "expiresAt": DateTime::from_millis(NOW_MS + 1)},
                {"owner": "c", "expiresAt": null},
                {"owner": "d"}
            ],
        }
    }

    fn eval(expr: Bson) -> Result<Option<Bson>> {
        Expr::parse(&expr)?.eval(&sample(), &ctx())
    }

    fn date(ms: i64) -> Bson {
        Bson::DateTime(DateTime::from_millis(ms))
    }

    #[test]
    fn evaluates_paths_variables_and_literals() {
        let cases: Vec<(Bson, Option<Bson>)> = vec![
            (bson!("$a"), Some(bson!(5))),
            (bson!("$sub.x.y"), Some(bson!(9))),
            (bson!("$sub.nope"), None),
            (bson!("$a.b"), None),
            // Arrays nested in the array are not searched (mongod's
            // `ExpressionFieldPath::evaluatePathArray` skips every element but documents).
            (bson!("$objs.b"), Some(bson!([1, 2]))),
            (bson!("$$ROOT.a"), Some(bson!(5))),
            (bson!("$$CURRENT.sub.x"), Some(bson!({"y": 9}))),
            (bson!("$$NOW"), Some(date(NOW_MS))),
            (bson!("$$REMOVE"), None),
            (bson!("$$limit"), Some(bson!(3))),
            (bson!("$$who.name"), Some(bson!("x"))),
            (bson!(42), Some(bson!(42))),
            (bson!("plain"), Some(bson!("plain"))),
            (bson!({"$literal": "$a"}), Some(bson!("$a"))),
            (
                bson!({"x": "$a", "y": {"z": "$s"}, "gone": "$missing"}),
                Some(bson!({"x": 5, "y": {"z": "str"}})),
            ),
            (bson!(["$a", "$missing", 1]), Some(bson!([5, null, 1]))),
            (bson!({}), Some(bson!({}))),
        ];
        for (expr, expected) in cases {
            assert_eq!(eval(expr.clone()).unwrap(), expected, "{expr:?}");
        }
        let root = eval(bson!("$$ROOT")).unwrap().unwrap();
        assert_eq!(root, Bson::Document(sample()));
    }

    #[test]
    fn cluster_time_needs_a_replica_set() {
        let e = eval(bson!("$$CLUSTER_TIME")).unwrap_err();
        assert_eq!(
            (e.code, e.errmsg.as_str()),
            (51144, "Builtin variable '$$CLUSTER_TIME' is not available")
        );
        let mut c = ctx();
        c.cluster_time = Some(Timestamp {
            time: 5,
            increment: 1,
        });
        let v = Expr::parse(&bson!("$$CLUSTER_TIME"))
            .unwrap()
            .eval(&sample(), &c)
            .unwrap();
        assert_eq!(
            v,
            Some(Bson::Timestamp(Timestamp {
                time: 5,
                increment: 1
            }))
        );
    }

    #[test]
    fn comparisons_use_bson_order_without_array_traversal() {
        let cases: Vec<(Bson, Bson)> = vec![
            (bson!({"$eq": ["$a", 5.0]}), bson!(true)),
            (bson!({"$eq": ["$arr", 1]}), bson!(false)),
            (bson!({"$eq": ["$missing", null]}), bson!(false)),
            (bson!({"$eq": ["$missing", "$alsoMissing"]}), bson!(true)),
            (bson!({"$eq": ["$n", null]}), bson!(true)),
            (bson!({"$ne": ["$a", 6]}), bson!(true)),
            (bson!({"$gt": ["$s", 100]}), bson!(true)),
            (bson!({"$gt": ["$missing", null]}), bson!(false)),
            (bson!({"$lt": ["$missing", null]}), bson!(true)),
            (bson!({"$gte": ["$l", 7]}), bson!(true)),
            (bson!({"$lte": ["$b", 2]}), bson!(false)),
            (bson!({"$cmp": ["$a", 7]}), bson!(-1)),
            (bson!({"$cmp": ["$a", 5]}), bson!(0)),
            (bson!({"$cmp": ["b", "a"]}), bson!(1)),
            (bson!({"$gt": ["$when", 99999999999_i64]}), bson!(true)),
        ];
        for (expr, expected) in cases {
            assert_eq!(eval(expr.clone()).unwrap(), Some(expected), "{expr:?}");
        }
    }

    #[test]
    fn logic_uses_truthiness() {
        let cases: Vec<(Bson, Bson)> = vec![
            (bson!({"$and": [1, "x", [], {}]}), bson!(true)),
            (bson!({"$and": [1, 0]}), bson!(false)),
            (bson!({"$and": []}), bson!(true)),
            (
                bson!({"$or": [null, "$missing", false, 0.0, 0_i64]}),
                bson!(false),
            ),
            (bson!({"$or": [null, ""]}), bson!(true)),
            (bson!({"$or": []}), bson!(false)),
            (bson!({"$not": ["$missing"]}), bson!(true)),
            (bson!({"$not": "$a"}), bson!(false)),
            (
                bson!({"$cond": [{"$gt": ["$a", 1]}, "big", "small"]}),
                bson!("big"),
            ),
            (
                bson!({"$cond": {"if": "$n", "then": 1, "else": 2}}),
                bson!(2),
            ),
            (bson!({"$ifNull": ["$missing", "$n", "$a"]}), bson!(5)),
            (bson!({"$ifNull": ["$missing", null]}), Bson::Null),
            (
                bson!({"$switch": {"branches": [{"case": {"$eq": ["$a", 1]}, "then": "one"}, {"case": {"$eq": ["$a", 5]}, "then": "five"}], "default": "other"}}),
                bson!("five"),
            ),
            (
                bson!({"$switch": {"branches": [{"case": false, "then": 1}], "default": "d"}}),
                bson!("d"),
            ),
        ];
        for (expr, expected) in cases {
            assert_eq!(eval(expr.clone()).unwrap(), Some(expected), "{expr:?}");
        }
        // Short-circuit: the erroring branch is never evaluated.
        for lazy in [
            bson!({"$concat": [null, {"$size": 1}]}),
            bson!({"$concatArrays": ["$missing", {"$size": 1}]}),
            bson!({"$setUnion": [null, {"$size": 1}]}),
            bson!({"$add": [null, {"$size": 1}]}),
            bson!({"$multiply": ["$missing", {"$size": 1}]}),
        ] {
            assert_eq!(eval(lazy.clone()).unwrap(), Some(Bson::Null), "{lazy:?}");
        }
        assert_eq!(
            eval(bson!({"$and": [false, {"$size": 1}]})).unwrap(),
            Some(bson!(false))
        );
        assert_eq!(
            eval(bson!({"$cond": [true, 1, {"$size": 1}]})).unwrap(),
            Some(bson!(1))
        );
        assert_eq!(
            eval(bson!({"$ifNull": ["$missing", "$alsoMissing"]})).unwrap(),
            None
        );
        let e = eval(bson!({"$switch": {"branches": [{"case": false, "then": 1}]}})).unwrap_err();
        assert_eq!(e.code, 40066);
    }

    #[test]
    fn arithmetic_widens_like_mongod() {
        let cases: Vec<(Bson, Bson)> = vec![
            (bson!({"$add": [1, 2]}), bson!(3)),
            (bson!({"$add": [i32::MAX, 1]}), bson!(2_147_483_648_i64)),
            (bson!({"$add": [1, 2_i64]}), bson!(3_i64)),
            (bson!({"$add": [i64::MAX, 1]}), bson!(i64::MAX as f64 + 1.0)),
            (bson!({"$add": ["$a", "$b"]}), bson!(7.5)),
            (bson!({"$add": []}), bson!(0)),
            (bson!({"$add": ["$a", null]}), Bson::Null),
            (bson!({"$add": ["$a", "$missing"]}), Bson::Null),
            (bson!({"$add": [null, "x"]}), Bson::Null),
            (bson!({"$multiply": [null, "x"]}), Bson::Null),
            (bson!({"$subtract": [null, "x"]}), Bson::Null),
            (bson!({"$subtract": [5_i64, 2]}), bson!(3_i64)),
            (bson!({"$subtract": ["$when", "$when"]}), bson!(0_i64)),
            (bson!({"$add": ["$when", 500]}), date(1500)),
            (bson!({"$add": [1, "$when", 1.6]}), date(1003)),
            (bson!({"$subtract": ["$a", 7]}), bson!(-2)),
            (bson!({"$subtract": ["$l", 2.5]}), bson!(4.5)),
            (
                bson!({"$subtract": ["$$NOW", "$when"]}),
                bson!(NOW_MS - 1000),
            ),
            (bson!({"$subtract": ["$when", 1000]}), date(0)),
            (bson!({"$subtract": [null, 1]}), Bson::Null),
            (bson!({"$multiply": [3, 4]}), bson!(12)),
            (
                bson!({"$multiply": [65536, 65536]}),
                bson!(4_294_967_296_i64),
            ),
            (bson!({"$multiply": [2, 1.5]}), bson!(3.0)),
            (
                bson!({"$multiply": [{"$toLong": "$$NOW"}, 1000]}),
                bson!(NOW_MS * 1000),
            ),
            (bson!({"$multiply": []}), bson!(1)),
            (bson!({"$divide": [5, 2]}), bson!(2.5)),
            (bson!({"$divide": [4, 2]}), bson!(2.0)),
            (bson!({"$mod": [7, 3]}), bson!(1)),
            (bson!({"$mod": [-7, 3_i64]}), bson!(-1_i64)),
            (bson!({"$mod": [7.5, 2]}), bson!(1.5)),
            (bson!({"$abs": -5}), bson!(5)),
            (bson!({"$abs": [i32::MIN]}), bson!(2_147_483_648_i64)),
            (bson!({"$abs": null}), Bson::Null),
            (bson!({"$floor": 2.7}), bson!(2.0)),
            (bson!({"$ceil": 2.1}), bson!(3.0)),
            (bson!({"$floor": 2}), bson!(2)),
            (bson!({"$max": [1, 5, 3]}), bson!(5)),
            (bson!({"$max": "$arr"}), bson!(3)),
            (bson!({"$max": [null, "$missing"]}), Bson::Null),
            (bson!({"$max": [1, null, "x"]}), bson!("x")),
            (bson!({"$min": [4, null, 2]}), bson!(2)),
            (bson!({"$min": [[1, 2], 0]}), bson!(0)),
            (bson!({"$sum": "$arr"}), bson!(6)),
            (bson!({"$sum": ["$a", "$b", "x", null]}), bson!(7.5)),
            (bson!({"$sum": "$s"}), bson!(0)),
            (bson!({"$avg": [1, 2]}), bson!(1.5)),
            (bson!({"$avg": "$arr"}), bson!(2.0)),
            (bson!({"$avg": ["x"]}), Bson::Null),
        ];
        for (expr, expected) in cases {
            assert_eq!(eval(expr.clone()).unwrap(), Some(expected), "{expr:?}");
        }
    }

    #[test]
    fn conversions_and_types() {
        let cases: Vec<(Bson, Bson)> = vec![
            (bson!({"$toLong": "$$NOW"}), bson!(NOW_MS)),
            (bson!({"$toLong": "$b"}), bson!(2_i64)),
            (bson!({"$toLong": null}), Bson::Null),
            (bson!({"$toInt": "12"}), bson!(12)),
            (bson!({"$toDouble": "$a"}), bson!(5.0)),
            (bson!({"$toDate": 1000_i64}), date(1000)),
            (bson!({"$toString": "$a"}), bson!("5")),
            (
                bson!({"$toString": "$when"}),
                bson!("1970-01-01T00:00:01.000Z"),
            ),
            (bson!({"$toBool": 0}), bson!(false)),
            (bson!({"$toBool": "false"}), bson!(true)),
            (
                bson!({"$convert": {"input": "abc", "to": "int", "onError": -1}}),
                bson!(-1),
            ),
            (
                bson!({"$convert": {"input": "$missing", "to": "int", "onNull": "none"}}),
                bson!("none"),
            ),
            (
                bson!({"$convert": {"input": "$missing", "to": "int"}}),
                Bson::Null,
            ),
            (bson!({"$convert": {"input": "7", "to": 18}}), bson!(7_i64)),
            (bson!({"$convert": {"input": 1, "to": "bool"}}), bson!(true)),
            (bson!({"$type": "$missing"}), bson!("missing")),
            (bson!({"$type": "$l"}), bson!("long")),
            (bson!({"$type": [[1]]}), bson!("array")),
            (bson!({"$allElementsTrue": [[1, true, "x"]]}), bson!(true)),
            (bson!({"$allElementsTrue": [[1, 0]]}), bson!(false)),
            (bson!({"$allElementsTrue": [[]]}), bson!(true)),
            (bson!({"$anyElementTrue": [[0, null, false]]}), bson!(false)),
            (bson!({"$anyElementTrue": [[0, [0]]]}), bson!(true)),
            (bson!({"$anyElementTrue": [[]]}), bson!(false)),
            (bson!({"$isArray": "$arr"}), bson!(true)),
            (bson!({"$isArray": ["$s"]}), bson!(false)),
            (bson!({"$isNumber": "$b"}), bson!(true)),
            (bson!({"$toUpper": "$s"}), bson!("STR")),
            (bson!({"$toLower": null}), bson!("")),
            (
                bson!({"$dateToString": {"date": "$when", "format": "%Y/%m/%d %H:%M:%S.%L"}}),
                bson!("1970/01/01 00:00:01.000"),
            ),
            (
                bson!({"$dateToString": {"date": "$when"}}),
                bson!("1970-01-01T00:00:01.000Z"),
            ),
            (
                bson!({"$dateToString": {"date": "$missing", "onNull": "x"}}),
                bson!("x"),
            ),
        ];
        for (expr, expected) in cases {
            assert_eq!(eval(expr.clone()).unwrap(), Some(expected), "{expr:?}");
        }
    }

    #[test]
    fn arrays_and_objects() {
        let cases: Vec<(Bson, Option<Bson>)> = vec![
            (bson!({"$size": "$arr"}), Some(bson!(3))),
            (
                bson!({"$concatArrays": ["$arr", [4], []]}),
                Some(bson!([1, 2, 3, 4])),
            ),
            (
                bson!({"$concatArrays": ["$arr", "$missing"]}),
                Some(Bson::Null),
            ),
            (bson!({"$in": [2.0, "$arr"]}), Some(bson!(true))),
            (bson!({"$in": ["$missing", [null]]}), Some(bson!(false))),
            (bson!({"$arrayElemAt": ["$arr", 0]}), Some(bson!(1))),
            (bson!({"$arrayElemAt": ["$arr", -1]}), Some(bson!(3))),
            (bson!({"$arrayElemAt": ["$arr", 3]}), None),
            (bson!({"$arrayElemAt": ["$arr", 1.0]}), Some(bson!(2))),
            (bson!({"$arrayElemAt": ["$missing", 0]}), Some(Bson::Null)),
            (bson!({"$first": "$arr"}), Some(bson!(1))),
            (bson!({"$last": "$arr"}), Some(bson!(3))),
            (bson!({"$first": [[]]}), None),
            (bson!({"$first": "$missing"}), Some(Bson::Null)),
            (
                bson!({"$mergeObjects": [{"a": 1, "b": 1}, null, {"b": 2, "c": 3}]}),
                Some(bson!({"a": 1, "b": 2, "c": 3})),
            ),
            (
                bson!({"$mergeObjects": "$sub"}),
                Some(bson!({"x": {"y": 9}})),
            ),
            (bson!({"$concat": ["$s", "-", "x"]}), Some(bson!("str-x"))),
            (bson!({"$concat": ["$s", "$missing"]}), Some(Bson::Null)),
            (bson!({"$indexOfArray": ["$arr", 2]}), Some(bson!(1))),
            (bson!({"$indexOfArray": ["$arr", 9]}), Some(bson!(-1))),
            (bson!({"$indexOfArray": [[1, 2, 1], 1, 1]}), Some(bson!(2))),
            (
                bson!({"$indexOfArray": [[1, 2, 1], 1, 1, 2]}),
                Some(bson!(-1)),
            ),
            (bson!({"$slice": ["$arr", 2]}), Some(bson!([1, 2]))),
            (bson!({"$slice": ["$arr", -2]}), Some(bson!([2, 3]))),
            (bson!({"$slice": ["$arr", -5]}), Some(bson!([1, 2, 3]))),
            (bson!({"$slice": ["$arr", 1, 5]}), Some(bson!([2, 3]))),
            (bson!({"$slice": ["$arr", -2, 1]}), Some(bson!([2]))),
            (
                bson!({"$setUnion": [[3, 1], [1, 2.0, 2]]}),
                Some(bson!([1, 2.0, 3])),
            ),
            (bson!({"$getField": "a"}), Some(bson!(5))),
            (
                bson!({"$getField": {"field": "y", "input": "$sub.x"}}),
                Some(bson!(9)),
            ),
            (
                bson!({"$getField": {"field": {"$literal": "$x"}, "input": {"$literal": {"$x": 1}}}}),
                Some(bson!(1)),
            ),
            (bson!({"$getField": "nope"}), None),
            (
                bson!({"$getField": {"field": "a", "input": null}}),
                Some(Bson::Null),
            ),
            (
                bson!({"$setField": {"field": "k", "input": "$sub", "value": 1}}),
                Some(bson!({"x": {"y": 9}, "k": 1})),
            ),
            (
                bson!({"$setField": {"field": "x", "input": "$sub", "value": "$$REMOVE"}}),
                Some(bson!({})),
            ),
        ];
        for (expr, expected) in cases {
            assert_eq!(eval(expr.clone()).unwrap(), expected, "{expr:?}");
        }
    }

    #[test]
    fn scoped_variables() {
        let cases: Vec<(Bson, Bson)> = vec![
            (
                bson!({"$let": {"vars": {"x": 2, "y": "$a"}, "in": {"$multiply": ["$$x", "$$y"]}}}),
                bson!(10),
            ),
            (
                bson!({"$let": {"vars": {"x": 1}, "in": {"$let": {"vars": {"x": 2, "y": "$$x"}, "in": ["$$x", "$$y"]}}}}),
                bson!([2, 1]),
            ),
            (
                bson!({"$let": {"vars": {"o": "$sub"}, "in": "$$o.x.y"}}),
                bson!(9),
            ),
            (
                bson!({"$map": {"input": "$arr", "as": "v", "in": {"$add": ["$$v", "$a"]}}}),
                bson!([6, 7, 8]),
            ),
            (
                bson!({"$map": {"input": "$arr", "in": {"$multiply": ["$$this", 2]}}}),
                bson!([2, 4, 6]),
            ),
            (bson!({"$map": {"input": "$missing", "in": 1}}), Bson::Null),
            (
                bson!({"$map": {"input": [1], "in": "$$REMOVE"}}),
                bson!([null]),
            ),
            (
                bson!({"$filter": {"input": "$arr", "as": "v", "cond": {"$gte": ["$$v", 2]}}}),
                bson!([2, 3]),
            ),
            (
                bson!({"$filter": {"input": "$arr", "cond": {"$gte": ["$$this", 2]}, "limit": 1}}),
                bson!([2]),
            ),
            (
                bson!({"$filter": {"input": "$arr", "cond": true, "limit": null}}),
                bson!([1, 2, 3]),
            ),
            (
                bson!({"$filter": {"input": null, "cond": true}}),
                Bson::Null,
            ),
            (
                bson!({"$reduce": {"input": "$arr", "initialValue": 0, "in": {"$add": ["$$value", "$$this"]}}}),
                bson!(6),
            ),
            (
                bson!({"$reduce": {"input": [[1], [2]], "initialValue": [], "in": {"$concatArrays": ["$$value", "$$this"]}}}),
                bson!([1, 2]),
            ),
            (
                bson!({"$reduce": {"input": [], "initialValue": "init", "in": 1}}),
                bson!("init"),
            ),
            (
                bson!({"$map": {"input": [1, 2], "as": "x", "in": {"$map": {"input": [10], "as": "y", "in": {"$add": ["$$x", "$$y"]}}}}}),
                bson!([[11], [12]]),
            ),
        ];
        for (expr, expected) in cases {
            assert_eq!(eval(expr.clone()).unwrap(), Some(expected), "{expr:?}");
        }
    }

    /// The shape the lock library sends on every acquisition.
    #[test]
    fn lock_library_expressions() {
        let live = bson!({"$filter": {
            "input": {"$ifNull": ["$shared", []]},
            "as": "s",
            "cond": {"$or": [{"$eq": ["$$s.expiresAt", null]}, {"$gt": ["$$s.expiresAt", "$$NOW"]}]},
        }});
        let owners = |v: Bson| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    s.as_document()
                        .unwrap()
                        .get_str("owner")
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        assert_eq!(owners(eval(live.clone()).unwrap().unwrap()), ["b", "c"]);
        let fresh = Expr::parse(&live)
            .unwrap()
            .eval(&doc! {"_id": 1}, &ctx())
            .unwrap();
        assert_eq!(fresh, Some(bson!([])));

        let fence = |granted: bool| bson!({"$cond": [granted, {"$max": [{"$add": [{"$ifNull": ["$fence", 0]}, 1]}, {"$multiply": [{"$toLong": "$$NOW"}, 1000]}]}, "$fence"]});
        let e = Expr::parse(&fence(true)).unwrap();
        assert_eq!(
            e.eval(&doc! {}, &ctx()).unwrap(),
            Some(bson!(NOW_MS * 1000))
        );
        let big = NOW_MS * 1000 + 5;
        assert_eq!(
            e.eval(&doc! {"fence": big}, &ctx()).unwrap(),
            Some(bson!(big + 1))
        );
        let e = Expr::parse(&fence(false)).unwrap();
        assert_eq!(
            e.eval(&doc! {"fence": 7_i64}, &ctx()).unwrap(),
            Some(bson!(7_i64))
        );
        assert_eq!(e.eval(&doc! {}, &ctx()).unwrap(), None);
    }

    #[test]
    fn rand_is_a_fresh_double_in_unit_interval() {
        let e = Expr::parse(&bson!({"$rand": {}})).unwrap();
        let values: Vec<f64> = (0..20)
            .map(|_| match e.eval(&doc! {}, &ctx()).unwrap() {
                Some(Bson::Double(x)) => x,
                other => panic!("$rand gave {other:?}"),
            })
            .collect();
        assert!(values.iter().all(|x| (0.0..1.0).contains(x)));
        assert!(values.iter().any(|x| *x != values[0]));
    }

    #[test]
    fn parse_errors_have_mongod_shapes() {
        let cases: Vec<(Bson, i32, &str)> = vec![
            (bson!({"$foo": 1}), 168, "Unrecognized expression '$foo'"),
            (
                bson!({"$rand": 1}),
                10065,
                "invalid parameter: expected an object ($rand)",
            ),
            (
                bson!({"$rand": {"a": 1}}),
                3040501,
                "$rand does not currently accept arguments",
            ),
            (
                bson!({"$add": 1, "b": 1}),
                15983,
                "An object representing an expression must have exactly one field: { $add: 1, b: 1 }",
            ),
            (
                bson!({"a": 1, "$add": 1}),
                16410,
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
            ),
            (
                bson!({"a.b": 1}),
                16412,
                "FieldPath field names may not contain '.'.",
            ),
            (
                bson!({"$eq": [1]}),
                16020,
                "Expression $eq takes exactly 2 arguments. 1 were passed in.",
            ),
            (
                bson!({"$size": [1, 2]}),
                16020,
                "Expression $size takes exactly 1 arguments. 2 were passed in.",
            ),
            (
                bson!({"$cond": [1, 2]}),
                16020,
                "Expression $cond takes exactly 3 arguments. 2 were passed in.",
            ),
            (
                bson!({"$slice": [[1]]}),
                28667,
                "Expression $slice takes at least 2 arguments, and at most 3, but 1 were passed in.",
            ),
            (
                bson!({"$ifNull": ["$a"]}),
                1257300,
                "$ifNull needs at least two arguments, had: 1",
            ),
            (bson!("$"), 16872, "'$' by itself is not a valid FieldPath"),
            (
                bson!("$a..b"),
                15998,
                "FieldPath field names may not be empty strings.",
            ),
            (bson!("$$"), 16869, "empty variable names are not allowed"),
            (bson!("$$FOO"), 17276, "Use of undefined variable: FOO"),
            (
                bson!("$$a-b"),
                16871,
                "'a-b' contains an invalid character for a variable name: '-'",
            ),
            (
                bson!("$$1a"),
                16870,
                "'1a' starts with an invalid character for a variable name",
            ),
            (
                bson!({"$let": {"vars": {"Bad": 1}, "in": 1}}),
                16867,
                "'Bad' starts with an invalid character for a user variable name",
            ),
            (
                bson!({"$let": {"vars": {}}}),
                16877,
                "Missing 'in' parameter to $let",
            ),
            (
                bson!({"$let": {"in": 1}}),
                16876,
                "Missing 'vars' parameter to $let",
            ),
            (
                bson!({"$cond": {"if": 1, "then": 2}}),
                17082,
                "Missing 'else' parameter to $cond",
            ),
            (
                bson!({"$cond": {"if": 1, "then": 2, "else": 3, "x": 4}}),
                17083,
                "Unrecognized parameter to $cond: x",
            ),
            (
                bson!({"$filter": {"input": []}}),
                28650,
                "Missing 'cond' parameter to $filter",
            ),
            (
                bson!({"$filter": {"input": [], "cond": 1, "x": 1}}),
                28647,
                "Unrecognized parameter to $filter: x",
            ),
            (
                bson!({"$filter": {"input": [], "as": 1, "cond": 1}}),
                16866,
                "empty variable names are not allowed",
            ),
            (
                bson!({"$reduce": 1}),
                40075,
                "$reduce requires an object as an argument, found: int",
            ),
            (
                bson!({"$map": {"in": 1}}),
                16880,
                "Missing 'input' parameter to $map",
            ),
            (
                bson!({"$switch": {"branches": []}}),
                40068,
                "$switch requires at least one branch.",
            ),
            (
                bson!({"$switch": {"branches": [{"then": 1}]}}),
                40064,
                "$switch requires each branch have a 'case' expression",
            ),
            (
                bson!({"$convert": {"input": 1}}),
                9,
                "Missing 'to' parameter to $convert",
            ),
            (
                bson!({"$getField": {"field": "$a"}}),
                5654601,
                "$getField requires 'field' to evaluate to a constant, but got a non-constant argument",
            ),
        ];
        for (expr, code, msg) in cases {
            let e = Expr::parse(&expr).unwrap_err();
            assert_eq!((e.code, e.errmsg.as_str()), (code, msg), "{expr:?}");
        }
    }

    #[test]
    fn eval_errors_have_mongod_shapes() {
        let cases: Vec<(Bson, i32, &str)> = vec![
            (
                bson!({"$add": ["$a", "$s"]}),
                14,
                "$add only supports numeric or date types, not string",
            ),
            (
                bson!({"$add": ["$when", "$when"]}),
                16612,
                "only one date allowed in an $add expression",
            ),
            (
                bson!({"$subtract": ["$a", "$when"]}),
                14,
                "can't $subtract date from int",
            ),
            (
                bson!({"$subtract": ["$s", 1]}),
                14,
                "can't $subtract int from string",
            ),
            (
                bson!({"$subtract": ["$when", "$s"]}),
                14,
                "can't $subtract string from Date",
            ),
            (
                bson!({"$multiply": ["$a", "$s"]}),
                14,
                "$multiply only supports numeric types, not string",
            ),
            (bson!({"$divide": ["$a", 0]}), 2, "can't $divide by zero"),
            (
                bson!({"$divide": ["$s", 1]}),
                14,
                "$divide only supports numeric types, not string and int",
            ),
            (bson!({"$mod": ["$a", 0]}), 16610, "can't $mod by zero"),
            (
                bson!({"$mod": ["$a", "x"]}),
                16611,
                "$mod only supports numeric types, not int and string",
            ),
            (
                bson!({"$abs": "$s"}),
                28765,
                "$abs only supports numeric types, not string",
            ),
            (
                bson!({"$abs": i64::MIN}),
                28680,
                "can't take $abs of long long min",
            ),
            (
                bson!({"$size": "$s"}),
                17124,
                "The argument to $size must be an array, but was of type: string",
            ),
            (
                bson!({"$size": "$missing"}),
                17124,
                "The argument to $size must be an array, but was of type: missing",
            ),
            (
                bson!({"$arrayElemAt": ["$s", 0]}),
                28689,
                "$arrayElemAt's first argument must be an array, but is string",
            ),
            (
                bson!({"$arrayElemAt": ["$arr", "x"]}),
                28690,
                "$arrayElemAt's second argument must be a numeric value, but is string",
            ),
            (
                bson!({"$arrayElemAt": ["$arr", 1.5]}),
                28691,
                "$arrayElemAt's second argument must be representable as a 32-bit integer: 1.5",
            ),
            (
                bson!({"$concatArrays": ["$arr", "$s"]}),
                28664,
                "$concatArrays only supports arrays, not string",
            ),
            (
                bson!({"$in": [1, "$s"]}),
                40081,
                "$in requires an array as a second argument, found: string",
            ),
            (
                bson!({"$in": [1, "$missing"]}),
                40081,
                "$in requires an array as a second argument, found: missing",
            ),
            (
                bson!({"$filter": {"input": "$s", "cond": true}}),
                28651,
                "input to $filter must be an array not string",
            ),
            (
                bson!({"$filter": {"input": [1], "cond": true, "limit": 0}}),
                327392,
                "$filter: limit must be greater than 0: 0",
            ),
            (
                bson!({"$filter": {"input": [1], "cond": true, "limit": 1.5}}),
                327391,
                "$filter: limit must be represented as a 32-bit integral value: 1.5",
            ),
            (
                bson!({"$indexOfArray": ["$arr", 1, -1]}),
                9711601,
                "$indexOfArray requires a nonnegative starting index, found: -1",
            ),
            (
                bson!({"$map": {"input": 1, "in": 1}}),
                16883,
                "input to $map must be an array not int",
            ),
            (
                bson!({"$reduce": {"input": 1, "initialValue": 0, "in": 1}}),
                40080,
                "$reduce requires that 'input' be an array, found: 1",
            ),
            (
                bson!({"$mergeObjects": [{"a": 1}, 1]}),
                40400,
                "$mergeObjects requires object inputs, but input 1 is of type int",
            ),
            (
                bson!({"$concat": ["a", 1]}),
                16702,
                "$concat only supports strings, not int",
            ),
            (
                bson!({"$toLong": "$sub"}),
                241,
                "Unsupported conversion from object to long in $convert with no onError value",
            ),
            (
                bson!({"$toLong": "x1"}),
                241,
                "Failed to parse number 'x1' in $convert with no onError value: Did not consume whole string.",
            ),
            (
                bson!({"$convert": {"input": "$sub", "to": "int"}}),
                241,
                "Unsupported conversion from object to int in $convert with no onError value",
            ),
            (
                bson!({"$convert": {"input": 1, "to": "nope"}}),
                2,
                "Unknown type name: nope",
            ),
            (
                bson!("$$undefinedVar"),
                17276,
                "Use of undefined variable: undefinedVar",
            ),
            (
                bson!({"$slice": ["$s", 1]}),
                28724,
                "First argument to $slice must be an array, but is of type: string",
            ),
            (
                bson!({"$slice": ["$arr", 0, 0]}),
                28729,
                "Third argument to $slice must be positive: 0",
            ),
            (
                bson!({"$indexOfArray": ["$s", 1]}),
                40090,
                "$indexOfArray requires an array as a first argument, found: string",
            ),
            (
                bson!({"$getField": {"field": "a", "input": 1}}),
                3041705,
                "$getField requires 'input' to evaluate to type Object, but got int",
            ),
            (
                bson!({"$setUnion": [[1], 2]}),
                17043,
                "All operands of $setUnion must be arrays. One argument is of type: int",
            ),
            (
                bson!({"$allElementsTrue": [5]}),
                17040,
                "$allElementsTrue's argument must be an array, but is int",
            ),
            (
                bson!({"$anyElementTrue": ["$missing"]}),
                17041,
                "$anyElementTrue's argument must be an array, but is missing",
            ),
        ];
        for (expr, code, msg) in cases {
            let parsed =
                Expr::parse(&expr).unwrap_or_else(|e| panic!("{expr:?} failed to parse: {e}"));
            let e = parsed.eval(&sample(), &ctx()).unwrap_err();
            assert_eq!((e.code, e.errmsg.as_str()), (code, msg), "{expr:?}");
        }
    }

    #[test]
    fn deep_nesting_and_extreme_values_do_not_panic() {
        let mut e = bson!(1);
        for _ in 0..1000 {
            e = bson!({"$add": [e]});
        }
        assert_eq!(Expr::parse(&e).unwrap_err().code, 15);
        assert_eq!(
            eval(bson!({"$add": [i64::MAX, i64::MAX, "$when"]}))
                .unwrap_err()
                .code,
            15
        );
        assert_eq!(
            eval(bson!({"$subtract": ["$when", f64::INFINITY]}))
                .unwrap_err()
                .code,
            15
        );
        assert_eq!(
            eval(bson!({"$mod": [i64::MIN, -1]})).unwrap(),
            Some(bson!(0_i64))
        );
        assert_eq!(
            eval(bson!({"$multiply": [i64::MIN, -1]})).unwrap(),
            Some(bson!(-(i64::MIN as f64)))
        );
        assert_eq!(
            eval(bson!({"$toInt": f64::INFINITY})).unwrap_err().code,
            241
        );
        assert_eq!(eval(bson!({"$toLong": 9.3e18})).unwrap_err().code, 241);
        assert_eq!(
            eval(bson!({"$slice": ["$arr", i32::MIN]})).unwrap(),
            Some(bson!([1, 2, 3]))
        );
        assert_eq!(
            eval(bson!({"$arrayElemAt": ["$arr", i32::MIN]})).unwrap(),
            None
        );
    }

    #[test]
    fn let_variables_known_at_parse_time() {
        let vars = doc! {"limit": 3};
        let e = Expr::parse_with_let(&bson!({"$add": ["$$limit", 1]}), &vars).unwrap();
        let mut c = ctx();
        c.vars = vars.clone();
        assert_eq!(e.eval(&doc! {}, &c).unwrap(), Some(bson!(4)));
        let err = Expr::parse_with_let(&bson!({"$add": ["$$limt", 1]}), &vars).unwrap_err();
        assert_eq!(
            (err.code, err.errmsg.as_str()),
            (17276, "Use of undefined variable: limt")
        );
        // Scoped variables stay visible, and are only visible inside their scope.
        let scoped = bson!({"$map": {"input": [1], "as": "x", "in": {"$add": ["$$x", "$$limit"]}}});
        assert!(Expr::parse_with_let(&scoped, &vars).is_ok());
        let outside = bson!([{"$let": {"vars": {"y": 1}, "in": "$$y"}}, "$$y"]);
        assert_eq!(
            Expr::parse_with_let(&outside, &vars).unwrap_err().code,
            17276
        );
    }

    #[test]
    fn parsed_expressions_are_reusable_across_documents() {
        let e = Expr::parse(&bson!({"$add": ["$a", 1]})).unwrap();
        let c = ctx();
        let results: Vec<_> = [doc! {"a": 1}, doc! {"a": 2.5}, doc! {}]
            .iter()
            .map(|d| e.eval(d, &c).unwrap())
            .collect();
        assert_eq!(
            results,
            vec![Some(bson!(2)), Some(bson!(3.5)), Some(Bson::Null)]
        );
        assert!(truthy(Some(&bson!([]))));
        assert!(!truthy(Some(&bson!(-0.0))));
    }
}
