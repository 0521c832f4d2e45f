//! The error of every stage, from expression to result.

/// Everything that can go wrong from expression to result, with the stage's own message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The expression or schedule does not parse.
    #[error(transparent)]
    Parse(#[from] nm_ir::notation::ParseError),
    /// A format string does not parse.
    #[error(transparent)]
    Format(#[from] nm_format::FormatError),
    /// The statement does not type-check against the declarations.
    #[error(transparent)]
    Semantic(#[from] nm_ir::notation::SemanticError),
    /// A scheduling command is illegal.
    #[error(transparent)]
    Schedule(#[from] nm_ir::concrete::ScheduleError),
    /// The statement is not lowered (yet).
    #[error(transparent)]
    Lower(#[from] nm_lower::lower::LowerError),
    /// Compiling or loading the C kernel failed.
    #[error(transparent)]
    Jit(#[from] nm_lower::jit::JitError),
    /// Running the C kernel failed.
    #[error(transparent)]
    Run(#[from] nm_lower::c::RunError),
    /// Running the interpreter failed.
    #[error(transparent)]
    Interp(#[from] nm_lower::interp::InterpError),
    /// A tensor does not match its declaration, or the result does not validate.
    #[error(transparent)]
    Tensor(#[from] nm_format::TensorError),
    /// The N:M SpMM kernel refused its operands.
    #[error(transparent)]
    Spmm(#[from] nm_spmm::SpmmError),
    /// A tensor the statement names but no declaration or argument gives.
    #[error("{0}")]
    Missing(String),
    /// The operands given to a run: a name given twice, one that is not an operand of the
    /// statement, or the result's.
    #[error("{0}")]
    Operands(String),
}
