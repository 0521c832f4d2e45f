//! Concrete index notation: concretize the notation corpus (snapshot), parse CIN back, CIN
//! parse errors, and print∘parse on the CIN of random statements.

use std::fmt::Write as _;
use std::path::PathBuf;

use nm_format::Format;
use nm_ir::concrete::{LoopOrderTarget, concretize, concretize_for, parse_concrete};
use nm_ir::notation::{Declarations, TensorType, parse};
use proptest::prelude::*;

mod common;
use common::statement;

/// Every statement of the notation corpus, concretized; `NMSPARSE_BLESS=1` rewrites the file.
#[test]
fn concretize_snapshots() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let corpus = std::fs::read_to_string(dir.join("notation.txt")).unwrap();
    let path = dir.join("concretize.txt");
    let mut out =
        String::from("# `concretize` of every statement in notation.txt (NMSPARSE_BLESS=1 rewrites this file)\n");
    for line in corpus.lines().filter(|l| !l.starts_with('#') && !l.starts_with("=>") && !l.trim().is_empty()) {
        let cin = concretize(&parse(line).unwrap());
        let text = cin.to_string();
        let back = parse_concrete(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.to_string(), text);
        assert_eq!(back.temporaries.len(), cin.temporaries.len(), "{text}");
        writeln!(out, "{line}\n=> {text}").unwrap();
    }
    if std::env::var_os("NMSPARSE_BLESS").is_some() {
        std::fs::write(&path, &out).unwrap();
    } else {
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(expected == out, "concretize.txt is stale; run with NMSPARSE_BLESS=1 and review the diff");
    }
}

#[test]
fn the_default_loop_order_follows_taco() {
    let cin = concretize(&parse("A(i,j) = B(i,k) * C(k,j)").unwrap());
    assert_eq!(cin.to_string(), "forall(i, forall(j, forall(k, A(i,j) += B(i,k) * C(k,j))))");
    let names: Vec<&str> = cin.loop_order().iter().map(|&v| cin.vars[v].name.as_str()).collect();
    assert_eq!(names, ["i", "j", "k"]);
    let cin = concretize(&parse("y(i) = b(i) - A(i,j) * x(j)").unwrap());
    assert_eq!(cin.to_string(), "forall(i, where(y(i) = b(i) - t0, forall(j, t0 += A(i,j) * x(j))))");
    assert_eq!(cin.temporaries.len(), 1);
    // Element-wise statements keep `=`.
    assert_eq!(
        concretize(&parse("A(i,j) = B(i,j) + C(i,j)").unwrap()).to_string(),
        "forall(i, forall(j, A(i,j) = B(i,j) + C(i,j)))"
    );
    // A temporary's name avoids the statement's own names.
    let cin = concretize(&parse("t0(i) = b(i) - A(i,j) * x(j)").unwrap());
    assert_eq!(cin.to_string(), "forall(i, where(t0(i) = b(i) - t1, forall(j, t1 += A(i,j) * x(j))))");
}

/// A convolution's default order puts a compound subscript's reduction variables before its
/// result variable, except where that would write a sparse result's levels above the last out
/// of order, or its last level through a row workspace wider than the back end takes
/// ([`LoopOrderTarget`]), or where a negative coefficient would then resolve the compressed
/// level.
#[test]
fn a_convolution_into_a_sparse_result_keeps_the_result_levels_in_order() {
    let order = |expr: &str, tensors: &[(&str, Vec<usize>, Option<Format>)]| -> String {
        let stmt = parse(expr).unwrap();
        let mut decls = Declarations::new();
        for (name, shape, format) in tensors {
            decls = decls.tensor(
                name,
                match format {
                    Some(f) => TensorType::sparse(shape, f.clone()),
                    None => TensorType::dense(shape),
                },
            );
        }
        let target = LoopOrderTarget { widest_row_workspace: 16_384 };
        let cin = concretize_for(&stmt, &stmt.check(&decls).unwrap(), &target);
        cin.loop_order().iter().map(|&v| cin.vars[v].name.clone()).collect::<Vec<_>>().join(",")
    };
    let conv2 = "O(i,j) = I(i+r, j+q) * F(r,q)";
    let image =
        |o: Option<Format>, i: Format| [("O", vec![97, 97], o), ("I", vec![99, 99], Some(i)), ("F", vec![3, 3], None)];
    assert_eq!(order(conv2, &image(None, Format::csf(2))), "r,i,q,j");
    assert_eq!(order(conv2, &image(Some(Format::csf(2)), Format::csf(2))), "i,r,q,j");
    assert_eq!(order(conv2, &image(Some(Format::csr()), Format::csr())), "i,r,q,j");
    let conv3 = "O(i,j,k) = I(i+r, j+q, k+p) * F(r,q,p)";
    let volume = |o: Option<Format>| {
        [("O", vec![7, 7, 7], o), ("I", vec![9, 9, 9], Some(Format::csf(3))), ("F", vec![3, 3, 3], None)]
    };
    assert_eq!(order(conv3, &volume(None)), "r,i,q,j,p,k");
    assert_eq!(order(conv3, &volume(Some(Format::csf(3)))), "i,j,r,q,p,k");
    let conv1 = "O(i) = I(i+r) * F(r)";
    let s = || Some(Format::parse("s", 1).unwrap());
    let vector = |n: usize, o: Option<Format>| [("O", vec![n], o), ("I", vec![n + 2], s()), ("F", vec![3], None)];
    assert_eq!(order(conv1, &vector(16_384, s())), "r,i");
    assert_eq!(order(conv1, &vector(16_385, s())), "i,r");
    assert_eq!(order(conv1, &vector(16_385, None)), "r,i");
    // A true convolution: `r` would resolve `I`'s levels with a negative coefficient.
    let flipped = "O(i,j) = I(i+2-r, j+2-q) * F(r,q)";
    assert_eq!(order(flipped, &image(Some(Format::csf(2)), Format::csf(2))), "r,i,q,j");
    assert_eq!(order("O(i) = I(i+2-r) * F(r)", &vector(16_385, s())), "r,i");
}

