//! `nmsparse._native`: the compiled half of the Python package.
//!
//! A thin layer over the library's public API ([`nmsparse::Program`], [`nmsparse::Kernel`],
//! [`nm_format::Tensor`]): the Python half (`python/python/nmsparse`) turns scipy and numpy
//! objects into the plain operand descriptions this module takes, and its results back.
//! Operands arrive as numpy arrays and are read in place ([`nm_format::TensorView`]); results
//! leave as numpy arrays that own the kernel's `Vec`s.

mod errors;
mod kernel;
mod tensor;

use pyo3::prelude::*;

/// The module: kernels, tensors, files and the exception classes.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<kernel::NativeKernel>()?;
    m.add_class::<tensor::NativeTensor>()?;
    m.add_function(wrap_pyfunction!(tensor::read, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::write, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::format_name, m)?)?;
    errors::register(m)?;
    Ok(())
}
