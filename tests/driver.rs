//! The library's driver as its clients use it: a kernel bound to its operands and run many
//! times, taco's assembly and compute kernels, C read in place of the generated code, and the
//! errors of the schedule never lost on the way to a kernel.

mod common;

use common::{Dense, operand, reference, stored_elements};
use nmsparse::format::generate::{Values, uniform};
use nmsparse::format::{Duplicates, Format, Tensor};
use nmsparse::{Backend, Error, Program};

/// A statement, its declarations `(name, shape, format)` with the result first.
type Case<'a> = (&'a str, &'a [(&'a str, &'a [usize], &'a str)]);

/// What users write, through every route of the driver: a sparse result assembled in place
/// or through a workspace, a dense result, an operand read in two orders (a view), through a
/// copy, a tensor used twice, a sum split into kernels, nm-spmm's kernel.
const CASES: [Case<'static>; 8] = [
    ("A(i,j) = B(i,j) + C(i,j)", &[("A", &[14, 11], "csr"), ("B", &[14, 11], "csr"), ("C", &[14, 11], "csr")]),
    ("A(i,j) = B(i,k) * C(k,j)", &[("A", &[14, 11], "csr"), ("B", &[14, 9], "csr"), ("C", &[9, 11], "csr")]),
    ("y(i) = A(i,j) * x(j)", &[("y", &[14], "dense"), ("A", &[14, 11], "csr"), ("x", &[11], "dense")]),
    ("A(i,j) = B(i,j) + B(j,i)", &[("A", &[12, 12], "csr"), ("B", &[12, 12], "csr")]),
    ("A(i,j) = B(i,k) * C(j,k)", &[("A", &[14, 11], "csr"), ("B", &[14, 9], "csr"), ("C", &[11, 9], "csr")]),
    ("A(i,j) = B(i,k) * B(j,k)", &[("A", &[12, 12], "dcsr"), ("B", &[12, 9], "csr")]),
    (
        "A(i,j) = B(i,k) * C(k,j) + D(i,j)",
        &[("A", &[12, 10], "csr"), ("B", &[12, 9], "csr"), ("C", &[9, 10], "csr"), ("D", &[12, 10], "csr")],
    ),
    (
        "C(i,j) = A(i,k) * B(k,j)",
        &[("C", &[13, 16], "dense"), ("A", &[13, 24], "dense"), ("B", &[24, 16], "nm(2,4,4)")],
    ),
];

/// A case made ready: the program, its operands by name and the dense reference's result.
type Prepared<'a> = (Program, Vec<(&'a str, Tensor<f64>)>, Vec<f64>);

/// The program, its operands and the dense reference's result.
fn case(seed: u64, (expr, decls): Case<'_>) -> Prepared<'_> {
    let stmt = nmsparse::ir::notation::parse(expr).unwrap();
    let mut d = Dense { shapes: vec![Vec::new(); stmt.tensors.len()], arrays: vec![None; stmt.tensors.len()] };
    let mut program = Program::new(expr).unwrap();
    let mut operands = Vec::new();
    for (k, &(name, shape, format)) in decls.iter().enumerate() {
        program = program.tensor(name, shape, format).unwrap();
        let id = nmsparse::ir::id::Id::index(stmt.tensor_named(name).unwrap());
        d.shapes[id] = shape.to_vec();
        if k == 0 {
            continue;
        }
        let f = Format::parse(format, shape.len()).unwrap();
        let list = uniform::<f64>(shape, 0.3, Values::SmallIntegers(4), 100 * seed + k as u64);
        let t = if f.is_structured() {
            Tensor::from_coordinates(&list, &Format::csf(2), Duplicates::Sum).unwrap().prune(&f).unwrap().0
        } else {
            operand(&list, &f).unwrap()
        };
        d.arrays[id] = Some(t.to_dense().unwrap());
        operands.push((name, t));
    }
    let expected = reference(expr, &d);
    assert!(expected.iter().any(|&x| x != 0.0), "{expr}: an all-zero result checks little");
    (program, operands, expected)
}

/// Bound once and computed three times, on both back ends, fused or as taco's assembly and
/// compute kernels: the result of each is the reference's, and stores the same entries as
/// [`Kernel::run`]'s.
#[test]
fn a_bound_kernel_computes_again_and_again_what_run_computes_once() {
    for (seed, c) in CASES.into_iter().enumerate() {
        let (program, operands, expected) = case(seed as u64, c);
        let tensors: Vec<(&str, &Tensor<f64>)> = operands.iter().map(|(n, t)| (*n, t)).collect();
        let views: Vec<_> = operands.iter().map(|(n, t)| (*n, t.view())).collect();
        for backend in [Backend::Interp, Backend::Jit] {
            for separate in [false, true] {
                let what = format!("{} {backend:?} separate assembly {separate}", c.0);
                let kernel = program.clone().separate_assembly(separate).compile::<f64>(backend).unwrap();
                let once = kernel.run(&tensors).unwrap_or_else(|e| panic!("{what}: {e}"));
                let (again, assembled) = kernel
                    .bind(&views, |bound| {
                        let assembled = bound.assemble()?;
                        for _ in 0..3 {
                            bound.compute()?;
                        }
                        Ok((bound.result()?, assembled))
                    })
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(again.to_dense().unwrap(), expected, "{what}");
                assert_eq!(once.to_dense().unwrap(), expected, "{what}");
                assert_eq!(stored_elements(&again), stored_elements(&once), "{what}");
                assert_eq!(again.format(), once.format(), "{what}");
                // An assembly kernel exactly where the result is assembled in place (a kernel
                // with parts runs whole at each compute).
                let halves = kernel.parts().is_empty() && kernel.functions().len() == 2;
                assert_eq!(assembled.is_some(), halves, "{what}");
                assert!(!halves || separate, "{what}");
            }
        }
    }
}

/// The assembly kernel of a sum into CSR: it exists, runs once, and the compute kernel
/// fills the values into its structure.
#[test]
fn separate_assembly_gives_taco_s_two_kernels() {
    let (program, operands, expected) = case(7, CASES[0]);
    let views: Vec<_> = operands.iter().map(|(n, t)| (*n, t.view())).collect();
    let kernel = program.separate_assembly(true).function_prefix("my_").compile::<f64>(Backend::Jit).unwrap();
    let names: Vec<&str> = kernel.functions().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("my_") && names[0].ends_with("_assemble"), "{names:?}");
    assert!(names[1].starts_with("my_") && names[1].ends_with("_compute"), "{names:?}");
    assert_eq!(kernel.compiled().len(), 2);
    let result = kernel
        .bind(&views, |bound| {
            assert!(bound.assemble()?.is_some());
            assert!(bound.assemble()?.is_none(), "assembly runs once");
            bound.compute()?;
            bound.result()
        })
        .unwrap();
    assert_eq!(result.to_dense().unwrap(), expected);
}

