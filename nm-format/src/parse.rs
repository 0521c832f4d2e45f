//! The format-string parser.
//!
//! ```text
//! format  := named | letters | map
//! named   := dense | csr | csc | dcsr | dcsc | coo | csf | nv24 | bcsr(B) | nm(N,M,L)
//! letters := [dsuqc]+ (':' INT (',' INT)*)?        taco: d dense, s compressed, u compressed
//!                                                   non-unique, q singleton, c singleton non-unique;
//!                                                   the list is the dimension of each level
//! map     := '(' NAME (',' NAME)* ')' '->' '(' level (',' level)* ')'
//! level   := NAME ('floordiv' INT | 'mod' INT)? ':' kind
//! kind    := dense | compressed props? | singleton props? | structured '[' INT ',' INT ']'
//! props   := '(' ('nonunique' | 'nonordered') (',' ...)* ')'
//! ```
//! Named formats win over letters (`csc` is CSC, not singleton-compressed-singleton).
//! Errors point at the offending character.

use crate::error::FormatError;
use crate::format::{Format, Level, LevelExpr};
use crate::level::{LevelKind, LevelProperties};

/// Renders a parse error: `message`, then `input`, then carets under bytes
/// `offset..offset+len` (counted in characters, so multi-byte text lines up). Shared by every
/// nmsparse parser.
pub fn render_error(input: &str, offset: usize, len: usize, message: &str) -> String {
    let start = offset.min(input.len());
    let end = (start + len).min(input.len());
    let col = input.get(..start).map_or(start, |s| s.chars().count());
    let width = input.get(start..end).map_or(1, |s| s.chars().count()).max(1);
    format!("{message}\n  {input}\n  {}{}", " ".repeat(col), "^".repeat(width))
}

