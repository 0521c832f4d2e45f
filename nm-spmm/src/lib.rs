//! # nm-spmm: CPU SpMM for vector-wise N:M sparsity
//!
//! `C = A·B` with `A` dense (`m×k`, row-major), `B` in `nm(N,M,L)` (`k×n`: in every window of
//! `M` rows and every group of `L` columns, `N` rows are kept) and `C` dense (`m×n`), in `f32`
//! or `f64`, following the structure of NM-SpMM on a CPU:
//!
//! - **B is packed once** ([`NmMatrix::new`]), column group by column group: each group's kept
//!   length-`L` vectors for all windows in one contiguous panel, with the row of `B` each one
//!   came from (window · M + the offset unpacked from the bit-packed metadata). nm-format
//!   stores windows outermost, so one group's vectors lie a whole window row apart (16 KiB at
//!   k = n = 1024, L = 32): walked in place, every vector was a TLB miss and the kernel ran at
//!   6 GFLOP/s.
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
//!   while they are in cache, sized by B and by the L2 the CPU reports ([`cache::l2_bytes`]);
//!   **threads** take row blocks, of whole tiles spread evenly, dynamically.
//!
//! Ragged shapes are handled: `k` and `n` need not be multiples of `M` and `L` (B's padding is
//! zero and never read past `A`'s last column; the last group stores only `C`'s columns).

mod cache;
mod kept_scratch;

use std::sync::atomic::{AtomicUsize, Ordering};

use nm_format::{LevelStorage, Tensor, Value};

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

/// A `k×n` matrix in `nm(N,M,L)`, packed for [`spmm`]: panels of kept vectors per column
/// group, with the row of B each came from.
#[derive(Clone, Debug)]
pub struct NmMatrix<'a, T> {
    /// Kept rows per window.
    pub n: usize,
    /// Window length.
    pub m: usize,
    /// Columns per group.
    pub l: usize,
    /// Logical rows (`k`).
    pub rows: usize,
    /// Logical columns.
    pub cols: usize,
    /// Windows (`⌈k / M⌉`).
    pub windows: usize,
    /// Column groups (`⌈n / L⌉`).
    pub groups: usize,
    /// The kept vectors, group by group, each group's in strips of `strip` lanes: group `g`,
    /// strip `s`, kept vector `q` of the group (in `(w, t)` order), lane `j` of the strip at
    /// `g·K·L + s·K·strip + q·strip + j` with `K = windows·N`.
    values: LineAligned<T>,
    /// Each kept vector's row of B (`w·M + offset`, below `windows·M`; rows past `k` are the
    /// zero padding of the last window), in the same `(g, w, t)` order: one group's kept
    /// vectors are one flat loop, where window and offset cost a loop and a multiply each.
    kept_rows: Vec<u32>,
    /// `kept_rows` times [`KEPT_AT_STRIDE`], the offsets of those rows in an AVX-512 tile's
    /// transposed rows of A: the tile pass adds one to `a_t` in the address of its loads, where
    /// a row number took a shift first, two µops of the ~55 per kept vector of a loop that
    /// issues near 4 a cycle at FMA peak (f64 1:8, one thread, alternated builds: 2048³
    /// 6.48–6.62× → 6.57–6.83× over OpenBLAS, 1024³ on two threads 6.35–6.39× → 6.72–6.73×).
    kept_at: Vec<u32>,
    _tensor: std::marker::PhantomData<&'a Tensor<T>>,
}

/// Values whose first element lies on a cache-line boundary, so that panels made of whole
/// lines are loaded without a vector ever straddling two (the allocator aligns to 16 bytes;
/// every other 32-byte load of a line-wide strip then split, and the `nv24` kernel ran 15–24%
/// slower for it).
#[derive(Clone, Debug)]
struct LineAligned<T> {
    storage: Vec<T>,
    start: usize,
    len: usize,
}

impl<T: Real> LineAligned<T> {
    /// `len` zeros, on transparent huge pages where they take 4 MiB or more
    /// ([`nm_runtime::memory::advise_huge_pages`]): B's packed values are read whole by every
    /// row block. f64 1:8, one thread, against 4 KiB pages (separate processes, two rounds):
    /// 1024 × 11008 × 4096 57.4/56.7 → 58.0/58.3 GFLOP/s, 2048³ 57.8/54.0 → 58.2/58.0, 1024³
    /// level.
    fn zeros(len: usize) -> Self {
        let total = len + CACHE_LINE / std::mem::size_of::<T>();
        let mut storage = Vec::with_capacity(total);
        nm_runtime::memory::advise_huge_pages(&mut storage);
        storage.resize(total, T::ZERO);
        let start = storage.as_ptr().align_offset(CACHE_LINE).min(storage.len() - len);
        LineAligned { storage, start, len }
    }
}

impl<T: Real> Default for LineAligned<T> {
    fn default() -> Self {
        LineAligned::zeros(0)
    }
}

impl<T> std::ops::Deref for LineAligned<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl<T> std::ops::DerefMut for LineAligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

impl<'a, T: Real> NmMatrix<'a, T> {
    /// Packs `b`'s values and unpacks its metadata. The packed matrix owns copies of both, so
    /// it may outlive `b` (its lifetime parameter is the caller's choice).
    pub fn new(b: &Tensor<T>) -> Result<Self, SpmmError> {
        let (n, m, l) = b.format().nm_params().ok_or_else(|| SpmmError::NotNm(b.format().to_string()))?;
        let LevelStorage::Structured { meta, .. } = &b.levels()[2] else {
            return Err(SpmmError::NotNm(b.format().to_string()));
        };
        let (rows, cols) = (b.shape()[0], b.shape()[1]);
        let (keep, windows, groups) = (n as usize, rows.div_ceil(m as usize), cols.div_ceil(l));
        let stored = b.values();
        let window = m as usize;
        if windows.checked_mul(window * KEPT_AT_STRIDE).is_none_or(|at| u32::try_from(at).is_err()) {
            return Err(SpmmError::TooLarge { rows });
        }
        let strip = strip_lanes(l, std::mem::size_of::<T>());
        let mut values = LineAligned::zeros(stored.len());
        let mut kept_rows = Vec::with_capacity(meta.len());
        let mut at = 0;
        for g in 0..groups {
            for s in 0..l / strip {
                for w in 0..windows {
                    // nm-format's order: ((w·groups + g)·N + t).
                    let first = (w * groups + g) * keep;
                    for q in first..first + keep {
                        values[at..at + strip].copy_from_slice(&stored[q * l + s * strip..q * l + (s + 1) * strip]);
                        at += strip;
                    }
                }
            }
            for w in 0..windows {
                let first = (w * groups + g) * keep;
                for q in first..first + keep {
                    // nm-format validated the metadata; the kernels index A by it unchecked.
                    let offset = meta.get(q) as usize;
                    if offset >= window {
                        return Err(SpmmError::Metadata { offset, window });
                    }
                    kept_rows.push((w * window + offset) as u32);
                }
            }
        }
        let kept_at = kept_rows.iter().map(|&kk| kk * KEPT_AT_STRIDE as u32).collect();
        Ok(NmMatrix {
            n: keep,
            m: m as usize,
            l,
            rows,
            cols,
            windows,
            groups,
            values,
            kept_rows,
            kept_at,
            _tensor: std::marker::PhantomData,
        })
    }

    /// Group `g`'s kept vectors: indices into `kept_rows` (and, times `L`, into `values`).
    fn group(&self, g: usize) -> std::ops::Range<usize> {
        g * self.windows * self.n..(g + 1) * self.windows * self.n
    }

    /// Lanes per strip ([`strip_lanes`]).
    fn strip(&self) -> usize {
        strip_lanes(self.l, std::mem::size_of::<T>())
    }

    /// Group `g`'s strips: for each, its first lane and its values (`strip` per kept vector).
    fn strips(&self, g: usize) -> impl Iterator<Item = (usize, &[T])> {
        let kept = self.group(g);
        let values = &self.values[kept.start * self.l..kept.end * self.l];
        values.chunks_exact(kept.len() * self.strip()).enumerate().map(|(s, strip)| (s * self.strip(), strip))
    }

    /// Whether the kernels prefetch the rows of A's transposed tile they will read: where
    /// windows keep at most a quarter of their rows, each kept vector reads a new line of it,
    /// and the loads stalled the FMAs (1:8 at 1024 × 4096 × 4096 on a Zen 3: 61 → 70–73
    /// GFLOP/s); at 4:8 the lines are shared and the prefetches cost more than they save.
    fn prefetch(&self) -> bool {
        4 * self.n <= self.m
    }

    /// B's rows padded to whole windows: the rows the SIMD kernels' transposed A tiles hold.
    fn padded_rows(&self) -> usize {
        self.windows * self.m
    }

    /// Useful multiply-adds of `C = A·B` with `A` of `m` rows: `m·k·n·N/M`.
    pub fn flops(&self, m: usize) -> f64 {
        2.0 * m as f64 * self.rows as f64 * self.cols as f64 * self.n as f64 / self.m as f64
    }
}

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
const ROWS_512_F32: usize = 14;
/// Rows of `C` per register tile of the AVX-512 kernel in f64: as in f32, 14 rows × 2 vectors of
/// accumulators, 2 of B and the broadcast of A fill 31 registers, and each kept vector's values
/// of B (two lines a pass, streamed from L2 or L3) serve 28 FMAs, not 16. A transposed row of A
/// is then two lines (14 of 16 slots), both prefetched. Against 8 rows (one line a row), each
/// binary's speedup over OpenBLAS's DGEMM timed in the same process (AVX-512 Xeon, one thread,
/// operands on huge pages; two rounds): 4096³ 1:8 5.66/5.94× → 6.67/6.89×, 2:8 3.12/3.00× →
/// 3.42/3.67×; 1024 × 11008 × 4096 1:8 5.58/5.84× → 6.38/6.54×, 2:8 2.90/2.94× → 3.41/3.58×;
/// 2048³ 1:8 5.99/6.20× → 6.31/6.40×; 1024³ 1:8 6.47/6.25× → 6.16/6.38×. 12 rows fell between.
/// (Before A's second line was prefetched, and B at all, 14 rows had lost: 30 against 50 GFLOP/s.)
const ROWS_512_F64: usize = 14;
/// Elements from one row of an AVX-512 tile's transposed rows of A to the next
/// ([`row_stride`] of 14), which [`NmMatrix`]'s `kept_at` are scaled by.
const KEPT_AT_STRIDE: usize = row_stride(ROWS_512_F64);
const _: () = assert!(row_stride(ROWS_512_F32) == KEPT_AT_STRIDE);

/// Whether a tile of `rows` rows reading the transposed tile in place (not `packed`) indexes A
/// by [`NmMatrix`]'s `kept_at`, not by `kept_rows`.
const fn reads_kept_at(rows: usize, packed: bool) -> bool {
    !packed && row_stride(rows) == KEPT_AT_STRIDE
}

/// Where the row named by `kk` starts in a transposed tile of `rows` rows: `kk` is a row
/// number, or already its offset where [`reads_kept_at`].
#[inline(always)]
const fn row_at(kk: u32, rows: usize, packed: bool) -> usize {
    if reads_kept_at(rows, packed) { kk as usize } else { kk as usize * row_stride(rows) }
}

