//! Lowering CIN to the loop IR, for statements whose result is dense: each loop co-iterates
//! the compressed levels its variable reaches, as the merge lattice of the expression says
//! (taco's algorithm: a `while` per lattice point with a case per sub-point, or a `for` over
//! every coordinate when a dense operand or a constant never runs out), and locates the dense
//! levels. That covers SpMV, SpMM, SpAdd and element-wise products in any mix of formats, TTV,
//! Gustavson's SpGEMM into a dense result, and reductions to scalars, in any concordant loop
//! order. Sparse results, workspaces (`where`) and compound subscripts are refused with
//! [`LowerError::Unsupported`] naming what is missing.
//!
//! Each operand is decomposed into its arrays at the kernel boundary — per compressed level
//! `T{l}_pos` and `T{l}_crd`, then `T_vals` — tagged with their roles; the result is `R_vals`,
//! dense row-major, zeroed by the caller.

use nm_format::{Format, LevelKind};
use nm_ir::concrete::{ConcreteNotation, Stmt as CinStmt};
use nm_ir::id::{Arena, Id};
use nm_ir::lattice::{MergeLattice, PointExpr};
use nm_ir::notation::{Access, AssignOp, BinaryOp, Expr as CinExpr, ExprId, IndexVarId, Scope, TensorId, Types};

use crate::ir::build::{bin, float, int, load, var};
use crate::ir::{ArrayId, BinOp, ElemType, Expr, Function, Role, ScalarType, Stmt, UnOp, VarId};

/// A statement this lowering does not handle (yet).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LowerError {
    /// Something the first lowering class does not cover.
    #[error("cannot lower this statement yet: {0}")]
    Unsupported(String),
}

fn unsupported<T>(what: impl Into<String>) -> Result<T, LowerError> {
    Err(LowerError::Unsupported(what.into()))
}

/// How one tensor's arrays appear in the kernel.
#[derive(Clone, Debug)]
struct Operand {
    format: Format,
    shape: Vec<usize>,
    pos: Vec<Option<ArrayId>>,
    crd: Vec<Option<ArrayId>>,
    vals: ArrayId,
}

/// The arrays of every tensor, in kernel parameter order: the result's values first, then each
/// operand's `pos`/`crd` per compressed level and values, by tensor id.
pub struct Lowered {
    /// The kernel.
    pub function: Function,
    /// For each parameter, the tensor it belongs to.
    pub params: Vec<TensorId>,
}

struct Lowerer<'a> {
    cin: &'a ConcreteNotation,
    types: &'a Types,
    f: Function,
    operands: Vec<Option<Operand>>,
    result: TensorId,
    result_vals: ArrayId,
    /// Loop variable of each index variable, once bound.
    bound: Vec<Option<VarId>>,
    /// For each (tensor, access), the position variable of each resolved level.
    positions: Vec<Vec<Option<VarId>>>,
    accesses: Vec<Access>,
    /// The statement's expression nodes, plus those lattice points make.
    exprs: Arena<ExprId, CinExpr>,
    /// Every tensor's format, by id (`None`: dense).
    formats: Vec<Option<Format>>,
}

