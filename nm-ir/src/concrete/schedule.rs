//! The scheduling language of `taco`, same names and argument order, as rewrites of CIN:
//! `reorder`, `split`, `divide`, `fuse`, `pos`, `parallelize`, `unroll`, `bound`,
//! `precompute`, and `mergeby` and `assemble`, which choose how taco's code merges and
//! assembles and change nothing here ([`Command::note`] says so). Each command checks that it
//! is legal and explains a refusal; variables it makes record where they come from
//! ([`Derivation`]), so analyses can recover the unscheduled loop order.
//!
//! A schedule is written as taco writes it — commands separated by commas (`split(i,i0,i1,16),
//! reorder(i0,i1,j)`), its enumerations in taco's spelling (`CPUThread`, `NoRaces`,
//! `MaxExact`) — or as nmsparse always wrote it, with `;` between commands and lower-case
//! names (`parallelize(i, cpu_thread, no_races)`).

use std::fmt;

use super::{ConcreteNotation, Stmt, StmtId, WorkspacePolicy};
use crate::id::Id;
use crate::notation::parse::{Parser, Tok};
use crate::notation::{AssignOp, IndexVar, IndexVarId, ParseError, TensorId};

/// Which hardware a parallel loop's iterations go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParallelUnit {
    /// CPU threads (OpenMP in the C back end).
    CpuThread,
    /// CPU SIMD lanes.
    CpuVector,
    /// GPU thread blocks.
    GpuBlock,
    /// GPU warps.
    GpuWarp,
    /// GPU threads.
    GpuThread,
}

/// How a parallel loop handles iterations that write the same result element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutputRace {
    /// The schedule promises there are none (checked).
    NoRaces,
    /// Let them race (the user accepts wrong results).
    IgnoreRaces,
    /// Atomic updates.
    Atomics,
    /// A per-thread temporary, reduced after the loop.
    Temporary,
    /// A parallel reduction.
    ParallelReduction,
}

/// What `bound` promises about the coordinates a loop runs over. A loop here runs over a
/// range known when the kernel is compiled, so the exact kinds both say "exactly this many"
/// (taco's `max_exact` fixes the loop's end at the bound), and each promise is checked
/// against the sizes ([`ConcreteNotation::check_bounds`]) instead of trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BoundType {
    /// Exactly this many (the least the loop runs over, known exactly).
    MinExact,
    /// At least this many.
    MinConstraint,
    /// Exactly this many (the most the loop runs over, known exactly).
    MaxExact,
    /// At most this many.
    MaxConstraint,
}

macro_rules! names {
    ($t:ty { $($v:ident = $s:literal | $taco:literal),* $(,)? }) => {
        impl $t {
            /// The name used in schedules and CIN text.
            pub fn name(self) -> &'static str {
                match self { $(Self::$v => $s),* }
            }
            /// The value with that name, in nmsparse's spelling or taco's (`cpu_thread`,
            /// `CPUThread`).
            pub fn from_name(name: &str) -> Option<Self> {
                match name { $($s | $taco => Some(Self::$v),)* _ => None }
            }
            /// For messages about CIN text (not every enumeration is written there).
            #[allow(dead_code)]
            const NAMES: &'static str = concat!($($s, " "),*);
            /// As taco spells them, for messages about schedules written as taco writes them.
            #[allow(dead_code)]
            const TACO_NAMES: &'static str = concat!($($taco, " "),*);
        }
    };
}
names!(ParallelUnit {
    CpuThread = "cpu_thread" | "CPUThread",
    CpuVector = "cpu_vector" | "CPUVector",
    GpuBlock = "gpu_block" | "GPUBlock",
    GpuWarp = "gpu_warp" | "GPUWarp",
    GpuThread = "gpu_thread" | "GPUThread",
});
names!(OutputRace {
    NoRaces = "no_races" | "NoRaces",
    IgnoreRaces = "ignore_races" | "IgnoreRaces",
    Atomics = "atomics" | "Atomics",
    Temporary = "temporary" | "Temporary",
    ParallelReduction = "parallel_reduction" | "ParallelReduction",
});
names!(BoundType {
    MinExact = "min_exact" | "MinExact",
    MinConstraint = "min_constraint" | "MinConstraint",
    MaxExact = "max_exact" | "MaxExact",
    MaxConstraint = "max_constraint" | "MaxConstraint",
});

/// How taco's code merges the iterators of a loop (`mergeby`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MergeStrategy {
    /// Advance every iterator by one (what the lowering here does).
    TwoFinger,
    /// Skip ahead by galloping search.
    Gallop,
}

/// How taco assembles a result (`assemble`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AssembleStrategy {
    /// Appended in order.
    Append,
    /// Inserted in any order.
    Insert,
}

names!(MergeStrategy { TwoFinger = "two_finger" | "TwoFinger", Gallop = "gallop" | "Gallop" });
names!(AssembleStrategy { Append = "append" | "Append", Insert = "insert" | "Insert" });

/// Marks a schedule puts on a loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LoopAttrs {
    /// `parallelize(unit, race)`.
    pub parallel: Option<(ParallelUnit, OutputRace)>,
    /// `unroll(factor)`.
    pub unroll: Option<u32>,
    /// `bound(value, kind)`.
    pub bound: Option<(u64, BoundType)>,
}

/// Written after a loop's body: `, parallelize(cpu_thread, no_races), unroll(4)`.
impl fmt::Display for LoopAttrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((unit, race)) = self.parallel {
            write!(f, ", parallelize({}, {})", unit.name(), race.name())?;
        }
        if let Some(u) = self.unroll {
            write!(f, ", unroll({u})")?;
        }
        if let Some((v, kind)) = self.bound {
            write!(f, ", bound({v}, {})", kind.name())?;
        }
        Ok(())
    }
}

