//! Outer-product SpGEMM `A(i,j) = B(i,k) * C(k,j)` (`reorder(k,i,j)`, B in CSC, C in CSR, A in
//! CSR) through generated code, sweeping the amount of deduplication — the outer products
//! that land on each result coordinate — by growing the operands' density at a fixed shape
//! (1000 × 2000 times 2000 × 1000): a dense workspace against the sparse policies, and the
//! row-wise (Gustavson) order with its dense row workspace for scale. Fastest of 3 runs (the
//! kernel keeps its workspace between runs), 1 thread.
//!
//!     cargo run --release --example workspace_sweep

use std::time::Instant;

use nmsparse::format::generate::{Values, uniform};
use nmsparse::format::{Duplicates, Format, Tensor};
use nmsparse::ism::{Config, Policy};
use nmsparse::{Backend, Program};

fn time(program: Program, b: &Tensor<f64>, c: &Tensor<f64>) -> (f64, usize) {
    let kernel = program.compile::<f64>(Backend::Jit).expect("compiles");
    let mut best = f64::INFINITY;
    let mut nnz = 0;
    for _ in 0..3 {
        let start = Instant::now();
        let a = kernel.run(&[("B", b), ("C", c)]).expect("runs");
        best = best.min(start.elapsed().as_secs_f64());
        nnz = a.values().len();
    }
    (best * 1e3, nnz)
}

fn main() {
    let (m, n, k) = (1000usize, 1000usize, 2000usize);
    let policies = [Policy::Dense, Policy::Bucket, Policy::Hash(None), Policy::Coord];
    print!("| density | products | nonzeros of A | products per nonzero |");
    for p in policies {
        print!(" {p} (ms) |");
    }
    println!(" row-wise (ms) |");
    println!("|---:|---:|---:|---:|{}---:|", "---:|".repeat(policies.len()));
    for density in [0.0025, 0.005, 0.01, 0.02, 0.04, 0.08] {
        let lb = uniform::<f64>(&[m, k], density, Values::SmallIntegers(4), 1);
        let lc = uniform::<f64>(&[k, n], density, Values::SmallIntegers(4), 2);
        let b = Tensor::from_coordinates(&lb, &Format::csc(), Duplicates::Reject).unwrap();
        let c = Tensor::from_coordinates(&lc, &Format::csr(), Duplicates::Reject).unwrap();
        let b_rows = Tensor::from_coordinates(&lb, &Format::csr(), Duplicates::Reject).unwrap();
        // Products: Σ_k (nonzeros of column k of B) × (nonzeros of row k of C).
        let mut col = vec![0usize; k];
        let mut row = vec![0usize; k];
        for e in 0..lb.len() {
            col[lb.entry(e)[1]] += 1;
        }
        for e in 0..lc.len() {
            row[lc.entry(e)[0]] += 1;
        }
        let products: usize = (0..k).map(|x| col[x] * row[x]).sum();
        let program = |b_format: &str| {
            Program::new("A(i,j) = B(i,k) * C(k,j)")
                .unwrap()
                .tensor("A", &[m, n], "csr")
                .unwrap()
                .tensor("B", &[m, k], b_format)
                .unwrap()
                .tensor("C", &[k, n], "csr")
                .unwrap()
        };
        let mut cells = Vec::new();
        let mut nnz = 0;
        for p in policies {
            let (ms, z) = time(program("csc").schedule("reorder(k,i,j)").workspace(Config::new(p)), &b, &c);
            cells.push(format!("{ms:.2}"));
            nnz = z;
        }
        let (row_ms, _) = time(program("csr"), &b_rows, &c);
        println!(
            "| {:.2}% | {products} | {nnz} | {:.1} | {} | {row_ms:.2} |",
            density * 100.0,
            products as f64 / nnz.max(1) as f64,
            cells.join(" | ")
        );
    }
}
