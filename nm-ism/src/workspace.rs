//! The workspace: accumulation array, sort/merge stage (inline or on a second thread), all
//! array, and the dense alternative.

use std::fmt;
use std::str::FromStr;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use nm_format::Value;

use crate::Components;
use crate::bucket::BucketStore;
use crate::ffi::{Slot, slot_flush, slot_grow};
use crate::key::KeyLayout;
use crate::sort::{Buckets, Run, Scratch, combine_runs, insert_sorted, merge, sort_coord, sort_hash};

/// How a workspace collects components.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// A dense array over the whole key space with a flag per key: no sorting, memory for
    /// every coordinate (the choice when it fits and duplicates are many).
    Dense,
    /// Counting sort by the first coordinate (flag array over its extent), each bucket sorted
    /// by the rest; duplicates combined while gathering.
    Bucket,
    /// `bucket`, switching to a dense array (over the first coordinate × the rest's field)
    /// after its first flush — of the first eighth of [`Config::CAPACITY`] components — when
    /// they combined at least [`Config::DENSE_AFTER`] per coordinate and the dense array fits
    /// in a quarter of the memory available: decided on the data, since the lowering cannot
    /// count products (see [`Config::DENSE_AFTER`] for the measurements behind it).
    Auto,
    /// Duplicates combined in a hash table first (`2^⌈log2 n⌉` buckets for `n` components
    /// unless given), then only unique keys sorted.
    Hash(Option<usize>),
    /// Append, then a radix sort of the accumulation ids by key.
    Coord,
    /// One array kept sorted on every insert (the ablation's eager extreme).
    Map,
    /// One array sorted once at the end (the ablation's lazy extreme; memory grows with
    /// duplicates).
    Vector,
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Dense => write!(f, "dense"),
            Policy::Bucket => write!(f, "bucket"),
            Policy::Auto => write!(f, "auto"),
            Policy::Hash(None) => write!(f, "hash"),
            Policy::Hash(Some(l)) => write!(f, "hash({l})"),
            Policy::Coord => write!(f, "coord"),
            Policy::Map => write!(f, "map"),
            Policy::Vector => write!(f, "vector"),
        }
    }
}

impl FromStr for Policy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.trim() {
            "dense" => Policy::Dense,
            "bucket" => Policy::Bucket,
            "auto" => Policy::Auto,
            "hash" => Policy::Hash(None),
            "coord" => Policy::Coord,
            "map" => Policy::Map,
            "vector" => Policy::Vector,
            other => match other.strip_prefix("hash(").and_then(|r| r.strip_suffix(')')) {
                Some(l) => match l.trim().parse::<usize>() {
                    Ok(l) if l > 0 => Policy::Hash(Some(l)),
                    _ => return Err(format!("`{other}`: the bucket count of `hash(L)` is a positive integer")),
                },
                None => {
                    return Err(format!(
                        "unknown workspace policy `{other}` (expected auto, dense, bucket, hash, hash(L), coord, map or vector)"
                    ));
                }
            },
        })
    }
}

/// A workspace's policy and tuning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// How components are collected.
    pub policy: Policy,
    /// Components the accumulation array holds before it is sorted and merged (1 for `map`;
    /// the starting size for `vector`, which grows instead).
    pub capacity: usize,
    /// Sort and merge on a second thread while insertion goes on into a second accumulation
    /// array.
    pub pipelined: bool,
    /// Merge into a second all array kept from merge to merge (else a fresh one each time).
    pub double_buffered: bool,
}

impl Config {
    /// Default accumulation size: 4 Mi components (64 MiB of f64 components). The array
    /// starts at [`Config::START`] and doubles at each flush until it reaches it. Larger was
    /// faster on an outer-product A·Aᵀ of millions of components (fewer, larger sorted runs to
    /// merge; BENCHMARKS.md, "The workspace policies").
    pub const CAPACITY: usize = 1 << 22;
    /// The accumulation array's first size.
    pub const START: usize = 1 << 16;
    /// Components per distinct coordinate in its first flush from which `auto` turns dense.
    /// A first flush sees fewer duplicates than the whole (a coordinate's products come
    /// from all over the reduction): on the shared matrices' outer products, the first flush
    /// combined few components per coordinate where buckets won and several where the dense
    /// array won, and the threshold separates the two on those seven matrices (BENCHMARKS.md's
    /// history, "Prefetched buckets, buffered buckets, `auto` deciding early").
    pub const DENSE_AFTER: usize = 2;

