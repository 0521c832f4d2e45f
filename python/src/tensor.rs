//! `NativeTensor`: an owned tensor of `f32` or `f64` in any format, and the conversions
//! between its arrays and numpy's.

use nm_format::{
    AnyTensor, CoordinateList, Duplicates, Format, Indices, IndicesView, LevelStorage, Tensor, with_tensor,
};
use numpy::{IntoPyArray, PyArrayDyn, PyArrayMethods, PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::errors::{FileError, format_error, operand_error, tensor_error};

/// Value types by numpy's names.
pub(crate) fn dtype_name(is_f32: bool) -> &'static str {
    if is_f32 { "float32" } else { "float64" }
}

/// Parses a format string for a tensor of `order` dimensions.
pub(crate) fn parse_format(text: &str, order: usize) -> PyResult<Format> {
    Format::parse(text, order.max(1)).map_err(format_error)
}

/// An owned index array as a numpy array, moved, not copied: `int32` when every entry fits
/// (what scipy makes of small matrices), else `int64`.
pub(crate) fn indices_into_py(py: Python<'_>, indices: Indices) -> Py<PyAny> {
    match indices {
        Indices::U32(v) if v.iter().all(|&x| x <= i32::MAX as u32) => {
            bytemuck::allocation::cast_vec::<u32, i32>(v).into_pyarray(py).into_any().unbind()
        }
        Indices::U32(v) => v.into_iter().map(i64::from).collect::<Vec<i64>>().into_pyarray(py).into_any().unbind(),
        Indices::U64(v) => bytemuck::allocation::cast_vec::<u64, i64>(v).into_pyarray(py).into_any().unbind(),
    }
}

fn indices_view_to_py(py: Python<'_>, indices: IndicesView<'_>) -> Py<PyAny> {
    indices_into_py(py, indices.to_indices())
}

/// The value array of a numpy array, borrowed: its dtype must be the kernel's.
pub(crate) fn values_of<'py, T: numpy::Element>(
    array: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<PyReadonlyArray1<'py, T>> {
    array.extract::<PyReadonlyArray1<'py, T>>().map_err(|_| {
        operand_error(format!("{what}: expected a contiguous one-dimensional array of {}", std::any::type_name::<T>()))
    })
}

#[pyclass(module = "nmsparse._native", frozen)]
pub(crate) struct NativeTensor {
    pub(crate) tensor: AnyTensor,
}

impl NativeTensor {
    pub(crate) fn new(tensor: AnyTensor) -> Self {
        NativeTensor { tensor }
    }
}

fn dense_tensor<T: nm_format::Value + numpy::Element>(array: &Bound<'_, PyAny>, format: &str) -> PyResult<Tensor<T>> {
    let array = array.cast::<PyArrayDyn<T>>().map_err(|e| operand_error(e.to_string()))?.readonly();
    let shape = array.shape().to_vec();
    let values = array.as_slice().map_err(|_| operand_error("the array is not contiguous (C order)"))?;
    let format = parse_format(format, shape.len())?;
    Tensor::from_dense(&shape, values, &format).map_err(tensor_error)
}

