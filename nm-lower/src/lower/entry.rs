//! The entry points of the lowering and their phases: the statement checked and prepared,
//! how the result is written (appended, a row workspace, a sparse workspace), which row
//! ranges may run on threads, the lowering's state made, the nest built around, the kernel
//! checked and handed on.

use super::assembly::{Assembly, IsmResult};
use super::chain::{distinct_accesses, inline_unlowered_wheres, main_nest};
use super::workspace::{NARROW, RowList, RowWorkspace};
use super::{
    Chain, DEFAULT_POLICY, IndexWidths, LowerError, LowerOptions, Lowered, Lowerer, Operand, Producer, TensorDecl,
    collect_accesses_in, decompose, refuse,
};
use crate::args::{Partition, Reduction, ReductionKind};
use crate::ir::build::{bin, int, load};
use crate::ir::{ArrayId, BinOp, ElemType, Function, Role, ScalarType, Stmt};
use nm_format::{Format, LevelKind};
use nm_ir::concrete::{ConcreteNotation, Derivation, Stmt as CinStmt};
use nm_ir::id::Id;
use nm_ir::notation::{Access, IndexVarId, TensorId, Types};

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
pub(super) fn on_threads(attrs: &nm_ir::concrete::LoopAttrs) -> bool {
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
    let (Chain { lhs, op, rhs, loops, producers, .. }, sized) = main_nest(cin, types)?;
    let types = &sized;
    let result = lhs.tensor;
    let result_format = types.tensors[result.index()].format.clone().filter(|f| *f != Format::dense(f.order()));
    let mut f = Function::new("kernel");
    let mut params = Vec::new();
    let result_name = cin.tensors[result].name.clone();
    let ResultWriting { assembly, workspace, ism } = match &result_format {
        None => ResultWriting { assembly: None, workspace: None, ism: None },
        Some(format) => {
            let target = ResultTarget { tensor: result, name: &result_name, format, lhs: &lhs, value };
            result_writing(cin, types, options, &target, &loops, producers.is_empty(), &mut f, &mut params, &mut notes)?
        }
    };
    let result_vals =
        f.array(&format!("{result_name}_vals"), value, Role::Values { tensor: result_name.clone() }, true);
    params.push(result);
    // One iterator per distinct access: `B(i,j) * C(i,j) - C(i,j) * B(i,j)` reads B once.
    let accesses = distinct_accesses(cin, rhs, &producers);
    let mut operands: Vec<Option<Operand>> = vec![None; cin.tensors.len()];
    for a in &accesses {
        let t = a.tensor;
        if t == result {
            return refuse(LowerError::ResultRead, "the result read on the right-hand side");
        }
        if operands[t.index()].is_none() {
            let (name, ty) = (&cin.tensors[t].name, &types.tensors[t.index()]);
            operands[t.index()] = Some(decompose(&mut f, &mut params, t, name, ty, widths, value)?);
        }
    }
    let RowRanges { outer, split_outer, asked, reduction, partitionable } =
        row_ranges(cin, types, &lhs, result_format.as_ref(), assembly.as_ref(), &loops);
    let mut lw = Lowerer::new(
        cin,
        types,
        Kernel { f, operands, accesses, result, result_vals, value },
        ResultWriting { assembly, workspace, ism },
        producers,
        (partitionable, reduction),
        &loops,
        options,
        notes,
    );
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
        body.extend(w.prologue());
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
    let mut body = lw.close_body(body, &lhs, reduction);
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
            TensorDecl { name: t.name.clone(), shape: ty.shape.clone(), format }
        })
        .collect();
    // A kernel that breaks the loop IR's rules is a bug here: refused, never run.
    lw.f.verify().map_err(|e| LowerError::Internal(e.to_string()))?;
    Ok(Lowered { function: lw.f, params, partition, tensors, notes: lw.notes })
}

