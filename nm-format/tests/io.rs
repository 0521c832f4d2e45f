//! Matrix Market and FROSTT readers and writers: round trips, every header variant, and a
//! line-numbered error for each kind of malformed file.

use nm_format::generate::{Values, uniform};
use nm_format::io::{MtxField, MtxLayout, MtxSymmetry, parse_mtx, parse_tns, read_mtx, read_tensor, write_tensor};
use nm_format::{CoordinateList, Duplicates, Format, IoError, Tensor};

fn dense_of(text: &str) -> (Vec<usize>, Vec<f64>) {
    let m = parse_mtx::<f64>(text.as_bytes()).unwrap();
    let t = Tensor::from_coordinates(&m.data, &Format::csr(), Duplicates::Sum).unwrap();
    (t.shape().to_vec(), t.to_dense().unwrap())
}

/// The line number and message of a parse error.
fn parse_error(result: Result<impl std::fmt::Debug, IoError>) -> (usize, String) {
    match result.unwrap_err() {
        IoError::Parse { line, message, .. } => (line, message),
        other => panic!("expected a parse error, got {other}"),
    }
}

/// Each case `(text, line, needle)` must fail at `line` with a message containing `needle`.
fn check_errors(cases: &[(&str, usize, &str)], parse: impl Fn(&str) -> Result<(), IoError>) {
    for &(text, line, needle) in cases {
        let (got_line, message) = parse_error(parse(text));
        assert_eq!(got_line, line, "{text:?}: {message}");
        assert!(message.contains(needle), "{text:?}: `{message}` lacks `{needle}`");
    }
}

#[test]
fn coordinate_general_real() {
    let text = "%%MatrixMarket matrix coordinate real general\n% a comment\n\n2 3 3\n1 1 1.5\n2 3 -2e1\n1 2 3\n";
    let m = parse_mtx::<f64>(text.as_bytes()).unwrap();
    assert_eq!(
        (m.header.layout, m.header.field, m.header.symmetry),
        (MtxLayout::Coordinate, MtxField::Real, MtxSymmetry::General)
    );
    assert_eq!((m.header.rows, m.header.cols, m.header.stored), (2, 3, 3));
    assert_eq!(dense_of(text), (vec![2, 3], vec![1.5, 3.0, 0.0, 0.0, 0.0, -20.0]));
}

#[test]
fn symmetric_pattern_and_skew_are_expanded() {
    let sym = "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 3\n1 1\n2 1\n3 2\n";
    assert_eq!(dense_of(sym).1, vec![1., 1., 0., 1., 0., 1., 0., 1., 0.]);
    let skew = "%%MatrixMarket matrix coordinate integer skew-symmetric\n2 2 1\n2 1 4\n";
    assert_eq!(dense_of(skew).1, vec![0., -4., 4., 0.]);
    let real_sym = "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 2.5\n2 1 -1\n";
    assert_eq!(dense_of(real_sym).1, vec![2.5, -1.0, -1.0, 0.0]);
}

#[test]
fn array_layout_is_column_major() {
    let general = "%%MatrixMarket matrix array real general\n2 3\n1\n2\n3\n4\n5\n0\n";
    assert_eq!(dense_of(general), (vec![2, 3], vec![1., 3., 5., 2., 4., 0.]));
    let sym = "%%MatrixMarket matrix array real symmetric\n2 2\n1\n2\n3\n";
    assert_eq!(dense_of(sym).1, vec![1., 2., 2., 3.]);
    let skew = "%%MatrixMarket matrix array integer skew-symmetric\n3 3\n1\n2\n3\n";
    assert_eq!(dense_of(skew).1, vec![0., -1., -2., 1., 0., -3., 2., 3., 0.]);
}

#[test]
fn duplicates_are_summed_when_built() {
    let text = "%%MatrixMarket matrix coordinate real general\n1 1 2\n1 1 1\n1 1 2\n";
    assert_eq!(dense_of(text).1, vec![3.0]);
}

#[test]
fn malformed_files_name_the_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("", 1, "empty file"),
        ("%%MatrixMarket matrix coordinate real\n1 1 0\n", 1, "found 4 words"),
        ("%MatrixMarket matrix coordinate real general\n1 1 0\n", 1, "banner"),
        ("%%MatrixMarket vector coordinate real general\n1 1 0\n", 1, "only `matrix`"),
        ("%%MatrixMarket matrix coordinate complex general\n1 1 0\n", 1, "complex"),
        ("%%MatrixMarket matrix array pattern general\n1 1\n", 1, "pattern"),
        ("%%MatrixMarket matrix coordinate real general\n% only comments\n", 3, "before the size line"),
        ("%%MatrixMarket matrix coordinate real general\n2 x 1\n", 2, "expected the number of columns, found `x`"),
        ("%%MatrixMarket matrix coordinate real general\n2 2\n", 2, "expected the number of entries"),
        ("%%MatrixMarket matrix coordinate real symmetric\n2 3 0\n", 2, "cannot be symmetric"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1\n2 2 2\n", 5, "file ends after 2 entries"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1\n2 2 2\n", 4, "entry 2 is beyond"),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n3 1 2\n",
            4,
            "row index 3 is out of range 1..=2",
        ),
        ("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n1 0 2\n", 4, "column index 0 is out of range"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 abc\n", 3, "expected a value, found `abc`"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1\n", 3, "expected a value, found end of line"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1 7\n", 3, "unexpected `7`"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1.5 1 1\n", 3, "expected a row index, found `1.5`"),
        ("%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 1.5\n", 3, "expected an integer value"),
        ("%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n1 1 1\n", 3, "diagonal"),
        ("%%MatrixMarket matrix array real general\n2 1\n1\n", 4, "file ends after 1 entries"),
    ];
    check_errors(cases, |text| parse_mtx::<f64>(text.as_bytes()).map(|_| ()));
}

