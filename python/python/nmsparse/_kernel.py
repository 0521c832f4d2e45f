"""``compile`` and ``evaluate``: kernels run on scipy and numpy operands read in place."""

import threading

import numpy as np

from . import _native
from ._tensor import Tensor, _check_real, _value_dtype

_SCIPY_FORMATS = ("csr", "csc", "coo")
_format_names = {}


def _format_name(text, order):
    """The short name of a format string (``"ds"`` is ``"csr"``), so equal formats compare
    equal; ``text`` itself where the string does not parse (the compiler reports it)."""
    key = (text, order)
    name = _format_names.get(key)
    if name is None:
        try:
            name = _native.format_name(text, order)
        except _native.FormatError:
            name = text
        _format_names[key] = name
    return name


def _operand(name, x, wanted, dtype, copies):
    """The operand description the native kernel reads (``("dense", shape, values)``,
    ``("compressed", shape, format, indptr, indices, data)``, ``("coo", shape, coords,
    data)`` or ``("tensor", native)``) and its format's name. Arrays are passed as they are
    wherever their layout, index width and value type fit; every copy is recorded in
    ``copies``."""
    scipy_format = getattr(x, "format", None) if not isinstance(x, (np.ndarray, Tensor)) else None
    if scipy_format is not None and hasattr(x, "tocoo"):
        return _scipy_operand(name, x, scipy_format, wanted, dtype, copies)
    if isinstance(x, Tensor):
        native = x._native
        if wanted is not None and _format_name(wanted, len(x.shape)) != x.format:
            copies.append((name, f"converted from {x.format} to {wanted}"))
            native = native.convert(wanted)
        if native.dtype != dtype:
            copies.append((name, f"values converted to {dtype}"))
            native = native.astype(dtype)
        return ("tensor", native), native.format, native.shape
    array = x if isinstance(x, np.ndarray) else np.asarray(x)
    _check_real(array.dtype, f"`{name}`")
    if array.dtype != dtype:
        if isinstance(x, np.ndarray):
            copies.append((name, f"values converted from {array.dtype} to {dtype}"))
        array = array.astype(dtype)
    if not array.flags.c_contiguous:
        copies.append((name, "a C-ordered copy of a non-contiguous array"))
        array = np.ascontiguousarray(array)
    if wanted is not None and array.ndim > 0 and _format_name(wanted, array.ndim) != "dense":
        copies.append((name, f"stored in {wanted}"))
        try:
            native = _native.NativeTensor.from_dense(array, wanted)
        except _native.TensorError as e:
            hint = " (nmsparse.nm_prune prunes an array to N:M)" if "prune" in str(e) else ""
            raise _native.OperandError(f"`{name}` in {wanted}: {e}{hint}") from None
        return ("tensor", native), native.format, native.shape
    return ("dense", array.shape, array.reshape(-1)), "dense", array.shape


def _scipy_operand(name, x, scipy_format, wanted, dtype, copies):
    target = _format_name(wanted, 2) if wanted is not None else scipy_format
    if target not in _SCIPY_FORMATS:
        if target == "dense":
            copies.append((name, f"a dense copy of the {scipy_format} matrix"))
            return _operand(name, x.toarray(), None, dtype, copies)
        copies.append((name, f"converted from {scipy_format} to {wanted}"))
        return _operand(name, Tensor.from_scipy(x, wanted, dtype), None, dtype, copies)
    if scipy_format != target:
        copies.append((name, f"converted from {scipy_format} to {target}"))
        x = x.asformat(target)
    _check_real(x.dtype, f"`{name}`")
    if x.dtype != dtype:
        copies.append((name, f"values converted from {x.dtype} to {dtype}"))
        x = x.astype(dtype)
    if not x.has_canonical_format:
        # Unsorted indices or duplicates: scipy's own canonical form (sorted, duplicates summed).
        if target != "coo":
            try:
                x.check_format(True)
            except ValueError as e:
                raise _native.OperandError(f"`{name}`: {e}") from None
        copies.append((name, "sorted, duplicates summed (the indices were not canonical)"))
        x = x.copy()
        x.sum_duplicates()
    if target == "coo":
        coords = getattr(x, "coords", None) or (x.row, x.col)
        return ("coo", x.shape, list(coords), x.data), target, x.shape
    return ("compressed", x.shape, target, x.indptr, x.indices, x.data), target, x.shape


