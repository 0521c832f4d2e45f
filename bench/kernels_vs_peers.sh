#!/usr/bin/env bash
# SpMV (y = A x), SpMM with 64 columns (C = A B), SpGEMM C = A Aᵀ (CSR, sorted rows) or SDDMM
# (C = A .* (X Yᵀ), 64 columns) on the shared matrices with >= 1e5 nonzeros: nmsparse's
# generated C (A in CSR, `-time=N`, compute only, `-nthreads=$THREADS`, fused assembly `-c`) next to the peers'
# bench_peers.py (scipy, SuiteSparse:GraphBLAS, MLIR) at the same thread count, matrix by
# matrix in one run, with the peers' operands (x[j] = 1 + (j % 17)/16; B[j,c] = 1 + ((7j + 3c)
# % 23)/22; Aᵀ materialised before timing; X, Y as in bench_peers.py) so checksums compare.
# At THREADS=2 the peers' harness runs GraphBLAS only (the others are sequential).
# add_AAt (C = A + Aᵀ, CSR, Aᵀ materialised as CSR before timing, square matrices) and
# mttkrp16 (M(i,r) = T(i,j,k,..) U1(j,r) U2(k,r).., R = 16, T in CSF, on the shared FROSTT
# tensors; U_m[j,r] = 1 + ((m j + 5 r) % 11)/10 as in bench_peers.py) likewise.
# usage: KERNEL=spmv|spmm64|spgemm_AA|spgemm_AAt|outer_AA|outer_AAt|sddmm64|add_AAt|mttkrp16 [THREADS=1|2] [REPS=50]
#        [WS=auto|bucket|hash|coord|dense|...] bench/kernels_vs_peers.sh   (outer_*: the default
#        workspace policy unless WS names one)
#        spmv also takes FORMAT (A's format, default csr; csc makes the outer loop a reduction)
#        and SCHEDULE (extra arguments, e.g. SCHEDULE='-s=parallelize(j,cpu_thread,atomics)')
#        (needs the peers' venv; see bench/compare_format.sh)
#        NMSPARSE=path/to/nmsparse times another binary (no build); PEERS=0 skips the peers
#        (to alternate two binaries, then time the peers once).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PEERS_PYTHON:-$HOME/.nmsparse-peers/bin/python}
REPS=${REPS:-50}
KERNEL=${KERNEL:-spmv}
THREADS=${THREADS:-1}
SCHEDULE=${SCHEDULE:-}
OUT=${OUT:-/tmp/kernels_compare.csv}
TMP=$(mktemp -d)
NMSPARSE=${NMSPARSE:-}
if [ -z "$NMSPARSE" ]; then
  cargo build -q --release
  NMSPARSE=./target/release/nmsparse
fi
PEERS=${PEERS:-1}
echo "kernel,matrix,system,seconds,checksum" > "$OUT"
names="Groebner_id2003_aug MIT8 arrow astro-ph bcsstk16 bcsstk33 luxembourg sparse-images-1024 wiki-Vote wing"
[ "$KERNEL" = mttkrp16 ] && names="splatt-med JF17K-4way"
for name in $names; do
  f=../shared/data/matrices/$name.mtx
  [ "$KERNEL" = mttkrp16 ] && f=../shared/data/tensors/$name.tns
  cols=$(awk '!/^%/ {print $2; exit}' "$f")
  rows=$(awk '!/^%/ {print $1; exit}' "$f")
  case "$KERNEL" in
  spmv)
    "$PY" -c "
n=$cols
with open('$TMP/x.tns','w') as o:
    o.write('# shape %d\n' % n)
    for j in range(n): o.write('%d %r\n' % (j+1, 1 + (j % 17)/16))
"
    out=$(OMP_NUM_THREADS=$THREADS "$NMSPARSE" "y(i) = A(i,j) * x(j)" -f=A:${FORMAT:-csr} -i=A:$f -i=x:$TMP/x.tns -time=$REPS -nthreads=$THREADS -c $SCHEDULE) ;;
  spmm64)
    "$PY" -c "
n=$cols
with open('$TMP/B.mtx','w') as o:
    o.write('%%%%MatrixMarket matrix array real general\n%d 64\n' % n)
    for c in range(64):
        for j in range(n): o.write('%r\n' % (1 + ((7*j + 3*c) % 23)/22))
