use std::time::Instant;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    for _ in 0..30 {
        let t = Instant::now();
        let bytes = std::fs::read(&path).unwrap();
        let t1 = t.elapsed();
        let m = nm_format::io::parse_mtx::<f64>(&bytes).unwrap();
        let t2 = t.elapsed();
        println!("read {:?} parse {:?} n={}", t1, t2 - t1, m.data.len());
    }
}
