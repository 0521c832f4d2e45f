//! Running the `nmsparse` command in tests: the binary, the sample data, scratch files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The command's output for `args`.
pub fn nmsparse(args: &[&str]) -> Output {
    nmsparse_with(args, &[])
}

/// The command's output for `args` with the environment variables `env` set.
pub fn nmsparse_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nmsparse"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the binary runs")
}

/// The path of a sample file shipped in `data/`.
pub fn sample(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data").join(name).to_string_lossy().into_owned()
}

/// A path in a scratch directory of this test process.
pub fn scratch(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let stem = exe.file_stem().map_or_else(|| "test".into(), |s| s.to_string_lossy().into_owned());
    let dir = std::env::temp_dir().join(format!("nmsparse-{stem}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
