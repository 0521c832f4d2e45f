//! Host-side checks of the plan: shapes, tiles and the launch limits, without a device.

use super::*;
use nm_format::{Format, Tensor};

/// A k×n f32 matrix pruned into nm(N,M,L) (small integers, so sums are exact).
fn random_nm(k: usize, n: usize, nm: (u32, u32, usize), seed: u64) -> Tensor<f32> {
    let dense: Vec<f32> = (0..k * n).map(|i| ((i as u64 * 2_654_435_761 + seed * 97) % 9) as f32 - 4.0).collect();
    let whole = Tensor::from_dense(&[k, n], &dense, &Format::dense(2)).unwrap();
    whole.prune(&Format::nm(nm.0, nm.1, nm.2).unwrap()).unwrap().0
}

/// Runs the f32 kernel's data flow on the host: the same tiles, steps and index tables,
/// one block column at a time.
fn through_tables(kernel: &F32Kernel, b: &NmParts<f32>, a: &[f32], m: usize, k: usize) -> Vec<f64> {
    let t = tables(kernel, b);
    let (w, np, n) = (b.rows(), b.cols(), b.shape[1]);
    let (ns, gmax, l) = (kernel.tile.ns, kernel.gmax, b.l);
    let steps = kernel.steps(w);
    let mut c = vec![0f64; m * n];
    for bx in 0..n.div_ceil(ns) {
        let n0 = bx * ns;
        for step in 0..steps {
            let k0 = step * kernel.ks;
            // Which k the A tile's row q holds (None: a zero row).
            let row_k = |q: usize| -> Option<usize> {
                let kk = if kernel.packed {
                    let v = t.col_info[(bx * steps + step) * kernel.arows + q];
                    if v < 0 {
                        return None;
                    }
                    v as usize
                } else {
                    q
                };
                (k0 + kk < k).then_some(k0 + kk)
            };
            for r in step * kernel.ws..((step + 1) * kernel.ws).min(w) {
                for col in n0..(n0 + ns).min(n).min(np) {
                    let slot = col / l - n0 / l;
                    let q = t.dtab[(bx * w + r) * gmax + slot] as usize;
                    assert!(q < kernel.arows, "dtab points outside the A tile");
                    if let Some(kk) = row_k(q) {
                        for i in 0..m {
                            c[i * n + col] += a[i * k + kk] as f64 * b.b_prime[r * np + col] as f64;
                        }
                    }
                }
            }
        }
    }
    c
}

fn dense_product(a: &[f32], b: &Tensor<f32>, m: usize, k: usize) -> Vec<f64> {
    let n = b.shape()[1];
    let bd = b.to_dense().unwrap();
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for kk in 0..k {
            for j in 0..n {
                c[i * n + j] += a[i * k + kk] as f64 * bd[kk * n + j] as f64;
            }
        }
    }
    c
}

#[test]
fn index_tables_reproduce_the_dense_product() {
    let cases: &[((u32, u32, usize), usize, usize)] = &[
        ((2, 4, 32), 70, 150),
        ((1, 8, 32), 200, 130),
        ((3, 8, 8), 64, 128),
        ((1, 2, 1), 33, 67),
        ((4, 16, 4), 100, 90),
        ((16, 32, 16), 96, 64),
        ((32, 32, 32), 64, 40),
        ((2, 8, 24), 50, 100),
        ((1, 4, 160), 41, 170),
    ];
    let m = 5;
    for (seed, &(nm, k, n)) in cases.iter().enumerate() {
        let b = random_nm(k, n, nm, seed as u64 + 11);
        let parts = b.nm_parts().unwrap();
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 + seed) % 11) as f32 - 5.0).collect();
        let want = dense_product(&a, &b, m, k);
        let nmu = (nm.0 as usize, nm.1 as usize, nm.2);
        for version in [Version::V1, Version::V2, Version::V3] {
            for size in [TileSize::Small, TileSize::Medium, TileSize::Large] {
                let kernel = F32Kernel::new(version, size.tile(), nmu, k);
                let got = through_tables(&kernel, &parts, &a, m, k);
                assert_eq!(got, want, "{nm:?} k={k} n={n} {version:?} {size:?}");
            }
        }
    }
}

#[test]
fn packing_follows_sparsity_and_shrinks_the_a_tile() {
    let t = TileSize::Large.tile();
    let dense_ish = F32Kernel::new(Version::V2, t, (4, 8, 32), 4096);
    assert!(!dense_ish.packed);
    let sparse = F32Kernel::new(Version::V2, t, (1, 8, 32), 4096);
    assert!(sparse.packed);
    assert!(sparse.arows < sparse.ks, "{sparse:?}");
    assert!(!F32Kernel::new(Version::V1, t, (1, 8, 32), 4096).packed);
    assert_eq!(sparse.ws * sparse.nm.1, sparse.ks * sparse.nm.0);
    // 2:8 (75%) is packed in the small tile only (the crossovers measured on an H100).
    assert!(!F32Kernel::new(Version::V3, t, (2, 8, 32), 4096).packed);
    assert!(F32Kernel::new(Version::V3, TileSize::Small.tile(), (2, 8, 32), 4096).packed);
}

