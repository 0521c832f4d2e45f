//! The index notation parser.
//!
//! ```text
//! statement := access ('=' | '+=') expr
//! access    := NAME ('(' subscript (',' subscript)* ')')?     a scalar has no parentheses
//! subscript := '-'? mono (('+' | '-') mono)*
//! mono      := INT ('*' NAME)? | NAME ('*' INT)?
//! expr      := term (('+' | '-') term)*
//! term      := unary (('*' | '/') unary)*
//! unary     := '-' unary | primary
//! primary   := NUMBER | access | '(' expr ')' | 'sum' '(' NAME ',' expr ')'
//! ```
//! Errors show the statement with a caret under the offending token.

use std::collections::HashMap;

use super::{
    Access, AssignOp, BinaryOp, Expr, ExprId, IndexNotation, IndexTerm, IndexVar, IndexVarId, TensorId, TensorVar,
};
use crate::id::{Arena, Id};

/// A statement that does not parse; `offset..offset+len` (bytes) is the offending token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", nm_format::parse::render_error(input, *offset, *len, message))]
pub struct ParseError {
    /// The whole statement.
    pub input: String,
    /// Byte offset of the offending token.
    pub offset: usize,
    /// Its length in bytes (at least 1).
    pub len: usize,
    /// What was expected.
    pub message: String,
}

/// Parses one statement.
pub fn parse(text: &str) -> Result<IndexNotation, ParseError> {
    let mut p = Parser::new(text)?;
    let (lhs, op) = p.assignment_head()?;
    let rhs = p.expr()?;
    if !p.at_end() {
        return Err(p.error_at_token(p.at, "unexpected text after the expression"));
    }
    Ok(IndexNotation { source: Some(text.to_string()), tensors: p.tensors, vars: p.vars, exprs: p.exprs, lhs, op, rhs })
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Name(String),
    Int(i64),
    Float(f64),
    LParen,
    RParen,
    LBrace,
    RBrace,
    Comma,
    Semicolon,
    Plus,
    Minus,
    Star,
    Slash,
    Assign,
    PlusAssign,
}

struct Token {
    tok: Tok,
    offset: usize,
    len: usize,
}

fn lex(text: &str) -> Result<Vec<Token>, ParseError> {
    let err = |offset: usize, len: usize, message: &str| ParseError {
        input: text.to_string(),
        offset,
        len: len.max(1),
        message: message.to_string(),
    };
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = text[i..].chars().next().expect("in bounds");
        let start = i;
        let single = |tok| Some((tok, 1));
        let (tok, len) = match c {
            c if c.is_whitespace() => {
                i += c.len_utf8();
                continue;
            }
            '(' => single(Tok::LParen),
            ')' => single(Tok::RParen),
            '{' => single(Tok::LBrace),
            '}' => single(Tok::RBrace),
            ',' => single(Tok::Comma),
            ';' => single(Tok::Semicolon),
            '-' => single(Tok::Minus),
            '*' => single(Tok::Star),
            '/' => single(Tok::Slash),
            '=' => single(Tok::Assign),
            '+' if bytes.get(i + 1) == Some(&b'=') => Some((Tok::PlusAssign, 2)),
            '+' => single(Tok::Plus),
            c if c.is_ascii_digit() || c == '.' => {
                let mut j = i;
                while j < bytes.len() && bytes[j].is_ascii_digit() {
                    j += 1;
                }
                let mut float = false;
                if j < bytes.len() && bytes[j] == b'.' {
                    float = true;
                    j += 1;
                    while j < bytes.len() && bytes[j].is_ascii_digit() {
                        j += 1;
                    }
                }
                if j < bytes.len() && (bytes[j] == b'e' || bytes[j] == b'E') {
                    let mut k = j + 1;
                    if k < bytes.len() && (bytes[k] == b'+' || bytes[k] == b'-') {
                        k += 1;
                    }
                    if k < bytes.len() && bytes[k].is_ascii_digit() {
                        float = true;
                        j = k;
                        while j < bytes.len() && bytes[j].is_ascii_digit() {
                            j += 1;
                        }
                    }
                }
                let s = &text[i..j];
                let tok = match s.parse::<i64>() {
                    Ok(v) if !float => Tok::Int(v),
                    _ => match s.parse::<f64>() {
                        Ok(v) if v.is_finite() => Tok::Float(v),
                        _ => return Err(err(i, j - i, "malformed or out-of-range number")),
                    },
                };
                Some((tok, j - i))
            }
            c if c.is_alphabetic() || c == '_' => {
                let len = text[i..]
                    .char_indices()
                    .find(|&(_, c)| !(c.is_alphanumeric() || c == '_'))
                    .map_or(text.len() - i, |(k, _)| k);
                Some((Tok::Name(text[i..i + len].to_string()), len))
            }
            _ => None,
        }
        .ok_or_else(|| err(start, c.len_utf8(), &format!("unexpected character `{c}`")))?;
        out.push(Token { tok, offset: start, len });
        i += len;
    }
    Ok(out)
}

