//! What a run prints and writes: the kernels' loops and C, the notes on what the library
//! decided, the merge lattice, the times in taco's layout, the result's summary and files.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use nm_format::io::write_tensor;
use nm_format::{Duplicates, Format, Tensor};
use nm_ir::concrete::ConcreteNotation;
use nm_ir::notation::IndexNotation;
use nm_lower::c::emit;
use nm_lower::lower::KernelValue;

use super::inputs::split_pair;
use super::{Backend, RunOptions};
use crate::commands::CommandError;

/// What the compiled kernel is, as the options ask: its loops and C printed and written, and
/// the notes on what the library decided (views, a split, threads, the lowering's notes; the
/// schedule's were said when it was applied).
pub(super) fn report<T: crate::Scalar>(
    o: &RunOptions,
    kernel: &crate::Kernel<T>,
    schedule_notes: &[String],
) -> Result<(), CommandError> {
    for (view, operand) in kernel.views() {
        eprintln!(
            "note: `{operand}` is read in two orders: its reads in another order than the first are named `{view}`"
        );
    }
    if !kernel.parts().is_empty() {
        let mut kernels: Vec<&crate::Kernel<T>> = kernel.parts().iter().map(|(_, k)| k).collect();
        kernels.push(kernel);
        let described: Vec<String> = kernels.iter().map(|k| format!("`{}`", k.statement())).collect();
        eprintln!("note: no one loop nest runs `{}`: it runs as {}", o.expr.trim(), described.join(", then "));
        for k in &kernels {
            if let Some(f) = k.loops().filter(|_| o.print_loops) {
                print!("// {}\n{f}", k.statement());
            }
            if let Some(f) = k.loops().filter(|_| o.print_compute) {
                print!("// {}\n{}", k.statement(), emit(f));
            }
        }
    } else if let Some(route) = kernel.nm_route() {
        if o.print_compute || o.print_loops {
            println!("// {}", crate::api::describe_nm_route(route));
        }
        if o.threads.is_some_and(|n| n > 1) && o.backend == Backend::Interp {
            eprintln!("note: the N:M SpMM kernel is compiled Rust; -backend=interp does not apply to it");
        }
    } else if let Some(fused) = kernel.loops() {
        let functions = kernel.functions();
        let halves = (functions.len() == 2).then(|| (functions[0], functions[1]));
        print_and_write_kernels(o, fused, halves)?;
    }
    for note in kernel.notes().iter().filter(|n| !schedule_notes.contains(n)) {
        eprintln!("note: {note}");
    }
    if let Some(n) = o.threads.filter(|&n| n > 1)
        && let Some(why) = kernel.why_one_thread()
    {
        eprintln!("note: -nthreads={n}: {why}; running on one thread");
    }
    if o.threads.is_none() && kernel.threads() > 1 {
        eprintln!(
            "note: the schedule parallelizes the outer loop and no -nthreads is given: running on {} threads",
            kernel.threads()
        );
    }
    Ok(())
}