    /// Most components buckets hold by default before they are combined: 256 Mi (4 GiB of
    /// f64 components).
    pub const BUCKETS_AT_MOST: usize = 1 << 28;

    /// `policy` with the defaults: [`Config::CAPACITY`] components ([`Config::buckets`] for
    /// `bucket` and `auto`), double-buffered, not pipelined.
    pub fn new(policy: Policy) -> Self {
        let capacity = match policy {
            Policy::Map => 1,
            Policy::Bucket | Policy::Auto => Self::buckets(),
            _ => Self::CAPACITY,
        };
        Config { policy, capacity, pipelined: false, double_buffered: true }
    }

    /// The default number of components buckets hold before they are combined: what fits in
    /// an eighth of the memory available (16 bytes each), between [`Config::CAPACITY`] and
    /// [`Config::BUCKETS_AT_MOST`]. Buckets grow only as components arrive, so the bound costs
    /// nothing until it is reached, and every flush before the end makes a run that later
    /// merges read again: buffering them all made the largest outer products almost twice as
    /// fast as flushing every [`Config::CAPACITY`] components.
    pub fn buckets() -> usize {
        let budget = nm_runtime::memory::available().map_or(0, |bytes| bytes / 8 / 16);
        (budget.min(Self::BUCKETS_AT_MOST as u128) as usize).max(Self::CAPACITY)
    }
}

/// What a workspace did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Components inserted.
    pub inserted: u64,
    /// Times the accumulation array was sorted and merged.
    pub flushes: u64,
    /// Unique components at the end.
    pub unique: u64,
    /// Most bytes the workspace held at once (accumulation, all and scratch arrays, or the
    /// dense arrays).
    pub peak_bytes: usize,
}

/// A workspace that cannot do what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IsmError {
    /// The coordinates do not fit one 64-bit key.
    #[error("a workspace over extents {extents:?} needs keys beyond 63 bits")]
    KeySpace {
        /// The extents.
        extents: Vec<usize>,
    },
    /// A coordinate outside its extent.
    #[error("coordinates {coords:?} are outside the workspace's extents {extents:?}")]
    OutOfRange {
        /// The coordinates.
        coords: Vec<usize>,
        /// The extents.
        extents: Vec<usize>,
    },
    /// Memory ran out (or a dense workspace would not fit).
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// A result level the workspace cannot be compressed into.
    #[error("a workspace cannot be compressed into {0} levels")]
    Level(String),
    /// A bug inside the runtime, reported instead of unwinding into generated code.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The sort/merge stage: the all array and what merging into it needs.
struct MergeState<V> {
    /// Sorted runs of unique keys, largest first: the all array, kept as a log-structured
    /// stack so that a run is merged only with one of about its size (a new run merged into
    /// one growing all array copies that array every flush: quadratic; measured, it was two
    /// thirds of wiki-Vote's outer-product A·Aᵀ).
    runs: Vec<Run<V>>,
    /// Emptied runs, reused as merge targets (double buffering: no allocation per merge).
    pool: Vec<Run<V>>,
    unique: Run<V>,
    scratch: Scratch,
    /// The dense row runs are combined in.
    rows: Buckets<V>,
    /// Keys per first coordinate (bit-packed keys; 0 for a dense workspace's).
    stride: u64,
    config: Config,
    peak: usize,
}

/// Runs kept before they are combined into one (a pass over all of them).
const MAX_RUNS: usize = 8;

impl<V: Value> MergeState<V> {
    fn bytes(&self) -> usize {
        self.runs.iter().chain(&self.pool).map(Run::bytes).sum::<usize>() + self.unique.bytes() + self.scratch.bytes()
    }

    /// Whether runs are merged pairwise (rows too long for a dense row, or no rows at all).
    fn pairwise(&self) -> bool {
        self.stride == 0 || self.stride > 1 << 22
    }

