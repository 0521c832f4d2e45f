//! The reference interpreter of the loop IR: slow, simple, and checked — every load and store is
//! bounds-checked and reported as an error rather than a crash, so it can judge the C back end.
//!
//! Arithmetic follows the C back end exactly: indices are 64-bit signed, a float constant takes
//! the type of the float operand it meets (`f32` stays `f32`), and nothing is fused.

use crate::args::{ArgumentError, ArrayData, Borrowed, check_arguments};
use crate::ir::{ArrayId, BinOp, Expr, Function, ScalarType, Stmt, UnOp, VarId};

/// Element `i` of `array` as the interpreter's value.
fn get(array: &ArrayData, i: usize) -> Scalar {
    match array {
        ArrayData::I32(v) => Scalar::Index(v[i] as i64),
        ArrayData::I64(v) => Scalar::Index(v[i]),
        ArrayData::U64(v) => Scalar::Index(v[i] as i64),
        ArrayData::F32(v) => Scalar::F32(v[i]),
        ArrayData::F64(v) => Scalar::F64(v[i]),
        ArrayData::Borrowed(Borrowed::U32(v)) => Scalar::Index(v[i] as i64),
        ArrayData::Borrowed(Borrowed::U64(v)) => Scalar::Index(v[i] as i64),
        ArrayData::Borrowed(Borrowed::F32(v)) => Scalar::F32(v[i]),
        ArrayData::Borrowed(Borrowed::F64(v)) => Scalar::F64(v[i]),
        ArrayData::Workspace(_) => unreachable!("a workspace is never indexed (it has no length)"),
    }
}

/// Stores `s` at `i` of `array`; false for a borrowed (read-only) array.
fn set(array: &mut ArrayData, i: usize, s: Scalar, accumulate: bool) -> bool {
    match array {
        ArrayData::I32(v) => v[i] = if accumulate { v[i] + s.index() as i32 } else { s.index() as i32 },
        ArrayData::I64(v) => v[i] = if accumulate { v[i] + s.index() } else { s.index() },
        ArrayData::U64(v) => v[i] = if accumulate { v[i] + s.index() as u64 } else { s.index() as u64 },
        ArrayData::F32(v) => v[i] = if accumulate { v[i] + s.f32() } else { s.f32() },
        ArrayData::F64(v) => v[i] = if accumulate { v[i] + s.f64() } else { s.f64() },
        ArrayData::Borrowed(_) | ArrayData::Workspace(_) => return false,
    }
    true
}

/// A value of the interpreter.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scalar {
    Index(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
}

impl Scalar {
    fn index(self) -> i64 {
        match self {
            Scalar::Index(v) => v,
            Scalar::F32(v) => v as i64,
            Scalar::F64(v) => v as i64,
            Scalar::Bool(b) => b as i64,
        }
    }
    fn f32(self) -> f32 {
        match self {
            Scalar::F32(v) => v,
            Scalar::F64(v) => v as f32,
            Scalar::Index(v) => v as f32,
            Scalar::Bool(b) => b as i64 as f32,
        }
    }
    fn f64(self) -> f64 {
        match self {
            Scalar::F64(v) => v,
            Scalar::F32(v) => v as f64,
            Scalar::Index(v) => v as f64,
            Scalar::Bool(b) => b as i64 as f64,
        }
    }
    fn truth(self) -> bool {
        match self {
            Scalar::Bool(b) => b,
            other => other.index() != 0,
        }
    }
}

/// A kernel that cannot run on the given arrays.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InterpError {
    /// The arguments do not match the parameters.
    #[error(transparent)]
    Arguments(#[from] ArgumentError),
    /// A load or store outside an array.
    #[error("index {index} is outside `{array}` (length {len})")]
    OutOfBounds {
        /// The array.
        array: String,
        /// The index.
        index: i64,
        /// Its length.
        len: usize,
    },
    /// An output given as a borrowed (read-only) array, or a store into an operand.
    #[error("array `{array}` is read-only here: outputs must be writable vectors, operands are never written")]
    ReadOnly {
        /// The array.
        array: String,
    },
    /// Integer division by zero.
    #[error("integer division by zero")]
    DivisionByZero,
    /// Trailing zeros of 0 (undefined in the C back end).
    #[error("trailing zero bits of 0")]
    TrailingZerosOfZero,
    /// A sparse workspace failed (out of memory, a key outside its extents).
    #[error("workspace: {0}")]
    Workspace(String),
}

