//! Aggregation pipelines: `aggregate` stages and the stages allowed in pipeline updates.
//!
//! Supported stages: `$match`, `$project`, `$addFields`/`$set`, `$unset`, `$replaceRoot`,
//! `$replaceWith`, `$unwind`, `$group`, `$sort`, `$skip`, `$limit`, `$count` and
//! `$sortByCount`. Any other stage name fails with code 40324.

use bson::{Bson, Document};

use super::compare::{OrdBson, compare, type_alias, values_equal};
use super::expr::{Expr, Num, check_field_name, fmt_value, parse_field_path};
use super::matcher::Matcher;
use super::sort::SortSpec;
use super::{CommandError, EvalContext, Result};

fn err(code: i32, msg: impl Into<String>) -> CommandError {
    CommandError::new(code, msg)
}

/// A parsed aggregation pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    stages: Vec<Stage>,
}

#[derive(Debug, Clone)]
enum Stage {
    Match(Matcher),
    Project(Projection),
    AddFields(Tree),
    ReplaceRoot { expr: Expr, with: bool },
    Unwind(Unwind),
    Group(Group),
    Sort(SortSpec),
    Skip(u64),
    Limit(u64),
    Count(String),
    SortByCount(Expr),
}

/// A node of a `$project`/`$addFields`/`$unset` specification, keyed by field name.
#[derive(Debug, Clone, Default)]
struct Tree {
    fields: Vec<(String, Leaf)>,
    computed: bool,
}

#[derive(Debug, Clone)]
enum Leaf {
    Include,
    Exclude,
    Computed(Expr),
    Sub(Tree),
}

#[derive(Debug, Clone)]
enum Projection {
    Inclusion(Tree),
    Exclusion(Tree),
}

#[derive(Debug, Clone)]
struct Unwind {
    path: Vec<String>,
    index: Option<String>,
    preserve: bool,
}

