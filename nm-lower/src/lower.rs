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
//! [`LowerError::Unsupported`] naming what is missing.
//!
//! Each operand is decomposed into its arrays at the kernel boundary — per compressed level
//! `T{l}_pos` and `T{l}_crd`, then `T_vals` — tagged with their roles; the result is `R_vals`,
//! dense row-major, zeroed by the caller.

use nm_format::{Format, LevelKind};
use nm_ir::concrete::{ConcreteNotation, Derivation, Stmt as CinStmt};
use nm_ir::id::{Arena, Id};
use nm_ir::lattice::{MergeLattice, PointExpr};
use nm_ir::notation::{Access, AssignOp, BinaryOp, Expr as CinExpr, ExprId, IndexVarId, Scope, TensorId, Types};

use crate::interp::{ArrayData, Borrowed};
use crate::ir::build::{bin, float, int, load, var};
use crate::ir::{ArrayId, BinOp, ElemType, Expr, Function, Role, ScalarType, Stmt, UnOp, VarId};

/// A statement this lowering does not handle (yet).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LowerError {
    /// Something the first lowering class does not cover.
    #[error("cannot lower this statement yet: {0}")]
    Unsupported(String),
}

fn unsupported<T>(what: impl Into<String>) -> Result<T, LowerError> {
    Err(LowerError::Unsupported(what.into()))
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

/// Where an iterator's coordinates come from.
#[derive(Clone, Debug)]
enum Coordinates {
    /// `crd[p]`.
    Array(ArrayId),
    /// A structured N:M level: position `p` is kept entry `(p - base) mod N` of block
    /// `(p - base) / N`, at offset `meta[p]` (⌈log2 M⌉ bits, packed in 64-bit words).
    Structured { meta: ArrayId, n: u32, m: u32, base: Expr },
    /// A compound subscript resolved by this loop: the stored coordinate is
    /// `offset + coef·v`, so `v = (raw - offset) / coef` (entries that give no such `v` are
    /// skipped, see [`settle`]).
    Mapped { raw: Box<Coordinates>, offset: Expr, coef: i64 },
    /// A compound subscript with variables left after this loop: the loop visits the values of
    /// `v`, from `next` on, whose window `[base + coef·v, base + coef·v + width]` holds an
    /// entry. For the entry at `p` (the window's first) that is the larger of `next` and
    /// `⌈(raw - base - width) / coef⌉`.
    Window { raw: Box<Coordinates>, base: Expr, coef: i64, width: i64, next: VarId },
    /// A rows iterator (`Subsection::Rows`): its coordinate is kept in `state`, recomputed by
    /// `advance` after `next` moves past the loop's value.
    Rows { state: VarId, advance: RowsAdvance },
}

/// How a rows iterator moves on: set `next`, then run `steps` (move every row's window start
/// past `next`'s window start, recompute the smallest `v`, end when there is none).
#[derive(Clone, Debug)]
struct RowsAdvance {
    next: VarId,
    steps: Vec<Stmt>,
}

impl Coordinates {
    /// The coordinate at position `p`.
    fn at(&self, p: Expr) -> Expr {
        match self {
            Coordinates::Array(crd) => load(*crd, p),
            Coordinates::Structured { meta, n, m, base } => {
                let bits = nm_format::metadata_bits(*m) as i64;
                // Positions are never negative: powers of two divide by shifts (a signed
                // division by 2 or 64 is a shift plus a sign fix-up in C).
                let divide = |e: Expr, d: i64| {
                    if d > 0 && (d as u64).is_power_of_two() {
                        bin(BinOp::Shr, e, int(d.trailing_zeros() as i64))
                    } else {
                        bin(BinOp::Div, e, int(d))
                    }
                };
                let block = divide(bin(BinOp::Sub, p.clone(), base.clone()), *n as i64);
                let offset = if bits == 0 {
                    int(0)
                } else {
                    // Bit `p·bits` of the words, reaching into the next word when it straddles two.
                    let bit = bin(BinOp::Mul, p, int(bits));
                    let word = divide(bit.clone(), 64);
                    let shift = bin(BinOp::BitAnd, bit, int(63));
                    let low = bin(BinOp::Shr, load(*meta, word.clone()), shift.clone());
                    let high = bin(
                        BinOp::Shl,
                        load(*meta, bin(BinOp::Add, word, int(1))),
                        bin(BinOp::Sub, int(64), shift.clone()),
                    );
                    // A width that divides 64 (nv24's 2 bits, M = 16's 4) never straddles.
                    let joined = if 64 % bits == 0 {
                        low
                    } else {
                        let straddles = bin(BinOp::Lt, int(64 - bits), shift);
                        Expr::Select(Box::new(straddles), Box::new(bin(BinOp::BitOr, low.clone(), high)), Box::new(low))
                    };
                    bin(BinOp::BitAnd, joined, int((1i64 << bits) - 1))
                };
                bin(BinOp::Add, bin(BinOp::Mul, block, int(*m as i64)), offset)
            }
            Coordinates::Mapped { raw, offset, coef } => {
                let shifted = bin(BinOp::Sub, raw.at(p), offset.clone());
                if *coef == 1 { shifted } else { bin(BinOp::Div, shifted, int(*coef)) }
            }
            Coordinates::Rows { state, .. } => var(*state),
            Coordinates::Window { raw, base, coef, width, next } => {
                // Truncating division rounds up here: a numerator at or below zero gives a value
                // at or below zero, which `next` (never negative) outweighs.
                let over = bin(BinOp::Sub, raw.at(p), bin(BinOp::Add, base.clone(), int(*width)));
                let first = bin(BinOp::Div, bin(BinOp::Add, over, int(coef - 1)), int(*coef));
                bin(BinOp::Max, var(*next), first)
            }
        }
    }
}

impl Coordinates {
    /// The coordinate stored at position `p` (a segment is a run of equal ones; two stored
    /// coordinates may map to one loop value, `(raw - offset) / coef` truncating).
    fn stored(&self, p: Expr) -> Expr {
        match self {
            Coordinates::Mapped { raw, .. } | Coordinates::Window { raw, .. } => raw.stored(p),
            _ => self.at(p),
        }
    }
}

/// The coefficient of `v` in `term`.
fn coefficient(term: &nm_ir::notation::IndexTerm, v: IndexVarId) -> i64 {
    term.terms.iter().filter(|(_, w)| *w == v).map(|(c, _)| c).sum()
}

/// Moves `p` to the first position in `[p, end)` whose coordinate is at least `target`
/// (binary search; the level's coordinates are sorted). The two answers a convolution asks
/// for most — the range's first entry (a window already starts there) and its end (a window
/// reaching past the row) — are checked first, in O(1), then a few entries forward from the
/// start and back from the end: a search per filter position cost a 999 × 999 image at 80%
/// sparsity a quarter of its time.
fn lower_bound(f: &mut Function, p: VarId, end: VarId, raw: &Coordinates, target: Expr) -> Vec<Stmt> {
    let high = f.fresh_var("high", ScalarType::Index);
    let mid = f.fresh_var("mid", ScalarType::Index);
    let top = f.fresh_var("top", ScalarType::Index);
    let search = vec![
        Stmt::Decl(high, var(top)),
        Stmt::While {
            cond: bin(BinOp::Lt, var(p), var(high)),
            body: vec![
                Stmt::Decl(mid, bin(BinOp::Div, bin(BinOp::Add, var(p), var(high)), int(2))),
                Stmt::If {
                    cond: bin(BinOp::Lt, raw.at(var(mid)), target.clone()),
                    then: vec![Stmt::Assign(p, bin(BinOp::Add, var(mid), int(1)))],
                    otherwise: vec![Stmt::Assign(high, var(mid))],
                },
            ],
        },
    ];
    // A few steps forward first: a window slid by one usually moves by as few entries.
    let steps = f.fresh_var("steps", ScalarType::Index);
    let mut probe = vec![
        Stmt::Decl(steps, int(0)),
        Stmt::While {
            cond: bin(BinOp::And, bin(BinOp::Lt, var(steps), int(4)), bin(BinOp::Lt, raw.at(var(p)), target.clone())),
            body: vec![
                Stmt::Assign(p, bin(BinOp::Add, var(p), int(1))),
                Stmt::Assign(steps, bin(BinOp::Add, var(steps), int(1))),
            ],
        },
    ];
    // Then a few steps back from the end: a window nearly as long as the row (a convolution's
    // window is the row less the filter) ends within a few entries of the row's end.
    let back = vec![
        Stmt::Decl(top, bin(BinOp::Sub, var(end), int(1))),
        Stmt::Assign(steps, int(0)),
        Stmt::While {
            cond: bin(
                BinOp::And,
                bin(BinOp::And, bin(BinOp::Lt, var(steps), int(4)), bin(BinOp::Lt, var(p), var(top))),
                bin(BinOp::Le, target.clone(), raw.at(bin(BinOp::Sub, var(top), int(1)))),
            ),
            body: vec![
                Stmt::Assign(top, bin(BinOp::Sub, var(top), int(1))),
                Stmt::Assign(steps, bin(BinOp::Add, var(steps), int(1))),
            ],
        },
        // `top` holds an entry at least the target; the one before it is below it (the answer)
        // unless the steps ran out first: then the answer is in (p, top].
        Stmt::If {
            cond: bin(BinOp::Lt, raw.at(bin(BinOp::Sub, var(top), int(1))), target.clone()),
            then: vec![Stmt::Assign(p, var(top))],
            otherwise: search,
        },
    ];
    probe.push(Stmt::If { cond: bin(BinOp::Lt, raw.at(var(p)), target.clone()), then: back, otherwise: vec![] });
    let last = bin(BinOp::Sub, var(end), int(1));
    vec![Stmt::If {
        cond: bin(BinOp::And, bin(BinOp::Lt, var(p), var(end)), bin(BinOp::Lt, raw.at(var(p)), target.clone())),
        then: vec![Stmt::If {
            cond: bin(BinOp::Lt, raw.at(last), target),
            then: vec![Stmt::Assign(p, var(end))],
            // The answer is in (p, end - 1]: the last entry is at least the target.
            otherwise: probe,
        }],
        otherwise: vec![],
    }]
}

/// Leaves a subsection iterator on an entry it visits, or ends it: a resolving one skips the
/// entries between multiples of its coefficient; either one ends at the first entry past the
/// loop's last value, `size - 1` (entries are sorted, so every later one is past it too).
fn settle(p: VarId, end: VarId, crd: &Coordinates, size: i64) -> Vec<Stmt> {
    let live = bin(BinOp::Lt, var(p), var(end));
    let mut out = Vec::new();
    if let Coordinates::Mapped { raw, offset, coef } = crd
        && *coef != 1
    {
        let shifted = bin(BinOp::Sub, raw.at(var(p)), offset.clone());
        out.push(Stmt::While {
            cond: bin(
                BinOp::And,
                live.clone(),
                bin(
                    BinOp::And,
                    bin(BinOp::Lt, shifted.clone(), int(coef * size)),
                    bin(BinOp::Ne, bin(BinOp::Rem, shifted, int(*coef)), int(0)),
                ),
            ),
            body: vec![Stmt::Assign(p, bin(BinOp::Add, var(p), int(1)))],
        });
    }
    // (A resolving iterator's end is already its last entry before `offset + coef·size`.)
    if matches!(crd, Coordinates::Window { .. }) {
        out.push(Stmt::If {
            cond: bin(BinOp::And, live, bin(BinOp::Le, int(size), crd.at(var(p)))),
            then: vec![Stmt::Assign(end, var(p))],
            otherwise: vec![],
        });
    }
    out
}

/// How the loop of `v` reaches a compressed level it iterates (see [`Coordinates`]).
#[derive(Clone, Debug)]
enum Subsection {
    /// Its subscript is `v`.
    Plain,
    /// A compound subscript whose other variables are bound: `coef` is `v`'s coefficient,
    /// `size` its extent.
    Last { term: nm_ir::notation::IndexTerm, coef: i64, size: i64 },
    /// A compound subscript with variables still unbound, whose values span `width`.
    Window { term: nm_ir::notation::IndexTerm, coef: i64, width: i64, size: i64 },
    /// A window (as `Window`) on a compressed level whose parent, a dense or compressed
    /// level, is not resolved yet (`I(i+r, j+q)` in CSR along `j` before `r`): the loop visits the `v`
    /// whose window holds an entry in any of the `span` rows the parent's subscript `rows`
    /// may still reach, keeping one window start per row (the paper's position-pair vectors).
    Rows {
        rows: nm_ir::notation::IndexTerm,
        term: nm_ir::notation::IndexTerm,
        coef: i64,
        width: i64,
        size: i64,
        span: i64,
    },
}

/// Where an outer loop left a compressed level's range: a window start and the level's end in
/// variables, or one start per row of an unresolved parent (`Subsection::Rows`), indexed by
/// the parent's position less `first`.
#[derive(Clone, Debug)]
enum Subrange {
    Start(VarId, VarId),
    /// The children of a level a `where` producer reads along an outer loop (see
    /// `Lowering::guide`): `[from, to)`, empty where that level has no entry.
    Children(VarId, VarId),
    Rows {
        starts: ArrayId,
        first: Expr,
    },
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
    /// sparse result where nothing else makes that loop sparse: the loop then visits, and the
    /// result stores, every coordinate of its dimension (zeros included), which the lowering
    /// reports in a note. Off unless asked for: a copy or a split of the statement usually
    /// keeps the result sparse, and callers try those first.
    pub store_every_coordinate: bool,
}

/// The sparse workspace policy used unless one is asked for (see BENCHMARKS.md, "Sparse
/// workspaces": the fastest on outer-product SpGEMM over the test matrices).
pub const DEFAULT_POLICY: nm_ism::Policy = nm_ism::Policy::Auto;

/// A result assembled through a sparse workspace: the workspace argument and, per result
/// dimension, the stride of its coordinate in a key.
#[derive(Clone, Debug)]
struct IsmResult {
    slot: ArrayId,
    strides: Vec<i64>,
    /// The result dimension its first level holds.
    first_dim: usize,
}

impl IsmResult {
    /// Declares the result's level arrays and the workspace. Every level kind a workspace
    /// compresses into is accepted (dense, compressed unique or not, singleton).
    #[allow(clippy::too_many_arguments)]
    fn declare(
        f: &mut Function,
        params: &mut Vec<TensorId>,
        t: TensorId,
        name: &str,
        format: &Format,
        shape: &[usize],
        value: ElemType,
        config: nm_ism::Config,
        notes: &mut Vec<String>,
    ) -> Result<IsmResult, LowerError> {
        let levels = format.levels();
        for level in levels {
            if !matches!(level.expr, nm_format::LevelExpr::Dim(_)) {
                return unsupported(format!("blocked levels in the result `{name}`"));
            }
            if let LevelKind::Structured { .. } = level.kind {
                return unsupported(format!("a structured N:M result `{name}` written out of order"));
            }
        }
        let extents = format.level_sizes(shape);
        let mut config = config;
        if config.policy == nm_ism::Policy::Dense {
            let bytes = extents.iter().fold((value.size() + 1) as u128, |b, &e| b.saturating_mul(e as u128));
            if let Some(avail) = nm_format::memory::available().filter(|&a| bytes > a / 2) {
                const GIB: f64 = (1u64 << 30) as f64;
                notes.push(format!(
                    "a dense workspace for `{name}` would take {:.1} GiB of {:.1} GiB available: using a sparse `{DEFAULT_POLICY}` workspace",
                    bytes as f64 / GIB,
                    avail as f64 / GIB
                ));
                config = nm_ism::Config { policy: DEFAULT_POLICY, ..nm_ism::Config::new(DEFAULT_POLICY) };
            }
        }
        for (l, level) in levels.iter().enumerate() {
            if matches!(level.kind, LevelKind::Compressed(_)) {
                f.array(&format!("{name}{l}_pos"), ElemType::I64, Role::Pos { tensor: name.into(), level: l }, true);
                params.push(t);
            }
            if !matches!(level.kind, LevelKind::Dense) {
                f.array(&format!("{name}{l}_crd"), ElemType::I64, Role::Crd { tensor: name.into(), level: l }, true);
                params.push(t);
            }
        }
        let layout = nm_ism::KeyLayout::new(&extents, config.policy)
            .or_else(|e| unsupported(format!("a sparse workspace for `{name}` {shape:?}: {e}")))?;
        let kinds = levels.iter().map(|l| l.kind).collect();
        let slot =
            f.array(&format!("{name}_ws"), value, Role::Workspace { extents: extents.clone(), kinds, config }, true);
        params.push(t);
        let mut strides = vec![0i64; shape.len()];
        for (l, level) in levels.iter().enumerate() {
            strides[level.expr.dim()] = layout.strides()[l] as i64;
        }
        Ok(IsmResult { slot, strides, first_dim: levels.first().map_or(0, |l| l.expr.dim()) })
    }
}

impl Lowered {
    /// The threads a compiled kernel runs on when its caller names no count: every core where
    /// the schedule put the outer loop's row ranges on threads (`parallelize`), else one.
    pub fn default_threads(&self) -> usize {
        if self.partition.as_ref().is_some_and(|p| p.scheduled) { nm_format::workers::cores() } else { 1 }
    }

    /// Whether the kernel assembles a sparse result (it writes a `pos` array).
    pub fn sparse_result(&self) -> bool {
        self.function
            .arrays
            .iter()
            .any(|(_, d)| d.output && matches!(d.role, Role::Pos { .. } | Role::Crd { .. } | Role::Workspace { .. }))
    }
}

/// A kernel whose outermost loop is `for i in bounds[0]..bounds[1]` over a dense coordinate
/// that names disjoint parts of the result: disjoint rows of a dense result, or the rows of a
/// CSR-like result (dense, then compressed) — each row range can run on its own thread. For a
/// sparse result every row in the range stores its `pos` entry (counted from the range's
/// first entry), so ranges assemble into separate `crd`/values arrays that are concatenated
/// with their `pos` shifted. Or a reduction into a dense result (see [`Reduction`]), whose
/// ranges add into the same elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    /// Coordinates of the outermost loop.
    pub extent: usize,
    /// The `[first, end)` parameter.
    pub bounds: ArrayId,
    /// A sparse result's `pos`, `crd` and values (`None`: a dense result).
    pub rows: Option<(ArrayId, ArrayId, ArrayId)>,
    /// Whether the schedule put the outermost loop on CPU threads (`parallelize`): its row
    /// ranges are what runs on them, so a caller that was given no thread count uses every core.
    pub scheduled: bool,
    /// How ranges combine that add into the same elements of a dense result (the outer loop is
    /// a reduction: `y(i) = A(i,j)·x(j)` with A in CSC, a dot product); `None`: ranges write
    /// disjoint rows. The kernel zeroes the result only when `bounds[2]` is nonzero (a whole
    /// run); a caller running ranges prepares the result as the kind says.
    pub reduction: Option<Reduction>,
}

