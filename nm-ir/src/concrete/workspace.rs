//! The workspaces a `precompute` names (after "Compilation of Modular and General Sparse
//! Workspaces", PLDI 2024): their kind and insert–sort–merge policy. Whether a statement
//! scatters into its result, and through which workspace, is the plan's decision
//! ([`crate::plan::ResultPlan`]).

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
