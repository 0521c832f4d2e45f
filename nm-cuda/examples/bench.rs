//! The NM-SpMM GPU benchmark: per shape and sparsity, each kernel's time, useful TFLOP/s
//! (2·m·n·k·N/M), % of the device's FP32 peak, and speedup over cuBLAS SGEMM (bf16: over
//! cuBLAS's dense bf16 GEMM), in one run on one device. Per shape also the element-wise 2:4
//! kernel on the sparse tensor cores (A in nv24, B dense, bf16 in, f32 out) against the same
//! dense bf16 GEMM.
//!
//! ```text
//! cargo run --release -p nm-cuda --example bench -- [MxNxK ...] [--patterns 4:8,3:8,2:8,1:8] [--l 32] [--reps 50] [--tc-only]
//! ```
//! `--tc-only`: the bf16 tensor-core kernel and its cuBLAS baselines only (no f32 kernels, no nv24).
//! `--plan`: instead, what a [`Plan`] saves per shape and pattern (f32 kernels with B in
//! nm(N,M,L), then A in nv24): the one-shot host-to-host product (operand compressed and
//! uploaded, kernel looked up, dense operand uploaded, run, C downloaded) against making the
//! plan once, then a run with host operands (copies included) and one with device operands,
//! wall-clock milliseconds per call except the device run (CUDA events).
//! Default shapes: 4096³ and the LLaMA-7B projections of the NM-SpMM paper's Table II
//! (m = 256 … 4096 tokens × (n, k) ∈ {(4096, 4096), (11008, 4096), (4096, 11008)}).
//! Exits with status 2 and the reason when there is no CUDA device.

use std::time::Instant;

