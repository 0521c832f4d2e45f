//! `precompute(expr, i, iw, w)`: compute a subexpression into a temporary over `i` first, then
//! use it (taco's scheduling command; a sparse workspace when a policy is given).
//!
//! For a nest of loops around one assignment, with `i` the `p`-th loop:
//! - the `where` goes above the reduction loops directly outside `i` (their variables are not
//!   in the result), which move into the producer: Gustavson's SpGEMM
//!   `∀i ∀k ∀j A(i,j) += B(i,k)·C(k,j)` with `precompute(B(i,k)*C(k,j), j, jw, w)` becomes
//!   `∀i where(∀j A(i,j) += w(j), ∀k ∀jw w(jw) += B(i,k)·C(k,jw))`;
//! - loops inside `i` go to the producer if `expr` uses their variable, to the consumer if the
//!   rest of the statement does;
//! - the consumer keeps the assignment's operator; the producer accumulates when it has loops
//!   of its own to sum over, and the temporary starts at zero.

use super::schedule::ScheduleError;
use super::{ConcreteNotation, LoopAttrs, Stmt, StmtId, WorkspaceKind, WorkspacePolicy};
use crate::notation::{Access, AssignOp, Expr, ExprId, IndexTerm, IndexVarId, TensorVar};

impl ConcreteNotation {
    pub(crate) fn precompute(
        &mut self,
        expr: &str,
        i: &str,
        iw: &str,
        w: Option<&str>,
        policy: Option<WorkspacePolicy>,
    ) -> Result<(), ScheduleError> {
        let refuse = |why: String| ScheduleError::CannotPrecompute { why };
        // The nest: loops from the root to one assignment.
        let mut loops: Vec<StmtId> = Vec::new();
        let mut s = self.root;
        let assign = loop {
            match &self.stmts[s] {
                Stmt::Forall { body, .. } => {
                    loops.push(s);
                    s = *body;
                }
                Stmt::Assign { .. } => break s,
                _ => return Err(refuse("it needs one assignment under a nest of loops".into())),
            }
        };
        let var_of = |c: &Self, s: StmtId| match c.stmts[s] {
            Stmt::Forall { var, .. } => var,
            _ => unreachable!("loops are foralls"),
        };
        let (_, var) = self.loop_named("precompute", i)?;
        // `expr` is written over the statement's variables: a derived one indexes no part of it.
        if let Some(&parent) = self.origins(var).first()
            && parent != var
        {
            return Err(refuse(format!(
                "`{i}` is made by a schedule command; precompute over `{}` before that command",
                self.vars[parent].name
            )));
        }
        let p = loops.iter().position(|&l| var_of(self, l) == var).expect("the loop is in the nest");
        let Stmt::Assign { lhs, op, rhs } = self.stmts[assign].clone() else { unreachable!() };
        let target = self
            .find_subexpr(rhs, expr)
            .ok_or_else(|| ScheduleError::NoSuchExpr { expr: expr.to_string(), cin: self.to_string() })?;
        let result_vars: Vec<IndexVarId> = lhs.subscripts.iter().flat_map(IndexTerm::vars).collect();
        let expr_vars = self.expr_vars(target);
        // Whether a loop's variable is, or was made from (by split, fuse, pos), one of `vars`:
        // the loops of a split `i` are loops over `i`.
        let over = |c: &Self, l: StmtId, vars: &[IndexVarId]| c.origins(var_of(c, l)).iter().any(|o| vars.contains(o));
        // Reduction loops right outside `i` move into the producer.
        let mut r = p;
        while r > 0 && !over(self, loops[r - 1], &result_vars) {
            r -= 1;
        }
        // What the consumer reads once `expr` is replaced by w(i).
        // taco's default name, made unique; a name given must be new.
        let name = match w {
            Some(w) => self.fresh_name(w)?,
            None => (1..)
                .map(|k| if k == 1 { "workspace".to_string() } else { format!("workspace{k}") })
                .find(|n| self.fresh_name(n).is_ok())
                .expect("a free name"),
        };
        let w_tensor = self.tensors.push(TensorVar { name, order: 1 });
        // `iw` may be `i` itself (taco's `precompute(expr, i, i)`): the producer's loop then
        // runs over `i` too.
        let iw_var = if iw == i { var } else { self.fresh_var("precompute", iw)? };
        let produced = self.rebuild_renamed(target, var, iw_var);
        self.exprs[target] =
            Expr::Access(Access { tensor: w_tensor, subscripts: vec![IndexTerm::var(var)], span: None });
        let consumer_vars: Vec<IndexVarId> = result_vars.iter().copied().chain(self.expr_vars(rhs)).collect();
        for &l in &loops[r..p] {
            let v = var_of(self, l);
            if over(self, l, &consumer_vars) {
                return Err(refuse(format!(
                    "the rest of the statement uses `{}`, which the precomputed expression sums over",
                    self.vars[v].name
                )));
            }
        }
        let mut producer_loops: Vec<StmtId> = loops[r..p].to_vec();
        let mut consumer_loops: Vec<StmtId> = Vec::new();
        for &l in &loops[p + 1..] {
            let v = var_of(self, l);
            let (in_expr, in_rest) = (over(self, l, &expr_vars), over(self, l, &consumer_vars));
            if in_expr && in_rest {
                return Err(refuse(format!(
                    "`{expr}` depends on `{}`, bound inside `{i}`, so w({i}) cannot hold it; precompute over `{}` instead",
                    self.vars[v].name, self.vars[v].name
                )));
            }
            if in_expr {
                producer_loops.push(l);
            } else if in_rest {
                consumer_loops.push(l);
            }
        }
        // Consumer: ∀i (∀ consumer loops) lhs op rest.
        let mut consumer = self.stmts.push(Stmt::Assign { lhs, op, rhs });
        for &l in consumer_loops.iter().rev() {
            consumer = self.copy_loop(l, consumer, None);
        }
        consumer = self.copy_loop(loops[p], consumer, None);
        // Producer: (∀ moved reductions) ∀iw (∀ inner loops of expr) w(iw) (+)= expr[i := iw].
        let w_write = Access { tensor: w_tensor, subscripts: vec![IndexTerm::var(iw_var)], span: None };
        let sums = !producer_loops.is_empty();
        let mut producer = self.stmts.push(Stmt::Assign {
            lhs: w_write,
            op: if sums { AssignOp::Accumulate } else { AssignOp::Assign },
            rhs: produced,
        });
        let inner: Vec<StmtId> = producer_loops.iter().copied().filter(|&l| loops[p + 1..].contains(&l)).collect();
        let outer: Vec<StmtId> = producer_loops.iter().copied().filter(|&l| loops[r..p].contains(&l)).collect();
        for &l in inner.iter().rev() {
            producer = self.copy_loop(l, producer, None);
        }
        producer = self.copy_loop(loops[p], producer, Some(iw_var));
        for &l in outer.iter().rev() {
            producer = self.copy_loop(l, producer, None);
        }
        let mut s = self.stmts.push(Stmt::Where { consumer, producer });
        for &l in loops[..r].iter().rev() {
            s = self.copy_loop(l, s, None);
        }
        self.root = s;
        self.temporaries.push(w_tensor);
        if let Some(policy) = policy {
            self.workspaces.push((w_tensor, WorkspaceKind::Sparse, policy, vec![0]));
        }
        Ok(())
    }

