//! N:M sparsity through the C ABI: `C = A·B` on the CPU or a CUDA device, and a tensor in
//! `nm(N,M,L)` made from its parts.

use std::ffi::c_void;

use nms::format::{AnyTensor, Format, Tensor, Value};

use crate::error::{Failure, arg, arg_slice, copied, give, guard, nms_status};
use crate::tensor::{Dtype, nms_dtype, nms_tensor, typed};

/// Where a kernel runs: `NMS_DEVICE_CPU` or `NMS_DEVICE_CUDA` (an integer: anything else is
/// `NMS_ERR_INVALID_ARGUMENT`).
pub type nms_device = i32;
/// The CPU (threads as asked).
pub const NMS_DEVICE_CPU: nms_device = 0;
/// CUDA device 0, through nm-cuda's f32 kernels (`threads` is ignored). No driver, no GPU, or
/// no NVRTC is `NMS_ERR_DEVICE`; f64 operands are `NMS_ERR_UNSUPPORTED`.
pub const NMS_DEVICE_CUDA: nms_device = 1;

/// `C = A·B` with `A` dense (`m×k`, format `"dense"`) and `B` in `nm(N,M,L)` (`k×n`), or `A`
/// in `nv24` and `B` dense, both of one value type, on `device` with `threads` threads (CPU:
/// nm-spmm's kernels, chosen for the CPU's instruction set; CUDA, f32 only: nm-cuda's kernel
/// chosen by shape and sparsity for `nm(N,M,L)`, the sparse tensor cores for `nv24`, which
/// read A and B rounded to bf16 and accumulate in f32). `threads` is 1 to 1024 (0 means 1;
/// more is `NMS_ERR_INVALID_ARGUMENT`). On success `*c` is a new dense `m×n` tensor the caller releases
/// with `nms_tensor_free`.
///
/// # Safety
/// `a` and `b` are live tensors; `c` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_nm_spmm(
    a: *const nms_tensor,
    b: *const nms_tensor,
    threads: usize,
    device: nms_device,
    c: *mut *mut nms_tensor,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let (a, b) = unsafe { (arg(a, "a")?, arg(b, "b")?) };
        if c.is_null() {
            return Err(Failure::null("c"));
        }
        crate::program::check_threads(threads.max(1))?;
        if device != NMS_DEVICE_CPU && device != NMS_DEVICE_CUDA {
            return Err(Failure::invalid(format!(
                "device {device} is neither NMS_DEVICE_CPU ({NMS_DEVICE_CPU}) nor NMS_DEVICE_CUDA ({NMS_DEVICE_CUDA})"
            )));
        }
        if device == NMS_DEVICE_CUDA {
            let (AnyTensor::F32(x), AnyTensor::F32(y)) = (&a.inner, &b.inner) else {
                return Err(Failure::new(
                    nms_status::NMS_ERR_UNSUPPORTED,
                    "the CUDA N:M kernels are f32: build A and B as NMS_F32 (or use NMS_DEVICE_CPU)",
                ));
            };
            let inner = AnyTensor::F32(if x.format() == &Format::nv24(2) {
                multiply_nv24_cuda(x, y)?
            } else {
                multiply_cuda(x, y)?
            });
            // SAFETY: checked non-NULL above.
            return unsafe { give(c, nms_tensor { inner }) };
        }
        fn multiply<T: nms::spmm::Real>(a: &Tensor<T>, b: &Tensor<T>, threads: usize) -> Result<Tensor<T>, Failure> {
            use nms::spmm::SpmmError;
            if a.format() == &Format::nv24(2) {
                return multiply_nv24(a, b, threads);
            }
            let packed = nms::spmm::NmMatrix::new(b).map_err(|e| Failure::invalid(e.to_string()))?;
            nms::spmm::multiply(a, &packed, threads).map_err(|e| match e {
                SpmmError::Inner { .. } | SpmmError::Tensor(_) => {
                    Failure::new(nms_status::NMS_ERR_TENSOR, e.to_string())
                }
                e => Failure::invalid(e.to_string()),
            })
        }
        let inner = match (&a.inner, &b.inner) {
            (AnyTensor::F32(x), AnyTensor::F32(y)) => AnyTensor::F32(multiply(x, y, threads)?),
            (AnyTensor::F64(x), AnyTensor::F64(y)) => AnyTensor::F64(multiply(x, y, threads)?),
            _ => return Err(Failure::invalid("A and B have different value types")),
        };
        // SAFETY: checked non-NULL above.
        unsafe { give(c, nms_tensor { inner }) }
    })
}

/// `B`'s shape `[k, n]` when it is a dense matrix with `k` rows, as `C = A·B` with `A` in
/// `nv24` (`m×k`) needs.
fn dense_b_for_nv24<T: Value>(a: &Tensor<T>, b: &Tensor<T>) -> Result<[usize; 2], Failure> {
    if b.format() != &Format::dense(2) {
        return Err(Failure::invalid(format!("with A in nv24, B must be a dense matrix, it is in {}", b.format())));
    }
    let (m, k) = (a.shape()[0], a.shape()[1]);
    if b.shape()[0] != k {
        return Err(Failure::new(nms_status::NMS_ERR_TENSOR, format!("A is {m}×{k} but B has {} rows", b.shape()[0])));
    }
    Ok([k, b.shape()[1]])
}

