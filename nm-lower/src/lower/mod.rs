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
//! Here: the lowering's state (`Lowerer`), its errors and what it hands on (`Lowered`). Its
//! parts: `entry` (the entry points and their phases: checks, how the result is written,
//! row ranges, the state made and the nest built around), `chain` (the loops down to the
//! main assignment and the `where`s around it), `nest` (the loops,
//! one per variable, by merge lattice), `subsection` (compressed levels under compound
//! subscripts), `result` (temporaries, stores, the assignment's expression), `assembly`
//! (sparse results appended or through a sparse workspace), `workspace` (the row workspace),
//! `boundary` (index widths, arguments, the result read back as a tensor).

use nm_format::{Format, LevelKind};
use nm_ir::concrete::ConcreteNotation;
use nm_ir::id::{Arena, Id, IdMap};
use nm_ir::notation::{Access, AssignOp, BinaryOp, Expr as CinExpr, ExprId, IndexVarId, TensorId, Types};
use nm_ir::plan::{Lattices, Producer};

mod assembly;
mod boundary;
mod coiterate;
mod derived;
mod entries;
mod entry;
mod guide;
mod iterate;
mod marks;
mod nest;
mod reach;
mod result;
mod workspace;

use assembly::{Assembly, IsmResult};
pub use boundary::{
    IndexWidths, KernelValue, arguments, check_operand, rearm, result_tensor, take_result_tensor, view_arguments,
};
pub use entry::{lower, lower_options, lower_plan, lower_with};
use iterate::{Level, Subrange};
use workspace::RowWorkspace;

use crate::args::{Partition, ReductionKind};
use crate::ir::build::{bin, int};
use crate::ir::{ArrayId, BinOp, ElemType, Expr, Function, Role, Stmt, VarId};

nm_ir::id!(
    /// An access the kernel reads: one of an operand's distinct subscript lists (a tensor
    /// read twice, `B(i,k) * B(k,j)`, has two, each with its own iterators).
    AccessId,
    "access"
);

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

impl From<nm_ir::plan::PlanError> for LowerError {
    /// The planner's refusals are the lowering's of the same kinds, with the same words.
    fn from(e: nm_ir::plan::PlanError) -> Self {
        use nm_ir::plan::PlanError;
        match e {
            PlanError::Where(what) => LowerError::Where(what),
            PlanError::Schedule(what) => LowerError::Schedule(what),
            PlanError::Extent(what) => LowerError::Extent(what),
            other => LowerError::Internal(other.to_string()),
        }
    }
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
    /// Its levels as the kernel reads them, in storage order.
    levels: Vec<Level>,
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
    /// Every tensor's declaration, by id: what [`arguments`] checks operands against (a
    /// kernel trusts its arrays' lengths).
    pub tensors: Vec<TensorDecl>,
    /// What the lowering decided that a user should hear about (a dense workspace that would
    /// not fit, replaced by a sparse one).
    pub notes: Vec<String>,
}

/// A tensor as the kernel was lowered for it.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDecl {
    /// Its name in the statement.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its format (dense where the statement declared none).
    pub format: Format,
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