impl LoopAttrs {
    /// Parses one mark after a `forall` body (the `,` already consumed).
    pub(crate) fn parse_one(&mut self, p: &mut Parser<'_>) -> Result<(), ParseError> {
        let (_, name) = p.name("a loop mark: parallelize(...), unroll(...) or bound(...)")?;
        if !["parallelize", "unroll", "bound"].contains(&name.as_str()) {
            return Err(p.error_prev("unknown loop mark: expected parallelize, unroll or bound"));
        }
        p.expect(Tok::LParen, &format!("`(` after `{name}`"))?;
        match name.as_str() {
            "parallelize" => {
                let unit = named(p, ParallelUnit::from_name, ParallelUnit::NAMES)?;
                p.expect(Tok::Comma, "`,` after the parallel unit")?;
                let race = named(p, OutputRace::from_name, OutputRace::NAMES)?;
                self.parallel = Some((unit, race));
            }
            "unroll" => self.unroll = Some(int(p)? as u32),
            "bound" => {
                let v = int(p)?;
                p.expect(Tok::Comma, "`,` after the bound")?;
                self.bound = Some((v, named(p, BoundType::from_name, BoundType::NAMES)?));
            }
            _ => unreachable!("checked above"),
        }
        p.expect(Tok::RParen, &format!("`)` closing `{name}(`"))
    }
}

/// `bucket`, `hash`, `hash(L)`, `coord`, `map` or `vector`.
fn policy(p: &mut Parser<'_>) -> Result<WorkspacePolicy, ParseError> {
    let (_, n) = p.name("a workspace policy: bucket, hash, coord, map or vector")?;
    Ok(match n.as_str() {
        "bucket" => WorkspacePolicy::Bucket,
        "hash" if p.eat(&Tok::LParen) => {
            let l = int(p)? as usize;
            p.expect(Tok::RParen, "`)` closing `hash(`")?;
            WorkspacePolicy::Hash(Some(l))
        }
        "hash" => WorkspacePolicy::Hash(None),
        "coord" => WorkspacePolicy::Coord,
        "map" => WorkspacePolicy::Map,
        "vector" => WorkspacePolicy::Vector,
        _ => return Err(p.error_prev("expected a workspace policy: bucket, hash, coord, map or vector")),
    })
}

fn named<T>(p: &mut Parser<'_>, from: fn(&str) -> Option<T>, names: &str) -> Result<T, ParseError> {
    let (_, n) = p.name(&format!("one of: {}", names.trim()))?;
    from(&n).ok_or_else(|| p.error_prev(&format!("expected one of: {}", names.trim())))
}

fn int(p: &mut Parser<'_>) -> Result<u64, ParseError> {
    match p.next_kind() {
        Some(Tok::Int(v)) if v >= 0 && v <= u32::MAX as i64 => Ok(v as u64),
        // (An integer beyond i64 lexes as a float.)
        Some(Tok::Int(v)) if v > 0 => Err(p.error_prev(&format!("too large: at most {}", u32::MAX))),
        Some(Tok::Float(v)) if v > 0.0 && v.fract() == 0.0 => {
            Err(p.error_prev(&format!("too large: at most {}", u32::MAX)))
        }
        _ => Err(p.error_prev("expected a non-negative integer")),
    }
}

/// Where a variable made by the schedule comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Derivation {
    /// `split(parent, outer, inner, factor)`: `parent = outer·factor + inner`.
    Split {
        /// The split variable.
        parent: IndexVarId,
        /// Whether this is the outer (block) variable.
        outer: bool,
        /// The split factor.
        factor: u64,
    },
    /// `fuse(outer, inner, f)`: `f` runs over every (outer, inner) pair.
    Fuse {
        /// The outer fused variable.
        outer: IndexVarId,
        /// The inner fused variable.
        inner: IndexVarId,
    },
    /// `pos(parent, p, T)`: `p` runs over the positions of `T`'s level that `parent` indexes.
    Pos {
        /// The coordinate variable.
        parent: IndexVarId,
        /// The tensor whose positions are iterated.
        tensor: TensorId,
    },
    /// `bound(parent, b, value, kind)`.
    Bound {
        /// The bounded variable.
        parent: IndexVarId,
        /// The bound.
        value: u64,
        /// What the bound promises.
        kind: BoundType,
    },
}

/// One scheduling command, its arguments as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `reorder(i, j, ...)`: the given directly nested loops, in this order.
    Reorder(Vec<String>),
    /// `split(i, i0, i1, factor)`.
    Split(String, String, String, u64),
    /// `fuse(i, j, f)`.
    Fuse(String, String, String),
    /// `pos(i, ip, T)`.
    Pos(String, String, String),
    /// `parallelize(i, unit, race)`.
    Parallelize(String, ParallelUnit, OutputRace),
    /// `unroll(i, factor)`.
    Unroll(String, u64),
    /// `bound(i, ib, value, kind)`.
    Bound(String, String, u64, BoundType),
    /// `precompute(expr, i, iw [, w [, policy]])`: a dense temporary `w` (taco's default name
    /// `workspace`), or a sparse workspace with a policy; `i` and `iw` may be taco's lists
    /// (`{i}`), of one variable here, and `iw` may be `i` itself. The expression is kept as
    /// its canonical text.
    Precompute(String, Vec<String>, Vec<String>, Option<String>, Option<WorkspacePolicy>),
    /// `divide(i, i0, i1, parts)`: `i` in `parts` blocks (a split by the extent over `parts`,
    /// rounded up).
    Divide(String, String, String, u64),
    /// `parallelize(i, NotParallel, ...)`: the loop runs on one thread.
    NotParallel(String),
    /// `mergeby(i, strategy)`.
    MergeBy(String, MergeStrategy),
    /// `assemble(tensor, strategy [, separately_schedulable])`.
    Assemble(String, AssembleStrategy),
}

