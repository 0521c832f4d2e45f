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
/// row of A (14 of 16 slots) is one cache line. Against 8 rows (half a line per row, 16
/// accumulators), alternated per process on a Sapphire Rapids core: 4096³ 2:8 130 against
/// 104–112 GFLOP/s, 1:8 119 against 108–112, 1024³ 4:8 140 against 128; 12 rows fell between.
pub(crate) const ROWS_512_F32: usize = 14;
/// Rows of `C` per register tile of the AVX-512 kernel in f64: as in f32, 14 rows × 2 vectors of
/// accumulators, 2 of B and the broadcast of A fill 31 registers, and each kept vector's values
/// of B (two lines a pass, streamed from L2 or L3) serve 28 FMAs, not 16. A transposed row of A
/// is then two lines (14 of 16 slots), both prefetched. Against 8 rows (one line a row), each
/// binary's speedup over OpenBLAS's DGEMM timed in the same process (AVX-512 Xeon, one thread,
/// operands on huge pages; two rounds): 4096³ 1:8 5.66/5.94× → 6.67/6.89×, 2:8 3.12/3.00× →
/// 3.42/3.67×; 1024 × 11008 × 4096 1:8 5.58/5.84× → 6.38/6.54×, 2:8 2.90/2.94× → 3.41/3.58×;
/// 2048³ 1:8 5.99/6.20× → 6.31/6.40×; 1024³ 1:8 6.47/6.25× → 6.16/6.38×. 12 rows fell between.
/// (Before A's second line was prefetched, and B at all, 14 rows had lost: 30 against 50 GFLOP/s.)
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
/// The same in f64, measured when its tiles had 8 rows (a kept vector took 16 FMAs against
/// f32's 28, so 8 vectors ahead was less time ahead). With 14 rows, 8 ahead against 16 was level
/// to 10% slower (two rounds; 1024 × 11008 × 4096 2:8 the one shape a little faster), so 16
/// stays. With B prefetched too ([`B_PREFETCH_AHEAD`]), each
/// timed right after an OpenBLAS call (AVX-512 Xeon, one thread), 16 against 8: 1024 × 4096 ×
/// 4096 2:8 56.3 → 58.8 and 57.6 → 59.7 GFLOP/s, 1:8 54.0 → 55.2 and 55.1 → 56.2; 1024 × 11008 ×
/// 4096 2:8 57.3 → 59.0, 1:8 53.8 → 55.0; 32 gained less, 4 lost 4–7%. In f32 16 was level or
/// lost (1024³ 1:8 113.8 → 110.2); without B's prefetch (twenty-third session) it was level in f64.
pub(crate) const PREFETCH_AHEAD_F64: usize = 16;
/// Kept vectors ahead that the tile passes prefetch B's values for, one prefetch per line: a
/// group's strip of B streams from L2 for every tile (from L3 where it fell out, as after any
/// pause between calls), and B read from L1 was the one lever measured to lift f64 (BENCHMARKS.md's
/// history, "where f64 loses"). Each timed right after an OpenBLAS call in one process on an AVX-512
/// Xeon, against no prefetch: f32 256 × 4096 × 4096 one thread 113 → 127 GFLOP/s at 4:8, 108 →
/// 124 at 1:8, two threads 198 → 232 and 198 → 228; f64 1024 × 4096 × 4096 1:8 52.8 → 54.6,
/// 2:8 54.6 → 57.0; 1024³ level. 16 did as well in f32 and less in f64, 64 a little less in f32.
/// The AVX2 tile, forced on the same CPU: f32 1024³ 1:8 71 → 78, 256 × 4096 × 4096 1:8 65 → 76
/// (two prefetches per line there had lost 4% at 1024³); on a Zen 3 it is unmeasured.
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
/// (AVX2, in-process alternation of the two, best of 5) it was 2–28% slower at every pattern
/// from 4:8 to 1:8, at 1024³–4096³, f32 and f64, 1 and 2 threads (BENCHMARKS.md, "N:M on the
/// CPU", and its history: "packing A's kept columns on the CPU"). The transposed tile already brings in only the cache lines the kept rows
/// touch, so packing saves no traffic; it only adds a copy that the tile's two to four passes
/// over the group reuse too little. With the copy skipped (wrong results, timing only) the
/// packed tiles ran level with the whole tile at k = 1024 and 7–15% faster at k = 4096: the
/// most the copy could ever buy back. On an AVX-512 Xeon (2 MiB of L2, 14-row f32 tiles) it
/// lost by more: 30–45% slower at 2:8 and 1:8 (4096³ 1:8 70 against 119 GFLOP/s, 1024 × 11008
/// × 4096 2:8 83 against 132). So `Auto` reads the whole tile; `Packed` stays for measuring
/// other CPUs.
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
