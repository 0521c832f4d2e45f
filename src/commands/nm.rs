//! `C(i,j) = A(i,k) * B(k,j)` with `B` in `nm(N,M,L)`, `A` and `C` dense: run by nm-spmm's
//! hand-written kernel (the lowering does not generate code for structured levels yet).

use nm_format::Format;
use nm_ir::notation::{BinaryOp, Expr, IndexNotation, TensorId};
use nm_spmm::Isa;

/// The operands of an N:M SpMM the statement is: (A, B, B's (N, M, L)).
pub(crate) struct NmSpmm {
    pub a: TensorId,
    pub b: TensorId,
    pub pattern: (u32, u32, usize),
}

/// Whether `stmt` (with its tensors' formats, `None` = dense) is `C(i,j) = A(i,k) * B(k,j)`
/// with `B` in `nm(N,M,L)` and `A`, `C` dense.
pub(crate) fn recognise(stmt: &IndexNotation, format: impl Fn(TensorId) -> Option<Format>) -> Option<NmSpmm> {
    let Expr::Binary(BinaryOp::Mul, x, y) = &stmt.exprs[stmt.rhs] else { return None };
    let (Expr::Access(a), Expr::Access(b)) = (&stmt.exprs[*x], &stmt.exprs[*y]) else { return None };
    let vars = |subs: &[nm_ir::notation::IndexTerm]| subs.iter().map(|t| t.as_var()).collect::<Option<Vec<_>>>();
    let (c, av, bv) = (vars(&stmt.lhs.subscripts)?, vars(&a.subscripts)?, vars(&b.subscripts)?);
    let ([i, j], [ai, k], [bk, bj]) = (c.as_slice(), av.as_slice(), bv.as_slice()) else { return None };
    let distinct = i != j && i != k && j != k;
    let dense = |t: TensorId| format(t).is_none_or(|f| f == Format::dense(2));
    let pattern = format(b.tensor)?.nm_params()?;
    (distinct && ai == i && bk == k && bj == j && dense(a.tensor) && dense(stmt.lhs.tensor) && a.tensor != b.tensor)
        .then_some(NmSpmm { a: a.tensor, b: b.tensor, pattern })
}

/// What `-print-compute` shows instead of generated C.
pub(crate) fn describe(s: &NmSpmm) -> String {
    let (n, m, l) = s.pattern;
    format!(
        "// C = A·B with B in nm({n},{m},{l}): nm-spmm's hand-written N:M SpMM ({:?} on this CPU), not generated code\n",
        Isa::detect()
    )
}
