//! Every kernel variant compiles with NVRTC for sm_80 and sm_90a (real architectures, so the
//! inline PTX is assembled by ptxas) with no register spills — no GPU needed.
//!
//! NVRTC comes from the PyPI wheel `nvidia-cuda-nvrtc-cu12` (`.ci/run` installs it and puts it
//! on `LD_LIBRARY_PATH`). Without it the test prints why it is skipped, unless
//! `NMSPARSE_REQUIRE_NVRTC=1`, which CI sets so that a missing compiler cannot pass as green.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use nm_cuda::kernels::{Variant, every_variant};
use nm_cuda::nvrtc::{compile, nvrtc_present, usage};

#[test]
fn every_kernel_compiles_for_sm80_and_sm90a_without_spills() {
    if !nvrtc_present() {
        assert!(
            std::env::var("NMSPARSE_REQUIRE_NVRTC").is_err(),
            "NMSPARSE_REQUIRE_NVRTC is set but libnvrtc.so.12 cannot be loaded (LD_LIBRARY_PATH?)"
        );
        println!("skipped: no NVRTC (libnvrtc.so.12 not on the loader path)");
        return;
    }
    let variants = every_variant();
    let jobs: Vec<(&str, &Variant)> =
        ["sm_80", "sm_90a"].iter().flat_map(|&arch| variants.iter().map(move |v| (arch, v))).collect();
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    // NVRTC is thread-safe; each job is one program.
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(&(arch, v)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if let Some(problem) = check(arch, v) {
                        failures.lock().unwrap().push(problem);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let compiled = jobs.len();
    println!("{compiled} kernel compilations ({} variants × sm_80, sm_90a)", variants.len());
    assert!(failures.is_empty(), "{} of {compiled} compilations failed:\n{}", failures.len(), failures.join("\n"));
}

/// What is wrong with `v` compiled for `arch`, if anything.
fn check(arch: &str, v: &Variant) -> Option<String> {
    let compiled = match compile(v.function, v.source, &v.options, arch) {
        Err(e) => return Some(format!("{arch} {}: {e}", v.label)),
        Ok(c) => c,
    };
    let report = usage(&compiled.log);
    if report.is_empty() {
        return Some(format!("{arch} {}: no ptxas report in the log:\n{}", v.label, compiled.log));
    }
    let spills: Vec<String> = report
        .iter()
        .filter(|u| u.spill_stores > 0 || u.spill_loads > 0)
        .map(|u| {
            format!(
                "{arch} {} ({}): {} registers, {} bytes spill stores, {} bytes spill loads",
                v.label, u.function, u.registers, u.spill_stores, u.spill_loads
            )
        })
        .collect();
    (!spills.is_empty()).then(|| spills.join("\n"))
}
