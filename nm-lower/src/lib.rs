//! # nm-lower: from concrete index notation to running code
//!
//! This crate turns scheduled concrete index notation into loops and runs them, through a C
//! back end (generated C99, the system C compiler, an on-disk cache, dynamic loading) and a
//! reference interpreter.
//!
//! So far: [`jit`], the C back end's compile-cache-load machinery, which every generated
//! kernel goes through. Loop IR, lowering and the interpreter follow.

#![deny(missing_docs)]

pub mod jit;
