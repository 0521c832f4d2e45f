//! The CUDA C sources and the variants the library can launch.

use crate::plan::{Bf16Kernel, DeviceLimits, F32Kernel, Nv24Kernel, Options, TileSize, Version, plan_f32};

/// A kernel source with the copy and fragment helpers it shares with the others
/// (`kernels/cp_async.cuh`) ahead of it: NVRTC is given one source and no include path.
macro_rules! with_helpers {
    ($file:literal) => {
        concat!(include_str!("../kernels/cp_async.cuh"), "\n", include_str!($file))
    };
}

/// f32 NM-SpMM (V1/V2/V3 by `-D` options).
pub const F32_SOURCE: &str = with_helpers!("../kernels/nm_spmm_f32.cu");
/// bf16 tensor-core NM-SpMM.
pub const BF16_TC_SOURCE: &str = with_helpers!("../kernels/nm_spmm_bf16_tc.cu");
/// 2:4 (nv24) SpMM on sparse tensor cores.
pub const NV24_SP_SOURCE: &str = with_helpers!("../kernels/nv24_spmm_sp.cu");
/// A bf16 transpose (A for the tensor-core kernel).
pub const TRANSPOSE_BF16_SOURCE: &str = include_str!("../kernels/transpose_bf16.cu");
/// The split-K reduction.
pub const REDUCE_SOURCE: &str = include_str!("../kernels/splitk_reduce.cu");
/// f32 rows rounded to bf16 in padded rows (the 2:4 kernel's B from f32).
pub const TO_BF16_SOURCE: &str = include_str!("../kernels/to_bf16.cu");

/// A source with the options that make it one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variant {
    /// Entry point (and cache file prefix).
    pub function: &'static str,
    /// CUDA C.
    pub source: &'static str,
    /// NVRTC options (`-D…`).
    pub options: Vec<String>,
    /// Human-readable description, for reports.
    pub label: String,
}

impl Variant {
    /// The f32 variant `kernel`.
    pub fn f32(kernel: &F32Kernel) -> Variant {
        let t = &kernel.tile;
        Variant {
            function: "nm_spmm_f32",
            source: F32_SOURCE,
            options: kernel.defines(),
            label: format!(
                "f32 {:?} {}x{} tile, {}:{} L={}, ks={}{}{}",
                kernel.version,
                t.ms,
                t.ns,
                kernel.nm.0,
                kernel.nm.1,
                kernel.nm.2,
                kernel.ks,
                if kernel.packed { ", packed" } else { "" },
                if kernel.vec_a { ", float4 A" } else { "" }
            ),
        }
    }

    /// The bf16 tensor-core variant `kernel`.
    pub fn bf16(kernel: &Bf16Kernel) -> Variant {
        Variant {
            function: "nm_spmm_bf16_tc",
            source: BF16_TC_SOURCE,
            options: kernel.defines(),
            label: format!(
                "bf16 tensor cores {}x{} tile (warps {}x{}), {}:{} L={}, {} stages of {} kept rows{}",
                kernel.ms,
                kernel.ns,
                kernel.wm,
                kernel.wn,
                kernel.nm.0,
                kernel.nm.1,
                kernel.nm.2,
                kernel.stages,
                kernel.kt,
                if kernel.windows { " by windows" } else { "" }
            ),
        }
    }

    /// The 2:4 sparse tensor-core variant `kernel`.
    pub fn nv24_sp(kernel: &Nv24Kernel) -> Variant {
        Variant {
            function: "nv24_spmm_sp",
            source: NV24_SP_SOURCE,
            options: kernel.defines(),
            label: format!(
                "nv24 bf16 sparse tensor cores (mma.sp) {}x{} tile, {} stages of k{}",
                kernel.ms,
                kernel.ns,
                kernel.stages,
                32 * kernel.kstep
            ),
        }
    }

    /// The bf16 transpose of A that the tensor-core kernel gathers from.
    pub fn transpose_bf16() -> Variant {
        Variant {
            function: "nm_bf16_transpose",
            source: TRANSPOSE_BF16_SOURCE,
            options: Vec::new(),
            label: "bf16 transpose".into(),
        }
    }

    /// f32 rows to bf16 rows padded to a multiple of 8 (B of the 2:4 kernel, from f32).
    pub fn to_bf16() -> Variant {
        Variant {
            function: "nm_f32_to_bf16_rows",
            source: TO_BF16_SOURCE,
            options: Vec::new(),
            label: "f32 to bf16 rows".into(),
        }
    }

    /// The split-K reduction.
    pub fn reduce() -> Variant {
        Variant {
            function: "nm_splitk_reduce",
            source: REDUCE_SOURCE,
            options: Vec::new(),
            label: "split-K reduce".into(),
        }
    }
}

