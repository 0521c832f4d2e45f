//! The CUDA kernels against the CPU N:M kernel (nm-spmm, itself checked against a dense
//! reference). Values are small integers, so every sum is exact in f32 and in bf16 inputs, and
//! results must be equal, not close. Without a device every test prints why it is skipped.

use nm_cuda::{
    CudaError, Gpu, GpuNmBf16, Nv24Sp, Options, Plan, TileSize, Version, from_bf16, multiply, multiply_nv24, to_bf16,
    unavailable,
};
mod common;

use common::{cpu_reference, random_nm, random_nv24};

/// The device, or `None` after printing why the test is skipped.
fn device() -> Option<Gpu> {
    if let Some(why) = unavailable() {
        println!("skipped: no CUDA device ({why})");
        return None;
    }
    Some(Gpu::open(0).expect("a device is reported, so it opens"))
}

fn random_dense(m: usize, k: usize, seed: u64) -> Vec<f32> {
    (0..m * k).map(|i| ((i as u64 * 2654435761 + seed * 97) % 7) as f32 - 3.0).collect()
}

const PATTERNS: [(u32, u32); 6] = [(2, 4), (3, 8), (2, 8), (1, 8), (16, 32), (32, 32)];
/// (m, n, k).
type Shape = (usize, usize, usize);

/// Ragged shapes and one of the paper's (LLaMA-7B projection) shapes.
const SHAPES: [Shape; 5] = [(1, 37, 64), (100, 130, 200), (257, 129, 1003), (64, 256, 4096), (256, 4096, 4096)];

/// The patterns and shapes of the tensor-core test: three patterns on the ragged shapes only
/// where `NMSPARSE_GPU_RAGGED_ONLY` is set (a compute-sanitizer run, 10–100× slower per launch).
fn tc_cases() -> (&'static [(u32, u32)], &'static [Shape]) {
    if std::env::var_os("NMSPARSE_GPU_RAGGED_ONLY").is_some() {
        (&[(2, 4), (1, 8), (16, 32)], &SHAPES[..3])
    } else {
        (&PATTERNS, &SHAPES)
    }
}

#[test]
fn f32_kernels_match_the_cpu_kernel() {
    let Some(gpu) = device() else { return };
    println!("{}", gpu.describe());
    let mut checked = 0;
    for (p, &(n_keep, m_win)) in PATTERNS.iter().enumerate() {
        for l in [1, 8, 32] {
            for (s, &(m, n, k)) in SHAPES.iter().enumerate() {
                let b = random_nm(k, n, (n_keep, m_win, l), (p * 100 + s) as u64);
                let a = random_dense(m, k, s as u64);
                let want = cpu_reference(&a, m, &b);
                let parts = b.nm_parts().unwrap();
                let mut runs = vec![Options::default()];
                for version in [Version::V1, Version::V2, Version::V3] {
                    for tile in [TileSize::Small, TileSize::Large] {
                        runs.push(Options { version: Some(version), tile: Some(tile), slices: None });
                    }
                }
                runs.push(Options { version: Some(Version::V3), tile: Some(TileSize::Medium), slices: Some(3) });
                for options in runs {
                    let (got, plan) = multiply(&gpu, &a, m, &parts, options).unwrap();
                    assert!(got == want, "{n_keep}:{m_win} L={l} {m}×{n}×{k} {plan:?}: results differ");
                    checked += 1;
                }
            }
        }
    }
    println!("{checked} GPU runs equal to the CPU kernel");
}

#[test]
fn split_k_is_deterministic() {
    let Some(gpu) = device() else { return };
    let b = random_nm(4096, 96, (2, 8, 32), 5);
    let parts = b.nm_parts().unwrap();
    let a: Vec<f32> = (0..64 * 4096).map(|i| ((i % 1000) as f32).sin()).collect();
    let options = Options { slices: Some(8), ..Default::default() };
    let (first, plan) = multiply(&gpu, &a, 64, &parts, options).unwrap();
    assert!(plan.slices > 1, "{plan:?}");
    for _ in 0..5 {
        assert_eq!(multiply(&gpu, &a, 64, &parts, options).unwrap().0, first);
    }
}

