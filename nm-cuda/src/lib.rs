//! nm-cuda: the NM-SpMM kernel family on NVIDIA GPUs.
//!
//! `C = A·B` with B in vector-wise `nm(N,M,L)`: f32 kernels on CUDA cores (the paper's V1
//! hierarchical blocking, V2 sparsity-aware loading, V3 double-buffered pipeline, chosen by
//! shape and sparsity, deterministic split-K), a bf16 tensor-core variant that transposes A
//! once, gathers each L-vector group's kept k rows of it with cp.async (per group, or by
//! windows shared by a block's groups) and runs dense `mma.sync`, and, for A in the
//! element-wise 2:4 `nv24` format, bf16 on the sparse tensor cores (`mma.sp`). Kernels are
//! CUDA C compiled at run time by NVRTC for the device's architecture and cached as CUBINs;
//! cuBLAS gives the dense baseline. A [`Plan`] keeps the structured operand, its kernel and its
//! workspace on the device for many products, on device or host operands.
//!
//! Nothing is linked: the driver, NVRTC and cuBLAS are loaded when first used, so this crate
//! builds and its tests run on machines without a GPU or a CUDA toolkit, where "no driver",
//! "no device" and "no NVRTC" are ordinary [`CudaError`]s.

mod error;
mod gpu;
pub mod kernels;
pub mod nv24;
pub mod nvrtc;
pub mod plan;
mod resident;
pub use gpu::{
    Cublas, Gpu, GpuNm, GpuNmBf16, GpuNv24, Nv24Launch, SpmmLaunch, bf16_padded_rows, from_bf16, to_bf16, unavailable,
};

pub use error::{CudaError, Result};
pub use nv24::Nv24Sp;
pub use plan::{DeviceLimits, Options, TileSize, Version};
pub use resident::{Borrowed, Plan, multiply, multiply_nv24};
