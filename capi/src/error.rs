//! Status codes, the thread's last error message, and the guard every entry point runs in.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What a function's call came to.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum nms_status {
    /// Success.
    NMS_OK = 0,
    /// A required pointer argument was NULL.
    NMS_ERR_NULL = 1,
    /// An argument is out of range or inconsistent: a size, an element type, an order.
    NMS_ERR_INVALID_ARGUMENT = 2,
    /// A format string does not parse or is invalid.
    NMS_ERR_FORMAT = 3,
    /// An expression or a schedule does not parse.
    NMS_ERR_PARSE = 4,
    /// The expression does not type-check against the declared tensors.
    NMS_ERR_SEMANTIC = 5,
    /// A scheduling command is illegal for the statement.
    NMS_ERR_SCHEDULE = 6,
    /// The statement cannot be compiled (not supported yet).
    NMS_ERR_UNSUPPORTED = 7,
    /// The C compiler is missing or failed (the message carries its output).
    NMS_ERR_COMPILER = 8,
    /// Tensor data is invalid: levels, N:M metadata, duplicates, a shape or a format that
    /// does not match.
    NMS_ERR_TENSOR = 9,
    /// Reading or writing a file failed (a malformed file: the message says the line).
    NMS_ERR_IO = 10,
    /// Memory ran out, or a result would not fit in the memory available.
    NMS_ERR_OUT_OF_MEMORY = 11,
    /// A kernel failed while running.
    NMS_ERR_RUN = 12,
    /// An internal error (a bug in nmsparse): the message says where.
    NMS_ERR_INTERNAL = 13,
    /// The device asked for is not there: no CUDA driver, no GPU, or neither NVRTC nor a
    /// precompiled kernel (the message says which).
    NMS_ERR_DEVICE = 14,
}

/// A failed call: its status and message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: nms_status,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: nms_status, message: impl Into<String>) -> Failure {
        Failure { status, message: message.into() }
    }

    pub(crate) fn null(what: &str) -> Failure {
        Failure::new(nms_status::NMS_ERR_NULL, format!("`{what}` is NULL"))
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(nms_status::NMS_ERR_INVALID_ARGUMENT, message)
    }
}

impl From<nms::format::TensorError> for Failure {
    fn from(e: nms::format::TensorError) -> Failure {
        let status = match e {
            nms::format::TensorError::TooLarge { .. } => nms_status::NMS_ERR_OUT_OF_MEMORY,
            _ => nms_status::NMS_ERR_TENSOR,
        };
        Failure::new(status, e.to_string())
    }
}

impl From<nms::format::FormatError> for Failure {
    fn from(e: nms::format::FormatError) -> Failure {
        Failure::new(nms_status::NMS_ERR_FORMAT, e.to_string())
    }
}

impl From<nms::format::IoError> for Failure {
    fn from(e: nms::format::IoError) -> Failure {
        Failure::new(nms_status::NMS_ERR_IO, e.to_string())
    }
}

impl From<nms::Error> for Failure {
    fn from(e: nms::Error) -> Failure {
        use nms::Error;
        let status = match &e {
            Error::Parse(_) => nms_status::NMS_ERR_PARSE,
            Error::Format(_) => nms_status::NMS_ERR_FORMAT,
            Error::Semantic(_) => nms_status::NMS_ERR_SEMANTIC,
            Error::Schedule(_) => nms_status::NMS_ERR_SCHEDULE,
            Error::Lower(_) => nms_status::NMS_ERR_UNSUPPORTED,
            Error::Jit(_) => nms_status::NMS_ERR_COMPILER,
            Error::Run(nms::lower::c::RunError::OutOfMemory(..)) => nms_status::NMS_ERR_OUT_OF_MEMORY,
            Error::Run(_) | Error::Interp(_) => nms_status::NMS_ERR_RUN,
            Error::Tensor(nms::format::TensorError::TooLarge { .. }) => nms_status::NMS_ERR_OUT_OF_MEMORY,
            Error::Tensor(_) => nms_status::NMS_ERR_TENSOR,
            Error::Missing(_) | Error::Operands(_) => nms_status::NMS_ERR_INVALID_ARGUMENT,
            Error::Spmm(nms::spmm::SpmmError::TooLarge { .. }) => nms_status::NMS_ERR_UNSUPPORTED,
            Error::Spmm(_) => nms_status::NMS_ERR_TENSOR,
            _ => nms_status::NMS_ERR_INTERNAL,
        };
        Failure::new(status, e.to_string())
    }
}

