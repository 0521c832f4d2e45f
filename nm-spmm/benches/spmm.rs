//! Criterion: N:M SpMM at 1024³, f32, L = 32, 50%, 75% and 87.5% sparsity, 1 thread, each
//! instruction set the CPU has, A's tile read in place and packed (the same-run comparison with
//! OpenBLAS is `bench/nm_spmm_vs_openblas.sh`).

use criterion::{Criterion, criterion_group, criterion_main};
use nm_format::{Format, Tensor};
use nm_spmm::{Isa, Loading, NmMatrix, spmm_with};

fn bench(c: &mut Criterion) {
    let size = 1024;
    let dense: Vec<f32> = (0..size * size).map(|q| 1.0 + ((q * 7919) % 97) as f32 / 97.0).collect();
    let a: Vec<f32> = (0..size * size).map(|q| ((q * 31) % 17) as f32 / 17.0 - 0.5).collect();
    let b = Tensor::from_dense(&[size, size], &dense, &Format::dense(2)).unwrap();
    for (keep, window) in [(4, 8), (2, 8), (1, 8)] {
        let (pruned, _) = b.prune(&Format::nm(keep, window, 32).unwrap()).unwrap();
        let nm = NmMatrix::new(&pruned).unwrap();
        let mut out = vec![0.0f32; size * size];
        for isa in [Isa::Avx512, Isa::Avx2, Isa::Baseline].into_iter().filter(|i| i.supported()) {
            // The baseline tile reads A's rows in place whatever the loading.
            let loadings: &[Loading] =
                if isa == Isa::Baseline { &[Loading::WholeTile] } else { &[Loading::WholeTile, Loading::Packed] };
            for &loading in loadings {
                c.bench_function(&format!("nm_spmm_1024_{keep}of{window}_L32_f32_{isa:?}_{loading:?}"), |bench| {
                    bench.iter(|| spmm_with(isa, loading, &a, size, &nm, &mut out, 1).unwrap())
                });
            }
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
