//! What a workspace is asked to be ([`Policy`], [`Config`]), what it reports ([`Stats`]) and
//! how it fails ([`IsmError`]).

use std::fmt;
use std::str::FromStr;

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
    /// they fall on at least [`Config::DENSE_AFTER`] per coordinate (their distinct
    /// coordinates estimated, not combined; at least [`Config::DENSE_EARLY`] in the first
    /// 128th turns it dense at once) and the dense array fits
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
    /// Components per distinct coordinate in its early look (a sixteenth of the decision's
    /// sample) from which `auto` turns dense at once. Coordinates repeat more as products
    /// accumulate, so twice the decision's threshold this early says what the decision would;
    /// on the shared matrices' outer products the early look turned dense only where the
    /// decision does too, at half of those (the ones that repeat most; BENCHMARKS.md,
    /// "Outer-product SpGEMM").
    pub const DENSE_EARLY: usize = 2 * Self::DENSE_AFTER;

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
