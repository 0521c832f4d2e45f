//! # nmsparse
//!
//! A sparse tensor algebra compiler and runtime with N:M structured sparsity as a first-class
//! format. This facade re-exports the crates a user needs and holds the logic of the
//! `nmsparse` command, so that the binary stays a thin argument parser.
//!
//! It offers the storage layer ([`format`](mod@format), the `nm-format` crate: formats, validated tensors,
//! conversion, N:M pruning and packing, Matrix Market and FROSTT files), the compiler's middle
//! ([`ir`]: index notation, concrete index notation, schedules, iteration graphs, lattices,
//! workspace analysis) and its back end ([`lower`]: loop IR, interpreter, C code generation
//! and JIT). [`commands::run`] strings them together the way the `nmsparse` command does.
//!
//! ## Compiling and running an expression
//!
//! ```
//! use nmsparse::{Backend, Program};
//! use nmsparse::format::{Format, Tensor};
//!
//! // A 3×4 CSR matrix and a dense vector.
//! let a = Tensor::from_dense(&[3, 4], &[1., 0., 2., 0., 0., 0., 0., 3., 4., 0., 0., 5.], &Format::csr())?;
//! let x = Tensor::from_dense(&[4], &[1., 2., 3., 4.], &Format::dense(1))?;
//!
//! let kernel = Program::new("y(i) = A(i,j) * x(j)")?
//!     .tensor("A", &[3, 4], "csr")?
//!     .tensor("x", &[4], "dense")?
//!     .tensor("y", &[3], "dense")?
//!     .compile::<f64>(Backend::Interp)?; // Backend::Jit compiles C with the system compiler
//! let y = kernel.run(&[("A", &a), ("x", &x)])?;
//! assert_eq!(y.to_dense()?, vec![7., 12., 24.]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod api;
pub mod commands;
pub mod conversion;

pub use api::{Backend, Bound, Error, Kernel, Program, Scalar};

pub use nm_cuda as cuda;
pub use nm_format as format;
pub use nm_ir as ir;
pub use nm_ism as ism;
pub use nm_lower as lower;
pub use nm_runtime as runtime;
pub use nm_spmm as spmm;

/// The Rust example of README.md, run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The examples of the Rust guide, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/rust.md")]
pub struct RustGuideDoctests;

/// The example of the formats page, run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../docs/formats.md")]
pub struct FormatsDoctests;
