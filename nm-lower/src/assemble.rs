//! Separate assembly and compute kernels, as `taco` generates by default (`-c` fuses them).
//!
//! A kernel that assembles a sparse result computes its structure (`pos`, `crd`) and its
//! values in one pass. Split, the *assembly* kernel keeps the loops and the structure stores
//! and drops every value store (the result's values and the workspace's); the *compute*
//! kernel keeps the loops and the value stores and drops the structure stores — it walks the
//! same iteration in the same order, so its `n`-th value lands where assembly put the `n`-th
//! coordinate. Both take the fused kernel's parameters, so one argument list serves all three:
//! run assembly once, then compute as often as the values change.

use crate::ir::{ArrayId, Function, Role, Stmt};

/// The two halves of a kernel with a sparse result.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// Writes the result's `pos` and `crd` only.
    pub assemble: Function,
    /// Writes the result's values only, into the structure assembly wrote.
    pub compute: Function,
}

/// The assembly and compute halves of `f`, or `None` when its result is dense (nothing to
/// assemble) or collected in a sparse workspace (whose structure is only known once every
/// value has been computed and combined).
pub fn split(f: &Function) -> Option<Split> {
    if f.arrays.iter().any(|(_, d)| matches!(d.role, Role::Workspace { .. })) {
        return None;
    }
    let structure: Vec<ArrayId> = f
        .arrays
        .iter()
        .filter(|(_, d)| d.output && matches!(d.role, Role::Pos { .. } | Role::Crd { .. }))
        .map(|(id, _)| id)
        .collect();
    if structure.is_empty() {
        return None;
    }
    let values: Vec<ArrayId> = f
        .arrays
        .iter()
        .filter(|(_, d)| {
            d.output
                && (matches!(d.role, Role::Values { .. })
                    || (matches!(d.role, Role::Scratch | Role::Local { .. }) && d.elem.is_float()))
        })
        .map(|(id, _)| id)
        .collect();
    let half = |suffix: &str, drop: &[ArrayId]| Function {
        name: format!("{}_{suffix}", f.name),
        arrays: f.arrays.clone(),
        vars: f.vars.clone(),
        body: without_stores(&f.body, drop),
        atomic: f.atomic,
        omp_schedule: f.omp_schedule,
    };
    // Assembly reads no operand values: their prefetches go too.
    let mut unread = values.clone();
    unread.extend(f.arrays.iter().filter(|(_, d)| !d.output && d.elem.is_float()).map(|(id, _)| id));
    Some(Split { assemble: half("assemble", &unread), compute: half("compute", &structure) })
}

/// `body` without the stores to, resizes and prefetches of `drop`.
fn without_stores(body: &[Stmt], drop: &[ArrayId]) -> Vec<Stmt> {
    body.iter()
        .filter(|s| {
            !matches!(s, Stmt::Store { array, .. } | Stmt::Resize { array, .. } | Stmt::Written { array, .. }
                | Stmt::Prefetch { array, .. } if drop.contains(array))
        })
        .map(|s| match s {
            Stmt::For { var, start, end, body, parallel } => Stmt::For {
                var: *var,
                start: start.clone(),
                end: end.clone(),
                body: without_stores(body, drop),
                parallel: *parallel,
            },
            Stmt::While { cond, body } => Stmt::While { cond: cond.clone(), body: without_stores(body, drop) },
            Stmt::If { cond, then, otherwise } => Stmt::If {
                cond: cond.clone(),
                then: without_stores(then, drop),
                otherwise: without_stores(otherwise, drop),
            },
            other => other.clone(),
        })
        .collect()
}

/// Whether `body` stores into `array`.
pub fn writes(body: &[Stmt], array: ArrayId) -> bool {
    crate::ir::any(body, |s| matches!(s, Stmt::Store { array: a, .. } if *a == array))
}
