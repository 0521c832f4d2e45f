//! The kernel cache directory: where it is, loading a verified object, and sweeping away what
//! dead processes left.

use std::path::{Path, PathBuf};

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

/// Loads `object`, the verified payload of entry `name`, from a file of its own written for
/// this load and removed right after (the mapping stays): never from the entry's path, whose
/// bytes may have changed since they were verified. (Not from an anonymous in-memory file:
/// their `/proc/self/fd/N` paths repeat once a descriptor is closed, and the loader serves a
/// path it has loaded before without looking at it again.)
pub(super) fn load_verified(
    store: &nm_cache::Store,
    name: &str,
    object: &[u8],
) -> Result<libloading::Library, JitError> {
    let load_error = |message: String| JitError::Load { path: store.path(name), message };
    let temporary = store.temporary(name);
    std::fs::write(temporary.path(), object).map_err(|e| load_error(e.to_string()))?;
    load(temporary.path()).map_err(load_error)
}

/// Loads with `RTLD_NODELETE`: kernels stay mapped for the life of the process. Unloading an
/// object that started OpenMP threads crashes the process when those threads next wake, and
/// kernels are small, so they are never unloaded.
fn load(path: &Path) -> Result<libloading::Library, String> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: loading runs the object's initializers. The objects loaded here are the ones this
    // module compiled from generated C (verified against the digest sealed with them), which
    // defines no initializers and links only libc (and OpenMP / the sanitizer runtimes when
    // asked).
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL | libc::RTLD_NODELETE) }
        .map(libloading::Library::from)
        .map_err(|e| e.to_string())
}

/// Removes, once per process, the temporary files of processes that no longer run (killed
/// while compiling) and are older than an hour (the directory may be shared with another
/// machine, whose process ids mean nothing here).
pub(super) fn sweep(store: &nm_cache::Store) {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        let Ok(entries) = std::fs::read_dir(store.dir()) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = temporary_owner(&name) else { continue };
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() > 3600);
            // SAFETY: signal 0 only asks whether the process exists.
            let gone = unsafe { libc::kill(pid, 0) } != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            if old && gone {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    });
}

/// The process id in a temporary file's name (`{entry}.{pid}.{n}.tmp`).
fn temporary_owner(name: &str) -> Option<libc::pid_t> {
    let stem = name.strip_suffix(".tmp")?;
    let mut parts = stem.rsplitn(3, '.');
    parts.next()?.parse::<u64>().ok()?;
    parts.next()?.parse().ok()
}
