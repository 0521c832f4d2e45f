//! A plan that lives on the device, as cuSPARSELt's does: the structured operand compressed and
//! uploaded once, its kernel chosen, compiled and given its workspace once, then any number of
//! products against it. The other operand and C may be device memory (nothing is copied) or
//! host memory (copied through buffers the plan keeps); runs queue on the plan's stream or on
//! one the caller owns.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use nm_format::NmParts;

use crate::error::{CudaError, Result};
use crate::gpu::{Gpu, GpuNm, GpuNv24, Nv24Launch, SpmmLaunch, host_filled};
use crate::kernels::Variant;
use crate::nv24::Nv24Sp;
use crate::plan::{F32Plan, Nv24Kernel, Options, TileSize};

/// `C = A·B` against one structured operand kept on the device.
pub struct Plan {
    gpu: Gpu,
    product: Product,
    /// `[m, k, n]`.
    shape: [usize; 3],
    /// Split-K partial products (one float when k is not split).
    work: CudaSlice<f32>,
    /// The dense operand and C of runs given host memory, allocated by the first such run.
    staged: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    /// The end of the last run: a run on another stream waits for it, since the workspace and
    /// the staging buffers are the plan's own.
    last: Option<CudaEvent>,
}

enum Product {
    /// B in `nm(N,M,L)`; A is the dense operand.
    Nm { b: GpuNm, launch: SpmmLaunch },
    /// A in `nv24`; B is the dense operand, rounded to bf16 rows of `ldb` values in `b16`.
    Nv24 { a: GpuNv24, launch: Nv24Launch, b16: CudaSlice<u16>, ldb: usize, to_bf16: CudaFunction },
}

impl Plan {
    /// A plan for `C = A·B` with B (`k×n`, `nm(N,M,L)`, f32) on the device and A dense with
    /// `m` rows: the f32 kernel chosen by shape and sparsity (or as `options` fix it), its
    /// index tables built and uploaded, the kernel compiled (or read from the CUBIN cache).
    pub fn nm(gpu: &Gpu, b: &NmParts<f32>, m: usize, options: Options) -> Result<Plan> {
        let [k, n] = b.shape;
        check_dims([m, k, n])?;
        let mut dev = GpuNm::upload(gpu, b)?;
        let launch = dev.prepare(gpu, m, options)?;
        let work = gpu.zeros::<f32>(launch.workspace(n))?;
        let product = Product::Nm { b: dev, launch };
        Ok(Plan { gpu: gpu.clone(), product, shape: [m, k, n], work, staged: None, last: None })
    }

    /// A plan for `C = A·B` with A (`m×k`, `nv24`) compressed on the device and B dense with
    /// `n` columns, on the 2:4 sparse tensor cores: B is rounded to bf16 on the device at each
    /// run (as [`crate::to_bf16`] rounds), C accumulates in f32. `tile` and `slices` as given,
    /// else chosen by shape. The kernel runs once here, on a zero B.
    pub fn nv24(gpu: &Gpu, a: &Nv24Sp, n: usize, tile: Option<TileSize>, slices: Option<usize>) -> Result<Plan> {
        let [m, k] = a.shape();
        check_dims([m, k, n])?;
        let dev = GpuNv24::upload(gpu, a)?;
        let launch = dev.prepare(gpu, n, tile, slices)?;
        let mut work = gpu.zeros::<f32>(launch.workspace(m))?;
        let ldb = n.next_multiple_of(8);
        let b16 = gpu.zeros::<u16>(k * ldb)?;
        let to_bf16 = gpu.function(&Variant::to_bf16())?;
        // The sparse tensor-core kernel's first launch in a process costs far more than a run
        // (measured, cause unknown; BENCHMARKS.md, "Plans on the device"): it is launched
        // once here, on the zero B, so that the plan's creation carries that cost, not its
        // first run.
        dev.run(gpu, &launch, &b16, ldb, &mut gpu.zeros::<f32>(m * n)?, &mut work)?;
        let product = Product::Nv24 { a: dev, launch, b16, ldb, to_bf16 };
        Ok(Plan { gpu: gpu.clone(), product, shape: [m, k, n], work, staged: None, last: None })
    }

    /// `[m, k, n]` of the product.
    pub fn shape(&self) -> [usize; 3] {
        self.shape
    }

