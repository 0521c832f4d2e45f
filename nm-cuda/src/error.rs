//! What can go wrong between a host and a GPU that may not be there.

/// Every failure of nm-cuda. "No driver", "no device" and "no NVRTC" are ordinary errors:
/// callers (tests, the command line, the C library) report them and go on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// `libcuda` could not be loaded: no NVIDIA driver on this machine.
    #[error("no CUDA driver: libcuda could not be loaded (is an NVIDIA driver installed?)")]
    NoDriver,
    /// The driver loaded but reports no device (or not the one asked for).
    #[error("no CUDA device{}", .0.map(|o| format!(" with ordinal {o}")).unwrap_or_default())]
    NoDevice(Option<usize>),
    /// `libnvrtc` could not be loaded and the kernel is not in the CUBIN cache.
    #[error(
        "no NVRTC: libnvrtc.so.12 could not be loaded and {kernel} for {arch} is not in the CUBIN cache {cache} \
         (install the PyPI wheel nvidia-cuda-nvrtc-cu12 and put its nvidia/cuda_nvrtc/lib on LD_LIBRARY_PATH, \
         or set NMSPARSE_CUDA_CACHE to a directory of precompiled CUBINs)"
    )]
    NoNvrtc {
        /// The kernel that was wanted.
        kernel: String,
        /// Its target architecture.
        arch: String,
        /// Where compiled kernels are looked up.
        cache: String,
    },
    /// NVRTC rejected a kernel; the log says why.
    #[error("NVRTC could not compile {kernel} for {arch}: {log}")]
    Compile {
        /// Which kernel variant.
        kernel: String,
        /// Target architecture.
        arch: String,
        /// NVRTC's log.
        log: String,
    },
    /// A call into the CUDA driver failed.
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// A call into cuBLAS failed (or cuBLAS is missing).
    #[error("cuBLAS: {0}")]
    Cublas(String),
    /// The operands do not fit together or the kernel cannot take them.
    #[error("{0}")]
    Unsupported(String),
    /// Shapes that do not multiply.
    #[error("A is {m}×{k} but B has {rows} rows")]
    Inner {
        /// A's rows.
        m: usize,
        /// A's columns.
        k: usize,
        /// B's rows.
        rows: usize,
    },
    /// An operand that is not what the call needs.
    #[error(transparent)]
    Tensor(#[from] nm_format::TensorError),
}

impl From<cudarc::driver::DriverError> for CudaError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE {
            CudaError::NoDevice(None)
        } else {
            CudaError::Driver(e.to_string())
        }
    }
}

impl From<cudarc::cublas::result::CublasError> for CudaError {
    fn from(e: cudarc::cublas::result::CublasError) -> Self {
        CudaError::Cublas(format!("{e:?}"))
    }
}

/// nm-cuda's results.
pub type Result<T, E = CudaError> = std::result::Result<T, E>;