/// The ranges of a [`Partition`] add into the same elements of the dense result `values`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reduction {
    /// The result's values.
    pub values: ArrayId,
    /// How the threads' sums meet.
    pub kind: ReductionKind,
}

/// How the threads running a reduction's ranges add into the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReductionKind {
    /// Each thread adds its ranges, taken in a fixed order, into its own zeroed copy of the
    /// result; the copies are then summed into it in thread order (taco's `temporary`, and
    /// `parallel_reduction` on CPU threads, as OpenMP's `reduction` clause): the same sums for
    /// the same thread count, run after run.
    PerThread,
    /// Every range adds into the shared result with atomic adds (`atomics`); the order of
    /// the additions, so the rounding, varies from run to run.
    Atomic,
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
    /// See [`LowerOptions::store_every_coordinate`].
    store_every_coordinate: bool,
    /// See [`Lowered::notes`].
    notes: Vec<String>,
    /// Every tensor's format, by id (`None`: dense).
    formats: Vec<Option<Format>>,
    /// How a sparse result is assembled (`None`: a dense result).
    assembly: Option<Assembly>,
    /// The scalar variable of each `where` temporary.
    temporaries: Vec<(TensorId, VarId)>,
    /// The `where` producers, computed right before the consumer's assignment.
    producers: Vec<Producer>,
    /// Whether a producer is being lowered (its leaf is its own assignment).
    in_producer: bool,
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

/// A dense workspace for the last level of a sparse result the loops write out of order —
/// Gustavson's SpGEMM `forall i, k, j: A(i,j) += B(i,k) C(k,j)` into CSR. Values accumulate in
/// `values` by coordinate; `mark` flags the coordinates touched (a bit each) and `list` records
/// them in arrival order. After the loops below the result's other levels, the row is appended in
/// coordinate order and the workspace cleared: the listed coordinates sorted when they are few,
/// read back from `mark` when they are many (a scan costs a step per word of 64 marks and one
/// per coordinate, a radix sort two or three passes over the coordinates: the scan wins once
/// the coordinates outnumber about half the words — `SORT_BELOW`; at `n / 16`, as with one
/// mark per coordinate, bcsstk16's A·A — 213 of 4,884 per row — took 36–52 ms, now 26–35).
/// Cost: O(size) memory once, O(touched) per row.
#[derive(Clone, Debug)]
struct RowWorkspace {
    /// The result's last index variable.
    var: IndexVarId,
    /// Its extent.
    size: usize,
    /// How many loops enclose the region it covers (the result's other levels).
    outer: usize,
    values: ArrayId,
    mark: ArrayId,
    list: ArrayId,
    /// The sort's scratch.
    sorted: ArrayId,
    /// Coordinates listed in the current row.
    count: VarId,
    /// Products added into the current row.
    products: VarId,
    /// Whether the row marks its coordinates without a branch: set after a row that added
    /// fewer than `BRANCHLESS_BELOW` products per coordinate (see `resolved_assignment`).
    branchless: VarId,
    /// Whether the region is being lowered.
    active: bool,
}

/// A row workspace's coordinates are sorted when they are fewer than `size / SORT_BELOW`, else
/// read back from the marks.
const SORT_BELOW: i64 = 128;

/// A row workspace marks coordinates without a branch after a row that added fewer products
/// than this many per coordinate.
const BRANCHLESS_BELOW: i64 = 4;

/// 1 where `cond` holds, else 0 (an index, to add without a branch).
fn one_if(cond: Expr) -> Expr {
    Expr::Select(Box::new(cond), Box::new(int(1)), Box::new(int(0)))
}

/// The word of a row workspace's marks (one bit per coordinate) that holds coordinate `j`.
fn word(j: Expr) -> Expr {
    bin(BinOp::Shr, j, int(6))
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
                        return unsupported(
                            "a `where` whose producer is not loops around a scalar temporary, nor a workspace its consumer copies out (general workspaces arrive with the ISM issue)",
                        );
                    }
                }
            }
            Ok(chain)
        }
        CinStmt::Forall { .. } => unsupported("loops inside a `where` consumer, other than copying out a workspace"),
        CinStmt::Sequence { .. } => unsupported("`sequence`"),
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

/// A sparse result assembled in append order: dense levels located, compressed levels
/// appended with their `pos`/`crd` arrays grown by doubling.
#[derive(Clone, Debug)]
struct Assembly {
    kinds: Vec<LevelKind>,
    sizes: Vec<usize>,
    vars: Vec<IndexVarId>,
    pos: Vec<Option<ArrayId>>,
    crd: Vec<Option<ArrayId>>,
    /// Entries appended so far at each compressed level.
    count: Vec<Option<VarId>>,
    /// Capacity of each compressed level's `crd` (and values, at the last level).
    cap: Vec<Option<VarId>>,
    /// The position of each dense level in the current iteration.
    position: Vec<Option<VarId>>,
    /// Entries below a compressed, non-last level when its coordinate was reached.
    start: Vec<Option<VarId>>,
    vals: Option<ArrayId>,
}

impl Assembly {
    fn declare(
        f: &mut Function,
        params: &mut Vec<TensorId>,
        t: TensorId,
        name: &str,
        format: &Format,
        shape: &[usize],
    ) -> Result<Self, LowerError> {
        let levels = format.levels();
        let n = levels.len();
        let mut a = Assembly {
            kinds: levels.iter().map(|l| l.kind).collect(),
            sizes: format.level_sizes(shape),
            vars: Vec::new(),
            pos: vec![None; n],
            crd: vec![None; n],
            count: vec![None; n],
            cap: vec![None; n],
            position: vec![None; n],
            start: vec![None; n],
            vals: None,
        };
        for (l, level) in levels.iter().enumerate() {
            if !matches!(level.expr, nm_format::LevelExpr::Dim(_)) {
                return unsupported(format!("blocked levels in the result `{name}`"));
            }
            match level.kind {
                LevelKind::Dense if l + 1 == n || a.kinds[..l].iter().any(|k| *k != LevelKind::Dense) => {
                    return unsupported(format!("a dense level below or after compressed ones in the result `{name}`"));
                }
                LevelKind::Dense => {}
                LevelKind::Compressed(p) if p.unique && p.ordered => {
                    a.pos[l] = Some(f.array(
                        &format!("{name}{l}_pos"),
                        ElemType::I64,
                        Role::Pos { tensor: name.into(), level: l },
                        true,
                    ));
                    a.crd[l] = Some(f.array(
                        &format!("{name}{l}_crd"),
                        ElemType::I64,
                        Role::Crd { tensor: name.into(), level: l },
                        true,
                    ));
                    params.extend([t, t]);
                    a.count[l] = Some(f.var(&format!("{name}{l}_n"), ScalarType::Index));
                    a.cap[l] = Some(f.var(&format!("{name}{l}_cap"), ScalarType::Index));
                }
                other => return unsupported(format!("{other} levels in the result `{name}`")),
            }
        }
        Ok(a)
    }

    /// Number of positions of the dense levels above `l` (all dense, by construction).
    fn dense_parents(&self, l: usize) -> usize {
        self.sizes[..l].iter().product()
    }

    fn prologue(&mut self, f: &mut Function, vals: ArrayId) -> Vec<Stmt> {
        self.vals = Some(vals);
        let mut out = Vec::new();
        let last = self.kinds.len() - 1;
        for l in 0..self.kinds.len() {
            let (Some(n), Some(cap)) = (self.count[l], self.cap[l]) else { continue };
            out.push(Stmt::Decl(n, int(0)));
            out.push(Stmt::Decl(cap, int(16)));
            out.push(Stmt::Resize { array: self.crd[l].expect("compressed"), len: var(cap) });
            if l == last {
                out.push(Stmt::Resize { array: vals, len: var(cap) });
            }
            // pos: one entry per parent position plus one; a compressed parent grows it.
            let parents = if l == 0 || self.kinds[l - 1] == LevelKind::Dense {
                int(self.dense_parents(l) as i64 + 1)
            } else {
                int(17)
            };
            out.push(Stmt::Resize { array: self.pos[l].expect("compressed"), len: parents });
            if l + 1 < self.kinds.len() {
                self.start[l] = Some(f.var(&format!("start{l}"), ScalarType::Index));
            }
        }
        out
    }

    /// Doubles level `l`'s capacity when full (and what grows with it).
    fn grow(&self, l: usize) -> Stmt {
        let (n, cap) = (self.count[l].expect("compressed"), self.cap[l].expect("compressed"));
        let mut then = vec![
            Stmt::Assign(cap, bin(BinOp::Mul, var(cap), int(2))),
            Stmt::Resize { array: self.crd[l].expect("compressed"), len: var(cap) },
        ];
        if l + 1 == self.kinds.len() {
            then.push(Stmt::Resize { array: self.vals.expect("prologue ran"), len: var(cap) });
        } else if let Some(child_pos) = self.pos[l + 1] {
            then.push(Stmt::Resize { array: child_pos, len: bin(BinOp::Add, var(cap), int(1)) });
        }
        Stmt::If { cond: bin(BinOp::Le, var(cap), var(n)), then, otherwise: vec![] }
    }

    /// Before the subtree of result level `l` at coordinate `v`.
    fn before(&mut self, f: &mut Function, l: usize, v: VarId) -> Vec<Stmt> {
        match self.kinds[l] {
            LevelKind::Dense => {
                let parent = if l == 0 { int(0) } else { var(self.position[l - 1].expect("dense parents")) };
                let p = f.var(&format!("r{l}"), ScalarType::Index);
                self.position[l] = Some(p);
                vec![Stmt::Decl(p, bin(BinOp::Add, bin(BinOp::Mul, parent, int(self.sizes[l] as i64)), var(v)))]
            }
            _ if l + 1 < self.kinds.len() => {
                vec![Stmt::Decl(self.start[l].expect("declared"), var(self.count[l + 1].expect("compressed child")))]
            }
            _ => vec![],
        }
    }

    /// After the subtree of result level `l` at coordinate `v`: a compressed level that got
    /// children below it appends `v`; a dense parent records its child's count.
    fn after(&self, l: usize, v: VarId) -> Vec<Stmt> {
        let mut out = Vec::new();
        if self.kinds[l] != LevelKind::Dense && l + 1 < self.kinds.len() {
            let (n, child) = (self.count[l].expect("compressed"), self.count[l + 1].expect("compressed child"));
            out.push(Stmt::If {
                cond: bin(BinOp::Lt, var(self.start[l].expect("declared")), var(child)),
                then: vec![
                    self.grow(l),
                    Stmt::Store {
                        array: self.crd[l].expect("compressed"),
                        index: var(n),
                        value: var(v),
                        accumulate: false,
                    },
                    Stmt::Store {
                        array: self.pos[l + 1].expect("compressed child"),
                        index: bin(BinOp::Add, var(n), int(1)),
                        value: var(child),
                        accumulate: false,
                    },
                    Stmt::Assign(n, bin(BinOp::Add, var(n), int(1))),
                ],
                otherwise: vec![],
            });
        }
        if self.kinds[l] == LevelKind::Dense
            && l + 1 < self.kinds.len()
            && let Some(child) = self.count[l + 1]
        {
            let r = self.position[l].expect("dense position");
            out.push(Stmt::Store {
                array: self.pos[l + 1].expect("compressed child"),
                index: bin(BinOp::Add, var(r), int(1)),
                value: var(child),
                accumulate: false,
            });
        }
        out
    }

    /// The write of one value at the last (compressed) level.
    fn append(&self, v: VarId, value: Expr) -> Vec<Stmt> {
        let l = self.kinds.len() - 1;
        let n = self.count[l].expect("compressed");
        vec![
            self.grow(l),
            Stmt::Store { array: self.crd[l].expect("compressed"), index: var(n), value: var(v), accumulate: false },
            Stmt::Store { array: self.vals.expect("prologue ran"), index: var(n), value, accumulate: false },
            Stmt::Assign(n, bin(BinOp::Add, var(n), int(1))),
        ]
    }

    /// The lengths of what the kernel appended: each compressed level's `crd`, and the values
    /// (see [`Stmt::Written`]), so that they grow without zeroing.
    fn written(&self) -> Vec<Stmt> {
        let mut out = Vec::new();
        for l in 0..self.kinds.len() {
            let (Some(crd), Some(n)) = (self.crd[l], self.count[l]) else { continue };
            out.push(Stmt::Written { array: crd, len: var(n) });
            if l + 1 == self.kinds.len() {
                out.push(Stmt::Written { array: self.vals.expect("prologue ran"), len: var(n) });
            }
        }
        out
    }

    /// `pos` of a compressed level under dense ones: rows no loop visited repeat the count
    /// before them (a running maximum); the top level's `pos` is `[0, count]`.
    fn epilogue(&self, f: &mut Function) -> Vec<Stmt> {
        let mut out = Vec::new();
        for l in 0..self.kinds.len() {
            let (Some(pos), Some(n)) = (self.pos[l], self.count[l]) else { continue };
            if l == 0 {
                out.push(Stmt::Store { array: pos, index: int(1), value: var(n), accumulate: false });
            } else if self.kinds[l - 1] == LevelKind::Dense {
                let r = f.var(&format!("fix{l}"), ScalarType::Index);
                out.push(Stmt::For {
                    var: r,
                    start: int(0),
                    end: int(self.dense_parents(l) as i64),
                    body: vec![Stmt::Store {
                        array: pos,
                        index: bin(BinOp::Add, var(r), int(1)),
                        value: bin(BinOp::Max, load(pos, var(r)), load(pos, bin(BinOp::Add, var(r), int(1)))),
                        accumulate: false,
                    }],
                    parallel: false,
                });
            }
        }
        out
    }
}

/// The index widths a kernel is specialized for. Kernels read operands in place, as their
/// tensors store them (nm-format keeps 32-bit positions and coordinates whenever the entries
/// fit, else 64-bit), so a kernel is compiled for the widths it will be given. Lists only the
/// 64-bit arrays: the default is all 32-bit, and equal widths compare equal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct IndexWidths {
    /// (tensor, level, whether `pos` is 64-bit, whether `crd` is 64-bit), only where one is.
    wide: Vec<(String, usize, bool, bool)>,
}

impl IndexWidths {
    /// The widths of `tensors`' arrays (by name).
    pub fn of<T: nm_format::Value>(tensors: &[(&str, &nm_format::Tensor<T>)]) -> Self {
        use nm_format::LevelStorage;
        let mut wide = Vec::new();
        for (name, t) in tensors {
            for (l, level) in t.levels().iter().enumerate() {
                let (pos, crd) = match level {
                    LevelStorage::Compressed { pos, crd } => (pos.width() == 8, crd.width() == 8),
                    LevelStorage::Singleton { crd } => (false, crd.width() == 8),
                    _ => (false, false),
                };
                if pos || crd {
                    wide.push((name.to_string(), l, pos, crd));
                }
            }
        }
        IndexWidths { wide }
    }

