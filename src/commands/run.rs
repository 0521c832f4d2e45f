//! `nmsparse "<expr>" [taco options]`: compile an expression for the given formats and run it
//! on files or on generated data.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nm_format::generate::{Values, uniform};
use nm_format::io::{read_coordinates, write_tensor};
use nm_format::{Duplicates, Format, Tensor};
use nm_ir::concrete::{concretize_for, parse_schedule};
use nm_ir::graph::IterationGraph;
use nm_ir::notation::{Declarations, TensorType, parse};
use nm_lower::c::{CKernel, emit};
use nm_lower::interp::{ArrayData, interpret};
use nm_lower::ir::ElemType;
use nm_lower::jit::CCompiler;
use nm_lower::lower::{arguments, lower, result_tensor};

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
    pub threads: usize,
    /// `-write-source=FILE`: the generated C.
    pub write_source: Option<PathBuf>,
}

fn split_pair<'a>(option: &str, text: &'a str) -> Result<(&'a str, &'a str), CommandError> {
    text.split_once(':').ok_or_else(|| CommandError(format!("-{option}={text}: expected NAME:VALUE")))
}

/// Runs an expression and returns what to print.
pub fn run(o: &RunOptions) -> Result<String, CommandError> {
    let stmt = parse(&o.expr).map_err(|e| CommandError(e.to_string()))?;
    let mut out = String::new();
    // Formats, inputs, sizes.
    let mut formats: HashMap<String, String> = HashMap::new();
    for f in &o.formats {
        let (t, fmt) = split_pair("f", f)?;
        formats.insert(t.to_string(), fmt.to_string());
    }
    let mut sizes: HashMap<String, usize> = HashMap::new();
    for d in &o.dims {
        let (v, n) = split_pair("d", d)?;
        let n = n.parse().map_err(|_| CommandError(format!("-d={d}: `{n}` is not a size")))?;
        sizes.insert(v.to_string(), n);
    }
    let mut loaded: HashMap<String, nm_format::CoordinateList<f64>> = HashMap::new();
    for i in &o.inputs {
        let (t, path) = split_pair("i", i)?;
        let list = read_coordinates::<f64>(PathBuf::from(path))?;
        loaded.insert(t.to_string(), list);
    }
    // Index-variable sizes from the inputs' shapes, then from -d, else 1000.
    let mut accesses = vec![&stmt.lhs];
    accesses.extend(stmt.accesses(stmt.rhs));
    for a in &accesses {
        if let Some(list) = loaded.get(stmt.tensor_name(a.tensor)) {
            for (d, t) in a.subscripts.iter().enumerate() {
                if let (Some(v), Some(&n)) = (t.as_var(), list.shape.get(d)) {
                    sizes.entry(stmt.var_name(v).to_string()).or_insert(n);
                }
            }
        }
    }
    let size_of = |v: nm_ir::notation::IndexVarId| sizes.get(stmt.var_name(v)).copied().unwrap_or(1000);
    let mut decls = Declarations::new();
    let mut shapes: HashMap<String, Vec<usize>> = HashMap::new();
    let mut parsed_formats: HashMap<String, Format> = HashMap::new();
    for (_, t) in stmt.tensors.iter() {
        let access = accesses.iter().find(|a| stmt.tensor_name(a.tensor) == t.name).expect("every tensor is accessed");
        let shape: Vec<usize> = match loaded.get(&t.name) {
            Some(list) => list.shape.clone(),
            None => access.subscripts.iter().map(|s| s.as_var().map_or(1000, size_of)).collect(),
        };
        let ty = match formats.get(&t.name) {
            Some(text) if shape.is_empty() => {
                return Err(CommandError(format!("-f={}:{text}: `{}` is a scalar", t.name, t.name)));
            }
            Some(text) => {
                let format = Format::parse(text, shape.len())?;
                parsed_formats.insert(t.name.clone(), format.clone());
                TensorType::sparse(&shape, format)
            }
            None => TensorType::dense(&shape),
        };
        shapes.insert(t.name.clone(), shape);
        decls = decls.tensor(&t.name, ty);
    }
    let types = stmt.check(&decls).map_err(|e| CommandError(e.to_string()))?;
    let mut cin = concretize_for(&stmt, &types);
    if let Some(s) = &o.schedule {
        let commands = parse_schedule(s).map_err(|e| CommandError(e.to_string()))?;
        cin = cin.schedule(&commands).map_err(|e| CommandError(e.to_string()))?;
    }
    // Stages print as they are reached, so that they show even when a later one fails.
    if o.print_concrete {
        println!("{cin}");
    }
    if o.print_iteration_graph {
        print!("{}", IterationGraph::build(&stmt, &types).to_dot(&stmt));
    }
    let lowered = lower(&cin, &types, ElemType::F64).map_err(|e| CommandError(e.to_string()))?;
    if o.print_loops {
        print!("{}", lowered.function);
    }
    if o.print_compute {
        print!("{}", emit(&lowered.function));
    }
    if let Some(path) = &o.write_source {
        std::fs::write(path, emit(&lowered.function))
            .map_err(|e| CommandError(format!("-write-source={}: {e}", path.display())))?;
    }
    if o.threads > 1 && (lowered.partition.is_none() || o.backend == Backend::Interp) {
        eprintln!(
            "note: -nthreads={}: {}; running on one thread",
            o.threads,
            if o.backend == Backend::Interp {
                "the interpreter runs sequentially"
            } else {
                "the outer loop does not name disjoint rows of the result"
            }
        );
    }
    // Operands: read or generated (seeded), in each tensor's format.
    let result_id = stmt.lhs.tensor;
    let mut tensors: Vec<Option<Tensor<f64>>> = Vec::new();
    for (id, t) in stmt.tensors.iter() {
        if id == result_id {
            tensors.push(None);
            continue;
        }
        let shape = &shapes[&t.name];
        let format = parsed_formats.get(&t.name).cloned().unwrap_or_else(|| Format::dense(shape.len().max(1)));
        let list = match loaded.remove(&t.name) {
            Some(list) => list,
            None => {
                let density = if parsed_formats.contains_key(&t.name) { 0.01 } else { 1.0 };
                uniform::<f64>(shape, density, Values::SmallIntegers(9), 1 + nm_ir::id::Id::index(id) as u64)
            }
        };
        let tensor = if shape.is_empty() {
            Tensor::from_coordinates(
                &nm_format::CoordinateList {
                    shape: vec![1],
                    coords: vec![vec![0]],
                    values: vec![list.values.first().copied().unwrap_or(1.0)],
                },
                &Format::dense(1),
                Duplicates::Sum,
            )?
        } else {
            Tensor::from_coordinates(&list, &format, Duplicates::Sum)?
        };
        tensors.push(Some(tensor));
    }
    let by_id: Vec<Option<&Tensor<f64>>> = tensors.iter().map(Option::as_ref).collect();
    let result_shape = shapes[stmt.tensor_name(result_id)].clone();
    let result_len: usize = result_shape.iter().product();
    let reps = o.time.unwrap_or(1).max(1);
    let mut times = Vec::with_capacity(reps);
    let mut arrays: Vec<ArrayData> = Vec::new();
    let compile_start = Instant::now();
    let kernel = match o.backend {
        Backend::Jit => Some(
            CKernel::compile(&lowered.function, &CCompiler::from_env().map_err(|e| CommandError(e.to_string()))?)
                .map_err(|e| CommandError(e.to_string()))?,
        ),
        Backend::Interp => None,
    };
    let compile_time = compile_start.elapsed();
    for _ in 0..reps {
        arrays = arguments(&lowered, &by_id, result_len)?;
        let start = Instant::now();
        match &kernel {
            Some(k) => match &lowered.partition {
                Some(p) if o.threads > 1 => k.run_rows(&mut arrays, p, o.threads),
                _ => k.run(&mut arrays),
            }
            .map_err(|e| CommandError(e.to_string()))?,
            None => interpret(&lowered.function, &mut arrays).map_err(|e| CommandError(e.to_string()))?,
        }
        times.push(start.elapsed());
    }
    let result_format = parsed_formats
        .get(stmt.tensor_name(result_id))
        .cloned()
        .unwrap_or_else(|| Format::dense(result_shape.len().max(1)));
    let shape_for_tensor = if result_shape.is_empty() { vec![1] } else { result_shape.clone() };
    let result = result_tensor(&lowered, &arrays, &shape_for_tensor, &result_format)?;
    if let Some(t) = o.time {
        let _ = writeln!(
            out,
            "Compile:  {:.3} ms{}",
            ms(compile_time),
            if kernel.as_ref().is_some_and(|k| k.compiled().outcome() == nm_lower::jit::Outcome::Cached) {
                " (cached)"
            } else {
                ""
            }
        );
        let _ = writeln!(out, "{}", stats("Compute", &times, t));
    }
    let checksum: f64 = result.values().iter().sum();
    let _ = writeln!(
        out,
        "{}: shape {:?}, {} stored values, checksum {checksum}",
        stmt.tensor_name(result_id),
        result_shape,
        result.stored_len()
    );
    for spec in &o.outputs {
        let (t, path) = split_pair("o", spec)?;
        if t != stmt.tensor_name(result_id) {
            return Err(CommandError(format!(
                "-o={spec}: only the result `{}` is written",
                stmt.tensor_name(result_id)
            )));
        }
        write_tensor(PathBuf::from(path), &result)?;
    }
    Ok(out)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// taco's timing layout: mean, stdev, median and min over the runs, in milliseconds.
fn stats(what: &str, times: &[Duration], reps: usize) -> String {
    let v: Vec<f64> = times.iter().map(|&d| ms(d)).collect();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let stdev = (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64).sqrt();
    let mut sorted = v.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    format!(
        "{what}:  {mean:.3} ms (mean over {reps} runs)\n  stdev:  {stdev:.3} ms\n  median: {median:.3} ms\n  min:    {:.3} ms",
        sorted[0]
    )
}