    /// Replaces the `where` at `s` by its consumer reading the producer's expression in place
    /// of the temporary: the same values, computed where they are read, for back ends that
    /// cannot keep a temporary between two loop nests. Where the producer sums (loops over
    /// variables the temporary does not have), its loops go inside the consumer's, which is
    /// right only when the consumer's value is the temporary times factors (a sum distributes
    /// over products, not over `+`): otherwise the reason is returned and nothing changes.
    pub fn inline_where(&mut self, s: StmtId) -> Result<(), String> {
        let Stmt::Where { consumer, producer } = self.stmts[s] else { return Err("not a `where`".into()) };
        let (producer_loops, produced) = self.loops_to_assign(producer)?;
        let Stmt::Assign { lhs: w, rhs: e, .. } = self.stmts[produced].clone() else { unreachable!() };
        let w_name = self.tensors[w.tensor].name.clone();
        let written: Option<Vec<IndexVarId>> = w.subscripts.iter().map(IndexTerm::as_var).collect();
        let written = written.ok_or_else(|| format!("`{w_name}` is written through compound subscripts"))?;
        let sums: Vec<StmtId> =
            producer_loops.iter().copied().filter(|&l| !written.contains(&self.loop_var(l))).collect();
        let (consumer_loops, read) = self.loops_to_assign(consumer)?;
        let Stmt::Assign { lhs, op, rhs } = self.stmts[read].clone() else { unreachable!() };
        let reads = self.accesses_of(rhs, w.tensor);
        if !sums.is_empty() {
            if reads.len() != 1 || !self.is_factor(rhs, reads[0]) {
                return Err(format!(
                    "`{w_name}` sums over loops of its own and its consumer does not multiply it by factors only"
                ));
            }
            let consumer_vars: Vec<IndexVarId> = consumer_loops.iter().map(|&l| self.loop_var(l)).collect();
            if let Some(&l) = sums.iter().find(|&&l| consumer_vars.contains(&self.loop_var(l))) {
                return Err(format!(
                    "the consumer of `{w_name}` loops over `{}` too",
                    self.vars[self.loop_var(l)].name
                ));
            }
        }
        for &at in &reads {
            let Expr::Access(a) = self.exprs[at].clone() else { unreachable!("an access") };
            let mut map = Vec::new();
            for (&from, to) in written.iter().zip(&a.subscripts) {
                let to = to.as_var().ok_or_else(|| format!("`{w_name}` is read through compound subscripts"))?;
                map.push((from, to));
            }
            let value = self.rebuild_mapped(e, &map);
            self.exprs[at] = self.exprs[value].clone();
        }
        // The summing loops, innermost, around the consumer's assignment, which now adds.
        let op = if sums.is_empty() { op } else { AssignOp::Accumulate };
        let mut body = self.stmts.push(Stmt::Assign { lhs, op, rhs });
        for &l in sums.iter().rev() {
            body = self.copy_loop(l, body, None);
        }
        for &l in consumer_loops.iter().rev() {
            body = self.copy_loop(l, body, None);
        }
        self.stmts[s] = self.stmts[body].clone();
        self.temporaries.retain(|&t| t != w.tensor);
        self.workspaces.retain(|ws| ws.0 != w.tensor);
        Ok(())
    }

