//! Every way an entry can be damaged is a miss, never a payload.

use nm_cache::{Store, seal, unseal};

fn store(name: &str) -> Store {
    let dir = std::env::temp_dir().join(format!("nm-cache-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Store::new(dir)
}

#[test]
fn a_whole_entry_reads_back() {
    let s = store("whole");
    let payload: Vec<u8> = (0..5000u32).map(|v| (v * 7) as u8).collect();
    s.put("k.so", &payload).unwrap();
    assert_eq!(s.get("k.so"), Some(payload));
    assert_eq!(s.get("missing.so"), None);
    let _ = std::fs::remove_dir_all(s.dir());
}

#[test]
fn truncated_extended_and_flipped_entries_are_misses() {
    let payload: Vec<u8> = (0..3000u32).map(|v| (v * 31 + 5) as u8).collect();
    let sealed = seal(&payload);
    for len in 0..sealed.len() {
        assert_eq!(unseal(sealed[..len].to_vec()), None, "truncated to {len}");
    }
    let mut longer = sealed.clone();
    longer.push(0);
    assert_eq!(unseal(longer), None);
    for bit in (0..sealed.len() * 8).step_by(7) {
        let mut flipped = sealed.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        assert_eq!(unseal(flipped), None, "bit {bit} flipped");
    }
    assert_eq!(unseal(sealed), Some(payload));
}

#[test]
fn a_directory_or_random_bytes_in_place_of_an_entry_are_misses() {
    let s = store("odd");
    s.create().unwrap();
    std::fs::create_dir(s.path("dir.so")).unwrap();
    assert_eq!(s.get("dir.so"), None);
    std::fs::write(s.path("noise.so"), [0x5au8; 20]).unwrap();
    assert_eq!(s.get("noise.so"), None);
    // A good entry replaces the noise.
    s.put("noise.so", b"kernel").unwrap();
    assert_eq!(s.get("noise.so").as_deref(), Some(&b"kernel"[..]));
    let _ = std::fs::remove_dir_all(s.dir());
}

#[test]
fn temporaries_are_removed_unless_renamed() {
    let s = store("temp");
    s.create().unwrap();
    let kept = {
        let t = s.temporary("a");
        std::fs::write(t.path(), b"x").unwrap();
        t.path().to_path_buf()
    };
    assert!(!kept.exists(), "a dropped temporary is removed");
    let t = s.temporary("b");
    std::fs::write(t.path(), b"y").unwrap();
    t.rename_to(&s.path("b")).unwrap();
    assert!(s.path("b").exists());
    let left: Vec<_> = std::fs::read_dir(s.dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("b")]);
    let _ = std::fs::remove_dir_all(s.dir());
}

#[test]
fn keys_separate_their_parts() {
    assert_ne!(nm_cache::key(&[b"ab", b"c"], 32), nm_cache::key(&[b"a", b"bc"], 32));
    assert_eq!(nm_cache::key(&[b"x"], 16).len(), 16);
}
