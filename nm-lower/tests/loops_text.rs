//! The loop IR's text form: every kernel the lowering makes prints, parses back to the same
//! kernel (up to which ids its variables have) and prints the same text; hand-written text
//! runs on both back ends; malformed text is refused with its line.

use nm_format::{Format, Tensor};
use nm_ir::concrete::{concretize_for, parse_schedule};
use nm_ir::notation::{Declarations, TensorType, parse};
use nm_lower::args::ArrayData;
use nm_lower::c::CKernel;
use nm_lower::interp::interpret;
use nm_lower::ir::{Expr, Function, Stmt, VarId};
use nm_lower::jit::CCompiler;
use nm_lower::lower::lower;
use std::collections::HashMap;

/// Whether `a` and `b` are the same kernel up to variable ids: the same arrays, and bodies
/// that match statement by statement, each variable of `a` standing for the one of `b`
/// declared at the same place.
fn same_kernel(a: &Function, b: &Function) -> bool {
    let arrays = a.arrays.iter().map(|(_, d)| d.clone()).collect::<Vec<_>>().len() == b.arrays.iter().count()
        && a.arrays.iter().zip(b.arrays.iter()).all(|((_, x), (_, y))| {
            x.name == y.name && x.elem == y.elem && x.output == y.output && same_role(&x.role, &y.role)
        });
    arrays
        && a.atomic == b.atomic
        && a.omp_schedule == b.omp_schedule
        && Matcher::default().block(a, b, &a.body, &b.body)
}

/// Roles equal but for a workspace's capacity, which the text leaves out.
fn same_role(x: &nm_lower::ir::Role, y: &nm_lower::ir::Role) -> bool {
    use nm_lower::ir::Role::Workspace;
    match (x, y) {
        (Workspace { extents: e1, kinds: k1, config: c1 }, Workspace { extents: e2, kinds: k2, config: c2 }) => {
            e1 == e2
                && k1 == k2
                && c1.policy == c2.policy
                && c1.pipelined == c2.pipelined
                && c1.double_buffered == c2.double_buffered
        }
        _ => x == y,
    }
}

/// The variables of `a` bound to those of `b` so far, with their types checked.
#[derive(Default)]
struct Matcher {
    bound: HashMap<VarId, VarId>,
}

impl Matcher {
    fn bind(&mut self, fa: &Function, fb: &Function, x: VarId, y: VarId) -> bool {
        self.bound.insert(x, y);
        fa.vars[x].ty == fb.vars[y].ty && fa.vars[x].name == fb.vars[y].name
    }

    fn block(&mut self, fa: &Function, fb: &Function, a: &[Stmt], b: &[Stmt]) -> bool {
        let saved = self.bound.clone();
        let same = a.len() == b.len() && a.iter().zip(b).all(|(x, y)| self.stmt(fa, fb, x, y));
        self.bound = saved;
        same
    }

    fn expr(&self, a: &Expr, b: &Expr) -> bool {
        match (a, b) {
            (Expr::Var(x), Expr::Var(y)) => self.bound.get(x) == Some(y),
            (Expr::Int(x), Expr::Int(y)) => x == y,
            (Expr::Float(x), Expr::Float(y)) => x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
            (Expr::Len(x), Expr::Len(y)) => x == y,
            (Expr::Load(x, i), Expr::Load(y, j)) => x == y && self.expr(i, j),
            (Expr::Unary(o, x), Expr::Unary(p, y)) => o == p && self.expr(x, y),
            (Expr::Binary(o, x1, x2), Expr::Binary(p, y1, y2)) => o == p && self.expr(x1, y1) && self.expr(x2, y2),
            (Expr::Select(c, x1, x2), Expr::Select(d, y1, y2)) => {
                self.expr(c, d) && self.expr(x1, y1) && self.expr(x2, y2)
            }
            _ => false,
        }
    }

