//! Workspace analysis (after "Compilation of Modular and General Sparse Workspaces", PLDI 2024,
//! §2.2 and §6.2): does an assignment append to its result in storage order, or scatter into
//! it; and if it scatters, which workspace collects the components first.
//!
//! The loop order judged is the *unscheduled* one (split, fuse, pos and bound traced back), so
//! a schedule that only tiles or fuses loops does not change the answer. The result's
//! variables in storage order are compared with the order the loops bind them:
//! - the longest common prefix is **hoisted**: the workspace lives inside those loops and is
//!   flushed once per iteration;
//! - if nothing is left, or every remaining result level is dense (random insertion), the
//!   assignment **appends**;
//! - otherwise it **scatters**. The workspace's dimensions are the remaining result variables in
//!   loop order, and `ow_order[d]` is the result dimension that workspace dimension `d` holds.
//!   When exactly one result variable remains and it follows the reduction variables (Gustavson's
//!   row-wise SpGEMM), a dense workspace of that dimension is enough; otherwise a sparse
//!   (insert–sort–merge) workspace is needed.

use nm_format::{Format, LevelKind};

use super::{ConcreteNotation, LoopAttrs, Stmt, StmtId};
use crate::notation::{Access, AssignOp, Expr, IndexTerm, IndexVarId, TensorVar};

/// How an assignment meets its result's storage order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessPattern {
    /// Components arrive in storage order (or land in dense levels): write directly.
    Appending,
    /// Components arrive out of order into levels that only append: use a workspace.
    Scattering,
}

/// Which workspace a scattering assignment needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkspaceKind {
    /// A dense array over one result dimension.
    Dense,
    /// An insert–sort–merge workspace.
    Sparse,
}

/// The insert–sort–merge policy of a sparse workspace: nm-ism's own type, so that what a
/// schedule asks for is what the runtime runs, with no translation between two enums.
pub use nm_ism::Policy as WorkspacePolicy;

/// What the analysis found for one assignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspacePlan {
    /// Appending or scattering.
    pub pattern: AccessPattern,
    /// The loops (unscheduled variables) the workspace lives inside.
    pub hoisted: Vec<IndexVarId>,
    /// The workspace's dimensions, in loop order (empty when appending).
    pub dims: Vec<IndexVarId>,
    /// `ow_order[d]`: the result dimension that workspace dimension `d` holds.
    pub ow_order: Vec<usize>,
    /// Dense or sparse (meaningful when scattering).
    pub kind: WorkspaceKind,
}

/// An assignment the analysis does not handle (yet), or a workspace that cannot be inserted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The analysis handles one assignment under a nest of loops.
    #[error("workspace analysis needs one assignment under a nest of loops; this statement has a `{found}`")]
    NotAPerfectNest {
        /// What was found instead.
        found: &'static str,
    },
    /// The result's format has another order than its subscripts.
    #[error("the result `{tensor}` has {subscripts} subscripts but its format stores {order} dimensions")]
    FormatOrder {
        /// The result.
        tensor: String,
        /// Its subscripts.
        subscripts: usize,
        /// Its format's order.
        order: usize,
    },
    /// Inserting a workspace into an assignment that appends.
    #[error("`{tensor}` is written in its storage order: it needs no workspace")]
    NotScattering {
        /// The result.
        tensor: String,
    },
}

impl ConcreteNotation {
    /// The loops from the root to the single assignment, and the assignment.
    fn perfect_nest(&self) -> Result<(Vec<StmtId>, StmtId), WorkspaceError> {
        let (loops, s) = self.loops_below(self.root);
        match &self.stmts[s] {
            Stmt::Assign { .. } => Ok((loops, s)),
            Stmt::Sequence { .. } => Err(WorkspaceError::NotAPerfectNest { found: "sequence" }),
            _ => Err(WorkspaceError::NotAPerfectNest { found: "where" }),
        }
    }

