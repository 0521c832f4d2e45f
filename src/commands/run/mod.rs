//! `nmsparse "<expr>" [taco options]`: compile an expression for the given formats and run it
//! on files or on generated data.

mod inputs;
mod report;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nm_format::io::write_tensor;
use nm_format::{Format, Tensor, TensorView};
use nm_ir::graph::IterationGraph;
use nm_ir::id::Id as _;
use nm_ir::notation::{IndexNotation, parse};

use super::CommandError;
use inputs::{Inputs, check_names, operands};
use report::{Timing, finish, lattice_text, ms, report, stats};

pub use crate::Backend;

/// The options of an expression run (taco's names).
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The expression.
    pub expr: String,
    /// `-f=T:format`.
    pub formats: Vec<String>,
    /// `-i=T:file`.
    pub inputs: Vec<String>,
    /// `-o=T:file`.
    pub outputs: Vec<String>,
    /// `-d=var:size`.
    pub dims: Vec<String>,
    /// `-s=schedule`.
    pub schedule: Option<String>,
    /// `-time=N`.
    pub time: Option<usize>,
    /// `-backend=`.
    pub backend: Backend,
    /// `-print-concrete`.
    pub print_concrete: bool,
    /// `-print-loops`.
    pub print_loops: bool,
    /// `-print-compute`.
    pub print_compute: bool,
    /// `-print-iteration-graph`.
    pub print_iteration_graph: bool,
    /// `-nthreads=N`: row ranges of the outer loop on N threads, where it names result rows.
    /// `None`: one thread, or every core where the schedule parallelizes the outer loop.
    pub threads: Option<usize>,
    /// `-write-source=FILE`: the generated C.
    pub write_source: Option<PathBuf>,
    /// `-c`: one kernel that assembles and computes (taco's default is two: assembly, then
    /// compute; for dense results there is nothing to assemble either way).
    pub fused: bool,
    /// `-print-assembly`: the assembly kernel's C.
    pub print_assembly: bool,
    /// `-g=T:d|r|s|h`: how a tensor without `-i` is generated (taco's fills).
    pub generate: Vec<String>,
    /// `-write-time=FILE`: taco's CSV line `compile,assemble,mean,stdev,median` (ms).
    pub write_time: Option<PathBuf>,
    /// `-type=f64|f32`: the value type of every tensor.
    pub value_type: ValueType,
    /// `--prune=T`: an input read into a structured N:M format is pruned to fit it (the
    /// dropped nonzeros are reported) instead of refused.
    pub prune: Vec<String>,
    /// `-workspace=POLICY`: the workspace of a statement that scatters into a sparse result.
    pub workspace: Option<nm_ism::Config>,
    /// `-device=cpu|cuda|cuda:N`: where the N:M SpMM runs (every other statement runs on the CPU).
    pub device: super::nm::Device,
    /// `-O=DIR`: every tensor, operands and result, written as `.tns` into DIR.
    pub output_dir: Option<PathBuf>,
    /// `-print-evaluate`: the kernel that assembles and computes at once.
    pub print_evaluate: bool,
    /// `-print-kernels`: every kernel, as one C library.
    pub print_kernels: bool,
    /// `-print-lattice=V`: the merge lattice of the right-hand side along V.
    pub print_lattice: Option<String>,
    /// `-write-compute=FILE`.
    pub write_compute: Option<PathBuf>,
    /// `-write-assembly=FILE`.
    pub write_assembly: Option<PathBuf>,
    /// `-read-source=FILE`: kernels (C with the generated kernels' arguments) run too.
    pub read_source: Vec<PathBuf>,
    /// `-verify`: the results of `read_source`'s kernels compared with the generated ones'.
    pub verify: bool,
    /// `-prefix=NAME`: prefix of the generated functions' names.
    pub prefix: String,
    /// `-schedule=static|dynamic[,CHUNK]`: the OpenMP schedule of parallel loops.
    pub omp_schedule: Option<nm_lower::ir::OmpSchedule>,
}

impl RunOptions {
    /// The options of a plain `nmsparse "<expr>"`: dense tensors, generated operands, one run
    /// on one thread through generated C, f64.
    pub fn new(expr: &str) -> RunOptions {
        RunOptions {
            expr: expr.to_string(),
            formats: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            dims: Vec::new(),
            schedule: None,
            time: None,
            backend: Backend::Jit,
            print_concrete: false,
            print_loops: false,
            print_compute: false,
            print_iteration_graph: false,
            threads: None,
            write_source: None,
            fused: false,
            print_assembly: false,
            generate: Vec::new(),
            write_time: None,
            value_type: ValueType::F64,
            prune: Vec::new(),
            workspace: None,
            device: super::nm::Device::Cpu,
            output_dir: None,
            print_evaluate: false,
            print_kernels: false,
            print_lattice: None,
            write_compute: None,
            write_assembly: None,
            read_source: Vec::new(),
            verify: false,
            prefix: String::new(),
            omp_schedule: None,
        }
    }
}

