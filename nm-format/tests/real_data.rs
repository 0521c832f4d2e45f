//! The readers on the real matrices of `../shared/data` (when present; skipped with a message
//! on a checkout without it): shapes and expanded nonzero counts match the data manifest,
//! and CSR→CSC→CSR is exact.

use std::path::PathBuf;

use nm_format::io::{MtxOptions, read_mtx, read_mtx_with};
use nm_format::{Duplicates, Format, Tensor};

fn data_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("NMSPARSE_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    dir.join("manifest.json").exists().then_some(dir)
}

#[test]
fn shared_matrices_match_their_manifest() {
    let Some(dir) = data_dir() else {
        // Written to the stderr handle, not through eprintln!, so the test harness shows it.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "real_data: skipped: no shared/data beside the checkout (set NMSPARSE_DATA to point at one)"
        );
        return;
    };
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let mut checked = 0;
    for entry in manifest.as_array().unwrap() {
        let name = entry["name"].as_str().unwrap();
        if !name.ends_with(".mtx") {
            continue;
        }
        let path = dir.join("matrices").join(name);
        // EVA.mtx is declared symmetric but stores entries on both sides of the diagonal: an
        // error, unless asked to read it as scipy does (as the manifest counts it).
        let m = match read_mtx::<f64>(&path) {
            Err(e) if name == "EVA.mtx" && e.to_string().contains("above the diagonal") => {
                read_mtx_with::<f64>(&path, MtxOptions { both_triangles: true }).unwrap_or_else(|e| panic!("{e}"))
            }
            other => other.unwrap_or_else(|e| panic!("{e}")),
        };
        let expect = |k: &str| entry[k].as_u64().unwrap() as usize;
        assert_eq!(
            (m.header.rows, m.header.cols, m.header.stored),
            (expect("rows"), expect("cols"), expect("stored")),
            "{name}"
        );
        // The manifest counts distinct entries after expansion (a few files store both
        // triangles of a symmetric matrix, which expansion turns into summed duplicates).
        let csr = Tensor::from_coordinates(&m.data, &Format::csr(), Duplicates::Sum).unwrap();
        assert_eq!(csr.stored_len(), expect("nnz"), "{name}");
        let csc = csr.convert(&Format::csc()).unwrap();
        // Conversion carries nonzeros, not explicit zeros (some files store a few).
        let nonzeros = csr.convert(&Format::csr()).unwrap();
        assert_eq!(csc.count_nonzeros(), csr.count_nonzeros(), "{name}");
        assert!(csc.convert(&Format::csr()).unwrap() == nonzeros, "{name}: CSR→CSC→CSR differs");
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} matrices in the manifest");
}
