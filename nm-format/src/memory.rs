//! A check before allocating storage sized by user data: refuse, with an error saying how
//! much was needed, rather than let the allocator abort or the kernel kill the process.

use crate::error::{Result, TensorError};

/// Memory the system can still give, in bytes (`MemAvailable` on Linux; unknown elsewhere).
/// Kernels that grow their outputs check it too: with overcommit, an allocation that succeeds
/// can still get the process killed when its pages are touched.
pub fn available() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Fails when `bytes` exceed what the system has available.
pub fn ensure_available(bytes: u128, what: impl FnOnce() -> String) -> Result<()> {
    const GIB: f64 = (1u64 << 30) as f64;
    match available() {
        Some(avail) if bytes > avail => Err(TensorError::TooLarge {
            what: format!("{} ({:.1} GiB needed, {:.1} GiB available)", what(), bytes as f64 / GIB, avail as f64 / GIB),
        }),
        _ => Ok(()),
    }
}
