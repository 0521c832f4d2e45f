//! The rows iterator of a compound subscript (`Subsection::Rows`): a window on a compressed
//! level whose parent, a dense or compressed level, waits for a later loop (`I(i+r, j+q)` in
//! CSR along `j` before `r`). It keeps one window start per row the parent's subscript may
//! still reach, and visits the values whose window holds an entry in any of them.

use super::{Coordinates, RowsAdvance, Subrange, Subsection, coefficient, lower_bound};
use crate::ir::build::{bin, int, load, var};
use crate::ir::{BinOp, ElemType, Role, ScalarType, Stmt, VarId};
use crate::lower::{AccessId, Lowerer};
use nm_ir::notation::{IndexTerm, IndexVarId};

/// Moving on past the loop's value `loop_var`: `next` past it, then the steps.
pub(super) fn advance(advance: &RowsAdvance, loop_var: VarId) -> Vec<Stmt> {
    let mut then = vec![Stmt::Assign(advance.next, bin(BinOp::Add, var(loop_var), int(1)))];
    then.extend(advance.steps.clone());
    then
}

impl Lowerer<'_> {
    /// A rows iterator along `v` for access `k`, whose first unresolved level `l` (dense, or
    /// compressed: DCSR) waits for a later variable while level `l + 1` slides with `v` (see
    /// [`Subsection::Rows`]); `None` when that is not the case (or not supported: negative
    /// coefficients, more than 4096 rows, OpenMP threads sharing the starts).
    pub(in crate::lower) fn rows_subsection(
        &self,
        k: AccessId,
        l: usize,
        v: IndexVarId,
        consumer_reads: &[AccessId],
        split: bool,
    ) -> Option<Subsection> {
        if self.threaded || split || !consumer_reads.contains(&k) {
            return None;
        }
        let a = &self.accesses[k];
        let o = self.operands[a.tensor].as_ref()?;
        let levels = o.format.levels();
        let (parent, level) = (levels.get(l)?, levels.get(l + 1)?);
        let (above, below) = (&o.levels[l], &o.levels[l + 1]);
        // A compressed parent (DCSR) holds only some rows: those in the reach of its
        // subscript are a range of its positions, found by search.
        let parent_ok = above.is_dense() || (above.pos().is_some() && above.is_ordered() && above.is_unique());
        if !parent_ok || !below.is_ordered() || below.pos().is_none() {
            return None;
        }
        let (rows, term) = (&a.subscripts[parent.expr.dim()], &a.subscripts[level.expr.dim()]);
        let unbound = |w: IndexVarId| w != v && self.bound[w].is_none();
        if rows.vars().any(|w| w == v)
            || !rows.vars().any(unbound)
            || !term.vars().any(|w| w == v)
            || !term.vars().any(unbound)
            || rows.terms.iter().chain(&term.terms).any(|&(c, _)| c < 0)
        {
            return None;
        }
        let span = self.reach(rows, v) + 1;
        if span > 4096 {
            return None;
        }
        Some(Subsection::Rows {
            rows: rows.clone(),
            term: term.clone(),
            coef: coefficient(term, v),
            width: self.reach(term, v),
            size: self.size(v) as i64,
            span,
        })
    }

    /// A rows iterator's state and code: one window start per row (`starts[t]`, the first
    /// entry of row `first + t` at or past the window of `next`), and the smallest `v` from
    /// `next` on whose window holds an entry of some row. Returns the statements that start
    /// it, its coordinates, and the per-row starts for the loops inside.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::lower) fn rows_cursor(
        &mut self,
        k: AccessId,
        l: usize,
        v: IndexVarId,
        (rows, term): (&IndexTerm, &IndexTerm),
        (coef, width, size, span): (i64, i64, i64, i64),
        end: VarId,
        crd: &Coordinates,
    ) -> (Vec<Stmt>, Coordinates, Subrange) {
        let o = self.operand(k).clone();
        let tname = self.access_name(k);
        let levels = o.format.levels();
        // `l` is the compressed level; its parent `l - 1` waits for a later loop.
        let parent_level = l - 1;
        let grand = match parent_level.checked_sub(1) {
            None => int(0),
            Some(g) => var(self.positions[k][g].expect("resolved in order")),
        };
        let row0 = self.affine(rows, None);
        let mut init = Vec::new();
        // The parent's positions of the rows the subscript reaches: `first` and `count` of them.
        // Where the grandparent is followed along an outer loop, the parent's positions are
        // the children range it opened — empty where the grandparent has no entry there, so
        // that nothing is read past its arrays (found by the differential tests: an empty
        // `D(i, 2*k+l, j+l+2, l)` read `D1_pos` one past its end).
        let children = self.windows.iter().rev().find_map(|w| match w {
            &(a, b, Subrange::Children(from, to)) if a == k && b == parent_level => Some((from, to)),
            _ => None,
        });
        let (first, count) = match o.levels[parent_level].pos() {
            // Dense: every row, at grand · size + row (none where a followed grandparent has
            // no entry).
            None => match children {
                Some((from, to)) => {
                    (bin(BinOp::Add, var(from), row0), bin(BinOp::Min, int(span), bin(BinOp::Sub, var(to), var(from))))
                }
                None => {
                    let parent_size = o.shape[levels[parent_level].expr.dim()] as i64;
                    (bin(BinOp::Add, bin(BinOp::Mul, grand, int(parent_size)), row0), int(span))
                }
            },
            // Compressed: the stored rows in [row0, row0 + span), by two searches.
            Some(_) => {
                let rows_crd = Coordinates::Array(o.levels[parent_level].crd().expect("a compressed level"));
                let (lo, hi) = (
                    self.f.fresh_var(&format!("{tname}{parent_level}_rows"), ScalarType::Index),
                    self.f.fresh_var(&format!("{tname}{parent_level}_rows_end"), ScalarType::Index),
                );
                let limit = self.f.fresh_var(&format!("{tname}{parent_level}_rows_limit"), ScalarType::Index);
                let (start, end) = self.level_range(&o, k, parent_level, grand);
                init.push(Stmt::Decl(lo, start));
                init.push(Stmt::Decl(limit, end));
                init.extend(lower_bound(&mut self.f, lo, limit, &rows_crd, row0.clone()));
                init.push(Stmt::Decl(hi, var(lo)));
                init.extend(lower_bound(&mut self.f, hi, limit, &rows_crd, bin(BinOp::Add, row0, int(span))));
                (var(lo), bin(BinOp::Sub, var(hi), var(lo)))
            }
        };
        let pos = o.levels[l].pos().expect("a compressed level");
        // One per rows iterator: a level may have several (found by the differential tests,
        // `C(2*l+k+2, 2*i+j)` read through a copy: two arrays of one name did not compile).
        let starts = self.f.fresh_array(&format!("{tname}{l}_starts"), ElemType::I64, Role::Scratch, true);
        self.prologue.push(Stmt::Resize { array: starts, len: int(span) });
        let base = self.affine(term, Some(v));
        let state = self.f.fresh_var(&format!("{tname}{l}_first{}", self.cin.vars[v].name), ScalarType::Index);
        let next = self.f.fresh_var(&format!("{tname}{l}_next"), ScalarType::Index);
        let row_end = |t: VarId| load(pos, bin(BinOp::Add, bin(BinOp::Add, first.clone(), var(t)), int(1)));
        init.extend([Stmt::Decl(next, int(0)), Stmt::Decl(state, int(0))]);
        // Every row's first entry at or past the first window.
        let t = self.f.fresh_var("row_t", ScalarType::Index);
        let (q, q_end) = (self.f.fresh_var("row_p", ScalarType::Index), self.f.fresh_var("row_end", ScalarType::Index));
        let mut body =
            vec![Stmt::Decl(q, load(pos, bin(BinOp::Add, first.clone(), var(t)))), Stmt::Decl(q_end, row_end(t))];
        body.extend(lower_bound(&mut self.f, q, q_end, crd, base.clone()));
        body.push(Stmt::Store { array: starts, index: var(t), value: var(q), accumulate: false });
        init.push(Stmt::For { var: t, start: int(0), end: count.clone(), body, parallel: false });
        // The smallest `v` from `next` on with an entry in its window, in `state` (`size`: none).
        let smallest = {
            let t = self.f.fresh_var("row_t", ScalarType::Index);
            let at = load(starts, var(t));
            let over = bin(BinOp::Sub, crd.at(at.clone()), bin(BinOp::Add, base.clone(), int(width)));
            let candidate =
                bin(BinOp::Max, var(next), bin(BinOp::Div, bin(BinOp::Add, over, int(coef - 1)), int(coef)));
            vec![
                Stmt::Assign(state, int(size)),
                Stmt::For {
                    var: t,
                    start: int(0),
                    end: count.clone(),
                    body: vec![Stmt::If {
                        cond: bin(BinOp::Lt, at, row_end(t)),
                        then: vec![Stmt::Assign(state, bin(BinOp::Min, var(state), candidate))],
                        otherwise: vec![],
                    }],
                    parallel: false,
                },
                Stmt::If {
                    cond: bin(BinOp::Le, int(size), var(state)),
                    then: vec![Stmt::Assign(end, int(0))],
                    otherwise: vec![],
                },
            ]
        };
        init.extend(smallest.clone());
        // Moving on: every row's start past the window of `next`, then the smallest again.
        let t = self.f.fresh_var("row_t", ScalarType::Index);
        let at = load(starts, var(t));
        let start = bin(BinOp::Add, base.clone(), bin(BinOp::Mul, int(coef), var(next)));
        let mut steps = vec![Stmt::For {
            var: t,
            start: int(0),
            end: count,
            body: vec![Stmt::While {
                cond: bin(
                    BinOp::And,
                    bin(BinOp::Lt, at.clone(), row_end(t)),
                    bin(BinOp::Lt, crd.at(at.clone()), start),
                ),
                body: vec![Stmt::Store {
                    array: starts,
                    index: var(t),
                    value: bin(BinOp::Add, at.clone(), int(1)),
                    accumulate: false,
                }],
            }],
            parallel: false,
        }];
        steps.extend(smallest);
        let coordinates = Coordinates::Rows { state, advance: RowsAdvance { next, steps } };
        (init, coordinates, Subrange::Rows { starts, first })
    }
}
