//! Sparse against dense convolution over the input's sparsity: 1-D (n = 999,999,
//! k = 3), 2-D (999 × 999 image, 3 × 3 filter) and 3-D (99³ volume, 3³ filter), "valid"
//! output, dense filter and output. Each is run as `nmsparse` runs it (`-g=I:DENSITY
//! -time=REPS`: generated C, the fastest compute time, arrays reused between runs as taco
//! times them): with the input in a sparse format (compressed levels iterated by non-empty
//! subsections) under three loop orders — the default, output-stationary (result variables
//! outermost) and filter outermost — and, in the default order, into a sparse result too
//! (assembled and computed by one fused kernel, `-c`); and with every tensor dense (plain
//! nested loops, which the C compiler vectorizes). 1 thread. Prints a Markdown table and writes
//! an SVG plot of time against sparsity.
//!
//!     cargo run --release --example conv_sweep [-- OUT.svg]     (REPS=N, default 10)

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

fn main() {
    let reps: usize = std::env::var("REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(10);
    let svg_path = std::env::args().nth(1).unwrap_or_else(|| "conv_sweep.svg".to_string());
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
    let mut curves: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
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
        curves.push((format!("{} dense", p.name), dense_curve));
        let [a, b, c, d] = sparse_curves;
        curves.push((format!("{} sparse ({}), default order", p.name, p.format), a));
        curves.push((format!("{} sparse, output-stationary", p.name), b));
        curves.push((format!("{} sparse, filter outermost", p.name), c));
        curves.push((format!("{} sparse into {}, default order", p.name, p.result), d));
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
        h + 84.0
    );
    let colors = ["#444444", "#d62728", "#1f77b4", "#2ca02c", "#9467bd"];
    for (panel, group) in curves.chunks(colors.len()).enumerate() {
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