/// How deep statements and expressions may nest (parentheses, `forall`s, a chain of
/// operators): every pass after parsing recurses over the tree, and 30,000 nested parentheses
/// overflowed the parser's stack — an abort, not an error.
const MAX_NESTING: usize = 1000;

pub(crate) struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    pub(crate) at: usize,
    /// Parentheses, `sum(`, negations and statements open around the current token.
    nesting: usize,
    /// The height of each expression node (a leaf is 1), by id.
    heights: Vec<usize>,
    pub(crate) tensors: Arena<TensorId, TensorVar>,
    pub(crate) vars: Arena<IndexVarId, IndexVar>,
    pub(crate) exprs: Arena<ExprId, Expr>,
    tensor_ids: HashMap<String, TensorId>,
    var_ids: HashMap<String, IndexVarId>,
}

impl<'a> Parser<'a> {
    /// A parser over the tokens of `text`.
    pub(crate) fn new(text: &'a str) -> Result<Self, ParseError> {
        Ok(Parser {
            text,
            tokens: lex(text)?,
            at: 0,
            nesting: 0,
            heights: Vec::new(),
            tensors: Arena::new(),
            vars: Arena::new(),
            exprs: Arena::new(),
            tensor_ids: HashMap::new(),
            var_ids: HashMap::new(),
        })
    }

    /// `lhs =` or `lhs +=`, the left-hand side taking plain variables only.
    pub(crate) fn assignment_head(&mut self) -> Result<(Access, AssignOp), ParseError> {
        let start = self.peek_offset();
        let lhs = self.access()?;
        if lhs.subscripts.iter().any(IndexTerm::is_compound) {
            return Err(
                self.error_span(start, "the left-hand side takes plain index variables, not compound subscripts")
            );
        }
        let op = match self.next_kind() {
            Some(Tok::Assign) => AssignOp::Assign,
            Some(Tok::PlusAssign) => AssignOp::Accumulate,
            _ => return Err(self.error_prev("expected `=` or `+=` after the left-hand side")),
        };
        Ok((lhs, op))
    }

    /// Whether every token is consumed.
    pub(crate) fn at_end(&self) -> bool {
        self.at >= self.tokens.len()
    }

    /// The token `k` ahead of the current one.
    pub(crate) fn peek_ahead(&self, k: usize) -> Option<&Tok> {
        self.tokens.get(self.at + k).map(|t| &t.tok)
    }

    /// The next token's name, when it is one (not consumed).
    pub(crate) fn peek_name(&self) -> Option<String> {
        match self.peek() {
            Some(Tok::Name(n)) => Some(n.clone()),
            _ => None,
        }
    }

