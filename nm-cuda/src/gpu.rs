//! The device: opening it without panicking when there is none, loading kernels, launching the
//! N:M SpMM, and the cuBLAS baseline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use nm_format::NmParts;

use crate::error::{CudaError, Result};
use crate::kernels::Variant;
use crate::nv24::Nv24Sp;
use crate::nvrtc;
use crate::plan::{
    Bf16Kernel, DeviceLimits, F32Kernel, F32Plan, Nv24Kernel, Options, Tables, TileSize, plan_f32, tables,
};

/// Why there is no usable CUDA device here, or `None` when there is one. Never panics: the
/// driver library is probed before cudarc touches it (cudarc panics when `libcuda` is absent).
pub fn unavailable() -> Option<CudaError> {
    // SAFETY: probes for the driver library with dlopen; nothing of it is called.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Some(CudaError::NoDriver);
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => None,
        Ok(_) => Some(CudaError::NoDevice(None)),
        Err(e) => Some(e.into()),
    }
}

/// Loaded modules by entry point and NVRTC options.
type Modules = HashMap<(String, Vec<String>), Arc<CudaModule>>;

/// An open CUDA device with its stream and loaded kernels. A clone shares the context and
/// the loaded kernels; [`Gpu::with_stream`] makes one that queues work on another stream.
#[derive(Clone)]
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    limits: DeviceLimits,
    name: String,
    clock_khz: usize,
    modules: Arc<Mutex<Modules>>,
}

impl Gpu {
    /// Opens device `ordinal`; an ordinary error when there is no driver or no such device.
    pub fn open(ordinal: usize) -> Result<Gpu> {
        if let Some(e) = unavailable() {
            return Err(e);
        }
        let count = CudaContext::device_count()? as usize;
        if ordinal >= count {
            return Err(CudaError::NoDevice(Some(ordinal)));
        }
        let ctx = CudaContext::new(ordinal)?;
        let (major, minor) = ctx.compute_capability()?;
        let attr = |a| ctx.attribute(a).map(|v| v.max(0) as usize);
        let limits = DeviceLimits {
            sms: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            cc: (major as u32, minor as u32),
            smem_optin: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        };
        let clock_khz = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?;
        let name = ctx.name()?;
        let stream = ctx.default_stream();
        Ok(Gpu { ctx, stream, limits, name, clock_khz, modules: Arc::new(Mutex::new(HashMap::new())) })
    }

    /// The device's limits the kernel choice depends on.
    pub fn limits(&self) -> DeviceLimits {
        self.limits
    }

    /// Name, compute capability, SMs.
    pub fn describe(&self) -> String {
        let (ma, mi) = self.limits.cc;
        format!("{} (sm_{ma}{mi}, {} SMs, {} MHz)", self.name, self.limits.sms, self.clock_khz / 1000)
    }

    /// Peak FP32 rate in FLOP/s: SMs × FP32 lanes per SM × 2 × clock. Lanes per SM: 64 on
    /// sm_80 (A100) and sm_60/70, 128 on sm_86/89/90.
    pub fn fp32_peak(&self) -> f64 {
        let lanes = match self.limits.cc {
            (8, 0) | (7, _) | (6, _) => 64.0,
            _ => 128.0,
        };
        self.limits.sms as f64 * lanes * 2.0 * self.clock_khz as f64 * 1e3
    }

    /// The stream every call runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// This device with its kernels, queueing on `stream` (of this device's context).
    pub fn with_stream(&self, stream: Arc<CudaStream>) -> Gpu {
        Gpu { stream, ..self.clone() }
    }

