//! The plan of a scheduled statement: what nm-ir's analyses decide about it, handed to the
//! lowering as one value that the lowering takes and recomputes none of.
//!
//! [`Plan::new`] runs the analyses in order: the statement is prepared as the kernel will run
//! it (`bound` marks dropped, the `where`s the loops cannot keep inlined: [`nest`]), checked
//! for what no back end runs (GPU loops, races the threads cannot meet, partial dimensions:
//! [`checks`]), its main nest found (the loops down to the assignment, the scalar `where`
//! producers inside them, the distinct accesses it reads), the way its result is written
//! chosen ([`result`]: in place, appended, through a row workspace or a sparse workspace with
//! its policy) and the outer loop's row ranges decided ([`rows`]: whether they may run on
//! threads apart, and how ranges that add into the same elements meet).
//!
//! Last, the merge lattice of every loop ([`lattices`]): along each variable, for each
//! sub-expression a point of the loop outside hands on, the points that co-iterate it.
//!
//! The iteration graph ([`crate::graph`]) is not part of the plan: it is the analysis that
//! chose the loop order (`concretize`), and the order is in the statement the plan takes.

pub mod checks;
pub mod lattices;
pub mod nest;
pub mod result;
pub mod rows;

pub use lattices::Lattices;
pub use nest::{Nest, Producer};
pub use result::ResultPlan;
pub use rows::{ReductionKind, RowPlan};

use crate::concrete::{ConcreteNotation, Derivation};
use crate::notation::{Access, Types};

/// What the planner takes from its user.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanOptions {
    /// The sparse workspace of a statement that scatters into a sparse result (`None`: what a
    /// schedule's `precompute` names, else the back end's default).
    pub workspace: Option<nm_ism::Config>,
}

/// A statement the planner refuses, by kind; each says what is missing. The lowering reports
/// them as its own refusals of the same kinds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A `where`, `sequence` or `sum` whose producer or consumer has no place in the loops.
    #[error("{0}")]
    Where(String),
    /// A scheduling command no back end runs as asked (GPU units, nested reductions on threads).
    #[error("{0}")]
    Schedule(String),
    /// A variable ranges over fewer values than a dimension it indexes, where that is not
    /// taken.
    #[error("{0}")]
    Extent(String),
}

/// The plan of one scheduled statement (see the module doc).
#[derive(Clone, Debug)]
pub struct Plan {
    /// The statement as the kernel runs it.
    pub cin: ConcreteNotation,
    /// Its types, with the sizes of the variables a schedule made to stand for others.
    pub types: Types,
    /// The main nest.
    pub nest: Nest,
    /// The distinct accesses of operands the nest reads, in order of first appearance.
    pub accesses: Vec<Access>,
    /// How the result is written.
    pub result: ResultPlan,
    /// The outer loop's row ranges.
    pub rows: RowPlan,
    /// The merge lattice of every loop, and the expression nodes its points compute.
    pub lattices: Lattices,
    /// What the planner decided that a user should hear about.
    pub notes: Vec<String>,
}

impl Plan {
    /// Plans `cin`, whose tensors have `types`.
    pub fn new(cin: &ConcreteNotation, types: &Types, options: &PlanOptions) -> Result<Plan, PlanError> {
        // `bound` promises a count the sizes already fix (the front ends check it): its loops
        // run over the variables they bound.
        let mut cin = if cin.derivations.values().any(|d| matches!(d, Derivation::Bound { .. })) {
            cin.without_bounds()
        } else {
            cin.clone()
        };
        let mut notes = Vec::new();
        if let Some(inlined) = nest::inline_unlowered_wheres(&cin, &mut notes)? {
            cin = inlined;
        }
        checks::check_parallel(&cin)?;
        checks::check_partial_dimensions(&cin, types)?;
        let (nest, types) = nest::main_nest(&cin, types)?;
        let accesses = nest::distinct_accesses(&cin, &nest);
        // `precompute(..., w, policy)` asks for a sparse workspace; an explicit option wins.
        let from_schedule = cin
            .workspaces
            .iter()
            .find(|w| w.1 == crate::concrete::WorkspaceKind::Sparse)
            .map(|w| nm_ism::Config::new(w.2));
        let workspace = options.workspace.or(from_schedule);
        let result = ResultPlan::new(&cin, &types, &nest, workspace);
        let rows = RowPlan::new(&cin, &types, &nest, &result);
        let lattices = Lattices::new(&cin, &types, &nest);
        Ok(Plan { cin, types, nest, accesses, result, rows, lattices, notes })
    }
}
