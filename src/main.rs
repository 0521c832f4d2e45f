//! The `nmsparse` command. Options follow the `taco` tool (`-f=B:csr`, `-time=N`); single-dash
//! long options are accepted as taco writes them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nmsparse::commands::{self, ConvertOptions};

#[derive(Parser)]
#[command(name = "nmsparse", version, about = "Sparse tensor algebra with N:M structured sparsity")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Shape, nonzeros, density, symmetry and format suggestions of a .mtx or .tns file.
    Info {
        /// The file.
        file: PathBuf,
        /// Read the file N times and report the fastest read.
        #[arg(long, value_name = "N", value_parser = runs)]
        time: Option<usize>,
    },
    /// Read a file, convert it to a format (validated), and write it.
    Convert {
        /// Input .mtx or .tns file.
        input: PathBuf,
        /// Output .mtx or .tns file (N:M formats write their nonzeros as coordinates).
        output: PathBuf,
        /// Target format: a name (csr, csc, dcsr, coo, csf, bcsr(4), nv24, nm(2,8,32), ...),
        /// taco letters with an optional mode order (ds:1,0), or a map
        /// `(i, j) -> (i : dense, j : structured[2, 4])`.
        #[arg(short = 'f', long = "format", value_name = "FORMAT")]
        format: String,
        /// Prune by magnitude so the data fits the format's N:M levels (reports what is dropped).
        #[arg(long)]
        prune: bool,
        /// Convert N times and report the fastest conversion.
        #[arg(long, value_name = "N", value_parser = runs)]
        time: Option<usize>,
    },
}

/// `nmsparse "<expr>" [options]`: compile and run an expression (taco's options).
#[derive(Parser)]
#[command(
    name = "nmsparse",
    version,
    about = "Compile and run a tensor expression, e.g. nmsparse \"y(i) = A(i,j) * x(j)\" -f=A:csr -time=10"
)]
struct RunCli {
    /// The expression, in taco's index notation.
    expr: String,
    /// A tensor's format: `-f=A:csr`, `-f=B:ds:1,0`, `-f=W:nm(2,4,16)`.
    #[arg(short = 'f', value_name = "TENSOR:FORMAT")]
    format: Vec<String>,
    /// Read a tensor from a .mtx or .tns file: `-i=A:matrix.mtx`.
    #[arg(short = 'i', value_name = "TENSOR:FILE")]
    input: Vec<String>,
    /// Write the result: `-o=y:out.mtx`.
    #[arg(short = 'o', value_name = "TENSOR:FILE")]
    output: Vec<String>,
    /// An index variable's size: `-d=i:1000` (default 1000 unless an input fixes it).
    #[arg(short = 'd', value_name = "VAR:SIZE")]
    dim: Vec<String>,
    /// A schedule: `-s="reorder(k, j)"`.
    #[arg(short = 's', value_name = "SCHEDULE")]
    schedule: Option<String>,
    /// Run N times and print compile and compute times.
    #[arg(long, value_name = "N", value_parser = runs)]
    time: Option<usize>,
    /// `jit` (generated C, default) or `interp` (the loop-IR interpreter).
    #[arg(long, value_name = "jit|interp", default_value = "jit")]
    backend: String,
    /// Print the concrete index notation.
    #[arg(long = "print-concrete")]
    print_concrete: bool,
    /// Print the loop IR.
    #[arg(long = "print-loops")]
    print_loops: bool,
    /// Print the generated C.
    #[arg(long = "print-compute")]
    print_compute: bool,
    /// Print the iteration graph (DOT).
    #[arg(long = "print-iteration-graph")]
    print_iteration_graph: bool,
    /// Threads: row ranges of the outer loop run in parallel where it names result rows
    /// (default: 1, or every core where the schedule parallelizes the outer loop).
    #[arg(long = "nthreads", value_name = "N", value_parser = thread_count)]
    nthreads: Option<usize>,
    /// Write the generated C to a file.
    #[arg(long = "write-source", value_name = "FILE")]
    write_source: Option<PathBuf>,
    /// One kernel that assembles and computes (default: an assembly kernel, then compute).
    #[arg(short = 'c')]
    fused: bool,
    /// Print the assembly kernel.
    #[arg(long = "print-assembly")]
    print_assembly: bool,
    /// Accepted for taco compatibility: output is never colored.
    #[arg(long = "print-nocolor")]
    print_nocolor: bool,
    /// Generate a tensor without an input file: `-g=B:s` (d dense, r dense random, s sparse
    /// 7%, h hypersparse 0.5%, or a density such as `-g=B:0.05`; seeded).
    #[arg(short = 'g', value_name = "TENSOR:FILL")]
    generate: Vec<String>,
    /// Write taco's timing CSV line: compile,assemble,mean,stdev,median (ms).
    #[arg(long = "write-time", value_name = "FILE")]
    write_time: Option<PathBuf>,
    /// Value type of every tensor.
    #[arg(long = "type", value_name = "f64|f32", default_value = "f64")]
    value_type: String,
    /// Prune an input read into an N:M format to fit it (reporting what was dropped):
    /// `--prune=B`.
    #[arg(long = "prune", value_name = "TENSOR")]
    prune: Vec<String>,
    /// The workspace of a statement that scatters into a sparse result:
    /// dense|bucket|hash|hash(L)|coord|map|vector (default: the analysis picks).
    #[arg(long = "workspace", value_name = "POLICY")]
    workspace: Option<String>,
    /// Where the N:M SpMM `C(i,j) = A(i,k) * B(k,j)` runs: cpu, or cuda / cuda:N (nm-cuda,
    /// f32; needs a CUDA driver, a device, and NVRTC or precompiled CUBINs).
    #[arg(long = "device", value_name = "cpu|cuda[:N]", default_value = "cpu")]
    device: String,
}