    /// The loops from `s` down to one assignment, and the assignment.
    fn loops_to_assign(&self, s: StmtId) -> Result<(Vec<StmtId>, StmtId), String> {
        match self.loops_below(s) {
            (loops, a) if matches!(self.stmts[a], Stmt::Assign { .. }) => Ok((loops, a)),
            _ => Err("a `where` inside a `where`".into()),
        }
    }

    fn loop_var(&self, l: StmtId) -> IndexVarId {
        match self.stmts[l] {
            Stmt::Forall { var, .. } => var,
            _ => unreachable!("a loop"),
        }
    }

    /// The nodes below `e` that read `tensor`.
    fn accesses_of(&self, e: ExprId, tensor: crate::notation::TensorId) -> Vec<ExprId> {
        match &self.exprs[e] {
            Expr::Access(a) if a.tensor == tensor => vec![e],
            Expr::Access(_) | Expr::Literal(_) => vec![],
            Expr::Neg(a) | Expr::Sum(_, a) => self.accesses_of(*a, tensor),
            Expr::Binary(_, a, b) => [self.accesses_of(*a, tensor), self.accesses_of(*b, tensor)].concat(),
        }
    }

    /// Whether `e` is `node` times factors: only products, negations and numerators of
    /// quotients lie between them.
    fn is_factor(&self, e: ExprId, node: ExprId) -> bool {
        use crate::notation::BinaryOp;
        if e == node {
            return true;
        }
        match &self.exprs[e] {
            Expr::Neg(a) => self.is_factor(*a, node),
            Expr::Binary(BinaryOp::Mul, a, b) => self.is_factor(*a, node) || self.is_factor(*b, node),
            Expr::Binary(BinaryOp::Div, a, _) => self.is_factor(*a, node),
            _ => false,
        }
    }