    /// The context the device's memory and streams belong to.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The real architecture kernels are compiled for (`sm_90`, `sm_80`, …).
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.limits.cc.0, self.limits.cc.1)
    }

    /// `variant`'s entry point, compiled (or read from the CUBIN cache) on first use.
    pub fn function(&self, variant: &Variant) -> Result<CudaFunction> {
        let key = (variant.function.to_string(), variant.options.clone());
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        let module = match modules.get(&key) {
            Some(m) => m.clone(),
            None => {
                let compiled = nvrtc::cubin(variant.function, variant.source, &variant.options, &self.arch())?;
                let module = self.ctx.load_module(Ptx::from_binary(compiled.cubin))?;
                modules.insert(key, module.clone());
                module
            }
        };
        Ok(module.load_function(variant.function)?)
    }

    /// Copies `data` to the device.
    pub fn upload<T: cudarc::driver::DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        Ok(self.stream.clone_htod(data)?)
    }

    /// Copies `data` back, into memory reserved fallibly (too large is an error, not an abort).
    pub fn download<T: cudarc::driver::DeviceRepr + Default + Clone>(&self, data: &CudaSlice<T>) -> Result<Vec<T>> {
        let mut host = host_filled(data.len(), T::default(), "values from the device")?;
        self.stream.memcpy_dtoh(data, &mut host)?;
        self.stream.synchronize()?;
        Ok(host)
    }

    /// Zeroed device memory.
    pub fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>> {
        Ok(self.stream.alloc_zeros(len.max(1))?)
    }

    /// Waits for everything queued.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }

    /// Milliseconds `f` takes on the stream, measured with events around `reps` calls.
    pub fn time_ms(&self, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
        use cudarc::driver::sys::CUevent_flags;
        let start = self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let end = self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        start.record(&self.stream)?;
        for _ in 0..reps {
            f()?;
        }
        end.record(&self.stream)?;
        end.synchronize()?;
        Ok(start.elapsed_ms(&end)? as f64 / reps.max(1) as f64)
    }
}

/// A `k×n` matrix in `nm(N,M,L)` on the device: B′ and D, plus the index tables of each kernel
/// variant prepared for it.
pub struct GpuNm {
    parts: NmParts<f32>,
    b_prime: CudaSlice<f32>,
    prepared: HashMap<F32Kernel, (CudaSlice<i32>, CudaSlice<i32>)>,
}

/// One prepared f32 SpMM: the plan and its compiled kernels.
pub struct SpmmLaunch {
    /// What was chosen.
    pub plan: F32Plan,
    function: CudaFunction,
    m: usize,
}

impl GpuNm {
    /// Uploads `b` (its B′; the index tables are built per kernel variant by [`GpuNm::prepare`]).
    pub fn upload(gpu: &Gpu, b: &NmParts<f32>) -> Result<GpuNm> {
        Ok(GpuNm { parts: b.clone(), b_prime: gpu.upload(&b.b_prime)?, prepared: HashMap::new() })
    }

    /// B's logical shape `[k, n]`.
    pub fn shape(&self) -> [usize; 2] {
        self.parts.shape
    }

    /// Useful flops of `C = A·B` with `m` rows: `2·m·k·n·N/M`.
    pub fn flops(&self, m: usize) -> f64 {
        2.0 * m as f64 * self.parts.shape[0] as f64 * self.parts.shape[1] as f64 * self.parts.n as f64
            / self.parts.m as f64
    }

    /// Chooses (or takes from `options`) the kernel for `m` rows of A, builds its index tables
    /// once, and compiles it.
    pub fn prepare(&mut self, gpu: &Gpu, m: usize, options: Options) -> Result<SpmmLaunch> {
        let [k, n] = self.parts.shape;
        let nm = (self.parts.n as usize, self.parts.m as usize, self.parts.l);
        let plan = plan_f32(m, n, k, nm, gpu.limits(), options)?;
        self.prepare_plan(gpu, m, plan)
    }