fn coo_tensor<T: nm_format::Value + numpy::Element>(
    shape: Vec<usize>,
    coords: &[PyReadonlyArray1<'_, i64>],
    values: &Bound<'_, PyAny>,
    format: &str,
) -> PyResult<Tensor<T>> {
    let values = values_of::<T>(values, "values")?;
    let values = values.as_slice().map_err(|_| operand_error("values: not contiguous"))?;
    if coords.len() != shape.len() {
        return Err(operand_error(format!("{} coordinate arrays for a tensor of order {}", coords.len(), shape.len())));
    }
    let mut list = CoordinateList::new(shape.clone());
    let mut columns = Vec::with_capacity(coords.len());
    for (d, c) in coords.iter().enumerate() {
        let c = c.as_slice().map_err(|_| operand_error("coordinates: not contiguous"))?;
        if c.len() != values.len() {
            return Err(operand_error(format!("{} coordinates in dimension {d} for {} values", c.len(), values.len())));
        }
        if let Some(&bad) = c.iter().find(|&&x| x < 0 || x as u64 >= shape[d] as u64) {
            return Err(operand_error(format!("coordinate {bad} in dimension {d} of size {}", shape[d])));
        }
        columns.push(c.iter().map(|&x| x as usize).collect::<Vec<usize>>());
    }
    list.coords = columns;
    list.values = values.to_vec();
    let format = parse_format(format, shape.len())?;
    Tensor::from_coordinates(&list, &format, Duplicates::Sum).map_err(tensor_error)
}

#[pymethods]
impl NativeTensor {
    /// A tensor of a dense numpy array (C order) in `format`.
    #[staticmethod]
    fn from_dense(array: &Bound<'_, PyAny>, format: &str) -> PyResult<NativeTensor> {
        if array.cast::<PyArrayDyn<f32>>().is_ok() {
            return Ok(NativeTensor::new(AnyTensor::F32(dense_tensor::<f32>(array, format)?)));
        }
        Ok(NativeTensor::new(AnyTensor::F64(dense_tensor::<f64>(array, format)?)))
    }

    /// A tensor of coordinates (one int64 array per dimension) and values; duplicates are
    /// summed.
    #[staticmethod]
    fn from_coordinates(
        shape: Vec<usize>,
        coords: Vec<PyReadonlyArray1<'_, i64>>,
        values: &Bound<'_, PyAny>,
        format: &str,
    ) -> PyResult<NativeTensor> {
        if values.extract::<PyReadonlyArray1<'_, f32>>().is_ok() {
            return Ok(NativeTensor::new(AnyTensor::F32(coo_tensor::<f32>(shape, &coords, values, format)?)));
        }
        Ok(NativeTensor::new(AnyTensor::F64(coo_tensor::<f64>(shape, &coords, values, format)?)))
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        with_tensor!(&self.tensor, t => PyTuple::new(py, t.shape()))
    }

    /// The format's short name (`csr`, `nm(2,8,32)`, ...) where it has one, else its map.
    #[getter]
    fn format(&self) -> String {
        with_tensor!(&self.tensor, t => t.format().name().unwrap_or_else(|| t.format().to_string()))
    }

    #[getter]
    fn nnz(&self) -> usize {
        with_tensor!(&self.tensor, t => t.stored_len())
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.tensor.is_f32())
    }

    /// The tensor as a dense numpy array of its shape (duplicates summed).
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        with_tensor!(&self.tensor, t => {
            let dense = t.to_dense().map_err(tensor_error)?;
            Ok(dense.into_pyarray(py).reshape(t.shape().to_vec())?.into_any())
        })
    }

    /// The arrays of each level (copies): `("dense", size)`, `("compressed", pos, crd)`,
    /// `("singleton", crd)`, `("structured", size, offsets)` or `("band", pos, first)`, and the
    /// values.
    fn parts<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyAny>)> {
        with_tensor!(&self.tensor, t => {
            let levels = PyList::empty(py);
            for level in t.levels() {
                let item: Bound<'py, PyAny> = match level.view() {
                    nm_format::LevelView::Dense { size } => ("dense", size).into_pyobject(py)?.into_any(),
                    nm_format::LevelView::Compressed { pos, crd } => {
                        ("compressed", indices_view_to_py(py, pos), indices_view_to_py(py, crd)).into_pyobject(py)?.into_any()
                    }
                    nm_format::LevelView::Singleton { crd } => ("singleton", indices_view_to_py(py, crd)).into_pyobject(py)?.into_any(),
                    nm_format::LevelView::Structured { size, meta } => {
                        ("structured", size, meta.unpack().into_pyarray(py)).into_pyobject(py)?.into_any()
                    }
                    nm_format::LevelView::Band { pos, first } => {
                        ("band", indices_view_to_py(py, pos), indices_view_to_py(py, first)).into_pyobject(py)?.into_any()
                    }
                };
                levels.append(item)?;
            }
            Ok((levels, t.values().to_vec().into_pyarray(py).into_any()))
        })
    }

    /// Every stored component (block padding left out): one int64 coordinate array per
    /// dimension and the values, in storage order.
    fn coordinates<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyAny>)> {
        with_tensor!(&self.tensor, t => {
            let mut coords: Vec<Vec<i64>> = vec![Vec::new(); t.order()];
            let mut values = Vec::new();
            for (c, v) in t.iter() {
                for (d, &x) in c.iter().enumerate() {
                    coords[d].push(x as i64);
                }
                values.push(v);
            }
            let list = PyList::empty(py);
            for c in coords {
                list.append(c.into_pyarray(py))?;
            }
            Ok((list, values.into_pyarray(py).into_any()))
        })
    }

    /// The tensor in another format.
    fn convert(&self, format: &str) -> PyResult<NativeTensor> {
        Ok(NativeTensor::new(with_tensor!(&self.tensor, t => {
            let f = parse_format(format, t.order())?;
            AnyTensor::from(t.convert(&f).map_err(tensor_error)?)
        })))
    }

    /// The tensor with values of another type (`"float32"` or `"float64"`).
    fn astype(&self, dtype: &str) -> PyResult<NativeTensor> {
        let (levels, values): (Vec<LevelStorage>, Vec<f64>) = with_tensor!(&self.tensor, t => (t.levels().to_vec(), t.values().iter().map(|&v| nm_format::Value::to_f64(v)).collect()));
        let (shape, format) = with_tensor!(&self.tensor, t => (t.shape().to_vec(), t.format().clone()));
        Ok(NativeTensor::new(match dtype {
            "float64" => AnyTensor::F64(Tensor::from_raw(shape, format, levels, values).map_err(tensor_error)?),
            "float32" => AnyTensor::F32(
                Tensor::from_raw(shape, format, levels, values.iter().map(|&v| v as f32).collect())
                    .map_err(tensor_error)?,
            ),
            other => return Err(operand_error(format!("dtype {other}: nmsparse computes in float32 or float64"))),
        }))
    }

    /// Prunes to `format`'s structured N:M levels (largest magnitudes kept) and reports what
    /// was dropped.
    fn prune<'py>(&self, py: Python<'py>, format: &str) -> PyResult<(NativeTensor, Bound<'py, PyDict>)> {
        let (tensor, report) = with_tensor!(&self.tensor, t => {
            let f = parse_format(format, t.order())?;
            let (pruned, report) = t.prune(&f).map_err(tensor_error)?;
            (AnyTensor::from(pruned), report)
        });
        let d = PyDict::new(py);
        d.set_item("kept", report.kept)?;
        d.set_item("dropped", report.dropped)?;
        d.set_item("dropped_magnitude", report.dropped_magnitude)?;
        Ok((NativeTensor::new(tensor), d))
    }

    fn __repr__(&self) -> String {
        with_tensor!(&self.tensor, t => format!(
            "nmsparse.Tensor(shape={:?}, format={}, nnz={}, dtype={})",
            t.shape(),
            t.format(),
            t.stored_len(),
            dtype_name(self.tensor.is_f32())
        ))
    }
}

