//! Concrete index notation (CIN): index notation with its loops made explicit.
//!
//! ```text
//! forall(i, forall(j, forall(k, A(i,j) += B(i,k) * C(k,j))))
//! forall(i, where(y(i) = b(i) - t0, forall(j, t0 += A(i,j) * x(j))))
//! ```
//!
//! `forall(v, S)` runs `S` for every value of `v`; `where(C, P)` runs the producer `P`, which
//! fills a temporary, before the consumer `C`, which reads it; `sequence(S1, S2)` runs one
//! statement after the other; assignments overwrite (`=`) or accumulate (`+=`). Reductions are
//! loops with accumulation, so CIN expressions hold no `sum`. [`concretize`] turns index
//! notation into CIN with the default loop order; the schedule then rewrites it.

mod concretize;
mod parse;
mod precompute;
mod print;
mod schedule;
mod verify;
mod workspace;

pub use concretize::{LoopOrderTarget, concretize, concretize_for};
pub use parse::parse_concrete;
pub use schedule::{
    BoundType, Command, Derivation, LoopAttrs, OutputRace, ParallelUnit, ScheduleError, parse_schedule,
};
pub use verify::VerifyError;
pub use workspace::{WorkspaceKind, WorkspacePolicy};

use std::collections::BTreeMap;

use crate::id::{Arena, id};
use crate::notation::{Access, AssignOp, Expr, ExprId, IndexVar, IndexVarId, Scope, TensorId, TensorVar};

id!(
    /// A CIN statement; prints as `s0`, `s1`, ...
    StmtId,
    "s"
);

/// A CIN statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `lhs = rhs` or `lhs += rhs`.
    Assign {
        /// The written access.
        lhs: Access,
        /// Overwrite or accumulate.
        op: AssignOp,
        /// The value (no `sum` inside).
        rhs: ExprId,
    },
    /// `forall(var, body)`, with the schedule's marks on the loop.
    Forall {
        /// The loop variable.
        var: IndexVarId,
        /// What runs for each of its values.
        body: StmtId,
        /// Parallelization, unrolling and bounds set by the schedule.
        attrs: LoopAttrs,
    },
    /// `where(consumer, producer)`: the producer computes a temporary the consumer reads.
    Where {
        /// Reads the temporary.
        consumer: StmtId,
        /// Writes the temporary.
        producer: StmtId,
    },
    /// `sequence(first, second)`.
    Sequence {
        /// Runs first.
        first: StmtId,
        /// Runs second.
        second: StmtId,
    },
}

/// A CIN program: its names, expression nodes, statements, and the root statement.
#[derive(Clone, Debug, PartialEq)]
pub struct ConcreteNotation {
    /// Tensors, temporaries included.
    pub tensors: Arena<TensorId, TensorVar>,
    /// Which tensors are temporaries introduced by a `where` (not operands).
    pub temporaries: Vec<TensorId>,
    /// Index variables.
    pub vars: Arena<IndexVarId, IndexVar>,
    /// Expression nodes.
    pub exprs: Arena<ExprId, Expr>,
    /// Statements.
    pub stmts: Arena<StmtId, Stmt>,
    /// The outermost statement.
    pub root: StmtId,
    /// How each index variable made by the schedule derives from others (split, fuse, pos,
    /// bound): the provenance analyses follow back to the unscheduled loop order.
    pub derivations: BTreeMap<IndexVarId, Derivation>,
    /// Workspaces inserted by the analysis: the tensor, dense or sparse, its insert–sort–merge
    /// policy, and `ow_order` (the result dimension each workspace dimension holds).
    pub workspaces: Vec<(TensorId, WorkspaceKind, WorkspacePolicy, Vec<usize>)>,
}

impl ConcreteNotation {
    /// The names and expression nodes, for printing expressions.
    pub fn scope(&self) -> Scope<'_> {
        Scope { tensors: &self.tensors, vars: &self.vars, exprs: &self.exprs }
    }

    /// The loop variables from the root down to the first assignment, following consumers
    /// of `where` and the first statement of sequences: the loop order of the main computation.
    pub fn loop_order(&self) -> Vec<IndexVarId> {
        let mut out = Vec::new();
        let mut s = self.root;
        loop {
            match &self.stmts[s] {
                Stmt::Forall { var, body, .. } => {
                    out.push(*var);
                    s = *body;
                }
                Stmt::Where { consumer, .. } => s = *consumer,
                Stmt::Sequence { first, .. } => s = *first,
                Stmt::Assign { .. } => return out,
            }
        }
    }

    /// The loops from `s` down through nested `forall`s, and the first statement below them
    /// that is not a loop.
    pub(crate) fn loops_below(&self, mut s: StmtId) -> (Vec<StmtId>, StmtId) {
        let mut loops = Vec::new();
        while let Stmt::Forall { body, .. } = &self.stmts[s] {
            loops.push(s);
            s = *body;
        }
        (loops, s)
    }
}
