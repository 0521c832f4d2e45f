//! Iterating a compressed level by its non-empty subsections, for compound subscripts
//! (`I(i+r, j+q)`, sparse convolution): where an iterator's coordinates come from, how
//! the loop of a variable reaches the level, and the rows iterators that keep one window
//! start per row of an outer level.

use super::Lowerer;
use crate::ir::build::{bin, int, load, var};
use crate::ir::{ArrayId, BinOp, ElemType, Expr, Function, Role, ScalarType, Stmt, VarId};
use nm_format::LevelKind;
use nm_ir::id::Id;
use nm_ir::notation::IndexVarId;

/// Where an iterator's coordinates come from.
#[derive(Clone, Debug)]
pub(super) enum Coordinates {
    /// `crd[p]`.
    Array(ArrayId),
    /// A structured N:M level: position `p` is kept entry `(p - base) mod N` of block
    /// `(p - base) / N`, at offset `meta[p]` (⌈log2 M⌉ bits, packed in 64-bit words).
    Structured { meta: ArrayId, n: u32, m: u32, base: Expr },
    /// A compound subscript resolved by this loop: the stored coordinate is
    /// `offset + coef·v`, so `v = (raw - offset) / coef` (entries that give no such `v` are
    /// skipped, see [`settle`]).
    Mapped { raw: Box<Coordinates>, offset: Expr, coef: i64 },
    /// A compound subscript with variables left after this loop: the loop visits the values of
    /// `v`, from `next` on, whose window `[base + coef·v, base + coef·v + width]` holds an
    /// entry. For the entry at `p` (the window's first) that is the larger of `next` and
    /// `⌈(raw - base - width) / coef⌉`.
    Window { raw: Box<Coordinates>, base: Expr, coef: i64, width: i64, next: VarId },
    /// A rows iterator (`Subsection::Rows`): its coordinate is kept in `state`, recomputed by
    /// `advance` after `next` moves past the loop's value.
    Rows { state: VarId, advance: RowsAdvance },
}

/// How a rows iterator moves on: set `next`, then run `steps` (move every row's window start
/// past `next`'s window start, recompute the smallest `v`, end when there is none).
#[derive(Clone, Debug)]
pub(super) struct RowsAdvance {
    pub(super) next: VarId,
    pub(super) steps: Vec<Stmt>,
}

impl Coordinates {
    /// The coordinate at position `p`.
    pub(super) fn at(&self, p: Expr) -> Expr {
        match self {
            Coordinates::Array(crd) => load(*crd, p),
            Coordinates::Structured { meta, n, m, base } => {
                let bits = nm_format::metadata_bits(*m) as i64;
                // Positions are never negative: powers of two divide by shifts (a signed
                // division by 2 or 64 is a shift plus a sign fix-up in C).
                let divide = |e: Expr, d: i64| {
                    if d > 0 && (d as u64).is_power_of_two() {
                        bin(BinOp::Shr, e, int(d.trailing_zeros() as i64))
                    } else {
                        bin(BinOp::Div, e, int(d))
                    }
                };
                let block = divide(bin(BinOp::Sub, p.clone(), base.clone()), *n as i64);
                let offset = if bits == 0 {
                    int(0)
                } else {
                    // Bit `p·bits` of the words, reaching into the next word when it straddles two.
                    let bit = bin(BinOp::Mul, p, int(bits));
                    let word = divide(bit.clone(), 64);
                    let shift = bin(BinOp::BitAnd, bit, int(63));
                    let low = bin(BinOp::Shr, load(*meta, word.clone()), shift.clone());
                    let high = bin(
                        BinOp::Shl,
                        load(*meta, bin(BinOp::Add, word, int(1))),
                        bin(BinOp::Sub, int(64), shift.clone()),
                    );
                    // A width that divides 64 (nv24's 2 bits, M = 16's 4) never straddles.
                    let joined = if 64 % bits == 0 {
                        low
                    } else {
                        let straddles = bin(BinOp::Lt, int(64 - bits), shift);
                        Expr::Select(Box::new(straddles), Box::new(bin(BinOp::BitOr, low.clone(), high)), Box::new(low))
                    };
                    bin(BinOp::BitAnd, joined, int((1i64 << bits) - 1))
                };
                bin(BinOp::Add, bin(BinOp::Mul, block, int(*m as i64)), offset)
            }
            Coordinates::Mapped { raw, offset, coef } => {
                let shifted = bin(BinOp::Sub, raw.at(p), offset.clone());
                if *coef == 1 { shifted } else { bin(BinOp::Div, shifted, int(*coef)) }
            }
            Coordinates::Rows { state, .. } => var(*state),
            Coordinates::Window { raw, base, coef, width, next } => {
                // Truncating division rounds up here: a numerator at or below zero gives a value
                // at or below zero, which `next` (never negative) outweighs.
                let over = bin(BinOp::Sub, raw.at(p), bin(BinOp::Add, base.clone(), int(*width)));
                let first = bin(BinOp::Div, bin(BinOp::Add, over, int(coef - 1)), int(*coef));
                bin(BinOp::Max, var(*next), first)
            }
        }
    }
}

