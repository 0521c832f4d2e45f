//! Sparse against dense convolution over the input's sparsity: 1-D (n = 999,999,
//! k = 3), 2-D (999 × 999 image, 3 × 3 filter) and 3-D (99³ volume, 3³ filter), "valid"
//! output, dense filter and output. Each is run as `nmsparse` runs it (`-g=I:DENSITY
//! -time=REPS`: generated C, the fastest compute time, arrays reused between runs as taco
//! times them): with the input in a sparse format (compressed levels iterated by non-empty
//! subsections) under three loop orders — the default, output-stationary (result variables
//! outermost) and filter outermost — and, in the default order, into a sparse result too
//! (assembled and computed by one fused kernel, `-c`); and with every tensor dense (plain
//! nested loops, which the C compiler vectorizes). 1 thread. Prints a Markdown table and writes
//! every time to a CSV file (`problem,sparsity,series,ms`), which `bench/plot.py sweep` draws.
//!
//!     cargo run --release --example conv_sweep [-- OUT.csv]     (REPS=N, default 10)

use std::fmt::Write as _;

use nmsparse::commands::{RunOptions, run};

struct Problem {
    name: &'static str,
    expr: &'static str,
    /// `-d` sizes: the output's and the filter's.
    dims: &'static [&'static str],
    /// The input's sparse format.
    format: &'static str,
    /// Loop orders to time the sparse input under ("" is the default).
    schedules: [&'static str; 3],
    /// The sparse result's format, timed under the default order.
    result: &'static str,
}

/// `nmsparse EXPR -d=... -g=I:DENSITY [-f=I:FORMAT] [-f=O:RESULT -c] [-s=SCHEDULE] -time=REPS`:
/// the fastest compute time (ms) and the result's checksum.
fn time(
    p: &Problem,
    format: Option<&str>,
    result: Option<&str>,
    schedule: &str,
    density: f64,
    reps: usize,
) -> (f64, String) {
    let mut o = RunOptions::new(p.expr);
    o.dims = p.dims.iter().map(|d| d.to_string()).collect();
    o.generate = vec![format!("I:{density}"), "F:d".to_string()];
    if let Some(f) = format {
        o.formats = vec![format!("I:{f}")];
    }
    if let Some(f) = result {
        o.formats.push(format!("O:{f}"));
        o.fused = true;
    }
    if !schedule.is_empty() {
        o.schedule = Some(schedule.to_string());
    }
    o.time = Some(reps);
    let text = run(&o).unwrap_or_else(|e| panic!("{} {format:?} {schedule}: {e}", p.expr));
    let min = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("min:"))
        .and_then(|t| t.trim().trim_end_matches("ms").trim().parse().ok())
        .expect("a min: line");
    let checksum = text.rsplit("checksum ").next().unwrap_or("").trim().to_string();
    (min, checksum)
}

/// A problem's series: its name and (sparsity, ms) points.
type Curve = (&'static str, String, Vec<(f64, f64)>);

fn main() {
    let reps: usize = std::env::var("REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(10);
    let csv_path = std::env::args().nth(1).unwrap_or_else(|| "conv_sweep.csv".to_string());
    let problems = [
        Problem {
            name: "1-D",
            expr: "O(i) = I(i+r) * F(r)",
            dims: &["i:999997", "r:3"],
            format: "s",
            schedules: ["", "reorder(i,r)", "reorder(r,i)"],
            result: "s",
        },
        Problem {
            name: "2-D",
            expr: "O(i,j) = I(i+r, j+q) * F(r,q)",
            dims: &["i:997", "j:997", "r:3", "q:3"],
            format: "csr",
            schedules: ["", "reorder(i,j,r,q)", "reorder(r,q,i,j)"],
            result: "dcsr",
        },
        Problem {
            name: "3-D",
            expr: "O(i,j,k) = I(i+r, j+q, k+p) * F(r,q,p)",
            dims: &["i:97", "j:97", "k:97", "r:3", "q:3", "p:3"],
            format: "csf",
            schedules: ["", "reorder(i,j,k,r,q,p)", "reorder(r,q,p,i,j,k)"],
            result: "csf",
        },
    ];
    let sparsities = [0.0, 0.5, 0.8, 0.9, 0.95, 0.99, 0.999];
    let mut curves: Vec<Curve> = Vec::new();
    println!(
        "| problem | sparsity | dense (ms) | sparse, default (ms) | sparse, output-stationary (ms) | sparse, filter outermost (ms) | sparse into a sparse result (ms) | dense / sparse default | dense / sparse result | checksums agree |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for p in &problems {
        let mut dense_curve = Vec::new();
        let mut sparse_curves = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for &s in &sparsities {
            let density = 1.0 - s;
            let (dense_ms, dense_sum) = time(p, None, None, "", density, reps);
            let mut sparse_ms = [0.0; 4];
            let mut agree = true;
            let runs = p.schedules.iter().map(|&schedule| (schedule, None)).chain([("", Some(p.result))]);
            for (k, (schedule, result)) in runs.enumerate() {
                let (ms, sum) = time(p, Some(p.format), result, schedule, density, reps);
                sparse_ms[k] = ms;
                agree &= sum == dense_sum;
                sparse_curves[k].push((s, ms));
            }
            dense_curve.push((s, dense_ms));
            println!(
                "| {} | {:.1}% | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {:.2} | {} |",
                p.name,
                s * 100.0,
                dense_ms,
                sparse_ms[0],
                sparse_ms[1],
                sparse_ms[2],
                sparse_ms[3],
                dense_ms / sparse_ms[0],
                dense_ms / sparse_ms[3],
                if agree { "yes" } else { "NO" }
            );
        }
        curves.push((p.name, "dense".to_string(), dense_curve));
        let [a, b, c, d] = sparse_curves;
        curves.push((p.name, format!("sparse ({}), default order", p.format), a));
        curves.push((p.name, "sparse, output-stationary".to_string(), b));
        curves.push((p.name, "sparse, filter outermost".to_string(), c));
        curves.push((p.name, format!("sparse into {}, default order", p.result), d));
    }
    let mut csv = String::from("problem,sparsity,series,ms\n");
    for (problem, series, points) in &curves {
        for (s, ms) in points {
            // A series names its order after a comma: quoted, as CSV quotes a field with one.
            let _ = writeln!(csv, "{problem},{s},\"{series}\",{ms}");
        }
    }
    std::fs::write(&csv_path, csv).expect("writes the CSV");
    eprintln!("times: {csv_path} (draw them with `python bench/plot.py sweep {csv_path} -o OUT.svg`)");
}
