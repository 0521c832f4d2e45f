//! Sparse against dense convolution over the input's sparsity (issue 6): 1-D (n = 999,999,
//! k = 3), 2-D (999 × 999 image, 3 × 3 filter) and 3-D (99³ volume, 3³ filter), "valid"
//! output, dense filter and output. The same statement is compiled twice through generated C:
//! with the input in a sparse format (compressed levels iterated by non-empty subsections,
//! under the default loop order and under the output-stationary one) and with every tensor
//! dense (plain nested loops, which the C compiler vectorizes). Fastest of `REPS` runs (default
//! 5), 1 thread. Prints a Markdown table and writes an SVG plot of time against sparsity.
//!
//!     cargo run --release --example conv_sweep [-- OUT.svg]

use std::fmt::Write as _;
use std::time::Instant;

use nmsparse::format::generate::{Values, uniform};
use nmsparse::format::{Duplicates, Format, Tensor};
use nmsparse::{Backend, Program};

struct Problem {
    name: &'static str,
    expr: &'static str,
    input: Vec<usize>,
    filter: Vec<usize>,
    /// The input's sparse format.
    format: &'static str,
    /// Loop orders to time the sparse input under ("" is the default).
    schedules: [&'static str; 2],
}

impl Problem {
    fn output(&self) -> Vec<usize> {
        self.input.iter().zip(&self.filter).map(|(n, k)| n - k + 1).collect()
    }
}

fn dense_format(order: usize) -> String {
    "d".repeat(order)
}

/// Fastest of `reps` runs, in milliseconds, and the result's checksum.
fn time(
    p: &Problem,
    format: &str,
    schedule: &str,
    input: &Tensor<f64>,
    filter: &Tensor<f64>,
    reps: usize,
) -> (f64, f64) {
    let mut program = Program::new(p.expr)
        .unwrap()
        .tensor("O", &p.output(), &dense_format(p.input.len()))
        .unwrap()
        .tensor("I", &p.input, format)
        .unwrap()
        .tensor("F", &p.filter, &dense_format(p.filter.len()))
        .unwrap();
    if !schedule.is_empty() {
        program = program.schedule(schedule);
    }
    let kernel = program.compile::<f64>(Backend::Jit).expect("compiles");
    let mut best = f64::INFINITY;
    let mut sum = 0.0;
    for _ in 0..reps {
        let start = Instant::now();
        let out = kernel.run(&[("I", input), ("F", filter)]).expect("runs");
        best = best.min(start.elapsed().as_secs_f64());
        sum = out.values().iter().sum();
    }
    (best * 1e3, sum)
}

fn main() {
    let reps: usize = std::env::var("REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    let svg_path = std::env::args().nth(1).unwrap_or_else(|| "conv_sweep.svg".to_string());
    let problems = [
        Problem {
            name: "1-D",
            expr: "O(i) = I(i+r) * F(r)",
            input: vec![999_999],
            filter: vec![3],
            format: "s",
            schedules: ["", "reorder(r,i)"],
        },
        Problem {
            name: "2-D",
            expr: "O(i,j) = I(i+r, j+q) * F(r,q)",
            input: vec![999, 999],
            filter: vec![3, 3],
            format: "csr",
            schedules: ["", "reorder(i,j,r,q)"],
        },
        Problem {
            name: "3-D",
            expr: "O(i,j,k) = I(i+r, j+q, k+p) * F(r,q,p)",
            input: vec![99, 99, 99],
            filter: vec![3, 3, 3],
            format: "dds",
            schedules: ["", "reorder(i,j,k,r,q,p)"],
        },
    ];
    let sparsities = [0.0, 0.5, 0.8, 0.9, 0.95, 0.99, 0.999];
    let mut curves: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    println!(
        "| problem | sparsity | nonzeros | dense (ms) | sparse, default order (ms) | sparse, output-stationary (ms) | dense / best sparse | checksums agree |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for p in &problems {
        let mut dense_curve = Vec::new();
        let mut sparse_curves = [Vec::new(), Vec::new()];
        for &s in &sparsities {
            let list = uniform::<f64>(&p.input, 1.0 - s, Values::SmallIntegers(4), 11);
            let filter_list = uniform::<f64>(&p.filter, 1.0, Values::SmallIntegers(4), 12);
            let dense = Format::parse(&dense_format(p.input.len()), p.input.len()).unwrap();
            let sparse = Format::parse(p.format, p.input.len()).unwrap();
            let filter_format = Format::parse(&dense_format(p.filter.len()), p.filter.len()).unwrap();
            let input_dense = Tensor::from_coordinates(&list, &dense, Duplicates::Reject).unwrap();
            let input_sparse = Tensor::from_coordinates(&list, &sparse, Duplicates::Reject).unwrap();
            let filter = Tensor::from_coordinates(&filter_list, &filter_format, Duplicates::Reject).unwrap();
            let (dense_ms, dense_sum) = time(p, &dense_format(p.input.len()), "", &input_dense, &filter, reps);
            let mut sparse_ms = [0.0; 2];
            let mut agree = true;
            for (k, schedule) in p.schedules.iter().enumerate() {
                let (ms, sum) = time(p, p.format, schedule, &input_sparse, &filter, reps);
                sparse_ms[k] = ms;
                agree &= sum == dense_sum;
                sparse_curves[k].push((s, ms));
            }
            dense_curve.push((s, dense_ms));
            let best = sparse_ms[0].min(sparse_ms[1]);
            println!(
                "| {} | {:.1}% | {} | {:.3} | {:.3} | {:.3} | {:.2} | {} |",
                p.name,
                s * 100.0,
                list.len(),
                dense_ms,
                sparse_ms[0],
                sparse_ms[1],
                dense_ms / best,
                if agree { "yes" } else { "NO" }
            );
        }
        curves.push((format!("{} dense", p.name), dense_curve));
        let [a, b] = sparse_curves;
        curves.push((format!("{} sparse ({})", p.name, p.format), a));
        curves.push((format!("{} sparse, output-stationary", p.name), b));
    }
    std::fs::write(&svg_path, plot(&curves)).expect("writes the plot");
    eprintln!("plot: {svg_path}");
}

/// Three panels (one per problem), log-scale time against sparsity (log scale of density
/// 1 - s, so 0%, 90%, 99%, 99.9% are evenly spaced).
fn plot(curves: &[(String, Vec<(f64, f64)>)]) -> String {
    let (w, h, pad) = (360.0, 300.0, 50.0);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="11">"#,
        3.0 * w,
        h + 60.0
    );
    let colors = ["#444444", "#d62728", "#1f77b4"];
    for (panel, group) in curves.chunks(3).enumerate() {
        let x0 = panel as f64 * w;
        let times: Vec<f64> = group.iter().flat_map(|(_, c)| c.iter().map(|p| p.1)).collect();
        let lo = times.iter().cloned().fold(f64::INFINITY, f64::min).max(1e-3).log10().floor();
        let hi = times.iter().cloned().fold(0.0, f64::max).log10().ceil().max(lo + 1.0);
        let px = |s: f64| x0 + pad + (-(1.0 - s).max(1e-3).log10() / 3.0) * (w - 1.5 * pad);
        let py = |t: f64| 20.0 + (hi - t.max(1e-3).log10()) / (hi - lo) * (h - pad);
        let name = group[0].0.split(' ').next().unwrap_or("");
        let _ = writeln!(svg, r#"<text x="{}" y="14" font-weight="bold">{name} convolution</text>"#, x0 + pad);
        let _ = writeln!(
            svg,
            r##"<rect x="{}" y="20" width="{}" height="{}" fill="none" stroke="#999"/>"##,
            x0 + pad,
            w - 1.5 * pad,
            h - pad
        );
        let mut decade = lo;
        while decade <= hi {
            let y = py(10f64.powf(decade));
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                x0 + pad - 4.0,
                y + 4.0,
                10f64.powf(decade)
            );
            decade += 1.0;
        }
        for (s, label) in [(0.0, "0%"), (0.9, "90%"), (0.99, "99%"), (0.999, "99.9%")] {
            let _ = writeln!(svg, r#"<text x="{}" y="{}" text-anchor="middle">{label}</text>"#, px(s), h - 14.0);
        }
        let _ = writeln!(svg, r#"<text x="{}" y="{}">sparsity → ; time (ms, log)</text>"#, x0 + pad, h + 2.0);
        for (k, (label, points)) in group.iter().enumerate() {
            let path: Vec<String> = points.iter().map(|&(s, t)| format!("{:.1},{:.1}", px(s), py(t))).collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
                colors[k],
                path.join(" ")
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" fill="{}">{label}</text>"#,
                x0 + pad,
                h + 18.0 + 12.0 * k as f64,
                colors[k]
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}
