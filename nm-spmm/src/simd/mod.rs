//! The register tiles in intrinsics, AVX-512 and AVX2: the compiler did not vectorize the
//! generic tile across lanes (one scalar FMA per lane and kept vector, a small fraction of the
//! peak). Here each row keeps `L / LANES` vector accumulators; per
//! kept vector, its `L` values are loaded once and each row's `A` element is broadcast into
//! one FMA per accumulator.

use crate::isa::{
    B_PREFETCH_AHEAD, PREFETCH_AHEAD, PREFETCH_AHEAD_F64, ROWS_512_F32, ROWS_512_F64, reads_kept_at, row_at,
};
use crate::nv24::NV24_VECTORS;
use crate::packed::{CACHE_LINE, NmMatrix, row_stride, strip_lanes};

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
    /// registers (one element at a time, the transposition was a visible part of a sparse
    /// product's time).
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
    /// per row: faster at every size and thread count measured.
    /// `avx512` chooses AVX-512 (half as many, twice as wide vectors) over AVX2.
    ///
    /// # Safety
    /// The CPU supports AVX-512F if `avx512`, else AVX2 and FMA; every column below `k`
    /// indexes a row of `panel`.
    unsafe fn nv24_rows(avx512: bool, kept: &[(u32, Self)], each: usize, k: usize, panel: &[Self], out: &mut [Self])
    where
        Self: Sized;
}

/// The body of a tile function: `R` rows × group `g`, two vectors per row at a time
/// (AVX-512: 14 × 2 = 28 accumulators in f32 and f64, which leaves registers for B;
/// AVX2: 6 × 2 = 12 of 16 registers). Wider rows (f64 with L = 32) take several passes,
/// each a call: all four vectors at once spilled registers, and so did one of the passes once
/// the compiler unrolled them.
///
/// The AVX-512 pass uses 31 of the 32 registers, and LLVM keeps them only while a kept
/// vector's work stays as it is. Small additions broke that:
/// - one more prefetch per kept vector;
/// - a branch that loads the sums from `out` instead of zeroing them;
/// - two constants bound to a local that `step` read.
///
/// Each made LLVM hoist the 14 broadcasts into registers, or stop inlining `step`. The pass
/// then moved accumulators to and from the stack every kept vector (about 40 such moves in
/// its loop), and f64 1:8 ran at less than half its speed. The test `tests/registers.rs`
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
            let stride = row_stride(R);
            let strip = strip_lanes(L, std::mem::size_of::<$t>());
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
                    if (j * $lanes * std::mem::size_of::<$t>()).is_multiple_of(CACHE_LINE) {
                        _mm_prefetch::<_MM_HINT_T0>(values.as_ptr().wrapping_add(start[j] + at + b_ahead).cast());
                    }
                }
                let row = if PACKED { q * stride } else { row_at(kk, R, PACKED) };
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
            // issues about four µops a cycle at FMA peak (clamping the index instead was no
            // faster, at times slower).
            let main = if PREFETCH { kept.saturating_sub(a_ahead) } else { 0 };
            let (mut q, mut at) = (0, 0);
            for (&kk, &ahead) in kept_rows[..main].iter().zip(&kept_rows[a_ahead.min(kept)..]) {
                _mm_prefetch::<_MM_HINT_T0>(a_t.as_ptr().wrapping_add(row_at(ahead, R, PACKED)).cast());
                // An f64 row of 14 (stride 16) is two lines.
                if stride * std::mem::size_of::<$t>() > CACHE_LINE {
                    _mm_prefetch::<_MM_HINT_T0>(
                        a_t.as_ptr()
                            .wrapping_add(row_at(ahead, R, PACKED) + CACHE_LINE / std::mem::size_of::<$t>())
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
        let kept_rows = if reads_kept_at(R, PACKED) { &$b.kept_at[kept.clone()] } else { &$b.kept_rows[kept.clone()] };
        let values = &$b.values[kept.start * L..kept.end * L];
        let rows = if PACKED { kept_rows.len() } else { $b.padded_rows() };
        assert_eq!($a_t.len(), rows * row_stride(R), "a transposed tile of padded rows, or its kept rows");
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
        const WIDTH: usize = NV24_VECTORS * $lanes256;
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
            unsafe fn nv24_rows(avx512: bool, kept: &[(u32, $t)], each: usize, k: usize, panel: &[$t], out: &mut [$t]) {
                const WIDTH: usize = NV24_VECTORS * $lanes256;
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
/// store splits across two lines (see [`crate::tile::store_in_lines`]).
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
    let off = (dst as usize % CACHE_LINE) / 4;
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
/// `c`, stored as one line: fewer shuffles than [`Simd::transpose8`]'s 8×8 blocks into half
/// lines, and every line written once instead of in two passes.
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
