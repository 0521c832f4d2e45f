//! The Rust API: declare tensors ([`Program`]), compile them into a [`Kernel`], run it on
//! [`Tensor`](nm_format::Tensor)s once ([`Kernel::run`]) or bound to its operands many times
//! ([`Kernel::bind`]).
//!
//! This is the one driver of the pipeline: parse → check → concretize → schedule → lower →
//! back end, with the decisions that make a statement run (operands read through copies or
//! views, a sum split into kernels, nm-spmm's N:M kernel). The command, the C library and the
//! Python package are clients of it. The example is in the crate documentation.

mod bound;
mod error;
mod kernel;
mod memo;
mod nm_route;
mod program;

pub use bound::Bound;
pub use error::Error;
pub use kernel::Kernel;
pub(crate) use nm_route::{NmOperand, NmSpmm, describe as describe_nm_route};
pub use program::Program;

use nm_lower::lower::KernelValue;

/// A value type kernels run on: `f32` or `f64` (what both the generated kernels and the
/// hand-written N:M kernels need).
pub trait Scalar: KernelValue + nm_spmm::Real {}

impl<T: KernelValue + nm_spmm::Real> Scalar for T {}

/// Which back end runs a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Generated C, compiled by the system compiler and loaded (cached on disk).
    Jit,
    /// The loop-IR interpreter (no compiler needed).
    Interp,
}

/// Why a kernel asked to run on several threads runs on one: the interpreter, or an outer
/// loop that neither splits the result by rows nor reduces into a dense result a copy per
/// thread can hold (the command's note and [`Kernel::describe`]).
pub(crate) fn why_one_thread(interpreted: bool) -> &'static str {
    if interpreted {
        "the interpreter runs sequentially"
    } else {
        "the outer loop neither names disjoint rows of the result nor sums into a dense result \
         no larger than its extent (a schedule's `parallelize(v, cpu_thread, temporary)` or \
         `atomics` asks for that on any dense result)"
    }
}