enum Flow {
    Normal,
    Break,
}

struct Machine<'a, 'b> {
    f: &'a Function,
    arrays: &'a mut [ArrayData<'b>],
    vars: Vec<Scalar>,
}

/// Runs `f` on `arrays` (one per parameter, in order); output arrays are updated in place
/// and grown by `resize`.
pub fn interpret(f: &Function, arrays: &mut [ArrayData]) -> Result<(), InterpError> {
    check_arguments(f, arrays)?;
    let vars = f
        .vars
        .iter()
        .map(|(_, v)| match v.ty {
            ScalarType::Index => Scalar::Index(0),
            ScalarType::F32 => Scalar::F32(0.0),
            ScalarType::F64 => Scalar::F64(0.0),
            ScalarType::Bool => Scalar::Bool(false),
        })
        .collect();
    let mut m = Machine { f, arrays, vars };
    m.block(&f.body).map(|_| ())
}

impl Machine<'_, '_> {
    fn block(&mut self, body: &[Stmt]) -> Result<Flow, InterpError> {
        for s in body {
            if let Flow::Break = self.stmt(s)? {
                return Ok(Flow::Break);
            }
        }
        Ok(Flow::Normal)
    }

    fn set_var(&mut self, v: VarId, s: Scalar) {
        let ty = self.f.vars[v].ty;
        self.vars[nm_ir::id::Id::index(v)] = match ty {
            ScalarType::Index => Scalar::Index(s.index()),
            ScalarType::F32 => Scalar::F32(s.f32()),
            ScalarType::F64 => Scalar::F64(s.f64()),
            ScalarType::Bool => Scalar::Bool(s.truth()),
        };
    }

    fn slot(&self, a: ArrayId, index: i64) -> Result<usize, InterpError> {
        let len = self.arrays[nm_ir::id::Id::index(a)].len();
        if index < 0 || index as usize >= len {
            return Err(InterpError::OutOfBounds { array: self.f.arrays[a].name.clone(), index, len });
        }
        Ok(index as usize)
    }