impl From<nms::cuda::CudaError> for Failure {
    fn from(e: nms::cuda::CudaError) -> Failure {
        use nms::cuda::CudaError;
        let status = match &e {
            CudaError::NoDriver | CudaError::NoDevice(_) | CudaError::NoNvrtc { .. } => nms_status::NMS_ERR_DEVICE,
            CudaError::Compile { .. } => nms_status::NMS_ERR_COMPILER,
            CudaError::Driver(_) | CudaError::Cublas(_) => nms_status::NMS_ERR_RUN,
            CudaError::Unsupported(_) => nms_status::NMS_ERR_UNSUPPORTED,
            CudaError::Inner { .. } | CudaError::Tensor(_) => nms_status::NMS_ERR_TENSOR,
            _ => nms_status::NMS_ERR_INTERNAL,
        };
        Failure::new(status, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs an entry point's body: its status, with the message kept for `nms_last_error`; a
/// panic is caught and reported as `NMS_ERR_INTERNAL`.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> nms_status {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return nms_status::NMS_OK,
        Ok(Err(f)) => f,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Failure::new(nms_status::NMS_ERR_INTERNAL, format!("internal error (please report): {what}"))
        }
    };
    let message = CString::new(failure.message.replace('\0', "?")).unwrap_or_default();
    LAST_ERROR.with(|m| *m.borrow_mut() = message);
    failure.status
}

/// The message of the calling thread's last failed call ("" when none failed): owned by the
/// library, valid until that thread's next failing call; never freed by the caller.
#[unsafe(no_mangle)]
pub extern "C" fn nms_last_error() -> *const c_char {
    LAST_ERROR.with(|m| m.borrow().as_ptr())
}

/// A static description of `status` ("success", "NULL argument", ...; "unknown status" for a
/// number that is none), never freed.
#[unsafe(no_mangle)]
pub extern "C" fn nms_status_str(status: i32) -> *const c_char {
    let known = [
        nms_status::NMS_OK,
        nms_status::NMS_ERR_NULL,
        nms_status::NMS_ERR_INVALID_ARGUMENT,
        nms_status::NMS_ERR_FORMAT,
        nms_status::NMS_ERR_PARSE,
        nms_status::NMS_ERR_SEMANTIC,
        nms_status::NMS_ERR_SCHEDULE,
        nms_status::NMS_ERR_UNSUPPORTED,
        nms_status::NMS_ERR_COMPILER,
        nms_status::NMS_ERR_TENSOR,
        nms_status::NMS_ERR_IO,
        nms_status::NMS_ERR_OUT_OF_MEMORY,
        nms_status::NMS_ERR_RUN,
        nms_status::NMS_ERR_INTERNAL,
        nms_status::NMS_ERR_DEVICE,
    ];
    let Some(&status) = known.iter().find(|&&s| s as i32 == status) else {
        return c"unknown status".as_ptr();
    };
    let text: &CStr = match status {
        nms_status::NMS_OK => c"success",
        nms_status::NMS_ERR_NULL => c"NULL argument",
        nms_status::NMS_ERR_INVALID_ARGUMENT => c"invalid argument",
        nms_status::NMS_ERR_FORMAT => c"invalid format",
        nms_status::NMS_ERR_PARSE => c"parse error",
        nms_status::NMS_ERR_SEMANTIC => c"expression does not type-check",
        nms_status::NMS_ERR_SCHEDULE => c"illegal schedule",
        nms_status::NMS_ERR_UNSUPPORTED => c"not supported",
        nms_status::NMS_ERR_COMPILER => c"C compiler failed",
        nms_status::NMS_ERR_TENSOR => c"invalid tensor",
        nms_status::NMS_ERR_IO => c"file error",
        nms_status::NMS_ERR_OUT_OF_MEMORY => c"out of memory",
        nms_status::NMS_ERR_RUN => c"kernel failed",
        nms_status::NMS_ERR_INTERNAL => c"internal error",
        nms_status::NMS_ERR_DEVICE => c"device not available",
    };
    text.as_ptr()
}

/// `ptr` as a reference, or a NULL-argument failure naming `what`.
///
/// # Safety
/// `ptr` is NULL or points at a live `T` that nothing mutates for `'a`.
pub(crate) unsafe fn arg<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller's contract.
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::null(what))
}

/// `ptr` as a mutable reference, or a NULL-argument failure.
///
/// # Safety
/// `ptr` is NULL or points at a live `T` that nothing else uses for `'a`.
pub(crate) unsafe fn arg_mut<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: the caller's contract.
    unsafe { ptr.as_mut() }.ok_or_else(|| Failure::null(what))
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `ptr` is NULL or points at a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn arg_str<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-NULL, and NUL-terminated by the caller's contract.
    let text = unsafe { CStr::from_ptr(ptr) };
    text.to_str().map_err(|_| Failure::invalid(format!("`{what}` is not UTF-8")))
}

