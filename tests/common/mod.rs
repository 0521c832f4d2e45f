//! The independent dense reference shared by the kernel and differential tests: every index
//! variable enumerated, `sum`s placed where taco's rule puts them (`with_reductions`) and
//! evaluated by brute force, with no nmsparse code between the dense arrays and the result.

#![allow(dead_code)]

pub mod command;

use nmsparse::format::{CoordinateList, Duplicates, Format, Tensor, TensorError, Value};
use nmsparse::ir::id::Id;
use nmsparse::ir::notation::{Expr, ExprId, IndexNotation, parse};

/// The operands' dense arrays (row-major) and every tensor's shape, by tensor id.
pub struct Dense {
    pub shapes: Vec<Vec<usize>>,
    pub arrays: Vec<Option<Vec<f64>>>,
}

/// What the reference computes at one point of the index space: a value, or whether the
/// co-iteration produces a term there.
trait Evaluation {
    type Out: Copy;
    /// Operand `t`'s element at row-major position `at`.
    fn element(&self, t: usize, at: usize) -> Self::Out;
    fn literal(&self, v: f64) -> Self::Out;
    fn neg(&self, a: Self::Out) -> Self::Out;
    fn binary(&self, op: nmsparse::ir::notation::BinaryOp, a: Self::Out, b: Self::Out) -> Self::Out;
    /// An empty sum, and one more term of it.
    fn zero(&self) -> Self::Out;
    fn add(&self, a: Self::Out, b: Self::Out) -> Self::Out;
}

/// The values: `+ - * /` of the operands' dense arrays.
struct Values<'a>(&'a Dense);

impl Evaluation for Values<'_> {
    type Out = f64;
    fn element(&self, t: usize, at: usize) -> f64 {
        self.0.arrays[t].as_ref().expect("an operand")[at]
    }
    fn literal(&self, v: f64) -> f64 {
        v
    }
    fn neg(&self, a: f64) -> f64 {
        -a
    }
    fn binary(&self, op: nmsparse::ir::notation::BinaryOp, x: f64, y: f64) -> f64 {
        use nmsparse::ir::notation::BinaryOp;
        match op {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::Div => x / y,
        }
    }
    fn zero(&self) -> f64 {
        0.0
    }
    fn add(&self, a: f64, b: f64) -> f64 {
        a + b
    }
}

/// The structure (taco's semantics of sparse iteration): an operand is present where it
/// stores a component; a product or quotient where both sides are, a sum or difference where
/// either is, a constant everywhere, a reduction where any of its terms is.
struct Structure<'a>(&'a [Option<Vec<bool>>]);

impl Evaluation for Structure<'_> {
    type Out = bool;
    fn element(&self, t: usize, at: usize) -> bool {
        self.0[t].as_ref().is_none_or(|stored| stored[at])
    }
    fn literal(&self, _: f64) -> bool {
        true
    }
    fn neg(&self, a: bool) -> bool {
        a
    }
    fn binary(&self, op: nmsparse::ir::notation::BinaryOp, a: bool, b: bool) -> bool {
        use nmsparse::ir::notation::BinaryOp;
        match op {
            BinaryOp::Add | BinaryOp::Sub => a || b,
            BinaryOp::Mul | BinaryOp::Div => a && b,
        }
    }
    fn zero(&self) -> bool {
        false
    }
    fn add(&self, a: bool, b: bool) -> bool {
        a || b
    }
}

/// `e` at the index values `env`.
fn eval<E: Evaluation>(
    stmt: &IndexNotation,
    e: ExprId,
    env: &mut [usize],
    sizes: &[usize],
    shapes: &[Vec<usize>],
    how: &E,
) -> E::Out {
    match &stmt.exprs[e] {
        Expr::Access(a) => {
            let shape = &shapes[a.tensor.index()];
            let mut at = 0;
            for (k, t) in a.subscripts.iter().enumerate() {
                let c: i64 = t.terms.iter().map(|&(c, v)| c * env[v.index()] as i64).sum::<i64>() + t.constant;
                assert!((0..shape[k] as i64).contains(&c), "the reference reads inside the tensor");
                at = at * shape[k] + c as usize;
            }
            how.element(a.tensor.index(), at)
        }
        Expr::Literal(v) => how.literal(*v),
        Expr::Neg(a) => how.neg(eval(stmt, *a, env, sizes, shapes, how)),
        Expr::Binary(op, a, b) => {
            let x = eval(stmt, *a, env, sizes, shapes, how);
            let y = eval(stmt, *b, env, sizes, shapes, how);
            how.binary(*op, x, y)
        }
        Expr::Sum(v, body) => {
            let mut total = how.zero();
            for value in 0..sizes[v.index()] {
                env[v.index()] = value;
                total = how.add(total, eval(stmt, *body, env, sizes, shapes, how));
            }
            total
        }
    }
}

