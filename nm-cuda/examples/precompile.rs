//! Fills a CUBIN cache for another machine: every kernel variant of `kernels::every_variant`
//! for one architecture, so a GPU machine without NVRTC runs them from
//! `NMSPARSE_CUDA_CACHE=DIR`.
//!
//! ```text
//! cargo run --release -p nm-cuda --example precompile -- sm_90 target/cubin
//! ```

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [arch, dir] = args.as_slice() else {
        eprintln!("usage: precompile ARCH DIR   (ARCH: sm_80, sm_90, ...)");
        std::process::exit(2);
    };
    let dir = std::path::Path::new(dir);
    let variants = nm_cuda::kernels::every_variant();
    for (i, v) in variants.iter().enumerate() {
        if let Err(e) = nm_cuda::nvrtc::cubin_in(dir, v.function, v.source, &v.options, arch) {
            eprintln!("error: {}: {e}", v.label);
            std::process::exit(1);
        }
        eprint!("\r{}/{} compiled", i + 1, variants.len());
    }
    eprintln!("\n{} kernels for {arch} in {}", variants.len(), dir.display());
}
