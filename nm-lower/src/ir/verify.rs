//! The loop IR's contract, checked: every id names one of the function's arrays and
//! variables, a variable is declared (or bound by its `for`) in an enclosing block before it
//! is read or assigned, expressions have the types their operators and places need, only
//! outputs are written, resized or sorted, workspace statements name workspaces, and `break`
//! sits inside a loop. The lowering runs it on every kernel it makes (a broken kernel is
//! refused, never run) and the tests run it on every kernel they see; both back ends may then
//! assume it.

use std::collections::HashSet;

use super::{ArrayId, BinOp, Expr, Function, Role, ScalarType, Stmt, UnOp, VarId};
use nm_ir::id::Id;

/// A broken rule of the loop IR, naming the statement's function and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kernel `{function}`: {problem}")]
pub struct VerifyError {
    /// The function.
    pub function: String,
    /// What is wrong, in words.
    pub problem: String,
}

/// An expression's type as far as checking needs: a literal adapts to the numeric type it
/// meets (the back ends give a constant the type of its context).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Scalar(ScalarType),
    /// An integer constant: an index, a float where it meets one, or a condition (`if 1`,
    /// as the back ends read it: nonzero is true).
    IntLiteral,
    /// A float constant: the float type it meets.
    FloatLiteral,
}

impl Ty {
    /// Whether a value of this type can stand where `want` is expected.
    fn fits(self, want: ScalarType) -> bool {
        match self {
            Ty::Scalar(t) => t == want,
            Ty::IntLiteral => true,
            Ty::FloatLiteral => matches!(want, ScalarType::F32 | ScalarType::F64),
        }
    }
}

impl Function {
    /// Checks the function against the loop IR's rules (see the module doc).
    pub fn verify(&self) -> Result<(), VerifyError> {
        let mut v = Verifier { f: self, scopes: vec![HashSet::new()], loops: 0 };
        v.block(&self.body).map_err(|problem| VerifyError { function: self.name.clone(), problem })
    }
}

struct Verifier<'a> {
    f: &'a Function,
    /// The variables declared in each enclosing block, innermost last.
    scopes: Vec<HashSet<VarId>>,
    /// Loops around the statement.
    loops: usize,
}