/// The kernel being built and what the lowering reads as it builds it: the function, its
/// operands' decompositions and accesses, the result's values array and the value type.
struct Kernel {
    f: Function,
    operands: Vec<Option<Operand>>,
    accesses: Vec<Access>,
    result: TensorId,
    result_vals: ArrayId,
    value: ElemType,
}

impl<'a> Lowerer<'a> {
    /// The lowering's state before the nest: `kernel` as declared so far, the result written
    /// as `writing` says, `ranges` (whether row ranges may run apart, how a reduction's ranges
    /// combine), the loops and the options.
    #[allow(clippy::too_many_arguments)] // each is a value an earlier phase made
    fn new(
        cin: &'a ConcreteNotation,
        types: &'a Types,
        kernel: Kernel,
        writing: ResultWriting,
        producers: Vec<Producer>,
        ranges: (bool, Option<ReductionKind>),
        loops: &[(IndexVarId, bool)],
        options: &LowerOptions,
        notes: Vec<String>,
    ) -> Self {
        let Kernel { f, operands, accesses, result, result_vals, value } = kernel;
        let ResultWriting { assembly, workspace, ism } = writing;
        let (partitionable, reduction) = ranges;
        // One position per level (a blocked format has more levels than dimensions).
        let positions = accesses
            .iter()
            .map(|a| {
                let levels = operands[a.tensor.index()].as_ref().map_or(0, |o| o.format.levels().len());
                vec![None; a.subscripts.len().max(levels).max(1)]
            })
            .collect();
        Lowerer {
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
        }
    }
}

impl Lowerer<'_> {
    /// The kernel's body around its nest: the prologue the nest asked for first, the result
    /// zeroed (once per whole run where ranges add into it, not at all where it is assembled
    /// or collected in a workspace), atomic adds where the schedule asked for them, and the
    /// sparse workspace finished last.
    fn close_body(&mut self, mut body: Vec<Stmt>, lhs: &Access, reduction: Option<ReductionKind>) -> Vec<Stmt> {
        body.splice(0..0, std::mem::take(&mut self.prologue));
        if let (Some(bounds), Some(_)) = (self.bounds, reduction) {
            // Ranges add into the whole result: zeroed once, by a whole run (`bounds[2]`), or by
            // the caller that runs the ranges.
            let zero = self.zero_result(lhs, None);
            body.insert(
                0,
                Stmt::If { cond: bin(BinOp::Ne, load(bounds, int(2)), int(0)), then: zero, otherwise: vec![] },
            );
        } else if self.assembly.is_none() && self.bounds.is_none() && self.ism.is_none() {
            let zero = self.zero_result(lhs, None);
            body.splice(0..0, zero);
        }
        if reduction == Some(ReductionKind::Atomic) {
            self.f.atomic = Some(self.result_vals);
        }
        if let Some(ism) = &self.ism {
            body.push(Stmt::Finish { workspace: ism.slot });
        }
        body
    }
}

/// Which row ranges of a kernel's outer loop may run on threads, and how they combine.
struct RowRanges {
    /// The outermost loop's variable.
    outer: Option<IndexVarId>,
    /// The parent and factor of a split whose block loop is outermost.
    split_outer: Option<(IndexVarId, usize)>,
    /// How the schedule asks the threads of a reduction to meet, if it does.
    asked: Option<ReductionKind>,
    /// How ranges that add into the same elements of a dense result combine.
    reduction: Option<ReductionKind>,
    /// Whether ranges of the outer loop may run apart.
    partitionable: bool,
}

