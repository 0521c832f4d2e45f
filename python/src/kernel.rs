//! `NativeKernel`: a compiled statement, run on numpy arrays read in place.

use std::collections::HashMap;

use nm_format::{AnyTensor, Format, Indices, IndicesView, LevelStorage, LevelView, Tensor, TensorView};
use nmsparse::ir::notation::{IndexNotation, SizeFacts, parse};
use nmsparse::{Backend, Kernel, Program, Scalar};
use numpy::{IntoPyArray, PyArrayMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::errors::{ExpressionError, operand_error, to_py};
use crate::tensor::{NativeTensor, dtype_name, indices_into_py, parse_format};

enum AnyKernel {
    F32(Kernel<f32>),
    F64(Kernel<f64>),
}

/// A compiled kernel and what a caller needs to hand it operands.
#[pyclass(module = "nmsparse._native", frozen)]
pub(crate) struct NativeKernel {
    kernel: AnyKernel,
    /// Every tensor of the statement: its shape and format, as declared.
    declared: HashMap<String, (Vec<usize>, String)>,
    result: String,
    operands: Vec<String>,
}

/// The value types a Python caller computes in.
trait PyScalar: Scalar + numpy::Element {
    fn values<'a>(values: &'a Values<'_>) -> Option<&'a [Self]>;
    fn kernel(kernel: &AnyKernel) -> Option<&Kernel<Self>>;
    fn tensor(tensor: &AnyTensor) -> Option<&Tensor<Self>>;
}

macro_rules! py_scalar {
    ($t:ty, $v:ident) => {
        impl PyScalar for $t {
            fn values<'a>(values: &'a Values<'_>) -> Option<&'a [Self]> {
                match values {
                    Values::$v(a) => a.as_slice().ok(),
                    _ => None,
                }
            }
            fn kernel(kernel: &AnyKernel) -> Option<&Kernel<Self>> {
                match kernel {
                    AnyKernel::$v(k) => Some(k),
                    _ => None,
                }
            }
            fn tensor(tensor: &AnyTensor) -> Option<&Tensor<Self>> {
                match tensor {
                    AnyTensor::$v(t) => Some(t),
                    _ => None,
                }
            }
        }
    };
}
py_scalar!(f32, F32);
py_scalar!(f64, F64);

/// A value array of numpy's, of the kernel's type.
enum Values<'py> {
    F32(PyReadonlyArray1<'py, f32>),
    F64(PyReadonlyArray1<'py, f64>),
}

impl<'py> Values<'py> {
    fn extract(array: &Bound<'py, PyAny>, is_f32: bool, name: &str) -> PyResult<Values<'py>> {
        let held = if is_f32 {
            array.extract::<PyReadonlyArray1<'py, f32>>().map(Values::F32)
        } else {
            array.extract::<PyReadonlyArray1<'py, f64>>().map(Values::F64)
        };
        held.map_err(|_| {
            operand_error(format!("`{name}`: expected a one-dimensional {} array of values", dtype_name(is_f32)))
        })
    }
}

/// An index array of scipy's: int32 or int64, read as the unsigned arrays kernels take
/// (a negative entry reads as one beyond every size, which the checks refuse).
enum Index<'py> {
    I32(PyReadonlyArray1<'py, i32>),
    I64(PyReadonlyArray1<'py, i64>),
}

impl<'py> Index<'py> {
    fn extract(array: &Bound<'py, PyAny>, what: &str) -> PyResult<Index<'py>> {
        if let Ok(a) = array.extract::<PyReadonlyArray1<'py, i32>>() {
            return Ok(Index::I32(a));
        }
        array
            .extract::<PyReadonlyArray1<'py, i64>>()
            .map(Index::I64)
            .map_err(|_| operand_error(format!("{what}: expected a one-dimensional int32 or int64 array")))
    }

    fn view(&self) -> PyResult<IndicesView<'_>> {
        let not_contiguous = |_| operand_error("an index array is not contiguous");
        Ok(match self {
            Index::I32(a) => IndicesView::U32(bytemuck::cast_slice(a.as_slice().map_err(not_contiguous)?)),
            Index::I64(a) => IndicesView::U64(bytemuck::cast_slice(a.as_slice().map_err(not_contiguous)?)),
        })
    }
}

/// The arrays of one operand, borrowed from Python for the length of a run, with the shape
/// and format its view borrows.
enum Held<'py> {
    Dense { shape: Vec<usize>, format: Format, values: Values<'py> },
    Compressed { shape: Vec<usize>, format: Format, pos: Index<'py>, crd: Index<'py>, values: Values<'py> },
    Coo { shape: Vec<usize>, format: Format, starts: Indices, coords: Vec<Index<'py>>, values: Values<'py> },
    Tensor(Bound<'py, NativeTensor>),
}

fn item<'py>(spec: &Bound<'py, PyTuple>, at: usize) -> PyResult<Bound<'py, PyAny>> {
    spec.get_item(at)
}

impl<'py> Held<'py> {
    /// `("dense", shape, values)`, `("compressed", shape, format, pos, crd, values)`,
    /// `("coo", shape, [coords...], values)` or `("tensor", NativeTensor)`.
    fn extract(name: &str, spec: &Bound<'py, PyAny>, is_f32: bool) -> PyResult<Held<'py>> {
        let spec = spec.cast::<PyTuple>().map_err(|e| operand_error(e.to_string()))?;
        let kind: String = item(spec, 0)?.extract()?;
        let shape = || item(spec, 1)?.extract::<Vec<usize>>();
        Ok(match kind.as_str() {
            "dense" => {
                // A scalar is a tensor of one value.
                let shape = Some(shape()?).filter(|s| !s.is_empty()).unwrap_or_else(|| vec![1]);
                let format = Format::dense(shape.len());
                Held::Dense { shape, format, values: Values::extract(&item(spec, 2)?, is_f32, name)? }
            }
            "compressed" => {
                let shape = shape()?;
                let format = parse_format(&item(spec, 2)?.extract::<String>()?, shape.len())?;
                let pos = Index::extract(&item(spec, 3)?, "indptr")?;
                let crd = Index::extract(&item(spec, 4)?, "indices")?;
                Held::Compressed { shape, format, pos, crd, values: Values::extract(&item(spec, 5)?, is_f32, name)? }
            }
            "coo" => {
                let coords: Vec<Index<'py>> =
                    item(spec, 2)?.try_iter()?.map(|c| Index::extract(&c?, "coordinates")).collect::<PyResult<_>>()?;
                let values = Values::extract(&item(spec, 3)?, is_f32, name)?;
                let n = match &values {
                    Values::F32(v) => v.len()?,
                    Values::F64(v) => v.len()?,
                };
                let shape = shape()?;
                let format = Format::coo(shape.len().max(1));
                Held::Coo { shape, format, starts: Indices::from_usize(vec![0, n]), coords, values }
            }
            "tensor" => {
                Held::Tensor(item(spec, 1)?.cast_into::<NativeTensor>().map_err(|e| operand_error(e.to_string()))?)
            }
            other => return Err(operand_error(format!("unknown operand kind {other:?}"))),
        })
    }

    /// The operand as a view of value type `T`, checked as a tensor's arrays are.
    fn view<T: PyScalar>(&self, name: &str) -> PyResult<TensorView<'_, T>> {
        fn values<'a, T: PyScalar>(v: &'a Values<'_>, name: &str) -> PyResult<&'a [T]> {
            T::values(v).ok_or_else(|| operand_error(format!("`{name}`: values of another type or not contiguous")))
        }
        let invalid = |e: nm_format::TensorError| operand_error(format!("`{name}`: {e}"));
        match self {
            Held::Dense { shape, format, values: v } => {
                let levels = shape.iter().map(|&size| LevelView::Dense { size });
                TensorView::new(shape, format, levels, values(v, name)?).map_err(invalid)
            }
            Held::Compressed { shape, format, pos, crd, values: v } => {
                let outer = shape[format.levels()[0].expr.dim()];
                let levels =
                    [LevelView::Dense { size: outer }, LevelView::Compressed { pos: pos.view()?, crd: crd.view()? }];
                TensorView::new(shape, format, levels, values(v, name)?).map_err(invalid)
            }
            Held::Coo { shape, format, starts, coords, values: v } => {
                let mut levels = Vec::with_capacity(coords.len());
                for (d, c) in coords.iter().enumerate() {
                    levels.push(match d {
                        0 => LevelView::Compressed { pos: starts.view(), crd: c.view()? },
                        _ => LevelView::Singleton { crd: c.view()? },
                    });
                }
                TensorView::new(shape, format, levels, values(v, name)?).map_err(invalid)
            }
            Held::Tensor(t) => T::tensor(&t.get().tensor)
                .map(|t| t.view())
                .ok_or_else(|| operand_error(format!("`{name}`: a tensor of another dtype than the kernel's"))),
        }
    }
}

fn size_facts(expr: &IndexNotation, shapes: &HashMap<String, Vec<usize>>, sizes: &HashMap<String, usize>) -> SizeFacts {
    SizeFacts {
        shapes: expr.tensors.iter().map(|(_, t)| shapes.get(&t.name).cloned()).collect(),
        growable: vec![false; expr.tensors.len()],
        given: expr
            .vars
            .iter()
            .map(|(_, v)| sizes.get(&v.name).map(|&n| (n, format!("index_sizes[{:?}]", v.name))))
            .collect(),
        described: vec![None; expr.tensors.len()],
        default: None,
    }
}

fn compiled<T: Scalar>(program: &Program, backend: Backend, threads: Option<usize>) -> PyResult<Kernel<T>> {
    let kernel = program.compile::<T>(backend).map_err(to_py)?;
    Ok(match threads {
        Some(n) => kernel.with_threads(n),
        None => kernel,
    })
}

/// The result handed to Python, its arrays moved: a dense array, `("compressed", pos, crd,
/// values)` for CSR/CSC, `("coo", [coords...], values)` for COO, or a `NativeTensor`.
fn result_to_py<T: PyScalar>(py: Python<'_>, result: Tensor<T>, dense_shape: &[usize]) -> PyResult<Py<PyAny>>
where
    AnyTensor: From<Tensor<T>>,
{
    let format = result.format().clone();
    let order = result.order();
    if format == Format::dense(order) {
        let (_, _, _, values) = result.into_raw();
        return Ok(values.into_pyarray(py).reshape(dense_shape.to_vec())?.into_any().unbind());
    }
    if format == Format::csr() || format == Format::csc() {
        let (_, _, mut levels, values) = result.into_raw();
        if let Some(LevelStorage::Compressed { pos, crd }) = levels.pop() {
            let values = values.into_pyarray(py);
            return Ok(("compressed", indices_into_py(py, pos), indices_into_py(py, crd), values)
                .into_pyobject(py)?
                .into_any()
                .unbind());
        }
        unreachable!("CSR and CSC end in a compressed level");
    }
    if format == Format::coo(order) {
        let (_, _, levels, values) = result.into_raw();
        let coords = PyList::empty(py);
        for level in levels {
            match level {
                LevelStorage::Compressed { crd, .. } | LevelStorage::Singleton { crd } => {
                    coords.append(indices_into_py(py, crd))?
                }
                _ => unreachable!("COO has a compressed level, then singletons"),
            }
        }
        return Ok(("coo", coords, values.into_pyarray(py)).into_pyobject(py)?.into_any().unbind());
    }
    Ok(Bound::new(py, NativeTensor::new(AnyTensor::from(result)))?.into_any().unbind())
}

#[pymethods]
impl NativeKernel {
    /// Compiles `expr` for tensors whose shapes and formats are given where known
    /// (`tensors[name] = (shape or None, format or None)`; missing formats are dense), the
    /// result's shape inferred from the operands and `index_sizes`.
    #[staticmethod]
    #[pyo3(signature = (expr, tensors, index_sizes, schedule, dtype, backend, threads))]
    // One argument per keyword of `nmsparse.compile`, which calls it.
    #[allow(clippy::too_many_arguments)]
    fn compile(
        py: Python<'_>,
        expr: &str,
        tensors: HashMap<String, (Option<Vec<usize>>, Option<String>)>,
        index_sizes: HashMap<String, usize>,
        schedule: Option<String>,
        dtype: &str,
        backend: &str,
        threads: Option<usize>,
    ) -> PyResult<NativeKernel> {
        let stmt = parse(expr).map_err(|e| ExpressionError::new_err(e.to_string()))?;
        for name in tensors.keys() {
            if !stmt.tensors.iter().any(|(_, t)| &t.name == name) {
                return Err(operand_error(format!("`{name}` is not a tensor of `{expr}`")));
            }
        }
        let shapes: HashMap<String, Vec<usize>> =
            tensors.iter().filter_map(|(n, (s, _))| s.clone().map(|s| (n.clone(), s))).collect();
        let extents = stmt
            .extents(&size_facts(&stmt, &shapes, &index_sizes))
            .map_err(|e| ExpressionError::new_err(e.to_string()))?;
        let mut program = Program::new(expr).map_err(to_py)?;
        let mut declared = HashMap::new();
        for ((_, t), shape) in stmt.tensors.iter().zip(&extents.shapes) {
            let format = tensors.get(&t.name).and_then(|(_, f)| f.clone()).unwrap_or_else(|| "dense".to_string());
            program = program.tensor(&t.name, shape, &format).map_err(to_py)?;
            declared.insert(t.name.clone(), (shape.clone(), format));
        }
        for ((_, v), &size) in stmt.vars.iter().zip(&extents.sizes) {
            if index_sizes.contains_key(&v.name) {
                program = program.index_size(&v.name, size);
            }
        }
        if let Some(s) = &schedule {
            program = program.schedule(s);
        }
        let backend = match backend {
            "jit" => Backend::Jit,
            "interp" => Backend::Interp,
            other => return Err(operand_error(format!("backend {other:?}: expected \"jit\" or \"interp\""))),
        };
        let kernel = py.detach(|| -> PyResult<AnyKernel> {
            Ok(match dtype {
                "float64" => AnyKernel::F64(compiled(&program, backend, threads)?),
                "float32" => AnyKernel::F32(compiled(&program, backend, threads)?),
                other => {
                    return Err(operand_error(format!("dtype {other:?}: nmsparse computes in float32 or float64")));
                }
            })
        })?;
        let result = stmt.tensor_name(stmt.lhs.tensor).to_string();
        let operands = match &kernel {
            AnyKernel::F32(k) => k.operand_names(),
            AnyKernel::F64(k) => k.operand_names(),
        };
        Ok(NativeKernel { kernel, declared, result, operands })
    }

    /// Runs on `operands` (`[(name, spec)]`, see `Held::extract`), the GIL released while the
    /// kernel runs.
    fn run(&self, py: Python<'_>, operands: Vec<(String, Bound<'_, PyAny>)>) -> PyResult<Py<PyAny>> {
        match &self.kernel {
            AnyKernel::F32(_) => self.run_typed::<f32>(py, &operands),
            AnyKernel::F64(_) => self.run_typed::<f64>(py, &operands),
        }
    }

    /// The addresses of the arrays a run on `operands` reads (per operand: each level's
    /// `pos` and `crd`, then the values), without running: how tests see that an operand is
    /// read in place.
    fn addresses(&self, operands: Vec<(String, Bound<'_, PyAny>)>) -> PyResult<HashMap<String, Vec<usize>>> {
        match &self.kernel {
            AnyKernel::F32(_) => addresses::<f32>(&operands, true),
            AnyKernel::F64(_) => addresses::<f64>(&operands, false),
        }
    }

    /// What runs, in the library's words.
    fn describe(&self) -> String {
        match &self.kernel {
            AnyKernel::F32(k) => k.describe(),
            AnyKernel::F64(k) => k.describe(),
        }
    }

    /// What the compiler decided that a user should hear about.
    fn notes(&self) -> Vec<String> {
        match &self.kernel {
            AnyKernel::F32(k) => k.notes(),
            AnyKernel::F64(k) => k.notes(),
        }
    }

    /// The names of the operands a run takes.
    #[getter]
    fn operands(&self) -> Vec<String> {
        self.operands.clone()
    }

    /// The result's name.
    #[getter]
    fn result(&self) -> String {
        self.result.clone()
    }

    /// Every tensor's declared shape and format.
    #[getter]
    fn declared(&self) -> HashMap<String, (Vec<usize>, String)> {
        self.declared.clone()
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(matches!(self.kernel, AnyKernel::F32(_)))
    }
}

fn addresses<T: PyScalar>(
    operands: &[(String, Bound<'_, PyAny>)],
    is_f32: bool,
) -> PyResult<HashMap<String, Vec<usize>>> {
    let mut out = HashMap::new();
    for (name, spec) in operands {
        let held = Held::extract(name, spec, is_f32)?;
        let view = held.view::<T>(name)?;
        let mut arrays = Vec::new();
        for level in view.levels() {
            let address = |i: &IndicesView| match i {
                IndicesView::U32(v) => v.as_ptr() as usize,
                IndicesView::U64(v) => v.as_ptr() as usize,
            };
            match level {
                LevelView::Compressed { pos, crd } => arrays.extend([address(pos), address(crd)]),
                LevelView::Band { pos, first } => arrays.extend([address(pos), address(first)]),
                LevelView::Singleton { crd } => arrays.push(address(crd)),
                _ => {}
            }
        }
        arrays.push(view.values().as_ptr() as usize);
        out.insert(name.clone(), arrays);
    }
    Ok(out)
}

impl NativeKernel {
    fn run_typed<T: PyScalar>(&self, py: Python<'_>, operands: &[(String, Bound<'_, PyAny>)]) -> PyResult<Py<PyAny>>
    where
        AnyTensor: From<Tensor<T>>,
    {
        let kernel = T::kernel(&self.kernel).expect("run_typed is called with the kernel's type");
        let is_f32 = matches!(self.kernel, AnyKernel::F32(_));
        let held: Vec<(&str, Held)> = operands
            .iter()
            .map(|(name, spec)| Ok((name.as_str(), Held::extract(name, spec, is_f32)?)))
            .collect::<PyResult<_>>()?;
        let views: Vec<(&str, TensorView<T>)> =
            held.iter().map(|(name, h)| Ok((*name, h.view::<T>(name)?))).collect::<PyResult<_>>()?;
        let result = py.detach(|| kernel.run_views(&views)).map_err(to_py)?;
        let shape = &self.declared[&self.result].0;
        result_to_py(py, result, shape)
    }
}
