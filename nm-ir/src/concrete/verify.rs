//! Concrete index notation's contract, checked: every id names an item of its arena, the
//! statements form a tree from the root (each reached once), no loop binds a variable that a
//! loop around it binds, every variable an assignment's accesses use is available where it
//! runs (bound by a loop around it, or recoverable from the loops' variables through the
//! schedule's derivations: both halves of a split, the fused variable of a fuse, the position
//! variable of a `pos`, the bounded variable of a `bound`, or a `sum` inside the expression).
//! `concretize` and every scheduling command hand on only CIN that passes.

use super::{ConcreteNotation, Derivation, Stmt, StmtId};
use crate::id::Id;
use crate::notation::{Access, Expr, ExprId, IndexVarId};

/// A broken rule of CIN, in words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("inconsistent concrete index notation: {0}")]
pub struct VerifyError(pub String);

impl ConcreteNotation {
    /// Checks the statement against CIN's rules (see the module doc).
    pub fn verify(&self) -> Result<(), VerifyError> {
        self.check_ids().map_err(VerifyError)?;
        let mut seen = vec![false; self.stmts.len()];
        self.check_stmt(self.root, &mut Vec::new(), &mut seen).map_err(VerifyError)
    }

    fn check_ids(&self) -> Result<(), String> {
        let var = |v: IndexVarId| match self.vars.get(v) {
            Some(_) => Ok(()),
            None => Err(format!("index variable {} is not one of its {}", v.index(), self.vars.len())),
        };
        for (v, d) in &self.derivations {
            var(*v)?;
            match d {
                Derivation::Split { parent, .. }
                | Derivation::Pos { parent, .. }
                | Derivation::Bound { parent, .. } => var(*parent)?,
                Derivation::Fuse { outer, inner } => {
                    var(*outer)?;
                    var(*inner)?
                }
            }
        }
        for (_, e) in self.exprs.iter() {
            match e {
                Expr::Access(a) => self.check_access(a)?,
                Expr::Literal(_) => {}
                Expr::Neg(x) => self.check_expr_id(*x)?,
                Expr::Binary(_, x, y) => {
                    self.check_expr_id(*x)?;
                    self.check_expr_id(*y)?
                }
                Expr::Sum(v, x) => {
                    self.check_expr_id(*x)?;
                    if self.vars.get(*v).is_none() {
                        return Err(format!("index variable {} is not one of its {}", v.index(), self.vars.len()));
                    }
                }
            }
        }
        if self.stmts.get(self.root).is_none() {
            return Err(format!("the root {} is not one of its {} statements", self.root.index(), self.stmts.len()));
        }
        Ok(())
    }

    fn check_expr_id(&self, e: ExprId) -> Result<(), String> {
        match self.exprs.get(e) {
            Some(_) => Ok(()),
            None => Err(format!("expression {} is not one of its {}", e.index(), self.exprs.len())),
        }
    }

    fn check_access(&self, a: &Access) -> Result<(), String> {
        if self.tensors.get(a.tensor).is_none() {
            return Err(format!("tensor {} is not one of its {}", a.tensor.index(), self.tensors.len()));
        }
        for v in a.subscripts.iter().flat_map(|t| t.vars()) {
            if self.vars.get(v).is_none() {
                return Err(format!("index variable {} is not one of its {}", v.index(), self.vars.len()));
            }
        }
        Ok(())
    }

    /// `s`, under the loops over `bound`, each statement reached once.
    fn check_stmt(&self, s: StmtId, bound: &mut Vec<IndexVarId>, seen: &mut [bool]) -> Result<(), String> {
        let Some(stmt) = self.stmts.get(s) else {
            return Err(format!("statement {} is not one of its {}", s.index(), self.stmts.len()));
        };
        if std::mem::replace(&mut seen[s.index()], true) {
            return Err(format!("statement {} is reached twice: the statements are not a tree", s.index()));
        }
        match stmt {
            Stmt::Forall { var, body, .. } => {
                if self.vars.get(*var).is_none() {
                    return Err(format!(
                        "a loop over index variable {}, not one of its {}",
                        var.index(),
                        self.vars.len()
                    ));
                }
                if bound.contains(var) {
                    return Err(format!("a loop over `{}` inside a loop over it", self.vars[*var].name));
                }
                bound.push(*var);
                let checked = self.check_stmt(*body, bound, seen);
                bound.pop();
                checked
            }
            Stmt::Where { consumer, producer } => {
                self.check_stmt(*producer, bound, seen)?;
                self.check_stmt(*consumer, bound, seen)
            }
            Stmt::Sequence { first, second } => {
                self.check_stmt(*first, bound, seen)?;
                self.check_stmt(*second, bound, seen)
            }
            Stmt::Assign { lhs, rhs, .. } => {
                self.check_expr_id(*rhs)?;
                let mut reads = vec![(lhs, bound.to_vec())];
                self.accesses(*rhs, bound, &mut reads);
                for (access, bound) in &reads {
                    for v in access.subscripts.iter().flat_map(|t| t.vars()) {
                        if !self.available(v, bound) {
                            return Err(format!(
                                "`{}` is used in an assignment no loop around binds or derives it",
                                self.vars[v].name
                            ));
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// The accesses of expression `e` (its ids checked by [`Self::check_ids`]), each with the
    /// variables bound where it is read: the loops' and those of the `sum`s around it.
    fn accesses<'a>(&'a self, e: ExprId, bound: &[IndexVarId], out: &mut Vec<(&'a Access, Vec<IndexVarId>)>) {
        match &self.exprs[e] {
            Expr::Access(a) => out.push((a, bound.to_vec())),
            Expr::Literal(_) => {}
            Expr::Neg(x) => self.accesses(*x, bound, out),
            Expr::Sum(v, x) => {
                let inside: Vec<IndexVarId> = bound.iter().copied().chain([*v]).collect();
                self.accesses(*x, &inside, out)
            }
            Expr::Binary(_, x, y) => {
                self.accesses(*x, bound, out);
                self.accesses(*y, bound, out);
            }
        }
    }

    /// Whether `v`'s value is known under loops over `bound`: bound itself, or derived from
    /// variables that are (a split's parent from both halves, a fuse's from the fused variable,
    /// a `pos` or `bound` parent from its variable).
    fn available(&self, v: IndexVarId, bound: &[IndexVarId]) -> bool {
        self.available_within(v, bound, self.vars.len())
    }

    fn available_within(&self, v: IndexVarId, bound: &[IndexVarId], depth: usize) -> bool {
        if bound.contains(&v) {
            return true;
        }
        if depth == 0 {
            return false;
        }
        let made = |test: &dyn Fn(&Derivation) -> bool| {
            self.derivations.iter().filter(|(_, d)| test(d)).map(|(c, _)| *c).collect::<Vec<_>>()
        };
        // Both halves of a split of `v`.
        let halves = made(&|d| matches!(d, Derivation::Split { parent, .. } if *parent == v));
        if halves.len() == 2 && halves.iter().all(|&h| self.available_within(h, bound, depth - 1)) {
            return true;
        }
        // A variable that iterates `v` another way: its positions, a bounded copy, or a
        // fusion of `v` with another.
        let standing_in = made(&|d| match d {
            Derivation::Pos { parent, .. } | Derivation::Bound { parent, .. } => *parent == v,
            Derivation::Fuse { outer, inner } => *outer == v || *inner == v,
            Derivation::Split { .. } => false,
        });
        standing_in.into_iter().any(|c| self.available_within(c, bound, depth - 1))
    }
}
