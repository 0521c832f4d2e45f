//! Compressed and singleton levels: a compressed level keeps the coordinates of parent
//! position `p` in `crd[pos[p]..pos[p+1]]`; a singleton keeps one per parent position, in
//! `crd[p]`. Walked position by position (segment by segment where a coordinate repeats), or
//! searched for one coordinate where every variable of its subscript is bound before it is
//! reached.

use super::{Coordinates, lower_bound};
use crate::ir::build::{bin, int, load, var};
use crate::ir::{ArrayId, BinOp, Expr, ScalarType, Stmt};
use crate::lower::{AccessId, Lowerer};
use nm_ir::notation::IndexTerm;

/// The positions of parent positions `[parent, parent_end)`: from `pos`.
pub(super) fn range(pos: ArrayId, parent: Expr, parent_end: Expr) -> (Expr, Expr) {
    (load(pos, parent), load(pos, parent_end))
}

/// A compressed or singleton level searched for one coordinate (see
/// [`Lowerer::search_coordinate`]).
pub(in crate::lower) struct Found {
    /// The search, which leaves the level's position resolved.
    pub(in crate::lower) search: Vec<Stmt>,
    /// Whether the coordinate is stored.
    pub(in crate::lower) stored: Expr,
    /// For a non-unique level, what finds the end of the coordinate's segment (the range of
    /// its children).
    pub(in crate::lower) segment: Option<Vec<Stmt>>,
}

impl Lowerer<'_> {
    /// Searches access `k`'s ordered compressed or singleton level `l` (its parent resolved)
    /// for the coordinate `term`, every variable of which is bound: the level's position is
    /// resolved to the first entry at or past it (and, for a non-unique level, its segment
    /// opened), and the caller runs what is inside only where [`Found::stored`] holds.
    pub(in crate::lower) fn search_coordinate(&mut self, k: AccessId, l: usize, term: &IndexTerm) -> Found {
        let o = self.operand(k).clone();
        let prefix = self.access_name(k);
        let parent = if l == 0 { int(0) } else { var(self.positions[k][l - 1].expect("resolved in order")) };
        let range = self.level_range(&o, k, l, parent);
        let p = self.f.fresh_var(&format!("{prefix}{l}_found"), ScalarType::Index);
        let end = self.f.fresh_var(&format!("{prefix}{l}_last"), ScalarType::Index);
        let crd = Coordinates::Array(o.levels[l].crd().expect("compressed or singleton"));
        let coordinate = self.affine(term, None);
        let mut search = vec![Stmt::Decl(p, range.0), Stmt::Decl(end, range.1)];
        search.extend(lower_bound(&mut self.f, p, end, &crd, coordinate.clone()));
        let stored = bin(BinOp::And, bin(BinOp::Lt, var(p), var(end)), bin(BinOp::Eq, crd.at(var(p)), coordinate));
        self.positions[k][l] = Some(p);
        let unique = o.levels[l].is_unique();
        let segment = (!unique).then(|| {
            // Every entry with that coordinate: the children's range (COO's next level).
            let segend = self.f.fresh_var(&format!("{prefix}{l}_segend"), ScalarType::Index);
            let same = bin(BinOp::Eq, crd.at(var(segend)), crd.at(var(p)));
            self.segments.push((k, l, segend));
            vec![
                Stmt::Decl(segend, bin(BinOp::Add, var(p), int(1))),
                Stmt::While {
                    cond: bin(BinOp::And, bin(BinOp::Lt, var(segend), var(end)), same),
                    body: vec![Stmt::Assign(segend, bin(BinOp::Add, var(segend), int(1)))],
                },
            ]
        });
        Found { search, stored, segment }
    }
}
