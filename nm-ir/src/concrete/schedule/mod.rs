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

//!
//! Here: the commands and the marks they leave on loops; `parse` reads their text, `apply`
//! rewrites CIN by them.

use std::fmt;

use super::WorkspacePolicy;
use crate::notation::{IndexVarId, TensorId};

mod apply;
mod parse;

pub use apply::ScheduleError;
pub use parse::parse_schedule;

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
/// against the sizes ([`ConcreteNotation::check_bounds`](crate::concrete::ConcreteNotation::check_bounds)) instead of trusted.
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
