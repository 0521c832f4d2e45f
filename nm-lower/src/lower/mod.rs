//! Lowering CIN to the loop IR. Each loop co-iterates
//! the compressed levels its variable reaches, as the merge lattice of the expression says
//! (taco's algorithm: a `while` per lattice point with a case per sub-point, or a `for` over
//! every coordinate when a dense operand or a constant never runs out), and locates the dense
//! levels. That covers SpMV, SpMM, SpAdd and element-wise products in any mix of formats, TTV,
//! Gustavson's SpGEMM into a dense result, and reductions to scalars, in any concordant loop
//! order. A dense result is written in place; a sparse one (dense levels, then compressed ones)
//! is assembled in append order when the loops follow its storage order with no reduction
//! inside — compressed levels append a coordinate once something was appended below it, with
//! `pos`/`crd`/values grown by doubling. `where` producers that compute scalar temporaries
//! (concretize's inner reductions) run right before their consumer. Tensors whose levels are
//! all dense are located where they are read, so they never constrain the loop order.
//! Compound subscripts (`I(i+r, j+q)`, sparse convolution) iterate a compressed level by its
//! non-empty subsections (see `Subsection`). What is not lowered is refused with
//! a [`LowerError`] of its kind naming what is missing.
//!
//! Each operand is decomposed into its arrays at the kernel boundary — per compressed level
//! `T{l}_pos` and `T{l}_crd`, then `T_vals` — tagged with their roles; the result is `R_vals`,
//! dense row-major, zeroed by the caller.
//!
//! Here: the lowering's state (`Lowerer`) and its entry points, which check the schedule,
//! decompose the operands and pick how the result is written. Its parts: `nest` (the loops,
//! one per variable, by merge lattice), `subsection` (compressed levels under compound
//! subscripts), `result` (temporaries, stores, the assignment's expression), `assembly`
//! (sparse results appended or through a sparse workspace), `workspace` (the row workspace),
//! `boundary` (index widths, arguments, the result read back as a tensor).

use nm_format::{Format, LevelKind};
use nm_ir::concrete::{ConcreteNotation, Derivation, Stmt as CinStmt};
use nm_ir::id::{Arena, Id};
use nm_ir::lattice::PointExpr;
use nm_ir::notation::{Access, AssignOp, BinaryOp, Expr as CinExpr, ExprId, IndexVarId, TensorId, Types};

mod assembly;
mod boundary;
mod entries;
mod nest;
mod result;
mod subsection;
mod workspace;

use assembly::{Assembly, IsmResult};
pub use boundary::{
    IndexWidths, KernelValue, arguments, check_operand, rearm, result_tensor, take_result_tensor, view_arguments,
};
use subsection::Subrange;
use workspace::{NARROW, RowList, RowWorkspace, SORT_BELOW};

use crate::args::{Partition, Reduction, ReductionKind};
use crate::ir::build::{bin, int, load};
use crate::ir::{ArrayId, BinOp, ElemType, Expr, Function, Role, ScalarType, Stmt, VarId};

/// A statement this lowering does not handle, by kind: what the driver may try instead
/// depends on it (an operand read through a copy in another order helps a discordant loop
/// order or a level kind read here, a split of the statement helps a `where` it cannot place,
/// nothing helps a schedule it cannot lower). Each says what is missing; every message starts
/// the same way, so users see one kind of refusal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LowerError {
    /// The loops bind a variable before an operand's (or the result's) level that needs it is
    /// reached: the loop order is discordant with a format.
    #[error("cannot lower this statement yet: {0}")]
    LoopOrder(String),
    /// A level kind, or a mix of them, read or written where the lowering has no code for it
    /// (blocked levels, a dense level below compressed ones in a result, N:M in a sum).
    #[error("cannot lower this statement yet: {0}")]
    Format(String),
    /// A compound subscript on a level it cannot iterate by subsections.
    #[error("cannot lower this statement yet: {0}")]
    Subscript(String),
    /// A `where`, `sequence` or `sum` whose producer or consumer it cannot place.
    #[error("cannot lower this statement yet: {0}")]
    Where(String),
    /// A scheduling command it cannot lower (a split of a split, GPU units, nested threads).
    #[error("cannot lower this statement yet: {0}")]
    Schedule(String),
    /// A variable ranges over fewer values than a dimension it indexes.
    #[error("cannot lower this statement yet: {0}")]
    Extent(String),
    /// The result is read on the right-hand side.
    #[error("cannot lower this statement yet: {0}")]
    ResultRead(String),
    /// A sparse workspace that cannot be made for the result (its extents, memory).
    #[error("cannot lower this statement yet: {0}")]
    Workspace(String),
    /// The loops made break the loop IR's rules ([`crate::ir::Function::verify`]): a bug in
    /// the lowering, reported instead of run.
    #[error("internal error, please report it: the generated loops are inconsistent: {0}")]
    Internal(String),
}

/// Refuses with `kind` (a [`LowerError`] variant) and what is missing.
fn refuse<T>(kind: fn(String) -> LowerError, what: impl Into<String>) -> Result<T, LowerError> {
    Err(kind(what.into()))
}

/// How one tensor's arrays appear in the kernel.
#[derive(Clone, Debug)]
struct Operand {
    format: Format,
    shape: Vec<usize>,
    pos: Vec<Option<ArrayId>>,
    /// `crd` of a compressed or singleton level; the packed metadata of a structured one.
    crd: Vec<Option<ArrayId>>,
    /// Per structured level: (N, M, coordinates per parent position).
    structured: Vec<Option<(u32, u32, usize)>>,
    vals: ArrayId,
}

/// The arrays of every tensor, in kernel parameter order: the result's values first, then each
/// operand's `pos`/`crd` per compressed level and values, by tensor id.
pub struct Lowered {
    /// The kernel.
    pub function: Function,
    /// For each parameter, the tensor it belongs to.
    pub params: Vec<TensorId>,
    /// How the outermost loop may be split across threads (`None`: it may not).
    pub partition: Option<Partition>,
    /// Every tensor's name, shape and format, by id: what [`arguments`] checks operands
    /// against (a kernel trusts its arrays' lengths).
    pub tensors: Vec<(String, Vec<usize>, Format)>,
    /// What the lowering decided that a user should hear about (a dense workspace that would
    /// not fit, replaced by a sparse one).
    pub notes: Vec<String>,
}

