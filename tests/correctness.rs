//! Every answer right or refused: the regressions of what a new user and a hostile one found —
//! a tensor read by several accesses, sparse results of inner products, a damaged kernel
//! cache, files whose meaning would change silently, command lines that were misread.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::command::{nmsparse, nmsparse_with, sample, scratch, stderr, stdout};
use common::{Dense, operand, reference, stored_elements, structure_sized};
use nmsparse::format::generate::{Values, uniform};
use nmsparse::format::io::read_tensor;
use nmsparse::format::{Format, Tensor};
use nmsparse::ir::id::Id;
use nmsparse::{Backend, Program};

/// The summary line's checksum and stored count.
fn summary(o: &Output) -> String {
    assert!(o.status.success(), "{}", stderr(o));
    stdout(o).lines().last().unwrap_or_default().to_string()
}

/// `expr` on random operands through the API, on both back ends, against the dense reference
/// for the values and the operands' structure for the stored elements.
fn check_api(expr: &str, decls: &[(&str, &[usize], &str)], schedule: Option<&str>) {
    let stmt = nmsparse::ir::notation::parse(expr).unwrap();
    let n = stmt.tensors.len();
    let mut d = Dense { shapes: vec![Vec::new(); n], arrays: vec![None; n] };
    let mut stored = vec![None; n];
    let mut program = Program::new(expr).unwrap();
    let mut operands = Vec::new();
    for (k, &(name, shape, format)) in decls.iter().enumerate() {
        program = program.tensor(name, shape, format).unwrap();
        let id = stmt.tensor_named(name).unwrap().index();
        d.shapes[id] = shape.to_vec();
        if id == stmt.lhs.tensor.index() {
            continue;
        }
        let list = uniform::<f64>(shape, 0.15, Values::SmallIntegers(4), 40 + k as u64);
        let t = operand(&list, &Format::parse(format, shape.len()).unwrap()).unwrap();
        d.arrays[id] = Some(t.to_dense().unwrap());
        stored[id] = Some(stored_elements(&t));
        operands.push((name, t));
    }
    if let Some(s) = schedule {
        program = program.schedule(s);
    }
    let expected = reference(expr, &d);
    let structure = structure_sized(expr, &d.shapes, &stored, &[]);
    let args: Vec<(&str, &Tensor<f64>)> = operands.iter().map(|(n, t)| (*n, t)).collect();
    for backend in [Backend::Interp, Backend::Jit] {
        let kernel = program.compile::<f64>(backend).unwrap_or_else(|e| panic!("{expr} {schedule:?}: {e}"));
        let got = kernel.run(&args).unwrap();
        assert_eq!(got.to_dense().unwrap(), expected, "{expr} {schedule:?} on {backend:?}");
        let sparse = decls.iter().find(|(n, _, _)| stmt.tensor_named(n) == Some(stmt.lhs.tensor)).unwrap().2 != "dense";
        if sparse {
            assert_eq!(stored_elements(&got), structure, "{expr} {schedule:?} on {backend:?}: stored elements");
        }
    }
}

#[test]
fn a_tensor_read_by_two_accesses_gives_the_values_of_two_copies() {
    let banded = sample("banded_symmetric.mtx");
    let same = summary(&nmsparse(&["A(i,j) = B(i,k) * B(k,j)", "-f=A:csr", "-f=B:csr", &format!("-i=B:{banded}")]));
    let copies = summary(&nmsparse(&[
        "A(i,j) = B(i,k) * C(k,j)",
        "-f=A:csr",
        "-f=B:csr",
        "-f=C:csr",
        &format!("-i=B:{banded}"),
        &format!("-i=C:{banded}"),
    ]));
    assert_eq!(same, copies);
    let interp = summary(&nmsparse(&[
        "A(i,j) = B(i,k) * B(k,j)",
        "-f=A:csr",
        "-f=B:csr",
        &format!("-i=B:{banded}"),
        "-backend=interp",
    ]));
    assert_eq!(same, interp);
    // Through the API, against the dense reference: products, chains, sums, transposed reads.
    let m: &[usize] = &[7, 7];
    let v: &[usize] = &[7];
    check_api("A(i,j) = B(i,k) * B(k,j)", &[("A", m, "csr"), ("B", m, "csr")], None);
    check_api("y(i) = B(i,j) * B(j,k) * x(k)", &[("y", v, "dense"), ("B", m, "csr"), ("x", v, "dense")], None);
    check_api("A(i,j) = B(i,j) * B(i,j) + B(j,i)", &[("A", m, "dense"), ("B", m, "dcsr")], None);
    check_api("A(i,j) = B(i,k) * B(k,j)", &[("A", m, "csr"), ("B", m, "csr")], Some("reorder(i, j, k)"));
    check_api("A(i,j) = B(k,i) * B(k,j)", &[("A", m, "coo"), ("B", m, "csr")], None);
}

