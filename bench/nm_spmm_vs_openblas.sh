#!/usr/bin/env bash
# N:M SpMM (nm-spmm, B in nm(N,M,32), f32 or f64) against OpenBLAS's dense GEMM, same shapes,
# same thread count. Prints a Markdown table: useful GFLOP/s of the N:M kernel (2·m·n·k·N/M),
# dense GFLOP/s, and the speedup over dense in time.
# The dense GEMM is numpy's OpenBLAS (the library threadpoolctl reports), called by the sweep
# example itself: each repetition times the N:M kernel and then the dense GEMM of the same shape,
# in one process, so the drift of a shared VM slows both alike (best of REPS each). The sweep
# puts A, B, C and the dense operands on transparent huge pages, as numpy allocates its arrays:
# on 4 KiB pages OpenBLAS's DGEMM ran 9–14% slower at 4096³, and the speedups were flattered.
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for that command only (see
# ../shared/peers/README.md): OpenBLAS picks its best kernel for this CPU (printed below).
# OPENBLAS_THREAD_TIMEOUT=4 puts OpenBLAS's workers to sleep as soon as a call ends: by default
# they spin (yielding) for ~2^28 cycles, and on two cores they took the N:M kernel's second
# thread (2048³ 1:8 on 2 threads: 68 GFLOP/s after an OpenBLAS call, 121 with the timeout).
# usage: [THREADS=1] [SIZES=1024,2048,4096] [REPS=3] [TYPE=f32|f64] [PATTERNS=4:8,3:8,2:8,1:8|nv24] bench/nm_spmm_vs_openblas.sh
#        a size is S (m = n = k = S) or MxNxK (the NM-SpMM paper's shapes: SIZES=1024x4096x4096,...)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PEERS_PYTHON:-$HOME/.nmsparse-peers/bin/python}
THREADS=${THREADS:-1}
SIZES=${SIZES:-1024,2048,4096}
REPS=${REPS:-3}
PATTERNS=${PATTERNS:-4:8,3:8,2:8,1:8}
TYPE=${TYPE:-f32}
cargo build -q --release -p nm-spmm --example sweep
openblas=$("$PY" -c "
import numpy
from threadpoolctl import threadpool_info
print(next(i['filepath'] for i in threadpool_info() if i['internal_api'] == 'openblas'))")
out=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_THREAD_TIMEOUT=4 NMSPARSE_OPENBLAS="$openblas" \
  ./target/release/examples/sweep "$SIZES" "$PATTERNS" 32 "$TYPE" "$THREADS" "$REPS")
echo "| m × n × k | N:M | sparsity | nm-spmm (ms) | nm-spmm GFLOP/s | OpenBLAS dense (ms) | dense GFLOP/s | speedup | target |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
# Each N:M line is followed by the line of the dense GEMM timed alternately with it.
echo "$out" | tail -n +2 | paste -d, - - | while IFS=, read -r m n k keep window l ty threads isa secs gflops _loading _ _ _ _ _ _ _ _ _ dsecs _ core; do
  # The targets of issue 7 are for vector-wise nm(N,M,L); nv24 (printed with L = 0) has none.
  awk -v m="$m" -v n="$n" -v k="$k" -v keep="$keep" -v window="$window" -v l="$l" -v s="$secs" -v g="$gflops" -v d="$dsecs" 'BEGIN {
    sp = 1 - keep / window; target = l == 0 ? 0 : (sp >= 0.74) ? 0.8 * window / keep : (sp <= 0.5 ? 1.3 : 0);
    printf "| %d × %d × %d | %d:%d | %.1f%% | %.2f | %.1f | %.2f | %.1f | %.2f× | %s |\n", m, n, k, keep, window, sp * 100, s * 1e3, g,
      d * 1e3, 2 * m * n * k / d / 1e9, d / s, (target > 0 ? sprintf("≥ %.2f×", target) : "-") }'
done
echo
echo "isa: $(echo "$out" | tail -1 | cut -d, -f9); OpenBLAS kernel: $(echo "$out" | tail -1 | cut -d, -f12 | sed 's/^openblas-//'); threads: $THREADS; type: $TYPE; dense timed in the same process, alternating"
