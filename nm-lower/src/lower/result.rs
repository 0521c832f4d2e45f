//! Writing the result: `where` temporaries, dense results stored in place (whole sums
//! stored, rows summed in a stack buffer), assembled results appended, and the expression
//! of an assignment.

use super::workspace::{one_if, set_marks, word};
use super::{LowerError, Lowerer, is_factor, refuse};
use crate::ir::build::{bin, float, int, load, var};
use crate::ir::{ArrayId, BinOp, Expr, Role, ScalarType, Stmt, UnOp, VarId};
use nm_ir::id::Id;
use nm_ir::notation::{Access, AssignOp, BinaryOp, Expr as CinExpr, ExprId, IndexVarId, TensorId};

/// Whether `s` (its own expressions, not nested statements) loads from `array`.
pub(super) fn stmt_loads(s: &Stmt, array: ArrayId) -> bool {
    let mut found = false;
    s.exprs(&mut |e| e.walk(&mut |x| found |= matches!(x, Expr::Load(a, _) if *a == array)));
    found
}

/// `body` with every store into `from` going to `to` instead, at the index with the row
/// variable `row` set to 0 (its offset inside the row).
pub(super) fn redirect_stores(body: &[Stmt], from: ArrayId, to: ArrayId, row: VarId) -> Vec<Stmt> {
    body.iter()
        .map(|s| match s {
            Stmt::Store { array, index, value, accumulate } if *array == from => Stmt::Store {
                array: to,
                index: crate::prefetch::substitute(index, row, &int(0)),
                value: value.clone(),
                accumulate: *accumulate,
            },
            Stmt::For { var, start, end, body, parallel } => Stmt::For {
                var: *var,
                start: start.clone(),
                end: end.clone(),
                body: redirect_stores(body, from, to, row),
                parallel: *parallel,
            },
            Stmt::While { cond, body } => {
                Stmt::While { cond: cond.clone(), body: redirect_stores(body, from, to, row) }
            }
            Stmt::If { cond, then, otherwise } => Stmt::If {
                cond: cond.clone(),
                then: redirect_stores(then, from, to, row),
                otherwise: redirect_stores(otherwise, from, to, row),
            },
            other => other.clone(),
        })
        .collect()
}

