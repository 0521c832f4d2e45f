//! Matrix Market: `coordinate` and `array` layouts; `real`, `integer` and `pattern` fields;
//! `general`, `symmetric` and `skew-symmetric` storage.
//!
//! Reading expands symmetric storage (a mirrored entry for each off-diagonal one, negated for
//! skew-symmetric), gives pattern entries the value 1, and sums nothing: duplicates stay in the
//! coordinate list for the tensor builder to sum or reject. Array files are column-major, as
//! the standard says; their zeros are not listed. The standard's rules are enforced, each
//! breach an error naming its line: a symmetric or skew-symmetric file stores the lower
//! triangle only (an entry above the diagonal would otherwise be mirrored or summed with its
//! mirror), a skew-symmetric one no diagonal, an `integer` field integers (exactly
//! representable in the value type), and no finite value beyond the value type's range.

use std::io::Write;
use std::path::Path;

use rayon::prelude::*;

use super::lines::{
    ChunkError, Fields, chunk_bounds, collect_chunks, count_lines, lines, parse_chunks, parse_index, show,
};
use super::{output_components, read_file, write_atomically, write_value};
use crate::build::CoordinateList;
use crate::error::IoError;
use crate::tensor::Tensor;
use crate::value::Value;

/// `coordinate` (sparse triplets) or `array` (dense, column-major).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MtxLayout {
    /// One `i j [v]` line per stored entry.
    Coordinate,
    /// One value per line, column by column.
    Array,
}

/// The value field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MtxField {
    /// Floating point (`real` or `double`).
    Real,
    /// Integers.
    Integer,
    /// No values: every entry is 1.
    Pattern,
}

/// Which part of the matrix the file stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MtxSymmetry {
    /// Every entry.
    General,
    /// The lower triangle; `a(j,i) = a(i,j)`.
    Symmetric,
    /// The strict lower triangle; `a(j,i) = -a(i,j)`.
    SkewSymmetric,
}

/// The banner and size line of a Matrix Market file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtxHeader {
    /// Layout.
    pub layout: MtxLayout,
    /// Value field.
    pub field: MtxField,
    /// Symmetry.
    pub symmetry: MtxSymmetry,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Entries the file stores (before symmetric expansion).
    pub stored: usize,
}

/// A parsed Matrix Market file.
#[derive(Clone, Debug, PartialEq)]
pub struct MatrixMarket<T> {
    /// Banner and sizes.
    pub header: MtxHeader,
    /// The entries, symmetric storage expanded.
    pub data: CoordinateList<T>,
}

/// How to read what the standard does not allow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MtxOptions {
    /// Reads a symmetric or skew-symmetric file that stores entries on both sides of the
    /// diagonal (which the standard forbids: it stores the lower triangle) as scipy does:
    /// every off-diagonal entry mirrored, an entry and its mirror summed. Off by default: such
    /// a file is an error naming the first entry above the diagonal, since its meaning is a
    /// guess. `NMSPARSE_MTX_BOTH_TRIANGLES=1` turns it on for [`read_mtx`].
    pub both_triangles: bool,
}

impl MtxOptions {
    /// The options `NMSPARSE_MTX_BOTH_TRIANGLES` sets (`1` turns [`Self::both_triangles`] on).
    pub fn from_env() -> MtxOptions {
        MtxOptions { both_triangles: std::env::var("NMSPARSE_MTX_BOTH_TRIANGLES").is_ok_and(|v| v == "1") }
    }
}

/// Reads a Matrix Market file (with [`MtxOptions::from_env`]).
pub fn read_mtx<T: Value>(path: impl AsRef<Path>) -> Result<MatrixMarket<T>, IoError> {
    read_mtx_with(path, MtxOptions::from_env())
}

/// Reads a Matrix Market file with `options`.
pub fn read_mtx_with<T: Value>(path: impl AsRef<Path>, options: MtxOptions) -> Result<MatrixMarket<T>, IoError> {
    read_file(path.as_ref(), |text| parse_mtx_with::<T>(text, options))
}

/// Parses Matrix Market text (with [`MtxOptions::from_env`]).
pub fn parse_mtx<T: Value>(text: &[u8]) -> Result<MatrixMarket<T>, IoError> {
    parse_mtx_with(text, MtxOptions::from_env())
}

