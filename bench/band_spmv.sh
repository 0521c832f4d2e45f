#!/usr/bin/env bash
# SpMV over band rows (`db`) against CSR, and scipy's CSR and DIA in the same run: two
# pentadiagonal matrices (scipy.sparse.diags, 2·10^5 and 2·10^6 rows) and the shared
# matrices named in MATRICES. nmsparse's formats alternate (csr db, ROUNDS times), each run
# the median of `-time=REPS`; scipy's time is the median of REPS products in one process.
# Prints, per matrix, the stored values per entry of the band, the medians (ms) and csr ÷ db.
# usage: [ROUNDS=6] [REPS=200] [MATRICES="olm1000 bcsstk16"] PEERS_PYTHON=... bench/band_spmv.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-6}
REPS=${REPS:-200}
MATRICES=${MATRICES:-"olm1000 bcsstk16"}
PY=${PEERS_PYTHON:-$HOME/.nmsparse-peers/bin/python}
dir=$(mktemp -d)
cargo build -q --release -p nmsparse --bin nmsparse
"$PY" - "$dir" <<'EOF'
import sys, numpy as np, scipy.sparse as sp, scipy.io
for n in (200_000, 2_000_000):
    d = [np.full(n - abs(k), v) for k, v in ((-2, 1.0), (-1, -1.0), (0, 4.0), (1, -1.0), (2, 1.0))]
    scipy.io.mmwrite(f"{sys.argv[1]}/penta{n}.mtx", sp.diags(d, [-2, -1, 0, 1, 2], format="coo"))
EOF
files="$dir/penta200000.mtx $dir/penta2000000.mtx"
for m in $MATRICES; do files="$files ../shared/data/matrices/$m.mtx"; done
for f in $files; do
  for _ in $(seq "$ROUNDS"); do
    for format in csr db; do
      t=$(target/release/nmsparse "y(i) = A(i,j) * x(j)" -f=A:$format -i=A:"$f" -time="$REPS" 2>&1 | awk '/median/ {print $2}')
      echo "$(basename "$f" .mtx) $format $t"
    done
  done
done > "$dir/times.txt"
"$PY" - "$dir/times.txt" "$REPS" $files <<'EOF'
import sys, time, statistics, collections, numpy as np, scipy.io
times = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m, f, t = line.split()
    times[(m, f)].append(float(t))
reps = int(sys.argv[2])
print(f"{'matrix':14} {'values/entry':>12} {'csr':>9} {'db':>9} {'scipy csr':>10} {'scipy dia':>10} {'csr/db':>7}")
for path in sys.argv[3:]:
    name = path.rsplit("/", 1)[-1][:-4]
    a = scipy.io.mmread(path).tocsr()
    a.sum_duplicates()
    runs = sum(int(a.indices[e - 1] - a.indices[s] + 1) for s, e in zip(a.indptr[:-1], a.indptr[1:]) if e > s)
    x = np.random.default_rng(0).random(a.shape[1])
    peer = {}
    for label, m in (("csr", a), ("dia", a.todia() if runs <= 2 * a.nnz else None)):
        if m is None:
            peer[label] = float("nan")
            continue
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            m @ x
            ts.append(time.perf_counter() - t)
        peer[label] = statistics.median(ts) * 1e3
    c, b = statistics.median(times[(name, "csr")]), statistics.median(times[(name, "db")])
    print(f"{name:14} {runs / a.nnz:12.2f} {c:9.3f} {b:9.3f} {peer['csr']:10.3f} {peer['dia']:10.3f} {c / b:7.2f}")
EOF
