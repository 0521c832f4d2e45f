//! The loop IR's text form read back: what [`Function`]'s `Display` prints, so that tests can
//! write kernels by hand (the verifier's refusals, the back ends on their own) and check that
//! the printer says everything (print, parse, print: the same text).
//!
//! Variables are scoped as blocks nest: `let` and `for` declare one, a name means the
//! innermost declaration of it. The printer gives two variables one name only where their
//! declarations do not overlap, so the text names one variable at each place.

use std::collections::HashMap;

use super::{ArrayId, BinOp, BucketLine, ElemType, Expr, Function, OmpSchedule, Role, ScalarType, Stmt, UnOp, VarId};

/// Why a text is not a kernel: the line and what was expected there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct ParseError {
    /// The line, from 1.
    pub line: usize,
    /// What is wrong.
    pub problem: String,
}

impl Function {
    /// Reads a kernel in the text form its `Display` prints.
    pub fn parse(text: &str) -> Result<Function, ParseError> {
        let tokens = lex(text)?;
        let mut p =
            Parser { tokens, at: 0, f: Function::new(""), arrays: HashMap::new(), scopes: vec![HashMap::new()] };
        p.function()?;
        if p.at < p.tokens.len() {
            return p.fail("text after the kernel's closing `}`");
        }
        Ok(p.f)
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Name(String),
    Int(i64),
    Float(f64),
    Str(String),
    Punct(&'static str),
}

/// Punctuation, longest first.
const PUNCT: &[&str] = &[
    "+=", "..", "<=", "==", "!=", "&&", "||", ">>", "<<", "(", ")", "{", "}", "[", "]", ",", ":", ";", "=", "+", "-",
    "*", "/", "%", "<", "&", "|", "?", "!",
];

fn lex(text: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c.is_whitespace() {
                i += 1;
            } else if c.is_ascii_alphabetic() || c == '_' {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push((Tok::Name(chars[start..i].iter().collect()), line_no));
            } else if c.is_ascii_digit() {
                let start = i;
                let mut float = false;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                if i + 1 < chars.len() && chars[i] == '.' && chars[i + 1].is_ascii_digit() {
                    float = true;
                    i += 1;
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                }
                if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                    float = true;
                    i += 1;
                    if i < chars.len() && (chars[i] == '-' || chars[i] == '+') {
                        i += 1;
                    }
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                }
                let word: String = chars[start..i].iter().collect();
                let bad = || ParseError { line: line_no, problem: format!("`{word}` is not a number") };
                let token = if float {
                    Tok::Float(word.parse().map_err(|_| bad())?)
                } else {
                    Tok::Int(word.parse().map_err(|_| bad())?)
                };
                out.push((token, line_no));
            } else if c == '"' {
                let start = i + 1;
                i = start;
                while i < chars.len() && chars[i] != '"' {
                    i += 1;
                }
                if i == chars.len() {
                    return Err(ParseError { line: line_no, problem: "a string without its closing `\"`".into() });
                }
                out.push((Tok::Str(chars[start..i].iter().collect()), line_no));
                i += 1;
            } else {
                let rest: String = chars[i..].iter().collect();
                let Some(&p) = PUNCT.iter().find(|p| rest.starts_with(**p)) else {
                    return Err(ParseError { line: line_no, problem: format!("unexpected `{c}`") });
                };
                out.push((Tok::Punct(p), line_no));
                i += p.len();
            }
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<(Tok, usize)>,
    at: usize,
    f: Function,
    arrays: HashMap<String, ArrayId>,
    /// The variables each enclosing block declared, by name, innermost last.
    scopes: Vec<HashMap<String, VarId>>,
}

impl Parser {
    fn fail<T>(&self, problem: impl Into<String>) -> Result<T, ParseError> {
        let line = self.tokens.get(self.at).or(self.tokens.last()).map_or(1, |t| t.1);
        Err(ParseError { line, problem: problem.into() })
    }

    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at).map(|t| &t.0)
    }

    fn peek_at(&self, ahead: usize) -> Option<&Tok> {
        self.tokens.get(self.at + ahead).map(|t| &t.0)
    }

    fn is(&self, punct: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(p)) if *p == punct)
    }

    fn is_word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Tok::Name(n)) if n == word)
    }

    fn eat(&mut self, punct: &str) -> bool {
        let found = self.is(punct);
        self.at += usize::from(found);
        found
    }

    fn eat_word(&mut self, word: &str) -> bool {
        let found = self.is_word(word);
        self.at += usize::from(found);
        found
    }

    fn expect(&mut self, punct: &str) -> Result<(), ParseError> {
        if self.eat(punct) { Ok(()) } else { self.fail(format!("expected `{punct}`")) }
    }

    fn expect_word(&mut self, word: &str) -> Result<(), ParseError> {
        if self.eat_word(word) { Ok(()) } else { self.fail(format!("expected `{word}`")) }
    }

    fn name(&mut self) -> Result<String, ParseError> {
        match self.peek().cloned() {
            Some(Tok::Name(n)) => {
                self.at += 1;
                Ok(n)
            }
            _ => self.fail("expected a name"),
        }
    }

    fn uint(&mut self) -> Result<usize, ParseError> {
        match self.peek().cloned() {
            Some(Tok::Int(v)) if v >= 0 => {
                self.at += 1;
                Ok(v as usize)
            }
            _ => self.fail("expected a count"),
        }
    }

    /// `kernel NAME( arrays ) [schedule(...)] { body }`
    fn function(&mut self) -> Result<(), ParseError> {
        self.expect_word("kernel")?;
        self.f.name = self.name()?;
        self.expect("(")?;
        while !self.eat(")") {
            self.array()?;
        }
        if self.eat_word("schedule") {
            self.expect("(")?;
            let kind = self.name()?;
            let chunk = if self.eat(",") { Some(self.uint()? as u32) } else { None };
            self.expect(")")?;
            self.f.omp_schedule = match (kind.as_str(), chunk) {
                ("static", chunk) => OmpSchedule::Static(chunk),
                ("dynamic", Some(chunk)) => OmpSchedule::Dynamic(chunk),
                _ => return self.fail("expected `schedule(static[, N])` or `schedule(dynamic, N)`"),
            };
        }
        self.f.body = self.block()?;
        Ok(())
    }

    /// `[out] NAME: [ELEM] ROLE,`
    fn array(&mut self) -> Result<(), ParseError> {
        let output = self.eat_word("out");
        let name = self.name()?;
        self.expect(":")?;
        self.expect("[")?;
        let elem = match self.name()?.as_str() {
            "I32" => ElemType::I32,
            "I64" => ElemType::I64,
            "U32" => ElemType::U32,
            "U64" => ElemType::U64,
            "F32" => ElemType::F32,
            "F64" => ElemType::F64,
            other => return self.fail(format!("unknown element type `{other}`")),
        };
        self.expect("]")?;
        let role = self.role()?;
        self.expect(",")?;
        if self.arrays.contains_key(&name) {
            return self.fail(format!("two arrays named `{name}`"));
        }
        let id = self.f.array(&name, elem, role, output);
        self.arrays.insert(name, id);
        Ok(())
    }

    fn role(&mut self) -> Result<Role, ParseError> {
        let kind = self.name()?;
        Ok(match kind.as_str() {
            "Scratch" => Role::Scratch,
            "Bounds" => Role::Bounds,
            "Local" => {
                let fields = self.fields()?;
                Role::Local { len: field_count(&fields, "len").or_else(|e| self.fail(e))? }
            }
            "Values" => {
                let fields = self.fields()?;
                Role::Values { tensor: field_text(&fields, "tensor").or_else(|e| self.fail(e))? }
            }
            "Pos" | "Crd" | "First" | "Metadata" => {
                let fields = self.fields()?;
                let tensor = field_text(&fields, "tensor").or_else(|e| self.fail(e))?;
                let level = field_count(&fields, "level").or_else(|e| self.fail(e))?;
                match kind.as_str() {
                    "Pos" => Role::Pos { tensor, level },
                    "Crd" => Role::Crd { tensor, level },
                    "First" => Role::First { tensor, level },
                    _ => Role::Metadata { tensor, level },
                }
            }
            "Workspace" => self.workspace()?,
            other => return self.fail(format!("unknown array role `{other}`")),
        })
    }

    /// `{ name: value, ... }` with one-token values.
    fn fields(&mut self) -> Result<Vec<(String, Tok)>, ParseError> {
        self.expect("{")?;
        let mut fields = Vec::new();
        while !self.eat("}") {
            let name = self.name()?;
            self.expect(":")?;
            let Some(value) = self.peek().cloned() else { return self.fail("expected a value") };
            self.at += 1;
            fields.push((name, value));
            if !self.is("}") {
                self.expect(",")?;
            }
        }
        Ok(fields)
    }

    /// `Workspace { policy: P, extents: [..], kinds: [K; ..], pipelined: B, double_buffered: B }`
    fn workspace(&mut self) -> Result<Role, ParseError> {
        self.expect("{")?;
        self.expect_word("policy")?;
        self.expect(":")?;
        let mut policy = self.name()?;
        if self.eat("(") {
            policy = format!("{policy}({})", self.uint()?);
            self.expect(")")?;
        }
        let policy: nm_ism::Policy = match policy.parse() {
            Ok(p) => p,
            Err(e) => return self.fail(e),
        };
        self.expect(",")?;
        self.expect_word("extents")?;
        self.expect(":")?;
        self.expect("[")?;
        let mut extents = Vec::new();
        while !self.eat("]") {
            extents.push(self.uint()?);
            if !self.is("]") {
                self.expect(",")?;
            }
        }
        self.expect(",")?;
        self.expect_word("kinds")?;
        self.expect(":")?;
        let kinds = self.level_kinds()?;
        let mut config = nm_ism::Config::new(policy);
        for flag in ["pipelined", "double_buffered"] {
            self.expect(",")?;
            self.expect_word(flag)?;
            self.expect(":")?;
            let on = match self.name()?.as_str() {
                "true" => true,
                "false" => false,
                _ => return self.fail("expected `true` or `false`"),
            };
            match flag {
                "pipelined" => config.pipelined = on,
                _ => config.double_buffered = on,
            }
        }
        self.expect("}")?;
        Ok(Role::Workspace { extents, kinds, config })
    }

    /// `[kind; kind; ...]`, each as `LevelKind`'s `Display` spells it: `dense`,
    /// `compressed` or `singleton` with `(nonunique, nonordered)` properties, `structured[N, M]`.
    fn level_kinds(&mut self) -> Result<Vec<nm_format::LevelKind>, ParseError> {
        use nm_format::{LevelKind, LevelProperties};
        self.expect("[")?;
        let mut kinds = Vec::new();
        while !self.eat("]") {
            let kind = match self.name()?.as_str() {
                "dense" => LevelKind::Dense,
                "structured" => {
                    self.expect("[")?;
                    let n = self.uint()? as u32;
                    self.expect(",")?;
                    let m = self.uint()? as u32;
                    self.expect("]")?;
                    LevelKind::Structured { n, m }
                }
                name @ ("compressed" | "singleton") => {
                    let mut props = LevelProperties::ORDERED_UNIQUE;
                    if self.eat("(") {
                        while !self.eat(")") {
                            match self.name()?.as_str() {
                                "nonunique" => props.unique = false,
                                "nonordered" => props.ordered = false,
                                other => return self.fail(format!("unknown level property `{other}`")),
                            }
                            self.eat(",");
                        }
                    }
                    if name == "compressed" { LevelKind::Compressed(props) } else { LevelKind::Singleton(props) }
                }
                other => return self.fail(format!("unknown level kind `{other}`")),
            };
            kinds.push(kind);
            if !self.is("]") {
                self.expect(";")?;
            }
        }
        Ok(kinds)
    }

    /// `{ statements }`, a scope of its own.
    fn block(&mut self) -> Result<Vec<Stmt>, ParseError> {
        self.expect("{")?;
        self.scopes.push(HashMap::new());
        let mut body = Vec::new();
        while !self.eat("}") {
            if self.peek().is_none() {
                return self.fail("a block without its closing `}`");
            }
            body.push(self.stmt()?);
        }
        self.scopes.pop();
        Ok(body)
    }

    fn declare(&mut self, name: String, ty: ScalarType) -> VarId {
        let v = self.f.var(&name, ty);
        self.scopes.last_mut().expect("a scope").insert(name, v);
        v
    }

    fn variable(&self, name: &str) -> Result<VarId, ParseError> {
        match self.scopes.iter().rev().find_map(|s| s.get(name)) {
            Some(&v) => Ok(v),
            None => self.fail(format!("`{name}` is not declared here")),
        }
    }

    fn array_named(&self, name: &str) -> Result<ArrayId, ParseError> {
        match self.arrays.get(name) {
            Some(&a) => Ok(a),
            None => self.fail(format!("no array `{name}`")),
        }
    }

    /// `NAME[expr]`
    fn element(&mut self) -> Result<(ArrayId, Expr), ParseError> {
        let name = self.name()?;
        let array = self.array_named(&name)?;
        self.expect("[")?;
        let index = self.expr()?;
        self.expect("]")?;
        Ok((array, index))
    }

    fn stmt(&mut self) -> Result<Stmt, ParseError> {
        let word = match self.peek() {
            Some(Tok::Name(n)) => n.clone(),
            _ => return self.fail("expected a statement"),
        };
        // A keyword only where what follows makes it one: a variable may be called `sort`.
        let next_is = |p: &Self, punct: &str| matches!(p.peek_at(1), Some(Tok::Punct(q)) if *q == punct);
        if next_is(self, "=") {
            self.at += 1;
            let v = self.variable(&word)?;
            self.expect("=")?;
            return Ok(Stmt::Assign(v, self.expr()?));
        }
        if next_is(self, "[") {
            return self.store(false);
        }
        self.at += 1;
        match word.as_str() {
            "let" => {
                let name = self.name()?;
                self.expect(":")?;
                let ty = match self.name()?.as_str() {
                    "Index" => ScalarType::Index,
                    "F32" => ScalarType::F32,
                    "F64" => ScalarType::F64,
                    "Bool" => ScalarType::Bool,
                    other => return self.fail(format!("unknown scalar type `{other}`")),
                };
                self.expect("=")?;
                // The value is read before the name is declared: `let p: Index = p` reads an outer `p`.
                let value = self.expr()?;
                Ok(Stmt::Decl(self.declare(name, ty), value))
            }
            "atomic" => {
                let stmt = self.store(true)?;
                Ok(stmt)
            }
            "parallel" => {
                self.expect_word("for")?;
                self.for_loop(true)
            }
            "for" => self.for_loop(false),
            "while" => {
                let cond = self.expr()?;
                Ok(Stmt::While { cond, body: self.block()? })
            }
            "if" => {
                let cond = self.expr()?;
                let then = self.block()?;
                let otherwise = if self.eat_word("else") { self.block()? } else { Vec::new() };
                Ok(Stmt::If { cond, then, otherwise })
            }
            "break" => Ok(Stmt::Break),
            "insert" => {
                let (workspace, key) = self.element()?;
                self.expect("+=")?;
                let value = self.expr()?;
                self.expect_word("first")?;
                Ok(Stmt::Insert { workspace, key, first: self.expr()?, value })
            }
            "finish" => {
                let name = self.name()?;
                Ok(Stmt::Finish { workspace: self.array_named(&name)? })
            }
            "prefetch" => self.prefetch(),
            "resize" => {
                let name = self.name()?;
                let array = self.array_named(&name)?;
                self.expect_word("to")?;
                Ok(Stmt::Resize { array, len: self.expr()? })
            }
            "written" => {
                let name = self.name()?;
                let array = self.array_named(&name)?;
                self.expect("[")?;
                self.expect("..")?;
                let len = self.expr()?;
                self.expect("]")?;
                Ok(Stmt::Written { array, len })
            }
            "sort" => {
                let name = self.name()?;
                let array = self.array_named(&name)?;
                self.expect("[")?;
                let start = self.expr()?;
                self.expect("..")?;
                let end = self.expr()?;
                self.expect("]")?;
                self.expect_word("using")?;
                let scratch = self.name()?;
                Ok(Stmt::Sort { array, start, end, scratch: self.array_named(&scratch)? })
            }
            other => self.fail(format!("unknown statement `{other}`")),
        }
    }

    /// `NAME[expr] = expr` or `+= expr` (`atomic` before it marks the function's atomic array).
    fn store(&mut self, atomic: bool) -> Result<Stmt, ParseError> {
        let (array, index) = self.element()?;
        let accumulate = if self.eat("+=") {
            true
        } else {
            self.expect("=")?;
            false
        };
        if atomic {
            if !accumulate {
                return self.fail("an atomic store adds (`+=`)");
            }
            self.f.atomic = Some(array);
        }
        Ok(Stmt::Store { array, index, value: self.expr()?, accumulate })
    }

    /// `for NAME in expr..expr { body }`: the variable is declared in the body's scope.
    fn for_loop(&mut self, parallel: bool) -> Result<Stmt, ParseError> {
        let name = self.name()?;
        self.expect_word("in")?;
        let start = self.expr()?;
        self.expect("..")?;
        let end = self.expr()?;
        self.scopes.push(HashMap::new());
        let var = self.declare(name, ScalarType::Index);
        let body = self.block();
        self.scopes.pop();
        Ok(Stmt::For { var, start, end, body: body?, parallel })
    }

    /// `prefetch A[expr]` or `prefetch head|tail of W bucket expr`.
    fn prefetch(&mut self) -> Result<Stmt, ParseError> {
        let line = match self.peek() {
            Some(Tok::Name(n)) if n == "head" && matches!(self.peek_at(1), Some(Tok::Name(o)) if o == "of") => {
                Some(BucketLine::Head)
            }
            Some(Tok::Name(n)) if n == "tail" && matches!(self.peek_at(1), Some(Tok::Name(o)) if o == "of") => {
                Some(BucketLine::Tail)
            }
            _ => None,
        };
        let Some(line) = line else {
            let (array, index) = self.element()?;
            return Ok(Stmt::Prefetch { array, index });
        };
        self.at += 2;
        let name = self.name()?;
        let workspace = self.array_named(&name)?;
        self.expect_word("bucket")?;
        Ok(Stmt::PrefetchBucket { workspace, bucket: self.expr()?, line })
    }

    /// An operand, then an operator and another operand, or `? a : b`: the printer
    /// parenthesizes every operand that is not an atom, so there are no chains to associate.
    fn expr(&mut self) -> Result<Expr, ParseError> {
        let a = self.operand()?;
        if self.eat("?") {
            let then = self.operand()?;
            self.expect(":")?;
            let otherwise = self.operand()?;
            return Ok(Expr::Select(Box::new(a), Box::new(then), Box::new(otherwise)));
        }
        let op = match self.peek() {
            Some(Tok::Punct(p)) => binary(p),
            _ => None,
        };
        let Some(op) = op else { return Ok(a) };
        self.at += 1;
        let b = self.operand()?;
        Ok(Expr::Binary(op, Box::new(a), Box::new(b)))
    }

    fn operand(&mut self) -> Result<Expr, ParseError> {
        let call = |p: &Self, name: &str| p.is_word(name) && matches!(p.peek_at(1), Some(Tok::Punct("(")));
        if self.eat("(") {
            let e = self.expr()?;
            self.expect(")")?;
            return Ok(e);
        }
        if self.eat("-") {
            return Ok(match self.peek().cloned() {
                // `-1` is the literal (the printer writes `Int(-1)` so).
                Some(Tok::Int(v)) => {
                    self.at += 1;
                    Expr::Int(-v)
                }
                Some(Tok::Float(v)) => {
                    self.at += 1;
                    Expr::Float(-v)
                }
                _ => Expr::Unary(UnOp::Neg, Box::new(self.operand()?)),
            });
        }
        if self.eat("!") {
            return Ok(Expr::Unary(UnOp::Not, Box::new(self.operand()?)));
        }
        for (name, op) in [("min", BinOp::Min), ("max", BinOp::Max)] {
            if call(self, name) {
                self.at += 2;
                let a = self.expr()?;
                self.expect(",")?;
                let b = self.expr()?;
                self.expect(")")?;
                return Ok(Expr::Binary(op, Box::new(a), Box::new(b)));
            }
        }
        for (name, op) in [("ctz", UnOp::TrailingZeros), ("clear_lowest", UnOp::ClearLowestBit)] {
            if call(self, name) {
                self.at += 2;
                let a = self.expr()?;
                self.expect(")")?;
                return Ok(Expr::Unary(op, Box::new(a)));
            }
        }
        if call(self, "len") {
            self.at += 2;
            let name = self.name()?;
            self.expect(")")?;
            return Ok(Expr::Len(self.array_named(&name)?));
        }
        match self.peek().cloned() {
            Some(Tok::Int(v)) => {
                self.at += 1;
                Ok(Expr::Int(v))
            }
            Some(Tok::Float(v)) => {
                self.at += 1;
                Ok(Expr::Float(v))
            }
            Some(Tok::Name(n)) if matches!(n.as_str(), "inf" | "NaN") => {
                self.at += 1;
                Ok(Expr::Float(if n == "inf" { f64::INFINITY } else { f64::NAN }))
            }
            Some(Tok::Name(_)) if matches!(self.peek_at(1), Some(Tok::Punct("["))) => {
                let (array, index) = self.element()?;
                Ok(Expr::Load(array, Box::new(index)))
            }
            Some(Tok::Name(n)) => {
                self.at += 1;
                Ok(Expr::Var(self.variable(&n)?))
            }
            _ => self.fail("expected an expression"),
        }
    }
}

