//! The Rust API: a sparse result through the C back end, and the errors of each stage.

mod common;

use common::{Dense, operand, reference};
use nmsparse::format::generate::{Values, uniform};
use nmsparse::format::{Duplicates, Format, Tensor};
use nmsparse::{Backend, Error, Program};

#[test]
fn a_csr_sum_through_the_c_back_end() {
    let (m, n) = (30, 20);
    let b = Tensor::from_coordinates(
        &uniform::<f64>(&[m, n], 0.2, Values::SmallIntegers(9), 1),
        &Format::csr(),
        Duplicates::Reject,
    )
    .unwrap();
    let c = Tensor::from_coordinates(
        &uniform::<f64>(&[m, n], 0.2, Values::SmallIntegers(9), 2),
        &Format::csr(),
        Duplicates::Reject,
    )
    .unwrap();
    let kernel = Program::new("A(i,j) = B(i,j) + C(i,j)")
        .unwrap()
        .tensor("A", &[m, n], "csr")
        .unwrap()
        .tensor("B", &[m, n], "csr")
        .unwrap()
        .tensor("C", &[m, n], "csr")
        .unwrap()
        .compile::<f64>(Backend::Jit)
        .unwrap();
    let a = kernel.run(&[("B", &b), ("C", &c)]).unwrap();
    assert_eq!(a.format(), &Format::csr());
    let (db, dc) = (b.to_dense().unwrap(), c.to_dense().unwrap());
    let expected: Vec<f64> = db.iter().zip(&dc).map(|(x, y)| x + y).collect();
    assert_eq!(a.to_dense().unwrap(), expected);
}

#[test]
fn each_stage_reports_its_own_error() {
    let e = Program::new("y(i) = A(i,j) *").unwrap_err();
    assert!(matches!(e, Error::Parse(_)), "{e}");
    let e = Program::new("y(i) = A(i,j) * x(j)").unwrap().tensor("A", &[3, 4], "csx").unwrap_err();
    assert!(matches!(e, Error::Format(_)), "{e}");
    let p = Program::new("y(i) = A(i,j) * x(j)")
        .unwrap()
        .tensor("A", &[3, 4], "csr")
        .unwrap()
        .tensor("y", &[3], "dense")
        .unwrap();
    assert!(matches!(p.compile::<f64>(Backend::Interp), Err(Error::Semantic(_))));
    let p = p.tensor("x", &[4], "dense").unwrap();
    // A declaration the statement has no use for is a typo, not something to ignore.
    let e = p.clone().tensor("Q", &[4], "dense").unwrap().compile::<f64>(Backend::Interp).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::Semantic(_)), "{e}");
    assert_eq!(e.to_string(), "`Q` is declared, but the statement has no tensor `Q` (its tensors: `y`, `A`, `x`)");
    let e = p.clone().index_size("k", 3).compile::<f64>(Backend::Interp).map(|_| ()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`k` is declared, but the statement has no index variable `k` (its index variables: `i`, `j`)"
    );
    let e = p.clone().schedule("reorder(i, q)").compile::<f64>(Backend::Interp).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::Schedule(_)), "{e}");
    // CSC is walked column by column by default; forced row by row, it is read through a
    // copy in row order.
    let csc = p.clone().tensor("A", &[3, 4], "csc").unwrap();
    assert!(csc.clone().compile::<f64>(Backend::Interp).unwrap().conversions().is_empty());
    let rows = csc.schedule("reorder(i, j)").compile::<f64>(Backend::Interp).unwrap();
    assert_eq!(rows.conversions(), &[("A".to_string(), Format::csf(2))]);
    // What no copy helps: a negative coefficient on a compressed level.
    let flipped = Program::new("y(i) = A(i,3-j) * x(j)").unwrap().tensor("A", &[3, 4], "csr").unwrap();
    let flipped = flipped.tensor("y", &[3], "dense").unwrap().tensor("x", &[4], "dense").unwrap();
    let e = flipped.compile::<f64>(Backend::Interp).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::Lower(_)), "{e}");
    let kernel = p.compile::<f64>(Backend::Interp).unwrap();
    let a = Tensor::from_dense(&[3, 4], &[0.0; 12], &Format::csr()).unwrap();
    let e = kernel.run(&[("A", &a)]).unwrap_err();
    assert_eq!(e.to_string(), "no tensor given for `x`");
}

/// Nesting is bounded (30,000 parentheses overflowed the parser's stack: an abort): the deepest
/// statement accepted compiles and runs on a test thread's 2 MiB stack through every pass, in
/// both back ends; one level more is a parse error.
#[test]
fn the_deepest_statements_accepted_compile_and_run_on_a_small_stack() {
    let chain = |terms: usize| format!("y(i) = {}", vec!["x(i)"; terms].join(" + "));
    let nested = |depth: usize| format!("y(i) = {}x(i){} * 2", "(".repeat(depth), ")".repeat(depth));
    let x = Tensor::from_dense(&[4], &[1.0, -2.0, 0.0, 3.5], &Format::dense(1)).unwrap();
    for (expr, factor) in [(chain(1000), 1000.0), (nested(999), 2.0)] {
        for backend in [Backend::Interp, Backend::Jit] {
            let p =
                Program::new(&expr).unwrap().tensor("x", &[4], "dense").unwrap().tensor("y", &[4], "dense").unwrap();
            let y = p.compile::<f64>(backend).unwrap().run(&[("x", &x)]).unwrap();
            let expected: Vec<f64> = x.values().iter().map(|v| v * factor).collect();
            assert_eq!(y.to_dense().unwrap(), expected, "{backend:?}");
        }
    }
    for expr in [chain(1002), nested(1001)] {
        let e = Program::new(&expr).unwrap_err();
        assert!(matches!(e, Error::Parse(_)) && e.to_string().contains("more than 1000"), "{e}");
    }
}