    fn stmt(&mut self, s: &Stmt) -> Result<Flow, InterpError> {
        match s {
            Stmt::Decl(v, e) | Stmt::Assign(v, e) => {
                let value = self.eval(e)?;
                self.set_var(*v, value);
            }
            Stmt::Store { array, index, value, accumulate } => {
                let i = self.eval(index)?.index();
                let value = self.eval(value)?;
                let slot = self.slot(*array, i)?;
                if !set(&mut self.arrays[nm_ir::id::Id::index(*array)], slot, value, *accumulate) {
                    return Err(self.read_only(*array));
                }
            }
            Stmt::For { var, start, end, body, .. } => {
                let (start, end) = (self.eval(start)?.index(), self.eval(end)?.index());
                let mut i = start;
                while i < end {
                    self.set_var(*var, Scalar::Index(i));
                    if let Flow::Break = self.block(body)? {
                        break;
                    }
                    i += 1;
                }
            }
            Stmt::While { cond, body } => {
                while self.eval(cond)?.truth() {
                    if let Flow::Break = self.block(body)? {
                        break;
                    }
                }
            }
            Stmt::If { cond, then, otherwise } => {
                let branch = if self.eval(cond)?.truth() { then } else { otherwise };
                return self.block(branch);
            }
            Stmt::Break => return Ok(Flow::Break),
            Stmt::Insert { workspace, key, first, value } => {
                let (key, value) = (self.eval(key)?.index(), self.eval(value)?.f64());
                // The first coordinate must be the key's (C takes the bucket from it).
                let row = self.eval(first)?.index();
                let k = nm_ir::id::Id::index(*workspace);
                if let ArrayData::Workspace(w) = &self.arrays[k]
                    && !w.first_coordinate_is(key, row)
                {
                    return Err(InterpError::Workspace(format!("key {key} does not start with coordinate {row}")));
                }
                let ArrayData::Workspace(w) = &mut self.arrays[k] else { return Err(self.read_only(*workspace)) };
                w.insert_key(key, value).map_err(|e| InterpError::Workspace(e.to_string()))?;
            }
            Stmt::Finish { workspace } => {
                let targets = crate::args::Targets::of(self.f, *workspace)
                    .ok_or_else(|| InterpError::Workspace("a workspace without result arrays".into()))?;
                let k = nm_ir::id::Id::index(*workspace);
                let ArrayData::Workspace(mut w) = std::mem::replace(&mut self.arrays[k], ArrayData::I64(Vec::new()))
                else {
                    return Err(self.read_only(*workspace));
                };
                let arrays = &mut *self.arrays;
                let done = w.finish(&targets, |a, data| {
                    std::mem::replace(&mut arrays[nm_ir::id::Id::index(a)], data).into_owned()
                });
                self.arrays[k] = ArrayData::Workspace(w);
                done.map_err(|e| InterpError::Workspace(e.to_string()))?;
            }
            // A hint: only checked, so that a wrong prefetch index fails the tests.
            Stmt::Prefetch { array, index } => {
                let i = self.eval(index)?.index();
                self.slot(*array, i)?;
            }
            Stmt::PrefetchBucket { workspace, bucket, .. } => {
                let b = self.eval(bucket)?.index();
                let ArrayData::Workspace(w) = &self.arrays[nm_ir::id::Id::index(*workspace)] else {
                    return Err(self.read_only(*workspace));
                };
                let buckets = w.buckets();
                if b < 0 || b as usize >= buckets {
                    return Err(InterpError::OutOfBounds {
                        array: self.f.arrays[*workspace].name.clone(),
                        index: b,
                        len: buckets,
                    });
                }
            }
            Stmt::Resize { array, len } => {
                let n = self.eval(len)?.index().max(0) as usize;
                if !self.arrays[nm_ir::id::Id::index(*array)].resize(n) {
                    return Err(self.read_only(*array));
                }
            }
            Stmt::Written { array, len } => {
                let n = self.eval(len)?.index();
                let k = nm_ir::id::Id::index(*array);
                let have = self.arrays[k].len();
                if n < 0 || n as usize > have {
                    return Err(InterpError::OutOfBounds {
                        array: self.f.arrays[*array].name.clone(),
                        index: n,
                        len: have,
                    });
                }
                if !self.arrays[k].truncate(n as usize) {
                    return Err(self.read_only(*array));
                }
            }
            Stmt::Sort { array, start, end, scratch } => {
                let (start, end) = (self.eval(start)?.index(), self.eval(end)?.index());
                if start < end {
                    let (first, last) = (self.slot(*array, start)?, self.slot(*array, end - 1)?);
                    // The C sort may use all of `scratch`: it must be long enough.
                    self.slot(*scratch, end - start - 1)?;
                    if !self.arrays[nm_ir::id::Id::index(*array)].sort(first..last + 1) {
                        return Err(self.read_only(*array));
                    }
                }
            }
        }
        Ok(Flow::Normal)
    }

    fn read_only(&self, array: ArrayId) -> InterpError {
        InterpError::ReadOnly { array: self.f.arrays[array].name.clone() }
    }

    fn eval(&self, e: &Expr) -> Result<Scalar, InterpError> {
        Ok(match e {
            Expr::Int(v) => Scalar::Index(*v),
            Expr::Float(v) => Scalar::F64(*v),
            Expr::Var(v) => self.vars[nm_ir::id::Id::index(*v)],
            Expr::Len(a) => Scalar::Index(self.arrays[nm_ir::id::Id::index(*a)].len() as i64),
            Expr::Load(a, i) => {
                let i = self.eval(i)?.index();
                let slot = self.slot(*a, i)?;
                get(&self.arrays[nm_ir::id::Id::index(*a)], slot)
            }
            Expr::Unary(UnOp::Not, a) => Scalar::Bool(!self.eval(a)?.truth()),
            Expr::Unary(UnOp::ClearLowestBit, a) => {
                let v = self.eval(a)?.index();
                Scalar::Index(v & v.wrapping_sub(1))
            }
            Expr::Unary(UnOp::TrailingZeros, a) => match self.eval(a)?.index() {
                0 => return Err(InterpError::TrailingZerosOfZero),
                v => Scalar::Index(v.trailing_zeros() as i64),
            },
            Expr::Unary(UnOp::Neg, a) => match self.eval(a)? {
                Scalar::Index(v) => Scalar::Index(v.wrapping_neg()),
                Scalar::F32(v) => Scalar::F32(-v),
                Scalar::F64(v) => Scalar::F64(-v),
                Scalar::Bool(b) => Scalar::Index(-(b as i64)),
            },
            Expr::Binary(BinOp::And, a, b) => Scalar::Bool(self.eval(a)?.truth() && self.eval(b)?.truth()),
            Expr::Binary(BinOp::Or, a, b) => Scalar::Bool(self.eval(a)?.truth() || self.eval(b)?.truth()),
            Expr::Binary(op, a, b) => binary(*op, self.eval(a)?, self.eval(b)?, is_literal(a), is_literal(b))?,
            Expr::Select(c, a, b) => {
                if self.eval(c)?.truth() {
                    self.eval(a)?
                } else {
                    self.eval(b)?
                }
            }
        })
    }
}

