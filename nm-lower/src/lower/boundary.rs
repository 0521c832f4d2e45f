//! The kernel boundary: the index widths a kernel is lowered for, its arguments (operands
//! borrowed in place, checked against what they were lowered for), and its result read back
//! as a tensor.

use super::Lowered;
use crate::args::{ArrayData, Borrowed};
use crate::ir::{ElemType, Role};
use nm_format::{Format, LevelKind};
use nm_ir::id::Id;

/// The index widths a kernel is specialized for. Kernels read operands in place, as their
/// tensors store them (nm-format keeps 32-bit positions and coordinates whenever the entries
/// fit, else 64-bit), so a kernel is compiled for the widths it will be given. Lists only the
/// 64-bit arrays: the default is all 32-bit, and equal widths compare equal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct IndexWidths {
    /// (tensor, level, whether `pos` is 64-bit, whether `crd` (a band's `first`) is 64-bit),
    /// only where one is.
    wide: Vec<(String, usize, bool, bool)>,
}

impl IndexWidths {
    /// The widths of `tensors`' arrays (by name).
    pub fn of<T: nm_format::Value>(tensors: &[(&str, &nm_format::Tensor<T>)]) -> Self {
        let views: Vec<nm_format::TensorView<T>> = tensors.iter().map(|(_, t)| t.view()).collect();
        let named: Vec<(&str, &nm_format::TensorView<T>)> = tensors.iter().map(|(n, _)| *n).zip(&views).collect();
        Self::of_views(&named)
    }

    /// The widths of `tensors`' arrays (by name), read in place.
    pub fn of_views<T: nm_format::Value>(tensors: &[(&str, &nm_format::TensorView<T>)]) -> Self {
        use nm_format::LevelView;
        let mut wide = Vec::new();
        for (name, t) in tensors {
            for (l, level) in t.levels().iter().enumerate() {
                let (pos, crd) = match level {
                    LevelView::Compressed { pos, crd } => (pos.width() == 8, crd.width() == 8),
                    LevelView::Singleton { crd } => (false, crd.width() == 8),
                    LevelView::Band { pos, first } => (pos.width() == 8, first.width() == 8),
                    _ => (false, false),
                };
                if pos || crd {
                    wide.push((name.to_string(), l, pos, crd));
                }
            }
        }
        IndexWidths { wide }
    }

    /// The element types of `tensor`'s `pos` and `crd` at `level`.
    pub fn get(&self, tensor: &str, level: usize) -> (ElemType, ElemType) {
        let elem = |wide: bool| if wide { ElemType::U64 } else { ElemType::U32 };
        match self.wide.iter().find(|(t, l, ..)| t == tensor && *l == level) {
            Some(&(_, _, pos, crd)) => (elem(pos), elem(crd)),
            None => (ElemType::U32, ElemType::U32),
        }
    }
}

/// A value type kernels are built for: `f32` or `f64` (lower with [`KernelValue::ELEM`]).
pub trait KernelValue: nm_format::Value {
    /// The element type of its value arrays.
    const ELEM: ElemType;
    /// Its values as a writable argument.
    fn wrap(values: Vec<Self>) -> ArrayData<'static>;
    /// An operand's values as a read-only argument (borrowed, not copied).
    fn borrow(values: &[Self]) -> ArrayData<'_>;
    /// Its values back from an argument.
    fn unwrap<'a>(data: &'a ArrayData) -> Option<&'a [Self]>;
    /// An output's values, moved out (`None` for another type or a borrowed input).
    fn take(data: &mut ArrayData) -> Option<Vec<Self>>;
}

/// [`KernelValue`] for a value type, by its variants of [`ElemType`], [`ArrayData`] and
/// [`Borrowed`] (all named alike).
macro_rules! kernel_value {
    ($t:ty, $variant:ident) => {
        impl KernelValue for $t {
            const ELEM: ElemType = ElemType::$variant;
            fn wrap(values: Vec<Self>) -> ArrayData<'static> {
                ArrayData::$variant(values)
            }
            fn borrow(values: &[Self]) -> ArrayData<'_> {
                ArrayData::Borrowed(Borrowed::$variant(values))
            }
            fn unwrap<'a>(data: &'a ArrayData) -> Option<&'a [Self]> {
                match data {
                    ArrayData::$variant(v) => Some(v),
                    ArrayData::Borrowed(Borrowed::$variant(v)) => Some(v),
                    _ => None,
                }
            }
            fn take(data: &mut ArrayData) -> Option<Vec<Self>> {
                match data {
                    ArrayData::$variant(v) => Some(std::mem::take(v)),
                    _ => None,
                }
            }
        }
    };
}

kernel_value!(f32, F32);
kernel_value!(f64, F64);

