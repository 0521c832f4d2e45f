//! A sum whose terms need loop orders of their own, split into one statement per such term.

use super::{AssignOp, BinaryOp, Expr, ExprId, IndexNotation, IndexVarId, parse};

/// `A(i,j) = B(i,k) * C(k,j) + D(i,j)` as `t0(i,j) = B(i,k) * C(k,j)` and `A(i,j) = t0(i,j) +
/// D(i,j)`: see [`IndexNotation::split_reduced_terms`].
#[derive(Clone, Debug, PartialEq)]
pub struct SplitTerms {
    /// One statement per term with a reduction, each writing a temporary of its own
    /// (`t0`, `t1`, … — names the statement does not use), subscripted by the term's
    /// variables of the left-hand side in their order there.
    pub terms: Vec<IndexNotation>,
    /// The statement with each such term replaced by a read of its temporary.
    pub combined: IndexNotation,
}

impl IndexNotation {
    /// The terms of the right-hand side's outer sum (its operands under `+`, `-` and negation)
    /// that sum over a variable of their own, each computed by a statement of its own, and
    /// the statement that adds them to the rest; `None` when no term has a reduction or the
    /// right-hand side is that one term. A single nest cannot run `B(i,k) * C(k,j) + D(i,j)`
    /// with every operand in its storage order (`D` must be added once per `(i,j)`, not per
    /// `k`); the split runs Gustavson's SpGEMM into `t0`, then a merge.
    pub fn split_reduced_terms(&self) -> Option<SplitTerms> {
        // The terms are those of the statement with its sums placed (taco's rule): a variable
        // summed over several terms (`B(i,k) + C(j,k)`: `k` in both) keeps them one term, as
        // a term without it inside that sum counts once per value of it.
        let r = self.with_reductions();
        let free = r.free_vars();
        let mut leaves = Vec::new();
        r.additive_leaves(r.rhs, &mut leaves);
        if leaves.len() < 2 {
            return None;
        }
        let reduced = |e: ExprId| {
            let mut stack = vec![e];
            while let Some(n) = stack.pop() {
                if let Expr::Sum(..) = r.exprs[n] {
                    return true;
                }
                stack.extend(r.children(n));
            }
            false
        };
        let split: Vec<ExprId> = leaves.iter().copied().filter(|&e| reduced(e)).collect();
        if split.is_empty() {
            return None;
        }
        let text_of = |s: &IndexNotation, e: ExprId| {
            let mut text = String::new();
            s.write_expr(&mut text, e).expect("writing to a String");
            text
        };
        let mut names = Vec::new();
        let mut terms = Vec::new();
        for &e in &split {
            let name = (names.len()..)
                .map(|k| format!("t{k}"))
                .find(|n| self.tensor_named(n).is_none() && !names.contains(n))
                .expect("a free name");
            let used: Vec<IndexVarId> =
                r.accesses(e).iter().flat_map(|a| a.subscripts.iter()).flat_map(|t| t.vars()).collect();
            let vars: Vec<&str> = free.iter().filter(|v| used.contains(v)).map(|&v| r.var_name(v)).collect();
            let access = if vars.is_empty() { name.clone() } else { format!("{name}({})", vars.join(",")) };
            // Without its outer sums where placing them again gives the same term (the
            // default loop orders then see a product: Gustavson's SpGEMM for `B(i,k) *
            // C(k,j)`), else with them written out.
            let mut inner = e;
            while let Expr::Sum(_, a) = r.exprs[inner] {
                inner = a;
            }
            let bare =
                parse(&format!("{access} = {}", text_of(&r, inner))).expect("printed index notation parses back");
            let placed = bare.with_reductions();
            let term = if text_of(&placed, placed.rhs) == text_of(&r, e) {
                bare
            } else {
                parse(&format!("{access} = {}", text_of(&r, e))).expect("printed index notation parses back")
            };
            terms.push(term);
            names.push(name);
        }
        let mut text = String::new();
        r.write_access(&mut text, &r.lhs).expect("writing to a String");
        text.push_str(if r.op == AssignOp::Accumulate { " += " } else { " = " });
        r.write_skeleton(&mut text, r.rhs, &split, &terms);
        let combined = parse(&text).expect("printed index notation parses back");
        Some(SplitTerms { terms, combined })
    }