/// `C = A·B` with `A` in `nv24` on the CPU (nm-spmm's 2:4 kernel).
fn multiply_nv24<T: nms::spmm::Real>(a: &Tensor<T>, b: &Tensor<T>, threads: usize) -> Result<Tensor<T>, Failure> {
    let [_, n] = dense_b_for_nv24(a, b)?;
    let m = a.shape()[0];
    let len = m.checked_mul(n).ok_or_else(|| Failure::invalid(format!("a {m}×{n} result overflows an address")))?;
    let mut c = Vec::new();
    crate::error::reserve(&mut c, len, "C")?;
    c.resize(len, T::ZERO);
    nms::spmm::spmm_nv24(a, b.values(), n, &mut c, threads).map_err(|e| Failure::invalid(e.to_string()))?;
    Ok(Tensor::from_dense(&[m, n], &c, &Format::dense(2))?)
}

/// `C = A·B` with `A` in `nv24` on CUDA device 0's sparse tensor cores (bf16 operands).
fn multiply_nv24_cuda(a: &Tensor<f32>, b: &Tensor<f32>) -> Result<Tensor<f32>, Failure> {
    let [_, n] = dense_b_for_nv24(a, b)?;
    let gpu = nms::cuda::Gpu::open(0)?;
    let (values, _, _) = nms::cuda::multiply_nv24(&gpu, a, b.values(), n, None, None)?;
    Ok(Tensor::from_dense(&[a.shape()[0], n], &values, &Format::dense(2))?)
}

/// `C = A·B` on CUDA device 0, operands checked like the CPU path's.
fn multiply_cuda(a: &Tensor<f32>, b: &Tensor<f32>) -> Result<Tensor<f32>, Failure> {
    if a.format() != &nms::format::Format::dense(2) {
        return Err(Failure::invalid(format!("A must be a dense matrix, it is in {}", a.format())));
    }
    if b.format().nm_params().is_none() {
        return Err(Failure::invalid(format!("B must be stored in nm(N,M,L), it is in {}", b.format())));
    }
    let parts = b.nm_parts()?;
    let (m, k) = (a.shape()[0], a.shape()[1]);
    if k != parts.shape[0] {
        return Err(nms::cuda::CudaError::Inner { m, k, rows: parts.shape[0] }.into());
    }
    let gpu = nms::cuda::Gpu::open(0)?;
    let (values, _) = nms::cuda::multiply(&gpu, a.values(), m, &parts, nms::cuda::Options::default())?;
    Ok(Tensor::from_dense(&[m, parts.shape[1]], &values, &nms::format::Format::dense(2))?)
}

/// Builds a `k×n` matrix in `nm(N,M,L)` from the NM-SpMM paper's layout: `b_prime`, row-major
/// `(⌈k/M⌉·N) × (⌈n/L⌉·L)` elements of `dtype` (row `w·N + t` holds the `t`-th kept row of
/// window `w`, for every column), and `d`, row-major `(⌈k/M⌉·N) × ⌈n/L⌉` offsets (which row of
/// its window each kept vector is, per column group). The arrays are copied and validated:
/// an offset ≥ M, offsets not distinct and increasing within a block, or a nonzero in the
/// padding is `NMS_ERR_TENSOR` with the position in the message.
///
/// # Safety
/// `b_prime` and `d` hold the element counts above; `out` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_tensor_from_nm_parts(
    dtype: nms_dtype,
    k: usize,
    n: usize,
    keep: u32,
    window: u32,
    l: usize,
    b_prime: *const c_void,
    d: *const u16,
    out: *mut *mut nms_tensor,
) -> nms_status {
    guard(|| {
        let dtype = Dtype::of(dtype)?;
        if keep == 0 || window == 0 || keep > window || l == 0 || window > u16::MAX as u32 {
            return Err(Failure::new(
                nms_status::NMS_ERR_FORMAT,
                format!("nm({keep},{window},{l}): need 1 <= N <= M <= 65535 and L >= 1"),
            ));
        }
        let overflow =
            |what: &str| Failure::invalid(format!("{what} overflows for a {k}×{n} matrix in nm({keep},{window},{l})"));
        let rows = k.div_ceil(window as usize).checked_mul(keep as usize).ok_or_else(|| overflow("the kept rows"))?;
        let groups = n.div_ceil(l);
        let cols = groups.checked_mul(l).ok_or_else(|| overflow("the padded columns"))?;
        let values = rows.checked_mul(cols).ok_or_else(|| overflow("the B' size"))?;
        let offsets = rows.checked_mul(groups).ok_or_else(|| overflow("the D size"))?;
        // SAFETY: the contract above.
        let d = unsafe { arg_slice(d, offsets, "d") }?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        fn build<T: Value>(
            shape: [usize; 2],
            (n, m, l): (u32, u32, usize),
            b_prime: &[T],
            d: &[u16],
        ) -> Result<Tensor<T>, Failure> {
            let parts =
                nms::format::NmParts { n, m, l, shape, b_prime: copied(b_prime, "b_prime")?, d: copied(d, "d")? };
            Ok(Tensor::from_nm_parts(&parts)?)
        }
        let pattern = (keep, window, l);
        // SAFETY: `b_prime` holds `values` elements of `dtype` by the contract.
        let inner = unsafe {
            typed(dtype, b_prime, values, |v| build([k, n], pattern, v, d), |v| build([k, n], pattern, v, d))
        }?;
        // SAFETY: checked non-NULL above.
        unsafe { give(out, nms_tensor { inner }) }
    })
}
