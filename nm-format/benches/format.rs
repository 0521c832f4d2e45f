//! Criterion benches of nm-format's storage kernels: reading `.mtx`, CSR↔CSC, and N:M packing
//! (CSR → `nv24` / `nm(N,M,L)` for data that fits, and pruning data that does not).
//!
//! Matrices: MIT8 and bcsstk33 from `../shared/data` when present (set `NMSPARSE_DATA` to
//! another data folder), plus a generated power-law matrix written to a temporary file, so the
//! benches run on any checkout. `bench/compare_format.sh` times the same kernels next to
//! fast_matrix_market and scipy in one run.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nm_format::generate::{Values, nm_elementwise, nm_vectorwise, power_law_rows, uniform};
use nm_format::io::{read_mtx, write_tensor};
use nm_format::{Duplicates, Format, Tensor};

fn matrices() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let data = std::env::var_os("NMSPARSE_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    for name in ["MIT8", "bcsstk33"] {
        let path = data.join("matrices").join(format!("{name}.mtx"));
        if path.exists() {
            out.push((name.to_string(), path));
        }
    }
    let generated = std::env::temp_dir().join("nm-format-bench-power-law.mtx");
    if !generated.exists() {
        let list = power_law_rows::<f64>(20_000, 20_000, 20.0, 0.7, Values::Uniform, 42);
        let t = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Sum).unwrap();
        write_tensor(&generated, &t).unwrap();
    }
    out.push(("power_law_20k".to_string(), generated));
    out
}

fn io_and_transpose(c: &mut Criterion) {
    for (name, path) in matrices() {
        let m = read_mtx::<f64>(&path).unwrap();
        let mut g = c.benchmark_group("read_mtx");
        g.throughput(Throughput::Bytes(std::fs::metadata(&path).unwrap().len()));
        g.bench_function(BenchmarkId::from_parameter(&name), |b| b.iter(|| read_mtx::<f64>(black_box(&path)).unwrap()));
        g.finish();

        let csr = Tensor::from_coordinates(&m.data, &Format::csr(), Duplicates::Sum).unwrap();
        let csc = csr.convert(&Format::csc()).unwrap();
        let mut g = c.benchmark_group("convert");
        g.throughput(Throughput::Elements(csr.stored_len() as u64));
        g.bench_function(BenchmarkId::new("csr_to_csc", &name), |b| b.iter(|| csr.convert(&Format::csc()).unwrap()));
        g.bench_function(BenchmarkId::new("csc_to_csr", &name), |b| b.iter(|| csc.convert(&Format::csr()).unwrap()));
        g.bench_function(BenchmarkId::new("csr_to_dcsr", &name), |b| b.iter(|| csr.convert(&Format::csf(2)).unwrap()));
        g.bench_function(BenchmarkId::new("coo_list_to_csr", &name), |b| {
            b.iter(|| Tensor::from_coordinates(&m.data, &Format::csr(), Duplicates::Sum).unwrap())
        });
        g.finish();
    }
}

fn nm_packing(c: &mut Criterion) {
    let n = 2048;
    let mut g = c.benchmark_group("nm_pack");
    for (name, list, format) in [
        ("nv24", nm_elementwise::<f32>(n, n, 2, 4, Values::Uniform, 1), Format::nv24(2)),
        ("nm_2_4_16", nm_vectorwise::<f32>(n, n, 2, 4, 16, Values::Uniform, 2), Format::nm(2, 4, 16).unwrap()),
        ("nm_2_8_32", nm_vectorwise::<f32>(n, n, 2, 8, 32, Values::Uniform, 3), Format::nm(2, 8, 32).unwrap()),
    ] {
        let csr = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Reject).unwrap();
        g.throughput(Throughput::Elements(csr.stored_len() as u64));
        g.bench_function(BenchmarkId::new("csr_to", name), |b| b.iter(|| csr.convert(&format).unwrap()));
        let packed = csr.convert(&format).unwrap();
        if name.starts_with("nm") {
            g.bench_function(BenchmarkId::new("nm_parts", name), |b| b.iter(|| packed.nm_parts().unwrap()));
        }
    }
    // Pruning dense-ish random data (50% nonzero) into 2:4.
    let dense =
        Tensor::from_coordinates(&uniform::<f32>(&[n, n], 0.5, Values::Uniform, 4), &Format::csr(), Duplicates::Reject)
            .unwrap();
    g.throughput(Throughput::Elements(dense.stored_len() as u64));
    g.bench_function(BenchmarkId::new("prune", "nv24_from_50pct"), |b| {
        b.iter(|| dense.prune(&Format::nv24(2)).unwrap())
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = io_and_transpose, nm_packing
}
criterion_main!(benches);
