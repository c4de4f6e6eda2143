//! Aggregation pipelines: `aggregate` stages and the stages allowed in pipeline updates.
//!
//! Supported stages: `$match`, `$project`, `$addFields`/`$set`, `$unset`, `$replaceRoot`,
//! `$replaceWith`, `$unwind`, `$group`, `$sort`, `$skip`, `$limit`, `$count` and
//! `$sortByCount`. Any other stage name fails with code 40324. `$out` and `$merge` write to
//! the catalog, so the `aggregate` command runs them itself (`commands/aggregate/out_merge.rs`);
//! here they are refused.

// `CommandError` (owned by `engine::error`) is large; every fallible function here returns it.

use bson::{Bson, Document};

use super::compare::{OrdBson, compare, type_alias, values_equal};
use super::expr::{Expr, Num, check_field_name, fmt_obj, fmt_value, parse_field_path};
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
    /// Optimizes the computed fields' expressions (see [`Expr::optimize`]).
    fn optimize(&mut self, ctx: &EvalContext) -> Result<()> {
        for (_, leaf) in &mut self.fields {
            match leaf {
                Leaf::Computed(expr) => expr.optimize(ctx)?,
                Leaf::Sub(tree) => tree.optimize(ctx)?,
                Leaf::Include | Leaf::Exclude => {}
            }
        }
        Ok(())
    }

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
    stage: &str,
    whole: &Document,
) -> Result<()> {
    let empty_is_error = stage == "$project";
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
                flatten_spec(d, &path, out, stage, whole)?;
            }
            Bson::Document(d) if d.len() > 1 => {
                return Err(err(
                    40181,
                    format!(
                        "Invalid {stage} :: caused by :: an expression specification must contain exactly one field, the name of the expression. Found {} fields in {}, while parsing object {}",
                        d.len(),
                        fmt_obj(d),
                        fmt_obj(whole)
                    ),
                ));
            }
            _ => out.push((path, v)),
        }
    }
    Ok(())
}

/// The command's `let` variables when known at parse time (see [`Expr::parse_with_let`]).
type Vars<'a> = Option<&'a Document>;

fn expr(value: &Bson, vars: Vars<'_>) -> Result<Expr> {
    match vars {
        Some(v) => Expr::parse_with_let(value, v),
        None => Expr::parse(value),
    }
}

fn parse_project(spec: &Bson, vars: Vars<'_>) -> Result<Projection> {
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
    flatten_spec(spec, "", &mut flat, "$project", spec)?;
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
    // As mongod: fields are read in order; an inclusion (even of `_id`) or a computed field
    // makes it an inclusion projection, an exclusion of anything but `_id` an exclusion one,
    // and a projection with neither (only `_id: 0`) excludes.
    let mut exclusion: Option<bool> = None;
    let mut tree = Tree::default();
    let mut id_seen = false;
    for (path, v) in &flat {
        let components = parse_field_path(path)?;
        id_seen |= path == "_id" || path.starts_with("_id.");
        let leaf = match kind_of(v) {
            SpecKind::Include => {
                if exclusion == Some(true) {
                    return Err(err(
                        31253,
                        format!(
                            "Invalid $project :: caused by :: Cannot do inclusion on field {path} in exclusion projection"
                        ),
                    ));
                }
                exclusion = Some(false);
                Leaf::Include
            }
            SpecKind::Exclude => {
                if path != "_id" {
                    if exclusion == Some(false) {
                        return Err(err(
                            31254,
                            format!(
                                "Invalid $project :: caused by :: Cannot do exclusion on field {path} in inclusion projection"
                            ),
                        ));
                    }
                    exclusion = Some(true);
                }
                Leaf::Exclude
            }
            SpecKind::Computed => {
                if exclusion == Some(true) {
                    return Err(err(
                        31252,
                        "Invalid $project :: caused by :: Cannot use expression other than $meta in exclusion projection",
                    ));
                }
                exclusion = Some(false);
                Leaf::Computed(expr(v, vars)?)
            }
        };
        tree.insert(&components, path, leaf)?;
    }
    let exclusion = exclusion.unwrap_or(true);
    if exclusion {
        return Ok(Projection::Exclusion(tree));
    }
    // `_id` is included unless excluded explicitly; an `_id: 0` leaf simply never matches.
    if !id_seen {
        tree.fields.insert(0, ("_id".to_string(), Leaf::Include));
    }
    Ok(Projection::Inclusion(tree))
}