"
    out=$(OMP_NUM_THREADS=$THREADS "$NMSPARSE" "C(i,j) = A(i,k) * B(k,j)" -f=A:csr -i=A:$f -i=B:$TMP/B.mtx -s="reorder(k, j)" -time=$REPS -nthreads=$THREADS -c) ;;
  spgemm_AA|spgemm_AAt|outer_AA|outer_AAt)
    # Aᵀ materialised as CSR before timing, as the peers do; rows sorted in the result.
    # Skipped above 5e8 multiplies, as bench_peers.py's --flops-limit does.
    # A·A needs a square matrix. outer_* run the outer-product loop order (k, i, j: A in CSC,
    # B in CSR, scattering into a sparse workspace: the default policy, or -workspace=$WS
    # where WS is set) against the peers' row-wise products of the same matrices.
    case "$KERNEL" in *AAt) second=At ;; *) second=A ;; esac
    flops=$("$PY" -c "
import fast_matrix_market as fmm, scipy.sparse as sp, numpy as np
A = sp.csr_matrix(fmm.mmread('$f'), dtype=np.float64); A.sum_duplicates()
if '$second' == 'A' and A.shape[0] != A.shape[1]: print(-1); raise SystemExit
B = A.T.tocsr() if '$second' == 'At' else A
flops = float((np.bincount(A.indices, minlength=A.shape[1]).astype(float) * np.diff(B.indptr)).sum())
if flops <= 5e8: fmm.mmwrite('$TMP/B.mtx', B.tocoo())
print(int(flops))
")
    if [ "$flops" -lt 0 ]; then echo "$name: skipped, not square" >&2; continue; fi
    if [ "$flops" -gt 500000000 ]; then echo "$name: skipped, $flops multiplies" >&2; continue; fi
    case "$KERNEL" in
    spgemm_*) out=$(OMP_NUM_THREADS=$THREADS "$NMSPARSE" "C(i,j) = A(i,k) * B(k,j)" -f=C:csr -f=A:csr -f=B:csr -i=A:$f -i=B:$TMP/B.mtx -s="reorder(k, j)" -time=$REPS -nthreads=$THREADS -c) ;;
    outer_*) out=$("$NMSPARSE" "C(i,j) = A(i,k) * B(k,j)" -f=C:csr -f=A:csc -f=B:csr -i=A:$f -i=B:$TMP/B.mtx -s="reorder(k, i, j)" ${WS:+-workspace=$WS} -time=$REPS -c) ;;
    esac ;;
  sddmm64)
    "$PY" -c "
for name, rows, a, b, m in (('X', $rows, 5, 1, 19), ('Y', $cols, 3, 2, 13)):
    with open('$TMP/%s.mtx' % name, 'w') as o:
        o.write('%%%%MatrixMarket matrix array real general\n%d 64\n' % rows)
        for c in range(64):
            for i in range(rows): o.write('%r\n' % (1 + ((a*i + b*c) % m)/(m - 1)))
"
    out=$(OMP_NUM_THREADS=$THREADS "$NMSPARSE" "C(i,j) = A(i,j) * X(i,k) * Y(j,k)" -f=C:csr -f=A:csr -i=A:$f -i=X:$TMP/X.mtx -i=Y:$TMP/Y.mtx -time=$REPS -nthreads=$THREADS -c) ;;
  add_AAt)
    square=$("$PY" -c "
import fast_matrix_market as fmm, scipy.sparse as sp, numpy as np
A = sp.csr_matrix(fmm.mmread('$f'), dtype=np.float64); A.sum_duplicates()
if A.shape[0] != A.shape[1]: print(0); raise SystemExit
fmm.mmwrite('$TMP/B.mtx', A.T.tocsr().tocoo())
print(1)
")
    if [ "$square" != 1 ]; then echo "$name: skipped, not square" >&2; continue; fi
    out=$(OMP_NUM_THREADS=$THREADS "$NMSPARSE" "C(i,j) = A(i,j) + B(i,j)" -f=C:csr -f=A:csr -f=B:csr -i=A:$f -i=B:$TMP/B.mtx -time=$REPS -nthreads=$THREADS -c) ;;
  mttkrp16)
    order=$(awk '!/^#/ {print NF - 1; exit}' "$f")
    "$PY" -c "
