//! The kernel argument ABI both back ends share: the arrays a kernel is called with
//! ([`ArrayData`], an operand's borrowed in place or an output the kernel grows), the check
//! that they match its parameters, how its row ranges may run on threads ([`Partition`]), and
//! the sparse workspaces it appends to ([`WorkspaceData`]). Below the lowering, the C back end
//! and the interpreter, which all take these types; it depends only on the loop IR.

use std::collections::TryReserveError;

use nm_runtime::memory::{Peer, place_apart};

use crate::ir::{ArrayId, ElemType, Function};

mod workspace;

pub use workspace::{Targets, WorkspaceData};

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
    /// A sparse workspace (see [`WorkspaceData`]).
    Workspace(crate::args::WorkspaceData),
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

    /// Where its elements start, for placing an array written in step with it (see
    /// [`nm_runtime::memory::place_apart`]).
    pub(crate) fn peer(&self) -> Peer {
        let start = match self {
            ArrayData::Borrowed(b) => b.as_ptr() as usize,
            owned => owned!(owned, v => v.as_ptr() as usize, borrowed => 0),
        };
        Peer { start, elem_size: self.elem().size() }
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

    /// Sorts `range`; false for a borrowed array.
    pub(crate) fn sort(&mut self, range: std::ops::Range<usize>) -> bool {
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

    /// Appends the first `n` elements of each part, in order (all of this array's type, all
    /// writable), copied on `threads` threads into this array's memory, placed apart from
    /// `peers` where it grows.
    pub(crate) fn append(
        &mut self,
        parts: &[(&ArrayData, usize)],
        threads: usize,
        peers: &[Peer],
    ) -> Result<(), TryReserveError> {
        macro_rules! append_as {
            ($variant:ident, $dest:expr) => {{
                let slices: Vec<&[_]> = parts
                    .iter()
                    .map(|(a, n)| match a {
                        ArrayData::$variant(v) => &v[..*n],
                        _ => unreachable!("appended arrays are writable and have one element type"),
                    })
                    .collect();
                append_slices($dest, &slices, threads, peers)
            }};
        }
        match self {
            ArrayData::I32(d) => append_as!(I32, d),
            ArrayData::I64(d) => append_as!(I64, d),
            ArrayData::U64(d) => append_as!(U64, d),
            ArrayData::F32(d) => append_as!(F32, d),
            ArrayData::F64(d) => append_as!(F64, d),
            ArrayData::Borrowed(_) | ArrayData::Workspace(_) => unreachable!("appended arrays are writable"),
        }
    }

    /// Asks Linux for transparent huge pages over this array's whole capacity (see
    /// [`nm_runtime::memory::advise_huge_pages`]).
    pub(crate) fn advise_huge_pages(&mut self) {
        owned!(self, v => nm_runtime::memory::advise_huge_pages(v), borrowed => ())
    }

    /// Reserves room for `extra` more elements, placed apart from `peers` where it grows, or
    /// says memory ran out (a borrowed array never grows: the caller checks
    /// [`ArrayData::is_writable`]).
    pub(crate) fn try_reserve(&mut self, extra: usize, peers: &[Peer]) -> Result<(), TryReserveError> {
        owned!(self, v => try_reserve_placed(v, extra, peers), borrowed => unreachable!("only outputs grow; check_arguments makes them writable"))
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
    pub(crate) fn reserve_unwritten(&mut self, kept: usize, n: usize, peers: &[Peer]) -> Result<(), TryReserveError> {
        owned!(self, v => reserve_unwritten(v, kept, n, peers), borrowed => unreachable!("only outputs grow; check_arguments makes them writable"))
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
fn reserve_unwritten<T: Copy>(v: &mut Vec<T>, kept: usize, n: usize, peers: &[Peer]) -> Result<(), TryReserveError> {
    use std::mem::{ManuallyDrop, MaybeUninit};
    let len = v.len();
    let mut old = ManuallyDrop::new(std::mem::take(v));
    // SAFETY: `MaybeUninit<T>` has `T`'s size and alignment, and the allocation, length and
    // capacity are the vector's own (which `ManuallyDrop` no longer frees).
    let mut raw: Vec<MaybeUninit<T>> = unsafe { Vec::from_raw_parts(old.as_mut_ptr().cast(), len, old.capacity()) };
    let keep = kept.clamp(len, raw.capacity());
    // SAFETY: within the capacity; `MaybeUninit` elements need no initialisation.
    unsafe { raw.set_len(keep) };
    let reserved = try_reserve_placed(&mut raw, n.saturating_sub(keep), peers);
    let mut raw = ManuallyDrop::new(raw);
    // SAFETY: the same allocation back as `T`s (same layout), claiming only the `len`
    // elements that were initialised before.
    *v = unsafe { Vec::from_raw_parts(raw.as_mut_ptr().cast(), len, raw.capacity()) };
    reserved
}

/// [`Vec::try_reserve`], then [`place_apart`] from `peers`.
fn try_reserve_placed<T: Copy>(v: &mut Vec<T>, extra: usize, peers: &[Peer]) -> Result<(), TryReserveError> {
    v.try_reserve(extra)?;
    place_apart(v, peers);
    Ok(())
}

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

/// `parts` appended to `dest`, written straight into its spare memory by `threads` threads,
/// each a contiguous run of parts of about equal size (a row-range run's result is joined this
/// way: sequential, the copy took as long as luxembourg's A·Aᵀ itself).
fn append_slices<T: Copy + Send + Sync>(
    dest: &mut Vec<T>,
    parts: &[&[T]],
    threads: usize,
    peers: &[Peer],
) -> Result<(), TryReserveError> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let kept = dest.len();
    try_reserve_placed(dest, total, peers)?;
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
    unsafe { dest.set_len(kept + total) };
    Ok(())
}

/// Arguments that do not match a kernel's parameters.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgumentError {
    /// Not one array per parameter.
    #[error("kernel `{kernel}` takes {expected} arrays, {given} given")]
    Count {
        /// The kernel.
        kernel: String,
        /// Parameters.
        expected: usize,
        /// Arguments.
        given: usize,
    },
    /// An argument of the wrong element type.
    #[error("array `{array}` is declared {expected:?} but {given:?} was given")]
    Type {
        /// The parameter.
        array: String,
        /// Declared type.
        expected: ElemType,
        /// Given type.
        given: ElemType,
    },
    /// An output given as a borrowed (read-only) array.
    #[error("array `{array}` is read-only here: outputs must be writable vectors, operands are never written")]
    ReadOnly {
        /// The array.
        array: String,
    },
    /// Row bounds (see [`Partition`]) without their four elements: the kernel reads each.
    #[error("the row bounds `{array}` hold {len} elements, 4 expected (first row, end row, whole run, first entry)")]
    Bounds {
        /// The bounds parameter.
        array: String,
        /// Its elements.
        len: usize,
    },
    /// A row range told to append from an entry past what the result's array holds (see
    /// [`Partition`]): the entries before it would count as written.
    #[error("a row range starts at entry {first} of `{array}`, which holds {len}")]
    FirstEntry {
        /// The array the kernel only appends to.
        array: String,
        /// Where the range was told to start.
        first: i64,
        /// Its elements.
        len: usize,
    },
}

/// One array per parameter, each of the declared element type (both back ends check this
/// before running anything).
pub fn check_arguments(f: &Function, arrays: &[ArrayData]) -> Result<(), ArgumentError> {
    if arrays.len() != f.arrays.len() {
        return Err(ArgumentError::Count { kernel: f.name.clone(), expected: f.arrays.len(), given: arrays.len() });
    }
    for ((_, decl), data) in f.arrays.iter().zip(arrays.iter()) {
        if decl.elem != data.elem() {
            return Err(ArgumentError::Type { array: decl.name.clone(), expected: decl.elem, given: data.elem() });
        }
        if decl.output && !data.is_writable() {
            return Err(ArgumentError::ReadOnly { array: decl.name.clone() });
        }
    }
    Ok(())
}

/// A kernel whose outermost loop is `for i in bounds[0]..bounds[1]` over a dense coordinate
/// that names disjoint parts of the result: disjoint rows of a dense result, or the rows of a
/// CSR-like result (dense, then compressed) — each row range can run on its own thread. For a
/// sparse result every row in the range stores its `pos` entry, and the range appends its
/// entries from position `bounds[3]`: a range appended to the result in place starts where the
/// ranges before it ended; others assemble into `crd`/values arrays of their own from zero,
/// concatenated after with their `pos` shifted. Or a reduction into a dense result (see
/// [`Reduction`]), whose ranges add into the same elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    /// Coordinates of the outermost loop.
    pub extent: usize,
    /// The parameter `[first row, end row, whole run, first entry]`.
    pub bounds: ArrayId,
    /// A sparse result's `pos`, `crd` and values (`None`: a dense result).
    pub rows: Option<(ArrayId, ArrayId, ArrayId)>,
    /// The `pos` of an operand's level below the outer loop (a CSR operand's rows), where one
    /// is read: the runner cuts the rows into ranges of about equal entries and rows, rather
    /// than equal rows, so that the range holding a long row is not the one every thread
    /// waits for (BENCHMARKS.md, "Two threads"). `None`: equal rows.
    pub weights: Option<ArrayId>,
    /// Whether the schedule put the outermost loop on CPU threads (`parallelize`): its row
    /// ranges are what runs on them, so a caller that was given no thread count uses every core.
    pub scheduled: bool,
    /// How ranges combine that add into the same elements of a dense result (the outer loop is
    /// a reduction: `y(i) = A(i,j)·x(j)` with A in CSC, a dot product); `None`: ranges write
    /// disjoint rows. The kernel zeroes the result only when `bounds[2]` is nonzero (a whole
    /// run); a caller running ranges prepares the result as the kind says.
    pub reduction: Option<Reduction>,
}

/// The ranges of a [`Partition`] add into the same elements of the dense result `values`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reduction {
    /// The result's values.
    pub values: ArrayId,
    /// How the threads' sums meet.
    pub kind: ReductionKind,
}

/// How the threads running a reduction's ranges add into the result: the planner's decision
/// (see [`nm_ir::plan::RowPlan`]), which the runner carries out.
pub use nm_ir::plan::ReductionKind;
