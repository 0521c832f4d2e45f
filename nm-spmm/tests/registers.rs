//! The AVX-512 tile passes keep their sums in registers in this very build. None of them
//! moves a `zmm` register to or from the stack.
//!
//! Why this needs a test:
//! - The pass's loop uses 31 of the 32 registers.
//! - Small changes to that loop have made LLVM spill the 28 accumulators every kept vector. That
//!   halved the kernel's speed without changing a result (see `tile_body!` in src/lib.rs).
//! - A test cannot assert a timing, but it can assert the machine code.
//!
//! The test disassembles its own binary with `objdump`. It skips, and prints why:
//! - in unoptimized builds, where every value lives on the stack;
//! - off x86-64;
//! - where objdump is missing.

use nm_format::{Format, Tensor};
use nm_spmm::{NmMatrix, Real, spmm};
use std::process::Command;

/// One small product in `T`, so that this binary holds the tile passes for `T` (every lane
/// count is reached through the same dispatch) and runs them once where the CPU has AVX-512.
fn multiply_once<T: Real>() {
    let (m, k, n) = (16, 64, 64);
    let dense: Vec<T> = (0..k * n).map(|q| T::from_f64((q % 7) as f64 - 3.0)).collect();
    let b = Tensor::from_dense(&[k, n], &dense, &Format::dense(2)).unwrap();
    let (b, _) = b.prune(&Format::nm(1, 8, 32).unwrap()).unwrap();
    let nm = NmMatrix::new(&b).unwrap();
    let a: Vec<T> = (0..m * k).map(|q| T::from_f64((q % 5) as f64)).collect();
    let mut c = vec![T::ZERO; m * n];
    spmm(&a, m, &nm, &mut c, 1).unwrap();
}

/// The instructions of `objdump -d` output that move a `zmm` register to or from the stack,
/// in the functions whose demangled names end in `tile_avx512::run::pass`, and how many such
/// functions there are.
fn stack_zmm_in_passes(disassembly: &str) -> (usize, Vec<String>) {
    let (mut passes, mut spills, mut in_pass) = (0, Vec::new(), false);
    for line in disassembly.lines() {
        // A function starts with a line "0000000000036940 <name>:", unindented.
        if line.starts_with(|c: char| c.is_ascii_hexdigit()) && line.ends_with(">:") {
            in_pass = line.ends_with("tile_avx512::run::pass>:");
            passes += usize::from(in_pass);
        } else if in_pass && line.contains("zmm") && line.contains("(%rsp)") {
            spills.push(line.trim().to_string());
        }
    }
    (passes, spills)
}

#[test]
fn avx512_tile_passes_keep_their_sums_in_registers() {
    multiply_once::<f32>();
    multiply_once::<f64>();
    if cfg!(debug_assertions) {
        println!("skipped: an unoptimized build keeps every value on the stack (run with --release)");
        return;
    }
    if !cfg!(target_arch = "x86_64") {
        println!("skipped: the AVX-512 passes exist only on x86-64");
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = match Command::new("objdump").args(["-d", "-C", "--no-show-raw-insn"]).arg(&exe).output() {
        Ok(output) => output,
        Err(e) => {
            println!("skipped: cannot run objdump ({e})");
            return;
        }
    };
    assert!(
        output.status.success(),
        "objdump failed on {}: {}",
        exe.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let (passes, spills) = stack_zmm_in_passes(&String::from_utf8_lossy(&output.stdout));
    assert!(
        passes > 0,
        "no function named …tile_avx512::run::pass in {}: this check must follow the rename",
        exe.display()
    );
    assert!(
        spills.is_empty(),
        "{} instructions in {passes} AVX-512 tile passes move zmm registers to or from the stack, e.g.\n{}",
        spills.len(),
        spills.iter().take(8).cloned().collect::<Vec<_>>().join("\n")
    );
    println!("{passes} AVX-512 tile passes, no zmm register on the stack");
}

#[test]
fn stack_operands_are_found_only_in_the_passes() {
    let disassembly = "\
0000000000001000 <<f64 as nm_spmm::simd::Simd>::tile_avx512::run::pass>:
    1000:\tvfmadd231pd %zmm29,%zmm30,%zmm27
    1006:\tvmovupd %zmm26,0x20(%rsp)
0000000000002000 <nm_spmm::block>:
    2000:\tvmovupd %zmm1,0x40(%rsp)
0000000000003000 <<f32 as nm_spmm::simd::Simd>::tile_avx512::run::pass>:
    3000:\tvmovups (%rdi),%zmm0
    3006:\tmov    0x8(%rsp),%rbx
";
    let (passes, spills) = stack_zmm_in_passes(disassembly);
    assert_eq!(passes, 2);
    assert_eq!(spills, vec!["1006:\tvmovupd %zmm26,0x20(%rsp)".to_string()]);
}
