//! The reference interpreter of the loop IR: slow, simple, and checked — every load and store is
//! bounds-checked and reported as an error rather than a crash, so it can judge the C back end.
//!
//! Arithmetic follows the C back end exactly: indices are 64-bit signed, a float constant takes
//! the type of the float operand it meets (`f32` stays `f32`), and nothing is fused.

use std::collections::TryReserveError;

use crate::ir::{ArrayId, BinOp, ElemType, Expr, Function, ScalarType, Stmt, UnOp, VarId};

/// The contents of one array argument: a vector the kernel may write and grow, or an
/// operand's array borrowed from its tensor and only read (never copied).
#[derive(Clone, Debug, PartialEq)]
pub enum ArrayData<'a> {
    /// 32-bit signed indices.
    I32(Vec<i32>),
    /// 64-bit signed indices.
    I64(Vec<i64>),
    /// 64-bit unsigned words.
    U64(Vec<u64>),
    /// 32-bit values.
    F32(Vec<f32>),
    /// 64-bit values.
    F64(Vec<f64>),
    /// An operand's array, read in place.
    Borrowed(Borrowed<'a>),
    /// A sparse workspace (see [`crate::ism`]).
    Workspace(crate::ism::WorkspaceData),
}

/// An operand's array as its tensor stores it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Borrowed<'a> {
    /// 32-bit positions or coordinates.
    U32(&'a [u32]),
    /// 64-bit positions or coordinates, or packed metadata.
    U64(&'a [u64]),
    /// 32-bit values.
    F32(&'a [f32]),
    /// 64-bit values.
    F64(&'a [f64]),
}

impl<'a> From<&'a nm_format::Indices> for Borrowed<'a> {
    fn from(i: &'a nm_format::Indices) -> Self {
        i.view().into()
    }
}

impl<'a> From<nm_format::IndicesView<'a>> for Borrowed<'a> {
    fn from(i: nm_format::IndicesView<'a>) -> Self {
        match i {
            nm_format::IndicesView::U32(v) => Borrowed::U32(v),
            nm_format::IndicesView::U64(v) => Borrowed::U64(v),
        }
    }
}

impl Borrowed<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Borrowed::U32(v) => v.len(),
            Borrowed::U64(v) => v.len(),
            Borrowed::F32(v) => v.len(),
            Borrowed::F64(v) => v.len(),
        }
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first element, for the C back end.
    pub(crate) fn as_ptr(&self) -> *const libc::c_void {
        match self {
            Borrowed::U32(v) => v.as_ptr().cast(),
            Borrowed::U64(v) => v.as_ptr().cast(),
            Borrowed::F32(v) => v.as_ptr().cast(),
            Borrowed::F64(v) => v.as_ptr().cast(),
        }
    }
}

/// `$body` with `$v` bound to the vector of whichever owned variant `$data` is; `$borrowed`
/// for a borrowed array.
macro_rules! owned {
    ($data:expr, $v:ident => $body:expr, borrowed => $borrowed:expr) => {
        match $data {
            ArrayData::I32($v) => $body,
            ArrayData::I64($v) => $body,
            ArrayData::U64($v) => $body,
            ArrayData::F32($v) => $body,
            ArrayData::F64($v) => $body,
            ArrayData::Borrowed(_) | ArrayData::Workspace(_) => $borrowed,
        }
    };
}