/// Choices the lowering takes from its user.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LowerOptions {
    /// The workspace of a statement that scatters into a sparse result (`None`: the
    /// analysis picks — a dense row workspace where one dimension is left, else
    /// [`DEFAULT_POLICY`]).
    pub workspace: Option<nm_ism::Config>,
    /// Lets a `where` producer follow a compressed level along a loop over a coordinate of a
    /// sparse result where nothing else makes that loop sparse: the loop then visits every
    /// coordinate of its dimension (the result still stores only those where a term was
    /// produced), which the lowering reports in a note. Off unless asked for: a copy or a
    /// split of the statement usually iterates only the stored coordinates, and callers try
    /// those first.
    pub visit_every_coordinate: bool,
}

/// The sparse workspace policy used unless one is asked for: the fastest on outer-product
/// SpGEMM over the test matrices (BENCHMARKS.md, "The workspace policies").
pub const DEFAULT_POLICY: nm_ism::Policy = nm_ism::Policy::Auto;

impl Lowered {
    /// The threads a compiled kernel runs on when its caller names no count: every core where
    /// the schedule put the outer loop's row ranges on threads (`parallelize`), else one.
    pub fn default_threads(&self) -> usize {
        let scheduled = self.partition.as_ref().is_some_and(|p| p.scheduled);
        if scheduled || crate::ir::has_parallel_loops(&self.function) { nm_runtime::workers::cores() } else { 1 }
    }

    /// Whether the kernel assembles a sparse result (it writes a `pos` array).
    pub fn sparse_result(&self) -> bool {
        self.function
            .arrays
            .iter()
            .any(|(_, d)| d.output && matches!(d.role, Role::Pos { .. } | Role::Crd { .. } | Role::Workspace { .. }))
    }
}

struct Lowerer<'a> {
    cin: &'a ConcreteNotation,
    types: &'a Types,
    f: Function,
    operands: Vec<Option<Operand>>,
    result: TensorId,
    result_vals: ArrayId,
    /// Loop variable of each index variable, once bound.
    bound: Vec<Option<VarId>>,
    /// For each (tensor, access), the position variable of each resolved level.
    positions: Vec<Vec<Option<VarId>>>,
    accesses: Vec<Access>,
    /// The statement's expression nodes, plus those lattice points make.
    exprs: Arena<ExprId, CinExpr>,
    /// See [`LowerOptions::visit_every_coordinate`].
    visit_every_coordinate: bool,
    /// See [`Lowered::notes`].
    notes: Vec<String>,
    /// Every tensor's format, by id (`None`: dense).
    formats: Vec<Option<Format>>,
    /// How a sparse result is assembled (`None`: a dense result).
    assembly: Option<Assembly>,
    /// The scalar variable of each `where` temporary.
    temporaries: Vec<(TensorId, VarId)>,
    /// Into a sparse result, per `where` temporary, whether its producer added a term: a
    /// variable set where it did, or nothing where every run of the producer adds one. The
    /// consumer stores an element only where its expression, the temporaries read as this
    /// says, has a term (`A(i,j) = B(i,j) - t` with `t` summing row `i` of C stores nothing
    /// in a row where both B and C are empty).
    temporary_terms: Vec<(TensorId, Option<VarId>)>,
    /// The `where` producers, computed right before the consumer's assignment.
    producers: Vec<Producer>,
    /// Whether a producer is being lowered (its leaf is its own assignment).
    in_producer: bool,
    /// The variable the producer being lowered sets where it adds a term (see
    /// `temporary_terms`).
    producing: Option<VarId>,
    /// A scalar the innermost reduction loops accumulate into, stored once after them.
    accumulator: Option<VarId>,
    /// The value type.
    value: ElemType,
    /// The workspace of a result whose last level is written out of order.
    workspace: Option<RowWorkspace>,
    /// The sparse workspace of a result the loops scatter into.
    ism: Option<IsmResult>,
    /// Whether the outermost loop may become a row range (see [`Partition`]).
    partitionable: bool,
    /// How its ranges combine where they add into the same result elements.
    reduction: Option<ReductionKind>,
    /// The range parameter, once the outermost loop took it.
    bounds: Option<ArrayId>,
    /// A dense result's row buffer (see [`Lowerer::accumulate_rows`]).
    row_buffer: Option<ArrayId>,
    /// Open loops that visit one coordinate more than once (a non-unique level walked entry
    /// by entry): a result element's sum is then not whole at its store.
    repeating: usize,
    /// (split parent, block loop variable) of the `split`s whose block loop is open.
    split_blocks: Vec<(IndexVarId, VarId)>,
    /// (access, level, end of the segment): a non-unique level co-iterated segment by segment;
    /// the entries of the current segment (one coordinate) are its children's positions.
    segments: Vec<(usize, usize, VarId)>,
    /// (access, level, subrange): the subsection of a compressed level that the loops of a
    /// compound subscript's earlier variables narrowed it to — from its first entry; where it
    /// ends, the searches of the loops inside find.
    windows: Vec<(usize, usize, Subrange)>,
    /// (pos array, level, hint arrays) of searched levels (see [`Lowerer::search_hints`]).
    hints: Vec<(ArrayId, usize, ArrayId, ArrayId)>,
    /// Statements the kernel runs first (zeroing hint arrays).
    prologue: Vec<Stmt>,
    /// Whether some loop runs on several threads (OpenMP).
    threaded: bool,
    /// The loops the schedule put on threads that got them: OpenMP, or row ranges.
    on_threads: Vec<IndexVarId>,
}

/// The positions a `pos` loop walks (see [`Lowerer::position_space`]).
#[derive(Clone, Debug)]
struct PositionSpace {
    /// The access whose positions they are.
    access: usize,
    /// The fused variables: the operand's row and column.
    row: IndexVarId,
    col: IndexVarId,
    rows: usize,
    pos: ArrayId,
    crd: ArrayId,
    /// How many: `pos[rows]`.
    count: Expr,
}

/// A `where` producer: loops computing a scalar temporary.
#[derive(Clone, Debug)]
struct Producer {
    loops: Vec<(IndexVarId, bool)>,
    lhs: Access,
    op: AssignOp,
    rhs: ExprId,
}

/// The consumer assignment of a chain of `where`s — its left-hand side, operator and
/// right-hand side, and loops a fused workspace adds inside the outer ones — and the chain's
/// producers (innermost first).
struct Chain {
    lhs: Access,
    op: AssignOp,
    rhs: ExprId,
    loops: Vec<(IndexVarId, bool)>,
    producers: Vec<Producer>,
    /// (variable the schedule made, variable it stands for): a fused workspace's `jw` runs
    /// over `j`'s coordinates.
    aliases: Vec<(IndexVarId, IndexVarId)>,
}

