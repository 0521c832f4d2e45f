#!/usr/bin/env bash
# CSC SpMV (y = A x with A in CSC: the outer loop over columns is a reduction into y) on the
# shared matrices: nmsparse on 1 thread and on 2 (ranges of columns into per-thread copies of
# y, summed in order) next to scipy's csc_matrix @ x, the same format, matrix by matrix in one
# run. x[j] = 1 + (j % 17)/16 as in bench_peers.py; times are the fastest of REPS runs.
# usage: [REPS=50] bench/csc_spmv_vs_scipy.sh   (needs the peers' venv, ../shared/peers/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PEERS_PYTHON:-$HOME/.nmsparse-peers/bin/python}
REPS=${REPS:-50}
TMP=$(mktemp -d)
cargo build -q --release
echo "| matrix | nnz | scipy CSC (ms) | nmsparse 1 thread (ms) | nmsparse 2 threads (ms) | scipy / nmsparse 1 | scipy / nmsparse 2 | checksums agree |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
for name in Groebner_id2003_aug MIT8 arrow astro-ph bcsstk16 bcsstk33 luxembourg sparse-images-1024 wiki-Vote wing; do
  f=../shared/data/matrices/$name.mtx
  peer=$("$PY" - "$f" "$REPS" "$TMP/x.tns" <<'PYEOF'
import sys, time, numpy as np, scipy.sparse as sp, fast_matrix_market as fmm
A = sp.csc_matrix(fmm.mmread(sys.argv[1]), dtype=np.float64); A.sum_duplicates()
x = 1.0 + (np.arange(A.shape[1]) % 17) / 16.0
with open(sys.argv[3], 'w') as o:
    o.write('# shape %d\n' % A.shape[1])
    for j in range(A.shape[1]): o.write('%d %.17g\n' % (j + 1, x[j]))
A @ x
best = min((lambda t: (A @ x, time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(int(sys.argv[2])))
print('%d %.9f %.6f' % (A.nnz, best, (A @ x).sum()))
PYEOF
)
  read -r nnz secs sum <<< "$peer"
  ours() { ./target/release/nmsparse "y(i) = A(i,j) * x(j)" -f=A:csc -i=A:$f -i=x:$TMP/x.tns -time=$REPS -nthreads=$1 2>/dev/null; }
  one=$(ours 1); two=$(ours 2)
  min() { echo "$1" | awk '/^  min:/ {print $2}'; }
  check() { echo "$1" | sed -n 's/.*checksum \([-0-9.e+]*\).*/\1/p'; }
  "$PY" - "$name" "$nnz" "$secs" "$sum" "$(min "$one")" "$(min "$two")" "$(check "$one")" "$(check "$two")" <<'PYEOF'
import sys
name, nnz, secs, s, one, two, c1, c2 = sys.argv[1:]
peer = float(secs) * 1e3
agree = all(abs(float(c) - float(s)) <= 1e-6 * max(1.0, abs(float(s))) for c in (c1, c2))
print('| %s | %s | %.3f | %s | %s | %.2f | %.2f | %s |' % (name, nnz, peer, one, two, peer / float(one), peer / float(two), 'yes' if agree else 'NO (%s %s %s)' % (s, c1, c2)))
PYEOF
done