/// The row ranges of the outermost of `loops` for the result `lhs` (written through
/// `assembly` where it is sparse in `result_format`).
fn row_ranges(
    cin: &ConcreteNotation,
    types: &Types,
    lhs: &Access,
    result_format: Option<&Format>,
    assembly: Option<&Assembly>,
    loops: &[(IndexVarId, bool)],
) -> RowRanges {
    let result = lhs.tensor;
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
    let reduction = match (result_format, row_var) {
        (None, Some(v)) if !lhs.subscripts.iter().any(|t| t.as_var() == Some(v)) => asked.or_else(|| {
            let elements = types.tensors[result.index()].shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
            elements
                .filter(|&n| n <= types.sizes.get(v.index()).copied().unwrap_or(0))
                .map(|_| ReductionKind::PerThread)
        }),
        _ => None,
    };
    let partitionable = match (result_format, row_var) {
        (_, None) => false,
        // Blocks of a result's rows would each have to zero their rows first: not ranged.
        (_, Some(_)) if split_outer.is_some() => reduction.is_some(),
        (None, Some(v)) => reduction.is_some() || lhs.subscripts.iter().any(|t| t.as_var() == Some(v)),
        (Some(format), Some(v)) => {
            let kinds: Vec<LevelKind> = format.levels().iter().map(|l| l.kind).collect();
            kinds.len() == 2
                && kinds[0] == LevelKind::Dense
                && matches!(kinds[1], LevelKind::Compressed(_))
                && assembly.is_some_and(|a| a.vars[0] == v)
        }
    };
    RowRanges { outer, split_outer, asked, reduction, partitionable }
}

/// How a sparse result is written: what [`result_writing`] chose.
struct ResultWriting {
    /// Appended in storage order (with a row workspace for a last level written out of order).
    assembly: Option<Assembly>,
    /// The dense row workspace of a last level written out of order (Gustavson's SpGEMM).
    workspace: Option<RowWorkspace>,
    /// The insert–sort–merge workspace the loops scatter into, where nothing else writes it.
    ism: Option<IsmResult>,
}

/// The sparse result a kernel writes.
struct ResultTarget<'a> {
    tensor: TensorId,
    name: &'a str,
    format: &'a Format,
    lhs: &'a Access,
    value: ElemType,
}

/// How the loops (`loops`, outermost first) write the sparse `target`: appended where they
/// follow its storage order, through a dense row workspace where only its last level comes out
/// of order, else through an insert–sort–merge workspace (its arrays declared in `f`).
#[allow(clippy::too_many_arguments)] // the statement, the lowering's choices and the kernel being built
fn result_writing(
    cin: &ConcreteNotation,
    types: &Types,
    options: &LowerOptions,
    target: &ResultTarget<'_>,
    loops: &[(IndexVarId, bool)],
    no_producers: bool,
    f: &mut Function,
    params: &mut Vec<TensorId>,
    notes: &mut Vec<String>,
) -> Result<ResultWriting, LowerError> {
    let ResultTarget { tensor: result, name: result_name, format, lhs, value } = *target;
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
        && no_producers
        && options.workspace.is_none_or(|c| c.policy == nm_ism::Policy::Dense);
    // A vector-wise N:M operand is iterated window by window (`blocked_nest`), which
    // writes a sparse result out of order: through the sparse workspace.
    let blocked_operand = types
        .tensors
        .iter()
        .enumerate()
        .any(|(t, ty)| t != result.index() && ty.format.as_ref().is_some_and(|f| f.nm_params().is_some()));
    let appends_here = (appends || row) && !blocked_operand && {
        // Whether the result's levels can be appended to (tried on copies).
        let (mut f2, mut p2) = (f.clone(), params.clone());
        Assembly::declare(&mut f2, &mut p2, result, result_name, format, shape).is_ok()
    };
    if !appends_here {
        let config = options.workspace.unwrap_or_else(|| nm_ism::Config::new(DEFAULT_POLICY));
        let ism = IsmResult::declare(f, params, result, result_name, format, shape, value, config, notes)?;
        return Ok(ResultWriting { assembly: None, workspace: None, ism: Some(ism) });
    }
    let workspace = (!appends).then(|| {
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
        w
    });
    let mut assembly = Assembly::declare(f, params, result, result_name, format, shape)?;
    assembly.vars = order;
    Ok(ResultWriting { assembly: Some(assembly), workspace, ism: None })
}