/// Parses Matrix Market text with `options`.
pub fn parse_mtx_with<T: Value>(text: &[u8], options: MtxOptions) -> Result<MatrixMarket<T>, IoError> {
    let err = |line: usize, message: String| IoError::Parse { path: None, line: line + 1, message };
    let mut all = lines(text);
    let (_, banner) = all.next().ok_or_else(|| err(0, "empty file: expected a `%%MatrixMarket` banner".into()))?;
    let (layout, field, symmetry) = parse_banner(banner).map_err(|m| err(0, m))?;

    // Comments, then the size line.
    let (size_line, size_text) = loop {
        match all.next() {
            None => {
                return Err(err(count_lines(text), "file ends before the size line".into()));
            }
            Some((_, l)) if l.first() == Some(&b'%') || l.iter().all(u8::is_ascii_whitespace) => {
                continue;
            }
            Some((i, l)) => break (i, l),
        }
    };
    let mut f = Fields::new(size_text);
    let mut size = |what: &str| -> Result<usize, IoError> {
        let tok =
            f.next_field().ok_or_else(|| err(size_line, format!("size line: expected {what}, found end of line")))?;
        parse_index(tok).ok_or_else(|| err(size_line, format!("size line: expected {what}, found `{}`", show(tok))))
    };
    let rows = size("the number of rows")?;
    let cols = size("the number of columns")?;
    let stored = match layout {
        MtxLayout::Coordinate => size("the number of entries")?,
        MtxLayout::Array => match symmetry {
            MtxSymmetry::General => rows.checked_mul(cols),
            MtxSymmetry::Symmetric => rows.checked_mul(rows + 1).map(|x| x / 2),
            MtxSymmetry::SkewSymmetric => rows.checked_mul(rows.saturating_sub(1)).map(|x| x / 2),
        }
        .ok_or_else(|| err(size_line, "array size overflows".into()))?,
    };
    if let Some(tok) = f.next_field() {
        return Err(err(size_line, format!("size line: unexpected `{}` after the sizes", show(tok))));
    }
    if symmetry != MtxSymmetry::General && rows != cols {
        return Err(err(size_line, format!("a {rows}×{cols} matrix cannot be symmetric")));
    }
    let header = MtxHeader { layout, field, symmetry, rows, cols, stored };

    // The body: everything after the size line.
    let body_start = line_start(text, size_line + 1);
    let body = &text[body_start..];
    let first = size_line + 1;
    // Each line becomes at most two entries (symmetric storage): row, column and value.
    let per_line = if symmetry == MtxSymmetry::General { 1 } else { 2 };
    let lines = count_lines(body) as u128 + 1;
    let bytes = lines * per_line * (16 + std::mem::size_of::<T>() as u128);
    nm_runtime::memory::ensure_available(bytes, || format!("the {lines} lines of entries of a Matrix Market file"))
        .map_err(|source| IoError::Tensor { path: None, source: source.into() })?;
    let data = match layout {
        MtxLayout::Coordinate => coordinate_body(body, &header, options),
        MtxLayout::Array => array_body(body, &header),
    }
    .map_err(|(line, message)| err(first + line, message))?;
    Ok(MatrixMarket { header, data })
}

fn line_start(text: &[u8], line: usize) -> usize {
    if line == 0 {
        return 0;
    }
    text.iter().enumerate().filter(|&(_, &b)| b == b'\n').nth(line - 1).map_or(text.len(), |(i, _)| i + 1)
}

fn parse_banner(line: &[u8]) -> Result<(MtxLayout, MtxField, MtxSymmetry), String> {
    let text = String::from_utf8_lossy(line).to_ascii_lowercase();
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.first() != Some(&"%%matrixmarket") {
        return Err(format!("expected a `%%MatrixMarket` banner, found `{}`", show(line)));
    }
    if words.len() != 5 {
        return Err(format!(
            "banner: expected `%%MatrixMarket matrix <layout> <field> <symmetry>`, found {} words",
            words.len()
        ));
    }
    if words[1] != "matrix" {
        return Err(format!("banner: only `matrix` objects are supported, found `{}`", words[1]));
    }
    let layout = match words[2] {
        "coordinate" => MtxLayout::Coordinate,
        "array" => MtxLayout::Array,
        w => {
            return Err(format!("banner: expected `coordinate` or `array`, found `{w}`"));
        }
    };
    let field = match words[3] {
        "real" | "double" => MtxField::Real,
        "integer" => MtxField::Integer,
        "pattern" if layout == MtxLayout::Coordinate => MtxField::Pattern,
        "pattern" => return Err("banner: `pattern` needs the `coordinate` layout".into()),
        "complex" => return Err("banner: `complex` matrices are not supported".into()),
        w => {
            return Err(format!("banner: expected `real`, `integer` or `pattern`, found `{w}`"));
        }
    };
    let symmetry = match words[4] {
        "general" => MtxSymmetry::General,
        "symmetric" => MtxSymmetry::Symmetric,
        "skew-symmetric" => MtxSymmetry::SkewSymmetric,
        "hermitian" => return Err("banner: `hermitian` matrices are not supported".into()),
        w => {
            return Err(format!("banner: expected `general`, `symmetric` or `skew-symmetric`, found `{w}`"));
        }
    };
    Ok((layout, field, symmetry))
}

