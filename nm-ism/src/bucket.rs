//! The `bucket` policy's store: one growable array per first coordinate, which generated code
//! appends to inline (the scatter happens at insert time, so a flush only combines each
//! bucket in a dense row and emits the buckets in order — no counting or scattering pass).

use std::ffi::c_void;

use nm_format::Value;

use crate::IsmError;
use crate::sort::{Buckets, Run, combine_bucket};

/// One bucket as generated code sees it: append `keys[len]`, `vals[len]` while `len < cap`,
/// else call the slot's `grow` for this bucket first.
#[repr(C)]
#[derive(Debug)]
pub struct BucketHead {
    /// The bucket's keys.
    pub keys: *mut u64,
    /// Its values (`f32` or `f64`).
    pub vals: *mut c_void,
    /// Components in it.
    pub len: i64,
    /// Its capacity.
    pub cap: i64,
}

/// Every bucket: heads for generated code, the vectors behind them.
pub(crate) struct BucketStore<V> {
    pub heads: Vec<BucketHead>,
    store: Vec<(Vec<u64>, Vec<V>)>,
    /// Keys per bucket (a power of two: keys are bit-packed).
    pub stride: u64,
    combine: Buckets<V>,
    /// One combined row, for [`BucketStore::drain_rows`].
    row: Run<V>,
}

/// About how many components [`BucketStore::sample_distinct`] reads.
const SAMPLE: usize = 1 << 13;

/// Buckets of at most this many components [`BucketStore::drain_rows`] sorts on the stack.
const FEW: usize = 16;

/// A row of at most [`FEW`] components appended to CSR arrays: insertion-sorted by key on the
/// stack, duplicates combined, columns relative to `base`. Most rows of a sparse outer product
/// are this short, and the general combine's scratch vectors cost more than the sort
/// (BENCHMARKS.md, "Outer-product SpGEMM").
fn append_few<V: Value>(keys: &[u64], vals: &[V], base: u64, crd: &mut Vec<i64>, out: &mut Vec<V>) {
    let mut row = [(0u64, V::ZERO); FEW];
    let n = keys.len();
    for i in 0..n {
        let x = (keys[i], vals[i]);
        let mut j = i;
        while j > 0 && row[j - 1].0 > x.0 {
            row[j] = row[j - 1];
            j -= 1;
        }
        row[j] = x;
    }
    let mut last = u64::MAX;
    for &(k, v) in &row[..n] {
        if k == last {
            *out.last_mut().expect("a value for the previous key") += v;
        } else {
            crd.push((k - base) as i64);
            out.push(v);
            last = k;
        }
    }
}

/// How many buckets ahead [`BucketStore::drain`] asks for a bucket's first components.
const AHEAD: usize = 8;