fn parse_add_fields(name: &str, spec: &Bson, vars: Vars<'_>) -> Result<Tree> {
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
    flatten_spec(spec, "", &mut flat, name, spec)?;
    let mut tree = Tree::default();
    for (path, v) in flat {
        let components = parse_field_path(&path)?;
        tree.insert(&components, &path, Leaf::Computed(expr(v, vars)?))?;
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

fn parse_group(spec: &Bson, vars: Vars<'_>) -> Result<Group> {
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
            id = Some(expr(v, vars)?);
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
            expr(arg, vars)?
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

/// The argument of `$skip`/`$limit`: a non-negative integral number.
fn parse_skip_limit(stage: &str, code: i32, spec: &Bson) -> Result<u64> {
    let shown = match spec {
        Bson::Double(d) if d.fract() == 0.0 && d.is_finite() => format!("{d:.1}"),
        other => fmt_value(other),
    };
    let invalid = |what: &str| {
        err(
            code,
            format!("invalid argument to {stage} stage: {what}: {stage}: {shown}"),
        )
    };
    let n: f64 = match spec {
        Bson::Int32(i) => f64::from(*i),
        Bson::Int64(i) => {
            return u64::try_from(*i).map_err(|_| invalid("Expected a non-negative number in"));
        }
        Bson::Double(d) => *d,
        Bson::Decimal128(d) => d.to_string().parse().unwrap_or(f64::NAN),
        _ => return Err(invalid("Expected a number in")),
    };
    if n.fract() != 0.0 || !n.is_finite() || n.abs() >= 9.2e18 {
        return Err(invalid("Expected an integer"));
    }
    if n < 0.0 {
        return Err(invalid("Expected a non-negative number in"));
    }
    Ok(n as u64)
}

fn parse_stage(stage: &Bson, vars: Vars<'_>) -> Result<(String, Stage)> {
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
        "$project" => Stage::Project(parse_project(spec, vars)?),
        "$addFields" | "$set" => Stage::AddFields(parse_add_fields(name, spec, vars)?),
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
            let mut new_root = None;
            for (k, v) in d {
                if k != "newRoot" {
                    return Err(err(
                        40415,
                        format!("BSON field '$replaceRoot.{k}' is an unknown field."),
                    ));
                }
                new_root = Some(expr(v, vars)?);
            }
            let new_root = new_root.ok_or_else(|| {
                err(
                    40414,
                    "BSON field '$replaceRoot.newRoot' is missing but a required field",
                )
            })?;
            Stage::ReplaceRoot {
                expr: new_root,
                with: false,
            }
        }
        "$replaceWith" => Stage::ReplaceRoot {
            expr: expr(spec, vars)?,
            with: true,
        },
        "$unwind" => Stage::Unwind(parse_unwind(spec)?),
        "$group" => Stage::Group(parse_group(spec, vars)?),
        "$sort" => match spec {
            Bson::Document(s) => Stage::Sort(SortSpec::parse(s)?),
            _ => return Err(err(15973, "the $sort key specification must be an object")),
        },
        "$skip" => Stage::Skip(parse_skip_limit("$skip", 5107200, spec)?),
        "$limit" => {
            let n = parse_skip_limit("$limit", 5107201, spec)?;
            if n == 0 {
                return Err(err(15958, "the limit must be positive"));
            }
            Stage::Limit(n)
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
            Stage::SortByCount(expr(spec, vars)?)
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
                if let Some(v) = value
                    && (kind == AccKind::Push || !values.iter().any(|x| values_equal(x, &v)))
                {
                    values.push(v);
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
        ctx.check_deadline()?;
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
                "'newRoot' expression"
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

/// Whether a stage turns each document into zero or more documents on its own, so that
/// documents can go through a run of such stages one at a time.
fn is_per_document(stage: &Stage) -> bool {
    matches!(
        stage,
        Stage::Match(_)
            | Stage::Project(_)
            | Stage::AddFields(_)
            | Stage::ReplaceRoot { .. }
            | Stage::Unwind(_)
    )
}

/// Takes one document through `stages` (all per-document stages) and appends what comes
/// out to `out`. Documents go through a run of such stages one at a time, as in mongod,
/// so no stage's output is held for every document at once.
fn stream_one(
    stages: &[Stage],
    doc: Document,
    ctx: &EvalContext,
    out: &mut Vec<Document>,
) -> Result<()> {
    let Some((stage, rest)) = stages.split_first() else {
        out.push(doc);
        return Ok(());
    };
    match stage {
        Stage::Match(m) => {
            if m.matches(&doc, ctx)? {
                stream_one(rest, doc, ctx, out)?;
            }
        }
        Stage::Unwind(u) => {
            let mut unwound = Vec::new();
            unwind(u, vec![doc], &mut unwound);
            for d in unwound {
                stream_one(rest, d, ctx, out)?;
            }
        }
        _ => {
            let d = project_one(stage, &doc, ctx)?;
            drop(doc);
            stream_one(rest, d, ctx, out)?;
        }
    }
    Ok(())
}

/// Runs `stages` over `input`.
fn run_stages(stages: &[Stage], input: Vec<Document>, ctx: &EvalContext) -> Result<Vec<Document>> {
    let mut docs = input;
    let mut at = 0;
    while let Some(stage) = stages.get(at) {
        if is_per_document(stage) {
            let run = stages[at..]
                .iter()
                .take_while(|s| is_per_document(s))
                .count();
            let mut out = Vec::with_capacity(docs.len());
            for d in docs {
                ctx.check_deadline()?;
                stream_one(&stages[at..at + run], d, ctx, &mut out)?;
            }
            docs = out;
            at += run;
            continue;
        }
        at += 1;
        docs = match stage {
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
            Stage::Match(_)
            | Stage::Project(_)
            | Stage::AddFields(_)
            | Stage::ReplaceRoot { .. }
            | Stage::Unwind(_) => unreachable!("per-document stages run above"),
        };
    }
    Ok(docs)
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

fn is_output_stage_name(name: &str) -> bool {
    name == "$out" || name == "$merge"
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
        Self::parse_inner(stages, None)
    }

    /// [`Pipeline::parse`] for an `aggregate` command with `let` variables `let_vars`:
    /// references to undefined variables fail at parse time (code 17276), as in mongod, even
    /// when no document reaches the stage.
    pub fn parse_with_let(stages: &[Bson], let_vars: &Document) -> Result<Pipeline> {
        Self::parse_inner(stages, Some(let_vars))
    }

    fn parse_inner(stages: &[Bson], vars: Vars<'_>) -> Result<Pipeline> {
        let stages = stages
            .iter()
            .map(|s| parse_stage(s, vars).map(|(_, st)| st))
            .collect::<Result<_>>()?;
        Ok(Pipeline { stages })
    }

    /// Parses the pipeline of a pipeline-style update: only `$addFields`/`$set`,
    /// `$project`/`$unset` and `$replaceRoot`/`$replaceWith` are allowed (others fail with
    /// code 72, "`$match` is not allowed to be used within an update").
    pub fn parse_update(stages: &[Bson]) -> Result<Pipeline> {
        Self::parse_update_inner(stages, None)
    }

    /// [`Pipeline::parse_update`] for a command with `let` variables `let_vars`: references
    /// to undefined variables fail at parse time (code 17276), as in mongod.
    pub fn parse_update_with_let(stages: &[Bson], let_vars: &Document) -> Result<Pipeline> {
        Self::parse_update_inner(stages, Some(let_vars))
    }

    fn parse_update_inner(stages: &[Bson], vars: Vars<'_>) -> Result<Pipeline> {
        let mut parsed = Vec::with_capacity(stages.len());
        for s in stages {
            // `$out` and `$merge` are aggregate-only (the command runs them, with the catalog).
            if let Some(name) = s.as_document().and_then(|d| d.keys().next())
                && is_output_stage_name(name)
            {
                return Err(err(
                    72,
                    format!("{name} is not allowed to be used within an update"),
                ));
            }
            let (name, stage) = parse_stage(s, vars)?;
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

    /// Optimizes every stage's expressions for one command, as mongod's
    /// `Pipeline::optimizePipeline` does before an `aggregate` runs (see [`Expr::optimize`]).
    /// Update pipelines are not optimized (mongod does not either).
    ///
    /// # Errors
    ///
    /// The error of a constant sub-expression.
    pub fn optimize(&mut self, ctx: &EvalContext) -> Result<()> {
        for stage in &mut self.stages {
            match stage {
                Stage::Match(matcher) => matcher.optimize(ctx)?,
                Stage::Project(Projection::Inclusion(tree) | Projection::Exclusion(tree))
                | Stage::AddFields(tree) => tree.optimize(ctx)?,
                Stage::ReplaceRoot { expr, .. } | Stage::SortByCount(expr) => expr.optimize(ctx)?,
                Stage::Group(group) => {
                    group.id.optimize(ctx)?;
                    for (_, _, expr) in &mut group.accumulators {
                        expr.optimize(ctx)?;
                    }
                }
                Stage::Unwind(_)
                | Stage::Sort(_)
                | Stage::Skip(_)
                | Stage::Limit(_)
                | Stage::Count(_) => {}
            }
        }
        Ok(())
    }

    /// Removes a leading `$match` stage and returns its matcher, so that the caller can
    /// filter the documents before it copies them (the rest of the pipeline then runs on the
    /// matching ones only, as it would have).
    pub fn take_leading_match(&mut self) -> Option<Matcher> {
        match self.stages.first() {
            Some(Stage::Match(_)) => match self.stages.remove(0) {
                Stage::Match(matcher) => Some(matcher),
                _ => unreachable!("checked above"),
            },
            _ => None,
        }
    }

    /// The first stage's output for one input document, when that stage computes each
    /// output document from one input document (`$project`, `$addFields`/`$set`,
    /// `$replaceRoot`/`$replaceWith`): the caller can then read its documents in place
    /// instead of copying them, and go on with [`Pipeline::run_after_first`].
    pub fn first_stage_of(&self, doc: &Document, ctx: &EvalContext) -> Option<Result<Document>> {
        match self.stages.first() {
            Some(stage @ (Stage::Project(_) | Stage::AddFields(_) | Stage::ReplaceRoot { .. })) => {
                Some(project_one(stage, doc, ctx))
            }
            _ => None,
        }
    }

    /// Runs the stages after the first over `input`, the first stage's output (see
    /// [`Pipeline::first_stage_of`]).
    pub fn run_after_first(
        &self,
        input: Vec<Document>,
        ctx: &EvalContext,
    ) -> Result<Vec<Document>> {
        run_stages(self.stages.get(1..).unwrap_or_default(), input, ctx)
    }

    /// Runs the pipeline over `input`.
    pub fn run(&self, input: Vec<Document>, ctx: &EvalContext) -> Result<Vec<Document>> {
        run_stages(&self.stages, input, ctx)
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

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{DateTime, bson, doc};

    const NOW_MS: i64 = 1_700_000_000_000;

    fn ctx() -> EvalContext {
        EvalContext::at(DateTime::from_millis(NOW_MS))
    }

    fn stages(v: Bson) -> Vec<Bson> {
        v.as_array().expect("pipeline array").clone()
    }

    fn run(pipeline: Bson, input: Vec<Document>) -> Result<Vec<Document>> {
        Pipeline::parse(&stages(pipeline))?.run(input, &ctx())
    }

    fn one(pipeline: Bson, input: Document) -> Document {
        let out =
            run(pipeline.clone(), vec![input]).unwrap_or_else(|e| panic!("{pipeline:?}: {e}"));
        assert_eq!(out.len(), 1, "{pipeline:?}");
        out.into_iter().next().unwrap()
    }

    fn parse_err(pipeline: Bson) -> (i32, String) {
        let e = Pipeline::parse(&stages(pipeline)).unwrap_err();
        (e.code, e.errmsg)
    }

    /// The update the lock library sends on every acquisition.
    fn lock_update(granted: Bson) -> Bson {
        bson!([
            {"$set": {"shared": {"$filter": {
                "input": {"$ifNull": ["$shared", []]},
                "as": "s",
                "cond": {"$or": [{"$eq": ["$$s.expiresAt", null]}, {"$gt": ["$$s.expiresAt", "$$NOW"]}]},
            }}}},
            {"$set": {"fence": {"$cond": [
                granted,
                {"$max": [{"$add": [{"$ifNull": ["$fence", 0]}, 1]}, {"$multiply": [{"$toLong": "$$NOW"}, 1000]}]},
                "$fence",
            ]}}},
            {"$set": {"owner": {"$cond": [{"$eq": [{"$size": "$shared"}, 0]}, "me", "$owner"]}}},
        ])
    }

    #[test]
    fn lock_library_update_pipeline() {
        let p = Pipeline::parse_update(&stages(lock_update(bson!(true)))).unwrap();
        // A fresh (upserted) document.
        let out = p.apply_update(&doc! {"_id": "lock"}, &ctx()).unwrap();
        assert_eq!(
            out,
            doc! {"_id": "lock", "shared": [], "fence": NOW_MS * 1000, "owner": "me"}
        );
        // An existing document: expired holders are dropped, the fence keeps increasing.
        let existing = doc! {
            "_id": "lock",
            "fence": NOW_MS * 1000 + 7,
            "shared": [
                {"id": "old", "expiresAt": DateTime::from_millis(NOW_MS)},
                {"id": "live", "expiresAt": DateTime::from_millis(NOW_MS + 1)},
                {"id": "forever", "expiresAt": null},
            ],
            "owner": "other",
        };
        let out = p.apply_update(&existing, &ctx()).unwrap();
        assert_eq!(
            out,
            doc! {
                "_id": "lock",
                "fence": NOW_MS * 1000 + 8,
                "shared": [
                    {"id": "live", "expiresAt": DateTime::from_millis(NOW_MS + 1)},
                    {"id": "forever", "expiresAt": null},
                ],
                "owner": "other",
            }
        );
        // Not granted: the fence is left alone, and stays missing when it was missing.
        let p = Pipeline::parse_update(&stages(lock_update(bson!(false)))).unwrap();
        let out = p
            .apply_update(&doc! {"_id": 1, "fence": 3_i64}, &ctx())
            .unwrap();
        assert_eq!(out.get("fence"), Some(&bson!(3_i64)));
        let out = p.apply_update(&doc! {"_id": 1}, &ctx()).unwrap();
        assert_eq!(out, doc! {"_id": 1, "shared": [], "owner": "me"});
    }

    #[test]
    fn set_and_add_fields() {
        let input = doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "arr": [{"x": 1}, 5, [{"x": 2}]], "s": 3};
        let cases: Vec<(Bson, Document)> = vec![
            (
                bson!([{"$set": {"a": 2, "z": "$a"}}]),
                doc! {"_id": 1, "a": 2, "b": {"c": 1, "d": 2}, "arr": [{"x": 1}, 5, [{"x": 2}]], "s": 3, "z": 1},
            ),
            (
                bson!([{"$addFields": {"a": "$$REMOVE", "n": "$missing"}}]),
                doc! {"_id": 1, "b": {"c": 1, "d": 2}, "arr": [{"x": 1}, 5, [{"x": 2}]], "s": 3},
            ),
            (
                bson!([{"$set": {"b.e": 3, "b.c": "$$REMOVE"}}]),
                doc! {"_id": 1, "a": 1, "b": {"d": 2, "e": 3}, "arr": [{"x": 1}, 5, [{"x": 2}]], "s": 3},
            ),
            (
                bson!([{"$set": {"b": {"e": true}}}]),
                doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2, "e": true}, "arr": [{"x": 1}, 5, [{"x": 2}]], "s": 3},
            ),
            (
                bson!([{"$set": {"new.deep.f": 1}}]),
                doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "arr": [{"x": 1}, 5, [{"x": 2}]], "s": 3, "new": {"deep": {"f": 1}}},
            ),
            (
                bson!([{"$set": {"s.t": 1}}]),
                doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "arr": [{"x": 1}, 5, [{"x": 2}]], "s": {"t": 1}},
            ),
            (
                bson!([{"$set": {"arr.y": 0}}]),
                doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "arr": [{"x": 1, "y": 0}, {"y": 0}, [{"x": 2, "y": 0}]], "s": 3},
            ),
            (
                bson!([{"$set": {"e": {}}}]),
                doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "arr": [{"x": 1}, 5, [{"x": 2}]], "s": 3, "e": {}},
            ),
            (
                bson!([{"$set": {"a": 5}}, {"$set": {"a": {"$add": ["$a", 1]}}}]),
                doc! {"_id": 1, "a": 6, "b": {"c": 1, "d": 2}, "arr": [{"x": 1}, 5, [{"x": 2}]], "s": 3},
            ),
            // Every expression of one stage sees the stage's input document.
            (
                bson!([{"$set": {"a": 10, "c": "$a"}}]),
                doc! {"_id": 1, "a": 10, "b": {"c": 1, "d": 2}, "arr": [{"x": 1}, 5, [{"x": 2}]], "s": 3, "c": 1},
            ),
        ];
        for (pipeline, expected) in cases {
            assert_eq!(
                one(pipeline.clone(), input.clone()),
                expected,
                "{pipeline:?}"
            );
        }
    }

    #[test]
    fn project_inclusion_exclusion_and_computed() {
        let input = doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "arr": [{"x": 1, "y": 2}, 5, [{"x": 3, "y": 4}]], "s": "t"};
        let cases: Vec<(Bson, Document)> = vec![
            (bson!({"a": 1}), doc! {"_id": 1, "a": 1}),
            (bson!({"a": true, "_id": 0}), doc! {"a": 1}),
            (bson!({"s": 1, "a": 1}), doc! {"_id": 1, "a": 1, "s": "t"}),
            (bson!({"b.c": 1}), doc! {"_id": 1, "b": {"c": 1}}),
            (bson!({"b": {"d": 1}}), doc! {"_id": 1, "b": {"d": 2}}),
            (
                bson!({"arr.x": 1}),
                doc! {"_id": 1, "arr": [{"x": 1}, [{"x": 3}]]},
            ),
            (
                bson!({"a": 0}),
                doc! {"_id": 1, "b": {"c": 1, "d": 2}, "arr": [{"x": 1, "y": 2}, 5, [{"x": 3, "y": 4}]], "s": "t"},
            ),
            (
                bson!({"_id": 0}),
                doc! {"a": 1, "b": {"c": 1, "d": 2}, "arr": [{"x": 1, "y": 2}, 5, [{"x": 3, "y": 4}]], "s": "t"},
            ),
            (
                bson!({"b.c": 0, "arr.y": 0, "_id": 0, "s": false}),
                doc! {"a": 1, "b": {"d": 2}, "arr": [{"x": 1}, 5, [{"x": 3}]]},
            ),
            (bson!({"_id": 1}), doc! {"_id": 1}),
            (bson!({"z": "$a", "a": 1}), doc! {"_id": 1, "a": 1, "z": 1}),
            (
                bson!({"z": {"$literal": 1}, "w": "lit", "_id": 0}),
                doc! {"z": 1, "w": "lit"},
            ),
            (bson!({"b.e": "$s"}), doc! {"_id": 1, "b": {"e": "t"}}),
            (bson!({"gone": "$$REMOVE", "a": 1}), doc! {"_id": 1, "a": 1}),
            (bson!({"_id": "$s"}), doc! {"_id": "t"}),
        ];
        for (spec, expected) in cases {
            assert_eq!(
                one(bson!([{"$project": spec.clone()}]), input.clone()),
                expected,
                "{spec:?}"
            );
        }
    }

    #[test]
    fn unset_and_replace_root() {
        let input = doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}};
        assert_eq!(
            one(bson!([{"$unset": "a"}]), input.clone()),
            doc! {"_id": 1, "b": {"c": 1, "d": 2}}
        );
        assert_eq!(
            one(bson!([{"$unset": ["b.c", "_id"]}]), input.clone()),
            doc! {"a": 1, "b": {"d": 2}}
        );
        assert_eq!(
            one(bson!([{"$replaceRoot": {"newRoot": "$b"}}]), input.clone()),
            doc! {"c": 1, "d": 2}
        );
        assert_eq!(
            one(
                bson!([{"$replaceWith": {"$mergeObjects": ["$b", {"a": "$a"}]}}]),
                input.clone()
            ),
            doc! {"c": 1, "d": 2, "a": 1}
        );
        let e = run(
            bson!([{"$replaceRoot": {"newRoot": "$a"}}]),
            vec![input.clone()],
        )
        .unwrap_err();
        assert_eq!(e.code, 40228);
        assert_eq!(
            e.errmsg,
            "'newRoot' expression must evaluate to an object, but resulting value was: 1. Type of resulting value: 'int'. Input document: {_id: 1, a: 1, b: {c: 1, d: 2}}"
        );
        let e = run(bson!([{"$replaceWith": "$nope"}]), vec![input]).unwrap_err();
        assert_eq!(e.code, 40228);
        assert!(e.errmsg.starts_with(
            "'replacement document' must evaluate to an object, but resulting value was: MISSING. Type of resulting value: 'missing'."
        ));
    }

    #[test]
    fn unwind() {
        let docs = vec![
            doc! {"_id": 1, "a": [1, 2]},
            doc! {"_id": 2, "a": []},
            doc! {"_id": 3, "a": null},
            doc! {"_id": 4},
            doc! {"_id": 5, "a": "x"},
            doc! {"_id": 6, "s": {"a": [7]}},
        ];
        let out = run(bson!([{"$unwind": "$a"}]), docs.clone()).unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": 1, "a": 1},
                doc! {"_id": 1, "a": 2},
                doc! {"_id": 5, "a": "x"}
            ]
        );
        let out = run(
            bson!([{"$unwind": {"path": "$a", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": true}}]),
            docs.clone(),
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": 1, "a": 1, "i": 0_i64},
                doc! {"_id": 1, "a": 2, "i": 1_i64},
                doc! {"_id": 2, "i": null},
                doc! {"_id": 3, "a": null, "i": null},
                doc! {"_id": 4, "i": null},
                doc! {"_id": 5, "a": "x", "i": null},
                doc! {"_id": 6, "s": {"a": [7]}, "i": null},
            ]
        );
        let out = run(bson!([{"$unwind": "$s.a"}]), docs).unwrap();
        assert_eq!(out, vec![doc! {"_id": 6, "s": {"a": 7}}]);
    }

    #[test]
    fn group_and_accumulators() {
        let docs = vec![
            doc! {"_id": 1, "k": "x", "v": 1, "t": "a"},
            doc! {"_id": 2, "k": "y", "v": 2.5},
            doc! {"_id": 3, "k": "x", "v": 3_i64, "t": "b"},
            doc! {"_id": 4, "k": "x", "v": null, "t": "a"},
        ];
        let out = run(
            bson!([{"$group": {
                "_id": "$k",
                "sum": {"$sum": "$v"},
                "n": {"$sum": 1},
                "count": {"$count": {}},
                "avg": {"$avg": "$v"},
                "min": {"$min": "$v"},
                "max": {"$max": "$v"},
                "first": {"$first": "$t"},
                "last": {"$last": "$t"},
                "push": {"$push": "$t"},
                "set": {"$addToSet": "$t"},
            }}]),
            docs.clone(),
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": "x", "sum": 4_i64, "n": 3, "count": 3, "avg": 2.0, "min": 1, "max": 3_i64, "first": "a", "last": "a", "push": ["a", "b", "a"], "set": ["a", "b"]},
                doc! {"_id": "y", "sum": 2.5, "n": 1, "count": 1, "avg": 2.5, "min": 2.5, "max": 2.5, "first": null, "last": null, "push": [], "set": []},
            ]
        );
        let out = run(
            bson!([{"$group": {"_id": null, "total": {"$sum": "$v"}}}]),
            docs.clone(),
        )
        .unwrap();
        assert_eq!(out, vec![doc! {"_id": null, "total": 6.5}]);
        let out = run(
            bson!([{"$group": {"_id": {"key": "$k", "t": "$t"}}}]),
            docs.clone(),
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": {"key": "x", "t": "a"}},
                doc! {"_id": {"key": "y"}},
                doc! {"_id": {"key": "x", "t": "b"}},
            ]
        );
        // Numerically equal keys share a group.
        let out = run(
            bson!([{"$group": {"_id": "$v"}}]),
            vec![doc! {"v": 1}, doc! {"v": 1.0}, doc! {}],
        )
        .unwrap();
        assert_eq!(out, vec![doc! {"_id": 1}, doc! {"_id": null}]);
        assert!(
            run(bson!([{"$group": {"_id": null, "n": {"$sum": 1}}}]), vec![])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn skip_limit_count_sort_by_count() {
        let docs: Vec<Document> = (0..5)
            .map(|i| doc! {"_id": i, "k": if i % 2 == 0 { "even" } else { "odd" }})
            .collect();
        let ids = |out: Vec<Document>| {
            out.iter()
                .map(|d| d.get_i32("_id").unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ids(run(bson!([{"$skip": 1}, {"$limit": 2}]), docs.clone()).unwrap()),
            [1, 2]
        );
        assert_eq!(
            ids(run(bson!([{"$skip": 10_i64}]), docs.clone()).unwrap()),
            Vec::<i32>::new()
        );
        assert_eq!(
            ids(run(bson!([{"$limit": 2.0}]), docs.clone()).unwrap()),
            [0, 1]
        );
        assert_eq!(
            run(bson!([{"$count": "n"}]), docs.clone()).unwrap(),
            vec![doc! {"n": 5}]
        );
        assert!(run(bson!([{"$count": "n"}]), vec![]).unwrap().is_empty());
        assert_eq!(
            run(bson!([{"$sortByCount": "$k"}]), docs).unwrap(),
            vec![
                doc! {"_id": "even", "count": 3},
                doc! {"_id": "odd", "count": 2}
            ]
        );
    }

    #[test]
    fn stage_parse_errors() {
        let cases: Vec<(Bson, i32, &str)> = vec![
            (
                bson!([{"$foo": 1}]),
                40324,
                "Unrecognized pipeline stage name: '$foo'",
            ),
            (
                bson!([{"$set": {}, "$unset": "a"}]),
                40323,
                "A pipeline stage specification object must contain exactly one field.",
            ),
            (
                bson!([{}]),
                40323,
                "A pipeline stage specification object must contain exactly one field.",
            ),
            (
                bson!([1]),
                14,
                "Each element of the 'pipeline' array must be an object",
            ),
            (
                bson!([{"$project": {}}]),
                51272,
                "Invalid $project :: caused by :: projection specification must have at least one field",
            ),
            (
                bson!([{"$project": 1}]),
                15969,
                "$project specification must be an object",
            ),
            (
                bson!([{"$project": {"a": 1, "b": 0}}]),
                31254,
                "Invalid $project :: caused by :: Cannot do exclusion on field b in inclusion projection",
            ),
            (
                bson!([{"$project": {"a": 0, "b": 1}}]),
                31253,
                "Invalid $project :: caused by :: Cannot do inclusion on field b in exclusion projection",
            ),
            (
                bson!([{"$project": {"_id": 1, "b": 0}}]),
                31254,
                "Invalid $project :: caused by :: Cannot do exclusion on field b in inclusion projection",
            ),
            (
                bson!([{"$project": {"a": 0, "b": "$x"}}]),
                31252,
                "Invalid $project :: caused by :: Cannot use expression other than $meta in exclusion projection",
            ),
            (
                bson!([{"$project": {"a": {}}}]),
                51270,
                "Invalid $project :: caused by :: An empty sub-projection is not a valid value. Found empty object at path a",
            ),
            (
                bson!([{"$project": {"a": 1, "a.b": 1}}]),
                31250,
                "Invalid specification :: caused by :: Path collision at a.b",
            ),
            (
                bson!([{"$project": {"$a": 1}}]),
                16410,
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
            ),
            (
                bson!([{"$project": {"a": {"$add": [1], "b": 1}}}]),
                40181,
                "Invalid $project :: caused by :: an expression specification must contain exactly one field, the name of the expression. Found 2 fields in { $add: [ 1 ], b: 1 }, while parsing object { a: { $add: [ 1 ], b: 1 } }",
            ),
            (
                bson!([{"$set": 1}]),
                40272,
                "$set specification stage must be an object, got int",
            ),
            (
                bson!([{"$set": {"a": {"$foo": 1}}}]),
                168,
                "Unrecognized expression '$foo'",
            ),
            (
                bson!([{"$set": {"a..b": 1}}]),
                15998,
                "FieldPath field names may not be empty strings.",
            ),
            (
                bson!([{"$unset": 1}]),
                31002,
                "$unset specification must be a string or an array",
            ),
            (
                bson!([{"$unset": []}]),
                31119,
                "$unset specification must be a string or an array with at least one field",
            ),
            (
                bson!([{"$unset": ["a", 1]}]),
                31120,
                "$unset specification must be a string or an array containing only string values",
            ),
            (
                bson!([{"$replaceRoot": {"newRoot": "$a", "x": 1}}]),
                40415,
                "BSON field '$replaceRoot.x' is an unknown field.",
            ),
            (
                bson!([{"$replaceRoot": {}}]),
                40414,
                "BSON field '$replaceRoot.newRoot' is missing but a required field",
            ),
            (
                bson!([{"$unwind": 1}]),
                15981,
                "expected either a string or an object as specification for $unwind stage, got int",
            ),
            (
                bson!([{"$unwind": "a"}]),
                28818,
                "path option to $unwind stage should be prefixed with a '$': a",
            ),
            (
                bson!([{"$unwind": {}}]),
                28812,
                "no path specified to $unwind stage",
            ),
            (
                bson!([{"$unwind": {"path": "$a", "x": 1}}]),
                28811,
                "unrecognized option to $unwind stage: x",
            ),
            (
                bson!([{"$unwind": {"path": "$a", "preserveNullAndEmptyArrays": 1}}]),
                28809,
                "expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage, got int",
            ),
            (
                bson!([{"$group": {"n": {"$sum": 1}}}]),
                15955,
                "a group specification must include an _id",
            ),
            (
                bson!([{"$group": {"_id": null, "n": {"$foo": 1}}}]),
                15952,
                "unknown group operator '$foo'",
            ),
            (
                bson!([{"$group": {"_id": null, "n": 1}}]),
                40234,
                "The field 'n' must be an accumulator object",
            ),
            (
                bson!([{"$group": {"_id": null, "n": {"$sum": 1, "$avg": 1}}}]),
                40238,
                "The field 'n' must specify one accumulator",
            ),
            (
                bson!([{"$group": {"_id": null, "a.b": {"$sum": 1}}}]),
                40235,
                "The field name 'a.b' cannot contain '.'",
            ),
            (
                bson!([{"$group": {"_id": null, "n": {"$sum": [1, 2]}}}]),
                40237,
                "The $sum accumulator is a unary operator",
            ),
            (bson!([{"$limit": 0}]), 15958, "the limit must be positive"),
            (
                bson!([{"$limit": "x"}]),
                5107201,
                "invalid argument to $limit stage: Expected a number in: $limit: \"x\"",
            ),
            (
                bson!([{"$limit": 2.5}]),
                5107201,
                "invalid argument to $limit stage: Expected an integer: $limit: 2.5",
            ),
            (
                bson!([{"$limit": -2.0}]),
                5107201,
                "invalid argument to $limit stage: Expected a non-negative number in: $limit: -2.0",
            ),
            (
                bson!([{"$skip": -1}]),
                5107200,
                "invalid argument to $skip stage: Expected a non-negative number in: $skip: -1",
            ),
            (
                bson!([{"$count": ""}]),
                40156,
                "the count field must be a non-empty string",
            ),
            (
                bson!([{"$count": "$n"}]),
                40158,
                "the count field cannot be a $-prefixed path",
            ),
            (
                bson!([{"$count": "a.b"}]),
                40160,
                "the count field cannot contain '.'",
            ),
            (
                bson!([{"$sortByCount": "k"}]),
                40148,
                "the sortByCount field must be defined as a $-prefixed path or an expression",
            ),
            (
                bson!([{"$match": 1}]),
                15959,
                "the match filter must be an expression in an object",
            ),
            (
                bson!([{"$sort": 1}]),
                15973,
                "the $sort key specification must be an object",
            ),
        ];
        for (pipeline, code, msg) in cases {
            assert_eq!(
                parse_err(pipeline.clone()),
                (code, msg.to_string()),
                "{pipeline:?}"
            );
        }
    }

    #[test]
    fn update_pipelines_allow_only_update_stages() {
        for stage in [
            bson!({"$match": {}}),
            bson!({"$group": {"_id": null}}),
            bson!({"$limit": 1}),
            bson!({"$unwind": "$a"}),
            bson!({"$out": "x"}),
            bson!({"$merge": {"into": "x"}}),
        ] {
            let name = stage.as_document().unwrap().keys().next().unwrap().clone();
            let e = Pipeline::parse_update(&[stage]).unwrap_err();
            assert_eq!(
                (e.code, e.errmsg),
                (
                    72,
                    format!("{name} is not allowed to be used within an update")
                )
            );
        }
        let e = Pipeline::parse_update(&[bson!({"$nope": 1})]).unwrap_err();
        assert_eq!(e.code, 40324);
        for ok in [
            bson!({"$set": {"a": 1}}),
            bson!({"$addFields": {"a": 1}}),
            bson!({"$project": {"a": 1}}),
            bson!({"$unset": "a"}),
            bson!({"$replaceRoot": {"newRoot": {"a": 1}}}),
            bson!({"$replaceWith": {"a": 1}}),
        ] {
            assert!(
                Pipeline::parse_update(std::slice::from_ref(&ok)).is_ok(),
                "{ok:?}"
            );
        }
    }

    #[test]
    fn update_pipelines_keep_id() {
        let doc = doc! {"_id": 7, "a": 1};
        let apply = |p: Bson| {
            Pipeline::parse_update(&stages(p))
                .unwrap()
                .apply_update(&doc, &ctx())
        };
        assert_eq!(
            apply(bson!([{"$replaceWith": {"b": 2}}])).unwrap(),
            doc! {"_id": 7, "b": 2}
        );
        assert_eq!(
            apply(bson!([{"$unset": "_id"}])).unwrap(),
            doc! {"_id": 7, "a": 1}
        );
        assert_eq!(
            apply(bson!([{"$project": {"_id": 0, "a": 1}}])).unwrap(),
            doc! {"_id": 7, "a": 1}
        );
        assert_eq!(
            apply(bson!([{"$set": {"_id": 7.0}}])).unwrap(),
            doc! {"_id": 7.0, "a": 1}
        );
        let e = apply(bson!([{"$set": {"_id": 8}}])).unwrap_err();
        assert_eq!(
            (e.code, e.errmsg.as_str()),
            (
                66,
                "After applying the update, the (immutable) field '_id' was found to have been altered to _id: 8"
            )
        );
        assert_eq!(apply(bson!([])).unwrap(), doc);
        // Documents without _id (upsert seeds) are left as produced.
        let seed = Pipeline::parse_update(&stages(bson!([{"$set": {"x": 1}}])))
            .unwrap()
            .apply_update(&doc! {}, &ctx());
        assert_eq!(seed.unwrap(), doc! {"x": 1});
    }

    #[test]
    fn let_variables_are_checked_at_parse_time_when_given() {
        let vars = doc! {"ttl": 5};
        let ok = stages(bson!([{"$set": {"a": "$$ttl"}}]));
        let p = Pipeline::parse_update_with_let(&ok, &vars).unwrap();
        let mut c = ctx();
        c.vars = vars.clone();
        assert_eq!(
            p.apply_update(&doc! {"_id": 1}, &c).unwrap(),
            doc! {"_id": 1, "a": 5}
        );
        let bad = stages(bson!([{"$set": {"a": "$$tll"}}]));
        let e = Pipeline::parse_update_with_let(&bad, &vars).unwrap_err();
        assert_eq!(
            (e.code, e.errmsg.as_str()),
            (17276, "Use of undefined variable: tll")
        );
        // Without the let variables the check happens at evaluation.
        let p = Pipeline::parse_update(&bad).unwrap();
        assert_eq!(
            p.apply_update(&doc! {"_id": 1}, &c).unwrap_err().code,
            17276
        );
    }

    #[test]
    fn evaluation_errors_propagate_from_stages() {
        let e = run(
            bson!([{"$set": {"a": {"$size": "$a"}}}]),
            vec![doc! {"a": 1}],
        )
        .unwrap_err();
        assert_eq!(e.code, 17124);
        let e = run(
            bson!([{"$group": {"_id": null, "s": {"$sum": {"$divide": [1, 0]}}}}]),
            vec![doc! {}],
        )
        .unwrap_err();
        assert_eq!(e.code, 2);
    }

    #[test]
    fn match_filters_documents() {
        let docs = vec![
            doc! {"_id": 1, "a": 1},
            doc! {"_id": 2, "a": 5},
            doc! {"_id": 3},
        ];
        let out = run(bson!([{"$match": {"a": {"$gt": 2}}}]), docs.clone()).unwrap();
        assert_eq!(out, vec![doc! {"_id": 2, "a": 5}]);
        let out = run(bson!([{"$match": {"$expr": {"$lt": ["$a", 2]}}}]), docs).unwrap();
        assert_eq!(out, vec![doc! {"_id": 1, "a": 1}, doc! {"_id": 3}]);
    }

    #[test]
    fn sort_orders_documents_stably() {
        let docs = vec![
            doc! {"_id": 1, "a": 2},
            doc! {"_id": 2, "a": 1},
            doc! {"_id": 3, "a": 2},
            doc! {"_id": 4},
        ];
        let out = run(bson!([{"$sort": {"a": -1}}]), docs).unwrap();
        let ids: Vec<i32> = out.iter().map(|d| d.get_i32("_id").unwrap()).collect();
        assert_eq!(ids, [1, 3, 2, 4]);
    }
}