/// What the default loop order (`nm_ir::concrete::concretize_for`) is told of this back end: a
/// convolution into a sparse result whose last level is at most this wide puts its filter
/// loops before the result variable's, writing that level through the row workspace (a dense
/// row of values and a bitmap of marks, read back after each row); wider, the result
/// variable's loop stays outside. Measured with `O(i) = I(i+r) * F(r)` into a sparse vector:
/// the workspace order won only on dense inputs at this width and lost at every density far
/// past it.
pub const LOOP_ORDER: nm_ir::concrete::LoopOrderTarget =
    nm_ir::concrete::LoopOrderTarget { widest_row_workspace: 16_384 };

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
    operands: IdMap<TensorId, Operand>,
    result: TensorId,
    result_vals: ArrayId,
    /// Loop variable of each index variable, once bound.
    bound: IdMap<IndexVarId, VarId>,
    /// For each (tensor, access), the position variable of each resolved level.
    positions: Arena<AccessId, Vec<Option<VarId>>>,
    /// The distinct accesses of operands, in order of first appearance.
    accesses: Arena<AccessId, Access>,
    /// The statement's expression nodes, plus those lattice points compute (the plan's).
    exprs: &'a Arena<ExprId, CinExpr>,
    /// The merge lattice of every loop (the plan's).
    lattices: &'a Lattices,
    /// See [`LowerOptions::visit_every_coordinate`].
    visit_every_coordinate: bool,
    /// See [`Lowered::notes`].
    notes: Vec<String>,
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
    /// The `pos` that weighs the outer loop's rows (see [`Partition::weights`]).
    row_weights: Option<ArrayId>,
    /// A dense result's row buffer (see [`Lowerer::accumulate_rows`]).
    row_buffer: Option<ArrayId>,
    /// Open loops that visit one coordinate more than once (a non-unique level walked entry
    /// by entry): a result element's sum is then not whole at its store.
    repeating: usize,
    /// (split parent, block loop variable) of the `split`s whose block loop is open.
    split_blocks: Vec<(IndexVarId, VarId)>,
    /// (access, level, end of the segment): a non-unique level co-iterated segment by segment;
    /// the entries of the current segment (one coordinate) are its children's positions.
    segments: Vec<(AccessId, usize, VarId)>,
    /// (access, level, subrange): the subsection of a compressed level that the loops of a
    /// compound subscript's earlier variables narrowed it to — from its first entry; where it
    /// ends, the searches of the loops inside find.
    windows: Vec<(AccessId, usize, Subrange)>,
    /// (pos array, level, hint arrays) of searched levels (see [`Lowerer::search_hints`]).
    hints: Vec<(ArrayId, usize, ArrayId, ArrayId)>,
    /// Statements the kernel runs first (zeroing hint arrays).
    prologue: Vec<Stmt>,
    /// Whether some loop runs on several threads (OpenMP).
    threaded: bool,
    /// The loops the schedule put on threads that got them: OpenMP, or row ranges.
    on_threads: Vec<IndexVarId>,
}

/// What a loop being built has inside it: the loops still to open (outermost first, each with
/// whether the schedule put it on threads) and the assignment at the leaf.
#[derive(Clone, Copy)]
struct Inside<'a> {
    loops: &'a [(IndexVarId, bool)],
    lhs: &'a Access,
    op: AssignOp,
    rhs: ExprId,
}

/// The positions a `pos` loop walks (see [`Lowerer::position_space`]).
#[derive(Clone, Debug)]
struct PositionSpace {
    /// The access whose positions they are.
    access: AccessId,
    /// The fused variables: the operand's row and column.
    row: IndexVarId,
    col: IndexVarId,
    rows: usize,
    pos: ArrayId,
    crd: ArrayId,
    /// How many: `pos[rows]`.
    count: Expr,
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
    let mut array = |f: &mut Function, suffix: &str, elem: ElemType, role: Role| {
        params.push(t);
        f.array(&format!("{name}{suffix}"), elem, role, false)
    };
    let tensor = || name.to_string();
    // Vector-wise N:M (`nm(N,M,L)`): its metadata; iterated level by level where its
    // variables are reached (see `Lowerer::blocked_nest`).
    if let Some((n, m, _)) = format.nm_params() {
        let meta = array(f, "2_meta", ElemType::U64, Role::Metadata { tensor: tensor(), level: 2 });
        let mut levels: Vec<Level> = format.levels().iter().map(|l| Level::Blocked { kind: l.kind }).collect();
        levels[2] = Level::Structured { meta, n, m, per_parent: n as usize };
        let vals = array(f, "_vals", value, Role::Values { tensor: tensor() });
        return Ok(Operand { format, shape: ty.shape.clone(), levels, vals });
    }
    let mut levels = Vec::with_capacity(format.levels().len());
    for (l, level) in format.levels().iter().enumerate() {
        let read = match level.kind {
            LevelKind::Dense => Level::Dense,
            LevelKind::Compressed(p)
                if p.unique && p.ordered && !matches!(level.expr, nm_format::LevelExpr::Dim(_)) =>
            {
                return refuse(LowerError::Format, format!("blocked compressed levels (`{name}`)"));
            }
            LevelKind::Compressed(props) => {
                let (pos_elem, crd_elem) = widths.get(name, l);
                let pos = array(f, &format!("{l}_pos"), pos_elem, Role::Pos { tensor: tensor(), level: l });
                let crd = array(f, &format!("{l}_crd"), crd_elem, Role::Crd { tensor: tensor(), level: l });
                Level::Compressed { pos, crd, props }
            }
            LevelKind::Singleton(props) => {
                let (_, crd_elem) = widths.get(name, l);
                let crd = array(f, &format!("{l}_crd"), crd_elem, Role::Crd { tensor: tensor(), level: l });
                Level::Singleton { crd, props }
            }
            LevelKind::Band => {
                let (pos_elem, first_elem) = widths.get(name, l);
                let pos = array(f, &format!("{l}_pos"), pos_elem, Role::Pos { tensor: tensor(), level: l });
                let first = array(f, &format!("{l}_first"), first_elem, Role::First { tensor: tensor(), level: l });
                Level::Band { pos, first }
            }
            LevelKind::Structured { n, m } if matches!(level.expr, nm_format::LevelExpr::Dim(_)) => {
                let meta = array(f, &format!("{l}_meta"), ElemType::U64, Role::Metadata { tensor: tensor(), level: l });
                let size = ty.shape[level.expr.dim()].div_ceil(m as usize) * m as usize;
                Level::Structured { meta, n, m, per_parent: size / m as usize * n as usize }
            }
            other => return refuse(LowerError::Format, format!("{other} levels (`{name}`)")),
        };
        if !matches!(level.expr, nm_format::LevelExpr::Dim(_)) {
            return refuse(
                LowerError::Format,
                format!("blocked levels (`{name}`; a vector-wise N:M SpMM runs through nm-spmm, see the command)"),
            );
        }
        levels.push(read);
    }
    let vals = array(f, "_vals", value, Role::Values { tensor: tensor() });
    Ok(Operand { format, shape: ty.shape.clone(), levels, vals })
}

