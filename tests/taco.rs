//! taco's command lines, unchanged: the examples of its `--help` and `-help=scheduling`, the
//! strings of its schedule-parser tests and the directives of its command-line tests, its
//! options, FROSTT files that state no shape, and "valid" sizes for compound subscripts —
//! each result compared with the independent dense reference.

mod common;

use common::command::{nmsparse, scratch, stderr, stdout};
use common::{Dense, reference_sized};
use nmsparse::format::io::read_tensor;
use nmsparse::ir::id::Id;
use nmsparse::ir::notation::parse;

/// Runs `args` (the expression first) with every tensor written by `-O`, reads them back and
/// checks the result against the dense reference, with `given` sizes for the variables the
/// reference cannot read off plain subscripts. Returns the command's stderr.
fn matches_reference(args: &[&str], given: &[(&str, usize)]) -> String {
    let dir = scratch(&format!("taco-{:x}", fingerprint(args)));
    let _ = std::fs::remove_dir_all(&dir);
    let out_dir = format!("-O={}", dir.display());
    let mut all = args.to_vec();
    all.push(&out_dir);
    let o = nmsparse(&all);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let stmt = parse(args[0]).unwrap();
    let mut shapes = vec![Vec::new(); stmt.tensors.len()];
    let mut arrays = vec![None; stmt.tensors.len()];
    let mut result = Vec::new();
    for (id, t) in stmt.tensors.iter() {
        let tensor = read_tensor::<f64>(dir.join(format!("{}.tns", t.name)), "dense").unwrap();
        shapes[id.index()] = tensor.shape().to_vec();
        let values = tensor.to_dense().unwrap();
        if id == stmt.lhs.tensor {
            result = values;
        } else {
            arrays[id.index()] = Some(values);
        }
    }
    let expected = reference_sized(args[0], &Dense { shapes, arrays }, given);
    assert_eq!(result.len(), expected.len(), "{args:?}");
    for (k, (got, want)) in result.iter().zip(&expected).enumerate() {
        assert!((got - want).abs() <= 1e-9 * (1.0 + want.abs()), "{args:?}: element {k}: {got} against {want}");
    }
    assert!(expected.iter().any(|&v| v != 0.0), "{args:?}: a reference of zeros tests nothing");
    stderr(&o)
}

fn fingerprint(args: &[&str]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    args.hash(&mut h);
    h.finish()
}

/// taco's `--help` examples run as written, and, at sizes the brute-force reference can
/// afford, match it; so do `-help=scheduling`'s.
#[test]
fn the_examples_of_taco_help_run_and_match_the_reference() {
    // (the example, sizes the reference can afford)
    let examples: [(&[&str], &[&str]); 6] = [
        (&["a(i) = b(i) + c(i)"], &["-d=i:50"]),
        (&["a(i) = b(i) + c(i)", "-f=b:s", "-f=c:s", "-f=a:s"], &["-d=i:50", "-g=b:0.3", "-g=c:0.3"]),
        (&["a(i) = B(i,j) * c(j)", "-f=B:ds"], &["-d=i:40", "-d=j:30", "-g=B:0.3"]),
        (&["A(i,l) = B(i,j,k) * C(j,l) * D(k,l)", "-f=B:sss"], &["-d=i:12", "-d=j:10", "-d=k:9", "-d=l:5", "-g=B:0.2"]),
        (&["y(i) = A(i,j) * x(j)", "-s=precompute(A(i,j)*x(j),i,i)"], &["-d=i:40", "-d=j:30"]),
        (&["y(i) = A(i,j) * x(j)", "-s=split(i,i0,i1,32),parallelize(i0,CPUThread,NoRaces)"], &["-d=i:70", "-d=j:30"]),
    ];
    for (example, sizes) in examples {
        let o = nmsparse(example);
        assert!(o.status.success(), "{example:?}: {}", stderr(&o));
        assert!(stdout(&o).contains("stored values, checksum"), "{example:?}: {}", stdout(&o));
        let mut small = example.to_vec();
        small.extend_from_slice(sizes);
        matches_reference(&small, &[]);
    }
}