    /// An empty run to write about `need` components into: when double-buffered, the smallest
    /// kept one that holds them (else the largest), so that no merge reallocates — a
    /// reallocated run costs page faults on fresh memory (a third of MIT8's outer-product time
    /// went to clearing pages before this); else a fresh one.
    fn buffer_for(&mut self, need: usize) -> Run<V> {
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
    fn largest_kept(&mut self) -> Run<V> {
        self.buffer_for(usize::MAX)
    }

    fn give_back(&mut self, mut run: Run<V>) {
        if self.config.double_buffered {
            run.clear();
            self.pool.push(run);
        }
    }

    /// Combines the runs into one when there are [`MAX_RUNS`] of them (or whenever `all`), a
    /// bucket at a time; when rows are too long for a dense row, merges the top runs pairwise
    /// while the one below is at most twice the top's size.
    fn collapse(&mut self, all: bool) -> Result<(), IsmError> {
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
    fn absorb(&mut self, acc: &Run<V>, n: usize) -> Result<(), IsmError> {
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
    fn push(&mut self, sorted: Run<V>) -> Result<(), IsmError> {
        self.runs.push(sorted);
        self.peak = self.peak.max(self.bytes());
        self.collapse(false)
    }

    /// Every run merged into one (taken out).
    fn all(&mut self) -> Result<Run<V>, IsmError> {
        self.collapse(true)?;
        Ok(self.runs.pop().unwrap_or_default())
    }
}

/// Room for `need` components, grown by the piecewise-linear rule [`grown`].
fn reserve<V>(run: &mut Run<V>, need: usize) -> Result<(), IsmError> {
    let cap = run.keys.capacity();
    if cap >= need {
        return Ok(());
    }
    let target = grown(cap).max(need);
    let oom = |_| IsmError::OutOfMemory(format!("growing a workspace array to {target} components"));
    run.keys.try_reserve_exact(target - run.keys.len()).map_err(oom)?;
    run.vals.try_reserve_exact(target - run.vals.len()).map_err(oom)?;
    Ok(())
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
enum Job<V> {
    /// An accumulation array with `n` components to sort, merge and give back.
    Sort(Run<V>, usize),
    /// A sorted run of unique keys (combined buckets) to merge.
    Merge(Run<V>),
}

enum Stage<V> {
    Inline(Box<MergeState<V>>),
    /// A merging thread owns the state; full accumulation arrays go to it and come back empty.
    Pipelined {
        to_merger: Option<Sender<Job<V>>>,
        /// Emptied accumulation arrays.
        back: Receiver<Run<V>>,
        merger: Option<JoinHandle<Result<MergeState<V>, IsmError>>>,
    },
}

/// The written entries of a dense workspace as a sorted run, the arrays zeroed behind.
fn drain_dense<V: Value>(vals: &mut [V], mark: &mut [u8], mut run: Run<V>) -> Run<V> {
    run.clear();
    // 64 flags at a time (one OR the compiler vectorizes), one by one only where some are
    // set: the key space is often far larger than what was written (bcsstk16's outer
    // product: 1.0 M of 40 M).
    const CHUNK: usize = 64;
    for (c, flags) in mark.chunks_mut(CHUNK).enumerate() {
        if flags.iter().fold(0u8, |any, &m| any | m) == 0 {
            continue;
        }
        for (at, m) in flags.iter_mut().enumerate() {
            if *m != 0 {
                let k = c * CHUNK + at;
                run.keys.push(k as u64);
                run.vals.push(vals[k]);
                vals[k] = V::ZERO;
                *m = 0;
            }
        }
    }
    run
}

/// `auto` decides on its first `Config::CAPACITY / AUTO_SAMPLE` components.
const AUTO_SAMPLE: usize = 8;

/// An insert–sort–merge workspace over keys `0..prod(extents)` (see the crate docs).
pub struct Workspace<V: Value> {
    slot: Slot,
    layout: KeyLayout,
    config: Config,
    acc: Run<V>,
    stage: Stage<V>,
    dense: Option<(Vec<V>, Vec<u8>)>,
    buckets: Option<BucketStore<V>>,
    /// Whether `auto` has made its choice in this use.
    decided: bool,
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
            let oom = |_| IsmError::OutOfMemory(format!("a dense workspace over {extents:?}"));
            let (mut vals, mut mark) = (Vec::new(), Vec::new());
            vals.try_reserve_exact(space as usize).map_err(oom)?;
            mark.try_reserve_exact(space as usize).map_err(oom)?;
            vals.resize(space as usize, V::ZERO);
            mark.resize(space as usize, 0u8);
            Some((vals, mark))
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
            decided: false,
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
            let sampling = self.config.policy == Policy::Auto && !self.decided;
            let cap = if sampling { self.auto_sample() } else { self.config.capacity };
            self.slot.cap = cap.max(1) as i64;
        }
    }

    /// Components `auto` decides on: the first eighth of [`Config::CAPACITY`] (or of the
    /// capacity when smaller).
    fn auto_sample(&self) -> usize {
        (self.config.capacity.min(Config::CAPACITY) / AUTO_SAMPLE).max(1)
    }

    /// `auto` at its first flush, of `n` components: combines each bucket where it is, then
    /// moves them into a dense array when they combined into few coordinates and the dense
    /// array fits (see [`Policy::Auto`]), else goes on with the buckets — either way without
    /// a run that the end would merge again (which almost doubled an outer product's time).
    fn decide(&mut self, n: usize) {
        self.decided = true;
        let Some(b) = &mut self.buckets else { return };
        let unique = b.combine_in_place();
        self.slot.len = unique as i64;
        if n >= Config::DENSE_AFTER * unique.max(1) && self.turn_dense() {
            let (vals, mark) = self.dense.as_mut().expect("turned dense");
            let b = self.buckets.as_mut().expect("checked");
            b.empty_into(|k, v| {
                vals[k as usize] += v;
                mark[k as usize] = 1;
            });
            self.slot.len = 0;
        }
        self.sync_slot();
    }

    /// Turns `auto` dense, allocating the dense array unless an earlier use left it; `false`
    /// (staying sparse) when it does not fit.
    fn turn_dense(&mut self) -> bool {
        let (stride, _) = self.layout.first();
        let len = (self.layout.extents().first().copied().unwrap_or(1) as u128) * stride as u128;
        let bytes = len * (std::mem::size_of::<V>() + 1) as u128;
        if nm_runtime::memory::available().is_none_or(|a| bytes > a / 4) || bytes > isize::MAX as u128 {
            return false;
        }
        if self.dense.is_none() {
            let (mut vals, mut mark) = (Vec::new(), Vec::new());
            // Not fitting after all is no error: the buckets go on.
            if vals.try_reserve_exact(len as usize).is_err() || mark.try_reserve_exact(len as usize).is_err() {
                return false;
            }
            vals.resize(len as usize, V::ZERO);
            mark.resize(len as usize, 0u8);
            self.dense = Some((vals, mark));
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
            vals[key as usize] += v;
            mark[key as usize] = 1;
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
                self.acc.keys.try_reserve_exact(target - n).map_err(oom)?;
                self.acc.vals.try_reserve_exact(target - n).map_err(oom)?;
                self.acc.keys.resize(target, 0);
                self.acc.vals.resize(target, V::ZERO);
                self.sync_slot();
            }
            return Ok(());
        }
        if n == 0 {
            return Ok(());
        }
        self.stats.flushes += 1;
        if self.config.policy == Policy::Auto && !self.decided {
            self.decide(n);
            return Ok(());
        }
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
            self.acc.keys.try_reserve_exact(target - cap).map_err(oom)?;
            self.acc.vals.try_reserve_exact(target - cap).map_err(oom)?;
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
            let run = drain_dense(vals, mark, state.largest_kept());
            let dense_bytes = vals.len() * (std::mem::size_of::<V>() + 1);
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
        self.decided = true;
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

    /// Gives a finished workspace's arrays back, for the next use to fill without allocating.
    pub fn recycle(&mut self, done: Components<V>) {
        if let Stage::Inline(state) = &mut self.stage {
            state.give_back(Run { keys: done.keys, vals: done.vals });
        }
    }

    fn components(&mut self, run: Run<V>) -> Components<V> {
        self.decided = false;
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