    /// A new loop like `l` (same variable unless renamed, same marks) around `body`.
    fn copy_loop(&mut self, l: StmtId, body: StmtId, rename: Option<IndexVarId>) -> StmtId {
        let Stmt::Forall { var, attrs, .. } = self.stmts[l] else { unreachable!("loops are foralls") };
        let attrs: LoopAttrs = attrs;
        self.stmts.push(Stmt::Forall { var: rename.unwrap_or(var), body, attrs })
    }

    fn fresh_name(&self, name: &str) -> Result<String, ScheduleError> {
        if self.tensors.iter().any(|(_, t)| t.name == name) || self.vars.iter().any(|(_, v)| v.name == name) {
            return Err(ScheduleError::NameInUse { command: "precompute", name: name.to_string() });
        }
        Ok(name.to_string())
    }

    /// The node below `e` that prints as `text`.
    fn find_subexpr(&self, e: ExprId, text: &str) -> Option<ExprId> {
        let mut printed = String::new();
        self.scope().write_expr(&mut printed, e).ok()?;
        if printed == text {
            return Some(e);
        }
        match &self.exprs[e] {
            Expr::Access(_) | Expr::Literal(_) => None,
            Expr::Neg(a) | Expr::Sum(_, a) => self.find_subexpr(*a, text),
            Expr::Binary(_, a, b) => self.find_subexpr(*a, text).or_else(|| self.find_subexpr(*b, text)),
        }
    }

    /// The variables read below `e`.
    fn expr_vars(&self, e: ExprId) -> Vec<IndexVarId> {
        match &self.exprs[e] {
            Expr::Access(a) => a.subscripts.iter().flat_map(IndexTerm::vars).collect(),
            Expr::Literal(_) => vec![],
            Expr::Neg(a) | Expr::Sum(_, a) => self.expr_vars(*a),
            Expr::Binary(_, a, b) => [self.expr_vars(*a), self.expr_vars(*b)].concat(),
        }
    }

    /// A copy of the tree below `e` with `from` renamed to `to`.
    fn rebuild_renamed(&mut self, e: ExprId, from: IndexVarId, to: IndexVarId) -> ExprId {
        self.rebuild_mapped(e, &[(from, to)])
    }

    /// A copy of the tree below `e` with every variable renamed as `map` says, all at once.
    fn rebuild_mapped(&mut self, e: ExprId, map: &[(IndexVarId, IndexVarId)]) -> ExprId {
        let renamed = |v: IndexVarId| map.iter().find(|(from, _)| *from == v).map_or(v, |&(_, to)| to);
        let node = match self.exprs[e].clone() {
            Expr::Access(mut a) => {
                for t in &mut a.subscripts {
                    for (_, v) in &mut t.terms {
                        *v = renamed(*v);
                    }
                }
                Expr::Access(a)
            }
            Expr::Literal(v) => Expr::Literal(v),
            Expr::Neg(a) => Expr::Neg(self.rebuild_mapped(a, map)),
            Expr::Sum(v, a) => Expr::Sum(v, self.rebuild_mapped(a, map)),
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.rebuild_mapped(a, map), self.rebuild_mapped(b, map));
                Expr::Binary(op, a, b)
            }
        };
        self.exprs.push(node)
    }
}
