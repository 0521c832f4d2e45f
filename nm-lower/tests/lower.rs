//! End to end for the first lowering class: expression + formats + data → result, on the
//! interpreter and on the C back end, each compared with a dense reference computed here
//! without nmsparse (small-integer data: every sum is exact, so the comparisons are `==`).

use nm_format::generate::{Values, uniform};
use nm_format::{Duplicates, Format, Tensor};
use nm_ir::concrete::{concretize, parse_schedule};
use nm_ir::notation::{Declarations, TensorType, parse};
use nm_lower::args::ArrayData;
use nm_lower::c::CKernel;
use nm_lower::interp::interpret;
use nm_lower::ir::{ElemType, Role};
use nm_lower::jit::CCompiler;
use nm_lower::lower::{LowerError, arguments, lower};

/// One operand: name, shape, format (None = dense), seed.
type Operand<'a> = (&'a str, &'a [usize], Option<Format>, u64);

/// Sparse operands hold 30% nonzeros, except large ones (10⁴ elements or more): 0.2%, as real
/// sparse matrices are, so that a workspace row takes its sorted-list path.
fn tensor(shape: &[usize], format: Option<Format>, seed: u64) -> Tensor<f64> {
    let large = shape.iter().product::<usize>() >= 10_000;
    let density = match (&format, large) {
        (Some(_), false) => 0.3,
        (Some(_), true) => 0.002,
        (None, _) => 0.9,
    };
    let list = uniform::<f64>(shape, density, Values::SmallIntegers(5), seed);
    Tensor::from_coordinates(&list, &format.unwrap_or_else(|| Format::dense(shape.len())), Duplicates::Reject).unwrap()
}

/// A statement parsed, checked, concretized, scheduled and lowered, with its operands built.
struct Prepared {
    stmt: nm_ir::notation::IndexNotation,
    lowered: nm_lower::lower::Lowered,
    tensors: Vec<Tensor<f64>>,
}

