//! Index notation as text, in `taco`'s spelling, with the fewest parentheses that parse back
//! to the same tree (operators are left-associative, so a right operand of equal precedence
//! keeps its parentheses).

use std::fmt;

use super::{Access, AssignOp, Expr, ExprId, IndexNotation, IndexTerm, IndexVar, IndexVarId, TensorId, TensorVar};
use crate::id::Arena;

/// The names and expression nodes a printer needs; both index notation and concrete index
/// notation hand one out, so expressions print the same in each.
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    /// Tensors.
    pub tensors: &'a Arena<TensorId, TensorVar>,
    /// Index variables.
    pub vars: &'a Arena<IndexVarId, IndexVar>,
    /// Expression nodes.
    pub exprs: &'a Arena<ExprId, Expr>,
}

impl IndexNotation {
    /// The names and nodes of this statement, for printing.
    pub fn scope(&self) -> Scope<'_> {
        Scope { tensors: &self.tensors, vars: &self.vars, exprs: &self.exprs }
    }

    /// Writes one expression node.
    pub fn write_expr(&self, f: &mut impl fmt::Write, e: ExprId) -> fmt::Result {
        self.scope().write_expr(f, e)
    }

    /// Writes an access: `B(i,k)`, `I(2*i+p,j-1)`, or a bare name for a scalar.
    pub fn write_access(&self, f: &mut impl fmt::Write, a: &Access) -> fmt::Result {
        self.scope().write_access(f, a)
    }
}

impl Scope<'_> {
    fn var_name(&self, v: IndexVarId) -> &str {
        &self.vars[v].name
    }

    fn tensor_name(&self, t: TensorId) -> &str {
        &self.tensors[t].name
    }

    /// Writes one expression node.
    pub fn write_expr(&self, f: &mut impl fmt::Write, e: ExprId) -> fmt::Result {
        match &self.exprs[e] {
            Expr::Access(a) => self.write_access(f, a),
            Expr::Literal(v) => write!(f, "{v}"),
            Expr::Neg(a) => {
                f.write_str("-")?;
                self.write_operand(f, *a, 3, false)
            }
            Expr::Sum(v, a) => {
                write!(f, "sum({}, ", self.var_name(*v))?;
                self.write_expr(f, *a)?;
                f.write_str(")")
            }
            Expr::Binary(op, a, b) => {
                self.write_operand(f, *a, op.precedence(), false)?;
                write!(f, " {} ", op.symbol())?;
                self.write_operand(f, *b, op.precedence(), true)
            }
        }
    }

    fn write_operand(&self, f: &mut impl fmt::Write, e: ExprId, outer: u8, right: bool) -> fmt::Result {
        let inner = match &self.exprs[e] {
            Expr::Binary(op, ..) => op.precedence(),
            Expr::Neg(_) => 3,
            _ => 4,
        };
        if inner < outer || (right && inner == outer) {
            f.write_str("(")?;
            self.write_expr(f, e)?;
            f.write_str(")")
        } else {
            self.write_expr(f, e)
        }
    }

    /// Writes an access: `B(i,k)`, `I(2*i+p,j-1)`, or a bare name for a scalar.
    pub fn write_access(&self, f: &mut impl fmt::Write, a: &Access) -> fmt::Result {
        f.write_str(self.tensor_name(a.tensor))?;
        if a.subscripts.is_empty() {
            return Ok(());
        }
        f.write_str("(")?;
        for (k, s) in a.subscripts.iter().enumerate() {
            if k > 0 {
                f.write_str(",")?;
            }
            self.write_term(f, s)?;
        }
        f.write_str(")")
    }

    fn write_term(&self, f: &mut impl fmt::Write, t: &IndexTerm) -> fmt::Result {
        for (k, &(c, v)) in t.terms.iter().enumerate() {
            let name = self.var_name(v);
            match (k, c) {
                (0, 1) => write!(f, "{name}")?,
                (0, -1) => write!(f, "-{name}")?,
                (0, c) => write!(f, "{c}*{name}")?,
                (_, 1) => write!(f, "+{name}")?,
                (_, -1) => write!(f, "-{name}")?,
                (_, c) if c < 0 => write!(f, "-{}*{name}", c.unsigned_abs())?,
                (_, c) => write!(f, "+{c}*{name}")?,
            }
        }
        match t.constant {
            0 => Ok(()),
            c if c < 0 => write!(f, "-{}", c.unsigned_abs()),
            c => write!(f, "+{c}"),
        }
    }
}

impl fmt::Display for IndexNotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_access(f, &self.lhs)?;
        f.write_str(match self.op {
            AssignOp::Assign => " = ",
            AssignOp::Accumulate => " += ",
        })?;
        self.write_expr(f, self.rhs)
    }
}
