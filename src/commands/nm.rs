//! `C(i,j) = A(i,k) * B(k,j)` with `B` in `nm(N,M,L)`, `A` and `C` dense: run by nm-spmm's
//! hand-written kernel (the lowering does not generate code for structured levels yet), on
//! the CPU or, with `-device=cuda`, by nm-cuda on a GPU.

use std::any::Any;
use std::time::{Duration, Instant};

use nm_format::{Format, Tensor};
use nm_ir::notation::{BinaryOp, Expr, IndexNotation, TensorId};
use nm_spmm::Isa;

use super::CommandError;

/// The operands of an N:M SpMM the statement is: (A, B, B's (N, M, L)).
pub(crate) struct NmSpmm {
    pub a: TensorId,
    pub b: TensorId,
    pub pattern: (u32, u32, usize),
}

/// Whether `stmt` (with its tensors' formats, `None` = dense) is `C(i,j) = A(i,k) * B(k,j)`
/// with `B` in `nm(N,M,L)` and `A`, `C` dense.
pub(crate) fn recognise(stmt: &IndexNotation, format: impl Fn(TensorId) -> Option<Format>) -> Option<NmSpmm> {
    let Expr::Binary(BinaryOp::Mul, x, y) = &stmt.exprs[stmt.rhs] else { return None };
    let (Expr::Access(a), Expr::Access(b)) = (&stmt.exprs[*x], &stmt.exprs[*y]) else { return None };
    let vars = |subs: &[nm_ir::notation::IndexTerm]| subs.iter().map(|t| t.as_var()).collect::<Option<Vec<_>>>();
    let (c, av, bv) = (vars(&stmt.lhs.subscripts)?, vars(&a.subscripts)?, vars(&b.subscripts)?);
    let ([i, j], [ai, k], [bk, bj]) = (c.as_slice(), av.as_slice(), bv.as_slice()) else { return None };
    let distinct = i != j && i != k && j != k;
    let dense = |t: TensorId| format(t).is_none_or(|f| f == Format::dense(2));
    let pattern = format(b.tensor)?.nm_params()?;
    (distinct && ai == i && bk == k && bj == j && dense(a.tensor) && dense(stmt.lhs.tensor) && a.tensor != b.tensor)
        .then_some(NmSpmm { a: a.tensor, b: b.tensor, pattern })
}

/// What `-print-compute` shows instead of generated C.
pub(crate) fn describe(s: &NmSpmm) -> String {
    let (n, m, l) = s.pattern;
    format!(
        "// C = A·B with B in nm({n},{m},{l}): nm-spmm's hand-written N:M SpMM ({:?} on this CPU), not generated code\n",
        Isa::detect()
    )
}

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

/// Runs `C = A·B` on CUDA device `ordinal`, `reps` times. The GPU kernels are f32: other
/// value types are refused, never converted silently.
pub(crate) fn run_cuda<T: Any + Clone>(
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
    let cuda = |e: nm_cuda::CudaError| CommandError(format!("-device=cuda: {e}"));
    let start = Instant::now();
    let gpu = nm_cuda::Gpu::open(ordinal).map_err(cuda)?;
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let parts = b.nm_parts()?;
    if parts.shape[0] != k {
        return Err(cuda(nm_cuda::CudaError::Inner { m, k, rows: parts.shape[0] }));
    }
    let n = parts.shape[1];
    let mut dev = nm_cuda::GpuNm::upload(&gpu, &parts).map_err(cuda)?;
    let launch = dev.prepare(&gpu, m, nm_cuda::Options::default()).map_err(cuda)?;
    let a_dev = gpu.upload(a.values()).map_err(cuda)?;
    let mut c = gpu.zeros::<f32>(m * n).map_err(cuda)?;
    let mut work = gpu.zeros::<f32>(launch.workspace(n)).map_err(cuda)?;
    let setup = start.elapsed();
    let mut times = Vec::new();
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        dev.run(&gpu, &launch, &a_dev, &mut c, &mut work).map_err(cuda)?;
        gpu.synchronize().map_err(cuda)?;
        times.push(t.elapsed());
    }
    let mut values = gpu.download(&c).map_err(cuda)?;
    values.truncate(m * n);
    let result: Box<dyn Any> = Box::new(Tensor::from_dense(&[m, n], &values, &Format::dense(2))?);
    let result = *result.downcast::<Tensor<T>>().expect("T is f32, checked above");
    let note = format!(
        "// C = A·B with B in nm({},{},{}): nm-cuda's {} on {}, not generated code\n",
        parts.n,
        parts.m,
        parts.l,
        nm_cuda::kernels::Variant::f32(&launch.plan.kernel).label,
        gpu.describe()
    );
    Ok(CudaRun { result, note, setup, times })
}
