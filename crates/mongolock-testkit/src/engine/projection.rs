//! Find projections (`{a: 1}`, `{a: 0}`, dotted paths, `$slice`, `$elemMatch`, expressions).
//!
//! mongod 4.4+ semantics (its projection parser and executor):
//!
//! * a projection is either an *inclusion* (only the named fields, plus `_id` unless
//!   `_id: 0`) or an *exclusion* (everything but the named fields); mixing fails with code
//!   31253/31254, except that `_id` may be excluded from an inclusion and included in an
//!   exclusion;
//! * dotted paths (`"a.b": 1`) and the nested form (`{a: {b: 1}}`) reach through documents
//!   and arrays of documents; `a` and `a.b` together is a path collision (31249/31250);
//! * `{$slice: n}` and `{$slice: [skip, n]}` trim arrays without fixing the mode; any other
//!   `$slice` object is the aggregation `$slice` expression;
//! * `{$elemMatch: {...}}` (top-level fields only) keeps the first matching element, placed
//!   after the other fields, without fixing the mode;
//! * when nothing else fixes the mode: `{_id: 1}` is an inclusion, then `$slice` makes it an
//!   exclusion, then `$elemMatch` an inclusion;
//! * any other value that is not a number or boolean is an aggregation expression
//!   (`{x: "$a"}`, `{x: {$add: [..]}}`, `{x: {$literal: 1}}`, `{x: "text"}`), evaluated
//!   against the whole document; it makes the projection an inclusion (31252/31310 in an
//!   exclusion).
//!
//! * the positional projection `"a.$": 1` (with [`Projection::parse_for_query`] and
//!   [`Projection::apply_matched`]) keeps the array element the query matched.
//!
//! Not implemented (rejected when parsed, never ignored): `$meta`.

// `CommandError` is large (reply extras, labels); boxing it is the lead's call (error.rs).

use bson::{Bson, Document};

use super::expr::Expr;
use super::matcher::{MatchDetails, ValueMatcher};
use super::{CommandError, EvalContext, Result};

/// A parsed find/findAndModify projection.
#[derive(Debug, Clone)]
pub struct Projection {
    root: Node,
    inclusion: bool,
    /// The array path of a positional projection (`"a.b.$": 1` → `["a", "b"]`).
    positional: Option<Vec<String>>,
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
    /// The path before a positional `.$`: included, then cut to the matched element.
    Positional,
    Exclude,
    Sub(Node),
    Slice {
        skip: Option<i64>,
        limit: i64,
    },
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
                    full.split_once('.').map_or("", |(_, tail)| tail)
                ),
            )),
        }
    }
}

struct Parser<'q> {
    root: Node,
    /// The query filter, when the projection may use the positional operator.
    query: Option<&'q Document>,
    positional: Option<Vec<String>>,
    /// `Some(true)` once an inclusion (or computed field) fixed the mode, `Some(false)` for an
    /// exclusion.
    mode: Option<bool>,
    /// Top-level `_id: <true>` seen (`{_id: 1}` alone is an inclusion).
    id_included: bool,
    has_slice: bool,
    has_elem_match: bool,
}

/// `Some(include)` for the value types that mean inclusion or exclusion (booleans, numbers).
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

/// mongod's `numberInt()` of a number (doubles truncate, out-of-range values saturate).
fn number_int(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some((*i).clamp(i64::from(i32::MIN), i64::from(i32::MAX))),
        other => super::compare::as_f64(other)
            .map(|f| if f.is_nan() { 0 } else { f.trunc() as i64 })
            .map(|n| n.clamp(i64::from(i32::MIN), i64::from(i32::MAX))),
    }
}

/// Parses the find() form of `$slice`: `n` or `[skip, limit]`.
fn find_slice(arg: &Bson) -> Result<(Option<i64>, i64)> {
    if let Some(n) = number_int(arg) {
        return Ok((None, n));
    }
    let Bson::Array(items) = arg else {
        return Err(CommandError::new(
            31273,
            "$slice only supports numbers and [skip, limit] arrays",
        ));
    };
    if items.len() != 2 {
        return Err(CommandError::new(
            31272,
            "$slice array argument should be of form [skip, limit]",
        ));
    }
    let Some(skip) = number_int(&items[0]) else {
        return Err(CommandError::new(
            31257,
            format!(
                "$slice expects the skip argument to be a number, got {}",
                super::compare::type_alias(&items[0])
            ),
        ));
    };
    let Some(limit) = number_int(&items[1]) else {
        return Err(CommandError::new(
            31258,
            format!(
                "$slice expects the limit argument to be a number, got {}",
                super::compare::type_alias(&items[1])
            ),
        ));
    };
    if limit <= 0 {
        return Err(CommandError::new(
            31259,
            format!("$slice limit must be positive, got {limit}"),
        ));
    }
    Ok((Some(skip), limit))
}

