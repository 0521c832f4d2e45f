//! The subsection iterators of a compound subscript (`I(i+r, j+q)`, sparse convolution) on a
//! sorted compressed level. Along a variable the subscript has others left after, the loop
//! visits the values whose window `[base + coef·v, base + coef·v + width]` holds an entry
//! (`Subsection::Window`); along its last variable, the entries of the window the outer loops
//! left, each mapped back to the value that reaches it (`Subsection::Last`).

use super::{Coordinates, Opening, Subrange, lower_bound};
use crate::ir::build::{bin, int, load, var};
use crate::ir::{BinOp, Expr, ScalarType, Stmt, VarId};
use crate::lower::Lowerer;
use nm_ir::notation::{IndexTerm, IndexVarId};

/// The value of the resolving variable at a stored coordinate `raw`: `(raw - offset) / coef`.
pub(super) fn resolved(raw: Expr, offset: &Expr, coef: i64) -> Expr {
    let shifted = bin(BinOp::Sub, raw, offset.clone());
    if coef == 1 { shifted } else { bin(BinOp::Div, shifted, int(coef)) }
}

/// The first value from `next` on whose window reaches the stored coordinate `raw`.
pub(super) fn first_value(raw: Expr, base: &Expr, coef: i64, width: i64, next: VarId) -> Expr {
    // Truncating division rounds up here: a numerator at or below zero gives a value
    // at or below zero, which `next` (never negative) outweighs.
    let over = bin(BinOp::Sub, raw, bin(BinOp::Add, base.clone(), int(width)));
    let first = bin(BinOp::Div, bin(BinOp::Add, over, int(coef - 1)), int(coef));
    bin(BinOp::Max, var(next), first)
}

/// Leaves a subsection iterator on an entry it visits, or ends it: a resolving one skips the
/// entries between multiples of its coefficient; either one ends at the first entry past the
/// loop's last value, `size - 1` (entries are sorted, so every later one is past it too).
pub(in crate::lower) fn settle(p: VarId, end: VarId, crd: &Coordinates, size: i64) -> Vec<Stmt> {
    let live = bin(BinOp::Lt, var(p), var(end));
    let mut out = Vec::new();
    if let Coordinates::Mapped { raw, offset, coef } = crd
        && *coef != 1
    {
        let shifted = bin(BinOp::Sub, raw.at(var(p)), offset.clone());
        out.push(Stmt::While {
            cond: bin(
                BinOp::And,
                live.clone(),
                bin(
                    BinOp::And,
                    bin(BinOp::Lt, shifted.clone(), int(coef * size)),
                    bin(BinOp::Ne, bin(BinOp::Rem, shifted, int(*coef)), int(0)),
                ),
            ),
            body: vec![Stmt::Assign(p, bin(BinOp::Add, var(p), int(1)))],
        });
    }
    // (A resolving iterator's end is already its last entry before `offset + coef·size`.)
    if matches!(crd, Coordinates::Window { .. }) {
        out.push(Stmt::If {
            cond: bin(BinOp::And, live, bin(BinOp::Le, int(size), crd.at(var(p)))),
            then: vec![Stmt::Assign(end, var(p))],
            otherwise: vec![],
        });
    }
    out
}

/// A window iterator moving past the loop's value `loop_var`: the next window starts past
/// it, at its first entry at or past `base + coef·next`.
pub(super) fn advance(p: VarId, end: VarId, crd: &Coordinates, loop_var: VarId, size: i64) -> Vec<Stmt> {
    let Coordinates::Window { raw, base, coef, next, .. } = crd else { unreachable!("a window iterator") };
    let start = bin(BinOp::Add, base.clone(), bin(BinOp::Mul, int(*coef), var(*next)));
    let mut then = vec![
        Stmt::Assign(*next, bin(BinOp::Add, var(loop_var), int(1))),
        Stmt::While {
            cond: bin(BinOp::And, bin(BinOp::Lt, var(p), var(end)), bin(BinOp::Lt, raw.at(var(p)), start)),
            body: vec![Stmt::Assign(p, bin(BinOp::Add, var(p), int(1)))],
        },
    ];
    then.extend(settle(p, end, crd, size));
    then
}