use nm_cuda::{Cublas, Gpu, GpuNm, GpuNmBf16, GpuNv24, Nv24Sp, Options, Plan, Version, to_bf16, unavailable};
use nm_format::{Format, Tensor};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut shapes = Vec::new();
    let mut patterns = vec![(4u32, 8u32), (3, 8), (2, 8), (1, 8)];
    let (mut l, mut reps, mut tc_only, mut plans) = (32usize, 50usize, false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--patterns" => {
                patterns = it
                    .next()
                    .map(|p| {
                        p.split(',')
                            .map(|nm| {
                                let (n, m) = nm.split_once(':').unwrap_or_else(|| fail(&format!("bad pattern {nm}")));
                                (n.parse().unwrap_or_else(|_| fail(nm)), m.parse().unwrap_or_else(|_| fail(nm)))
                            })
                            .collect()
                    })
                    .unwrap_or_else(|| fail("--patterns needs N:M,..."))
            }
            "--tc-only" => tc_only = true,
            "--plan" => plans = true,
            "--l" => l = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| fail("--l needs a number")),
            "--reps" => reps = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| fail("--reps needs a number")),
            shape => {
                let dims: Vec<usize> = shape.split('x').filter_map(|d| d.parse().ok()).collect();
                if dims.len() != 3 {
                    fail(&format!("expected MxNxK, got {shape}"));
                }
                shapes.push((dims[0], dims[1], dims[2]));
            }
        }
    }
    if shapes.is_empty() {
        // 4096³ first (the issue's targets), then Table II without repeating it.
        shapes.push((4096, 4096, 4096));
        for m in [256, 1024, 4096] {
            for (n, k) in [(4096, 4096), (11008, 4096), (4096, 11008)] {
                if (m, n, k) != (4096, 4096, 4096) {
                    shapes.push((m, n, k));
                }
            }
        }
    }
    if let Some(why) = unavailable() {
        eprintln!("no CUDA device: {why}");
        std::process::exit(2);
    }
    let gpu = Gpu::open(0).unwrap_or_else(|e| fail(&e.to_string()));
    if plans {
        plan_rows(&gpu, &shapes, &patterns, l, reps);
        return;
    }
    let blas = Cublas::new(&gpu).unwrap_or_else(|e| fail(&e.to_string()));
    let peak = gpu.fp32_peak();
    println!(
        "# {}; FP32 peak {:.1} TFLOP/s; L = {l}; {reps} timed runs after 5 warm-up runs",
        gpu.describe(),
        peak / 1e12
    );
    println!("shape,pattern,sparsity,kernel,ms,useful_tflops,pct_fp32_peak,speedup_vs_cublas");
    for &(m, n, k) in &shapes {
        let a: Vec<f32> = (0..m * k).map(|i| ((i % 997) as f32) * 1e-3 - 0.5).collect();
        let a_dev = gpu.upload(&a).unwrap_or_else(|e| fail(&e.to_string()));
        let mut c = gpu.zeros::<f32>(m * n).unwrap_or_else(|e| fail(&e.to_string()));
        // cuBLAS SGEMM on the dense k×n B, the baseline of every row of this shape.
        let b_dense: Vec<f32> = (0..k * n).map(|i| ((i % 101) as f32) * 1e-2).collect();
        let b_dev = gpu.upload(&b_dense).unwrap_or_else(|e| fail(&e.to_string()));
        let dense_flops = 2.0 * m as f64 * n as f64 * k as f64;
        let sgemm = time(&gpu, reps, || blas.sgemm(&a_dev, &b_dev, &mut c, m, n, k));
        println!(
            "{m}x{n}x{k},dense,0,cublas_sgemm,{sgemm:.4},{:.2},{:.1},1.00",
            dense_flops / sgemm / 1e9,
            100.0 * dense_flops / sgemm * 1e3 / peak
        );
        let a16: Vec<half::bf16> = a.iter().map(|&x| half::bf16::from_f32(x)).collect();
        let b16: Vec<half::bf16> = b_dense.iter().map(|&x| half::bf16::from_f32(x)).collect();
        let (a16_dev, b16_dev) = (gpu.upload(&a16).unwrap(), gpu.upload(&b16).unwrap());
        let mut c16 = gpu.zeros::<half::bf16>(m * n).unwrap();
        let hgemm = time(&gpu, reps, || blas.bf16_gemm(&a16_dev, &b16_dev, &mut c16, m, n, k));
        println!("{m}x{n}x{k},dense,0,cublas_bf16,{hgemm:.4},{:.2},,", dense_flops / hgemm / 1e9);
        drop((b_dev, c16));
        // 2:4 element-wise on the sparse tensor cores: A (m×k) pruned into nv24, B dense bf16
        // (n is padded to a multiple of 8 for the kernel's 16-byte loads).
        match (!tc_only).then(|| nv24_launch(&gpu, &a, m, k, n)) {
            None => {}
            Some(Ok((dev, launch))) => {
                let (b_pad, ldb) = nm_cuda::bf16_padded_rows(&b_dense, n);
                let b_sp = gpu.upload(&b_pad).unwrap_or_else(|e| fail(&e.to_string()));
                let mut work = gpu.zeros::<f32>(launch.workspace(m)).unwrap_or_else(|e| fail(&e.to_string()));
                let ms = time(&gpu, reps, || dev.run(&gpu, &launch, &b_sp, ldb, &mut c, &mut work));
                let tile = &launch.kernel;
                let split = if launch.slices > 1 { format!(" split-k {}", launch.slices) } else { String::new() };
                println!(
                    "{m}x{n}x{k},2:4 nv24,0.5,nv24_sp ({}x{}{split}),{ms:.4},{:.2},,{:.2} (vs cuBLAS bf16)",
                    tile.ms,
                    tile.ns,
                    dev.flops(n) / ms / 1e9,
                    hgemm / ms
                );
            }
            Some(Err(e)) => println!("{m}x{n}x{k},2:4 nv24,0.5,nv24_sp,,,,# {e}"),
        }
        drop(b16_dev);
        // A in bf16 for the tensor-core kernel, once per shape.
        let a_bits: Vec<u16> = a.iter().map(|&x| to_bf16(x)).collect();
        let a_tc = gpu.upload(&a_bits).unwrap_or_else(|e| fail(&e.to_string()));
        for &(keep, win) in &patterns {
            let b = pruned(k, n, (keep, win, l));
            let parts = b.nm_parts().unwrap_or_else(|e| fail(&e.to_string()));
            let useful = 2.0 * m as f64 * n as f64 * k as f64 * keep as f64 / win as f64;
            let sparsity = 1.0 - keep as f64 / win as f64;
            let label = format!("{m}x{n}x{k},{keep}:{win},{sparsity}");
            if !tc_only {
                let mut dev = GpuNm::upload(&gpu, &parts).unwrap_or_else(|e| fail(&e.to_string()));
                for (name, options) in F32_RUNS {
                    let launch = match dev.prepare(&gpu, m, options) {
                        Ok(l) => l,
                        Err(e) => {
                            println!("{label},{name},,,,# {e}");
                            continue;
                        }
                    };
                    let mut work = gpu.zeros::<f32>(launch.workspace(n)).unwrap();
                    let ms = time(&gpu, reps, || dev.run(&gpu, &launch, &a_dev, &mut c, &mut work));
                    println!(
                        "{label},{name} ({:?} {:?}{}{}),{ms:.4},{:.2},{:.1},{:.2}",
                        launch.plan.kernel.version,
                        launch.plan.size,
                        if launch.plan.kernel.packed { " packed" } else { "" },
                        if launch.plan.slices > 1 { format!(" split-k {}", launch.plan.slices) } else { String::new() },
                        useful / ms / 1e9,
                        100.0 * useful / ms * 1e3 / peak,
                        sgemm / ms
                    );
                }
            }
            // The tensor-core kernel as the plan chooses it.
            let tc = GpuNmBf16::upload(&gpu, &parts).and_then(|tc| {
                let launch = tc.prepare(&gpu, m, None, None)?;
                Ok((tc, launch))
            });
            match tc {
                Ok((tc, mut launch)) => {
                    let ms = time(&gpu, reps, || tc.run(&gpu, &mut launch, &a_tc, &mut c));
                    let kernel = &launch.kernel;
                    let split = if launch.slices > 1 { format!(" split-k {}", launch.slices) } else { String::new() };
                    println!(
                        "{label},bf16_tc ({}x{} kt{} x{}{}{}{split}),{ms:.4},{:.2},,{:.2} (vs cuBLAS bf16)",
                        kernel.ms,
                        kernel.ns,
                        kernel.kt,
                        kernel.stages,
                        if kernel.windows { " windows" } else { "" },
                        if kernel.min_blocks > 1 { " 2/SM" } else { "" },
                        useful / ms / 1e9,
                        hgemm / ms
                    );
                }
                Err(e) => println!("{label},bf16_tc,,,,# {e}"),
            }
        }
    }
}

