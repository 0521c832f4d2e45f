//! Reading and writing Matrix Market (`.mtx`) and FROSTT (`.tns`) files.
//!
//! Readers take the whole file into memory and parse its body in parallel, one chunk of
//! lines per task. Every malformed input is an [`IoError::Parse`] with the 1-based line number
//! and what was expected there. Writers go to a temporary file beside the target and rename
//! it into place, so a failed write never leaves a half-written file behind.

mod lines;
mod mtx;
mod tns;

use std::io::Write;
use std::path::{Path, PathBuf};

pub use mtx::{
    MatrixMarket, MtxField, MtxHeader, MtxLayout, MtxOptions, MtxSymmetry, parse_mtx, parse_mtx_with, read_mtx,
    read_mtx_with, write_mtx,
};
pub use tns::{parse_tns, read_tns, write_tns};

use crate::build::{CoordinateList, Duplicates};
use crate::error::IoError;
use crate::format::Format;
use crate::tensor::Tensor;
use crate::value::Value;

/// Reads a `.mtx` or `.tns` file (chosen by extension) into a tensor of `format`;
/// duplicates are summed, symmetric storage is expanded.
pub fn read_tensor<T: Value>(path: impl AsRef<Path>, format_text: &str) -> Result<Tensor<T>, IoError> {
    let path = path.as_ref();
    let list = read_coordinates::<T>(path)?;
    let format = Format::parse(format_text, list.shape.len())
        .map_err(|e| IoError::Unsupported { message: format!("format for {}: {e}", path.display()) })?;
    Tensor::from_coordinates(&list, &format, Duplicates::Sum)
        .map_err(|source| IoError::Tensor { path: Some(path.to_path_buf()), source })
}

/// Reads the components of a `.mtx` or `.tns` file (chosen by extension).
pub fn read_coordinates<T: Value>(path: impl AsRef<Path>) -> Result<CoordinateList<T>, IoError> {
    let path = path.as_ref();
    match extension(path).as_deref() {
        Some("mtx") => read_mtx(path).map(|m| m.data),
        Some("tns") => read_tns(path),
        _ => Err(IoError::Unsupported {
            message: format!("{}: unknown file type (expected .mtx or .tns)", path.display()),
        }),
    }
}

/// Where a file's shape comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeSource {
    /// Stated by the file: a `.mtx` header, a `.tns` `# shape` comment. Authoritative.
    Declared,
    /// The smallest that holds the coordinates (a `.tns` file without `# shape`): FROSTT
    /// files do not state their shape, so a larger size given elsewhere may extend it.
    Inferred,
}

/// [`read_coordinates`], and where the shape came from.
pub fn read_coordinates_shaped<T: Value>(path: impl AsRef<Path>) -> Result<(CoordinateList<T>, ShapeSource), IoError> {
    let path = path.as_ref();
    match extension(path).as_deref() {
        Some("tns") => read_file(path, tns::parse_tns_shaped::<T>),
        _ => read_coordinates(path).map(|list| (list, ShapeSource::Declared)),
    }
}

/// Writes a tensor to a `.mtx` (order 2) or `.tns` file, chosen by extension.
pub fn write_tensor<T: Value>(path: impl AsRef<Path>, tensor: &Tensor<T>) -> Result<(), IoError> {
    let path = path.as_ref();
    match extension(path).as_deref() {
        Some("mtx") => write_mtx(path, tensor),
        Some("tns") => write_tns(path, tensor),
        _ => Err(IoError::Unsupported {
            message: format!("{}: unknown file type (expected .mtx or .tns)", path.display()),
        }),
    }
}

fn extension(path: &Path) -> Option<String> {
    path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase())
}

/// Reads the file at `path` and parses its bytes, naming the file in any error.
pub(crate) fn read_file<R>(path: &Path, parse: impl FnOnce(&[u8]) -> Result<R, IoError>) -> Result<R, IoError> {
    let bytes = std::fs::read(path).map_err(|source| IoError::Io { path: path.to_path_buf(), source })?;
    parse(&bytes).map_err(|e| match e {
        IoError::Parse { line, message, .. } => IoError::Parse { path: Some(path.to_path_buf()), line, message },
        IoError::Tensor { source, .. } => IoError::Tensor { path: Some(path.to_path_buf()), source },
        other => other,
    })
}

/// The components a file should hold: every stored component, except the zeros that dense
/// and N:M levels store structurally (a CSR matrix keeps its explicit zeros; a dense or
/// `nv24` one writes its nonzeros). Only fixed-size levels below the last compressed or
/// singleton level make values for coordinates nobody stored: CSR's dense rows do not.
pub(crate) fn output_components<T: Value>(tensor: &Tensor<T>) -> CoordinateList<T> {
    let mut list = tensor.to_coordinates();
    let levels = tensor.format().levels();
    let below = levels.iter().rposition(|l| !l.kind.is_fixed_size()).map_or(0, |l| l + 1);
    let structural_zeros = levels[below..].iter().any(|l| l.kind.is_fixed_size());
    if structural_zeros {
        let keep: Vec<bool> = list.values.iter().map(|&v| v != T::ZERO).collect();
        for c in &mut list.coords {
            *c = c.iter().zip(&keep).filter(|(_, k)| **k).map(|(&x, _)| x).collect();
        }
        list.values.retain(|&v| v != T::ZERO);
    }
    list
}

/// Writes `contents` through a temporary file in the same directory, then renames it over
/// `path`.
pub(crate) fn write_atomically(
    path: &Path,
    contents: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), IoError> {
    let io_err = |source| IoError::Io { path: path.to_path_buf(), source };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    let tmp: PathBuf = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let file = std::fs::File::create(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        contents(&mut w)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io_err)
}

/// Formats a value so that it reads back exactly: plain decimal in a readable range,
/// scientific otherwise.
pub(crate) fn write_value<T: Value>(w: &mut dyn Write, v: T) -> std::io::Result<()> {
    let a = v.abs().to_f64();
    if a == 0.0 || (1e-4..1e15).contains(&a) || !a.is_finite() { write!(w, "{v}") } else { write!(w, "{v:e}") }
}