    /// The element types of `tensor`'s `pos` and `crd` at `level`.
    pub fn get(&self, tensor: &str, level: usize) -> (ElemType, ElemType) {
        let elem = |wide: bool| if wide { ElemType::U64 } else { ElemType::U32 };
        match self.wide.iter().find(|(t, l, ..)| t == tensor && *l == level) {
            Some(&(_, _, pos, crd)) => (elem(pos), elem(crd)),
            None => (ElemType::U32, ElemType::U32),
        }
    }
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
                return unsupported(format!(
                    "GPU loops (`parallelize({name}, gpu_...)`): the CPU back ends run this statement"
                ));
            }
            Some((
                ParallelUnit::CpuThread,
                race @ (OutputRace::Atomics | OutputRace::Temporary | OutputRace::ParallelReduction),
            )) if id != cin.root => {
                return unsupported(format!(
                    "`parallelize({name}, cpu_thread, {})` on a loop inside another: threads that add \
                     into the same result elements run the outermost loop's ranges (reorder `{name}` \
                     outermost, or no_races where iterations write disjoint elements)",
                    race.name()
                ));
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
    let from_schedule = cin.workspaces.iter().find(|w| w.1 == nm_ir::concrete::WorkspaceKind::Sparse).map(|w| {
        use nm_ir::concrete::WorkspacePolicy as P;
        nm_ism::Config::new(match w.2 {
            P::Bucket => nm_ism::Policy::Bucket,
            P::Hash(l) => nm_ism::Policy::Hash(l),
            P::Coord => nm_ism::Policy::Coord,
            P::Map => nm_ism::Policy::Map,
            P::Vector => nm_ism::Policy::Vector,
        })
    });
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
    check_parallel(cin)?;
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
            CinStmt::Sequence { .. } => return unsupported("`sequence`"),
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
    let mut notes = Vec::new();
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
                    workspace = Some(RowWorkspace {
                        var: order[outer],
                        size,
                        outer,
                        values: f.array(&name("vals"), value, Role::Scratch, true),
                        mark: f.array(&name("mark"), ElemType::U64, Role::Scratch, true),
                        list: f.array(&name("list"), ElemType::I64, Role::Scratch, true),
                        sorted: f.array(&name("sorted"), ElemType::I64, Role::Scratch, true),
                        count: f.var(&name("n"), ScalarType::Index),
                        products: f.var(&name("products"), ScalarType::Index),
                        branchless: f.var(&name("branchless"), ScalarType::Index),
                        active: false,
                    });
                    params.extend([result; 4]);
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
            return unsupported("the result read on the right-hand side");
        }
        if operands[t.index()].is_some() {
            continue;
        }
        let ty = &types.tensors[t.index()];
        let order = ty.shape.len();
        let format = ty.format.clone().unwrap_or_else(|| Format::dense(order.max(1)));
        let name = cin.tensors[t].name.clone();
        let (mut pos, mut crd) = (vec![None; format.levels().len()], vec![None; format.levels().len()]);
        let mut structured = vec![None; format.levels().len()];
        // Vector-wise N:M (`nm(N,M,L)`): its metadata; iterated level by level where its
        // variables are reached (see `Lowerer::blocked_nest`).
        if let Some((n, m, _)) = format.nm_params() {
            crd[2] = Some(f.array(
                &format!("{name}2_meta"),
                ElemType::U64,
                Role::Metadata { tensor: name.clone(), level: 2 },
                false,
            ));
            params.push(t);
            structured[2] = Some((n, m, m as usize));
            let vals = f.array(&format!("{name}_vals"), value, Role::Values { tensor: name.clone() }, false);
            params.push(t);
            operands[t.index()] = Some(Operand { format, shape: ty.shape.clone(), pos, crd, structured, vals });
            continue;
        }
        for (l, level) in format.levels().iter().enumerate() {
            match level.kind {
                LevelKind::Dense => {}
                LevelKind::Compressed(p)
                    if p.unique && p.ordered && !matches!(level.expr, nm_format::LevelExpr::Dim(_)) =>
                {
                    return unsupported(format!("blocked compressed levels (`{name}`)"));
                }
                LevelKind::Compressed(_) | LevelKind::Singleton(_) => {
                    let (pos_elem, crd_elem) = widths.get(&name, l);
                    if matches!(level.kind, LevelKind::Compressed(_)) {
                        pos[l] = Some(f.array(
                            &format!("{name}{l}_pos"),
                            pos_elem,
                            Role::Pos { tensor: name.clone(), level: l },
                            false,
                        ));
                        params.push(t);
                    }
                    crd[l] = Some(f.array(
                        &format!("{name}{l}_crd"),
                        crd_elem,
                        Role::Crd { tensor: name.clone(), level: l },
                        false,
                    ));
                    params.push(t);
                }
                LevelKind::Structured { n, m } if matches!(level.expr, nm_format::LevelExpr::Dim(_)) => {
                    crd[l] = Some(f.array(
                        &format!("{name}{l}_meta"),
                        ElemType::U64,
                        Role::Metadata { tensor: name.clone(), level: l },
                        false,
                    ));
                    params.push(t);
                    let size = ty.shape[level.expr.dim()].div_ceil(m as usize) * m as usize;
                    structured[l] = Some((n, m, size));
                }
                other => return unsupported(format!("{other} levels (`{name}`)")),
            }
            if !matches!(level.expr, nm_format::LevelExpr::Dim(_)) {
                return unsupported(format!(
                    "blocked levels (`{name}`; a vector-wise N:M SpMM runs through nm-spmm, see the command)"
                ));
            }
        }
        let vals = f.array(&format!("{name}_vals"), value, Role::Values { tensor: name.clone() }, false);
        params.push(t);
        operands[t.index()] = Some(Operand { format, shape: ty.shape.clone(), pos, crd, structured, vals });
    }
    // Row ranges may run in parallel when the outer loop names disjoint parts of the result:
    // a dense result indexed by it, or a CSR-like result (dense, compressed) whose rows it is.
    let outer = loops.first().map(|(v, _)| *v);
    // Where the outer loop is a reduction into a dense result, its ranges add into the same
    // elements: as the schedule asks, else (for -nthreads) through a copy per thread where
    // one is no larger than the loop's extent (a dot product, CSC SpMV; not a convolution's
    // three filter rows into an image).
    let asked = reduction_asked(cin);
    let reduction = match (&result_format, outer) {
        (None, Some(v)) if !lhs.subscripts.iter().any(|t| t.as_var() == Some(v)) => asked.or_else(|| {
            let elements = types.tensors[result.index()].shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
            elements
                .filter(|&n| n <= types.sizes.get(v.index()).copied().unwrap_or(0))
                .map(|_| ReductionKind::PerThread)
        }),
        _ => None,
    };
    let partitionable = match (&result_format, outer) {
        (_, None) => false,
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
        producers,
        in_producer: false,
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
        store_every_coordinate: options.store_every_coordinate,
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
        // One slot more: a branchless touch writes `list[count]` before it knows it is new.
        body.push(Stmt::Resize { array: w.list, len: int(w.size as i64 + 1) });
        body.push(Stmt::Resize { array: w.mark, len: int(w.size as i64 / 64 + 1) });
        body.push(Stmt::Decl(w.branchless, int(0)));
        // Rows are sorted only when they list fewer than size / SORT_BELOW coordinates.
        body.push(Stmt::Resize { array: w.sorted, len: int(w.size as i64 / SORT_BELOW + 1) });
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
        extent: types.sizes[outer.expect("an outer loop").index()],
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
    Ok(Lowered { function: lw.f, params, partition, tensors, notes: lw.notes })
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

    /// The loops from the first of `loops` inward, then the assignment of `rhs`.
    ///
    /// Along each variable, the merge lattice of `rhs` decides the loop: a `for` over every
    /// coordinate when some point has no sparse iterator (a dense operand, a constant), with a
    /// case per point; otherwise one `while` per lattice point over its sparse iterators,
    /// with a case per sub-point, taking the smallest coordinate and advancing the iterators
    /// that stand on it (taco's co-iteration).
    fn nest(
        &mut self,
        loops: &[(IndexVarId, bool)],
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        if self.workspace.as_ref().is_some_and(|w| !w.active && !self.in_producer && self.depth() == w.outer) {
            return self.workspace_region(loops, lhs, op, rhs);
        }
        let Some((&(mut v, parallel), rest)) = loops.split_first() else {
            let mut out = Vec::new();
            if !self.in_producer {
                // The `where` producers compute their temporaries first.
                for p in self.producers.clone() {
                    let t = self.temporary(p.lhs.tensor).expect("declared");
                    out.push(Stmt::Decl(t, float(0.0)));
                    let saved = (self.positions.clone(), self.bound.clone());
                    self.in_producer = true;
                    let code = self.nest(&p.loops, &p.lhs, p.op, p.rhs);
                    self.in_producer = false;
                    (self.positions, self.bound) = saved;
                    out.extend(code?);
                }
            }
            out.extend(self.assignment(lhs, op, rhs)?);
            return Ok(out);
        };
        // Reduction loops inside every result loop, accumulating into a dense result: sum
        // into a register and store once (`y[i] += acc` after the loop, not per element).
        let reduces = op == AssignOp::Accumulate
            && self.accumulator.is_none()
            && !self.in_producer
            && !self.workspace.as_ref().is_some_and(|w| w.active)
            && self.temporary(lhs.tensor).is_none()
            // With `where` producers (computed at the leaf, inside these loops) only a sparse
            // result needs it — appended once per reduction, not once per iteration (found by
            // the differential tests: `A(i) = B(i,k) + C(j,k)` into a sparse vector).
            && (self.producers.is_empty() || self.assembly.is_some() || self.ism.is_some())
            && lhs.subscripts.iter().all(|t| t.as_var().is_some_and(|w| w != v && self.bound[w.index()].is_some()));
        if reduces {
            let scalar = self.value.scalar();
            let acc = self.f.var("acc", scalar);
            self.accumulator = Some(acc);
            let inner = self.nest(loops, lhs, op, rhs);
            self.accumulator = None;
            let mut out = vec![Stmt::Decl(acc, float(0.0))];
            out.extend(inner?);
            match &self.assembly {
                // A sparse result's entry is appended once, whatever the reduction found.
                Some(a) => {
                    let last = a.vars.last().copied().expect("a result level");
                    out.extend(a.append(self.bound[last.index()].expect("bound"), var(acc)));
                }
                // Every loop outside over a result variable: the sum is the element's whole
                // value, stored (no `+=`: the row then needs no buffer, and the compiler
                // vectorizes the loop around it — a dense 3×3 convolution of 999², 1.06 → 0.74 ms).
                // Not where ranges of the outer loop add into the same elements (a dot product).
                None => {
                    let whole = self.repeating == 0
                        && self.reduction.is_none()
                        && self.bound.iter().enumerate().all(|(w, b)| {
                            b.is_none() || lhs.subscripts.iter().any(|t| t.as_var().is_some_and(|x| x.index() == w))
                        });
                    out.extend(self.result_store(lhs, var(acc), !whole)?)
                }
            }
            return Ok(out);
        }
        // `split(i, i0, i1, c)`: `i0` counts blocks of `c` coordinates; `i1` walks one block as
        // the loop over `i` (i = i0·c + i1, stopping at the end of `i`).
        let mut split_inner = None;
        match self.cin.derivations.get(&v) {
            Some(&Derivation::Split { parent, outer: true, factor }) => {
                // Over positions, the number of blocks is known when the kernel runs.
                let blocks = match self.position_space(parent) {
                    Some(ps) => {
                        bin(BinOp::Div, bin(BinOp::Add, ps.count.clone(), int(factor as i64 - 1)), int(factor as i64))
                    }
                    None if self.cin.derivations.contains_key(&parent) => {
                        return unsupported(format!(
                            "a split of `{}`, itself made by a schedule command (split the original variable \
                             with the product of the factors instead)",
                            self.cin.vars[parent].name
                        ));
                    }
                    None => int(self.size(parent).div_ceil(factor as usize) as i64),
                };
                let block = self.f.var(&self.cin.vars[v].name.clone(), ScalarType::Index);
                self.split_blocks.push((parent, block));
                let body = self.nest(rest, lhs, op, rhs);
                self.split_blocks.pop();
                let body = body?;
                // Blocks in parallel (OpenMP) only write disjoint parts of a dense result.
                let parallel = self.on_omp_threads(v, parallel);
                return Ok(vec![Stmt::For { var: block, start: int(0), end: blocks, body, parallel }]);
            }
            Some(&Derivation::Split { parent, outer: false, factor }) => {
                let Some(&(_, block)) = self.split_blocks.iter().rev().find(|(p, _)| *p == parent) else {
                    return unsupported(format!(
                        "`{}` runs outside the block loop of its split",
                        self.cin.vars[v].name
                    ));
                };
                let inner = self.f.var(&self.cin.vars[v].name.clone(), ScalarType::Index);
                split_inner = Some((inner, block, factor as i64));
                v = parent;
            }
            Some(Derivation::Fuse { .. }) => {
                return unsupported(format!(
                    "a loop over the fused variable `{}` (fuse is lowered under `pos`: iterate its positions)",
                    self.cin.vars[v].name
                ));
            }
            _ => {}
        }
        if let Some(ps) = self.position_space(v) {
            return self.position_loop(ps, split_inner, rest, lhs, op, rhs);
        }
        if matches!(self.cin.derivations.get(&v), Some(Derivation::Pos { .. })) {
            return unsupported(format!(
                "`pos` over `{}` other than the fused (dense, compressed) levels of a CSR-like operand",
                self.cin.vars[v].name
            ));
        }
        if split_inner.is_none()
            && let Some(k) = self.blocked_access(v, rhs)
        {
            return self.blocked_nest(k, v, rest, lhs, op, rhs);
        }
        let name = self.cin.vars[v].name.clone();
        let consumer_reads = self.reads(rhs);
        let mut reads = consumer_reads.clone();
        if !self.in_producer {
            // Producers run inside these loops: their operands' dense levels are located here.
            for p in self.producers.clone() {
                reads.extend(self.reads(p.rhs));
            }
            reads.sort_unstable();
            reads.dedup();
        }
        // Which level of each access this variable reaches now.
        let mut sparse: Vec<(usize, usize)> = Vec::new();
        let mut dense: Vec<(usize, usize)> = Vec::new();
        let mut subsections: Vec<Subsection> = Vec::new();
        let mut guided: Vec<(usize, usize)> = Vec::new();
        for &k in &reads {
            let a = &self.accesses[k];
            let op = self.operands[a.tensor.index()].as_ref().expect("every operand decomposed");
            if self.all_dense(k) {
                // Located all at once where it is read, in any loop order.
                continue;
            }
            let Some(l) = self.positions[k].iter().take(op.format.levels().len()).position(Option::is_none) else {
                continue;
            };
            let level = &op.format.levels()[l];
            let term = a.subscripts.get(level.expr.dim());
            let dim_var = term.and_then(|t| t.as_var());
            if let Some(t) = term.filter(|t| t.is_compound() && t.vars().any(|w| w == v)) {
                // A compound subscript (sparse convolution): a dense level is located once its
                // last variable is bound; a compressed one is iterated by subsections.
                let last = t.vars().all(|w| w == v || self.bound[w.index()].is_some());
                if level.kind == LevelKind::Dense {
                    if last {
                        dense.push((k, l));
                    }
                    continue;
                }
                let tname = &self.cin.tensors[a.tensor].name;
                if !consumer_reads.contains(&k) {
                    // A `where` producer's read, its window still open: the producer's own loops
                    // (inside this one) iterate it, from its parent's whole range.
                    if !last {
                        continue;
                    }
                    return unsupported(format!(
                        "a `where` producer reading `{tname}` through a compound subscript its loops do not finish"
                    ));
                }
                if !level.kind.is_ordered() || matches!(level.kind, LevelKind::Structured { .. }) {
                    return unsupported(format!(
                        "a compound subscript on `{tname}`'s level {l} ({}): it needs an ordered compressed or singleton level",
                        level.kind
                    ));
                }
                // A negative coefficient (a true convolution, `I(i + 2 - r)`): the level is
                // walked in its order, so the variable that resolves it must grow with the
                // coordinate. Other variables with negative coefficients are bound outside it,
                // in dense loops (no window skipping: filters are small); a window's reach
                // is then only that of positive ones.
                if t.terms.iter().any(|&(c, _)| c < 0) {
                    let negative_inside =
                        t.terms.iter().any(|&(c, w)| c < 0 && w != v && self.bound[w.index()].is_none());
                    if coefficient(t, v) < 0 && last {
                        return unsupported(format!(
                            "`{name}` resolves `{tname}`'s compressed level {l} with a negative coefficient \
                             (its coordinates are walked in increasing order): loop over `{name}` before \
                             the subscript's other variables"
                        ));
                    }
                    if coefficient(t, v) < 0 || negative_inside {
                        continue;
                    }
                }
                if split_inner.is_some() {
                    return unsupported(format!("splitting `{name}`, which iterates `{tname}` by subsections"));
                }
                sparse.push((k, l));
                let (coef, size) = (coefficient(t, v), self.size(v) as i64);
                subsections.push(if last {
                    Subsection::Last { term: t.clone(), coef, size }
                } else {
                    Subsection::Window { term: t.clone(), coef, width: self.reach(t, v), size }
                });
            } else if dim_var == Some(v) {
                if level.kind == LevelKind::Dense {
                    dense.push((k, l))
                } else if !consumer_reads.contains(&k) {
                    // A `where` producer's read along this outer loop: followed by a cursor
                    // that hands the producer the level's children, or none (see `guide`).
                    // Not along a loop over the result's coordinates into a sparse result:
                    // the temporary, dense to the merge, would have it store every one —
                    // unless the loop visits every one anyway: it resolves a dense level of
                    // the result (CSR's rows), or a term of dense operands fills it.
                    let sparse_result = self.assembly.is_some() || self.workspace.is_some() || self.ism.is_some();
                    let dense_result_level = self
                        .result_level(v)
                        .is_some_and(|l| self.assembly.as_ref().is_some_and(|a| a.kinds[l] == LevelKind::Dense));
                    if sparse_result
                        && lhs.subscripts.iter().any(|t| t.vars().any(|w| w == v))
                        && !dense_result_level
                        && !self.covered_by_dense(rhs)
                    {
                        if self.store_every_coordinate {
                            let note = format!(
                                "`{}` stores every coordinate of `{name}` (zeros too): the loop over `{name}` \
                                 visits each, as no operand it merges makes it sparse",
                                self.cin.tensors[self.result].name
                            );
                            if !self.notes.contains(&note) {
                                self.notes.push(note);
                            }
                        } else {
                            return unsupported(format!(
                                "a `where` producer reading `{}`'s compressed level {l} along `{name}`, a \
                                 coordinate of the sparse result",
                                self.cin.tensors[a.tensor].name
                            ));
                        }
                    }
                    if !self.guidable(k, l) {
                        return unsupported(format!(
                            "a `where` producer reading `{}`'s level {l} ({}) along the outer loop `{name}`: \
                             it needs an ordered, unique compressed level with a compressed level below",
                            self.cin.tensors[a.tensor].name, level.kind
                        ));
                    }
                    guided.push((k, l));
                } else {
                    sparse.push((k, l));
                    subsections.push(Subsection::Plain);
                }
            } else if let Some(rows) = self.rows_subsection(k, l, v, &consumer_reads, split_inner.is_some()) {
                sparse.push((k, l + 1));
                subsections.push(rows);
            } else if a.subscripts.iter().any(|t| t.vars().any(|w| w == v))
                && !a.subscripts.iter().any(|t| t.is_compound())
            {
                // (With compound subscripts a later level may still be reached by a later loop,
                // once its parent is: the loop runs over every coordinate, and the level is
                // searched there — or the leaf reports the level it could not reach.)
                return unsupported(format!(
                    "`{name}` is bound before `{}`'s level {l} is reached: the loop order is discordant with its format",
                    self.cin.tensors[a.tensor].name
                ));
            }
        }
        let loop_var = self.f.var(&name, ScalarType::Index);
        self.bound[v.index()] = Some(loop_var);
        // (A guide's cursor moves on with the loop: its iterations run in order.)
        let parallel = parallel && guided.is_empty();
        let guides_open = self.windows.len();
        let (guide_setup, guide_step) = self.guide(&guided, loop_var);
        let bound: Vec<IndexVarId> =
            self.bound.iter().enumerate().filter(|(_, b)| b.is_some()).map(|(i, _)| IndexVarId::new(i)).collect();
        let lattice = {
            let scope = Scope { tensors: &self.cin.tensors, vars: &self.cin.vars, exprs: &self.exprs };
            MergeLattice::build(scope, &self.formats, rhs, v, &bound)
        };
        // The iterator of a lattice level: which (access, level) of `sparse` it is.
        let find = |lw: &Self, it: &nm_ir::lattice::LevelIterator| {
            sparse.iter().position(|&(k, l)| lw.accesses[k].tensor == it.tensor && l == it.level)
        };
        let mut points: Vec<(Vec<usize>, ExprId)> = Vec::new();
        for p in &lattice.points {
            let its: Vec<usize> = p.iterators.iter().filter(|it| !it.full).filter_map(|it| find(self, it)).collect();
            let e = self.materialize(&p.expr);
            points.push((its, e));
        }
        let dense_driven = sparse.is_empty() || points.iter().any(|(its, _)| its.is_empty());
        // A non-unique level (COO's first) walked alone adds entry by entry: right when the
        // entries only add into a dense result or a workspace. Merged with other operands, or
        // appended to a sparse result or a `where`, it is walked segment by segment (taco's
        // de-duplicating iterator): each run of equal coordinates is one coordinate, whose
        // entries are its children's positions.
        let appends = self.assembly.is_some() && !self.workspace.as_ref().is_some_and(|w| w.active);
        let unique = sparse.iter().all(|&(k, l)| {
            let o = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
            o.format.levels()[l].kind.is_unique()
        });
        // (A resolving subsection iterator with coefficient 1 visits every entry of its range.)
        let alone = !dense_driven
            && subsections.iter().all(|s| matches!(s, Subsection::Plain | Subsection::Last { coef: 1, .. }))
            && sparse.len() == 1
            && points.len() == 1
            && (unique || (!appends && self.producers.is_empty()));
        let mut segmented = vec![false; sparse.len()];
        for (n, &(k, l)) in sparse.iter().enumerate() {
            let o = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
            let kind = o.format.levels()[l].kind;
            if !kind.is_ordered() && !alone {
                let tname = &self.cin.tensors[self.accesses[k].tensor].name;
                return unsupported(format!(
                    "co-iterating `{tname}`'s unordered level {l} with other operands or into a sparse result"
                ));
            }
            // A window is a range of entries, not one coordinate.
            segmented[n] = !kind.is_unique() && !alone && !matches!(subsections[n], Subsection::Window { .. });
        }
        // The outermost loop over a dense coordinate of the result runs as row ranges (see
        // `Partition`); sparse iterators it advances (`y(i) = b(i) + A(i,j)·x(j)`, A in DCSR)
        // start at the first entry of the range, found by a search.
        let ranged = self.partitionable
            && self.depth() == 1
            && !self.in_producer
            && dense_driven
            && split_inner.is_none()
            && subsections.iter().all(|s| matches!(s, Subsection::Plain))
            && sparse.iter().all(|&(k, l)| {
                let o = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
                l == 0 && o.structured[l].is_none()
            });
        if ranged {
            self.bounds = Some(self.f.array("row_bounds", ElemType::I64, Role::Bounds, false));
        }
        // Positions and ends of the sparse iterators.
        let mut out = guide_setup.clone();
        let mut cursors = Vec::new(); // (position var, end var, coordinate var, coordinates)
        let mut ranges = Vec::new(); // (first position, one past the last)
        let mut segment_ends = Vec::new(); // the end of each iterator's segment (when segmented)
        // What a subsection iterator hands the loops inside, where it stands on a value.
        let mut subranges: Vec<Option<Subrange>> = Vec::new();
        for (n, &(k, l)) in sparse.iter().enumerate() {
            let o = self.operands[self.accesses[k].tensor.index()].clone().expect("decomposed");
            // (A rows iterator's parent is not resolved: its range is its rows'.)
            let rows = matches!(subsections[n], Subsection::Rows { .. });
            let parent = match l.checked_sub(1) {
                None => int(0),
                Some(_) if rows => int(0),
                Some(up) => var(self.positions[k][up].expect("resolved in order")),
            };
            let crd = match o.structured[l] {
                Some((n, m, size)) => {
                    let base = bin(BinOp::Mul, parent.clone(), int((size / m as usize * n as usize) as i64));
                    Coordinates::Structured { meta: o.crd[l].expect("metadata"), n, m, base }
                }
                None => Coordinates::Array(o.crd[l].expect("compressed or singleton")),
            };
            let tname = self.cin.tensors[self.accesses[k].tensor].name.clone();
            // Subsection iterators nest inside others of the same level: names of their own.
            let plain = matches!(subsections[n], Subsection::Plain);
            let mut new_var = |name: String| {
                if plain { self.f.var(&name, ScalarType::Index) } else { self.f.fresh_var(&name, ScalarType::Index) }
            };
            let p = new_var(format!("{tname}{l}_p{n}"));
            let end = new_var(format!("{tname}{l}_end{n}"));
            let c = new_var(format!("{tname}{l}_{name}{n}"));
            let range = self.level_range(&o, k, l, parent.clone());
            segment_ends.push(self.f.var(&format!("{tname}{l}_segend{n}"), ScalarType::Index));
            // Inside the loop of an earlier variable of a compound subscript: its window.
            let window = self.windows.iter().rev().find(|w| w.0 == k && w.1 == l).map(|w| w.2.clone());
            let range = match &window {
                Some(Subrange::Start(lo, hi)) => (var(*lo), var(*hi)),
                // (`level_range` took it.)
                Some(Subrange::Children(..)) => range,
                Some(Subrange::Rows { starts, first }) => {
                    (load(*starts, bin(BinOp::Sub, parent.clone(), first.clone())), range.1)
                }
                // Live (0 < 1) until it finds no row with an entry left.
                None if rows => (int(0), int(1)),
                None => range,
            };
            out.push(Stmt::Decl(p, range.0.clone()));
            out.push(Stmt::Decl(end, range.1.clone()));
            // Co-iterated, a structured level ends at its last entry inside the dimension: the
            // kept entries of the last block's zero padding (coordinates past the size, at most
            // N - 1 of them, all at the end) must not reach a merge.
            if !alone
                && let Coordinates::Structured { m, .. } = &crd
                && !self.size(v).is_multiple_of(*m as usize)
            {
                out.push(Stmt::While {
                    cond: bin(
                        BinOp::And,
                        bin(BinOp::Lt, var(p), var(end)),
                        bin(BinOp::Le, int(self.size(v) as i64), crd.at(bin(BinOp::Sub, var(end), int(1)))),
                    ),
                    body: vec![Stmt::Assign(end, bin(BinOp::Sub, var(end), int(1)))],
                });
            }
            let crd = match &subsections[n] {
                // The inner loop of a `split` visits one block of coordinates: its iterators
                // start at the block's first (found by the differential tests: they restarted
                // from the level's first entry in every block and never reached the later ones).
                Subsection::Plain => {
                    if let Some((_, block, factor)) = split_inner {
                        let first = bin(BinOp::Mul, var(block), int(factor));
                        out.extend(lower_bound(&mut self.f, p, end, &crd, first));
                    }
                    if let Some(bounds) = self.bounds.filter(|_| ranged) {
                        out.extend(lower_bound(&mut self.f, p, end, &crd, load(bounds, int(0))));
                    }
                    crd
                }
                Subsection::Last { term, coef, size } => {
                    // The entries at `offset + coef·v`, v < size: those from the first at or
                    // past `offset` to the last before `offset + coef·size`.
                    let offset = self.affine(term, Some(v));
                    // Searched from its parent's first entry (no window of an outer loop
                    // narrowed it): start from where the last search of this parent ended,
                    // when its offset was no larger (the paper's position-pair vectors, one
                    // per parent position: the output-stationary order's windows slide).
                    // (Scratch arrays are per thread under row ranges; not so under OpenMP.)
                    let hints = match (&window, o.pos[l]) {
                        (None, Some(pos)) if !self.threaded => Some(self.search_hints(&tname, l, pos)),
                        _ => None,
                    };
                    if let Some((at, from)) = hints {
                        let known = load(from, parent.clone());
                        out.push(Stmt::If {
                            cond: bin(
                                BinOp::And,
                                bin(BinOp::Ne, known.clone(), int(0)),
                                bin(BinOp::Le, known, bin(BinOp::Add, offset.clone(), int(1))),
                            ),
                            then: vec![Stmt::Assign(p, load(at, parent.clone()))],
                            otherwise: vec![],
                        });
                    }
                    out.extend(lower_bound(&mut self.f, p, end, &crd, offset.clone()));
                    if let Some((at, from)) = hints {
                        out.push(Stmt::Store { array: at, index: parent.clone(), value: var(p), accumulate: false });
                        out.push(Stmt::Store {
                            array: from,
                            index: parent.clone(),
                            value: bin(BinOp::Add, offset.clone(), int(1)),
                            accumulate: false,
                        });
                    }
                    let stop = self.f.fresh_var(&format!("{tname}{l}_stop{n}"), ScalarType::Index);
                    out.push(Stmt::Decl(stop, var(p)));
                    let past = bin(BinOp::Add, offset.clone(), int(coef * size));
                    out.extend(lower_bound(&mut self.f, stop, end, &crd, past));
                    out.push(Stmt::Assign(end, var(stop)));
                    let crd = Coordinates::Mapped { raw: Box::new(crd), offset, coef: *coef };
                    out.extend(settle(p, end, &crd, *size));
                    crd
                }
                Subsection::Rows { rows, term, coef, width, size, span } => {
                    let (init, crd, subrange) =
                        self.rows_cursor(k, l, v, (rows, term), (*coef, *width, *size, *span), end, &crd);
                    out.extend(init);
                    subranges.push(Some(subrange));
                    crd
                }
                Subsection::Window { term, coef, width, size } => {
                    // Windows `[base + coef·v, base + coef·v + width]` for v = next, next + 1, ...
                    let base = self.affine(term, Some(v));
                    let next = self.f.fresh_var(&format!("{tname}{l}_next{n}"), ScalarType::Index);
                    let limit = self.f.fresh_var(&format!("{tname}{l}_limit{n}"), ScalarType::Index);
                    out.push(Stmt::Decl(next, int(0)));
                    out.push(Stmt::Decl(limit, var(end)));
                    out.extend(lower_bound(&mut self.f, p, end, &crd, base.clone()));
                    let crd = Coordinates::Window { raw: Box::new(crd), base, coef: *coef, width: *width, next };
                    out.extend(settle(p, end, &crd, *size));
                    // The window at each `v` starts at the cursor; the inner loops' searches
                    // find where it ends (no scan for it here: a 999-wide row window would be
                    // walked once per filter row).
                    subranges.push(Some(Subrange::Start(p, limit)));
                    crd
                }
            };
            if !matches!(subsections[n], Subsection::Window { .. } | Subsection::Rows { .. }) {
                subranges.push(None);
            }
            cursors.push((p, end, c, crd.clone()));
            ranges.push(range);
        }
        let at = |n: usize| bin(BinOp::Eq, var(cursors[n].2), var(loop_var));
        let all = |conds: Vec<Expr>| conds.into_iter().reduce(|a, b| bin(BinOp::And, a, b)).unwrap_or(Expr::Int(1));
        // One loop body: read coordinates, locate dense levels, cases, advance.
        let body_for = |lw: &mut Self, loop_its: &[usize], dense_mode: bool| -> Result<Vec<Stmt>, LowerError> {
            let mut body = Vec::new();
            for &n in loop_its {
                let (p, end, c, crd) = cursors[n].clone();
                let value = if dense_mode {
                    // A finished iterator reads a coordinate no loop value equals.
                    Expr::Select(
                        Box::new(bin(BinOp::Lt, var(p), var(end))),
                        Box::new(crd.at(var(p))),
                        Box::new(int(-1)),
                    )
                } else {
                    crd.at(var(p))
                };
                body.push(Stmt::Decl(c, value));
                if segmented[n] {
                    // The segment: every following entry with the same coordinate.
                    let seg = segment_ends[n];
                    body.push(Stmt::Decl(seg, bin(BinOp::Add, var(p), int(1))));
                    body.push(Stmt::While {
                        cond: bin(
                            BinOp::And,
                            bin(BinOp::Lt, var(seg), var(end)),
                            bin(BinOp::Eq, crd.stored(var(seg)), crd.stored(var(p))),
                        ),
                        body: vec![Stmt::Assign(seg, bin(BinOp::Add, var(seg), int(1)))],
                    });
                }
            }
            if !dense_mode {
                let min = loop_its
                    .iter()
                    .map(|&n| var(cursors[n].2))
                    .reduce(|a, b| bin(BinOp::Min, a, b))
                    .expect("a sparse iterator");
                body.push(Stmt::Decl(loop_var, min));
            }
            body.extend(guide_step.iter().cloned());
            lw.locate(&mut body, &dense);
            // Cases: the points whose sparse iterators are among this loop's, most specific first.
            let mut chain: Vec<(Expr, Vec<Stmt>)> = Vec::new();
            for (its, e) in points.clone() {
                if !its.iter().all(|n| loop_its.contains(n)) {
                    continue;
                }
                let saved = (lw.positions.clone(), lw.bound.clone());
                let (segments, open_windows) = (lw.segments.len(), lw.windows.len());
                let mut inner = Vec::new();
                for &n in &its {
                    let (k, l) = sparse[n];
                    if let Some(subrange) = &subranges[n] {
                        lw.windows.push((k, l, subrange.clone()));
                        continue;
                    }
                    lw.positions[k][l] = Some(cursors[n].0);
                    if segmented[n] {
                        lw.segments.push((k, l, segment_ends[n]));
                    }
                }
                inner.extend(lw.result_before(v, loop_var));
                inner.extend(lw.nest(rest, lhs, op, e)?);
                inner.extend(lw.result_after(v, loop_var));
                (lw.positions, lw.bound) = saved;
                lw.segments.truncate(segments);
                lw.windows.truncate(open_windows);
                chain.push((all(its.iter().map(|&n| at(n)).collect()), inner));
            }
            let mut cases: Vec<Stmt> = Vec::new();
            for (cond, then) in chain.into_iter().rev() {
                cases = vec![Stmt::If { cond, then, otherwise: cases }];
            }
            body.extend(cases);
            for &n in loop_its {
                let (p, end, _, crd) = cursors[n].clone();
                let then = match &crd {
                    Coordinates::Rows { advance, .. } => {
                        let mut then = vec![Stmt::Assign(advance.next, bin(BinOp::Add, var(loop_var), int(1)))];
                        then.extend(advance.steps.clone());
                        then
                    }
                    // The next subsection starts past this `v`.
                    Coordinates::Window { raw, base, coef, next, .. } => {
                        let start = bin(BinOp::Add, base.clone(), bin(BinOp::Mul, int(*coef), var(*next)));
                        let mut then = vec![
                            Stmt::Assign(*next, bin(BinOp::Add, var(loop_var), int(1))),
                            Stmt::While {
                                cond: bin(
                                    BinOp::And,
                                    bin(BinOp::Lt, var(p), var(end)),
                                    bin(BinOp::Lt, raw.at(var(p)), start),
                                ),
                                body: vec![Stmt::Assign(p, bin(BinOp::Add, var(p), int(1)))],
                            },
                        ];
                        then.extend(settle(p, end, &crd, lw.size(v) as i64));
                        then
                    }
                    _ => {
                        let next = if segmented[n] { var(segment_ends[n]) } else { bin(BinOp::Add, var(p), int(1)) };
                        let mut then = vec![Stmt::Assign(p, next)];
                        if matches!(crd, Coordinates::Mapped { .. }) {
                            then.extend(settle(p, end, &crd, lw.size(v) as i64));
                        }
                        then
                    }
                };
                body.push(Stmt::If { cond: at(n), then, otherwise: vec![] });
            }
            Ok(body)
        };
        if split_inner.is_some() && !dense_driven {
            return unsupported(format!(
                "splitting `{name}`, which iterates a compressed level (split its positions with `pos` first: not lowered yet)"
            ));
        }
        if alone {
            // One iterator and nothing to merge: a plain loop over its positions.
            let (mut p, end, _, crd) = cursors[0].clone();
            let (k, l) = sparse[0];
            let (mut start, mut stop) = ranges[0].clone();
            let mut setup = guide_setup;
            if let Coordinates::Mapped { .. } = crd {
                // The range the searches above narrowed.
                setup = std::mem::take(&mut out);
                (start, stop) = (var(p), var(end));
                p = self
                    .f
                    .fresh_var(&format!("{}{l}_q", self.cin.tensors[self.accesses[k].tensor].name), ScalarType::Index);
            }
            let mut body = vec![Stmt::Decl(loop_var, crd.at(var(p)))];
            body.extend(guide_step.iter().cloned());
            let mut inner = Vec::new();
            self.locate(&mut inner, &dense);
            let saved = (self.positions.clone(), self.bound.clone());
            self.positions[k][l] = Some(p);
            inner.extend(self.result_before(v, loop_var));
            self.repeating += usize::from(!unique);
            let nested = self.nest(rest, lhs, op, points[0].1);
            self.repeating -= usize::from(!unique);
            inner.extend(nested?);
            inner.extend(self.result_after(v, loop_var));
            (self.positions, self.bound) = saved;
            self.bound[v.index()] = None;
            // A structured level's last block may reach past the dimension (zero padding).
            match &crd {
                Coordinates::Structured { .. } if !self.size(v).is_multiple_of(self.structured_m(k, l)) => {
                    body.push(Stmt::If {
                        cond: bin(BinOp::Lt, var(loop_var), int(self.size(v) as i64)),
                        then: inner,
                        otherwise: vec![],
                    });
                }
                _ => body.extend(inner),
            }
            let parallel = self.on_omp_threads(v, parallel);
            setup.push(Stmt::For { var: p, start, end: stop, body, parallel });
            self.unguide(&guided, guides_open);
            return Ok(setup);
        }
        if dense_driven {
            let all_its: Vec<usize> = (0..sparse.len()).collect();
            let mut body = body_for(self, &all_its, true)?;
            if ranged && self.assembly.is_none() && self.reduction.is_none() {
                body = match self.accumulate_rows(lhs, v, loop_var, body) {
                    Ok(rows) => rows,
                    Err(mut body) => {
                        // Every operand dense (each loop runs its whole range, no case
                        // skips a coordinate) and every store of the result plain: each
                        // element of the row is stored once, no zeros first (a dense 3×3
                        // convolution spent a fifth of its time writing them).
                        let vals = self.result_vals;
                        let stored_once = self.producers.is_empty()
                            && self.workspace.is_none()
                            && self.ism.is_none()
                            && (0..self.accesses.len()).all(|k| self.all_dense(k))
                            && crate::ir::any(&body, |s| matches!(s, Stmt::Store { array, .. } if *array == vals))
                            && !crate::ir::any(
                                &body,
                                |s| matches!(s, Stmt::Store { array, accumulate: true, .. } if *array == vals),
                            );
                        if !stored_once {
                            let zero = self.zero_result(lhs, Some((v, loop_var)));
                            body.splice(0..0, zero);
                        }
                        body
                    }
                };
            }
            let (start, end) = match self.bounds.filter(|_| ranged) {
                Some(b) => (load(b, int(0)), load(b, int(1))),
                None => (int(0), int(self.size(v) as i64)),
            };
            // A row range is split across threads by the caller, not by OpenMP.
            if parallel && ranged {
                self.on_threads.push(v);
            }
            let parallel = parallel && sparse.is_empty() && !ranged;
            let parallel = self.on_omp_threads(v, parallel);
            match split_inner {
                Some((inner, block, factor)) => {
                    // The last block stops at the end: a bound, not a `break` (which OpenMP
                    // does not allow in a parallel loop).
                    let first = bin(BinOp::Mul, var(block), int(factor));
                    let mut block_body = vec![Stmt::Decl(loop_var, bin(BinOp::Add, first.clone(), var(inner)))];
                    block_body.extend(body);
                    let stop = bin(BinOp::Min, int(factor), bin(BinOp::Sub, end, first));
                    out.push(Stmt::For { var: inner, start: int(0), end: stop, body: block_body, parallel });
                }
                None => out.push(Stmt::For { var: loop_var, start, end, body, parallel }),
            }
        } else {
            for (its, _) in points.clone() {
                let cond = all(its.iter().map(|&n| bin(BinOp::Lt, var(cursors[n].0), var(cursors[n].1))).collect());
                let body = body_for(self, &its, false)?;
                out.push(Stmt::While { cond, body });
            }
        }
        self.bound[v.index()] = None;
        self.unguide(&guided, guides_open);
        Ok(out)
    }

    /// Whether a `where` producer's read of access `k`'s level `l` can follow an outer loop
    /// (see [`Self::guide`]).
    fn guidable(&self, k: usize, l: usize) -> bool {
        let o = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
        let levels = o.format.levels();
        let window = self.windows.iter().rev().find(|w| w.0 == k && w.1 == l);
        levels[l].kind == LevelKind::COMPRESSED
            && o.structured[l].is_none()
            && l + 1 < levels.len()
            && o.pos[l + 1].is_some()
            && o.structured[l + 1].is_none()
            && (l == 0 || self.positions[k][l - 1].is_some())
            && !matches!(window, Some((_, _, Subrange::Rows { .. } | Subrange::Start(..))))
    }

    /// A `where` producer's read of a compressed level along an outer loop (`t = Σ_l C(k,l)`
    /// in the loop over `k`, C stored by columns): a cursor moves on to the loop's value, and
    /// the producer walks the children of the entry there — or none where the level has no
    /// entry, which is what a zero slice of C contributes to whatever the producer computes.
    /// Returns the cursor's declarations and the step each iteration starts with; the level
    /// stays resolved (and its children's range open) until [`Self::unguide`].
    fn guide(&mut self, guided: &[(usize, usize)], v: VarId) -> (Vec<Stmt>, Vec<Stmt>) {
        let (mut setup, mut step) = (Vec::new(), Vec::new());
        for &(k, l) in guided {
            let o = self.operands[self.accesses[k].tensor.index()].clone().expect("decomposed");
            let tname = self.cin.tensors[self.accesses[k].tensor].name.clone();
            let parent = match l.checked_sub(1) {
                None => int(0),
                Some(up) => var(self.positions[k][up].expect("checked by guidable")),
            };
            let (start, end) = self.level_range(&o, k, l, parent);
            let p = self.f.fresh_var(&format!("{tname}{l}_at"), ScalarType::Index);
            let e = self.f.fresh_var(&format!("{tname}{l}_at_end"), ScalarType::Index);
            let lo = self.f.fresh_var(&format!("{tname}{}_from", l + 1), ScalarType::Index);
            let hi = self.f.fresh_var(&format!("{tname}{}_to", l + 1), ScalarType::Index);
            setup.push(Stmt::Decl(p, start));
            setup.push(Stmt::Decl(e, end));
            let (crd, pos) = (o.crd[l].expect("compressed"), o.pos[l + 1].expect("checked by guidable"));
            let live = bin(BinOp::Lt, var(p), var(e));
            step.push(Stmt::While {
                cond: bin(BinOp::And, live.clone(), bin(BinOp::Lt, load(crd, var(p)), var(v))),
                body: vec![Stmt::Assign(p, bin(BinOp::Add, var(p), int(1)))],
            });
            step.push(Stmt::Decl(lo, int(0)));
            step.push(Stmt::Decl(hi, int(0)));
            step.push(Stmt::If {
                cond: bin(BinOp::And, live, bin(BinOp::Eq, load(crd, var(p)), var(v))),
                then: vec![
                    Stmt::Assign(lo, load(pos, var(p))),
                    Stmt::Assign(hi, load(pos, bin(BinOp::Add, var(p), int(1)))),
                ],
                otherwise: vec![],
            });
            self.positions[k][l] = Some(p);
            self.windows.push((k, l + 1, Subrange::Children(lo, hi)));
        }
        (setup, step)
    }

    fn unguide(&mut self, guided: &[(usize, usize)], open: usize) {
        self.windows.truncate(open);
        for &(k, l) in guided {
            self.positions[k][l] = None;
        }
    }

    /// The positions of access `k`'s level `l` under the parent position `parent`: from the
    /// level's `pos` (up to the end of the parent's segment when the parent is walked segment
    /// by segment), N per block of M of a structured level, the parent's own for a singleton.
    /// (Under a guide, its children's range: see [`Self::guide`].)
    fn level_range(&self, o: &Operand, k: usize, l: usize, parent: Expr) -> (Expr, Expr) {
        let children = self.windows.iter().rev().find_map(|w| match w {
            &(a, b, Subrange::Children(from, to)) if a == k && b == l => Some((from, to)),
            _ => None,
        });
        if let Some((from, to)) = children {
            return (var(from), var(to));
        }
        let parent_end = match self.segment(k, l) {
            Some(end) => var(end),
            None => bin(BinOp::Add, parent.clone(), int(1)),
        };
        match (o.pos[l], o.structured[l]) {
            (Some(pos), _) => (load(pos, parent), load(pos, parent_end)),
            (None, Some((n, m, size))) => {
                let per = int((size / m as usize * n as usize) as i64);
                (bin(BinOp::Mul, parent, per.clone()), bin(BinOp::Mul, parent_end, per))
            }
            (None, None) => (parent, parent_end),
        }
    }

    /// The end of the segment access `k`'s level `l - 1` stands on, when that level is walked
    /// segment by segment.
    fn segment(&self, k: usize, l: usize) -> Option<VarId> {
        let parent = l.checked_sub(1)?;
        self.segments.iter().rev().find(|(a, b, _)| *a == k && *b == parent).map(|s| s.2)
    }

    /// The access of a vector-wise N:M operand (`nm(N,M,L)`) reached at `v`, not yet iterated.
    fn blocked_access(&self, v: IndexVarId, rhs: ExprId) -> Option<usize> {
        self.reads(rhs).into_iter().find(|&k| {
            let a = &self.accesses[k];
            let o = self.operands[a.tensor.index()].as_ref().expect("decomposed");
            o.format.nm_params().is_some()
                && self.positions[k][0].is_none()
                && a.subscripts.iter().any(|t| t.as_var() == Some(v))
        })
    }

    /// Loops over a vector-wise N:M operand `B(x, y)` (`nm(N,M,L)`) in its storage order —
    /// windows, column groups, the N kept rows, the L lanes — binding both its variables at
    /// once: `x = w·M + meta`, `y = g·L + lane`, padding skipped. Taken where the operand's first
    /// variable is reached and the second is the next loop, the operand is a factor of the
    /// whole product (its zeros contribute nothing) and every other operand is dense (located
    /// where it is read).
    fn blocked_nest(
        &mut self,
        k: usize,
        v: IndexVarId,
        loops: &[(IndexVarId, bool)],
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        let a = self.accesses[k].clone();
        let o = self.operands[a.tensor.index()].clone().expect("decomposed");
        let tname = self.cin.tensors[a.tensor].name.clone();
        let (n, m, l) = o.format.nm_params().expect("nm(N,M,L)");
        let (Some(x), Some(y)) = (a.subscripts[0].as_var(), a.subscripts[1].as_var()) else {
            return unsupported(format!("`{tname}` in nm(N,M,L) with compound subscripts"));
        };
        let other = if x == v { y } else { x };
        let Some((&(next, _), rest)) = loops.split_first().filter(|(first, _)| first.0 == other) else {
            return unsupported(format!(
                "`{tname}` in nm(N,M,L): its two variables must be adjacent loops (`{}` right after `{}`)",
                self.cin.vars[other].name, self.cin.vars[v].name
            ));
        };
        debug_assert_eq!(next, other);
        let others_dense = self.reads(rhs).into_iter().all(|j| j == k || self.all_dense(j));
        if !others_dense || !is_factor(&self.exprs, rhs, &a) || self.assembly.is_some() {
            return unsupported(format!(
                "`{tname}` in nm(N,M,L) other than as a factor of a product with dense operands"
            ));
        }
        let (rows, cols) = (o.shape[0], o.shape[1]);
        let (windows, groups) = (rows.div_ceil(m as usize), cols.div_ceil(l));
        let mut new_var = |s: &str| self.f.var(&format!("{tname}_{s}"), ScalarType::Index);
        let (w, g, p1, p2, lane, p3) =
            (new_var("w"), new_var("g"), new_var("p1"), new_var("p2"), new_var("lane"), new_var("p3"));
        let (xv, yv) = (
            self.f.var(&self.cin.vars[x].name.clone(), ScalarType::Index),
            self.f.var(&self.cin.vars[y].name.clone(), ScalarType::Index),
        );
        let meta = o.crd[2].expect("metadata");
        let offset = Coordinates::Structured { meta, n, m, base: bin(BinOp::Mul, var(p1), int(n as i64)) }.at(var(p2));
        let saved = (self.positions.clone(), self.bound.clone());
        self.bound[x.index()] = Some(xv);
        self.bound[y.index()] = Some(yv);
        self.positions[k][0] = Some(w);
        self.positions[k][1] = Some(p1);
        self.positions[k][2] = Some(p2);
        self.positions[k][3] = Some(p3);
        let inner = self.nest(rest, lhs, op, rhs);
        (self.positions, self.bound) = saved;
        let inner = inner?;
        let lanes = vec![
            Stmt::Decl(yv, bin(BinOp::Add, bin(BinOp::Mul, var(g), int(l as i64)), var(lane))),
            Stmt::Decl(p3, bin(BinOp::Add, bin(BinOp::Mul, var(p2), int(l as i64)), var(lane))),
            Stmt::If { cond: bin(BinOp::Lt, var(yv), int(cols as i64)), then: inner, otherwise: vec![] },
        ];
        let kept = vec![
            Stmt::Decl(xv, bin(BinOp::Add, bin(BinOp::Mul, var(w), int(m as i64)), offset)),
            Stmt::If {
                cond: bin(BinOp::Lt, var(xv), int(rows as i64)),
                then: vec![Stmt::For { var: lane, start: int(0), end: int(l as i64), body: lanes, parallel: false }],
                otherwise: vec![],
            },
        ];
        let group = vec![
            Stmt::Decl(p1, bin(BinOp::Add, bin(BinOp::Mul, var(w), int(groups as i64)), var(g))),
            Stmt::For {
                var: p2,
                start: bin(BinOp::Mul, var(p1), int(n as i64)),
                end: bin(BinOp::Mul, bin(BinOp::Add, var(p1), int(1)), int(n as i64)),
                body: kept,
                parallel: false,
            },
        ];
        Ok(vec![Stmt::For {
            var: w,
            start: int(0),
            end: int(windows as i64),
            body: vec![Stmt::For { var: g, start: int(0), end: int(groups as i64), body: group, parallel: false }],
            parallel: false,
        }])
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

    /// The loops below the result's outer levels, accumulating into the row workspace, then
    /// the row appended in coordinate order and the workspace cleared.
    fn workspace_region(
        &mut self,
        loops: &[(IndexVarId, bool)],
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        let mut w = self.workspace.clone().expect("a workspace");
        let mut out = vec![Stmt::Decl(w.count, int(0)), Stmt::Decl(w.products, int(0))];
        w.active = true;
        self.workspace = Some(w.clone());
        let inner = self.nest(loops, lhs, op, rhs);
        w.active = false;
        self.workspace = Some(w.clone());
        out.extend(inner?);
        let a = self.assembly.as_ref().expect("a sparse result");
        let name = self.cin.vars[w.var].name.clone();
        // Appends coordinate `j` and clears its slot.
        let drain = |j: VarId| {
            let mut s = a.append(j, load(w.values, var(j)));
            s.push(Stmt::Store { array: w.values, index: var(j), value: float(0.0), accumulate: false });
            // Every listed coordinate is drained: its whole word of marks can go.
            s.push(Stmt::Store { array: w.mark, index: word(var(j)), value: int(0), accumulate: false });
            s
        };
        let (sorted_j, q) = (self.f.var(&name, ScalarType::Index), self.f.var(&format!("{name}_q"), ScalarType::Index));
        // Many coordinates: the list is rewritten in order from the marks, a word of 64 at a
        // time, one step per set bit (a branch per flag, mispredicted on every touched
        // coordinate, cost a 2-D convolution into DCSR at 99% sparsity 70% of its time).
        let (w_q, bits, base) = (
            self.f.var(&format!("{name}_word"), ScalarType::Index),
            self.f.var(&format!("{name}_bits"), ScalarType::Index),
            self.f.var(&format!("{name}_base"), ScalarType::Index),
        );
        let scan = vec![
            Stmt::Assign(w.count, int(0)),
            Stmt::For {
                var: w_q,
                start: int(0),
                end: int(w.size as i64 / 64 + 1),
                body: vec![
                    Stmt::Decl(bits, load(w.mark, var(w_q))),
                    Stmt::Decl(base, bin(BinOp::Mul, var(w_q), int(64))),
                    Stmt::While {
                        cond: bin(BinOp::Ne, var(bits), int(0)),
                        // The lowest bit cleared is the only step carried from bit to bit
                        // (one cycle; shifting the word past it took four).
                        body: vec![
                            Stmt::Store {
                                array: w.list,
                                index: var(w.count),
                                value: bin(
                                    BinOp::Add,
                                    var(base),
                                    Expr::Unary(UnOp::TrailingZeros, Box::new(var(bits))),
                                ),
                                accumulate: false,
                            },
                            Stmt::Assign(w.count, bin(BinOp::Add, var(w.count), int(1))),
                            Stmt::Assign(bits, Expr::Unary(UnOp::ClearLowestBit, Box::new(var(bits)))),
                        ],
                    },
                ],
                parallel: false,
            },
        ];
        out.push(Stmt::If {
            cond: bin(BinOp::Lt, bin(BinOp::Mul, var(w.count), int(SORT_BELOW)), int(w.size as i64)),
            then: vec![Stmt::Sort { array: w.list, start: int(0), end: var(w.count), scratch: w.sorted }],
            otherwise: scan,
        });
        let mut listed = vec![Stmt::Decl(sorted_j, load(w.list, var(q)))];
        listed.extend(drain(sorted_j));
        out.push(Stmt::Assign(
            w.branchless,
            one_if(bin(BinOp::Lt, var(w.products), bin(BinOp::Mul, var(w.count), int(BRANCHLESS_BELOW)))),
        ));
        out.push(Stmt::For { var: q, start: int(0), end: var(w.count), body: listed, parallel: false });
        Ok(out)
    }

    /// How far a subscript's variables other than `v` and not bound yet can carry it: the
    /// width of its windows along `v`.
    fn reach(&self, term: &nm_ir::notation::IndexTerm, v: IndexVarId) -> i64 {
        term.terms
            .iter()
            .filter(|(_, w)| *w != v && self.bound[w.index()].is_none())
            .map(|&(c, w)| c * (self.size(w) as i64 - 1).max(0))
            .sum()
    }

    /// A rows iterator along `v` for access `k`, whose first unresolved level `l` (dense, or
    /// compressed: DCSR) waits for a later variable while level `l + 1` slides with `v` (see
    /// [`Subsection::Rows`]); `None` when that is not the case (or not supported: negative
    /// coefficients, more than 4096 rows, OpenMP threads sharing the starts).
    fn rows_subsection(
        &self,
        k: usize,
        l: usize,
        v: IndexVarId,
        consumer_reads: &[usize],
        split: bool,
    ) -> Option<Subsection> {
        if self.threaded || split || !consumer_reads.contains(&k) {
            return None;
        }
        let a = &self.accesses[k];
        let o = self.operands[a.tensor.index()].as_ref()?;
        let levels = o.format.levels();
        let (parent, level) = (levels.get(l)?, levels.get(l + 1)?);
        let ordered = matches!(level.kind, LevelKind::Compressed(p) if p.ordered);
        // A compressed parent (DCSR) holds only some rows: those in the reach of its
        // subscript are a range of its positions, found by search.
        let parent_ok = match parent.kind {
            LevelKind::Dense => true,
            LevelKind::Compressed(p) => p.ordered && p.unique && o.pos[l].is_some(),
            _ => false,
        };
        if !parent_ok || !ordered || o.pos[l + 1].is_none() {
            return None;
        }
        let (rows, term) = (&a.subscripts[parent.expr.dim()], &a.subscripts[level.expr.dim()]);
        let unbound = |w: IndexVarId| w != v && self.bound[w.index()].is_none();
        if rows.vars().any(|w| w == v)
            || !rows.vars().any(unbound)
            || !term.vars().any(|w| w == v)
            || !term.vars().any(unbound)
            || rows.terms.iter().chain(&term.terms).any(|&(c, _)| c < 0)
        {
            return None;
        }
        let span = self.reach(rows, v) + 1;
        if span > 4096 {
            return None;
        }
        Some(Subsection::Rows {
            rows: rows.clone(),
            term: term.clone(),
            coef: coefficient(term, v),
            width: self.reach(term, v),
            size: self.size(v) as i64,
            span,
        })
    }

    /// A rows iterator's state and code: one window start per row (`starts[t]`, the first
    /// entry of row `first + t` at or past the window of `next`), and the smallest `v` from
    /// `next` on whose window holds an entry of some row. Returns the statements that start
    /// it, its coordinates, and the per-row starts for the loops inside.
    #[allow(clippy::too_many_arguments)]
    fn rows_cursor(
        &mut self,
        k: usize,
        l: usize,
        v: IndexVarId,
        (rows, term): (&nm_ir::notation::IndexTerm, &nm_ir::notation::IndexTerm),
        (coef, width, size, span): (i64, i64, i64, i64),
        end: VarId,
        crd: &Coordinates,
    ) -> (Vec<Stmt>, Coordinates, Subrange) {
        let o = self.operands[self.accesses[k].tensor.index()].clone().expect("decomposed");
        let tname = self.cin.tensors[self.accesses[k].tensor].name.clone();
        let levels = o.format.levels();
        // `l` is the compressed level; its parent `l - 1` waits for a later loop.
        let parent_level = l - 1;
        let grand = match parent_level.checked_sub(1) {
            None => int(0),
            Some(g) => var(self.positions[k][g].expect("resolved in order")),
        };
        let row0 = self.affine(rows, None);
        let mut init = Vec::new();
        // The parent's positions of the rows the subscript reaches: `first` and `count` of them.
        let (first, count) = match o.pos[parent_level] {
            // Dense: every row, at grand · size + row.
            None => {
                let parent_size = o.shape[levels[parent_level].expr.dim()] as i64;
                (bin(BinOp::Add, bin(BinOp::Mul, grand, int(parent_size)), row0), int(span))
            }
            // Compressed: the stored rows in [row0, row0 + span), by two searches.
            Some(parent_pos) => {
                let rows_crd = Coordinates::Array(o.crd[parent_level].expect("a compressed level"));
                let (lo, hi) = (
                    self.f.fresh_var(&format!("{tname}{parent_level}_rows"), ScalarType::Index),
                    self.f.fresh_var(&format!("{tname}{parent_level}_rows_end"), ScalarType::Index),
                );
                let limit = self.f.fresh_var(&format!("{tname}{parent_level}_rows_limit"), ScalarType::Index);
                init.push(Stmt::Decl(lo, load(parent_pos, grand.clone())));
                init.push(Stmt::Decl(limit, load(parent_pos, bin(BinOp::Add, grand, int(1)))));
                init.extend(lower_bound(&mut self.f, lo, limit, &rows_crd, row0.clone()));
                init.push(Stmt::Decl(hi, var(lo)));
                init.extend(lower_bound(&mut self.f, hi, limit, &rows_crd, bin(BinOp::Add, row0, int(span))));
                (var(lo), bin(BinOp::Sub, var(hi), var(lo)))
            }
        };
        let pos = o.pos[l].expect("a compressed level");
        // One per rows iterator: a level may have several (found by the differential tests,
        // `C(2*l+k+2, 2*i+j)` read through a copy: two arrays of one name did not compile).
        let starts = self.f.fresh_array(&format!("{tname}{l}_starts"), ElemType::I64, Role::Scratch, true);
        self.prologue.push(Stmt::Resize { array: starts, len: int(span) });
        let base = self.affine(term, Some(v));
        let state = self.f.fresh_var(&format!("{tname}{l}_first{}", self.cin.vars[v].name), ScalarType::Index);
        let next = self.f.fresh_var(&format!("{tname}{l}_next"), ScalarType::Index);
        let row_end = |t: VarId| load(pos, bin(BinOp::Add, bin(BinOp::Add, first.clone(), var(t)), int(1)));
        init.extend([Stmt::Decl(next, int(0)), Stmt::Decl(state, int(0))]);
        // Every row's first entry at or past the first window.
        let t = self.f.fresh_var("row_t", ScalarType::Index);
        let (q, q_end) = (self.f.fresh_var("row_p", ScalarType::Index), self.f.fresh_var("row_end", ScalarType::Index));
        let mut body =
            vec![Stmt::Decl(q, load(pos, bin(BinOp::Add, first.clone(), var(t)))), Stmt::Decl(q_end, row_end(t))];
        body.extend(lower_bound(&mut self.f, q, q_end, crd, base.clone()));
        body.push(Stmt::Store { array: starts, index: var(t), value: var(q), accumulate: false });
        init.push(Stmt::For { var: t, start: int(0), end: count.clone(), body, parallel: false });
        // The smallest `v` from `next` on with an entry in its window, in `state` (`size`: none).
        let smallest = {
            let t = self.f.fresh_var("row_t", ScalarType::Index);
            let at = load(starts, var(t));
            let over = bin(BinOp::Sub, crd.at(at.clone()), bin(BinOp::Add, base.clone(), int(width)));
            let candidate =
                bin(BinOp::Max, var(next), bin(BinOp::Div, bin(BinOp::Add, over, int(coef - 1)), int(coef)));
            vec![
                Stmt::Assign(state, int(size)),
                Stmt::For {
                    var: t,
                    start: int(0),
                    end: count.clone(),
                    body: vec![Stmt::If {
                        cond: bin(BinOp::Lt, at, row_end(t)),
                        then: vec![Stmt::Assign(state, bin(BinOp::Min, var(state), candidate))],
                        otherwise: vec![],
                    }],
                    parallel: false,
                },
                Stmt::If {
                    cond: bin(BinOp::Le, int(size), var(state)),
                    then: vec![Stmt::Assign(end, int(0))],
                    otherwise: vec![],
                },
            ]
        };
        init.extend(smallest.clone());
        // Moving on: every row's start past the window of `next`, then the smallest again.
        let t = self.f.fresh_var("row_t", ScalarType::Index);
        let at = load(starts, var(t));
        let start = bin(BinOp::Add, base.clone(), bin(BinOp::Mul, int(coef), var(next)));
        let mut steps = vec![Stmt::For {
            var: t,
            start: int(0),
            end: count,
            body: vec![Stmt::While {
                cond: bin(
                    BinOp::And,
                    bin(BinOp::Lt, at.clone(), row_end(t)),
                    bin(BinOp::Lt, crd.at(at.clone()), start),
                ),
                body: vec![Stmt::Store {
                    array: starts,
                    index: var(t),
                    value: bin(BinOp::Add, at.clone(), int(1)),
                    accumulate: false,
                }],
            }],
            parallel: false,
        }];
        steps.extend(smallest);
        let coordinates = Coordinates::Rows { state, advance: RowsAdvance { next, steps } };
        (init, coordinates, Subrange::Rows { starts, first })
    }

    /// The hint arrays of a searched level (created once, zeroed when the kernel starts): per
    /// parent position, where its last search ended and 1 + the coordinate it searched for.
    fn search_hints(&mut self, tname: &str, l: usize, pos: ArrayId) -> (ArrayId, ArrayId) {
        if let Some(&(_, _, at, from)) = self.hints.iter().find(|h| h.0 == pos && h.1 == l) {
            return (at, from);
        }
        let at = self.f.fresh_array(&format!("{tname}{l}_hint_at"), ElemType::I64, Role::Scratch, true);
        let from = self.f.fresh_array(&format!("{tname}{l}_hint_from"), ElemType::I64, Role::Scratch, true);
        for array in [at, from] {
            self.prologue.push(Stmt::Resize { array, len: Expr::Len(pos) });
            let q = self.f.var("hint_q", ScalarType::Index);
            self.prologue.push(Stmt::For {
                var: q,
                start: int(0),
                end: Expr::Len(pos),
                body: vec![Stmt::Store { array, index: var(q), value: int(0), accumulate: false }],
                parallel: false,
            });
        }
        self.hints.push((pos, l, at, from));
        (at, from)
    }

    /// Locates every dense level in `list`: position = parent · size + coordinate, the
    /// coordinate being the level's subscript (every variable of it bound).
    fn locate(&mut self, body: &mut Vec<Stmt>, list: &[(usize, usize)]) {
        for &(k, l) in list {
            let op = self.operands[self.accesses[k].tensor.index()].as_ref().expect("decomposed");
            let dim = op.format.levels()[l].expr.dim();
            let size = op.shape[dim] as i64;
            let coordinate = self.affine(&self.accesses[k].subscripts[dim], None);
            let parent = if l == 0 { int(0) } else { var(self.positions[k][l - 1].expect("resolved in order")) };
            let p =
                self.f.var(&format!("{}{l}_p{k}", self.cin.tensors[self.accesses[k].tensor].name), ScalarType::Index);
            body.push(Stmt::Decl(p, bin(BinOp::Add, bin(BinOp::Mul, parent, int(size)), coordinate)));
            self.positions[k][l] = Some(p);
        }
    }

    /// A subscript's value from the loop variables bound so far, leaving out `except` and any
    /// variable not bound yet (a window's lowest coordinate).
    fn affine(&self, term: &nm_ir::notation::IndexTerm, except: Option<IndexVarId>) -> Expr {
        let mut e = int(term.constant);
        let mut first = term.constant == 0;
        for &(c, w) in &term.terms {
            let Some(lv) = self.bound[w.index()].filter(|_| Some(w) != except) else { continue };
            let t = if c == 1 { var(lv) } else { bin(BinOp::Mul, int(c), var(lv)) };
            e = if first { t } else { bin(BinOp::Add, e, t) };
            first = false;
        }
        e
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
                return unsupported(format!(
                    "`{}` is read outside the loop over `{}`",
                    self.cin.tensors[a.tensor].name, self.cin.vars[v].name
                ));
            }
            let coordinate = self.affine(&a.subscripts[d], None);
            position = bin(BinOp::Add, bin(BinOp::Mul, position, int(op.shape[d] as i64)), coordinate);
        }
        Ok(position)
    }

    /// The scalar variable of a `where` temporary.
    fn temporary(&self, t: TensorId) -> Option<VarId> {
        self.temporaries.iter().find(|(u, _)| *u == t).map(|(_, v)| *v)
    }

    /// The result level `v` indexes, when the result is assembled.
    fn result_level(&self, v: IndexVarId) -> Option<usize> {
        let a = self.assembly.as_ref()?;
        a.vars.iter().position(|&w| w == v)
    }

    fn result_before(&mut self, v: IndexVarId, loop_var: VarId) -> Vec<Stmt> {
        let Some(l) = self.result_level(v) else { return Vec::new() };
        let mut a = self.assembly.take().expect("assembled");
        let out = a.before(&mut self.f, l, loop_var);
        self.assembly = Some(a);
        out
    }

    /// What a `pos` variable iterates: `pos(f, fpos, T)` with `f = fuse(a, b)` and `T(a, b)`
    /// a CSR-like operand (a dense level, then a compressed one): the positions `0..nnz` of its
    /// compressed level, each naming a row `a` and a column `b`.
    fn position_space(&self, v: IndexVarId) -> Option<PositionSpace> {
        let Some(&Derivation::Pos { parent, tensor }) = self.cin.derivations.get(&v) else { return None };
        let Some(&Derivation::Fuse { outer, inner }) = self.cin.derivations.get(&parent) else { return None };
        let k = self.accesses.iter().position(|a| {
            a.tensor == tensor
                && a.subscripts.len() == 2
                && a.subscripts[0].as_var() == Some(outer)
                && a.subscripts[1].as_var() == Some(inner)
        })?;
        let op = self.operands[tensor.index()].as_ref()?;
        let levels = op.format.levels();
        let csr_like = levels.len() == 2
            && levels[0].kind == LevelKind::Dense
            && matches!(levels[1].kind, LevelKind::Compressed(p) if p.unique)
            && levels[0].expr == nm_format::LevelExpr::Dim(0)
            && levels[1].expr == nm_format::LevelExpr::Dim(1);
        if !csr_like {
            return None;
        }
        let (pos, crd) = (op.pos[1]?, op.crd[1]?);
        let rows = self.size(outer);
        Some(PositionSpace { access: k, row: outer, col: inner, rows, pos, crd, count: load(pos, int(rows as i64)) })
    }

    /// The loop over `ps`'s positions (one block of a split of them, when `split` names the
    /// block loop): the row of the block's first position found by binary search in `pos`,
    /// then advanced position by position; the column read from `crd`. Both variables and the
    /// operand's two levels are resolved inside it.
    fn position_loop(
        &mut self,
        ps: PositionSpace,
        split: Option<(VarId, VarId, i64)>,
        rest: &[(IndexVarId, bool)],
        lhs: &Access,
        op: AssignOp,
        rhs: ExprId,
    ) -> Result<Vec<Stmt>, LowerError> {
        let name = |lw: &Self, v: IndexVarId| lw.cin.vars[v].name.clone();
        let p = self.f.var(&format!("{}_p", self.cin.tensors[self.accesses[ps.access].tensor].name), ScalarType::Index);
        let row = self.f.var(&name(self, ps.row), ScalarType::Index);
        let col = self.f.var(&name(self, ps.col), ScalarType::Index);
        let (lo, hi, mid) = (
            self.f.var("search_lo", ScalarType::Index),
            self.f.var("search_hi", ScalarType::Index),
            self.f.var("search_mid", ScalarType::Index),
        );
        let (first, loop_var, start, end) = match split {
            Some((inner, block, factor)) => (bin(BinOp::Mul, var(block), int(factor)), inner, int(0), int(factor)),
            None => (int(0), p, int(0), ps.count.clone()),
        };
        // The row holding position `first`: the last row whose `pos` is at most `first`.
        let mut out = vec![
            Stmt::Decl(lo, int(0)),
            Stmt::Decl(hi, int(ps.rows as i64)),
            Stmt::While {
                cond: bin(BinOp::Lt, var(lo), var(hi)),
                body: vec![
                    Stmt::Decl(mid, bin(BinOp::Div, bin(BinOp::Add, var(lo), var(hi)), int(2))),
                    Stmt::If {
                        cond: bin(BinOp::Le, load(ps.pos, bin(BinOp::Add, var(mid), int(1))), first.clone()),
                        then: vec![Stmt::Assign(lo, bin(BinOp::Add, var(mid), int(1)))],
                        otherwise: vec![Stmt::Assign(hi, var(mid))],
                    },
                ],
            },
            Stmt::Decl(row, var(lo)),
        ];
        let mut body = Vec::new();
        if split.is_some() {
            body.push(Stmt::Decl(p, bin(BinOp::Add, first, var(loop_var))));
            body.push(Stmt::If {
                cond: bin(BinOp::Le, ps.count.clone(), var(p)),
                then: vec![Stmt::Break],
                otherwise: vec![],
            });
        }
        body.push(Stmt::While {
            cond: bin(BinOp::Le, load(ps.pos, bin(BinOp::Add, var(row), int(1))), var(p)),
            body: vec![Stmt::Assign(row, bin(BinOp::Add, var(row), int(1)))],
        });
        body.push(Stmt::Decl(col, load(ps.crd, var(p))));
        let saved = (self.bound.clone(), self.positions.clone());
        self.bound[ps.row.index()] = Some(row);
        self.bound[ps.col.index()] = Some(col);
        self.positions[ps.access][0] = Some(row);
        self.positions[ps.access][1] = Some(p);
        // Other operands' dense levels over the two variables are located here, in level
        // order, as a loop over each would (`C(k, j)` with C in CSR: its row `k`).
        for v in [ps.row, ps.col] {
            for k in self.reads(rhs) {
                let a = &self.accesses[k];
                let levels = self.operands[a.tensor.index()].as_ref().expect("decomposed").format.levels().to_vec();
                if k == ps.access || self.all_dense(k) {
                    continue;
                }
                if let Some(l) = self.positions[k].iter().take(levels.len()).position(Option::is_none)
                    && levels[l].kind == LevelKind::Dense
                    && a.subscripts.get(levels[l].expr.dim()).and_then(|t| t.as_var()) == Some(v)
                {
                    self.locate(&mut body, &[(k, l)]);
                }
            }
        }
        let inner = self.nest(rest, lhs, op, rhs);
        (self.bound, self.positions) = saved;
        body.extend(inner?);
        out.push(Stmt::For { var: loop_var, start, end, body, parallel: false });
        Ok(out)
    }

    /// The body of a row loop over a dense result's first coordinate (`C(i, ...)`, row `i` =
    /// `at`) that sums into the row from inside a reduction (SpMM: `for k { for j { C[i,j] +=
    /// ... } }`), rewritten to sum into a kernel-local row buffer that is zeroed first and
    /// copied out last; the C compiler keeps a short row in registers (64 doubles: 8 AVX-512
    /// registers). Summing in memory, stores to `C[i, j]` and loads of `B[k, j]` 4 KiB apart are
    /// taken for dependent by the CPU: with both arrays page-aligned that cost MIT8's SpMM 30%
    /// (7.0 against 5.3 ms); in registers, hand-written C runs 4.5 ms whatever the alignment.
    /// `Err(body)` unchanged when the pattern does not hold: the result read in the body, `i`
    /// in another subscript, rows of one element (a register accumulates those) or of more
    /// than 4096 (the buffer lives on the stack).
    fn accumulate_rows(
        &mut self,
        lhs: &Access,
        v: IndexVarId,
        at: VarId,
        body: Vec<Stmt>,
    ) -> Result<Vec<Stmt>, Vec<Stmt>> {
        let vals = self.result_vals;
        let shape = &self.types.tensors[self.result.index()].shape;
        let row: usize = shape.iter().skip(1).product();
        let first_only = lhs.subscripts.first().and_then(|t| t.as_var()) == Some(v)
            && lhs.subscripts.iter().skip(1).all(|t| t.as_var() != Some(v));
        let reads_result = crate::ir::any(&body, |s| stmt_loads(s, vals));
        let accumulates =
            crate::ir::any(&body, |s| matches!(s, Stmt::Store { array, accumulate: true, .. } if *array == vals));
        if !first_only || reads_result || !accumulates || !(2..=4096).contains(&row) {
            return Err(body);
        }
        let buffer = match self.row_buffer {
            Some(b) => b,
            None => {
                let name = format!("{}_row", self.cin.tensors[self.result].name);
                let b = self.f.array(&name, self.value, Role::Local { len: row }, true);
                self.row_buffer = Some(b);
                b
            }
        };
        let q = self.f.var("row_q", ScalarType::Index);
        let slab = bin(BinOp::Mul, var(at), int(row as i64));
        let mut out = vec![Stmt::For {
            var: q,
            start: int(0),
            end: int(row as i64),
            body: vec![Stmt::Store { array: buffer, index: var(q), value: float(0.0), accumulate: false }],
            parallel: false,
        }];
        out.extend(redirect_stores(&body, vals, buffer, at));
        let q = self.f.var("row_q", ScalarType::Index);
        out.push(Stmt::For {
            var: q,
            start: int(0),
            end: int(row as i64),
            body: vec![Stmt::Store {
                array: vals,
                index: bin(BinOp::Add, slab, var(q)),
                value: load(buffer, var(q)),
                accumulate: false,
            }],
            parallel: false,
        });
        Ok(out)
    }

    /// Zeroes the dense result's elements whose coordinate `v` is `at` (all of them when
    /// `fixed` is `None`). A kernel starts its dense result at zero itself, as taco's compute
    /// kernels do: a timed run includes it, as the peers' runs include theirs, and outputs
    /// can be reused from run to run. Per row of a row range, right before the row is
    /// computed (it is then in cache), and never outside the range.
    fn zero_result(&mut self, lhs: &Access, fixed: Option<(IndexVarId, VarId)>) -> Vec<Stmt> {
        let vals = self.result_vals;
        let zero = |index| Stmt::Store { array: vals, index, value: float(0.0), accumulate: false };
        let Some((v, at)) = fixed else {
            let q = self.f.var("zero_q", ScalarType::Index);
            return vec![Stmt::For {
                var: q,
                start: int(0),
                end: Expr::Len(vals),
                body: vec![zero(var(q))],
                parallel: false,
            }];
        };
        let shape = self.types.tensors[self.result.index()].shape.clone();
        let mut loops = Vec::new();
        let mut index = int(0);
        for (d, t) in lhs.subscripts.iter().enumerate() {
            let coordinate = if t.as_var() == Some(v) {
                var(at)
            } else {
                let q = self.f.var(&format!("zero_{d}"), ScalarType::Index);
                loops.push((q, shape[d]));
                var(q)
            };
            index = bin(BinOp::Add, bin(BinOp::Mul, index, int(shape[d] as i64)), coordinate);
        }
        let mut stmt = zero(index);
        for (q, n) in loops.into_iter().rev() {
            stmt = Stmt::For { var: q, start: int(0), end: int(n as i64), body: vec![stmt], parallel: false };
        }
        vec![stmt]
    }

    fn result_after(&self, v: IndexVarId, loop_var: VarId) -> Vec<Stmt> {
        match (self.result_level(v), &self.assembly) {
            (Some(l), Some(a)) => a.after(l, loop_var),
            _ => Vec::new(),
        }
    }

    /// The assignment at the leaf of the loops. Levels whose subscripts the loops bound before
    /// reaching them — a compound subscript's variables bound before its parent level was
    /// resolved (`I(i+r, j+q)` in CSR under `reorder(i,j,q,r)`) — are located here: dense
    /// ones directly, compressed ones by binary search for the coordinate, the assignment
    /// running only where it is stored (so only for a factor of a product).
    fn assignment(&mut self, lhs: &Access, op: AssignOp, rhs: ExprId) -> Result<Vec<Stmt>, LowerError> {
        let (saved, segments) = (self.positions.clone(), self.segments.len());
        let mut steps: Vec<(Vec<Stmt>, Option<Expr>)> = Vec::new();
        for k in self.reads(rhs) {
            if self.all_dense(k) {
                continue;
            }
            let a = self.accesses[k].clone();
            let o = self.operands[a.tensor.index()].clone().expect("decomposed");
            let levels = o.format.levels();
            while let Some(l) = self.positions[k][..levels.len()].iter().position(Option::is_none) {
                let term = &a.subscripts[levels[l].expr.dim()];
                if term.vars().any(|v| self.bound[v.index()].is_none()) {
                    break;
                }
                let mut stmts = Vec::new();
                if levels[l].kind == LevelKind::Dense {
                    self.locate(&mut stmts, &[(k, l)]);
                    steps.push((stmts, None));
                    continue;
                }
                let tname = self.cin.tensors[a.tensor].name.clone();
                let searchable = matches!(levels[l].kind, LevelKind::Compressed(_) | LevelKind::Singleton(_))
                    && levels[l].kind.is_ordered();
                if !searchable || !is_factor(&self.exprs, rhs, &a) {
                    return unsupported(format!(
                        "`{tname}`'s level {l} is reached after every variable of its subscript is bound (its parent level resolved later): searching it needs an ordered compressed level read as a factor of a product; reorder the loops"
                    ));
                }
                let parent = if l == 0 { int(0) } else { var(self.positions[k][l - 1].expect("resolved in order")) };
                let range = self.level_range(&o, k, l, parent);
                let p = self.f.fresh_var(&format!("{tname}{l}_found"), ScalarType::Index);
                let end = self.f.fresh_var(&format!("{tname}{l}_last"), ScalarType::Index);
                let crd = Coordinates::Array(o.crd[l].expect("compressed or singleton"));
                let coordinate = self.affine(term, None);
                stmts.push(Stmt::Decl(p, range.0));
                stmts.push(Stmt::Decl(end, range.1));
                stmts.extend(lower_bound(&mut self.f, p, end, &crd, coordinate.clone()));
                let found =
                    bin(BinOp::And, bin(BinOp::Lt, var(p), var(end)), bin(BinOp::Eq, crd.at(var(p)), coordinate));
                self.positions[k][l] = Some(p);
                steps.push((stmts, Some(found)));
                if !levels[l].kind.is_unique() {
                    // Every entry with that coordinate: the children's range (COO's next level).
                    let segend = self.f.fresh_var(&format!("{tname}{l}_segend"), ScalarType::Index);
                    let same = bin(BinOp::Eq, crd.at(var(segend)), crd.at(var(p)));
                    let stmts = vec![
                        Stmt::Decl(segend, bin(BinOp::Add, var(p), int(1))),
                        Stmt::While {
                            cond: bin(BinOp::And, bin(BinOp::Lt, var(segend), var(end)), same),
                            body: vec![Stmt::Assign(segend, bin(BinOp::Add, var(segend), int(1)))],
                        },
                    ];
                    self.segments.push((k, l, segend));
                    steps.push((stmts, None));
                }
            }
        }
        let body = self.resolved_assignment(lhs, op, rhs);
        self.positions = saved;
        self.segments.truncate(segments);
        let mut body = body?;
        for (mut stmts, found) in steps.into_iter().rev() {
            match found {
                Some(cond) => stmts.push(Stmt::If { cond, then: body, otherwise: vec![] }),
                None => stmts.extend(body),
            }
            body = stmts;
        }
        Ok(body)
    }

    fn resolved_assignment(&mut self, lhs: &Access, op: AssignOp, rhs: ExprId) -> Result<Vec<Stmt>, LowerError> {
        // Every access the expression reads must be fully resolved.
        for k in self.reads(rhs) {
            let a = &self.accesses[k];
            let levels = self.operands[a.tensor.index()].as_ref().expect("decomposed").format.levels().len();
            if !a.subscripts.is_empty() && !self.all_dense(k) && self.positions[k][..levels].iter().any(Option::is_none)
            {
                return unsupported(format!("`{}` has levels no loop reaches", self.cin.tensors[a.tensor].name));
            }
        }
        if let Some(t) = self.temporary(lhs.tensor) {
            let value = self.expr(rhs)?;
            let value = if op == AssignOp::Accumulate { bin(BinOp::Add, var(t), value) } else { value };
            return Ok(vec![Stmt::Assign(t, value)]);
        }
        if let Some(w) = self.workspace.as_ref().filter(|w| w.active) {
            let j = var(self.bound[w.var.index()].expect("the workspace variable's loop"));
            let value = self.expr(rhs)?;
            let bit = bin(BinOp::Shl, int(1), bin(BinOp::BitAnd, j.clone(), int(63)));
            let fresh = bin(BinOp::Eq, bin(BinOp::BitAnd, load(w.mark, word(j.clone())), bit.clone()), int(0));
            let set = Stmt::Store {
                array: w.mark,
                index: word(j.clone()),
                value: bin(BinOp::BitOr, load(w.mark, word(j.clone())), bit),
                accumulate: false,
            };
            let list = Stmt::Store { array: w.list, index: var(w.count), value: j.clone(), accumulate: false };
            // A first touch is a coin toss when a row adds few products per coordinate (a
            // convolution at 90% sparsity: 1.5), and a mispredicted branch each time; with many
            // (SpGEMM: 17 on bcsstk16) the branch is predictable and an unconditional store would
            // make consecutive touches of one word wait on each other. The previous row decides.
            let branchless = vec![
                list.clone(),
                Stmt::Assign(w.count, bin(BinOp::Add, var(w.count), one_if(fresh.clone()))),
                set.clone(),
            ];
            let branchy = vec![Stmt::If {
                cond: fresh,
                then: vec![set, list, Stmt::Assign(w.count, bin(BinOp::Add, var(w.count), int(1)))],
                otherwise: vec![],
            }];
            return Ok(vec![
                Stmt::Assign(w.products, bin(BinOp::Add, var(w.products), int(1))),
                Stmt::If { cond: bin(BinOp::Ne, var(w.branchless), int(0)), then: branchless, otherwise: branchy },
                Stmt::Store { array: w.values, index: j, value, accumulate: op == AssignOp::Accumulate },
            ]);
        }
        if let Some(acc) = self.accumulator {
            let value = self.expr(rhs)?;
            return Ok(vec![Stmt::Assign(acc, bin(BinOp::Add, var(acc), value))]);
        }
        if let Some(a) = &self.assembly {
            let last = a.vars.last().copied().expect("a result level");
            let v = self.bound[last.index()].expect("the last result level's loop");
            let value = self.expr(rhs)?;
            return Ok(a.append(v, value));
        }
        let value = self.expr(rhs)?;
        self.result_store(lhs, value, op == AssignOp::Accumulate)
    }

    /// Stores `value` into the result element `lhs` names: in place in a dense result, or
    /// inserted into the sparse workspace (where duplicates add up, so `=` and `+=` agree: an
    /// assignment reaches each element once).
    fn result_store(&self, lhs: &Access, value: Expr, accumulate: bool) -> Result<Vec<Stmt>, LowerError> {
        let Some(ism) = &self.ism else {
            let index = self.result_index(lhs)?;
            return Ok(vec![Stmt::Store { array: self.result_vals, index, value, accumulate }]);
        };
        let mut key = int(0);
        let mut first = int(0);
        for (d, t) in lhs.subscripts.iter().enumerate() {
            let v = t.as_var().expect("the left-hand side is plain variables");
            let lv = self.bound[v.index()].ok_or_else(|| {
                LowerError::Unsupported(format!("result variable `{}` has no loop", self.cin.vars[v].name))
            })?;
            if d == ism.first_dim {
                first = var(lv);
            }
            let term = if ism.strides[d] == 1 { var(lv) } else { bin(BinOp::Mul, var(lv), int(ism.strides[d])) };
            key = if d == 0 { term } else { bin(BinOp::Add, key, term) };
        }
        Ok(vec![Stmt::Insert { workspace: ism.slot, key, first, value }])
    }

    /// The row-major position of the dense result element `lhs` names.
    fn result_index(&self, lhs: &Access) -> Result<Expr, LowerError> {
        let shape = &self.types.tensors[self.result.index()].shape;
        let mut index = int(0);
        for (d, t) in lhs.subscripts.iter().enumerate() {
            let v = t.as_var().expect("the left-hand side is plain variables");
            let lv = self.bound[v.index()].ok_or_else(|| {
                LowerError::Unsupported(format!("result variable `{}` has no loop", self.cin.vars[v].name))
            })?;
            index = bin(BinOp::Add, bin(BinOp::Mul, index, int(shape[d] as i64)), var(lv));
        }
        Ok(index)
    }

    /// The value of a CIN expression.
    fn expr(&self, e: ExprId) -> Result<Expr, LowerError> {
        Ok(match &self.exprs[e] {
            CinExpr::Access(a) if self.temporary(a.tensor).is_some() => var(self.temporary(a.tensor).expect("checked")),
            CinExpr::Access(a) => {
                let k = self.accesses.iter().position(|b| b == a).expect("collected");
                let op = self.operands[a.tensor.index()].as_ref().expect("decomposed");
                let position = if !a.subscripts.is_empty() && self.all_dense(k) {
                    self.dense_position(k)?
                } else if a.subscripts.is_empty() {
                    int(0)
                } else {
                    let levels = op.format.levels().len();
                    match self.positions[k][levels - 1] {
                        Some(p) => var(p),
                        None => {
                            let l = self.positions[k].iter().position(Option::is_none).unwrap_or(levels - 1);
                            return unsupported(format!(
                                "this loop order binds the subscripts of `{}`'s level {l} before the loops reach it (its parent level is resolved later); reorder so the variables of each level's subscript come after those of the levels above it",
                                self.cin.tensors[a.tensor].name
                            ));
                        }
                    }
                };
                load(op.vals, position)
            }
            CinExpr::Literal(v) => float(*v),
            CinExpr::Neg(a) => Expr::Unary(UnOp::Neg, Box::new(self.expr(*a)?)),
            CinExpr::Sum(..) => return unsupported("`sum` inside CIN"),
            CinExpr::Binary(op, a, b) => {
                let (x, y) = (self.expr(*a)?, self.expr(*b)?);
                let op = match op {
                    BinaryOp::Add => BinOp::Add,
                    BinaryOp::Sub => BinOp::Sub,
                    BinaryOp::Mul => BinOp::Mul,
                    BinaryOp::Div => BinOp::Div,
                };
                bin(op, x, y)
            }
        })
    }
}

