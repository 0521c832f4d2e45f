//! Index notation → CIN with the default loop order.

use super::{ConcreteNotation, Stmt, StmtId};
use crate::graph::IterationGraph;
use crate::id::Arena;
use crate::notation::{Access, AssignOp, BinaryOp, Expr, ExprId, IndexNotation, TensorId, TensorVar, Types};

/// The CIN the `nmsparse` command and API start from, as `taco` picks its default loops: a
/// product of accesses (SpMV, SpMM, SpGEMM, SDDMM, MTTKRP, TTM, inner products) becomes one
/// nest over all its variables in a concordant order — the iteration graph's topological
/// order, ties broken by free variables in left-hand-side order, then summed ones by first
/// appearance — accumulating into the result, so every operand is walked in its storage
/// order (CSC SpMV loops over `j` first, SpGEMM over `i, k, j`). Anything else (a difference
/// with a reduction in it, an explicit `sum`) is [`concretize`]d; so is a product whose graph
/// has a cycle (lowering then names the discordant operand). A product with compound
/// subscripts (a convolution) is one nest too: its subsections are iterated inside it.
pub fn concretize_for(stmt: &IndexNotation, types: &Types, target: &LoopOrderTarget) -> ConcreteNotation {
    let product = is_product(stmt, stmt.rhs);
    if !product {
        return concretize(stmt);
    }
    let reductions = stmt.reduction_vars();
    let mut preferred = stmt.free_vars();
    preferred.extend(reductions.iter().copied());
    // Dense tensors can be read in any order, but their storage order is the fast one (SpMM
    // walks B's rows, MTTKRP keeps l innermost): follow every tensor's order when one loop
    // order can, else only the sparse levels'.
    let every_order = every_level_ordered(stmt, types);
    let order = match IterationGraph::build(stmt, &every_order).concordant_order(&preferred, stmt) {
        Ok(order) => order,
        Err(_) => match IterationGraph::build(stmt, types).concordant_order(&preferred, stmt) {
            Ok(order) => order,
            // A sparse result whose order no loop order can follow along with the operands'
            // (a transposition, a transposed product): walk the operands in their order and
            // let the result scatter into a workspace.
            Err(_) => {
                let mut operands_only = types.clone();
                operands_only.tensors[crate::id::Id::index(stmt.lhs.tensor)].format = None;
                match IterationGraph::build(stmt, &operands_only).concordant_order(&preferred, stmt) {
                    Ok(order) => order,
                    Err(_) => return concretize(stmt),
                }
            }
        },
    };
    let order = sliding_last(stmt, types, target, order);
    let mut c = ConcreteNotation {
        tensors: stmt.tensors.clone(),
        temporaries: Vec::new(),
        vars: stmt.vars.clone(),
        exprs: stmt.exprs.clone(),
        stmts: Arena::new(),
        root: crate::id::Id::new(0),
        derivations: Default::default(),
        workspaces: Vec::new(),
    };
    let op = if reductions.is_empty() { stmt.op } else { AssignOp::Accumulate };
    let mut s = c.stmts.push(Stmt::Assign { lhs: stmt.lhs.clone(), op, rhs: stmt.rhs });
    for &v in order.iter().rev() {
        s = c.stmts.push(Stmt::Forall { var: v, body: s, attrs: Default::default() });
    }
    c.root = s;
    c
}

