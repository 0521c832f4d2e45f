//! Sparse workspaces: the insert–sort–merge (ISM) runtime of "Compilation of Modular and General
//! Sparse Workspaces" (PLDI 2024).
//!
//! A loop nest that scatters into a sparse result (outer-product SpGEMM, a transposed output,
//! MTTKRP into a sparse matrix) produces its components — coordinates and a value — in no
//! useful order, with duplicates. A [`Workspace`] collects them: each component is appended to
//! an *accumulation* array (for `bucket`/`auto`, to the bucket of its first coordinate); when
//! that is full it is sorted (by the [`Policy`]) with duplicates combined into a sorted run,
//! and runs are combined into the *all* array (kept as a few runs, combined a bucket at a time).
//! At the end the all array is compressed into the levels of any format nm-format holds
//! ([`Components::levels`], [`Components::to_tensor`]).
//!
//! Coordinates travel as one 64-bit *key* per component — the coordinates in the result's
//! storage order, each in its own bit field ([`KeyLayout`]) — so sorting keys sorts in storage
//! order and generated code computes a key with a few multiply-adds. Generated kernels append
//! inline through the C-ABI [`Slot`] and call its `flush`/`grow` only when an array is full.

mod bucket;
mod compress;
mod config;
mod ffi;
mod key;
mod merge;
mod segments;
mod sort;
mod workspace;

pub use bucket::BucketHead;
pub use compress::{Components, LevelArrays};
pub use config::{Config, IsmError, Policy, Stats};
pub use ffi::{C_DECLARATION, Slot, slot_flush, slot_grow};
pub use key::KeyLayout;
pub use workspace::Workspace;
