//! Software prefetch of the dense rows a sparse loop reaches through coordinates.
//!
//! In SpMM (`C(i,j) = A(i,k) * B(k,j)`, loops `i, k, j`) and SDDMM (`Y(j,k)` under a sparse
//! `j`), each stored entry names a row of a dense operand that the inner dense loop then reads
//! whole — rows in an order no hardware prefetcher can guess. While one row is multiplied, the
//! row of the entry [`DISTANCE`] positions ahead is requested, one prefetch per cache line.
//! Measured with 64-column SpMM written in C by hand, it halved the time on the shared
//! matrices, flat for distances 2 to 8 (BENCHMARKS.md, "CPU kernels against the peers").
//!
//! The pass looks for `for p in ..` whose body declares `k = crd[p]` and contains a dense loop
//! `for j in a..b` loading `vals[e(k, j)]` from a read-only floating-point array, where
//! everything else `e` and `a..b` read is fixed during the `p` loop; it inserts, after the
//! declaration of `k`, `if p + D < len(crd) { k' = crd[p + D]; for q in 0..lines { prefetch
//! vals[e(k', a + q·per_line)] } }`. A prefetch never changes a result, and every index it
//! names is one the row's loop will load (the interpreter checks that it is in bounds).
//!
//! The same holds for the buckets of a sparse workspace: the outer product
//! (`C(i,j) = A(i,k) * B(k,j)`, loops `k, i, j`) appends to the bucket of row `i`, rows in
//! the order of A's column — two cache misses per insert (the bucket's head, then its tail).
//! The bucket of the entry `4·DISTANCE` ahead has its head requested, the one `2·DISTANCE`
//! ahead its tail (a column of A is often a few entries, so the rows' distance is short in
//! time: twice the dense rows' distance measured better).

use crate::ir::build::{bin, int, load, var};
use crate::ir::{ArrayId, BinOp, BucketLine, Expr, Function, Role, ScalarType, Stmt, VarId, walk};

/// How many stored entries ahead a row is requested.
pub const DISTANCE: i64 = 4;

/// Bytes per cache line.
const LINE: i64 = 64;

/// Adds row prefetches to every sparse loop of `f` that reads dense rows by coordinate.
pub fn insert(f: &mut Function) {
    let mut body = std::mem::take(&mut f.body);
    visit(f, &mut body);
    f.body = body;
}

fn visit(f: &mut Function, body: &mut [Stmt]) {
    for s in body.iter_mut() {
        match s {
            Stmt::For { var: p, body: inner, .. } => {
                visit(f, inner);
                prefetch_rows(f, *p, inner);
                prefetch_buckets(f, *p, inner);
            }
            Stmt::While { body, .. } => visit(f, body),
            Stmt::If { then, otherwise, .. } => {
                visit(f, then);
                visit(f, otherwise);
            }
            _ => {}
        }
    }
}

/// Inserts the prefetches into the body of `for p in ..`, when it has the pattern.
fn prefetch_rows(f: &mut Function, p: VarId, body: &mut Vec<Stmt>) {
    let Some((at, k, crd)) = coordinate(f, p, body) else { return };
    let assigned = assigned_vars(body);
    let fixed = |e: &Expr, allowed: &[VarId]| vars_of(e).iter().all(|v| allowed.contains(v) || !assigned.contains(v));
    // (array, index expression, j, the j loop's start and end): one per array.
    let mut rows: Vec<(ArrayId, Expr, VarId, Expr, Expr)> = Vec::new();
    walk(body, &mut |s| {
        let Stmt::For { var: j, start, end: j_end, body: row, .. } = s else { return };
        if !fixed(start, &[]) || !fixed(j_end, &[]) {
            return;
        }
        for_each_load(row, &mut |a, index| {
            let decl = &f.arrays[a];
            let uses = vars_of(index);
            if decl.elem.is_float()
                && !decl.output
                && uses.contains(&k)
                && uses.contains(j)
                && fixed(index, &[k, *j])
                && !rows.iter().any(|r| r.0 == a)
            {
                rows.push((a, index.clone(), *j, start.clone(), j_end.clone()));
            }
        });
    });
    if rows.is_empty() {
        return;
    }
    let ahead = f.var(&format!("{}_ahead", f.vars[k].name), ScalarType::Index);
    let mut then = vec![Stmt::Decl(ahead, load(crd, bin(BinOp::Add, var(p), int(DISTANCE))))];
    for (a, index, j, start, j_end) in rows {
        let per_line = LINE / f.arrays[a].elem.size() as i64;
        let q = f.var(&format!("{}_line", f.arrays[a].name), ScalarType::Index);
        let width = bin(BinOp::Sub, j_end.clone(), start.clone());
        let lines = bin(BinOp::Div, bin(BinOp::Add, width, int(per_line - 1)), int(per_line));
        // The line's first element, clamped to the row's last one.
        let column = bin(
            BinOp::Min,
            bin(BinOp::Add, start, bin(BinOp::Mul, var(q), int(per_line))),
            bin(BinOp::Sub, j_end, int(1)),
        );
        let index = substitute(&substitute(&index, k, &var(ahead)), j, &column);
        then.push(Stmt::For {
            var: q,
            start: int(0),
            end: lines,
            body: vec![Stmt::Prefetch { array: a, index }],
            parallel: false,
        });
    }
    // Ahead across rows too (a row of luxembourg holds two entries): up to the last entry.
    let guard = Stmt::If {
        cond: bin(BinOp::Lt, bin(BinOp::Add, var(p), int(DISTANCE)), Expr::Len(crd)),
        then,
        otherwise: vec![],
    };
    body.insert(at + 1, guard);
}

