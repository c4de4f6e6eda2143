//! `find`, `count` and `distinct`.

use bson::{Bson, Document, doc};

use super::args;
use super::context::Ctx;
use super::write::{check_hint, unsupported};
use crate::engine::EvalContext;
use crate::engine::collation;
use crate::engine::collection::Collection;
use crate::engine::compare::values_equal;
use crate::engine::error::{CommandError, Result};
use crate::engine::matcher::{MatchDetails, Matcher};
use crate::engine::projection::Projection;
use crate::engine::sort::SortSpec;

/// The documents of `coll` that match, in record order (reversed for `{$natural: -1}`) or
/// sorted (stably, as mongod's sort is), each with what the filter matched.
pub fn select(
    coll: &Collection,
    filter: &Document,
    sort: Option<&SortSpec>,
    eval: &EvalContext,
) -> Result<Vec<(Document, MatchDetails)>> {
    let mut matcher = Matcher::parse(filter)?;
    matcher.optimize(eval)?;
    let mut out = Vec::new();
    for record in coll.candidates(filter) {
        eval.check_deadline()?;
        let doc = coll.get(record).expect("candidate records exist");
        if let Some(details) = matcher.match_details(doc, eval)? {
            out.push((doc.clone(), details));
        }
    }
    match sort.map(|s| (s, s.natural())) {
        Some((_, Some(false))) => out.reverse(),
        Some((sort, None)) => out.sort_by(|a, b| sort.compare(&a.0, &b.0)),
        None | Some((_, Some(true))) => {}
    }
    Ok(out)
}

/// Applies a find or findAndModify projection, adding mongod's prefix to positional errors.
pub fn project(
    projection: &Projection,
    doc: &Document,
    details: &MatchDetails,
    eval: &EvalContext,
    command: &str,
) -> Result<Document> {
    projection
        .apply_matched(doc, eval, Some(details))
        .map_err(|mut error| {
            if matches!(error.code, 51246 | 51247) {
                error.errmsg = format!(
                    "Executor error during {command} command :: caused by :: {}",
                    error.errmsg
                );
            }
            error
        })
}

const FIND_FIELDS: &[&str] = &[
    "filter",
    "sort",
    "projection",
    "skip",
    "limit",
    "batchSize",
    "singleBatch",
    "hint",
    "let",
    "collation",
    "allowDiskUse",
    "noCursorTimeout",
    "allowPartialResults",
    "tailable",
    "awaitData",
    "returnKey",
    "showRecordId",
    "min",
    "max",
    "oplogReplay",
];

/// `find`.
pub fn find(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "find", FIND_FIELDS)?;
    let name = args::collection_name(cmd, "find")?;
    for option in ["returnKey", "showRecordId", "min", "max", "oplogReplay"] {
        if cmd.contains_key(option) {
            return Err(unsupported(option));
        }
    }
    if args::opt_bool(cmd, "find", "tailable")?.unwrap_or(false)
        || args::opt_bool(cmd, "find", "awaitData")?.unwrap_or(false)
    {
        return Err(CommandError::bad_value(
            "error processing query: tailable cursor requested on non capped collection",
        ));
    }
    collation::check(cmd.get("collation"), "find.collation")?;
    let filter = args::opt_document(cmd, "find", "filter")?
        .cloned()
        .unwrap_or_default();
    let sort = args::opt_document(cmd, "find", "sort")?
        .map(SortSpec::parse)
        .transpose()?;
    let projection = args::opt_document(cmd, "find", "projection")?
        .filter(|p| !p.is_empty())
        .map(|p| Projection::parse_for_query(p, &filter))
        .transpose()?;
    let skip = args::opt_non_negative(cmd, "find", "skip")?.unwrap_or(0) as usize;
    let limit = args::opt_non_negative(cmd, "find", "limit")?.filter(|l| *l > 0);
    let batch_size = args::opt_non_negative(cmd, "find", "batchSize")?.map(|n| n as usize);
    let single_batch = args::opt_bool(cmd, "find", "singleBatch")?.unwrap_or(false);
    let eval = ctx.eval_context(cmd, "find")?;
    let ns = format!("{}.{name}", ctx.db);
    let results = match super::views::read_source(ctx, &name)? {
        None => {
            Matcher::parse(&filter)?.optimize(&eval)?;
            Vec::new()
        }
        Some(coll) => {
            let coll = ctx.lock(&coll)?;
            check_hint(Some(&coll), cmd.get("hint"))?;
            select(&coll, &filter, sort.as_ref(), &eval)?
        }
    };
    let mut results: Vec<(Document, MatchDetails)> = results.into_iter().skip(skip).collect();
    if let Some(limit) = limit {
        results.truncate(limit as usize);
    }
    let results: Vec<Document> = match &projection {
        Some(projection) => results
            .iter()
            .map(|(doc, details)| project(projection, doc, details, &eval, "find"))
            .collect::<Result<_>>()?,
        None => results.into_iter().map(|(doc, _)| doc).collect(),
    };
    Ok(ctx
        .state
        .cursors
        .first_batch(&ns, results, batch_size, single_batch))
}

