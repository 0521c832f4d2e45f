//! `Tensor<T>`: a shape, a format, the arrays of each level, and the values.

use std::ops::Range;

use smallvec::SmallVec;

use crate::error::{Result, TensorError};
use crate::format::{Format, LevelExpr};
use crate::level::LevelKind;
use crate::storage::{IndicesView, LevelStorage, LevelView, Metadata};
use crate::value::Value;
use crate::view::TensorView;

/// Coordinates of one component; inline up to order 4.
pub type Coords = SmallVec<[usize; 4]>;

/// A sparse (or dense) tensor stored in a [`Format`].
///
/// # Invariants
/// Every constructor checks them, so every `Tensor` value satisfies them:
/// - `levels[l]` has the kind of `format.levels()[l]`, and dense/structured sizes are the ones
///   the (padded) shape implies;
/// - compressed: `pos` has one entry per parent position plus one, starts at 0, never decreases,
///   and `crd` has `pos[last]` entries;
/// - every coordinate is below its level's size; ordered levels are sorted and unique levels
///   repeat no coordinate under one parent;
/// - structured N:M: one metadata entry per position, each `< M`, strictly increasing within
///   a block;
/// - `values` has one entry per position of the last level; positions in the padding that
///   makes blocks whole hold zero.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor<T> {
    pub(crate) shape: Vec<usize>,
    pub(crate) format: Format,
    pub(crate) levels: Vec<LevelStorage>,
    pub(crate) values: Vec<T>,
}

/// One level's map from a position to its parent position and its coordinate. Only a
/// compressed level needs an array for it (the parent of each position, expanded from `pos`);
/// the others compute both from the position, so dense levels cost no memory.
pub(crate) enum LevelPositions<'a> {
    Dense {
        size: usize,
    },
    Compressed {
        parent: Vec<usize>,
        crd: IndicesView<'a>,
    },
    Singleton {
        crd: IndicesView<'a>,
    },
    Structured {
        n: usize,
        m: usize,
        blocks: usize,
        meta: &'a Metadata,
    },
    /// A band level: each position's parent, and each parent's first coordinate less its
    /// first position (so a position's coordinate is `q + shift[parent]`).
    Band {
        parent: Vec<usize>,
        shift: Vec<isize>,
    },
}

impl LevelPositions<'_> {
    /// The parent position of position `q`.
    #[inline]
    pub fn parent(&self, q: usize) -> usize {
        match self {
            LevelPositions::Dense { size } => q / size,
            LevelPositions::Compressed { parent, .. } | LevelPositions::Band { parent, .. } => parent[q],
            LevelPositions::Singleton { .. } => q,
            LevelPositions::Structured { n, blocks, .. } => q / (n * blocks),
        }
    }

    /// The level coordinate of position `q`.
    #[inline]
    pub fn coordinate(&self, q: usize) -> usize {
        match self {
            LevelPositions::Dense { size } => q % size,
            LevelPositions::Compressed { crd, .. } | LevelPositions::Singleton { crd } => crd.get(q),
            LevelPositions::Structured { n, m, blocks, meta } => ((q / n) % blocks) * m + meta.get(q) as usize,
            LevelPositions::Band { parent, shift } => q.wrapping_add_signed(shift[parent[q]]),
        }
    }
}

impl<T: Value> Tensor<T> {
    /// The logical shape (before any block padding).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of dimensions.
    pub fn order(&self) -> usize {
        self.shape.len()
    }

    /// The storage format.
    pub fn format(&self) -> &Format {
        &self.format
    }

    /// The arrays of each level, outermost first.
    pub fn levels(&self) -> &[LevelStorage] {
        &self.levels
    }

    /// The stored values, indexed by the positions of the last level.
    pub fn values(&self) -> &[T] {
        &self.values
    }

    /// Takes the tensor apart into shape, format, level arrays and values (the inverse of
    /// [`Tensor::from_raw`]).
    pub fn into_raw(self) -> (Vec<usize>, Format, Vec<LevelStorage>, Vec<T>) {
        (self.shape, self.format, self.levels, self.values)
    }

    /// The tensor with its values moved, where they landed at an address the L1 way predictor
    /// aliases with the last level's coordinates of the same element size, which kernels read
    /// in step with them (see [`nm_runtime::memory::place_apart`]; BENCHMARKS.md, "Arrays
    /// written in step").
    pub(crate) fn with_values_placed(mut self) -> Self {
        if let Some(LevelStorage::Compressed { crd, .. } | LevelStorage::Singleton { crd }) = self.levels.last() {
            nm_runtime::memory::place_apart(&mut self.values, &[crd.peer()]);
        }
        self
    }

