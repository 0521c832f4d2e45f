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

/// No temporary file is left in the cache directory `dir`.
fn assert_no_temporaries(dir: &std::path::Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
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
    let omp = cc.compile_in(&dir, DOT, CompileOptions { openmp: true, ..CompileOptions::default() }).unwrap();
    assert_eq!(omp.outcome(), Outcome::Compiled);
    assert_ne!(omp.path(), first.path());
    // No temporary files are left behind.
    assert_no_temporaries(&dir);
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

/// A fresh cache directory holding `bytes` as the entry of DOT (named like `good`'s).
fn damaged_copy(good: &nm_lower::jit::Compiled, bytes: &[u8]) -> PathBuf {
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(good.path().file_name().unwrap()), bytes).unwrap();
    dir
}

/// Every damaged entry — truncated at many sizes, replaced by random bytes, with bits flipped
/// — is compiled again and replaced, and the kernel computes the right answer: no signal, no
/// wrong number, no temporary file left.
#[test]
fn damaged_cache_entries_are_compiled_again_never_loaded() {
    let cc = compiler();
    let good = cc.compile_in(&fresh_dir(), DOT, CompileOptions::default()).unwrap();
    let entry = std::fs::read(good.path()).unwrap();
    let mut damaged: Vec<Vec<u8>> = Vec::new();
    for len in [0, 1, 16, 64, 1000, 4096, 5000, 8192, 12000, entry.len() / 2, entry.len() - 1] {
        damaged.push(entry[..len.min(entry.len() - 1)].to_vec());
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    damaged.push((0..20).map(|_| random() as u8).collect());
    damaged.push((0..entry.len()).map(|_| random() as u8).collect());
    for _ in 0..12 {
        let mut flipped = entry.clone();
        for _ in 0..2 {
            let bit = random() as usize % (entry.len() * 8);
            flipped[bit / 8] ^= 1 << (bit % 8);
        }
        damaged.push(flipped);
    }
    for bytes in damaged {
        let dir = damaged_copy(&good, &bytes);
        let again = cc.compile_in(&dir, DOT, CompileOptions::default()).unwrap();
        assert_eq!(again.outcome(), Outcome::Compiled, "a damaged entry of {} bytes was loaded", bytes.len());
        assert_eq!(call_dot(&again, &[1.0, 2.0, 3.0], &[3.0, 4.0, 5.0]), 26.0);
        assert_eq!(std::fs::read(again.path()).unwrap(), entry, "the entry is replaced by a whole one");
        assert_no_temporaries(&dir);
    }
}

/// A script standing for a compiler (`#!/bin/sh` + `body`), in a fresh directory.
fn fake_compiler(body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = fresh_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cc.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn a_compiler_that_never_returns_is_stopped_at_its_time_limit() {
    let limit = std::time::Duration::from_millis(500);
    // Hangs whatever it is asked: it is not run until there is something to compile.
    let hangs = fake_compiler("sleep 1000");
    let cc = CCompiler::with_timeout(hangs.to_str().unwrap(), limit).unwrap();
    let dir = fresh_dir();
    let start = std::time::Instant::now();
    let err = cc.compile_in(&dir, DOT, CompileOptions::default()).map(|_| ()).unwrap_err();
    assert!(start.elapsed() < std::time::Duration::from_secs(10), "took {:?}", start.elapsed());
    assert!(matches!(err, JitError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("NMSPARSE_CC_TIMEOUT"), "{err}");
    assert_no_temporaries(&dir);
}

#[test]
fn a_replaced_compiler_program_compiles_anew() {
    // A wrapper around the real compiler: the cache serves its object until the wrapper is
    // replaced by another program, which gets a key of its own.
    let wrapper = fake_compiler("exec cc \"$@\"");
    let dir = fresh_dir();
    let compile = || {
        let cc = CCompiler::new(wrapper.to_str().unwrap()).unwrap();
        cc.compile_in(&dir, DOT, CompileOptions::default()).unwrap().outcome()
    };
    assert_eq!(compile(), Outcome::Compiled);
    assert_eq!(compile(), Outcome::Cached);
    std::fs::write(&wrapper, "#!/bin/sh\n# another version\nexec cc \"$@\"\n").unwrap();
    assert_eq!(compile(), Outcome::Compiled);
    assert_eq!(compile(), Outcome::Cached);
}

#[test]
fn a_compiler_that_succeeds_without_an_object_is_named_as_such() {
    let silent = fake_compiler("exit 0");
    let cc = CCompiler::new(silent.to_str().unwrap()).unwrap();
    let dir = fresh_dir();
    let err = cc.compile_in(&dir, DOT, CompileOptions::default()).map(|_| ()).unwrap_err();
    assert!(matches!(err, JitError::NoObject { .. }), "{err}");
    assert!(err.to_string().contains("wrote no object"), "{err}");
    assert_no_temporaries(&dir);
}

#[test]
fn a_compiler_command_with_arguments_is_split_like_a_shell_word_list() {
    let program = compiler().program();
    let cc = CCompiler::new(&format!("{program} -O1 '-DUNUSED=a b'")).unwrap();
    let c = cc.compile_in(&fresh_dir(), DOT, CompileOptions::default()).unwrap();
    assert_eq!(call_dot(&c, &[2.0], &[3.0]), 6.0);
    let err = CCompiler::new("gcc 'unbalanced").map(|_| ()).unwrap_err();
    assert!(matches!(err, JitError::Config(_)), "{err}");
}
