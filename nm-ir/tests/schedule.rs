//! Scheduling commands on CIN: each rewrite as text, provenance back to the unscheduled loop
//! order, loop marks that print and parse back, and every refusal with its reason.

use nm_ir::concrete::{
    Command, ConcreteNotation, OutputRace, ParallelUnit, ScheduleError, concretize, parse_concrete, parse_schedule,
};
use nm_ir::notation::parse;

fn cin(text: &str) -> ConcreteNotation {
    concretize(&parse(text).unwrap())
}

fn run(text: &str, schedule: &str) -> Result<ConcreteNotation, ScheduleError> {
    cin(text).schedule(&parse_schedule(schedule).unwrap())
}

fn names(c: &ConcreteNotation, vars: &[nm_ir::notation::IndexVarId]) -> Vec<String> {
    vars.iter().map(|&v| c.vars[v].name.clone()).collect()
}

/// The scheduled statement prints, parses back and prints the same.
fn round_trip(c: &ConcreteNotation) -> String {
    let text = c.to_string();
    assert_eq!(parse_concrete(&text).unwrap_or_else(|e| panic!("{e}")).to_string(), text);
    text
}

const SPGEMM: &str = "C(i,j) = A(i,k) * B(k,j)";

/// `bound` is a promise about how many coordinates a loop runs over: checked against the
/// sizes (each kind, on a plain, split and fused variable), then dropped — the loops run over
/// the variables they bound, with the other marks kept.
#[test]
fn bounds_are_checked_against_the_sizes_then_dropped() {
    // Sizes by variable id: i has 10 coordinates, j 6.
    let sized = |c: &ConcreteNotation| -> Vec<usize> {
        c.vars
            .iter()
            .map(|(_, v)| match v.name.as_str() {
                "i" => 10,
                "j" => 6,
                _ => 0,
            })
            .collect()
    };
    let check = |schedule: &str| {
        let c = run("y(i) = A(i,j) * x(j)", schedule).unwrap();
        c.check_bounds(&sized(&c)).map(|()| c).map_err(|e| e.to_string())
    };
    for (schedule, holds) in [
        ("bound(i, ib, 10, max_exact)", true),
        ("bound(i, ib, 10, min_exact)", true),
        ("bound(i, ib, 9, max_exact)", false),
        ("bound(i, ib, 11, min_exact)", false),
        ("bound(j, jb, 6, max_constraint)", true),
        ("bound(j, jb, 64, max_constraint)", true),
        ("bound(j, jb, 5, max_constraint)", false),
        ("bound(j, jb, 6, min_constraint)", true),
        ("bound(j, jb, 1, min_constraint)", true),
        ("bound(j, jb, 7, min_constraint)", false),
        // 10 rows in blocks of 4: 3 blocks, each of at most 4.
        ("split(i, i0, i1, 4); bound(i0, b, 3, max_exact)", true),
        ("split(i, i0, i1, 4); bound(i0, b, 2, max_exact)", false),
        ("split(i, i0, i1, 4); bound(i1, b, 4, max_exact)", true),
        ("fuse(i, j, f); bound(f, b, 60, max_exact)", true),
        ("fuse(i, j, f); bound(f, b, 59, max_constraint)", false),
        // A count of positions is the stored entries': not known here, not checked.
        ("pos(j, jp, A); bound(jp, b, 1, max_exact)", true),
    ] {
        assert_eq!(check(schedule).is_ok(), holds, "{schedule}: {:?}", check(schedule).err());
    }
    assert_eq!(
        check("bound(i, ib, 9, max_exact)").unwrap_err(),
        "bound(i, ib, 9, max_exact): the extent of `i` is 10, so the bound does not hold"
    );
    let c = check("split(i, i0, i1, 4); bound(i1, b, 4, max_exact); unroll(b, 2); bound(j, jb, 8, max_constraint)")
        .unwrap();
    assert_eq!(
        c.to_string(),
        "forall(i0, forall(b, forall(jb, y(i) += A(i,j) * x(j), bound(8, max_constraint)), unroll(2), bound(4, max_exact)))"
    );
    let plain = c.without_bounds();
    assert_eq!(round_trip(&plain), "forall(i0, forall(i1, forall(j, y(i) += A(i,j) * x(j)), unroll(2)))");
    assert_eq!(plain.provenance(), "i0 = split(i, 4).outer\ni1 = split(i, 4).inner\n");
}

