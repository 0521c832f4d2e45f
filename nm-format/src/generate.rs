//! Seeded random tensors for tests and benchmarks. The same seed gives the same tensor on
//! every machine (PCG64, no platform-dependent state).

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::build::CoordinateList;
use crate::value::Value;

/// How values are drawn. Never zero, so generated components are all nonzeros.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Values {
    /// Uniform in `[-1, 1)`, zero excluded.
    Uniform,
    /// Integers in `-k..=k` without 0: sums and products are exact in floating point, so kernels
    /// can be compared with `==`.
    SmallIntegers(i32),
    /// Every value 1 (taco's `u` fill).
    Ones,
}

impl Values {
    fn draw<T: Value>(self, rng: &mut Pcg64Mcg) -> T {
        match self {
            Values::Uniform => loop {
                let v: f64 = rng.random_range(-1.0..1.0);
                if v != 0.0 {
                    return T::from_f64(v);
                }
            },
            Values::Ones => T::ONE,
            Values::SmallIntegers(k) => {
                let k = k.max(1);
                let v = rng.random_range(1..=k);
                T::from_f64(if rng.random::<bool>() { v as f64 } else { -(v as f64) })
            }
        }
    }
}

fn rng(seed: u64) -> Pcg64Mcg {
    Pcg64Mcg::seed_from_u64(seed)
}

/// Each element of `shape` nonzero independently with probability about `density`; exactly
/// `round(density · size)` distinct components, in row-major order.
pub fn uniform<T: Value>(shape: &[usize], density: f64, values: Values, seed: u64) -> CoordinateList<T> {
    let mut r = rng(seed);
    let total: usize = shape.iter().product();
    let target = ((density.clamp(0.0, 1.0) * total as f64).round() as usize).min(total);
    let mut linear: Vec<usize> = if target * 3 > total {
        // Dense enough: choose by a partial Fisher-Yates shuffle of all positions.
        let mut all: Vec<usize> = (0..total).collect();
        for i in 0..target {
            let j = r.random_range(i..total);
            all.swap(i, j);
        }
        all.truncate(target);
        all
    } else {
        let mut picked = Vec::with_capacity(target);
        while picked.len() < target {
            while picked.len() < target + target / 8 + 1 {
                picked.push(r.random_range(0..total));
            }
            picked.sort_unstable();
            picked.dedup();
            if picked.len() > target {
                // Drop a random surplus so the survivors stay uniform.
                while picked.len() > target {
                    let i = r.random_range(0..picked.len());
                    picked.swap_remove(i);
                }
            }
        }
        picked
    };
    linear.sort_unstable();
    let mut list = CoordinateList::new(shape.to_vec());
    let mut coords = vec![0; shape.len()];
    for x in linear {
        let mut rest = x;
        for d in (0..shape.len()).rev() {
            coords[d] = rest % shape[d];
            rest /= shape[d];
        }
        list.push(&coords, values.draw(&mut r));
    }
    list
}

/// An `n×n` banded matrix: every component with `|i - j| <= half_width` is nonzero.
pub fn banded<T: Value>(n: usize, half_width: usize, values: Values, seed: u64) -> CoordinateList<T> {
    let mut r = rng(seed);
    let mut list = CoordinateList::new(vec![n, n]);
    for i in 0..n {
        for j in i.saturating_sub(half_width)..(i + half_width + 1).min(n) {
            list.push(&[i, j], values.draw(&mut r));
        }
    }
    list
}

/// A `rows×cols` matrix whose row lengths follow a power law (row `i` of a random permutation
/// gets about `c / (i+1)^exponent` nonzeros, scaled to an average of `avg_per_row`), with
/// columns uniform in each row: the skew of social and web graphs.
pub fn power_law_rows<T: Value>(
    rows: usize,
    cols: usize,
    avg_per_row: f64,
    exponent: f64,
    values: Values,
    seed: u64,
) -> CoordinateList<T> {
    let mut r = rng(seed);
    let weights: Vec<f64> = (0..rows).map(|i| 1.0 / ((i + 1) as f64).powf(exponent)).collect();
    let scale = avg_per_row * rows as f64 / weights.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    let mut order: Vec<usize> = (0..rows).collect();
    for i in (1..rows).rev() {
        order.swap(i, r.random_range(0..=i));
    }
    let mut list = CoordinateList::new(vec![rows, cols]);
    let mut lengths = vec![0usize; rows];
    for (rank, &row) in order.iter().enumerate() {
        lengths[row] = ((weights[rank] * scale).round() as usize).clamp(usize::from(cols > 0), cols);
    }
    for (row, &len) in lengths.iter().enumerate() {
        let picked = uniform::<T>(&[cols], len as f64 / cols.max(1) as f64, values, r.random());
        for (e, &c) in picked.coords[0].iter().enumerate() {
            list.push(&[row, c], picked.values[e]);
        }
    }
    list
}

