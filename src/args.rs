//! The expression mode's command line, as the `taco` tool reads it: `-name=value` options
//! (one or two dashes), short options also with their value in the next argument (`-f A:csr`),
//! `-s` given several times accumulating in order, and every option of taco's — implemented,
//! or refused by name with the reason. A word that is no option is never read as the prefix
//! of one (`-frobnicate` is not `-f=robnicate`).

use std::path::PathBuf;

use nmsparse::commands::{self, Backend, RunOptions, ValueType};

/// How an option takes its value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takes {
    /// None: `-c`.
    Nothing,
    /// One, after `=` (or, for one-letter options, in the next argument).
    Value,
    /// One after `=`, or none (`-time`, `-help`).
    Optional,
}

/// One option: its name, what it takes, the value's placeholder, and its help line.
struct Spec {
    name: &'static str,
    takes: Takes,
    value: &'static str,
    help: &'static str,
}

const fn opt(name: &'static str, takes: Takes, value: &'static str, help: &'static str) -> Spec {
    Spec { name, takes, value, help }
}

/// Every option of the expression mode, in the order `--help` lists them.
const OPTIONS: &[Spec] = &[
    opt(
        "f",
        Takes::Value,
        "T:FORMAT",
        "format of tensor T: taco's letters (ds, ds:1,0, sss), a name (csr, csc, dcsr, coo, csf, nv24, nm(2,4,16)) or a map",
    ),
    opt("i", Takes::Value, "T:FILE", "read tensor T from a .mtx or .tns file"),
    opt("o", Takes::Value, "T:FILE", "write the result T to a .mtx or .tns file"),
    opt(
        "O",
        Takes::Optional,
        "DIR",
        "write every tensor, operands and result, as .tns files into DIR (default: the temporary directory)",
    ),
    opt(
        "d",
        Takes::Value,
        "V:SIZE|T:S1,S2",
        "size of index variable V, or the dimensions of tensor T (default: from the inputs, else 1000)",
    ),
    opt(
        "g",
        Takes::Value,
        "T:FILL",
        "generate tensor T: d dense, u ones, r random, s sparse 7%, h hypersparse 0.5%, l rows, v columns, f FEM, b blocked, or a density",
    ),
    opt("t", Takes::Value, "T:TYPE", "value type of tensor T: float or double (every tensor computes in one type)"),
    opt(
        "s",
        Takes::Value,
        "SCHEDULE",
        "scheduling commands, separated by , or ; (several -s accumulate): see -help=scheduling",
    ),
    opt("c", Takes::Nothing, "", "one kernel that assembles and computes (default: assembly, then compute)"),
    opt("time", Takes::Optional, "N", "time compilation, assembly and N runs of the computation (default 1)"),
    opt("write-time", Takes::Value, "FILE", "write taco's timing line: compile,assemble,mean,stdev,median (ms)"),
    opt(
        "nthreads",
        Takes::Value,
        "N",
        "threads (default: 1, or every core where the schedule parallelizes the outer loop)",
    ),
    opt(
        "schedule",
        Takes::Value,
        "static|dynamic[,CHUNK]",
        "the OpenMP schedule of parallel loops (default dynamic,16)",
    ),
    opt("print-compute", Takes::Nothing, "", "print the compute kernel (C)"),
    opt("print-assembly", Takes::Nothing, "", "print the assembly kernel (C)"),
    opt("print-evaluate", Takes::Nothing, "", "print the kernel that assembles and computes at once (C)"),
    opt("print-kernels", Takes::Nothing, "", "print every kernel as one C library"),
    opt("print-concrete", Takes::Nothing, "", "print the concrete index notation"),
    opt("print-iteration-graph", Takes::Nothing, "", "print the iteration graph (DOT)"),
    opt("print-lattice", Takes::Value, "V", "print the merge lattice of index variable V"),
    opt("print-loops", Takes::Nothing, "", "print the loop IR"),
    opt("print-nocolor", Takes::Nothing, "", "accepted: nothing is printed in color"),
    opt("nocolor", Takes::Nothing, "", "accepted: nothing is printed in color"),
    opt("write-source", Takes::Value, "FILE", "write the kernels' C to FILE"),
    opt("write-compute", Takes::Value, "FILE", "write the compute kernel's C to FILE"),
    opt("write-assembly", Takes::Value, "FILE", "write the assembly kernel's C to FILE"),
    opt(
        "read-source",
        Takes::Value,
        "FILE",
        "also run the kernels of FILE (C with the arguments of -write-source's; timed with -time)",
    ),
    opt("verify", Takes::Nothing, "", "compare the results of -read-source's kernels with the generated ones"),
    opt("prefix", Takes::Value, "NAME", "prefix of the generated functions' names"),
    opt(
        "cuda",
        Takes::Nothing,
        "",
        "refused: the generated kernels are C for the CPU (-device=cuda runs the N:M product on a GPU)",
    ),
    opt("backend", Takes::Value, "jit|interp", "generated C (default) or the loop-IR interpreter"),
    opt("type", Takes::Value, "f64|f32", "value type of every tensor (default f64)"),
    opt("prune", Takes::Value, "T", "prune input T to fit its N:M format, reporting what is dropped"),
    opt(
        "workspace",
        Takes::Value,
        "POLICY",
        "the sparse workspace: dense, auto, bucket, hash, hash(L), coord, map or vector",
    ),
    opt("device", Takes::Value, "cpu|cuda[:N]", "where the N:M product C(i,j) = A(i,k) * B(k,j) runs"),
    opt("help", Takes::Optional, "scheduling", "this help, or the scheduling commands'"),
    opt("version", Takes::Nothing, "", "the version"),
];

