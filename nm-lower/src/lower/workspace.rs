//! The row workspace: a dense row for the last level of a sparse result that the loops
//! write out of order, its marks a bitmap, appended in coordinate order after each row.

use super::{Inside, LowerError, Lowerer};
use crate::ir::build::{bin, float, int, load, var};
use crate::ir::{ArrayId, BinOp, Expr, ScalarType, Stmt, UnOp, VarId};
use nm_ir::notation::IndexVarId;

/// A dense workspace for the last level of a sparse result the loops write out of order —
/// Gustavson's SpGEMM `forall i, k, j: A(i,j) += B(i,k) C(k,j)` into CSR. Values accumulate in
/// `values` by coordinate; `mark` flags the coordinates touched (a bit each) and, in rows wider
/// than [`NARROW`], a [`RowList`] records them in arrival order where the row keeps a list.
/// After the loops below the result's other levels, the row is appended in coordinate order,
/// each coordinate's slot cleared as it goes: the listed coordinates sorted
/// when they are few, the marks read back when they are many or were not listed (a scan costs a
/// step per word of 64 marks and one per coordinate, a radix sort two or three passes over the
/// coordinates: the scan wins once the coordinates outnumber about half the words —
/// `SORT_BELOW`; at `n / 16`, as with one mark per coordinate, an A·A with a few percent of
/// each row touched was markedly slower). Cost: O(size) memory once, O(touched) per listed row,
/// O(size / 64 + touched) per row that is not.
#[derive(Clone, Debug)]
pub(super) struct RowWorkspace {
    /// The result's last index variable.
    pub(super) var: IndexVarId,
    /// Its extent.
    pub(super) size: usize,
    /// How many loops enclose the region it covers (the result's other levels).
    pub(super) outer: usize,
    pub(super) values: ArrayId,
    pub(super) mark: ArrayId,
    /// The coordinate list, for rows wider than [`NARROW`].
    pub(super) list: Option<RowList>,
    /// Coordinates listed in the current row (counted as they are appended where it keeps no
    /// list).
    pub(super) count: VarId,
    /// Products added into the current row.
    pub(super) products: VarId,
    /// Whether the row marks its coordinates without a branch: set after a row that added
    /// fewer than `BRANCHLESS_BELOW` products per coordinate (see `resolved_assignment`).
    pub(super) branchless: VarId,
    /// Whether the region is being lowered.
    pub(super) active: bool,
    /// Whether the loops around the assignment marked its coordinates and counted its
    /// products already (a pass over entries marks each entry's outputs at once).
    pub(super) marked: bool,
}

impl RowWorkspace {
    /// The kernel's set-up of the workspace: its arrays sized once for a whole row, its
    /// choices started.
    pub(super) fn prologue(&self) -> Vec<Stmt> {
        let mut body = vec![
            Stmt::Resize { array: self.values, len: int(self.size as i64) },
            Stmt::Resize { array: self.mark, len: int(self.size as i64 / 64 + 1) },
            Stmt::Decl(self.branchless, int(0)),
        ];
        if let Some(l) = self.list {
            body.push(Stmt::Decl(l.listing, int(1)));
            // One slot more: a branchless touch writes `list[count]` before it knows it is new.
            body.push(Stmt::Resize { array: l.coords, len: int(self.size as i64 + 1) });
            // Rows are sorted only when they list fewer than size / SORT_BELOW coordinates.
            body.push(Stmt::Resize { array: l.sorted, len: int(self.size as i64 / SORT_BELOW + 1) });
        }
        body
    }
}

/// What a row workspace wider than [`NARROW`] keeps besides its marks.
#[derive(Clone, Copy, Debug)]
pub(super) struct RowList {
    /// The row's coordinates in arrival order.
    pub(super) coords: ArrayId,
    /// The sort's scratch.
    pub(super) sorted: ArrayId,
    /// Whether the current row lists its coordinates: set after a row that would have been
    /// sorted (`SORT_BELOW`); other rows only mark theirs and are read back from the marks.
    pub(super) listing: VarId,
}

/// A row workspace's coordinates are sorted when they are fewer than `size / SORT_BELOW`, else
/// read back from the marks.
pub(super) const SORT_BELOW: i64 = 128;

/// Rows at most this wide keep no list: their marks are read back (at most 32 words and a
/// step per coordinate), which costs less than listing every first touch: faster for 2-D
/// convolutions into DCSR and for every A·A measured with rows this narrow. Wider rows choose
/// at run time (`listing`): marking only, as here, made an A·A with wide, nearly empty rows
/// several times slower where every row did.
pub(super) const NARROW: usize = 2048;

/// A row workspace marks coordinates without a branch after a row that added fewer products
/// than this many per coordinate.
pub(super) const BRANCHLESS_BELOW: i64 = 4;

/// 1 where `cond` holds, else 0 (an index, to add without a branch).
pub(super) fn one_if(cond: Expr) -> Expr {
    Expr::Select(Box::new(cond), Box::new(int(1)), Box::new(int(0)))
}

/// The word of a row workspace's marks (one bit per coordinate) that holds coordinate `j`.
pub(super) fn word(j: Expr) -> Expr {
    bin(BinOp::Shr, j, int(6))
}

/// Sets `bits` in the word of marks that holds coordinate `j`.
pub(super) fn set_marks(mark: ArrayId, j: Expr, bits: Expr) -> Stmt {
    Stmt::Store {
        array: mark,
        index: word(j.clone()),
        value: bin(BinOp::BitOr, load(mark, word(j)), bits),
        accumulate: false,
    }
}

