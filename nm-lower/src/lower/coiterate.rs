//! The loop over a variable that co-iterates the sparse levels it reaches, as the merge
//! lattice of the expression says (taco's co-iteration): a `for` over every coordinate when
//! some lattice point has no sparse iterator (a dense operand, a constant), with a case per
//! point; otherwise one `while` per lattice point over its iterators, with a case per
//! sub-point, taking the smallest coordinate and advancing the iterators that stand on it; a
//! plain loop over positions where one iterator has nothing to merge with.

use super::entries::{EntryPass, WindowLoop};
use super::iterate::{Coordinates, Cursor, Opening, Subrange, Subsection, lower_bound, structured};
use super::reach::Reached;
use super::{AccessId, Inside, LowerError, Lowerer, refuse};
use crate::ir::build::{bin, int, load, var};
use crate::ir::{BinOp, ElemType, Expr, Role, ScalarType, Stmt, VarId};
use nm_ir::notation::{ExprId, IndexVarId};

/// A co-iterating loop as [`Lowerer::coiterate`] sets it up, for the code that builds its
/// forms.
struct CoLoop<'a> {
    v: IndexVarId,
    loop_var: VarId,
    /// The loops inside, and the assignment at the leaf (its right-hand side the whole
    /// expression; each lattice point hands on its own).
    inside: Inside<'a>,
    /// Where the loop walks one block of a split: (inner variable, block variable, factor).
    split_inner: Option<(VarId, VarId, i64)>,
    reached: Reached,
    /// The lattice points: the iterators each merges (indices into `cursors`) and the
    /// expression it computes.
    points: Vec<(Vec<usize>, ExprId)>,
    cursors: Vec<Cursor>,
    /// What every iteration starts with for the `where` producers' guides.
    guide_step: Vec<Stmt>,
}

/// The iterators [`Lowerer::open_iterators`] opened.
struct Opened {
    /// What opens them, before the loop.
    setup: Vec<Stmt>,
    cursors: Vec<Cursor>,
    /// Whether an iterator's end was moved in, to the loop's range.
    narrowed: bool,
}

/// The conjunction of `conds` (true when there are none).
fn all(conds: impl IntoIterator<Item = Expr>) -> Expr {
    conds.into_iter().reduce(|a, b| bin(BinOp::And, a, b)).unwrap_or(Expr::Int(1))
}

