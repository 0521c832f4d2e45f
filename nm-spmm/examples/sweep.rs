//! Times `C = A·B` with B in `nm(N,M,L)` for the shapes and patterns given, printing CSV
//! `m,n,k,N,M,L,type,threads,isa,seconds,gflops,loading` (useful flops: 2·m·n·k·N/M; the best
//! of `reps` runs after one warm-up). Used by `bench/nm_spmm_vs_openblas.sh`. LOADINGS (default
//! `auto`) is a list of `auto`, `tile`, `packed` (how the kernel reads A, [`Loading`]): several are
//! timed in turn within each repetition, so that a noisy machine slows them alike.
//!
//! With `NMSPARSE_OPENBLAS` naming an OpenBLAS library (numpy's: `bench/nm_spmm_vs_openblas.sh`
//! finds it), its dense GEMM of the same shape and type is timed in the same process, alternating
//! with the N:M kernel within every repetition, on the same thread count: a line with loading
//! `openblas-CORE` (CORE: the kernel OpenBLAS chose for this CPU), `gflops` of the dense product
//! (2·m·n·k). This VM's speed drifts by ±40% over minutes, and timing the two in separate
//! processes one after the other measured the drift as often as the kernels. On several threads
//! set `OPENBLAS_THREAD_TIMEOUT=4`, or OpenBLAS's idle workers spin on the cores the N:M kernel
//! runs on next.
//!
//!     cargo run --release -p nm-spmm --example sweep -- SIZES PATTERNS L TYPE THREADS REPS [LOADINGS]
//!     cargo run --release -p nm-spmm --example sweep -- 1024,4096 1:8 32 f32 1 9 tile,packed
//!     cargo run --release -p nm-spmm --example sweep -- 1024,2048 2:4,2:8 32 f32 2 5
//!     cargo run --release -p nm-spmm --example sweep -- 1024 nv24 0 f32 1 5   # A in nv24
//!     cargo run --release -p nm-spmm --example sweep -- 1024x12288x4096 2:8 32 f32 1 3  # m×n×k
//!     NMSPARSE_OPENBLAS=/path/libopenblas.so cargo run --release -p nm-spmm --example sweep -- 2048 1:8 32 f32 1 5
//!
//! A size is `S` (m = n = k = S) or `MxNxK`.

use std::ffi::{CStr, c_char, c_int};
use std::time::Instant;

use nm_format::{Format, Tensor};
use nm_spmm::{Isa, Loading, NmMatrix, Real, spmm_with};

/// OpenBLAS's `cblas_sgemm` and `cblas_dgemm`, loaded at run time: the wheel numpy ships
/// (`scipy_openblas64_`, symbols `scipy_cblas_sgemm64_`, 64-bit integers) or a plain build
/// (`cblas_sgemm`, 32-bit).
struct OpenBlas {
    _lib: libloading::Library,
    sgemm: Gemm<f32>,
    dgemm: Gemm<f64>,
    core: String,
}

/// `cblas_?gemm` with the library's integer width (`I`).
type CblasGemm<T, I> = unsafe extern "C" fn(c_int, c_int, c_int, I, I, I, T, *const T, I, *const T, I, T, *mut T, I);

enum Gemm<T> {
    Ilp64(CblasGemm<T, i64>),
    Lp64(CblasGemm<T, i32>),
}

const CBLAS_ROW_MAJOR: c_int = 101;
const CBLAS_NO_TRANS: c_int = 111;

/// The symbol `name` of `lib`.
///
/// # Safety
/// `F` is the symbol's type.
unsafe fn symbol<F: Copy>(lib: &libloading::Library, name: &str) -> Result<F, String> {
    // SAFETY: the caller's contract.
    unsafe { lib.get::<F>(name.as_bytes()) }.map(|f| *f).map_err(|e| e.to_string())
}

