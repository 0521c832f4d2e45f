//! The NM-SpMM layout of a vector-wise `nm(N,M,L)` tensor: B′ and D.

use crate::error::{Result, TensorError};
use crate::format::Format;
use crate::storage::{LevelStorage, Metadata};
use crate::tensor::Tensor;
use crate::value::Value;

/// A `k×n` matrix in `nm(N,M,L)` laid out as in the NM-SpMM paper.
///
/// With `kp` = k rounded up to M and `np` = n rounded up to L (padding is explicit, zero):
/// - `b_prime` is row-major `(kp·N/M) × np`: row `w·N + t` holds, for every column, the value of
///   the `t`-th kept row of window `w` (for that column's group);
/// - `d` is row-major `(kp·N/M) × (np/L)`: `d[(w·N + t)·(np/L) + g]` is that kept row's offset
///   inside window `w` for column group `g`, so the matrix row is `w·M + d[..]`.
#[derive(Clone, Debug, PartialEq)]
pub struct NmParts<T> {
    /// Kept rows per window.
    pub n: u32,
    /// Window length (rows).
    pub m: u32,
    /// Vector length (columns per group).
    pub l: usize,
    /// Logical shape `[k, n]`.
    pub shape: [usize; 2],
    /// B′, row-major `(kp·N/M) × np`.
    pub b_prime: Vec<T>,
    /// D, row-major `(kp·N/M) × (np/L)`.
    pub d: Vec<u16>,
}

impl<T: Value> NmParts<T> {
    /// Rows of B′ and D: `kp·N/M`.
    pub fn rows(&self) -> usize {
        self.shape[0].div_ceil(self.m as usize) * self.n as usize
    }

    /// Columns of B′: `np`.
    pub fn cols(&self) -> usize {
        self.shape[1].div_ceil(self.l) * self.l
    }

    /// Columns of D: `np / L`.
    pub fn groups(&self) -> usize {
        self.shape[1].div_ceil(self.l)
    }
}

impl<T: Value> Tensor<T> {
    /// B′ and D of a tensor in `nm(N,M,L)` (a copy in the paper's layout).
    pub fn nm_parts(&self) -> Result<NmParts<T>> {
        let (n, m, l) = self.nm_params()?;
        let LevelStorage::Structured { meta, .. } = &self.levels[2] else { unreachable!("checked by nm_params") };
        let shape = [self.shape[0], self.shape[1]];
        let mut parts = NmParts { n, m, l, shape, b_prime: Vec::new(), d: Vec::new() };
        let (rows, cols, groups, keep) = (parts.rows(), parts.cols(), parts.groups(), n as usize);
        let windows = rows / keep;
        parts.b_prime = vec![T::ZERO; rows * cols];
        parts.d = vec![0; rows * groups];
        for w in 0..windows {
            for g in 0..groups {
                for t in 0..keep {
                    let q = (w * groups + g) * keep + t;
                    parts.d[(w * keep + t) * groups + g] = meta.get(q) as u16;
                    let src = &self.values[q * l..(q + 1) * l];
                    let row = (w * keep + t) * cols + g * l;
                    parts.b_prime[row..row + l].copy_from_slice(src);
                }
            }
        }
        Ok(parts)
    }

    /// A tensor in `nm(N,M,L)` from B′ and D, validated like [`Tensor::from_raw`].
    pub fn from_nm_parts(parts: &NmParts<T>) -> Result<Self> {
        let format = Format::nm(parts.n, parts.m, parts.l).map_err(|e| TensorError::WrongFormat {
            operation: "from_nm_parts",
            needed: "a valid nm(N,M,L)".into(),
            actual: e.to_string(),
        })?;
        let (rows, cols, groups, keep, l) = (parts.rows(), parts.cols(), parts.groups(), parts.n as usize, parts.l);
        if parts.b_prime.len() != rows * cols {
            return Err(TensorError::ValuesLength { expected: rows * cols, actual: parts.b_prime.len() });
        }
        if parts.d.len() != rows * groups {
            return Err(TensorError::MetadataLength { level: 2, expected: rows * groups, actual: parts.d.len() });
        }
        let windows = rows / keep;
        let mut offsets = vec![0u16; rows * groups];
        let mut values = vec![T::ZERO; rows * cols];
        for w in 0..windows {
            for g in 0..groups {
                for t in 0..keep {
                    let q = (w * groups + g) * keep + t;
                    offsets[q] = parts.d[(w * keep + t) * groups + g];
                    let row = (w * keep + t) * cols + g * l;
                    values[q * l..(q + 1) * l].copy_from_slice(&parts.b_prime[row..row + l]);
                }
            }
        }
        if let Some(q) = offsets.iter().position(|&o| o as u32 >= parts.m) {
            return Err(TensorError::MetadataOutOfRange {
                level: 2,
                position: q,
                value: offsets[q] as usize,
                m: parts.m,
            });
        }
        let levels = vec![
            LevelStorage::Dense { size: windows },
            LevelStorage::Dense { size: groups },
            LevelStorage::Structured { size: parts.m as usize, meta: Metadata::pack(&offsets, parts.m) },
            LevelStorage::Dense { size: l },
        ];
        Tensor::from_raw(parts.shape.to_vec(), format, levels, values)
    }

    fn nm_params(&self) -> Result<(u32, u32, usize)> {
        self.format.nm_params().ok_or_else(|| TensorError::WrongFormat {
            operation: "nm_parts",
            needed: "nm(N,M,L)".into(),
            actual: self.format.name().unwrap_or_else(|| self.format.to_string()),
        })
    }
}
