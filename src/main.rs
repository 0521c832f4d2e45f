//! The `nmsparse` command. Options follow the `taco` tool (`-f=B:csr`, `-time=N`); single-dash
//! long options are accepted as taco writes them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nmsparse::commands::{self, ConvertOptions};

mod args;

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

/// `--time=N`: how many timed runs, at least one (zero printed a "mean over 0 runs").
fn runs(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{text}` is not a number of runs (1 or more)")),
    }
}

fn main() -> ExitCode {
    // SAFETY: called first, before any thread starts, with a valid signal number and the
    // default action: output into a closed pipe (`nmsparse ... | head`) then ends the process
    // as it ends other command-line tools, where Rust's ignored SIGPIPE made `print!` panic.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = match utf8_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // `info` and `convert` are subcommands; anything else is the expression mode, which leads
    // `--help`.
    match args.get(1).map(String::as_str) {
        Some("info" | "convert") => subcommand(args),
        Some("help") if args.len() == 2 => {
            print!("{}", args::help());
            ExitCode::SUCCESS
        }
        None => {
            print!("{}", args::help());
            ExitCode::SUCCESS
        }
        Some(_) => match args::parse(&args[1..]) {
            Ok(args::Request::Print(text)) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Ok(args::Request::Run(options)) => run_expression(&options),
            // A command line that does not parse is a usage error, as clap reports it.
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
    }
}

/// The command line as UTF-8 text; an argument that is not is an error naming it.
fn utf8_args() -> Result<Vec<String>, String> {
    std::env::args_os()
        .enumerate()
        .map(|(k, a)| a.into_string().map_err(|a| format!("argument {k} is not valid UTF-8: {}", a.to_string_lossy())))
        .collect()
}

/// The subcommands' long options, written with one dash as taco writes options (`-time=3`).
fn subcommand(args: Vec<String>) -> ExitCode {
    const LONG: [&str; 5] = ["time", "format", "prune", "help", "version"];
    let args = args.into_iter().map(|a| match a.strip_prefix('-') {
        Some(rest) if LONG.iter().any(|l| rest == *l || rest.strip_prefix(l).is_some_and(|v| v.starts_with('='))) => {
            format!("-{a}")
        }
        _ => a,
    });
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

fn run_expression(options: &commands::RunOptions) -> ExitCode {
    if let Ok(cores) = std::thread::available_parallelism()
        && let Some(n) = options.threads
        && n > cores.get()
    {
        eprintln!("note: -nthreads={n}: this machine runs {cores} threads at once; the others wait");
    }
    match commands::run(options) {
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
