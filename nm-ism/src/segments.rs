//! Memory of their own for the buckets that outgrew their rooms: segments of a few large
//! chunks, advised for huge pages, rather than one allocation per bucket. Appends land at
//! random buckets; allocated one by one, the buckets lay spread over the heap's 4 KiB pages,
//! and an outer product's appends and the combining after them missed the TLB at every few
//! buckets (BENCHMARKS.md, "Outer-product SpGEMM").

use nm_format::Value;
use nm_runtime::memory::huge_vec;

use crate::IsmError;

/// A bucket's memory: `cap` components (a power of two) from component `at` of chunk `chunk`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Segment {
    chunk: usize,
    at: usize,
    /// Components it holds; 0 for no memory at all.
    pub cap: usize,
}

/// Chunks of keys and values that segments are cut from, and the segments given back.
#[derive(Default)]
pub(crate) struct Segments<V> {
    /// Keys and values, the same length each.
    chunks: Vec<(Vec<u64>, Vec<V>)>,
    /// Components of the last chunk handed out.
    used: usize,
    /// Segments given back, by the log2 of their capacity: a bucket that grows gives back the
    /// segment it leaves, which the next bucket to reach that size takes.
    free: Vec<Vec<Segment>>,
}

/// The first chunk's components (2 MiB of keys: one huge page); each next chunk is twice the
/// last, up to [`LARGEST_CHUNK`], or as large as the segment that asked for it.
const FIRST_CHUNK: usize = 1 << 18;
const LARGEST_CHUNK: usize = 1 << 22;

/// The smallest segment a chunk's unused end is cut into when a new chunk starts.
const SMALLEST: usize = 16;

impl<V: Value> Segments<V> {
    /// A segment of `cap` components (a power of two): one given back, else the rest of the
    /// last chunk, else a new chunk's first.
    pub fn take(&mut self, cap: usize) -> Result<Segment, IsmError> {
        debug_assert!(cap.is_power_of_two());
        let class = cap.trailing_zeros() as usize;
        if let Some(segment) = self.free.get_mut(class).and_then(Vec::pop) {
            return Ok(segment);
        }
        let last = self.chunks.last().map_or(0, |(keys, _)| keys.len());
        if last - self.used < cap {
            self.cut_rest();
            let size = if last == 0 { FIRST_CHUNK } else { (2 * last).min(LARGEST_CHUNK) }.max(cap);
            self.chunks.push(
                chunk(size).ok_or_else(|| IsmError::OutOfMemory(format!("{size} components of workspace buckets")))?,
            );
            self.used = 0;
        }
        let segment = Segment { chunk: self.chunks.len() - 1, at: self.used, cap };
        self.used += cap;
        Ok(segment)
    }

    /// `segment` free for another bucket (its contents left as they are).
    pub fn give_back(&mut self, segment: Segment) {
        if segment.cap == 0 {
            return;
        }
        let class = segment.cap.trailing_zeros() as usize;
        if self.free.len() <= class {
            self.free.resize_with(class + 1, Vec::new);
        }
        self.free[class].push(segment);
    }

    /// The last chunk's unused end, given back as segments of decreasing powers of two.
    fn cut_rest(&mut self) {
        let Some((keys, _)) = self.chunks.last() else { return };
        let (chunk, end) = (self.chunks.len() - 1, keys.len());
        while end - self.used >= SMALLEST {
            let cap = 1 << (end - self.used).ilog2();
            self.give_back(Segment { chunk, at: self.used, cap });
            self.used += cap;
        }
    }

    /// The first `n` components of `segment`.
    pub fn contents(&self, segment: Segment, n: usize) -> (&[u64], &[V]) {
        let (keys, vals) = &self.chunks[segment.chunk];
        let at = segment.at..segment.at + n;
        (&keys[at.clone()], &vals[at])
    }

    /// The same, to write.
    pub fn contents_mut(&mut self, segment: Segment, n: usize) -> (&mut [u64], &mut [V]) {
        let (keys, vals) = &mut self.chunks[segment.chunk];
        let at = segment.at..segment.at + n;
        (&mut keys[at.clone()], &mut vals[at])
    }

