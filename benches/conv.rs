//! Criterion: 2-D sparse convolution (a 999 × 999 image, 3 × 3 filter, "valid" result) through
//! the public API and generated C — the image in CSR under the default loop order against the
//! same statement on a dense image — at 50%, 80%, 90% and 99% sparsity. Each iteration is a
//! `Kernel::run` (the dense result allocated per call). The sweep over more sparsities, orders
//! and the 1-D and 3-D cases, timed as `nmsparse -time` times, is `cargo run --release
//! --example conv_sweep` (BENCHMARKS.md).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use nmsparse::format::generate::{Values, uniform};
use nmsparse::format::{Duplicates, Format, Tensor};
use nmsparse::{Backend, Program};

fn bench(c: &mut Criterion) {
    let (n, k) = (999usize, 3usize);
    let mut group = c.benchmark_group("conv2d_999");
    group.sample_size(20);
    let filter_list = uniform::<f64>(&[k, k], 1.0, Values::SmallIntegers(4), 2);
    let filter = Tensor::from_coordinates(&filter_list, &Format::dense(2), Duplicates::Reject).unwrap();
    for sparsity in [0.5, 0.8, 0.9, 0.99] {
        let list = uniform::<f64>(&[n, n], 1.0 - sparsity, Values::SmallIntegers(4), 1);
        for format in ["csr", "dd"] {
            let image =
                Tensor::from_coordinates(&list, &Format::parse(format, 2).unwrap(), Duplicates::Reject).unwrap();
            let kernel = Program::new("O(i,j) = I(i+r, j+q) * F(r,q)")
                .unwrap()
                .tensor("O", &[n - k + 1, n - k + 1], "dd")
                .unwrap()
                .tensor("I", &[n, n], format)
                .unwrap()
                .tensor("F", &[k, k], "dd")
                .unwrap()
                .compile::<f64>(Backend::Jit)
                .unwrap();
            let name = if format == "dd" { "dense" } else { "csr" };
            group.bench_with_input(BenchmarkId::new(name, sparsity), &image, |b, image| {
                b.iter(|| kernel.run(&[("I", image), ("F", &filter)]).unwrap())
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
