//! # nm-spmm: CPU SpMM for vector-wise N:M sparsity
//!
//! `C = A·B` with `A` dense (`m×k`, row-major), `B` in `nm(N,M,L)` (`k×n`: in every window of
//! `M` rows and every group of `L` columns, `N` rows are kept) and `C` dense (`m×n`), in `f32`
//! or `f64`, following the structure of NM-SpMM on a CPU:
//!
//! - **B is packed once** ([`NmMatrix::new`]), column group by column group: each group's kept
//!   length-`L` vectors for all windows in one contiguous panel, their offsets unpacked from
//!   the bit-packed metadata beside them. nm-format stores windows outermost, so one group's
//!   vectors lie a whole window row apart (16 KiB at k = n = 1024, L = 32): walked in place,
//!   every vector was a TLB miss and the kernel ran at 6 GFLOP/s.
//! - **Register tiling**: a tile of `MR` rows of `C` × one column group (`L` lanes) is summed in
//!   registers over the whole reduction: per kept vector, `MR` broadcasts of `A` and `MR × L`
//!   fused multiply-adds; each `C` element is written once.
//! - **SIMD by runtime dispatch**: the same kernel is compiled for AVX-512, for AVX2+FMA and
//!   for the baseline, and the best the CPU has is chosen when the call runs
//!   ([`Isa::detect`]); `L` is a compile-time constant for `L` ∈ {1, 4, 8, 16, 32} (vectorized
//!   lanes), any other `L` runs a generic loop.
//! - **Cache blocking**: rows are taken in blocks that share each column group's vectors of `B`
//!   while they are in cache; **threads** take row blocks dynamically.
//!
//! Ragged shapes are handled: `k` and `n` need not be multiples of `M` and `L` (B's padding is
//! zero and never read past `A`'s last column; the last group stores only `C`'s columns).

use std::sync::atomic::{AtomicUsize, Ordering};

use nm_format::{LevelStorage, Tensor, Value};

/// A value type the kernels compute in.
pub trait Real: Value + avx512::Simd {
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
    /// The result does not validate as a tensor (it always should).
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
/// group, offsets unpacked.
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
    /// The kept vectors, group-major: `((g·windows + w)·N + t)·L + lane`.
    values: Vec<T>,
    /// Each kept vector's row offset in its window, in the same `(g, w, t)` order.
    offsets: Vec<u16>,
    _tensor: std::marker::PhantomData<&'a Tensor<T>>,
}

