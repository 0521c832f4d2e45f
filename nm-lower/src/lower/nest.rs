//! The loop nest: one loop per variable, from the outermost inward, then the assignment at
//! the leaf. Each loop is chosen here — a reduction into a register around the loops that
//! sum, a `split`'s block loop or a `fuse` of dense loops (`derived`), the positions of a
//! `pos` variable, a vector-wise N:M operand's four loops (`iterate`), or the loop that
//! co-iterates the levels the variable reaches (`coiterate`).

use super::marks::{hoist_marks, mark, mark_terms};
use super::{Inside, LowerError, Lowerer, refuse};
use crate::ir::build::{bin, float, int, var};
use crate::ir::{BinOp, ScalarType, Stmt, VarId};
use nm_ir::concrete::Derivation;
use nm_ir::notation::{Access, AssignOp, ExprId, IndexVarId};

impl Lowerer<'_> {
    /// The loops from the first of `loops` inward, then the assignment of `rhs`.
    ///
    /// Along each variable, the merge lattice of `rhs` decides the loop (see `coiterate`):
    /// a `for` over every coordinate when some point has no sparse iterator (a dense operand,
    /// a constant), with a case per point; otherwise one `while` per lattice point over its
    /// sparse iterators, with a case per sub-point, taking the smallest coordinate and
    /// advancing the iterators that stand on it (taco's co-iteration).
    pub(super) fn nest(&mut self, inside: Inside<'_>) -> Result<Vec<Stmt>, LowerError> {
        let Inside { loops, lhs, op, rhs } = inside;
        if self.workspace.as_ref().is_some_and(|w| !w.active && !self.in_producer && self.depth() == w.outer) {
            return self.workspace_region(inside);
        }
        let Some((&(mut v, parallel), rest)) = loops.split_first() else {
            return self.leaf(lhs, op, rhs);
        };
        if self.reduces_into_register(v, lhs, op) {
            return self.register_reduction(inside);
        }
        // `split(i, i0, i1, c)`: `i0` counts blocks of `c` coordinates; `i1` walks one block as
        // the loop over `i` (i = i0·c + i1, stopping at the end of `i`).
        let mut split_inner = None;
        match self.cin.derivations.get(&v) {
            Some(&Derivation::Split { parent, outer: true, factor }) => {
                return self.block_loop(v, parent, factor, parallel, Inside { loops: rest, ..inside });
            }
            Some(&Derivation::Split { parent, outer: false, factor }) => {
                let Some(&(_, block)) = self.split_blocks.iter().rev().find(|(p, _)| *p == parent) else {
                    return refuse(
                        LowerError::Schedule,
                        format!("`{}` runs outside the block loop of its split", self.cin.vars[v].name),
                    );
                };
                let inner = self.f.var(&self.cin.vars[v].name.clone(), ScalarType::Index);
                split_inner = Some((inner, block, factor as i64));
                v = parent;
            }
            Some(&Derivation::Fuse { outer, inner }) => {
                return self.fused_loop(v, (outer, inner), parallel, Inside { loops: rest, ..inside });
            }
            _ => {}
        }
        if let Some(ps) = self.position_space(v) {
            return self.position_loop(ps, split_inner, Inside { loops: rest, ..inside });
        }
        if matches!(self.cin.derivations.get(&v), Some(Derivation::Pos { .. })) {
            return refuse(
                LowerError::Schedule,
                format!(
                    "`pos` over `{}` other than the fused (dense, compressed) levels of a CSR-like operand",
                    self.cin.vars[v].name
                ),
            );
        }
        if split_inner.is_none()
            && let Some(k) = self.blocked_access(v, rhs)
        {
            return self.blocked_nest(k, v, Inside { loops: rest, ..inside });
        }
        self.coiterate(v, parallel, split_inner, Inside { loops: rest, ..inside })
    }

    /// The leaf: the `where` producers compute their temporaries first (outside a producer),
    /// then the assignment.
    fn leaf(&mut self, lhs: &Access, op: AssignOp, rhs: ExprId) -> Result<Vec<Stmt>, LowerError> {
        let mut out = Vec::new();
        if !self.in_producer {
            self.temporary_terms.clear();
            let sparse_result = self.assembly.is_some() || self.workspace.is_some() || self.ism.is_some();
            for p in self.producers.clone() {
                let t = self.temporary(p.lhs.tensor).expect("declared");
                out.push(Stmt::Decl(t, float(0.0)));
                // Into a sparse result, whether the producer adds a term.
                let terms = sparse_result.then(|| {
                    let name = format!("{}_terms", self.f.vars[t].name);
                    self.f.fresh_var(&name, ScalarType::Index)
                });
                let saved = (self.positions.clone(), self.bound.clone());
                self.in_producer = true;
                self.producing = terms;
                let code = self.nest(Inside { loops: &p.loops, lhs: &p.lhs, op: p.op, rhs: p.rhs });
                self.in_producer = false;
                self.producing = None;
                (self.positions, self.bound) = saved;
                let mut code = code?;
                let terms = terms.filter(|&terms| {
                    hoist_marks(&mut code, terms);
                    // Every run adds a term: nothing to test.
                    let always = code.contains(&mark(terms));
                    code.retain(|s| *s != mark(terms));
                    if !always {
                        out.push(Stmt::Decl(terms, int(0)));
                    }
                    !always
                });
                if sparse_result {
                    self.temporary_terms.push((p.lhs.tensor, terms));
                }
                out.extend(code);
            }
        }
        out.extend(self.assignment(lhs, op, rhs)?);
        Ok(out)
    }

    /// Whether the loops from `v` inward are reduction loops inside every result loop,
    /// accumulating into a dense result: they then sum into a register, stored once (`y[i] +=
    /// acc` after the loop, not per element).
    fn reduces_into_register(&self, v: IndexVarId, lhs: &Access, op: AssignOp) -> bool {
        op == AssignOp::Accumulate
            && self.accumulator.is_none()
            && !self.in_producer
            && !self.workspace.as_ref().is_some_and(|w| w.active)
            && self.temporary(lhs.tensor).is_none()
            // With `where` producers (computed at the leaf, inside these loops) only a sparse
            // result needs it — appended once per reduction, not once per iteration (found by
            // the differential tests: `A(i) = B(i,k) + C(j,k)` into a sparse vector).
            && (self.producers.is_empty() || self.assembly.is_some() || self.ism.is_some())
            && lhs.subscripts.iter().all(|t| t.as_var().is_some_and(|w| w != v && self.bound[w].is_some()))
    }

    /// The reduction loops `loops` summing into a register, then its store. Into a sparse
    /// result, the element is stored only where the reduction produced a term: an inner
    /// product whose rows share no coordinate stores nothing.
    fn register_reduction(&mut self, inside: Inside<'_>) -> Result<Vec<Stmt>, LowerError> {
        let Inside { loops, lhs, op, rhs } = inside;
        let scalar = self.value.scalar();
        let acc = self.f.var("acc", scalar);
        self.accumulator = Some(acc);
        let inner = self.nest(Inside { loops, lhs, op, rhs });
        self.accumulator = None;
        let mut out = vec![Stmt::Decl(acc, float(0.0))];
        let mut inner = inner?;
        let store = match &self.assembly {
            Some(a) => {
                let last = a.vars.last().copied().expect("a result level");
                a.append(self.bound[last].expect("bound"), var(acc))
            }
            // Every loop outside over a result variable: the sum is the element's whole
            // value, stored (no `+=`: the row then needs no buffer, and the compiler
            // vectorizes the loop around it: faster on a dense 3×3 convolution).
            // Not where ranges of the outer loop add into the same elements (a dot product).
            None => {
                let whole = self.repeating == 0
                    && self.reduction.is_none()
                    && self.bound.iter().all(|(w, _)| lhs.subscripts.iter().any(|t| t.as_var() == Some(w)));
                self.result_store(lhs, var(acc), !whole)?
            }
        };
        if self.assembly.is_none() && self.ism.is_none() {
            out.extend(inner);
            out.extend(store);
            return Ok(out);
        }
        let produced = self.f.fresh_var("terms", ScalarType::Index);
        mark_terms(&mut inner, acc, produced);
        hoist_marks(&mut inner, produced);
        if inner.contains(&mark(produced)) {
            // Every path reaches a term: no test needed.
            inner.retain(|s| *s != mark(produced));
            out.extend(inner);
            out.extend(store);
        } else {
            out.push(Stmt::Decl(produced, int(0)));
            out.extend(inner);
            out.push(Stmt::If { cond: bin(BinOp::Ne, var(produced), int(0)), then: store, otherwise: vec![] });
        }
        Ok(out)
    }

    /// The body of one row of a row range writing its own rows of a dense result: summed in
    /// a stack buffer where that pattern holds ([`Lowerer::accumulate_rows`]), else stored
    /// as it is, with the row zeroed first unless every element is stored exactly once.
    pub(super) fn row_body(&mut self, lhs: &Access, v: IndexVarId, loop_var: VarId, body: Vec<Stmt>) -> Vec<Stmt> {
        match self.accumulate_rows(lhs, v, loop_var, body) {
            Ok(rows) => rows,
            Err(mut body) => {
                // Every operand dense (each loop runs its whole range, no case
                // skips a coordinate) and every store of the result plain: each
                // element of the row is stored once, no zeros first (a dense 3×3
                // convolution spent a fifth of its time writing them).
                let vals = self.result_vals;
                let stored_once = self.producers.is_empty()
                    && self.workspace.is_none()
                    && self.ism.is_none()
                    && self.accesses.ids().all(|k| self.all_dense(k))
                    && crate::ir::any(&body, |s| matches!(s, Stmt::Store { array, .. } if *array == vals))
                    && !crate::ir::any(
                        &body,
                        |s| matches!(s, Stmt::Store { array, accumulate: true, .. } if *array == vals),
                    );
                if !stored_once {
                    let zero = self.zero_result(lhs, Some((v, loop_var)));
                    body.splice(0..0, zero);
                }
                body
            }
        }
    }
}
