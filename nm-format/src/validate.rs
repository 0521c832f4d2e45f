//! `Tensor::from_raw`: a tensor from level arrays someone else built, with every invariant
//! checked and the first violation reported by level, position and value.

use crate::error::{Result, TensorError};
use crate::format::Format;
use crate::level::LevelKind;
use crate::storage::{IndicesView, LevelStorage, LevelView};
use crate::tensor::{Tensor, checked_product, component_coordinates, level_positions};
use crate::value::Value;
use crate::view::Levels;

impl<T: Value> Tensor<T> {
    /// Takes ownership of level arrays and values after checking every invariant listed on
    /// [`Tensor`]. Nothing is copied.
    pub fn from_raw(shape: Vec<usize>, format: Format, levels: Vec<LevelStorage>, values: Vec<T>) -> Result<Self> {
        let views = Levels::new(levels.iter().map(LevelStorage::view));
        validate(&shape, &format, views.as_slice(), &values)?;
        drop(views);
        Ok(Tensor { shape, format, levels, values })
    }
}

/// Checks every invariant listed on [`Tensor`] of arrays given as views, reporting the first
/// violation by level, position and value.
pub(crate) fn validate<T: Value>(shape: &[usize], format: &Format, levels: &[LevelView], values: &[T]) -> Result<()> {
    if shape.len() != format.order() {
        return Err(TensorError::OrderMismatch { format_order: format.order(), shape_order: shape.len() });
    }
    if levels.len() != format.levels().len() {
        return Err(TensorError::LevelCount { expected: format.levels().len(), actual: levels.len() });
    }
    checked_product(&format.padded_shape(shape), "the padded shape")?;
    let sizes = format.level_sizes(shape);
    let mut parents = 1usize;
    for (l, (level, storage)) in format.levels().iter().zip(levels).enumerate() {
        parents = check_level(l, level.kind, storage, sizes[l], parents)?;
    }
    if values.len() != parents {
        return Err(TensorError::ValuesLength { expected: parents, actual: values.len() });
    }
    check_singletons(format, levels)?;
    check_padding(shape, format, levels, values)
}

/// Checks level `l` below `parents` positions of the level above; returns its positions.
fn check_level(l: usize, kind: LevelKind, storage: &LevelView, size: usize, parents: usize) -> Result<usize> {
    let mismatch = || TensorError::LevelKindMismatch { level: l, expected: kind, found: storage.kind_name() };
    Ok(match (kind, *storage) {
        (LevelKind::Dense, LevelView::Dense { size: given }) => {
            check_size(l, size, given)?;
            parents.checked_mul(size).ok_or(TensorError::TooLarge { what: format!("level {l}") })?
        }
        (LevelKind::Compressed(props), LevelView::Compressed { pos, crd })
            if props.ordered && compressed_is_valid(pos, crd, parents, size, props.unique) =>
        {
            crd.len()
        }
        (LevelKind::Compressed(props), LevelView::Compressed { pos, crd }) => {
            let positions = check_pos(l, pos, parents)?;
            if crd.len() != positions {
                return Err(TensorError::CrdLength { level: l, expected: positions, actual: crd.len() });
            }
            for p in 0..parents {
                check_siblings(
                    l,
                    size,
                    props.ordered,
                    props.unique,
                    (pos.get(p)..pos.get(p + 1)).map(|q| (q, crd.get(q))),
                )?;
            }
            positions
        }
        (LevelKind::Singleton(_), LevelView::Singleton { crd }) => {
            if crd.len() != parents {
                return Err(TensorError::CrdLength { level: l, expected: parents, actual: crd.len() });
            }
            if let Some(q) = (0..parents).find(|&q| crd.get(q) >= size) {
                return Err(TensorError::CoordinateOutOfRange { level: l, position: q, coordinate: crd.get(q), size });
            }
            parents
        }
        (LevelKind::Structured { n, m }, LevelView::Structured { size: given, meta }) => {
            check_size(l, size, given)?;
            let per_block = n as usize;
            let positions = parents
                .checked_mul(size / m as usize * per_block)
                .ok_or(TensorError::TooLarge { what: format!("level {l}") })?;
            if meta.len() != positions {
                return Err(TensorError::MetadataLength { level: l, expected: positions, actual: meta.len() });
            }
            for q in 0..positions {
                let value = meta.get(q) as usize;
                if value >= m as usize {
                    return Err(TensorError::MetadataOutOfRange { level: l, position: q, value, m });
                }
                if q % per_block != 0 {
                    let previous = meta.get(q - 1) as usize;
                    if value <= previous {
                        return Err(TensorError::MetadataNotDistinct { level: l, position: q, value, previous });
                    }
                }
            }
            positions
        }
        (LevelKind::Band, LevelView::Band { pos, first }) => {
            let positions = check_pos(l, pos, parents)?;
            if first.len() != parents {
                return Err(TensorError::CrdLength { level: l, expected: parents, actual: first.len() });
            }
            // Each run's coordinates, `first[p]` onward, lie in the level.
            for p in 0..parents {
                let run = pos.get(p + 1) - pos.get(p);
                if first.get(p).checked_add(run).is_none_or(|end| end > size) {
                    return Err(TensorError::CoordinateOutOfRange {
                        level: l,
                        position: pos.get(p + 1).saturating_sub(1),
                        coordinate: first.get(p).saturating_add(run.saturating_sub(1)),
                        size,
                    });
                }
            }
            positions
        }
        _ => return Err(mismatch()),
    })
}