#[test]
fn bf16_tensor_core_kernel_matches_the_cpu_kernel() {
    let Some(gpu) = device() else { return };
    let mut checked = 0;
    let (patterns, shapes) = tc_cases();
    for &(n_keep, m_win) in patterns {
        for l in [8, 32, 128] {
            for (s, &(m, n, k)) in shapes.iter().enumerate() {
                let b = random_nm(k, n, (n_keep, m_win, l), s as u64 + 7);
                let a = random_dense(m, k, s as u64 + 3);
                // Small integers are exact in bf16, so the f32 reference applies unchanged.
                assert!(a.iter().all(|&x| from_bf16(to_bf16(x)) == x));
                let want = cpu_reference(&a, m, &b);
                let dev = GpuNmBf16::upload(&gpu, &b.nm_parts().unwrap()).unwrap();
                let a16: Vec<u16> = a.iter().map(|&x| to_bf16(x)).collect();
                let a_dev = gpu.upload(&a16).unwrap();
                for tile in [None, Some(TileSize::Small), Some(TileSize::Medium), Some(TileSize::Large)] {
                    for slices in [None, Some(3)] {
                        let mut launch = match dev.prepare(&gpu, m, tile, slices) {
                            Ok(launch) => launch,
                            // The large tile's 16 group slots at L = 8 fit no shared memory.
                            Err(CudaError::Unsupported(why)) if l == 8 && tile == Some(TileSize::Large) => {
                                assert!(why.contains("shared memory"), "{why}");
                                continue;
                            }
                            Err(e) => panic!("bf16 {n_keep}:{m_win} L={l} {tile:?}: {e}"),
                        };
                        let mut c = gpu.zeros::<f32>(m * n).unwrap();
                        dev.run(&gpu, &mut launch, &a_dev, &mut c).unwrap();
                        let got = gpu.download(&c).unwrap();
                        assert!(
                            got[..m * n] == want[..],
                            "bf16 {n_keep}:{m_win} L={l} {m}×{n}×{k} {:?}, {} slices: results differ",
                            launch.kernel,
                            launch.slices
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    println!("{checked} tensor-core runs equal to the CPU kernel");
}

#[test]
fn nv24_sparse_tensor_core_kernel_matches_the_cpu_kernel() {
    let Some(gpu) = device() else { return };
    let mut checked = 0;
    for (s, &(m, n, k)) in SHAPES.iter().enumerate() {
        let a = random_nv24(m, k, s as u64 + 11);
        let b = random_dense(k, n, s as u64 + 5);
        // The CPU nv24 kernel (nm-spmm, itself checked against a dense product); small
        // integers are exact in bf16 and every sum exact in f32.
        let mut want = vec![0f32; m * n];
        nm_spmm::spmm_nv24(&a, &b, n, &mut want, 1).unwrap();
        let tiles = [None, Some(TileSize::Small), Some(TileSize::Medium), Some(TileSize::Large)];
        for tile in tiles {
            for slices in [None, Some(1), Some(3)] {
                let (got, kernel, used) = multiply_nv24(&gpu, &a, &b, n, tile, slices).unwrap();
                assert!(got == want, "nv24 {m}×{n}×{k} {kernel:?}, {used} slices: results differ");
                checked += 1;
            }
        }
    }
    println!("{checked} sparse tensor-core runs equal to the CPU kernel");
}

#[test]
fn wrong_operands_are_errors() {
    let Some(gpu) = device() else { return };
    let b = random_nm(64, 64, (2, 4, 4), 1).nm_parts().unwrap();
    assert!(matches!(multiply(&gpu, &[0.0; 10], 3, &b, Options::default()), Err(CudaError::Inner { .. })));
    assert!(matches!(GpuNmBf16::upload(&gpu, &b), Err(CudaError::Unsupported(_))));
    let a = random_nv24(8, 64, 1);
    assert!(matches!(multiply_nv24(&gpu, &a, &[0.0; 10], 3, None, None), Err(CudaError::Inner { .. })));
}

/// Runs `plan` four ways — host operands twice (the staging buffers reused), device operands,
/// device operands on a stream of the caller's — each against the dense operand `dense[i]`,
/// and returns the four results.
fn four_runs(gpu: &Gpu, plan: &mut Plan, dense: &[Vec<f32>; 3]) -> [Vec<f32>; 4] {
    let [m, _, n] = plan.shape();
    let mut host = [vec![f32::NAN; m * n], vec![f32::NAN; m * n]];
    for (c, operand) in host.iter_mut().zip(dense) {
        plan.run_host(operand, c, None).unwrap();
    }
    let operand = gpu.upload(&dense[2]).unwrap();
    let mut c = gpu.upload(&vec![f32::NAN; m * n]).unwrap();
    plan.run(&operand, &mut c, None).unwrap();
    let on_plan_stream = gpu.download(&c).unwrap();
    let stream = gpu.context().new_stream().unwrap();
    let mut c2 = gpu.upload(&vec![f32::NAN; m * n]).unwrap();
    plan.run(&operand, &mut c2, Some(&stream)).unwrap();
    stream.synchronize().unwrap();
    let on_own_stream = gpu.download(&c2).unwrap();
    let [first, second] = host;
    [first, second, on_plan_stream[..m * n].to_vec(), on_own_stream[..m * n].to_vec()]
}

#[test]
fn plans_run_again_and_again_with_host_and_device_operands() {
    let Some(gpu) = device() else { return };
    let mut checked = 0;
    let shapes: [Shape; 3] = [(1, 37, 64), (100, 130, 200), (257, 129, 1003)];
    for &(n_keep, m_win) in &[(2, 4), (1, 8), (16, 32)] {
        for (s, &(m, n, k)) in shapes.iter().enumerate() {
            let b = random_nm(k, n, (n_keep, m_win, 8), s as u64 + 21);
            let dense = [0, 1, 2].map(|i| random_dense(m, k, s as u64 * 3 + i));
            let want = dense.clone().map(|a| cpu_reference(&a, m, &b));
            for slices in [None, Some(3)] {
                let options = Options { slices, ..Options::default() };
                let mut plan = Plan::nm(&gpu, &b.nm_parts().unwrap(), m, options).unwrap();
                assert_eq!(plan.shape(), [m, k, n]);
                let got = four_runs(&gpu, &mut plan, &dense);
                for (run, (got, want)) in got.iter().zip([&want[0], &want[1], &want[2], &want[2]]).enumerate() {
                    assert!(got == want, "nm plan {n_keep}:{m_win} {m}×{n}×{k} run {run}: results differ");
                    checked += 1;
                }
            }
        }
    }
    for (s, &(m, n, k)) in shapes.iter().enumerate() {
        let a = random_nv24(m, k, s as u64 + 13);
        let dense = [0, 1, 2].map(|i| random_dense(k, n, s as u64 * 5 + i));
        let want = dense.clone().map(|b| {
            let mut c = vec![0f32; m * n];
            nm_spmm::spmm_nv24(&a, &b, n, &mut c, 1).unwrap();
            c
        });
        for slices in [None, Some(3)] {
            let mut plan = Plan::nv24(&gpu, &Nv24Sp::compress(&a).unwrap(), n, None, slices).unwrap();
            let got = four_runs(&gpu, &mut plan, &dense);
            for (run, (got, want)) in got.iter().zip([&want[0], &want[1], &want[2], &want[2]]).enumerate() {
                assert!(got == want, "nv24 plan {m}×{n}×{k} run {run}: results differ");
                checked += 1;
            }
        }
    }
    println!("{checked} plan runs equal to the CPU kernels");
}

#[test]
fn plans_refuse_operands_that_do_not_fit() {
    let Some(gpu) = device() else { return };
    let b = random_nm(64, 48, (2, 4, 8), 3).nm_parts().unwrap();
    let mut plan = Plan::nm(&gpu, &b, 10, Options::default()).unwrap();
    let mut c = vec![0f32; 10 * 48];
    let refused = |r: nm_cuda::Result<()>, needle: &str| match r {
        Err(CudaError::Unsupported(why)) => assert!(why.contains(needle), "{why}"),
        other => panic!("expected a refusal naming {needle}, got {other:?}"),
    };
    refused(plan.run_host(&[0.0; 10 * 63], &mut c, None), "A must be 10×64");
    refused(plan.run_host(&[0.0; 10 * 64], &mut c[1..], None), "C 10×48");
    let short = gpu.zeros::<f32>(10 * 63).unwrap();
    let mut c_dev = gpu.zeros::<f32>(10 * 48).unwrap();
    refused(plan.run(&short, &mut c_dev, None), "too short");
    // Empty products are refused when the plan is made.
    for (m, k) in [(0, 64), (10, 0)] {
        let b = random_nm(k, 48, (2, 4, 8), 3).nm_parts().unwrap();
        refused(Plan::nm(&gpu, &b, m, Options::default()).map(drop), "empty product");
    }
    let a = Nv24Sp::compress(&random_nv24(8, 64, 1)).unwrap();
    refused(Plan::nv24(&gpu, &a, 0, None, None).map(drop), "empty product");
    // Addresses the driver does not know as one allocation of this device are refused. The
    // allocation is made by cuMemAlloc (not from a pool) and is 4 MiB, a multiple of any
    // allocation granularity, so its end is where the test says.
    let bytes = 4 << 20;
    gpu.context().bind_to_thread().unwrap();
    // SAFETY: a plain allocation, freed below; each borrow only asks the driver about an
    // address, and the slices borrowed never free it.
    unsafe {
        let base = cudarc::driver::result::malloc_sync(bytes).unwrap();
        let host = c.as_ptr() as u64;
        let refusal = |r: nm_cuda::Result<nm_cuda::Borrowed<f32>>| match r {
            Err(CudaError::Unsupported(why)) => why,
            Ok(_) => "borrowed".into(),
            Err(e) => e.to_string(),
        };
        assert!(refusal(gpu.borrow_device::<f32>(host, 4)).contains("not device memory"));
        assert!(refusal(gpu.borrow_device::<f32>(base + bytes as u64 - 16, 5)).contains("past the end"));
        assert_eq!(gpu.borrow_device::<f32>(base + bytes as u64 - 16, 4).unwrap().len(), 4);
        let whole = gpu.borrow_device::<f32>(base, bytes / 4).unwrap();
        assert_eq!(gpu.download(&whole).unwrap().len(), bytes / 4, "a borrowed allocation reads as a slice");
        drop(whole);
        cudarc::driver::result::free_sync(base).unwrap();
    }
}
