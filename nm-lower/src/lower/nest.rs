//! The loop nest: one loop per variable, co-iterating the compressed levels it reaches as
//! the merge lattice says; a `split`'s blocks (ranges of them on threads where the variable
//! sums into a dense result), a `fuse` of dense loops, or the positions of a `pos` variable.

use super::entries::{EntryPass, WindowLoop};
use super::subsection::{Coordinates, Subrange, Subsection, coefficient, lower_bound, settle};
use super::{LowerError, Lowerer, Operand, PositionSpace, is_factor, refuse};
use crate::ir::build::{bin, float, int, load, var};
use crate::ir::{BinOp, ElemType, Expr, Role, ScalarType, Stmt, VarId};
use nm_format::LevelKind;
use nm_ir::concrete::Derivation;
use nm_ir::id::Id;
use nm_ir::lattice::MergeLattice;
use nm_ir::notation::{Access, AssignOp, ExprId, IndexVarId, Scope};

/// A loop's sparse iterators (see [`Lowerer::open_iterators`]), one entry each.
#[derive(Default)]
struct Iterators {
    /// What opens them, before the loop.
    setup: Vec<Stmt>,
    /// Position, end, coordinate variables and where the coordinates come from.
    cursors: Vec<(VarId, VarId, VarId, Coordinates)>,
    /// First position and one past the last.
    ranges: Vec<(Expr, Expr)>,
    /// The end of each iterator's segment (when segmented).
    segment_ends: Vec<VarId>,
    /// What a subsection iterator hands the loops inside, where it stands on a value.
    subranges: Vec<Option<Subrange>>,
    /// Whether an iterator's end was moved in, to the loop's range (see `open_iterators`).
    narrowed: bool,
}

/// The levels a loop reaches (see [`Lowerer::reached_levels`]): `(access, level)` pairs.
#[derive(Default)]
pub(super) struct Reached {
    /// Iterated: compressed levels, each with how (the same index in `subsections`).
    pub(super) sparse: Vec<(usize, usize)>,
    /// Located.
    pub(super) dense: Vec<(usize, usize)>,
    pub(super) subsections: Vec<Subsection>,
    /// Read by a `where` producer along this loop.
    pub(super) guided: Vec<(usize, usize)>,
}

/// `produced = 1`: a term reached the accumulator.
pub(super) fn mark(produced: VarId) -> Stmt {
    Stmt::Assign(produced, int(1))
}

