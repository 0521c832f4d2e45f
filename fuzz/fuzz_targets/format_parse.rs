//! The format parser on arbitrary text: never panics; whatever parses prints as text that
//! parses back to the same format.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nm_format::Format;

fuzz_target!(|data: &[u8]| {
    let Some((&order, text)) = data.split_first() else { return };
    let order = (order % 8) as usize + 1;
    let Ok(text) = std::str::from_utf8(text) else { return };
    if let Ok(format) = Format::parse(text, order) {
        let printed = format.to_string();
        let again = Format::parse(&printed, order).expect("printed formats parse");
        assert_eq!(again, format, "{printed}");
    }
});