/// Rows of `C` per tile of the portable kernel.
const ROWS_PORTABLE: usize = 8;
/// Kept vectors ahead that the kernels prefetch A's rows for (see [`NmMatrix::prefetch`]).
const PREFETCH_AHEAD: usize = 8;
/// The same in f64, measured when its tiles had 8 rows (a kept vector took 16 FMAs against
/// f32's 28, so 8 vectors ahead was less time ahead). With 14 rows, 8 ahead against 16 was level
/// to 10% slower (two rounds; 1024 × 11008 × 4096 2:8 the one shape a little faster), so 16
/// stays. With B prefetched too ([`B_PREFETCH_AHEAD`]), each
/// timed right after an OpenBLAS call (AVX-512 Xeon, one thread), 16 against 8: 1024 × 4096 ×
/// 4096 2:8 56.3 → 58.8 and 57.6 → 59.7 GFLOP/s, 1:8 54.0 → 55.2 and 55.1 → 56.2; 1024 × 11008 ×
/// 4096 2:8 57.3 → 59.0, 1:8 53.8 → 55.0; 32 gained less, 4 lost 4–7%. In f32 16 was level or
/// lost (1024³ 1:8 113.8 → 110.2); without B's prefetch (twenty-third session) it was level in f64.
const PREFETCH_AHEAD_F64: usize = 16;
/// Kept vectors ahead that the tile passes prefetch B's values for, one prefetch per line: a
/// group's strip of B streams from L2 for every tile (from L3 where it fell out, as after any
/// pause between calls), and B read from L1 was the one lever measured to lift f64 (BENCHMARKS.md's
/// history, "where f64 loses"). Each timed right after an OpenBLAS call in one process on an AVX-512
/// Xeon, against no prefetch: f32 256 × 4096 × 4096 one thread 113 → 127 GFLOP/s at 4:8, 108 →
/// 124 at 1:8, two threads 198 → 232 and 198 → 228; f64 1024 × 4096 × 4096 1:8 52.8 → 54.6,
/// 2:8 54.6 → 57.0; 1024³ level. 16 did as well in f32 and less in f64, 64 a little less in f32.
/// The AVX2 tile, forced on the same CPU: f32 1024³ 1:8 71 → 78, 256 × 4096 × 4096 1:8 65 → 76
/// (two prefetches per line there had lost 4% at 1024³); on a Zen 3 it is unmeasured.
const B_PREFETCH_AHEAD: usize = 32;
/// Rows per register tile of the AVX2 kernel: 6 rows × 2 vectors of accumulators, 2 of B and
/// the broadcast of A fill 15 of the 16 registers (8 rows spilled).
const ROWS_256: usize = 6;
/// Register tiles per row block a thread takes: a block's tiles reuse each group's vectors of
/// `B` while they are in cache.
const TILES_PER_BLOCK: usize = 8;
/// Rows of A a block takes at most where B is small ([`blocking`]), in whole tiles: 7 tiles
/// of 6 (AVX2), 3 of 14 (AVX-512). With f64 in tiles of 14 rows (as f32), 3 tiles against 4,
/// speedup over OpenBLAS timed in the same process (AVX-512 Xeon, operands on huge pages): f64
/// one thread 1:8 1024³ 5.84/6.44/6.40× → 5.99/6.59/6.54×, 2048³ 6.01/6.12/5.99× → 6.17/6.35/
/// 6.07×, 2:8 and 4:8 level; f32 two threads 1024³ 1:8 6.06× → 6.50×, 2:8 3.41× → 3.73×, 2048³
/// level; f32 one thread 1024³ 1:8 1–3% slower (6.47/6.67/6.63× → 6.33/6.60/6.52×), 2:8 and 4:8
/// level or faster, 256 × 4096 × 4096 1:8 8.12× → 8.33×. (AVX2's 7 tiles against 8 are
/// unmeasured.) Earlier (f32, each timed right after
/// an OpenBLAS call in one process), 4 tiles against 8: 1024³ one thread
/// 1:8 113.0 / 114.3 / 107.4 against 108.0 / 110.5 / 106.6 GFLOP/s, 2:8 135.4 / 135.2 / 130.5
/// against 131.4 / 133.4 / 128.1, 4:8 level; 2048³ 3:8 140.4 against 135.1, 1:8 126.2 against
/// 123.1; two threads 1024³ 1:8 215.1 / 218.3 against 201.7 / 208.0 (one round 201 against
/// 210), 2048³ 1:8 230 against 225. In f64, when its tiles had 8 rows, 4 tiles were slower than
/// 8 (1024³ 4:8 57.2 against 59.2, 2:8 54.2 against 55.7): the rule is rows, not bytes of
/// transposed A.
const SMALL_B_BLOCK_ROWS: usize = 42;
/// From this many bytes of B's kept values on, B is large ([`blocking`]): a block that reads
/// all of it no longer finds it in the last-level cache from block to block, and on a Zen 3
/// blocks of up to [`LARGE_B_TILES`] tiles read it fewer times (Zen 3, 1 thread, f32, L = 32,
/// medians of alternated runs: at 4096³ 8 → 32 tiles took 4:8 from 69–74 to 82–88 GFLOP/s,
/// 2:8 66–69 → 77–80, 1:8 62–68 → 66–75, 2048³ 4:8 (8 MiB) 72 → 84; below it 32 tiles were
/// 3–10% slower: 2048³ 2:8 and 1:8, 1024³).
const LARGE_B_BYTES: usize = 8 << 20;
/// Bytes of B's kept vectors that a block's tiles share before moving on: each tile runs the
/// groups of such a chunk one after the other, which keeps the chunk in L2 across the tiles
/// while each tile's transposed rows of A are reused from group to group. One group at a time
/// (B's vectors in L1, A's rows from L2 or L3 for every group) was slower in 22 of 24
/// comparisons alternated in one process (Zen 3, 1024³ and 2048³, 4:8 to 1:8: 1:8 by 1–26%,
/// the two others 2–4% faster); where B is large and read whole by 32-tile blocks, chunks were
/// no better and at times slower (4096³ 2:8), so there a chunk is one group. In panels (an
/// AVX-512 Xeon, alternated in one process) chunks made 1:8 faster, f32 on one thread 4096³
/// 125–128 against 122–123, 1024 × 11008 × 4096 125–126 against 116–119, on two 4096³ 273
/// against 259, and left 4:8 and 2:8 level.
const GROUP_CHUNK_BYTES: usize = 256 << 10;
/// Tiles per block where B is large and the L2 cannot hold [`L2_BLOCK_ROWS`] rows of A (64 were
/// slower again: 1:8 at 4096³ on a Zen 3, 66 → 46–51 GFLOP/s).
const LARGE_B_TILES: usize = 32;
/// Rows of A a block takes at most (in whole tiles, at least one) where B is large and those
/// tiles, transposed, fit in the L2 ([`blocking`]): every block reads B's panel once more from
/// L3 and keeps only its own tiles of A in L2. On a Xeon with 2 MiB of L2 per core (AVX-512),
/// alternated in one process, in panels, the best block was 2 tiles of 14 rows in f32 (4096³
/// 4:8 130 GFLOP/s against 129, 125 and 93 with 3, 4 and the old 32 tiles; 1:8 121 against
/// 111, 110, 110; 1024 × 4096 × 4096 4:8 125 against 121, 110, 96) and 4 tiles of 8 rows in
/// f64 (4096³ 2:8 56 against 54 and 49 with 2 and 1 tiles and 40 with 32; 1:8 55 against 53,
/// 48, 54).
const L2_BLOCK_ROWS: usize = 32;
/// Bytes of B's kept values in a panel ([`blocking`]): every row block runs over one panel of
/// column groups before any block moves to the next, so that B is read from memory once per
/// panel and from L3 by every block after the first. Where B was larger, read whole by every
/// block, it came from memory each time (f32 1024 × 11008 × 4096, 43 MiB at 2:8: 106 GFLOP/s
/// against 131–134 in panels; 1024 × 4096 × 4096, 16 MiB: 136–141 either way); panels of 32
/// MiB ran f64 4096³ 4:8 at 46 against 52 with 16, 8 MiB were level with 16.
const PANEL_BYTES: usize = 16 << 20;

/// How [`spmm`] walks C: blocks of `rows` rows, each over one panel of `panel_groups` column
/// groups of B at a time, its tiles taking the panel's groups in chunks of `chunk_groups`;
/// every block finishes a panel before any block starts the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Blocking {
    rows: usize,
    panel_groups: usize,
    chunk_groups: usize,
}

/// The blocking of `m` rows of A times `b` on `threads` threads with tiles of `tile_rows` rows,
/// on a CPU with `l2` bytes of L2 per core (`None`: unknown).
///
/// A small B (under [`LARGE_B_BYTES`]) stays in the last-level cache: blocks of
/// [`TILES_PER_BLOCK`] tiles, at most [`SMALL_B_BLOCK_ROWS`] rows, run over all of it. A large
/// B no longer does from block to block.
/// Where the L2 holds [`L2_BLOCK_ROWS`] rows of A's transposed tiles, B is cut into panels of
/// [`PANEL_BYTES`] that do stay in L3 while blocks of that many rows (at least one tile) each
/// read the panel from L3 with their tiles of A in L2. Elsewhere (a Zen 3's 512 KiB of L2
/// cannot hold the 5 AVX2 tiles of f32, 640 KiB at k = 4096), or where the L2 is unknown,
/// blocks take up to [`LARGE_B_TILES`] tiles over all of B, as measured best on the Zen 3
/// (panels are unmeasured there).
fn blocking<T: Real>(b: &NmMatrix<'_, T>, m: usize, threads: usize, tile_rows: usize, l2: Option<usize>) -> Blocking {
    let b_bytes = std::mem::size_of_val(&b.values[..]);
    let all = Blocking {
        rows: TILES_PER_BLOCK.min(SMALL_B_BLOCK_ROWS / tile_rows).max(1) * tile_rows,
        panel_groups: b.groups.max(1),
        chunk_groups: groups_per_chunk(b),
    };
    if b_bytes < LARGE_B_BYTES {
        return all;
    }
    let tile_bytes = b.padded_rows() * row_stride(tile_rows) * std::mem::size_of::<T>();
    let tiles = (L2_BLOCK_ROWS / tile_rows).max(1);
    if l2.is_some_and(|l2| tiles * tile_bytes <= l2) {
        // At least one group per panel, and panels of equal size.
        let group_bytes = b_bytes / b.groups.max(1);
        let panels = b.groups.div_ceil((PANEL_BYTES / group_bytes.max(1)).max(1)).max(1);
        return Blocking { rows: tiles * tile_rows, panel_groups: b.groups.div_ceil(panels).max(1), ..all };
    }
    // As many blocks as tiles of at most LARGE_B_TILES take, rounded up to a multiple of the
    // threads, so that the threads finish together (at 1024 rows on 2 threads, blocks of 32
    // tiles left one thread a 64-row block behind the other's three full ones).
    let blocks = (m.div_ceil(LARGE_B_TILES * tile_rows).div_ceil(threads) * threads).max(1);
    let tiles = m.div_ceil(blocks).div_ceil(tile_rows).clamp(TILES_PER_BLOCK, LARGE_B_TILES);
    Blocking { rows: tiles * tile_rows, chunk_groups: 1, ..all }
}

/// Column groups a block's tiles take in turn before the next groups ([`blocking`]): as many
/// as keep their kept vectors of B within [`GROUP_CHUNK_BYTES`].
fn groups_per_chunk<T>(b: &NmMatrix<'_, T>) -> usize {
    let group_bytes = std::mem::size_of_val(&b.values[..]) / b.groups.max(1);
    (GROUP_CHUNK_BYTES / group_bytes.max(1)).clamp(1, b.groups.max(1))
}

impl Isa {
    /// Rows per register tile of this instruction set's kernel for `T`.
    fn tile_rows<T: Real>(self) -> usize {
        match self {
            Isa::Avx2 => ROWS_256,
            Isa::Avx512 => T::ROWS_512,
            Isa::Baseline => ROWS_PORTABLE,
        }
    }
}

/// `C = A·B` into a new dense tensor: `A` a dense matrix (`m × b.rows`), on `threads` threads.
/// The one entry point the command, the Rust API and the C library share.
pub fn multiply<T: Real>(a: &Tensor<T>, b: &NmMatrix<'_, T>, threads: usize) -> Result<Tensor<T>, SpmmError> {
    multiply_view(&a.view(), b, threads)
}

/// [`multiply`] with `A` read in place from arrays someone else owns (a numpy array through
/// the Python package).
pub fn multiply_view<T: Real>(
    a: &nm_format::TensorView<'_, T>,
    b: &NmMatrix<'_, T>,
    threads: usize,
) -> Result<Tensor<T>, SpmmError> {
    if a.format() != &nm_format::Format::dense(2) {
        return Err(SpmmError::NotDense(a.format().to_string()));
    }
    let (m, k) = (a.shape()[0], a.shape()[1]);
    if k != b.rows {
        return Err(SpmmError::Inner { m, k, rows: b.rows });
    }
    let n = b.cols;
    // On huge pages, as numpy puts its large arrays (and nmsparse its tensors' values).
    // A request too large to reserve is an error, where `vec!` aborted.
    let mut c = nm_runtime::memory::huge_vec(
        m.checked_mul(n).ok_or_else(|| nm_format::TensorError::TooLarge { what: format!("a {m}×{n} product") })?,
    )
    .map_err(nm_format::TensorError::from)?;
    c.resize(m * n, T::ZERO);
    spmm(a.values(), m, b, &mut c, threads.max(1))?;
    let levels = vec![LevelStorage::Dense { size: m }, LevelStorage::Dense { size: n }];
    Ok(Tensor::from_raw(vec![m, n], nm_format::Format::dense(2), levels, c)?)
}

/// `C = A·B` (`C` overwritten) on `threads` threads with the best instruction set of the CPU.
/// `a` is row-major `m × b.rows`, `c` row-major `m × b.cols`.
pub fn spmm<T: Real>(a: &[T], m: usize, b: &NmMatrix<'_, T>, c: &mut [T], threads: usize) -> Result<(), SpmmError> {
    spmm_with(Isa::detect(), Loading::Auto, a, m, b, c, threads)
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
    fn packs(self) -> bool {
        match self {
            Loading::Auto | Loading::WholeTile => false,
            Loading::Packed => true,
        }
    }
}