/// A value type kernels are built for: `f32` or `f64` (lower with [`KernelValue::ELEM`]).
pub trait KernelValue: nm_format::Value {
    /// The element type of its value arrays.
    const ELEM: ElemType;
    /// Its values as a writable argument.
    fn wrap(values: Vec<Self>) -> ArrayData<'static>;
    /// An operand's values as a read-only argument (borrowed, not copied).
    fn borrow(values: &[Self]) -> ArrayData<'_>;
    /// Its values back from an argument.
    fn unwrap<'a>(data: &'a ArrayData) -> Option<&'a [Self]>;
    /// An output's values, moved out (`None` for another type or a borrowed input).
    fn take(data: &mut ArrayData) -> Option<Vec<Self>>;
}

/// [`KernelValue`] for a value type, by its variants of [`ElemType`], [`ArrayData`] and
/// [`Borrowed`] (all named alike).
macro_rules! kernel_value {
    ($t:ty, $variant:ident) => {
        impl KernelValue for $t {
            const ELEM: ElemType = ElemType::$variant;
            fn wrap(values: Vec<Self>) -> ArrayData<'static> {
                ArrayData::$variant(values)
            }
            fn borrow(values: &[Self]) -> ArrayData<'_> {
                ArrayData::Borrowed(Borrowed::$variant(values))
            }
            fn unwrap<'a>(data: &'a ArrayData) -> Option<&'a [Self]> {
                match data {
                    ArrayData::$variant(v) => Some(v),
                    ArrayData::Borrowed(Borrowed::$variant(v)) => Some(v),
                    _ => None,
                }
            }
            fn take(data: &mut ArrayData) -> Option<Vec<Self>> {
                match data {
                    ArrayData::$variant(v) => Some(std::mem::take(v)),
                    _ => None,
                }
            }
        }
    };
}

