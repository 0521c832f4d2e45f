//! The CUDA kernel sources themselves, run on the host: `kernels/emulate/harness.cpp` compiles
//! `nm_spmm_f32.cu` and `splitk_reduce.cu` with a small CUDA emulation (a thread per CUDA
//! thread, barriers for `__syncthreads`, cp.async as an immediate copy) under AddressSanitizer
//! and UBSan, so this checks the kernels' indexing, ragged edges, packing, the double-buffer
//! schedule's buffer use and split-K — and any out-of-bounds or misaligned access — on
//! machines without a GPU. Results must equal the CPU kernel's (small integers: exact).
//! Needs a C++20 compiler (`$CXX`, else `c++`); what it cannot check is timing and the real
//! cp.async/PTX semantics, which `nvrtc_check` (assembly) and `gpu` (a device) cover.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use nm_cuda::plan::{
    Bf16Kernel, DeviceLimits, F32Plan, Nv24Kernel, Options, TileSize, Version, need_mask, plan_f32, split_k, tables,
};
use nm_cuda::{Nv24Sp, to_bf16};
use nm_format::NmParts;

mod common;
use common::{cpu_reference, random_nm, random_nv24};

/// (N, M, L) and (m, n, k).
type Case = ((u32, u32, usize), (usize, usize, usize));

fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nm-cuda-emulated");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `harness` (harness.cpp or harness_tc.cpp) built for a kernel variant's `defines`, cached by
/// the options and the sources, so an edited kernel is rebuilt.
fn harness(harness: &str, defines: &[String]) -> PathBuf {
    let kernels = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in [
        "nm_spmm_f32.cu",
        "nm_spmm_bf16_tc.cu",
        "nv24_spmm_sp.cu",
        "splitk_reduce.cu",
        "transpose_bf16.cu",
        "to_bf16.cu",
        "cp_async.cuh",
        "emulate/cuda_host.h",
        "emulate/harness.h",
        "emulate/harness.cpp",
        "emulate/harness_tc.cpp",
        "emulate/harness_sp.cpp",
        "emulate/harness_to_bf16.cpp",
    ] {
        for b in std::fs::read(kernels.join(file)).unwrap() {
            hash = (hash ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let name: String = defines.join("").chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let exe = scratch().join(format!("{}-{name}-{hash:016x}", harness.trim_end_matches(".cpp")));
    if exe.exists() {
        return exe;
    }
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    // Two jobs may build the same harness at once: each writes its own file, then renames.
    static BUILDS: AtomicUsize = AtomicUsize::new(0);
    let tmp = exe.with_extension(format!("tmp{}", BUILDS.fetch_add(1, Ordering::Relaxed)));
    let out = Command::new(&cxx)
        .args(["-std=c++20", "-O1", "-g", "-pthread", "-Wno-unknown-pragmas", "-DNMS_HOST_EMULATION"])
        .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"])
        .args(defines)
        .arg(kernels.join("emulate").join(harness))
        .arg("-o")
        .arg(&tmp)
        .output()
        .unwrap_or_else(|e| panic!("the C++ compiler `{cxx}` does not run: {e}"));
    assert!(out.status.success(), "{cxx} failed on the emulation harness:\n{}", String::from_utf8_lossy(&out.stderr));
    std::fs::rename(&tmp, &exe).unwrap();
    exe
}

/// Runs the emulation harness `file` built for `options` on `input` (its header and arrays);
/// C as f32, row-major. `tag` names the scratch files and the failure.
fn run_harness(file: &str, options: &[String], tag: &str, input: Vec<u8>) -> Vec<f32> {
    let (in_path, out_path) = (scratch().join(format!("{tag}.in")), scratch().join(format!("{tag}.out")));
    std::fs::write(&in_path, input).unwrap();
    let run = Command::new(harness(file, options)).arg(&in_path).arg(&out_path).output().unwrap();
    assert!(run.status.success(), "{tag}: the emulated kernel failed:\n{}", String::from_utf8_lossy(&run.stderr));
    std::fs::read(&out_path).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Runs `plan` on the host emulation; C, row-major.
fn emulate(plan: &F32Plan, parts: &NmParts<f32>, a: &[f32], m: usize, tag: &str) -> Vec<f32> {
    let t = tables(&plan.kernel, parts);
    let [k, n] = parts.shape;
    let info = if t.col_info.is_empty() { vec![-1] } else { t.col_info };
    let header = [
        m,
        n,
        k,
        parts.rows(),
        parts.cols(),
        plan.kernel.steps(parts.rows()),
        plan.steps_per_slice,
        plan.slices,
        plan.grid.0,
        plan.grid.1,
        plan.kernel.tile.threads(),
        plan.kernel.shared_bytes(),
        t.dtab.len(),
        info.len(),
    ];
    let mut bytes: Vec<u8> = header.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect();
    bytes.extend(a.iter().flat_map(|v| v.to_le_bytes()));
    bytes.extend(parts.b_prime.iter().flat_map(|v| v.to_le_bytes()));
    bytes.extend(t.dtab.iter().chain(&info).flat_map(|v| v.to_le_bytes()));
    run_harness("harness.cpp", &nm_cuda::kernels::Variant::f32(&plan.kernel).options, tag, bytes)
}

#[test]
fn f32_kernel_source_matches_the_cpu_kernel_under_sanitizers() {
    // (N, M, L), (m, n, k): the code paths (one group per warp, per float4 chunk, per column;
    // groups that straddle blocks), packed and not, float4 A and not, ragged edges.
    let cases: [Case; 7] = [
        ((2, 4, 32), (70, 150, 96)),
        ((1, 8, 32), (33, 130, 203)),
        ((3, 8, 8), (65, 64, 128)),
        ((16, 32, 1), (20, 67, 96)),
        ((2, 8, 24), (40, 100, 260)),
        ((1, 4, 160), (9, 170, 37)),
        // 15 kept rows per step × 7 group slots: an index tile of odd length.
        ((3, 8, 24), (17, 90, 120)),
    ];
    let mut jobs = Vec::new();
    for (c, &(nm, (m, n, k))) in cases.iter().enumerate() {
        let b = random_nm(k, n, nm, c as u64 + 1);
        let parts = b.nm_parts().unwrap();
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 5 + c) % 7) as f32 - 3.0).collect();
        let want = cpu_reference(&a, m, &b);
        let nmu = (nm.0 as usize, nm.1 as usize, nm.2);
        for version in [Version::V1, Version::V2, Version::V3] {
            for tile in [TileSize::Small, TileSize::Medium, TileSize::Large] {
                // Split k where there are steps enough to split.
                for slices in [None, Some(3)] {
                    let options = Options { version: Some(version), tile: Some(tile), slices };
                    let plan = plan_f32(m, n, k, nmu, DeviceLimits::H100, options).unwrap();
                    if slices.is_some() && plan.slices == 1 {
                        continue;
                    }
                    jobs.push((
                        format!("case{c}-{version:?}-{tile:?}-s{}", plan.slices),
                        plan,
                        parts.clone(),
                        a.clone(),
                        m,
                        want.clone(),
                    ));
                }
            }
        }
    }
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..std::thread::available_parallelism().map_or(2, |n| n.get()) {
            s.spawn(|| {
                while let Some((tag, plan, parts, a, m, want)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let got = emulate(plan, parts, a, *m, tag);
                    if got != *want {
                        let at = got.iter().zip(want).position(|(x, y)| x != y).unwrap_or(got.len().min(want.len()));
                        failures.lock().unwrap().push(format!("{tag} {plan:?}: first difference at {at}"));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    println!("{} emulated launches", jobs.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bf16_tensor_core_kernel_source_matches_the_cpu_kernel_under_sanitizers() {
    // Every tile size; L: one group per warp tile (32, 64), groups per n8 tile (8, 24:
    // straddling blocks), a group per block or wider (128, 256: one group slot, a ragged last
    // group); ragged m, n, k, m past a 256-row block, k odd (the transpose's unaligned rows), W
    // not a multiple of the kept rows per stage.
    // `None`: the kernel the library picks for a 4096×4096 output (4:8: by windows in 128×256
    // blocks of 16 warps; 2:8: two 128×128 blocks per SM).
    let cases: [(Case, Option<TileSize>); 11] = [
        (((2, 4, 32), (70, 150, 96)), Some(TileSize::Medium)),
        (((1, 8, 8), (33, 130, 203)), Some(TileSize::Small)),
        (((3, 8, 24), (65, 100, 128)), Some(TileSize::Medium)),
        (((16, 32, 64), (20, 140, 96)), Some(TileSize::Large)),
        (((32, 32, 8), (17, 40, 50)), Some(TileSize::Small)),
        (((2, 8, 32), (300, 96, 301)), Some(TileSize::Large)),
        (((1, 8, 16), (9, 72, 520)), Some(TileSize::Medium)),
        (((4, 8, 32), (150, 300, 200)), None),
        (((2, 8, 32), (130, 260, 136)), None),
        (((2, 8, 128), (70, 300, 136)), Some(TileSize::Medium)),
        (((4, 8, 256), (40, 300, 72)), None),
    ];
    let mut runs = 0;
    for (c, &((nm, (m, n, k)), size)) in cases.iter().enumerate() {
        let b = random_nm(k, n, nm, c as u64 + 21);
        let parts = b.nm_parts().unwrap();
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 3 + c) % 7) as f32 - 3.0).collect();
        let want = cpu_reference(&a, m, &b);
        let nm3 = (nm.0 as usize, nm.1 as usize, nm.2);
        let tile = match size {
            Some(size) => Bf16Kernel::new(size, nm3).unwrap(),
            None => Bf16Kernel::choose(4096, 4096, nm3, DeviceLimits::H100).unwrap(),
        };
        // Both ways of staging A: split-K only with the first (it does not depend on staging).
        for (kernel, asked) in [(tile, 1), (tile, 3), (tile.windowed(), 1)] {
            let kernel = kernel.fit(DeviceLimits::H100).unwrap();
            let steps = parts.rows().div_ceil(kernel.kt);
            let (mask, need_words) = need_mask(&kernel, &parts.d, parts.rows(), parts.groups(), k, n);
            let (slices, per_slice) = split_k(Some(asked), kernel.blocks(m, n), steps, DeviceLimits::H100.sms);
            let header = [
                m,
                n,
                k,
                parts.rows(),
                parts.cols(),
                parts.groups(),
                steps,
                per_slice,
                slices,
                n.div_ceil(kernel.ns),
                m.div_ceil(kernel.ms),
                kernel.threads(),
                kernel.shared_bytes(),
                need_words,
            ];
            let mut bytes: Vec<u8> = header.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect();
            bytes.extend(a.iter().flat_map(|&v| to_bf16(v).to_le_bytes()));
            bytes.extend(parts.b_prime.iter().flat_map(|&v| to_bf16(v).to_le_bytes()));
            bytes.extend(parts.d.iter().flat_map(|v| v.to_le_bytes()));
            bytes.extend(mask.iter().flat_map(|v| v.to_le_bytes()));
            let tag = format!("tc{c}-s{slices}-w{}", kernel.windows as u8);
            let got = run_harness("harness_tc.cpp", &nm_cuda::kernels::Variant::bf16(&kernel).options, &tag, bytes);
            assert!(got == want, "{tag} {nm:?} {m}×{n}×{k} {kernel:?}: results differ");
            runs += 1;
        }
    }
    println!("{runs} emulated tensor-core launches");
}

#[test]
fn nv24_sparse_tensor_core_kernel_source_matches_a_dense_product_under_sanitizers() {
    // Ragged m, n, k (k not a multiple of 4 or 32), n not a multiple of 8 (B's padding
    // columns hold 99s that must reach no stored output), blocks past m's last tile.
    let cases: [(usize, usize, usize); 4] = [(70, 150, 96), (33, 130, 203), (17, 40, 50), (130, 70, 64)];
    for (c, &(m, n, k)) in cases.iter().enumerate() {
        let a = random_nv24(m, k, c as u64);
        let a_dense = a.to_dense().unwrap();
        let sp = Nv24Sp::compress(&a).unwrap();
        let ldb = n.next_multiple_of(8);
        let b: Vec<f32> =
            (0..k * ldb).map(|i| if i % ldb < n { ((i * 5 + c) % 7) as f32 - 3.0 } else { 99.0 }).collect();
        // The dense reference, in f64 (small integers: every sum exact in f32 too).
        let mut want = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k).map(|kk| a_dense[i * k + kk] as f64 * b[kk * ldb + j] as f64).sum();
                want[i * n + j] = s as f32;
            }
        }
        assert!(want.iter().any(|&v| v != 0.0), "case {c}: a product of zeros checks nothing");
        // Every parameter set (four k32 slices per stage: slices past k's end within a stage),
        // and stages of one and of three slices.
        let variants = [TileSize::Small, TileSize::Medium, TileSize::Large]
            .map(Nv24Kernel::new)
            .into_iter()
            .chain([1, 3].map(|kstep| Nv24Kernel { kstep, stages: 4, ..Nv24Kernel::new(TileSize::Medium) }));
        for kernel in variants {
            for asked in [1, 3] {
                let stages = kernel.stage_count(sp.steps());
                let (slices, per_slice) = split_k(Some(asked), kernel.blocks(m, n), stages, DeviceLimits::H100.sms);
                let header = [
                    m,
                    n,
                    k,
                    sp.kc(),
                    ldb,
                    sp.row_tiles(),
                    sp.steps(),
                    stages,
                    per_slice,
                    slices,
                    n.div_ceil(kernel.ns),
                    m.div_ceil(kernel.ms),
                    kernel.threads(),
                    kernel.shared_bytes(),
                ];
                let mut bytes: Vec<u8> = header.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect();
                bytes.extend(sp.values().iter().flat_map(|v| v.to_le_bytes()));
                bytes.extend(sp.meta().iter().flat_map(|v| v.to_le_bytes()));
                bytes.extend(b.iter().flat_map(|&v| to_bf16(v).to_le_bytes()));
                let tag = format!("sp{c}-{}x{}-k{}-s{slices}", kernel.ms, kernel.ns, kernel.kstep);
                let options = nm_cuda::kernels::Variant::nv24_sp(&kernel).options;
                let got = run_harness("harness_sp.cpp", &options, &tag, bytes);
                let at = got.iter().zip(&want).position(|(x, y)| x != y);
                assert!(
                    got.len() == want.len() && at.is_none(),
                    "{tag} {m}×{n}×{k} {kernel:?}: first difference at {at:?}"
                );
            }
        }
    }
}

#[test]
fn bf16_rounding_kernel_source_matches_the_host_rounding_under_sanitizers() {
    // Ties both ways, values that round up into the next binade and to infinity, subnormals,
    // signed zeros, infinities and NaNs; 13 columns in rows of 16 (padding written as zeros),
    // 8 outputs per thread, a grid of 5 rows of blocks striding over 37 rows, and blocks whose
    // threads run past a row's end.
    let special = [
        0.0f32,
        -0.0,
        1.0,
        -1.5,
        f32::from_bits(0x3f80_8000),
        f32::from_bits(0x3f81_8000),
        f32::from_bits(0x3fff_ffff),
        f32::MAX,
        f32::MIN_POSITIVE / 3.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
    ];
    let (rows, cols, ld) = (37usize, 13usize, 16usize);
    let src: Vec<f32> = (0..rows * cols)
        .map(|i| if i < special.len() { special[i] } else { f32::from_bits((i as u32).wrapping_mul(2_654_435_761)) })
        .collect();
    let header = [rows, cols, ld, 2, 5, 2];
    let mut bytes: Vec<u8> = header.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect();
    bytes.extend(src.iter().flat_map(|v| v.to_le_bytes()));
    let got: Vec<u32> = run_harness("harness_to_bf16.cpp", &[], "to-bf16", bytes).iter().map(|v| v.to_bits()).collect();
    let (want, want_ld) = nm_cuda::bf16_padded_rows(&src, cols);
    assert_eq!(want_ld, ld);
    let want: Vec<u32> = want.iter().map(|&v| v as u32).collect();
    let at = got.iter().zip(&want).position(|(x, y)| x != y);
    assert!(got.len() == want.len() && at.is_none(), "first difference at {at:?}");
}
