//! Semantic analysis: every tensor declared with a type, every index variable given one size
//! (from the dimensions it indexes, or from an explicit `-d` size), and every compound
//! subscript kept inside its dimension ("valid" convolution semantics).

use std::collections::BTreeMap;

use nm_format::Format;

use super::{Access, IndexNotation};
use crate::id::Id;

/// The value type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
}

/// A tensor's type: a dense tensor type (shape and values) plus, for a sparse tensor, its
/// encoding. Nothing else distinguishes a sparse tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorType {
    /// Dimension sizes.
    pub shape: Vec<usize>,
    /// Value type.
    pub value: ValueType,
    /// The storage format; `None` is dense row-major.
    pub format: Option<Format>,
}

impl TensorType {
    /// A dense `f64` tensor of `shape`.
    pub fn dense(shape: &[usize]) -> Self {
        Self { shape: shape.to_vec(), value: ValueType::F64, format: None }
    }

    /// An `f64` tensor of `shape` stored in `format`.
    pub fn sparse(shape: &[usize], format: Format) -> Self {
        Self { shape: shape.to_vec(), value: ValueType::F64, format: Some(format) }
    }
}

/// What the statement's names mean: tensor types, and sizes for index variables that no plain
/// subscript determines (the `-d=i:100` of the command line). Ordered maps, so that equal
/// declarations print the same (callers key compiled programs by the printed form).
#[derive(Clone, Debug, Default)]
pub struct Declarations {
    tensors: BTreeMap<String, TensorType>,
    /// Each size and where it was given, for messages.
    sizes: BTreeMap<String, (usize, String)>,
}

impl Declarations {
    /// No declarations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares tensor `name`.
    pub fn tensor(mut self, name: &str, ty: TensorType) -> Self {
        self.tensors.insert(name.to_string(), ty);
        self
    }

    /// Gives index variable `name` a size.
    pub fn index_size(self, name: &str, size: usize) -> Self {
        self.index_size_from(name, size, "its declaration")
    }

    /// Gives index variable `name` a size, saying where it came from (`-d`, an input file)
    /// in the message of a conflict.
    pub fn index_size_from(mut self, name: &str, size: usize, origin: &str) -> Self {
        self.sizes.insert(name.to_string(), (size, origin.to_string()));
        self
    }

    /// Refuses a declaration of a tensor or index variable that `stmt` does not have.
    pub fn check_names(&self, stmt: &IndexNotation) -> Result<(), SemanticError> {
        let list = |names: Vec<&str>| names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        let mut tensors: Vec<&String> = self.tensors.keys().collect();
        tensors.sort();
        if let Some(name) = tensors.into_iter().find(|n| stmt.tensor_named(n).is_none()) {
            let known = list(stmt.tensors.iter().map(|(_, t)| t.name.as_str()).collect());
            return Err(SemanticError::NotInStatement { kind: "tensor", name: name.clone(), known });
        }
        let mut vars: Vec<&String> = self.sizes.keys().collect();
        vars.sort();
        if let Some(name) = vars.into_iter().find(|n| stmt.var_named(n).is_none()) {
            let known = list(stmt.vars.iter().map(|(_, v)| v.name.as_str()).collect());
            return Err(SemanticError::NotInStatement { kind: "index variable", name: name.clone(), known });
        }
        Ok(())
    }
}

/// The result of checking: a type per tensor and a size per index variable, indexed by id.
#[derive(Clone, Debug, PartialEq)]
pub struct Types {
    /// `tensors[t.index()]` is the type of tensor `t`.
    pub tensors: Vec<TensorType>,
    /// `sizes[v.index()]` is the number of values of index variable `v`.
    pub sizes: Vec<usize>,
}