    /// Number of stored values (explicit zeros included, padding included).
    pub fn stored_len(&self) -> usize {
        self.values.len()
    }

    /// Number of stored values that are not zero.
    pub fn count_nonzeros(&self) -> usize {
        self.values.iter().filter(|&&v| v != T::ZERO).count()
    }

    /// The number of positions below parent position `parent` of level `l`.
    pub(crate) fn positions(&self, l: usize, parent: usize) -> Range<usize> {
        match &self.levels[l] {
            LevelStorage::Dense { size } => parent * size..(parent + 1) * size,
            LevelStorage::Compressed { pos, .. } | LevelStorage::Band { pos, .. } => {
                pos.get(parent)..pos.get(parent + 1)
            }
            LevelStorage::Singleton { .. } => parent..parent + 1,
            LevelStorage::Structured { size, .. } => {
                let per_parent = self.structured_positions_per_parent(l, *size);
                parent * per_parent..(parent + 1) * per_parent
            }
        }
    }

    fn structured_positions_per_parent(&self, l: usize, size: usize) -> usize {
        match self.format.levels()[l].kind {
            LevelKind::Structured { n, m } => size / m as usize * n as usize,
            _ => unreachable!("structured storage on a {} level", self.format.levels()[l].kind),
        }
    }

    /// The level coordinate of position `q` of level `l`, whose parent position is `parent`.
    #[inline]
    pub(crate) fn coordinate(&self, l: usize, parent: usize, q: usize) -> usize {
        match &self.levels[l] {
            LevelStorage::Dense { size } => q - parent * size,
            LevelStorage::Compressed { crd, .. } | LevelStorage::Singleton { crd } => crd.get(q),
            LevelStorage::Structured { size, meta } => {
                let LevelKind::Structured { n, m } = self.format.levels()[l].kind else { unreachable!() };
                let blocks = size / m as usize;
                ((q / n as usize) % blocks) * m as usize + meta.get(q) as usize
            }
            LevelStorage::Band { pos, first } => first.get(parent) + (q - pos.get(parent)),
        }
    }

    /// The arrays of each level, borrowed.
    pub(crate) fn level_views(&self) -> Vec<LevelView<'_>> {
        self.levels.iter().map(LevelStorage::view).collect()
    }

    /// The tensor read in place, as kernels read arrays another library owns.
    pub fn view(&self) -> TensorView<'_, T> {
        TensorView::of(self)
    }

    /// See [`component_coordinates`].
    pub(crate) fn component_coordinates(&self) -> Vec<Vec<usize>> {
        component_coordinates(&self.format, &self.level_views(), self.values.len())
    }

    /// Every stored component in storage order, as `(coordinates, value)`. Explicit zeros are
    /// included; positions in block padding (outside the logical shape) are not.
    pub fn iter(&self) -> Components<'_, T> {
        let mut it = Components {
            tensor: self,
            cursor: vec![0; self.levels.len()],
            end: vec![0; self.levels.len()],
            parent: vec![0; self.levels.len()],
            level_coords: vec![0; self.levels.len()],
            depth: 0,
        };
        let r = self.positions(0, 0);
        it.cursor[0] = r.start;
        it.end[0] = r.end;
        it
    }

    /// The tensor as a dense row-major array of its logical shape; components that a
    /// non-unique format stores twice are summed.
    pub fn to_dense(&self) -> Result<Vec<T>> {
        let len = checked_product(&self.shape, "the dense array")?;
        nm_runtime::memory::ensure_available(len as u128 * std::mem::size_of::<T>() as u128, || {
            format!("a dense {:?} array", self.shape)
        })?;
        let mut dense = Vec::new();
        dense
            .try_reserve_exact(len)
            .map_err(|_| TensorError::TooLarge { what: format!("a dense array of {len} values") })?;
        dense.resize(len, T::ZERO);
        if len == 0 {
            return Ok(dense);
        }
        let coords = self.component_coordinates();
        'next: for (q, &v) in self.values.iter().enumerate() {
            let mut linear = 0;
            for (d, &extent) in self.shape.iter().enumerate() {
                let c = coords[d][q];
                if c >= extent {
                    continue 'next;
                }
                linear = linear * extent + c;
            }
            dense[linear] += v;
        }
        Ok(dense)
    }

    /// The tensor's value at `coords` (zero when not stored; duplicates summed). Scans every
    /// stored component: for tests and small tensors, not for kernels.
    pub fn get(&self, coords: &[usize]) -> T {
        self.iter().filter(|(c, _)| c.as_slice() == coords).fold(T::ZERO, |acc, (_, v)| acc + v)
    }
}