impl ArrayData<'_> {
    /// An empty (writable) array of `elem`s; an empty borrowed one for `U32`, which only
    /// operands have.
    pub fn empty(elem: ElemType) -> Self {
        match elem {
            ElemType::I32 => ArrayData::I32(Vec::new()),
            ElemType::I64 => ArrayData::I64(Vec::new()),
            ElemType::U32 => ArrayData::Borrowed(Borrowed::U32(&[])),
            ElemType::U64 => ArrayData::U64(Vec::new()),
            ElemType::F32 => ArrayData::F32(Vec::new()),
            ElemType::F64 => ArrayData::F64(Vec::new()),
        }
    }

    /// The element type.
    pub fn elem(&self) -> ElemType {
        match self {
            ArrayData::I32(_) => ElemType::I32,
            ArrayData::I64(_) => ElemType::I64,
            ArrayData::U64(_) | ArrayData::Borrowed(Borrowed::U64(_)) => ElemType::U64,
            ArrayData::F32(_) | ArrayData::Borrowed(Borrowed::F32(_)) => ElemType::F32,
            ArrayData::F64(_) | ArrayData::Borrowed(Borrowed::F64(_)) => ElemType::F64,
            ArrayData::Borrowed(Borrowed::U32(_)) => ElemType::U32,
            ArrayData::Workspace(w) => w.elem(),
        }
    }

    /// Whether the kernel may write it.
    pub fn is_writable(&self) -> bool {
        !matches!(self, ArrayData::Borrowed(_))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ArrayData::Borrowed(b) => b.len(),
            owned => owned!(owned, v => v.len(), borrowed => 0),
        }
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, i: usize) -> Scalar {
        match self {
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

    /// Stores `s` at `i`; false for a borrowed (read-only) array.
    fn set(&mut self, i: usize, s: Scalar, accumulate: bool) -> bool {
        match self {
            ArrayData::I32(v) => v[i] = if accumulate { v[i] + s.index() as i32 } else { s.index() as i32 },
            ArrayData::I64(v) => v[i] = if accumulate { v[i] + s.index() } else { s.index() },
            ArrayData::U64(v) => v[i] = if accumulate { v[i] + s.index() as u64 } else { s.index() as u64 },
            ArrayData::F32(v) => v[i] = if accumulate { v[i] + s.f32() } else { s.f32() },
            ArrayData::F64(v) => v[i] = if accumulate { v[i] + s.f64() } else { s.f64() },
            ArrayData::Borrowed(_) | ArrayData::Workspace(_) => return false,
        }
        true
    }

    /// Sorts `range`; false for a borrowed array.
    fn sort(&mut self, range: std::ops::Range<usize>) -> bool {
        match self {
            ArrayData::I32(v) => v[range].sort_unstable(),
            ArrayData::I64(v) => v[range].sort_unstable(),
            ArrayData::U64(v) => v[range].sort_unstable(),
            ArrayData::F32(v) => v[range].sort_unstable_by(f32::total_cmp),
            ArrayData::F64(v) => v[range].sort_unstable_by(f64::total_cmp),
            ArrayData::Borrowed(_) | ArrayData::Workspace(_) => return false,
        }
        true
    }

    /// Replaces the contents with the first `n` elements of each part, in order (all of this
    /// array's type, all writable), copied on `threads` threads into this array's memory.
    pub(crate) fn join(&mut self, parts: &[(&ArrayData, usize)], threads: usize) -> Result<(), TryReserveError> {
        macro_rules! join_as {
            ($variant:ident, $dest:expr) => {{
                let slices: Vec<&[_]> = parts
                    .iter()
                    .map(|(a, n)| match a {
                        ArrayData::$variant(v) => &v[..*n],
                        _ => unreachable!("joined arrays are writable and have one element type"),
                    })
                    .collect();
                join_slices($dest, &slices, threads)
            }};
        }
        match self {
            ArrayData::I32(d) => join_as!(I32, d),
            ArrayData::I64(d) => join_as!(I64, d),
            ArrayData::U64(d) => join_as!(U64, d),
            ArrayData::F32(d) => join_as!(F32, d),
            ArrayData::F64(d) => join_as!(F64, d),
            ArrayData::Borrowed(_) | ArrayData::Workspace(_) => unreachable!("joined arrays are writable"),
        }
    }

    /// Asks Linux for transparent huge pages over this array's whole capacity (see
    /// [`nm_runtime::memory::advise_huge_pages`]).
    pub(crate) fn advise_huge_pages(&mut self) {
        owned!(self, v => nm_runtime::memory::advise_huge_pages(v), borrowed => ())
    }

    /// Reserves room for `extra` more elements, or says memory ran out (a borrowed array never
    /// grows: the caller checks [`ArrayData::is_writable`]).
    pub(crate) fn try_reserve(&mut self, extra: usize) -> Result<(), std::collections::TryReserveError> {
        owned!(self, v => v.try_reserve(extra), borrowed => unreachable!("only outputs grow; check_arguments makes them writable"))
    }

    /// Elements it has room for without reallocating (its length when borrowed).
    pub(crate) fn capacity(&self) -> usize {
        match self {
            ArrayData::Borrowed(b) => b.len(),
            owned => owned!(owned, v => v.capacity(), borrowed => 0),
        }
    }

    /// The array's own vector, if it has one (a borrowed array or a workspace gives an empty
    /// one of its type).
    pub(crate) fn into_owned(self) -> ArrayData<'static> {
        match self {
            ArrayData::I32(v) => ArrayData::I32(v),
            ArrayData::I64(v) => ArrayData::I64(v),
            ArrayData::U64(v) => ArrayData::U64(v),
            ArrayData::F32(v) => ArrayData::F32(v),
            ArrayData::F64(v) => ArrayData::F64(v),
            other => ArrayData::empty(other.elem()),
        }
    }

    /// Sets every element of a writable array to zero (a borrowed one is left as it is).
    pub(crate) fn fill_zero(&mut self) {
        owned!(self, v => v.fill(Default::default()), borrowed => ())
    }

    /// Sets each element to the sum of the same element of `parts` (all of this array's type
    /// and length, all writable), added in the order of `parts`, on `threads` threads.
    pub(crate) fn set_sum(&mut self, parts: &[&ArrayData], threads: usize) {
        macro_rules! sum_as {
            ($variant:ident, $dest:expr) => {{
                let slices: Vec<&[_]> = parts
                    .iter()
                    .map(|a| match a {
                        ArrayData::$variant(v) => &v[..],
                        _ => unreachable!("summed arrays are writable and have one element type"),
                    })
                    .collect();
                sum_slices($dest, &slices, threads)
            }};
        }
        match self {
            ArrayData::I32(d) => sum_as!(I32, d),
            ArrayData::I64(d) => sum_as!(I64, d),
            ArrayData::U64(d) => sum_as!(U64, d),
            ArrayData::F32(d) => sum_as!(F32, d),
            ArrayData::F64(d) => sum_as!(F64, d),
            ArrayData::Borrowed(_) | ArrayData::Workspace(_) => unreachable!("a sum goes into a writable array"),
        }
    }

    /// Empties a writable array, keeping its memory (a borrowed one is left as it is).
    pub fn clear(&mut self) {
        owned!(self, v => v.clear(), borrowed => ())
    }

    /// Room for `n` elements (never fewer than it has) for a kernel that only appends: the
    /// memory of the first `kept` elements is kept as it is (the kernel may have written them
    /// without the vector counting them), the rest is not zeroed, and the vector's length is
    /// unchanged — the caller claims what the kernel wrote with [`ArrayData::claim_written`].
    pub(crate) fn reserve_unwritten(&mut self, kept: usize, n: usize) -> Result<(), TryReserveError> {
        owned!(self, v => reserve_unwritten(v, kept, n), borrowed => unreachable!("only outputs grow; check_arguments makes them writable"))
    }

    /// Sets the length to `n` (false, and nothing done, beyond the capacity or for a borrowed
    /// array).
    ///
    /// # Safety
    /// The first `n` elements are initialised (a kernel wrote them).
    pub(crate) unsafe fn claim_written(&mut self, n: usize) -> bool {
        owned!(self, v => {
            if n > v.capacity() {
                return false;
            }
            // SAFETY: within capacity; initialised by the caller's contract.
            unsafe { v.set_len(n) };
            true
        }, borrowed => false)
    }

    /// Shortens to `n` elements; false for a borrowed array.
    pub(crate) fn truncate(&mut self, n: usize) -> bool {
        owned!(self, v => { v.truncate(n); true }, borrowed => false)
    }

    /// Grows to `n` elements (never shrinks), new ones zero; false for a borrowed array.
    pub(crate) fn resize(&mut self, n: usize) -> bool {
        owned!(self, v => { v.resize(n.max(v.len()), Default::default()); true }, borrowed => false)
    }
}