    /// [`GpuNm::prepare`] for a plan the caller built (with [`crate::plan::plan_kernel`], for tuning
    /// sweeps): index tables and compilation.
    pub fn prepare_plan(&mut self, gpu: &Gpu, m: usize, plan: F32Plan) -> Result<SpmmLaunch> {
        let [k, n] = self.parts.shape;
        let nm = (self.parts.n as usize, self.parts.m as usize, self.parts.l);
        let covered = plan.slices * plan.steps_per_slice >= plan.kernel.steps(self.parts.rows());
        if plan.kernel.nm != nm
            || plan.grid.0 != n.div_ceil(plan.kernel.tile.ns)
            || plan.grid.1 != m.div_ceil(plan.kernel.tile.ms)
            || !covered
        {
            return Err(CudaError::Unsupported(format!(
                "a plan for {:?} on a {}-column grid does not fit this {k}×{n} nm{nm:?} operand with {m} rows",
                plan.kernel.nm, plan.grid.0
            )));
        }
        if !self.prepared.contains_key(&plan.kernel) {
            let Tables { dtab, col_info } = tables(&plan.kernel, &self.parts);
            let entry = (gpu.upload(&dtab)?, gpu.upload(if col_info.is_empty() { &[-1][..] } else { &col_info })?);
            self.prepared.insert(plan.kernel, entry);
        }
        let function = gpu.function(&Variant::f32(&plan.kernel))?;
        let bytes = plan.kernel.shared_bytes() as i32;
        function.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)?;
        if plan.slices > 1 {
            gpu.function(&Variant::reduce())?; // compiled (or loaded) now, not in the first run
        }
        Ok(SpmmLaunch { plan, function, m })
    }

    /// `c = a·B` with `a` row-major `m×k` and `c` row-major `m×n` on the device; `work` holds
    /// `slices·m·n` floats when the plan splits k (see [`SpmmLaunch::workspace`]).
    pub fn run(
        &self,
        gpu: &Gpu,
        launch: &SpmmLaunch,
        a: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
        work: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let [k, n] = self.parts.shape;
        let m = launch.m;
        if a.len() < m * k || c.len() < m * n || (launch.plan.slices > 1 && work.len() < launch.workspace(n)) {
            return Err(CudaError::Unsupported(format!(
                "device buffers too short for {m}×{k} · {k}×{n} (A {}, C {}, workspace {})",
                a.len(),
                c.len(),
                work.len()
            )));
        }
        let (dtab, col_info) = self
            .prepared
            .get(&launch.plan.kernel)
            .ok_or_else(|| CudaError::Unsupported("this launch was prepared for another matrix".into()))?;
        let plan = &launch.plan;
        let cfg = LaunchConfig {
            grid_dim: (plan.grid.0 as u32, plan.grid.1 as u32, plan.grid.2 as u32),
            block_dim: (plan.kernel.tile.threads() as u32, 1, 1),
            shared_mem_bytes: plan.kernel.shared_bytes() as u32,
        };
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let (w, np) = (self.parts.rows() as i32, self.parts.cols() as i32);
        let steps = plan.kernel.steps(self.parts.rows()) as i32;
        let per_slice = plan.steps_per_slice as i32;
        let out: &mut CudaSlice<f32> = if plan.slices > 1 { work } else { c };
        let mut builder = gpu.stream.launch_builder(&launch.function);
        builder.arg(a).arg(&self.b_prime).arg(dtab).arg(col_info).arg(out);
        builder.arg(&mi).arg(&ni).arg(&ki).arg(&w).arg(&np).arg(&steps).arg(&per_slice);
        // SAFETY: the argument list matches `nm_spmm_f32`'s signature; the buffers were checked
        // to hold m·k, m·n (or slices·m·n) elements, B′ and the tables were built for this plan,
        // and the kernel bounds-checks every access against m, n, k, W and np.
        unsafe { builder.launch(cfg) }?;
        if launch.plan.slices > 1 {
            reduce(gpu, c, work, m * n, launch.plan.slices)?;
        }
        Ok(())
    }
}

impl SpmmLaunch {
    /// Floats of split-K workspace needed for an output with `n` columns (1 when not split).
    pub fn workspace(&self, n: usize) -> usize {
        if self.plan.slices > 1 { self.plan.slices * self.m * n } else { 1 }
    }
}

/// `len` copies of `value` on the host, reserved fallibly: an array too large for memory is an
/// error naming `what`, not an abort.
pub(crate) fn host_filled<T: Clone>(len: usize, value: T, what: &str) -> Result<Vec<T>> {
    let mut host = Vec::new();
    host.try_reserve_exact(len)
        .map_err(|_| CudaError::Unsupported(format!("{len} {what} do not fit in host memory")))?;
    host.resize(len, value);
    Ok(host)
}

/// f32 → bf16 bits, rounding to nearest even (NaN stays NaN).
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    ((bits.wrapping_add(round)) >> 16) as u16
}

