//! Every policy against an independent reference (a `BTreeMap` summing duplicates), on random
//! component streams with duplicates in random order; compression into formats against
//! nm-format's own builder.

use std::collections::BTreeMap;

use nm_format::{Format, LevelKind, Tensor};
use nm_ism::{Config, Policy, Workspace};
use proptest::prelude::*;

const POLICIES: [Policy; 8] = [
    Policy::Dense,
    Policy::Auto,
    Policy::Bucket,
    Policy::Hash(None),
    Policy::Hash(Some(4)),
    Policy::Coord,
    Policy::Map,
    Policy::Vector,
];

fn configs() -> Vec<Config> {
    let mut out = Vec::new();
    for policy in POLICIES {
        for (capacity, pipelined, double_buffered) in [(3, false, true), (7, true, true), (1 << 16, false, false)] {
            out.push(Config { capacity, pipelined, double_buffered, ..Config::new(policy) });
        }
    }
    out
}

/// Integer-valued components, so every order of summation gives the same floats.
fn stream() -> impl Strategy<Value = (Vec<usize>, Vec<(Vec<usize>, i32)>)> {
    prop::collection::vec(1usize..6, 1..4).prop_flat_map(|extents| {
        let coords = extents.iter().map(|&e| 0..e).collect::<Vec<_>>();
        let component = (coords, -3i32..4);
        (Just(extents), prop::collection::vec(component, 0..120))
    })
}

proptest! {
    #[test]
    fn every_policy_sums_what_a_map_sums((extents, components) in stream()) {
        let mut want: BTreeMap<Vec<usize>, f64> = BTreeMap::new();
        for (c, v) in &components {
            *want.entry(c.clone()).or_insert(0.0) += *v as f64;
        }
        for config in configs() {
            let mut ws = Workspace::<f64>::new(&extents, config).unwrap();
            for round in 0..2 {
                for (c, v) in &components {
                    ws.insert(c, *v as f64).unwrap();
                }
                let got = ws.finish().unwrap();
                let got: BTreeMap<Vec<usize>, f64> =
                    (0..got.len()).map(|i| (got.coords(i), got.values()[i])).collect();
                prop_assert_eq!(&got, &want, "{:?}, round {}", config, round);
                prop_assert!(got.keys().zip(got.keys().skip(1)).all(|(a, b)| a < b));
            }
        }
    }
}

/// Matrices, as CSR takes them from a workspace (its two levels' extents), with duplicates.
fn matrix_stream() -> impl Strategy<Value = (Vec<usize>, Vec<(Vec<usize>, i32)>)> {
    (1usize..9, 1usize..70).prop_flat_map(|(rows, cols)| {
        let component = (vec![0..rows, 0..cols], -3i32..4);
        (Just(vec![rows, cols]), prop::collection::vec(component, 0..150))
    })
}

proptest! {
    /// `finish_into` CSR's levels (fused for unflushed buckets) equals `finish` then
    /// `levels`, for every policy and configuration (flushed buckets, pipelined merges and
    /// `auto` turned dense among them), into arrays holding a previous result.
    #[test]
    fn finishing_into_csr_equals_finishing_then_compressing((extents, components) in matrix_stream()) {
        let csr = [LevelKind::Dense, LevelKind::COMPRESSED];
        // `auto` deciding after 8 components, all on one coordinate: it turns dense.
        let turning = Config { capacity: 64, ..Config::new(Policy::Auto) };
        let first = std::iter::repeat_n((vec![0, 0], 2), 8);
        for config in configs().into_iter().chain([turning]) {
            let (mut fused, mut apart) =
                (Workspace::<f64>::new(&extents, config).unwrap(), Workspace::<f64>::new(&extents, config).unwrap());
            let mut into = nm_ism::LevelArrays { pos: vec![None, Some(vec![5, 7])], crd: vec![None, Some(vec![9; 4])], vals: vec![1.5; 4] };
            for round in 0..2 {
                for (c, v) in first.clone().chain(components[round * components.len() / 3..].iter().cloned()) {
                    let (c, v) = (&c, &v);
                    fused.insert(c, *v as f64).unwrap();
                    apart.insert(c, *v as f64).unwrap();
                }
                fused.finish_into(&csr, &mut into).unwrap();
                let want = apart.finish().unwrap().levels(&csr).unwrap();
                prop_assert_eq!(&into, &want, "{:?}, round {}", config, round);
                prop_assert_eq!(fused.stats().unique, apart.stats().unique);
            }
        }
    }
}