#[test]
fn reorder_split_fuse_pos_bound() {
    let c = run(SPGEMM, "reorder(i, k, j)").unwrap();
    assert_eq!(round_trip(&c), "forall(i, forall(k, forall(j, C(i,j) += A(i,k) * B(k,j))))");
    let c = run(SPGEMM, "reorder(k, j)").unwrap();
    assert_eq!(round_trip(&c), "forall(i, forall(k, forall(j, C(i,j) += A(i,k) * B(k,j))))");

    let c = run(SPGEMM, "split(i, i0, i1, 32)").unwrap();
    assert_eq!(round_trip(&c), "forall(i0, forall(i1, forall(j, forall(k, C(i,j) += A(i,k) * B(k,j)))))");
    assert_eq!(c.provenance(), "i0 = split(i, 32).outer\ni1 = split(i, 32).inner\n");
    assert_eq!(names(&c, &c.unscheduled_loop_order()), ["i", "j", "k"]);

    let c = run(SPGEMM, "fuse(i, j, f)").unwrap();
    assert_eq!(round_trip(&c), "forall(f, forall(k, C(i,j) += A(i,k) * B(k,j)))");
    assert_eq!(c.provenance(), "f = fuse(i, j)\n");
    assert_eq!(names(&c, &c.unscheduled_loop_order()), ["i", "j", "k"]);

    let c = run("y(i) = A(i,j) * x(j)", "pos(j, jp, A); bound(i, ib, 1024, max_exact)").unwrap();
    assert_eq!(round_trip(&c), "forall(ib, forall(jp, y(i) += A(i,j) * x(j)), bound(1024, max_exact))");
    assert_eq!(c.provenance(), "jp = pos(j, A)\nib = bound(i, 1024, max_exact)\n");
    assert_eq!(names(&c, &c.unscheduled_loop_order()), ["i", "j"]);
}

#[test]
fn a_transposed_spgemm_schedule_traces_back_to_its_loops() {
    // The shape of the workspaces paper's Figure 11: reorder, fuse, pos, split on C(j,i) = A*B.
    let c = run("C(j,i) = A(i,k) * B(k,j)", "reorder(i, k, j); fuse(i, k, f); pos(f, fpos, A); split(fpos, f0, f1, 8)")
        .unwrap();
    assert_eq!(round_trip(&c), "forall(f0, forall(f1, forall(j, C(j,i) += A(i,k) * B(k,j))))");
    assert_eq!(names(&c, &c.loop_order()), ["f0", "f1", "j"]);
    assert_eq!(names(&c, &c.unscheduled_loop_order()), ["i", "k", "j"]);
    assert_eq!(names(&c, &c.origins(c.var_named_pub("f1"))), ["i", "k"]);
}

trait VarNamed {
    fn var_named_pub(&self, name: &str) -> nm_ir::notation::IndexVarId;
}

impl VarNamed for ConcreteNotation {
    fn var_named_pub(&self, name: &str) -> nm_ir::notation::IndexVarId {
        self.vars.iter().find(|(_, v)| v.name == name).unwrap().0
    }
}

#[test]
fn loop_marks_print_and_parse_back() {
    let c = run("y(i) = A(i,j) * x(j)", "parallelize(i, cpu_thread, no_races); unroll(j, 4)").unwrap();
    assert_eq!(
        round_trip(&c),
        "forall(i, forall(j, y(i) += A(i,j) * x(j), unroll(4)), parallelize(cpu_thread, no_races))"
    );
    let c = run("y(i) = A(i,j) * x(j)", "parallelize(j, cpu_vector, atomics)").unwrap();
    assert_eq!(round_trip(&c), "forall(i, forall(j, y(i) += A(i,j) * x(j), parallelize(cpu_vector, atomics)))");
    // A temporary accumulated inside the loop does not race: each iteration has its own.
    let c = run("y(i) = b(i) - A(i,j) * x(j)", "parallelize(i, cpu_thread, no_races)").unwrap();
    assert!(round_trip(&c).ends_with("parallelize(cpu_thread, no_races))"));
    // Reordering carries the marks with their loops.
    let c = run(SPGEMM, "unroll(k, 2); reorder(k, j)").unwrap();
    assert_eq!(round_trip(&c), "forall(i, forall(k, forall(j, C(i,j) += A(i,k) * B(k,j)), unroll(2)))");
}

