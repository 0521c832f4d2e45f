//! Test data shared by the GPU and the emulated-kernel tests.

use nm_format::{Format, Tensor};

/// A k×n matrix in nm(N,M,L) with small integer values, seeded.
pub fn random_nm(k: usize, n: usize, nm: (u32, u32, usize), seed: u64) -> Tensor<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (keep, win, l) = (nm.0 as usize, nm.1 as usize, nm.2);
    let mut dense = vec![0f32; k * n];
    for g in 0..n.div_ceil(l) {
        for w in 0..k.div_ceil(win) {
            let mut rows: Vec<usize> = (0..win).collect();
            for i in (1..win).rev() {
                rows.swap(i, next() as usize % (i + 1));
            }
            for &r in rows.iter().take(keep) {
                for col in g * l..((g + 1) * l).min(n) {
                    if w * win + r < k {
                        dense[(w * win + r) * n + col] = (next() % 9) as f32 - 4.0;
                    }
                }
            }
        }
    }
    Tensor::from_dense(&[k, n], &dense, &Format::nm(nm.0, nm.1, nm.2).unwrap()).unwrap()
}

/// `C = A·B` by the CPU N:M kernel (nm-spmm, itself checked against a dense product).
pub fn cpu_reference(a: &[f32], m: usize, b: &Tensor<f32>) -> Vec<f32> {
    let k = b.shape()[0];
    let at = Tensor::from_dense(&[m, k], a, &Format::dense(2)).unwrap();
    nm_spmm::multiply(&at, &nm_spmm::NmMatrix::new(b).unwrap(), 1).unwrap().values().to_vec()
}

/// An m×k matrix in nv24 with small integers: chunks of 4 columns keep 2, 1 or 0 entries at
/// varying offsets (so every metadata pattern and the empty chunk occur), seeded.
pub fn random_nv24(m: usize, k: usize, seed: u64) -> Tensor<f32> {
    let mut dense = vec![0f32; m * k];
    for r in 0..m {
        for chunk in 0..k.div_ceil(4) {
            let h = (r as u64 * 31 + chunk as u64 * 17 + seed * 7) as usize;
            let first = (h / 3) % 4;
            let offsets = [first, (first + 1 + (h / 12) % 3) % 4];
            for (t, &offset) in offsets.iter().take(h % 3).enumerate() {
                let c = chunk * 4 + offset;
                if c < k {
                    dense[r * k + c] = ((h / 5 + t) % 9) as f32 - 4.0;
                }
            }
        }
    }
    Tensor::from_dense(&[m, k], &dense, &Format::nv24(2)).unwrap()
}
