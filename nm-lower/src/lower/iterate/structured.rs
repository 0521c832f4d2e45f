//! Structured N:M levels: the level's coordinates are cut into blocks of M, and every block of
//! every parent position keeps exactly N positions, whose offsets inside the block are packed
//! metadata (⌈log2 M⌉ bits each). No `pos` array: a parent's positions are found by
//! multiplication, a position's coordinate by its block and its offset.

use super::Coordinates;
use crate::ir::build::{bin, int, load, var};
use crate::ir::{ArrayId, BinOp, Expr, Stmt, VarId};

/// The positions of parent positions `[parent, parent_end)`: `per_parent` each.
pub(super) fn range(per_parent: usize, parent: Expr, parent_end: Expr) -> (Expr, Expr) {
    let per = int(per_parent as i64);
    (bin(BinOp::Mul, parent, per.clone()), bin(BinOp::Mul, parent_end, per))
}

/// The coordinates below `parent`, whose first position is `parent · per_parent`.
pub(super) fn coordinates(meta: ArrayId, n: u32, m: u32, per_parent: usize, parent: &Expr) -> Coordinates {
    let base = bin(BinOp::Mul, parent.clone(), int(per_parent as i64));
    Coordinates::Structured { meta, n, m, base }
}

/// The coordinate at position `p`: block `(p - base) / N` times M, plus the offset `meta` holds
/// for `p`.
pub(super) fn coordinate(meta: ArrayId, n: u32, m: u32, base: &Expr, p: Expr) -> Expr {
    let bits = nm_format::metadata_bits(m) as i64;
    // Positions are never negative: powers of two divide by shifts (a signed
    // division by 2 or 64 is a shift plus a sign fix-up in C).
    let divide = |e: Expr, d: i64| {
        if d > 0 && (d as u64).is_power_of_two() {
            bin(BinOp::Shr, e, int(d.trailing_zeros() as i64))
        } else {
            bin(BinOp::Div, e, int(d))
        }
    };
    let block = divide(bin(BinOp::Sub, p.clone(), base.clone()), n as i64);
    let offset = if bits == 0 {
        int(0)
    } else {
        // Bit `p·bits` of the words, reaching into the next word when it straddles two.
        let bit = bin(BinOp::Mul, p, int(bits));
        let word = divide(bit.clone(), 64);
        let shift = bin(BinOp::BitAnd, bit, int(63));
        let low = bin(BinOp::Shr, load(meta, word.clone()), shift.clone());
        let high = bin(BinOp::Shl, load(meta, bin(BinOp::Add, word, int(1))), bin(BinOp::Sub, int(64), shift.clone()));
        // A width that divides 64 (nv24's 2 bits, M = 16's 4) never straddles.
        let joined = if 64 % bits == 0 {
            low
        } else {
            let straddles = bin(BinOp::Lt, int(64 - bits), shift);
            Expr::Select(Box::new(straddles), Box::new(bin(BinOp::BitOr, low.clone(), high)), Box::new(low))
        };
        bin(BinOp::BitAnd, joined, int((1i64 << bits) - 1))
    };
    bin(BinOp::Add, bin(BinOp::Mul, block, int(m as i64)), offset)
}

/// Co-iterated, a structured level ends at its last entry inside the loop's range `size`: the
/// kept entries of the last block's zero padding (coordinates past the size, at most N - 1 of
/// them, all at the end) must not reach a merge. Nothing where no block reaches past it
/// (`size` a multiple of M and the dimension no larger).
pub(in crate::lower) fn trim_padding(
    p: VarId,
    end: VarId,
    crd: &Coordinates,
    size: usize,
    dimension: usize,
) -> Option<Stmt> {
    let Coordinates::Structured { m, .. } = crd else { return None };
    if size.is_multiple_of(*m as usize) && dimension <= size {
        return None;
    }
    Some(Stmt::While {
        cond: bin(
            BinOp::And,
            bin(BinOp::Lt, var(p), var(end)),
            bin(BinOp::Le, int(size as i64), crd.at(bin(BinOp::Sub, var(end), int(1)))),
        ),
        body: vec![Stmt::Assign(end, bin(BinOp::Sub, var(end), int(1)))],
    })
}

/// Whether the loop over a structured level's coordinates must test each against the loop's
/// range `size`: the last block reaches past it (zero padding), or the dimension does.
pub(in crate::lower) fn needs_bound(m: usize, size: usize, dimension: usize) -> bool {
    !size.is_multiple_of(m) || dimension > size
}