/// What the command line asks for.
pub enum Request {
    /// Print this text and stop.
    Print(String),
    /// Run an expression.
    Run(Box<RunOptions>),
}

/// Reads the expression mode's arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Request, String> {
    let mut o = RunOptions::new("");
    let mut expr: Option<String> = None;
    let mut schedules: Vec<String> = Vec::new();
    let mut types: Vec<String> = Vec::new();
    let mut value_type: Option<String> = None;
    let mut k = 0;
    while k < args.len() {
        let arg = &args[k];
        k += 1;
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')).filter(|b| !b.is_empty()) else {
            if let Some(first) = &expr {
                return Err(format!("a second expression `{arg}` after `{first}` (options start with -)"));
            }
            expr = Some(arg.clone());
            continue;
        };
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let Some(spec) = OPTIONS.iter().find(|s| s.name == name) else {
            return Err(format!(
                "unknown option `{}` (nmsparse --help lists the options)",
                arg.split('=').next().unwrap_or(arg)
            ));
        };
        let value = match (spec.takes, value) {
            (Takes::Nothing, Some(_)) => return Err(format!("-{name} takes no value")),
            (Takes::Nothing, None) => None,
            (Takes::Value, Some(v)) => Some(v),
            // One-letter options also take their value from the next argument (`-f A:csr`).
            (Takes::Value, None) if name.len() == 1 && k < args.len() => {
                k += 1;
                Some(args[k - 1].clone())
            }
            (Takes::Value, None) => return Err(format!("-{name} needs a value: -{name}={}", spec.value)),
            (Takes::Optional, v) => v,
        };
        let v = || value.clone().unwrap_or_default();
        match name {
            "f" => o.formats.push(v()),
            "i" => o.inputs.push(v()),
            "o" => o.outputs.push(v()),
            "O" => {
                o.output_dir =
                    Some(value.clone().filter(|d| !d.is_empty()).map_or_else(std::env::temp_dir, PathBuf::from))
            }
            "d" => o.dims.push(v()),
            "g" => o.generate.push(v()),
            "t" => types.push(v()),
            "s" => schedules.push(v()),
            "c" => o.fused = true,
            "time" => {
                o.time = Some(match &value {
                    None => 1,
                    Some(n) => n
                        .parse()
                        .ok()
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| format!("-time={n}: `{n}` is not a number of runs (1 or more)"))?,
                })
            }
            "write-time" => o.write_time = Some(v().into()),
            "nthreads" => o.threads = Some(threads(&v())?),
            "schedule" => o.omp_schedule = Some(omp_schedule(&v())?),
            "print-compute" => o.print_compute = true,
            "print-assembly" => o.print_assembly = true,
            "print-evaluate" => o.print_evaluate = true,
            "print-kernels" => o.print_kernels = true,
            "print-concrete" => o.print_concrete = true,
            "print-iteration-graph" => o.print_iteration_graph = true,
            "print-lattice" => o.print_lattice = Some(v()),
            "print-loops" => o.print_loops = true,
            "print-nocolor" | "nocolor" => {}
            "write-source" => o.write_source = Some(v().into()),
            "write-compute" => o.write_compute = Some(v().into()),
            "write-assembly" => o.write_assembly = Some(v().into()),
            "read-source" => o.read_source.push(v().into()),
            "verify" => o.verify = true,
            "prefix" => o.prefix = v(),
            "cuda" => {
                return Err("-cuda: nmsparse generates C for the CPU; CUDA code is not generated for expressions \
                            (-device=cuda runs the N:M product C(i,j) = A(i,k) * B(k,j) on a GPU)"
                    .into());
            }
            "backend" => {
                o.backend = match v().as_str() {
                    "jit" => Backend::Jit,
                    "interp" => Backend::Interp,
                    other => return Err(format!("-backend={other}: expected jit or interp")),
                }
            }
            "type" => value_type = Some(v()),
            "prune" => o.prune.push(v()),
            "workspace" => {
                let policy = v().parse::<nmsparse::ism::Policy>().map_err(|e| format!("-workspace: {e}"))?;
                o.workspace = Some(nmsparse::ism::Config::new(policy));
            }
            "device" => o.device = v().parse::<commands::Device>().map_err(|e| e.to_string())?,
            "help" => {
                return Ok(Request::Print(match value.as_deref() {
                    Some("scheduling") => scheduling_help(),
                    None | Some("") => help(),
                    Some(other) => return Err(format!("-help={other}: expected -help or -help=scheduling")),
                }));
            }
            "version" => return Ok(Request::Print(format!("nmsparse {}\n", env!("CARGO_PKG_VERSION")))),
            _ => unreachable!("every option in OPTIONS is handled"),
        }
    }
    o.expr = expr.ok_or("no expression: nmsparse \"y(i) = A(i,j) * x(j)\" [options] (see nmsparse --help)")?;
    if !schedules.is_empty() {
        o.schedule = Some(schedules.join(";"));
    }
    o.value_type = value_types(value_type.as_deref(), &types)?;
    if o.verify && o.read_source.is_empty() {
        return Err(
            "-verify compares the kernels of -read-source=FILE with the generated ones: give -read-source".into()
        );
    }
    Ok(Request::Run(Box::new(o)))
}