fn where_chain(cin: &ConcreteNotation, s: nm_ir::concrete::StmtId) -> Result<Chain, LowerError> {
    match &cin.stmts[s] {
        CinStmt::Assign { lhs, op, rhs } => Ok(Chain {
            lhs: lhs.clone(),
            op: *op,
            rhs: *rhs,
            loops: Vec::new(),
            producers: Vec::new(),
            aliases: Vec::new(),
        }),
        CinStmt::Where { consumer, producer } => {
            if let Some(chain) = fused_workspace(cin, *consumer, *producer) {
                return Ok(chain);
            }
            let mut chain = where_chain(cin, *consumer)?;
            let mut loops = Vec::new();
            let mut p = *producer;
            loop {
                match &cin.stmts[p] {
                    CinStmt::Forall { var, body, attrs } => {
                        loops.push((*var, on_threads(attrs)));
                        p = *body;
                    }
                    CinStmt::Assign { lhs, op, rhs }
                        if cin.temporaries.contains(&lhs.tensor) && lhs.subscripts.is_empty() =>
                    {
                        chain.producers.push(Producer { loops, lhs: lhs.clone(), op: *op, rhs: *rhs });
                        break;
                    }
                    _ => {
                        return refuse(
                            LowerError::Where,
                            "a `where` whose producer is not loops around a scalar temporary, nor a workspace its consumer copies out",
                        );
                    }
                }
            }
            Ok(chain)
        }
        CinStmt::Forall { .. } => {
            refuse(LowerError::Where, "loops inside a `where` consumer, other than copying out a workspace")
        }
        CinStmt::Sequence { .. } => refuse(LowerError::Where, "`sequence`"),
    }
}

/// `cin` with each `where` whose consumer loops over more than copying the temporary out
/// replaced by its consumer reading the producer's expression (see
/// [`ConcreteNotation::inline_where`]), said in `notes`: the loops here keep a temporary
/// between two nests only as a fused workspace or a scalar. `None` when there is none.
fn inline_unlowered_wheres(
    cin: &ConcreteNotation,
    notes: &mut Vec<String>,
) -> Result<Option<ConcreteNotation>, LowerError> {
    let mut out: Option<ConcreteNotation> = None;
    loop {
        let c = out.as_ref().unwrap_or(cin);
        let mut stack = vec![c.root];
        let mut found = None;
        while let Some(s) = stack.pop() {
            match &c.stmts[s] {
                CinStmt::Forall { body, .. } => stack.push(*body),
                CinStmt::Sequence { first, second } => stack.extend([*first, *second]),
                CinStmt::Assign { .. } => {}
                CinStmt::Where { consumer, producer } => {
                    if matches!(c.stmts[*consumer], CinStmt::Forall { .. })
                        && fused_workspace(c, *consumer, *producer).is_none()
                    {
                        found = Some(s);
                        break;
                    }
                    stack.extend([*consumer, *producer]);
                }
            }
        }
        let Some(s) = found else { return Ok(out) };
        let mut next = c.clone();
        let CinStmt::Where { producer, .. } = c.stmts[s] else { unreachable!() };
        let temporary = where_temporary(c, producer);
        next.inline_where(s).or_else(|why| {
            refuse(
                LowerError::Where,
                format!("a `where` whose consumer loops over `{temporary}` beyond copying it out: {why}"),
            )
        })?;
        notes.push(format!(
            "`{temporary}` is computed where its consumer reads it: the loops here keep a temporary between two loop nests only as a workspace the consumer copies out (the result is the same)"
        ));
        out = Some(next);
    }
}

/// The name of the temporary a `where`'s producer writes.
fn where_temporary(cin: &ConcreteNotation, mut s: nm_ir::concrete::StmtId) -> String {
    loop {
        match &cin.stmts[s] {
            CinStmt::Forall { body, .. } => s = *body,
            CinStmt::Assign { lhs, .. } => return cin.tensors[lhs.tensor].name.clone(),
            _ => return "the temporary".into(),
        }
    }
}

/// taco's `precompute` with a dense workspace — `C(i,j) = w(j) where w(jw) += A(i,k) *
/// B(k,jw)` — as the one assignment `C(i,jw) += A(i,k) * B(k,jw)` under the producer's loops:
/// the lowering then realizes the workspace itself (a row buffer for a dense result, the row
/// workspace of a sparse one), the same dense array indexed by `jw`, zeroed before the row and
/// copied out after it. `None` unless the consumer is loops copying the whole temporary out
/// (`C(..) = w(..)` or `+=`, one loop per subscript of `w`) and the producer loops around one
/// assignment to it.
fn fused_workspace(
    cin: &ConcreteNotation,
    consumer: nm_ir::concrete::StmtId,
    producer: nm_ir::concrete::StmtId,
) -> Option<Chain> {
    let mut consumer_vars = Vec::new();
    let mut c = consumer;
    let (lhs, c_op, read) = loop {
        match &cin.stmts[c] {
            CinStmt::Forall { var, body, .. } => {
                consumer_vars.push(*var);
                c = *body;
            }
            CinStmt::Assign { lhs, op, rhs } => match &cin.exprs[*rhs] {
                CinExpr::Access(a) if cin.temporaries.contains(&a.tensor) => break (lhs.clone(), *op, a.clone()),
                _ => return None,
            },
            _ => return None,
        }
    };
    let read_vars: Vec<IndexVarId> = read.subscripts.iter().map(|t| t.as_var()).collect::<Option<_>>()?;
    let mut sorted = read_vars.clone();
    sorted.sort_unstable();
    let mut loop_vars = consumer_vars.clone();
    loop_vars.sort_unstable();
    if sorted != loop_vars || read_vars.is_empty() {
        return None;
    }
    let mut loops = Vec::new();
    let mut p = producer;
    let (write, p_op, rhs) = loop {
        match &cin.stmts[p] {
            CinStmt::Forall { var, body, attrs } => {
                loops.push((*var, on_threads(attrs)));
                p = *body;
            }
            CinStmt::Assign { lhs, op, rhs } if lhs.tensor == read.tensor => break (lhs.clone(), *op, *rhs),
            _ => return None,
        }
    };
    let write_vars: Vec<IndexVarId> = write.subscripts.iter().map(|t| t.as_var()).collect::<Option<_>>()?;
    let reduces = loops.iter().any(|(v, _)| !write_vars.contains(v));
    let op = match (c_op, p_op) {
        (AssignOp::Accumulate, _) | (AssignOp::Assign, AssignOp::Accumulate) => AssignOp::Accumulate,
        (AssignOp::Assign, AssignOp::Assign) if !reduces => AssignOp::Assign,
        _ => return None,
    };
    // The consumer's copy loop variables become the producer's.
    let rename = |v: IndexVarId| read_vars.iter().position(|&r| r == v).map_or(v, |m| write_vars[m]);
    let subscripts = lhs
        .subscripts
        .iter()
        .map(|t| t.as_var().map(|v| nm_ir::notation::IndexTerm::var(rename(v))))
        .collect::<Option<Vec<_>>>()?;
    let aliases = write_vars.iter().copied().zip(read_vars.iter().copied()).collect();
    Some(Chain { lhs: Access { subscripts, ..lhs }, op, rhs, loops, producers: Vec::new(), aliases })
}

