//! Building tensors from components: coordinate lists, dense arrays, conversion between
//! formats, and N:M magnitude pruning.
//!
//! Every way in goes through one builder: map each component's tensor coordinates to level
//! coordinates, sort them lexicographically by level (LSD radix passes, one counting sort per
//! level, skipped when a level is already in order), merge or reject duplicates, then assemble
//! the levels top-down. Structured N:M levels either fit (at most N distinct coordinates per
//! block; free kept slots take other offsets of the block with explicit zeros), fail with
//! [`TensorError::DoesNotFitPattern`], or are pruned to fit on request.

use smallvec::SmallVec;

use crate::error::{Result, TensorError};
use crate::format::{Format, LevelExpr};
use crate::level::LevelKind;
use crate::storage::{Indices, LevelStorage, Metadata};
use crate::tensor::{Tensor, checked_product};
use crate::value::Value;

/// A list of components: one coordinate array per dimension (struct of arrays) plus values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CoordinateList<T> {
    /// The logical shape.
    pub shape: Vec<usize>,
    /// `coords[d][e]` is coordinate `d` of entry `e`.
    pub coords: Vec<Vec<usize>>,
    /// `values[e]` is the value of entry `e`.
    pub values: Vec<T>,
}

impl<T: Value> CoordinateList<T> {
    /// An empty list for a tensor of `shape`.
    pub fn new(shape: Vec<usize>) -> Self {
        let coords = vec![Vec::new(); shape.len()];
        Self { shape, coords, values: Vec::new() }
    }

    /// Appends one component. Panics if `coords` has the wrong order (a programming error);
    /// ranges are checked when the tensor is built.
    pub fn push(&mut self, coords: &[usize], value: T) {
        assert_eq!(coords.len(), self.shape.len(), "component of the wrong order");
        for (d, &c) in coords.iter().enumerate() {
            self.coords[d].push(c);
        }
        self.values.push(value);
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Sorts the entries row-major (lexicographically by coordinates), keeping duplicates.
    pub fn sort_row_major(&mut self) {
        let mut perm: Vec<usize> = (0..self.len()).collect();
        perm.sort_by(|&a, &b| {
            self.coords.iter().map(|c| c[a].cmp(&c[b])).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
        });
        for c in &mut self.coords {
            *c = perm.iter().map(|&e| c[e]).collect();
        }
        self.values = perm.iter().map(|&e| self.values[e]).collect();
    }

    /// Coordinates of entry `e`.
    pub fn entry(&self, e: usize) -> Vec<usize> {
        self.coords.iter().map(|c| c[e]).collect()
    }
}

/// What to do with two entries at the same coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Duplicates {
    /// Add their values (Matrix Market and scipy semantics).
    Sum,
    /// Fail with [`TensorError::DuplicateEntry`].
    Reject,
}

/// How many components pruning dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PruneReport {
    /// Nonzero components dropped.
    pub dropped: usize,
    /// Nonzero components kept.
    pub kept: usize,
    /// Sum of |value| over the dropped components.
    pub dropped_magnitude: f64,
}

impl<T: Value> Tensor<T> {
    /// An upper bound of the memory, in bytes, that [`Tensor::from_coordinates`] allocates
    /// for `entries` components of a `shape` tensor in `format`, besides the list itself: what
    /// it checks against the memory available before it starts (see `memory`), and what a
    /// caller may check before reading a file.
    pub fn build_peak(shape: &[usize], format: &Format, entries: usize) -> u128 {
        match crate::transpose::compressed_matrix_outer(format) {
            Some(outer) if shape.len() == 2 => {
                crate::transpose::compressed_matrix_peak::<T>(shape[outer], shape[1 - outer], entries)
            }
            _ => general_peak::<T>(shape, format, entries),
        }
    }

