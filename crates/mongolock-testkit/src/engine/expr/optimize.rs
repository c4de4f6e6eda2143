//! Constant folding, as mongod's `Expression::optimize()` does it
//! (`src/mongo/db/pipeline/expression.cpp`).
//!
//! mongod optimizes an expression once, before it evaluates it for any document: the
//! expression of a query's `$expr` (`ExprMatchExpression::getOptimizer`,
//! `src/mongo/db/matcher/expression_expr.cpp`, when the query is canonicalized: `find`,
//! `update`, `delete`, `findAndModify`, `count`, `distinct`) and every stage of an `aggregate`
//! pipeline (`Pipeline::optimizePipeline`). A pipeline-style update is not optimized
//! (`src/mongo/db/update/pipeline_executor.cpp` parses its pipeline and never calls it), so
//! its expressions are evaluated lazily, document by document.
//!
//! What optimizing does, for the expressions the emulator has:
//! - Every sub-expression is optimized first, in every branch, whether or not a branch would
//!   be taken for a document.
//! - An operator whose operands are all constant is evaluated on the spot and becomes a
//!   constant (`ExpressionNary::optimize`, and the same for `$convert` and its `$toInt`
//!   family, `$dateToString`, `$dateAdd`/`$dateSubtract`, `$getField`/`$setField`,
//!   `$ifNull`, object and array literals): an error it raises (a conversion failing,
//!   `$add` of a string) fails the command, even if no document would ever reach it.
//! - Constants are `$literal`s and other literal values, `$$REMOVE` (missing), `$$NOW`,
//!   `$$CLUSTER_TIME` where it is defined, and the command's `let` variables. Field paths,
//!   `$rand` and variables bound by `$let`, `$map`, `$filter` and `$reduce` are not.
//! - Associative operators (`$add`, `$multiply`, `$and`, `$or`, `$concat`, `$concatArrays`,
//!   `$setUnion`, and `$sum`/`$max`/`$min` of more than one operand) absorb nested uses of
//!   themselves and evaluate runs of constant operands; commutative ones (all of these but
//!   `$concat` and `$concatArrays`) first move their constants to the end and evaluate them
//!   together.
//! - `$and` whose constant operands are false is `false`, `$or` whose constant operands are
//!   true is `true` (`ExpressionAnd::optimize`, `ExpressionOr::optimize`), whatever the
//!   other operands would do; a true (false) constant is dropped from `$and` (`$or`).
//! - `$cond` with a constant condition is the branch it selects (`ExpressionCond::optimize`);
//!   `$switch`, `$let`, `$map`, `$filter` and `$reduce` only optimize their parts.

use bson::{Bson, Document};

use super::{Env, Node, Op, Var, truthy};
use crate::engine::{EvalContext, Result};

/// The value of a constant node: `Some(Some(value))`, `Some(None)` for a constant missing
/// value (`$$REMOVE`); `None` when the node is not a constant.
fn constant(node: &Node) -> Option<Option<&Bson>> {
    match node {
        Node::Const(v) => Some(Some(v)),
        Node::Var(Var::Remove, _) => Some(None),
        _ => None,
    }
}

fn is_constant(node: &Node) -> bool {
    constant(node).is_some()
}

/// A node for a folded value (missing as `$$REMOVE`).
fn from_value(value: Option<Bson>) -> Node {
    match value {
        Some(v) => Node::Const(v),
        None => Node::Var(Var::Remove, Vec::new()),
    }
}

/// An n-ary expression whose operands can be regrouped: an operator, `$and` or `$or`.
#[derive(Clone, Copy, PartialEq)]
enum Nary {
    Op(Op),
    And,
    Or,
}

impl Nary {
    fn make(self, args: Vec<Node>) -> Node {
        match self {
            Nary::Op(op) => Node::Op(op, args),
            Nary::And => Node::And(args),
            Nary::Or => Node::Or(args),
        }
    }