/// Checks a `pos` array below `parents` parent positions (its length, a first entry of 0,
/// no decrease); returns its positions.
fn check_pos(l: usize, pos: crate::storage::IndicesView, parents: usize) -> Result<usize> {
    if pos.len() != parents + 1 {
        return Err(TensorError::PosLength { level: l, expected: parents + 1, actual: pos.len() });
    }
    if pos.get(0) != 0 {
        return Err(TensorError::PosStart { level: l, value: pos.get(0) });
    }
    for p in 1..pos.len() {
        if pos.get(p) < pos.get(p - 1) {
            return Err(TensorError::PosNotMonotone {
                level: l,
                position: p,
                value: pos.get(p),
                previous: pos.get(p - 1),
            });
        }
    }
    Ok(pos.get(parents))
}

/// Ordered/unique singleton levels compare each position with the previous one when all
/// coordinates above are equal (they are siblings then).
fn check_singletons(format: &Format, levels: &[LevelView]) -> Result<()> {
    let kinds: Vec<LevelKind> = format.levels().iter().map(|l| l.kind).collect();
    if !kinds.iter().any(|k| matches!(k, LevelKind::Singleton(p) if p.ordered || p.unique)) {
        return Ok(());
    }
    let tree = level_positions(format, levels);
    for (l, kind) in kinds.iter().enumerate() {
        let (LevelKind::Singleton(props), LevelView::Singleton { crd }) = (kind, &levels[l]) else {
            continue;
        };
        for q in 1..crd.len() {
            // Are all coordinates above level l equal for positions q-1 and q?
            let (mut a, mut b, mut same) = (tree[l].parent(q - 1), tree[l].parent(q), true);
            for k in (0..l).rev() {
                if tree[k].coordinate(a) != tree[k].coordinate(b) {
                    same = false;
                    break;
                }
                (a, b) = (tree[k].parent(a), tree[k].parent(b));
            }
            if same {
                let (prev, cur) = (tree[l].coordinate(q - 1), tree[l].coordinate(q));
                check_pair(l, q, props.ordered, props.unique, prev, cur)?;
            }
        }
    }
    Ok(())
}

