//! The text of a schedule: taco's commands with commas or semicolons between them, and the
//! marks a printed `forall` carries.

use super::{AssembleStrategy, BoundType, Command, LoopAttrs, MergeStrategy, OutputRace, ParallelUnit};
use crate::concrete::WorkspacePolicy;
use crate::notation::ParseError;
use crate::notation::parse::{Parser, Tok};

impl LoopAttrs {
    /// Parses one mark after a `forall` body (the `,` already consumed).
    pub(crate) fn parse_one(&mut self, p: &mut Parser<'_>) -> Result<(), ParseError> {
        let (_, name) = p.name("a loop mark: parallelize(...), unroll(...) or bound(...)")?;
        if !["parallelize", "unroll", "bound"].contains(&name.as_str()) {
            return Err(p.error_prev("unknown loop mark: expected parallelize, unroll or bound"));
        }
        p.expect(Tok::LParen, &format!("`(` after `{name}`"))?;
        match name.as_str() {
            "parallelize" => {
                let unit = named(p, ParallelUnit::from_name, ParallelUnit::NAMES)?;
                p.expect(Tok::Comma, "`,` after the parallel unit")?;
                let race = named(p, OutputRace::from_name, OutputRace::NAMES)?;
                self.parallel = Some((unit, race));
            }
            "unroll" => self.unroll = Some(int(p)? as u32),
            "bound" => {
                let v = int(p)?;
                p.expect(Tok::Comma, "`,` after the bound")?;
                self.bound = Some((v, named(p, BoundType::from_name, BoundType::NAMES)?));
            }
            _ => unreachable!("checked above"),
        }
        p.expect(Tok::RParen, &format!("`)` closing `{name}(`"))
    }
}

/// A workspace policy as nm-ism names them: `auto`, `dense`, `bucket`, `hash`, `hash(L)`,
/// `coord`, `map` or `vector`.
fn policy(p: &mut Parser<'_>) -> Result<WorkspacePolicy, ParseError> {
    let (_, mut name) = p.name("a workspace policy: auto, dense, bucket, hash, coord, map or vector")?;
    if name == "hash" && p.eat(&Tok::LParen) {
        let l = int(p)?;
        p.expect(Tok::RParen, "`)` closing `hash(`")?;
        name = format!("hash({l})");
    }
    name.parse().map_err(|e: String| p.error_prev(&e))
}

fn named<T>(p: &mut Parser<'_>, from: fn(&str) -> Option<T>, names: &str) -> Result<T, ParseError> {
    let (_, n) = p.name(&format!("one of: {}", names.trim()))?;
    from(&n).ok_or_else(|| p.error_prev(&format!("expected one of: {}", names.trim())))
}

fn int(p: &mut Parser<'_>) -> Result<u64, ParseError> {
    match p.next_kind() {
        Some(Tok::Int(v)) if v >= 0 && v <= u32::MAX as i64 => Ok(v as u64),
        // (An integer beyond i64 lexes as a float.)
        Some(Tok::Int(v)) if v > 0 => Err(p.error_prev(&format!("too large: at most {}", u32::MAX))),
        Some(Tok::Float(v)) if v > 0.0 && v.fract() == 0.0 => {
            Err(p.error_prev(&format!("too large: at most {}", u32::MAX)))
        }
        _ => Err(p.error_prev("expected a non-negative integer")),
    }
}

