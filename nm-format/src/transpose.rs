//! The two one-compressed-level matrix formats (CSR and CSC) by counting sort, as scipy does:
//! conversion between them (`tocsc`), and building them from a coordinate list (`coo_tocsr`,
//! then each row sorted and its duplicates merged). The general builder gives the same tensors
//! through more passes; these are the paths users time.

use crate::build::{CoordinateList, Duplicates};
use crate::error::{Result, TensorError};
use crate::format::{Format, LevelExpr};
use crate::level::LevelKind;
use crate::storage::{Indices, LevelStorage};
use crate::tensor::Tensor;
use crate::value::Value;

/// `Some(d)` when `format` is `(d : dense, other : compressed)` (ordered, unique).
fn outer_dim(format: &Format) -> Option<usize> {
    match format.levels() {
        [a, b] if a.kind == LevelKind::Dense && b.kind == LevelKind::COMPRESSED => match (a.expr, b.expr) {
            (LevelExpr::Dim(d), LevelExpr::Dim(_)) => Some(d),
            _ => None,
        },
        _ => None,
    }
}

impl<T: Value> Tensor<T> {
    /// The fast path of [`Tensor::from_coordinates`] for CSR/CSC targets (the list already
    /// checked); `None` when it does not apply. Entries of one row keep their list order among
    /// equal columns, so duplicates sum in the same order as the general builder sums them.
    pub(crate) fn from_coordinates_compressed_matrix(
        list: &CoordinateList<T>,
        format: &Format,
        duplicates: Duplicates,
    ) -> Option<Result<Tensor<T>>> {
        let outer = outer_dim(format)?;
        let inner = 1 - outer;
        let (rows, cols) = (&list.coords[outer], &list.coords[inner]);
        let (n_outer, n_inner) = (list.shape[outer], list.shape[inner]);
        // Refused, not an allocator abort, when a file's header declares more rows than
        // memory holds.
        let too_large =
            || format!("a {:?} matrix in {}", list.shape, format.name().unwrap_or_else(|| format.to_string()));
        let bytes = compressed_matrix_peak::<T>(n_outer, n_inner, list.len());
        if let Err(e) = nm_runtime::memory::ensure_available(bytes, too_large) {
            return Some(Err(e.into()));
        }
        // `pos[r]`: where row r starts, then (as the cursor entries are placed with) where it
        // ends.
        let mut pos: Vec<usize> = Vec::new();
        if n_outer.checked_add(1).is_none_or(|n| pos.try_reserve_exact(n).is_err()) {
            return Some(Err(TensorError::TooLarge { what: too_large() }));
        }
        pos.resize(n_outer + 1, 0);
        for &r in rows {
            pos[r + 1] += 1;
        }
        for r in 0..n_outer {
            pos[r + 1] += pos[r];
        }
        let mut entries: Vec<(usize, T)> = vec![(0, T::ZERO); list.len()];
        for ((&r, &c), &v) in rows.iter().zip(cols).zip(&list.values) {
            entries[pos[r]] = (c, v);
            pos[r] += 1;
        }
        // Built in the index widths they end in (`Indices::from_usize` would copy them).
        let narrow_pos = list.len() <= u32::MAX as usize;
        let narrow_crd = n_inner <= u32::MAX as usize + 1;
        let rows = Rows { pos: &pos, entries: &mut entries, outer, inner, duplicates };
        let built = match (narrow_pos, narrow_crd) {
            (true, true) => rows.merge::<u32, u32>(),
            (true, false) => rows.merge::<u32, usize>(),
            (false, true) => rows.merge::<usize, u32>(),
            (false, false) => rows.merge::<usize, usize>(),
        };
        Some(built.map(|(pos, crd, values)| {
            Tensor {
                shape: list.shape.clone(),
                format: format.clone(),
                levels: vec![LevelStorage::Dense { size: n_outer }, LevelStorage::Compressed { pos, crd }],
                values,
            }
            .with_values_placed()
        }))
    }

