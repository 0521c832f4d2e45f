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

    /// The same statement with its explicit `sum`s left implicit, where placing them again
    /// puts each back where it was (so it computes the same); `None` when it has none or
    /// one would move. `t(i,j) = C(i) * sum(k, D(k,j))` is then a product, which concretizes
    /// to one nest over `i, j, k` instead of a `where` computing each `sum` into a scalar:
    /// a nest that can iterate `D`'s columns where the `where`'s producer cannot.
    pub fn without_sums(&self) -> Option<IndexNotation> {
        if self.bound_vars(self.rhs).is_empty() {
            return None;
        }
        let mut out = self.clone();
        let skip = |out: &IndexNotation, mut e: ExprId| {
            while let Expr::Sum(_, a) = out.exprs[e] {
                e = a;
            }
            e
        };
        out.rhs = skip(&out, out.rhs);
        let ids: Vec<ExprId> = out.exprs.iter().map(|(id, _)| id).collect();
        for id in ids {
            let children = match out.exprs[id] {
                Expr::Neg(a) | Expr::Sum(_, a) => [Some(a), None],
                Expr::Binary(_, a, b) => [Some(a), Some(b)],
                Expr::Access(_) | Expr::Literal(_) => [None, None],
            };
            let [a, b] = children.map(|c| c.map(|c| skip(&out, c)));
            match &mut out.exprs[id] {
                Expr::Neg(x) | Expr::Sum(_, x) => *x = a.expect("one child"),
                Expr::Binary(_, x, y) => (*x, *y) = (a.expect("two children"), b.expect("two children")),
                Expr::Access(_) | Expr::Literal(_) => {}
            }
        }
        // Printed and parsed again: the arena then holds no unreachable `sum`s.
        let out = super::parse(&out.to_string()).ok()?;
        (out.with_reductions().to_string() == self.with_reductions().to_string()).then_some(out)
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

#[cfg(test)]
mod tests {
    use super::super::parse;

    fn without_sums(text: &str) -> Option<String> {
        parse(text).unwrap().without_sums().map(|s| s.to_string())
    }

    #[test]
    fn sums_that_placement_puts_back_are_left_implicit() {
        assert_eq!(without_sums("t(i,j) = C(i) * sum(k, D(k,j))").as_deref(), Some("t(i,j) = C(i) * D(k,j)"));
        assert_eq!(
            without_sums("a(i) = sum(k, B(i,k)) * sum(l, C(i,l)) + d(i)").as_deref(),
            Some("a(i) = B(i,k) * C(i,l) + d(i)")
        );
        // Nothing to leave implicit.
        assert_eq!(without_sums("t(i,j) = C(i) * D(k,j)"), None);
        assert_eq!(
            without_sums("a(i) = sum(k, B(i,k)) * sum(j, c(j) * d(j))").as_deref(),
            Some("a(i) = B(i,k) * (c(j) * d(j))")
        );
        // Placement would move the sum inward: the same value, but not the statement's sums.
        assert_eq!(without_sums("a(i) = sum(k, B(i,k) * c(i))"), None);
        assert_eq!(without_sums("a(i) = -sum(k, B(i,k)) - sum(k, C(i,k))"), None);
    }
}