/// `b` (row-major, `n` columns) as bf16 bits in rows padded with zeros to a multiple of 8
/// columns, and that row length: B as [`GpuNv24::run`] takes it.
pub fn bf16_padded_rows(b: &[f32], n: usize) -> (Vec<u16>, usize) {
    let ldb = n.next_multiple_of(8);
    let mut padded = vec![0u16; b.len().checked_div(n).unwrap_or(0) * ldb];
    for (row, out) in b.chunks_exact(n.max(1)).zip(padded.chunks_exact_mut(ldb.max(1))) {
        for (x, o) in row.iter().zip(out.iter_mut()) {
            *o = to_bf16(*x);
        }
    }
    (padded, ldb)
}

/// bf16 bits → f32 (exact).
pub fn from_bf16(x: u16) -> f32 {
    f32::from_bits((x as u32) << 16)
}

/// B in `nm(N,M,L)` on the device in bf16 for the tensor-core kernel: B′ and raw D.
pub struct GpuNmBf16 {
    parts_shape: [usize; 2],
    w: usize,
    np: usize,
    groups: usize,
    nm: (usize, usize, usize),
    b_prime: CudaSlice<u16>,
    d: CudaSlice<u16>,
    /// D on the host too: window-staged launches derive their `need` mask from it.
    d_host: Vec<u16>,
}

/// One prepared launch of the tensor-core kernel for `m` rows of A, with what it reuses from
/// call to call: A's transposed copy (k×lda bf16), the split-K workspace and, staged by
/// windows, the `need` mask.
pub struct Bf16Launch {
    /// The parameter set.
    pub kernel: Bf16Kernel,
    /// Split-K slices (1 = none).
    pub slices: usize,
    /// Pipeline stages (of `kernel.kt` kept rows) per split-K slice.
    pub steps_per_slice: usize,
    m: usize,
    lda: usize,
    function: CudaFunction,
    transpose: CudaFunction,
    at: CudaSlice<u16>,
    work: CudaSlice<f32>,
    need: CudaSlice<u32>,
    need_words: usize,
}

impl GpuNmBf16 {
    /// Uploads `b` rounded to bf16.
    pub fn upload(gpu: &Gpu, b: &NmParts<f32>) -> Result<GpuNmBf16> {
        if gpu.limits().cc.0 < 8 {
            return Err(CudaError::Unsupported("bf16 mma.sync needs sm_80 or newer".into()));
        }
        let nm = (b.n as usize, b.m as usize, b.l);
        // Refuses an L the kernel cannot take before anything is uploaded.
        Bf16Kernel::new(TileSize::Small, nm)?;
        let bp: Vec<u16> = b.b_prime.iter().map(|&x| to_bf16(x)).collect();
        Ok(GpuNmBf16 {
            parts_shape: b.shape,
            w: b.rows(),
            np: b.cols(),
            groups: b.groups(),
            nm,
            b_prime: gpu.upload(&bp)?,
            d: gpu.upload(&b.d)?,
            d_host: b.d.clone(),
        })
    }

    /// B's shape `[k, n]`.
    pub fn shape(&self) -> [usize; 2] {
        self.parts_shape
    }

    /// The launch for `m` rows of A: `tile` and `slices` as given, else by shape (the largest
    /// tile still giving every SM a block, then split-K to fill the SMs); compiles it.
    pub fn prepare(&self, gpu: &Gpu, m: usize, tile: Option<TileSize>, slices: Option<usize>) -> Result<Bf16Launch> {
        let limits = gpu.limits();
        let n = self.parts_shape[1];
        let kernel = match tile {
            Some(t) => Bf16Kernel::new(t, self.nm)?.fit(limits)?,
            None => Bf16Kernel::choose(m, n, self.nm, limits)?,
        };
        self.prepare_kernel(gpu, m, kernel, slices)
    }

