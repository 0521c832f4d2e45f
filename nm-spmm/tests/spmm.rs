//! The N:M SpMM kernels against a dense product computed here, for every N:M of the issue,
//! every L, shapes that are and are not multiples of M and L, f32 and f64, 1 and 2 threads and
//! each instruction set the machine has. Values are small integers, so every path must agree
//! exactly, fused multiply-adds or not.

use nm_format::{Format, Tensor, Value};
use nm_spmm::{Isa, Loading, NmMatrix, Real, SpmmError, spmm, spmm_with};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

fn integers<T: Value>(len: usize, rng: &mut Pcg64) -> Vec<T> {
    (0..len).map(|_| T::from_f64(rng.random_range(-4..=4) as f64)).collect()
}

/// A random `k×n` matrix pruned into `nm(N,M,L)`, and its dense form.
fn nm_matrix<T: Real>(k: usize, n: usize, keep: u32, window: u32, l: usize, rng: &mut Pcg64) -> (Tensor<T>, Vec<T>) {
    let dense = Tensor::from_dense(&[k, n], &integers::<T>(k * n, rng), &Format::dense(2)).unwrap();
    let (b, _) = dense.prune(&Format::nm(keep, window, l).unwrap()).unwrap();
    let d = b.to_dense().unwrap();
    (b, d)
}