impl Prepared {
    fn new(
        expr: &str,
        schedule: &str,
        result: (&str, TensorType),
        operands: &[Operand<'_>],
    ) -> Result<Prepared, LowerError> {
        let stmt = parse(expr).unwrap();
        let mut decls = Declarations::new().tensor(result.0, result.1);
        let tensors: Vec<Tensor<f64>> =
            operands.iter().map(|(_, shape, format, seed)| tensor(shape, format.clone(), *seed)).collect();
        for (name, shape, format, _) in operands {
            decls = decls.tensor(
                name,
                match format {
                    Some(f) => TensorType::sparse(shape, f.clone()),
                    None => TensorType::dense(shape),
                },
            );
        }
        let types = stmt.check(&decls).unwrap();
        let mut cin = concretize(&stmt);
        if !schedule.is_empty() {
            cin = cin.schedule(&parse_schedule(schedule).unwrap()).unwrap();
        }
        let lowered = lower(&cin, &types, ElemType::F64)?;
        Ok(Prepared { stmt, lowered, tensors })
    }

    /// Runs on the interpreter and in C; returns both argument sets after the run.
    /// The operands' tensors by tensor id (`None` for the result).
    fn by_id(&self, operands: &[Operand<'_>]) -> Vec<Option<&Tensor<f64>>> {
        self.stmt
            .tensors
            .iter()
            .map(|(_, t)| operands.iter().position(|(n, ..)| *n == t.name).map(|k| &self.tensors[k]))
            .collect()
    }

    fn run_both(&self, operands: &[Operand<'_>], result_len: usize) -> (Vec<ArrayData<'_>>, Vec<ArrayData<'_>>) {
        let by_id = self.by_id(operands);
        let mut by_interp = arguments(&self.lowered, &by_id, result_len).unwrap();
        interpret(&self.lowered.function, &mut by_interp).unwrap();
        let mut by_c = arguments(&self.lowered, &by_id, result_len).unwrap();
        let kernel = CKernel::compile(&self.lowered.function, &CCompiler::from_env().unwrap()).unwrap();
        kernel.run(&mut by_c).unwrap();
        // Row ranges on 2 and 3 threads (more ranges than rows, uneven ones): the same arrays,
        // bit for bit, up to the unused capacity of grown outputs.
        if let Some(partition) = &self.lowered.partition {
            for threads in [2, 3] {
                let mut by_rows = arguments(&self.lowered, &by_id, result_len).unwrap();
                kernel.run_rows(&mut by_rows, partition, threads).unwrap();
                for ((id, decl), (a, b)) in self.lowered.function.arrays.iter().zip(by_rows.iter().zip(&by_c)) {
                    if decl.output && decl.role != Role::Scratch {
                        let used = a.len().min(b.len());
                        assert!(a.len() == b.len() || is_capacity(&self.lowered, id), "{}: lengths differ", decl.name);
                        assert_eq!(prefix(a, used), prefix(b, used), "{} on {threads} threads", decl.name);
                    }
                }
            }
        }
        (by_interp, by_c)
    }

    fn dense_operands(&self) -> Vec<Vec<f64>> {
        self.tensors.iter().map(|t| t.to_dense().unwrap()).collect()
    }
}

/// Whether `id` is a sparse result's `crd` or values, whose length is a capacity.
fn is_capacity(lowered: &nm_lower::lower::Lowered, id: nm_lower::ir::ArrayId) -> bool {
    lowered.partition.as_ref().and_then(|p| p.rows).is_some_and(|(_, crd, vals)| id == crd || id == vals)
}

/// The first `n` elements of an array.
fn prefix<'a>(a: &ArrayData<'a>, n: usize) -> ArrayData<'a> {
    match a {
        ArrayData::Borrowed(b) => panic!("{b:?} is an operand, not a result"),
        ArrayData::Workspace(w) => panic!("{w:?} is a workspace, not a result"),
        ArrayData::I32(v) => ArrayData::I32(v[..n].to_vec()),
        ArrayData::I64(v) => ArrayData::I64(v[..n].to_vec()),
        ArrayData::U64(v) => ArrayData::U64(v[..n].to_vec()),
        ArrayData::F32(v) => ArrayData::F32(v[..n].to_vec()),
        ArrayData::F64(v) => ArrayData::F64(v[..n].to_vec()),
    }
}

/// Runs `expr` with `schedule` on both back ends; returns the dense result (asserting the two
/// agree) and the operands' dense arrays for the caller's reference.
fn run(
    expr: &str,
    schedule: &str,
    result: (&str, &[usize]),
    operands: &[Operand<'_>],
) -> Result<(Vec<f64>, Vec<Vec<f64>>), LowerError> {
    let p = Prepared::new(expr, schedule, (result.0, TensorType::dense(result.1)), operands)?;
    let (mut by_interp, by_c) = p.run_both(operands, result.1.iter().product());
    assert_eq!(by_c[0], by_interp[0], "{expr}: C and interpreter differ\n{}", p.lowered.function);
    let ArrayData::F64(out) = by_interp.swap_remove(0) else { unreachable!() };
    Ok((out, p.dense_operands()))
}

#[test]
fn spmv_in_csr_csc_coo_and_dcsr() {
    let (m, n) = (9, 7);
    let reference =
        |a: &[f64], x: &[f64]| -> Vec<f64> { (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect() };
    // CSR in the default order, CSC reordered (it wants j outside i), CSR with a parallel row
    // loop, COO (walked entry by entry), DCSR, and column-major COO.
    for (schedule, format, seed) in [
        ("", Format::csr(), 1),
        ("reorder(j, i)", Format::csc(), 3),
        ("parallelize(i, cpu_thread, no_races)", Format::csr(), 5),
        ("", Format::coo(2), 7),
        ("", Format::csf(2), 9),
        ("reorder(j, i)", Format::parse("uq:1,0", 2).unwrap(), 11),
    ] {
        let (y, d) = run(
            "y(i) = A(i,j) * x(j)",
            schedule,
            ("y", &[m]),
            &[("A", &[m, n], Some(format), seed), ("x", &[n], None, seed + 1)],
        )
        .unwrap();
        assert_eq!(y, reference(&d[0], &d[1]), "{schedule}");
    }
}

/// `split` of a loop that sparse iterators drive (they split coordinates, as taco does): each
/// block's iterators start at its first coordinate and stop before the next block's. They were
/// refused ("splitting `j`, which iterates a compressed level"). A compressed level alone
/// (CSR's columns, DCSR's rows, COO's non-unique rows), two merged (intersection into a dense
/// result, union into a sparse one), blocks whose last one is short, against the dense
/// reference on both back ends.
#[test]
fn splits_of_loops_sparse_iterators_drive_visit_every_block() {
    let (m, n) = (23, 17);
    let mv = |a: &[f64], x: &[f64]| -> Vec<f64> { (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect() };
    for (schedule, format, seed) in [
        ("split(j, j0, j1, 4)", Format::csr(), 51),
        ("split(j, j0, j1, 1)", Format::csr(), 52),
        ("split(j, j0, j1, 40)", Format::csr(), 53),
        ("split(i, i0, i1, 5)", Format::parse("dcsr", 2).unwrap(), 54),
        ("split(i, i0, i1, 5); split(j, j0, j1, 3)", Format::parse("dcsr", 2).unwrap(), 55),
        ("split(i, i0, i1, 6)", Format::coo(2), 56),
    ] {
        let ops: &[Operand<'_>] = &[("A", &[m, n], Some(format), seed), ("x", &[n], None, seed + 100)];
        let (y, d) = run("y(i) = A(i,j) * x(j)", schedule, ("y", &[m]), ops).unwrap();
        assert_eq!(y, mv(&d[0], &d[1]), "{schedule}");
    }
    let sv = || Some(Format::parse("s", 1).unwrap());
    let ops: &[Operand<'_>] = &[("b", &[41], sv(), 57), ("c", &[41], sv(), 58)];
    let (a, d) = run("a(i) = b(i) * c(i)", "split(i, i0, i1, 8)", ("a", &[41]), ops).unwrap();
    assert_eq!(a, (0..41).map(|i| d[0][i] * d[1][i]).collect::<Vec<_>>());
    let (a, d) =
        run_sparse("a(i) = b(i) + c(i)", "split(i, i0, i1, 8)", ("a", &[41], Format::parse("s", 1).unwrap()), ops)
            .unwrap();
    assert_eq!(a.to_dense().unwrap(), (0..41).map(|i| d[0][i] + d[1][i]).collect::<Vec<_>>());
}

/// `fuse(i, j, f)` of loops that only locate dense levels: one loop over every pair, `i` and
/// `j` recovered by a division (it was refused unless under `pos`). A dense GEMM and MV, a
/// tensor whose dense levels the fused loop locates before a compressed one, a scalar, and
/// the pairs on OpenMP threads where the result is indexed by both; against the dense
/// reference on both back ends.
#[test]
fn fused_dense_loops_visit_every_pair() {
    let (m, n, r) = (7, 5, 6);
    let ops: &[Operand<'_>] = &[("A", &[m, r], None, 61), ("B", &[r, n], None, 62)];
    for schedule in
        ["reorder(i, j, k); fuse(i, j, f)", "reorder(i, j, k); fuse(i, j, f); parallelize(f, cpu_thread, no_races)"]
    {
        let (c, d) = run("C(i,j) = A(i,k) * B(k,j)", schedule, ("C", &[m, n]), ops).unwrap();
        let expected: Vec<f64> =
            (0..m * n).map(|x| (0..r).map(|k| d[0][(x / n) * r + k] * d[1][k * n + x % n]).sum()).collect();
        assert_eq!(c, expected, "{schedule}");
        let p = Prepared::new("C(i,j) = A(i,k) * B(k,j)", schedule, ("C", TensorType::dense(&[m, n])), ops).unwrap();
        let on_threads = nm_lower::ir::any(&p.lowered.function.body, |s| {
            matches!(s, nm_lower::ir::Stmt::For { parallel: true, .. })
        });
        assert_eq!(on_threads, schedule.contains("parallelize"), "{schedule}");
        // On 1, 2 and 3 OpenMP threads (the kernel's setter, `run_on`): the same result.
        let source = nm_lower::c::emit(&p.lowered.function);
        assert_eq!(source.contains("omp_set_num_threads"), on_threads, "{source}");
        let kernel = CKernel::compile(&p.lowered.function, &CCompiler::from_env().unwrap()).unwrap();
        for threads in [1, 2, 3] {
            let mut arrays = arguments(&p.lowered, &p.by_id(ops), m * n).unwrap();
            kernel.run_on(&mut arrays, threads).unwrap();
            assert_eq!(arrays[0], ArrayData::F64(expected.clone()), "{schedule} on {threads} threads");
        }
    }
    let ops: &[Operand<'_>] = &[("A", &[m, n], None, 63), ("x", &[n], None, 64)];
    let (y, d) = run("y(i) = A(i,j) * x(j)", "fuse(i, j, f)", ("y", &[m]), ops).unwrap();
    assert_eq!(y, (0..m).map(|i| (0..n).map(|j| d[0][i * n + j] * d[1][j]).sum()).collect::<Vec<f64>>());
    let dds = Format::parse("dds", 3).unwrap();
    let ops: &[Operand<'_>] = &[("B", &[m, n, r], Some(dds), 65), ("c", &[r], None, 66)];
    let (y, d) = run("Y(i,j) = B(i,j,k) * c(k)", "fuse(i, j, f)", ("Y", &[m, n]), ops).unwrap();
    assert_eq!(y, (0..m * n).map(|x| (0..r).map(|k| d[0][x * r + k] * d[1][k]).sum()).collect::<Vec<f64>>());
    let ops: &[Operand<'_>] = &[("B", &[m, n], None, 67), ("C", &[m, n], None, 68)];
    let (a, d) = run("a = B(i,j) * C(i,j)", "fuse(i, j, f)", ("a", &[]), ops).unwrap();
    assert_eq!(a, vec![(0..m * n).map(|x| d[0][x] * d[1][x]).sum::<f64>()]);
}

#[test]
fn spmm_ttv_sampling_and_scalars() {
    let (m, k, n) = (6, 5, 4);
    // SpMM with a dense right operand, loop order i, k, j (B's CSR order first).
    let (c, d) = run(
        "C(i,j) = A(i,k) * B(k,j)",
        "reorder(k, j)",
        ("C", &[m, n]),
        &[("A", &[m, k], Some(Format::csr()), 7), ("B", &[k, n], None, 8)],
    )
    .unwrap();
    let expected: Vec<f64> =
        (0..m * n).map(|ij| (0..k).map(|kk| d[0][ij / n * k + kk] * d[1][kk * n + ij % n]).sum()).collect();
    assert_eq!(c, expected);
    // TTV on a CSF tensor.
    let (a, d) = run(
        "A(i,j) = B(i,j,k) * c(k)",
        "",
        ("A", &[m, n]),
        &[("B", &[m, n, k], Some(Format::csf(3)), 9), ("c", &[k], None, 10)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..m * n).map(|ij| (0..k).map(|kk| d[0][ij * k + kk] * d[1][kk]).sum()).collect();
    assert_eq!(a, expected);
    // Sampling a dense product by a sparse pattern (element-wise, one sparse operand).
    let (a, d) = run(
        "A(i,j) = B(i,j) * C(i,j) - 2 * C(i,j) * B(i,j)",
        "",
        ("A", &[m, n]),
        &[("B", &[m, n], Some(Format::csr()), 11), ("C", &[m, n], None, 12)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..m * n).map(|x| d[0][x] * d[1][x] - 2.0 * d[1][x] * d[0][x]).collect();
    assert_eq!(a, expected);
    // A reduction to a scalar over a DCSR matrix.
    let (s, d) = run(
        "s = B(i,j) * C(i,j)",
        "",
        ("s", &[]),
        &[("B", &[m, n], Some(Format::csf(2)), 13), ("C", &[m, n], None, 14)],
    )
    .unwrap();
    assert_eq!(s, vec![(0..m * n).map(|x| d[0][x] * d[1][x]).sum::<f64>()]);
}

/// The value of an element-wise expression from the values of b, c and d at one coordinate.
type Reference = fn(f64, f64, f64) -> f64;

#[test]
fn co_iteration_follows_the_merge_lattices() {
    const N: usize = 40;
    let n = N;
    let shape: &[usize] = &[N];
    let sv = || Some(Format::parse("s", 1).unwrap());
    let ops3 = |fb: Option<Format>, fc: Option<Format>, fd: Option<Format>| {
        [("b", shape, fb, 21u64), ("c", shape, fc, 22), ("d", shape, fd, 23)]
    };
    let cases: &[(&str, Reference)] = &[
        ("a(i) = b(i) + c(i)", |b, c, _| b + c),
        ("a(i) = b(i) * c(i)", |b, c, _| b * c),
        ("a(i) = b(i) - c(i)", |b, c, _| b - c),
        ("a(i) = (b(i) + c(i)) * d(i)", |b, c, d| (b + c) * d),
        ("a(i) = b(i) + c(i) * d(i)", |b, c, d| b + c * d),
        ("a(i) = -(b(i) - c(i)) + d(i)", |b, c, d| -(b - c) + d),
        ("a(i) = b(i) + 2", |b, _, _| b + 2.0),
        ("a(i) = b(i) * c(i) + b(i) * d(i)", |b, c, d| b * c + b * d),
    ];
    for (expr, reference) in cases {
        for (fb, fc, fd) in [(sv(), sv(), sv()), (None, sv(), sv()), (sv(), None, sv()), (sv(), sv(), None)] {
            let uses: Vec<_> =
                ops3(fb, fc, fd).into_iter().filter(|(name, ..)| expr.contains(&format!("{name}(i)"))).collect();
            let (a, d) = run(expr, "", ("a", &[n]), &uses).unwrap_or_else(|e| panic!("{expr}: {e}"));
            let value = |name: &str, i: usize| uses.iter().position(|(x, ..)| *x == name).map_or(0.0, |k| d[k][i]);
            let expected: Vec<f64> = (0..n).map(|i| reference(value("b", i), value("c", i), value("d", i))).collect();
            assert_eq!(a, expected, "{expr}");
        }
    }
}

#[test]
fn sparse_matrices_co_iterate_at_their_compressed_level() {
    let (m, n) = (8, 9);
    for (expr, f) in [
        ("A(i,j) = B(i,j) + C(i,j)", (|b, c| b + c) as fn(f64, f64) -> f64),
        ("A(i,j) = B(i,j) * C(i,j)", |b, c| b * c),
    ] {
        for (fb, fc) in
            [(Format::csr(), Format::csr()), (Format::csf(2), Format::csr()), (Format::csf(2), Format::csf(2))]
        {
            let (a, d) =
                run(expr, "", ("A", &[m, n]), &[("B", &[m, n], Some(fb), 31), ("C", &[m, n], Some(fc), 32)]).unwrap();
            let expected: Vec<f64> = (0..m * n).map(|x| f(d[0][x], d[1][x])).collect();
            assert_eq!(a, expected, "{expr}");
        }
    }
    // Row-wise SpGEMM into a dense result: A CSR co-iterates nothing, B's rows are located.
    let (k,) = (7,);
    let (c, d) = run(
        "C(i,j) = A(i,k) * B(k,j)",
        "reorder(k, j)",
        ("C", &[m, n]),
        &[("A", &[m, k], Some(Format::csr()), 33), ("B", &[k, n], Some(Format::csr()), 34)],
    )
    .unwrap();
    let expected: Vec<f64> =
        (0..m * n).map(|ij| (0..k).map(|kk| d[0][ij / n * k + kk] * d[1][kk * n + ij % n]).sum()).collect();
    assert_eq!(c, expected);
}

#[test]
fn what_is_not_lowered_yet_is_refused_by_name() {
    let err = |expr: &str, schedule: &str, result: (&str, &[usize]), ops: &[Operand<'_>]| {
        run(expr, schedule, result, ops).unwrap_err().to_string()
    };
    let sv = || Some(Format::parse("s", 1).unwrap());
    assert_eq!(
        err(
            "y(i) = A(i,j) * x(j)",
            "reorder(j, i)",
            ("y", &[4]),
            &[("A", &[4, 3], Some(Format::csr()), 1), ("x", &[3], None, 2)]
        ),
        "cannot lower this statement yet: `j` is bound before `A`'s level 0 is reached: the loop order is discordant with its format"
    );
    let e = err(
        "y(i) = A(i,j) * x(j)",
        "fuse(i, j, f)",
        ("y", &[4]),
        &[("A", &[4, 3], Some(Format::csr()), 1), ("x", &[3], None, 2)],
    );
    assert_eq!(
        e,
        "cannot lower this statement yet: a loop over the fused variable `f` where `j` iterates a compressed level \
         (fuse is lowered there under `pos`: iterate its positions)"
    );
    // A split of a split (its block count needs the parent's extent, which a derived variable
    // has none of: an index out of bounds before) and threads adding into the same elements
    // from a loop inside another (an OpenMP loop there would race on the register sums).
    let dense_mv = |schedule: &str| {
        err("y(i) = A(i,j) * x(j)", schedule, ("y", &[8]), &[("A", &[8, 30], None, 1), ("x", &[30], None, 2)])
    };
    assert_eq!(
        dense_mv("split(i, a, b, 4); split(b, c, d, 2)"),
        "cannot lower this statement yet: a split of `b`, itself made by a schedule command (split the original \
         variable with the product of the factors instead)"
    );
    for race in ["atomics", "temporary", "parallel_reduction"] {
        assert_eq!(
            dense_mv(&format!("parallelize(j, cpu_thread, {race})")),
            format!(
                "cannot lower this statement yet: `parallelize(j, cpu_thread, {race})` on a loop inside another: \
                 threads that add into the same result elements run the outermost loop's ranges (reorder `j` \
                 outermost, or no_races where iterations write disjoint elements)"
            )
        );
    }
    // GPU loops: the schedule refuses them (nm-ir's tests); concrete notation written with one
    // is refused here.
    let stmt = parse("y(i) = A(i,j) * x(j)").unwrap();
    let decls = Declarations::new()
        .tensor("y", TensorType::dense(&[8]))
        .tensor("A", TensorType::dense(&[8, 30]))
        .tensor("x", TensorType::dense(&[30]));
    let types = stmt.check(&decls).unwrap();
    for unit in ["gpu_block", "gpu_warp", "gpu_thread"] {
        let text = format!("forall(i, forall(j, y(i) += A(i,j) * x(j)), parallelize({unit}, no_races))");
        let cin = nm_ir::concrete::parse_concrete(&text).unwrap();
        assert_eq!(
            lower(&cin, &types, ElemType::F64).err().expect("refused").to_string(),
            "cannot lower this statement yet: GPU loops (`parallelize(i, gpu_...)`): the CPU back ends run this statement"
        );
    }
    // A `where` producer follows a compressed level along an outer loop only where the level
    // below is compressed too (an empty range stands for a missing entry; see
    // `where_producers_follow_compressed_levels_along_outer_loops`).
    let e = err(
        "y(i) = b(i) - A(i,j) * x(j)",
        "",
        ("y", &[4]),
        &[("b", &[4], None, 1), ("A", &[4, 3], Some(Format::parse("sd", 2).unwrap()), 2), ("x", &[3], None, 3)],
    );
    assert_eq!(
        e,
        "cannot lower this statement yet: a `where` producer reading `A`'s level 0 (compressed) along the outer \
         loop `i`: it needs an ordered, unique compressed level with a compressed level below"
    );
    // A compressed level walked in increasing coordinate order cannot be resolved by a
    // variable with a negative coefficient (a window running backwards): `i` must be bound
    // outside `p` (the default order, which runs: `negative_coefficients_bound_outside`).
    assert_eq!(
        err("O(i) = I(5-i+p) * F(p)", "reorder(p, i)", ("O", &[4]), &[("I", &[8], sv(), 1), ("F", &[3], None, 2)]),
        "cannot lower this statement yet: `i` resolves `I`'s compressed level 0 with a negative coefficient \
         (its coordinates are walked in increasing order): loop over `i` before the subscript's other variables"
    );
}

/// Each refusal says its kind, which tells the driver what may help (a copy in another order
/// for a discordant loop order; nothing for a schedule it cannot lower).
#[test]
fn refusals_say_their_kind() {
    let csr_mv = |schedule: &str| {
        run(
            "y(i) = A(i,j) * x(j)",
            schedule,
            ("y", &[4]),
            &[("A", &[4, 3], Some(Format::csr()), 1), ("x", &[3], None, 2)],
        )
        .unwrap_err()
    };
    assert!(matches!(csr_mv("reorder(j, i)"), LowerError::LoopOrder(_)));
    assert!(matches!(csr_mv("fuse(i, j, f)"), LowerError::Schedule(_)));
    let e = run(
        "y(i) = b(i) - A(i,j) * x(j)",
        "",
        ("y", &[4]),
        &[("b", &[4], None, 1), ("A", &[4, 3], Some(Format::parse("sd", 2).unwrap()), 2), ("x", &[3], None, 3)],
    )
    .unwrap_err();
    assert!(matches!(e, LowerError::Where(_)), "{e}");
    let sv = Some(Format::parse("s", 1).unwrap());
    let e = run("O(i) = I(5-i+p) * F(p)", "reorder(p, i)", ("O", &[4]), &[("I", &[8], sv, 1), ("F", &[3], None, 2)])
        .unwrap_err();
    assert!(matches!(e, LowerError::Subscript(_)), "{e}");
}

#[test]
fn where_producers_follow_compressed_levels_along_outer_loops() {
    // `t = Σ_j A(i,j)·x(j)` inside the loop over `i` (a dense `b` makes it visit every row):
    // DCSR's rows are followed by a cursor, rows without entries contribute nothing.
    let (m, n) = (20, 5);
    for seed in [2, 5] {
        let (y, d) = run(
            "y(i) = b(i) - A(i,j) * x(j)",
            "",
            ("y", &[m]),
            &[("b", &[m], None, 1), ("A", &[m, n], Some(Format::csf(2)), seed), ("x", &[n], None, 3)],
        )
        .unwrap();
        assert!((0..m).any(|i| (0..n).all(|j| d[1][i * n + j] == 0.0)), "a row of A without entries");
        let expected: Vec<f64> =
            (0..m).map(|i| d[0][i] - (0..n).map(|j| d[1][i * n + j] * d[2][j]).sum::<f64>()).collect();
        assert_eq!(y, expected);
    }
    // Two levels followed, the producer summing the third: `t = Σ_k C(i,j,k)` along `i, j`.
    let (y, d) = run(
        "A(i,j) = B(i,j) + C(i,j,k)",
        "",
        ("A", &[4, 5]),
        &[("B", &[4, 5], None, 7), ("C", &[4, 5, 6], Some(Format::csf(3)), 8)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..20).map(|ij| d[0][ij] + (0..6).map(|k| d[1][ij * 6 + k]).sum::<f64>()).collect();
    assert_eq!(y, expected);
}

#[test]
fn where_producers_follow_compressed_levels_into_sparse_results_where_the_loop_is_full_anyway() {
    // `A(i) = b(i) + Σ_j C(i,j)` into a sparse vector: the dense `b` has the loop over `i`
    // visit (and store) every coordinate anyway, so the producer may follow C's rows there.
    let sparse_vector = Format::parse("s", 1).unwrap();
    let (a, d) = run_sparse(
        "A(i) = b(i) + C(i,j)",
        "",
        ("A", &[20], sparse_vector.clone()),
        &[("b", &[20], None, 1), ("C", &[20, 6], Some(Format::csf(2)), 4)],
    )
    .unwrap();
    assert!((0..20).any(|i| (0..6).all(|j| d[1][i * 6 + j] == 0.0)), "a row of C without entries");
    let expected: Vec<f64> = (0..20).map(|i| d[0][i] + (0..6).map(|j| d[1][i * 6 + j]).sum::<f64>()).collect();
    assert_eq!(a.to_dense().unwrap(), expected);
    // Along a dense level of the result (CSR's rows) the loop visits every row anyway:
    // `A(i,j) = B(i,j) * Σ_k C(i,k)` follows C's rows there, B sparse.
    let (a, d) = run_sparse(
        "A(i,j) = B(i,j) * C(i,k)",
        "",
        ("A", &[15, 7], Format::csr()),
        &[("B", &[15, 7], Some(Format::csr()), 2), ("C", &[15, 6], Some(Format::csf(2)), 5)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..105).map(|ij| d[0][ij] * (0..6).map(|k| d[1][ij / 7 * 6 + k]).sum::<f64>()).collect();
    assert!(expected.iter().any(|&v| v != 0.0));
    assert_eq!(a.to_dense().unwrap(), expected);
    // With `b` sparse nothing fills the loop: the temporary would have it store every `i`.
    let e = run_sparse(
        "A(i) = b(i) + C(i,j)",
        "",
        ("A", &[20], sparse_vector.clone()),
        &[("b", &[20], Some(sparse_vector), 1), ("C", &[20, 6], Some(Format::csf(2)), 4)],
    )
    .unwrap_err();
    assert!(e.to_string().contains("a coordinate of the sparse result"), "{e}");
}

#[test]
fn a_dense_result_is_right_whatever_its_array_held() {
    // Kernels run again on their own arrays (`-time`): a dense result's rows are zeroed
    // first, except where every operand is dense and every store plain (each element is
    // then stored once). The result's array starts full of 7s here.
    let conv = "O(i,j) = I(i+r, j+q) * F(r,q)";
    for (image, schedule) in [(None, ""), (None, "reorder(i, r, q, j)"), (Some(Format::csr()), "")] {
        let ops: &[Operand<'_>] = &[("I", &[9, 8], image.clone(), 1), ("F", &[3, 3], None, 2)];
        let p = Prepared::new(conv, schedule, ("O", TensorType::dense(&[7, 6])), ops).unwrap();
        let d = p.dense_operands();
        let expected: Vec<f64> = (0..42)
            .map(|ij| {
                let (i, j) = (ij / 6, ij % 6);
                (0..9).map(|rq| d[0][(i + rq / 3) * 8 + j + rq % 3] * d[1][rq]).sum()
            })
            .collect();
        let by_id = p.by_id(ops);
        let kernel = CKernel::compile(&p.lowered.function, &CCompiler::from_env().unwrap()).unwrap();
        for c_back_end in [false, true] {
            let mut args = arguments(&p.lowered, &by_id, 42).unwrap();
            let ArrayData::F64(out) = &mut args[0] else { unreachable!("the result's values") };
            out.iter_mut().for_each(|x| *x = 7.0);
            if c_back_end {
                kernel.run(&mut args).unwrap();
            } else {
                interpret(&p.lowered.function, &mut args).unwrap();
            }
            let ArrayData::F64(got) = &args[0] else { unreachable!() };
            assert_eq!(got, &expected, "{image:?} {schedule:?}, C: {c_back_end}\n{}", p.lowered.function);
        }
    }
}

/// Runs `expr` into a sparse result of `format` on both back ends; returns the result (from the
/// kernel's arrays, validated) and the operands' dense arrays.
fn run_sparse(
    expr: &str,
    schedule: &str,
    result: (&str, &[usize], Format),
    operands: &[Operand<'_>],
) -> Result<(Tensor<f64>, Vec<Vec<f64>>), LowerError> {
    use nm_lower::lower::result_tensor;
    let p = Prepared::new(expr, schedule, (result.0, TensorType::sparse(result.1, result.2.clone())), operands)?;
    let (by_interp, by_c) = p.run_both(operands, 0);
    let from_interp = result_tensor(&p.lowered, &by_interp, result.1, &result.2)
        .unwrap_or_else(|e| panic!("{expr}: {e}\n{}", p.lowered.function));
    let from_c = result_tensor(&p.lowered, &by_c, result.1, &result.2).unwrap();
    assert!(from_c == from_interp, "{expr}: C and interpreter assemble different results");
    Ok((from_interp, p.dense_operands()))
}

#[test]
fn sparse_results_are_assembled_in_append_order() {
    let (m, n) = (9, 11);
    let sv = || Some(Format::parse("s", 1).unwrap());
    for (expr, f) in [
        ("A(i,j) = B(i,j) + C(i,j)", (|b, c| b + c) as fn(f64, f64) -> f64),
        ("A(i,j) = B(i,j) * C(i,j)", |b, c| b * c),
        ("A(i,j) = B(i,j) - 3 * C(i,j)", |b, c| b - 3.0 * c),
    ] {
        for (result, fb, fc) in [
            (Format::csr(), Some(Format::csr()), Some(Format::csr())),
            (Format::csr(), Some(Format::csf(2)), None),
            (Format::csf(2), Some(Format::csf(2)), Some(Format::csf(2))),
            (Format::csf(2), Some(Format::csr()), Some(Format::csf(2))),
        ] {
            let (a, d) =
                run_sparse(expr, "", ("A", &[m, n], result.clone()), &[("B", &[m, n], fb, 41), ("C", &[m, n], fc, 42)])
                    .unwrap();
            let expected: Vec<f64> = (0..m * n).map(|x| f(d[0][x], d[1][x])).collect();
            assert_eq!(a.to_dense().unwrap(), expected, "{expr} into {result}");
            assert_eq!(a.format(), &result);
        }
    }
    // Vectors, with a union that leaves some coordinates to one side.
    let (a, d) = run_sparse(
        "a(i) = b(i) + c(i) * d(i)",
        "",
        ("a", &[30], Format::parse("s", 1).unwrap()),
        &[("b", &[30], sv(), 43), ("c", &[30], sv(), 44), ("d", &[30], None, 45)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..30).map(|i| d[0][i] + d[1][i] * d[2][i]).collect();
    assert_eq!(a.to_dense().unwrap(), expected);
    // A three-dimensional CSF result.
    let (a, d) = run_sparse(
        "A(i,j,k) = B(i,j,k) * C(i,j,k)",
        "",
        ("A", &[4, 5, 6], Format::csf(3)),
        &[("B", &[4, 5, 6], Some(Format::csf(3)), 46), ("C", &[4, 5, 6], None, 47)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..120).map(|x| d[0][x] * d[1][x]).collect();
    assert_eq!(a.to_dense().unwrap(), expected);
}

/// The kernels whose outer loop names disjoint rows of the result take a row range (and are
/// run on 2 and 3 threads by every test above and below); those whose outer loop is a
/// reduction, or whose result is not CSR-like, do not.
#[test]
fn row_ranges_where_the_outer_loop_names_result_rows() {
    let csr = || Some(Format::csr());
    let ranged = |expr: &str, schedule: &str, result: (&str, TensorType), ops: &[Operand<'_>]| {
        Prepared::new(expr, schedule, result, ops).unwrap().lowered.partition.is_some()
    };
    let dense = |shape: &[usize]| TensorType::dense(shape);
    assert!(ranged("y(i) = A(i,j) * x(j)", "", ("y", dense(&[5])), &[("A", &[5, 4], csr(), 1), ("x", &[4], None, 2)]));
    assert!(ranged(
        "C(i,j) = A(i,k) * B(k,j)",
        "reorder(k, j)",
        ("C", TensorType::sparse(&[5, 6], Format::csr())),
        &[("A", &[5, 4], csr(), 1), ("B", &[4, 6], csr(), 2)]
    ));
    assert!(!ranged(
        "y(i) = A(i,j) * x(j)",
        "reorder(j, i)",
        ("y", dense(&[5])),
        &[("A", &[5, 4], Some(Format::csc()), 1), ("x", &[4], None, 2)]
    ));
    assert!(!ranged(
        "C(i,j) = A(i,k) * B(k,j)",
        "reorder(k, j)",
        ("C", TensorType::sparse(&[5, 6], Format::csf(2))),
        &[("A", &[5, 4], Some(Format::csf(2)), 1), ("B", &[4, 6], csr(), 2)]
    ));
}

/// A sparse result's row range appends from entry `bounds[3]`, counting the entries before it
/// as written: a call whose bounds start past what the result's arrays hold (it would claim
/// memory nothing wrote), or before their first element, or bounds without a first entry, is
/// refused, not run.
#[test]
fn a_row_range_starting_past_the_result_is_refused() {
    let csr = || Some(Format::csr());
    let ops: &[Operand<'_>] = &[("A", &[5, 4], csr(), 1), ("B", &[4, 6], csr(), 2)];
    let result = ("C", TensorType::sparse(&[5, 6], Format::csr()));
    let p = Prepared::new("C(i,j) = A(i,k) * B(k,j)", "reorder(k, j)", result, ops).unwrap();
    use nm_ir::id::Id;
    let bounds = p.lowered.partition.as_ref().expect("ranged").bounds.index();
    let kernel = CKernel::compile(&p.lowered.function, &CCompiler::from_env().unwrap()).unwrap();
    let mut arrays = arguments(&p.lowered, &p.by_id(ops), 30).unwrap();
    assert_eq!(arrays[bounds], ArrayData::I64(vec![0, 5, 1, 0]), "a whole run starts at entry 0");
    arrays[bounds] = ArrayData::I64(vec![0, 5, 1, 7]);
    let e = kernel.run(&mut arrays).unwrap_err().to_string();
    assert!(e.contains("starts at entry 7 of `C1_crd`, which holds 0"), "{e}");
    arrays[bounds] = ArrayData::I64(vec![0, 5, 1, -2]);
    let e = kernel.run(&mut arrays).unwrap_err().to_string();
    assert!(e.contains("starts at entry -2 of `row_bounds`"), "{e}");
    // Bounds without a first entry: refused, not read past.
    arrays[bounds] = ArrayData::I64(vec![0, 5, 1]);
    let e = kernel.run(&mut arrays).unwrap_err().to_string();
    assert!(e.contains("`row_bounds` hold 3 elements, 4 expected"), "{e}");
}

/// An outer loop that is a reduction into a dense result (CSC SpMV, a dot product, TTV over
/// its reduction first) runs in ranges that add into the same elements: through a copy of
/// the result per thread (`temporary`, `parallel_reduction`, and unscheduled where a copy is
/// no larger than the loop's extent) or atomically (`atomics`). `run_both` runs every one on
/// 2 and 3 threads against the one-thread kernel (sums of small integers: exact, any order);
/// here each against the dense reference, twice on the same arrays (a copy per thread starts
/// from zero each call, the atomic result is zeroed by the caller), then whole again.
#[test]
fn reductions_over_the_outer_loop_add_into_the_result_from_every_range() {
    use nm_lower::args::ReductionKind::{Atomic, PerThread};
    let n = 40;
    let mv = |a: &[f64], x: &[f64]| -> Vec<f64> { (0..n).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect() };
    let csc = || Some(Format::csc());
    for (schedule, kind) in [
        ("reorder(j, i)", Some(PerThread)),
        ("reorder(j, i); parallelize(j, cpu_thread, temporary)", Some(PerThread)),
        ("reorder(j, i); parallelize(j, cpu_thread, parallel_reduction)", Some(PerThread)),
        ("reorder(j, i); parallelize(j, cpu_thread, atomics)", Some(Atomic)),
        // Ranges of a split's blocks (the last one short: 40 = 6 blocks of 7).
        ("split(j, j0, j1, 7); reorder(j0, j1, i)", Some(PerThread)),
        ("split(j, j0, j1, 7); reorder(j0, j1, i); parallelize(j0, cpu_thread, temporary)", Some(PerThread)),
        ("split(j, j0, j1, 7); reorder(j0, j1, i); parallelize(j0, cpu_thread, atomics)", Some(Atomic)),
    ] {
        let ops: &[Operand<'_>] = &[("A", &[n, n], csc(), 31), ("x", &[n], None, 32)];
        let p = Prepared::new("y(i) = A(i,j) * x(j)", schedule, ("y", TensorType::dense(&[n])), ops).unwrap();
        let partition = p.lowered.partition.clone().expect("ranged");
        assert_eq!(partition.extent, if schedule.contains("split") { 6 } else { n }, "{schedule}");
        assert_eq!(partition.reduction.map(|r| r.kind), kind, "{schedule}");
        assert_eq!(partition.scheduled, schedule.contains("parallelize"), "{schedule}");
        assert_eq!(p.lowered.function.atomic.is_some(), kind == Some(Atomic), "{schedule}");
        let (by_interp, _) = p.run_both(ops, n);
        let d = p.dense_operands();
        let expected = mv(&d[0], &d[1]);
        assert_eq!(by_interp[0], ArrayData::F64(expected.clone()), "{schedule}");
        let kernel = CKernel::compile(&p.lowered.function, &CCompiler::from_env().unwrap()).unwrap();
        let mut arrays = arguments(&p.lowered, &p.by_id(ops), n).unwrap();
        for threads in [2, 3, 2, 1] {
            kernel.run_rows(&mut arrays, &partition, threads).unwrap();
            assert_eq!(arrays[0], ArrayData::F64(expected.clone()), "{schedule} on {threads} threads");
        }
    }
    // Blocks over a compressed level co-iterated with a dense one (A in DCSR: the inner loop
    // of each block searches A's first row in it), on threads, against the dense reference.
    let ops: &[Operand<'_>] = &[("A", &[n, n], Some(Format::parse("dcsr", 2).unwrap()), 39), ("C", &[n, n], None, 40)];
    let schedule = "split(j, j0, j1, 3); reorder(j0, j1, i); parallelize(j0, cpu_thread, temporary)";
    let p = Prepared::new("y(i) = A(j,i) + C(j,i)", schedule, ("y", TensorType::dense(&[n])), ops).unwrap();
    let partition = p.lowered.partition.clone().expect("ranged");
    assert_eq!(partition.extent, 14);
    let d = p.dense_operands();
    let expected: Vec<f64> = (0..n).map(|i| (0..n).map(|j| d[0][j * n + i] + d[1][j * n + i]).sum()).collect();
    let kernel = CKernel::compile(&p.lowered.function, &CCompiler::from_env().unwrap()).unwrap();
    let mut arrays = arguments(&p.lowered, &p.by_id(ops), n).unwrap();
    for threads in [2, 3, 1] {
        kernel.run_rows(&mut arrays, &partition, threads).unwrap();
        assert_eq!(arrays[0], ArrayData::F64(expected.clone()), "DCSR blocks on {threads} threads");
    }
    // Blocks of a result's rows are not ranged (each range would have to zero its rows).
    let ops: &[Operand<'_>] = &[("A", &[n, n], Some(Format::csr()), 41), ("x", &[n], None, 42)];
    let p = Prepared::new("y(i) = A(i,j) * x(j)", "split(i, i0, i1, 8)", ("y", TensorType::dense(&[n])), ops).unwrap();
    assert_eq!(p.lowered.partition, None);
    // A result larger than the outer loop's extent gets no copies unless the schedule asks.
    let tall: &[Operand<'_>] = &[("A", &[n, 8], csc(), 33), ("x", &[8], None, 34)];
    let ranged = |schedule: &str| {
        let p = Prepared::new("y(i) = A(i,j) * x(j)", schedule, ("y", TensorType::dense(&[n])), tall).unwrap();
        p.lowered.partition.and_then(|p| p.reduction).map(|r| r.kind)
    };
    assert_eq!(ranged("reorder(j, i)"), None);
    assert_eq!(ranged("reorder(j, i); parallelize(j, cpu_thread, temporary)"), Some(PerThread));
    // Scalars and TTV with the reduction outermost: results against the dense reference.
    let (a, d) = run(
        "a = B(i,j) * C(i,j)",
        "parallelize(i, cpu_thread, atomics)",
        ("a", &[]),
        &[("B", &[n, 30], Some(Format::csr()), 35), ("C", &[n, 30], Some(Format::csr()), 36)],
    )
    .unwrap();
    assert_eq!(a, vec![(0..n * 30).map(|x| d[0][x] * d[1][x]).sum::<f64>()]);
    let (a, d) = run(
        "A(i,j) = B(i,j,k) * c(k)",
        "reorder(k, i, j); parallelize(k, cpu_thread, temporary)",
        ("A", &[5, 4]),
        &[("B", &[5, 4, 30], None, 37), ("c", &[30], None, 38)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..20).map(|ij| (0..30).map(|k| d[0][ij * 30 + k] * d[1][k]).sum()).collect();
    assert_eq!(a, expected);
}

/// Reductions below a sparse result's last level (SDDMM, a CSF tensor times a vector into
/// CSR): one register accumulator per entry, appended after the reduction.
#[test]
fn sparse_results_with_reductions_inside_append_the_accumulated_value() {
    let (m, n, r) = (9, 11, 5);
    let (c, d) = run_sparse(
        "C(i,j) = A(i,j) * X(i,k) * Y(j,k)",
        "",
        ("C", &[m, n], Format::csr()),
        &[("A", &[m, n], Some(Format::csr()), 80), ("X", &[m, r], None, 81), ("Y", &[n, r], None, 82)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..m * n)
        .map(|x| {
            let (i, j) = (x / n, x % n);
            d[0][x] * (0..r).map(|k| d[1][i * r + k] * d[2][j * r + k]).sum::<f64>()
        })
        .collect();
    assert_eq!(c.to_dense().unwrap(), expected);
    let (a, d) = run_sparse(
        "A(i,j) = B(i,j,k) * c(k)",
        "",
        ("A", &[4, 5], Format::csf(2)),
        &[("B", &[4, 5, 6], Some(Format::csf(3)), 83), ("c", &[6], None, 84)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..20).map(|x| (0..6).map(|k| d[0][x * 6 + k] * d[1][k]).sum()).collect();
    assert_eq!(a.to_dense().unwrap(), expected);
}

/// Gustavson's SpGEMM and its kin: the result's last level is written out of order (inside a
/// reduction loop), through a row workspace, in every sparse result format that has one.
#[test]
fn results_written_out_of_order_go_through_a_row_workspace() {
    let (m, k, n) = (13, 9, 300);
    let matmul = |b: &[f64], c: &[f64]| -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|x| b[i * k + x] * c[x * n + j]).sum();
            }
        }
        out
    };
    let dcsr = || Format::csf(2);
    for (result, fb, fc) in [
        (Format::csr(), Format::csr(), Format::csr()),
        (dcsr(), dcsr(), dcsr()),
        (Format::csr(), dcsr(), Format::csr()),
        (dcsr(), Format::csr(), dcsr()),
    ] {
        for seed in [50, 60] {
            // 300 columns: a narrow row, its coordinates only marked and read back from the
            // marks; the wider and sparser second operand below takes the sorted list.
            let (a, d) = run_sparse(
                "A(i,j) = B(i,k) * C(k,j)",
                "reorder(k, j)",
                ("A", &[m, n], result.clone()),
                &[("B", &[m, k], Some(fb.clone()), seed), ("C", &[k, n], Some(fc.clone()), seed + 1)],
            )
            .unwrap();
            assert_eq!(a.to_dense().unwrap(), matmul(&d[0], &d[1]), "SpGEMM into {result} from {fb} x {fc}");
        }
    }
    // Few coordinates per row (about 20 per row of C): the sorted list, by insertion sort for
    // rows made of one row of C and by radix sort for longer ones.
    let n = 10_000;
    let (a, d) = run_sparse(
        "A(i,j) = B(i,k) * C(k,j)",
        "reorder(k, j)",
        ("A", &[6, n], Format::csr()),
        &[("B", &[6, 3], Some(Format::csr()), 70), ("C", &[3, n], Some(Format::csr()), 71)],
    )
    .unwrap();
    let expected: Vec<f64> =
        (0..6 * n).map(|x| (0..3).map(|y| d[0][(x / n) * 3 + y] * d[1][y * n + x % n]).sum()).collect();
    assert_eq!(a.to_dense().unwrap(), expected);
    let row_lengths: Vec<usize> =
        (0..6).map(|i| expected[i * n..(i + 1) * n].iter().filter(|v| **v != 0.0).count()).collect();
    assert!(
        row_lengths.iter().any(|&c| c > 32) && row_lengths.iter().any(|&c| (2..=32).contains(&c)),
        "{row_lengths:?}"
    );
    // A sparse vector result of a transposed product: y(j) = sum_i A(i,j) x(i), A in CSR.
    let (y, d) = run_sparse(
        "y(j) = A(i,j) * x(i)",
        "reorder(i, j)",
        ("y", &[40], Format::parse("s", 1).unwrap()),
        &[("A", &[30, 40], Some(Format::csr()), 72), ("x", &[30], Some(Format::parse("s", 1).unwrap()), 73)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..40).map(|j| (0..30).map(|i| d[0][i * 40 + j] * d[1][i]).sum()).collect();
    assert_eq!(y.to_dense().unwrap(), expected);
    // Every coordinate of a row touched (a dense right operand): whole words of marks, the
    // top bit of each included, read back by the scan.
    let (n, k) = (130, 20);
    let (a, d) = run_sparse(
        "A(i,j) = B(i,k) * C(k,j)",
        "reorder(k, j)",
        ("A", &[4, n], Format::csr()),
        &[("B", &[4, k], Some(Format::csr()), 46), ("C", &[k, n], None, 47)],
    )
    .unwrap();
    let expected: Vec<f64> =
        (0..4 * n).map(|x| (0..k).map(|y| d[0][(x / n) * k + y] * d[1][y * n + x % n]).sum()).collect();
    assert_eq!(a.to_dense().unwrap(), expected);
    assert_eq!(a.stored_len(), 4 * n, "every row full");
    // A row workspace covers the last level only: above it, a sparse workspace collects the
    // outer products (tests/workspaces.rs covers every policy).
    let (a, d) = run_sparse(
        "A(i,j) = B(i,k) * C(k,j)",
        "reorder(k, i, j)",
        ("A", &[5, 6], Format::csr()),
        &[("B", &[5, 4], Some(Format::csc()), 48), ("C", &[4, 6], Some(Format::csr()), 49)],
    )
    .unwrap();
    let expected: Vec<f64> =
        (0..30).map(|x| (0..4).map(|k| d[0][(x / 6) * 4 + k] * d[1][k * 6 + x % 6]).sum()).collect();
    assert_eq!(a.to_dense().unwrap(), expected);
}

#[test]
fn where_temporaries_for_inner_reductions() {
    let (m, n) = (7, 6);
    // The residual: y(i) = b(i) - sum(j, A(i,j) x(j)) with a scalar temporary per row.
    let (y, d) = run(
        "y(i) = b(i) - A(i,j) * x(j)",
        "",
        ("y", &[m]),
        &[("b", &[m], None, 51), ("A", &[m, n], Some(Format::csr()), 52), ("x", &[n], None, 53)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..m).map(|i| d[0][i] - (0..n).map(|j| d[1][i * n + j] * d[2][j]).sum::<f64>()).collect();
    assert_eq!(y, expected);
    // A row sum scaling a sparse vector.
    let (a, d) = run(
        "a(i) = sum(j, B(i,j)) * c(i)",
        "",
        ("a", &[m]),
        &[("B", &[m, n], Some(Format::csr()), 54), ("c", &[m], Some(Format::parse("s", 1).unwrap()), 55)],
    )
    .unwrap();
    let expected: Vec<f64> = (0..m).map(|i| (0..n).map(|j| d[0][i * n + j]).sum::<f64>() * d[1][i]).collect();
    assert_eq!(a, expected);
    // MTTKRP with B stored (i, l, k), k compressed, so the concretized loops i, j, l, k are
    // concordant and the producer iterates B's last level.
    let (r, k, l) = (3, 4, 5);
    let (a, d) = run(
        "A(i,j) = B(i,k,l) * C(k,j) * D(l,j)",
        "",
        ("A", &[m, r]),
        &[
            ("B", &[m, k, l], Some(Format::parse("dds:0,2,1", 3).unwrap()), 56),
            ("C", &[k, r], None, 57),
            ("D", &[l, r], None, 58),
        ],
    )
    .unwrap();
    let expected: Vec<f64> = (0..m * r)
        .map(|ij| {
            let (i, j) = (ij / r, ij % r);
            (0..l)
                .map(|ll| {
                    (0..k).map(|kk| d[0][(i * k + kk) * l + ll] * d[1][kk * r + j]).sum::<f64>() * d[2][ll * r + j]
                })
                .sum()
        })
        .collect();
    assert_eq!(a, expected);
}

#[test]
fn f32_kernels_match_the_dense_reference_too() {
    use nm_lower::lower::result_tensor;
    const M: usize = 12;
    const N: usize = 10;
    let (m, n) = (M, N);
    let (mn, vm, vn): (&[usize], &[usize], &[usize]) = (&[M, N], &[M], &[N]);
    let sv = || Format::parse("s", 1).unwrap();
    let cases: [(&str, (&str, TensorType), Vec<Operand<'_>>); 3] = [
        (
            "y(i) = A(i,j) * x(j)",
            ("y", TensorType::dense(vm)),
            vec![("A", mn, Some(Format::csr()), 61), ("x", vn, None, 62)],
        ),
        (
            "y(i) = b(i) - A(i,j) * x(j)",
            ("y", TensorType::dense(vm)),
            vec![("b", vm, None, 63), ("A", mn, Some(Format::csr()), 64), ("x", vn, None, 65)],
        ),
        (
            "a(i) = b(i) + c(i)",
            ("a", TensorType::sparse(vm, sv())),
            vec![("b", vm, Some(sv()), 66), ("c", vm, Some(sv()), 67)],
        ),
    ];
    for (expr, result, operands) in cases {
        let stmt = parse(expr).unwrap();
        let mut decls = Declarations::new().tensor(result.0, result.1.clone());
        for (name, shape, format, _) in &operands {
            decls = decls.tensor(
                name,
                match format {
                    Some(f) => TensorType::sparse(shape, f.clone()),
                    None => TensorType::dense(shape),
                },
            );
        }
        let types = stmt.check(&decls).unwrap();
        let lowered = lower(&concretize(&stmt), &types, ElemType::F32).unwrap();
        let f64s: Vec<Tensor<f64>> = operands.iter().map(|(_, s, f, seed)| tensor(s, f.clone(), *seed)).collect();
        let f32s: Vec<Tensor<f32>> = f64s
            .iter()
            .map(|t| {
                let mut list = t.to_coordinates();
                let values: Vec<f32> = list.values.drain(..).map(|v| v as f32).collect();
                let list = nm_format::CoordinateList { shape: list.shape, coords: list.coords, values };
                Tensor::from_coordinates(&list, t.format(), Duplicates::Reject).unwrap()
            })
            .collect();
        let by_id: Vec<Option<&Tensor<f32>>> = stmt
            .tensors
            .iter()
            .map(|(_, t)| operands.iter().position(|(n, ..)| *n == t.name).map(|k| &f32s[k]))
            .collect();
        let len = result.1.shape.iter().product();
        let mut by_interp = arguments(&lowered, &by_id, len).unwrap();
        interpret(&lowered.function, &mut by_interp).unwrap();
        let mut by_c = arguments(&lowered, &by_id, len).unwrap();
        CKernel::compile(&lowered.function, &CCompiler::from_env().unwrap()).unwrap().run(&mut by_c).unwrap();
        assert_eq!(by_c, by_interp, "{expr}");
        let format = result.1.format.clone().unwrap_or_else(|| Format::dense(1));
        let got: Tensor<f32> = result_tensor(&lowered, &by_interp, &result.1.shape, &format).unwrap();
        // The same statement in f64 through the tested f64 path, as the reference.
        let d: Vec<Vec<f64>> = f64s.iter().map(|t| t.to_dense().unwrap()).collect();
        let expected: Vec<f32> = match expr {
            "y(i) = A(i,j) * x(j)" => {
                (0..m).map(|i| (0..n).map(|j| d[0][i * n + j] * d[1][j]).sum::<f64>() as f32).collect()
            }
            "y(i) = b(i) - A(i,j) * x(j)" => {
                (0..m).map(|i| (d[0][i] - (0..n).map(|j| d[1][i * n + j] * d[2][j]).sum::<f64>()) as f32).collect()
            }
            _ => (0..m).map(|i| (d[0][i] + d[1][i]) as f32).collect(),
        };
        assert_eq!(got.to_dense().unwrap(), expected, "{expr}");
    }
}

#[test]
fn negative_coefficients_bound_outside() {
    // `O(i) = I(5 - i + p) * F(p)`: `i` is bound by a dense loop, `p` resolves I's level from
    // the window starting at `5 - i`; checked against the sum written out.
    let sv = || Some(Format::parse("s", 1).unwrap());
    let (o, d) = run("O(i) = I(5-i+p) * F(p)", "", ("O", &[4]), &[("I", &[8], sv(), 1), ("F", &[3], None, 2)]).unwrap();
    let expected: Vec<f64> = (0..4).map(|i| (0..3).map(|p| d[0][5 - i + p] * d[1][p]).sum()).collect();
    assert!(expected.iter().any(|&x| x != 0.0), "an all-zero result checks little");
    assert_eq!(o, expected);
}
