#!/usr/bin/env bash
# N:M SpMM (nm-spmm, B in nm(N,M,32), f32 or f64) against OpenBLAS's dense GEMM through numpy, same
# shapes, same thread count, in one run. Prints a Markdown table: useful GFLOP/s of the N:M
# kernel (2·m·n·k·N/M), dense GFLOP/s, and the speedup over dense in time.
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for the numpy command only (see
# ../shared/peers/README.md), and threadpoolctl reports which OpenBLAS kernel ran.
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
ours=$(./target/release/examples/sweep "$SIZES" "$PATTERNS" 32 "$TYPE" "$THREADS" "$REPS")
dense=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" - "$SIZES" "$THREADS" "$REPS" "$TYPE" <<'PYEOF'
import sys, time, numpy as np
from threadpoolctl import threadpool_limits, threadpool_info
threads, reps = int(sys.argv[2]), int(sys.argv[3])
dtype = np.float64 if sys.argv[4] == 'f64' else np.float32
kernel = [i.get('architecture') for i in threadpool_info() if i['internal_api'] == 'openblas']
for size in sys.argv[1].split(','):
    dims = [int(d) for d in size.split('x')]
    m, n, k = dims * 3 if len(dims) == 1 else dims
    a = np.random.rand(m, k).astype(dtype); b = np.random.rand(k, n).astype(dtype)
    with threadpool_limits(threads):
        a @ b
        best = min((lambda t0: (a @ b, time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(reps))
    print('%d,%d,%d,%.6f,%s' % (m, n, k, best, kernel[0] if kernel else '?'))
PYEOF
)
echo "| m × n × k | N:M | sparsity | nm-spmm (ms) | nm-spmm GFLOP/s | OpenBLAS dense (ms) | dense GFLOP/s | speedup | target |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
echo "$ours" | tail -n +2 | while IFS=, read -r m n k keep window l ty threads isa secs gflops _loading; do
  line=$(echo "$dense" | grep "^$m,$n,$k,")
  dsecs=$(echo "$line" | cut -d, -f4)
  # The targets of issue 7 are for vector-wise nm(N,M,L); nv24 (printed with L = 0) has none.
  awk -v m="$m" -v n="$n" -v k="$k" -v keep="$keep" -v window="$window" -v l="$l" -v s="$secs" -v g="$gflops" -v d="$dsecs" 'BEGIN {
    sp = 1 - keep / window; target = l == 0 ? 0 : (sp >= 0.74) ? 0.8 * window / keep : (sp <= 0.5 ? 1.3 : 0);
    printf "| %d × %d × %d | %d:%d | %.1f%% | %.2f | %.1f | %.2f | %.1f | %.2f× | %s |\n", m, n, k, keep, window, sp * 100, s * 1e3, g,
      d * 1e3, 2 * m * n * k / d / 1e9, d / s, (target > 0 ? sprintf("≥ %.2f×", target) : "-") }'
done
echo
echo "isa: $(echo "$ours" | tail -1 | cut -d, -f9); OpenBLAS kernel: $(echo "$dense" | head -1 | cut -d, -f5); threads: $THREADS; type: $TYPE"
