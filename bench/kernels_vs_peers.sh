#!/usr/bin/env bash
# SpMV (y = A x) or SpMM with 64 columns (C = A B) on the shared matrices with >= 1e5
# nonzeros: nmsparse's generated C (A in CSR, single thread, `-time=N`, compute only) next to
# the peers' bench_peers.py (scipy, SuiteSparse:GraphBLAS, MLIR), matrix by matrix in one run,
# with the peers' dense operand (x[j] = 1 + (j % 17)/16; B[j,c] = 1 + ((7j + 3c) % 23)/22) so
# the checksums can be compared.
# usage: KERNEL=spmv|spmm64 bench/kernels_vs_peers.sh   (needs the peers' venv; see
#        bench/compare_format.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PEERS_PYTHON:-$HOME/.nmsparse-peers/bin/python}
REPS=${REPS:-50}
KERNEL=${KERNEL:-spmv}
OUT=${OUT:-/tmp/kernels_compare.csv}
TMP=$(mktemp -d)
cargo build -q --release
echo "kernel,matrix,system,seconds,checksum" > "$OUT"
for name in Groebner_id2003_aug MIT8 arrow astro-ph bcsstk16 bcsstk33 luxembourg sparse-images-1024 wiki-Vote wing; do
  f=../shared/data/matrices/$name.mtx
  cols=$(awk '!/^%/ {print $2; exit}' "$f")
  if [ "$KERNEL" = spmv ]; then
    "$PY" -c "
n=$cols
with open('$TMP/x.tns','w') as o:
    o.write('# shape %d\n' % n)
    for j in range(n): o.write('%d %r\n' % (j+1, 1 + (j % 17)/16))
"
    out=$(OMP_NUM_THREADS=1 ./target/release/nmsparse "y(i) = A(i,j) * x(j)" -f=A:csr -i=A:$f -i=x:$TMP/x.tns -time=$REPS)
  else
    "$PY" -c "
n=$cols
with open('$TMP/B.mtx','w') as o:
    o.write('%%%%MatrixMarket matrix array real general\n%d 64\n' % n)
    for c in range(64):
        for j in range(n): o.write('%r\n' % (1 + ((7*j + 3*c) % 23)/22))
"
    out=$(OMP_NUM_THREADS=1 ./target/release/nmsparse "C(i,j) = A(i,k) * B(k,j)" -f=A:csr -i=A:$f -i=B:$TMP/B.mtx -s="reorder(k, j)" -time=$REPS)
  fi
  secs=$(echo "$out" | awk '/min:/ {print $2/1000}')
  sum=$(echo "$out" | sed -n 's/.*checksum \(.*\)/\1/p')
  echo "$KERNEL,$name,nmsparse,$secs,$sum" >> "$OUT"
  OMP_NUM_THREADS=1 "$PY" ../shared/peers/bench_peers.py "$f" --threads 1 --kernels "$KERNEL" --peers scipy,graphblas,mlir --out "$TMP/p.csv" > /dev/null 2>&1 || true
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
peers = ['scipy', 'graphblas', 'mlir']
print('| matrix | nmsparse (ms) | ' + ' | '.join(p + ' (ms)' for p in peers) + ' | best peer / nmsparse | checksum agrees |')
print('|---|---:|' + '---:|' * len(peers) + '---:|---|')
ratios = []
for m, s in by.items():
    if 'nmsparse' not in s:
        continue
    ours = float(s['nmsparse']['seconds'])
    times = {p: float(s[p]['seconds']) for p in peers if p in s}
    best = min(times.values()) if times else float('nan')
    ref = next((s[p]['checksum'] for p in peers if p in s), None)
    agree = ref is not None and abs(float(s['nmsparse']['checksum']) - float(ref)) <= 1e-9 * max(1.0, abs(float(ref)))
    if times:
        ratios.append(best / ours)
    cells = ' | '.join('%.3f' % (times[p] * 1e3) if p in times else '-' for p in peers)
    print('| %s | %.3f | %s | %.2f | %s |' % (m, ours * 1e3, cells, best / ours, 'yes' if agree else 'NO'))
if ratios:
    print('\ngeometric mean of best peer / nmsparse over %d matrices: %.2f' % (len(ratios), math.exp(sum(map(math.log, ratios)) / len(ratios))))
PYEOF