/// Sets the marks of coordinates `from..=to` (`from <= to`, at most 64 apart): one store to
/// each of the one or two words they fall in.
pub(super) fn mark_range(mark: ArrayId, from: VarId, to: VarId) -> Stmt {
    let low = bin(BinOp::Shl, int(-1), bin(BinOp::BitAnd, var(from), int(63)));
    let high = bin(BinOp::Shr, int(-1), bin(BinOp::Sub, int(63), bin(BinOp::BitAnd, var(to), int(63))));
    let or = |at: VarId, bits: Expr| set_marks(mark, var(at), bits);
    Stmt::If {
        cond: bin(BinOp::Eq, word(var(from)), word(var(to))),
        then: vec![or(from, bin(BinOp::BitAnd, low.clone(), high.clone()))],
        otherwise: vec![or(from, low), or(to, high)],
    }
}

impl Lowerer<'_> {
    /// The loops below the result's outer levels, accumulating into the row workspace, then
    /// the row appended in coordinate order and the workspace cleared.
    pub(super) fn workspace_region(&mut self, inside: Inside<'_>) -> Result<Vec<Stmt>, LowerError> {
        let Inside { loops, lhs, op, rhs } = inside;
        let mut w = self.workspace.clone().expect("a workspace");
        let mut out = vec![Stmt::Decl(w.count, int(0)), Stmt::Decl(w.products, int(0))];
        w.active = true;
        self.workspace = Some(w.clone());
        let inner = self.nest(Inside { loops, lhs, op, rhs });
        w.active = false;
        self.workspace = Some(w.clone());
        out.extend(inner?);
        let a = self.assembly.as_ref().expect("a sparse result");
        let name = self.cin.vars[w.var].name.clone();
        let j = self.f.var(&name, ScalarType::Index);
        // Appends coordinate `j` (room made before) and clears its slot.
        let mut drain = a.push(j, load(w.values, var(j)));
        drain.push(Stmt::Store { array: w.values, index: var(j), value: float(0.0), accumulate: false });
        // The marks read back a word of 64 at a time, one step per set bit, each coordinate
        // appended as it is found (a list rewritten in order and then read cost a sparse
        // convolution into DCSR a fifth of its time). Room is made for a
        // narrow row at once, for a wider one a word at a time (its count is not known before,
        // and room for a whole row could ask the memory check for gigabytes a wide result
        // never fills; the test per word costs a narrow row little).
        let (w_q, bits, base) = (
            self.f.var(&format!("{name}_word"), ScalarType::Index),
            self.f.var(&format!("{name}_bits"), ScalarType::Index),
            self.f.var(&format!("{name}_base"), ScalarType::Index),
        );
        let mut found =
            vec![Stmt::Decl(j, bin(BinOp::Add, var(base), Expr::Unary(UnOp::TrailingZeros, Box::new(var(bits)))))];
        found.extend(drain.clone());
        // The lowest bit cleared is the only step carried from bit to bit (one cycle;
        // shifting the word past it took four).
        found.push(Stmt::Assign(bits, Expr::Unary(UnOp::ClearLowestBit, Box::new(var(bits)))));
        let scan = Stmt::For {
            var: w_q,
            start: int(0),
            end: int(w.size as i64 / 64 + 1),
            body: [
                if w.list.is_none() { vec![] } else { vec![a.reserve(int(64))] },
                vec![
                    Stmt::Decl(bits, load(w.mark, var(w_q))),
                    Stmt::Store { array: w.mark, index: var(w_q), value: int(0), accumulate: false },
                    Stmt::Decl(base, bin(BinOp::Mul, var(w_q), int(64))),
                    Stmt::While { cond: bin(BinOp::Ne, var(bits), int(0)), body: found },
                ],
            ]
            .concat(),
            parallel: false,
        };
        // A row that kept no list: the marks read back, the coordinates counted as they were
        // appended.
        let unlisted = {
            let n = a.last_count();
            let first = self.f.var(&format!("{name}_first"), ScalarType::Index);
            vec![Stmt::Decl(first, var(n)), scan.clone(), Stmt::Assign(w.count, bin(BinOp::Sub, var(n), var(first)))]
        };
        if let Some(l) = w.list {
            let few = bin(BinOp::Lt, bin(BinOp::Mul, var(w.count), int(SORT_BELOW)), int(w.size as i64));
            let q = self.f.var(&format!("{name}_q"), ScalarType::Index);
            let mut listed = vec![Stmt::Decl(j, load(l.coords, var(q)))];
            listed.extend(drain);
            // Every listed coordinate is drained: its whole word of marks can go.
            listed.push(Stmt::Store { array: w.mark, index: word(var(j)), value: int(0), accumulate: false });
            let sorted = vec![Stmt::If {
                cond: few.clone(),
                then: vec![
                    a.reserve(var(w.count)),
                    Stmt::Sort { array: l.coords, start: int(0), end: var(w.count), scratch: l.sorted },
                    Stmt::For { var: q, start: int(0), end: var(w.count), body: listed, parallel: false },
                ],
                otherwise: vec![scan],
            }];
            out.push(Stmt::If { cond: bin(BinOp::Ne, var(l.listing), int(0)), then: sorted, otherwise: unlisted });
            out.push(Stmt::Assign(l.listing, one_if(few)));
        } else {
            out.push(a.reserve(int(w.size as i64)));
            out.extend(unlisted);
        }
        out.push(Stmt::Assign(
            w.branchless,
            one_if(bin(BinOp::Lt, var(w.products), bin(BinOp::Mul, var(w.count), int(BRANCHLESS_BELOW)))),
        ));
        Ok(out)
    }
}
