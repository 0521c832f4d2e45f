"""Type stubs of the nmsparse package (the public API)."""

import os
from typing import Any, Literal, Mapping, Optional, Sequence, Tuple, TypedDict, Union

import numpy as np
import numpy.typing as npt

DType = Literal["float32", "float64"]
Backend = Literal["jit", "interp"]
Operand = Union["Tensor", npt.ArrayLike, Any]  # Any: scipy.sparse arrays and matrices
Result = Union[np.ndarray, np.floating, "Tensor", Any]  # Any: scipy.sparse csr/csc/coo arrays

from ._native import (
    CompileError as CompileError,
    Error as Error,
    ExpressionError as ExpressionError,
    FileError as FileError,
    FormatError as FormatError,
    OperandError as OperandError,
    RunError as RunError,
    ScheduleError as ScheduleError,
    TensorError as TensorError,
    UnsupportedError as UnsupportedError,
)

class PruneReport(TypedDict):
    kept: int
    dropped: int
    dropped_magnitude: float

class Tensor:
    @classmethod
    def from_numpy(cls, array: npt.ArrayLike, format: str = "dense", dtype: Optional[DType] = None) -> Tensor: ...
    @classmethod
    def from_scipy(cls, matrix: Any, format: Optional[str] = None, dtype: Optional[DType] = None) -> Tensor: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def nnz(self) -> int: ...
    @property
    def format(self) -> str: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    def to_numpy(self) -> np.ndarray: ...
    def to_scipy(self) -> Any: ...
    def convert(self, format: str) -> Tensor: ...
    def astype(self, dtype: Union[DType, npt.DTypeLike]) -> Tensor: ...

class Kernel:
    expr: str
    formats: dict[str, str]
    schedule: Optional[str]
    dtype: DType
    backend: Backend
    threads: Optional[int]
    index_sizes: dict[str, int]
    def __init__(
        self,
        expr: str,
        formats: Optional[Mapping[str, str]] = None,
        schedule: Optional[str] = None,
        dtype: Union[DType, npt.DTypeLike] = "float64",
        backend: Backend = "jit",
        threads: Optional[int] = None,
        index_sizes: Optional[Mapping[str, int]] = None,
    ) -> None: ...
    def __call__(self, **operands: Operand) -> Result: ...
    @property
    def copies(self) -> list[Tuple[str, str]]: ...
    def describe(self) -> str: ...

def compile(
    expr: str,
    formats: Optional[Mapping[str, str]] = None,
    schedule: Optional[str] = None,
    dtype: Union[DType, npt.DTypeLike] = "float64",
    backend: Backend = "jit",
    threads: Optional[int] = None,
    index_sizes: Optional[Mapping[str, int]] = None,
) -> Kernel: ...
def evaluate(
    expr: str,
    formats: Optional[Mapping[str, str]] = None,
    schedule: Optional[str] = None,
    threads: Optional[int] = None,
    index_sizes: Optional[Mapping[str, int]] = None,
    **operands: Operand,
) -> Result: ...
def read(path: Union[str, os.PathLike[str]], format: Optional[str] = None, dtype: DType = "float64") -> Tensor: ...
def write(path: Union[str, os.PathLike[str]], tensor: Operand) -> None: ...
def nm_prune(array: Operand, n: int, m: int, l: int = 1, axis: int = 0) -> Tuple[Tensor, PruneReport]: ...

__all__: Sequence[str]
