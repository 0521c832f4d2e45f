//! A tuning sweep on a GPU: variants of the f32 NM-SpMM kernel (blocks per SM the registers
//! allow), of the 2:4 sparse tensor-core kernel (tile, k32 slices per stage) and of the bf16
//! N:M tensor-core kernel (tile, warp tile, kept rows per stage, stages, blocks per SM), timed
//! per shape, each result compared exactly with the default variant's (integer-valued
//! operands, so every sum is exact whatever the order). Prints CSV; the winners are the
//! defaults in `plan.rs`. (The first sweep, 2026-11-25, also tried more kept rows per f32 step
//! and more stages: slower, or past the shared memory; see BENCHMARKS.md.)
//!
//! ```text
//! cargo run --release -p nm-cuda --example tune -- [MxNxK ...] [--reps 20] [--only f32,nv24,bf16] [--l 32,128]
//! ```
//!
//! `--l`: the group widths L of the bf16 sweep (default 32; the f32 and 2:4 sweeps use 32).

use nm_cuda::plan::{Bf16Kernel, F32Kernel, Nv24Kernel, plan_f32, plan_kernel};
use nm_cuda::{
    Cublas, Gpu, GpuNm, GpuNmBf16, GpuNv24, Nv24Sp, Options, TileSize, bf16_padded_rows, to_bf16, unavailable,
};
use nm_format::{Format, Tensor};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut shapes, mut reps, mut ls) = (Vec::new(), 20usize, vec![32usize]);
    let mut only: Vec<String> = ["f32", "nv24", "bf16"].map(String::from).to_vec();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--only" {
            only =
                it.next().unwrap_or_else(|| fail("--only needs f32,nv24,bf16")).split(',').map(String::from).collect();
        } else if a == "--l" {
            let list = it.next().unwrap_or_else(|| fail("--l needs L,..."));
            ls = list
                .split(',')
                .map(|v| v.parse().unwrap_or_else(|_| fail(&format!("--l: {v} is no number"))))
                .collect();
        } else if a == "--reps" {
            reps = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| fail("--reps needs a number"));
        } else {
            let d: Vec<usize> = a.split('x').filter_map(|v| v.parse().ok()).collect();
            if d.len() != 3 {
                fail(&format!("expected MxNxK, got {a}"));
            }
            shapes.push((d[0], d[1], d[2]));
        }
    }
    if shapes.is_empty() {
        shapes.push((4096, 4096, 4096));
    }
    if let Some(why) = unavailable() {
        eprintln!("no CUDA device: {why}");
        std::process::exit(2);
    }
    let gpu = Gpu::open(0).unwrap_or_else(|e| fail(&e.to_string()));
    println!("# {}; {reps} timed runs after 5 warm-up runs", gpu.describe());
    println!("shape,kernel,pattern,variant,ms,useful_tflops,equal_to_default");
    for (m, n, k) in shapes {
        // Small integers: exact in f32 and bf16, and every sum exact in f32.
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 + i / k) % 5) as f32 - 2.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 3 + i / n) % 7) as f32 - 3.0).collect();
        if only.iter().any(|o| o == "f32") {
            f32_sweep(&gpu, &a, &b, (m, n, k), reps);
        }
        if only.iter().any(|o| o == "nv24") {
            nv24_sweep(&gpu, &a, &b, (m, n, k), reps);
        }
        if only.iter().any(|o| o == "bf16") {
            bf16_sweep(&gpu, &a, &b, (m, n, k), &ls, reps);
        }
    }
}

