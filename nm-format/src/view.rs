//! `TensorView`: a tensor whose arrays someone else owns, read in place.
//!
//! Kernels only read their operands, so an operand need not be a [`Tensor`]: a view of a
//! `Tensor`, or of the arrays of another library (scipy's CSR, a numpy array) that satisfy
//! the same invariants, runs without a copy. A view of foreign arrays is checked as
//! [`Tensor::from_raw`] checks owned ones.

use crate::error::Result;
use crate::format::Format;
use crate::storage::{LevelStorage, LevelView};
use crate::tensor::Tensor;
use crate::validate::validate;
use crate::value::Value;

/// A shape, a format, borrowed level arrays and borrowed values, with every invariant of
/// [`Tensor`]. Everything is borrowed (levels inline up to four), so a view is copied
/// without allocating: kernels take one per operand per call.
#[derive(Clone, Debug)]
pub struct TensorView<'a, T> {
    shape: &'a [usize],
    format: &'a Format,
    levels: Levels<'a>,
    values: &'a [T],
    owner: Option<&'a Tensor<T>>,
}

impl<'a, T: Value> TensorView<'a, T> {
    /// Borrows arrays after checking every invariant listed on [`Tensor`].
    pub fn new(
        shape: &'a [usize],
        format: &'a Format,
        levels: impl IntoIterator<Item = LevelView<'a>>,
        values: &'a [T],
    ) -> Result<Self> {
        let levels = Levels::new(levels);
        validate(shape, format, levels.as_slice(), values)?;
        Ok(TensorView { shape, format, levels, values, owner: None })
    }

    pub(crate) fn of(t: &'a Tensor<T>) -> Self {
        TensorView {
            shape: t.shape(),
            format: t.format(),
            levels: Levels::new(t.levels().iter().map(LevelStorage::view)),
            values: t.values(),
            owner: Some(t),
        }
    }

    /// The logical shape (before any block padding).
    pub fn shape(&self) -> &'a [usize] {
        self.shape
    }

    /// Number of dimensions.
    pub fn order(&self) -> usize {
        self.shape.len()
    }

    /// The storage format.
    pub fn format(&self) -> &'a Format {
        self.format
    }

    /// The arrays of each level, outermost first.
    pub fn levels(&self) -> &[LevelView<'a>] {
        self.levels.as_slice()
    }

    /// The stored values, indexed by the positions of the last level.
    pub fn values(&self) -> &'a [T] {
        self.values
    }

    /// The [`Tensor`] this view was taken of ([`Tensor::view`]); `None` for foreign arrays.
    pub fn tensor(&self) -> Option<&'a Tensor<T>> {
        self.owner
    }

    /// An owned copy (no copy when the view is of a [`Tensor`]: that tensor, borrowed).
    pub fn to_tensor(&self) -> std::borrow::Cow<'a, Tensor<T>> {
        match self.owner {
            Some(t) => std::borrow::Cow::Borrowed(t),
            None => std::borrow::Cow::Owned(Tensor {
                shape: self.shape.to_vec(),
                format: self.format.clone(),
                levels: self.levels.as_slice().iter().map(LevelView::to_storage).collect::<Vec<LevelStorage>>(),
                values: self.values.to_vec(),
            }),
        }
    }
}

/// The levels of a view: inline up to four (every named format), so copying a view does not
/// allocate. A plain enum rather than a `SmallVec`, whose associated item type would make
/// `TensorView` invariant in its lifetime: a view of a long-lived tensor must pass where a
/// shorter one is expected.
// The inline variant is the point: boxing it would allocate on every copy of a view.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub(crate) enum Levels<'a> {
    Inline([LevelView<'a>; 4], usize),
    Heap(Vec<LevelView<'a>>),
}

impl<'a> Levels<'a> {
    pub(crate) fn new(levels: impl IntoIterator<Item = LevelView<'a>>) -> Self {
        let mut inline = [LevelView::Dense { size: 0 }; 4];
        let mut it = levels.into_iter();
        for n in 0..4 {
            match it.next() {
                Some(level) => inline[n] = level,
                None => return Levels::Inline(inline, n),
            }
        }
        match it.next() {
            None => Levels::Inline(inline, 4),
            Some(fifth) => Levels::Heap(inline.into_iter().chain(std::iter::once(fifth)).chain(it).collect()),
        }
    }

    pub(crate) fn as_slice(&self) -> &[LevelView<'a>] {
        match self {
            Levels::Inline(levels, n) => &levels[..*n],
            Levels::Heap(levels) => levels,
        }
    }
}