/// Reads a Matrix Market (`.mtx`) or FROSTT (`.tns`) file into `format` (COO when `None`).
#[pyfunction]
#[pyo3(signature = (path, format=None, dtype="float64"))]
pub(crate) fn read(
    py: Python<'_>,
    path: std::path::PathBuf,
    format: Option<&str>,
    dtype: &str,
) -> PyResult<NativeTensor> {
    let format = format.unwrap_or("coo").to_string();
    let read = |path: std::path::PathBuf| -> PyResult<AnyTensor> {
        Ok(match dtype {
            "float64" => AnyTensor::F64(
                nm_format::io::read_tensor(&path, &format).map_err(|e| FileError::new_err(e.to_string()))?,
            ),
            "float32" => AnyTensor::F32(
                nm_format::io::read_tensor(&path, &format).map_err(|e| FileError::new_err(e.to_string()))?,
            ),
            other => return Err(operand_error(format!("dtype {other}: nmsparse computes in float32 or float64"))),
        })
    };
    Ok(NativeTensor::new(py.detach(|| read(path))?))
}

/// Writes a tensor to a Matrix Market (`.mtx`, order 1 or 2) or FROSTT (`.tns`) file.
#[pyfunction]
pub(crate) fn write(py: Python<'_>, path: std::path::PathBuf, tensor: &NativeTensor) -> PyResult<()> {
    py.detach(|| with_tensor!(&tensor.tensor, t => nm_format::io::write_tensor(&path, t)))
        .map_err(|e| FileError::new_err(e.to_string()))
}

/// The short name of a format string for a tensor of `order` dimensions (`"ds"` is `"csr"`),
/// else its map syntax: formats compare equal when their names do.
#[pyfunction]
pub(crate) fn format_name(text: &str, order: usize) -> PyResult<String> {
    let f = parse_format(text, order)?;
    Ok(f.name().unwrap_or_else(|| f.to_string()))
}
