//! Criterion: the workspace on its own, on synthetic component streams — 2 Mi components over a
//! 4096 × 4096 key space, in random order, each coordinate pair repeated `dup` times (the
//! amount of deduplication) — for every policy, and the double-buffering and pipelining
//! switches. The same sweep with bytes held is `cargo run --release -p nm-ism --example
//! ablation`; outer-product SpGEMM through generated code is the root crate's `workspace_sweep`
//! example.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use nm_ism::{Config, Policy, Workspace};

/// `n` components over `[side, side]`, `n / dup` distinct coordinates, shuffled (seeded LCG).
pub fn stream(n: usize, side: usize, dup: usize, seed: u64) -> Vec<(usize, usize)> {
    let mut x = seed;
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) as usize
    };
    let distinct: Vec<(usize, usize)> = (0..(n / dup).max(1)).map(|_| (next() % side, next() % side)).collect();
    let mut out: Vec<(usize, usize)> = (0..n).map(|i| distinct[i % distinct.len()]).collect();
    for i in (1..out.len()).rev() {
        out.swap(i, next() % (i + 1));
    }
    out
}

fn run(components: &[(usize, usize)], side: usize, config: Config) -> usize {
    let mut ws = Workspace::<f64>::new(&[side, side], config).unwrap();
    for &(i, j) in components {
        ws.insert(&[i, j], 1.0).unwrap();
    }
    ws.finish().unwrap().len()
}

fn bench(c: &mut Criterion) {
    let (n, side) = (1 << 21, 4096);
    let mut policies = c.benchmark_group("ism_policies");
    for dup in [1, 4, 16, 64] {
        let components = stream(n, side, dup, 7);
        for policy in [Policy::Dense, Policy::Bucket, Policy::Hash(None), Policy::Coord, Policy::Vector] {
            policies.bench_with_input(BenchmarkId::new(policy.to_string(), dup), &components, |b, s| {
                b.iter(|| run(s, side, Config::new(policy)))
            });
        }
    }
    policies.finish();
    // `map` sorts on every insert: a smaller stream, against the others at the same size.
    let mut extremes = c.benchmark_group("ism_map_vs_two_arrays");
    let small = stream(1 << 14, side, 4, 9);
    for policy in [Policy::Map, Policy::Vector, Policy::Bucket, Policy::Coord] {
        extremes.bench_function(policy.to_string(), |b| b.iter(|| run(&small, side, Config::new(policy))));
    }
    extremes.finish();
    let mut switches = c.benchmark_group("ism_buffering");
    let components = stream(n, side, 4, 11);
    for policy in [Policy::Bucket, Policy::Coord] {
        for (double_buffered, pipelined) in [(true, false), (false, false), (true, true), (false, true)] {
            let config = Config { double_buffered, pipelined, capacity: 1 << 18, ..Config::new(policy) };
            let name = format!("{policy}_db{}_pipe{}", double_buffered as u8, pipelined as u8);
            switches.bench_function(name, |b| b.iter(|| run(&components, side, config)));
        }
    }
    switches.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
