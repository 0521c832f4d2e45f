//! Times `C = A·B` with B in `nm(N,M,L)` for the shapes and patterns given, printing CSV
//! `m,n,k,N,M,L,type,threads,isa,seconds,gflops,loading` (useful flops: 2·m·n·k·N/M; the best
//! of `reps` runs after one warm-up). Used by `bench/nm_spmm_vs_openblas.sh`. LOADINGS (default
//! `auto`) is a list of `auto`, `tile`, `packed` (how the kernel reads A, [`Loading`]): several are
//! timed in turn within each repetition, so that a noisy machine slows them alike.
//!
//!     cargo run --release -p nm-spmm --example sweep -- SIZES PATTERNS L TYPE THREADS REPS [LOADINGS]
//!     cargo run --release -p nm-spmm --example sweep -- 1024,4096 1:8 32 f32 1 9 tile,packed
//!     cargo run --release -p nm-spmm --example sweep -- 1024,2048 2:4,2:8 32 f32 2 5
//!     cargo run --release -p nm-spmm --example sweep -- 1024 nv24 0 f32 1 5   # A in nv24
//!     cargo run --release -p nm-spmm --example sweep -- 1024x12288x4096 2:8 32 f32 1 3  # m×n×k
//!
//! A size is `S` (m = n = k = S) or `MxNxK`.

use std::time::Instant;

use nm_format::{Format, Tensor};
use nm_spmm::{Isa, Loading, NmMatrix, Real, spmm_with};

fn run<T: Real>(
    (m, n, k): (usize, usize, usize),
    (keep, window, l): (u32, u32, usize),
    loadings: &[Loading],
    threads: usize,
    reps: usize,
) {
    // B: deterministic values, pruned into the pattern (every window keeps N rows per group).
    let dense: Vec<T> = (0..k * n).map(|q| T::from_f64(1.0 + ((q * 7919) % 97) as f64 / 97.0)).collect();
    let b = Tensor::from_dense(&[k, n], &dense, &Format::dense(2)).unwrap();
    let (b, _) = b.prune(&Format::nm(keep, window, l).unwrap()).unwrap();
    let nm = NmMatrix::new(&b).unwrap();
    let a: Vec<T> = (0..m * k).map(|q| T::from_f64(((q * 31) % 17) as f64 / 17.0 - 0.5)).collect();
    let mut c = vec![T::ZERO; m * n];
    let mut multiply = |loading| spmm_with(Isa::detect(), loading, &a, m, &nm, &mut c, threads).unwrap();
    for &loading in loadings {
        multiply(loading); // warm-up
    }
    let mut best = vec![f64::INFINITY; loadings.len()];
    for _ in 0..reps {
        for (best, &loading) in best.iter_mut().zip(loadings) {
            let start = Instant::now();
            multiply(loading);
            *best = best.min(start.elapsed().as_secs_f64());
        }
    }
    for (best, loading) in best.into_iter().zip(loadings) {
        println!(
            "{m},{n},{k},{keep},{window},{l},{},{threads},{:?},{best:.6},{:.2},{loading:?}",
            T::NAME,
            Isa::detect(),
            nm.flops(m) / best / 1e9
        );
    }
}

/// The best of `reps` timed runs of `run` (seconds), after one warm-up run.
fn best_of(reps: usize, mut run: impl FnMut()) -> f64 {
    run();
    (0..reps)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// `C = A·B` with A in `nv24` (2:4 along rows), B dense: the same CSV line, N:M = 2:4, L = 0.
fn run_nv24<T: Real>((m, n, k): (usize, usize, usize), threads: usize, reps: usize) {
    let dense: Vec<T> = (0..m * k).map(|q| T::from_f64(1.0 + ((q * 7919) % 97) as f64 / 97.0)).collect();
    let a = Tensor::from_dense(&[m, k], &dense, &Format::dense(2)).unwrap();
    let (a, _) = a.prune(&Format::nv24(2)).unwrap();
    let b: Vec<T> = (0..k * n).map(|q| T::from_f64(((q * 31) % 17) as f64 / 17.0 - 0.5)).collect();
    let mut c = vec![T::ZERO; m * n];
    let best = best_of(reps, || nm_spmm::spmm_nv24(&a, &b, n, &mut c, threads).unwrap());
    let flops = 2.0 * m as f64 * k as f64 * n as f64 / 2.0;
    println!("{m},{n},{k},2,4,0,{},{threads},{:?},{best:.6},{:.2},nv24", T::NAME, Isa::detect(), flops / best / 1e9);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.to_string());
    let sizes: Vec<(usize, usize, usize)> = arg(0, "1024")
        .split(',')
        .map(|s| {
            let dims: Vec<usize> = s.split('x').map(|d| d.parse().expect("a size")).collect();
            match dims.as_slice() {
                [s] => (*s, *s, *s),
                [m, n, k] => (*m, *n, *k),
                _ => panic!("a size is S or MxNxK, not {s}"),
            }
        })
        .collect();
    let nv24 = arg(1, "2:4") == "nv24";
    let patterns: Vec<(u32, u32)> = arg(1, "2:4")
        .split(',')
        .filter(|p| *p != "nv24")
        .map(|p| {
            let (n, m) = p.split_once(':').expect("N:M");
            (n.parse().expect("N"), m.parse().expect("M"))
        })
        .collect();
    let l: usize = arg(2, "32").parse().expect("L");
    let ty = arg(3, "f32");
    let threads: usize = arg(4, "1").parse().expect("threads");
    let reps: usize = arg(5, "5").parse().expect("reps");
    let loadings: Vec<Loading> = arg(6, "auto")
        .split(',')
        .map(|name| match name {
            "auto" => Loading::Auto,
            "tile" => Loading::WholeTile,
            "packed" => Loading::Packed,
            _ => panic!("a loading is auto, tile or packed, not {name}"),
        })
        .collect();
    println!("m,n,k,N,M,L,type,threads,isa,seconds,gflops,loading");
    for &size in &sizes {
        if nv24 {
            match ty.as_str() {
                "f64" => run_nv24::<f64>(size, threads, reps),
                _ => run_nv24::<f32>(size, threads, reps),
            }
        }
        for &(keep, window) in &patterns {
            match ty.as_str() {
                "f64" => run::<f64>(size, (keep, window, l), &loadings, threads, reps),
                _ => run::<f32>(size, (keep, window, l), &loadings, threads, reps),
            }
        }
    }
}
