//! The workspace ablation as one table: per policy and amount of deduplication, the time to
//! insert and finish 2 Mi components over a 4096 × 4096 key space (fastest of 5 runs) and the
//! most bytes the workspace held; then double buffering and pipelining on and off.
//!
//!     cargo run --release -p nm-ism --example ablation

use std::time::Instant;

use nm_ism::{Config, Policy, Workspace};

#[path = "../benches/ism.rs"]
#[allow(dead_code)]
mod streams;

fn measure(components: &[(usize, usize)], side: usize, config: Config) -> (f64, usize, usize) {
    let mut best = f64::INFINITY;
    let (mut bytes, mut unique) = (0, 0);
    for _ in 0..5 {
        let start = Instant::now();
        let mut ws = Workspace::<f64>::new(&[side, side], config).unwrap();
        for &(i, j) in components {
            ws.insert(&[i, j], 1.0).unwrap();
        }
        let done = ws.finish().unwrap();
        best = best.min(start.elapsed().as_secs_f64());
        (bytes, unique) = (ws.stats().peak_bytes, done.len());
    }
    (best * 1e3, bytes, unique)
}

fn main() {
    let (n, side) = (1usize << 21, 4096usize);
    println!("| components per coordinate | policy | ms | MiB held | unique |");
    println!("|---:|---|---:|---:|---:|");
    for dup in [1, 4, 16, 64] {
        let components = streams::stream(n, side, dup, 7);
        for policy in [Policy::Dense, Policy::Bucket, Policy::Hash(None), Policy::Coord, Policy::Vector] {
            let (ms, bytes, unique) = measure(&components, side, Config::new(policy));
            println!("| {dup} | {policy} | {ms:.1} | {:.1} | {unique} |", bytes as f64 / (1 << 20) as f64);
        }
    }
    let small = streams::stream(1 << 14, side, 4, 9);
    println!("\n16 Ki components (4 per coordinate):\n\n| policy | ms | MiB held |\n|---|---:|---:|");
    for policy in [Policy::Map, Policy::Vector, Policy::Bucket, Policy::Coord] {
        let (ms, bytes, _) = measure(&small, side, Config::new(policy));
        println!("| {policy} | {ms:.2} | {:.2} |", bytes as f64 / (1 << 20) as f64);
    }
    let components = streams::stream(n, side, 4, 11);
    println!("\n2 Mi components (4 per coordinate), 256 Ki accumulation array:\n");
    println!("| policy | double-buffered | pipelined | ms | MiB held |\n|---|---|---|---:|---:|");
    for policy in [Policy::Bucket, Policy::Coord] {
        for (double_buffered, pipelined) in [(true, false), (false, false), (true, true), (false, true)] {
            let config = Config { double_buffered, pipelined, capacity: 1 << 18, ..Config::new(policy) };
            let (ms, bytes, _) = measure(&components, side, config);
            println!(
                "| {policy} | {double_buffered} | {pipelined} | {ms:.1} | {:.1} |",
                bytes as f64 / (1 << 20) as f64
            );
        }
    }
}
