//! Every invariant violation on every way in is rejected with the error that names it.

use nm_format::{CoordinateList, Duplicates, Format, Indices, LevelKind, LevelStorage, Metadata, Tensor, TensorError};

fn csr(pos: Vec<u32>, crd: Vec<u32>, values: Vec<f64>) -> Result<Tensor<f64>, TensorError> {
    let levels = vec![LevelStorage::Dense { size: 3 }, LevelStorage::Compressed { pos: pos.into(), crd: crd.into() }];
    Tensor::from_raw(vec![3, 4], Format::csr(), levels, values)
}

#[test]
fn a_valid_csr_is_accepted() {
    let t = csr(vec![0, 2, 2, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0]).unwrap();
    assert_eq!(t.to_dense().unwrap(), vec![1., 0., 2., 0., 0., 0., 0., 0., 0., 3., 0., 0.]);
}

#[test]
fn pos_must_start_at_zero() {
    let e = csr(vec![1, 2, 2, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0]).unwrap_err();
    assert_eq!(e, TensorError::PosStart { level: 1, value: 1 });
}

#[test]
fn pos_must_be_monotone() {
    let e = csr(vec![0, 2, 1, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0]).unwrap_err();
    assert_eq!(e, TensorError::PosNotMonotone { level: 1, position: 2, value: 1, previous: 2 });
    assert!(e.to_string().contains("pos[2] = 1 is less than pos[1] = 2"), "{e}");
}

#[test]
fn pos_length_is_parents_plus_one() {
    let e = csr(vec![0, 2, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0]).unwrap_err();
    assert_eq!(e, TensorError::PosLength { level: 1, expected: 4, actual: 3 });
}

#[test]
fn crd_length_matches_pos() {
    let e = csr(vec![0, 2, 2, 3], vec![0, 2], vec![1.0, 2.0, 3.0]).unwrap_err();
    assert_eq!(e, TensorError::CrdLength { level: 1, expected: 3, actual: 2 });
}

#[test]
fn coordinates_must_be_in_range() {
    let e = csr(vec![0, 2, 2, 3], vec![0, 4, 1], vec![1.0, 2.0, 3.0]).unwrap_err();
    assert_eq!(e, TensorError::CoordinateOutOfRange { level: 1, position: 1, coordinate: 4, size: 4 });
}

#[test]
fn ordered_levels_must_be_sorted() {
    let e = csr(vec![0, 2, 2, 3], vec![2, 0, 1], vec![1.0, 2.0, 3.0]).unwrap_err();
    assert_eq!(e, TensorError::NotSorted { level: 1, position: 1, coordinate: 0, previous: 2 });
}

#[test]
fn unique_levels_must_not_repeat() {
    let e = csr(vec![0, 2, 2, 3], vec![2, 2, 1], vec![1.0, 2.0, 3.0]).unwrap_err();
    assert_eq!(e, TensorError::DuplicateCoordinate { level: 1, position: 1, coordinate: 2 });
    // Unordered but unique: the repeat is found wherever it is.
    let f = Format::parse("(i, j) -> (i : dense, j : compressed(nonordered))", 2).unwrap();
    let levels = vec![
        LevelStorage::Dense { size: 3 },
        LevelStorage::Compressed { pos: vec![0u32, 3, 3, 3].into(), crd: vec![2u32, 0, 2].into() },
    ];
    let e = Tensor::from_raw(vec![3, 4], f.clone(), levels, vec![1.0f64; 3]).unwrap_err();
    assert_eq!(e, TensorError::DuplicateCoordinate { level: 1, position: 2, coordinate: 2 });
    let ok = vec![
        LevelStorage::Dense { size: 3 },
        LevelStorage::Compressed { pos: vec![0u32, 3, 3, 3].into(), crd: vec![2u32, 0, 1].into() },
    ];
    assert!(Tensor::from_raw(vec![3, 4], f, ok, vec![1.0f64; 3]).is_ok());
}

