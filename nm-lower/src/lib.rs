//! # nm-lower: from concrete index notation to running code
//!
//! This crate turns scheduled concrete index notation into loops and runs them, through a C
//! back end (generated C99, the system C compiler, an on-disk cache, dynamic loading) and a
//! reference interpreter.
//!
//! So far: [`ir`], the loop IR (with its text form); [`interp`], its checked reference
//! interpreter; [`c`], the C99 emitter and kernel runner; and [`jit`], the compile–cache–load
//! machinery every generated kernel goes through; [`lower`], CIN → loop IR (co-iteration by
//! merge lattices, dense locate, dense and assembled sparse results, row workspaces, row
//! ranges for threads); [`assemble`], the split into taco's assembly and compute kernels;
//! [`prefetch`], software prefetch of dense rows reached through coordinates; and
//! [`partial_sums`], register reductions in interleaved partial sums.

#![deny(missing_docs)]

pub mod assemble;
pub mod c;
pub mod interp;
pub mod ir;
pub mod ism;
pub mod jit;
pub mod lower;
pub mod partial_sums;
pub mod prefetch;
