//! Index notation: the snapshot corpus (parse, print back, make reductions explicit), parse
//! errors with carets, semantic errors, and print∘parse as a property.

use std::fmt::Write as _;
use std::path::PathBuf;

use nm_format::Format;
use nm_ir::notation::{Access, BinaryOp, Declarations, Expr, ExprId, IndexNotation, SemanticError, TensorType, parse};
use proptest::prelude::*;

mod common;
use common::statement;

/// Runs the corpus; with NMSPARSE_BLESS=1 rewrites its `=>` lines instead of comparing.
#[test]
fn corpus_snapshots() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/notation.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let bless = std::env::var_os("NMSPARSE_BLESS").is_some();
    let mut out = String::new();
    let mut failures = Vec::new();
    let mut statements = 0;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.starts_with('#') || line.trim().is_empty() {
            writeln!(out, "{line}").unwrap();
            continue;
        }
        statements += 1;
        let stmt = parse(line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stmt.to_string(), line, "printing does not reproduce the input");
        let reduced = stmt.with_reductions().to_string();
        writeln!(out, "{line}\n=> {reduced}").unwrap();
        // The explicit form parses back to itself and has nothing left to reduce.
        let again = parse(&reduced).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.to_string(), reduced);
        assert!(again.reduction_vars().is_empty(), "{reduced}");
        match lines.peek() {
            Some(next) if next.starts_with("=> ") => {
                if next[3..] != reduced {
                    failures.push(format!("{line}\n  expected {}\n  got      => {reduced}", next));
                }
                lines.next();
            }
            _ => failures.push(format!("{line}\n  has no `=>` line (run with NMSPARSE_BLESS=1)")),
        }
    }
    assert!(statements >= 40, "the corpus should hold at least 40 statements, has {statements}");
    if bless {
        std::fs::write(&path, out).unwrap();
    } else {
        assert!(failures.is_empty(), "snapshot mismatches:\n{}", failures.join("\n"));
    }
}

