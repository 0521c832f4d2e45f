//! The kernels of the lowering issue, end to end through the public API, on both back ends,
//! in f32 and f64, against a dense reference evaluated here: every index variable enumerated,
//! `sum`s placed where taco's rule puts them (`with_reductions`) and evaluated by brute force,
//! with no nmsparse code between the dense arrays and the expected result. Values are small
//! integers, so every sum is exact in both precisions and results compare with `==`.

use nmsparse::format::generate::{Values, uniform};
use nmsparse::format::io::read_tensor;
use nmsparse::format::{CoordinateList, Format, Tensor};
mod common;

use common::{Dense, operand, reference, to_f32};
use nmsparse::ir::id::Id;
use nmsparse::ir::notation::parse;
use nmsparse::{Backend, Program};

/// One tensor of a case: name, shape, format (`"dense"`, `"csr"`, ...), density when generated.
type Decl<'a> = (&'a str, &'a [usize], &'a str, f64);

/// Runs `expr` (with `schedule`) on generated operands in both back ends and precisions, on 1
/// and 2 threads, and compares each result with the dense reference.
fn check(expr: &str, schedule: &str, decls: &[Decl<'_>], seed: u64) {
    let stmt = parse(expr).unwrap();
    let mut d = Dense { shapes: vec![Vec::new(); stmt.tensors.len()], arrays: vec![None; stmt.tensors.len()] };
    let mut operands: Vec<(String, Tensor<f64>)> = Vec::new();
    for (k, &(name, shape, format, density)) in decls.iter().enumerate() {
        let id = stmt.tensor_named(name).unwrap_or_else(|| panic!("{name} is not in {expr}"));
        d.shapes[id.index()] = shape.to_vec();
        if id == stmt.lhs.tensor {
            continue;
        }
        let f = Format::parse(format, shape.len().max(1)).unwrap();
        let list = uniform::<f64>(shape, density, Values::SmallIntegers(4), seed + k as u64);
        let t = operand(&list, &f).unwrap();
        d.arrays[id.index()] = Some(t.to_dense().unwrap());
        operands.push((name.to_string(), t));
    }
    let expected = reference(expr, &d);
    run_all::<f64>(expr, schedule, decls, &operands, &expected);
    let as_f32: Vec<(String, Tensor<f32>)> = operands.iter().map(|(n, t)| (n.clone(), to_f32(t))).collect();
    run_all::<f32>(expr, schedule, decls, &as_f32, &expected);
}

fn run_all<T: nmsparse::Scalar + Into<f64>>(
    expr: &str,
    schedule: &str,
    decls: &[Decl<'_>],
    operands: &[(String, Tensor<T>)],
    expected: &[f64],
) {
    for backend in [Backend::Interp, Backend::Jit] {
        for threads in [1, 2] {
            let mut p = program(expr, decls);
            if !schedule.is_empty() {
                p = p.schedule(schedule);
            }
            let kernel = p.compile::<T>(backend).unwrap_or_else(|e| panic!("{expr}: {e}")).with_threads(threads);
            let args: Vec<(&str, &Tensor<T>)> = operands.iter().map(|(n, t)| (n.as_str(), t)).collect();
            let got = kernel.run(&args).unwrap_or_else(|e| panic!("{expr}: {e}"));
            let got: Vec<f64> = got.to_dense().unwrap().into_iter().map(Into::into).collect();
            let what = format!("{expr} [{schedule}] {backend:?} {} {threads} threads", std::any::type_name::<T>());
            assert_eq!(got, expected, "{what}");
        }
    }
}

#[test]
fn spmv_in_every_format_and_with_a_sparse_vector() {
    for format in ["csr", "csc", "coo", "dcsr"] {
        check(
            "y(i) = A(i,j) * x(j)",
            "",
            &[("y", &[23], "dense", 1.0), ("A", &[23, 17], format, 0.2), ("x", &[17], "dense", 1.0)],
            1,
        );
    }
    check(
        "y(i) = A(i,j) * x(j)",
        "",
        &[("y", &[23], "dense", 1.0), ("A", &[23, 17], "csr", 0.2), ("x", &[17], "s", 0.4)],
        2,
    );
    check(
        "y(i) = b(i) - A(i,j) * x(j)",
        "",
        &[
            ("y", &[23], "dense", 1.0),
            ("b", &[23], "dense", 1.0),
            ("A", &[23, 17], "csr", 0.2),
            ("x", &[17], "dense", 1.0),
        ],
        3,
    );
}

#[test]
fn spmm_spgemm_and_sddmm() {
    check(
        "C(i,j) = A(i,k) * B(k,j)",
        "",
        &[("C", &[19, 8], "dense", 1.0), ("A", &[19, 13], "csr", 0.2), ("B", &[13, 8], "dense", 1.0)],
        4,
    );
    for format in ["csr", "dcsr"] {
        check(
            "C(i,j) = A(i,k) * B(k,j)",
            "",
            &[("C", &[19, 21], format, 1.0), ("A", &[19, 13], format, 0.2), ("B", &[13, 21], format, 0.2)],
            5,
        );
    }
    check(
        "C(i,j) = A(i,j) * X(i,k) * Y(j,k)",
        "",
        &[
            ("C", &[19, 21], "csr", 1.0),
            ("A", &[19, 21], "csr", 0.2),
            ("X", &[19, 6], "dense", 1.0),
            ("Y", &[21, 6], "dense", 1.0),
        ],
        6,
    );
}

#[test]
fn element_wise_operations_of_sparse_matrices() {
    for expr in [
        "A(i,j) = B(i,j) + C(i,j)",
        "A(i,j) = B(i,j) - C(i,j)",
        "A(i,j) = B(i,j) * C(i,j)",
        "A(i,j) = 2 * B(i,j) + 3 * C(i,j)",
    ] {
        for format in ["csr", "dcsr"] {
            check(
                expr,
                "",
                &[("A", &[17, 15], format, 1.0), ("B", &[17, 15], format, 0.3), ("C", &[17, 15], "csr", 0.3)],
                7,
            );
        }
    }
}

#[test]
fn tensor_kernels_mttkrp_ttv_ttm_inner_products_and_chains() {
    check(
        "A(i,l) = B(i,j,k) * C(j,l) * D(k,l)",
        "",
        &[
            ("A", &[7, 5], "dense", 1.0),
            ("B", &[7, 8, 9], "csf", 0.1),
            ("C", &[8, 5], "dense", 1.0),
            ("D", &[9, 5], "dense", 1.0),
        ],
        8,
    );
    check(
        "A(i,j) = B(i,j,k) * c(k)",
        "",
        &[("A", &[7, 8], "csr", 1.0), ("B", &[7, 8, 9], "csf", 0.1), ("c", &[9], "dense", 1.0)],
        9,
    );
    check(
        "A(i,j,l) = B(i,j,k) * C(k,l)",
        "",
        &[("A", &[7, 8, 4], "dense", 1.0), ("B", &[7, 8, 9], "csf", 0.1), ("C", &[9, 4], "dense", 1.0)],
        10,
    );
    check("a = b(i) * c(i)", "", &[("a", &[], "dense", 1.0), ("b", &[40], "s", 0.3), ("c", &[40], "s", 0.3)], 11);
    check(
        "a = B(i,j) * C(i,j)",
        "",
        &[("a", &[], "dense", 1.0), ("B", &[9, 8], "csr", 0.3), ("C", &[9, 8], "dense", 1.0)],
        12,
    );
    check(
        "A(i,j) = B(i,k) * C(k,l) * D(l,j)",
        "",
        &[
            ("A", &[6, 7], "dense", 1.0),
            ("B", &[6, 5], "csr", 0.4),
            ("C", &[5, 4], "dense", 1.0),
            ("D", &[4, 7], "dense", 1.0),
        ],
        13,
    );
}

#[test]
fn real_matrices_from_the_repository_data() {
    // SpMV and A·A on the shipped samples, in f64 against the dense reference.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    for name in ["banded_symmetric.mtx", "power_law_500.mtx"] {
        let a: Tensor<f64> = read_tensor(dir.join(name), "csr").unwrap();
        let (m, n) = (a.shape()[0], a.shape()[1]);
        let d = a.to_dense().unwrap();
        let x = Tensor::from_dense(&[n], &(0..n).map(|j| (j % 5) as f64 - 2.0).collect::<Vec<_>>(), &Format::dense(1))
            .unwrap();
        let xd = x.to_dense().unwrap();
        let decls: &[Decl<'_>] = &[("A", &[m, n], "csr", 1.0), ("x", &[n], "dense", 1.0), ("y", &[m], "dense", 1.0)];
        let kernel = program("y(i) = A(i,j) * x(j)", decls).compile::<f64>(Backend::Jit).unwrap();
        let y = kernel.run(&[("A", &a), ("x", &x)]).unwrap().to_dense().unwrap();
        let expected: Vec<f64> = (0..m).map(|i| (0..n).map(|j| d[i * n + j] * xd[j]).sum()).collect();
        // Long rows are summed in partial sums (nm-lower's `partial_sums`), another order than
        // the reference's: equal within the rounding of a sum of these terms.
        let magnitude: Vec<f64> = (0..m).map(|i| (0..n).map(|j| (d[i * n + j] * xd[j]).abs()).sum()).collect();
        for i in 0..m {
            assert!(
                (y[i] - expected[i]).abs() <= 1e-13 * magnitude[i],
                "{name} row {i}: {} against {}",
                y[i],
                expected[i]
            );
        }
        if m == n {
            let kernel = Program::new("C(i,j) = A(i,k) * B(k,j)")
                .unwrap()
                .tensor("A", &[m, n], "csr")
                .unwrap()
                .tensor("B", &[m, n], "csr")
                .unwrap()
                .tensor("C", &[m, n], "csr")
                .unwrap()
                .compile::<f64>(Backend::Jit)
                .unwrap()
                .with_threads(2);
            let c = kernel.run(&[("A", &a), ("B", &a)]).unwrap().to_dense().unwrap();
            let expected: Vec<f64> =
                (0..m * n).map(|x| (0..n).map(|k| d[(x / n) * n + k] * d[k * n + x % n]).sum()).collect();
            assert_eq!(c, expected, "{name}");
        }
    }
}

/// COO's first level repeats its coordinate once per entry of the row: merged with another
/// operand or appended to a sparse result, it is walked segment by segment.
#[test]
fn coo_operands_merge_and_assemble_segment_by_segment() {
    for (a, b, c) in [("csr", "coo", "csr"), ("dcsr", "coo", "coo"), ("dense", "coo", "dcsr")] {
        for expr in ["A(i,j) = B(i,j) + C(i,j)", "A(i,j) = B(i,j) * C(i,j)", "A(i,j) = B(i,j) - 2 * C(i,j)"] {
            check(expr, "", &[("A", &[19, 13], a, 1.0), ("B", &[19, 13], b, 0.3), ("C", &[19, 13], c, 0.25)], 11);
        }
    }
    // Into a sparse result: a copy, a row-reduction, an SpMV with a sparse result vector.
    check("A(i,j) = B(i,j)", "", &[("A", &[19, 13], "csr", 1.0), ("B", &[19, 13], "coo", 0.3)], 12);
    check(
        "y(i) = B(i,j) * x(j)",
        "",
        &[("y", &[19], "s", 1.0), ("B", &[19, 13], "coo", 0.2), ("x", &[13], "dense", 1.0)],
        13,
    );
    // Three levels: two of them non-unique.
    check(
        "A(i,j,k) = B(i,j,k) + C(i,j,k)",
        "",
        &[("A", &[7, 6, 5], "csf", 1.0), ("B", &[7, 6, 5], "coo", 0.2), ("C", &[7, 6, 5], "csf", 0.2)],
        14,
    );
}

/// taco's `precompute` with a dense workspace: the workspace the consumer copies out becomes
/// the row buffer (dense result) or the row workspace (sparse result).
#[test]
fn precompute_into_a_dense_workspace() {
    let schedule = "reorder(k, j); precompute(A(i,k) * B(k,j), j, jw, w)";
    for (c, b) in [("dense", "dense"), ("dense", "csr"), ("csr", "csr"), ("dcsr", "csr")] {
        check(
            "C(i,j) = A(i,k) * B(k,j)",
            schedule,
            &[("C", &[19, 21], c, 1.0), ("A", &[19, 13], "csr", 0.2), ("B", &[13, 21], b, 0.3)],
            21,
        );
    }
    // A whole vector as the workspace, computed before the loop that copies it out.
    check(
        "y(i) = A(i,j) * x(j)",
        "precompute(A(i,j) * x(j), i, iw, t)",
        &[("y", &[17], "dense", 1.0), ("A", &[17, 9], "csr", 0.3), ("x", &[9], "dense", 1.0)],
        22,
    );
}

/// `split` of a loop over dense coordinates (taco's CPU schedules), with the block loop in
/// parallel where the result is dense; sizes that are and are not multiples of the factor.
#[test]
fn split_loops_over_dense_coordinates() {
    for (rows, factor) in [(17, 4), (16, 4), (5, 8)] {
        // Either loop of the split on threads (the inner one's last block ended in a `break`,
        // which OpenMP refuses: C that did not compile); `cpu_vector` is left to the compiler.
        for parallel in ["i0, cpu_thread", "i1, cpu_thread", "i1, cpu_vector"] {
            let schedule = format!("split(i, i0, i1, {factor}); parallelize({parallel}, no_races)");
            check(
                "y(i) = A(i,j) * x(j)",
                &schedule,
                &[("y", &[rows], "dense", 1.0), ("A", &[rows, 9], "csr", 0.3), ("x", &[9], "dense", 1.0)],
                31,
            );
        }
        check(
            "C(i,j) = A(i,k) * B(k,j)",
            &format!("split(i, i0, i1, {factor}); reorder(i0, i1, k, j)"),
            &[("C", &[rows, 7], "csr", 1.0), ("A", &[rows, 9], "csr", 0.3), ("B", &[9, 7], "csr", 0.3)],
            32,
        );
    }
    // Blocks of an operand's positions on threads, where every position writes its own element
    // of the result (a loop bound computed at run time: OpenMP takes it declared outside).
    for parallel in ["f0", "f1"] {
        check(
            "C(i,j) = A(i,j) * B(i,j)",
            &format!(
                "fuse(i, j, f); pos(f, fp, A); split(fp, f0, f1, 4); parallelize({parallel}, cpu_thread, no_races)"
            ),
            &[("C", &[13, 11], "dense", 1.0), ("A", &[13, 11], "csr", 0.4), ("B", &[13, 11], "dense", 1.0)],
            34,
        );
    }
    check(
        "C(i,j) = A(i,k) * B(k,j)",
        "reorder(k, j); split(j, j0, j1, 3)",
        &[("C", &[6, 10], "dense", 1.0), ("A", &[6, 5], "csr", 0.4), ("B", &[5, 10], "dense", 1.0)],
        33,
    );
}

/// Found by the differential tests once their schedules took `parallelize`: a loop on threads
/// whose iterations append to a sparse result (assembled in order, through a row workspace or
/// a sparse workspace) emitted `return 1` (a failed grow or flush) inside an OpenMP loop — C
/// that does not compile — and would have raced on the result's one length. Such a loop runs
/// on one thread, with a note; the results match the dense reference.
#[test]
fn a_parallel_loop_that_appends_to_a_sparse_result_runs_on_one_thread() {
    let cases: [(&str, &str, &[Decl<'_>]); 4] = [
        // Assembled in order (CSC result along `i`, COO operand).
        (
            "A(i,j) = B(i,j) * C(i)",
            "parallelize(i, cpu_thread, ignore_races)",
            &[("A", &[9, 7], "csc", 1.0), ("B", &[9, 7], "coo", 0.4), ("C", &[9], "dense", 1.0)],
        ),
        // A sparse vector grown in the parallel loop.
        (
            "A(i) = B(i) * C(j)",
            "parallelize(i, cpu_thread, no_races)",
            &[("A", &[11], "s", 1.0), ("B", &[11], "dense", 1.0), ("C", &[5], "s", 0.6)],
        ),
        // Scattered into a sparse workspace (DCSR result, the inner loop on threads).
        (
            "A(i,j) = B(i,j) - C(j,i)",
            "parallelize(j, cpu_thread, no_races)",
            &[("A", &[6, 6], "coo", 1.0), ("B", &[6, 6], "dcsr", 0.5), ("C", &[6, 6], "csr", 0.5)],
        ),
        // Gustavson's row workspace, the column loop on threads.
        (
            "A(i,j) = B(i,k) * C(k,j)",
            "parallelize(j, cpu_thread, no_races)",
            &[("A", &[7, 8], "csr", 1.0), ("B", &[7, 5], "csr", 0.4), ("C", &[5, 8], "csr", 0.4)],
        ),
    ];
    for (expr, schedule, decls) in cases {
        check(expr, schedule, decls, 41);
        let notes = notes(expr, schedule, decls);
        assert!(
            notes.iter().any(|n| n.contains("runs on one thread: its iterations append to the sparse result `A`")),
            "{expr} [{schedule}]: {notes:?}"
        );
    }
}

/// A loop put on threads that co-iterates sparse operands in order (a `while` over their
/// coordinates, or a dense loop advancing a sparse operand's iterator) cannot be split by
/// OpenMP: it ran on one thread with no word said. It still does, with a note; a loop that
/// does get threads (a dense result's rows, also where they advance a sparse iterator; a CSR
/// operand's positions) gets no such note.
#[test]
fn a_parallel_loop_that_co_iterates_in_order_says_it_runs_on_one_thread() {
    let sequential: [(&str, &str, &[Decl<'_>]); 2] = [
        // A dense loop over `j` advancing the iterator of C's row.
        (
            "A(i,j) = B(i,j) + C(i,j)",
            "parallelize(j, cpu_thread, no_races)",
            &[("A", &[5, 9], "dense", 1.0), ("B", &[5, 9], "dense", 1.0), ("C", &[5, 9], "csr", 0.4)],
        ),
        // A `while` merging two sparse vectors inside a row loop.
        (
            "A(i,j) = B(i,j) + C(i,j)",
            "parallelize(j, cpu_thread, no_races)",
            &[("A", &[5, 9], "dense", 1.0), ("B", &[5, 9], "csr", 0.5), ("C", &[5, 9], "csr", 0.5)],
        ),
    ];
    let threaded: [(&str, &str, &[Decl<'_>]); 3] = [
        // Row ranges, each starting C's iterator at its first row.
        (
            "A(i) = B(i) + C(i)",
            "parallelize(i, cpu_thread, no_races)",
            &[("A", &[13], "dense", 1.0), ("B", &[13], "dense", 1.0), ("C", &[13], "s", 0.4)],
        ),
        (
            "y(i) = A(i,j) * x(j)",
            "parallelize(i, cpu_thread, no_races)",
            &[("y", &[9], "dense", 1.0), ("A", &[9, 6], "dcsr", 0.5), ("x", &[6], "dense", 1.0)],
        ),
        (
            "y(i) = A(i,j) * x(j)",
            "parallelize(i, cpu_thread, no_races)",
            &[("y", &[9], "dense", 1.0), ("A", &[9, 6], "csr", 0.5), ("x", &[6], "dense", 1.0)],
        ),
    ];
    let note = "runs on one thread: its loop co-iterates sparse operands";
    for (expected, cases) in [(true, &sequential[..]), (false, &threaded[..])] {
        for &(expr, schedule, decls) in cases.iter() {
            check(expr, schedule, decls, 43);
            let notes = notes(expr, schedule, decls);
            assert_eq!(notes.iter().any(|n| n.contains(note)), expected, "{expr} [{schedule}]: {notes:?}");
        }
    }
}

/// The outer loop over a dense coordinate of the result runs as row ranges on several
/// threads also where it advances sparse iterators (a sparse vector, a DCSR operand's first
/// level merged with dense operands): each range's iterators start at the range's first entry,
/// found by a search. They ran on one thread. Dense and CSR results, against the reference
/// on 1 and 2 threads, and the kernel says it runs on two.
#[test]
fn row_ranges_start_the_outer_sparse_iterators_at_their_first_row() {
    let cases: [(&str, &[Decl<'_>]); 4] = [
        ("a(i) = b(i) + c(i)", &[("a", &[77], "dense", 1.0), ("b", &[77], "dense", 1.0), ("c", &[77], "s", 0.3)]),
        (
            "y(i) = b(i) - A(i,j) * x(j)",
            &[
                ("y", &[53], "dense", 1.0),
                ("b", &[53], "dense", 0.5),
                ("A", &[53, 17], "dcsr", 0.2),
                ("x", &[17], "dense", 1.0),
            ],
        ),
        (
            "A(i,j) = B(i,j) + C(i,j)",
            &[("A", &[41, 23], "dense", 1.0), ("B", &[41, 23], "dcsr", 0.1), ("C", &[41, 23], "dense", 0.3)],
        ),
        (
            "A(i,j) = B(i,j) + C(i,j)",
            &[("A", &[41, 23], "csr", 1.0), ("B", &[41, 23], "dcsr", 0.1), ("C", &[41, 23], "csr", 0.3)],
        ),
    ];
    for (seed, (expr, decls)) in cases.iter().enumerate() {
        check(expr, "", decls, 90 + seed as u64);
        let kernel = program(expr, decls).compile::<f64>(Backend::Jit).unwrap().with_threads(2);
        assert!(kernel.describe().contains("on 2 threads"), "{expr}: {}", kernel.describe());
    }
}

/// `bound` (taco's promise of a loop's extent) runs: each kind, on plain, split and sparse
/// loops, with `unroll` and `parallelize` on the bound variable, into dense and sparse
/// results — against the dense reference on both back ends. A promise the sizes break is
/// a schedule error before anything is lowered.
#[test]
fn bound_loops_run_as_the_loops_they_bound() {
    let spmv: &[Decl<'_>] = &[("y", &[37], "dense", 1.0), ("A", &[37, 41], "csr", 0.3), ("x", &[41], "dense", 1.0)];
    for schedule in [
        "bound(i, ib, 37, max_exact)",
        "bound(i, ib, 37, min_exact); bound(j, jb, 64, max_constraint)",
        "bound(j, jb, 41, min_constraint); parallelize(i, cpu_thread, no_races)",
        "split(i, i0, i1, 8); bound(i1, ib, 8, max_exact); unroll(ib, 4)",
        "bound(i, ib, 37, max_exact); parallelize(ib, cpu_thread, no_races)",
    ] {
        check("y(i) = A(i,j) * x(j)", schedule, spmv, 47);
    }
    let spgemm: &[Decl<'_>] = &[("A", &[9, 11], "csr", 1.0), ("B", &[9, 6], "csr", 0.4), ("C", &[6, 11], "csr", 0.4)];
    check("A(i,j) = B(i,k) * C(k,j)", "bound(k, kb, 6, max_exact); bound(j, jb, 16, max_constraint)", spgemm, 48);
    let broken =
        program("y(i) = A(i,j) * x(j)", spmv).schedule("bound(j, jb, 40, max_exact)").compile::<f64>(Backend::Jit);
    let e = broken.map(|_| ()).unwrap_err();
    assert!(matches!(e, nmsparse::Error::Schedule(_)), "{e:?}");
    assert_eq!(e.to_string(), "bound(j, jb, 40, max_exact): the extent of `j` is 41, so the bound does not hold");
}

/// The program of `expr` with `decls`.
fn program(expr: &str, decls: &[Decl<'_>]) -> Program {
    let mut p = Program::new(expr).unwrap();
    for &(name, shape, format, _) in decls {
        p = p.tensor(name, shape, format).unwrap();
    }
    p
}

/// The lowering's notes on `expr` under `schedule`, compiled to C.
fn notes(expr: &str, schedule: &str, decls: &[Decl<'_>]) -> Vec<String> {
    program(expr, decls).schedule(schedule).compile::<f64>(Backend::Jit).unwrap().notes()
}

/// Structured N:M operands through the compiler: `nv24` (2:4 along rows) and element-wise
/// N:M levels, iterating exactly N kept entries per block, coordinates from the metadata
/// (bits that straddle two words included: 3-bit offsets of 1:8), ragged last blocks.
#[test]
fn structured_nm_operands_through_the_compiler() {
    for (rows, cols) in [(9, 16), (7, 22)] {
        check(
            "y(i) = A(i,j) * x(j)",
            "",
            &[("y", &[rows], "dense", 1.0), ("A", &[rows, cols], "nv24", 0.8), ("x", &[cols], "dense", 1.0)],
            41,
        );
        check(
            "C(i,j) = A(i,k) * B(k,j)",
            "",
            &[("C", &[rows, 5], "dense", 1.0), ("A", &[rows, cols], "nv24", 0.8), ("B", &[cols, 5], "dense", 1.0)],
            42,
        );
        // A chain with two N:M operands.
        check(
            "D(i,j) = A(i,k) * B(k,l) * C(l,j)",
            "",
            &[
                ("D", &[rows, 5], "dense", 1.0),
                ("A", &[rows, cols], "nv24", 0.8),
                ("B", &[cols, 8], "nv24", 0.8),
                ("C", &[8, 5], "dense", 1.0),
            ],
            44,
        );
        for pattern in [
            "(i, j) -> (i : dense, j : structured[1, 8])",
            "(i, j) -> (i : dense, j : structured[3, 8])",
            "(i, j) -> (i : dense, j : structured[2, 4])",
        ] {
            check(
                "y(i) = A(i,j) * x(j)",
                "",
                &[("y", &[rows], "dense", 1.0), ("A", &[rows, cols], pattern, 0.9), ("x", &[cols], "dense", 1.0)],
                43,
            );
        }
    }
}

/// Structured N:M levels co-iterated with other sparse operands (merged by coordinate like a
/// compressed level; the kept entries of a ragged last block's padding never reach the merge):
/// sums and products with CSR, into dense and sparse results, ragged and not.
#[test]
fn structured_nm_levels_merge_with_other_sparse_operands() {
    // 21 and 17 columns: the last block has fewer columns than N, so kept entries lie in its
    // padding.
    for (rows, cols) in [(9, 16), (7, 21), (5, 17)] {
        for (pattern, density) in [("nv24", 0.8), ("(i, j) -> (i : dense, j : structured[3, 8])", 0.9)] {
            for result in ["dense", "csr"] {
                check(
                    "A(i,j) = B(i,j) + C(i,j)",
                    "",
                    &[
                        ("A", &[rows, cols], result, 1.0),
                        ("B", &[rows, cols], pattern, density),
                        ("C", &[rows, cols], "csr", 0.3),
                    ],
                    51,
                );
                check(
                    "A(i,j) = B(i,j) * C(i,j)",
                    "",
                    &[
                        ("A", &[rows, cols], result, 1.0),
                        ("B", &[rows, cols], pattern, density),
                        ("C", &[rows, cols], "csr", 0.5),
                    ],
                    52,
                );
            }
            check(
                "y(i) = B(i,j) * x(j) + C(i,j) * x(j)",
                "",
                &[
                    ("y", &[rows], "dense", 1.0),
                    ("B", &[rows, cols], pattern, density),
                    ("C", &[rows, cols], "csr", 0.3),
                    ("x", &[cols], "s", 0.5),
                ],
                53,
            );
        }
    }
}

/// Found by the differential tests: a sparse result reduced over a loop whose body computes a
/// `where` temporary appended one entry per reduction iteration (a repeated coordinate).
#[test]
fn a_sparse_result_reduced_around_a_where_is_appended_once() {
    check(
        "A(i) = B(i,k) + C(j,k)",
        "",
        &[("A", &[3], "s", 1.0), ("B", &[3, 4], "dense", 1.0), ("C", &[2, 4], "dense", 1.0)],
        51,
    );
    check(
        "A(i) = B(i,k) - C(j) - D(k)",
        "",
        &[("A", &[4], "s", 1.0), ("B", &[4, 3], "dcsr", 0.5), ("C", &[2], "s", 0.5), ("D", &[3], "dense", 1.0)],
        52,
    );
}

/// Vector-wise N:M operands (`nm(N,M,L)`) through the compiler: iterated in their storage
/// order (windows, groups, kept rows, lanes), both variables bound at once; SpMV, SpMM with the
/// N:M operand on either side, a chain; ragged shapes.
#[test]
fn vector_wise_nm_operands_through_the_compiler() {
    for (rows, cols, pattern) in [(16, 8, "nm(2,4,4)"), (18, 10, "nm(1,4,4)"), (13, 7, "nm(3,8,2)")] {
        check(
            "y(i) = A(i,j) * x(j)",
            "",
            &[("y", &[rows], "dense", 1.0), ("A", &[rows, cols], pattern, 0.9), ("x", &[cols], "dense", 1.0)],
            61,
        );
        check(
            "C(i,j) = A(i,k) * B(k,j)",
            "",
            &[("C", &[5, cols], "dense", 1.0), ("A", &[5, rows], "dense", 1.0), ("B", &[rows, cols], pattern, 0.9)],
            62,
        );
        check(
            "C(i,j) = A(i,k) * B(k,j)",
            "",
            &[("C", &[rows, 4], "dense", 1.0), ("A", &[rows, cols], pattern, 0.9), ("B", &[cols, 4], "dense", 1.0)],
            63,
        );
        // B on the right through the compiler (a constant factor keeps it off nm-spmm's route).
        check(
            "C(i,j) = 2 * A(i,k) * B(k,j)",
            "",
            &[("C", &[5, cols], "dense", 1.0), ("A", &[5, rows], "dense", 1.0), ("B", &[rows, cols], pattern, 0.9)],
            65,
        );
        check(
            "D(i,j) = A(i,k) * B(k,l) * C(l,j)",
            "",
            &[
                ("D", &[rows, 3], "dense", 1.0),
                ("A", &[rows, cols], pattern, 0.9),
                ("B", &[cols, 6], "dense", 1.0),
                ("C", &[6, 3], "dense", 1.0),
            ],
            64,
        );
    }
}

/// Operands the lowering cannot read as declared are read through a CSF copy in a mode order
/// it can read (vector-wise N:M in a sum, CSC in a row-order merge, a CSR operand read
/// transposed into a sparse result) or a CSC one (a CSR operand of an inner product inside a
/// sum), with the same results as the dense reference.
#[test]
fn operands_unreadable_as_declared_are_read_through_a_copy() {
    let cases: Vec<(&str, Vec<Decl<'_>>)> = vec![
        (
            "A(i,j) = B(i,j) + C(i,j)",
            vec![("A", &[9, 16], "dense", 1.0), ("B", &[9, 16], "nm(2,4,4)", 0.9), ("C", &[9, 16], "csr", 0.3)],
        ),
        (
            "A(i,j) = B(i,j) * C(i,j)",
            vec![("A", &[10, 7], "csr", 1.0), ("B", &[10, 7], "csr", 0.5), ("C", &[10, 7], "csc", 0.5)],
        ),
        (
            "A(i,j) = B(i,j) + C(j,i)",
            vec![("A", &[6, 8], "csr", 1.0), ("B", &[6, 8], "csr", 0.4), ("C", &[8, 6], "csr", 0.4)],
        ),
        // The inner product the sum needs reads C by columns, and a `where` producer cannot
        // walk a compressed level along the loop outside it: C through a CSC copy.
        (
            "A(i,k) = B(i,j) * C(j,k) + D(i,k)",
            vec![
                ("A", &[7, 5], "dense", 1.0),
                ("B", &[7, 9], "csr", 0.4),
                ("C", &[9, 5], "csr", 0.4),
                ("D", &[7, 5], "csr", 0.3),
            ],
        ),
    ];
    for (seed, (expr, decls)) in cases.iter().enumerate() {
        let kernel = program(expr, decls).compile::<f64>(Backend::Interp).unwrap();
        assert!(!kernel.conversions().is_empty(), "{expr}: expected a copy (else this case tests nothing new)");
        check(expr, "", decls, 60 + seed as u64);
    }
}

/// A sparse operand read in two orders (`B(i,j) + B(j,i)`: A + Aᵀ) reads the transposed reads
/// through a view of its own, copied in the order they need; same results as the dense
/// reference.
#[test]
fn an_operand_read_in_two_orders_is_read_through_a_view() {
    let cases: Vec<(&str, Vec<Decl<'_>>)> = vec![
        ("A(i,j) = B(i,j) + B(j,i)", vec![("A", &[7, 7], "csr", 1.0), ("B", &[7, 7], "csr", 0.4)]),
        ("A(i,j) = B(i,j) * B(j,i)", vec![("A", &[9, 9], "dense", 1.0), ("B", &[9, 9], "csr", 0.6)]),
        (
            "y(i) = B(i,j) * x(j) - B(j,i) * x(j)",
            vec![("y", &[8], "dense", 1.0), ("B", &[8, 8], "dcsr", 0.4), ("x", &[8], "dense", 1.0)],
        ),
        // Both transposed reads share one view.
        ("A(i,j) = B(i,j) - B(j,i) + B(i,j) * B(j,i)", vec![("A", &[6, 6], "dcsr", 1.0), ("B", &[6, 6], "dcsr", 0.5)]),
    ];
    for (seed, (expr, decls)) in cases.iter().enumerate() {
        let kernel = program(expr, decls).compile::<f64>(Backend::Interp).unwrap_or_else(|e| panic!("{expr}: {e}"));
        assert_eq!(kernel.views().len(), 1, "{expr}: expected a view (else this case tests nothing new)");
        check(expr, "", decls, 80 + seed as u64);
    }
}

/// Gustavson's SpGEMM into rows wider than a row workspace keeps no list for (2,048): each row
/// lists its coordinates or only marks them, as the row before it was short or long, and is
/// sorted or read back from its marks, as it turns out short or long. The rows below take every
/// pair of the two choices — a short row after a long one read back from its marks, a long
/// listed one read back too, empty rows in either state — and, with five products per
/// coordinate, the branch on a first touch as well as the branchless marks.
#[test]
fn wide_rows_switch_between_listing_their_coordinates_and_marks_only() {
    let (n, k) = (5000, 7);
    let mut c = CoordinateList::<f64>::new(vec![k, n]);
    let long: Vec<usize> = (0..n).step_by(7).collect(); // 715 coordinates
    let short = [3, 64, 127, 2048, 4999];
    let medium: Vec<usize> = (50..n).step_by(151).collect(); // 33
    for (row, cols) in
        [(0, &long[..]), (1, &short[..]), (2, &medium[..])].into_iter().chain((3..7).map(|r| (r, &long[..])))
    {
        for &j in cols {
            c.push(&[row, j], ((row + j) % 5 + 1) as f64);
        }
    }
    // Which rows of C each row of B picks: short, long, short, medium, none, long, long, none,
    // all, medium, short, five times the long pattern, short and medium, the long pattern again.
    let picks: [&[usize]; 14] = [
        &[1],
        &[0],
        &[1],
        &[1, 2],
        &[],
        &[0, 1],
        &[0],
        &[],
        &[0, 1, 2],
        &[2],
        &[1],
        &[0, 3, 4, 5, 6],
        &[1, 2],
        &[0, 3, 4, 5, 6],
    ];
    let m = picks.len();
    let mut b = CoordinateList::<f64>::new(vec![m, k]);
    for (i, rows) in picks.iter().enumerate() {
        for &r in *rows {
            b.push(&[i, r], ((i + r) % 3 + 1) as f64);
        }
    }
    let expr = "A(i,j) = B(i,k) * C(k,j)";
    for result in ["csr", "dcsr"] {
        let decls: [Decl<'_>; 3] =
            [("A", &[m, n], result, 1.0), ("B", &[m, k], "csr", 1.0), ("C", &[k, n], "csr", 1.0)];
        let operands = vec![
            ("B".to_string(), operand(&b, &Format::csr()).unwrap()),
            ("C".to_string(), operand(&c, &Format::csr()).unwrap()),
        ];
        let d = Dense {
            shapes: vec![vec![m, n], vec![m, k], vec![k, n]],
            arrays: vec![None, Some(operands[0].1.to_dense().unwrap()), Some(operands[1].1.to_dense().unwrap())],
        };
        let expected = reference(expr, &d);
        let row_lengths: Vec<usize> =
            (0..m).map(|i| expected[i * n..(i + 1) * n].iter().filter(|v| **v != 0.0).count()).collect();
        assert_eq!(row_lengths[..5], [5, 715, 5, 38, 0], "the rows are as intended");
        run_all::<f64>(expr, "", &decls, &operands, &expected);
        let as_f32: Vec<(String, Tensor<f32>)> = operands.iter().map(|(n, t)| (n.clone(), to_f32(t))).collect();
        run_all::<f32>(expr, "", &decls, &as_f32, &expected);
    }
}
