//! `C = A·B` with `A` in element-wise 2:4 (`nv24`), `B` and `C` dense.

use nm_format::{LevelStorage, Tensor};

use crate::blocking::{block_starts, row_blocks};
use crate::isa::Isa;
use crate::packed::LineAligned;
use crate::{Real, SpmmError};

/// `C = A·B` with `A` (`m×k`) in `nv24` — element-wise 2:4 along each row: every block of 4
/// columns keeps 2 entries, their values and offsets — `B` dense (`k×n`, row-major) and `C`
/// dense (`m×n`, overwritten), on `threads` threads.
///
/// Each row of `C` is summed in chunks of columns held in an accumulator while the row's
/// kept entries stream past (one broadcast of `A` and one row segment of `B` per entry); the
/// chunk loop is compiled for AVX-512 / AVX2 and chosen at run time like [`spmm`](crate::spmm)'s.
pub fn spmm_nv24<T: Real>(a: &Tensor<T>, b: &[T], n: usize, c: &mut [T], threads: usize) -> Result<(), SpmmError> {
    if a.format() != &nm_format::Format::nv24(2) {
        return Err(SpmmError::NotNv24(a.format().to_string()));
    }
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let LevelStorage::Structured { meta, .. } = &a.levels()[1] else {
        return Err(SpmmError::NotNv24(a.format().to_string()));
    };
    let (b_len, c_len) = (crate::elements("B", k, n)?, crate::elements("C", m, n)?);
    if b.len() != b_len {
        return Err(SpmmError::Length { what: "B", expected: b_len, actual: b.len() });
    }
    if c.len() != c_len {
        return Err(SpmmError::Length { what: "C", expected: c_len, actual: c.len() });
    }
    let isa = Isa::detect();
    let per_row = k.div_ceil(4) * 2;
    let rows_per_task = NV24_ROWS;
    // Each row's kept entries `(column, value)`, laid out per task by the thread that runs it
    // ([`kept_entries`]). Laid out for every row before the tasks started, they took a
    // tenth of the product on one thread, alone while the other threads waited.
    let values = a.values();
    let depth = NV24_DEPTH / 2;
    // Column chunks outermost within a task's rows, then chunks of `NV24_DEPTH` rows of B:
    // the chunk's panel of B stays in L1 while the task's rows pass, each adding its kept
    // entries of those rows of B to its segment of C, kept in a contiguous tile. (Row by row
    // over all of B, every row re-read B from memory; over whole columns of B, every FMA
    // waited on L2.)
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

/// Columns of C per chunk of an `nv24` product, in 256-bit vectors: 64 f32 / 32 f64.
pub(crate) const NV24_VECTORS: usize = 8;
/// Rows of B per chunk of an `nv24` product: with [`NV24_VECTORS`], a 16 KiB panel of f32.
pub(crate) const NV24_DEPTH: usize = 64;
/// Rows of A per task of an `nv24` product.
pub(crate) const NV24_ROWS: usize = 64;

/// [`nv24_columns`] compiled with FMA (and AVX2).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn nv24_columns_fma<T: Real>(kept: &[(u32, T)], k: usize, b: &[T], n: usize, first: usize, row: &mut [T]) {
    nv24_columns::<T, true>(kept, k, b, n, first, row)
}

/// Adds to columns `first..first + row.len()` of one row of `C` (`row` holds them) the sum
/// over `kept` entries `(column, value)` of the row, in chunks of 64.
#[inline(always)]
pub(crate) fn nv24_columns<T: Real, const FMA: bool>(
    kept: &[(u32, T)],
    k: usize,
    b: &[T],
    n: usize,
    first: usize,
    row: &mut [T],
) {
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