/// A statement that parses but means nothing; the message names the problem and, when the
/// statement came from text, shows it with a caret under the offending access.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SemanticError {
    /// A tensor with no declaration.
    #[error("{}", render(rendered, &format!("unknown tensor `{name}`: declare its shape (and format)")))]
    UnknownTensor {
        /// Its name.
        name: String,
        /// The statement with a caret, if known.
        rendered: Option<(String, usize, usize)>,
    },
    /// An access whose subscript count differs from the declared order.
    #[error("{}", render(rendered, &format!("`{name}` is declared with {declared} dimensions but accessed with {used} subscripts")))]
    OrderMismatch {
        /// The tensor.
        name: String,
        /// Declared order.
        declared: usize,
        /// Subscripts used.
        used: usize,
        /// The statement with a caret, if known.
        rendered: Option<(String, usize, usize)>,
    },
    /// A declared format whose order differs from the shape's.
    #[error("{}", render(rendered, &format!("`{name}` has a {shape_order}-dimensional shape but its format stores {format_order} dimensions")))]
    FormatOrder {
        /// The tensor.
        name: String,
        /// Dimensions of the shape.
        shape_order: usize,
        /// Dimensions of the format.
        format_order: usize,
        /// The statement with a caret, if known.
        rendered: Option<(String, usize, usize)>,
    },
    /// An index variable that indexes dimensions of two different sizes.
    #[error("{}", render(rendered, &format!("index variable `{var}` has size {first} from {first_at} but size {second} here")))]
    SizeConflict {
        /// The variable.
        var: String,
        /// The size first seen.
        first: usize,
        /// Where (`B dimension 1`, or `-d`).
        first_at: String,
        /// The conflicting size.
        second: usize,
        /// The statement with a caret, if known.
        rendered: Option<(String, usize, usize)>,
    },
    /// A tensor whose file states no shape has a coordinate past the size its variable has.
    #[error(
        "`{name}` has coordinates up to {needs} in dimension {} (its file states no shape), past the size {size} of `{var}` from {origin}",
        .dim + 1
    )]
    CoordinatesBeyond {
        /// The tensor.
        name: String,
        /// The dimension (0-based).
        dim: usize,
        /// The size its coordinates need.
        needs: usize,
        /// The variable.
        var: String,
        /// The variable's size.
        size: usize,
        /// Where that size came from.
        origin: String,
    },
    /// An index variable used only in compound subscripts, with no size given.
    #[error("{}", render(rendered, &format!("the size of index variable `{var}` cannot be inferred: it appears only in compound subscripts; give it with `-d={var}:SIZE`")))]
    CannotInfer {
        /// The variable.
        var: String,
        /// The statement with a caret under its first access, if known.
        rendered: Option<(String, usize, usize)>,
    },
    /// A compound subscript that leaves its dimension for some values of its variables.
    #[error("{}", render(rendered, &format!("subscript {dim} of `{name}` reaches {low}..={high}, outside 0..{size}; with valid convolution semantics the index variable sizes must keep every access in range")))]
    OutOfRange {
        /// The tensor.
        name: String,
        /// The dimension (0-based).
        dim: usize,
        /// The smallest value the subscript takes.
        low: i64,
        /// The largest value.
        high: i64,
        /// The dimension's size.
        size: usize,
        /// The statement with a caret, if known.
        rendered: Option<(String, usize, usize)>,
    },
    /// A `sum` over a variable of the left-hand side, or inside a `sum` over the same
    /// variable: it would mean a loop inside a loop over one variable.
    #[error("`sum({var}, ...)` {}", if *free { "sums over a variable of the left-hand side" } else { "inside a `sum` over the same variable" })]
    RepeatedSum {
        /// The variable.
        var: String,
        /// Whether it is on the left-hand side (else summed by an enclosing `sum`).
        free: bool,
    },
    /// The same index variable twice on the left-hand side.
    #[error("{}", render(rendered, &format!("index variable `{var}` appears twice on the left-hand side")))]
    RepeatedOutputVar {
        /// The variable.
        var: String,
        /// The statement with a caret under the left-hand side, if known.
        rendered: Option<(String, usize, usize)>,
    },
    /// A declaration naming a tensor or index variable the statement does not have (a typo
    /// would otherwise be ignored).
    #[error("`{name}` is declared, but the statement has no {kind} `{name}` (its {kind}s: {known})")]
    NotInStatement {
        /// `"tensor"` or `"index variable"`.
        kind: &'static str,
        /// The declared name.
        name: String,
        /// The statement's names of that kind.
        known: String,
    },
}