impl<'a, T: Real> NmMatrix<'a, T> {
    /// Borrows `b`'s values and unpacks its metadata.
    pub fn new(b: &'a Tensor<T>) -> Result<Self, SpmmError> {
        let (n, m, l) = b.format().nm_params().ok_or_else(|| SpmmError::NotNm(b.format().to_string()))?;
        let LevelStorage::Structured { meta, .. } = &b.levels()[2] else {
            return Err(SpmmError::NotNm(b.format().to_string()));
        };
        let (rows, cols) = (b.shape()[0], b.shape()[1]);
        let (keep, windows, groups) = (n as usize, rows.div_ceil(m as usize), cols.div_ceil(l));
        let stored = b.values();
        let mut values = Vec::with_capacity(stored.len());
        let mut offsets = Vec::with_capacity(meta.len());
        for g in 0..groups {
            for w in 0..windows {
                // nm-format's order: ((w·groups + g)·N + t).
                let first = (w * groups + g) * keep;
                values.extend_from_slice(&stored[first * l..(first + keep) * l]);
                offsets.extend((first..first + keep).map(|q| meta.get(q) as u16));
            }
        }
        Ok(NmMatrix {
            n: keep,
            m: m as usize,
            l,
            rows,
            cols,
            windows,
            groups,
            values,
            offsets,
            _tensor: std::marker::PhantomData,
        })
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

/// Rows of `C` per register tile.
const MR: usize = 8;
/// Rows per block a thread takes: the tiles of a block reuse each group's vectors of `B`.
const BLOCK_ROWS: usize = 64;

/// `C = A·B` into a new dense tensor: `A` a dense matrix (`m × b.rows`), on `threads` threads.
/// The one entry point the command, the Rust API and the C library share.
pub fn multiply<T: Real>(a: &Tensor<T>, b: &NmMatrix<'_, T>, threads: usize) -> Result<Tensor<T>, SpmmError> {
    if a.format() != &nm_format::Format::dense(2) {
        return Err(SpmmError::NotDense(a.format().to_string()));
    }
    let (m, k) = (a.shape()[0], a.shape()[1]);
    if k != b.rows {
        return Err(SpmmError::Inner { m, k, rows: b.rows });
    }
    let n = b.cols;
    let mut c = vec![T::ZERO; m * n];
    spmm(a.values(), m, b, &mut c, threads.max(1))?;
    let levels = vec![LevelStorage::Dense { size: m }, LevelStorage::Dense { size: n }];
    Ok(Tensor::from_raw(vec![m, n], nm_format::Format::dense(2), levels, c)?)
}

/// `C = A·B` (`C` overwritten) on `threads` threads with the best instruction set of the CPU.
/// `a` is row-major `m × b.rows`, `c` row-major `m × b.cols`.
pub fn spmm<T: Real>(a: &[T], m: usize, b: &NmMatrix<'_, T>, c: &mut [T], threads: usize) -> Result<(), SpmmError> {
    spmm_with(Isa::detect(), a, m, b, c, threads)
}

/// [`spmm`] with a chosen instruction set (one the CPU does not support falls back to the
/// baseline), for benchmarks and tests of each path.
pub fn spmm_with<T: Real>(
    isa: Isa,
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
    let isa = if isa.supported() { isa } else { Isa::Baseline };
    let blocks = m.div_ceil(BLOCK_ROWS);
    let next = AtomicUsize::new(0);
    let out = SharedOut(c.as_mut_ptr(), c.len());
    let work = || loop {
        let block = next.fetch_add(1, Ordering::Relaxed);
        if block >= blocks {
            break;
        }
        let (lo, hi) = (block * BLOCK_ROWS, ((block + 1) * BLOCK_ROWS).min(m));
        // SAFETY: blocks are disjoint row ranges, each taken by one thread; `c` is borrowed
        // mutably for the whole call and outlives the scope.
        let rows = unsafe { out.rows(lo * b.cols, hi * b.cols) };
        block_rows(isa, a, lo, hi, b, rows);
    };
    on_threads(threads.min(blocks), work);
    Ok(())
}

/// Runs `work` (which takes tasks until none are left) on `threads` threads, or on this one.
fn on_threads(threads: usize, work: impl Fn() + Sync) {
    if threads <= 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(&work);
            }
        });
    }
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