/// A `k×n` matrix that fits `nm(N,M,L)`: in every window of `m` rows and group of `l` columns,
/// exactly `min(N, rows in the window)` rows are nonzero across the group, chosen at random.
pub fn nm_vectorwise<T: Value>(
    k: usize,
    n: usize,
    keep: usize,
    m: usize,
    l: usize,
    values: Values,
    seed: u64,
) -> CoordinateList<T> {
    let mut r = rng(seed);
    let mut list = CoordinateList::new(vec![k, n]);
    let (m, l) = (m.max(1), l.max(1));
    for w in 0..k.div_ceil(m) {
        let rows_here = m.min(k - w * m);
        for g in 0..n.div_ceil(l) {
            for row in choose(&mut r, rows_here, keep.min(rows_here)) {
                for c in g * l..(g * l + l).min(n) {
                    list.push(&[w * m + row, c], values.draw(&mut r));
                }
            }
        }
    }
    list.sort_row_major();
    list
}

/// A `rows×cols` matrix with `keep` nonzeros in every block of `m` columns of every row
/// (element-wise N:M along the last dimension; `nv24` is `keep = 2, m = 4`).
pub fn nm_elementwise<T: Value>(
    rows: usize,
    cols: usize,
    keep: usize,
    m: usize,
    values: Values,
    seed: u64,
) -> CoordinateList<T> {
    let mut r = rng(seed);
    let mut list = CoordinateList::new(vec![rows, cols]);
    let m = m.max(1);
    for i in 0..rows {
        for b in 0..cols.div_ceil(m) {
            let here = m.min(cols - b * m);
            for c in choose(&mut r, here, keep.min(here)) {
                list.push(&[i, b * m + c], values.draw(&mut r));
            }
        }
    }
    list
}

/// `count` distinct numbers of `0..n`, sorted.
fn choose(r: &mut Pcg64Mcg, n: usize, count: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    for i in 0..count {
        let j = r.random_range(i..n);
        all.swap(i, j);
    }
    all.truncate(count);
    all.sort_unstable();
    all
}

/// A `rows×cols` matrix of whole slices: `fraction` of the rows (`by_rows`) or of the columns,
/// chosen at random, every component of them nonzero (taco's `l` and `v` fills).
pub fn slices<T: Value>(
    rows: usize,
    cols: usize,
    fraction: f64,
    by_rows: bool,
    values: Values,
    seed: u64,
) -> CoordinateList<T> {
    let mut r = rng(seed);
    let n = if by_rows { rows } else { cols };
    let count = ((fraction.clamp(0.0, 1.0) * n as f64).ceil() as usize).min(n);
    let mut chosen: Vec<usize> = (0..n).collect();
    for i in 0..count {
        let j = r.random_range(i..n);
        chosen.swap(i, j);
    }
    chosen.truncate(count);
    chosen.sort_unstable();
    let mut list = CoordinateList::new(vec![rows, cols]);
    if by_rows {
        for &i in &chosen {
            for j in 0..cols {
                list.push(&[i, j], values.draw(&mut r));
            }
        }
    } else {
        for i in 0..rows {
            for &j in &chosen {
                list.push(&[i, j], values.draw(&mut r));
            }
        }
    }
    list
}

/// The symmetric pattern of a 1-D finite-element matrix with a second neighbour three away
/// (taco's `f` fill): the diagonal, `(i, i±1)` and `(i, i±3)`, a mirrored pair sharing its
/// value.
pub fn fem<T: Value>(rows: usize, cols: usize, values: Values, seed: u64) -> CoordinateList<T> {
    let mut r = rng(seed);
    let mut list = CoordinateList::new(vec![rows, cols]);
    let n = rows.min(cols);
    for i in 0..n {
        list.push(&[i, i], values.draw(&mut r));
        for offset in [1, 3] {
            if i + offset < n {
                let v = values.draw(&mut r);
                list.push(&[i + offset, i], v);
                list.push(&[i, i + offset], v);
            }
        }
    }
    list
}

/// [`fem`]'s pattern on a matrix of `block×block` blocks, each entry of it a whole block whose
/// row `b` holds the entry's value divided by `b + 1` (taco's `b` fill, blocks of 4).
pub fn blocked<T: Value>(rows: usize, cols: usize, block: usize, values: Values, seed: u64) -> CoordinateList<T> {
    let block = block.max(1);
    let base = fem::<T>(rows / block, cols / block, values, seed);
    let mut list = CoordinateList::new(vec![rows, cols]);
    for e in 0..base.len() {
        let (bi, bj, v) = (base.coords[0][e], base.coords[1][e], base.values[e]);
        for i in 0..block {
            for j in 0..block {
                list.push(&[bi * block + i, bj * block + j], v * T::from_f64(1.0 / (i + 1) as f64));
            }
        }
    }
    list
}
