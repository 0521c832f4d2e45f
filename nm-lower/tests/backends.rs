//! Hand-written loop IR kernels (what lowering will emit) run by the interpreter and by the C
//! back end: results must agree exactly with each other and with a dense reference computed
//! independently (small-integer data, so every sum is exact).

use nm_format::generate::{Values, uniform};
use nm_format::{Duplicates, Format, Indices, LevelStorage, Tensor};
use nm_lower::args::{ArgumentError, ArrayData, Borrowed};
use nm_lower::c::{CKernel, emit};
use nm_lower::interp::{InterpError, interpret};
use nm_lower::ir::build::{bin, float, int, load, var};
use nm_lower::ir::{ArrayId, BinOp, ElemType, Expr, Function, Role, ScalarType, Stmt, UnOp, VarId};
use nm_lower::jit::CCompiler;

fn cc() -> CCompiler {
    CCompiler::from_env().expect("a C compiler")
}

fn role_values(t: &str) -> Role {
    Role::Values { tensor: t.into() }
}

/// y(i) = A(i,j) * x(j), A in CSR with `m` rows: `scale * A_vals[p] * x[A_crd[p]]` summed.
fn spmv(m: i64, value: ElemType, scalar: ScalarType, scale: f64, parallel: bool) -> Function {
    let mut f = Function::new(if parallel { "spmv_par" } else { "spmv" });
    let pos = f.array("A1_pos", ElemType::I32, Role::Pos { tensor: "A".into(), level: 1 }, false);
    let crd = f.array("A1_crd", ElemType::I32, Role::Crd { tensor: "A".into(), level: 1 }, false);
    let vals = f.array("A_vals", value, role_values("A"), false);
    let x = f.array("x_vals", value, role_values("x"), false);
    let y = f.array("y_vals", value, role_values("y"), true);
    let (i, p, acc) = (f.var("i", ScalarType::Index), f.var("p", ScalarType::Index), f.var("acc", scalar));
    let product = bin(BinOp::Mul, bin(BinOp::Mul, float(scale), load(vals, var(p))), load(x, load(crd, var(p))));
    f.body = vec![Stmt::For {
        var: i,
        start: int(0),
        end: int(m),
        parallel,
        body: vec![
            Stmt::Decl(acc, float(0.0)),
            Stmt::For {
                var: p,
                start: load(pos, var(i)),
                end: load(pos, bin(BinOp::Add, var(i), int(1))),
                parallel: false,
                body: vec![Stmt::Assign(acc, bin(BinOp::Add, var(acc), product))],
            },
            Stmt::Store { array: y, index: var(i), value: var(acc), accumulate: false },
        ],
    }];
    f
}

fn csr_arrays(t: &Tensor<f64>) -> (Vec<i32>, Vec<i32>) {
    let LevelStorage::Compressed { pos: Indices::U32(pos), crd: Indices::U32(crd) } = &t.levels()[1] else {
        panic!("csr")
    };
    (pos.iter().map(|&v| v as i32).collect(), crd.iter().map(|&v| v as i32).collect())
}

#[test]
fn spmv_agrees_on_both_back_ends_and_with_the_dense_reference() {
    let (m, n) = (37usize, 23usize);
    let a = Tensor::from_coordinates(
        &uniform::<f64>(&[m, n], 0.2, Values::SmallIntegers(9), 5),
        &Format::csr(),
        Duplicates::Reject,
    )
    .unwrap();
    let x: Vec<f64> = (0..n).map(|j| (j % 5) as f64 - 2.0).collect();
    let dense = a.to_dense().unwrap();
    let expected: Vec<f64> = (0..m).map(|i| (0..n).map(|j| dense[i * n + j] * x[j]).sum()).collect();
    let (pos, crd) = csr_arrays(&a);
    for parallel in [false, true] {
        let f = spmv(m as i64, ElemType::F64, ScalarType::F64, 1.0, parallel);
        let args = || {
            vec![
                ArrayData::I32(pos.clone()),
                ArrayData::I32(crd.clone()),
                ArrayData::F64(a.values().to_vec()),
                ArrayData::F64(x.clone()),
                ArrayData::F64(vec![0.0; m]),
            ]
        };
        let mut by_interp = args();
        interpret(&f, &mut by_interp).unwrap();
        let mut by_c = args();
        let kernel = CKernel::compile(&f, &cc()).unwrap();
        kernel.run(&mut by_c).unwrap();
        assert_eq!(by_interp[4], ArrayData::F64(expected.clone()), "interpreter, parallel = {parallel}");
        assert_eq!(by_c[4], by_interp[4], "C, parallel = {parallel}");
    }
}

