//! `nmsparse "<expr>" [taco options]`: compile an expression for the given formats and run it
//! on files or on generated data.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nm_format::generate::{Values, uniform};
use nm_format::io::{ShapeSource, read_coordinates_shaped, write_tensor};
use nm_format::{Duplicates, Format, Tensor, TensorView};
use nm_ir::concrete::ConcreteNotation;
use nm_ir::graph::IterationGraph;
use nm_ir::id::Id as _;
use nm_ir::notation::{IndexNotation, parse};
use nm_lower::c::emit;
use nm_lower::lower::KernelValue;

use super::CommandError;

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

/// How a tensor without an input file is generated (`-g`, taco's fills, seeded; values are
/// small integers, or uniform in [-1, 1) for `r`, `s` and `h`, where taco draws from ±10⁷).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fill {
    /// A fraction of the elements, chosen uniformly (`d`, `r`, `s`, `h`, a density; `u`: all
    /// ones).
    Uniform(f64, Values),
    /// Whole rows (`l`) or columns (`v`), 1% of them.
    Slices { by_rows: bool },
    /// taco's finite-element pattern (`f`).
    Fem,
    /// taco's blocked pattern (`b`): the FEM pattern in blocks of 4.
    Blocked,
}

impl Fill {
    /// The share of elements it stores, at most (for the memory check).
    fn density(self) -> f64 {
        match self {
            Fill::Uniform(d, _) => d,
            Fill::Slices { .. } => 0.01,
            // Five per row, or sixteen per block row of four.
            Fill::Fem | Fill::Blocked => 1.0,
        }
    }

    /// The tensor's components.
    fn generate<T: nm_format::Value>(
        self,
        name: &str,
        shape: &[usize],
        seed: u64,
    ) -> Result<nm_format::CoordinateList<T>, CommandError> {
        use nm_format::generate::{blocked, fem, slices};
        let matrix = |what: &str| match shape {
            [rows, cols] => Ok((*rows, *cols)),
            _ => Err(CommandError(format!(
                "-g={name}:{what}: this fill is for matrices; `{name}` has order {}",
                shape.len()
            ))),
        };
        Ok(match self {
            Fill::Uniform(density, values) => uniform::<T>(shape, density, values, seed),
            Fill::Slices { by_rows } => {
                let (r, c) = matrix(if by_rows { "l" } else { "v" })?;
                slices(r, c, 0.01, by_rows, Values::SmallIntegers(9), seed)
            }
            Fill::Fem => {
                let (r, c) = matrix("f")?;
                fem(r, c, Values::SmallIntegers(9), seed)
            }
            Fill::Blocked => {
                let (r, c) = matrix("b")?;
                blocked(r, c, 4, Values::SmallIntegers(9), seed)
            }
        })
    }
}

fn fill(spec: Option<&str>, sparse: bool) -> Result<Fill, CommandError> {
    Ok(match spec {
        None if sparse => Fill::Uniform(0.01, Values::SmallIntegers(9)),
        None | Some("d") => Fill::Uniform(1.0, Values::SmallIntegers(9)),
        Some("u") => Fill::Uniform(1.0, Values::Ones),
        Some("r") => Fill::Uniform(1.0, Values::Uniform),
        Some("s") => Fill::Uniform(0.07, Values::Uniform),
        Some("h") => Fill::Uniform(0.005, Values::Uniform),
        Some("l") => Fill::Slices { by_rows: true },
        Some("v") => Fill::Slices { by_rows: false },
        Some("f") => Fill::Fem,
        Some("b") => Fill::Blocked,
        // A density of its own (small integers, so sums are exact): sweeps over sparsity.
        Some(other) if other.parse::<f64>().is_ok_and(|d| d > 0.0 && d <= 1.0) => {
            Fill::Uniform(other.parse().expect("checked"), Values::SmallIntegers(9))
        }
        Some(other) => {
            return Err(CommandError(format!(
                "-g=...:{other}: expected d (dense), u (ones), r (dense random), s (sparse, 7%), h (hypersparse, \
                 0.5%), l (rows), v (columns), f (FEM), b (blocked) or a density in (0, 1]"
            )));
        }
    })
}

