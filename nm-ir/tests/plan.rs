//! The plan of a scheduled statement: its main nest, how its result is written (in place,
//! appended, through a row workspace, scattered into a sparse workspace with its policy), its
//! outer loop's row ranges, and what the planner refuses.

use nm_format::Format;
use nm_ir::concrete::{
    ConcreteNotation, LoopOrderTarget, WorkspacePolicy, concretize_for, parse_concrete, parse_schedule,
};
use nm_ir::notation::{Declarations, TensorType, Types, parse};
use nm_ir::plan::{Plan, PlanError, PlanOptions, ReductionKind, ResultPlan};

/// `text` with tensors `(name, shape, format)` (dense where empty), concretized as the driver
/// does and scheduled.
fn scheduled(text: &str, tensors: &[(&str, &[usize], &str)], schedule: &str) -> (ConcreteNotation, Types) {
    let stmt = parse(text).unwrap();
    let mut decls = Declarations::new();
    for (name, shape, format) in tensors {
        let ty = match *format {
            "" => TensorType::dense(shape),
            f => TensorType::sparse(shape, Format::parse(f, shape.len()).unwrap()),
        };
        decls = decls.tensor(name, ty);
    }
    let types = stmt.check(&decls).unwrap();
    let c = concretize_for(&stmt, &types, &LoopOrderTarget { widest_row_workspace: 16_384 });
    let c = if schedule.is_empty() { c } else { c.schedule(&parse_schedule(schedule).unwrap()).unwrap() };
    (c, types)
}

fn plan(text: &str, tensors: &[(&str, &[usize], &str)], schedule: &str) -> Plan {
    let (c, types) = scheduled(text, tensors, schedule);
    Plan::new(&c, &types, &PlanOptions::default()).unwrap()
}

fn names(p: &Plan, vars: &[nm_ir::notation::IndexVarId]) -> Vec<String> {
    vars.iter().map(|&v| p.cin.vars[v].name.clone()).collect()
}

const SPGEMM: &str = "C(i,j) = A(i,k) * B(k,j)";

#[test]
fn writes_in_storage_order_append() {
    let p =
        plan("C(i,j) = A(i,j) + B(i,j)", &[("C", &[4, 5], "csr"), ("A", &[4, 5], "csr"), ("B", &[4, 5], "csr")], "");
    let ResultPlan::Append { order, row_workspace: false, csr_like: true } = &p.result else {
        panic!("{:?}", p.result)
    };
    assert_eq!(names(&p, order), ["i", "j"]);
    // A dense result is written in place, whatever the loop order.
    let p = plan("y(i) = A(i,j) * x(j)", &[("y", &[4], ""), ("A", &[4, 5], "csc"), ("x", &[5], "")], "");
    assert_eq!(p.result, ResultPlan::Dense);
}

#[test]
fn gustavson_spgemm_writes_its_rows_through_a_row_workspace() {
    let p = plan(SPGEMM, &[("C", &[4, 5], "csr"), ("A", &[4, 3], "csr"), ("B", &[3, 5], "csr")], "");
    assert_eq!(names(&p, &p.nest.loops.iter().map(|l| l.0).collect::<Vec<_>>()), ["i", "k", "j"]);
    assert!(matches!(p.result, ResultPlan::Append { row_workspace: true, csr_like: true, .. }), "{:?}", p.result);
    // Its rows are ranges apart.
    assert!(p.rows.partitionable && p.rows.reduction.is_none());
    // A sparse workspace asked for replaces the row workspace.
    let (c, types) = scheduled(SPGEMM, &[("C", &[4, 5], "csr"), ("A", &[4, 3], "csr"), ("B", &[3, 5], "csr")], "");
    let options = PlanOptions { workspace: Some(nm_ism::Config::new(WorkspacePolicy::Hash(None))) };
    let p = Plan::new(&c, &types, &options).unwrap();
    assert_eq!(p.result, ResultPlan::Scatter { config: options.workspace });
}

