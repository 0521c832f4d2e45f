//! Band levels: the coordinates of parent position `p` are one run, `first[p]`,
//! `first[p] + 1`, … at positions `pos[p]..pos[p+1]` (zeros inside the run stored). Walked like
//! a compressed level, with each coordinate computed from its position instead of loaded.

use super::Coordinates;
use crate::ir::build::{bin, load};
use crate::ir::{ArrayId, BinOp, Expr};

/// The coordinates below `parent`: position `q` holds `q + first[parent] - pos[parent]`.
pub(super) fn coordinates(pos: ArrayId, first: ArrayId, parent: &Expr) -> Coordinates {
    Coordinates::Run { shift: bin(BinOp::Sub, load(first, parent.clone()), load(pos, parent.clone())) }
}