#[test]
fn f32_kernels_stay_in_f32_on_both_back_ends() {
    // 0.1 is not exact: C must compute in float (0.1f), as the interpreter does.
    let (m, n) = (16usize, 16usize);
    let a =
        Tensor::from_coordinates(&uniform::<f64>(&[m, n], 0.5, Values::Uniform, 9), &Format::csr(), Duplicates::Reject)
            .unwrap();
    let (pos, crd) = csr_arrays(&a);
    let vals: Vec<f32> = a.values().iter().map(|&v| v as f32).collect();
    let x: Vec<f32> = (0..n).map(|j| 0.3 + j as f32 * 0.7).collect();
    let f = spmv(m as i64, ElemType::F32, ScalarType::F32, 0.1, false);
    let args = || {
        vec![
            ArrayData::I32(pos.clone()),
            ArrayData::I32(crd.clone()),
            ArrayData::F32(vals.clone()),
            ArrayData::F32(x.clone()),
            ArrayData::F32(vec![0.0; m]),
        ]
    };
    let (mut by_interp, mut by_c) = (args(), args());
    interpret(&f, &mut by_interp).unwrap();
    CKernel::compile(&f, &cc()).unwrap().run(&mut by_c).unwrap();
    assert_eq!(by_c[4], by_interp[4]);
    // And the value is the f32 computation, not a rounded f64 one.
    let ArrayData::F32(y) = &by_interp[4] else { unreachable!() };
    let row0: f32 =
        (pos[0]..pos[1]).fold(0.0f32, |acc, p| acc + 0.1f32 * vals[p as usize] * x[crd[p as usize] as usize]);
    assert_eq!(y[0], row0);
    assert!(emit(&f).contains("0.1f"));
}