    /// The launch of the given variant for `m` rows of A (split-K `slices`, else chosen to
    /// fill the SMs); compiles it and allocates its scratch. For tuning sweeps.
    pub fn prepare_kernel(&self, gpu: &Gpu, m: usize, kernel: Bf16Kernel, slices: Option<usize>) -> Result<Bf16Launch> {
        let limits = gpu.limits();
        if kernel.nm != self.nm {
            return Err(CudaError::Unsupported(format!("{kernel:?} is built for another N:M than {:?}", self.nm)));
        }
        if kernel.shared_bytes() > limits.smem_optin {
            return Err(CudaError::Unsupported(format!(
                "{kernel:?} needs {} bytes of shared memory per block; the device allows {}",
                kernel.shared_bytes(),
                limits.smem_optin
            )));
        }
        let [k, n] = self.parts_shape;
        let steps = self.w.div_ceil(kernel.kt);
        let (slices, steps_per_slice) = crate::plan::split_k(slices, kernel.blocks(m, n), steps, limits.sms);
        let function = gpu.function(&Variant::bf16(&kernel))?;
        let bytes = kernel.shared_bytes() as i32;
        function.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)?;
        let transpose = gpu.function(&Variant::transpose_bf16())?;
        if slices > 1 {
            gpu.function(&Variant::reduce())?;
        }
        let lda = m.next_multiple_of(8);
        let at = gpu.zeros::<u16>((k * lda).max(1))?;
        let work = gpu.zeros::<f32>(if slices > 1 { slices * m * n } else { 1 })?;
        let (mask, need_words) = crate::plan::need_mask(&kernel, &self.d_host, self.w, self.groups, k, n);
        let need = if mask.is_empty() { gpu.zeros::<u32>(1)? } else { gpu.upload(&mask)? };
        Ok(Bf16Launch { kernel, slices, steps_per_slice, m, lda, function, transpose, at, work, need, need_words })
    }

    /// The first half of [`GpuNmBf16::run`]: `a` (bf16 bits, row-major `m×k`) transposed into
    /// the launch's scratch. Public so that a benchmark can time it alone.
    pub fn transpose(&self, gpu: &Gpu, launch: &mut Bf16Launch, a: &CudaSlice<u16>) -> Result<()> {
        let k = self.parts_shape[0];
        let (m, lda) = (launch.m, launch.lda);
        if a.len() < m * k {
            return Err(CudaError::Unsupported(format!("device buffer too short for A ({m}×{k})")));
        }
        if m == 0 || k == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (k.div_ceil(64) as u32, lda.div_ceil(64) as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let ints = [m, k, lda].map(|v| v as i32);
        let mut builder = gpu.stream.launch_builder(&launch.transpose);
        builder.arg(a).arg(&mut launch.at);
        for v in &ints {
            builder.arg(v);
        }
        // SAFETY: the arguments match `nm_bf16_transpose`'s signature; `a` holds m·k values
        // (checked), `at` k·lda (allocated by `prepare_kernel` for this m and B's k), and the
        // kernel bounds-checks every access against m, k and lda.
        unsafe { builder.launch(cfg) }?;
        Ok(())
    }

    /// `c = a·B` (a: bf16 bits, row-major `m×k`; c: f32 `m×n`) with a launch prepared for `m`.
    pub fn run(&self, gpu: &Gpu, launch: &mut Bf16Launch, a: &CudaSlice<u16>, c: &mut CudaSlice<f32>) -> Result<()> {
        let [k, n] = self.parts_shape;
        let (m, lda) = (launch.m, launch.lda);
        if a.len() < m * k || c.len() < m * n {
            return Err(CudaError::Unsupported(format!("device buffers too short for {m}×{k} · {k}×{n}")));
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        let kernel = launch.kernel;
        let steps = self.w.div_ceil(kernel.kt);
        if launch.slices * launch.steps_per_slice < steps {
            return Err(CudaError::Unsupported("this launch was prepared for a B with fewer rows".into()));
        }
        self.transpose(gpu, launch, a)?;
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(kernel.ns) as u32, m.div_ceil(kernel.ms) as u32, launch.slices as u32),
            block_dim: (kernel.threads() as u32, 1, 1),
            shared_mem_bytes: kernel.shared_bytes() as u32,
        };
        let ints = [m, n, k, lda, self.w, self.np, self.groups, launch.need_words, steps, launch.steps_per_slice]
            .map(|v| v as i32);
        let out: &mut CudaSlice<f32> = if launch.slices > 1 { &mut launch.work } else { c };
        let mut builder = gpu.stream.launch_builder(&launch.function);
        builder.arg(&launch.at).arg(&self.b_prime).arg(&self.d).arg(&launch.need).arg(out);
        for v in &ints {
            builder.arg(v);
        }
        // SAFETY: the arguments match `nm_spmm_bf16_tc`'s signature; `at` holds k·lda values,
        // B′ W×np and D W×G as uploaded, C m·n (checked) or the workspace slices·m·n
        // (allocated with the launch), `need` need_words words per block column (read only
        // by window-staged variants, for rows below steps·SPAN); the kernel bounds-checks
        // every other access against lda, k, W, np and G; the dynamic shared memory is the
        // variant's own size, opted in to by `prepare_kernel`.
        unsafe { builder.launch(cfg) }?;
        if launch.slices > 1 {
            reduce(gpu, c, &launch.work, m * n, launch.slices)?;
        }
        Ok(())
    }
}

