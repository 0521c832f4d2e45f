"""nmsparse from Python against scipy and python-graphblas in the same process.

Each side is timed as a Python caller sees it: one call from Python until its result is
there (nmsparse: `kernel(**operands)`, scipy: `A @ x`, graphblas: `A.mxv(x).new()`), the
operands prepared before timing (for SpGEMM `A·Aᵀ`, Aᵀ materialised as CSR for every side);
results are allocated by every call on every side. Fastest of `--reps` calls after one warm-up
call, one thread everywhere (OMP_NUM_THREADS=1 and graphblas's nthreads=1).

    OMP_NUM_THREADS=1 python python/bench/bench_vs_peers.py [--reps 20] [--out results.csv]

`spmv_tensor` is nmsparse's SpMV with A held as an `nmsparse.Tensor` (checked once when it is
made) instead of scipy's arrays (read in place, so checked at every call). Also the N:M product
against numpy's dense GEMM on the pruned weights, and the per-call cost of a 10×10 SpMV (median
of 20,000 calls).
"""

import argparse
import csv
import os
import pathlib
import statistics
import sys
import time

import numpy as np
import scipy.io
import scipy.sparse as sp

import nmsparse

try:
    import graphblas as gb

    gb.ss.config["nthreads"] = 1
except Exception as e:  # noqa: BLE001 - any import failure means no graphblas column
    print(f"python-graphblas not available ({e}); its column stays empty", file=sys.stderr)
    gb = None

MATRICES = ["Groebner_id2003_aug", "MIT8", "arrow", "astro-ph", "bcsstk16", "bcsstk33", "luxembourg",
            "sparse-images-1024", "wiki-Vote", "wing"]
SHARED = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "matrices"


def best(f, reps):
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def to_gb(A):
    return gb.Matrix.from_csr(A.indptr, A.indices, A.data, ncols=A.shape[1]) if gb else None


def kernels(path, reps, rows):
    A = sp.csr_array(scipy.io.mmread(path), dtype=np.float64)
    A.sum_duplicates()
    name = path.stem
    x = 1 + (np.arange(A.shape[1]) % 17) / 16
    B = np.ascontiguousarray(1 + ((7 * np.arange(A.shape[1])[:, None] + 3 * np.arange(64)[None, :]) % 23) / 22)
    At = A.T.tocsr()
    spmv = nmsparse.compile("y(i) = A(i,j) * x(j)")
    spmm = nmsparse.compile("C(i,j) = A(i,k) * B(k,j)", schedule="reorder(k,j)")
    spgemm = nmsparse.compile("C(i,j) = A(i,k) * B(k,j)", formats={"C": "csr"}, schedule="reorder(k,j)")
    gA, gAt = to_gb(A), to_gb(At)
    gx = gb.Vector.from_dense(x) if gb else None
    gB = gb.Matrix.from_dense(B) if gb else None
    # The same matrix held as an nmsparse.Tensor: checked once when it was made, not at each
    # call as scipy's arrays (read in place) are.
    T = nmsparse.Tensor.from_scipy(A, "csr")
    cases = [
        ("spmv", lambda: spmv(A=A, x=x), lambda: A @ x, (lambda: gA.mxv(gx).new()) if gb else None),
        ("spmv_tensor", lambda: spmv(A=T, x=x), lambda: A @ x, None),
        ("spmm64", lambda: spmm(A=A, B=B), lambda: A @ B, (lambda: gA.mxm(gB).new()) if gb else None),
        ("spgemm_AAt", lambda: spgemm(A=A, B=At), lambda: A @ At, (lambda: gA.mxm(gAt).new()) if gb else None),
    ]
    flops = float((np.bincount(A.indices, minlength=A.shape[1]).astype(float) * np.diff(At.indptr)).sum())
    for kernel, ours, scipy_call, gb_call in cases:
        if kernel == "spgemm_AAt" and flops > 5e8:
            print(f"{name}: spgemm_AAt skipped, {flops:.2e} multiplies", file=sys.stderr)
            continue
        got, want = ours(), scipy_call()
        difference = abs(got - want)
        assert float(difference.max()) <= 1e-9 * max(1.0, float(abs(want).max())), (name, kernel)
        t_ours, t_scipy = best(ours, reps), best(scipy_call, reps)
        t_gb = best(gb_call, reps) if gb_call else float("nan")
        rows.append((kernel, name, t_ours, t_scipy, t_gb))
        print(f"{kernel:11} {name:20} nmsparse {t_ours * 1e3:9.3f} ms  scipy {t_scipy * 1e3:9.3f} ms  "
              f"graphblas {t_gb * 1e3:9.3f} ms", flush=True)


