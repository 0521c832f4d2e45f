//! Formats and tensors: made from C arrays or files, queried, exported, converted, pruned.

use std::ffi::{c_char, c_void};

use nms::format::{AnyTensor, CoordinateList, Duplicates, Format, Indices, LevelStorage, Tensor, Value, with_tensor};

use crate::error::{
    Failure, arg, arg_out_slice, arg_slice, arg_str, copied, give, guard, nms_status, put, put_text, release, reserve,
};

/// The element type of a tensor's values: `NMS_F32` or `NMS_F64`. An integer rather than a C
/// enum, so that a value outside the list is refused (`NMS_ERR_INVALID_ARGUMENT`) instead of
/// being taken for another.
pub type nms_dtype = i32;
/// `float`
pub const NMS_F32: nms_dtype = 0;
/// `double`
pub const NMS_F64: nms_dtype = 1;

/// The value types, once an `nms_dtype` is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dtype {
    F32,
    F64,
}

impl Dtype {
    /// `dtype` checked: `NMS_F32` or `NMS_F64`, else `NMS_ERR_INVALID_ARGUMENT`.
    pub(crate) fn of(dtype: nms_dtype) -> Result<Dtype, Failure> {
        match dtype {
            NMS_F32 => Ok(Dtype::F32),
            NMS_F64 => Ok(Dtype::F64),
            other => {
                Err(Failure::invalid(format!("dtype {other} is neither NMS_F32 ({NMS_F32}) nor NMS_F64 ({NMS_F64})")))
            }
        }
    }

    fn code(self) -> nms_dtype {
        match self {
            Dtype::F32 => NMS_F32,
            Dtype::F64 => NMS_F64,
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dtype::F32 => "NMS_F32",
            Dtype::F64 => "NMS_F64",
        })
    }
}

/// `order` checked: 1 to `NMS_MAX_ORDER`.
pub(crate) fn check_order(order: usize) -> Result<(), Failure> {
    if (1..=Format::MAX_ORDER).contains(&order) {
        Ok(())
    } else {
        Err(Failure::invalid(format!("order {order} is not 1 to NMS_MAX_ORDER ({})", Format::MAX_ORDER)))
    }
}

/// A storage format: per level dense, compressed, singleton or structured N:M, with a mode
/// ordering (`"csr"`, `"dcsr"`, `"coo"`, `"ds:1,0"`, `"nm(2,4,16)"`, `"nv24"`...).
pub struct nms_format {
    pub(crate) inner: Format,
}

/// A validated tensor of `float` or `double` values in some format.
pub struct nms_tensor {
    pub(crate) inner: AnyTensor,
}

/// The value type of a tensor.
fn dtype_of(t: &AnyTensor) -> Dtype {
    if t.is_f32() { Dtype::F32 } else { Dtype::F64 }
}

/// A typed tensor from `values` (of `dtype`) through `make`.
///
/// # Safety
/// `values` is NULL or points at `len` elements of `dtype`.
pub(crate) unsafe fn typed(
    dtype: Dtype,
    values: *const c_void,
    len: usize,
    make32: impl FnOnce(&[f32]) -> Result<Tensor<f32>, Failure>,
    make64: impl FnOnce(&[f64]) -> Result<Tensor<f64>, Failure>,
) -> Result<AnyTensor, Failure> {
    Ok(match dtype {
        // SAFETY: `len` floats by the caller's contract.
        Dtype::F32 => AnyTensor::F32(make32(unsafe { arg_slice(values.cast(), len, "values") }?)?),
        // SAFETY: `len` doubles by the caller's contract.
        Dtype::F64 => AnyTensor::F64(make64(unsafe { arg_slice(values.cast(), len, "values") }?)?),
    })
}

fn checked_len(shape: &[usize]) -> Result<usize, Failure> {
    shape
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .ok_or_else(|| Failure::invalid("the shape's size overflows"))
}

