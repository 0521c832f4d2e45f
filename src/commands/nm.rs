//! `-device=cuda`: the N:M SpMM route of [`crate::Kernel`] run by nm-cuda on a GPU (the CPU
//! runs it through the library).

use std::any::Any;
use std::time::{Duration, Instant};

use nm_format::{Format, Tensor};

use super::CommandError;
use crate::api::{NmOperand, NmSpmm};

/// `-device=`: where the N:M SpMM runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    /// nm-spmm on the CPU.
    #[default]
    Cpu,
    /// nm-cuda on the CUDA device with this ordinal.
    Cuda(usize),
}

impl std::str::FromStr for Device {
    type Err = CommandError;
    fn from_str(s: &str) -> Result<Device, CommandError> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|o| o.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| CommandError(format!("-device={s}: expected cpu, cuda or cuda:N"))),
        }
    }
}

/// A GPU run of `C = A·B`: the result, what ran, the set-up time (device, upload, tables,
/// kernel compilation) and each run's time (kernel to completion; A and C stay on the device).
pub(crate) struct CudaRun<T> {
    pub result: Tensor<T>,
    pub note: String,
    pub setup: Duration,
    pub times: Vec<Duration>,
}

/// Runs `C = A·B` on CUDA device `ordinal`, `reps` times. The GPU kernels take f32 operands
/// (B in nm(N,M,L): f32 kernels; A in nv24: the sparse tensor cores, which read bf16 — how many
/// values that rounding changed is reported, never hidden); other value types are refused,
/// never converted silently.
pub(crate) fn run_cuda<T: Any + Clone>(
    route: &NmSpmm,
    a: &Tensor<T>,
    b: &Tensor<T>,
    ordinal: usize,
    reps: usize,
) -> Result<CudaRun<T>, CommandError> {
    let (Some(a), Some(b)) =
        ((a as &dyn Any).downcast_ref::<Tensor<f32>>(), (b as &dyn Any).downcast_ref::<Tensor<f32>>())
    else {
        return Err(CommandError("-device=cuda runs the f32 N:M kernels: add -type=f32".into()));
    };
    let start = Instant::now();
    let gpu = nm_cuda::Gpu::open(ordinal).map_err(cuda)?;
    let (values, note, setup, times) = match route.structured {
        NmOperand::B(_) => run_nm_b(&gpu, a, b, reps, start)?,
        NmOperand::ANv24 => run_nv24_a(&gpu, a, b, reps, start)?,
    };
    let [m, n] = [a.shape()[0], b.shape()[1]];
    let result: Box<dyn Any> = Box::new(Tensor::from_dense(&[m, n], &values, &Format::dense(2))?);
    let result = *result.downcast::<Tensor<T>>().expect("T is f32, checked above");
    Ok(CudaRun { result, note, setup, times })
}

fn cuda(e: nm_cuda::CudaError) -> CommandError {
    CommandError(format!("-device=cuda: {e}"))
}

/// C's values, the note, the set-up time and each run's time.
type GpuRun = (Vec<f32>, String, Duration, Vec<Duration>);

/// Runs `reps` times, synchronizing after each.
fn timed(
    gpu: &nm_cuda::Gpu,
    reps: usize,
    mut run: impl FnMut() -> nm_cuda::Result<()>,
) -> Result<Vec<Duration>, CommandError> {
    let mut times = Vec::new();
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        run().map_err(cuda)?;
        gpu.synchronize().map_err(cuda)?;
        times.push(t.elapsed());
    }
    Ok(times)
}

/// B in nm(N,M,L): nm-cuda's f32 kernel chosen by shape and sparsity.
fn run_nm_b(
    gpu: &nm_cuda::Gpu,
    a: &Tensor<f32>,
    b: &Tensor<f32>,
    reps: usize,
    start: Instant,
) -> Result<GpuRun, CommandError> {
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let parts = b.nm_parts()?;
    if parts.shape[0] != k {
        return Err(cuda(nm_cuda::CudaError::Inner { m, k, rows: parts.shape[0] }));
    }
    let n = parts.shape[1];
    let mut dev = nm_cuda::GpuNm::upload(gpu, &parts).map_err(cuda)?;
    let launch = dev.prepare(gpu, m, nm_cuda::Options::default()).map_err(cuda)?;
    let a_dev = gpu.upload(a.values()).map_err(cuda)?;
    let mut c = gpu.zeros::<f32>(m * n).map_err(cuda)?;
    let mut work = gpu.zeros::<f32>(launch.workspace(n)).map_err(cuda)?;
    let setup = start.elapsed();
    let times = timed(gpu, reps, || dev.run(gpu, &launch, &a_dev, &mut c, &mut work))?;
    let mut values = gpu.download(&c).map_err(cuda)?;
    values.truncate(m * n);
    let note = format!(
        "// C = A·B with B in nm({},{},{}): nm-cuda's {} on {}, not generated code\n",
        parts.n,
        parts.m,
        parts.l,
        nm_cuda::kernels::Variant::f32(&launch.plan.kernel).label,
        gpu.describe()
    );
    Ok((values, note, setup, times))
}

/// A in nv24: the 2:4 kernel on the sparse tensor cores, A and B rounded to bf16.
fn run_nv24_a(
    gpu: &nm_cuda::Gpu,
    a: &Tensor<f32>,
    b: &Tensor<f32>,
    reps: usize,
    start: Instant,
) -> Result<GpuRun, CommandError> {
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    if b.shape()[0] != k {
        return Err(cuda(nm_cuda::CudaError::Inner { m, k, rows: b.shape()[0] }));
    }
    let rounded = |x: f32| nm_cuda::from_bf16(nm_cuda::to_bf16(x));
    let changed: Vec<f32> =
        a.values().iter().chain(b.values()).filter(|&&x| rounded(x) != x).map(|&x| (rounded(x) - x).abs()).collect();
    if !changed.is_empty() {
        let largest = changed.iter().copied().fold(0.0f32, f32::max);
        eprintln!(
            "note: -device=cuda runs A in nv24 on the sparse tensor cores in bf16: {} values of A and B \
             were rounded (largest change {largest:e}); C accumulates in f32",
            changed.len()
        );
    }
    let dev = nm_cuda::GpuNv24::upload(gpu, &nm_cuda::Nv24Sp::compress(a).map_err(cuda)?).map_err(cuda)?;
    let launch = dev.prepare(gpu, n, None, None).map_err(cuda)?;
    let (padded, ldb) = nm_cuda::bf16_padded_rows(b.values(), n);
    let b_dev = gpu.upload(&padded).map_err(cuda)?;
    let mut c = gpu.zeros::<f32>((m * n).max(1)).map_err(cuda)?;
    let mut work = gpu.zeros::<f32>(launch.workspace(m)).map_err(cuda)?;
    let setup = start.elapsed();
    let times = timed(gpu, reps, || dev.run(gpu, &launch, &b_dev, ldb, &mut c, &mut work))?;
    let mut values = gpu.download(&c).map_err(cuda)?;
    values.truncate(m * n);
    let note = format!(
        "// C = A·B with A in nv24: nm-cuda's {} on {}, bf16 operands and f32 accumulation, not generated code\n",
        nm_cuda::kernels::Variant::nv24_sp(&launch.kernel).label,
        gpu.describe()
    );
    Ok((values, note, setup, times))
}
