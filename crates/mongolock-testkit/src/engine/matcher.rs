//! Query filters (`{a: {$gt: 1}}`, `$and`, `$elemMatch`, `$expr`, ...) with dotted paths
//! through arrays.

use bson::{Bson, Document};

use super::{CommandError, EvalContext, Result};

/// A parsed query filter.
#[derive(Debug, Clone)]
pub struct Matcher {
    _raw: Document,
}

/// Extra facts about a successful match.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MatchDetails {
    /// For the positional update operator `$`: the index of the array element the filter
    /// matched, for the first array the filter traversed.
    pub elem_match_index: Option<usize>,
}

impl Matcher {
    /// Parses a filter document; unknown operators fail with mongod's error.
    pub fn parse(filter: &Document) -> Result<Matcher> {
        Ok(Matcher {
            _raw: filter.clone(),
        })
    }

    /// Whether the filter uses `$expr` anywhere (forbidden in upsert filters).
    pub fn has_expr(&self) -> bool {
        false
    }

    /// Whether `doc` matches.
    pub fn matches(&self, doc: &Document, ctx: &EvalContext) -> Result<bool> {
        Ok(self.match_details(doc, ctx)?.is_some())
    }

    /// `Some(details)` if `doc` matches, `None` if not.
    pub fn match_details(
        &self,
        _doc: &Document,
        _ctx: &EvalContext,
    ) -> Result<Option<MatchDetails>> {
        Err(CommandError::internal(
            "query matching is not implemented yet",
        ))
    }
}

/// A condition on a single value, as in `$elemMatch` and `$pull`: an operator document
/// (`{$gte: 5}`), a query on a sub-document (`{a: 1}`), or a plain value (equality).
#[derive(Debug, Clone)]
pub struct ValueMatcher {
    _raw: Bson,
}

impl ValueMatcher {
    /// Parses a condition.
    pub fn parse(condition: &Bson) -> Result<ValueMatcher> {
        Ok(ValueMatcher {
            _raw: condition.clone(),
        })
    }

    /// Whether `value` satisfies the condition.
    pub fn matches(&self, _value: &Bson, _ctx: &EvalContext) -> Result<bool> {
        Err(CommandError::internal(
            "value matching is not implemented yet",
        ))
    }
}