/// Parses an aggregation expression in a projection; an unknown `$operator` is mongod's
/// "Unknown expression" (31325).
fn parse_expression(value: &Bson) -> Result<Expr> {
    Expr::parse(value).map_err(|e| match value {
        Bson::Document(d) if e.code == crate::engine::error::codes::INVALID_PIPELINE_OPERATOR => {
            let name = d.keys().next().cloned().unwrap_or_default();
            CommandError::new(31325, format!("Unknown expression {name}"))
        }
        _ => e,
    })
}

/// [`parse_expression`] of the one-field operator document `{name: arg}`, without copying it.
fn parse_operator_expression(name: &str, arg: &Bson) -> Result<Expr> {
    Expr::parse_operator(name, arg).map_err(|e| {
        if e.code == crate::engine::error::codes::INVALID_PIPELINE_OPERATOR {
            CommandError::new(31325, format!("Unknown expression {name}"))
        } else {
            e
        }
    })
}

/// Where the first positional operator is in a projection key: `(begin, end)` of `.$.`,
/// of a trailing `.$`, or the whole key when it is `$`.
fn first_positional(name: &str) -> Option<(usize, usize)> {
    if let Some(i) = name.find(".$.") {
        return Some((i, i + 3));
    }
    if name.ends_with(".$") {
        return Some((name.len() - 2, name.len()));
    }
    (name == "$").then_some((0, name.len()))
}

/// Whether the filter has a predicate on a path whose first component is `field` (looking
/// through `$and`, `$or` and `$nor`), as mongod requires for a positional projection.
fn query_has_path(filter: &Document, field: &str) -> bool {
    filter.iter().any(|(key, value)| match key.as_str() {
        "$and" | "$or" | "$nor" => match value {
            Bson::Array(items) => items
                .iter()
                .any(|i| matches!(i, Bson::Document(d) if query_has_path(d, field))),
            _ => false,
        },
        k if k.starts_with('$') => false,
        k => k.split('.').next() == Some(field),
    })
}