    /// Classifies the statement's assignment against its result's `format` (dense when
    /// `None`).
    pub fn workspace_plan(&self, format: Option<&Format>) -> Result<WorkspacePlan, WorkspaceError> {
        let (_, assign) = self.perfect_nest()?;
        let Stmt::Assign { lhs, .. } = &self.stmts[assign] else { unreachable!() };
        let order = lhs.subscripts.len();
        let format = format.cloned().unwrap_or_else(|| Format::dense(order.max(1)));
        if order > 0 && format.order() != order {
            return Err(WorkspaceError::FormatOrder {
                tensor: self.tensors[lhs.tensor].name.clone(),
                subscripts: order,
                order: format.order(),
            });
        }
        let result_vars: Vec<IndexVarId> = lhs.subscripts.iter().filter_map(IndexTerm::as_var).collect();
        // The result's variables in storage order, with the kind of the level holding each.
        let storage: Vec<(IndexVarId, usize, LevelKind)> = if order == 0 {
            Vec::new()
        } else {
            let mut seen = Vec::new();
            format
                .levels()
                .iter()
                .filter_map(|l| {
                    let d = l.expr.dim();
                    (!seen.contains(&d)).then(|| {
                        seen.push(d);
                        (result_vars[d], d, l.kind)
                    })
                })
                .collect()
        };
        let loops = self.unscheduled_loop_order();
        // Hoist while the loops bind the result's variables in storage order.
        let mut common = 0;
        while common < storage.len() && loops.get(common) == Some(&storage[common].0) {
            common += 1;
        }
        let hoisted = loops[..common].to_vec();
        if storage[common..].iter().all(|&(_, _, kind)| kind == LevelKind::Dense) {
            // Nothing left, or only levels that take random insertion.
            return Ok(WorkspacePlan {
                pattern: AccessPattern::Appending,
                hoisted,
                dims: Vec::new(),
                ow_order: Vec::new(),
                kind: WorkspaceKind::Dense,
            });
        }
        // The next loop is a reduction variable or a result variable out of storage order:
        // either way the remaining result coordinates arrive out of order.
        let dims: Vec<IndexVarId> = loops[common..].iter().copied().filter(|v| result_vars.contains(v)).collect();
        let ow_order =
            dims.iter().map(|v| result_vars.iter().position(|w| w == v).expect("a result variable")).collect();
        // One result variable left means a reduction variable came first (else it would have
        // been hoisted): Gustavson's case, a dense row of that dimension suffices.
        let kind = if dims.len() == 1 { WorkspaceKind::Dense } else { WorkspaceKind::Sparse };
        Ok(WorkspacePlan { pattern: AccessPattern::Scattering, hoisted, dims, ow_order, kind })
    }

    /// Rewrites a scattering assignment to go through a workspace `name`:
    /// `where(<loops over the result in storage order> result = W, <original loops> W += rhs)`,
    /// placed inside the hoisted loops. Returns the new CIN and the plan it followed.
    pub fn insert_workspace(
        &self,
        format: Option<&Format>,
        name: &str,
        policy: WorkspacePolicy,
    ) -> Result<(ConcreteNotation, WorkspacePlan), WorkspaceError> {
        let plan = self.workspace_plan(format)?;
        let (loops, assign) = self.perfect_nest()?;
        let Stmt::Assign { lhs, rhs, .. } = self.stmts[assign].clone() else { unreachable!() };
        if plan.pattern == AccessPattern::Appending {
            return Err(WorkspaceError::NotScattering { tensor: self.tensors[lhs.tensor].name.clone() });
        }
        let mut c = self.clone();
        let w = c.tensors.push(TensorVar { name: name.to_string(), order: plan.dims.len() });
        c.temporaries.push(w);
        c.workspaces.push((w, plan.kind, policy, plan.ow_order.clone()));
        let w_access =
            Access { tensor: w, subscripts: plan.dims.iter().map(|&v| IndexTerm::var(v)).collect(), span: None };
        // Producer: the loops below the hoisted ones, accumulating into W.
        let producer_body = c.stmts.push(Stmt::Assign { lhs: w_access.clone(), op: AssignOp::Accumulate, rhs });
        let hoisted_loops: Vec<StmtId> =
            loops.iter().copied().filter(|&s| matches!(c.stmts[s], Stmt::Forall { var, .. } if c.origins(var).iter().all(|o| plan.hoisted.contains(o)))).collect();
        let inner_loops: Vec<StmtId> = loops.iter().copied().filter(|s| !hoisted_loops.contains(s)).collect();
        let mut producer = producer_body;
        for &s in inner_loops.iter().rev() {
            let Stmt::Forall { var, attrs, .. } = c.stmts[s] else { unreachable!() };
            producer = c.stmts.push(Stmt::Forall { var, body: producer, attrs });
        }
        // Consumer: the workspace read in the result's storage order.
        let read = c.exprs.push(Expr::Access(w_access));
        let mut consumer = c.stmts.push(Stmt::Assign { lhs: lhs.clone(), op: AssignOp::Assign, rhs: read });
        let mut storage_dims: Vec<IndexVarId> = plan.dims.clone();
        storage_dims.sort_by_key(|v| lhs.subscripts.iter().position(|t| t.as_var() == Some(*v)));
        if let Some(f) = format {
            let rank = |v: &IndexVarId| {
                let d = lhs.subscripts.iter().position(|t| t.as_var() == Some(*v)).expect("a result variable");
                f.levels().iter().position(|l| l.expr.dim() == d)
            };
            storage_dims.sort_by_key(rank);
        }
        for &v in storage_dims.iter().rev() {
            consumer = c.stmts.push(Stmt::Forall { var: v, body: consumer, attrs: LoopAttrs::default() });
        }
        let mut s = c.stmts.push(Stmt::Where { consumer, producer });
        for &l in hoisted_loops.iter().rev() {
            let Stmt::Forall { var, attrs, .. } = c.stmts[l] else { unreachable!() };
            s = c.stmts.push(Stmt::Forall { var, body: s, attrs });
        }
        c.root = s;
        Ok((c, plan))
    }
}