/// A CSR matrix with the same entries as `a`, its positions and coordinates stored in 64 bits
/// (what nm-format keeps for arrays whose entries exceed 32 bits).
fn widened(a: &Tensor<f64>) -> Tensor<f64> {
    use nmsparse::format::{Indices, LevelStorage};
    let (shape, format, levels, values) = a.clone().into_raw();
    let wide = |i: Indices| Indices::U64(i.to_usize().into_iter().map(|x| x as u64).collect());
    let levels = levels
        .into_iter()
        .map(|l| match l {
            LevelStorage::Compressed { pos, crd } => LevelStorage::Compressed { pos: wide(pos), crd: wide(crd) },
            other => other,
        })
        .collect();
    Tensor::from_raw(shape, format, levels, values).unwrap()
}

#[test]
fn operands_with_64_bit_indices_get_their_own_kernel_and_the_same_result() {
    let (m, n) = (40, 30);
    let a = Tensor::from_coordinates(
        &uniform::<f64>(&[m, n], 0.15, Values::SmallIntegers(9), 5),
        &Format::csr(),
        Duplicates::Reject,
    )
    .unwrap();
    let x = Tensor::from_dense(&[n], &(0..n).map(|v| v as f64 - 7.0).collect::<Vec<_>>(), &Format::dense(1)).unwrap();
    let wide = widened(&a);
    let dense = a.to_dense().unwrap();
    let expected: Vec<f64> = (0..m).map(|i| (0..n).map(|j| dense[i * n + j] * x.values()[j]).sum()).collect();
    for backend in [Backend::Interp, Backend::Jit] {
        let kernel = csr_spmv(m, n).compile::<f64>(backend).unwrap();
        // Narrow, wide, narrow again: each width finds its kernel.
        for operand in [&a, &wide, &a, &wide] {
            let y = kernel.run(&[("A", operand), ("x", &x)]).unwrap();
            assert_eq!(y.to_dense().unwrap(), expected, "{backend:?}");
        }
        // A sparse result from wide operands (SpGEMM), against a dense product.
        let b = Tensor::from_coordinates(
            &uniform::<f64>(&[n, m], 0.15, Values::SmallIntegers(9), 6),
            &Format::csr(),
            Duplicates::Reject,
        )
        .unwrap();
        let kernel = Program::new("C(i,j) = A(i,k) * B(k,j)")
            .unwrap()
            .tensor("A", &[m, n], "csr")
            .unwrap()
            .tensor("B", &[n, m], "csr")
            .unwrap()
            .tensor("C", &[m, m], "csr")
            .unwrap()
            .compile::<f64>(backend)
            .unwrap();
        let db = b.to_dense().unwrap();
        let product: Vec<f64> =
            (0..m * m).map(|ij| (0..n).map(|k| dense[ij / m * n + k] * db[k * m + ij % m]).sum()).collect();
        for (left, right) in [(&a, b.clone()), (&wide, widened(&b)), (&a, widened(&b))] {
            let c = kernel.run(&[("A", left), ("B", &right)]).unwrap();
            assert_eq!(c.to_dense().unwrap(), product, "{backend:?}");
        }
    }
}

#[test]
fn operands_of_another_shape_or_format_are_refused_before_the_kernel_runs() {
    let kernel = csr_spmv(3, 4).compile::<f64>(Backend::Jit).unwrap();
    let dense = [1., 0., 2., 0., 0., 0., 0., 3., 4., 0., 0., 5.];
    let x = Tensor::from_dense(&[4], &[1., 2., 3., 4.], &Format::dense(1)).unwrap();
    let csc = Tensor::from_dense(&[3, 4], &dense, &Format::parse("ds:1,0", 2).unwrap()).unwrap();
    let e = kernel.run(&[("A", &csc), ("x", &x)]).unwrap_err();
    assert!(matches!(&e, Error::Tensor(_)) && e.to_string().contains("`A`"), "{e}");
    let tall = Tensor::from_dense(&[4, 3], &dense, &Format::csr()).unwrap();
    let e = kernel.run(&[("A", &tall), ("x", &x)]).unwrap_err();
    assert!(matches!(&e, Error::Tensor(_)) && e.to_string().contains("[4, 3]"), "{e}");
    let a = Tensor::from_dense(&[3, 4], &dense, &Format::csr()).unwrap();
    assert_eq!(kernel.run(&[("A", &a), ("x", &x)]).unwrap().to_dense().unwrap(), vec![7., 12., 24.]);
}

