//! What the `nmsparse` subcommands do; `main.rs` only parses arguments.

mod convert;
mod info;
mod nm;
mod run;

pub use convert::{ConvertOptions, ConvertReport, convert};
pub use info::{Info, info};
pub use nm::Device;
pub use run::{Backend, RunOptions, ValueType, run};

use std::time::{Duration, Instant};

/// The error of a command: a message for the user (already saying what to do).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CommandError(pub String);

impl From<nm_format::IoError> for CommandError {
    fn from(e: nm_format::IoError) -> Self {
        CommandError(e.to_string())
    }
}

impl From<nm_format::TensorError> for CommandError {
    fn from(e: nm_format::TensorError) -> Self {
        CommandError(e.to_string())
    }
}

impl From<nm_runtime::memory::NotAvailable> for CommandError {
    fn from(e: nm_runtime::memory::NotAvailable) -> Self {
        nm_format::TensorError::from(e).into()
    }
}

impl From<nm_format::FormatError> for CommandError {
    fn from(e: nm_format::FormatError) -> Self {
        CommandError(e.to_string())
    }
}

/// Runs `f` `reps` times (at least once) and returns its last result and the fastest time, as
/// taco's `-time` does.
pub fn time_min<R>(reps: usize, mut f: impl FnMut() -> R) -> (R, Duration) {
    let mut best = Duration::MAX;
    let mut result = None;
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        let r = f();
        best = best.min(start.elapsed());
        result = Some(r);
    }
    (result.expect("ran at least once"), best)
}
