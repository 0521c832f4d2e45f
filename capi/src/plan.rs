//! N:M plans through the C ABI: the structured operand of `C = A·B` prepared once (packed on
//! the CPU, compressed and uploaded with its kernel compiled on a CUDA device), then run many
//! times against other dense operands.

use std::ffi::c_void;
use std::sync::Mutex;

use nms::format::{AnyTensor, Format, Tensor};
use nms::spmm::{NmMatrix, Real};

use crate::error::{Failure, arg, arg_out_slice, arg_slice, give, guard, nms_status, put, release};
use crate::nm::{NMS_DEVICE_CPU, NMS_DEVICE_CUDA, nms_device};
use crate::tensor::nms_tensor;

/// Where a plan run's dense operand and C live: `NMS_MEMORY_HOST` or `NMS_MEMORY_DEVICE` (an
/// integer: anything else is `NMS_ERR_INVALID_ARGUMENT`).
pub type nms_memory = i32;
/// Host memory: the run copies through the plan's device buffers (CUDA) and returns when C
/// is written.
pub const NMS_MEMORY_HOST: nms_memory = 0;
/// Device memory of the plan's CUDA device (`cudaMalloc`, `cuMemAlloc`): nothing is copied,
/// the run is queued on the stream and the call returns without waiting for it.
pub const NMS_MEMORY_DEVICE: nms_memory = 1;

/// `C = A·B` against one structured operand prepared once: B in `nm(N,M,L)` or A in `nv24`.
/// Runs on one plan from several threads take turns (the plan's buffers are its own).
pub struct nms_nm_plan {
    inner: Mutex<AnyPlan>,
    /// `[m, k, n]`, as the inner plan has it, kept beside the lock so that asking for the
    /// shape never waits for a run.
    shape: [usize; 3],
}

enum AnyPlan {
    CpuF32(CpuPlan<f32>),
    CpuF64(CpuPlan<f64>),
    /// Boxed: a device plan is several times the size of a CPU one.
    Cuda(Box<nms::cuda::Plan>),
}

/// A CPU plan: B packed once for nm-spmm, or A in `nv24` as given.
struct CpuPlan<T: 'static> {
    structured: Structured<T>,
    shape: [usize; 3],
    threads: usize,
}

enum Structured<T: 'static> {
    Nm(NmMatrix<'static, T>),
    Nv24(Tensor<T>),
}

impl<T: Real + 'static> CpuPlan<T> {
    fn new(sparse: &Tensor<T>, dense_dim: usize, threads: usize) -> Result<CpuPlan<T>, Failure> {
        let [rows, cols] = matrix_shape(sparse)?;
        let nv24 = sparse.format() == &Format::nv24(2);
        let shape = if nv24 { [rows, cols, dense_dim] } else { [dense_dim, rows, cols] };
        let [m, k, n] = shape;
        if m.checked_mul(k).and(k.checked_mul(n)).and(m.checked_mul(n)).is_none() {
            return Err(Failure::invalid(format!(
                "a {m}×{k} by {k}×{n} product: its operands' sizes overflow an address"
            )));
        }
        let structured = if nv24 {
            Structured::Nv24(sparse.clone())
        } else {
            Structured::Nm(NmMatrix::new(sparse).map_err(|e| Failure::invalid(e.to_string()))?)
        };
        Ok(CpuPlan { structured, shape, threads })
    }

    /// Values of the dense operand: A's `m·k` for a plan of B, B's `k·n` for a plan of A.
    fn dense_len(&self) -> usize {
        let [m, k, n] = self.shape;
        match self.structured {
            Structured::Nm(_) => m * k,
            Structured::Nv24(_) => k * n,
        }
    }

    fn run(&self, dense: &[T], c: &mut [T]) -> Result<(), Failure> {
        let [m, _, n] = self.shape;
        match &self.structured {
            Structured::Nm(b) => nms::spmm::spmm(dense, m, b, c, self.threads),
            Structured::Nv24(a) => nms::spmm::spmm_nv24(a, dense, n, c, self.threads),
        }
        .map_err(|e| Failure::new(nms_status::NMS_ERR_RUN, e.to_string()))
    }
}

/// `[rows, cols]` of a structured matrix operand, refusing anything else.
fn matrix_shape<T: nms::format::Value>(sparse: &Tensor<T>) -> Result<[usize; 2], Failure> {
    if sparse.format() != &Format::nv24(2) && sparse.format().nm_params().is_none() {
        return Err(Failure::invalid(format!(
            "a plan's structured operand is B in nm(N,M,L) or A in nv24; this tensor is in {}",
            sparse.format()
        )));
    }
    Ok([sparse.shape()[0], sparse.shape()[1]])
}