    fn stmt(&mut self, fa: &Function, fb: &Function, a: &Stmt, b: &Stmt) -> bool {
        match (a, b) {
            (Stmt::Decl(x, e), Stmt::Decl(y, f)) => self.expr(e, f) && self.bind(fa, fb, *x, *y),
            (Stmt::Assign(x, e), Stmt::Assign(y, f)) => self.bound.get(x) == Some(y) && self.expr(e, f),
            (
                Stmt::For { var: x, start: s1, end: e1, body: b1, parallel: p1 },
                Stmt::For { var: y, start: s2, end: e2, body: b2, parallel: p2 },
            ) => {
                if !(p1 == p2 && self.expr(s1, s2) && self.expr(e1, e2)) {
                    return false;
                }
                let saved = self.bound.clone();
                let same = self.bind(fa, fb, *x, *y) && self.block(fa, fb, b1, b2);
                self.bound = saved;
                same
            }
            (Stmt::While { cond: c, body: b1 }, Stmt::While { cond: d, body: b2 }) => {
                self.expr(c, d) && self.block(fa, fb, b1, b2)
            }
            (Stmt::If { cond: c, then: t1, otherwise: o1 }, Stmt::If { cond: d, then: t2, otherwise: o2 }) => {
                self.expr(c, d) && self.block(fa, fb, t1, t2) && self.block(fa, fb, o1, o2)
            }
            (
                Stmt::Store { array: x, index: i, value: v, accumulate: p },
                Stmt::Store { array: y, index: j, value: w, accumulate: q },
            ) => x == y && p == q && self.expr(i, j) && self.expr(v, w),
            (
                Stmt::Insert { workspace: x, key: k1, first: f1, value: v1 },
                Stmt::Insert { workspace: y, key: k2, first: f2, value: v2 },
            ) => x == y && self.expr(k1, k2) && self.expr(f1, f2) && self.expr(v1, v2),
            (Stmt::Resize { array: x, len: l1 }, Stmt::Resize { array: y, len: l2 })
            | (Stmt::Written { array: x, len: l1 }, Stmt::Written { array: y, len: l2 }) => x == y && self.expr(l1, l2),
            (Stmt::Prefetch { array: x, index: i }, Stmt::Prefetch { array: y, index: j }) => x == y && self.expr(i, j),
            (
                Stmt::PrefetchBucket { workspace: x, bucket: i, line: l1 },
                Stmt::PrefetchBucket { workspace: y, bucket: j, line: l2 },
            ) => x == y && l1 == l2 && self.expr(i, j),
            (
                Stmt::Sort { array: x, start: s1, end: e1, scratch: t1 },
                Stmt::Sort { array: y, start: s2, end: e2, scratch: t2 },
            ) => x == y && t1 == t2 && self.expr(s1, s2) && self.expr(e1, e2),
            (Stmt::Finish { workspace: x }, Stmt::Finish { workspace: y }) => x == y,
            (Stmt::Break, Stmt::Break) => true,
            _ => false,
        }
    }
}

/// Lowers `expr` for the tensors `(name, shape, format)` (dense where the format is empty).
fn lowered(expr: &str, schedule: &str, tensors: &[(&str, &[usize], &str)]) -> Function {
    let stmt = parse(expr).unwrap();
    let mut decls = Declarations::new();
    for (name, shape, format) in tensors {
        let ty = match *format {
            "" => TensorType::dense(shape),
            f => TensorType::sparse(shape, Format::parse(f, shape.len()).unwrap()),
        };
        decls = decls.tensor(name, ty);
    }
    let types = stmt.check(&decls).unwrap();
    let mut cin = concretize_for(&stmt, &types, &nm_lower::lower::LOOP_ORDER);
    if !schedule.is_empty() {
        cin = cin.schedule(&parse_schedule(schedule).unwrap()).unwrap();
    }
    lower(&cin, &types, nm_lower::ir::ElemType::F64).unwrap_or_else(|e| panic!("{expr}: {e}")).function
}

