"""nmsparse: a sparse tensor algebra compiler with N:M structured sparsity.

Expressions are taco's index notation. Operands are ``scipy.sparse`` arrays or matrices
(CSR, CSC, COO), numpy arrays, Python scalars or :class:`Tensor`; results come back as numpy
arrays, ``scipy.sparse`` arrays, or :class:`Tensor` where scipy has no such format.

>>> import numpy as np, scipy.sparse as sp, nmsparse
>>> A = sp.csr_array(np.array([[1., 0., 2.], [0., 3., 0.]]))
>>> nmsparse.evaluate("y(i) = A(i,j) * x(j)", A=A, x=np.array([1., 2., 3.]))
array([7., 6.])
"""

from ._native import (
    CompileError,
    Error,
    ExpressionError,
    FileError,
    FormatError,
    OperandError,
    RunError,
    ScheduleError,
    TensorError,
    UnsupportedError,
)
from ._kernel import Kernel, compile, evaluate
from ._tensor import Tensor, nm_prune, read, write

__all__ = [
    "CompileError",
    "Error",
    "ExpressionError",
    "FileError",
    "FormatError",
    "Kernel",
    "OperandError",
    "RunError",
    "ScheduleError",
    "Tensor",
    "TensorError",
    "UnsupportedError",
    "compile",
    "evaluate",
    "nm_prune",
    "read",
    "write",
]