/// Asks the memory system for the cache line at `p`: a hint that changes no result.
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE (which `_mm_prefetch` needs) is part of x86_64's baseline, and a prefetch
    // never faults and changes no memory, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl<V: Value> BucketStore<V> {
    pub fn new(extent: usize, stride: u64) -> Result<Self, IsmError> {
        let oom = |_| IsmError::OutOfMemory(format!("{extent} workspace buckets"));
        let mut heads = Vec::new();
        heads.try_reserve_exact(extent).map_err(oom)?;
        heads.extend((0..extent).map(|_| BucketHead {
            keys: std::ptr::null_mut(),
            vals: std::ptr::null_mut(),
            len: 0,
            cap: 0,
        }));
        let mut store = Vec::new();
        store.try_reserve_exact(extent).map_err(oom)?;
        store.resize_with(extent, Default::default);
        Ok(BucketStore { heads, store, stride, combine: Buckets::default(), row: Run::default() })
    }

    /// The bucket of `key`.
    #[inline]
    pub fn bucket(&self, key: u64) -> usize {
        (key >> self.stride.trailing_zeros()) as usize
    }

    /// Doubles bucket `b`'s capacity.
    pub fn grow(&mut self, b: usize) -> Result<(), IsmError> {
        let (keys, vals) = &mut self.store[b];
        let cap = keys.len();
        let target = (2 * cap).max(16);
        let oom = |_| IsmError::OutOfMemory(format!("growing a workspace bucket to {target} components"));
        keys.try_reserve_exact(target - cap).map_err(oom)?;
        vals.try_reserve_exact(target - cap).map_err(oom)?;
        keys.resize(target, 0);
        vals.resize(target, V::ZERO);
        let head = &mut self.heads[b];
        head.keys = keys.as_mut_ptr();
        head.vals = vals.as_mut_ptr().cast();
        head.cap = target as i64;
        Ok(())
    }

    /// Appends a component (the Rust-side insert).
    pub fn push(&mut self, key: u64, v: V) -> Result<(), IsmError> {
        let b = self.bucket(key);
        if self.heads[b].len == self.heads[b].cap {
            self.grow(b)?;
        }
        let n = self.heads[b].len as usize;
        self.store[b].0[n] = key;
        self.store[b].1[n] = v;
        self.heads[b].len += 1;
        Ok(())
    }

    /// Asks for the first components of bucket `b + AHEAD`, when there is one. Buckets are
    /// allocations of their own, scattered in memory where no hardware prefetcher follows
    /// a pass over them in order (on an outer product of many short buckets, combining them
    /// took half of the product's time before).
    #[inline]
    fn prefetch_ahead(&self, b: usize) {
        if let Some(next) = self.heads.get(b + AHEAD)
            && next.len > 0
        {
            prefetch(next.keys);
            prefetch(next.vals);
            // A small bucket's second lines too (16 components are two lines of each).
            prefetch(next.keys.wrapping_add(8));
            prefetch(next.vals.cast::<V>().wrapping_add(8));
        }
    }

    /// Components and distinct keys among them in an evenly spaced sample of the buckets
    /// (every one when they hold at most [`SAMPLE`] components), counted without combining
    /// anything: a key's bucket is its first coordinate, so buckets share no keys and the
    /// sample's ratio estimates the whole's. A workspace deciding whether to turn dense
    /// reads it, and leaves its buckets as they are when it does not (reading every bucket,
    /// scattered in memory, was a large part of an outer product that stays sparse:
    /// BENCHMARKS.md, "Outer-product SpGEMM").
    pub fn sample_distinct(&self) -> (usize, usize) {
        let n: usize = self.heads.iter().map(|h| h.len as usize).sum();
        // Every `step`-th bucket holds about `SAMPLE` components when they are spread evenly.
        let step = (n / SAMPLE).max(1);
        let (mut seen, mut distinct) = (0, 0);
        let mut keys = Vec::new();
        for (head, (stored, _)) in self.heads.iter().zip(&self.store).step_by(step) {
            keys.clear();
            keys.extend_from_slice(&stored[..head.len as usize]);
            keys.sort_unstable();
            keys.dedup();
            seen += head.len as usize;
            distinct += keys.len();
        }
        (seen, distinct)
    }

    /// Hands every component to `take` and empties the buckets (their memory kept).
    pub fn empty_into(&mut self, mut take: impl FnMut(u64, V)) {
        for (head, (keys, vals)) in self.heads.iter_mut().zip(&self.store) {
            let n = head.len as usize;
            for (&k, &v) in keys[..n].iter().zip(&vals[..n]) {
                take(k, v);
            }
            head.len = 0;
        }
    }

    /// Every bucket combined, in order, straight into a CSR matrix's arrays (replacing what
    /// they held, their memory kept): bucket `b` is row `b`, a key's offset from its bucket's
    /// first key its column. Each row is combined into a scratch run that stays in cache,
    /// where [`BucketStore::drain`] builds one sorted run of every component that compressing
    /// then reads again. The buckets are emptied (their memory kept).
    pub fn drain_rows(&mut self, pos: &mut Vec<i64>, crd: &mut Vec<i64>, vals: &mut Vec<V>) {
        let total: usize = self.heads.iter().map(|h| h.len as usize).sum();
        pos.clear();
        crd.clear();
        vals.clear();
        pos.reserve(self.heads.len() + 1);
        crd.reserve(total);
        vals.reserve(total);
        pos.push(0);
        for b in 0..self.heads.len() {
            self.prefetch_ahead(b);
            let n = self.heads[b].len as usize;
            if n > 0 {
                let base = b as u64 * self.stride;
                let (keys, vs) = (&self.store[b].0[..n], &self.store[b].1[..n]);
                if n <= FEW {
                    append_few(keys, vs, base, crd, vals);
                } else {
                    self.row.clear();
                    combine_bucket(keys, vs, base, self.stride, &mut self.row, &mut self.combine);
                    crd.extend(self.row.keys.iter().map(|&k| (k - base) as i64));
                    vals.extend_from_slice(&self.row.vals);
                }
                self.heads[b].len = 0;
            }
            pos.push(crd.len() as i64);
        }
    }

    /// Every bucket combined, in order, into `out` (sorted, unique); the buckets are emptied
    /// (their memory kept).
    pub fn drain(&mut self, out: &mut Run<V>) {
        out.clear();
        for b in 0..self.heads.len() {
            self.prefetch_ahead(b);
            let head = &mut self.heads[b];
            let n = head.len as usize;
            if n > 0 {
                let (keys, vals) = &self.store[b];
                combine_bucket(&keys[..n], &vals[..n], b as u64 * self.stride, self.stride, out, &mut self.combine);
                head.len = 0;
            }
        }
    }

    pub fn bytes(&self) -> usize {
        let per = 8 + std::mem::size_of::<V>();
        self.heads.capacity() * std::mem::size_of::<BucketHead>()
            + self.store.iter().map(|(k, _)| k.capacity() * per).sum::<usize>()
            + self.combine.bytes()
            + self.row.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::{BucketStore, SAMPLE};

    #[test]
    fn a_sample_of_the_buckets_counts_their_distinct_keys() {
        let store = |keys: &mut dyn Iterator<Item = u64>| {
            let mut s = BucketStore::<f64>::new(1024, 1024).unwrap();
            for k in keys {
                s.push(k, 1.0).unwrap();
            }
            s
        };
        assert_eq!(store(&mut std::iter::empty()).sample_distinct(), (0, 0));
        // Few components: every bucket read, the count exact.
        assert_eq!(store(&mut std::iter::repeat_n(77, 1000)).sample_distinct(), (1000, 1));
        let few = (0..3000u64).map(|i| (i % 1500) * 699);
        assert_eq!(store(&mut few.into_iter()).sample_distinct(), (3000, 1500));
        // Many: a sample of about `SAMPLE`, whose ratio is the whole's.
        for (distinct, copies) in [(20_000u64, 10u64), (200_000, 1), (3000, 100)] {
            let mut keys = (0..distinct * copies).map(|i| (i % distinct) * 52_361 % (1024 * 1024));
            let (seen, found) = store(&mut keys).sample_distinct();
            assert!(seen <= 2 * SAMPLE, "{distinct} × {copies}: read {seen}");
            let ratio = seen as f64 / found as f64;
            assert!((ratio - copies as f64).abs() < 0.05 * copies as f64, "{distinct} × {copies}: ratio {ratio}");
        }
    }
}