#[test]
fn outer_products_and_transposed_results_scatter_into_a_sparse_workspace() {
    let tensors: &[(&str, &[usize], &str)] = &[("C", &[4, 5], "csr"), ("A", &[4, 3], "csc"), ("B", &[3, 5], "csr")];
    let p = plan(SPGEMM, tensors, "reorder(k, i, j)");
    assert_eq!(p.result, ResultPlan::Scatter { config: None });
    assert!(!p.rows.partitionable);
    // The workspaces paper's Figure 11: C(j,i) in CSR, loops over i, k, j by position.
    let p = plan(
        "C(j,i) = A(i,k) * B(k,j)",
        &[("C", &[5, 4], "csr"), ("A", &[4, 3], "csr"), ("B", &[3, 5], "csr")],
        "reorder(i, k, j); fuse(i, k, f); pos(f, fpos, A); split(fpos, f0, f1, 8)",
    );
    assert_eq!(p.result, ResultPlan::Scatter { config: None });
    // `precompute` names the policy.
    let (c, types) = scheduled(SPGEMM, tensors, "reorder(k, i, j); precompute(A(i,k) * B(k,j), j, j, w, coord)");
    let p = Plan::new(&c, &types, &PlanOptions::default()).unwrap();
    assert!(
        matches!(p.result, ResultPlan::Scatter { config: Some(c) } if c.policy == WorkspacePolicy::Coord),
        "{:?} {} {:?}",
        p.result,
        p.cin,
        p.cin.workspaces
    );
}

#[test]
fn row_ranges_follow_the_outer_loop() {
    // CSR SpMV: rows of a dense result, apart.
    let p = plan("y(i) = A(i,j) * x(j)", &[("y", &[4], ""), ("A", &[4, 5], "csr"), ("x", &[5], "")], "");
    assert!(p.rows.partitionable && p.rows.reduction.is_none());
    // CSC SpMV: the outer loop sums into the whole result, through a copy per thread where
    // one is no larger than the loop's extent.
    let p = plan("y(i) = A(i,j) * x(j)", &[("y", &[4], ""), ("A", &[4, 5], "csc"), ("x", &[5], "")], "");
    assert_eq!(names(&p, &[p.rows.outer.unwrap()]), ["j"]);
    assert_eq!(p.rows.reduction, Some(ReductionKind::PerThread));
    // ... or as the schedule asks.
    let p = plan(
        "y(i) = A(i,j) * x(j)",
        &[("y", &[40], ""), ("A", &[40, 5], "csc"), ("x", &[5], "")],
        "parallelize(j, CPUThread, Atomics)",
    );
    assert_eq!((p.rows.asked, p.rows.reduction), (Some(ReductionKind::Atomic), Some(ReductionKind::Atomic)));
}

#[test]
fn a_where_producer_runs_inside_the_consumers_loops() {
    let p = plan(
        "A(i,j) = B(i,j) - sum(k, C(i,k))",
        &[("A", &[3, 4], "csr"), ("B", &[3, 4], "csr"), ("C", &[3, 5], "csr")],
        "",
    );
    assert_eq!(p.nest.producers.len(), 1);
    assert_eq!(names(&p, &p.nest.producers[0].loops.iter().map(|l| l.0).collect::<Vec<_>>()), ["k"]);
    assert_eq!(p.accesses.len(), 2);
}

#[test]
fn what_the_planner_refuses() {
    let types = || {
        parse("y(i) = b(i) + c(i)")
            .unwrap()
            .check(
                &Declarations::new()
                    .tensor("y", TensorType::dense(&[3]))
                    .tensor("b", TensorType::dense(&[3]))
                    .tensor("c", TensorType::dense(&[3])),
            )
            .unwrap()
    };
    let seq = parse_concrete("forall(i, sequence(y(i) = b(i), y(i) += c(i)))").unwrap();
    assert_eq!(Plan::new(&seq, &types(), &PlanOptions::default()).unwrap_err(), PlanError::Where("`sequence`".into()));
    let (c, types) = scheduled(
        "y(i) = A(i,j) * x(j)",
        &[("y", &[4], ""), ("A", &[4, 5], "csr"), ("x", &[5], "")],
        "parallelize(j, CPUThread, Atomics)",
    );
    let err = Plan::new(&c, &types, &PlanOptions::default()).unwrap_err();
    assert!(matches!(&err, PlanError::Schedule(m) if m.contains("on a loop inside another")), "{err}");
}

