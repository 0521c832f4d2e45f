//! Operands the lowering cannot read as declared — an N:M format outside a product with dense
//! operands, a mode order against the loop order, a level kind a merge cannot take — are read
//! through a copy in all-compressed storage (CSF) in some mode order, converted before each
//! run, as the MLIR sparsifier inserts `sparse_tensor.convert`. The copy costs O(nnz) per run
//! and is reported; declaring the operand in the reported format avoids it.

use nm_format::{Format, LevelKind};
use nm_ir::notation::{IndexNotation, IndexVarId};

/// One way to read the operands: `(tensor, format of its copy)` for each converted operand.
pub type Conversion = Vec<(String, Format)>;

/// The conversions to try: every sparse operand at once with its levels in `loop_order` (the
/// loop order the statement was concretized or scheduled with, outermost first) — first leaving
/// out those already stored in that order in dense, compressed and band levels — then each
/// sparse operand alone in each mode order (dimension order first), then every one in
/// dimension order. `declared` gives an operand's format (`None`: dense, never converted).
pub fn candidates(
    stmt: &IndexNotation,
    declared: impl Fn(&str) -> Option<Format>,
    loop_order: &[IndexVarId],
) -> Vec<Conversion> {
    let result = stmt.tensor_name(stmt.lhs.tensor);
    let sparse: Vec<(String, Format)> = stmt
        .tensors
        .iter()
        .map(|(_, t)| t.name.clone())
        .filter(|name| name != result)
        .filter_map(|name| declared(&name).map(|f| (name, f)))
        .filter(|(_, f)| *f != Format::dense(f.order()))
        .collect();
    let mut out: Vec<Conversion> = Vec::new();
    let first_access = |name: &str| stmt.accesses(stmt.rhs).into_iter().find(|a| stmt.tensor_name(a.tensor) == name);
    // The mode order of each operand's first access that follows the loop order, with whether
    // the operand is already stored so in dense and compressed levels (CSR along `i, j`).
    let along: Vec<(String, Format, bool)> = sparse
        .iter()
        .filter_map(|(name, format)| {
            let access = first_access(name)?;
            let rank = |d: usize| {
                access.subscripts[d]
                    .as_var()
                    .and_then(|v| loop_order.iter().position(|&w| w == v))
                    .unwrap_or(usize::MAX)
            };
            let mut order: Vec<usize> = (0..format.order()).collect();
            order.sort_by_key(|&d| rank(d));
            let plain_in_order = format.levels().len() == order.len()
                && format.levels().iter().zip(&order).all(|(level, &d)| {
                    // Band levels are read in place in their order, like compressed ones.
                    level.expr == nm_format::LevelExpr::Dim(d)
                        && (matches!(level.kind, LevelKind::Dense | LevelKind::Band)
                            || level.kind == LevelKind::COMPRESSED)
                });
            let copy = compressed(format.order(), &order);
            (copy != *format).then(|| (name.clone(), copy, plain_in_order))
        })
        .collect();
    // First without copying those already stored so, then copying every one.
    let needed: Conversion =
        along.iter().filter(|(_, _, plain)| !plain).map(|(n, f, _)| (n.clone(), f.clone())).collect();
    // Last of all, the copies along the loops with a dense outermost level (CSC rather than
    // DCSC): a `where` producer cannot walk a compressed level along a loop outside it
    // (`A(i,k) = B(i,j)*C(j,k) + D(i,k)`: the inner product reads C by columns; `A(i) =
    // B(i,k) + C(l,k)`: the sum over `l` reads C by columns). Into a sparse result only where
    // the dense level's variable is summed over — one of the result's would store every
    // coordinate the dense loop visits — and is not the copy's last level: a dense last level
    // stores every element, explicit zeros the operand does not store, and the result would
    // store an entry wherever such a zero meets the loops (`A(i) = B(i) - D(j)`, D empty).
    let dense_result = declared(result).is_none_or(|f| f == Format::dense(f.order()));
    let in_result = |v: IndexVarId| stmt.lhs.subscripts.iter().any(|t| t.vars().any(|w| w == v));
    let root_summed = |name: &str, copy: &Format| {
        let root = copy.levels()[0].expr.dim();
        copy.order() > 1 && first_access(name).is_some_and(|a| a.subscripts[root].vars().all(|v| !in_result(v)))
    };
    let dense_root: Conversion = needed
        .iter()
        .map(|(n, f)| (n.clone(), if dense_result || root_summed(n, f) { with_dense_root(f) } else { f.clone() }))
        .collect();
    let every: Conversion = along.into_iter().map(|(n, f, _)| (n, f)).collect();
    for conversion in [needed, every] {
        if !conversion.is_empty() && !out.contains(&conversion) {
            out.push(conversion);
        }
    }
    for (name, format) in &sparse {
        for order in permutations(format.order()) {
            let copy = vec![(name.clone(), compressed(format.order(), &order))];
            if copy[0].1 != *format && !out.contains(&copy) {
                out.push(copy);
            }
        }
    }
    if sparse.len() > 1 {
        let all: Conversion = sparse.iter().map(|(n, f)| (n.clone(), Format::csf(f.order()))).collect();
        if !out.contains(&all) {
            out.push(all);
        }
    }
    if !dense_root.is_empty() && !out.contains(&dense_root) {
        out.push(dense_root);
    }
    out
}

