//! A thread's scratch buffers, kept from one product to the next.
//!
//! The transposed block of A takes hundreds of kilobytes; allocated per call, its pages were
//! faulted in and zeroed on every call, a few percent of the sparsest products. The worker
//! threads are kept ([`nm_runtime::workers`]), so
//! each keeps its buffers in a thread-local between calls, up to [`KEPT_BYTES`]; a call with
//! another type of scratch (f64 after f32) starts from a new one.

use std::any::Any;
use std::cell::Cell;

/// Bytes of scratch a thread keeps after a call; a larger buffer (a very long `k`) is freed.
pub const KEPT_BYTES: usize = 16 << 20;

/// Scratch buffers that a thread may keep: whatever their contents, a new call starts from them.
pub trait Scratch: Default + 'static {
    /// The heap bytes the buffers hold.
    fn bytes(&self) -> usize;
}

thread_local! {
    /// The last scratch kept on this thread, of whichever type the last call used.
    static KEPT: Cell<Option<Box<dyn Any>>> = const { Cell::new(None) };
}

/// This thread's kept scratch of type `S`, or a new one.
pub fn take<S: Scratch>() -> S {
    KEPT.take().and_then(|kept| kept.downcast::<S>().ok()).map_or_else(S::default, |kept| *kept)
}

/// Keeps `scratch` for this thread's next call, unless it is larger than [`KEPT_BYTES`].
pub fn keep<S: Scratch>(scratch: S) {
    if scratch.bytes() <= KEPT_BYTES {
        KEPT.set(Some(Box::new(scratch)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Buffer(Vec<u8>);

    impl Scratch for Buffer {
        fn bytes(&self) -> usize {
            self.0.len()
        }
    }

    #[derive(Default)]
    struct Other(Vec<u32>);

    impl Scratch for Other {
        fn bytes(&self) -> usize {
            self.0.len() * 4
        }
    }

    #[test]
    fn a_kept_buffer_comes_back_unless_too_large_or_of_another_type() {
        keep(Buffer(vec![7; 100]));
        assert_eq!(take::<Buffer>().0, vec![7; 100]);
        assert!(take::<Buffer>().0.is_empty(), "taken once");
        keep(Buffer(vec![1; 10]));
        assert!(take::<Other>().0.is_empty(), "another type: a new one");
        assert!(take::<Buffer>().0.is_empty(), "the other type replaced nothing, but took the slot");
        keep(Buffer(vec![0; KEPT_BYTES + 1]));
        assert!(take::<Buffer>().0.is_empty(), "too large to keep");
    }
}