/// Lowers `cin` (one assignment under a nest of loops) with the tensor types of `types`, for
/// operands whose positions and coordinates are all 32-bit (see [`lower_with`]).
pub fn lower(cin: &ConcreteNotation, types: &Types, value: ElemType) -> Result<Lowered, LowerError> {
    lower_with(cin, types, value, &IndexWidths::default())
}

/// Lowers `cin` for operands whose index arrays have `widths`.
pub fn lower_with(
    cin: &ConcreteNotation,
    types: &Types,
    value: ElemType,
    widths: &IndexWidths,
) -> Result<Lowered, LowerError> {
    lower_options(cin, types, value, widths, &LowerOptions::default())
}

/// Whether a loop runs on OpenMP threads: `parallelize(cpu_thread, no_races)` (the schedule
/// checked that its iterations write disjoint elements) or `ignore_races` (the user's promise).
/// `cpu_vector` is left to the C compiler's vectorizer; the other strategies are refused by
/// [`check_parallel`].
fn on_threads(attrs: &nm_ir::concrete::LoopAttrs) -> bool {
    use nm_ir::concrete::{OutputRace, ParallelUnit};
    matches!(attrs.parallel, Some((ParallelUnit::CpuThread, OutputRace::NoRaces | OutputRace::IgnoreRaces)))
}

/// How the outermost loop's threads add into the result when the schedule says they may
/// write the same elements: `atomics`, or a copy per thread (`temporary`,
/// `parallel_reduction`). `None` for any other loop mark.
fn reduction_asked(cin: &ConcreteNotation) -> Option<ReductionKind> {
    use nm_ir::concrete::{OutputRace, ParallelUnit};
    let CinStmt::Forall { attrs, .. } = &cin.stmts[cin.root] else { return None };
    match attrs.parallel? {
        (ParallelUnit::CpuThread, OutputRace::Atomics) => Some(ReductionKind::Atomic),
        (ParallelUnit::CpuThread, OutputRace::Temporary | OutputRace::ParallelReduction) => {
            Some(ReductionKind::PerThread)
        }
        _ => None,
    }
}

/// Refuses what reads a dimension larger than its variable's range (where a compound
/// subscript narrowed it: see `IndexNotation::extents`) other than as the loops' iterators
/// stop at the range: a sparse result (its levels would be assembled for the whole dimension),
/// and `fuse` and `pos` over such a variable (they walk every entry of a level).
fn check_partial_dimensions(cin: &ConcreteNotation, types: &Types) -> Result<(), LowerError> {
    let mut accesses: Vec<(Access, bool)> = Vec::new();
    for (_, s) in cin.stmts.iter() {
        if let CinStmt::Assign { lhs, rhs, .. } = s {
            accesses.push((lhs.clone(), !cin.temporaries.contains(&lhs.tensor)));
            let mut found = Vec::new();
            collect_accesses_in(&cin.exprs, *rhs, &mut found);
            accesses.extend(found.into_iter().map(|a| (a, false)));
        }
    }
    for (a, result) in accesses {
        let Some(ty) = types.tensors.get(a.tensor.index()) else { continue };
        for (d, t) in a.subscripts.iter().enumerate() {
            let range = |v: IndexVarId| types.sizes.get(v.index()).copied();
            let Some(v) = t.as_var().filter(|&v| range(v).is_some_and(|n| ty.shape[d] > n)) else { continue };
            let (tensor, name) = (&cin.tensors[a.tensor].name, &cin.vars[v].name);
            let sparse_result = result && ty.format.as_ref().is_some_and(|f| *f != Format::dense(f.order()));
            let walked = cin.derivations.iter().any(|(w, d)| {
                matches!(d, Derivation::Fuse { .. } | Derivation::Pos { .. }) && cin.origins(*w).contains(&v)
            });
            if sparse_result || walked {
                return refuse(
                    LowerError::Extent,
                    format!(
                        "`{name}` ranges over {} values, fewer than dimension {d} of `{tensor}` has ({}): {}",
                        types.sizes[v.index()],
                        ty.shape[d],
                        if sparse_result {
                            "a sparse result must have the variables' ranges"
                        } else {
                            "`fuse` and `pos` walk the whole dimension"
                        }
                    ),
                );
            }
        }
    }
    Ok(())
}

/// Refuses the `parallelize` commands the back ends cannot run as asked: GPU units, and
/// threads that add into the same elements anywhere but on the outermost loop (whose row
/// ranges are what runs on threads; an OpenMP loop inside would race on the sums in registers).
fn check_parallel(cin: &ConcreteNotation) -> Result<(), LowerError> {
    use nm_ir::concrete::{OutputRace, ParallelUnit};
    for (id, s) in cin.stmts.iter() {
        let CinStmt::Forall { var, attrs, .. } = s else { continue };
        let name = &cin.vars[*var].name;
        match attrs.parallel {
            Some((ParallelUnit::GpuBlock | ParallelUnit::GpuWarp | ParallelUnit::GpuThread, _)) => {
                return refuse(
                    LowerError::Schedule,
                    format!("GPU loops (`parallelize({name}, gpu_...)`): the CPU back ends run this statement"),
                );
            }
            Some((
                ParallelUnit::CpuThread,
                race @ (OutputRace::Atomics | OutputRace::Temporary | OutputRace::ParallelReduction),
            )) if id != cin.root => {
                return refuse(
                    LowerError::Schedule,
                    format!(
                        "`parallelize({name}, cpu_thread, {})` on a loop inside another: threads that add \
                     into the same result elements run the outermost loop's ranges (reorder `{name}` \
                     outermost, or no_races where iterations write disjoint elements)",
                        race.name()
                    ),
                );
            }
            _ => {}
        }
    }
    Ok(())
}