/// Kernels of every shape the lowering makes: merges, dense and sparse results, row and
/// sparse workspaces, `where` producers, compound subscripts (windows, rows iterators,
/// searches), structured and vector-wise N:M operands, COO segments, splits, `pos`, threads.
fn corpus() -> Vec<Function> {
    vec![
        lowered("y(i) = A(i,j) * x(j)", "", &[("y", &[30], ""), ("A", &[30, 20], "csr"), ("x", &[20], "")]),
        lowered("a(i) = b(i) + c(i)", "", &[("a", &[40], "s"), ("b", &[40], "s"), ("c", &[40], "s")]),
        lowered(
            "C(i,j) = A(i,k) * B(k,j)",
            "",
            &[("C", &[30, 900], "csr"), ("A", &[30, 20], "csr"), ("B", &[20, 900], "csr")],
        ),
        lowered(
            "C(i,j) = A(i,k) * B(k,j)",
            "",
            &[("C", &[30, 20_000], "csr"), ("A", &[30, 20], "csr"), ("B", &[20, 20_000], "csr")],
        ),
        lowered(
            "C(i,j) = A(i,k) * B(k,j)",
            "reorder(k,i,j)",
            &[("C", &[30, 40], "csr"), ("A", &[30, 20], "csc"), ("B", &[20, 40], "csr")],
        ),
        lowered(
            "A(i,j) = B(i,j) - sum(k, C(i,k))",
            "",
            &[("A", &[10, 12], "csr"), ("B", &[10, 12], "csr"), ("C", &[10, 8], "csr")],
        ),
        lowered(
            "O(i,j) = I(i+p,j+q) * F(p,q)",
            "",
            &[("O", &[28, 28], ""), ("I", &[30, 30], "csr"), ("F", &[3, 3], "")],
        ),
        lowered(
            "O(i,j) = I(i+p,j+q) * F(p,q)",
            "reorder(i,j,p,q)",
            &[("O", &[28, 28], "dcsr"), ("I", &[30, 30], "dcsr"), ("F", &[3, 3], "")],
        ),
        lowered(
            "O(i,j) = I(2*i+r, 2*j+q) * F(r,q)",
            "",
            &[("O", &[14, 14], ""), ("I", &[30, 30], "csr"), ("F", &[3, 3], "")],
        ),
        lowered("O(i) = I(i+2-q) * F(q)", "", &[("O", &[20], ""), ("I", &[22], "s"), ("F", &[3], "")]),
        lowered(
            "y(i) = A(i,j) * x(j) + b(i)",
            "",
            &[("y", &[16], ""), ("A", &[16, 14], "nv24"), ("x", &[14], ""), ("b", &[16], "")],
        ),
        lowered(
            "C(i,j) = A(i,k) * B(k,j)",
            "reorder(k,j,i)",
            &[("C", &[8, 40], ""), ("A", &[8, 16], ""), ("B", &[16, 40], "nm(2,4,16)")],
        ),
        lowered("y(i) = A(i,j) * x(j)", "", &[("y", &[30], ""), ("A", &[30, 20], "coo"), ("x", &[20], "")]),
        lowered(
            "C(i,j) = A(i,j) + B(i,j)",
            "",
            &[("C", &[12, 12], "csr"), ("A", &[12, 12], "coo"), ("B", &[12, 12], "csr")],
        ),
        lowered(
            "y(i) = A(i,j) * x(j)",
            "fuse(i,j,f),pos(f,fpos,A),split(fpos,f0,f1,64)",
            &[("y", &[30], ""), ("A", &[30, 20], "csr"), ("x", &[20], "")],
        ),
        lowered(
            "y(i) = A(i,j) * x(j)",
            "split(i,i0,i1,8),parallelize(i0,CPUThread,NoRaces)",
            &[("y", &[30], ""), ("A", &[30, 20], "csr"), ("x", &[20], "")],
        ),
        lowered(
            "y(j) = A(i,j) * x(i)",
            "parallelize(i,CPUThread,Atomics)",
            &[("y", &[20], ""), ("A", &[30, 20], "csr"), ("x", &[30], "")],
        ),
        lowered("a = sum(i, x(i) * x(i))", "", &[("a", &[], ""), ("x", &[50], "s")]),
    ]
}

#[test]
fn every_kernel_prints_parses_back_and_prints_the_same() {
    for f in corpus() {
        let text = f.to_string();
        let parsed = Function::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(parsed.to_string(), text);
        assert!(same_kernel(&f, &parsed), "parsed back to another kernel:\n{text}");
        parsed.verify().unwrap();
    }
}

#[test]
fn the_parser_refuses_broken_text_without_panicking() {
    // Every prefix of a kernel's text, and the text with one token-ish span dropped or
    // doubled, is parsed or refused by line: never a panic.
    for f in corpus().into_iter().take(6) {
        let text = f.to_string();
        let cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).step_by(3).collect();
        for &at in &cuts {
            let _ = Function::parse(&text[..at]);
            let end = text[at..].find([' ', '\n', '(', ')', '[', ']']).map_or(text.len(), |e| at + e.max(1));
            let _ = Function::parse(&format!("{}{}", &text[..at], &text[end..]));
            let _ = Function::parse(&format!("{}{}", &text[..end], &text[at..]));
        }
    }
    for odd in [
        "",
        "kernel",
        "kernel k(",
        "kernel k() {",
        "kernel k() { let x: Index = -",
        "kernel k() { x = 99999999999999999999 }",
    ] {
        assert!(Function::parse(odd).is_err(), "{odd}");
    }
}

