//! Compiling C source into a shared object with the system C compiler, caching it on disk,
//! and loading it.
//!
//! - The compiler is `$CC` (default `cc`), run with `-std=c99 -O3 -march=native -fPIC -shared`,
//!   plus `-fopenmp` for parallel kernels and `-fsanitize=address,undefined` on request, then
//!   the words of `$NMSPARSE_CFLAGS` (e.g. `-mno-avx512f` for valgrind, which cannot run
//!   AVX-512 code).
//! - The cache directory is `$NMSPARSE_CACHE_DIR`, else `$XDG_CACHE_HOME/nmsparse`, else
//!   `~/.cache/nmsparse`. Objects are keyed by a SHA-256 of the source, the flags, the
//!   compiler's `--version` and this crate's version, so a change to any of them compiles anew.
//! - Writes are atomic: source and object go to unique temporary names and are renamed into
//!   place, so concurrent processes compiling the same kernel both succeed and never see a
//!   partial file. A cached object that fails to load (corrupted, truncated) is deleted and
//!   compiled again.
//! - A compiler failure is an error carrying the compiler's stderr and the path of the source
//!   it was given, which stays in the cache directory for inspection.
//! - Loaded kernels are never unloaded: an object that started OpenMP threads cannot be
//!   unloaded safely. Within one process the loader also serves a path it has already loaded
//!   from memory.

mod cache;

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

pub use cache::cache_dir;

/// What can go wrong between C source and a loaded kernel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JitError {
    /// The C compiler could not be started.
    #[error("cannot run the C compiler `{program}` ({source}); install one or set CC")]
    NoCompiler {
        /// The program tried.
        program: String,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// The compiler rejected the source.
    #[error("`{program}` failed ({status}) compiling {}:\n{stderr}", source_path.display())]
    Compile {
        /// The compiler.
        program: String,
        /// Its exit status.
        status: String,
        /// What it printed.
        stderr: String,
        /// The source it compiled (kept for inspection).
        source_path: PathBuf,
    },
    /// The cache directory cannot be created or written.
    #[error("kernel cache {}: {source} (set NMSPARSE_CACHE_DIR to a writable directory)", dir.display())]
    Cache {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The shared object does not load.
    #[error("cannot load {}: {message}", path.display())]
    Load {
        /// The object.
        path: PathBuf,
        /// The loader's message.
        message: String,
    },
    /// The object lacks an expected function.
    #[error("the compiled kernel has no symbol `{name}`: {message}")]
    Symbol {
        /// The symbol.
        name: String,
        /// The loader's message.
        message: String,
    },
}

/// Extra switches for one compilation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// Link OpenMP (`#pragma omp parallel for` in the source).
    pub openmp: bool,
    /// Build with `-fsanitize=address,undefined` (slow; for testing generated code).
    pub sanitize: bool,
}

/// Whether a kernel was compiled now or found in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The compiler ran.
    Compiled,
    /// A cached object was loaded.
    Cached,
}

/// A loaded shared object.
pub struct Compiled {
    library: libloading::Library,
    path: PathBuf,
    outcome: Outcome,
}

impl Compiled {
    /// Where the object lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it was compiled now or came from the cache.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Looks up a function.
    ///
    /// # Safety
    /// `T` must be the function's true C signature (an `unsafe extern "C" fn(...)` type): the
    /// loader cannot check it, and calling through a wrong type is undefined behaviour.
    pub unsafe fn function<T>(&self, name: &str) -> Result<libloading::Symbol<'_, T>, JitError> {
        // SAFETY: the caller guarantees `T` matches the symbol's definition in the C source.
        unsafe { self.library.get(name.as_bytes()) }
            .map_err(|e| JitError::Symbol { name: name.to_string(), message: e.to_string() })
    }
}

/// The system C compiler, as configured by `$CC`.
#[derive(Clone, Debug)]
pub struct CCompiler {
    program: String,
    version: String,
    /// `$NMSPARSE_CFLAGS`, split on whitespace.
    extra: Vec<String>,
}