impl Verifier<'_> {
    fn block(&mut self, body: &[Stmt]) -> Result<(), String> {
        self.scopes.push(HashSet::new());
        let checked = body.iter().try_for_each(|s| self.stmt(s));
        self.scopes.pop();
        checked
    }

    fn declare(&mut self, v: VarId) -> Result<(), String> {
        self.var(v)?;
        self.scopes.last_mut().expect("a block is open").insert(v);
        Ok(())
    }

    fn var(&self, v: VarId) -> Result<&super::VarDecl, String> {
        self.f.vars.get(v).ok_or_else(|| format!("variable {} is not one of its {}", v.index(), self.f.vars.len()))
    }

    fn declared(&self, v: VarId) -> Result<ScalarType, String> {
        let decl = self.var(v)?;
        if !self.scopes.iter().any(|s| s.contains(&v)) {
            return Err(format!("`{}` is used where no enclosing block declares it", decl.name));
        }
        Ok(decl.ty)
    }

    fn array(&self, a: ArrayId) -> Result<&super::ArrayDecl, String> {
        self.f.arrays.get(a).ok_or_else(|| format!("array {} is not one of its {}", a.index(), self.f.arrays.len()))
    }

    /// `a`, which the statement `what` writes: an output.
    fn output(&self, a: ArrayId, what: &str) -> Result<(), String> {
        let decl = self.array(a)?;
        if decl.output { Ok(()) } else { Err(format!("{what} writes `{}`, which is not an output", decl.name)) }
    }

    fn workspace(&self, a: ArrayId, what: &str) -> Result<(), String> {
        let decl = self.array(a)?;
        match decl.role {
            Role::Workspace { .. } if decl.output => Ok(()),
            _ => Err(format!("{what} names `{}`, which is not an output workspace", decl.name)),
        }
    }

    /// `e`, checked, where a value of type `want` is needed.
    fn expect(&self, e: &Expr, want: ScalarType, place: &str) -> Result<(), String> {
        let ty = self.expr(e)?;
        if ty.fits(want) { Ok(()) } else { Err(format!("{place} is {ty:?} where {want:?} is needed")) }
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), String> {
        use ScalarType::{Bool, Index};
        match s {
            Stmt::Decl(v, e) => {
                let ty = self.var(*v)?.ty;
                self.expect(e, ty, "a declaration's value")?;
                self.declare(*v)
            }
            Stmt::Assign(v, e) => {
                let ty = self.declared(*v)?;
                self.expect(e, ty, "an assigned value")
            }
            Stmt::Store { array, index, value, .. } => {
                self.output(*array, "a store")?;
                self.expect(index, Index, "a store's index")?;
                let elem = self.array(*array)?.elem.scalar();
                self.expect(value, elem, "a stored value")
            }
            Stmt::For { var, start, end, body, .. } => {
                if self.var(*var)?.ty != Index {
                    return Err(format!("the loop variable `{}` is not an index", self.f.vars[*var].name));
                }
                self.expect(start, Index, "a loop's start")?;
                self.expect(end, Index, "a loop's end")?;
                self.loops += 1;
                self.scopes.push(HashSet::from([*var]));
                let checked = self.block(body);
                self.scopes.pop();
                self.loops -= 1;
                checked
            }
            Stmt::While { cond, body } => {
                self.expect(cond, Bool, "a `while` condition")?;
                self.loops += 1;
                let checked = self.block(body);
                self.loops -= 1;
                checked
            }
            Stmt::If { cond, then, otherwise } => {
                self.expect(cond, Bool, "an `if` condition")?;
                self.block(then)?;
                self.block(otherwise)
            }
            Stmt::Break if self.loops == 0 => Err("`break` outside a loop".into()),
            Stmt::Break => Ok(()),
            Stmt::Resize { array, len } | Stmt::Written { array, len } => {
                self.output(*array, "a resize")?;
                self.expect(len, Index, "a length")
            }
            Stmt::Sort { array, start, end, scratch } => {
                self.output(*array, "a sort")?;
                self.output(*scratch, "a sort's scratch")?;
                self.expect(start, Index, "a sort's start")?;
                self.expect(end, Index, "a sort's end")
            }
            Stmt::Insert { workspace, key, first, value } => {
                self.workspace(*workspace, "an insert")?;
                self.expect(key, Index, "an insert's key")?;
                self.expect(first, Index, "an insert's first coordinate")?;
                match self.expr(value)? {
                    Ty::Scalar(ScalarType::F32 | ScalarType::F64) | Ty::FloatLiteral | Ty::IntLiteral => Ok(()),
                    ty => Err(format!("an inserted value is {ty:?}, not a float")),
                }
            }
            Stmt::Finish { workspace } => self.workspace(*workspace, "a finish"),
            Stmt::Prefetch { array, index } => {
                self.array(*array)?;
                self.expect(index, Index, "a prefetch's index")
            }
            Stmt::PrefetchBucket { workspace, bucket, .. } => {
                self.workspace(*workspace, "a bucket prefetch")?;
                self.expect(bucket, Index, "a bucket")
            }
        }
    }

    fn expr(&self, e: &Expr) -> Result<Ty, String> {
        use ScalarType::{Bool, Index};
        Ok(match e {
            Expr::Int(_) => Ty::IntLiteral,
            Expr::Float(_) => Ty::FloatLiteral,
            Expr::Var(v) => Ty::Scalar(self.declared(*v)?),
            Expr::Load(a, i) => {
                let decl = self.array(*a)?;
                if matches!(decl.role, Role::Workspace { .. }) {
                    return Err(format!("a load from the workspace `{}`", decl.name));
                }
                self.expect(i, Index, "a load's index")?;
                Ty::Scalar(decl.elem.scalar())
            }
            Expr::Len(a) => {
                self.array(*a)?;
                Ty::Scalar(Index)
            }
            Expr::Unary(UnOp::Neg, x) => self.expr(x)?,
            Expr::Unary(UnOp::Not, x) => {
                self.expect(x, Bool, "the operand of `!`")?;
                Ty::Scalar(Bool)
            }
            Expr::Unary(UnOp::TrailingZeros | UnOp::ClearLowestBit, x) => {
                self.expect(x, Index, "a bit operation's operand")?;
                Ty::Scalar(Index)
            }
            Expr::Binary(op, a, b) => self.binary(*op, a, b)?,
            Expr::Select(c, a, b) => {
                self.expect(c, Bool, "a select's condition")?;
                self.unify(self.expr(a)?, self.expr(b)?, "a select's branches")?
            }
        })
    }

    fn binary(&self, op: BinOp, a: &Expr, b: &Expr) -> Result<Ty, String> {
        use ScalarType::{Bool, Index};
        let (ta, tb) = (self.expr(a)?, self.expr(b)?);
        Ok(match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Min | BinOp::Max => {
                let ty = self.unify(ta, tb, "an arithmetic operation's operands")?;
                if ty == Ty::Scalar(Bool) {
                    return Err("arithmetic on conditions".into());
                }
                ty
            }
            BinOp::Rem | BinOp::Shr | BinOp::Shl | BinOp::BitAnd | BinOp::BitOr => {
                if !ta.fits(Index) || !tb.fits(Index) {
                    return Err(format!("{op:?} on {ta:?} and {tb:?}, not indices"));
                }
                Ty::Scalar(Index)
            }
            BinOp::Lt | BinOp::Le | BinOp::Eq | BinOp::Ne => {
                self.unify(ta, tb, "a comparison's operands")?;
                Ty::Scalar(Bool)
            }
            BinOp::And | BinOp::Or => {
                if !ta.fits(Bool) || !tb.fits(Bool) {
                    return Err(format!("{op:?} on {ta:?} and {tb:?}, not conditions"));
                }
                Ty::Scalar(Bool)
            }
        })
    }

    /// The type two operands share, a literal taking the other's.
    fn unify(&self, a: Ty, b: Ty, place: &str) -> Result<Ty, String> {
        match (a, b) {
            (Ty::Scalar(x), other) | (other, Ty::Scalar(x)) if other.fits(x) => Ok(Ty::Scalar(x)),
            (Ty::Scalar(_), _) | (_, Ty::Scalar(_)) => Err(format!("{place} are {a:?} and {b:?}")),
            (Ty::IntLiteral, Ty::IntLiteral) => Ok(Ty::IntLiteral),
            // Two literals, one a float: a float where they meet one.
            _ => Ok(Ty::FloatLiteral),
        }
    }
}
