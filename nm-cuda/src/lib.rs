//! nm-cuda: the NM-SpMM kernel family on NVIDIA GPUs.
//!
//! `C = A·B` with B in vector-wise `nm(N,M,L)`: f32 kernels on CUDA cores (the paper's V1
//! hierarchical blocking, V2 sparsity-aware loading, V3 double-buffered pipeline, chosen by
//! shape and sparsity, deterministic split-K) and a bf16 tensor-core variant that gathers the
//! kept columns of A per L-vector group and runs dense `mma.sync`. Kernels are CUDA C compiled
//! at run time by NVRTC for the device's architecture and cached as CUBINs; cuBLAS gives the
//! dense baseline.
//!
//! Nothing is linked: the driver, NVRTC and cuBLAS are loaded when first used, so this crate
//! builds and its tests run on machines without a GPU or a CUDA toolkit, where "no driver",
//! "no device" and "no NVRTC" are ordinary [`CudaError`]s.

mod error;
mod gpu;
pub mod kernels;
pub mod nvrtc;
pub mod plan;
pub use gpu::{Cublas, Gpu, GpuNm, GpuNmBf16, SpmmLaunch, from_bf16, multiply, to_bf16, unavailable};

pub use error::{CudaError, Result};
pub use plan::{DeviceLimits, Options, TileSize, Version};