#[derive(Debug, Clone)]
struct Group {
    id: Expr,
    accumulators: Vec<(String, AccKind, Expr)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AccKind {
    Sum,
    Avg,
    Min,
    Max,
    First,
    Last,
    Push,
    AddToSet,
    Count,
}

impl Tree {
    fn get(&self, name: &str) -> Option<&Leaf> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// Inserts `leaf` at a dotted path; a path that overlaps an existing one is a collision.
    fn insert(&mut self, path: &[String], full: &str, leaf: Leaf) -> Result<()> {
        let collision = || {
            err(
                31250,
                format!("Invalid specification :: caused by :: Path collision at {full}"),
            )
        };
        let (first, rest) = path.split_first().ok_or_else(collision)?;
        if matches!(leaf, Leaf::Computed(_)) {
            self.computed = true;
        }
        let pos = self.fields.iter().position(|(k, _)| k == first);
        if rest.is_empty() {
            if pos.is_some() {
                return Err(collision());
            }
            self.fields.push((first.clone(), leaf));
            return Ok(());
        }
        let idx = match pos {
            Some(i) => i,
            None => {
                self.fields
                    .push((first.clone(), Leaf::Sub(Tree::default())));
                self.fields.len() - 1
            }
        };
        match &mut self.fields[idx].1 {
            Leaf::Sub(t) => t.insert(rest, full, leaf),
            _ => Err(collision()),
        }
    }
}

/// What a specification value means in `$project`.
enum SpecKind {
    Include,
    Exclude,
    Computed,
}

/// Flattens a specification into `(dotted path, value)` pairs: nested documents that are not
/// operator expressions are sub-specifications.
fn flatten_spec<'a>(
    spec: &'a Document,
    prefix: &str,
    out: &mut Vec<(String, &'a Bson)>,
    empty_is_error: bool,
) -> Result<()> {
    for (k, v) in spec {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        parse_field_path(k)?;
        match v {
            Bson::Document(d) if d.is_empty() => {
                if empty_is_error {
                    return Err(err(
                        51270,
                        format!(
                            "Invalid $project :: caused by :: An empty sub-projection is not a valid value. Found empty object at path {path}"
                        ),
                    ));
                }
                out.push((path, v));
            }
            Bson::Document(d) if !d.keys().next().is_some_and(|f| f.starts_with('$')) => {
                flatten_spec(d, &path, out, empty_is_error)?;
            }
            _ => out.push((path, v)),
        }
    }
    Ok(())
}

fn parse_project(spec: &Bson) -> Result<Projection> {
    let Bson::Document(spec) = spec else {
        return Err(err(15969, "$project specification must be an object"));
    };
    if spec.is_empty() {
        return Err(err(
            51272,
            "Invalid $project :: caused by :: projection specification must have at least one field",
        ));
    }
    let mut flat = Vec::new();
    flatten_spec(spec, "", &mut flat, true)?;
    let kind_of = |v: &Bson| match v {
        Bson::Boolean(b) => {
            if *b {
                SpecKind::Include
            } else {
                SpecKind::Exclude
            }
        }
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            if super::expr::truthy(Some(v)) {
                SpecKind::Include
            } else {
                SpecKind::Exclude
            }
        }
        _ => SpecKind::Computed,
    };
    // Exclusion if any field other than _id is excluded (or if only `_id: 0` is given).
    let exclusion = flat
        .iter()
        .any(|(p, v)| p != "_id" && matches!(kind_of(v), SpecKind::Exclude))
        || flat
            .iter()
            .all(|(p, v)| p == "_id" && matches!(kind_of(v), SpecKind::Exclude));
    let mut tree = Tree::default();
    let mut id_seen = false;
    for (path, v) in &flat {
        let components = parse_field_path(path)?;
        id_seen |= path == "_id" || path.starts_with("_id.");
        let leaf = match (kind_of(v), exclusion) {
            (SpecKind::Include, false) => Leaf::Include,
            (SpecKind::Exclude, true) => Leaf::Exclude,
            (SpecKind::Exclude, false) if path == "_id" => Leaf::Exclude,
            (SpecKind::Computed, false) => Leaf::Computed(Expr::parse(v)?),
            (SpecKind::Include, true) => {
                return Err(err(
                    31253,
                    format!(
                        "Invalid $project :: caused by :: Cannot do inclusion on field {path} in exclusion projection"
                    ),
                ));
            }
            (SpecKind::Exclude, false) => {
                return Err(err(
                    31254,
                    format!(
                        "Invalid $project :: caused by :: Cannot do exclusion on field {path} in inclusion projection"
                    ),
                ));
            }
            (SpecKind::Computed, true) => {
                return Err(err(
                    31252,
                    "Invalid $project :: caused by :: Cannot use expression other than $meta in exclusion projection",
                ));
            }
        };
        tree.insert(&components, path, leaf)?;
    }
    if exclusion {
        return Ok(Projection::Exclusion(tree));
    }
    // `_id` is included unless excluded explicitly; an `_id: 0` leaf simply never matches.
    if !id_seen {
        tree.fields.insert(0, ("_id".to_string(), Leaf::Include));
    }
    Ok(Projection::Inclusion(tree))
}

fn parse_add_fields(name: &str, spec: &Bson) -> Result<Tree> {
    let Bson::Document(spec) = spec else {
        return Err(err(
            40272,
            format!(
                "{name} specification stage must be an object, got {}",
                type_alias(spec)
            ),
        ));
    };
    if spec.is_empty() {
        return Err(err(
            40177,
            format!("Invalid {name} :: caused by :: specification must have at least one field"),
        ));
    }
    let mut flat = Vec::new();
    flatten_spec(spec, "", &mut flat, false)?;
    let mut tree = Tree::default();
    for (path, v) in flat {
        let components = parse_field_path(&path)?;
        tree.insert(&components, &path, Leaf::Computed(Expr::parse(v)?))?;
    }
    Ok(tree)
}

fn parse_unset(spec: &Bson) -> Result<Tree> {
    let paths: Vec<&str> = match spec {
        Bson::String(s) => vec![s.as_str()],
        Bson::Array(items) => {
            if items.is_empty() {
                return Err(err(
                    31119,
                    "$unset specification must be a string or an array with at least one field",
                ));
            }
            items
                .iter()
                .map(|i| match i {
                    Bson::String(s) => Ok(s.as_str()),
                    _ => Err(err(
                        31120,
                        "$unset specification must be a string or an array containing only string values",
                    )),
                })
                .collect::<Result<_>>()?
        }
        _ => {
            return Err(err(
                31002,
                "$unset specification must be a string or an array",
            ));
        }
    };
    let mut tree = Tree::default();
    for p in paths {
        tree.insert(&parse_field_path(p)?, p, Leaf::Exclude)?;
    }
    Ok(tree)
}