class Kernel:
    """An expression compiled for its operands: call it with the operands by name.

    A kernel is compiled (and cached on disk) for the shapes and formats of the operands it is
    first called with, and again for other shapes; calls with the same shapes and formats reuse
    it. Kernels may be called from several threads at once: the GIL is released while the
    kernel runs.

    >>> import scipy.sparse as sp
    >>> k = compile("C(i,j) = A(i,k) * B(k,j)", formats={"C": "csr"})
    >>> A = sp.csr_array(np.array([[1., 0., 2.], [0., 3., 0.]]))
    >>> C = k(A=A, B=A.T.tocsr())
    >>> type(C).__name__, C.nnz
    ('csr_array', 2)
    >>> C.toarray()
    array([[5., 0.],
           [0., 9.]])
    """

    def __init__(self, expr, formats=None, schedule=None, dtype="float64", backend="jit", threads=None,
                 index_sizes=None):
        dtype = str(np.dtype(dtype))
        if dtype not in ("float32", "float64"):
            raise _native.OperandError(f"dtype {dtype!r}: nmsparse computes in float32 or float64")
        self.expr = expr
        self.formats = dict(formats or {})
        self.schedule = schedule
        self.dtype = dtype
        self.backend = backend
        self.threads = threads
        self.index_sizes = dict(index_sizes or {})
        self._compiled = {}
        self._lock = threading.Lock()
        self._last = None
        self._copies = []

    def __call__(self, **operands):
        native, specs, copies = self._prepare(operands)
        self._last = native
        self._copies = copies
        return self._result(native, native.run(specs))

    def _prepare(self, operands):
        """The native kernel for the operands' shapes and formats, their descriptions, and
        the copies made."""
        specs = []
        signature = []
        copies = []
        formats = self.formats
        for name, x in operands.items():
            spec, fmt, shape = _operand(name, x, formats.get(name), self.dtype, copies)
            specs.append((name, spec))
            signature.append((name, tuple(shape), fmt))
        key = tuple(signature)
        native = self._compiled.get(key)
        if native is None:
            native = self._compile(key)
        return native, specs, copies

    def _addresses(self, **operands):
        """The addresses of the arrays a call on ``operands`` would read (each level's
        ``indptr``/``indices``, then the values), for checking that nothing is copied."""
        native, specs, _ = self._prepare(operands)
        return native.addresses(specs)

    def _compile(self, key):
        with self._lock:
            native = self._compiled.get(key)
            if native is None:
                tensors = {name: (list(shape), fmt) for name, shape, fmt in key}
                for name, fmt in self.formats.items():
                    shape = tensors.get(name, (None, None))[0]
                    tensors[name] = (shape, fmt)
                native = _native.NativeKernel.compile(self.expr, tensors, self.index_sizes, self.schedule,
                                                      self.dtype, self.backend, self.threads)
                self._compiled[key] = native
        return native

    def _result(self, native, result):
        shape, fmt = native.declared[native.result]
        if isinstance(result, np.ndarray):
            return result[()] if result.ndim == 0 else result
        if isinstance(result, tuple):
            import scipy.sparse as sp

            if result[0] == "compressed":
                _, pos, crd, values = result
                make = sp.csr_array if _format_name(fmt, 2) == "csr" else sp.csc_array
                return make((values, crd, pos), shape=tuple(shape))
            _, coords, values = result
            return sp.coo_array((values, tuple(coords)), shape=tuple(shape))
        return Tensor(result)

    @property
    def copies(self):
        """The operands the last call copied, and why (empty when all were read in place)."""
        return list(self._copies)

    def describe(self):
        """What runs: the statement, the kernel (generated C or the interpreter, or the N:M
        product), threads, the copies the last call made, and the compiler's notes."""
        if self._last is None:
            return (f"statement: {self.expr}\nnot compiled yet: a kernel is compiled for the shapes and formats "
                    "of the operands of its first call")
        text = self._last.describe()
        for name, why in self._copies:
            text += f"copy: `{name}`: {why}\n"
        if not self._copies:
            text += "copies: none, every operand read in place\n"
        return text

    def __repr__(self):
        return f"nmsparse.Kernel({self.expr!r}, formats={self.formats!r}, dtype={self.dtype!r})"


def compile(expr, formats=None, schedule=None, dtype="float64", backend="jit", threads=None, index_sizes=None):
    """Compiles ``expr`` (taco's index notation, e.g. ``"y(i) = A(i,j) * x(j)"``) into a
    :class:`Kernel`.

    ``formats`` maps tensor names to formats (``{"C": "csr", "W": "nm(2,8,32)"}``); an operand
    without one is read in the format it comes in, a result without one is dense.
    ``schedule`` is a taco schedule (``"reorder(k,j)"``); ``backend`` is ``"jit"`` (generated
    C, compiled by the system compiler) or ``"interp"``; ``threads`` the thread count;
    ``index_sizes`` sizes of index variables no operand fixes.
    """
    return Kernel(expr, formats, schedule, dtype, backend, threads, index_sizes)


_kernels = {}


def evaluate(expr, formats=None, schedule=None, threads=None, index_sizes=None, **operands):
    """Compiles (once per expression, formats and value type) and runs ``expr`` on the
    operands given by name.

    Computes in float32 when every array operand holds float32, else in float64. A dense result
    is a numpy array (a scalar for order 0), a CSR/CSC/COO result a ``scipy.sparse`` array,
    any other format a :class:`Tensor`.

    >>> float(evaluate("a = x(i) * x(i)", x=np.array([3., 4.])))
    25.0
    """
    dtypes = {_operand_dtype(x) for x in operands.values()} - {None}
    dtype = "float32" if dtypes == {"float32"} else "float64"
    key = (expr, tuple(sorted((formats or {}).items())), schedule, threads,
           tuple(sorted((index_sizes or {}).items())), dtype)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _kernels.setdefault(key, Kernel(expr, formats, schedule, dtype, "jit", threads, index_sizes))
    return kernel(**operands)


def _operand_dtype(x):
    if isinstance(x, Tensor):
        return x._native.dtype
    dtype = getattr(x, "dtype", None)
    return None if dtype is None else _value_dtype(dtype)
