"""SpMV, SpGEMM and A·Aᵀ on every matrix of ../shared/data against scipy.

The matrices are read by scipy (an independent reader), handed to nmsparse as scipy arrays,
and the results compared with scipy's products: values to rounding, stored entries exactly
(scipy's product of the patterns: nmsparse stores what co-iteration produces, cancellations
included). Products of more than `FLOPS_LIMIT` multiplies are left to the benchmarks, as
bench/kernels_vs_peers.sh leaves those above 5e8.
"""

import os
import pathlib

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import nmsparse

FLOPS_LIMIT = 1e8
SHARED = pathlib.Path(os.environ.get("NMSPARSE_SHARED_DATA", pathlib.Path(__file__).resolve().parents[2] / ".." / "shared" / "data"))
MATRICES = sorted((SHARED / "matrices").glob("*.mtx")) if (SHARED / "matrices").is_dir() else []

if not MATRICES:
    pytest.skip(f"no shared matrices under {SHARED}", allow_module_level=True)


def load(path):
    A = sp.csr_array(scipy.io.mmread(path), dtype=np.float64)
    A.sum_duplicates()
    return A


def pattern(m):
    m = m.tocsr()
    return sp.csr_array((np.ones(m.nnz), m.indices, m.indptr), shape=m.shape)


def flops(a, b):
    return float((np.bincount(a.indices, minlength=a.shape[1]).astype(float) * np.diff(b.indptr)).sum())


def assert_close(got, want):
    """Equal to rounding: every difference within 1e-10 of the largest |value|."""
    difference = abs(got - want)
    if difference.nnz:
        scale = max(1.0, float(abs(want).max()))
        assert difference.max() <= 1e-10 * scale


@pytest.fixture(scope="module")
def kernels():
    return {
        "spmv": nmsparse.compile("y(i) = A(i,j) * x(j)"),
        "spgemm": nmsparse.compile("C(i,j) = A(i,k) * B(k,j)", formats={"C": "csr"}, schedule="reorder(k,j)"),
    }


@pytest.mark.parametrize("path", MATRICES, ids=lambda p: p.stem)
def test_spmv(path, kernels):
    A = load(path)
    x = 1 + (np.arange(A.shape[1]) % 17) / 16
    y = kernels["spmv"](A=A, x=x)
    np.testing.assert_allclose(y, A @ x, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(A.data).max(initial=0))))
    assert kernels["spmv"].copies == []


@pytest.mark.parametrize("path", MATRICES, ids=lambda p: p.stem)
@pytest.mark.parametrize("second", ["A", "At"])
def test_spgemm(path, second, kernels):
    A = load(path)
    if second == "A" and A.shape[0] != A.shape[1]:
        pytest.skip("A·A needs a square matrix")
    B = A if second == "A" else A.T.tocsr()
    if flops(A, B) > FLOPS_LIMIT:
        pytest.skip(f"{flops(A, B):.2e} multiplies, above {FLOPS_LIMIT:.0e}")
    C = kernels["spgemm"](A=A, B=B)
    assert isinstance(C, sp.csr_array)
    want = A @ B
    assert C.nnz == (pattern(A) @ pattern(B)).nnz
    assert_close(C, want)