/// Iterator over stored components; see [`Tensor::iter`].
pub struct Components<'a, T> {
    tensor: &'a Tensor<T>,
    cursor: Vec<usize>,
    end: Vec<usize>,
    parent: Vec<usize>,
    level_coords: Vec<usize>,
    depth: usize,
}

impl<T: Value> Iterator for Components<'_, T> {
    type Item = (Coords, T);

    fn next(&mut self) -> Option<Self::Item> {
        let t = self.tensor;
        let last = t.levels.len() - 1;
        loop {
            let l = self.depth;
            if self.cursor[l] < self.end[l] {
                let q = self.cursor[l];
                self.cursor[l] += 1;
                self.level_coords[l] = t.coordinate(l, self.parent[l], q);
                if l == last {
                    let mut coords: Coords = SmallVec::from_elem(0, t.order());
                    for (level, &lc) in t.format.levels().iter().zip(&self.level_coords) {
                        coords[level.expr.dim()] += match level.expr {
                            LevelExpr::FloorDiv(_, b) => lc * b,
                            _ => lc,
                        };
                    }
                    if coords.iter().zip(&t.shape).all(|(c, s)| c < s) {
                        return Some((coords, t.values[q]));
                    }
                } else {
                    self.depth += 1;
                    let r = t.positions(l + 1, q);
                    self.parent[l + 1] = q;
                    self.cursor[l + 1] = r.start;
                    self.end[l + 1] = r.end;
                }
            } else if l == 0 {
                return None;
            } else {
                self.depth -= 1;
            }
        }
    }
}

/// Parent and coordinate of every position of every level, level by level. Positions of a
/// level are visited in increasing order when their parents are, so the position is the
/// index into these arrays.
pub(crate) fn level_positions<'a>(format: &Format, levels: &[LevelView<'a>]) -> Vec<LevelPositions<'a>> {
    let mut parents = 1usize;
    let mut out = Vec::with_capacity(levels.len());
    for (l, storage) in levels.iter().enumerate() {
        let (lp, positions) = match *storage {
            LevelView::Dense { size } => (LevelPositions::Dense { size: size.max(1) }, parents * size),
            LevelView::Compressed { pos, crd } => {
                (LevelPositions::Compressed { parent: parent_of_positions(pos, parents), crd }, crd.len())
            }
            LevelView::Singleton { crd } => (LevelPositions::Singleton { crd }, parents),
            LevelView::Band { pos, first } => {
                let parent = parent_of_positions(pos, parents);
                let shift = (0..parents).map(|p| first.get(p) as isize - pos.get(p) as isize).collect();
                let positions = parent.len();
                (LevelPositions::Band { parent, shift }, positions)
            }
            LevelView::Structured { size, meta } => {
                let LevelKind::Structured { n, m } = format.levels()[l].kind else { unreachable!() };
                let (n, m) = (n as usize, m as usize);
                let blocks = (size / m).max(1);
                (LevelPositions::Structured { n, m, blocks, meta }, meta.len())
            }
        };
        parents = positions;
        out.push(lp);
    }
    out
}

/// The parent position of each position of a level whose `pos` array gives each of
/// `parents` parent positions its range (a compressed or band level).
fn parent_of_positions(pos: IndicesView<'_>, parents: usize) -> Vec<usize> {
    let mut parent = Vec::with_capacity(pos.get(parents));
    for p in 0..parents {
        parent.extend(std::iter::repeat_n(p, pos.get(p + 1) - pos.get(p)));
    }
    parent
}

/// The tensor coordinates of the component at each of the `last` positions of the last
/// level, as one array per dimension (padding positions included).
pub(crate) fn component_coordinates(format: &Format, levels: &[LevelView], last: usize) -> Vec<Vec<usize>> {
    let tree = level_positions(format, levels);
    let mut coords = vec![vec![0usize; last]; format.order()];
    // Walk from the last level up, carrying each component's position at level l.
    let mut at: Vec<usize> = (0..last).collect();
    for l in (0..levels.len()).rev() {
        let level = &format.levels()[l];
        let dim = &mut coords[level.expr.dim()];
        let lp = &tree[l];
        for (c, q) in dim.iter_mut().zip(at.iter_mut()) {
            let lc = lp.coordinate(*q);
            *c += match level.expr {
                LevelExpr::Dim(_) | LevelExpr::Mod(..) => lc,
                LevelExpr::FloorDiv(_, b) => lc * b,
            };
            *q = lp.parent(*q);
        }
    }
    coords
}

/// Product of a shape, or a `TooLarge` error naming `what`.
pub(crate) fn checked_product(shape: &[usize], what: &str) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &s| acc.checked_mul(s))
        .ok_or_else(|| TensorError::TooLarge { what: what.to_string() })
}
