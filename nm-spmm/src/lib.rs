//! # nm-spmm: CPU SpMM for vector-wise N:M sparsity
//!
//! `C = A·B` with `A` dense (`m×k`, row-major), `B` in `nm(N,M,L)` (`k×n`: in every window of
//! `M` rows and every group of `L` columns, `N` rows are kept) and `C` dense (`m×n`), in `f32`
//! or `f64`, following the structure of NM-SpMM on a CPU:
//!
//! - **B is packed once** ([`NmMatrix::new`]), column group by column group: each group's kept
//!   length-`L` vectors for all windows in one contiguous panel, with the row of `B` each one
//!   came from (window · M + the offset unpacked from the bit-packed metadata). nm-format
//!   stores windows outermost, so one group's vectors lie a whole window row apart: walked in
//!   place, every vector was a TLB miss.
//! - **Register tiling**: a tile of `R` rows of `C` × one column group (`L` lanes) is summed in
//!   registers over the whole reduction: per kept vector, `R` broadcasts of `A` and `R × L`
//!   fused multiply-adds; each `C` element is written once. `R` is 14 (f32) or 8 (f64) with
//!   AVX-512 (32 vector registers; a transposed row of A is one cache line) and 6 with AVX2
//!   (16).
//! - **A's rows transposed per block**: the tile's `R` values of one column of `A` share one
//!   cache line, padded to a power of two so they never straddle two (with AVX-512 the
//!   transposition builds each such line whole in a register); where windows keep at most a
//!   quarter of their rows, the rows ahead are prefetched. A thread keeps its transposed
//!   block from call to call.
//! - **The sparsity-aware choice** of NM-SpMM ([`Loading`]): packing only the rows of A's tile
//!   that a group's windows keep was built and measured against reading the transposed tile in
//!   place; on a CPU packing lost at every sparsity, so the kernel reads the tile in place.
//! - **SIMD by runtime dispatch**: the tiles are written in AVX-512 and in AVX2+FMA
//!   intrinsics, a portable loop serves the baseline, and the best the CPU has is chosen when
//!   the call runs ([`Isa::detect`]); `L` is a compile-time constant for `L` ∈ {1, 4, 8, 16,
//!   32}, any other `L` runs a generic loop.
//! - **Cache blocking**: rows are taken in blocks that share each column group's vectors of `B`
//!   while they are in cache, sized by B and by the L2 the CPU reports;
//!   **threads** take row blocks, of whole tiles spread evenly, dynamically.
//!
//! Ragged shapes are handled: `k` and `n` need not be multiples of `M` and `L` (B's padding is
//! zero and never read past `A`'s last column; the last group stores only `C`'s columns).

mod blocking;
mod cache;
mod isa;
mod kept_scratch;
mod multiply;
mod nv24;
mod packed;
mod simd;
#[cfg(test)]
mod tests;
mod tile;

pub use isa::{Isa, Loading};
pub use multiply::{multiply, multiply_view, spmm, spmm_with};
pub use nv24::spmm_nv24;
pub use packed::NmMatrix;

use nm_format::Value;

/// A value type the kernels compute in.
pub trait Real: Value + simd::Simd {
    /// `self * a + b`, fused (one rounding) where the instruction set has FMA.
    fn mul_add(self, a: Self, b: Self) -> Self;
}

impl Real for f32 {
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        f32::mul_add(self, a, b)
    }
}

impl Real for f64 {
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        f64::mul_add(self, a, b)
    }
}

/// Elements of a `rows × cols` array, refused where the product overflows (a caller's row
/// count can be anything; a wrapped product would pass the length checks).
pub(crate) fn elements(what: &'static str, rows: usize, cols: usize) -> Result<usize, SpmmError> {
    rows.checked_mul(cols).ok_or(SpmmError::Overflow { what, rows, cols })
}

/// What can be wrong with a call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SpmmError {
    /// `B` is not stored in `nm(N,M,L)`.
    #[error("B must be stored in nm(N,M,L), it is in {0}")]
    NotNm(String),
    /// `A` is not stored in `nv24` (the 2:4 kernel's operand).
    #[error("A must be stored in nv24, it is in {0}")]
    NotNv24(String),
    /// `A` is not a dense matrix.
    #[error("A must be a dense matrix, it is in {0}")]
    NotDense(String),
    /// `A`'s columns are not `B`'s rows.
    #[error("A is {m}×{k} but B has {rows} rows")]
    Inner {
        /// A's rows.
        m: usize,
        /// A's columns.
        k: usize,
        /// B's rows.
        rows: usize,
    },
    /// B's metadata names a row outside its window.
    #[error("B's metadata names row {offset} of a window of {window}")]
    Metadata {
        /// The offset found.
        offset: usize,
        /// The window length `M`.
        window: usize,
    },
    /// B's rows (padded to whole windows) do not fit the kernel's 32-bit row offsets (2²⁸ rows).
    #[error("B has {rows} rows, more than the N:M kernel's 32-bit row offsets reach")]
    TooLarge {
        /// B's rows.
        rows: usize,
    },
    /// The result does not validate as a tensor (it always should), or is too large to allocate.
    #[error(transparent)]
    Tensor(#[from] nm_format::TensorError),
    /// Dimensions whose product overflows an address: no array can hold the operand.
    #[error("{what} would have {rows} × {cols} elements, more than memory can address")]
    Overflow {
        /// Which array.
        what: &'static str,
        /// Its rows.
        rows: usize,
        /// Its columns.
        cols: usize,
    },
    /// An array of the wrong length.
    #[error("{what} has {actual} elements, {expected} expected")]
    Length {
        /// Which array.
        what: &'static str,
        /// Its required length.
        expected: usize,
        /// Its length.
        actual: usize,
    },
}