/// For a compound subscript on a compressed level (`I(i+r, j+q)`, I in CSR), the loops of the
/// subscript's reduction variables before its result variable: the result variable's loop
/// then walks the level's entries once per filter position (`j = crd - q`), where the other
/// way round it visits every `j` with a non-empty window and searches it, several times slower
/// (BENCHMARKS.md's history, "Sparse convolution"). Levels are taken outermost first.
///
/// Into a sparse result, a result variable behind a reduction is written out of order, which
/// its last level takes through a row workspace and the others only through the sparse
/// insert–sort–merge workspace: the variables of its other levels go before the reductions
/// (several times faster than the reductions first, in 2-D and 3-D), and the last one moves
/// behind them only where the back end's row workspace takes it
/// ([`LoopOrderTarget::widest_row_workspace`]).
fn sliding_last(
    stmt: &IndexNotation,
    types: &Types,
    target: &LoopOrderTarget,
    mut order: Vec<crate::notation::IndexVarId>,
) -> Vec<crate::notation::IndexVarId> {
    use nm_format::LevelKind;
    let free = stmt.free_vars();
    let position = |order: &[crate::notation::IndexVarId], v| order.iter().position(|w| *w == v);
    // The compound subscripts on compressed levels, outermost level first.
    let mut terms = Vec::new();
    for a in stmt.accesses(stmt.rhs) {
        let Some(format) = &types.tensors[crate::id::Id::index(a.tensor)].format else { continue };
        for level in format.levels() {
            let term = &a.subscripts[level.expr.dim()];
            if term.is_compound() && level.kind != LevelKind::Dense {
                terms.push(term);
            }
        }
    }
    if terms.is_empty() {
        return order;
    }
    // A sparse result's variables by level: every level's but the last's stay in order.
    let result_vars: Vec<_> = match &types.tensors[crate::id::Id::index(stmt.lhs.tensor)].format {
        Some(f) if f.levels().iter().any(|l| l.kind != LevelKind::Dense) => {
            f.levels().iter().filter_map(|l| stmt.lhs.subscripts[l.expr.dim()].as_var()).collect()
        }
        _ => Vec::new(),
    };
    let (outer, last) = match result_vars.split_last() {
        Some((last, outer)) => (outer.to_vec(), Some(*last)),
        None => (Vec::new(), None),
    };
    // A variable with a negative coefficient cannot resolve a compressed level (its
    // coordinates would be walked backwards): where a subscript has one, its result variable
    // moves behind it as before.
    let flipped = |v| terms.iter().any(|t| t.vars().any(|w| w == v) && t.terms.iter().any(|&(c, _)| c < 0));
    let outer: Vec<_> = outer.into_iter().filter(|&v| !flipped(v)).collect();
    let last = last.filter(|&v| !flipped(v));
    let reductions: Vec<_> = terms.iter().flat_map(|t| t.vars()).filter(|v| !free.contains(v)).collect();
    if let Some(mut first) = reductions.iter().filter_map(|&v| position(&order, v)).min() {
        for &v in &outer {
            if let Some(at) = position(&order, v)
                && at > first
            {
                order.remove(at);
                order.insert(first, v);
                first += 1;
            }
        }
    }
    for term in &terms {
        let Some(last_reduction) = term.vars().filter(|v| !free.contains(v)).filter_map(|v| position(&order, v)).max()
        else {
            continue;
        };
        for v in term.vars().filter(|v| free.contains(v)) {
            let stays = outer.contains(&v)
                || (Some(v) == last
                    && types.sizes.get(crate::id::Id::index(v)).is_some_and(|&n| n > target.widest_row_workspace));
            if stays {
                continue;
            }
            if let Some(at) = position(&order, v)
                && at < last_reduction
            {
                order.remove(at);
                order.insert(last_reduction, v);
            }
        }
    }
    order
}

/// What the default loop order needs to know of the back end that runs it (its tuning lives
/// there: nm-lower's `LOOP_ORDER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopOrderTarget {
    /// The widest last level of a sparse result the back end writes out of order through a
    /// row workspace where a convolution's filter loops go first; past it, the result
    /// variable's loop stays outside the filter's.
    pub widest_row_workspace: usize,
}

/// `types` with every tensor's levels made compressed (same dimension order), so that the
/// iteration graph orders every tensor's dimensions, dense ones included. Blocked formats
/// keep their own levels; so does a dense tensor read through a compound subscript: its
/// storage order would put the filter's loops outside the image's columns (`i, r, j, q`),
/// where the output-stationary order (`i, j, r, q`) sums each element in a register and
/// vectorizes over `j` (faster on a dense 3×3 convolution).
fn every_level_ordered(stmt: &IndexNotation, types: &Types) -> Types {
    use nm_format::{Format, LevelKind};
    let compound: Vec<usize> = stmt
        .accesses(stmt.rhs)
        .into_iter()
        .filter(|a| a.subscripts.iter().any(|t| t.is_compound()))
        .map(|a| crate::id::Id::index(a.tensor))
        .collect();
    let tensors = types
        .tensors
        .iter()
        .enumerate()
        .map(|(id, t)| {
            let order = t.shape.len();
            let dense = t.format.as_ref().is_none_or(|f| f.levels().iter().all(|l| l.kind == LevelKind::Dense));
            if order == 0 || (dense && compound.contains(&id)) {
                return t.clone();
            }
            let modes: Vec<usize> = match &t.format {
                Some(f) if f.levels().len() != order => return t.clone(),
                Some(f) => f.levels().iter().map(|l| l.expr.dim()).collect(),
                None => (0..order).collect(),
            };
            match Format::by_letters(&vec![LevelKind::COMPRESSED; order], Some(&modes)) {
                Ok(f) => crate::notation::TensorType::sparse(&t.shape, f),
                Err(_) => t.clone(),
            }
        })
        .collect();
    Types { tensors, sizes: types.sizes.clone() }
}

