//! `TensorView`: foreign arrays read in place are checked as owned ones are.

use nm_format::{Format, IndicesView, LevelView, Tensor, TensorError, TensorView};

#[test]
fn a_view_of_valid_arrays_reads_them_in_place() {
    let (pos, crd, values) = ([0u32, 2, 3], [0u32, 2, 1], [1.0, 2.0, 3.0]);
    let levels = vec![
        LevelView::Dense { size: 2 },
        LevelView::Compressed { pos: IndicesView::U32(&pos), crd: IndicesView::U32(&crd) },
    ];
    let csr = Format::csr();
    let view = TensorView::new(&[2, 3], &csr, levels, &values).expect("valid CSR");
    assert_eq!(view.values().as_ptr(), values.as_ptr());
    assert!(view.tensor().is_none());
    let owned = view.to_tensor().into_owned();
    assert_eq!(owned.to_dense().unwrap(), vec![1.0, 0.0, 2.0, 0.0, 3.0, 0.0]);
    let again = owned.view();
    assert!(std::ptr::eq(again.tensor().expect("a view of a tensor"), &owned));
    assert_eq!(again.levels(), owned.levels().iter().map(|l| l.view()).collect::<Vec<_>>().as_slice());
}

#[test]
fn a_view_of_broken_arrays_is_refused_as_from_raw_refuses_them() {
    let values = [1.0f64, 2.0, 3.0];
    let csr = Format::csr();
    let cases: [(&[u64], &[u64]); 4] = [
        (&[0, 2, 3], &[0, 3, 1]), // a coordinate past the size
        (&[0, 2, 3], &[2, 0, 1]), // not sorted
        (&[0, 2, 3], &[1, 1, 1]), // a duplicate
        (&[0, 3, 2], &[0, 1, 2]), // positions decreasing
    ];
    for (pos, crd) in cases {
        let levels = || {
            vec![
                LevelView::Dense { size: 2 },
                LevelView::Compressed { pos: IndicesView::U64(pos), crd: IndicesView::U64(crd) },
            ]
        };
        let by_view = TensorView::new(&[2, 3], &csr, levels(), &values).unwrap_err();
        let owned_levels = levels().iter().map(|l| l.to_storage()).collect();
        let by_raw = Tensor::from_raw(vec![2, 3], Format::csr(), owned_levels, values.to_vec()).unwrap_err();
        assert_eq!(by_view, by_raw);
    }
    let dense = Format::dense(2);
    let short = TensorView::new(&[2, 3], &dense, [LevelView::Dense { size: 2 }, LevelView::Dense { size: 3 }], &values);
    assert!(matches!(short, Err(TensorError::ValuesLength { expected: 6, actual: 3 })));
}
