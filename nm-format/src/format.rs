//! `Format`: ordered levels plus the map from tensor dimensions to levels.

use std::fmt;

use crate::error::FormatError;
use crate::level::{LevelKind, LevelProperties};

/// The coordinate a level stores, as a function of one tensor dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LevelExpr {
    /// The dimension's coordinate itself.
    Dim(usize),
    /// `d floordiv b`: the block number of a blocked dimension.
    FloorDiv(usize, usize),
    /// `d mod b`: the offset inside the block.
    Mod(usize, usize),
}

impl LevelExpr {
    /// The dimension this expression reads.
    pub fn dim(&self) -> usize {
        match *self {
            LevelExpr::Dim(d) | LevelExpr::FloorDiv(d, _) | LevelExpr::Mod(d, _) => d,
        }
    }

    /// Applies the expression to a dimension coordinate.
    #[inline]
    pub fn apply(&self, coordinate: usize) -> usize {
        match *self {
            LevelExpr::Dim(_) => coordinate,
            LevelExpr::FloorDiv(_, b) => coordinate / b,
            LevelExpr::Mod(_, b) => coordinate % b,
        }
    }
}

impl fmt::Display for LevelExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LevelExpr::Dim(d) => write!(f, "d{d}"),
            LevelExpr::FloorDiv(d, b) => write!(f, "d{d} floordiv {b}"),
            LevelExpr::Mod(d, b) => write!(f, "d{d} mod {b}"),
        }
    }
}

/// One level of a format: what it stores, and which coordinate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Level {
    /// The level's storage kind.
    pub kind: LevelKind,
    /// The coordinate it stores.
    pub expr: LevelExpr,
}

/// A storage format for tensors of a fixed order.
///
/// # Invariants
/// Checked by [`Format::new`]; every `Format` value satisfies them:
/// - the order is 1 to [`Format::MAX_ORDER`];
/// - every dimension `0..order` is stored either by exactly one `Dim(d)` level, or by exactly one
///   `FloorDiv(d, b)` level followed (not necessarily directly) by one `Mod(d, b)` level with
///   the same `b > 0`;
/// - a singleton level's parent is a compressed or singleton level;
/// - every level below a non-unique level is a singleton;
/// - a structured `N:M` level has `1 <= N <= M <= 65536`, and if it stores `d mod b`, `M`
///   divides `b`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Format {
    order: usize,
    levels: Vec<Level>,
}

impl Format {
    /// The largest order a format stores: far beyond any tensor in use (FROSTT's go to 5), and
    /// small enough that everything sized by the order stays small.
    pub const MAX_ORDER: usize = 64;

    /// Builds a format, checking the invariants above.
    pub fn new(order: usize, levels: Vec<Level>) -> Result<Self, FormatError> {
        let invalid = |message: String| Err(FormatError::Invalid { message });
        check_order(order)?;
        for (l, level) in levels.iter().enumerate() {
            let d = level.expr.dim();
            if d >= order {
                return invalid(format!("level {l} reads dimension d{d} of a {order}-dimensional tensor"));
            }
            match level.expr {
                LevelExpr::FloorDiv(_, 0) | LevelExpr::Mod(_, 0) => {
                    return invalid(format!("level {l} uses a block size of 0"));
                }
                _ => {}
            }
            match level.kind {
                LevelKind::Singleton(_) => {
                    let parent_ok =
                        l > 0 && matches!(levels[l - 1].kind, LevelKind::Compressed(_) | LevelKind::Singleton(_));
                    if !parent_ok {
                        return invalid(format!(
                            "level {l} is a singleton, whose parent must be a compressed or singleton level"
                        ));
                    }
                }
                LevelKind::Band if !matches!(level.expr, LevelExpr::Dim(_)) => {
                    return invalid(format!(
                        "level {l} is a band level of `{}`: a band stores a whole dimension",
                        level.expr
                    ));
                }
                LevelKind::Structured { n, m } => {
                    if n == 0 || n > m || m > 65536 {
                        return invalid(format!("level {l} is structured {n}:{m}; need 1 <= N <= M <= 65536"));
                    }
                    if let LevelExpr::Mod(_, b) = level.expr
                        && b % m as usize != 0
                    {
                        return invalid(format!(
                            "level {l} is structured {n}:{m} over `{}`, whose size {b} is not a multiple of {m}",
                            level.expr
                        ));
                    }
                }
                _ => {}
            }
            if l > 0 && !levels[l - 1].kind.is_unique() && !matches!(level.kind, LevelKind::Singleton(_)) {
                return invalid(format!("level {l} follows the non-unique level {}, so it must be a singleton", l - 1));
            }
        }
        for d in 0..order {
            let uses: Vec<(usize, LevelExpr)> =
                levels.iter().enumerate().filter(|(_, lv)| lv.expr.dim() == d).map(|(l, lv)| (l, lv.expr)).collect();
            match uses.as_slice() {
                [(_, LevelExpr::Dim(_))] => {}
                [(_, LevelExpr::FloorDiv(_, b1)), (_, LevelExpr::Mod(_, b2))] if b1 == b2 => {}
                [] => return invalid(format!("dimension d{d} is not stored by any level")),
                _ => {
                    return invalid(format!(
                        "dimension d{d} must be stored by one `d{d}` level, or by `d{d} floordiv b` \
                         followed by `d{d} mod b`"
                    ));
                }
            }
        }
        Ok(Self { order, levels })
    }

