//! A block of rows of C: its rows of A transposed tile by tile, each register tile summed by
//! the instruction set's intrinsics (or the portable loop) over the block's column groups.

use crate::isa::{Isa, ROWS_256, ROWS_512_F32, ROWS_512_F64, ROWS_PORTABLE};
use crate::packed::{CACHE_LINE, LineAligned, NmMatrix, row_stride};
use crate::{Real, kept_scratch};

/// A register tile in intrinsics: `R` rows × group `g`'s `L` lanes from the tile's rows of A
/// transposed (`a_t[kk·R + i]`, `k × R`), every element of `out` overwritten.
pub(crate) type SimdTile<T, const L: usize, const R: usize> =
    unsafe fn(&[T], &NmMatrix<'_, T>, usize, &mut [[T; L]; R]);

/// A block's tile in intrinsics and how it gets its rows of A.
pub(crate) struct SimdTiles<T, const L: usize, const R: usize> {
    pub(crate) tile: SimdTile<T, L, R>,
    /// The tile reads a group's kept rows packed ([`Loading`]), not the whole transposed tile.
    pub(crate) packed: bool,
    /// AVX-512: A's tiles are transposed a cache line at a time in registers
    /// ([`Simd::transpose_lines`]) where a row of the transposed tile is one line, and each row
    /// of a tile's sums goes to C in whole aligned lines ([`store_in_lines`]).
    pub(crate) avx512: bool,
}

/// The part of C one call computes: rows `lo..hi` (those its `c` holds) × the column groups
/// `groups` (a panel of B, [`Blocking`]), which the tiles take in chunks of `chunk_groups`.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    pub(crate) lo: usize,
    pub(crate) hi: usize,
    pub(crate) groups: std::ops::Range<usize>,
    pub(crate) chunk_groups: usize,
}

/// `part` of `C` (`c` holds exactly its rows), A read packed where `packed`. `scratch` holds
/// the thread's buffers (the transposed block, a tile's kept rows).
pub(crate) fn block_rows_of<T: Real>(
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

pub(crate) fn block_baseline<T: Real, const L: usize>(
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
pub(crate) fn block<T: Real, const L: usize, const FMA: bool, const R: usize>(
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
    // R rows touched R lines per kept vector (the bottleneck at high sparsity).
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
    // own (a memset per tile) was a visible part of a sparse product.
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
                // A constant length (`L`), where a copy of `width` called memmove.
                c[at..at + L].copy_from_slice(sums);
            }
        }
    }
}

/// `row = sums` in whole aligned 64-byte stores where `L` elements are whole lines
/// ([`simd::store_lines`]), else a copy. Each row of C starts 16 bytes past a line (the
/// allocator's header on a page), and a plain store of each vector of sums then split across
/// two lines, which slowed the sparsest patterns against a C aligned to a line. Line stores
/// were faster than plain ones on the same C at nearly every shape, f32 and f64, one and two
/// threads, level elsewhere (BENCHMARKS.md, "N:M on the CPU").
///
/// # Safety
/// The CPU supports AVX-512F.
#[inline(always)]
pub(crate) unsafe fn store_in_lines<T: Real, const L: usize>(sums: &[T; L], row: &mut [T]) {
    assert_eq!(row.len(), L, "a whole row of the tile");
    #[cfg(target_arch = "x86_64")]
    {
        const { assert!(std::mem::size_of::<T>().is_multiple_of(4), "elements of whole 32-bit words") };
        let (src, dst) = (sums.as_ptr().cast::<i32>(), row.as_mut_ptr().cast::<i32>());
        // SAFETY: the caller's CPU has AVX-512F; `sums` and `row` hold `L` elements, as many
        // lines of words as each arm stores.
        unsafe {
            match L * std::mem::size_of::<T>() {
                64 => return crate::simd::store_lines::<1>(src, dst),
                128 => return crate::simd::store_lines::<2>(src, dst),
                256 => return crate::simd::store_lines::<4>(src, dst),
                _ => {}
            }
        }
    }
    row.copy_from_slice(sums);
}

/// `kept_t` = the rows of the transposed tile `tile_t` (`stride` elements each) that a group's
/// kept vectors read, in their order: NM-SpMM's packing of A's kept columns, after which the
/// tile's passes read one sequential array and no row indices.
pub(crate) fn gather_kept<T: Real>(tile_t: &[T], kept_rows: &[u32], stride: usize, kept_t: &mut LineAligned<T>) {
    if kept_t.len() != kept_rows.len() * stride {
        *kept_t = LineAligned::zeros(kept_rows.len() * stride);
    }
    for (row, &kk) in kept_t.chunks_exact_mut(stride).zip(kept_rows) {
        row.copy_from_slice(&tile_t[kk as usize * stride..][..stride]);
    }
}

/// A thread's buffers, kept from block to block: the block's rows of A transposed, and one
/// tile's kept rows of them for a group (where A is packed).
pub(crate) struct Scratch<T> {
    pub(crate) a_t: LineAligned<T>,
    pub(crate) kept: LineAligned<T>,
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
pub(crate) fn tile<T: Real, const L: usize, const FMA: bool, const R: usize>(
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
pub(crate) fn generic_l<T: Real>(a: &[T], part: Part, b: &NmMatrix<'_, T>, c: &mut [T]) {
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
