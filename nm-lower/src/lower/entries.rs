//! A window loop and the loop that resolves it, run as one pass over the level's entries.
//!
//! For `O(j) += I(j+q) * F(q)` in the order `(q, j)` the nest walks one window of `I`'s row
//! per filter offset `q`, each found by two searches. The same pairs `(q, j)` come from one
//! walk over the entries `c` of the row, with `q` inside and `j = c - q`: no searches past the
//! first, and the filter's weights stay in registers. Every `O(j)` still receives its terms in
//! the order of `q` (entries come in the order of `c = j + q`), so the result is the same to
//! the bit. It pays most where a row holds few entries and the searches were most of the work
//! (BENCHMARKS.md's history, "a window loop and its resolving loop as one pass over entries").

use super::iterate::{Coordinates, Subsection, coefficient, lower_bound};
use super::reach::Reached;
use super::workspace::mark_range;
use super::{AccessId, Inside, LowerError, Lowerer};
use crate::ir::build::{bin, int, var};
use crate::ir::{BinOp, Expr, ScalarType, Stmt, VarId};
use nm_ir::notation::{AssignOp, ExprId, IndexVarId};

/// The largest filter whose offsets are written out one by one.
const UNROLLED: i64 = 8;

/// The most entries left in a row that a pass into a sparse result's workspace takes on where
/// it cannot mark an entry's outputs at once (a list of coordinates, coefficients other than 1,
/// loops inside, a filter wider than 64): it then marks `j = c - q` one after another, in one word of marks, each store
/// waiting for the last, where the windows mark entries far apart: on an image into DCSR, the
/// pass marking so on every row was slower than the windows at 80% and 95% sparsity.
pub(super) const FEW_ENTRIES: i64 = 8;

/// A window loop and its resolving loop as one pass over the entries.
pub(super) struct EntryPass {
    pub(super) pass: Vec<Stmt>,
    /// Where it runs only under a condition, else the windows do: over few entries into a
    /// sparse result's workspace (see [`FEW_ENTRIES`]).
    pub(super) when: Option<Expr>,
}

/// The loop over `v`, a window on access `k`'s level `l`, as [`Lowerer::nest`] opened it.
pub(super) struct WindowLoop<'a> {
    pub(super) v: IndexVarId,
    pub(super) loop_var: VarId,
    pub(super) level: (AccessId, usize),
    pub(super) subsection: &'a Subsection,
    /// The window iterator's position and end (the range [`Lowerer::open_iterators`] left).
    pub(super) cursor: (VarId, VarId),
    pub(super) crd: &'a Coordinates,
    /// The dense levels the loop over `v` locates.
    pub(super) dense: &'a [(AccessId, usize)],
}

/// What a pass over entries is made of (see [`Lowerer::entry_pass_shape`]).
struct PassShape<'r> {
    /// The resolving loop's variable, and the loops inside it.
    j: IndexVarId,
    inner: &'r [(IndexVarId, bool)],
    /// The window variable's and `j`'s coefficients in the subscript.
    cq: i64,
    cj: i64,
    /// The window's width and the window variable's extent (the filter's size).
    width: i64,
    filter: i64,
    /// The expression along `j`.
    e: ExprId,
    /// The levels the loop over `j` reaches.
    reached: Reached,
}

