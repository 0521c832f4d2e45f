//! The entry points of the lowering and their phases: the statement checked and prepared,
//! how the result is written (appended, a row workspace, a sparse workspace), which row
//! ranges may run on threads, the lowering's state made, the nest built around, the kernel
//! checked and handed on.

use super::assembly::{Assembly, IsmResult};
use super::workspace::{NARROW, RowList, RowWorkspace};
use super::{
    AccessId, DEFAULT_POLICY, IndexWidths, Inside, LowerError, LowerOptions, Lowered, Lowerer, Operand, TensorDecl,
    decompose, refuse,
};
use crate::args::{Partition, Reduction, ReductionKind};
use crate::ir::build::{bin, int, load};
use crate::ir::{ArrayId, BinOp, ElemType, Function, Role, ScalarType, Stmt};
use nm_format::Format;
use nm_ir::concrete::ConcreteNotation;
use nm_ir::id::{Arena, Id, IdMap};
use nm_ir::notation::{Access, IndexVarId, TensorId, Types};
use nm_ir::plan::{Nest, Plan, PlanOptions, Producer, ResultPlan, RowPlan};

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

/// Lowers `cin` for operands whose index arrays have `widths`, with `options`: plans it
/// ([`Plan::new`]), then lowers the plan ([`lower_plan`]).
pub fn lower_options(
    cin: &ConcreteNotation,
    types: &Types,
    value: ElemType,
    widths: &IndexWidths,
    options: &LowerOptions,
) -> Result<Lowered, LowerError> {
    let plan = Plan::new(cin, types, &PlanOptions { workspace: options.workspace })?;
    lower_plan(&plan, value, widths, options)
}