/// The directives of taco's command-line tests, on its expressions, each against the reference;
/// the ones its tests expect to fail fail here too, naming the problem.
#[test]
fn the_directives_of_taco_command_line_tests() {
    let product = ["a(i,j) = b(i,k) * c(k,j)", "-d=i:12", "-d=j:10", "-d=k:40"];
    for s in [
        "reorder(i,j,k)",
        "reorder(k,i,j)",
        "split(i,i0,i1,4)",
        "divide(i,i0,i1,4)",
        "reorder(i,j,k),fuse(i,j,ij)",
        "bound(i,12,MaxExact)",
        "bound(k,kb,40,MaxExact)",
        "reorder(i,j,k),split(k,k0,k1,32),unroll(k0,4)",
        "reorder(i,j,k),bound(k,40,MaxExact),unroll(k,4)",
        "parallelize(i,NotParallel,IgnoreRaces)",
        "parallelize(i,NotParallel,Temporary)",
        "reorder(i,j,k),split(k,k0,k1,32),parallelize(k0,CPUVector,IgnoreRaces)",
        "parallelize(i,CPUThread,IgnoreRaces)",
        "mergeby(k,Gallop),assemble(a,Insert,true)",
    ] {
        let directive = format!("-s={s}");
        let mut args = product.to_vec();
        args.push(&directive);
        matches_reference(&args, &[]);
    }
    let scaled = ["a(i) = b(i,j)*1 * c(j)", "-f=b:ds", "-d=i:30", "-d=j:20", "-g=b:0.3"];
    for s in [
        "precompute(b(i,j)*1*c(j),j,j)",
        "precompute(b(i,j)*1*c(j),j,k)",
        "precompute(b(i,j)*1,j,j)",
        "precompute(b(i,j)*1,j,k)",
        "assemble(a,Append)",
        "assemble(a,Insert,false)",
    ] {
        let directive = format!("-s={s}");
        let mut args = scaled.to_vec();
        args.push(&directive);
        let said = matches_reference(&args, &[]);
        if s == "precompute(b(i,j)*1,j,j)" {
            assert!(said.contains("is computed where its consumer reads it"), "{said}");
        }
    }
    for (s, error) in [
        ("bound(k,100,Unknown)", "expected one of: MinExact MinConstraint MaxExact MaxConstraint"),
        ("bound(k,kb,100,MaxExact)", "the extent of `k` is 40, so the bound does not hold"),
        ("assemble(b,Append)", "assemble: `b` is not a result of the statement (it writes `a`)"),
        ("assemble(a,Wombat)", "expected one of: Append Insert"),
        ("assemble(a,Append,wombat)", "expected true or false"),
        ("parallelize(i,Unknown,IgnoreRaces)", "expected one of: NotParallel CPUThread CPUVector"),
        ("parallelize(i,NotParallel,Unknown)", "expected one of: NoRaces IgnoreRaces Atomics"),
        ("parallelize(i,GPUBlock,IgnoreRaces),parallelize(j,GPUThread,IgnoreRaces)", "GPU units need CUDA code"),
        ("split(i,i0,i1,4", "expected `)` closing `split(`"),
        ("split(i,i0,i1,4))", "an unmatched `)`"),
    ] {
        let directive = format!("-s={s}");
        let mut args = product.to_vec();
        args.push(&directive);
        let o = nmsparse(&args);
        assert!(!o.status.success(), "{s}");
        assert!(stderr(&o).contains(error), "{s}: {}", stderr(&o));
    }
}

