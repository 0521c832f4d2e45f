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
/// [`Tensor`].
#[derive(Clone, Debug)]
pub struct TensorView<'a, T> {
    shape: Vec<usize>,
    format: Format,
    levels: Vec<LevelView<'a>>,
    values: &'a [T],
    owner: Option<&'a Tensor<T>>,
}

impl<'a, T: Value> TensorView<'a, T> {
    /// Borrows arrays after checking every invariant listed on [`Tensor`].
    pub fn new(shape: Vec<usize>, format: Format, levels: Vec<LevelView<'a>>, values: &'a [T]) -> Result<Self> {
        validate(&shape, &format, &levels, values)?;
        Ok(TensorView { shape, format, levels, values, owner: None })
    }

    pub(crate) fn of(t: &'a Tensor<T>) -> Self {
        TensorView {
            shape: t.shape().to_vec(),
            format: t.format().clone(),
            levels: t.level_views(),
            values: t.values(),
            owner: Some(t),
        }
    }

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
    pub fn levels(&self) -> &[LevelView<'a>] {
        &self.levels
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
                shape: self.shape.clone(),
                format: self.format.clone(),
                levels: self.levels.iter().map(LevelView::to_storage).collect::<Vec<LevelStorage>>(),
                values: self.values.to_vec(),
            }),
        }
    }
}