/// a(i) = b(i) + c(i) over two sparse vectors: a while loop merging both, then the tails,
/// assembling a compressed result whose arrays grow by doubling.
/// `a = b + c` on sparse vectors, `a` appended in a merge loop, its arrays grown by doubling
/// from 1; `written` ends it with `Written` statements, which make `a`'s `crd` and values
/// arrays the kernel only appends to (grown without zeroing by the C runner).
fn sparse_add(written: bool) -> Function {
    let mut f = Function::new("sparse_add");
    let level = |t: &str| Role::Crd { tensor: t.into(), level: 0 };
    let b_pos = f.array("b0_pos", ElemType::I32, Role::Pos { tensor: "b".into(), level: 0 }, false);
    let b_crd = f.array("b0_crd", ElemType::I32, level("b"), false);
    let b_vals = f.array("b_vals", ElemType::F64, role_values("b"), false);
    let c_pos = f.array("c0_pos", ElemType::I32, Role::Pos { tensor: "c".into(), level: 0 }, false);
    let c_crd = f.array("c0_crd", ElemType::I32, level("c"), false);
    let c_vals = f.array("c_vals", ElemType::F64, role_values("c"), false);
    let a_pos = f.array("a0_pos", ElemType::I64, Role::Pos { tensor: "a".into(), level: 0 }, true);
    let a_crd = f.array("a0_crd", ElemType::I32, level("a"), true);
    let a_vals = f.array("a_vals", ElemType::F64, role_values("a"), true);
    let v = |f: &mut Function, n: &str| f.var(n, ScalarType::Index);
    let (pb, pc, pa, cap, ib, ic, i) = (
        v(&mut f, "pb"),
        v(&mut f, "pc"),
        v(&mut f, "pa"),
        v(&mut f, "cap"),
        v(&mut f, "ib"),
        v(&mut f, "ic"),
        v(&mut f, "i"),
    );
    let grow = || Stmt::If {
        cond: bin(BinOp::Le, var(cap), var(pa)),
        then: vec![
            Stmt::Assign(cap, bin(BinOp::Mul, var(cap), int(2))),
            Stmt::Resize { array: a_crd, len: var(cap) },
            Stmt::Resize { array: a_vals, len: var(cap) },
        ],
        otherwise: vec![],
    };
    let append = |coord: nm_lower::ir::Expr, value: nm_lower::ir::Expr| {
        vec![
            grow(),
            Stmt::Store { array: a_crd, index: var(pa), value: coord, accumulate: false },
            Stmt::Store { array: a_vals, index: var(pa), value, accumulate: false },
            Stmt::Assign(pa, bin(BinOp::Add, var(pa), int(1))),
        ]
    };
    let in_b = bin(BinOp::Lt, var(pb), load(b_pos, int(1)));
    let in_c = bin(BinOp::Lt, var(pc), load(c_pos, int(1)));
    let mut merge = vec![
        Stmt::Decl(ib, load(b_crd, var(pb))),
        Stmt::Decl(ic, load(c_crd, var(pc))),
        Stmt::Decl(i, bin(BinOp::Min, var(ib), var(ic))),
        Stmt::If {
            cond: bin(BinOp::And, bin(BinOp::Eq, var(ib), var(i)), bin(BinOp::Eq, var(ic), var(i))),
            then: append(var(i), bin(BinOp::Add, load(b_vals, var(pb)), load(c_vals, var(pc)))),
            otherwise: vec![Stmt::If {
                cond: bin(BinOp::Eq, var(ib), var(i)),
                then: append(var(i), load(b_vals, var(pb))),
                otherwise: append(var(i), load(c_vals, var(pc))),
            }],
        },
    ];
    merge.push(Stmt::If {
        cond: bin(BinOp::Eq, var(ib), var(i)),
        then: vec![Stmt::Assign(pb, bin(BinOp::Add, var(pb), int(1)))],
        otherwise: vec![],
    });
    merge.push(Stmt::If {
        cond: bin(BinOp::Eq, var(ic), var(i)),
        then: vec![Stmt::Assign(pc, bin(BinOp::Add, var(pc), int(1)))],
        otherwise: vec![],
    });
    let mut tail_b = append(load(b_crd, var(pb)), load(b_vals, var(pb)));
    tail_b.push(Stmt::Assign(pb, bin(BinOp::Add, var(pb), int(1))));
    let mut tail_c = append(load(c_crd, var(pc)), load(c_vals, var(pc)));
    tail_c.push(Stmt::Assign(pc, bin(BinOp::Add, var(pc), int(1))));
    f.body = vec![
        Stmt::Decl(pb, load(b_pos, int(0))),
        Stmt::Decl(pc, load(c_pos, int(0))),
        Stmt::Decl(pa, int(0)),
        Stmt::Decl(cap, int(1)),
        Stmt::Resize { array: a_crd, len: var(cap) },
        Stmt::Resize { array: a_vals, len: var(cap) },
        Stmt::While { cond: bin(BinOp::And, in_b.clone(), in_c.clone()), body: merge },
        Stmt::While { cond: in_b, body: tail_b },
        Stmt::While { cond: in_c, body: tail_c },
        Stmt::Resize { array: a_pos, len: int(2) },
        Stmt::Store { array: a_pos, index: int(1), value: var(pa), accumulate: false },
    ];
    if written {
        f.body.push(Stmt::Written { array: a_crd, len: var(pa) });
        f.body.push(Stmt::Written { array: a_vals, len: var(pa) });
    }
    f
}

/// A sparse vector's `pos`, `crd` and values, and its dense form.
type Vector = (Vec<i32>, Vec<i32>, Vec<f64>, Vec<f64>);

fn vector(seed: u64, n: usize, density: f64) -> Vector {
    let t = Tensor::from_coordinates(
        &uniform::<f64>(&[n], density, Values::SmallIntegers(9), seed),
        &Format::parse("s", 1).unwrap(),
        Duplicates::Reject,
    )
    .unwrap();
    let LevelStorage::Compressed { pos: Indices::U32(pos), crd: Indices::U32(crd) } = &t.levels()[0] else { panic!() };
    (
        pos.iter().map(|&v| v as i32).collect(),
        crd.iter().map(|&v| v as i32).collect(),
        t.values().to_vec(),
        t.to_dense().unwrap(),
    )
}