/// [`spmm`] with a chosen instruction set (one the CPU does not support falls back to the
/// baseline), for benchmarks and tests of each path.
pub fn spmm_with<T: Real>(
    isa: Isa,
    loading: Loading,
    a: &[T],
    m: usize,
    b: &NmMatrix<'_, T>,
    c: &mut [T],
    threads: usize,
) -> Result<(), SpmmError> {
    let check = |what, expected: usize, actual: usize| {
        if expected == actual { Ok(()) } else { Err(SpmmError::Length { what, expected, actual }) }
    };
    check("A", m * b.rows, a.len())?;
    check("C", m * b.cols, c.len())?;
    check("B's values", b.windows * b.groups * b.n * b.l, b.values.len())?;
    if b.rows == 0 {
        // No inner dimension: every sum is empty (and a tile would have no rows of A to read).
        c.fill(T::ZERO);
        return Ok(());
    }
    let isa = if isa.supported() { isa } else { Isa::Baseline };
    let blocks = blocking(b, m, threads, isa.tile_rows::<T>(), cache::l2_bytes());
    spmm_in_blocks(isa, loading, a, m, b, c, threads, blocks);
    Ok(())
}

/// [`spmm_with`] after its checks, in `blocks`.
#[allow(clippy::too_many_arguments)]
fn spmm_in_blocks<T: Real>(
    isa: Isa,
    loading: Loading,
    a: &[T],
    m: usize,
    b: &NmMatrix<'_, T>,
    c: &mut [T],
    threads: usize,
    blocks: Blocking,
) {
    // One transposed block per thread, reused from block to block and from call to call
    // (`kept_scratch`): allocated per block, its pages were faulted in and zeroed every time
    // (1024 × 1024 × 256, 4:8, AVX2: 56 → 82 GFLOP/s); per call, 1:8 at 1024³ lost 2–4%.
    let packed = loading.packs();
    let starts = block_starts(m, isa.tile_rows::<T>(), blocks.rows, threads);
    // With no column (no group) one pass still runs, and writes nothing.
    for first in (0..b.groups.max(1)).step_by(blocks.panel_groups) {
        let panel = first..(first + blocks.panel_groups).min(b.groups);
        row_blocks(c, b.cols, &starts, threads, |scratch: &mut Scratch<T>, lo, hi, rows| {
            let part = Part { lo, hi, groups: panel.clone(), chunk_groups: blocks.chunk_groups };
            block_rows_of(isa, packed, a, part, b, rows, scratch)
        });
    }
}

/// The first row of each block that `m` rows are cut into, then `m`: whole tiles of
/// `tile_rows` rows spread evenly over as many blocks as take at most `max_rows` rows each,
/// rounded up to a multiple of `threads` (at most one block per tile).
///
/// Blocks of one size and a last short one left a thread behind: 1024 rows in tiles of 14 on
/// two threads were 9 blocks of 8 tiles and one of 2, 40 tiles for one thread and 34 for the
/// other; now 37 each. Where the tiles do not divide evenly, the blocks with a tile more come
/// first, and the last tile (short where `tile_rows` does not divide `m`, and as slow as a
/// whole one) last: the threads take blocks as they finish, so the last blocks decide how long
/// one waits for the other. With the shorter blocks first instead (the even spread rounded
/// down), f64 256 × 12288 × 4096 1:8 on two threads (19 tiles in 10 blocks, 3 panels) left one
/// thread idle for 7% of a panel (timed block by block). Alternated in one process (AVX-512
/// Xeon, speedup over OpenBLAS, shorter first → larger first): that shape 6.33–6.43× →
/// 6.95–6.96× at 1:8 and 3.18–3.21× → 3.44–3.48× at 2:8, f64 1024 × 11008 × 4096 1:8
/// 6.49–6.65× → 6.72–6.88×, f32 256 × 12288 × 4096 4:8 1.94× → 2.07×; f64 256 × 4096 × 4096
/// 1:8 on two threads 2% slower (7.90× → 7.7×), the other shapes and one thread level.
fn block_starts(m: usize, tile_rows: usize, max_rows: usize, threads: usize) -> Vec<usize> {
    let tiles = m.div_ceil(tile_rows);
    let per_block = (max_rows / tile_rows).max(1);
    let blocks = tiles.div_ceil(per_block).div_ceil(threads).saturating_mul(threads).min(tiles);
    let (each, more) = (tiles.checked_div(blocks).unwrap_or(0), tiles.checked_rem(blocks).unwrap_or(0));
    (0..=blocks).map(|b| ((b * each + b.min(more)) * tile_rows).min(m)).collect()
}

/// Rows `0..m` of `c` (`m × n`) in the blocks that start at `starts` (the last entry is `m`),
/// taken by `threads` threads as they finish the previous one: `body(scratch, lo, hi, rows
/// lo..hi of c)`, with a scratch value per thread kept from block to block.
fn row_blocks<T: Send, S: kept_scratch::Scratch>(
    c: &mut [T],
    n: usize,
    starts: &[usize],
    threads: usize,
    body: impl Fn(&mut S, usize, usize, &mut [T]) + Sync,
) {
    let blocks = starts.len().saturating_sub(1);
    let next = AtomicUsize::new(0);
    let out = SharedOut(c.as_mut_ptr(), c.len());
    let work = || {
        let mut scratch = kept_scratch::take::<S>();
        loop {
            let block = next.fetch_add(1, Ordering::Relaxed);
            if block >= blocks {
                break;
            }
            let (lo, hi) = (starts[block], starts[block + 1]);
            // SAFETY: blocks are disjoint row ranges, each taken by one thread; `c` is borrowed
            // mutably for the whole call and outlives the scope.
            let rows = unsafe { out.rows(lo * n, hi * n) };
            body(&mut scratch, lo, hi, rows);
        }
        kept_scratch::keep(scratch);
    };
    nm_runtime::workers::run_on(threads.min(blocks), work);
}

/// `C`'s memory, handed to the threads, each of which writes its own rows.
struct SharedOut<T>(*mut T, usize);

// SAFETY: threads write disjoint row ranges of the array behind the pointer (see `spmm_with`).
unsafe impl<T: Send> Send for SharedOut<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SharedOut<T> {}

impl<T> SharedOut<T> {
    /// Elements `lo..hi`.
    ///
    /// # Safety
    /// No other live reference covers `lo..hi`, and `hi` is within the array.
    #[allow(clippy::mut_from_ref)]
    unsafe fn rows(&self, lo: usize, hi: usize) -> &mut [T] {
        assert!(lo <= hi && hi <= self.1, "rows {lo}..{hi} outside C");
        // SAFETY: in bounds (checked) and unaliased by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(lo), hi - lo) }
    }
}

/// Lanes per strip of B's packed values for vectors of `l` elements of `size` bytes: one
/// cache line's worth where `l` is a multiple of it, else `l`. A pass of the kernels over some
/// of `L`'s lanes then streams one contiguous strip, where whole vectors made it read a line
/// and skip the rest (f64 with L = 32 on AVX2: four passes each reading 64 of every 256
/// bytes). A compile-time constant in the tile passes, so that a kept vector's values and
/// those prefetched ahead are addressed by constant displacements.
const fn strip_lanes(l: usize, size: usize) -> usize {
    let line = CACHE_LINE / size;
    if l.is_multiple_of(line) { line } else { l }
}

/// Elements from one row of a transposed tile of `rows` rows to the next: a power of two, so
/// that one row's values never straddle two cache lines (6 rows of f32 in 24 bytes did, and
/// 1:8 ran at 54 against 4:8's 86 GFLOP/s) — given a buffer that starts on a line
/// ([`LineAligned`]: a `Vec` of a transposed block's size comes from `mmap` 16 bytes past a
/// page, where every other f32 row of 32 bytes straddled two lines).
const fn row_stride(rows: usize) -> usize {
    rows.next_power_of_two()
}

/// A register tile in intrinsics: `R` rows × group `g`'s `L` lanes from the tile's rows of A
/// transposed (`a_t[kk·R + i]`, `k × R`), every element of `out` overwritten.
type SimdTile<T, const L: usize, const R: usize> = unsafe fn(&[T], &NmMatrix<'_, T>, usize, &mut [[T; L]; R]);

/// A block's tile in intrinsics and how it gets its rows of A.
struct SimdTiles<T, const L: usize, const R: usize> {
    tile: SimdTile<T, L, R>,
    /// The tile reads a group's kept rows packed ([`Loading`]), not the whole transposed tile.
    packed: bool,
    /// AVX-512: A's tiles are transposed a cache line at a time in registers
    /// ([`Simd::transpose_lines`]) where a row of the transposed tile is one line, and each row
    /// of a tile's sums goes to C in whole aligned lines ([`store_in_lines`]).
    avx512: bool,
}

/// The part of C one call computes: rows `lo..hi` (those its `c` holds) × the column groups
/// `groups` (a panel of B, [`Blocking`]), which the tiles take in chunks of `chunk_groups`.
#[derive(Clone, Debug)]
struct Part {
    lo: usize,
    hi: usize,
    groups: std::ops::Range<usize>,
    chunk_groups: usize,
}

/// `part` of `C` (`c` holds exactly its rows), A read packed where `packed`. `scratch` holds
/// the thread's buffers (the transposed block, a tile's kept rows).
fn block_rows_of<T: Real>(
    isa: Isa,
    packed: bool,
    a: &[T],
    part: Part,
    b: &NmMatrix<'_, T>,
    c: &mut [T],
    scratch: &mut Scratch<T>,
) {
    macro_rules! lanes {
        ($run:ident) => {
            match b.l {
                1 => $run::<T, 1>(a, part, b, c, scratch, packed),
                4 => $run::<T, 4>(a, part, b, c, scratch, packed),
                8 => $run::<T, 8>(a, part, b, c, scratch, packed),
                16 => $run::<T, 16>(a, part, b, c, scratch, packed),
                32 => $run::<T, 32>(a, part, b, c, scratch, packed),
                _ => generic_l(a, part, b, c),
            }
        };
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if T::ROWS_512 == ROWS_512_F32 => {
            // SAFETY: `spmm_with` checked that the CPU supports AVX-512F, AVX2 and FMA.
            unsafe { lanes!(block_avx512_f32_rows) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: as above.
            unsafe { lanes!(block_avx512_f64_rows) }
        }
        // SAFETY: `spmm_with` checked that the CPU supports AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { lanes!(block_avx2) },
        _ => lanes!(block_baseline),
    }
}

/// A block function for one instruction set: its tile variant for the loading and prefetch
/// that `b` calls for, or the portable tile where `L` is not a whole number of vectors.
macro_rules! simd_block {
    ($name:ident, $feature:literal, $tile:ident, $rows:expr, $lanes:ident, $registers:literal, $avx512:literal) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feature)]
        fn $name<T: Real, const L: usize>(
            a: &[T],
            part: Part,
            b: &NmMatrix<'_, T>,
            c: &mut [T],
            scratch: &mut Scratch<T>,
            packed: bool,
        ) {
            const {
                assert!(
                    2 * $rows + 3 <= $registers,
                    "two vectors of sums per row, two of B and a broadcast fit the registers"
                )
            };
            let tile: SimdTile<T, L, $rows> = match (packed, b.prefetch()) {
                (true, _) => T::$tile::<L, { $rows }, false, true>,
                (false, true) => T::$tile::<L, { $rows }, true, false>,
                (false, false) => T::$tile::<L, { $rows }, false, false>,
            };
            let simd = L.is_multiple_of(T::$lanes).then_some(SimdTiles { tile, packed, avx512: $avx512 });
            block::<T, L, true, { $rows }>(a, part, b, c, scratch, simd)
        }
    };
}

simd_block!(block_avx512_f32_rows, "avx512f,avx2,fma", tile_avx512, ROWS_512_F32, LANES_512, 32, true);
simd_block!(block_avx512_f64_rows, "avx512f,avx2,fma", tile_avx512, ROWS_512_F64, LANES_512, 32, true);
simd_block!(block_avx2, "avx2,fma", tile_avx2, ROWS_256, LANES_256, 16, false);

fn block_baseline<T: Real, const L: usize>(
    a: &[T],
    part: Part,
    b: &NmMatrix<'_, T>,
    c: &mut [T],
    scratch: &mut Scratch<T>,
    _packed: bool,
) {
    block::<T, L, false, ROWS_PORTABLE>(a, part, b, c, scratch, None)
}

