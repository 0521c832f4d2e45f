#!/usr/bin/env bash
# Times two builds of nmsparse against each other, alternating them in one run (A B B A, so the
# drift of a shared machine weighs on both alike): the generated kernels through
# bench/kernels_vs_peers.sh (PEERS=0, the compute time of `-time=N`), the convolution sweep
# (examples/conv_sweep.rs) and the N:M SpMM sweep (nm-spmm/examples/sweep.rs). Prints, per
# kernel, the geometric mean of after / before times (below 1: faster after) with its range.
# usage: BEFORE=<git revision> [KERNELS="spmv spmm64 spgemm_AAt sddmm64 outer_AAt"] [REPS=20]
#        [CONV=1] [NM=1] bench/before_after.sh
#        (the kernels' data preparation needs a Python with numpy, scipy and
#        fast_matrix_market: PEERS_PYTHON, as bench/kernels_vs_peers.sh; NM needs threadpoolctl
#        too, to find numpy's OpenBLAS for the dense GEMM the sweep times alongside)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BEFORE:?name the revision to compare with: BEFORE=<rev>}"
KERNELS=${KERNELS:-"spmv spmm64 spgemm_AAt sddmm64 outer_AAt"}
REPS=${REPS:-20}
CONV=${CONV:-1}
NM=${NM:-1}
PY=${PEERS_PYTHON:-$HOME/.nmsparse-peers/bin/python}
rev=$(git rev-parse --short "$BEFORE")
base=${TMPDIR:-/tmp}/nmsparse-before-$rev
out=$(mktemp -d)
[ -d "$base/src" ] || git worktree add -f "$base/src" "$rev" > /dev/null
(cd "$base/src" && CARGO_TARGET_DIR="$base/target" cargo build -q --release -p nmsparse --bin nmsparse --example conv_sweep \
  && CARGO_TARGET_DIR="$base/target" cargo build -q --release -p nm-spmm --example sweep)
cargo build -q --release -p nmsparse --bin nmsparse --example conv_sweep
cargo build -q --release -p nm-spmm --example sweep
openblas=""
if [ "$NM" = 1 ]; then
  openblas=$("$PY" -c "
import numpy
from threadpoolctl import threadpool_info
print(next(i['filepath'] for i in threadpool_info() if i['internal_api'] == 'openblas'))")
fi
run() { # which (before|after), round
  local dir=$base/target/release
  [ "$1" = after ] && dir=./target/release
  for kernel in $KERNELS; do
    KERNEL=$kernel PEERS=0 REPS=$REPS PEERS_PYTHON=$PY NMSPARSE=$dir/nmsparse OUT=$out/$kernel-$1-$2.csv \
      bench/kernels_vs_peers.sh > /dev/null 2>&1
  done
  if [ "$CONV" = 1 ]; then REPS=5 "$dir/examples/conv_sweep" "$out/conv-$1-$2.out" > "$out/conv-$1-$2.md"; fi
  if [ "$NM" = 1 ]; then
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_THREAD_TIMEOUT=4 NMSPARSE_OPENBLAS="$openblas" \
      "$dir/examples/sweep" 1024,2048 4:8,2:8,1:8 32 f32 1 3 > "$out/nm-$1-$2.csv"
  fi
}
run before 1; run after 1; run after 2; run before 2
"$PY" - "$out" "$KERNELS" <<'PYEOF'
import csv, math, statistics, sys, os
out, kernels = sys.argv[1], sys.argv[2].split()
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
def line(name, ratios):
    if ratios:
        print(f"| {name} | {gm(ratios):.2f} | {min(ratios):.2f}–{max(ratios):.2f} | {len(ratios)} |")
print("| kernel | after / before (geometric mean) | range | cases |\n|---|---:|---:|---:|")
for k in kernels:
    t = {}
    for which in ("before", "after"):
        for r in (1, 2):
            for row in csv.DictReader(open(f"{out}/{k}-{which}-{r}.csv")):
                t.setdefault((row["matrix"], which), []).append(float(row["seconds"]))
    line(k, [statistics.median(t[(m, "after")]) / statistics.median(t[(m, "before")])
             for m in sorted({m for m, _ in t}) if (m, "before") in t and (m, "after") in t])
def conv(path):
    rows = {}
    for l in open(path):
        c = [x.strip() for x in l.strip().strip("|").split("|")]
        if l.startswith("| ") and not l.startswith("| problem"):
            rows[(c[0], c[1])] = [float(x) for x in c[2:7]]
    return rows
if os.path.exists(f"{out}/conv-before-1.md"):
    t = {w: [conv(f"{out}/conv-{w}-{r}.md") for r in (1, 2)] for w in ("before", "after")}
    for i, s in enumerate(("dense", "sparse, default", "output-stationary", "filter outermost", "into a sparse result")):
        line(f"convolution sweep, {s}", [statistics.median(x[key][i] for x in t["after"]) / statistics.median(x[key][i] for x in t["before"]) for key in t["before"][0]])
def nm(path):
    return {tuple(c[:6]): float(c[9]) for c in (l.strip().split(",") for l in open(path)) if len(c) > 10 and c[0] != "m" and c[3] != "0"}
if os.path.exists(f"{out}/nm-before-1.csv"):
    t = {w: [nm(f"{out}/nm-{w}-{r}.csv") for r in (1, 2)] for w in ("before", "after")}
    line("N:M SpMM f32 (1024³, 2048³; 4:8, 2:8, 1:8)", [min(x[k] for x in t["after"]) / min(x[k] for x in t["before"]) for k in t["before"][0]])
PYEOF
echo "(raw results in $out)"