/// Sets `produced` after every statement that adds a term into `acc`.
fn mark_terms(body: &mut Vec<Stmt>, acc: VarId, produced: VarId) {
    let mut at = 0;
    while at < body.len() {
        match &mut body[at] {
            Stmt::Assign(v, _) if *v == acc => {
                body.insert(at + 1, mark(produced));
                at += 1;
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => mark_terms(body, acc, produced),
            Stmt::If { then, otherwise, .. } => {
                mark_terms(then, acc, produced);
                mark_terms(otherwise, acc, produced);
            }
            _ => {}
        }
        at += 1;
    }
}

/// Moves each mark that a `for` loop's body sets on every iteration before the loop, as
/// `if start < end { mark }`, innermost loops first: the loop then keeps the shape of a plain
/// reduction (see `partial_sums`), and a nest of loops that always add a term ends with the
/// mark at its top, unconditional.
fn hoist_marks(body: &mut Vec<Stmt>, produced: VarId) {
    let mut at = 0;
    while at < body.len() {
        let hoisted = match &mut body[at] {
            Stmt::For { start, end, body: inner, .. } => {
                hoist_marks(inner, produced);
                let always = |list: &mut Vec<Stmt>| {
                    let found = list.contains(&mark(produced)) && !list.contains(&Stmt::Break);
                    if found {
                        list.retain(|s| *s != mark(produced));
                    }
                    found
                };
                // A dense loop's body sits in `if 1 { ... }` (a locate that always holds).
                let nested = inner.iter_mut().any(|s| match s {
                    Stmt::If { cond: Expr::Int(1), then, otherwise } if otherwise.is_empty() => always(then),
                    _ => false,
                });
                (always(inner) || nested).then(|| match (&*start, &*end) {
                    (Expr::Int(a), Expr::Int(b)) if a < b => mark(produced),
                    _ => Stmt::If {
                        cond: bin(BinOp::Lt, start.clone(), end.clone()),
                        then: vec![mark(produced)],
                        otherwise: vec![],
                    },
                })
            }
            Stmt::While { body: inner, .. } => {
                hoist_marks(inner, produced);
                None
            }
            Stmt::If { cond, then, otherwise } => {
                hoist_marks(then, produced);
                hoist_marks(otherwise, produced);
                // `if 1 { mark }`: the mark holds.
                (matches!(cond, Expr::Int(1)) && then.contains(&mark(produced))).then(|| {
                    then.retain(|s| *s != mark(produced));
                    mark(produced)
                })
            }
            _ => None,
        };
        if let Some(m) = hoisted {
            body.insert(at, m);
            at += 1;
        }
        at += 1;
    }
}

impl Lowerer<'_> {
    /// The loops from the first of `loops` inward, then the assignment of `rhs`.
    ///
    /// Along each variable, the merge lattice of `rhs` decides the loop: a `for` over every
    /// coordinate when some point has no sparse iterator (a dense operand, a constant), with a
    /// case per point; otherwise one `while` per lattice point over its sparse iterators,
    /// with a case per sub-point, taking the smallest coordinate and advancing the iterators
    /// that stand on it (taco's co-iteration).
    pub(super) fn nest(
        &mut self,
        loops: &[(IndexVarId, bool)],
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        if self.workspace.as_ref().is_some_and(|w| !w.active && !self.in_producer && self.depth() == w.outer) {
            return self.workspace_region(loops, lhs, op, rhs);
        }
        let Some((&(mut v, parallel), rest)) = loops.split_first() else {
            let mut out = Vec::new();
            if !self.in_producer {
                // The `where` producers compute their temporaries first.
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
                    let code = self.nest(&p.loops, &p.lhs, p.op, p.rhs);
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
            return Ok(out);
        };
        // Reduction loops inside every result loop, accumulating into a dense result: sum
        // into a register and store once (`y[i] += acc` after the loop, not per element).
        let reduces = op == AssignOp::Accumulate
            && self.accumulator.is_none()
            && !self.in_producer
            && !self.workspace.as_ref().is_some_and(|w| w.active)
            && self.temporary(lhs.tensor).is_none()
            // With `where` producers (computed at the leaf, inside these loops) only a sparse
            // result needs it — appended once per reduction, not once per iteration (found by
            // the differential tests: `A(i) = B(i,k) + C(j,k)` into a sparse vector).
            && (self.producers.is_empty() || self.assembly.is_some() || self.ism.is_some())
            && lhs.subscripts.iter().all(|t| t.as_var().is_some_and(|w| w != v && self.bound[w.index()].is_some()));
        if reduces {
            let scalar = self.value.scalar();
            let acc = self.f.var("acc", scalar);
            self.accumulator = Some(acc);
            let inner = self.nest(loops, lhs, op, rhs);
            self.accumulator = None;
            let mut out = vec![Stmt::Decl(acc, float(0.0))];
            let mut inner = inner?;
            let store = match &self.assembly {
                Some(a) => {
                    let last = a.vars.last().copied().expect("a result level");
                    a.append(self.bound[last.index()].expect("bound"), var(acc))
                }
                // Every loop outside over a result variable: the sum is the element's whole
                // value, stored (no `+=`: the row then needs no buffer, and the compiler
                // vectorizes the loop around it: faster on a dense 3×3 convolution).
                // Not where ranges of the outer loop add into the same elements (a dot product).
                None => {
                    let whole = self.repeating == 0
                        && self.reduction.is_none()
                        && self.bound.iter().enumerate().all(|(w, b)| {
                            b.is_none() || lhs.subscripts.iter().any(|t| t.as_var().is_some_and(|x| x.index() == w))
                        });
                    self.result_store(lhs, var(acc), !whole)?
                }
            };
            if self.assembly.is_none() && self.ism.is_none() {
                out.extend(inner);
                out.extend(store);
                return Ok(out);
            }
            // A sparse result's element is stored once, where the reduction produced a term: an
            // inner product whose rows share no coordinate stores nothing.
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
            return Ok(out);
        }
        // `split(i, i0, i1, c)`: `i0` counts blocks of `c` coordinates; `i1` walks one block as
        // the loop over `i` (i = i0·c + i1, stopping at the end of `i`).
        let mut split_inner = None;
        match self.cin.derivations.get(&v) {
            Some(&Derivation::Split { parent, outer: true, factor }) => {
                return self.block_loop(v, parent, factor, parallel, rest, lhs, op, rhs);
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
                return self.fused_loop(v, (outer, inner), parallel, rest, lhs, op, rhs);
            }
            _ => {}
        }
        if let Some(ps) = self.position_space(v) {
            return self.position_loop(ps, split_inner, rest, lhs, op, rhs);
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
            return self.blocked_nest(k, v, rest, lhs, op, rhs);
        }
        let name = self.cin.vars[v].name.clone();
        let consumer_reads = self.reads(rhs);
        let mut reads = consumer_reads.clone();
        if !self.in_producer {
            // Producers run inside these loops: their operands' dense levels are located here.
            for p in self.producers.clone() {
                reads.extend(self.reads(p.rhs));
            }
            reads.sort_unstable();
            reads.dedup();
        }
        let Reached { sparse, dense, subsections, guided } =
            self.reached_levels(v, &reads, &consumer_reads, split_inner.is_some(), lhs, rhs)?;
        let loop_var = self.f.var(&name, ScalarType::Index);
        self.bound[v.index()] = Some(loop_var);
        // (A guide's cursor moves on with the loop: its iterations run in order.)
        let parallel = parallel && guided.is_empty();
        let guides_open = self.windows.len();
        let (guide_setup, guide_step) = self.guide(&guided, loop_var);
        let bound: Vec<IndexVarId> =
            self.bound.iter().enumerate().filter(|(_, b)| b.is_some()).map(|(i, _)| IndexVarId::new(i)).collect();
        let lattice = {
            let scope = Scope { tensors: &self.cin.tensors, vars: &self.cin.vars, exprs: &self.exprs };
            MergeLattice::build(scope, &self.formats, rhs, v, &bound)
        };
        // The iterator of a lattice level: which (access, level) of `sparse` it is.
        let find = |lw: &Self, it: &nm_ir::lattice::LevelIterator| {
            sparse.iter().position(|&(k, l)| {
                let a = &lw.accesses[k];
                a.tensor == it.tensor && a.subscripts == it.subscripts && l == it.level
            })
        };
        let mut points: Vec<(Vec<usize>, ExprId)> = Vec::new();
        for p in &lattice.points {
            let its: Vec<usize> = p.iterators.iter().filter(|it| !it.full).filter_map(|it| find(self, it)).collect();
            let e = self.materialize(&p.expr);
            points.push((its, e));
        }
        let dense_driven = sparse.is_empty() || points.iter().any(|(its, _)| its.is_empty());
        // A non-unique level (COO's first) walked alone adds entry by entry: right when the
        // entries only add into a dense result or a workspace. Merged with other operands, or
        // appended to a sparse result or a `where`, it is walked segment by segment (taco's
        // de-duplicating iterator): each run of equal coordinates is one coordinate, whose
        // entries are its children's positions.
        let appends = self.assembly.is_some() && !self.workspace.as_ref().is_some_and(|w| w.active);
        let unique = sparse.iter().all(|&(k, l)| {
            let o = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
            o.format.levels()[l].kind.is_unique()
        });
        // (A resolving subsection iterator with coefficient 1 visits every entry of its range.)
        let alone = !dense_driven
            && subsections.iter().all(|s| matches!(s, Subsection::Plain | Subsection::Last { coef: 1, .. }))
            && sparse.len() == 1
            && points.len() == 1
            && (unique || (!appends && self.producers.is_empty()));
        let mut segmented = vec![false; sparse.len()];
        for (n, &(k, l)) in sparse.iter().enumerate() {
            let o = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
            let kind = o.format.levels()[l].kind;
            if !kind.is_ordered() && !alone {
                let tname = &self.cin.tensors[self.accesses[k].tensor].name;
                return refuse(
                    LowerError::Format,
                    format!("co-iterating `{tname}`'s unordered level {l} with other operands or into a sparse result"),
                );
            }
            // A window is a range of entries, not one coordinate.
            segmented[n] = !kind.is_unique() && !alone && !matches!(subsections[n], Subsection::Window { .. });
        }
        // The outermost loop over a dense coordinate of the result runs as row ranges (see
        // `Partition`); sparse iterators it advances (`y(i) = b(i) + A(i,j)·x(j)`, A in DCSR)
        // start at the first entry of the range, found by a search.
        let ranged = self.partitionable
            && self.depth() == 1
            && !self.in_producer
            && dense_driven
            && split_inner.is_none()
            && subsections.iter().all(|s| matches!(s, Subsection::Plain))
            && sparse.iter().all(|&(k, l)| {
                let o = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
                l == 0 && o.structured[l].is_none()
            });
        if ranged {
            self.bounds = Some(self.f.array("row_bounds", ElemType::I64, Role::Bounds, false));
        }
        // Positions and ends of the sparse iterators.
        let mut out = guide_setup.clone();
        let Iterators { setup, cursors, ranges, segment_ends, subranges, narrowed } =
            self.open_iterators(v, &name, &sparse, &subsections, alone, ranged, split_inner)?;
        out.extend(setup);
        let mut entry_pass = None;
        if let ([(its, e)], [sub @ Subsection::Window { .. }], [(p, end, _, crd)]) =
            (points.as_slice(), subsections.as_slice(), cursors.as_slice())
            && its == &[0]
            && split_inner.is_none()
            && guided.is_empty()
        {
            let w =
                WindowLoop { v, loop_var, level: sparse[0], subsection: sub, cursor: (*p, *end), crd, dense: &dense };
            match self.window_by_entries(&w, rest, lhs, op, *e, (&reads, &consumer_reads))? {
                Some(EntryPass { pass, when: None }) => {
                    out.extend(pass);
                    self.bound[v.index()] = None;
                    return Ok(out);
                }
                pass => entry_pass = pass,
            }
        }
        let at = |n: usize| bin(BinOp::Eq, var(cursors[n].2), var(loop_var));
        let all = |conds: Vec<Expr>| conds.into_iter().reduce(|a, b| bin(BinOp::And, a, b)).unwrap_or(Expr::Int(1));
        // One loop body: read coordinates, locate dense levels, cases, advance.
        let body_for = |lw: &mut Self, loop_its: &[usize], dense_mode: bool| -> Result<Vec<Stmt>, LowerError> {
            let mut body = Vec::new();
            for &n in loop_its {
                let (p, end, c, crd) = cursors[n].clone();
                let value = if dense_mode {
                    // A finished iterator reads a coordinate no loop value equals.
                    Expr::Select(
                        Box::new(bin(BinOp::Lt, var(p), var(end))),
                        Box::new(crd.at(var(p))),
                        Box::new(int(-1)),
                    )
                } else {
                    crd.at(var(p))
                };
                body.push(Stmt::Decl(c, value));
                if segmented[n] {
                    // The segment: every following entry with the same coordinate.
                    let seg = segment_ends[n];
                    body.push(Stmt::Decl(seg, bin(BinOp::Add, var(p), int(1))));
                    body.push(Stmt::While {
                        cond: bin(
                            BinOp::And,
                            bin(BinOp::Lt, var(seg), var(end)),
                            bin(BinOp::Eq, crd.stored(var(seg)), crd.stored(var(p))),
                        ),
                        body: vec![Stmt::Assign(seg, bin(BinOp::Add, var(seg), int(1)))],
                    });
                }
            }
            if !dense_mode {
                let min = loop_its
                    .iter()
                    .map(|&n| var(cursors[n].2))
                    .reduce(|a, b| bin(BinOp::Min, a, b))
                    .expect("a sparse iterator");
                body.push(Stmt::Decl(loop_var, min));
            }
            body.extend(guide_step.iter().cloned());
            lw.locate(&mut body, &dense);
            // Cases: the points whose sparse iterators are among this loop's, most specific first.
            let mut chain: Vec<(Expr, Vec<Stmt>)> = Vec::new();
            for (its, e) in points.clone() {
                if !its.iter().all(|n| loop_its.contains(n)) {
                    continue;
                }
                let saved = (lw.positions.clone(), lw.bound.clone());
                let (segments, open_windows) = (lw.segments.len(), lw.windows.len());
                let mut inner = Vec::new();
                for &n in &its {
                    let (k, l) = sparse[n];
                    if let Some(subrange) = &subranges[n] {
                        lw.windows.push((k, l, subrange.clone()));
                        continue;
                    }
                    lw.positions[k][l] = Some(cursors[n].0);
                    if segmented[n] {
                        lw.segments.push((k, l, segment_ends[n]));
                    }
                }
                inner.extend(lw.result_before(v, loop_var));
                inner.extend(lw.nest(rest, lhs, op, e)?);
                inner.extend(lw.result_after(v, loop_var));
                (lw.positions, lw.bound) = saved;
                lw.segments.truncate(segments);
                lw.windows.truncate(open_windows);
                chain.push((all(its.iter().map(|&n| at(n)).collect()), inner));
            }
            let mut cases: Vec<Stmt> = Vec::new();
            for (cond, then) in chain.into_iter().rev() {
                cases = vec![Stmt::If { cond, then, otherwise: cases }];
            }
            body.extend(cases);
            for &n in loop_its {
                let (p, end, _, crd) = cursors[n].clone();
                let then = match &crd {
                    Coordinates::Rows { advance, .. } => {
                        let mut then = vec![Stmt::Assign(advance.next, bin(BinOp::Add, var(loop_var), int(1)))];
                        then.extend(advance.steps.clone());
                        then
                    }
                    // The next subsection starts past this `v`.
                    Coordinates::Window { raw, base, coef, next, .. } => {
                        let start = bin(BinOp::Add, base.clone(), bin(BinOp::Mul, int(*coef), var(*next)));
                        let mut then = vec![
                            Stmt::Assign(*next, bin(BinOp::Add, var(loop_var), int(1))),
                            Stmt::While {
                                cond: bin(
                                    BinOp::And,
                                    bin(BinOp::Lt, var(p), var(end)),
                                    bin(BinOp::Lt, raw.at(var(p)), start),
                                ),
                                body: vec![Stmt::Assign(p, bin(BinOp::Add, var(p), int(1)))],
                            },
                        ];
                        then.extend(settle(p, end, &crd, lw.size(v) as i64));
                        then
                    }
                    _ => {
                        let next = if segmented[n] { var(segment_ends[n]) } else { bin(BinOp::Add, var(p), int(1)) };
                        let mut then = vec![Stmt::Assign(p, next)];
                        if matches!(crd, Coordinates::Mapped { .. }) {
                            then.extend(settle(p, end, &crd, lw.size(v) as i64));
                        }
                        then
                    }
                };
                body.push(Stmt::If { cond: at(n), then, otherwise: vec![] });
            }
            Ok(body)
        };
        if let Some((_, block, factor)) = split_inner.filter(|_| !dense_driven) {
            // Sparse iterators drive the loop over one block of a split (coordinates split,
            // as taco does): each started at the block's first coordinate (above) and stops
            // before the next block's, found by a search from where it starts.
            let next = bin(BinOp::Mul, bin(BinOp::Add, var(block), int(1)), int(factor));
            for (p, end, _, crd) in &cursors {
                let stop = self.f.fresh_var(&format!("{name}_block_end"), ScalarType::Index);
                out.push(Stmt::Decl(stop, var(*p)));
                out.extend(lower_bound(&mut self.f, stop, *end, crd, next.clone()));
                out.push(Stmt::Assign(*end, var(stop)));
            }
        }
        if alone {
            // One iterator and nothing to merge: a plain loop over its positions.
            let (mut p, end, _, crd) = cursors[0].clone();
            let (k, l) = sparse[0];
            let (mut start, mut stop) = ranges[0].clone();
            let mut setup = guide_setup;
            if matches!(crd, Coordinates::Mapped { .. }) || split_inner.is_some() || narrowed {
                // The range the searches above narrowed (a window, a split's block, the
                // loop's range).
                setup = std::mem::take(&mut out);
                (start, stop) = (var(p), var(end));
                p = self.f.fresh_var(&format!("{}{l}_q", self.access_name(k)), ScalarType::Index);
            }
            let mut body = vec![Stmt::Decl(loop_var, crd.at(var(p)))];
            body.extend(guide_step.iter().cloned());
            let mut inner = Vec::new();
            self.locate(&mut inner, &dense);
            let saved = (self.positions.clone(), self.bound.clone());
            self.positions[k][l] = Some(p);
            inner.extend(self.result_before(v, loop_var));
            self.repeating += usize::from(!unique);
            let nested = self.nest(rest, lhs, op, points[0].1);
            self.repeating -= usize::from(!unique);
            inner.extend(nested?);
            inner.extend(self.result_after(v, loop_var));
            (self.positions, self.bound) = saved;
            self.bound[v.index()] = None;
            // A structured level's last block may reach past the dimension (zero padding), and
            // its dimension past the loop's range.
            let o = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
            let larger = o.shape[o.format.levels()[l].expr.dim()] > self.size(v);
            match &crd {
                Coordinates::Structured { .. } if !self.size(v).is_multiple_of(self.structured_m(k, l)) || larger => {
                    body.push(Stmt::If {
                        cond: bin(BinOp::Lt, var(loop_var), int(self.size(v) as i64)),
                        then: inner,
                        otherwise: vec![],
                    });
                }
                _ => body.extend(inner),
            }
            let parallel = self.on_omp_threads(v, parallel);
            setup.push(Stmt::For { var: p, start, end: stop, body, parallel });
            self.unguide(&guided, guides_open);
            return Ok(setup);
        }
        if dense_driven {
            let all_its: Vec<usize> = (0..sparse.len()).collect();
            let mut body = body_for(self, &all_its, true)?;
            if ranged && self.assembly.is_none() && self.reduction.is_none() {
                body = self.row_body(lhs, v, loop_var, body);
            }
            let (start, end) = match self.bounds.filter(|_| ranged) {
                Some(b) => (load(b, int(0)), load(b, int(1))),
                None => (int(0), int(self.size(v) as i64)),
            };
            // A row range is split across threads by the caller, not by OpenMP.
            if parallel && ranged {
                self.on_threads.push(v);
            }
            let parallel = parallel && sparse.is_empty() && !ranged;
            let parallel = self.on_omp_threads(v, parallel);
            match split_inner {
                Some((inner, block, factor)) => {
                    // The last block stops at the end: a bound, not a `break` (which OpenMP
                    // does not allow in a parallel loop).
                    let first = bin(BinOp::Mul, var(block), int(factor));
                    let mut block_body = vec![Stmt::Decl(loop_var, bin(BinOp::Add, first.clone(), var(inner)))];
                    block_body.extend(body);
                    let stop = bin(BinOp::Min, int(factor), bin(BinOp::Sub, end, first));
                    out.push(Stmt::For { var: inner, start: int(0), end: stop, body: block_body, parallel });
                }
                None => out.push(Stmt::For { var: loop_var, start, end, body, parallel }),
            }
        } else {
            let mut loops = Vec::new();
            for (its, _) in points.clone() {
                let cond = all(its.iter().map(|&n| bin(BinOp::Lt, var(cursors[n].0), var(cursors[n].1))).collect());
                let body = body_for(self, &its, false)?;
                loops.push(Stmt::While { cond, body });
            }
            match entry_pass {
                Some(EntryPass { pass, when: Some(cond) }) => {
                    out.push(Stmt::If { cond, then: pass, otherwise: loops });
                }
                _ => out.extend(loops),
            }
        }
        self.bound[v.index()] = None;
        self.unguide(&guided, guides_open);
        Ok(out)
    }

    /// Whether a `where` producer's read of access `k`'s level `l` can follow an outer loop
    /// (see [`Self::guide`]).
    pub(super) fn guidable(&self, k: usize, l: usize) -> bool {
        let o = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
        let levels = o.format.levels();
        let window = self.windows.iter().rev().find(|w| w.0 == k && w.1 == l);
        levels[l].kind == LevelKind::COMPRESSED
            && o.structured[l].is_none()
            && l + 1 < levels.len()
            && o.pos[l + 1].is_some()
            && o.structured[l + 1].is_none()
            && (l == 0 || self.positions[k][l - 1].is_some())
            && !matches!(window, Some((_, _, Subrange::Rows { .. } | Subrange::Start(..))))
    }

    /// A `where` producer's read of a compressed level along an outer loop (`t = Σ_l C(k,l)`
    /// in the loop over `k`, C stored by columns): a cursor moves on to the loop's value, and
    /// the producer walks the children of the entry there — or none where the level has no
    /// entry, which is what a zero slice of C contributes to whatever the producer computes.
    /// Returns the cursor's declarations and the step each iteration starts with; the level
    /// stays resolved (and its children's range open) until [`Self::unguide`].
    pub(super) fn guide(&mut self, guided: &[(usize, usize)], v: VarId) -> (Vec<Stmt>, Vec<Stmt>) {
        let (mut setup, mut step) = (Vec::new(), Vec::new());
        for &(k, l) in guided {
            let o = self.operands[self.accesses[k].tensor.index()].clone().expect("decomposed");
            let tname = self.access_name(k);
            let parent = match l.checked_sub(1) {
                None => int(0),
                Some(up) => var(self.positions[k][up].expect("checked by guidable")),
            };
            let (start, end) = self.level_range(&o, k, l, parent);
            let p = self.f.fresh_var(&format!("{tname}{l}_at"), ScalarType::Index);
            let e = self.f.fresh_var(&format!("{tname}{l}_at_end"), ScalarType::Index);
            let lo = self.f.fresh_var(&format!("{tname}{}_from", l + 1), ScalarType::Index);
            let hi = self.f.fresh_var(&format!("{tname}{}_to", l + 1), ScalarType::Index);
            setup.push(Stmt::Decl(p, start));
            setup.push(Stmt::Decl(e, end));
            let (crd, pos) = (o.crd[l].expect("compressed"), o.pos[l + 1].expect("checked by guidable"));
            let live = bin(BinOp::Lt, var(p), var(e));
            step.push(Stmt::While {
                cond: bin(BinOp::And, live.clone(), bin(BinOp::Lt, load(crd, var(p)), var(v))),
                body: vec![Stmt::Assign(p, bin(BinOp::Add, var(p), int(1)))],
            });
            step.push(Stmt::Decl(lo, int(0)));
            step.push(Stmt::Decl(hi, int(0)));
            step.push(Stmt::If {
                cond: bin(BinOp::And, live, bin(BinOp::Eq, load(crd, var(p)), var(v))),
                then: vec![
                    Stmt::Assign(lo, load(pos, var(p))),
                    Stmt::Assign(hi, load(pos, bin(BinOp::Add, var(p), int(1)))),
                ],
                otherwise: vec![],
            });
            self.positions[k][l] = Some(p);
            self.windows.push((k, l + 1, Subrange::Children(lo, hi)));
        }
        (setup, step)
    }

    pub(super) fn unguide(&mut self, guided: &[(usize, usize)], open: usize) {
        self.windows.truncate(open);
        for &(k, l) in guided {
            self.positions[k][l] = None;
        }
    }

    /// The positions of access `k`'s level `l` under the parent position `parent`: from the
    /// level's `pos` (up to the end of the parent's segment when the parent is walked segment
    /// by segment), N per block of M of a structured level, the parent's own for a singleton.
    /// (Under a guide, its children's range: see [`Self::guide`].)
    pub(super) fn level_range(&self, o: &Operand, k: usize, l: usize, parent: Expr) -> (Expr, Expr) {
        let children = self.windows.iter().rev().find_map(|w| match w {
            &(a, b, Subrange::Children(from, to)) if a == k && b == l => Some((from, to)),
            _ => None,
        });
        if let Some((from, to)) = children {
            return (var(from), var(to));
        }
        let parent_end = match self.segment(k, l) {
            Some(end) => var(end),
            None => bin(BinOp::Add, parent.clone(), int(1)),
        };
        match (o.pos[l], o.structured[l]) {
            (Some(pos), _) => (load(pos, parent), load(pos, parent_end)),
            (None, Some((n, m, size))) => {
                let per = int((size / m as usize * n as usize) as i64);
                (bin(BinOp::Mul, parent, per.clone()), bin(BinOp::Mul, parent_end, per))
            }
            (None, None) => (parent, parent_end),
        }
    }

    /// The end of the segment access `k`'s level `l - 1` stands on, when that level is walked
    /// segment by segment.
    pub(super) fn segment(&self, k: usize, l: usize) -> Option<VarId> {
        let parent = l.checked_sub(1)?;
        self.segments.iter().rev().find(|(a, b, _)| *a == k && *b == parent).map(|s| s.2)
    }

    /// The access of a vector-wise N:M operand (`nm(N,M,L)`) reached at `v`, not yet iterated.
    pub(super) fn blocked_access(&self, v: IndexVarId, rhs: ExprId) -> Option<usize> {
        self.reads(rhs).into_iter().find(|&k| {
            let a = &self.accesses[k];
            let o = self.operands[a.tensor.index()].as_ref().expect("decomposed");
            o.format.nm_params().is_some()
                && self.positions[k][0].is_none()
                && a.subscripts.iter().any(|t| t.as_var() == Some(v))
        })
    }

    /// Loops over a vector-wise N:M operand `B(x, y)` (`nm(N,M,L)`) in its storage order —
    /// windows, column groups, the N kept rows, the L lanes — binding both its variables at
    /// once: `x = w·M + meta`, `y = g·L + lane`, padding skipped. Taken where the operand's first
    /// variable is reached and the second is the next loop, the operand is a factor of the
    /// whole product (its zeros contribute nothing) and every other operand is dense (located
    /// where it is read).
    pub(super) fn blocked_nest(
        &mut self,
        k: usize,
        v: IndexVarId,
        loops: &[(IndexVarId, bool)],
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        let a = self.accesses[k].clone();
        let o = self.operands[a.tensor.index()].clone().expect("decomposed");
        let tname = self.cin.tensors[a.tensor].name.clone();
        let (n, m, l) = o.format.nm_params().expect("nm(N,M,L)");
        let (Some(x), Some(y)) = (a.subscripts[0].as_var(), a.subscripts[1].as_var()) else {
            return refuse(LowerError::Subscript, format!("`{tname}` in nm(N,M,L) with compound subscripts"));
        };
        let other = if x == v { y } else { x };
        let Some((&(next, _), rest)) = loops.split_first().filter(|(first, _)| first.0 == other) else {
            return refuse(
                LowerError::LoopOrder,
                format!(
                    "`{tname}` in nm(N,M,L): its two variables must be adjacent loops (`{}` right after `{}`)",
                    self.cin.vars[other].name, self.cin.vars[v].name
                ),
            );
        };
        debug_assert_eq!(next, other);
        let others_dense = self.reads(rhs).into_iter().all(|j| j == k || self.all_dense(j));
        if !others_dense || !is_factor(&self.exprs, rhs, &a) || self.assembly.is_some() {
            return refuse(
                LowerError::Format,
                format!("`{tname}` in nm(N,M,L) other than as a factor of a product with dense operands"),
            );
        }
        let (rows, cols) = (o.shape[0], o.shape[1]);
        let (windows, groups) = (rows.div_ceil(m as usize), cols.div_ceil(l));
        let prefix = self.access_name(k);
        let mut new_var = |s: &str| self.f.var(&format!("{prefix}_{s}"), ScalarType::Index);
        let (w, g, p1, p2, lane, p3) =
            (new_var("w"), new_var("g"), new_var("p1"), new_var("p2"), new_var("lane"), new_var("p3"));
        let (xv, yv) = (
            self.f.var(&self.cin.vars[x].name.clone(), ScalarType::Index),
            self.f.var(&self.cin.vars[y].name.clone(), ScalarType::Index),
        );
        let meta = o.crd[2].expect("metadata");
        let offset = Coordinates::Structured { meta, n, m, base: bin(BinOp::Mul, var(p1), int(n as i64)) }.at(var(p2));
        let saved = (self.positions.clone(), self.bound.clone());
        self.bound[x.index()] = Some(xv);
        self.bound[y.index()] = Some(yv);
        self.positions[k][0] = Some(w);
        self.positions[k][1] = Some(p1);
        self.positions[k][2] = Some(p2);
        self.positions[k][3] = Some(p3);
        let inner = self.nest(rest, lhs, op, rhs);
        (self.positions, self.bound) = saved;
        let inner = inner?;
        let lanes = vec![
            Stmt::Decl(yv, bin(BinOp::Add, bin(BinOp::Mul, var(g), int(l as i64)), var(lane))),
            Stmt::Decl(p3, bin(BinOp::Add, bin(BinOp::Mul, var(p2), int(l as i64)), var(lane))),
            Stmt::If { cond: bin(BinOp::Lt, var(yv), int(cols as i64)), then: inner, otherwise: vec![] },
        ];
        let kept = vec![
            Stmt::Decl(xv, bin(BinOp::Add, bin(BinOp::Mul, var(w), int(m as i64)), offset)),
            Stmt::If {
                cond: bin(BinOp::Lt, var(xv), int(rows as i64)),
                then: vec![Stmt::For { var: lane, start: int(0), end: int(l as i64), body: lanes, parallel: false }],
                otherwise: vec![],
            },
        ];
        let group = vec![
            Stmt::Decl(p1, bin(BinOp::Add, bin(BinOp::Mul, var(w), int(groups as i64)), var(g))),
            Stmt::For {
                var: p2,
                start: bin(BinOp::Mul, var(p1), int(n as i64)),
                end: bin(BinOp::Mul, bin(BinOp::Add, var(p1), int(1)), int(n as i64)),
                body: kept,
                parallel: false,
            },
        ];
        Ok(vec![Stmt::For {
            var: w,
            start: int(0),
            end: int(windows as i64),
            body: vec![Stmt::For { var: g, start: int(0), end: int(groups as i64), body: group, parallel: false }],
            parallel: false,
        }])
    }

    /// What a `pos` variable iterates: `pos(f, fpos, T)` with `f = fuse(a, b)` and `T(a, b)`
    /// a CSR-like operand (a dense level, then a compressed one): the positions `0..nnz` of its
    /// compressed level, each naming a row `a` and a column `b`.
    pub(super) fn position_space(&self, v: IndexVarId) -> Option<PositionSpace> {
        let Some(&Derivation::Pos { parent, tensor }) = self.cin.derivations.get(&v) else { return None };
        let Some(&Derivation::Fuse { outer, inner }) = self.cin.derivations.get(&parent) else { return None };
        let k = self.accesses.iter().position(|a| {
            a.tensor == tensor
                && a.subscripts.len() == 2
                && a.subscripts[0].as_var() == Some(outer)
                && a.subscripts[1].as_var() == Some(inner)
        })?;
        let op = self.operands[tensor.index()].as_ref()?;
        let levels = op.format.levels();
        let csr_like = levels.len() == 2
            && levels[0].kind == LevelKind::Dense
            && matches!(levels[1].kind, LevelKind::Compressed(p) if p.unique)
            && levels[0].expr == nm_format::LevelExpr::Dim(0)
            && levels[1].expr == nm_format::LevelExpr::Dim(1);
        if !csr_like {
            return None;
        }
        let (pos, crd) = (op.pos[1]?, op.crd[1]?);
        let rows = self.size(outer);
        Some(PositionSpace { access: k, row: outer, col: inner, rows, pos, crd, count: load(pos, int(rows as i64)) })
    }

    /// The loop over `ps`'s positions (one block of a split of them, when `split` names the
    /// block loop): the row of the block's first position found by binary search in `pos`,
    /// then advanced position by position; the column read from `crd`. Both variables and the
    /// operand's two levels are resolved inside it.
    pub(super) fn position_loop(
        &mut self,
        ps: PositionSpace,
        split: Option<(VarId, VarId, i64)>,
        rest: &[(IndexVarId, bool)],
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        let name = |lw: &Self, v: IndexVarId| lw.cin.vars[v].name.clone();
        let p = self.f.var(&format!("{}_p", self.access_name(ps.access)), ScalarType::Index);
        let row = self.f.var(&name(self, ps.row), ScalarType::Index);
        let col = self.f.var(&name(self, ps.col), ScalarType::Index);
        let (lo, hi, mid) = (
            self.f.var("search_lo", ScalarType::Index),
            self.f.var("search_hi", ScalarType::Index),
            self.f.var("search_mid", ScalarType::Index),
        );
        let (first, loop_var, start, end) = match split {
            Some((inner, block, factor)) => (bin(BinOp::Mul, var(block), int(factor)), inner, int(0), int(factor)),
            None => (int(0), p, int(0), ps.count.clone()),
        };
        // The row holding position `first`: the last row whose `pos` is at most `first`.
        let mut out = vec![
            Stmt::Decl(lo, int(0)),
            Stmt::Decl(hi, int(ps.rows as i64)),
            Stmt::While {
                cond: bin(BinOp::Lt, var(lo), var(hi)),
                body: vec![
                    Stmt::Decl(mid, bin(BinOp::Div, bin(BinOp::Add, var(lo), var(hi)), int(2))),
                    Stmt::If {
                        cond: bin(BinOp::Le, load(ps.pos, bin(BinOp::Add, var(mid), int(1))), first.clone()),
                        then: vec![Stmt::Assign(lo, bin(BinOp::Add, var(mid), int(1)))],
                        otherwise: vec![Stmt::Assign(hi, var(mid))],
                    },
                ],
            },
            Stmt::Decl(row, var(lo)),
        ];
        let mut body = Vec::new();
        if split.is_some() {
            body.push(Stmt::Decl(p, bin(BinOp::Add, first, var(loop_var))));
            body.push(Stmt::If {
                cond: bin(BinOp::Le, ps.count.clone(), var(p)),
                then: vec![Stmt::Break],
                otherwise: vec![],
            });
        }
        body.push(Stmt::While {
            cond: bin(BinOp::Le, load(ps.pos, bin(BinOp::Add, var(row), int(1))), var(p)),
            body: vec![Stmt::Assign(row, bin(BinOp::Add, var(row), int(1)))],
        });
        body.push(Stmt::Decl(col, load(ps.crd, var(p))));
        let saved = (self.bound.clone(), self.positions.clone());
        self.bound[ps.row.index()] = Some(row);
        self.bound[ps.col.index()] = Some(col);
        self.positions[ps.access][0] = Some(row);
        self.positions[ps.access][1] = Some(p);
        // Other operands' dense levels over the two variables are located here, in level
        // order, as a loop over each would (`C(k, j)` with C in CSR: its row `k`).
        for v in [ps.row, ps.col] {
            for k in self.reads(rhs) {
                let a = &self.accesses[k];
                let levels = self.operands[a.tensor.index()].as_ref().expect("decomposed").format.levels().to_vec();
                if k == ps.access || self.all_dense(k) {
                    continue;
                }
                if let Some(l) = self.positions[k].iter().take(levels.len()).position(Option::is_none)
                    && levels[l].kind == LevelKind::Dense
                    && a.subscripts.get(levels[l].expr.dim()).and_then(|t| t.as_var()) == Some(v)
                {
                    self.locate(&mut body, &[(k, l)]);
                }
            }
        }
        let inner = self.nest(rest, lhs, op, rhs);
        (self.bound, self.positions) = saved;
        body.extend(inner?);
        out.push(Stmt::For { var: loop_var, start, end, body, parallel: false });
        Ok(out)
    }

    /// The body of one row of a row range writing its own rows of a dense result: summed in
    /// a stack buffer where that pattern holds ([`Lowerer::accumulate_rows`]), else stored
    /// as it is, with the row zeroed first unless every element is stored exactly once.
    fn row_body(&mut self, lhs: &Access, v: IndexVarId, loop_var: VarId, body: Vec<Stmt>) -> Vec<Stmt> {
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
                    && (0..self.accesses.len()).all(|k| self.all_dense(k))
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

    /// The loop over `fuse(outer, inner, v)`: one loop over every pair of coordinates, each
    /// variable recovered by a division (`outer = v / |inner|`, `inner = v % |inner|`), where
    /// both only locate dense levels (taco's `fuse` of dense loops, to parallelize one loop
    /// of their product). Iterating sparse levels along it needs `pos` (`position_loop`).
    #[allow(clippy::too_many_arguments)]
    fn fused_loop(
        &mut self,
        v: IndexVarId,
        (outer, inner): (IndexVarId, IndexVarId),
        parallel: bool,
        rest: &[(IndexVarId, bool)],
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        let name = self.cin.vars[v].name.clone();
        let refuse = |why: &str| {
            refuse(
                LowerError::Schedule,
                format!(
                    "a loop over the fused variable `{name}` {why} (fuse is lowered there under `pos`: iterate its positions)"
                ),
            )
        };
        if self.cin.derivations.contains_key(&outer) || self.cin.derivations.contains_key(&inner) {
            return refuse("of variables made by other schedule commands");
        }
        if self.assembly.is_some() || self.workspace.is_some() || self.ism.is_some() {
            return refuse("into a sparse result");
        }
        if self.in_producer || !self.producers.is_empty() {
            return refuse("around a `where`");
        }
        let inner_size = self.size(inner) as i64;
        let count = (self.size(outer) as i64).checked_mul(inner_size).ok_or_else(|| {
            LowerError::Schedule(format!(
                "fusing `{}` and `{}`: too many coordinates",
                self.cin.vars[outer].name, self.cin.vars[inner].name
            ))
        })?;
        let saved = (self.positions.clone(), self.bound.clone());
        let reads = self.reads(rhs);
        let fused = self.f.var(&name, ScalarType::Index);
        let mut body = Vec::new();
        for (w, value) in [
            (outer, bin(BinOp::Div, var(fused), int(inner_size))),
            (inner, bin(BinOp::Rem, var(fused), int(inner_size))),
        ] {
            let reached = self.reached_levels(w, &reads, &reads, false, lhs, rhs)?;
            if !reached.sparse.is_empty() || !reached.guided.is_empty() {
                (self.positions, self.bound) = saved;
                return refuse(&format!("where `{}` iterates a compressed level", self.cin.vars[w].name));
            }
            let x = self.f.var(&self.cin.vars[w].name.clone(), ScalarType::Index);
            body.push(Stmt::Decl(x, value));
            self.bound[w.index()] = Some(x);
            self.locate(&mut body, &reached.dense);
        }
        let nested = self.nest(rest, lhs, op, rhs);
        (self.positions, self.bound) = saved;
        body.extend(nested?);
        // Pairs write disjoint elements only where the result is indexed by both variables.
        let disjoint = [outer, inner].iter().all(|&w| lhs.subscripts.iter().any(|t| t.as_var() == Some(w)));
        if parallel && !disjoint {
            self.note_one_thread(v, "its pairs of coordinates add into the same result elements");
        }
        let parallel = self.on_omp_threads(v, parallel && disjoint);
        Ok(vec![Stmt::For { var: fused, start: int(0), end: int(count), body, parallel }])
    }

    /// The block loop of `split(parent, v, _, factor)`: blocks of `factor` coordinates of
    /// `parent`, whose inner loop (in `rest`) walks one block.
    #[allow(clippy::too_many_arguments)]
    fn block_loop(
        &mut self,
        v: IndexVarId,
        parent: IndexVarId,
        factor: u64,
        parallel: bool,
        rest: &[(IndexVarId, bool)],
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        // Over positions, the number of blocks is known when the kernel runs.
        let over_positions = self.position_space(parent);
        let blocks = match &over_positions {
            Some(ps) => bin(BinOp::Div, bin(BinOp::Add, ps.count.clone(), int(factor as i64 - 1)), int(factor as i64)),
            None if self.cin.derivations.contains_key(&parent) => {
                return refuse(
                    LowerError::Schedule,
                    format!(
                        "a split of `{}`, itself made by a schedule command (split the original variable \
                     with the product of the factors instead)",
                        self.cin.vars[parent].name
                    ),
                );
            }
            None => int(self.size(parent).div_ceil(factor as usize) as i64),
        };
        let block = self.f.var(&self.cin.vars[v].name.clone(), ScalarType::Index);
        // Outermost, over a split of a variable that sums into a dense result: ranges
        // of blocks (see `Partition`; the inner loop starts its iterators at its block).
        let ranged = self.partitionable
            && self.reduction.is_some()
            && self.depth() == 0
            && self.split_blocks.is_empty()
            && !self.in_producer
            && self.bounds.is_none()
            && over_positions.is_none();
        if ranged {
            self.bounds = Some(self.f.array("row_bounds", ElemType::I64, Role::Bounds, false));
        }
        self.split_blocks.push((parent, block));
        let body = self.nest(rest, lhs, op, rhs);
        self.split_blocks.pop();
        let body = body?;
        let (start, end) = match self.bounds.filter(|_| ranged) {
            Some(b) => (load(b, int(0)), load(b, int(1))),
            None => (int(0), blocks),
        };
        if parallel && ranged {
            // The caller splits the ranges across threads, not OpenMP.
            self.on_threads.push(v);
        }
        // Blocks in parallel (OpenMP) only write disjoint parts of a dense result.
        let parallel = !ranged && self.on_omp_threads(v, parallel);
        Ok(vec![Stmt::For { var: block, start, end, body, parallel }])
    }

    /// Opens the iterators of the compressed levels `sparse` that the loop over `v` reaches,
    /// each as its subsection says: its first and last position (an outer loop's window, the
    /// row range's or the split block's first entry searched), the coordinates it reads.
    #[allow(clippy::too_many_arguments)]
    fn open_iterators(
        &mut self,
        v: IndexVarId,
        name: &str,
        sparse: &[(usize, usize)],
        subsections: &[Subsection],
        alone: bool,
        ranged: bool,
        split_inner: Option<(VarId, VarId, i64)>,
    ) -> Result<Iterators, LowerError> {
        let mut its = Iterators::default();
        let Iterators { setup: out, cursors, ranges, segment_ends, subranges, narrowed } = &mut its;
        for (n, &(k, l)) in sparse.iter().enumerate() {
            let o = self.operands[self.accesses[k].tensor.index()].clone().expect("decomposed");
            // (A rows iterator's parent is not resolved: its range is its rows'.)
            let rows = matches!(subsections[n], Subsection::Rows { .. });
            let parent = match l.checked_sub(1) {
                None => int(0),
                Some(_) if rows => int(0),
                Some(up) => var(self.positions[k][up].expect("resolved in order")),
            };
            let crd = match o.structured[l] {
                Some((n, m, size)) => {
                    let base = bin(BinOp::Mul, parent.clone(), int((size / m as usize * n as usize) as i64));
                    Coordinates::Structured { meta: o.crd[l].expect("metadata"), n, m, base }
                }
                None => Coordinates::Array(o.crd[l].expect("compressed or singleton")),
            };
            let tname = self.access_name(k);
            // Subsection iterators nest inside others of the same level: names of their own.
            let plain = matches!(subsections[n], Subsection::Plain);
            let mut new_var = |name: String| {
                if plain { self.f.var(&name, ScalarType::Index) } else { self.f.fresh_var(&name, ScalarType::Index) }
            };
            let p = new_var(format!("{tname}{l}_p{n}"));
            let end = new_var(format!("{tname}{l}_end{n}"));
            let c = new_var(format!("{tname}{l}_{name}{n}"));
            let range = self.level_range(&o, k, l, parent.clone());
            segment_ends.push(self.f.var(&format!("{tname}{l}_segend{n}"), ScalarType::Index));
            // Inside the loop of an earlier variable of a compound subscript: its window.
            let window = self.windows.iter().rev().find(|w| w.0 == k && w.1 == l).map(|w| w.2.clone());
            let range = match &window {
                Some(Subrange::Start(lo, hi)) => (var(*lo), var(*hi)),
                // (`level_range` took it.)
                Some(Subrange::Children(..)) => range,
                Some(Subrange::Rows { starts, first }) => {
                    (load(*starts, bin(BinOp::Sub, parent.clone(), first.clone())), range.1)
                }
                // Live (0 < 1) until it finds no row with an entry left.
                None if rows => (int(0), int(1)),
                None => range,
            };
            out.push(Stmt::Decl(p, range.0.clone()));
            out.push(Stmt::Decl(end, range.1.clone()));
            // Co-iterated, a structured level ends at its last entry inside the dimension: the
            // kept entries of the last block's zero padding (coordinates past the size, at most
            // N - 1 of them, all at the end) must not reach a merge.
            if !alone
                && let Coordinates::Structured { m, .. } = &crd
                && (!self.size(v).is_multiple_of(*m as usize)
                    || o.shape[o.format.levels()[l].expr.dim()] > self.size(v))
            {
                out.push(Stmt::While {
                    cond: bin(
                        BinOp::And,
                        bin(BinOp::Lt, var(p), var(end)),
                        bin(BinOp::Le, int(self.size(v) as i64), crd.at(bin(BinOp::Sub, var(end), int(1)))),
                    ),
                    body: vec![Stmt::Assign(end, bin(BinOp::Sub, var(end), int(1)))],
                });
            }
            let crd = match &subsections[n] {
                // The inner loop of a `split` visits one block of coordinates: its iterators
                // start at the block's first (found by the differential tests: they restarted
                // from the level's first entry in every block and never reached the later ones).
                Subsection::Plain => {
                    // A dimension larger than the loop's range ("valid" semantics: a compound
                    // subscript narrowed the variable) ends at the first coordinate past it.
                    let level = o.format.levels()[l];
                    if o.shape[level.expr.dim()] > self.size(v) && !matches!(crd, Coordinates::Structured { .. }) {
                        if !matches!(level.expr, nm_format::LevelExpr::Dim(_)) || !level.kind.is_ordered() {
                            return refuse(
                                LowerError::LoopOrder,
                                format!(
                                    "reading `{tname}` along `{name}`, which covers only part of its dimension, from a blocked or unordered level"
                                ),
                            );
                        }
                        let stop = self.f.fresh_var(&format!("{tname}{l}_inside{n}"), ScalarType::Index);
                        out.push(Stmt::Decl(stop, var(p)));
                        let range = int(self.size(v) as i64);
                        out.extend(lower_bound(&mut self.f, stop, end, &crd, range));
                        out.push(Stmt::Assign(end, var(stop)));
                        *narrowed = true;
                    }
                    if let Some((_, block, factor)) = split_inner {
                        let first = bin(BinOp::Mul, var(block), int(factor));
                        out.extend(lower_bound(&mut self.f, p, end, &crd, first));
                    }
                    if let Some(bounds) = self.bounds.filter(|_| ranged) {
                        out.extend(lower_bound(&mut self.f, p, end, &crd, load(bounds, int(0))));
                    }
                    crd
                }
                Subsection::Last { term, coef, size } => {
                    // The entries at `offset + coef·v`, v < size: those from the first at or
                    // past `offset` to the last before `offset + coef·size`.
                    let offset = self.affine(term, Some(v));
                    // Searched from its parent's first entry (no window of an outer loop
                    // narrowed it): start from where the last search of this parent ended,
                    // when its offset was no larger (the paper's position-pair vectors, one
                    // per parent position: the output-stationary order's windows slide).
                    // (Scratch arrays are per thread under row ranges; not so under OpenMP.)
                    let hints = match (&window, o.pos[l]) {
                        (None, Some(pos)) if !self.threaded => Some(self.search_hints(l, pos)),
                        _ => None,
                    };
                    if let Some((at, from)) = hints {
                        let known = load(from, parent.clone());
                        out.push(Stmt::If {
                            cond: bin(
                                BinOp::And,
                                bin(BinOp::Ne, known.clone(), int(0)),
                                bin(BinOp::Le, known, bin(BinOp::Add, offset.clone(), int(1))),
                            ),
                            then: vec![Stmt::Assign(p, load(at, parent.clone()))],
                            otherwise: vec![],
                        });
                    }
                    out.extend(lower_bound(&mut self.f, p, end, &crd, offset.clone()));
                    if let Some((at, from)) = hints {
                        out.push(Stmt::Store { array: at, index: parent.clone(), value: var(p), accumulate: false });
                        out.push(Stmt::Store {
                            array: from,
                            index: parent.clone(),
                            value: bin(BinOp::Add, offset.clone(), int(1)),
                            accumulate: false,
                        });
                    }
                    let stop = self.f.fresh_var(&format!("{tname}{l}_stop{n}"), ScalarType::Index);
                    out.push(Stmt::Decl(stop, var(p)));
                    let past = bin(BinOp::Add, offset.clone(), int(coef * size));
                    out.extend(lower_bound(&mut self.f, stop, end, &crd, past));
                    out.push(Stmt::Assign(end, var(stop)));
                    let crd = Coordinates::Mapped { raw: Box::new(crd), offset, coef: *coef };
                    out.extend(settle(p, end, &crd, *size));
                    crd
                }
                Subsection::Rows { rows, term, coef, width, size, span } => {
                    let (init, crd, subrange) =
                        self.rows_cursor(k, l, v, (rows, term), (*coef, *width, *size, *span), end, &crd);
                    out.extend(init);
                    subranges.push(Some(subrange));
                    crd
                }
                Subsection::Window { term, coef, width, size } => {
                    // Windows `[base + coef·v, base + coef·v + width]` for v = next, next + 1, ...
                    let base = self.affine(term, Some(v));
                    let next = self.f.fresh_var(&format!("{tname}{l}_next{n}"), ScalarType::Index);
                    let limit = self.f.fresh_var(&format!("{tname}{l}_limit{n}"), ScalarType::Index);
                    out.push(Stmt::Decl(next, int(0)));
                    out.push(Stmt::Decl(limit, var(end)));
                    out.extend(lower_bound(&mut self.f, p, end, &crd, base.clone()));
                    let crd = Coordinates::Window { raw: Box::new(crd), base, coef: *coef, width: *width, next };
                    out.extend(settle(p, end, &crd, *size));
                    // The window at each `v` starts at the cursor; the inner loops' searches
                    // find where it ends (no scan for it here: a 999-wide row window would be
                    // walked once per filter row).
                    subranges.push(Some(Subrange::Start(p, limit)));
                    crd
                }
            };
            if !matches!(subsections[n], Subsection::Window { .. } | Subsection::Rows { .. }) {
                subranges.push(None);
            }
            cursors.push((p, end, c, crd.clone()));
            ranges.push(range);
        }
        Ok(its)
    }

    /// Which level of each access in `reads` the loop over `v` reaches now, and how: sparse
    /// levels it iterates (each with its [`Subsection`]), dense levels it locates, and levels
    /// a `where` producer reads along it (followed by a guide). `consumer_reads` are the
    /// accesses of the assignment itself; `split` says the loop walks one block of a split.
    pub(super) fn reached_levels(
        &mut self,
        v: IndexVarId,
        reads: &[usize],
        consumer_reads: &[usize],
        split: bool,
        lhs: &Access,
        rhs: ExprId,
    ) -> Result<Reached, LowerError> {
        let name = self.cin.vars[v].name.clone();
        let mut reached = Reached::default();
        let Reached { sparse, dense, subsections, guided } = &mut reached;
        for &k in reads {
            let a = &self.accesses[k];
            let op = self.operands[a.tensor.index()].as_ref().expect("every operand decomposed");
            if self.all_dense(k) {
                // Located all at once where it is read, in any loop order.
                continue;
            }
            let Some(l) = self.positions[k].iter().take(op.format.levels().len()).position(Option::is_none) else {
                continue;
            };
            let level = &op.format.levels()[l];
            let term = a.subscripts.get(level.expr.dim());
            let dim_var = term.and_then(|t| t.as_var());
            if let Some(t) = term.filter(|t| t.is_compound() && t.vars().any(|w| w == v)) {
                // A compound subscript (sparse convolution): a dense level is located once its
                // last variable is bound; a compressed one is iterated by subsections.
                let last = t.vars().all(|w| w == v || self.bound[w.index()].is_some());
                if level.kind == LevelKind::Dense {
                    if last {
                        dense.push((k, l));
                    }
                    continue;
                }
                let tname = &self.cin.tensors[a.tensor].name;
                if !consumer_reads.contains(&k) {
                    // A `where` producer's read, its window still open: the producer's own loops
                    // (inside this one) iterate it, from its parent's whole range.
                    if !last {
                        continue;
                    }
                    return refuse(
                        LowerError::Where,
                        format!(
                            "a `where` producer reading `{tname}` through a compound subscript its loops do not finish"
                        ),
                    );
                }
                if !level.kind.is_ordered() || matches!(level.kind, LevelKind::Structured { .. }) {
                    return refuse(
                        LowerError::Subscript,
                        format!(
                            "a compound subscript on `{tname}`'s level {l} ({}): it needs an ordered compressed or singleton level",
                            level.kind
                        ),
                    );
                }
                // A negative coefficient (a true convolution, `I(i + 2 - r)`): the level is
                // walked in its order, so the variable that resolves it must grow with the
                // coordinate. Other variables with negative coefficients are bound outside it,
                // in dense loops (no window skipping: filters are small); a window's reach
                // is then only that of positive ones.
                if t.terms.iter().any(|&(c, _)| c < 0) {
                    let negative_inside =
                        t.terms.iter().any(|&(c, w)| c < 0 && w != v && self.bound[w.index()].is_none());
                    if coefficient(t, v) < 0 && last {
                        return refuse(
                            LowerError::Subscript,
                            format!(
                                "`{name}` resolves `{tname}`'s compressed level {l} with a negative coefficient \
                             (its coordinates are walked in increasing order): loop over `{name}` before \
                             the subscript's other variables"
                            ),
                        );
                    }
                    if coefficient(t, v) < 0 || negative_inside {
                        continue;
                    }
                }
                if split {
                    return refuse(
                        LowerError::Schedule,
                        format!("splitting `{name}`, which iterates `{tname}` by subsections"),
                    );
                }
                sparse.push((k, l));
                let (coef, size) = (coefficient(t, v), self.size(v) as i64);
                subsections.push(if last {
                    Subsection::Last { term: t.clone(), coef, size }
                } else {
                    Subsection::Window { term: t.clone(), coef, width: self.reach(t, v), size }
                });
            } else if dim_var == Some(v) {
                if level.kind == LevelKind::Dense {
                    dense.push((k, l))
                } else if !consumer_reads.contains(&k) {
                    // A `where` producer's read along this outer loop: followed by a cursor
                    // that hands the producer the level's children, or none (see `guide`).
                    // Not along a loop over the result's coordinates into a sparse result:
                    // the temporary, dense to the merge, would have it store every one —
                    // unless the loop visits every one anyway: it resolves a dense level of
                    // the result (CSR's rows), or a term of dense operands fills it.
                    let sparse_result = self.assembly.is_some() || self.workspace.is_some() || self.ism.is_some();
                    let dense_result_level = self
                        .result_level(v)
                        .is_some_and(|l| self.assembly.as_ref().is_some_and(|a| a.kinds[l] == LevelKind::Dense));
                    if sparse_result
                        && lhs.subscripts.iter().any(|t| t.vars().any(|w| w == v))
                        && !dense_result_level
                        && !self.covered_by_dense(rhs)
                    {
                        if self.visit_every_coordinate {
                            let note = format!(
                                "the loop over `{name}` visits every coordinate of `{name}`, as no operand it \
                                 merges makes it sparse; `{}` stores those where a term was produced",
                                self.cin.tensors[self.result].name
                            );
                            if !self.notes.contains(&note) {
                                self.notes.push(note);
                            }
                        } else {
                            return refuse(
                                LowerError::Where,
                                format!(
                                    "a `where` producer reading `{}`'s compressed level {l} along `{name}`, a \
                                 coordinate of the sparse result",
                                    self.cin.tensors[a.tensor].name
                                ),
                            );
                        }
                    }
                    if !self.guidable(k, l) {
                        return refuse(
                            LowerError::Where,
                            format!(
                                "a `where` producer reading `{}`'s level {l} ({}) along the outer loop `{name}`: \
                             it needs an ordered, unique compressed level with a compressed level below",
                                self.cin.tensors[a.tensor].name, level.kind
                            ),
                        );
                    }
                    guided.push((k, l));
                } else {
                    sparse.push((k, l));
                    subsections.push(Subsection::Plain);
                }
            } else if let Some(rows) = self.rows_subsection(k, l, v, consumer_reads, split) {
                sparse.push((k, l + 1));
                subsections.push(rows);
            } else if a.subscripts.iter().any(|t| t.vars().any(|w| w == v))
                && !a.subscripts.iter().any(|t| t.is_compound())
            {
                // (With compound subscripts a later level may still be reached by a later loop,
                // once its parent is: the loop runs over every coordinate, and the level is
                // searched there — or the leaf reports the level it could not reach.)
                return refuse(
                    LowerError::LoopOrder,
                    format!(
                        "`{name}` is bound before `{}`'s level {l} is reached: the loop order is discordant with its format",
                        self.cin.tensors[a.tensor].name
                    ),
                );
            }
        }
        Ok(reached)
    }
}