/// Lowers a planned statement for operands whose index arrays have `widths`: every decision
/// the plan holds is taken from it.
pub fn lower_plan(
    plan: &Plan,
    value: ElemType,
    widths: &IndexWidths,
    options: &LowerOptions,
) -> Result<Lowered, LowerError> {
    let (cin, types) = (&plan.cin, &plan.types);
    let Nest { lhs, op, rhs, loops, producers } = plan.nest.clone();
    let mut notes = plan.notes.clone();
    let result = lhs.tensor;
    let mut f = Function::new("kernel");
    let mut params = Vec::new();
    let result_name = cin.tensors[result].name.clone();
    let ResultWriting { assembly, workspace, ism } = match &types.tensors[result.index()].format {
        Some(format) if plan.result != ResultPlan::Dense => {
            let target = ResultTarget { tensor: result, name: &result_name, format, value };
            result_writing(types, &plan.result, &target, &mut f, &mut params, &mut notes)?
        }
        _ => ResultWriting { assembly: None, workspace: None, ism: None },
    };
    let result_vals =
        f.array(&format!("{result_name}_vals"), value, Role::Values { tensor: result_name.clone() }, true);
    params.push(result);
    // One iterator per distinct access: `B(i,j) * C(i,j) - C(i,j) * B(i,j)` reads B once.
    let accesses: Arena<AccessId, Access> = plan.accesses.iter().cloned().collect();
    let mut operands: IdMap<TensorId, Operand> = IdMap::new(cin.tensors.len());
    for (_, a) in accesses.iter() {
        let t = a.tensor;
        if t == result {
            return refuse(LowerError::ResultRead, "the result read on the right-hand side");
        }
        if operands[t].is_none() {
            let (name, ty) = (&cin.tensors[t].name, &types.tensors[t.index()]);
            operands[t] = Some(decompose(&mut f, &mut params, t, name, ty, widths, value)?);
        }
    }
    let RowPlan { outer, split_outer, asked, reduction, partitionable } = plan.rows.clone();
    let mut lw = Lowerer::new(
        plan,
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
    let opened = body.len();
    body.extend(lw.nest(Inside { loops: &loops, lhs: &lhs, op, rhs })?);
    if let (Some(bounds), Some(a)) = (lw.bounds, &lw.assembly) {
        // Row ranges of a sparse result append from where the caller puts their first entry.
        body.splice(opened..opened, a.start_at(bounds));
    }
    lw.note_sequential_loops(&loops);
    let reduction = lw.bounds.and(lw.reduction);
    if let (Some(_), Some(v), None) = (asked, outer, reduction) {
        let why = match &plan.result {
            ResultPlan::Append { .. } | ResultPlan::Scatter { .. } => format!(
                "its iterations add into the sparse result `{result_name}`; atomics and per-thread \
                 copies are for dense results"
            ),
            ResultPlan::Dense => "its loop co-iterates sparse operands or walks their positions in order, each \
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
        // A split's block loop counts blocks, not the rows `pos` counts.
        weights: lw.row_weights.filter(|_| split_outer.is_none()),
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
    operands: IdMap<TensorId, Operand>,
    accesses: Arena<AccessId, Access>,
    result: TensorId,
    result_vals: ArrayId,
    value: ElemType,
}

impl<'a> Lowerer<'a> {
    /// The lowering's state before the nest: `plan`'s statement, types and lattices, `kernel`
    /// as declared so far, the result written as `writing` says, `ranges` (whether row ranges
    /// may run apart, how a reduction's ranges combine), the loops and the options.
    #[allow(clippy::too_many_arguments)] // each is a value an earlier phase made
    fn new(
        plan: &'a Plan,
        kernel: Kernel,
        writing: ResultWriting,
        producers: Vec<Producer>,
        ranges: (bool, Option<ReductionKind>),
        loops: &[(IndexVarId, bool)],
        options: &LowerOptions,
        notes: Vec<String>,
    ) -> Self {
        let Kernel { f, operands, accesses, result, result_vals, value } = kernel;
        let (cin, types) = (&plan.cin, &plan.types);
        let ResultWriting { assembly, workspace, ism } = writing;
        let (partitionable, reduction) = ranges;
        // One position per level (a blocked format has more levels than dimensions).
        let positions = accesses
            .iter()
            .map(|(_, a)| {
                let levels = operands[a.tensor].as_ref().map_or(0, |o| o.format.levels().len());
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
            bound: IdMap::new(cin.vars.len()),
            positions,
            accesses,
            exprs: &plan.lattices.exprs,
            lattices: &plan.lattices,
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
            row_weights: None,
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
    value: ElemType,
}

/// The arrays that write the sparse `target` as `plan` says (declared in `f`): appended, with
/// a dense row workspace where only its last level comes out of order, or through an
/// insert–sort–merge workspace.
fn result_writing(
    types: &Types,
    plan: &ResultPlan,
    target: &ResultTarget<'_>,
    f: &mut Function,
    params: &mut Vec<TensorId>,
    notes: &mut Vec<String>,
) -> Result<ResultWriting, LowerError> {
    let ResultTarget { tensor: result, name: result_name, format, value } = *target;
    let shape = &types.tensors[result.index()].shape;
    let (order, row_workspace) = match plan {
        ResultPlan::Dense => return Ok(ResultWriting { assembly: None, workspace: None, ism: None }),
        ResultPlan::Scatter { config } => {
            let config = config.unwrap_or_else(|| nm_ism::Config::new(DEFAULT_POLICY));
            let ism = IsmResult::declare(f, params, result, result_name, format, shape, value, config, notes)?;
            return Ok(ResultWriting { assembly: None, workspace: None, ism: Some(ism) });
        }
        ResultPlan::Append { order, row_workspace, .. } => (order.clone(), *row_workspace),
    };
    let outer = order.len() - 1;
    let workspace = row_workspace.then(|| {
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
    // (The plan appends only to formats the assembly takes: a refusal here is a bug.)
    let mut assembly = Assembly::declare(f, params, result, result_name, format, shape)
        .map_err(|e| LowerError::Internal(format!("the plan appends to a result the assembly refuses: {e}")))?;
    assembly.vars = order;
    Ok(ResultWriting { assembly: Some(assembly), workspace, ism: None })
}