impl Parser<'_> {
    /// A positional projection `a.b.$: <value>`.
    fn positional(
        &mut self,
        path: &str,
        name: &str,
        at: (usize, usize),
        value: &Bson,
    ) -> Result<()> {
        match value {
            Bson::Document(_) => {
                return Err(CommandError::new(
                    31271,
                    "positional projection cannot be used with an expression or sub object",
                ));
            }
            v if is_truthy_number(v).is_none() => {
                return Err(CommandError::new(
                    31308,
                    "positional projection cannot be used with a literal",
                ));
            }
            // An exclusion of `a.$` fails on the `$` path component, as in mongod.
            v if is_truthy_number(v) == Some(false) => {
                validate_path(path)?;
            }
            _ => {}
        }
        if self.positional.is_some() {
            return Err(CommandError::new(
                31276,
                "Cannot specify more than one positional projection per query.",
            ));
        }
        if self.has_elem_match {
            return Err(CommandError::new(
                31256,
                "Cannot specify positional operator and $elemMatch.",
            ));
        }
        let Some(query) = self.query else {
            return Err(CommandError::new(
                51050,
                "Projections with a positional operator require a matcher",
            ));
        };
        let match_field = path.split('.').next().unwrap_or_default();
        if !query_has_path(query, match_field) {
            return Err(CommandError::new(
                31277,
                format!("Positional projection '{name}' does not match the query document."),
            ));
        }
        if name.ends_with(".$.") {
            return Err(CommandError::new(31270, "Path cannot end with '.$.'"));
        }
        let rest = &name[at.1..];
        if first_positional(rest).is_some() || rest == "$" {
            return Err(CommandError::new(
                31287,
                format!("Cannot use positional operator twice: {name}"),
            ));
        }
        if !rest.is_empty() {
            return Err(CommandError::new(
                31394,
                "As of 4.4, it's illegal to specify positional operator in the middle of a path.\
                 Positional projection may only be used at the end, for example: a.b.$. If the \
                 query previously used a form like a.b.$.d, remove the parts following the '$' \
                 and the results will be equivalent.",
            ));
        }
        // The array path: the full path without the trailing `.$`.
        let array_path = &path[..path.len() - (name.len() - at.0)];
        let parts = validate_path(array_path)?;
        self.include(name)?;
        self.root.insert(&parts, array_path, Item::Positional)?;
        self.positional = Some(parts.iter().map(|p| p.to_string()).collect());
        Ok(())
    }

    /// An inclusion (or computed field) at `name` (the field name as written at its level).
    fn include(&mut self, name: &str) -> Result<()> {
        if self.mode == Some(false) {
            return Err(CommandError::new(
                31253,
                format!("Cannot do inclusion on field {name} in exclusion projection"),
            ));
        }
        self.mode = Some(true);
        Ok(())
    }

    /// An element of the projection: `path` is the full dotted path, `name` the key as written
    /// (they differ in the nested form `{a: {b: 1}}`), `top` whether it is at the top level.
    fn field(&mut self, path: &str, name: &str, top: bool, value: &Bson) -> Result<()> {
        if let Some(at) = first_positional(name) {
            return self.positional(path, name, at, value);
        }
        if let Bson::Document(spec) = value {
            return self.sub_object(path, spec);
        }
        let parts = validate_path(path)?;
        if let Some(include) = is_truthy_number(value) {
            let top_id = top && name == "_id";
            if include {
                if top_id {
                    self.id_included = true;
                } else {
                    self.include(name)?;
                }
            } else if !top_id {
                if self.mode == Some(true) {
                    return Err(CommandError::new(
                        31254,
                        format!("Cannot do exclusion on field {name} in inclusion projection"),
                    ));
                }
                self.mode = Some(false);
            }
            let item = if include {
                Item::Include
            } else {
                Item::Exclude
            };
            return self.root.insert(&parts, path, item);
        }
        // Any other value is a literal expression (`{x: "text"}`, `{x: "$a"}`, `{x: [1]}`).
        let expr = parse_expression(value)?;
        self.root
            .insert(&parts, path, Item::Computed(Box::new(expr)))?;
        if self.mode == Some(false) {
            return Err(CommandError::new(
                31310,
                format!("Cannot use an expression {name}: {value} in an exclusion projection"),
            ));
        }
        self.mode = Some(true);
        Ok(())
    }

    /// A sub-object: `$slice`, `$elemMatch`, an expression, or a nested projection.
    fn sub_object(&mut self, path: &str, spec: &Document) -> Result<()> {
        let first = spec.keys().next().map(String::as_str).unwrap_or_default();
        if spec.len() == 1 && first.starts_with('$') {
            let parts = validate_path(path)?;
            let arg = spec.get(first).unwrap_or(&Bson::Null);
            match first {
                "$slice" => {
                    let item = match find_slice(arg) {
                        Ok((skip, limit)) => {
                            self.has_slice = true;
                            Item::Slice { skip, limit }
                        }
                        // Not the find() syntax: maybe the aggregation `$slice` expression.
                        Err(find_err) => match Expr::parse(&Bson::Document(spec.clone())) {
                            Ok(expr) => {
                                self.expression_mode()?;
                                Item::Computed(Box::new(expr))
                            }
                            Err(expr_err) => {
                                return Err(CommandError::new(
                                    expr_err.code,
                                    format!(
                                        "Invalid $slice syntax. The given syntax {} did not match \
                                         the find() syntax because :: Location{}: {} :: The given \
                                         syntax did not match the expression $slice syntax. :: \
                                         caused by :: {}",
                                        Bson::Document(spec.clone()),
                                        find_err.code,
                                        find_err.errmsg,
                                        expr_err.errmsg
                                    ),
                                ));
                            }
                        },
                    };
                    return self.root.insert(&parts, path, item);
                }
                "$elemMatch" => {
                    let Bson::Document(cond) = arg else {
                        return Err(CommandError::new(
                            31274,
                            format!(
                                "elemMatch: Invalid argument, object required, but got {}",
                                super::compare::type_alias(arg)
                            ),
                        ));
                    };
                    if self.positional.is_some() {
                        return Err(CommandError::new(
                            31255,
                            "Cannot specify positional operator and $elemMatch.",
                        ));
                    }
                    if parts.len() > 1 {
                        return Err(CommandError::new(
                            31275,
                            "Cannot use $elemMatch projection on a nested field.",
                        ));
                    }
                    let matcher = ValueMatcher::elem_match(cond)?;
                    self.has_elem_match = true;
                    return self
                        .root
                        .insert(&parts, path, Item::ElemMatch(Box::new(matcher)));
                }
                "$meta" => {
                    return Err(CommandError::bad_value(format!(
                        "$meta projection (field {path}) is not supported by the emulator"
                    )));
                }
                _ => {
                    let expr = parse_operator_expression(first, arg)?;
                    self.expression_mode()?;
                    return self
                        .root
                        .insert(&parts, path, Item::Computed(Box::new(expr)));
                }
            }
        }
        if spec.is_empty() {
            return Err(CommandError::new(
                51270,
                "An empty sub-projection is not a valid value. Found empty object at path",
            ));
        }
        // Nested form: {a: {b: 1}} is {"a.b": 1}.
        for (sub, v) in spec {
            self.field(&format!("{path}.{sub}"), sub, false, v)?;
        }
        Ok(())
    }

    /// An expression object makes the projection an inclusion (31252 in an exclusion).
    fn expression_mode(&mut self) -> Result<()> {
        if self.mode == Some(false) {
            return Err(CommandError::new(
                31252,
                "Cannot use expression other than $meta in exclusion projection",
            ));
        }
        self.mode = Some(true);
        Ok(())
    }
}