/// The value type kernels are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    /// 64-bit floats.
    F64,
    /// 32-bit floats.
    F32,
}

/// Runs an expression and returns what to print.
pub fn run(o: &RunOptions) -> Result<String, CommandError> {
    match o.value_type {
        ValueType::F64 => run_typed::<f64>(o),
        ValueType::F32 => run_typed::<f32>(o),
    }
}

fn run_typed<T: crate::Scalar>(o: &RunOptions) -> Result<String, CommandError> {
    let stmt = parse(&o.expr).map_err(|e| CommandError(e.to_string()))?;
    check_names(o, &stmt)?;
    let mut out = String::new();
    let Inputs { shapes, formats: parsed_formats, given, loaded, fills } = inputs::inputs::<T>(o, &stmt)?;
    let program = program_of(o, &stmt, &shapes, &parsed_formats, &given)?;
    // Stages print as they are reached, so that they show even when a later one fails.
    let (cin, types) = program.concrete().map_err(error)?;
    let schedule_notes = program.schedule_notes().map_err(error)?;
    for note in &schedule_notes {
        eprintln!("note: {note}");
    }
    if o.print_concrete {
        println!("{cin}");
    }
    if o.print_iteration_graph {
        print!("{}", IterationGraph::build(&stmt, &types).to_dot(&stmt));
    }
    if let Some(name) = &o.print_lattice {
        print!("{}", lattice_text(&cin, &types, name)?);
    }
    let tensors = operands::<T>(o, &stmt, &shapes, &parsed_formats, loaded, &fills, &mut out)?;
    // -O: every operand as a .tns file (the result follows, once computed).
    if let Some(dir) = &o.output_dir {
        for ((_, t), x) in stmt.tensors.iter().zip(&tensors) {
            if let Some(x) = x {
                let path = dir.join(format!("{}.tns", t.name));
                write_tensor(&path, x).map_err(|e| CommandError(format!("-O={}: {e}", dir.display())))?;
            }
        }
    }
    let views: Vec<(&str, TensorView<T>)> = stmt
        .tensors
        .iter()
        .zip(&tensors)
        .filter_map(|((_, t), x)| Some((t.name.as_str(), x.as_ref()?.view())))
        .collect();
    let result_shape = shapes[stmt.tensor_name(stmt.lhs.tensor)].clone();
    let compile_start = Instant::now();
    let kernel = program.compile_for::<T>(o.backend, &views).map_err(error)?;
    let compile = compile_start.elapsed();
    let kernel = match o.threads {
        Some(n) => kernel.with_threads(n),
        None => kernel,
    };
    if let super::nm::Device::Cuda(ordinal) = o.device {
        // C = A·B with B in nm(N,M,L) or A in nv24: nm-cuda on the device.
        let Some(route) = kernel.nm_route() else {
            return Err(CommandError(
                "-device=cuda runs only the N:M SpMM C(i,j) = A(i,k) * B(k,j) with B in nm(N,M,L) and A, C dense \
                 or A in nv24 and B, C dense; this statement runs on the CPU (drop -device)"
                    .into(),
            ));
        };
        let at = |t: nm_ir::notation::TensorId| tensors[t.index()].as_ref().expect("operands were built");
        let run = super::nm::run_cuda(route, at(route.a), at(route.b), ordinal, o.time.unwrap_or(1))?;
        if o.print_compute || o.print_loops {
            print!("{}", run.note);
        }
        let timing = Timing {
            compile: run.setup,
            compile_note: " (the device plan: device opened, operand compressed and uploaded, kernel compiled; dense operand uploaded)",
            assemble: None,
            compute: run.times,
        };
        return finish(o, &stmt, &result_shape, &run.result, &timing, out);
    }
    report(o, &kernel, &schedule_notes)?;
    if kernel.threads() > 1 && kernel.parallel() {
        // The worker threads start on their first use and are kept: started here, untimed, so
        // the single timed assembly measures the kernel (starting them took longer than it).
        nm_runtime::workers::run_on(kernel.threads(), || {});
    }
    let reps = o.time.unwrap_or(1).max(1);
    let (result, prepare, assemble, times) = execute(&kernel, &views, reps)?;
    for path in &o.read_source {
        read_source(o, path, &kernel, &views, &result, &mut out)?;
    }
    let cached = !kernel.compiled().is_empty()
        && kernel.compiled().iter().all(|c| c.compiled().outcome() == nm_lower::jit::Outcome::Cached);
    let (compile, compile_note) = match kernel.nm_route() {
        // B in nm(N,M,L) is packed once, outside the timed runs; the nv24 kernel packs per run.
        Some(route) if matches!(route.structured, crate::api::NmOperand::B(_)) => (prepare, " (packing B for nm-spmm)"),
        Some(_) => (prepare, " (nm-spmm's nv24 kernel)"),
        None if !kernel.parts().is_empty() => (compile, " (every kernel of the split)"),
        None if cached => (compile, " (cached)"),
        None => (compile, ""),
    };
    let timing = Timing { compile, compile_note, assemble, compute: times };
    finish(o, &stmt, &result_shape, &result, &timing, out)
}

