//! The C back end's compile–cache–load path: results of real compiled C, cache hits, compiler
//! failures, a missing compiler, a corrupted cache entry, an unusable cache directory, and
//! concurrent compiles of one kernel.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use nm_lower::jit::{CCompiler, CompileOptions, JitError, Outcome};

fn fresh_dir() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir =
        std::env::temp_dir().join(format!("nm-lower-jit-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn compiler() -> CCompiler {
    CCompiler::from_env().expect("a C compiler (cc) is installed on the test machines")
}

const DOT: &str = "double dot(const double *restrict a, const double *restrict b, long n) {\n  double s = 0;\n  for (long i = 0; i < n; i++) s += a[i] * b[i];\n  return s;\n}\n";

type DotFn = unsafe extern "C" fn(*const f64, *const f64, i64) -> f64;

fn call_dot(c: &nm_lower::jit::Compiled, a: &[f64], b: &[f64]) -> f64 {
    // SAFETY: DOT defines `dot` with exactly this C signature.
    let f = unsafe { c.function::<DotFn>("dot") }.unwrap();
    // SAFETY: both arrays hold `a.len()` doubles and outlive the call.
    unsafe { f(a.as_ptr(), b.as_ptr(), a.len() as i64) }
}

#[test]
fn compiles_runs_and_caches() {
    let dir = fresh_dir();
    let cc = compiler();
    let a: Vec<f64> = (0..100).map(f64::from).collect();
    let b: Vec<f64> = (0..100).map(|i| f64::from(i % 7)).collect();
    let expected: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    let first = cc.compile_in(&dir, DOT, CompileOptions::default()).unwrap();
    assert_eq!(first.outcome(), Outcome::Compiled);
    assert_eq!(call_dot(&first, &a, &b), expected);
    let second = cc.compile_in(&dir, DOT, CompileOptions::default()).unwrap();
    assert_eq!(second.outcome(), Outcome::Cached);
    assert_eq!(second.path(), first.path());
    assert_eq!(call_dot(&second, &a, &b), expected);
    // Other flags are another kernel.
    let omp = cc.compile_in(&dir, DOT, CompileOptions { openmp: true, sanitize: false }).unwrap();
    assert_eq!(omp.outcome(), Outcome::Compiled);
    assert_ne!(omp.path(), first.path());
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Asking for a symbol that is not there is an error, not a crash.
    // SAFETY: the symbol is never called.
    let missing = unsafe { first.function::<DotFn>("nope") };
    assert!(matches!(missing, Err(JitError::Symbol { .. })));
}

#[test]
fn compiler_errors_carry_stderr_and_the_source_path() {
    let dir = fresh_dir();
    let err =
        compiler().compile_in(&dir, "int broken( { return 0; }\n", CompileOptions::default()).map(|_| ()).unwrap_err();
    let JitError::Compile { stderr, source_path, .. } = &err else { panic!("expected a compile error, got {err}") };
    assert!(stderr.contains("error"), "{stderr}");
    assert!(source_path.exists(), "the failing source stays for inspection");
    assert!(err.to_string().contains(&source_path.display().to_string()));
}

#[test]
fn a_missing_compiler_is_an_error() {
    let err = CCompiler::new("/nonexistent/cc").unwrap_err();
    assert!(matches!(err, JitError::NoCompiler { .. }));
    assert!(err.to_string().starts_with("cannot run the C compiler `/nonexistent/cc`"), "{err}");
}

#[test]
fn a_corrupted_cache_entry_is_compiled_again() {
    // A truncated object left by another run (the loader serves paths this process already
    // loaded from memory, so the damaged copy goes into a second cache directory).
    let (good, damaged) = (fresh_dir(), fresh_dir());
    let cc = compiler();
    let first = cc.compile_in(&good, DOT, CompileOptions::default()).unwrap();
    std::fs::create_dir_all(&damaged).unwrap();
    let name = first.path().file_name().unwrap().to_owned();
    std::fs::write(damaged.join(&name), b"not an ELF object").unwrap();
    let again = cc.compile_in(&damaged, DOT, CompileOptions::default()).unwrap();
    assert_eq!(again.outcome(), Outcome::Compiled);
    assert_eq!(again.path(), damaged.join(&name));
    assert_eq!(call_dot(&again, &[1.0, 2.0], &[3.0, 4.0]), 11.0);
}

#[test]
fn an_unusable_cache_directory_is_an_error() {
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let err = compiler().compile_in(&file.join("cache"), DOT, CompileOptions::default()).map(|_| ()).unwrap_err();
    assert!(matches!(err, JitError::Cache { .. }), "{err}");
    assert!(err.to_string().contains("NMSPARSE_CACHE_DIR"), "{err}");
}

#[test]
fn concurrent_compiles_of_one_kernel_all_succeed() {
    let dir = fresh_dir();
    let cc = compiler();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| cc.compile_in(&dir, DOT, CompileOptions::default()).map(|c| call_dot(&c, &[2.0], &[5.0])))
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap().unwrap(), 10.0);
        }
    });
}