/// `C(i,j) = A(i,k) * B(k,j)` with B in `nm(N,M,L)` compiles to nm-spmm's kernel (no loop IR),
/// equal to a dense product; a B in another format is refused at run time.
#[test]
fn an_nm_spmm_statement_runs_the_hand_written_kernel() {
    let (m, k, n) = (13, 24, 20);
    let dense_b: Vec<f32> = (0..k * n).map(|q| ((q * 7) % 9) as f32 - 4.0).collect();
    let b = Tensor::from_dense(&[k, n], &dense_b, &Format::dense(2)).unwrap();
    let (b, _) = b.prune(&Format::nm(2, 4, 4).unwrap()).unwrap();
    let a_values: Vec<f32> = (0..m * k).map(|q| ((q * 5) % 7) as f32 - 3.0).collect();
    let a = Tensor::from_dense(&[m, k], &a_values, &Format::dense(2)).unwrap();
    let kernel = Program::new("C(i,j) = A(i,k) * B(k,j)")
        .unwrap()
        .tensor("A", &[m, k], "dense")
        .unwrap()
        .tensor("B", &[k, n], "nm(2,4,4)")
        .unwrap()
        .tensor("C", &[m, n], "dense")
        .unwrap()
        .compile::<f32>(Backend::Jit)
        .unwrap()
        .with_threads(2);
    assert!(kernel.loops().is_none() && kernel.parallel());
    let described = kernel.describe();
    assert!(described.contains("kernel: C = A·B with B in nm(2,4,4): nm-spmm's hand-written N:M SpMM"), "{described}");
    assert!(described.contains("on 2 threads"), "{described}");
    let c = kernel.run(&[("A", &a), ("B", &b)]).unwrap();
    let pb = b.to_dense().unwrap();
    let expected: Vec<f32> =
        (0..m * n).map(|q| (0..k).map(|p| a_values[q / n * k + p] * pb[p * n + q % n]).sum()).collect();
    assert_eq!(c.to_dense().unwrap(), expected);
    let csr = Tensor::from_dense(&[k, n], &dense_b, &Format::csr()).unwrap();
    let e = kernel.run(&[("A", &a), ("B", &csr)]).unwrap_err();
    assert!(matches!(e, Error::Tensor(_)) && e.to_string().contains("`B`"), "{e}");
}

/// A schedule that parallelizes the outer loop asks for threads: without `with_threads` the
/// kernel runs on every core (as OpenMP's `parallel for` would), while the same statement
/// without that schedule runs on one; `with_threads` overrides either. The result is the same.
#[test]
fn parallelize_without_a_thread_count_runs_on_every_core() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = |n: usize| if n == 1 { "1 thread".to_string() } else { format!("{n} threads") };
    let spmv = csr_spmv(6, 5);
    let parallel = spmv.clone().schedule("parallelize(i, cpu_thread, no_races)").compile::<f64>(Backend::Jit).unwrap();
    assert!(parallel.describe().contains(&format!("compiled C, on {}\n", threads(cores))), "{}", parallel.describe());
    let plain = spmv.clone().compile::<f64>(Backend::Jit).unwrap();
    assert!(plain.describe().contains("compiled C, on 1 thread\n"), "{}", plain.describe());
    let a_dense: Vec<f64> = (0..30).map(|q| if q % 3 == 0 { q as f64 - 7.5 } else { 0.0 }).collect();
    let a = Tensor::from_dense(&[6, 5], &a_dense, &Format::csr()).unwrap();
    let x = Tensor::from_dense(&[5], &[1.0, -2.0, 0.5, 3.0, 0.25], &Format::dense(1)).unwrap();
    let expected: Vec<f64> =
        (0..6).map(|i| (0..5).map(|j| a_dense[i * 5 + j] * [1.0, -2.0, 0.5, 3.0, 0.25][j]).sum()).collect();
    for kernel in [parallel, plain.with_threads(2)] {
        assert_eq!(kernel.run(&[("A", &a), ("x", &x)]).unwrap().to_dense().unwrap(), expected, "{}", kernel.describe());
    }
    let one =
        spmv.schedule("parallelize(i, cpu_thread, no_races)").compile::<f64>(Backend::Jit).unwrap().with_threads(1);
    assert!(one.describe().contains("compiled C, on 1 thread\n"), "{}", one.describe());
}

/// `C(i,j) = A(i,k) * B(k,j)` with A in `nv24` runs nm-spmm's 2:4 kernel too (the lowering's
/// loop nest over the structured level was 11× slower at 1024³), equal to a dense product, with
/// ragged k (not a multiple of 4) and on two threads.
#[test]
fn an_nv24_spmm_statement_runs_the_hand_written_kernel() {
    let (m, k, n) = (13, 22, 20);
    let dense_a: Vec<f64> = (0..m * k).map(|q| ((q * 7) % 9) as f64 - 4.0).collect();
    let a = Tensor::from_dense(&[m, k], &dense_a, &Format::dense(2)).unwrap();
    let (a, _) = a.prune(&Format::nv24(2)).unwrap();
    let b_values: Vec<f64> = (0..k * n).map(|q| ((q * 5) % 7) as f64 - 3.0).collect();
    let b = Tensor::from_dense(&[k, n], &b_values, &Format::dense(2)).unwrap();
    let kernel = Program::new("C(i,j) = A(i,k) * B(k,j)")
        .unwrap()
        .tensor("A", &[m, k], "nv24")
        .unwrap()
        .tensor("B", &[k, n], "dense")
        .unwrap()
        .tensor("C", &[m, n], "dense")
        .unwrap()
        .compile::<f64>(Backend::Jit)
        .unwrap()
        .with_threads(2);
    assert!(kernel.loops().is_none() && kernel.parallel());
    let c = kernel.run(&[("A", &a), ("B", &b)]).unwrap();
    let pa = a.to_dense().unwrap();
    let expected: Vec<f64> =
        (0..m * n).map(|q| (0..k).map(|p| pa[q / n * k + p] * b_values[p * n + q % n]).sum()).collect();
    assert_eq!(c.to_dense().unwrap(), expected);
    assert!(expected.iter().any(|&v| v != 0.0));
}

