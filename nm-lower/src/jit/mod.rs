//! Compiling C source into a shared object with the system C compiler, caching it on disk,
//! and loading it.
//!
//! - The compiler is `$CC` (default `cc`), split into words as a shell would (`CC="gcc -O1"`,
//!   as `make` allows), run with `-std=c99 -O3 -march=native -fPIC -shared -pipe` (`-O2` where
//!   [`OptLevel`] says), plus `-fopenmp` for parallel kernels and
//!   `-fsanitize=address,undefined` on request, then the words of
//!   `$NMSPARSE_CFLAGS` (e.g. `-mno-avx512f` for valgrind, which cannot run AVX-512 code).
//!   It runs under a time limit, `$NMSPARSE_CC_TIMEOUT` seconds (default
//!   [`DEFAULT_TIMEOUT_SECONDS`]): past it the compiler and everything it started are killed
//!   and the compile fails with [`JitError::Timeout`].
//! - The cache directory is `$NMSPARSE_CACHE_DIR`, else `$XDG_CACHE_HOME/nmsparse`, else
//!   `~/.cache/nmsparse`. Objects are keyed by a SHA-256 of the source, the flags, the
//!   compiler's identity and this crate's version, so a change to any of them compiles anew.
//!   The identity is the compiler program's resolved path, size and modification time (as
//!   ccache's default `compiler_check=mtime`): reading them costs microseconds, where asking
//!   the compiler its `--version` starts a process and costs more than the rest of a cache hit
//!   (BENCHMARKS.md, "Compile latency"). An upgrade replaces the program, and so the key.
//! - Entries are sealed ([`nm_cache`]): written atomically with a SHA-256 of the object, and
//!   loaded only when it matches. A truncated, overwritten or corrupted entry is a miss that
//!   compiles the kernel again and replaces it; the bytes loaded are the bytes verified (from
//!   a private copy, never from the entry, which another process may replace meanwhile).
//! - A compiler failure is an error carrying the compiler's stderr and the path of the source
//!   it was given, which stays in the cache directory for inspection. A compiler that
//!   succeeds without writing an object is [`JitError::NoObject`]. Temporary files are
//!   removed on every path, and those of processes that died are swept away.
//! - Loaded kernels are never unloaded: an object that started OpenMP threads cannot be
//!   unloaded safely. Within one process an entry already loaded is served from memory.

mod cache;
mod run;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use cache::cache_dir;

/// Seconds a compile may take unless `$NMSPARSE_CC_TIMEOUT` says otherwise.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;

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
    /// `$CC` or another setting is not usable as written.
    #[error("{0}")]
    Config(String),
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
    /// The compiler ran past its time limit and was killed.
    #[error(
        "`{program}` did not finish compiling {} within {} s and was stopped (set NMSPARSE_CC_TIMEOUT to allow longer)",
        source_path.display(), limit.as_secs_f64()
    )]
    Timeout {
        /// The compiler.
        program: String,
        /// The limit.
        limit: Duration,
        /// The source it was compiling.
        source_path: PathBuf,
    },
    /// The compiler reported success but wrote no object.
    #[error("`{program}` reported success compiling {} but wrote no object file{}", source_path.display(), if stderr.is_empty() { String::new() } else { format!(":\n{stderr}") })]
    NoObject {
        /// The compiler.
        program: String,
        /// What it printed.
        stderr: String,
        /// The source it compiled.
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
    /// How hard the compiler optimizes.
    pub level: OptLevel,
}

/// The compiler's optimization level. `-O3` pays where a dense loop sweeps a row of an array
/// it adds into (SpMM's inner loop); elsewhere it measured no faster than `-O2`, or slower
/// (its vectorizer splits SDDMM's dot products badly), and takes longer to compile
/// (BENCHMARKS.md, "Compile latency").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OptLevel {
    /// `-O2`.
    O2,
    /// `-O3`: the default for C the user wrote.
    #[default]
    O3,
}

/// Whether a kernel was compiled now or found in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The compiler ran.
    Compiled,
    /// A cached object was loaded (or was already loaded in this process).
    Cached,
}

/// A loaded shared object (a clone shares it).
#[derive(Clone)]
pub struct Compiled {
    library: Arc<libloading::Library>,
    path: PathBuf,
    outcome: Outcome,
}

impl Compiled {
    /// The cache entry it was loaded from.
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
    /// The program and the words given with it.
    command: Vec<String>,
    /// The program's resolved path, size and modification time.
    identity: String,
    /// `$NMSPARSE_CFLAGS`, split on whitespace.
    extra: Vec<String>,
    timeout: Duration,
}

/// Entries this process loaded, by path: served again without reading or loading anything. (A
/// list: a process loads at most thousands, and a hash table's interior pointers would make
/// leak checkers report the loaded libraries as possibly lost.)
static LOADED: Mutex<Vec<(PathBuf, Arc<libloading::Library>)>> = Mutex::new(Vec::new());

