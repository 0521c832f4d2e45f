//! How the result is written: in place when dense; appended in its storage order when the
//! loops follow it (with a dense row workspace where only its last level comes out of order);
//! else scattered into a sparse insert–sort–merge workspace.

use super::nest::Nest;
use crate::concrete::{ConcreteNotation, Derivation};
use crate::id::Id;
use crate::notation::{IndexVarId, Types};
use nm_format::{Format, LevelExpr, LevelKind};

/// How the result is written (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub enum ResultPlan {
    /// A dense result, written in place.
    Dense,
    /// Appended in its storage order.
    Append {
        /// The result's variables by level.
        order: Vec<IndexVarId>,
        /// Whether its last level comes out of order, collected a row at a time in a dense row
        /// workspace (Gustavson's SpGEMM).
        row_workspace: bool,
        /// Whether it is CSR-like (a dense level, then a compressed one): its rows may be
        /// assembled in ranges apart and joined.
        csr_like: bool,
    },
    /// Scattered into an insert–sort–merge workspace configured so (`None`: the back end's
    /// default).
    Scatter {
        /// The workspace's configuration.
        config: Option<nm_ism::Config>,
    },
}

/// Whether a result in `format` can be appended to in storage order: dense levels above
/// ordered, unique compressed ones, none of them blocked.
pub fn appendable(format: &Format) -> bool {
    let levels = format.levels();
    levels.iter().enumerate().all(|(l, level)| {
        matches!(level.expr, LevelExpr::Dim(_))
            && match level.kind {
                LevelKind::Dense => l + 1 < levels.len() && levels[..l].iter().all(|p| p.kind == LevelKind::Dense),
                LevelKind::Compressed(p) => p.unique && p.ordered,
                _ => false,
            }
    })
}

impl ResultPlan {
    /// How the loops of `nest` write its result, `workspace` being the sparse workspace asked
    /// for (by an option or a schedule's `precompute`).
    pub fn new(cin: &ConcreteNotation, types: &Types, nest: &Nest, workspace: Option<nm_ism::Config>) -> ResultPlan {
        let lhs = &nest.lhs;
        let Some(format) =
            types.tensors[lhs.tensor.index()].format.as_ref().filter(|f| **f != Format::dense(f.order()))
        else {
            return ResultPlan::Dense;
        };
        let vars: Vec<IndexVarId> = lhs.subscripts.iter().filter_map(|t| t.as_var()).collect();
        let order: Vec<IndexVarId> = format.levels().iter().map(|l| vars[l.expr.dim()]).collect();
        // A split variable stands for its parent where the inner loop runs (rows still come
        // in order); the outer one visits no coordinate.
        let loop_vars: Vec<IndexVarId> = nest
            .loops
            .iter()
            .filter_map(|(v, _)| match cin.derivations.get(v) {
                Some(Derivation::Split { outer: true, .. }) => None,
                Some(Derivation::Split { parent, .. }) => Some(*parent),
                _ => Some(*v),
            })
            .collect();
        let outer = order.len() - 1;
        // Loops in storage order, then reductions: appended after each reduction.
        let appends = loop_vars.starts_with(&order);
        // The levels above the last in order, the last one anywhere below them: a dense
        // row workspace (Gustavson). Anything else scatters into a sparse workspace.
        let row = !appends
            && loop_vars.len() > outer
            && loop_vars[..outer] == order[..outer]
            && loop_vars[outer..].contains(&order[outer])
            && nest.producers.is_empty()
            && workspace.is_none_or(|c| c.policy == nm_ism::Policy::Dense);
        // A vector-wise N:M operand is iterated window by window, which writes a sparse result
        // out of order: through the sparse workspace.
        let blocked_operand = types
            .tensors
            .iter()
            .enumerate()
            .any(|(t, ty)| t != lhs.tensor.index() && ty.format.as_ref().is_some_and(|f| f.nm_params().is_some()));
        if !(appends || row) || blocked_operand || !appendable(format) {
            return ResultPlan::Scatter { config: workspace };
        }
        let kinds: Vec<LevelKind> = format.levels().iter().map(|l| l.kind).collect();
        let csr_like = kinds.len() == 2 && kinds[0] == LevelKind::Dense && matches!(kinds[1], LevelKind::Compressed(_));
        ResultPlan::Append { order, row_workspace: !appends, csr_like }
    }
}