/// `y(i) = A(i,j) * x(j)` with A (`m × n`) in CSR, x and y dense.
fn csr_spmv(m: usize, n: usize) -> Program {
    Program::new("y(i) = A(i,j) * x(j)")
        .unwrap()
        .tensor("A", &[m, n], "csr")
        .unwrap()
        .tensor("x", &[n], "dense")
        .unwrap()
        .tensor("y", &[m], "dense")
        .unwrap()
}

/// `Kernel::describe` names what runs: generated code or the interpreter, the threads it
/// really uses (and why fewer than asked), the operands read through copies.
#[test]
fn a_kernel_describes_what_runs_it() {
    let spmv = csr_spmv(5, 4);
    let jit = spmv.compile::<f64>(Backend::Jit).unwrap().with_threads(2);
    assert_eq!(
        jit.describe(),
        "statement: y(i) = A(i,j) * x(j)\nkernel: a generated loop nest, compiled C, on 2 threads\n"
    );
    let interp = spmv.compile::<f64>(Backend::Interp).unwrap().with_threads(3);
    assert!(
        interp.describe().contains(
            "kernel: a generated loop nest, run by the interpreter, on 1 thread (3 asked for: the interpreter runs sequentially)"
        ),
        "{}",
        interp.describe()
    );
    // Both operands in CSR, read in conflicting orders: one through a copy.
    let copied = Program::new("A(i,j) = B(i,j) + C(j,i)")
        .unwrap()
        .tensor("A", &[4, 4], "dense")
        .unwrap()
        .tensor("B", &[4, 4], "csr")
        .unwrap()
        .tensor("C", &[4, 4], "csr")
        .unwrap()
        .compile::<f64>(Backend::Interp)
        .unwrap();
    assert_eq!(
        copied.describe(),
        "statement: A(i,j) = B(i,j) + C(j,i)\nkernel: a generated loop nest, run by the interpreter, on 1 thread\n\
         copies: `C` (csr) is read through a copy in dcsc, which the kernel can read; declare it so to avoid the copy\n"
    );
}

/// Found by the differential tests: joining the row ranges of a sparse result panicked when
/// the last ranges had no entries (two threads, entries only in the first rows).
#[test]
fn row_ranges_with_nothing_at_the_end_join_on_two_threads() {
    let (m, n) = (40, 6);
    let mut dense = vec![0.0; m * n];
    dense[1] = 3.0;
    dense[n + 4] = -2.0;
    let b = Tensor::from_dense(&[m, n], &dense, &Format::csr()).unwrap();
    let kernel = Program::new("A(i,j) = B(i,j) * 2")
        .unwrap()
        .tensor("A", &[m, n], "csr")
        .unwrap()
        .tensor("B", &[m, n], "csr")
        .unwrap()
        .compile::<f64>(Backend::Jit)
        .unwrap()
        .with_threads(2);
    let a = kernel.run(&[("B", &b)]).unwrap();
    let expected: Vec<f64> = dense.iter().map(|v| v * 2.0).collect();
    assert_eq!(a.to_dense().unwrap(), expected);
}