impl CCompiler {
    /// `$CC` or `cc`, with `$NMSPARSE_CC_TIMEOUT`; fails when it cannot be run.
    pub fn from_env() -> Result<Self, JitError> {
        let cc = std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into());
        let limit = match std::env::var("NMSPARSE_CC_TIMEOUT").ok().filter(|s| !s.trim().is_empty()) {
            None => Duration::from_secs(DEFAULT_TIMEOUT_SECONDS),
            Some(text) => text
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 1e9)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| {
                    JitError::Config(format!("NMSPARSE_CC_TIMEOUT={text}: expected a positive number of seconds"))
                })?,
        };
        Self::with_timeout(&cc, limit)
    }

    /// A compiler command (`gcc`, `clang -O2`, split into words as a shell would); fails when
    /// it cannot be run.
    pub fn new(command: &str) -> Result<Self, JitError> {
        Self::with_timeout(command, Duration::from_secs(DEFAULT_TIMEOUT_SECONDS))
    }

    /// A compiler command whose every run is stopped after `limit`; fails when its program
    /// is not found (on `PATH` where it names no directory).
    pub fn with_timeout(command: &str, limit: Duration) -> Result<Self, JitError> {
        let words = shlex::split(command)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| JitError::Config(format!("CC={command}: not a command (unbalanced quotes, or empty)")))?;
        let identity =
            identity(&words[0]).map_err(|source| JitError::NoCompiler { program: command.to_string(), source })?;
        let extra = std::env::var("NMSPARSE_CFLAGS").unwrap_or_default().split_whitespace().map(String::from).collect();
        Ok(Self { command: words, identity, extra, timeout: limit })
    }

    /// The compiler command, as given.
    pub fn program(&self) -> String {
        self.command.join(" ")
    }

    fn flags(&self, options: CompileOptions) -> Vec<&str> {
        let level = match options.level {
            OptLevel::O2 => "-O2",
            OptLevel::O3 => "-O3",
        };
        let mut flags = vec!["-std=c99", level, "-march=native", "-fPIC", "-shared", "-pipe"];
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
        let program = self.program();
        let key = nm_cache::key(
            &[
                source.as_bytes(),
                flags.join(" ").as_bytes(),
                program.as_bytes(),
                self.identity.as_bytes(),
                env!("CARGO_PKG_VERSION").as_bytes(),
            ],
            32,
        );
        let store = nm_cache::Store::new(dir);
        let name = format!("{key}.so");
        let entry = store.path(&name);
        let loaded = |list: &[(PathBuf, Arc<libloading::Library>)]| {
            list.iter().find(|(p, _)| *p == entry).map(|(_, l)| l.clone())
        };
        if let Some(library) = loaded(&LOADED.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(Compiled { library, path: entry, outcome: Outcome::Cached });
        }
        let cache_error = |source| JitError::Cache { dir: dir.to_path_buf(), source };
        store.create().map_err(cache_error)?;
        cache::sweep(&store);
        let (object, outcome) = match store.get(&name) {
            Some(object) => (object, Outcome::Cached),
            None => {
                let object = self.run(&store, &key, source, &flags)?;
                store.put(&name, &object).map_err(cache_error)?;
                (object, Outcome::Compiled)
            }
        };
        let library = Arc::new(cache::load_verified(&store, &name, &object)?);
        let mut list = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have loaded it meanwhile: keep one.
        let library = match loaded(&list) {
            Some(first) => first,
            None => {
                list.push((entry.clone(), library.clone()));
                library
            }
        };
        Ok(Compiled { library, path: entry, outcome })
    }

    /// Runs the compiler on `source` (kept as `{key}.c` in the store) and returns the object.
    fn run(&self, store: &nm_cache::Store, key: &str, source: &str, flags: &[&str]) -> Result<Vec<u8>, JitError> {
        let cache_error = |source| JitError::Cache { dir: store.dir().to_path_buf(), source };
        let source_path = store.path(&format!("{key}.c"));
        let temporary = store.temporary(&format!("{key}.c"));
        std::fs::write(temporary.path(), source).map_err(cache_error)?;
        temporary.rename_to(&source_path).map_err(cache_error)?;
        let object = store.temporary(&format!("{key}.so"));
        let mut args: Vec<&str> = self.command[1..].iter().map(String::as_str).collect();
        args.extend(flags);
        args.push("-o");
        let (object_arg, source_arg) = (object.path().to_string_lossy(), source_path.to_string_lossy());
        args.push(&object_arg);
        args.push(&source_arg);
        let program = self.program();
        let finished = run::with_limit(&self.command[0], &args, self.timeout)
            .map_err(|source| JitError::NoCompiler { program: program.clone(), source })?;
        let Some(finished) = finished else {
            return Err(JitError::Timeout { program, limit: self.timeout, source_path });
        };
        let stderr = String::from_utf8_lossy(&finished.stderr).into_owned();
        if !finished.status.success() {
            return Err(JitError::Compile { program, status: finished.status.to_string(), stderr, source_path });
        }
        match std::fs::read(object.path()) {
            Ok(bytes) if !bytes.is_empty() => Ok(bytes),
            _ => Err(JitError::NoObject { program, stderr, source_path }),
        }
    }

    /// [`compile_in`](Self::compile_in) the default cache directory.
    pub fn compile(&self, source: &str, options: CompileOptions) -> Result<Compiled, JitError> {
        self.compile_in(&cache_dir(), source, options)
    }
}

/// What identifies `program` (found on `PATH` where it names no directory, as the process
/// that runs it finds it: `/bin:/usr/bin` where `PATH` is unset): the path it resolves to
/// through every link, its size and its modification time.
fn identity(program: &str) -> std::io::Result<String> {
    let search = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let found = which::which_in(program, Some(search), cwd)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string()))?;
    let path = std::fs::canonicalize(found)?;
    let metadata = std::fs::metadata(&path)?;
    let modified = metadata.modified()?.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Ok(format!("{} {} {}", path.display(), metadata.len(), modified.as_nanos()))
}