/// Parses a format string for a tensor of `order` dimensions (1 to `NMS_MAX_ORDER`).
///
/// On success `*out` is a new format the caller releases with `nms_format_free`.
///
/// # Safety
/// `text` is a NUL-terminated string; `out` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_format_parse(text: *const c_char, order: usize, out: *mut *mut nms_format) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let text = unsafe { arg_str(text, "text") }?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        check_order(order)?;
        let inner = Format::parse(text, order)?;
        // SAFETY: the contract above.
        unsafe { give(out, nms_format { inner }) }
    })
}

/// Writes the format's canonical text (NUL-terminated) into `buffer` of `capacity` bytes and
/// its length (without the NUL) to `*length` when `length` is not NULL. A buffer too small
/// (or NULL with capacity 0) is `NMS_ERR_INVALID_ARGUMENT`, with `*length` still written, so
/// that a caller can ask for the length first.
///
/// # Safety
/// `format` is a live format; `buffer` has `capacity` writable bytes; `length` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_format_to_string(
    format: *const nms_format,
    buffer: *mut c_char,
    capacity: usize,
    length: *mut usize,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let format = unsafe { arg(format, "format") }?;
        // SAFETY: the contract above.
        unsafe { put_text(&format.inner.to_string(), buffer, capacity, length) }
    })
}

/// Releases a format (NULL is allowed).
///
/// # Safety
/// `format` is NULL or a format from this library, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_format_free(format: *mut nms_format) {
    // SAFETY: the contract above.
    unsafe { release(format) }
}

/// Builds a tensor from coordinates: `coords` holds `nnz × order` indices, entry by entry
/// (row-major), `values` holds `nnz` elements of `dtype`. Duplicate coordinates are summed when
/// `sum_duplicates` is nonzero, else rejected (`NMS_ERR_TENSOR`). The arrays are copied.
///
/// On success `*out` is a new tensor the caller releases with `nms_tensor_free`.
///
/// # Safety
/// `shape` has `order` elements, `coords` `nnz × order`, `values` `nnz` of `dtype`; `format`
/// is a live format; `out` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_from_coo(
    dtype: nms_dtype,
    order: usize,
    shape: *const usize,
    nnz: usize,
    coords: *const u64,
    values: *const c_void,
    format: *const nms_format,
    sum_duplicates: i32,
    out: *mut *mut nms_tensor,
) -> nms_status {
    guard(|| {
        let dtype = Dtype::of(dtype)?;
        check_order(order)?;
        // SAFETY: the contract above.
        let (shape, format) = unsafe { (arg_slice(shape, order, "shape")?, arg(format, "format")?) };
        let entries = nnz.checked_mul(order).ok_or_else(|| Failure::invalid("nnz × order overflows"))?;
        // SAFETY: the contract above.
        let coords = unsafe { arg_slice(coords, entries, "coords") }?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let duplicates = if sum_duplicates != 0 { Duplicates::Sum } else { Duplicates::Reject };
        let mut columns: Vec<Vec<usize>> = Vec::with_capacity(order);
        for d in 0..order {
            let mut column = Vec::new();
            reserve(&mut column, nnz, "coords")?;
            column.extend((0..nnz).map(|e| usize::try_from(coords[e * order + d]).unwrap_or(usize::MAX)));
            columns.push(column);
        }
        fn build<T: Value>(
            shape: &[usize],
            coords: Vec<Vec<usize>>,
            values: &[T],
            format: &Format,
            duplicates: Duplicates,
        ) -> Result<Tensor<T>, Failure> {
            let list = CoordinateList { shape: shape.to_vec(), coords, values: copied(values, "values")? };
            Ok(Tensor::from_coordinates(&list, format, duplicates)?)
        }
        let inner = match dtype {
            Dtype::F32 => {
                // SAFETY: `values` holds `nnz` floats by the contract.
                let v = unsafe { arg_slice(values.cast(), nnz, "values") }?;
                AnyTensor::F32(build(shape, columns, v, &format.inner, duplicates)?)
            }
            Dtype::F64 => {
                // SAFETY: `values` holds `nnz` doubles by the contract.
                let v = unsafe { arg_slice(values.cast(), nnz, "values") }?;
                AnyTensor::F64(build(shape, columns, v, &format.inner, duplicates)?)
            }
        };
        // SAFETY: checked non-NULL above.
        unsafe { give(out, nms_tensor { inner }) }
    })
}