#[test]
fn illegal_commands_say_why() {
    let err = |text: &str, schedule: &str| run(text, schedule).unwrap_err().to_string();
    assert_eq!(
        err(SPGEMM, "split(x, x0, x1, 4)"),
        "split: there is no loop over `x` in forall(i, forall(j, forall(k, C(i,j) += A(i,k) * B(k,j))))"
    );
    assert_eq!(
        err(SPGEMM, "split(i, j, i1, 4)"),
        "split: the name `j` is already used; pick a new name for the derived variable"
    );
    assert_eq!(err(SPGEMM, "split(i, i0, i1, 0)"), "split: the factor must be at least 1");
    assert_eq!(err(SPGEMM, "unroll(i, 0)"), "unroll: the factor must be at least 1");
    assert_eq!(
        err(SPGEMM, "fuse(i, k, f)"),
        "fuse: the loops over `i` and `k` are not directly nested (the loop over `j` stands between them)"
    );
    assert_eq!(
        err(SPGEMM, "reorder(i, k)"),
        "reorder: the loops over `i` and `k` are not directly nested (the loop over `j` stands between them)"
    );
    assert_eq!(err(SPGEMM, "reorder(i, i)"), "reorder: `i` is named twice");
    assert_eq!(err(SPGEMM, "reorder(j, k, j)"), "reorder: `j` is named twice");
    assert_eq!(
        err("y(i) = b(i) - A(i,j) * x(j)", "reorder(i, j)"),
        "reorder: the loops over `i` and `j` are not directly nested (a `where` stands between them)"
    );
    assert_eq!(
        err("y(i) = A(i,j) * x(j)", "pos(j, jp, x2)"),
        "pos: no access to `x2` read below the loop over `j` has `j` (or what it was fused from) as plain subscripts, so there are no positions to iterate (pos iterates over the stored entries of a tensor the loop reads)"
    );
    assert_eq!(
        err("y(i) = A(i,j) * x(j)", "parallelize(j, cpu_thread, no_races)"),
        "parallelize: iterations of `j` write the same elements of `y` (`j` does not index it), so no_races does not hold"
    );
    // A loop of a `where` producer sums into a temporary declared outside it: every
    // iteration adds to the same `t0` (it raced, giving wrong sums; found by the differential
    // tests). The loop around the `where` still may (above).
    assert_eq!(
        err("y(i) = b(i) - A(i,j) * x(j)", "parallelize(j, cpu_thread, no_races)"),
        "parallelize: iterations of `j` write the same elements of the temporary `t0` that -print-concrete shows (`j` does not index it), so no_races does not hold"
    );
    assert_eq!(
        err(
            "y(i) = A(i,j) * x(j)",
            "fuse(i, j, f); pos(f, fp, A); split(fp, f0, f1, 4); parallelize(f0, cpu_thread, no_races)"
        ),
        "parallelize: iterations of `f0` write the same elements of `y` (`f0` comes from `j`, which does not index it), so no_races does not hold"
    );
    assert_eq!(
        err("y(i) = A(i,j) * x(j)", "parallelize(i, cpu_thread, no_races); parallelize(j, cpu_vector, atomics)"),
        "parallelize: `j` is inside the parallel loop over `i`; nested parallelism is not supported"
    );
    assert_eq!(
        err("y(i) = A(i,j) * x(j)", "parallelize(j, cpu_vector, atomics); parallelize(i, cpu_thread, no_races)"),
        "parallelize: `i` is around the parallel loop over `j`; nested parallelism is not supported"
    );
}

