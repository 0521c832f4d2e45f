//! The exception classes: one per stage that can refuse, all under `nmsparse.Error`, each
//! carrying the library's own message.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(nmsparse, Error, PyException, "Anything nmsparse refuses.");
create_exception!(nmsparse, ExpressionError, Error, "The expression does not parse or type-check.");
create_exception!(nmsparse, FormatError, Error, "A format string does not parse.");
create_exception!(nmsparse, ScheduleError, Error, "A schedule does not parse or apply.");
create_exception!(nmsparse, UnsupportedError, Error, "A statement the compiler does not lower.");
create_exception!(nmsparse, CompileError, Error, "The C compiler or the kernel cache failed.");
create_exception!(nmsparse, OperandError, Error, "An operand is missing, unknown, or does not fit.");
create_exception!(nmsparse, TensorError, Error, "Arrays that break a tensor's invariants.");
create_exception!(nmsparse, RunError, Error, "A kernel failed while running.");
create_exception!(nmsparse, FileError, Error, "A file that cannot be read or written.");

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("ExpressionError", py.get_type::<ExpressionError>())?;
    m.add("FormatError", py.get_type::<FormatError>())?;
    m.add("ScheduleError", py.get_type::<ScheduleError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("OperandError", py.get_type::<OperandError>())?;
    m.add("TensorError", py.get_type::<TensorError>())?;
    m.add("RunError", py.get_type::<RunError>())?;
    m.add("FileError", py.get_type::<FileError>())?;
    Ok(())
}

/// The library's error as the exception of its stage.
pub(crate) fn to_py(e: nmsparse::Error) -> PyErr {
    use nmsparse::Error as E;
    let message = e.to_string();
    match e {
        E::Parse(_) | E::Semantic(_) => ExpressionError::new_err(message),
        E::Format(_) => FormatError::new_err(message),
        E::Schedule(_) => ScheduleError::new_err(message),
        E::Lower(_) => UnsupportedError::new_err(message),
        E::Jit(_) => CompileError::new_err(message),
        E::Tensor(_) => TensorError::new_err(message),
        E::Missing(_) | E::Operands(_) => OperandError::new_err(message),
        _ => RunError::new_err(message),
    }
}

pub(crate) fn tensor_error(e: nm_format::TensorError) -> PyErr {
    TensorError::new_err(e.to_string())
}

pub(crate) fn format_error(e: nm_format::FormatError) -> PyErr {
    FormatError::new_err(e.to_string())
}

pub(crate) fn operand_error(message: impl Into<String>) -> PyErr {
    OperandError::new_err(message.into())
}