#[test]
fn coo_singletons_are_sorted_and_unique() {
    let coo = |rows: Vec<u32>, cols: Vec<u32>| {
        let n = rows.len() as u32;
        let levels = vec![
            LevelStorage::Compressed { pos: vec![0, n].into(), crd: rows.into() },
            LevelStorage::Singleton { crd: cols.into() },
        ];
        Tensor::from_raw(vec![3, 3], Format::coo(2), levels, vec![1.0f64; n as usize])
    };
    assert!(coo(vec![0, 0, 2], vec![0, 2, 1]).is_ok());
    assert_eq!(
        coo(vec![0, 0, 2], vec![2, 0, 1]).unwrap_err(),
        TensorError::NotSorted { level: 1, position: 1, coordinate: 0, previous: 2 }
    );
    assert_eq!(
        coo(vec![0, 0, 2], vec![2, 2, 1]).unwrap_err(),
        TensorError::DuplicateCoordinate { level: 1, position: 1, coordinate: 2 }
    );
    assert_eq!(
        coo(vec![0, 0, 2], vec![0, 3, 1]).unwrap_err(),
        TensorError::CoordinateOutOfRange { level: 1, position: 1, coordinate: 3, size: 3 }
    );
    assert_eq!(
        coo(vec![0, 2, 1], vec![0, 0, 0]).unwrap_err(),
        TensorError::NotSorted { level: 0, position: 2, coordinate: 1, previous: 2 }
    );
}

#[test]
fn values_length_matches_the_last_level() {
    let e = csr(vec![0, 2, 2, 3], vec![0, 2, 1], vec![1.0, 2.0]).unwrap_err();
    assert_eq!(e, TensorError::ValuesLength { expected: 3, actual: 2 });
}

#[test]
fn storage_must_match_the_level_kinds() {
    let levels = vec![LevelStorage::Singleton { crd: Indices::from_usize(vec![0]) }, LevelStorage::Dense { size: 4 }];
    let e = Tensor::<f64>::from_raw(vec![3, 4], Format::csr(), levels, vec![]).unwrap_err();
    assert_eq!(e, TensorError::LevelKindMismatch { level: 0, expected: LevelKind::Dense, found: "singleton" });
    let e = Tensor::<f64>::from_raw(vec![3, 4], Format::csr(), vec![], vec![]).unwrap_err();
    assert_eq!(e, TensorError::LevelCount { expected: 2, actual: 0 });
    let e = Tensor::<f64>::from_raw(vec![3, 4, 5], Format::csr(), vec![], vec![]).unwrap_err();
    assert_eq!(e, TensorError::OrderMismatch { format_order: 2, shape_order: 3 });
    let levels = vec![
        LevelStorage::Dense { size: 2 },
        LevelStorage::Compressed { pos: vec![0u32, 0, 0].into(), crd: Indices::U32(vec![]) },
    ];
    let e = Tensor::<f64>::from_raw(vec![3, 4], Format::csr(), levels, vec![]).unwrap_err();
    assert_eq!(e, TensorError::LevelSize { level: 0, expected: 3, actual: 2 });
}

fn nv24(meta: &[u16], values: Vec<f64>) -> Result<Tensor<f64>, TensorError> {
    let levels =
        vec![LevelStorage::Dense { size: 1 }, LevelStorage::Structured { size: 8, meta: Metadata::pack(meta, 4) }];
    Tensor::from_raw(vec![1, 8], Format::nv24(2), levels, values)
}

