//! Line-oriented parsing shared by the readers: fields of a line, and a body split into
//! chunks of whole lines parsed in parallel.

use rayon::prelude::*;

/// The whitespace-separated fields of one line.
pub(crate) struct Fields<'a> {
    line: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    pub fn new(line: &'a [u8]) -> Self {
        Self { line, at: 0 }
    }

    #[inline]
    pub fn next_field(&mut self) -> Option<&'a [u8]> {
        let l = self.line;
        while self.at < l.len() && matches!(l[self.at], b' ' | b'\t' | b'\r') {
            self.at += 1;
        }
        if self.at == l.len() {
            return None;
        }
        let start = self.at;
        while self.at < l.len() && !matches!(l[self.at], b' ' | b'\t' | b'\r') {
            self.at += 1;
        }
        Some(&l[start..self.at])
    }
}

/// A decimal non-negative integer (an optional `+` allowed); `None` on anything else or
/// overflow.
#[inline]
pub(crate) fn parse_index(field: &[u8]) -> Option<usize> {
    let digits = field.strip_prefix(b"+").unwrap_or(field);
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut v: usize = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + d as usize;
    }
    Some(v)
}

/// A value field of a file: a decimal or scientific literal, `inf`, `infinity` or `nan` (in
/// any case, signed). A finite literal beyond the range of `T` (`1e400`; `1e39` read as
/// `f32`) is an error, not an infinity; with `integer`, the field must be an integer that `T`
/// holds exactly (beyond 2^53 an `f64` would round it).
pub(crate) fn parse_value<T: crate::value::Value>(field: &[u8], integer: bool) -> Result<T, String> {
    let text = std::str::from_utf8(field).map_err(|_| format!("expected a value, found `{}`", show(field)))?;
    if integer {
        let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("expected an integer value, found `{}`", show(field)));
        }
        let exact = text.parse::<i128>().ok().and_then(|n| {
            let v = T::parse_text(text)?;
            let back = v.to_f64();
            (back.is_finite() && back as i128 == n).then_some(v)
        });
        return exact
            .ok_or_else(|| format!("integer value {} is not exactly representable in {}", show(field), T::NAME));
    }
    let v = T::parse_text(text).ok_or_else(|| format!("expected a value, found `{}`", show(field)))?;
    if v.to_f64().is_infinite() && !text.to_ascii_lowercase().contains("inf") {
        return Err(format!("value {} overflows {} (largest finite: {:e})", show(field), T::NAME, T::MAX.to_f64()));
    }
    Ok(v)
}

/// Shows a field in a message, shortened and printable: bytes that are not UTF-8 as `\u{fffd}`
/// and control characters escaped (`\u{1b}`, `\t`), so that a binary file named as a matrix
/// cannot send escape sequences to the terminal that prints the error.
pub(crate) fn show(field: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(&field[..field.len().min(40)])
        .chars()
        .flat_map(|c| if c.is_control() { c.escape_default().collect::<Vec<_>>() } else { vec![c] })
        .collect();
    if field.len() > 40 { format!("{s}...") } else { s }
}

/// The lines of `text` with their 0-based index: `\n`-separated, a final line without `\n`
/// included.
pub(crate) fn lines(text: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let empty = text.is_empty();
    body.split(|&b| b == b'\n').enumerate().filter(move |_| !empty)
}

pub(crate) fn count_lines(text: &[u8]) -> usize {
    text.iter().filter(|&&b| b == b'\n').count()
}

/// A parse failure inside a chunk: line index within the chunk and message.
pub(crate) type ChunkError = (usize, String);

/// Byte offsets that cut `body` into chunks of whole lines, a few per thread:
/// `bounds[k]..bounds[k+1]` is chunk `k`.
pub(crate) fn chunk_bounds(body: &[u8]) -> Vec<usize> {
    let target = (body.len() / (rayon::current_num_threads() * 4)).max(1 << 16);
    let mut bounds = vec![0usize];
    let mut at = 0;
    while at < body.len() {
        let mut end = (at + target).min(body.len());
        while end < body.len() && body[end - 1] != b'\n' {
            end += 1;
        }
        bounds.push(end);
        at = end;
    }
    bounds
}

/// Runs `parse` on each chunk of `body` in parallel. On failure, returns the 0-based line
/// index within `body` and the message of the first failing chunk.
pub(crate) fn parse_chunks<A: Send>(
    body: &[u8],
    parse: impl Fn(&[u8]) -> Result<A, ChunkError> + Sync,
) -> Result<Vec<A>, (usize, String)> {
    let bounds = chunk_bounds(body);
    let results: Vec<Result<A, ChunkError>> = bounds.par_windows(2).map(|w| parse(&body[w[0]..w[1]])).collect();
    collect_chunks(body, &bounds, results)
}

/// The chunks' results in order, or the first failure with its line index within `body`.
pub(crate) fn collect_chunks<A>(
    body: &[u8],
    bounds: &[usize],
    results: Vec<Result<A, ChunkError>>,
) -> Result<Vec<A>, (usize, String)> {
    let mut out = Vec::with_capacity(results.len());
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(a) => out.push(a),
            Err((line, message)) => return Err((count_lines(&body[..bounds[i]]) + line, message)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn shown_fields_are_printable() {
        assert_eq!(super::show(b"1.5e3"), "1.5e3");
        assert_eq!(super::show(b"\x1b[2Jx\ty\r"), "\\u{1b}[2Jx\\ty\\r");
        assert_eq!(super::show(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(super::show("é".repeat(30).as_bytes()), format!("{}...", "é".repeat(20)));
    }
}
