//! `nmsparse convert IN OUT -f=FORMAT [--prune]`.

use std::path::Path;
use std::time::Duration;

use nm_format::io::{read_coordinates, write_tensor};
use nm_format::{Duplicates, Format, PruneReport, Tensor, TensorError};

use super::{CommandError, time_min};

/// Options of `convert`.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    /// The target format string.
    pub format: String,
    /// Prune by magnitude to fit N:M levels instead of failing.
    pub prune: bool,
    /// Repeat the conversion this many times and report the fastest.
    pub reps: Option<usize>,
}

/// What `convert` did.
#[derive(Clone, Debug)]
pub struct ConvertReport {
    /// The format written, in its canonical text.
    pub format: String,
    /// Values stored in that format (padding and N:M fill included).
    pub stored: usize,
    /// What pruning dropped, when asked to prune.
    pub pruned: Option<PruneReport>,
    /// Fastest conversion time, when timed.
    pub convert_time: Option<Duration>,
}

/// Reads `input`, converts it to the requested format (validating every invariant), and
/// writes `output` (for N:M formats, the nonzeros as coordinates).
pub fn convert(input: &Path, output: &Path, options: &ConvertOptions) -> Result<ConvertReport, CommandError> {
    let list = read_coordinates::<f64>(input)?;
    let format = Format::parse(&options.format, list.shape.len())?;
    let run = || -> Result<(Tensor<f64>, Option<PruneReport>), TensorError> {
        if options.prune {
            let source = Tensor::from_coordinates(&list, &Format::coo(list.shape.len()), Duplicates::Sum)?;
            let (t, report) = source.prune(&format)?;
            Ok((t, Some(report)))
        } else {
            Ok((Tensor::from_coordinates(&list, &format, Duplicates::Sum)?, None))
        }
    };
    let (result, elapsed) = time_min(options.reps.unwrap_or(1), run);
    let (tensor, pruned) = result.map_err(|e| match e {
        TensorError::DoesNotFitPattern { .. } => {
            CommandError(format!("{e}\nhint: add --prune to keep the largest entries of each block"))
        }
        e => e.into(),
    })?;
    // Check the arrays once more on their way out, as any other producer's would be.
    let (shape, format, levels, values) = tensor.into_raw();
    let tensor = Tensor::from_raw(shape, format, levels, values)?;
    write_tensor(output, &tensor)?;
    Ok(ConvertReport {
        format: tensor.format().name().unwrap_or_else(|| tensor.format().to_string()),
        stored: tensor.stored_len(),
        pruned,
        convert_time: options.reps.map(|_| elapsed),
    })
}