/// The CUDA plan of an f32 structured operand on device 0.
fn cuda_plan(sparse: &Tensor<f32>, dense_dim: usize) -> Result<nms::cuda::Plan, Failure> {
    matrix_shape(sparse)?;
    let gpu = nms::cuda::Gpu::open(0)?;
    if sparse.format() == &Format::nv24(2) {
        let a = nms::cuda::Nv24Sp::compress(sparse)?;
        return Ok(nms::cuda::Plan::nv24(&gpu, &a, dense_dim, None, None)?);
    }
    Ok(nms::cuda::Plan::nm(&gpu, &sparse.nm_parts()?, dense_dim, nms::cuda::Options::default())?)
}

/// Prepares `C = A·B` for many runs. `sparse` is either B (`k×n`, in `nm(N,M,L)`), and then
/// `dense_dim` is `m`, the rows of the A each run takes; or A (`m×k`, in `nv24`), and then
/// `dense_dim` is `n`, the columns of the B each run takes. On `NMS_DEVICE_CPU` the plan packs
/// B once for nm-spmm's kernels (f32 or f64, `threads` 1 to 1024, 0 meaning 1); on
/// `NMS_DEVICE_CUDA` (f32 only) it compresses the operand into device 0's memory and chooses
/// and compiles its kernel once — the 2:4 sparse tensor cores for `nv24`, which round each
/// run's B to bf16 and accumulate in f32. `nms_nm_plan_shape` gives `m`, `k`, `n`. On success
/// `*out` is a new plan the caller releases with `nms_nm_plan_free`; the tensor may be freed
/// at once.
///
/// # Safety
/// `sparse` is a live tensor; `out` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_nm_plan_create(
    sparse: *const nms_tensor,
    dense_dim: usize,
    threads: usize,
    device: nms_device,
    out: *mut *mut nms_nm_plan,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let sparse = unsafe { arg(sparse, "sparse") }?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let threads = threads.max(1);
        crate::program::check_threads(threads)?;
        let inner = match (device, &sparse.inner) {
            (NMS_DEVICE_CPU, AnyTensor::F32(t)) => AnyPlan::CpuF32(CpuPlan::new(t, dense_dim, threads)?),
            (NMS_DEVICE_CPU, AnyTensor::F64(t)) => AnyPlan::CpuF64(CpuPlan::new(t, dense_dim, threads)?),
            (NMS_DEVICE_CUDA, AnyTensor::F32(t)) => AnyPlan::Cuda(Box::new(cuda_plan(t, dense_dim)?)),
            (NMS_DEVICE_CUDA, AnyTensor::F64(_)) => {
                return Err(Failure::new(
                    nms_status::NMS_ERR_UNSUPPORTED,
                    "the CUDA N:M kernels are f32: build the operand as NMS_F32 (or use NMS_DEVICE_CPU)",
                ));
            }
            _ => {
                return Err(Failure::invalid(format!(
                    "device {device} is neither NMS_DEVICE_CPU ({NMS_DEVICE_CPU}) nor NMS_DEVICE_CUDA ({NMS_DEVICE_CUDA})"
                )));
            }
        };
        let shape = match &inner {
            AnyPlan::CpuF32(p) => p.shape,
            AnyPlan::CpuF64(p) => p.shape,
            AnyPlan::Cuda(p) => p.shape(),
        };
        // SAFETY: checked non-NULL above.
        unsafe { give(out, nms_nm_plan { inner: Mutex::new(inner), shape }) }
    })
}

/// Writes the plan's `m`, `k` and `n` (`C = A·B` with A `m×k`, B `k×n`) to the pointers that
/// are not NULL.
///
/// # Safety
/// `plan` is a live plan; each pointer is NULL or points at room for one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_nm_plan_shape(
    plan: *const nms_nm_plan,
    m: *mut usize,
    k: *mut usize,
    n: *mut usize,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let plan = unsafe { arg(plan, "plan") }?;
        for (out, value) in [m, k, n].into_iter().zip(plan.shape) {
            if !out.is_null() {
                // SAFETY: non-NULL, room for one size_t by the contract.
                unsafe { put(out, value, "shape") }?;
            }
        }
        Ok(())
    })
}