#[test]
fn schedules_parse_with_carets() {
    assert_eq!(
        parse_schedule("split(i, i0, i1, 32); parallelize(i0, cpu_thread, atomics)").unwrap(),
        vec![
            Command::Split("i".into(), "i0".into(), "i1".into(), 32),
            Command::Parallelize("i0".into(), ParallelUnit::CpuThread, OutputRace::Atomics)
        ]
    );
    let error = |t: &str| parse_schedule(t).unwrap_err().to_string();
    assert_eq!(
        error("tile(i, 4)"),
        "unknown scheduling command: expected reorder, split, divide, fuse, pos, parallelize, unroll, bound, precompute, mergeby or assemble\n  tile(i, 4)\n  ^^^^"
    );
    assert_eq!(error("split(i, i0, i1)"), "expected `,` between arguments\n  split(i, i0, i1)\n                 ^");
    assert_eq!(
        error("reorder(i, j) reorder(j, i)"),
        "expected `,` or `;` between commands\n  reorder(i, j) reorder(j, i)\n                ^^^^^^^"
    );
    assert_eq!(
        error("parallelize(i, cpu, no_races)"),
        "expected one of: NotParallel CPUThread CPUVector GPUBlock GPUWarp GPUThread\n  parallelize(i, cpu, no_races)\n                 ^^^"
    );
    assert_eq!(
        error("precompute(B(i,j) *, j, jw, w)"),
        "expected a tensor access, a number, `(` or `-`\n  precompute(B(i,j) *, j, jw, w)\n                     ^"
    );
    assert_eq!(
        error("precompute(B(i,j), j, jw, w, heap)"),
        "unknown workspace policy `heap` (expected auto, dense, bucket, hash, hash(L), coord, map or vector)\n  precompute(B(i,j), j, jw, w, heap)\n                               ^^^^"
    );
    assert_eq!(error("unroll(i, -2)"), "expected a non-negative integer\n  unroll(i, -2)\n            ^");
    // Beyond u32 (and beyond i64, which lexes as a float): said so, not "non-negative".
    assert_eq!(
        error("unroll(i, 4294967296)"),
        "too large: at most 4294967295\n  unroll(i, 4294967296)\n            ^^^^^^^^^^"
    );
    assert_eq!(
        error("split(i, i0, i1, 18446744073709551616)"),
        "too large: at most 4294967295\n  split(i, i0, i1, 18446744073709551616)\n                   ^^^^^^^^^^^^^^^^^^^^"
    );
}

#[test]
fn precompute_makes_a_temporary() {
    // Gustavson's SpGEMM: the reduction loop k moves into the producer.
    let c = run(SPGEMM, "reorder(k, j); precompute(B(k,j) * A(i,k), j, jw, w)").unwrap_err();
    assert!(c.to_string().starts_with("precompute: `B(k,j) * A(i,k)` is not a subexpression of"), "{c}");
    let c = run(SPGEMM, "reorder(k, j); precompute(A(i,k) * B(k,j), j, jw, w)").unwrap();
    assert_eq!(
        round_trip(&c),
        "forall(i, where(forall(j, C(i,j) += w(j)), forall(k, forall(jw, w(jw) += A(i,k) * B(k,jw)))))"
    );
    assert!(c.workspaces.is_empty());
    // After a split of `i`, both of its loops are loops over `i`, kept outside the `where`
    // (they were taken for reductions and moved into the producer, leaving `i` free in the
    // consumer).
    let c = run(SPGEMM, "reorder(k, j); split(i, i0, i1, 4); precompute(A(i,k) * B(k,j), j, jw, w)").unwrap();
    assert_eq!(
        round_trip(&c),
        "forall(i0, forall(i1, where(forall(j, C(i,j) += w(j)), forall(k, forall(jw, w(jw) += A(i,k) * B(k,jw))))))"
    );
    // Element-wise: no loop moves, the producer assigns.
    let c = run("A(i,j) = B(i,j) * C(i,j) * D(j)", "precompute(B(i,j) * C(i,j), j, jw, w)").unwrap();
    assert_eq!(
        round_trip(&c),
        "forall(i, where(forall(j, A(i,j) = w(j) * D(j)), forall(jw, w(jw) = B(i,jw) * C(i,jw))))"
    );
    // A policy makes it a sparse workspace.
    let c = run(SPGEMM, "reorder(k, j); precompute(A(i,k) * B(k,j), j, jw, w, hash(64))").unwrap();
    let (t, kind, policy, _) = &c.workspaces[0];
    assert_eq!(
        (c.tensors[*t].name.as_str(), *kind, policy.to_string()),
        ("w", nm_ir::concrete::WorkspaceKind::Sparse, "hash(64)".to_string())
    );
}