/// `part`'s rows, `R` rows at a time for a chunk of its groups, then
/// the next chunk; each tile by `simd` where the
/// instruction set has a tile in intrinsics for this `L` (with whether it reads the kept rows
/// packed, [`Loading`]), else by [`tile`]; `FMA` chooses
/// fused multiply-adds (only where the instruction set has them: elsewhere `mul_add` is a
/// library call).
#[inline(always)]
fn block<T: Real, const L: usize, const FMA: bool, const R: usize>(
    a: &[T],
    part: Part,
    b: &NmMatrix<'_, T>,
    c: &mut [T],
    scratch: &mut Scratch<T>,
    simd: Option<SimdTiles<T, L, R>>,
) {
    let Part { lo, hi, groups, chunk_groups: chunk } = part;
    let Scratch { a_t, kept: kept_t } = scratch;
    let (k, n) = (b.rows, b.cols);
    // For the intrinsics, the block's rows of A are first transposed tile by tile (`k × R`):
    // the tile's R values of a kept column then share one cache line, where reading them from
    // R rows touched R lines per kept vector (the bottleneck at high sparsity: 1:8 ran at 70%
    // of 4:8's rate).
    // The padding rows of B's last window read zero rows of the transposed tile, so the
    // kernels index it without a check.
    let tiles = (hi - lo).div_ceil(R);
    let kp = b.padded_rows();
    let stride = row_stride(R);
    if let Some(simd) = &simd {
        if a_t.len() < tiles * kp * stride {
            *a_t = LineAligned::zeros(tiles * kp * stride);
        }
        for (t, tile_t) in a_t[..tiles * kp * stride].chunks_exact_mut(kp * stride).enumerate() {
            // The buffer may come from an earlier product (`kept_scratch`): the padding rows
            // of this B's last window are zeroed, the rest is transposed over.
            let (tile_t, padding) = tile_t.split_at_mut(k * stride);
            padding.fill(T::ZERO);
            // Past the block's end (and in the unused slots of a tile of fewer rows than its
            // stride), the last row again: computed, never stored.
            let row = |i: usize| {
                let row = (lo + t * R + i.min(R - 1)).min(hi - 1);
                &a[row * k..(row + 1) * k]
            };
            if simd.avx512 && stride * std::mem::size_of::<T>() == CACHE_LINE {
                let rows: [&[T]; CACHE_LINE / 4] = std::array::from_fn(row);
                // SAFETY: `avx512` is set only for AVX-512, whose callers checked the CPU;
                // the stride is one line's elements, as many as the rows given.
                unsafe { T::transpose_lines(&rows[..stride], tile_t) };
            } else {
                for first in (0..stride).step_by(8) {
                    let rows: [&[T]; 8] = std::array::from_fn(|i| row(first + i));
                    // SAFETY: `simd` is set only for AVX-512 or AVX2 (both with AVX2), whose
                    // callers checked the CPU; strides are powers of two of at least 8.
                    unsafe { T::transpose8(&rows, tile_t, stride, first) };
                }
            }
        }
    }
    // Every tile's sums, overwritten by each: zeroed once here, where each tile zeroing its
    // own was 8–16% of 1:8 at 1024³ (a 768-byte memset per tile, f32).
    let mut acc = [[T::ZERO; L]; R];
    // AVX-512 stores each row of sums in whole lines ([`store_in_lines`]).
    let avx512 = simd.as_ref().is_some_and(|s| s.avx512);
    let end = groups.end;
    let tiles_of_groups = groups
        .step_by(chunk)
        .flat_map(|g0| (lo..hi).step_by(R).flat_map(move |r| (g0..(g0 + chunk).min(end)).map(move |g| (g, r))));
    for (g, r) in tiles_of_groups {
        let width = L.min(n - g * L);
        let rows = R.min(hi - r);
        // The tile's rows of A; past the block's end, the last row again (computed, not stored).
        let row = |i: usize| {
            let i = (r + i).min(hi - 1);
            &a[i * k..(i + 1) * k]
        };
        match simd {
            Some(SimdTiles { tile, packed, .. }) => {
                let t = (r - lo) / R;
                let tile_t = &a_t[t * kp * stride..(t + 1) * kp * stride];
                let source = if packed {
                    gather_kept(tile_t, &b.kept_rows[b.group(g)], stride, kept_t);
                    &kept_t[..]
                } else {
                    tile_t
                };
                // SAFETY: `simd` is set only by `block_avx512` / `block_avx2` for their own
                // instruction set, whose callers checked the CPU; it reads the kept rows
                // where `packed`, the whole transposed tile otherwise.
                unsafe { tile(source, b, g, &mut acc) }
            }
            None => {
                let a_rows: [&[T]; R] = std::array::from_fn(row);
                acc = tile::<T, L, FMA, R>(&a_rows, b, g);
            }
        }
        for (i, sums) in acc.iter().enumerate().take(rows) {
            let at = (r + i - lo) * n + g * L;
            if width < L {
                c[at..at + width].copy_from_slice(&sums[..width]);
            } else if avx512 {
                // SAFETY: `avx512` is set only for AVX-512, whose callers checked the CPU.
                unsafe { store_in_lines(sums, &mut c[at..at + L]) };
            } else {
                // A constant length (`L`), where a copy of `width` called memmove (4%).
                c[at..at + L].copy_from_slice(sums);
            }
        }
    }
}

/// `row = sums` in whole aligned 64-byte stores where `L` elements are whole lines
/// ([`simd::store_lines`]), else a copy. Each row of C starts 16 bytes past a line (the
/// allocator's header on a page), and a plain store of each vector of sums then split across
/// two lines: with tiles of 14 rows, such split stores cost f64 1:8 3.5–10% against a C aligned
/// to a line (16 of 16 comparisons in one process, 1024³ and 2048³). Line stores, against
/// plain ones on the same C, speedup over OpenBLAS in one process (AVX-512 Xeon): f64 one
/// thread 1024³ 1:8 5.97/6.23× → 6.30/6.50×, 2:8 3.41/3.53× → 3.72/3.74×, 2048³ 1:8 6.18/6.25×
/// → 6.31/6.61×, 4096³ 1:8 6.52× → 6.76×, 1024 × 11008 × 4096 1:8 6.41× → 6.75×; f32 one
/// thread 1024³ 1:8 6.46× → 6.92×, two threads 2:8 3.83× → 3.92×; the rest level, but f32 one
/// thread 256 × 4096 × 4096 1:8 7.81× → 7.57×.
///
/// # Safety
/// The CPU supports AVX-512F.
#[inline(always)]
unsafe fn store_in_lines<T: Real, const L: usize>(sums: &[T; L], row: &mut [T]) {
    assert_eq!(row.len(), L, "a whole row of the tile");
    #[cfg(target_arch = "x86_64")]
    {
        const { assert!(std::mem::size_of::<T>().is_multiple_of(4), "elements of whole 32-bit words") };
        let (src, dst) = (sums.as_ptr().cast::<i32>(), row.as_mut_ptr().cast::<i32>());
        // SAFETY: the caller's CPU has AVX-512F; `sums` and `row` hold `L` elements, as many
        // lines of words as each arm stores.
        unsafe {
            match L * std::mem::size_of::<T>() {
                64 => return simd::store_lines::<1>(src, dst),
                128 => return simd::store_lines::<2>(src, dst),
                256 => return simd::store_lines::<4>(src, dst),
                _ => {}
            }
        }
    }
    row.copy_from_slice(sums);
}

/// `kept_t` = the rows of the transposed tile `tile_t` (`stride` elements each) that a group's
/// kept vectors read, in their order: NM-SpMM's packing of A's kept columns, after which the
/// tile's passes read one sequential array and no row indices.
fn gather_kept<T: Real>(tile_t: &[T], kept_rows: &[u32], stride: usize, kept_t: &mut LineAligned<T>) {
    if kept_t.len() != kept_rows.len() * stride {
        *kept_t = LineAligned::zeros(kept_rows.len() * stride);
    }
    for (row, &kk) in kept_t.chunks_exact_mut(stride).zip(kept_rows) {
        row.copy_from_slice(&tile_t[kk as usize * stride..][..stride]);
    }
}

/// A thread's buffers, kept from block to block: the block's rows of A transposed, and one
/// tile's kept rows of them for a group (where A is packed).
struct Scratch<T> {
    a_t: LineAligned<T>,
    kept: LineAligned<T>,
}

impl<T: Real> Default for Scratch<T> {
    fn default() -> Self {
        Scratch { a_t: LineAligned::default(), kept: LineAligned::default() }
    }
}

/// An `nv24` task's buffers: its tile of C and its rows' kept entries. Each task clears them,
/// so what they hold is their capacity, not their length.
impl<T: Real> kept_scratch::Scratch for (Vec<T>, Vec<(u32, T)>) {
    fn bytes(&self) -> usize {
        self.0.capacity() * std::mem::size_of::<T>() + self.1.capacity() * std::mem::size_of::<(u32, T)>()
    }
}

impl<T: Real> kept_scratch::Scratch for Scratch<T> {
    fn bytes(&self) -> usize {
        std::mem::size_of_val(&self.a_t[..]) + std::mem::size_of_val(&self.kept[..])
    }
}

/// One register tile: `R` rows × group `g`'s `L` lanes, summed over every kept vector.
#[inline(always)]
fn tile<T: Real, const L: usize, const FMA: bool, const R: usize>(
    a_rows: &[&[T]; R],
    b: &NmMatrix<'_, T>,
    g: usize,
) -> [[T; L]; R] {
    let mut acc = [[T::ZERO; L]; R];
    let kept_rows = &b.kept_rows[b.group(g)];
    for (lane0, strip) in b.strips(g) {
        for (&kk, v) in kept_rows.iter().zip(strip.chunks_exact(b.strip())) {
            let kk = kk as usize;
            if kk >= b.rows {
                continue; // a padding row of the last window: zero in B, no column of A
            }
            for (sums, row) in acc.iter_mut().zip(a_rows) {
                let x = row[kk];
                for (s, &y) in sums[lane0..].iter_mut().zip(v) {
                    *s = if FMA { x.mul_add(y, *s) } else { *s + x * y };
                }
            }
        }
    }
    acc
}

/// Any `L` (not one of the compiled lane counts): the same loops with `L` at run time.
fn generic_l<T: Real>(a: &[T], part: Part, b: &NmMatrix<'_, T>, c: &mut [T]) {
    let Part { lo, hi, groups, .. } = part;
    let (k, n, l) = (b.rows, b.cols, b.l);
    let mut acc = vec![T::ZERO; l];
    for i in lo..hi {
        let row = &a[i * k..(i + 1) * k];
        for g in groups.clone() {
            acc.fill(T::ZERO);
            let kept_rows = &b.kept_rows[b.group(g)];
            for (lane0, strip) in b.strips(g) {
                for (&kk, v) in kept_rows.iter().zip(strip.chunks_exact(b.strip())) {
                    let kk = kk as usize;
                    if kk >= k {
                        continue;
                    }
                    let x = row[kk];
                    for (s, &y) in acc[lane0..].iter_mut().zip(v) {
                        *s += x * y;
                    }
                }
            }
            let width = l.min(n - g * l);
            let at = (i - lo) * n + g * l;
            c[at..at + width].copy_from_slice(&acc[..width]);
        }
    }
}

/// The register tiles in intrinsics, AVX-512 and AVX2: the compiler did not vectorize the
/// generic tile across lanes (64 scalar FMAs per kept vector: 6 GFLOP/s at 1024³, f32, 2:8;
/// 4 GFLOP/s on a Zen 3 with AVX2). Here each row keeps `L / LANES` vector accumulators; per
/// kept vector, its `L` values are loaded once and each row's `A` element is broadcast into
/// one FMA per accumulator.
mod simd {
    use super::{B_PREFETCH_AHEAD, NmMatrix, PREFETCH_AHEAD, PREFETCH_AHEAD_F64, ROWS_512_F32, ROWS_512_F64};

    /// A value type with 512- and 256-bit vector operations.
    pub trait Simd: Copy {
        /// Elements per 512-bit vector.
        const LANES_512: usize;
        /// Elements per 256-bit vector.
        const LANES_256: usize;
        /// Rows per AVX-512 register tile.
        const ROWS_512: usize;

        /// One AVX-512 tile (`R` rows × group `g`) from the tile's rows of A transposed
        /// (`a_t[kk·stride + i]`, `stride` the power of two from `R`; where `PACKED`, only the
        /// rows the group's kept vectors read, in their order: `a_t[q·stride + i]`) into `out`,
        /// all of it; `L` is a multiple of `LANES_512`, and `R` rows of two vectors of sums
        /// leave at least three of the 32 registers.
        ///
        /// # Safety
        /// The CPU supports AVX-512F.
        unsafe fn tile_avx512<const L: usize, const R: usize, const PREFETCH: bool, const PACKED: bool>(
            a_t: &[Self],
            b: &NmMatrix<'_, Self>,
            g: usize,
            out: &mut [[Self; L]; R],
        ) where
            Self: Sized;

        /// One AVX2 tile (`R` rows × group `g`), likewise; `L` is a multiple of `LANES_256`,
        /// and `R` rows of two vectors leave at least three of the 16 registers.
        ///
        /// # Safety
        /// The CPU supports AVX2 and FMA.
        unsafe fn tile_avx2<const L: usize, const R: usize, const PREFETCH: bool, const PACKED: bool>(
            a_t: &[Self],
            b: &NmMatrix<'_, Self>,
            g: usize,
            out: &mut [[Self; L]; R],
        ) where
            Self: Sized;

