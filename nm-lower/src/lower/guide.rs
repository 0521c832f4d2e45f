//! A `where` producer reading a compressed level along an outer loop: a guide cursor follows
//! the loop and hands the producer the children of the entry it stands on.

use super::iterate::Subrange;
use super::{AccessId, Lowerer};
use crate::ir::build::{bin, int, load, var};
use crate::ir::{BinOp, ScalarType, Stmt, VarId};

impl Lowerer<'_> {
    /// Whether a `where` producer's read of access `k`'s level `l` can follow an outer loop
    /// (see [`Self::guide`]).
    pub(super) fn guidable(&self, k: AccessId, l: usize) -> bool {
        let o = self.operand(k);
        let levels = o.format.levels();
        let window = self.windows.iter().rev().find(|w| w.0 == k && w.1 == l);
        o.levels[l].pos().is_some()
            && o.levels[l].is_ordered()
            && o.levels[l].is_unique()
            && l + 1 < levels.len()
            && o.levels[l + 1].pos().is_some()
            && o.levels[l + 1].structured().is_none()
            && (l == 0 || self.positions[k][l - 1].is_some())
            && !matches!(window, Some((_, _, Subrange::Rows { .. } | Subrange::Start(..))))
    }
    /// A `where` producer's read of a compressed level along an outer loop (`t = Σ_l C(k,l)`
    /// in the loop over `k`, C stored by columns): a cursor moves on to the loop's value, and
    /// the producer walks the children of the entry there — or none where the level has no
    /// entry, which is what a zero slice of C contributes to whatever the producer computes.
    /// Returns the cursor's declarations and the step each iteration starts with; the level
    /// stays resolved (and its children's range open) until [`Self::unguide`].
    pub(super) fn guide(&mut self, guided: &[(AccessId, usize)], v: VarId) -> (Vec<Stmt>, Vec<Stmt>) {
        let (mut setup, mut step) = (Vec::new(), Vec::new());
        for &(k, l) in guided {
            let o = self.operand(k).clone();
            let tname = self.access_name(k);
            let parent = match l.checked_sub(1) {
                None => int(0),
                Some(up) => var(self.positions[k][up].expect("checked by guidable")),
            };
            let (start, end) = self.level_range(&o, k, l, parent);
            let p = self.f.fresh_var(&format!("{tname}{l}_at"), ScalarType::Index);
            let e = self.f.fresh_var(&format!("{tname}{l}_at_end"), ScalarType::Index);
            let lo = self.f.fresh_var(&format!("{tname}{}_from", l + 1), ScalarType::Index);
            let hi = self.f.fresh_var(&format!("{tname}{}_to", l + 1), ScalarType::Index);
            setup.push(Stmt::Decl(p, start));
            setup.push(Stmt::Decl(e, end));
            let (crd, pos) =
                (o.levels[l].crd().expect("compressed"), o.levels[l + 1].pos().expect("checked by guidable"));
            let live = bin(BinOp::Lt, var(p), var(e));
            step.push(Stmt::While {
                cond: bin(BinOp::And, live.clone(), bin(BinOp::Lt, load(crd, var(p)), var(v))),
                body: vec![Stmt::Assign(p, bin(BinOp::Add, var(p), int(1)))],
            });
            step.push(Stmt::Decl(lo, int(0)));
            step.push(Stmt::Decl(hi, int(0)));
            step.push(Stmt::If {
                cond: bin(BinOp::And, live, bin(BinOp::Eq, load(crd, var(p)), var(v))),
                then: vec![
                    Stmt::Assign(lo, load(pos, var(p))),
                    Stmt::Assign(hi, load(pos, bin(BinOp::Add, var(p), int(1)))),
                ],
                otherwise: vec![],
            });
            self.positions[k][l] = Some(p);
            self.windows.push((k, l + 1, Subrange::Children(lo, hi)));
        }
        (setup, step)
    }
    pub(super) fn unguide(&mut self, guided: &[(AccessId, usize)], open: usize) {
        self.windows.truncate(open);
        for &(k, l) in guided {
            self.positions[k][l] = None;
        }
    }
}
