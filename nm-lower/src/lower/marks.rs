//! Where a reduction or a `where` producer adds a term: into a sparse result an element is
//! stored only where one was produced, which a flag set beside every addition records. The
//! flags that every path sets are hoisted out and dropped, so that the loops keep the shape of
//! plain reductions.

use crate::ir::build::{bin, int};
use crate::ir::{BinOp, Expr, Stmt, VarId};

/// `produced = 1`: a term reached the accumulator.
pub(super) fn mark(produced: VarId) -> Stmt {
    Stmt::Assign(produced, int(1))
}

/// Sets `produced` after every statement that adds a term into `acc`.
pub(super) fn mark_terms(body: &mut Vec<Stmt>, acc: VarId, produced: VarId) {
    let mut at = 0;
    while at < body.len() {
        match &mut body[at] {
            Stmt::Assign(v, _) if *v == acc => {
                body.insert(at + 1, mark(produced));
                at += 1;
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => mark_terms(body, acc, produced),
            Stmt::If { then, otherwise, .. } => {
                mark_terms(then, acc, produced);
                mark_terms(otherwise, acc, produced);
            }
            _ => {}
        }
        at += 1;
    }
}

/// Moves each mark that a `for` loop's body sets on every iteration before the loop, as
/// `if start < end { mark }`, innermost loops first: the loop then keeps the shape of a plain
/// reduction (see `partial_sums`), and a nest of loops that always add a term ends with the
/// mark at its top, unconditional.
pub(super) fn hoist_marks(body: &mut Vec<Stmt>, produced: VarId) {
    let mut at = 0;
    while at < body.len() {
        let hoisted = match &mut body[at] {
            Stmt::For { start, end, body: inner, .. } => {
                hoist_marks(inner, produced);
                let always = |list: &mut Vec<Stmt>| {
                    let found = list.contains(&mark(produced)) && !list.contains(&Stmt::Break);
                    if found {
                        list.retain(|s| *s != mark(produced));
                    }
                    found
                };
                // A dense loop's body sits in `if 1 { ... }` (a locate that always holds).
                let nested = inner.iter_mut().any(|s| match s {
                    Stmt::If { cond: Expr::Int(1), then, otherwise } if otherwise.is_empty() => always(then),
                    _ => false,
                });
                (always(inner) || nested).then(|| match (&*start, &*end) {
                    (Expr::Int(a), Expr::Int(b)) if a < b => mark(produced),
                    _ => Stmt::If {
                        cond: bin(BinOp::Lt, start.clone(), end.clone()),
                        then: vec![mark(produced)],
                        otherwise: vec![],
                    },
                })
            }
            Stmt::While { body: inner, .. } => {
                hoist_marks(inner, produced);
                None
            }
            Stmt::If { cond, then, otherwise } => {
                hoist_marks(then, produced);
                hoist_marks(otherwise, produced);
                // `if 1 { mark }`: the mark holds.
                (matches!(cond, Expr::Int(1)) && then.contains(&mark(produced))).then(|| {
                    then.retain(|s| *s != mark(produced));
                    mark(produced)
                })
            }
            _ => None,
        };
        if let Some(m) = hoisted {
            body.insert(at, m);
            at += 1;
        }
        at += 1;
    }
}
