//! The FROSTT reader on arbitrary bytes: never panics; coordinates it returns are in range.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nm_format::io::parse_tns;
use nm_format::{Duplicates, Format, Tensor};

fuzz_target!(|data: &[u8]| {
    let Ok(list) = parse_tns::<f64>(data) else { return };
    for (d, coords) in list.coords.iter().enumerate() {
        assert!(coords.iter().all(|&c| c < list.shape[d]));
    }
    if list.shape.iter().try_fold(1usize, |a, &s| a.checked_mul(s)).is_some_and(|n| n <= 1 << 16) {
        let _ = Tensor::from_coordinates(&list, &Format::coo(list.shape.len()), Duplicates::Sum);
    }
});