/// Lowers `cin` for operands whose index arrays have `widths`, with `options`.
pub fn lower_options(
    cin: &ConcreteNotation,
    types: &Types,
    value: ElemType,
    widths: &IndexWidths,
    options: &LowerOptions,
) -> Result<Lowered, LowerError> {
    // `precompute(..., w, policy)` asks for a sparse workspace; an explicit option wins.
    let from_schedule =
        cin.workspaces.iter().find(|w| w.1 == nm_ir::concrete::WorkspaceKind::Sparse).map(|w| nm_ism::Config::new(w.2));
    let options = &LowerOptions { workspace: options.workspace.or(from_schedule), ..options.clone() };
    // `bound` promises a count the sizes already fix (the front ends check it): its loops
    // run over the variables they bound.
    let unbounded;
    let cin = if cin.derivations.values().any(|d| matches!(d, Derivation::Bound { .. })) {
        unbounded = cin.without_bounds();
        &unbounded
    } else {
        cin
    };
    let inlined;
    let mut notes = Vec::new();
    let cin = match inline_unlowered_wheres(cin, &mut notes)? {
        Some(c) => {
            inlined = c;
            &inlined
        }
        None => cin,
    };
    check_parallel(cin)?;
    check_partial_dimensions(cin, types)?;
    // The nest.
    let mut loops = Vec::new();
    let mut s = cin.root;
    let assign = loop {
        match &cin.stmts[s] {
            // Unroll and bound marks only tune a loop; it runs as a plain loop here.
            CinStmt::Forall { var, body, attrs } => {
                loops.push((*var, on_threads(attrs)));
                s = *body;
            }
            CinStmt::Assign { .. } | CinStmt::Where { .. } => break s,
            CinStmt::Sequence { .. } => return refuse(LowerError::Where, "`sequence`"),
        }
    };
    let Chain { lhs, mut op, mut rhs, loops: fused, mut producers, aliases } = where_chain(cin, assign)?;
    loops.extend(fused);
    let mut sized = types.clone();
    for (new, old) in aliases {
        if sized.sizes.len() <= new.index() {
            sized.sizes.resize(new.index() + 1, 0);
        }
        sized.sizes[new.index()] = sized.sizes[old.index()];
    }
    let types = &sized;
    // `fuse` is lowered under a `pos` over the fused pair (see `Lowerer::position_loop`).
    // A consumer that only stores its scalar temporary (`A(i,l) = t` where `t` sums over j, k:
    // MTTKRP) is its producer's loops inside its own, summing into the result: the reduction
    // loops then co-iterate with everything outside them, and a register still accumulates.
    if let [p] = producers.as_slice()
        && matches!(&cin.exprs[rhs], CinExpr::Access(a) if a.tensor == p.lhs.tensor)
        && op == AssignOp::Assign
        && p.op == AssignOp::Accumulate
    {
        loops.extend(p.loops.iter().copied());
        (op, rhs) = (p.op, p.rhs);
        producers.clear();
    }
    let result = lhs.tensor;
    let result_format = types.tensors[result.index()].format.clone().filter(|f| *f != Format::dense(f.order()));
    let mut f = Function::new("kernel");
    let mut params = Vec::new();
    let result_name = cin.tensors[result].name.clone();
    let mut workspace = None;
    let mut ism = None;
    let assembly = match &result_format {
        None => None,
        Some(format) => {
            let vars: Vec<IndexVarId> = lhs.subscripts.iter().filter_map(|t| t.as_var()).collect();
            let order: Vec<IndexVarId> = format.levels().iter().map(|l| vars[l.expr.dim()]).collect();
            // A split variable stands for its parent where the inner loop runs (rows still come
            // in order); the outer one visits no coordinate.
            let loop_vars: Vec<IndexVarId> = loops
                .iter()
                .filter_map(|(v, _)| match cin.derivations.get(v) {
                    Some(Derivation::Split { outer: true, .. }) => None,
                    Some(Derivation::Split { parent, .. }) => Some(*parent),
                    _ => Some(*v),
                })
                .collect();
            let outer = order.len() - 1;
            let shape = &types.tensors[result.index()].shape;
            // Loops in storage order, then reductions: appended after each reduction.
            let appends = loop_vars.starts_with(&order);
            // The levels above the last in order, the last one anywhere below them: a dense
            // row workspace (Gustavson). Anything else scatters into a sparse workspace.
            let row = !appends
                && loop_vars.len() > outer
                && loop_vars[..outer] == order[..outer]
                && loop_vars[outer..].contains(&order[outer])
                && producers.is_empty()
                && options.workspace.is_none_or(|c| c.policy == nm_ism::Policy::Dense);
            // A vector-wise N:M operand is iterated window by window (`blocked_nest`), which
            // writes a sparse result out of order: through the sparse workspace.
            let blocked_operand = types
                .tensors
                .iter()
                .enumerate()
                .any(|(t, ty)| t != result.index() && ty.format.as_ref().is_some_and(|f| f.nm_params().is_some()));
            let appended = if (appends || row) && !blocked_operand {
                let mut f2 = f.clone();
                let mut p2 = params.clone();
                Assembly::declare(&mut f2, &mut p2, result, &result_name, format, shape).ok()
            } else {
                None
            };
            if appended.is_none() {
                let config = options.workspace.unwrap_or_else(|| nm_ism::Config::new(DEFAULT_POLICY));
                ism = Some(IsmResult::declare(
                    &mut f,
                    &mut params,
                    result,
                    &result_name,
                    format,
                    shape,
                    value,
                    config,
                    &mut notes,
                )?);
                None
            } else {
                if !appends {
                    let size = types.sizes[order[outer].index()];
                    let name = |suffix: &str| format!("{result_name}_w{suffix}");
                    let w = RowWorkspace {
                        var: order[outer],
                        size,
                        outer,
                        values: f.array(&name("vals"), value, Role::Scratch, true),
                        mark: f.array(&name("mark"), ElemType::U64, Role::Scratch, true),
                        list: (size > NARROW).then(|| RowList {
                            coords: f.array(&name("list"), ElemType::I64, Role::Scratch, true),
                            sorted: f.array(&name("sorted"), ElemType::I64, Role::Scratch, true),
                            listing: f.var(&name("listing"), ScalarType::Index),
                        }),
                        count: f.var(&name("n"), ScalarType::Index),
                        products: f.var(&name("products"), ScalarType::Index),
                        branchless: f.var(&name("branchless"), ScalarType::Index),
                        active: false,
                        marked: false,
                    };
                    params.extend(vec![result; if w.list.is_some() { 4 } else { 2 }]);
                    workspace = Some(w);
                }
                let mut assembly = Assembly::declare(&mut f, &mut params, result, &result_name, format, shape)?;
                assembly.vars = order;
                Some(assembly)
            }
        }
    };
    let result_vals =
        f.array(&format!("{result_name}_vals"), value, Role::Values { tensor: result_name.clone() }, true);
    params.push(result);
    let mut operands: Vec<Option<Operand>> = vec![None; cin.tensors.len()];
    // One iterator per distinct access: `B(i,j) * C(i,j) - C(i,j) * B(i,j)` reads B once.
    let mut accesses: Vec<Access> = Vec::new();
    collect_accesses(cin, rhs, &mut accesses);
    for p in &producers {
        collect_accesses(cin, p.rhs, &mut accesses);
    }
    accesses.retain(|a| !cin.temporaries.contains(&a.tensor));
    let mut unique: Vec<Access> = Vec::new();
    for a in accesses {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    let accesses = unique;
    for a in &accesses {
        let t = a.tensor;
        if t == result {
            return refuse(LowerError::ResultRead, "the result read on the right-hand side");
        }
        if operands[t.index()].is_some() {
            continue;
        }
        let (name, ty) = (&cin.tensors[t].name, &types.tensors[t.index()]);
        operands[t.index()] = Some(decompose(&mut f, &mut params, t, name, ty, widths, value)?);
    }
    // Row ranges may run in parallel when the outer loop names disjoint parts of the result:
    // a dense result indexed by it, or a CSR-like result (dense, compressed) whose rows it is.
    let outer = loops.first().map(|(v, _)| *v);
    // The block loop of a split outermost (`split(j, j0, j1, 64)`, `j0` first) runs ranges of
    // blocks where `j` sums into a dense result: `j`'s coordinates decide as for a plain loop.
    let split_outer = outer.and_then(|v| match cin.derivations.get(&v) {
        Some(&Derivation::Split { parent, outer: true, factor }) if !cin.derivations.contains_key(&parent) => {
            Some((parent, factor as usize))
        }
        _ => None,
    });
    let row_var = split_outer.map(|(parent, _)| parent).or(outer);
    // Where the outer loop is a reduction into a dense result, its ranges add into the same
    // elements: as the schedule asks, else (for -nthreads) through a copy per thread where
    // one is no larger than the loop's extent (a dot product, CSC SpMV; not a convolution's
    // three filter rows into an image).
    let asked = reduction_asked(cin);
    let reduction = match (&result_format, row_var) {
        (None, Some(v)) if !lhs.subscripts.iter().any(|t| t.as_var() == Some(v)) => asked.or_else(|| {
            let elements = types.tensors[result.index()].shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
            elements
                .filter(|&n| n <= types.sizes.get(v.index()).copied().unwrap_or(0))
                .map(|_| ReductionKind::PerThread)
        }),
        _ => None,
    };
    let partitionable = match (&result_format, row_var) {
        (_, None) => false,
        // Blocks of a result's rows would each have to zero their rows first: not ranged.
        (_, Some(_)) if split_outer.is_some() => reduction.is_some(),
        (None, Some(v)) => reduction.is_some() || lhs.subscripts.iter().any(|t| t.as_var() == Some(v)),
        (Some(format), Some(v)) => {
            let kinds: Vec<LevelKind> = format.levels().iter().map(|l| l.kind).collect();
            kinds.len() == 2
                && kinds[0] == LevelKind::Dense
                && matches!(kinds[1], LevelKind::Compressed(_))
                && assembly.as_ref().is_some_and(|a| a.vars[0] == v)
        }
    };
    // One position per level (a blocked format has more levels than dimensions).
    let positions = accesses
        .iter()
        .map(|a| {
            let levels = operands[a.tensor.index()].as_ref().map_or(0, |o| o.format.levels().len());
            vec![None; a.subscripts.len().max(levels).max(1)]
        })
        .collect();
    let mut lw = Lowerer {
        cin,
        types,
        f,
        operands,
        result,
        result_vals,
        bound: vec![None; cin.vars.len()],
        positions,
        accesses,
        exprs: cin.exprs.clone(),
        formats: types.tensors.iter().map(|t| t.format.clone()).collect(),
        assembly,
        temporaries: Vec::new(),
        temporary_terms: Vec::new(),
        producers,
        in_producer: false,
        producing: None,
        accumulator: None,
        value,
        workspace,
        ism,
        partitionable,
        reduction,
        bounds: None,
        row_buffer: None,
        repeating: 0,
        segments: Vec::new(),
        windows: Vec::new(),
        hints: Vec::new(),
        prologue: Vec::new(),
        threaded: loops.iter().any(|(_, parallel)| *parallel),
        on_threads: Vec::new(),
        split_blocks: Vec::new(),
        visit_every_coordinate: options.visit_every_coordinate,
        notes,
    };
    for p in lw.producers.clone() {
        let name = cin.tensors[p.lhs.tensor].name.clone();
        let scalar = value.scalar();
        let v = lw.f.var(&name, scalar);
        lw.temporaries.push((p.lhs.tensor, v));
    }
    let mut body = match &mut lw.assembly {
        Some(a) => a.prologue(&mut lw.f, lw.result_vals),
        None => Vec::new(),
    };
    if let Some(w) = &lw.workspace {
        body.push(Stmt::Resize { array: w.values, len: int(w.size as i64) });
        body.push(Stmt::Resize { array: w.mark, len: int(w.size as i64 / 64 + 1) });
        body.push(Stmt::Decl(w.branchless, int(0)));
        if let Some(l) = w.list {
            body.push(Stmt::Decl(l.listing, int(1)));
            // One slot more: a branchless touch writes `list[count]` before it knows it is new.
            body.push(Stmt::Resize { array: l.coords, len: int(w.size as i64 + 1) });
            // Rows are sorted only when they list fewer than size / SORT_BELOW coordinates.
            body.push(Stmt::Resize { array: l.sorted, len: int(w.size as i64 / SORT_BELOW + 1) });
        }
    }
    body.extend(lw.nest(&loops, &lhs, op, rhs)?);
    lw.note_sequential_loops(&loops);
    let reduction = lw.bounds.and(lw.reduction);
    if let (Some(_), Some(v), None) = (asked, outer, reduction) {
        let why = match &result_format {
            Some(_) => format!(
                "its iterations add into the sparse result `{result_name}`; atomics and per-thread \
                 copies are for dense results"
            ),
            None => "its loop co-iterates sparse operands or walks their positions in order, each \
                     iteration starting where the last stopped"
                .to_string(),
        };
        lw.note_one_thread(v, &why);
    }
    body.splice(0..0, std::mem::take(&mut lw.prologue));
    if let (Some(bounds), Some(_)) = (lw.bounds, reduction) {
        // Ranges add into the whole result: zeroed once, by a whole run (`bounds[2]`), or by
        // the caller that runs the ranges.
        let zero = lw.zero_result(&lhs, None);
        body.insert(0, Stmt::If { cond: bin(BinOp::Ne, load(bounds, int(2)), int(0)), then: zero, otherwise: vec![] });
    } else if lw.assembly.is_none() && lw.bounds.is_none() && lw.ism.is_none() {
        let zero = lw.zero_result(&lhs, None);
        body.splice(0..0, zero);
    }
    if reduction == Some(ReductionKind::Atomic) {
        lw.f.atomic = Some(lw.result_vals);
    }
    if let Some(ism) = &lw.ism {
        body.push(Stmt::Finish { workspace: ism.slot });
    }
    let partition = lw.bounds.map(|bounds| Partition {
        extent: match split_outer {
            Some((parent, factor)) => types.sizes[parent.index()].div_ceil(factor),
            None => types.sizes[outer.expect("an outer loop").index()],
        },
        bounds,
        rows: lw.assembly.as_ref().map(|a| (a.pos[1].expect("csr-like"), a.crd[1].expect("csr-like"), lw.result_vals)),
        scheduled: loops.first().is_some_and(|(_, threads)| *threads) || asked.is_some(),
        reduction: reduction.map(|kind| Reduction { values: lw.result_vals, kind }),
    });
    if let Some(a) = &lw.assembly {
        // A row range visits every row of its range: no row's `pos` is left to fill.
        if partition.is_none() {
            body.extend(a.epilogue(&mut lw.f));
        }
        if lw.ism.is_none() {
            body.extend(a.written());
        }
    }
    lw.f.body = body;
    crate::prefetch::insert(&mut lw.f);
    crate::partial_sums::interleave(&mut lw.f);
    params.extend(std::iter::repeat_n(result, lw.f.arrays.len() - params.len()));
    let tensors = cin
        .tensors
        .iter()
        .zip(&types.tensors)
        .map(|((_, t), ty)| {
            let format = ty.format.clone().unwrap_or_else(|| Format::dense(ty.shape.len().max(1)));
            (t.name.clone(), ty.shape.clone(), format)
        })
        .collect();
    // A kernel that breaks the loop IR's rules is a bug here: refused, never run.
    lw.f.verify().map_err(|e| LowerError::Internal(e.to_string()))?;
    Ok(Lowered { function: lw.f, params, partition, tensors, notes: lw.notes })
}

/// `a`, `b`, ..., `z`, `aa`, `ab`, ...: the letters naming the `n`-th access of a tensor.
fn access_letter(n: usize) -> String {
    let letter = (b'a' + (n % 26) as u8) as char;
    if n < 26 { letter.to_string() } else { format!("{}{letter}", access_letter(n / 26 - 1)) }
}

/// Operand `t` (`name`, of type `ty`) decomposed into its arrays at the kernel boundary —
/// per compressed level `pos` and `crd`, per structured level its metadata, then its values —
/// declared in `f` in parameter order (`params` names the tensor of each).
fn decompose(
    f: &mut Function,
    params: &mut Vec<TensorId>,
    t: TensorId,
    name: &str,
    ty: &nm_ir::notation::TensorType,
    widths: &IndexWidths,
    value: ElemType,
) -> Result<Operand, LowerError> {
    let order = ty.shape.len();
    let format = ty.format.clone().unwrap_or_else(|| Format::dense(order.max(1)));
    let (mut pos, mut crd) = (vec![None; format.levels().len()], vec![None; format.levels().len()]);
    let mut structured = vec![None; format.levels().len()];
    // Vector-wise N:M (`nm(N,M,L)`): its metadata; iterated level by level where its
    // variables are reached (see `Lowerer::blocked_nest`).
    if let Some((n, m, _)) = format.nm_params() {
        crd[2] = Some(f.array(
            &format!("{name}2_meta"),
            ElemType::U64,
            Role::Metadata { tensor: name.to_string(), level: 2 },
            false,
        ));
        params.push(t);
        structured[2] = Some((n, m, m as usize));
        let vals = f.array(&format!("{name}_vals"), value, Role::Values { tensor: name.to_string() }, false);
        params.push(t);
        return Ok(Operand { format, shape: ty.shape.clone(), pos, crd, structured, vals });
    }
    for (l, level) in format.levels().iter().enumerate() {
        match level.kind {
            LevelKind::Dense => {}
            LevelKind::Compressed(p)
                if p.unique && p.ordered && !matches!(level.expr, nm_format::LevelExpr::Dim(_)) =>
            {
                return refuse(LowerError::Format, format!("blocked compressed levels (`{name}`)"));
            }
            LevelKind::Compressed(_) | LevelKind::Singleton(_) => {
                let (pos_elem, crd_elem) = widths.get(name, l);
                if matches!(level.kind, LevelKind::Compressed(_)) {
                    pos[l] = Some(f.array(
                        &format!("{name}{l}_pos"),
                        pos_elem,
                        Role::Pos { tensor: name.to_string(), level: l },
                        false,
                    ));
                    params.push(t);
                }
                crd[l] = Some(f.array(
                    &format!("{name}{l}_crd"),
                    crd_elem,
                    Role::Crd { tensor: name.to_string(), level: l },
                    false,
                ));
                params.push(t);
            }
            LevelKind::Structured { n, m } if matches!(level.expr, nm_format::LevelExpr::Dim(_)) => {
                crd[l] = Some(f.array(
                    &format!("{name}{l}_meta"),
                    ElemType::U64,
                    Role::Metadata { tensor: name.to_string(), level: l },
                    false,
                ));
                params.push(t);
                let size = ty.shape[level.expr.dim()].div_ceil(m as usize) * m as usize;
                structured[l] = Some((n, m, size));
            }
            other => return refuse(LowerError::Format, format!("{other} levels (`{name}`)")),
        }
        if !matches!(level.expr, nm_format::LevelExpr::Dim(_)) {
            return refuse(
                LowerError::Format,
                format!("blocked levels (`{name}`; a vector-wise N:M SpMM runs through nm-spmm, see the command)"),
            );
        }
    }
    let vals = f.array(&format!("{name}_vals"), value, Role::Values { tensor: name.to_string() }, false);
    params.push(t);
    Ok(Operand { format, shape: ty.shape.clone(), pos, crd, structured, vals })
}

fn collect_accesses(cin: &ConcreteNotation, e: ExprId, out: &mut Vec<Access>) {
    collect_accesses_in(&cin.exprs, e, out)
}

fn collect_accesses_in(exprs: &Arena<ExprId, CinExpr>, e: ExprId, out: &mut Vec<Access>) {
    match &exprs[e] {
        CinExpr::Access(a) => out.push(a.clone()),
        CinExpr::Literal(_) => {}
        CinExpr::Neg(a) | CinExpr::Sum(_, a) => collect_accesses_in(exprs, *a, out),
        CinExpr::Binary(_, a, b) => {
            collect_accesses_in(exprs, *a, out);
            collect_accesses_in(exprs, *b, out);
        }
    }
}

impl Lowerer<'_> {
    /// The prefix of the names generated for access `k`: its tensor's name where the tensor
    /// is read by no other access, else the name and a letter per access (`B_a`, `B_b` for
    /// `B(i,k) * B(k,j)`), so that each access's iterators have names of their own.
    fn access_name(&self, k: usize) -> String {
        let tensor = self.accesses[k].tensor;
        let name = &self.cin.tensors[tensor].name;
        let same: Vec<usize> = (0..self.accesses.len()).filter(|&j| self.accesses[j].tensor == tensor).collect();
        match same.iter().position(|&j| j == k) {
            Some(nth) if same.len() > 1 => format!("{name}_{}", access_letter(nth)),
            _ => name.clone(),
        }
    }

    fn size(&self, v: IndexVarId) -> usize {
        self.types.sizes[v.index()]
    }

    /// The accesses (indices into `self.accesses`) read by `e`.
    fn reads(&self, e: ExprId) -> Vec<usize> {
        let mut found = Vec::new();
        collect_accesses_in(&self.exprs, e, &mut found);
        let mut out: Vec<usize> = found
            .iter()
            .filter(|a| !self.cin.temporaries.contains(&a.tensor))
            .map(|a| self.accesses.iter().position(|b| b == a).expect("collected"))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Materializes a lattice point's expression as nodes.
    fn materialize(&mut self, p: &PointExpr) -> ExprId {
        match p {
            PointExpr::Node(e) => *e,
            PointExpr::Neg(a) => {
                let a = self.materialize(a);
                self.exprs.push(CinExpr::Neg(a))
            }
            PointExpr::Binary(op, a, b) => {
                let (a, b) = (self.materialize(a), self.materialize(b));
                self.exprs.push(CinExpr::Binary(*op, a, b))
            }
        }
    }

    /// Whether a loop the schedule put on threads runs on OpenMP threads: not where its
    /// iterations append to a sparse result (or its workspace) through one shared length, in
    /// order, growing it or flushing the workspace on the way — such a loop runs on one
    /// thread, and a note says so (row ranges of a CSR result still run on `-nthreads`).
    fn on_omp_threads(&mut self, v: IndexVarId, parallel: bool) -> bool {
        if !parallel {
            return false;
        }
        if self.assembly.is_none() && self.workspace.is_none() && self.ism.is_none() {
            self.on_threads.push(v);
            return true;
        }
        let why = format!(
            "its iterations append to the sparse result `{}` in order (-nthreads runs row ranges of a \
             CSR result on threads)",
            self.cin.tensors[self.result].name
        );
        self.note_one_thread(v, &why);
        false
    }

    /// Says once, with the first reason found, that the loop over `v` the schedule put on
    /// threads runs on one.
    fn note_one_thread(&mut self, v: IndexVarId, why: &str) {
        let said = format!("`parallelize({}, cpu_thread, ...)` runs on one thread", self.cin.vars[v].name);
        if !self.notes.iter().any(|n| n.starts_with(&said)) {
            self.notes.push(format!("{said}: {why}"));
        }
    }

    /// A note for each loop the schedule put on threads that runs on one for a reason
    /// [`Self::on_omp_threads`] did not give: the loop co-iterates sparse operands, or walks
    /// positions, in order — a `while`, or iterators advanced from one iteration to the next,
    /// which OpenMP cannot split. The user asked for threads and should hear why there are none.
    fn note_sequential_loops(&mut self, loops: &[(IndexVarId, bool)]) {
        for &(v, parallel) in loops {
            if parallel && !self.on_threads.contains(&v) {
                self.note_one_thread(
                    v,
                    "its loop co-iterates sparse operands or walks their positions in order, each \
                     iteration starting where the last stopped (-nthreads runs row ranges of a dense \
                     outer loop on threads)",
                );
            }
        }
    }

    /// M of access `k`'s structured level `l`.
    fn structured_m(&self, k: usize, l: usize) -> usize {
        let o = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
        o.structured[l].map_or(1, |(_, m, _)| m as usize)
    }

    /// How many loops are bound now.
    fn depth(&self) -> usize {
        self.bound.iter().filter(|b| b.is_some()).count()
    }

    /// Whether `e` has a term made only of dense operands and constants (`B(i) + 2*t` with B
    /// dense): a loop over it then visits every coordinate, whatever its sparse operands and
    /// `where` temporaries hold.
    fn covered_by_dense(&self, e: ExprId) -> bool {
        match &self.exprs[e] {
            CinExpr::Literal(_) => true,
            CinExpr::Neg(a) | CinExpr::Sum(_, a) => self.covered_by_dense(*a),
            CinExpr::Binary(BinaryOp::Add | BinaryOp::Sub, a, b) => {
                self.covered_by_dense(*a) || self.covered_by_dense(*b)
            }
            CinExpr::Binary(_, a, b) => self.covered_by_dense(*a) && self.covered_by_dense(*b),
            CinExpr::Access(a) => {
                !self.cin.temporaries.contains(&a.tensor)
                    && self.operands[a.tensor.index()]
                        .as_ref()
                        .is_some_and(|op| op.format.levels().iter().all(|l| l.kind == LevelKind::Dense))
            }
        }
    }

    /// Whether every level of access `k`'s tensor is dense.
    fn all_dense(&self, k: usize) -> bool {
        let op = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
        op.format.levels().iter().all(|l| l.kind == LevelKind::Dense)
    }

    /// The position of a read of an all-dense tensor: its levels' coordinates linearized.
    fn dense_position(&self, k: usize) -> Result<Expr, LowerError> {
        let a = &self.accesses[k];
        let op = self.operands[a.tensor.index()].as_ref().expect("decomposed");
        let mut position = int(0);
        for level in op.format.levels() {
            let d = level.expr.dim();
            if let Some(v) = a.subscripts[d].vars().find(|v| self.bound[v.index()].is_none()) {
                return refuse(
                    LowerError::LoopOrder,
                    format!(
                        "`{}` is read outside the loop over `{}`",
                        self.cin.tensors[a.tensor].name, self.cin.vars[v].name
                    ),
                );
            }
            let coordinate = self.affine(&a.subscripts[d], None);
            position = bin(BinOp::Add, bin(BinOp::Mul, position, int(op.shape[d] as i64)), coordinate);
        }
        Ok(position)
    }
}

/// Whether `access` is a factor of the product `e` (every term of `e` is multiplied by it).
fn is_factor(exprs: &Arena<ExprId, CinExpr>, e: ExprId, access: &Access) -> bool {
    match &exprs[e] {
        CinExpr::Access(a) => a == access,
        CinExpr::Binary(BinaryOp::Mul, x, y) => is_factor(exprs, *x, access) || is_factor(exprs, *y, access),
        _ => false,
    }
}