/// Builds a CSR matrix (`rows × cols`, format `"csr"`) from the usual three arrays:
/// `indptr` (`rows + 1` offsets), `indices` (`indptr[rows]` column indices, sorted and distinct
/// within each row) and `values` (`indptr[rows]` elements of `dtype`). The arrays are copied
/// (and validated: a malformed row is `NMS_ERR_TENSOR`, with the row in the message).
///
/// # Safety
/// The arrays hold the element counts above; `out` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_from_csr(
    dtype: nms_dtype,
    rows: usize,
    cols: usize,
    indptr: *const u64,
    indices: *const u64,
    values: *const c_void,
    out: *mut *mut nms_tensor,
) -> nms_status {
    guard(|| {
        let dtype = Dtype::of(dtype)?;
        let count = rows.checked_add(1).ok_or_else(|| Failure::invalid("rows + 1 overflows"))?;
        // SAFETY: the contract above.
        let indptr = unsafe { arg_slice(indptr, count, "indptr") }?;
        // The offsets are checked before `indptr[rows]` is trusted as an array length: they
        // start at 0, never decrease, and count at most `rows × cols` entries.
        if indptr[0] != 0 {
            return Err(Failure::new(nms_status::NMS_ERR_TENSOR, format!("indptr[0] is {}, not 0", indptr[0])));
        }
        if let Some(r) = (0..rows).find(|&r| indptr[r + 1] < indptr[r]) {
            return Err(Failure::new(
                nms_status::NMS_ERR_TENSOR,
                format!("indptr decreases at row {r}: {} then {}", indptr[r], indptr[r + 1]),
            ));
        }
        let elements = rows.saturating_mul(cols) as u64;
        if indptr[rows] > elements {
            return Err(Failure::new(
                nms_status::NMS_ERR_TENSOR,
                format!("indptr[{rows}] = {} entries, more than the {rows}×{cols} matrix has", indptr[rows]),
            ));
        }
        let nnz = usize::try_from(indptr[rows]).map_err(|_| Failure::invalid("indptr[rows] does not fit in size_t"))?;
        // SAFETY: the contract above (`indptr[rows]` indices).
        let indices = unsafe { arg_slice(indices, nnz, "indices") }?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let widened = |a: &[u64], what: &str| -> Result<Vec<usize>, Failure> {
            let mut v = Vec::new();
            reserve(&mut v, a.len(), what)?;
            v.extend(a.iter().map(|&x| usize::try_from(x).unwrap_or(usize::MAX)));
            Ok(v)
        };
        let (pos, crd) = (widened(indptr, "indptr")?, widened(indices, "indices")?);
        let levels = vec![
            LevelStorage::Dense { size: rows },
            LevelStorage::Compressed { pos: Indices::from_usize(pos), crd: Indices::from_usize(crd) },
        ];
        fn build<T: Value>(shape: [usize; 2], levels: Vec<LevelStorage>, values: &[T]) -> Result<Tensor<T>, Failure> {
            Ok(Tensor::from_raw(shape.to_vec(), Format::csr(), levels, copied(values, "values")?)?)
        }
        let inner = match dtype {
            Dtype::F32 => {
                // SAFETY: `values` holds `indptr[rows]` floats by the contract.
                let v = unsafe { arg_slice(values.cast(), nnz, "values") }?;
                AnyTensor::F32(build([rows, cols], levels, v)?)
            }
            Dtype::F64 => {
                // SAFETY: `values` holds `indptr[rows]` doubles by the contract.
                let v = unsafe { arg_slice(values.cast(), nnz, "values") }?;
                AnyTensor::F64(build([rows, cols], levels, v)?)
            }
        };
        // SAFETY: checked non-NULL above.
        unsafe { give(out, nms_tensor { inner }) }
    })
}

