//! # nm-lower: from concrete index notation to running code
//!
//! This crate turns scheduled concrete index notation into loops and runs them, through a C
//! back end (generated C99, the system C compiler, an on-disk cache, dynamic loading) and a
//! reference interpreter.
//!
//! Its modules form layers, each using only those above it:
//!
//! 1. [`ir`], the loop IR (with its text form), and the passes over it: [`prefetch`] (software
//!    prefetch of dense rows reached through coordinates), [`partial_sums`] (register
//!    reductions in interleaved partial sums), [`assemble`] (the split into taco's assembly
//!    and compute kernels);
//! 2. [`args`], the kernel argument ABI: the arrays a kernel runs on, the check that they
//!    match its parameters, how its row ranges run on threads, its sparse workspaces;
//! 3. [`lower`], CIN → loop IR (co-iteration by merge lattices, dense locate, dense and
//!    assembled sparse results, row workspaces, row ranges for threads), and the operands and
//!    result at the kernel boundary;
//! 4. the back ends, which take a lowered function and its arguments: [`interp`], the checked
//!    reference interpreter, and [`c`], the C99 emitter and kernel runner, with [`jit`], the
//!    compile–cache–load machinery every generated kernel goes through.

#![deny(missing_docs)]

pub mod args;
pub mod assemble;
pub mod c;
pub mod interp;
pub mod ir;
pub mod jit;
pub mod lower;
pub mod partial_sums;
pub mod prefetch;