        /// `out[kk·8 + i] = rows[i][kk]` for every row `i < 8` and column `kk` of the rows (all
        /// of one length, `out.len() / 8`): A's rows transposed for the tiles, 8×8 blocks in
        /// registers (one element at a time, the transposition took 12% of 1:8's time at 1024³).
        ///
        /// # Safety
        /// The CPU supports AVX2.
        unsafe fn transpose8(rows: &[&[Self]; 8], out: &mut [Self], stride: usize, first: usize)
        where
            Self: Sized;

        /// `out[kk·W + i] = rows[i][kk]` with `W` = `rows.len()` the elements of one cache line
        /// (16 f32, 8 f64), for every column `kk` of the rows (all of one length,
        /// `out.len() / W`): a whole line of `out` per column, built in AVX-512 registers.
        ///
        /// # Safety
        /// The CPU supports AVX-512F.
        unsafe fn transpose_lines(rows: &[&[Self]], out: &mut [Self])
        where
            Self: Sized;

        /// Adds to each of consecutive rows of an `nv24` product's tile the sum over its kept
        /// entries `(column, value)` of value × the packed panel's row `column` (`k` rows of
        /// `NV24_VECTORS·LANES_256` columns): row `r`'s `each` entries are `kept[r·each..]`, its
        /// columns `out[r·width..]` with that width. One call per chunk of the tile's rows, not
        /// per row: alternated in one process, 5–17% faster (1024³ and 2048³, 1 and 2 threads).
        /// `avx512` chooses AVX-512 (half as many, twice as wide vectors) over AVX2.
        ///
        /// # Safety
        /// The CPU supports AVX-512F if `avx512`, else AVX2 and FMA; every column below `k`
        /// indexes a row of `panel`.
        unsafe fn nv24_rows(
            avx512: bool,
            kept: &[(u32, Self)],
            each: usize,
            k: usize,
            panel: &[Self],
            out: &mut [Self],
        ) where
            Self: Sized;
    }

    /// The body of a tile function: `R` rows × group `g`, two vectors per row at a time
    /// (AVX-512: 14 × 2 = 28 accumulators in f32 and f64, which leaves registers for B;
    /// AVX2: 6 × 2 = 12 of 16 registers). Wider rows (f64 with L = 32) take several passes,
    /// each a call: all four vectors at once spilled (39 against OpenBLAS's 51 GFLOP/s), and so did one of
    /// the passes once the compiler unrolled them (f64, AVX2: 25 GFLOP/s).
    ///
    /// The AVX-512 pass uses 31 of the 32 registers, and LLVM keeps them only while a kept
    /// vector's work stays as it is. Small additions broke that (twenty-sixth session):
    /// - one more prefetch per kept vector;
    /// - a branch that loads the sums from `out` instead of zeroing them;
    /// - two constants bound to a local that `step` read.
    ///
    /// Each made LLVM hoist the 14 broadcasts into registers, or stop inlining `step`. The pass
    /// then moved accumulators to and from the stack every kept vector (about 40 such moves in
    /// its loop), and f64 1:8 fell from 60 to 26 GFLOP/s. The test `tests/registers.rs`
    /// disassembles its own optimized build and fails on any `zmm` register moved to or from
    /// the stack in a pass.
    macro_rules! tile_body {
        ($feature:literal, $a_t:ident, $b:ident, $g:ident, $out:ident, $t:ty, $lanes:expr, $vec:ty,
         $zero:ident, $load:ident, $set1:ident, $fmadd:ident, $store:ident) => {{
            /// Lanes `lane0..lane0 + COUNT·LANES` of the tile's rows into `out`; `kept_rows`
            /// are the kept vectors' rows, or their offsets where `reads_kept_at(R, PACKED)`.
            #[target_feature(enable = $feature)]
            #[inline(never)]
            fn pass<const L: usize, const R: usize, const PREFETCH: bool, const PACKED: bool, const COUNT: usize>(
                a_t: &[$t],
                kept_rows: &[u32],
                values: &[$t],
                lane0: usize,
                out: &mut [[$t; L]; R],
            ) {
                use std::arch::x86_64::*;
                let stride = super::row_stride(R);
                let strip = super::strip_lanes(L, std::mem::size_of::<$t>());
                // What makes the unchecked reads below in bounds: the caller's `kept_rows`
                // are rows below `padded_rows` (checked by `NmMatrix::new`) or those rows'
                // offsets, and `a_t` holds that many rows, or where `PACKED` one row per kept
                // vector (asserted by the caller); the group's values are whole strips of whole
                // vectors (asserted here).
                let kept = kept_rows.len();
                assert!(
                    values.len() == kept * L
                        && L.is_multiple_of(strip)
                        && strip.is_multiple_of($lanes)
                        && lane0 + COUNT * $lanes <= L,
                    "the kept vectors' values in strips"
                );
                // Vector `j`'s lanes in the first kept vector; the next kept vector's are a strip on.
                let start: [usize; COUNT] = std::array::from_fn(|j| {
                    let lane = lane0 + j * $lanes;
                    lane / strip * kept * strip + lane % strip
                });
                let mut acc: [[$vec; COUNT]; R] = [[$zero(); COUNT]; R];
                let b_ahead = B_PREFETCH_AHEAD * strip;
                let a_ahead = if std::mem::size_of::<$t>() == 8 { PREFETCH_AHEAD_F64 } else { PREFETCH_AHEAD };
                // One kept vector: B's values prefetched ahead, then its FMAs.
                let mut step = |q: usize, kk: u32, at: usize| {
                    for j in 0..COUNT {
                        // One prefetch per line (an AVX2 vector is half of one); past the
                        // group's end the address is only a hint, never read.
                        if (j * $lanes * std::mem::size_of::<$t>()).is_multiple_of(super::CACHE_LINE) {
                            _mm_prefetch::<_MM_HINT_T0>(values.as_ptr().wrapping_add(start[j] + at + b_ahead).cast());
                        }
                    }
                    let row = if PACKED { q * stride } else { super::row_at(kk, R, PACKED) };
                    // SAFETY: `kk` is a row below `padded_rows` or its offset (or, packed,
                    // `q < kept`), so the tile's `R` values from `row` are within `a_t`
                    // (see above).
                    let column = unsafe { a_t.as_ptr().add(row) };
                    let bv: [$vec; COUNT] = std::array::from_fn(|j| {
                        // SAFETY: `start[j] + at` is (the lane's strip)·kept·strip + q·strip +
                        // lane % strip with `q < kept` and `lane % strip + LANES <= strip`:
                        // within the strip's `kept·strip` values, within `values` (asserted).
                        unsafe { $load(values.as_ptr().add(start[j] + at)) }
                    });
                    for (i, sums) in acc.iter_mut().enumerate() {
                        // SAFETY: `i < R <= stride`, within the row's values (see `column`).
                        let x = $set1(unsafe { *column.add(i) });
                        for j in 0..COUNT {
                            sums[j] = $fmadd(x, bv[j], sums[j]);
                        }
                    }
                };
                // A's rows prefetched `a_ahead` kept vectors ahead while that many are left, then
                // the rest without: no clamp and no bounds check in the loop, whose f64 body
                // issues ~4 µops a cycle at FMA peak (f64 1:8 alternated in one process: 0–5%
                // faster than clamping the index; in alternated processes, level).
                let main = if PREFETCH { kept.saturating_sub(a_ahead) } else { 0 };
                let (mut q, mut at) = (0, 0);
                for (&kk, &ahead) in kept_rows[..main].iter().zip(&kept_rows[a_ahead.min(kept)..]) {
                    _mm_prefetch::<_MM_HINT_T0>(a_t.as_ptr().wrapping_add(super::row_at(ahead, R, PACKED)).cast());
                    // An f64 row of 14 (stride 16) is two lines.
                    if stride * std::mem::size_of::<$t>() > super::CACHE_LINE {
                        _mm_prefetch::<_MM_HINT_T0>(
                            a_t.as_ptr()
                                .wrapping_add(
                                    super::row_at(ahead, R, PACKED) + super::CACHE_LINE / std::mem::size_of::<$t>(),
                                )
                                .cast(),
                        );
                    }
                    step(q, kk, at);
                    (q, at) = (q + 1, at + strip);
                }
                for &kk in &kept_rows[main..] {
                    step(q, kk, at);
                    (q, at) = (q + 1, at + strip);
                }
                for (row, sums) in out.iter_mut().zip(&acc) {
                    for j in 0..COUNT {
                        // SAFETY: `row` holds `L` elements, `lane0 + COUNT·LANES <= L`.
                        unsafe { $store(row.as_mut_ptr().add(lane0 + j * $lanes), sums[j]) };
                    }
                }
            }

            let kept = $b.group($g);
            let kept_rows =
                if super::reads_kept_at(R, PACKED) { &$b.kept_at[kept.clone()] } else { &$b.kept_rows[kept.clone()] };
            let values = &$b.values[kept.start * L..kept.end * L];
            let rows = if PACKED { kept_rows.len() } else { $b.padded_rows() };
            assert_eq!($a_t.len(), rows * super::row_stride(R), "a transposed tile of padded rows, or its kept rows");
            assert_eq!($b.l, L, "a tile compiled for B's L");
            let vectors = L / $lanes;
            for first_vector in (0..vectors).step_by(2) {
                let lane0 = first_vector * $lanes;
                if vectors - first_vector >= 2 {
                    pass::<L, R, PREFETCH, PACKED, 2>($a_t, kept_rows, values, lane0, $out);
                } else {
                    pass::<L, R, PREFETCH, PACKED, 1>($a_t, kept_rows, values, lane0, $out);
                }
            }
        }};
    }

    /// The body of an `nv24` chunk: `NV24_VECTORS·LANES_256` columns in as many registers as
    /// that takes, loaded from `out`, summed over the kept entries, stored back.
    macro_rules! nv24_body {
        ($kept:ident, $k:ident, $b:ident, $n:ident, $start:ident, $out:ident, $lanes:expr, $lanes256:expr,
         $load:ident, $set1:ident, $fmadd:ident, $store:ident) => {{
            use std::arch::x86_64::*;
            const WIDTH: usize = super::NV24_VECTORS * $lanes256;
            const VECTORS: usize = WIDTH / $lanes;
            assert!($out.len() >= WIDTH && $start + WIDTH <= $n, "a whole chunk of C and of B's rows");
            // SAFETY: `out` holds `WIDTH` elements (asserted).
            let mut acc: [_; VECTORS] = std::array::from_fn(|j| unsafe { $load($out.as_ptr().add(j * $lanes)) });
            for &(column, x) in $kept {
                let column = column as usize;
                if column >= $k {
                    continue; // padding of the last block
                }
                let segment = &$b[column * $n + $start..][..WIDTH];
                let x = $set1(x);
                for (j, sum) in acc.iter_mut().enumerate() {
                    // SAFETY: `segment` holds `WIDTH` elements.
                    *sum = $fmadd(x, unsafe { $load(segment.as_ptr().add(j * $lanes)) }, *sum);
                }
            }
            for (j, sum) in acc.iter().enumerate() {
                // SAFETY: `out` holds `WIDTH` elements (asserted).
                unsafe { $store($out.as_mut_ptr().add(j * $lanes), *sum) };
            }
        }};
    }

    /// A tile method of [`Simd`]: `tile_body!` compiled for one instruction set.
    macro_rules! tile_method {
        ($name:ident, $feature:literal, $t:ty, $lanes:expr,
         [$vec:ty, $zero:ident, $load:ident, $set1:ident, $fmadd:ident, $store:ident]) => {
            #[cfg(target_arch = "x86_64")]
            unsafe fn $name<const L: usize, const R: usize, const PREFETCH: bool, const PACKED: bool>(
                a_t: &[$t],
                b: &NmMatrix<'_, $t>,
                g: usize,
                out: &mut [[$t; L]; R],
            ) {
                #[target_feature(enable = $feature)]
                fn run<const L: usize, const R: usize, const PREFETCH: bool, const PACKED: bool>(
                    a_t: &[$t],
                    b: &NmMatrix<'_, $t>,
                    g: usize,
                    out: &mut [[$t; L]; R],
                ) {
                    tile_body!($feature, a_t, b, g, out, $t, $lanes, $vec, $zero, $load, $set1, $fmadd, $store)
                }
                // SAFETY: the caller checked that the CPU supports the instruction set.
                unsafe { run::<L, R, PREFETCH, PACKED>(a_t, b, g, out) }
            }
        };
    }

