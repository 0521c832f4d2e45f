use nm_format::strategy::*;
use nm_format::*;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
fn main() {
    let mut r = TestRunner::default();
    for o in 1..=4 {
        for _ in 0..3 {
            let f = any_format(o).new_tree(&mut r).unwrap().current();
            println!("{o}: {f}  name={:?}", f.name());
        }
    }
    for _ in 0..3 {
        let l = coordinate_list(3, 4).new_tree(&mut r).unwrap().current();
        println!("{:?} nnz={}", l.shape, l.len());
    }
    let f = Format::parse("nm(2,4,2)", 2).unwrap();
    println!("{f}");
    let list = generate::nm_vectorwise::<f64>(6, 5, 2, 4, 2, generate::Values::SmallIntegers(3), 1);
    let t = Tensor::from_coordinates(&list, &f, Duplicates::Reject).unwrap();
    println!("{:?}", t.levels());
    println!("{:?}", t.values());
    let p = t.nm_parts().unwrap();
    println!("B'={:?}\nD={:?}", p.b_prime, p.d);
    for e in [
        "csrx",
        "ds:1,1",
        "(i,j) -> (i : dense, k : compressed)",
        "nm(2,4)",
        "(i,j) -> (i : dense, j : compresed)",
        "xyz",
    ] {
        println!("{}", Format::parse(e, 2).unwrap_err());
    }
}
