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
        #[arg(long, value_name = "N")]
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
        #[arg(long, value_name = "N")]
        time: Option<usize>,
    },
}

/// taco writes long options with one dash (`-time=10`); clap wants two.
fn taco_style(args: impl Iterator<Item = String>) -> Vec<String> {
    const LONG: [&str; 3] = ["time", "format", "prune"];
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
    let cli = Cli::parse_from(taco_style(std::env::args()));
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
