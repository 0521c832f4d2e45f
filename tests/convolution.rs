//! Issue 6's statements — compound affine subscripts on sparse levels (sparse convolution) —
//! through the public API on both back ends, against the independent dense reference, which
//! evaluates every subscript by brute force. Values are small integers, so every sum is exact
//! whatever order the kernel adds in.

mod common;

use common::{Dense, operand, reference_sized, to_f32};
use nmsparse::format::generate::{Values, uniform};
use nmsparse::format::{Format, Tensor};
use nmsparse::ir::id::Id;
use nmsparse::ir::notation::parse;
use nmsparse::{Backend, Program};

/// (tensor, shape, format, density): the result's density is ignored.
type Decl<'a> = (&'a str, &'a [usize], &'a str, f64);

struct Case<'a> {
    expr: &'a str,
    decls: &'a [Decl<'a>],
    /// Sizes of the variables that appear only in compound subscripts.
    sizes: &'a [(&'a str, usize)],
    seed: u64,
}

impl Case<'_> {
    /// The operands and the expected result.
    fn data(&self) -> (Vec<(String, Tensor<f64>)>, Vec<f64>) {
        let stmt = parse(self.expr).unwrap();
        let mut d = Dense { shapes: vec![Vec::new(); stmt.tensors.len()], arrays: vec![None; stmt.tensors.len()] };
        let mut operands = Vec::new();
        for (k, &(name, shape, format, density)) in self.decls.iter().enumerate() {
            let id = stmt.tensor_named(name).unwrap();
            d.shapes[id.index()] = shape.to_vec();
            if id == stmt.lhs.tensor {
                continue;
            }
            let f = Format::parse(format, shape.len()).unwrap();
            let list = uniform::<f64>(shape, density, Values::SmallIntegers(4), self.seed + k as u64);
            let t = operand(&list, &f).unwrap();
            d.arrays[id.index()] = Some(t.to_dense().unwrap());
            operands.push((name.to_string(), t));
        }
        let expected = reference_sized(self.expr, &d, self.sizes);
        assert!(expected.iter().any(|&v| v != 0.0), "{}: an all-zero result checks little", self.expr);
        (operands, expected)
    }

    /// Both back ends (f64; f32 once with the default order) for every schedule given.
    fn check(&self, schedules: &[&str]) {
        let (operands, expected) = self.data();
        for schedule in schedules {
            for backend in [Backend::Interp, Backend::Jit] {
                let got = self.run(schedule, &operands, backend);
                assert_eq!(got, expected, "{} [{schedule}] {backend:?}", self.expr);
            }
        }
        let narrow: Vec<(String, Tensor<f32>)> = operands.iter().map(|(n, t)| (n.clone(), to_f32(t))).collect();
        for backend in [Backend::Interp, Backend::Jit] {
            assert_eq!(self.run(schedules[0], &narrow, backend), expected, "{} f32 {backend:?}", self.expr);
        }
    }

    fn run<T: nmsparse::Scalar + Into<f64>>(
        &self,
        schedule: &str,
        operands: &[(String, Tensor<T>)],
        backend: Backend,
    ) -> Vec<f64> {
        let mut p = Program::new(self.expr).unwrap();
        for &(name, shape, format, _) in self.decls {
            p = p.tensor(name, shape, format).unwrap();
        }
        for &(v, n) in self.sizes {
            p = p.index_size(v, n);
        }
        if !schedule.is_empty() {
            p = p.schedule(schedule);
        }
        let what = format!("{} [{schedule}] {backend:?}", self.expr);
        let kernel = p.compile::<T>(backend).unwrap_or_else(|e| panic!("{what}: {e}"));
        let args: Vec<(&str, &Tensor<T>)> = operands.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let out = kernel.run(&args).unwrap_or_else(|e| panic!("{what}: {e}"));
        out.to_dense().unwrap().into_iter().map(Into::into).collect()
    }
}

/// Every order of `vars` as a `reorder` schedule.
fn orders(vars: &[&str]) -> Vec<String> {
    if vars.len() <= 1 {
        return vec![vars.join(",")];
    }
    let mut out = Vec::new();
    for (k, first) in vars.iter().enumerate() {
        let mut rest = vars.to_vec();
        rest.remove(k);
        for tail in orders(&rest) {
            out.push(format!("{first},{tail}"));
        }
    }
    out
}

fn reorders(vars: &[&str]) -> Vec<String> {
    orders(vars).into_iter().map(|o| format!("reorder({o})")).collect()
}

