//! The CIN parser: the index notation grammar plus
//!
//! ```text
//! stmt := 'forall' '(' NAME ',' stmt ')'
//!       | 'where' '(' stmt ',' stmt ')'
//!       | 'sequence' '(' stmt ',' stmt ')'
//!       | access ('=' | '+=') expr          (no `sum` in expr)
//! ```
//! A tensor named only as the left-hand side of a `where` producer is a temporary.

use super::{ConcreteNotation, LoopAttrs, Stmt, StmtId};
use crate::id::Arena;
use crate::notation::parse::{Parser, Tok};
use crate::notation::{Expr, ParseError, TensorId};

/// Parses CIN text.
pub fn parse_concrete(text: &str) -> Result<ConcreteNotation, ParseError> {
    let mut p = Parser::new(text)?;
    let mut stmts = Arena::new();
    let mut temporaries = Vec::new();
    let root = stmt(&mut p, &mut stmts, &mut temporaries)?;
    if !p.at_end() {
        return Err(p.error_at_token(p.at, "unexpected text after the statement"));
    }
    Ok(ConcreteNotation {
        tensors: p.tensors,
        temporaries,
        vars: p.vars,
        exprs: p.exprs,
        stmts,
        root,
        derivations: Default::default(),
        workspaces: Vec::new(),
    })
}

fn keyword(p: &Parser<'_>) -> Option<&'static str> {
    match (p.peek(), p.peek_ahead(1)) {
        (Some(Tok::Name(n)), Some(Tok::LParen)) => match n.as_str() {
            "forall" => Some("forall"),
            "where" => Some("where"),
            "sequence" => Some("sequence"),
            _ => None,
        },
        _ => None,
    }
}

fn stmt(
    p: &mut Parser<'_>,
    stmts: &mut Arena<StmtId, Stmt>,
    temporaries: &mut Vec<TensorId>,
) -> Result<StmtId, ParseError> {
    let Some(kw) = keyword(p) else { return assignment(p, stmts) };
    p.at += 2;
    p.enter()?;
    let s = match kw {
        "forall" => {
            let (_, name) = p.name("the loop's index variable")?;
            let var = p.var(&name);
            p.expect(Tok::Comma, "`,` after the loop variable")?;
            let body = stmt(p, stmts, temporaries)?;
            let mut attrs = LoopAttrs::default();
            while p.eat(&Tok::Comma) {
                attrs.parse_one(p)?;
            }
            Stmt::Forall { var, body, attrs }
        }
        _ => {
            let first = stmt(p, stmts, temporaries)?;
            p.expect(Tok::Comma, &format!("`,` between the two statements of `{kw}`"))?;
            let second = stmt(p, stmts, temporaries)?;
            if kw == "where" {
                for t in written(stmts, second) {
                    if !temporaries.contains(&t) {
                        temporaries.push(t);
                    }
                }
                Stmt::Where { consumer: first, producer: second }
            } else {
                Stmt::Sequence { first, second }
            }
        }
    };
    p.expect(Tok::RParen, &format!("`)` closing `{kw}(`"))?;
    p.leave();
    Ok(stmts.push(s))
}

/// The tensors a statement assigns.
fn written(stmts: &Arena<StmtId, Stmt>, s: StmtId) -> Vec<TensorId> {
    match &stmts[s] {
        Stmt::Assign { lhs, .. } => vec![lhs.tensor],
        Stmt::Forall { body, .. } => written(stmts, *body),
        Stmt::Where { consumer, producer } => [written(stmts, *consumer), written(stmts, *producer)].concat(),
        Stmt::Sequence { first, second } => [written(stmts, *first), written(stmts, *second)].concat(),
    }
}

fn assignment(p: &mut Parser<'_>, stmts: &mut Arena<StmtId, Stmt>) -> Result<StmtId, ParseError> {
    let (lhs, op) = p.assignment_head()?;
    let rhs_start = p.peek_offset();
    let rhs = p.expr()?;
    if p.exprs.iter().any(|(_, e)| matches!(e, Expr::Sum(..))) {
        return Err(
            p.error_span(rhs_start, "`sum` belongs to index notation; in CIN a reduction is a `forall` with `+=`")
        );
    }
    Ok(stmts.push(Stmt::Assign { lhs, op, rhs }))
}