    /// Builds a tensor from a coordinate list. Explicit zeros are stored as given.
    pub fn from_coordinates(list: &CoordinateList<T>, format: &Format, duplicates: Duplicates) -> Result<Self> {
        check_list(list, format)?;
        if let Some(t) = Self::from_coordinates_compressed_matrix(list, format, duplicates) {
            return t;
        }
        let entries = Entries::from_list(list, format);
        Builder { format, shape: &list.shape }.build(entries, duplicates, false).map(|(t, _)| t)
    }

    /// Builds a tensor from a dense row-major array, storing its nonzeros.
    pub fn from_dense(shape: &[usize], data: &[T], format: &Format) -> Result<Self> {
        let expected = checked_product(shape, "the dense array")?;
        if data.len() != expected {
            return Err(TensorError::DenseLength { shape: shape.to_vec(), expected, actual: data.len() });
        }
        // Every level dense in dimension order: the array is the values array as it stands (a
        // dense result through a coordinate list took as long as the SpMM that made it).
        if !shape.is_empty() && *format == Format::dense(shape.len()) {
            let levels = shape.iter().map(|&size| LevelStorage::Dense { size }).collect();
            return Self::from_raw(shape.to_vec(), format.clone(), levels, data.to_vec());
        }
        let mut list = CoordinateList::new(shape.to_vec());
        let mut coords = vec![0usize; shape.len()];
        for &v in data {
            if v != T::ZERO {
                list.push(&coords, v);
            }
            for d in (0..shape.len()).rev() {
                coords[d] += 1;
                if coords[d] < shape[d] {
                    break;
                }
                coords[d] = 0;
            }
        }
        Self::from_coordinates(&list, format, Duplicates::Reject)
    }

    /// Every stored component (explicit zeros included, padding excluded) as a coordinate list,
    /// in storage order.
    pub fn to_coordinates(&self) -> CoordinateList<T> {
        self.components(|_| true)
    }

    fn components(&self, keep: impl Fn(T) -> bool) -> CoordinateList<T> {
        let all = self.component_coordinates();
        let mut list = CoordinateList::new(self.shape.clone());
        for c in &mut list.coords {
            c.reserve(self.values.len());
        }
        list.values.reserve(self.values.len());
        let padded = self.format.padded_shape(&self.shape) != self.shape;
        for (q, &v) in self.values.iter().enumerate() {
            if !keep(v) || (padded && (0..self.order()).any(|d| all[d][q] >= self.shape[d])) {
                continue;
            }
            for d in 0..self.order() {
                list.coords[d].push(all[d][q]);
            }
            list.values.push(v);
        }
        list
    }

    /// The same tensor in another format. Every component a compressed or singleton level
    /// stores is carried over exactly, explicit zeros included: they are part of the sparsity
    /// pattern, and an expression over the tensor stores a result where they are, whatever the
    /// format (components stored twice by a non-unique format are summed). Zeros that a
    /// dense, band or structured last level stores are padding (every element of a dense
    /// tensor, the zeros inside a band's runs, the unkept slots of N:M, the rest of a block) and are not carried over. Converting into an
    /// N:M format fails unless the data fits the pattern; see [`Tensor::prune`].
    pub fn convert(&self, format: &Format) -> Result<Self> {
        if format.order() != self.order() {
            return Err(TensorError::OrderMismatch { format_order: format.order(), shape_order: self.order() });
        }
        nm_runtime::memory::ensure_available(self.convert_peak(format), || {
            format!("a {:?} tensor converted to {}", self.shape, format.name().unwrap_or_else(|| format.to_string()))
        })?;
        if let Some(t) = self.convert_compressed_matrix(format) {
            return Ok(t);
        }
        let padding = self.format.levels().last().is_none_or(|l| {
            matches!(l.kind, crate::LevelKind::Dense | crate::LevelKind::Structured { .. } | crate::LevelKind::Band)
        });
        let list = self.components(|v| !padding || v != T::ZERO);
        let entries = Entries::from_list(&list, format);
        Builder { format, shape: &self.shape }.build(entries, Duplicates::Sum, false).map(|(t, _)| t)
    }