/// Parses `text` as a format for tensors of `order` dimensions.
pub fn parse_format(text: &str, order: usize) -> Result<Format, FormatError> {
    crate::format::check_order(order)?;
    let mut p = Parser { text, pos: 0 };
    p.skip_ws();
    let format = if p.peek() == Some('(') { p.map(order)? } else { p.named_or_letters(order)? };
    p.skip_ws();
    if p.pos < text.len() {
        return Err(p.error_here("unexpected text after the format"));
    }
    Ok(format)
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn skip_ws(&mut self) {
        while let Some(c) = self.peek().filter(|c| c.is_whitespace()) {
            self.pos += c.len_utf8();
        }
    }

    fn error_at(&self, offset: usize, len: usize, message: impl Into<String>) -> FormatError {
        FormatError::Parse { input: self.text.to_string(), offset, len: len.max(1), message: message.into() }
    }

    fn error_here(&self, message: impl Into<String>) -> FormatError {
        let len = self.peek().map_or(1, char::len_utf8);
        self.error_at(self.pos, len, message)
    }

    fn expect(&mut self, c: char) -> Result<(), FormatError> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error_here(format!("expected `{c}`")))
        }
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// An identifier: letters, digits and `_`, starting with a letter or `_`.
    fn ident(&mut self) -> Result<(usize, &'a str), FormatError> {
        self.skip_ws();
        let start = self.pos;
        let rest = &self.text[start..];
        let len = rest
            .char_indices()
            .find(|&(i, c)| !(c.is_alphabetic() || c == '_' || (i > 0 && c.is_alphanumeric())))
            .map_or(rest.len(), |(i, _)| i);
        if len == 0 {
            return Err(self.error_here("expected a name"));
        }
        self.pos += len;
        Ok((start, &rest[..len]))
    }

    fn int(&mut self) -> Result<(usize, usize), FormatError> {
        self.skip_ws();
        let start = self.pos;
        let rest = &self.text[start..];
        let len = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if len == 0 {
            return Err(self.error_here("expected a non-negative integer"));
        }
        self.pos += len;
        let value = rest[..len].parse().map_err(|_| self.error_at(start, len, "integer too large"))?;
        Ok((start, value))
    }

    fn small_int(&mut self, what: &str) -> Result<u32, FormatError> {
        let (start, v) = self.int()?;
        u32::try_from(v).map_err(|_| self.error_at(start, self.pos - start, format!("{what} is too large")))
    }

    fn named_or_letters(&mut self, order: usize) -> Result<Format, FormatError> {
        let (start, name) = self.ident()?;
        let need = |n: usize, p: &Self| -> Result<(), FormatError> {
            if order == n {
                Ok(())
            } else {
                Err(p.error_at(
                    start,
                    name.len(),
                    format!("`{name}` is a format for {n}-dimensional tensors, not {order}"),
                ))
            }
        };
        let checked =
            |r: Result<Format, FormatError>, p: &Self| r.map_err(|e| p.error_at(start, p.pos - start, e.to_string()));
        match name {
            "dense" => Ok(Format::dense(order)),
            "csr" => need(2, self).map(|_| Format::csr()),
            "csc" => need(2, self).map(|_| Format::csc()),
            "dcsr" => need(2, self).map(|_| Format::csf(2)),
            "dcsc" => need(2, self).and_then(|_| Format::by_letters(&[LevelKind::COMPRESSED; 2], Some(&[1, 0]))),
            "coo" => Ok(Format::coo(order)),
            "csf" => Ok(Format::csf(order)),
            "nv24" => Ok(Format::nv24(order)),
            "bcsr" => {
                need(2, self)?;
                self.expect('(')?;
                let (_, b) = self.int()?;
                self.expect(')')?;
                if b == 0 {
                    return Err(self.error_at(start, self.pos - start, "bcsr block size must be at least 1"));
                }
                checked(Format::bcsr(b), self)
            }
            "nm" => {
                need(2, self)?;
                self.expect('(')?;
                let n = self.small_int("N")?;
                self.expect(',')?;
                let m = self.small_int("M")?;
                self.expect(',')?;
                let (_, l) = self.int()?;
                self.expect(')')?;
                checked(Format::nm(n, m, l), self)
            }
            _ => self.letters(start, name, order),
        }
    }

    fn letters(&mut self, start: usize, name: &str, order: usize) -> Result<Format, FormatError> {
        let mut kinds = Vec::with_capacity(name.len());
        for (i, c) in name.char_indices() {
            kinds.push(match c {
                'd' => LevelKind::Dense,
                's' => LevelKind::COMPRESSED,
                'u' => LevelKind::Compressed(LevelProperties::ORDERED_NONUNIQUE),
                'q' => LevelKind::SINGLETON,
                'c' => LevelKind::Singleton(LevelProperties::ORDERED_NONUNIQUE),
                // Not taco's: each parent's coordinates stored as one run (see `LevelKind::Band`).
                'b' => LevelKind::Band,
                // taco's zeroless compressed level promises no stored zero: the same storage.
                'z' => LevelKind::COMPRESSED,
                'p' => {
                    return Err(self.error_at(
                        start + i,
                        1,
                        "`p` (taco's padded singleton, a fixed count of children per parent) is not a level \
                         nmsparse stores: use q (singleton) or c (singleton, not unique)",
                    ));
                }
                _ if i == 0 => {
                    return Err(self.error_at(
                        start,
                        name.len(),
                        "unknown format: expected a name (dense, csr, csc, dcsr, dcsc, coo, csf, nv24, \
                         bcsr(B), nm(N,M,L)), taco letters (d s u z q c) or b (band), or a map `(d0, ...) -> (...)`",
                    ));
                }
                _ => {
                    return Err(self.error_at(
                        start + i,
                        c.len_utf8(),
                        format!(
                            "unknown format `{name}`: not a format name, and `{c}` is not a level letter \
                             (taco's d s u z q c, or b for band)"
                        ),
                    ));
                }
            });
        }
        if kinds.len() > 8 {
            return Err(self.error_at(start, name.len(), "taco letters describe 1 to 8 dimensions"));
        }
        if kinds.len() != order {
            return Err(self.error_at(
                start,
                name.len(),
                format!("{} level letters for a {order}-dimensional tensor", kinds.len()),
            ));
        }
        let mut modes = None;
        if self.eat(':') {
            let list_start = self.pos;
            let mut list = vec![self.int()?.1];
            while self.eat(',') {
                list.push(self.int()?.1);
            }
            let mut seen = list.clone();
            seen.sort_unstable();
            if seen != (0..order).collect::<Vec<_>>() {
                return Err(self.error_at(
                    list_start,
                    self.pos - list_start,
                    format!("mode ordering must be a permutation of 0..{order}"),
                ));
            }
            modes = Some(list);
            // taco's pack bounds (`dss:0,1,2:1`) group levels' arrays into one allocation: a
            // layout with no effect on what is stored or computed; checked, then ignored.
            if self.eat(':') {
                let bounds_start = self.pos;
                let mut bounds = vec![self.int()?.1];
                while self.eat(',') {
                    bounds.push(self.int()?.1);
                }
                if !bounds.windows(2).all(|w| w[0] < w[1]) || bounds.iter().any(|&b| b == 0 || b >= order) {
                    return Err(self.error_at(
                        bounds_start,
                        self.pos - bounds_start,
                        format!("pack bounds must increase and lie in 1..{order}"),
                    ));
                }
            }
        }
        Format::by_letters(&kinds, modes.as_deref()).map_err(|e| self.error_at(start, self.pos - start, e.to_string()))
    }

    fn map(&mut self, order: usize) -> Result<Format, FormatError> {
        let dims_start = self.pos;
        self.expect('(')?;
        let mut dims: Vec<&str> = Vec::new();
        loop {
            let (at, name) = self.ident()?;
            if dims.contains(&name) {
                return Err(self.error_at(at, name.len(), format!("dimension `{name}` is named twice")));
            }
            dims.push(name);
            if !self.eat(',') {
                break;
            }
        }
        self.expect(')')?;
        if dims.len() != order {
            return Err(self.error_at(
                dims_start,
                self.pos - dims_start,
                format!("{} dimensions named for a {order}-dimensional tensor", dims.len()),
            ));
        }
        self.expect('-')?;
        if self.peek() != Some('>') {
            return Err(self.error_here("expected `->`"));
        }
        self.pos += 1;
        let levels_start = self.pos;
        self.expect('(')?;
        let mut levels = Vec::new();
        loop {
            levels.push(self.level(&dims)?);
            if !self.eat(',') {
                break;
            }
        }
        self.expect(')')?;
        Format::new(order, levels).map_err(|e| self.error_at(levels_start, self.pos - levels_start, e.to_string()))
    }

    fn level(&mut self, dims: &[&str]) -> Result<Level, FormatError> {
        let (at, name) = self.ident()?;
        let d = dims
            .iter()
            .position(|&n| n == name)
            .ok_or_else(|| self.error_at(at, name.len(), format!("`{name}` is not one of the dimensions")))?;
        self.skip_ws();
        let save = self.pos;
        let expr = match self.ident() {
            Ok((_, "floordiv")) => LevelExpr::FloorDiv(d, self.block()?),
            Ok((_, "mod")) => LevelExpr::Mod(d, self.block()?),
            Ok((kw, other)) => {
                return Err(self.error_at(kw, other.len(), "expected `floordiv`, `mod` or `:`"));
            }
            Err(_) => {
                self.pos = save;
                LevelExpr::Dim(d)
            }
        };
        self.expect(':')?;
        let kind = self.kind()?;
        Ok(Level { kind, expr })
    }

    fn block(&mut self) -> Result<usize, FormatError> {
        let (at, b) = self.int()?;
        if b == 0 {
            return Err(self.error_at(at, self.pos - at, "block size must be at least 1"));
        }
        Ok(b)
    }

    fn kind(&mut self) -> Result<LevelKind, FormatError> {
        let (at, name) = self.ident()?;
        match name {
            "dense" => Ok(LevelKind::Dense),
            "compressed" => Ok(LevelKind::Compressed(self.props()?)),
            "singleton" => Ok(LevelKind::Singleton(self.props()?)),
            "band" => Ok(LevelKind::Band),
            "structured" => {
                self.expect('[')?;
                let n = self.small_int("N")?;
                self.expect(',')?;
                let m = self.small_int("M")?;
                self.expect(']')?;
                Ok(LevelKind::Structured { n, m })
            }
            _ => Err(self.error_at(
                at,
                name.len(),
                "unknown level kind: expected dense, compressed, singleton, band or structured[N, M]",
            )),
        }
    }

    fn props(&mut self) -> Result<LevelProperties, FormatError> {
        let mut props = LevelProperties::ORDERED_UNIQUE;
        if !self.eat('(') {
            return Ok(props);
        }
        loop {
            let (at, name) = self.ident()?;
            match name {
                "nonunique" => props.unique = false,
                "nonordered" => props.ordered = false,
                "unique" => props.unique = true,
                "ordered" => props.ordered = true,
                _ => {
                    return Err(self.error_at(
                        at,
                        name.len(),
                        "unknown level property: expected nonunique or nonordered",
                    ));
                }
            }
            if !self.eat(',') {
                break;
            }
        }
        self.expect(')')?;
        Ok(props)
    }
}