kernel_value!(f32, F32);
kernel_value!(f64, F64);

/// The kernel's arguments: each tensor's arrays in parameter order (`tensors[t]` for tensor
/// id `t`). Operands are borrowed in place, never copied or converted (the kernel must have
/// been lowered for their [`IndexWidths`]; a mismatch is an `ArgumentType` error when it
/// runs). A dense result's `result_len` values start zeroed, a sparse result's arrays empty,
/// grown by the kernel. A dense result larger than the memory available is an error, not an
/// abort.
pub fn arguments<'a, T: KernelValue>(
    lowered: &Lowered,
    tensors: &[Option<&'a nm_format::Tensor<T>>],
    result_len: usize,
) -> Result<Vec<ArrayData<'a>>, nm_format::TensorError> {
    use nm_format::LevelStorage;
    // Kernels trust the arrays they are given: every operand must be what it was lowered for.
    for (t, (name, shape, format)) in lowered.tensors.iter().enumerate() {
        if let Some(x) = tensors.get(t).copied().flatten() {
            check_operand(name, shape, format, x)?;
        }
    }
    let result_len = if lowered.sparse_result() { 0 } else { result_len };
    nm_format::memory::ensure_available(result_len as u128 * std::mem::size_of::<T>() as u128, || {
        format!("a dense result of {result_len} values")
    })?;
    lowered
        .function
        .arrays
        .iter()
        .zip(&lowered.params)
        .map(|((_, decl), t)| {
            let tensor = tensors.get(t.index()).copied().flatten();
            let level = |l: usize| tensor.map(|x| &x.levels()[l]);
            Ok(match (&decl.role, decl.output) {
                (Role::Values { .. }, true) => {
                    let mut zeros = T::wrap(vec![T::ZERO; result_len]);
                    zeros.advise_huge_pages();
                    zeros
                }
                (Role::Values { .. }, false) => tensor.map_or_else(|| T::wrap(Vec::new()), |x| T::borrow(x.values())),
                (Role::Pos { level: l, .. }, false) => match level(*l) {
                    Some(LevelStorage::Compressed { pos, .. }) => ArrayData::Borrowed(pos.into()),
                    _ => ArrayData::empty(decl.elem),
                },
                (Role::Metadata { level: l, .. }, false) => match level(*l) {
                    Some(LevelStorage::Structured { meta, .. }) => ArrayData::Borrowed(Borrowed::U64(meta.words())),
                    _ => ArrayData::empty(decl.elem),
                },
                (Role::Crd { level: l, .. }, false) => match level(*l) {
                    Some(LevelStorage::Compressed { crd, .. } | LevelStorage::Singleton { crd }) => {
                        ArrayData::Borrowed(crd.into())
                    }
                    _ => ArrayData::empty(decl.elem),
                },
                // The whole range, and a whole run: a reduction's kernel zeroes its result.
                (Role::Bounds, _) => {
                    ArrayData::I64(vec![0, lowered.partition.as_ref().map_or(0, |p| p.extent as i64), 1])
                }
                (Role::Workspace { extents, config, .. }, _) => {
                    match crate::ism::WorkspaceData::new(decl.elem, extents, *config) {
                        Ok(w) => ArrayData::Workspace(w),
                        Err(e) => return Err(nm_format::TensorError::TooLarge { what: e.to_string() }),
                    }
                }
                (Role::Local { len }, _) => {
                    let mut zeros = ArrayData::empty(decl.elem);
                    zeros.resize(*len);
                    zeros
                }
                _ => ArrayData::empty(decl.elem),
            })
        })
        .collect()
}