    /// An upper bound of the memory, in bytes, that [`Tensor::convert`] allocates besides the
    /// tensor: what it checks against the memory available before it starts. Between CSR and
    /// CSC, the new arrays; otherwise the components as a list (coordinates found through a
    /// position and a parent per level) and the build ([`Tensor::build_peak`]).
    pub fn convert_peak(&self, format: &Format) -> u128 {
        if let Some(bytes) = self.compressed_matrix_convert_peak(format) {
            return bytes;
        }
        let e = self.values.len();
        let words = (self.order() + 1 + self.levels.len()) as u128;
        e as u128 * (words * 8 + std::mem::size_of::<T>() as u128) + Self::build_peak(&self.shape, format, e)
    }

    /// Converts into `format`, first dropping what does not fit its structured N:M levels:
    /// in every block the N coordinates with the largest score are kept, the score being the
    /// sum of |value| of everything stored below that coordinate (for `nm(N,M,L)`, the L
    /// values of the vector); ties go to the lower coordinate. Formats without structured
    /// levels drop nothing.
    pub fn prune(&self, format: &Format) -> Result<(Self, PruneReport)> {
        if format.order() != self.order() {
            return Err(TensorError::OrderMismatch { format_order: format.order(), shape_order: self.order() });
        }
        let list = self.components(|v| v != T::ZERO);
        let entries = Entries::from_list(&list, format);
        Builder { format, shape: &self.shape }.build(entries, Duplicates::Sum, true)
    }
}

/// Bytes the general builder allocates, at most, for `entries` components of a `shape` tensor
/// in `format`, besides its input: the entries' level coordinates and values, the sort's
/// permutation and counts, each entry's position, and every level as it is built (`usize`
/// arrays, then their final widths) with the values. Every part is counted as if all were
/// alive at once: an upper bound of the peak.
pub(crate) fn general_peak<T: Value>(shape: &[usize], format: &Format, entries: usize) -> u128 {
    let sizes = format.level_sizes(shape);
    let (e, t) = (entries as u128, std::mem::size_of::<T>() as u128);
    let index = |n: u128, bound: u128| n * if bound <= u32::MAX as u128 + 1 { 4 } else { 8 };
    // Entries, sort (permutation, next, counts of the widest level it sorts by radix),
    // positions.
    let widest = sizes.iter().map(|&s| (s as u128).min(8 * e + 65_536)).max().unwrap_or(0);
    let mut bytes = e * (sizes.len() as u128 * 8 + t) + e * 16 + (widest + 1) * 8 + e * 8;
    let mut positions: u128 = 1;
    for (level, &size) in format.levels().iter().zip(&sizes) {
        let size = size as u128;
        positions = match level.kind {
            LevelKind::Dense => positions.saturating_mul(size),
            LevelKind::Structured { n, m } => {
                let p = positions.saturating_mul(size / m as u128).saturating_mul(n as u128);
                bytes = bytes.saturating_add(p.saturating_mul(crate::level::metadata_bits(m) as u128) / 8);
                p
            }
            // A band's runs hold at least its entries; how many zeros between them is known
            // only once they are sorted, and checked then.
            LevelKind::Compressed(_) | LevelKind::Band => {
                let parents = positions.saturating_add(1);
                let children = positions.saturating_mul(size).min(e);
                bytes =
                    bytes.saturating_add(parents * 8 + index(parents, e + 1) + children * 8 + index(children, size));
                children
            }
            LevelKind::Singleton(_) => {
                bytes = bytes.saturating_add(positions.saturating_mul(8) + index(positions, size));
                positions
            }
        };
    }
    bytes.saturating_add(positions.saturating_mul(t))
}

/// The general builder alone (for tests that compare the fast paths with it).
#[cfg(test)]
pub(crate) fn build_general<T: Value>(list: &CoordinateList<T>, format: &Format) -> Result<Tensor<T>> {
    let entries = Entries::from_list(list, format);
    Builder { format, shape: &list.shape }.build(entries, Duplicates::Sum, false).map(|(t, _)| t)
}

