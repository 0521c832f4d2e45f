//! The sort/merge stage: sorted runs of unique keys merged log-structured into the all array,
//! inline or on a second thread.

use std::sync::mpsc::{Receiver, Sender};
use std::thread::JoinHandle;

use nm_format::Value;
use nm_runtime::memory::{Peer, place_apart};

use crate::config::{Config, IsmError, Policy};
use crate::sort::{Buckets, Run, Scratch, combine_runs, insert_sorted, merge, sort_coord, sort_hash};

/// The sort/merge stage: the all array and what merging into it needs.
pub(crate) struct MergeState<V> {
    /// Sorted runs of unique keys, largest first: the all array, kept as a log-structured
    /// stack so that a run is merged only with one of about its size (a new run merged into
    /// one growing all array copies that array every flush: quadratic; measured, it was two
    /// thirds of wiki-Vote's outer-product A·Aᵀ).
    pub(crate) runs: Vec<Run<V>>,
    /// Emptied runs, reused as merge targets (double buffering: no allocation per merge).
    pub(crate) pool: Vec<Run<V>>,
    pub(crate) unique: Run<V>,
    pub(crate) scratch: Scratch,
    /// The dense row runs are combined in.
    pub(crate) rows: Buckets<V>,
    /// Keys per first coordinate (bit-packed keys; 0 for a dense workspace's).
    pub(crate) stride: u64,
    pub(crate) config: Config,
    pub(crate) peak: usize,
}

/// Runs kept before they are combined into one (a pass over all of them).
pub(crate) const MAX_RUNS: usize = 8;

impl<V: Value> MergeState<V> {
    pub(crate) fn bytes(&self) -> usize {
        self.runs.iter().chain(&self.pool).map(Run::bytes).sum::<usize>() + self.unique.bytes() + self.scratch.bytes()
    }

    /// Whether runs are merged pairwise (rows too long for a dense row, or no rows at all).
    pub(crate) fn pairwise(&self) -> bool {
        self.stride == 0 || self.stride > 1 << 22
    }

    /// An empty run to write about `need` components into: when double-buffered, the smallest
    /// kept one that holds them (else the largest), so that no merge reallocates — a
    /// reallocated run costs page faults on fresh memory (a third of MIT8's outer-product time
    /// went to clearing pages before this); else a fresh one.
    pub(crate) fn buffer_for(&mut self, need: usize) -> Run<V> {
        if !self.config.double_buffered || self.pool.is_empty() {
            return Run::default();
        }
        let fits = (0..self.pool.len())
            .filter(|&i| self.pool[i].keys.capacity() >= need)
            .min_by_key(|&i| self.pool[i].keys.capacity());
        let pick = fits
            .unwrap_or_else(|| (0..self.pool.len()).max_by_key(|&i| self.pool[i].keys.capacity()).expect("a kept run"));
        self.pool.swap_remove(pick)
    }

    /// The largest run earlier uses gave back (or a fresh one), for a drain of unknown size:
    /// refilling it faults no fresh pages.
    pub(crate) fn largest_kept(&mut self) -> Run<V> {
        self.buffer_for(usize::MAX)
    }

    pub(crate) fn give_back(&mut self, mut run: Run<V>) {
        if self.config.double_buffered {
            run.clear();
            self.pool.push(run);
        }
    }

    /// Combines the runs into one when there are [`MAX_RUNS`] of them (or whenever `all`), a
    /// bucket at a time; when rows are too long for a dense row, merges the top runs pairwise
    /// while the one below is at most twice the top's size.
    pub(crate) fn collapse(&mut self, all: bool) -> Result<(), IsmError> {
        if self.runs.len() < 2 || (!all && self.runs.len() < MAX_RUNS && !self.pairwise()) {
            return Ok(());
        }
        if !self.pairwise() {
            let need: usize = self.runs.iter().map(Run::len).sum();
            let mut into = self.buffer_for(need);
            reserve(&mut into, need)?;
            combine_runs(&self.runs, self.stride, &mut into, &mut self.rows);
            self.peak = self.peak.max(self.bytes() + into.bytes());
            for run in std::mem::take(&mut self.runs) {
                self.give_back(run);
            }
            self.runs.push(into);
            return Ok(());
        }
        while self.runs.len() >= 2 {
            let n = self.runs.len();
            if !all && self.runs[n - 2].len() > 2 * self.runs[n - 1].len() {
                break;
            }
            let (top, below) = (self.runs.pop().expect("two runs"), self.runs.pop().expect("two runs"));
            let mut into = self.buffer_for(top.len() + below.len());
            reserve(&mut into, top.len() + below.len())?;
            merge(&below, &top, &mut into);
            self.runs.push(into);
            self.peak = self.peak.max(self.bytes() + top.bytes() + below.bytes());
            self.give_back(top);
            self.give_back(below);
        }
        Ok(())
    }