/// Positions outside the logical shape (block padding) must hold zero.
fn check_padding<T: Value>(shape: &[usize], format: &Format, levels: &[LevelView], values: &[T]) -> Result<()> {
    if format.padded_shape(shape) == shape {
        return Ok(());
    }
    let coords = component_coordinates(format, levels, values.len());
    for (q, &v) in values.iter().enumerate() {
        if v != T::ZERO && (0..shape.len()).any(|d| coords[d][q] >= shape[d]) {
            return Err(TensorError::NonzeroInPadding {
                coordinates: (0..shape.len()).map(|d| coords[d][q]).collect(),
                shape: shape.to_vec(),
                value: v.to_f64(),
            });
        }
    }
    Ok(())
}

/// Whether an ordered compressed level is valid, by a quick pass over its arrays as they are
/// stored (kernels' operands are checked on every call, so this pass is on their path); the
/// full check runs only to name what is wrong.
fn compressed_is_valid(pos: IndicesView, crd: IndicesView, parents: usize, size: usize, unique: bool) -> bool {
    match (pos, crd) {
        (IndicesView::U32(p), IndicesView::U32(c)) => sorted_segments(p, c, parents, size, unique),
        (IndicesView::U32(p), IndicesView::U64(c)) => sorted_segments(p, c, parents, size, unique),
        (IndicesView::U64(p), IndicesView::U32(c)) => sorted_segments(p, c, parents, size, unique),
        (IndicesView::U64(p), IndicesView::U64(c)) => sorted_segments(p, c, parents, size, unique),
    }
}

/// `pos` starts at 0, never decreases and ends at `crd`'s length; every segment of `crd` is
/// below `size` and increasing (strictly when `unique`).
fn sorted_segments<P: Copy + Into<u64>, C: Copy + Into<u64>>(
    pos: &[P],
    crd: &[C],
    parents: usize,
    size: usize,
    unique: bool,
) -> bool {
    if pos.len() != parents + 1 || pos[0].into() != 0 || pos[parents].into() != crd.len() as u64 {
        return false;
    }
    let size = size as u64;
    pos.windows(2).all(|w| {
        let (a, b) = (w[0].into(), w[1].into());
        if a > b || b > crd.len() as u64 {
            return false;
        }
        let segment = &crd[a as usize..b as usize];
        let in_order = if unique {
            segment.windows(2).fold(true, |ok, w| ok & (w[0].into() < w[1].into()))
        } else {
            segment.windows(2).fold(true, |ok, w| ok & (w[0].into() <= w[1].into()))
        };
        in_order && segment.last().is_none_or(|&last| last.into() < size)
    })
}

fn check_size(level: usize, expected: usize, actual: usize) -> Result<()> {
    if expected == actual { Ok(()) } else { Err(TensorError::LevelSize { level, expected, actual }) }
}

/// Coordinates of the positions below one parent: in range, sorted if ordered, no repeats if
/// unique (an unordered unique level is checked by sorting a copy).
fn check_siblings(
    level: usize,
    size: usize,
    ordered: bool,
    unique: bool,
    siblings: impl Iterator<Item = (usize, usize)>,
) -> Result<()> {
    let mut prev: Option<usize> = None;
    let mut unordered: Vec<(usize, usize)> = Vec::new();
    for (position, coordinate) in siblings {
        if coordinate >= size {
            return Err(TensorError::CoordinateOutOfRange { level, position, coordinate, size });
        }
        if ordered {
            if let Some(previous) = prev {
                check_pair(level, position, ordered, unique, previous, coordinate)?;
            }
            prev = Some(coordinate);
        } else if unique {
            unordered.push((coordinate, position));
        }
    }
    unordered.sort_unstable();
    if let Some(w) = unordered.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(TensorError::DuplicateCoordinate { level, position: w[0].1.max(w[1].1), coordinate: w[0].0 });
    }
    Ok(())
}

fn check_pair(
    level: usize,
    position: usize,
    ordered: bool,
    unique: bool,
    previous: usize,
    coordinate: usize,
) -> Result<()> {
    if ordered && coordinate < previous {
        return Err(TensorError::NotSorted { level, position, coordinate, previous });
    }
    if unique && coordinate == previous {
        return Err(TensorError::DuplicateCoordinate { level, position, coordinate });
    }
    Ok(())
}
