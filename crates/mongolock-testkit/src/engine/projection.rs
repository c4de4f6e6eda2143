//! Find projections (`{a: 1}`, `{a: 0}`, dotted paths, `$slice`, `$elemMatch`, expressions).
//!
//! mongod 4.4+ semantics:
//!
//! * a projection is either an *inclusion* (only the named fields, plus `_id` unless
//!   `_id: 0`) or an *exclusion* (everything but the named fields); mixing fails with code
//!   31253/31254, except that `_id` may be excluded from an inclusion and included in an
//!   exclusion;
//! * dotted paths (`"a.b": 1`) and the nested form (`{a: {b: 1}}`) reach through documents
//!   and arrays of documents; `a` and `a.b` together is a path collision (31249/31250);
//! * `{$slice: n}`, `{$slice: [skip, n]}` trim arrays and keep the projection's mode;
//! * `{$elemMatch: {...}}` (top-level fields only) keeps the first matching element and
//!   makes the projection an inclusion;
//! * any other value that is not a number or boolean is an aggregation expression
//!   (`{x: "$a"}`, `{x: {$add: [..]}}`, `{x: {$literal: 1}}`, `{x: "text"}`), evaluated
//!   against the whole document, which makes the projection an inclusion.
//!
//! Not implemented (rejected when parsed, never ignored): the positional projection `a.$`
//! (it needs the query's match details) and `$meta`.

// `CommandError` is large (reply extras, labels); boxing it is the lead's call (error.rs).
#![allow(clippy::result_large_err)]

use bson::{Bson, Document};

use super::expr::Expr;
use super::matcher::ValueMatcher;
use super::{CommandError, EvalContext, Result};

/// A parsed find/findAndModify projection.
#[derive(Debug, Clone)]
pub struct Projection {
    root: Node,
    inclusion: bool,
    /// Whether the projection is empty (the document is returned unchanged).
    identity: bool,
}

#[derive(Debug, Clone, Default)]
struct Node {
    children: Vec<(String, Item)>,
}

#[derive(Debug, Clone)]
enum Item {
    Include,
    Exclude,
    Sub(Node),
    Slice { skip: Option<i64>, limit: i64 },
    ElemMatch(Box<ValueMatcher>),
    Computed(Box<Expr>),
}

impl Node {
    fn get(&self, key: &str) -> Option<&Item> {
        self.children
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, item)| item)
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut Item> {
        self.children
            .iter_mut()
            .find(|(k, _)| k == key)
            .map(|(_, item)| item)
    }

    /// Inserts `item` at `parts`, failing on a path collision as mongod does.
    fn insert(&mut self, parts: &[&str], full: &str, item: Item) -> Result<()> {
        let Some((head, rest)) = parts.split_first() else {
            return Err(CommandError::internal("empty projection path"));
        };
        if rest.is_empty() {
            if self.get(head).is_some() {
                return Err(CommandError::new(
                    31250,
                    format!("Path collision at {full}"),
                ));
            }
            self.children.push((head.to_string(), item));
            return Ok(());
        }
        if self.get(head).is_none() {
            self.children
                .push((head.to_string(), Item::Sub(Node::default())));
        }
        match self.get_mut(head) {
            Some(Item::Sub(node)) => node.insert(rest, full, item),
            _ => Err(CommandError::new(
                31249,
                format!(
                    "Path collision at {full} remaining portion {}",
                    rest.join(".")
                ),
            )),
        }
    }
}

/// What a projection item says about the projection's mode.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Inclusion,
    Exclusion,
}

struct Parser {
    root: Node,
    /// The mode fixed by the first item that decides it.
    mode: Option<bool>,
    /// Top-level `_id`: `Some(true)` for `_id: 1`, `Some(false)` for `_id: 0`.
    id: Option<bool>,
}

fn is_truthy_number(v: &Bson) -> Option<bool> {
    match v {
        Bson::Boolean(b) => Some(*b),
        Bson::Int32(i) => Some(*i != 0),
        Bson::Int64(i) => Some(*i != 0),
        Bson::Double(d) => Some(*d != 0.0),
        Bson::Decimal128(_) => super::compare::as_f64(v).map(|f| f != 0.0),
        _ => None,
    }
}