fn parse_unwind(spec: &Bson) -> Result<Unwind> {
    let (path, index, preserve) = match spec {
        Bson::String(s) => (s.clone(), None, false),
        Bson::Document(d) => {
            let (mut path, mut index, mut preserve) = (None, None, false);
            for (k, v) in d {
                match (k.as_str(), v) {
                    ("path", Bson::String(s)) => path = Some(s.clone()),
                    ("path", other) => {
                        return Err(err(
                            28808,
                            format!(
                                "expected a string as the path for $unwind stage, got {}",
                                type_alias(other)
                            ),
                        ));
                    }
                    ("includeArrayIndex", Bson::String(s)) if !s.is_empty() => {
                        if s.starts_with('$') {
                            return Err(err(
                                28822,
                                format!(
                                    "includeArrayIndex option to $unwind stage should not be prefixed with a '$': {s}"
                                ),
                            ));
                        }
                        parse_field_path(s)?;
                        index = Some(s.clone());
                    }
                    ("includeArrayIndex", other) => {
                        return Err(err(
                            28810,
                            format!(
                                "expected a non-empty string for the includeArrayIndex  option to $unwind stage, got {}",
                                type_alias(other)
                            ),
                        ));
                    }
                    ("preserveNullAndEmptyArrays", Bson::Boolean(b)) => preserve = *b,
                    ("preserveNullAndEmptyArrays", other) => {
                        return Err(err(
                            28809,
                            format!(
                                "expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage, got {}",
                                type_alias(other)
                            ),
                        ));
                    }
                    _ => {
                        return Err(err(
                            28811,
                            format!("unrecognized option to $unwind stage: {k}"),
                        ));
                    }
                }
            }
            (
                path.ok_or_else(|| err(28812, "no path specified to $unwind stage"))?,
                index,
                preserve,
            )
        }
        other => {
            return Err(err(
                15981,
                format!(
                    "expected either a string or an object as specification for $unwind stage, got {}",
                    type_alias(other)
                ),
            ));
        }
    };
    let Some(stripped) = path.strip_prefix('$') else {
        return Err(err(
            28818,
            format!("path option to $unwind stage should be prefixed with a '$': {path}"),
        ));
    };
    Ok(Unwind {
        path: parse_field_path(stripped)?,
        index,
        preserve,
    })
}

fn parse_group(spec: &Bson) -> Result<Group> {
    let Bson::Document(spec) = spec else {
        return Err(err(
            15947,
            "a group's fields must be specified in an object",
        ));
    };
    let mut id = None;
    let mut accumulators = Vec::new();
    for (name, v) in spec {
        if name == "_id" {
            id = Some(Expr::parse(v)?);
            continue;
        }
        if name.starts_with('$') {
            return Err(err(
                40236,
                format!("The field name '{name}' cannot be an operator name"),
            ));
        }
        if name.contains('.') {
            return Err(err(
                40235,
                format!("The field name '{name}' cannot contain '.'"),
            ));
        }
        check_field_name(name)?;
        let Bson::Document(acc) = v else {
            return Err(err(
                40234,
                format!("The field '{name}' must be an accumulator object"),
            ));
        };
        if acc.len() != 1 {
            return Err(err(
                40238,
                format!("The field '{name}' must specify one accumulator"),
            ));
        }
        let (op, arg) = acc
            .iter()
            .next()
            .ok_or_else(|| CommandError::internal("accumulator"))?;
        let kind = match op.as_str() {
            "$sum" => AccKind::Sum,
            "$avg" => AccKind::Avg,
            "$min" => AccKind::Min,
            "$max" => AccKind::Max,
            "$first" => AccKind::First,
            "$last" => AccKind::Last,
            "$push" => AccKind::Push,
            "$addToSet" => AccKind::AddToSet,
            "$count" => AccKind::Count,
            _ => return Err(err(15952, format!("unknown group operator '{op}'"))),
        };
        let expr = if kind == AccKind::Count {
            if !matches!(arg, Bson::Document(d) if d.is_empty()) {
                return Err(err(9, "$count takes no arguments, i.e. $count:{}"));
            }
            Expr::parse(&Bson::Int32(1))?
        } else {
            if matches!(arg, Bson::Array(_)) {
                return Err(err(
                    40237,
                    format!("The {op} accumulator is a unary operator"),
                ));
            }
            Expr::parse(arg)?
        };
        accumulators.push((name.clone(), kind, expr));
    }
    let id = id.ok_or_else(|| err(15955, "a group specification must include an _id"))?;
    Ok(Group { id, accumulators })
}