#[test]
fn one_dimensional_convolution_of_a_sparse_vector_in_every_loop_order() {
    for (format, density) in [("s", 0.3), ("s", 0.02), ("coo", 0.3), ("d", 0.3)] {
        for out in ["d", "s"] {
            let case = Case {
                expr: "O(i) = I(i+r) * F(r)",
                decls: &[("O", &[60], out, 1.0), ("I", &[62], format, density), ("F", &[3], "dense", 1.0)],
                sizes: &[],
                seed: 1,
            };
            let schedules = reorders(&["i", "r"]);
            let mut all: Vec<&str> = vec![""];
            all.extend(schedules.iter().map(String::as_str));
            case.check(&all);
        }
    }
}

#[test]
fn one_dimensional_convolution_with_a_sparse_filter() {
    let case = Case {
        expr: "O(i) = I(i+r) * F(r)",
        decls: &[("O", &[40], "d", 1.0), ("I", &[44], "s", 0.4), ("F", &[5], "s", 0.6)],
        sizes: &[],
        seed: 2,
    };
    let schedules = reorders(&["i", "r"]);
    case.check(&schedules.iter().map(String::as_str).collect::<Vec<_>>());
}

#[test]
fn two_dimensional_convolution_in_every_loop_order() {
    for (format, out) in [("csr", "dense"), ("dcsr", "dense"), ("coo", "dense"), ("csr", "csr"), ("dcsr", "dcsr")] {
        let case = Case {
            expr: "O(i,j) = I(i+r, j+q) * F(r,q)",
            decls: &[("O", &[9, 11], out, 1.0), ("I", &[11, 13], format, 0.25), ("F", &[3, 3], "dense", 1.0)],
            sizes: &[],
            seed: 3,
        };
        let schedules = reorders(&["i", "j", "r", "q"]);
        let mut all: Vec<&str> = vec![""];
        all.extend(schedules.iter().map(String::as_str));
        case.check(&all);
    }
}

#[test]
fn strided_two_dimensional_convolution() {
    for format in ["csr", "dcsr", "coo"] {
        let case = Case {
            expr: "O(i,j) = I(2*i+r, 2*j+q) * F(r,q)",
            decls: &[("O", &[5, 6], "dense", 1.0), ("I", &[11, 13], format, 0.3), ("F", &[3, 3], "dense", 1.0)],
            sizes: &[],
            seed: 4,
        };
        let schedules = reorders(&["i", "j", "r", "q"]);
        let mut all: Vec<&str> = vec![""];
        all.extend(schedules.iter().map(String::as_str));
        case.check(&all);
    }
}

#[test]
fn three_dimensional_convolution_on_csf() {
    let case = Case {
        expr: "O(i,j,k) = I(i+r, j+q, k+p) * F(r,q,p)",
        decls: &[("O", &[6, 5, 7], "dense", 1.0), ("I", &[8, 7, 9], "csf", 0.2), ("F", &[3, 3, 3], "dense", 1.0)],
        sizes: &[],
        seed: 5,
    };
    case.check(&["", "reorder(i,r,j,q,k,p)", "reorder(r,q,p,i,j,k)"]);
}

#[test]
fn nhwc_convolution() {
    for format in ["ddds", "dsss"] {
        let case = Case {
            expr: "O(n,h,w,f) = I(n,h+r,w+q,c) * F(r,q,c,f)",
            decls: &[
                ("O", &[2, 5, 6, 3], "dense", 1.0),
                ("I", &[2, 7, 8, 4], format, 0.3),
                ("F", &[3, 3, 4, 3], "dense", 1.0),
            ],
            sizes: &[],
            seed: 6,
        };
        case.check(&["", "reorder(n,h,r,w,q,c,f)"]);
    }
}

#[test]
fn a_sum_with_a_sliding_operand() {
    for (b, c, out) in [("s", "s", "dense"), ("s", "s", "csr"), ("d", "s", "dense"), ("s", "d", "dense")] {
        let case = Case {
            expr: "A(i,j) = B(i) + C(i+j)",
            decls: &[("A", &[8, 6], out, 1.0), ("B", &[8], b, 0.4), ("C", &[13], c, 0.3)],
            sizes: &[],
            seed: 7,
        };
        case.check(&["", "reorder(j,i)"]);
    }
}

