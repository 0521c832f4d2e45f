//! The independent dense reference shared by the kernel and differential tests: every index
//! variable enumerated, `sum`s placed where taco's rule puts them (`with_reductions`) and
//! evaluated by brute force, with no nmsparse code between the dense arrays and the result.

#![allow(dead_code)]

use nmsparse::format::{CoordinateList, Duplicates, Format, Tensor, TensorError, Value};
use nmsparse::ir::id::Id;
use nmsparse::ir::notation::{Expr, ExprId, IndexNotation, parse};

/// The operands' dense arrays (row-major) and every tensor's shape, by tensor id.
pub struct Dense {
    pub shapes: Vec<Vec<usize>>,
    pub arrays: Vec<Option<Vec<f64>>>,
}

/// `e` at the index values `env`.
fn eval(stmt: &IndexNotation, e: ExprId, env: &mut [usize], sizes: &[usize], d: &Dense) -> f64 {
    use nmsparse::ir::notation::BinaryOp;
    match &stmt.exprs[e] {
        Expr::Access(a) => {
            let (data, shape) = (d.arrays[a.tensor.index()].as_ref().expect("an operand"), &d.shapes[a.tensor.index()]);
            let mut at = 0;
            for (k, t) in a.subscripts.iter().enumerate() {
                let c: i64 = t.terms.iter().map(|&(c, v)| c * env[v.index()] as i64).sum::<i64>() + t.constant;
                assert!((0..shape[k] as i64).contains(&c), "the reference reads inside the tensor");
                at = at * shape[k] + c as usize;
            }
            data[at]
        }
        Expr::Literal(v) => *v,
        Expr::Neg(a) => -eval(stmt, *a, env, sizes, d),
        Expr::Binary(op, a, b) => {
            let (x, y) = (eval(stmt, *a, env, sizes, d), eval(stmt, *b, env, sizes, d));
            match op {
                BinaryOp::Add => x + y,
                BinaryOp::Sub => x - y,
                BinaryOp::Mul => x * y,
                BinaryOp::Div => x / y,
            }
        }
        Expr::Sum(v, body) => {
            let mut total = 0.0;
            for value in 0..sizes[v.index()] {
                env[v.index()] = value;
                total += eval(stmt, *body, env, sizes, d);
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
    let stmt = parse(expr).unwrap().with_reductions();
    let mut sizes = vec![0; stmt.vars.len()];
    for a in stmt.accesses(stmt.rhs).into_iter().chain([&stmt.lhs]) {
        for (k, t) in a.subscripts.iter().enumerate() {
            if let Some(v) = t.as_var() {
                sizes[v.index()] = d.shapes[a.tensor.index()][k];
            }
        }
    }
    for &(name, n) in given {
        let v = stmt.vars.iter().find(|(_, v)| v.name == name).expect("a variable of the statement").0;
        sizes[v.index()] = n;
    }
    let out_shape = &d.shapes[stmt.lhs.tensor.index()];
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
            eval(&stmt, stmt.rhs, &mut env, &sizes, d)
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