fn parse_count_name(spec: &Bson) -> Result<String> {
    let Bson::String(name) = spec else {
        return Err(err(40156, "the count field must be a non-empty string"));
    };
    if name.is_empty() {
        return Err(err(40156, "the count field must be a non-empty string"));
    }
    if name.starts_with('$') {
        return Err(err(40158, "the count field cannot be a $-prefixed path"));
    }
    if name.contains('.') {
        return Err(err(40160, "the count field cannot contain '.'"));
    }
    Ok(name.clone())
}

fn non_negative_int(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Some(*d as i64),
        _ => None,
    }
}

fn parse_stage(stage: &Bson) -> Result<(String, Stage)> {
    let Bson::Document(d) = stage else {
        return Err(CommandError::type_mismatch(
            "Each element of the 'pipeline' array must be an object",
        ));
    };
    if d.len() != 1 {
        return Err(err(
            40323,
            "A pipeline stage specification object must contain exactly one field.",
        ));
    }
    let (name, spec) = d
        .iter()
        .next()
        .ok_or_else(|| CommandError::internal("stage"))?;
    let stage = match name.as_str() {
        "$match" => match spec {
            Bson::Document(f) => Stage::Match(Matcher::parse(f)?),
            _ => {
                return Err(err(
                    15959,
                    "the match filter must be an expression in an object",
                ));
            }
        },
        "$project" => Stage::Project(parse_project(spec)?),
        "$addFields" | "$set" => Stage::AddFields(parse_add_fields(name, spec)?),
        "$unset" => Stage::Project(Projection::Exclusion(parse_unset(spec)?)),
        "$replaceRoot" => {
            let Bson::Document(d) = spec else {
                return Err(err(
                    40229,
                    format!(
                        "expected an object as specification for $replaceRoot stage, got {}",
                        type_alias(spec)
                    ),
                ));
            };
            let mut expr = None;
            for (k, v) in d {
                if k != "newRoot" {
                    return Err(err(
                        40415,
                        format!("BSON field '$replaceRoot.{k}' is an unknown field."),
                    ));
                }
                expr = Some(Expr::parse(v)?);
            }
            let expr = expr.ok_or_else(|| {
                err(
                    40414,
                    "BSON field '$replaceRoot.newRoot' is missing but a required field",
                )
            })?;
            Stage::ReplaceRoot { expr, with: false }
        }
        "$replaceWith" => Stage::ReplaceRoot {
            expr: Expr::parse(spec)?,
            with: true,
        },
        "$unwind" => Stage::Unwind(parse_unwind(spec)?),
        "$group" => Stage::Group(parse_group(spec)?),
        "$sort" => match spec {
            Bson::Document(s) => Stage::Sort(SortSpec::parse(s)?),
            _ => return Err(err(15973, "the $sort key specification must be an object")),
        },
        "$skip" => {
            let n = non_negative_int(spec)
                .ok_or_else(|| err(15972, "Argument to $skip must be a number"))?;
            if n < 0 {
                return Err(err(15956, "Argument to $skip cannot be negative"));
            }
            Stage::Skip(n as u64)
        }
        "$limit" => {
            let n = non_negative_int(spec)
                .ok_or_else(|| err(15957, "the limit must be specified as a number"))?;
            if n <= 0 {
                return Err(err(15958, "the limit must be positive"));
            }
            Stage::Limit(n as u64)
        }
        "$count" => Stage::Count(parse_count_name(spec)?),
        "$sortByCount" => {
            let ok = match spec {
                Bson::String(s) => s.starts_with('$'),
                Bson::Document(d) => {
                    d.len() == 1 && d.keys().next().is_some_and(|k| k.starts_with('$'))
                }
                _ => false,
            };
            if !ok {
                return Err(err(
                    40148,
                    "the sortByCount field must be defined as a $-prefixed path or an expression",
                ));
            }
            Stage::SortByCount(Expr::parse(spec)?)
        }
        other => {
            return Err(err(
                40324,
                format!("Unrecognized pipeline stage name: '{other}'"),
            ));
        }
    };
    Ok((name.clone(), stage))
}

