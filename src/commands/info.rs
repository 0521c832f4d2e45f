//! `nmsparse info FILE`: what a tensor file holds, and which formats would suit it.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use nm_format::io::{MtxSymmetry, read_mtx, read_tns};
use nm_format::{CoordinateList, Duplicates, Format, Tensor, TensorError};

use super::{CommandError, time_min};

/// The facts `info` reports.
#[derive(Clone, Debug)]
pub struct Info {
    /// Logical shape.
    pub shape: Vec<usize>,
    /// Entries stored in the file.
    pub stored_in_file: usize,
    /// Distinct components after symmetric expansion and summing duplicates.
    pub components: usize,
    /// Components whose value is not zero.
    pub nonzeros: usize,
    /// Components whose value is NaN.
    pub nans: usize,
    /// Components whose value is infinite.
    pub infinities: usize,
    /// `components / size`.
    pub density: f64,
    /// What the file declares and what the data is (matrices only).
    pub symmetry: Option<String>,
    /// Formats worth trying, best first, each with its reason.
    pub suggestions: Vec<(String, String)>,
    /// Fastest time to read the file, when timed.
    pub read_time: Option<Duration>,
}

/// Reads `path` (`reps` times when timing) and describes it.
pub fn info(path: &Path, reps: Option<usize>) -> Result<Info, CommandError> {
    let read = || -> Result<(CoordinateList<f64>, usize, Option<MtxSymmetry>), CommandError> {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("mtx") => {
                let m = read_mtx::<f64>(path)?;
                Ok((m.data, m.header.stored, Some(m.header.symmetry)))
            }
            Some("tns") => {
                let list = read_tns::<f64>(path)?;
                let n = list.len();
                Ok((list, n, None))
            }
            _ => Err(CommandError(format!("{}: unknown file type (expected .mtx or .tns)", path.display()))),
        }
    };
    let (result, elapsed) = time_min(reps.unwrap_or(1), read);
    let (list, stored_in_file, declared) = result?;
    let order = list.shape.len();
    let tensor = Tensor::from_coordinates(&list, &Format::csf(order), Duplicates::Sum)?;
    let size: f64 = list.shape.iter().map(|&s| s as f64).product();
    let components = tensor.stored_len();
    let density = if size > 0.0 { components as f64 / size } else { 0.0 };
    let symmetry = match declared {
        Some(d) if order == 2 => Some(describe_symmetry(d, &tensor)?),
        _ => None,
    };
    let suggestions = suggest(&tensor, density)?;
    Ok(Info {
        shape: list.shape.clone(),
        stored_in_file,
        components,
        nonzeros: tensor.count_nonzeros(),
        nans: tensor.values().iter().filter(|v| v.is_nan()).count(),
        infinities: tensor.values().iter().filter(|v| v.is_infinite()).count(),
        density,
        symmetry,
        suggestions,
        read_time: reps.map(|_| elapsed),
    })
}

fn describe_symmetry(declared: MtxSymmetry, a: &Tensor<f64>) -> Result<String, CommandError> {
    let declared = match declared {
        MtxSymmetry::General => "general",
        MtxSymmetry::Symmetric => "symmetric",
        MtxSymmetry::SkewSymmetric => "skew-symmetric",
    };
    if a.shape()[0] != a.shape()[1] {
        return Ok(format!("{declared} (rectangular)"));
    }
    // Aᵀ in the same format, by reading A's storage with the dimensions swapped.
    let transposed = Tensor::from_coordinates(&transpose(&a.to_coordinates()), a.format(), Duplicates::Sum)?;
    let csr = a.convert(&Format::csf(2))?;
    let t = transposed.convert(&Format::csf(2))?;
    let negated = Tensor::from_coordinates(
        &{
            let mut l = t.to_coordinates();
            l.values.iter_mut().for_each(|v| *v = -*v);
            l
        },
        &Format::csf(2),
        Duplicates::Sum,
    )?;
    let actual = if t == csr {
        "symmetric"
    } else if negated == csr {
        "skew-symmetric"
    } else if pattern_equal(&t, &csr) {
        "structurally symmetric"
    } else {
        "unsymmetric"
    };
    Ok(format!("{declared} in the file; the data is {actual}"))
}

fn transpose(list: &CoordinateList<f64>) -> CoordinateList<f64> {
    CoordinateList {
        shape: vec![list.shape[1], list.shape[0]],
        coords: vec![list.coords[1].clone(), list.coords[0].clone()],
        values: list.values.clone(),
    }
}

fn pattern_equal(a: &Tensor<f64>, b: &Tensor<f64>) -> bool {
    a.levels() == b.levels()
}