impl Lowerer<'_> {
    /// The loop over `v` (or over one block of a split of it, `split_inner`) with `rest`
    /// inside: the levels it reaches are iterated, located or followed, and the lattice of
    /// `rhs` along `v` decides the loop's form.
    pub(super) fn coiterate(
        &mut self,
        v: IndexVarId,
        parallel: bool,
        split_inner: Option<(VarId, VarId, i64)>,
        inside: Inside<'_>,
    ) -> Result<Vec<Stmt>, LowerError> {
        let Inside { loops: rest, lhs, op, rhs } = inside;
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
        let reached = self.reached_levels(v, &reads, &consumer_reads, split_inner.is_some(), lhs, rhs)?;
        let loop_var = self.f.var(&name, ScalarType::Index);
        self.bound[v] = Some(loop_var);
        // (A guide's cursor moves on with the loop: its iterations run in order.)
        let parallel = parallel && reached.guided.is_empty();
        let guides_open = self.windows.len();
        let (guide_setup, guide_step) = self.guide(&reached.guided, loop_var);
        let points = self.lattice_points(v, rhs, &reached.sparse)?;
        let dense_driven = reached.sparse.is_empty() || points.iter().any(|(its, _)| its.is_empty());
        // A non-unique level (COO's first) walked alone adds entry by entry: right when the
        // entries only add into a dense result or a workspace. Merged with other operands, or
        // appended to a sparse result or a `where`, it is walked segment by segment (taco's
        // de-duplicating iterator): each run of equal coordinates is one coordinate, whose
        // entries are its children's positions.
        let appends = self.assembly.is_some() && !self.workspace.as_ref().is_some_and(|w| w.active);
        let unique = reached.sparse.iter().all(|&(k, l)| self.level(k, l).is_unique());
        // (A resolving subsection iterator with coefficient 1 visits every entry of its range.)
        let alone = !dense_driven
            && reached.subsections.iter().all(|s| matches!(s, Subsection::Plain | Subsection::Last { coef: 1, .. }))
            && reached.sparse.len() == 1
            && points.len() == 1
            && (unique || (!appends && self.producers.is_empty()));
        let segmented = self.segmented(&reached, alone)?;
        // The outermost loop over a dense coordinate of the result runs as row ranges (see
        // `Partition`); sparse iterators it advances (`y(i) = b(i) + A(i,j)·x(j)`, A in DCSR)
        // start at the first entry of the range, found by a search.
        let ranged = self.partitionable
            && self.depth() == 1
            && !self.in_producer
            && dense_driven
            && split_inner.is_none()
            && reached.subsections.iter().all(|s| matches!(s, Subsection::Plain))
            && reached.sparse.iter().all(|&(k, l)| {
                let o = self.operand(k);
                l == 0 && o.levels[l].structured().is_none()
            });
        if ranged {
            self.bounds = Some(self.f.array("row_bounds", ElemType::I64, Role::Bounds, false));
            // An operand whose dense first level this loop locates: its second level's `pos`
            // counts each row's entries.
            self.row_weights = reached.dense.iter().find_map(|&(k, l)| {
                let o = self.operand(k);
                let dim = o.format.levels().first()?.expr.dim();
                let plain = self.accesses[k].subscripts.get(dim).and_then(|t| t.as_var()) == Some(v);
                if l == 0 && plain { o.levels.get(1)?.pos() } else { None }
            });
        }
        // Positions and ends of the sparse iterators.
        let mut out = guide_setup.clone();
        let Opened { setup, cursors, narrowed } =
            self.open_iterators(v, &name, &reached, &segmented, alone, ranged, split_inner)?;
        out.extend(setup);
        let lp = CoLoop {
            v,
            loop_var,
            inside: Inside { loops: rest, lhs, op, rhs },
            split_inner,
            reached,
            points,
            cursors,
            guide_step,
        };
        let mut entry_pass = None;
        if let ([(its, e)], [sub @ Subsection::Window { .. }], [cursor]) =
            (lp.points.as_slice(), lp.reached.subsections.as_slice(), lp.cursors.as_slice())
            && its == &[0]
            && split_inner.is_none()
            && lp.reached.guided.is_empty()
        {
            let w = WindowLoop {
                v,
                loop_var,
                level: lp.reached.sparse[0],
                subsection: sub,
                cursor: (cursor.pos, cursor.end),
                crd: &cursor.crd,
                dense: &lp.reached.dense,
            };
            match self.window_by_entries(&w, Inside { loops: rest, lhs, op, rhs: *e }, (&reads, &consumer_reads))? {
                Some(EntryPass { pass, when: None }) => {
                    out.extend(pass);
                    self.bound[v] = None;
                    return Ok(out);
                }
                pass => entry_pass = pass,
            }
        }
        if let Some((_, block, factor)) = split_inner.filter(|_| !dense_driven) {
            // Sparse iterators drive the loop over one block of a split (coordinates split,
            // as taco does): each started at the block's first coordinate (above) and stops
            // before the next block's, found by a search from where it starts.
            let next = bin(BinOp::Mul, bin(BinOp::Add, var(block), int(1)), int(factor));
            for cursor in &lp.cursors {
                let stop = self.f.fresh_var(&format!("{name}_block_end"), ScalarType::Index);
                out.push(Stmt::Decl(stop, var(cursor.pos)));
                out.extend(lower_bound(&mut self.f, stop, cursor.end, &cursor.crd, next.clone()));
                out.push(Stmt::Assign(cursor.end, var(stop)));
            }
        }
        let out = if alone {
            self.positions_loop(&lp, out, guide_setup, narrowed, unique, parallel)?
        } else if dense_driven {
            self.every_coordinate_loop(&lp, out, ranged, parallel)?
        } else {
            self.merge_loops(&lp, out, entry_pass)?
        };
        self.bound[v] = None;
        self.unguide(&lp.reached.guided, guides_open);
        Ok(out)
    }

    /// Access `k`'s level `l`, as the kernel reads it.
    fn level(&self, k: AccessId, l: usize) -> &super::iterate::Level {
        &self.operand(k).levels[l]
    }

    /// The merge lattice of `rhs` along `v`, as the plan holds it: per point, the iterators
    /// of `sparse` it merges (full ones left out) and its expression.
    fn lattice_points(
        &self,
        v: IndexVarId,
        rhs: ExprId,
        sparse: &[(AccessId, usize)],
    ) -> Result<Vec<(Vec<usize>, ExprId)>, LowerError> {
        let points = self.planned_lattice(rhs, v)?;
        // The iterator of a lattice level: which (access, level) of `sparse` it is.
        let find = |it: &nm_ir::lattice::LevelIterator| {
            sparse.iter().position(|&(k, l)| {
                let a = &self.accesses[k];
                a.tensor == it.tensor && a.subscripts == it.subscripts && l == it.level
            })
        };
        Ok(points
            .iter()
            .map(|p| (p.iterators.iter().filter(|it| !it.full).filter_map(find).collect(), p.expr))
            .collect())
    }

    /// Which iterators walk their level segment by segment: a non-unique level not walked
    /// alone (a window is a range of entries, not one coordinate). An unordered level can only
    /// be walked alone.
    fn segmented(&self, reached: &Reached, alone: bool) -> Result<Vec<bool>, LowerError> {
        let mut segmented = vec![false; reached.sparse.len()];
        for (n, &(k, l)) in reached.sparse.iter().enumerate() {
            let level = self.level(k, l);
            if !level.is_ordered() && !alone {
                let tname = &self.cin.tensors[self.accesses[k].tensor].name;
                return refuse(
                    LowerError::Format,
                    format!("co-iterating `{tname}`'s unordered level {l} with other operands or into a sparse result"),
                );
            }
            segmented[n] = !level.is_unique() && !alone && !matches!(reached.subsections[n], Subsection::Window { .. });
        }
        Ok(segmented)
    }

    /// One iteration of a co-iterating loop over the iterators `loop_its`: read their
    /// coordinates, locate the dense levels, a case per lattice point whose iterators are all
    /// among them (most specific first), then advance those that stood on the loop's value.
    fn case_body(&mut self, lp: &CoLoop, loop_its: &[usize], dense_mode: bool) -> Result<Vec<Stmt>, LowerError> {
        let (v, loop_var) = (lp.v, lp.loop_var);
        let mut body = Vec::new();
        for &n in loop_its {
            body.extend(lp.cursors[n].read(dense_mode));
        }
        if !dense_mode {
            let min = loop_its
                .iter()
                .map(|&n| var(lp.cursors[n].coordinate))
                .reduce(|a, b| bin(BinOp::Min, a, b))
                .expect("a sparse iterator");
            body.push(Stmt::Decl(loop_var, min));
        }
        body.extend(lp.guide_step.iter().cloned());
        self.locate(&mut body, &lp.reached.dense);
        let mut chain: Vec<(Expr, Vec<Stmt>)> = Vec::new();
        for (its, e) in lp.points.clone() {
            if !its.iter().all(|n| loop_its.contains(n)) {
                continue;
            }
            let saved = (self.positions.clone(), self.bound.clone());
            let (segments, open_windows) = (self.segments.len(), self.windows.len());
            let mut inner = Vec::new();
            for &n in &its {
                let (k, l) = lp.reached.sparse[n];
                let cursor = &lp.cursors[n];
                if let Some(subrange) = &cursor.subrange {
                    self.windows.push((k, l, subrange.clone()));
                    continue;
                }
                self.positions[k][l] = Some(cursor.pos);
                if cursor.segmented {
                    self.segments.push((k, l, cursor.segment_end));
                }
            }
            inner.extend(self.result_before(v, loop_var));
            inner.extend(self.nest(Inside { rhs: e, ..lp.inside })?);
            inner.extend(self.result_after(v, loop_var));
            (self.positions, self.bound) = saved;
            self.segments.truncate(segments);
            self.windows.truncate(open_windows);
            chain.push((all(its.iter().map(|&n| lp.cursors[n].on(loop_var))), inner));
        }
        let mut cases: Vec<Stmt> = Vec::new();
        for (cond, then) in chain.into_iter().rev() {
            cases = vec![Stmt::If { cond, then, otherwise: cases }];
        }
        body.extend(cases);
        for &n in loop_its {
            let cursor = &lp.cursors[n];
            let then = cursor.advance(loop_var, self.size(v) as i64);
            body.push(Stmt::If { cond: cursor.on(loop_var), then, otherwise: vec![] });
        }
        Ok(body)
    }

    /// One iterator and nothing to merge: a plain loop over its positions.
    fn positions_loop(
        &mut self,
        lp: &CoLoop,
        mut out: Vec<Stmt>,
        guide_setup: Vec<Stmt>,
        narrowed: bool,
        unique: bool,
        parallel: bool,
    ) -> Result<Vec<Stmt>, LowerError> {
        let (v, loop_var) = (lp.v, lp.loop_var);
        let cursor = &lp.cursors[0];
        let (mut p, crd) = (cursor.pos, &cursor.crd);
        let (k, l) = lp.reached.sparse[0];
        let (mut start, mut stop) = cursor.range.clone();
        let mut setup = guide_setup;
        if matches!(crd, Coordinates::Mapped { .. }) || lp.split_inner.is_some() || narrowed {
            // The range the searches above narrowed (a window, a split's block, the
            // loop's range).
            setup = std::mem::take(&mut out);
            (start, stop) = (var(p), var(cursor.end));
            p = self.f.fresh_var(&format!("{}{l}_q", self.access_name(k)), ScalarType::Index);
        }
        let mut body = vec![Stmt::Decl(loop_var, crd.at(var(p)))];
        body.extend(lp.guide_step.iter().cloned());
        let mut inner = Vec::new();
        self.locate(&mut inner, &lp.reached.dense);
        let saved = (self.positions.clone(), self.bound.clone());
        self.positions[k][l] = Some(p);
        inner.extend(self.result_before(v, loop_var));
        self.repeating += usize::from(!unique);
        let nested = self.nest(Inside { rhs: lp.points[0].1, ..lp.inside });
        self.repeating -= usize::from(!unique);
        inner.extend(nested?);
        inner.extend(self.result_after(v, loop_var));
        (self.positions, self.bound) = saved;
        // A structured level's last block may reach past the dimension (zero padding), and
        // its dimension past the loop's range.
        let o = self.operand(k);
        let dimension = o.shape[o.format.levels()[l].expr.dim()];
        match crd {
            Coordinates::Structured { m, .. } if structured::needs_bound(*m as usize, self.size(v), dimension) => {
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
        Ok(setup)
    }

    /// Some lattice point has no sparse iterator: a `for` over every coordinate (a row range
    /// of them where `ranged`), the iterators read where they stand.
    fn every_coordinate_loop(
        &mut self,
        lp: &CoLoop,
        mut out: Vec<Stmt>,
        ranged: bool,
        parallel: bool,
    ) -> Result<Vec<Stmt>, LowerError> {
        let (v, loop_var) = (lp.v, lp.loop_var);
        let all_its: Vec<usize> = (0..lp.cursors.len()).collect();
        let mut body = self.case_body(lp, &all_its, true)?;
        if ranged && self.assembly.is_none() && self.reduction.is_none() {
            body = self.row_body(lp.inside.lhs, v, loop_var, body);
        }
        let (start, end) = match self.bounds.filter(|_| ranged) {
            Some(b) => (load(b, int(0)), load(b, int(1))),
            None => (int(0), int(self.size(v) as i64)),
        };
        // A row range is split across threads by the caller, not by OpenMP.
        if parallel && ranged {
            self.on_threads.push(v);
        }
        let parallel = parallel && lp.cursors.is_empty() && !ranged;
        let parallel = self.on_omp_threads(v, parallel);
        match lp.split_inner {
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
        Ok(out)
    }

    /// Every lattice point has sparse iterators: a `while` per point over its iterators, run
    /// one after another (the entry pass first where it applies).
    fn merge_loops(
        &mut self,
        lp: &CoLoop,
        mut out: Vec<Stmt>,
        entry_pass: Option<EntryPass>,
    ) -> Result<Vec<Stmt>, LowerError> {
        let mut loops = Vec::new();
        for (its, _) in &lp.points {
            let cond = all(its.iter().map(|&n| lp.cursors[n].live()));
            let body = self.case_body(lp, its, false)?;
            loops.push(Stmt::While { cond, body });
        }
        match entry_pass {
            Some(EntryPass { pass, when: Some(cond) }) => {
                out.push(Stmt::If { cond, then: pass, otherwise: loops });
            }
            _ => out.extend(loops),
        }
        Ok(out)
    }

    /// Opens the iterators of the compressed levels the loop over `v` reaches, each as its
    /// subsection says: its first and last position (an outer loop's window, the row range's
    /// or the split block's first entry searched), the coordinates it reads.
    #[allow(clippy::too_many_arguments)]
    fn open_iterators(
        &mut self,
        v: IndexVarId,
        name: &str,
        reached: &Reached,
        segmented: &[bool],
        alone: bool,
        ranged: bool,
        split_inner: Option<(VarId, VarId, i64)>,
    ) -> Result<Opened, LowerError> {
        let mut out = Vec::new();
        let (mut cursors, mut narrowed) = (Vec::new(), false);
        for (n, (&(k, l), subsection)) in reached.sparse.iter().zip(&reached.subsections).enumerate() {
            let o = self.operand(k).clone();
            // (A rows iterator's parent is not resolved: its range is its rows'.)
            let rows = matches!(subsection, Subsection::Rows { .. });
            let parent = match l.checked_sub(1) {
                None => int(0),
                Some(_) if rows => int(0),
                Some(up) => var(self.positions[k][up].expect("resolved in order")),
            };
            let crd = o.levels[l].coordinates(&parent);
            let tname = self.access_name(k);
            // Subsection iterators nest inside others of the same level: names of their own.
            let plain = matches!(subsection, Subsection::Plain);
            let mut new_var = |name: String| {
                if plain { self.f.var(&name, ScalarType::Index) } else { self.f.fresh_var(&name, ScalarType::Index) }
            };
            let p = new_var(format!("{tname}{l}_p{n}"));
            let end = new_var(format!("{tname}{l}_end{n}"));
            let coordinate = new_var(format!("{tname}{l}_{name}{n}"));
            let range = self.level_range(&o, k, l, parent.clone());
            let segment_end = self.f.var(&format!("{tname}{l}_segend{n}"), ScalarType::Index);
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
            let dimension = o.shape[o.format.levels()[l].expr.dim()];
            if !alone && let Some(trim) = structured::trim_padding(p, end, &crd, self.size(v), dimension) {
                out.push(trim);
            }
            let at = Opening { v, k, l, n, tname: &tname, p, end, parent, window, level_pos: o.levels[l].pos() };
            let (crd, subrange) = match subsection {
                Subsection::Plain => {
                    let crd = self.open_plain(&at, crd, name, ranged, split_inner, &mut out, &mut narrowed)?;
                    (crd, None)
                }
                Subsection::Last { term, coef, size } => {
                    (self.open_last(&at, crd, (term, *coef, *size), &mut out), None)
                }
                Subsection::Rows { rows, term, coef, width, size, span } => {
                    let (init, crd, subrange) =
                        self.rows_cursor(k, l, v, (rows, term), (*coef, *width, *size, *span), end, &crd);
                    out.extend(init);
                    (crd, Some(subrange))
                }
                Subsection::Window { term, coef, width, size } => {
                    let (crd, subrange) = self.open_window(&at, crd, (term, *coef, *width, *size), &mut out);
                    (crd, Some(subrange))
                }
            };
            cursors.push(Cursor {
                pos: p,
                end,
                coordinate,
                crd,
                range,
                segment_end,
                segmented: segmented[n],
                subrange,
            });
        }
        Ok(Opened { setup: out, cursors, narrowed })
    }

    /// Opens a plain iterator (its subscript is the loop's variable) where the loop covers
    /// only part of its level: a dimension larger than the loop's range ("valid" semantics: a
    /// compound subscript narrowed the variable) ends at the first coordinate past it; the
    /// inner loop of a `split` starts at its block's first coordinate (found by the
    /// differential tests: iterators restarted from the level's first entry in every block and
    /// never reached the later ones); a row range starts at its first row.
    #[allow(clippy::too_many_arguments)]
    fn open_plain(
        &mut self,
        at: &Opening,
        crd: Coordinates,
        name: &str,
        ranged: bool,
        split_inner: Option<(VarId, VarId, i64)>,
        out: &mut Vec<Stmt>,
        narrowed: &mut bool,
    ) -> Result<Coordinates, LowerError> {
        let Opening { v, k, l, n, p, end, .. } = *at;
        let tname = at.tname;
        let o = self.operand(k);
        let level = o.format.levels()[l];
        if o.shape[level.expr.dim()] > self.size(v) && !matches!(crd, Coordinates::Structured { .. }) {
            if !matches!(level.expr, nm_format::LevelExpr::Dim(_)) || !o.levels[l].is_ordered() {
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
        Ok(crd)
    }
}
