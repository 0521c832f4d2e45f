//! The `bucket` policy's store: one growable array per first coordinate (its first few
//! components in a room of two arrays shared by all buckets), which generated code appends to
//! inline (the scatter happens at insert time, so a flush only combines each
//! bucket in a dense row and emits the buckets in order — no counting or scattering pass).

use std::ffi::c_void;

use nm_format::Value;
use nm_runtime::memory::{Peer, place_apart};

use crate::IsmError;
use crate::segments::{Segment, Segments, chunk};
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

/// Every bucket: heads for generated code, the memory behind them.
pub(crate) struct BucketStore<V> {
    pub heads: Vec<BucketHead>,
    memory: Memory<V>,
    /// Keys per bucket (a power of two: keys are bit-packed).
    pub stride: u64,
    combine: Buckets<V>,
    /// One combined row, for [`BucketStore::drain_rows`].
    row: Run<V>,
}

/// Where the buckets' components are: each bucket's room in two arrays shared by all, then
/// memory of its own once it outgrew the room.
#[derive(Default)]
struct Memory<V> {
    /// Every bucket's first `room` keys, bucket after bucket.
    first_keys: Vec<u64>,
    /// Their values.
    first_vals: Vec<V>,
    /// Components a bucket holds in `first_keys`/`first_vals` before it needs its own memory:
    /// [`ROOM`], or 0 where those arrays would not fit (see [`Memory::new`]).
    room: usize,
    /// A bucket's own memory, once it outgrew its room (of no capacity before).
    own: Vec<Segment>,
    /// Where those segments lie.
    segments: Segments<V>,
}

/// About how many components [`BucketStore::sample_distinct`] reads for a decision.
pub(crate) const SAMPLE: usize = 1 << 13;

/// Buckets of at most this many components [`BucketStore::drain_rows`] sorts by insertion
/// ([`append_short`]), of at most [`FEW`] through a sorting network ([`append_few`]), both on
/// the stack.
const SHORT: usize = 8;
/// Buckets of at most this many components are sorted on the stack; longer ones are combined
/// in a dense row ([`combine_bucket`]).
const FEW: usize = 16;

/// Components every bucket has room for in one array shared by all buckets, before it moves
/// to memory of its own: a short row's. Most rows of a sparse outer product are this short;
/// one allocation per bucket spread them over the heap, where appending to them and combining
/// them after missed the cache and the TLB at every row (BENCHMARKS.md, "Outer-product
/// SpGEMM").
const ROOM: usize = SHORT;

/// The shared rooms' largest size in bytes. They are zeroed when the workspace is made, which
/// a result with many rows of which few receive anything pays for without using them; beyond
/// this (about half a million rows of `f64`), every bucket gets memory of its own on its first
/// component instead, and a row that receives nothing costs only its head.
const ROOMS_AT_MOST: usize = 64 << 20;