def nm_product(reps, rows):
    rng = np.random.default_rng(0)
    for (m, k, n) in ((512, 4096, 4096), (2048, 4096, 4096)):
        W = rng.standard_normal((k, n)).astype(np.float32)
        X = rng.standard_normal((m, k)).astype(np.float32)
        for nm in ((2, 4), (2, 8)):
            pruned, _ = nmsparse.nm_prune(W, nm[0], nm[1], l=32)
            dense = pruned.to_numpy()
            kernel = nmsparse.compile("Y(i,j) = X(i,k) * W(k,j)", formats={"W": f"nm({nm[0]},{nm[1]},32)"}, dtype="float32")
            np.testing.assert_allclose(kernel(X=X, W=pruned), X @ dense, rtol=1e-3, atol=1e-2)
            t_ours = best(lambda: kernel(X=X, W=pruned), reps)
            t_numpy = best(lambda: X @ dense, reps)
            label = f"{m}x{k}x{n} {nm[0]}:{nm[1]}"
            rows.append(("nm_product_f32", label, t_ours, t_numpy, float("nan")))
            print(f"nm product  {label:20} nmsparse {t_ours * 1e3:9.3f} ms  numpy dense {t_numpy * 1e3:9.3f} ms", flush=True)


def per_call(rows):
    A = sp.csr_array(np.diag(np.arange(1.0, 11.0)) + np.eye(10, k=1))
    x = np.ones(10)
    kernel = nmsparse.compile("y(i) = A(i,j) * x(j)")
    kernel(A=A, x=x)

    def median(f, calls=20000):
        samples = []
        for _ in range(20):
            t = time.perf_counter()
            for _ in range(calls // 20):
                f()
            samples.append((time.perf_counter() - t) / (calls // 20))
        return statistics.median(samples)

    t_kernel = median(lambda: kernel(A=A, x=x))
    t_eval = median(lambda: nmsparse.evaluate("y(i) = A(i,j) * x(j)", A=A, x=x))
    t_scipy = median(lambda: A @ x)
    rows.append(("call_10x10_spmv", "kernel(A=A, x=x)", t_kernel, t_scipy, float("nan")))
    rows.append(("call_10x10_spmv", "evaluate(...)", t_eval, t_scipy, float("nan")))
    print(f"10x10 SpMV per call: kernel {t_kernel * 1e6:.2f} us, evaluate {t_eval * 1e6:.2f} us, "
          f"scipy A @ x {t_scipy * 1e6:.2f} us", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", default="python_vs_peers.csv")
    parser.add_argument("--matrices", nargs="*", default=MATRICES)
    parser.add_argument("--skip-nm", action="store_true")
    args = parser.parse_args()
    if os.environ.get("OMP_NUM_THREADS") != "1":
        print("note: OMP_NUM_THREADS is not 1: numpy's BLAS may use every core", file=sys.stderr)
    rows = []
    per_call(rows)
    for name in args.matrices:
        kernels(SHARED / f"{name}.mtx", args.reps, rows)
    if not args.skip_nm:
        nm_product(args.reps, rows)
    with open(args.out, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["kernel", "case", "nmsparse_s", "scipy_or_numpy_s", "graphblas_s"])
        writer.writerows(rows)


if __name__ == "__main__":
    main()