/// taco's `-print-lattice=V`: the merge lattice along `V` of each assignment inside the loop
/// over `V`, with the variables of the loops around that loop bound.
pub(super) fn lattice_text(
    cin: &ConcreteNotation,
    types: &nm_ir::notation::Types,
    name: &str,
) -> Result<String, CommandError> {
    use nm_ir::concrete::Stmt;
    let var = cin.vars.iter().find(|(_, v)| v.name == name).map(|(id, _)| id).ok_or_else(|| {
        let names: Vec<String> = cin.vars.iter().map(|(_, v)| format!("`{}`", v.name)).collect();
        CommandError(format!(
            "-print-lattice={name}: the statement has no index variable `{name}` (its variables: {})",
            names.join(", ")
        ))
    })?;
    // Temporaries a schedule added are dense.
    let formats: Vec<Option<Format>> =
        (0..cin.tensors.len()).map(|t| types.tensors.get(t).and_then(|t| t.format.clone())).collect();
    let scope = cin.scope();
    let mut out = String::new();
    // (statement, variables of the loops around the loop over `var`, inside that loop)
    let mut stack = vec![(cin.root, Vec::new(), false)];
    while let Some((s, around, inside)) = stack.pop() {
        match &cin.stmts[s] {
            Stmt::Forall { var: v, body, .. } => {
                let mut around = around;
                if !inside && *v != var {
                    around.push(*v);
                }
                stack.push((*body, around, inside || *v == var));
            }
            Stmt::Where { consumer, producer } => {
                stack.push((*producer, around.clone(), inside));
                stack.push((*consumer, around, inside));
            }
            Stmt::Sequence { first, second } => {
                stack.push((*second, around.clone(), inside));
                stack.push((*first, around, inside));
            }
            Stmt::Assign { lhs, op, rhs } if inside => {
                let lattice = nm_ir::lattice::MergeLattice::build(scope, &formats, *rhs, var, &around);
                let mut assignment = String::new();
                let _ = scope.write_access(&mut assignment, lhs);
                let _ = write!(assignment, " {} ", if *op == nm_ir::notation::AssignOp::Assign { "=" } else { "+=" });
                let _ = scope.write_expr(&mut assignment, *rhs);
                let _ = write!(out, "merge lattice of `{assignment}` along `{name}`:\n{}", lattice.display(scope));
            }
            Stmt::Assign { .. } => {}
        }
    }
    Ok(out)
}

/// What was timed.
pub(super) struct Timing {
    /// Compiling, or what stands for it (packing, the device's set-up).
    pub compile: Duration,
    /// After the compile time: " (cached)", or what ran instead of compiled code.
    pub compile_note: &'static str,
    /// The assembly kernel's time, when there was one.
    pub assemble: Option<Duration>,
    /// Each computation's.
    pub compute: Vec<Duration>,
}

/// The kernels' C and loops as the options ask: printed (`-print-loops`, `-print-assembly`,
/// `-print-compute`, `-print-evaluate`, `-print-kernels`) and written (`-write-source`,
/// `-write-compute`, `-write-assembly`). A file holding several kernels is one C library.
pub(super) fn print_and_write_kernels(
    o: &RunOptions,
    fused: &nm_lower::ir::Function,
    halves: Option<(&nm_lower::ir::Function, &nm_lower::ir::Function)>,
) -> Result<(), CommandError> {
    let no_assembly =
        || format!("// no assembly kernel: {}", if o.fused { "fused by -c" } else { "the result is dense" });
    let compute = halves.map_or(fused, |(_, compute)| compute);
    let kernels: Vec<&nm_lower::ir::Function> = match halves {
        Some((assemble, compute)) => vec![assemble, compute],
        None => vec![fused],
    };
    if o.print_loops {
        print!("{fused}");
    }
    if o.print_assembly {
        match halves {
            Some((assemble, _)) => print!("{}", emit(assemble)),
            None => println!("{}", no_assembly()),
        }
    }
    if o.print_compute {
        print!("{}", emit(compute));
    }
    if o.print_evaluate {
        print!("{}", emit(fused));
    }
    if o.print_kernels {
        // The assembly and compute kernels, and the one that does both where they differ.
        let mut all = kernels.clone();
        if halves.is_some() {
            all.push(fused);
        }
        print!("{}", nm_lower::c::emit_library(&all));
    }
    let write = |option: &str, path: &std::path::Path, text: String| {
        std::fs::write(path, text).map_err(|e| CommandError(format!("-{option}={}: {e}", path.display())))
    };
    if let Some(path) = &o.write_source {
        write("write-source", path, nm_lower::c::emit_library(&kernels))?;
    }
    if let Some(path) = &o.write_compute {
        write("write-compute", path, emit(compute))?;
    }
    if let Some(path) = &o.write_assembly {
        let text = halves.map_or_else(|| format!("{}\n", no_assembly()), |(assemble, _)| emit(assemble));
        write("write-assembly", path, text)?;
    }
    Ok(())
}