#[test]
fn sparse_results_of_inner_products_store_only_where_rows_meet() {
    let m: &[usize] = &[9, 6];
    let n: &[usize] = &[9, 9];
    for result in ["csr", "dcsr", "coo", "csc"] {
        check_api("A(i,j) = B(i,k) * B(j,k)", &[("A", n, result), ("B", m, "csr")], None);
        check_api("A(i,j) = B(i,k) * C(k,j)", &[("A", n, result), ("B", m, "csr"), ("C", &[6, 9], "csc")], None);
    }
    for order in ["reorder(i, j, k)", "reorder(j, i, k)", "reorder(i, k, j)"] {
        check_api("A(i,j) = B(i,k) * B(j,k)", &[("A", n, "csr"), ("B", m, "csr")], Some(order));
    }
    // The command on the shipped matrix: stored entries as in the structural product.
    let power = sample("power_law_500.mtx");
    let a: Tensor<f64> = read_tensor(&power, "csr").unwrap();
    let rows: Vec<std::collections::BTreeSet<usize>> = {
        let l = a.to_coordinates();
        let mut r = vec![std::collections::BTreeSet::new(); 500];
        for (i, k) in l.coords[0].iter().zip(&l.coords[1]) {
            r[*i].insert(*k);
        }
        r
    };
    let structural: usize = (0..500).map(|i| (0..500).filter(|&j| !rows[i].is_disjoint(&rows[j])).count()).sum();
    let out = summary(&nmsparse(&["A(i,j) = B(i,k) * B(j,k)", "-f=A:csr", "-f=B:csr", &format!("-i=B:{power}")]));
    assert!(out.contains(&format!("{structural} stored values")), "{out}; structural count {structural}");
}

/// Runs SpMV through the command with the cache in `dir` (and `env`), returning its summary.
fn spmv(dir: &Path, env: &[(&str, &str)]) -> Output {
    let mut all = vec![("NMSPARSE_CACHE_DIR", dir.to_str().unwrap())];
    all.extend_from_slice(env);
    nmsparse_with(&["y(i) = A(i,j) * x(j)", "-f=A:csr", &format!("-i=A:{}", sample("power_law_500.mtx"))], &all)
}

fn entries(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect()
}

/// Damaged cache entries, each in a process of its own: every run gives the same answer as
/// the first, exits 0, and leaves no temporary file.
#[test]
fn a_damaged_kernel_cache_never_crashes_or_answers_wrong() {
    let dir = scratch("cache");
    let _ = std::fs::remove_dir_all(&dir);
    let first = summary(&spmv(&dir, &[]));
    let [entry] = entries(&dir, ".so").try_into().expect("one kernel");
    let good = std::fs::read(&entry).unwrap();
    let mut damaged: Vec<Vec<u8>> =
        [1000, 4096, 8000, 12000, good.len() - 1].iter().map(|&n| good[..n.min(good.len() - 1)].to_vec()).collect();
    damaged.push(vec![0x5a; 20]);
    for bit in [8 * 700 + 3, 8 * (good.len() / 2) + 1, 8 * (good.len() - 40)] {
        let mut flipped = good.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        let other = (bit / 8 + 97) % flipped.len();
        flipped[other] ^= 0x10;
        damaged.push(flipped);
    }
    for bytes in damaged {
        std::fs::write(&entry, &bytes).unwrap();
        let o = spmv(&dir, &[]);
        assert_eq!(summary(&o), first, "with {} damaged bytes in the entry", bytes.len());
        assert_eq!(std::fs::read(&entry).unwrap(), good, "the entry is replaced");
        assert!(entries(&dir, ".tmp").is_empty(), "{:?}", entries(&dir, ".tmp"));
    }
}