/// `-nthreads`: 1 to `MAX_THREADS`, where more would only make the threads wait for each other.
fn threads(text: &str) -> Result<usize, String> {
    let max = nm_runtime::workers::MAX_THREADS;
    match text.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("-nthreads={text}: `{text}` is not a thread count from 1 to {max}")),
    }
}

/// `-schedule=static|dynamic[,chunk]`.
fn omp_schedule(text: &str) -> Result<nmsparse::lower::ir::OmpSchedule, String> {
    use nmsparse::lower::ir::OmpSchedule;
    let bad = || format!("-schedule={text}: expected static or dynamic, with a chunk size (dynamic,16)");
    let (kind, chunk) = match text.split_once(',') {
        Some((k, c)) => (k, Some(c.trim().parse::<u32>().ok().filter(|&c| c > 0).ok_or_else(bad)?)),
        None => (text, None),
    };
    match kind.trim() {
        "static" => Ok(OmpSchedule::Static(chunk)),
        "dynamic" => Ok(OmpSchedule::Dynamic(chunk.unwrap_or(1))),
        _ => Err(bad()),
    }
}

/// The value type every tensor computes in, from `-type` and taco's `-t=T:type` (float is
/// f32, double f64). nmsparse computes every tensor in one type: types that differ are an
/// error, and tensors without `-t` take the type the others name (said in a note).
fn value_types(all: Option<&str>, per_tensor: &[String]) -> Result<ValueType, String> {
    let named = |text: &str, what: &str| match text {
        "f64" | "double" | "float64" => Ok(ValueType::F64),
        "f32" | "float" | "float32" => Ok(ValueType::F32),
        other => Err(format!("{what}: nmsparse computes in float or double; `{other}` is not one of them")),
    };
    let mut chosen: Option<(ValueType, String)> = match all {
        Some(t) => Some((named(t, &format!("-type={t}"))?, format!("-type={t}"))),
        None => None,
    };
    for spec in per_tensor {
        let (_, ty) = spec.split_once(':').ok_or_else(|| format!("-t={spec}: expected TENSOR:TYPE"))?;
        let ty = named(ty, &format!("-t={spec}"))?;
        match &chosen {
            Some((c, by)) if *c != ty => {
                return Err(format!("-t={spec} and {by}: every tensor computes in one value type here"));
            }
            Some(_) => {}
            None => chosen = Some((ty, format!("-t={spec}"))),
        }
    }
    if let (Some((ValueType::F32, by)), None) = (&chosen, all) {
        eprintln!("note: {by}: every tensor computes in float (one value type for all)");
    }
    Ok(chosen.map_or(ValueType::F64, |(t, _)| t))
}

