"""Tensors, files and N:M pruning."""

import numpy as np
import pytest
import scipy.sparse as sp

import nmsparse

RNG = np.random.default_rng(1127)


def test_scipy_round_trips():
    A = sp.random_array((30, 20), density=0.2, format="csr", dtype=np.float64)
    for fmt in ("csr", "csc", "coo", "dcsr"):
        t = nmsparse.Tensor.from_scipy(A, fmt)
        assert t.shape == (30, 20) and t.nnz == A.nnz and t.format == fmt
        np.testing.assert_array_equal(t.to_scipy().toarray(), A.toarray())
        np.testing.assert_array_equal(t.to_numpy(), A.toarray())


def test_numpy_round_trips_and_conversions():
    dense = RNG.integers(-2, 3, (4, 5, 6)).astype(np.float64)
    t = nmsparse.Tensor.from_numpy(dense, "csf")
    assert t.format == "csf" and t.nnz == np.count_nonzero(dense)
    np.testing.assert_array_equal(t.to_numpy(), dense)
    np.testing.assert_array_equal(t.convert("dense").to_numpy(), dense)
    assert t.astype("float32").dtype == np.float32
    with pytest.raises(nmsparse.OperandError, match="order 3"):
        t.to_scipy()


def test_files_round_trip(tmp_path):
    A = sp.random_array((15, 12), density=0.3, format="coo", dtype=np.float64)
    nmsparse.write(tmp_path / "a.mtx", A)
    back = nmsparse.read(tmp_path / "a.mtx", "csr")
    assert back.format == "csr"
    np.testing.assert_allclose(back.to_numpy(), A.toarray(), rtol=1e-15)
    T = nmsparse.Tensor.from_numpy(RNG.integers(0, 2, (3, 4, 5)).astype(np.float64), "coo")
    nmsparse.write(tmp_path / "t.tns", T)
    np.testing.assert_array_equal(nmsparse.read(tmp_path / "t.tns").to_numpy(), T.to_numpy())
    with pytest.raises(nmsparse.FileError):
        nmsparse.read(tmp_path / "missing.mtx")


def numpy_prune(W, n, m):
    """Keeps the n largest magnitudes in every window of m rows, per column (ties to the
    lower row), as the reference of nm_prune's l = 1 case."""
    out = np.zeros_like(W)
    for w in range(0, W.shape[0], m):
        block = W[w:w + m]
        order = np.argsort(-np.abs(block), axis=0, kind="stable")[:n]
        for c in range(W.shape[1]):
            out[w + order[:, c], c] = block[order[:, c], c]
    return out


def test_nm_prune_keeps_the_largest_and_reports_the_rest():
    W = RNG.standard_normal((64, 16))
    pruned, report = nmsparse.nm_prune(W, 2, 8)
    assert pruned.format == "nm(2,8,1)"
    np.testing.assert_array_equal(pruned.to_numpy(), numpy_prune(W, 2, 8))
    assert report["kept"] == 64 * 16 // 4 and report["dropped"] == 64 * 16 * 3 // 4
    assert report["dropped_magnitude"] == pytest.approx(np.abs(W).sum() - np.abs(numpy_prune(W, 2, 8)).sum())
    along_rows, _ = nmsparse.nm_prune(W.T, 2, 8, axis=1)
    np.testing.assert_array_equal(along_rows.to_numpy(), numpy_prune(W, 2, 8).T)
    with pytest.raises(nmsparse.OperandError, match="axis=1"):
        nmsparse.nm_prune(W, 2, 8, l=4, axis=1)


def test_the_nm_product_equals_numpy_on_the_pruned_weights():
    W = RNG.standard_normal((256, 64)).astype(np.float32)
    X = RNG.standard_normal((32, 256)).astype(np.float32)
    pruned, _ = nmsparse.nm_prune(W, 2, 8, l=32)
    assert pruned.format == "nm(2,8,32)"
    Y = nmsparse.evaluate("Y(i,j) = X(i,k) * W(k,j)", X=X, W=pruned)
    np.testing.assert_allclose(Y, X @ pruned.to_numpy(), rtol=1e-5, atol=1e-4)
    k = nmsparse.compile("Y(i,j) = X(i,k) * W(k,j)", formats={"W": "nm(2,8,32)"}, dtype="float32")
    np.testing.assert_allclose(k(X=X, W=pruned), X @ pruned.to_numpy(), rtol=1e-5, atol=1e-4)
    assert k.copies == [] and k._addresses(X=X, W=pruned)["X"] == [X.ctypes.data]
    assert "N:M" in k.describe() or "nm" in k.describe().lower()


def test_dense_weights_given_an_nm_format_must_fit_it():
    W = RNG.standard_normal((64, 64))
    X = np.ones((4, 64))
    with pytest.raises(nmsparse.OperandError, match="nm_prune"):
        nmsparse.evaluate("Y(i,j) = X(i,k) * W(k,j)", formats={"W": "nm(2,8,32)"}, X=X, W=W)
    pruned = nmsparse.nm_prune(W, 2, 8, l=32)[0].to_numpy()
    Y = nmsparse.evaluate("Y(i,j) = X(i,k) * W(k,j)", formats={"W": "nm(2,8,32)"}, X=X, W=pruned)
    np.testing.assert_allclose(Y, X @ pruned, rtol=1e-12)