fn is_literal(e: &Expr) -> bool {
    matches!(e, Expr::Float(_))
}

/// The type both operands are computed in: indices stay indices; an `f32` operand keeps the
/// operation in `f32` when the other is an index or a float constant; anything else is `f64`.
fn binary(op: BinOp, a: Scalar, b: Scalar, a_literal: bool, b_literal: bool) -> Result<Scalar, InterpError> {
    use Scalar::*;
    let kind = match (a, b) {
        (Index(_) | Bool(_), Index(_) | Bool(_)) => 0,
        (F32(_), F32(_)) | (F32(_), Index(_)) | (Index(_), F32(_)) => 1,
        (F32(_), F64(_)) if b_literal => 1,
        (F64(_), F32(_)) if a_literal => 1,
        _ => 2,
    };
    let cmp = |o: std::cmp::Ordering| -> Option<bool> {
        Some(match op {
            BinOp::Lt => o.is_lt(),
            BinOp::Le => o.is_le(),
            BinOp::Eq => o.is_eq(),
            BinOp::Ne => o.is_ne(),
            _ => return None,
        })
    };
    Ok(match kind {
        0 => {
            let (x, y) = (a.index(), b.index());
            if let Some(r) = cmp(x.cmp(&y)) {
                return Ok(Bool(r));
            }
            Index(match op {
                BinOp::Add => x.wrapping_add(y),
                BinOp::Sub => x.wrapping_sub(y),
                BinOp::Mul => x.wrapping_mul(y),
                BinOp::Div | BinOp::Rem if y == 0 => return Err(InterpError::DivisionByZero),
                BinOp::Div => x.wrapping_div(y),
                BinOp::Rem => x.wrapping_rem(y),
                BinOp::Min => x.min(y),
                BinOp::Max => x.max(y),
                BinOp::Shr => ((x as u64) >> (y as u64 & 63)) as i64,
                BinOp::Shl => ((x as u64) << (y as u64 & 63)) as i64,
                BinOp::BitAnd => x & y,
                BinOp::BitOr => x | y,
                _ => unreachable!("comparisons and logic handled above"),
            })
        }
        1 => {
            let (x, y) = (a.f32(), b.f32());
            if let Some(r) = x.partial_cmp(&y).and_then(cmp).or_else(|| matches!(op, BinOp::Ne).then_some(true)) {
                return Ok(Bool(r));
            }
            if matches!(op, BinOp::Lt | BinOp::Le | BinOp::Eq) {
                return Ok(Bool(false));
            }
            F32(float_op(op, x, y))
        }
        _ => {
            let (x, y) = (a.f64(), b.f64());
            if let Some(r) = x.partial_cmp(&y).and_then(cmp).or_else(|| matches!(op, BinOp::Ne).then_some(true)) {
                return Ok(Bool(r));
            }
            if matches!(op, BinOp::Lt | BinOp::Le | BinOp::Eq) {
                return Ok(Bool(false));
            }
            F64(float_op(op, x, y))
        }
    })
}

fn float_op<F: num_like::Float>(op: BinOp, x: F, y: F) -> F {
    match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div => x / y,
        BinOp::Rem => x % y,
        // C's fmin/fmax: a NaN operand yields the other.
        BinOp::Min => x.fmin(y),
        BinOp::Max => x.fmax(y),
        _ => unreachable!("comparisons and logic handled above"),
    }
}

mod num_like {
    use std::ops::{Add, Div, Mul, Rem, Sub};

    /// What `float_op` needs of `f32` and `f64`.
    pub trait Float:
        Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self> + Rem<Output = Self>
    {
        fn fmin(self, o: Self) -> Self;
        fn fmax(self, o: Self) -> Self;
    }
    impl Float for f32 {
        fn fmin(self, o: Self) -> Self {
            self.min(o)
        }
        fn fmax(self, o: Self) -> Self {
            self.max(o)
        }
    }
    impl Float for f64 {
        fn fmin(self, o: Self) -> Self {
            self.min(o)
        }
        fn fmax(self, o: Self) -> Self {
            self.max(o)
        }
    }
}