/// A row of at most [`SHORT`] components appended to CSR arrays: insertion-sorted by key on
/// the stack, duplicates combined, columns relative to `base`. A short row arrives as one or
/// two sorted runs (one per nonzero of its row in the first operand), which insertion keeps
/// in place with few mispredicted branches; a sorting network, tried, was slower here.
fn append_short<V: Value>(keys: &[u64], vals: &[V], base: u64, crd: &mut Vec<i64>, out: &mut Vec<V>) {
    let mut row = [(0u64, V::ZERO); SHORT];
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

/// The same for a row of at most [`FEW`] components, whose columns are below
/// [`TAGGED_BELOW`]. At this length an insertion sort mispredicts a branch at nearly every
/// component, which was most of the row's time; so each key is tagged with its index in the
/// row (`(key - base) << 4 | index`), the tags sort through a fixed network of minima and
/// maxima, and duplicates are combined by select and position rather than by branches.
/// Duplicates add up in the order they were inserted, as in [`append_short`].
fn append_few<V: Value>(keys: &[u64], vals: &[V], base: u64, crd: &mut Vec<i64>, out: &mut Vec<V>) {
    let n = keys.len();
    // Padding (all ones) sorts last, and its column is above every row's.
    let mut t = [u64::MAX; FEW + 1];
    for (t, (i, &k)) in t.iter_mut().zip(keys.iter().enumerate()) {
        *t = ((k - base) << 4) | i as u64;
    }
    sort16(&mut t);
    let (mut sum, mut previous) = (V::ZERO, u64::MAX);
    for i in 0..n {
        let (column, v) = (t[i] >> 4, vals[(t[i] & 15) as usize]);
        sum = std::hint::select_unpredictable(column == previous, sum + v, v);
        // Appended, then taken back when the next component has the same column.
        crd.push(column as i64);
        out.push(sum);
        let again = (t[i + 1] >> 4 == column) as usize;
        crd.truncate(crd.len() - again);
        out.truncate(out.len() - again);
        previous = column;
    }
}

/// Columns of the rows [`append_few`] sorts: below this, a column shifted left by four bits
/// for its index stays below the padding.
const TAGGED_BELOW: u64 = 1 << 59;

/// Sorts the first sixteen of `v`: Batcher's odd-even merge sort, 63 compare-exchanges in ten
/// layers, written out so that the keys stay in registers.
#[inline(always)]
fn sort16(v: &mut [u64; FEW + 1]) {
    macro_rules! compare_exchange {
        ($($a:literal $b:literal),*) => {$(
            let (x, y) = (v[$a], v[$b]);
            v[$a] = x.min(y);
            v[$b] = x.max(y);
        )*};
    }
    compare_exchange!(0 1, 2 3, 4 5, 6 7, 8 9, 10 11, 12 13, 14 15);
    compare_exchange!(0 2, 1 3, 4 6, 5 7, 8 10, 9 11, 12 14, 13 15);
    compare_exchange!(1 2, 5 6, 0 4, 3 7, 9 10, 13 14, 8 12, 11 15);
    compare_exchange!(2 6, 1 5, 10 14, 9 13, 0 8, 7 15);
    compare_exchange!(2 4, 3 5, 10 12, 11 13);
    compare_exchange!(1 2, 3 4, 5 6, 9 10, 11 12, 13 14);
    compare_exchange!(4 12, 2 10, 6 14, 1 9, 5 13, 3 11);
    compare_exchange!(4 8, 6 10, 5 9, 7 11);
    compare_exchange!(2 4, 6 8, 10 12, 3 5, 7 9, 11 13);
    compare_exchange!(1 2, 3 4, 5 6, 7 8, 9 10, 11 12, 13 14);
}

/// How many buckets ahead [`BucketStore::drain`] asks for a bucket's first components.
const AHEAD: usize = 8;

/// Asks the memory system for the cache line at `p`: a hint that changes no result.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE (which `_mm_prefetch` needs) is part of x86_64's baseline, and a prefetch
    // never faults and changes no memory, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl<V: Value> Memory<V> {
    /// Memory for `extent` buckets, with rooms where they take at most `rooms_at_most` bytes.
    fn new(extent: usize, rooms_at_most: usize) -> Result<Self, IsmError> {
        let mut own = Vec::new();
        own.try_reserve_exact(extent).map_err(|_| IsmError::OutOfMemory(format!("{extent} workspace buckets")))?;
        own.resize(extent, Segment::default());
        let (first_keys, first_vals, room) = Self::rooms(extent, rooms_at_most).unwrap_or_default();
        Ok(Memory { first_keys, first_vals, room, own, segments: Segments::default() })
    }

    /// The shared rooms for `extent` buckets, zeroed and advised for huge pages (appends land
    /// at random rows); `None` where they would pass `at_most` bytes or memory runs out — the
    /// buckets then start with memory of their own, as they would after their room.
    fn rooms(extent: usize, at_most: usize) -> Option<(Vec<u64>, Vec<V>, usize)> {
        let n = extent.checked_mul(ROOM)?;
        if n.checked_mul(8 + std::mem::size_of::<V>())? > at_most {
            return None;
        }
        let (keys, vals) = chunk(n)?;
        Some((keys, vals, ROOM))
    }

    /// Where bucket `b`'s room starts in `first_keys`/`first_vals`, while the bucket is still
    /// in it (it has no memory of its own yet).
    #[inline]
    fn in_room(&self, b: usize) -> Option<usize> {
        (self.own[b].cap == 0).then(|| b * self.room)
    }

    /// Bucket `b`'s memory, `cap` components: its room, or its own once it outgrew that.
    fn slots(&mut self, b: usize, cap: usize) -> (&mut [u64], &mut [V]) {
        match self.in_room(b) {
            Some(at) => (&mut self.first_keys[at..at + cap], &mut self.first_vals[at..at + cap]),
            None => self.segments.contents_mut(self.own[b], cap),
        }
    }

    /// Where generated code appends to bucket `b`: its room, or its own memory once it outgrew
    /// that (neither the rooms nor the segments' chunks are ever reallocated; a bucket moves
    /// to another segment only by `grow`, which repoints its head).
    fn pointers(&mut self, b: usize) -> (*mut u64, *mut V) {
        match self.in_room(b) {
            Some(at) => (self.first_keys.as_mut_ptr().wrapping_add(at), self.first_vals.as_mut_ptr().wrapping_add(at)),
            None => self.segments.pointers(self.own[b]),
        }
    }

    /// Bucket `b`'s first `n` components.
    #[inline]
    fn contents(&self, b: usize, n: usize) -> (&[u64], &[V]) {
        match self.in_room(b) {
            Some(at) => (&self.first_keys[at..at + n], &self.first_vals[at..at + n]),
            None => self.segments.contents(self.own[b], n),
        }
    }

    /// Bucket `b`, full at `cap` components, moved to a segment of `target` (a power of two),
    /// the segment it leaves given back.
    fn grow(&mut self, b: usize, cap: usize, target: usize) -> Result<(), IsmError> {
        let to = self.segments.take(target)?;
        match self.in_room(b) {
            Some(at) => {
                // Its room, full (`cap` is 0 where there are no rooms).
                let (keys, vals) = self.segments.contents_mut(to, cap);
                keys.copy_from_slice(&self.first_keys[at..at + cap]);
                vals.copy_from_slice(&self.first_vals[at..at + cap]);
            }
            None => {
                self.segments.copy(self.own[b], to, cap);
                self.segments.give_back(self.own[b]);
            }
        }
        self.own[b] = to;
        Ok(())
    }

    fn bytes(&self) -> usize {
        (self.first_keys.len() + self.segments.capacity()) * (8 + std::mem::size_of::<V>())
            + self.own.capacity() * std::mem::size_of::<Segment>()
    }
}