fn is_skipped(line: &[u8]) -> bool {
    line.first() == Some(&b'%') || line.iter().all(u8::is_ascii_whitespace)
}

fn parse_value<T: Value>(field: MtxField, tok: Option<&[u8]>) -> Result<T, String> {
    let tok = tok.ok_or_else(|| "expected a value, found end of line".to_string())?;
    super::lines::parse_value(tok, field == MtxField::Integer)
}

/// Parses the entries straight into the output arrays: each chunk of lines gets a disjoint
/// slice sized for its line count (twice that for symmetric storage), and the slices are
/// closed up afterwards. No per-chunk buffers, no concatenation.
fn coordinate_body<T: Value>(
    body: &[u8],
    h: &MtxHeader,
    options: MtxOptions,
) -> Result<CoordinateList<T>, (usize, String)> {
    let bounds = chunk_bounds(body);
    let per_line = if h.symmetry == MtxSymmetry::General { 1 } else { 2 };
    let capacity: Vec<usize> = bounds
        .par_windows(2)
        .map(|w| (count_lines(&body[w[0]..w[1]]) + usize::from(body[w[1] - 1] != b'\n')) * per_line)
        .collect();
    let total: usize = capacity.iter().sum();
    let mut rows = vec![0usize; total];
    let mut cols = vec![0usize; total];
    let mut values = vec![T::ZERO; total];
    let mut slices = Vec::with_capacity(capacity.len());
    {
        let (mut r, mut c, mut v) = (&mut rows[..], &mut cols[..], &mut values[..]);
        for &n in &capacity {
            let (r0, r1) = r.split_at_mut(n);
            let (c0, c1) = c.split_at_mut(n);
            let (v0, v1) = v.split_at_mut(n);
            slices.push((r0, c0, v0));
            (r, c, v) = (r1, c1, v1);
        }
    }
    let results: Vec<Result<(usize, usize), ChunkError>> = slices
        .into_par_iter()
        .zip(bounds.par_windows(2))
        .map(|((r, c, v), w)| parse_coordinate_chunk(&body[w[0]..w[1]], h, options, r, c, v))
        .collect();
    let counts = collect_chunks(body, &bounds, results)?;
    let stored: usize = counts.iter().map(|&(s, _)| s).sum();
    if stored != h.stored {
        return Err(count_mismatch(body, h.stored, stored));
    }
    // Close up the gaps left by comments, blank lines and unmirrored diagonal entries.
    let (mut write, mut read) = (0, 0);
    for (&(_, written), &cap) in counts.iter().zip(&capacity) {
        if write != read {
            rows.copy_within(read..read + written, write);
            cols.copy_within(read..read + written, write);
            values.copy_within(read..read + written, write);
        }
        write += written;
        read += cap;
    }
    rows.truncate(write);
    cols.truncate(write);
    values.truncate(write);
    Ok(CoordinateList { shape: vec![h.rows, h.cols], coords: vec![rows, cols], values })
}