#[test]
fn errors_deep_in_a_large_file_have_the_right_line() {
    // Large enough to be split into several parallel chunks.
    let mut text = String::from("%%MatrixMarket matrix coordinate real general\n% comment\n1000 1000 200000\n");
    for e in 0..200_000 {
        if e == 150_000 {
            text.push_str("1 1 oops\n");
        } else {
            text.push_str(&format!("{} {} 1.25\n", e % 1000 + 1, e / 1000 + 1));
        }
    }
    let (line, message) = parse_error(parse_mtx::<f64>(text.as_bytes()));
    assert_eq!(line, 3 + 150_000 + 1, "{message}");
}

#[test]
fn mtx_write_then_read_is_exact() {
    let dir = tempdir();
    let list = uniform::<f64>(&[37, 23], 0.2, Values::Uniform, 7);
    let t = Tensor::from_coordinates(&list, &Format::csc(), Duplicates::Reject).unwrap();
    let path = dir.join("a.mtx");
    write_tensor(&path, &t).unwrap();
    let back: Tensor<f64> = read_tensor(&path, "csc").unwrap();
    assert_eq!(back, t);
    // Tiny and huge magnitudes survive too.
    let mut list = nm_format::CoordinateList::new(vec![1, 3]);
    list.push(&[0, 0], 1e-300);
    list.push(&[0, 1], -3.5e200);
    list.push(&[0, 2], 0.1 + 0.2);
    let t = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Reject).unwrap();
    write_tensor(&path, &t).unwrap();
    assert_eq!(read_tensor::<f64>(&path, "csr").unwrap(), t);
    // Read as f32, -3.5e200 is out of range: an error naming the line, not an infinity.
    let e = read_mtx::<f32>(&path).unwrap_err().to_string();
    assert!(e.contains("line 5") && e.contains("overflows f32"), "{e}");
}

#[test]
fn tns_write_then_read_is_exact() {
    let dir = tempdir();
    let list = uniform::<f64>(&[5, 6, 7, 3], 0.1, Values::SmallIntegers(9), 3);
    let t = Tensor::from_coordinates(&list, &Format::csf(4), Duplicates::Reject).unwrap();
    let path = dir.join("t.tns");
    write_tensor(&path, &t).unwrap();
    assert_eq!(read_tensor::<f64>(&path, "csf").unwrap(), t);
    // An empty tensor: its shape comment is all there is, and it is read back (it was refused
    // as "no components", so an empty result the command wrote could not be read again).
    for format in ["csf", "coo", "dense", "dsd"] {
        let empty = Tensor::from_coordinates(
            &CoordinateList::<f64>::new(vec![4, 0, 2]),
            &Format::parse(format, 3).unwrap(),
            Duplicates::Reject,
        )
        .unwrap();
        write_tensor(&path, &empty).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "# shape 4 0 2\n", "{format}");
        let back = read_tensor::<f64>(&path, format).unwrap();
        assert_eq!((back.shape(), back.stored_len()), (&[4, 0, 2][..], 0), "{format}");
    }
    let list = parse_tns::<f64>(b"# an empty matrix\n# shape 3 5\n\n").unwrap();
    assert_eq!((list.shape.as_slice(), list.len()), (&[3, 5][..], 0));
    // Without a shape comment the shape is the largest coordinate.
    let list = parse_tns::<f64>(b"# no shape\n1 2 3 1.0\n2 1 1 -2\n").unwrap();
    assert_eq!(list.shape, vec![2, 2, 3]);
    assert_eq!(list.coords, vec![vec![0, 1], vec![1, 0], vec![2, 0]]);
}

#[test]
fn malformed_tns_names_the_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("", 1, "no components"),
        ("# a comment\n", 1, "no components"),
        ("# shape\n", 1, "one size per dimension"),
        ("# shape 2 x\n", 1, "one size per dimension"),
        ("# c\n1\n", 2, "found 1 field"),
        ("1 2 3.0\n1 x 2.0\n", 2, "expected coordinate 2"),
        ("1 2 3.0\n0 1 2.0\n", 2, "start at 1"),
        ("1 2 3.0\n1 1\n", 2, "expected a value after 2 coordinates"),
        ("1 2 3.0\n1 1 2 4\n", 2, "unexpected `4`"),
        ("1 2 3.0\n1 1 zz\n", 2, "expected a value, found `zz`"),
        ("# shape 1 1\n1 2 3.0\n", 1, "beyond the declared shape"),
        ("# shape 1\n1 2 3.0\n", 1, "must list 2 sizes"),
    ];
    check_errors(cases, |text| parse_tns::<f64>(text.as_bytes()).map(|_| ()));
}

