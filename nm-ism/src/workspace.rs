//! The workspace: accumulation array, the sort/merge stage ([`crate::merge`]) and the dense
//! alternative.

use std::fmt;
use std::sync::mpsc::channel;

use nm_format::{LevelKind, Value};
use nm_runtime::memory::huge_vec;

use crate::bucket::{BucketStore, SAMPLE};
use crate::config::{Config, IsmError, Policy, Stats};
use crate::ffi::{Slot, slot_flush, slot_grow};
use crate::key::KeyLayout;
use crate::merge::{Job, MergeState, Stage, drain_dense, drain_dense_rows, grown, reserve};
use crate::sort::{Buckets, Run, Scratch, sort_coord};
use crate::{Components, LevelArrays};

/// `auto` decides on its first `Config::CAPACITY / AUTO_SAMPLE` components.
const AUTO_SAMPLE: usize = 8;
/// `auto` takes an early look at its first `Config::CAPACITY / AUTO_EARLY` components.
const AUTO_EARLY: usize = 128;

/// Where `auto` stands in one use: before its early look, after it, or decided (turned dense
/// at either, or staying sparse).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Open,
    Looked,
    Made,
}

/// An insert–sort–merge workspace over keys `0..prod(extents)` (see the crate docs).
pub struct Workspace<V: Value> {
    slot: Slot,
    layout: KeyLayout,
    config: Config,
    acc: Run<V>,
    stage: Stage<V>,
    dense: Option<(Vec<V>, Vec<u8>)>,
    buckets: Option<BucketStore<V>>,
    /// How far `auto` is with its choice in this use.
    choice: Choice,
    /// Whether inserts go to the dense arrays (always for `dense`; once turned, for `auto`).
    dense_on: bool,
    stats: Stats,
    error: Option<IsmError>,
}

// SAFETY: the slot's pointers point into this workspace's own vectors (or its owner box), which
// move with it; nothing else holds them outside a call that borrows the workspace mutably.
unsafe impl<V: Value> Send for Workspace<V> {}
// SAFETY: `&Workspace` methods only read plain fields; the raw pointers are used only through
// `&mut` methods and by generated code running under a `&mut` borrow.
unsafe impl<V: Value> Sync for Workspace<V> {}

impl<V: Value> fmt::Debug for Workspace<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workspace").field("extents", &self.layout.extents()).field("config", &self.config).finish()
    }
}