/// Refuses, before generating, an operand the machine cannot hold: its coordinate list (a
/// coordinate per dimension and a value per entry), the scratch of drawing and sorting it, and
/// the tensor built from it — or, when dense enough to be drawn from every position, the list
/// of all positions.
fn ensure_generatable(name: &str, shape: &[usize], density: f64) -> Result<(), CommandError> {
    let total = shape.iter().try_fold(1u128, |a, &n| a.checked_mul(n as u128));
    let Some(total) = total.filter(|&t| t <= usize::MAX as u128) else {
        return Err(CommandError(format!("cannot generate `{name}`: its shape {shape:?} has too many elements")));
    };
    let nonzeros = (density.clamp(0.0, 1.0) * total as f64).round() as u128;
    let per_entry = 3 * 8 * (shape.len() as u128 + 1);
    let drawn = if nonzeros * 3 > total { total * 8 } else { 0 };
    nm_runtime::memory::ensure_available(nonzeros * per_entry + drawn, || {
        format!("generating `{name}` ({nonzeros} nonzeros of {shape:?})")
    })?;
    Ok(())
}

fn split_pair<'a>(option: &str, text: &'a str) -> Result<(&'a str, &'a str), CommandError> {
    text.split_once(':').ok_or_else(|| CommandError(format!("-{option}={text}: expected NAME:VALUE")))
}

/// Runs an expression and returns what to print.
pub fn run(o: &RunOptions) -> Result<String, CommandError> {
    match o.value_type {
        ValueType::F64 => run_typed::<f64>(o),
        ValueType::F32 => run_typed::<f32>(o),
    }
}

/// Refuses an option that names a tensor or an index variable the statement does not have
/// (`-f=a:csr` for `A`): ignored, the typo would run something else than asked.
fn check_names(o: &RunOptions, stmt: &IndexNotation) -> Result<(), CommandError> {
    let list = |names: Vec<&str>| names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    let tensors = list(stmt.tensors.iter().map(|(_, t)| t.name.as_str()).collect());
    // Each option's names, with the text that gave them (`--prune` takes bare names).
    let named = |option: &str, specs: &[String]| -> Result<Vec<(String, String)>, CommandError> {
        specs
            .iter()
            .map(|spec| match option {
                "-prune" => Ok((spec.clone(), format!("--prune={spec}"))),
                _ => split_pair(option, spec).map(|(name, _)| (name.to_string(), format!("-{option}={spec}"))),
            })
            .collect()
    };
    // A name given twice to one option is a conflict (which would win?), as is a tensor both
    // read from a file and generated.
    let once = |given: &[(String, String)]| -> Result<(), CommandError> {
        for (k, (name, text)) in given.iter().enumerate() {
            if let Some((_, first)) = given[..k].iter().find(|(n, _)| n == name) {
                return Err(CommandError(format!("{text}: `{name}` is already given by {first}")));
            }
        }
        Ok(())
    };
    let mut read_or_made = Vec::new();
    for (option, specs) in [("f", &o.formats), ("g", &o.generate), ("i", &o.inputs), ("-prune", &o.prune)] {
        let given = named(option, specs)?;
        for (name, text) in &given {
            if stmt.tensor_named(name).is_none() {
                return Err(CommandError(format!(
                    "{text}: the statement has no tensor `{name}` (its tensors: {tensors})"
                )));
            }
        }
        once(&given)?;
        if matches!(option, "g" | "i") {
            read_or_made.extend(given);
        }
    }
    once(&read_or_made)?;
    let result = stmt.tensor_name(stmt.lhs.tensor);
    // The result is computed: reading or generating it would be ignored.
    if let Some((_, text)) = read_or_made.iter().find(|(name, _)| name == result) {
        return Err(CommandError(format!(
            "{text}: `{result}` is the result, which the statement computes (-i and -g give operands)"
        )));
    }
    let outputs = named("o", &o.outputs)?;
    // What the outputs will be written as is checked before anything runs: a failure after
    // a long computation would lose it.
    for (name, text) in &outputs {
        if name != result {
            return Err(CommandError(format!("{text}: only the result `{result}` is written")));
        }
        let path = std::path::Path::new(text.split_once(':').map_or("", |(_, p)| p));
        let extension = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase());
        match extension.as_deref() {
            Some("mtx") if stmt.lhs.subscripts.len() > 2 => {
                return Err(CommandError(format!(
                    "{text}: Matrix Market holds matrices (and vectors, as n×1); `{result}` has order {}: write .tns",
                    stmt.lhs.subscripts.len()
                )));
            }
            Some("mtx" | "tns") => {}
            _ => return Err(CommandError(format!("{text}: unknown file type (expected .mtx or .tns)"))),
        }
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        if !dir.is_dir() {
            return Err(CommandError(format!("{text}: the directory {} does not exist", dir.display())));
        }
    }
    once(&outputs)?;
    if let Some(dir) = &o.output_dir {
        std::fs::create_dir_all(dir).map_err(|e| CommandError(format!("-O={}: {e}", dir.display())))?;
    }
    // -d names an index variable (`-d=i:100`) or a tensor (`-d=A:10,10`, taco's).
    let vars = list(stmt.vars.iter().map(|(_, v)| v.name.as_str()).collect());
    let dims = named("d", &o.dims)?;
    for (name, text) in &dims {
        if stmt.var_named(name).is_none() && stmt.tensor_named(name).is_none() {
            return Err(CommandError(format!(
                "{text}: the statement has no index variable or tensor `{name}` (its variables: {vars}; its tensors: {tensors})"
            )));
        }
    }
    once(&dims)
}

