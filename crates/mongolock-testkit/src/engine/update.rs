//! Updates: operator documents (`$set`, `$inc`, `$push`, positional `$`, `$[]`, `$[id]`, ...),
//! replacements and aggregation-pipeline updates, plus upsert seeding.

use bson::{Bson, Document};

use super::{CommandError, EvalContext, Result, matcher::MatchDetails};

/// A parsed update (`u` of an update statement, `update` of findAndModify).
#[derive(Debug, Clone)]
pub enum Update {
    /// Placeholder until the update engine lands.
    Unparsed(Bson),
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

impl Update {
    /// Parses an update; `array_filters` are the statement's `arrayFilters`.
    pub fn parse(update: &Bson, array_filters: Option<&[Bson]>) -> Result<Update> {
        let _ = array_filters;
        Ok(Update::Unparsed(update.clone()))
    }

    /// Whether this is a replacement document (no operators, not a pipeline).
    pub fn is_replacement(&self) -> bool {
        false
    }

    /// Applies the update to `doc` in place; returns whether the document changed.
    /// `_id` may not change (code 66).
    pub fn apply(&self, _doc: &mut Document, _ctx: &UpdateContext<'_>) -> Result<bool> {
        Err(CommandError::internal("updates are not implemented yet"))
    }
}

/// The document an upsert starts from: the filter's equality predicates (for operator and
/// pipeline updates), or only `_id` (for replacements).
pub fn upsert_seed(filter: &Document, replacement: bool) -> Result<Document> {
    let _ = (filter, replacement);
    Err(CommandError::internal(
        "upsert seeding is not implemented yet",
    ))
}
