//! The entry points: `C = A·B` into a new tensor or into a slice, with the best instruction
//! set or a chosen one.

use nm_format::{LevelStorage, Tensor};

use crate::blocking::{Blocking, block_starts, blocking, row_blocks};
use crate::isa::{Isa, Loading};
use crate::packed::NmMatrix;
use crate::tile::{Part, Scratch, block_rows_of};
use crate::{Real, SpmmError, cache};

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
    check("A", crate::elements("A", m, b.rows)?, a.len())?;
    check("C", crate::elements("C", m, b.cols)?, c.len())?;
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
pub(crate) fn spmm_in_blocks<T: Real>(
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
    // (`kept_scratch`): allocated per block, its pages were faulted in and zeroed every time;
    // allocated per call, the sparsest patterns still lost a few percent.
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