impl OpenBlas {
    /// The library at `path`, set to `threads` threads.
    fn load(path: &str, threads: usize) -> Result<OpenBlas, String> {
        // SAFETY: loading runs the library's initialisers; OpenBLAS's only read the environment
        // and the CPU's features.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: the types given to `symbol`, here and below, are OpenBLAS's declarations in
        // `cblas.h` and `openblas_config.h`, `blasint` 64-bit in the wheel's ILP64 build and
        // 32-bit otherwise.
        let wheel = unsafe { symbol::<CblasGemm<f32, i64>>(&lib, "scipy_cblas_sgemm64_") }.is_ok();
        let (prefix, suffix) = if wheel { ("scipy_", "64_") } else { ("", "") };
        let name = |base: &str| format!("{prefix}{base}{suffix}");
        let found = |e: String| format!("{path}: {e}");
        // SAFETY: as above.
        let (sgemm, dgemm, set_threads, corename) = unsafe {
            let (sgemm, dgemm) = if wheel {
                (
                    Gemm::Ilp64(symbol(&lib, &name("cblas_sgemm")).map_err(found)?),
                    Gemm::Ilp64(symbol(&lib, &name("cblas_dgemm")).map_err(found)?),
                )
            } else {
                (
                    Gemm::Lp64(symbol(&lib, &name("cblas_sgemm")).map_err(found)?),
                    Gemm::Lp64(symbol(&lib, &name("cblas_dgemm")).map_err(found)?),
                )
            };
            let set_threads: unsafe extern "C" fn(c_int) =
                symbol(&lib, &name("openblas_set_num_threads")).map_err(found)?;
            let corename: unsafe extern "C" fn() -> *const c_char =
                symbol(&lib, &name("openblas_get_corename")).map_err(found)?;
            (sgemm, dgemm, set_threads, corename)
        };
        let threads = c_int::try_from(threads).map_err(|_| format!("{threads} threads"))?;
        // SAFETY: both take and return what their declarations say; the core name is a static
        // NUL-terminated string in the library, copied before the library can be closed.
        let core = unsafe {
            set_threads(threads);
            CStr::from_ptr(corename()).to_string_lossy().into_owned()
        };
        Ok(OpenBlas { _lib: lib, sgemm, dgemm, core })
    }
}

/// A value type OpenBLAS multiplies.
trait Dense: Real {
    fn gemm_of(blas: &OpenBlas) -> &Gemm<Self>;

    /// `c = a·b`, row-major `m×k` times `k×n`.
    fn gemm(blas: &OpenBlas, a: &[Self], b: &[Self], c: &mut [Self], (m, n, k): (usize, usize, usize)) {
        assert!(a.len() == m * k && b.len() == k * n && c.len() == m * n, "operands of the shape");
        let (one, zero) = (Self::from_f64(1.0), Self::ZERO);
        let (order, no) = (CBLAS_ROW_MAJOR, CBLAS_NO_TRANS);
        let (a, b, c) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
        // SAFETY: the arrays hold m·k, k·n and m·n elements (asserted), row-major with leading
        // dimensions k, n, n; the sizes fit the integer type (checked).
        unsafe {
            match Self::gemm_of(blas) {
                Gemm::Ilp64(f) => {
                    let [m, n, k] = [m, n, k].map(|d| i64::try_from(d).expect("a size"));
                    f(order, no, no, m, n, k, one, a, k, b, n, zero, c, n)
                }
                Gemm::Lp64(f) => {
                    let [m, n, k] = [m, n, k].map(|d| i32::try_from(d).expect("a size"));
                    f(order, no, no, m, n, k, one, a, k, b, n, zero, c, n)
                }
            }
        }
    }
}

impl Dense for f32 {
    fn gemm_of(blas: &OpenBlas) -> &Gemm<f32> {
        &blas.sgemm
    }
}

impl Dense for f64 {
    fn gemm_of(blas: &OpenBlas) -> &Gemm<f64> {
        &blas.dgemm
    }
}

/// `values` in a vector on transparent huge pages from 4 MiB on, as numpy allocates its arrays
/// (`numpy._core.multiarray._get_madvise_hugepage()` is true on Linux): the dense product of the
/// peer then runs on the operands numpy would give it. On 4 KiB pages OpenBLAS's DGEMM ran
/// markedly slower at the large shapes, and the N:M kernel level.
fn numpy_like<T>(values: impl ExactSizeIterator<Item = T>) -> Vec<T> {
    let mut v = nm_runtime::memory::huge_vec(values.len()).expect("room for an operand");
    v.extend(values);
    v
}

