//! The C back end: loop IR → readable C99, compiled and loaded through [`crate::jit`], run on
//! the same arrays as the interpreter.
//!
//! The kernel ABI is one array of `nms_array` descriptors, one per parameter in order (each
//! tensor decomposed into its `pos`/`crd`/metadata/values arrays): `{ data, len, owner, grow }`.
//! Every array is the caller's own vector, read or written in place; an output the kernel
//! `resize`s is grown by calling `grow`, which resizes that vector on the Rust side — so a
//! sparse result is assembled directly in the vectors it is returned in, never copied back.
//! New elements are zero, except in an array the kernel only appends to
//! ([`crate::ir::appended`]): its `written` statement sets the descriptor's `len` to the
//! elements it wrote, which is all the vector then claims.
//! The function returns 0, or 1 when growing fails (out of memory).

mod emit;
mod names;
mod run;

pub use emit::{emit, emit_library};
pub use run::{CKernel, RunError, threads_worth_copies};
