//! The searches of sorted levels: a first position at or past a coordinate, and the hints
//! that let the next search of the same parent start where the last one ended.

use super::Coordinates;
use crate::ir::build::{bin, int, var};
use crate::ir::{ArrayId, BinOp, ElemType, Expr, Function, Role, ScalarType, Stmt, VarId};
use crate::lower::Lowerer;

/// Moves `p` to the first position in `[p, end)` whose coordinate is at least `target`
/// (binary search; the level's coordinates are sorted). The two answers a convolution asks
/// for most — the range's first entry (a window already starts there) and its end (a window
/// reaching past the row) — are checked first, in O(1), then a few entries forward from the
/// start and back from the end: a search per filter position cost a convolution a quarter of
/// its time.
pub(in crate::lower) fn lower_bound(
    f: &mut Function,
    p: VarId,
    end: VarId,
    raw: &Coordinates,
    target: Expr,
) -> Vec<Stmt> {
    let high = f.fresh_var("high", ScalarType::Index);
    let mid = f.fresh_var("mid", ScalarType::Index);
    let top = f.fresh_var("top", ScalarType::Index);
    let search = vec![
        Stmt::Decl(high, var(top)),
        Stmt::While {
            cond: bin(BinOp::Lt, var(p), var(high)),
            body: vec![
                Stmt::Decl(mid, bin(BinOp::Div, bin(BinOp::Add, var(p), var(high)), int(2))),
                Stmt::If {
                    cond: bin(BinOp::Lt, raw.at(var(mid)), target.clone()),
                    then: vec![Stmt::Assign(p, bin(BinOp::Add, var(mid), int(1)))],
                    otherwise: vec![Stmt::Assign(high, var(mid))],
                },
            ],
        },
    ];
    // A few steps forward first: a window slid by one usually moves by as few entries.
    let steps = f.fresh_var("steps", ScalarType::Index);
    let mut probe = vec![
        Stmt::Decl(steps, int(0)),
        Stmt::While {
            cond: bin(BinOp::And, bin(BinOp::Lt, var(steps), int(4)), bin(BinOp::Lt, raw.at(var(p)), target.clone())),
            body: vec![
                Stmt::Assign(p, bin(BinOp::Add, var(p), int(1))),
                Stmt::Assign(steps, bin(BinOp::Add, var(steps), int(1))),
            ],
        },
    ];
    // Then a few steps back from the end: a window nearly as long as the row (a convolution's
    // window is the row less the filter) ends within a few entries of the row's end.
    let back = vec![
        Stmt::Decl(top, bin(BinOp::Sub, var(end), int(1))),
        Stmt::Assign(steps, int(0)),
        Stmt::While {
            cond: bin(
                BinOp::And,
                bin(BinOp::And, bin(BinOp::Lt, var(steps), int(4)), bin(BinOp::Lt, var(p), var(top))),
                bin(BinOp::Le, target.clone(), raw.at(bin(BinOp::Sub, var(top), int(1)))),
            ),
            body: vec![
                Stmt::Assign(top, bin(BinOp::Sub, var(top), int(1))),
                Stmt::Assign(steps, bin(BinOp::Add, var(steps), int(1))),
            ],
        },
        // `top` holds an entry at least the target; the one before it is below it (the answer)
        // unless the steps ran out first: then the answer is in (p, top].
        Stmt::If {
            cond: bin(BinOp::Lt, raw.at(bin(BinOp::Sub, var(top), int(1))), target.clone()),
            then: vec![Stmt::Assign(p, var(top))],
            otherwise: search,
        },
    ];
    probe.push(Stmt::If { cond: bin(BinOp::Lt, raw.at(var(p)), target.clone()), then: back, otherwise: vec![] });
    let last = bin(BinOp::Sub, var(end), int(1));
    vec![Stmt::If {
        cond: bin(BinOp::And, bin(BinOp::Lt, var(p), var(end)), bin(BinOp::Lt, raw.at(var(p)), target.clone())),
        then: vec![Stmt::If {
            cond: bin(BinOp::Lt, raw.at(last), target),
            then: vec![Stmt::Assign(p, var(end))],
            // The answer is in (p, end - 1]: the last entry is at least the target.
            otherwise: probe,
        }],
        otherwise: vec![],
    }]
}

impl Lowerer<'_> {
    /// The hint arrays of a searched level (created once, zeroed when the kernel starts): per
    /// parent position, where its last search ended and 1 + the coordinate it searched for.
    /// They belong to the tensor's level, not to one access: every access of the tensor may
    /// share them, as a search for a coordinate may start wherever a search for a smaller
    /// one in the same parent ended, whichever access made it.
    pub(in crate::lower) fn search_hints(&mut self, l: usize, pos: ArrayId) -> (ArrayId, ArrayId) {
        let tname = match &self.f.arrays[pos].role {
            Role::Pos { tensor, .. } => tensor.clone(),
            _ => self.f.arrays[pos].name.clone(),
        };
        if let Some(&(_, _, at, from)) = self.hints.iter().find(|h| h.0 == pos && h.1 == l) {
            return (at, from);
        }
        let at = self.f.fresh_array(&format!("{tname}{l}_hint_at"), ElemType::I64, Role::Scratch, true);
        let from = self.f.fresh_array(&format!("{tname}{l}_hint_from"), ElemType::I64, Role::Scratch, true);
        for array in [at, from] {
            self.prologue.push(Stmt::Resize { array, len: Expr::Len(pos) });
            let q = self.f.var("hint_q", ScalarType::Index);
            self.prologue.push(Stmt::For {
                var: q,
                start: int(0),
                end: Expr::Len(pos),
                body: vec![Stmt::Store { array, index: var(q), value: int(0), accumulate: false }],
                parallel: false,
            });
        }
        self.hints.push((pos, l, at, from));
        (at, from)
    }
}