/// The variants the compile check builds: every version and parameter set for the N:M
/// patterns of the acceptance lists, at L = 1 (a group per column), 8 (a group per float4
/// chunk), 32 (a group per warp tile) and 24 (groups straddling blocks), with float4 loads of
/// A and without (k % 4 ≠ 0, at L = 32), the tensor-core kernel as `Bf16Kernel::choose` picks it
/// and staged both ways in every parameter set that fits an H100 or an A100 (every tile for four
/// patterns, the medium one for the others; the medium one at L = 64, 128 and 256 too, a group
/// as wide as a block or wider), and the 2:4 sparse tensor-core kernel in every parameter set.
pub fn every_variant() -> Vec<Variant> {
    let mut out = vec![Variant::reduce(), Variant::transpose_bf16(), Variant::to_bf16()];
    for size in [TileSize::Small, TileSize::Medium, TileSize::Large] {
        out.push(Variant::nv24_sp(&Nv24Kernel::new(size)));
    }
    // The large tile as an A100 runs it (shorter stages).
    out.push(Variant::nv24_sp(&Nv24Kernel::new(TileSize::Large).fit(DeviceLimits::A100)));
    let mut add = |v: Variant| {
        if !out.contains(&v) {
            out.push(v);
        }
    };
    let patterns = [(1, 2), (2, 4), (1, 4), (4, 8), (3, 8), (2, 8), (1, 8), (4, 16), (16, 32), (32, 32)];
    for &(n, m) in &patterns {
        for l in [1, 8, 32, 24] {
            let ks: &[usize] = if l == 32 { &[4096, 4095] } else { &[4096] };
            for version in [Version::V1, Version::V2, Version::V3] {
                for size in [TileSize::Small, TileSize::Medium, TileSize::Large] {
                    for &k in ks {
                        let options = Options { version: Some(version), tile: Some(size), slices: None };
                        if let Ok(plan) = plan_f32(1024, 1024, k, (n, m, l), DeviceLimits::H100, options) {
                            add(Variant::f32(&plan.kernel));
                        }
                    }
                }
            }
            // The pattern only sets constants in the tensor-core kernel: every tile for four
            // patterns, the medium one for the rest, to keep the check short.
            let sizes: &[TileSize] = if [(2, 8), (1, 8), (3, 8), (16, 32)].contains(&(n, m)) {
                &[TileSize::Small, TileSize::Medium, TileSize::Large]
            } else {
                &[TileSize::Medium]
            };
            bf16_variants((n, m, l), sizes, &mut add);
        }
    }
    // Groups as wide as a block or wider (VENOM's V of 64 and more): one group slot per block,
    // each gathered row of A serving every column of the block.
    for nm in [(4, 8), (2, 8), (1, 8)] {
        for l in [64, 128, 256] {
            bf16_variants((nm.0, nm.1, l), &[TileSize::Medium], &mut add);
        }
    }
    out
}

/// The bf16 tensor-core variants for `nm` (N, M, L) that the library picks for three output
/// shapes on an H100 and an A100, and the tiles `sizes` staged both ways, fitted to each.
fn bf16_variants(nm: (usize, usize, usize), sizes: &[TileSize], add: &mut impl FnMut(Variant)) {
    for limits in [DeviceLimits::H100, DeviceLimits::A100] {
        for (rows, cols) in [(4096, 4096), (1024, 4096), (256, 4096)] {
            if let Ok(kernel) = Bf16Kernel::choose(rows, cols, nm, limits) {
                add(Variant::bf16(&kernel));
            }
        }
    }
    for &size in sizes {
        for limits in [DeviceLimits::H100, DeviceLimits::A100] {
            for windows in [false, true] {
                let kernel = Bf16Kernel::new(size, nm)
                    .map(|k| if windows { k.windowed() } else { k })
                    .and_then(|k| k.fit(limits));
                if let Ok(kernel) = kernel {
                    add(Variant::bf16(&kernel));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compile_check_covers_every_code_path() {
        let all = every_variant();
        let has = |needle: &str| all.iter().any(|v| v.options.iter().any(|o| o == needle));
        for needle in ["-DPACKED=1", "-DPACKED=0", "-DPIPELINE=1", "-DPIPELINE=0", "-DVEC_A=1", "-DVEC_A=0"] {
            assert!(has(needle), "no variant with {needle}");
        }
        for l in [1, 8, 24, 32] {
            assert!(has(&format!("-DNM_L={l}")), "no variant with L = {l}");
        }
        let tc: Vec<&Variant> = all.iter().filter(|v| v.function == "nm_spmm_bf16_tc").collect();
        for needle in [
            "-DMS=64",
            "-DMS=128",
            "-DMS=256",
            "-DNM_L=8",
            "-DNM_L=24",
            "-DNM_L=32",
            "-DNM_L=128",
            "-DNM_L=256",
            "-DGMAX=1",
            "-DKT=16",
            "-DSTAGES=2",
            "-DWINDOWS=0",
            "-DWINDOWS=1",
            "-DNS=256",
            "-DMIN_BLOCKS=2",
        ] {
            assert!(tc.iter().any(|v| v.options.iter().any(|o| o == needle)), "no tensor-core variant with {needle}");
        }
        assert!(all.iter().any(|v| v.function == "nm_bf16_transpose"));
        assert!(all.iter().any(|v| v.function == "nm_splitk_reduce"));
        assert!(all.iter().any(|v| v.function == "nm_f32_to_bf16_rows"));
        assert_eq!(all.iter().filter(|v| v.function == "nv24_spmm_sp").count(), 4);
    }
}
