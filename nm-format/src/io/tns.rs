//! FROSTT `.tns`: one line per component, 1-based coordinates then the value; `#` starts a
//! comment. The format does not state the shape: it is the largest coordinate of each
//! dimension, unless a `# shape s1 s2 ...` comment (which [`write_tns`] writes) gives it —
//! the only way an empty tensor has one.

use std::io::Write;
use std::path::Path;

use super::lines::{ChunkError, Fields, lines, parse_chunks, parse_index, show};
use super::{ShapeSource, output_components, read_file, write_atomically, write_value};
use crate::build::CoordinateList;
use crate::error::IoError;
use crate::tensor::Tensor;
use crate::value::Value;

/// Reads a `.tns` file.
pub fn read_tns<T: Value>(path: impl AsRef<Path>) -> Result<CoordinateList<T>, IoError> {
    read_file(path.as_ref(), parse_tns::<T>)
}

struct Chunk<T> {
    /// Coordinates, `order` per entry.
    coords: Vec<usize>,
    values: Vec<T>,
}

/// Parses `.tns` text; the order is the number of fields of the first component line minus one.
/// A comment `# shape s1 s2 ...` before the first component (as [`write_tns`] writes) gives the
/// shape; otherwise it is the largest coordinate of each dimension.
pub fn parse_tns<T: Value>(text: &[u8]) -> Result<CoordinateList<T>, IoError> {
    parse_tns_shaped(text).map(|(list, _)| list)
}

/// [`parse_tns`], and whether a `# shape` comment gave the shape.
pub(crate) fn parse_tns_shaped<T: Value>(text: &[u8]) -> Result<(CoordinateList<T>, ShapeSource), IoError> {
    let err = |line: usize, message: String| IoError::Parse { path: None, line: line + 1, message };
    let is_skipped = |l: &[u8]| l.first() == Some(&b'#') || l.iter().all(u8::is_ascii_whitespace);
    let Some((first, line)) = lines(text).find(|(_, l)| !is_skipped(l)) else {
        // No component: an empty tensor where a `# shape` comment gives its order (as
        // [`write_tns`] writes an empty tensor), else nothing to read.
        return match declared_shape(text, usize::MAX, None).map_err(|(line, m)| err(line, m))? {
            Some((_, shape)) if !shape.is_empty() => Ok((CoordinateList::new(shape), ShapeSource::Declared)),
            _ => Err(err(0, "no components: expected lines of 1-based coordinates and a value".into())),
        };
    };
    let mut f = Fields::new(line);
    let fields = std::iter::from_fn(|| f.next_field()).count();
    if fields < 2 {
        return Err(err(first, format!("expected coordinates and a value, found {fields} field")));
    }
    let order = fields - 1;
    let declared = declared_shape(text, first, Some(order)).map_err(|(line, m)| err(line, m))?;
    // Each line an entry, held twice while the chunks are joined: coordinates and value.
    let count = super::lines::count_lines(text) as u128 + 1;
    let bytes = count * 2 * (order as u128 * 8 + std::mem::size_of::<T>() as u128);
    nm_runtime::memory::ensure_available(bytes, || format!("the {count} lines of a .tns file"))
        .map_err(|source| IoError::Tensor { path: None, source: source.into() })?;
    let chunks = parse_chunks(text, |chunk| -> Result<Chunk<T>, ChunkError> {
        let mut out =
            Chunk { coords: Vec::with_capacity(chunk.len() / 8), values: Vec::with_capacity(chunk.len() / 16) };
        for (i, line) in lines(chunk) {
            if is_skipped(line) {
                continue;
            }
            let mut f = Fields::new(line);
            for d in 0..order {
                let tok = f
                    .next_field()
                    .ok_or_else(|| (i, format!("expected {order} coordinates and a value, found {d} fields")))?;
                match parse_index(tok) {
                    Some(0) => {
                        return Err((i, format!("coordinate {} is 0; .tns coordinates start at 1", d + 1)));
                    }
                    Some(c) => out.coords.push(c - 1),
                    None => {
                        return Err((
                            i,
                            format!("expected coordinate {} (an integer >= 1), found `{}`", d + 1, show(tok)),
                        ));
                    }
                }
            }
            let tok = f
                .next_field()
                .ok_or_else(|| (i, format!("expected a value after {order} coordinates, found end of line")))?;
            out.values.push(super::lines::parse_value(tok, false).map_err(|m| (i, m))?);
            if let Some(tok) = f.next_field() {
                return Err((
                    i,
                    format!("unexpected `{}`: the first component line has {order} coordinates", show(tok)),
                ));
            }
        }
        Ok(out)
    })
    .map_err(|(line, message)| err(line, message))?;
    let mut list = CoordinateList::new(vec![0; order]);
    for chunk in &chunks {
        for (e, &v) in chunk.values.iter().enumerate() {
            for d in 0..order {
                let c = chunk.coords[e * order + d];
                list.coords[d].push(c);
                list.shape[d] = list.shape[d].max(c + 1);
            }
            list.values.push(v);
        }
    }
    if let Some((line, shape)) = declared {
        if let Some(d) = (0..order).find(|&d| list.shape[d] > shape[d]) {
            let message =
                format!("dimension {} has coordinate {} beyond the declared shape {shape:?}", d + 1, list.shape[d]);
            return Err(err(line, message));
        }
        list.shape = shape;
        return Ok((list, ShapeSource::Declared));
    }
    Ok((list, ShapeSource::Inferred))
}

/// The `# shape ...` comment among the lines before the first component, if any; with
/// `order`, it must list that many sizes.
fn declared_shape(text: &[u8], first: usize, order: Option<usize>) -> Result<Option<(usize, Vec<usize>)>, ChunkError> {
    for (i, line) in lines(text).take(first) {
        let mut f = Fields::new(line);
        if f.next_field() != Some(b"#") || f.next_field() != Some(b"shape") {
            continue;
        }
        let shape: Option<Vec<usize>> = std::iter::from_fn(|| f.next_field()).map(parse_index).collect();
        return match (shape, order) {
            (Some(s), Some(order)) if s.len() == order => Ok(Some((i, s))),
            (Some(s), None) if !s.is_empty() => Ok(Some((i, s))),
            (_, Some(order)) => {
                Err((i, format!("`# shape` must list {order} sizes, one per coordinate of the components")))
            }
            (_, None) => Err((i, "`# shape` must list one size per dimension (integers >= 0)".into())),
        };
    }
    Ok(None)
}

/// Writes a tensor as `.tns` (components in storage order; a `#` comment line records the
/// shape, since the format has no header).
pub fn write_tns<T: Value>(path: impl AsRef<Path>, tensor: &Tensor<T>) -> Result<(), IoError> {
    let list = output_components(tensor);
    write_atomically(path.as_ref(), |w: &mut dyn Write| {
        let dims: Vec<String> = list.shape.iter().map(usize::to_string).collect();
        writeln!(w, "# shape {}", dims.join(" "))?;
        for e in 0..list.len() {
            for d in 0..list.shape.len() {
                write!(w, "{} ", list.coords[d][e] + 1)?;
            }
            write_value(w, list.values[e])?;
            w.write_all(b"\n")?;
        }
        Ok(())
    })
}
