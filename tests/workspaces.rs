//! Issue 5's statements — loop orders that scatter into a sparse result — through the public
//! API on both back ends, for the default workspace and every policy (pipelined or not), in
//! f64 and f32, against the independent dense reference. Values are small integers: every
//! sum is exact whatever order the workspace combines duplicates in.

mod common;

use common::{Dense, operand, reference, to_f32};
use nmsparse::format::generate::{Values, uniform};
use nmsparse::format::{Format, Tensor};
use nmsparse::ir::id::Id;
use nmsparse::ir::notation::parse;
use nmsparse::ism::{Config, Policy};
use nmsparse::{Backend, Program};

type Decl<'a> = (&'a str, &'a [usize], &'a str, f64);

/// Every policy, with a small accumulation array so that sorting and merging happen many
/// times, once inline and once on the merging thread.
fn configs() -> Vec<Option<Config>> {
    let mut out = vec![None];
    for policy in
        [Policy::Dense, Policy::Auto, Policy::Bucket, Policy::Hash(None), Policy::Coord, Policy::Map, Policy::Vector]
    {
        out.push(Some(Config { capacity: 7, ..Config::new(policy) }));
    }
    for policy in [Policy::Bucket, Policy::Hash(Some(8)), Policy::Coord] {
        out.push(Some(Config { capacity: 5, pipelined: true, double_buffered: false, ..Config::new(policy) }));
    }
    // `auto` with a first flush late enough to see duplicates (an eighth of the capacity, 128
    // components: it turns dense on dense-ish products; its early look, at 8, on products
    // that repeat four times per coordinate).
    out.push(Some(Config { capacity: 1024, ..Config::new(Policy::Auto) }));
    out
}