impl CCompiler {
    /// `$CC` or `cc`; fails when it cannot be run.
    pub fn from_env() -> Result<Self, JitError> {
        Self::new(&std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into()))
    }

    /// A specific compiler program; fails when it cannot be run.
    pub fn new(program: &str) -> Result<Self, JitError> {
        let output = Command::new(program)
            .arg("--version")
            .output()
            .map_err(|source| JitError::NoCompiler { program: program.to_string(), source })?;
        let version = String::from_utf8_lossy(&output.stdout).lines().next().unwrap_or("").to_string();
        let extra = std::env::var("NMSPARSE_CFLAGS").unwrap_or_default().split_whitespace().map(String::from).collect();
        Ok(Self { program: program.to_string(), version, extra })
    }

    /// The compiler program.
    pub fn program(&self) -> &str {
        &self.program
    }

    fn flags(&self, options: CompileOptions) -> Vec<&str> {
        let mut flags = vec!["-std=c99", "-O3", "-march=native", "-fPIC", "-shared"];
        if options.openmp {
            flags.push("-fopenmp");
        }
        if options.sanitize {
            flags.extend(["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]);
        }
        flags.extend(self.extra.iter().map(String::as_str));
        flags
    }

    /// Compiles `source` (or finds it in the cache directory `dir`) and loads it.
    pub fn compile_in(&self, dir: &Path, source: &str, options: CompileOptions) -> Result<Compiled, JitError> {
        let flags = self.flags(options);
        let key = {
            let mut h = Sha256::new();
            for part in [source, &flags.join(" "), &self.program, &self.version, env!("CARGO_PKG_VERSION")] {
                h.update(part.as_bytes());
                h.update([0u8]);
            }
            h.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect::<String>()
        };
        cache::ensure_dir(dir)?;
        let object = dir.join(format!("{key}.so"));
        if object.exists() {
            match load(&object) {
                Ok(library) => return Ok(Compiled { library, path: object, outcome: Outcome::Cached }),
                // Corrupted or truncated: compile it again.
                Err(_) => {
                    let _ = std::fs::remove_file(&object);
                }
            }
        }
        let source_path = dir.join(format!("{key}.c"));
        cache::write_atomically(dir, &source_path, source.as_bytes())?;
        let temporary = cache::unique_name(dir, &key, "so");
        let output = Command::new(&self.program)
            .args(&flags)
            .arg("-o")
            .arg(&temporary)
            .arg(&source_path)
            .output()
            .map_err(|source| JitError::NoCompiler { program: self.program.clone(), source })?;
        if !output.status.success() {
            let _ = std::fs::remove_file(&temporary);
            return Err(JitError::Compile {
                program: self.program.clone(),
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
                source_path,
            });
        }
        std::fs::rename(&temporary, &object).map_err(|source| JitError::Cache { dir: dir.to_path_buf(), source })?;
        let library = load(&object)?;
        Ok(Compiled { library, path: object, outcome: Outcome::Compiled })
    }

    /// [`compile_in`](Self::compile_in) the default cache directory.
    pub fn compile(&self, source: &str, options: CompileOptions) -> Result<Compiled, JitError> {
        self.compile_in(&cache_dir(), source, options)
    }
}

/// Loads with `RTLD_NODELETE`: kernels stay mapped for the life of the process. Unloading an
/// object that started OpenMP threads crashes the process when those threads next wake, and
/// kernels are small, so they are never unloaded.
fn load(path: &Path) -> Result<libloading::Library, JitError> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: loading runs the object's initializers. The objects loaded here are the ones this
    // module compiled from generated C, which defines no initializers and links only libc
    // (and OpenMP / the sanitizer runtimes when asked).
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL | libc::RTLD_NODELETE) }
        .map(libloading::Library::from)
        .map_err(|e| JitError::Load { path: path.to_path_buf(), message: e.to_string() })
}