    /// The fast path of [`Tensor::convert`] for CSR/CSC sources and targets; `None` when it
    /// does not apply.
    pub(crate) fn convert_compressed_matrix(&self, target: &Format) -> Option<Tensor<T>> {
        let (from, to) = self.compressed_matrix_conversion(target)?;
        let [LevelStorage::Dense { size: outer }, LevelStorage::Compressed { pos, crd }] = self.levels.as_slice()
        else {
            return None;
        };
        let new_outer = self.shape[to];
        let narrow = self.values.len() <= u32::MAX as usize && self.shape.iter().all(|&s| s <= u32::MAX as usize);
        let (pos, crd, values) = match (pos, crd, narrow) {
            (Indices::U32(p), Indices::U32(c), true) => {
                let (p, c, v) = rebuild::<u32, u32, T>(p, c, &self.values, *outer, new_outer, from != to);
                (Indices::U32(p), Indices::U32(c), v)
            }
            (Indices::U32(p), Indices::U32(c), false) => {
                let (p, c, v) = rebuild::<u32, u64, T>(p, c, &self.values, *outer, new_outer, from != to);
                (Indices::U64(p), Indices::U64(c), v)
            }
            _ => {
                let (p, c) = (widen(pos), widen(crd));
                let (p, c, v) = rebuild::<u64, u64, T>(&p, &c, &self.values, *outer, new_outer, from != to);
                (Indices::U64(p), Indices::U64(c), v)
            }
        };
        Some(
            Tensor {
                shape: self.shape.clone(),
                format: target.clone(),
                levels: vec![LevelStorage::Dense { size: new_outer }, LevelStorage::Compressed { pos, crd }],
                values,
            }
            .with_values_placed(),
        )
    }

    /// `(from, to)`, the outer dimensions, where [`Self::convert_compressed_matrix`] applies.
    fn compressed_matrix_conversion(&self, target: &Format) -> Option<(usize, usize)> {
        let pair = (outer_dim(&self.format)?, outer_dim(target)?);
        matches!(self.levels.as_slice(), [LevelStorage::Dense { .. }, LevelStorage::Compressed { .. }]).then_some(pair)
    }

    /// Bytes [`Self::convert_compressed_matrix`] allocates at most: the new rows' counts and
    /// starts, the new index and value arrays (64-bit indices at most); `None` where it does
    /// not apply.
    pub(crate) fn compressed_matrix_convert_peak(&self, target: &Format) -> Option<u128> {
        let (_, to) = self.compressed_matrix_conversion(target)?;
        let (rows, e) = (self.shape[to] as u128 + 1, self.values.len() as u128);
        Some(rows * 16 + e * (8 + std::mem::size_of::<T>() as u128))
    }
}

/// Bytes that building an `outer × inner` CSR (or CSC) matrix of `entries` components from a
/// coordinate list allocates, at most, besides the list: the row starts, the entries placed
/// by row, the column indices and the values (both in their final widths), the final row
/// starts. See [`Tensor::build_peak`].
pub(crate) fn compressed_matrix_peak<T: Value>(outer: usize, inner: usize, entries: usize) -> u128 {
    let (rows, e) = (outer as u128 + 1, entries as u128);
    let index = |n: u128, bound: u128| n * if bound <= u32::MAX as u128 + 1 { 4 } else { 8 };
    rows * 8
        + e * std::mem::size_of::<(usize, T)>() as u128
        + index(e, inner as u128)
        + e * std::mem::size_of::<T>() as u128
        + index(rows, e + 1)
}

/// `Some(d)` for a CSR-like (`d` outer) format: where [`compressed_matrix_peak`] applies.
pub(crate) fn compressed_matrix_outer(format: &Format) -> Option<usize> {
    outer_dim(format)
}

/// An index type the merge writes: 32 bits, or `usize` narrowed afterwards where it fits.
trait Narrow: Copy {
    fn from_usize(v: usize) -> Self;
    fn indices(v: Vec<Self>) -> Indices;
}

impl Narrow for u32 {
    fn from_usize(v: usize) -> Self {
        v as u32
    }
    fn indices(v: Vec<Self>) -> Indices {
        Indices::U32(v)
    }
}

impl Narrow for usize {
    fn from_usize(v: usize) -> Self {
        v
    }
    fn indices(v: Vec<Self>) -> Indices {
        Indices::from_usize(v)
    }
}

/// The entries placed row by row: row `r` is `entries[pos[r - 1]..pos[r]]` (from 0 for the
/// first).
struct Rows<'a, T> {
    pos: &'a [usize],
    entries: &'a mut [(usize, T)],
    outer: usize,
    inner: usize,
    duplicates: Duplicates,
}