    macro_rules! simd {
        ($t:ty, $lanes512:expr, $lanes256:expr, $rows512:expr,
         [$v512:ty, $zero512:ident, $load512:ident, $set512:ident, $fma512:ident, $store512:ident],
         [$v256:ty, $zero256:ident, $load256:ident, $set256:ident, $fma256:ident, $store256:ident],
         $transpose:ident, $transpose_lines:ident) => {
            impl Simd for $t {
                const LANES_512: usize = $lanes512;
                const LANES_256: usize = $lanes256;
                const ROWS_512: usize = $rows512;

                tile_method!(
                    tile_avx512,
                    "avx512f",
                    $t,
                    $lanes512,
                    [$v512, $zero512, $load512, $set512, $fma512, $store512]
                );
                tile_method!(
                    tile_avx2,
                    "avx2,fma",
                    $t,
                    $lanes256,
                    [$v256, $zero256, $load256, $set256, $fma256, $store256]
                );

                #[cfg(target_arch = "x86_64")]
                unsafe fn transpose8(rows: &[&[$t]; 8], out: &mut [$t], stride: usize, first: usize) {
                    // SAFETY: the caller checked that the CPU supports AVX2.
                    unsafe { $transpose(rows, out, stride, first) }
                }

                #[cfg(not(target_arch = "x86_64"))]
                unsafe fn transpose8(_: &[&[$t]; 8], _: &mut [$t], _: usize, _: usize) {
                    unreachable!("AVX2 is only selected on x86-64")
                }

                #[cfg(target_arch = "x86_64")]
                unsafe fn transpose_lines(rows: &[&[$t]], out: &mut [$t]) {
                    // SAFETY: the caller checked that the CPU supports AVX-512F.
                    unsafe { $transpose_lines(rows, out) }
                }

                #[cfg(not(target_arch = "x86_64"))]
                unsafe fn transpose_lines(_: &[&[$t]], _: &mut [$t]) {
                    unreachable!("AVX-512 is only selected on x86-64")
                }

                #[cfg(target_arch = "x86_64")]
                unsafe fn nv24_rows(
                    avx512: bool,
                    kept: &[(u32, $t)],
                    each: usize,
                    k: usize,
                    panel: &[$t],
                    out: &mut [$t],
                ) {
                    const WIDTH: usize = super::NV24_VECTORS * $lanes256;
                    #[target_feature(enable = "avx512f")]
                    fn run512(kept: &[(u32, $t)], each: usize, k: usize, b: &[$t], out: &mut [$t]) {
                        for (kept, out) in kept.chunks_exact(each.max(1)).zip(out.chunks_exact_mut(WIDTH)) {
                            let (n, start) = (WIDTH, 0);
                            nv24_body!(
                                kept, k, b, n, start, out, $lanes512, $lanes256, $load512, $set512, $fma512, $store512
                            )
                        }
                    }
                    #[target_feature(enable = "avx2,fma")]
                    fn run256(kept: &[(u32, $t)], each: usize, k: usize, b: &[$t], out: &mut [$t]) {
                        for (kept, out) in kept.chunks_exact(each.max(1)).zip(out.chunks_exact_mut(WIDTH)) {
                            let (n, start) = (WIDTH, 0);
                            nv24_body!(
                                kept, k, b, n, start, out, $lanes256, $lanes256, $load256, $set256, $fma256, $store256
                            )
                        }
                    }
                    if avx512 {
                        // SAFETY: the caller checked that the CPU supports AVX-512F.
                        unsafe { run512(kept, each, k, panel, out) }
                    } else {
                        // SAFETY: the caller checked that the CPU supports AVX2 and FMA.
                        unsafe { run256(kept, each, k, panel, out) }
                    }
                }

                #[cfg(not(target_arch = "x86_64"))]
                unsafe fn tile_avx512<const L: usize, const R: usize, const PREFETCH: bool, const PACKED: bool>(
                    _: &[$t],
                    _: &NmMatrix<'_, $t>,
                    _: usize,
                    _: &mut [[$t; L]; R],
                ) {
                    unreachable!("AVX-512 is only selected on x86-64")
                }

                #[cfg(not(target_arch = "x86_64"))]
                unsafe fn tile_avx2<const L: usize, const R: usize, const PREFETCH: bool, const PACKED: bool>(
                    _: &[$t],
                    _: &NmMatrix<'_, $t>,
                    _: usize,
                    _: &mut [[$t; L]; R],
                ) {
                    unreachable!("AVX2 is only selected on x86-64")
                }

                #[cfg(not(target_arch = "x86_64"))]
                unsafe fn nv24_rows(_: bool, _: &[(u32, $t)], _: usize, _: usize, _: &[$t], _: &mut [$t]) {
                    unreachable!("AVX-512 is only selected on x86-64")
                }
            }
        };
    }

    simd!(
        f32,
        16,
        8,
        ROWS_512_F32,
        [__m512, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_storeu_ps],
        [__m256, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_storeu_ps],
        transpose8_f32,
        transpose_lines_f32
    );
    simd!(
        f64,
        8,
        4,
        ROWS_512_F64,
        [__m512d, _mm512_setzero_pd, _mm512_loadu_pd, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_storeu_pd],
        [__m256d, _mm256_setzero_pd, _mm256_loadu_pd, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_storeu_pd],
        transpose8_f64,
        transpose_lines_f64
    );

    /// `V` lines' worth of words (`16·V`, from `src`) stored at `dst` in `V + 1` aligned 64-byte
    /// stores, the first and last masked to the words within `dst`'s span (`V` aligned stores
    /// where `dst` starts a line): the words rotated into place across registers, so that no
    /// store splits across two lines (see [`super::store_in_lines`]).
    ///
    /// # Safety
    /// `src` holds `16·V` readable words and `dst` as many writable ones; `dst` is aligned to
    /// its 4-byte words (as f32 and f64 elements are).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn store_lines<const V: usize>(src: *const i32, dst: *mut i32) {
        use std::arch::x86_64::*;
        const WORDS: usize = 16;
        // SAFETY: `src` holds V vectors of words (the caller's contract).
        let words: [__m512i; V] = std::array::from_fn(|j| unsafe { _mm512_loadu_si512(src.add(WORDS * j).cast()) });
        // Words of `dst`'s first line before `dst`.
        let off = (dst as usize % super::CACHE_LINE) / 4;
        if off == 0 {
            for (j, &w) in words.iter().enumerate() {
                // SAFETY: `dst` is line-aligned and holds V lines (the caller's contract).
                unsafe { _mm512_store_si512(dst.add(WORDS * j).cast(), w) };
            }
            return;
        }
        // Lane t of line j is word 16j - off + t: from vector j - 1 where t < off.
        let rotate = _mm512_add_epi32(
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
            _mm512_set1_epi32((WORDS - off) as i32),
        );
        let zero = _mm512_setzero_si512();
        let line = |j: usize| {
            let before = if j == 0 { zero } else { words[j - 1] };
            _mm512_permutex2var_epi32(before, rotate, if j == V { zero } else { words[j] })
        };
        let first = dst.wrapping_sub(off);
        // SAFETY: the lines from `first` on are line-aligned; the first and last stores are
        // masked to the words within `dst`'s span (masked-off lanes are neither written nor
        // faulted on), the others lie within it.
        unsafe {
            _mm512_mask_storeu_epi32(first, u16::MAX << off, line(0));
            for j in 1..V {
                _mm512_store_si512(first.add(WORDS * j).cast(), line(j));
            }
            _mm512_mask_storeu_epi32(first.wrapping_add(WORDS * V), !(u16::MAX << off), line(V));
        }
    }

    /// The columns the register blocks leave over, one element at a time: from column `from`
    /// on, `out[kk·stride + first + i] = rows[i][kk]`.
    #[cfg(target_arch = "x86_64")]
    fn transpose_tail<T: Copy>(rows: &[&[T]], out: &mut [T], stride: usize, first: usize, from: usize) {
        for kk in from..out.len() / stride {
            for (i, row) in rows.iter().enumerate() {
                out[kk * stride + first + i] = row[kk];
            }
        }
    }

    /// [`Simd::transpose8`] for f32: per 8 columns, 8 row loads, the classic 24 shuffles, 8
    /// stores.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn transpose8_f32(rows: &[&[f32]; 8], out: &mut [f32], stride: usize, first: usize) {
        use std::arch::x86_64::*;
        assert!(first + 8 <= stride && out.len().is_multiple_of(stride), "8 slots of each row of `out`");
        let k = out.len() / stride;
        assert!(rows.iter().all(|row| row.len() == k), "8 rows of {k}");
        let whole = k / 8 * 8;
        for kk in (0..whole).step_by(8) {
            // SAFETY: `kk + 8 <= k`, the length of every row (asserted).
            let r: [__m256; 8] = std::array::from_fn(|i| unsafe { _mm256_loadu_ps(rows[i].as_ptr().add(kk)) });
            let t = [
                _mm256_unpacklo_ps(r[0], r[1]),
                _mm256_unpackhi_ps(r[0], r[1]),
                _mm256_unpacklo_ps(r[2], r[3]),
                _mm256_unpackhi_ps(r[2], r[3]),
                _mm256_unpacklo_ps(r[4], r[5]),
                _mm256_unpackhi_ps(r[4], r[5]),
                _mm256_unpacklo_ps(r[6], r[7]),
                _mm256_unpackhi_ps(r[6], r[7]),
            ];
            let u = [
                _mm256_shuffle_ps::<0x44>(t[0], t[2]),
                _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
                _mm256_shuffle_ps::<0x44>(t[1], t[3]),
                _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
                _mm256_shuffle_ps::<0x44>(t[4], t[6]),
                _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
                _mm256_shuffle_ps::<0x44>(t[5], t[7]),
                _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
            ];
            for c in 0..4 {
                let low = _mm256_permute2f128_ps::<0x20>(u[c], u[c + 4]);
                let high = _mm256_permute2f128_ps::<0x31>(u[c], u[c + 4]);
                // SAFETY: columns `kk + c` and `kk + c + 4` are below `k`, so their 8 slots
                // from `first` are within `out` (`stride·k` long, `first + 8 <= stride`:
                // asserted).
                unsafe {
                    _mm256_storeu_ps(out.as_mut_ptr().add((kk + c) * stride + first), low);
                    _mm256_storeu_ps(out.as_mut_ptr().add((kk + c + 4) * stride + first), high);
                }
            }
        }
        transpose_tail(rows, out, stride, first, whole);
    }

    /// [`Simd::transpose_lines`] for f32: per 4 columns, the 16 rows' 4 values loaded as the
    /// 128-bit lanes of 4 registers (lane `j` of register `q` from row `4j + q`), then one
    /// 4×4 transpose within the lanes (8 shuffles) leaves column `c`'s 16 values in register
    /// `c`, stored as one line. [`Simd::transpose8`]'s 8×8 blocks into half lines (24 shuffles
    /// per 64 values, every line written in two passes) took 0.33 ms of 1:8's 2.15 at 1024³ in
    /// f32 on an AVX-512 Xeon; this takes 0.26.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn transpose_lines_f32(rows: &[&[f32]], out: &mut [f32]) {
        use std::arch::x86_64::*;
        const W: usize = 16;
        assert!(rows.len() == W && out.len().is_multiple_of(W), "16 rows, whole lines of `out`");
        let k = out.len() / W;
        assert!(rows.iter().all(|row| row.len() == k), "16 rows of {k}");
        let whole = k / 4 * 4;
        for kk in (0..whole).step_by(4) {
            // SAFETY: `kk + 4 <= k`, the length of every row (asserted).
            let quarter = |i: usize| unsafe { _mm_loadu_ps(rows[i].as_ptr().add(kk)) };
            let r: [__m512; 4] = std::array::from_fn(|q| {
                let v = _mm512_castps128_ps512(quarter(q));
                let v = _mm512_insertf32x4::<1>(v, quarter(4 + q));
                let v = _mm512_insertf32x4::<2>(v, quarter(8 + q));
                _mm512_insertf32x4::<3>(v, quarter(12 + q))
            });
            let t = [
                _mm512_unpacklo_ps(r[0], r[1]),
                _mm512_unpackhi_ps(r[0], r[1]),
                _mm512_unpacklo_ps(r[2], r[3]),
                _mm512_unpackhi_ps(r[2], r[3]),
            ];
            let columns = [
                _mm512_shuffle_ps::<0x44>(t[0], t[2]),
                _mm512_shuffle_ps::<0xEE>(t[0], t[2]),
                _mm512_shuffle_ps::<0x44>(t[1], t[3]),
                _mm512_shuffle_ps::<0xEE>(t[1], t[3]),
            ];
            for (c, column) in columns.into_iter().enumerate() {
                // SAFETY: column `kk + c < k`: its line is within `out` (`W·k` long).
                unsafe { _mm512_storeu_ps(out.as_mut_ptr().add((kk + c) * W), column) };
            }
        }
        transpose_tail(rows, out, W, 0, whole);
    }

    /// [`Simd::transpose_lines`] for f64: per 2 columns, the 8 rows' 2 values as the 128-bit
    /// lanes of 2 registers (lane `j` of register `q` from row `2j + q`), one unpack each way.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn transpose_lines_f64(rows: &[&[f64]], out: &mut [f64]) {
        use std::arch::x86_64::*;
        const W: usize = 8;
        assert!(rows.len() == W && out.len().is_multiple_of(W), "8 rows, whole lines of `out`");
        let k = out.len() / W;
        assert!(rows.iter().all(|row| row.len() == k), "8 rows of {k}");
        let whole = k / 2 * 2;
        for kk in (0..whole).step_by(2) {
            // SAFETY: `kk + 2 <= k`, the length of every row (asserted).
            // (As f32 lanes: inserting pairs of doubles, `vinsertf64x2`, needs AVX-512DQ.)
            let quarter = |i: usize| _mm_castpd_ps(unsafe { _mm_loadu_pd(rows[i].as_ptr().add(kk)) });
            let r: [__m512d; 2] = std::array::from_fn(|q| {
                let v = _mm512_castps128_ps512(quarter(q));
                let v = _mm512_insertf32x4::<1>(v, quarter(2 + q));
                let v = _mm512_insertf32x4::<2>(v, quarter(4 + q));
                _mm512_castps_pd(_mm512_insertf32x4::<3>(v, quarter(6 + q)))
            });
            let columns = [_mm512_unpacklo_pd(r[0], r[1]), _mm512_unpackhi_pd(r[0], r[1])];
            for (c, column) in columns.into_iter().enumerate() {
                // SAFETY: column `kk + c < k`: its line is within `out` (`W·k` long).
                unsafe { _mm512_storeu_pd(out.as_mut_ptr().add((kk + c) * W), column) };
            }
        }
        transpose_tail(rows, out, W, 0, whole);
    }

    /// [`Simd::transpose8`] for f64: 4×4 blocks of doubles, rows 0–3 into a column's first
    /// half and rows 4–7 into its second.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn transpose8_f64(rows: &[&[f64]; 8], out: &mut [f64], stride: usize, first: usize) {
        use std::arch::x86_64::*;
        assert!(first + 8 <= stride && out.len().is_multiple_of(stride), "8 slots of each row of `out`");
        let k = out.len() / stride;
        assert!(rows.iter().all(|row| row.len() == k), "8 rows of {k}");
        let whole = k / 4 * 4;
        for kk in (0..whole).step_by(4) {
            for half in 0..2 {
                // SAFETY: `kk + 4 <= k`, the length of every row (asserted).
                let r: [__m256d; 4] =
                    std::array::from_fn(|i| unsafe { _mm256_loadu_pd(rows[4 * half + i].as_ptr().add(kk)) });
                let t = [
                    _mm256_unpacklo_pd(r[0], r[1]),
                    _mm256_unpackhi_pd(r[0], r[1]),
                    _mm256_unpacklo_pd(r[2], r[3]),
                    _mm256_unpackhi_pd(r[2], r[3]),
                ];
                let columns = [
                    _mm256_permute2f128_pd::<0x20>(t[0], t[2]),
                    _mm256_permute2f128_pd::<0x20>(t[1], t[3]),
                    _mm256_permute2f128_pd::<0x31>(t[0], t[2]),
                    _mm256_permute2f128_pd::<0x31>(t[1], t[3]),
                ];
                for (c, column) in columns.into_iter().enumerate() {
                    // SAFETY: column `kk + c` is below `k`: its 8 slots from `first` are
                    // within `out` (`stride·k` long, `first + 8 <= stride`: asserted).
                    unsafe { _mm256_storeu_pd(out.as_mut_ptr().add((kk + c) * stride + first + 4 * half), column) };
                }
            }
        }
        transpose_tail(rows, out, stride, first, whole);
    }
}