/// The arguments of [`sparse_add`] for operands `b` and `c` (from [`vector`]), `a` empty.
fn merge_args(b: &Vector, c: &Vector) -> Vec<ArrayData<'static>> {
    vec![
        ArrayData::I32(b.0.clone()),
        ArrayData::I32(b.1.clone()),
        ArrayData::F64(b.2.clone()),
        ArrayData::I32(c.0.clone()),
        ArrayData::I32(c.1.clone()),
        ArrayData::F64(c.2.clone()),
        ArrayData::I64(vec![0]),
        ArrayData::I32(vec![]),
        ArrayData::F64(vec![]),
    ]
}

#[test]
fn a_merge_loop_assembles_the_same_sparse_result_on_both_back_ends() {
    for written in [false, true] {
        let f = sparse_add(written);
        // Only `a`'s crd and values (parameters 7 and 8) are appended, and only when `Written`
        // says how much of them the kernel wrote.
        let appended: Vec<usize> = (0..9).filter(|&k| nm_lower::ir::appended(&f)[k]).collect();
        assert_eq!(appended, if written { vec![7, 8] } else { vec![] });
        merge_on_both_back_ends(&f, written);
    }
}

fn merge_on_both_back_ends(f: &Function, written: bool) {
    let kernel = CKernel::compile(f, &cc()).unwrap();
    // Up to 4000 entries: a dozen doublings, each keeping what the kernel wrote before it.
    for (seed, db, dc, n) in [
        (1, 0.3, 0.3, 50),
        (2, 0.0, 0.5, 50),
        (3, 0.5, 0.0, 50),
        (4, 1.0, 0.1, 50),
        (5, 0.0, 0.0, 50),
        (6, 0.7, 0.6, 4000),
    ] {
        let (b, c) = (vector(seed, n, db), vector(seed + 100, n, dc));
        let (bd, cd) = (b.3.clone(), c.3.clone());
        let (mut by_interp, mut by_c) = (merge_args(&b, &c), merge_args(&b, &c));
        interpret(f, &mut by_interp).unwrap();
        kernel.run(&mut by_c).unwrap();
        assert_eq!(by_c, by_interp, "seed {seed}");
        let ArrayData::I64(pos) = &by_c[6] else { unreachable!() };
        if written {
            // `Written` left exactly the entries, on both back ends.
            assert_eq!((by_c[7].len(), by_c[8].len()), (pos[1] as usize, pos[1] as usize), "seed {seed}");
        }
        // Build the result from the kernel's arrays (validated) and compare densely.
        let ArrayData::I32(crd) = &by_c[7] else { unreachable!() };
        let ArrayData::F64(vals) = &by_c[8] else { unreachable!() };
        let nnz = pos[1] as usize;
        let levels = vec![LevelStorage::Compressed {
            pos: Indices::from_usize(pos.iter().map(|&p| p as usize).collect()),
            crd: Indices::from_usize(crd[..nnz].iter().map(|&c| c as usize).collect()),
        }];
        let a = Tensor::from_raw(vec![n], Format::parse("s", 1).unwrap(), levels, vals[..nnz].to_vec()).unwrap();
        let expected: Vec<f64> = bd.iter().zip(&cd).map(|(x, y)| x + y).collect();
        assert_eq!(a.to_dense().unwrap(), expected, "seed {seed}");
    }
}

