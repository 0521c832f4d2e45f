//! The row workspace: a dense row for the last level of a sparse result that the loops
//! write out of order, its marks a bitmap, appended in coordinate order after each row.

use super::*;

/// A dense workspace for the last level of a sparse result the loops write out of order —
/// Gustavson's SpGEMM `forall i, k, j: A(i,j) += B(i,k) C(k,j)` into CSR. Values accumulate in
/// `values` by coordinate; `mark` flags the coordinates touched (a bit each) and `list` records
/// them in arrival order. After the loops below the result's other levels, the row is appended in
/// coordinate order and the workspace cleared: the listed coordinates sorted when they are few,
/// read back from `mark` when they are many (a scan costs a step per word of 64 marks and one
/// per coordinate, a radix sort two or three passes over the coordinates: the scan wins once
/// the coordinates outnumber about half the words — `SORT_BELOW`; at `n / 16`, as with one
/// mark per coordinate, bcsstk16's A·A — 213 of 4,884 per row — took 36–52 ms, now 26–35).
/// Cost: O(size) memory once, O(touched) per row.
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
    pub(super) list: ArrayId,
    /// The sort's scratch.
    pub(super) sorted: ArrayId,
    /// Coordinates listed in the current row.
    pub(super) count: VarId,
    /// Products added into the current row.
    pub(super) products: VarId,
    /// Whether the row marks its coordinates without a branch: set after a row that added
    /// fewer than `BRANCHLESS_BELOW` products per coordinate (see `resolved_assignment`).
    pub(super) branchless: VarId,
    /// Whether the region is being lowered.
    pub(super) active: bool,
}

/// A row workspace's coordinates are sorted when they are fewer than `size / SORT_BELOW`, else
/// read back from the marks.
pub(super) const SORT_BELOW: i64 = 128;

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

impl Lowerer<'_> {
    /// The loops below the result's outer levels, accumulating into the row workspace, then
    /// the row appended in coordinate order and the workspace cleared.
    pub(super) fn workspace_region(
        &mut self,
        loops: &[(IndexVarId, bool)],
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        let mut w = self.workspace.clone().expect("a workspace");
        let mut out = vec![Stmt::Decl(w.count, int(0)), Stmt::Decl(w.products, int(0))];
        w.active = true;
        self.workspace = Some(w.clone());
        let inner = self.nest(loops, lhs, op, rhs);
        w.active = false;
        self.workspace = Some(w.clone());
        out.extend(inner?);
        let a = self.assembly.as_ref().expect("a sparse result");
        let name = self.cin.vars[w.var].name.clone();
        // Appends coordinate `j` and clears its slot.
        let drain = |j: VarId| {
            let mut s = a.append(j, load(w.values, var(j)));
            s.push(Stmt::Store { array: w.values, index: var(j), value: float(0.0), accumulate: false });
            // Every listed coordinate is drained: its whole word of marks can go.
            s.push(Stmt::Store { array: w.mark, index: word(var(j)), value: int(0), accumulate: false });
            s
        };
        let (sorted_j, q) = (self.f.var(&name, ScalarType::Index), self.f.var(&format!("{name}_q"), ScalarType::Index));
        // Many coordinates: the list is rewritten in order from the marks, a word of 64 at a
        // time, one step per set bit (a branch per flag, mispredicted on every touched
        // coordinate, cost a 2-D convolution into DCSR at 99% sparsity 70% of its time).
        let (w_q, bits, base) = (
            self.f.var(&format!("{name}_word"), ScalarType::Index),
            self.f.var(&format!("{name}_bits"), ScalarType::Index),
            self.f.var(&format!("{name}_base"), ScalarType::Index),
        );
        let scan = vec![
            Stmt::Assign(w.count, int(0)),
            Stmt::For {
                var: w_q,
                start: int(0),
                end: int(w.size as i64 / 64 + 1),
                body: vec![
                    Stmt::Decl(bits, load(w.mark, var(w_q))),
                    Stmt::Decl(base, bin(BinOp::Mul, var(w_q), int(64))),
                    Stmt::While {
                        cond: bin(BinOp::Ne, var(bits), int(0)),
                        // The lowest bit cleared is the only step carried from bit to bit
                        // (one cycle; shifting the word past it took four).
                        body: vec![
                            Stmt::Store {
                                array: w.list,
                                index: var(w.count),
                                value: bin(
                                    BinOp::Add,
                                    var(base),
                                    Expr::Unary(UnOp::TrailingZeros, Box::new(var(bits))),
                                ),
                                accumulate: false,
                            },
                            Stmt::Assign(w.count, bin(BinOp::Add, var(w.count), int(1))),
                            Stmt::Assign(bits, Expr::Unary(UnOp::ClearLowestBit, Box::new(var(bits)))),
                        ],
                    },
                ],
                parallel: false,
            },
        ];
        out.push(Stmt::If {
            cond: bin(BinOp::Lt, bin(BinOp::Mul, var(w.count), int(SORT_BELOW)), int(w.size as i64)),
            then: vec![Stmt::Sort { array: w.list, start: int(0), end: var(w.count), scratch: w.sorted }],
            otherwise: scan,
        });
        let mut listed = vec![Stmt::Decl(sorted_j, load(w.list, var(q)))];
        listed.extend(drain(sorted_j));
        out.push(Stmt::Assign(
            w.branchless,
            one_if(bin(BinOp::Lt, var(w.products), bin(BinOp::Mul, var(w.count), int(BRANCHLESS_BELOW)))),
        ));
        out.push(Stmt::For { var: q, start: int(0), end: var(w.count), body: listed, parallel: false });
        Ok(out)
    }
}
