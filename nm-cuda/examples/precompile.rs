//! Fills a CUBIN cache for another machine: every kernel variant of `kernels::every_variant`
//! for one architecture, so a GPU machine without NVRTC runs them from
//! `NMSPARSE_CUDA_CACHE=DIR`; with `tune`, also the bf16 tensor-core variants `examples/tune.rs`
//! times (4:8, 2:8, 1:8 at L = 32, 64, 128 and 256).
//!
//! ```text
//! cargo run --release -p nm-cuda --example precompile -- sm_90 target/cubin [tune]
//! ```

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (arch, dir, tune) = match args.as_slice() {
        [arch, dir] => (arch, dir, false),
        [arch, dir, tune] if tune == "tune" => (arch, dir, true),
        _ => {
            eprintln!("usage: precompile ARCH DIR [tune]   (ARCH: sm_80, sm_90, ...)");
            std::process::exit(2);
        }
    };
    let dir = std::path::Path::new(dir);
    let mut variants = nm_cuda::kernels::every_variant();
    if tune {
        let patterns = [(4, 8), (2, 8), (1, 8)];
        for nm in [32, 64, 128, 256].into_iter().flat_map(|l| patterns.map(|(n, m)| (n, m, l))) {
            let set = nm_cuda::plan::Bf16Kernel::tuning_set(nm).expect("a multiple of 32 has every tile");
            for kernel in set {
                let v = nm_cuda::kernels::Variant::bf16(&kernel);
                if !variants.contains(&v) {
                    variants.push(v);
                }
            }
        }
    }
    for (i, v) in variants.iter().enumerate() {
        if let Err(e) = nm_cuda::nvrtc::cubin_in(dir, v.function, v.source, &v.options, arch) {
            eprintln!("error: {}: {e}", v.label);
            std::process::exit(1);
        }
        eprint!("\r{}/{} compiled", i + 1, variants.len());
    }
    eprintln!("\n{} kernels for {arch} in {}", variants.len(), dir.display());
}
