//! What one call of `Kernel::run` costs beyond its loops: a 10×10 CSR SpMV, whose loops take
//! nanoseconds, so the time is the call's own (operand checks, arguments, the result), and a
//! 2,000×2,000 one for scale. BENCHMARKS.md, "Python", reports it beside the Python call.

use criterion::{Criterion, criterion_group, criterion_main};
use nmsparse::format::{Format, Tensor};
use nmsparse::{Backend, Program};

fn spmv(c: &mut Criterion, n: usize) {
    let dense: Vec<f64> = (0..n * n).map(|k| if k % 7 == 0 { (k % 5) as f64 + 1.0 } else { 0.0 }).collect();
    let a = Tensor::from_dense(&[n, n], &dense, &Format::csr()).expect("A");
    let x = Tensor::from_dense(&[n], &vec![1.0; n], &Format::dense(1)).expect("x");
    let kernel = Program::new("y(i) = A(i,j) * x(j)")
        .and_then(|p| p.tensor("A", &[n, n], "csr"))
        .and_then(|p| p.tensor("x", &[n], "dense"))
        .and_then(|p| p.tensor("y", &[n], "dense"))
        .and_then(|p| p.compile::<f64>(Backend::Jit))
        .expect("compiles");
    c.bench_function(&format!("Kernel::run SpMV {n}x{n}"), |b| {
        b.iter(|| kernel.run(&[("A", &a), ("x", &x)]).expect("runs"))
    });
}

fn calls(c: &mut Criterion) {
    spmv(c, 10);
    spmv(c, 2000);
}

criterion_group!(benches, calls);
criterion_main!(benches);