fn error(e: crate::Error) -> CommandError {
    CommandError(e.to_string())
}

/// The library's program for the command's statement: every tensor declared in its shape and
/// format (dense without `-f`), the sizes `-d` gave, the schedule and the code options.
fn program_of(
    o: &RunOptions,
    stmt: &IndexNotation,
    shapes: &HashMap<String, Vec<usize>>,
    formats: &HashMap<String, Format>,
    given: &HashMap<String, (usize, String)>,
) -> Result<crate::Program, CommandError> {
    let mut program = crate::Program::new(&o.expr).map_err(error)?;
    for (_, t) in stmt.tensors.iter() {
        let shape = &shapes[&t.name];
        let format = formats.get(&t.name).cloned().unwrap_or_else(|| Format::dense(shape.len().max(1)));
        program = program.declare(&t.name, shape, format);
    }
    for (var, (n, origin)) in given {
        program = program.index_size_from(var, *n, origin);
    }
    if let Some(s) = &o.schedule {
        program = program.schedule(s);
    }
    if let Some(config) = o.workspace {
        program = program.workspace(config);
    }
    // taco's default: an assembly kernel, then a compute kernel; `-c` fuses them.
    program = program.separate_assembly(!o.fused).function_prefix(&o.prefix);
    if let Some(schedule) = o.omp_schedule {
        program = program.omp_schedule(schedule);
    }
    Ok(program)
}

/// The result, the time binding took, the assembly's time (when there is an assembly kernel)
/// and each computation's.
type Executed<T> = (Tensor<T>, Duration, Option<Duration>, Vec<Duration>);

/// Runs `kernel` on `operands` as taco times it: bound once (the copies said in a note),
/// assembly once, then compute `reps` times on its structure.
fn execute<T: crate::Scalar>(
    kernel: &crate::Kernel<T>,
    operands: &[(&str, TensorView<T>)],
    reps: usize,
) -> Result<Executed<T>, CommandError> {
    kernel
        .bind(operands, |bound| {
            if !kernel.conversions().is_empty() {
                eprintln!("note: {} (copy: {:.3} ms)", kernel.describe_conversions(), ms(bound.prepare_time()));
            }
            let assemble = bound.assemble()?;
            let times = (0..reps).map(|_| bound.compute()).collect::<Result<Vec<_>, _>>()?;
            Ok((bound.result()?, bound.prepare_time(), assemble, times))
        })
        .map_err(error)
}

/// taco's `-read-source`: the kernels compiled from a file instead, timed, and their result
/// compared with the generated kernels' with `-verify`.
fn read_source<T: crate::Scalar>(
    o: &RunOptions,
    path: &std::path::Path,
    kernel: &crate::Kernel<T>,
    operands: &[(&str, TensorView<T>)],
    result: &Tensor<T>,
    out: &mut String,
) -> Result<(), CommandError> {
    let fail = |e: String| CommandError(format!("-read-source={}: {e}", path.display()));
    let source = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let theirs = kernel.from_source(&source).map_err(|e| match e {
        crate::Error::Jit(nm_lower::jit::JitError::Symbol { name, .. }) => fail(format!(
            "it defines no function `{name}`; the names follow -prefix, so give the -prefix it was written with"
        )),
        e => fail(e.to_string()),
    })?;
    let (theirs, _, their_assembly, their_times) = execute(&theirs, operands, o.time.unwrap_or(1).max(1))?;
    if let Some(t) = o.time {
        let _ = writeln!(out, "\n{}:", path.display());
        if let Some(a) = their_assembly {
            let _ = writeln!(out, "Assemble: {:.3} ms", ms(a));
        }
        let _ = writeln!(out, "{}", stats("Compute", &their_times, t));
    }
    if o.verify {
        if theirs.to_coordinates() != result.to_coordinates() {
            return Err(fail(format!(
                "its result differs from the generated kernels': {} stored values against {}",
                theirs.stored_len(),
                result.stored_len()
            )));
        }
        let _ = writeln!(out, "verified {}: the same result", path.display());
    }
    Ok(())
}