impl<V: Value> BucketStore<V> {
    pub fn new(extent: usize, stride: u64) -> Result<Self, IsmError> {
        Self::with_rooms_at_most(extent, stride, ROOMS_AT_MOST)
    }

    fn with_rooms_at_most(extent: usize, stride: u64, rooms_at_most: usize) -> Result<Self, IsmError> {
        let mut heads = Vec::new();
        heads.try_reserve_exact(extent).map_err(|_| IsmError::OutOfMemory(format!("{extent} workspace buckets")))?;
        let mut memory = Memory::<V>::new(extent, rooms_at_most)?;
        for b in 0..extent {
            let (keys, vals) = memory.pointers(b);
            heads.push(BucketHead { keys, vals: vals.cast(), len: 0, cap: memory.room as i64 });
        }
        Ok(BucketStore { heads, memory, stride, combine: Buckets::default(), row: Run::default() })
    }

    /// Bucket `b`'s components.
    fn contents(&self, b: usize) -> (&[u64], &[V]) {
        self.memory.contents(b, self.heads[b].len as usize)
    }

    /// The bucket of `key`.
    #[inline]
    pub fn bucket(&self, key: u64) -> usize {
        (key >> self.stride.trailing_zeros()) as usize
    }

    /// Doubles bucket `b`'s capacity (to at least [`FEW`]), moving it out of its room into
    /// memory of its own the first time.
    pub fn grow(&mut self, b: usize) -> Result<(), IsmError> {
        let cap = self.heads[b].cap as usize;
        let target = (2 * cap).max(FEW);
        self.memory.grow(b, cap, target)?;
        let (keys, vals) = self.memory.pointers(b);
        let head = &mut self.heads[b];
        head.keys = keys;
        head.vals = vals.cast();
        head.cap = target as i64;
        Ok(())
    }

    /// Appends a component (the Rust-side insert).
    pub fn push(&mut self, key: u64, v: V) -> Result<(), IsmError> {
        let b = self.bucket(key);
        if self.heads[b].len == self.heads[b].cap {
            self.grow(b)?;
        }
        let head = &mut self.heads[b];
        let (keys, vals) = self.memory.slots(b, head.cap as usize);
        keys[head.len as usize] = key;
        vals[head.len as usize] = v;
        head.len += 1;
        Ok(())
    }