fn validate_path(path: &str) -> Result<Vec<&str>> {
    if path.is_empty() {
        return Err(CommandError::new(
            40352,
            "FieldPath cannot be constructed with empty string",
        ));
    }
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(CommandError::new(
            15998,
            "FieldPath field names may not be empty strings.",
        ));
    }
    if parts.iter().any(|p| p.starts_with('$')) {
        return Err(CommandError::new(
            16410,
            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
        ));
    }
    Ok(parts)
}

fn slice_args(arg: &Bson) -> Option<Result<(Option<i64>, i64)>> {
    let int = |v: &Bson| match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.is_finite() => Some(d.trunc() as i64),
        _ => None,
    };
    match arg {
        Bson::Array(items) if items.len() == 2 => {
            let (skip, limit) = (int(&items[0])?, int(&items[1])?);
            if limit <= 0 {
                return Some(Err(CommandError::new(
                    28724,
                    "$slice limit must be positive",
                )));
            }
            Some(Ok((Some(skip), limit)))
        }
        other => int(other).map(|n| Ok((None, n))),
    }
}

impl Parser {
    fn note(&mut self, path: &str, kind: Kind, computed: bool) -> Result<()> {
        match (kind, self.mode) {
            (Kind::Inclusion, None) => self.mode = Some(true),
            (Kind::Exclusion, None) => self.mode = Some(false),
            (Kind::Inclusion, Some(false)) if computed => {
                return Err(CommandError::new(
                    31252,
                    "Cannot use expression other than $meta in exclusion projection",
                ));
            }
            (Kind::Inclusion, Some(false)) => {
                return Err(CommandError::new(
                    31253,
                    format!("Cannot do inclusion on field {path} in exclusion projection"),
                ));
            }
            (Kind::Exclusion, Some(true)) => {
                return Err(CommandError::new(
                    31254,
                    format!("Cannot do exclusion on field {path} in inclusion projection"),
                ));
            }
            _ => {}
        }
        Ok(())
    }

    fn field(&mut self, path: &str, value: &Bson) -> Result<()> {
        if path.ends_with(".$") || path == "$" {
            return Err(CommandError::bad_value(format!(
                "positional projection ({path}) is not supported by the emulator"
            )));
        }
        let parts = validate_path(path)?;
        let top_id = path == "_id";
        if let Some(include) = is_truthy_number(value) {
            if top_id {
                self.id = Some(include);
            } else {
                let kind = if include {
                    Kind::Inclusion
                } else {
                    Kind::Exclusion
                };
                self.note(path, kind, false)?;
            }
            let item = if include {
                Item::Include
            } else {
                Item::Exclude
            };
            return self.root.insert(&parts, path, item);
        }
        if let Bson::Document(spec) = value {
            let first = spec.keys().next().map(String::as_str);
            match first {
                None => {
                    return Err(CommandError::new(
                        51270,
                        format!(
                            "An empty sub-projection is not a valid value. Found empty object at path {path}"
                        ),
                    ));
                }
                Some("$slice") if spec.len() == 1 => {
                    if let Some(args) = spec.get("$slice").and_then(slice_args) {
                        let (skip, limit) = args?;
                        return self.root.insert(&parts, path, Item::Slice { skip, limit });
                    }
                }
                Some("$elemMatch") => {
                    if parts.len() > 1 {
                        return Err(CommandError::new(
                            31275,
                            "Cannot use $elemMatch projection on a nested field.",
                        ));
                    }
                    let Some(Bson::Document(cond)) = spec.get("$elemMatch") else {
                        return Err(CommandError::bad_value(
                            "elemMatch: Invalid argument, object required.",
                        ));
                    };
                    if spec.len() != 1 {
                        return Err(CommandError::bad_value(format!(
                            "Unrecognized field in $elemMatch projection at path {path}"
                        )));
                    }
                    self.note(path, Kind::Inclusion, false)?;
                    let matcher = ValueMatcher::elem_match(cond)?;
                    return self
                        .root
                        .insert(&parts, path, Item::ElemMatch(Box::new(matcher)));
                }
                Some("$meta") => {
                    return Err(CommandError::bad_value(format!(
                        "$meta projection (field {path}) is not supported by the emulator"
                    )));
                }
                Some(k) if !k.starts_with('$') => {
                    // Nested form: {a: {b: 1}} is {"a.b": 1}.
                    for (sub, v) in spec {
                        self.field(&format!("{path}.{sub}"), v)?;
                    }
                    return Ok(());
                }
                _ => {}
            }
        }
        let expr = Expr::parse(value)?;
        self.note(path, Kind::Inclusion, true)?;
        self.root
            .insert(&parts, path, Item::Computed(Box::new(expr)))
    }
}

