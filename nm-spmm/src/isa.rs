//! The instruction sets the kernels are compiled for, chosen at run time, and the register
//! tile of each: rows per tile, how far ahead it prefetches.

use crate::Real;
use crate::packed::row_stride;

/// The instruction set a kernel is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// x86-64 with AVX-512F (and AVX2, FMA).
    Avx512,
    /// x86-64 with AVX2 and FMA.
    Avx2,
    /// Whatever the target has by default (SSE2 on x86-64), no FMA.
    Baseline,
}

impl Isa {
    /// The best the running CPU supports.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                return Isa::Avx2;
            }
        }
        Isa::Baseline
    }

    /// Whether the running CPU can run code compiled for `self`.
    pub fn supported(self) -> bool {
        matches!((self, Isa::detect()), (Isa::Baseline, _) | (_, Isa::Avx512) | (Isa::Avx2, Isa::Avx2))
    }
}

/// Rows of `C` per register tile of the AVX-512 kernel in f32: 14 rows × 2 vectors of
/// accumulators, 2 of B and the broadcast of A fill 31 of the 32 registers, and a transposed
/// row of A (14 of 16 slots) is one cache line. Faster than 8 rows (half a line per row) at
/// every pattern measured, with 12 rows in between (BENCHMARKS.md, "N:M on the CPU").
pub(crate) const ROWS_512_F32: usize = 14;
/// Rows of `C` per register tile of the AVX-512 kernel in f64: as in f32, 14 rows × 2 vectors of
/// accumulators, 2 of B and the broadcast of A fill 31 registers, and each kept vector's values
/// of B (two lines a pass, streamed from L2 or L3) serve 28 FMAs, not 16. A transposed row of A
/// is then two lines (14 of 16 slots), both prefetched. Faster than 8 rows (one line a row) on
/// the sparse patterns of every shape measured but the smallest, with 12 rows in between;
/// before A's second line and B were prefetched, 14 rows had lost.
pub(crate) const ROWS_512_F64: usize = 14;
/// Elements from one row of an AVX-512 tile's transposed rows of A to the next
/// ([`row_stride`] of 14), which [`NmMatrix`]'s `kept_at` are scaled by.
pub(crate) const KEPT_AT_STRIDE: usize = row_stride(ROWS_512_F64);
const _: () = assert!(row_stride(ROWS_512_F32) == KEPT_AT_STRIDE);

/// Whether a tile of `rows` rows reading the transposed tile in place (not `packed`) indexes A
/// by [`NmMatrix`]'s `kept_at`, not by `kept_rows`.
pub(crate) const fn reads_kept_at(rows: usize, packed: bool) -> bool {
    !packed && row_stride(rows) == KEPT_AT_STRIDE
}

/// Where the row named by `kk` starts in a transposed tile of `rows` rows: `kk` is a row
/// number, or already its offset where [`reads_kept_at`].
#[inline(always)]
pub(crate) const fn row_at(kk: u32, rows: usize, packed: bool) -> usize {
    if reads_kept_at(rows, packed) { kk as usize } else { kk as usize * row_stride(rows) }
}

/// Rows of `C` per tile of the portable kernel.
pub(crate) const ROWS_PORTABLE: usize = 8;
/// Kept vectors ahead that the kernels prefetch A's rows for (see [`NmMatrix::prefetch`]).
pub(crate) const PREFETCH_AHEAD: usize = 8;
/// The same in f64, set when its tiles had 8 rows (a kept vector took fewer FMAs than f32's,
/// so 8 vectors ahead was less time ahead). With 14 rows and B prefetched too
/// ([`B_PREFETCH_AHEAD`]), 16 ahead stayed a little faster than 8; 32 gained less and 4 lost.
/// In f32, 16 was level or lost.
pub(crate) const PREFETCH_AHEAD_F64: usize = 16;
/// Kept vectors ahead that the tile passes prefetch B's values for, one prefetch per line: a
/// group's strip of B streams from L2 for every tile (from L3 where it fell out, as after any
/// pause between calls), and B read from L1 was the one lever measured to lift f64. Faster
/// than no prefetch in f32 and f64, one and two threads, on the AVX-512 and the AVX2 tile
/// (two prefetches per line lost); 16 ahead did as well in f32 and less in f64, 64 a little
/// less in f32.
pub(crate) const B_PREFETCH_AHEAD: usize = 32;
/// Rows per register tile of the AVX2 kernel: 6 rows × 2 vectors of accumulators, 2 of B and
/// the broadcast of A fill 15 of the 16 registers (8 rows spilled).
pub(crate) const ROWS_256: usize = 6;
impl Isa {
    /// Rows per register tile of this instruction set's kernel for `T`.
    pub(crate) fn tile_rows<T: Real>(self) -> usize {
        match self {
            Isa::Avx2 => ROWS_256,
            Isa::Avx512 => T::ROWS_512,
            Isa::Baseline => ROWS_PORTABLE,
        }
    }
}

/// How the SIMD tiles read A: NM-SpMM's sparsity-aware choice between loading the tile's
/// whole (transposed) rows and packing only the rows a group's windows keep.
///
/// On a CPU the choice was measured, not assumed, and packing lost everywhere: on a Zen 3
/// (AVX2) at every pattern from 4:8 to 1:8, size, value type and thread count, and by more on
/// an AVX-512 Xeon (BENCHMARKS.md, "N:M on the CPU", its tried-and-dropped list). The
/// transposed tile already brings in only the cache lines the kept rows touch, so packing
/// saves no traffic; it only adds a copy that the tile's passes over the group reuse too
/// little — with the copy skipped (wrong results, timing only) the packed tiles were at best
/// a little faster, the most the copy could ever buy back. So `Auto` reads the whole tile;
/// `Packed` stays for measuring other CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loading {
    /// The measured best: [`Loading::WholeTile`] on every instruction set.
    Auto,
    /// Each kept vector reads its row of the transposed tile in place.
    WholeTile,
    /// Per tile and column group, the kept rows are first gathered into one array (the
    /// `col_info` of NM-SpMM is B's `kept_rows`, computed once when B is packed).
    Packed,
}

impl Loading {
    pub(crate) fn packs(self) -> bool {
        match self {
            Loading::Auto | Loading::WholeTile => false,
            Loading::Packed => true,
        }
    }
}