impl Command {
    /// What a user should hear about the command: taco's commands that only tune the code
    /// taco generates (how it merges, assembles, unrolls, vectorizes) are accepted and change
    /// nothing here, and say so.
    pub fn note(&self) -> Option<String> {
        match self {
            Command::Unroll(i, factor) => Some(format!(
                "unroll({i}, {factor}): the loop over `{i}` is not unrolled by hand here; the C compiler unrolls as it sees fit (the result is the same)"
            )),
            Command::Parallelize(i, ParallelUnit::CpuVector, _) => Some(format!(
                "parallelize({i}, CPUVector, ...): vectorizing the loop over `{i}` is left to the C compiler here (the result is the same)"
            )),
            Command::Bound(i, _, value, _) => Some(format!(
                "bound({i}, ..., {value}, ...): the promise is checked against the sizes; loop extents are constants in the generated code already, so it changes nothing else"
            )),
            Command::MergeBy(i, MergeStrategy::Gallop) => Some(format!(
                "mergeby({i}, Gallop): the loop over `{i}` merges its iterators one entry at a time here (the results are the same)"
            )),
            Command::Assemble(t, strategy) => Some(format!(
                "assemble({t}, {}): `{t}` is assembled as its loops allow here (appended in order, a row workspace or a sparse workspace); the result is the same",
                match strategy {
                    AssembleStrategy::Append => "Append",
                    AssembleStrategy::Insert => "Insert",
                }
            )),
            _ => None,
        }
    }
}

/// Parses a schedule: commands separated by `;` (the `-s=` option of the command line).
pub fn parse_schedule(text: &str) -> Result<Vec<Command>, ParseError> {
    let mut p = Parser::new(text)?;
    let mut out = Vec::new();
    while !p.at_end() {
        let (_, name) = p.name("a scheduling command")?;
        const COMMANDS: [&str; 11] = [
            "reorder",
            "split",
            "divide",
            "fuse",
            "pos",
            "parallelize",
            "unroll",
            "bound",
            "precompute",
            "mergeby",
            "assemble",
        ];
        if !COMMANDS.contains(&name.as_str()) {
            return Err(p.error_prev(
                "unknown scheduling command: expected reorder, split, divide, fuse, pos, parallelize, unroll, bound, \
                 precompute, mergeby or assemble",
            ));
        }
        p.expect(Tok::LParen, &format!("`(` after `{name}`"))?;
        let var = |p: &mut Parser<'_>| p.name("an index variable").map(|(_, n)| n);
        let comma = |p: &mut Parser<'_>| p.expect(Tok::Comma, "`,` between arguments");
        let cmd = match name.as_str() {
            "reorder" => {
                let mut vars = vec![var(&mut p)?];
                while p.eat(&Tok::Comma) {
                    vars.push(var(&mut p)?);
                }
                Command::Reorder(vars)
            }
            "split" | "divide" => {
                let i = var(&mut p)?;
                comma(&mut p)?;
                let i0 = var(&mut p)?;
                comma(&mut p)?;
                let i1 = var(&mut p)?;
                comma(&mut p)?;
                let n = int(&mut p)?;
                if name == "split" { Command::Split(i, i0, i1, n) } else { Command::Divide(i, i0, i1, n) }
            }
            "mergeby" => {
                let i = var(&mut p)?;
                comma(&mut p)?;
                Command::MergeBy(i, named(&mut p, MergeStrategy::from_name, MergeStrategy::TACO_NAMES)?)
            }
            "assemble" => {
                let (_, t) = p.name("the result tensor")?;
                comma(&mut p)?;
                let strategy = named(&mut p, AssembleStrategy::from_name, AssembleStrategy::TACO_NAMES)?;
                if p.eat(&Tok::Comma) {
                    let (_, b) = p.name("true or false")?;
                    if b != "true" && b != "false" {
                        return Err(p.error_prev("expected true or false"));
                    }
                }
                Command::Assemble(t, strategy)
            }
            "fuse" | "pos" => {
                let a = var(&mut p)?;
                comma(&mut p)?;
                let b = var(&mut p)?;
                comma(&mut p)?;
                let c = p
                    .name(if name == "pos" { "the tensor whose positions to iterate" } else { "an index variable" })?
                    .1;
                if name == "pos" { Command::Pos(a, b, c) } else { Command::Fuse(a, b, c) }
            }
            "parallelize" => {
                let i = var(&mut p)?;
                comma(&mut p)?;
                let sequential = matches!(p.peek_name().as_deref(), Some("NotParallel" | "not_parallel"));
                if sequential {
                    p.name("NotParallel")?;
                }
                let units = format!("NotParallel {}", ParallelUnit::TACO_NAMES);
                let unit = if sequential { None } else { Some(named(&mut p, ParallelUnit::from_name, &units)?) };
                comma(&mut p)?;
                let race = named(&mut p, OutputRace::from_name, OutputRace::TACO_NAMES)?;
                match unit {
                    Some(unit) => Command::Parallelize(i, unit, race),
                    None => Command::NotParallel(i),
                }
            }
            "unroll" => {
                let i = var(&mut p)?;
                comma(&mut p)?;
                Command::Unroll(i, int(&mut p)?)
            }
            "bound" => {
                let i = var(&mut p)?;
                comma(&mut p)?;
                // `bound(i, b, kind)` bounds `i` itself, as `bound(i, i, b, kind)` does.
                let ib = if matches!(p.peek(), Some(Tok::Int(_))) {
                    i.clone()
                } else {
                    let ib = var(&mut p)?;
                    comma(&mut p)?;
                    ib
                };
                let v = int(&mut p)?;
                comma(&mut p)?;
                Command::Bound(i, ib, v, named(&mut p, BoundType::from_name, BoundType::TACO_NAMES)?)
            }
            "precompute" => {
                let e = p.expr()?;
                let mut text = String::new();
                let scope = crate::notation::Scope { tensors: &p.tensors, vars: &p.vars, exprs: &p.exprs };
                scope.write_expr(&mut text, e).expect("writing to a String");
                comma(&mut p)?;
                let i = var_list(&mut p)?;
                comma(&mut p)?;
                let iw = var_list(&mut p)?;
                let w = if p.eat(&Tok::Comma) { Some(p.name("the workspace's name")?.1) } else { None };
                let policy = if w.is_some() && p.eat(&Tok::Comma) { Some(policy(&mut p)?) } else { None };
                Command::Precompute(text, i, iw, w, policy)
            }
            _ => unreachable!("checked against COMMANDS"),
        };
        p.expect(Tok::RParen, &format!("`)` closing `{name}(`"))?;
        out.push(cmd);
        if p.eat(&Tok::RParen) {
            return Err(p.error_prev("an unmatched `)`: more right parentheses than left"));
        }
        if !p.at_end() && !p.eat(&Tok::Semicolon) {
            p.expect(Tok::Comma, "`,` or `;` between commands")?;
        }
    }
    Ok(out)
}

