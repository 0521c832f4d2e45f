#!/usr/bin/env bash
# Issue 10's GPU checks in one go, for a session that is lent a GPU machine (the `device`
# tool): that machine has CUDA 13 (driver, PyTorch, nvcc) but no Rust toolchain and no network,
# so everything is built here and carried.
#
#   bench/gpu_session.sh prepare        # here: builds into .gpu/ (in .gitignore)
#   bench/gpu_session.sh run [tests|plan|bench|tune|bf16|all] [bench or tune arguments]
#                                       # there: device run with carry [".gpu"], results in $OUT
#                                       # (tests and bench fit one 10-minute call each)
#
# `prepare` builds the nm-cuda GPU test binary, the benchmark and the command line, strips
# them, and fills a CUBIN cache for sm_90 with every kernel variant (NVRTC 12 from the wheel
# .ci/run installs). `run` points cudarc at that machine's cuBLAS and NVRTC (CUDA 13 wheels
# under PyTorch's site-packages, reached through unversioned links, which cudarc's loader
# tries first; NVRTC compiles what the cache lacks), then runs: the GPU tests (exact against the CPU
# kernels), the same under compute-sanitizer, the `-device=cuda` commands, the benchmark, and
# the 2:4 kernel's peers through PyTorch (bench/cusparselt_peer.py: cuSPARSELt, CUTLASS).
# Every log lands in $OUT (7 files; 8 at most come back).
set -euo pipefail
cd "$(dirname "$0")/.."
here=.gpu

# The path of PACKAGE's test binary TEST, built in release (cargo prints it as an executable
# artifact).
test_binary() {
  cargo test -q --release -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$2"
}

