//! How a product walks C: row blocks over panels of column groups in chunks, sized by B and
//! the L2, taken by the threads as they finish.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::packed::{NmMatrix, row_stride};
use crate::{Real, kept_scratch};

/// Register tiles per row block a thread takes: a block's tiles reuse each group's vectors of
/// `B` while they are in cache.
pub(crate) const TILES_PER_BLOCK: usize = 8;
/// Rows of A a block takes at most where B is small ([`blocking`]), in whole tiles: 7 tiles
/// of 6 (AVX2), 3 of 14 (AVX-512). Three 14-row tiles were faster than four in f64 and on two
/// threads in f32, and within a few percent either way on one thread in f32; four tiles had
/// been faster than eight in f32. In f64 with 8-row tiles, 4 tiles were slower than 8: the
/// rule is rows, not bytes of transposed A.
pub(crate) const SMALL_B_BLOCK_ROWS: usize = 42;
/// From this many bytes of B's kept values on, B is large ([`blocking`]): a block that reads
/// all of it no longer finds it in the last-level cache from block to block, and on a Zen 3
/// blocks of up to [`LARGE_B_TILES`] tiles read it fewer times and were faster at every
/// pattern from that size on; below it they were slower.
pub(crate) const LARGE_B_BYTES: usize = 8 << 20;
/// Bytes of B's kept vectors that a block's tiles share before moving on: each tile runs the
/// groups of such a chunk one after the other, which keeps the chunk in L2 across the tiles
/// while each tile's transposed rows of A are reused from group to group. One group at a time
/// (B's vectors in L1, A's rows from L2 or L3 for every group) was slower in nearly every
/// comparison on a Zen 3; where B is large and read whole by 32-tile blocks, chunks were no
/// better and at times slower, so there a chunk is one group. In panels on an AVX-512 Xeon,
/// chunks made the sparsest pattern faster and left the others level.
pub(crate) const GROUP_CHUNK_BYTES: usize = 256 << 10;
/// Tiles per block where B is large and the L2 cannot hold [`L2_BLOCK_ROWS`] rows of A (64 were
/// slower again on a Zen 3).
pub(crate) const LARGE_B_TILES: usize = 32;
/// Rows of A a block takes at most (in whole tiles, at least one) where B is large and those
/// tiles, transposed, fit in the L2 ([`blocking`]): every block reads B's panel once more from
/// L3 and keeps only its own tiles of A in L2. On a Xeon with 2 MiB of L2 per core (AVX-512),
/// in panels, the best block was 2 tiles of 14 rows in f32 and 4 tiles of 8 rows in f64, each
/// against 1, 3, 4 and 32 tiles.
pub(crate) const L2_BLOCK_ROWS: usize = 32;
/// Bytes of B's kept values in a panel ([`blocking`]): every row block runs over one panel of
/// column groups before any block moves to the next, so that B is read from memory once per
/// panel and from L3 by every block after the first. Where B was larger than the panel, read
/// whole by every block, it came from memory each time and the product was markedly slower;
/// panels of twice this size were slower in f64, of half of it level.
pub(crate) const PANEL_BYTES: usize = 16 << 20;

/// How [`spmm`] walks C: blocks of `rows` rows, each over one panel of `panel_groups` column
/// groups of B at a time, its tiles taking the panel's groups in chunks of `chunk_groups`;
/// every block finishes a panel before any block starts the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Blocking {
    pub(crate) rows: usize,
    pub(crate) panel_groups: usize,
    pub(crate) chunk_groups: usize,
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
pub(crate) fn blocking<T: Real>(
    b: &NmMatrix<'_, T>,
    m: usize,
    threads: usize,
    tile_rows: usize,
    l2: Option<usize>,
) -> Blocking {
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
    // threads, so that the threads finish together (a block count that the threads do not
    // divide left one thread a short block behind the other's full ones).
    let blocks = (m.div_ceil(LARGE_B_TILES * tile_rows).div_ceil(threads) * threads).max(1);
    let tiles = m.div_ceil(blocks).div_ceil(tile_rows).clamp(TILES_PER_BLOCK, LARGE_B_TILES);
    Blocking { rows: tiles * tile_rows, chunk_groups: 1, ..all }
}

/// Column groups a block's tiles take in turn before the next groups ([`blocking`]): as many
/// as keep their kept vectors of B within [`GROUP_CHUNK_BYTES`].
pub(crate) fn groups_per_chunk<T>(b: &NmMatrix<'_, T>) -> usize {
    let group_bytes = std::mem::size_of_val(&b.values[..]) / b.groups.max(1);
    (GROUP_CHUNK_BYTES / group_bytes.max(1)).clamp(1, b.groups.max(1))
}

/// The first row of each block that `m` rows are cut into, then `m`: whole tiles of
/// `tile_rows` rows spread evenly over as many blocks as take at most `max_rows` rows each,
/// rounded up to a multiple of `threads` (at most one block per tile).
///
/// Blocks of one size and a last short one left a thread behind (1024 rows in tiles of 14 on
/// two threads were 9 blocks of 8 tiles and one of 2: 40 tiles for one thread and 34 for the
/// other; now 37 each). Where the tiles do not divide evenly, the blocks with a tile more come
/// first, and the last tile (short where `tile_rows` does not divide `m`, and as slow as a
/// whole one) last: the threads take blocks as they finish, so the last blocks decide how long
/// one waits for the other. With the shorter blocks first instead, one thread of two sat idle
/// for part of every panel, and the sparse patterns of f64 on two threads were several percent
/// slower; one thread was level.
pub(crate) fn block_starts(m: usize, tile_rows: usize, max_rows: usize, threads: usize) -> Vec<usize> {
    let tiles = m.div_ceil(tile_rows);
    let per_block = (max_rows / tile_rows).max(1);
    let blocks = tiles.div_ceil(per_block).div_ceil(threads).saturating_mul(threads).min(tiles);
    let (each, more) = (tiles.checked_div(blocks).unwrap_or(0), tiles.checked_rem(blocks).unwrap_or(0));
    (0..=blocks).map(|b| ((b * each + b.min(more)) * tile_rows).min(m)).collect()
}

/// Rows `0..m` of `c` (`m × n`) in the blocks that start at `starts` (the last entry is `m`),
/// taken by `threads` threads as they finish the previous one: `body(scratch, lo, hi, rows
/// lo..hi of c)`, with a scratch value per thread kept from block to block.
pub(crate) fn row_blocks<T: Send, S: kept_scratch::Scratch>(
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
pub(crate) struct SharedOut<T>(*mut T, usize);

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
