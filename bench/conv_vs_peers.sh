#!/usr/bin/env bash
# 2-D "valid" convolution with a 3 x 3 filter, O(i,j) = A(i+p, j+q) * F(p,q), F(p,q) = 3p + q + 1,
# on the shared matrices read as sparse images (A in CSR): nmsparse's generated C (1 thread,
# `-time=N`, fastest run) into a dense result (when it has at most 3e7 elements, as the peers'
# --dense-limit) and into a DCSR result (`-c`: assembly and compute in one timed kernel), next
# to bench_peers.py's conv3x3 in the same run: scipy.signal.convolve2d on the densified image,
# scipy's sum of 9 shifted sparse slices, and the MLIR sparsifier's linalg.conv_2d with a DCSR
# image into a dense and into a DCSR result (the convolution paper's own system).
# IMAGES="0.001 0.01" adds random 999 x 999 images of those densities (values 1..8, seed 7;
# "image-0.001" in the table), the sparsest convolutions.
# usage: [REPS=10] [MATRICES="a b"] [IMAGES="d1 d2"] bench/conv_vs_peers.sh   (needs the peers'
#        venv; see bench/compare_format.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PEERS_PYTHON:-$HOME/.nmsparse-peers/bin/python}
REPS=${REPS:-10}
OUT=${OUT:-/tmp/conv_compare.csv}
MATRICES=${MATRICES:-"Groebner_id2003_aug MIT8 arrow astro-ph bcsstk16 bcsstk33 sparse-images-1024 wiki-Vote wing"}
TMP=$(mktemp -d)
cargo build -q --release
printf '%%%%MatrixMarket matrix array real general\n3 3\n' > "$TMP/F.mtx"
for q in 0 1 2; do for p in 0 1 2; do echo $((3 * p + q + 1)) >> "$TMP/F.mtx"; done; done
echo "matrix,system,seconds,checksum" > "$OUT"
for density in ${IMAGES:-}; do
  "$PY" -c "
import numpy as np, scipy.io, scipy.sparse as sp
rng = np.random.default_rng(7)
n = 999
k = int(round(n * n * $density))
at = rng.choice(n * n, k, replace=False)
scipy.io.mmwrite('$TMP/image-$density.mtx', sp.coo_matrix((rng.integers(1, 9, k).astype(float), (at // n, at % n)), shape=(n, n)))
"
done
for name in $MATRICES $(for d in ${IMAGES:-}; do echo "image-$d"; done); do
  f=../shared/data/matrices/$name.mtx
  [ -f "$TMP/$name.mtx" ] && f=$TMP/$name.mtx
  read -r rows cols _ < <(grep -v '^%' "$f" | head -1)
  run() {
    out=$(./target/release/nmsparse "O(i,j) = A(i+p, j+q) * F(p,q)" -f=A:csr -i=A:"$f" -i=F:"$TMP/F.mtx" -time="$REPS" "$@")
    secs=$(echo "$out" | awk '/min:/ {print $2/1000}')
    sum=$(echo "$out" | sed -n 's/.*checksum \(.*\)/\1/p')
  }
  if [ $(((rows - 2) * (cols - 2))) -le 30000000 ]; then
    run
    echo "$name,nmsparse-dense,$secs,$sum" >> "$OUT"
  fi
  run -f=O:dcsr -c
  echo "$name,nmsparse-dcsr,$secs,$sum" >> "$OUT"
  "$PY" ../shared/peers/bench_peers.py "$f" --threads 1 --kernels conv3x3 --peers scipy,mlir,dense --out "$TMP/p.csv" > /dev/null 2>&1 || true
  "$PY" -c "
import csv
for r in csv.DictReader(open('$TMP/p.csv')):
    if r['seconds']: print('$name,%s,%s,%s' % (r['peer'], r['seconds'], r['checksum']))
" >> "$OUT"
done
"$PY" - "$OUT" <<'PYEOF'
import csv, sys, math
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault(r['matrix'], {})[r['system']] = r
cols = ['nmsparse-dense', 'scipy.signal-dense', 'mlir', 'nmsparse-dcsr', 'scipy-shiftadd', 'mlir-sparseout']
print('| matrix | ' + ' | '.join(c + ' (ms)' for c in cols) + ' | dense out: best peer / nmsparse | sparse out: best peer / nmsparse | checksums agree |')
print('|---|' + '---:|' * len(cols) + '---:|---:|---|')
ratios = {'dense': [], 'sparse': []}
for m, s in by.items():
    t = {c: float(s[c]['seconds']) for c in cols if c in s}
    sums = [float(s[c]['checksum']) for c in cols if c in s]
    agree = all(abs(x - sums[0]) <= 1e-9 * max(1.0, abs(sums[0])) for x in sums)
    cells = []
    for kind, ours, peers in (('dense', 'nmsparse-dense', ['scipy.signal-dense', 'mlir']),
                              ('sparse', 'nmsparse-dcsr', ['scipy-shiftadd', 'mlir-sparseout'])):
        have = [t[p] for p in peers if p in t]
        if ours in t and have:
            ratios[kind].append(min(have) / t[ours])
            cells.append('%.2f' % (min(have) / t[ours]))
        else:
            cells.append('-')
    print('| %s | %s | %s | %s |' % (m, ' | '.join('%.3f' % (t[c] * 1e3) if c in t else '-' for c in cols),
                                      ' | '.join(cells), 'yes' if agree else 'NO'))
for kind, r in ratios.items():
    if r:
        print('\n%s result: geometric mean of best peer / nmsparse over %d matrices: %.2f'
              % (kind, len(r), math.exp(sum(map(math.log, r)) / len(r))))
PYEOF
