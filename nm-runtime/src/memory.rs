//! A check before allocating storage sized by user data: refuse, with an error saying how
//! much was needed, rather than let the allocator abort or the kernel kill the process.

/// A request larger than the memory the system can still give (or than a vector can hold):
/// what it was for, how much it needed and how much there was.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}")]
pub struct NotAvailable {
    /// What the memory was for, with the sizes.
    pub what: String,
}

/// Memory the system can still give, in bytes (`MemAvailable` on Linux; unknown elsewhere).
/// Kernels that grow their outputs check it too: with overcommit, an allocation that succeeds
/// can still get the process killed when its pages are touched.
pub fn available() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Requests from this many bytes on are checked against [`available`]; smaller ones are not:
/// reading `/proc/meminfo` takes tens of microseconds, a visible part of a short SpMV that
/// checked its per-thread copies on every run, and a machine without 64 MiB free fails anyway.
pub const CHECKED_FROM: u128 = 64 << 20;

/// [`available`] where a request of `bytes` is large enough to check ([`CHECKED_FROM`]), else
/// `None` without reading it: for checks on paths that run often.
pub fn available_for(bytes: u128) -> Option<u128> {
    if bytes < CHECKED_FROM { None } else { available() }
}

/// Fails when `bytes` (from [`CHECKED_FROM`] on) exceed what the system has available.
pub fn ensure_available(bytes: u128, what: impl FnOnce() -> String) -> Result<(), NotAvailable> {
    const GIB: f64 = (1u64 << 30) as f64;
    match available_for(bytes) {
        Some(avail) if bytes > avail => Err(NotAvailable {
            what: format!("{} ({:.1} GiB needed, {:.1} GiB available)", what(), bytes as f64 / GIB, avail as f64 / GIB),
        }),
        _ => Ok(()),
    }
}

/// Asks Linux for transparent huge pages over `v`'s whole capacity, when it is 4 MiB or more,
/// before the untouched part is first written. A 58 MB dense array read in random row order
/// otherwise costs a TLB miss per row and, when written first, ~14,000 page faults: together
/// they doubled SpMM on luxembourg. numpy advises its large arrays the same way. Only the
/// paging policy changes; a no-op elsewhere or when THP is off. Memory already written keeps
/// its pages, so call it right after reserving.
pub fn advise_huge_pages<T>(v: &mut Vec<T>) {
    const HUGE: usize = 2 << 20;
    let (ptr, bytes) = (v.as_mut_ptr() as usize, v.capacity() * std::mem::size_of::<T>());
    if bytes < 2 * HUGE {
        return;
    }
    let (start, end) = ((ptr + HUGE - 1) & !(HUGE - 1), (ptr + bytes) & !(HUGE - 1));
    #[cfg(target_os = "linux")]
    if end > start {
        // SAFETY: [start, end) lies inside the vector's allocation, which it owns; the advice
        // changes how the kernel backs the pages, never their contents, and a failure (THP
        // disabled) leaves everything as it was.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, end);
}

/// An empty vector with room for `n` elements, advised for huge pages (see
/// [`advise_huge_pages`]): where tensors put their values, which kernels then read in place.
pub fn huge_vec<T>(n: usize) -> Result<Vec<T>, NotAvailable> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| NotAvailable { what: format!("{n} values") })?;
    advise_huge_pages(&mut v);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_vectors_have_the_room_asked_for_and_keep_what_is_written() {
        let mut v: Vec<f64> = huge_vec(1 << 20).unwrap();
        assert!(v.capacity() >= 1 << 20 && v.is_empty());
        v.extend((0..1 << 20).map(|i| i as f64));
        assert_eq!(v[12345], 12345.0);
        let mut small: Vec<u8> = huge_vec(10).unwrap();
        small.push(7);
        assert_eq!(small, [7]);
    }

    #[test]
    fn only_large_requests_are_checked_and_too_large_ones_refused() {
        assert!(ensure_available(CHECKED_FROM - 1, String::new).is_ok());
        assert_eq!(available_for(CHECKED_FROM - 1), None);
        assert_eq!(available_for(CHECKED_FROM).is_some(), available().is_some());
        if available().is_some() {
            let e = ensure_available(u128::MAX / 2, || "a test array".into()).unwrap_err();
            assert!(e.to_string().contains("a test array"), "{e}");
        }
    }
}
