//! Tensor index notation: `A(i,j) = B(i,k) * C(k,j)`, with affine subscripts (`I(2*i+p, j+q)`).
//!
//! An [`IndexNotation`] owns its tensors, index variables and expression nodes in arenas and
//! holds one assignment. The text form is `taco`'s; [`parse`] reads it, `Display` writes it,
//! and `parse(print(x))` is `x` (tested as a property). Reductions are implicit in the text, as
//! in `taco`: [`IndexNotation::with_reductions`] makes them explicit `sum(k, ...)` nodes at the
//! smallest subexpression that contains every use of `k`.

mod check;
mod extents;
pub use extents::{Extents, SizeFacts};
pub(crate) mod parse;
mod print;
pub use print::Scope;
mod reduce;
mod split;
pub use split::SplitTerms;

pub use check::{Declarations, SemanticError, TensorType, Types, ValueType};
pub use parse::{ParseError, parse};

use crate::id::{Arena, id};

id!(
    /// A tensor of an index notation statement; prints as `T0`, `T1`, ...
    TensorId,
    "T"
);
id!(
    /// An index variable; prints as `i0`, `i1`, ...
    IndexVarId,
    "i"
);
id!(
    /// An expression node; prints as `e0`, `e1`, ...
    ExprId,
    "e"
);

/// A tensor as the statement names it; its type comes from [`Declarations`].
#[derive(Clone, Debug, PartialEq)]
pub struct TensorVar {
    /// The name in the text.
    pub name: String,
    /// The number of subscripts every access uses.
    pub order: usize,
}

/// An index variable as the statement names it.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexVar {
    /// The name in the text.
    pub name: String,
}

/// An affine subscript `c1*v1 + c2*v2 + ... + constant`: a plain variable, a sliding window
/// `i+p`, a stride `2*i+p`, an offset `i+2`. Terms keep the order they were written in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IndexTerm {
    /// `(coefficient, variable)` pairs; coefficients are never zero.
    pub terms: Vec<(i64, IndexVarId)>,
    /// The constant intercept.
    pub constant: i64,
}

impl IndexTerm {
    /// The subscript that is just `var`.
    pub fn var(var: IndexVarId) -> Self {
        Self { terms: vec![(1, var)], constant: 0 }
    }

    /// The variable, when the subscript is exactly one variable with coefficient 1.
    pub fn as_var(&self) -> Option<IndexVarId> {
        match self.terms.as_slice() {
            [(1, v)] if self.constant == 0 => Some(*v),
            _ => None,
        }
    }

    /// Whether the subscript is compound (anything but a plain variable).
    pub fn is_compound(&self) -> bool {
        self.as_var().is_none()
    }

    /// The variables it reads, in order.
    pub fn vars(&self) -> impl Iterator<Item = IndexVarId> + '_ {
        self.terms.iter().map(|&(_, v)| v)
    }
}

/// A read (or, on the left-hand side, a write) of a tensor.
#[derive(Clone, Debug)]
pub struct Access {
    /// The tensor.
    pub tensor: TensorId,
    /// One subscript per dimension.
    pub subscripts: Vec<IndexTerm>,
    /// Where the access stands in the parsed text (byte range), for error carets.
    pub span: Option<(usize, usize)>,
}

/// Two accesses are equal when they read the same tensor with the same subscripts, wherever
/// they were written.
impl PartialEq for Access {
    fn eq(&self, other: &Self) -> bool {
        self.tensor == other.tensor && self.subscripts == other.subscripts
    }
}

/// Arithmetic between two expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
}

impl BinaryOp {
    /// Binding strength: `*` and `/` bind tighter than `+` and `-`.
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Add | BinaryOp::Sub => 1,
            BinaryOp::Mul | BinaryOp::Div => 2,
        }
    }

    /// The operator's symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
        }
    }
}

/// An expression node.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A tensor read.
    Access(Access),
    /// A non-negative constant (negation is [`Expr::Neg`]).
    Literal(f64),
    /// `-e`
    Neg(ExprId),
    /// `a op b`
    Binary(BinaryOp, ExprId, ExprId),
    /// `sum(v, e)`: `e` summed over every value of `v`.
    Sum(IndexVarId, ExprId),
}

/// `=` or `+=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AssignOp {
    /// Overwrite the result.
    Assign,
    /// Add into the result.
    Accumulate,
}

