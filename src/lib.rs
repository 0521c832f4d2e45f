//! # nmsparse
//!
//! A sparse tensor algebra compiler and runtime with N:M structured sparsity as a first-class
//! format. This facade re-exports the crates a user needs and holds the logic of the
//! `nmsparse` command, so that the binary stays a thin argument parser.
//!
//! It offers the storage layer ([`format`], the `nm-format` crate: formats, validated tensors,
//! conversion, N:M pruning and packing, Matrix Market and FROSTT files), the compiler's middle
//! ([`ir`]: index notation, concrete index notation, schedules, iteration graphs, lattices,
//! workspace analysis) and its back end ([`lower`]: loop IR, interpreter, C code generation
//! and JIT). [`commands::run`] strings them together the way the `nmsparse` command does.

#![deny(missing_docs)]

pub mod commands;

pub use nm_format as format;
pub use nm_ir as ir;
pub use nm_lower as lower;