/// Builds a tensor in `format` from a dense row-major array of `shape[0] × ... ×
/// shape[order-1]` elements of `dtype`, storing its nonzeros. The array is copied.
///
/// # Safety
/// `shape` has `order` elements and `data` their product; `format` is live; `out` points at
/// room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_from_dense(
    dtype: nms_dtype,
    order: usize,
    shape: *const usize,
    data: *const c_void,
    format: *const nms_format,
    out: *mut *mut nms_tensor,
) -> nms_status {
    guard(|| {
        let dtype = Dtype::of(dtype)?;
        check_order(order)?;
        // SAFETY: the contract above.
        let (shape, format) = unsafe { (arg_slice(shape, order, "shape")?, arg(format, "format")?) };
        let len = checked_len(shape)?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        // SAFETY: `data` holds the shape's product of `dtype` elements by the contract.
        let inner = unsafe {
            typed(
                dtype,
                data,
                len,
                |v| Ok(Tensor::from_dense(shape, v, &format.inner)?),
                |v| Ok(Tensor::from_dense(shape, v, &format.inner)?),
            )
        }?;
        // SAFETY: checked non-NULL above.
        unsafe { give(out, nms_tensor { inner }) }
    })
}

/// Reads a Matrix Market (`.mtx`) or FROSTT (`.tns`) file into a tensor of `dtype` stored in
/// the format `format` (a format string: `"csr"`, `"coo"`...). Duplicates are summed and
/// symmetric matrices expanded. A malformed file is `NMS_ERR_IO` with the line in the message.
///
/// # Safety
/// `path` and `format` are NUL-terminated strings; `out` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_read(
    path: *const c_char,
    dtype: nms_dtype,
    format: *const c_char,
    out: *mut *mut nms_tensor,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let (path, format) = unsafe { (arg_str(path, "path")?, arg_str(format, "format")?) };
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let inner = match Dtype::of(dtype)? {
            Dtype::F32 => AnyTensor::F32(nms::format::io::read_tensor(path, format)?),
            Dtype::F64 => AnyTensor::F64(nms::format::io::read_tensor(path, format)?),
        };
        // SAFETY: checked non-NULL above.
        unsafe { give(out, nms_tensor { inner }) }
    })
}

/// Writes a tensor to a `.mtx` (order 2) or `.tns` file, through a temporary file renamed into
/// place (a failed write leaves no partial file).
///
/// # Safety
/// `tensor` is live; `path` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_write(tensor: *const nms_tensor, path: *const c_char) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let (tensor, path) = unsafe { (arg(tensor, "tensor")?, arg_str(path, "path")?) };
        with_tensor!(&tensor.inner, t => nms::format::io::write_tensor(path, t))?;
        Ok(())
    })
}

/// The tensor's value type.
///
/// # Safety
/// `tensor` is live; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_dtype(tensor: *const nms_tensor, out: *mut nms_dtype) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let tensor = unsafe { arg(tensor, "tensor") }?;
        // SAFETY: the contract above.
        unsafe { put(out, dtype_of(&tensor.inner).code(), "out") }
    })
}

/// The tensor's number of dimensions.
///
/// # Safety
/// `tensor` is live; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_order(tensor: *const nms_tensor, out: *mut usize) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let tensor = unsafe { arg(tensor, "tensor") }?;
        let order = with_tensor!(&tensor.inner, t => t.order());
        // SAFETY: the contract above.
        unsafe { put(out, order, "out") }
    })
}

/// Writes the tensor's dimension sizes to `shape`, which has room for `capacity` (at least
/// the order: else `NMS_ERR_INVALID_ARGUMENT`).
///
/// # Safety
/// `tensor` is live; `shape` has `capacity` writable elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_shape(tensor: *const nms_tensor, shape: *mut usize, capacity: usize) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let tensor = unsafe { arg(tensor, "tensor") }?;
        let dims = with_tensor!(&tensor.inner, t => t.shape().to_vec());
        if capacity < dims.len() {
            return Err(Failure::invalid(format!(
                "shape has room for {capacity} sizes, the tensor has {}",
                dims.len()
            )));
        }
        // SAFETY: the contract above.
        let out = unsafe { arg_out_slice(shape, dims.len(), "shape") }?;
        out.copy_from_slice(&dims);
        Ok(())
    })
}