/// Whether `e` is accesses and constants under products and negations only.
fn is_product(stmt: &IndexNotation, e: ExprId) -> bool {
    match &stmt.exprs[e] {
        Expr::Access(_) | Expr::Literal(_) => true,
        Expr::Neg(a) => is_product(stmt, *a),
        Expr::Binary(BinaryOp::Mul, a, b) => is_product(stmt, *a) && is_product(stmt, *b),
        Expr::Binary(..) | Expr::Sum(..) => false,
    }
}

/// CIN for `stmt`, as `taco` concretizes:
/// - loops over the free variables in the order of the left-hand side, outermost first;
/// - inside them, loops over the variables summed at the top of the right-hand side, with the
///   assignment accumulating (`+=`; an `=` result starts from zero);
/// - a reduction inside the expression (`b(i) - sum(j, ...)`) becomes a scalar temporary
///   computed by a `where` producer right around the assignment that reads it
///   (temporaries start at zero each time their `where` runs).
pub fn concretize(stmt: &IndexNotation) -> ConcreteNotation {
    let r = stmt.with_reductions();
    let mut c = ConcreteNotation {
        tensors: r.tensors.clone(),
        temporaries: Vec::new(),
        vars: r.vars.clone(),
        exprs: r.exprs.clone(),
        stmts: Arena::new(),
        root: crate::id::Id::new(0),
        derivations: Default::default(),
        workspaces: Vec::new(),
    };
    let mut s = assignment(&mut c, r.lhs.clone(), r.op, r.rhs);
    for v in r.free_vars().into_iter().rev() {
        s = c.stmts.push(Stmt::Forall { var: v, body: s, attrs: Default::default() });
    }
    c.root = s;
    c
}

/// `lhs op rhs` with the sums of `rhs` turned into loops and temporaries.
fn assignment(c: &mut ConcreteNotation, lhs: Access, op: AssignOp, rhs: ExprId) -> StmtId {
    let mut summed = Vec::new();
    let mut e = rhs;
    while let Expr::Sum(v, inner) = c.exprs[e] {
        summed.push(v);
        e = inner;
    }
    let op = if summed.is_empty() { op } else { AssignOp::Accumulate };
    let mut producers = Vec::new();
    hoist_sums(c, e, &mut producers);
    let mut s = c.stmts.push(Stmt::Assign { lhs, op, rhs: e });
    for producer in producers {
        s = c.stmts.push(Stmt::Where { consumer: s, producer });
    }
    for v in summed.into_iter().rev() {
        s = c.stmts.push(Stmt::Forall { var: v, body: s, attrs: Default::default() });
    }
    s
}

/// Replaces every outermost `sum` below `e` by a read of a new scalar temporary, and returns
/// (in `producers`) the statements that compute them.
fn hoist_sums(c: &mut ConcreteNotation, e: ExprId, producers: &mut Vec<StmtId>) {
    match c.exprs[e].clone() {
        Expr::Sum(..) => {
            let temp = new_temporary(c);
            let sum = c.exprs.push(c.exprs[e].clone());
            c.exprs[e] = Expr::Access(Access { tensor: temp, subscripts: vec![], span: None });
            let target = Access { tensor: temp, subscripts: vec![], span: None };
            producers.push(assignment(c, target, AssignOp::Assign, sum));
        }
        Expr::Neg(a) => hoist_sums(c, a, producers),
        Expr::Binary(_, a, b) => {
            hoist_sums(c, a, producers);
            hoist_sums(c, b, producers);
        }
        Expr::Access(_) | Expr::Literal(_) => {}
    }
}

fn new_temporary(c: &mut ConcreteNotation) -> TensorId {
    let taken = |name: &str, c: &ConcreteNotation| c.tensors.iter().any(|(_, t)| t.name == name);
    let name = (0..).map(|k| format!("t{k}")).find(|n| !taken(n, c)).expect("a free name");
    let t = c.tensors.push(TensorVar { name, order: 0 });
    c.temporaries.push(t);
    t
}
