//! What nmsparse's kernels share at run time, below every other crate: a kept pool of worker
//! threads ([`workers`]) and a check of the memory the system can still give before
//! allocating storage sized by user data ([`memory`]).

#![deny(missing_docs)]

pub mod memory;
pub mod workers;