impl<V: Value> Workspace<V> {
    /// An empty workspace over `extents` (the result's dimensions in storage order). A dense
    /// one is checked against the memory available first.
    pub fn new(extents: &[usize], config: Config) -> Result<Box<Self>, IsmError> {
        let layout = KeyLayout::new(extents, config.policy)?;
        let space = layout.space();
        let dense = if config.policy == Policy::Dense {
            let bytes = Self::dense_bytes(extents).unwrap_or(u128::MAX);
            if nm_runtime::memory::available().is_some_and(|a| bytes > a) || bytes > isize::MAX as u128 {
                return Err(IsmError::OutOfMemory(format!(
                    "a dense workspace over {extents:?} needs {:.1} GiB",
                    bytes as f64 / (1u64 << 30) as f64
                )));
            }
            let arrays = dense_arrays(space as usize);
            Some(arrays.ok_or_else(|| IsmError::OutOfMemory(format!("a dense workspace over {extents:?}")))?)
        } else {
            None
        };
        let capacity = match config.policy {
            Policy::Map => 1,
            // Components go straight to their buckets.
            Policy::Bucket | Policy::Auto => 0,
            _ => config.capacity.clamp(1, Config::START),
        };
        let acc = Run { keys: vec![0; capacity], vals: vec![V::ZERO; capacity] };
        let state = MergeState {
            runs: Vec::new(),
            pool: Vec::new(),
            unique: Run::default(),
            scratch: Scratch::default(),
            rows: Buckets::default(),
            stride: if config.policy == Policy::Dense { 0 } else { layout.first().0 },
            config,
            peak: 0,
        };
        let buckets = if matches!(config.policy, Policy::Bucket | Policy::Auto) {
            let (stride, _) = layout.first();
            Some(BucketStore::new(extents.first().copied().unwrap_or(1), stride)?)
        } else {
            None
        };
        let stage = if config.pipelined
            && !matches!(config.policy, Policy::Dense | Policy::Vector | Policy::Map | Policy::Auto)
        {
            let (to_merger, inbox) = channel::<Job<V>>();
            let (give_back, back) = channel::<Run<V>>();
            // The second accumulation array starts out on the way back.
            let _ = give_back.send(Run { keys: vec![0; capacity], vals: vec![V::ZERO; capacity] });
            let mut state = state;
            let merger = std::thread::Builder::new()
                .name("nm-ism-merge".into())
                .spawn(move || {
                    for job in inbox {
                        match job {
                            Job::Sort(run, n) => {
                                state.absorb(&run, n)?;
                                // The inserting side may be gone (finished or dropped).
                                let _ = give_back.send(run);
                            }
                            Job::Merge(run) => state.push(run)?,
                        }
                    }
                    Ok(state)
                })
                .map_err(|e| IsmError::Internal(format!("starting the merging thread: {e}")))?;
            Stage::Pipelined { to_merger: Some(to_merger), back, merger: Some(merger) }
        } else {
            Stage::Inline(Box::new(state))
        };
        let mut ws = Box::new(Workspace {
            slot: Slot {
                keys: std::ptr::null_mut(),
                vals: std::ptr::null_mut(),
                len: 0,
                cap: 0,
                dense: std::ptr::null_mut(),
                mark: std::ptr::null_mut(),
                buckets: std::ptr::null_mut(),
                shift: 0,
                flush: slot_flush::<V>,
                grow: slot_grow::<V>,
                finish: None,
                owner: std::ptr::null_mut(),
                host: std::ptr::null_mut(),
            },
            layout,
            config,
            acc,
            stage,
            dense,
            buckets,
            choice: Choice::Open,
            dense_on: config.policy == Policy::Dense,
            stats: Stats::default(),
            error: None,
        });
        ws.slot.owner = (&mut *ws as *mut Workspace<V>).cast();
        ws.sync_slot();
        Ok(ws)
    }

    /// Bytes a dense workspace over `extents` needs (`None` past `u128`).
    pub fn dense_bytes(extents: &[usize]) -> Option<u128> {
        extents.iter().try_fold((std::mem::size_of::<V>() + 1) as u128, |b, &e| b.checked_mul(e as u128))
    }

    fn sync_slot(&mut self) {
        self.slot.keys = self.acc.keys.as_mut_ptr();
        self.slot.vals = self.acc.vals.as_mut_ptr().cast();
        self.slot.cap = self.acc.keys.len() as i64;
        self.slot.dense = std::ptr::null_mut();
        self.slot.mark = std::ptr::null_mut();
        if self.dense_on
            && let Some((vals, mark)) = &mut self.dense
        {
            self.slot.dense = vals.as_mut_ptr().cast();
            self.slot.mark = mark.as_mut_ptr();
        }
        if let Some(b) = &mut self.buckets {
            self.slot.buckets = b.heads.as_mut_ptr();
            self.slot.shift = b.stride.trailing_zeros() as i64;
            // Components buffered in all buckets before they are combined into a run; `auto`
            // decides after its first few: the products before a dense workspace takes over
            // cost twice as much (an outer product with many products per nonzero took almost
            // twice as long deciding late as all dense).
            let sampling = self.config.policy == Policy::Auto && self.choice != Choice::Made;
            let cap = if sampling { self.auto_sample() } else { self.config.capacity };
            self.slot.cap = cap.max(1) as i64;
        }
    }