// ---- document helpers -----------------------------------------------------------------

fn get_doc_path<'d>(doc: &'d Document, path: &[String]) -> Option<&'d Bson> {
    let (first, rest) = path.split_first()?;
    let v = doc.get(first)?;
    if rest.is_empty() {
        return Some(v);
    }
    match v {
        Bson::Document(d) => get_doc_path(d, rest),
        _ => None,
    }
}

/// Sets a dotted path, creating (or replacing non-document) intermediate fields.
fn set_doc_path(doc: &mut Document, path: &[String], value: Bson) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        doc.insert(first.clone(), value);
        return;
    }
    if !matches!(doc.get(first), Some(Bson::Document(_))) {
        doc.insert(first.clone(), Document::new());
    }
    if let Some(Bson::Document(sub)) = doc.get_mut(first) {
        set_doc_path(sub, rest, value);
    }
}

fn remove_doc_path(doc: &mut Document, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        doc.remove(first);
    } else if let Some(Bson::Document(sub)) = doc.get_mut(first) {
        remove_doc_path(sub, rest);
    }
}

// ---- projection application -------------------------------------------------------------

fn apply_inclusion(tree: &Tree, doc: &Document) -> Document {
    let mut out = Document::new();
    for (k, v) in doc {
        match tree.get(k) {
            Some(Leaf::Include) => {
                out.insert(k.clone(), v.clone());
            }
            Some(Leaf::Sub(t)) => {
                if let Some(x) = inclusion_value(t, v) {
                    out.insert(k.clone(), x);
                }
            }
            _ => {}
        }
    }
    out
}

fn inclusion_value(tree: &Tree, v: &Bson) -> Option<Bson> {
    match v {
        Bson::Document(d) => Some(Bson::Document(apply_inclusion(tree, d))),
        Bson::Array(items) => Some(Bson::Array(
            items
                .iter()
                .filter_map(|i| inclusion_value(tree, i))
                .collect(),
        )),
        _ => None,
    }
}