/// Parses one chunk into its slices; returns (entries in the file, components written).
fn parse_coordinate_chunk<T: Value>(
    chunk: &[u8],
    h: &MtxHeader,
    options: MtxOptions,
    rows: &mut [usize],
    cols: &mut [usize],
    values: &mut [T],
) -> Result<(usize, usize), ChunkError> {
    let (mut at, mut line, mut stored, mut n) = (0, 0, 0, 0);
    while at < chunk.len() {
        let end = chunk[at..].iter().position(|&b| b == b'\n').map_or(chunk.len(), |p| at + p);
        let text = &chunk[at..end];
        let entry: Option<(usize, usize, T)> = match fast_entry(text, h) {
            Some(e) => Some(e),
            None => slow_entry(text, line, h)?,
        };
        if let Some((r, c, v)) = entry {
            stored += 1;
            (rows[n], cols[n], values[n]) = (r, c, v);
            n += 1;
            match h.symmetry {
                MtxSymmetry::General => {}
                _ if r == c && h.symmetry == MtxSymmetry::SkewSymmetric => {
                    let message = format!("skew-symmetric matrix stores a diagonal entry ({}, {})", r + 1, c + 1);
                    return Err((line, message));
                }
                _ if r == c => {}
                sym if c > r && !options.both_triangles => {
                    let kind = if sym == MtxSymmetry::Symmetric { "symmetric" } else { "skew-symmetric" };
                    let message = format!(
                        "entry ({}, {}) is above the diagonal: a {kind} file stores the lower triangle only \
                         (NMSPARSE_MTX_BOTH_TRIANGLES=1 reads it as scipy does: every entry mirrored, an entry \
                         and its mirror summed)",
                        r + 1,
                        c + 1
                    );
                    return Err((line, message));
                }
                sym => {
                    (rows[n], cols[n]) = (c, r);
                    values[n] = if sym == MtxSymmetry::SkewSymmetric { -v } else { v };
                    n += 1;
                }
            }
        }
        at = end + 1;
        line += 1;
    }
    Ok((stored, n))
}

/// The common case, `row col [value]` with plain digits and single separators, parsed in one
/// pass; `None` for anything else (comments, blank lines, errors), which [`slow_entry`] handles.
#[inline]
fn fast_entry<T: Value>(line: &[u8], h: &MtxHeader) -> Option<(usize, usize, T)> {
    #[inline]
    fn digits(line: &[u8], at: &mut usize) -> Option<usize> {
        let start = *at;
        let mut v: usize = 0;
        while *at < line.len() && line[*at].is_ascii_digit() && *at - start < 19 {
            v = v * 10 + (line[*at] - b'0') as usize;
            *at += 1;
        }
        (*at > start).then_some(v)
    }
    #[inline]
    fn spaces(line: &[u8], at: &mut usize) -> bool {
        let start = *at;
        while *at < line.len() && matches!(line[*at], b' ' | b'\t') {
            *at += 1;
        }
        *at > start
    }
    let mut at = 0;
    let r = digits(line, &mut at)?;
    if !spaces(line, &mut at) {
        return None;
    }
    let c = digits(line, &mut at)?;
    if r == 0 || r > h.rows || c == 0 || c > h.cols {
        return None;
    }
    let v = if h.field == MtxField::Pattern {
        T::ONE
    } else {
        if !spaces(line, &mut at) {
            return None;
        }
        let start = at;
        while at < line.len() && !matches!(line[at], b' ' | b'\t' | b'\r') {
            at += 1;
        }
        // Integers of fewer digits than the significand holds (15 in f64, 7 in f32) are exact;
        // longer ones, and infinities, are checked on the slow path.
        let limit = T::MANTISSA_DIGITS as usize * 3 / 10;
        if h.field == MtxField::Integer
            && (at - start > limit || !line[start..at].iter().all(|b| b.is_ascii_digit() || *b == b'-'))
        {
            return None;
        }
        T::parse_bytes(&line[start..at]).filter(|v| v.to_f64().is_finite())?
    };
    while at < line.len() && matches!(line[at], b' ' | b'\t' | b'\r') {
        at += 1;
    }
    (at == line.len()).then_some((r - 1, c - 1, v))
}

/// One body line, with a precise message for whatever is wrong; `None` for comments and
/// blank lines.
fn slow_entry<T: Value>(line: &[u8], i: usize, h: &MtxHeader) -> Result<Option<(usize, usize, T)>, ChunkError> {
    if is_skipped(line) {
        return Ok(None);
    }
    let mut f = Fields::new(line);
    let mut index = |what: &str, limit: usize| -> Result<usize, ChunkError> {
        let tok = f.next_field().ok_or_else(|| (i, format!("expected a {what} index, found end of line")))?;
        let v = parse_index(tok).ok_or_else(|| (i, format!("expected a {what} index, found `{}`", show(tok))))?;
        if v == 0 || v > limit {
            return Err((i, format!("{what} index {v} is out of range 1..={limit}")));
        }
        Ok(v - 1)
    };
    let r = index("row", h.rows)?;
    let c = index("column", h.cols)?;
    let v: T =
        if h.field == MtxField::Pattern { T::ONE } else { parse_value(h.field, f.next_field()).map_err(|m| (i, m))? };
    if let Some(tok) = f.next_field() {
        return Err((i, format!("unexpected `{}` after the entry", show(tok))));
    }
    Ok(Some((r, c, v)))
}

