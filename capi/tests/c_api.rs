//! The C API from C and C++: the examples in `examples/` and the error-path program in
//! `tests/c/` are compiled by the system compiler against both `libnmsparse.so` and
//! `libnmsparse.a`, run, and run again under `valgrind --leak-check=full --error-exitcode=1`
//! when valgrind is installed (CI installs it and sets `NMSPARSE_REQUIRE_VALGRIND=1`, which
//! makes its absence a failure).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>` with this crate's shared and static libraries, built first: `cargo test`
/// builds only the rlib a test links against, so the test asks cargo for the others (same
/// profile and target directory; cargo does not hold its build lock while tests run).
fn libraries() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().unwrap();
            let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
            let release = dir.file_name().is_some_and(|n| n == "release");
            let mut cargo = Command::new(env!("CARGO"));
            cargo.args(["build", "-p", "nmsparse-capi", "--lib"]).current_dir(root());
            if release {
                cargo.arg("--release");
            }
            let target = dir.parent().unwrap();
            let output = cargo.env("CARGO_TARGET_DIR", target).output().expect("cargo");
            assert!(output.status.success(), "building libnmsparse: {}", String::from_utf8_lossy(&output.stderr));
            for lib in ["libnmsparse.so", "libnmsparse.a"] {
                assert!(dir.join(lib).exists(), "{} is missing after the build", dir.join(lib).display());
            }
            dir
        })
        .clone()
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Compiles `source` (C or C++ by extension) into `out`, linked dynamically or statically.
fn build(source: &Path, out: &Path, statically: bool) {
    let libs = libraries();
    let cpp = source.extension().is_some_and(|e| e == "cpp");
    let compiler = if cpp {
        std::env::var("CXX").unwrap_or_else(|_| "c++".into())
    } else {
        std::env::var("CC").unwrap_or_else(|_| "cc".into())
    };
    let mut cmd = Command::new(&compiler);
    cmd.args(if cpp {
        ["-std=c++17", "-Wall", "-Wextra", "-Werror"]
    } else {
        ["-std=c99", "-Wall", "-Wextra", "-Werror"]
    })
    .arg("-g")
    .arg("-I")
    .arg(root().join("include"))
    .arg(source)
    .arg("-o")
    .arg(out);
    if statically {
        // The native libraries a Rust static library needs (`--print native-static-libs`).
        cmd.arg(libs.join("libnmsparse.a")).args(["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"]);
    } else {
        cmd.arg("-L").arg(&libs).arg("-lnmsparse").arg(format!("-Wl,-rpath,{}", libs.display())).arg("-lm");
    }
    let output = cmd.output().unwrap_or_else(|e| panic!("{compiler}: {e}"));
    assert!(output.status.success(), "{compiler} {}:\n{}", source.display(), String::from_utf8_lossy(&output.stderr));
}

/// Runs `program` with `args` (under valgrind when `valgrind`), asserting success and that
/// stdout contains `expect`.
fn run(program: &Path, args: &[&str], valgrind: bool, expect: &str) {
    let cache = std::env::temp_dir().join(format!("nmsparse-capi-cache-{}", std::process::id()));
    let mut cmd = if valgrind {
        let mut c = Command::new("valgrind");
        let suppressions = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/valgrind.supp");
        c.args(["--leak-check=full", "--error-exitcode=1", "--errors-for-leak-kinds=definite,indirect,possible"])
            .args(["--child-silent-after-fork=yes", "-q"])
            .arg(format!("--suppressions={}", suppressions.display()))
            .arg(program);
        // valgrind cannot run AVX-512: kernels are compiled without it there.
        c.env("NMSPARSE_CFLAGS", "-mno-avx512f");
        c
    } else {
        Command::new(program)
    };
    cmd.args(args).env("NMSPARSE_CACHE_DIR", &cache);
    let output = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains(expect),
        "{} {args:?} (valgrind: {valgrind}) failed:\n{stdout}\n{}",
        program.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn valgrind() -> bool {
    let present = Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success());
    if !present {
        assert!(
            std::env::var_os("NMSPARSE_REQUIRE_VALGRIND").is_none(),
            "NMSPARSE_REQUIRE_VALGRIND is set but valgrind is not installed"
        );
        eprintln!("valgrind is not installed: the programs run without it");
    }
    present
}

/// Builds `source` against both libraries and runs each build (and the shared one under
/// valgrind).
fn check(source: &str, args: &[&str], expect: &str) {
    check_source(&root().join(source), args, expect);
}