#[test]
fn precompute_refuses_what_a_vector_temporary_cannot_hold() {
    let err = |text: &str, schedule: &str| run(text, schedule).unwrap_err().to_string();
    // j is bound inside i and used by both the expression and the result.
    assert_eq!(
        err("A(i,j) = B(i,j) * C(j)", "precompute(B(i,j), i, iw, w)"),
        "precompute: `B(i,j)` depends on `j`, bound inside `i`, so w(i) cannot hold it; precompute over `j` instead"
    );
    // The rest of the statement reads k, which the producer would sum away.
    assert_eq!(
        err("C(i,j) = A(i,k) * B(k,j) * d(k)", "reorder(k, j); precompute(A(i,k) * B(k,j), j, jw, w)"),
        "precompute: the rest of the statement uses `k`, which the precomputed expression sums over"
    );
    // The expression is written over `j`: a loop made from it indexes no part of it.
    assert_eq!(
        err(SPGEMM, "reorder(k, j); split(j, j0, j1, 4); precompute(A(i,k) * B(k,j), j0, jw, w)"),
        "precompute: `j0` is made by a schedule command; precompute over `j` before that command"
    );
    assert_eq!(
        err(SPGEMM, "reorder(k, j); precompute(A(i,k) * B(k,j), j, k, w)"),
        "precompute: the name `k` is already used; pick a new name for the derived variable"
    );
    assert_eq!(
        err(SPGEMM, "reorder(k, j); precompute(A(i,k) * B(k,j), j, jw, A)"),
        "precompute: the name `A` is already used; pick a new name for the derived variable"
    );
}

#[test]
fn loop_marks_in_cin_text_are_checked() {
    let error = |t: &str| parse_concrete(t).unwrap_err().to_string();
    assert_eq!(
        error("forall(i, y(i) = x(i), vectorize(4))"),
        "unknown loop mark: expected parallelize, unroll or bound\n  forall(i, y(i) = x(i), vectorize(4))\n                         ^^^^^^^^^"
    );
    assert_eq!(
        error("forall(i, y(i) = x(i), parallelize(cpu_thread, maybe))"),
        "expected one of: no_races ignore_races atomics temporary parallel_reduction\n  forall(i, y(i) = x(i), parallelize(cpu_thread, maybe))\n                                                 ^^^^^"
    );
    assert_eq!(
        error("forall(i, y(i) = x(i), bound(16, exact))"),
        "expected one of: min_exact min_constraint max_exact max_constraint\n  forall(i, y(i) = x(i), bound(16, exact))\n                                   ^^^^^"
    );
    let c = parse_concrete("forall(i, y(i) = x(i), bound(16, min_exact), unroll(2))").unwrap();
    assert_eq!(c.to_string(), "forall(i, y(i) = x(i), unroll(2), bound(16, min_exact))");
}

/// The strings of taco's schedule-parser tests and the directives of its command-line tests:
/// commas between commands, whitespace anywhere, nested parentheses inside `precompute`'s
/// expression, and unbalanced parentheses refused with a caret.
#[test]
fn taco_schedule_strings_parse() {
    let split = Command::Split("i".into(), "i0".into(), "i1".into(), 16);
    let precompute = Command::Precompute("A(i,j) * x(j)".into(), vec!["i".into()], vec!["i".into()], None, None);
    assert_eq!(parse_schedule("split(i,i0,i1,16)").unwrap(), vec![split.clone()]);
    assert_eq!(parse_schedule("precompute(A(i,j)*x(j),i,i)").unwrap(), vec![precompute.clone()]);
    for text in [
        "split(i,i0,i1,16),precompute(A(i,j)*x(j),i,i)",
        "split(i, i0, i1, 16), precompute(A(i, j) * x(j), i, i)",
        " split ( i , i0 , i1 , 16 ) ; precompute ( A ( i , j ) * x ( j ) , { i } , { i } ) ",
    ] {
        assert_eq!(parse_schedule(text).unwrap(), vec![split.clone(), precompute.clone()], "{text}");
    }
    assert_eq!(parse_schedule("").unwrap(), vec![]);
    assert_eq!(
        parse_schedule("bound(i,100,MaxExact),bound(j,jb,100,MaxConstraint)").unwrap(),
        vec![
            Command::Bound("i".into(), "i".into(), 100, nm_ir::concrete::BoundType::MaxExact),
            Command::Bound("j".into(), "jb".into(), 100, nm_ir::concrete::BoundType::MaxConstraint),
        ]
    );
    assert_eq!(
        parse_schedule("parallelize(i,NotParallel,Atomics),parallelize(i0,CPUThread,NoRaces)").unwrap(),
        vec![
            Command::NotParallel("i".into()),
            Command::Parallelize("i0".into(), ParallelUnit::CpuThread, OutputRace::NoRaces)
        ]
    );
    let error = |t: &str| parse_schedule(t).unwrap_err().to_string();
    // taco's "too few right-parens" and "too many right-parens".
    assert_eq!(error("split(i,i0,i1,16"), "expected `)` closing `split(`\n  split(i,i0,i1,16\n                  ^");
    assert_eq!(
        error("reorder(i,j))"),
        "an unmatched `)`: more right parentheses than left\n  reorder(i,j))\n              ^"
    );
    assert!(error("precompute(A(i,j*x(j),i,i)").contains("expected"), "{}", error("precompute(A(i,j*x(j),i,i)"));
    assert!(error("i,j,k").starts_with("unknown scheduling command"), "{}", error("i,j,k"));
    assert_eq!(
        error("bound(k,100,Unknown)"),
        "expected one of: MinExact MinConstraint MaxExact MaxConstraint\n  bound(k,100,Unknown)\n              ^^^^^^^"
    );
    assert_eq!(
        error("assemble(a,Append,wombat)"),
        "expected true or false\n  assemble(a,Append,wombat)\n                    ^^^^^^"
    );
    // GPU units parse (they are taco's) and are refused when applied, by name.
    let gpu = run("y(i) = A(i,j) * x(j)", "parallelize(i,GPUBlock,IgnoreRaces)").unwrap_err().to_string();
    assert!(gpu.starts_with("parallelize(i, gpu_block, ...): GPU units need CUDA code"), "{gpu}");
}