/// The coordinate `k = crd[p]` the body of `for p in ..` declares first, if any: where it
/// is declared, `k` and `crd`.
fn coordinate(f: &Function, p: VarId, body: &[Stmt]) -> Option<(usize, VarId, ArrayId)> {
    body.iter().enumerate().find_map(|(at, s)| match s {
        Stmt::Decl(k, Expr::Load(crd, index))
            if **index == var(p) && matches!(f.arrays[*crd].role, Role::Crd { .. }) && !f.arrays[*crd].output =>
        {
            Some((at, *k, *crd))
        }
        _ => None,
    })
}

/// Inserts bucket prefetches into the body of `for p in ..` when it declares `i = crd[p]`
/// and inserts below into the bucket of `i` of a `bucket` (or `auto`) workspace.
fn prefetch_buckets(f: &mut Function, p: VarId, body: &mut Vec<Stmt>) {
    let Some((at, i, crd)) = coordinate(f, p, body) else { return };
    let mut workspace = None;
    walk(body, &mut |s| {
        if let Stmt::Insert { workspace: w, first, .. } = s
            && *first == var(i)
            && let Role::Workspace { config, .. } = &f.arrays[*w].role
            && matches!(config.policy, nm_ism::Policy::Bucket | nm_ism::Policy::Auto)
        {
            workspace = Some(*w);
        }
    });
    let Some(workspace) = workspace else { return };
    let ahead = |f: &mut Function, distance: i64, line: BucketLine, name: &str| {
        let row = f.var(&format!("{}_{name}", f.vars[i].name), ScalarType::Index);
        Stmt::If {
            cond: bin(BinOp::Lt, bin(BinOp::Add, var(p), int(distance)), Expr::Len(crd)),
            then: vec![
                Stmt::Decl(row, load(crd, bin(BinOp::Add, var(p), int(distance)))),
                Stmt::PrefetchBucket { workspace, bucket: var(row), line },
            ],
            otherwise: vec![],
        }
    };
    let head = ahead(f, 4 * DISTANCE, BucketLine::Head, "head");
    let tail = ahead(f, 2 * DISTANCE, BucketLine::Tail, "tail");
    body.splice(at + 1..at + 1, [head, tail]);
}

/// Variables assigned or declared anywhere in `body`, loop variables included.
fn assigned_vars(body: &[Stmt]) -> Vec<VarId> {
    let mut out = Vec::new();
    walk(body, &mut |s| match s {
        Stmt::Decl(v, _) | Stmt::Assign(v, _) | Stmt::For { var: v, .. } => out.push(*v),
        _ => {}
    });
    out
}

/// Variables `e` reads.
fn vars_of(e: &Expr) -> Vec<VarId> {
    let mut out = Vec::new();
    e.walk(&mut |x| {
        if let Expr::Var(v) = x {
            out.push(*v);
        }
    });
    out
}

/// Calls `visit(array, index)` for every load in `body`'s statements and expressions.
fn for_each_load(body: &[Stmt], visit: &mut impl FnMut(ArrayId, &Expr)) {
    walk(body, &mut |s| {
        s.exprs(&mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load(a, i) = x {
                    visit(*a, i);
                }
            })
        })
    });
}

/// `e` with `v` replaced by `by`.
pub(crate) fn substitute(e: &Expr, v: VarId, by: &Expr) -> Expr {
    let go = |x: &Expr| Box::new(substitute(x, v, by));
    match e {
        Expr::Var(x) if *x == v => by.clone(),
        Expr::Int(_) | Expr::Float(_) | Expr::Var(_) | Expr::Len(_) => e.clone(),
        Expr::Load(a, i) => Expr::Load(*a, go(i)),
        Expr::Unary(op, a) => Expr::Unary(*op, go(a)),
        Expr::Binary(op, a, b) => Expr::Binary(*op, go(a), go(b)),
        Expr::Select(c, a, b) => Expr::Select(go(c), go(a), go(b)),
    }
}