#[test]
fn a_kernel_written_by_hand_runs_on_both_back_ends() {
    let text = r#"kernel spmv(
  out y_vals: [F64] Values { tensor: "y" },
  A1_pos: [I64] Pos { tensor: "A", level: 1 },
  A1_crd: [I64] Crd { tensor: "A", level: 1 },
  A_vals: [F64] Values { tensor: "A" },
  x_vals: [F64] Values { tensor: "x" },
) {
  for i in 0..3 {
    let acc: F64 = 0.0
    for p in A1_pos[i]..A1_pos[i + 1] {
      acc = acc + (A_vals[p] * x_vals[A1_crd[p]])
    }
    y_vals[i] = acc
  }
}
"#;
    let f = Function::parse(text).unwrap();
    f.verify().unwrap();
    assert_eq!(f.to_string(), text);
    // A = [[1, 0, 2], [0, 0, 0], [0, 3, 0]], x = [1, 2, 3]: y = [7, 0, 6].
    let a = Tensor::from_dense(&[3, 3], &[1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0], &Format::csr()).unwrap();
    let (pos, crd) = match &a.levels()[1] {
        nm_format::LevelStorage::Compressed { pos, crd } => (pos.to_usize(), crd.to_usize()),
        _ => unreachable!("csr"),
    };
    let args = || {
        vec![
            ArrayData::F64(vec![0.0; 3]),
            ArrayData::I64(pos.iter().map(|&v| v as i64).collect()),
            ArrayData::I64(crd.iter().map(|&v| v as i64).collect()),
            ArrayData::F64(a.values().to_vec()),
            ArrayData::F64(vec![1.0, 2.0, 3.0]),
        ]
    };
    let mut by_interp = args();
    interpret(&f, &mut by_interp).unwrap();
    assert_eq!(by_interp[0], ArrayData::F64(vec![7.0, 0.0, 6.0]));
    let cc = CCompiler::from_env().expect("a C compiler");
    let mut by_c = args();
    CKernel::compile(&f, &cc).unwrap().run(&mut by_c).unwrap();
    assert_eq!(by_c[0], by_interp[0]);
}

#[test]
fn malformed_text_is_refused_with_its_line() {
    let header = "kernel k(\n  out y: [F64] Values { tensor: \"y\" },\n) {\n";
    let cases = [
        ("  y[i] = 1.0\n}\n", 4, "`i` is not declared here"),
        ("  for i in 0..3 {\n    y[i] = 1.0\n", 5, "a block without its closing `}`"),
        ("  z[0] = 1.0\n}\n", 4, "no array `z`"),
        ("  let a: Word = 1\n}\n", 4, "unknown scalar type `Word`"),
        ("  y[0] = 1.0 +\n}\n", 5, "expected an expression"),
        ("  frobnicate y\n}\n", 4, "unknown statement `frobnicate`"),
        ("  y[0] = 1.0\n}\n}\n", 6, "text after the kernel's closing `}`"),
        ("  atomic y[0] = 1.0\n}\n", 4, "an atomic store adds (`+=`)"),
    ];
    for (body, line, problem) in cases {
        let err = Function::parse(&format!("{header}{body}")).unwrap_err();
        assert_eq!((err.line, err.problem.as_str()), (line, problem), "{body}");
    }
    let err = Function::parse("kernel k(\n  a: [F64] Scratch,\n  a: [F64] Scratch,\n) {\n}\n").unwrap_err();
    assert_eq!(err.problem, "two arrays named `a`");
}

#[test]
fn the_verifier_refuses_a_parsed_kernel_that_breaks_its_rules() {
    // Parsed (every name resolves), yet writes an input and breaks outside a loop.
    let text = "kernel k(\n  x: [F64] Values { tensor: \"x\" },\n) {\n  x[0] = 1.0\n}\n";
    let err = Function::parse(text).unwrap().verify().unwrap_err();
    assert!(err.problem.contains("x"), "{err}");
    let text = "kernel k(\n  out y: [F64] Values { tensor: \"y\" },\n) {\n  break\n}\n";
    let err = Function::parse(text).unwrap().verify().unwrap_err();
    assert!(err.problem.contains("break"), "{err}");
}
