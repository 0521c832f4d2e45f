//! Tensor construction from raw level arrays (what the C API and `from_raw` users hand in):
//! never panics; a tensor that validates densifies, lists its components, and rebuilds from
//! them into the same dense array.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use nm_format::{Duplicates, Format, Indices, LevelStorage, Metadata, Tensor};

#[derive(Arbitrary, Debug)]
struct Input {
    rows: u8,
    cols: u8,
    format: u8,
    outer_pos: Vec<u8>,
    outer_crd: Vec<u8>,
    pos: Vec<u8>,
    crd: Vec<u8>,
    meta: Vec<u8>,
    values: Vec<i8>,
}

fn indices(v: &[u8]) -> Indices {
    Indices::from_usize(v.iter().map(|&x| x as usize).collect())
}

fuzz_target!(|input: Input| {
    let shape = vec![input.rows as usize % 9, input.cols as usize % 9];
    let values: Vec<f64> = input.values.iter().map(|&v| v as f64).collect();
    let (format, levels) = match input.format % 5 {
        0 => (
            Format::csr(),
            vec![
                LevelStorage::Dense { size: shape[0] },
                LevelStorage::Compressed { pos: indices(&input.pos), crd: indices(&input.crd) },
            ],
        ),
        1 => (
            Format::parse("dcsr", 2).expect("dcsr"),
            vec![
                LevelStorage::Compressed { pos: indices(&input.outer_pos), crd: indices(&input.outer_crd) },
                LevelStorage::Compressed { pos: indices(&input.pos), crd: indices(&input.crd) },
            ],
        ),
        2 => (
            Format::coo(2),
            vec![
                LevelStorage::Compressed { pos: indices(&input.outer_pos), crd: indices(&input.outer_crd) },
                LevelStorage::Singleton { crd: indices(&input.crd) },
            ],
        ),
        3 => (
            Format::parse("db", 2).expect("band rows"),
            vec![
                LevelStorage::Dense { size: shape[0] },
                LevelStorage::Band { pos: indices(&input.pos), first: indices(&input.crd) },
            ],
        ),
        _ => {
            let offsets: Vec<u16> = input.meta.iter().map(|&m| m as u16 % 5).collect();
            (
                Format::nv24(2),
                vec![
                    LevelStorage::Dense { size: shape[0] },
                    LevelStorage::Structured { size: shape[1].div_ceil(4) * 4, meta: Metadata::pack(&offsets, 4) },
                ],
            )
        }
    };
    let Ok(tensor) = Tensor::from_raw(shape.clone(), format.clone(), levels, values) else { return };
    let dense = tensor.to_dense().expect("a valid tensor densifies");
    let list = tensor.to_coordinates();
    let again = Tensor::from_coordinates(&list, &Format::dense(2), Duplicates::Sum).expect("its components rebuild");
    assert_eq!(again.to_dense().expect("dense"), dense);
});
