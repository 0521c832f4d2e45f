//! The kernels this process compiled, by everything that made them: compiling a program again
//! returns a clone of its kernel, which shares the compiled code, in microseconds — where
//! lowering it again, emitting its C and finding the object in the on-disk cache takes about a
//! millisecond (BENCHMARKS.md, "Compile latency").
//!
//! The most recent [`CAPACITY`] are kept: a process that compiles many programs (a test
//! harness, a search over schedules) holds no more than that, and the loaded objects stay
//! loaded either way.

use std::any::Any;
use std::sync::Mutex;

use super::{Kernel, Scalar};

/// How many kernels are kept.
const CAPACITY: usize = 64;

/// `(key, Kernel<T>)`, the most recently used last. A list, as the loaded objects' (a hash
/// table's interior pointers would make leak checkers report what it holds as possibly lost).
static KERNELS: Mutex<Vec<(String, Box<dyn Any + Send + Sync>)>> = Mutex::new(Vec::new());

/// A clone of the kernel kept under `key`, if one of value type `T` is.
pub(super) fn find<T: Scalar>(key: &str) -> Option<Kernel<T>> {
    let mut kernels = KERNELS.lock().unwrap_or_else(|e| e.into_inner());
    let at = kernels.iter().position(|(k, kernel)| k == key && kernel.is::<Kernel<T>>())?;
    let entry = kernels.remove(at);
    let found = entry.1.downcast_ref::<Kernel<T>>().cloned();
    kernels.push(entry);
    found
}

/// Keeps a clone of `kernel` under `key`, dropping the least recently used past [`CAPACITY`].
pub(super) fn keep<T: Scalar>(key: String, kernel: &Kernel<T>) {
    let mut kernels = KERNELS.lock().unwrap_or_else(|e| e.into_inner());
    kernels.retain(|(k, _)| *k != key);
    if kernels.len() >= CAPACITY {
        kernels.remove(0);
    }
    kernels.push((key, Box::new(kernel.clone())));
}
