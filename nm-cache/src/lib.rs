//! Verified on-disk cache entries.
//!
//! The compiled kernels nmsparse keeps between runs (shared objects for the C back end, CUBINs
//! for the GPU) are loaded straight into the process: a truncated, overwritten or bit-flipped
//! file would crash it or, worse, compute a wrong answer. So an entry is its payload followed
//! by a seal — a fixed marker, the payload's length and its SHA-256 — written to a unique
//! temporary file and renamed into place in one step. [`Store::get`] returns the payload only
//! when the whole file is there and the seal matches; anything else (missing, short, extended,
//! corrupted, a directory, unreadable) is a miss, which the caller answers by producing the
//! entry again and [`Store::put`]ting it over the bad one. Unverified bytes are never handed
//! out, and the bytes handed out are the ones verified: the caller loads them from memory,
//! not from the file, which another process may replace meanwhile.
//!
//! ```text
//! entry = payload ‖ "nmsparse-sealed\0" ‖ payload length (u64, little-endian) ‖ SHA-256(payload)
//! ```
//!
//! Temporary files are [`Temporary`] guards, removed when dropped, so no failure path leaves
//! one behind.

#![deny(missing_docs)]

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

/// The marker between an entry's payload and its length and digest.
const MARKER: &[u8; 16] = b"nmsparse-sealed\0";
/// Bytes of seal after the payload: marker, length, SHA-256.
const SEAL: usize = MARKER.len() + 8 + 32;
/// Entries above this size are not read (a cache holds kernels of kilobytes to megabytes).
const LARGEST: u64 = 1 << 30;

/// A directory of sealed entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store in `dir` (created when first written).
    pub fn new(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates the directory when it is missing.
    pub fn create(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)
    }

    /// The path of entry `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The payload of entry `name` when it is whole and its seal matches; `None` otherwise.
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        let mut file = std::fs::File::open(self.path(name)).ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.len() > LARGEST {
            return None;
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes).ok()?;
        unseal(bytes)
    }

    /// Stores `payload` as entry `name`, sealed, replacing any entry of that name in one step.
    pub fn put(&self, name: &str, payload: &[u8]) -> std::io::Result<()> {
        self.create()?;
        let temporary = self.temporary(name);
        std::fs::write(temporary.path(), seal(payload))?;
        temporary.rename_to(&self.path(name))
    }

    /// A unique path in the directory for a file being made for entry `name` (a compiler's
    /// output): no other thread or process gets the same, and it is removed when the guard
    /// is dropped unless [`Temporary::rename_to`] moved it into place.
    pub fn temporary(&self, name: &str) -> Temporary {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        Temporary { path: self.dir.join(format!("{name}.{}.{n}.tmp", std::process::id())), renamed: false }
    }
}

/// A temporary file of a [`Store`], removed when dropped.
#[derive(Debug)]
pub struct Temporary {
    path: PathBuf,
    renamed: bool,
}

impl Temporary {
    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames it to `to` (atomically, on one file system); it is removed if that fails.
    pub fn rename_to(mut self, to: &Path) -> std::io::Result<()> {
        std::fs::rename(&self.path, to)?;
        self.renamed = true;
        Ok(())
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `payload` followed by its seal.
pub fn seal(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + SEAL);
    out.extend_from_slice(payload);
    out.extend_from_slice(MARKER);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(payload));
    out
}

/// The payload of a sealed entry, `None` unless the seal is whole and matches.
pub fn unseal(mut entry: Vec<u8>) -> Option<Vec<u8>> {
    let n = entry.len().checked_sub(SEAL)?;
    let (payload, seal) = entry.split_at(n);
    let (marker, rest) = seal.split_at(MARKER.len());
    let (length, digest) = rest.split_at(8);
    let length = u64::from_le_bytes(length.try_into().ok()?);
    if marker != MARKER || length != n as u64 || Sha256::digest(payload).as_slice() != digest {
        return None;
    }
    entry.truncate(n);
    Some(entry)
}

/// The hexadecimal SHA-256 of `parts`, each followed by a zero byte (so that `["ab", "c"]`
/// and `["a", "bc"]` differ), shortened to `hex_digits`: a cache key.
pub fn key(parts: &[&[u8]], hex_digits: usize) -> String {
    let mut h = Sha256::new();
    for part in parts {
        h.update(part);
        h.update([0u8]);
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    hex[..hex_digits.min(hex.len())].to_string()
}