/// Every option of taco's runs or is refused by name with the reason.
#[test]
fn taco_options_run_or_are_refused_by_name() {
    let spmv = ["y(i) = A(i,j) * x(j)", "-f=A:ds"];
    let with = |extra: &[&str]| {
        let mut args = spmv.to_vec();
        args.extend_from_slice(extra);
        nmsparse(&args)
    };
    // Sizes per tensor, types per tensor, -time without a value, the OpenMP schedule (once
    // misread as `-s=chedule...`), fills, formats.
    for extra in [
        &["-d=A:10,10", "-d=x:10"][..],
        &["-d=i:10", "-d=j:10", "-t=A:float", "-t=x:float", "-t=y:float"],
        &["-d=i:10", "-d=j:10", "-time"],
        &["-d=i:10", "-d=j:10", "-schedule=dynamic,16", "-nocolor", "-print-nocolor"],
        &["-d=i:10", "-d=j:10", "-g=A:l"],
        &["-d=i:10", "-d=j:10", "-g=A:f"],
        &["-d=i:10", "-d=j:10", "-g=A:b"],
        &["-d=i:10", "-d=j:10", "-g=A:v"],
        &["-d=i:10", "-d=j:10", "-f=x:z"],
    ] {
        let o = with(extra);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        assert!(stdout(&o).contains("y: shape [10]"), "{extra:?}: {}", stdout(&o));
    }
    let o = with(&["-d=i:10", "-d=j:10", "-time"]);
    assert!(stdout(&o).contains("Compute:") && stdout(&o).contains("over 1 runs"), "{}", stdout(&o));
    for (extra, said) in [
        (&["-t=A:uint16"][..], "-t=A:uint16: nmsparse computes in float or double"),
        (&["-t=A:float", "-t=x:double"], "every tensor computes in one value type here"),
        (&["-cuda"], "-cuda: nmsparse generates C for the CPU"),
        (&["-f=x:p"], "`p`"),
        (&["-schedul=static"], "unknown option `-schedul`"),
        (&["-print-lattice=q"], "-print-lattice=q: the statement has no index variable `q`"),
        (&["-verify"], "-verify compares the kernels of -read-source=FILE"),
    ] {
        let o = with(extra);
        assert!(!o.status.success(), "{extra:?}");
        assert!(stderr(&o).contains(said), "{extra:?}: {}", stderr(&o));
    }
    let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-f=A:ds:1,0:1", "-d=i:4", "-d=j:4"]);
    assert!(o.status.success() && stderr(&o).contains("pack bounds"), "{}", stderr(&o));
    // The help leads with the expression mode; -help=scheduling and -version.
    let help = stdout(&nmsparse(&["--help"]));
    assert!(help.starts_with("Sparse tensor algebra") && help.contains("Usage: nmsparse \"<expression>\""), "{help}");
    assert!(help.find("# SpMV").unwrap() < help.find("Subcommands:").unwrap(), "{help}");
    let scheduling = stdout(&nmsparse(&["-help=scheduling"]));
    assert!(scheduling.contains("-s=\"precompute(A(i,j)*x(j),i,i)\""), "{scheduling}");
    assert!(stdout(&nmsparse(&["-version"])).starts_with("nmsparse "));
    // What the printing options print.
    let o = with(&["-d=i:10", "-d=j:10", "-f=x:s", "-print-evaluate", "-print-kernels", "-print-lattice=j"]);
    let out = stdout(&o);
    assert!(
        out.contains("merge lattice of `y(i) += A(i,j) * x(j)` along `j`:\nlp0: [A.1 x.0] | A(i,j) * x(j)"),
        "{out}"
    );
    assert!(out.matches("int kernel(nms_array *restrict args)").count() >= 2, "{out}");
}

/// Kernels written to a file, with a prefix, read back, timed and verified.
#[test]
fn kernels_written_read_back_and_verified() {
    let source = scratch("taco-kernels.c");
    let (compute, assembly) = (scratch("taco-compute.c"), scratch("taco-assembly.c"));
    let spgemm = ["C(i,j) = A(i,k) * B(k,j)", "-f=A:csr", "-f=B:csr", "-f=C:csr", "-d=i:30", "-d=j:30", "-d=k:30"];
    let mut args = spgemm.to_vec();
    let written = [
        format!("-write-source={}", source.display()),
        format!("-write-compute={}", compute.display()),
        format!("-write-assembly={}", assembly.display()),
        "-prefix=mine_".to_string(),
    ];
    args.extend(written.iter().map(String::as_str));
    let o = nmsparse(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&source).unwrap();
    assert!(text.contains("int mine_kernel_assemble(") && text.contains("int mine_kernel_compute("), "{text}");
    assert!(std::fs::read_to_string(&compute).unwrap().contains("int mine_kernel_compute("));
    assert!(std::fs::read_to_string(&assembly).unwrap().contains("int mine_kernel_assemble("));
    let read = format!("-read-source={}", source.display());
    let mut args = spgemm.to_vec();
    args.extend([read.as_str(), "-verify", "-time=2", "-prefix=mine_"]);
    let o = nmsparse(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("verified {}: the same result", source.display())), "{}", stdout(&o));
    // Without the prefix it was written with, the functions are not found, and it says so.
    let mut args = spgemm.to_vec();
    args.push(read.as_str());
    let o = nmsparse(&args);
    assert!(stderr(&o).contains("give the -prefix it was written with"), "{}", stderr(&o));
}

