//! # libnmsparse: the C API of nmsparse
//!
//! Built as `libnmsparse.so` and `libnmsparse.a`; `include/nmsparse.h` is generated from this
//! crate by cbindgen. The conventions, which every function follows:
//!
//! - **Handles are opaque** (`nms_format`, `nms_tensor`, `nms_program`, `nms_kernel`,
//!   `nms_nm_plan`), made by a function that writes them to an out-parameter and released by
//!   their `*_free` (which accepts NULL). Nothing else frees them; nothing the library returns needs `free()`.
//! - **Every fallible function returns `nms_status`**: `NMS_OK`, or a named error kind, after
//!   which `nms_last_error()` gives the calling thread's message (valid until its next failing
//!   call). Out-parameters are written only on success.
//! - **No panic crosses the boundary**: an internal error becomes `NMS_ERR_INTERNAL`.
//! - **Arguments are checked**: NULL pointers (`NMS_ERR_NULL`), sizes, counts, orders (1 to
//!   `NMS_MAX_ORDER`) and enumerated values (`nms_dtype`, `nms_backend`, `nms_device`, plain
//!   integers so that an unknown value is refused rather than taken for another) are
//!   reported (`NMS_ERR_INVALID_ARGUMENT`), never used blindly. Array arguments must hold the
//!   number of elements their documentation states. Every copy sized by the caller's counts
//!   is reserved fallibly: too large is `NMS_ERR_OUT_OF_MEMORY`, never an abort.
//! - **Input arrays are copied** into the library's own storage (tensors are validated, and
//!   their indices narrowed to 32 bits where they fit); kernels then read tensors in place.
//! - **Threads**: handles may be shared read-only between threads; a kernel may run on several
//!   threads at once (each call makes its own result); a handle must not be freed while
//!   another thread uses it.

#![allow(non_camel_case_types)]

mod error;
mod nm;
mod plan;
mod program;
mod tensor;

pub use error::{nms_last_error, nms_status, nms_status_str};
pub use nm::{NMS_DEVICE_CPU, NMS_DEVICE_CUDA, nms_device, nms_nm_spmm, nms_tensor_from_nm_parts};
pub use plan::{
    NMS_MEMORY_DEVICE, NMS_MEMORY_HOST, nms_memory, nms_nm_plan, nms_nm_plan_create, nms_nm_plan_free, nms_nm_plan_run,
    nms_nm_plan_shape,
};
pub use program::{
    NMS_BACKEND_INTERP, NMS_BACKEND_JIT, nms_backend, nms_kernel, nms_kernel_free, nms_kernel_run,
    nms_kernel_set_threads, nms_program, nms_program_compile, nms_program_free, nms_program_index_size,
    nms_program_new, nms_program_schedule, nms_program_tensor,
};
pub use tensor::{
    NMS_F32, NMS_F64, nms_dtype, nms_format, nms_format_free, nms_format_parse, nms_format_to_string, nms_tensor,
    nms_tensor_convert, nms_tensor_dtype, nms_tensor_format, nms_tensor_free, nms_tensor_from_coo, nms_tensor_from_csr,
    nms_tensor_from_dense, nms_tensor_nnz, nms_tensor_order, nms_tensor_prune, nms_tensor_read, nms_tensor_shape,
    nms_tensor_to_coo, nms_tensor_to_csr, nms_tensor_to_dense, nms_tensor_write,
};

/// The largest tensor order (number of dimensions) the library takes; larger is
/// `NMS_ERR_INVALID_ARGUMENT`.
pub const NMS_MAX_ORDER: usize = 64;
const _: () = assert!(NMS_MAX_ORDER == nms::format::Format::MAX_ORDER);

/// The library's major version (semantic versioning: the ABI is stable within a major version).
pub const NMS_VERSION_MAJOR: u32 = 0;
/// The library's minor version.
pub const NMS_VERSION_MINOR: u32 = 1;
/// The library's patch version.
pub const NMS_VERSION_PATCH: u32 = 0;

/// The library's version, `"MAJOR.MINOR.PATCH"`: a static string, never freed.
#[unsafe(no_mangle)]
pub extern "C" fn nms_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
