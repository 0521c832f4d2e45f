//! The loop IR as text, for the file tests and `-print-loops`; [`Function::parse`] reads it
//! back. Everything a kernel is made of is printed except a sparse workspace's capacity, which
//! the lowering sizes from the memory free when it runs (a parsed kernel gets the default).

use std::fmt::{self, Write};

use super::{BinOp, Expr, Function, Stmt, UnOp};

impl Function {
    fn write_expr(&self, f: &mut impl Write, e: &Expr) -> fmt::Result {
        match e {
            Expr::Int(v) => write!(f, "{v}"),
            Expr::Float(v) => write!(f, "{v:?}"),
            Expr::Var(v) => f.write_str(&self.vars[*v].name),
            Expr::Len(a) => write!(f, "len({})", self.arrays[*a].name),
            Expr::Load(a, i) => {
                write!(f, "{}[", self.arrays[*a].name)?;
                self.write_expr(f, i)?;
                f.write_str("]")
            }
            Expr::Unary(UnOp::ClearLowestBit, a) => {
                f.write_str("clear_lowest(")?;
                self.write_expr(f, a)?;
                f.write_str(")")
            }
            Expr::Unary(UnOp::TrailingZeros, a) => {
                f.write_str("ctz(")?;
                self.write_expr(f, a)?;
                f.write_str(")")
            }
            Expr::Unary(op @ (UnOp::Neg | UnOp::Not), a) => {
                f.write_str(if *op == UnOp::Neg { "-" } else { "!" })?;
                self.write_operand(f, a)
            }
            Expr::Binary(op @ (BinOp::Min | BinOp::Max), a, b) => {
                write!(f, "{}(", if *op == BinOp::Min { "min" } else { "max" })?;
                self.write_expr(f, a)?;
                f.write_str(", ")?;
                self.write_expr(f, b)?;
                f.write_str(")")
            }
            Expr::Binary(op, a, b) => {
                self.write_operand(f, a)?;
                write!(f, " {} ", symbol(*op))?;
                self.write_operand(f, b)
            }
            Expr::Select(c, a, b) => {
                self.write_operand(f, c)?;
                f.write_str(" ? ")?;
                self.write_operand(f, a)?;
                f.write_str(" : ")?;
                self.write_operand(f, b)
            }
        }
    }

    /// Operands of operators are parenthesized unless they are atoms: unambiguous, if verbose.
    fn write_operand(&self, f: &mut impl Write, e: &Expr) -> fmt::Result {
        let atom = matches!(e, Expr::Int(_) | Expr::Float(_) | Expr::Var(_) | Expr::Load(..) | Expr::Len(_))
            || matches!(e, Expr::Binary(BinOp::Min | BinOp::Max, ..));
        if atom {
            self.write_expr(f, e)
        } else {
            f.write_str("(")?;
            self.write_expr(f, e)?;
            f.write_str(")")
        }
    }

    fn write_block(&self, f: &mut impl Write, body: &[Stmt], depth: usize) -> fmt::Result {
        for s in body {
            self.write_stmt(f, s, depth)?;
        }
        Ok(())
    }