    /// Components `auto` looks at next: the first 128th of [`Config::CAPACITY`] (or of the
    /// capacity when smaller) for its early look, the first eighth for its decision — at least
    /// one more than the early look, or the count would have passed it already.
    fn auto_sample(&self) -> usize {
        let capacity = self.config.capacity.min(Config::CAPACITY);
        let early = (capacity / AUTO_EARLY).max(1);
        if self.choice == Choice::Looked { (capacity / AUTO_SAMPLE).max(early + 1) } else { early }
    }

    /// `auto` at its first flush: moves the components into a dense array when a sample of
    /// the buckets says they fall on few coordinates and the dense array fits (see
    /// [`Policy::Auto`]), else goes on with the buckets untouched, as `bucket` would — either
    /// way without a run that the end would merge again (which almost doubled an outer
    /// product's time), nor a bucket combined twice. The early look turns dense only where
    /// coordinates repeat [`Config::DENSE_EARLY`] times, and otherwise leaves the decision to
    /// the full sample: the components buffered in buckets before a dense array takes over
    /// cost several times a dense insert each, and emptying them into it a scattered write.
    fn decide(&mut self) {
        let early = self.choice == Choice::Open;
        self.choice = if early { Choice::Looked } else { Choice::Made };
        let Some(b) = &mut self.buckets else {
            self.choice = Choice::Made;
            return;
        };
        // The early look reads a quarter of the decision's sample, about one percent of a small
        // product that stays sparse.
        let (seen, distinct) = b.sample_distinct(if early { SAMPLE / 4 } else { SAMPLE });
        let per_coordinate = if early { Config::DENSE_EARLY } else { Config::DENSE_AFTER };
        if seen >= per_coordinate * distinct.max(1) && self.turn_dense() {
            self.choice = Choice::Made;
            let (vals, mark) = self.dense.as_mut().expect("turned dense");
            let b = self.buckets.as_mut().expect("checked");
            let layout = &self.layout;
            b.empty_into(|k, v| {
                let at = layout.dense_index(k);
                vals[at] += v;
                mark[at] = 1;
            });
            self.slot.len = 0;
        }
        self.sync_slot();
    }

    /// Turns `auto` dense, allocating the dense array unless an earlier use left it; `false`
    /// (staying sparse) when it does not fit.
    fn turn_dense(&mut self) -> bool {
        let len = self.layout.dense_len() as u128;
        let bytes = len * (std::mem::size_of::<V>() + 1) as u128;
        if nm_runtime::memory::available().is_none_or(|a| bytes > a / 4) || bytes > isize::MAX as u128 {
            return false;
        }
        if self.dense.is_none() {
            // Not fitting after all is no error: the buckets go on.
            let Some(arrays) = dense_arrays(len as usize) else { return false };
            self.dense = Some(arrays);
        }
        // (Kept from an earlier use, zeroed by its finish: not paged in again.)
        self.dense_on = true;
        true
    }

    /// Doubles a bucket's capacity (generated code calls it through the slot).
    pub(crate) fn grow_bucket(&mut self, b: i64) -> Result<(), IsmError> {
        let store =
            self.buckets.as_mut().ok_or_else(|| IsmError::Internal("grow on a workspace without buckets".into()))?;
        let b = usize::try_from(b).ok().filter(|&b| b < store.heads.len()).ok_or_else(|| {
            IsmError::Internal(format!("bucket {b} outside the workspace's {} buckets", store.heads.len()))
        })?;
        store.grow(b)
    }

    /// The extents.
    pub fn extents(&self) -> &[usize] {
        self.layout.extents()
    }

    /// How coordinates make keys (what generated code computes inline).
    pub fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    /// The configuration.
    pub fn config(&self) -> Config {
        self.config
    }

    /// The key of `coords` (in storage order).
    pub fn key(&self, coords: &[usize]) -> Result<u64, IsmError> {
        self.layout.key(coords)
    }

    /// Adds `v` at `coords` (duplicates add up).
    pub fn insert(&mut self, coords: &[usize], v: V) -> Result<(), IsmError> {
        let key = self.key(coords)?;
        self.insert_key(key, v)
    }