#[test]
fn a_constant_intercept() {
    for (b, c) in [("s", "s"), ("s", "d"), ("d", "s"), ("coo", "s")] {
        let case = Case {
            expr: "A(i) = B(i+2) * C(i)",
            decls: &[("A", &[30], "d", 1.0), ("B", &[32], b, 0.4), ("C", &[30], c, 0.5)],
            sizes: &[],
            seed: 8,
        };
        case.check(&[""]);
    }
}

#[test]
fn three_variables_in_one_subscript() {
    let case = Case {
        expr: "A(i) = B(i+j+k) * C(j) * D(k)",
        decls: &[("A", &[20], "d", 1.0), ("B", &[26], "s", 0.3), ("C", &[4], "s", 0.7), ("D", &[3], "dense", 1.0)],
        sizes: &[],
        seed: 9,
    };
    let schedules = reorders(&["i", "j", "k"]);
    case.check(&schedules.iter().map(String::as_str).collect::<Vec<_>>());
}

/// Found by the differential tests: COO's `l` level searched at the leaf (its parent, the
/// sliding `2*j+l+1`, resolved by an outer loop) must hand its children every entry with
/// that coordinate — the whole segment — not just the first.
#[test]
fn a_searched_non_unique_level_keeps_its_segment() {
    let case = Case {
        expr: "A(i,j) = B(i,j) * C(2*j+l+1,l,i)",
        decls: &[("A", &[5, 4], "csr", 1.0), ("B", &[5, 4], "ds:1,0", 1.0), ("C", &[13, 6, 5], "coo", 1.0)],
        sizes: &[("l", 6)],
        seed: 10,
    };
    case.check(&["", "reorder(l,j,i)", "reorder(j,i,l)"]);
}

/// Several tensors with compound subscripts, resolved in interleaved orders: `j` finishes
/// `B`'s window and starts `C`'s, `k` finishes `C`'s; two operands sliding together.
#[test]
fn several_sliding_operands() {
    let case = Case {
        expr: "A(i) = B(i+j) * C(j+k) * D(k)",
        decls: &[("A", &[12], "dense", 1.0), ("B", &[15], "s", 0.6), ("C", &[7], "s", 0.7), ("D", &[3], "s", 0.8)],
        sizes: &[("j", 4)],
        seed: 11,
    };
    let schedules = reorders(&["i", "j", "k"]);
    case.check(&schedules.iter().map(String::as_str).collect::<Vec<_>>());
    let case = Case {
        expr: "A(i,j) = B(i+r, j) * C(i+r, j+q) * F(r,q)",
        decls: &[
            ("A", &[6, 7], "csr", 1.0),
            ("B", &[8, 7], "csr", 0.6),
            ("C", &[8, 9], "dcsr", 0.5),
            ("F", &[3, 3], "dense", 1.0),
        ],
        sizes: &[],
        seed: 12,
    };
    let schedules = reorders(&["i", "j", "r", "q"]);
    let mut all: Vec<&str> = vec![""];
    all.extend(schedules.iter().map(String::as_str));
    case.check(&all);
}

/// A sliding product inside a difference: concretize makes it a `where` producer (`t = Σ_j
/// C(i+j) D(j)`), whose loops iterate `C`'s window inside the consumer's loop over `i`.
#[test]
fn a_sliding_product_in_a_where_producer() {
    for (b, c, out) in [("s", "s", "dense"), ("s", "s", "s"), ("dense", "s", "dense"), ("s", "coo", "s")] {
        let case = Case {
            expr: "A(i) = B(i) - C(i+j) * D(j)",
            decls: &[("A", &[20], out, 1.0), ("B", &[20], b, 0.5), ("C", &[23], c, 0.5), ("D", &[4], "s", 0.8)],
            sizes: &[],
            seed: 13,
        };
        case.check(&[""]);
    }
}

/// Found by the differential tests (seed 314159): `C`, read through a copy, has two rows
/// iterators on one level; their scratch arrays shared a name and the C did not compile.
#[test]
fn two_rows_iterators_on_one_level_have_arrays_of_their_own() {
    let case = Case {
        expr: "A(i) = B(i) - C(2*l+k+2,2*i+j) * D(l,j,2*k+1)",
        decls: &[
            ("A", &[3], "s", 1.0),
            ("B", &[3], "s", 0.7),
            ("C", &[6, 6], "ds:1,0", 0.6),
            ("D", &[2, 2, 4], "dense", 1.0),
        ],
        sizes: &[("k", 2)],
        seed: 12,
    };
    case.check(&[""]);
}