/// Checks that tensor `name` has the declared `shape` (a scalar may come as `[1]`) and
/// `format`: kernels trust the lengths of the arrays they are given.
pub fn check_operand<T: nm_format::Value>(
    name: &str,
    shape: &[usize],
    format: &Format,
    x: &nm_format::Tensor<T>,
) -> Result<(), nm_format::TensorError> {
    let actual = if x.shape() == [1] && shape.is_empty() { &[][..] } else { x.shape() };
    if actual != shape {
        return Err(nm_format::TensorError::ShapeMismatch {
            what: format!("tensor `{name}`"),
            expected: shape.to_vec(),
            actual: x.shape().to_vec(),
        });
    }
    if x.format() != format {
        return Err(nm_format::TensorError::WrongFormat {
            operation: "the kernel",
            needed: format!("{format} for `{name}`"),
            actual: x.format().to_string(),
        });
    }
    Ok(())
}

/// Readies `arrays` (from [`arguments`], after a run) for another run of a kernel that
/// assembles a sparse result: its outputs and workspaces are emptied, their memory kept — as
/// an allocator that keeps freed memory would hand it back. Fresh arrays each run would
/// page-fault their growth anew: 2,000 faults per run of luxembourg's A·Aᵀ, twice its time.
pub fn rearm(lowered: &Lowered, arrays: &mut [ArrayData]) {
    for ((_, decl), data) in lowered.function.arrays.iter().zip(arrays.iter_mut()) {
        if decl.output && matches!(decl.role, Role::Pos { .. } | Role::Crd { .. } | Role::Values { .. } | Role::Scratch)
        {
            data.clear();
        }
    }
}

