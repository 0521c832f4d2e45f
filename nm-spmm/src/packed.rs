//! B packed once: each column group's kept vectors in one panel, with the row each came from.

use nm_format::{LevelStorage, Tensor};

use crate::isa::KEPT_AT_STRIDE;
use crate::{Real, SpmmError};

/// A `k×n` matrix in `nm(N,M,L)`, packed for [`spmm`](crate::spmm): panels of kept vectors per column
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
    pub(crate) values: LineAligned<T>,
    /// Each kept vector's row of B (`w·M + offset`, below `windows·M`; rows past `k` are the
    /// zero padding of the last window), in the same `(g, w, t)` order: one group's kept
    /// vectors are one flat loop, where window and offset cost a loop and a multiply each.
    pub(crate) kept_rows: Vec<u32>,
    /// `kept_rows` times [`KEPT_AT_STRIDE`], the offsets of those rows in an AVX-512 tile's
    /// transposed rows of A: the tile pass adds one to `a_t` in the address of its loads, where
    /// a row number took a shift first: two µops saved per kept vector of a loop that issues
    /// near four a cycle at FMA peak, which made f64 1:8 faster on one and two threads.
    pub(crate) kept_at: Vec<u32>,
    pub(crate) _tensor: std::marker::PhantomData<&'a Tensor<T>>,
}

/// Values whose first element lies on a cache-line boundary, so that panels made of whole
/// lines are loaded without a vector ever straddling two (the allocator aligns to 16 bytes;
/// every other 32-byte load of a line-wide strip then split, and the `nv24` kernel was
/// markedly slower for it).
#[derive(Clone, Debug)]
pub(crate) struct LineAligned<T> {
    pub(crate) storage: Vec<T>,
    pub(crate) start: usize,
    pub(crate) len: usize,
}

impl<T: Real> LineAligned<T> {
    /// `len` zeros, on transparent huge pages where they take 4 MiB or more
    /// ([`nm_runtime::memory::advise_huge_pages`]): B's packed values are read whole by every
    /// row block: a little faster than 4 KiB pages where B is large, level where it is small.
    pub(crate) fn zeros(len: usize) -> Self {
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
    pub(crate) fn group(&self, g: usize) -> std::ops::Range<usize> {
        g * self.windows * self.n..(g + 1) * self.windows * self.n
    }

    /// Lanes per strip ([`strip_lanes`]).
    pub(crate) fn strip(&self) -> usize {
        strip_lanes(self.l, std::mem::size_of::<T>())
    }

    /// Group `g`'s strips: for each, its first lane and its values (`strip` per kept vector).
    pub(crate) fn strips(&self, g: usize) -> impl Iterator<Item = (usize, &[T])> {
        let kept = self.group(g);
        let values = &self.values[kept.start * self.l..kept.end * self.l];
        values.chunks_exact(kept.len() * self.strip()).enumerate().map(|(s, strip)| (s * self.strip(), strip))
    }

    /// Whether the kernels prefetch the rows of A's transposed tile they will read: where
    /// windows keep at most a quarter of their rows, each kept vector reads a new line of it,
    /// and the loads stalled the FMAs; at 4:8 the lines are shared and the prefetches cost
    /// more than they save.
    pub(crate) fn prefetch(&self) -> bool {
        4 * self.n <= self.m
    }

    /// B's rows padded to whole windows: the rows the SIMD kernels' transposed A tiles hold.
    pub(crate) fn padded_rows(&self) -> usize {
        self.windows * self.m
    }

    /// Useful multiply-adds of `C = A·B` with `A` of `m` rows: `m·k·n·N/M`.
    pub fn flops(&self, m: usize) -> f64 {
        2.0 * m as f64 * self.rows as f64 * self.cols as f64 * self.n as f64 / self.m as f64
    }
}

/// Bytes in a cache line (the x86-64 CPUs the kernels target).
pub(crate) const CACHE_LINE: usize = 64;

/// Lanes per strip of B's packed values for vectors of `l` elements of `size` bytes: one
/// cache line's worth where `l` is a multiple of it, else `l`. A pass of the kernels over some
/// of `L`'s lanes then streams one contiguous strip, where whole vectors made it read a line
/// and skip the rest (f64 with L = 32 on AVX2: four passes each reading 64 of every 256
/// bytes). A compile-time constant in the tile passes, so that a kept vector's values and
/// those prefetched ahead are addressed by constant displacements.
pub(crate) const fn strip_lanes(l: usize, size: usize) -> usize {
    let line = CACHE_LINE / size;
    if l.is_multiple_of(line) { line } else { l }
}

/// Elements from one row of a transposed tile of `rows` rows to the next: a power of two, so
/// that one row's values never straddle two cache lines (6 rows of f32 in 24 bytes did, and
/// the sparsest patterns, which read a new line per kept vector, ran far below the densest) —
/// given a buffer that starts on a line
/// ([`LineAligned`]: a `Vec` of a transposed block's size comes from `mmap` 16 bytes past a
/// page, where every other f32 row of 32 bytes straddled two lines).
pub(crate) const fn row_stride(rows: usize) -> usize {
    rows.next_power_of_two()
}
