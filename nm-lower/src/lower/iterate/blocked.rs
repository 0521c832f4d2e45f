//! Vector-wise N:M levels (`nm(N,M,L)`): windows of M rows, column groups of L, the N rows
//! kept per window and group, and the L lanes, walked as four nested loops in storage order
//! that bind both of the operand's variables at once.

use super::Coordinates;
use crate::ir::build::{bin, int, var};
use crate::ir::{BinOp, ScalarType, Stmt};
use crate::lower::{AccessId, Inside, LowerError, Lowerer, is_factor, refuse};
use nm_ir::notation::{ExprId, IndexVarId};

impl Lowerer<'_> {
    /// The access of a vector-wise N:M operand (`nm(N,M,L)`) reached at `v`, not yet iterated.
    pub(in crate::lower) fn blocked_access(&self, v: IndexVarId, rhs: ExprId) -> Option<AccessId> {
        self.reads(rhs).into_iter().find(|&k| {
            let a = &self.accesses[k];
            let o = self.operands[a.tensor].as_ref().expect("decomposed");
            o.format.nm_params().is_some()
                && self.positions[k][0].is_none()
                && a.subscripts.iter().any(|t| t.as_var() == Some(v))
        })
    }
    /// Loops over a vector-wise N:M operand `B(x, y)` (`nm(N,M,L)`) in its storage order —
    /// windows, column groups, the N kept rows, the L lanes — binding both its variables at
    /// once: `x = w·M + meta`, `y = g·L + lane`, padding skipped. Taken where the operand's first
    /// variable is reached and the second is the next loop, the operand is a factor of the
    /// whole product (its zeros contribute nothing) and every other operand is dense (located
    /// where it is read).
    pub(in crate::lower) fn blocked_nest(
        &mut self,
        k: AccessId,
        v: IndexVarId,
        inside: Inside<'_>,
    ) -> Result<Vec<Stmt>, LowerError> {
        let Inside { loops, lhs, op, rhs } = inside;
        let a = self.accesses[k].clone();
        let o = self.operands[a.tensor].clone().expect("decomposed");
        let tname = self.cin.tensors[a.tensor].name.clone();
        let (n, m, l) = o.format.nm_params().expect("nm(N,M,L)");
        let (Some(x), Some(y)) = (a.subscripts[0].as_var(), a.subscripts[1].as_var()) else {
            return refuse(LowerError::Subscript, format!("`{tname}` in nm(N,M,L) with compound subscripts"));
        };
        let other = if x == v { y } else { x };
        let Some((&(next, _), rest)) = loops.split_first().filter(|(first, _)| first.0 == other) else {
            return refuse(
                LowerError::LoopOrder,
                format!(
                    "`{tname}` in nm(N,M,L): its two variables must be adjacent loops (`{}` right after `{}`)",
                    self.cin.vars[other].name, self.cin.vars[v].name
                ),
            );
        };
        debug_assert_eq!(next, other);
        let others_dense = self.reads(rhs).into_iter().all(|j| j == k || self.all_dense(j));
        if !others_dense || !is_factor(self.exprs, rhs, &a) || self.assembly.is_some() {
            return refuse(
                LowerError::Format,
                format!("`{tname}` in nm(N,M,L) other than as a factor of a product with dense operands"),
            );
        }
        let (rows, cols) = (o.shape[0], o.shape[1]);
        let (windows, groups) = (rows.div_ceil(m as usize), cols.div_ceil(l));
        let prefix = self.access_name(k);
        let mut new_var = |s: &str| self.f.var(&format!("{prefix}_{s}"), ScalarType::Index);
        let (w, g, p1, p2, lane, p3) =
            (new_var("w"), new_var("g"), new_var("p1"), new_var("p2"), new_var("lane"), new_var("p3"));
        let (xv, yv) = (
            self.f.var(&self.cin.vars[x].name.clone(), ScalarType::Index),
            self.f.var(&self.cin.vars[y].name.clone(), ScalarType::Index),
        );
        let meta = o.levels[2].crd().expect("metadata");
        let offset = Coordinates::Structured { meta, n, m, base: bin(BinOp::Mul, var(p1), int(n as i64)) }.at(var(p2));
        let saved = (self.positions.clone(), self.bound.clone());
        self.bound[x] = Some(xv);
        self.bound[y] = Some(yv);
        self.positions[k][0] = Some(w);
        self.positions[k][1] = Some(p1);
        self.positions[k][2] = Some(p2);
        self.positions[k][3] = Some(p3);
        let inner = self.nest(Inside { loops: rest, lhs, op, rhs });
        (self.positions, self.bound) = saved;
        let inner = inner?;
        let lanes = vec![
            Stmt::Decl(yv, bin(BinOp::Add, bin(BinOp::Mul, var(g), int(l as i64)), var(lane))),
            Stmt::Decl(p3, bin(BinOp::Add, bin(BinOp::Mul, var(p2), int(l as i64)), var(lane))),
            Stmt::If { cond: bin(BinOp::Lt, var(yv), int(cols as i64)), then: inner, otherwise: vec![] },
        ];
        let kept = vec![
            Stmt::Decl(xv, bin(BinOp::Add, bin(BinOp::Mul, var(w), int(m as i64)), offset)),
            Stmt::If {
                cond: bin(BinOp::Lt, var(xv), int(rows as i64)),
                then: vec![Stmt::For { var: lane, start: int(0), end: int(l as i64), body: lanes, parallel: false }],
                otherwise: vec![],
            },
        ];
        let group = vec![
            Stmt::Decl(p1, bin(BinOp::Add, bin(BinOp::Mul, var(w), int(groups as i64)), var(g))),
            Stmt::For {
                var: p2,
                start: bin(BinOp::Mul, var(p1), int(n as i64)),
                end: bin(BinOp::Mul, bin(BinOp::Add, var(p1), int(1)), int(n as i64)),
                body: kept,
                parallel: false,
            },
        ];
        Ok(vec![Stmt::For {
            var: w,
            start: int(0),
            end: int(windows as i64),
            body: vec![Stmt::For { var: g, start: int(0), end: int(groups as i64), body: group, parallel: false }],
            parallel: false,
        }])
    }
}