/// Runs the plan: `c = A·B` with the dense operand `dense` — A (`m×k`) for a plan of B, B
/// (`k×n`) for a plan of A in `nv24` — and `c` (`m×n`), both row-major arrays of the plan's
/// value type (`float` on CUDA), overwritten. With `NMS_MEMORY_HOST` they are host arrays and
/// the call returns when `c` is written; with `NMS_MEMORY_DEVICE` (CUDA plans) they are device
/// memory of the plan's device, checked with the driver to be allocations that hold them, and
/// the run is queued on `stream` (a `cudaStream_t`/`CUstream` of that device; NULL: the
/// plan's own) and the call returns without waiting: synchronize the stream before reading
/// `c` on the host. A run on one stream after a run on another waits for it. `stream` must be
/// NULL for CPU plans.
///
/// # Safety
/// `plan` is a live plan; `dense` and `c` hold the element counts above in the memory named
/// by `memory` (`c` not overlapping `dense`), and with `NMS_MEMORY_DEVICE` stay allocated,
/// unwritten by other work, until the run is done; `stream` is NULL or a live stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_nm_plan_run(
    plan: *const nms_nm_plan,
    dense: *const c_void,
    c: *mut c_void,
    memory: nms_memory,
    stream: *mut c_void,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let plan = unsafe { arg(plan, "plan") }?;
        if memory != NMS_MEMORY_HOST && memory != NMS_MEMORY_DEVICE {
            return Err(Failure::invalid(format!(
                "memory {memory} is neither NMS_MEMORY_HOST ({NMS_MEMORY_HOST}) nor NMS_MEMORY_DEVICE ({NMS_MEMORY_DEVICE})"
            )));
        }
        let mut inner = plan.inner.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *inner {
            // SAFETY: the arrays and the stream by the contract above.
            AnyPlan::CpuF32(p) => unsafe { run_cpu(p, dense.cast(), c.cast(), memory, stream) },
            // SAFETY: as above.
            AnyPlan::CpuF64(p) => unsafe { run_cpu(p, dense.cast(), c.cast(), memory, stream) },
            // SAFETY: as above.
            AnyPlan::Cuda(p) => unsafe { run_cuda(p, dense.cast(), c.cast(), memory, stream) },
        }
    })
}

/// A CUDA plan's run, on host or device memory.
///
/// # Safety
/// [`nms_nm_plan_run`]'s contract.
unsafe fn run_cuda(
    plan: &mut nms::cuda::Plan,
    dense: *const f32,
    c: *mut f32,
    memory: nms_memory,
    stream: *mut c_void,
) -> Result<(), Failure> {
    let [m, _, n] = plan.shape();
    let gpu = plan.gpu().clone();
    let stream = if stream.is_null() {
        None
    } else {
        // SAFETY: a live stream by the contract; its context is checked.
        Some(unsafe { gpu.borrow_stream(stream.cast()) }?)
    };
    if memory == NMS_MEMORY_HOST {
        // SAFETY: host arrays of these counts by the contract.
        let (dense, c) = unsafe { (arg_slice(dense, plan.dense_len(), "dense")?, arg_out_slice(c, m * n, "c")?) };
        return Ok(plan.run_host(dense, c, stream.as_ref())?);
    }
    if dense.is_null() || c.is_null() {
        return Err(Failure::null(if dense.is_null() { "dense" } else { "c" }));
    }
    // SAFETY: device memory by the contract; the driver confirms each range lies in one
    // allocation of the plan's device, and the borrowed slices never free it.
    let (dense, mut c) = unsafe {
        (gpu.borrow_device::<f32>(dense as u64, plan.dense_len())?, gpu.borrow_device::<f32>(c as u64, m * n)?)
    };
    Ok(plan.run(&dense, &mut c, stream.as_ref())?)
}

/// A CPU plan's run, on host memory only.
///
/// # Safety
/// [`nms_nm_plan_run`]'s contract.
unsafe fn run_cpu<T: Real + 'static>(
    plan: &CpuPlan<T>,
    dense: *const T,
    c: *mut T,
    memory: nms_memory,
    stream: *mut c_void,
) -> Result<(), Failure> {
    if memory != NMS_MEMORY_HOST || !stream.is_null() {
        return Err(Failure::invalid("a CPU plan runs on host memory (NMS_MEMORY_HOST) with no stream (NULL)"));
    }
    let [m, _, n] = plan.shape;
    // SAFETY: host arrays of these counts by the contract.
    let (dense, c) = unsafe { (arg_slice(dense, plan.dense_len(), "dense")?, arg_out_slice(c, m * n, "c")?) };
    plan.run(dense, c)
}

/// Releases a plan (NULL is allowed) and, for a CUDA plan, its device memory.
///
/// # Safety
/// `plan` is NULL or a plan from this library, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_nm_plan_free(plan: *mut nms_nm_plan) {
    // SAFETY: the contract above.
    unsafe { release(plan) }
}