impl Coordinates {
    /// The coordinate stored at position `p` (a segment is a run of equal ones; two stored
    /// coordinates may map to one loop value, `(raw - offset) / coef` truncating).
    pub(super) fn stored(&self, p: Expr) -> Expr {
        match self {
            Coordinates::Mapped { raw, .. } | Coordinates::Window { raw, .. } => raw.stored(p),
            _ => self.at(p),
        }
    }
}

/// The coefficient of `v` in `term`.
pub(super) fn coefficient(term: &nm_ir::notation::IndexTerm, v: IndexVarId) -> i64 {
    term.terms.iter().filter(|(_, w)| *w == v).map(|(c, _)| c).sum()
}

/// Moves `p` to the first position in `[p, end)` whose coordinate is at least `target`
/// (binary search; the level's coordinates are sorted). The two answers a convolution asks
/// for most — the range's first entry (a window already starts there) and its end (a window
/// reaching past the row) — are checked first, in O(1), then a few entries forward from the
/// start and back from the end: a search per filter position cost a convolution a quarter of
/// its time.
pub(super) fn lower_bound(f: &mut Function, p: VarId, end: VarId, raw: &Coordinates, target: Expr) -> Vec<Stmt> {
    let high = f.fresh_var("high", ScalarType::Index);
    let mid = f.fresh_var("mid", ScalarType::Index);
    let top = f.fresh_var("top", ScalarType::Index);
    let search = vec![
        Stmt::Decl(high, var(top)),
        Stmt::While {
            cond: bin(BinOp::Lt, var(p), var(high)),
            body: vec![
                Stmt::Decl(mid, bin(BinOp::Div, bin(BinOp::Add, var(p), var(high)), int(2))),
                Stmt::If {
                    cond: bin(BinOp::Lt, raw.at(var(mid)), target.clone()),
                    then: vec![Stmt::Assign(p, bin(BinOp::Add, var(mid), int(1)))],
                    otherwise: vec![Stmt::Assign(high, var(mid))],
                },
            ],
        },
    ];
    // A few steps forward first: a window slid by one usually moves by as few entries.
    let steps = f.fresh_var("steps", ScalarType::Index);
    let mut probe = vec![
        Stmt::Decl(steps, int(0)),
        Stmt::While {
            cond: bin(BinOp::And, bin(BinOp::Lt, var(steps), int(4)), bin(BinOp::Lt, raw.at(var(p)), target.clone())),
            body: vec![
                Stmt::Assign(p, bin(BinOp::Add, var(p), int(1))),
                Stmt::Assign(steps, bin(BinOp::Add, var(steps), int(1))),
            ],
        },
    ];
    // Then a few steps back from the end: a window nearly as long as the row (a convolution's
    // window is the row less the filter) ends within a few entries of the row's end.
    let back = vec![
        Stmt::Decl(top, bin(BinOp::Sub, var(end), int(1))),
        Stmt::Assign(steps, int(0)),
        Stmt::While {
            cond: bin(
                BinOp::And,
                bin(BinOp::And, bin(BinOp::Lt, var(steps), int(4)), bin(BinOp::Lt, var(p), var(top))),
                bin(BinOp::Le, target.clone(), raw.at(bin(BinOp::Sub, var(top), int(1)))),
            ),
            body: vec![
                Stmt::Assign(top, bin(BinOp::Sub, var(top), int(1))),
                Stmt::Assign(steps, bin(BinOp::Add, var(steps), int(1))),
            ],
        },
        // `top` holds an entry at least the target; the one before it is below it (the answer)
        // unless the steps ran out first: then the answer is in (p, top].
        Stmt::If {
            cond: bin(BinOp::Lt, raw.at(bin(BinOp::Sub, var(top), int(1))), target.clone()),
            then: vec![Stmt::Assign(p, var(top))],
            otherwise: search,
        },
    ];
    probe.push(Stmt::If { cond: bin(BinOp::Lt, raw.at(var(p)), target.clone()), then: back, otherwise: vec![] });
    let last = bin(BinOp::Sub, var(end), int(1));
    vec![Stmt::If {
        cond: bin(BinOp::And, bin(BinOp::Lt, var(p), var(end)), bin(BinOp::Lt, raw.at(var(p)), target.clone())),
        then: vec![Stmt::If {
            cond: bin(BinOp::Lt, raw.at(last), target),
            then: vec![Stmt::Assign(p, var(end))],
            // The answer is in (p, end - 1]: the last entry is at least the target.
            otherwise: probe,
        }],
        otherwise: vec![],
    }]
}

