//! The Python package's tests (`python/tests`, the docstrings' examples, the examples of
//! `README.md` and `docs/python.md`), run by pytest against the extension built from this
//! checkout.
//!
//! The extension is built with cargo (the profile of this test), staged beside the package's
//! Python files in a temporary directory and imported from there, so what is tested is this
//! source, never an installed copy. The interpreter is `NMSPARSE_PYTHON` (default `python3`)
//! and needs numpy, scipy and pytest; without them the test says so and passes, unless
//! `NMSPARSE_REQUIRE_PYTHON=1` (CI) makes that a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> String {
    std::env::var("NMSPARSE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// Whether the interpreter has what the tests import; else why not.
fn python_ready(python: &str) -> Result<(), String> {
    let out = Command::new(python)
        .args(["-c", "import numpy, scipy, pytest"])
        .output()
        .map_err(|e| format!("cannot run `{python}`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(format!("`{python}` lacks numpy, scipy or pytest ({})", stderr.lines().last().unwrap_or("").trim()))
    }
}

/// Builds the extension with this test's profile; returns the shared library.
fn build_extension() -> PathBuf {
    let release = !cfg!(debug_assertions);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut build = Command::new(cargo);
    build.current_dir(root()).args(["build", "-p", "nmsparse-python"]);
    if release {
        build.arg("--release");
    }
    let status = build.status().expect("cargo runs");
    assert!(status.success(), "building the extension failed");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    target.join(if release { "release" } else { "debug" }).join("lib_native.so")
}

/// A directory removed when dropped.
struct Staged(PathBuf);

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The package's Python files and the extension, in a fresh directory.
fn stage(extension: &Path) -> Staged {
    let dir = Staged(std::env::temp_dir().join(format!("nmsparse-python-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let package = dir.0.join("nmsparse");
    std::fs::create_dir_all(&package).expect("staging directory");
    for entry in std::fs::read_dir(root().join("python/python/nmsparse")).expect("the package sources") {
        let path = entry.expect("a package file").path();
        if path.is_file() {
            std::fs::copy(&path, package.join(path.file_name().expect("a name"))).expect("copy a package file");
        }
    }
    std::fs::copy(extension, package.join("_native.abi3.so")).expect("copy the extension");
    dir
}

#[test]
fn the_python_package_passes_its_tests() {
    let python = python();
    if let Err(why) = python_ready(&python) {
        assert!(std::env::var("NMSPARSE_REQUIRE_PYTHON").as_deref() != Ok("1"), "{why}");
        println!("skipped: {why} (NMSPARSE_PYTHON names another interpreter)");
        return;
    }
    let extension = build_extension();
    let staged = stage(&extension);
    let path = match std::env::var_os("PYTHONPATH") {
        Some(old) => std::env::join_paths(std::iter::once(staged.0.clone()).chain(std::env::split_paths(&old)))
            .expect("a PYTHONPATH"),
        None => staged.0.clone().into_os_string(),
    };
    let out = Command::new(&python)
        .current_dir(&staged.0)
        .env("PYTHONPATH", path)
        .env("NMSPARSE_SHARED_DATA", root().join("../shared/data"))
        .env("NMSPARSE_REPO", root())
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "--doctest-modules"])
        .arg(staged.0.join("nmsparse"))
        .arg(root().join("python/tests"))
        .output()
        .expect("pytest runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success(), "the Python tests failed:\n{text}");
}