/// An output the kernel reads or adds into is not one it only appends to: it keeps zeroed
/// growth; and a `Written` length beyond such an output's elements is an error on both back
/// ends.
#[test]
fn outputs_read_or_accumulated_are_not_appended() {
    use nm_ir::id::Id;
    let f = sparse_add(true);
    let (a_crd, a_vals) = (ArrayId::new(7), ArrayId::new(8));
    let mut read = f.clone();
    let peek = read.var("peek", ScalarType::Index);
    read.body.push(Stmt::Decl(peek, load(a_crd, int(0))));
    assert!(!nm_lower::ir::appended(&read)[7] && nm_lower::ir::appended(&read)[8]);
    let mut added = f.clone();
    added.body.insert(0, Stmt::Resize { array: a_vals, len: int(1) });
    added.body.insert(1, Stmt::Store { array: a_vals, index: int(0), value: float(1.0), accumulate: true });
    assert!(nm_lower::ir::appended(&added)[7] && !nm_lower::ir::appended(&added)[8]);
    // A count that starts at a row range's first entry (`bounds[3]`) at the top level is still
    // appended to; one set from it inside a statement, or from another element, is not.
    let count = f.vars.iter().find(|(_, d)| d.name == "pa").map(|(v, _)| v).unwrap();
    let starting = |at: Option<i64>, nested: bool| {
        let mut g = f.clone();
        let bounds = g.array("row_bounds", ElemType::I64, Role::Bounds, false);
        let start = Stmt::Assign(count, load(bounds, int(at.unwrap_or(3))));
        let start = if nested { Stmt::If { cond: int(1), then: vec![start], otherwise: vec![] } } else { start };
        let declared = g.body.iter().position(|s| matches!(s, Stmt::Decl(v, _) if *v == count)).unwrap();
        g.body.insert(declared + 1, start);
        let appended = nm_lower::ir::appended(&g);
        (appended[7], appended[8])
    };
    assert_eq!(starting(None, false), (true, true));
    assert_eq!(starting(None, true), (false, false));
    assert_eq!(starting(Some(2), false), (false, false));
    // Too long a `Written` on a zeroed output: refused, not believed.
    let mut long = sparse_add(false);
    long.body.push(Stmt::Written { array: ArrayId::new(6), len: int(3) });
    assert!(!nm_lower::ir::appended(&long)[6]);
    let kernel = CKernel::compile(&long, &cc()).unwrap();
    let b = vector(1, 20, 0.5);
    assert!(interpret(&long, &mut merge_args(&b, &b)).is_err());
    let e = kernel.run(&mut merge_args(&b, &b)).unwrap_err();
    assert!(e.to_string().contains("a0_pos"), "{e}");
}

#[test]
fn bad_arguments_and_out_of_bounds_accesses_are_errors() {
    let f = spmv(3, ElemType::F64, ScalarType::F64, 1.0, false);
    let mut too_few = vec![ArrayData::I32(vec![0, 0, 0, 0])];
    assert!(matches!(
        interpret(&f, &mut too_few),
        Err(InterpError::Arguments(ArgumentError::Count { expected: 5, given: 1, .. }))
    ));
    let mut wrong = vec![
        ArrayData::I64(vec![0, 0, 0, 0]),
        ArrayData::I32(vec![]),
        ArrayData::F64(vec![]),
        ArrayData::F64(vec![]),
        ArrayData::F64(vec![0.0; 3]),
    ];
    let e = interpret(&f, &mut wrong).unwrap_err();
    assert_eq!(e.to_string(), "array `A1_pos` is declared I32 but I64 was given");
    let kernel = CKernel::compile(&f, &cc()).unwrap();
    assert_eq!(kernel.run(&mut wrong).unwrap_err().to_string(), "array `A1_pos` is declared I32 but I64 was given");
    // pos says row 0 has one entry, but crd is empty.
    let mut short = vec![
        ArrayData::I32(vec![0, 1, 1, 1]),
        ArrayData::I32(vec![]),
        ArrayData::F64(vec![]),
        ArrayData::F64(vec![]),
        ArrayData::F64(vec![0.0; 3]),
    ];
    assert_eq!(interpret(&f, &mut short).unwrap_err().to_string(), "index 0 is outside `A_vals` (length 0)");
}

/// `out[i] = op(words[i])` over 64-bit words: the kernel, and its output on both back ends
/// (which must agree).
fn unary_on_words(op: UnOp, out_elem: ElemType, input: &[u64]) -> (Function, Vec<i128>) {
    let mut f = Function::new("unary");
    let words = f.array("words", ElemType::U64, Role::Scratch, false);
    let out = f.array("out", out_elem, Role::Scratch, true);
    let i = f.var("i", ScalarType::Index);
    f.body = vec![Stmt::For {
        var: i,
        start: int(0),
        end: nm_lower::ir::Expr::Len(words),
        parallel: false,
        body: vec![Stmt::Store {
            array: out,
            index: var(i),
            value: nm_lower::ir::Expr::Unary(op, Box::new(load(words, var(i)))),
            accumulate: false,
        }],
    }];
    let fresh = || match out_elem {
        ElemType::U64 => ArrayData::U64(vec![7; input.len()]),
        _ => ArrayData::I64(vec![7; input.len()]),
    };
    let mut by_interp = vec![ArrayData::U64(input.to_vec()), fresh()];
    interpret(&f, &mut by_interp).unwrap();
    let mut by_c = vec![ArrayData::U64(input.to_vec()), fresh()];
    CKernel::compile(&f, &cc()).unwrap().run(&mut by_c).unwrap();
    let values = |arrays: &[ArrayData]| -> Vec<i128> {
        match &arrays[1] {
            ArrayData::U64(v) => v.iter().map(|&x| x as i128).collect(),
            ArrayData::I64(v) => v.iter().map(|&x| x as i128).collect(),
            _ => unreachable!(),
        }
    };
    assert_eq!(values(&by_interp), values(&by_c), "{f}");
    let got = values(&by_c);
    (f, got)
}

