//! A matrix in `nv24` (element-wise 2:4 along rows) compressed the way the sparse tensor cores
//! read it: the role of cuSPARSELt's prune-and-compress step, done on the host once per A.
//! The layout is defined in `kernels/nv24_spmm_sp.cu`; [`Nv24Sp::expand`] reads it back, so a
//! test can hold the two descriptions against each other without a GPU.

use nm_format::{Format, LevelStorage, Tensor};

use crate::error::{CudaError, Result};
use crate::gpu::{from_bf16, to_bf16};

/// Metadata of a 4-column chunk with nothing kept: offsets 0 and 1 over zero values (the two
/// offsets must differ and increase; `0b0000` is undefined for `mma.sp`).
const EMPTY_CHUNK: u16 = 0b0100;

/// `A` (`m×k`, nv24) as the `nv24_spmm_sp` kernel reads it: values rounded to bf16. Made only
/// by [`Nv24Sp::compress`], so its arrays always have the lengths the kernel reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nv24Sp {
    pub(crate) m: usize,
    pub(crate) k: usize,
    /// Compressed columns per row, `⌈k/32⌉·16`.
    pub(crate) kc: usize,
    /// 16-row tiles, `⌈m/16⌉`.
    pub(crate) row_tiles: usize,
    /// k32 slices, `⌈k/32⌉` (the kernel's steps).
    pub(crate) steps: usize,
    /// `m × kc` bf16 bits, row-major: two kept values per 4 columns, in column order.
    pub(crate) values: Vec<u16>,
    /// `steps × row_tiles × 16` metadata words in the order the lanes load them.
    pub(crate) meta: Vec<u32>,
}

impl Nv24Sp {
    /// Compresses `a`, which must be in `nv24`. Two kept entries of a block with the same
    /// offset are an error (`mma.sp` cannot express them); values are rounded to bf16.
    pub fn compress(a: &Tensor<f32>) -> Result<Nv24Sp> {
        if a.format() != &Format::nv24(2) {
            return Err(CudaError::Unsupported(format!(
                "the 2:4 sparse tensor-core kernel takes A in nv24, not {}",
                a.format()
            )));
        }
        let (m, k) = (a.shape()[0], a.shape()[1]);
        let LevelStorage::Structured { size, meta } = &a.levels()[1] else {
            return Err(CudaError::Unsupported("nv24 without a structured level".into()));
        };
        let (blocks, steps) = (size / 4, k.div_ceil(32));
        let (kc, row_tiles) = (steps * 16, m.div_ceil(16));
        let values = a.values();
        let mut out = vec![0u16; m * kc];
        // Each row's 16-bit metadata per 16 columns, rows padded to whole tiles.
        let halves = 2 * steps;
        let mut meta16 = vec![0u16; row_tiles * 16 * halves];
        for r in 0..row_tiles * 16 {
            for chunk in 0..steps * 8 {
                let mut nibble = EMPTY_CHUNK;
                if r < m && chunk < blocks {
                    let q = (r * blocks + chunk) * 2;
                    let (mut lo, mut hi) = (meta.get(q) as usize, meta.get(q + 1) as usize);
                    let (mut vlo, mut vhi) = (values[q], values[q + 1]);
                    if lo == hi {
                        return Err(CudaError::Unsupported(format!(
                            "nv24 row {r}, columns {}..{}: both kept entries at offset {lo}",
                            chunk * 4,
                            chunk * 4 + 4
                        )));
                    }
                    if lo > hi {
                        (lo, hi, vlo, vhi) = (hi, lo, vhi, vlo);
                    }
                    // Positions past k (the level pads k to whole blocks) hold no entry.
                    let keep = |offset: usize, v: f32| if chunk * 4 + offset < k { v } else { 0.0 };
                    out[r * kc + 2 * chunk] = to_bf16(keep(lo, vlo));
                    out[r * kc + 2 * chunk + 1] = to_bf16(keep(hi, vhi));
                    nibble = (lo | hi << 2) as u16;
                }
                meta16[r * halves + chunk / 4] |= nibble << (4 * (chunk % 4));
            }
        }
        let mut words = vec![0u32; steps * row_tiles * 16];
        for s in 0..steps {
            for rt in 0..row_tiles {
                for g in 0..8 {
                    for p in 0..2 {
                        let half = |r: usize| meta16[r * halves + 2 * s + p] as u32;
                        words[(s * row_tiles + rt) * 16 + 2 * g + p] = half(rt * 16 + g) | half(rt * 16 + g + 8) << 16;
                    }
                }
            }
        }
        Ok(Nv24Sp { m, k, kc, row_tiles, steps, values: out, meta: words })
    }

    /// A's shape `[m, k]`.
    pub fn shape(&self) -> [usize; 2] {
        [self.m, self.k]
    }