    fn write_stmt(&self, f: &mut impl Write, s: &Stmt, depth: usize) -> fmt::Result {
        let pad = "  ".repeat(depth);
        match s {
            Stmt::Decl(v, e) => {
                write!(f, "{pad}let {}: {:?} = ", self.vars[*v].name, self.vars[*v].ty)?;
                self.write_expr(f, e)?;
                writeln!(f)
            }
            Stmt::Assign(v, e) => {
                write!(f, "{pad}{} = ", self.vars[*v].name)?;
                self.write_expr(f, e)?;
                writeln!(f)
            }
            Stmt::Store { array, index, value, accumulate } => {
                let atomic = if *accumulate && self.atomic == Some(*array) { "atomic " } else { "" };
                write!(f, "{pad}{atomic}{}[", self.arrays[*array].name)?;
                self.write_expr(f, index)?;
                write!(f, "] {} ", if *accumulate { "+=" } else { "=" })?;
                self.write_expr(f, value)?;
                writeln!(f)
            }
            Stmt::For { var, start, end, body, parallel } => {
                write!(f, "{pad}{}for {} in ", if *parallel { "parallel " } else { "" }, self.vars[*var].name)?;
                self.write_expr(f, start)?;
                f.write_str("..")?;
                self.write_expr(f, end)?;
                writeln!(f, " {{")?;
                self.write_block(f, body, depth + 1)?;
                writeln!(f, "{pad}}}")
            }
            Stmt::While { cond, body } => {
                write!(f, "{pad}while ")?;
                self.write_expr(f, cond)?;
                writeln!(f, " {{")?;
                self.write_block(f, body, depth + 1)?;
                writeln!(f, "{pad}}}")
            }
            Stmt::If { cond, then, otherwise } => {
                write!(f, "{pad}if ")?;
                self.write_expr(f, cond)?;
                writeln!(f, " {{")?;
                self.write_block(f, then, depth + 1)?;
                if otherwise.is_empty() {
                    writeln!(f, "{pad}}}")
                } else {
                    writeln!(f, "{pad}}} else {{")?;
                    self.write_block(f, otherwise, depth + 1)?;
                    writeln!(f, "{pad}}}")
                }
            }
            Stmt::Break => writeln!(f, "{pad}break"),
            Stmt::Insert { workspace, key, first, value } => {
                write!(f, "{pad}insert {}[", self.arrays[*workspace].name)?;
                self.write_expr(f, key)?;
                write!(f, "] += ")?;
                self.write_expr(f, value)?;
                f.write_str(" first ")?;
                self.write_expr(f, first)?;
                writeln!(f)
            }
            Stmt::Finish { workspace } => writeln!(f, "{pad}finish {}", self.arrays[*workspace].name),
            Stmt::Prefetch { array, index } => {
                write!(f, "{pad}prefetch {}[", self.arrays[*array].name)?;
                self.write_expr(f, index)?;
                writeln!(f, "]")
            }
            Stmt::PrefetchBucket { workspace, bucket, line } => {
                let what = match line {
                    crate::ir::BucketLine::Head => "head",
                    crate::ir::BucketLine::Tail => "tail",
                };
                write!(f, "{pad}prefetch {what} of {} bucket ", self.arrays[*workspace].name)?;
                self.write_expr(f, bucket)?;
                writeln!(f)
            }
            Stmt::Resize { array, len } => {
                write!(f, "{pad}resize {} to ", self.arrays[*array].name)?;
                self.write_expr(f, len)?;
                writeln!(f)
            }
            Stmt::Written { array, len } => {
                write!(f, "{pad}written {}[..", self.arrays[*array].name)?;
                self.write_expr(f, len)?;
                writeln!(f, "]")
            }
            Stmt::Sort { array, start, end, scratch } => {
                write!(f, "{pad}sort {}[", self.arrays[*array].name)?;
                self.write_expr(f, start)?;
                write!(f, "..")?;
                self.write_expr(f, end)?;
                writeln!(f, "] using {}", self.arrays[*scratch].name)
            }
        }
    }
}

/// The C spelling of an operator (`min`/`max` are calls, not operators).
pub(crate) fn symbol(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Rem => "%",
        BinOp::Lt => "<",
        BinOp::Le => "<=",
        BinOp::Eq => "==",
        BinOp::Ne => "!=",
        BinOp::And => "&&",
        BinOp::Or => "||",
        BinOp::Shr => ">>",
        BinOp::Shl => "<<",
        BinOp::BitAnd => "&",
        BinOp::BitOr => "|",
        BinOp::Min | BinOp::Max => unreachable!("printed as calls"),
    }
}

/// `kernel name(arrays) { body }`, arrays with their types and roles.
impl fmt::Display for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "kernel {}(", self.name)?;
        for (_, a) in self.arrays.iter() {
            let out = if a.output { "out " } else { "" };
            match &a.role {
                // Its configuration but the capacity (see the module doc).
                crate::ir::Role::Workspace { extents, kinds, config } => {
                    let kinds: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
                    writeln!(
                        f,
                        "  {out}{}: [{:?}] Workspace {{ policy: {}, extents: {extents:?}, kinds: [{}], \
                         pipelined: {}, double_buffered: {} }},",
                        a.name,
                        a.elem,
                        config.policy,
                        kinds.join("; "),
                        config.pipelined,
                        config.double_buffered
                    )?
                }
                role => writeln!(f, "  {out}{}: [{:?}] {role:?},", a.name, a.elem)?,
            }
        }
        match self.omp_schedule {
            schedule if schedule == crate::ir::OmpSchedule::default() => writeln!(f, ") {{")?,
            crate::ir::OmpSchedule::Static(None) => writeln!(f, ") schedule(static) {{")?,
            crate::ir::OmpSchedule::Static(Some(chunk)) => writeln!(f, ") schedule(static, {chunk}) {{")?,
            crate::ir::OmpSchedule::Dynamic(chunk) => writeln!(f, ") schedule(dynamic, {chunk}) {{")?,
        }
        let mut body = String::new();
        self.write_block(&mut body, &self.body, 1)?;
        f.write_str(&body)?;
        writeln!(f, "}}")
    }
}
