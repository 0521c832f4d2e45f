//! Expressions: declared, scheduled, compiled into kernels, run on tensors.

use std::ffi::c_char;

use nms::format::Tensor;
use nms::{Backend, Kernel, Program};

use crate::error::{Failure, arg, arg_mut, arg_slice, arg_str, give, guard, nms_status, put_text, release};
use nms::format::AnyTensor;

use crate::tensor::{Dtype, check_order, nms_dtype, nms_tensor};

/// Which back end runs a kernel: `NMS_BACKEND_JIT` or `NMS_BACKEND_INTERP` (an integer:
/// anything else is `NMS_ERR_INVALID_ARGUMENT`).
pub type nms_backend = i32;
/// Generated C compiled by the system compiler (`$CC`, default `cc`), cached on disk
/// (`$NMSPARSE_CACHE_DIR`, default the user cache directory).
pub const NMS_BACKEND_JIT: nms_backend = 0;
/// The loop-IR interpreter: slow, needs no compiler.
pub const NMS_BACKEND_INTERP: nms_backend = 1;

/// An expression in index notation (`"y(i) = A(i,j) * x(j)"`) with its tensors' declarations
/// and a schedule.
pub struct nms_program {
    inner: Program,
}

/// A compiled expression, ready to run on tensors.
pub struct nms_kernel {
    inner: Option<AnyKernel>,
}

enum AnyKernel {
    F32(Kernel<f32>),
    F64(Kernel<f64>),
}

/// Parses an expression (taco's index notation).
///
/// On success `*out` is a new program the caller releases with `nms_program_free`.
///
/// # Safety
/// `expr` is a NUL-terminated string; `out` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_program_new(expr: *const c_char, out: *mut *mut nms_program) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let expr = unsafe { arg_str(expr, "expr") }?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let inner = Program::new(expr)?;
        // SAFETY: checked non-NULL above.
        unsafe { give(out, nms_program { inner }) }
    })
}

/// Declares tensor `name` (every tensor of the expression, the result included) with `order`
/// sizes in `shape` (`order` from 0, a scalar, to `NMS_MAX_ORDER`) and a format string
/// (`"dense"`, `"csr"`, `"ds:1,0"`, ...).
///
/// # Safety
/// `program` is live and used by no other thread during the call; `name` and `format` are
/// NUL-terminated strings; `shape` has `order` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_program_tensor(
    program: *mut nms_program,
    name: *const c_char,
    order: usize,
    shape: *const usize,
    format: *const c_char,
) -> nms_status {
    guard(|| {
        if order != 0 {
            check_order(order)?;
        }
        // SAFETY: the contract above.
        let (program, name, shape, format) = unsafe {
            (
                arg_mut(program, "program")?,
                arg_str(name, "name")?,
                arg_slice(shape, order, "shape")?,
                arg_str(format, "format")?,
            )
        };
        program.inner = program.inner.clone().tensor(name, shape, format)?;
        Ok(())
    })
}

/// Gives index variable `var` a size (needed only when no tensor's dimension gives it).
///
/// # Safety
/// `program` is live and unshared during the call; `var` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_program_index_size(
    program: *mut nms_program,
    var: *const c_char,
    size: usize,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let (program, var) = unsafe { (arg_mut(program, "program")?, arg_str(var, "var")?) };
        program.inner = program.inner.clone().index_size(var, size);
        Ok(())
    })
}

/// Sets the schedule (`"reorder(k, j); parallelize(i, cpu_thread, no_races)"`): checked when
/// the program is compiled.
///
/// # Safety
/// `program` is live and unshared during the call; `schedule` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_program_schedule(program: *mut nms_program, schedule: *const c_char) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let (program, schedule) = unsafe { (arg_mut(program, "program")?, arg_str(schedule, "schedule")?) };
        program.inner = program.inner.clone().schedule(schedule);
        Ok(())
    })
}