/// The operator a punctuation token spells (see `print::symbol`).
fn binary(p: &str) -> Option<BinOp> {
    Some(match p {
        "+" => BinOp::Add,
        "-" => BinOp::Sub,
        "*" => BinOp::Mul,
        "/" => BinOp::Div,
        "%" => BinOp::Rem,
        "<" => BinOp::Lt,
        "<=" => BinOp::Le,
        "==" => BinOp::Eq,
        "!=" => BinOp::Ne,
        "&&" => BinOp::And,
        "||" => BinOp::Or,
        ">>" => BinOp::Shr,
        "<<" => BinOp::Shl,
        "&" => BinOp::BitAnd,
        "|" => BinOp::BitOr,
        _ => return None,
    })
}

fn field<'a>(fields: &'a [(String, Tok)], name: &str) -> Result<&'a Tok, String> {
    fields.iter().find(|(n, _)| n == name).map(|(_, t)| t).ok_or_else(|| format!("a role without `{name}`"))
}

fn field_text(fields: &[(String, Tok)], name: &str) -> Result<String, String> {
    match field(fields, name)? {
        Tok::Str(s) => Ok(s.clone()),
        _ => Err(format!("`{name}` is a string")),
    }
}

fn field_count(fields: &[(String, Tok)], name: &str) -> Result<usize, String> {
    match field(fields, name)? {
        Tok::Int(v) if *v >= 0 => Ok(*v as usize),
        _ => Err(format!("`{name}` is a count")),
    }
}