#[test]
fn the_compiler_is_a_shell_word_list_under_a_time_limit() {
    let dir = scratch("cache-cc");
    let _ = std::fs::remove_dir_all(&dir);
    let first = summary(&spmv(&dir, &[]));
    // `CC` with arguments, as make allows.
    assert_eq!(summary(&spmv(&dir, &[("CC", "cc -O1")])), first);
    // A compiler that never returns.
    let hang = scratch("hang.sh");
    std::fs::write(
        &hang,
        "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = --version ] && { echo fake; exit 0; }; done\nsleep 600\n",
    )
    .unwrap();
    let silent = scratch("silent.sh");
    std::fs::write(&silent, "#!/bin/sh\nexit 0\n").unwrap();
    for script in [&hang, &silent] {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let fresh = scratch("cache-fresh");
    let start = std::time::Instant::now();
    let o = spmv(&fresh, &[("CC", hang.to_str().unwrap()), ("NMSPARSE_CC_TIMEOUT", "1")]);
    assert!(!o.status.success() && start.elapsed().as_secs() < 30);
    assert!(
        stderr(&o).contains("did not finish compiling") && stderr(&o).contains("NMSPARSE_CC_TIMEOUT"),
        "{}",
        stderr(&o)
    );
    // A compiler that succeeds without an object: named as such, not as a cache problem.
    let o = spmv(&fresh, &[("CC", silent.to_str().unwrap())]);
    assert!(stderr(&o).contains("wrote no object file"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("NMSPARSE_CACHE_DIR"), "{}", stderr(&o));
    let o = spmv(&fresh, &[("NMSPARSE_CC_TIMEOUT", "soon")]);
    assert!(stderr(&o).contains("NMSPARSE_CC_TIMEOUT=soon"), "{}", stderr(&o));
    assert!(entries(&fresh, ".tmp").is_empty(), "{:?}", entries(&fresh, ".tmp"));
}

/// `info` on a file written here: its output, or its error.
fn info(name: &str, text: &str) -> Output {
    let path = scratch(name);
    std::fs::write(&path, text).unwrap();
    nmsparse(&["info", path.to_str().unwrap()])
}

#[test]
fn files_whose_meaning_would_change_are_refused_with_the_line() {
    let header = "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n";
    let o = info("upper.mtx", &format!("{header}1 1 1\n1 2 2\n"));
    assert!(stderr(&o).contains("line 4") && stderr(&o).contains("above the diagonal"), "{}", stderr(&o));
    let o = info("both.mtx", "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 2 2\n2 1 7\n");
    assert!(!o.status.success() && stderr(&o).contains("line 3"), "{}", stderr(&o));
    let o = info("skew.mtx", "%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n1 2 2\n");
    assert!(stderr(&o).contains("above the diagonal"), "{}", stderr(&o));
    let o = info("big.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 1e400\n");
    assert!(stderr(&o).contains("line 3") && stderr(&o).contains("overflows f64"), "{}", stderr(&o));
    let o = info("big.tns", "1 2 1e400\n");
    assert!(stderr(&o).contains("line 1") && stderr(&o).contains("overflows f64"), "{}", stderr(&o));
    let o = info("integer.mtx", "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 2 9007199254740993\n");
    assert!(stderr(&o).contains("line 3") && stderr(&o).contains("not exactly representable"), "{}", stderr(&o));
    // f32: beyond its range.
    let path = scratch("f32.mtx");
    std::fs::write(&path, "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 1e39\n").unwrap();
    let o = nmsparse(&["y(i) = A(i,j) * x(j)", "-f=A:csr", &format!("-i=A:{}", path.display()), "-type=f32"]);
    assert!(stderr(&o).contains("overflows f32"), "{}", stderr(&o));
    // NaN and infinities are values: accepted, and counted.
    let o = info("nan.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 nan\n1 2 inf\n2 2 -Infinity\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("not finite  1 NaN, 2 infinite"), "{}", stdout(&o));
}

#[test]
fn command_lines_are_read_as_written_or_refused() {
    let run = |extra: &[&str]| {
        let mut args = vec!["y(i) = A(i,j) * x(j)", "-f=A:csr", "-d=i:5", "-d=j:5"];
        args.extend_from_slice(extra);
        nmsparse(&args)
    };
    let o = run(&["-frobnicate"]);
    assert!(stderr(&o).contains("unknown option `-frobnicate`"), "{}", stderr(&o));
    let o = run(&["-prune=A"]);
    assert!(stderr(&o).contains("not in an N:M format"), "{}", stderr(&o));
    let o = run(&["-g=y:s"]);
    assert!(stderr(&o).contains("`y` is the result"), "{}", stderr(&o));
    let o = run(&[&format!("-i=y:{}", sample("power_law_500.mtx"))]);
    assert!(stderr(&o).contains("`y` is the result"), "{}", stderr(&o));
    // A size that comes from a file is said to come from it.
    let vector = scratch("v3.tns");
    std::fs::write(&vector, "# shape 3\n1 1\n").unwrap();
    let o = nmsparse(&[
        "y(i) = A(i,j) * x(j)",
        "-f=A:csr",
        &format!("-i=A:{}", sample("power_law_500.mtx")),
        &format!("-i=x:{}", vector.display()),
    ]);
    assert!(stderr(&o).contains("from `A`'s file") && !stderr(&o).contains("from -d"), "{}", stderr(&o));
    // An argument that is not UTF-8: an error, not a panic.
    use std::os::unix::ffi::OsStrExt as _;
    let o = Command::new(env!("CARGO_BIN_EXE_nmsparse"))
        .arg("y(i) = A(i,j) * x(j)")
        .arg(std::ffi::OsStr::from_bytes(b"-f=A:\xff\xfe"))
        .output()
        .unwrap();
    assert!(!o.status.success() && stderr(&o).contains("not valid UTF-8"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

/// A kilobyte figure of `/proc/self/status` (`VmRSS`, `VmHWM`), in bytes.
fn status_bytes(field: &str) -> u128 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = text.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}"));
    line.split_whitespace().nth(1).unwrap().parse::<u128>().unwrap() * 1024
}

/// The memory a step adds at its peak: the high-water mark reset (`/proc/self/clear_refs`),
/// the resident size before, the high-water mark after.
fn peak_of<R>(step: impl FnOnce() -> R) -> (R, u128) {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_bytes("VmRSS:");
    let r = step();
    (r, status_bytes("VmHWM:").saturating_sub(before))
}

/// Run by [`memory_estimates_bound_the_measured_peaks`] in a process of its own: reads
/// `NMSPARSE_MEASURE`'s file, builds it in its format, converts that into CSC and DCSR, and
/// prints the peaks (with the conversions' estimates, which need the tensor).
#[test]
#[ignore = "run by memory_estimates_bound_the_measured_peaks in a child process"]
fn measure_reading_and_building() {
    let Ok(spec) = std::env::var("NMSPARSE_MEASURE") else { return };
    let (file, format) = spec.split_once('|').unwrap();
    let (list, read) = peak_of(|| nmsparse::format::io::read_coordinates::<f64>(file).unwrap());
    let format = Format::parse(format, 2).unwrap();
    let (t, build) = peak_of(|| Tensor::from_coordinates(&list, &format, nmsparse::format::Duplicates::Sum).unwrap());
    drop(list);
    // Converted into CSC (the transposing fast path from CSR) and into DCSR (the general one).
    let mut converts = Vec::new();
    for target in ["csc", "dcsr"] {
        let target = Format::parse(target, 2).unwrap();
        let (copy, peak) = peak_of(|| t.convert(&target).unwrap());
        converts.push(format!("{peak} {}", t.convert_peak(&target)));
        drop(copy);
    }
    println!("peaks {read} {build} {} {}", converts.join(" "), t.stored_len());
}

/// The memory check's estimates (reading a file, building a tensor) bound the peaks measured
/// on large inputs, each in a process of its own: a tall matrix (CSR's row starts dominate)
/// and a million entries (the entries dominate), in the fast path's formats and the general
/// builder's.
#[test]
fn memory_estimates_bound_the_measured_peaks() {
    if !Path::new("/proc/self/clear_refs").exists() {
        eprintln!("skipped: no /proc/self/clear_refs to reset the peak with");
        return;
    }
    let tall = scratch("tall.mtx");
    std::fs::write(&tall, "%%MatrixMarket matrix coordinate real general\n30000000 30000000 1\n5 7 1.5\n").unwrap();
    let many = scratch("many.mtx");
    let entries = 1_000_000usize;
    {
        use std::io::Write as _;
        let mut w = std::io::BufWriter::new(std::fs::File::create(&many).unwrap());
        writeln!(w, "%%MatrixMarket matrix coordinate real general\n4000 4000 {entries}").unwrap();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..entries {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            writeln!(w, "{} {} {}", x % 4000 + 1, (x >> 20) % 4000 + 1, (x >> 40) % 97).unwrap();
        }
    }
    let cases = [
        (&tall, [30_000_000usize, 30_000_000], 1usize, "csr"),
        (&tall, [30_000_000, 30_000_000], 1, "csc"),
        (&many, [4000, 4000], entries, "csr"),
        (&many, [4000, 4000], entries, "dcsr"),
        (&many, [4000, 4000], entries, "coo"),
        (&many, [4000, 4000], entries, "(i,j) -> (i floordiv 2:compressed, j:compressed, i mod 2:dense)"),
    ];
    // Page and allocator granularity, the parallel reader's threads.
    const SLACK: u128 = 16 << 20;
    for (file, shape, entries, format) in cases {
        let o = Command::new(std::env::current_exe().unwrap())
            .args(["measure_reading_and_building", "--exact", "--include-ignored", "--nocapture", "--test-threads=1"])
            .env("NMSPARSE_MEASURE", format!("{}|{format}", file.display()))
            .output()
            .unwrap();
        let out = stdout(&o);
        let at = out.find("peaks ").unwrap_or_else(|| panic!("{out}{}", stderr(&o)));
        let peaks: Vec<u128> = out[at..].split_whitespace().skip(1).take(6).map(|v| v.parse().unwrap()).collect();
        let lines = std::fs::read_to_string(file).unwrap().lines().count() as u128;
        let reading = std::fs::metadata(file).unwrap().len() as u128 + lines * (16 + 8);
        let f = Format::parse(format, 2).unwrap();
        let building = Tensor::<f64>::build_peak(&shape, &f, entries);
        assert!(peaks[0] <= reading + SLACK, "{format}: reading took {} bytes, estimated {reading}", peaks[0]);
        assert!(peaks[1] <= building + SLACK, "{format}: building took {} bytes, estimated {building}", peaks[1]);
        for (k, target) in ["csc", "dcsr"].iter().enumerate() {
            let (peak, estimate) = (peaks[2 + 2 * k], peaks[3 + 2 * k]);
            assert!(peak <= estimate + SLACK, "{format} into {target}: took {peak} bytes, estimated {estimate}");
        }
        eprintln!(
            "{format}: reading {} of {reading} bytes, building {} of {building}, converting {:?}",
            peaks[0],
            peaks[1],
            &peaks[2..]
        );
    }
}
