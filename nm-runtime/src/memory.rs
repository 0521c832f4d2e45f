//! Allocating storage sized by user data: a check first, to refuse with an error saying how
//! much was needed rather than let the allocator abort or the kernel kill the process, and
//! the placement and paging advice that keep large arrays fast.

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

/// An array read or written in step with another (a sparse result's coordinates and values, a
/// workspace's keys and values): where it starts and how large its elements are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The address of its first element.
    pub start: usize,
    /// The size of an element in bytes.
    pub elem_size: usize,
}

impl Peer {
    /// The peer that `v` is.
    pub fn of<T>(v: &[T]) -> Peer {
        Peer { start: v.as_ptr() as usize, elem_size: std::mem::size_of::<T>() }
    }
}

/// Whether two streams of equal-sized elements through arrays `distance` bytes apart meet at
/// one L1 set and one way-predictor hash at every step, on AMD's Zen cores: those pick a way by
/// a hash that folds linear-address bits 12–27 pairwise (12 with 27, 13 with 26, 14 with 25,
/// 15 with 20, 16 with 21, … 19 with 24: measured on Zen 5, the pairs published for earlier
/// Zen cores), and two lines of one set and one hash cannot both stay in the cache, so each
/// access evicts the other stream's line. Less than a line from a multiple of 4 KiB, most
/// lines of the two streams share a set; the hash is taken of that multiple.
pub fn way_aliased(distance: usize) -> bool {
    const PAIRS: [(u32, u32); 8] = [(12, 27), (13, 26), (14, 25), (15, 20), (16, 21), (17, 22), (18, 23), (19, 24)];
    let pages = distance.saturating_add(PAGE / 2) / PAGE * PAGE;
    if pages.abs_diff(distance) >= 64 {
        return false;
    }
    let bit = |b: u32| (pages >> b) & 1;
    PAIRS.iter().all(|&(a, b)| bit(a) == bit(b))
}

/// A page of memory, in bytes.
const PAGE: usize = 4096;

/// Arrays smaller than this are left where the allocator put them ([`place_apart`]): the
/// misses two aliased streams through them cost are too few to pay for a move.
const PLACED_FROM: usize = 64 << 10;

/// Allocations tried per move before `place_apart` leaves an array where it is.
const PLACEMENT_TRIES: usize = 4;

/// Moves `v` (its capacity and elements) to a new allocation when its start is
/// [`way_aliased`] with one of `peers` of its element size, trying a few new places: arrays
/// written in step grow together and the allocator often maps same-size blocks a power of two
/// apart (side by side, or at the same offset from a large alignment), where every access of
/// one stream evicts the other's line; that slowed a whole row-wise SpGEMM, or not, by where
/// the allocator had put its result (BENCHMARKS.md, "Arrays written in step"). The new memory
/// is advised for huge pages like any large array's. Only speed is at stake: an array that
/// finds no better place, or no memory to move to, stays.
pub fn place_apart<T: Copy>(v: &mut Vec<T>, peers: &[Peer]) {
    let size = std::mem::size_of::<T>();
    // An empty vector's start is a dangling address in the first page, where nothing lives.
    let aliased = |start: usize| {
        peers.iter().any(|p| p.elem_size == size && p.start >= PAGE && way_aliased(start.abs_diff(p.start)))
    };
    if v.capacity().saturating_mul(size) < PLACED_FROM || !aliased(v.as_ptr() as usize) {
        return;
    }
    // Places tried and refused stay allocated until a good one is found, so that the
    // allocator offers another.
    let mut refused: Vec<Vec<T>> = Vec::new();
    for _ in 0..PLACEMENT_TRIES {
        let mut moved = Vec::new();
        if moved.try_reserve_exact(v.capacity()).is_err() {
            return;
        }
        if !aliased(moved.as_ptr() as usize) {
            advise_huge_pages(&mut moved);
            moved.extend_from_slice(v);
            *v = moved;
            return;
        }
        refused.push(moved);
    }
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
    fn the_way_hash_aliases_pairs_of_bits_and_multiples_of_its_span() {
        assert!(way_aliased((1 << 27) + 4096), "two 128 MiB blocks side by side");
        assert!(way_aliased(1 << 28) && way_aliased(3 << 28), "starts a multiple of 256 MiB apart");
        assert!(way_aliased((1 << 20) + (1 << 15)) && way_aliased((1 << 28) + 16), "15 with 20; within a line");
        assert!(!way_aliased((1 << 27) + 2 * 4096) && !way_aliased(1 << 27) && !way_aliased(4096));
        assert!(!way_aliased((1 << 28) + 2048), "another set");
    }

    #[test]
    fn placing_apart_moves_an_aliased_array_and_keeps_its_elements() {
        let mut v: Vec<u64> = (0..1 << 16).collect();
        let capacity = v.capacity();
        // A peer of another element size, or not aliased, leaves it where it is.
        let start = v.as_ptr() as usize;
        let unaliased = Peer { start: start + 4096, elem_size: 8 };
        let other_size = Peer { start: start + (1 << 28), elem_size: 4 };
        place_apart(&mut v, &[unaliased, other_size]);
        assert_eq!(v.as_ptr() as usize, start);
        // A peer 256 MiB on moves it (only the distance counts: nothing need live there).
        let aliased = Peer { start: start.wrapping_add(1 << 28), elem_size: 8 };
        place_apart(&mut v, &[aliased]);
        assert_ne!(v.as_ptr() as usize, start);
        assert!(!way_aliased((v.as_ptr() as usize).abs_diff(aliased.start)));
        assert_eq!(v.capacity(), capacity);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
        let mut small: Vec<u64> = vec![1, 2];
        let at = small.as_ptr() as usize;
        place_apart(&mut small, &[Peer { start: at + (1 << 28), elem_size: 8 }]);
        assert_eq!(small.as_ptr() as usize, at, "small arrays stay");
    }

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