/// A sparse result's row ranges: those the first worker takes, from the first range on, are
/// appended to the result in place; the others, taken from the last down, go into arrays of
/// their own, appended after. On any thread count, fused or with a separate assembly, and run
/// again on the same bound arrays (each run starting in the memory the one before left): the
/// stored entries of one thread's run, bit for bit, which are the product's.
#[test]
fn sparse_row_ranges_in_place_and_apart_store_what_one_thread_does() {
    let (m, l, n) = (97, 40, 61);
    // Skewed rows: every eleventh row of B long, many empty; integer values, so that every
    // order of summation gives the same product.
    let entry = |q: usize, wide: bool| {
        let keep = if wide { q.is_multiple_of(2) } else { q.is_multiple_of(19) || q % 23 == 5 };
        if keep { (q % 7) as f64 - 3.0 } else { 0.0 }
    };
    let bd: Vec<f64> = (0..m * l).map(|q| entry(q, (q / l) % 11 == 0)).collect();
    let cd: Vec<f64> = (0..l * n).map(|q| entry(q * 5 + 1, false)).collect();
    let mut expected = vec![0.0; m * n];
    for i in 0..m {
        for k in 0..l {
            for j in 0..n {
                expected[i * n + j] += bd[i * l + k] * cd[k * n + j];
            }
        }
    }
    let b = Tensor::from_dense(&[m, l], &bd, &Format::csr()).unwrap();
    let c = Tensor::from_dense(&[l, n], &cd, &Format::csr()).unwrap();
    for separate in [false, true] {
        let compile = |threads: usize| {
            Program::new("A(i,j) = B(i,k) * C(k,j)")
                .unwrap()
                .tensor("A", &[m, n], "csr")
                .unwrap()
                .tensor("B", &[m, l], "csr")
                .unwrap()
                .tensor("C", &[l, n], "csr")
                .unwrap()
                .separate_assembly(separate)
                .compile::<f64>(Backend::Jit)
                .unwrap()
                .with_threads(threads)
        };
        let one = compile(1).run(&[("B", &b), ("C", &c)]).unwrap();
        assert_eq!(one.to_dense().unwrap(), expected);
        assert!(one.values().len() > 2 * m, "{} entries", one.values().len());
        for threads in 2..=5 {
            let runs = compile(threads)
                .bind(&[("B", b.view()), ("C", c.view())], |bound| {
                    (0..3)
                        .map(|_| {
                            bound.compute()?;
                            bound.result()
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
                .unwrap();
            for (run, got) in runs.iter().enumerate() {
                assert_eq!(got, &one, "separate assembly {separate}, {threads} threads, run {run}");
            }
        }
    }
}

/// The worker threads are kept between calls, a pool per thread count, four pools at most:
/// kernels run from several threads at once on many thread counts (pools started, shared and
/// dropped while in use) still compute what a dense loop does.
#[test]
fn kernels_on_many_thread_counts_from_several_threads_at_once_match_a_dense_loop() {
    let (m, n) = (300, 50);
    let dense: Vec<f64> = (0..m * n).map(|q| if q % 7 == 0 { (q % 13) as f64 - 6.0 } else { 0.0 }).collect();
    let b = Tensor::from_dense(&[m, n], &dense, &Format::csr()).unwrap();
    let x_values: Vec<f64> = (0..n).map(|j| j as f64 - 20.0).collect();
    let x = Tensor::from_dense(&[n], &x_values, &Format::dense(1)).unwrap();
    let want_y: Vec<f64> = (0..m).map(|i| (0..n).map(|j| dense[i * n + j] * x_values[j]).sum()).collect();
    let want_a: Vec<f64> = dense.iter().map(|v| v * 2.0).collect();
    let spmv = Program::new("y(i) = B(i,j) * x(j)")
        .unwrap()
        .tensor("B", &[m, n], "csr")
        .unwrap()
        .tensor("x", &[n], "dense")
        .unwrap()
        .tensor("y", &[m], "dense")
        .unwrap();
    let scale = Program::new("A(i,j) = B(i,j) * 2")
        .unwrap()
        .tensor("A", &[m, n], "csr")
        .unwrap()
        .tensor("B", &[m, n], "csr")
        .unwrap();
    std::thread::scope(|s| {
        for caller in 0..3 {
            let (spmv, scale, b, x, want_y, want_a) = (&spmv, &scale, &b, &x, &want_y, &want_a);
            s.spawn(move || {
                for threads in (2..=8).chain(2..=4) {
                    let threads = threads + caller % 2;
                    // Compiled again each time (the source is cached): a kernel's thread count is set once.
                    let spmv_kernel = spmv.compile::<f64>(Backend::Jit).unwrap().with_threads(threads);
                    let y = spmv_kernel.run(&[("B", b), ("x", x)]).unwrap();
                    assert_eq!(&y.to_dense().unwrap(), want_y, "SpMV on {threads} threads");
                    let a = scale.compile::<f64>(Backend::Jit).unwrap().with_threads(threads).run(&[("B", b)]).unwrap();
                    assert_eq!(&a.to_dense().unwrap(), want_a, "CSR result on {threads} threads");
                }
            });
        }
    });
}

#[test]
fn a_sum_whose_terms_need_loop_orders_of_their_own_runs_as_several_kernels() {
    // (statement, declarations (name, shape, format), parts expected). `B(i,k) * C(k,j) +
    // D(i,j)` into CSR has no single loop order (D would be added once per k): the product
    // runs into a temporary by Gustavson's SpGEMM, then the sum merges it with D.
    type Decl<'a> = (&'a str, &'a [usize], &'a str);
    let cases: [(&str, &[Decl<'_>], usize); 6] = [
        (
            "A(i,j) = B(i,k) * C(k,j) + D(i,j)",
            &[("A", &[12, 10], "csr"), ("B", &[12, 9], "csr"), ("C", &[9, 10], "csr"), ("D", &[12, 10], "csr")],
            1,
        ),
        (
            "A(i,j) = D(i,j) * 2 - B(i,k) * C(k,j) + E(i,l) * F(l,j)",
            &[
                ("A", &[12, 10], "dcsr"),
                ("B", &[12, 9], "csr"),
                ("C", &[9, 10], "csr"),
                ("D", &[12, 10], "csr"),
                ("E", &[12, 7], "csr"),
                ("F", &[7, 10], "csc"),
            ],
            2,
        ),
        (
            "A(i,j) = -(B(i,k) * C(k,j)) + D(i,j)",
            &[("A", &[12, 10], "csr"), ("B", &[12, 9], "csr"), ("C", &[9, 10], "csr"), ("D", &[12, 10], "csr")],
            1,
        ),
        // The term `C(i) * sum(k, D(k,j))` into CSC: its `where` cannot follow D's columns
        // along `j` (a coordinate of the sparse result), the product without the explicit sum
        // can (D read through a copy by columns).
        (
            "A(i,j) = B(i,j) + C(i) * D(k,j)",
            &[("A", &[9, 10], "csc"), ("B", &[9, 10], "coo"), ("C", &[9], "dense"), ("D", &[12, 10], "nm(2,4,2)")],
            1,
        ),
        (
            "A(i,j) = B(i,j) - C(i) * D(k,j)",
            &[("A", &[9, 10], "csr"), ("B", &[9, 10], "csr"), ("C", &[9], "dense"), ("D", &[12, 10], "csr")],
            1,
        ),
        // One kernel runs it (the reduction is a scalar `where` per row): not split.
        (
            "A(i,j) = B(i,k) * c(k) + D(i,j)",
            &[("A", &[12, 10], "csr"), ("B", &[12, 9], "csr"), ("c", &[9], "s"), ("D", &[12, 10], "csr")],
            0,
        ),
    ];
    for (seed, (expr, decls, parts)) in cases.into_iter().enumerate() {
        let stmt = nmsparse::ir::notation::parse(expr).unwrap();
        let mut d = Dense { shapes: vec![Vec::new(); stmt.tensors.len()], arrays: vec![None; stmt.tensors.len()] };
        let mut operands = Vec::new();
        let mut program = Program::new(expr).unwrap();
        for (k, &(name, shape, format)) in decls.iter().enumerate() {
            program = program.tensor(name, shape, format).unwrap();
            let id = stmt.tensor_named(name).unwrap();
            d.shapes[nmsparse::ir::id::Id::index(id)] = shape.to_vec();
            if id == stmt.lhs.tensor {
                continue;
            }
            let f = Format::parse(format, shape.len()).unwrap();
            let list = uniform::<f64>(shape, 0.3, Values::SmallIntegers(4), 10 * seed as u64 + k as u64);
            let t = operand(&list, &f).unwrap();
            d.arrays[nmsparse::ir::id::Id::index(id)] = Some(t.to_dense().unwrap());
            operands.push((name, t));
        }
        let expected = reference(expr, &d);
        assert!(expected.iter().any(|&x| x != 0.0), "{expr}: an all-zero result checks little");
        let args: Vec<(&str, &Tensor<f64>)> = operands.iter().map(|(n, t)| (*n, t)).collect();
        for backend in [Backend::Interp, Backend::Jit] {
            let kernel = program.compile::<f64>(backend).unwrap_or_else(|e| panic!("{expr} {backend:?}: {e}"));
            assert_eq!(kernel.parts().len(), parts, "{expr}: {}", kernel.statement());
            let described = kernel.describe();
            assert_eq!(described.matches("first, into the temporary").count(), parts, "{described}");
            let result = kernel.with_threads(2).run(&args).unwrap_or_else(|e| panic!("{expr} {backend:?}: {e}"));
            let declared = Format::parse(decls[0].2, 2).unwrap();
            assert_eq!(result.format(), &declared, "{expr}");
            assert_eq!(result.to_dense().unwrap(), expected, "{expr} {backend:?}");
        }
    }
}

/// `A(i) = Σ_k (B(i,k) + Σ_j C(i,j,k))` into a sparse vector: the sum over `j` is a `where`
/// whose producer follows C's rows along `i`, and nothing the loop over `i` merges makes it
/// sparse. Refused while a copy or a split might do better; as a last resort the loop visits
/// every `i`, which the kernel's notes say — the result still stores only the rows where B or
/// C has an entry, with the dense reference's values.
#[test]
fn a_loop_no_operand_makes_sparse_visits_every_coordinate_with_a_note() {
    let expr = "A(i) = B(i,k) + C(i,j,k)";
    let stmt = nmsparse::ir::notation::parse(expr).unwrap();
    let decls: [(&str, &[usize], &str); 3] = [("A", &[40], "s"), ("B", &[40, 6], "csr"), ("C", &[40, 5, 6], "sds")];
    let mut d = Dense { shapes: vec![Vec::new(); stmt.tensors.len()], arrays: vec![None; stmt.tensors.len()] };
    let mut operands = Vec::new();
    let mut program = Program::new(expr).unwrap();
    for (k, &(name, shape, format)) in decls.iter().enumerate() {
        program = program.tensor(name, shape, format).unwrap();
        let id = nmsparse::ir::id::Id::index(stmt.tensor_named(name).unwrap());
        d.shapes[id] = shape.to_vec();
        if name == "A" {
            continue;
        }
        // Sparse enough that some rows of both operands are empty.
        let list = uniform::<f64>(shape, 0.02, Values::SmallIntegers(4), 70 + k as u64);
        let t = operand(&list, &Format::parse(format, shape.len()).unwrap()).unwrap();
        d.arrays[id] = Some(t.to_dense().unwrap());
        operands.push((name, t));
    }
    let expected = reference(expr, &d);
    assert!(expected.contains(&0.0) && expected.iter().any(|&x| x != 0.0), "{expected:?}: some rows empty, some not");
    let args: Vec<(&str, &Tensor<f64>)> = operands.iter().map(|(n, t)| (*n, t)).collect();
    for backend in [Backend::Interp, Backend::Jit] {
        let kernel = program.compile::<f64>(backend).unwrap_or_else(|e| panic!("{backend:?}: {e}"));
        let notes = kernel.notes();
        assert!(notes.iter().any(|n| n.contains("visits every coordinate of `i`")), "{notes:?}");
        let described = kernel.describe();
        assert!(described.contains("note: the loop over `i` visits every coordinate"), "{described}");
        let result = kernel.run(&args).unwrap();
        assert_eq!(result.to_dense().unwrap(), expected, "{backend:?}");
        // The rows where B or C has an entry, and only those.
        let rows: std::collections::BTreeSet<usize> =
            operands.iter().flat_map(|(_, t)| t.to_coordinates().coords[0].clone()).collect();
        assert_eq!(result.to_coordinates().coords[0], rows.into_iter().collect::<Vec<_>>(), "{backend:?}");
    }
}

/// A sparse result assembled in order is appended to (`nm_lower::ir::appended`): the C
/// runner grows its `crd` and values without zeroing them (a third of `A + Aᵀ`'s time), and
/// the result is the dense reference's on both back ends and on two threads.
#[test]
fn a_sparse_result_assembled_in_order_grows_without_zeroing() {
    for (expr, formats) in [
        ("A(i,j) = B(i,j) + C(i,j)", ["csr", "csr", "csr"]),
        ("A(i,j) = B(i,k) * C(k,j)", ["csr", "csr", "csr"]),
        ("A(i,j) = B(i,j) * C(i,j)", ["dcsr", "dcsr", "csr"]),
    ] {
        let stmt = nmsparse::ir::notation::parse(expr).unwrap();
        let shapes: [&[usize]; 3] = [&[300, 200], &[300, 200], &[300, 200]];
        let shapes = if expr.contains('k') { [&[300usize, 200][..], &[300, 50], &[50, 200]] } else { shapes };
        let mut program = Program::new(expr).unwrap();
        let mut d = Dense { shapes: vec![Vec::new(); stmt.tensors.len()], arrays: vec![None; stmt.tensors.len()] };
        let mut operands = Vec::new();
        for (k, name) in ["A", "B", "C"].into_iter().enumerate() {
            program = program.tensor(name, shapes[k], formats[k]).unwrap();
            let id = nmsparse::ir::id::Id::index(stmt.tensor_named(name).unwrap());
            d.shapes[id] = shapes[k].to_vec();
            if k > 0 {
                let list = uniform::<f64>(shapes[k], 0.2, Values::SmallIntegers(5), 90 + k as u64);
                let t = operand(&list, &Format::parse(formats[k], 2).unwrap()).unwrap();
                d.arrays[id] = Some(t.to_dense().unwrap());
                operands.push((name, t));
            }
        }
        let expected = reference(expr, &d);
        let args: Vec<(&str, &Tensor<f64>)> = operands.iter().map(|(n, t)| (*n, t)).collect();
        for (backend, threads) in [(Backend::Interp, 1), (Backend::Jit, 1), (Backend::Jit, 2)] {
            let kernel = program.compile::<f64>(backend).unwrap().with_threads(threads);
            let f = kernel.loops().unwrap();
            let appended: Vec<&str> = f
                .arrays
                .iter()
                .zip(nmsparse::lower::ir::appended(f))
                .filter(|(_, a)| *a)
                .map(|((_, d), _)| d.name.as_str())
                .collect();
            assert!(
                appended.contains(&"A_vals") && appended.iter().any(|n| n.ends_with("_crd")),
                "{expr}: {appended:?}"
            );
            let result = kernel.run(&args).unwrap();
            assert_eq!(result.to_dense().unwrap(), expected, "{expr} {backend:?} {threads}");
        }
    }
}

/// An operand read through a copy never makes a sparse result store more than the operands
/// reach: a vector in non-unique compressed storage (`u`) that a `where` cannot walk along the
/// loops outside it is copied, and a copy in dense storage would hold every element — explicit
/// zeros the vector does not store — so a term `- D(j)` would be produced at every `j` and the
/// result would store an entry (a zero) where no operand has one.
#[test]
fn a_copied_vector_adds_no_stored_entries_to_a_sparse_result() {
    let vector = |n: usize, entries: &[(usize, f64)], format: &str| {
        let (coords, values): (Vec<usize>, Vec<f64>) = entries.iter().copied().unzip();
        let list = nmsparse::format::CoordinateList { shape: vec![n], coords: vec![coords], values };
        Tensor::from_coordinates(&list, &Format::parse(format, 1).unwrap(), Duplicates::Reject).unwrap()
    };
    let empty = |shape: &[usize], format: &str| {
        let list = nmsparse::format::CoordinateList::<f64> {
            shape: shape.to_vec(),
            coords: vec![Vec::new(); shape.len()],
            values: Vec::new(),
        };
        Tensor::from_coordinates(&list, &Format::parse(format, shape.len()).unwrap(), Duplicates::Reject).unwrap()
    };
    let (b, c, d) = (vector(3, &[(0, 3.0)], "s"), empty(&[2, 2, 2, 3], "coo"), empty(&[2], "u"));
    for backend in [Backend::Interp, Backend::Jit] {
        let kernel = Program::new("A(i) = B(i) * C(l,k,j,i) - D(j)")
            .unwrap()
            .tensor("A", &[3], "s")
            .unwrap()
            .tensor("B", &[3], "s")
            .unwrap()
            .tensor("C", &[2, 2, 2, 3], "coo")
            .unwrap()
            .tensor("D", &[2], "u")
            .unwrap()
            .compile::<f64>(backend)
            .unwrap();
        let a = kernel.run(&[("B", &b), ("C", &c), ("D", &d)]).unwrap();
        assert_eq!(a.to_coordinates().values, Vec::<f64>::new(), "{backend:?}: nothing is reached");
        // With D holding an entry, every `A(i)` is reached through `- D(j)`.
        let d = vector(2, &[(1, 2.0)], "u");
        let a = kernel.run(&[("B", &b), ("C", &c), ("D", &d)]).unwrap();
        let dense = Dense {
            shapes: vec![vec![3], vec![3], vec![2, 2, 2, 3], vec![2]],
            arrays: vec![None, Some(b.to_dense().unwrap()), Some(vec![0.0; 24]), Some(d.to_dense().unwrap())],
        };
        let expected = reference("A(i) = B(i) * C(l,k,j,i) - D(j)", &dense);
        assert_eq!(a.to_coordinates().coords, vec![vec![0, 1, 2]], "{backend:?}");
        assert_eq!(a.to_dense().unwrap(), expected, "{backend:?}");
        assert!(expected.iter().all(|&x| x != 0.0), "{expected:?}");
    }
}

/// Compiling a program again returns its kernel without compiling anything (the process keeps
/// the kernels it compiled); a program that differs in any declaration, size, schedule or
/// value type gets a kernel of its own.
#[test]
fn a_program_compiled_again_is_the_same_kernel_and_any_change_compiles_anew() {
    let b = Tensor::from_coordinates(
        &uniform::<f64>(&[7, 5], 0.4, Values::SmallIntegers(9), 3),
        &Format::csr(),
        Duplicates::Reject,
    )
    .unwrap();
    let program = |result: &str| {
        Program::new("A(i,j) = B(i,j) * 2")
            .unwrap()
            .tensor("A", &[7, 5], result)
            .unwrap()
            .tensor("B", &[7, 5], "csr")
            .unwrap()
    };
    let first = program("csr").compile::<f64>(Backend::Jit).unwrap();
    let again = program("csr").compile::<f64>(Backend::Jit).unwrap();
    assert_eq!(first.compiled()[0].compiled().path(), again.compiled()[0].compiled().path());
    let expected: Vec<f64> = b.to_dense().unwrap().iter().map(|x| x * 2.0).collect();
    for (kernel, format) in [(first, Format::csr()), (again, Format::csr())] {
        let a = kernel.run(&[("B", &b)]).unwrap();
        assert_eq!((a.format(), a.to_dense().unwrap()), (&format, expected.clone()));
    }
    // Another result format, schedule, value type or index size: another kernel.
    let dcsr = program("dcsr").compile::<f64>(Backend::Jit).unwrap().run(&[("B", &b)]).unwrap();
    assert_eq!((dcsr.format(), dcsr.to_dense().unwrap()), (&Format::csf(2), expected.clone()));
    let scheduled =
        program("csr").schedule("parallelize(i, cpu_thread, no_races)").compile::<f64>(Backend::Jit).unwrap();
    assert!(scheduled.parallel());
    let narrow = Tensor::<f32>::from_dense(
        &[7, 5],
        &b.to_dense().unwrap().iter().map(|&x| x as f32).collect::<Vec<_>>(),
        &Format::csr(),
    )
    .unwrap();
    let a = program("csr").compile::<f32>(Backend::Jit).unwrap().run(&[("B", &narrow)]).unwrap();
    assert_eq!(a.to_dense().unwrap().iter().map(|&x| f64::from(x)).collect::<Vec<_>>(), expected);
    let window = |n: usize| {
        Program::new("O(i) = I(i+r) * F(r)")
            .unwrap()
            .tensor("I", &[8], "s")
            .unwrap()
            .tensor("F", &[3], "dense")
            .unwrap()
            .tensor("O", &[n], "dense")
            .unwrap()
            .index_size("i", n)
    };
    let i = Tensor::from_dense(&[8], &[1., 0., 2., 0., 3., 0., 4., 5.], &Format::parse("s", 1).unwrap()).unwrap();
    let f = Tensor::from_dense(&[3], &[1., 1., 1.], &Format::dense(1)).unwrap();
    for n in [6, 4, 6] {
        let o = window(n).compile::<f64>(Backend::Jit).unwrap().run(&[("I", &i), ("F", &f)]).unwrap();
        let expected: Vec<f64> = [3., 2., 5., 3., 7., 9.][..n].to_vec();
        assert_eq!(o.to_dense().unwrap(), expected, "{n}");
    }
}