/// A in `nv24` on the device for the 2:4 sparse tensor-core kernel: compressed values and
/// metadata words (see [`Nv24Sp`]).
pub struct GpuNv24 {
    m: usize,
    k: usize,
    kc: usize,
    row_tiles: usize,
    steps: usize,
    values: CudaSlice<u16>,
    meta: CudaSlice<u32>,
}

/// One prepared launch of the 2:4 sparse tensor-core kernel for an output with `n` columns.
pub struct Nv24Launch {
    /// The parameter set.
    pub kernel: Nv24Kernel,
    /// Split-K slices (1 = none).
    pub slices: usize,
    /// Pipeline stages (of `kernel.kstep` k32 slices) per split-K slice.
    pub stages_per_slice: usize,
    n: usize,
    function: CudaFunction,
}

impl GpuNv24 {
    /// Uploads a compressed A; the sparse tensor cores need sm_80 or newer.
    pub fn upload(gpu: &Gpu, a: &Nv24Sp) -> Result<GpuNv24> {
        if gpu.limits().cc.0 < 8 {
            return Err(CudaError::Unsupported("mma.sp (2:4 sparse tensor cores) needs sm_80 or newer".into()));
        }
        Ok(GpuNv24 {
            m: a.m,
            k: a.k,
            kc: a.kc,
            row_tiles: a.row_tiles,
            steps: a.steps,
            values: gpu.upload(&a.values)?,
            meta: gpu.upload(&a.meta)?,
        })
    }

    /// A's shape `[m, k]`.
    pub fn shape(&self) -> [usize; 2] {
        [self.m, self.k]
    }

    /// Useful flops of `C = A·B` with `n` columns: `2·m·k·n·2/4` (the kept half of A).
    pub fn flops(&self, n: usize) -> f64 {
        self.m as f64 * self.k as f64 * n as f64
    }

    /// The launch for `n` columns of B: `tile` and `slices` as given, else by shape (the
    /// largest tile still giving every SM a block, then split-K to fill the SMs); compiles it.
    pub fn prepare(&self, gpu: &Gpu, n: usize, tile: Option<TileSize>, slices: Option<usize>) -> Result<Nv24Launch> {
        let limits = gpu.limits();
        let kernel = tile.map_or_else(|| Nv24Kernel::choose(self.m, n, limits), |t| Nv24Kernel::new(t).fit(limits));
        self.prepare_kernel(gpu, n, kernel, slices)
    }

