#!/usr/bin/env bash
# What one call of the device machine runs: the GPU tests, then the benchmarks, from a build
# folder made on the development machine (nvcc 13.0, sm_90a). Logs and JSON go to $OUT.
#   scripts/device/gpu_session.sh BUILD_DIR [tests|bench|compare|all] [extra bench args...]
set -uo pipefail
build=${1:-build-gpu}
what=${2:-all}
shift 2 || true
out=${OUT:?set OUT to the folder for the logs and JSON}
mkdir -p "$out"
rev=$(cat "$build/git_revision" 2>/dev/null || echo unknown)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
if [[ $what == tests || $what == all ]]; then
  timeout 300 "$build/tests/skipsoftmax_gpu_tests" --gtest_brief=1 2>&1 | tee "$out/gpu_tests.log" | tail -40
fi
if [[ $what == bench || $what == all ]]; then
  timeout 300 "$build/skipsoftmax_prefill_bench" --json "$out/prefill_bench.json" "$@" 2>&1 | tee "$out/prefill_bench.log"
fi
if [[ $what == compare || $what == all ]]; then
  PYTHONUNBUFFERED=1 timeout 400 python3 bench/compare_sdpa.py --lib "$build/libskipsoftmax_capi.so" \
    --git-revision "$rev" --json "$out/compare_sdpa.json" "$@" 2>&1 | tee "$out/compare_sdpa.log"
fi