/// taco's `-read-source`: C standing in for the generated functions runs on the same
/// arguments; here the generated C itself, which must give the same result. A source that
/// lacks a function is refused by name.
#[test]
fn a_kernel_compiled_from_source_runs_in_place_of_the_generated_one() {
    let (program, operands, expected) = case(3, CASES[1]);
    let tensors: Vec<(&str, &Tensor<f64>)> = operands.iter().map(|(n, t)| (*n, t)).collect();
    let kernel = program.function_prefix("src_").compile::<f64>(Backend::Jit).unwrap();
    let source = nmsparse::lower::c::emit_library(&kernel.functions());
    let theirs = kernel.from_source(&source).unwrap();
    assert_eq!(theirs.run(&tensors).unwrap().to_dense().unwrap(), expected);
    let renamed = source.replace("src_", "other_");
    match kernel.from_source(&renamed).map(|_| ()).unwrap_err() {
        Error::Jit(nmsparse::lower::jit::JitError::Symbol { name, .. }) => assert!(name.starts_with("src_"), "{name}"),
        e => panic!("expected a missing symbol, got {e}"),
    }
    let interp = Program::new("y(i) = A(i,j) * x(j)")
        .unwrap()
        .tensor("y", &[3], "dense")
        .unwrap()
        .tensor("A", &[3, 3], "csr")
        .unwrap()
        .tensor("x", &[3], "dense")
        .unwrap()
        .compile::<f64>(Backend::Interp)
        .unwrap();
    assert!(interp.from_source(&source).is_err(), "the interpreter runs no C");
}

/// A schedule's error is the error of every stage after it, whichever way the driver would
/// have taken: one that does not parse, and one that names a variable the statement lacks,
/// on a statement the driver must read through a copy (its fallback once dropped schedules
/// it could not apply).
#[test]
fn schedule_errors_are_never_dropped() {
    for (program, _, _) in [case(1, CASES[2]), case(2, CASES[4])] {
        let e = program.clone().schedule("reorder(j,").compile::<f64>(Backend::Interp).map(|_| ()).unwrap_err();
        assert!(matches!(e, Error::Parse(_)), "{e}");
        let e = program.clone().schedule("reorder(j,").concrete().map(|_| ()).unwrap_err();
        assert!(matches!(e, Error::Parse(_)), "{e}");
        let e = program.clone().schedule("reorder(q, i)").compile::<f64>(Backend::Interp).map(|_| ()).unwrap_err();
        assert!(matches!(e, Error::Schedule(_)), "{e}");
    }
}

/// A dense result with more elements than the machine addresses (operands each within
/// bounds, their outer product not) is refused when bound, not wrapped around into a small one.
#[test]
fn a_result_too_large_to_address_is_refused() {
    let huge = 1usize << 31;
    let kernel = Program::new("A(i,j,k) = B(i,j) * c(k)")
        .unwrap()
        .tensor("A", &[huge, huge, huge], "dense")
        .unwrap()
        .tensor("B", &[huge, huge], "dcsr")
        .unwrap()
        .tensor("c", &[huge], "s")
        .unwrap()
        .compile::<f64>(Backend::Interp)
        .unwrap();
    let single = |shape: &[usize], format: &str| {
        let list = nmsparse::format::CoordinateList {
            shape: shape.to_vec(),
            coords: vec![vec![5]; shape.len()],
            values: vec![1.0],
        };
        Tensor::<f64>::from_coordinates(&list, &Format::parse(format, shape.len()).unwrap(), Duplicates::Sum).unwrap()
    };
    let (b, c) = (single(&[huge, huge], "dcsr"), single(&[huge], "s"));
    let e = kernel.run(&[("B", &b), ("c", &c)]).unwrap_err();
    assert!(matches!(e, Error::Tensor(nmsparse::format::TensorError::TooLarge { .. })), "{e}");
}