/// What a plan saves, per shape: B in each pattern, then A in nv24 (see the module's doc).
fn plan_rows(gpu: &Gpu, shapes: &[(usize, usize, usize)], patterns: &[(u32, u32)], l: usize, reps: usize) {
    let wall = |reps: usize, f: &mut dyn FnMut()| {
        f();
        let start = Instant::now();
        for _ in 0..reps {
            f();
        }
        start.elapsed().as_secs_f64() * 1e3 / reps as f64
    };
    let or_fail = |r: nm_cuda::Result<()>| r.unwrap_or_else(|e| fail(&e.to_string()));
    let few = reps.clamp(1, 10);
    println!("# {}; {few} wall-clock calls after one (device runs: {reps} timed by events)", gpu.describe());
    println!("shape,operand,one_shot_ms,plan_create_ms,run_host_ms,run_device_ms");
    for &(m, n, k) in shapes {
        let a: Vec<f32> = (0..m * k).map(|i| ((i % 997) as f32) * 1e-3 - 0.5).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i % 101) as f32) * 1e-2).collect();
        let mut c = vec![0f32; m * n];
        let mut c_dev = gpu.zeros::<f32>(m * n).unwrap_or_else(|e| fail(&e.to_string()));
        let mut row = |operand: String, one_shot: &mut dyn FnMut(), create: &mut dyn FnMut() -> Plan, dense: &[f32]| {
            let one_shot = wall(few, one_shot);
            let mut plan = create();
            let created = wall(few, &mut || plan = create());
            let host = wall(few, &mut || or_fail(plan.run_host(dense, &mut c, None)));
            let dense_dev = gpu.upload(dense).unwrap_or_else(|e| fail(&e.to_string()));
            let device = time(gpu, reps, || plan.run(&dense_dev, &mut c_dev, None));
            println!("{m}x{n}x{k},{operand},{one_shot:.3},{created:.3},{host:.3},{device:.4}");
        };
        for &(keep, win) in patterns {
            let parts = pruned(k, n, (keep, win, l)).nm_parts().unwrap_or_else(|e| fail(&e.to_string()));
            row(
                format!("B in nm({keep},{win},{l})"),
                &mut || {
                    drop(
                        nm_cuda::multiply(gpu, &a, m, &parts, Options::default())
                            .unwrap_or_else(|e| fail(&e.to_string())),
                    )
                },
                &mut || Plan::nm(gpu, &parts, m, Options::default()).unwrap_or_else(|e| fail(&e.to_string())),
                &a,
            );
        }
        let whole = Tensor::from_dense(&[m, k], &a, &Format::dense(2)).unwrap_or_else(|e| fail(&e.to_string()));
        let (a24, _) = whole.prune(&Format::nv24(2)).unwrap_or_else(|e| fail(&e.to_string()));
        row(
            "A in nv24".into(),
            &mut || drop(nm_cuda::multiply_nv24(gpu, &a24, &b, n, None, None).unwrap_or_else(|e| fail(&e.to_string()))),
            &mut || {
                let sp = Nv24Sp::compress(&a24).unwrap_or_else(|e| fail(&e.to_string()));
                Plan::nv24(gpu, &sp, n, None, None).unwrap_or_else(|e| fail(&e.to_string()))
            },
            &b,
        );
    }
}

