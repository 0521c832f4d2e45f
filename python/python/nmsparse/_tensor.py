"""``Tensor``: an owned tensor in any nmsparse format, and files."""

import numpy as np

from . import _native

_DTYPES = ("float32", "float64")


def _value_dtype(dtype):
    """The value type nmsparse computes in for numpy ``dtype``: float32 stays, the rest
    (integers, booleans, float16, float64) compute in float64."""
    return "float32" if np.dtype(dtype) == np.float32 else "float64"


def _check_real(dtype, what):
    if np.dtype(dtype).kind == "c":
        raise _native.OperandError(f"{what}: complex values; nmsparse computes in float32 or float64")


class Tensor:
    """A tensor stored in an nmsparse format: any format of ``Format`` (``"dense"``, ``"csr"``,
    ``"dcsr"``, ``"csf"``, ``"nm(2,8,32)"``, taco's letters such as ``"dss"``, or the map
    syntax), of float32 or float64 values.

    >>> t = Tensor.from_numpy(np.array([[0., 1.], [2., 0.]]), "dcsr")
    >>> t.shape, t.nnz, t.format
    ((2, 2), 2, 'dcsr')
    >>> t.to_numpy()
    array([[0., 1.],
           [2., 0.]])
    """

    __slots__ = ("_native",)

    def __init__(self, native):
        if not isinstance(native, _native.NativeTensor):
            raise TypeError("use Tensor.from_numpy, Tensor.from_scipy or nmsparse.read to make a Tensor")
        self._native = native

    @classmethod
    def from_numpy(cls, array, format="dense", dtype=None):
        """A tensor of the values of a numpy array (zeros are not stored by sparse formats)."""
        array = np.asarray(array)
        _check_real(array.dtype, "from_numpy")
        dtype = dtype or _value_dtype(array.dtype)
        if dtype not in _DTYPES:
            raise _native.OperandError(f"dtype {dtype!r}: nmsparse computes in float32 or float64")
        if array.ndim == 0:
            array = array.reshape(1)
        array = np.ascontiguousarray(array, dtype=dtype)
        return cls(_native.NativeTensor.from_dense(array, format))

    @classmethod
    def from_scipy(cls, matrix, format=None, dtype=None):
        """A tensor of a ``scipy.sparse`` array or matrix; ``format`` defaults to the scipy
        format's (CSR, CSC, COO; DCSR for the others). Duplicates are summed."""
        _check_real(matrix.dtype, "from_scipy")
        dtype = dtype or _value_dtype(matrix.dtype)
        if format is None:
            format = matrix.format if matrix.format in ("csr", "csc", "coo") else "dcsr"
        coo = matrix.tocoo()
        coords = [np.asarray(c, dtype=np.int64) for c in (coo.row, coo.col)]
        values = np.ascontiguousarray(coo.data, dtype=dtype)
        return cls(_native.NativeTensor.from_coordinates(list(matrix.shape), coords, values, format))

    @property
    def shape(self):
        """The logical shape."""
        return self._native.shape

    @property
    def nnz(self):
        """Stored values, explicit zeros and N:M padding included."""
        return self._native.nnz

    @property
    def format(self):
        """The format's short name where it has one (``"csr"``, ``"nm(2,8,32)"``), else its map."""
        return self._native.format

    @property
    def dtype(self):
        return np.dtype(self._native.dtype)

    def to_numpy(self):
        """A dense numpy array (a copy)."""
        return self._native.to_numpy()

    def to_scipy(self):
        """A ``scipy.sparse`` array (order 2): ``csr_array`` or ``csc_array`` for CSR and CSC,
        else ``coo_array``."""
        import scipy.sparse as sp

        if len(self.shape) != 2:
            raise _native.OperandError(f"to_scipy: scipy.sparse holds matrices; this tensor has order {len(self.shape)}")
        if self.format in ("csr", "csc"):
            levels, values = self._native.parts()
            _, pos, crd = levels[1]
            make = sp.csr_array if self.format == "csr" else sp.csc_array
            return make((values, crd, pos), shape=self.shape)
        coords, values = self._native.coordinates()
        return sp.coo_array((values, tuple(coords)), shape=self.shape)

    def convert(self, format):
        """The tensor in another format (a copy)."""
        return Tensor(self._native.convert(format))

    def astype(self, dtype):
        """The tensor with float32 or float64 values (a copy)."""
        return Tensor(self._native.astype(str(np.dtype(dtype))))

    def __repr__(self):
        return repr(self._native)


def read(path, format=None, dtype="float64"):
    """Reads a Matrix Market (``.mtx``) or FROSTT (``.tns``) file into ``format`` (COO when
    not given)."""
    return Tensor(_native.read(str(path), format, str(np.dtype(dtype))))


def write(path, tensor):
    """Writes a :class:`Tensor` (or anything :meth:`Tensor.from_numpy` and
    :meth:`Tensor.from_scipy` take) to ``.mtx`` (order 1 or 2) or ``.tns``."""
    _native.write(str(path), _as_tensor(tensor)._native)


def _as_tensor(x):
    if isinstance(x, Tensor):
        return x
    if hasattr(x, "tocoo") and hasattr(x, "format"):
        return Tensor.from_scipy(x)
    return Tensor.from_numpy(x)


def nm_prune(array, n, m, l=1, axis=0):
    """Prunes a matrix to N:M structured sparsity: in every window of ``m`` entries along
    ``axis``, the ``n`` of largest magnitude are kept — for ``l > 1`` (axis 0 only), the ``n``
    length-``l`` row vectors of largest summed magnitude, as ``nm(N,M,L)`` stores them.

    Returns the pruned :class:`Tensor` and a report: ``kept`` and ``dropped`` nonzeros and the
    ``dropped_magnitude`` (sum of their absolute values).

    >>> W = np.array([[1., 2., 3., 4.], [4., 3., 2., 1.]]).T
    >>> pruned, report = nm_prune(W, 2, 4)
    >>> pruned.to_numpy()[:, 0], report["dropped"]
    (array([0., 0., 3., 4.]), 4)
    """
    if axis not in (0, 1):
        raise _native.OperandError(f"axis={axis}: a matrix has axes 0 and 1")
    if l < 1:
        raise _native.OperandError(f"l={l}: the vector length is at least 1")
    if axis == 0:
        format = f"nm({n},{m},{l})"
    elif l == 1:
        format = f"(d0, d1) -> (d0 : dense, d1 : structured[{n},{m}])"
    else:
        raise _native.OperandError("axis=1 with l > 1: nm(N,M,L) blocks rows; prune the transpose along axis 0")
    tensor = _as_tensor(array)
    if len(tensor.shape) != 2:
        raise _native.OperandError(f"nm_prune: a matrix is needed, not a tensor of order {len(tensor.shape)}")
    pruned, report = tensor._native.prune(format)
    return Tensor(pruned), report