#[test]
fn file_errors_name_the_file() {
    let e = read_mtx::<f64>("/nonexistent/x.mtx").unwrap_err();
    assert!(e.to_string().starts_with("/nonexistent/x.mtx: "), "{e}");
    let dir = tempdir();
    let path = dir.join("bad.mtx");
    std::fs::write(&path, "%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 q\n").unwrap();
    let e = read_mtx::<f64>(&path).unwrap_err();
    assert_eq!(e.to_string(), format!("{}: line 3: expected a value, found `q`", path.display()));
    let e = read_tensor::<f64>(dir.join("x.csv"), "csr").unwrap_err();
    assert!(e.to_string().contains("unknown file type"), "{e}");
}

#[test]
fn writing_an_nm_tensor_writes_its_nonzeros() {
    let dir = tempdir();
    let list = nm_format::generate::nm_vectorwise::<f64>(8, 6, 2, 4, 3, Values::SmallIntegers(3), 1);
    let csr = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Reject).unwrap();
    let nm = csr.convert(&Format::parse("nm(2,4,3)", 2).unwrap()).unwrap();
    let path = dir.join("nm.mtx");
    write_tensor(&path, &nm).unwrap();
    let back: Tensor<f64> = read_tensor(&path, "csr").unwrap();
    assert_eq!(back, csr);
    let e = write_tensor(
        dir.join("x.mtx"),
        &Tensor::from_coordinates(
            &uniform::<f64>(&[2, 2, 2], 0.5, Values::Uniform, 1),
            &Format::csf(3),
            Duplicates::Reject,
        )
        .unwrap(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("write .tns"), "{e}");
}

#[test]
fn explicit_zeros_of_sparse_formats_are_written() {
    // A CSR or DCSR matrix stores a zero only when someone put it there (a product whose terms
    // cancel): it is data, and written. A dense level under the last compressed one (BCSR's
    // blocks) stores zeros nobody asked for: those are not.
    let dir = tempdir();
    let list = nm_format::CoordinateList {
        shape: vec![3, 4],
        coords: vec![vec![0, 0, 2], vec![1, 3, 2]],
        values: vec![2.0, 0.0, -1.0],
    };
    for format in [Format::csr(), Format::csf(2), Format::csc()] {
        let t = Tensor::<f64>::from_coordinates(&list, &format, Duplicates::Reject).unwrap();
        let path = dir.join("zeros.mtx");
        write_tensor(&path, &t).unwrap();
        let back: Tensor<f64> = read_tensor(&path, &format.to_string()).unwrap();
        assert_eq!(back.stored_len(), 3, "{format}");
        assert_eq!(back, t, "{format}");
    }
    let blocked =
        Tensor::<f64>::from_coordinates(&list, &Format::parse("bcsr(2)", 2).unwrap(), Duplicates::Reject).unwrap();
    let path = dir.join("blocked.mtx");
    write_tensor(&path, &blocked).unwrap();
    let back: Tensor<f64> = read_tensor(&path, "csr").unwrap();
    assert_eq!(back.stored_len(), 2);
}

/// A fresh directory under the target dir (no tempfile dependency needed for this).
fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir =
        std::env::temp_dir().join(format!("nm-format-io-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_tall_empty_array_reads_and_densifies_without_touching_every_row() {
    // Found by the mtx_read fuzz target (as 111111113 × 0): densifying walked every position of
    // the dense row level with materialized arrays. Dense levels now cost no memory to walk.
    let text = "%%MatrixMarket matrix array real general\n%c\n10000000 0\n";
    let m = parse_mtx::<f64>(text.as_bytes()).unwrap();
    assert_eq!((m.header.rows, m.header.cols, m.data.len()), (10_000_000, 0, 0));
    let csr = Tensor::from_coordinates(&m.data, &Format::csr(), Duplicates::Sum).unwrap();
    assert!(csr.to_dense().unwrap().is_empty());
    assert_eq!(csr.convert(&Format::csc()).unwrap().stored_len(), 0);
}

#[test]
fn dense_matrices_are_written_as_column_major_arrays() {
    let dir = tempdir();
    let dense = [1.0f64, 0.0, 2.5, -3.0, 0.0, 4.0];
    let t = Tensor::from_dense(&[2, 3], &dense, &Format::dense(2)).unwrap();
    let path = dir.join("dense.mtx");
    write_tensor(&path, &t).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('%')).collect();
    assert!(text.starts_with("%%MatrixMarket matrix array real general\n"), "{text}");
    // Column by column: (0,0) (1,0) (0,1) (1,1) (0,2) (1,2).
    assert_eq!(body, ["2 3", "1", "-3", "0", "0", "2.5", "4"]);
    let back: Tensor<f64> = read_tensor(&path, "dense").unwrap();
    assert_eq!(back.to_dense().unwrap(), dense);
}