/// An index variable, or taco's list of them in braces (`{i}`, `{i, j}`).
fn var_list(p: &mut Parser<'_>) -> Result<Vec<String>, ParseError> {
    if !p.eat(&Tok::LBrace) {
        return Ok(vec![p.name("an index variable")?.1]);
    }
    let mut vars = vec![p.name("an index variable")?.1];
    while p.eat(&Tok::Comma) {
        vars.push(p.name("an index variable")?.1);
    }
    p.expect(Tok::RBrace, "`}` closing the list of variables")?;
    Ok(vars)
}

/// A command that cannot apply, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// No loop over the named variable.
    #[error("{command}: there is no loop over `{var}` in {cin}")]
    NoSuchLoop {
        /// The command.
        command: &'static str,
        /// The variable.
        var: String,
        /// The statement, printed.
        cin: String,
    },
    /// A new variable name that is already taken.
    #[error("{command}: the name `{name}` is already used; pick a new name for the derived variable")]
    NameInUse {
        /// The command.
        command: &'static str,
        /// The name.
        name: String,
    },
    /// A loop named twice in one command.
    #[error("{command}: `{name}` is named twice")]
    NamedTwice {
        /// The command.
        command: &'static str,
        /// The name.
        name: String,
    },
    /// Loops that must be directly nested but are not.
    #[error("{command}: the loops over {vars} are not directly nested ({why})")]
    NotNested {
        /// The command.
        command: &'static str,
        /// The loops, named.
        vars: String,
        /// What stands between them.
        why: String,
    },
    /// A factor that must be at least 1.
    #[error("{command}: the factor must be at least 1")]
    ZeroFactor {
        /// The command.
        command: &'static str,
    },
    /// A command that needs a loop's extent where the sizes are not given (or the loop runs
    /// over positions).
    #[error(
        "{command}: the extent of `{var}` is not known here (the schedule is applied without sizes, or `{var}` runs over positions)"
    )]
    UnknownExtent {
        /// The command.
        command: &'static str,
        /// The variable.
        var: String,
    },
    /// `assemble` of a tensor the statement does not write.
    #[error("assemble: `{tensor}` is not a result of the statement (it writes `{results}`)")]
    NotAResult {
        /// The tensor named.
        tensor: String,
        /// The results, joined.
        results: String,
    },
    /// `parallelize` on a GPU unit: the kernels generated for expressions are C for the CPU.
    #[error(
        "parallelize({var}, {unit}, ...): GPU units need CUDA code, which is generated only for the N:M product; expressions compile to C for the CPU (use CPUThread or CPUVector)"
    )]
    GpuUnit {
        /// The variable.
        var: String,
        /// The unit, named.
        unit: &'static str,
    },
    /// `pos` on a tensor the loop body does not read with the variable as a plain subscript.
    #[error(
        "pos: no access to `{tensor}` read below the loop over `{var}` has `{var}` (or what it was fused from) as plain subscripts, so there are no positions to iterate (pos iterates over the stored entries of a tensor the loop reads)"
    )]
    NoPositions {
        /// The variable.
        var: String,
        /// The tensor.
        tensor: String,
    },
    /// `parallelize` with `no_races` on a loop whose iterations write the same elements.
    #[error(
        "parallelize: iterations of `{var}` write the same elements of {tensor} ({why}), so no_races does not hold"
    )]
    Races {
        /// The variable.
        var: String,
        /// The written tensor, quoted and described.
        tensor: String,
        /// The variable, or the one it was derived from, that does not index the tensor.
        why: String,
    },
    /// `precompute` of an expression the statement does not contain.
    #[error("precompute: `{expr}` is not a subexpression of {cin}")]
    NoSuchExpr {
        /// The expression.
        expr: String,
        /// The statement.
        cin: String,
    },
    /// `precompute` where the temporary would need more than the precomputed variable.
    #[error("precompute: {why}")]
    CannotPrecompute {
        /// Why.
        why: String,
    },
    /// A `bound` whose promise the sizes break.
    #[error("bound({var}, {bound}, {value}, {kind}): the extent of `{var}` is {extent}, so the bound does not hold")]
    BoundBroken {
        /// The bounded variable.
        var: String,
        /// The variable `bound` made.
        bound: String,
        /// The bound.
        value: u64,
        /// The bound's kind, as written.
        kind: &'static str,
        /// How many coordinates the variable runs over.
        extent: u64,
    },
    /// `parallelize` inside or around another parallel loop.
    #[error("parallelize: `{var}` is {relation} the parallel loop over `{other}`; nested parallelism is not supported")]
    NestedParallel {
        /// The variable.
        var: String,
        /// Inside / around.
        relation: &'static str,
        /// The other loop.
        other: String,
    },
}