#[test]
fn nm_metadata_is_checked() {
    let t = nv24(&[0, 3, 1, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    assert_eq!(t.to_dense().unwrap(), vec![1., 0., 0., 2., 0., 3., 4., 0.]);
    // Packing masks to 2 bits, so an out-of-range offset needs M that is not a power of two.
    let f = Format::by_letters(&[LevelKind::Dense, LevelKind::Structured { n: 1, m: 3 }], None).unwrap();
    let levels =
        vec![LevelStorage::Dense { size: 1 }, LevelStorage::Structured { size: 3, meta: Metadata::pack(&[3], 3) }];
    let e = Tensor::from_raw(vec![1, 3], f, levels, vec![1.0f64]).unwrap_err();
    assert_eq!(e, TensorError::MetadataOutOfRange { level: 1, position: 0, value: 3, m: 3 });
    assert_eq!(
        nv24(&[2, 2, 1, 2], vec![1.0; 4]).unwrap_err(),
        TensorError::MetadataNotDistinct { level: 1, position: 1, value: 2, previous: 2 }
    );
    assert_eq!(
        nv24(&[0, 3, 2, 1], vec![1.0; 4]).unwrap_err(),
        TensorError::MetadataNotDistinct { level: 1, position: 3, value: 1, previous: 2 }
    );
    assert_eq!(
        nv24(&[0, 3, 1], vec![1.0; 4]).unwrap_err(),
        TensorError::MetadataLength { level: 1, expected: 4, actual: 3 }
    );
}

#[test]
fn padding_must_hold_zeros() {
    // A 1×6 matrix in nv24 is padded to 1×8; positions 6 and 7 are padding.
    let levels = |meta: &[u16]| {
        vec![LevelStorage::Dense { size: 1 }, LevelStorage::Structured { size: 8, meta: Metadata::pack(meta, 4) }]
    };
    let ok = Tensor::from_raw(vec![1, 6], Format::nv24(2), levels(&[0, 1, 0, 3]), vec![1.0f64, 2.0, 3.0, 0.0]).unwrap();
    assert_eq!(ok.to_dense().unwrap(), vec![1., 2., 0., 0., 3., 0.]);
    assert_eq!(ok.shape(), &[1, 6]);
    let e =
        Tensor::from_raw(vec![1, 6], Format::nv24(2), levels(&[0, 1, 0, 3]), vec![1.0f64, 2.0, 3.0, 9.0]).unwrap_err();
    assert_eq!(e, TensorError::NonzeroInPadding { coordinates: vec![0, 7], shape: vec![1, 6], value: 9.0 });
}

#[test]
fn coordinate_lists_are_checked() {
    let mut list = CoordinateList::new(vec![2, 2]);
    list.push(&[0, 1], 1.0f64);
    list.push(&[0, 1], 2.0);
    let e = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Reject).unwrap_err();
    assert_eq!(e, TensorError::DuplicateEntry { coordinates: vec![0, 1] });
    let summed = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Sum).unwrap();
    assert_eq!(summed.to_dense().unwrap(), vec![0.0, 3.0, 0.0, 0.0]);
    list.push(&[2, 0], 1.0);
    let e = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Sum).unwrap_err();
    assert_eq!(e, TensorError::OutOfShape { entry: 2, dim: 0, coordinate: 2, size: 2 });
    list.coords[1].pop();
    let e = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Sum).unwrap_err();
    assert_eq!(e, TensorError::CoordinatesLength { dim: 1, expected: 3, actual: 2 });
    let e = Tensor::from_dense(&[2, 2], &[1.0f64; 3], &Format::csr()).unwrap_err();
    assert_eq!(e, TensorError::DenseLength { shape: vec![2, 2], expected: 4, actual: 3 });
}