/// Parses a schedule: commands separated by `;` (the `-s=` option of the command line).
pub fn parse_schedule(text: &str) -> Result<Vec<Command>, ParseError> {
    let mut p = Parser::new(text)?;
    let mut out = Vec::new();
    while !p.at_end() {
        let (_, name) = p.name("a scheduling command")?;
        const COMMANDS: [&str; 11] = [
            "reorder",
            "split",
            "divide",
            "fuse",
            "pos",
            "parallelize",
            "unroll",
            "bound",
            "precompute",
            "mergeby",
            "assemble",
        ];
        if !COMMANDS.contains(&name.as_str()) {
            return Err(p.error_prev(
                "unknown scheduling command: expected reorder, split, divide, fuse, pos, parallelize, unroll, bound, \
                 precompute, mergeby or assemble",
            ));
        }
        p.expect(Tok::LParen, &format!("`(` after `{name}`"))?;
        let var = |p: &mut Parser<'_>| p.name("an index variable").map(|(_, n)| n);
        let comma = |p: &mut Parser<'_>| p.expect(Tok::Comma, "`,` between arguments");
        let cmd = match name.as_str() {
            "reorder" => {
                let mut vars = vec![var(&mut p)?];
                while p.eat(&Tok::Comma) {
                    vars.push(var(&mut p)?);
                }
                Command::Reorder(vars)
            }
            "split" | "divide" => {
                let i = var(&mut p)?;
                comma(&mut p)?;
                let i0 = var(&mut p)?;
                comma(&mut p)?;
                let i1 = var(&mut p)?;
                comma(&mut p)?;
                let n = int(&mut p)?;
                if name == "split" { Command::Split(i, i0, i1, n) } else { Command::Divide(i, i0, i1, n) }
            }
            "mergeby" => {
                let i = var(&mut p)?;
                comma(&mut p)?;
                Command::MergeBy(i, named(&mut p, MergeStrategy::from_name, MergeStrategy::TACO_NAMES)?)
            }
            "assemble" => {
                let (_, t) = p.name("the result tensor")?;
                comma(&mut p)?;
                let strategy = named(&mut p, AssembleStrategy::from_name, AssembleStrategy::TACO_NAMES)?;
                if p.eat(&Tok::Comma) {
                    let (_, b) = p.name("true or false")?;
                    if b != "true" && b != "false" {
                        return Err(p.error_prev("expected true or false"));
                    }
                }
                Command::Assemble(t, strategy)
            }
            "fuse" | "pos" => {
                let a = var(&mut p)?;
                comma(&mut p)?;
                let b = var(&mut p)?;
                comma(&mut p)?;
                let c = p
                    .name(if name == "pos" { "the tensor whose positions to iterate" } else { "an index variable" })?
                    .1;
                if name == "pos" { Command::Pos(a, b, c) } else { Command::Fuse(a, b, c) }
            }
            "parallelize" => {
                let i = var(&mut p)?;
                comma(&mut p)?;
                let sequential = matches!(p.peek_name().as_deref(), Some("NotParallel" | "not_parallel"));
                if sequential {
                    p.name("NotParallel")?;
                }
                let units = format!("NotParallel {}", ParallelUnit::TACO_NAMES);
                let unit = if sequential { None } else { Some(named(&mut p, ParallelUnit::from_name, &units)?) };
                comma(&mut p)?;
                let race = named(&mut p, OutputRace::from_name, OutputRace::TACO_NAMES)?;
                match unit {
                    Some(unit) => Command::Parallelize(i, unit, race),
                    None => Command::NotParallel(i),
                }
            }
            "unroll" => {
                let i = var(&mut p)?;
                comma(&mut p)?;
                Command::Unroll(i, int(&mut p)?)
            }
            "bound" => {
                let i = var(&mut p)?;
                comma(&mut p)?;
                // `bound(i, b, kind)` bounds `i` itself, as `bound(i, i, b, kind)` does.
                let ib = if matches!(p.peek(), Some(Tok::Int(_))) {
                    i.clone()
                } else {
                    let ib = var(&mut p)?;
                    comma(&mut p)?;
                    ib
                };
                let v = int(&mut p)?;
                comma(&mut p)?;
                Command::Bound(i, ib, v, named(&mut p, BoundType::from_name, BoundType::TACO_NAMES)?)
            }
            "precompute" => {
                let e = p.expr()?;
                let mut text = String::new();
                let scope = crate::notation::Scope { tensors: &p.tensors, vars: &p.vars, exprs: &p.exprs };
                scope.write_expr(&mut text, e).expect("writing to a String");
                comma(&mut p)?;
                let i = var_list(&mut p)?;
                comma(&mut p)?;
                let iw = var_list(&mut p)?;
                let w = if p.eat(&Tok::Comma) { Some(p.name("the workspace's name")?.1) } else { None };
                let policy = if w.is_some() && p.eat(&Tok::Comma) { Some(policy(&mut p)?) } else { None };
                Command::Precompute(text, i, iw, w, policy)
            }
            _ => unreachable!("checked against COMMANDS"),
        };
        p.expect(Tok::RParen, &format!("`)` closing `{name}(`"))?;
        out.push(cmd);
        if p.eat(&Tok::RParen) {
            return Err(p.error_prev("an unmatched `)`: more right parentheses than left"));
        }
        if !p.at_end() && !p.eat(&Tok::Semicolon) {
            p.expect(Tok::Comma, "`,` or `;` between commands")?;
        }
    }
    Ok(out)
}

/// An index variable, or taco's list of them in braces (`{i}`, `{i, j}`).
fn var_list(p: &mut Parser<'_>) -> Result<Vec<String>, ParseError> {
    if !p.eat(&Tok::LBrace) {
        return Ok(vec![p.name("an index variable")?.1]);
    }
    let mut vars = vec![p.name("an index variable")?.1];
    while p.eat(&Tok::Comma) {
        vars.push(p.name("an index variable")?.1);
    }
    p.expect(Tok::RBrace, "`}` closing the list of variables")?;
    Ok(vars)
}
