//! Property tests: conversions between formats are exact, and N:M formats round-trip data
//! that fits their pattern. Every result is compared with a dense array built independently
//! from the coordinate list.

use nm_format::strategy::{any_format, coordinate_list, nm_format};
use nm_format::{CoordinateList, Duplicates, Format, LevelExpr, LevelKind, Tensor, TensorError};
use proptest::prelude::*;

/// The dense row-major array of a coordinate list, computed without nm-format's storage code.
fn reference_dense(list: &CoordinateList<f64>) -> Vec<f64> {
    let total: usize = list.shape.iter().product();
    let mut dense = vec![0.0; total];
    for e in 0..list.len() {
        let mut linear = 0;
        for d in 0..list.shape.len() {
            linear = linear * list.shape[d] + list.coords[d][e];
        }
        dense[linear] += list.values[e];
    }
    dense
}

fn order_and_formats() -> impl Strategy<Value = (CoordinateList<f64>, Format, Format)> {
    (1usize..=4).prop_flat_map(|order| {
        let max = if order <= 2 { 9 } else { 4 };
        (coordinate_list(order, max), any_format(order), any_format(order))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn convert_there_and_back_is_exact((list, a, b) in order_and_formats()) {
        let reference = reference_dense(&list);
        let ta = Tensor::from_coordinates(&list, &a, Duplicates::Reject).unwrap();
        prop_assert_eq!(ta.to_dense().unwrap(), reference.clone());
        let tb = ta.convert(&b).unwrap();
        prop_assert_eq!(tb.format(), &b);
        prop_assert_eq!(tb.to_dense().unwrap(), reference.clone());
        let back = tb.convert(&a).unwrap();
        prop_assert_eq!(&back, &ta);
        // Storage order iteration visits every component once, with its value.
        let mut from_iter = vec![0.0; reference.len()];
        for (coords, v) in tb.iter() {
            let mut linear = 0;
            for d in 0..coords.len() {
                linear = linear * list.shape[d] + coords[d];
            }
            from_iter[linear] += v;
        }
        prop_assert_eq!(from_iter, reference);
    }

    #[test]
    fn raw_arrays_of_a_valid_tensor_are_accepted((list, a, _b) in order_and_formats()) {
        let t = Tensor::from_coordinates(&list, &a, Duplicates::Reject).unwrap();
        let (shape, format, levels, values) = t.clone().into_raw();
        prop_assert_eq!(Tensor::from_raw(shape, format, levels, values).unwrap(), t);
    }

    #[test]
    fn format_text_reads_back(order in 1usize..=4, seed in any::<u64>()) {
        let mut runner = proptest::test_runner::TestRunner::new_with_rng(
            ProptestConfig::default(), proptest::test_runner::TestRng::from_seed(
                proptest::test_runner::RngAlgorithm::ChaCha, &seed_bytes(seed)));
        let f = any_format(order).new_tree(&mut runner).unwrap().current();
        prop_assert_eq!(Format::parse(&f.to_string(), order).unwrap(), f);
    }

    #[test]
    fn fitting_nm_data_round_trips(format in nm_format(), rows in 0usize..13, cols in 0usize..13, seed in any::<u64>()) {
        let list = fitting_list(&format, rows, cols, seed);
        let reference = reference_dense(&list);
        let csr = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Reject).unwrap();
        let nm = csr.convert(&format).unwrap();
        prop_assert_eq!(nm.to_dense().unwrap(), reference.clone());
        prop_assert_eq!(nm.convert(&Format::csr()).unwrap(), csr);
        prop_assert_eq!(nm.format().to_string().is_empty(), false);
        prop_assert_eq!(Format::parse(&nm.format().to_string(), 2).unwrap(), format.clone());
        if format.name().is_some_and(|n| n.starts_with("nm(")) {
            let parts = nm.nm_parts().unwrap();
            prop_assert_eq!(Tensor::from_nm_parts(&parts).unwrap(), nm);
        }
    }

    #[test]
    fn nm_conversion_fails_exactly_when_a_block_is_too_full(format in nm_format(), list in coordinate_list(2, 12)) {
        let csr = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Reject).unwrap();
        let overfull = overfull_block(&format, &list);
        match csr.convert(&format) {
            Ok(t) => {
                prop_assert!(!overfull, "converted data with an over-full block");
                prop_assert_eq!(t.to_dense().unwrap(), reference_dense(&list));
            }
            Err(TensorError::DoesNotFitPattern { .. }) => prop_assert!(overfull, "refused data that fits"),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
        // Pruning always fits, keeps a subset, and reports what it dropped.
        let (pruned, report) = csr.prune(&format).unwrap();
        let dense = pruned.to_dense().unwrap();
        let original = reference_dense(&list);
        let kept = dense.iter().filter(|&&v| v != 0.0).count();
        prop_assert_eq!(kept + report.dropped, list.len());
        prop_assert_eq!(report.kept, kept);
        prop_assert!(dense.iter().zip(&original).all(|(p, o)| *p == 0.0 || p == o));
        prop_assert_eq!(report.dropped == 0, !overfull);
    }
}

fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[..8].copy_from_slice(&seed.to_le_bytes());
    b
}