    /// Sorts the first `n` components of `acc` by the policy into a run and merges runs.
    pub(crate) fn absorb(&mut self, acc: &Run<V>, n: usize) -> Result<(), IsmError> {
        if self.config.policy == Policy::Map {
            if self.runs.is_empty() {
                self.runs.push(Run::default());
            }
            for i in 0..n {
                insert_sorted(&mut self.runs[0], acc.keys[i], acc.vals[i]);
            }
            self.peak = self.peak.max(self.bytes());
            return Ok(());
        }
        let mut sorted = self.buffer_for(n);
        match self.config.policy {
            Policy::Hash(l) => sort_hash(acc, n, l, &mut sorted, &mut self.unique, &mut self.scratch),
            _ => sort_coord(acc, n, &mut sorted, &mut self.scratch),
        }
        self.push(sorted)
    }

    /// Adds a sorted run of unique keys and merges runs.
    pub(crate) fn push(&mut self, sorted: Run<V>) -> Result<(), IsmError> {
        self.runs.push(sorted);
        self.peak = self.peak.max(self.bytes());
        self.collapse(false)
    }

    /// Every run merged into one (taken out).
    pub(crate) fn all(&mut self) -> Result<Run<V>, IsmError> {
        self.collapse(true)?;
        Ok(self.runs.pop().unwrap_or_default())
    }
}

/// Room for `need` components, grown by the piecewise-linear rule [`grown`].
pub(crate) fn reserve<V: Value>(run: &mut Run<V>, need: usize) -> Result<(), IsmError> {
    let cap = run.keys.capacity();
    if cap >= need {
        return Ok(());
    }
    let target = grown(cap).max(need);
    let oom = |_| IsmError::OutOfMemory(format!("growing a workspace array to {target} components"));
    run.try_reserve_total(target).map_err(oom)
}

/// The reallocation heuristic: the next capacity after `cap` — doubling while small (cheap,
/// amortized), +50% up to 64 Mi components, then a fixed 32 Mi components a step, so a huge
/// all array never asks for twice its size (the step where doubling runs out of memory).
pub(crate) fn grown(cap: usize) -> usize {
    const SMALL: usize = 1 << 20;
    const LARGE: usize = 1 << 26;
    if cap < SMALL {
        (2 * cap).max(1024)
    } else if cap < LARGE {
        cap + cap / 2
    } else {
        cap + (LARGE >> 1)
    }
}

/// Work for the merging thread.
pub(crate) enum Job<V> {
    /// An accumulation array with `n` components to sort, merge and give back.
    Sort(Run<V>, usize),
    /// A sorted run of unique keys (combined buckets) to merge.
    Merge(Run<V>),
}

pub(crate) enum Stage<V> {
    Inline(Box<MergeState<V>>),
    /// A merging thread owns the state; full accumulation arrays go to it and come back empty.
    Pipelined {
        to_merger: Option<Sender<Job<V>>>,
        /// Emptied accumulation arrays.
        back: Receiver<Run<V>>,
        merger: Option<JoinHandle<Result<MergeState<V>, IsmError>>>,
    },
}

/// [`drain_dense`] straight into a CSR matrix's arrays (replacing what they held; `rows` is
/// the row count, the key stride between rows, and the column count): only each row's
/// columns are scanned, not the rest of its power-of-two stride, which nothing writes. Fails
/// only when memory runs out.
pub(crate) fn drain_dense_rows<V: Value>(
    vals: &mut [V],
    mark: &mut [u8],
    (rows, stride, cols): (usize, usize, usize),
    pos: &mut Vec<i64>,
    crd: &mut Vec<i64>,
    out: &mut Vec<V>,
) -> Result<(), IsmError> {
    pos.clear();
    crd.clear();
    out.clear();
    let oom = |_| IsmError::OutOfMemory(format!("a result of {rows} rows"));
    pos.try_reserve_exact(rows + 1).map_err(oom)?;
    pos.push(0);
    for r in 0..rows {
        // Room for a whole row first: the pushes below never reallocate.
        if crd.capacity() - crd.len() < cols || out.capacity() - out.len() < cols {
            crd.try_reserve(cols).map_err(oom)?;
            out.try_reserve(cols).map_err(oom)?;
            place_apart(out, &[Peer::of(crd)]);
        }
        let row = r * stride..r * stride + cols;
        take_marked(&mut vals[row.clone()], &mut mark[row], |col, v| {
            crd.push(col as i64);
            out.push(v);
        });
        pos.push(crd.len() as i64);
    }
    Ok(())
}

