//! Times the storage kernels the peers also have, on Matrix Market files, and prints CSV rows
//! `kernel,matrix,system,seconds,nnz_out,checksum` (the same columns `bench/format_peers.py`
//! prints for fast_matrix_market and scipy, so `bench/compare_format.sh` can put them side
//! by side from one run).
//!
//! Kernels: `read_mtx` (file → coordinate arrays, symmetric storage expanded, like
//! `fast_matrix_market.mmread`), `csr_to_csc` and `csc_to_csr` (like scipy's `tocsc()` /
//! `tocsr()`), `nm_pack_2_4_16` (CSR → `nm(2,4,16)` after pruning, a Rust-only row).
//!
//! usage: cargo run --release -p nm-format --example format_timings -- [--reps N] FILE.mtx...

use std::time::Instant;

use nm_format::io::read_mtx;
use nm_format::{Duplicates, Format, Tensor};

fn min_seconds<R>(reps: usize, mut f: impl FnMut() -> R) -> (f64, R) {
    let mut best = f64::INFINITY;
    let mut out = f();
    for _ in 0..reps {
        let t = Instant::now();
        out = f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, out)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut reps = 10;
    if let Some(i) = args.iter().position(|a| a == "--reps") {
        reps = args.get(i + 1).and_then(|r| r.parse().ok()).unwrap_or(10);
        args.drain(i..(i + 2).min(args.len()));
    }
    println!("kernel,matrix,system,seconds,nnz_out,checksum");
    for path in &args {
        let name = std::path::Path::new(path).file_stem().unwrap_or_default().to_string_lossy().into_owned();
        let row = |kernel: &str, seconds: f64, nnz: usize, checksum: f64| {
            println!("{kernel},{name},nmsparse,{seconds:.6e},{nnz},{checksum:.12e}");
        };
        let (s, m) = min_seconds(reps, || read_mtx::<f64>(path).expect("readable matrix"));
        row("read_mtx", s, m.data.len(), m.data.values.iter().sum());
        // Conversions carry nonzeros only; time them on a CSR without explicit zeros, as the
        // peers' script does (scipy's eliminate_zeros).
        let csr = Tensor::from_coordinates(&m.data, &Format::csr(), Duplicates::Sum).expect("csr");
        let csr = csr.convert(&Format::csr()).expect("csr");
        let (s, csc) = min_seconds(reps, || csr.convert(&Format::csc()).expect("csc"));
        row("csr_to_csc", s, csc.stored_len(), csc.values().iter().sum());
        let (s, back) = min_seconds(reps, || csc.convert(&Format::csr()).expect("csr"));
        row("csc_to_csr", s, back.stored_len(), back.values().iter().sum());
        // Vector-wise N:M stores half of the padded dense matrix: only for matrices where that
        // is a sensible thing to ask (at most 2^24 stored values).
        if csr.shape()[0] * csr.shape()[1] / 2 > 1 << 24 {
            continue;
        }
        let nm = Format::nm(2, 4, 16).expect("nm format");
        let (fitting, _) = csr.prune(&nm).expect("prune");
        let fitting_csr = fitting.convert(&Format::csr()).expect("csr");
        let (s, packed) = min_seconds(reps, || fitting_csr.convert(&nm).expect("fits"));
        row("nm_pack_2_4_16", s, packed.count_nonzeros(), packed.values().iter().sum());
    }
}