impl ConcreteNotation {
    /// Checks what each `bound` promises against `sizes` (indexed by variable, as
    /// [`crate::notation::Types::sizes`]): a schedule is applied before sizes need be known,
    /// and a broken promise must be an error, not a kernel that reads past an array. Bounds
    /// on `pos` variables are not checked (their count is the stored entries'); the loops
    /// run over the real coordinates either way.
    pub fn check_bounds(&self, sizes: &[usize]) -> Result<(), ScheduleError> {
        for (_, stmt) in self.stmts.iter() {
            let Stmt::Forall { var: b, attrs: LoopAttrs { bound: Some((value, kind)), .. }, .. } = *stmt else {
                continue;
            };
            // `bound(i, ib, ...)` renamed the loop; `bound(i, ...)` kept it.
            let parent = match self.derivations.get(&b) {
                Some(&Derivation::Bound { parent, .. }) => parent,
                _ => b,
            };
            let Some(extent) = self.extent(parent, sizes) else { continue };
            let holds = match kind {
                BoundType::MinExact | BoundType::MaxExact => extent == value,
                BoundType::MinConstraint => extent >= value,
                BoundType::MaxConstraint => extent <= value,
            };
            if !holds {
                return Err(ScheduleError::BoundBroken {
                    var: self.vars[parent].name.clone(),
                    bound: self.vars[b].name.clone(),
                    value,
                    kind: kind.name(),
                    extent,
                });
            }
        }
        Ok(())
    }

    /// The statement with every loop over a `bound` variable back over the variable it bounds
    /// (and what was derived from it, from that variable): once [`Self::check_bounds`] has
    /// held, a bound says nothing the sizes do not, so this is what a back end runs.
    pub fn without_bounds(&self) -> ConcreteNotation {
        let mut c = self.clone();
        let bounded = |mut v: IndexVarId| {
            while let Some(Derivation::Bound { parent, .. }) = self.derivations.get(&v) {
                v = *parent;
            }
            v
        };
        let ids: Vec<StmtId> = c.stmts.iter().map(|(id, _)| id).collect();
        for id in ids {
            if let Stmt::Forall { var, attrs, .. } = &mut c.stmts[id] {
                *var = bounded(*var);
                attrs.bound = None;
            }
        }
        c.derivations.retain(|_, d| !matches!(d, Derivation::Bound { .. }));
        for d in c.derivations.values_mut() {
            match d {
                Derivation::Split { parent, .. } | Derivation::Pos { parent, .. } => *parent = bounded(*parent),
                Derivation::Fuse { outer, inner } => (*outer, *inner) = (bounded(*outer), bounded(*inner)),
                Derivation::Bound { .. } => unreachable!("removed above"),
            }
        }
        c
    }

    /// How many coordinates `v` runs over, where the sizes say (not for `pos` variables).
    fn extent(&self, v: IndexVarId, sizes: &[usize]) -> Option<u64> {
        match self.derivations.get(&v) {
            None => sizes.get(v.index()).map(|&n| n as u64),
            Some(&Derivation::Split { parent, outer: true, factor }) => {
                Some(self.extent(parent, sizes)?.div_ceil(factor))
            }
            Some(&Derivation::Split { parent, outer: false, factor }) => Some(factor.min(self.extent(parent, sizes)?)),
            Some(&Derivation::Fuse { outer, inner }) => {
                self.extent(outer, sizes)?.checked_mul(self.extent(inner, sizes)?)
            }
            Some(Derivation::Pos { .. }) => None,
            Some(&Derivation::Bound { parent, .. }) => self.extent(parent, sizes),
        }
    }

    /// Applies a schedule's commands in order (`divide` needs sizes: see
    /// [`Self::schedule_sized`]).
    pub fn schedule(&self, commands: &[Command]) -> Result<ConcreteNotation, ScheduleError> {
        self.schedule_sized(commands, &[])
    }

    /// Applies a schedule's commands in order, with the variables' sizes (indexed by variable,
    /// as [`crate::notation::Types::sizes`]) for `divide`.
    pub fn schedule_sized(&self, commands: &[Command], sizes: &[usize]) -> Result<ConcreteNotation, ScheduleError> {
        commands.iter().try_fold(self.clone(), |cin, c| cin.apply_sized(c, sizes))
    }

    /// Applies one command, or explains why it is illegal.
    pub fn apply(&self, command: &Command) -> Result<ConcreteNotation, ScheduleError> {
        self.apply_sized(command, &[])
    }