    /// The operands of the outer sum below `e`, left to right.
    fn additive_leaves(&self, e: ExprId, out: &mut Vec<ExprId>) {
        match self.exprs[e] {
            Expr::Binary(BinaryOp::Add | BinaryOp::Sub, a, b) => {
                self.additive_leaves(a, out);
                self.additive_leaves(b, out);
            }
            Expr::Neg(a) => self.additive_leaves(a, out),
            _ => out.push(e),
        }
    }

    /// The outer sum below `e` with each of `split` written as its term statement's result.
    fn write_skeleton(&self, f: &mut String, e: ExprId, split: &[ExprId], terms: &[IndexNotation]) {
        match self.exprs[e] {
            Expr::Binary(op @ (BinaryOp::Add | BinaryOp::Sub), a, b) => {
                self.write_skeleton(f, a, split, terms);
                f.push_str(if op == BinaryOp::Add { " + (" } else { " - (" });
                self.write_skeleton(f, b, split, terms);
                f.push(')');
            }
            Expr::Neg(a) => {
                f.push_str("-(");
                self.write_skeleton(f, a, split, terms);
                f.push(')');
            }
            _ => {
                f.push('(');
                match split.iter().position(|&s| s == e) {
                    Some(k) => terms[k].write_access(f, &terms[k].lhs).expect("writing to a String"),
                    None => self.write_expr(f, e).expect("writing to a String"),
                }
                f.push(')');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Option<(Vec<String>, String)> {
        let s = parse(text).unwrap().split_reduced_terms()?;
        Some((s.terms.iter().map(ToString::to_string).collect(), s.combined.to_string()))
    }

    #[test]
    fn a_product_with_a_reduction_beside_other_terms_is_split_out() {
        assert_eq!(
            split("A(i,j) = B(i,k) * C(k,j) + D(i,j)").unwrap(),
            (vec!["t0(i,j) = B(i,k) * C(k,j)".to_string()], "A(i,j) = t0(i,j) + D(i,j)".to_string())
        );
        // Each reduced term its own temporary, subscripted by its free variables only; signs,
        // negation and an accumulating result kept; a name the statement uses is skipped.
        assert_eq!(
            split("t0(i,j) += -(B(i,k) * c(k)) - E(i,j) * 2 + sum(l, F(j,l) * g(l))").unwrap(),
            (
                vec!["t1(i) = B(i,k) * c(k)".to_string(), "t2(j) = F(j,l) * g(l)".to_string()],
                "t0(i,j) += -t1(i) - E(i,j) * 2 + t2(j)".to_string()
            )
        );
        assert_eq!(
            split("a(i) = B(i,j) * x(j) + sum(k, c(k))").unwrap().0,
            vec!["t0(i) = B(i,j) * x(j)".to_string(), "t1 = c(k)".to_string()]
        );
    }

    #[test]
    fn nothing_to_split_is_none() {
        assert_eq!(split("A(i,j) = B(i,k) * C(k,j)"), None);
        // `k` summed over both terms (C counts once per k): one term, as the differential
        // tests found when terms were split before the sums were placed.
        assert_eq!(split("A(i,j) = B(i,j) + C(l,k) + D(j,k)"), None);
        assert_eq!(split("A(i) = B(i) - C(l,k,j,i) + D(2*l+i)"), None);
        assert_eq!(split("A(i) = B(i,k) - C(l+k+1,k) - D(2*i+1,l,j)"), None);
        assert_eq!(split("A(i,j) = B(i,j) + C(j,i) * D(i,j)"), None);
        assert_eq!(split("A(i,j) = (B(i,j) + C(i,j)) * D(i,k) * E(k,j)"), None);
    }
}