/// [`ArrayData::reserve_unwritten`] on a vector: its allocation viewed as `MaybeUninit`
/// elements for the reallocation, so that what a kernel wrote past the vector's length is
/// copied along without the vector ever claiming it.
fn reserve_unwritten<T: Copy>(v: &mut Vec<T>, kept: usize, n: usize) -> Result<(), TryReserveError> {
    use std::mem::{ManuallyDrop, MaybeUninit};
    let len = v.len();
    let mut old = ManuallyDrop::new(std::mem::take(v));
    // SAFETY: `MaybeUninit<T>` has `T`'s size and alignment, and the allocation, length and
    // capacity are the vector's own (which `ManuallyDrop` no longer frees).
    let mut raw: Vec<MaybeUninit<T>> = unsafe { Vec::from_raw_parts(old.as_mut_ptr().cast(), len, old.capacity()) };
    let keep = kept.clamp(len, raw.capacity());
    // SAFETY: within the capacity; `MaybeUninit` elements need no initialisation.
    unsafe { raw.set_len(keep) };
    let reserved = raw.try_reserve(n.saturating_sub(keep));
    let mut raw = ManuallyDrop::new(raw);
    // SAFETY: the same allocation back as `T`s (same layout), claiming only the `len`
    // elements that were initialised before.
    *v = unsafe { Vec::from_raw_parts(raw.as_mut_ptr().cast(), len, raw.capacity()) };
    reserved
}