/// Cuts the first array on `path` in the projected document to its element at `index`.
fn apply_positional(out: &mut Document, path: &[String], index: Option<usize>) -> Result<()> {
    let mut cur = out;
    for part in path {
        match cur.get_mut(part) {
            Some(Bson::Array(items)) => {
                let Some(index) = index else {
                    return Err(CommandError::new(
                        51246,
                        "positional operator '.$' couldn't find a matching element in the array",
                    ));
                };
                let Some(elem) = items.get(index).cloned() else {
                    return Err(CommandError::new(
                        51247,
                        "positional operator '.$' element mismatch",
                    ));
                };
                *items = vec![elem];
                return Ok(());
            }
            Some(Bson::Document(d)) => cur = d,
            _ => return Ok(()),
        }
    }
    Ok(())
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
                Some(Item::Include | Item::Positional) => {
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
        // Computed fields come after the included ones, in projection order; `$elemMatch`
        // fields (applied after the rest of the projection, as in mongod) come last.
        for (key, item) in &node.children {
            if let Item::Computed(expr) = item
                && let Some(v) = expr.eval(self.root_doc, self.ctx)?
            {
                out.insert(key.clone(), v);
            }
        }
        if top {
            self.elem_match_fields(node, src, &mut out)?;
        }
        Ok(out)
    }

    /// An inclusion sub-projection applied to a value: documents are projected, arrays are
    /// projected element-wise (keeping nested arrays), other values disappear unless the
    /// sub-projection computes fields, which then replace them with a document.
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
            // A scalar is dropped, unless computed fields below replace it with a document.
            _ if node.has_computed() => Some(Bson::Document(self.include_doc(
                node,
                &Document::new(),
                false,
                false,
            )?)),
            _ => None,
        })
    }

    /// Appends the top-level `$elemMatch` fields: the first matching element as a one-element
    /// array, or nothing when no element matches.
    fn elem_match_fields(&self, node: &Node, src: &Document, out: &mut Document) -> Result<()> {
        for (key, item) in &node.children {
            if let Item::ElemMatch(matcher) = item
                && let Some(Bson::Array(items)) = src.get(key)
                && let Some(i) = matcher.first_match(items, self.ctx)?
            {
                out.insert(key.clone(), Bson::Array(vec![items[i].clone()]));
            }
        }
        Ok(())
    }

    fn exclude_doc(&self, node: &Node, src: &Document) -> Document {
        let mut out = Document::new();
        for (key, value) in src {
            match node.get(key) {
                // `$elemMatch` fields are added back by `elem_match_fields`.
                Some(Item::Exclude | Item::ElemMatch(_)) => {}
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
    /// Parses a projection document. A positional projection (`"a.$": 1`) fails here with
    /// mongod's "require a matcher" error; use [`Projection::parse_for_query`] for find and
    /// findAndModify, which have a query. Only the tests parse without a query.
    #[cfg(test)]
    pub fn parse(spec: &Document) -> Result<Projection> {
        Self::parse_with(spec, None)
    }

    /// Parses the projection of a find or findAndModify whose query filter is `filter`,
    /// allowing the positional projection (`"grades.$": 1`), which must name a field the
    /// filter has a predicate on (31277). Apply it with [`Projection::apply_matched`].
    pub fn parse_for_query(spec: &Document, filter: &Document) -> Result<Projection> {
        Self::parse_with(spec, Some(filter))
    }

    fn parse_with(spec: &Document, query: Option<&Document>) -> Result<Projection> {
        let mut parser = Parser {
            query,
            positional: None,
            root: Node::default(),
            mode: None,
            id_included: false,
            has_slice: false,
            has_elem_match: false,
        };
        for (key, value) in spec {
            parser.field(key, key, true, value)?;
        }
        // mongod's defaults when nothing fixed the mode: `{_id: 1}` includes, then `$slice`
        // (exclusion) takes precedence over `$elemMatch` (inclusion).
        let inclusion = parser.mode.unwrap_or(if parser.id_included {
            true
        } else if parser.has_slice {
            false
        } else {
            parser.has_elem_match
        });
        Ok(Projection {
            root: parser.root,
            inclusion,
            positional: parser.positional,
            identity: spec.is_empty(),
        })
    }

    /// Whether this is an inclusion projection (only named fields are returned).
    #[cfg(test)]
    pub fn is_inclusion(&self) -> bool {
        self.inclusion
    }

    /// Whether the projection uses the positional operator (`"a.$": 1`); such a projection
    /// needs the query's [`MatchDetails`] ([`Projection::apply_matched`]).
    #[cfg(test)]
    pub fn has_positional(&self) -> bool {
        self.positional.is_some()
    }

    /// Applies the projection to one document. A positional projection fails as if the query
    /// matched no array element (51246); use [`Projection::apply_matched`].
    #[cfg(test)]
    pub fn apply(&self, doc: &Document, ctx: &EvalContext) -> Result<Document> {
        self.apply_matched(doc, ctx, None)
    }

    /// Applies the projection to a document the query matched with `matched` (from
    /// [`Matcher::match_details`](super::matcher::Matcher::match_details)). The positional
    /// projection keeps, of the first array on its path, the element at
    /// `matched.elem_match_index`: code 51246 if there is no index, 51247 if the array is too
    /// short; the path is left as is if there is no array on it. The find command adds its
    /// "Executor error during find command :: caused by :: " prefix to these messages.
    pub fn apply_matched(
        &self,
        doc: &Document,
        ctx: &EvalContext,
        matched: Option<&MatchDetails>,
    ) -> Result<Document> {
        if self.identity {
            return Ok(doc.clone());
        }
        let run = Apply { root_doc: doc, ctx };
        if self.inclusion {
            let include_id = !matches!(self.root.get("_id"), Some(Item::Exclude));
            let mut out = run.include_doc(&self.root, doc, true, include_id)?;
            if let Some(path) = &self.positional {
                let index = matched.and_then(|m| m.elem_match_index);
                apply_positional(&mut out, path, index)?;
            }
            Ok(out)
        } else {
            let mut out = run.exclude_doc(&self.root, doc);
            run.elem_match_fields(&self.root, doc, &mut out)?;
            Ok(out)
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
    fn dotted_semantics_from_mongod_jstests() {
        // mongod's jstests/core/projection_semantics.js (inclusion and exclusion parts).
        let cases: Vec<(Document, Document, Document)> = vec![
            (
                doc! {"a.b": 1, "_id": 0},
                doc! {"a": [{"b": 1, "c": 1}, {"c": 2}]},
                doc! {"a": [{"b": 1}, {}]},
            ),
            (doc! {"a.b": 1, "_id": 0}, doc! {"a": "scalar"}, doc! {}),
            (doc! {"a.b": 1, "_id": 0}, doc! {"a": {}}, doc! {"a": {}}),
            (
                doc! {"a.b": 1, "_id": 0},
                doc! {"a": ["scalar", "scalar"]},
                doc! {"a": []},
            ),
            (
                doc! {"a.b": 1, "_id": 0},
                doc! {"a": [Bson::Null]},
                doc! {"a": []},
            ),
            (
                doc! {"a.b": 1, "_id": 0},
                doc! {"a": ["s", {}, "s", {"c": 1}]},
                doc! {"a": [{}, {}]},
            ),
            (
                doc! {"a.b": 1, "_id": 0},
                doc! {"a": [[1, 2, 3]]},
                doc! {"a": [[]]},
            ),
            (
                doc! {"a.b": 1, "_id": 0},
                doc! {"a": [[], [[], [], [1], [{"c": 1}]], {"b": 1}]},
                doc! {"a": [[], [[], [], [], [{}]], {"b": 1}]},
            ),
            (
                doc! {"a.b": 1},
                doc! {"_id": 7, "a": {"b": "demo", "_id": "x"}},
                doc! {"_id": 7, "a": {"b": "demo"}},
            ),
            (
                doc! {"a.b.c": 1, "_id": 0},
                doc! {"a": {"b": {"x": 1, "y": 1}}},
                doc! {"a": {"b": {}}},
            ),
            (doc! {"a.b.c": 1, "_id": 0}, doc! {"a": Bson::Null}, doc! {}),
            (
                doc! {"a.b.c": 1, "_id": 0},
                doc! {"a": [1, {"b": [[1, 2], [{}], 2]}, 2]},
                doc! {"a": [{"b": [[], [{}]]}]},
            ),
            (
                doc! {"a.b.c": 1, "_id": 0},
                doc! {"a": {"x": 1, "b": [[1, 2], [{"c": [[1, 2], [{}], 2]}], 2]}},
                doc! {"a": {"b": [[], [{"c": [[1, 2], [{}], 2]}]]}},
            ),
            (
                doc! {"measurements": {"temperature": 1, "pressure": 1}, "_id": 0},
                doc! {"measurements": {"temperature": 20, "pressure": 0.7, "humidity": 0.4}},
                doc! {"measurements": {"temperature": 20, "pressure": 0.7}},
            ),
            // Exclusion keeps scalars of parent arrays.
            (
                doc! {"a.b": 0},
                doc! {"_id": 1, "a": ["scalar", {"b": 1, "c": 1, "d": 1}, {"b": 2, "c": 2}, {"b": 3}]},
                doc! {"_id": 1, "a": ["scalar", {"c": 1, "d": 1}, {"c": 2}, {}]},
            ),
            (
                doc! {"a.b.c": 0},
                doc! {"_id": 1, "a": [[], [{"b": [[1, 2], {"c": 1, "d": 1}]}]]},
                doc! {"_id": 1, "a": [[], [{"b": [[1, 2], {"d": 1}]}]]},
            ),
            (
                doc! {"measurements": {"humidity": 0, "time": 0}, "_id": 0},
                doc! {"measurements": {"temperature": 20, "humidity": 0.4, "time": 1}},
                doc! {"measurements": {"temperature": 20}},
            ),
            (doc! {"_id": 0}, doc! {"_id": 1}, doc! {}),
        ];
        for (spec, input, want) in cases {
            assert_eq!(project(spec.clone(), &input), want, "{spec} on {input}");
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
        // In an exclusion projection the other fields stay; the $elemMatch field comes last.
        let mut extra = students.clone();
        extra.insert("x", 1);
        assert_eq!(
            project(
                doc! {"zip": 0, "students": {"$elemMatch": {"age": 11}}},
                &extra
            ),
            doc! {"_id": 1, "x": 1, "students": [{"name": "jess", "school": 102, "age": 11}]}
        );
        // `_id: 0` does not make it an exclusion: $elemMatch alone is an inclusion.
        assert_eq!(
            project(
                doc! {"_id": 0, "students": {"$elemMatch": {"age": 11}}},
                &extra
            ),
            doc! {"students": [{"name": "jess", "school": 102, "age": 11}]}
        );
        // With only $slice and $elemMatch, $slice makes it an exclusion.
        let both = Projection::parse(&doc! {"a": {"$slice": 1}, "b": {"$elemMatch": {"x": 1}}});
        assert!(!both.unwrap().is_inclusion());
        assert!(
            Projection::parse(&doc! {"b": {"$elemMatch": {"x": 1}}})
                .unwrap()
                .is_inclusion()
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
                "Cannot do inclusion on field c in exclusion projection",
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
                "An empty sub-projection is not a valid value. Found empty object at path",
            ),
            (
                doc! {"a.b": {"$elemMatch": {"x": 1}}},
                31275,
                "Cannot use $elemMatch projection on a nested field.",
            ),
            (
                doc! {"a.b": 1, "a.b.c": 1},
                31249,
                "Path collision at a.b.c remaining portion b.c",
            ),
            (
                doc! {"a": 0, "x": "text"},
                31310,
                "Cannot use an expression x: \"text\" in an exclusion projection",
            ),
            (
                doc! {"a": 0, "s": {"$add": [1, 2]}},
                31252,
                "Cannot use expression other than $meta in exclusion projection",
            ),
            (
                doc! {"s": {"$add": [1, 2]}, "a": 0},
                31254,
                "Cannot do exclusion on field a in inclusion projection",
            ),
            (
                doc! {"a": {"$elemMatch": 1}},
                31274,
                "elemMatch: Invalid argument, object required, but got int",
            ),
            (
                doc! {"a": {"$elemMatch": {"b": 1}, "c": 1}},
                16410,
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
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
        assert_eq!(
            (positional.code, positional.errmsg.as_str()),
            (
                51050,
                "Projections with a positional operator require a matcher"
            )
        );
        assert_eq!(
            Projection::parse(&doc! {"s": {"$meta": "textScore"}})
                .unwrap_err()
                .code,
            2
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
        // projection_semantics.js: computed fields replace scalars and traverse nested arrays.
        let computed: Vec<(Document, Document, Document)> = vec![
            (
                doc! {"a.b": "new value"},
                doc! {"_id": 1, "a": ["scalar", {"b": 1, "c": 1}, {"b": 3}]},
                doc! {"_id": 1, "a": [{"b": "new value"}, {"b": "new value"}, {"b": "new value"}]},
            ),
            (
                doc! {"a.b": "new value"},
                doc! {"_id": 1, "a": []},
                doc! {"_id": 1, "a": []},
            ),
            (
                doc! {"a.b": "new value"},
                doc! {"_id": 1, "a": 5},
                doc! {"_id": 1, "a": {"b": "new value"}},
            ),
            (
                doc! {"a.b.c": "new value"},
                doc! {"_id": 1, "a": [[], [{"b": [[1, 2], {"c": 1, "d": 1}]}]]},
                doc! {"_id": 1, "a": [[], [{"b": [[{"c": "new value"}, {"c": "new value"}], {"c": "new value"}]}]]},
            ),
            (
                doc! {"a": {"$literal": 0}, "b": "string"},
                doc! {"_id": 1, "a": 1, "b": 1, "c": 1},
                doc! {"_id": 1, "a": 0, "b": "string"},
            ),
        ];
        for (spec, input, want) in computed {
            assert_eq!(project(spec.clone(), &input), want, "{spec} on {input}");
        }
        // Not the find() `$slice` syntax, so the aggregation `$slice` expression.
        assert_eq!(
            project(doc! {"_id": 0, "s": {"$slice": [[1, 2, 3], 1, 1]}}, &d),
            doc! {"s": [2]}
        );
        let err = Projection::parse(&doc! {"a": {"$slice": "x"}}).unwrap_err();
        assert!(
            err.errmsg.starts_with("Invalid $slice syntax."),
            "{}",
            err.errmsg
        );
        let err = Projection::parse(&doc! {"a": {"$bogus": 1}}).unwrap_err();
        assert_eq!(
            (err.code, err.errmsg.as_str()),
            (31325, "Unknown expression $bogus")
        );
    }

    #[test]
    fn positional_projection() {
        use crate::engine::matcher::Matcher;
        let c = ctx();
        let run = |filter: Document, spec: Document, d: &Document| -> Result<Document> {
            let details = Matcher::parse(&filter)?
                .match_details(d, &c)?
                .expect("the test document matches");
            Projection::parse_for_query(&spec, &filter)?.apply_matched(d, &c, Some(&details))
        };
        let d = doc! {"_id": 1, "grades": [80, 85, 90], "x": 1};
        assert_eq!(
            run(doc! {"grades": {"$gte": 85}}, doc! {"grades.$": 1}, &d).unwrap(),
            doc! {"_id": 1, "grades": [85]}
        );
        assert_eq!(
            run(
                doc! {"x": 1, "grades": 90},
                doc! {"grades.$": 1, "x": 1, "_id": 0},
                &d
            )
            .unwrap(),
            doc! {"grades": [90], "x": 1}
        );
        let students =
            doc! {"_id": 2, "students": [{"school": 100, "n": 1}, {"school": 102, "n": 2}]};
        assert_eq!(
            run(
                doc! {"students.school": 102},
                doc! {"students.$": 1},
                &students
            )
            .unwrap(),
            doc! {"_id": 2, "students": [{"school": 102, "n": 2}]}
        );
        // The first array on the path is cut, below a sub-document; nested form too.
        let nested = doc! {"_id": 3, "a": {"b": [1, 5, 9], "c": 1}};
        assert_eq!(
            run(doc! {"a.b": 5}, doc! {"a": {"b.$": 1}}, &nested).unwrap(),
            doc! {"_id": 3, "a": {"b": [5]}}
        );
        // A query that matched no array element: 51246; no array on the path: unchanged.
        let err = run(doc! {"grades": [80, 85, 90]}, doc! {"grades.$": 1}, &d).unwrap_err();
        assert_eq!(
            (err.code, err.errmsg.as_str()),
            (
                51246,
                "positional operator '.$' couldn't find a matching element in the array"
            )
        );
        let scalar = doc! {"_id": 4, "grades": 7};
        assert_eq!(
            run(doc! {"grades": 7}, doc! {"grades.$": 1}, &scalar).unwrap(),
            doc! {"_id": 4, "grades": 7}
        );
        let spec = Projection::parse_for_query(&doc! {"grades.$": 1}, &doc! {"grades": 1}).unwrap();
        assert!(spec.has_positional());
        let far = MatchDetails {
            elem_match_index: Some(7),
        };
        let err = spec.apply_matched(&d, &c, Some(&far)).unwrap_err();
        assert_eq!(
            (err.code, err.errmsg.as_str()),
            (51247, "positional operator '.$' element mismatch")
        );
        assert_eq!(spec.apply(&d, &c).unwrap_err().code, 51246);
    }

    #[test]
    fn positional_projection_errors() {
        let filter = doc! {"a.b": 1, "c": 2};
        let cases: Vec<(Document, i32, &str)> = vec![
            (
                doc! {"a.$": 1, "c.$": 1},
                31276,
                "Cannot specify more than one positional projection per query.",
            ),
            (
                doc! {"z.$": 1},
                31277,
                "Positional projection 'z.$' does not match the query document.",
            ),
            (
                doc! {"c": {"$elemMatch": {"x": 1}}, "a.$": 1},
                31256,
                "Cannot specify positional operator and $elemMatch.",
            ),
            (
                doc! {"a.$": 1, "c": {"$elemMatch": {"x": 1}}},
                31255,
                "Cannot specify positional operator and $elemMatch.",
            ),
            (
                doc! {"a.$": {"$slice": 1}},
                31271,
                "positional projection cannot be used with an expression or sub object",
            ),
            (
                doc! {"a.$": "x"},
                31308,
                "positional projection cannot be used with a literal",
            ),
            (doc! {"a.$.": 1}, 31270, "Path cannot end with '.$.'"),
            (
                doc! {"a.$.$": 1},
                31287,
                "Cannot use positional operator twice: a.$.$",
            ),
            (
                doc! {"a.$": 1, "x": 0},
                31254,
                "Cannot do exclusion on field x in inclusion projection",
            ),
            (
                doc! {"a.$": 0},
                16410,
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
            ),
        ];
        for (spec, code, msg) in cases {
            let err = Projection::parse_for_query(&spec, &filter).unwrap_err();
            assert_eq!((err.code, err.errmsg.as_str()), (code, msg), "{spec}");
        }
        let middle = Projection::parse_for_query(&doc! {"a.$.b": 1}, &filter).unwrap_err();
        assert_eq!(middle.code, 31394);
        // Predicates under $or/$and/$nor count; $expr does not.
        let or = doc! {"$or": [{"x": 1}, {"a.q": 2}]};
        assert!(Projection::parse_for_query(&doc! {"a.$": 1}, &or).is_ok());
        let expr = doc! {"$expr": {"$eq": ["$a", 1]}};
        assert_eq!(
            Projection::parse_for_query(&doc! {"a.$": 1}, &expr)
                .unwrap_err()
                .code,
            31277
        );
    }

    #[test]
    fn odd_input_never_panics() {
        let c = ctx();
        let values = vec![
            Bson::Double(f64::NAN),
            Bson::Double(-1e300),
            Bson::Int64(i64::MIN),
            Bson::Int32(i32::MIN),
            Bson::String("$".into()),
            Bson::Null,
            bson::bson!([]),
            bson::bson!([i64::MIN, i64::MAX]),
            bson::bson!([-1, i32::MAX]),
            bson::bson!({}),
        ];
        let docs = [
            doc! {"_id": 1, "a": [1, [2, {"b": 3}], {"b": [4]}], "c": {"d": []}},
            doc! {"a": 5, "c": [[], {}]},
        ];
        for v in &values {
            for key in ["a", "a.b", "c.d", "_id", "a.$", "$", "a..b"] {
                for spec in [
                    doc! {key: v.clone()},
                    doc! {key: {"$slice": v.clone()}},
                    doc! {key: {"$elemMatch": {"$gt": v.clone()}}},
                    doc! {"x": 1, key: v.clone()},
                ] {
                    if let Ok(p) = Projection::parse_for_query(&spec, &doc! {"a": 1}) {
                        for d in &docs {
                            let _ = p.apply_matched(
                                d,
                                &c,
                                Some(&MatchDetails {
                                    elem_match_index: Some(9),
                                }),
                            );
                            let _ = p.apply(d, &c);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn find_slice_syntax_errors() {
        let cases: Vec<(Bson, i32, &str)> = vec![
            (
                Bson::String("x".into()),
                31273,
                "$slice only supports numbers and [skip, limit] arrays",
            ),
            (
                bson::bson!([1]),
                31272,
                "$slice array argument should be of form [skip, limit]",
            ),
            (
                bson::bson!(["a", 1]),
                31257,
                "$slice expects the skip argument to be a number, got string",
            ),
            (
                bson::bson!([1, true]),
                31258,
                "$slice expects the limit argument to be a number, got bool",
            ),
            (
                bson::bson!([1, 0]),
                31259,
                "$slice limit must be positive, got 0",
            ),
        ];
        for (arg, code, msg) in cases {
            let err = find_slice(&arg).unwrap_err();
            assert_eq!((err.code, err.errmsg.as_str()), (code, msg), "{arg}");
        }
        assert_eq!(find_slice(&Bson::Double(2.7)).unwrap(), (None, 2));
        assert_eq!(find_slice(&bson::bson!([-1, 2])).unwrap(), (Some(-1), 2));
    }
}