/// (n, m, l, vector-wise) of one of the N:M formats the strategy makes.
fn nm_shape(format: &Format) -> (usize, usize, usize, bool) {
    let levels = format.levels();
    let s = levels.iter().find(|l| matches!(l.kind, LevelKind::Structured { .. })).unwrap();
    let LevelKind::Structured { n, m } = s.kind else { unreachable!() };
    match levels.last().unwrap().expr {
        LevelExpr::Mod(1, l) => (n as usize, m as usize, l, true),
        _ => (n as usize, m as usize, 1, false),
    }
}

/// A random matrix that fits the format, from the crate's generators.
fn fitting_list(format: &Format, rows: usize, cols: usize, seed: u64) -> CoordinateList<f64> {
    use nm_format::generate::{Values, nm_elementwise, nm_vectorwise};
    let (n, m, l, vector) = nm_shape(format);
    if vector {
        nm_vectorwise(rows, cols, n, m, l, Values::SmallIntegers(5), seed)
    } else {
        nm_elementwise(rows, cols, n, m, Values::SmallIntegers(5), seed)
    }
}

/// Brute force: is some block of the pattern holding more than N nonzero vectors?
fn overfull_block(format: &Format, list: &CoordinateList<f64>) -> bool {
    let (n, m, l, vector) = nm_shape(format);
    let dense = reference_dense(list);
    let (rows, cols) = (list.shape[0], list.shape[1]);
    let at = |i: usize, j: usize| dense[i * cols + j] != 0.0;
    if vector {
        (0..rows.div_ceil(m)).any(|w| {
            (0..cols.div_ceil(l)).any(|g| {
                let used = (w * m..(w * m + m).min(rows))
                    .filter(|&i| (g * l..(g * l + l).min(cols)).any(|j| at(i, j)))
                    .count();
                used > n
            })
        })
    } else {
        (0..rows)
            .any(|i| (0..cols.div_ceil(m)).any(|b| (b * m..(b * m + m).min(cols)).filter(|&j| at(i, j)).count() > n))
    }
}

#[test]
fn f32_tensors_convert_like_f64_ones() {
    use nm_format::generate::{Values, nm_elementwise};
    let list = nm_elementwise::<f32>(9, 14, 2, 4, Values::SmallIntegers(7), 11);
    let csr = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Reject).unwrap();
    let nv24 = csr.convert(&Format::nv24(2)).unwrap();
    assert_eq!(nv24.shape(), &[9, 14]);
    assert_eq!(nv24.stored_len(), 9 * 16 / 2);
    assert_eq!(nv24.to_dense().unwrap(), csr.to_dense().unwrap());
    let as_f64: Vec<f64> = nv24.to_dense().unwrap().into_iter().map(f64::from).collect();
    let list64 = CoordinateList {
        shape: list.shape.clone(),
        coords: list.coords.clone(),
        values: list.values.iter().map(|&v| v as f64).collect(),
    };
    assert_eq!(as_f64, reference_dense(&list64));
    assert_eq!(nv24.convert(&Format::csr()).unwrap(), csr);
}