    /// Values of the dense operand a run takes: A's `m·k` for a plan of B in `nm(N,M,L)`,
    /// B's `k·n` for a plan of A in `nv24` (both row-major).
    pub fn dense_len(&self) -> usize {
        let [m, k, n] = self.shape;
        match self.product {
            Product::Nm { .. } => m * k,
            Product::Nv24 { .. } => k * n,
        }
    }

    /// Useful flops of one run (the kept entries' multiply-adds, two flops each).
    pub fn flops(&self) -> f64 {
        match &self.product {
            Product::Nm { b, .. } => b.flops(self.shape[0]),
            Product::Nv24 { a, .. } => a.flops(self.shape[2]),
        }
    }

    /// What runs, for reports: the kernel variant and the device.
    pub fn describe(&self) -> String {
        let kernel = match &self.product {
            Product::Nm { launch, .. } => Variant::f32(&launch.plan.kernel).label,
            Product::Nv24 { launch, .. } => Variant::nv24_sp(&launch.kernel).label,
        };
        format!("{kernel} on {}", self.gpu.describe())
    }

    /// The device the plan lives on.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Queues `c = A·B` with the dense operand and C (row-major, at least
    /// [`Plan::dense_len`] and `m·n` values) in device memory, on `stream` (of the plan's
    /// device) or the plan's own; returns without waiting.
    pub fn run(
        &mut self,
        dense: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
        stream: Option<&Arc<CudaStream>>,
    ) -> Result<()> {
        let [m, _, n] = self.shape;
        if dense.len() < self.dense_len() || c.len() < m * n {
            return Err(CudaError::Unsupported(format!(
                "device buffers too short for this plan: {} values for the dense operand (needs {}), {} for C (needs {m}×{n})",
                dense.len(),
                self.dense_len(),
                c.len()
            )));
        }
        let gpu = self.on(stream)?;
        self.product.queue(&gpu, self.shape, dense, c, &mut self.work)?;
        self.last = Some(gpu.stream().record_event(None)?);
        Ok(())
    }

    /// `c = A·B` with the dense operand and C in host memory (row-major, exactly
    /// [`Plan::dense_len`] and `m·n` values), copied through the plan's device buffers on
    /// `stream` or the plan's own; returns when C is written.
    pub fn run_host(&mut self, dense: &[f32], c: &mut [f32], stream: Option<&Arc<CudaStream>>) -> Result<()> {
        let [m, k, n] = self.shape;
        if dense.len() != self.dense_len() || c.len() != m * n {
            let operand = match self.product {
                Product::Nm { .. } => format!("A must be {m}×{k}"),
                Product::Nv24 { .. } => format!("B must be {k}×{n}"),
            };
            return Err(CudaError::Unsupported(format!(
                "this plan multiplies {m}×{k} by {k}×{n}: {operand} ({} values given) and C {m}×{n} ({} given)",
                dense.len(),
                c.len()
            )));
        }
        let gpu = self.on(stream)?;
        let (dense_dev, c_dev) = match &mut self.staged {
            Some(staged) => staged,
            staged => staged.insert((gpu.zeros::<f32>(dense.len())?, gpu.zeros::<f32>(c.len())?)),
        };
        gpu.stream().memcpy_htod(dense, &mut dense_dev.slice_mut(..dense.len()))?;
        self.product.queue(&gpu, self.shape, dense_dev, c_dev, &mut self.work)?;
        gpu.stream().memcpy_dtoh(&c_dev.slice(..c.len()), c)?;
        self.last = Some(gpu.stream().record_event(None)?);
        gpu.synchronize()
    }

    /// The plan's device on `stream` (or its own), ordered after the plan's last run.
    fn on(&self, stream: Option<&Arc<CudaStream>>) -> Result<Gpu> {
        let gpu = stream.map_or_else(|| self.gpu.clone(), |s| self.gpu.with_stream(s.clone()));
        if gpu.stream().context().cu_ctx() != self.gpu.context().cu_ctx() {
            return Err(CudaError::Unsupported("the stream belongs to another device context than the plan".into()));
        }
        if let Some(last) = &self.last {
            gpu.stream().wait(last)?;
        }
        Ok(gpu)
    }
}

impl Product {
    /// Queues `c = A·B` on `gpu`'s stream; the buffers' lengths are checked by the caller.
    fn queue(
        &mut self,
        gpu: &Gpu,
        [_, k, n]: [usize; 3],
        dense: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
        work: &mut CudaSlice<f32>,
    ) -> Result<()> {
        match self {
            Product::Nm { b, launch } => b.run(gpu, launch, dense, c, work),
            Product::Nv24 { a, launch, b16, ldb, to_bf16 } => {
                round_rows(gpu, to_bf16, dense, b16, [k, n, *ldb])?;
                a.run(gpu, launch, b16, *ldb, c, work)
            }
        }
    }
}

