//! Dense levels: every coordinate is present, so a level is located, never walked: its
//! position is the parent's times its size plus the coordinate.

use crate::ir::build::{bin, int, var};
use crate::ir::{BinOp, Expr, ScalarType, Stmt};
use crate::lower::{AccessId, Lowerer};
use nm_ir::id::Id;
use nm_ir::notation::{IndexTerm, IndexVarId};

impl Lowerer<'_> {
    /// Locates every dense level in `list`: position = parent · size + coordinate, the
    /// coordinate being the level's subscript (every variable of it bound).
    pub(in crate::lower) fn locate(&mut self, body: &mut Vec<Stmt>, list: &[(AccessId, usize)]) {
        for &(k, l) in list {
            let op = self.operand(k);
            let dim = op.format.levels()[l].expr.dim();
            let size = op.shape[dim] as i64;
            let coordinate = self.affine(&self.accesses[k].subscripts[dim], None);
            let parent = if l == 0 { int(0) } else { var(self.positions[k][l - 1].expect("resolved in order")) };
            let p = self.f.var(&format!("{}{l}_p{}", self.access_name(k), k.index()), ScalarType::Index);
            body.push(Stmt::Decl(p, bin(BinOp::Add, bin(BinOp::Mul, parent, int(size)), coordinate)));
            self.positions[k][l] = Some(p);
        }
    }

    /// A subscript's value from the loop variables bound so far, leaving out `except` and any
    /// variable not bound yet (a window's lowest coordinate).
    pub(in crate::lower) fn affine(&self, term: &IndexTerm, except: Option<IndexVarId>) -> Expr {
        let mut e = int(term.constant);
        let mut first = term.constant == 0;
        for &(c, w) in &term.terms {
            let Some(lv) = self.bound[w].filter(|_| Some(w) != except) else { continue };
            let t = if c == 1 { var(lv) } else { bin(BinOp::Mul, int(c), var(lv)) };
            e = if first { t } else { bin(BinOp::Add, e, t) };
            first = false;
        }
        e
    }
}