fn check_list<T: Value>(list: &CoordinateList<T>, format: &Format) -> Result<()> {
    if list.shape.len() != format.order() {
        return Err(TensorError::OrderMismatch { format_order: format.order(), shape_order: list.shape.len() });
    }
    if list.coords.len() != list.shape.len() {
        return Err(TensorError::CoordinatesLength { dim: list.coords.len(), expected: list.values.len(), actual: 0 });
    }
    for (d, c) in list.coords.iter().enumerate() {
        if c.len() != list.values.len() {
            return Err(TensorError::CoordinatesLength { dim: d, expected: list.values.len(), actual: c.len() });
        }
    }
    for (d, c) in list.coords.iter().enumerate() {
        if let Some(e) = c.iter().position(|&x| x >= list.shape[d]) {
            return Err(TensorError::OutOfShape { entry: e, dim: d, coordinate: c[e], size: list.shape[d] });
        }
    }
    Ok(())
}

/// Components in level coordinates: `level[l][e]` is the coordinate of entry `e` at level `l`.
struct Entries<T> {
    level: Vec<Vec<usize>>,
    values: Vec<T>,
}

impl<T: Value> Entries<T> {
    fn from_list(list: &CoordinateList<T>, format: &Format) -> Self {
        let level = format
            .levels()
            .iter()
            .map(|lv| list.coords[lv.expr.dim()].iter().map(|&c| lv.expr.apply(c)).collect())
            .collect();
        Self { level, values: list.values.clone() }
    }

    fn len(&self) -> usize {
        self.values.len()
    }

    /// Sorts lexicographically by level coordinates: a stable counting sort per level, least
    /// significant level first, skipping levels that are already in order. Falls back to a
    /// comparison sort when a level is much larger than the number of entries.
    fn sort(&mut self, sizes: &[usize]) {
        let n = self.len();
        if n < 2 || self.is_sorted() {
            return;
        }
        let mut perm: Vec<usize> = (0..n).collect();
        let radix_ok = sizes.iter().all(|&s| s <= 8 * n + 65_536);
        if radix_ok {
            let mut next = vec![0usize; n];
            for l in (0..self.level.len()).rev() {
                let key = &self.level[l];
                if perm.windows(2).all(|w| key[w[0]] <= key[w[1]]) {
                    continue;
                }
                let mut count = vec![0usize; sizes[l] + 1];
                for &e in &perm {
                    count[key[e] + 1] += 1;
                }
                for i in 1..count.len() {
                    count[i] += count[i - 1];
                }
                for &e in &perm {
                    let slot = &mut count[key[e]];
                    next[*slot] = e;
                    *slot += 1;
                }
                std::mem::swap(&mut perm, &mut next);
            }
        } else {
            let level = &self.level;
            perm.sort_unstable_by(|&a, &b| {
                level
                    .iter()
                    .map(|c| c[a].cmp(&c[b]))
                    .find(|o| o.is_ne())
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(a.cmp(&b))
            });
        }
        for c in &mut self.level {
            *c = perm.iter().map(|&e| c[e]).collect();
        }
        self.values = perm.iter().map(|&e| self.values[e]).collect();
    }

    fn is_sorted(&self) -> bool {
        (1..self.len()).all(|e| self.compare(e - 1, e) != std::cmp::Ordering::Greater)
    }

    fn compare(&self, a: usize, b: usize) -> std::cmp::Ordering {
        self.level.iter().map(|c| c[a].cmp(&c[b])).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
    }

    /// Keeps the entries `keep[e]` holds for, in order.
    fn retain(&mut self, keep: &[bool]) {
        for c in &mut self.level {
            let mut i = 0;
            c.retain(|_| {
                i += 1;
                keep[i - 1]
            });
        }
        let mut i = 0;
        self.values.retain(|_| {
            i += 1;
            keep[i - 1]
        });
    }
}

