//! The outer loop's row ranges: whether ranges of its coordinates may run apart (on threads,
//! or one after another), and how ranges that add into the same result elements meet.

use super::ResultPlan;
use super::nest::Nest;
use crate::concrete::{ConcreteNotation, Derivation, OutputRace, ParallelUnit, Stmt as CinStmt};
use crate::id::Id;
use crate::notation::{IndexVarId, Types};

/// How the threads running a reduction's ranges add into the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReductionKind {
    /// Each thread adds its ranges, taken in a fixed order, into its own zeroed copy of the
    /// result; the copies are then summed into it in thread order (taco's `temporary`, and
    /// `parallel_reduction` on CPU threads, as OpenMP's `reduction` clause): the same sums for
    /// the same thread count, run after run.
    PerThread,
    /// Every range adds into the shared result with atomic adds (`atomics`); the order of
    /// the additions, so the rounding, varies from run to run.
    Atomic,
}

/// Which row ranges of a kernel's outer loop may run apart, and how they combine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowPlan {
    /// The outermost loop's variable.
    pub outer: Option<IndexVarId>,
    /// The parent and factor of a split whose block loop is outermost.
    pub split_outer: Option<(IndexVarId, usize)>,
    /// How the schedule asks the threads of a reduction to meet, if it does.
    pub asked: Option<ReductionKind>,
    /// How ranges that add into the same elements of a dense result combine.
    pub reduction: Option<ReductionKind>,
    /// Whether ranges of the outer loop may run apart.
    pub partitionable: bool,
}

/// How the outermost loop's threads add into the result when the schedule says they may
/// write the same elements: `atomics`, or a copy per thread (`temporary`,
/// `parallel_reduction`). `None` for any other loop mark.
fn reduction_asked(cin: &ConcreteNotation) -> Option<ReductionKind> {
    let CinStmt::Forall { attrs, .. } = &cin.stmts[cin.root] else { return None };
    match attrs.parallel? {
        (ParallelUnit::CpuThread, OutputRace::Atomics) => Some(ReductionKind::Atomic),
        (ParallelUnit::CpuThread, OutputRace::Temporary | OutputRace::ParallelReduction) => {
            Some(ReductionKind::PerThread)
        }
        _ => None,
    }
}

impl RowPlan {
    /// The row ranges of the outermost loop of `nest`, whose result is written as `result`.
    pub fn new(cin: &ConcreteNotation, types: &Types, nest: &Nest, result: &ResultPlan) -> RowPlan {
        let lhs = &nest.lhs;
        // Row ranges may run in parallel when the outer loop names disjoint parts of the result:
        // a dense result indexed by it, or a CSR-like result (dense, compressed) whose rows it is.
        let outer = nest.loops.first().map(|(v, _)| *v);
        // The block loop of a split outermost (`split(j, j0, j1, 64)`, `j0` first) runs ranges of
        // blocks where `j` sums into a dense result: `j`'s coordinates decide as for a plain loop.
        let split_outer = outer.and_then(|v| match cin.derivations.get(&v) {
            Some(&Derivation::Split { parent, outer: true, factor }) if !cin.derivations.contains_key(&parent) => {
                Some((parent, factor as usize))
            }
            _ => None,
        });
        let row_var = split_outer.map(|(parent, _)| parent).or(outer);
        // Where the outer loop is a reduction into a dense result, its ranges add into the same
        // elements: as the schedule asks, else (for -nthreads) through a copy per thread where
        // one is no larger than the loop's extent (a dot product, CSC SpMV; not a convolution's
        // three filter rows into an image).
        let asked = reduction_asked(cin);
        let dense_result = matches!(result, ResultPlan::Dense);
        let reduction = match row_var {
            Some(v) if dense_result && !lhs.subscripts.iter().any(|t| t.as_var() == Some(v)) => asked.or_else(|| {
                let elements =
                    types.tensors[lhs.tensor.index()].shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
                elements
                    .filter(|&n| n <= types.sizes.get(v.index()).copied().unwrap_or(0))
                    .map(|_| ReductionKind::PerThread)
            }),
            _ => None,
        };
        let partitionable = match row_var {
            None => false,
            // Blocks of a result's rows would each have to zero their rows first: not ranged.
            Some(_) if split_outer.is_some() => reduction.is_some(),
            Some(v) if dense_result => reduction.is_some() || lhs.subscripts.iter().any(|t| t.as_var() == Some(v)),
            // A CSR-like result (a dense level, then a compressed one) appended row by row.
            Some(v) => matches!(result, ResultPlan::Append { order, csr_like: true, .. } if order.first() == Some(&v)),
        };
        RowPlan { outer, split_outer, asked, reduction, partitionable }
    }
}