    /// Asks for the first components of bucket `b + AHEAD`, when there is one. Buckets that
    /// outgrew their rooms are allocations of their own, scattered in memory where no
    /// hardware prefetcher follows a pass over them in order (on an outer product of many
    /// short buckets, combining them took half of the product's time before rooms).
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
    /// (every one when they hold at most `about` components), counted without combining
    /// anything: a key's bucket is its first coordinate, so buckets share no keys and the
    /// sample's ratio estimates the whole's. A workspace deciding whether to turn dense
    /// reads it, and leaves its buckets as they are when it does not (reading every bucket,
    /// scattered in memory, was a large part of an outer product that stays sparse:
    /// BENCHMARKS.md, "Outer-product SpGEMM").
    pub fn sample_distinct(&self, about: usize) -> (usize, usize) {
        let n: usize = self.heads.iter().map(|h| h.len as usize).sum();
        // Every `step`-th bucket holds about `about` components when they are spread evenly.
        let step = (n / about.max(1)).max(1);
        let (mut seen, mut distinct) = (0, 0);
        let mut keys = Vec::new();
        for b in (0..self.heads.len()).step_by(step) {
            let (stored, _) = self.contents(b);
            keys.clear();
            keys.extend_from_slice(stored);
            keys.sort_unstable();
            keys.dedup();
            seen += stored.len();
            distinct += keys.len();
        }
        (seen, distinct)
    }

    /// Hands every component to `take` and empties the buckets (their memory kept).
    pub fn empty_into(&mut self, mut take: impl FnMut(u64, V)) {
        for b in 0..self.heads.len() {
            let (keys, vals) = self.contents(b);
            for (&k, &v) in keys.iter().zip(vals) {
                take(k, v);
            }
            self.heads[b].len = 0;
        }
    }

