//! `proptest` strategies for random formats and tensors, shared with other crates' tests
//! (feature `proptest`).

use proptest::prelude::*;

use crate::build::CoordinateList;
use crate::format::Format;
use crate::level::{LevelKind, LevelProperties};

/// A random format of `order` dimensions that can hold any tensor of that order: taco
/// letters and band levels (singletons only below non-unique levels) with a random mode
/// ordering, CSF, COO,
/// dense, and for order 2 also CSR/CSC/DCSC and BCSR(b).
pub fn any_format(order: usize) -> BoxedStrategy<Format> {
    let letters = proptest::collection::vec(0u8..4, order)
        .prop_flat_map(move |kinds| (Just(kinds), Just((0..order).collect::<Vec<_>>()).prop_shuffle()))
        .prop_map(move |(kinds, modes)| {
            // 0 dense, 1 compressed, 3 band, 2 start of a COO run (non-unique then singletons).
            let mut levels = Vec::with_capacity(order);
            let mut l = 0;
            while l < order {
                match kinds[l] {
                    0 => levels.push(LevelKind::Dense),
                    1 => levels.push(LevelKind::COMPRESSED),
                    3 => levels.push(LevelKind::Band),
                    _ => {
                        let rest = order - l;
                        if rest == 1 {
                            levels.push(LevelKind::COMPRESSED);
                        } else {
                            levels.push(LevelKind::Compressed(LevelProperties::ORDERED_NONUNIQUE));
                            for k in 1..rest {
                                levels.push(if k + 1 == rest {
                                    LevelKind::SINGLETON
                                } else {
                                    LevelKind::Singleton(LevelProperties::ORDERED_NONUNIQUE)
                                });
                            }
                            break;
                        }
                    }
                }
                l += 1;
            }
            Format::by_letters(&levels, Some(&modes)).expect("generated letters are valid")
        });
    if order == 2 {
        prop_oneof![
            4 => letters,
            1 => (1usize..4).prop_map(|b| Format::bcsr(b).expect("bcsr")),
            1 => Just(Format::csc()),
            1 => Just(Format::coo(2)),
        ]
        .boxed()
    } else {
        prop_oneof![4 => letters, 1 => Just(Format::coo(order)), 1 => Just(Format::dense(order))].boxed()
    }
}

/// A random N:M format for matrices: `nv24`, element-wise `structured[N, M]` on the last
/// dimension, or vector-wise `nm(N,M,L)`.
pub fn nm_format() -> BoxedStrategy<Format> {
    prop_oneof![
        Just(Format::nv24(2)),
        (1u32..4, 1u32..5).prop_map(|(n, extra)| {
            let m = n + extra - 1;
            Format::by_letters(&[LevelKind::Dense, LevelKind::Structured { n, m }], None).expect("valid")
        }),
        (1u32..4, 0u32..4, 1usize..5).prop_map(|(n, extra, l)| Format::nm(n, n + extra, l).expect("valid nm")),
    ]
    .boxed()
}

/// A random coordinate list of `order` dimensions (sizes `0..=max_size`), distinct
/// coordinates, nonzero small-integer values (so arithmetic on them is exact).
pub fn coordinate_list(order: usize, max_size: usize) -> BoxedStrategy<CoordinateList<f64>> {
    let size = prop_oneof![1 => Just(0), 12 => 1..=max_size.max(1)];
    proptest::collection::vec(size, order)
        .prop_flat_map(|shape| {
            let total: usize = shape.iter().product();
            (Just(shape), proptest::collection::vec((0..total.max(1), -9i32..=9), 0..=total.min(64)))
        })
        .prop_map(|(shape, picks)| {
            let total: usize = shape.iter().product();
            let mut seen = std::collections::BTreeMap::new();
            for (linear, v) in picks {
                if total > 0 && v != 0 {
                    seen.insert(linear, v as f64);
                }
            }
            let mut list = CoordinateList::new(shape.clone());
            for (linear, v) in seen {
                let mut coords = vec![0; shape.len()];
                let mut rest = linear;
                for d in (0..shape.len()).rev() {
                    coords[d] = rest % shape[d];
                    rest /= shape[d];
                }
                list.push(&coords, v);
            }
            list
        })
        .boxed()
}