fn error(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn parse_errors_point_at_the_token() {
    assert_eq!(
        error("A(i,j) = B(i,k) *"),
        "expected a tensor access, a number, `(` or `-`\n  A(i,j) = B(i,k) *\n                   ^"
    );
    assert_eq!(error("A(i,j) B(i,j)"), "expected `=` or `+=` after the left-hand side\n  A(i,j) B(i,j)\n         ^");
    assert_eq!(
        error("A(i+1,j) = B(i,j)"),
        "the left-hand side takes plain index variables, not compound subscripts\n  A(i+1,j) = B(i,j)\n  ^^^^^^^^"
    );
    assert_eq!(error("A(i) = B(i) $ C(i)"), "unexpected character `$`\n  A(i) = B(i) $ C(i)\n              ^");
    assert_eq!(
        error("A(i) = B(i,j) + B(i)"),
        "`B` is used with 1 subscripts here but 2 before\n  A(i) = B(i,j) + B(i)\n                  ^^^^"
    );
    assert_eq!(error("A(i) = B(i) C(i)"), "unexpected text after the expression\n  A(i) = B(i) C(i)\n              ^");
    assert_eq!(error("A(i) = B(i*j)"), "expected an integer coefficient after `*`\n  A(i) = B(i*j)\n             ^");
    assert_eq!(
        error("A(i) = B(2)"),
        "a subscript needs an index variable; constant subscripts are not supported\n  A(i) = B(2)\n           ^"
    );
    assert_eq!(
        error("A(i) = B(0*j+i)"),
        "a coefficient of 0 removes the variable; write the subscript without it\n  A(i) = B(0*j+i)\n           ^^^^^"
    );
    assert_eq!(error("A(i) = (B(i)"), "expected `)`\n  A(i) = (B(i)\n              ^");
    assert_eq!(
        error("A(i) = B(i,)"),
        "expected an index variable or an integer in the subscript\n  A(i) = B(i,)\n             ^"
    );
    assert_eq!(error("A(i) = 1e999 * B(i)"), "malformed or out-of-range number\n  A(i) = 1e999 * B(i)\n         ^^^^^");
    assert_eq!(
        error("A(i) = sum(2, B(i))"),
        "expected the summed index variable\n  A(i) = sum(2, B(i))\n             ^"
    );
    assert_eq!(error(""), "expected a tensor name\n  \n  ^");
    assert!(error("A(ı) = B(é").contains("expected `,` or `)` in the subscripts"));
}

fn decls() -> Declarations {
    Declarations::new()
        .tensor("A", TensorType::dense(&[4, 5]))
        .tensor("B", TensorType::sparse(&[4, 6], Format::csr()))
        .tensor("C", TensorType::sparse(&[6, 5], Format::csc()))
        .tensor("I", TensorType::sparse(&[10, 10], Format::csf(2)))
        .tensor("F", TensorType::dense(&[3, 3]))
        .tensor("O", TensorType::dense(&[8, 8]))
}

fn semantic(text: &str, d: &Declarations) -> SemanticError {
    parse(text).unwrap().check(d).unwrap_err()
}

#[test]
fn types_and_sizes_are_inferred() {
    let s = parse("A(i,j) = B(i,k) * C(k,j)").unwrap();
    let t = s.check(&decls()).unwrap();
    let size = |n: &str| t.sizes[nm_ir::id::Id::index(s.var_named(n).unwrap())];
    assert_eq!((size("i"), size("j"), size("k")), (4, 5, 6));
    assert_eq!(t.tensors[1].format, Some(Format::csr()));
    // A valid 2-D convolution: 8 + 3 - 1 = 10.
    let s = parse("O(i,j) = I(i+p,j+q) * F(p,q)").unwrap();
    assert_eq!(s.check(&decls()).unwrap().sizes, vec![8, 8, 3, 3]);
    // Strided: 2*3 + 2 = 8 < 10 with O reduced to 4x4 by -d sizes.
    let d = decls().tensor("O", TensorType::dense(&[4, 4]));
    assert!(parse("O(i,j) = I(2*i+p,2*j+q) * F(p,q)").unwrap().check(&d).is_ok());
}

#[test]
fn semantic_errors_name_the_problem() {
    let e = semantic("A(i,j) = B(i,k) * D(k,j)", &decls());
    assert_eq!(
        e.to_string(),
        "unknown tensor `D`: declare its shape (and format)\n  A(i,j) = B(i,k) * D(k,j)\n                    ^^^^^^"
    );
    let d = decls().tensor("D", TensorType::dense(&[6]));
    let e = semantic("A(i,j) = B(i,k) * D(k,j)", &d);
    assert!(e.to_string().starts_with("`D` is declared with 1 dimensions but accessed with 2 subscripts"), "{e}");
    let e = semantic("A(i,j) = B(i,j)", &decls());
    assert_eq!(
        e.to_string(),
        "index variable `j` has size 5 from `A` dimension 1 but size 6 here\n  A(i,j) = B(i,j)\n           ^^^^^^"
    );
    let e = semantic("O(i,j) = I(i+p,j+q) * F(p,q)", &decls().index_size("p", 4));
    assert!(e.to_string().starts_with("index variable `p` has size 4 from its declaration but size 3 here"), "{e}");
    let e = semantic("O(i,j) = I(i+p,j+q) * F(p,q)", &decls().index_size_from("p", 4, "-d=p:4"));
    assert!(e.to_string().starts_with("index variable `p` has size 4 from -d=p:4 but size 3 here"), "{e}");
    let d = decls().tensor("x", TensorType::dense(&[10]));
    let e = semantic("a2 = x(i+p)", &d.clone().tensor("a2", TensorType::dense(&[])));
    assert!(matches!(&e, SemanticError::CannotInfer { var, .. } if var == "i"));
    assert_eq!(
        e.to_string(),
        "the size of index variable `i` cannot be inferred: it appears only in compound subscripts; give it with `-d=i:SIZE`\n  a2 = x(i+p)\n       ^^^^^^"
    );
    // `i` ranges over the values that keep `I(i+p, ...)` in bounds: 8 of O's 9 rows.
    let s = parse("O(i,j) = I(i+p,j+q) * F(p,q)").unwrap();
    assert_eq!(s.check(&decls().tensor("O", TensorType::dense(&[9, 8]))).unwrap().sizes, vec![8, 8, 3, 3]);
    // A size given for it asks for more values than that.
    let d = decls().tensor("O", TensorType::dense(&[9, 8])).index_size_from("i", 9, "-d=i:9");
    assert_eq!(
        semantic("O(i,j) = I(i+p,j+q) * F(p,q)", &d).to_string(),
        "index variable `i` has size 9 from -d=i:9 but size 8 here\n  O(i,j) = I(i+p,j+q) * F(p,q)\n           ^^^^^^^^^^"
    );
    // An offset past the dimension leaves no value in bounds.
    let d = decls().tensor("x", TensorType::dense(&[10])).tensor("y", TensorType::dense(&[3]));
    let e = semantic("y(i) = x(i+12)", &d);
    assert!(e.to_string().starts_with("subscript 0 of `x` reaches 12..=14, outside 0..10"), "{e}");
    let d = decls().tensor("x", TensorType::dense(&[10])).tensor("y", TensorType::dense(&[3]));
    let e = semantic("y(i) = x(i-1)", &d);
    assert_eq!(
        e.to_string(),
        "subscript 0 of `x` reaches -1..=1, outside 0..10; with valid convolution semantics the index variable sizes must keep every access in range\n  y(i) = x(i-1)\n         ^^^^^^"
    );
    let e = semantic("A(i,i) = B(i,i)", &decls());
    assert_eq!(e.to_string(), "index variable `i` appears twice on the left-hand side\n  A(i,i) = B(i,i)\n  ^^^^^^");
    // A loop over `i` inside one over `i` (the C back end once failed to compile it).
    let d = decls().tensor("x", TensorType::dense(&[5]));
    let e = semantic("y(i) = sum(i, x(i))", &d.clone().tensor("y", TensorType::dense(&[5])));
    assert_eq!(e.to_string(), "`sum(i, ...)` sums over a variable of the left-hand side");
    let e = semantic("y(i) = sum(j, sum(j, x(j)))", &d.tensor("y", TensorType::dense(&[5])));
    assert_eq!(e.to_string(), "`sum(j, ...)` inside a `sum` over the same variable");
    let d = decls().tensor("B", TensorType::sparse(&[4, 6, 2], Format::csr()));
    let e = semantic("A(i,j) = B(i,j,k)", &d);
    assert_eq!(
        e.to_string(),
        "`B` has a 3-dimensional shape but its format stores 2 dimensions\n  A(i,j) = B(i,j,k)\n           ^^^^^^^^"
    );
}

// ---- print∘parse is the identity on random well-formed statements ----

/// A statement as a plain tree, so statements built in different orders compare by meaning.
#[derive(Debug, PartialEq)]
enum Tree {
    Access(String, Vec<(Vec<(i64, String)>, i64)>),
    Literal(u64),
    Neg(Box<Tree>),
    Binary(BinaryOp, Box<Tree>, Box<Tree>),
    Sum(String, Box<Tree>),
}

fn tree(s: &IndexNotation, e: ExprId) -> Tree {
    let access = |a: &Access| {
        Tree::Access(
            s.tensor_name(a.tensor).to_string(),
            a.subscripts
                .iter()
                .map(|t| (t.terms.iter().map(|&(c, v)| (c, s.var_name(v).to_string())).collect(), t.constant))
                .collect(),
        )
    };
    match &s.exprs[e] {
        Expr::Access(a) => access(a),
        Expr::Literal(v) => Tree::Literal(v.to_bits()),
        Expr::Neg(a) => Tree::Neg(Box::new(tree(s, *a))),
        Expr::Binary(op, a, b) => Tree::Binary(*op, Box::new(tree(s, *a)), Box::new(tree(s, *b))),
        Expr::Sum(v, a) => Tree::Sum(s.var_name(*v).to_string(), Box::new(tree(s, *a))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn print_then_parse_is_the_identity(s in statement()) {
        let text = s.to_string();
        let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(tree(&back, back.rhs), tree(&s, s.rhs), "{}", text);
        prop_assert_eq!(back.op, s.op);
        prop_assert_eq!(back.to_string(), text);
    }

    #[test]
    fn the_parser_never_panics(text in "\\PC{0,40}") {
        let _ = parse(&text);
    }

    #[test]
    fn the_parser_never_panics_on_near_misses(text in "[A-Ca-c()ij,+*=/ 0-9.-]{0,30}") {
        let _ = parse(&text);
    }
}

#[test]
fn reads_in_another_order_get_views() {
    let stmt = parse("A(i,j) = B(i,j) + B(j,i) * C(j,i) + B(j,i) + B_2(i,j) + B(i,j)").unwrap();
    let (split, views) = stmt.with_views(|name| name != "C").unwrap();
    // `B_2` is taken: the view is `B_3`, shared by both transposed reads; `C` is not split.
    assert_eq!(views, vec![("B_3".to_string(), "B".to_string())]);
    assert_eq!(split.to_string(), "A(i,j) = B(i,j) + B_3(j,i) * C(j,i) + B_3(j,i) + B_2(i,j) + B(i,j)");
    // Reads that agree, a single read and the result read again need none.
    assert!(parse("A(i,j) = B(i,j) * B(i,j)").unwrap().with_views(|_| true).is_none());
    assert!(parse("A(i,j) = A(i,j) + A(j,i) + B(i,j)").unwrap().with_views(|_| true).is_none());
    assert!(parse("A(i,j) = B(i,j) + B(j,i)").unwrap().with_views(|_| false).is_none());
}