/// `C = A·B` with `A` (`m×k`) in `nv24` — element-wise 2:4 along each row: every block of 4
/// columns keeps 2 entries, their values and offsets — `B` dense (`k×n`, row-major) and `C`
/// dense (`m×n`, overwritten), on `threads` threads.
///
/// Each row of `C` is summed in chunks of columns held in an accumulator while the row's
/// kept entries stream past (one broadcast of `A` and one row segment of `B` per entry); the
/// chunk loop is compiled for AVX-512 / AVX2 and chosen at run time like [`spmm`]'s.
pub fn spmm_nv24<T: Real>(a: &Tensor<T>, b: &[T], n: usize, c: &mut [T], threads: usize) -> Result<(), SpmmError> {
    if a.format() != &nm_format::Format::nv24(2) {
        return Err(SpmmError::NotNv24(a.format().to_string()));
    }
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let LevelStorage::Structured { meta, .. } = &a.levels()[1] else {
        return Err(SpmmError::NotNv24(a.format().to_string()));
    };
    if b.len() != k * n {
        return Err(SpmmError::Length { what: "B", expected: k * n, actual: b.len() });
    }
    if c.len() != m * n {
        return Err(SpmmError::Length { what: "C", expected: m * n, actual: c.len() });
    }
    let isa = Isa::detect();
    let per_row = k.div_ceil(4) * 2;
    let rows_per_task = NV24_ROWS;
    // Each row's kept entries `(column, value)`, laid out per task by the thread that runs it
    // ([`kept_entries`]). Laid out for every row before the tasks started, they took 10% of
    // 1024³ on one thread, alone while the other threads waited (alternated in one process,
    // 2 threads: 2–15% faster per task; level on one).
    let values = a.values();
    let depth = NV24_DEPTH / 2;
    // Column chunks outermost within a task's rows, then chunks of `NV24_DEPTH` rows of B:
    // the chunk's panel of B stays in L1 while the task's rows pass, each adding its kept
    // entries of those rows of B to its segment of C, kept in a contiguous tile. (Row by row
    // over all of B, every row re-read B from memory; over whole columns of B, every FMA
    // waited on L2: 9–13 GFLOP/s at 1024³ on a Zen 3.)
    let chunk = NV24_VECTORS * T::LANES_256;
    // B's whole column chunks packed panel by panel (`k × chunk`, row-major): the rows of one
    // chunk lie `n` apart in B, 4 KiB at n = 1024 f32, and evicted each other likewise.
    let panels = if matches!(isa, Isa::Avx512 | Isa::Avx2) { n / chunk } else { 0 };
    // A panel row is whole cache lines (see `LineAligned`).
    let mut packed = LineAligned::zeros(panels * k * chunk);
    for p in 0..panels {
        for (row, out) in b.chunks_exact(n.max(1)).zip(packed[p * k * chunk..].chunks_exact_mut(chunk)) {
            out.copy_from_slice(&row[p * chunk..(p + 1) * chunk]);
        }
    }
    let packed = &*packed;
    row_blocks(
        c,
        n,
        &block_starts(m, 1, rows_per_task, threads),
        threads,
        |(tile, entries): &mut (Vec<T>, Vec<(u32, T)>), lo, hi, rows| {
            entries.clear();
            kept_entries(values, meta, per_row, lo, hi, depth, entries);
            let task_entries = &entries[..];
            for start in (0..n).step_by(chunk) {
                let width = chunk.min(n - start);
                tile.clear();
                tile.resize((hi - lo) * chunk, T::ZERO);
                for first in (0..per_row).step_by(depth) {
                    let each = depth.min(per_row - first);
                    let chunk_entries = &task_entries[(hi - lo) * first..(hi - lo) * (first + each)];
                    #[cfg(target_arch = "x86_64")]
                    if matches!(isa, Isa::Avx512 | Isa::Avx2) && width == chunk {
                        let panel = &packed[start * k..(start + chunk) * k];
                        // SAFETY: the CPU supports what `isa` names (`Isa::detect`); the chunk is
                        // whole, so packed: its panel has `k` rows of `chunk`.
                        unsafe { T::nv24_rows(isa == Isa::Avx512, chunk_entries, each, k, panel, tile) };
                        continue;
                    }
                    for (kept, part) in chunk_entries.chunks_exact(each).zip(tile.chunks_exact_mut(chunk)) {
                        let part = &mut part[..width];
                        match isa {
                            // SAFETY: the CPU supports AVX2 and FMA (`Isa::detect`).
                            #[cfg(target_arch = "x86_64")]
                            Isa::Avx512 | Isa::Avx2 => unsafe { nv24_columns_fma(kept, k, b, n, start, part) },
                            _ => nv24_columns::<T, false>(kept, k, b, n, start, part),
                        }
                    }
                }
                for (row, sums) in rows.chunks_exact_mut(n).zip(tile.chunks_exact(chunk)) {
                    row[start..start + width].copy_from_slice(&sums[..width]);
                }
            }
        },
    );
    Ok(())
}
/// Appends rows `lo..hi`'s kept entries `(column, value)` of an `nv24` matrix (`per_row` per
/// row, padding columns ≥ k included), in chunks of `depth` entries, row after row within a
/// chunk: what one chunk of rows of B meets is contiguous. (Row-major, the rows' entries lay a
/// row of A apart, 4 KiB at k = 1024, and fell into the same L1 sets.)
fn kept_entries<T: Real>(
    values: &[T],
    meta: &nm_format::Metadata,
    per_row: usize,
    lo: usize,
    hi: usize,
    depth: usize,
    out: &mut Vec<(u32, T)>,
) {
    for first in (0..per_row).step_by(depth) {
        for i in lo..hi {
            for r in first..(first + depth).min(per_row) {
                let q = i * per_row + r;
                out.push(((r / 2 * 4) as u32 + meta.get(q), values[q]));
            }
        }
    }
}

/// Bytes in a cache line (the x86-64 CPUs the kernels target).
const CACHE_LINE: usize = 64;
/// Columns of C per chunk of an `nv24` product, in 256-bit vectors: 64 f32 / 32 f64.
const NV24_VECTORS: usize = 8;
/// Rows of B per chunk of an `nv24` product: with [`NV24_VECTORS`], a 16 KiB panel of f32.
const NV24_DEPTH: usize = 64;
/// Rows of A per task of an `nv24` product.
const NV24_ROWS: usize = 64;

/// [`nv24_columns`] compiled with FMA (and AVX2).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn nv24_columns_fma<T: Real>(kept: &[(u32, T)], k: usize, b: &[T], n: usize, first: usize, row: &mut [T]) {
    nv24_columns::<T, true>(kept, k, b, n, first, row)
}

