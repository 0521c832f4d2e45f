#!/usr/bin/env python3
"""Peer timings for nm-format's storage kernels: fast_matrix_market.mmread and scipy.sparse
tocsc()/tocsr(), printed as CSV `kernel,matrix,system,seconds,nnz_out,checksum` (the columns of
nm-format's `format_timings` example). seconds = min over --reps runs after one warm-up.

usage: python3 bench/format_peers.py [--reps N] FILE.mtx ...
(needs the packages of ../shared/peers/requirements.txt; see bench/compare_format.sh)
"""
import argparse
import os
import time

import fast_matrix_market as fmm
import numpy as np
import scipy.sparse as sp


def best(reps, f):
    out = f()
    t_best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        out = f()
        t_best = min(t_best, time.perf_counter() - t)
    return t_best, out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    print("kernel,matrix,system,seconds,nnz_out,checksum")
    for path in a.files:
        name = os.path.splitext(os.path.basename(path))[0]
        s, m = best(a.reps, lambda: fmm.mmread(path))
        m = sp.coo_matrix(m)
        print(f"read_mtx,{name},fast_matrix_market,{s:.6e},{m.nnz},{float(np.sum(m.data)):.12e}")
        csr = m.tocsr()
        csr.sum_duplicates()
        # nmsparse's conversions carry nonzeros only; start both from the same nonzeros.
        csr.eliminate_zeros()
        s, csc = best(a.reps, lambda: csr.tocsc())
        print(f"csr_to_csc,{name},scipy,{s:.6e},{csc.nnz},{float(np.sum(csc.data)):.12e}")
        s, back = best(a.reps, lambda: csc.tocsr())
        print(f"csc_to_csr,{name},scipy,{s:.6e},{back.nnz},{float(np.sum(back.data)):.12e}")


if __name__ == "__main__":
    main()
