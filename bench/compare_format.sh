#!/usr/bin/env bash
# nm-format's storage kernels against fast_matrix_market and scipy, in one run, on the real
# matrices of ../shared/data: reads .mtx files and converts CSR<->CSC, matrix by matrix, the
# Rust timings and the peers' back to back. Prints a markdown table with ratios (peer / ours:
# above 1 means nmsparse is faster) and leaves the raw CSV in $OUT (default /tmp/format_compare.csv).
#
# usage: bench/compare_format.sh [MATRIX.mtx ...]     (default: every matrix of ../shared/data)
# needs: the peers' venv (python3 -m venv ~/.nmsparse-peers &&
#        ~/.nmsparse-peers/bin/pip install -r ../shared/peers/requirements.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PEERS_PYTHON:-$HOME/.nmsparse-peers/bin/python}
OUT=${OUT:-/tmp/format_compare.csv}
REPS=${REPS:-15}
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(../shared/data/matrices/*.mtx)
cargo build -q --release -p nm-format --example format_timings
: > "$OUT.raw"
for f in "${files[@]}"; do
  ./target/release/examples/format_timings --reps "$REPS" "$f" | tail -n +2 >> "$OUT.raw"
  "$PY" bench/format_peers.py --reps "$REPS" "$f" | tail -n +2 >> "$OUT.raw"
done
{ echo "kernel,matrix,system,seconds,nnz_out,checksum"; cat "$OUT.raw"; } > "$OUT"
rm -f "$OUT.raw"
"$PY" - "$OUT" <<'PYEOF'
import csv, sys, math
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault((r["kernel"], r["matrix"]), {})[r["system"]] = r
for kernel, peer in [("read_mtx", "fast_matrix_market"), ("csr_to_csc", "scipy"), ("csc_to_csr", "scipy")]:
    print(f"\n{kernel}: nmsparse vs {peer} (ms; ratio = {peer} / nmsparse)\n")
    print("| matrix | nnz | nmsparse | " + peer + " | ratio | checksums agree |")
    print("|---|---:|---:|---:|---:|---|")
    ratios = []
    for (k, m), systems in sorted(by.items(), key=lambda kv: int(list(kv[1].values())[0]["nnz_out"])):
        if k != kernel or "nmsparse" not in systems or peer not in systems:
            continue
        a, b = systems["nmsparse"], systems[peer]
        ta, tb = float(a["seconds"]), float(b["seconds"])
        ca, cb = float(a["checksum"]), float(b["checksum"])
        agree = a["nnz_out"] == b["nnz_out"] and abs(ca - cb) <= 1e-9 * max(1.0, abs(cb))
        ratios.append(tb / ta)
        print(f"| {m} | {a['nnz_out']} | {ta*1e3:.3f} | {tb*1e3:.3f} | {tb/ta:.2f} | {'yes' if agree else 'NO'} |")
    if ratios:
        g = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ngeometric mean ratio over {len(ratios)} matrices: {g:.2f}")
PYEOF