    /// Where `segment`'s keys and values start (chunks are never reallocated: a pointer stays
    /// good while the segments live).
    pub fn pointers(&mut self, segment: Segment) -> (*mut u64, *mut V) {
        let (keys, vals) = &mut self.chunks[segment.chunk];
        (keys.as_mut_ptr().wrapping_add(segment.at), vals.as_mut_ptr().wrapping_add(segment.at))
    }

    /// The first `n` components of `from` copied to the start of `to` (another segment).
    pub fn copy(&mut self, from: Segment, to: Segment, n: usize) {
        let (src, dst) = (from.at..from.at + n, to.at);
        if from.chunk == to.chunk {
            let (keys, vals) = &mut self.chunks[to.chunk];
            keys.copy_within(src.clone(), dst);
            vals.copy_within(src, dst);
        } else {
            let (low, high) = self.chunks.split_at_mut(from.chunk.max(to.chunk));
            let (a, b) = (&mut low[from.chunk.min(to.chunk)], &mut high[0]);
            let ((from_keys, from_vals), (to_keys, to_vals)) = if from.chunk < to.chunk { (a, b) } else { (b, a) };
            to_keys[dst..dst + n].copy_from_slice(&from_keys[src.clone()]);
            to_vals[dst..dst + n].copy_from_slice(&from_vals[src]);
        }
    }

    /// Components in all chunks, handed out or not (a few dozen chunks at most).
    pub fn capacity(&self) -> usize {
        self.chunks.iter().map(|(keys, _)| keys.len()).sum()
    }
}

/// A chunk of `n` keys and values, zeroed and advised for huge pages before they are first
/// written; `None` when memory runs out.
pub(crate) fn chunk<V: Value>(n: usize) -> Option<(Vec<u64>, Vec<V>)> {
    let (mut keys, mut vals) = (huge_vec(n).ok()?, huge_vec(n).ok()?);
    keys.resize(n, 0);
    vals.resize(n, V::ZERO);
    Some((keys, vals))
}

#[cfg(test)]
mod tests {
    use super::{FIRST_CHUNK, Segment, Segments};

    /// Segments never overlap while held, given-back ones are taken again before a chunk
    /// grows, and a copy moves a segment's contents whichever chunks the two lie in.
    #[test]
    fn segments_are_disjoint_reused_and_copied() {
        let mut s = Segments::<f64>::default();
        let mut held: Vec<Segment> = Vec::new();
        for cap in [16, 32, 16, 64, FIRST_CHUNK, 128, 1 << 20, 16] {
            let new = s.take(cap).unwrap();
            assert_eq!(new.cap, cap);
            for h in &held {
                let apart = h.chunk != new.chunk || h.at + h.cap <= new.at || new.at + new.cap <= h.at;
                assert!(apart, "{h:?} and {new:?} overlap");
            }
            held.push(new);
        }
        let chunks = s.chunks.len();
        let back = held.remove(3);
        s.give_back(back);
        assert_eq!(s.take(64).unwrap(), back);
        assert_eq!(s.chunks.len(), chunks);
        // Contents across chunks and within one.
        let (from, across, within) = (held[0], held[3], held[1]);
        assert_ne!(from.chunk, across.chunk);
        let (keys, vals) = s.contents_mut(from, 16);
        for i in 0..16 {
            keys[i] = i as u64 * 3;
            vals[i] = i as f64 / 2.0;
        }
        s.copy(from, across, 16);
        s.copy(from, within, 16);
        for to in [across, within] {
            let (keys, vals) = s.contents(to, 16);
            assert!(keys.iter().enumerate().all(|(i, &k)| k == i as u64 * 3));
            assert!(vals.iter().enumerate().all(|(i, &v)| v == i as f64 / 2.0));
        }
        assert!(s.capacity() >= held.iter().map(|h| h.cap).sum::<usize>());
    }
}