/// The kernels take every dimension as a 32-bit integer and need each of them: an empty or a
/// larger product is refused when the plan is made.
fn check_dims([m, k, n]: [usize; 3]) -> Result<()> {
    if m == 0 || k == 0 || n == 0 {
        return Err(CudaError::Unsupported(format!(
            "empty product {m}×{k} · {k}×{n}: the GPU kernels need m, k, n ≥ 1"
        )));
    }
    if [m, k, n].iter().any(|&d| d > i32::MAX as usize) {
        return Err(CudaError::Unsupported(format!("{m}×{k} · {k}×{n}: the GPU kernels take dimensions below 2^31")));
    }
    Ok(())
}

/// `C = A·B` on the GPU, host to host: `a` row-major `m×k`, B in `nm(N,M,L)`, f32; C and the
/// kernel chosen. A plan made and run once.
pub fn multiply(gpu: &Gpu, a: &[f32], m: usize, b: &NmParts<f32>, options: Options) -> Result<(Vec<f32>, F32Plan)> {
    let [k, n] = b.shape;
    if a.len() != m * k {
        return Err(CudaError::Inner { m, k: a.len().checked_div(m).unwrap_or(0), rows: k });
    }
    let mut plan = Plan::nm(gpu, b, m, options)?;
    let mut c = host_filled(m * n, 0.0, "values of C")?;
    plan.run_host(a, &mut c, None)?;
    let Product::Nm { launch, .. } = plan.product else { unreachable!("Plan::nm makes an nm product") };
    Ok((c, launch.plan))
}

/// `C = A·B` on the sparse tensor cores, host to host: A in `nv24`, `b` row-major `k×n`; A
/// and B are rounded to bf16, C is f32. Returns C, the launch's parameter set and its split-K
/// slices. A plan made and run once.
pub fn multiply_nv24(
    gpu: &Gpu,
    a: &nm_format::Tensor<f32>,
    b: &[f32],
    n: usize,
    tile: Option<TileSize>,
    slices: Option<usize>,
) -> Result<(Vec<f32>, Nv24Kernel, usize)> {
    let (m, k) = (a.shape()[0], a.shape()[1]);
    if b.len() != k * n {
        return Err(CudaError::Inner { m, k, rows: b.len().checked_div(n).unwrap_or(0) });
    }
    let mut plan = Plan::nv24(gpu, &Nv24Sp::compress(a)?, n, tile, slices)?;
    let mut c = host_filled(m * n, 0.0, "values of C")?;
    plan.run_host(b, &mut c, None)?;
    let Product::Nv24 { launch, .. } = plan.product else { unreachable!("Plan::nv24 makes an nv24 product") };
    Ok((c, launch.kernel, launch.slices))
}