#[test]
fn a_rows_iterator_under_a_followed_level_without_an_entry_reads_nothing() {
    // D's level 0 is followed along `i`; where it has no entry for `i` (D empty, or a row of
    // D missing), the rows of level 1 that the window of `2*k+l` reaches are none — the
    // differential tests found the rows read from `D1_pos` one past its end.
    for density in [0.0, 0.3] {
        let case = Case {
            expr: "A(i) = B(i,k) + C(j,k+i+2,l) * D(i,2*k+l,j+l+2,l)",
            decls: &[
                ("A", &[3], "dense", 1.0),
                ("B", &[3, 2], "dcsc", 0.7),
                ("C", &[2, 6, 2], "dense", 1.0),
                ("D", &[3, 4, 5, 2], "sdss", density),
            ],
            sizes: &[],
            seed: 21,
        };
        case.check(&[""]);
    }
}

#[test]
fn true_convolutions_with_the_filter_flipped() {
    // `I(i + 2 - r)`: the filter read backwards, as scipy.signal.convolve does. The level is
    // walked in increasing coordinate order, so a loop order where the negative-coefficient
    // variable would resolve a compressed level is refused, by name; every other order runs.
    let cases = [
        Case {
            expr: "O(i) = I(i+2-r) * F(r)",
            decls: &[("O", &[40], "d", 1.0), ("I", &[42], "s", 0.3), ("F", &[3], "dense", 1.0)],
            sizes: &[],
            seed: 11,
        },
        Case {
            expr: "O(i) = I(i+2-r) * F(r)",
            decls: &[("O", &[40], "s", 1.0), ("I", &[42], "coo", 0.3), ("F", &[3], "dense", 1.0)],
            sizes: &[],
            seed: 12,
        },
        Case {
            expr: "O(i,j) = I(i+2-r, j+2-q) * F(r,q)",
            decls: &[("O", &[9, 11], "dense", 1.0), ("I", &[11, 13], "csr", 0.25), ("F", &[3, 3], "dense", 1.0)],
            sizes: &[],
            seed: 13,
        },
        Case {
            expr: "O(i,j) = I(i+2-r, j+2-q) * F(r,q)",
            decls: &[("O", &[9, 11], "dcsr", 1.0), ("I", &[11, 13], "dcsr", 0.25), ("F", &[3, 3], "dense", 1.0)],
            sizes: &[],
            seed: 14,
        },
        Case {
            expr: "O(i,j,k) = I(i+2-r, j+2-q, k+2-p) * F(r,q,p)",
            decls: &[("O", &[6, 5, 7], "dense", 1.0), ("I", &[8, 7, 9], "csf", 0.2), ("F", &[3, 3, 3], "dense", 1.0)],
            sizes: &[],
            seed: 15,
        },
    ];
    for case in &cases {
        let (operands, expected) = case.data();
        let stmt = parse(case.expr).unwrap();
        let vars: Vec<String> = stmt.vars.iter().map(|(_, v)| v.name.clone()).collect();
        let vars: Vec<&str> = vars.iter().map(String::as_str).collect();
        let mut schedules = vec![String::new()];
        if vars.len() <= 4 {
            schedules.extend(reorders(&vars));
        } else {
            // The 3-D case: filter outermost, and each filter variable before its own.
            schedules.extend(["reorder(r,q,p,i,j,k)".to_string(), "reorder(r,i,q,j,p,k)".to_string()]);
        }
        let (mut ran, mut refused) = (0, 0);
        for schedule in &schedules {
            let mut p = Program::new(case.expr).unwrap();
            for &(name, shape, format, _) in case.decls {
                p = p.tensor(name, shape, format).unwrap();
            }
            if !schedule.is_empty() {
                p = p.schedule(schedule);
            }
            match p.compile::<f64>(Backend::Interp) {
                Err(e) => {
                    assert!(!schedule.is_empty(), "{}: the default order must run: {e}", case.expr);
                    assert!(e.to_string().contains("negative coefficient"), "{} [{schedule}]: {e}", case.expr);
                    refused += 1;
                }
                Ok(_) => {
                    for backend in [Backend::Interp, Backend::Jit] {
                        assert_eq!(
                            case.run(schedule, &operands, backend),
                            expected,
                            "{} [{schedule}] {backend:?}",
                            case.expr
                        );
                    }
                    ran += 1;
                }
            }
        }
        // Orders with each negative-coefficient variable outside the variable it slides
        // against run (half of them per pair, at least).
        assert!(ran * 2 >= schedules.len(), "{}: {ran} orders ran, {refused} refused", case.expr);
    }
}