impl Lowerer<'_> {
    /// How far a subscript's variables other than `v` and not bound yet can carry it: the
    /// width of its windows along `v`.
    pub(in crate::lower) fn reach(&self, term: &IndexTerm, v: IndexVarId) -> i64 {
        term.terms
            .iter()
            .filter(|(_, w)| *w != v && self.bound[*w].is_none())
            .map(|&(c, w)| c * (self.size(w) as i64 - 1).max(0))
            .sum()
    }

    /// Opens the iterator of `Subsection::Last`: the entries at `offset + coef·v`, v < size —
    /// those from the first at or past `offset` to the last before `offset + coef·size`.
    pub(in crate::lower) fn open_last(
        &mut self,
        at: &Opening,
        raw: Coordinates,
        (term, coef, size): (&IndexTerm, i64, i64),
        out: &mut Vec<Stmt>,
    ) -> Coordinates {
        let Opening { v, l, n, p, end, .. } = *at;
        let offset = self.affine(term, Some(v));
        // Searched from its parent's first entry (no window of an outer loop
        // narrowed it): start from where the last search of this parent ended,
        // when its offset was no larger (the paper's position-pair vectors, one
        // per parent position: the output-stationary order's windows slide).
        // (Scratch arrays are per thread under row ranges; not so under OpenMP.)
        let hints = match (&at.window, at.level_pos) {
            (None, Some(pos)) if !self.threaded => Some(self.search_hints(l, pos)),
            _ => None,
        };
        let parent = &at.parent;
        if let Some((hint_at, from)) = hints {
            let known = load(from, parent.clone());
            out.push(Stmt::If {
                cond: bin(
                    BinOp::And,
                    bin(BinOp::Ne, known.clone(), int(0)),
                    bin(BinOp::Le, known, bin(BinOp::Add, offset.clone(), int(1))),
                ),
                then: vec![Stmt::Assign(p, load(hint_at, parent.clone()))],
                otherwise: vec![],
            });
        }
        out.extend(lower_bound(&mut self.f, p, end, &raw, offset.clone()));
        if let Some((hint_at, from)) = hints {
            out.push(Stmt::Store { array: hint_at, index: parent.clone(), value: var(p), accumulate: false });
            out.push(Stmt::Store {
                array: from,
                index: parent.clone(),
                value: bin(BinOp::Add, offset.clone(), int(1)),
                accumulate: false,
            });
        }
        let stop = self.f.fresh_var(&format!("{}{l}_stop{n}", at.tname), ScalarType::Index);
        out.push(Stmt::Decl(stop, var(p)));
        let past = bin(BinOp::Add, offset.clone(), int(coef * size));
        out.extend(lower_bound(&mut self.f, stop, end, &raw, past));
        out.push(Stmt::Assign(end, var(stop)));
        let crd = Coordinates::Mapped { raw: Box::new(raw), offset, coef };
        out.extend(settle(p, end, &crd, size));
        crd
    }

    /// Opens the iterator of `Subsection::Window`: windows `[base + coef·v, base + coef·v +
    /// width]` for v = next, next + 1, ... Returns its coordinates and the range it hands the
    /// loops inside.
    pub(in crate::lower) fn open_window(
        &mut self,
        at: &Opening,
        raw: Coordinates,
        (term, coef, width, size): (&IndexTerm, i64, i64, i64),
        out: &mut Vec<Stmt>,
    ) -> (Coordinates, Subrange) {
        let Opening { v, l, n, p, end, .. } = *at;
        let base = self.affine(term, Some(v));
        let next = self.f.fresh_var(&format!("{}{l}_next{n}", at.tname), ScalarType::Index);
        let limit = self.f.fresh_var(&format!("{}{l}_limit{n}", at.tname), ScalarType::Index);
        out.push(Stmt::Decl(next, int(0)));
        out.push(Stmt::Decl(limit, var(end)));
        out.extend(lower_bound(&mut self.f, p, end, &raw, base.clone()));
        let crd = Coordinates::Window { raw: Box::new(raw), base, coef, width, next };
        out.extend(settle(p, end, &crd, size));
        // The window at each `v` starts at the cursor; the inner loops' searches
        // find where it ends (no scan for it here: a 999-wide row window would be
        // walked once per filter row).
        (crd, Subrange::Start(p, limit))
    }
}