    /// Adds `v` at `key` — what generated code does inline.
    pub fn insert_key(&mut self, key: u64, v: V) -> Result<(), IsmError> {
        if !self.layout.contains(key) {
            let mut coords = vec![0; self.layout.extents().len()];
            self.layout.decode(key, &mut coords);
            return Err(IsmError::OutOfRange { coords, extents: self.layout.extents().to_vec() });
        }
        self.stats.inserted += 1;
        if self.dense_on
            && let Some((vals, mark)) = &mut self.dense
        {
            let at = self.layout.dense_index(key);
            vals[at] += v;
            mark[at] = 1;
            return Ok(());
        }
        if let Some(b) = &mut self.buckets {
            b.push(key, v)?;
            self.slot.len += 1;
            if self.slot.len >= self.slot.cap {
                self.flush()?;
            }
            return Ok(());
        }
        if self.slot.len == self.slot.cap {
            self.flush()?;
        }
        let n = self.slot.len as usize;
        self.acc.keys[n] = key;
        self.acc.vals[n] = v;
        self.slot.len += 1;
        Ok(())
    }

    /// Sorts and merges the accumulation array (`vector`: grows it instead).
    pub fn flush(&mut self) -> Result<(), IsmError> {
        let n = self.slot.len as usize;
        if self.config.policy == Policy::Vector {
            if n == self.acc.keys.len() {
                let target = grown(n);
                let oom = |_| IsmError::OutOfMemory(format!("growing a vector workspace to {target} components"));
                self.acc.try_reserve_total(target).map_err(oom)?;
                self.acc.keys.resize(target, 0);
                self.acc.vals.resize(target, V::ZERO);
                self.sync_slot();
            }
            return Ok(());
        }
        if n == 0 {
            return Ok(());
        }
        if self.config.policy == Policy::Auto && self.choice != Choice::Made {
            // The early look sorts nothing; the decision counts as the first flush.
            if self.choice == Choice::Looked {
                self.stats.flushes += 1;
            }
            self.decide();
            return Ok(());
        }
        self.stats.flushes += 1;
        if let Some(b) = &mut self.buckets {
            match &mut self.stage {
                Stage::Inline(state) => {
                    let mut run = state.buffer_for(n);
                    reserve(&mut run, n)?;
                    b.drain(&mut run);
                    state.push(run)?;
                }
                Stage::Pipelined { to_merger, .. } => {
                    let mut run = Run::default();
                    b.drain(&mut run);
                    let lost = || IsmError::Internal("the merging thread stopped".into());
                    to_merger.as_ref().ok_or_else(lost)?.send(Job::Merge(run)).map_err(|_| lost())?;
                }
            }
            self.slot.len = 0;
            return Ok(());
        }
        match &mut self.stage {
            Stage::Inline(state) => state.absorb(&self.acc, n)?,
            Stage::Pipelined { to_merger, back, .. } => {
                let lost = || IsmError::Internal("the merging thread stopped".into());
                let empty = back.recv().map_err(|_| lost())?;
                let full = std::mem::replace(&mut self.acc, empty);
                to_merger.as_ref().ok_or_else(lost)?.send(Job::Sort(full, n)).map_err(|_| lost())?;
            }
        }
        self.slot.len = 0;
        let cap = self.acc.keys.len();
        if cap < self.config.capacity {
            let target = (2 * cap).min(self.config.capacity);
            let oom = |_| IsmError::OutOfMemory(format!("growing an accumulation array to {target} components"));
            self.acc.try_reserve_total(target).map_err(oom)?;
            self.acc.keys.resize(target, 0);
            self.acc.vals.resize(target, V::ZERO);
        }
        self.sync_slot();
        Ok(())
    }