fn apply_exclusion(tree: &Tree, doc: &Document) -> Document {
    let mut out = Document::new();
    for (k, v) in doc {
        match tree.get(k) {
            Some(Leaf::Exclude) => {}
            Some(Leaf::Sub(t)) => {
                out.insert(k.clone(), exclusion_value(t, v));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

fn exclusion_value(tree: &Tree, v: &Bson) -> Bson {
    match v {
        Bson::Document(d) => Bson::Document(apply_exclusion(tree, d)),
        Bson::Array(items) => Bson::Array(items.iter().map(|i| exclusion_value(tree, i)).collect()),
        other => other.clone(),
    }
}

/// Sets the computed fields of `tree` in `out`; expressions see `root`.
fn apply_computed(
    tree: &Tree,
    out: &mut Document,
    root: &Document,
    ctx: &EvalContext,
) -> Result<()> {
    for (k, leaf) in &tree.fields {
        match leaf {
            Leaf::Computed(e) => match e.eval(root, ctx)? {
                Some(v) => {
                    out.insert(k.clone(), v);
                }
                None => {
                    out.remove(k);
                }
            },
            Leaf::Sub(t) if t.computed => {
                let current = out.remove_entry_keep(k);
                let value = computed_value(t, current, root, ctx)?;
                out.insert(k.clone(), value);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Takes a field's value out of a document without changing its position (the caller
/// re-inserts the new value at the same key).
trait TakeField {
    fn remove_entry_keep(&mut self, key: &str) -> Option<Bson>;
}

impl TakeField for Document {
    fn remove_entry_keep(&mut self, key: &str) -> Option<Bson> {
        self.get_mut(key).map(|v| std::mem::replace(v, Bson::Null))
    }
}

fn computed_value(
    tree: &Tree,
    current: Option<Bson>,
    root: &Document,
    ctx: &EvalContext,
) -> Result<Bson> {
    Ok(match current {
        Some(Bson::Document(mut d)) => {
            apply_computed(tree, &mut d, root, ctx)?;
            Bson::Document(d)
        }
        Some(Bson::Array(items)) => Bson::Array(
            items
                .into_iter()
                .map(|i| computed_value(tree, Some(i), root, ctx))
                .collect::<Result<_>>()?,
        ),
        _ => {
            let mut d = Document::new();
            apply_computed(tree, &mut d, root, ctx)?;
            Bson::Document(d)
        }
    })
}

// ---- group ---------------------------------------------------------------------------------

#[derive(Debug)]
enum AccState {
    Sum(super::expr::Sum),
    Avg(super::expr::Sum),
    Pick(Option<Bson>),
    First(Option<Bson>, bool),
    Values(Vec<Bson>),
}

impl AccState {
    fn new(kind: AccKind) -> Self {
        match kind {
            AccKind::Sum | AccKind::Count => AccState::Sum(Default::default()),
            AccKind::Avg => AccState::Avg(Default::default()),
            AccKind::Min | AccKind::Max | AccKind::Last => AccState::Pick(None),
            AccKind::First => AccState::First(None, false),
            AccKind::Push | AccKind::AddToSet => AccState::Values(Vec::new()),
        }
    }

    fn add(&mut self, kind: AccKind, value: Option<Bson>) -> Result<()> {
        let name = match kind {
            AccKind::Avg => "$avg",
            _ => "$sum",
        };
        match self {
            AccState::Sum(s) | AccState::Avg(s) => {
                if let Some(n) = value
                    .as_ref()
                    .map(|v| Num::of(v, name))
                    .transpose()?
                    .flatten()
                {
                    s.add(n);
                }
            }
            AccState::Pick(best) => match kind {
                AccKind::Last => *best = Some(value.unwrap_or(Bson::Null)),
                _ => {
                    let Some(v) = value.filter(|v| !matches!(v, Bson::Null | Bson::Undefined))
                    else {
                        return Ok(());
                    };
                    let replace = match best {
                        None => true,
                        Some(b) => {
                            let ord = compare(&v, b);
                            if kind == AccKind::Max {
                                ord.is_gt()
                            } else {
                                ord.is_lt()
                            }
                        }
                    };
                    if replace {
                        *best = Some(v);
                    }
                }
            },
            AccState::First(first, seen) => {
                if !*seen {
                    *seen = true;
                    *first = Some(value.unwrap_or(Bson::Null));
                }
            }
            AccState::Values(values) => {
                if let Some(v) = value {
                    if kind == AccKind::Push || !values.iter().any(|x| values_equal(x, &v)) {
                        values.push(v);
                    }
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> Bson {
        match self {
            AccState::Sum(s) => s.result().into_bson(),
            AccState::Avg(s) => {
                if s.count == 0 {
                    Bson::Null
                } else {
                    Bson::Double(s.result().to_f64() / s.count as f64)
                }
            }
            AccState::Pick(v) | AccState::First(v, _) => v.unwrap_or(Bson::Null),
            AccState::Values(v) => Bson::Array(v),
        }
    }
}

fn run_group(group: &Group, docs: Vec<Document>, ctx: &EvalContext) -> Result<Vec<Document>> {
    let mut index: std::collections::BTreeMap<OrdBson, usize> = std::collections::BTreeMap::new();
    let mut groups: Vec<(Bson, Vec<AccState>)> = Vec::new();
    for doc in &docs {
        let key = group.id.eval(doc, ctx)?.unwrap_or(Bson::Null);
        let slot = match index.get(&OrdBson(key.clone())) {
            Some(i) => *i,
            None => {
                index.insert(OrdBson(key.clone()), groups.len());
                groups.push((
                    key,
                    group
                        .accumulators
                        .iter()
                        .map(|(_, k, _)| AccState::new(*k))
                        .collect(),
                ));
                groups.len() - 1
            }
        };
        for ((_, kind, expr), state) in group.accumulators.iter().zip(groups[slot].1.iter_mut()) {
            state.add(*kind, expr.eval(doc, ctx)?)?;
        }
    }
    Ok(groups
        .into_iter()
        .map(|(key, states)| {
            let mut out = Document::new();
            out.insert("_id", key);
            for ((name, _, _), state) in group.accumulators.iter().zip(states) {
                out.insert(name.clone(), state.finish());
            }
            out
        })
        .collect())
}

// ---- single-document stages --------------------------------------------------------------

fn replace_root(expr: &Expr, with: bool, doc: &Document, ctx: &EvalContext) -> Result<Document> {
    match expr.eval(doc, ctx)? {
        Some(Bson::Document(d)) => Ok(d),
        other => {
            let what = if with {
                "'replacement document'"
            } else {
                "'newRoot' expression "
            };
            let (shown, ty) = match &other {
                Some(v) => (fmt_value(v), type_alias(v)),
                None => ("MISSING".to_string(), "missing"),
            };
            Err(err(
                40228,
                format!(
                    "{what} must evaluate to an object, but resulting value was: {shown}. Type of resulting value: '{ty}'. Input document: {}",
                    fmt_value(&Bson::Document(doc.clone()))
                ),
            ))
        }
    }
}

fn project_one(stage: &Stage, doc: &Document, ctx: &EvalContext) -> Result<Document> {
    match stage {
        Stage::Project(Projection::Inclusion(tree)) => {
            let mut out = apply_inclusion(tree, doc);
            if tree.computed {
                apply_computed(tree, &mut out, doc, ctx)?;
            }
            Ok(out)
        }
        Stage::Project(Projection::Exclusion(tree)) => Ok(apply_exclusion(tree, doc)),
        Stage::AddFields(tree) => {
            let mut out = doc.clone();
            apply_computed(tree, &mut out, doc, ctx)?;
            Ok(out)
        }
        Stage::ReplaceRoot { expr, with } => replace_root(expr, *with, doc, ctx),
        _ => Err(CommandError::internal("not a single-document stage")),
    }
}

fn unwind(u: &Unwind, docs: Vec<Document>, out: &mut Vec<Document>) {
    for doc in docs {
        let with_index = |mut d: Document, i: Option<usize>| {
            if let Some(name) = &u.index {
                let idx = i.map(|i| Bson::Int64(i as i64)).unwrap_or(Bson::Null);
                let components: Vec<String> = name.split('.').map(str::to_string).collect();
                set_doc_path(&mut d, &components, idx);
            }
            d
        };
        match get_doc_path(&doc, &u.path).cloned() {
            Some(Bson::Array(items)) if !items.is_empty() => {
                for (i, item) in items.into_iter().enumerate() {
                    let mut d = doc.clone();
                    set_doc_path(&mut d, &u.path, item);
                    out.push(with_index(d, Some(i)));
                }
            }
            Some(Bson::Array(_)) => {
                if u.preserve {
                    let mut d = doc;
                    remove_doc_path(&mut d, &u.path);
                    out.push(with_index(d, None));
                }
            }
            None | Some(Bson::Null | Bson::Undefined) => {
                if u.preserve {
                    out.push(with_index(doc, None));
                }
            }
            Some(_) => out.push(with_index(doc, None)),
        }
    }
}

const UPDATE_STAGES: [&str; 6] = [
    "$addFields",
    "$set",
    "$project",
    "$unset",
    "$replaceRoot",
    "$replaceWith",
];

impl Pipeline {
    /// Parses an `aggregate` pipeline (stages the command layer handles itself, such as
    /// `$changeStream`, are removed before this is called).
    pub fn parse(stages: &[Bson]) -> Result<Pipeline> {
        let stages = stages
            .iter()
            .map(|s| parse_stage(s).map(|(_, st)| st))
            .collect::<Result<_>>()?;
        Ok(Pipeline { stages })
    }

    /// Parses the pipeline of a pipeline-style update: only `$addFields`/`$set`,
    /// `$project`/`$unset` and `$replaceRoot`/`$replaceWith` are allowed (others fail with
    /// code 72, "`$match` is not allowed to be used within an update").
    pub fn parse_update(stages: &[Bson]) -> Result<Pipeline> {
        let mut parsed = Vec::with_capacity(stages.len());
        for s in stages {
            let (name, stage) = parse_stage(s)?;
            if !UPDATE_STAGES.contains(&name.as_str()) {
                return Err(err(
                    72,
                    format!("{name} is not allowed to be used within an update"),
                ));
            }
            parsed.push(stage);
        }
        Ok(Pipeline { stages: parsed })
    }

    /// Runs the pipeline over `input`.
    pub fn run(&self, input: Vec<Document>, ctx: &EvalContext) -> Result<Vec<Document>> {
        let mut docs = input;
        for stage in &self.stages {
            docs = match stage {
                Stage::Match(m) => {
                    let mut kept = Vec::with_capacity(docs.len());
                    for d in docs {
                        if m.matches(&d, ctx)? {
                            kept.push(d);
                        }
                    }
                    kept
                }
                Stage::Project(_) | Stage::AddFields(_) | Stage::ReplaceRoot { .. } => docs
                    .iter()
                    .map(|d| project_one(stage, d, ctx))
                    .collect::<Result<_>>()?,
                Stage::Unwind(u) => {
                    let mut out = Vec::with_capacity(docs.len());
                    unwind(u, docs, &mut out);
                    out
                }
                Stage::Group(g) => run_group(g, docs, ctx)?,
                Stage::Sort(spec) => {
                    docs.sort_by(|a, b| spec.compare(a, b));
                    docs
                }
                Stage::Skip(n) => docs
                    .into_iter()
                    .skip(usize::try_from(*n).unwrap_or(usize::MAX))
                    .collect(),
                Stage::Limit(n) => docs
                    .into_iter()
                    .take(usize::try_from(*n).unwrap_or(usize::MAX))
                    .collect(),
                Stage::Count(name) => {
                    if docs.is_empty() {
                        Vec::new()
                    } else {
                        let n = docs.len();
                        let count = i32::try_from(n)
                            .map(Bson::Int32)
                            .unwrap_or(Bson::Int64(n as i64));
                        let mut d = Document::new();
                        d.insert(name.clone(), count);
                        vec![d]
                    }
                }
                Stage::SortByCount(expr) => {
                    let group = Group {
                        id: expr.clone(),
                        accumulators: vec![(
                            "count".to_string(),
                            AccKind::Sum,
                            Expr::parse(&Bson::Int32(1))?,
                        )],
                    };
                    let mut out = run_group(&group, docs, ctx)?;
                    out.sort_by(|a, b| {
                        let ca = a.get("count").cloned().unwrap_or(Bson::Null);
                        let cb = b.get("count").cloned().unwrap_or(Bson::Null);
                        compare(&cb, &ca)
                    });
                    out
                }
            };
        }
        Ok(docs)
    }

    /// Runs an update pipeline on one document and returns the new document.
    ///
    /// As for replacements in mongod: if the result has no `_id`, the original `_id` is kept
    /// (as the first field); if it has a different one, the update fails with code 66
    /// (ImmutableField).
    pub fn apply_update(&self, doc: &Document, ctx: &EvalContext) -> Result<Document> {
        let mut current: Option<Document> = None;
        for stage in &self.stages {
            let input = current.as_ref().unwrap_or(doc);
            current = Some(project_one(stage, input, ctx)?);
        }
        let mut out = current.unwrap_or_else(|| doc.clone());
        if let Some(id) = doc.get("_id") {
            match out.get("_id") {
                None => {
                    let mut with_id = Document::new();
                    with_id.insert("_id", id.clone());
                    with_id.extend(out);
                    out = with_id;
                }
                Some(new_id) if !values_equal(new_id, id) => {
                    return Err(err(
                        66,
                        format!(
                            "After applying the update, the (immutable) field '_id' was found to have been altered to _id: {}",
                            fmt_value(new_id)
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(out)
    }
}