/// `nmsparse --help`: the expression mode first, with taco-like examples.
pub fn help() -> String {
    let mut out = String::from(
        "Sparse tensor algebra with N:M structured sparsity: compile an expression in taco's index notation for the\n\
         formats given, and run it on files or on generated data (options as the taco tool writes them).\n\n\
         Usage: nmsparse \"<expression>\" [options]\n       nmsparse info FILE | nmsparse convert IN OUT -f=FORMAT\n\n\
         Examples:\n  \
         nmsparse \"y(i) = A(i,j) * x(j)\" -f=A:ds -i=A:data/power_law_500.mtx -time=10       # SpMV\n  \
         nmsparse \"C(i,j) = A(i,k) * B(k,j)\" -f=A:csr -f=B:csr -f=C:csr -d=i:2000 -d=j:2000 -d=k:2000 -g=A:s -g=B:s   # SpGEMM\n  \
         nmsparse \"A(i,l) = B(i,j,k) * C(j,l) * D(k,l)\" -f=B:sss -d=i:200 -d=j:200 -d=k:200 -d=l:16   # MTTKRP\n  \
         nmsparse \"O(i,j) = I(i+p,j+q) * F(p,q)\" -f=I:dcsr -d=i:998 -d=j:998 -d=p:3 -d=q:3 -g=I:0.05   # a sparse convolution\n  \
         nmsparse \"C(i,j) = A(i,k) * B(k,j)\" -f=B:nm(2,4,16) -i=B:data/nm_2_4_16.mtx -prune=B -d=i:64   # N:M product\n  \
         nmsparse \"y(i) = A(i,j) * x(j)\" -f=A:csr -s=\"split(i,i0,i1,32),parallelize(i0,CPUThread,NoRaces)\" -nthreads=2\n\n\
         Options:\n",
    );
    for s in OPTIONS {
        let flag = match s.takes {
            Takes::Nothing => format!("-{}", s.name),
            Takes::Value => format!("-{}={}", s.name, s.value),
            Takes::Optional => format!("-{}[={}]", s.name, s.value),
        };
        out.push_str(&format!("  {flag:<32} {}\n", s.help));
    }
    out.push_str(
        "\nOptions take one dash or two; one-letter ones also take their value as the next argument (-f A:csr).\n\
         Subcommands: info FILE (shape, nonzeros, symmetry, format suggestions), convert IN OUT -f=FORMAT [--prune] [--time N].\n\
         Environment: NMSPARSE_CACHE_DIR (kernel cache), CC and NMSPARSE_CFLAGS (the C compiler), NMSPARSE_CC_TIMEOUT\n\
         (seconds a compile may take), NMSPARSE_MTX_BOTH_TRIANGLES=1 (read symmetric files that store both triangles).\n",
    );
    out
}

/// `nmsparse -help=scheduling`.
pub fn scheduling_help() -> String {
    "Scheduling commands rewrite the loops of the expression. -s takes one or more, separated by commas (as taco\n\
     writes them) or semicolons; several -s accumulate in order. Enumerations are written as taco writes them\n\
     (CPUThread, NoRaces, MaxExact) or in lower case (cpu_thread, no_races, max_exact).\n\n\
     Examples:\n  \
     -s=\"precompute(A(i,j)*x(j),i,i)\"\n  \
     -s=\"split(i,i0,i1,32),parallelize(i0,CPUThread,NoRaces)\"\n\n\
     Commands:\n  \
     reorder(i1, i2, ...)          the directly nested loops over i1, i2, ... in this order, outermost first\n  \
     split(i, i0, i1, factor)      i as blocks i0 of `factor` coordinates i1\n  \
     divide(i, i0, i1, parts)      i as `parts` blocks i0 of coordinates i1\n  \
     fuse(i, j, f)                 the loop over j directly inside i as one loop f over every (i, j)\n  \
     pos(i, ipos, T)               the loop over i over the positions of T's entries instead of coordinates\n  \
     precompute(expr, i, iw[, w])  expr computed over iw (may be i) into a temporary w before it is read; i and iw\n                                may be lists of one variable ({i}); a fifth argument names a sparse workspace\n                                policy (bucket, hash, coord, map, vector)\n  \
     bound(i, ib, b, kind)         a promise on the extent of i: MinExact, MinConstraint, MaxExact, MaxConstraint\n  \
     unroll(i, factor)             unroll the loop over i\n  \
     parallelize(i, unit, races)   unit CPUThread, CPUVector or NotParallel (GPU units are refused: the kernels are\n                                C for the CPU); races NoRaces, IgnoreRaces, Atomics, Temporary, ParallelReduction\n  \
     mergeby(i, strategy)          TwoFinger or Gallop: accepted; merges here advance one entry at a time\n  \
     assemble(T, Append|Insert)    accepted; the result is assembled as its loops allow\n"
        .to_string()
}
