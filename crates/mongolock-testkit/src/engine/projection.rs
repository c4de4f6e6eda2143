//! Find projections (`{a: 1}`, `{a: 0}`, dotted paths, `$slice`, `$elemMatch`, expressions).

use bson::Document;

use super::{CommandError, EvalContext, Result};

/// A parsed find/findAndModify projection.
#[derive(Debug, Clone)]
pub struct Projection {
    _raw: Document,
}

impl Projection {
    /// Parses a projection document.
    pub fn parse(spec: &Document) -> Result<Projection> {
        Ok(Projection { _raw: spec.clone() })
    }

    /// Applies the projection to one document.
    pub fn apply(&self, _doc: &Document, _ctx: &EvalContext) -> Result<Document> {
        Err(CommandError::internal("projection is not implemented yet"))
    }
}
