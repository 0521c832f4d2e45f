//! Sums over a loop in interleaved partial sums.
//!
//! A reduction into a register (`acc = acc + A_vals[p] * x[A1_crd[p]]`, SpMV's row, an inner
//! product's) is one chain of dependent additions: each waits for the one before it, 3–4
//! cycles on current x86 cores, where the loads and the multiply of an entry take about one.
//! The C compiler may not reorder floating-point additions, so the pass does what BLAS-like
//! libraries do: the loop runs four entries per iteration into four partial sums, added
//! together after it. Measured by hand in C on the shared matrices (CSR SpMV, f64), it made
//! every one faster, by a quarter to almost half (BENCHMARKS.md, "CPU kernels against the
//! peers").
//!
//! The order of the additions changes, so a result can differ from the sequential sum in its
//! last bits; it is the same on every run, thread count and back end (the interpreter runs
//! the same loops).
//!
//! The pass takes `for p in start..end` (not parallel) whose body is declarations followed by
//! one `acc = acc + e` (or `e + acc`, or `acc - e`; either may sit in an `if 1`, a dense
//! locate) into a floating-point variable declared outside it, with nothing else reading or
//! writing `acc`. It becomes
//!
//! ```text
//! let p_first = start; let p_last = end
//! if 8 <= p_last - p_first {                      // shorter loops as they were (else branch)
//!   let acc_1 = 0.0; let acc_2 = 0.0; let acc_3 = 0.0
//!   let blocks = (p_last - p_first - 1) / 4       // whole blocks before the last
//!   for b in 0..blocks { the body for p = p_first + 4b into acc, + 1 into acc_1, ... }
//!   // the last 1–4 entries without a loop: p = min(base + u, p_last - 1), the term
//!   // counted only where base + u < p_last
//!   acc = (acc + acc_1) + (acc_2 + acc_3)
//! } else { for p in p_first..p_last { the body } }
//! ```
//!
//! Entry `q` of the loop (counted from `start`) is added into sum `q mod 4`, in order.

use crate::ir::build::{bin, float, int, var};
use crate::ir::{BinOp, Expr, Function, ScalarType, Stmt, VarId};
use crate::prefetch::substitute;

/// Entries summed per iteration, each into a sum of its own.
const WAYS: i64 = 4;
/// Entries from which a loop runs in partial sums.
const MIN_ENTRIES: i64 = 8;

/// Rewrites every reduction loop of `f` that has the pattern.
pub fn interleave(f: &mut Function) {
    let mut body = std::mem::take(&mut f.body);
    visit(f, &mut body);
    f.body = body;
}

fn visit(f: &mut Function, body: &mut Vec<Stmt>) {
    let mut at = 0;
    while at < body.len() {
        match &mut body[at] {
            Stmt::For { body: inner, .. } | Stmt::While { body: inner, .. } => visit(f, inner),
            Stmt::If { then, otherwise, .. } => {
                visit(f, then);
                visit(f, otherwise);
            }
            _ => {}
        }
        if let Some(replacement) = rewrite(f, &body[at]) {
            let n = replacement.len();
            body.splice(at..=at, replacement);
            at += n;
        } else {
            at += 1;
        }
    }
}

