//! The format parser: every spelling of every named format, the general map syntax, and
//! errors that point at the offending character.

use nm_format::{Format, LevelExpr, LevelKind, LevelProperties};

fn parse(text: &str, order: usize) -> Format {
    Format::parse(text, order).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn error(text: &str, order: usize) -> String {
    Format::parse(text, order).unwrap_err().to_string()
}

#[test]
fn named_formats_and_their_levels() {
    assert_eq!(parse("csr", 2).to_string(), "(d0, d1) -> (d0 : dense, d1 : compressed)");
    assert_eq!(parse("csc", 2).to_string(), "(d0, d1) -> (d1 : dense, d0 : compressed)");
    assert_eq!(parse("dcsr", 2).to_string(), "(d0, d1) -> (d0 : compressed, d1 : compressed)");
    assert_eq!(parse("dcsc", 2).to_string(), "(d0, d1) -> (d1 : compressed, d0 : compressed)");
    assert_eq!(
        parse("coo", 3).to_string(),
        "(d0, d1, d2) -> (d0 : compressed(nonunique), d1 : singleton(nonunique), d2 : singleton)"
    );
    assert_eq!(parse("csf", 3), Format::csf(3));
    assert_eq!(parse("dense", 4), Format::dense(4));
    assert_eq!(parse("nv24", 2).to_string(), "(d0, d1) -> (d0 : dense, d1 : structured[2, 4])");
    assert_eq!(
        parse("nm(2, 8, 32)", 2).to_string(),
        "(d0, d1) -> (d0 floordiv 8 : dense, d1 floordiv 32 : dense, d0 mod 8 : structured[2, 8], d1 mod 32 : dense)"
    );
    assert_eq!(
        parse("bcsr(4)", 2).to_string(),
        "(d0, d1) -> (d0 floordiv 4 : dense, d1 floordiv 4 : compressed, d0 mod 4 : dense, d1 mod 4 : dense)"
    );
    for name in ["csr", "csc", "dcsr", "dcsc", "coo", "nv24", "nm(2,8,32)", "bcsr(4)", "dense"] {
        assert_eq!(parse(name, 2).name().as_deref(), Some(name), "{name}");
    }
    assert_eq!(parse("csf", 3).name().as_deref(), Some("csf"));
}

#[test]
fn taco_letters_and_mode_orderings() {
    assert_eq!(parse("ds", 2), Format::csr());
    assert_eq!(parse("ds:1,0", 2), Format::csc());
    assert_eq!(parse("uq", 2), Format::coo(2));
    let f = parse("dsuc:3,1,0,2", 4);
    let kinds: Vec<LevelKind> = f.levels().iter().map(|l| l.kind).collect();
    assert_eq!(
        kinds,
        vec![
            LevelKind::Dense,
            LevelKind::COMPRESSED,
            LevelKind::Compressed(LevelProperties::ORDERED_NONUNIQUE),
            LevelKind::Singleton(LevelProperties::ORDERED_NONUNIQUE)
        ]
    );
    let dims: Vec<usize> = f.levels().iter().map(|l| l.expr.dim()).collect();
    assert_eq!(dims, vec![3, 1, 0, 2]);
    assert_eq!(parse("dddddddd", 8), Format::dense(8));
}

#[test]
fn the_map_syntax_reads_what_display_writes() {
    let f = parse("(i, j) -> (j floordiv 4 : dense, i : compressed(nonordered), j mod 4 : structured[1, 2])", 2);
    assert_eq!(f.levels()[0].expr, LevelExpr::FloorDiv(1, 4));
    assert_eq!(f.levels()[1].kind, LevelKind::Compressed(LevelProperties { ordered: false, unique: true }));
    assert_eq!(f.levels()[2].kind, LevelKind::Structured { n: 1, m: 2 });
    // The level after a non-unique one must be a singleton, so this map is rejected...
    assert!(error("(i, j) -> (i : compressed(nonunique), j : dense)", 2).contains("must be a singleton"));
    // ...and the round trip holds for what is accepted.
    assert_eq!(parse(&f.to_string(), 2), f);
}

#[test]
fn errors_point_at_the_offending_text() {
    assert_eq!(
        error("csx", 2),
        "unknown format `csx`: not a format name, and `x` is not a level letter (taco's d s u z q c, or b for band)\n  csx\n    ^"
    );
    assert_eq!(error("csr", 3), "`csr` is a format for 2-dimensional tensors, not 3\n  csr\n  ^^^");
    assert_eq!(error("nm(2,4)", 2), "expected `,`\n  nm(2,4)\n        ^");
    assert_eq!(error("bcsr(0)", 2), "bcsr block size must be at least 1\n  bcsr(0)\n  ^^^^^^^");
    assert!(error("nm(5,4,1)", 2).contains("need 1 <= N <= M"));
    assert_eq!(error("ds:1,1", 2), "mode ordering must be a permutation of 0..2\n  ds:1,1\n     ^^^");
    assert_eq!(error("dss", 2), "3 level letters for a 2-dimensional tensor\n  dss\n  ^^^");
    assert_eq!(
        error("(i,j) -> (i : dense, j : compresed)", 2),
        "unknown level kind: expected dense, compressed, singleton, band or structured[N, M]\n  (i,j) -> (i : dense, j : compresed)\n                           ^^^^^^^^^"
    );
    assert_eq!(error("(i,j) -> (i : dense, k : dense)", 2).lines().last().unwrap(), "                       ^");
    assert!(error("(i,j) -> (i : dense)", 2).contains("dimension d1 is not stored by any level"));
    assert!(error("(i,j) -> (i mod 2 : dense, j : dense)", 2).contains("dimension d0 must be stored"));
    assert!(
        error("(i,j) -> (i : dense, j : singleton)", 2)
            .contains("whose parent must be a compressed or singleton level")
    );
    assert!(
        error("(i,j) -> (i : dense, j mod 4 : structured[2, 3], j floordiv 4 : dense)", 2)
            .contains("not a multiple of 3")
    );
    assert_eq!(error("csr extra", 2), "unexpected text after the format\n  csr extra\n      ^");
    assert_eq!(error("", 2), "expected a name\n  \n  ^");
}

#[test]
fn non_ascii_text_is_an_error_not_a_panic() {
    // Found by the format_parse fuzz target: a non-breaking space after `(`.
    assert!(error("(\u{a0}", 1).contains("expected a name"));
    assert!(
        error("ds\u{e9}", 2).ends_with("`é` is not a level letter (taco's d s u z q c, or b for band)\n  dsé\n    ^")
    );
    let caret = error("(i) -> (i : dénse)", 1);
    assert!(caret.ends_with("\n              ^^^^^"), "{caret:?}");
}