    pub(crate) fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at).map(|t| &t.tok)
    }

    pub(crate) fn peek_offset(&self) -> usize {
        self.tokens.get(self.at).map_or(self.text.len(), |t| t.offset)
    }

    pub(crate) fn next_kind(&mut self) -> Option<Tok> {
        let t = self.tokens.get(self.at).map(|t| t.tok.clone());
        self.at += 1;
        t
    }

    pub(crate) fn eat(&mut self, tok: &Tok) -> bool {
        if self.peek() == Some(tok) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn error(&self, offset: usize, len: usize, message: &str) -> ParseError {
        ParseError { input: self.text.to_string(), offset, len: len.max(1), message: message.to_string() }
    }

    pub(crate) fn error_at_token(&self, index: usize, message: &str) -> ParseError {
        match self.tokens.get(index) {
            Some(t) => self.error(t.offset, t.len, message),
            None => self.error(self.text.len(), 1, message),
        }
    }

    /// An error at the token just consumed (or the end).
    pub(crate) fn error_prev(&self, message: &str) -> ParseError {
        self.error_at_token(self.at.saturating_sub(1), message)
    }

    pub(crate) fn error_span(&self, start: usize, message: &str) -> ParseError {
        let end = self.tokens.get(self.at.saturating_sub(1)).map_or(self.text.len(), |t| t.offset + t.len);
        self.error(start, end.saturating_sub(start), message)
    }

    pub(crate) fn expect(&mut self, tok: Tok, what: &str) -> Result<(), ParseError> {
        if self.eat(&tok) { Ok(()) } else { Err(self.error_at_token(self.at, &format!("expected {what}"))) }
    }

    pub(crate) fn name(&mut self, what: &str) -> Result<(usize, String), ParseError> {
        match self.tokens.get(self.at) {
            Some(Token { tok: Tok::Name(n), offset, .. }) => {
                let r = (*offset, n.clone());
                self.at += 1;
                Ok(r)
            }
            _ => Err(self.error_at_token(self.at, &format!("expected {what}"))),
        }
    }

    pub(crate) fn var(&mut self, name: &str) -> IndexVarId {
        if let Some(&v) = self.var_ids.get(name) {
            return v;
        }
        let v = self.vars.push(IndexVar { name: name.to_string() });
        self.var_ids.insert(name.to_string(), v);
        v
    }

    pub(crate) fn access(&mut self) -> Result<Access, ParseError> {
        let (offset, name) = self.name("a tensor name")?;
        let mut subscripts = Vec::new();
        if self.eat(&Tok::LParen) {
            loop {
                subscripts.push(self.subscript()?);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RParen, "`,` or `)` in the subscripts")?;
        }
        let tensor = match self.tensor_ids.get(&name) {
            Some(&t) => {
                let order = self.tensors[t].order;
                if order != subscripts.len() {
                    return Err(self.error_span(
                        offset,
                        &format!("`{name}` is used with {} subscripts here but {order} before", subscripts.len()),
                    ));
                }
                t
            }
            None => {
                let t = self.tensors.push(TensorVar { name: name.clone(), order: subscripts.len() });
                self.tensor_ids.insert(name, t);
                t
            }
        };
        let end = self.tokens.get(self.at.saturating_sub(1)).map_or(self.text.len(), |t| t.offset + t.len);
        Ok(Access { tensor, subscripts, span: Some((offset, end)) })
    }

    fn subscript(&mut self) -> Result<IndexTerm, ParseError> {
        let mut term = IndexTerm { terms: Vec::new(), constant: 0 };
        let start = self.peek_offset();
        let mut sign = if self.eat(&Tok::Minus) { -1 } else { 1 };
        loop {
            match self.next_kind() {
                Some(Tok::Int(c)) => {
                    if self.eat(&Tok::Star) {
                        let (_, v) = self.name("an index variable after `*`")?;
                        let v = self.var(&v);
                        term.terms.push((sign * c, v));
                    } else {
                        term.constant += sign * c;
                    }
                }
                Some(Tok::Name(v)) => {
                    let v = self.var(&v);
                    let c = if self.eat(&Tok::Star) {
                        match self.next_kind() {
                            Some(Tok::Int(c)) => c,
                            _ => return Err(self.error_prev("expected an integer coefficient after `*`")),
                        }
                    } else {
                        1
                    };
                    term.terms.push((sign * c, v));
                }
                _ => return Err(self.error_prev("expected an index variable or an integer in the subscript")),
            }
            sign = match self.peek() {
                Some(Tok::Plus) => 1,
                Some(Tok::Minus) => -1,
                _ => break,
            };
            self.at += 1;
        }
        if term.terms.iter().any(|&(c, _)| c == 0) {
            return Err(
                self.error_span(start, "a coefficient of 0 removes the variable; write the subscript without it")
            );
        }
        if term.terms.is_empty() {
            return Err(
                self.error_span(start, "a subscript needs an index variable; constant subscripts are not supported")
            );
        }
        Ok(term)
    }

    /// A node, refused where the tree would grow taller than [`MAX_NESTING`] (a chain of
    /// operators nests as deep as it is long).
    fn push(&mut self, e: Expr) -> Result<ExprId, ParseError> {
        let height = 1 + match &e {
            Expr::Access(_) | Expr::Literal(_) => 0,
            Expr::Neg(a) | Expr::Sum(_, a) => self.heights[a.index()],
            Expr::Binary(_, a, b) => self.heights[a.index()].max(self.heights[b.index()]),
        };
        if height > MAX_NESTING {
            return Err(self.error_prev(&format!("the expression nests more than {MAX_NESTING} operations deep")));
        }
        self.heights.push(height);
        Ok(self.exprs.push(e))
    }

    /// Enters a parenthesis, negation or statement, refused past [`MAX_NESTING`]; [`Self::leave`]
    /// ends it.
    pub(crate) fn enter(&mut self) -> Result<(), ParseError> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(self.error_prev(&format!("nested more than {MAX_NESTING} levels deep")));
        }
        Ok(())
    }

    pub(crate) fn leave(&mut self) {
        self.nesting -= 1;
    }

    pub(crate) fn expr(&mut self) -> Result<ExprId, ParseError> {
        let mut left = self.term()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Plus) => BinaryOp::Add,
                Some(Tok::Minus) => BinaryOp::Sub,
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.term()?;
            left = self.push(Expr::Binary(op, left, right))?;
        }
    }

    fn term(&mut self) -> Result<ExprId, ParseError> {
        let mut left = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Star) => BinaryOp::Mul,
                Some(Tok::Slash) => BinaryOp::Div,
                _ => return Ok(left),
            };
            self.at += 1;
            let right = self.unary()?;
            left = self.push(Expr::Binary(op, left, right))?;
        }
    }

    fn unary(&mut self) -> Result<ExprId, ParseError> {
        if self.eat(&Tok::Minus) {
            self.enter()?;
            let inner = self.unary()?;
            self.leave();
            return self.push(Expr::Neg(inner));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<ExprId, ParseError> {
        match self.peek().cloned() {
            Some(Tok::Int(v)) => {
                self.at += 1;
                self.push(Expr::Literal(v as f64))
            }
            Some(Tok::Float(v)) => {
                self.at += 1;
                self.push(Expr::Literal(v))
            }
            Some(Tok::LParen) => {
                self.at += 1;
                self.enter()?;
                let e = self.expr()?;
                self.expect(Tok::RParen, "`)`")?;
                self.leave();
                Ok(e)
            }
            Some(Tok::Name(n)) if n == "sum" && self.tokens.get(self.at + 1).map(|t| &t.tok) == Some(&Tok::LParen) => {
                self.at += 2;
                self.enter()?;
                let (_, v) = self.name("the summed index variable")?;
                let v = self.var(&v);
                self.expect(Tok::Comma, "`,` after the summed variable")?;
                let e = self.expr()?;
                self.expect(Tok::RParen, "`)` closing `sum(`")?;
                self.leave();
                self.push(Expr::Sum(v, e))
            }
            Some(Tok::Name(_)) => {
                let a = self.access()?;
                self.push(Expr::Access(a))
            }
            _ => Err(self.error_at_token(self.at, "expected a tensor access, a number, `(` or `-`")),
        }
    }
}