fn f32_sweep(gpu: &Gpu, a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), reps: usize) {
    let a_dev = gpu.upload(a).unwrap_or_else(|e| fail(&e.to_string()));
    for nm in [(4u32, 8u32), (2, 8), (1, 8)] {
        let whole = Tensor::from_dense(&[k, n], b, &Format::dense(2)).unwrap_or_else(|e| fail(&e.to_string()));
        let format = Format::nm(nm.0, nm.1, 32).unwrap_or_else(|e| fail(&e.to_string()));
        let parts = whole.prune(&format).unwrap_or_else(|e| fail(&e.to_string())).0;
        let parts = parts.nm_parts().unwrap_or_else(|e| fail(&e.to_string()));
        let mut dev = GpuNm::upload(gpu, &parts).unwrap_or_else(|e| fail(&e.to_string()));
        let base = plan_f32(m, n, k, (nm.0 as usize, nm.1 as usize, 32), gpu.limits(), Options::default())
            .unwrap_or_else(|e| fail(&e.to_string()));
        let mut reference = None;
        let mut bounds = vec![base.kernel.min_blocks];
        bounds.extend([1, 2, 4].into_iter().filter(|b| *b != base.kernel.min_blocks));
        for min_blocks in bounds {
            let kernel = F32Kernel { min_blocks, ..base.kernel };
            let label = format!(
                "{:?} {:?}{} blocks/SM {min_blocks}{}",
                kernel.version,
                base.size,
                if base.slices > 1 { format!(" split-k {}", base.slices) } else { String::new() },
                if min_blocks == base.kernel.min_blocks { " (default)" } else { "" }
            );
            let run = plan_kernel(kernel, base.size, m, n, k, gpu.limits(), Some(base.slices)).and_then(|plan| {
                let launch = dev.prepare_plan(gpu, m, plan)?;
                let mut c = gpu.zeros::<f32>(m * n)?;
                let mut work = gpu.zeros::<f32>(launch.workspace(n))?;
                let ms = time(gpu, reps, || dev.run(gpu, &launch, &a_dev, &mut c, &mut work))?;
                Ok((ms, gpu.download(&c)?))
            });
            report((m, n, k), "f32", &format!("{}:{}", nm.0, nm.1), &label, run, dev.flops(m), &mut reference);
        }
    }
}

fn nv24_sweep(gpu: &Gpu, a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), reps: usize) {
    let whole = Tensor::from_dense(&[m, k], a, &Format::dense(2)).unwrap_or_else(|e| fail(&e.to_string()));
    let pruned = whole.prune(&Format::nv24(2)).unwrap_or_else(|e| fail(&e.to_string())).0;
    let sp = Nv24Sp::compress(&pruned).unwrap_or_else(|e| fail(&e.to_string()));
    let dev = GpuNv24::upload(gpu, &sp).unwrap_or_else(|e| fail(&e.to_string()));
    let (b_pad, ldb) = bf16_padded_rows(b, n);
    let b_dev = gpu.upload(&b_pad).unwrap_or_else(|e| fail(&e.to_string()));
    let chosen = Nv24Kernel::choose(m, n, gpu.limits());
    let mut variants = vec![chosen];
    for size in [TileSize::Small, TileSize::Medium, TileSize::Large] {
        for kstep in [4, 2] {
            let v = Nv24Kernel { kstep, ..Nv24Kernel::new(size) }.fit(gpu.limits());
            if !variants.contains(&v) {
                variants.push(v);
            }
        }
    }
    let mut reference = None;
    for kernel in variants {
        let label = format!(
            "{}x{} warp {}x{} k{} x{} stages ({} KiB){}",
            kernel.ms,
            kernel.ns,
            kernel.wm,
            kernel.wn,
            32 * kernel.kstep,
            kernel.stages,
            kernel.shared_bytes() / 1024,
            if kernel == chosen { " (default)" } else { "" }
        );
        let run = dev.prepare_kernel(gpu, n, kernel, None).and_then(|launch| {
            let mut c = gpu.zeros::<f32>(m * n)?;
            let mut work = gpu.zeros::<f32>(launch.workspace(m))?;
            let ms = time(gpu, reps, || dev.run(gpu, &launch, &b_dev, ldb, &mut c, &mut work))?;
            Ok((ms, gpu.download(&c)?))
        });
        report((m, n, k), "nv24_sp", "2:4", &label, run, dev.flops(n), &mut reference);
    }
}