/// Lowers `cin` (one assignment under a nest of loops) with the tensor types of `types`.
pub fn lower(cin: &ConcreteNotation, types: &Types, value: ElemType) -> Result<Lowered, LowerError> {
    // The nest.
    let mut loops = Vec::new();
    let mut s = cin.root;
    let assign = loop {
        match &cin.stmts[s] {
            // Unroll and bound marks only tune a loop; it runs as a plain loop here.
            CinStmt::Forall { var, body, attrs } => {
                loops.push((*var, attrs.parallel.is_some()));
                s = *body;
            }
            CinStmt::Assign { .. } => break s,
            CinStmt::Where { .. } => return unsupported("`where` (temporaries and workspaces)"),
            CinStmt::Sequence { .. } => return unsupported("`sequence`"),
        }
    };
    if !cin.derivations.is_empty() {
        return unsupported("variables made by split, fuse, pos or bound");
    }
    let CinStmt::Assign { lhs, op, rhs } = cin.stmts[assign].clone() else { unreachable!() };
    let result = lhs.tensor;
    if types.tensors[result.index()].format.as_ref().is_some_and(|f| *f != Format::dense(f.order())) {
        return unsupported("a sparse result (assembly arrives with the next lowering class)");
    }
    let mut f = Function::new("kernel");
    let result_vals = f.array(
        &format!("{}_vals", cin.tensors[result].name),
        value,
        Role::Values { tensor: cin.tensors[result].name.clone() },
        true,
    );
    let mut params = vec![result];
    let mut operands: Vec<Option<Operand>> = vec![None; cin.tensors.len()];
    // One iterator per distinct access: `B(i,j) * C(i,j) - C(i,j) * B(i,j)` reads B once.
    let mut accesses: Vec<Access> = Vec::new();
    collect_accesses(cin, rhs, &mut accesses);
    let mut unique: Vec<Access> = Vec::new();
    for a in accesses {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    let accesses = unique;
    for a in &accesses {
        if a.subscripts.iter().any(|t| t.is_compound()) {
            return unsupported("compound subscripts (sparse convolution)");
        }
        let t = a.tensor;
        if t == result {
            return unsupported("the result read on the right-hand side");
        }
        if operands[t.index()].is_some() {
            continue;
        }
        let ty = &types.tensors[t.index()];
        let order = ty.shape.len();
        let format = ty.format.clone().unwrap_or_else(|| Format::dense(order.max(1)));
        let name = cin.tensors[t].name.clone();
        let (mut pos, mut crd) = (vec![None; format.levels().len()], vec![None; format.levels().len()]);
        for (l, level) in format.levels().iter().enumerate() {
            match level.kind {
                LevelKind::Dense => {}
                LevelKind::Compressed(p)
                    if p.unique && p.ordered && !matches!(level.expr, nm_format::LevelExpr::Dim(_)) =>
                {
                    return unsupported(format!("blocked compressed levels (`{name}`)"));
                }
                LevelKind::Compressed(p) if p.unique => {
                    pos[l] = Some(f.array(
                        &format!("{name}{l}_pos"),
                        ElemType::I64,
                        Role::Pos { tensor: name.clone(), level: l },
                        false,
                    ));
                    crd[l] = Some(f.array(
                        &format!("{name}{l}_crd"),
                        ElemType::I64,
                        Role::Crd { tensor: name.clone(), level: l },
                        false,
                    ));
                    params.extend([t, t]);
                }
                other => return unsupported(format!("{other} levels (`{name}`)")),
            }
            if !matches!(level.expr, nm_format::LevelExpr::Dim(_)) {
                return unsupported(format!("blocked levels (`{name}`)"));
            }
        }
        let vals = f.array(&format!("{name}_vals"), value, Role::Values { tensor: name.clone() }, false);
        params.push(t);
        operands[t.index()] = Some(Operand { format, shape: ty.shape.clone(), pos, crd, vals });
    }
    let mut lw = Lowerer {
        cin,
        types,
        f,
        operands,
        result,
        result_vals,
        bound: vec![None; cin.vars.len()],
        positions: accesses.iter().map(|a| vec![None; a.subscripts.len().max(1)]).collect(),
        accesses,
        exprs: cin.exprs.clone(),
        formats: types.tensors.iter().map(|t| t.format.clone()).collect(),
    };
    let body = lw.nest(&loops, &lhs, op, rhs)?;
    lw.f.body = body;
    Ok(Lowered { function: lw.f, params })
}

fn collect_accesses(cin: &ConcreteNotation, e: ExprId, out: &mut Vec<Access>) {
    collect_accesses_in(&cin.exprs, e, out)
}

fn collect_accesses_in(exprs: &Arena<ExprId, CinExpr>, e: ExprId, out: &mut Vec<Access>) {
    match &exprs[e] {
        CinExpr::Access(a) => out.push(a.clone()),
        CinExpr::Literal(_) => {}
        CinExpr::Neg(a) | CinExpr::Sum(_, a) => collect_accesses_in(exprs, *a, out),
        CinExpr::Binary(_, a, b) => {
            collect_accesses_in(exprs, *a, out);
            collect_accesses_in(exprs, *b, out);
        }
    }
}

impl Lowerer<'_> {
    fn size(&self, v: IndexVarId) -> usize {
        self.types.sizes[v.index()]
    }

    /// The accesses (indices into `self.accesses`) read by `e`.
    fn reads(&self, e: ExprId) -> Vec<usize> {
        let mut found = Vec::new();
        collect_accesses_in(&self.exprs, e, &mut found);
        let mut out: Vec<usize> =
            found.iter().map(|a| self.accesses.iter().position(|b| b == a).expect("collected")).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Materializes a lattice point's expression as nodes.
    fn materialize(&mut self, p: &PointExpr) -> ExprId {
        match p {
            PointExpr::Node(e) => *e,
            PointExpr::Neg(a) => {
                let a = self.materialize(a);
                self.exprs.push(CinExpr::Neg(a))
            }
            PointExpr::Binary(op, a, b) => {
                let (a, b) = (self.materialize(a), self.materialize(b));
                self.exprs.push(CinExpr::Binary(*op, a, b))
            }
        }
    }

    /// The loops from the first of `loops` inward, then the assignment of `rhs`.
    ///
    /// Along each variable, the merge lattice of `rhs` decides the loop: a `for` over every
    /// coordinate when some point has no sparse iterator (a dense operand, a constant), with a
    /// case per point; otherwise one `while` per lattice point over its sparse iterators,
    /// with a case per sub-point, taking the smallest coordinate and advancing the iterators
    /// that stand on it (taco's co-iteration).
    fn nest(
        &mut self,
        loops: &[(IndexVarId, bool)],
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        let Some((&(v, parallel), rest)) = loops.split_first() else {
            return self.assignment(lhs, op, rhs);
        };
        let name = self.cin.vars[v].name.clone();
        let reads = self.reads(rhs);
        // Which level of each access this variable reaches now.
        let mut sparse: Vec<(usize, usize)> = Vec::new();
        let mut dense: Vec<(usize, usize)> = Vec::new();
        for &k in &reads {
            let a = &self.accesses[k];
            let op = self.operands[a.tensor.index()].as_ref().expect("every operand decomposed");
            let Some(l) = self.positions[k].iter().take(op.format.levels().len()).position(Option::is_none) else {
                continue;
            };
            let level = &op.format.levels()[l];
            let dim_var = a.subscripts.get(level.expr.dim()).and_then(|t| t.as_var());
            if dim_var == Some(v) {
                if level.kind == LevelKind::Dense { dense.push((k, l)) } else { sparse.push((k, l)) }
            } else if a.subscripts.iter().any(|t| t.vars().any(|w| w == v)) {
                return unsupported(format!(
                    "`{name}` is bound before `{}`'s level {l} is reached: the loop order is discordant with its format",
                    self.cin.tensors[a.tensor].name
                ));
            }
        }
        let loop_var = self.f.var(&name, ScalarType::Index);
        self.bound[v.index()] = Some(loop_var);
        let bound: Vec<IndexVarId> =
            self.bound.iter().enumerate().filter(|(_, b)| b.is_some()).map(|(i, _)| IndexVarId::new(i)).collect();
        let lattice = {
            let scope = Scope { tensors: &self.cin.tensors, vars: &self.cin.vars, exprs: &self.exprs };
            MergeLattice::build(scope, &self.formats, rhs, v, &bound)
        };
        // The iterator of a lattice level: which (access, level) of `sparse` it is.
        let find = |lw: &Self, it: &nm_ir::lattice::LevelIterator| {
            sparse.iter().position(|&(k, l)| lw.accesses[k].tensor == it.tensor && l == it.level)
        };
        let mut points: Vec<(Vec<usize>, ExprId)> = Vec::new();
        for p in &lattice.points {
            let its: Vec<usize> = p.iterators.iter().filter(|it| !it.full).filter_map(|it| find(self, it)).collect();
            let e = self.materialize(&p.expr);
            points.push((its, e));
        }
        let dense_driven = sparse.is_empty() || points.iter().any(|(its, _)| its.is_empty());
        if sparse.is_empty() && !dense_driven {
            unreachable!("no sparse iterator means a dense loop");
        }
        // Positions and ends of the sparse iterators.
        let mut out = Vec::new();
        let mut cursors = Vec::new(); // (position var, end var, coordinate var)
        for (n, &(k, l)) in sparse.iter().enumerate() {
            let o = self.operands[self.accesses[k].tensor.index()].clone().expect("decomposed");
            let (pos, crd) = (o.pos[l].expect("compressed"), o.crd[l].expect("compressed"));
            let parent = if l == 0 { int(0) } else { var(self.positions[k][l - 1].expect("resolved in order")) };
            let tname = self.cin.tensors[self.accesses[k].tensor].name.clone();
            let p = self.f.var(&format!("{tname}{l}_p{n}"), ScalarType::Index);
            let end = self.f.var(&format!("{tname}{l}_end{n}"), ScalarType::Index);
            let c = self.f.var(&format!("{tname}{l}_{name}{n}"), ScalarType::Index);
            out.push(Stmt::Decl(p, load(pos, parent.clone())));
            out.push(Stmt::Decl(end, load(pos, bin(BinOp::Add, parent, int(1)))));
            cursors.push((p, end, c, crd));
        }
        let at = |n: usize| bin(BinOp::Eq, var(cursors[n].2), var(loop_var));
        let all = |conds: Vec<Expr>| conds.into_iter().reduce(|a, b| bin(BinOp::And, a, b)).unwrap_or(Expr::Int(1));
        // One loop body: read coordinates, locate dense levels, cases, advance.
        let body_for = |lw: &mut Self, loop_its: &[usize], dense_mode: bool| -> Result<Vec<Stmt>, LowerError> {
            let mut body = Vec::new();
            for &n in loop_its {
                let (p, end, c, crd) = cursors[n];
                let value = if dense_mode {
                    // A finished iterator reads a coordinate no loop value equals.
                    Expr::Select(
                        Box::new(bin(BinOp::Lt, var(p), var(end))),
                        Box::new(load(crd, var(p))),
                        Box::new(int(-1)),
                    )
                } else {
                    load(crd, var(p))
                };
                body.push(Stmt::Decl(c, value));
            }
            if !dense_mode {
                let min = loop_its
                    .iter()
                    .map(|&n| var(cursors[n].2))
                    .reduce(|a, b| bin(BinOp::Min, a, b))
                    .expect("a sparse iterator");
                body.push(Stmt::Decl(loop_var, min));
            }
            lw.locate(&mut body, &dense, loop_var);
            // Cases: the points whose sparse iterators are among this loop's, most specific first.
            let mut chain: Vec<(Expr, Vec<Stmt>)> = Vec::new();
            for (its, e) in points.clone() {
                if !its.iter().all(|n| loop_its.contains(n)) {
                    continue;
                }
                let saved = (lw.positions.clone(), lw.bound.clone());
                for &n in &its {
                    let (k, l) = sparse[n];
                    lw.positions[k][l] = Some(cursors[n].0);
                }
                let inner = lw.nest(rest, lhs, op, e)?;
                (lw.positions, lw.bound) = saved;
                chain.push((all(its.iter().map(|&n| at(n)).collect()), inner));
            }
            let mut cases: Vec<Stmt> = Vec::new();
            for (cond, then) in chain.into_iter().rev() {
                cases = vec![Stmt::If { cond, then, otherwise: cases }];
            }
            body.extend(cases);
            for &n in loop_its {
                let p = cursors[n].0;
                body.push(Stmt::If {
                    cond: at(n),
                    then: vec![Stmt::Assign(p, bin(BinOp::Add, var(p), int(1)))],
                    otherwise: vec![],
                });
            }
            Ok(body)
        };
        if dense_driven {
            let all_its: Vec<usize> = (0..sparse.len()).collect();
            let body = body_for(self, &all_its, true)?;
            out.push(Stmt::For {
                var: loop_var,
                start: int(0),
                end: int(self.size(v) as i64),
                body,
                parallel: parallel && sparse.is_empty(),
            });
        } else {
            for (its, _) in points.clone() {
                let cond = all(its.iter().map(|&n| bin(BinOp::Lt, var(cursors[n].0), var(cursors[n].1))).collect());
                let body = body_for(self, &its, false)?;
                out.push(Stmt::While { cond, body });
            }
        }
        self.bound[v.index()] = None;
        Ok(out)
    }

    /// Locates every dense level in `list`: position = parent · size + coordinate.
    fn locate(&mut self, body: &mut Vec<Stmt>, list: &[(usize, usize)], coordinate: VarId) {
        for &(k, l) in list {
            let op = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
            let size = op.shape[op.format.levels()[l].expr.dim()] as i64;
            let parent = if l == 0 { int(0) } else { var(self.positions[k][l - 1].expect("resolved in order")) };
            let p =
                self.f.var(&format!("{}{l}_p{k}", self.cin.tensors[self.accesses[k].tensor].name), ScalarType::Index);
            body.push(Stmt::Decl(p, bin(BinOp::Add, bin(BinOp::Mul, parent, int(size)), var(coordinate))));
            self.positions[k][l] = Some(p);
        }
    }

    fn assignment(&mut self, lhs: &Access, op: AssignOp, rhs: ExprId) -> Result<Vec<Stmt>, LowerError> {
        // Every access the expression reads must be fully resolved.
        for k in self.reads(rhs) {
            let a = &self.accesses[k];
            let levels = self.operands[a.tensor.index()].as_ref().expect("decomposed").format.levels().len();
            if !a.subscripts.is_empty() && self.positions[k][..levels].iter().any(Option::is_none) {
                return unsupported(format!("`{}` has levels no loop reaches", self.cin.tensors[a.tensor].name));
            }
        }
        let shape = &self.types.tensors[self.result.index()].shape;
        let mut index = int(0);
        for (d, t) in lhs.subscripts.iter().enumerate() {
            let v = t.as_var().expect("the left-hand side is plain variables");
            let lv = self.bound[v.index()].ok_or_else(|| {
                LowerError::Unsupported(format!("result variable `{}` has no loop", self.cin.vars[v].name))
            })?;
            index = bin(BinOp::Add, bin(BinOp::Mul, index, int(shape[d] as i64)), var(lv));
        }
        let value = self.expr(rhs)?;
        Ok(vec![Stmt::Store { array: self.result_vals, index, value, accumulate: op == AssignOp::Accumulate }])
    }

    /// The value of a CIN expression.
    fn expr(&self, e: ExprId) -> Result<Expr, LowerError> {
        Ok(match &self.exprs[e] {
            CinExpr::Access(a) => {
                let k = self.accesses.iter().position(|b| b == a).expect("collected");
                let op = self.operands[a.tensor.index()].as_ref().expect("decomposed");
                let position = if a.subscripts.is_empty() {
                    int(0)
                } else {
                    var(self.positions[k][op.format.levels().len() - 1].expect("resolved"))
                };
                load(op.vals, position)
            }
            CinExpr::Literal(v) => float(*v),
            CinExpr::Neg(a) => Expr::Unary(UnOp::Neg, Box::new(self.expr(*a)?)),
            CinExpr::Sum(..) => return unsupported("`sum` inside CIN"),
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

/// The kernel's arguments for `f64` kernels: each tensor's arrays in parameter order
/// (`tensors[t]` for tensor id `t`; the result's values zeroed). Positions and coordinates are
/// passed as 64-bit indices.
pub fn arguments(
    lowered: &Lowered,
    tensors: &[Option<&nm_format::Tensor<f64>>],
    result_len: usize,
) -> Vec<crate::interp::ArrayData> {
    use crate::interp::ArrayData;
    use nm_format::LevelStorage;
    lowered
        .function
        .arrays
        .iter()
        .zip(&lowered.params)
        .map(|((_, decl), t)| {
            let tensor = tensors.get(t.index()).copied().flatten();
            let level = |l: usize| tensor.map(|x| &x.levels()[l]);
            let wide = |v: Vec<usize>| v.into_iter().map(|x| x as i64).collect();
            match (&decl.role, decl.output) {
                (Role::Values { .. }, true) => ArrayData::F64(vec![0.0; result_len]),
                (Role::Values { .. }, false) => {
                    let values = tensor.map_or_else(Vec::new, |x| x.values().to_vec());
                    ArrayData::F64(if values.is_empty() { vec![0.0] } else { values })
                }
                (Role::Pos { level: l, .. }, _) => match level(*l) {
                    Some(LevelStorage::Compressed { pos, .. }) => ArrayData::I64(wide(pos.to_usize())),
                    _ => ArrayData::I64(vec![]),
                },
                (Role::Crd { level: l, .. }, _) => match level(*l) {
                    Some(LevelStorage::Compressed { crd, .. }) => ArrayData::I64(wide(crd.to_usize())),
                    _ => ArrayData::I64(vec![]),
                },
                _ => ArrayData::I64(vec![]),
            }
        })
        .collect()
}
