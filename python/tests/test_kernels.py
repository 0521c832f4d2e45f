"""Kernels on scipy and numpy operands against scipy's and numpy's own results."""

import threading

import numpy as np
import pytest
import scipy.sparse as sp

import nmsparse

RNG = np.random.default_rng(20261127)


def random_csr(rows, cols, density, dtype=np.float64):
    """A CSR array of small integers (exact in any order of summation)."""
    dense = RNG.integers(-4, 5, size=(rows, cols)).astype(dtype)
    dense[RNG.random((rows, cols)) >= density] = 0
    return sp.csr_array(dense)


def structural(a, b):
    """The stored entries of a·b that co-iteration produces (cancellation kept)."""
    pattern = lambda m: sp.csr_array((np.ones(m.nnz), m.indices, m.indptr), shape=m.shape)
    return (pattern(a) @ pattern(b)).nnz


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_spmv_reads_each_scipy_format(fmt):
    A = random_csr(30, 20, 0.3).asformat(fmt)
    x = RNG.integers(-3, 4, 20).astype(np.float64)
    y = nmsparse.evaluate("y(i) = A(i,j) * x(j)", A=A, x=x)
    assert isinstance(y, np.ndarray) and y.shape == (30,)
    np.testing.assert_array_equal(y, A @ x)


def test_float32_operands_compute_in_float32():
    A = random_csr(25, 25, 0.2, np.float32)
    x = np.arange(25, dtype=np.float32)
    y = nmsparse.evaluate("y(i) = A(i,j) * x(j)", A=A, x=x)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, A @ x)


@pytest.mark.parametrize("fmt,kind", [("csr", sp.csr_array), ("csc", sp.csc_array), ("coo", sp.coo_array)])
def test_sparse_results_are_scipy_arrays(fmt, kind):
    A = random_csr(20, 30, 0.2)
    B = random_csr(30, 15, 0.2)
    C = nmsparse.evaluate("C(i,j) = A(i,k) * B(k,j)", formats={"C": fmt}, A=A, B=B)
    assert isinstance(C, kind)
    np.testing.assert_array_equal(C.toarray(), (A @ B).toarray())
    assert C.nnz == structural(A, B)


def test_formats_scipy_lacks_come_back_as_tensors():
    A = random_csr(12, 9, 0.3)
    C = nmsparse.evaluate("C(i,j) = A(i,j) * 2", formats={"C": "dcsr"}, A=A)
    assert isinstance(C, nmsparse.Tensor) and C.format == "dcsr"
    np.testing.assert_array_equal(C.to_numpy(), 2 * A.toarray())
    np.testing.assert_array_equal(C.to_scipy().toarray(), 2 * A.toarray())


def test_a_tensor_used_twice():
    A = random_csr(40, 40, 0.15)
    C = nmsparse.evaluate("C(i,j) = A(i,k) * A(k,j)", formats={"C": "csr"}, A=A)
    np.testing.assert_array_equal(C.toarray(), (A @ A).toarray())
    y = nmsparse.evaluate("y(i) = A(i,j) * A(j,k) * x(k)", A=A, x=np.ones(40))
    np.testing.assert_array_equal(y, A @ (A @ np.ones(40)))
    S = nmsparse.evaluate("S(i,j) = A(i,j) + A(j,i)", formats={"S": "csr"}, A=A)
    np.testing.assert_array_equal(S.toarray(), (A + A.T).toarray())


def test_inner_products_store_only_produced_entries():
    A = random_csr(50, 30, 0.1)
    C = nmsparse.evaluate("C(i,j) = A(i,k) * A(j,k)", formats={"C": "csr"}, A=A)
    np.testing.assert_array_equal(C.toarray(), (A @ A.T).toarray())
    assert C.nnz == structural(A, A.T.tocsr())


def test_scalars_and_scalar_results():
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(nmsparse.evaluate("y(i) = a * x(i)", a=2.5, x=x), 2.5 * x)
    assert float(nmsparse.evaluate("a = x(i) * x(i)", x=x)) == 14.0
    A = random_csr(10, 10, 0.5)
    assert float(nmsparse.evaluate("a = A(i,j)", A=A)) == A.sum()


def test_dense_matrices_and_transposed_reads():
    A = random_csr(8, 6, 0.5)
    B = RNG.integers(-2, 3, (6, 5)).astype(np.float64)
    np.testing.assert_array_equal(nmsparse.evaluate("C(i,j) = A(i,k) * B(k,j)", A=A, B=B), A @ B)
    np.testing.assert_array_equal(nmsparse.evaluate("C(j,i) = A(i,j)", A=A), A.toarray().T)


def test_a_compiled_kernel_is_reused_and_recompiled_for_new_shapes():
    k = nmsparse.compile("y(i) = A(i,j) * x(j)")
    for n in (5, 5, 7):
        A = random_csr(n, n, 0.4)
        x = np.arange(n, dtype=np.float64)
        np.testing.assert_array_equal(k(A=A, x=x), A @ x)
    assert len(k._compiled) == 2


