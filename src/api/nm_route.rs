//! `C(i,j) = A(i,k) * B(k,j)` with `B` in `nm(N,M,L)` (A, C dense), or with `A` in `nv24` (B, C
//! dense): run by nm-spmm's hand-written kernels (the lowering's code for structured levels is
//! a plain loop nest, several times slower: BENCHMARKS.md, "N:M on the CPU"); the command's
//! `-device=cuda` runs the same route on a GPU.

use nm_format::{Format, Tensor, TensorView};
use nm_ir::notation::{BinaryOp, Expr, IndexNotation, TensorId};
use nm_spmm::{Isa, NmMatrix, SpmmError};

/// Which operand is structured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NmOperand {
    /// B in vector-wise `nm(N,M,L)`: (N, M, L).
    B((u32, u32, usize)),
    /// A in element-wise 2:4 `nv24`.
    ANv24,
}

/// The operands of an N:M SpMM the statement is.
#[derive(Clone)]
pub(crate) struct NmSpmm {
    pub a: TensorId,
    pub b: TensorId,
    pub structured: NmOperand,
}

/// Whether `stmt` (with its tensors' formats, `None` = dense) is `C(i,j) = A(i,k) * B(k,j)`
/// with `B` in `nm(N,M,L)` and `A`, `C` dense, or with `A` in `nv24` and `B`, `C` dense.
pub(crate) fn recognise(stmt: &IndexNotation, format: impl Fn(TensorId) -> Option<Format>) -> Option<NmSpmm> {
    let Expr::Binary(BinaryOp::Mul, x, y) = &stmt.exprs[stmt.rhs] else { return None };
    let (Expr::Access(a), Expr::Access(b)) = (&stmt.exprs[*x], &stmt.exprs[*y]) else { return None };
    let vars = |subs: &[nm_ir::notation::IndexTerm]| subs.iter().map(|t| t.as_var()).collect::<Option<Vec<_>>>();
    let (c, av, bv) = (vars(&stmt.lhs.subscripts)?, vars(&a.subscripts)?, vars(&b.subscripts)?);
    let ([i, j], [ai, k], [bk, bj]) = (c.as_slice(), av.as_slice(), bv.as_slice()) else { return None };
    let distinct = i != j && i != k && j != k;
    let dense = |t: TensorId| format(t).is_none_or(|f| f == Format::dense(2));
    let shaped = distinct && ai == i && bk == k && bj == j && dense(stmt.lhs.tensor) && a.tensor != b.tensor;
    let structured = match (format(b.tensor).and_then(|f| f.nm_params()), format(a.tensor)) {
        (Some(pattern), _) if dense(a.tensor) => NmOperand::B(pattern),
        (None, Some(f)) if f == Format::nv24(2) && dense(b.tensor) => NmOperand::ANv24,
        _ => return None,
    };
    shaped.then_some(NmSpmm { a: a.tensor, b: b.tensor, structured })
}

/// The kernel that runs the route, in words (what `-print-compute` shows instead of
/// generated C, and [`super::Kernel::describe`]).
pub(crate) fn describe(s: &NmSpmm) -> String {
    match s.structured {
        NmOperand::B((n, m, l)) => format!(
            "C = A·B with B in nm({n},{m},{l}): nm-spmm's hand-written N:M SpMM ({:?} on this CPU), not generated code",
            Isa::detect()
        ),
        NmOperand::ANv24 => format!(
            "C = A·B with A in nv24: nm-spmm's hand-written 2:4 SpMM ({:?} on this CPU), not generated code",
            Isa::detect()
        ),
    }
}

/// The structured operand made ready for nm-spmm's kernel, once for any number of products.
pub(crate) enum Packed<'p, T> {
    /// `B` in `nm(N,M,L)`, packed.
    B(NmMatrix<'p, T>),
    /// `A` in nv24, which its kernel reads as it is.
    ANv24,
}

/// The route's structured operand made ready: `B` packed (a copy only for foreign arrays,
/// which an N:M operand never is: it is built by pruning).
pub(crate) fn pack<'p, T: nm_spmm::Real>(route: &NmSpmm, b: &TensorView<T>) -> Result<Packed<'p, T>, SpmmError> {
    match route.structured {
        NmOperand::B(_) => Ok(Packed::B(NmMatrix::new(&b.to_tensor())?)),
        NmOperand::ANv24 => Ok(Packed::ANv24),
    }
}

/// `C = A·B` on the CPU by nm-spmm's kernel, the structured operand made ready by [`pack`];
/// the dense operand is read in place.
pub(crate) fn multiply<T: nm_spmm::Real>(
    packed: &Packed<'_, T>,
    a: &TensorView<T>,
    b: &TensorView<T>,
    threads: usize,
) -> Result<Tensor<T>, SpmmError> {
    match packed {
        Packed::B(packed) => nm_spmm::multiply_view(a, packed, threads),
        Packed::ANv24 => {
            let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
            if b.shape()[0] != k {
                return Err(SpmmError::Inner { m, k, rows: b.shape()[0] });
            }
            let mut c = vec![T::ZERO; m * n];
            nm_spmm::spmm_nv24(&a.to_tensor(), b.values(), n, &mut c, threads)?;
            let levels = vec![nm_format::LevelStorage::Dense { size: m }, nm_format::LevelStorage::Dense { size: n }];
            Ok(Tensor::from_raw(vec![m, n], Format::dense(2), levels, c)?)
        }
    }
}