    /// Compressed columns per row, `⌈k/32⌉·16`.
    pub fn kc(&self) -> usize {
        self.kc
    }

    /// 16-row tiles, `⌈m/16⌉`.
    pub fn row_tiles(&self) -> usize {
        self.row_tiles
    }

    /// k32 slices, `⌈k/32⌉`: the kernel's steps.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// `m × kc` bf16 bits, row-major: two kept values per 4 columns, in column order.
    pub fn values(&self) -> &[u16] {
        &self.values
    }

    /// `steps × row_tiles × 16` metadata words in the order the lanes load them.
    pub fn meta(&self) -> &[u32] {
        &self.meta
    }

    /// The dense `m×k` matrix (row-major) the compressed form stands for, read through the
    /// documented layout.
    pub fn expand(&self) -> Vec<f32> {
        let mut dense = vec![0f32; self.m * self.k];
        for r in 0..self.m {
            let (rt, g, high) = (r / 16, r % 8, (r % 16) / 8);
            for c in 0..self.kc {
                let (chunk, s) = (c / 2, c / 16);
                let p = (chunk / 4) % 2;
                let word = self.meta[(s * self.row_tiles + rt) * 16 + 2 * g + p] >> (16 * high);
                let offset = (word >> (4 * (chunk % 4) + 2 * (c % 2))) & 3;
                let column = chunk * 4 + offset as usize;
                // (`compress` stores zeros past k.)
                if column < self.k {
                    dense[r * self.k + column] += from_bf16(self.values[r * self.kc + c]);
                }
            }
        }
        dense
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An m×k matrix with at most 2 nonzeros per 4 columns of each row (some chunks with 0 or
    /// 1), small integers (exact in bf16).
    fn two_of_four(m: usize, k: usize) -> Vec<f32> {
        let mut dense = vec![0f32; m * k];
        for r in 0..m {
            for chunk in 0..k.div_ceil(4) {
                let kept = (r * 7 + chunk * 3) % 4; // 0..3 kept entries, the 3s become 2
                let first = (r + chunk) % 4;
                for t in 0..kept.min(2) {
                    let c = chunk * 4 + (first + 2 * t + t * (r % 2)) % 4;
                    if c < k {
                        dense[r * k + c] = ((r * 5 + c) % 9) as f32 - 4.0;
                    }
                }
            }
        }
        dense
    }

    #[test]
    fn compression_round_trips_through_the_documented_layout() {
        for (m, k) in [(16, 32), (1, 4), (17, 33), (40, 70), (33, 130), (5, 3)] {
            let dense = two_of_four(m, k);
            let a = Tensor::from_dense(&[m, k], &dense, &Format::nv24(2)).unwrap();
            let sp = Nv24Sp::compress(&a).unwrap();
            assert_eq!((sp.kc, sp.steps, sp.row_tiles), (k.div_ceil(32) * 16, k.div_ceil(32), m.div_ceil(16)));
            assert_eq!(sp.values.len(), m * sp.kc);
            assert_eq!(sp.meta.len(), sp.steps * sp.row_tiles * 16);
            assert_eq!(sp.expand(), dense, "{m}×{k}");
            // Every chunk's offsets increase (valid for mma.sp and its ordered variant).
            for &w in &sp.meta {
                for nibble in 0..8 {
                    let bits = w >> (4 * nibble);
                    assert!(bits & 3 < (bits >> 2) & 3, "{m}×{k}: metadata word {w:08x}");
                }
            }
        }
    }

    #[test]
    fn rows_and_columns_past_the_matrix_carry_valid_empty_chunks() {
        let a = Tensor::from_dense(&[1, 4], &[0.0, 3.0, 0.0, 5.0], &Format::nv24(2)).unwrap();
        let sp = Nv24Sp::compress(&a).unwrap();
        // Row 0, chunk 0 keeps offsets 1 and 3: 0b1101; the 7 other chunks are empty (0b0100).
        assert_eq!(sp.meta[0] & 0xffff, 0x4444_444d & 0xffff);
        assert_eq!(sp.meta[1] & 0xffff, 0x4444);
        // Row 8 (past m = 1) in the high half: empty everywhere.
        assert_eq!(sp.meta[0] >> 16, 0x4444);
        assert_eq!(&sp.values[..2], &[to_bf16(3.0), to_bf16(5.0)]);
        assert!(sp.values[2..].iter().all(|&v| v == 0));
    }

    #[test]
    fn other_formats_are_refused() {
        let a = Tensor::from_dense(&[2, 4], &[1.0; 8], &Format::dense(2)).unwrap();
        assert!(matches!(Nv24Sp::compress(&a), Err(CudaError::Unsupported(m)) if m.contains("nv24")));
    }
}