#[test]
fn plans_fill_the_device_or_split_k() {
    let big = plan_f32(4096, 4096, 4096, (4, 8, 32), DeviceLimits::H100, Options::default()).unwrap();
    assert_eq!((big.size, big.slices, big.kernel.version), (TileSize::Large, 1, Version::V3));
    // 75% in the large tile (whole A tiles): V1, measured faster there; packed 87.5%: V3.
    for (nm, version) in [((2, 8, 32), Version::V1), ((1, 4, 32), Version::V1), ((1, 8, 32), Version::V3)] {
        let plan = plan_f32(4096, 4096, 4096, nm, DeviceLimits::H100, Options::default()).unwrap();
        assert_eq!((plan.size, plan.kernel.version), (TileSize::Large, version), "{nm:?}");
    }
    // The small tile packs 75% and stays on V3.
    let small = plan_f32(256, 4096, 4096, (2, 8, 32), DeviceLimits::H100, Options::default()).unwrap();
    assert_eq!((small.size, small.kernel.version, small.kernel.packed), (TileSize::Small, Version::V3, true));
    let skinny = plan_f32(64, 256, 11008, (2, 8, 32), DeviceLimits::H100, Options::default()).unwrap();
    assert_eq!(skinny.size, TileSize::Small);
    assert!(skinny.slices > 1, "{skinny:?}");
    assert!(skinny.slices * skinny.steps_per_slice >= skinny.kernel.steps(11008 / 8 * 2));
    let old = DeviceLimits { sms: 80, cc: (7, 0), smem_optin: 96 * 1024 };
    assert_eq!(plan_f32(1024, 1024, 1024, (2, 4, 8), old, Options::default()).unwrap().kernel.version, Version::V2);
    assert!(
        plan_f32(1024, 1024, 1024, (2, 4, 8), old, Options { version: Some(Version::V3), ..Default::default() })
            .is_err()
    );
    assert!(plan_f32(0, 4, 4, (2, 4, 8), DeviceLimits::H100, Options::default()).is_err());
}

#[test]
fn tensor_core_tiles_fit_and_refuse_short_vectors() {
    for l in [8, 16, 24, 32, 64, 128] {
        for limits in [DeviceLimits::H100, DeviceLimits::A100] {
            // Medium and small fit at every L (fewer stages and rows where groups are many).
            for size in [TileSize::Small, TileSize::Medium] {
                let k = Bf16Kernel::new(size, (2, 8, l)).unwrap().fit(limits).unwrap();
                assert!(k.shared_bytes() <= limits.smem_optin && k.stages >= 2 && k.kt >= 16, "{k:?}");
                assert_eq!((k.ms % k.wm, k.ns % k.wn, k.wn % 16, k.kt % 16), (0, 0, 0, 0));
            }
            // The large tile does wherever its 8 group slots or fewer fit; at L = 8 (16 slots) not.
            let large = Bf16Kernel::new(TileSize::Large, (2, 8, l)).unwrap().fit(limits);
            assert_eq!(large.is_ok(), l >= 16, "L = {l}: {large:?}");
            // The choice: by windows in 128×256 blocks where more than a quarter of the rows
            // are kept; else per group, two 128×128 blocks per SM where the grid has them.
            let dense = Bf16Kernel::choose(4096, 4096, (4, 8, l), limits).unwrap();
            let wide = if l % 32 == 0 { (256, 512) } else { (128, 256) };
            assert_eq!((dense.ms, dense.ns, dense.windows, dense.threads()), (128, wide.0, true, wide.1), "L = {l}");
            let big = Bf16Kernel::choose(4096, 4096, (2, 8, l), limits).unwrap();
            assert_eq!((big.ms, big.ns, big.windows, big.min_blocks, big.stages), (128, 128, false, 2, 2));
            let small = Bf16Kernel::choose(256, 4096, (1, 8, l), limits).unwrap();
            assert_eq!((small.ms, small.windows), (64, false));
            for nm in [(4, 8, l), (2, 8, l), (1, 8, l), (32, 32, l)] {
                for (m, n) in [(4096, 4096), (256, 4096), (1, 8)] {
                    let k = Bf16Kernel::choose(m, n, nm, limits).unwrap();
                    assert!(k.shared_bytes() <= limits.smem_optin, "{k:?}");
                    assert!(k.threads() * 128 <= 65536 || k.min_blocks == 1, "{k:?}");
                }
            }
        }
    }
    // One full stage of the 128×128 tile at L = 32: 4 slots × 32 rows × 136 + 32 × 136, bf16.
    let k = Bf16Kernel::new(TileSize::Medium, (2, 8, 32)).unwrap();
    assert_eq!(k.shared_bytes(), 3 * 2 * (4 * 32 * 136 + 32 * 136));
    assert!(Bf16Kernel::new(TileSize::Medium, (2, 4, 4)).is_err());
    assert!(Bf16Kernel::new(TileSize::Small, (2, 4, 1)).is_err());
}

