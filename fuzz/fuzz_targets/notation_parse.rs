//! The index notation parser on arbitrary text: never panics; whatever parses prints as text
//! that parses back and prints the same, and making reductions explicit keeps that true.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nm_ir::notation::parse;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(stmt) = parse(text) else { return };
    let printed = stmt.to_string();
    let again = parse(&printed).expect("printed statements parse");
    assert_eq!(again.to_string(), printed);
    let reduced = stmt.with_reductions().to_string();
    let again = parse(&reduced).expect("reduced statements parse");
    assert_eq!(again.to_string(), reduced);
    assert!(again.reduction_vars().is_empty());
});