def test_operands_are_read_in_place():
    for index_type in (np.int32, np.int64):
        A = random_csr(30, 30, 0.2)
        A.indices = A.indices.astype(index_type)
        A.indptr = A.indptr.astype(index_type)
        x = np.ones(30)
        k = nmsparse.compile("y(i) = A(i,j) * x(j)")
        seen = k._addresses(A=A, x=x)
        assert seen["A"] == [A.indptr.ctypes.data, A.indices.ctypes.data, A.data.ctypes.data]
        assert seen["x"] == [x.ctypes.data]
        np.testing.assert_array_equal(k(A=A, x=x), A @ x)
        assert k.copies == []
        assert "every operand read in place" in k.describe()


def test_copies_are_made_and_said_where_layouts_do_not_fit():
    A = random_csr(20, 20, 0.3)
    x = np.arange(40, dtype=np.float64)[::2]  # not contiguous
    k = nmsparse.compile("y(i) = A(i,j) * x(j)")
    np.testing.assert_array_equal(k(A=A, x=x), A @ x)
    assert [name for name, _ in k.copies] == ["x"]
    assert "copy: `x`" in k.describe()
    xi = np.arange(20)  # integers: values converted
    np.testing.assert_array_equal(k(A=A, x=xi), A @ xi)
    assert "converted" in k.copies[0][1]


def test_unsorted_indices_and_duplicates_are_summed_as_scipy_does():
    indptr = np.array([0, 3, 4])
    indices = np.array([2, 0, 2, 1])
    data = np.array([1.0, 2.0, 3.0, 4.0])
    A = sp.csr_array((data, indices, indptr), shape=(2, 3))
    x = np.array([1.0, 10.0, 100.0])
    k = nmsparse.compile("y(i) = A(i,j) * x(j)")
    np.testing.assert_array_equal(k(A=A, x=x), A @ x)
    assert "sorted" in k.copies[0][1]
    assert A.indices.tolist() == [2, 0, 2, 1]  # the caller's array untouched


def test_int64_indices_beyond_32_bits():
    cols = 2**40
    A = sp.csr_array((np.array([1.0, 2.0]), np.array([3, 2**39], dtype=np.int64), np.array([0, 1, 2], dtype=np.int64)),
                     shape=(2, cols))
    assert float(nmsparse.evaluate("a = A(i,j)", A=A)) == 3.0


def test_bad_input_is_refused_by_name():
    A = random_csr(4, 5, 0.5)
    with pytest.raises(nmsparse.ExpressionError, match="size"):
        nmsparse.evaluate("y(i) = A(i,j) * x(j)", A=A, x=np.ones(6))
    with pytest.raises(nmsparse.OperandError, match="complex"):
        nmsparse.evaluate("y(i) = A(i,j) * x(j)", A=A, x=np.ones(5, dtype=complex))
    with pytest.raises(nmsparse.OperandError, match="not a tensor"):
        nmsparse.evaluate("y(i) = A(i,j) * x(j)", A=A, x=np.ones(5), z=np.ones(5))
    with pytest.raises(nmsparse.Error):
        nmsparse.evaluate("y(i) = A(i,j) * x(j)", A=A)
    with pytest.raises(nmsparse.ExpressionError) as caught:
        nmsparse.evaluate("y(i) = A(i,j) * ", A=A)
    assert "^" in str(caught.value)
    with pytest.raises(nmsparse.ScheduleError):
        nmsparse.evaluate("y(i) = A(i,j) * x(j)", schedule="reorder(q,i)", A=A, x=np.ones(5))
    with pytest.raises(nmsparse.FormatError):
        nmsparse.evaluate("C(i,j) = A(i,j)", formats={"C": "cssr"}, A=A)
    with pytest.raises(nmsparse.OperandError, match="float32 or float64"):
        nmsparse.compile("y(i) = x(i)", dtype="int32")


def test_index_arrays_that_break_the_format_are_refused():
    A = random_csr(4, 5, 0.6)
    assert A.has_canonical_format
    A.indices[0] = -7  # what an int32 overflow leaves
    with pytest.raises(nmsparse.OperandError, match="`A`"):
        nmsparse.evaluate("y(i) = A(i,j) * x(j)", A=A, x=np.ones(5))
    B = random_csr(4, 5, 0.6)
    B.indptr[2] = B.indptr[3] + 1  # positions decreasing
    with pytest.raises(nmsparse.OperandError, match="`B`"):
        nmsparse.evaluate("y(i) = B(i,j) * x(j)", B=B, x=np.ones(5))


def test_one_kernel_runs_on_many_threads():
    A = random_csr(200, 200, 0.05)
    k = nmsparse.compile("y(i) = A(i,j) * x(j)")
    xs = [RNG.integers(-3, 4, 200).astype(np.float64) for _ in range(8)]
    results = [None] * len(xs)

    def work(t):
        for _ in range(20):
            results[t] = k(A=A, x=xs[t])

    threads = [threading.Thread(target=work, args=(t,)) for t in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, y in zip(xs, results):
        np.testing.assert_array_equal(y, A @ x)


def test_the_interpreter_backend_and_threads_agree():
    A = random_csr(60, 60, 0.1)
    x = np.arange(60, dtype=np.float64)
    for k in (nmsparse.compile("y(i) = A(i,j) * x(j)", backend="interp"),
              nmsparse.compile("y(i) = A(i,j) * x(j)", threads=2)):
        np.testing.assert_array_equal(k(A=A, x=x), A @ x)
