//! Iteration graphs: tensor paths, resolving and reducing edges, concordant orders, the
//! violations of a schedule, cycles with a suggestion, and DOT output.

use nm_format::Format;
use nm_ir::graph::{EdgeKind, IterationGraph};
use nm_ir::notation::{Declarations, IndexNotation, TensorType, parse};

fn graph(text: &str, decls: Declarations) -> (IndexNotation, IterationGraph) {
    let s = parse(text).unwrap();
    let types = s.check(&decls).unwrap_or_else(|e| panic!("{e}"));
    let g = IterationGraph::build(&s, &types);
    (s, g)
}

fn names(s: &IndexNotation, vars: &[nm_ir::notation::IndexVarId]) -> Vec<String> {
    vars.iter().map(|&v| s.var_name(v).to_string()).collect()
}

fn edges(s: &IndexNotation, g: &IterationGraph) -> Vec<String> {
    g.edges
        .iter()
        .map(|e| {
            let kind = if e.kind == EdgeKind::Reducing { " (reducing)" } else { "" };
            format!("{} -> {} [{}]{kind}", s.var_name(e.from), s.var_name(e.to), s.tensor_name(e.tensor))
        })
        .collect()
}

fn spgemm(a: Format, b: Format, c: Format) -> Declarations {
    Declarations::new()
        .tensor("A", TensorType::sparse(&[4, 5], a))
        .tensor("B", TensorType::sparse(&[4, 6], b))
        .tensor("C", TensorType::sparse(&[6, 5], c))
}

#[test]
fn csr_operands_order_their_variables() {
    let (s, g) = graph("A(i,j) = B(i,k) * C(k,j)", spgemm(Format::csr(), Format::csr(), Format::csr()));
    assert_eq!(edges(&s, &g), ["i -> j [A]", "i -> k [B]", "k -> j [C]"]);
    let free = s.free_vars();
    let order = g.concordant_order(&free, &s).unwrap();
    assert_eq!(names(&s, &order), ["i", "k", "j"]);
    // The default CIN order i, j, k breaks C's path: k must come before j.
    let (i, j, k) = (s.var_named("i").unwrap(), s.var_named("j").unwrap(), s.var_named("k").unwrap());
    let broken = g.violations(&[i, j, k]);
    assert_eq!(broken.len(), 1);
    assert_eq!(
        (s.var_name(broken[0].from), s.var_name(broken[0].to), s.tensor_name(broken[0].tensor)),
        ("k", "j", "C")
    );
    assert!(g.violations(&order).is_empty());
    // The result stored as CSC wants j before i, while B wants i before k and C k before j:
    // no order satisfies all three, and the error names the cycle.
    let (s, g) = graph("A(i,j) = B(i,k) * C(k,j)", spgemm(Format::csc(), Format::csr(), Format::csr()));
    let e = g.concordant_order(&s.free_vars(), &s).unwrap_err();
    assert_eq!(e.cycle, "i -> k (B) -> j (C) -> i (A)");
    assert_eq!(
        e.to_string(),
        "no loop order follows every tensor's storage order: i -> k (B) -> j (C) -> i (A); store `C` with its dimensions in the other order (e.g. csc instead of csr) or transpose it"
    );
}

#[test]
fn csr_times_csc_is_a_cycle_with_a_suggestion() {
    let d = Declarations::new()
        .tensor("A", TensorType::dense(&[4, 5]))
        .tensor("B", TensorType::sparse(&[4, 5], Format::csr()))
        .tensor("C", TensorType::sparse(&[4, 5], Format::csc()));
    let (s, g) = graph("A(i,j) = B(i,j) * C(i,j)", d);
    assert_eq!(edges(&s, &g), ["i -> j [B]", "j -> i [C]"]);
    let e = g.concordant_order(&s.free_vars(), &s).unwrap_err();
    assert_eq!(e.cycle, "i -> j (B) -> i (C)");
    assert!(e.suggestion.contains("store `C` with its dimensions in the other order"), "{e}");
}

#[test]
fn dense_levels_impose_no_order() {
    let d = Declarations::new()
        .tensor("y", TensorType::dense(&[4]))
        .tensor("A", TensorType::dense(&[4, 5]))
        .tensor("x", TensorType::dense(&[5]));
    let (s, g) = graph("y(i) = A(i,j) * x(j)", d);
    assert!(g.edges.is_empty());
    assert_eq!(names(&s, &g.concordant_order(&s.free_vars(), &s).unwrap()), ["i", "j"]);
}

#[test]
fn compound_subscripts_give_reducing_edges_and_unresolved_sets() {
    let d = Declarations::new()
        .tensor("O", TensorType::dense(&[8, 8]))
        .tensor("I", TensorType::sparse(&[10, 10], Format::csr()))
        .tensor("F", TensorType::sparse(&[3, 3], Format::csf(2)));
    let (s, g) = graph("O(i,j) = I(i+p,j+q) * F(p,q)", d);
    assert_eq!(
        edges(&s, &g),
        [
            "i -> j [I] (reducing)",
            "i -> q [I] (reducing)",
            "p -> j [I] (reducing)",
            "p -> q [I] (reducing)",
            "p -> q [F]"
        ]
    );
    let i_path = &g.paths[1];
    let unresolved: Vec<Vec<String>> =
        i_path.nodes.iter().map(|n| names(&s, &n.unresolved.iter().copied().collect::<Vec<_>>())).collect();
    assert_eq!(unresolved, [vec!["i", "p"], vec!["j", "q"]]);
    let order = g.concordant_order(&s.free_vars(), &s).unwrap();
    assert_eq!(names(&s, &order), ["i", "p", "j", "q"]);
    // A subscript that repeats an earlier variable leaves only the new ones unresolved.
    let d = Declarations::new()
        .tensor("A", TensorType::dense(&[4, 4]))
        .tensor("B", TensorType::sparse(&[4, 7], Format::csr()));
    let (s, g) = graph("A(i,j) = B(i,i+j)", d);
    assert_eq!(names(&s, &g.paths[1].nodes[1].unresolved.iter().copied().collect::<Vec<_>>()), ["j"]);
    assert_eq!(edges(&s, &g), ["i -> j [B] (reducing)"]);
}

#[test]
fn dot_output() {
    let (s, g) = graph("A(i,j) = B(i,k) * C(k,j)", spgemm(Format::dense(2), Format::csr(), Format::csc()));
    assert_eq!(
        g.to_dot(&s),
        "digraph iteration_graph {\n  // A (result): dense:i -> dense:j\n  // B: dense:i -> compressed:k\n  // C: dense:j -> compressed:k\n  i;\n  j;\n  k;\n  i -> k [label=\"B\"];\n  j -> k [label=\"C\"];\n}\n"
    );
}
