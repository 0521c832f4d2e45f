//! Making `taco`'s implicit reductions explicit: a variable that is not on the left-hand side
//! is summed at the smallest subexpression containing all of its uses.

use std::collections::HashSet;

use super::{Expr, ExprId, IndexNotation, IndexVarId};

impl IndexNotation {
    /// The variables summed over: those read on the right that are neither on the left nor
    /// already bound by a `sum`, in order of first appearance.
    pub fn reduction_vars(&self) -> Vec<IndexVarId> {
        let free: HashSet<IndexVarId> = self.free_vars().into_iter().collect();
        let bound = self.bound_vars(self.rhs);
        let mut out = Vec::new();
        for a in self.accesses(self.rhs) {
            for v in a.subscripts.iter().flat_map(|s| s.vars()) {
                if !free.contains(&v) && !bound.contains(&v) && !out.contains(&v) {
                    out.push(v);
                }
            }
        }
        out
    }

    fn bound_vars(&self, e: ExprId) -> HashSet<IndexVarId> {
        let mut out = HashSet::new();
        let mut stack = vec![e];
        while let Some(n) = stack.pop() {
            if let Expr::Sum(v, _) = self.exprs[n] {
                out.insert(v);
            }
            stack.extend(self.children(n));
        }
        out
    }

    /// Whether `v` is read anywhere below `e`.
    pub fn uses(&self, e: ExprId, v: IndexVarId) -> bool {
        self.accesses(e).iter().any(|a| a.subscripts.iter().any(|s| s.vars().any(|x| x == v)))
    }

    /// The same statement with every implicit reduction an explicit `sum(v, ...)`. Two
    /// variables reduced at the same subexpression nest in order of first appearance.
    pub fn with_reductions(&self) -> IndexNotation {
        let mut out = self.clone();
        for v in self.reduction_vars() {
            // Descend while exactly one child reads `v`.
            let mut parent: Option<ExprId> = None;
            let mut node = out.rhs;
            loop {
                let readers: Vec<ExprId> = out.children(node).into_iter().filter(|&c| out.uses(c, v)).collect();
                match readers.as_slice() {
                    [only] => {
                        parent = Some(node);
                        node = *only;
                    }
                    _ => break,
                }
            }
            let sum = out.exprs.push(Expr::Sum(v, node));
            match parent {
                None => out.rhs = sum,
                Some(p) => match &mut out.exprs[p] {
                    Expr::Neg(a) | Expr::Sum(_, a) => *a = sum,
                    Expr::Binary(_, a, b) => {
                        if *a == node {
                            *a = sum
                        } else {
                            *b = sum
                        }
                    }
                    Expr::Access(_) | Expr::Literal(_) => unreachable!("a leaf has no children"),
                },
            }
        }
        out
    }
}
