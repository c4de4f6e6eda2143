//! Aggregation pipelines: `aggregate` stages and the stages allowed in pipeline updates.

use bson::{Bson, Document};

use super::{CommandError, EvalContext, Result};

/// A parsed aggregation pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    _raw: Vec<Document>,
}

impl Pipeline {
    /// Parses an `aggregate` pipeline (stages the command layer handles itself, such as
    /// `$changeStream`, are removed before this is called).
    pub fn parse(stages: &[Bson]) -> Result<Pipeline> {
        Err(CommandError::internal(format!(
            "aggregation is not implemented yet ({})",
            stages.len()
        )))
    }

    /// Parses the pipeline of a pipeline-style update: only `$addFields`/`$set`,
    /// `$project`/`$unset` and `$replaceRoot`/`$replaceWith` are allowed.
    pub fn parse_update(stages: &[Bson]) -> Result<Pipeline> {
        Err(CommandError::internal(format!(
            "pipeline updates are not implemented yet ({})",
            stages.len()
        )))
    }

    /// Runs the pipeline over `input`.
    pub fn run(&self, _input: Vec<Document>, _ctx: &EvalContext) -> Result<Vec<Document>> {
        Err(CommandError::internal("aggregation is not implemented yet"))
    }

    /// Runs an update pipeline on one document and returns the new document.
    pub fn apply_update(&self, _doc: &Document, _ctx: &EvalContext) -> Result<Document> {
        Err(CommandError::internal(
            "pipeline updates are not implemented yet",
        ))
    }
}