impl Lowerer<'_> {
    /// The scalar variable of a `where` temporary.
    pub(super) fn temporary(&self, t: TensorId) -> Option<VarId> {
        self.temporaries.iter().find(|(u, _)| *u == t).map(|(_, v)| *v)
    }

    /// The result level `v` indexes, when the result is assembled.
    pub(super) fn result_level(&self, v: IndexVarId) -> Option<usize> {
        let a = self.assembly.as_ref()?;
        a.vars.iter().position(|&w| w == v)
    }

    pub(super) fn result_before(&mut self, v: IndexVarId, loop_var: VarId) -> Vec<Stmt> {
        let Some(l) = self.result_level(v) else { return Vec::new() };
        let mut a = self.assembly.take().expect("assembled");
        let out = a.before(&mut self.f, l, loop_var);
        self.assembly = Some(a);
        out
    }

    /// The body of a row loop over a dense result's first coordinate (`C(i, ...)`, row `i` =
    /// `at`) that sums into the row from inside a reduction (SpMM: `for k { for j { C[i,j] +=
    /// ... } }`), rewritten to sum into a kernel-local row buffer that is zeroed first and
    /// copied out last; the C compiler keeps a short row in registers (64 doubles: 8 AVX-512
    /// registers). Summing in memory, stores to `C[i, j]` and loads of `B[k, j]` 4 KiB apart are
    /// taken for dependent by the CPU: with both arrays page-aligned that made an SpMM a third
    /// slower; in registers, hand-written C runs as fast whatever the alignment (and a wider
    /// swept row, on the stack, still ran faster through the buffer). A row reached by
    /// scattering — at coordinates read from a sparse operand — is never held in registers:
    /// there the buffer is one more pass over the row, zeroed and copied, however few terms
    /// reach it, and the sparsest convolutions into dense results ran slower than the MLIR
    /// sparsifier's with it and faster without (BENCHMARKS.md, "CPU kernels against the
    /// peers", the sparsest convolutions).
    /// `Err(body)` unchanged when the pattern does not hold: the result read in the body, `i`
    /// in another subscript, a row scattered into rather than swept, rows of one element (a
    /// register accumulates those) or of more than 4096 (the buffer lives on the stack).
    pub(super) fn accumulate_rows(
        &mut self,
        lhs: &Access,
        v: IndexVarId,
        at: VarId,
        body: Vec<Stmt>,
    ) -> Result<Vec<Stmt>, Vec<Stmt>> {
        let vals = self.result_vals;
        let shape = &self.types.tensors[self.result.index()].shape;
        let row: usize = shape.iter().skip(1).product();
        let first_only = lhs.subscripts.first().and_then(|t| t.as_var()) == Some(v)
            && lhs.subscripts.iter().skip(1).all(|t| t.as_var() != Some(v));
        let reads_result = crate::ir::any(&body, |s| stmt_loads(s, vals));
        let accumulates =
            crate::ir::any(&body, |s| matches!(s, Stmt::Store { array, accumulate: true, .. } if *array == vals));
        if !first_only
            || reads_result
            || !accumulates
            || !crate::ir::sweeps_row(&body, |a| a == vals)
            || !(2..=4096).contains(&row)
        {
            return Err(body);
        }
        let buffer = match self.row_buffer {
            Some(b) => b,
            None => {
                let name = format!("{}_row", self.cin.tensors[self.result].name);
                let b = self.f.array(&name, self.value, Role::Local { len: row }, true);
                self.row_buffer = Some(b);
                b
            }
        };
        let q = self.f.var("row_q", ScalarType::Index);
        let slab = bin(BinOp::Mul, var(at), int(row as i64));
        let mut out = vec![Stmt::For {
            var: q,
            start: int(0),
            end: int(row as i64),
            body: vec![Stmt::Store { array: buffer, index: var(q), value: float(0.0), accumulate: false }],
            parallel: false,
        }];
        out.extend(redirect_stores(&body, vals, buffer, at));
        let q = self.f.var("row_q", ScalarType::Index);
        out.push(Stmt::For {
            var: q,
            start: int(0),
            end: int(row as i64),
            body: vec![Stmt::Store {
                array: vals,
                index: bin(BinOp::Add, slab, var(q)),
                value: load(buffer, var(q)),
                accumulate: false,
            }],
            parallel: false,
        });
        Ok(out)
    }

    /// Zeroes the dense result's elements whose coordinate `v` is `at` (all of them when
    /// `fixed` is `None`). A kernel starts its dense result at zero itself, as taco's compute
    /// kernels do: a timed run includes it, as the peers' runs include theirs, and outputs
    /// can be reused from run to run. Per row of a row range, right before the row is
    /// computed (it is then in cache), and never outside the range.
    pub(super) fn zero_result(&mut self, lhs: &Access, fixed: Option<(IndexVarId, VarId)>) -> Vec<Stmt> {
        let vals = self.result_vals;
        let zero = |index| Stmt::Store { array: vals, index, value: float(0.0), accumulate: false };
        let Some((v, at)) = fixed else {
            let q = self.f.var("zero_q", ScalarType::Index);
            return vec![Stmt::For {
                var: q,
                start: int(0),
                end: Expr::Len(vals),
                body: vec![zero(var(q))],
                parallel: false,
            }];
        };
        let shape = self.types.tensors[self.result.index()].shape.clone();
        let mut loops = Vec::new();
        let mut index = int(0);
        for (d, t) in lhs.subscripts.iter().enumerate() {
            let coordinate = if t.as_var() == Some(v) {
                var(at)
            } else {
                let q = self.f.var(&format!("zero_{d}"), ScalarType::Index);
                loops.push((q, shape[d]));
                var(q)
            };
            index = bin(BinOp::Add, bin(BinOp::Mul, index, int(shape[d] as i64)), coordinate);
        }
        let mut stmt = zero(index);
        for (q, n) in loops.into_iter().rev() {
            stmt = Stmt::For { var: q, start: int(0), end: int(n as i64), body: vec![stmt], parallel: false };
        }
        vec![stmt]
    }

    pub(super) fn result_after(&self, v: IndexVarId, loop_var: VarId) -> Vec<Stmt> {
        match (self.result_level(v), &self.assembly) {
            (Some(l), Some(a)) => a.after(l, loop_var),
            _ => Vec::new(),
        }
    }

    /// The assignment at the leaf of the loops. Levels whose subscripts the loops bound before
    /// reaching them — a compound subscript's variables bound before its parent level was
    /// resolved (`I(i+r, j+q)` in CSR under `reorder(i,j,q,r)`) — are located here: dense
    /// ones directly, compressed ones by binary search for the coordinate, the assignment
    /// running only where it is stored (so only for a factor of a product).
    pub(super) fn assignment(&mut self, lhs: &Access, op: AssignOp, rhs: ExprId) -> Result<Vec<Stmt>, LowerError> {
        let (saved, segments) = (self.positions.clone(), self.segments.len());
        let mut steps: Vec<(Vec<Stmt>, Option<Expr>)> = Vec::new();
        for k in self.reads(rhs) {
            if self.all_dense(k) {
                continue;
            }
            let a = self.accesses[k].clone();
            let o = self.operands[a.tensor].clone().expect("decomposed");
            let levels = o.format.levels();
            while let Some(l) = self.positions[k][..levels.len()].iter().position(Option::is_none) {
                let term = &a.subscripts[levels[l].expr.dim()];
                if term.vars().any(|v| self.bound[v].is_none()) {
                    break;
                }
                if o.levels[l].is_dense() {
                    let mut stmts = Vec::new();
                    self.locate(&mut stmts, &[(k, l)]);
                    steps.push((stmts, None));
                    continue;
                }
                let tname = self.cin.tensors[a.tensor].name.clone();
                if !o.levels[l].is_searchable() || !is_factor(self.exprs, rhs, &a) {
                    return refuse(
                        LowerError::LoopOrder,
                        format!(
                            "`{tname}`'s level {l} is reached after every variable of its subscript is bound (its parent level resolved later): searching it needs an ordered compressed level read as a factor of a product; reorder the loops"
                        ),
                    );
                }
                let found = self.search_coordinate(k, l, term);
                steps.push((found.search, Some(found.stored)));
                if let Some(segment) = found.segment {
                    steps.push((segment, None));
                }
            }
        }
        let body = self.resolved_assignment(lhs, op, rhs);
        self.positions = saved;
        self.segments.truncate(segments);
        let mut body = body?;
        for (mut stmts, found) in steps.into_iter().rev() {
            match found {
                Some(cond) => stmts.push(Stmt::If { cond, then: body, otherwise: vec![] }),
                None => stmts.extend(body),
            }
            body = stmts;
        }
        Ok(body)
    }

    /// Where the expression `e` has a term, reading each `where` temporary as whether its
    /// producer added one (`temporary_terms`); every other operand has one at the leaf that
    /// reads it (the lattice point holds it). `None`: everywhere.
    pub(super) fn has_terms(&self, e: ExprId) -> Option<Expr> {
        let either = |a: Option<Expr>, b: Option<Expr>, op| match (a, b) {
            (Some(x), Some(y)) => Some(bin(op, x, y)),
            (x, None) | (None, x) if op == BinOp::And => x,
            _ => None,
        };
        match &self.exprs[e] {
            CinExpr::Access(a) => {
                let terms = self.temporary_terms.iter().find(|(t, _)| *t == a.tensor)?.1?;
                Some(bin(BinOp::Ne, var(terms), int(0)))
            }
            CinExpr::Literal(_) | CinExpr::Sum(..) => None,
            CinExpr::Neg(a) => self.has_terms(*a),
            CinExpr::Binary(op, a, b) => {
                let op = if matches!(op, BinaryOp::Mul | BinaryOp::Div) { BinOp::And } else { BinOp::Or };
                either(self.has_terms(*a), self.has_terms(*b), op)
            }
        }
    }

    pub(super) fn resolved_assignment(
        &mut self,
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        let stmts = self.unguarded_assignment(lhs, op, rhs)?;
        Ok(match self.has_terms(rhs) {
            Some(cond) => vec![Stmt::If { cond, then: stmts, otherwise: vec![] }],
            None => stmts,
        })
    }

    fn unguarded_assignment(&mut self, lhs: &Access, op: AssignOp, rhs: ExprId) -> Result<Vec<Stmt>, LowerError> {
        // Every access the expression reads must be fully resolved.
        for k in self.reads(rhs) {
            let a = &self.accesses[k];
            let levels = self.operands[a.tensor].as_ref().expect("decomposed").format.levels().len();
            if !a.subscripts.is_empty() && !self.all_dense(k) && self.positions[k][..levels].iter().any(Option::is_none)
            {
                return refuse(
                    LowerError::LoopOrder,
                    format!("`{}` has levels no loop reaches", self.cin.tensors[a.tensor].name),
                );
            }
        }
        if let Some(t) = self.temporary(lhs.tensor) {
            let value = self.expr(rhs)?;
            let value = if op == AssignOp::Accumulate { bin(BinOp::Add, var(t), value) } else { value };
            let mut out = vec![Stmt::Assign(t, value)];
            out.extend(self.producing.map(super::marks::mark));
            return Ok(out);
        }
        if let Some(w) = self.workspace.as_ref().filter(|w| w.active) {
            let j = var(self.bound[w.var].expect("the workspace variable's loop"));
            let value = self.expr(rhs)?;
            let add = Stmt::Store { array: w.values, index: j.clone(), value, accumulate: op == AssignOp::Accumulate };
            if w.marked {
                return Ok(vec![add]);
            }
            let bit = bin(BinOp::Shl, int(1), bin(BinOp::BitAnd, j.clone(), int(63)));
            let fresh = bin(BinOp::Eq, bin(BinOp::BitAnd, load(w.mark, word(j.clone())), bit.clone()), int(0));
            let set = set_marks(w.mark, j.clone(), bit);
            // A first touch is a coin toss when a row adds few products per coordinate (a sparse
            // convolution), and a mispredicted branch each time; with many (SpGEMM on a
            // finite-element matrix) the branch is predictable and an unconditional store would
            // make consecutive touches of one word wait on each other. The previous row decides.
            let branchless = bin(BinOp::Ne, var(w.branchless), int(0));
            // A row that keeps no list needs only the mark.
            let marked = Stmt::If {
                cond: branchless.clone(),
                then: vec![set.clone()],
                otherwise: vec![Stmt::If { cond: fresh.clone(), then: vec![set.clone()], otherwise: vec![] }],
            };
            let touch = match w.list {
                None => marked,
                Some(l) => {
                    let list =
                        Stmt::Store { array: l.coords, index: var(w.count), value: j.clone(), accumulate: false };
                    let listed = Stmt::If {
                        cond: branchless,
                        then: vec![
                            list.clone(),
                            Stmt::Assign(w.count, bin(BinOp::Add, var(w.count), one_if(fresh.clone()))),
                            set.clone(),
                        ],
                        otherwise: vec![Stmt::If {
                            cond: fresh,
                            then: vec![set, list, Stmt::Assign(w.count, bin(BinOp::Add, var(w.count), int(1)))],
                            otherwise: vec![],
                        }],
                    };
                    Stmt::If {
                        cond: bin(BinOp::Ne, var(l.listing), int(0)),
                        then: vec![listed],
                        otherwise: vec![marked],
                    }
                }
            };
            return Ok(vec![Stmt::Assign(w.products, bin(BinOp::Add, var(w.products), int(1))), touch, add]);
        }
        if let Some(acc) = self.accumulator {
            let value = self.expr(rhs)?;
            return Ok(vec![Stmt::Assign(acc, bin(BinOp::Add, var(acc), value))]);
        }
        if let Some(a) = &self.assembly {
            let last = a.vars.last().copied().expect("a result level");
            let v = self.bound[last].expect("the last result level's loop");
            let value = self.expr(rhs)?;
            return Ok(a.append(v, value));
        }
        let value = self.expr(rhs)?;
        self.result_store(lhs, value, op == AssignOp::Accumulate)
    }

    /// Stores `value` into the result element `lhs` names: in place in a dense result, or
    /// inserted into the sparse workspace (where duplicates add up, so `=` and `+=` agree: an
    /// assignment reaches each element once).
    pub(super) fn result_store(&self, lhs: &Access, value: Expr, accumulate: bool) -> Result<Vec<Stmt>, LowerError> {
        let Some(ism) = &self.ism else {
            let index = self.result_index(lhs)?;
            return Ok(vec![Stmt::Store { array: self.result_vals, index, value, accumulate }]);
        };
        let mut key = int(0);
        let mut first = int(0);
        for (d, t) in lhs.subscripts.iter().enumerate() {
            let v = t.as_var().expect("the left-hand side is plain variables");
            let lv = self.bound[v].ok_or_else(|| {
                LowerError::LoopOrder(format!("result variable `{}` has no loop", self.cin.vars[v].name))
            })?;
            if d == ism.first_dim {
                first = var(lv);
            }
            let term = if ism.strides[d] == 1 { var(lv) } else { bin(BinOp::Mul, var(lv), int(ism.strides[d])) };
            key = if d == 0 { term } else { bin(BinOp::Add, key, term) };
        }
        Ok(vec![Stmt::Insert { workspace: ism.slot, key, first, value }])
    }

    /// The row-major position of the dense result element `lhs` names.
    pub(super) fn result_index(&self, lhs: &Access) -> Result<Expr, LowerError> {
        let shape = &self.types.tensors[self.result.index()].shape;
        let mut index = int(0);
        for (d, t) in lhs.subscripts.iter().enumerate() {
            let v = t.as_var().expect("the left-hand side is plain variables");
            let lv = self.bound[v].ok_or_else(|| {
                LowerError::LoopOrder(format!("result variable `{}` has no loop", self.cin.vars[v].name))
            })?;
            index = bin(BinOp::Add, bin(BinOp::Mul, index, int(shape[d] as i64)), var(lv));
        }
        Ok(index)
    }

    /// The value of a CIN expression.
    pub(super) fn expr(&self, e: ExprId) -> Result<Expr, LowerError> {
        Ok(match &self.exprs[e] {
            CinExpr::Access(a) if self.temporary(a.tensor).is_some() => var(self.temporary(a.tensor).expect("checked")),
            CinExpr::Access(a) => {
                let k = self.access_id(a);
                let op = self.operands[a.tensor].as_ref().expect("decomposed");
                let position = if !a.subscripts.is_empty() && self.all_dense(k) {
                    self.dense_position(k)?
                } else if a.subscripts.is_empty() {
                    int(0)
                } else {
                    let levels = op.format.levels().len();
                    match self.positions[k][levels - 1] {
                        Some(p) => var(p),
                        None => {
                            let l = self.positions[k].iter().position(Option::is_none).unwrap_or(levels - 1);
                            return refuse(
                                LowerError::LoopOrder,
                                format!(
                                    "this loop order binds the subscripts of `{}`'s level {l} before the loops reach it (its parent level is resolved later); reorder so the variables of each level's subscript come after those of the levels above it",
                                    self.cin.tensors[a.tensor].name
                                ),
                            );
                        }
                    }
                };
                load(op.vals, position)
            }
            CinExpr::Literal(v) => float(*v),
            CinExpr::Neg(a) => Expr::Unary(UnOp::Neg, Box::new(self.expr(*a)?)),
            CinExpr::Sum(..) => return refuse(LowerError::Where, "`sum` inside CIN"),
            CinExpr::Binary(op, a, b) => {
                let (x, y) = (self.expr(*a)?, self.expr(*b)?);
                let op = match op {
                    BinaryOp::Add => BinOp::Add,
                    BinaryOp::Sub => BinOp::Sub,
                    BinaryOp::Mul => BinOp::Mul,
                    BinaryOp::Div => BinOp::Div,
                };
                bin(op, x, y)
            }
        })
    }
}