/// Variants `0..count` (`run(i)`) timed in turn within each of `reps` repetitions, after one
/// warm-up each: the best time of each (seconds).
fn alternate(reps: usize, count: usize, mut run: impl FnMut(usize)) -> Vec<f64> {
    (0..count).for_each(&mut run);
    let mut best = vec![f64::INFINITY; count];
    for _ in 0..reps {
        for (i, best) in best.iter_mut().enumerate() {
            let start = Instant::now();
            run(i);
            *best = best.min(start.elapsed().as_secs_f64());
        }
    }
    best
}

/// The CSV line of OpenBLAS's dense product of `A·B`'s shape, `secs` its best time.
fn print_dense<T: Real>(blas: &OpenBlas, (m, n, k): (usize, usize, usize), threads: usize, secs: f64) {
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    println!(
        "{m},{n},{k},0,0,0,{},{threads},{:?},{secs:.6},{:.2},openblas-{}",
        T::NAME,
        Isa::detect(),
        flops / secs / 1e9,
        blas.core
    );
}

fn run<T: Dense>(
    (m, n, k): (usize, usize, usize),
    (keep, window, l): (u32, u32, usize),
    loadings: &[Loading],
    threads: usize,
    reps: usize,
    blas: Option<&OpenBlas>,
) {
    // B: deterministic values, pruned into the pattern (every window keeps N rows per group).
    let dense: Vec<T> = (0..k * n).map(|q| T::from_f64(1.0 + ((q * 7919) % 97) as f64 / 97.0)).collect();
    let b = Tensor::from_dense(&[k, n], &dense, &Format::dense(2)).unwrap();
    let (b, _) = b.prune(&Format::nm(keep, window, l).unwrap()).unwrap();
    let nm = NmMatrix::new(&b).unwrap();
    let a = numpy_like((0..m * k).map(|q| T::from_f64(((q * 31) % 17) as f64 / 17.0 - 0.5)));
    let mut c = numpy_like((0..m * n).map(|_| T::ZERO));
    let mut c_dense = numpy_like((0..if blas.is_some() { m * n } else { 0 }).map(|_| T::ZERO));
    let b_dense = numpy_like(if blas.is_some() { b.to_dense().unwrap() } else { Vec::new() }.into_iter());
    let best = alternate(reps, loadings.len() + usize::from(blas.is_some()), |i| match (loadings.get(i), blas) {
        (Some(&loading), _) => spmm_with(Isa::detect(), loading, &a, m, &nm, &mut c, threads).unwrap(),
        (None, Some(blas)) => T::gemm(blas, &a, &b_dense, &mut c_dense, (m, n, k)),
        (None, None) => unreachable!("one variant per loading, and OpenBLAS"),
    });
    for (best, loading) in best.iter().zip(loadings) {
        println!(
            "{m},{n},{k},{keep},{window},{l},{},{threads},{:?},{best:.6},{:.2},{loading:?}",
            T::NAME,
            Isa::detect(),
            nm.flops(m) / best / 1e9
        );
    }
    if let Some(blas) = blas {
        print_dense::<T>(blas, (m, n, k), threads, best[loadings.len()]);
        check_agree(&c, &c_dense);
    }
}

/// The N:M result against OpenBLAS's of the pruned B: a timing of a wrong product is no timing.
fn check_agree<T: Real>(ours: &[T], dense: &[T]) {
    let scale = dense.iter().fold(0.0f64, |s, x| s.max(x.to_f64().abs())).max(1.0);
    let worst = ours.iter().zip(dense).fold(0.0f64, |w, (x, y)| w.max((x.to_f64() - y.to_f64()).abs()));
    assert!(worst <= 1e-3 * scale, "the N:M product differs from OpenBLAS's by {worst} (scale {scale})");
}

