//! What compiling a statement costs in a process that compiled it before: SpGEMM into CSR
//! (`C(i,j) = A(i,k) * B(k,j)`, every tensor CSR, `reorder(k,j)`), whose kernel the process
//! already loaded, so the time is everything but the C compiler. BENCHMARKS.md, "Compile
//! latency", reports it beside the cold compile and the on-disk cache, which take a fresh
//! process each and are timed through the command.

use criterion::{Criterion, criterion_group, criterion_main};
use nmsparse::{Backend, Program};

fn spgemm(c: &mut Criterion) {
    let program = Program::new("C(i,j) = A(i,k) * B(k,j)")
        .and_then(|p| p.tensor("A", &[2000, 2000], "csr"))
        .and_then(|p| p.tensor("B", &[2000, 2000], "csr"))
        .and_then(|p| p.tensor("C", &[2000, 2000], "csr"))
        .expect("declares")
        .schedule("reorder(k,j)");
    program.compile::<f64>(Backend::Jit).expect("compiles");
    c.bench_function("Program::compile SpGEMM, loaded", |b| {
        b.iter(|| program.compile::<f64>(Backend::Jit).expect("compiles"))
    });
}

criterion_group!(benches, spgemm);
criterion_main!(benches);