    /// Every bucket combined, in order, straight into a CSR matrix's arrays (replacing what
    /// they held, their memory kept): bucket `b` is row `b`, a key's offset from its bucket's
    /// first key its column. Each row is combined into a scratch run that stays in cache,
    /// where [`BucketStore::drain`] builds one sorted run of every component that compressing
    /// then reads again. The buckets are emptied (their memory kept). `total`, the components
    /// in all buckets as the caller counted them, sizes the arrays (a pass over the heads to
    /// count them was a visible part of an outer product with many short rows), or memory
    /// runs out first.
    pub fn drain_rows(
        &mut self,
        total: usize,
        pos: &mut Vec<i64>,
        crd: &mut Vec<i64>,
        vals: &mut Vec<V>,
    ) -> Result<(), IsmError> {
        pos.clear();
        crd.clear();
        vals.clear();
        let oom = |_| IsmError::OutOfMemory(format!("a result of {total} components"));
        pos.try_reserve_exact(self.heads.len() + 1).map_err(oom)?;
        crd.try_reserve_exact(total).map_err(oom)?;
        vals.try_reserve_exact(total).map_err(oom)?;
        place_apart(vals, &[Peer::of(crd)]);
        pos.push(0);
        let tagged = self.stride <= TAGGED_BELOW;
        for b in 0..self.heads.len() {
            self.prefetch_ahead(b);
            let n = self.heads[b].len as usize;
            if n > 0 {
                let base = b as u64 * self.stride;
                let (keys, vs) = self.memory.contents(b, n);
                if n <= SHORT {
                    append_short(keys, vs, base, crd, vals);
                } else if n <= FEW && tagged {
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
        Ok(())
    }

    /// Every bucket combined, in order, into `out` (sorted, unique); the buckets are emptied
    /// (their memory kept).
    pub fn drain(&mut self, out: &mut Run<V>) {
        out.clear();
        for b in 0..self.heads.len() {
            self.prefetch_ahead(b);
            let n = self.heads[b].len as usize;
            if n > 0 {
                let (keys, vals) = self.memory.contents(b, n);
                combine_bucket(keys, vals, b as u64 * self.stride, self.stride, out, &mut self.combine);
                self.heads[b].len = 0;
            }
        }
    }

    pub fn bytes(&self) -> usize {
        self.heads.capacity() * std::mem::size_of::<BucketHead>()
            + self.memory.bytes()
            + self.combine.bytes()
            + self.row.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::{BucketStore, FEW, ROOMS_AT_MOST, SAMPLE, sort16};

    #[test]
    fn the_network_sorts_sixteen_keys() {
        // By the 0-1 principle, a network of compare-exchanges that sorts every sequence of
        // zeros and ones sorts every sequence.
        for bits in 0u32..1 << 16 {
            let mut v = [u64::MAX; FEW + 1];
            for (i, v) in v[..16].iter_mut().enumerate() {
                *v = u64::from(bits >> i & 1);
            }
            sort16(&mut v);
            assert!(v[..16].is_sorted(), "{bits:#06x}: {v:?}");
            assert_eq!(v[..16].iter().sum::<u64>(), u64::from(bits.count_ones()));
            assert_eq!(v[16], u64::MAX);
        }
    }

    /// Rows of every length up to past [`FEW`], drained into CSR arrays twice (the second
    /// time from memory kept from the first), against sorting each row stably and summing
    /// duplicates in the order they were inserted — bit for bit, with values whose sums depend
    /// on that order. With rooms, without, and with columns too wide to tag.
    #[test]
    fn rows_drain_sorted_with_duplicates_summed_in_insertion_order() {
        let mut x = 7u64;
        let mut next = |m: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for (rows, stride, column_unit, rooms) in
            [(60, 64, 1, ROOMS_AT_MOST), (60, 64, 1, 0), (12, 1 << 60, 1 << 55, ROOMS_AT_MOST)]
        {
            let mut store = BucketStore::<f64>::with_rooms_at_most(rows, stride, rooms).unwrap();
            let (mut pos, mut crd, mut vals) = (vec![9], vec![9], vec![9.0]);
            for round in 0..2 {
                let mut inserted = vec![Vec::new(); rows];
                for row in 0..rows {
                    for _ in 0..next(2 * FEW as u64 + 6) {
                        // Wide rows past `FEW` are combined by an unstable sort, which may add
                        // duplicates in another order: integers there.
                        let v = if column_unit == 1 { next(1000) as f64 / 7.0 - 50.5 } else { next(100) as f64 - 50.0 };
                        let column = next(20) * column_unit;
                        inserted[row].push((column, v));
                    }
                }
                // Rows interleaved at random, each row's components in order.
                let mut order: Vec<usize> = (0..rows).flat_map(|r| std::iter::repeat_n(r, inserted[r].len())).collect();
                for i in (1..order.len()).rev() {
                    order.swap(i, next(i as u64 + 1) as usize);
                }
                let (order_len, mut at) = (order.len(), vec![0; rows]);
                for row in order {
                    let (column, v) = inserted[row][at[row]];
                    store.push(row as u64 * stride + column, v).unwrap();
                    at[row] += 1;
                }
                store.drain_rows(order_len, &mut pos, &mut crd, &mut vals).unwrap();
                let (mut want_pos, mut want_crd, mut want_vals) = (vec![0], Vec::new(), Vec::new());
                for mut row in inserted {
                    row.sort_by_key(|&(column, _)| column);
                    for (i, &(column, v)) in row.iter().enumerate() {
                        if i > 0 && row[i - 1].0 == column {
                            *want_vals.last_mut().unwrap() += v;
                        } else {
                            want_crd.push(column as i64);
                            want_vals.push(v);
                        }
                    }
                    want_pos.push(want_crd.len() as i64);
                }
                let bits = |v: &[f64]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                let case = format!("stride {stride}, rooms {rooms}, round {round}");
                assert_eq!(pos, want_pos, "{case}");
                assert_eq!(crd, want_crd, "{case}");
                assert_eq!(bits(&vals), bits(&want_vals), "{case}");
                assert!(store.heads.iter().all(|h| h.len == 0), "{case}");
            }
        }
    }

    #[test]
    fn a_sample_of_the_buckets_counts_their_distinct_keys() {
        let store = |keys: &mut dyn Iterator<Item = u64>| {
            let mut s = BucketStore::<f64>::new(1024, 1024).unwrap();
            for k in keys {
                s.push(k, 1.0).unwrap();
            }
            s
        };
        assert_eq!(store(&mut std::iter::empty()).sample_distinct(SAMPLE), (0, 0));
        // Few components: every bucket read, the count exact.
        assert_eq!(store(&mut std::iter::repeat_n(77, 1000)).sample_distinct(SAMPLE), (1000, 1));
        let few = (0..3000u64).map(|i| (i % 1500) * 699);
        assert_eq!(store(&mut few.into_iter()).sample_distinct(SAMPLE), (3000, 1500));
        // Many: a sample of about `SAMPLE`, whose ratio is the whole's.
        for (distinct, copies) in [(20_000u64, 10u64), (200_000, 1), (3000, 100)] {
            let mut keys = (0..distinct * copies).map(|i| (i % distinct) * 52_361 % (1024 * 1024));
            let (seen, found) = store(&mut keys).sample_distinct(SAMPLE);
            assert!(seen <= 2 * SAMPLE, "{distinct} × {copies}: read {seen}");
            let ratio = seen as f64 / found as f64;
            assert!((ratio - copies as f64).abs() < 0.05 * copies as f64, "{distinct} × {copies}: ratio {ratio}");
        }
    }
}
