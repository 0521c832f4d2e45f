//! The statement's structure as the kernel runs it: the loops from the root down to the main
//! assignment, the chain of `where`s whose scalar producers run inside them, the ones inlined
//! instead, and the distinct accesses the kernel reads.

use super::PlanError;
use crate::concrete::{ConcreteNotation, LoopAttrs, Stmt as CinStmt, StmtId};
use crate::id::{Arena, Id};
use crate::notation::{Access, AssignOp, Expr as CinExpr, ExprId, IndexTerm, IndexVarId, Types};

/// The main computation: its assignment, the loops around it (outermost first, each with
/// whether it runs on threads) and the scalar `where` producers it reads, computed right
/// before it.
#[derive(Clone, Debug)]
pub struct Nest {
    /// The assignment's left-hand side.
    pub lhs: Access,
    /// `=` or `+=`.
    pub op: AssignOp,
    /// The assignment's right-hand side.
    pub rhs: ExprId,
    /// The loops, outermost first, each with whether it runs on threads.
    pub loops: Vec<(IndexVarId, bool)>,
    /// The producers, innermost first.
    pub producers: Vec<Producer>,
}

/// A `where` producer: loops computing a scalar temporary.
#[derive(Clone, Debug)]
pub struct Producer {
    /// Its loops, outermost first.
    pub loops: Vec<(IndexVarId, bool)>,
    /// The temporary it writes.
    pub lhs: Access,
    /// `=` or `+=`.
    pub op: AssignOp,
    /// What it computes.
    pub rhs: ExprId,
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

/// Whether a loop runs on OpenMP threads: `parallelize(cpu_thread, no_races)` (the schedule
/// checked that its iterations write disjoint elements) or `ignore_races` (the user's promise).
/// `cpu_vector` is left to the C compiler's vectorizer; the other strategies are refused by
/// [`super::checks::check_parallel`].
pub fn on_threads(attrs: &LoopAttrs) -> bool {
    use crate::concrete::{OutputRace, ParallelUnit};
    matches!(attrs.parallel, Some((ParallelUnit::CpuThread, OutputRace::NoRaces | OutputRace::IgnoreRaces)))
}

/// Appends the accesses `e` reads to `out`, in order (temporaries' included).
pub fn collect_accesses(exprs: &Arena<ExprId, CinExpr>, e: ExprId, out: &mut Vec<Access>) {
    match &exprs[e] {
        CinExpr::Access(a) => out.push(a.clone()),
        CinExpr::Literal(_) => {}
        CinExpr::Neg(a) | CinExpr::Sum(_, a) => collect_accesses(exprs, *a, out),
        CinExpr::Binary(_, a, b) => {
            collect_accesses(exprs, *a, out);
            collect_accesses(exprs, *b, out);
        }
    }
}

fn where_chain(cin: &ConcreteNotation, s: StmtId) -> Result<Chain, PlanError> {
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
                        return Err(PlanError::Where(
                            "a `where` whose producer is not loops around a scalar temporary, nor a workspace its consumer copies out"
                                .into(),
                        ));
                    }
                }
            }
            Ok(chain)
        }
        CinStmt::Forall { .. } => {
            Err(PlanError::Where("loops inside a `where` consumer, other than copying out a workspace".into()))
        }
        CinStmt::Sequence { .. } => Err(PlanError::Where("`sequence`".into())),
    }
}

/// `cin` with each `where` whose consumer loops over more than copying the temporary out
/// replaced by its consumer reading the producer's expression (see
/// [`ConcreteNotation::inline_where`]), said in `notes`: the loops here keep a temporary
/// between two nests only as a fused workspace or a scalar. `None` when there is none.
pub(super) fn inline_unlowered_wheres(
    cin: &ConcreteNotation,
    notes: &mut Vec<String>,
) -> Result<Option<ConcreteNotation>, PlanError> {
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
        next.inline_where(s).map_err(|why| {
            PlanError::Where(format!("a `where` whose consumer loops over `{temporary}` beyond copying it out: {why}"))
        })?;
        notes.push(format!(
            "`{temporary}` is computed where its consumer reads it: the loops here keep a temporary between two loop nests only as a workspace the consumer copies out (the result is the same)"
        ));
        out = Some(next);
    }
}

/// The name of the temporary a `where`'s producer writes.
fn where_temporary(cin: &ConcreteNotation, mut s: StmtId) -> String {
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
fn fused_workspace(cin: &ConcreteNotation, consumer: StmtId, producer: StmtId) -> Option<Chain> {
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
    let subscripts =
        lhs.subscripts.iter().map(|t| t.as_var().map(|v| IndexTerm::var(rename(v)))).collect::<Option<Vec<_>>>()?;
    let aliases = write_vars.iter().copied().zip(read_vars.iter().copied()).collect();
    Some(Chain { lhs: Access { subscripts, ..lhs }, op, rhs, loops, producers: Vec::new(), aliases })
}

/// The main computation's nest: the loops from the root down to its assignment (those of a
/// `where` chain's consumers included), the assignment, the scalar producers it reads, and
/// `types` with the sizes of the variables a schedule made to stand for others.
pub(super) fn main_nest(cin: &ConcreteNotation, types: &Types) -> Result<(Nest, Types), PlanError> {
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
            CinStmt::Sequence { .. } => return Err(PlanError::Where("`sequence`".into())),
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
    Ok((Nest { lhs, op, rhs, loops, producers }, sized))
}

/// The distinct accesses of operands (not temporaries) that the nest's assignment and its
/// scalar producers read, in order of first appearance.
pub(super) fn distinct_accesses(cin: &ConcreteNotation, nest: &Nest) -> Vec<Access> {
    let mut accesses: Vec<Access> = Vec::new();
    collect_accesses(&cin.exprs, nest.rhs, &mut accesses);
    for p in &nest.producers {
        collect_accesses(&cin.exprs, p.rhs, &mut accesses);
    }
    accesses.retain(|a| !cin.temporaries.contains(&a.tensor));
    let mut unique: Vec<Access> = Vec::new();
    for a in accesses {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    unique
}