/// The written entries of a dense workspace as a sorted run, the arrays zeroed behind.
pub(crate) fn drain_dense<V: Value>(vals: &mut [V], mark: &mut [u8], mut run: Run<V>) -> Run<V> {
    run.clear();
    take_marked(vals, mark, |k, v| {
        run.keys.push(k as u64);
        run.vals.push(v);
    });
    run
}

/// Hands `take` each flagged index of `mark`, in order, with its value, zeroing both behind.
/// 64 flags at a time: a chunk with none set costs one OR the compiler vectorizes (the key
/// space is often far larger than what was written: bcsstk16's outer product, 1.0 M of 40 M);
/// a chunk with some is visited by the bits of its set flags, not by a branch per flag, which
/// mispredicted where a row's columns are half taken (BENCHMARKS.md, "Outer-product SpGEMM").
fn take_marked<V: Value>(vals: &mut [V], mark: &mut [u8], mut take: impl FnMut(usize, V)) {
    const CHUNK: usize = 64;
    const AHEAD: usize = 2 * CHUNK;
    for (c, flags) in mark.chunks_mut(CHUNK).enumerate() {
        if flags.iter().fold(0u8, |any, &m| any | m) == 0 {
            continue;
        }
        let mut bits = set_flags(flags);
        // The values two chunks on, where the entries go on (a row's entries lie together):
        // the scan otherwise waits on each line of values it takes.
        let ahead = vals.as_ptr().wrapping_add(c * CHUNK + AHEAD);
        for line in (0..CHUNK * std::mem::size_of::<V>()).step_by(64) {
            crate::bucket::prefetch(ahead.cast::<u8>().wrapping_add(line));
        }
        while bits != 0 {
            let k = c * CHUNK + bits.trailing_zeros() as usize;
            take(k, std::mem::replace(&mut vals[k], V::ZERO));
            bits &= bits - 1;
        }
        flags.fill(0);
    }
}

/// Bit `i` set where flag `i` of (at most 64) `flags` is nonzero.
fn set_flags(flags: &[u8]) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    // Multiplied by this, a word whose bytes are each 0 or 1 gathers byte i's bit into bit 56 + i.
    const GATHER: u64 = 0x0102_0408_1020_4080;
    let mut bits = 0;
    let mut words = flags.chunks_exact(8);
    for (w, word) in words.by_ref().enumerate() {
        let x = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        // The high bit of each byte set where the byte is nonzero, then moved to its low bit.
        let nonzero = ((((x & LOW7) + LOW7) | x) >> 7) & 0x0101_0101_0101_0101;
        bits |= (nonzero.wrapping_mul(GATHER) >> 56) << (8 * w);
    }
    let done = flags.len() - words.remainder().len();
    for (at, &m) in words.remainder().iter().enumerate() {
        bits |= u64::from(m != 0) << (done + at);
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random flags (any nonzero byte counts, not only 1) at four densities and every length
    /// up to past two chunks: the bits name the set flags, and `take_marked` hands over exactly
    /// those, in order, zeroing flags and values behind.
    #[test]
    fn marked_entries_are_taken_in_order_and_zeroed() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for len in 0..=150 {
            for density in [0, 1, 3, 8] {
                let flags: Vec<u8> =
                    (0..len).map(|_| if next() % 8 < density { (next() % 255 + 1) as u8 } else { 0 }).collect();
                let set: Vec<usize> = (0..len).filter(|&k| flags[k] != 0).collect();
                for (c, chunk) in flags.chunks(64).enumerate() {
                    let bits = set_flags(chunk);
                    let want: u64 = (0..chunk.len()).filter(|&at| chunk[at] != 0).map(|at| 1u64 << at).sum();
                    assert_eq!(bits, want, "chunk {c} of {len} flags");
                }
                let mut mark = flags.clone();
                let mut vals: Vec<f64> = (0..len).map(|k| if flags[k] != 0 { k as f64 + 0.5 } else { 0.0 }).collect();
                let mut taken = Vec::new();
                take_marked(&mut vals, &mut mark, |k, v| taken.push((k, v)));
                let want: Vec<(usize, f64)> = set.iter().map(|&k| (k, k as f64 + 0.5)).collect();
                assert_eq!(taken, want, "{len} flags, density {density}/8");
                assert!(mark.iter().all(|&m| m == 0) && vals.iter().all(|&v| v == 0.0));
            }
        }
    }
}
