//! # nm-lower: from concrete index notation to running code
//!
//! This crate turns scheduled concrete index notation into loops and runs them, through a C
//! back end (generated C99, the system C compiler, an on-disk cache, dynamic loading) and a
//! reference interpreter.
//!
//! So far: [`ir`], the loop IR (with its text form); [`interp`], its checked reference
//! interpreter; [`c`], the C99 emitter and kernel runner; and [`jit`], the compile–cache–load
//! machinery every generated kernel goes through; and [`lower`], the first class of CIN →
//! loop IR lowering (one sparse iterator per loop, dense locate, dense results).

#![deny(missing_docs)]

pub mod c;
pub mod interp;
pub mod ir;
pub mod jit;
pub mod lower;