fn render(rendered: &Option<(String, usize, usize)>, message: &str) -> String {
    match rendered {
        Some((input, offset, len)) => nm_format::parse::render_error(input, *offset, *len, message),
        None => message.to_string(),
    }
}

impl IndexNotation {
    pub(super) fn caret(&self, access: &Access) -> Option<(String, usize, usize)> {
        let (start, end) = access.span?;
        Some((self.source.clone()?, start, end - start))
    }

    /// Checks the statement against `decls` and infers every index variable's size.
    pub fn check(&self, decls: &Declarations) -> Result<Types, SemanticError> {
        let lhs_vars = self.free_vars();
        for (k, v) in lhs_vars.iter().enumerate() {
            if lhs_vars[..k].contains(v) {
                return Err(SemanticError::RepeatedOutputVar {
                    var: self.var_name(*v).to_string(),
                    rendered: self.caret(&self.lhs),
                });
            }
        }
        let mut stack = vec![(self.rhs, Vec::new())];
        while let Some((e, mut summed)) = stack.pop() {
            if let super::Expr::Sum(v, _) = self.exprs[e] {
                if lhs_vars.contains(&v) || summed.contains(&v) {
                    return Err(SemanticError::RepeatedSum {
                        var: self.var_name(v).to_string(),
                        free: lhs_vars.contains(&v),
                    });
                }
                summed.push(v);
            }
            stack.extend(self.children(e).into_iter().map(|c| (c, summed.clone())));
        }
        let mut accesses = vec![&self.lhs];
        accesses.extend(self.accesses(self.rhs));
        let mut tensors: Vec<Option<TensorType>> = vec![None; self.tensors.len()];
        for a in &accesses {
            let name = self.tensor_name(a.tensor);
            let ty = decls
                .tensors
                .get(name)
                .ok_or_else(|| SemanticError::UnknownTensor { name: name.to_string(), rendered: self.caret(a) })?;
            if ty.shape.len() != a.subscripts.len() {
                return Err(SemanticError::OrderMismatch {
                    name: name.to_string(),
                    declared: ty.shape.len(),
                    used: a.subscripts.len(),
                    rendered: self.caret(a),
                });
            }
            if let Some(f) = &ty.format
                && f.order() != ty.shape.len()
            {
                return Err(SemanticError::FormatOrder {
                    name: name.to_string(),
                    shape_order: ty.shape.len(),
                    format_order: f.order(),
                    rendered: self.caret(a),
                });
            }
            tensors[a.tensor.index()] = Some(ty.clone());
        }
        // Sizes: see `extents`.
        let facts = super::extents::SizeFacts {
            shapes: tensors.iter().map(|t| t.as_ref().map(|t| t.shape.clone())).collect(),
            growable: vec![false; self.tensors.len()],
            described: Vec::new(),
            given: self.vars.iter().map(|(_, var)| decls.sizes.get(&var.name).cloned()).collect(),
            default: None,
        };
        let resolved = self.extents(&facts)?.sizes;
        // Compound subscripts stay inside their dimension for every value of their variables.
        for a in &accesses {
            let ty = tensors[a.tensor.index()].as_ref().expect("declared above");
            for (d, s) in a.subscripts.iter().enumerate() {
                let (mut low, mut high) = (s.constant, s.constant);
                for &(c, v) in &s.terms {
                    let top = resolved[v.index()].saturating_sub(1) as i64;
                    if c > 0 {
                        high = high.saturating_add(c.saturating_mul(top));
                    } else {
                        low = low.saturating_add(c.saturating_mul(top));
                    }
                }
                let empty = s.terms.iter().any(|&(_, v)| resolved[v.index()] == 0);
                if !empty && (low < 0 || high >= ty.shape[d] as i64) {
                    return Err(SemanticError::OutOfRange {
                        name: self.tensor_name(a.tensor).to_string(),
                        dim: d,
                        low,
                        high,
                        size: ty.shape[d],
                        rendered: self.caret(a),
                    });
                }
            }
        }
        Ok(Types {
            tensors: tensors.into_iter().map(|t| t.expect("every tensor is accessed")).collect(),
            sizes: resolved,
        })
    }
}