fn run_typed<T: crate::Scalar>(o: &RunOptions) -> Result<String, CommandError> {
    let stmt = parse(&o.expr).map_err(|e| CommandError(e.to_string()))?;
    check_names(o, &stmt)?;
    let mut out = String::new();
    // Formats, inputs, sizes.
    let mut formats: HashMap<String, String> = HashMap::new();
    for f in &o.formats {
        let (t, fmt) = split_pair("f", f)?;
        formats.insert(t.to_string(), fmt.to_string());
    }
    // Sizes given per variable (`-d=i:100`), and dimensions per tensor (`-d=A:10,10`, taco's).
    let mut given: HashMap<String, (usize, String)> = HashMap::new();
    let mut tensor_dims: HashMap<String, Vec<usize>> = HashMap::new();
    for d in &o.dims {
        let (v, n) = split_pair("d", d)?;
        let size =
            |n: &str| n.trim().parse::<usize>().map_err(|_| CommandError(format!("-d={d}: `{n}` is not a size")));
        if stmt.var_named(v).is_some() {
            given.insert(v.to_string(), (size(n)?, format!("-d={d}")));
            continue;
        }
        let t = stmt.tensor_named(v).expect("checked by check_names");
        let shape = n.split(',').map(size).collect::<Result<Vec<_>, _>>()?;
        let access =
            std::iter::once(&stmt.lhs).chain(stmt.accesses(stmt.rhs)).find(|a| a.tensor == t).expect("accessed");
        if shape.len() != access.subscripts.len() {
            return Err(CommandError(format!(
                "-d={d}: `{v}` has {} dimensions in the statement, {} sizes given",
                access.subscripts.len(),
                shape.len()
            )));
        }
        tensor_dims.insert(v.to_string(), shape);
    }
    let mut fills: HashMap<String, String> = HashMap::new();
    for g in &o.generate {
        let (t, how) = split_pair("g", g)?;
        fill(Some(how), false)?;
        fills.insert(t.to_string(), how.to_string());
    }
    // What is known of each tensor's shape: a file's (stated, or only the smallest holding its
    // coordinates), or -d's; the extents settle the rest (see `IndexNotation::extents`).
    let mut loaded: HashMap<String, nm_format::CoordinateList<T>> = HashMap::new();
    let mut facts = nm_ir::notation::SizeFacts {
        shapes: vec![None; stmt.tensors.len()],
        growable: vec![false; stmt.tensors.len()],
        given: stmt.vars.iter().map(|(_, v)| given.get(&v.name).cloned()).collect(),
        described: vec![None; stmt.tensors.len()],
        default: Some(1000),
    };
    for i in &o.inputs {
        let (t, path) = split_pair("i", i)?;
        let (list, source) = read_coordinates_shaped::<T>(PathBuf::from(path))?;
        let id = stmt.tensor_named(t).expect("checked by check_names").index();
        let growable = source == ShapeSource::Inferred;
        match tensor_dims.get(t) {
            // A stated shape and -d must agree; a shape the file does not state takes -d's.
            Some(dims) if growable => {
                if let Some(d) = (0..dims.len()).find(|&d| list.shape[d] > dims[d]) {
                    return Err(CommandError(format!(
                        "-d={t}:{}: {path} has coordinates up to {} in dimension {}",
                        join_sizes(dims),
                        list.shape[d],
                        d + 1
                    )));
                }
                facts.shapes[id] = Some(dims.clone());
            }
            Some(dims) if *dims != list.shape => {
                return Err(CommandError(format!(
                    "-d={t}:{}: {path} has shape {}",
                    join_sizes(dims),
                    join_sizes(&list.shape)
                )));
            }
            _ => {
                facts.shapes[id] = Some(list.shape.clone());
                facts.growable[id] = growable;
            }
        }
        facts.described[id] = Some(format!("`{t}`'s file {path}"));
        loaded.insert(t.to_string(), list);
    }
    for (t, dims) in &tensor_dims {
        let id = stmt.tensor_named(t).expect("checked by check_names").index();
        if facts.shapes[id].is_none() {
            facts.shapes[id] = Some(dims.clone());
            facts.described[id] = Some(format!("-d={t}:{}", join_sizes(dims)));
        }
    }
    let extents = stmt.extents(&facts).map_err(|e| CommandError(e.to_string()))?;
    let mut shapes: HashMap<String, Vec<usize>> = HashMap::new();
    let mut parsed_formats: HashMap<String, Format> = HashMap::new();
    for (id, t) in stmt.tensors.iter() {
        let shape = extents.shapes[id.index()].clone();
        if let Some(text) = formats.get(&t.name) {
            if shape.is_empty() {
                return Err(CommandError(format!("-f={}:{text}: `{}` is a scalar", t.name, t.name)));
            }
            parsed_formats.insert(t.name.clone(), Format::parse(text, shape.len())?);
            if text.matches(':').count() == 2 {
                eprintln!(
                    "note: -f={}:{text}: taco's pack bounds put levels' arrays in one allocation; each level keeps arrays of its own here (what is stored is the same)",
                    t.name
                );
            }
        }
        // A file whose shape grew keeps its coordinates.
        if let Some(list) = loaded.get_mut(&t.name) {
            list.shape = shape.clone();
        }
        shapes.insert(t.name.clone(), shape);
    }
    // `--prune` fits data into N:M levels: on any other format it would do nothing.
    for name in &o.prune {
        if !parsed_formats.get(name).is_some_and(Format::is_structured) {
            let format = formats.get(name).map_or("dense (no -f)".to_string(), |f| format!("-f={name}:{f}"));
            return Err(CommandError(format!(
                "--prune={name}: `{name}` is not in an N:M format ({format}); pruning fits data into nv24 or nm(N,M,L)"
            )));
        }
    }
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
            compile_note: " (device, upload, index tables, kernel compilation)",
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

/// The operands, read or generated (seeded), in each tensor's format (`None` for the result).
fn operands<T: crate::Scalar>(
    o: &RunOptions,
    stmt: &IndexNotation,
    shapes: &HashMap<String, Vec<usize>>,
    parsed_formats: &HashMap<String, Format>,
    mut loaded: HashMap<String, nm_format::CoordinateList<T>>,
    fills: &HashMap<String, String>,
    out: &mut String,
) -> Result<Vec<Option<Tensor<T>>>, CommandError> {
    let mut tensors: Vec<Option<Tensor<T>>> = Vec::new();
    for (id, t) in stmt.tensors.iter() {
        if id == stmt.lhs.tensor {
            tensors.push(None);
            continue;
        }
        let shape = &shapes[&t.name];
        let format = parsed_formats.get(&t.name).cloned().unwrap_or_else(|| Format::dense(shape.len().max(1)));
        let structured = format.is_structured();
        let generated = !loaded.contains_key(&t.name);
        let list = match loaded.remove(&t.name) {
            Some(list) => list,
            None => {
                // N:M data is generated dense, then pruned into its pattern.
                let sparse = parsed_formats.contains_key(&t.name) && !structured;
                let how = fill(fills.get(&t.name).map(String::as_str), sparse)?;
                ensure_generatable(&t.name, shape, how.density())?;
                how.generate::<T>(&t.name, shape, 1 + id.index() as u64)?
            }
        };
        if structured && (generated || o.prune.contains(&t.name)) {
            let whole = Tensor::from_coordinates(&list, &Format::csf(shape.len()), Duplicates::Sum)?;
            let (pruned, report) = whole.prune(&format)?;
            if !generated {
                let _ = writeln!(
                    out,
                    "pruned {}: dropped {} nonzeros (|sum| {:.6e}), kept {}",
                    t.name, report.dropped, report.dropped_magnitude, report.kept
                );
            }
            tensors.push(Some(pruned));
            continue;
        }
        let tensor = if shape.is_empty() {
            Tensor::from_coordinates(
                &nm_format::CoordinateList {
                    shape: vec![1],
                    coords: vec![vec![0]],
                    values: vec![list.values.first().copied().unwrap_or(T::ONE)],
                },
                &Format::dense(1),
                Duplicates::Sum,
            )?
        } else {
            Tensor::from_coordinates(&list, &format, Duplicates::Sum).map_err(|e| match e {
                nm_format::TensorError::DoesNotFitPattern { .. } => {
                    CommandError(format!("{}: {e}; --prune={} prunes it to fit", t.name, t.name))
                }
                e => e.into(),
            })?
        };
        tensors.push(Some(tensor));
    }
    Ok(tensors)
}

/// What the compiled kernel is, as the options ask: its loops and C printed and written, and
/// the notes on what the library decided (views, a split, threads, the lowering's notes; the
/// schedule's were said when it was applied).
fn report<T: crate::Scalar>(
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

/// taco's `-print-lattice=V`: the merge lattice along `V` of each assignment inside the loop
/// over `V`, with the variables of the loops around that loop bound.
fn lattice_text(cin: &ConcreteNotation, types: &nm_ir::notation::Types, name: &str) -> Result<String, CommandError> {
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

/// `10,10`
fn join_sizes(sizes: &[usize]) -> String {
    sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// What was timed.
struct Timing {
    compile: Duration,
    /// After the compile time: " (cached)", or what ran instead of compiled code.
    compile_note: &'static str,
    /// The assembly kernel's time, when there was one.
    assemble: Option<Duration>,
    compute: Vec<Duration>,
}

/// The times, the result's summary line and its `-o` files.
/// The kernels' C and loops as the options ask: printed (`-print-loops`, `-print-assembly`,
/// `-print-compute`, `-print-evaluate`, `-print-kernels`) and written (`-write-source`,
/// `-write-compute`, `-write-assembly`). A file holding several kernels is one C library.
fn print_and_write_kernels(
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

fn finish<T: KernelValue>(
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
fn as_column<T: KernelValue>(v: &Tensor<T>) -> Result<Tensor<T>, CommandError> {
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Mean, standard deviation, median and minimum of `times`, in milliseconds.
fn summary(times: &[Duration]) -> (f64, f64, f64, f64) {
    let v: Vec<f64> = times.iter().map(|&d| ms(d)).collect();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let stdev = (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64).sqrt();
    let mut sorted = v.clone();
    sorted.sort_by(f64::total_cmp);
    (mean, stdev, sorted[sorted.len() / 2], sorted[0])
}

/// taco's timing layout: mean, stdev, median and min over the runs, in milliseconds.
fn stats(what: &str, times: &[Duration], reps: usize) -> String {
    let (mean, stdev, median, min) = summary(times);
    format!(
        "{what}:  {mean:.3} ms (mean over {reps} runs)\n  stdev:  {stdev:.3} ms\n  median: {median:.3} ms\n  min:    {min:.3} ms"
    )
}