/// Type-checks, schedules, lowers and compiles the program for values of `dtype`.
///
/// On success `*out` is a new kernel the caller releases with `nms_kernel_free`; the program
/// may be freed or changed afterwards. The process keeps the kernels it compiled: compiling an
/// equal program again (the same expression, declarations, schedule, `dtype`, `backend` and
/// `$CC`) shares the compiled code and costs microseconds.
///
/// # Safety
/// `program` is live; `out` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_program_compile(
    program: *const nms_program,
    dtype: nms_dtype,
    backend: nms_backend,
    out: *mut *mut nms_kernel,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let program = unsafe { arg(program, "program") }?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        let backend = match backend {
            NMS_BACKEND_JIT => Backend::Jit,
            NMS_BACKEND_INTERP => Backend::Interp,
            other => {
                return Err(Failure::invalid(format!(
                    "backend {other} is neither NMS_BACKEND_JIT ({NMS_BACKEND_JIT}) nor NMS_BACKEND_INTERP ({NMS_BACKEND_INTERP})"
                )));
            }
        };
        let inner = match Dtype::of(dtype)? {
            Dtype::F32 => AnyKernel::F32(program.inner.compile(backend)?),
            Dtype::F64 => AnyKernel::F64(program.inner.compile(backend)?),
        };
        // SAFETY: checked non-NULL above.
        unsafe { give(out, nms_kernel { inner: Some(inner) }) }
    })
}

/// Releases a program (NULL is allowed).
///
/// # Safety
/// `program` is NULL or a program from this library, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_program_free(program: *mut nms_program) {
    // SAFETY: the contract above.
    unsafe { release(program) }
}

/// Writes a description of the kernel (NUL-terminated) into `buffer` of `capacity` bytes and
/// its length (without the NUL) to `*length` when `length` is not NULL: the statement, the
/// kernel that runs it (generated C, the interpreter, or the hand-written N:M SpMM — what the
/// command line's `-print-compute` names), the threads it uses, operands read through copies,
/// kernels run first, and notes on what the lowering decided (a sparse result that stores
/// every coordinate of a loop). A buffer too small is `NMS_ERR_INVALID_ARGUMENT` with
/// `*length` still written, so that a caller can ask for the length first.
///
/// # Safety
/// `kernel` is live; `buffer` has `capacity` writable bytes; `length` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_kernel_describe(
    kernel: *const nms_kernel,
    buffer: *mut c_char,
    capacity: usize,
    length: *mut usize,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let kernel = unsafe { arg(kernel, "kernel") }?;
        let text = match &kernel.inner {
            Some(AnyKernel::F32(k)) => k.describe(),
            Some(AnyKernel::F64(k)) => k.describe(),
            None => return Err(Failure::invalid("the kernel is empty")),
        };
        // SAFETY: the contract above.
        unsafe { put_text(&text, buffer, capacity, length) }
    })
}

/// Runs later calls of the kernel on `threads` threads (row ranges of the outermost loop,
/// where it names disjoint rows of the result: results identical bit for bit; or where it is
/// a reduction into a dense result, each thread adding into its own copy, the copies summed in
/// thread order — the same sums for the same thread count — or atomically where the schedule
/// says `atomics`). The threads
/// start on the first such call and are kept, idle, for later ones (one set per thread count,
/// shared by every kernel and `nms_nm_spmm`, as an OpenMP runtime keeps its own): unloading the
/// library while they exist (`dlclose`) is not supported. `threads` is 1 to 1024
/// (`NMS_ERR_INVALID_ARGUMENT` otherwise): past the cores, threads only wait for one another.
/// Until it is called, a kernel whose schedule parallelizes the outermost loop runs on every
/// core, any other on one thread.
///
/// # Safety
/// `kernel` is live and used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_kernel_set_threads(kernel: *mut nms_kernel, threads: usize) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let kernel = unsafe { arg_mut(kernel, "kernel") }?;
        check_threads(threads)?;
        kernel.inner = match kernel.inner.take() {
            Some(AnyKernel::F32(k)) => Some(AnyKernel::F32(k.with_threads(threads))),
            Some(AnyKernel::F64(k)) => Some(AnyKernel::F64(k.with_threads(threads))),
            None => None,
        };
        Ok(())
    })
}