/// Refuses an array of `len` elements of `T` larger than any object can be (`isize::MAX`
/// bytes): no caller can have one, so the count is wrong.
fn check_array_len<T>(len: usize, what: &str) -> Result<(), Failure> {
    match len.checked_mul(std::mem::size_of::<T>()) {
        Some(bytes) if bytes <= isize::MAX as usize => Ok(()),
        _ => Err(Failure::invalid(format!("`{what}` of {len} elements would be larger than any array"))),
    }
}

/// A copy of `items` in memory reserved fallibly: a count too large for the memory available
/// is `NMS_ERR_OUT_OF_MEMORY`, never an abort.
pub(crate) fn copied<T: Clone>(items: &[T], what: &str) -> Result<Vec<T>, Failure> {
    let mut out = Vec::new();
    reserve(&mut out, items.len(), what)?;
    out.extend_from_slice(items);
    Ok(out)
}

/// Reserves room for `n` more elements, or fails with `NMS_ERR_OUT_OF_MEMORY`.
pub(crate) fn reserve<T>(v: &mut Vec<T>, n: usize, what: &str) -> Result<(), Failure> {
    v.try_reserve_exact(n).map_err(|_| {
        Failure::new(
            nms_status::NMS_ERR_OUT_OF_MEMORY,
            format!("cannot allocate {n} elements for `{what}` ({} bytes each)", std::mem::size_of::<T>()),
        )
    })
}

/// An array argument of `len` elements (NULL allowed when `len` is 0).
///
/// # Safety
/// `ptr` is NULL or points at `len` initialized `T`s that live, unmodified, for `'a`.
pub(crate) unsafe fn arg_slice<'a, T>(ptr: *const T, len: usize, what: &str) -> Result<&'a [T], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    check_array_len::<T>(len, what)?;
    if ptr.is_null() {
        return Err(Failure::null(what));
    }
    if !ptr.is_aligned() {
        return Err(Failure::invalid(format!("`{what}` is not aligned for its element type")));
    }
    // SAFETY: non-NULL, aligned, `len` elements by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// An output array of `len` elements (NULL allowed when `len` is 0).
///
/// # Safety
/// `ptr` is NULL or points at room for `len` `T`s that nothing else uses for `'a`.
pub(crate) unsafe fn arg_out_slice<'a, T>(ptr: *mut T, len: usize, what: &str) -> Result<&'a mut [T], Failure> {
    if len == 0 {
        return Ok(&mut []);
    }
    check_array_len::<T>(len, what)?;
    if ptr.is_null() {
        return Err(Failure::null(what));
    }
    if !ptr.is_aligned() {
        return Err(Failure::invalid(format!("`{what}` is not aligned for its element type")));
    }
    // SAFETY: non-NULL, aligned, room for `len` elements by the caller's contract; `T` here is
    // a plain number type, for which any bit pattern the memory holds is a valid value.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// Writes a new handle to the out-parameter `out` (checked for NULL before anything is made).
///
/// # Safety
/// `out` is NULL or points at writable room for one pointer.
pub(crate) unsafe fn give<T>(out: *mut *mut T, value: T) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null("out"));
    }
    // SAFETY: non-NULL and writable by the caller's contract; the handle is the caller's now.
    unsafe { out.write(Box::into_raw(Box::new(value))) };
    Ok(())
}

/// Writes `value` to the out-parameter `out`.
///
/// # Safety
/// `out` is NULL or points at writable room for one `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-NULL and writable by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Frees a handle made by [`give`].
///
/// # Safety
/// `handle` is NULL or came from [`give`] and is not used again.
pub(crate) unsafe fn release<T>(handle: *mut T) {
    if !handle.is_null() {
        // SAFETY: made by `Box::into_raw` in `give`, freed once by the caller's contract.
        drop(unsafe { Box::from_raw(handle) });
    }
}

/// Writes `text` and a NUL into `buffer` (`capacity` bytes) and its length without the NUL to
/// `*length` when `length` is not NULL — written even when the buffer is too small (which is
/// `NMS_ERR_INVALID_ARGUMENT`), so that a caller can ask for the length first.
///
/// # Safety
/// `buffer` is NULL or has `capacity` writable bytes; `length` is NULL or writable.
pub(crate) unsafe fn put_text(
    text: &str,
    buffer: *mut c_char,
    capacity: usize,
    length: *mut usize,
) -> Result<(), Failure> {
    if !length.is_null() {
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { put(length, text.len(), "length") }?;
    }
    if capacity < text.len() + 1 {
        return Err(Failure::invalid(format!("the buffer holds {capacity} bytes, {} needed", text.len() + 1)));
    }
    // SAFETY: the caller's contract.
    let out = unsafe { arg_out_slice(buffer.cast::<u8>(), capacity, "buffer") }?;
    out[..text.len()].copy_from_slice(text.as_bytes());
    out[text.len()] = 0;
    Ok(())
}