/// Rows `lo..hi` of `C` (`c` holds exactly them), every column group.
fn block_rows<T: Real>(isa: Isa, a: &[T], lo: usize, hi: usize, b: &NmMatrix<'_, T>, c: &mut [T]) {
    macro_rules! lanes {
        ($run:ident) => {
            match b.l {
                1 => $run::<T, 1>(a, lo, hi, b, c),
                4 => $run::<T, 4>(a, lo, hi, b, c),
                8 => $run::<T, 8>(a, lo, hi, b, c),
                16 => $run::<T, 16>(a, lo, hi, b, c),
                32 => $run::<T, 32>(a, lo, hi, b, c),
                _ => generic_l(a, lo, hi, b, c),
            }
        };
    }
    match isa {
        // SAFETY: `spmm_with` checked that the CPU supports AVX-512F, AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { lanes!(block_avx512) },
        // SAFETY: `spmm_with` checked that the CPU supports AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { lanes!(block_avx2) },
        _ => lanes!(block_baseline),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn block_avx512<T: Real, const L: usize>(a: &[T], lo: usize, hi: usize, b: &NmMatrix<'_, T>, c: &mut [T]) {
    block::<T, L, true, true>(a, lo, hi, b, c)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn block_avx2<T: Real, const L: usize>(a: &[T], lo: usize, hi: usize, b: &NmMatrix<'_, T>, c: &mut [T]) {
    block::<T, L, true, false>(a, lo, hi, b, c)
}

fn block_baseline<T: Real, const L: usize>(a: &[T], lo: usize, hi: usize, b: &NmMatrix<'_, T>, c: &mut [T]) {
    block::<T, L, false, false>(a, lo, hi, b, c)
}

/// The rows `lo..hi`, group by group, `MR` rows at a time; `FMA` chooses fused multiply-adds
/// (only where the instruction set has them: elsewhere `mul_add` is a library call).
#[inline(always)]
fn block<T: Real, const L: usize, const FMA: bool, const AVX512: bool>(
    a: &[T],
    lo: usize,
    hi: usize,
    b: &NmMatrix<'_, T>,
    c: &mut [T],
) {
    let (k, n) = (b.rows, b.cols);
    // With AVX-512, the block's rows of A are first transposed tile by tile (`k × MR`): the
    // tile's MR values of a kept column then share one cache line, where reading them from MR
    // rows touched MR lines per kept vector (the bottleneck at high sparsity: 1:8 ran at 70%
    // of 4:8's rate).
    let packed = AVX512 && L.is_multiple_of(T::LANES);
    let tiles = (hi - lo).div_ceil(MR);
    let mut a_t: Vec<T> = Vec::new();
    if packed {
        a_t.resize(tiles * k * MR, T::ZERO);
        for (t, tile_t) in a_t.chunks_exact_mut(k * MR).enumerate() {
            for i in 0..MR {
                // Past the block's end, the last row again (computed, not stored).
                let row = (lo + t * MR + i).min(hi - 1);
                for (kk, &x) in a[row * k..(row + 1) * k].iter().enumerate() {
                    tile_t[kk * MR + i] = x;
                }
            }
        }
    }
    for g in 0..b.groups {
        let width = L.min(n - g * L);
        let mut r = lo;
        while r < hi {
            let rows = MR.min(hi - r);
            // The tile's rows of A; past the block's end, the last row again (computed, not stored).
            let row = |i: usize| {
                let i = (r + i).min(hi - 1);
                &a[i * k..(i + 1) * k]
            };
            let acc = if packed {
                let t = (r - lo) / MR;
                // SAFETY: `AVX512` is set only by `block_avx512`, whose caller checked the CPU.
                unsafe { avx512::tile::<T, L>(&a_t[t * k * MR..(t + 1) * k * MR], b, g) }
            } else {
                let a_rows: [&[T]; MR] = std::array::from_fn(row);
                tile::<T, L, FMA>(&a_rows, b, g)
            };
            for (i, sums) in acc.iter().enumerate().take(rows) {
                let at = (r + i - lo) * n + g * L;
                c[at..at + width].copy_from_slice(&sums[..width]);
            }
            r += MR;
        }
    }
}

/// One register tile: `MR` rows × group `g`'s `L` lanes, summed over every kept vector.
#[inline(always)]
fn tile<T: Real, const L: usize, const FMA: bool>(a_rows: &[&[T]; MR], b: &NmMatrix<'_, T>, g: usize) -> [[T; L]; MR] {
    let mut acc = [[T::ZERO; L]; MR];
    let k = b.rows;
    let full = k / b.m;
    for w in 0..b.windows {
        let first = (g * b.windows + w) * b.n;
        for q in first..first + b.n {
            let kk = w * b.m + b.offsets[q] as usize;
            if w >= full && kk >= k {
                continue; // a padding row of the last window: zero in B, no column of A
            }
            let v: &[T; L] = b.values[q * L..q * L + L].try_into().expect("L values per kept vector");
            for (sums, row) in acc.iter_mut().zip(a_rows) {
                let x = row[kk];
                for (s, &y) in sums.iter_mut().zip(v) {
                    *s = if FMA { x.mul_add(y, *s) } else { *s + x * y };
                }
            }
        }
    }
    acc
}

/// Any `L` (not one of the compiled lane counts): the same loops with `L` at run time.
fn generic_l<T: Real>(a: &[T], lo: usize, hi: usize, b: &NmMatrix<'_, T>, c: &mut [T]) {
    let (k, n, l) = (b.rows, b.cols, b.l);
    let full = k / b.m;
    let mut acc = vec![T::ZERO; l];
    for i in lo..hi {
        let row = &a[i * k..(i + 1) * k];
        for g in 0..b.groups {
            acc.fill(T::ZERO);
            for w in 0..b.windows {
                let first = (g * b.windows + w) * b.n;
                for q in first..first + b.n {
                    let kk = w * b.m + b.offsets[q] as usize;
                    if w >= full && kk >= k {
                        continue;
                    }
                    let x = row[kk];
                    for (s, &y) in acc.iter_mut().zip(&b.values[q * l..(q + 1) * l]) {
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

/// The register tile in AVX-512 intrinsics: the compiler did not vectorize the generic tile
/// across lanes (64 scalar FMAs per kept vector: 6 GFLOP/s at 1024³, f32, 2:8). Here each row
/// keeps `L / LANES` vector accumulators; per kept vector, its `L` values are loaded once and
/// each row's `A` element is broadcast into one FMA per accumulator.
mod avx512 {
    use super::{MR, NmMatrix};

    /// A value type with 512-bit vector operations.
    pub trait Simd: Copy {
        /// Elements per vector.
        const LANES: usize;
        /// One tile (see [`tile`]), in AVX-512 for this type.
        ///
        /// # Safety
        /// The CPU supports AVX-512F.
        unsafe fn tile<const L: usize>(a_t: &[Self], b: &NmMatrix<'_, Self>, g: usize) -> [[Self; L]; MR]
        where
            Self: Sized;

        /// Columns `start..start + 4·LANES` of one `nv24` row of `C` (all of them within `n`):
        /// the sum over the row's kept entries `(column, value)` of value × B's row segment.
        ///
        /// # Safety
        /// The CPU supports AVX-512F; `start + 4·LANES <= n`; every column below `k` indexes a
        /// row of `b` (`k × n`).
        unsafe fn nv24_chunk(kept: &[(u32, Self)], k: usize, b: &[Self], n: usize, start: usize, out: &mut [Self])
        where
            Self: Sized;
    }

    /// The tile for group `g` from the tile's rows of A transposed (`a_t[kk·MR + i]`, `k × MR`);
    /// `L` is a multiple of `T::LANES`.
    ///
    /// # Safety
    /// The CPU supports AVX-512F.
    #[inline(always)]
    pub unsafe fn tile<T: Simd, const L: usize>(a_t: &[T], b: &NmMatrix<'_, T>, g: usize) -> [[T; L]; MR] {
        // SAFETY: the caller's contract.
        unsafe { T::tile::<L>(a_t, b, g) }
    }

    macro_rules! simd {
        ($t:ty, $lanes:expr, $vec:ty, $zero:ident, $load:ident, $set1:ident, $fmadd:ident, $store:ident) => {
            impl Simd for $t {
                const LANES: usize = $lanes;

                #[cfg(target_arch = "x86_64")]
                unsafe fn tile<const L: usize>(a_t: &[$t], b: &NmMatrix<'_, $t>, g: usize) -> [[$t; L]; MR] {
                    #[target_feature(enable = "avx512f")]
                    fn run<const L: usize>(a_t: &[$t], b: &NmMatrix<'_, $t>, g: usize) -> [[$t; L]; MR] {
                        use std::arch::x86_64::*;
                        // Two vectors per row at a time: 8 rows × 2 = 16 accumulators, which
                        // leaves registers for B; wider rows (f64 with L = 32) take two passes
                        // (all four at once spilled: 39 against OpenBLAS's 51 GFLOP/s).
                        const PASS: usize = 2;
                        let vectors = L / $lanes;
                        let (k, full) = (b.rows, b.rows / b.m);
                        let mut out = [[0.0; L]; MR];
                        for first_vector in (0..vectors).step_by(PASS) {
                            let count = PASS.min(vectors - first_vector);
                            let lane0 = first_vector * $lanes;
                            let mut acc: [[$vec; PASS]; MR] = [[$zero(); PASS]; MR];
                            for w in 0..b.windows {
                                let first = (g * b.windows + w) * b.n;
                                for q in first..first + b.n {
                                    let kk = w * b.m + b.offsets[q] as usize;
                                    if w >= full && kk >= k {
                                        continue;
                                    }
                                    let v = &b.values[q * L + lane0..q * L + L];
                                    let mut bv: [$vec; PASS] = [$zero(); PASS];
                                    for (j, slot) in bv.iter_mut().enumerate().take(count) {
                                        // SAFETY: `v` holds `L - lane0` elements, `(j + 1)·LANES` of them here.
                                        *slot = unsafe { $load(v.as_ptr().add(j * $lanes)) };
                                    }
                                    let column = &a_t[kk * MR..kk * MR + MR];
                                    for (sums, &a) in acc.iter_mut().zip(column) {
                                        let x = $set1(a);
                                        for j in 0..count {
                                            sums[j] = $fmadd(x, bv[j], sums[j]);
                                        }
                                    }
                                }
                            }
                            for (row, sums) in out.iter_mut().zip(&acc) {
                                for j in 0..count {
                                    // SAFETY: `row` holds `L` elements, `lane0 + (j + 1)·LANES <= L`.
                                    unsafe { $store(row.as_mut_ptr().add(lane0 + j * $lanes), sums[j]) };
                                }
                            }
                        }
                        out
                    }
                    // SAFETY: the caller checked that the CPU supports AVX-512F.
                    unsafe { run::<L>(a_t, b, g) }
                }

                #[cfg(target_arch = "x86_64")]
                unsafe fn nv24_chunk(kept: &[(u32, $t)], k: usize, b: &[$t], n: usize, start: usize, out: &mut [$t]) {
                    #[target_feature(enable = "avx512f")]
                    fn run(kept: &[(u32, $t)], k: usize, b: &[$t], n: usize, start: usize, out: &mut [$t]) {
                        use std::arch::x86_64::*;
                        let mut acc = [$zero(); 4];
                        for &(column, x) in kept {
                            let column = column as usize;
                            if column >= k {
                                continue;
                            }
                            let segment = &b[column * n + start..column * n + start + 4 * $lanes];
                            let x = $set1(x);
                            for (j, sum) in acc.iter_mut().enumerate() {
                                // SAFETY: `segment` holds 4·LANES elements.
                                *sum = $fmadd(x, unsafe { $load(segment.as_ptr().add(j * $lanes)) }, *sum);
                            }
                        }
                        assert!(out.len() >= 4 * $lanes, "a chunk of 4 vectors");
                        for (j, sum) in acc.iter().enumerate() {
                            // SAFETY: `out` holds 4·LANES elements (asserted).
                            unsafe { $store(out.as_mut_ptr().add(j * $lanes), *sum) };
                        }
                    }
                    // SAFETY: the caller checked that the CPU supports AVX-512F.
                    unsafe { run(kept, k, b, n, start, out) }
                }

                #[cfg(not(target_arch = "x86_64"))]
                unsafe fn tile<const L: usize>(_: &[$t], _: &NmMatrix<'_, $t>, _: usize) -> [[$t; L]; MR] {
                    unreachable!("AVX-512 is only selected on x86-64")
                }

                #[cfg(not(target_arch = "x86_64"))]
                unsafe fn nv24_chunk(_: &[(u32, $t)], _: usize, _: &[$t], _: usize, _: usize, _: &mut [$t]) {
                    unreachable!("AVX-512 is only selected on x86-64")
                }
            }
        };
    }

    simd!(f32, 16, __m512, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_storeu_ps);
    simd!(f64, 8, __m512d, _mm512_setzero_pd, _mm512_loadu_pd, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_storeu_pd);
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
        return Err(SpmmError::NotNm(a.format().to_string()));
    }
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let LevelStorage::Structured { meta, .. } = &a.levels()[1] else {
        return Err(SpmmError::NotNm(a.format().to_string()));
    };
    if b.len() != k * n {
        return Err(SpmmError::Length { what: "B", expected: k * n, actual: b.len() });
    }
    if c.len() != m * n {
        return Err(SpmmError::Length { what: "C", expected: m * n, actual: c.len() });
    }
    // Per row: (column, value) of its kept entries, padding columns (≥ k) left out.
    let per_row = k.div_ceil(4) * 2;
    let values = a.values();
    let entries: Vec<(u32, T)> = (0..m * per_row)
        .map(|q| {
            let column = (q % per_row) / 2 * 4 + meta.get(q) as usize;
            (column as u32, values[q])
        })
        .collect();
    let isa = Isa::detect();
    // Column chunks outermost within a block of rows: the chunk's panel of B (k × chunk) stays
    // in cache while the block's rows pass (row by row over all of B, every row re-read B from
    // memory).
    let rows_per_task = 64;
    let tasks = m.div_ceil(rows_per_task);
    let next = AtomicUsize::new(0);
    let out = SharedOut(c.as_mut_ptr(), c.len());
    let chunk = 4 * T::LANES;
    let work = || loop {
        let task = next.fetch_add(1, Ordering::Relaxed);
        if task >= tasks {
            break;
        }
        let (lo, hi) = (task * rows_per_task, ((task + 1) * rows_per_task).min(m));
        // SAFETY: tasks are disjoint row ranges, each taken by one thread; `c` is borrowed
        // mutably for the whole call.
        let rows = unsafe { out.rows(lo * n, hi * n) };
        for start in (0..n).step_by(chunk) {
            let end = (start + chunk).min(n);
            for (i, row) in (lo..hi).zip(rows.chunks_mut(n.max(1))) {
                let kept = &entries[i * per_row..(i + 1) * per_row];
                let part = &mut row[start..end];
                match isa {
                    // SAFETY: the CPU supports AVX-512F (`Isa::detect`); the chunk is whole and
                    // within `n`; `b` has `k × n` elements (checked above).
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 if end - start == chunk => unsafe { T::nv24_chunk(kept, k, b, n, start, part) },
                    // SAFETY: the CPU supports AVX2 and FMA (`Isa::detect`).
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 | Isa::Avx2 => unsafe { nv24_columns_fma(kept, k, b, n, start, part) },
                    _ => nv24_columns::<T, false>(kept, k, b, n, start, part),
                }
            }
        }
    };
    on_threads(threads.min(tasks), work);
    Ok(())
}

/// [`nv24_columns`] compiled with FMA (and AVX2).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn nv24_columns_fma<T: Real>(kept: &[(u32, T)], k: usize, b: &[T], n: usize, first: usize, row: &mut [T]) {
    nv24_columns::<T, true>(kept, k, b, n, first, row)
}

/// Columns `first..first + row.len()` of one row of `C` (`row` holds them), summed over the
/// row's kept entries `(column, value)` in chunks of 64.
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
        row[start - first..start - first + width].copy_from_slice(&acc[..width]);
        start += CHUNK;
    }
}