#[test]
fn cin_parse_errors_point_at_the_token() {
    let error = |t: &str| parse_concrete(t).unwrap_err().to_string();
    assert_eq!(
        error("forall(i A(i) = B(i))"),
        "expected `,` after the loop variable\n  forall(i A(i) = B(i))\n           ^"
    );
    assert_eq!(
        error("forall(i, A(i) = B(i)"),
        "expected `)` closing `forall(`\n  forall(i, A(i) = B(i)\n                       ^"
    );
    assert_eq!(
        error("where(A(i) = t, t = B(i)) x"),
        "unexpected text after the statement\n  where(A(i) = t, t = B(i)) x\n                            ^"
    );
    assert_eq!(
        error("where(A(i) = t t = B(i))"),
        "expected `,` between the two statements of `where`\n  where(A(i) = t t = B(i))\n                 ^"
    );
    assert_eq!(
        error("forall(i, A(i) = sum(j, B(i,j)))"),
        "`sum` belongs to index notation; in CIN a reduction is a `forall` with `+=`\n  forall(i, A(i) = sum(j, B(i,j)))\n                   ^^^^^^^^^^^^^^"
    );
    assert_eq!(
        error("forall(2, A(i) = B(i))"),
        "expected the loop's index variable\n  forall(2, A(i) = B(i))\n         ^"
    );
}

/// `forall`s nest at most 1000 deep (deeper overflowed the parser's stack: an abort).
#[test]
fn cin_nesting_is_bounded() {
    let nest = |depth: usize| {
        let vars: Vec<String> = (0..depth).map(|d| format!("v{d}")).collect();
        format!(
            "{}y(v0) = x(v0){}",
            vars.iter().map(|v| format!("forall({v}, ")).collect::<String>(),
            ")".repeat(depth)
        )
    };
    assert!(parse_concrete(&nest(1000)).is_ok());
    let e = parse_concrete(&nest(30000)).unwrap_err();
    assert!(e.to_string().contains("nested more than 1000 levels deep"), "{e}");
}

#[test]
fn sequences_and_temporaries_parse() {
    let cin = parse_concrete("forall(i, sequence(A(i) = B(i), A(i) += C(i)))").unwrap();
    assert_eq!(cin.to_string(), "forall(i, sequence(A(i) = B(i), A(i) += C(i)))");
    assert!(cin.temporaries.is_empty());
    let cin =
        parse_concrete("forall(i, where(forall(j, A(i,j) = w(j)), forall(k, forall(j, w(j) += B(i,k) * C(k,j)))))")
            .unwrap();
    let temps: Vec<&str> = cin.temporaries.iter().map(|&t| cin.tensors[t].name.as_str()).collect();
    assert_eq!(temps, ["w"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn cin_print_then_parse_is_the_identity(s in statement()) {
        let cin = concretize(&s);
        let text = cin.to_string();
        let back = parse_concrete(&text).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(back.to_string(), text);
        prop_assert!(!cin.to_string().contains("sum("));
    }

    #[test]
    fn the_cin_parser_never_panics(text in "[a-z()ij,+*=/ 0-9.-]{0,40}") {
        let _ = parse_concrete(&text);
    }
}