fn random_components(extents: &[usize], n: usize, seed: u64) -> Vec<(Vec<usize>, f64)> {
    let mut x = seed;
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) as usize
    };
    (0..n).map(|_| (extents.iter().map(|&e| next() % e).collect(), (next() % 7) as f64 - 3.0)).collect()
}

/// Compressing into a format's levels gives what nm-format builds from the same components.
#[test]
fn compression_matches_nm_formats_builder() {
    let cases: [(&str, Vec<usize>); 9] = [
        ("csr", vec![7, 9]),
        ("dcsr", vec![7, 9]),
        ("coo", vec![7, 9]),
        ("csc", vec![7, 9]),
        ("dense", vec![4, 5]),
        ("csf", vec![4, 5, 6]),
        ("s", vec![30]),
        ("sd", vec![6, 4]),
        ("dsd", vec![3, 4, 5]),
    ];
    for (name, shape) in cases {
        let format = Format::parse(name, shape.len()).unwrap();
        let extents = format.level_sizes(&shape);
        for policy in POLICIES {
            let mut ws = Workspace::<f64>::new(&extents, Config::new(policy)).unwrap();
            let components = random_components(&extents, 40, 11);
            let mut list = nm_format::CoordinateList::new(shape.clone());
            for (c, v) in &components {
                ws.insert(c, *v).unwrap();
                // Storage order back to dimensions.
                let mut coords = vec![0; shape.len()];
                for (l, level) in format.levels().iter().enumerate() {
                    coords[level.expr.dim()] = c[l];
                }
                list.push(&coords, *v);
            }
            let done = ws.finish().unwrap();
            let want = Tensor::from_coordinates(&list, &format, nm_format::Duplicates::Sum).unwrap();
            let got = done.to_tensor(&shape, &format).unwrap();
            assert_eq!(got.to_dense(), want.to_dense(), "{name}, {policy}");
            // The level arrays: positions and coordinates as nm-format stores them.
            let kinds: Vec<LevelKind> = format.levels().iter().map(|l| l.kind).collect();
            let arrays = done.levels(&kinds).unwrap();
            for (l, level) in want.levels().iter().enumerate() {
                match level {
                    nm_format::LevelStorage::Compressed { pos, crd } => {
                        let p: Vec<i64> = pos.to_usize().iter().map(|&x| x as i64).collect();
                        let c: Vec<i64> = crd.to_usize().iter().map(|&x| x as i64).collect();
                        assert_eq!(arrays.pos[l].as_ref(), Some(&p), "{name} level {l} pos");
                        assert_eq!(arrays.crd[l].as_ref(), Some(&c), "{name} level {l} crd");
                    }
                    nm_format::LevelStorage::Singleton { crd } => {
                        let c: Vec<i64> = crd.to_usize().iter().map(|&x| x as i64).collect();
                        assert_eq!(arrays.crd[l].as_ref(), Some(&c), "{name} level {l} crd");
                    }
                    _ => {}
                }
            }
            assert_eq!(arrays.vals, want.values(), "{name}, {policy}: values");
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let mut ws = Workspace::<f32>::new(&[3, 4], Config::new(Policy::Coord)).unwrap();
    assert!(ws.insert(&[3, 0], 1.0).is_err());
    assert!(ws.insert(&[0], 1.0).is_err());
    assert!(Workspace::<f32>::new(&[1 << 40, 1 << 40], Config::new(Policy::Coord)).is_err());
    let e = Workspace::<f64>::new(&[1 << 30, 1 << 30], Config::new(Policy::Dense)).unwrap_err();
    assert!(e.to_string().contains("dense workspace"), "{e}");
    assert!("hash(0)".parse::<Policy>().is_err());
    assert!("heap".parse::<Policy>().unwrap_err().contains("unknown workspace policy"));
    assert_eq!("hash(64)".parse::<Policy>(), Ok(Policy::Hash(Some(64))));
    let kinds = [LevelKind::Structured { n: 2, m: 4 }, LevelKind::Dense];
    let mut ws = Workspace::<f64>::new(&[2, 3], Config::new(Policy::Bucket)).unwrap();
    assert!(ws.finish().unwrap().levels(&kinds).is_err());
}

/// The generated-code path: appending through the slot and flushing through its pointer.
#[test]
fn the_slot_appends_and_flushes_like_insert() {
    for policy in POLICIES {
        let mut ws = Workspace::<f64>::new(&[10, 10], Config { capacity: 5, ..Config::new(policy) }).unwrap();
        let slot = ws.slot();
        let layout = ws.layout().clone();
        for k in 0..100usize {
            let x = (k * 37) % 100;
            let key = layout.key(&[x / 10, x % 10]).unwrap();
            // SAFETY: `slot` is the live workspace's slot; nothing else touches it meanwhile.
            unsafe {
                let s = &mut *slot;
                if !s.dense.is_null() {
                    let at = layout.dense_index(key);
                    *(s.dense as *mut f64).add(at) += 1.0;
                    *s.mark.add(at) = 1;
                    continue;
                }
                if !s.buckets.is_null() {
                    let b = (key >> s.shift) as i64;
                    let head = &mut *s.buckets.add(b as usize);
                    if head.len == head.cap {
                        assert_eq!((s.grow)(slot, b), 0);
                    }
                    let head = &mut *(*slot).buckets.add(b as usize);
                    *head.keys.add(head.len as usize) = key;
                    *(head.vals as *mut f64).add(head.len as usize) = 1.0;
                    head.len += 1;
                    (*slot).len += 1;
                    if (*slot).len == (*slot).cap {
                        assert_eq!(((*slot).flush)(slot), 0);
                    }
                    continue;
                }
                if s.len == s.cap {
                    assert_eq!((s.flush)(slot), 0);
                }
                let s = &mut *slot;
                *s.keys.add(s.len as usize) = key;
                *(s.vals as *mut f64).add(s.len as usize) = 1.0;
                s.len += 1;
            }
        }
        let done = ws.finish().unwrap();
        let coords: Vec<Vec<usize>> = (0..done.len()).map(|i| done.coords(i)).collect();
        let want: Vec<Vec<usize>> = (0..100).map(|x| vec![x / 10, x % 10]).collect();
        assert_eq!(coords, want, "{policy}");
        assert!(done.values().iter().all(|&v| v == 1.0));
    }
}

/// `auto` turns dense after a first flush (an eighth of the capacity: 8 of 64 components here)
/// with many components per coordinate, keeps what its buckets had, and starts sparse again
/// on its next use.
#[test]
fn auto_turns_dense_when_duplicates_are_many() {
    let mut ws = Workspace::<f64>::new(&[4, 5], Config { capacity: 64, ..Config::new(Policy::Auto) }).unwrap();
    let mut want: BTreeMap<Vec<usize>, f64> = BTreeMap::new();
    let put = |ws: &mut Workspace<f64>, want: &mut BTreeMap<Vec<usize>, f64>, c: [usize; 2], v: f64| {
        ws.insert(&c, v).unwrap();
        *want.entry(c.to_vec()).or_insert(0.0) += v;
    };
    for round in 0..2 {
        for n in 0..8 {
            put(&mut ws, &mut want, [n % 2, 3], 1.0 + n as f64);
        }
        // The eighth insert flushed: 8 components on 2 coordinates.
        // SAFETY: reading the live workspace's slot.
        assert!(!unsafe { (*ws.slot()).dense }.is_null(), "round {round}: still sparse");
        for n in 0..30 {
            put(&mut ws, &mut want, [n % 4, (n * 7) % 5], n as f64 - 4.0);
        }
        let done = ws.finish().unwrap();
        let got: BTreeMap<Vec<usize>, f64> = (0..done.len()).map(|i| (done.coords(i), done.values()[i])).collect();
        assert_eq!(got, want, "round {round}");
        want.clear();
        // SAFETY: as above.
        assert!(unsafe { (*ws.slot()).dense }.is_null(), "a finished auto workspace starts sparse");
    }
    // Finished before its first flush (which would decide): stays sparse, loses nothing.
    for (coords, dense) in [(vec![[1, 2]; 5], "duplicates"), (vec![[0, 1], [1, 2], [2, 3], [3, 4], [1, 2]], "few")] {
        let mut ws = Workspace::<f64>::new(&[4, 5], Config { capacity: 64, ..Config::new(Policy::Auto) }).unwrap();
        let mut want: BTreeMap<Vec<usize>, f64> = BTreeMap::new();
        for (n, c) in coords.into_iter().enumerate() {
            put(&mut ws, &mut want, c, n as f64 + 0.5);
        }
        let done = ws.finish().unwrap();
        let got: BTreeMap<Vec<usize>, f64> = (0..done.len()).map(|i| (done.coords(i), done.values()[i])).collect();
        assert_eq!(got, want, "{dense}");
    }
    // Few duplicates: it stays sparse.
    let mut ws = Workspace::<f64>::new(&[4, 5], Config { capacity: 64, ..Config::new(Policy::Auto) }).unwrap();
    for n in 0..20 {
        ws.insert(&[n % 4, n % 5], 1.0).unwrap();
    }
    // SAFETY: as above.
    assert!(unsafe { (*ws.slot()).dense }.is_null());
    assert_eq!(ws.finish().unwrap().len(), 20);
}

/// `auto` takes an early look at a sixteenth of its decision's sample (8 of 128 components at a
/// capacity of 1024): coordinates repeated four times turn it dense right there; fewer leave
/// the decision to the full sample, which turns dense at twice.
#[test]
fn auto_turns_dense_early_only_where_coordinates_repeat_often() {
    let dense = |ws: &mut Workspace<f64>| {
        // SAFETY: reading the live workspace's slot.
        !unsafe { (*ws.slot()).dense }.is_null()
    };
    let config = Config { capacity: 1024, ..Config::new(Policy::Auto) };
    for (early, coordinates) in [(true, 2), (false, 4)] {
        let mut ws = Workspace::<f64>::new(&[8, 8], config).unwrap();
        let mut want: BTreeMap<Vec<usize>, f64> = BTreeMap::new();
        for n in 0..128 {
            let c = [n % coordinates, 5];
            ws.insert(&c, n as f64).unwrap();
            *want.entry(c.to_vec()).or_insert(0.0) += n as f64;
            // The early look after the eighth insert; the decision after the 128th.
            let looked = if early { n >= 7 } else { n >= 127 };
            assert_eq!(dense(&mut ws), looked, "{coordinates} coordinates, insert {n}");
        }
        let done = ws.finish().unwrap();
        let got: BTreeMap<Vec<usize>, f64> = (0..done.len()).map(|i| (done.coords(i), done.values()[i])).collect();
        assert_eq!(got, want, "{coordinates} coordinates");
    }
}

/// With a capacity too small for an eighth and a 128th to differ (7: one component each),
/// `auto` still decides after its early look — at the second component — and then flushes at
/// its capacity: generated code flushes when its count reaches the slot's capacity exactly,
/// so a sample the count has passed would never come.
#[test]
fn auto_decides_after_its_early_look_at_the_smallest_capacities() {
    let mut ws = Workspace::<f64>::new(&[4, 4], Config { capacity: 7, ..Config::new(Policy::Auto) }).unwrap();
    let slot = ws.slot();
    let layout = ws.layout().clone();
    for n in 0..30usize {
        let key = layout.key(&[n % 4, (n / 4) % 4]).unwrap();
        // SAFETY: `slot` is the live workspace's slot; nothing else touches it meanwhile. The
        // appends are the generated code's (see `the_slot_appends_and_flushes_like_insert`).
        unsafe {
            if !(*slot).dense.is_null() {
                let at = layout.dense_index(key);
                *((*slot).dense as *mut f64).add(at) += 1.0;
                *(*slot).mark.add(at) = 1;
                continue;
            }
            let b = (key >> (*slot).shift) as i64;
            let head = &mut *(*slot).buckets.add(b as usize);
            if head.len == head.cap {
                assert_eq!(((*slot).grow)(slot, b), 0);
            }
            let head = &mut *(*slot).buckets.add(b as usize);
            *head.keys.add(head.len as usize) = key;
            *(head.vals as *mut f64).add(head.len as usize) = 1.0;
            head.len += 1;
            (*slot).len += 1;
            if (*slot).len == (*slot).cap {
                assert_eq!(((*slot).flush)(slot), 0);
            }
        }
    }
    // The decision (sparse: every coordinate once) counts as the first flush; then one every 7.
    assert!(ws.stats().flushes >= 4, "{:?}", ws.stats());
    let done = ws.finish().unwrap();
    assert_eq!(done.len(), 16);
    assert_eq!(done.values().iter().sum::<f64>(), 30.0);
}