#[test]
fn trailing_zeros_agree_on_both_back_ends() {
    // ctz of nonzero words, the top bit alone among them.
    let input = [1u64, 2, 0b1011000, 1 << 63, u64::MAX, 1 << 40 | 1 << 50];
    let (f, got) = unary_on_words(UnOp::TrailingZeros, ElemType::I64, &input);
    assert_eq!(got, vec![0, 1, 3, 63, 0, 40]);
    assert!(f.to_string().contains("out[i] = ctz(words[i])"), "{f}");
    // Zero has no lowest set bit (undefined in C): the interpreter says so.
    let mut zero = vec![ArrayData::U64(vec![4, 0]), ArrayData::I64(vec![0; 2])];
    assert!(matches!(interpret(&f, &mut zero), Err(InterpError::TrailingZerosOfZero)));
}

#[test]
fn clearing_the_lowest_bit_agrees_on_both_back_ends() {
    // On the 64 bits: the top bit alone (INT64_MIN as an index, where `x - 1` would overflow
    // a signed subtraction) and zero included.
    let input = [1u64, 0b1011000, 1 << 63, u64::MAX, 1 << 40 | 1 << 50, 0];
    let (f, got) = unary_on_words(UnOp::ClearLowestBit, ElemType::U64, &input);
    let expected: Vec<i128> = [0u64, 0b1010000, 0, u64::MAX - 1, 1 << 50, 0].iter().map(|&x| x as i128).collect();
    assert_eq!(got, expected);
    assert!(f.to_string().contains("out[i] = clear_lowest(words[i])"), "{f}");
}

#[test]
fn the_ir_prints() {
    let text = spmv(4, ElemType::F64, ScalarType::F64, 2.0, true).to_string();
    assert_eq!(
        text,
        "kernel spmv_par(\n  A1_pos: [I32] Pos { tensor: \"A\", level: 1 },\n  A1_crd: [I32] Crd { tensor: \"A\", level: 1 },\n  A_vals: [F64] Values { tensor: \"A\" },\n  x_vals: [F64] Values { tensor: \"x\" },\n  out y_vals: [F64] Values { tensor: \"y\" },\n) {\n  parallel for i in 0..4 {\n    let acc: F64 = 0.0\n    for p in A1_pos[i]..A1_pos[i + 1] {\n      acc = acc + ((2.0 * A_vals[p]) * x_vals[A1_crd[p]])\n    }\n    y_vals[i] = acc\n  }\n}\n"
    );
}

