#!/usr/bin/env bash
# Compile latency of SpGEMM into CSR (`C(i,j) = A(i,k) * B(k,j)`, every tensor CSR,
# `reorder(k,j)`), as the command reports it (`Compile:` of `-time`: lowering, emitting C, the C
# compiler or the cache, loading): cold (a fresh NMSPARSE_CACHE_DIR each run), with `-c` (one
# fused kernel) and from the on-disk cache (a fresh process each run). The binaries named are
# alternated run by run (A B B A ...); prints each one's median and range in ms.
# usage: [RUNS=10] bench/compile_latency.sh [nmsparse binary...]   (default: this checkout's)
# The in-process figure (a program compiled again in the same process) is the criterion
# bench `cargo bench --bench compile`.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-10}
if [ $# -eq 0 ]; then
  cargo build -q --release --bin nmsparse
  set -- ./target/release/nmsparse
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
compile_ms() { # binary, cache dir, extra arguments...
  local bin=$1 dir=$2
  shift 2
  NMSPARSE_CACHE_DIR=$dir "$bin" "C(i,j) = A(i,k) * B(k,j)" -f=C:csr -f=A:csr -f=B:csr -d=i:500 -d=j:500 -d=k:500 \
    -g=A:s -g=B:s -s="reorder(k,j)" -time=1 "$@" | awk '/^Compile:/ {print $2}'
}
for mode in cold fused cached; do
  for ((r = 0; r < RUNS; r++)); do
    order=("$@")
    if ((r % 2 == 1)); then order=($(printf '%s\n' "$@" | tac)); fi
    for bin in "${order[@]}"; do
      key=$(echo "$bin" | md5sum | cut -c1-8)
      case $mode in
      cold) rm -rf "$tmp/$key" && compile_ms "$bin" "$tmp/$key" ;;
      fused) rm -rf "$tmp/$key" && compile_ms "$bin" "$tmp/$key" -c ;;
      cached)
        # Warmed by one compile the first time; every measured run is then a cache hit.
        [ -d "$tmp/$key-warm" ] || compile_ms "$bin" "$tmp/$key-warm" > /dev/null
        compile_ms "$bin" "$tmp/$key-warm" ;;
      esac >> "$tmp/$key.$mode"
    done
  done
  for bin in "$@"; do
    key=$(echo "$bin" | md5sum | cut -c1-8)
    sort -g "$tmp/$key.$mode" | awk -v m=$mode -v b="$bin" '{v[NR]=$1} END {printf "%-7s %-40s median %8.3f ms  (%.3f to %.3f, %d runs)\n", m, b, (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2), v[1], v[NR], NR}'
  done
done