/// `-nthreads`: 1 to `MAX_THREADS`, where more would only make the threads wait for each other.
fn thread_count(text: &str) -> Result<usize, String> {
    let max = nm_format::workers::MAX_THREADS;
    match text.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("`{text}` is not a thread count from 1 to {max}")),
    }
}

/// `-time=N`: how many timed runs, at least one (zero printed a "mean over 0 runs").
fn runs(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{text}` is not a number of runs (1 or more)")),
    }
}

/// The short options that take a value; taco writes it after `=` (`-f=A:csr`).
const SHORT_WITH_VALUE: [char; 6] = ['f', 'i', 'o', 'd', 's', 'g'];

/// Refuses a single-dash word that is neither a long option taco writes with one dash, a
/// short option with `=` (`-f=A:csr`) or alone (`-f A:csr`), nor `-c`: clap would read
/// `-frobnicate` as `-f=robnicate` and `-cx` as `-c -x`.
fn check_short_options(args: &[String]) -> Result<(), String> {
    for a in args.iter().skip(1) {
        let Some(rest) = a.strip_prefix('-') else { continue };
        if rest.starts_with('-') || rest.is_empty() || rest.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let mut chars = rest.chars();
        let first = chars.next().expect("not empty");
        let tail = chars.as_str();
        let fine = match first {
            c if SHORT_WITH_VALUE.contains(&c) => tail.is_empty() || tail.starts_with('='),
            'c' | 'h' | 'V' => tail.is_empty(),
            _ => false,
        };
        if !fine {
            let name = a.split('=').next().unwrap_or(a);
            return Err(format!("unknown option `{name}` (see nmsparse --help)"));
        }
    }
    Ok(())
}

/// The command line as UTF-8 text; an argument that is not is an error naming it.
fn utf8_args() -> Result<Vec<String>, String> {
    std::env::args_os()
        .enumerate()
        .map(|(k, a)| a.into_string().map_err(|a| format!("argument {k} is not valid UTF-8: {}", a.to_string_lossy())))
        .collect()
}

/// taco writes long options with one dash (`-time=10`); clap wants two.
fn taco_style(args: impl Iterator<Item = String>) -> Vec<String> {
    const LONG: [&str; 17] = [
        "device",
        "workspace",
        "time",
        "print-assembly",
        "print-nocolor",
        "write-time",
        "type",
        "nthreads",
        "write-source",
        "format",
        "prune",
        "backend",
        "print-concrete",
        "print-loops",
        "print-compute",
        "print-iteration-graph",
        "help",
    ];
    args.map(|a| match a.strip_prefix('-') {
        Some(rest)
            if !rest.starts_with('-') && LONG.iter().any(|l| rest == *l || rest.starts_with(&format!("{l}="))) =>
        {
            format!("-{a}")
        }
        _ => a,
    })
    .collect()
}

fn main() -> ExitCode {
    let args = match utf8_args() {
        Ok(args) => taco_style(args.into_iter()),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    const SUBCOMMANDS: [&str; 6] = ["info", "convert", "help", "--help", "-h", "--version"];
    if args.get(1).is_some_and(|a| !SUBCOMMANDS.contains(&a.as_str()) && !a.starts_with('-')) {
        if let Err(e) = check_short_options(&args) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
        return run_expression(RunCli::parse_from(args));
    }
    let cli = Cli::parse_from(args);
    let result = match cli.command {
        Command::Info { file, time } => commands::info(&file, time).map(|info| print!("{}", info.render(&file))),
        Command::Convert { input, output, format, prune, time } => {
            let options = ConvertOptions { format, prune, reps: time };
            commands::convert(&input, &output, &options).map(|r| {
                println!("wrote {} ({}, {} stored values)", output.display(), r.format, r.stored);
                if let Some(p) = r.pruned {
                    println!("pruned {} nonzeros (|sum| {:.6e}), kept {}", p.dropped, p.dropped_magnitude, p.kept);
                }
                if let Some(t) = r.convert_time {
                    println!("convert time {:.3} ms (fastest of the runs)", t.as_secs_f64() * 1e3);
                }
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_expression(cli: RunCli) -> ExitCode {
    let backend = match cli.backend.as_str() {
        "jit" => commands::Backend::Jit,
        "interp" => commands::Backend::Interp,
        other => {
            eprintln!("error: -backend={other}: expected jit or interp");
            return ExitCode::FAILURE;
        }
    };
    let value_type = match cli.value_type.as_str() {
        "f64" | "double" => commands::ValueType::F64,
        "f32" | "float" => commands::ValueType::F32,
        other => {
            eprintln!("error: -type={other}: expected f64 or f32");
            return ExitCode::FAILURE;
        }
    };
    let _ = cli.print_nocolor;
    if let Ok(cores) = std::thread::available_parallelism()
        && let Some(n) = cli.nthreads
        && n > cores.get()
    {
        eprintln!("note: -nthreads={n}: this machine runs {cores} threads at once; the others wait");
    }
    let workspace = match cli.workspace.as_deref().map(str::parse::<nmsparse::ism::Policy>) {
        None => None,
        Some(Ok(policy)) => Some(nmsparse::ism::Config::new(policy)),
        Some(Err(e)) => {
            eprintln!("error: -workspace: {e}");
            return ExitCode::FAILURE;
        }
    };
    let device = match cli.device.parse::<commands::Device>() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = commands::RunOptions {
        expr: cli.expr,
        formats: cli.format,
        inputs: cli.input,
        outputs: cli.output,
        dims: cli.dim,
        schedule: cli.schedule,
        time: cli.time,
        backend,
        print_concrete: cli.print_concrete,
        print_loops: cli.print_loops,
        print_compute: cli.print_compute,
        print_iteration_graph: cli.print_iteration_graph,
        threads: cli.nthreads,
        write_source: cli.write_source,
        fused: cli.fused,
        print_assembly: cli.print_assembly,
        generate: cli.generate,
        write_time: cli.write_time,
        value_type,
        prune: cli.prune,
        workspace,
        device,
    };
    match commands::run(&options) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
