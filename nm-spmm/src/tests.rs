//! The kernels' blocking, packing and stores against a dense reference.

use nm_format::Tensor;

use crate::blocking::{
    Blocking, GROUP_CHUNK_BYTES, LARGE_B_BYTES, LARGE_B_TILES, PANEL_BYTES, TILES_PER_BLOCK, block_starts, blocking,
};
use crate::multiply::spmm_in_blocks;
use crate::packed::{CACHE_LINE, LineAligned};
use crate::tile::store_in_lines;
use crate::{Isa, Loading, NmMatrix, Real, spmm_with};

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
        let rows: Vec<Vec<T>> = (0..8).map(|i| (0..k).map(|kk| T::from_f64((i * 100 + kk) as f64)).collect()).collect();
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