/// Formats worth trying: dense when dense enough, N:M patterns the data already fits,
/// blocked formats whose blocks are well filled, and the compressed default.
fn suggest(t: &Tensor<f64>, density: f64) -> Result<Vec<(String, String)>, CommandError> {
    let order = t.order();
    let mut out = Vec::new();
    if density >= 0.3 {
        out.push(("dense".to_string(), format!("{:.0}% of the elements are stored", density * 100.0)));
    }
    if order == 2 {
        // A conversion too large for this machine is a suggestion left out, not a failure of
        // `info` (a [1, 2^63 - 1] `.tns` could not be described at all).
        let convert = |format: &Format| match t.convert(format) {
            Ok(c) => Ok(Some(c)),
            Err(TensorError::DoesNotFitPattern { .. } | TensorError::TooLarge { .. }) => Ok(None),
            Err(e) => Err(CommandError::from(e)),
        };
        for (name, what) in [("nv24", "2 of every 4 along rows"), ("nm(2,4,1)", "vector-wise 2:4, L = 1")] {
            if convert(&Format::parse(name, 2)?)?.is_some() {
                out.push((name.to_string(), format!("the data fits {what} exactly")));
            }
        }
        for b in [2usize, 4, 8] {
            let Some(blocked) = convert(&Format::bcsr(b).map_err(CommandError::from)?)? else { continue };
            let fill = t.stored_len() as f64 / blocked.stored_len().max(1) as f64;
            if fill >= 0.5 {
                out.push((
                    format!("bcsr({b})"),
                    format!("{:.0}% of the stored {b}×{b} blocks are filled", fill * 100.0),
                ));
            }
        }
        if let Some(csr) = convert(&Format::csr())?
            && let Some(why) = band_rows(&csr)
        {
            out.push(("db".to_string(), why));
        }
        if let Some(dcsr) = convert(&Format::csf(2))? {
            let rows_used = match &dcsr.levels()[0] {
                nm_format::LevelStorage::Compressed { crd, .. } => crd.len(),
                _ => t.shape()[0],
            };
            let empty = t.shape()[0] - rows_used.min(t.shape()[0]);
            if t.shape()[0] > 0 && empty * 2 > t.shape()[0] {
                out.push(("dcsr".to_string(), format!("{empty} of {} rows are empty", t.shape()[0])));
            }
        }
        // CSR and CSC keep a position per row (column): suggested where those fit in memory.
        let positions_fit = |n: usize| {
            nm_runtime::memory::ensure_available((n as u128 + 1) * std::mem::size_of::<usize>() as u128, String::new)
                .is_ok()
        };
        if positions_fit(t.shape()[0]) {
            out.push(("csr".to_string(), "the general-purpose choice for row-wise kernels (SpMV, SpMM)".to_string()));
        }
        if positions_fit(t.shape()[1]) {
            out.push(("csc".to_string(), "for column-wise access (Aᵀx, left-looking factorizations)".to_string()));
        }
    } else {
        out.push(("csf".to_string(), "compressed at every level: the general choice for higher orders".to_string()));
        out.push(("coo".to_string(), "for kernels that stream components in any order".to_string()));
    }
    Ok(out)
}

/// Why band rows (`db`) would suit a CSR matrix, where they take fewer bytes than CSR: each
/// row stored as one run of columns, its zeros included, with no column indices.
fn band_rows(csr: &Tensor<f64>) -> Option<String> {
    let [_, nm_format::LevelStorage::Compressed { pos, crd }] = csr.levels() else { return None };
    let rows = pos.len().saturating_sub(1);
    let mut run = 0usize;
    for r in 0..rows {
        let (start, end) = (pos.get(r), pos.get(r + 1));
        if end > start {
            run += crd.get(end - 1) - crd.get(start) + 1;
        }
    }
    let entries = crd.len();
    // Values of 8 bytes and indices of 4: CSR's per entry and row, the band's per run and row.
    let (csr_bytes, band_bytes) = (12 * entries + 4 * rows, 8 * run + 8 * rows);
    (entries > 0 && band_bytes < csr_bytes).then(|| {
        format!(
            "each row one run of columns: {:.2} values stored per entry, {:.0}% of CSR's bytes",
            run as f64 / entries as f64,
            100.0 * band_bytes as f64 / csr_bytes as f64
        )
    })
}

impl Info {
    /// The report as the command prints it.
    pub fn render(&self, path: &Path) -> String {
        let mut s = String::new();
        let shape: Vec<String> = self.shape.iter().map(usize::to_string).collect();
        let _ = writeln!(s, "file        {}", path.display());
        let _ = writeln!(s, "shape       {}", shape.join(" × "));
        let _ = writeln!(s, "stored      {} entries in the file", self.stored_in_file);
        let _ = writeln!(s, "components  {} ({} nonzero)", self.components, self.nonzeros);
        if self.nans + self.infinities > 0 {
            let _ = writeln!(s, "not finite  {} NaN, {} infinite", self.nans, self.infinities);
        }
        let _ = writeln!(s, "density     {:.3e} ({:.4}%)", self.density, self.density * 100.0);
        if let Some(sym) = &self.symmetry {
            let _ = writeln!(s, "symmetry    {sym}");
        }
        for (i, (format, why)) in self.suggestions.iter().enumerate() {
            let label = if i == 0 { "suggested" } else { "" };
            let _ = writeln!(s, "{label:<11} {format:<10} {why}");
        }
        if let Some(t) = self.read_time {
            let _ = writeln!(s, "read time   {:.3} ms (fastest of the runs)", t.as_secs_f64() * 1e3);
        }
        s
    }
}
