//! Sorting an accumulation into a run of sorted, unique keys — one routine per policy — and
//! merging runs. Every routine sorts *ids* of the accumulation (or keys packed with their id),
//! never whole components, and gathers values once at the end.

use nm_format::Value;

/// Keys with their values: an accumulation (any order, duplicates), or a sorted run of unique
/// keys (the all array).
#[derive(Clone, Debug, Default)]
pub(crate) struct Run<V> {
    pub keys: Vec<u64>,
    pub vals: Vec<V>,
}

impl<V: Value> Run<V> {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.vals.clear();
    }

    /// Room for `components` in all, no more, the values placed apart from the keys they are
    /// read and written in step with (see [`nm_runtime::memory::place_apart`]).
    pub fn try_reserve_total(&mut self, components: usize) -> Result<(), std::collections::TryReserveError> {
        self.keys.try_reserve_exact(components.saturating_sub(self.keys.len()))?;
        self.vals.try_reserve_exact(components.saturating_sub(self.vals.len()))?;
        nm_runtime::memory::place_apart(&mut self.vals, &[nm_runtime::memory::Peer::of(&self.keys)]);
        Ok(())
    }

    /// Appends `(k, v)`, adding `v` to the last value when its key is `k` (gathering sorted ids).
    #[inline]
    fn push_combining(&mut self, k: u64, v: V) {
        match self.keys.last() {
            Some(&last) if last == k => *self.vals.last_mut().expect("as many values as keys") += v,
            _ => {
                self.keys.push(k);
                self.vals.push(v);
            }
        }
    }

    pub fn bytes(&self) -> usize {
        self.keys.capacity() * 8 + self.vals.capacity() * std::mem::size_of::<V>()
    }
}

/// Memory the sorting routines reuse from one flush to the next.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    packed: Vec<u64>,
    tmp: Vec<u64>,
    ids: Vec<u32>,
    /// Per first coordinate: entries in the current flush (bucket policy), zero between flushes.
    count: Vec<u32>,
    touched: Vec<u64>,
    head: Vec<u32>,
    next: Vec<u32>,
}

impl Scratch {
    pub fn bytes(&self) -> usize {
        (self.packed.capacity() + self.tmp.capacity() + self.touched.capacity()) * 8
            + (self.ids.capacity() + self.count.capacity() + self.head.capacity() + self.next.capacity()) * 4
    }
}

fn bits(max: u64) -> u32 {
    64 - max.leading_zeros()
}

/// LSD radix sort of `a` by bits `lo..hi`, 8 bits a pass, through `tmp`.
fn radix_sort(a: &mut Vec<u64>, tmp: &mut Vec<u64>, lo: u32, hi: u32) {
    let n = a.len();
    if n <= 64 {
        let mask = if hi >= 64 { u64::MAX } else { (1u64 << hi) - 1 };
        a.sort_unstable_by_key(|&x| (x & mask) >> lo);
        return;
    }
    tmp.clear();
    tmp.resize(n, 0);
    let mut shift = lo;
    while shift < hi {
        let mut count = [0usize; 257];
        for &x in a.iter() {
            count[((x >> shift) & 255) as usize + 1] += 1;
        }
        // A digit every element shares moves nothing.
        if count.contains(&n) {
            shift += 8;
            continue;
        }
        for d in 0..256 {
            count[d + 1] += count[d];
        }
        for &x in a.iter() {
            let d = ((x >> shift) & 255) as usize;
            tmp[count[d]] = x;
            count[d] += 1;
        }
        std::mem::swap(a, tmp);
        shift += 8;
    }
}

/// The ids of `keys` in key order (stable for equal keys is not needed: duplicates combine).
fn sorted_ids(keys: &[u64], scratch: &mut Scratch) -> Vec<u32> {
    let n = keys.len();
    let id_bits = bits(n as u64);
    let key_bits = bits(keys.iter().copied().max().unwrap_or(0));
    let mut ids = std::mem::take(&mut scratch.ids);
    ids.clear();
    if key_bits + id_bits <= 64 {
        // Key and id in one word: the radix sort moves 8 bytes per component.
        let mut packed = std::mem::take(&mut scratch.packed);
        packed.clear();
        packed.extend(keys.iter().enumerate().map(|(i, &k)| (k << id_bits) | i as u64));
        radix_sort(&mut packed, &mut scratch.tmp, id_bits, id_bits + key_bits);
        let mask = (1u64 << id_bits) - 1;
        ids.extend(packed.iter().map(|&p| (p & mask) as u32));
        scratch.packed = packed;
    } else {
        ids.extend(0..n as u32);
        ids.sort_unstable_by_key(|&i| keys[i as usize]);
    }
    ids
}