#[test]
fn operands_are_passed_in_place_and_outputs_must_be_writable() {
    use nm_ir::concrete::concretize;
    use nm_ir::notation::{Declarations, TensorType, parse};
    use nm_lower::lower::{arguments, lower};
    let stmt = parse("y(i) = A(i,j) * x(j)").unwrap();
    let decls = Declarations::new()
        .tensor("y", TensorType::dense(&[3]))
        .tensor("A", TensorType::sparse(&[3, 4], Format::csr()))
        .tensor("x", TensorType::dense(&[4]));
    let types = stmt.check(&decls).unwrap();
    let lowered = lower(&concretize(&stmt), &types, ElemType::F64).unwrap();
    let a = Tensor::from_dense(&[3, 4], &[1., 0., 2., 0., 0., 0., 0., 3., 4., 0., 0., 5.], &Format::csr()).unwrap();
    let x = Tensor::from_dense(&[4], &[1., 2., 3., 4.], &Format::dense(1)).unwrap();
    let mut arrays = arguments(&lowered, &[None, Some(&a), Some(&x)], 3).unwrap();
    // Every operand array is the tensor's own memory.
    let LevelStorage::Compressed { pos, crd } = &a.levels()[1] else { unreachable!() };
    let addresses: Vec<*const u8> = arrays
        .iter()
        .filter_map(|d| match d {
            ArrayData::Borrowed(Borrowed::U32(v)) => Some(v.as_ptr().cast()),
            ArrayData::Borrowed(Borrowed::F64(v)) => Some(v.as_ptr().cast()),
            _ => None,
        })
        .collect();
    let (Indices::U32(pos), Indices::U32(crd)) = (pos, crd) else { unreachable!() };
    let expected: Vec<*const u8> =
        vec![pos.as_ptr().cast(), crd.as_ptr().cast(), a.values().as_ptr().cast(), x.values().as_ptr().cast()];
    assert_eq!(addresses, expected);
    interpret(&lowered.function, &mut arrays).unwrap();
    assert_eq!(arrays[0], ArrayData::F64(vec![7., 12., 24.]));
    // An output handed over read-only is refused by both back ends, before anything runs.
    let values = [0.0; 3];
    arrays[0] = ArrayData::Borrowed(Borrowed::F64(&values));
    let e = interpret(&lowered.function, &mut arrays).unwrap_err();
    assert!(matches!(&e, InterpError::Arguments(ArgumentError::ReadOnly { array }) if array == "y_vals"), "{e}");
    let k = CKernel::compile(&lowered.function, &cc()).unwrap();
    assert!(k.run(&mut arrays).is_err());
}

/// SpMV as [`spmv`] builds it, with the inner loop's body made by `inner(acc, y, product)`.
fn spmv_with(m: i64, inner: impl Fn(VarId, ArrayId, Expr) -> Vec<Stmt>) -> Function {
    let mut f = spmv(m, ElemType::F64, ScalarType::F64, 1.0, false);
    let y = f.arrays.iter().find(|(_, a)| a.name == "y_vals").expect("y").0;
    let Stmt::For { body, .. } = &mut f.body[0] else { unreachable!() };
    let Stmt::For { body: row, .. } = &mut body[1] else { unreachable!() };
    let Stmt::Assign(acc, Expr::Binary(BinOp::Add, _, product)) = row[0].clone() else { unreachable!() };
    *row = inner(acc, y, *product);
    f
}

/// The partial-sums pass (`nm_lower::partial_sums`) on SpMV over rows of every length from 0
/// to 20 (and 33, 64) with inexact values: both back ends give the same bits, which are those
/// of the order the pass documents — rows under 8 entries summed in sequence, longer ones in
/// four partial sums (entry `q` of the row into sum `q mod 4`) added as `(s0 + s1) + (s2 +
/// s3)`; with `acc = acc - term` the same with every term negated.
#[test]
fn reductions_in_partial_sums_agree_on_both_back_ends_in_the_documented_order() {
    let lengths: Vec<usize> = (0..=20).chain([33, 64]).collect();
    let m = lengths.len();
    let n = 70;
    let mut pos = vec![0i32];
    let mut crd = Vec::new();
    for (i, &len) in lengths.iter().enumerate() {
        crd.extend((0..len).map(|q| ((q * 7 + i) % n) as i32));
        pos.push(crd.len() as i32);
    }
    let vals: Vec<f64> = (0..crd.len()).map(|p| 0.1 + (p as f64 * 0.37).sin()).collect();
    let x: Vec<f64> = (0..n).map(|j| 1.0 / (j as f64 + 3.0)).collect();
    for negate in [false, true] {
        let op = if negate { BinOp::Sub } else { BinOp::Add };
        let mut f = spmv_with(m as i64, |acc, _, product| vec![Stmt::Assign(acc, bin(op, var(acc), product))]);
        nm_lower::partial_sums::interleave(&mut f);
        assert!(f.to_string().contains("acc_1"), "{f}");
        let args = || {
            vec![
                ArrayData::I32(pos.clone()),
                ArrayData::I32(crd.clone()),
                ArrayData::F64(vals.clone()),
                ArrayData::F64(x.clone()),
                ArrayData::F64(vec![0.0; m]),
            ]
        };
        let (mut by_interp, mut by_c) = (args(), args());
        interpret(&f, &mut by_interp).unwrap();
        CKernel::compile(&f, &cc()).unwrap().run(&mut by_c).unwrap();
        assert_eq!(by_c[4], by_interp[4], "negate = {negate}");
        let ArrayData::F64(y) = &by_interp[4] else { unreachable!() };
        for (i, &len) in lengths.iter().enumerate() {
            let term = |q: usize| {
                let p = pos[i] as usize + q;
                let t = vals[p] * x[crd[p] as usize];
                if negate { -t } else { t }
            };
            let sequential = (0..len).fold(0.0, |acc, q| acc + term(q));
            let expected = if len < 8 {
                sequential
            } else {
                let mut s = [0.0f64; 4];
                for q in 0..len {
                    s[q % 4] += term(q);
                }
                (s[0] + s[1]) + (s[2] + s[3])
            };
            assert_eq!(y[i].to_bits(), expected.to_bits(), "row {i} ({len} entries), negate = {negate}");
            assert!((y[i] - sequential).abs() <= 1e-12 * (1.0 + sequential.abs()), "row {i}");
        }
    }
}

