//! Lowering CIN to the loop IR — the first class of statements: every loop either iterates one
//! compressed level or runs densely, locating every dense level it reaches, and the result is
//! dense. That covers SpMV, SpMM with dense operands, TTV, SDDMM-style sampling, element-wise
//! products of one sparse operand with dense ones, and reductions to scalars, in any concordant
//! loop order. Co-iteration (merge lattices), sparse results, workspaces and compound
//! subscripts are refused with [`LowerError::Unsupported`] naming what is missing.
//!
//! Each operand is decomposed into its arrays at the kernel boundary — per compressed level
//! `T{l}_pos` and `T{l}_crd`, then `T_vals` — tagged with their roles; the result is `R_vals`,
//! dense row-major, zeroed by the caller.

use nm_format::{Format, LevelKind};
use nm_ir::concrete::{ConcreteNotation, Stmt as CinStmt};
use nm_ir::id::Id;
use nm_ir::notation::{Access, AssignOp, BinaryOp, Expr as CinExpr, ExprId, IndexVarId, TensorId, Types};

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
    };
    let body = lw.nest(&loops, &lhs, op, rhs)?;
    lw.f.body = body;
    Ok(Lowered { function: lw.f, params })
}

fn collect_accesses(cin: &ConcreteNotation, e: ExprId, out: &mut Vec<Access>) {
    match &cin.exprs[e] {
        CinExpr::Access(a) => out.push(a.clone()),
        CinExpr::Literal(_) => {}
        CinExpr::Neg(a) | CinExpr::Sum(_, a) => collect_accesses(cin, *a, out),
        CinExpr::Binary(_, a, b) => {
            collect_accesses(cin, *a, out);
            collect_accesses(cin, *b, out);
        }
    }
}

impl Lowerer<'_> {
    fn size(&self, v: IndexVarId) -> usize {
        self.types.sizes[v.index()]
    }

    /// The loops from `k` on, then the assignment.
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
        let loop_var = self.f.var(&name, ScalarType::Index);
        // The next unresolved level of every access: the ones `v` resolves now.
        let mut sparse: Option<(usize, usize)> = None; // (access, level)
        let mut dense: Vec<(usize, usize)> = Vec::new();
        for (k, a) in self.accesses.iter().enumerate() {
            let op = self.operands[a.tensor.index()].as_ref().expect("every operand decomposed");
            let next = self.positions[k].iter().take(op.format.levels().len()).position(Option::is_none);
            let Some(l) = next else { continue };
            let level = &op.format.levels()[l];
            let dim_var = a.subscripts.get(level.expr.dim()).and_then(|t| t.as_var());
            let uses_v = a.subscripts.iter().any(|t| t.vars().any(|w| w == v));
            if dim_var == Some(v) {
                if level.kind == LevelKind::Dense {
                    dense.push((k, l));
                } else if sparse.replace((k, l)).is_some() {
                    return unsupported(format!(
                        "co-iteration of two sparse levels along `{name}` (merge lattices arrive next)"
                    ));
                }
            } else if uses_v {
                return unsupported(format!(
                    "`{name}` is bound before `{}`'s level {l} is reached: the loop order is discordant with its format",
                    self.cin.tensors[a.tensor].name
                ));
            }
        }
        let mut body = Vec::new();
        // Locate every dense level: position = parent · size + v.
        let locate = |lw: &mut Self, body: &mut Vec<Stmt>, list: &[(usize, usize)]| {
            for &(k, l) in list {
                let op = lw.operands[lw.accesses[k].tensor.index()].as_ref().expect("decomposed");
                let dim = op.format.levels()[l].expr.dim();
                let size = op.shape[dim] as i64;
                let parent = if l == 0 { int(0) } else { var(lw.positions[k][l - 1].expect("resolved in order")) };
                let p = lw.f.var(&format!("{}{l}_p{k}", lw.cin.tensors[lw.accesses[k].tensor].name), ScalarType::Index);
                body.push(Stmt::Decl(p, bin(BinOp::Add, bin(BinOp::Mul, parent, int(size)), var(loop_var))));
                lw.positions[k][l] = Some(p);
            }
        };
        self.bound[v.index()] = Some(loop_var);
        match sparse {
            None => {
                locate(self, &mut body, &dense);
                body.extend(self.nest(rest, lhs, op, rhs)?);
                Ok(vec![Stmt::For { var: loop_var, start: int(0), end: int(self.size(v) as i64), body, parallel }])
            }
            Some((k, l)) => {
                let o = self.operands[self.accesses[k].tensor.index()].clone().expect("decomposed");
                let (pos, crd) = (o.pos[l].expect("compressed"), o.crd[l].expect("compressed"));
                let parent = if l == 0 { int(0) } else { var(self.positions[k][l - 1].expect("resolved in order")) };
                let p =
                    self.f.var(&format!("{}{l}_p", self.cin.tensors[self.accesses[k].tensor].name), ScalarType::Index);
                self.positions[k][l] = Some(p);
                body.push(Stmt::Decl(loop_var, load(crd, var(p))));
                locate(self, &mut body, &dense);
                body.extend(self.nest(rest, lhs, op, rhs)?);
                Ok(vec![Stmt::For {
                    var: p,
                    start: load(pos, parent.clone()),
                    end: load(pos, bin(BinOp::Add, parent, int(1))),
                    body,
                    parallel,
                }])
            }
        }
    }

    fn assignment(&mut self, lhs: &Access, op: AssignOp, rhs: ExprId) -> Result<Vec<Stmt>, LowerError> {
        // Every access must be fully resolved.
        for (k, a) in self.accesses.iter().enumerate() {
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
        Ok(match &self.cin.exprs[e] {
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