prepare() {
  nvrtc_dir="${XDG_CACHE_HOME:-$HOME/.cache}/nmsparse/nvrtc-cu12.8.93"
  if [ ! -e "$nvrtc_dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$nvrtc_dir" \
      "nvidia-cuda-nvrtc-cu12==12.8.93"
  fi
  export LD_LIBRARY_PATH="$nvrtc_dir/nvidia/cuda_nvrtc/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  rm -rf "$here" && mkdir -p "$here/cubin"
  cargo build -q --release --bin nmsparse -p nmsparse
  cargo build -q --release -p nm-cuda --example bench --example tune
  cp "$(test_binary nm-cuda gpu)" "$here/gpu-test"
  # The C library's plan on device memory: its Rust test, and the C plan test linked
  # statically (that machine may have no C toolchain for it).
  cp "$(test_binary nmsparse-capi gpu_plan)" "$here/capi-gpu-plan"
  cargo build -q --release -p nmsparse-capi --lib
  cc -std=c99 -O1 -Iinclude capi/tests/c/plans.c target/release/libnmsparse.a \
    -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc -o "$here/c-plans"
  cp target/release/examples/bench target/release/examples/tune "$here/"
  cp target/release/nmsparse "$here/nmsparse"
  strip "$here/gpu-test" "$here/bench" "$here/tune" "$here/nmsparse" "$here/capi-gpu-plan" "$here/c-plans"
  cargo run -q --release -p nm-cuda --example precompile -- sm_90 "$here/cubin" tune
  du -sh "$here"
}

# The two -device=cuda commands (a plan of each kind, its creation timed apart from 20 runs).
commands() {
  {
    "$here/nmsparse" "C(i,j) = A(i,k) * B(k,j)" -f=B:"nm(2,8,32)" -d=i:4096 -d=j:4096 -d=k:4096 -type=f32 \
      -device=cuda -time=20 -print-compute
    "$here/nmsparse" "C(i,j) = A(i,k) * B(k,j)" -f=A:nv24 -d=i:4096 -d=j:4096 -d=k:4096 -type=f32 \
      -device=cuda -time=20 -print-compute
  } >"$out/command-line.txt" 2>&1
  echo "command line: exit $?" >>"$out/device.txt"
}

run() {
  out="${OUT:-$here/out}"
  mkdir -p "$out"
  export NMSPARSE_CUDA_CACHE="$PWD/$here/cubin"
  # cuBLAS and NVRTC 13 from the Python wheels, under the unversioned names cudarc tries
  # first (NVRTC for kernels the cache lacks: plans for shapes other than the precompiled ones).
  links=$(mktemp -d)
  for lib in cublas cublasLt nvrtc; do
    found=$(python3 - "$lib" <<'EOF' 2>/dev/null || true
import glob, os, site, sys
for d in site.getsitepackages():
    for f in sorted(glob.glob(os.path.join(d, "nvidia", "**", f"lib{sys.argv[1]}.so.*"), recursive=True)):
        print(f); raise SystemExit
EOF
)
    [ -n "$found" ] && ln -sf "$found" "$links/lib$lib.so" && ln -sf "$found" "$links/$(basename "$found")"
  done
  export LD_LIBRARY_PATH="$links${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  {
    if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; fi
    ls -l "$links"
  } >"$out/device.txt" 2>&1
  phase="${1:-all}"
  [ $# -gt 0 ] && shift
  set +e
  if [ "$phase" = bf16 ]; then
    # The bf16 tensor-core kernel alone, in one short call: its GPU test, the tuning sweep
    # (skipped with NMS_SKIP_TUNE=1; shapes NMS_TUNE_SHAPES, group widths NMS_TUNE_L, e.g.
    # 32,128), the benchmark on every shape (NMS_BENCH_TIMEOUT seconds, default 170; `--l 128`
    # among the arguments for wide groups), then the test on ragged shapes under
    # compute-sanitizer (skipped with NMS_SKIP_SANITIZER=1).
    timeout 150 "$here/gpu-test" --test-threads=1 --nocapture bf16 wrong_operands >"$out/gpu-tests.txt" 2>&1
    echo "gpu tests (bf16): exit $?" >>"$out/device.txt"
    if [ "${NMS_SKIP_TUNE:-0}" != 1 ]; then
      # shellcheck disable=SC2086
      timeout 150 "$here/tune" --only bf16 --l "${NMS_TUNE_L:-32}" --reps 20 \
        ${NMS_TUNE_SHAPES:-4096x4096x4096 1024x4096x4096 256x4096x4096} \
        >"$out/tune.csv" 2>"$out/tune-stderr.txt"
      echo "tune (bf16): exit $?" >>"$out/device.txt"
    fi
    timeout "${NMS_BENCH_TIMEOUT:-170}" "$here/bench" --tc-only --reps 20 "$@" >"$out/bench.csv" 2>"$out/bench-stderr.txt"
    echo "bench (bf16): exit $?" >>"$out/device.txt"
    if [ "${NMS_SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer >/dev/null; then
      NMSPARSE_GPU_RAGGED_ONLY=1 timeout 90 compute-sanitizer --error-exitcode 3 "$here/gpu-test" \
        --test-threads=1 bf16 >"$out/sanitizer.txt" 2>&1
      echo "compute-sanitizer (bf16, ragged shapes): exit $?" >>"$out/device.txt"
    fi
    cat "$out/device.txt"
    return
  fi
  if [ "$phase" = plan ]; then
    # Plans on the device: every GPU test (the one-shot products are plans made and run once),
    # the C library's plans on device memory and caller streams, the plan tests under
    # compute-sanitizer, and the command line's plan (creation timed apart from the runs);
    # NMS_GPU_TESTS names a subset of the GPU tests (a filter of the test binary's).
    # shellcheck disable=SC2086
    timeout 200 "$here/gpu-test" --test-threads=1 --nocapture ${NMS_GPU_TESTS:-} >"$out/gpu-tests.txt" 2>&1
    echo "gpu tests: exit $?" >>"$out/device.txt"
    {
      timeout 60 "$here/capi-gpu-plan" --nocapture
      echo "capi gpu plan: exit $?"
      timeout 60 "$here/c-plans"
      echo "c plans: exit $?"
    } >"$out/capi.txt" 2>&1
    tail -n 4 "$out/capi.txt" >>"$out/device.txt"
    if command -v compute-sanitizer >/dev/null; then
      timeout 150 compute-sanitizer --error-exitcode 3 "$here/gpu-test" --test-threads=1 plans \
        >"$out/sanitizer.txt" 2>&1
      echo "compute-sanitizer (plans): exit $?" >>"$out/device.txt"
      timeout 60 compute-sanitizer --error-exitcode 3 "$here/capi-gpu-plan" >>"$out/sanitizer.txt" 2>&1
      echo "compute-sanitizer (C library plans): exit $?" >>"$out/device.txt"
    fi
    commands
    if [ $# -gt 0 ]; then
      # The plan's costs (`--plan`), then the kernels alone on the same shapes.
      timeout 200 "$here/bench" --plan "$@" >"$out/bench.csv" 2>"$out/bench-stderr.txt"
      echo "bench --plan: exit $?" >>"$out/device.txt"
      timeout 200 "$here/bench" "$@" >>"$out/bench.csv" 2>>"$out/bench-stderr.txt"
      echo "bench: exit $?" >>"$out/device.txt"
    fi
    cat "$out/device.txt"
    return
  fi
  if [ "$phase" = tune ]; then
    timeout 500 "$here/tune" "$@" >"$out/tune.csv" 2>"$out/tune-stderr.txt"
    echo "tune: exit $?" >>"$out/device.txt"
    cat "$out/device.txt"
    return
  fi
  if [ "$phase" != bench ]; then
    timeout 300 "$here/gpu-test" --test-threads=1 --nocapture >"$out/gpu-tests.txt" 2>&1
    echo "gpu tests: exit $?" >>"$out/device.txt"
    if command -v compute-sanitizer >/dev/null; then
      timeout 180 compute-sanitizer --error-exitcode 3 "$here/gpu-test" --test-threads=1 \
        nv24 bf16 split_k_is_deterministic >"$out/sanitizer.txt" 2>&1
      echo "compute-sanitizer: exit $?" >>"$out/device.txt"
    fi
    commands
  fi
  if [ "$phase" != tests ]; then
    timeout 400 "$here/bench" "$@" >"$out/bench.csv" 2>"$out/bench-stderr.txt"
    echo "bench: exit $?" >>"$out/device.txt"
    # The 2:4 kernel's peers (cuSPARSELt, CUTLASS, dense cuBLAS through PyTorch), same shapes.
    timeout 150 python3 bench/cusparselt_peer.py "$@" >"$out/cusparselt.csv" 2>&1
    echo "cuSPARSELt peers: exit $?" >>"$out/device.txt"
  fi
  cat "$out/device.txt"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare | run [tests|plan|bench|tune|bf16|all] [bench or tune arguments]" >&2; exit 2 ;;
esac