/// The f32 kernel runs of every shape and pattern: the plan's choice, then each version.
const F32_RUNS: [(&str, Options); 4] = [
    ("auto", Options { version: None, tile: None, slices: None }),
    ("v1", Options { version: Some(Version::V1), tile: None, slices: None }),
    ("v2", Options { version: Some(Version::V2), tile: None, slices: None }),
    ("v3", Options { version: Some(Version::V3), tile: None, slices: None }),
];

/// A dense k×n matrix pruned into nm(N,M,L) (keep the largest vectors).
fn pruned(k: usize, n: usize, nm: (u32, u32, usize)) -> Tensor<f32> {
    let dense: Vec<f32> = (0..k * n).map(|i| (((i as u64 * 2654435761) % 1000) as f32) * 1e-3 - 0.5).collect();
    let whole = Tensor::from_dense(&[k, n], &dense, &Format::dense(2)).unwrap_or_else(|e| fail(&e.to_string()));
    let format = Format::nm(nm.0, nm.1, nm.2).unwrap_or_else(|e| fail(&e.to_string()));
    whole.prune(&format).unwrap_or_else(|e| fail(&e.to_string())).0
}

/// A (m×k, row-major) pruned into nv24 (the 2 largest of every 4), compressed and uploaded,
/// with its launch for `n` columns.
fn nv24_launch(gpu: &Gpu, a: &[f32], m: usize, k: usize, n: usize) -> nm_cuda::Result<(GpuNv24, nm_cuda::Nv24Launch)> {
    let whole = Tensor::from_dense(&[m, k], a, &Format::dense(2))?;
    let (pruned, _) = whole.prune(&Format::nv24(2))?;
    let dev = GpuNv24::upload(gpu, &Nv24Sp::compress(&pruned)?)?;
    let launch = dev.prepare(gpu, n, None, None)?;
    Ok((dev, launch))
}

/// Milliseconds per call after 5 warm-up calls.
fn time(gpu: &Gpu, reps: usize, mut f: impl FnMut() -> nm_cuda::Result<()>) -> f64 {
    for _ in 0..5 {
        f().unwrap_or_else(|e| fail(&e.to_string()));
    }
    gpu.synchronize().unwrap_or_else(|e| fail(&e.to_string()));
    gpu.time_ms(reps, &mut f).unwrap_or_else(|e| fail(&e.to_string()))
}

fn fail(why: &str) -> ! {
    eprintln!("error: {why}");
    std::process::exit(1)
}