/// `dst` (rows×ld bf16) = `src` (rows×cols f32) rounded, columns cols..ld zero.
fn round_rows(
    gpu: &Gpu,
    function: &CudaFunction,
    src: &CudaSlice<f32>,
    dst: &mut CudaSlice<u16>,
    [rows, cols, ld]: [usize; 3],
) -> Result<()> {
    let cfg = LaunchConfig {
        grid_dim: ((ld / 8).div_ceil(256) as u32, rows.clamp(1, 65_535) as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (rows, cols, ld) = (rows as i64, cols as i32, ld as i32);
    let mut builder = gpu.stream().launch_builder(function);
    builder.arg(src).arg(dst).arg(&rows).arg(&cols).arg(&ld);
    // SAFETY: `nm_f32_to_bf16_rows(src, dst, rows, cols, ld)`: the plan's callers checked that
    // `src` holds rows·cols values, `dst` was allocated with rows·ld (ld a multiple of 8, so
    // every 16-byte store is aligned and within it); the kernel touches no other index.
    unsafe { builder.launch(cfg) }?;
    Ok(())
}

/// Device memory the caller owns, seen as a slice for the length of one call and never freed
/// here (the C library's device operands).
pub struct Borrowed<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
}

impl<T> Deref for Borrowed<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> DerefMut for Borrowed<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> Drop for Borrowed<T> {
    fn drop(&mut self) {
        // SAFETY: the slice is taken once, here, and never used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        // The memory stays the caller's: let go of it without freeing.
        slice.leak();
    }
}

impl Gpu {
    /// `len` values of `T` at device address `ptr`, refused unless the driver knows them as
    /// one allocation of this device's context (a host pointer, a freed one or a range that
    /// runs past its allocation is an error, not a fault).
    ///
    /// # Safety
    /// The memory must stay allocated, and no other work may write it while a run that reads
    /// or writes it is queued, until the returned value is dropped and that run is done.
    pub unsafe fn borrow_device<T: DeviceRepr>(&self, ptr: u64, len: usize) -> Result<Borrowed<T>> {
        use cudarc::driver::sys;
        let bytes = len.checked_mul(size_of::<T>()).ok_or_else(|| {
            CudaError::Unsupported(format!("{len} values of {} bytes overflow an address", size_of::<T>()))
        })?;
        self.context().bind_to_thread()?;
        // Asked first with cuPointerGetAttributes, which answers for any address (a host one
        // too) without failing, so a refusal raises no driver error.
        let (mut kind, mut ordinal, mut managed) = (0u64, -1i64, 0u64);
        let mut asked = [
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        ];
        let mut answers = [&mut kind as *mut u64, &mut ordinal as *mut i64 as *mut u64, &mut managed as *mut u64]
            .map(|p| p.cast::<std::ffi::c_void>());
        // SAFETY: three attributes with room for each answer (at most 8 bytes); nothing is read
        // or written at `ptr`.
        let status = unsafe { sys::cuPointerGetAttributes(3, asked.as_mut_ptr(), answers.as_mut_ptr(), ptr) };
        let device = kind == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u64
            || kind == sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED as u64
            || managed != 0;
        if status != sys::CUresult::CUDA_SUCCESS || !device {
            return Err(CudaError::Unsupported(format!("{ptr:#x} is not device memory of {}", self.describe())));
        }
        let ours = self.context().ordinal() as i64;
        if managed == 0 && (ordinal as i32) as i64 != ours {
            return Err(CudaError::Unsupported(format!(
                "{ptr:#x} is memory of CUDA device {}, not of device {ours} ({})",
                ordinal as i32,
                self.describe()
            )));
        }
        let (mut base, mut size) = (0, 0);
        // SAFETY: asks the driver about an address it knows as device memory; nothing is read
        // or written there.
        let found = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
        if found != sys::CUresult::CUDA_SUCCESS {
            return Err(CudaError::Unsupported(format!(
                "{ptr:#x} is not device memory of {} ({found:?})",
                self.describe()
            )));
        }
        if ptr - base + bytes as u64 > size as u64 {
            return Err(CudaError::Unsupported(format!(
                "{bytes} bytes at {ptr:#x} run past the end of its allocation ({size} bytes at {base:#x})"
            )));
        }
        // SAFETY: `ptr` lies in a live allocation with room for `len` values (checked above);
        // the slice is leaked, never freed, when the `Borrowed` is dropped.
        let slice = unsafe { self.stream().upgrade_device_ptr::<T>(ptr, len) };
        Ok(Borrowed { slice: ManuallyDrop::new(slice) })
    }

    /// A stream the caller created on this device's context (a `CUstream`, which is also what
    /// the runtime's `cudaStream_t` is), for queueing plan runs; refused when the driver says
    /// it belongs to another context. The caller keeps it alive and orders its other work.
    ///
    /// # Safety
    /// `raw` is a live stream handle (or NULL, the legacy default stream), not destroyed
    /// while the returned value or work queued through it is in use.
    pub unsafe fn borrow_stream(&self, raw: *mut std::ffi::c_void) -> Result<Arc<CudaStream>> {
        use cudarc::driver::sys;
        let stream = raw as sys::CUstream;
        self.context().bind_to_thread()?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: asks the driver which context the caller's live stream belongs to.
        let found = unsafe { sys::cuStreamGetCtx(stream, &mut ctx) };
        if found != sys::CUresult::CUDA_SUCCESS || ctx != self.context().cu_ctx() {
            return Err(CudaError::Unsupported(format!(
                "stream {raw:p} does not belong to the context of {} ({found:?})",
                self.describe()
            )));
        }
        // SAFETY: a live stream of this context (checked above) that the caller keeps alive.
        Ok(unsafe { self.context().wrap_borrowed_stream(stream) })
    }
}