    /// The operands of `node` when it is this same expression.
    fn operands_of(self, node: &Node) -> Option<&Vec<Node>> {
        match (self, node) {
            (Nary::Op(op), Node::Op(other, args)) if op == *other => Some(args),
            (Nary::And, Node::And(args)) | (Nary::Or, Node::Or(args)) => Some(args),
            _ => None,
        }
    }

    /// `(associative, commutative)` with `operands` operands (`isAssociative()` and
    /// `isCommutative()` in mongod: `$sum`, `$max` and `$min` of a single operand are not
    /// associative, as it may be an array of values).
    fn algebra(self, operands: usize) -> (bool, bool) {
        match self {
            Nary::And | Nary::Or => (true, true),
            Nary::Op(Op::Add | Op::Multiply | Op::SetUnion) => (true, true),
            Nary::Op(Op::Sum | Op::Max | Op::Min) => (operands > 1, operands > 1),
            Nary::Op(Op::Concat | Op::ConcatArrays) => (true, false),
            Nary::Op(_) => (false, false),
        }
    }
}

/// Folds constant sub-expressions of one expression for one command.
pub(super) struct Folder<'c> {
    ctx: &'c EvalContext,
    /// Variables bound by enclosing `$let`, `$map`, `$filter` and `$reduce`: not constants.
    bound: Vec<String>,
}

impl<'c> Folder<'c> {
    pub(super) fn new(ctx: &'c EvalContext) -> Self {
        Self {
            ctx,
            bound: Vec::new(),
        }
    }

    /// Evaluates a node whose inputs are all constants.
    fn evaluate(&self, node: &Node) -> Result<Node> {
        let empty = Document::new();
        let mut env = Env {
            root: &empty,
            ctx: self.ctx,
            locals: Vec::new(),
        };
        Ok(from_value(env.eval(node)?))
    }

    fn all(&mut self, nodes: Vec<Node>) -> Result<Vec<Node>> {
        nodes.into_iter().map(|n| self.fold(n)).collect()
    }

    /// [`Folder::fold`] of a node that lives boxed in the tree and goes back boxed.
    #[allow(clippy::boxed_local)]
    fn boxed(&mut self, node: Box<Node>) -> Result<Box<Node>> {
        Ok(Box::new(self.fold(*node)?))
    }

    fn with_bound<T>(
        &mut self,
        names: &[&str],
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let before = self.bound.len();
        self.bound.extend(names.iter().map(|n| n.to_string()));
        let r = f(self);
        self.bound.truncate(before);
        r
    }

