#!/usr/bin/env bash
# Inner-product SpGEMM into CSR, C(i,j) = A(i,k) * A(j,k) (A read twice, by two accesses; the
# loop order i, j, k co-iterates rows i and j of A), on the shared matrices, next to scipy's
# A @ Aᵀ (Aᵀ materialised before timing; bench_peers.py's spgemm_AAt) in the same run.
# Checks that nmsparse stores exactly the structural nonzeros: the pairs of rows that share a
# column, which is scipy's (|A| @ |A|ᵀ).nnz (scipy's own A @ Aᵀ drops products that cancel).
# The inner-product order visits every (i, j) pair: matrices with more than PAIRS (default
# 1e8) pairs are skipped.
# usage: [REPS=10] [PAIRS=100000000] [MATRICES="a b"] bench/inner_product_vs_scipy.sh
#        (needs the peers' venv; see ../shared/peers/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PEERS_PYTHON:-$HOME/.nmsparse-peers/bin/python}
REPS=${REPS:-10}
PAIRS=${PAIRS:-100000000}
OUT=${OUT:-/tmp/inner_product.csv}
TMP=$(mktemp -d)
cargo build -q --release
names=${MATRICES:-$(ls ../shared/data/matrices | sed 's/\.mtx$//')}
echo "matrix,rows,nnz,structural,nmsparse_stored,nmsparse_ms,scipy_ms,scipy_over_nmsparse" > "$OUT"
for name in $names; do
  f=../shared/data/matrices/$name.mtx
  read -r rows structural < <("$PY" -c "
import fast_matrix_market as fmm, scipy.sparse as sp, numpy as np
A = sp.csr_matrix(fmm.mmread('$f'), dtype=np.float64); A.sum_duplicates()
P = A.copy(); P.data = np.ones_like(P.data)
print(A.shape[0], (P @ P.T).nnz if A.shape[0] ** 2 <= $PAIRS else -1)
")
  if [ "$structural" -lt 0 ]; then echo "$name: skipped, $rows² pairs" >&2; continue; fi
  out=$(NMSPARSE_MTX_BOTH_TRIANGLES=1 ./target/release/nmsparse "C(i,j) = A(i,k) * A(j,k)" -f=C:csr -f=A:csr \
    -i=A:$f -time=$REPS -c)
  stored=$(echo "$out" | awk '/stored values/ {for (i = 1; i <= NF; i++) if ($(i+1) == "stored") print $i}' | tr -d ,)
  ms=$(echo "$out" | awk '$1 == "min:" {print $2; exit}')
  "$PY" ../shared/peers/bench_peers.py "$f" --threads 1 --peers scipy --kernels spgemm_AAt --out "$TMP/p.csv" \
    --flops-limit 1e12 > /dev/null
  scipy=$(awk -F, 'NR > 1 && $3 == "scipy" {print $5 * 1000; exit}' "$TMP/p.csv")
  ratio=$(awk -v a="$scipy" -v b="$ms" 'BEGIN {printf "%.3f", a / b}')
  echo "$name,$rows,$(awk '!/^%/ {print $3; exit}' "$f"),$structural,$stored,$ms,$scipy,$ratio" | tee -a "$OUT"
  [ "$stored" = "$structural" ] || { echo "$name: stored $stored, structural $structural" >&2; exit 1; }
done
rm -rf "$TMP"