    /// Applies one command with the variables' sizes, or explains why it is illegal.
    pub fn apply_sized(&self, command: &Command, sizes: &[usize]) -> Result<ConcreteNotation, ScheduleError> {
        let mut c = self.clone();
        match command {
            Command::Divide(i, i0, i1, parts) => {
                if *parts == 0 {
                    return Err(ScheduleError::ZeroFactor { command: "divide" });
                }
                let (_, var) = c.loop_named("divide", i)?;
                let Some(extent) = c.extent(var, sizes) else {
                    return Err(ScheduleError::UnknownExtent { command: "divide", var: i.clone() });
                };
                let factor = extent.div_ceil(*parts).max(1);
                return c.apply_sized(&Command::Split(i.clone(), i0.clone(), i1.clone(), factor), sizes);
            }
            Command::NotParallel(i) => {
                let (s, _) = c.loop_named("parallelize", i)?;
                if let Stmt::Forall { attrs, .. } = &mut c.stmts[s] {
                    attrs.parallel = None;
                }
            }
            Command::MergeBy(i, _) => {
                c.loop_named("mergeby", i)?;
            }
            Command::Assemble(t, _) => {
                // The statement's results: what an assignment writes, temporaries aside.
                let results: Vec<String> = c
                    .assignments(c.root)
                    .iter()
                    .filter_map(|&a| match &c.stmts[a] {
                        Stmt::Assign { lhs, .. } if !c.temporaries.contains(&lhs.tensor) => {
                            Some(c.tensors[lhs.tensor].name.clone())
                        }
                        _ => None,
                    })
                    .collect();
                if !results.contains(t) {
                    return Err(ScheduleError::NotAResult { tensor: t.clone(), results: results.join("`, `") });
                }
            }
            Command::Reorder(vars) => c.reorder(vars)?,
            Command::Split(i, i0, i1, factor) => {
                if *factor == 0 {
                    return Err(ScheduleError::ZeroFactor { command: "split" });
                }
                let (s, var) = c.loop_named("split", i)?;
                let outer = c.fresh_var("split", i0)?;
                let inner = c.fresh_var("split", i1)?;
                let Stmt::Forall { body, attrs, .. } = c.stmts[s].clone() else { unreachable!() };
                let inner_loop = c.stmts.push(Stmt::Forall { var: inner, body, attrs: LoopAttrs::default() });
                c.stmts[s] = Stmt::Forall { var: outer, body: inner_loop, attrs };
                c.derivations.insert(outer, Derivation::Split { parent: var, outer: true, factor: *factor });
                c.derivations.insert(inner, Derivation::Split { parent: var, outer: false, factor: *factor });
            }
            Command::Fuse(i, j, f) => {
                let (s, outer) = c.loop_named("fuse", i)?;
                let Stmt::Forall { body, attrs, .. } = c.stmts[s].clone() else { unreachable!() };
                let inner = c.var_named("fuse", j)?;
                let Stmt::Forall { var, body: inner_body, .. } = c.stmts[body].clone() else {
                    return Err(c.not_nested("fuse", &[i, j], body));
                };
                if var != inner {
                    return Err(c.not_nested("fuse", &[i, j], body));
                }
                let fused = c.fresh_var("fuse", f)?;
                c.stmts[s] = Stmt::Forall { var: fused, body: inner_body, attrs };
                c.derivations.insert(fused, Derivation::Fuse { outer, inner });
            }
            Command::Pos(i, ip, tensor) => {
                let (s, var) = c.loop_named("pos", i)?;
                let Stmt::Forall { body, .. } = c.stmts[s] else { unreachable!() };
                let t = c.tensors.iter().find(|(_, t)| &t.name == tensor).map(|(id, _)| id);
                let read = t.is_some_and(|t| c.reads_with(body, t, var));
                let Some(t) = t.filter(|_| read) else {
                    return Err(ScheduleError::NoPositions { var: i.clone(), tensor: tensor.clone() });
                };
                let p = c.fresh_var("pos", ip)?;
                c.rename_loop(s, p);
                c.derivations.insert(p, Derivation::Pos { parent: var, tensor: t });
            }
            Command::Bound(i, ib, value, kind) => {
                let (s, var) = c.loop_named("bound", i)?;
                // The same name for the bounded variable keeps the loop's variable.
                if ib != i {
                    let b = c.fresh_var("bound", ib)?;
                    c.rename_loop(s, b);
                    c.derivations.insert(b, Derivation::Bound { parent: var, value: *value, kind: *kind });
                }
                if let Stmt::Forall { attrs, .. } = &mut c.stmts[s] {
                    attrs.bound = Some((*value, *kind));
                }
            }
            Command::Unroll(i, factor) => {
                if *factor == 0 {
                    return Err(ScheduleError::ZeroFactor { command: "unroll" });
                }
                let (s, _) = c.loop_named("unroll", i)?;
                if let Stmt::Forall { attrs, .. } = &mut c.stmts[s] {
                    attrs.unroll = Some(*factor as u32);
                }
            }
            Command::Precompute(expr, i, iw, w, policy) => {
                let ([i], [iw]) = (i.as_slice(), iw.as_slice()) else {
                    return Err(ScheduleError::CannotPrecompute {
                        why: format!(
                            "over several variables ({{{}}}): a workspace here has one dimension; precompute over one variable",
                            i.join(",")
                        ),
                    });
                };
                c.precompute(expr, i, iw, w.as_deref(), *policy)?
            }
            Command::Parallelize(i, unit, race) => {
                if matches!(unit, ParallelUnit::GpuBlock | ParallelUnit::GpuWarp | ParallelUnit::GpuThread) {
                    return Err(ScheduleError::GpuUnit { var: i.clone(), unit: unit.name() });
                }
                let (s, var) = c.loop_named("parallelize", i)?;
                c.check_parallel(s, var, *race)?;
                if let Stmt::Forall { attrs, .. } = &mut c.stmts[s] {
                    attrs.parallel = Some((*unit, *race));
                }
            }
        }
        Ok(c)
    }

    /// The unscheduled variables a (possibly derived) variable stands for, outermost first.
    pub fn origins(&self, v: IndexVarId) -> Vec<IndexVarId> {
        match self.derivations.get(&v) {
            None => vec![v],
            Some(
                Derivation::Split { parent, .. } | Derivation::Pos { parent, .. } | Derivation::Bound { parent, .. },
            ) => self.origins(*parent),
            Some(Derivation::Fuse { outer, inner }) => [self.origins(*outer), self.origins(*inner)].concat(),
        }
    }