/// One index notation statement with everything it names.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexNotation {
    /// The text it was parsed from, for error carets (`None` when built in code).
    pub source: Option<String>,
    /// The tensors, in order of first appearance.
    pub tensors: Arena<TensorId, TensorVar>,
    /// The index variables, in order of first appearance.
    pub vars: Arena<IndexVarId, IndexVar>,
    /// The expression nodes.
    pub exprs: Arena<ExprId, Expr>,
    /// The written tensor and its subscripts (plain variables).
    pub lhs: Access,
    /// `=` or `+=`.
    pub op: AssignOp,
    /// The right-hand side.
    pub rhs: ExprId,
}

impl IndexNotation {
    /// The direct children of a node.
    pub fn children(&self, e: ExprId) -> Vec<ExprId> {
        match &self.exprs[e] {
            Expr::Access(_) | Expr::Literal(_) => vec![],
            Expr::Neg(a) | Expr::Sum(_, a) => vec![*a],
            Expr::Binary(_, a, b) => vec![*a, *b],
        }
    }

    /// Every access below `e` (in left-to-right order), `e` included.
    pub fn accesses(&self, e: ExprId) -> Vec<&Access> {
        let mut out = Vec::new();
        let mut stack = vec![e];
        while let Some(n) = stack.pop() {
            if let Expr::Access(a) = &self.exprs[n] {
                out.push(a);
            }
            stack.extend(self.children(n).into_iter().rev());
        }
        out
    }

    /// The variables of the left-hand side: the result's free variables.
    pub fn free_vars(&self) -> Vec<IndexVarId> {
        self.lhs.subscripts.iter().flat_map(IndexTerm::vars).collect()
    }

    /// A variable's name.
    pub fn var_name(&self, v: IndexVarId) -> &str {
        &self.vars[v].name
    }

    /// A tensor's name.
    pub fn tensor_name(&self, t: TensorId) -> &str {
        &self.tensors[t].name
    }

    /// Looks a tensor up by name.
    pub fn tensor_named(&self, name: &str) -> Option<TensorId> {
        self.tensors.iter().find(|(_, t)| t.name == name).map(|(id, _)| id)
    }

    /// Looks an index variable up by name.
    pub fn var_named(&self, name: &str) -> Option<IndexVarId> {
        self.vars.iter().find(|(_, v)| v.name == name).map(|(id, _)| id)
    }

    /// The statement with every read of an operand in `split` that subscripts it differently
    /// from its first read (`B(j,i)` after `B(i,j)`) given a tensor of its own, a *view*
    /// named `B_2`, `B_3`, … (a name the statement does not use), and the `(view, operand)`
    /// pairs; `None` when no read needs one. A kernel reads one tensor in one level order, so
    /// `B(i,j) + B(j,i)` over a CSR `B` lowers only once the transposed read has a tensor it
    /// can be given in another order (the caller binds the view to the operand's data or a
    /// copy of it).
    pub fn with_views(&self, split: impl Fn(&str) -> bool) -> Option<(IndexNotation, Vec<(String, String)>)> {
        let mut out = self.clone();
        let mut views = Vec::new();
        // Per operand, each distinct subscript list read so far and the tensor that reads it.
        let mut reads: Vec<Vec<(Vec<IndexTerm>, TensorId)>> = vec![Vec::new(); self.tensors.len()];
        let mut stack = vec![self.rhs];
        while let Some(n) = stack.pop() {
            stack.extend(self.children(n).into_iter().rev());
            let Expr::Access(a) = &self.exprs[n] else { continue };
            let name = self.tensor_name(a.tensor);
            if a.tensor == self.lhs.tensor || !split(name) {
                continue;
            }
            let seen = &mut reads[crate::id::Id::index(a.tensor)];
            let id = match seen.iter().find(|(s, _)| *s == a.subscripts) {
                Some(&(_, id)) => id,
                None if seen.is_empty() => a.tensor,
                None => {
                    let view = (2..)
                        .map(|k| format!("{name}_{k}"))
                        .find(|v| out.tensor_named(v).is_none())
                        .expect("a free name");
                    views.push((view.clone(), name.to_string()));
                    out.tensors.push(TensorVar { name: view, order: self.tensors[a.tensor].order })
                }
            };
            seen.push((a.subscripts.clone(), id));
            if let Expr::Access(b) = &mut out.exprs[n] {
                b.tensor = id;
            }
        }
        (!views.is_empty()).then_some((out, views))
    }
}