impl Lowerer<'_> {
    /// The prefix of the names generated for access `k`: its tensor's name where the tensor
    /// is read by no other access, else the name and a letter per access (`B_a`, `B_b` for
    /// `B(i,k) * B(k,j)`), so that each access's iterators have names of their own.
    fn access_name(&self, k: AccessId) -> String {
        let tensor = self.accesses[k].tensor;
        let name = &self.cin.tensors[tensor].name;
        let same: Vec<AccessId> = self.accesses.iter().filter(|(_, a)| a.tensor == tensor).map(|(j, _)| j).collect();
        match same.iter().position(|&j| j == k) {
            Some(nth) if same.len() > 1 => format!("{name}_{}", access_letter(nth)),
            _ => name.clone(),
        }
    }

    fn size(&self, v: IndexVarId) -> usize {
        self.types.sizes[v.index()]
    }

    /// The arrays of access `k`'s tensor (every operand is decomposed before the nest).
    fn operand(&self, k: AccessId) -> &Operand {
        self.operands[self.accesses[k].tensor].as_ref().expect("every operand decomposed")
    }

    /// The id of access `a`, one of those the plan collected.
    fn access_id(&self, a: &Access) -> AccessId {
        self.accesses.iter().find(|(_, b)| *b == a).map(|(k, _)| k).expect("collected")
    }

    /// The accesses read by `e`.
    fn reads(&self, e: ExprId) -> Vec<AccessId> {
        let mut found = Vec::new();
        nm_ir::plan::nest::collect_accesses(self.exprs, e, &mut found);
        let mut out: Vec<AccessId> =
            found.iter().filter(|a| !self.cin.temporaries.contains(&a.tensor)).map(|a| self.access_id(a)).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The points of the loop over `v` computing `e`, from the plan's lattices. Every loop
    /// the lowering co-iterates is one the plan walked; one it did not is a bug, refused.
    fn planned_lattice(&self, e: ExprId, v: IndexVarId) -> Result<&[nm_ir::plan::lattices::Point], LowerError> {
        self.lattices.along(e, v).ok_or_else(|| {
            LowerError::Internal(format!("the plan holds no merge lattice along `{}`", self.cin.vars[v].name))
        })
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

    /// How many loops are bound now.
    fn depth(&self) -> usize {
        self.bound.iter().count()
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
                    && self.operands[a.tensor].as_ref().is_some_and(|op| op.levels.iter().all(Level::is_dense))
            }
        }
    }

    /// Whether every level of access `k`'s tensor is dense.
    fn all_dense(&self, k: AccessId) -> bool {
        let op = self.operand(k);
        op.levels.iter().all(Level::is_dense)
    }

    /// The position of a read of an all-dense tensor: its levels' coordinates linearized.
    fn dense_position(&self, k: AccessId) -> Result<Expr, LowerError> {
        let a = &self.accesses[k];
        let op = self.operands[a.tensor].as_ref().expect("decomposed");
        let mut position = int(0);
        for level in op.format.levels() {
            let d = level.expr.dim();
            if let Some(v) = a.subscripts[d].vars().find(|&v| self.bound[v].is_none()) {
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
