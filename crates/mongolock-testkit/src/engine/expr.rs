//! Aggregation expressions (`$add`, `$cond`, `$$NOW`, field paths, ...).
//!
//! Interface contract: `Expr::parse` validates the whole expression up front (unknown
//! operators fail with mongod's code and message); `Expr::eval` returns `Ok(None)` for a
//! missing value (a missing field path or `$$REMOVE`).

use bson::{Bson, Document};

use super::{CommandError, EvalContext, Result};

/// A parsed aggregation expression.
#[derive(Debug, Clone)]
pub struct Expr {
    _raw: Bson,
}

impl Expr {
    /// Parses an expression (a literal, a `"$path"`, a `"$$var"`, an operator document or an
    /// object of expressions).
    pub fn parse(value: &Bson) -> Result<Expr> {
        Ok(Expr {
            _raw: value.clone(),
        })
    }

    /// Evaluates against `root` (`$$ROOT` and `$$CURRENT`). `Ok(None)` means missing.
    pub fn eval(&self, _root: &Document, _ctx: &EvalContext) -> Result<Option<Bson>> {
        Err(CommandError::internal(
            "aggregation expressions are not implemented yet",
        ))
    }
}