    /// Every component inserted, sorted by key with duplicates combined; the workspace is
    /// empty afterwards and can be used again.
    pub fn finish(&mut self) -> Result<Components<V>, IsmError> {
        let acc_bytes = self.acc.bytes() + self.buckets.as_ref().map_or(0, BucketStore::bytes);
        if self.config.policy == Policy::Auto && self.dense_on {
            // What the buckets still hold, then the dense array as one more run.
            self.flush()?;
            let (vals, mark) = self.dense.as_mut().expect("checked");
            let Stage::Inline(state) = &mut self.stage else { unreachable!("auto runs inline") };
            let mut run = drain_dense(vals, mark, state.largest_kept());
            let dense_bytes = vals.len() * (std::mem::size_of::<V>() + 1);
            // Indices into the dense array back to keys (in the same order).
            if self.layout.dense_gap() > 0 {
                run.keys.iter_mut().for_each(|k| *k = self.layout.dense_key(*k as usize));
            }
            state.push(run)?;
            self.stats.peak_bytes = self.stats.peak_bytes.max(state.peak + acc_bytes + dense_bytes);
            state.peak = 0;
            let all = state.all()?;
            // The next use starts sparse again (the zeroed dense array is kept for it).
            self.dense_on = false;
            self.sync_slot();
            return Ok(self.components(all));
        }
        if self.dense_on
            && let Some((vals, mark)) = &mut self.dense
        {
            let kept = match &mut self.stage {
                Stage::Inline(state) => state.largest_kept(),
                Stage::Pipelined { .. } => Run::default(),
            };
            let run = drain_dense(vals, mark, kept);
            let dense_bytes = vals.len() * (std::mem::size_of::<V>() + 1);
            self.stats.peak_bytes = self.stats.peak_bytes.max(dense_bytes + run.bytes());
            return Ok(self.components(run));
        }
        if self.config.policy == Policy::Vector {
            // The one sort of the `vector` extreme.
            let n = self.slot.len as usize;
            let mut sorted = Run::default();
            let mut scratch = Scratch::default();
            sort_coord(&self.acc, n, &mut sorted, &mut scratch);
            self.stats.flushes += 1;
            self.stats.peak_bytes = self.stats.peak_bytes.max(acc_bytes + sorted.bytes() + scratch.bytes());
            self.slot.len = 0;
            return Ok(self.components(sorted));
        }
        // `auto` finished before its first flush stays sparse: fewer components than that
        // seldom pay for scanning a dense array, and deciding would combine them twice.
        self.choice = Choice::Made;
        self.flush()?;
        let all = match &mut self.stage {
            Stage::Inline(state) => {
                self.stats.peak_bytes = self.stats.peak_bytes.max(state.peak + acc_bytes);
                state.peak = 0;
                state.all()?
            }
            Stage::Pipelined { to_merger, merger, .. } => {
                let lost = || IsmError::Internal("the merging thread stopped".into());
                drop(to_merger.take());
                let state = merger.take().ok_or_else(lost)?.join().map_err(|_| lost())??;
                self.stats.peak_bytes = self.stats.peak_bytes.max(state.peak + 2 * acc_bytes);
                // A fresh merging thread for the next use, with the state's memory.
                let config = self.config;
                let mut next = *Self::new(self.layout.extents(), config)?;
                let mut state = state;
                let all = state.all()?;
                std::mem::swap(&mut self.stage, &mut next.stage);
                all
            }
        };
        Ok(self.components(all))
    }

