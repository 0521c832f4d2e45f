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

/// A GPU run of `C = A·B`: the result, what ran, the set-up time (the device opened, the
/// plan made — the structured operand compressed and uploaded, its kernel chosen and compiled —
/// and the dense operand uploaded) and each run's time (the plan's run to completion, the dense
/// operand and C staying on the device).
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
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    if b.shape()[0] != k {
        return Err(cuda(nm_cuda::CudaError::Inner { m, k, rows: b.shape()[0] }));
    }
    let (mut plan, dense, what) = match route.structured {
        NmOperand::B(_) => {
            let parts = b.nm_parts()?;
            let plan = nm_cuda::Plan::nm(&gpu, &parts, m, nm_cuda::Options::default()).map_err(cuda)?;
            (plan, a.values(), format!("B in nm({},{},{})", parts.n, parts.m, parts.l))
        }
        NmOperand::ANv24 => {
            report_bf16_rounding(a, b);
            let plan = nm_cuda::Nv24Sp::compress(a)
                .and_then(|sp| nm_cuda::Plan::nv24(&gpu, &sp, n, None, None))
                .map_err(cuda)?;
            (plan, b.values(), "A in nv24 (bf16 operands, f32 accumulation)".to_string())
        }
    };
    let dense = gpu.upload(dense).map_err(cuda)?;
    let mut c = gpu.zeros::<f32>(m * n).map_err(cuda)?;
    let setup = start.elapsed();
    let times = timed(&gpu, reps, || plan.run(&dense, &mut c, None))?;
    let mut values = gpu.download(&c).map_err(cuda)?;
    values.truncate(m * n);
    let note = format!("// C = A·B with {what}: nm-cuda's {}, not generated code\n", plan.describe());
    let result: Box<dyn Any> = Box::new(Tensor::from_dense(&[m, n], &values, &Format::dense(2))?);
    let result = *result.downcast::<Tensor<T>>().expect("T is f32, checked above");
    Ok(CudaRun { result, note, setup, times })
}

/// The sparse tensor cores read A and B in bf16: how many values that rounding changed is
/// reported, never hidden.
fn report_bf16_rounding(a: &Tensor<f32>, b: &Tensor<f32>) {
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
}

fn cuda(e: nm_cuda::CudaError) -> CommandError {
    CommandError(format!("-device=cuda: {e}"))
}

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
