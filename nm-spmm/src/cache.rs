//! The size of the CPU's per-core L2 cache, which decides whether a row block's tiles of A fit
//! in it where B is large, and so whether B is cut into panels ([`crate::blocking`]).

use std::sync::OnceLock;

/// The L2 data (or unified) cache of the first CPU in bytes, as Linux reports it under
/// `/sys/devices/system/cpu/cpu0/cache/`; `None` where it does not (other systems, or a
/// container that hides sysfs), and the kernels then block as if L2 were small. Read once.
pub fn l2_bytes() -> Option<usize> {
    static L2: OnceLock<Option<usize>> = OnceLock::new();
    *L2.get_or_init(|| {
        let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
        let read = |path: &std::path::Path, file: &str| std::fs::read_to_string(path.join(file)).ok();
        dir.filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|index| index.file_name().is_some_and(|n| n.to_string_lossy().starts_with("index")))
            .find(|index| {
                read(index, "level").is_some_and(|l| l.trim() == "2")
                    && read(index, "type").is_some_and(|t| t.trim() != "Instruction")
            })
            .and_then(|index| parse_size(&read(&index, "size")?))
    })
}

/// A sysfs cache size: `2048K`, `1M`, or bytes.
fn parse_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, ""),
    };
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_sizes_parse_with_their_units() {
        assert_eq!(parse_size("2048K\n"), Some(2 << 20));
        assert_eq!(parse_size("512K"), Some(512 << 10));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("12X"), None);
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn the_l2_size_is_plausible_where_linux_reports_it() {
        match l2_bytes() {
            // From 64 KiB (old cores) to 32 MiB (no core has more).
            Some(bytes) => assert!((64 << 10..=32 << 20).contains(&bytes), "L2 of {bytes} bytes"),
            None => println!("skipped: no L2 size under /sys/devices/system/cpu/cpu0/cache"),
        }
    }
}