#[test]
fn window_staging_covers_whole_windows_of_128_rows_and_needs_exactly_the_kept_rows() {
    let kt = |n, m| Bf16Kernel::new(TileSize::Medium, (n, m, 32)).unwrap().windowed().kt;
    let want = [((2, 8), 32), ((1, 8), 16), ((3, 8), 48), ((4, 8), 64), ((32, 32), 128), ((16, 32), 64), ((1, 2), 64)];
    for ((n, m), rows) in want {
        assert_eq!(kt(n, m), rows, "{n}:{m}");
    }
    let k = Bf16Kernel::new(TileSize::Medium, (3, 8, 32)).unwrap().windowed();
    assert_eq!(k.span(), 128);
    assert_eq!(k.shared_bytes(), 3 * 2 * (129 * 136 + 48 * 4 + 48 * 136));
    for limits in [DeviceLimits::H100, DeviceLimits::A100] {
        for l in [8, 24, 32] {
            for size in [TileSize::Small, TileSize::Medium, TileSize::Large] {
                let w = Bf16Kernel::new(size, (2, 8, l)).unwrap().windowed().fit(limits).unwrap();
                assert!(w.shared_bytes() <= limits.smem_optin && w.windows, "{w:?}");
            }
        }
    }
    // The mask against B itself: with every value nonzero, row kk of block column bx is
    // needed exactly where B has a kept entry in that row and one of the block's columns.
    let (kk_rows, n) = (203, 300);
    let dense: Vec<f32> = (0..kk_rows * n).map(|i| 1.0 + (i % 5) as f32).collect();
    let whole = Tensor::from_dense(&[kk_rows, n], &dense, &Format::dense(2)).unwrap();
    for nm in [(2, 8), (1, 8), (3, 8)] {
        let b = whole.prune(&Format::nm(nm.0, nm.1, 32).unwrap()).unwrap().0;
        let pruned = b.to_dense().unwrap();
        let parts = b.nm_parts().unwrap();
        let kernel = Bf16Kernel::new(TileSize::Medium, (nm.0 as usize, nm.1 as usize, 32)).unwrap().windowed();
        let (mask, words) = need_mask(&kernel, &parts.d, parts.rows(), parts.groups(), kk_rows, n);
        assert_eq!(words, (parts.rows().div_ceil(kernel.kt) * kernel.span()).div_ceil(32));
        for bx in 0..n.div_ceil(kernel.ns) {
            for row in 0..words * 32 {
                let bit = mask[bx * words + row / 32] >> (row % 32) & 1 == 1;
                let columns = bx * kernel.ns..(bx * kernel.ns + kernel.ns).min(n);
                let kept = row < kk_rows && columns.clone().any(|j| pruned[row * n + j] != 0.0);
                assert_eq!(bit, kept, "{nm:?} block column {bx}, row {row}");
            }
        }
    }
    let per_group = Bf16Kernel::new(TileSize::Medium, (2, 8, 32)).unwrap();
    assert_eq!(need_mask(&per_group, &[0; 4], 1, 4, 8, 128), (Vec::new(), 0));
}

#[test]
fn every_sparse_tensor_core_tile_fits_the_devices_shared_memory() {
    for size in [TileSize::Small, TileSize::Medium, TileSize::Large] {
        for limits in [DeviceLimits::H100, DeviceLimits::A100] {
            let k = Nv24Kernel::new(size).fit(limits);
            assert!(k.shared_bytes() <= limits.smem_optin, "{k:?}: {} bytes", k.shared_bytes());
            assert_eq!(k.threads() % 32, 0);
        }
    }
    // 4096² gives 512 blocks of 256×128: the large tile; 256×256 only 2: the small one.
    assert_eq!(Nv24Kernel::choose(4096, 4096, DeviceLimits::H100), Nv24Kernel::new(TileSize::Large));
    assert_eq!(Nv24Kernel::choose(256, 256, DeviceLimits::H100), Nv24Kernel::new(TileSize::Small));
    // The A100's shared memory takes the large tile with shorter stages.
    let a100 = Nv24Kernel::choose(4096, 4096, DeviceLimits::A100);
    assert!(a100.shared_bytes() <= DeviceLimits::A100.smem_optin && a100.kstep < 4 && a100.ms == 256, "{a100:?}");
}