    /// The loop order with every derived variable traced back to the variables it came from:
    /// the order the statement had before split, fuse, pos and bound.
    pub fn unscheduled_loop_order(&self) -> Vec<IndexVarId> {
        let mut out = Vec::new();
        for v in self.loop_order().into_iter().flat_map(|v| self.origins(v)) {
            if !out.contains(&v) {
                out.push(v);
            }
        }
        out
    }

    /// The derivations as text, one line per derived variable: `i0 = split(i, 32).outer`.
    pub fn provenance(&self) -> String {
        let name = |v: &IndexVarId| self.vars[*v].name.as_str();
        self.derivations
            .iter()
            .map(|(v, d)| {
                let what = match d {
                    Derivation::Split { parent, outer, factor } => {
                        format!("split({}, {factor}).{}", name(parent), if *outer { "outer" } else { "inner" })
                    }
                    Derivation::Fuse { outer, inner } => format!("fuse({}, {})", name(outer), name(inner)),
                    Derivation::Pos { parent, tensor } => {
                        format!("pos({}, {})", name(parent), self.tensors[*tensor].name)
                    }
                    Derivation::Bound { parent, value, kind } => {
                        format!("bound({}, {value}, {})", name(parent), kind.name())
                    }
                };
                format!("{} = {what}\n", name(v))
            })
            .collect()
    }

    fn var_named(&self, command: &'static str, name: &str) -> Result<IndexVarId, ScheduleError> {
        self.vars.iter().find(|(_, v)| v.name == name).map(|(id, _)| id).ok_or_else(|| ScheduleError::NoSuchLoop {
            command,
            var: name.to_string(),
            cin: self.to_string(),
        })
    }

    /// The loop over `name`.
    pub(crate) fn loop_named(&self, command: &'static str, name: &str) -> Result<(StmtId, IndexVarId), ScheduleError> {
        let var = self.var_named(command, name)?;
        self.stmts
            .iter()
            .find(|(id, s)| matches!(s, Stmt::Forall { var: v, .. } if *v == var) && self.reachable(*id))
            .map(|(id, _)| (id, var))
            .ok_or_else(|| ScheduleError::NoSuchLoop { command, var: name.to_string(), cin: self.to_string() })
    }

    fn reachable(&self, target: StmtId) -> bool {
        let mut stack = vec![self.root];
        while let Some(s) = stack.pop() {
            if s == target {
                return true;
            }
            stack.extend(self.child_stmts(s));
        }
        false
    }

    fn child_stmts(&self, s: StmtId) -> Vec<StmtId> {
        match &self.stmts[s] {
            Stmt::Assign { .. } => vec![],
            Stmt::Forall { body, .. } => vec![*body],
            Stmt::Where { consumer, producer } => vec![*consumer, *producer],
            Stmt::Sequence { first, second } => vec![*first, *second],
        }
    }

    pub(crate) fn fresh_var(&mut self, command: &'static str, name: &str) -> Result<IndexVarId, ScheduleError> {
        if self.vars.iter().any(|(_, v)| v.name == name) || self.tensors.iter().any(|(_, t)| t.name == name) {
            return Err(ScheduleError::NameInUse { command, name: name.to_string() });
        }
        Ok(self.vars.push(IndexVar { name: name.to_string() }))
    }

    fn rename_loop(&mut self, s: StmtId, to: IndexVarId) {
        if let Stmt::Forall { var, .. } = &mut self.stmts[s] {
            *var = to;
        }
    }

    fn not_nested(&self, command: &'static str, vars: &[&String], at: StmtId) -> ScheduleError {
        let names: Vec<String> = vars.iter().map(|v| format!("`{v}`")).collect();
        let why = match &self.stmts[at] {
            Stmt::Forall { var, .. } => format!("the loop over `{}` stands between them", self.vars[*var].name),
            Stmt::Where { .. } => "a `where` stands between them".to_string(),
            Stmt::Sequence { .. } => "a `sequence` stands between them".to_string(),
            Stmt::Assign { .. } => "the inner one is not inside the outer one".to_string(),
        };
        ScheduleError::NotNested { command, vars: names.join(" and "), why }
    }

    fn reorder(&mut self, names: &[String]) -> Result<(), ScheduleError> {
        let vars: Vec<IndexVarId> = names.iter().map(|n| self.var_named("reorder", n)).collect::<Result<_, _>>()?;
        if let Some(dup) = vars.iter().position(|v| vars.iter().filter(|w| *w == v).count() > 1) {
            return Err(ScheduleError::NamedTwice { command: "reorder", name: names[dup].clone() });
        }
        // The outermost loop over any of them starts the nest.
        let (start, _) = self
            .stmts
            .iter()
            .filter(|(id, s)| matches!(s, Stmt::Forall { var, .. } if vars.contains(var)) && self.reachable(*id))
            .map(|(id, _)| (id, self.depth(id)))
            .min_by_key(|&(_, d)| d)
            .ok_or_else(|| ScheduleError::NoSuchLoop {
                command: "reorder",
                var: names[0].clone(),
                cin: self.to_string(),
            })?;
        let mut chain = vec![start];
        while chain.len() < vars.len() {
            let Stmt::Forall { body, .. } = self.stmts[*chain.last().expect("non-empty")] else { unreachable!() };
            match &self.stmts[body] {
                Stmt::Forall { var, .. } if vars.contains(var) => chain.push(body),
                _ => {
                    let refs: Vec<&String> = names.iter().collect();
                    return Err(self.not_nested("reorder", &refs, body));
                }
            }
        }
        let loops: Vec<(IndexVarId, LoopAttrs)> = chain
            .iter()
            .map(|&s| match self.stmts[s] {
                Stmt::Forall { var, attrs, .. } => (var, attrs),
                _ => unreachable!(),
            })
            .collect();
        for (&s, v) in chain.iter().zip(&vars) {
            let attrs = loops.iter().find(|(w, _)| w == v).expect("in the chain").1;
            if let Stmt::Forall { var, attrs: a, .. } = &mut self.stmts[s] {
                *var = *v;
                *a = attrs;
            }
        }
        Ok(())
    }