/// Loops the pass must leave alone: a sum read inside its loop, a body that stores, a sum
/// of indices.
#[test]
fn reductions_the_pass_cannot_split_are_left_alone() {
    let cases: [Function; 3] = [
        spmv_with(4, |acc, y, product| {
            vec![
                Stmt::Store { array: y, index: int(0), value: var(acc), accumulate: false },
                Stmt::Assign(acc, bin(BinOp::Add, var(acc), product)),
            ]
        }),
        spmv_with(4, |acc, y, product| {
            vec![
                Stmt::Assign(acc, bin(BinOp::Add, var(acc), product.clone())),
                Stmt::Store { array: y, index: int(0), value: product, accumulate: true },
            ]
        }),
        spmv_with(4, |acc, _, product| vec![Stmt::Assign(acc, bin(BinOp::Mul, var(acc), product))]),
    ];
    for mut f in cases {
        let before = f.to_string();
        nm_lower::partial_sums::interleave(&mut f);
        assert_eq!(f.to_string(), before);
    }
}

/// The loop IR's verifier accepts a well-formed kernel and names each broken rule: a variable
/// read where no enclosing block declares it, a store into an operand, `break` outside a
/// loop, a float stored into an index array, a condition that is a float.
#[test]
fn the_verifier_names_each_broken_rule() {
    let well_formed = || {
        let mut f = Function::new("k");
        let x = f.array("x", ElemType::F64, Role::Values { tensor: "x".into() }, false);
        let y = f.array("y", ElemType::F64, Role::Values { tensor: "y".into() }, true);
        let pos = f.array("p", ElemType::I64, Role::Scratch, true);
        let i = f.var("i", ScalarType::Index);
        let s = f.var("s", ScalarType::F64);
        (f, x, y, pos, i, s)
    };
    let (mut f, x, y, _, i, s) = well_formed();
    f.body = vec![Stmt::For {
        var: i,
        start: int(0),
        end: int(4),
        body: vec![
            Stmt::Decl(s, bin(BinOp::Mul, load(x, var(i)), float(2.0))),
            Stmt::Store { array: y, index: var(i), value: var(s), accumulate: true },
        ],
        parallel: false,
    }];
    f.verify().unwrap();
    let broken = |body: Vec<Stmt>, expected: &str| {
        let (mut f, ..) = well_formed();
        f.body = body;
        let e = f.verify().unwrap_err().to_string();
        assert!(e.contains(expected), "{e}");
    };
    broken(vec![Stmt::Assign(s, float(1.0))], "`s` is used where no enclosing block declares it");
    broken(
        vec![
            Stmt::For { var: i, start: int(0), end: int(4), body: vec![Stmt::Decl(s, float(0.0))], parallel: false },
            Stmt::Store { array: y, index: int(0), value: var(s), accumulate: false },
        ],
        "`s` is used where no enclosing block declares it",
    );
    broken(
        vec![Stmt::Store { array: x, index: int(0), value: float(1.0), accumulate: false }],
        "a store writes `x`, which is not an output",
    );
    broken(vec![Stmt::Break], "`break` outside a loop");
    let (_, _, _, p, ..) = well_formed();
    broken(
        vec![Stmt::Store { array: p, index: int(0), value: load(x, int(0)), accumulate: false }],
        "a stored value is Scalar(F64) where Index is needed",
    );
    broken(vec![Stmt::If { cond: load(x, int(0)), then: vec![], otherwise: vec![] }], "an `if` condition");
}