/// The number of stored components (explicit zeros included, N:M padding excluded): the
/// element counts of `nms_tensor_to_coo` and `nms_tensor_to_csr`.
///
/// # Safety
/// `tensor` is live; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_nnz(tensor: *const nms_tensor, out: *mut usize) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let tensor = unsafe { arg(tensor, "tensor") }?;
        let nnz = with_tensor!(&tensor.inner, t => t.to_coordinates().values.len());
        // SAFETY: the contract above.
        unsafe { put(out, nnz, "out") }
    })
}

/// The tensor's format, as a new handle the caller releases with `nms_format_free`.
///
/// # Safety
/// `tensor` is live; `out` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_format(tensor: *const nms_tensor, out: *mut *mut nms_format) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let tensor = unsafe { arg(tensor, "tensor") }?;
        let inner = with_tensor!(&tensor.inner, t => t.format().clone());
        // SAFETY: the contract above.
        unsafe { give(out, nms_format { inner }) }
    })
}

/// Fails unless the tensor holds values of `dtype` (the type of the caller's arrays).
fn expect_dtype(tensor: &nms_tensor, dtype: nms_dtype) -> Result<(), Failure> {
    let asked = Dtype::of(dtype)?;
    if dtype_of(&tensor.inner) != asked {
        return Err(Failure::invalid(format!("the tensor holds {}, {asked} was asked", dtype_of(&tensor.inner))));
    }
    Ok(())
}

/// Copies the stored components out in storage order: `coords` receives `nnz × order`
/// indices (entry by entry), `values` `nnz` elements of `dtype` (the tensor's), where `nnz` is
/// `nms_tensor_nnz`'s and `capacity` (in entries) must be at least it.
///
/// # Safety
/// `tensor` is live; `coords` has room for `capacity × order` indices, `values` for
/// `capacity` elements of `dtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_to_coo(
    tensor: *const nms_tensor,
    dtype: nms_dtype,
    coords: *mut u64,
    values: *mut c_void,
    capacity: usize,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let tensor = unsafe { arg(tensor, "tensor") }?;
        expect_dtype(tensor, dtype)?;
        with_tensor!(&tensor.inner, t => {
            let list = t.to_coordinates();
            let (nnz, order) = (list.values.len(), t.order());
            if capacity < nnz {
                return Err(Failure::invalid(format!("room for {capacity} entries, the tensor stores {nnz}")));
            }
            let entries = nnz.checked_mul(order).ok_or_else(|| Failure::invalid("nnz × order overflows"))?;
            // SAFETY: the contract above (capacity ≥ nnz entries).
            let (c, v) = unsafe {
                (arg_out_slice(coords, entries, "coords")?, arg_out_slice(values.cast(), nnz, "values")?)
            };
            for e in 0..nnz {
                for d in 0..order {
                    c[e * order + d] = list.coords[d][e] as u64;
                }
            }
            v.copy_from_slice(&list.values);
            Ok(())
        })
    })
}

