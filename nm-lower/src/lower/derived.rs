//! The loops of variables a schedule made: a `split`'s block loop, a `fuse` of dense loops,
//! and the positions a `pos` variable walks.

use super::{Inside, LowerError, Lowerer, PositionSpace, refuse};
use crate::ir::build::{bin, int, load, var};
use crate::ir::{BinOp, ElemType, Role, ScalarType, Stmt, VarId};
use nm_ir::concrete::Derivation;
use nm_ir::notation::IndexVarId;

impl Lowerer<'_> {
    /// What a `pos` variable iterates: `pos(f, fpos, T)` with `f = fuse(a, b)` and `T(a, b)`
    /// a CSR-like operand (a dense level, then a compressed one): the positions `0..nnz` of its
    /// compressed level, each naming a row `a` and a column `b`.
    pub(super) fn position_space(&self, v: IndexVarId) -> Option<PositionSpace> {
        let Some(&Derivation::Pos { parent, tensor }) = self.cin.derivations.get(&v) else { return None };
        let Some(&Derivation::Fuse { outer, inner }) = self.cin.derivations.get(&parent) else { return None };
        let (k, _) = self.accesses.iter().find(|(_, a)| {
            a.tensor == tensor
                && a.subscripts.len() == 2
                && a.subscripts[0].as_var() == Some(outer)
                && a.subscripts[1].as_var() == Some(inner)
        })?;
        let op = self.operands[tensor].as_ref()?;
        let levels = op.format.levels();
        let csr_like = levels.len() == 2
            && op.levels[0].is_dense()
            && op.levels[1].pos().is_some()
            && op.levels[1].is_unique()
            && levels[0].expr == nm_format::LevelExpr::Dim(0)
            && levels[1].expr == nm_format::LevelExpr::Dim(1);
        if !csr_like {
            return None;
        }
        let (pos, crd) = (op.levels[1].pos()?, op.levels[1].crd()?);
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
        inside: Inside<'_>,
    ) -> Result<Vec<Stmt>, LowerError> {
        let Inside { loops: rest, lhs, op, rhs } = inside;
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
        self.bound[ps.row] = Some(row);
        self.bound[ps.col] = Some(col);
        self.positions[ps.access][0] = Some(row);
        self.positions[ps.access][1] = Some(p);
        // Other operands' dense levels over the two variables are located here, in level
        // order, as a loop over each would (`C(k, j)` with C in CSR: its row `k`).
        for v in [ps.row, ps.col] {
            for k in self.reads(rhs) {
                let a = &self.accesses[k];
                let op = self.operands[a.tensor].as_ref().expect("decomposed");
                let levels = op.format.levels();
                if k == ps.access || self.all_dense(k) {
                    continue;
                }
                if let Some(l) = self.positions[k].iter().take(levels.len()).position(Option::is_none)
                    && op.levels[l].is_dense()
                    && a.subscripts.get(levels[l].expr.dim()).and_then(|t| t.as_var()) == Some(v)
                {
                    self.locate(&mut body, &[(k, l)]);
                }
            }
        }
        let inner = self.nest(Inside { loops: rest, lhs, op, rhs });
        (self.bound, self.positions) = saved;
        body.extend(inner?);
        out.push(Stmt::For { var: loop_var, start, end, body, parallel: false });
        Ok(out)
    }
    /// The loop over `fuse(outer, inner, v)`: one loop over every pair of coordinates, each
    /// variable recovered by a division (`outer = v / |inner|`, `inner = v % |inner|`), where
    /// both only locate dense levels (taco's `fuse` of dense loops, to parallelize one loop
    /// of their product). Iterating sparse levels along it needs `pos` (`position_loop`).
    pub(super) fn fused_loop(
        &mut self,
        v: IndexVarId,
        (outer, inner): (IndexVarId, IndexVarId),
        parallel: bool,
        inside: Inside<'_>,
    ) -> Result<Vec<Stmt>, LowerError> {
        let Inside { loops: rest, lhs, op, rhs } = inside;
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
            self.bound[w] = Some(x);
            self.locate(&mut body, &reached.dense);
        }
        let nested = self.nest(Inside { loops: rest, lhs, op, rhs });
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
    pub(super) fn block_loop(
        &mut self,
        v: IndexVarId,
        parent: IndexVarId,
        factor: u64,
        parallel: bool,
        inside: Inside<'_>,
    ) -> Result<Vec<Stmt>, LowerError> {
        let Inside { loops: rest, lhs, op, rhs } = inside;
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
        let body = self.nest(Inside { loops: rest, lhs, op, rhs });
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
}