/// Runs the kernel on `count` operands, `names[i]` naming `tensors[i]` (each of the kernel's
/// value type, in the format and shape it was declared with: anything else is
/// `NMS_ERR_TENSOR` or `NMS_ERR_INVALID_ARGUMENT`, as is a name given twice, a name that is
/// not an operand of the expression, the result's name, or an operand missing). Operands are
/// read in place, not copied.
///
/// On success `*result` is a new tensor (the expression's left-hand side) the caller releases
/// with `nms_tensor_free`. Several threads may run one kernel at once.
///
/// # Safety
/// `kernel` is live; `names` and `tensors` have `count` elements, each a NUL-terminated string
/// and a live tensor; `result` points at room for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_kernel_run(
    kernel: *const nms_kernel,
    count: usize,
    names: *const *const c_char,
    tensors: *const *const nms_tensor,
    result: *mut *mut nms_tensor,
) -> nms_status {
    guard(|| {
        // SAFETY: the contract above.
        let (kernel, names, tensors) = unsafe {
            (arg(kernel, "kernel")?, arg_slice(names, count, "names")?, arg_slice(tensors, count, "tensors")?)
        };
        if result.is_null() {
            return Err(Failure::null("result"));
        }
        let mut operands: Vec<(&str, &nms_tensor)> = Vec::with_capacity(count);
        for (i, (&name, &tensor)) in names.iter().zip(tensors).enumerate() {
            // SAFETY: the contract above (each element a string and a live tensor).
            let pair = unsafe { (arg_str(name, &format!("names[{i}]"))?, arg(tensor, &format!("tensors[{i}]"))?) };
            operands.push(pair);
        }
        fn typed<'a, T>(
            operands: &[(&'a str, &'a nms_tensor)],
            pick: impl Fn(&'a AnyTensor) -> Option<&'a Tensor<T>>,
        ) -> Result<Vec<(&'a str, &'a Tensor<T>)>, Failure> {
            operands
                .iter()
                .map(|&(name, t)| {
                    pick(&t.inner).map(|x| (name, x)).ok_or_else(|| {
                        Failure::invalid(format!("tensor `{name}` has another value type than the kernel"))
                    })
                })
                .collect()
        }
        let inner = match kernel.inner.as_ref() {
            Some(AnyKernel::F32(k)) => {
                let args = typed(&operands, |t| if let AnyTensor::F32(x) = t { Some(x) } else { None })?;
                AnyTensor::F32(k.run(&args)?)
            }
            Some(AnyKernel::F64(k)) => {
                let args = typed(&operands, |t| if let AnyTensor::F64(x) = t { Some(x) } else { None })?;
                AnyTensor::F64(k.run(&args)?)
            }
            None => return Err(Failure::invalid("the kernel is empty")),
        };
        // SAFETY: checked non-NULL above.
        unsafe { give(result, nms_tensor { inner }) }
    })
}

/// Releases a kernel (NULL is allowed).
///
/// # Safety
/// `kernel` is NULL or a kernel from this library, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nms_kernel_free(kernel: *mut nms_kernel) {
    // SAFETY: the contract above.
    unsafe { release(kernel) }
}

/// A thread count of 1 to `MAX_THREADS`, else why not.
pub(crate) fn check_threads(threads: usize) -> Result<(), Failure> {
    let max = nms::runtime::workers::MAX_THREADS;
    if (1..=max).contains(&threads) {
        Ok(())
    } else {
        Err(Failure::invalid(format!("threads must be 1 to {max}, not {threads}")))
    }
}