impl<T: Value> Rows<'_, T> {
    /// Each row sorted by column (stable), its equal columns summed (or refused): the final
    /// `pos`, `crd` and values.
    fn merge<P: Narrow, C: Narrow>(self) -> Result<(Indices, Indices, Vec<T>)> {
        let n_outer = self.pos.len() - 1;
        let mut crd: Vec<C> = Vec::with_capacity(self.entries.len());
        let mut values = nm_runtime::memory::huge_vec(self.entries.len())?;
        let mut new_pos: Vec<P> = Vec::with_capacity(n_outer + 1);
        new_pos.push(P::from_usize(0));
        let mut row_start = 0;
        for r in 0..n_outer {
            let row = &mut self.entries[row_start..self.pos[r]];
            row_start = self.pos[r];
            if !row.windows(2).all(|w| w[0].0 <= w[1].0) {
                row.sort_by_key(|e| e.0);
            }
            let first = crd.len();
            let mut last = None;
            for &(c, v) in row.iter() {
                if crd.len() > first && last == Some(c) {
                    if self.duplicates == Duplicates::Reject {
                        let mut coordinates = vec![0; 2];
                        (coordinates[self.outer], coordinates[self.inner]) = (r, c);
                        return Err(TensorError::DuplicateEntry { coordinates });
                    }
                    *values.last_mut().expect("a value per coordinate") += v;
                } else {
                    crd.push(C::from_usize(c));
                    values.push(v);
                    last = Some(c);
                }
            }
            new_pos.push(P::from_usize(crd.len()));
        }
        Ok((P::indices(new_pos), C::indices(crd), values))
    }
}

fn widen(indices: &Indices) -> Vec<u64> {
    indices.to_usize().into_iter().map(|v| v as u64).collect()
}

/// An index type of the arrays: `u32` or `u64`.
trait Index: Copy + Default {
    fn to(self) -> usize;
    fn from(v: usize) -> Self;
}

macro_rules! index {
    ($($t:ty),*) => {$(
        impl Index for $t {
            #[inline]
            fn to(self) -> usize {
                self as usize
            }
            #[inline]
            fn from(v: usize) -> Self {
                v as $t
            }
        }
    )*};
}
index!(u32, u64);

/// New `pos`, `crd` and values: transposed (count per inner coordinate, prefix sums, stable
/// scatter; scanning the source in outer order leaves each new row sorted) or copied, and in
/// both cases without explicit zeros.
fn rebuild<I: Index, O: Index, T: Value>(
    pos: &[I],
    crd: &[I],
    values: &[T],
    outer: usize,
    new_outer: usize,
    transpose: bool,
) -> (Vec<O>, Vec<O>, Vec<T>) {
    // Checking every value costs a second stream through memory; most matrices store no zeros.
    if values.contains(&T::ZERO) {
        rebuild_with::<I, O, T, true>(pos, crd, values, outer, new_outer, transpose)
    } else {
        rebuild_with::<I, O, T, false>(pos, crd, values, outer, new_outer, transpose)
    }
}

fn rebuild_with<I: Index, O: Index, T: Value, const DROP_ZEROS: bool>(
    pos: &[I],
    crd: &[I],
    values: &[T],
    outer: usize,
    new_outer: usize,
    transpose: bool,
) -> (Vec<O>, Vec<O>, Vec<T>) {
    if !transpose {
        let mut new_pos = Vec::with_capacity(outer + 1);
        let mut new_crd = Vec::with_capacity(crd.len());
        let mut new_values = Vec::with_capacity(crd.len());
        new_pos.push(O::from(0));
        for i in 0..outer {
            for q in pos[i].to()..pos[i + 1].to() {
                if !DROP_ZEROS || values[q] != T::ZERO {
                    new_crd.push(O::from(crd[q].to()));
                    new_values.push(values[q]);
                }
            }
            new_pos.push(O::from(new_crd.len()));
        }
        return (new_pos, new_crd, new_values);
    }
    let mut count = vec![0usize; new_outer + 1];
    for (q, &j) in crd.iter().enumerate() {
        if !DROP_ZEROS || values[q] != T::ZERO {
            count[j.to() + 1] += 1;
        }
    }
    for j in 0..new_outer {
        count[j + 1] += count[j];
    }
    let nnz = count[new_outer];
    let new_pos: Vec<O> = count.iter().map(|&c| O::from(c)).collect();
    let mut new_crd = vec![O::default(); nnz];
    let mut new_values = vec![T::ZERO; nnz];
    for i in 0..outer {
        let (lo, hi) = (pos[i].to(), pos[i + 1].to());
        let row = O::from(i);
        for (&j, &v) in crd[lo..hi].iter().zip(&values[lo..hi]) {
            if DROP_ZEROS && v == T::ZERO {
                continue;
            }
            let slot = &mut count[j.to()];
            let at = *slot;
            new_crd[at] = row;
            new_values[at] = v;
            *slot = at + 1;
        }
    }
    (new_pos, new_crd, new_values)
}