    /// The tensor order (number of dimensions) this format stores.
    pub fn order(&self) -> usize {
        self.order
    }

    /// The levels, outermost first.
    pub fn levels(&self) -> &[Level] {
        &self.levels
    }

    /// Parses a format string; see [`crate::parse`] for the grammar.
    pub fn parse(text: &str, order: usize) -> Result<Self, FormatError> {
        crate::parse::parse_format(text, order)
    }

    /// All levels dense, in dimension order (row-major).
    pub fn dense(order: usize) -> Self {
        Self::by_letters(&vec![LevelKind::Dense; order], None).expect("dense is valid")
    }

    /// Every level compressed, in dimension order (CSF; CSR's big brother `dcsr` for order 2).
    pub fn csf(order: usize) -> Self {
        Self::by_letters(&vec![LevelKind::COMPRESSED; order], None).expect("csf is valid")
    }

    /// Dense rows, compressed columns.
    pub fn csr() -> Self {
        Self::by_letters(&[LevelKind::Dense, LevelKind::COMPRESSED], None).expect("csr is valid")
    }

    /// Dense columns, compressed rows.
    pub fn csc() -> Self {
        Self::by_letters(&[LevelKind::Dense, LevelKind::COMPRESSED], Some(&[1, 0])).expect("csc is valid")
    }

    /// Coordinate list: a non-unique compressed level, then singletons.
    pub fn coo(order: usize) -> Self {
        let mut kinds = Vec::with_capacity(order);
        for l in 0..order {
            kinds.push(match l {
                0 if order == 1 => LevelKind::COMPRESSED,
                0 => LevelKind::Compressed(LevelProperties::ORDERED_NONUNIQUE),
                l if l + 1 == order => LevelKind::SINGLETON,
                _ => LevelKind::Singleton(LevelProperties::ORDERED_NONUNIQUE),
            });
        }
        Self::by_letters(&kinds, None).expect("coo is valid")
    }

    /// Block CSR with square `b×b` dense blocks: `(i floordiv b : dense, j floordiv b :
    /// compressed, i mod b : dense, j mod b : dense)`.
    pub fn bcsr(b: usize) -> Result<Self, FormatError> {
        Self::new(
            2,
            vec![
                Level { kind: LevelKind::Dense, expr: LevelExpr::FloorDiv(0, b) },
                Level { kind: LevelKind::COMPRESSED, expr: LevelExpr::FloorDiv(1, b) },
                Level { kind: LevelKind::Dense, expr: LevelExpr::Mod(0, b) },
                Level { kind: LevelKind::Dense, expr: LevelExpr::Mod(1, b) },
            ],
        )
    }

    /// Element-wise 2:4 along the last dimension (NVIDIA's sparse tensor core pattern, Triton's
    /// "NV24"): every other dimension dense, then a structured 2:4 level, so the storage is the
    /// values (half the last dimension) and the packed 2-bit metadata.
    pub fn nv24(order: usize) -> Self {
        let mut kinds = vec![LevelKind::Dense; order];
        kinds[order - 1] = LevelKind::Structured { n: 2, m: 4 };
        Self::by_letters(&kinds, None).expect("nv24 is valid")
    }

    /// Vector-wise N:M of NM-SpMM for a `k×n` matrix: in every window of `m` rows and every group
    /// of `l` columns, `n` rows are kept.
    ///
    /// Levels: `(d0 floordiv m : dense, d1 floordiv l : dense, d0 mod m : structured[n, m],
    /// d1 mod l : dense)`. The values are the kept length-`l` row vectors, window by window and
    /// group by group; the metadata is the index matrix D (which row of the window each kept
    /// vector is), one entry per (window, group, kept slot). [`crate::Tensor::nm_parts`] lays
    /// them out as the paper's B′ (k·N/M × n) and D (k·N/M × n/L).
    pub fn nm(n: u32, m: u32, l: usize) -> Result<Self, FormatError> {
        if l == 0 {
            return Err(FormatError::Invalid { message: "nm(N,M,L) needs L >= 1".into() });
        }
        Self::new(
            2,
            vec![
                Level { kind: LevelKind::Dense, expr: LevelExpr::FloorDiv(0, m as usize) },
                Level { kind: LevelKind::Dense, expr: LevelExpr::FloorDiv(1, l) },
                Level { kind: LevelKind::Structured { n, m }, expr: LevelExpr::Mod(0, m as usize) },
                Level { kind: LevelKind::Dense, expr: LevelExpr::Mod(1, l) },
            ],
        )
    }

