//! Workspace analysis: appending vs scattering, hoisting, the dense-workspace rule, `ow_order`,
//! and the CIN a workspace insertion produces (the workspaces paper's Figure 11/12 shape).

use nm_format::Format;
use nm_ir::concrete::{
    AccessPattern, ConcreteNotation, WorkspaceKind, WorkspacePolicy, concretize, parse_concrete, parse_schedule,
};
use nm_ir::notation::parse;

fn scheduled(text: &str, schedule: &str) -> ConcreteNotation {
    let c = concretize(&parse(text).unwrap());
    if schedule.is_empty() { c } else { c.schedule(&parse_schedule(schedule).unwrap()).unwrap() }
}

fn names(c: &ConcreteNotation, vars: &[nm_ir::notation::IndexVarId]) -> Vec<String> {
    vars.iter().map(|&v| c.vars[v].name.clone()).collect()
}

#[test]
fn in_order_writes_append() {
    let c = scheduled("C(i,j) = A(i,j) + B(i,j)", "");
    let plan = c.workspace_plan(Some(&Format::csr())).unwrap();
    assert_eq!(plan.pattern, AccessPattern::Appending);
    assert_eq!(names(&c, &plan.hoisted), ["i", "j"]);
    let c = scheduled("y(i) = A(i,j) * x(j)", "");
    assert_eq!(c.workspace_plan(Some(&Format::parse("s", 1).unwrap())).unwrap().pattern, AccessPattern::Appending);
    // Column-wise SpMV scatters into y, but a dense y takes random insertion.
    let c = scheduled("y(i) = A(i,j) * x(j)", "reorder(j, i)");
    assert_eq!(c.workspace_plan(None).unwrap().pattern, AccessPattern::Appending);
    let plan = c.workspace_plan(Some(&Format::parse("s", 1).unwrap())).unwrap();
    assert_eq!((plan.pattern, plan.kind), (AccessPattern::Scattering, WorkspaceKind::Dense));
}

#[test]
fn gustavson_spgemm_needs_a_dense_row() {
    let c = scheduled("C(i,j) = A(i,k) * B(k,j)", "reorder(k, j)");
    let plan = c.workspace_plan(Some(&Format::csr())).unwrap();
    assert_eq!(plan.pattern, AccessPattern::Scattering);
    assert_eq!(names(&c, &plan.hoisted), ["i"]);
    assert_eq!(names(&c, &plan.dims), ["j"]);
    assert_eq!((plan.ow_order.as_slice(), plan.kind), (&[1][..], WorkspaceKind::Dense));
    let (w, _) = c.insert_workspace(Some(&Format::csr()), "w", WorkspacePolicy::Bucket).unwrap();
    let text = w.to_string();
    assert_eq!(text, "forall(i, where(forall(j, C(i,j) = w(j)), forall(k, forall(j, w(j) += A(i,k) * B(k,j)))))");
    assert_eq!(parse_concrete(&text).unwrap().to_string(), text);
}

#[test]
fn outer_product_spgemm_needs_a_sparse_workspace() {
    let c = scheduled("C(i,j) = A(i,k) * B(k,j)", "reorder(k, i, j)");
    let plan = c.workspace_plan(Some(&Format::csr())).unwrap();
    assert_eq!((plan.pattern, plan.kind), (AccessPattern::Scattering, WorkspaceKind::Sparse));
    assert!(plan.hoisted.is_empty());
    assert_eq!((names(&c, &plan.dims), plan.ow_order.clone()), (vec!["i".to_string(), "j".to_string()], vec![0, 1]));
}

#[test]
fn transposed_spgemm_of_figure_11_gets_a_two_level_workspace() {
    // C(j,i) stored CSR over (j, i); the loops run i, k, j (reordered, then fused, iterated by
    // position and split, as in the paper's Figure 11): the workspace holds (i, j) in loop
    // order, dims {I, J}, and ow_order [1, 0] maps them back to C's dimensions.
    let c = scheduled(
        "C(j,i) = A(i,k) * B(k,j)",
        "reorder(i, k, j); fuse(i, k, f); pos(f, fpos, A); split(fpos, f0, f1, 8)",
    );
    let plan = c.workspace_plan(Some(&Format::csr())).unwrap();
    assert_eq!((plan.pattern, plan.kind), (AccessPattern::Scattering, WorkspaceKind::Sparse));
    assert!(plan.hoisted.is_empty());
    assert_eq!(names(&c, &plan.dims), ["i", "j"]);
    assert_eq!(plan.ow_order, [1, 0]);
    let (w, _) = c.insert_workspace(Some(&Format::csr()), "W", WorkspacePolicy::Hash(None)).unwrap();
    assert_eq!(
        w.to_string(),
        "where(forall(j, forall(i, C(j,i) = W(i,j))), forall(f0, forall(f1, forall(j, W(i,j) += A(i,k) * B(k,j)))))"
    );
    let (tensor, kind, policy, ow) = &w.workspaces[0];
    assert_eq!((w.tensors[*tensor].name.as_str(), w.tensors[*tensor].order), ("W", 2));
    assert_eq!((*kind, policy.to_string(), ow.as_slice()), (WorkspaceKind::Sparse, "hash".to_string(), &[1, 0][..]));
}

#[test]
fn what_the_analysis_refuses() {
    let c = scheduled("y(i) = b(i) - A(i,j) * x(j)", "");
    assert_eq!(
        c.workspace_plan(None).unwrap_err().to_string(),
        "workspace analysis needs one assignment under a nest of loops; this statement has a `where`"
    );
    let seq = parse_concrete("forall(i, sequence(y(i) = b(i), y(i) += c(i)))").unwrap();
    assert_eq!(
        seq.workspace_plan(None).unwrap_err().to_string(),
        "workspace analysis needs one assignment under a nest of loops; this statement has a `sequence`"
    );
    let c = scheduled("C(i,j) = A(i,j) + B(i,j)", "");
    assert_eq!(
        c.insert_workspace(Some(&Format::csr()), "w", WorkspacePolicy::Coord).unwrap_err().to_string(),
        "`C` is written in its storage order: it needs no workspace"
    );
    assert_eq!(
        c.workspace_plan(Some(&Format::csf(3))).unwrap_err().to_string(),
        "the result `C` has 2 subscripts but its format stores 3 dimensions"
    );
}