#[test]
fn data_that_does_not_fit_an_nm_pattern_is_refused_not_dropped() {
    // Row 0 has three nonzeros in its first block of four.
    let dense = [1.0f64, 2.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0];
    let e = Tensor::from_dense(&[1, 8], &dense, &Format::nv24(2)).unwrap_err();
    assert_eq!(e, TensorError::DoesNotFitPattern { level: 1, n: 2, m: 4, found: 3, block_start: vec![0, 0] });
    // Pruning keeps the two largest and says so.
    let csr = Tensor::from_dense(&[1, 8], &dense, &Format::csr()).unwrap();
    let (pruned, report) = csr.prune(&Format::nv24(2)).unwrap();
    assert_eq!(pruned.to_dense().unwrap(), vec![0.0, 2.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!((report.dropped, report.kept, report.dropped_magnitude), (1, 2, 1.0));
}

#[test]
fn pruning_breaks_ties_toward_the_lower_index_and_scores_whole_vectors() {
    let csr = Tensor::from_dense(&[1, 4], &[5.0f64, -5.0, 5.0, 1.0], &Format::csr()).unwrap();
    let (pruned, _) = csr.prune(&Format::nv24(2)).unwrap();
    assert_eq!(pruned.to_dense().unwrap(), vec![5.0, -5.0, 0.0, 0.0]);
    // nm(1,2,2): window of 2 rows, groups of 2 columns; row 1 wins by its vector sum 1+4 > 3+0.
    let dense = [3.0f64, 0.0, 1.0, 4.0];
    let csr = Tensor::from_dense(&[2, 2], &dense, &Format::csr()).unwrap();
    let (pruned, report) = csr.prune(&Format::nm(1, 2, 2).unwrap()).unwrap();
    assert_eq!(pruned.to_dense().unwrap(), vec![0.0, 0.0, 1.0, 4.0]);
    assert_eq!(report.dropped, 1);
}

#[test]
fn a_singleton_below_a_unique_level_cannot_hold_two_children() {
    let f = Format::parse("sq", 2).unwrap();
    let e = Tensor::from_dense(&[2, 2], &[1.0f64, 1.0, 0.0, 0.0], &f).unwrap_err();
    assert_eq!(e, TensorError::SingletonCannotHold { level: 1, coordinates: vec![0, 1] });
}

#[test]
fn storage_larger_than_memory_is_refused_before_allocating() {
    // A 2^21 × 2^21 matrix in nv24 stores half its 2^42 elements: 16 TiB of f64.
    let list = CoordinateList::<f64>::new(vec![1 << 21, 1 << 21]);
    let e = Tensor::from_coordinates(&list, &Format::nv24(2), Duplicates::Sum).unwrap_err();
    assert!(matches!(&e, TensorError::TooLarge { what } if what.contains("GiB needed")), "{e}");
    let csr = Tensor::from_coordinates(&list, &Format::csr(), Duplicates::Sum).unwrap();
    assert!(matches!(csr.to_dense(), Err(TensorError::TooLarge { .. })));
    // CSR and CSC hold a position per row (column): a `.mtx` header declaring 2^63 of them
    // aborted the allocator ("capacity overflow"); usize::MAX rows overflowed the count.
    for rows in [1usize << 63, usize::MAX] {
        let mut list = CoordinateList::<f64>::new(vec![rows, rows]);
        list.push(&[0, 0], 1.0);
        for format in [Format::csr(), Format::csc()] {
            let e = Tensor::from_coordinates(&list, &format, Duplicates::Sum).unwrap_err();
            assert!(matches!(&e, TensorError::TooLarge { what } if what.contains("matrix in")), "{e}");
        }
    }
}

#[test]
fn nm_parts_need_an_nm_tensor_and_valid_parts() {
    let csr = Tensor::from_dense(&[2, 2], &[1.0f64, 0.0, 0.0, 1.0], &Format::csr()).unwrap();
    let e = csr.nm_parts().unwrap_err();
    assert_eq!(e, TensorError::WrongFormat { operation: "nm_parts", needed: "nm(N,M,L)".into(), actual: "csr".into() });
    let nm = csr.convert(&Format::nm(1, 2, 1).unwrap()).unwrap();
    let mut parts = nm.nm_parts().unwrap();
    assert_eq!((parts.b_prime.clone(), parts.d.clone()), (vec![1.0, 1.0], vec![0, 1]));
    parts.d[1] = 2;
    let e = Tensor::from_nm_parts(&parts).unwrap_err();
    assert_eq!(e, TensorError::MetadataOutOfRange { level: 2, position: 1, value: 2, m: 2 });
    parts.d.pop();
    assert_eq!(
        Tensor::from_nm_parts(&parts).unwrap_err(),
        TensorError::MetadataLength { level: 2, expected: 2, actual: 1 }
    );
}

/// A 3×4 matrix with band rows (`db`) from its arrays.
fn banded(pos: Vec<u32>, first: Vec<u32>, values: Vec<f64>) -> Result<Tensor<f64>, TensorError> {
    let format = Format::parse("db", 2).unwrap();
    let levels = vec![LevelStorage::Dense { size: 3 }, LevelStorage::Band { pos: pos.into(), first: first.into() }];
    Tensor::from_raw(vec![3, 4], format, levels, values)
}

#[test]
fn band_rows_store_each_row_as_one_run() {
    // Row 0 holds columns 1 and 3 (the zero at column 2 inside its run), row 1 nothing, row 2
    // column 0.
    let mut list = CoordinateList::new(vec![3, 4]);
    list.push(&[0, 1], 1.0);
    list.push(&[0, 3], 2.0);
    list.push(&[2, 0], 3.0);
    let t = Tensor::from_coordinates(&list, &Format::parse("db", 2).unwrap(), Duplicates::Reject).unwrap();
    let [_, LevelStorage::Band { pos, first }] = t.levels() else { panic!("{:?}", t.levels()) };
    assert_eq!((pos.to_usize(), first.to_usize()), (vec![0, 3, 3, 4], vec![1, 0, 0]));
    assert_eq!(t.values(), &[1.0, 0.0, 2.0, 3.0]);
    assert_eq!(t.to_dense().unwrap(), vec![0., 1., 0., 2., 0., 0., 0., 0., 3., 0., 0., 0.]);
    // The zero inside the run is padding: gone in CSR.
    assert_eq!(t.convert(&Format::csr()).unwrap().values(), &[1.0, 2.0, 3.0]);
    assert_eq!(banded(vec![0, 3, 3, 4], vec![1, 0, 0], vec![1.0, 0.0, 2.0, 3.0]).unwrap(), t);
}

#[test]
fn band_arrays_are_checked() {
    let e = banded(vec![0, 3, 3], vec![1, 0, 0], vec![]).unwrap_err();
    assert_eq!(e, TensorError::PosLength { level: 1, expected: 4, actual: 3 });
    let e = banded(vec![0, 3, 2, 4], vec![1, 0, 0], vec![0.0; 4]).unwrap_err();
    assert!(matches!(e, TensorError::PosNotMonotone { level: 1, position: 2, .. }), "{e:?}");
    let e = banded(vec![0, 3, 3, 4], vec![1, 0], vec![0.0; 4]).unwrap_err();
    assert_eq!(e, TensorError::CrdLength { level: 1, expected: 3, actual: 2 });
    // A run of three from column 2 would end past the last column.
    let e = banded(vec![0, 3, 3, 4], vec![2, 0, 0], vec![0.0; 4]).unwrap_err();
    assert_eq!(e, TensorError::CoordinateOutOfRange { level: 1, position: 2, coordinate: 4, size: 4 });
    let e = banded(vec![0, 3, 3, 4], vec![1, 0, usize::MAX as u32], vec![0.0; 4]).unwrap_err();
    assert!(matches!(e, TensorError::CoordinateOutOfRange { level: 1, .. }), "{e:?}");
    let e = Tensor::<f64>::from_raw(
        vec![3, 4],
        Format::parse("db", 2).unwrap(),
        vec![
            LevelStorage::Dense { size: 3 },
            LevelStorage::Compressed { pos: vec![0u32; 4].into(), crd: Indices::U32(vec![]) },
        ],
        vec![],
    )
    .unwrap_err();
    assert_eq!(e, TensorError::LevelKindMismatch { level: 1, expected: LevelKind::Band, found: "compressed" });
    // A band stores a whole dimension, never a block of one.
    let e = Format::parse("(i,j) -> (i : dense, j floordiv 2 : band, j mod 2 : dense)", 2).unwrap_err();
    assert!(e.to_string().contains("a band stores a whole dimension"), "{e}");
}

#[test]
fn arbitrary_band_arrays_are_refused_or_read_without_panicking() {
    // Small random `pos`, `first` and values (a fixed generator): whatever validation
    // accepts densifies and lists its components.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound) as u32
    };
    let mut accepted = 0;
    for _ in 0..20_000 {
        let pos: Vec<u32> = (0..next(6)).map(|_| next(7)).collect();
        let first: Vec<u32> = (0..next(5)).map(|_| next(6)).collect();
        let values: Vec<f64> = (0..next(8)).map(|v| v as f64).collect();
        if let Ok(t) = banded(pos, first, values) {
            accepted += 1;
            let dense = t.to_dense().unwrap();
            assert_eq!(dense.len(), 12);
            let list = t.to_coordinates();
            assert!(list.coords[0].iter().all(|&r| r < 3) && list.coords[1].iter().all(|&c| c < 4), "{list:?}");
        }
    }
    assert!(accepted > 0, "the generator should hit some valid band rows");
}