fn check(expr: &str, schedule: &str, decls: &[Decl<'_>], seed: u64) {
    let stmt = parse(expr).unwrap();
    let mut d = Dense { shapes: vec![Vec::new(); stmt.tensors.len()], arrays: vec![None; stmt.tensors.len()] };
    let mut operands: Vec<(String, Tensor<f64>)> = Vec::new();
    for (k, &(name, shape, format, density)) in decls.iter().enumerate() {
        let id = stmt.tensor_named(name).unwrap();
        d.shapes[id.index()] = shape.to_vec();
        if id == stmt.lhs.tensor {
            continue;
        }
        let f = Format::parse(format, shape.len()).unwrap();
        let t = operand(&uniform::<f64>(shape, density, Values::SmallIntegers(4), seed + k as u64), &f).unwrap();
        d.arrays[id.index()] = Some(t.to_dense().unwrap());
        operands.push((name.to_string(), t));
    }
    let expected = reference(expr, &d);
    assert!(expected.iter().any(|&v| v != 0.0), "{expr}: an all-zero result checks little");
    for config in configs() {
        for backend in [Backend::Interp, Backend::Jit] {
            let got = run::<f64>(expr, schedule, decls, &operands, config, backend);
            let what = format!("{expr} [{schedule}] {config:?} {backend:?}");
            assert_eq!(got, expected, "{what}");
        }
    }
    // f32 once per back end.
    let narrow: Vec<(String, Tensor<f32>)> = operands.iter().map(|(n, t)| (n.clone(), to_f32(t))).collect();
    for backend in [Backend::Interp, Backend::Jit] {
        assert_eq!(run::<f32>(expr, schedule, decls, &narrow, None, backend), expected, "{expr} f32 {backend:?}");
    }
}

fn run<T: nmsparse::Scalar + Into<f64>>(
    expr: &str,
    schedule: &str,
    decls: &[Decl<'_>],
    operands: &[(String, Tensor<T>)],
    config: Option<Config>,
    backend: Backend,
) -> Vec<f64> {
    let mut p = Program::new(expr).unwrap();
    for &(name, shape, format, _) in decls {
        p = p.tensor(name, shape, format).unwrap();
    }
    if !schedule.is_empty() {
        p = p.schedule(schedule);
    }
    if let Some(c) = config {
        p = p.workspace(c);
    }
    let kernel = p.compile::<T>(backend).unwrap_or_else(|e| panic!("{expr} {config:?}: {e}"));
    let args: Vec<(&str, &Tensor<T>)> = operands.iter().map(|(n, t)| (n.as_str(), t)).collect();
    // Twice: the second run reuses the kernel (and its workspace's memory).
    let first = kernel.run(&args).unwrap_or_else(|e| panic!("{expr} {config:?} {backend:?}: {e}"));
    let second = kernel.run(&args).unwrap();
    assert_eq!(first.to_dense().unwrap(), second.to_dense().unwrap(), "{expr}: a second run differs");
    first.to_dense().unwrap().into_iter().map(Into::into).collect()
}

#[test]
fn outer_product_spgemm() {
    for (a, b, c) in [("csr", "csc", "csr"), ("csr", "dcsc", "dcsr"), ("dcsr", "csc", "csr"), ("csc", "csc", "csr")] {
        check(
            "A(i,j) = B(i,k) * C(k,j)",
            "reorder(k,i,j)",
            &[("A", &[17, 19], a, 1.0), ("B", &[17, 13], b, 0.2), ("C", &[13, 19], c, 0.2)],
            1,
        );
    }
}

#[test]
fn spgemm_into_a_transposed_result_and_into_coo() {
    check(
        "A(j,i) = B(i,k) * C(k,j)",
        "",
        &[("A", &[19, 17], "csr", 1.0), ("B", &[17, 13], "csr", 0.2), ("C", &[13, 19], "csr", 0.2)],
        2,
    );
    for a in ["coo", "dcsr"] {
        check(
            "A(i,j) = B(i,k) * C(k,j)",
            "",
            &[("A", &[17, 19], a, 1.0), ("B", &[17, 13], "csr", 0.2), ("C", &[13, 19], "csr", 0.2)],
            3,
        );
    }
}

#[test]
fn transposition() {
    for b in ["csr", "coo", "dcsr"] {
        check("A(j,i) = B(i,j)", "", &[("A", &[23, 17], "csr", 1.0), ("B", &[17, 23], b, 0.15)], 4);
    }
}

#[test]
fn mttkrp_into_a_sparse_matrix() {
    check(
        "A(i,j) = B(k,l,i) * C(k,j) * D(l,j)",
        "",
        &[
            ("A", &[9, 5], "csr", 1.0),
            ("B", &[6, 7, 9], "csf", 0.1),
            ("C", &[6, 5], "dense", 1.0),
            ("D", &[7, 5], "dense", 1.0),
        ],
        5,
    );
}

#[test]
fn ttm_and_ttm_i_into_sparse_tensors() {
    check(
        "A(i,j,l) = B(k,i,j) * C(k,l)",
        "",
        &[("A", &[7, 8, 5], "csf", 1.0), ("B", &[6, 7, 8], "csf", 0.08), ("C", &[6, 5], "dense", 1.0)],
        6,
    );
    check(
        "A(k,j,l) = B(k,i,j) * C(i,l)",
        "",
        &[("A", &[6, 8, 5], "csf", 1.0), ("B", &[6, 7, 8], "csf", 0.08), ("C", &[7, 5], "dense", 1.0)],
        7,
    );
}

#[test]
fn precompute_into_a_sparse_workspace_from_the_schedule() {
    // Gustavson's order, with the row's products precomputed into a workspace of the named
    // policy (without one, the dense row workspace).
    for policy in ["", ", bucket", ", hash", ", hash(16)", ", coord", ", map", ", vector"] {
        check(
            "A(i,j) = B(i,k) * C(k,j)",
            &format!("precompute(B(i,k) * C(k,j), j, jw, w{policy})"),
            &[("A", &[17, 19], "csr", 1.0), ("B", &[17, 13], "csr", 0.2), ("C", &[13, 19], "csr", 0.2)],
            8,
        );
    }
}

#[test]
fn spgemm_over_the_positions_of_b_into_a_transposed_result() {
    // The schedule: B's nonzeros walked in blocks of 4 positions (fuse, pos, split),
    // each row of C scattered into the transposed result.
    let schedule = "reorder(i,k,j); fuse(i,k,f); pos(f,fpos,B); split(fpos,f0,f1,4); reorder(f0,f1,j)";
    let decls: [Decl<'_>; 3] =
        [("A", &[19, 17], "csr", 1.0), ("B", &[17, 13], "csr", 0.25), ("C", &[13, 19], "csr", 0.2)];
    check("A(j,i) = B(i,k) * C(k,j)", schedule, &decls, 9);
    // Unsplit: one loop over every position.
    check("A(j,i) = B(i,k) * C(k,j)", "reorder(i,k,j); fuse(i,k,f); pos(f,fpos,B)", &decls, 10);
    // Into a dense result (SpMV over B's positions).
    check(
        "y(i) = B(i,k) * x(k)",
        "fuse(i,k,f); pos(f,fpos,B); split(fpos,f0,f1,3)",
        &[("y", &[17], "dense", 1.0), ("B", &[17, 13], "csr", 0.3), ("x", &[13], "dense", 1.0)],
        11,
    );
}

#[test]
fn auto_turns_dense_on_a_dense_ish_outer_product() {
    // 20 products per result coordinate: the first flush (128 products on 25 coordinates)
    // turns the `auto` workspace dense.
    check(
        "A(i,j) = B(i,k) * C(k,j)",
        "reorder(k,i,j)",
        &[("A", &[5, 5], "csr", 1.0), ("B", &[5, 20], "csc", 1.0), ("C", &[20, 5], "csr", 1.0)],
        12,
    );
}

#[test]
fn auto_turns_dense_at_its_early_look() {
    // Two result coordinates, two products on them per k: the early look (8 components at a
    // capacity of 1024) sees four per coordinate and turns the workspace dense before its
    // decision would.
    check(
        "A(i,j) = B(i,k) * C(k,j)",
        "reorder(k,i,j)",
        &[("A", &[1, 2], "csr", 1.0), ("B", &[1, 30], "csc", 1.0), ("C", &[30, 2], "csr", 1.0)],
        13,
    );
}

#[test]
fn a_vector_wise_nm_operand_into_a_sparse_result() {
    // B in nm(N,M,L) is walked window by window, which writes C out of order: a workspace.
    for (b, c) in [("nm(2,4,2)", "csr"), ("nm(1,4,3)", "dcsr"), ("nm(3,8,2)", "coo")] {
        check(
            "C(i,j) = A(i,k) * B(k,j)",
            "",
            &[("C", &[9, 6], c, 1.0), ("A", &[9, 12], "dense", 0.5), ("B", &[12, 6], b, 0.7)],
            13,
        );
    }
}