/// Copies an order-2 tensor out as CSR: `indptr` (`rows + 1`), `indices` and `values`
/// (`nnz` each, `nnz` from `nms_tensor_nnz`; `capacity` must be at least it), rows sorted by
/// column, whatever the tensor's format.
///
/// # Safety
/// `tensor` is live; `indptr` has room for `rows + 1` indices, `indices` and `values` for
/// `capacity` elements (`values` of `dtype`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_to_csr(
    tensor: *const nms_tensor,
    dtype: nms_dtype,
    indptr: *mut u64,
    indices: *mut u64,
    values: *mut c_void,
    capacity: usize,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let tensor = unsafe { arg(tensor, "tensor") }?;
        expect_dtype(tensor, dtype)?;
        with_tensor!(&tensor.inner, t => {
            if t.order() != 2 {
                return Err(Failure::invalid(format!("CSR needs a matrix, the tensor has order {}", t.order())));
            }
            let mut list = t.to_coordinates();
            list.sort_row_major();
            let (rows, nnz) = (t.shape()[0], list.values.len());
            if capacity < nnz {
                return Err(Failure::invalid(format!("room for {capacity} entries, the tensor stores {nnz}")));
            }
            // SAFETY: the contract above.
            let (p, c, v) = unsafe {
                (
                    arg_out_slice(indptr, rows + 1, "indptr")?,
                    arg_out_slice(indices, nnz, "indices")?,
                    arg_out_slice(values.cast(), nnz, "values")?,
                )
            };
            p.fill(0);
            for &r in &list.coords[0] {
                p[r + 1] += 1;
            }
            for r in 0..rows {
                p[r + 1] += p[r];
            }
            for (slot, &col) in c.iter_mut().zip(&list.coords[1]) {
                *slot = col as u64;
            }
            v.copy_from_slice(&list.values);
            Ok(())
        })
    })
}

/// Copies the tensor out as a dense row-major array of `len` elements of `dtype` (`len` must
/// equal the product of the shape).
///
/// # Safety
/// `tensor` is live; `out` has room for `len` elements of `dtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_to_dense(
    tensor: *const nms_tensor,
    dtype: nms_dtype,
    out: *mut c_void,
    len: usize,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let tensor = unsafe { arg(tensor, "tensor") }?;
        expect_dtype(tensor, dtype)?;
        with_tensor!(&tensor.inner, t => {
            let expected = checked_len(t.shape())?;
            if len != expected {
                return Err(Failure::invalid(format!("the array has {len} elements, shape {:?} needs {expected}", t.shape())));
            }
            let dense = t.to_dense()?;
            // SAFETY: the contract above.
            let o = unsafe { arg_out_slice(out.cast(), len, "out") }?;
            o.copy_from_slice(&dense);
            Ok(())
        })
    })
}

/// The tensor stored in another format (every stored component kept; converting into an N:M
/// format that the data does not fit is `NMS_ERR_TENSOR`: prune first).
///
/// # Safety
/// `tensor` and `format` are live; `out` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_convert(
    tensor: *const nms_tensor,
    format: *const nms_format,
    out: *mut *mut nms_tensor,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let (tensor, format) = unsafe { (arg(tensor, "tensor")?, arg(format, "format")?) };
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let inner = match &tensor.inner {
            AnyTensor::F32(t) => AnyTensor::F32(t.convert(&format.inner)?),
            AnyTensor::F64(t) => AnyTensor::F64(t.convert(&format.inner)?),
        };
        // SAFETY: checked non-NULL above.
        unsafe { give(out, nms_tensor { inner }) }
    })
}

/// Prunes the tensor into a structured N:M format, keeping the largest magnitudes of each
/// block; `*dropped` (when not NULL) receives the number of nonzeros dropped.
///
/// # Safety
/// `tensor` and `format` are live; `out` points at room for one pointer; `dropped` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_prune(
    tensor: *const nms_tensor,
    format: *const nms_format,
    out: *mut *mut nms_tensor,
    dropped: *mut usize,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let (tensor, format) = unsafe { (arg(tensor, "tensor")?, arg(format, "format")?) };
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let (inner, report) = match &tensor.inner {
            AnyTensor::F32(t) => t.prune(&format.inner).map(|(t, r)| (AnyTensor::F32(t), r))?,
            AnyTensor::F64(t) => t.prune(&format.inner).map(|(t, r)| (AnyTensor::F64(t), r))?,
        };
        if !dropped.is_null() {
            // SAFETY: non-NULL and writable by the contract.
            unsafe { put(dropped, report.dropped, "dropped") }?;
        }
        // SAFETY: checked non-NULL above.
        unsafe { give(out, nms_tensor { inner }) }
    })
}

/// Releases a tensor (NULL is allowed).
///
/// # Safety
/// `tensor` is NULL or a tensor from this library, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_free(tensor: *mut nms_tensor) {
    // SAFETY: the contract above.
    unsafe { release(tensor) }
}