/// `bound` on the loop's own variable (taco's three-argument form) is checked like a renamed one.
#[test]
fn bound_keeps_the_name_when_asked() {
    let c = run(SPGEMM, "bound(k,100,MaxExact)").unwrap();
    assert_eq!(round_trip(&c), "forall(i, forall(j, forall(k, C(i,j) += A(i,k) * B(k,j), bound(100, max_exact))))");
    let sizes = |n: usize| vec![n; c.vars.len()];
    assert!(c.check_bounds(&sizes(100)).is_ok());
    let broken = c.check_bounds(&sizes(99)).unwrap_err().to_string();
    assert!(broken.contains("99"), "{broken}");
}

/// CIN's verifier passes what concretize and the scheduling commands make, and names each
/// broken rule: a loop inside a loop over the same variable, an assignment using a variable
/// no loop binds or derives, a statement reached twice.
#[test]
fn the_verifier_passes_what_the_scheduler_makes_and_names_each_broken_rule() {
    for (expr, schedule) in [
        (SPGEMM, "reorder(i, k, j)"),
        (SPGEMM, "split(i, i0, i1, 32); reorder(i0, k, i1, j)"),
        (SPGEMM, "fuse(i, j, f)"),
        ("y(i) = A(i,j) * x(j)", "pos(j, jp, A); bound(i, ib, 1024, max_exact)"),
        (SPGEMM, "reorder(k, j); precompute(A(i,k) * B(k,j), j, jw, w)"),
    ] {
        let c = run(expr, schedule).unwrap_or_else(|e| panic!("{expr} / {schedule}: {e}"));
        c.verify().unwrap_or_else(|e| panic!("{expr} / {schedule}: {e}"));
    }
    let broken = |text: &str, expected: &str| {
        let e = parse_concrete(text).unwrap().verify().unwrap_err().to_string();
        assert!(e.contains(expected), "{text}: {e}");
    };
    broken("forall(i, forall(i, y(i) += A(i,j) * x(j)))", "a loop over `i` inside a loop over it");
    broken("forall(i, y(i) += A(i,j) * x(j))", "`j` is used in an assignment no loop around binds or derives it");
    let mut c = parse_concrete("forall(i, forall(j, y(i) += A(i,j) * x(j)))").unwrap();
    let inner = match &c.stmts[c.root] {
        nm_ir::concrete::Stmt::Forall { body, .. } => *body,
        _ => unreachable!("a forall"),
    };
    let twice = c.stmts.push(nm_ir::concrete::Stmt::Sequence { first: inner, second: inner });
    if let nm_ir::concrete::Stmt::Forall { body, .. } = &mut c.stmts[c.root] {
        *body = twice;
    }
    assert!(c.verify().unwrap_err().to_string().contains("reached twice"));
}