/// The kernel's arguments: each tensor's arrays in parameter order (`tensors[t]` for tensor
/// id `t`). Operands are borrowed in place, never copied or converted (the kernel must have
/// been lowered for their [`IndexWidths`]; a mismatch is an `ArgumentType` error when it
/// runs). A dense result's `result_len` values start zeroed, a sparse result's arrays empty,
/// grown by the kernel. A dense result larger than the memory available is an error, not an
/// abort.
pub fn arguments<'a, T: KernelValue>(
    lowered: &Lowered,
    tensors: &[Option<&'a nm_format::Tensor<T>>],
    result_len: usize,
) -> Result<Vec<ArrayData<'a>>, nm_format::TensorError> {
    let views: Vec<Option<nm_format::TensorView<'a, T>>> = tensors.iter().map(|t| t.map(|t| t.view())).collect();
    let views: Vec<Option<&nm_format::TensorView<'a, T>>> = views.iter().map(Option::as_ref).collect();
    view_arguments(lowered, &views, result_len)
}

/// [`arguments`] of operands read in place from arrays someone else owns.
pub fn view_arguments<'a, T: KernelValue>(
    lowered: &Lowered,
    tensors: &[Option<&nm_format::TensorView<'a, T>>],
    result_len: usize,
) -> Result<Vec<ArrayData<'a>>, nm_format::TensorError> {
    use nm_format::LevelView;
    // Kernels trust the arrays they are given: every operand must be what it was lowered for.
    for (t, super::TensorDecl { name, shape, format }) in lowered.tensors.iter().enumerate() {
        if let Some(Some(x)) = tensors.get(t) {
            check_operand(name, shape, format, x.shape(), x.format())?;
        }
    }
    let result_len = if lowered.sparse_result() { 0 } else { result_len };
    nm_runtime::memory::ensure_available(result_len as u128 * std::mem::size_of::<T>() as u128, || {
        format!("a dense result of {result_len} values")
    })?;
    lowered
        .function
        .arrays
        .iter()
        .zip(&lowered.params)
        .map(|((_, decl), t)| {
            let tensor = tensors.get(t.index()).copied().flatten();
            let level = |l: usize| tensor.map(|x| x.levels()[l]);
            Ok(match (&decl.role, decl.output) {
                (Role::Values { .. }, true) => {
                    let mut zeros = T::wrap(vec![T::ZERO; result_len]);
                    zeros.advise_huge_pages();
                    zeros
                }
                (Role::Values { .. }, false) => tensor.map_or_else(|| T::wrap(Vec::new()), |x| T::borrow(x.values())),
                (Role::Pos { level: l, .. }, false) => match level(*l) {
                    Some(LevelView::Compressed { pos, .. } | LevelView::Band { pos, .. }) => {
                        ArrayData::Borrowed(pos.into())
                    }
                    _ => ArrayData::empty(decl.elem),
                },
                (Role::First { level: l, .. }, false) => match level(*l) {
                    Some(LevelView::Band { first, .. }) => ArrayData::Borrowed(first.into()),
                    _ => ArrayData::empty(decl.elem),
                },
                (Role::Metadata { level: l, .. }, false) => match level(*l) {
                    Some(LevelView::Structured { meta, .. }) => ArrayData::Borrowed(Borrowed::U64(meta.words())),
                    _ => ArrayData::empty(decl.elem),
                },
                (Role::Crd { level: l, .. }, false) => match level(*l) {
                    Some(LevelView::Compressed { crd, .. } | LevelView::Singleton { crd }) => {
                        ArrayData::Borrowed(crd.into())
                    }
                    _ => ArrayData::empty(decl.elem),
                },
                // The whole range, and a whole run: a reduction's kernel zeroes its result, a
                // sparse result's first entry goes first.
                (Role::Bounds, _) => {
                    ArrayData::I64(vec![0, lowered.partition.as_ref().map_or(0, |p| p.extent as i64), 1, 0])
                }
                (Role::Workspace { extents, config, .. }, _) => {
                    match crate::args::WorkspaceData::new(decl.elem, extents, *config) {
                        Ok(w) => ArrayData::Workspace(w),
                        Err(e) => return Err(nm_format::TensorError::TooLarge { what: e.to_string() }),
                    }
                }
                (Role::Local { len }, _) => {
                    let mut zeros = ArrayData::empty(decl.elem);
                    zeros.resize(*len);
                    zeros
                }
                _ => ArrayData::empty(decl.elem),
            })
        })
        .collect()
}

/// Checks that tensor `name` has the declared `shape` (a scalar may come as `[1]`) and
/// `format`: kernels trust the lengths of the arrays they are given.
pub fn check_operand(
    name: &str,
    shape: &[usize],
    format: &Format,
    actual_shape: &[usize],
    actual_format: &Format,
) -> Result<(), nm_format::TensorError> {
    let actual = if actual_shape == [1] && shape.is_empty() { &[][..] } else { actual_shape };
    if actual != shape {
        return Err(nm_format::TensorError::ShapeMismatch {
            what: format!("tensor `{name}`"),
            expected: shape.to_vec(),
            actual: actual_shape.to_vec(),
        });
    }
    if actual_format != format {
        return Err(nm_format::TensorError::WrongFormat {
            operation: "the kernel",
            needed: format!("{format} for `{name}`"),
            actual: actual_format.to_string(),
        });
    }
    Ok(())
}

