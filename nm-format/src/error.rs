//! Error types: one enum per concern, each variant naming what is wrong and where.

use std::path::PathBuf;

use crate::level::LevelKind;

/// A format string that does not parse, or a format whose levels break an invariant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The text does not parse; `offset..offset+len` (bytes) is the offending part.
    #[error("{}", crate::parse::render_error(input, *offset, *len, message))]
    Parse {
        /// The whole format string.
        input: String,
        /// Byte offset of the offending text.
        offset: usize,
        /// Its length in bytes (at least 1).
        len: usize,
        /// What was expected.
        message: String,
    },
    /// The levels parse but do not make a format (see [`crate::Format`]'s invariants).
    #[error("invalid format: {message}")]
    Invalid {
        /// Which invariant is broken.
        message: String,
    },
}

/// A tensor that cannot be built: bad storage arrays, bad coordinates, or data that does not
/// fit the requested format.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TensorError {
    /// The shape's order differs from the format's.
    #[error("shape has {shape_order} dimensions but the format stores {format_order}")]
    OrderMismatch {
        /// Dimensions in the format.
        format_order: usize,
        /// Dimensions in the shape.
        shape_order: usize,
    },
    /// A shape whose element count overflows `usize`.
    #[error("{what} is too large to address")]
    TooLarge {
        /// What overflowed.
        what: String,
    },
    /// Raw storage has the wrong number of levels.
    #[error("format has {expected} levels but {actual} level arrays were given")]
    LevelCount {
        /// Levels in the format.
        expected: usize,
        /// Levels given.
        actual: usize,
    },
    /// Raw storage of the wrong kind for a level.
    #[error("level {level}: format says {expected}, storage given is {found}")]
    LevelKindMismatch {
        /// The level.
        level: usize,
        /// Its kind in the format.
        expected: LevelKind,
        /// The kind of storage given.
        found: &'static str,
    },
    /// A dense or structured level whose stored size differs from the format's.
    #[error("level {level}: size {actual}, but the shape and format need {expected}")]
    LevelSize {
        /// The level.
        level: usize,
        /// Size implied by shape and format.
        expected: usize,
        /// Size given.
        actual: usize,
    },
    /// `pos` must have one entry per parent position plus one.
    #[error("level {level}: pos has length {actual}, expected {expected} (parent positions + 1)")]
    PosLength {
        /// The level.
        level: usize,
        /// Expected length.
        expected: usize,
        /// Actual length.
        actual: usize,
    },
    /// `pos[0]` must be 0.
    #[error("level {level}: pos[0] is {value}, must be 0")]
    PosStart {
        /// The level.
        level: usize,
        /// The value found.
        value: usize,
    },
    /// `pos` must not decrease.
    #[error("level {level}: pos[{position}] = {value} is less than pos[{}] = {previous}", position - 1)]
    PosNotMonotone {
        /// The level.
        level: usize,
        /// Index into `pos`.
        position: usize,
        /// `pos[position]`.
        value: usize,
        /// `pos[position - 1]`.
        previous: usize,
    },
    /// `crd` must have one entry per position.
    #[error("level {level}: crd has length {actual}, but the level has {expected} positions")]
    CrdLength {
        /// The level.
        level: usize,
        /// Positions of the level.
        expected: usize,
        /// Length of `crd`.
        actual: usize,
    },
    /// A level coordinate at or beyond the level's size.
    #[error("level {level}: coordinate {coordinate} at position {position} is out of range 0..{size}")]
    CoordinateOutOfRange {
        /// The level.
        level: usize,
        /// The position holding it.
        position: usize,
        /// The coordinate.
        coordinate: usize,
        /// The level's size.
        size: usize,
    },
    /// Coordinates of an ordered level that decrease under one parent.
    #[error("level {level}: coordinate {coordinate} at position {position} follows {previous}; the level is ordered")]
    NotSorted {
        /// The level.
        level: usize,
        /// The position holding the smaller coordinate.
        position: usize,
        /// The coordinate there.
        coordinate: usize,
        /// The coordinate before it.
        previous: usize,
    },
    /// A coordinate repeated under one parent on a unique level.
    #[error("level {level}: coordinate {coordinate} repeated at position {position}; the level is unique")]
    DuplicateCoordinate {
        /// The level.
        level: usize,
        /// The position holding the repeat.
        position: usize,
        /// The coordinate.
        coordinate: usize,
    },
    /// Structured metadata must have one entry per position.
    #[error("level {level}: N:M metadata has {actual} entries, the level has {expected} positions")]
    MetadataLength {
        /// The level.
        level: usize,
        /// Positions.
        expected: usize,
        /// Metadata entries.
        actual: usize,
    },
    /// A metadata entry `>= M`.
    #[error("level {level}: N:M metadata {value} at position {position} is not below M = {m}")]
    MetadataOutOfRange {
        /// The level.
        level: usize,
        /// Position of the entry.
        position: usize,
        /// The entry.
        value: usize,
        /// Block length.
        m: u32,
    },
    /// Metadata of one block that repeats or decreases.
    #[error(
        "level {level}: N:M metadata {value} at position {position} repeats or precedes {previous} \
         in its block; kept offsets must be distinct and increasing"
    )]
    MetadataNotDistinct {
        /// The level.
        level: usize,
        /// Position of the entry.
        position: usize,
        /// The entry.
        value: usize,
        /// The entry before it in the same block.
        previous: usize,
    },
    /// Values must have one entry per position of the last level.
    #[error("values has length {actual}, the last level has {expected} positions")]
    ValuesLength {
        /// Positions of the last level.
        expected: usize,
        /// Values given.
        actual: usize,
    },
    /// A stored nonzero in the padding added to make blocks whole.
    #[error("nonzero value {value} stored at {coordinates:?}, outside the logical shape {shape:?} (in block padding)")]
    NonzeroInPadding {
        /// Its coordinates.
        coordinates: Vec<usize>,
        /// The logical shape.
        shape: Vec<usize>,
        /// The value.
        value: f64,
    },
    /// A coordinate list whose arrays disagree in length.
    #[error("coordinate array of dimension {dim} has {actual} entries, values has {expected}")]
    CoordinatesLength {
        /// The dimension.
        dim: usize,
        /// Number of values.
        expected: usize,
        /// Number of coordinates.
        actual: usize,
    },
    /// A component outside the shape.
    #[error("entry {entry}: coordinate {coordinate} of dimension {dim} is out of range 0..{size}")]
    OutOfShape {
        /// Index of the entry.
        entry: usize,
        /// The dimension.
        dim: usize,
        /// The coordinate.
        coordinate: usize,
        /// The dimension's size.
        size: usize,
    },
    /// The same coordinates given twice when duplicates are rejected.
    #[error("duplicate entry at {coordinates:?}")]
    DuplicateEntry {
        /// The coordinates.
        coordinates: Vec<usize>,
    },
    /// A dense array whose length is not the product of the shape.
    #[error("dense array has {actual} elements, shape {shape:?} needs {expected}")]
    DenseLength {
        /// The shape.
        shape: Vec<usize>,
        /// Its element count.
        expected: usize,
        /// Elements given.
        actual: usize,
    },
    /// Data with more than N distinct nonzero coordinates in one block of a structured level.
    #[error(
        "level {level} is structured {n}:{m}, but the block starting at {block_start:?} has {found} \
         nonzero coordinates (prune to make it fit)"
    )]
    DoesNotFitPattern {
        /// The structured level.
        level: usize,
        /// Kept per block.
        n: u32,
        /// Block length.
        m: u32,
        /// Nonzero coordinates found in the block.
        found: usize,
        /// Tensor coordinates of the block's first element.
        block_start: Vec<usize>,
    },
    /// Data with more than one coordinate under one parent of a singleton level.
    #[error("level {level} is a singleton, but the entries at {coordinates:?} give it two children under one parent")]
    SingletonCannotHold {
        /// The singleton level.
        level: usize,
        /// Coordinates of the second child.
        coordinates: Vec<usize>,
    },
    /// An operation that needs another format (e.g. `nm_parts` on a CSR tensor).
    #[error("{operation} needs a tensor in {needed}, this one is in {actual}")]
    WrongFormat {
        /// What was asked.
        operation: &'static str,
        /// The format it needs.
        needed: String,
        /// The tensor's format.
        actual: String,
    },
    /// A tensor of another shape than the one declared for it.
    #[error("{what} has shape {actual:?}, declared {expected:?}")]
    ShapeMismatch {
        /// Which tensor.
        what: String,
        /// The declared shape.
        expected: Vec<usize>,
        /// Its shape.
        actual: Vec<usize>,
    },
}

/// An error reading or writing a Matrix Market or FROSTT file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// The operating system refused.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Malformed content.
    #[error("{}line {line}: {message}", path_prefix(path))]
    Parse {
        /// The file, when reading one.
        path: Option<PathBuf>,
        /// 1-based line number.
        line: usize,
        /// What was expected and what was found.
        message: String,
    },
    /// Well-formed content that makes no tensor in the requested format.
    #[error("{}{source}", path_prefix(path))]
    Tensor {
        /// The file, when reading one.
        path: Option<PathBuf>,
        /// The underlying problem.
        source: TensorError,
    },
    /// A request the format cannot express (e.g. writing a 3-D tensor to Matrix Market).
    #[error("{message}")]
    Unsupported {
        /// What is unsupported.
        message: String,
    },
}

fn path_prefix(path: &Option<PathBuf>) -> String {
    path.as_ref().map_or(String::new(), |p| format!("{}: ", p.display()))
}

/// Shortcut for results carrying a [`TensorError`].
pub type Result<T, E = TensorError> = std::result::Result<T, E>;

impl From<nm_runtime::memory::NotAvailable> for TensorError {
    fn from(e: nm_runtime::memory::NotAvailable) -> Self {
        TensorError::TooLarge { what: e.what }
    }
}