/// The result tensor of a kernel that assembled a sparse result (or filled a dense one), read
/// back from the kernel's output arrays and validated by `Tensor::from_raw`.
pub fn result_tensor<T: KernelValue>(
    lowered: &Lowered,
    arrays: &[crate::interp::ArrayData],
    shape: &[usize],
    format: &Format,
) -> Result<nm_format::Tensor<T>, nm_format::TensorError> {
    assemble_result(lowered, arrays, shape, format, None)
}

/// [`result_tensor`], moving the result's values out of `arrays` instead of copying them: for a
/// caller done with the arrays (a dense result of 10⁶ values costs a copy and a fresh
/// allocation's page faults otherwise, more than many kernels take to compute it).
pub fn take_result_tensor<T: KernelValue>(
    lowered: &Lowered,
    arrays: &mut [crate::interp::ArrayData],
    shape: &[usize],
    format: &Format,
) -> Result<nm_format::Tensor<T>, nm_format::TensorError> {
    let k = result_values(lowered);
    let taken = k.and_then(|k| T::take(&mut arrays[k]));
    assemble_result(lowered, arrays, shape, format, taken)
}

/// The argument index of the result's values.
fn result_values(lowered: &Lowered) -> Option<usize> {
    let result = lowered.params[0];
    lowered
        .function
        .arrays
        .iter()
        .zip(&lowered.params)
        .position(|((_, d), t)| *t == result && d.output && matches!(d.role, Role::Values { .. }))
}