/// The statements that replace `s`, when it is a reduction loop of the pattern.
fn rewrite(f: &mut Function, s: &Stmt) -> Option<Vec<Stmt>> {
    let Stmt::For { var: p, start, end, body, parallel: false } = s else { return None };
    // A dense loop's body sits in `if 1 { ... }` (a locate that always holds).
    let flat: Vec<Stmt> = body
        .iter()
        .flat_map(|s| match s {
            Stmt::If { cond: Expr::Int(1), then, otherwise } if otherwise.is_empty() => then.clone(),
            s => vec![s.clone()],
        })
        .collect();
    let (last, decls) = flat.split_last()?;
    let Stmt::Assign(acc, update) = last else { return None };
    let ty = f.vars[*acc].ty;
    if !matches!(ty, ScalarType::F32 | ScalarType::F64) {
        return None;
    }
    // `acc op term`: the term, and whether it is subtracted.
    let (term, negate) = match update {
        Expr::Binary(BinOp::Add, a, b) if **a == var(*acc) => (b.as_ref(), false),
        Expr::Binary(BinOp::Add, a, b) if **b == var(*acc) => (a.as_ref(), false),
        Expr::Binary(BinOp::Sub, a, b) if **a == var(*acc) => (b.as_ref(), true),
        _ => return None,
    };
    let reads_acc = |e: &Expr| {
        let mut found = false;
        e.walk(&mut |x| found |= *x == var(*acc));
        found
    };
    let local_decls = decls.iter().all(|d| matches!(d, Stmt::Decl(v, e) if *v != *acc && *v != *p && !reads_acc(e)));
    if !local_decls || reads_acc(term) || reads_acc(start) || reads_acc(end) {
        return None;
    }
    let name = |f: &Function, suffix: &str| format!("{}_{suffix}", f.vars[*p].name);
    let first = f.fresh_var(&name(f, "first"), ScalarType::Index);
    let last = f.fresh_var(&name(f, "last"), ScalarType::Index);
    let blocks = f.fresh_var(&name(f, "blocks"), ScalarType::Index);
    let b = f.fresh_var(&name(f, "block"), ScalarType::Index);
    let base = f.fresh_var(&name(f, "base"), ScalarType::Index);
    let acc_name = f.vars[*acc].name.clone();
    let sums: Vec<VarId> =
        std::iter::once(*acc).chain((1..WAYS).map(|u| f.fresh_var(&format!("{acc_name}_{u}"), ty))).collect();
    let head = vec![Stmt::Decl(first, start.clone()), Stmt::Decl(last, end.clone())];
    let mut long: Vec<Stmt> = sums[1..].iter().map(|&s| Stmt::Decl(s, float(0.0))).collect();
    // Whole blocks before the last, which holds 1 to WAYS entries.
    long.push(Stmt::Decl(
        blocks,
        bin(BinOp::Div, bin(BinOp::Sub, bin(BinOp::Sub, var(last), var(first)), int(1)), int(WAYS)),
    ));
    let mut unrolled = Vec::new();
    for (u, &sum) in sums.iter().enumerate() {
        let at = f.fresh_var(&f.vars[*p].name.clone(), ScalarType::Index);
        let offset = bin(BinOp::Add, bin(BinOp::Mul, var(b), int(WAYS)), int(u as i64));
        unrolled.push(Stmt::Decl(at, bin(BinOp::Add, var(first), offset)));
        unrolled.extend(copy(f, decls, term, negate, (*p, at), sum, None));
    }
    long.push(Stmt::For { var: b, start: int(0), end: var(blocks), body: unrolled, parallel: false });
    // The last block without a loop (a loop's exit mispredicted once more per row, which
    // slowed CSR SpMV): positions past the end read the last entry again and
    // add nothing.
    long.push(Stmt::Decl(base, bin(BinOp::Add, var(first), bin(BinOp::Mul, var(blocks), int(WAYS)))));
    for (u, &sum) in sums.iter().enumerate() {
        let at = f.fresh_var(&f.vars[*p].name.clone(), ScalarType::Index);
        let position = bin(BinOp::Add, var(base), int(u as i64));
        long.push(Stmt::Decl(at, bin(BinOp::Min, position.clone(), bin(BinOp::Sub, var(last), int(1)))));
        long.extend(copy(f, decls, term, negate, (*p, at), sum, Some(bin(BinOp::Lt, position, var(last)))));
    }
    long.push(Stmt::Assign(*acc, tree(&sums)));
    // Short loops as they were: the partial sums' setup and final additions cost more than
    // they save (a third slower on a CSR SpMV with two entries a row).
    let plain = Stmt::For { var: *p, start: var(first), end: var(last), body: body.clone(), parallel: false };
    let is_long = bin(BinOp::Le, int(MIN_ENTRIES), bin(BinOp::Sub, var(last), var(first)));
    Some(head.into_iter().chain([Stmt::If { cond: is_long, then: long, otherwise: vec![plain] }]).collect())
}

/// The body's declarations and its update of `sum`, with the loop variable `p` read as `at`
/// and every declared variable a fresh one (the copies share a C block).
/// With `live`, the term counts only where it holds (zero elsewhere).
fn copy(
    f: &mut Function,
    decls: &[Stmt],
    term: &Expr,
    negate: bool,
    (p, at): (VarId, VarId),
    sum: VarId,
    live: Option<Expr>,
) -> Vec<Stmt> {
    let mut renamed: Vec<(VarId, VarId)> = vec![(p, at)];
    let rename = |e: &Expr, renamed: &[(VarId, VarId)]| {
        renamed.iter().fold(e.clone(), |e, &(from, to)| substitute(&e, from, &var(to)))
    };
    let mut out = Vec::new();
    for d in decls {
        let Stmt::Decl(v, e) = d else { unreachable!("checked by `rewrite`") };
        let e = rename(e, &renamed);
        let fresh = f.fresh_var(&f.vars[*v].name.clone(), f.vars[*v].ty);
        renamed.push((*v, fresh));
        out.push(Stmt::Decl(fresh, e));
    }
    let op = if negate { BinOp::Sub } else { BinOp::Add };
    let term = rename(term, &renamed);
    let term = match live {
        // Computed first, then chosen: the C compiler then selects without a branch.
        Some(live) => {
            let value = f.fresh_var(&format!("{}_term", f.vars[sum].name), f.vars[sum].ty);
            out.push(Stmt::Decl(value, term));
            Expr::Select(Box::new(live), Box::new(var(value)), Box::new(float(0.0)))
        }
        None => term,
    };
    out.push(Stmt::Assign(sum, bin(op, var(sum), term)));
    out
}

/// The sums added pairwise: `(s0 + s1) + (s2 + s3)` for four.
fn tree(sums: &[VarId]) -> Expr {
    match sums {
        [one] => var(*one),
        _ => {
            let (a, b) = sums.split_at(sums.len() / 2);
            bin(BinOp::Add, tree(a), tree(b))
        }
    }
}
