//! Run-time compilation of the kernels with NVRTC, for a real architecture, and the CUBIN
//! cache that lets a machine without NVRTC run kernels compiled elsewhere.

use std::ffi::CString;
use std::path::PathBuf;

use cudarc::nvrtc::{result, sys};

use crate::error::{CudaError, Result};

/// A kernel compiled to a CUBIN, with what ptxas said about it.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The CUBIN image, loadable by `cuModuleLoadData`.
    pub cubin: Vec<u8>,
    /// NVRTC's log (ptxas's `-v` report among it), empty when the CUBIN came from the cache.
    pub log: String,
}

/// Registers and spills of one function, from ptxas's `-v` report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    /// The function's name.
    pub function: String,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of spill stores.
    pub spill_stores: u32,
    /// Bytes of spill loads.
    pub spill_loads: u32,
    /// Bytes of stack frame.
    pub stack: u32,
}

/// Whether `libnvrtc` can be loaded in this process.
pub fn nvrtc_present() -> bool {
    // SAFETY: probes for the shared library with dlopen; nothing of it is called.
    unsafe { sys::is_culib_present() }
}

/// Where compiled kernels are kept: `$NMSPARSE_CUDA_CACHE`, else `$XDG_CACHE_HOME/nmsparse/cubin`,
/// else `~/.cache/nmsparse/cubin`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NMSPARSE_CUDA_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("nmsparse").join("cubin")
}

/// A CUBIN for `source` compiled with `options` for `arch` (`sm_80`, `sm_90a`, …): from the
/// cache when it is there, else compiled by NVRTC and stored.
pub fn cubin(kernel: &str, source: &str, options: &[String], arch: &str) -> Result<Compiled> {
    cubin_in(&cache_dir(), kernel, source, options, arch)
}

/// [`cubin`] with the cache in `dir` (to fill a cache for another machine). Entries are sealed
/// with a SHA-256 of the CUBIN ([`nm_cache`]): a truncated or corrupted one is compiled again
/// (where NVRTC is) and replaced, never handed to the driver.
pub fn cubin_in(dir: &std::path::Path, kernel: &str, source: &str, options: &[String], arch: &str) -> Result<Compiled> {
    let store = nm_cache::Store::new(dir);
    let mut parts: Vec<&[u8]> = vec![source.as_bytes(), arch.as_bytes()];
    parts.extend(options.iter().map(|o| o.as_bytes()));
    let name = format!("{kernel}-{arch}-{}.cubin", nm_cache::key(&parts, 16));
    if let Some(cubin) = store.get(&name) {
        return Ok(Compiled { cubin, log: String::new() });
    }
    if !nvrtc_present() {
        return Err(CudaError::NoNvrtc {
            kernel: kernel.to_string(),
            arch: arch.to_string(),
            cache: dir.display().to_string(),
        });
    }
    let compiled = compile(kernel, source, options, arch)?;
    // A cache that cannot be written only costs a recompilation next time.
    let _ = store.put(&name, &compiled.cubin);
    Ok(compiled)
}

/// Compiles with NVRTC (never the cache), `-v` to ptxas so the log reports registers and spills.
pub fn compile(kernel: &str, source: &str, options: &[String], arch: &str) -> Result<Compiled> {
    if !nvrtc_present() {
        return Err(CudaError::NoNvrtc {
            kernel: kernel.to_string(),
            arch: arch.to_string(),
            cache: cache_dir().display().to_string(),
        });
    }
    let fail = |log: String| CudaError::Compile { kernel: kernel.to_string(), arch: arch.to_string(), log };
    let src = CString::new(source).map_err(|_| fail("the source holds a NUL byte".into()))?;
    let name = CString::new(format!("{kernel}.cu")).map_err(|_| fail("the name holds a NUL byte".into()))?;
    let mut all = vec![format!("--gpu-architecture={arch}"), "--std=c++17".into(), "--ptxas-options=-v".into()];
    all.extend(options.iter().cloned());
    let prog = result::create_program(&src, Some(&name)).map_err(|e| fail(format!("{e:?}")))?;
    let program = Program(prog);
    // SAFETY: `program.0` was created above and is destroyed only by `Program`'s drop.
    let compiled = unsafe { result::compile_program(program.0, &all) };
    // SAFETY: as above.
    let log = unsafe { result::get_program_log(program.0) }.map(|raw| c_text(&raw)).unwrap_or_default();
    if let Err(e) = compiled {
        return Err(fail(format!("{e:?}\n{log}")));
    }
    let mut size = 0usize;
    // SAFETY: as above; `size` is a valid out pointer.
    unsafe { sys::nvrtcGetCUBINSize(program.0, &mut size) }.result().map_err(|e| fail(format!("{e:?}")))?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` holds the `size` bytes NVRTC reported.
    unsafe { sys::nvrtcGetCUBIN(program.0, cubin.as_mut_ptr().cast()) }.result().map_err(|e| fail(format!("{e:?}")))?;
    if cubin.is_empty() {
        return Err(fail(format!("no CUBIN for {arch} (a virtual architecture?)\n{log}")));
    }
    Ok(Compiled { cubin, log })
}

/// Destroys the program on every path out of [`compile`].
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by `create_program` and is destroyed once, here.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

fn c_text(raw: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The `-v` report of ptxas, one entry per function:
/// ```text
/// ptxas info    : Compiling entry function 'nm_spmm_f32' for 'sm_80'
/// ptxas info    : Function properties for nm_spmm_f32
///     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 126 registers, used 0 barriers, 400 bytes cmem[0]
/// ```
pub fn usage(log: &str) -> Vec<Usage> {
    let mut out: Vec<Usage> = Vec::new();
    let number_before = |line: &str, what: &str| -> Option<u32> {
        let at = line.find(what)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let function = rest.split('\'').next().unwrap_or("").to_string();
            out.push(Usage { function, registers: 0, spill_stores: 0, spill_loads: 0, stack: 0 });
        } else if let Some(current) = out.last_mut() {
            if line.contains("bytes spill stores") {
                current.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
                current.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
                current.stack = number_before(line, "bytes stack frame").unwrap_or(0);
            } else if let Some(r) = number_before(line, "registers") {
                current.registers = r;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_report_is_read_per_function() {
        let log = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'nm_spmm_f32' for 'sm_80'\n\
ptxas info    : Function properties for nm_spmm_f32\n\
    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads\n\
ptxas info    : Used 126 registers, used 1 barriers, 400 bytes cmem[0]\n\
ptxas info    : Compiling entry function 'nm_splitk_reduce' for 'sm_80'\n\
ptxas info    : Function properties for nm_splitk_reduce\n\
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Used 14 registers, 380 bytes cmem[0]\n";
        let u = usage(log);
        assert_eq!(
            u,
            vec![
                Usage { function: "nm_spmm_f32".into(), registers: 126, spill_stores: 12, spill_loads: 16, stack: 8 },
                Usage { function: "nm_splitk_reduce".into(), registers: 14, spill_stores: 0, spill_loads: 0, stack: 0 },
            ]
        );
    }

    #[test]
    fn a_damaged_cubin_entry_is_never_returned() {
        let dir = std::env::temp_dir().join(format!("nm-cuda-cubin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = nm_cache::Store::new(&dir);
        let name = "k-sm_90a-0123.cubin";
        store.put(name, b"a cubin image").unwrap();
        assert_eq!(store.get(name).as_deref(), Some(&b"a cubin image"[..]));
        let path = store.path(name);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(store.get(name), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
