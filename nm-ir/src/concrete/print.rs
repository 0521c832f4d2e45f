//! CIN as text: `forall(i, ...)`, `where(consumer, producer)`, `sequence(a, b)`.

use std::fmt;

use super::{ConcreteNotation, Stmt, StmtId};
use crate::notation::AssignOp;

impl ConcreteNotation {
    /// Writes one statement.
    pub fn write_stmt(&self, f: &mut impl fmt::Write, s: StmtId) -> fmt::Result {
        let scope = self.scope();
        match &self.stmts[s] {
            Stmt::Assign { lhs, op, rhs } => {
                scope.write_access(f, lhs)?;
                f.write_str(match op {
                    AssignOp::Assign => " = ",
                    AssignOp::Accumulate => " += ",
                })?;
                scope.write_expr(f, *rhs)
            }
            Stmt::Forall { var, body, attrs } => {
                write!(f, "forall({}, ", self.vars[*var].name)?;
                self.write_stmt(f, *body)?;
                write!(f, "{attrs})")
            }
            Stmt::Where { consumer, producer } => {
                f.write_str("where(")?;
                self.write_stmt(f, *consumer)?;
                f.write_str(", ")?;
                self.write_stmt(f, *producer)?;
                f.write_str(")")
            }
            Stmt::Sequence { first, second } => {
                f.write_str("sequence(")?;
                self.write_stmt(f, *first)?;
                f.write_str(", ")?;
                self.write_stmt(f, *second)?;
                f.write_str(")")
            }
        }
    }
}

impl fmt::Display for ConcreteNotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_stmt(f, self.root)
    }
}
