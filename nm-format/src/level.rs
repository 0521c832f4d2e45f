//! Level kinds: what positions and coordinates one storage level holds.
//!
//! A tensor's storage is a tree of levels. Level `l` turns a *parent position* `p` (a position
//! of level `l-1`; level 0 has the single parent position 0) into a range of *positions* of its
//! own, and gives each position a *level coordinate*:
//!
//! | kind | arrays | `positions(p)` | `coordinate(q)` |
//! |---|---|---|---|
//! | dense(size) | none | `p·size .. (p+1)·size` | `q - p·size` |
//! | compressed | `pos`, `crd` | `pos[p] .. pos[p+1]` | `crd[q]` |
//! | singleton | `crd` | `p .. p+1` | `crd[q]` |
//! | structured N:M (size s, `B = s/M` blocks) | `meta` | `p·B·N .. (p+1)·B·N` | `(q/N mod B)·M + meta[q]` |
//! | band | `pos`, `first` | `pos[p] .. pos[p+1]` | `first[p] + (q - pos[p])` |
//!
//! A band level stores each parent's coordinates as one run, from its first stored coordinate
//! to its last, zeros inside the run included: the coordinates are implied, so a banded matrix
//! (a stencil's, a finite-difference one's) is read without a coordinate array.
//!
//! The values array is indexed by the positions of the last level.

use std::fmt;

/// Properties of a compressed or singleton level, named rather than positional.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelProperties {
    /// Coordinates below one parent position are strictly (if also unique) or weakly increasing.
    pub ordered: bool,
    /// No two positions below one parent position share a coordinate.
    pub unique: bool,
}

impl LevelProperties {
    /// Ordered and unique: the default for every named format except COO.
    pub const ORDERED_UNIQUE: Self = Self { ordered: true, unique: true };
    /// Ordered, duplicates allowed: the first levels of COO.
    pub const ORDERED_NONUNIQUE: Self = Self { ordered: true, unique: false };
}

impl Default for LevelProperties {
    fn default() -> Self {
        Self::ORDERED_UNIQUE
    }
}

/// What a storage level is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LevelKind {
    /// Every coordinate `0..size` is present; stores nothing.
    Dense,
    /// Coordinates of each parent position in `crd[pos[p]..pos[p+1]]`.
    Compressed(LevelProperties),
    /// Exactly one coordinate per parent position, in `crd[p]` (COO's inner levels).
    Singleton(LevelProperties),
    /// Structured N:M: the level's coordinates are cut into blocks of `m`; every block of every
    /// parent position keeps exactly `n` children, whose offsets inside the block are the
    /// packed metadata (⌈log2 m⌉ bits each, strictly increasing within a block).
    Structured {
        /// Kept children per block.
        n: u32,
        /// Block length.
        m: u32,
    },
    /// Each parent position's coordinates are one contiguous run (its band): positions
    /// `pos[p]..pos[p+1]` hold coordinates `first[p]`, `first[p] + 1`, …
    Band,
}

impl LevelKind {
    /// Compressed, ordered and unique (CSR's second level).
    pub const COMPRESSED: Self = LevelKind::Compressed(LevelProperties::ORDERED_UNIQUE);
    /// Singleton, ordered and unique (COO's last level).
    pub const SINGLETON: Self = LevelKind::Singleton(LevelProperties::ORDERED_UNIQUE);

    /// Whether the level may repeat a coordinate below one parent position.
    pub fn is_unique(&self) -> bool {
        match self {
            LevelKind::Dense | LevelKind::Structured { .. } | LevelKind::Band => true,
            LevelKind::Compressed(p) | LevelKind::Singleton(p) => p.unique,
        }
    }

    /// Whether coordinates below one parent position are sorted.
    pub fn is_ordered(&self) -> bool {
        match self {
            LevelKind::Dense | LevelKind::Structured { .. } | LevelKind::Band => true,
            LevelKind::Compressed(p) | LevelKind::Singleton(p) => p.ordered,
        }
    }

    /// Whether every parent position owns a fixed number of positions (no `pos` array), so
    /// positions exist whether or not a component is stored there.
    pub fn is_fixed_size(&self) -> bool {
        matches!(self, LevelKind::Dense | LevelKind::Structured { .. })
    }
}

impl fmt::Display for LevelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let props = |f: &mut fmt::Formatter<'_>, name: &str, p: &LevelProperties| {
            let mut extra = Vec::new();
            if !p.unique {
                extra.push("nonunique");
            }
            if !p.ordered {
                extra.push("nonordered");
            }
            if extra.is_empty() { write!(f, "{name}") } else { write!(f, "{name}({})", extra.join(", ")) }
        };
        match self {
            LevelKind::Dense => write!(f, "dense"),
            LevelKind::Compressed(p) => props(f, "compressed", p),
            LevelKind::Singleton(p) => props(f, "singleton", p),
            LevelKind::Structured { n, m } => write!(f, "structured[{n}, {m}]"),
            LevelKind::Band => write!(f, "band"),
        }
    }
}

/// Bits needed for one N:M metadata entry: ⌈log2 m⌉.
pub fn metadata_bits(m: u32) -> u32 {
    if m <= 1 { 0 } else { 32 - (m - 1).leading_zeros() }
}