    /// One level per dimension with the given kinds; `mode_order[l]` is the dimension stored by
    /// level `l` (identity when `None`), as in taco's `ds:1,0`.
    pub fn by_letters(kinds: &[LevelKind], mode_order: Option<&[usize]>) -> Result<Self, FormatError> {
        let order = kinds.len();
        let identity: Vec<usize> = (0..order).collect();
        let modes = mode_order.unwrap_or(&identity);
        if modes.len() != order {
            return Err(FormatError::Invalid {
                message: format!("mode ordering has {} entries for {order} levels", modes.len()),
            });
        }
        let levels = kinds.iter().zip(modes).map(|(&kind, &d)| Level { kind, expr: LevelExpr::Dim(d) }).collect();
        Self::new(order, levels)
    }

    /// Whether any level is structured N:M.
    pub fn is_structured(&self) -> bool {
        self.levels.iter().any(|l| matches!(l.kind, LevelKind::Structured { .. }))
    }

    /// The multiple each dimension is padded to so that every block is whole: the block size
    /// `b` of a blocked dimension, `M` for a `Dim(d)` structured level, else 1.
    pub fn padding_multiple(&self, d: usize) -> usize {
        self.levels
            .iter()
            .filter(|l| l.expr.dim() == d)
            .map(|l| match (l.expr, l.kind) {
                (LevelExpr::FloorDiv(_, b), _) | (LevelExpr::Mod(_, b), _) => b,
                (LevelExpr::Dim(_), LevelKind::Structured { m, .. }) => m as usize,
                _ => 1,
            })
            .max()
            .unwrap_or(1)
    }

    /// The padded shape: each dimension rounded up to its [`padding_multiple`](Self::padding_multiple).
    pub fn padded_shape(&self, shape: &[usize]) -> Vec<usize> {
        shape
            .iter()
            .enumerate()
            .map(|(d, &s)| {
                let b = self.padding_multiple(d);
                s.div_ceil(b) * b
            })
            .collect()
    }

    /// The number of coordinates of each level for a tensor of this (logical) shape.
    pub fn level_sizes(&self, shape: &[usize]) -> Vec<usize> {
        let padded = self.padded_shape(shape);
        self.levels
            .iter()
            .map(|l| match l.expr {
                LevelExpr::Dim(d) => padded[d],
                LevelExpr::FloorDiv(d, b) => padded[d] / b,
                LevelExpr::Mod(_, b) => b,
            })
            .collect()
    }

    /// `(N, M, L)` when this is exactly `nm(N,M,L)`.
    pub fn nm_params(&self) -> Option<(u32, u32, usize)> {
        match self.levels.as_slice() {
            [_, _, Level { kind: LevelKind::Structured { n, m }, .. }, Level { expr: LevelExpr::Mod(1, l), .. }] => {
                let (n, m, l) = (*n, *m, *l);
                (Format::nm(n, m, l).ok().as_ref() == Some(self)).then_some((n, m, l))
            }
            _ => None,
        }
    }

    /// A short name when the format is one of the named ones (`csr`, `coo`, ...).
    pub fn name(&self) -> Option<String> {
        let o = self.order;
        let named: [(&str, Option<Format>); 8] = [
            ("dense", Some(Format::dense(o))),
            ("csr", (o == 2).then(Format::csr)),
            ("csc", (o == 2).then(Format::csc)),
            ("dcsr", (o == 2).then(|| Format::csf(2))),
            ("dcsc", (o == 2).then(|| Format::by_letters(&[LevelKind::COMPRESSED; 2], Some(&[1, 0])).expect("dcsc"))),
            ("coo", Some(Format::coo(o))),
            ("csf", (o > 2).then(|| Format::csf(o))),
            ("nv24", Some(Format::nv24(o))),
        ];
        if let Some((name, _)) = named.iter().find(|(_, f)| f.as_ref() == Some(self)) {
            return Some((*name).to_string());
        }
        if let Some((n, m, l)) = self.nm_params() {
            return Some(format!("nm({n},{m},{l})"));
        }
        if let Some(&Level { expr: LevelExpr::FloorDiv(0, b), .. }) = self.levels.first()
            && Format::bcsr(b).ok().as_ref() == Some(self)
        {
            return Some(format!("bcsr({b})"));
        }
        None
    }
}

/// Prints the general map syntax, which [`Format::parse`] reads back:
/// `(d0, d1) -> (d0 : dense, d1 : compressed)`.
impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = (0..self.order).map(|d| format!("d{d}")).collect();
        let levels: Vec<String> = self.levels.iter().map(|l| format!("{} : {}", l.expr, l.kind)).collect();
        write!(f, "({}) -> ({})", dims.join(", "), levels.join(", "))
    }
}

/// Refuses an order no format has: 0 (a scalar is not stored in levels) or above
/// [`Format::MAX_ORDER`].
pub(crate) fn check_order(order: usize) -> Result<(), FormatError> {
    if order == 0 {
        return Err(FormatError::Invalid { message: "a format needs at least one dimension".into() });
    }
    if order > Format::MAX_ORDER {
        return Err(FormatError::Invalid {
            message: format!("an order of {order} is above the largest supported, {}", Format::MAX_ORDER),
        });
    }
    Ok(())
}