/// Adds to columns `first..first + row.len()` of one row of `C` (`row` holds them) the sum
/// over `kept` entries `(column, value)` of the row, in chunks of 64.
#[inline(always)]
fn nv24_columns<T: Real, const FMA: bool>(kept: &[(u32, T)], k: usize, b: &[T], n: usize, first: usize, row: &mut [T]) {
    const CHUNK: usize = 64;
    let end = first + row.len();
    let mut start = first;
    while start < end {
        let width = CHUNK.min(end - start);
        let mut acc = [T::ZERO; CHUNK];
        for &(column, x) in kept {
            let column = column as usize;
            if column >= k {
                continue; // padding of the last block
            }
            let segment = &b[column * n + start..column * n + start + width];
            for (s, &y) in acc.iter_mut().zip(segment) {
                *s = if FMA { x.mul_add(y, *s) } else { *s + x * y };
            }
        }
        for (c, &s) in row[start - first..start - first + width].iter_mut().zip(&acc) {
            *c += s;
        }
        start += CHUNK;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_aligned_values_start_on_a_cache_line() {
        for len in [0, 1, 15, 16, 1000] {
            let mut v = LineAligned::<f32>::zeros(len);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 0.0));
            if len > 0 {
                assert_eq!(v.as_ptr() as usize % CACHE_LINE, 0, "len {len}");
                v[len - 1] = 3.0;
                assert_eq!(v[len - 1], 3.0);
            }
        }
        let w = LineAligned::<f64>::zeros(33);
        assert_eq!((w.len(), w.as_ptr() as usize % CACHE_LINE), (33, 0));
    }

    /// A B of 4:8 in `nm(4,8,32)`, `k × n`, small integers (sums exact in any order).
    fn small_b(k: usize, n: usize) -> Tensor<f32> {
        let dense: Vec<f32> = (0..k * n).map(|q| ((q * 7919) % 13) as f32 - 6.0).collect();
        let b = Tensor::from_dense(&[k, n], &dense, &nm_format::Format::dense(2)).unwrap();
        b.prune(&nm_format::Format::nm(4, 8, 32).unwrap()).unwrap().0
    }

    /// An `m`-row A of small integers, and `A·B` by a triple loop over `b` densified: what the
    /// kernels are checked against.
    fn a_and_product(m: usize, b: &Tensor<f32>) -> (Vec<f32>, Vec<f32>) {
        let (k, n) = (b.shape()[0], b.shape()[1]);
        let dense_b = b.to_dense().unwrap();
        let a: Vec<f32> = (0..m * k).map(|q| ((q * 31) % 7) as f32 - 3.0).collect();
        let mut want = vec![0.0f32; m * n];
        for i in 0..m {
            for kk in 0..k {
                for j in 0..n {
                    want[i * n + j] += a[i * k + kk] * dense_b[kk * n + j];
                }
            }
        }
        (a, want)
    }

    #[test]
    fn blocks_and_panels_of_every_size_multiply_like_a_dense_reference() {
        // 3 column groups, the last one of 6 columns: panels of 1, 2 (and a last one of 1)
        // and 3 groups, in chunks that do and do not divide them.
        let (m, k, n) = (700, 100, 70);
        let b = small_b(k, n);
        let (a, want) = a_and_product(m, &b);
        let nm = NmMatrix::new(&b).unwrap();
        assert_eq!(nm.groups, 3);
        let isas = [Isa::Avx512, Isa::Avx2, Isa::Baseline].into_iter().filter(|i| i.supported());
        for isa in isas {
            for tiles in [1, 2, TILES_PER_BLOCK, 17, LARGE_B_TILES] {
                for (panel_groups, chunk_groups) in [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2), (3, 3)] {
                    for threads in [1, 2] {
                        for loading in [Loading::WholeTile, Loading::Packed] {
                            let mut c = vec![f32::NAN; m * n];
                            let blocks = Blocking { rows: tiles * isa.tile_rows::<f32>(), panel_groups, chunk_groups };
                            spmm_in_blocks(isa, loading, &a, m, &nm, &mut c, threads, blocks);
                            assert!(
                                c == want,
                                "{isa:?} {loading:?}, {tiles} tiles per block, panels of {panel_groups} groups \
                                 in chunks of {chunk_groups}, {threads} threads"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn chunks_of_groups_multiply_like_a_dense_reference() {
        // 800 kept vectors of 32 f32 per group: 100 KiB, so chunks of 2 of the 5 groups, the
        // last one alone; 13 rows leave a ragged tile.
        let (m, k, n) = (13, 1600, 160);
        let b = small_b(k, n);
        let nm = NmMatrix::new(&b).unwrap();
        assert_eq!((nm.groups, blocking(&nm, m, 1, 8, None).chunk_groups), (5, 2));
        let (a, want) = a_and_product(m, &b);
        for isa in [Isa::Avx512, Isa::Avx2, Isa::Baseline].into_iter().filter(|i| i.supported()) {
            for loading in [Loading::WholeTile, Loading::Packed] {
                let mut c = vec![f32::NAN; m * n];
                spmm_with(isa, loading, &a, m, &nm, &mut c, 1).unwrap();
                assert!(c == want, "{isa:?} {loading:?}");
            }
        }
    }

    #[test]
    fn groups_are_chunked_by_bytes_of_b_unless_a_large_b_is_read_whole() {
        let b = small_b(16, 64);
        let mut nm = NmMatrix::new(&b).unwrap();
        let chunk = |nm: &NmMatrix<'_, f32>, l2| blocking(nm, 1000, 1, 8, l2).chunk_groups;
        // Two groups of 8 kept vectors of 32 f32: 1 KiB each, both in one chunk.
        assert_eq!((nm.groups, chunk(&nm, None)), (2, 2));
        nm.values = LineAligned::zeros(GROUP_CHUNK_BYTES / 4 * 6);
        assert_eq!(chunk(&nm, None), 1, "3 × the chunk's bytes per group");
        // A large B in 64 groups of 128 KiB: two per chunk in panels (a tile of 16 rows × 8
        // f32 is 512 bytes), one where 32-tile blocks read B whole (an unknown L2).
        nm.values = LineAligned::zeros(LARGE_B_BYTES / 4);
        nm.groups = 64;
        assert_eq!(chunk(&nm, Some(2 << 20)), 2);
        assert_eq!(chunk(&nm, None), 1, "a large B read whole goes group by group");
    }

    #[test]
    fn a_large_b_takes_larger_blocks_while_every_thread_gets_two() {
        let b = small_b(16, 64);
        let mut nm = NmMatrix::new(&b).unwrap();
        let rows = |nm: &NmMatrix<'_, f32>, m, threads, tile_rows| {
            let blocks = blocking(nm, m, threads, tile_rows, None);
            // An unknown L2: no panels.
            assert_eq!(blocks.panel_groups, nm.groups);
            blocks.rows
        };
        // A small B: at most SMALL_B_BLOCK_ROWS (42) rows, 7 tiles of 6.
        assert_eq!(rows(&nm, 10_000, 1, 6), 7 * 6);
        // The rule reads only the size of the kept values.
        nm.values = LineAligned::zeros(LARGE_B_BYTES / 4);
        assert_eq!(rows(&nm, 10_000, 1, 6), LARGE_B_TILES * 6);
        // 1024 rows on 2 threads: 6 blocks of 29 tiles (3 each), not 5⅓ of 32.
        assert_eq!(rows(&nm, 1024, 2, 6), 29 * 6);
        assert_eq!(rows(&nm, 1024, 4, 6), 22 * 6); // 8 blocks
        assert_eq!(rows(&nm, 1024, 16, 6), 11 * 6); // 16 blocks
        assert_eq!(rows(&nm, 100, 16, 6), TILES_PER_BLOCK * 6);
        assert_eq!(rows(&nm, 0, 1, 6), TILES_PER_BLOCK * 6);
        assert_eq!(rows(&nm, 10_000, 1, 8), LARGE_B_TILES * 8);
    }

    #[test]
    fn blocks_spread_whole_tiles_evenly_over_a_multiple_of_the_threads() {
        // 1024 rows in 74 tiles of 14 (the last of 2 rows), at most 8 tiles a block: 10 blocks
        // of 7 or 8 tiles, the larger first, which two threads taking them in turn share 37 and 37.
        let starts = block_starts(1024, 14, 8 * 14, 2);
        let tiles: Vec<usize> = starts.windows(2).map(|w| (w[1] - w[0]).div_ceil(14)).collect();
        assert_eq!(tiles, [8, 8, 8, 8, 7, 7, 7, 7, 7, 7]);
        assert_eq!(tiles.iter().step_by(2).sum::<usize>(), 37);
        assert_eq!(*starts.last().unwrap(), 1024);
        // 256 rows in 19 tiles (the last of 4 rows), 2 a block: the short tile alone, last.
        let starts = block_starts(256, 14, 2 * 14, 2);
        assert_eq!(starts, [0, 28, 56, 84, 112, 140, 168, 196, 224, 252, 256]);
        // One thread: no rounding; 9 blocks of 8 or 9 tiles cannot be (74 > 9·8), so 10.
        assert_eq!(block_starts(1024, 14, 8 * 14, 1).len(), 11);
        for (m, tile, max, threads) in [(1000, 8, 64, 3), (5, 14, 112, 2), (3000, 6, 6, 16), (97, 1, 64, 2)] {
            let starts = block_starts(m, tile, max, threads);
            let blocks = starts.len() - 1;
            assert_eq!((starts[0], starts[blocks]), (0, m));
            assert!(starts.windows(2).all(|w| w[0] < w[1] && w[1] - w[0] <= max.max(tile)), "{m} {tile}: {starts:?}");
            assert!(starts[..blocks].iter().all(|s| s % tile == 0), "whole tiles: {starts:?}");
            let sizes: Vec<usize> = starts.windows(2).map(|w| (w[1] - w[0]).div_ceil(tile)).collect();
            assert!(sizes.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1), "larger blocks first: {sizes:?}");
            let tiles = m.div_ceil(tile);
            assert!(blocks.is_multiple_of(threads) || blocks == tiles, "{m} {tile} {threads}: {blocks} blocks");
        }
        assert_eq!(block_starts(0, 14, 112, 2), [0]);
    }

    #[test]
    fn rows_transpose_into_either_half_of_a_wider_stride() {
        if !Isa::Avx2.supported() {
            println!("skipped: the transposition is AVX2 code and this CPU has no AVX2");
            return;
        }
        // 13 columns: one 8×8 block and a tail of 5, f32 and f64.
        fn check<T: Real>() {
            let k = 13;
            let rows: Vec<Vec<T>> =
                (0..8).map(|i| (0..k).map(|kk| T::from_f64((i * 100 + kk) as f64)).collect()).collect();
            let rows: [&[T]; 8] = std::array::from_fn(|i| &rows[i][..]);
            for first in [0, 8] {
                let mut out = vec![T::from_f64(-1.0); k * 16];
                // SAFETY: AVX2 is supported (checked above).
                unsafe { T::transpose8(&rows, &mut out, 16, first) };
                for kk in 0..k {
                    for slot in 0..16 {
                        let want =
                            if (first..first + 8).contains(&slot) { rows[slot - first][kk] } else { T::from_f64(-1.0) };
                        assert!(out[kk * 16 + slot] == want, "{} column {kk} slot {slot} from {first}", T::NAME);
                    }
                }
            }
        }
        check::<f32>();
        check::<f64>();
    }

    #[test]
    fn rows_of_sums_store_in_whole_lines_at_every_offset_and_nowhere_else() {
        if !Isa::Avx512.supported() {
            println!("skipped: line stores are AVX-512 code and this CPU has no AVX-512");
            return;
        }
        // Rows of 1, 2 and 4 lines (f32 L = 16, 32; f64 L = 8, 16, 32) at every 4-byte offset
        // from a line, between guard elements that must stay as they were.
        fn check<T: Real, const L: usize>() {
            let sums: [T; L] = std::array::from_fn(|i| T::from_f64(i as f64 + 1.0));
            let words = std::mem::size_of::<T>() / 4;
            for off in (0..16).step_by(words) {
                let mut buffer = LineAligned::zeros(L + 3 * 64 / std::mem::size_of::<T>());
                buffer.fill(T::from_f64(-7.0));
                let at = 64 / std::mem::size_of::<T>() + off / words;
                // SAFETY: AVX-512 is supported (checked above).
                unsafe { store_in_lines(&sums, &mut buffer[at..at + L]) };
                for (i, &x) in buffer.iter().enumerate() {
                    let want = if (at..at + L).contains(&i) { sums[i - at] } else { T::from_f64(-7.0) };
                    assert!(x == want, "{} L = {L}, {} bytes past a line: element {i}", T::NAME, off * 4);
                }
            }
        }
        check::<f32, 16>();
        check::<f32, 32>();
        check::<f64, 8>();
        check::<f64, 16>();
        check::<f64, 32>();
        // A row that is not whole lines is copied.
        check::<f32, 8>();
        check::<f64, 4>();
    }

    #[test]
    fn a_large_b_goes_in_panels_where_the_l2_holds_a_block_of_a() {
        // k = 4096: a tile of A transposed is 4096 rows × 16 f32 (14-row tiles) = 256 KiB, or
        // × 8 (8-row tiles) = 128 KiB; B of 40 MiB in 160 groups of 256 KiB (the rule reads only
        // these sizes).
        let b = small_b(4096, 32);
        let mut nm = NmMatrix::new(&b).unwrap();
        nm.values = LineAligned::zeros(5 * LARGE_B_BYTES / 4);
        nm.groups = 160;
        let blocks = |nm: &NmMatrix<'_, f32>, tile_rows, l2| blocking(nm, 10_000, 1, tile_rows, l2);
        // 2 MiB of L2: 2 tiles of 14 rows (512 KiB), or 4 of 8 (512 KiB); panels of at most
        // 16 MiB, equal: 3 of 54, 54 and 52 groups; a group fills a chunk.
        let panels = Blocking { rows: 2 * 14, panel_groups: 54, chunk_groups: 1 };
        assert_eq!(blocks(&nm, 14, Some(2 << 20)), panels);
        assert_eq!(blocks(&nm, 8, Some(2 << 20)), Blocking { rows: 4 * 8, ..panels });
        // Tiles of more than the block's rows: one.
        assert_eq!(blocks(&nm, 40, Some(2 << 20)).rows, 40);
        // 512 KiB (a Zen 3) cannot hold 5 tiles of 6 rows (5 × 128 KiB), nor an unknown L2:
        // up to 32 tiles over all of B.
        let all = Blocking { rows: LARGE_B_TILES * 6, panel_groups: 160, chunk_groups: 1 };
        assert_eq!(blocks(&nm, 6, Some(512 << 10)), all);
        assert_eq!(blocks(&nm, 6, None), all);
        // A B under LARGE_B_BYTES (4 MiB: 160 groups of 25.6 KiB) stays whole, in blocks of
        // at most 42 rows (3 tiles of 14, 5 of 8, 7 of 6, one of 100), 10 groups per chunk.
        nm.values = LineAligned::zeros(LARGE_B_BYTES / 8);
        let small = Blocking { rows: 3 * 14, panel_groups: 160, chunk_groups: 10 };
        assert_eq!(blocks(&nm, 14, Some(2 << 20)), small);
        assert_eq!(blocks(&nm, 8, Some(2 << 20)), Blocking { rows: 5 * 8, ..small });
        assert_eq!(blocks(&nm, 6, None), Blocking { rows: 7 * 6, ..small });
        assert_eq!(blocks(&nm, 100, None), Blocking { rows: 100, ..small });
        // Groups larger than a panel: one each.
        nm.values = LineAligned::zeros(4 * PANEL_BYTES);
        nm.groups = 3;
        assert_eq!(blocks(&nm, 14, Some(2 << 20)).panel_groups, 1);
    }
}