    /// The launch of the given variant for `n` columns of B (split-K `slices`, else chosen
    /// to fill the SMs); compiles it. For tuning sweeps and callers that fix every parameter.
    pub fn prepare_kernel(&self, gpu: &Gpu, n: usize, kernel: Nv24Kernel, slices: Option<usize>) -> Result<Nv24Launch> {
        let limits = gpu.limits();
        if kernel.shared_bytes() > limits.smem_optin {
            return Err(CudaError::Unsupported(format!(
                "{kernel:?} needs {} bytes of shared memory per block; the device allows {}",
                kernel.shared_bytes(),
                limits.smem_optin
            )));
        }
        let stages = kernel.stage_count(self.steps);
        let (slices, stages_per_slice) = crate::plan::split_k(slices, kernel.blocks(self.m, n), stages, limits.sms);
        let function = gpu.function(&Variant::nv24_sp(&kernel))?;
        let bytes = kernel.shared_bytes() as i32;
        function.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)?;
        if slices > 1 {
            gpu.function(&Variant::reduce())?;
        }
        Ok(Nv24Launch { kernel, slices, stages_per_slice, n, function })
    }

    /// `c = A·b` with `b` bf16 bits, row-major `k×ldb` (ldb a multiple of 8, ≥ n; columns
    /// n..ldb only reach outputs that are not stored) and `c` f32 row-major `m×n`; `work`
    /// holds [`Nv24Launch::workspace`] floats.
    pub fn run(
        &self,
        gpu: &Gpu,
        launch: &Nv24Launch,
        b: &CudaSlice<u16>,
        ldb: usize,
        c: &mut CudaSlice<f32>,
        work: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (m, k, n) = (self.m, self.k, launch.n);
        if !ldb.is_multiple_of(8) || ldb < n {
            return Err(CudaError::Unsupported(format!(
                "B's leading dimension {ldb} must be a multiple of 8 and at least n = {n}"
            )));
        }
        if b.len() < k * ldb || c.len() < m * n || (launch.slices > 1 && work.len() < launch.workspace(m)) {
            return Err(CudaError::Unsupported(format!(
                "device buffers too short for {m}×{k} · {k}×{n} (B {}, C {}, workspace {})",
                b.len(),
                c.len(),
                work.len()
            )));
        }
        let kernel = &launch.kernel;
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(kernel.ns) as u32, m.div_ceil(kernel.ms) as u32, launch.slices as u32),
            block_dim: (kernel.threads() as u32, 1, 1),
            shared_mem_bytes: kernel.shared_bytes() as u32,
        };
        let stages = kernel.stage_count(self.steps);
        if launch.slices * launch.stages_per_slice < stages {
            return Err(CudaError::Unsupported("this launch was prepared for a matrix with a shorter k".into()));
        }
        let ints =
            [m, n, k, self.kc, ldb, self.row_tiles, self.steps, stages, launch.stages_per_slice].map(|v| v as i32);
        let out: &mut CudaSlice<f32> = if launch.slices > 1 { work } else { c };
        let mut builder = gpu.stream.launch_builder(&launch.function);
        builder.arg(&self.values).arg(&self.meta).arg(b).arg(out);
        for v in &ints {
            builder.arg(v);
        }
        // SAFETY: the arguments match `nv24_spmm_sp`'s signature; the values (m·kc) and
        // metadata (steps·row_tiles·16) were uploaded from one `Nv24Sp`, B holds k·ldb with
        // ldb a multiple of 8 ≥ n, C m·n (or the workspace slices·m·n) — checked above — and
        // the kernel bounds-checks every access against m, k, ldb and row_tiles; the dynamic
        // shared memory is the variant's own size, opted in to by `prepare_kernel`.
        unsafe { builder.launch(cfg) }?;
        if launch.slices > 1 {
            reduce(gpu, c, work, m * n, launch.slices)?;
        }
        Ok(())
    }
}

impl Nv24Launch {
    /// Floats of split-K workspace for `m` rows (1 when not split).
    pub fn workspace(&self, m: usize) -> usize {
        if self.slices > 1 { self.slices * m * self.n } else { 1 }
    }
}

