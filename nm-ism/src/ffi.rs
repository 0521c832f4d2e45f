//! The C ABI of a workspace, for generated kernels: the accumulation array they append to
//! inline, and the runtime calls they reach through function pointers.

use std::ffi::{c_int, c_void};

use nm_format::Value;

use crate::Workspace;

/// What a generated kernel sees of a [`Workspace`]. The insert step is inline: with
/// `len < cap`, write `keys[len]` and `vals[len]`, then `len += 1`; at `len == cap` call
/// `flush(slot)` first (it sorts and merges, or hands the full array to the merging thread,
/// and may move `keys`/`vals`: reload them). A dense workspace (`dense` not null) is instead
/// written at `dense[at] += v; mark[at] = 1`, where `at` is the key's
/// [`KeyLayout::dense_index`](crate::KeyLayout::dense_index). `finish` is the host's: it
/// compresses the workspace into the kernel's result arrays (`args` is the kernel's argument
/// array). Every call returns 0, or 1 on failure (the reason is kept in the workspace).
#[repr(C)]
#[derive(Debug)]
pub struct Slot {
    /// The accumulation array's keys.
    pub keys: *mut u64,
    /// Its values (`f32` or `f64`).
    pub vals: *mut c_void,
    /// Components in the accumulation array.
    pub len: i64,
    /// Its capacity.
    pub cap: i64,
    /// A dense workspace's values, at each key's dense index (null for a sparse one).
    pub dense: *mut c_void,
    /// A dense workspace's flags: 1 where a component was written.
    pub mark: *mut u8,
    /// A `bucket` workspace's buckets, one per first coordinate (null for other policies):
    /// a component goes to bucket `key >> shift`, and `len` counts components in all buckets.
    pub buckets: *mut crate::BucketHead,
    /// The shift from a key to its bucket.
    pub shift: i64,
    /// Sorts and merges the full accumulation array (or combines the buckets).
    pub flush: unsafe extern "C" fn(*mut Slot) -> c_int,
    /// Doubles the capacity of bucket `b` (a `bucket` workspace's).
    pub grow: unsafe extern "C" fn(*mut Slot, i64) -> c_int,
    /// Compresses the workspace into the kernel's result (set by the host that runs the kernel).
    pub finish: Option<unsafe extern "C" fn(*mut Slot, *mut c_void) -> c_int>,
    /// The [`Workspace`] this slot belongs to.
    pub owner: *mut c_void,
    /// Host data for `finish`.
    pub host: *mut c_void,
}

/// The declaration of [`Slot`] for generated C (kept next to the Rust layout it must match).
pub const C_DECLARATION: &str = "typedef struct nms_bucket { uint64_t *keys; void *vals; int64_t len, cap; } nms_bucket;\n\
typedef struct nms_ism { uint64_t *keys; void *vals; int64_t len, cap; void *dense; uint8_t *mark; nms_bucket *buckets; \
int64_t shift; int (*flush)(struct nms_ism *); int (*grow)(struct nms_ism *, int64_t); \
int (*finish)(struct nms_ism *, void *); void *owner; void *host; } nms_ism;\n";

/// `grow` of a slot whose owner is a `Workspace<V>`.
///
/// # Safety
/// As [`slot_flush`].
pub unsafe extern "C" fn slot_grow<V: Value>(slot: *mut Slot, bucket: i64) -> c_int {
    // SAFETY: as in `slot_flush`.
    let ws = unsafe { &mut *((*slot).owner as *mut Workspace<V>) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ws.grow_bucket(bucket))) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            ws.fail(e);
            1
        }
        Err(_) => {
            ws.fail(crate::IsmError::Internal("the workspace's grow panicked".into()));
            1
        }
    }
}

/// `flush` of a slot whose owner is a `Workspace<V>`.
///
/// # Safety
/// `slot` must be the slot of a live `Workspace<V>` (from [`Workspace::slot`]) that nothing
/// else accesses during the call.
pub unsafe extern "C" fn slot_flush<V: Value>(slot: *mut Slot) -> c_int {
    // SAFETY: the caller passes a slot `Workspace::slot` handed out; `owner` points back to
    // its workspace, boxed (never moved) and not otherwise borrowed during the call.
    let ws = unsafe { &mut *((*slot).owner as *mut Workspace<V>) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ws.flush())) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            ws.fail(e);
            1
        }
        Err(_) => {
            ws.fail(crate::IsmError::Internal("the workspace's flush panicked".into()));
            1
        }
    }
}