    fn depth(&self, target: StmtId) -> usize {
        let mut stack = vec![(self.root, 0)];
        while let Some((s, d)) = stack.pop() {
            if s == target {
                return d;
            }
            stack.extend(self.child_stmts(s).into_iter().map(|c| (c, d + 1)));
        }
        usize::MAX
    }

    /// Whether a statement below `s` reads `tensor` with every variable `var` stands for (one,
    /// or several for a fused variable) as plain subscripts.
    fn reads_with(&self, s: StmtId, tensor: TensorId, var: IndexVarId) -> bool {
        let origins = self.origins(var);
        self.assignments(s).iter().any(|&a| {
            let Stmt::Assign { rhs, .. } = &self.stmts[a] else { return false };
            self.scope_accesses(*rhs).iter().any(|acc| {
                acc.tensor == tensor && origins.iter().all(|o| acc.subscripts.iter().any(|t| t.as_var() == Some(*o)))
            })
        })
    }

    fn scope_accesses(&self, e: crate::notation::ExprId) -> Vec<crate::notation::Access> {
        use crate::notation::Expr;
        let mut out = Vec::new();
        let mut stack = vec![e];
        while let Some(n) = stack.pop() {
            match &self.exprs[n] {
                Expr::Access(a) => out.push(a.clone()),
                Expr::Literal(_) => {}
                Expr::Neg(a) | Expr::Sum(_, a) => stack.push(*a),
                Expr::Binary(_, a, b) => stack.extend([*a, *b]),
            }
        }
        out
    }

    fn assignments(&self, s: StmtId) -> Vec<StmtId> {
        match &self.stmts[s] {
            Stmt::Assign { .. } => vec![s],
            _ => self.child_stmts(s).into_iter().flat_map(|c| self.assignments(c)).collect(),
        }
    }

    fn check_parallel(&self, s: StmtId, var: IndexVarId, race: OutputRace) -> Result<(), ScheduleError> {
        let name = self.vars[var].name.clone();
        let parallel_loops = |root: StmtId| -> Vec<IndexVarId> {
            let mut out = Vec::new();
            let mut stack = vec![root];
            while let Some(n) = stack.pop() {
                if let Stmt::Forall { var, attrs, .. } = &self.stmts[n]
                    && attrs.parallel.is_some()
                {
                    out.push(*var);
                }
                stack.extend(self.child_stmts(n));
            }
            out
        };
        if let Some(other) = parallel_loops(s).first() {
            return Err(ScheduleError::NestedParallel {
                var: name,
                relation: "around",
                other: self.vars[*other].name.clone(),
            });
        }
        for outer in parallel_loops(self.root) {
            let (outer_stmt, _) = self.loop_named("parallelize", &self.vars[outer].name)?;
            if self.subtree_contains(outer_stmt, s) {
                return Err(ScheduleError::NestedParallel {
                    var: name,
                    relation: "inside",
                    other: self.vars[outer].name.clone(),
                });
            }
        }
        if race == OutputRace::NoRaces {
            let origins = self.origins(var);
            for a in self.assignments(s) {
                let Stmt::Assign { lhs, op, .. } = &self.stmts[a] else { continue };
                // A temporary summed under a `where` inside the loop is each iteration's own;
                // one whose `where` is outside (the loop is one of its producer's) is shared.
                if self.temporaries.contains(&lhs.tensor) && *op == AssignOp::Accumulate && self.produced_inside(s, a) {
                    continue;
                }
                // Every variable the loop came from must index the result: a loop over the
                // positions of a fused `(i, j)` visits one `y(i)` from several iterations.
                let unindexed =
                    origins.iter().find(|o| !lhs.subscripts.iter().flat_map(|t| t.vars()).any(|v| v == **o));
                if let Some(&o) = unindexed {
                    let why = if o == var {
                        format!("`{name}` does not index it")
                    } else {
                        format!("`{name}` comes from `{}`, which does not index it", self.vars[o].name)
                    };
                    let tensor = &self.tensors[lhs.tensor].name;
                    // A temporary's name is the concrete form's (`t0`): say what it is.
                    let tensor = if self.temporaries.contains(&lhs.tensor) {
                        format!("the temporary `{tensor}` that -print-concrete shows")
                    } else {
                        format!("`{tensor}`")
                    };
                    return Err(ScheduleError::Races { var: name, tensor, why });
                }
            }
        }
        Ok(())
    }

    /// Whether the assignment `a` is in the producer of a `where` below `s`.
    fn produced_inside(&self, s: StmtId, a: StmtId) -> bool {
        let mut stack = self.child_stmts(s);
        while let Some(n) = stack.pop() {
            if let Stmt::Where { producer, .. } = &self.stmts[n]
                && self.subtree_contains(*producer, a)
            {
                return true;
            }
            stack.extend(self.child_stmts(n));
        }
        false
    }

    fn subtree_contains(&self, root: StmtId, target: StmtId) -> bool {
        root == target || self.child_stmts(root).into_iter().any(|c| self.subtree_contains(c, target))
    }
}
