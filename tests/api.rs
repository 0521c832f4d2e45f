//! The Rust API: a sparse result through the C back end, and the errors of each stage.

use nmsparse::format::generate::{Values, uniform};
use nmsparse::format::{Duplicates, Format, Tensor};
use nmsparse::{Backend, Error, Program};

#[test]
fn a_csr_sum_through_the_c_back_end() {
    let (m, n) = (30, 20);
    let b = Tensor::from_coordinates(
        &uniform::<f64>(&[m, n], 0.2, Values::SmallIntegers(9), 1),
        &Format::csr(),
        Duplicates::Reject,
    )
    .unwrap();
    let c = Tensor::from_coordinates(
        &uniform::<f64>(&[m, n], 0.2, Values::SmallIntegers(9), 2),
        &Format::csr(),
        Duplicates::Reject,
    )
    .unwrap();
    let kernel = Program::new("A(i,j) = B(i,j) + C(i,j)")
        .unwrap()
        .tensor("A", &[m, n], "csr")
        .unwrap()
        .tensor("B", &[m, n], "csr")
        .unwrap()
        .tensor("C", &[m, n], "csr")
        .unwrap()
        .compile::<f64>(Backend::Jit)
        .unwrap();
    let a = kernel.run(&[("B", &b), ("C", &c)]).unwrap();
    assert_eq!(a.format(), &Format::csr());
    let (db, dc) = (b.to_dense().unwrap(), c.to_dense().unwrap());
    let expected: Vec<f64> = db.iter().zip(&dc).map(|(x, y)| x + y).collect();
    assert_eq!(a.to_dense().unwrap(), expected);
}

#[test]
fn each_stage_reports_its_own_error() {
    let e = Program::new("y(i) = A(i,j) *").unwrap_err();
    assert!(matches!(e, Error::Parse(_)), "{e}");
    let e = Program::new("y(i) = A(i,j) * x(j)").unwrap().tensor("A", &[3, 4], "csx").unwrap_err();
    assert!(matches!(e, Error::Format(_)), "{e}");
    let p = Program::new("y(i) = A(i,j) * x(j)")
        .unwrap()
        .tensor("A", &[3, 4], "csr")
        .unwrap()
        .tensor("y", &[3], "dense")
        .unwrap();
    assert!(matches!(p.compile::<f64>(Backend::Interp), Err(Error::Semantic(_))));
    let p = p.tensor("x", &[4], "dense").unwrap();
    let e = p.clone().schedule("reorder(i, q)").compile::<f64>(Backend::Interp).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::Schedule(_)), "{e}");
    // CSC is walked column by column by default; forced row by row, lowering refuses it.
    let csc = p.clone().tensor("A", &[3, 4], "csc").unwrap();
    assert!(csc.clone().compile::<f64>(Backend::Interp).is_ok());
    let e = csc.schedule("reorder(i, j)").compile::<f64>(Backend::Interp).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::Lower(_)), "{e}");
    let kernel = p.compile::<f64>(Backend::Interp).unwrap();
    let a = Tensor::from_dense(&[3, 4], &[0.0; 12], &Format::csr()).unwrap();
    let e = kernel.run(&[("A", &a)]).unwrap_err();
    assert_eq!(e.to_string(), "no tensor given for `x`");
}