/// `coord`: the accumulation's ids sorted by key, then gathered with duplicates combined.
pub(crate) fn sort_coord<V: Value>(acc: &Run<V>, n: usize, out: &mut Run<V>, scratch: &mut Scratch) {
    let ids = sorted_ids(&acc.keys[..n], scratch);
    out.clear();
    for &i in &ids {
        out.push_combining(acc.keys[i as usize], acc.vals[i as usize]);
    }
    scratch.ids = ids;
}

/// What combining a bucket needs: a dense row over the rest of the key with a bitmap of the
/// columns touched (cleared as it is read), the touched columns, and pairs for rows too long
/// for a dense row.
#[derive(Debug, Default)]
pub(crate) struct Buckets<V> {
    row: Vec<V>,
    bits: Vec<u64>,
    cols: Vec<u64>,
    pairs: Vec<(u64, V)>,
}

impl<V> Buckets<V> {
    pub fn bytes(&self) -> usize {
        let v = std::mem::size_of::<V>();
        self.row.capacity() * v + self.bits.capacity() * 8 + self.cols.capacity() * 8 + self.pairs.capacity() * (8 + v)
    }
}

/// Rows longer than this are sorted instead of accumulated in a dense row.
const DENSE_ROW: u64 = 1 << 22;

/// Buckets of at most this many components are sorted instead.
const SORT_AT_MOST: usize = 16;

/// Appends one bucket — components whose keys lie in `base..base + stride` (one first
/// coordinate), in any order — to `out`, sorted with duplicates combined: in a dense row over
/// the rest of the key (Gustavson's accumulator) whose touched columns are read back in order
/// from its bitmap when they are many (a word per 64 columns, between the first and last
/// touched) or sorted when few; or sorted whole when rows are too long for a dense row.
pub(crate) fn combine_bucket<V: Value>(
    keys: &[u64],
    vals: &[V],
    base: u64,
    stride: u64,
    out: &mut Run<V>,
    b: &mut Buckets<V>,
) {
    combine_slices(&[(keys, vals)], base, stride, out, b)
}

/// [`combine_bucket`] over several slices of one bucket (a row of several sorted runs).
pub(crate) fn combine_slices<V: Value>(
    slices: &[(&[u64], &[V])],
    base: u64,
    stride: u64,
    out: &mut Run<V>,
    b: &mut Buckets<V>,
) {
    if stride == 1 {
        out.keys.push(base);
        out.vals.push(slices.iter().flat_map(|(_, v)| v.iter()).fold(V::ZERO, |s, &v| s + v));
        return;
    }
    // A few components are sorted too: through the dense row, each would touch a line of a
    // row as wide as the result (luxembourg's 114,599 columns: 90 ns a bucket).
    let total: usize = slices.iter().map(|(keys, _)| keys.len()).sum();
    if stride > DENSE_ROW || total <= SORT_AT_MOST {
        b.pairs.clear();
        for (keys, vals) in slices {
            b.pairs.extend(keys.iter().copied().zip(vals.iter().copied()));
        }
        b.pairs.sort_unstable_by_key(|&(k, _)| k);
        for &(k, v) in &b.pairs {
            out.push_combining(k, v);
        }
        return;
    }
    if b.row.len() < stride as usize {
        b.row.resize(stride as usize, V::ZERO);
        b.bits.resize((stride as usize).div_ceil(64), 0);
    }
    // The row, its bitmap and its new columns as slices, whose addresses stay in registers
    // (pushing to `b.cols` made the compiler load them again at every component). `cols` is
    // as long as any bucket so far and only its first `n` are this bucket's: zeroing it for
    // every bucket wrote as much again as a long row's components.
    if b.cols.len() < total {
        b.cols.resize(total, 0);
    }
    let (row, bits, cols) = (&mut b.row[..], &mut b.bits[..], &mut b.cols[..]);
    let (mut lo, mut hi, mut n) = (usize::MAX, 0usize, 0);
    for (keys, vals) in slices {
        for (&k, &v) in keys.iter().zip(*vals) {
            let c = (k - base) as usize;
            let (w, bit) = (c / 64, 1u64 << (c % 64));
            let word = bits[w];
            if word & bit == 0 {
                bits[w] = word | bit;
                row[c] = v;
                cols[n] = c as u64;
                n += 1;
                lo = lo.min(w);
                hi = hi.max(w);
            } else {
                row[c] += v;
            }
        }
    }
    let cols = &mut cols[..n];
    if n == 0 {
        return;
    }
    if (hi - lo + 1) <= 4 * n {
        // Many columns for the span: the bitmap gives them in order.
        for w in lo..=hi {
            let mut word = std::mem::take(&mut b.bits[w]);
            while word != 0 {
                let c = w * 64 + word.trailing_zeros() as usize;
                out.keys.push(base + c as u64);
                out.vals.push(b.row[c]);
                word &= word - 1;
            }
        }
    } else {
        cols.sort_unstable();
        for &c in &*cols {
            out.keys.push(base + c);
            out.vals.push(b.row[c as usize]);
            b.bits[c as usize / 64] = 0;
        }
    }
}