/// `format` (every level compressed, see [`compressed`]) with its first level dense.
fn with_dense_root(format: &Format) -> Format {
    let mut kinds = vec![LevelKind::COMPRESSED; format.order()];
    kinds[0] = LevelKind::Dense;
    let modes: Vec<usize> = format.levels().iter().map(|l| l.expr.dim()).collect();
    Format::by_letters(&kinds, Some(&modes)).expect("the same mode order")
}

/// Every level compressed, levels in `mode_order`.
fn compressed(order: usize, mode_order: &[usize]) -> Format {
    Format::by_letters(&vec![LevelKind::COMPRESSED; order], Some(mode_order)).expect("a permutation of the dimensions")
}

/// The permutations of `0..n`, identity first (n ≤ 4 in practice: at most 24).
fn permutations(n: usize) -> Vec<Vec<usize>> {
    let mut out = vec![(0..n).collect::<Vec<_>>()];
    let mut i = 0;
    while i < out.len() {
        let p = out[i].clone();
        for a in 0..n {
            for b in a + 1..n {
                let mut q = p.clone();
                q.swap(a, b);
                if !out.contains(&q) {
                    out.push(q);
                }
            }
        }
        i += 1;
    }
    out
}

/// The note a run prints for a conversion.
pub fn describe(conversion: &Conversion, declared: impl Fn(&str) -> Option<Format>) -> String {
    conversion
        .iter()
        .map(|(name, copy)| {
            let show = |f: &Format| f.name().unwrap_or_else(|| f.to_string());
            let from = declared(name).map_or_else(|| "dense".to_string(), |f| show(&f));
            format!("`{name}` ({from}) is read through a copy in {}, which the kernel can read; declare it so to avoid the copy", show(copy))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_are_all_there_identity_first() {
        assert_eq!(permutations(1), vec![vec![0]]);
        assert_eq!(permutations(2), vec![vec![0, 1], vec![1, 0]]);
        let p3 = permutations(3);
        assert_eq!(p3.len(), 6);
        assert_eq!(p3[0], vec![0, 1, 2]);
        assert_eq!(permutations(4).len(), 24);
    }

    #[test]
    fn candidates_convert_sparse_operands_never_the_result_or_dense_ones() {
        let stmt = nm_ir::notation::parse("A(i,j) = B(i,j) + C(j,i) + x(i)").unwrap();
        let declared = |n: &str| match n {
            "A" | "B" => Some(Format::csr()),
            "C" => Some(Format::nm(2, 4, 4).unwrap()),
            _ => None,
        };
        let (i, j) = (stmt.var_named("i").unwrap(), stmt.var_named("j").unwrap());
        let c = candidates(&stmt, declared, &[i, j]);
        assert!(c.iter().all(|conv| conv.iter().all(|(n, _)| n == "B" || n == "C")), "{c:?}");
        // Along the loops: C(j,i) in column order alone (B, a CSR read along `i, j`, needs no
        // copy), then with B in dcsr; then B alone in dcsr and in column order, C alone in row
        // order (in column order it was the first), then both in dimension order.
        assert_eq!(c.len(), 6, "{c:?}");
        assert_eq!(c[0], vec![("C".to_string(), compressed(2, &[1, 0]))]);
        assert_eq!(c[1], vec![("B".to_string(), Format::csf(2)), ("C".to_string(), compressed(2, &[1, 0]))]);
        assert_eq!(c[5], vec![("B".to_string(), Format::csf(2)), ("C".to_string(), Format::csf(2))]);
        // Into a dense result, last of all C's column-order copy with a dense first level (CSC).
        let into_dense = |n: &str| if n == "A" { None } else { declared(n) };
        let c = candidates(&stmt, into_dense, &[i, j]);
        assert_eq!(c.len(), 7, "{c:?}");
        assert_eq!(c[6], vec![("C".to_string(), Format::csc())]);
    }

    #[test]
    fn band_operands_in_loop_order_are_read_in_place() {
        // `D(j)` in band storage is read as it is: copying it first (into a dense-root copy,
        // over the summed `j`) made `A` store a zero where no operand has a term.
        let stmt = nm_ir::notation::parse("A(i) = B(i) * C(j,i) - D(j)").unwrap();
        let declared = |n: &str| match n {
            "A" | "B" => Some(Format::parse("s", 1).unwrap()),
            "D" => Some(Format::parse("b", 1).unwrap()),
            _ => Some(Format::coo(2)),
        };
        let order = ["i", "j"].map(|v| stmt.var_named(v).unwrap());
        let c = candidates(&stmt, declared, &order);
        // First C alone, which the kernel cannot read in place (COO along `i, j`).
        assert_eq!(c[0], vec![("C".to_string(), compressed(2, &[1, 0]))], "{c:?}");
    }

    #[test]
    fn a_sparse_result_gets_a_dense_root_only_over_a_summed_variable() {
        // `A(i) = B(i,k) + C(l,k)`: C read along `k, l` — CSC, whose dense level is `k`,
        // summed over, so the sparse result stores no more coordinates.
        let stmt = nm_ir::notation::parse("A(i) = B(i,k) + C(l,k)").unwrap();
        let declared = |n: &str| match n {
            "A" => Some(Format::parse("s", 1).unwrap()),
            _ => Some(Format::csr()),
        };
        let order = ["i", "k", "l"].map(|v| stmt.var_named(v).unwrap());
        let c = candidates(&stmt, declared, &order);
        assert_eq!(c[0], vec![("C".to_string(), compressed(2, &[1, 0]))]);
        assert_eq!(c.last(), Some(&vec![("C".to_string(), Format::csc())]));
        // `A(i,j) = B(i,j) + C(j,i)` into CSR: C's dense level would be `i`, a result
        // variable: no such candidate.
        let stmt = nm_ir::notation::parse("A(i,j) = B(i,j) + C(j,i)").unwrap();
        let order = ["i", "j"].map(|v| stmt.var_named(v).unwrap());
        let c = candidates(&stmt, |_: &str| Some(Format::csr()), &order);
        assert!(!c.iter().flatten().any(|(_, f)| f.levels()[0].kind == LevelKind::Dense), "{c:?}");
        // `A(i) = B(i) - D(j)` into a sparse vector: `j` is summed over, but a dense copy of D
        // would store every element: no such candidate.
        let stmt = nm_ir::notation::parse("A(i) = B(i) - D(j)").unwrap();
        let order = ["i", "j"].map(|v| stmt.var_named(v).unwrap());
        let declared = |n: &str| Some(Format::parse(if n == "D" { "u" } else { "s" }, 1).unwrap());
        let c = candidates(&stmt, declared, &order);
        assert!(!c.is_empty() && !c.iter().flatten().any(|(_, f)| f.levels()[0].kind == LevelKind::Dense), "{c:?}");
    }
}
