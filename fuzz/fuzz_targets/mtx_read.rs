//! The Matrix Market reader on arbitrary bytes: never panics; whatever reads builds a valid
//! CSR tensor (or a typed error, e.g. when it is too large) whose dense form matches.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nm_format::io::parse_mtx;
use nm_format::{Duplicates, Format, Tensor};

fuzz_target!(|data: &[u8]| {
    let Ok(m) = parse_mtx::<f64>(data) else { return };
    assert!(m.data.coords[0].iter().all(|&r| r < m.header.rows));
    assert!(m.data.coords[1].iter().all(|&c| c < m.header.cols));
    // Keep the fuzzer from spending its time on huge (but legitimate) allocations: a CSR
    // stores one `pos` entry per row even when the matrix has no columns.
    if m.header.rows.saturating_mul(m.header.cols) > 1 << 16 || m.header.rows + m.header.cols > 1 << 16 {
        return;
    }
    let Ok(csr) = Tensor::from_coordinates(&m.data, &Format::csr(), Duplicates::Sum) else { return };
    let csc = csr.convert(&Format::csc()).expect("CSR converts to CSC");
    let (a, b) = (csr.to_dense().unwrap(), csc.to_dense().unwrap());
    assert!(a.iter().zip(&b).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()) || *x == 0.0 || *y == 0.0));
});