/// [`check`] for a source file anywhere.
fn check_source(source: &Path, args: &[&str], expect: &str) {
    let dir = std::env::temp_dir().join(format!("nmsparse-capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stem = source.file_stem().unwrap().to_string_lossy().to_string();
    let (shared, fixed) = (dir.join(format!("{stem}-shared")), dir.join(format!("{stem}-static")));
    build(source, &shared, false);
    build(source, &fixed, true);
    run(&shared, args, false, expect);
    run(&fixed, args, false, expect);
    if valgrind() {
        run(&shared, args, true, expect);
        run(&fixed, args, true, expect);
    }
}

#[test]
fn the_c_example_runs_spmv_spgemm_and_nm_pruning() {
    let matrix = root().join("data/power_law_500.mtx");
    check("examples/c/spmv_spgemm.c", &[matrix.to_str().unwrap()], "all ok");
    check("examples/c/spmv_spgemm.c", &[matrix.to_str().unwrap(), "interp"], "all ok");
}

#[test]
fn the_cpp_example_runs_spmv() {
    let matrix = root().join("data/power_law_500.mtx");
    check("examples/cpp/spmv.cpp", &[matrix.to_str().unwrap()], "C++ N:M SpMM: ok");
}

#[test]
fn every_error_path_returns_its_status_and_message() {
    let dir = std::env::temp_dir().join(format!("nmsparse-capi-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    check("capi/tests/c/errors.c", &[dir.to_str().unwrap()], "all error paths ok");
}

/// Sizes, counts, orders and enumerated values a caller gets wrong are refused with their own
/// status (never `NMS_ERR_INTERNAL`, an abort or a crash), and a kernel's operands are checked
/// by name.
#[test]
fn nm_plans_run_many_times_and_refuse_misuse() {
    check("capi/tests/c/plans.c", &[], "all plan checks ok");
}

#[test]
fn hard_edges_are_refused_with_their_own_status() {
    check("capi/tests/c/hard_edges.c", &[], "all hard edges ok");
}

/// `capi/install.sh PREFIX` installs the libraries, the header and `nmsparse.pc`; a program
/// built with `pkg-config --cflags --libs nmsparse` runs.
#[test]
fn the_install_script_and_pkg_config_file_work() {
    if Command::new("pkg-config").arg("--version").output().is_err() {
        eprintln!("pkg-config is not installed: skipping the install check");
        return;
    }
    libraries();
    let prefix = std::env::temp_dir().join(format!("nmsparse-install-{}", std::process::id()));
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().and_then(Path::parent).and_then(Path::parent).unwrap().to_path_buf();
    if !exe.parent().and_then(Path::parent).is_some_and(|d| d.ends_with("release")) {
        eprintln!("the install script builds the release profile: checked by the release test run");
        return;
    }
    let status =
        Command::new(root().join("capi/install.sh")).arg(&prefix).env("CARGO_TARGET_DIR", &target).output().unwrap();
    assert!(status.status.success(), "install.sh: {}", String::from_utf8_lossy(&status.stderr));
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "nmsparse"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .unwrap();
    assert!(flags.status.success(), "pkg-config: {}", String::from_utf8_lossy(&flags.stderr));
    let flags = String::from_utf8_lossy(&flags.stdout).to_string();
    let program = prefix.join("spmv_spgemm");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let output = Command::new(&cc)
        .arg("-std=c99")
        .arg(root().join("examples/c/spmv_spgemm.c"))
        .arg("-o")
        .arg(&program)
        .args(flags.split_whitespace())
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
        .arg("-lm")
        .output()
        .unwrap();
    assert!(output.status.success(), "{cc} with {flags}: {}", String::from_utf8_lossy(&output.stderr));
    run(&program, &[root().join("data/power_law_500.mtx").to_str().unwrap(), "interp"], false, "all ok");
    let _ = std::fs::remove_dir_all(&prefix);
}

/// The C program in README.md compiles and runs as written.
#[test]
fn the_readme_example_compiles_and_runs() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme.find("```c\n").expect("a C example in README.md") + 5;
    let end = start + readme[start..].find("```").unwrap();
    let dir = std::env::temp_dir().join(format!("nmsparse-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("spmv.c");
    std::fs::write(&source, &readme[start..end]).unwrap();
    check_source(&source, &[root().join("data/power_law_500.mtx").to_str().unwrap()], "row sums of A");
}