fn slice(items: &[Bson], skip: Option<i64>, limit: i64) -> Vec<Bson> {
    let len = items.len() as i64;
    let (start, count) = match skip {
        None if limit >= 0 => (0, limit),
        None => ((len + limit).max(0), len),
        Some(s) if s < 0 => ((len + s).max(0), limit),
        Some(s) => (s.min(len), limit),
    };
    let end = start.saturating_add(count).min(len);
    items[start as usize..end.max(start) as usize].to_vec()
}

struct Apply<'a> {
    root_doc: &'a Document,
    ctx: &'a EvalContext,
}

impl Apply<'_> {
    fn include_doc(
        &self,
        node: &Node,
        src: &Document,
        top: bool,
        include_id: bool,
    ) -> Result<Document> {
        let mut out = Document::new();
        if top
            && include_id
            && node.get("_id").is_none()
            && let Some(id) = src.get("_id")
        {
            out.insert("_id", id.clone());
        }
        for (key, value) in src {
            match node.get(key) {
                Some(Item::Include) => {
                    out.insert(key.clone(), value.clone());
                }
                Some(Item::Sub(sub)) => {
                    if let Some(v) = self.include_value(sub, value)? {
                        out.insert(key.clone(), v);
                    }
                }
                Some(Item::Slice { skip, limit }) => {
                    let v = match value {
                        Bson::Array(items) => Bson::Array(slice(items, *skip, *limit)),
                        other => other.clone(),
                    };
                    out.insert(key.clone(), v);
                }
                _ => {}
            }
        }
        // Sub-projections with computed fields create their parents when missing.
        for (key, item) in &node.children {
            if let (Item::Sub(sub), false) = (item, src.contains_key(key))
                && sub.has_computed()
            {
                let d = self.include_doc(sub, &Document::new(), false, false)?;
                out.insert(key.clone(), d);
            }
        }
        // Computed and $elemMatch fields come after the included ones, in projection order.
        for (key, item) in &node.children {
            match item {
                Item::Computed(expr) => {
                    if let Some(v) = expr.eval(self.root_doc, self.ctx)? {
                        out.insert(key.clone(), v);
                    }
                }
                Item::ElemMatch(matcher) => {
                    if let Some(Bson::Array(items)) = src.get(key)
                        && let Some(i) = matcher.first_match(items, self.ctx)?
                    {
                        out.insert(key.clone(), Bson::Array(vec![items[i].clone()]));
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// An inclusion sub-projection applied to a value: documents are projected, arrays are
    /// projected element-wise (dropping scalars), other values disappear.
    fn include_value(&self, node: &Node, value: &Bson) -> Result<Option<Bson>> {
        Ok(match value {
            Bson::Document(d) => Some(Bson::Document(self.include_doc(node, d, false, false)?)),
            Bson::Array(items) => {
                let mut out = Vec::new();
                for item in items {
                    if let Some(v) = self.include_value(node, item)? {
                        out.push(v);
                    }
                }
                Some(Bson::Array(out))
            }
            _ => None,
        })
    }

    fn exclude_doc(&self, node: &Node, src: &Document) -> Document {
        let mut out = Document::new();
        for (key, value) in src {
            match node.get(key) {
                Some(Item::Exclude) => {}
                Some(Item::Sub(sub)) => {
                    out.insert(key.clone(), self.exclude_value(sub, value));
                }
                Some(Item::Slice { skip, limit }) => {
                    let v = match value {
                        Bson::Array(items) => Bson::Array(slice(items, *skip, *limit)),
                        other => other.clone(),
                    };
                    out.insert(key.clone(), v);
                }
                _ => {
                    out.insert(key.clone(), value.clone());
                }
            }
        }
        out
    }

    fn exclude_value(&self, node: &Node, value: &Bson) -> Bson {
        match value {
            Bson::Document(d) => Bson::Document(self.exclude_doc(node, d)),
            Bson::Array(items) => {
                Bson::Array(items.iter().map(|v| self.exclude_value(node, v)).collect())
            }
            other => other.clone(),
        }
    }
}

impl Node {
    fn has_computed(&self) -> bool {
        self.children.iter().any(|(_, item)| match item {
            Item::Computed(_) => true,
            Item::Sub(sub) => sub.has_computed(),
            _ => false,
        })
    }
}

impl Projection {
    /// Parses a projection document.
    pub fn parse(spec: &Document) -> Result<Projection> {
        let mut parser = Parser {
            root: Node::default(),
            mode: None,
            id: None,
        };
        for (key, value) in spec {
            parser.field(key, value)?;
        }
        // `{_id: 1}` alone is an inclusion of `_id` only; `{_id: 0}` alone an exclusion.
        let inclusion = parser.mode.unwrap_or(parser.id == Some(true));
        Ok(Projection {
            root: parser.root,
            inclusion,
            identity: spec.is_empty(),
        })
    }

    /// Whether this is an inclusion projection (only named fields are returned).
    pub fn is_inclusion(&self) -> bool {
        self.inclusion
    }

    /// Applies the projection to one document.
    pub fn apply(&self, doc: &Document, ctx: &EvalContext) -> Result<Document> {
        if self.identity {
            return Ok(doc.clone());
        }
        let run = Apply { root_doc: doc, ctx };
        if self.inclusion {
            let include_id = !matches!(self.root.get("_id"), Some(Item::Exclude));
            run.include_doc(&self.root, doc, true, include_id)
        } else {
            Ok(run.exclude_doc(&self.root, doc))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{DateTime, doc};

    fn ctx() -> EvalContext {
        EvalContext::at(DateTime::from_millis(0))
    }

    fn project(spec: Document, d: &Document) -> Document {
        Projection::parse(&spec)
            .unwrap_or_else(|e| panic!("parse {spec}: {e}"))
            .apply(d, &ctx())
            .unwrap_or_else(|e| panic!("apply {spec}: {e}"))
    }

    fn sample() -> Document {
        doc! {
            "_id": 1,
            "a": 1,
            "b": {"c": 2, "d": 3},
            "arr": [{"x": 1, "y": 2}, {"x": 3}, 5, [{"x": 4, "y": 0}]],
            "nums": [1, 2, 3, 4, 5],
        }
    }

    #[test]
    fn inclusion_and_exclusion() {
        let d = sample();
        let cases: Vec<(Document, Document)> = vec![
            (doc! {}, d.clone()),
            (doc! {"a": 1}, doc! {"_id": 1, "a": 1}),
            (doc! {"a": true, "_id": 0}, doc! {"a": 1}),
            (doc! {"_id": 1}, doc! {"_id": 1}),
            (doc! {"_id": 0}, {
                let mut x = d.clone();
                x.remove("_id");
                x
            }),
            (
                doc! {"b": 1, "a": 1},
                doc! {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}},
            ),
            (doc! {"missing": 1}, doc! {"_id": 1}),
            (doc! {"b.c": 1}, doc! {"_id": 1, "b": {"c": 2}}),
            (doc! {"b": {"d": 1}}, doc! {"_id": 1, "b": {"d": 3}}),
            (doc! {"a.z": 1}, doc! {"_id": 1}),
            (doc! {"b.z": 1}, doc! {"_id": 1, "b": {}}),
            (
                doc! {"arr.x": 1},
                doc! {"_id": 1, "arr": [{"x": 1}, {"x": 3}, [{"x": 4}]]},
            ),
            (
                doc! {"a": 0, "nums": 0, "arr": 0},
                doc! {"_id": 1, "b": {"c": 2, "d": 3}},
            ),
            (
                doc! {"b.c": 0, "arr": 0, "nums": 0},
                doc! {"_id": 1, "a": 1, "b": {"d": 3}},
            ),
            (
                doc! {"arr.y": 0, "a": 0, "b": 0, "nums": 0, "_id": 0},
                doc! {"arr": [{"x": 1}, {"x": 3}, 5, [{"x": 4}]]},
            ),
            (
                doc! {"a": 0, "_id": 1, "b": 0, "arr": 0},
                doc! {"_id": 1, "nums": [1, 2, 3, 4, 5]},
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(project(spec.clone(), &d), want, "{spec}");
        }
    }

    #[test]
    fn slice_and_elem_match() {
        let d = sample();
        let nums = |spec: Document| project(spec, &d).get("nums").cloned();
        let cases: Vec<(Bson, Bson)> = vec![
            (Bson::Int32(2), bson::bson!([1, 2])),
            (Bson::Int32(-2), bson::bson!([4, 5])),
            (Bson::Int32(0), bson::bson!([])),
            (Bson::Int32(9), bson::bson!([1, 2, 3, 4, 5])),
            (Bson::Int32(-9), bson::bson!([1, 2, 3, 4, 5])),
            (bson::bson!([1, 2]), bson::bson!([2, 3])),
            (bson::bson!([-2, 5]), bson::bson!([4, 5])),
            (bson::bson!([-9, 2]), bson::bson!([1, 2])),
            (bson::bson!([7, 2]), bson::bson!([])),
        ];
        for (arg, want) in cases {
            assert_eq!(
                nums(doc! {"nums": {"$slice": arg.clone()}}),
                Some(want),
                "$slice {arg}"
            );
        }
        // $slice alone keeps the other fields; with an inclusion only the named ones.
        assert_eq!(project(doc! {"nums": {"$slice": 1}}, &d).len(), d.len());
        assert_eq!(
            project(doc! {"nums": {"$slice": 1}, "a": 1}, &d),
            doc! {"_id": 1, "a": 1, "nums": [1]}
        );
        assert_eq!(
            project(doc! {"a": {"$slice": 1}, "_id": 0}, &d).get("a"),
            Some(&Bson::Int32(1))
        );
        // $elemMatch: first matching element, after the other included fields.
        let students = doc! {
            "_id": 1, "students": [
                {"name": "john", "school": 102, "age": 10},
                {"name": "jess", "school": 102, "age": 11},
            ], "zip": "63109",
        };
        assert_eq!(
            project(
                doc! {"students": {"$elemMatch": {"school": 102}}, "zip": 1},
                &students
            ),
            doc! {"_id": 1, "zip": "63109", "students": [{"name": "john", "school": 102, "age": 10}]}
        );
        assert_eq!(
            project(
                doc! {"students": {"$elemMatch": {"age": {"$gt": 10}}}},
                &students
            ),
            doc! {"_id": 1, "students": [{"name": "jess", "school": 102, "age": 11}]}
        );
        assert_eq!(
            project(doc! {"students": {"$elemMatch": {"school": 1}}}, &students),
            doc! {"_id": 1}
        );
        assert_eq!(
            project(doc! {"nums": {"$elemMatch": {"$gte": 4}}, "_id": 0}, &d),
            doc! {"nums": [4]}
        );
    }

    #[test]
    fn parse_errors_have_mongod_shape() {
        let cases: Vec<(Document, i32, &str)> = vec![
            (
                doc! {"a": 1, "b": 0},
                31254,
                "Cannot do exclusion on field b in inclusion projection",
            ),
            (
                doc! {"a": 0, "b": 1},
                31253,
                "Cannot do inclusion on field b in exclusion projection",
            ),
            (
                doc! {"a": 0, "b": {"c": 1}},
                31253,
                "Cannot do inclusion on field b.c in exclusion projection",
            ),
            (
                doc! {"a": 1, "a.b": 1},
                31249,
                "Path collision at a.b remaining portion b",
            ),
            (doc! {"a.b": 1, "a": 1}, 31250, "Path collision at a"),
            (doc! {"a.b.c": 0, "a.b": 0}, 31250, "Path collision at a.b"),
            (
                doc! {"a": {}},
                51270,
                "An empty sub-projection is not a valid value. Found empty object at path a",
            ),
            (
                doc! {"a.b": {"$elemMatch": {"x": 1}}},
                31275,
                "Cannot use $elemMatch projection on a nested field.",
            ),
            (
                doc! {"a": {"$slice": [1, 0]}},
                28724,
                "$slice limit must be positive",
            ),
            (
                doc! {"a..b": 1},
                15998,
                "FieldPath field names may not be empty strings.",
            ),
            (
                doc! {"": 1},
                40352,
                "FieldPath cannot be constructed with empty string",
            ),
            (
                doc! {"$a": 1},
                16410,
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
            ),
        ];
        for (spec, code, msg) in cases {
            let err = Projection::parse(&spec).unwrap_err();
            assert_eq!((err.code, err.errmsg.as_str()), (code, msg), "{spec}");
        }
        let positional = Projection::parse(&doc! {"a.$": 1}).unwrap_err();
        assert_eq!(positional.code, 2);
        assert!(
            positional.errmsg.contains("positional projection"),
            "{}",
            positional.errmsg
        );
        assert_eq!(
            Projection::parse(&doc! {"s": {"$meta": "textScore"}})
                .unwrap_err()
                .code,
            2
        );
        assert_eq!(
            Projection::parse(&doc! {"a": {"$elemMatch": 1}})
                .unwrap_err()
                .errmsg,
            "elemMatch: Invalid argument, object required."
        );
        assert!(Projection::parse(&doc! {"a": 1}).unwrap().is_inclusion());
        assert!(!Projection::parse(&doc! {"a": 0}).unwrap().is_inclusion());
        assert!(
            !Projection::parse(&doc! {"a": {"$slice": 1}})
                .unwrap()
                .is_inclusion()
        );
    }

    #[test]
    #[ignore = "needs engine::expr"]
    fn expression_projections() {
        let d = doc! {"_id": 1, "a": 2, "b": 3, "c": {"d": 4}};
        let cases: Vec<(Document, Document)> = vec![
            (doc! {"s": {"$add": ["$a", "$b"]}}, doc! {"_id": 1, "s": 5}),
            (doc! {"x": "$c.d", "_id": 0}, doc! {"x": 4}),
            (
                doc! {"lit": {"$literal": 1}, "a": 1},
                doc! {"_id": 1, "a": 2, "lit": 1},
            ),
            (doc! {"t": "text", "_id": 0}, doc! {"t": "text"}),
            (doc! {"m": "$missing", "_id": 0}, doc! {}),
            (
                doc! {"n.e": {"$literal": 7}, "_id": 0},
                doc! {"n": {"e": 7}},
            ),
            (doc! {"c.e": "$a", "_id": 0}, doc! {"c": {"e": 2}}),
        ];
        for (spec, want) in cases {
            assert_eq!(project(spec.clone(), &d), want, "{spec}");
        }
        let err = Projection::parse(&doc! {"a": 0, "s": {"$add": [1, 2]}}).unwrap_err();
        assert_eq!(err.code, 31252);
        let err = Projection::parse(&doc! {"s": {"$add": [1, 2]}, "a": 0}).unwrap_err();
        assert_eq!(
            (err.code, err.errmsg.as_str()),
            (
                31254,
                "Cannot do exclusion on field a in inclusion projection"
            )
        );
    }
}