/// `hash`: duplicates combined first in a chained hash table of `buckets` buckets (a power of
/// two; `2^⌈log2 n⌉` by default), then only the unique keys sorted.
pub(crate) fn sort_hash<V: Value>(
    acc: &Run<V>,
    n: usize,
    buckets: Option<usize>,
    out: &mut Run<V>,
    unique: &mut Run<V>,
    scratch: &mut Scratch,
) {
    let l = buckets.unwrap_or(n).max(1).next_power_of_two();
    let shift = 64 - l.trailing_zeros();
    scratch.head.clear();
    scratch.head.resize(l, u32::MAX);
    scratch.next.clear();
    unique.clear();
    for i in 0..n {
        let (k, v) = (acc.keys[i], acc.vals[i]);
        let b = if l == 1 { 0 } else { (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize };
        let mut u = scratch.head[b];
        while u != u32::MAX && unique.keys[u as usize] != k {
            u = scratch.next[u as usize];
        }
        if u == u32::MAX {
            scratch.next.push(scratch.head[b]);
            scratch.head[b] = unique.keys.len() as u32;
            unique.keys.push(k);
            unique.vals.push(v);
        } else {
            unique.vals[u as usize] += v;
        }
    }
    let m = unique.len();
    sort_coord(unique, m, out, scratch);
}

/// Sorted runs of unique keys combined into `out` one bucket (first coordinate: keys
/// `r·stride .. (r+1)·stride`) at a time — each run's slice of the bucket summed in a dense row
/// — so that merging `k` runs costs one pass over them, not `log k` pairwise merges.
pub(crate) fn combine_runs<V: Value>(runs: &[Run<V>], stride: u64, out: &mut Run<V>, b: &mut Buckets<V>) {
    out.clear();
    let shift = stride.trailing_zeros();
    let mut at = vec![0usize; runs.len()];
    let mut slices: Vec<(&[u64], &[V])> = Vec::with_capacity(runs.len());
    // The next bucket any run has.
    while let Some(row) = runs.iter().zip(&at).filter_map(|(r, &p)| r.keys.get(p).map(|k| k >> shift)).min() {
        slices.clear();
        for (r, p) in runs.iter().zip(at.iter_mut()) {
            let start = *p;
            while *p < r.keys.len() && r.keys[*p] >> shift == row {
                *p += 1;
            }
            if *p > start {
                slices.push((&r.keys[start..*p], &r.vals[start..*p]));
            }
        }
        combine_slices(&slices, row << shift, stride, out, b);
    }
}

/// `a` and `b` (sorted, unique) merged into `out`, values of equal keys added.
pub(crate) fn merge<V: Value>(a: &Run<V>, b: &Run<V>, out: &mut Run<V>) {
    out.clear();
    out.keys.reserve(a.len() + b.len());
    out.vals.reserve(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a.keys[i], b.keys[j]);
        if x < y {
            out.keys.push(x);
            out.vals.push(a.vals[i]);
            i += 1;
        } else if y < x {
            out.keys.push(y);
            out.vals.push(b.vals[j]);
            j += 1;
        } else {
            out.keys.push(x);
            out.vals.push(a.vals[i] + b.vals[j]);
            i += 1;
            j += 1;
        }
    }
    out.keys.extend_from_slice(&a.keys[i..]);
    out.vals.extend_from_slice(&a.vals[i..]);
    out.keys.extend_from_slice(&b.keys[j..]);
    out.vals.extend_from_slice(&b.vals[j..]);
}

/// `map`: each component put in its place in the sorted `all` (binary search, then a shift).
pub(crate) fn insert_sorted<V: Value>(all: &mut Run<V>, k: u64, v: V) {
    match all.keys.binary_search(&k) {
        Ok(p) => all.vals[p] += v,
        Err(p) => {
            all.keys.insert(p, k);
            all.vals.insert(p, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radix_sort_sorts_by_the_bit_range() {
        let mut a: Vec<u64> = (0..1000u64).map(|i| (i * 7919) % 1009).collect();
        let mut want = a.clone();
        want.sort_unstable();
        radix_sort(&mut a, &mut Vec::new(), 0, 10);
        assert_eq!(a, want);
    }
}