/// The dense reference of `expr`: each result element by brute force.
pub fn reference(expr: &str, d: &Dense) -> Vec<f64> {
    reference_sized(expr, d, &[])
}

/// The dense reference with the sizes of variables that appear only in compound subscripts
/// (`-d`); the others come from the shapes their plain subscripts index.
pub fn reference_sized(expr: &str, d: &Dense, given: &[(&str, usize)]) -> Vec<f64> {
    every_element(expr, &d.shapes, given, &Values(d))
}

/// Which elements of the result a sparse kernel stores: those where the co-iteration of the
/// operands' stored components (`stored`, row-major per tensor id; `None`: every element)
/// produces a term, whatever its value.
pub fn structure_sized(
    expr: &str,
    shapes: &[Vec<usize>],
    stored: &[Option<Vec<bool>>],
    given: &[(&str, usize)],
) -> Vec<bool> {
    every_element(expr, shapes, given, &Structure(stored))
}

/// Which elements of its row-major `shape` a tensor stores (explicit zeros included).
pub fn stored_elements<T: Value>(t: &Tensor<T>) -> Vec<bool> {
    let list = t.to_coordinates();
    let mut stored = vec![false; list.shape.iter().product()];
    for q in 0..list.values.len() {
        let at = (0..list.shape.len()).fold(0, |at, d| at * list.shape[d] + list.coords[d][q]);
        stored[at] = true;
    }
    stored
}

fn every_element<E: Evaluation>(expr: &str, shapes: &[Vec<usize>], given: &[(&str, usize)], how: &E) -> Vec<E::Out> {
    let stmt = parse(expr).unwrap().with_reductions();
    let mut sizes = vec![0; stmt.vars.len()];
    for a in stmt.accesses(stmt.rhs).into_iter().chain([&stmt.lhs]) {
        for (k, t) in a.subscripts.iter().enumerate() {
            if let Some(v) = t.as_var() {
                sizes[v.index()] = shapes[a.tensor.index()][k];
            }
        }
    }
    for &(name, n) in given {
        let v = stmt.vars.iter().find(|(_, v)| v.name == name).expect("a variable of the statement").0;
        sizes[v.index()] = n;
    }
    let out_shape = &shapes[stmt.lhs.tensor.index()];
    let len: usize = out_shape.iter().product();
    let free: Vec<usize> = stmt.free_vars().iter().map(|v| v.index()).collect();
    let mut env = vec![0; stmt.vars.len()];
    (0..len)
        .map(|at| {
            let mut rest = at;
            for (k, &v) in free.iter().enumerate().rev() {
                env[v] = rest % out_shape[k];
                rest /= out_shape[k];
            }
            // A result dimension larger than its variable's range ("valid" semantics: a
            // compound subscript narrowed it) has nothing past the range.
            if free.iter().any(|&v| env[v] >= sizes[v]) {
                return how.zero();
            }
            eval(&stmt, stmt.rhs, &mut env, &sizes, shapes, how)
        })
        .collect()
}

/// A generated operand in `format`: N:M formats take the data pruned into their pattern.
pub fn operand<T: Value>(list: &CoordinateList<T>, format: &Format) -> Result<Tensor<T>, TensorError> {
    if format.is_structured() {
        let whole = Tensor::from_coordinates(list, &Format::csf(list.shape.len()), Duplicates::Reject)?;
        Ok(whole.prune(format)?.0)
    } else {
        Tensor::from_coordinates(list, format, Duplicates::Reject)
    }
}

/// `t` with its values rounded to `f32` (small integers: exactly).
pub fn to_f32(t: &Tensor<f64>) -> Tensor<f32> {
    let mut list = t.to_coordinates();
    let values = list.values.drain(..).map(|v| v as f32).collect();
    let list = CoordinateList { shape: list.shape, coords: list.coords, values };
    Tensor::from_coordinates(&list, t.format(), Duplicates::Reject).unwrap()
}