    /// The optimized form of `node`.
    pub(super) fn fold(&mut self, node: Node) -> Result<Node> {
        match node {
            Node::Const(_) | Node::Path(_) => Ok(node),
            Node::Var(Var::Remove, _) => Ok(Node::Var(Var::Remove, Vec::new())),
            Node::Var(Var::Now, _) => self.evaluate(&node),
            Node::Var(Var::ClusterTime, _) if self.ctx.cluster_time.is_some() => {
                self.evaluate(&node)
            }
            Node::Var(Var::User(ref name), _)
                if !self.bound.contains(name) && self.ctx.vars.contains_key(name) =>
            {
                self.evaluate(&node)
            }
            Node::Var(..) => Ok(node),
            Node::Object(fields) => {
                let fields = fields
                    .into_iter()
                    .map(|(k, v)| Ok((k, self.fold(v)?)))
                    .collect::<Result<Vec<_>>>()?;
                let folded = Node::Object(fields);
                match &folded {
                    Node::Object(f) if f.iter().all(|(_, v)| is_constant(v)) => {
                        self.evaluate(&folded)
                    }
                    _ => Ok(folded),
                }
            }
            Node::Array(items) => {
                let items = self.all(items)?;
                if items.iter().all(is_constant) {
                    self.evaluate(&Node::Array(items))
                } else {
                    Ok(Node::Array(items))
                }
            }
            Node::Op(Op::Rand, args) => Ok(Node::Op(Op::Rand, args)),
            Node::Op(op, args) => self.nary(Nary::Op(op), args),
            Node::And(args) => self.and_or(Nary::And, args),
            Node::Or(args) => self.and_or(Nary::Or, args),
            Node::IfNull(args) => {
                let args = self.all(args)?;
                if args.iter().all(is_constant) {
                    self.evaluate(&Node::IfNull(args))
                } else {
                    Ok(Node::IfNull(args))
                }
            }
            Node::Cond(parts) => {
                let [i, t, e] = *parts;
                let (i, t, e) = (self.fold(i)?, self.fold(t)?, self.fold(e)?);
                Ok(match constant(&i) {
                    Some(value) if truthy(value) => t,
                    Some(_) => e,
                    None => Node::Cond(Box::new([i, t, e])),
                })
            }
            Node::Switch { branches, default } => {
                let default = default.map(|d| self.boxed(d)).transpose()?;
                let branches = branches
                    .into_iter()
                    .map(|(c, t)| Ok((self.fold(c)?, self.fold(t)?)))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Node::Switch { branches, default })
            }
            Node::Let { vars, body } => {
                let vars = vars
                    .into_iter()
                    .map(|(n, v)| Ok((n, self.fold(v)?)))
                    .collect::<Result<Vec<_>>>()?;
                let names: Vec<String> = vars.iter().map(|(n, _)| n.clone()).collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let body = self.with_bound(&names, |f| f.boxed(body))?;
                Ok(Node::Let { vars, body })
            }
            Node::Map { input, var, body } => {
                let input = self.boxed(input)?;
                let body = self.with_bound(&[var.as_str()], |f| f.boxed(body))?;
                Ok(Node::Map { input, var, body })
            }
            Node::Filter {
                input,
                var,
                cond,
                limit,
            } => {
                let input = self.boxed(input)?;
                let cond = self.with_bound(&[var.as_str()], |f| f.boxed(cond))?;
                let limit = limit.map(|l| self.boxed(l)).transpose()?;
                Ok(Node::Filter {
                    input,
                    var,
                    cond,
                    limit,
                })
            }
            Node::Reduce { input, init, body } => {
                let input = self.boxed(input)?;
                let init = self.boxed(init)?;
                let body = self.with_bound(&["this", "value"], |f| f.boxed(body))?;
                Ok(Node::Reduce { input, init, body })
            }
            Node::Convert {
                input,
                to,
                on_error,
                on_null,
            } => {
                let node = Node::Convert {
                    input: self.boxed(input)?,
                    to: self.boxed(to)?,
                    on_error: on_error.map(|n| self.boxed(n)).transpose()?,
                    on_null: on_null.map(|n| self.boxed(n)).transpose()?,
                };
                let Node::Convert {
                    input,
                    to,
                    on_error,
                    on_null,
                } = &node
                else {
                    unreachable!("built above")
                };
                let parts = [Some(input), Some(to), on_error.as_ref(), on_null.as_ref()];
                if parts.into_iter().flatten().all(|p| is_constant(p)) {
                    self.evaluate(&node)
                } else {
                    Ok(node)
                }
            }
            Node::GetField { field, input } => {
                let input = self.boxed(input)?;
                let constant_input = is_constant(&input);
                let node = Node::GetField { field, input };
                if constant_input {
                    self.evaluate(&node)
                } else {
                    Ok(node)
                }
            }
            Node::SetField {
                field,
                input,
                value,
            } => {
                let (input, value) = (self.boxed(input)?, self.boxed(value)?);
                let constant_parts = is_constant(&input) && is_constant(&value);
                let node = Node::SetField {
                    field,
                    input,
                    value,
                };
                if constant_parts {
                    self.evaluate(&node)
                } else {
                    Ok(node)
                }
            }
            Node::DateToString {
                date,
                format,
                on_null,
            } => {
                let date = self.boxed(date)?;
                let format = format.map(|n| self.boxed(n)).transpose()?;
                let on_null = on_null.map(|n| self.boxed(n)).transpose()?;
                let constant_parts = is_constant(&date)
                    && format.as_deref().is_none_or(is_constant)
                    && on_null.as_deref().is_none_or(is_constant);
                let node = Node::DateToString {
                    date,
                    format,
                    on_null,
                };
                if constant_parts {
                    self.evaluate(&node)
                } else {
                    Ok(node)
                }
            }
            Node::DateArith {
                subtract,
                start,
                unit,
                amount,
            } => {
                let (start, unit, amount) =
                    (self.boxed(start)?, self.boxed(unit)?, self.boxed(amount)?);
                let constant_parts =
                    is_constant(&start) && is_constant(&unit) && is_constant(&amount);
                let node = Node::DateArith {
                    subtract,
                    start,
                    unit,
                    amount,
                };
                if constant_parts {
                    self.evaluate(&node)
                } else {
                    Ok(node)
                }
            }
        }
    }

    /// `ExpressionNary::optimize`: operands first; all constant, the value; otherwise, for an
    /// associative expression, nested uses absorbed and constant operands evaluated together.
    fn nary(&mut self, kind: Nary, args: Vec<Node>) -> Result<Node> {
        let mut args = self.all(args)?;
        if args.iter().all(is_constant) {
            return self.evaluate(&kind.make(args));
        }
        let (associative, commutative) = kind.algebra(args.len());
        if !associative {
            return Ok(kind.make(args));
        }
        let mut constants: Vec<Node> = Vec::new();
        let mut out: Vec<Node> = Vec::new();
        let mut i = 0;
        while i < args.len() {
            if is_constant(&args[i]) {
                constants.push(std::mem::replace(&mut args[i], Node::Const(Bson::Null)));
                i += 1;
                continue;
            }
            if let Some(inner) = kind.operands_of(&args[i])
                && kind.algebra(inner.len()).0
            {
                let inner = match std::mem::replace(&mut args[i], Node::Const(Bson::Null)) {
                    Node::Op(_, inner) | Node::And(inner) | Node::Or(inner) => inner,
                    _ => unreachable!("matched above"),
                };
                args.splice(i..=i, inner);
                continue;
            }
            if !commutative {
                self.collapse(kind, &mut constants, &mut out)?;
            }
            out.push(std::mem::replace(&mut args[i], Node::Const(Bson::Null)));
            i += 1;
        }
        self.collapse(kind, &mut constants, &mut out)?;
        Ok(kind.make(out))
    }

    /// Appends a run of constant operands to `out`: evaluated together when there are two
    /// or more.
    fn collapse(&self, kind: Nary, constants: &mut Vec<Node>, out: &mut Vec<Node>) -> Result<()> {
        if constants.len() > 1 {
            out.push(self.evaluate(&kind.make(std::mem::take(constants)))?);
        } else {
            out.append(constants);
        }
        Ok(())
    }

    /// `ExpressionAnd::optimize` and `ExpressionOr::optimize`: after the n-ary rules, a
    /// constant (now last) that decides the result replaces the whole, and one that does not
    /// is dropped.
    fn and_or(&mut self, kind: Nary, args: Vec<Node>) -> Result<Node> {
        let node = self.nary(kind, args)?;
        let (Node::And(mut args) | Node::Or(mut args)) = node else {
            return Ok(node);
        };
        let decides = match args.last().and_then(constant) {
            None => return Ok(kind.make(args)),
            Some(value) => truthy(value) == (kind == Nary::Or),
        };
        if decides {
            return Ok(Node::Const(Bson::Boolean(kind == Nary::Or)));
        }
        args.pop();
        Ok(if args.len() == 1 {
            // A single operand left: its truthiness (`ExpressionCoerceToBool`).
            Node::And(args)
        } else {
            kind.make(args)
        })
    }
}