fn reference<T: Real>(a: &[T], b: &[T], m: usize, k: usize, n: usize) -> Vec<T> {
    let mut c = vec![T::ZERO; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                c[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    c
}

fn check_all<T: Real>() {
    let mut rng = Pcg64::seed_from_u64(7);
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2, Isa::Baseline].into_iter().filter(|i| i.supported()).collect();
    for (keep, window) in [(1, 2), (2, 4), (1, 4), (2, 8), (3, 8), (1, 8), (4, 16), (16, 32)] {
        for l in [1, 4, 8, 16, 32, 3] {
            // Multiples of M and L, then ragged ones: more rows than a block, then several
            // blocks per thread (the transposed block is reused).
            let shapes = [
                (8, 2 * window as usize, 2 * l),
                (70, 3 * window as usize + 1, 2 * l + 1),
                (200, 5 * window as usize + 3, l + 2),
            ];
            for (m, k, n) in shapes {
                let (b, dense_b) = nm_matrix::<T>(k, n, keep, window, l, &mut rng);
                let a = integers::<T>(m * k, &mut rng);
                let expected = reference(&a, &dense_b, m, k, n);
                let nm = NmMatrix::new(&b).unwrap();
                for &isa in &isas {
                    for loading in [Loading::WholeTile, Loading::Packed] {
                        for threads in [1, 2] {
                            let mut c = vec![T::from_f64(99.0); m * n];
                            spmm_with(isa, loading, &a, m, &nm, &mut c, threads).unwrap();
                            assert_eq!(
                                c,
                                expected,
                                "{keep}:{window} L={l} {m}x{k}x{n} {isa:?} {loading:?} {threads} threads {}",
                                T::NAME
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn every_pattern_vector_length_shape_type_thread_count_and_isa() {
    check_all::<f64>();
    check_all::<f32>();
}

#[test]
fn wrong_inputs_are_errors() {
    let mut rng = Pcg64::seed_from_u64(1);
    let (b, _) = nm_matrix::<f64>(16, 8, 2, 4, 4, &mut rng);
    let nm = NmMatrix::new(&b).unwrap();
    let mut c = vec![0.0; 3 * 8];
    let e = spmm(&[0.0; 3 * 15], 3, &nm, &mut c, 1).unwrap_err();
    assert_eq!(e, SpmmError::Length { what: "A", expected: 48, actual: 45 });
    let e = spmm(&[0.0; 3 * 16], 3, &nm, &mut c[..20], 1).unwrap_err();
    assert!(matches!(e, SpmmError::Length { what: "C", .. }), "{e}");
    // A row count whose product with k wraps around would otherwise pass the length checks.
    let rows = usize::MAX / 16 + 2;
    let e = spmm(&[0.0; 16], rows, &nm, &mut c, 1).unwrap_err();
    assert_eq!(e, SpmmError::Overflow { what: "A", rows, cols: 16 });
    let csr = Tensor::from_dense(&[2, 2], &[1.0, 0.0, 0.0, 1.0], &Format::csr()).unwrap();
    assert!(matches!(NmMatrix::new(&csr), Err(SpmmError::NotNm(f)) if f.contains("compressed") || f.contains("csr")));
}

/// The kernels address A's transposed rows by 32-bit offsets (a row times 16): B may have up to
/// 2²⁸ rows, padded to whole windows. `nm(1,65536,1)` reaches that with 4096 kept values.
#[test]
fn rows_past_the_32_bit_offsets_are_an_error() {
    let b = |k: usize| {
        let windows = k.div_ceil(65536);
        let parts = nm_format::NmParts::<f32> {
            n: 1,
            m: 65536,
            l: 1,
            shape: [k, 1],
            b_prime: vec![1.0; windows],
            d: (0..windows).map(|w| (w % 7) as u16).collect(),
        };
        Tensor::from_nm_parts(&parts).unwrap()
    };
    let largest = (1 << 28) - 65536;
    assert_eq!(NmMatrix::new(&b(largest)).unwrap().rows, largest);
    let e = NmMatrix::new(&b(largest + 1)).unwrap_err();
    assert_eq!(e, SpmmError::TooLarge { rows: largest + 1 });
    assert!(e.to_string().contains("32-bit row offsets"), "{e}");
}

#[test]
fn the_flop_count_is_the_useful_one() {
    let mut rng = Pcg64::seed_from_u64(2);
    let (b, _) = nm_matrix::<f32>(64, 32, 2, 8, 8, &mut rng);
    assert_eq!(NmMatrix::new(&b).unwrap().flops(10), 2.0 * 10.0 * 64.0 * 32.0 * 2.0 / 8.0);
}

/// `nv24` A (element-wise 2:4 along rows) times dense B, against the dense product; ragged k
/// and n, f32 and f64, 1 and 2 threads.
#[test]
fn nv24_times_dense() {
    fn check<T: Real>() {
        let mut rng = Pcg64::seed_from_u64(11);
        // Then several tasks of rows, several chunks of k (the last ragged) and whole and
        // ragged chunks of columns.
        for (m, k, n) in [(8, 16, 64), (37, 22, 70), (1, 3, 5), (40, 64, 130), (150, 203, 97), (70, 130, 64)] {
            let raw = Tensor::from_dense(&[m, k], &integers::<T>(m * k, &mut rng), &Format::dense(2)).unwrap();
            let (a, _) = raw.prune(&Format::nv24(2)).unwrap();
            let b = integers::<T>(k * n, &mut rng);
            let expected = reference(&a.to_dense().unwrap(), &b, m, k, n);
            for threads in [1, 2] {
                let mut c = vec![T::from_f64(7.0); m * n];
                nm_spmm::spmm_nv24(&a, &b, n, &mut c, threads).unwrap();
                assert_eq!(c, expected, "{m}x{k}x{n} {threads} threads {}", T::NAME);
            }
        }
    }
    check::<f32>();
    check::<f64>();
    let csr = Tensor::from_dense(&[2, 2], &[1.0, 0.0, 0.0, 1.0], &Format::csr()).unwrap();
    assert!(matches!(nm_spmm::spmm_nv24(&csr, &[0.0; 4], 2, &mut [0.0; 4], 1), Err(SpmmError::NotNv24(_))));
}

/// A long k (a transposed row block of A larger than L2), a ragged last window and a ragged
/// row tile. (Summing k in L2-sized chunks through C was tried for such shapes and measured
/// 10–50% slower; see BENCHMARKS.md.)
#[test]
fn a_long_k() {
    fn check<T: Real>() {
        let mut rng = Pcg64::seed_from_u64(11);
        for (keep, window, l) in [(1, 8, 32), (2, 4, 16), (3, 8, 32)] {
            let (m, k, n) = (70, 4 * 2048 + 5, 2 * l + 3);
            let (b, dense_b) = nm_matrix::<T>(k, n, keep, window, l, &mut rng);
            let a = integers::<T>(m * k, &mut rng);
            let expected = reference(&a, &dense_b, m, k, n);
            let nm = NmMatrix::new(&b).unwrap();
            for threads in [1, 2] {
                let mut c = vec![T::from_f64(99.0); m * n];
                spmm(&a, m, &nm, &mut c, threads).unwrap();
                assert_eq!(c, expected, "{keep}:{window} L={l} {m}x{k}x{n} {threads} threads {}", T::NAME);
            }
        }
    }
    check::<f32>();
    check::<f64>();
}

/// A B of more than `PANEL_BYTES` (16 MiB) of kept values: on a CPU whose L2 holds a block of
/// A's tiles, the kernels run every row block over one panel of B's column groups before the
/// next (f32: 2 panels, f64: 3); elsewhere, blocks of up to 32 tiles over all of B. Either way
/// the product of the blocking this machine chooses, on each instruction set it has.
#[test]
fn a_large_b_in_panels_of_column_groups() {
    fn check<T: Real>() {
        let mut rng = Pcg64::seed_from_u64(12);
        // 257 windows × 4 kept × 131 groups × 32 lanes: 4.3 M kept values (17 MiB of f32).
        let (m, k, n) = (37, 2051, 130 * 32 + 7);
        let (b, dense_b) = nm_matrix::<T>(k, n, 4, 8, 32, &mut rng);
        let a = integers::<T>(m * k, &mut rng);
        let expected = reference(&a, &dense_b, m, k, n);
        let nm = NmMatrix::new(&b).unwrap();
        for isa in [Isa::Avx512, Isa::Avx2, Isa::Baseline].into_iter().filter(|i| i.supported()) {
            for threads in [1, 2] {
                let mut c = vec![T::from_f64(99.0); m * n];
                spmm_with(isa, Loading::Auto, &a, m, &nm, &mut c, threads).unwrap();
                assert!(c == expected, "{isa:?} {threads} threads {}", T::NAME);
            }
        }
    }
    check::<f32>();
    check::<f64>();
}

/// Empty dimensions: no inner dimension (`k = 0`: every element of C an empty sum, zero), no
/// rows, no columns — every instruction set and thread count, both kernels. (`k = 0` panicked in
/// the transposition, a found bug.)
#[test]
fn empty_dimensions() {
    let mut rng = Pcg64::seed_from_u64(5);
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2, Isa::Baseline].into_iter().filter(|i| i.supported()).collect();
    for (m, k, n) in [(3, 0, 70), (0, 16, 64), (5, 16, 0), (0, 0, 0), (9, 0, 0)] {
        for l in [1, 32] {
            let (b, dense_b) = nm_matrix::<f32>(k, n, 2, 8, l, &mut rng);
            let a = integers::<f32>(m * k, &mut rng);
            let expected = reference(&a, &dense_b, m, k, n);
            let nm = NmMatrix::new(&b).unwrap();
            for &isa in &isas {
                for threads in [1, 2] {
                    for loading in [Loading::WholeTile, Loading::Packed] {
                        let mut c = vec![99.0; m * n];
                        spmm_with(isa, loading, &a, m, &nm, &mut c, threads).unwrap();
                        assert_eq!(c, expected, "{m}x{k}x{n} L={l} {isa:?} {loading:?} {threads} threads");
                    }
                }
            }
        }
        let raw = Tensor::from_dense(&[m, k], &integers::<f64>(m * k, &mut rng), &Format::dense(2)).unwrap();
        let (a, _) = raw.prune(&Format::nv24(2)).unwrap();
        let b = integers::<f64>(k * n, &mut rng);
        let expected = reference(&a.to_dense().unwrap(), &b, m, k, n);
        for threads in [1, 2] {
            let mut c = vec![7.0; m * n];
            nm_spmm::spmm_nv24(&a, &b, n, &mut c, threads).unwrap();
            assert_eq!(c, expected, "nv24 {m}x{k}x{n} {threads} threads");
        }
    }
}

/// A thread keeps its transposed block from one product to the next: what an earlier product
/// left in it must not reach a later one. The first A is all NaN with k a whole number of
/// windows; the next products' k is not, and with 4:8 their last window (2 rows of A) keeps
/// two of B's zero padding rows, read from the transposed tile where the NaNs were (NaN × 0 is
/// NaN, so stale values there would show). Blocks of several sizes, and the f64 kernel between
/// f32 products.
#[test]
fn a_kept_transposed_block_leaves_nothing_behind() {
    let mut rng = Pcg64::seed_from_u64(13);
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2, Isa::Baseline].into_iter().filter(|i| i.supported()).collect();
    for &isa in &isas {
        for threads in [1, 2] {
            let (m, k, n) = (40, 64, 64);
            let (b, _) = nm_matrix::<f32>(k, n, 2, 8, 32, &mut rng);
            let mut c = vec![0.0; m * n];
            spmm_with(isa, Loading::WholeTile, &vec![f32::NAN; m * k], m, &NmMatrix::new(&b).unwrap(), &mut c, threads)
                .unwrap();
            assert!(c.iter().all(|x| x.is_nan()), "NaN in, NaN out");
            for (m, k) in [(40, 58), (3, 58), (90, 58)] {
                let (b, dense_b) = nm_matrix::<f32>(k, n, 4, 8, 32, &mut rng);
                let a = integers::<f32>(m * k, &mut rng);
                let mut c = vec![99.0; m * n];
                spmm_with(isa, Loading::WholeTile, &a, m, &NmMatrix::new(&b).unwrap(), &mut c, threads).unwrap();
                assert_eq!(c, reference(&a, &dense_b, m, k, n), "{m}x{k}x{n} {isa:?} {threads} threads");
                let (b64, dense_b64) = nm_matrix::<f64>(k, n, 1, 4, 16, &mut rng);
                let a64 = integers::<f64>(m * k, &mut rng);
                let mut c64 = vec![99.0; m * n];
                spmm_with(isa, Loading::WholeTile, &a64, m, &NmMatrix::new(&b64).unwrap(), &mut c64, threads).unwrap();
                assert_eq!(c64, reference(&a64, &dense_b64, m, k, n), "f64 {m}x{k}x{n} {isa:?} {threads} threads");
            }
        }
    }
}
