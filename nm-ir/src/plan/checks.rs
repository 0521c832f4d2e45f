//! What no back end runs, refused before anything is planned: GPU loops, threads that add into
//! the same result elements anywhere but on the outermost loop, and dimensions read past a
//! variable's range other than where the loops' iterators stop at the range.

use super::PlanError;
use super::nest::collect_accesses;
use crate::concrete::{ConcreteNotation, Derivation, OutputRace, ParallelUnit, Stmt as CinStmt};
use crate::id::Id;
use crate::notation::{Access, IndexVarId, Types};
use nm_format::Format;

/// Refuses what reads a dimension larger than its variable's range (where a compound
/// subscript narrowed it: see `IndexNotation::extents`) other than as the loops' iterators
/// stop at the range: a sparse result (its levels would be assembled for the whole dimension),
/// and `fuse` and `pos` over such a variable (they walk every entry of a level).
pub fn check_partial_dimensions(cin: &ConcreteNotation, types: &Types) -> Result<(), PlanError> {
    let mut accesses: Vec<(Access, bool)> = Vec::new();
    for (_, s) in cin.stmts.iter() {
        if let CinStmt::Assign { lhs, rhs, .. } = s {
            accesses.push((lhs.clone(), !cin.temporaries.contains(&lhs.tensor)));
            let mut found = Vec::new();
            collect_accesses(&cin.exprs, *rhs, &mut found);
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
                let why = if sparse_result {
                    "a sparse result must have the variables' ranges"
                } else {
                    "`fuse` and `pos` walk the whole dimension"
                };
                return Err(PlanError::Extent(format!(
                    "`{name}` ranges over {} values, fewer than dimension {d} of `{tensor}` has ({}): {why}",
                    types.sizes[v.index()],
                    ty.shape[d],
                )));
            }
        }
    }
    Ok(())
}

/// Refuses the `parallelize` commands the back ends cannot run as asked: GPU units, and
/// threads that add into the same elements anywhere but on the outermost loop (whose row
/// ranges are what runs on threads; an OpenMP loop inside would race on the sums in registers).
pub fn check_parallel(cin: &ConcreteNotation) -> Result<(), PlanError> {
    for (id, s) in cin.stmts.iter() {
        let CinStmt::Forall { var, attrs, .. } = s else { continue };
        let name = &cin.vars[*var].name;
        match attrs.parallel {
            Some((ParallelUnit::GpuBlock | ParallelUnit::GpuWarp | ParallelUnit::GpuThread, _)) => {
                return Err(PlanError::Schedule(format!(
                    "GPU loops (`parallelize({name}, gpu_...)`): the CPU back ends run this statement"
                )));
            }
            Some((
                ParallelUnit::CpuThread,
                race @ (OutputRace::Atomics | OutputRace::Temporary | OutputRace::ParallelReduction),
            )) if id != cin.root => {
                return Err(PlanError::Schedule(format!(
                    "`parallelize({name}, cpu_thread, {})` on a loop inside another: threads that add \
                     into the same result elements run the outermost loop's ranges (reorder `{name}` \
                     outermost, or no_races where iterations write disjoint elements)",
                    race.name()
                )));
            }
            _ => {}
        }
    }
    Ok(())
}