/// `count`.
pub fn count(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(
        cmd,
        "count",
        &["query", "limit", "skip", "hint", "collation", "fields"],
    )?;
    let name = args::collection_name(cmd, "count")?;
    collation::check(cmd.get("collation"), "count.collation")?;
    let filter = args::opt_document(cmd, "count", "query")?
        .cloned()
        .unwrap_or_default();
    let skip = args::opt_non_negative(cmd, "count", "skip")?.unwrap_or(0) as u64;
    // A negative limit means the same as its absolute value for count.
    let limit = args::opt_i64(cmd, "count", "limit")?
        .map(i64::unsigned_abs)
        .filter(|l| *l > 0);
    let mut eval = EvalContext::at(ctx.now);
    eval.deadline = ctx.deadline;
    let matched = match super::views::read_source(ctx, &name)? {
        None => 0,
        Some(coll) => {
            let coll = ctx.lock(&coll)?;
            check_hint(Some(&coll), cmd.get("hint"))?;
            if filter.is_empty() {
                coll.len() as u64
            } else {
                select(&coll, &filter, None, &eval)?.len() as u64
            }
        }
    };
    let mut n = matched.saturating_sub(skip);
    if let Some(limit) = limit {
        n = n.min(limit);
    }
    Ok(doc! {"n": i32::try_from(n).map_or(Bson::Int64(n as i64), Bson::Int32)})
}

/// Values at a dotted path, with arrays flattened one level per step (as `distinct` sees them).
fn distinct_values(value: &Bson, path: &[&str], out: &mut Vec<Bson>) {
    match (value, path.split_first()) {
        (Bson::Array(items), None) => out.extend(items.iter().cloned()),
        (v, None) => out.push(v.clone()),
        (Bson::Document(d), Some((first, rest))) => {
            if let Some(v) = d.get(*first) {
                distinct_values(v, rest, out);
            }
        }
        (Bson::Array(items), Some(_)) => {
            for item in items {
                if matches!(item, Bson::Document(_)) {
                    distinct_values(item, path, out);
                }
            }
        }
        _ => {}
    }
}

/// `distinct`.
pub fn distinct(ctx: &Ctx<'_>, cmd: &Document) -> Result<Document> {
    args::check_fields(cmd, "distinct", &["key", "query", "collation", "hint"])?;
    let name = args::collection_name(cmd, "distinct")?;
    collation::check(cmd.get("collation"), "distinct.collation")?;
    let key = match cmd.get("key") {
        Some(Bson::String(key)) => key.clone(),
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'distinct.key' is the wrong type, expected type 'string'",
            ));
        }
        None => return Err(args::missing("distinct", "key")),
    };
    let filter = args::opt_document(cmd, "distinct", "query")?
        .cloned()
        .unwrap_or_default();
    let mut eval = EvalContext::at(ctx.now);
    eval.deadline = ctx.deadline;
    let docs = match super::views::read_source(ctx, &name)? {
        None => Vec::new(),
        Some(coll) => {
            let coll = ctx.lock(&coll)?;
            check_hint(Some(&coll), cmd.get("hint"))?;
            select(&coll, &filter, None, &eval)?
        }
    };
    let path: Vec<&str> = key.split('.').collect();
    let mut values: Vec<Bson> = Vec::new();
    for (doc, _) in &docs {
        let mut found = Vec::new();
        distinct_values(&Bson::Document(doc.clone()), &path, &mut found);
        for value in found {
            if !values
                .iter()
                .any(|v| values_equal(v, &value) && v.element_type() == value.element_type())
            {
                values.push(value);
            }
        }
    }
    values.sort_by(crate::engine::compare::compare);
    Ok(doc! {"values": values})
}