/// `C = A·B` with A in `nv24` (2:4 along rows), B dense: the same CSV line, N:M = 2:4, L = 0.
fn run_nv24<T: Dense>((m, n, k): (usize, usize, usize), threads: usize, reps: usize, blas: Option<&OpenBlas>) {
    let dense: Vec<T> = (0..m * k).map(|q| T::from_f64(1.0 + ((q * 7919) % 97) as f64 / 97.0)).collect();
    let a = Tensor::from_dense(&[m, k], &dense, &Format::dense(2)).unwrap();
    let (a, _) = a.prune(&Format::nv24(2)).unwrap();
    let b = numpy_like((0..k * n).map(|q| T::from_f64(((q * 31) % 17) as f64 / 17.0 - 0.5)));
    let mut c = numpy_like((0..m * n).map(|_| T::ZERO));
    let mut c_dense = numpy_like((0..if blas.is_some() { m * n } else { 0 }).map(|_| T::ZERO));
    let a_dense = numpy_like(if blas.is_some() { a.to_dense().unwrap() } else { Vec::new() }.into_iter());
    let best = alternate(reps, 1 + usize::from(blas.is_some()), |i| match blas {
        Some(blas) if i == 1 => T::gemm(blas, &a_dense, &b, &mut c_dense, (m, n, k)),
        _ => nm_spmm::spmm_nv24(&a, &b, n, &mut c, threads).unwrap(),
    });
    let flops = 2.0 * m as f64 * k as f64 * n as f64 / 2.0;
    println!(
        "{m},{n},{k},2,4,0,{},{threads},{:?},{:.6},{:.2},nv24",
        T::NAME,
        Isa::detect(),
        best[0],
        flops / best[0] / 1e9
    );
    if let Some(blas) = blas {
        print_dense::<T>(blas, (m, n, k), threads, best[1]);
        check_agree(&c, &c_dense);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.to_string());
    let sizes: Vec<(usize, usize, usize)> = arg(0, "1024")
        .split(',')
        .map(|s| {
            let dims: Vec<usize> = s.split('x').map(|d| d.parse().expect("a size")).collect();
            match dims.as_slice() {
                [s] => (*s, *s, *s),
                [m, n, k] => (*m, *n, *k),
                _ => panic!("a size is S or MxNxK, not {s}"),
            }
        })
        .collect();
    let nv24 = arg(1, "2:4") == "nv24";
    let patterns: Vec<(u32, u32)> = arg(1, "2:4")
        .split(',')
        .filter(|p| *p != "nv24")
        .map(|p| {
            let (n, m) = p.split_once(':').expect("N:M");
            (n.parse().expect("N"), m.parse().expect("M"))
        })
        .collect();
    let l: usize = arg(2, "32").parse().expect("L");
    let ty = arg(3, "f32");
    let threads: usize = arg(4, "1").parse().expect("threads");
    let reps: usize = arg(5, "5").parse().expect("reps");
    let loadings: Vec<Loading> = arg(6, "auto")
        .split(',')
        .map(|name| match name {
            "auto" => Loading::Auto,
            "tile" => Loading::WholeTile,
            "packed" => Loading::Packed,
            _ => panic!("a loading is auto, tile or packed, not {name}"),
        })
        .collect();
    let blas = std::env::var("NMSPARSE_OPENBLAS").ok().map(|path| {
        OpenBlas::load(&path, threads).unwrap_or_else(|e| {
            eprintln!("sweep: cannot use OpenBLAS from NMSPARSE_OPENBLAS: {e}");
            std::process::exit(2)
        })
    });
    let blas = blas.as_ref();
    println!("m,n,k,N,M,L,type,threads,isa,seconds,gflops,loading");
    for &size in &sizes {
        if nv24 {
            match ty.as_str() {
                "f64" => run_nv24::<f64>(size, threads, reps, blas),
                _ => run_nv24::<f32>(size, threads, reps, blas),
            }
        }
        for &(keep, window) in &patterns {
            match ty.as_str() {
                "f64" => run::<f64>(size, (keep, window, l), &loadings, threads, reps, blas),
                _ => run::<f32>(size, (keep, window, l), &loadings, threads, reps, blas),
            }
        }
    }
}