fn assemble_result<T: KernelValue>(
    lowered: &Lowered,
    arrays: &[crate::interp::ArrayData],
    shape: &[usize],
    format: &Format,
    taken: Option<Vec<T>>,
) -> Result<nm_format::Tensor<T>, nm_format::TensorError> {
    use crate::interp::ArrayData;
    use nm_format::{Indices, LevelStorage, Tensor};
    let result = lowered.params[0];
    let find = |want: &dyn Fn(&Role) -> bool| {
        lowered
            .function
            .arrays
            .iter()
            .zip(&lowered.params)
            .position(|((_, d), t)| *t == result && d.output && want(&d.role))
    };
    // The first `len` entries of an index array, 32-bit where they fit (one pass to check,
    // one to convert: widening to `usize` first copied a result's coordinates three times).
    let ints = |k: Option<usize>, len: usize| -> Indices {
        let v = match k.map(|k| &arrays[k]) {
            Some(ArrayData::I64(v)) => &v[..len.min(v.len())],
            _ => &[],
        };
        if v.iter().all(|&x| x <= u32::MAX as i64) {
            Indices::U32(v.iter().map(|&x| x.max(0) as u32).collect())
        } else {
            Indices::U64(v.iter().map(|&x| x.max(0) as u64).collect())
        }
    };
    let sizes = format.level_sizes(shape);
    let mut levels = Vec::new();
    let mut parents = 1usize;
    for (l, level) in format.levels().iter().enumerate() {
        match level.kind {
            LevelKind::Dense => {
                levels.push(LevelStorage::Dense { size: sizes[l] });
                parents *= sizes[l];
            }
            LevelKind::Singleton(_) => {
                let crd = ints(find(&|r| matches!(r, Role::Crd { level, .. } if *level == l)), parents);
                levels.push(LevelStorage::Singleton { crd });
            }
            _ => {
                let pos = ints(find(&|r| matches!(r, Role::Pos { level, .. } if *level == l)), parents + 1);
                let count = if pos.len() == parents + 1 { pos.get(parents) } else { 0 };
                let crd = ints(find(&|r| matches!(r, Role::Crd { level, .. } if *level == l)), count);
                levels.push(LevelStorage::Compressed { pos, crd });
                parents = count;
            }
        }
    }
    let vals = match taken {
        Some(mut v) => {
            v.truncate(parents);
            Some(v)
        }
        None => find(&|r| matches!(r, Role::Values { .. }))
            .map(|k| T::unwrap(&arrays[k]).map_or_else(Vec::new, |v| v.iter().copied().take(parents).collect())),
    };
    Tensor::from_raw(shape.to_vec(), format.clone(), levels, vals.unwrap_or_default())
}

/// Whether `s` (its own expressions, not nested statements) loads from `array`.
fn stmt_loads(s: &Stmt, array: ArrayId) -> bool {
    let mut found = false;
    s.exprs(&mut |e| e.walk(&mut |x| found |= matches!(x, Expr::Load(a, _) if *a == array)));
    found
}

/// `body` with every store into `from` going to `to` instead, at the index with the row
/// variable `row` set to 0 (its offset inside the row).
fn redirect_stores(body: &[Stmt], from: ArrayId, to: ArrayId, row: VarId) -> Vec<Stmt> {
    body.iter()
        .map(|s| match s {
            Stmt::Store { array, index, value, accumulate } if *array == from => Stmt::Store {
                array: to,
                index: crate::prefetch::substitute(index, row, &int(0)),
                value: value.clone(),
                accumulate: *accumulate,
            },
            Stmt::For { var, start, end, body, parallel } => Stmt::For {
                var: *var,
                start: start.clone(),
                end: end.clone(),
                body: redirect_stores(body, from, to, row),
                parallel: *parallel,
            },
            Stmt::While { cond, body } => {
                Stmt::While { cond: cond.clone(), body: redirect_stores(body, from, to, row) }
            }
            Stmt::If { cond, then, otherwise } => Stmt::If {
                cond: cond.clone(),
                then: redirect_stores(then, from, to, row),
                otherwise: redirect_stores(otherwise, from, to, row),
            },
            other => other.clone(),
        })
        .collect()
}

/// Whether `access` is a factor of the product `e` (every term of `e` is multiplied by it).
fn is_factor(exprs: &Arena<ExprId, CinExpr>, e: ExprId, access: &Access) -> bool {
    match &exprs[e] {
        CinExpr::Access(a) => a == access,
        CinExpr::Binary(BinaryOp::Mul, x, y) => is_factor(exprs, *x, access) || is_factor(exprs, *y, access),
        _ => false,
    }
}
