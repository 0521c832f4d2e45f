//! The scheduling language on arbitrary text, applied to SpGEMM's concrete notation: parsing
//! and scheduling never panic; a schedule that applies prints.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nm_format::Format;
use nm_ir::concrete::{LoopOrderTarget, concretize_for, parse_schedule};
use nm_ir::notation::{Declarations, TensorType, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(commands) = parse_schedule(text) else { return };
    let stmt = parse("C(i,j) = A(i,k) * B(k,j)").expect("parses");
    let decls = Declarations::new()
        .tensor("A", TensorType::sparse(&[4, 5], Format::csr()))
        .tensor("B", TensorType::sparse(&[5, 3], Format::csr()))
        .tensor("C", TensorType::dense(&[4, 3]));
    let types = stmt.check(&decls).expect("checks");
    if let Ok(scheduled) = concretize_for(&stmt, &types, &LoopOrderTarget { widest_row_workspace: 16_384 }).schedule(&commands) {
        let _ = scheduled.to_string();
    }
});