/// The expression a point computes, as text.
fn point_text(p: &Plan, e: nm_ir::notation::ExprId) -> String {
    let scope = nm_ir::notation::Scope { tensors: &p.cin.tensors, vars: &p.cin.vars, exprs: &p.lattices.exprs };
    let mut text = String::new();
    scope.write_expr(&mut text, e).unwrap();
    text
}

/// Each point's (iterators as `tensor.level`, expression) along `var` for `e`.
fn points(p: &Plan, e: nm_ir::notation::ExprId, var: &str) -> Vec<(Vec<String>, String)> {
    let v = p.cin.vars.iter().find(|(_, x)| x.name == var).unwrap().0;
    let lattice = p.lattices.along(e, v).unwrap_or_else(|| panic!("no lattice along {var}"));
    lattice
        .iter()
        .map(|pt| {
            let its = pt.iterators.iter().map(|it| format!("{}.{}", p.cin.tensors[it.tensor].name, it.level)).collect();
            (its, point_text(p, pt.expr))
        })
        .collect()
}

#[test]
fn every_point_has_the_lattice_of_the_loop_inside() {
    // Along `i` a union of the rows; each point hands its sub-expression to `j`.
    let p =
        plan("C(i,j) = A(i,j) + B(i,j)", &[("C", &[4, 5], "dcsr"), ("A", &[4, 5], "dcsr"), ("B", &[4, 5], "dcsr")], "");
    let outer = points(&p, p.nest.rhs, "i");
    let texts: Vec<&str> = outer.iter().map(|(_, e)| e.as_str()).collect();
    assert_eq!(texts, ["A(i,j) + B(i,j)", "A(i,j)", "B(i,j)"]);
    assert_eq!(outer[0].0, ["A.0", "B.0"]);
    let i = p.cin.vars.iter().find(|(_, x)| x.name == "i").unwrap().0;
    let inner: Vec<Vec<(Vec<String>, String)>> =
        p.lattices.along(p.nest.rhs, i).unwrap().iter().map(|pt| points(&p, pt.expr, "j")).collect();
    assert_eq!(inner[0].len(), 3, "{inner:?}");
    assert_eq!(inner[1], [(vec!["A.1".to_string()], "A(i,j)".to_string())]);
    assert_eq!(inner[2], [(vec!["B.1".to_string()], "B(i,j)".to_string())]);
    // Three lattices along `j` and one along `i`: equal points share one node.
    assert_eq!(p.lattices.len(), 4);
}

#[test]
fn lattices_follow_splits_and_producers() {
    // A split's inner loop co-iterates its parent's coordinates; its block loop nothing.
    let p =
        plan("y(i) = b(i) * c(i)", &[("y", &[40], ""), ("b", &[40], "s"), ("c", &[40], "s")], "split(i, i0, i1, 8)");
    let found = points(&p, p.nest.rhs, "i");
    assert_eq!(found, [(vec!["b.0".to_string(), "c.0".to_string()], "b(i) * c(i)".to_string())]);
    assert_eq!(p.lattices.len(), 1);
    // A `where` producer's loops have their own lattices, over its own expression.
    let p = plan(
        "A(i,j) = B(i,j) - sum(k, C(i,k))",
        &[("A", &[3, 4], "csr"), ("B", &[3, 4], "csr"), ("C", &[3, 5], "csr")],
        "",
    );
    let [producer] = p.nest.producers.as_slice() else { panic!("{:?}", p.nest) };
    assert_eq!(points(&p, producer.rhs, "k"), [(vec!["C.1".to_string()], "C(i,k)".to_string())]);
}