/// Leaves a subsection iterator on an entry it visits, or ends it: a resolving one skips the
/// entries between multiples of its coefficient; either one ends at the first entry past the
/// loop's last value, `size - 1` (entries are sorted, so every later one is past it too).
pub(super) fn settle(p: VarId, end: VarId, crd: &Coordinates, size: i64) -> Vec<Stmt> {
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

/// How the loop of `v` reaches a compressed level it iterates (see [`Coordinates`]).
#[derive(Clone, Debug)]
pub(super) enum Subsection {
    /// Its subscript is `v`.
    Plain,
    /// A compound subscript whose other variables are bound: `coef` is `v`'s coefficient,
    /// `size` its extent.
    Last { term: nm_ir::notation::IndexTerm, coef: i64, size: i64 },
    /// A compound subscript with variables still unbound, whose values span `width`.
    Window { term: nm_ir::notation::IndexTerm, coef: i64, width: i64, size: i64 },
    /// A window (as `Window`) on a compressed level whose parent, a dense or compressed
    /// level, is not resolved yet (`I(i+r, j+q)` in CSR along `j` before `r`): the loop visits the `v`
    /// whose window holds an entry in any of the `span` rows the parent's subscript `rows`
    /// may still reach, keeping one window start per row (the paper's position-pair vectors).
    Rows {
        rows: nm_ir::notation::IndexTerm,
        term: nm_ir::notation::IndexTerm,
        coef: i64,
        width: i64,
        size: i64,
        span: i64,
    },
}

/// Where an outer loop left a compressed level's range: a window start and the level's end in
/// variables, or one start per row of an unresolved parent (`Subsection::Rows`), indexed by
/// the parent's position less `first`.
#[derive(Clone, Debug)]
pub(super) enum Subrange {
    Start(VarId, VarId),
    /// The children of a level a `where` producer reads along an outer loop (see
    /// `Lowering::guide`): `[from, to)`, empty where that level has no entry.
    Children(VarId, VarId),
    Rows {
        starts: ArrayId,
        first: Expr,
    },
}

impl Lowerer<'_> {
    /// How far a subscript's variables other than `v` and not bound yet can carry it: the
    /// width of its windows along `v`.
    pub(super) fn reach(&self, term: &nm_ir::notation::IndexTerm, v: IndexVarId) -> i64 {
        term.terms
            .iter()
            .filter(|(_, w)| *w != v && self.bound[w.index()].is_none())
            .map(|&(c, w)| c * (self.size(w) as i64 - 1).max(0))
            .sum()
    }

    /// A rows iterator along `v` for access `k`, whose first unresolved level `l` (dense, or
    /// compressed: DCSR) waits for a later variable while level `l + 1` slides with `v` (see
    /// [`Subsection::Rows`]); `None` when that is not the case (or not supported: negative
    /// coefficients, more than 4096 rows, OpenMP threads sharing the starts).
    pub(super) fn rows_subsection(
        &self,
        k: usize,
        l: usize,
        v: IndexVarId,
        consumer_reads: &[usize],
        split: bool,
    ) -> Option<Subsection> {
        if self.threaded || split || !consumer_reads.contains(&k) {
            return None;
        }
        let a = &self.accesses[k];
        let o = self.operands[a.tensor.index()].as_ref()?;
        let levels = o.format.levels();
        let (parent, level) = (levels.get(l)?, levels.get(l + 1)?);
        let ordered = matches!(level.kind, LevelKind::Compressed(p) if p.ordered);
        // A compressed parent (DCSR) holds only some rows: those in the reach of its
        // subscript are a range of its positions, found by search.
        let parent_ok = match parent.kind {
            LevelKind::Dense => true,
            LevelKind::Compressed(p) => p.ordered && p.unique && o.pos[l].is_some(),
            _ => false,
        };
        if !parent_ok || !ordered || o.pos[l + 1].is_none() {
            return None;
        }
        let (rows, term) = (&a.subscripts[parent.expr.dim()], &a.subscripts[level.expr.dim()]);
        let unbound = |w: IndexVarId| w != v && self.bound[w.index()].is_none();
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
    pub(super) fn rows_cursor(
        &mut self,
        k: usize,
        l: usize,
        v: IndexVarId,
        (rows, term): (&nm_ir::notation::IndexTerm, &nm_ir::notation::IndexTerm),
        (coef, width, size, span): (i64, i64, i64, i64),
        end: VarId,
        crd: &Coordinates,
    ) -> (Vec<Stmt>, Coordinates, Subrange) {
        let o = self.operands[self.accesses[k].tensor.index()].clone().expect("decomposed");
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
        let (first, count) = match o.pos[parent_level] {
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
                let rows_crd = Coordinates::Array(o.crd[parent_level].expect("a compressed level"));
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
        let pos = o.pos[l].expect("a compressed level");
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

    /// The hint arrays of a searched level (created once, zeroed when the kernel starts): per
    /// parent position, where its last search ended and 1 + the coordinate it searched for.
    /// They belong to the tensor's level, not to one access: every access of the tensor may
    /// share them, as a search for a coordinate may start wherever a search for a smaller
    /// one in the same parent ended, whichever access made it.
    pub(super) fn search_hints(&mut self, l: usize, pos: ArrayId) -> (ArrayId, ArrayId) {
        let tname = match &self.f.arrays[pos].role {
            Role::Pos { tensor, .. } => tensor.clone(),
            _ => self.f.arrays[pos].name.clone(),
        };
        if let Some(&(_, _, at, from)) = self.hints.iter().find(|h| h.0 == pos && h.1 == l) {
            return (at, from);
        }
        let at = self.f.fresh_array(&format!("{tname}{l}_hint_at"), ElemType::I64, Role::Scratch, true);
        let from = self.f.fresh_array(&format!("{tname}{l}_hint_from"), ElemType::I64, Role::Scratch, true);
        for array in [at, from] {
            self.prologue.push(Stmt::Resize { array, len: Expr::Len(pos) });
            let q = self.f.var("hint_q", ScalarType::Index);
            self.prologue.push(Stmt::For {
                var: q,
                start: int(0),
                end: Expr::Len(pos),
                body: vec![Stmt::Store { array, index: var(q), value: int(0), accumulate: false }],
                parallel: false,
            });
        }
        self.hints.push((pos, l, at, from));
        (at, from)
    }

    /// Locates every dense level in `list`: position = parent · size + coordinate, the
    /// coordinate being the level's subscript (every variable of it bound).
    pub(super) fn locate(&mut self, body: &mut Vec<Stmt>, list: &[(usize, usize)]) {
        for &(k, l) in list {
            let op = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
            let dim = op.format.levels()[l].expr.dim();
            let size = op.shape[dim] as i64;
            let coordinate = self.affine(&self.accesses[k].subscripts[dim], None);
            let parent = if l == 0 { int(0) } else { var(self.positions[k][l - 1].expect("resolved in order")) };
            let p = self.f.var(&format!("{}{l}_p{k}", self.access_name(k)), ScalarType::Index);
            body.push(Stmt::Decl(p, bin(BinOp::Add, bin(BinOp::Mul, parent, int(size)), coordinate)));
            self.positions[k][l] = Some(p);
        }
    }

    /// A subscript's value from the loop variables bound so far, leaving out `except` and any
    /// variable not bound yet (a window's lowest coordinate).
    pub(super) fn affine(&self, term: &nm_ir::notation::IndexTerm, except: Option<IndexVarId>) -> Expr {
        let mut e = int(term.constant);
        let mut first = term.constant == 0;
        for &(c, w) in &term.terms {
            let Some(lv) = self.bound[w.index()].filter(|_| Some(w) != except) else { continue };
            let t = if c == 1 { var(lv) } else { bin(BinOp::Mul, int(c), var(lv)) };
            e = if first { t } else { bin(BinOp::Add, e, t) };
            first = false;
        }
        e
    }
}
