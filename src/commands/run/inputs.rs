//! What the options say of the statement's tensors: the names they use checked, each
//! tensor's shape (files, `-d`, the extents) and format, and the operands read or generated.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use nm_format::generate::{Values, uniform};
use nm_format::io::{ShapeSource, read_coordinates_shaped};
use nm_format::{Duplicates, Format, Tensor};
use nm_ir::id::Id as _;
use nm_ir::notation::IndexNotation;

use super::RunOptions;
use crate::commands::CommandError;

/// What the options make of the statement's tensors.
pub(super) struct Inputs<T> {
    /// Each tensor's shape.
    pub shapes: HashMap<String, Vec<usize>>,
    /// The formats given by `-f` (a tensor without one is dense).
    pub formats: HashMap<String, Format>,
    /// The sizes `-d` gives index variables, with the option's text.
    pub given: HashMap<String, (usize, String)>,
    /// The coordinates read from `-i` files.
    pub loaded: HashMap<String, nm_format::CoordinateList<T>>,
    /// `-g`'s fills.
    pub fills: HashMap<String, String>,
}

/// The shapes and formats of `stmt`'s tensors from the options: files read (a file's shape
/// stated, or only the smallest holding its coordinates), `-d`'s sizes, and the extents that
/// settle the rest (see `IndexNotation::extents`).
pub(super) fn inputs<T: crate::Scalar>(o: &RunOptions, stmt: &IndexNotation) -> Result<Inputs<T>, CommandError> {
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
    Ok(Inputs { shapes, formats: parsed_formats, given, loaded, fills })
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
pub(super) fn ensure_generatable(name: &str, shape: &[usize], density: f64) -> Result<(), CommandError> {
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

pub(super) fn split_pair<'a>(option: &str, text: &'a str) -> Result<(&'a str, &'a str), CommandError> {
    text.split_once(':').ok_or_else(|| CommandError(format!("-{option}={text}: expected NAME:VALUE")))
}

/// Refuses an option that names a tensor or an index variable the statement does not have
/// (`-f=a:csr` for `A`): ignored, the typo would run something else than asked.
pub(super) fn check_names(o: &RunOptions, stmt: &IndexNotation) -> Result<(), CommandError> {
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

/// The operands, read or generated (seeded), in each tensor's format (`None` for the result).
pub(super) fn operands<T: crate::Scalar>(
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

/// `10,10`
pub(super) fn join_sizes(sizes: &[usize]) -> String {
    sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}