/// A window loop and the loop that resolves it (`q, j`) run as one pass over a row's entries
/// (`nm-lower/src/lower/entries.rs`): into a dense result; into a narrow row workspace, each
/// entry's outputs marked at once (rows of 148, so the marks of one entry may straddle two
/// words); a dilated filter (`2*q`), marked one by one and taken only over rows of a few entries
/// (40-wide rows at 30% take both it and the windows in one kernel); and filters too wide to
/// write out offset by offset (a loop over them), one wider than a word of marks.
#[test]
fn a_window_and_its_resolving_loop_as_one_pass_over_entries() {
    let schedules = ["", "reorder(i,r,q,j)", "reorder(r,i,q,j)"];
    for (format, out, density) in [
        ("csr", "dcsr", 0.25),
        ("csr", "dense", 0.5),
        ("dcsr", "csr", 0.05),
        ("dcsr", "dcsr", 0.5),
        ("csr", "coo", 0.3),
    ] {
        let case = Case {
            expr: "O(i,j) = I(i+r, j+q) * F(r,q)",
            decls: &[("O", &[9, 38], out, 1.0), ("I", &[11, 40], format, density), ("F", &[3, 3], "dense", 1.0)],
            sizes: &[],
            seed: 21,
        };
        case.check(&schedules);
    }
    for (format, out) in [("csr", "dcsr"), ("dcsr", "csr"), ("csr", "dense")] {
        let case = Case {
            expr: "O(i,j) = I(i+r, j+q) * F(r,q)",
            decls: &[("O", &[9, 148], out, 1.0), ("I", &[11, 150], format, 0.2), ("F", &[3, 3], "dense", 1.0)],
            sizes: &[],
            seed: 24,
        };
        case.check(&schedules);
    }
    for out in ["dense", "dcsr"] {
        let case = Case {
            expr: "O(i,j) = I(i+r, j+2*q) * F(r,q)",
            decls: &[("O", &[9, 36], out, 1.0), ("I", &[11, 40], "csr", 0.3), ("F", &[3, 3], "dense", 1.0)],
            sizes: &[],
            seed: 22,
        };
        case.check(&schedules);
    }
    for (out, density, filter) in [("d", 0.6, 12), ("s", 0.6, 12), ("s", 0.1, 12), ("s", 0.3, 70)] {
        let case = Case {
            expr: "O(i) = I(i+r) * F(r)",
            decls: &[("O", &[150], out, 1.0), ("I", &[149 + filter], "s", density), ("F", &[filter], "dense", 1.0)],
            sizes: &[],
            seed: 23,
        };
        case.check(&["", "reorder(r,i)"]);
    }
}

/// One entry whose outputs span three words of a row workspace's marks (`c = 130` with a
/// 70-wide filter: outputs 61..=130): a pass that marks an entry's outputs at once must not
/// take it, or the middle word's 64 outputs are lost.
#[test]
fn an_entry_whose_outputs_span_three_words_of_marks() {
    use nmsparse::format::{CoordinateList, Duplicates};
    let mut list = CoordinateList::new(vec![219]);
    list.push(&[130], 2.0);
    let i = Tensor::from_coordinates(&list, &Format::parse("s", 1).unwrap(), Duplicates::Reject).unwrap();
    let f = Tensor::from_dense(&[70], &(1..=70).map(f64::from).collect::<Vec<_>>(), &Format::dense(1)).unwrap();
    // O(j) = 2 · F(130 - j) for j in 61..=130.
    let expected: Vec<f64> =
        (0..150).map(|j| if (61..=130).contains(&j) { 2.0 * f64::from(131 - j as u32) } else { 0.0 }).collect();
    for backend in [Backend::Interp, Backend::Jit] {
        for schedule in ["", "reorder(r,i)"] {
            let mut p = Program::new("O(i) = I(i+r) * F(r)").unwrap();
            p = p
                .tensor("O", &[150], "s")
                .unwrap()
                .tensor("I", &[219], "s")
                .unwrap()
                .tensor("F", &[70], "dense")
                .unwrap();
            if !schedule.is_empty() {
                p = p.schedule(schedule);
            }
            let kernel = p.compile::<f64>(backend).unwrap();
            let out = kernel.run(&[("I", &i), ("F", &f)]).unwrap();
            assert_eq!(out.to_dense().unwrap(), expected, "[{schedule}] {backend:?}");
        }
    }
}