/// `dest` := the concatenation of `parts`, written straight into `dest`'s spare memory by
/// `threads` threads, each a contiguous run of parts of about equal size (a row-range run's
/// result is joined this way: sequential, the copy took as long as luxembourg's A·Aᵀ itself).
/// `dest[q] = parts[0][q] + parts[1][q] + ...` in that order, in chunks on `threads` threads.
fn sum_slices<T: Copy + Default + Send + Sync + std::ops::Add<Output = T>>(
    dest: &mut [T],
    parts: &[&[T]],
    threads: usize,
) {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Chunks of 4096 elements: long enough to stream, enough of them to share.
    let chunks: Vec<Mutex<(usize, &mut [T])>> =
        dest.chunks_mut(4096).enumerate().map(|(c, d)| Mutex::new((c * 4096, d))).collect();
    let next = AtomicUsize::new(0);
    nm_runtime::workers::run_on(threads.min(chunks.len()).max(1), || {
        while let Some(chunk) = chunks.get(next.fetch_add(1, Ordering::Relaxed)) {
            let mut chunk = chunk.lock().unwrap_or_else(|e| e.into_inner());
            let (first, to) = &mut *chunk;
            for (q, t) in to.iter_mut().enumerate() {
                *t = parts.iter().fold(T::default(), |sum, p| sum + p[*first + q]);
            }
        }
    });
}

fn join_slices<T: Copy + Send + Sync>(
    dest: &mut Vec<T>,
    parts: &[&[T]],
    threads: usize,
) -> Result<(), TryReserveError> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    dest.clear();
    dest.try_reserve(total)?;
    let mut spare = &mut dest.spare_capacity_mut()[..total];
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = threads.max(1);
    // Per thread: (where to write, what to copy) for each of its parts.
    type Copies<'a, T> = Vec<(&'a mut [std::mem::MaybeUninit<T>], &'a [T])>;
    let mut groups: Vec<Copies<'_, T>> = (0..threads).map(|_| Vec::new()).collect();
    let mut start = 0;
    for part in parts {
        let (head, tail) = spare.split_at_mut(part.len());
        // Empty parts past the last element (ranges with nothing to join) go to the last group.
        groups[(start * threads / total.max(1)).min(threads - 1)].push((head, part));
        spare = tail;
        start += part.len();
    }
    let groups: Vec<Mutex<Copies<'_, T>>> = groups.into_iter().map(Mutex::new).collect();
    let (next, written) = (AtomicUsize::new(0), AtomicUsize::new(0));
    nm_runtime::workers::run_on(threads, || {
        // Group by group until none is left (fewer threads than groups may run).
        while let Some(group) = groups.get(next.fetch_add(1, Ordering::Relaxed)) {
            for (to, from) in std::mem::take(&mut *group.lock().unwrap_or_else(|e| e.into_inner())) {
                for (t, f) in to.iter_mut().zip(from) {
                    t.write(*f);
                }
                written.fetch_add(from.len(), Ordering::Relaxed);
            }
        }
    });
    // Each group is taken once (`take`), so the count is what was written.
    assert_eq!(written.into_inner(), total, "every part copied");
    // SAFETY: the parts' lengths sum to `total`, the parts cover the first `total` spare
    // elements in order, and every part was copied (asserted).
    unsafe { dest.set_len(total) };
    Ok(())
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
    #[error("kernel `{kernel}` takes {expected} arrays, {given} given")]
    ArgumentCount {
        /// The kernel.
        kernel: String,
        /// Parameters.
        expected: usize,
        /// Arguments.
        given: usize,
    },
    /// An argument of the wrong element type.
    #[error("array `{array}` is declared {expected:?} but {given:?} was given")]
    ArgumentType {
        /// The parameter.
        array: String,
        /// Declared type.
        expected: ElemType,
        /// Given type.
        given: ElemType,
    },
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

/// One array per parameter, each of the declared element type (both back ends check this
/// before running anything).
pub fn check_arguments(f: &Function, arrays: &[ArrayData]) -> Result<(), InterpError> {
    if arrays.len() != f.arrays.len() {
        return Err(InterpError::ArgumentCount {
            kernel: f.name.clone(),
            expected: f.arrays.len(),
            given: arrays.len(),
        });
    }
    for ((_, decl), data) in f.arrays.iter().zip(arrays.iter()) {
        if decl.elem != data.elem() {
            return Err(InterpError::ArgumentType {
                array: decl.name.clone(),
                expected: decl.elem,
                given: data.elem(),
            });
        }
        if decl.output && !data.is_writable() {
            return Err(InterpError::ReadOnly { array: decl.name.clone() });
        }
    }
    Ok(())
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
                if !self.arrays[nm_ir::id::Id::index(*array)].set(slot, value, *accumulate) {
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
                let targets = crate::ism::Targets::of(self.f, *workspace)
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
                self.arrays[nm_ir::id::Id::index(*a)].get(slot)
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