#[cfg(test)]
mod tests {
    use crate::{CoordinateList, Duplicates, Format, Tensor, TensorError};

    #[test]
    fn building_csr_and_csc_matches_the_general_builder() {
        use crate::generate::{Values, uniform};
        for seed in 0..20u64 {
            // Duplicates on purpose: the same list twice, the second half shuffled.
            let mut list = uniform::<f64>(&[13, 9], 0.3, Values::Uniform, seed);
            let n = list.len();
            for e in (0..n).rev() {
                let coords = list.entry(e);
                list.push(&coords, list.values[e] * 0.5);
            }
            for format in [Format::csr(), Format::csc()] {
                let fast =
                    Tensor::from_coordinates_compressed_matrix(&list, &format, Duplicates::Sum).unwrap().unwrap();
                // The general builder, reached through a format the fast path does not match.
                let coo = Tensor::from_coordinates(&list, &Format::coo(2), Duplicates::Sum).unwrap();
                let general = crate::build::build_general(&coo.to_coordinates(), &format).unwrap();
                assert_eq!(fast, general, "seed {seed}");
                let e = Tensor::from_coordinates_compressed_matrix(&list, &format, Duplicates::Reject)
                    .unwrap()
                    .unwrap_err();
                assert!(matches!(e, TensorError::DuplicateEntry { .. }));
            }
        }
    }

    #[test]
    fn a_dense_array_into_a_dense_format_matches_the_general_builder() {
        for shape in [vec![7usize], vec![4, 5], vec![2, 3, 4], vec![0, 3], vec![3, 0]] {
            let len: usize = shape.iter().product();
            let data: Vec<f64> = (0..len).map(|q| if q % 3 == 0 { 0.0 } else { q as f64 - 4.5 }).collect();
            let format = Format::dense(shape.len());
            let fast = Tensor::from_dense(&shape, &data, &format).unwrap();
            let mut list = CoordinateList::new(shape.clone());
            for (q, &v) in data.iter().enumerate() {
                let mut coords = vec![0; shape.len()];
                let mut rest = q;
                for d in (0..shape.len()).rev() {
                    coords[d] = rest % shape[d];
                    rest /= shape[d];
                }
                if v != 0.0 {
                    list.push(&coords, v);
                }
            }
            assert_eq!(fast, crate::build::build_general(&list, &format).unwrap(), "{shape:?}");
            assert_eq!(fast.to_dense().unwrap(), data);
        }
        // A transposed dense format still goes through the coordinates.
        let cm = Format::parse("dd:1,0", 2).unwrap();
        let t = Tensor::from_dense(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &cm).unwrap();
        assert_eq!(t.values(), &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    }

    #[test]
    fn explicit_zeros_are_dropped_and_rows_stay_sorted() {
        let mut list = CoordinateList::new(vec![3, 3]);
        for (i, j, v) in [(0, 2, 1.0f64), (1, 0, 0.0), (2, 0, 3.0), (2, 2, 4.0), (0, 0, 5.0)] {
            list.push(&[i, j], v);
        }
        let csr = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Reject).unwrap();
        assert_eq!(csr.stored_len(), 5);
        let csc = csr.convert(&Format::csc()).unwrap();
        assert_eq!(csc.stored_len(), 4);
        assert_eq!(csc.to_dense().unwrap(), csr.to_dense().unwrap());
        assert_eq!(csr.convert(&Format::csr()).unwrap().stored_len(), 4);
        // The same result as the general builder gives from the nonzeros.
        list.values[1] = 0.0;
        let nonzeros = CoordinateList {
            shape: list.shape.clone(),
            coords: vec![vec![0, 2, 2, 0], vec![2, 0, 2, 0]],
            values: vec![1.0, 3.0, 4.0, 5.0],
        };
        assert_eq!(csc, Tensor::from_coordinates(&nonzeros, &Format::csc(), Duplicates::Reject).unwrap());
    }
}