/// `c = Σ_z work[z·len..]`, in slice order.
fn reduce(gpu: &Gpu, c: &mut CudaSlice<f32>, work: &CudaSlice<f32>, len: usize, slices: usize) -> Result<()> {
    let function = gpu.function(&Variant::reduce())?;
    let cfg = LaunchConfig {
        grid_dim: (len.div_ceil(256).min(65535) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (len, slices) = (len as i64, slices as i32);
    let mut builder = gpu.stream.launch_builder(&function);
    builder.arg(c).arg(work).arg(&len).arg(&slices);
    // SAFETY: `nm_splitk_reduce(out, parts, len, slices)`: callers pass `c` of len floats and
    // `work` of slices·len, checked before their launch.
    unsafe { builder.launch(cfg) }?;
    Ok(())
}

/// The dense baseline: cuBLAS on row-major operands.
pub struct Cublas {
    handle: cudarc::cublas::CudaBlas,
}

impl Cublas {
    /// A cuBLAS handle on `gpu`'s stream; an error (not a panic) when libcublas is missing.
    pub fn new(gpu: &Gpu) -> Result<Cublas> {
        // SAFETY: probes for the shared library with dlopen; nothing of it is called.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(CudaError::Cublas("libcublas could not be loaded".into()));
        }
        Ok(Cublas { handle: cudarc::cublas::CudaBlas::new(gpu.stream.clone())? })
    }

    /// `c = a·b`, all row-major f32 (`m×k`, `k×n`, `m×n`): SGEMM on the transposed problem.
    pub fn sgemm(
        &self,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        use cudarc::cublas::Gemm;
        if a.len() < m * k || b.len() < k * n || c.len() < m * n {
            return Err(CudaError::Unsupported("device buffers too short for SGEMM".into()));
        }
        let cfg = row_major(m, n, k, 1.0f32, 0.0f32);
        // SAFETY: column-major Cᵀ (n×m) = Bᵀ (n×k) · Aᵀ (k×m) over buffers checked to hold
        // k·n, m·k and m·n floats with the leading dimensions given.
        unsafe { self.handle.gemm(cfg, b, a, c) }?;
        Ok(())
    }

    /// `c = a·b` in bf16 (f32 accumulation inside cuBLAS), row-major.
    pub fn bf16_gemm(
        &self,
        a: &CudaSlice<half::bf16>,
        b: &CudaSlice<half::bf16>,
        c: &mut CudaSlice<half::bf16>,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        use cudarc::cublas::Gemm;
        if a.len() < m * k || b.len() < k * n || c.len() < m * n {
            return Err(CudaError::Unsupported("device buffers too short for the bf16 GEMM".into()));
        }
        let cfg = row_major(m, n, k, half::bf16::ONE, half::bf16::ZERO);
        // SAFETY: as in `sgemm`, with bf16 buffers checked to hold k·n, m·k and m·n elements.
        unsafe { self.handle.gemm(cfg, b, a, c) }?;
        Ok(())
    }
}

/// `C = A·B` on row-major `m×k`, `k×n`, `m×n` operands as cuBLAS's column-major GEMM:
/// `Cᵀ (n×m) = Bᵀ (n×k) · Aᵀ (k×m)`, called with B first.
fn row_major<T>(m: usize, n: usize, k: usize, alpha: T, beta: T) -> cudarc::cublas::GemmConfig<T> {
    use cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N;
    cudarc::cublas::GemmConfig {
        transa: CUBLAS_OP_N,
        transb: CUBLAS_OP_N,
        m: n as i32,
        n: m as i32,
        k: k as i32,
        alpha,
        lda: n as i32,
        ldb: k as i32,
        beta,
        ldc: n as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_is_to_nearest_even() {
        assert_eq!(from_bf16(to_bf16(1.0)), 1.0);
        assert_eq!(from_bf16(to_bf16(-3.5)), -3.5);
        // 1 + 2^-8 lies halfway between two bf16 values: ties go to the even one (1.0).
        assert_eq!(from_bf16(to_bf16(1.0 + 1.0 / 256.0)), 1.0);
        assert_eq!(from_bf16(to_bf16(1.0 + 3.0 / 256.0)), 1.0 + 4.0 / 256.0);
        assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
        assert_eq!(from_bf16(to_bf16(f32::INFINITY)), f32::INFINITY);
    }

    #[test]
    fn no_device_is_an_error_not_a_panic() {
        match Gpu::open(0) {
            Ok(gpu) => println!("a CUDA device is present: {}", gpu.describe()),
            Err(e) => {
                assert!(matches!(e, CudaError::NoDriver | CudaError::NoDevice(_) | CudaError::Driver(_)), "{e}");
                println!("skipped: {e}");
            }
        }
        assert!(matches!(Gpu::open(1 << 20), Err(CudaError::NoDriver | CudaError::NoDevice(_))));
    }
}