/// The error for a body holding more or fewer entries than the size line declared.
fn count_mismatch(body: &[u8], declared: usize, found: usize) -> (usize, String) {
    if found < declared {
        let end = lines(body).count();
        (end, format!("file ends after {found} entries; the size line declares {declared}"))
    } else {
        let line = lines(body).filter(|(_, l)| !is_skipped(l)).nth(declared).map_or(0, |(i, _)| i);
        (line, format!("entry {} is beyond the {declared} the size line declares", declared + 1))
    }
}

fn array_body<T: Value>(body: &[u8], h: &MtxHeader) -> Result<CoordinateList<T>, (usize, String)> {
    let chunks = parse_chunks(body, |chunk| -> Result<Vec<T>, ChunkError> {
        let mut out = Vec::new();
        for (i, line) in lines(chunk) {
            if is_skipped(line) {
                continue;
            }
            let mut f = Fields::new(line);
            out.push(parse_value(h.field, f.next_field()).map_err(|m| (i, m))?);
            if let Some(tok) = f.next_field() {
                return Err((i, format!("unexpected `{}` after the value", show(tok))));
            }
        }
        Ok(out)
    })?;
    let found: usize = chunks.iter().map(Vec::len).sum();
    if found != h.stored {
        return Err(count_mismatch(body, h.stored, found));
    }
    let mut list = CoordinateList::new(vec![h.rows, h.cols]);
    let (mut r, mut c) = (0, 0);
    let first_row = |c: usize| match h.symmetry {
        MtxSymmetry::General => 0,
        MtxSymmetry::Symmetric => c,
        MtxSymmetry::SkewSymmetric => c + 1,
    };
    if h.rows > 0 {
        r = first_row(0);
    }
    for v in chunks.into_iter().flatten() {
        while r >= h.rows {
            c += 1;
            r = first_row(c);
        }
        if v != T::ZERO {
            list.push(&[r, c], v);
            if h.symmetry != MtxSymmetry::General && r != c {
                list.push(&[c, r], if h.symmetry == MtxSymmetry::SkewSymmetric { -v } else { v });
            }
        }
        r += 1;
    }
    Ok(list)
}

/// Writes an order-2 tensor: a dense one (row-major `dense` format) as `array real general`,
/// column-major as the standard says; any other as `coordinate real general` (components in
/// storage order; see `output_components` for which zeros are written).
pub fn write_mtx<T: Value>(path: impl AsRef<Path>, tensor: &Tensor<T>) -> Result<(), IoError> {
    if tensor.order() != 2 {
        return Err(IoError::Unsupported {
            message: format!("Matrix Market holds matrices; this tensor has order {} (write .tns)", tensor.order()),
        });
    }
    if *tensor.format() == crate::Format::dense(2) {
        let (rows, cols) = (tensor.shape()[0], tensor.shape()[1]);
        let values = tensor.values();
        return write_atomically(path.as_ref(), |w: &mut dyn Write| {
            writeln!(w, "%%MatrixMarket matrix array real general")?;
            writeln!(w, "% written by nm-format {}", env!("CARGO_PKG_VERSION"))?;
            writeln!(w, "{rows} {cols}")?;
            for c in 0..cols {
                for r in 0..rows {
                    write_value(w, values[r * cols + c])?;
                    w.write_all(b"\n")?;
                }
            }
            Ok(())
        });
    }
    let list = output_components(tensor);
    write_atomically(path.as_ref(), |w: &mut dyn Write| {
        writeln!(w, "%%MatrixMarket matrix coordinate real general")?;
        writeln!(w, "% written by nm-format {}", env!("CARGO_PKG_VERSION"))?;
        writeln!(w, "{} {} {}", list.shape[0], list.shape[1], list.len())?;
        for e in 0..list.len() {
            write!(w, "{} {} ", list.coords[0][e] + 1, list.coords[1][e] + 1)?;
            write_value(w, list.values[e])?;
            w.write_all(b"\n")?;
        }
        Ok(())
    })
}