impl Lowerer<'_> {
    /// What the pass over entries of [`Self::window_by_entries`] needs, or `None` where it
    /// would change what the kernel computes or is not this simple case: `rest[0]` is the
    /// subscript's only other variable and nothing else sparse is reached along it; the
    /// assignment adds into a result that takes its terms in any order (a dense one, a row or
    /// sparse workspace), and `w.v` is not one of the result's coordinates.
    fn entry_pass_shape<'r>(
        &mut self,
        w: &WindowLoop<'_>,
        inside: Inside<'r>,
        reads: (&[AccessId], &[AccessId]),
    ) -> Option<PassShape<'r>> {
        let Inside { loops: rest, lhs, op, rhs } = inside;
        let Subsection::Window { term, coef: cq, width, size: filter } = w.subsection else { return None };
        let (cq, width, filter) = (*cq, *width, *filter);
        let (&(j, _), inner) = rest.split_first()?;
        let (k, l) = w.level;
        let order_free = match (&self.assembly, &self.workspace, &self.ism) {
            (_, Some(ws), _) => ws.active,
            (_, _, Some(_)) => true,
            (None, None, None) => true,
            (Some(_), None, None) => false,
        };
        let others: Vec<IndexVarId> = term.vars().filter(|&x| x != w.v && self.bound[x].is_none()).collect();
        let cj = coefficient(term, j);
        let operand = self.operand(k);
        let level = &operand.levels[l];
        if op != AssignOp::Accumulate
            || !order_free
            || self.in_producer
            || !self.producers.is_empty()
            || self.temporary(lhs.tensor).is_some()
            || lhs.subscripts.iter().any(|t| t.vars().any(|x| x == w.v))
            || self.cin.derivations.contains_key(&j)
            || others != [j]
            || cq <= 0
            || cj <= 0
            || width != cj * (self.size(j) as i64 - 1)
            || !level.is_unique()
            || !level.is_ordered()
        {
            return None;
        }
        // Along `j` (`v` bound): one lattice point, iterating this level alone.
        let [point] = self.planned_lattice(rhs, j).ok()? else { return None };
        let its: Vec<_> = point.iterators.iter().filter(|it| !it.full).collect();
        if !matches!(its.as_slice(), [it] if it.tensor == self.accesses[k].tensor && it.subscripts == self.accesses[k].subscripts && it.level == l)
        {
            return None;
        }
        let e = point.expr;
        let reached = match self.reached_levels(j, reads.0, reads.1, false, lhs, rhs) {
            Ok(r) if r.sparse == [(k, l)] && r.guided.is_empty() => r,
            _ => return None,
        };
        let resolves = match reached.subsections.as_slice() {
            [Subsection::Last { coef, .. }] => *coef == cj,
            _ => false,
        };
        if !resolves {
            return None;
        }
        Some(PassShape { j, inner, cq, cj, width, filter, e, reached })
    }

    /// The loops `w` and `rest[0]` as one pass over the entries of `w`'s level, or `None` where
    /// that would change what the kernel computes or is not this simple case (see
    /// [`Self::entry_pass_shape`]).
    pub(super) fn window_by_entries(
        &mut self,
        w: &WindowLoop<'_>,
        inside: Inside<'_>,
        reads: (&[AccessId], &[AccessId]),
    ) -> Result<Option<EntryPass>, LowerError> {
        let Inside { loops: rest, lhs, op, rhs } = inside;
        let Coordinates::Window { raw, base, .. } = w.crd else { return Ok(None) };
        let Some(PassShape { j, inner, cq, cj, width, filter, e, reached }) =
            self.entry_pass_shape(w, Inside { loops: rest, lhs, op, rhs }, reads)
        else {
            return Ok(None);
        };
        let (k, l) = w.level;
        let tname = self.access_name(k);
        let (p, end) = w.cursor;
        let mut out = Vec::new();
        // The entries any window reaches: from the cursor to the last window's end.
        let stop = self.f.fresh_var(&format!("{tname}{l}_last"), ScalarType::Index);
        out.push(Stmt::Decl(stop, var(p)));
        let past = bin(BinOp::Add, base.clone(), int(cq * (filter - 1) + width + 1));
        out.extend(lower_bound(&mut self.f, stop, end, raw, past));
        let at = self.f.fresh_var(&format!("{tname}{l}_e"), ScalarType::Index);
        let c = self.f.fresh_var(&format!("{tname}{l}_c"), ScalarType::Index);
        let (lo, hi) =
            (self.f.fresh_var("filter_lo", ScalarType::Index), self.f.fresh_var("filter_hi", ScalarType::Index));
        let divide = |e: Expr, d: i64| if d == 1 { e } else { bin(BinOp::Div, e, int(d)) };
        // `v` from `⌈(c - width) / cq⌉` (at least 0) through `⌊c / cq⌋` (below the filter's size):
        // truncation rounds a negative numerator up, and the `max` outweighs it then.
        let first = divide(bin(BinOp::Add, bin(BinOp::Sub, var(c), int(width)), int(cq - 1)), cq);
        let mut entry = vec![
            Stmt::Decl(c, bin(BinOp::Sub, raw.at(var(at)), base.clone())),
            Stmt::Decl(lo, bin(BinOp::Max, int(0), first)),
            Stmt::Decl(hi, bin(BinOp::Min, int(filter), bin(BinOp::Add, divide(var(c), cq), int(1)))),
        ];
        let jv = self.f.var(&self.cin.vars[j].name.clone(), ScalarType::Index);
        let t = self.f.fresh_var(&format!("{tname}{l}_t"), ScalarType::Index);
        let mut body = vec![Stmt::Decl(t, bin(BinOp::Sub, var(c), bin(BinOp::Mul, int(cq), var(w.loop_var))))];
        let mut resolved = vec![Stmt::Decl(jv, divide(var(t), cj))];
        // A narrow row workspace of `j` (no list) has an entry's outputs `c - hi + 1 ..= c - lo`
        // marked at once: a word or two, one store each, not one per offset waiting for the
        // last. Every row then takes the pass, against the windows: faster into CSF at every
        // sparsity and into DCSR at the highest, a little slower into DCSR below 99% (BENCHMARKS.md's
        // history, "a window loop and its resolving loop as one pass over entries").
        let marks = match self.workspace.as_ref().filter(|ws| ws.active) {
            // (At most 64 outputs, so at most two words: `mark_range`.)
            Some(ws) if ws.var == j && ws.list.is_none() && cq == 1 && cj == 1 && inner.is_empty() && filter <= 64 => {
                Some((ws.mark, ws.products))
            }
            _ => None,
        };
        if let Some((mark, products)) = marks {
            let (from, to) =
                (self.f.fresh_var("marks_from", ScalarType::Index), self.f.fresh_var("marks_to", ScalarType::Index));
            entry.push(Stmt::Decl(from, bin(BinOp::Sub, var(c), bin(BinOp::Sub, var(hi), int(1)))));
            entry.push(Stmt::Decl(to, bin(BinOp::Sub, var(c), var(lo))));
            entry.push(Stmt::Assign(products, bin(BinOp::Add, var(products), bin(BinOp::Sub, var(hi), var(lo)))));
            entry.push(mark_range(mark, from, to));
        }
        let saved = (self.positions.clone(), self.bound.clone());
        self.locate(&mut resolved, w.dense);
        self.bound[j] = Some(jv);
        self.positions[k][l] = Some(at);
        self.locate(&mut resolved, &reached.dense);
        resolved.extend(self.result_before(w.v, w.loop_var));
        resolved.extend(self.result_before(j, jv));
        if marks.is_some() {
            self.workspace.as_mut().expect("a workspace").marked = true;
        }
        let nested = self.nest(Inside { loops: inner, lhs, op, rhs: e });
        if let Some(ws) = self.workspace.as_mut() {
            ws.marked = false;
        }
        let lowered = nested.is_ok();
        if let Ok(nested) = nested {
            resolved.extend(nested);
            resolved.extend(self.result_after(j, jv));
            resolved.extend(self.result_after(w.v, w.loop_var));
        }
        (self.positions, self.bound) = saved;
        // (What the windows cannot lower either, they report.)
        if !lowered {
            return Ok(None);
        }
        if cj == 1 {
            body.extend(resolved);
        } else {
            // Only the entries at a multiple of `j`'s coefficient.
            let whole = bin(BinOp::Eq, bin(BinOp::Rem, var(t), int(cj)), int(0));
            body.push(Stmt::If { cond: whole, then: resolved, otherwise: vec![] });
        }
        if filter <= UNROLLED {
            // One block per offset: a loop here the C compiler vectorizes, and an entry's
            // vector store then overlaps the next entry's load (a loop here made the 3-D
            // convolution markedly slower than the windows).
            for q in 0..filter {
                let mut block = vec![Stmt::Decl(w.loop_var, int(q))];
                block.extend(body.iter().cloned());
                let live = bin(BinOp::And, bin(BinOp::Le, var(lo), int(q)), bin(BinOp::Lt, int(q), var(hi)));
                entry.push(Stmt::If { cond: live, then: block, otherwise: vec![] });
            }
        } else {
            entry.push(Stmt::For { var: w.loop_var, start: var(lo), end: var(hi), body, parallel: false });
        }
        out.push(Stmt::For { var: at, start: var(p), end: var(stop), body: entry, parallel: false });
        // (The level's range, not the pass's: no search before the windows.)
        let few = bin(BinOp::Le, bin(BinOp::Sub, var(end), var(p)), int(FEW_ENTRIES));
        let switch = marks.is_none() && (self.workspace.is_some() || self.ism.is_some());
        Ok(Some(EntryPass { pass: out, when: switch.then_some(few) }))
    }
}