/// A FROSTT file states no shape: the smallest holding its coordinates, grown by a size from
/// -d or another operand; a coordinate outside a size declared elsewhere is the error.
#[test]
fn frostt_shapes_grow_to_the_sizes_given_elsewhere() {
    let x = scratch("taco-x3.tns");
    std::fs::write(&x, "1 1.5\n3 -2\n").unwrap();
    let input = format!("-i=x:{}", x.display());
    let with_x = |extra: &[&'static str]| {
        let mut args = vec!["y(i) = A(i,j) * x(j)", input.as_str(), "-g=A:d"];
        args.extend_from_slice(extra);
        args
    };
    // Five columns from -d, from A's dimensions, from A's file.
    matches_reference(&with_x(&["-d=i:4", "-d=j:5"]), &[]);
    matches_reference(&with_x(&["-d=A:4,5"]), &[]);
    let a = scratch("taco-a45.mtx");
    std::fs::write(&a, "%%MatrixMarket matrix coordinate real general\n4 5 3\n1 1 1\n2 3 2\n4 5 3\n").unwrap();
    let file = format!("-i=A:{}", a.display());
    matches_reference(&["y(i) = A(i,j) * x(j)", &input, &file], &[]);
    // Alone, three; past a size given elsewhere, an error.
    let o = nmsparse(&with_x(&["-d=i:4"]));
    assert!(stdout(&o).contains("y: shape [4]"), "{}", stderr(&o));
    let o = nmsparse(&with_x(&["-d=i:4", "-d=j:2"]));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(
            "`x` has coordinates up to 3 in dimension 1 (its file states no shape), past the size 2 of `j` from -d=j:2"
        ),
        "{}",
        stderr(&o)
    );
    // A stated shape is authoritative.
    std::fs::write(&x, "# shape 3\n1 1.5\n3 -2\n").unwrap();
    let o = nmsparse(&with_x(&["-d=i:4", "-d=j:5"]));
    assert!(!o.status.success() && stderr(&o).contains("size 5 from -d=j:5 but size 3"), "{}", stderr(&o));
}

/// Finite differences and autocorrelation: each variable ranges over the values that keep
/// every access in bounds, in every format of the operand.
#[test]
fn valid_sizes_run_finite_differences_and_autocorrelation_in_every_format() {
    let b = scratch("taco-b23.tns");
    let text: String =
        (1..=23).filter(|k| k % 4 != 2).map(|k| format!("{k} {}\n", (k * k) as f64 * 0.5 - 3.0)).collect();
    std::fs::write(&b, &text).unwrap();
    let input = format!("-i=B:{}", b.display());
    for format in ["d", "s", "u", "z"] {
        let f = format!("-f=B:{format}");
        // 22 differences of 23 values: from the file alone, and with -d saying so.
        matches_reference(&["D(i) = B(i+1) - B(i)", &input, &f], &[]);
        matches_reference(&["D(i) = B(i+1) - B(i)", &input, &f, "-d=i:22"], &[]);
        let f_i = format!("-f=I:{format}");
        let input_i = format!("-i=I:{}", b.display());
        // Lags 0..3 of 23 values: i over 23 - 3 = 20 values for every lag.
        matches_reference(&["A(p) = I(i+p) * I(i)", &input_i, &f_i, "-d=p:4"], &[("i", 20)]);
    }
    // Two dimensions, every matrix format.
    for format in ["dd", "csr", "csc", "dcsr", "coo"] {
        let f = format!("-f=B:{format}");
        matches_reference(&["D(i,j) = B(i+1,j) - B(i,j)", &f, "-d=B:9,7", "-g=B:0.4"], &[]);
    }
    // A result declared larger than the range keeps zeros past it.
    matches_reference(&["D(i) = B(i+1) - B(i)", &input, "-d=D:25"], &[("i", 24)]);
    // More values than keep the accesses in bounds: an error naming the limiting access.
    let o = nmsparse(&["D(i) = B(i+1) - B(i)", &input, "-d=i:23"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("index variable `i` has size 23 from -d=i:23 but size 22 here"), "{}", stderr(&o));
}

/// A vector result written as Matrix Market is an n×1 matrix; an output that cannot be
/// written is refused before anything runs.
#[test]
fn outputs_are_checked_first_and_vectors_write_as_columns() {
    let y = scratch("taco-y.mtx");
    let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-d=i:6", "-d=j:4", &format!("-o=y:{}", y.display())]);
    assert!(o.status.success(), "{}", stderr(&o));
    let written = read_tensor::<f64>(&y, "dense").unwrap();
    assert_eq!(written.shape(), &[6, 1]);
    for bad in ["-o=y:/nonexistent-dir/y.mtx", "-o=y:y.csv"] {
        let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-d=i:6", "-d=j:4", bad, "-time"]);
        assert!(!o.status.success(), "{bad}");
        assert!(!stdout(&o).contains("Compute:"), "{bad}: ran before refusing: {}", stdout(&o));
    }
}
