//! Snapshot tests: the loop IR and the generated C of SpMV and SpGEMM, compared with the files
//! in `tests/snapshots/`. A change to lowering shows up here as a readable diff; after checking
//! it, `NMSPARSE_BLESS=1 cargo test -p nm-lower --test snapshots` rewrites the files.

use std::path::PathBuf;

use nm_format::Format;
use nm_ir::concrete::{concretize, parse_schedule};
use nm_ir::notation::{Declarations, TensorType, parse};
use nm_lower::c::emit;
use nm_lower::ir::ElemType;
use nm_lower::lower::lower;

fn lowered(expr: &str, schedule: &str, decls: Declarations) -> nm_lower::ir::Function {
    let stmt = parse(expr).unwrap();
    let types = stmt.check(&decls).unwrap();
    let mut cin = concretize(&stmt);
    if !schedule.is_empty() {
        cin = cin.schedule(&parse_schedule(schedule).unwrap()).unwrap();
    }
    lower(&cin, &types, ElemType::F64).unwrap().function
}

/// Compares `text` with the snapshot `name`, or rewrites it under `NMSPARSE_BLESS`.
fn check(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(name);
    if std::env::var_os("NMSPARSE_BLESS").is_some() {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with NMSPARSE_BLESS=1 to create it)", path.display()));
    if expected != text {
        let first = expected.lines().zip(text.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "{} differs from the lowering, first at line {}:\n  expected: {}\n  got:      {}\n\
             (check the change, then NMSPARSE_BLESS=1 cargo test -p nm-lower --test snapshots)",
            path.display(),
            first + 1,
            expected.lines().nth(first).unwrap_or(""),
            text.lines().nth(first).unwrap_or("")
        );
    }
}

/// CSR SpMV.
fn spmv() -> nm_lower::ir::Function {
    lowered(
        "y(i) = A(i,j) * x(j)",
        "",
        Declarations::new()
            .tensor("y", TensorType::dense(&[1000]))
            .tensor("A", TensorType::sparse(&[1000, 800], Format::csr()))
            .tensor("x", TensorType::dense(&[800])),
    )
}

/// Gustavson SpGEMM, CSR × CSR → CSR, with `n` columns.
fn spgemm(n: usize) -> nm_lower::ir::Function {
    lowered(
        "C(i,j) = A(i,k) * B(k,j)",
        "reorder(k, j)",
        Declarations::new()
            .tensor("C", TensorType::sparse(&[1000, n], Format::csr()))
            .tensor("A", TensorType::sparse(&[1000, 800], Format::csr()))
            .tensor("B", TensorType::sparse(&[800, n], Format::csr())),
    )
}

#[test]
fn spmv_csr() {
    let f = spmv();
    check("spmv_csr.loops", &f.to_string());
    check("spmv_csr.c", &emit(&f));
}

#[test]
fn spgemm_csr_gustavson() {
    // Rows of 900: no list of coordinates, the marks read back.
    let f = spgemm(900);
    check("spgemm_csr.loops", &f.to_string());
    check("spgemm_csr.c", &emit(&f));
    // Rows of 9,000: listed or only marked, as the row before was short or long.
    check("spgemm_csr_wide.loops", &spgemm(9000).to_string());
}

/// SpMM and SDDMM read a dense row per stored entry: the rows `DISTANCE` entries ahead are
/// prefetched (see `nm_lower::prefetch`); SpMV and SpGEMM have no such rows.
#[test]
fn spmm_and_sddmm_prefetch_rows_ahead() {
    let spmm = lowered(
        "C(i,j) = A(i,k) * B(k,j)",
        "reorder(k, j)",
        Declarations::new()
            .tensor("C", TensorType::dense(&[1000, 64]))
            .tensor("A", TensorType::sparse(&[1000, 800], Format::csr()))
            .tensor("B", TensorType::dense(&[800, 64])),
    );
    check("spmm_csr.loops", &spmm.to_string());
    let sddmm = lowered(
        "C(i,j) = A(i,j) * X(i,k) * Y(j,k)",
        "",
        Declarations::new()
            .tensor("C", TensorType::sparse(&[1000, 900], Format::csr()))
            .tensor("A", TensorType::sparse(&[1000, 900], Format::csr()))
            .tensor("X", TensorType::dense(&[1000, 64]))
            .tensor("Y", TensorType::dense(&[900, 64])),
    );
    let text = sddmm.to_string();
    assert!(text.contains("prefetch Y_vals[") && !text.contains("prefetch X_vals["), "{text}");
    for f in [spmv(), spgemm(900)] {
        assert!(!f.to_string().contains("prefetch"), "{f}");
    }
}

/// Outer-product SpGEMM (`reorder(k, i, j)`, CSC × CSR → CSR): each product inserted into the
/// sparse workspace (the bucket of its row, or the dense array once `auto` turned dense), one
/// `finish` compressing it into the result; the buckets of the rows ahead in A's columns are
/// prefetched, the head further ahead than the tail (whose address the head holds).
#[test]
fn spgemm_outer_product_through_a_workspace() {
    let f = lowered(
        "C(i,j) = A(i,k) * B(k,j)",
        "reorder(k, i, j)",
        Declarations::new()
            .tensor("C", TensorType::sparse(&[1000, 900], Format::csr()))
            .tensor("A", TensorType::sparse(&[1000, 800], Format::csc()))
            .tensor("B", TensorType::sparse(&[800, 900], Format::csr())),
    );
    let text = f.to_string();
    let (head, tail) = (text.find("prefetch head of C_ws bucket"), text.find("prefetch tail of C_ws bucket"));
    assert!(head.is_some() && tail.is_some(), "{text}");
    assert!(text.contains("A1_crd[A1_p0 + 16]") && text.contains("A1_crd[A1_p0 + 8]"), "{text}");
    check("spgemm_outer.loops", &text);
    check("spgemm_outer.c", &emit(&f));
}

/// 2-D convolution of a CSR image, `O(i,j) = I(i+r, j+q) * F(r,q)`, in the default order
/// (`i, r, q, j`: the row `i + r` located, `q`'s windows over it, each entry mapped back to
/// `j = crd - q`) and output-stationary (`i, j, r, q`: one window start per row the filter
/// reaches, the `j` with an entry in some row's window visited).
#[test]
fn convolution_by_subsections() {
    let decls = || {
        Declarations::new()
            .tensor("O", TensorType::dense(&[97, 97]))
            .tensor("I", TensorType::sparse(&[99, 99], Format::csr()))
            .tensor("F", TensorType::dense(&[3, 3]))
    };
    let by_rows = lowered("O(i,j) = I(i+r, j+q) * F(r,q)", "reorder(i,r,q,j)", decls());
    check("conv2d_csr.loops", &by_rows.to_string());
    let output_stationary = lowered("O(i,j) = I(i+r, j+q) * F(r,q)", "reorder(i,j,r,q)", decls());
    check("conv2d_csr_output_stationary.loops", &output_stationary.to_string());
}
