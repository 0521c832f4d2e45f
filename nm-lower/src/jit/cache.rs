//! The kernel cache directory: where it is, and writing into it without ever exposing a
//! partial file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::JitError;

/// `$NMSPARSE_CACHE_DIR`, else `$XDG_CACHE_HOME/nmsparse`, else `~/.cache/nmsparse`, else a
/// folder in the temporary directory.
pub fn cache_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("NMSPARSE_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("nmsparse")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("nmsparse")))
        .unwrap_or_else(|| std::env::temp_dir().join("nmsparse-cache"))
}

pub(crate) fn ensure_dir(dir: &Path) -> Result<(), JitError> {
    std::fs::create_dir_all(dir).map_err(|source| JitError::Cache { dir: dir.to_path_buf(), source })
}

/// A name no other thread or process uses: key, process id, and a counter.
pub(crate) fn unique_name(dir: &Path, key: &str, extension: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{key}.{}.{n}.tmp.{extension}", std::process::id()))
}

/// Writes `bytes` to a unique temporary file and renames it to `path`.
pub(crate) fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), JitError> {
    let cache_error = |source| JitError::Cache { dir: dir.to_path_buf(), source };
    let stem = path.file_stem().map_or_else(|| "file".into(), |s| s.to_string_lossy().into_owned());
    let temporary = unique_name(dir, &stem, "c");
    std::fs::write(&temporary, bytes).map_err(cache_error)?;
    std::fs::rename(&temporary, path).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        cache_error(e)
    })
}
