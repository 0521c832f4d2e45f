//! # nmsparse
//!
//! A sparse tensor algebra compiler and runtime with N:M structured sparsity as a first-class
//! format. This facade re-exports the crates a user needs and holds the logic of the
//! `nmsparse` command, so that the binary stays a thin argument parser.
//!
//! Today it offers the storage layer ([`format`], the `nm-format` crate): formats, validated
//! tensors, conversion, N:M pruning and packing, Matrix Market and FROSTT files. The
//! compiler stages arrive crate by crate (see `DESIGN.md` in the project's shared folder).

#![deny(missing_docs)]

pub mod commands;

pub use nm_format as format;