/// The bf16 sweep at each group width of `ls`, against one dense baseline timed first.
fn bf16_sweep(gpu: &Gpu, a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), ls: &[usize], reps: usize) {
    // The dense baseline in the same run: cuBLAS's bf16 GEMM.
    let blas = Cublas::new(gpu).unwrap_or_else(|e| fail(&e.to_string()));
    let a16: Vec<half::bf16> = a.iter().map(|&x| half::bf16::from_f32(x)).collect();
    let b16: Vec<half::bf16> = b.iter().map(|&x| half::bf16::from_f32(x)).collect();
    let (a16_dev, b16_dev) = (gpu.upload(&a16), gpu.upload(&b16));
    let dense = a16_dev.and_then(|a_dev| {
        let b_dev = b16_dev?;
        let mut c16 = gpu.zeros::<half::bf16>(m * n)?;
        time(gpu, reps, || blas.bf16_gemm(&a_dev, &b_dev, &mut c16, m, n, k))
    });
    match &dense {
        Ok(ms) => println!("{m}x{n}x{k},cublas_bf16,dense,,{ms:.4},{:.2},", 2.0 * (m * n * k) as f64 / ms / 1e9),
        Err(e) => println!("{m}x{n}x{k},cublas_bf16,dense,,,,# {e}"),
    }
    let a_bits: Vec<u16> = a.iter().map(|&x| to_bf16(x)).collect();
    let a_dev = gpu.upload(&a_bits).unwrap_or_else(|e| fail(&e.to_string()));
    let limits = gpu.limits();
    for (l, nm) in ls.iter().flat_map(|&l| [(4u32, 8u32), (2, 8), (1, 8)].map(|nm| (l, nm))) {
        let whole = Tensor::from_dense(&[k, n], b, &Format::dense(2)).unwrap_or_else(|e| fail(&e.to_string()));
        let format = Format::nm(nm.0, nm.1, l).unwrap_or_else(|e| fail(&e.to_string()));
        let parts = whole.prune(&format).unwrap_or_else(|e| fail(&e.to_string())).0;
        let parts = parts.nm_parts().unwrap_or_else(|e| fail(&e.to_string()));
        let dev = GpuNmBf16::upload(gpu, &parts).unwrap_or_else(|e| fail(&e.to_string()));
        let shape = (nm.0 as usize, nm.1 as usize, l);
        let chosen = Bf16Kernel::choose(m, n, shape, limits).unwrap_or_else(|e| fail(&e.to_string()));
        let mut variants = vec![chosen];
        for v in Bf16Kernel::tuning_set(shape).unwrap_or_else(|e| fail(&e.to_string())) {
            if !variants.contains(&v) {
                variants.push(v);
            }
        }
        let mut reference = None;
        let pattern = format!("{}:{} L={l}", nm.0, nm.1);
        let flops = 2.0 * (m * n * k) as f64 * nm.0 as f64 / nm.1 as f64;
        for kernel in variants {
            let label = format!(
                "{}x{} warp {}x{} kt{} x{} stages {} blocks/SM ({} KiB){}{}",
                kernel.ms,
                kernel.ns,
                kernel.wm,
                kernel.wn,
                kernel.kt,
                kernel.stages,
                kernel.min_blocks,
                kernel.shared_bytes() / 1024,
                if kernel.windows { " by windows" } else { "" },
                if kernel == chosen { " (default)" } else { "" }
            );
            let run = dev.prepare_kernel(gpu, m, kernel, None).and_then(|mut launch| {
                let mut c = gpu.zeros::<f32>(m * n)?;
                let ms = time(gpu, reps, || dev.run(gpu, &mut launch, &a_dev, &mut c))?;
                Ok((ms, gpu.download(&c)?))
            });
            if let (Ok((ms, _)), Ok(dense)) = (&run, &dense) {
                println!("# {pattern} {label}: {:.2}x cuBLAS bf16", dense / ms);
            }
            report((m, n, k), "bf16_tc", &pattern, &label, run, flops, &mut reference);
        }
        // The transpose of A alone, part of every time above.
        let transpose = dev
            .prepare_kernel(gpu, m, chosen, None)
            .and_then(|mut launch| time(gpu, reps, || dev.transpose(gpu, &mut launch, &a_dev)));
        match transpose {
            Ok(ms) => println!("{m}x{n}x{k},bf16_transpose,{pattern},A only,{ms:.4},,"),
            Err(e) => println!("{m}x{n}x{k},bf16_transpose,,,,,# {e}"),
        }
    }
}

/// One CSV row; the first successful run is the reference the others must equal.
fn report(
    (m, n, k): (usize, usize, usize),
    kernel: &str,
    pattern: &str,
    label: &str,
    run: nm_cuda::Result<(f64, Vec<f32>)>,
    flops: f64,
    reference: &mut Option<Vec<f32>>,
) {
    match run {
        Ok((ms, c)) => {
            let equal = reference.get_or_insert_with(|| c.clone()) == &c;
            println!("{m}x{n}x{k},{kernel},{pattern},{label},{ms:.4},{:.2},{equal}", flops / ms / 1e9);
        }
        Err(e) => println!("{m}x{n}x{k},{kernel},{pattern},{label},,,# {e}"),
    }
}

/// Milliseconds per call after 5 warm-up calls.
fn time(gpu: &Gpu, reps: usize, mut f: impl FnMut() -> nm_cuda::Result<()>) -> nm_cuda::Result<f64> {
    for _ in 0..5 {
        f()?;
    }
    gpu.synchronize()?;
    gpu.time_ms(reps, &mut f)
}

fn fail(why: &str) -> ! {
    eprintln!("error: {why}");
    std::process::exit(1)
}
