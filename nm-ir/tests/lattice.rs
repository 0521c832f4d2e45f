//! Merge lattices of the classic cases (taco, Fig. 7–9): conjunction, disjunction, their
//! nesting, subtraction, constants, and the dense-iterator simplification.

use nm_format::Format;
use nm_ir::lattice::MergeLattice;
use nm_ir::notation::{Expr, IndexNotation, parse};

/// The lattice of the statement's right-hand side along `var`, with `formats` given by name
/// (tensors not named are dense).
fn lattice(text: &str, var: &str, formats: &[(&str, Format)]) -> (String, bool) {
    let s: IndexNotation = parse(text).unwrap();
    let fs: Vec<Option<Format>> =
        s.tensors.iter().map(|(_, t)| formats.iter().find(|(n, _)| *n == t.name).map(|(_, f)| f.clone())).collect();
    let l = MergeLattice::build(s.scope(), &fs, s.rhs, s.var_named(var).unwrap(), &[]);
    (l.display(s.scope()).to_string(), l.needs_merge())
}

fn sparse_vectors(names: &[&'static str]) -> Vec<(&'static str, Format)> {
    names.iter().map(|n| (*n, Format::parse("s", 1).unwrap())).collect()
}

#[test]
fn addition_unions_and_multiplication_intersects() {
    let v = sparse_vectors(&["B", "C", "D"]);
    assert_eq!(
        lattice("a(i) = B(i) + C(i)", "i", &v).0,
        "lp0: [B.0 C.0] | B(i) + C(i)\nlp1: [B.0] | B(i)\nlp2: [C.0] | C(i)\n"
    );
    assert_eq!(lattice("a(i) = B(i) * C(i)", "i", &v).0, "lp0: [B.0 C.0] | B(i) * C(i)\n");
    assert_eq!(
        lattice("a(i) = (B(i) + C(i)) * D(i)", "i", &v).0,
        "lp0: [B.0 C.0 D.0] | (B(i) + C(i)) * D(i)\nlp1: [B.0 D.0] | B(i) * D(i)\nlp2: [C.0 D.0] | C(i) * D(i)\n"
    );
    assert_eq!(
        lattice("a(i) = B(i) + C(i) * D(i)", "i", &v).0,
        "lp0: [B.0 C.0 D.0] | B(i) + C(i) * D(i)\nlp1: [C.0 D.0] | C(i) * D(i)\nlp2: [B.0] | B(i)\n"
    );
    assert_eq!(
        lattice("a(i) = B(i) - C(i)", "i", &v).0,
        "lp0: [B.0 C.0] | B(i) - C(i)\nlp1: [B.0] | B(i)\nlp2: [C.0] | -C(i)\n"
    );
    assert_eq!(lattice("a(i) = -(B(i) * C(i))", "i", &v).0, "lp0: [B.0 C.0] | -(B(i) * C(i))\n");
    // A constant never runs out: it is in every point, and alone once B has.
    assert_eq!(lattice("a(i) = B(i) + 2", "i", &v).0, "lp0: [B.0] | B(i) + 2\nlp1: [] | 2\n");
    assert_eq!(lattice("a(i) = B(i) * 2", "i", &v).0, "lp0: [B.0] | B(i) * 2\n");
}

#[test]
fn dense_iterators_are_located_and_prune_unreachable_points() {
    // B dense, C sparse: B never runs out, so the C-alone point is unreachable.
    let (text, merge) = lattice("a(i) = B(i) + C(i)", "i", &sparse_vectors(&["C"]));
    assert_eq!(text, "lp0: [B.0* C.0] | B(i) + C(i)\nlp1: [B.0*] | B(i)\n");
    assert!(merge);
    let (text, merge) = lattice("a(i) = B(i) * C(i)", "i", &sparse_vectors(&["C"]));
    assert_eq!(text, "lp0: [B.0* C.0] | B(i) * C(i)\n");
    assert!(merge);
    // b + c·d with d dense: c can still run out, so the b-alone point stays (found by
    // nm-lower's end-to-end tests: dropping it lost b's entries past c's last).
    let v = [("b", Format::parse("s", 1).unwrap()), ("c", Format::parse("s", 1).unwrap())];
    let (text, _) = lattice("a(i) = b(i) + c(i) * d(i)", "i", &v);
    assert_eq!(text, "lp0: [b.0 c.0 d.0*] | b(i) + c(i) * d(i)\nlp1: [c.0 d.0*] | c(i) * d(i)\nlp2: [b.0] | b(i)\n");
    // All dense: a plain loop.
    let (text, merge) = lattice("a(i) = B(i) + C(i)", "i", &[]);
    assert_eq!(text, "lp0: [B.0* C.0*] | B(i) + C(i)\n");
    assert!(!merge);
}

#[test]
fn matrix_levels_follow_the_format() {
    let csr = Format::csr();
    let csc = Format::csc();
    // SpMV along j: A's compressed level 1 is iterated, x is located.
    assert_eq!(lattice("y(i) = A(i,j) * x(j)", "j", &[("A", csr.clone())]).0, "lp0: [A.1 x.0*] | A(i,j) * x(j)\n");
    // Along i, CSR's dense level 0 is located; CSC stores i in its compressed level 1.
    assert!(!lattice("C(i,j) = A(i,j) + B(i,j)", "i", &[("A", csr.clone()), ("B", csr.clone())]).1);
    assert_eq!(
        lattice("C(i,j) = A(i,j) + B(i,j)", "i", &[("A", csr), ("B", csc)]).0,
        "lp0: [A.0* B.1] | A(i,j) + B(i,j)\nlp1: [A.0*] | A(i,j)\n"
    );
}

#[test]
fn a_nested_sum_is_read_whole() {
    let s = parse("a(i) = B(i) + C(i,j) * d(j)").unwrap().with_reductions();
    let fs = vec![None, Some(Format::parse("s", 1).unwrap()), Some(Format::csr()), None];
    let l = MergeLattice::build(s.scope(), &fs, s.rhs, s.var_named("i").unwrap(), &[]);
    assert!(matches!(s.exprs[s.rhs], Expr::Binary(..)));
    assert_eq!(
        l.display(s.scope()).to_string(),
        "lp0: [B.0 C.0*] | B(i) + sum(j, C(i,j) * d(j))\nlp1: [C.0*] | sum(j, C(i,j) * d(j))\n"
    );
}

#[test]
fn compound_subscripts_make_stateful_iterators() {
    // The convolution paper's example A(i,j) = B(i) + C(i+j), B and C sparse vectors. Along
    // the outer loop i, C's level is only narrowed (i+j still needs j): three points, C's
    // iterator stateful.
    let s = parse("A(i,j) = B(i) + C(i+j)").unwrap();
    let fs = vec![None, Some(Format::parse("s", 1).unwrap()), Some(Format::parse("s", 1).unwrap())];
    let (i, j) = (s.var_named("i").unwrap(), s.var_named("j").unwrap());
    let l = MergeLattice::build(s.scope(), &fs, s.rhs, i, &[]);
    assert_eq!(
        l.display(s.scope()).to_string(),
        "lp0: [B.0 C.0{i,j→j}] | B(i) + C(i+j)\nlp1: [B.0] | B(i)\nlp2: [C.0{i,j→j}] | C(i+j)\n"
    );
    // Along j inside i, B is fixed and C is resolved.
    let l = MergeLattice::build(s.scope(), &fs, s.rhs, j, &[i]);
    assert_eq!(l.display(s.scope()).to_string(), "lp0: [C.0] | B(i) + C(i+j)\nlp1: [] | B(i)\n");
    assert_eq!(l.points[0].iterators[0].post, vec![]);
}