/// Readies `arrays` (from [`arguments`], after a run) for another run of a kernel that
/// assembles a sparse result: its outputs and workspaces are emptied, their memory kept — as
/// an allocator that keeps freed memory would hand it back. Fresh arrays each run would
/// page-fault their growth anew: 2,000 faults per run of luxembourg's A·Aᵀ, twice its time.
pub fn rearm(lowered: &Lowered, arrays: &mut [ArrayData]) {
    for ((_, decl), data) in lowered.function.arrays.iter().zip(arrays.iter_mut()) {
        if decl.output && matches!(decl.role, Role::Pos { .. } | Role::Crd { .. } | Role::Values { .. } | Role::Scratch)
        {
            data.clear();
        }
    }
}

/// The result tensor of a kernel that assembled a sparse result (or filled a dense one), read
/// back from the kernel's output arrays and validated by `Tensor::from_raw`.
pub fn result_tensor<T: KernelValue>(
    lowered: &Lowered,
    arrays: &[crate::args::ArrayData],
    shape: &[usize],
    format: &Format,
) -> Result<nm_format::Tensor<T>, nm_format::TensorError> {
    assemble_result(lowered, arrays, shape, format, None)
}

/// [`result_tensor`], moving the result's values out of `arrays` instead of copying them: for a
/// caller done with the arrays (a dense result of 10⁶ values costs a copy and a fresh
/// allocation's page faults otherwise, more than many kernels take to compute it).
pub fn take_result_tensor<T: KernelValue>(
    lowered: &Lowered,
    arrays: &mut [crate::args::ArrayData],
    shape: &[usize],
    format: &Format,
) -> Result<nm_format::Tensor<T>, nm_format::TensorError> {
    let k = result_values(lowered);
    let taken = k.and_then(|k| T::take(&mut arrays[k]));
    assemble_result(lowered, arrays, shape, format, taken)
}

/// The argument index of the result's values.
fn result_values(lowered: &Lowered) -> Option<usize> {
    let result = lowered.params[0];
    lowered
        .function
        .arrays
        .iter()
        .zip(&lowered.params)
        .position(|((_, d), t)| *t == result && d.output && matches!(d.role, Role::Values { .. }))
}

fn assemble_result<T: KernelValue>(
    lowered: &Lowered,
    arrays: &[crate::args::ArrayData],
    shape: &[usize],
    format: &Format,
    taken: Option<Vec<T>>,
) -> Result<nm_format::Tensor<T>, nm_format::TensorError> {
    use crate::args::ArrayData;
    use nm_format::{Indices, LevelStorage, Tensor};
    let result = lowered.params[0];
    let find = |want: &dyn Fn(&Role) -> bool| {
        lowered
            .function
            .arrays
            .iter()
            .zip(&lowered.params)
            .position(|((_, d), t)| *t == result && d.output && want(&d.role))
    };
    // The first `len` entries of an index array, 32-bit where they fit (one pass to check,
    // one to convert: widening to `usize` first copied a result's coordinates three times).
    let ints = |k: Option<usize>, len: usize| -> Indices {
        let v = match k.map(|k| &arrays[k]) {
            Some(ArrayData::I64(v)) => &v[..len.min(v.len())],
            _ => &[],
        };
        if v.iter().all(|&x| x <= u32::MAX as i64) {
            Indices::U32(v.iter().map(|&x| x.max(0) as u32).collect())
        } else {
            Indices::U64(v.iter().map(|&x| x.max(0) as u64).collect())
        }
    };
    let sizes = format.level_sizes(shape);
    let mut levels = Vec::new();
    let mut parents = 1usize;
    for (l, level) in format.levels().iter().enumerate() {
        match level.kind {
            LevelKind::Dense => {
                levels.push(LevelStorage::Dense { size: sizes[l] });
                parents *= sizes[l];
            }
            LevelKind::Singleton(_) => {
                let crd = ints(find(&|r| matches!(r, Role::Crd { level, .. } if *level == l)), parents);
                levels.push(LevelStorage::Singleton { crd });
            }
            _ => {
                let pos = ints(find(&|r| matches!(r, Role::Pos { level, .. } if *level == l)), parents + 1);
                let count = if pos.len() == parents + 1 { pos.get(parents) } else { 0 };
                let crd = ints(find(&|r| matches!(r, Role::Crd { level, .. } if *level == l)), count);
                levels.push(LevelStorage::Compressed { pos, crd });
                parents = count;
            }
        }
    }
    let vals = match taken {
        Some(mut v) => {
            v.truncate(parents);
            Some(v)
        }
        None => find(&|r| matches!(r, Role::Values { .. }))
            .map(|k| T::unwrap(&arrays[k]).map_or_else(Vec::new, |v| v.iter().copied().take(parents).collect())),
    };
    Tensor::from_raw(shape.to_vec(), format.clone(), levels, vals.unwrap_or_default())
}
