//! # nm-format: sparse tensor storage with N:M structured sparsity
//!
//! A [`Tensor`] is a shape, a [`Format`] and the arrays of each storage level. A format is an
//! ordered list of [`Level`]s, each storing one coordinate expression of one dimension
//! (`d`, `d floordiv b` or `d mod b`) with one [`LevelKind`]: dense, compressed, singleton, or
//! structured N:M. The usual formats are combinations:
//!
//! ```text
//! csr      (d0 : dense, d1 : compressed)
//! csc      (d1 : dense, d0 : compressed)
//! coo      (d0 : compressed(nonunique), d1 : singleton)
//! bcsr(2)  (d0 floordiv 2 : dense, d1 floordiv 2 : compressed, d0 mod 2 : dense, d1 mod 2 : dense)
//! nv24     (d0 : dense, d1 : structured[2, 4])
//! nm(2,4,8) (d0 floordiv 4 : dense, d1 floordiv 8 : dense, d0 mod 4 : structured[2, 4], d1 mod 8 : dense)
//! ```
//!
//! A 3×4 matrix in CSR, drawn:
//!
//! ```text
//!  [1 . 2 .]      level 0 dense(3):      rows 0 1 2
//!  [. . . .]      level 1 compressed:    pos = [0, 2, 2, 3]
//!  [. 3 . .]                             crd = [0, 2, 1]
//!                 values                    = [1, 2, 3]
//! ```
//!
//! Every way in — coordinates ([`Tensor::from_coordinates`]), dense arrays
//! ([`Tensor::from_dense`]), raw level arrays ([`Tensor::from_raw`]), conversion
//! ([`Tensor::convert`]) and files ([`io`]) — checks the format's invariants and returns a
//! typed error naming the level, position and value of the first violation. Nothing here
//! panics on bad data.
//!
//! N:M formats never drop a nonzero silently: converting into one fails unless the data fits
//! the pattern, and [`Tensor::prune`] makes it fit by magnitude, reporting what it dropped.
//!
//! ```
//! use nm_format::{Format, Tensor};
//! let dense = [1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0f64];
//! let a = Tensor::from_dense(&[3, 4], &dense, &Format::parse("csr", 2)?)?;
//! let b = a.convert(&Format::parse("nv24", 2)?)?; // each row has at most 2 nonzeros per 4
//! assert_eq!(b.to_dense()?, dense);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod any;
mod build;
mod error;
mod format;
pub mod generate;
pub mod io;
mod level;
mod nm;
pub mod parse;
mod storage;
mod tensor;
mod transpose;
mod validate;
mod value;
mod view;

#[cfg(feature = "proptest")]
pub mod strategy;

pub use any::AnyTensor;
pub use build::{CoordinateList, Duplicates, PruneReport};
pub use error::{FormatError, IoError, TensorError};
pub use format::{Format, Level, LevelExpr};
pub use level::{LevelKind, LevelProperties, metadata_bits};
pub use nm::NmParts;
pub use storage::{Indices, IndicesView, LevelStorage, LevelView, Metadata};
pub use tensor::{Components, Coords, Tensor};
pub use value::Value;
pub use view::TensorView;
