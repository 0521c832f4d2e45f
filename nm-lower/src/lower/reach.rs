//! Which level of each operand the loop over a variable reaches, and how: iterated (with the
//! subsection a compound subscript makes), located, or followed for a `where` producer.

use super::iterate::{Subsection, coefficient};
use super::{AccessId, LowerError, Lowerer, refuse};
use nm_format::LevelKind;
use nm_ir::notation::{Access, ExprId, IndexTerm, IndexVarId};

/// The levels a loop reaches (see [`Lowerer::reached_levels`]): `(access, level)` pairs.
#[derive(Default)]
pub(super) struct Reached {
    /// Iterated: compressed levels, each with how (the same index in `subsections`).
    pub(super) sparse: Vec<(AccessId, usize)>,
    /// Located.
    pub(super) dense: Vec<(AccessId, usize)>,
    pub(super) subsections: Vec<Subsection>,
    /// Read by a `where` producer along this loop.
    pub(super) guided: Vec<(AccessId, usize)>,
}

impl Lowerer<'_> {
    /// Which level of each access in `reads` the loop over `v` reaches now, and how: sparse
    /// levels it iterates (each with its [`Subsection`]), dense levels it locates, and levels
    /// a `where` producer reads along it (followed by a guide). `consumer_reads` are the
    /// accesses of the assignment itself; `split` says the loop walks one block of a split.
    pub(super) fn reached_levels(
        &mut self,
        v: IndexVarId,
        reads: &[AccessId],
        consumer_reads: &[AccessId],
        split: bool,
        lhs: &Access,
        rhs: ExprId,
    ) -> Result<Reached, LowerError> {
        let name = self.cin.vars[v].name.clone();
        let mut reached = Reached::default();
        for &k in reads {
            let a = &self.accesses[k];
            let op = self.operands[a.tensor].as_ref().expect("every operand decomposed");
            if self.all_dense(k) {
                // Located all at once where it is read, in any loop order.
                continue;
            }
            let Some(l) = self.positions[k].iter().take(op.format.levels().len()).position(Option::is_none) else {
                continue;
            };
            let term = a.subscripts.get(op.format.levels()[l].expr.dim());
            let dim_var = term.and_then(|t| t.as_var());
            if let Some(t) = term.filter(|t| t.is_compound() && t.vars().any(|w| w == v)) {
                let t = t.clone();
                self.reach_compound(k, l, &t, v, consumer_reads, split, &mut reached)?;
            } else if dim_var == Some(v) {
                if op.levels[l].is_dense() {
                    reached.dense.push((k, l))
                } else if !consumer_reads.contains(&k) {
                    self.reach_guided(k, l, v, lhs, rhs)?;
                    reached.guided.push((k, l));
                } else {
                    reached.sparse.push((k, l));
                    reached.subsections.push(Subsection::Plain);
                }
            } else if let Some(rows) = self.rows_subsection(k, l, v, consumer_reads, split) {
                reached.sparse.push((k, l + 1));
                reached.subsections.push(rows);
            } else if a.subscripts.iter().any(|t| t.vars().any(|w| w == v))
                && !a.subscripts.iter().any(|t| t.is_compound())
            {
                // (With compound subscripts a later level may still be reached by a later loop,
                // once its parent is: the loop runs over every coordinate, and the level is
                // searched there — or the leaf reports the level it could not reach.)
                return refuse(
                    LowerError::LoopOrder,
                    format!(
                        "`{name}` is bound before `{}`'s level {l} is reached: the loop order is discordant with its format",
                        self.cin.tensors[a.tensor].name
                    ),
                );
            }
        }
        Ok(reached)
    }

    /// Access `k`'s level `l` under the compound subscript `t`, one of whose variables is `v`
    /// (sparse convolution): a dense level is located once its last variable is bound; a
    /// compressed one is iterated by subsections.
    #[allow(clippy::too_many_arguments)]
    fn reach_compound(
        &mut self,
        k: AccessId,
        l: usize,
        t: &IndexTerm,
        v: IndexVarId,
        consumer_reads: &[AccessId],
        split: bool,
        reached: &mut Reached,
    ) -> Result<(), LowerError> {
        let name = &self.cin.vars[v].name;
        let a = &self.accesses[k];
        let op = self.operands[a.tensor].as_ref().expect("every operand decomposed");
        let level = &op.levels[l];
        let last = t.vars().all(|w| w == v || self.bound[w].is_some());
        if level.is_dense() {
            if last {
                reached.dense.push((k, l));
            }
            return Ok(());
        }
        let tname = &self.cin.tensors[a.tensor].name;
        if !consumer_reads.contains(&k) {
            // A `where` producer's read, its window still open: the producer's own loops
            // (inside this one) iterate it, from its parent's whole range.
            if !last {
                return Ok(());
            }
            return refuse(
                LowerError::Where,
                format!("a `where` producer reading `{tname}` through a compound subscript its loops do not finish"),
            );
        }
        if !level.is_searchable() {
            return refuse(
                LowerError::Subscript,
                format!(
                    "a compound subscript on `{tname}`'s level {l} ({}): it needs an ordered compressed or singleton level",
                    level.kind()
                ),
            );
        }
        // A negative coefficient (a true convolution, `I(i + 2 - r)`): the level is
        // walked in its order, so the variable that resolves it must grow with the
        // coordinate. Other variables with negative coefficients are bound outside it,
        // in dense loops (no window skipping: filters are small); a window's reach
        // is then only that of positive ones.
        if t.terms.iter().any(|&(c, _)| c < 0) {
            let negative_inside = t.terms.iter().any(|&(c, w)| c < 0 && w != v && self.bound[w].is_none());
            if coefficient(t, v) < 0 && last {
                return refuse(
                    LowerError::Subscript,
                    format!(
                        "`{name}` resolves `{tname}`'s compressed level {l} with a negative coefficient \
                     (its coordinates are walked in increasing order): loop over `{name}` before \
                     the subscript's other variables"
                    ),
                );
            }
            if coefficient(t, v) < 0 || negative_inside {
                return Ok(());
            }
        }
        if split {
            return refuse(
                LowerError::Schedule,
                format!("splitting `{name}`, which iterates `{tname}` by subsections"),
            );
        }
        reached.sparse.push((k, l));
        let (coef, size) = (coefficient(t, v), self.size(v) as i64);
        reached.subsections.push(if last {
            Subsection::Last { term: t.clone(), coef, size }
        } else {
            Subsection::Window { term: t.clone(), coef, width: self.reach(t, v), size }
        });
        Ok(())
    }

    /// Checks that a `where` producer's read of access `k`'s compressed level `l` along this
    /// outer loop over `v` can be followed by a cursor that hands the producer the level's
    /// children, or none (see `guide`). Not along a loop over the result's coordinates into a
    /// sparse result: the temporary, dense to the merge, would have it store every one —
    /// unless the loop visits every one anyway: it resolves a dense level of the result (CSR's
    /// rows), or a term of dense operands fills it.
    fn reach_guided(
        &mut self,
        k: AccessId,
        l: usize,
        v: IndexVarId,
        lhs: &Access,
        rhs: ExprId,
    ) -> Result<(), LowerError> {
        let name = self.cin.vars[v].name.clone();
        let a = &self.accesses[k];
        let op = self.operands[a.tensor].as_ref().expect("every operand decomposed");
        let kind = op.levels[l].kind();
        let tname = self.cin.tensors[a.tensor].name.clone();
        let sparse_result = self.assembly.is_some() || self.workspace.is_some() || self.ism.is_some();
        let dense_result_level = self
            .result_level(v)
            .is_some_and(|l| self.assembly.as_ref().is_some_and(|a| a.kinds[l] == LevelKind::Dense));
        if sparse_result
            && lhs.subscripts.iter().any(|t| t.vars().any(|w| w == v))
            && !dense_result_level
            && !self.covered_by_dense(rhs)
        {
            if self.visit_every_coordinate {
                let note = format!(
                    "the loop over `{name}` visits every coordinate of `{name}`, as no operand it \
                     merges makes it sparse; `{}` stores those where a term was produced",
                    self.cin.tensors[self.result].name
                );
                if !self.notes.contains(&note) {
                    self.notes.push(note);
                }
            } else {
                return refuse(
                    LowerError::Where,
                    format!(
                        "a `where` producer reading `{tname}`'s compressed level {l} along `{name}`, a \
                     coordinate of the sparse result"
                    ),
                );
            }
        }
        if !self.guidable(k, l) {
            return refuse(
                LowerError::Where,
                format!(
                    "a `where` producer reading `{tname}`'s level {l} ({kind}) along the outer loop `{name}`: \
                 it needs an ordered, unique compressed level with a compressed level below"
                ),
            );
        }
        Ok(())
    }
}