    /// [`Workspace::finish`], then [`Components::levels_into`]: every component inserted,
    /// compressed into the level arrays of a format whose levels are `kinds` (reusing their
    /// memory). A matrix into CSR whose components are all in buckets that were never flushed,
    /// or all in the dense array, goes row by row straight into the arrays: the compression
    /// fused with the final merge or scan, one pass over the result fewer (BENCHMARKS.md,
    /// "Outer-product SpGEMM").
    pub fn finish_into(&mut self, kinds: &[LevelKind], out: &mut LevelArrays<V>) -> Result<(), IsmError> {
        let csr = matches!(kinds, [LevelKind::Dense, LevelKind::Compressed(p)] if p.unique);
        let unflushed = matches!(&self.stage, Stage::Inline(state) if state.runs.is_empty());
        let (Some(Some(pos)), Some(Some(crd)), true, true) = (out.pos.get_mut(1), out.crd.get_mut(1), csr, unflushed)
        else {
            return self.finish_then_compress(kinds, out);
        };
        let acc_bytes = self.acc.bytes() + self.buckets.as_ref().map_or(0, BucketStore::bytes);
        match (&mut self.dense, &mut self.buckets) {
            // Everything in the dense array (`auto` emptied its buckets into it on turning).
            (Some((vals, mark)), _) if self.dense_on && self.slot.len == 0 => {
                let rows = (self.layout.extents()[0], self.layout.dense_width() as usize, self.layout.extents()[1]);
                drain_dense_rows(vals, mark, rows, pos, crd, &mut out.vals)?;
                let dense_bytes = vals.len() * (std::mem::size_of::<V>() + 1);
                self.stats.peak_bytes = self.stats.peak_bytes.max(acc_bytes + dense_bytes);
                // `auto`'s next use starts sparse again (`dense` stays dense).
                self.dense_on = self.config.policy == Policy::Dense;
            }
            (_, Some(b)) if !self.dense_on => {
                if self.slot.len > 0 {
                    self.stats.flushes += 1;
                }
                b.drain_rows(self.slot.len as usize, pos, crd, &mut out.vals)?;
                self.stats.peak_bytes = self.stats.peak_bytes.max(acc_bytes);
                self.slot.len = 0;
            }
            _ => return self.finish_then_compress(kinds, out),
        }
        out.pos.truncate(2);
        out.crd.truncate(2);
        out.pos[0] = None;
        out.crd[0] = None;
        self.choice = Choice::Open;
        self.sync_slot();
        self.stats.unique = out.vals.len() as u64;
        Ok(())
    }

    /// [`Workspace::finish_into`] in two steps, the finished run's memory kept for next time.
    fn finish_then_compress(&mut self, kinds: &[LevelKind], out: &mut LevelArrays<V>) -> Result<(), IsmError> {
        let done = self.finish()?;
        let placed = done.levels_into(kinds, out);
        self.recycle(done);
        placed
    }

    /// Gives a finished workspace's arrays back, for the next use to fill without allocating.
    pub fn recycle(&mut self, done: Components<V>) {
        if let Stage::Inline(state) = &mut self.stage {
            state.give_back(Run { keys: done.keys, vals: done.vals });
        }
    }

    fn components(&mut self, run: Run<V>) -> Components<V> {
        self.choice = Choice::Open;
        self.sync_slot();
        self.stats.unique = run.len() as u64;
        Components { layout: self.layout.clone(), keys: run.keys, vals: run.vals }
    }

    /// What the workspace did so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The C-ABI view for generated code; valid while the workspace lives and is not moved
    /// out of its box.
    pub fn slot(&mut self) -> *mut Slot {
        &mut self.slot
    }

    /// Records why a call from generated code failed.
    pub(crate) fn fail(&mut self, e: IsmError) {
        self.error = Some(e);
    }

    /// Why the last call from generated code failed.
    pub fn take_error(&mut self) -> Option<IsmError> {
        self.error.take()
    }
}

impl<V: Value> Drop for Workspace<V> {
    fn drop(&mut self) {
        if let Stage::Pipelined { to_merger, merger, .. } = &mut self.stage {
            drop(to_merger.take());
            if let Some(m) = merger.take() {
                let _ = m.join();
            }
        }
    }
}

/// A dense workspace's arrays over `len` keys, zeroed: the values and a flag per key. Advised
/// for huge pages before they are first written: products scatter into them at random, and a
/// TLB entry then covers 2 MiB. `None` when memory runs out.
fn dense_arrays<V: Value>(len: usize) -> Option<(Vec<V>, Vec<u8>)> {
    let (mut vals, mut mark) = (huge_vec(len).ok()?, huge_vec(len).ok()?);
    vals.resize(len, V::ZERO);
    mark.resize(len, 0u8);
    Some((vals, mark))
}
