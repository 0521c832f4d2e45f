//! The `nmsparse` command end to end, on the sample data shipped in `data/`.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::command::{nmsparse, sample, scratch, stderr, stdout};
use nmsparse::format::io::read_tensor;
use nmsparse::format::{Format, Tensor};

#[test]
fn info_describes_a_symmetric_matrix() {
    let o = nmsparse(&["info", &sample("banded_symmetric.mtx")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("shape       120 × 120"), "{out}");
    // 120 diagonal entries, 2·(119+118+117) off-diagonal ones.
    assert!(out.contains("components  828 (828 nonzero)"), "{out}");
    assert!(out.contains("symmetric in the file; the data is symmetric"), "{out}");
}

#[test]
fn info_suggests_the_nm_pattern_the_data_fits() {
    let out = stdout(&nmsparse(&["info", &sample("nm_2_4_16.mtx"), "-time=3"]));
    assert!(out.contains("nm(2,4,1)"), "{out}");
    assert!(!out.contains("nv24"), "{out}");
    assert!(out.contains("read time"), "{out}");
    let out = stdout(&nmsparse(&["info", &sample("tensor_3d.tns")]));
    assert!(out.contains("shape       20 × 30 × 40") && out.contains("csf"), "{out}");
    // A matrix one row by 2^63 - 1 columns: described, with only the suggestions that fit in
    // memory (converting it into nv24 failed the whole command; CSC needs a position per column).
    let wide = scratch("wide.tns");
    std::fs::write(&wide, "# shape 1 9223372036854775807\n1 9223372036854775807 2.5\n").unwrap();
    let o = nmsparse(&["info", &wide.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("shape       1 × 9223372036854775807") && out.contains("csr"), "{out}");
    assert!(!out.contains("csc") && !out.contains("nv24"), "{out}");
    // Read as CSR, CSC or DCSR: a clear error, never the allocator's abort.
    for format in ["csr", "csc", "dcsr"] {
        let o = nmsparse(&["y(i) = A(i,j) * x(j)", &format!("-f=A:{format}"), &format!("-i=A:{}", wide.display())]);
        assert_eq!(o.status.code(), Some(1), "{format}: {}", stderr(&o));
        assert!(stderr(&o).contains("too large"), "{format}: {}", stderr(&o));
    }
}

#[test]
fn convert_writes_a_file_that_reads_back() {
    let out_path = scratch("csc.mtx");
    let o = nmsparse(&["convert", &sample("power_law_500.mtx"), out_path.to_str().unwrap(), "-f=csc"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("(csc, 3989 stored values)"), "{}", stdout(&o));
    let original: Tensor<f64> = read_tensor(sample("power_law_500.mtx"), "csr").unwrap();
    let written: Tensor<f64> = read_tensor(&out_path, "csr").unwrap();
    assert_eq!(written.to_dense().unwrap(), original.to_dense().unwrap());
}

#[test]
fn converting_into_nm_needs_fitting_data_or_prune() {
    let out_path = scratch("nv24.mtx");
    let input = sample("power_law_500.mtx");
    let o = nmsparse(&["convert", &input, out_path.to_str().unwrap(), "-f=nv24"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("prune to make it fit") && stderr(&o).contains("--prune"), "{}", stderr(&o));
    let o = nmsparse(&["convert", &input, out_path.to_str().unwrap(), "-f=nv24", "--prune"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let dropped: usize = out.split("pruned ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(dropped > 0, "{out}");
    // What was written fits nv24 and is the original minus the dropped entries.
    let pruned: Tensor<f64> = read_tensor(&out_path, "nv24").unwrap();
    let original: Tensor<f64> = read_tensor(&input, "csr").unwrap();
    assert_eq!(pruned.count_nonzeros() + dropped, original.count_nonzeros());
    let (expected, _) = original.prune(&Format::nv24(2)).unwrap();
    assert_eq!(pruned.to_dense().unwrap(), expected.to_dense().unwrap());
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let bad = scratch("bad.mtx");
    std::fs::write(&bad, "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 3 1.0\n").unwrap();
    let o = nmsparse(&["info", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("line 3: column index 3 is out of range 1..=2"), "{}", stderr(&o));
    let o = nmsparse(&["convert", &sample("power_law_500.mtx"), "x.mtx", "-f=csx"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("  csx\n    ^"), "{}", stderr(&o));
    let o = nmsparse(&["info", "/nonexistent.mtx"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("/nonexistent.mtx: No such file"), "{}", stderr(&o));
}

#[test]
fn the_expression_runner_computes_spmv_from_files() {
    use nmsparse::format::io::{read_coordinates, write_tensor};
    let a_path = sample("power_law_500.mtx");
    let a: Tensor<f64> = read_tensor(&a_path, "csr").unwrap();
    let (m, n) = (a.shape()[0], a.shape()[1]);
    let x_dense: Vec<f64> = (0..n).map(|j| (j % 7) as f64 - 3.0).collect();
    let x = Tensor::from_dense(&[n], &x_dense, &Format::dense(1)).unwrap();
    let x_path = scratch("x.tns");
    write_tensor(&x_path, &x).unwrap();
    let dense = a.to_dense().unwrap();
    let expected: Vec<f64> = (0..m).map(|i| (0..n).map(|j| dense[i * n + j] * x_dense[j]).sum()).collect();
    for backend in ["jit", "interp"] {
        let y_path = scratch(&format!("y-{backend}.tns"));
        let o = nmsparse(&[
            "y(i) = A(i,j) * x(j)",
            "-f=A:csr",
            &format!("-i=A:{a_path}"),
            &format!("-i=x:{}", x_path.display()),
            &format!("-o=y:{}", y_path.display()),
            &format!("-backend={backend}"),
            "-time=3",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stdout(&o).contains("Compute:"), "{}", stdout(&o));
        let y = read_coordinates::<f64>(&y_path).unwrap();
        let mut got = vec![0.0; m];
        for (e, &v) in y.values.iter().enumerate() {
            got[y.coords[0][e]] += v;
        }
        // Values written to the file round-trip exactly; rows summing to 0 are not written.
        let close = got.iter().zip(&expected).all(|(g, e)| (g - e).abs() <= 1e-12 * e.abs().max(1.0));
        assert!(close, "{backend}: {got:?} vs {expected:?}");
    }
}

#[test]
fn the_expression_runner_computes_spgemm_into_csr_on_two_threads() {
    // A·A for the banded sample, through the row workspace, one and two threads; the written
    // CSR result equals a dense product computed here.
    let a_path = sample("banded_symmetric.mtx");
    let a: Tensor<f64> = read_tensor(&a_path, "csr").unwrap();
    let n = a.shape()[0];
    let d = a.to_dense().unwrap();
    let expected: Vec<f64> = (0..n * n).map(|x| (0..n).map(|k| d[(x / n) * n + k] * d[k * n + x % n]).sum()).collect();
    for threads in ["1", "2"] {
        let c_path = scratch(&format!("c{threads}.mtx"));
        let source = scratch(&format!("spgemm{threads}.c"));
        let o = nmsparse(&[
            "C(i,j) = A(i,k) * B(k,j)",
            "-f=C:csr",
            "-f=A:csr",
            "-f=B:csr",
            &format!("-i=A:{a_path}"),
            &format!("-i=B:{a_path}"),
            "-s=reorder(k, j)",
            &format!("-nthreads={threads}"),
            &format!("-o=C:{}", c_path.display()),
            &format!("-write-source={}", source.display()),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(!stderr(&o).contains("note:"), "{}", stderr(&o));
        let c: Tensor<f64> = read_tensor(&c_path, "csr").unwrap();
        assert_eq!(c.to_dense().unwrap(), expected, "{threads} threads");
        // Rows this narrow keep no list to sort: the marks are read back.
        let c_source = std::fs::read_to_string(&source).unwrap();
        assert!(c_source.contains("__builtin_ctzll") && !c_source.contains("nms_sort_int64_t"), "{c_source}");
    }
    // A loop order whose outer loop is a reduction runs on one thread, and says so.
    let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-f=A:csc", "-d=i:30", "-d=j:20", "-s=reorder(j, i)", "-nthreads=2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("running on one thread"), "{}", stderr(&o));
}

#[test]
fn taco_options_assembly_and_compute_generation_timing_csv_and_f32() {
    // Separate assembly and compute kernels (taco's default) and the fused one (-c) give the
    // same result; -write-time writes taco's CSV line; -g fills generate seeded data; f32 runs.
    let mut results = Vec::new();
    for fused in [false, true] {
        let out = scratch(&format!("spgemm-{fused}.mtx"));
        let times = scratch(&format!("times-{fused}.csv"));
        let mut args = vec![
            "C(i,j) = A(i,k) * B(k,j)".to_string(),
            "-f=A:csr".into(),
            "-f=B:csr".into(),
            "-f=C:csr".into(),
            "-d=i:60".into(),
            "-d=k:50".into(),
            "-d=j:70".into(),
            "-g=A:s".into(),
            "-g=B:h".into(),
            "-time=3".into(),
            "-print-assembly".into(),
            format!("-o=C:{}", out.display()),
            format!("-write-time={}", times.display()),
        ];
        if fused {
            args.push("-c".into());
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = nmsparse(&refs);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        assert_eq!(text.contains("Assemble:"), !fused, "{text}");
        assert_eq!(text.contains("int kernel_assemble("), !fused, "{text}");
        let csv = std::fs::read_to_string(&times).unwrap();
        assert_eq!(csv.trim().split(',').filter(|f| f.parse::<f64>().is_ok()).count(), 5, "{csv}");
        results.push(read_tensor::<f64>(&out, "csr").unwrap());
    }
    assert!(results[0].stored_len() > 0);
    assert_eq!(results[0], results[1]);
    let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-f=A:csr", "-d=i:40", "-d=j:30", "-type=f32", "-g=x:r"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("y: shape [40]"), "{}", stdout(&o));
    let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-g=A:q"]);
    assert!(!o.status.success() && stderr(&o).contains("expected d (dense)"), "{}", stderr(&o));
    let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-type=f16"]);
    assert!(
        !o.status.success() && stderr(&o).contains("-type=f16: nmsparse computes in float or double"),
        "{}",
        stderr(&o)
    );
}

/// `bound` runs where the sizes keep its promise (the same result as without it) and is a
/// clear error, before anything is compiled, where they break it.
#[test]
fn bound_is_checked_against_the_sizes() {
    let base = ["y(i) = A(i,j) * x(j)", "-f=A:csr", "-d=i:30", "-d=j:20"];
    let plain = nmsparse(&base);
    let kept = nmsparse(&[&base[..], &["-s=bound(i, ib, 30, max_exact); bound(j, jb, 32, max_constraint)"]].concat());
    assert!(kept.status.success(), "{}", stderr(&kept));
    assert_eq!(stdout(&kept), stdout(&plain));
    let broken = nmsparse(&[&base[..], &["-s=bound(j, jb, 21, min_constraint)"]].concat());
    assert!(!broken.status.success());
    assert!(
        stderr(&broken)
            .contains("bound(j, jb, 21, min_constraint): the extent of `j` is 20, so the bound does not hold"),
        "{}",
        stderr(&broken)
    );
}

/// `parallelize` without `-nthreads` runs on every core and says so; `-nthreads=1` keeps one
/// thread, and a statement without the schedule runs on one without a note. Same result each way.
#[test]
fn parallelize_without_nthreads_runs_on_every_core() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let args = ["y(i) = A(i,j) * x(j)", "-f=A:csr", "-d=i:300", "-d=j:50", "-s=parallelize(i, cpu_thread, no_races)"];
    let every = nmsparse(&args);
    assert!(every.status.success(), "{}", stderr(&every));
    let note = "no -nthreads is given: running on";
    if cores > 1 {
        assert!(stderr(&every).contains(&format!("{note} {cores} threads")), "{}", stderr(&every));
    } else {
        assert!(!stderr(&every).contains(note), "{}", stderr(&every));
    }
    let one = nmsparse(&[&args[..], &["-nthreads=1"]].concat());
    let plain = nmsparse(&args[..4]);
    for o in [&one, &plain] {
        assert!(o.status.success() && !stderr(o).contains(note), "{}", stderr(o));
        assert_eq!(stdout(o), stdout(&every));
    }
}

/// Loops the schedule puts on OpenMP threads (a split's blocks, fused dense loops) under
/// `-nthreads`: `-nthreads` sets OpenMP's thread count (taco's does) and the command no longer
/// says the kernel runs on one thread; the result is the sequential one.
#[test]
fn openmp_loops_follow_nthreads_without_a_one_thread_note() {
    for (expr, schedule) in [
        ("y(i) = A(i,j) * x(j)", "-s=split(i, i0, i1, 8); parallelize(i0, cpu_thread, no_races)"),
        ("C(i,j) = A(i,k) * B(k,j)", "-s=reorder(i, j, k); fuse(i, j, f); parallelize(f, cpu_thread, no_races)"),
    ] {
        let sizes = ["-d=i:70", "-d=j:30", "-d=k:20"];
        let sizes = if expr.starts_with('y') { &sizes[..2] } else { &sizes[..] };
        let threaded = nmsparse(&[&[expr, schedule, "-nthreads=2", "-print-compute"][..], sizes].concat());
        assert!(threaded.status.success(), "{}", stderr(&threaded));
        assert!(stdout(&threaded).contains("#pragma omp parallel for"), "{}", stdout(&threaded));
        assert!(!stderr(&threaded).contains("running on one thread"), "{expr}: {}", stderr(&threaded));
        let threaded = nmsparse(&[&[expr, schedule, "-nthreads=2"][..], sizes].concat());
        let sequential = nmsparse(&[&[expr][..], sizes].concat());
        assert_eq!(stdout(&threaded), stdout(&sequential), "{expr}");
    }
}

/// An outer loop that sums into a dense result runs on threads: CSC SpMV under `-nthreads`
/// (a copy of `y` per thread), under the schedule's `temporary` and `atomics` with no
/// `-nthreads` (every core); the result is the dense product's (integers: exact in any
/// order). `atomics` on an inner loop is refused by name; into a sparse result it runs on one
/// thread with a note.
#[test]
fn sums_over_the_outer_loop_run_on_threads() {
    let a = read_tensor::<f64>(sample("banded_symmetric.mtx"), "dense").unwrap().to_dense().unwrap();
    let x_path = scratch("x_integers.tns");
    std::fs::write(&x_path, (1..=120).map(|j| format!("{j} {}\n", j % 7 - 3)).collect::<String>()).unwrap();
    let expected: Vec<f64> = (0..120)
        .map(|i| (0..120).map(|j| a[i * 120 + j] * ((j + 1) % 7) as f64 - 3.0 * a[i * 120 + j]).sum())
        .collect();
    let (matrix, x) = (format!("-i=A:{}", sample("banded_symmetric.mtx")), format!("-i=x:{}", x_path.display()));
    for (k, extra) in [
        &["-nthreads=2"][..],
        &["-nthreads=3", "-s=parallelize(j, cpu_thread, parallel_reduction)"],
        &["-s=parallelize(j, cpu_thread, temporary)"],
        &["-s=parallelize(j, cpu_thread, atomics)", "-time=3"],
        // Ranges of a split's blocks (120 columns in 8 blocks of 16, the last short).
        &["-nthreads=2", "-s=split(j, j0, j1, 16)"],
        &["-s=split(j, j0, j1, 16); parallelize(j0, cpu_thread, atomics)"],
    ]
    .into_iter()
    .enumerate()
    {
        let out = scratch(&format!("y_sum_{k}.tns"));
        let o = nmsparse(
            &[&["y(i) = A(i,j) * x(j)", "-f=A:csc", &matrix, &x, &format!("-o=y:{}", out.display())][..], extra]
                .concat(),
        );
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("running on one thread"), "{extra:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("runs on one thread"), "{extra:?}: {}", stderr(&o));
        let y = read_tensor::<f64>(&out, "dense").unwrap().to_dense().unwrap();
        assert_eq!(y, expected, "{extra:?}");
    }
    let inner = nmsparse(&["y(i) = A(i,j) * x(j)", "-d=i:40", "-d=j:40", "-s=parallelize(j, cpu_thread, atomics)"]);
    assert_eq!(inner.status.code(), Some(1), "{}", stderr(&inner));
    assert!(
        stderr(&inner).contains("`parallelize(j, cpu_thread, atomics)` on a loop inside another"),
        "{}",
        stderr(&inner)
    );
    let sparse = nmsparse(&[
        "C(i,j) = A(i,k) * B(k,j)",
        "-f=A:csc",
        "-f=B:csr",
        "-f=C:csr",
        "-d=i:30",
        "-d=j:30",
        "-d=k:30",
        "-s=reorder(k, i, j); parallelize(k, cpu_thread, temporary)",
    ]);
    assert!(sparse.status.success(), "{}", stderr(&sparse));
    assert!(
        stderr(&sparse).contains(
            "`parallelize(k, cpu_thread, ...)` runs on one thread: its iterations add into the sparse result `C`"
        ),
        "{}",
        stderr(&sparse)
    );
}

/// A thread count from 1 to `MAX_THREADS` (100,000 threads on two cores did not finish a
/// 1000-row SpMV in a minute); more threads than the machine runs at once work, with a note.
#[test]
fn thread_counts_out_of_range_are_refused() {
    for count in ["0", "100000", "two"] {
        let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-f=A:csr", "-d=i:4", "-d=j:4", &format!("-nthreads={count}")]);
        assert_eq!(o.status.code(), Some(2), "{count}");
        assert!(stderr(&o).contains("is not a thread count from 1 to 1024"), "{count}: {}", stderr(&o));
    }
    // Zero timed runs printed a mean "over 0 runs"; every command's `-time` wants one or more.
    for args in [&["y(i) = A(i,j) * x(j)", "-d=i:4", "-d=j:4", "-time=0"][..], &["info", "x.mtx", "--time=0"]] {
        let o = nmsparse(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains("`0` is not a number of runs (1 or more)"), "{args:?}: {}", stderr(&o));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let more = format!("-nthreads={}", cores + 1);
    let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-f=A:csr", "-d=i:40", "-d=j:4", &more]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("this machine runs {cores} threads at once")), "{}", stderr(&o));
    let one = nmsparse(&["y(i) = A(i,j) * x(j)", "-f=A:csr", "-d=i:40", "-d=j:4"]);
    assert_eq!(stdout(&o), stdout(&one));
}

#[test]
fn the_expression_runner_prints_its_stages_and_refuses_bad_input() {
    let o = nmsparse(&[
        "C(i,j) = A(i,k) * B(k,j)",
        "-f=A:csr",
        "-d=i:20",
        "-d=j:10",
        "-d=k:15",
        "-s=reorder(k, j)",
        "-print-concrete",
        "-print-loops",
        "-print-compute",
        "-print-iteration-graph",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("forall(i, forall(k, forall(j, C(i,j) += A(i,k) * B(k,j))))"), "{out}");
    assert!(out.contains("kernel kernel("), "{out}");
    assert!(out.contains("int kernel(nms_array *restrict args)"), "{out}");
    assert!(out.contains("digraph iteration_graph"), "{out}");
    assert!(out.contains("C: shape [20, 10]"), "{out}");
    let o = nmsparse(&["y(i) = A(i,j) *", "-f=A:csr"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("expected a tensor access"), "{}", stderr(&o));
    let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-f=A:csx"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("csx"), "{}", stderr(&o));
    let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-backend=gpu"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("expected jit or interp"), "{}", stderr(&o));
    // CSC SpMV loops over j first by default; forced the other way, A is read through a copy
    // in row order (said on stderr), with the same result.
    let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-f=A:csc", "-d=i:30", "-d=j:20"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = nmsparse(&["y(i) = A(i,j) * x(j)", "-f=A:csc", "-d=i:30", "-d=j:20", "-s=reorder(i, j)"]);
    assert!(rows.status.success(), "{}", stderr(&rows));
    assert!(stderr(&rows).contains("`A` (csc) is read through a copy in dcsr"), "{}", stderr(&rows));
    assert_eq!(stdout(&rows), stdout(&o));
    // Options naming what the statement lacks (a typo would silently run something else), and
    // a name given twice to one option or both read and generated (the last one won, silently).
    for (extra, option, said) in [
        ("-c", "-f=a:csr", "-f=a:csr: the statement has no tensor `a` (its tensors: `y`, `A`, `x`)"),
        ("-c", "-g=z:d", "no tensor `z`"),
        ("-c", "-i=B:nowhere.mtx", "no tensor `B`"),
        ("-c", "--prune=Q", "no tensor `Q`"),
        ("-c", "-d=k:9", "-d=k:9: the statement has no index variable or tensor `k` (its variables: `i`, `j`"),
        ("-c", "-o=A:out.mtx", "only the result `y` is written"),
        ("-c", "-f=A:csc", "-f=A:csc: `A` is already given by -f=A:csr"),
        ("-c", "-d=i:5", "-d=i:5: `i` is already given by -d=i:4"),
        ("-g=x:s", "-g=x:d", "-g=x:d: `x` is already given by -g=x:s"),
        ("-g=x:s", "-i=x:x.tns", "-i=x:x.tns: `x` is already given by -g=x:s"),
        ("--prune=x", "--prune=x", "--prune=x: `x` is already given by --prune=x"),
        ("-o=y:a.tns", "-o=y:b.tns", "-o=y:b.tns: `y` is already given by -o=y:a.tns"),
    ] {
        let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-f=A:csr", "-d=i:4", "-d=j:4", extra, option]);
        assert_eq!(o.status.code(), Some(1), "{option}");
        assert!(stderr(&o).contains(said), "{option}: {}", stderr(&o));
    }
    // Matrix Market holds matrices: a scalar result is written as a 1×1 one.
    let one_by_one = scratch("scalar.mtx");
    let o = nmsparse(&["a = B(i,j) * C(i,j)", "-d=i:3", "-d=j:3", &format!("-o=a:{}", one_by_one.display())]);
    assert!(o.status.success(), "{}", stderr(&o));
    let written: Tensor<f64> = read_tensor(&one_by_one, "dense").unwrap();
    assert_eq!(written.shape(), &[1, 1]);
    let checksum: f64 = stdout(&o).rsplit("checksum ").next().unwrap().trim().parse().unwrap();
    assert_eq!(written.values(), &[checksum]);
    let scalar = scratch("scalar.tns");
    let o = nmsparse(&["a = B(i,j) * C(i,j)", "-d=i:3", "-d=j:3", &format!("-o=a:{}", scalar.display())]);
    assert!(o.status.success(), "{}", stderr(&o));
    let written: Tensor<f64> = read_tensor(&scalar, "dense").unwrap();
    assert_eq!(written.shape(), &[1]);
    let checksum: f64 = stdout(&o).rsplit("checksum ").next().unwrap().trim().parse().unwrap();
    assert_eq!(written.values(), &[checksum]);
    // What no copy helps is refused by name.
    let o = nmsparse(&["y(i) = A(i,3-j) * x(j)", "-f=A:csr", "-d=i:4", "-d=j:4"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("a negative coefficient"), "{}", stderr(&o));
}

/// `C(i,j) = A(i,k) * B(k,j)` with B in `nm(N,M,L)` runs nm-spmm's kernel (and says so), equal
/// to the compiler's kernel on the same data stored densely; data that does not fit needs
/// `--prune`, which reports what it dropped.
#[test]
fn nm_spmm_from_the_command_line() {
    // A: 8×K dense; B: the shipped 2:4 matrix (K×N), as N:M and as dense.
    let b = read_tensor::<f64>(sample("nm_2_4_16.mtx"), "dense").unwrap();
    let (k, n) = (b.shape()[0], b.shape()[1]);
    let a_path = scratch("nm_a.mtx");
    let a_values: Vec<f64> = (0..8 * k).map(|q| ((q * 5) % 7) as f64 - 3.0).collect();
    let a = Tensor::from_dense(&[8, k], &a_values, &Format::dense(2)).unwrap();
    nmsparse::format::io::write_tensor(&a_path, &a).unwrap();
    let (nm_out, dense_out) = (scratch("nm_c.mtx"), scratch("dense_c.mtx"));
    let pattern = format!("-f=B:nm(2,4,{})", if n % 16 == 0 { 16 } else { 1 });
    let run = |format: &str, out: &Path, extra: &[&str]| {
        let mut args = vec![
            "C(i,j) = A(i,k) * B(k,j)".to_string(),
            format.to_string(),
            format!("-i=A:{}", a_path.display()),
            format!("-i=B:{}", sample("nm_2_4_16.mtx")),
            format!("-o=C:{}", out.display()),
            "-print-compute".to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        nmsparse(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let o = run(&pattern, &nm_out, &["-nthreads=2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("nm-spmm's hand-written N:M SpMM"), "{}", stdout(&o));
    let o = run("-f=B:dense", &dense_out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let by_nm = read_tensor::<f64>(&nm_out, "dense").unwrap().to_dense().unwrap();
    let by_compiler = read_tensor::<f64>(&dense_out, "dense").unwrap().to_dense().unwrap();
    let dense_b = b.to_dense().unwrap();
    let expected: Vec<f64> =
        (0..8 * n).map(|q| (0..k).map(|p| a_values[q / n * k + p] * dense_b[p * n + q % n]).sum()).collect();
    assert_eq!(by_nm, expected);
    assert_eq!(by_compiler, expected);
    // 1:4 does not fit the 2:4 data: refused with the --prune hint, then pruned on request.
    let o = run("-f=B:nm(1,4,1)", &nm_out, &[]);
    assert!(!o.status.success() && stderr(&o).contains("--prune=B"), "{}", stderr(&o));
    let o = run("-f=B:nm(1,4,1)", &nm_out, &["--prune=B"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("pruned B: dropped"), "{}", stdout(&o));
    // Generated N:M data fits its pattern by construction.
    let o = nmsparse(&["C(i,j) = A(i,k) * B(k,j)", "-f=B:nm(2,8,32)", "-d=i:40", "-d=k:48", "-d=j:64", "-time=2"]);
    assert!(o.status.success() && stdout(&o).contains("packing B"), "{}{}", stdout(&o), stderr(&o));
}

/// `C(i,j) = A(i,k) * B(k,j)` with A in `nv24` runs nm-spmm's 2:4 kernel (and says so), equal
/// to a dense product and to the compiler's kernel on the same A stored in CSR.
#[test]
fn nv24_spmm_from_the_command_line() {
    let (m, k, n) = (37, 50, 29);
    let dense_a: Vec<f64> = (0..m * k).map(|q| ((q * 7) % 11) as f64 - 5.0).collect();
    let (a, _) = Tensor::from_dense(&[m, k], &dense_a, &Format::dense(2)).unwrap().prune(&Format::nv24(2)).unwrap();
    let b_values: Vec<f64> = (0..k * n).map(|q| ((q * 5) % 7) as f64 - 3.0).collect();
    let b = Tensor::from_dense(&[k, n], &b_values, &Format::dense(2)).unwrap();
    let (a_path, b_path) = (scratch("nv24_a.mtx"), scratch("nv24_b.mtx"));
    nmsparse::format::io::write_tensor(&a_path, &a).unwrap();
    nmsparse::format::io::write_tensor(&b_path, &b).unwrap();
    let run = |format: &str, out: &Path, extra: &[&str]| {
        let (ia, ib, oc) = (
            format!("-i=A:{}", a_path.display()),
            format!("-i=B:{}", b_path.display()),
            format!("-o=C:{}", out.display()),
        );
        nmsparse(&[&["C(i,j) = A(i,k) * B(k,j)", format, &ia, &ib, &oc], extra].concat())
    };
    let (c_kernel, c_compiler) = (scratch("nv24_c1.mtx"), scratch("nv24_c2.mtx"));
    let o = run("-f=A:nv24", &c_kernel, &["-print-compute", "-nthreads=2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("nm-spmm's hand-written 2:4 SpMM"), "{}", stdout(&o));
    let o = run("-f=A:csr", &c_compiler, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let by_kernel = read_tensor::<f64>(&c_kernel, "dense").unwrap().to_dense().unwrap();
    let by_compiler = read_tensor::<f64>(&c_compiler, "dense").unwrap().to_dense().unwrap();
    let pa = a.to_dense().unwrap();
    let expected: Vec<f64> =
        (0..m * n).map(|q| (0..k).map(|p| pa[q / n * k + p] * b_values[p * n + q % n]).sum()).collect();
    assert!(expected.iter().any(|&v| v != 0.0));
    assert_eq!(by_kernel, expected);
    assert_eq!(by_compiler, expected);
}

#[test]
fn workspaces_from_the_command_line() {
    // Outer-product SpGEMM and the row-wise product on the same sample matrix agree, for every
    // policy; the file written is the same.
    let a = sample("banded_symmetric.mtx");
    let rowwise = scratch("rowwise.mtx");
    let o = nmsparse(&[
        "A(i,j) = B(i,k) * C(k,j)",
        "-f=A:csr",
        "-f=B:csr",
        "-f=C:csr",
        &format!("-i=B:{a}"),
        &format!("-i=C:{a}"),
        &format!("-o=A:{}", rowwise.display()),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let want: Tensor<f64> = read_tensor(&rowwise, "csr").unwrap();
    for policy in ["auto", "dense", "bucket", "hash", "hash(64)", "coord", "map", "vector"] {
        let outer = scratch(&format!("outer-{policy}.mtx"));
        let o = nmsparse(&[
            "A(i,j) = B(i,k) * C(k,j)",
            "-f=A:csr",
            "-f=B:csc",
            "-f=C:csr",
            "-s=reorder(k,i,j)",
            &format!("-workspace={policy}"),
            &format!("-i=B:{a}"),
            &format!("-i=C:{a}"),
            &format!("-o=A:{}", outer.display()),
            "-print-loops",
        ]);
        assert!(o.status.success(), "{policy}: {}", stderr(&o));
        assert!(stdout(&o).contains("insert A_ws["), "{policy}: {}", stdout(&o));
        let got: Tensor<f64> = read_tensor(&outer, "csr").unwrap();
        assert_eq!(got.to_dense().unwrap(), want.to_dense().unwrap(), "{policy}");
    }
    // An unknown policy is an error naming the choices.
    let o = nmsparse(&["A(j,i) = B(i,j)", "-f=A:csr", "-f=B:csr", "-workspace=heap", "-d=i:5", "-d=j:5"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unknown workspace policy `heap`"), "{}", stderr(&o));
    // A dense workspace over 2·10⁶ × 2·10⁶ coordinates (36 TB) is replaced by a sparse one,
    // with a note; the transposition still runs.
    let b = scratch("tall.mtx");
    std::fs::write(&b, "%%MatrixMarket matrix coordinate real general\n2000000 2000000 2\n1 7 2.5\n1999999 3 -1\n")
        .unwrap();
    let t = scratch("tall_t.mtx");
    let o = nmsparse(&[
        "A(j,i) = B(i,j)",
        "-f=A:csr",
        "-f=B:csr",
        "-workspace=dense",
        &format!("-i=B:{}", b.display()),
        &format!("-o=A:{}", t.display()),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("note: a dense workspace for `A` would take"), "{}", stderr(&o));
    let got: Tensor<f64> = read_tensor(&t, "coo").unwrap();
    let list = got.to_coordinates();
    assert_eq!((list.entry(0), list.entry(1)), (vec![2, 1999998], vec![6, 0]));
    assert_eq!(list.values, vec![-1.0, 2.5]);
}

/// A 2-D convolution of a sample matrix read as an image: the result's extent is inferred
/// from the image's shape ("valid" convolution), and the sparse image gives the checksum the
/// dense one does. A size that would read outside the image is an error before anything runs.
#[test]
fn convolution_of_an_image_file() {
    let filter = scratch("F.mtx");
    let mut text = String::from("%%MatrixMarket matrix array real general\n3 3\n");
    for v in 1..=9 {
        text.push_str(&format!("{v}\n"));
    }
    std::fs::write(&filter, text).unwrap();
    let image = sample("power_law_500.mtx");
    let checksum = |format: &str| {
        let o = nmsparse(&[
            "O(i,j) = I(i+r, j+q) * F(r,q)",
            &format!("-f=I:{format}"),
            &format!("-i=I:{image}"),
            &format!("-i=F:{}", filter.display()),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("O: shape [498, 398]"), "{out}");
        out.rsplit("checksum ").next().unwrap().trim().to_string()
    };
    let dense = checksum("dd");
    assert_ne!(dense, "0");
    assert_eq!(checksum("csr"), dense);
    assert_eq!(checksum("coo"), dense);
    let o = nmsparse(&[
        "O(i,j) = I(i+r, j+q) * F(r,q)",
        "-f=I:csr",
        &format!("-i=I:{image}"),
        &format!("-i=F:{}", filter.display()),
        "-d=i:499",
    ]);
    // `i` takes the 498 values that keep `I(i+r, ...)` in bounds: 499 asks for more.
    assert!(!o.status.success());
    assert!(stderr(&o).contains("index variable `i` has size 499 from -d=i:499 but size 498 here"), "{}", stderr(&o));
}

/// A variable only in compound subscripts takes its size from `-d`, as the error asking for it
/// says: the command never passed `-d` to the check, so `A(i) = C(2*l+i, j)` failed whatever
/// was given (found by the differential tests through the command). `-d` against an input's
/// shape is an error too, where it was silently dropped.
#[test]
fn sizes_given_with_d_reach_variables_only_in_compound_subscripts() {
    let c = scratch("strided.tns");
    // C is 5 × 3: C(0,0) = 2, C(2,1) = 3, C(4,2) = 1 (1-based in the file).
    std::fs::write(&c, "# shape 5 3\n1 1 2\n3 2 3\n5 3 1\n").unwrap();
    let input = format!("-i=C:{}", c.display());
    // l has 2 coordinates: i reaches 0..=2 (2·1 + i ≤ 4); A(i) = Σ_l,j C(2l+i, j).
    let o = nmsparse(&["A(i) = C(2*l+i,j)", "-f=C:coo", &input, "-d=l:2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A(0) = C(0,·) + C(2,·) = 2 + 3, A(1) = 0, A(2) = C(2,·) + C(4,·) = 3 + 1.
    assert!(stdout(&o).contains("A: shape [3], 3 stored values, checksum 9"), "{}", stdout(&o));
    // Generated: both sizes from -d.
    let o = nmsparse(&["A(i) = C(2*l+i,j)", "-f=C:coo", "-d=l:2", "-d=i:3", "-d=j:3"]);
    assert!(o.status.success() && stdout(&o).contains("A: shape [3]"), "{}", stderr(&o));
    let o = nmsparse(&["A(i) = C(i,j)", "-f=C:coo", &input, "-d=j:4"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("index variable `j` has size 4 from -d=j:4 but size 3 here"), "{}", stderr(&o));
}

/// Sizes the machine cannot hold are refused before anything is allocated, with what was
/// needed: a generated operand, a dense result, a shape with more elements than an address.
#[test]
fn what_does_not_fit_in_memory_is_an_error_not_an_abort() {
    let run = |args: &[&str]| {
        let o = nmsparse(args);
        assert!(!o.status.success(), "{}", stdout(&o));
        stderr(&o)
    };
    let e = run(&["A(i,j) = B(i,j) * 2", "-f=B:csr", "-d=i:1000000", "-d=j:1000000"]);
    assert!(e.contains("generating `B` (10000000000 nonzeros") && e.contains("GiB needed"), "{e}");
    let e = run(&["A(i,j) = B(i,j) * 2", "-f=B:csr", "-d=i:1000000", "-d=j:1000000", "-g=B:0.0000001"]);
    assert!(e.contains("a dense result of 1000000000000 values") && e.contains("GiB needed"), "{e}");
    let e = run(&["A(i,j) = B(i,j) * 2", "-f=B:csr", "-d=i:10000000000", "-d=j:10000000000", "-g=B:h"]);
    assert!(e.contains("has too many elements"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

/// Two processes compiling the same kernel into one empty cache at once both succeed with
/// the same result, and leave one object and no temporary files behind (writes go to unique
/// temporary names and are renamed into place).
#[test]
fn two_processes_compile_the_same_kernel_at_once() {
    let cache = scratch("shared-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_nmsparse"))
            .args(["y(i) = A(i,j) * x(j) + 3 * x(i)", "-f=A:csr", "-d=i:300", "-d=j:300"])
            .env("NMSPARSE_CACHE_DIR", &cache)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success() && b.status.success(), "{}{}", stderr(&a), stderr(&b));
    assert_eq!(stdout(&a), stdout(&b));
    let files: Vec<String> =
        std::fs::read_dir(&cache).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(files.iter().all(|f| !f.contains(".tmp")), "{files:?}");
    assert_eq!(files.iter().filter(|f| f.ends_with(".so")).count(), 1, "{files:?}");
}

/// A signal during a long run stops the process; the `-o` file it would have written is not
/// there, half-written or otherwise (outputs are written to a temporary file and renamed).
#[test]
fn an_interrupted_run_leaves_no_output_file() {
    let out = scratch("interrupted.mtx");
    let _ = std::fs::remove_file(&out);
    let mut child = Command::new(env!("CARGO_BIN_EXE_nmsparse"))
        .args(["C(i,j) = A(i,k) * B(k,j)", "-f=A:csr", "-d=i:400", "-d=k:400", "-d=j:400", "-time=100000"])
        .arg(format!("-o=C:{}", out.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be interrupted");
    // SIGTERM rather than Ctrl-C's SIGINT: a shell without job control starts background jobs
    // with SIGINT ignored, and a test run from one (its child inherits that) would not be
    // interrupted at all. Neither signal is handled: either ends the run where it is.
    let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert!(!out.exists(), "an interrupted run wrote {}", out.display());
    let dir = out.parent().unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("interrupted"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A missing C compiler, and one that fails, are errors that say so (and the interpreter
/// still runs the statement without one); with no PATH at all, `cc` is still found.
#[test]
fn a_missing_or_failing_c_compiler_is_a_clear_error() {
    let args = ["y(i) = A(i,j) * x(j)", "-f=A:csr", "-d=i:30", "-d=j:30"];
    let with_cc = |cc: &str, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nmsparse"))
            .args(args)
            .args(extra)
            .env("CC", cc)
            .env("NMSPARSE_CACHE_DIR", scratch("cc-cache"))
            .output()
            .unwrap()
    };
    let o = with_cc("/nonexistent/cc", &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("cannot run the C compiler `/nonexistent/cc`"), "{}", stderr(&o));
    let failing = scratch("failing-cc.sh");
    std::fs::write(&failing, "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'fake 1.0'; exit 0; fi\necho 'cc: internal error' >&2\nexit 1\n")
        .unwrap();
    Command::new("chmod").arg("+x").arg(&failing).status().unwrap();
    let o = with_cc(failing.to_str().unwrap(), &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("failed") && stderr(&o).contains("cc: internal error"), "{}", stderr(&o));
    let o = with_cc("/nonexistent/cc", &["-backend=interp"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
    // Without PATH, `cc` is named where the C library's default search finds it, and the
    // kernel comes from the cache (gcc itself cannot compile without PATH: it does not find
    // its `cc1`).
    let without_path = |path: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nmsparse"));
        c.args(args).env_remove("CC").env("NMSPARSE_CACHE_DIR", scratch("cc-cache-path"));
        if !path {
            c.env_remove("PATH");
        }
        c.output().unwrap()
    };
    let o = without_path(true);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = without_path(false);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `-device=cuda` on the N:M SpMM: on a machine without a GPU a one-line error naming what is
/// missing; with one, the same result as the CPU kernel (small integers: exact).
#[test]
fn device_cuda_runs_the_nm_spmm_or_says_why_not() {
    let common = ["C(i,j) = A(i,k) * B(k,j)", "-f=B:nm(2,8,32)", "-d=i:40", "-d=j:70", "-d=k:96", "-type=f32"];
    let out = nmsparse(&[&common[..], &["-device=cuda", "-print-compute"]].concat());
    if let Some(why) = nm_cuda::unavailable() {
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.starts_with("error: -device=cuda: "), "{err}");
        assert!(err.contains(&why.to_string()), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        println!("skipped the GPU half: {why}");
    } else {
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("nm-cuda's f32"), "{}", stdout(&out));
        let cpu = nmsparse(&common);
        let summary =
            |o: &Output| stdout(o).lines().filter(|l| l.starts_with("C:")).map(String::from).collect::<Vec<_>>();
        assert_eq!(summary(&out), summary(&cpu));
    }
    // Refusals that need no GPU.
    let f64_run =
        nmsparse(&["C(i,j) = A(i,k) * B(k,j)", "-f=B:nm(2,8,32)", "-d=i:8", "-d=j:32", "-d=k:16", "-device=cuda"]);
    assert!(!f64_run.status.success());
    assert!(stderr(&f64_run).contains("add -type=f32"), "{}", stderr(&f64_run));
    let other = nmsparse(&["y(i) = A(i,j) * x(j)", "-device=cuda"]);
    assert!(stderr(&other).contains("runs only the N:M SpMM"), "{}", stderr(&other));
    let bad = nmsparse(&["y(i) = A(i,j) * x(j)", "-device=gpu"]);
    assert!(stderr(&bad).contains("expected cpu, cuda or cuda:N"), "{}", stderr(&bad));
}

/// `-device=cuda` with A in `nv24`: the sparse tensor cores in bf16 on a GPU (small integers:
/// exact, so equal to the CPU kernel's file), else a one-line error naming what is missing.
#[test]
fn device_cuda_runs_the_nv24_spmm_or_says_why_not() {
    let (m, k, n) = (40, 70, 33);
    let dense_a: Vec<f32> = (0..m * k).map(|q| ((q * 7) % 11) as f32 - 5.0).collect();
    let (a, _) = Tensor::from_dense(&[m, k], &dense_a, &Format::dense(2)).unwrap().prune(&Format::nv24(2)).unwrap();
    let b = Tensor::from_dense(
        &[k, n],
        &(0..k * n).map(|q| ((q * 5) % 7) as f32 - 3.0).collect::<Vec<_>>(),
        &Format::dense(2),
    )
    .unwrap();
    let (a_path, b_path) = (scratch("cuda_nv24_a.mtx"), scratch("cuda_nv24_b.mtx"));
    nmsparse::format::io::write_tensor(&a_path, &a).unwrap();
    nmsparse::format::io::write_tensor(&b_path, &b).unwrap();
    let run = |out: &Path, extra: &[&str]| {
        let (ia, ib, oc) = (
            format!("-i=A:{}", a_path.display()),
            format!("-i=B:{}", b_path.display()),
            format!("-o=C:{}", out.display()),
        );
        nmsparse(&[&["C(i,j) = A(i,k) * B(k,j)", "-f=A:nv24", "-type=f32", &ia, &ib, &oc], extra].concat())
    };
    let (on_gpu, on_cpu) = (scratch("cuda_nv24_c_gpu.mtx"), scratch("cuda_nv24_c_cpu.mtx"));
    let out = run(&on_gpu, &["-device=cuda", "-print-compute"]);
    if let Some(why) = nm_cuda::unavailable() {
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.starts_with("error: -device=cuda: ") && err.contains(&why.to_string()), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        println!("skipped the GPU half: {why}");
    } else {
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("mma.sp"), "{}", stdout(&out));
        assert!(!stderr(&out).contains("rounded"), "small integers are exact in bf16: {}", stderr(&out));
        assert!(run(&on_cpu, &[]).status.success());
        assert_eq!(std::fs::read(&on_gpu).unwrap(), std::fs::read(&on_cpu).unwrap());
    }
}

/// An operand the kernel cannot read as declared runs through a copy, with a note naming the
/// copy's format; the result equals a run with the operand declared in that format.
#[test]
fn operands_unreadable_as_declared_run_through_a_copy_with_a_note() {
    let through_copy =
        nmsparse(&["A(i,j) = B(i,j) + C(j,i)", "-f=A:csr", "-f=B:csr", "-f=C:csr", "-d=i:30", "-d=j:40"]);
    assert!(through_copy.status.success(), "{}", stderr(&through_copy));
    let note = stderr(&through_copy);
    assert!(note.contains("`C` (csr) is read through a copy in dcsc"), "{note}");
    let declared = nmsparse(&["A(i,j) = B(i,j) + C(j,i)", "-f=A:csr", "-f=B:csr", "-f=C:dcsc", "-d=i:30", "-d=j:40"]);
    assert!(declared.status.success(), "{}", stderr(&declared));
    assert!(!stderr(&declared).contains("copy"), "{}", stderr(&declared));
    assert_eq!(stdout(&through_copy), stdout(&declared));
    // Vector-wise N:M in a sum.
    let nm = nmsparse(&["A(i,j) = B(i,j) + C(i,j)", "-f=B:nm(2,4,4)", "-f=C:csr", "-d=i:12", "-d=j:16"]);
    assert!(nm.status.success(), "{}", stderr(&nm));
    assert!(stderr(&nm).contains("`B` (nm(2,4,4)) is read through a copy"), "{}", stderr(&nm));
}

/// `B(i,j) + B(j,i)` with B in CSR: the transposed read runs through a view of B copied in
/// column order, said on stderr; the result equals the run with B dense (read in place).
#[test]
fn an_operand_read_in_two_orders_runs_through_a_view_with_a_note() {
    let args = |b: &'static str| ["A(i,j) = B(i,j) + 2 * B(j,i)", b, "-d=i:30", "-d=j:30", "-g=B:0.2"];
    let sparse = nmsparse(&args("-f=B:csr"));
    assert!(sparse.status.success(), "{}", stderr(&sparse));
    let note = stderr(&sparse);
    assert!(note.contains("`B` is read in two orders") && note.contains("`B_2`"), "{note}");
    let dense = nmsparse(&args("-f=B:dense"));
    assert!(dense.status.success(), "{}", stderr(&dense));
    assert!(!stderr(&dense).contains("two orders"), "{}", stderr(&dense));
    assert_eq!(stdout(&sparse), stdout(&dense));
}

#[test]
fn a_sum_whose_terms_need_loop_orders_of_their_own_runs_as_several_kernels() {
    // SpGEMM plus a matrix into CSR: the product into a temporary, then the sum — the same
    // checksum as every tensor dense (one kernel), on both back ends.
    let args = |extra: &[&'static str]| {
        let mut a = vec!["A(i,j) = B(i,k) * C(k,j) - D(i,j)", "-d=i:40", "-d=j:30", "-d=k:20"];
        a.extend(["-g=B:0.1", "-g=C:0.1", "-g=D:0.2"]);
        a.extend(extra);
        a
    };
    let dense = nmsparse(&args(&[]));
    assert!(dense.status.success(), "{}", stderr(&dense));
    for backend in ["-backend=jit", "-backend=interp"] {
        let sparse = nmsparse(&args(&["-f=A:csr", "-f=B:csr", "-f=C:csr", "-f=D:csr", backend, "-time=2"]));
        assert!(sparse.status.success(), "{}", stderr(&sparse));
        assert!(
            stderr(&sparse).contains("runs as `t0(i,j) = B(i,k) * C(k,j)`, then `A(i,j) = t0(i,j) - D(i,j)`"),
            "{}",
            stderr(&sparse)
        );
        let checksum =
            |o: &std::process::Output| stdout(o).lines().last().unwrap().rsplit(' ').next().unwrap().to_string();
        assert_eq!(checksum(&sparse), checksum(&dense), "{}\n{}", stdout(&sparse), stdout(&dense));
        assert!(stdout(&sparse).contains("Compute:"), "{}", stdout(&sparse));
    }
}

/// The command's last resort, as the API's: a loop no operand makes sparse visits every
/// coordinate, said in a note; the same checksum as a dense result, and the sparse result
/// stores only the coordinates where a term was produced.
#[test]
fn a_loop_no_operand_makes_sparse_visits_every_coordinate_with_a_note() {
    let args = |a: &'static str| {
        ["A(i) = B(i,k) + C(i,j,k)", a, "-f=B:csr", "-f=C:sds", "-d=i:40", "-d=j:5", "-d=k:6", "-g=B:0.05", "-g=C:0.05"]
    };
    let sparse = nmsparse(&args("-f=A:s"));
    assert!(sparse.status.success(), "{}", stderr(&sparse));
    assert!(stderr(&sparse).contains("the loop over `i` visits every coordinate of `i`"), "{}", stderr(&sparse));
    let dense = nmsparse(&args("-f=A:dense"));
    assert!(dense.status.success(), "{}", stderr(&dense));
    assert!(!stderr(&dense).contains("visits every coordinate"), "{}", stderr(&dense));
    let checksum = |o: &std::process::Output| stdout(o).lines().last().unwrap().rsplit(' ').next().unwrap().to_string();
    assert_eq!(checksum(&sparse), checksum(&dense), "{}\n{}", stdout(&sparse), stdout(&dense));
    assert!(!stdout(&sparse).contains("40 stored values"), "{}", stdout(&sparse));
}

/// Every `nmsparse` command line in the shell blocks of README.md and docs/ runs as written,
/// from the repository root (where the sample data is).
#[test]
fn the_documented_command_lines_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for doc in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = doc.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            readme.push_str(&std::fs::read_to_string(path).unwrap());
        }
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_nmsparse")).parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let mut ran = 0;
    for block in readme.split("```sh\n").skip(1) {
        let block = &block[..block.find("```").expect("a closed block")];
        for line in block.lines().filter(|l| l.starts_with("nmsparse ")) {
            let o = Command::new("sh").arg("-c").arg(line).current_dir(root).env("PATH", &path).output().unwrap();
            assert!(o.status.success(), "`{line}` failed:\n{}{}", stdout(&o), stderr(&o));
            ran += 1;
        }
    }
    assert!(ran >= 12, "README.md and docs/ show {ran} command lines");
}