struct Builder<'a> {
    format: &'a Format,
    shape: &'a [usize],
}

impl Builder<'_> {
    fn build<T: Value>(
        &self,
        mut entries: Entries<T>,
        duplicates: Duplicates,
        prune: bool,
    ) -> Result<(Tensor<T>, PruneReport)> {
        let sizes = self.format.level_sizes(self.shape);
        checked_product(&self.format.padded_shape(self.shape), "the padded shape")?;
        self.check_memory::<T>(entries.len())?;
        entries.sort(&sizes);
        self.merge_duplicates(&mut entries, duplicates)?;
        let mut report = PruneReport::default();
        if prune {
            report = self.prune_structured(&mut entries);
        }
        report.kept = entries.values.iter().filter(|&&v| v != T::ZERO).count();

        let n = entries.len();
        let mut at = vec![0usize; n]; // each entry's position at the current level
        let mut parents = 1usize;
        let mut levels = Vec::with_capacity(sizes.len());
        for (l, level) in self.format.levels().iter().enumerate() {
            let lc = &entries.level[l];
            let size = sizes[l];
            let too_large = || TensorError::TooLarge { what: format!("level {l} ({parents} parents × {size})") };
            let (storage, positions) = match level.kind {
                LevelKind::Dense => {
                    for (p, &c) in at.iter_mut().zip(lc) {
                        *p = *p * size + c;
                    }
                    (LevelStorage::Dense { size }, parents.checked_mul(size).ok_or_else(too_large)?)
                }
                LevelKind::Compressed(props) => {
                    let mut pos = vec![0usize; parents + 1];
                    let mut crd = Vec::new();
                    let mut last: Option<(usize, usize)> = None;
                    for (p, &c) in at.iter_mut().zip(lc) {
                        if !props.unique || last != Some((*p, c)) {
                            last = Some((*p, c));
                            crd.push(c);
                            pos[*p + 1] += 1;
                        }
                        *p = crd.len() - 1;
                    }
                    for i in 1..pos.len() {
                        pos[i] += pos[i - 1];
                    }
                    let positions = crd.len();
                    (
                        LevelStorage::Compressed { pos: Indices::from_usize(pos), crd: Indices::from_usize(crd) },
                        positions,
                    )
                }
                LevelKind::Singleton(_) => {
                    let mut crd = vec![usize::MAX; parents];
                    for (e, (&p, &c)) in at.iter().zip(lc).enumerate() {
                        if crd[p] != usize::MAX && crd[p] != c {
                            return Err(TensorError::SingletonCannotHold {
                                level: l,
                                coordinates: self.tensor_coords(&entries, e),
                            });
                        }
                        crd[p] = c;
                    }
                    (LevelStorage::Singleton { crd: Indices::from_usize(crd) }, parents)
                }
                LevelKind::Structured { n: keep, m } => {
                    let (keep, m) = (keep as usize, m as usize);
                    let blocks = size / m;
                    let positions = parents.checked_mul(blocks * keep).ok_or_else(too_large)?;
                    let mut meta = Metadata::zeroed(positions, m as u32);
                    // Blocks no entry falls in keep the first N offsets, holding zeros.
                    let default_block = |meta: &mut Metadata, block: usize| {
                        for t in 0..keep {
                            meta.set(block * keep + t, t as u32);
                        }
                    };
                    let mut written = 0; // blocks whose metadata is set, in position order
                    let mut used: SmallVec<[usize; 16]> = SmallVec::new();
                    let mut slots: SmallVec<[usize; 16]> = SmallVec::new();
                    let mut e = 0;
                    while e < n {
                        let (p, b) = (at[e], lc[e] / m);
                        let mut end = e;
                        used.clear();
                        while end < n && at[end] == p && lc[end] / m == b {
                            let offset = lc[end] % m;
                            if used.last() != Some(&offset) {
                                used.push(offset);
                            }
                            end += 1;
                        }
                        if used.len() > keep {
                            let mut start = self.level_coords_of(&entries, e);
                            start[l] = b * m;
                            start[l + 1..].fill(0);
                            return Err(TensorError::DoesNotFitPattern {
                                level: l,
                                n: keep as u32,
                                m: m as u32,
                                found: used.len(),
                                block_start: self.to_tensor_coords(&start),
                            });
                        }
                        let block = p * blocks + b;
                        (written..block).for_each(|untouched| default_block(&mut meta, untouched));
                        fill_slots(&used, keep, &mut slots);
                        for (t, &o) in slots.iter().enumerate() {
                            meta.set(block * keep + t, o as u32);
                        }
                        written = block + 1;
                        // The block's entries are sorted by offset: walk the slots alongside.
                        let mut t = 0;
                        for i in e..end {
                            while slots[t] != lc[i] % m {
                                t += 1;
                            }
                            at[i] = block * keep + t;
                        }
                        e = end;
                    }
                    (written..parents * blocks).for_each(|untouched| default_block(&mut meta, untouched));
                    (LevelStorage::Structured { size, meta }, positions)
                }
                LevelKind::Band => self.band_level::<T>(l, parents, &mut at, lc)?,
            };
            levels.push(storage);
            parents = positions;
        }
        let mut values = nm_runtime::memory::huge_vec(parents)?;
        values.resize(parents, T::ZERO);
        for (&q, &v) in at.iter().zip(&entries.values) {
            values[q] += v;
        }
        let tensor =
            Tensor { shape: self.shape.to_vec(), format: self.format.clone(), levels, values }.with_values_placed();
        Ok((tensor, report))
    }

    /// A band level below `parents` parent positions, from the sorted entries' parents `at`
    /// (turned into their positions) and level coordinates `lc`: each parent's run goes from
    /// its first entry's coordinate to its last's, the zeros between them stored. The memory
    /// for those zeros (their values and their children's positions, at most) is checked
    /// before it is taken.
    fn band_level<T: Value>(
        &self,
        l: usize,
        parents: usize,
        at: &mut [usize],
        lc: &[usize],
    ) -> Result<(LevelStorage, usize)> {
        let mut first = vec![0usize; parents];
        let mut pos = vec![0usize; parents + 1];
        let mut e = 0;
        while e < at.len() {
            let p = at[e];
            let end = e + at[e..].iter().take_while(|&&q| q == p).count();
            first[p] = lc[e];
            pos[p + 1] = lc[end - 1] - lc[e] + 1;
            e = end;
        }
        for i in 1..pos.len() {
            pos[i] = pos[i]
                .checked_add(pos[i - 1])
                .ok_or_else(|| TensorError::TooLarge { what: format!("the runs of band level {l}") })?;
        }
        let positions = pos[parents];
        let per_position = (16 + std::mem::size_of::<T>()) as u128;
        nm_runtime::memory::ensure_available(positions as u128 * per_position, || {
            format!("band level {l} of a {:?} tensor ({positions} positions)", self.shape)
        })?;
        for (q, &c) in at.iter_mut().zip(lc) {
            *q = pos[*q] + (c - first[*q]);
        }
        Ok((LevelStorage::Band { pos: Indices::from_usize(pos), first: Indices::from_usize(first) }, positions))
    }

    /// Refuses, before anything is sorted or allocated, a tensor whose building would take
    /// more memory than the system has ([`general_peak`]).
    fn check_memory<T: Value>(&self, entries: usize) -> Result<()> {
        nm_runtime::memory::ensure_available(general_peak::<T>(self.shape, self.format, entries), || {
            format!("a {:?} tensor in {}", self.shape, self.format.name().unwrap_or_else(|| self.format.to_string()))
        })
        .map_err(Into::into)
    }

    fn merge_duplicates<T: Value>(&self, entries: &mut Entries<T>, duplicates: Duplicates) -> Result<()> {
        let n = entries.len();
        if (1..n).all(|e| entries.compare(e - 1, e).is_ne()) {
            return Ok(());
        }
        let mut keep = vec![true; n];
        let mut head = 0;
        for e in 1..n {
            if entries.compare(head, e).is_eq() {
                if duplicates == Duplicates::Reject {
                    return Err(TensorError::DuplicateEntry { coordinates: self.tensor_coords(entries, e) });
                }
                let v = entries.values[e];
                entries.values[head] += v;
                keep[e] = false;
            } else {
                head = e;
            }
        }
        entries.retain(&keep);
        Ok(())
    }

    /// Drops, in each block of each structured level, the coordinates beyond the N best.
    fn prune_structured<T: Value>(&self, entries: &mut Entries<T>) -> PruneReport {
        let mut report = PruneReport::default();
        for (l, level) in self.format.levels().iter().enumerate() {
            let LevelKind::Structured { n: keep, m } = level.kind else {
                continue;
            };
            let (keep, m) = (keep as usize, m as usize);
            let n = entries.len();
            let mut kept = vec![true; n];
            let mut e = 0;
            while e < n {
                // A block: same coordinates above level l, same block of level l.
                let mut end = e + 1;
                while end < n
                    && (0..l).all(|k| entries.level[k][end] == entries.level[k][e])
                    && entries.level[l][end] / m == entries.level[l][e] / m
                {
                    end += 1;
                }
                // Runs of one coordinate inside the block, scored by total magnitude.
                let mut runs: Vec<(f64, usize, usize, usize)> = Vec::new(); // (score, coordinate, start, end)
                let mut s = e;
                while s < end {
                    let c = entries.level[l][s];
                    let mut t = s;
                    let mut score = 0.0;
                    while t < end && entries.level[l][t] == c {
                        score += entries.values[t].abs().to_f64();
                        t += 1;
                    }
                    runs.push((score, c, s, t));
                    s = t;
                }
                if runs.len() > keep {
                    runs.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                    for &(_, _, s, t) in &runs[keep..] {
                        for (i, k) in kept.iter_mut().enumerate().take(t).skip(s) {
                            *k = false;
                            let v = entries.values[i];
                            if v != T::ZERO {
                                report.dropped += 1;
                                report.dropped_magnitude += v.abs().to_f64();
                            }
                        }
                    }
                }
                e = end;
            }
            entries.retain(&kept);
        }
        report
    }

    fn level_coords_of<T>(&self, entries: &Entries<T>, e: usize) -> Vec<usize> {
        entries.level.iter().map(|c| c[e]).collect()
    }

    fn tensor_coords<T>(&self, entries: &Entries<T>, e: usize) -> Vec<usize> {
        self.to_tensor_coords(&self.level_coords_of(entries, e))
    }

    fn to_tensor_coords(&self, level_coords: &[usize]) -> Vec<usize> {
        let mut coords = vec![0; self.format.order()];
        for (level, &lc) in self.format.levels().iter().zip(level_coords) {
            coords[level.expr.dim()] += match level.expr {
                LevelExpr::FloorDiv(_, b) => lc * b,
                _ => lc,
            };
        }
        coords
    }
}

/// The kept offsets of a block: the sorted, distinct offsets `used` by its entries, plus the
/// lowest unused ones (which will hold explicit zeros) up to `keep`, in increasing order.
fn fill_slots(used: &[usize], keep: usize, slots: &mut SmallVec<[usize; 16]>) {
    slots.clear();
    let mut fill = keep - used.len();
    let (mut u, mut candidate) = (0, 0);
    while slots.len() < keep {
        if u < used.len() && used[u] == candidate {
            slots.push(candidate);
            u += 1;
            candidate += 1;
        } else if fill > 0 {
            slots.push(candidate);
            fill -= 1;
            candidate += 1;
        } else {
            candidate = used[u];
        }
    }
}