/// The times, the result's summary line and its `-o` files.
pub(super) fn finish<T: KernelValue>(
    o: &RunOptions,
    stmt: &IndexNotation,
    result_shape: &[usize],
    result: &Tensor<T>,
    timing: &Timing,
    mut out: String,
) -> Result<String, CommandError> {
    let result_id = stmt.lhs.tensor;
    let assemble_time = timing.assemble.unwrap_or(Duration::ZERO);
    if let Some(t) = o.time {
        let _ = writeln!(out, "Compile:  {:.3} ms{}", ms(timing.compile), timing.compile_note);
        if timing.assemble.is_some() {
            let _ = writeln!(out, "Assemble: {:.3} ms", ms(assemble_time));
        }
        let _ = writeln!(out, "{}", stats("Compute", &timing.compute, t));
    }
    if let Some(path) = &o.write_time {
        let (mean, stdev, median, _) = summary(&timing.compute);
        let line = format!("{:.6},{:.6},{mean:.6},{stdev:.6},{median:.6}\n", ms(timing.compile), ms(assemble_time));
        std::fs::write(path, line).map_err(|e| CommandError(format!("-write-time={}: {e}", path.display())))?;
    }
    // From +0: an empty `sum` of floats is -0, printed as "-0".
    let checksum: f64 = result.values().iter().fold(0.0, |s, v| s + v.to_f64());
    let _ = writeln!(
        out,
        "{}: shape {:?}, {} stored values, checksum {checksum}",
        stmt.tensor_name(result_id),
        result_shape,
        result.stored_len()
    );
    for spec in &o.outputs {
        // The name and file type were checked before running (`check_names`).
        let (_, path) = split_pair("o", spec)?;
        let path = PathBuf::from(path);
        let matrix_market = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("mtx"));
        if matrix_market && result.order() == 1 {
            // A vector (or a scalar, held as one) as an n×1 matrix.
            write_tensor(&path, &as_column(result)?)?;
        } else {
            write_tensor(&path, result)?;
        }
    }
    if let Some(dir) = &o.output_dir {
        let path = dir.join(format!("{}.tns", stmt.tensor_name(result_id)));
        write_tensor(&path, result).map_err(|e| CommandError(format!("-O={}: {e}", dir.display())))?;
    }
    Ok(out)
}

/// A vector as an `n×1` matrix, its stored components kept.
pub(super) fn as_column<T: KernelValue>(v: &Tensor<T>) -> Result<Tensor<T>, CommandError> {
    let list = v.to_coordinates();
    let n = list.len();
    let column = nm_format::CoordinateList {
        shape: vec![v.shape()[0], 1],
        coords: vec![list.coords[0].clone(), vec![0; n]],
        values: list.values,
    };
    let format = if *v.format() == Format::dense(1) { Format::dense(2) } else { Format::csr() };
    Ok(Tensor::from_coordinates(&column, &format, Duplicates::Sum)?)
}

pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Mean, standard deviation, median and minimum of `times`, in milliseconds.
pub(super) fn summary(times: &[Duration]) -> (f64, f64, f64, f64) {
    let v: Vec<f64> = times.iter().map(|&d| ms(d)).collect();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let stdev = (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64).sqrt();
    let mut sorted = v.clone();
    sorted.sort_by(f64::total_cmp);
    (mean, stdev, sorted[sorted.len() / 2], sorted[0])
}

/// taco's timing layout: mean, stdev, median and min over the runs, in milliseconds.
pub(super) fn stats(what: &str, times: &[Duration], reps: usize) -> String {
    let (mean, stdev, median, min) = summary(times);
    format!(
        "{what}:  {mean:.3} ms (mean over {reps} runs)\n  stdev:  {stdev:.3} ms\n  median: {median:.3} ms\n  min:    {min:.3} ms"
    )
}