dims = [0] * $order
for line in open('$f'):
    if line.startswith('#'): continue
    c = line.split()
    for q in range($order): dims[q] = max(dims[q], int(c[q]))
for m in range(1, $order):
    with open('$TMP/U%d.mtx' % m, 'w') as o:
        o.write('%%%%MatrixMarket matrix array real general\n%d 16\n' % dims[m])
        for r in range(16):
            for j in range(dims[m]): o.write('%r\n' % (1 + ((m * j + 5 * r) % 11) / 10))
"
    vars=(i j k l m)
    sub=$(IFS=,; echo "${vars[*]:0:$order}")
    expr="M(i,r) = T($sub)"
    inputs=()
    for ((m = 1; m < order; m++)); do
      expr="$expr * U$m(${vars[$m]},r)"
      inputs+=("-i=U$m:$TMP/U$m.mtx")
    done
    csf=$(printf 's%.0s' $(seq 1 "$order"))
    out=$(OMP_NUM_THREADS=$THREADS "$NMSPARSE" "$expr" -f=T:$csf -i=T:$f "${inputs[@]}" -time=$REPS -nthreads=$THREADS -c) ;;
  *) echo "unknown KERNEL=$KERNEL" >&2; exit 2 ;;
  esac
  secs=$(echo "$out" | awk '/min:/ {print $2/1000}')
  sum=$(echo "$out" | sed -n 's/.*checksum \(.*\)/\1/p')
  echo "$KERNEL,$name,nmsparse,$secs,$sum" >> "$OUT"
  [ "$PEERS" = 1 ] || continue
  PEER_KERNEL=${KERNEL/outer_/spgemm_}
  "$PY" ../shared/peers/bench_peers.py "$f" --threads $THREADS --kernels "$PEER_KERNEL" --peers scipy,graphblas,mlir --out "$TMP/p.csv" > /dev/null 2>&1 || true
  "$PY" -c "
import csv
for r in csv.DictReader(open('$TMP/p.csv')):
    if r['seconds']: print('$KERNEL,%s,%s,%s,%s' % (r['matrix'], r['peer'], r['seconds'], r['checksum']))
" >> "$OUT"
done
"$PY" - "$OUT" <<'PYEOF'
import csv, sys, math
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault(r['matrix'].replace('.mtx', ''), {})[r['system']] = r
peers = [p for p in ['scipy', 'scipy-prealloc', 'scipy+sort', 'scipy+numpy', 'numpy-coo', 'graphblas', 'mlir'] if any(p in s for s in by.values())]
print('| matrix | nmsparse (ms) | ' + ' | '.join(p + ' (ms)' for p in peers) + ' | best peer / nmsparse | checksum agrees |')
print('|---|---:|' + '---:|' * len(peers) + '---:|---|')
ratios = []
for m, s in by.items():
    if 'nmsparse' not in s:
        continue
    ours = float(s['nmsparse']['seconds'])
    times = {p: float(s[p]['seconds']) for p in peers if p in s}
    # scipy's SpGEMM leaves rows unsorted: `scipy+sort` is its like-for-like time.
    compared = [p for p in times if not (p == 'scipy' and 'scipy+sort' in times)]
    best = min(times[p] for p in compared) if times else float('nan')
    ref = next((s[p]['checksum'] for p in peers if p in s), None)
    agree = ref is not None and abs(float(s['nmsparse']['checksum']) - float(ref)) <= 1e-9 * max(1.0, abs(float(ref)))
    if times:
        ratios.append(best / ours)
    cells = ' | '.join('%.3f' % (times[p] * 1e3) if p in times else '-' for p in peers)
    print('| %s | %.3f | %s | %.2f | %s |' % (m, ours * 1e3, cells, best / ours, 'yes' if agree else 'NO'))
if ratios:
    print('\ngeometric mean of best peer / nmsparse over %d matrices: %.2f' % (len(ratios), math.exp(sum(map(math.log, ratios)) / len(ratios))))
print('\nTimes: nmsparse, the fastest of its -time runs, which reuse the result between runs (a dense'
      ' result zeroed by the kernel, a sparse one emptied); scipy, graphblas and mlir allocate their'
      ' result at every call; scipy-prealloc is scipy\'s kernel into a reused output zeroed at every'
      ' run (SpMV, SpMM). The best peer is the fastest of all.')
PYEOF
